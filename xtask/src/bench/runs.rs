//! One fio run on the loop device per arm of `cargo xtask bench`: traced by blkprof-trace (of
//! this device or another), by its --no-records mode, or by biolatency.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use analyzer::numeric::median;
use anyhow::{Context as _, Result};
use tracer_common::format::TraceReader;

use super::accounting::{diskstats_reads, proc_cpu_s, proc_hwm_mib, prog_stats};
use super::device::Loop;
use super::fio::fio_iops;
use super::remove_scratch;
use super::tracer::{interrupt, spawn_biolatency, spawn_tracer, stop_tracer};

/// What a traced run measured.
pub(super) struct Traced {
    pub(super) iops: f64,
    /// Records in the trace file.
    pub(super) records: u64,
    /// Reads the kernel counted meanwhile (/proc/diskstats).
    pub(super) kernel_ios: u64,
    pub(super) drops: u64,
    pub(super) misses: u64,
    /// The programs' run time per completion (`bpf_stats`; 0 when off).
    pub(super) ns_per_io: f64,
    /// Each program's share of `ns_per_io`: (tracepoint, ns per IO).
    pub(super) per_program: Vec<(String, f64)>,
    /// The daemon's CPU while fio ran, in % of one core.
    pub(super) cpu_pct: f64,
    pub(super) rss_mib: f64,
    pub(super) bytes_per_io: f64,
}

/// "`block_io_start` 250 ns, ...": the median over runs of each program's ns per IO, for the
/// programs that ran.
pub(super) fn per_program_medians(runs: &[Traced]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in runs.iter().flat_map(|t| &t.per_program) {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names
        .iter()
        .filter_map(|&name| {
            let v: Vec<f64> = runs
                .iter()
                .flat_map(|t| &t.per_program)
                .filter(|(n, _)| n == name)
                .map(|&(_, ns)| ns)
                .collect();
            let m = median(v);
            (m >= 0.5).then(|| format!("{name} {m:.0} ns"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// fio on `lp` while blkprof-trace traces `traced` (`lp` itself, or another device for the
/// cost of programs that only filter).
pub(super) fn traced_round(
    bin: &Path,
    lp: &Loop,
    traced: &Loop,
    seconds: u64,
    out: &Path,
) -> Result<Traced> {
    remove_scratch(out);
    let child = spawn_tracer(
        bin,
        &[
            "--device",
            traced.name(),
            "--output",
            &out.display().to_string(),
            "--quiet",
        ],
    )?;
    let pid = child.id();
    let before = diskstats_reads(lp.name())?;
    // The daemon's CPU while fio runs (its start-up, reading the kernel's BTF and loading the
    // programs, is before).
    let cpu0 = proc_cpu_s(pid);
    let t0 = Instant::now();
    let iops = fio_iops(&lp.dev, seconds)?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = proc_cpu_s(pid) - cpu0;
    let rss = proc_hwm_mib(pid);
    let after = diskstats_reads(lp.name())?;
    stop_tracer(child)?;
    let mut r = TraceReader::open(out)?;
    let mut buf = Vec::new();
    let mut records = 0u64;
    while r.next_chunk(&mut buf)? {
        records += buf.len() as u64;
    }
    let t = r.trailer().context("trace has no trailer")?.clone();
    let ns: u64 = t.counters_end.programs.iter().map(|p| p.run_time_ns).sum();
    let completions = t
        .counters_end
        .programs
        .iter()
        .find(|p| p.name == "block_rq_complete")
        .map_or(0, |p| p.run_cnt);
    let bytes = std::fs::metadata(out)?.len();
    Ok(Traced {
        iops,
        records,
        kernel_ios: after - before,
        drops: t.counters_end.ring_drops,
        misses: t.counters_end.reported_misses(),
        ns_per_io: ns as f64 / completions.max(1) as f64,
        per_program: t
            .counters_end
            .programs
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.run_time_ns as f64 / completions.max(1) as f64,
                )
            })
            .collect(),
        cpu_pct: cpu / wall * 100.0,
        rss_mib: rss,
        bytes_per_io: bytes as f64 / records.max(1) as f64,
    })
}

/// `blkprof-trace --no-records` (the in-kernel aggregates only) on `lp`: (IOPS, program time
/// per completion in ns, 0 unless `bpf_stats` is on).
pub(super) fn aggregates_round(bin: &Path, lp: &Loop, seconds: u64) -> Result<(f64, f64)> {
    let child = spawn_tracer(bin, &["--device", lp.name(), "--quiet", "--no-records"])?;
    let ours = |n: &str| n.starts_with("blkprof");
    let (ns0, c0) = prog_stats(ours, "complet")?;
    let iops = fio_iops(&lp.dev, seconds)?;
    let (ns1, c1) = prog_stats(ours, "complet")?;
    stop_tracer(child)?;
    Ok((
        iops,
        ns1.saturating_sub(ns0) as f64 / c1.saturating_sub(c0).max(1) as f64,
    ))
}

/// `biolatency -Q -D` on the machine while fio reads `lp`: (IOPS, program time per completion in
/// ns, 0 unless `bpf_stats` is on).
pub(super) fn biolatency_round(lp: &Loop, seconds: u64) -> Result<(f64, f64)> {
    let mut child = spawn_biolatency()?;
    // Wait until its programs are loaded.
    let deadline = Instant::now() + Duration::from_secs(20);
    while prog_stats(
        |n| n.starts_with("block_rq_") && !n.starts_with("blkprof"),
        "complete",
    )?
    .1 == 0
        && Instant::now() < deadline
    {
        // Tiny IO so the programs have run once (run_cnt > 0 shows they are attached).
        #[expect(
            clippy::let_underscore_must_use,
            reason = "only a nudge so that the programs run once; the loop checks whether they did, until its deadline"
        )]
        let _ = Command::new("dd")
            .args([
                "if=/dev/zero",
                &format!("of={}", lp.dev),
                "bs=4k",
                "count=1",
                "oflag=direct",
                "status=none",
            ])
            .status();
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ns0, c0) = prog_stats(|n| n.starts_with("block_rq_"), "complete")?;
    let iops = fio_iops(&lp.dev, seconds)?;
    let (ns1, c1) = prog_stats(|n| n.starts_with("block_rq_"), "complete")?;
    interrupt(&child);
    #[expect(
        clippy::let_underscore_must_use,
        reason = "reaps biolatency after its SIGINT; its exit status says nothing about the figures"
    )]
    let _ = child.wait();
    Ok((iops, (ns1 - ns0) as f64 / (c1 - c0).max(1) as f64))
}
