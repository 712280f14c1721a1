//! Damaged and hostile trace files: `blkprof report` on each ends by itself with exit 0, 1 or 2,
//! within a memory limit and a time limit, never by a signal (abort, allocation failure).
//!
//! Variants are made from the golden traces (format version 1, records zstd-compressed) and
//! from synthetic ones (version 2, bit-packed): structured (absurd counts and tables, far or
//! impossible times written through the real writer, absurd numbers in every JSON frame, cuts
//! at and inside every frame, unknown frame kinds) and random (byte changes inside a frame with
//! its checksum recomputed, so the damage reaches the decoders).

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use analyzer::synth::{BASE_NS, Io, Rng, write_trace};
use common::golden;
use tracer_common::format::{
    DeviceInfo, IoRecord, ProbeCounters, StatsFrame, TraceHeader, TraceTrailer, TraceWriter,
    comm_bytes,
};
use tracer_common::op::Op;

/// Address-space limit of each run: allocation beyond it fails, and an abort is a failure.
const MEMORY_LIMIT: u64 = 1 << 30;
/// Wall-clock limit of each run (a debug build, two runs at a time on two CPUs).
const TIME_LIMIT: Duration = Duration::from_secs(60);

/// One frame of a trace file: kind byte, payload (the checksum is recomputed on writing).
#[derive(Clone)]
struct Frame {
    kind: u8,
    payload: Vec<u8>,
}

struct Trace {
    start: Vec<u8>,
    frames: Vec<Frame>,
}

impl Trace {
    fn parse(bytes: &[u8]) -> Trace {
        let mut frames = Vec::new();
        let mut off = 12;
        while off + 12 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap()) as usize;
            frames.push(Frame {
                kind: bytes[off],
                payload: bytes[off + 12..off + 12 + len].to_vec(),
            });
            off += 12 + len;
        }
        assert_eq!(off, bytes.len(), "a whole trace to start from");
        Trace {
            start: bytes[..12].to_vec(),
            frames,
        }
    }

    fn version(&self) -> u16 {
        u16::from_le_bytes([self.start[8], self.start[9]])
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = self.start.clone();
        for f in &self.frames {
            let mut head = [0u8; 12];
            head[0] = f.kind;
            head[4..8].copy_from_slice(&u32::try_from(f.payload.len()).unwrap().to_le_bytes());
            head[8..12].copy_from_slice(&crc32fast::hash(&f.payload).to_le_bytes());
            out.extend_from_slice(&head);
            out.extend_from_slice(&f.payload);
        }
        out
    }

    /// The records body of frame i (decompressed for version 1).
    fn body(&self, i: usize) -> Vec<u8> {
        let p = &self.frames[i].payload;
        if self.version() == 1 {
            let n = u32::from_le_bytes(p[..4].try_into().unwrap()) as usize;
            zstd::bulk::decompress(&p[4..], n).unwrap()
        } else {
            p.clone()
        }
    }

    fn with_body(&self, i: usize, body: &[u8]) -> Trace {
        let mut t = Trace {
            start: self.start.clone(),
            frames: self.frames.clone(),
        };
        t.frames[i].payload = if self.version() == 1 {
            let mut p = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
            p.extend(zstd::bulk::compress(body, 1).unwrap());
            p
        } else {
            body.to_vec()
        };
        t
    }

    fn indices(&self, kind: u8) -> Vec<usize> {
        (0..self.frames.len())
            .filter(|&i| self.frames[i].kind == kind)
            .collect()
    }
}

/// A version 2 trace with stats frames (losses so far) and a trailer, written by the real writer.
fn synthetic_v2(path: &Path) {
    let mut rng = Rng(7);
    let mut ios: Vec<Io> = (0..30_000u64)
        .map(|i| {
            let t = BASE_NS + i * 1_000_000;
            Io {
                enter_ns: t,
                issue_ns: t + 10_000,
                complete_ns: t + 50_000 + rng.next_u64() % 1_000_000,
                op: if i % 5 == 0 { Op::Write } else { Op::Read },
                bytes: 4096 << (i % 4),
                sector: rng.next_u64() % 1_000_000,
                os_inflight: (i % 32) as u32,
                flags: 0,
            }
        })
        .collect();
    write_trace(path, &mut ios).unwrap();
}

/// Records with times that cannot belong to the run, written as valid frames.
fn far_times(path: &Path, complete: &[u64], issue_after_complete: bool) {
    let header = TraceHeader {
        host: "far".into(),
        monotonic_base_ns: BASE_NS,
        interval_ms: 1000,
        devices: vec![DeviceInfo {
            name: "vdz".into(),
            major: 254,
            minor: 0,
            logical_block_size: 512,
            queue: None,
        }],
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header).unwrap();
    let comm = comm_bytes("fio");
    let rec = |t: u64| IoRecord {
        complete_ns: t,
        enter_ns: t.saturating_sub(100_000),
        issue_ns: if issue_after_complete {
            t.wrapping_add(1 << 40)
        } else {
            t.saturating_sub(50_000)
        },
        bytes: 4096,
        dev: (254 << 20),
        op: Op::Read,
        ..Default::default()
    };
    for i in 0..5000 {
        w.push(&rec(BASE_NS + i * 1_000_000), &comm).unwrap();
    }
    for &t in complete {
        w.push(&rec(t), &comm).unwrap();
    }
    w.finish(&TraceTrailer {
        monotonic_end_ns: BASE_NS + 6_000_000_000,
        reason: "duration".into(),
        ..Default::default()
    })
    .unwrap();
}

/// Absurd values for every number in a JSON frame, one number at a time.
fn json_variants(t: &Trace, i: usize, out: &mut Vec<Vec<u8>>) {
    let v: serde_json::Value = serde_json::from_slice(&t.frames[i].payload).unwrap();
    let mut paths = Vec::new();
    collect_numbers(&v, &mut Vec::new(), &mut paths);
    for p in paths.iter().take(40) {
        for x in [
            serde_json::json!(u64::MAX),
            serde_json::json!(0),
            serde_json::json!(i64::MIN),
            serde_json::json!(BASE_NS + 365 * 86_400 * 1_000_000_000),
        ] {
            let mut w = v.clone();
            *w.pointer_mut(p).unwrap() = x;
            let mut d = Trace {
                start: t.start.clone(),
                frames: t.frames.clone(),
            };
            d.frames[i].payload = serde_json::to_vec(&w).unwrap();
            out.push(d.bytes());
        }
    }
}

fn collect_numbers(v: &serde_json::Value, at: &mut Vec<String>, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Number(_) => out.push(format!("/{}", at.join("/"))),
        serde_json::Value::Array(a) => {
            for (k, x) in a.iter().enumerate().take(3) {
                at.push(k.to_string());
                collect_numbers(x, at, out);
                at.pop();
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                at.push(k.clone());
                collect_numbers(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// Structured damage to records bodies: counts, base times and table sizes.
fn records_variants(t: &Trace, out: &mut Vec<Vec<u8>>) {
    for &i in t.indices(2).iter().take(4) {
        let body = t.body(i);
        let count = u32::from_le_bytes(body[..4].try_into().unwrap());
        for c in [0, 1, count + 1, count * 2, 1 << 24, u32::MAX] {
            let mut b = body.clone();
            b[..4].copy_from_slice(&c.to_le_bytes());
            out.push(t.with_body(i, &b).bytes());
        }
        for base in [0, u64::MAX, BASE_NS + 365 * 86_400 * 1_000_000_000, 1 << 63] {
            let mut b = body.clone();
            b[4..12].copy_from_slice(&base.to_le_bytes());
            out.push(t.with_body(i, &b).bytes());
        }
        // The device table's length (a varint at byte 12) and the task table after it:
        // replaced by large varints, shifting what follows.
        for big in [
            vec![0x7f],
            vec![0xff, 0xff, 0x7f],
            vec![0xff, 0xff, 0xff, 0xff, 0x0f],
            vec![0xff; 10],
        ] {
            let mut b = body[..12].to_vec();
            b.extend_from_slice(&big);
            b.extend_from_slice(&body[13..]);
            out.push(t.with_body(i, &b).bytes());
            // The task table's count: after one device (tracer traces here have one).
            let mut b = body[..14].to_vec();
            b.extend_from_slice(&big);
            b.extend_from_slice(&body[15..]);
            out.push(t.with_body(i, &b).bytes());
        }
    }
}

fn cuts(bytes: &[u8], t: &Trace, out: &mut Vec<Vec<u8>>) {
    let mut off = 12;
    for f in &t.frames {
        for cut in [off, off + 5, off + 12 + f.payload.len() / 2] {
            if cut < bytes.len() {
                out.push(bytes[..cut].to_vec());
            }
        }
        off += 12 + f.payload.len();
    }
}

fn random_variants(t: &Trace, rng: &mut Rng, n: usize, out: &mut Vec<Vec<u8>>) {
    let records = t.indices(2);
    for k in 0..n {
        if k % 4 == 3 {
            // Damage anywhere, checksums left as they are (most is caught by the CRC).
            let mut b = t.bytes();
            for _ in 0..=(rng.next_u64() % 4) {
                let at = usize::try_from(rng.next_u64() % b.len() as u64).unwrap();
                b[at] ^= 1 << (rng.next_u64() % 8);
            }
            out.push(b);
            continue;
        }
        let i = records[usize::try_from(rng.next_u64() % records.len() as u64).unwrap()];
        let mut body = t.body(i);
        for _ in 0..=(rng.next_u64() % 8) {
            let at = usize::try_from(rng.next_u64() % body.len() as u64).unwrap();
            body[at] = rng.next_u64().to_le_bytes()[0];
        }
        out.push(t.with_body(i, &body).bytes());
    }
}

fn unknown_kinds(t: &Trace, out: &mut Vec<Vec<u8>>) {
    for (at, kind) in [(1, 9u8), (t.frames.len() / 2, 200), (t.frames.len() - 1, 0)] {
        let mut d = Trace {
            start: t.start.clone(),
            frames: t.frames.clone(),
        };
        d.frames.insert(
            at,
            Frame {
                kind,
                payload: b"{\"from\":\"a newer tracer\"}".to_vec(),
            },
        );
        out.push(d.bytes());
    }
}

fn variants(dir: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let v2 = dir.join("synthetic-v2.blkp");
    synthetic_v2(&v2);
    let mut rng = Rng(0x5eed);
    let year = 365 * 86_400 * 1_000_000_000u64;
    for (k, complete) in [
        vec![BASE_NS + year],
        vec![u64::MAX],
        vec![0],
        vec![BASE_NS + year, BASE_NS + 2 * year, u64::MAX - 1],
        vec![BASE_NS - 900_000_000_000],
    ]
    .into_iter()
    .enumerate()
    {
        for issue_after in [false, true] {
            let p = dir.join(format!("far-{k}-{issue_after}.blkp"));
            far_times(&p, &complete, issue_after);
            out.push(std::fs::read(&p).unwrap());
        }
    }
    for src in [
        golden("cassandra-shaped-a.blkp"),
        golden("cassandra-ycsb-a.blkp"),
        v2,
    ] {
        let bytes = std::fs::read(&src).unwrap();
        let t = Trace::parse(&bytes);
        cuts(&bytes, &t, &mut out);
        records_variants(&t, &mut out);
        for kind in [1, 4, 5] {
            for &i in t.indices(kind).iter().rev().take(1) {
                json_variants(&t, i, &mut out);
            }
        }
        unknown_kinds(&t, &mut out);
        random_variants(&t, &mut rng, 200, &mut out);
    }
    out
}

#[test]
fn every_damaged_trace_ends_cleanly_in_bounded_memory_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let all = variants(dir.path());
    assert!(all.len() >= 1000, "{} variants", all.len());
    let next = AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let slowest = std::sync::Mutex::new(Duration::ZERO);
    let codes = std::sync::Mutex::new([0usize; 3]);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(bytes) = all.get(i) else { break };
                    let p = dir.path().join(format!("v{i}.blkp"));
                    std::fs::write(&p, bytes).unwrap();
                    let mut args = vec!["report".to_string(), p.display().to_string()];
                    // JSON for most; every 50th also renders text; every 200th the HTML
                    // and charts.
                    if !i.is_multiple_of(50) {
                        args.push("--json".into());
                    }
                    if i.is_multiple_of(200) {
                        args.push("-o".into());
                        args.push(dir.path().join(format!("html{i}")).display().to_string());
                    }
                    let t = Instant::now();
                    let st = Command::new("timeout")
                        .arg("-s")
                        .arg("KILL")
                        .arg(TIME_LIMIT.as_secs().to_string())
                        .arg("prlimit")
                        .arg(format!("--as={MEMORY_LIMIT}"))
                        .arg(env!("CARGO_BIN_EXE_blkprof"))
                        .args(&args)
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .output()
                        .unwrap();
                    let took = t.elapsed();
                    {
                        let mut s = slowest.lock().unwrap();
                        *s = (*s).max(took);
                    }
                    match st.status.code() {
                        Some(c @ 0..=2) => codes.lock().unwrap()[usize::try_from(c).unwrap()] += 1,
                        other => {
                            // Keep the file for a regression test.
                            let keep =
                                std::env::temp_dir().join(format!("blkprof-damaged-{i}.blkp"));
                            let kept = match std::fs::copy(&p, &keep) {
                                Ok(_) => keep.display().to_string(),
                                Err(e) => format!("not kept: {e}"),
                            };
                            failures.lock().unwrap().push(format!(
                                "variant {i} ({kept}): exit {other:?} after {took:?}: {}",
                                String::from_utf8_lossy(&st.stderr)
                                    .lines()
                                    .last()
                                    .unwrap_or("")
                            ));
                        }
                    }
                    std::fs::remove_file(&p).unwrap();
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let codes = codes.into_inner().unwrap();
    eprintln!(
        "{} damaged variants: exit 0 {}, exit 1 {}, exit 2 {}; slowest {:?}; limits {} MiB address space, {:?}",
        all.len(),
        codes[0],
        codes[1],
        codes[2],
        slowest.into_inner().unwrap(),
        MEMORY_LIMIT >> 20,
        TIME_LIMIT
    );
    assert!(
        failures.is_empty(),
        "{} of {} variants did not end cleanly:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

/// Records a year late are left out and named; the rest is reported as if they were not there.
#[test]
fn records_outside_the_run_are_counted_and_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.blkp");
    let far = dir.path().join("far.blkp");
    far_times(&clean, &[], false);
    let year = 365 * 86_400 * 1_000_000_000u64;
    far_times(&far, &[BASE_NS + year, u64::MAX, 7], false);
    let opts = analyzer::series::Options::default();
    let a = analyzer::summary::summarize(&clean, &opts)
        .unwrap()
        .to_json();
    let b = analyzer::summary::summarize(&far, &opts).unwrap().to_json();
    assert_eq!(b.integrity.records_outside_window, 3);
    assert_eq!(a.integrity.records_outside_window, 0);
    assert_eq!(b.devices[0].ops["read"].ios, a.devices[0].ops["read"].ios);
    assert_eq!(
        serde_json::to_string(&b.devices[0].series).unwrap(),
        serde_json::to_string(&a.devices[0].series).unwrap()
    );
    assert!(
        b.integrity.notes.iter().any(|n| n.contains("3 records")),
        "{:?}",
        b.integrity.notes
    );
}

/// A trailer claiming a year-long run: the series resolution is coarsened to stay within the
/// bin budget, and the report says so.
#[test]
fn a_year_long_trailer_coarsens_the_series_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("long.blkp");
    let header = TraceHeader {
        monotonic_base_ns: BASE_NS,
        interval_ms: 1000,
        ..Default::default()
    };
    let mut w = TraceWriter::create(&p, &header).unwrap();
    let year = 365 * 86_400 * 1_000_000_000u64;
    for t in [BASE_NS + 1, BASE_NS + year / 2, BASE_NS + year] {
        let r = IoRecord {
            complete_ns: t,
            enter_ns: t - 1000,
            issue_ns: t - 500,
            bytes: 4096,
            dev: 254 << 20,
            op: Op::Write,
            ..Default::default()
        };
        w.push(&r, &comm_bytes("x")).unwrap();
    }
    w.finish(&TraceTrailer {
        monotonic_end_ns: BASE_NS + year,
        ..Default::default()
    })
    .unwrap();
    let s = analyzer::summary::summarize(&p, &analyzer::series::Options::default()).unwrap();
    let d = s.devices.values().next().unwrap();
    let bins = d.series.fine_write_bytes.len() as u64;
    assert!(
        bins <= analyzer::summary::SERIES_BIN_BUDGET,
        "{bins} fine bins"
    );
    assert!(d.series.fine_ns > 100_000_000);
    assert_eq!(s.to_json().devices[0].ops["write"].ios, 3);
    assert!(
        s.integrity
            .notes
            .iter()
            .any(|n| n.contains("keep memory bounded")),
        "{:?}",
        s.integrity.notes
    );
}

/// A file cut short after its stats frames reports the losses of the last one, says where it
/// stopped, and fails `check` unless --allow-incomplete.
#[test]
fn a_truncated_trace_keeps_its_losses_and_fails_check() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.blkp");
    let header = TraceHeader {
        monotonic_base_ns: BASE_NS,
        wall_clock_start_ns: 1_795_000_000_000_000_000,
        interval_ms: 1000,
        ..Default::default()
    };
    let mut w = TraceWriter::create(&p, &header).unwrap();
    let comm = comm_bytes("fio");
    let mut t = BASE_NS;
    for (drops, missed) in [(7, 3), (11, 5)] {
        for _ in 0..1000 {
            t += 1_000_000;
            let r = IoRecord {
                complete_ns: t,
                enter_ns: t - 20_000,
                issue_ns: t - 10_000,
                bytes: 4096,
                dev: 254 << 20,
                op: Op::Read,
                ..Default::default()
            };
            w.push(&r, &comm).unwrap();
        }
        w.write_stats(&StatsFrame {
            at_ns: t,
            counters: ProbeCounters {
                ring_drops: drops,
                missed_completions: missed,
                ..Default::default()
            },
            records_in_file: 0,
            filtered_out: 0,
        })
        .unwrap();
    }
    // More records after the last stats frame, then the tracer dies: no trailer.
    for _ in 0..500 {
        t += 1_000_000;
        w.push(
            &IoRecord {
                complete_ns: t,
                enter_ns: t - 20_000,
                issue_ns: t - 10_000,
                bytes: 4096,
                dev: 254 << 20,
                op: Op::Read,
                ..Default::default()
            },
            &comm,
        )
        .unwrap();
    }
    w.flush_chunk().unwrap();
    drop(w);
    let s = analyzer::summary::summarize(&p, &analyzer::series::Options::default()).unwrap();
    let j = s.to_json();
    assert!(!j.complete);
    assert_eq!(j.integrity.ending, "truncated");
    assert_eq!(j.integrity.losses_from, "last stats frame");
    assert_eq!((j.lost.ring_drops, j.lost.missed_completions), (11, 5));
    assert_eq!(j.lost.total, 16);
    assert_eq!(j.devices[0].ops["read"].ios, 2500);
    let stopped = j.integrity.stopped.clone().unwrap();
    assert!(stopped.contains("truncated after +2.5 s"), "{stopped}");
    let mut text = Vec::new();
    analyzer::text::write(&mut text, &j).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("truncated after +2.5 s"), "{text}");
    assert!(text.contains("lost: at least 16 IOs"), "{text}");
    let html = analyzer::html::render(&j);
    assert!(html.contains("truncated after +2.5 s"));

    // check: fails on the incomplete trace, passes with --allow-incomplete.
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"rules": [{"metric": "read.latency_p99_us", "max": 100000}]}"#,
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_blkprof"))
            .arg("check")
            .arg(&p)
            .arg("--rules")
            .arg(&rules)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("FAIL") && out.contains("trace.complete"),
        "{out}"
    );
    assert!(out.contains("--allow-incomplete"), "{out}");
    let o = run(&["--allow-incomplete"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// A frame of a kind this version does not know, with a valid checksum, is skipped: the
/// format promises new frame kinds need no version change.
#[test]
fn unknown_frame_kinds_are_skipped() {
    let bytes = std::fs::read(golden("cassandra-shaped-a.blkp")).unwrap();
    let t = Trace::parse(&bytes);
    let mut with = Vec::new();
    unknown_kinds(&t, &mut with);
    let dir = tempfile::tempdir().unwrap();
    let opts = analyzer::series::Options::default();
    let want = analyzer::summary::summarize(&golden("cassandra-shaped-a.blkp"), &opts)
        .unwrap()
        .to_json();
    for (k, b) in with.iter().enumerate() {
        let p = dir.path().join(format!("u{k}.blkp"));
        std::fs::write(&p, b).unwrap();
        let got = analyzer::summary::summarize(&p, &opts).unwrap().to_json();
        assert!(got.complete, "variant {k}");
        assert_eq!(got.records, want.records, "variant {k}");
        assert_eq!(got.integrity.unknown_frames_skipped, 1);
        assert_eq!(
            serde_json::to_string(&got.devices).unwrap(),
            serde_json::to_string(&want.devices).unwrap()
        );
    }
}

/// A trailer whose end time is 0 (a writer that left it unset) bounds nothing: no record of a
/// long run is left out for it.
#[test]
fn a_trailer_without_an_end_time_leaves_nothing_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("noend.blkp");
    let header = TraceHeader {
        monotonic_base_ns: BASE_NS,
        ..Default::default()
    };
    let mut w = TraceWriter::create(&p, &header).unwrap();
    // 20 minutes of IO, one per second.
    for i in 1..=1200u64 {
        let t = BASE_NS + i * 1_000_000_000;
        let r = IoRecord {
            complete_ns: t,
            enter_ns: t - 1000,
            issue_ns: t - 500,
            bytes: 4096,
            dev: 254 << 20,
            op: Op::Read,
            ..Default::default()
        };
        w.push(&r, &comm_bytes("x")).unwrap();
    }
    w.finish(&TraceTrailer::default()).unwrap();
    let j = analyzer::summary::summarize(&p, &analyzer::series::Options::default())
        .unwrap()
        .to_json();
    assert_eq!(j.integrity.records_outside_window, 0);
    assert_eq!(j.devices[0].ops["read"].ios, 1200);
}
