//! Proof of `blkprof export --format perfetto` with Perfetto's own proto definitions: a
//! synthetic demo-like trace and the golden traces exported, parsed in Python with the compiled
//! protos of the `perfetto` package (PyPI, pinned in xtask/src/fleet.rs), and checked against
//! `blkprof report --json` by `tests/perfetto/check_trace.py`: the file parses, slices begin and
//! end in pairs in time order per lane, nest (device time inside its IO), one IO at a time per
//! lane, exactly one outer slice per IO, counters equal to the report's series.
//!
//! Needs the Python environment `cargo xtask setup` makes (target/fleet/venv); no root. Not
//! `trace_processor`: it downloads a binary at run time.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use blkprof_e2e::{TestDir, bin, repo_root, venv_python};
use serde_json::Value;

fn blkprof(args: &[&str], trace: &Path) -> Output {
    let o = Command::new(bin("blkprof"))
        .arg(args[0])
        .arg(trace)
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

/// Export `trace` (with `export_extra` arguments), write the report of `report_of` (with
/// `report_extra`), run the checker: (checker's output, its figures).
fn check_with(
    trace: &Path,
    export_extra: &[&str],
    report_of: &Path,
    report_extra: &[&str],
    dir: &Path,
) -> (Output, Option<Value>) {
    let stem = trace.file_stem().unwrap().to_string_lossy().to_string();
    let pf = dir.join(format!("{stem}.pftrace"));
    let t = Instant::now();
    let mut args = vec!["export", "--format", "perfetto", "-o", pf.to_str().unwrap()];
    args.extend(export_extra);
    let o = blkprof(&args, trace);
    eprintln!(
        "perfetto: {stem}: export {:.2} s: {}",
        t.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    let report = dir.join(format!("{stem}.report.json"));
    let mut args = vec!["report", "--json"];
    args.extend(report_extra);
    std::fs::write(&report, blkprof(&args, report_of).stdout).unwrap();
    let figures = dir.join(format!("{stem}.figures.json"));
    let t = Instant::now();
    let o = Command::new(venv_python())
        .arg(repo_root().join("tests/perfetto/check_trace.py"))
        .args([&pf, &report, &figures])
        .output()
        .unwrap();
    eprintln!("perfetto: {stem}: check {:.2} s", t.elapsed().as_secs_f64());
    let fig = o
        .status
        .success()
        .then(|| serde_json::from_slice(&std::fs::read(&figures).unwrap()).unwrap());
    (o, fig)
}

fn check(trace: &Path, report_of: &Path, dir: &Path) -> (Output, Option<Value>) {
    check_with(trace, &[], report_of, &[], dir)
}

fn assert_passes(trace: &Path, dir: &Path) -> Value {
    assert_passes_with(trace, &[], dir)
}

fn assert_passes_with(trace: &Path, extra: &[&str], dir: &Path) -> Value {
    let (o, fig) = check_with(trace, extra, trace, extra, dir);
    assert!(
        o.status.success(),
        "{}: {}",
        trace.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let fig = fig.unwrap();
    eprintln!("perfetto: {}: {fig}", trace.display());
    fig
}

#[test]
fn demo_like_synthetic_trace_passes_perfettos_own_protos() {
    let dir = TestDir::new();
    let p = dir.path().join("demo.blkp");
    // As `cargo xtask demo`'s workload: steady reads with write bursts (flushes).
    let mut ios =
        analyzer::synth::cassandra_like(30, 2000, &[(5.0, 2.0, 400.0), (18.0, 3.0, 600.0)]);
    analyzer::synth::write_trace(&p, &mut ios).unwrap();
    let fig = assert_passes(&p, dir.path());
    let d = &fig["devices"]["nvme0n1"];
    assert_eq!(d["ios"].as_u64().unwrap(), ios.len() as u64);
    assert!(
        d["lanes"].as_u64().unwrap() > 1,
        "overlapping IOs need lanes"
    );
    assert_eq!(d["counters_checked"].as_u64().unwrap(), 6);
}

#[test]
fn golden_traces_pass_perfettos_own_protos() {
    let dir = TestDir::new();
    for t in ["cassandra-ycsb-a.blkp", "cassandra-shaped-a.blkp"] {
        let fig = assert_passes(&repo_root().join("tests/data").join(t), dir.path());
        assert!(fig["devices"].as_object().unwrap().len() == 1);
    }
}

/// The golden Cassandra trace with its system.log and YCSB output: the application's tracks
/// hold every flush, compaction and SSTable deletion of the trace's time, and the stress
/// tool's throughput, as the report's markers and status lines say.
#[test]
fn cassandra_and_ycsb_tracks_match_the_reports_markers() {
    let dir = TestDir::new();
    let data = repo_root().join("tests/data");
    let log = data.join("cassandra-ycsb-a.system.log");
    let err = data.join("cassandra-ycsb-a.ycsb-run.err");
    let extra = [
        "--app-log",
        log.to_str().unwrap(),
        "--stress",
        err.to_str().unwrap(),
    ];
    let fig = assert_passes_with(&data.join("cassandra-ycsb-a.blkp"), &extra, dir.path());
    let app = &fig["app"];
    let n = |k: &str| app[k].as_u64().unwrap();
    assert!(n("flushes") >= 11, "{app}");
    assert!(n("compactions") > 0 && n("sstables_deleted") > 0, "{app}");
    assert!(n("stress_ops_samples") > 50, "{app}");
    // The checker can fail: an export without the log against a report with it.
    let (o, _) = check_with(
        &data.join("cassandra-ycsb-a.blkp"),
        &[],
        &data.join("cassandra-ycsb-a.blkp"),
        &extra,
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the report's markers say"), "{err}");
}

/// The checker can fail: the export of one trace against another's report.
#[test]
fn the_check_fails_on_an_export_that_does_not_match_the_report() {
    let dir = TestDir::new();
    let data = repo_root().join("tests/data");
    let (o, _) = check(
        &data.join("cassandra-shaped-a.blkp"),
        &data.join("cassandra-shaped-bigger-writes.blkp"),
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the report counts"), "{err}");
}
