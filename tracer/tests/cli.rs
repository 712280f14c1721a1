//! The tracer's command line without a probe: what `--help` teaches and how bad input is
//! refused (a clear message and exit code 2, before anything is loaded). This target also
//! makes `cargo test` build the `blkprof-trace` binary, so that one release build serves the
//! unit and the end-to-end tests (`cargo xtask test`).

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::process::{Command, Output};

fn tracer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blkprof-trace"))
        .args(args)
        .output()
        .expect("run blkprof-trace")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_says_what_is_traced_and_what_it_needs() {
    let o = tracer(&["--help"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    for needle in [
        "--device",
        "--output",
        "--duration",
        "Needs root",
        "CAP_BPF",
        "BTF",
    ] {
        assert!(out.contains(needle), "--help names {needle:?}:\n{out}");
    }
}

#[test]
fn an_unknown_option_is_refused_with_usage() {
    let o = tracer(&["--bogus"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("'--bogus'") && err.contains("Usage:"), "{err}");
}

#[test]
fn a_bad_duration_names_the_units_it_takes() {
    let o = tracer(&["--duration", "5x"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown unit") && err.contains("ms, s, m, h"),
        "{err}"
    );
}

#[test]
fn a_missing_device_is_named_before_the_probe_loads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("t.blkp");
    let o = tracer(&[
        "--device",
        "blkprof-no-such-disk",
        "--output",
        out.to_str().expect("utf-8 path"),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("\"blkprof-no-such-disk\" not found") && err.contains("lsblk"),
        "{err}"
    );
    assert!(
        !out.exists(),
        "no trace file is left for a run that never started"
    );
}
