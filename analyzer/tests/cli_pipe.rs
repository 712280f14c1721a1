//! Output piped into a reader that stops early (`blkprof report --json ... | head`): the closed
//! pipe is the reader's choice, so blkprof stops quietly with exit 0.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
}

#[test]
fn a_reader_closing_the_pipe_is_not_an_error() {
    let a = golden("cassandra-shaped-a.blkp");
    let b = golden("cassandra-shaped-b.blkp");
    for args in [
        vec!["report", "--json"],
        vec!["report"],
        vec!["compare", "--json"],
        vec!["export", "--format", "csv"],
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_blkprof"));
        cmd.args(&args).arg(&a);
        if args[0] != "export" {
            cmd.arg(&b);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 16];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // stdout is dropped here: blkprof's next writes past the pipe buffer fail.
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    }
}
