//! An experiment's arms: the trace's labels and the disk's queue settings in the report, and
//! `blkprof compare` over traces and saved reports, naming each arm by what differs.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use analyzer::synth::{BASE_NS, Io, Meta, write_trace_with};
use common::{blkprof, fixture, stdout};
use serde_json::Value;
use tracer_common::format::QueueSettings;
use tracer_common::op::{Op, flags};

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
            hw_queues: Vec::new(),
        }),
        ..Meta::default()
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

fn compare_json(args: &[&str]) -> Value {
    let mut a = vec!["compare", "--json"];
    a.extend(args);
    serde_json::from_str(&stdout(&blkprof(&a))).unwrap()
}

/// The values of row `metric` (null where an arm has none) and whether it is flagged.
fn row(c: &Value, metric: &str) -> (Vec<Option<f64>>, bool) {
    let r = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric)
        .unwrap_or_else(|| panic!("no row {metric:?} in {:#}", c["rows"]));
    (
        r["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::as_f64)
            .collect(),
        r["flagged"].as_bool().unwrap(),
    )
}

fn findings(c: &Value) -> Vec<String> {
    c["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["text"].as_str().unwrap().to_string())
        .collect()
}

/// Three read-ahead arms: 64 KB reads 99% read-ahead, 32 KB 50%, 16 KB 3%.
fn readahead_arms(dir: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    for (ra, bytes, ra_share) in [(4096, 65536, 99), (128, 32768, 50), (8, 16384, 3)] {
        let kb = ra.to_string();
        let arm = format!("ra{ra}");
        // As `cargo xtask experiment` labels them: arm= as well as the setting.
        let m = meta(
            &[
                ("experiment", "readahead"),
                ("arm", arm.as_str()),
                ("read_ahead_kb", kb.as_str()),
            ],
            Some(ra),
        );
        // Read-ahead reads first, then the rest: 1000 reads in all.
        let mut ios = Vec::new();
        for i in 0..1000u64 {
            let enter = BASE_NS + i * 100_000;
            ios.push(Io {
                enter_ns: enter,
                issue_ns: enter + 5_000,
                complete_ns: enter + 105_000,
                op: Op::Read,
                bytes,
                sector: i * 256,
                os_inflight: 1,
                flags: if i < ra_share * 10 {
                    flags::RAHEAD
                } else {
                    flags::SYNC
                },
            });
        }
        let p = dir.join(format!("ra{ra}.blkp"));
        write_trace_with(&p, &mut ios, &m).unwrap();
        paths.push(p.to_str().unwrap().to_string());
    }
    paths
}

#[test]
fn arms_are_named_by_the_labels_that_differ_and_findings_say_what_the_rows_show() {
    let dir = tempfile::tempdir().unwrap();
    let p = readahead_arms(dir.path());
    let args: Vec<&str> = p.iter().map(String::as_str).collect();
    let c = compare_json(&args);
    let names: Vec<&str> = c["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    // experiment=readahead is the same everywhere: not part of the names; arm= differs, but
    // read_ahead_kb= names every arm apart without it.
    assert_eq!(
        names,
        ["read_ahead_kb=4096", "read_ahead_kb=128", "read_ahead_kb=8"]
    );
    assert_eq!(c["arms"][2]["labels"]["experiment"], "readahead");
    assert_eq!(c["arms"][2]["device"], "nvme0n1");
    assert_eq!(c["arms"][2]["input"], p[2].as_str());
    assert_eq!(
        row(&c, "read-ahead KB"),
        (vec![Some(4096.0), Some(128.0), Some(8.0)], true)
    );
    assert_eq!(
        row(&c, "read mean request size"),
        (vec![Some(65536.0), Some(32768.0), Some(16384.0)], true)
    );
    assert_eq!(
        row(&c, "read-ahead % of read bytes"),
        (vec![Some(99.0), Some(50.0), Some(3.0)], true)
    );
    // No stress results: no client rows at all.
    assert!(
        !c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["metric"].as_str().unwrap().starts_with("client")),
        "{:#}",
        c["rows"]
    );
    let f = findings(&c);
    let want = "reads 4.0x larger in read_ahead_kb=4096 than in read_ahead_kb=8 (mean 65.5 KB vs 16.4 KB): read-ahead brings 99% vs 3% of read bytes";
    assert!(f.iter().any(|t| t == want), "{f:#?}");
    assert!(
        f.iter().any(|t| t.starts_with(
            "reads 2.0x larger in read_ahead_kb=4096 than in read_ahead_kb=128 (mean 65.5 KB vs 32.8 KB): read-ahead brings 99% vs 50%"
        )),
        "{f:#?}"
    );
    // The setting is the experiment's variable, not a finding; and every finding names arms.
    assert!(f.iter().all(|t| !t.contains("read-ahead KB")), "{f:#?}");
    let j = &c["findings"][0];
    assert_eq!(
        j["text"], want,
        "the largest move of the most important row first"
    );
    assert_eq!(
        j["metrics"],
        serde_json::json!(["read mean request size", "read-ahead % of read bytes"])
    );
    assert_eq!(j["arm"], 2);

    // The text: names in the header lines, the findings after the table.
    let mut a = vec!["compare"];
    a.extend(&args);
    let text = stdout(&blkprof(&a));
    assert!(
        text.starts_with(&format!(
            "A = read_ahead_kb=4096 ({}, nvme0n1)\nB = read_ahead_kb=128 ({}, nvme0n1)\nC = read_ahead_kb=8 ({}, nvme0n1)\n",
            p[0], p[1], p[2]
        )),
        "{text}"
    );
    assert!(text.contains(&format!("  - {want}\n")), "{text}");
    let table: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("! ") || l.starts_with("  ") && !l.starts_with("  - "))
        .collect();
    assert!(
        table.iter().any(|l| l.starts_with("! read-ahead KB")),
        "{text}"
    );
}

#[test]
fn identical_arms_flag_nothing_and_queue_settings_name_arms_without_labels() {
    let dir = tempfile::tempdir().unwrap();
    // Same IOs, labels that differ only in the run's number: nothing moved.
    let a = arm(
        dir.path(),
        "a.blkp",
        &meta(&[("run", "1")], None),
        (500, 8192, true),
        50,
    );
    let b = arm(
        dir.path(),
        "b.blkp",
        &meta(&[("run", "2")], None),
        (500, 8192, true),
        50,
    );
    let c = compare_json(&[a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(c["arms"][0]["name"], "run=1");
    assert_eq!(c["arms"][1]["name"], "run=2");
    let flagged: Vec<&Value> = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["flagged"] == true)
        .collect();
    assert!(flagged.is_empty(), "{flagged:#?}");
    assert!(findings(&c).is_empty());
    let text = stdout(&blkprof(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]));
    assert!(text.contains("\n0 differences flagged"), "{text}");
    assert!(!text.contains("Findings"), "{text}");

    // No labels, read-ahead differs: named by the queue setting that differs (the scheduler
    // and the rest are the same and left out).
    let a = arm(
        dir.path(),
        "q1.blkp",
        &meta(&[], Some(4096)),
        (500, 8192, true),
        50,
    );
    let b = arm(
        dir.path(),
        "q2.blkp",
        &meta(&[], Some(8)),
        (500, 8192, true),
        50,
    );
    let c = compare_json(&[a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(c["arms"][0]["name"], "read-ahead 4096 KB");
    assert_eq!(c["arms"][1]["name"], "read-ahead 8 KB");
    // Nothing differs: named by path, as before.
    let c = compare_json(&[a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(c["arms"][0]["name"], a.to_str().unwrap());
    let text = stdout(&blkprof(&[
        "compare",
        a.to_str().unwrap(),
        a.to_str().unwrap(),
    ]));
    assert!(
        text.starts_with(&format!("A = {} (nvme0n1)\n", a.display())),
        "{text}"
    );
}

/// A saved report with the YCSB run's results: the real fixture for A, and for B the same
/// with throughput 20% lower and the read p99 2.3x higher (what the rows must show).
#[test]
fn saved_reports_bring_the_stress_results() {
    let dir = tempfile::tempdir().unwrap();
    let run_out = fixture("ycsb/cassandra5-workloada-run.stdout");
    let run_err = fixture("ycsb/cassandra5-workloada-run.stderr");
    let slower = dir.path().join("slower.stdout");
    let text = std::fs::read_to_string(&run_out)
        .unwrap()
        .replace(
            "[OVERALL], Throughput(ops/sec), 2639.5985695415443",
            "[OVERALL], Throughput(ops/sec), 2111.6788556332354",
        )
        .replace(
            "[READ], 99thPercentileLatency(us), 24703",
            "[READ], 99thPercentileLatency(us), 56817",
        );
    std::fs::write(&slower, text).unwrap();
    let mut reports = Vec::new();
    for (name, stress, kb) in [("a", &run_out, "4096"), ("b", &slower, "8")] {
        let t = arm(
            dir.path(),
            &format!("{name}.blkp"),
            &meta(&[("read_ahead_kb", kb)], None),
            (1000, 16384, false),
            100,
        );
        let j = dir.path().join(format!("{name}.json"));
        let o = blkprof(&[
            "report",
            t.to_str().unwrap(),
            "--stress",
            stress.to_str().unwrap(),
            "--stress",
            run_err.to_str().unwrap(),
            "--stress-tz",
            "UTC",
            "--json",
        ]);
        std::fs::write(&j, stdout(&o)).unwrap();
        reports.push(j);
    }
    let (a, b) = (reports[0].to_str().unwrap(), reports[1].to_str().unwrap());
    let c = compare_json(&[a, b]);
    assert_eq!(c["arms"][1]["name"], "read_ahead_kb=8");
    assert_eq!(c["arms"][1]["input"], b);
    assert!(c["arms"][1]["trace"].as_str().unwrap().ends_with("b.blkp"));
    let (v, flagged) = row(&c, "client ops/s");
    assert!((v[0].unwrap() - 2639.6).abs() < 0.1 && (v[1].unwrap() - 2111.7).abs() < 0.1);
    assert!(flagged, "20% lower is beyond 10%");
    assert_eq!(
        row(&c, "client read latency p99"),
        (vec![Some(24703.0), Some(56817.0)], true)
    );
    assert_eq!(
        row(&c, "client read ops"),
        (vec![Some(81898.0), Some(81898.0)], false)
    );
    assert_eq!(
        row(&c, "client update latency mean").0[0],
        Some(5_155.191_623_049_424)
    );
    // YCSB's thread teardown is not an operation of the workload.
    assert!(
        !c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["metric"].as_str().unwrap().contains("cleanup"))
    );
    // 1000 reads of 16 KB on the device for 81898 client reads.
    let (v, flagged) = row(&c, "device bytes per client read");
    assert_eq!(
        v,
        [Some(16_384_000.0 / 81898.0), Some(16_384_000.0 / 81898.0)]
    );
    assert!(!flagged);
    let f = findings(&c);
    assert_eq!(
        f[..2],
        [
            "client throughput 20% lower in read_ahead_kb=8 than in read_ahead_kb=4096 (2,112 vs 2,640 ops/s)",
            "client read latency p99 2.3x higher in read_ahead_kb=8 than in read_ahead_kb=4096 (56.82 ms vs 24.70 ms)",
        ],
        "{f:#?}"
    );
    // Only the flagged rows speak: the device did the same in both arms.
    assert_eq!(f.len(), 2, "{f:#?}");

    // A trace and a saved report side by side: the trace has no stress results (n/a).
    let t = dir.path().join("a.blkp");
    let c = compare_json(&[t.to_str().unwrap(), b]);
    let (v, flagged) = row(&c, "client ops/s");
    assert!(v[0].is_none() && v[1].is_some() && !flagged);
}

#[test]
fn what_is_not_a_trace_or_a_report_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let t = arm(
        dir.path(),
        "t.blkp",
        &Meta::default(),
        (100, 4096, false),
        10,
    );
    let t = t.to_str().unwrap();
    let good = stdout(&blkprof(&["report", "--json", t]));
    let cases: [(&str, String, &str); 5] = [
        (
            "cut.json",
            good[..good.len() / 2].to_string(),
            "is not valid JSON",
        ),
        (
            "other.json",
            r#"{"name": "x"}"#.into(),
            "is JSON but not a blkprof report",
        ),
        (
            "compare.json",
            r#"{"schema_version": 1, "rows": []}"#.into(),
            "the output of `blkprof compare --json`",
        ),
        (
            "typed.json",
            r#"{"schema_version": 1, "traces": [], "devices": 5}"#.into(),
            "is not a blkprof report",
        ),
        ("list.json", "[1, 2]".into(), "neither a blkprof trace"),
    ];
    for (name, body, want) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        let o = blkprof(&["compare", t, p.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(want) && err.contains(name), "{name}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let o = blkprof(&["compare", "--help"]);
    let help = stdout(&o);
    for ex in [
        "blkprof compare before.blkp after.blkp",
        "blkprof compare ra4096/report.json ra128/report.json ra8/report.json",
        "doc32k/report.json --json",
    ] {
        assert!(help.contains(ex), "{help}");
    }
}

/// Five arms (document sizes) fit in 120 columns.
#[test]
fn five_arms_fit_in_120_columns() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (i, kb) in [2u32, 4, 8, 16, 32].into_iter().enumerate() {
        let doc = (kb * 1024).to_string();
        let p = arm(
            dir.path(),
            &format!("doc{kb}k.blkp"),
            &meta(&[("document_bytes", doc.as_str())], Some(128)),
            (400 + 300 * i as u64, kb * 1024, i % 2 == 0),
            100 * (i as u64 + 1),
        );
        paths.push(p.to_str().unwrap().to_string());
    }
    let mut a = vec!["compare"];
    a.extend(paths.iter().map(String::as_str));
    let text = stdout(&blkprof(&a));
    assert!(text.starts_with("A = document_bytes=2048 ("), "{text}");
    for l in text
        .lines()
        .filter(|l| !l.starts_with("  - ") && !l.contains(" = "))
    {
        assert!(
            l.len() <= 120 || l.contains("differences flagged"),
            "{} columns: {l}\n{text}",
            l.len()
        );
    }
    assert!(text.contains("\nFindings"), "{text}");
}
