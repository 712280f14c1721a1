//! What the analyzer prints, pinned: every command's text, JSON and HTML on the golden traces
//! (tests/data), compared with the snapshots under tests/snapshots/ by insta. A refactor must
//! leave them unchanged; an intended change of output is its own commit with the snapshots
//! updated (`cargo insta review`, or `INSTA_UPDATE=always cargo test -p analyzer --test
//! snapshots` and read the diff).

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

#[expect(dead_code, reason = "each test crate uses part of the shared helpers")]
mod common;

use common::golden;
use std::path::PathBuf;
use std::process::Command;

/// Run blkprof from the golden data directory (so that paths print the same everywhere) and
/// return its standard output; it must exit with `code`.
fn run(args: &[&str], code: i32) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_blkprof"))
        .args(args)
        .current_dir(golden(""))
        .env("TZ", "UTC")
        .output()
        .expect("run blkprof");
    assert_eq!(
        o.status.code(),
        Some(code),
        "blkprof {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

const SHAPED: [&str; 3] = [
    "cassandra-shaped-a.blkp",
    "cassandra-shaped-b.blkp",
    "cassandra-shaped-bigger-writes.blkp",
];

const YCSB: [&str; 7] = [
    "cassandra-ycsb-a.blkp",
    "--stress",
    "cassandra-ycsb-a.ycsb-run.txt",
    "--stress",
    "cassandra-ycsb-a.ycsb-run.err",
    "--app-log",
    "cassandra-ycsb-a.system.log",
];

fn snap_name(trace: &str, what: &str) -> String {
    format!("{}-{what}", trace.trim_end_matches(".blkp"))
}

#[test]
fn report_text() {
    for t in SHAPED.iter().chain(["cassandra-ycsb-a.blkp"].iter()) {
        insta::assert_snapshot!(snap_name(t, "report-text"), run(&["report", t], 0));
    }
    insta::assert_snapshot!(
        "cassandra-ycsb-a-with-logs-report-text",
        run(
            &{
                let mut a = vec!["report"];
                a.extend(YCSB);
                a
            },
            0
        )
    );
}

#[test]
fn report_json() {
    for t in SHAPED.iter().chain(["cassandra-ycsb-a.blkp"].iter()) {
        insta::assert_snapshot!(
            snap_name(t, "report-json"),
            run(&["report", "--json", t], 0)
        );
    }
    let mut a = vec!["report", "--json"];
    a.extend(YCSB);
    insta::assert_snapshot!("cassandra-ycsb-a-with-logs-report-json", run(&a, 0));
}

/// The HTML report and its charts' SVGs, written by `report -o DIR` (the PNGs are rasterized
/// from the same SVGs).
#[test]
fn report_html_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let mut a = vec!["report", "-o", out];
    a.extend(YCSB);
    run(&a, 0);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    insta::assert_snapshot!("cassandra-ycsb-a-with-logs-files", names.join("\n"));
    for p in &files {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if has_extension(&name, &["html", "svg"]) {
            let body = std::fs::read_to_string(p).unwrap();
            // The HTML names the directory it was written to nowhere; keep it that way.
            assert!(!body.contains(out), "{name} names the scratch directory");
            insta::assert_snapshot!(format!("out-{name}"), body);
        }
    }
    assert!(
        names.iter().any(|n| has_extension(n, &["png"])),
        "charts are also written as PNG: {names:?}"
    );
}

#[test]
fn compare_text_and_json() {
    let mut a = vec!["compare"];
    a.extend(SHAPED);
    insta::assert_snapshot!("compare-shaped-text", run(&a, 0));
    a.push("--json");
    insta::assert_snapshot!("compare-shaped-json", run(&a, 0));
}

/// The real Cassandra trace (reads, writes, discards, flushes) laid onto a 4-disk RAID0.
#[test]
fn whatif_text_and_json() {
    let a = [
        "whatif",
        "--raid0",
        "4",
        "--chunk",
        "64K",
        "cassandra-ycsb-a.blkp",
    ];
    insta::assert_snapshot!("whatif-ycsb-a-raid0-4x64k-text", run(&a, 0));
    let mut a = a.to_vec();
    a.push("--json");
    insta::assert_snapshot!("whatif-ycsb-a-raid0-4x64k-json", run(&a, 0));
}

#[test]
fn check_against_a_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("a.json");
    std::fs::write(&base, run(&["report", "--json", SHAPED[0]], 0)).unwrap();
    let base = base.to_str().unwrap();
    insta::assert_snapshot!(
        "check-b-against-a",
        run(&["check", SHAPED[1], "--baseline", base], 0)
    );
    insta::assert_snapshot!(
        "check-bigger-writes-against-a",
        run(&["check", SHAPED[2], "--baseline", base], 1)
    );
}

/// Exports: the first and last lines of each format, and how many lines (the whole file is
/// large; its columns and encoding are what a refactor could change).
#[test]
fn export_formats() {
    for format in ["csv", "jsonl", "iolog", "iolog2"] {
        let s = run(&["export", "--format", format, SHAPED[0]], 0);
        let lines: Vec<&str> = s.lines().collect();
        let n = lines.len();
        let head = lines[..n.min(12)].join("\n");
        let tail = lines[n.saturating_sub(4)..].join("\n");
        insta::assert_snapshot!(
            format!("export-{format}"),
            format!("{n} lines\n{head}\n...\n{tail}\n")
        );
    }
}

/// A saved report renders exactly as the trace it came from: text, JSON, HTML and charts.
#[test]
fn a_saved_report_renders_as_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("saved.json");
    // With the heatmaps, which -o DIR makes (and draws) and --json leaves out unless asked.
    let mut a = vec!["report", "--json", "--heatmaps"];
    a.extend(YCSB);
    let json = run(&a, 0);
    assert!(json.contains("\"heatmaps\": {"));
    std::fs::write(&saved, &json).unwrap();
    let saved = saved.to_str().unwrap();
    let mut a = vec!["report", "--heatmaps"];
    a.extend(YCSB);
    same_text(
        &run(&["report", "--from-json", saved], 0),
        &run(&a, 0),
        "text",
    );
    same_text(
        &run(&["report", "--from-json", saved, "--json"], 0),
        &json,
        "JSON",
    );
    let (from_trace, from_json) = (dir.path().join("t"), dir.path().join("j"));
    let mut a = vec!["report", "-o", from_trace.to_str().unwrap()];
    a.extend(YCSB);
    run(&a, 0);
    run(
        &[
            "report",
            "--from-json",
            saved,
            "-o",
            from_json.to_str().unwrap(),
        ],
        0,
    );
    for e in std::fs::read_dir(&from_trace).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !has_extension(&name, &["html", "svg"]) {
            continue;
        }
        // Files are named after the input: the trace's stem, or the saved report's.
        let other = from_json.join(name.replacen("cassandra-ycsb-a", "saved", 1));
        same_text(
            &std::fs::read_to_string(&p).unwrap(),
            &std::fs::read_to_string(&other).unwrap_or_default(),
            &name,
        );
    }
    // A report that is not one: exit 2 and say what was expected.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"devices\": 3}").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_blkprof"))
        .args(["report", "--from-json", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a blkprof report"));
}

/// Equal, or a panic naming the first line that differs (not the whole of two SVGs).
fn same_text(a: &str, b: &str, what: &str) {
    if a == b {
        return;
    }
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.split('>').collect(), b.split('>').collect());
    let i = la
        .iter()
        .zip(&lb)
        .position(|(x, y)| x != y)
        .unwrap_or(la.len().min(lb.len()));
    panic!(
        "{what} differs at element {i} of {}/{}: {:?} vs {:?}",
        la.len(),
        lb.len(),
        la.get(i),
        lb.get(i)
    );
}

/// Whether a file name ends in one of `extensions` (as blkprof writes them: lower case).
fn has_extension(name: &str, extensions: &[&str]) -> bool {
    std::path::Path::new(name)
        .extension()
        .is_some_and(|e| extensions.iter().any(|x| e == *x))
}
