//! What cargo cannot do by itself: set up the eBPF toolchain, run the root end-to-end tests,
//! benchmark, and run the demo.
//!
//!   cargo xtask setup   install what a fresh machine lacks (idempotent; seconds when done)
//!   cargo xtask demo    trace a Cassandra-shaped fio workload on a scratch loop device, report
//!   cargo xtask dist    static tarball, .deb, .rpm and OCI image in target/dist/
//!   cargo xtask test    all tests, the root end-to-end ones included
//!   cargo xtask bench   overhead and throughput figures (BENCHMARKS.md)
//!   cargo xtask cassandra  a real Cassandra node under YCSB workload A, traced, and its report
//!   cargo xtask experiment NAME  one of the seeds' A/B experiments (readahead, docsize), compared
//!   cargo xtask fuzz    the fuzz targets of fuzz/ (cargo-fuzz, nightly), N seconds each
//!   cargo xtask gate-stability  does `blkprof check` pass reruns of a workload and fail changes?
//!   cargo xtask fleet-check  docs/fleet.md's SQL on DuckDB and Spark, against the report
//!   cargo xtask vm -- CMD  run CMD as root in a nested VM (stock 6.12 or 6.1 kernel, NVMe disks)

mod bench;
mod cassandra;
mod demo;
mod dist;
mod experiment;
mod fleet;
mod fuzz;
mod gate;
mod pacer;
mod setup;
mod signal;
mod util;
mod vm;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "blkprof's project tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
#[expect(
    clippy::doc_markdown,
    reason = "clap help text: backticks would show in --help"
)]
enum Cmd {
    /// Install what a fresh machine lacks: nightly rust-src, bpf-linker built against the
    /// nightly's own LLVM, fio and the peer tools. Idempotent.
    Setup,
    /// Build what production hosts install, in target/dist/: static (musl) blkprof-trace and
    /// blkprof in a tarball, a .deb and an .rpm (binaries, man pages, bash/zsh/fish
    /// completions, the hardened systemd unit, the blkprof user, the Grafana dashboard, the
    /// docs), an OCI image archive whose entrypoint is blkprof-trace, and SHA256SUMS. The
    /// version is the git description of the build. Needs no root.
    Dist,
    /// Set up, then trace a built-in Cassandra-shaped fio workload on a scratch loop device
    /// and print the report.
    Demo {
        /// Length of the traced workload in seconds.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Keep the trace here (default: a temporary directory that is removed).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Set up, then run every test: unit, CLI, a short pass of every fuzz target (10 s each;
    /// with CI=true 10-25 s, 5-6 minutes with the build) and the root end-to-end tests. The
    /// end-to-end tests' loop images (about 3 GiB) are kept in $TMPDIR/blkprof-test-trash
    /// until the VM tests, and deleted beside them: deleting one can take 10-20 s where /tmp
    /// is mounted with `discard`.
    Test {
        /// Only run end-to-end tests whose name contains this.
        filter: Option<String>,
        /// Only the nested-VM stage: the end-to-end tests in stock 6.12 and 6.1 kernels
        /// (side by side, about 11 minutes with the boots in CI; as root).
        #[arg(long)]
        vm_only: bool,
    },
    /// Set up, then measure: tracer overhead vs untraced and vs biolatency, bytes per IO,
    /// analyzer throughput. Prints a table.
    Bench {
        /// Seconds per fio run.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
        /// Rounds of alternating runs (untraced, attached to another device, traced,
        /// --no-records, biolatency), then as many with the device's completions on the
        /// submitting CPU (rq_affinity 2, as NVMe: untraced, traced, biolatency); the machine
        /// is noisy, so ratios are medians over rounds.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
        rounds: u64,
        /// IOs in the synthetic trace for the analyzer's benchmark.
        #[arg(long, default_value_t = 50_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        analyzer_ios: u64,
        /// Only the analyzer's benchmark (no root needed).
        #[arg(long)]
        analyzer_only: bool,
        /// Only the agent's benchmark: the daemon's CPU per IO and peak RSS writing a trace
        /// file, serving metrics only, and with the flight recorder, at a fixed IO rate.
        #[arg(long, conflicts_with = "analyzer_only")]
        agent: bool,
        /// The agent benchmark's IO rate (IOPS).
        #[arg(long, default_value_t = 20_000)]
        agent_rate: u64,
        /// Only the CPU benchmark: the whole machine's busy CPU time per IO at a fixed rate
        /// (4 KB random direct reads by threads that sleep between IOs; fio's rate limiter
        /// spins, which hid the cost of the programs run in its context), untraced, with
        /// programs that do nothing (the floor), with programs that read the clock once each
        /// (the floor of a record per IO: each program's own instant), with records, with
        /// --no-records and with biolatency -Q -D (BLKPROF_BENCH_BASELINE: another tracer
        /// too), the arms rotated over rounds.
        #[arg(long, conflicts_with_all = ["analyzer_only", "agent"])]
        cpu: bool,
        /// With --cpu: the cost by parts instead, the precise figures where the busy-CPU
        /// measure is noise: bpf_stats on, per arm the programs' run time per IO (their
        /// `run_time_ns` over the window) and the tracer process's own CPU per IO.
        #[arg(long, requires = "cpu")]
        parts: bool,
        /// The CPU benchmark's IO rate (IOPS).
        #[arg(long, default_value_t = 40_000)]
        cpu_rate: u64,
        /// Only the join's benchmark (no root needed): the daemon's CPU per IO to join half
        /// records from two CPUs' rings and count the requests in flight (the design in
        /// docs/design/records-without-shared-state.md).
        #[arg(long, conflicts_with_all = ["analyzer_only", "agent", "cpu"])]
        join: bool,
        /// IOs in the join's benchmark at saturation (a quarter of them at 40k IOPS); its
        /// halves are made in memory first, about 100 bytes per IO.
        #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(4..=10_000_000))]
        join_ios: u64,
    },
    /// Set up, then the seeds' experiment for real: a Cassandra 5.0 node (from Maven Central)
    /// with its data on a scratch loop device (ext4, mounted with discard), YCSB workload A
    /// through the project's CQL binding, blkprof-trace recording the device during the run,
    /// and the report with YCSB's results and Cassandra's flushes on one time axis.
    /// Everything it starts is stopped and removed at the end, on failure and on Ctrl-C.
    Cassandra {
        #[command(flatten)]
        opts: cassandra::Options,
        /// Use the blkprof binaries already in target/release: no set-up, no cargo build (for
        /// the end-to-end test, which runs inside `cargo xtask test`).
        #[arg(long)]
        prebuilt: bool,
    },
    /// Set up, then one of the seeds' A/B experiments for real: every arm a fresh Cassandra
    /// node under YCSB workload A (as `cargo xtask cassandra`) with only the arm's setting
    /// changed, traced; then `blkprof compare` over the arms and one page (README.md) with the
    /// comparison, the flagged differences explained and each arm's report. As root.
    #[command(
        after_help = "Examples:\n  cargo xtask experiment readahead          # 4096 vs 128 vs 8 KB, about 8 min\n  cargo xtask experiment docsize            # 2/4/8/16/32 KB documents, about 10 min\n  cargo xtask experiment raid-chunk         # md RAID0 chunks 4-512 KB in the VM lab, about 9 min\n  cargo xtask experiment readahead --arms 4096,8 --duration 30 --repeat 2"
    )]
    Experiment {
        #[command(flatten)]
        opts: experiment::ExpOptions,
        /// Use the release binaries as built (skip setup and the build).
        #[arg(long)]
        prebuilt: bool,
    },
    /// Fuzz the analyzer's inputs (trace files, stress and log text, importers, check rules)
    /// with cargo-fuzz (installed when missing) on nightly: each target for --seconds, from
    /// seeds made of the repository's files; fails on any crash and names its input file.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
        /// Build the targets with AddressSanitizer (cargo fuzz's default), or without: the
        /// analyzer has no unsafe code and its C dependency (zstd) is not instrumented either
        /// way, so `none` finds the same panics, aborts and memory blow-ups from a build that
        /// takes about 60% of the time (what `cargo xtask test` runs).
        #[arg(long, value_enum, default_value_t = fuzz::Sanitizer::Address)]
        sanitizer: fuzz::Sanitizer,
        /// Targets to run (default: all; the names of fuzz/fuzz_targets/*.rs).
        targets: Vec<String>,
    },
    /// Set up, then record a fio job's baselines and many recordings of the same job (alone
    /// and next to a busy neighbour) and of three changed ones (higher write share, 512 KB
    /// writes, slower device), check each against the baselines with `blkprof check`, print
    /// a pass/fail tally per scenario, and how often other choices of baselines would fail.
    GateStability {
        #[command(flatten)]
        opts: gate::Options,
    },
    /// Run a command as root in a nested VM booted from a stock Debian kernel (6.12 or 6.1
    /// LTS, installed when missing) with emulated NVMe disks and this machine's files shared
    /// read-only (virtme-ng, qemu TCG: functional, never performance figures). Exits with the
    /// command's code; the guest's dmesg is kept. Example: cargo xtask vm --disks 4 -- lsblk
    Vm {
        #[command(flatten)]
        opts: vm::Options,
    },
    /// The recipes of docs/fleet.md on DuckDB and Spark (local mode) over the golden traces
    /// exported to Parquet, checked against `blkprof report --json`; no root.
    FleetCheck,
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Setup => setup::setup(),
        Cmd::Dist => dist::dist().map(|_| ()),
        Cmd::Demo { seconds, out } => {
            setup::setup()?;
            demo::demo(seconds, out)
        }
        Cmd::Test { filter, vm_only } => {
            let mut steps = util::Steps::new();
            steps.run("setup", setup::setup)?;
            let r = if vm_only {
                steps.run("VM tests", util::test_vms)
            } else {
                util::test(filter.as_deref(), &mut steps)
            };
            steps.summary();
            r
        }
        Cmd::Bench {
            seconds,
            rounds,
            analyzer_ios,
            analyzer_only,
            agent,
            agent_rate,
            cpu,
            parts,
            cpu_rate,
            join,
            join_ios,
        } => {
            let rounds = usize::try_from(rounds).context("--rounds is too large")?;
            if join {
                return bench::join::bench(join_ios);
            }
            if cpu {
                setup::setup()?;
                return bench::bench_cpu(seconds, rounds, cpu_rate, parts);
            }
            if agent {
                setup::setup()?;
                return bench::bench_agent(seconds, rounds, agent_rate);
            }
            if !analyzer_only {
                setup::setup()?;
                bench::bench(seconds, rounds)?;
                bench::join::bench(join_ios)?;
            }
            bench::analyzer_rate::bench(analyzer_ios)
        }
        Cmd::Cassandra { opts, prebuilt } => {
            if !prebuilt {
                setup::setup()?;
                util::build_release()?;
            }
            cassandra::cassandra(&opts)
        }
        Cmd::Experiment { opts, prebuilt } => {
            if !prebuilt {
                setup::setup()?;
                util::build_release()?;
            }
            experiment::experiment(&opts)
        }
        Cmd::Fuzz {
            seconds,
            targets,
            sanitizer,
        } => fuzz::fuzz(
            fuzz::Budget::Each { seconds },
            sanitizer,
            fuzz::Optimize::Full,
            &targets,
        ),
        Cmd::GateStability { opts } => {
            if !opts.prebuilt && opts.recheck.is_none() {
                setup::setup()?;
                util::build_release()?;
            }
            gate::gate_stability(&opts)
        }
        Cmd::Vm { opts } => vm::vm(&opts),
        Cmd::FleetCheck => fleet::fleet_check(),
    }
}
