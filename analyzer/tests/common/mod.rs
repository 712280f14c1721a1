//! What the analyzer's integration tests share: where the golden traces and the shared
//! fixtures are, writing a synthetic trace and summarising it, and running the binary as a
//! user does.
//!
//! Each test crate includes this module and uses part of it: a crate that leaves some of it
//! unused says so with `#[expect(dead_code, ...)]` on its `mod common;`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use analyzer::series::Options;
use analyzer::summary::{JsonReport, Summary, summarize};
use analyzer::synth::{Io, write_trace};

/// A golden trace or a file recorded with it (tests/data at the repository's root).
pub(crate) fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
}

/// A shared fixture: `shared/fixtures` beside the repository, or under `BLKPROF_FIXTURES`.
pub(crate) fn fixture(p: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("BLKPROF_FIXTURES") {
        return PathBuf::from(dir).join(p);
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = here
        .ancestors()
        .map(|a| a.join("shared/fixtures"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no shared/fixtures beside {} (set BLKPROF_FIXTURES)",
                here.display()
            )
        });
    dir.join(p)
}

/// `ios` written as trace `name` in `dir`; its path.
pub(crate) fn trace(dir: &Path, name: &str, ios: &mut [Io]) -> PathBuf {
    let p = dir.join(name);
    write_trace(&p, ios).unwrap();
    p
}

/// The summary of the trace at `path`, with the default options.
pub(crate) fn summary(path: &Path) -> Summary {
    summarize(path, &Options::default()).unwrap()
}

/// The report (`report --json`) of the trace at `path`, with the default options.
pub(crate) fn report(path: &Path) -> JsonReport {
    summary(path).to_json()
}

/// blkprof run with `args` in UTC (so that nothing depends on the host's zone); what it did.
pub(crate) fn blkprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blkprof"))
        .args(args)
        .env("TZ", "UTC")
        .output()
        .expect("run blkprof")
}

/// The standard output of a run, which must have succeeded (exit 0).
pub(crate) fn stdout(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The report a run printed with `--json`; the run must have succeeded.
pub(crate) fn json_report(o: &Output) -> JsonReport {
    serde_json::from_str(&stdout(o)).unwrap()
}
