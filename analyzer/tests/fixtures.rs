//! The real fixtures in ../shared/fixtures parse completely.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use std::path::Path;

use analyzer::stress::{read_app_log, read_stress};
use common::fixture;

fn lines_matching(p: &Path, f: impl Fn(&str) -> bool) -> usize {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| f(l))
        .count()
}

#[test]
fn every_ycsb_status_and_summary_line_parses() {
    for name in [
        "ycsb/cassandra5-workloada-run.stderr",
        "ycsb/cassandra5-workloada-load.stderr",
        "ycsb/pkb-ycsb-time-series.dat",
    ] {
        let p = fixture(name);
        let run = read_stress(&p).unwrap();
        let status_lines =
            lines_matching(&p, |l| l.contains(" sec: ") && l.contains(" operations"));
        assert!(status_lines > 0, "{name}");
        assert_eq!(run.status.len(), status_lines, "{name}: every status line");
        assert!(
            run.status.iter().all(|s| s.time_ns.is_some()),
            "{name}: timestamps"
        );
    }
    let run = read_stress(&fixture("ycsb/cassandra5-workloada-run.stderr")).unwrap();
    let s = &run.status[1];
    assert_eq!((s.elapsed_s, s.operations), (5, 2825));
    assert_eq!(
        s.latencies.iter().find(|l| l.op == "READ").unwrap().p99_us,
        Some(49023.0)
    );
    assert_eq!(
        run.status.iter().map(|s| s.latencies.len()).max(),
        Some(3),
        "READ, UPDATE and the final CLEANUP"
    );
    assert_eq!(
        tracer_common::format::rfc3339(run.status[1].time_ns.unwrap()),
        "2026-11-22T02:45:18.771Z"
    );

    for name in [
        "ycsb/cassandra5-workloada-run.stdout",
        "ycsb/cassandra5-workloada-load.stdout",
        "ycsb/pkb-ycsb-time-series.dat",
    ] {
        let p = fixture(name);
        let run = read_stress(&p).unwrap();
        let summary_lines = lines_matching(&p, |l| l.starts_with('[') && l.contains("], "));
        let parsed: usize = run
            .summary
            .values()
            .map(std::collections::BTreeMap::len)
            .sum::<usize>()
            + run.time_series.values().map(Vec::len).sum::<usize>();
        assert_eq!(parsed, summary_lines, "{name}: every summary line");
    }
    let run = read_stress(&fixture("ycsb/cassandra5-workloada-run.stdout")).unwrap();
    assert_eq!(
        run.summary["OVERALL"]["Throughput(ops/sec)"],
        2_639.598_569_541_544_3
    );
    assert_eq!(run.summary["READ"]["99thPercentileLatency(us)"], 24703.0);
    assert_eq!(run.summary["UPDATE"]["Operations"], 81963.0);
    let pkb = read_stress(&fixture("ycsb/pkb-ycsb-time-series.dat")).unwrap();
    assert_eq!(pkb.time_series["READ"][1], (1000, 25_891.854_741_896_757));
}

#[test]
fn every_completed_flush_of_the_cassandra_log_is_a_marker_at_its_exact_time() {
    let p = fixture("cassandra/system-load-and-run.log");
    let log = read_app_log(&p).unwrap();
    let completed = lines_matching(&p, |l| l.contains("Completed flushing"));
    let markers: Vec<_> = log
        .markers
        .iter()
        .filter(|m| m.kind == "flush-completed")
        .collect();
    assert_eq!(markers.len(), completed);
    assert_eq!(completed, 97);
    // Exact times, from the log's own stamps.
    let text = std::fs::read_to_string(&p).unwrap();
    for (m, line) in markers
        .iter()
        .zip(text.lines().filter(|l| l.contains("Completed flushing")))
    {
        let stamp = &line[line.find("] ").unwrap() + 2..][..23];
        let want = format!("{}T{}.{}Z", &stamp[..10], &stamp[11..19], &stamp[20..23]);
        assert_eq!(m.time, want);
    }
    assert_eq!(
        log.markers
            .iter()
            .filter(|m| m.kind == "flush-enqueued")
            .count(),
        97
    );
    assert_eq!(
        log.markers
            .iter()
            .filter(|m| m.kind == "compaction-completed")
            .count(),
        16
    );
    assert_eq!(
        log.markers
            .iter()
            .filter(|m| m.kind == "sstable-deleted")
            .count(),
        94
    );
    // Every enqueued flush is paired with its completion.
    assert_eq!(log.flushes.len(), 97);
    let user: Vec<_> = log
        .flushes
        .iter()
        .filter(|f| f.table == "ycsb.usertable")
        .collect();
    assert_eq!(user.len(), 68);
    assert!(
        user.iter()
            .all(|f| f.end_ns >= f.start_ns && f.bytes.unwrap() > 0)
    );
}

#[test]
fn msr_cambridge_csv_imports_completely_and_broken_copies_fail_clearly() {
    use analyzer::import::import_msr;
    let src = fixture("msr/msr-cambridge-hm0-head.csv");
    let lines = std::fs::read_to_string(&src)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hm0.blkp");
    let st = import_msr(&src, &out, false).unwrap();
    assert_eq!((st.records, st.skipped), (lines, 0));
    let s = analyzer::summary::summarize(&out, &analyzer::series::Options::default()).unwrap();
    let j = s.to_json();
    assert_eq!(j.devices[0].name, "hm_0");
    let (r, w) = (&j.devices[0].ops.get("read"), &j.devices[0].ops["write"]);
    let text = std::fs::read_to_string(&src).unwrap();
    let want_w = text.lines().filter(|l| l.contains(",Write,")).count() as u64;
    let want_wb: u64 = text
        .lines()
        .filter(|l| l.contains(",Write,"))
        .map(|l| l.split(',').nth(5).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!((w.ios, w.bytes), (want_w, want_wb));
    assert_eq!(r.map_or(0, |o| o.ios), lines - want_w);
    // First line: 2048 bytes at offset 9056014336, response 2833 ticks = 283.3 us.
    assert!(w.total_latency_us.max >= 283.0);
    assert!(
        j.start.starts_with("2007-02-22"),
        "FILETIME converted: {}",
        j.start
    );

    // Hand-broken copies fail with file, line and what was expected.
    let broken = dir.path().join("broken.csv");
    let mut b: Vec<String> = text.lines().map(str::to_string).collect();
    b[4] = "128166385295514663,hm,0,Erase,9056014336,2048,2833".into();
    b[9] = "128166385295514663,hm,0,Write,9056014336".into();
    std::fs::write(&broken, b.join("\n")).unwrap();
    let e = import_msr(&broken, &dir.path().join("x.blkp"), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("broken.csv:5:") && e.contains("neither Read nor Write"),
        "{e}"
    );
    let st = import_msr(&broken, &dir.path().join("y.blkp"), true).unwrap();
    assert_eq!((st.records, st.skipped), (lines - 2, 2));
    assert!(st.first_skipped.unwrap().starts_with("line 5"));
}

/// Real cassandra-stress output (tests/data, see its README): every interval line and the
/// Results block parse.
#[test]
fn every_cassandra_stress_interval_and_result_line_parses() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    for (name, ops, rate, secs) in [
        (
            "cassandra-stress-mixed.txt",
            &["READ", "WRITE", "TOTAL"][..],
            4191.0,
            30.0,
        ),
        // A run of one op prints only "total" lines.
        ("cassandra-stress-write.txt", &["TOTAL"][..], 2491.0, 8.0),
    ] {
        let p = data.join(name);
        let r = read_stress(&p).unwrap();
        assert_eq!(r.tool, "cassandra-stress", "{name}");
        // One status point per "total," interval line, with each op's line in it.
        let totals = lines_matching(&p, |l| l.starts_with("total,"));
        assert_eq!(r.status.len(), totals, "{name}");
        for s in &r.status {
            let got: Vec<&str> = s.latencies.iter().map(|l| l.op.as_str()).collect();
            assert_eq!(got, ops, "{name} at {} s", s.elapsed_s);
            assert!(
                s.latencies
                    .iter()
                    .all(|l| l.p99_us.is_some() && l.max_us.is_some())
            );
        }
        let last = r.status.last().unwrap();
        assert_eq!(
            last.elapsed_s as f64, secs,
            "{name}: whole seconds of the last interval"
        );
        let o = &r.summary["OVERALL"];
        assert_eq!(o["Op rate (op/s)"], rate, "{name}");
        assert_eq!(o["Total operation time"], secs, "{name}");
        assert_eq!(o["Total errors"], 0.0, "{name}");
        assert!(o["Latency 99th percentile (ms)"] > 0.0);
        assert!(!o.contains_key("Avg GC time (ms)"), "NaN is no value");
    }
}
