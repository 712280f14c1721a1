//! Reports and checks on real traces recorded by the tracer (tests/data, see its README).

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use analyzer::check::{Rules, check, default_rules};
use analyzer::series::Options;
use analyzer::summary::{JsonReport, summarize};
use common::golden;

/// The report of golden trace `name`.
fn report(name: &str) -> JsonReport {
    common::report(&golden(name))
}

#[test]
fn golden_traces_report_what_the_workload_did() {
    for name in [
        "cassandra-shaped-a.blkp",
        "cassandra-shaped-b.blkp",
        "cassandra-shaped-bigger-writes.blkp",
    ] {
        let j = report(name);
        assert!(j.complete, "{name}");
        let d = &j.devices[0];
        assert_eq!(d.ops["read"].block_sizes[0].class, "4KB", "{name}");
        assert_eq!(d.ops["read"].block_sizes[0].pct_ios, 100.0, "{name}");
        assert_eq!(d.ops["discard"].block_sizes[0].class, "2MB", "{name}");
        assert_eq!(d.ops["discard"].ios, 32, "{name}: 4 rounds of 8 trims");
        // The kernel's own counters agree, up to what the tracer reported missing.
        let c = d.coverage.as_ref().unwrap();
        let reported = j.lost.missed_completions + j.lost.recursion_misses + j.lost.untracked;
        for g in &c.groups {
            assert_eq!(g.unaccounted(reported), 0, "{name}: {g:?}");
        }
        assert_eq!(j.lost.unaccounted, 0, "{name}");
        assert!(j.lost.total <= 10, "{name}: {:?}", j.lost);
        // Write bursts: the fio job writes 200 blocks, then thinks for 2 s.
        assert!(
            (3..=5).contains(&d.bursts.len()),
            "{name}: {} bursts",
            d.bursts.len()
        );
        assert!(
            d.reads_during_bursts.inside_p99_us > 5.0 * d.reads_during_bursts.outside_p99_us,
            "{name}: {:?}",
            d.reads_during_bursts
        );
    }
    let a = report("cassandra-shaped-a.blkp");
    assert_eq!(a.devices[0].ops["write"].block_sizes[0].class, "512KB");
    let big = report("cassandra-shaped-bigger-writes.blkp");
    let w = &big.devices[0].ops["write"];
    // fio's 1 MB writes reach this loop device partly split into 512 KB requests.
    assert!(
        w.block_sizes.iter().any(|z| z.class == "1MB" && z.ios > 0),
        "{:?}",
        w.block_sizes.iter().map(|z| &z.class).collect::<Vec<_>>()
    );
    assert!(w.bytes / w.ios > 600 << 10);
}

#[test]
fn check_passes_a_second_recording_and_fails_bigger_writes() {
    let base: JsonReport =
        serde_json::from_str(&serde_json::to_string(&report("cassandra-shaped-a.blkp")).unwrap())
            .unwrap();
    let rules = Rules {
        device: None,
        rules: default_rules(),
    };
    let again = check(
        &report("cassandra-shaped-b.blkp"),
        Some(&base),
        &rules,
        false,
    )
    .unwrap();
    assert!(
        again.iter().all(|v| v.pass),
        "{:#?}",
        again.iter().filter(|v| !v.pass).collect::<Vec<_>>()
    );
    let bigger = check(
        &report("cassandra-shaped-bigger-writes.blkp"),
        Some(&base),
        &rules,
        false,
    )
    .unwrap();
    let failed: Vec<&str> = bigger
        .iter()
        .filter(|v| !v.pass)
        .map(|v| v.rule.metric.as_str())
        .collect();
    // The byte share moved too (77% to 87%), but with 831 writes of 512 KB and 32 trims of
    // 2 MB that is within its sampling noise; the sizes say it.
    for m in ["write.mean_request_bytes", "write.size_mix_distance"] {
        assert!(failed.contains(&m), "{m} should fail: {failed:?}");
    }
}

#[test]
fn iolog_export_of_a_golden_trace_has_every_io() {
    let mut out = Vec::new();
    let st = analyzer::export::export(
        &golden("cassandra-shaped-a.blkp"),
        analyzer::export::Format::Iolog,
        None,
        Some("/dev/sdx"),
        &mut out,
    )
    .unwrap();
    let j = report("cassandra-shaped-a.blkp");
    let d = &j.devices[0];
    assert_eq!(
        st.written,
        d.ops["read"].ios + d.ops["write"].ios + d.ops["discard"].ios
    );
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains(" read ")).count() as u64,
        d.ops["read"].ios
    );
    // Version 2: the same IOs, no timestamps.
    let mut out2 = Vec::new();
    let st2 = analyzer::export::export(
        &golden("cassandra-shaped-a.blkp"),
        analyzer::export::Format::Iolog2,
        None,
        Some("/dev/sdx"),
        &mut out2,
    )
    .unwrap();
    assert_eq!(st2.written, st.written);
    let text2 = String::from_utf8(out2).unwrap();
    assert_eq!(text2.lines().next(), Some("fio version 2 iolog"));
    assert!(text2.lines().skip(1).all(|l| l.starts_with("/dev/sdx ")));
}

/// The real Cassandra run (tests/data/cassandra-ycsb-a.*): trace, Cassandra's log, YCSB output.
fn cassandra(opts: &Options) -> JsonReport {
    let mut s = summarize(&golden("cassandra-ycsb-a.blkp"), opts).unwrap();
    s.context
        .logs
        .push(analyzer::stress::read_app_log(&golden("cassandra-ycsb-a.system.log")).unwrap());
    for f in [
        "cassandra-ycsb-a.ycsb-run.txt",
        "cassandra-ycsb-a.ycsb-run.err",
    ] {
        s.context
            .stress
            .push(analyzer::stress::read_stress(&golden(f)).unwrap());
    }
    s.to_json()
}

#[test]
fn real_cassandra_flushes_are_the_write_bursts() {
    let j = cassandra(&Options::default());
    assert!(j.complete);
    let (_, m) = &j.flush_match[0];
    // Every memtable flush of ycsb.usertable in the traced minute shows as a burst...
    assert_eq!(m.flushes, 11, "{m:?}");
    assert_eq!(m.flushes_matched, 11);
    // ...and of the 12 bursts, the one that matches no flush is a compaction, by the log and
    // by who wrote it.
    assert_eq!((m.bursts, m.bursts_matched), (12, 11));
    assert!(m.precision >= 0.9 && m.recall >= 0.9, "{m:?}");
    assert_eq!(m.unmatched_in_compactions, 1);
    let other: Vec<_> = m
        .burst_rows
        .iter()
        .filter(|b| b.matched != "flush")
        .collect();
    assert_eq!(other.len(), 1);
    assert!(other[0].writers.starts_with("CompactionExecu"), "{other:?}");
    // Bursts whose main writer is the flush writer all match a flush.
    for b in m
        .burst_rows
        .iter()
        .filter(|b| b.writers.starts_with("MemtableFlushWr"))
    {
        assert_eq!(b.matched, "flush", "{b:?}");
    }

    // Every compaction of the traced minute is followed by discards (ext4 mounted with
    // discard, SSTables deleted after "Compacted").
    let (_, c) = &j.compaction_discards[0];
    assert_eq!((c.compactions, c.followed_by_discards), (3, 3), "{c:?}");
    assert!(c.discards >= 30 && c.discard_bytes > 100 << 20, "{c:?}");

    // Counting only the flush writer's IOs finds exactly the flushes.
    let j = cassandra(&Options {
        burst_comms: vec!["MemtableFlushWr".into()],
        ..Options::default()
    });
    let (_, m) = &j.flush_match[0];
    assert_eq!((m.precision, m.recall), (1.0, 1.0), "{m:?}");

    // Reads split into inside and outside bursts add up; every IO is accounted for.
    let d = &j.devices[0];
    let r = &d.reads_during_bursts;
    assert_eq!(r.inside_ios + r.outside_ios, d.ops["read"].ios);
    let reported = j.lost.missed_completions + j.lost.recursion_misses + j.lost.untracked;
    for g in &d.coverage.as_ref().unwrap().groups {
        assert_eq!(g.unaccounted(reported), 0, "{g:?}");
    }
    // YCSB's status lines (one per second) all parse, on the trace's time axis.
    let status: usize = j.stress.iter().map(|s| s.status.len()).sum();
    let lines = std::fs::read_to_string(golden("cassandra-ycsb-a.ycsb-run.err"))
        .unwrap()
        .lines()
        .filter(|l| l.contains(" sec: "))
        .count();
    assert_eq!(status, lines);
}
