//! The CLI as a user runs it: exit codes and messages.

use std::path::PathBuf;
use std::process::Command;

fn blkprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_blkprof"))
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(name)
}

#[test]
fn check_exits_0_on_pass_1_on_fail_2_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.json");
    let o = blkprof().arg("report").arg(golden("cassandra-shaped-a.blkp")).arg("--json").output().unwrap();
    assert!(o.status.success());
    std::fs::write(&base, &o.stdout).unwrap();
    let junit = dir.path().join("junit.xml");
    let o = blkprof().arg("check").arg(golden("cassandra-shaped-b.blkp")).arg("--baseline").arg(&base).arg("--junit").arg(&junit).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(std::fs::read_to_string(&junit).unwrap().contains("failures=\"0\""));
    let o = blkprof().arg("check").arg(golden("cassandra-shaped-bigger-writes.blkp")).arg("--baseline").arg(&base).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("FAIL   write.mean_request_bytes") && out.contains("from the baseline"), "{out}");
    // Bad input: no baseline or rules, a trace as baseline, a missing trace.
    let o = blkprof().arg("check").arg(golden("cassandra-shaped-b.blkp")).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = blkprof().arg("check").arg(golden("cassandra-shaped-b.blkp")).arg("--baseline").arg(golden("cassandra-shaped-a.blkp")).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a `blkprof report --json` document"));
    let o = blkprof().args(["report", "/nonexistent.blkp"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.blkp"));
}

#[test]
fn report_of_a_non_trace_and_of_an_unknown_version_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.blkp");
    std::fs::write(&p, b"not a trace at all").unwrap();
    let o = blkprof().arg("report").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a blkprof trace file"));
    let mut v = b"BLKPTRC\0".to_vec();
    v.extend_from_slice(&[7, 0, 0, 0]);
    std::fs::write(&p, &v).unwrap();
    let o = blkprof().arg("report").arg(&p).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("version 7 is not supported"));
}
