//! What each fuzz target does with libFuzzer's bytes: one input path of blkprof, run to its
//! end; a panic, an abort or an allocation beyond libFuzzer's limits is a finding. The
//! regression test (analyzer/tests/fuzz_regressions.rs) includes this file and replays every
//! committed finding through the same functions, so keep it free of libFuzzer.

pub mod framing;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use analyzer::check::{Rules, check, junit, write_table};
use analyzer::import::{ImportError, ImportStats};
use analyzer::series::Options;
use analyzer::summary::{JsonReport, summarize};
use tracer_common::format::TraceReader;

/// A target: what it does with one input.
pub type Target = fn(&[u8]);

/// Every target by name (the names of fuzz/fuzz_targets/*.rs).
pub const TARGETS: &[(&str, Target)] = &[
    ("trace_reader", trace_reader),
    ("ycsb", ycsb),
    ("cassandra_stress", cassandra_stress),
    ("cassandra_log", cassandra_log),
    ("import_msr", import_msr),
    ("import_blk", import_blk),
    ("check_rules", check_rules),
    ("report_render", report_render),
    ("export", export),
];

/// The input as a trace file (see [`framing`]): open, scan, every chunk, then the report as
/// JSON and as text.
pub fn trace_reader(data: &[u8]) {
    let path = write_scratch("trace.blkp", &framing::trace_file(data));
    read_trace(&path);
}

/// The zone local times are read in: one with daylight-saving changes, so that the gaps and
/// folds of its civil times are exercised too.
fn zone() -> &'static analyzer::zone::Zone {
    static ZONE: std::sync::OnceLock<analyzer::zone::Zone> = std::sync::OnceLock::new();
    ZONE.get_or_init(|| {
        analyzer::zone::Zone::parse("Europe/Berlin").unwrap_or_else(|_| analyzer::zone::Zone::utc())
    })
}

pub fn ycsb(data: &[u8]) {
    let _ = analyzer::stress::parse_ycsb(
        Path::new("fuzz.txt"),
        &String::from_utf8_lossy(data),
        zone(),
    );
}

/// Parsed, then placed on the clock as `blkprof report --stress-start` does (cassandra-stress
/// prints elapsed seconds only).
pub fn cassandra_stress(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(mut run) = analyzer::stress::parse_cassandra_stress(Path::new("fuzz.txt"), &text) {
        let start = analyzer::stress::parse_start("2026-11-22T06:45:03Z").expect("a valid time");
        analyzer::stress::anchor(&mut run, start);
    }
}

pub fn cassandra_log(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = analyzer::stress::parse_cassandra_log(Path::new("system.log"), &text, zone());
}

pub fn import_msr(data: &[u8]) {
    import(data, analyzer::import::import_msr);
}

pub fn import_blk(data: &[u8]) {
    import(data, analyzer::import::import_blk);
}

/// Rules JSON, a 0 byte, a baseline (a `blkprof report --json`): checked against the report of
/// a golden trace, without the baseline and with it (when it parses).
pub fn check_rules(data: &[u8]) {
    let (rules, baseline) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(rules) = serde_json::from_slice::<Rules>(rules) else {
        return;
    };
    let baseline = serde_json::from_slice::<JsonReport>(baseline).ok();
    let mut baselines = vec![None];
    if baseline.is_some() {
        baselines.push(baseline.as_ref());
    }
    for b in baselines {
        let Ok(verdicts) = check(golden_report(), b, &rules, false) else {
            continue;
        };
        let mut out = Vec::new();
        write_table(&mut out, &verdicts).expect("writing into a Vec");
        let _ = junit(&verdicts, "fuzz");
    }
}

/// A saved report (`blkprof report --from-json`): when it reads and its series are sound,
/// rendered as `-o DIR` renders it (the page, every chart and heatmap as SVG) and as text.
pub fn report_render(data: &[u8]) {
    let Ok(j) = serde_json::from_slice::<JsonReport>(data) else {
        return;
    };
    if j.check_series().is_err() {
        return;
    }
    let _ = analyzer::html::render(&j);
    for d in &j.devices {
        for c in analyzer::plots::charts(&j, d) {
            let _ = c.svg();
        }
        for h in analyzer::plots::heatmaps(&j, d) {
            let _ = h.svg();
        }
    }
    let mut text = Vec::new();
    analyzer::text::write(&mut analyzer::terminal::Escaped::new(&mut text), &j)
        .expect("writing into a Vec");
}

/// The input as a trace file (see [`framing`]), exported as each row format and as Perfetto.
pub fn export(data: &[u8]) {
    use analyzer::export::{Format, export};
    let path = write_scratch("export.blkp", &framing::trace_file(data));
    for format in [Format::Iolog, Format::Iolog2, Format::Csv, Format::Jsonl] {
        let _ = export(&path, format, None, None, &mut std::io::sink());
    }
    let _ = analyzer::export::perfetto::export_perfetto(
        &path,
        &analyzer::export::perfetto::PerfettoOptions::default(),
        &mut std::io::sink(),
    );
}

type Importer = fn(&Path, &Path, bool) -> Result<ImportStats, ImportError>;

fn import(data: &[u8], importer: Importer) {
    let input = write_scratch("import.txt", data);
    let output = scratch("import.blkp");
    for skip_bad in [false, true] {
        if importer(&input, &output, skip_bad).is_ok() {
            read_trace(&output);
        }
    }
}

/// Read a trace as every command does: open, scan, every chunk; then the report.
fn read_trace(path: &Path) {
    let Ok(mut r) = TraceReader::open(path) else {
        return;
    };
    let _ = r.scan();
    let mut buf = Vec::new();
    while let Ok(true) = r.next_chunk(&mut buf) {}
    drop(r);
    let Ok(s) = summarize(path, &Options::default()) else {
        return;
    };
    // `blkprof check --baseline` reads what `blkprof report --json` writes.
    let json = serde_json::to_vec(&s.to_json()).expect("a report serializes");
    if let Err(e) = serde_json::from_slice::<JsonReport>(&json) {
        panic!("a report does not read back as a baseline: {e}");
    }
    let mut text = Vec::new();
    analyzer::text::write(&mut text, &s.to_json()).expect("writing into a Vec");
}

/// The report `check_rules` checks: of tests/data/cassandra-shaped-a.blkp, made once.
fn golden_report() -> &'static JsonReport {
    static REPORT: OnceLock<JsonReport> = OnceLock::new();
    REPORT.get_or_init(|| {
        let trace =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/cassandra-shaped-a.blkp");
        summarize(&trace, &Options::default())
            .expect("the golden trace reads")
            .to_json()
    })
}

/// Scratch files (the reader and the importers take paths): one per thread and name, in
/// $BLKPROF_FUZZ_TMP, else /dev/shm, else the temporary directory; removed when the thread ends.
struct Scratch {
    thread: usize,
    paths: Vec<PathBuf>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        thread: THREADS.fetch_add(1, Ordering::Relaxed),
        paths: Vec::new(),
    });
}

fn scratch(name: &str) -> PathBuf {
    SCRATCH.with_borrow_mut(|s| {
        static DIR: OnceLock<PathBuf> = OnceLock::new();
        let dir = DIR.get_or_init(|| {
            std::env::var_os("BLKPROF_FUZZ_TMP")
                .map(PathBuf::from)
                .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir()))
                .unwrap_or_else(std::env::temp_dir)
        });
        let p = dir.join(format!(
            "blkprof-fuzz-{}-{}-{name}",
            std::process::id(),
            s.thread
        ));
        if !s.paths.contains(&p) {
            s.paths.push(p.clone());
        }
        p
    })
}

fn write_scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch(name);
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}
