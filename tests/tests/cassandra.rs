//! The seeds' experiment, short: a real Cassandra 5.0 node on a scratch loop device under a
//! real YCSB workload A for one minute, traced by blkprof-trace, reported with YCSB's results
//! and Cassandra's log. Runs `cargo xtask cassandra` (the xtask binary) as a user would.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::process::Command;

use blkprof_e2e::{TestDir, bin};

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn cassandra_ycsb_workload_a_traced_and_reported() {
    let scratch = TestDir::new();
    let out = scratch.join("cassandra");
    let t = std::time::Instant::now();
    let st = Command::new(bin("xtask"))
        .args([
            "cassandra",
            "--duration",
            "60",
            "--records",
            "50000",
            "--prebuilt",
            "--out",
        ])
        .arg(&out)
        .status()
        .expect("run xtask cassandra");
    assert!(st.success(), "cargo xtask cassandra failed: {st}");
    eprintln!(
        "cassandra: whole task (build, node, load, 60 s run, report) in {:.0} s",
        t.elapsed().as_secs_f64()
    );

    let j: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("report/cassandra.json")).expect("report JSON"),
    )
    .expect("valid JSON");
    assert!(out.join("report/cassandra.html").exists());

    // The device saw every kind of request, and the trace accounts for all of them.
    let d = &j["devices"][0];
    let ops = &d["ops"];
    for op in ["read", "write", "discard", "flush"] {
        assert!(f(&ops[op]["ios"]) > 0.0, "no {op} IOs: {}", ops[op]);
    }
    assert_eq!(f(&j["lost"]["unaccounted"]), 0.0, "{}", j["lost"]);
    for g in d["coverage"]["groups"].as_array().expect("coverage") {
        let kernel = f(&g["kernel_ios"]);
        let traced = f(&g["aggregate_ios"]);
        assert!(
            kernel - traced <= f(&j["lost"]["total"]),
            "coverage gap beyond reported losses: {g}"
        );
    }

    // YCSB's own results sit next to the trace.
    let stress = j["stress"].as_array().expect("stress");
    let status: usize = stress
        .iter()
        .map(|s| s["status"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(status >= 50, "YCSB status lines: {status}");
    let summary = stress
        .iter()
        .find(|s| s["summary"].get("READ").is_some())
        .expect("YCSB summary");
    assert!(f(&summary["summary"]["READ"]["Operations"]) > 1000.0);
    assert!(f(&summary["summary"]["UPDATE"]["Operations"]) > 1000.0);

    // Memtable flushes from Cassandra's log against the write bursts found in the trace.
    let (_, m) = j["flush_match"]
        .as_array()
        .and_then(|v| v.first())
        .and_then(|p| Some((p.get(0)?, p.get(1)?)))
        .expect("flush match table");
    let flushes = f(&m["flushes"]);
    // The run is not throttled, so its flushes follow the host's speed: at 723 and 854 ops/s
    // (a loaded host) the 60 s held 3 and 2 flushes of the 8 MiB memtables, each matched.
    assert!(flushes >= 2.0, "flushes in a 60 s run: {m}");
    assert!(f(&m["recall"]) >= 0.9, "recall: {m}");
    // Bursts are explained by the log: a flush or a compaction (0 in every run so far; one
    // stray kworker writeback outside both would not be a defect of the tracer).
    let unexplained = f(&m["bursts"]) - f(&m["bursts_matched"]) - f(&m["unmatched_in_compactions"]);
    assert!(
        unexplained <= 1.0,
        "bursts neither flush nor compaction: {m}"
    );

    // IO classes from the trace alone (files and threads), against the log.
    assert_eq!(
        j["class_profile"], "cassandra",
        "the run traces with --files"
    );
    let classes: Vec<&str> = d["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .filter_map(|c| c["class"].as_str())
        .collect();
    for c in ["commit log", "flush", "query reads"] {
        assert!(classes.contains(&c), "no {c} IO: {}", d["classes"]);
    }
    let a = &m["classes"];
    eprintln!(
        "cassandra: classes vs the log: bursts {} (log: flush {} labelled flush {}, compaction {} labelled compaction {}, neither {}); SSTables compared {} agree {}",
        a["bursts"],
        a["log_flush"],
        a["log_flush_labelled_flush"],
        a["log_compaction"],
        a["log_compaction_labelled_compaction"],
        a["log_none"],
        a["sstables_compared"],
        a["sstables_agree"]
    );
    // Every SSTable the trace saw made is what the log says it is (flushed or compacted).
    assert!(f(&a["sstables_compared"]) >= flushes, "{a}");
    assert_eq!(a["sstables_agree"], a["sstables_compared"], "{a}");
    // Every burst the log explains as a flush is labelled flush, as a compaction compaction.
    assert_eq!(a["log_flush_labelled_flush"], a["log_flush"], "{a}");
    assert_eq!(
        a["log_compaction_labelled_compaction"], a["log_compaction"],
        "{a}"
    );

    // Compactions in the log, and the discards that follow them (ext4 mounted with discard).
    if let Some(c) = j["compaction_discards"].as_array().and_then(|v| v.first()) {
        let c = &c[1];
        assert!(f(&c["followed_by_discards"]) >= 1.0, "{c}");
    }

    // Reads inside and outside bursts add up to all reads.
    let r = &d["reads_during_bursts"];
    assert_eq!(
        f(&r["inside_ios"]) + f(&r["outside_ios"]),
        f(&ops["read"]["ios"]),
        "{r}"
    );
    assert!(
        f(&r["inside_ios"]) > 0.0,
        "reads reached the device during bursts: {r}"
    );

    // Everything it started is gone: no Cassandra, no mount, no loop device on its image.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains("blkprof-cassandra-"), "{mounts}");
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains("blkprof-cassandra-"),
        "loop device left behind"
    );
}
