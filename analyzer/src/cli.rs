//! The command line: what clap parses ([`Cli`], one args struct per command), and its
//! validation into one command's configuration ([`Command`]) before any work is done. Flags
//! that conflict or need another (`-o` for Parquet, `--format perfetto` for its filters) are
//! refused here, with exit 2.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracer_common::units::parse_size;

use crate::run::import::ImportFrom;
use crate::run::inputs::AppInputs;
use crate::run::{self, Fail};

#[derive(Parser)]
#[command(
    name = "blkprof",
    version = tracer_common::VERSION,
    about = "Read blkprof trace files and report what the disk really did.",
    after_help = "Examples:\n  blkprof report run.blkp\n  blkprof report run.blkp --json > run.json\n\nTraces are written by blkprof-trace (root). This tool needs no privileges."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// The workload summary: per device and op, IO counts, volume, block-size mix, latency,
    /// and the trace's coverage of the kernel's own counters.
    Report(ReportArgs),
    /// Export a trace: a fio iolog (version 3, with timing: `fio --read_iolog FILE` replays the
    /// pattern; fio 3.33 replays reads, writes and syncs but not trims), CSV, JSON lines, or
    /// Parquet for SQL engines (one row per IO; recipes for DuckDB and Spark in docs/fleet.md).
    #[command(
        after_help = "Parquet examples:\n  blkprof export run.blkp --format parquet -o run.parquet\n  blkprof export node1/*.blkp node2/*.blkp --format parquet -o fleet/\n      (several traces: fleet/host=H/date=YYYY-MM-DD/part-N.parquet, N the trace's position)\n  duckdb -c \"SELECT host, op, count(*) FROM read_parquet('fleet/**/*.parquet', hive_partitioning = true) GROUP BY ALL\"\n\nColumns: host, device, op (the report's op), flags, complete_time, issue_time, enter_time\n(UTC timestamps, ns), device_latency_ns, total_latency_ns, queue_ns, bytes, sector (512-byte\nunits), pid, comm, dev_inflight, os_inflight, error, requeues. The run (kernel, losses, coverage\nagainst /proc/diskstats) is in each file's key-value metadata under blkprof.run.\n\nPerfetto examples (open the file at https://ui.perfetto.dev, docs/perfetto.md):\n  blkprof export run.blkp --format perfetto -o run.pftrace\n  blkprof export run.blkp --format perfetto --from 60 --to 90 -o slice.pftrace\n  blkprof export run.blkp --format perfetto --min-latency 1ms -o slow.pftrace\nPer device: one track of IO slices (submission to completion, with the device time nested;\narguments sector, bytes, flags, pid, comm, in-flight counts) on lanes merged into one, and\ncounters of the report's per-interval series (IOPS, MB/s, p99, in-flight)."
    )]
    Export(ExportArgs),
    /// Gate CI on a trace: compare its summary with a saved baseline (`blkprof report --json`)
    /// or with rules (docs/check-rules.md). Exit 0 on pass, 1 on fail, 2 on bad input.
    Check(CheckArgs),
    /// Import another tool's trace into blkprof's format (docs/importers.md): msr (MSR
    /// Cambridge / SNIA CSV), blk (blkparse's default text output, or the ftrace blk tracer's lines).
    Import(ImportArgs),
    /// Two or more runs side by side (A/B experiments), with the differences that matter
    /// flagged: counts, volumes and rates moving more than 10%, latencies more than 25%, shares
    /// more than 5 points; then the flagged differences in sentences, each arm against the
    /// first. Compares the busiest device of each run, or --device. Size classes are compared
    /// class by class; a figure a run does not have (no IOs of that op, no stress results) is
    /// n/a, never 0, and never flagged.
    #[command(
        after_help = "Examples:\n  blkprof compare before.blkp after.blkp\n  blkprof compare ra4096/report.json ra128/report.json ra8/report.json\n  blkprof compare doc2k/report.json doc4k/report.json doc8k/report.json doc16k/report.json doc32k/report.json --json\n\nEach arm is a trace (summarized with the detection options below) or a report saved by\n`blkprof report --json` (taken as it is; made with --stress, it brings the stress tool's\nresults: client ops/s, per operation its count, mean and p99 latency, and the device's read\nbytes per client read). Arms are named by the trace labels (blkprof-trace --label) whose values\ndiffer, else by the queue settings that differ (read-ahead), else by path; the columns are\nA, B, C... in the order given, A the baseline. JSON: docs/report-json.md."
    )]
    Compare(CompareArgs),
    /// What one traced disk's IO would do on an md RAID0 of N disks with chunk C: every IO
    /// mapped onto the members exactly as Linux md raid0 maps it (split at chunk boundaries;
    /// a discard as one request per member; a flush to every member). Per member: requests,
    /// bytes and their shares, reads and writes, size mix, mean size, queue depth replayed on
    /// the trace's own times; the busiest member over the mean; how many IOs were split.
    #[command(
        after_help = "Examples:\n  blkprof whatif --raid0 4 --chunk 64K node1.blkp\n  for c in 4K 64K 128K 256K; do blkprof whatif --raid0 4 --chunk $c node1.blkp; done\n  blkprof whatif --raid0 4 --chunk 512K --device nvme0n1 --json node1.blkp\n\nTrace the single disk of a node as it runs the workload (blkprof-trace), then ask what a\nstripe would see. The members are named member0.. in md's slot order; the lines read as the\n`arrays` section of `blkprof report` reads for a traced md array. Not modelled (said in the\noutput too): merging of a member's contiguous pieces in its queue (\"if merged\" counts each\nIO's pieces on a member as one), md's and the disks' own request size limits, md's data\noffset (it shifts addresses only), and timing (depths replay the trace's own times)."
    )]
    Whatif(WhatifArgs),
}

/// A command, validated: what `main` runs.
pub(crate) enum Command {
    Report(run::report::Config),
    Export(run::export::Config),
    Check(run::check::Config),
    Import(run::import::Config),
    Compare(run::compare::Config),
    Whatif(run::whatif::Config),
}

impl Cmd {
    /// The command's configuration, or why its flags do not fit (before any file is read).
    pub(crate) fn validate(self) -> Result<Command, Fail> {
        Ok(match self {
            Cmd::Report(a) => Command::Report(a.validate()),
            Cmd::Export(a) => Command::Export(a.validate()?),
            Cmd::Check(a) => Command::Check(a.validate()?),
            Cmd::Import(a) => Command::Import(a.validate()),
            Cmd::Compare(a) => Command::Compare(a.validate()),
            Cmd::Whatif(a) => Command::Whatif(a.validate()?),
        })
    }
}

#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    /// Trace file written by blkprof-trace.
    #[arg(required_unless_present = "from_json")]
    traces: Vec<PathBuf>,
    /// Print the report as JSON (schema in docs/report-json.md).
    #[arg(long)]
    json: bool,
    /// Render a saved report instead of reading traces: the JSON of `blkprof report
    /// --json` or of --output-dir, as text, as JSON again, or with -o as HTML and charts.
    /// A report of an older version renders with the figures it has.
    #[arg(
        long = "from-json",
        value_name = "FILE",
        conflicts_with_all = ["traces", "stress", "stress_start", "stress_tz", "app_logs", "app_log_tz"]
    )]
    from_json: Option<PathBuf>,
    #[command(flatten)]
    inputs: AppArgs,
    /// Also write TRACE.html (self-contained: inline SVG charts, no network), TRACE.json
    /// and each chart as SVG and PNG into this directory (created if missing).
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Also make the heatmaps (IOs by time and latency, size and offset, per device and op)
    /// and put them in the JSON; -o DIR always makes them (drawn in the HTML and as charts).
    #[arg(long)]
    heatmaps: bool,
    #[command(flatten)]
    detect: Detect,
}

impl ReportArgs {
    fn validate(self) -> run::report::Config {
        let mut opts = self.detect.options();
        // Only what is shown pays for them.
        opts.heatmaps = self.heatmaps || self.out_dir.is_some();
        run::report::Config {
            traces: self.traces,
            json: self.json,
            from_json: self.from_json,
            inputs: self.inputs.into_inputs(),
            out_dir: self.out_dir,
            opts,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct ExportArgs {
    /// Trace files written by blkprof-trace (several only with --format parquet).
    #[arg(required = true, num_args = 1..)]
    traces: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = analyzer::export::Format::Iolog)]
    format: analyzer::export::Format,
    /// Only this device (name or MAJ:MIN); an iolog needs one device.
    #[arg(long)]
    device: Option<String>,
    /// For iologs: the file or device the replay should use (default: the traced device).
    #[arg(long)]
    target: Option<String>,
    /// Write here instead of standard output. Parquet: a file, or with several traces or
    /// --partition a new directory.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Parquet: the host column and partition (default: the host name in the trace).
    #[arg(long, value_name = "NAME", help_heading = "Parquet")]
    host: Option<String>,
    /// Parquet: write a directory partitioned as host=H/date=YYYY-MM-DD (UTC, of the
    /// completion) even for one trace.
    #[arg(long, help_heading = "Parquet")]
    partition: bool,
    /// Parquet: compression codec.
    #[arg(long, value_enum, default_value_t = analyzer::export::parquet::Codec::Snappy, help_heading = "Parquet")]
    compression: analyzer::export::parquet::Codec,
    /// Parquet: rows per row group (the unit engines skip by time and device).
    #[arg(long, default_value_t = analyzer::export::parquet::DEFAULT_ROW_GROUP_ROWS as u64, value_parser = clap::value_parser!(u64).range(1..=(1 << 30)), help_heading = "Parquet")]
    row_group_rows: u64,
    /// Perfetto: only IOs submitted at or after this time: seconds from the trace's start
    /// (90, 1.5s, 2m) or an RFC 3339 time (2026-11-22T06:45:03Z). Browsers hold about 2 GB
    /// of trace: cut long runs (the export writes about 120 bytes per IO).
    #[arg(long, value_name = "TIME", value_parser = parse_time_point, help_heading = "Perfetto")]
    from: Option<analyzer::export::perfetto::TimePoint>,
    /// Perfetto: only IOs submitted before this time (as --from).
    #[arg(long, value_name = "TIME", value_parser = parse_time_point, help_heading = "Perfetto")]
    to: Option<analyzer::export::perfetto::TimePoint>,
    /// Perfetto: only IOs whose total latency (submission to completion) is at least this
    /// (500us, 1ms, 2s). The counters still count every IO.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Perfetto")]
    min_latency: Option<u64>,
    /// Perfetto: only IOs of at least this size (bytes, or 4K, 1M: binary units).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Perfetto")]
    min_size: Option<u64>,
    /// Perfetto: the stress tool's output and the application's log, as for `report`:
    /// tracks of Cassandra's flushes and compactions and of the stress tool's throughput
    /// and latency, on the trace's clock.
    #[command(flatten, next_help_heading = "Perfetto: the application")]
    inputs: AppArgs,
}

impl ExportArgs {
    fn validate(self) -> Result<run::export::Config, Fail> {
        use analyzer::export::Format;
        use run::export::Config;
        let perfetto_only = self.from.is_some()
            || self.to.is_some()
            || self.min_latency.is_some()
            || self.min_size.is_some()
            || !self.inputs.stress.is_empty()
            || !self.inputs.app_logs.is_empty();
        if perfetto_only && self.format != Format::Perfetto {
            return Err(Fail::input(
                "--from, --to, --min-latency, --min-size, --stress and --app-log are for --format perfetto",
            ));
        }
        match self.format {
            Format::Perfetto => {
                if self.traces.len() > 1 {
                    return Err(Fail::input("--format perfetto exports one trace at a time"));
                }
                if self.output.is_none() && std::io::stdout().is_terminal() {
                    return Err(Fail::input(
                        "a Perfetto trace is binary: write it to a file with -o run.pftrace",
                    ));
                }
                Ok(Config::Perfetto(run::export::Perfetto {
                    trace: first(self.traces),
                    output: self.output,
                    device: self.device,
                    from: self.from,
                    to: self.to,
                    min_latency_ns: self.min_latency.unwrap_or(0),
                    min_bytes: self.min_size.unwrap_or(0),
                    inputs: self.inputs.into_inputs(),
                }))
            }
            Format::Parquet => {
                let output = self.output.ok_or_else(|| {
                    Fail::input("Parquet is written to a file or directory: give it with -o OUT")
                })?;
                Ok(Config::Parquet(run::export::Parquet {
                    traces: self.traces,
                    output,
                    opts: analyzer::export::parquet::ParquetOptions {
                        host: self.host,
                        partition: self.partition,
                        device: self.device,
                        codec: self.compression,
                        // At most 2^30: the argument's range.
                        row_group_rows: analyzer::numeric::u64_to_usize_saturating(
                            self.row_group_rows,
                        ),
                    },
                }))
            }
            format => {
                if self.traces.len() > 1 {
                    return Err(Fail::input(
                        "only --format parquet exports several traces (into a directory); export the others one at a time",
                    ));
                }
                if self.host.is_some() || self.partition {
                    return Err(Fail::input(
                        "--host and --partition are for --format parquet",
                    ));
                }
                Ok(Config::Rows(run::export::Rows {
                    trace: first(self.traces),
                    format,
                    device: self.device,
                    target: self.target,
                    output: self.output,
                }))
            }
        }
    }
}

/// The one trace of a command that takes one (clap requires at least one).
fn first(traces: Vec<PathBuf>) -> PathBuf {
    traces.into_iter().next().unwrap_or_default()
}

#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    trace: PathBuf,
    /// Baseline report (JSON from `blkprof report --json`). Repeat it with recordings of
    /// the same workload (3 or more) to allow the run-to-run spread they show. Without
    /// --rules, the default rules compare the workload's shape tightly: read share of IOs
    /// and write share of bytes within 2 points, size mixes within 0.05, mean request sizes
    /// within 5%, each beyond 4 standard errors of sampling noise. Latency fails only on a
    /// rise beyond the noise of its percentile's rank: p1 (the device's floor) more than
    /// 1.5x and 2 us, p50 more than 2x and 50 us (2x the highest of 3 or more baselines),
    /// p99 more than 2x and 5 ms. Throughput is not
    /// compared: an unthrottled job's throughput measures the machine. docs/check-rules.md
    #[arg(long)]
    baseline: Vec<PathBuf>,
    #[expect(
        clippy::doc_markdown,
        reason = "clap prints this doc as the option's help"
    )]
    /// Rules file (JSON), e.g. {"rules": [{"metric": "read.latency_p99_us", "max": 5000}]}.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Also write the verdicts as JUnit XML here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Check a trace that did not end cleanly (no trailer: the tracer was killed, the disk
    /// filled, or the file is corrupt) on what is intact, instead of failing it.
    #[arg(long)]
    allow_incomplete: bool,
    #[command(flatten)]
    detect: Detect,
}

impl CheckArgs {
    fn validate(self) -> Result<run::check::Config, Fail> {
        if self.baseline.is_empty() && self.rules.is_none() {
            return Err(Fail::input(
                "check needs --baseline BASE.json or --rules RULES.json (or both)",
            ));
        }
        Ok(run::check::Config {
            trace: self.trace,
            baselines: self.baseline,
            rules: self.rules,
            junit: self.junit,
            allow_incomplete: self.allow_incomplete,
            opts: self.detect.options(),
        })
    }
}

#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    /// Input format.
    #[arg(long, value_enum)]
    from: ImportFrom,
    input: PathBuf,
    /// The trace file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Skip malformed lines (counted and reported) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
}

impl ImportArgs {
    fn validate(self) -> run::import::Config {
        run::import::Config {
            from: self.from,
            input: self.input,
            output: self.output,
            skip_bad: self.skip_bad,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct CompareArgs {
    /// Trace files or saved reports (`blkprof report --json`), two or more: the first is
    /// the baseline.
    #[arg(required = true, num_args = 2.., value_name = "TRACE|REPORT")]
    traces: Vec<PathBuf>,
    /// Device to compare (by name) when the runs have several.
    #[arg(long)]
    device: Option<String>,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    detect: Detect,
}

impl CompareArgs {
    fn validate(self) -> run::compare::Config {
        run::compare::Config {
            arms: self.traces,
            device: self.device,
            json: self.json,
            opts: self.detect.options(),
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct WhatifArgs {
    /// Trace file written by blkprof-trace (of the single disk the array would replace).
    trace: PathBuf,
    /// Members of the md RAID0 (2 or more).
    #[arg(long, value_name = "N")]
    raid0: u32,
    /// md's chunk size: a multiple of 4 KiB (4K, 64K, 64KiB, 512k; mdadm's default 512K).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    chunk: u64,
    /// Device to model (name or MAJ:MIN) when the trace has several.
    #[arg(long)]
    device: Option<String>,
    /// Where the array's data would start on the traced disk (the start of the partition
    /// holding the data, e.g. 1M), subtracted from every address; IOs before it are left out.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "0")]
    offset: u64,
    /// Print the result as JSON (the array in the shape of the report's `arrays` section).
    #[arg(long)]
    json: bool,
}

impl WhatifArgs {
    fn validate(self) -> Result<run::whatif::Config, Fail> {
        let raid0 = analyzer::whatif::Raid0::new(self.raid0, self.chunk).map_err(Fail::input)?;
        if !self.offset.is_multiple_of(512) {
            return Err(Fail::input(analyzer::whatif::WhatIfError::Offset(
                self.offset,
            )));
        }
        Ok(run::whatif::Config {
            trace: self.trace,
            opts: analyzer::whatif::Options {
                raid0,
                device: self.device,
                offset_bytes: self.offset,
            },
            json: self.json,
        })
    }
}

/// How bursts and spikes are found; the defaults are documented in docs/report-json.md.
#[derive(clap::Args, Clone, Debug)]
struct Detect {
    /// Length of the reported time-series intervals (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration, help_heading = "Detection")]
    interval: u64,
    /// Resolution of burst and spike detection.
    #[arg(long, default_value = "100ms", value_parser = parse_duration, help_heading = "Detection")]
    resolution: u64,
    /// A write burst is write throughput above this many times the run's median...
    #[arg(long, default_value_t = analyzer::series::Options::default().burst_factor, help_heading = "Detection")]
    burst_factor: f64,
    /// ...and above this many times the run's mean write throughput...
    #[arg(long, default_value_t = analyzer::series::Options::default().burst_mean_factor, help_heading = "Detection")]
    burst_mean_factor: f64,
    /// ...and above this rate, in MB/s (10^6 bytes).
    #[arg(long, default_value_t = analyzer::series::Options::default().burst_min_bytes_per_s / 1e6, help_heading = "Detection")]
    burst_min_rate: f64,
    /// Bursts closer than this are one burst.
    #[arg(long, default_value = "1s", value_parser = parse_duration, help_heading = "Detection")]
    burst_gap: u64,
    /// Count only writes by tasks whose name contains this towards bursts (repeatable; default:
    /// every writer). Each burst lists who wrote it; e.g. `--burst-comm MemtableFlushWr` keeps
    /// Cassandra's memtable flushes and leaves out compactions and commit-log syncs.
    #[arg(long = "burst-comm", value_name = "NAME", help_heading = "Detection")]
    burst_comms: Vec<String>,
    /// Discards within this long after a burst are counted as following it.
    #[arg(long, default_value = "60s", value_parser = parse_duration, help_heading = "Detection")]
    discard_window: u64,
    /// A queue-depth spike is a depth above this many times the median...
    #[arg(long, default_value_t = analyzer::series::Options::default().spike_factor, help_heading = "Detection")]
    spike_factor: f64,
    /// ...and at least this deep.
    #[arg(long, default_value_t = analyzer::series::Options::default().spike_min_depth, help_heading = "Detection")]
    spike_min_depth: f64,
    /// Spikes closer than this are one spike.
    #[arg(long, default_value = "500ms", value_parser = parse_duration, help_heading = "Detection")]
    spike_gap: u64,
    /// Label each IO with what the application was doing, from its file and thread
    /// (traces of blkprof-trace --files): `cassandra` (the built-in profile: commit log,
    /// flush, compaction, query reads, other), a profile file of your own rules
    /// (docs/classes.md), or `none`. Default `auto`: the Cassandra profile for traces that
    /// name files, shown when it finds Cassandra's files and threads.
    #[arg(long, value_name = "PROFILE", default_value = "auto", value_parser = parse_classes, help_heading = "Detection")]
    classes: analyzer::classes::Choice,
}

fn parse_classes(s: &str) -> Result<analyzer::classes::Choice, String> {
    analyzer::classes::Choice::parse(s).map_err(|e| e.to_string())
}

impl Detect {
    fn options(&self) -> analyzer::series::Options {
        analyzer::series::Options {
            interval_ns: self.interval,
            fine_ns: self.resolution,
            burst_factor: self.burst_factor,
            burst_mean_factor: self.burst_mean_factor,
            burst_min_bytes_per_s: self.burst_min_rate * 1e6,
            burst_gap_ns: self.burst_gap,
            burst_comms: self.burst_comms.clone(),
            discard_window_ns: self.discard_window,
            spike_factor: self.spike_factor,
            spike_min_depth: self.spike_min_depth,
            spike_gap_ns: self.spike_gap,
            heatmaps: false,
            classes: self.classes.clone(),
        }
    }
}

/// The stress tool's output and the application's logs, for `report` and `export --format
/// perfetto`.
#[derive(clap::Args)]
struct AppArgs {
    /// The stress tool's output (YCSB stdout or stderr, with or without timestamps), shown
    /// next to the disk on the same wall-clock axis. Repeatable.
    #[arg(long = "stress", value_name = "FILE")]
    stress: Vec<PathBuf>,
    /// When the stress run started, for output whose status lines carry elapsed seconds
    /// only (cassandra-stress): places them on the trace's clock. With Z or an offset
    /// (2026-11-22T06:45:03Z, 2026-11-22T08:45:03+02:00) it is that instant; without, a
    /// local time in --stress-tz. Lines with their own timestamps keep them.
    #[arg(long = "stress-start", value_name = "TIME", value_parser = parse_start)]
    stress_start: Option<analyzer::stress::StartTime>,
    /// The time zone of the stress output's timestamps (YCSB writes local time): UTC, an
    /// offset such as +02:00 or -05:30, or an IANA name such as Europe/Berlin. Default:
    /// the zone the tracer recorded in the trace (UTC for traces that predate it).
    #[arg(long = "stress-tz", value_name = "TZ", value_parser = parse_zone)]
    stress_tz: Option<analyzer::zone::Zone>,
    /// The application's log (Cassandra system.log): flushes, compactions and SSTable
    /// deletions become markers, and flushes are matched with write bursts. Repeatable.
    #[arg(long = "app-log", value_name = "FILE")]
    app_logs: Vec<PathBuf>,
    /// The time zone of the application log's timestamps (Cassandra logs local time),
    /// written as for --stress-tz. Default: the zone the tracer recorded in the trace.
    #[arg(long = "app-log-tz", value_name = "TZ", value_parser = parse_zone)]
    app_log_tz: Option<analyzer::zone::Zone>,
}

impl AppArgs {
    fn into_inputs(self) -> AppInputs {
        AppInputs {
            stress: self.stress,
            stress_start: self.stress_start,
            stress_tz: self.stress_tz,
            app_logs: self.app_logs,
            app_log_tz: self.app_log_tz,
        }
    }
}

fn parse_start(s: &str) -> Result<analyzer::stress::StartTime, String> {
    analyzer::stress::StartTime::parse(s).ok_or_else(|| {
        format!(
            "'{s}': expected a UTC time such as 2026-11-22T06:45:03Z, a time with its offset such as 2026-11-22T08:45:03+02:00, or a local time such as \"2026-11-22 08:45:03\" (read in --stress-tz)"
        )
    })
}

fn parse_zone(s: &str) -> Result<analyzer::zone::Zone, String> {
    analyzer::zone::Zone::parse(s)
}

/// A duration ([`tracer_common::units`]) in nanoseconds.
fn parse_duration(s: &str) -> Result<u64, String> {
    let d = tracer_common::units::parse_duration(s)?;
    u64::try_from(d.as_nanos()).map_err(|_| format!("{s:?}: too long"))
}

fn parse_time_point(s: &str) -> Result<analyzer::export::perfetto::TimePoint, String> {
    analyzer::export::perfetto::TimePoint::parse(s)
}
