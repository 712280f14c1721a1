//! Flags that do not fit together are refused before any file is read: the message names the
//! flags (not a missing trace), and the exit code is 2.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::process::Command;

#[test]
fn flags_that_do_not_fit_are_refused_before_the_trace_is_opened() {
    let missing = "/nonexistent/run.blkp";
    for (args, says) in [
        (
            &["check", missing][..],
            "check needs --baseline BASE.json or --rules RULES.json",
        ),
        (
            &["export", missing, "--format", "parquet"],
            "give it with -o OUT",
        ),
        (
            &["export", missing, "--format", "csv", "--from", "10"],
            "are for --format perfetto",
        ),
        (
            &["export", missing, missing, "--format", "jsonl"],
            "only --format parquet exports several traces",
        ),
        (
            &["export", missing, "--host", "h"],
            "--host and --partition are for --format parquet",
        ),
        (
            &["export", missing, missing, "--format", "perfetto"],
            "exports one trace at a time",
        ),
        (
            &["whatif", missing, "--raid0", "1", "--chunk", "64K"],
            "--raid0 1: give 2 to",
        ),
        (
            &["whatif", missing, "--raid0", "4", "--chunk", "6K"],
            "md's chunk is a multiple of 4 KiB",
        ),
        (
            &[
                "whatif", missing, "--raid0", "4", "--chunk", "64K", "--offset", "100",
            ],
            "--offset 100: md addresses 512-byte sectors",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_blkprof"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("blkprof: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(!err.contains("nonexistent"), "{args:?}: {err}");
    }
}
