//! `cargo xtask fuzz`: the fuzz targets of fuzz/ (cargo-fuzz, libFuzzer, nightly), each for a
//! while, from seed corpora made from the repository's own files and the shared fixtures.
//!
//! Corpora grow in target/fuzz-corpus/TARGET (seeds are copied there, so runs never write into
//! the repository); findings go to target/fuzz-artifacts/TARGET, libFuzzer's output to
//! target/fuzz-logs/TARGET.log.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use tracer_common::format::{FrameKind, TraceReader, TraceWriter, comm_bytes};

use crate::util::{have, output, root, run};

#[path = "../../fuzz/src/framing.rs"]
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "seeds need framed(); trace_file() is the targets' side (framing's own tests use it)"
    )
)]
#[expect(
    unreachable_pub,
    clippy::doc_markdown,
    clippy::cast_possible_truncation,
    clippy::bool_to_int_with_if,
    reason = "shared with the fuzz crate, which has its own lints"
)]
mod framing;

/// libFuzzer's limits: an input that needs more memory than this, or more time, is a finding.
const RSS_LIMIT_MB: u32 = 2048;
const TIMEOUT_S: u32 = 30;
/// Seeds cut from large files stay under this.
const SLICE_BYTES: usize = 16 << 10;
/// Records (uncompressed) a framed trace seed keeps, so that it runs fast.
const FRAMED_RECORD_BYTES: usize = 40 << 10;

/// Largest input libFuzzer makes: whole golden traces for the reader, less for text.
fn max_len(target: &str) -> usize {
    if target == "trace_reader" {
        256 << 10
    } else {
        64 << 10
    }
}

struct Outcome {
    target: String,
    seconds: f64,
    execs: u64,
    /// libFuzzer's corpus at the end ("corp: 794/3531Kb"): the inputs that keep its coverage.
    corpus: Option<String>,
    /// Files in the corpus directory: also the inputs libFuzzer has since superseded.
    corpus_files: usize,
    corpus_bytes: u64,
    cov: Option<u64>,
    features: Option<u64>,
    findings: Vec<PathBuf>,
    log: PathBuf,
    ok: bool,
}

/// How long each target runs.
#[derive(Clone, Copy)]
pub(crate) enum Budget {
    Each {
        seconds: u64,
    },
    /// Whatever the build leaves of `total_s` shared among the targets, each between `min_s`
    /// and `max_s`; a few seconds per target go to starting it and loading its corpus.
    Within {
        total_s: u64,
        min_s: u64,
        max_s: u64,
    },
}

/// The sanitizer the targets are built with (`cargo fuzz build -s`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Sanitizer {
    Address,
    None,
}

/// How the targets are built.
#[derive(Clone, Copy)]
pub(crate) enum Optimize {
    /// cargo fuzz's release build (opt-level 3), into target/fuzz: for fuzzing a while.
    Full,
    /// opt-level 1, into target/fuzz-smoke (so that switching does not rebuild the other): a
    /// smoke pass's build, 246 s against 297 cold, whose targets run 0.74-0.81 as many inputs a
    /// second (BENCHMARKS.md).
    Quick,
}

/// Run `targets` (all when empty), one after another; fails on any finding.
pub(crate) fn fuzz(
    budget: Budget,
    sanitizer: Sanitizer,
    optimize: Optimize,
    targets: &[String],
) -> Result<()> {
    crate::setup::nightly()?;
    cargo_fuzz()?;
    let all = all_targets()?;
    for t in targets {
        if !all.contains(t) {
            bail!("no fuzz target {t:?}: the targets are {}", all.join(", "));
        }
    }
    let targets = if targets.is_empty() {
        all
    } else {
        targets.to_vec()
    };
    let started = Instant::now();
    build(sanitizer, optimize)?;
    let built_s = started.elapsed().as_secs();
    let seconds = match budget {
        Budget::Each { seconds } => seconds,
        Budget::Within {
            total_s,
            min_s,
            max_s,
        } => {
            let n = targets.len() as u64;
            (total_s.saturating_sub(built_s + 3 * n) / n).clamp(min_s, max_s)
        }
    };
    eprintln!("fuzz: built in {built_s} s; {seconds} s per target");
    // The targets write each input to a file (the reader takes a path): in memory.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let scratch = tmp.join(format!("blkprof-xtask-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut outcomes = Vec::new();
    for t in &targets {
        let seeds = seed(t)?;
        let o = run_target(t, optimize, seconds, &scratch);
        let o = o.with_context(|| format!("fuzz target {t}"));
        match o {
            Ok(o) => {
                report(&o, seeds);
                outcomes.push(o);
            }
            Err(e) => {
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "best-effort cleanup of the scratch directory; the target's error is what is returned"
                )]
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(e);
            }
        }
    }
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of the scratch directory"
    )]
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!(
        "fuzz: {} targets in {:.0} s",
        outcomes.len(),
        started.elapsed().as_secs_f64()
    );
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.ok).collect();
    if failed.is_empty() {
        return Ok(());
    }
    let mut msg = String::from("fuzzing found crashes:\n");
    for o in failed {
        if o.findings.is_empty() {
            msg += &format!(
                "  {}: libFuzzer failed without a finding; see {}\n",
                o.target,
                o.log.display()
            );
        }
        for f in &o.findings {
            msg += &format!(
                "  {}: {} (log {})\n",
                o.target,
                f.display(),
                o.log.display()
            );
        }
    }
    msg += &format!(
        "replay one with `{} FILE`; keep it as a regression test in fuzz/regressions/TARGET/ \
         (analyzer/tests/fuzz_regressions.rs replays them)",
        binary("TARGET", optimize)?.display()
    );
    bail!(msg)
}

/// cargo-fuzz, installed once like bpf-linker.
fn cargo_fuzz() -> Result<()> {
    if have("cargo-fuzz") || crate::setup::cargo_home().join("bin/cargo-fuzz").exists() {
        return Ok(());
    }
    eprintln!("setup: installing cargo-fuzz (about a minute, once)");
    run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
        .context("installing cargo-fuzz failed")
}

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// The targets: `fuzz/fuzz_targets/*.rs`.
fn all_targets() -> Result<Vec<String>> {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| dir.display().to_string())?
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "rs").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    v.sort();
    Ok(v)
}

/// A command under the nightly toolchain, without the stable toolchain cargo set for xtask.
fn nightly(program: &str) -> Command {
    let mut c = Command::new("rustup");
    c.args(["run", "nightly", program]);
    for var in [
        "CARGO",
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTDOC",
        "CARGO_TARGET_DIR",
    ] {
        c.env_remove(var);
    }
    c.current_dir(root());
    c
}

fn target_dir(optimize: Optimize) -> PathBuf {
    root().join(match optimize {
        Optimize::Full => "target/fuzz",
        Optimize::Quick => "target/fuzz-smoke",
    })
}

fn build(sanitizer: Sanitizer, optimize: Optimize) -> Result<()> {
    let s = match sanitizer {
        Sanitizer::Address => "address",
        Sanitizer::None => "none",
    };
    let mut c = nightly("cargo");
    c.args(["fuzz", "build", "-s", s, "--fuzz-dir"])
        .arg(fuzz_dir())
        .arg("--target-dir")
        .arg(target_dir(optimize));
    if let Optimize::Quick = optimize {
        // cargo fuzz builds with --release; this overrides the profile's level.
        c.env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1");
    }
    run(&mut c)
}

fn binary(target: &str, optimize: Optimize) -> Result<PathBuf> {
    let vv = output(nightly("rustc").arg("-vV"))?;
    let host = vv
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .context("rustc -vV shows no host")?;
    Ok(target_dir(optimize)
        .join(host.trim())
        .join("release")
        .join(target))
}

fn run_target(target: &str, optimize: Optimize, seconds: u64, scratch: &Path) -> Result<Outcome> {
    let corpus = root().join("target/fuzz-corpus").join(target);
    let artifacts = root().join("target/fuzz-artifacts").join(target);
    let logs = root().join("target/fuzz-logs");
    std::fs::create_dir_all(&artifacts)?;
    std::fs::create_dir_all(&logs)?;
    let log = logs.join(format!("{target}.log"));
    let log_file = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
    let started = Instant::now();
    let status = Command::new(binary(target, optimize)?)
        .arg(&corpus)
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-max_len={}", max_len(target)))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-malloc_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-timeout={TIMEOUT_S}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .env("BLKPROF_FUZZ_TMP", scratch)
        .current_dir(root())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .status()
        .with_context(|| format!("cannot run the fuzz target {target} (built?)"))?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let stat = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    // "#1514	DONE   cov: 5845 ft: 15061 corp: 103/15799Kb ..." (the last status line)
    let last_status = text
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains(" cov: "));
    let word = |name: &str| {
        last_status.and_then(|l| {
            let rest = &l[l.find(name)? + name.len()..];
            rest.split_whitespace().next()
        })
    };
    let field = |name: &str| word(name)?.parse::<u64>().ok();
    let findings: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| {
            l.split_once("Test unit written to ")?
                .1
                .split_whitespace()
                .next()
        })
        .map(PathBuf::from)
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("slow-unit-"))
        })
        .collect();
    let (corpus_files, corpus_bytes) = dir_size(&corpus);
    Ok(Outcome {
        target: target.to_string(),
        seconds: started.elapsed().as_secs_f64(),
        execs: stat("stat::number_of_executed_units:").unwrap_or(0),
        corpus: word("corp: ").map(String::from),
        corpus_files,
        corpus_bytes,
        cov: field("cov: "),
        features: field("ft: "),
        ok: status.success() && findings.is_empty(),
        findings,
        log,
    })
}

fn report(o: &Outcome, seeds: usize) {
    let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    eprintln!(
        "fuzz {:<17} {:>9} execs in {:>4.0} s ({:>6.0}/s), corpus {} (directory {} files, {:.1} MB; {} seeds), cov {}, features {}, crashes {}{}",
        o.target,
        o.execs,
        o.seconds,
        o.execs as f64 / o.seconds.max(1e-3),
        o.corpus.as_deref().unwrap_or("-"),
        o.corpus_files,
        o.corpus_bytes as f64 / 1e6,
        seeds,
        n(o.cov),
        n(o.features),
        o.findings.len(),
        if o.ok {
            String::new()
        } else {
            format!(" (log {})", o.log.display())
        }
    );
    if !o.ok {
        // The panic message or the sanitizer's report, from the log.
        let text = std::fs::read_to_string(&o.log).unwrap_or_default();
        for l in text
            .lines()
            .filter(|l| l.contains("panicked at") || l.starts_with("==") || l.contains("ERROR:"))
            .take(6)
        {
            eprintln!("    {l}");
        }
    }
}

fn dir_size(dir: &Path) -> (usize, u64) {
    std::fs::read_dir(dir).map_or((0, 0), |rd| {
        rd.filter_map(|e| e.ok()?.metadata().ok())
            .filter(std::fs::Metadata::is_file)
            .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
    })
}

// ---------------------------------------------------------------- seeds

/// Copy `target`'s seeds into its corpus: the committed ones (fuzz/corpus/TARGET) and those
/// made from tests/data and the shared fixtures. Returns how many.
fn seed(target: &str) -> Result<usize> {
    let dir = root().join("target/fuzz-corpus").join(target);
    std::fs::create_dir_all(&dir)?;
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(fuzz_dir().join("corpus").join(target)) {
        for e in rd {
            let p = e?.path();
            seeds.push((name_of(&p), std::fs::read(&p)?));
        }
    }
    let data = root().join("tests/data");
    let fixtures = fixtures();
    let texts = |seeds: &mut Vec<(String, Vec<u8>)>, files: &[PathBuf]| -> Result<()> {
        for p in files {
            let bytes = std::fs::read(p).with_context(|| p.display().to_string())?;
            for (i, s) in slices(&bytes, SLICE_BYTES).into_iter().enumerate() {
                seeds.push((format!("{}.{i}", name_of(p)), s));
            }
        }
        Ok(())
    };
    match target {
        "trace_reader" | "export" => trace_seeds(&data, &mut seeds)?,
        "report_render" => {
            // Saved reports of earlier versions, and this version's of each golden trace.
            for p in files_in(Some(&data), "old-reports", ".json") {
                seeds.push((name_of(&p), std::fs::read(&p)?));
            }
            for p in files_in(Some(&data), "", ".blkp") {
                let opts = analyzer::series::Options::default();
                if let Ok(s) = analyzer::summary::summarize(&p, &opts) {
                    seeds.push((name_of(&p), serde_json::to_vec(&s.to_json())?));
                }
            }
        }
        "ycsb" => {
            let mut files = vec![
                data.join("cassandra-ycsb-a.ycsb-run.txt"),
                data.join("cassandra-ycsb-a.ycsb-run.err"),
            ];
            files.extend(files_in(fixtures.as_deref(), "ycsb", ""));
            texts(&mut seeds, &files)?;
        }
        "cassandra_stress" => texts(
            &mut seeds,
            &[
                data.join("cassandra-stress-mixed.txt"),
                data.join("cassandra-stress-write.txt"),
            ],
        )?,
        "cassandra_log" => {
            let mut files = vec![data.join("cassandra-ycsb-a.system.log")];
            files.extend(files_in(fixtures.as_deref(), "cassandra", ".log"));
            texts(&mut seeds, &files)?;
        }
        "import_msr" => texts(&mut seeds, &files_in(fixtures.as_deref(), "msr", ".csv"))?,
        "check_rules" => {
            // Each committed rules file with each saved report as the baseline.
            let rules: Vec<(String, Vec<u8>)> = seeds.clone();
            for p in files_in(Some(&data), "old-reports", ".json") {
                let baseline = std::fs::read(&p)?;
                for (name, r) in &rules {
                    let mut s = r.clone();
                    s.push(0);
                    s.extend_from_slice(&baseline);
                    seeds.push((format!("{name}+{}", name_of(&p)), s));
                }
            }
        }
        _ => {}
    }
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
    }
    Ok(seeds.len())
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().trim_start_matches("seed-").to_string())
        .unwrap_or_default()
}

/// The shared fixtures beside the repository (or `$BLKPROF_FIXTURES`), as the analyzer's tests
/// find them; seeds from them are left out when there are none.
fn fixtures() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("BLKPROF_FIXTURES") {
        return Some(PathBuf::from(d));
    }
    let found = root()
        .ancestors()
        .map(|a| a.join("shared/fixtures"))
        .find(|d| d.is_dir());
    if found.is_none() {
        eprintln!("fuzz: no shared/fixtures beside the repository: seeds from tests/data only");
    }
    found
}

fn files_in(base: Option<&Path>, sub: &str, suffix: &str) -> Vec<PathBuf> {
    let Some(rd) = base.and_then(|b| std::fs::read_dir(b.join(sub)).ok()) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// `bytes` cut at line ends into pieces of at most `max` bytes (a longer line is cut anywhere).
fn slices(bytes: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let mut end = rest.len().min(max);
        if end < rest.len()
            && let Some(nl) = rest[..end].iter().rposition(|&b| b == b'\n')
        {
            end = nl + 1;
        }
        out.push(rest[..end].to_vec());
        rest = &rest[end..];
    }
    out
}

/// The golden traces whole (format version 1); each framed (fuzz/src/framing.rs) with its
/// first records, stats frames and trailer; and its first records rewritten as a version 2
/// trace by the real writer, whole and framed.
fn trace_seeds(data: &Path, seeds: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let records = FrameKind::Records as u8;
    let trailer = FrameKind::Trailer as u8;
    for p in files_in(Some(data), "", ".blkp") {
        let name = name_of(&p);
        let file = std::fs::read(&p)?;
        let mut kept = 0;
        let f = framed(&file, |kind, len| {
            if kind == trailer || kept < FRAMED_RECORD_BYTES {
                if kind == records {
                    // Compressed length; the records take about 1.5 times that.
                    kept += len * 3 / 2;
                }
                return true;
            }
            false
        });
        seeds.push((format!("{name}.framed"), f));
        let v2 =
            std::env::temp_dir().join(format!("blkprof-xtask-fuzz-{}-{name}", std::process::id()));
        let res = rewrite_v2(&p, &v2, 1500);
        let bytes = std::fs::read(&v2);
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup of the temporary copy; the rewrite's and the read's errors are returned next"
        )]
        let _ = std::fs::remove_file(&v2);
        res?;
        let bytes = bytes?;
        seeds.push((format!("{name}.v2-framed"), framed(&bytes, |_, _| true)));
        seeds.push((format!("{name}.v2.blkp"), bytes));
        seeds.push((name, file));
    }
    Ok(())
}

fn framed(file: &[u8], keep: impl FnMut(u8, usize) -> bool) -> Vec<u8> {
    framing::framed(file, keep).unwrap_or_default()
}

/// The first `n` records of `src` written to `dst` in the current format version, in chunks
/// of 500, with the source's last stats frame and trailer.
fn rewrite_v2(src: &Path, dst: &Path, n: usize) -> Result<()> {
    let mut r = TraceReader::open(src)?;
    let scan = r.scan()?;
    let mut w = TraceWriter::create(dst, r.header())?;
    let mut buf = Vec::new();
    let mut written = 0;
    'chunks: while r.next_chunk(&mut buf)? {
        for rec in &buf {
            let comm = comm_bytes(&r.tasks()[rec.task as usize].comm);
            w.push(rec, &comm)?;
            written += 1;
            if written % 500 == 0 {
                w.flush_chunk()?;
            }
            if written == n {
                break 'chunks;
            }
        }
    }
    if let Some(st) = &scan.last_stats {
        w.write_stats(st)?;
    }
    w.finish(&scan.trailer.unwrap_or_default())?;
    Ok(())
}
