//! An experiment's arms: the trace's labels and the disk's queue settings in the report, and
//! `blkprof compare` over traces and saved reports, naming each arm by what differs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use analyzer::synth::{BASE_NS, Io, Meta, write_trace_with};
use serde_json::Value;
use tracer_common::format::QueueSettings;
use tracer_common::op::{Op, flags};

fn blkprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blkprof"))
        .args(args)
        .env("TZ", "UTC")
        .output()
        .expect("run blkprof")
}

fn stdout(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn meta(labels: &[(&str, &str)], read_ahead_kb: Option<u32>) -> Meta {
    Meta {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        queue: read_ahead_kb.map(|kb| QueueSettings {
            read_ahead_kb: Some(kb),
            scheduler: "none".into(),
            nr_requests: Some(1023),
            max_sectors_kb: Some(1280),
            rotational: Some(false),
        }),
    }
}

/// `reads` reads of `read_bytes` each (the read-ahead ones flagged so), then `writes` 4 KB
/// writes; one IO every 100 us, 100 us latency.
fn arm(dir: &Path, name: &str, m: &Meta, reads: (u64, u32, bool), writes: u64) -> PathBuf {
    let (n, bytes, readahead) = reads;
    let mut ios = Vec::new();
    let mut t = 0u64;
    let mut push = |op: Op, bytes: u32, fl: u16| {
        let enter = BASE_NS + t;
        ios.push(Io {
            enter_ns: enter,
            issue_ns: enter + 5_000,
            complete_ns: enter + 105_000,
            op,
            bytes,
            sector: t / 100,
            os_inflight: 1,
            flags: fl,
        });
        t += 100_000;
    };
    for _ in 0..n {
        push(
            Op::Read,
            bytes,
            if readahead {
                flags::RAHEAD
            } else {
                flags::SYNC
            },
        );
    }
    for _ in 0..writes {
        push(Op::Write, 4096, flags::SYNC);
    }
    let p = dir.join(name);
    write_trace_with(&p, &mut ios, m).unwrap();
    p
}

#[test]
fn the_report_carries_the_labels_and_the_queue_settings() {
    let dir = tempfile::tempdir().unwrap();
    let m = meta(
        &[("experiment", "readahead"), ("read_ahead_kb", "8")],
        Some(8),
    );
    let t = arm(dir.path(), "ra8.blkp", &m, (100, 8192, false), 10);
    let t = t.to_str().unwrap();
    let j: Value = serde_json::from_str(&stdout(&blkprof(&["report", "--json", t]))).unwrap();
    assert_eq!(
        j["labels"],
        serde_json::json!({"experiment": "readahead", "read_ahead_kb": "8"})
    );
    assert_eq!(j["devices"][0]["queue"]["read_ahead_kb"], 8);
    assert_eq!(j["devices"][0]["queue"]["scheduler"], "none");
    let text = stdout(&blkprof(&["report", t]));
    assert!(
        text.contains("\nlabels: experiment=readahead read_ahead_kb=8\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  queue: read-ahead 8 KB, scheduler none, nr_requests 1023, max_sectors_kb 1280, non-rotational\n"
        ),
        "{text}"
    );
    // The HTML says them too.
    let out = dir.path().join("out");
    stdout(&blkprof(&["report", t, "-o", out.to_str().unwrap()]));
    let html = std::fs::read_to_string(out.join("ra8.html")).unwrap();
    assert!(
        html.contains("labels: experiment=readahead read_ahead_kb=8"),
        "{html}"
    );
    assert!(html.contains("queue: read-ahead 8 KB, scheduler none"));

    // A trace without them: empty labels, null queue, no such lines.
    let t = arm(
        dir.path(),
        "plain.blkp",
        &Meta::default(),
        (100, 8192, false),
        10,
    );
    let t = t.to_str().unwrap();
    let j: Value = serde_json::from_str(&stdout(&blkprof(&["report", "--json", t]))).unwrap();
    assert_eq!(j["labels"], serde_json::json!({}));
    assert!(j["devices"][0]["queue"].is_null());
    let text = stdout(&blkprof(&["report", t]));
    assert!(
        !text.contains("labels:") && !text.contains("queue:"),
        "{text}"
    );
}
