//! Every input the fuzzers found a crash with (fuzz/regressions/TARGET/) and every committed
//! seed (fuzz/corpus/TARGET/) goes through the same code as its fuzz target, on stable, in
//! every `cargo test`: each must return, not panic. Findings whose fix is pending elsewhere
//! are listed in fuzz/regressions/open.txt and replayed by an ignored test.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::path::{Path, PathBuf};

// The fuzz crate's harness, linted there by fuzz/Cargo.toml's table (clippy::all).
#[path = "../../fuzz/src/lib.rs"]
#[expect(
    unreachable_pub,
    clippy::pedantic,
    clippy::let_underscore_must_use,
    reason = "the fuzz crate's code, held to the fuzz crate's lints"
)]
mod harness;

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(kind)
        .join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// fuzz/regressions/open.txt: "TARGET/FILE" of each finding not fixed yet.
fn open() -> Vec<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/open.txt");
    std::fs::read_to_string(list)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

fn is_open(p: &Path, open: &[String]) -> bool {
    let parent = p.parent().and_then(|d| d.file_name()).unwrap();
    let id = Path::new(parent).join(p.file_name().unwrap());
    open.iter().any(|o| Path::new(o) == id)
}

/// Run each input that `pick` takes through its target; the ones that panicked, with the panic.
fn replay(kind: &str, pick: impl Fn(&Path) -> bool) -> (usize, Vec<String>) {
    let mut n = 0;
    let mut failed = Vec::new();
    for &(target, run) in harness::TARGETS {
        for p in inputs(kind, target).into_iter().filter(|p| pick(p)) {
            let data = std::fs::read(&p).unwrap();
            n += 1;
            if let Err(e) = std::panic::catch_unwind(|| run(&data)) {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| {
                        e.downcast_ref::<&str>()
                            .map(std::string::ToString::to_string)
                    })
                    .unwrap_or_default();
                failed.push(format!("{target} {}: {msg}", p.display()));
            }
        }
    }
    (n, failed)
}

#[test]
fn every_fuzz_finding_returns() {
    let open = open();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    for o in &open {
        assert!(
            dir.join(o).is_file(),
            "open.txt names {o}, which is not there"
        );
    }
    let (n, failed) = replay("regressions", |p| !is_open(p, &open));
    assert!(failed.is_empty(), "panicked:\n{}", failed.join("\n"));
    eprintln!("{n} findings replayed ({} open ones left out)", open.len());
}

#[test]
#[ignore = "fixes pending in files other changes are editing (fuzz/regressions/open.txt)"]
fn open_fuzz_findings_return() {
    let open = open();
    let (_, failed) = replay("regressions", |p| is_open(p, &open));
    assert!(failed.is_empty(), "panicked:\n{}", failed.join("\n"));
}

#[test]
fn every_committed_seed_returns() {
    let (n, failed) = replay("corpus", |_| true);
    assert!(n >= 5, "the committed seeds are missing ({n} found)");
    assert!(failed.is_empty(), "panicked:\n{}", failed.join("\n"));
}
