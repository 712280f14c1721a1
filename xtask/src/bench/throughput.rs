//! `cargo xtask bench`'s throughput rounds: fio as fast as it goes, untraced and per arm, the
//! ratios per round and the programs' cost with `bpf_stats`; then the rounds again with
//! completions on the submitting CPU, and the table.

use std::path::{Path, PathBuf};

use analyzer::numeric::median;
use anyhow::{Context as _, Result};

use super::accounting::bpf_stats;
use super::device::{Loop, QueueSetting};
use super::fio::{fio_iops, fio_iops_busy};
use super::runs::{Traced, aggregates_round, biolatency_round, per_program_medians, traced_round};
use super::{
    baseline_tracer, keeping_bpf_stats, quartiles, remove_scratch, require_root_and_build,
    scratch_trace, tracer_bin,
};

/// The rounds again with completions on the submitting CPU: per round, the traced/untraced
/// and biolatency/untraced throughput, the traced run's `bpf_stats` cost, biolatency's.
#[derive(Default)]
struct SameCpu {
    ratios: Vec<f64>,
    bio_ratios: Vec<f64>,
    traced: Vec<Traced>,
    bio_ns: Vec<f64>,
}

/// The loop device completes each request in a softirq on another CPU than the one that
/// submitted it (seen in `perf record -a`: the probe's completion program runs in ksoftirqd/0
/// while fio submits on CPU 1), so every request's state in the probe moves between CPUs twice
/// per IO. A device with a queue per CPU (NVMe) completes on the submitting CPU; `rq_affinity`
/// 2 makes the loop device do the same. These rounds measure untraced, traced and biolatency
/// that way: the difference to the main rounds is what the moving costs.
fn same_cpu_rounds(
    ours: &Path,
    lp: &Loop,
    seconds: u64,
    rounds: usize,
    out: &Path,
) -> Result<SameCpu> {
    let _affinity = QueueSetting::set(lp.name(), "rq_affinity", "2")?;
    let mut r = SameCpu::default();
    for round in 0..rounds {
        bpf_stats(false)?;
        let (mut u, mut t, mut b) = (0.0, 0.0, 0.0);
        for k in 0..3 {
            match (k + round) % 3 {
                0 => u = fio_iops(&lp.dev, seconds)?,
                1 => t = traced_round(ours, lp, lp, seconds, out)?.iops,
                _ => b = biolatency_round(lp, seconds)?.0,
            }
        }
        bpf_stats(true)?;
        let mut st = traced_round(ours, lp, lp, seconds.min(5), out)?;
        let bio_ns = biolatency_round(lp, seconds.min(5))?.1;
        eprintln!(
            "round {} with completions on the submitting CPU: untraced {u:.0} IOPS | blkprof {t:.0} IOPS ({:.3}), {:.0} ns/IO | biolatency {b:.0} IOPS ({:.3}), {bio_ns:.0} ns/IO",
            round + 1,
            t / u,
            st.ns_per_io,
            b / u,
        );
        st.iops = t;
        r.ratios.push(t / u);
        r.bio_ratios.push(b / u);
        r.traced.push(st);
        r.bio_ns.push(bio_ns);
    }
    Ok(r)
}

/// What every round runs on.
struct Setup {
    /// Our tracer.
    ours: PathBuf,
    /// The device fio reads.
    lp: Loop,
    /// A second, idle device: tracing it while fio reads `lp` runs our programs for every IO
    /// up to the device filter, the cost of being attached.
    other: Loop,
    /// The scratch trace file.
    out: PathBuf,
    /// Another build of the tracer, run in every round beside ours.
    baseline: Option<PathBuf>,
    seconds: u64,
    ncpu: usize,
}

/// The rounds' figures, one entry per round.
#[derive(Default)]
struct Rounds {
    untraced: Vec<f64>,
    /// The share of all CPUs busy during the untraced run.
    busy: Vec<f64>,
    traced: Vec<Traced>,
    /// biolatency's (IOPS, ns per IO).
    bio: Vec<(f64, f64)>,
    /// Per arm, its IOPS over the untraced run's of the same round.
    ratios: Vec<f64>,
    floor_ratios: Vec<f64>,
    bio_ratios: Vec<f64>,
    agg_ratios: Vec<f64>,
    base_ratios: Vec<f64>,
    /// The tracer's CPU time as a share of all CPUs.
    shares: Vec<f64>,
    /// ns per IO (`bpf_stats`) of our programs attached to the idle device, of --no-records.
    floor_costs: Vec<f64>,
    agg_costs: Vec<f64>,
    base_runs: Vec<Traced>,
}

pub(crate) fn bench(seconds: u64, rounds: usize) -> Result<()> {
    require_root_and_build()?;
    keeping_bpf_stats(|| bench_inner(seconds, rounds))
}

fn bench_inner(seconds: u64, rounds: usize) -> Result<()> {
    let lp = Loop::in_shm("blkprof-bench", "1G")?;
    let other = Loop::in_shm("blkprof-bench-other", "64M")?;
    let out = scratch_trace("blkprof-bench");
    let ncpu = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    eprintln!(
        "bench: {} over /dev/shm, fio 4k randread iodepth 32, {seconds} s per run, {rounds} rounds, {ncpu} CPUs",
        lp.dev
    );
    let ours = tracer_bin();
    let baseline = baseline_tracer();
    if let Some(b) = &baseline {
        eprintln!("bench: baseline tracer {} in every round", b.display());
    }
    let s = Setup {
        ours,
        lp,
        other,
        out,
        baseline,
        seconds,
        ncpu,
    };
    let mut r = Rounds::default();
    for round in 0..rounds {
        one_round(&s, round, &mut r)?;
    }
    let same = same_cpu_rounds(&s.ours, &s.lp, seconds, rounds, &s.out)?;
    remove_scratch(&s.out);
    remove_scratch(&s.out.with_extension("hlog"));
    print_table(&r, &same, rounds, ncpu);
    Ok(())
}

/// One round: every arm's throughput, then the costs with `bpf_stats` on.
fn one_round(s: &Setup, round: usize, r: &mut Rounds) -> Result<()> {
    let seconds = s.seconds;
    // Throughput with kernel.bpf_stats_enabled=0 (the stats themselves cost two clock reads
    // per program run), then the same traced runs again with stats on for the cost per IO.
    // The throughput runs (untraced, attached elsewhere, traced, biolatency, --no-records and
    // the baseline) in an order rotated every round, so that no configuration
    // always runs first or right after another (the ratios compare runs of one round).
    bpf_stats(false)?;
    let (mut u, mut u_busy, mut floor, mut t, mut b_iops) = (0.0, 0.0, 0.0, None, 0.0);
    let (mut base_iops, mut agg_iops) = (0.0, 0.0);
    let arms = if s.baseline.is_some() { 6 } else { 5 };
    for k in 0..arms {
        match (k + round) % arms {
            0 => (u, u_busy) = fio_iops_busy(&s.lp.dev, seconds)?,
            1 => floor = traced_round(&s.ours, &s.lp, &s.other, seconds, &s.out)?.iops,
            2 => t = Some(traced_round(&s.ours, &s.lp, &s.lp, seconds, &s.out)?),
            3 => b_iops = biolatency_round(&s.lp, seconds)?.0,
            4 => agg_iops = aggregates_round(&s.ours, &s.lp, seconds)?.0,
            _ => {
                let b = s.baseline.as_deref().context("baseline")?;
                base_iops = traced_round(b, &s.lp, &s.lp, seconds, &s.out)?.iops;
            }
        }
    }
    let mut t = t.context("no traced run")?;
    bpf_stats(true)?;
    let stats = traced_round(&s.ours, &s.lp, &s.lp, seconds.min(5), &s.out)?;
    (t.ns_per_io, t.per_program) = (stats.ns_per_io, stats.per_program);
    // The same programs when they only filter (tracing the idle device).
    let floor_ns = traced_round(&s.ours, &s.lp, &s.other, seconds.min(5), &s.out)?.ns_per_io;
    let b = (b_iops, biolatency_round(&s.lp, seconds.min(5))?.1);
    let agg = (
        agg_iops,
        aggregates_round(&s.ours, &s.lp, seconds.min(5))?.1,
    );
    if let Some(b) = &s.baseline {
        let mut st = traced_round(b, &s.lp, &s.lp, seconds.min(5), &s.out)?;
        eprintln!(
            "round {}: baseline tracer {base_iops:.0} IOPS ({:.3}), {:.0} ns/IO",
            round + 1,
            base_iops / u,
            st.ns_per_io
        );
        r.base_ratios.push(base_iops / u);
        st.iops = base_iops;
        r.base_runs.push(st);
    }

    // The tracer's CPU time (programs at their bpf_stats cost, which includes the stats'
    // own clock reads, plus the daemon) as a share of all CPUs: when fio keeps every CPU
    // busy, about what tracing takes from it.
    let share = (t.ns_per_io * t.iops / 1e9 + t.cpu_pct / 100.0) / s.ncpu as f64;
    eprintln!(
        "round {}: untraced {:.0} IOPS (CPUs {:.0}% busy) | attached to another device {:.0} IOPS ({:.3}), {:.0} ns/IO | blkprof {:.0} IOPS ({:.3}), {} of {} IOs recorded, {} drops, {:.0} ns/IO, daemon {:.1}% of a core, tracer {:.1}% of all CPU | --no-records {:.0} IOPS ({:.3}), {:.0} ns/IO | biolatency {:.0} IOPS ({:.3}), {:.0} ns/IO",
        round + 1,
        u,
        u_busy * 100.0,
        floor,
        floor / u,
        floor_ns,
        t.iops,
        t.iops / u,
        t.records,
        t.kernel_ios,
        t.drops,
        t.ns_per_io,
        t.cpu_pct,
        share * 100.0,
        agg.0,
        agg.0 / u,
        agg.1,
        b.0,
        b.0 / u,
        b.1
    );
    r.ratios.push(t.iops / u);
    r.floor_ratios.push(floor / u);
    r.floor_costs.push(floor_ns);
    r.bio_ratios.push(b.0 / u);
    r.agg_ratios.push(agg.0 / u);
    r.agg_costs.push(agg.1);
    r.busy.push(u_busy);
    r.shares.push(share);
    r.untraced.push(u);
    r.traced.push(t);
    r.bio.push(b);
    Ok(())
}

/// The table of `cargo xtask bench`, each figure with its target where it has one.
fn print_table(r: &Rounds, same: &SameCpu, rounds: usize, ncpu: usize) {
    let u = median(r.untraced.clone());
    let t_iops = median(r.traced.iter().map(|t| t.iops).collect::<Vec<_>>());
    let ours_ns = median(r.traced.iter().map(|t| t.ns_per_io).collect::<Vec<_>>());
    let bio_ns = median(r.bio.iter().map(|b| b.1).collect::<Vec<_>>());
    let all_recorded = r
        .traced
        .iter()
        .all(|t| t.records + t.misses >= t.kernel_ios && t.drops == 0);
    let records: u64 = r.traced.iter().map(|t| t.records).sum();
    let kernel: u64 = r.traced.iter().map(|t| t.kernel_ios).sum();
    let misses: u64 = r.traced.iter().map(|t| t.misses).sum();
    let drops: u64 = r.traced.iter().map(|t| t.drops).sum();
    let cpu = median(r.traced.iter().map(|t| t.cpu_pct).collect::<Vec<_>>());
    let rss = r.traced.iter().map(|t| t.rss_mib).fold(0.0, f64::max);
    let bpi = median(r.traced.iter().map(|t| t.bytes_per_io).collect::<Vec<_>>());
    let (q1, ratio, q3) = quartiles(&r.ratios);
    let (fq1, floor, fq3) = quartiles(&r.floor_ratios);
    let (bq1, b_ratio, bq3) = quartiles(&r.bio_ratios);
    let busy = median(r.busy.clone());
    let share = median(r.shares.clone());
    let check = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("\n| measure | value | target |");
    println!("|---|---|---|");
    println!(
        "| fio 4k randread iodepth 32, untraced (median of {rounds}) | {u:.0} IOPS, CPUs {:.0}% busy | |",
        busy * 100.0
    );
    println!("| same, traced by blkprof-trace | {t_iops:.0} IOPS | |");
    println!(
        "| traced / untraced (median of per-round ratios; quartiles) | {ratio:.3} ({q1:.3}-{q3:.3}) | >= 0.95: {} |",
        check(ratio >= 0.95)
    );
    println!(
        "| same, blkprof-trace attached but tracing another device | {floor:.3} ({fq1:.3}-{fq3:.3}) | |"
    );
    println!("| same, traced by biolatency -Q -D | {b_ratio:.3} ({bq1:.3}-{bq3:.3}) | |");
    let (aq1, a_ratio, aq3) = quartiles(&r.agg_ratios);
    println!(
        "| same, blkprof-trace --no-records (aggregates only) | {a_ratio:.3} ({aq1:.3}-{aq3:.3}) | |"
    );
    if !r.base_runs.is_empty() {
        let (a, m, b) = quartiles(&r.base_ratios);
        println!("| same, traced by the baseline tracer | {m:.3} ({a:.3}-{b:.3}) | |");
    }
    println!(
        "| tracer's CPU (programs at bpf_stats cost + daemon), share of all {ncpu} CPUs | {:.1}% | |",
        share * 100.0
    );
    println!(
        "| IOs recorded / kernel count (all rounds) | {records} / {kernel} ({misses} reported missed) | every IO: {} |",
        check(all_recorded)
    );
    println!(
        "| ring drops at default settings | {drops} | 0: {} |",
        check(drops == 0)
    );
    println!(
        "| in-kernel cost per IO, blkprof (all programs, bpf_stats, separate runs) | {ours_ns:.0} ns | below biolatency: {} |",
        check(ours_ns < bio_ns)
    );
    println!("| in-kernel cost per IO, biolatency -Q -D | {bio_ns:.0} ns | |");
    println!(
        "| in-kernel cost per IO, --no-records (its one program, bpf_stats) | {:.0} ns | |",
        median(r.agg_costs.clone())
    );
    if !r.base_runs.is_empty() {
        println!(
            "| in-kernel cost per IO, the baseline tracer (same rounds) | {:.0} ns ({}) | |",
            median(r.base_runs.iter().map(|t| t.ns_per_io).collect::<Vec<_>>()),
            per_program_medians(&r.base_runs)
        );
    }
    println!(
        "| blkprof's cost per IO by program (medians) | {} | |",
        per_program_medians(&r.traced)
    );
    println!(
        "| same programs attached to another device (they stop at the device filter) | {:.0} ns | |",
        median(r.floor_costs.clone())
    );
    let (sq1, s_ratio, sq3) = quartiles(&same.ratios);
    let (bio_q1, bio_same, bio_q3) = quartiles(&same.bio_ratios);
    let same_ns = median(same.traced.iter().map(|t| t.ns_per_io).collect::<Vec<_>>());
    let same_bio_ns = median(same.bio_ns.clone());
    println!(
        "| completions on the submitting CPU (rq_affinity 2, as NVMe): traced / untraced | {s_ratio:.3} ({sq1:.3}-{sq3:.3}) | |"
    );
    println!("| same, traced by biolatency -Q -D | {bio_same:.3} ({bio_q1:.3}-{bio_q3:.3}) | |");
    println!(
        "| in-kernel cost per IO there, blkprof | {same_ns:.0} ns ({}) | below biolatency: {} |",
        per_program_medians(&same.traced),
        check(same_ns < same_bio_ns)
    );
    println!("| in-kernel cost per IO there, biolatency -Q -D | {same_bio_ns:.0} ns | |");
    println!("| daemon CPU while tracing | {cpu:.1} % of one core | |");
    println!("| daemon peak RSS | {rss:.1} MiB | |");
    println!(
        "| trace file size | {bpi:.2} bytes per IO | <= 10: {} |",
        check(bpi <= 10.0)
    );
}
