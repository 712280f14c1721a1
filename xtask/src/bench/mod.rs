//! `cargo xtask bench`: the tracer's overhead, measured side by side in one run.
//!
//! fio 4 KB random reads at iodepth 32 on a loop device over /dev/shm (the fastest blk-mq
//! device here), alternating untraced and traced runs; the in-kernel cost per IO of our
//! programs (`bpf_stats`) next to libbpf-tools `biolatency -Q -D` measured the same way; the
//! daemon's CPU and peak RSS; bytes per IO on disk. The other benchmarks: the CPU per IO at a
//! fixed rate (`cpu`), the agent's modes (`agent`), the analyzer's rate (`analyzer_rate`) and
//! the half-record join (`join`).

mod accounting;
mod agent;
pub(crate) mod analyzer_rate;
mod cpu;
mod device;
mod fio;
pub(crate) mod join;
mod runs;
mod throughput;
mod tracer;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

pub(crate) use agent::bench_agent;
pub(crate) use cpu::bench_cpu;
pub(crate) use throughput::bench;

use crate::util::{build_release, is_root, root};

/// What every benchmark that loads programs needs: root, and the release binaries built.
fn require_root_and_build() -> Result<()> {
    if !is_root() {
        bail!(
            "benchmarks load eBPF programs and create loop devices: run `cargo xtask bench` as root"
        );
    }
    build_release()
}

/// Run `f`, then put `kernel.bpf_stats_enabled` back as it was (the rounds turn it on and off).
fn keeping_bpf_stats(f: impl FnOnce() -> Result<()>) -> Result<()> {
    let stats_before =
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let res = f();
    #[expect(
        clippy::let_underscore_must_use,
        reason = "puts the sysctl back as best it can; the benchmark's own result is what is returned"
    )]
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", stats_before.trim());
    res
}

/// Another build of the tracer (`BLKPROF_BENCH_BASELINE`, say of the commit before a probe
/// change), run in every round beside ours: before/after figures from one run instead of two
/// noisy ones.
fn baseline_tracer() -> Option<PathBuf> {
    std::env::var_os("BLKPROF_BENCH_BASELINE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Our tracer, as built by `require_root_and_build`.
fn tracer_bin() -> PathBuf {
    root().join("target/release/blkprof-trace")
}

/// The scratch trace file of a benchmark: `name` and this process's pid, in the temporary
/// directory.
fn scratch_trace(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}-{}.blkp", std::process::id()))
}

/// Remove a scratch file (a round's trace, its .hlog side file) if it is there.
fn remove_scratch(path: &Path) {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort: the file is not there before the first round, and a leftover scratch file is no failure of the benchmark"
    )]
    let _ = std::fs::remove_file(path);
}

/// (first quartile, median, third quartile), nearest rank.
fn quartiles(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "an index: (len - 1) * q rounded, q in [0, 1]"
    )]
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.5), at(0.75))
}
