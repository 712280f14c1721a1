//! `cargo xtask bench --cpu`: what tracing costs the machine at a fixed rate, per arm (untraced,
//! programs that do nothing, records, aggregates, biolatency, a baseline build), as the whole
//! machine's busy CPU per IO or, with --parts, as the programs' and the tracer's own.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use analyzer::numeric::median;
use anyhow::{Context as _, Result, bail};

use super::accounting::{bpf_stats, diskstats_reads, idle_ns, proc_cpu_s, prog_stats};
use super::device::Loop;
use super::tracer::{interrupt, spawn_biolatency, spawn_tracer};
use super::{
    baseline_tracer, keeping_bpf_stats, quartiles, remove_scratch, require_root_and_build,
    scratch_trace, tracer_bin,
};

/// How a fixed-rate arm runs the tracer.
#[derive(Clone, Copy, PartialEq)]
enum CpuArm {
    Untraced,
    /// Programs that return at once on the same tracepoints (`--attach-only`).
    Floor,
    /// Programs that read the clock once each (`--attach-only=clock`): the floor of a record
    /// per IO, each program's own instant.
    Clock,
    /// Per-IO records to a trace file.
    Records,
    /// `--no-records`: the in-kernel aggregates only.
    Aggregates,
    Biolatency,
    /// `BLKPROF_BENCH_BASELINE`'s tracer, records to a file.
    Baseline,
}

impl CpuArm {
    fn name(self) -> &'static str {
        match self {
            CpuArm::Untraced => "untraced",
            CpuArm::Floor => "attached, programs that do nothing",
            CpuArm::Clock => "attached, programs that read the clock once each",
            CpuArm::Records => "blkprof-trace --output (a record per IO)",
            CpuArm::Aggregates => "blkprof-trace --no-records",
            CpuArm::Biolatency => "biolatency -Q -D",
            CpuArm::Baseline => "baseline tracer --output",
        }
    }
}

/// What a fixed-rate round measured, per IO over its window.
struct CpuRound {
    /// Busy CPU ns of the whole machine.
    busy_ns: f64,
    ios: u64,
    /// The tracer process's own CPU ns.
    tracer_ns: f64,
    /// The load's own CPU ns.
    load_ns: f64,
    /// The arm's programs' run time ns (`bpf_stats`; 0 when off).
    programs_ns: f64,
}

/// A round while a paced load ([`crate::pacer`]) reads `lp` at `rate` IOPS, over a window that
/// leaves out the load's first second and its end.
fn cpu_round(
    arm: CpuArm,
    lp: &Loop,
    rate: u64,
    seconds: u64,
    out: &Path,
    baseline: Option<&Path>,
) -> Result<CpuRound> {
    remove_scratch(out);
    let mut tracer = start_arm(arm, lp, out, baseline)?;
    // Let start-up work (BTF, loading, the first device scan) settle.
    std::thread::sleep(Duration::from_millis(500));
    let pid = tracer.as_ref().map(Child::id);
    // The load runs a second before the window measured, and is stopped after it.
    let load = crate::pacer::Pacer::start(&lp.dev, rate, PACED_THREADS)?;
    std::thread::sleep(Duration::from_secs(1));
    // The arm's programs: biolatency's are named after their tracepoints.
    let programs = |n: &str| {
        if arm == CpuArm::Biolatency {
            n.starts_with("block_rq_") || n.starts_with("block_io_")
        } else {
            n.starts_with("blkprof")
        }
    };
    let sample = || -> Result<(Instant, u64, u64, f64, f64)> {
        Ok((
            Instant::now(),
            idle_ns(),
            diskstats_reads(lp.name())?,
            pid.map_or(0.0, proc_cpu_s),
            proc_cpu_s(std::process::id()),
        ))
    };
    let prog0 = if arm == CpuArm::Untraced {
        0
    } else {
        prog_stats(programs, "")?.0
    };
    let (t0, idle0, before, cpu0, load0) = sample()?;
    std::thread::sleep(Duration::from_secs(seconds));
    let (t1, idle1, after, cpu1, load1) = sample()?;
    let prog1 = if arm == CpuArm::Untraced {
        0
    } else {
        prog_stats(programs, "")?.0
    };
    load.stop()?;
    let wall = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
    let idle = idle1 - idle0;
    let ios = after - before;
    let cpu = cpu1 - cpu0;
    let load_cpu = load1 - load0;
    if let Some(child) = tracer.take() {
        interrupt(&child);
        let o = child.wait_with_output()?;
        if arm != CpuArm::Biolatency && !o.status.success() {
            bail!(
                "blkprof-trace failed: {}",
                String::from_utf8_lossy(&o.stdout)
            );
        }
    }
    remove_scratch(&out.with_extension("hlog"));
    let ncpu = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as u64;
    let busy = (wall * ncpu).saturating_sub(idle);
    let n = ios.max(1) as f64;
    Ok(CpuRound {
        busy_ns: busy as f64 / n,
        ios,
        tracer_ns: cpu * 1e9 / n,
        load_ns: load_cpu * 1e9 / n,
        programs_ns: prog1.saturating_sub(prog0) as f64 / n,
    })
}

/// Start what `arm` runs on `lp` (nothing for the untraced arm), records to `out`.
fn start_arm(arm: CpuArm, lp: &Loop, out: &Path, baseline: Option<&Path>) -> Result<Option<Child>> {
    let ours = tracer_bin();
    let out_s = out.display().to_string();
    Ok(match arm {
        CpuArm::Untraced => None,
        CpuArm::Floor => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--attach-only"],
        )?),
        CpuArm::Clock => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--attach-only=clock"],
        )?),
        CpuArm::Records => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--output", &out_s],
        )?),
        CpuArm::Aggregates => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--no-records"],
        )?),
        CpuArm::Baseline => Some(spawn_tracer(
            baseline.context("baseline")?,
            &["--device", lp.name(), "--quiet", "--output", &out_s],
        )?),
        CpuArm::Biolatency => {
            let child = spawn_biolatency()?;
            // It prints nothing until Ctrl-C: give it time to load and attach.
            std::thread::sleep(Duration::from_secs(2));
            Some(child)
        }
    })
}

/// The rounds' figures in ns per IO, per arm (in the order of the arms).
struct Figures {
    /// Busy CPU minus the untraced arm's of the same round.
    added: Vec<Vec<f64>>,
    /// The tracer process's own CPU.
    own: Vec<Vec<f64>>,
    /// The load's own CPU.
    load: Vec<Vec<f64>>,
    /// The arm's programs' run time (`bpf_stats`).
    kernel: Vec<Vec<f64>>,
    /// The untraced arm's busy CPU, per round.
    untraced: Vec<f64>,
}

impl Figures {
    fn new(arms: usize) -> Figures {
        Figures {
            added: vec![Vec::new(); arms],
            own: vec![Vec::new(); arms],
            load: vec![Vec::new(); arms],
            kernel: vec![Vec::new(); arms],
            untraced: Vec::new(),
        }
    }
}

/// Threads of the paced load in `cargo xtask bench --cpu`: the IOs in flight at most.
const PACED_THREADS: usize = 8;

/// `cargo xtask bench --cpu`: what tracing costs the machine at a fixed rate, the way a user
/// pays it. Paced 4 KB random direct reads ([`crate::pacer`]) at `rate` IOPS on a loop device
/// over /dev/shm; per arm the whole machine's busy CPU time per IO (all CPUs, wall time minus
/// idle time), the arms in an order rotated every round; each traced arm's cost is its busy
/// time per IO minus the untraced arm's of the same round.
pub(crate) fn bench_cpu(seconds: u64, rounds: usize, rate: u64, parts: bool) -> Result<()> {
    require_root_and_build()?;
    keeping_bpf_stats(|| {
        // By parts, bpf_stats times the programs (adding two clock reads to each run, which the
        // busy-CPU measure would count).
        bpf_stats(parts)?;
        bench_cpu_inner(seconds, rounds, rate, parts)
    })
}

fn bench_cpu_inner(seconds: u64, rounds: usize, rate: u64, parts: bool) -> Result<()> {
    let lp = Loop::in_shm("blkprof-bench-cpu", "1G")?;
    let out = scratch_trace("blkprof-bench-cpu");
    let baseline = baseline_tracer();
    let mut arms = vec![
        // By parts the untraced arm measures nothing: kept first all the same, so that the
        // arms' indices stay those of the busy-CPU table.
        CpuArm::Untraced,
        CpuArm::Floor,
        CpuArm::Clock,
        CpuArm::Records,
        CpuArm::Aggregates,
        CpuArm::Biolatency,
    ];
    if baseline.is_some() {
        arms.push(CpuArm::Baseline);
    }
    eprintln!(
        "bench: CPU per IO on {} over /dev/shm, paced 4k random direct reads at {rate} IOPS ({PACED_THREADS} threads), {seconds} s per run, {rounds} rounds, arms rotated",
        lp.dev
    );
    let mut f = Figures::new(arms.len());
    for round in 0..rounds {
        let mut busy = vec![0.0; arms.len()];
        let mut line = Vec::new();
        for k in 0..arms.len() {
            let i = (k + round) % arms.len();
            if parts && arms[i] == CpuArm::Untraced {
                continue;
            }
            let r = cpu_round(arms[i], &lp, rate, seconds, &out, baseline.as_deref())?;
            busy[i] = r.busy_ns;
            f.own[i].push(r.tracer_ns);
            f.load[i].push(r.load_ns);
            f.kernel[i].push(r.programs_ns);
            line.push(if parts {
                format!(
                    "{} kernel {:.0} + tracer {:.0} ns/IO ({} IOs)",
                    arms[i].name(),
                    r.programs_ns,
                    r.tracer_ns,
                    r.ios
                )
            } else {
                format!("{} {:.0} ns/IO ({} IOs)", arms[i].name(), r.busy_ns, r.ios)
            });
        }
        eprintln!("round {}: {}", round + 1, line.join(" | "));
        if parts {
            continue;
        }
        f.untraced.push(busy[0]);
        for (i, b) in busy.iter().enumerate() {
            f.added[i].push(b - busy[0]);
        }
    }
    remove_scratch(&out);
    let settings = format!("paced 4k random reads at {rate} IOPS, {rounds} rounds of {seconds} s");
    if parts {
        print_parts(&arms, &f, &settings);
    } else {
        print_busy(&arms, &f, &settings);
    }
    Ok(())
}

/// The table of `cargo xtask bench --cpu --parts`: per arm, the programs' and the tracer's ns
/// per IO (median and range over the rounds), their sum, and the sum over the floor's.
fn print_parts(arms: &[CpuArm], f: &Figures, settings: &str) {
    let (kernel, own) = (&f.kernel, &f.own);
    let range = |v: &[f64]| format!("{:.0} ({})", median(v.to_vec()), crate::util::range(v));
    let sum = |i: usize| {
        let s: Vec<f64> = kernel[i].iter().zip(&own[i]).map(|(k, t)| k + t).collect();
        median(s)
    };
    let floor = sum(1);
    println!(
        "\n| {settings}, by parts | the programs, ns per IO (bpf_stats): median (range) | the tracer process, ns per IO | sum | x the floor |"
    );
    println!("|---|---|---|---|---|");
    for (i, arm) in arms.iter().enumerate().skip(1) {
        let (tracer, s) = if *arm == CpuArm::Biolatency {
            // It prints only at the end: its process does no work per IO.
            ("-".to_string(), median(kernel[i].clone()))
        } else {
            (range(&own[i]), sum(i))
        };
        let times = if floor > 0.0 {
            format!("{:.1}", s / floor)
        } else {
            "-".into()
        };
        println!(
            "| {} | {} | {tracer} | {s:.0} | {times} |",
            arm.name(),
            range(&kernel[i])
        );
    }
}

/// The table of `cargo xtask bench --cpu`: per arm, the busy CPU per IO it adds to the untraced
/// arm's (median and quartiles over the rounds), that over the floor's, the tracer process's
/// own CPU per IO and the load's.
fn print_busy(arms: &[CpuArm], f: &Figures, settings: &str) {
    let (added, own, load) = (&f.added, &f.own, &f.load);
    let floor = median(added[1].clone());
    println!(
        "\n| {settings} | added busy CPU per IO (median; quartiles) | x the floor | the tracer process's own CPU per IO | the load's own CPU per IO |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| untraced: busy CPU per IO | {:.0} ns | | | {:.0} ns |",
        median(f.untraced.clone()),
        median(load[0].clone())
    );
    for (i, arm) in arms.iter().enumerate().skip(1) {
        let (a, m, b) = quartiles(&added[i]);
        let times = if floor > 0.0 {
            format!("{:.1}", m / floor)
        } else {
            "-".into()
        };
        let own = if *arm == CpuArm::Biolatency {
            "-".to_string()
        } else {
            format!("{:.0} ns", median(own[i].clone()))
        };
        println!(
            "| {} | {m:.0} ns ({a:.0} to {b:.0}) | {times} | {own} | {:.0} ns |",
            arm.name(),
            median(load[i].clone())
        );
    }
}
