//! The CLI's fixed-choice options as a user meets them: a value outside the list is bad input
//! (exit 2) and the message names the values that are accepted.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::process::Command;

fn blkprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_blkprof"))
}

#[test]
fn an_unknown_format_or_importer_is_rejected_with_the_choices() {
    for (args, choices) in [
        (
            &["export", "x.blkp", "--format", "xml"][..],
            "[possible values: iolog, iolog2, csv, jsonl, parquet, perfetto]",
        ),
        (
            &["import", "--from", "foo", "in.txt", "-o", "out.blkp"][..],
            "[possible values: msr, blk]",
        ),
    ] {
        let o = blkprof().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("invalid value") && err.contains(choices),
            "{err}"
        );
    }
}

#[test]
fn help_lists_each_format_with_what_it_is() {
    let o = blkprof().args(["export", "--help"]).output().unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for v in [
        "- iolog:",
        "- iolog2:",
        "- csv:",
        "- jsonl:",
        "- parquet:",
        "- perfetto:",
        "--min-latency <DURATION>",
        "ui.perfetto.dev",
        "[default: iolog]",
    ] {
        assert!(help.contains(v), "{v} missing from\n{help}");
    }
}
