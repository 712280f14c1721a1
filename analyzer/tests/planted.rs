//! Synthetic traces with planted truth, written through the real trace writer: the report
//! must find exactly what was planted.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use analyzer::numeric::{f64_to_u64_saturating, f64_to_usize_saturating};
use analyzer::series::Options;
use analyzer::summary::summarize;
use analyzer::synth::{BASE_NS, Io, cassandra_like, cassandra_like_seeded, write_trace};
use common::trace;
use tracer_common::op::{Op, flags};

/// The summary of `ios` written as a trace.
fn report(ios: &mut [Io]) -> analyzer::summary::Summary {
    let dir = tempfile::tempdir().unwrap();
    common::summary(&trace(dir.path(), "t.blkp", ios))
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
            (b.mean_mb_per_s / (mbps * 1.048_576) - 1.0).abs() < 0.15,
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
            let enter = BASE_NS + f64_to_u64_saturating(at * 1e9) + i * 1000;
            ios.push(Io {
                enter_ns: enter,
                issue_ns: enter + 1000,
                complete_ns: enter + 400_000_000,
                op: Op::Read,
                bytes: 4096,
                sector: i * 8,
                os_inflight: u32::try_from(i + 1).unwrap(),
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
    let mk = |name: &str, ios: &mut Vec<Io>| common::report(&trace(dir.path(), name, ios));
    let a = mk(
        "a.blkp",
        &mut cassandra_like(40, 2000, &[(10.0, 2.0, 1500.0)]),
    );
    // A second recording of the same workload: the same IOs at the same rates, their times,
    // latencies and sectors drawn anew.
    let again = mk(
        "again.blkp",
        &mut cassandra_like_seeded(0x0bad_cafe, 40, 2000, &[(10.0, 2.0, 1500.0)]),
    );
    let read_latency = |j: &analyzer::summary::JsonReport| {
        serde_json::to_value(&j.devices[0].ops["read"].device_latency_us).unwrap()
    };
    assert_ne!(
        read_latency(&a),
        read_latency(&again),
        "the recordings differ"
    );
    // Bigger flushes and twice the reads.
    let b = mk(
        "b.blkp",
        &mut cassandra_like(40, 4000, &[(10.0, 2.0, 1500.0), (25.0, 4.0, 3000.0)]),
    );
    let c = analyzer::compare::compare(&[a, again], None).unwrap();
    assert!(
        c.rows.iter().all(|r| !r.flagged),
        "{:?}",
        c.rows.iter().filter(|r| r.flagged).collect::<Vec<_>>()
    );
    let a = mk(
        "a.blkp",
        &mut cassandra_like(40, 2000, &[(10.0, 2.0, 1500.0)]),
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
    let mk = |name: &str, ios: &mut Vec<Io>| common::report(&trace(dir.path(), name, ios));
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

/// An IO at depth one: queued `q2d_ns`, at the device `d2c_ns`.
fn planted(enter_ns: u64, q2d_ns: u64, d2c_ns: u64, op: Op, bytes: u32, sector: u64) -> Io {
    Io {
        enter_ns,
        issue_ns: enter_ns + q2d_ns,
        complete_ns: enter_ns + q2d_ns + d2c_ns,
        op,
        bytes,
        sector,
        os_inflight: 1,
        flags: 0,
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-9)
}

#[test]
fn the_phase_table_finds_the_planted_latencies_seeks_and_idle_time() {
    // Reads: 50 pairs of 4 KB IOs 2 ms apart, the second submitted 1 us after the first and
    // completing before it (D2C 100 us against 200 us); queued 10 us each. In submission order
    // they are one sequential stream from sector 0 (99 seeks of 0); in completion order every
    // seek would be 16 sectors. Active per pair: 210 us.
    let mut ios = Vec::new();
    for p in 0..50u64 {
        let t = BASE_NS + p * 2_000_000;
        ios.push(planted(t, 10_000, 200_000, Op::Read, 4096, p * 16));
        ios.push(planted(
            t + 1_000,
            10_000,
            100_000,
            Op::Read,
            4096,
            p * 16 + 8,
        ));
    }
    // Writes from 100 ms: 200 of 4 KB, 1 ms apart, queued 20 us, 50 us at the device,
    // alternating between sectors 1,000,000 and 1,001,000. Seeks: 999,200 from the last read
    // (which ended at sector 800), then 992 (100 times) and 1,008 (99 times).
    for j in 0..200u64 {
        let t = BASE_NS + 100_000_000 + j * 1_000_000;
        ios.push(planted(
            t,
            20_000,
            50_000,
            Op::Write,
            4096,
            1_000_000 + (j % 2) * 1_000,
        ));
    }
    let j = report(&mut ios).to_json();
    let ph = &j.sections["phases"];
    let d = &ph["devices"][0];
    assert_eq!(d["name"], "nvme0n1");
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let read = &d["ops"][0];
    assert_eq!(
        (read["op"].as_str(), read["ios"].as_u64()),
        (Some("read"), Some(100))
    );
    // From the summary's HDR histograms (3 significant digits: within 0.1%).
    assert!(close(f(&read["q2d_us"]["min"]), 10.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["q2d_us"]["avg"]), 10.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["q2d_us"]["max"]), 10.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["d2c_us"]["min"]), 100.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["d2c_us"]["avg"]), 150.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["d2c_us"]["max"]), 200.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["d2c_us"]["p99"]), 200.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["d2c_us"]["p50"]), 100.0, 1e-3), "{ph:#}");
    assert!(close(f(&read["q2c_us"]["avg"]), 160.0, 1e-3), "{ph:#}");
    let write = &d["ops"][1];
    assert_eq!(
        (write["op"].as_str(), write["ios"].as_u64()),
        (Some("write"), Some(200))
    );
    assert!(close(f(&write["q2d_us"]["avg"]), 20.0, 1e-3), "{ph:#}");
    assert!(close(f(&write["d2c_us"]["avg"]), 50.0, 1e-3), "{ph:#}");
    assert!(close(f(&write["q2d_us"]["p50"]), 20.0, 1e-3), "{ph:#}");
    assert!(close(f(&write["q2c_us"]["min"]), 70.0, 1e-3), "{ph:#}");
    assert!(close(f(&write["q2c_us"]["max"]), 70.0, 1e-3), "{ph:#}");
    // Seeks in submission order.
    let s = &d["seek"];
    assert_eq!(s["seeks"].as_u64(), Some(299));
    let sum = 999_200.0 + 100.0 * 992.0 + 99.0 * 1008.0;
    assert!(close(f(&s["mean_sectors"]), sum / 299.0, 1e-12), "{s:#}");
    // Sorted: 99 zeros, 100 x 992, 99 x 1,008, 999,200: the 150th is 992, in the bucket
    // [992, 1,007] (3% wide above 32 sectors), reported by its middle.
    assert_eq!(f(&s["median_sectors"]), 999.5);
    assert!(close(f(&s["pct_zero"]), 9900.0 / 299.0, 1e-12));
    assert_eq!(d["out_of_order"].as_u64(), Some(0));
    // Active: 50 x 210 us + 200 x 70 us; span: the first entry to the last completion.
    let span_ns = 100_000_000 + 199_000_000 + 70_000;
    let active_ns = 50 * 210_000 + 200 * 70_000;
    assert!(
        close(f(&d["span_s"]), f64::from(span_ns) / 1e9, 1e-12),
        "{d:#}"
    );
    assert!(
        close(f(&d["active_s"]), f64::from(active_ns) / 1e9, 1e-12),
        "{d:#}"
    );
    assert!(close(
        f(&d["idle_s"]),
        f64::from(span_ns - active_ns) / 1e9,
        1e-12
    ));
    assert!(
        ph["merge_ratio"]
            .as_str()
            .unwrap()
            .contains("/proc/diskstats")
    );
    // The planted trace's diskstats count its IOs and no merges: one bio per request.
    assert_eq!(read["bios_per_request"].as_f64(), Some(1.0), "{read:#}");
    assert_eq!(read["merged_bios"].as_u64(), Some(0), "{read:#}");
    let mut out = Vec::new();
    analyzer::text::write(&mut out, &j).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(
            "nvme0n1      seeks in submission order: mean 4007 sectors, median 1000, 33.1% none"
        ),
        "{text}"
    );
    assert!(
        text.contains("active 0.025 s, idle 0.275 s (8.2% active)"),
        "{text}"
    );
    assert!(analyzer::html::render(&j).contains("<h3>Phases</h3>"));
}

/// A workload of known shape, at depth one, 10 us apart: a 1 MiB region R (from sector 2^20)
/// written three times over in 64 KiB IOs, a 512 KiB region S (from 2^22) once; R's first
/// 512 KiB read twice in 4 KiB IOs, then 256 KiB from 2^23 once.
fn known_shape() -> Vec<Io> {
    let mut ios = Vec::new();
    let mut t = BASE_NS;
    let mut push = |op: Op, bytes: u32, sector: u64| {
        t += 10_000;
        ios.push(planted(t, 1_000, 4_000, op, bytes, sector));
    };
    for _ in 0..3 {
        for k in 0..16 {
            push(Op::Write, 64 << 10, (1 << 20) + k * 128);
        }
    }
    for k in 0..8 {
        push(Op::Write, 64 << 10, (1 << 22) + k * 128);
    }
    for _ in 0..2 {
        for k in 0..128 {
            push(Op::Read, 4096, (1 << 20) + k * 8);
        }
    }
    for k in 0..64 {
        push(Op::Read, 4096, (1 << 23) + k * 8);
    }
    ios
}

#[test]
fn the_workload_shape_finds_the_planted_workset_rewrites_and_offsets() {
    let j = report(&mut known_shape()).to_json();
    let w = &j.sections["workload_shape"];
    let d = &w["devices"][0];
    let u = |v: &serde_json::Value| v.as_u64().unwrap();
    // Written: 3.5 MiB over 1.5 MiB distinct; read: 768 KiB distinct, 512 KiB of it inside R.
    assert_eq!(u(&d["ops"][0]["workset_bytes"]), 768 << 10, "{w:#}");
    assert_eq!(u(&d["ops"][0]["bytes"]), 1280 << 10);
    assert_eq!(u(&d["ops"][1]["workset_bytes"]), 1536 << 10);
    assert_eq!(u(&d["ops"][1]["bytes"]), 3584 << 10);
    assert_eq!(u(&d["workset_bytes"]), 1792 << 10);
    assert_eq!(
        d["write_invalidation_factor"].as_f64(),
        Some(3584.0 / 1536.0)
    );
    assert_eq!(d["exact"].as_bool(), Some(true));
    // LBA histogram: the highest IO starts at sector 2^23 + 504, so 1,024 fine bins of 16,384
    // sectors (8 MiB); touched: fine bins 64 to 512, 449 of them, 8 to a bin (57 bins).
    let lba = &d["lba"];
    assert_eq!(u(&lba["bin_bytes"]), (8 * 8) << 20);
    assert_eq!(u(&lba["start_bytes"]), (64 * 8) << 20);
    let bins = lba["bins"].as_array().unwrap();
    assert_eq!(bins.len(), 57);
    let ios = |b: &serde_json::Value| (u(&b["read_ios"]), u(&b["write_ios"]));
    assert_eq!(ios(&bins[0]), (256, 48));
    assert_eq!(u(&bins[0]["write_bytes"]), 3 << 20);
    assert_eq!(ios(&bins[24]), (0, 8));
    assert_eq!(ios(&bins[56]), (64, 0));
    let total: u64 = bins
        .iter()
        .map(|b| u(&b["read_ios"]) + u(&b["write_ios"]))
        .sum();
    assert_eq!(total, 376);
    // The sequential share is the access pattern's: each pass over a region starts away from
    // the IOs before it, the rest continue them: writes 52 of 56, reads 317 of 320.
    let a = &j.sections["access_pattern"]["devices"][0]["ops"];
    assert_eq!(u(&a[0]["sequential_ios"]), 317);
    assert_eq!(u(&a[1]["sequential_ios"]), 52);
    let mut out = Vec::new();
    analyzer::text::write(&mut out, &j).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(
            "workset 1.8 MB (read 786.4 KB, write 1.6 MB), write invalidation factor 2.33"
        ),
        "{text}"
    );
    assert!(analyzer::html::render(&j).contains("<h3>Workload shape</h3>"));
}

#[test]
fn check_rules_gate_on_section_figures() {
    use analyzer::check::{Rules, check};
    let j = report(&mut known_shape()).to_json();
    let rules: Rules = serde_json::from_str(
        r#"{"rules": [
            {"metric": "sections.workload_shape.write_invalidation_factor", "max": 2},
            {"metric": "sections.access_pattern.ops.write.pct_sequential_ios", "min": 90},
            {"metric": "sections.workload_shape.ops.read.workset_bytes", "max": 786432},
            {"metric": "sections.workload_shape.ops.discard.workset_bytes", "max": 0}
        ]}"#,
    )
    .unwrap();
    let v = check(&j, None, &rules, false).unwrap();
    let (f, a, r, none) = (&v[0], &v[1], &v[2], &v[3]);
    assert!(
        !f.pass && f.value == Some(3584.0 / 1536.0) && f.reason.contains("above the maximum 2"),
        "{f:?}"
    );
    assert!(a.pass && a.value == Some(5200.0 / 56.0), "{a:?}");
    assert!(r.pass && r.value == Some(786_432.0), "{r:?}");
    assert!(
        none.pass && none.value.is_none(),
        "no discards: nothing to check {none:?}"
    );
    // Misspelt: an error naming what exists, not a silent pass.
    for (metric, says) in [
        ("sections.shape.workset_bytes", "workload_shape"),
        ("sections.workload_shape.worksetbytes", "workset_bytes"),
        ("sections.workload_shape.lba", "not a number"),
    ] {
        let bad: Rules = serde_json::from_str(&format!(
            r#"{{"rules": [{{"metric": "{metric}", "max": 1}}]}}"#
        ))
        .unwrap();
        let e = check(&j, None, &bad, false).unwrap_err();
        assert!(e.contains(says), "{metric}: {e}");
    }
}

/// The heatmaps' cell of `value` in column `col`: the row whose edges hold it.
fn heat_cell(map: &serde_json::Value, op: &str, value: u64, col: usize) -> u64 {
    let m: analyzer::sections::heatmaps::Map = serde_json::from_value(map.clone()).unwrap();
    let e = &m.row_edges;
    let row = (0..e.len() - 1)
        .find(|&r| e[r] <= value && value < e[r + 1])
        .unwrap_or_else(|| panic!("{value} is in no row of {e:?}"));
    let o = m.ops.iter().find(|o| o.op == op).expect(op);
    o.matrix()[row][col]
}

/// Every cell of `op` in `map`, summed.
fn heat_total(map: &serde_json::Value, op: &str) -> u64 {
    let m: analyzer::sections::heatmaps::Map = serde_json::from_value(map.clone()).unwrap();
    m.ops
        .iter()
        .filter(|o| o.op == op)
        .map(|o| o.matrix().iter().flatten().sum::<u64>())
        .sum()
}

#[test]
fn the_heatmaps_hold_exactly_the_planted_ios() {
    // (completion s, op, n, latency ns, bytes, sector); discards and flushes are not drawn.
    let groups: [(f64, Op, u64, u64, u32, u64); 3] = [
        (0.05, Op::Read, 3, 100_000, 4096, 0),
        (1.05, Op::Write, 5, 2_000_000, 64 << 10, 1 << 20),
        (2.05, Op::Read, 7, 30_000_000, 1 << 20, 1 << 21),
    ];
    // Without the last IO at 100 s the columns are 100 ms (the detection resolution); with
    // it they are folded to 400 ms (100 s / 256 columns, rounded up by powers of two).
    for (far, column_ns) in [(false, 100_000_000u64), (true, 400_000_000)] {
        let mut ios = Vec::new();
        for &(at_s, op, n, lat, bytes, sector) in &groups {
            for i in 0..n {
                let done = BASE_NS + f64_to_u64_saturating(at_s * 1e9) + i * 1_000;
                ios.push(planted(
                    done - lat,
                    lat / 4,
                    lat - lat / 4,
                    op,
                    bytes,
                    sector,
                ));
            }
        }
        ios.push(planted(
            BASE_NS + 500_000_000,
            1_000,
            9_000,
            Op::Discard,
            1 << 20,
            0,
        ));
        if far {
            ios.push(planted(
                BASE_NS + 100_050_000_000,
                1_000,
                9_000,
                Op::Write,
                4096,
                8,
            ));
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        write_trace(&p, &mut ios).unwrap();
        let plain = summarize(&p, &Options::default()).unwrap().to_json();
        assert!(
            !plain.sections.contains_key("heatmaps"),
            "made only when asked for"
        );
        let opts = Options {
            heatmaps: true,
            ..Options::default()
        };
        let j = summarize(&p, &opts).unwrap().to_json();
        let h = &j.sections["heatmaps"];
        assert_eq!(h["column_ns"], column_ns);
        let d = &h["devices"][0];
        assert_eq!(d["name"], "nvme0n1");
        let col = |s: f64| f64_to_usize_saturating(s * 1e9) / usize::try_from(column_ns).unwrap();
        assert_eq!(
            d["columns"],
            col(if far { 100.05 } else { 2.05 }) as u64 + 1
        );
        for &(at_s, op, n, lat, bytes, sector) in &groups {
            let name = if op == Op::Read { "read" } else { "write" };
            let c = col(at_s);
            assert_eq!(
                heat_cell(&d["latency"], name, lat, c),
                n,
                "{name} at {at_s}"
            );
            assert_eq!(heat_cell(&d["size"], name, bytes.into(), c), n);
            assert_eq!(heat_cell(&d["offset"], name, sector * 512, c), n);
        }
        let writes = 5 + u64::from(far);
        for map in ["latency", "size", "offset"] {
            assert_eq!(heat_total(&d[map], "read"), 10, "{map}");
            assert_eq!(heat_total(&d[map], "write"), writes, "{map}");
        }
        if far {
            assert_eq!(heat_cell(&d["offset"], "write", 8 * 512, col(100.05)), 1);
        }
        // Rendered from the model alone: three heatmaps in the HTML, each an SVG.
        let html = analyzer::html::render(&j);
        assert_eq!(html.matches("<div class='heatmap'").count(), 3);
        assert!(!analyzer::html::render(&plain).contains("class='heatmap'"));
    }
}
