//! Synthetic traces with planted truth, written through the real trace writer: the report
//! must find exactly what was planted.

use analyzer::series::Options;
use analyzer::summary::summarize;
use analyzer::synth::{BASE_NS, Io, cassandra_like, write_trace};
use tracer_common::op::{Op, flags};

fn report(ios: &mut [Io]) -> analyzer::summary::Summary {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.blkp");
    write_trace(&p, ios).unwrap();
    summarize(&p, &Options::default()).unwrap()
}

#[test]
fn summary_numbers_equal_the_planted_truth() {
    let mut ios = cassandra_like(60, 2000, &[(10.0, 2.0, 1500.0), (30.0, 3.0, 2500.0)]);
    let (mut reads, mut writes, mut wbytes, mut discards, mut dbytes) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut w512 = 0u64;
    for io in &ios {
        match io.op {
            Op::Read => reads += 1,
            Op::Write => {
                writes += 1;
                wbytes += u64::from(io.bytes);
                w512 += u64::from(io.bytes == 512 << 10);
            }
            Op::Discard => {
                discards += 1;
                dbytes += u64::from(io.bytes);
            }
            _ => {}
        }
    }
    let s = report(&mut ios);
    let j = s.to_json();
    let d = &j.devices[0];
    assert_eq!(d.name, "nvme0n1");
    assert_eq!(d.ops["read"].ios, reads);
    assert_eq!(d.ops["read"].bytes, reads * 4096);
    assert_eq!(d.ops["write"].ios, writes);
    assert_eq!(d.ops["write"].bytes, wbytes);
    assert_eq!(d.ops["discard"].ios, discards);
    assert_eq!(d.ops["discard"].bytes, dbytes);
    assert_eq!(d.ops["flush"].ios, 0);
    // Block-size mix, stated the way people say it.
    assert_eq!(d.ops["read"].block_sizes[0].class, "4KB");
    assert_eq!(d.ops["read"].block_sizes[0].pct_ios, 100.0);
    let w = &d.ops["write"].block_sizes;
    let w512_pct = w.iter().find(|c| c.class == "512KB").unwrap().pct_ios;
    assert!((w512_pct - w512 as f64 * 100.0 / writes as f64).abs() < 1e-9);
    assert_eq!(d.ops["discard"].block_sizes[0].class, "> 2GB");
    let total_ios = (reads + writes + discards) as f64;
    assert!((d.ops["read"].pct_ios - reads as f64 * 100.0 / total_ios).abs() < 1e-9);
    let total_bytes = (reads * 4096 + wbytes + dbytes) as f64;
    assert!((d.ops["write"].pct_bytes - wbytes as f64 * 100.0 / total_bytes).abs() < 1e-9);
    // Coverage against the (planted) diskstats is complete.
    assert_eq!(j.lost.total, 0);
    assert!(j.complete);
}

#[test]
fn bursts_are_found_where_planted_and_nowhere_else() {
    let planted = [(10.0, 2.0, 1500.0), (30.0, 3.0, 2500.0), (45.0, 0.5, 800.0)];
    let mut ios = cassandra_like(60, 2000, &planted);
    let s = report(&mut ios);
    let d = s.devices.values().next().unwrap();
    assert_eq!(d.bursts.len(), planted.len(), "{:#?}", d.bursts);
    for (b, &(start, dur, mbps)) in d.bursts.iter().zip(&planted) {
        assert!(
            (b.start_s - start).abs() <= 0.1,
            "start {} vs {start}",
            b.start_s
        );
        assert!(
            (b.duration_s - dur).abs() <= 0.2,
            "duration {} vs {dur}",
            b.duration_s
        );
        assert!(
            (b.mean_mb_per_s / (mbps * 1.048576) - 1.0).abs() < 0.15,
            "rate {} vs {mbps}",
            b.mean_mb_per_s
        );
        assert_eq!(b.dominant_write_size, "512KB");
        assert_eq!(
            b.discards_after, 1,
            "the planted discard follows each burst"
        );
        assert!((b.first_discard_after_s.unwrap() - 2.05).abs() < 0.2);
        assert!(
            b.read_p99_us > 7_000.0,
            "reads inside a burst are slow: {}",
            b.read_p99_us
        );
    }
    let r = &d.read_impact;
    assert_eq!(
        r.inside_ios + r.outside_ios,
        d.ops["read"].ios,
        "every read is inside or outside"
    );
    let planted_inside = ios
        .iter()
        .filter(|io| {
            io.op == Op::Read
                && planted.iter().any(|&(b, dur, _)| {
                    let t = (io.complete_ns - BASE_NS) as f64 / 1e9;
                    t >= b && t < b + dur
                })
        })
        .count() as u64;
    assert!(
        r.inside_ios.abs_diff(planted_inside) * 20 <= planted_inside,
        "inside {} vs planted {planted_inside}",
        r.inside_ios
    );
    assert!(
        r.inside_p99_us > 7_000.0 && r.outside_p99_us < 200.0,
        "{r:?}"
    );
    // Time-weighted: ~2000 reads/s x 10 ms plus ~2900 writes/s x 3 ms inside; ~0.2 outside.
    assert!(
        r.inside_queue_depth_mean > 20.0 && r.outside_queue_depth_mean < 1.0,
        "{r:?}"
    );
    // RFC 3339 wall-clock times for scripts.
    let j = s.to_json();
    assert!(j.devices[0].bursts[0].start.ends_with('Z'));
}

#[test]
fn a_steady_workload_has_no_bursts_or_spikes() {
    let mut ios = cassandra_like(30, 3000, &[]);
    let s = report(&mut ios);
    let d = s.devices.values().next().unwrap();
    assert!(d.bursts.is_empty(), "{:#?}", d.bursts);
    assert!(d.spikes.is_empty(), "{:#?}", d.spikes);
}

#[test]
fn queue_depth_spikes_are_found_where_planted() {
    // Steady 4 KB reads at depth ~1, plus two planted spikes: 300 requests queued for 400 ms.
    let mut ios = cassandra_like(20, 1000, &[]);
    for &(at, n) in &[(5.0f64, 300u64), (12.0, 500)] {
        for i in 0..n {
            let enter = BASE_NS + (at * 1e9) as u64 + i * 1000;
            ios.push(Io {
                enter_ns: enter,
                issue_ns: enter + 1000,
                complete_ns: enter + 400_000_000,
                op: Op::Read,
                bytes: 4096,
                sector: i * 8,
                os_inflight: (i + 1) as u32,
                flags: flags::SYNC,
            });
        }
    }
    let s = report(&mut ios);
    let d = s.devices.values().next().unwrap();
    assert_eq!(d.spikes.len(), 2, "{:#?}", d.spikes);
    assert!((d.spikes[0].start_s - 5.0).abs() <= 0.1 && (d.spikes[1].start_s - 12.0).abs() <= 0.1);
    assert!(
        (d.spikes[0].duration_s - 0.4).abs() <= 0.15,
        "{}",
        d.spikes[0].duration_s
    );
    assert_eq!(d.spikes[0].peak_inflight, 300);
    assert_eq!(d.spikes[1].peak_inflight, 500);
    assert!(d.spikes[1].peak_mean_depth > 400.0);
    assert!(d.bursts.is_empty());
}

#[test]
fn a_truncated_trace_reports_what_is_intact() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.blkp");
    let mut ios = cassandra_like(20, 5000, &[]);
    write_trace(&p, &mut ios).unwrap();
    let len = std::fs::metadata(&p).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(len * 2 / 3).unwrap();
    let s = summarize(&p, &Options::default()).unwrap();
    assert!(s.records > 0 && s.records < ios.len() as u64);
    assert!(!s.to_json().complete);
    let mut out = Vec::new();
    analyzer::text::write(&mut out, &s.to_json()).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("truncated after +"), "{text}");
    assert!(text.contains("no trailer after"), "{text}");
}

#[test]
fn hostile_strings_are_escaped_in_html() {
    use tracer_common::format::{IoRecord, TraceHeader, TraceTrailer, TraceWriter, comm_bytes};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.blkp");
    let header = TraceHeader {
        host: "<script>alert(1)</script>".into(),
        monotonic_base_ns: BASE_NS,
        ..Default::default()
    };
    let mut w = TraceWriter::create(&p, &header).unwrap();
    for i in 0..100u64 {
        let t = BASE_NS + i * 1_000_000;
        let r = IoRecord {
            complete_ns: t + 50_000,
            enter_ns: t,
            issue_ns: t + 1000,
            bytes: 4096,
            pid: 7,
            dev: analyzer::synth::DEV,
            op: Op::Read,
            ..Default::default()
        };
        w.push(&r, &comm_bytes("<img src=x onerror=alert(1)>"))
            .unwrap();
    }
    w.finish(&TraceTrailer::default()).unwrap();
    let s = summarize(&p, &Options::default()).unwrap();
    let html = analyzer::html::render(&s.to_json());
    assert!(
        html.contains("&lt;img src=x oner"),
        "the comm is shown, escaped"
    );
    assert!(!html.contains("<img"), "no markup from the trace");
    assert!(!html.contains("<script>"), "no markup from the trace");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn compare_flags_a_changed_workload_and_not_an_unchanged_one() {
    let dir = tempfile::tempdir().unwrap();
    let mk = |name: &str, ios: &mut Vec<Io>| {
        let p = dir.path().join(name);
        write_trace(&p, ios).unwrap();
        summarize(&p, &Options::default()).unwrap().to_json()
    };
    let a = mk(
        "a.blkp",
        &mut cassandra_like(40, 2000, &[(10.0, 2.0, 1500.0)]),
    );
    let a2 = mk(
        "a2.blkp",
        &mut cassandra_like(40, 2000, &[(10.0, 2.0, 1500.0)]),
    );
    let same = mk(
        "same.blkp",
        &mut cassandra_like(40, 2000, &[(10.0, 2.0, 1500.0)]),
    );
    // Bigger flushes and twice the reads.
    let b = mk(
        "b.blkp",
        &mut cassandra_like(40, 4000, &[(10.0, 2.0, 1500.0), (25.0, 4.0, 3000.0)]),
    );
    let c = analyzer::compare::compare(&[a2, same], None).unwrap();
    assert!(
        c.rows.iter().all(|r| !r.flagged),
        "{:?}",
        c.rows.iter().filter(|r| r.flagged).collect::<Vec<_>>()
    );
    let c = analyzer::compare::compare(&[a, b], None).unwrap();
    let flagged: Vec<&str> = c
        .rows
        .iter()
        .filter(|r| r.flagged)
        .map(|r| r.metric.as_str())
        .collect();
    for m in ["read IOs", "write bytes", "write bursts"] {
        assert!(flagged.contains(&m), "{m} not flagged: {flagged:?}");
    }
    let mut out = Vec::new();
    analyzer::compare::write_text(&mut out, &c).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("! read IOs") && text.contains("(+100%)"),
        "{text}"
    );
}

#[test]
fn check_fails_a_changed_workload_and_passes_a_second_recording() {
    use analyzer::check::{Rules, check, default_rules};
    let dir = tempfile::tempdir().unwrap();
    let mk = |name: &str, ios: &mut Vec<Io>| {
        let p = dir.path().join(name);
        write_trace(&p, ios).unwrap();
        summarize(&p, &Options::default()).unwrap().to_json()
    };
    let base = mk(
        "base.blkp",
        &mut cassandra_like(60, 2000, &[(10.0, 2.0, 1500.0), (40.0, 2.0, 1500.0)]),
    );
    // A second recording of the same workload: a little longer, bursts a little later.
    let again = mk(
        "again.blkp",
        &mut cassandra_like(62, 2000, &[(11.0, 2.0, 1500.0), (41.0, 2.0, 1500.0)]),
    );
    // A changed workload: twice the flush volume and a higher read share.
    let changed = mk(
        "changed.blkp",
        &mut cassandra_like(60, 3000, &[(10.0, 2.0, 3000.0), (40.0, 2.0, 3000.0)]),
    );
    // Round-trip the baseline through JSON, as CI would.
    let base: analyzer::summary::JsonReport =
        serde_json::from_str(&serde_json::to_string(&base).unwrap()).unwrap();
    let rules = Rules {
        device: None,
        rules: default_rules(),
    };
    let v = check(&again, Some(&base), &rules, false).unwrap();
    assert!(
        v.iter().all(|v| v.pass),
        "{:#?}",
        v.iter().filter(|v| !v.pass).collect::<Vec<_>>()
    );
    let v = check(&changed, Some(&base), &rules, false).unwrap();
    let failed: Vec<_> = v.iter().filter(|v| !v.pass).collect();
    // Twice the flush volume: the write size mix and mean size moved (the commit log's 4 KB
    // writes are 12% of writes instead of 21%).
    assert!(
        failed
            .iter()
            .any(|v| v.rule.metric == "write.mean_request_bytes"
                && v.reason.contains("from the baseline")),
        "{failed:#?}"
    );
    assert!(
        failed
            .iter()
            .any(|v| v.rule.metric == "write.size_mix_distance"),
        "{failed:#?}"
    );
    let xml = analyzer::check::junit(&v, "changed");
    assert!(xml.contains("<failure message=") && xml.contains("tests=\"12\""));
    // Explicit rules, no baseline.
    let rules: Rules = serde_json::from_str(r#"{"rules": [{"metric": "read.latency_p99_us", "max": 5000}, {"metric": "queue_depth_max", "max": 256}, {"metric": "lost.total", "max": 0}]}"#).unwrap();
    let v = check(&again, None, &rules, false).unwrap();
    assert!(
        !v[0].pass && v[0].reason.contains("above the maximum 5000"),
        "read p99 of ~12 ms inside bursts: {:?}",
        v[0]
    );
    assert!(v[1].pass && v[2].pass);
    let bad: Rules =
        serde_json::from_str(r#"{"rules": [{"metric": "read.nonsense", "max": 1}]}"#).unwrap();
    assert!(
        check(&again, None, &bad, false)
            .unwrap_err()
            .contains("unknown metric")
    );
}

#[test]
fn the_access_pattern_section_counts_sequential_and_random_io_as_planted() {
    // Reads: two interleaved sequential streams of 300 IOs of 8 KB each, each pair of a
    // stream's IOs completing in swapped order (a queue depth of 2: 1, 0, 3, 2, ...), and 400
    // random 4 KB reads far apart; writes: 100 random 64 KB writes. Sequential: every stream
    // IO but the first two of each (IO 1 comes first and continues nothing, IO 0 starts before
    // it), so 596 of 1,000 reads; no write.
    let mut ios = Vec::new();
    let mut t = BASE_NS + 1_000_000;
    let io = |t: u64, op: Op, bytes: u32, sector: u64| Io {
        enter_ns: t - 20_000,
        issue_ns: t - 10_000,
        complete_ns: t,
        op,
        bytes,
        sector,
        os_inflight: 1,
        flags: 0,
    };
    for i in 0..300u64 {
        for base in [1u64 << 20, 1 << 30] {
            t += 10_000;
            ios.push(io(t, Op::Read, 8192, base + (i ^ 1) * 16));
        }
    }
    for i in 0..400u64 {
        t += 10_000;
        ios.push(io(
            t,
            Op::Read,
            4096,
            (i * 7_919_993) % (1 << 28) * 8 + (1 << 32),
        ));
    }
    for i in 0..100u64 {
        t += 10_000;
        ios.push(io(
            t,
            Op::Write,
            65536,
            (i * 104_729) % (1 << 20) * 1024 + (1 << 34),
        ));
    }
    let j = report(&mut ios).to_json();
    let a = &j.sections["access_pattern"];
    let dev = &a["devices"][0];
    assert_eq!(dev["name"], "nvme0n1");
    let read = &dev["ops"][0];
    assert_eq!(
        (read["op"].as_str(), read["ios"].as_u64()),
        (Some("read"), Some(1000))
    );
    assert_eq!(read["sequential_ios"].as_u64(), Some(596), "{a:#}");
    let write = &dev["ops"][1];
    assert_eq!(write["sequential_ios"].as_u64(), Some(0), "{a:#}");
    assert_eq!(write["ios"].as_u64(), Some(100));
    // Shown in the text and HTML reports, from the model.
    let mut out = Vec::new();
    analyzer::text::write(&mut out, &j).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("nvme0n1      read 59.6% sequential"),
        "{text}"
    );
    assert!(analyzer::html::render(&j).contains("<h3>Access pattern</h3>"));
}
