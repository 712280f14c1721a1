//! `blkprof`: the command line over the analyzer library; parses the arguments, runs the
//! command, maps its outcome to the exit code.

#![forbid(unsafe_code)]
#![expect(
    unused_crate_dependencies,
    reason = "the bin links the lib's dependencies; the lib target checks them"
)]

use std::path::PathBuf;
use std::process::ExitCode;

use analyzer::summary::JsonReport;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "blkprof",
    version,
    about = "Read blkprof trace files and report what the disk really did.",
    after_help = "Examples:\n  blkprof report run.blkp\n  blkprof report run.blkp --json > run.json\n\nTraces are written by blkprof-trace (root). This tool needs no privileges."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
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
    /// Read them, local times in the zones given or else in `trace_zone`; `notes`: also say
    /// on stderr what a file lacks.
    fn read(
        &self,
        trace_zone: &analyzer::zone::Zone,
        notes: bool,
    ) -> Result<analyzer::summary::Context, String> {
        Inputs {
            stress: &self.stress,
            stress_start: self.stress_start,
            stress_zone: self.stress_tz.as_ref().unwrap_or(trace_zone),
            app_logs: &self.app_logs,
            app_log_zone: self.app_log_tz.as_ref().unwrap_or(trace_zone),
        }
        .read(notes)
    }
}

/// `blkprof report`'s arguments (a struct of their own, for the function that runs it).
#[derive(clap::Args)]
struct ReportArgs {
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

#[derive(Subcommand)]
enum Cmd {
    /// The workload summary: per device and op, IO counts, volume, block-size mix, latency,
    /// and the trace's coverage of the kernel's own counters.
    Report(ReportArgs),
    /// Export a trace: a fio iolog (version 3, with timing: `fio --read_iolog FILE` replays the
    /// pattern; fio 3.33 replays reads, writes and syncs but not trims), CSV, JSON lines, or
    /// Parquet for SQL engines (one row per IO; recipes for DuckDB and Spark in docs/fleet.md).
    #[command(
        after_help = "Parquet examples:\n  blkprof export run.blkp --format parquet -o run.parquet\n  blkprof export node1/*.blkp node2/*.blkp --format parquet -o fleet/\n      (several traces: fleet/host=H/date=YYYY-MM-DD/part-N.parquet, N the trace's position)\n  duckdb -c \"SELECT host, op, count(*) FROM read_parquet('fleet/**/*.parquet', hive_partitioning = true) GROUP BY ALL\"\n\nColumns: host, device, op (the report's op), flags, complete_time, issue_time, enter_time\n(UTC timestamps, ns), device_latency_ns, total_latency_ns, queue_ns, bytes, sector (512-byte\nunits), pid, comm, dev_inflight, os_inflight, error, requeues. The run (kernel, losses, coverage\nagainst /proc/diskstats) is in each file's key-value metadata under blkprof.run.\n\nPerfetto examples (open the file at https://ui.perfetto.dev, docs/perfetto.md):\n  blkprof export run.blkp --format perfetto -o run.pftrace\n  blkprof export run.blkp --format perfetto --from 60 --to 90 -o slice.pftrace\n  blkprof export run.blkp --format perfetto --min-latency 1ms -o slow.pftrace\nPer device: one track of IO slices (submission to completion, with the device time nested;\narguments sector, bytes, flags, pid, comm, in-flight counts) on lanes merged into one, and\ncounters of the report's per-interval series (IOPS, MB/s, p99, in-flight)."
    )]
    Export {
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
    },
    /// Gate CI on a trace: compare its summary with a saved baseline (`blkprof report --json`)
    /// or with rules (docs/check-rules.md). Exit 0 on pass, 1 on fail, 2 on bad input.
    Check {
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
    },
    /// Import another tool's trace into blkprof's format (docs/importers.md): msr (MSR
    /// Cambridge / SNIA CSV), blk (blkparse's default text output, or the ftrace blk tracer's lines).
    Import {
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
    },
    /// Two or more runs side by side (A/B experiments), with the differences that matter
    /// flagged: counts, volumes and rates moving more than 10%, latencies more than 25%, shares
    /// more than 5 points; then the flagged differences in sentences, each arm against the
    /// first. Compares the busiest device of each run, or --device. Size classes are compared
    /// class by class; a figure a run does not have (no IOs of that op, no stress results) is
    /// n/a, never 0, and never flagged.
    #[command(
        after_help = "Examples:\n  blkprof compare before.blkp after.blkp\n  blkprof compare ra4096/report.json ra128/report.json ra8/report.json\n  blkprof compare doc2k/report.json doc4k/report.json doc8k/report.json doc16k/report.json doc32k/report.json --json\n\nEach arm is a trace (summarized with the detection options below) or a report saved by\n`blkprof report --json` (taken as it is; made with --stress, it brings the stress tool's\nresults: client ops/s, per operation its count, mean and p99 latency, and the device's read\nbytes per client read). Arms are named by the trace labels (blkprof-trace --label) whose values\ndiffer, else by the queue settings that differ (read-ahead), else by path; the columns are\nA, B, C... in the order given, A the baseline. JSON: docs/report-json.md."
    )]
    Compare {
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
    },
    /// What one traced disk's IO would do on an md RAID0 of N disks with chunk C: every IO
    /// mapped onto the members exactly as Linux md raid0 maps it (split at chunk boundaries;
    /// a discard as one request per member; a flush to every member). Per member: requests,
    /// bytes and their shares, reads and writes, size mix, mean size, queue depth replayed on
    /// the trace's own times; the busiest member over the mean; how many IOs were split.
    #[command(
        after_help = "Examples:\n  blkprof whatif --raid0 4 --chunk 64K node1.blkp\n  for c in 4K 64K 128K 256K; do blkprof whatif --raid0 4 --chunk $c node1.blkp; done\n  blkprof whatif --raid0 4 --chunk 512K --device nvme0n1 --json node1.blkp\n\nTrace the single disk of a node as it runs the workload (blkprof-trace), then ask what a\nstripe would see. The members are named member0.. in md's slot order; the lines read as the\n`arrays` section of `blkprof report` reads for a traced md array. Not modelled (said in the\noutput too): merging of a member's contiguous pieces in its queue (\"if merged\" counts each\nIO's pieces on a member as one), md's and the disks' own request size limits, md's data\noffset (it shifts addresses only), and timing (depths replay the trace's own times)."
    )]
    Whatif {
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
    },
}

/// `blkprof import --from`: whose trace the input is (docs/importers.md).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ImportFrom {
    /// MSR Cambridge / SNIA block trace CSV.
    Msr,
    /// blkparse's default text output, or the ftrace blk tracer's lines.
    Blk,
}

/// Why a command stopped: each is printed once, in `main`, which also gives the exit code.
enum Fail {
    /// Exit 2: bad input (a file missing or not what it should be, options that do not fit).
    Input(String),
    /// Exit 1: the input was good but the output could not be written.
    Output(String),
    /// Standard output was closed by its reader (`| head`): stop quietly, exit 0.
    Closed,
}

impl Fail {
    /// Bad input, as the error says it.
    fn input(e: impl std::fmt::Display) -> Fail {
        Fail::Input(e.to_string())
    }

    /// A failed write to standard output; `what` prefixes the message unless empty.
    fn stdout(e: &std::io::Error, what: &str) -> Fail {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Fail::Closed
        } else if what.is_empty() {
            Fail::Output(e.to_string())
        } else {
            Fail::Output(format!("{what}: {e}"))
        }
    }
}

fn main() -> ExitCode {
    let r = match Cli::parse().cmd {
        Cmd::Import {
            from,
            input,
            output,
            skip_bad,
        } => import(from, &input, &output, skip_bad),
        Cmd::Check {
            trace,
            baseline,
            rules,
            junit,
            allow_incomplete,
            detect,
        } => match run_check(
            &trace,
            &baseline,
            rules.as_deref(),
            junit.as_deref(),
            allow_incomplete,
            &detect.options(),
        ) {
            // A failed rule is the answer, not an error: the table on stdout said which.
            Ok(false) => return ExitCode::from(1),
            r => r.map(drop),
        },
        Cmd::Export {
            traces,
            format,
            device,
            target,
            output,
            host,
            partition,
            compression,
            row_group_rows,
            from,
            to,
            min_latency,
            min_size,
            inputs,
        } => {
            let perfetto_only = from.is_some()
                || to.is_some()
                || min_latency.is_some()
                || min_size.is_some()
                || !inputs.stress.is_empty()
                || !inputs.app_logs.is_empty();
            if perfetto_only && format != analyzer::export::Format::Perfetto {
                Err(Fail::input(
                    "--from, --to, --min-latency, --min-size, --stress and --app-log are for --format perfetto",
                ))
            } else if format == analyzer::export::Format::Perfetto {
                if traces.len() > 1 {
                    Err(Fail::input("--format perfetto exports one trace at a time"))
                } else {
                    tracer_common::format::TraceReader::open(&traces[0])
                        .map_err(Fail::input)
                        .and_then(|r| {
                            let zone = analyzer::zone::Zone::of_trace(r.header());
                            inputs.read(&zone, true).map_err(Fail::Input)
                        })
                        .and_then(|context| {
                            let opts = analyzer::export::perfetto::PerfettoOptions {
                                device,
                                from_ns: from,
                                to_ns: to,
                                min_latency_ns: min_latency.unwrap_or(0),
                                min_bytes: min_size.unwrap_or(0),
                                context,
                            };
                            export_perfetto(&traces[0], output.as_deref(), &opts)
                        })
                }
            } else if format == analyzer::export::Format::Parquet {
                let opts = analyzer::export::parquet::ParquetOptions {
                    host,
                    partition,
                    device,
                    codec: compression,
                    // At most 2^30: the argument's range.
                    row_group_rows: analyzer::numeric::u64_to_usize_saturating(row_group_rows),
                };
                export_parquet(&traces, output.as_deref(), &opts)
            } else if traces.len() > 1 {
                Err(Fail::input(
                    "only --format parquet exports several traces (into a directory); export the others one at a time",
                ))
            } else if host.is_some() || partition {
                Err(Fail::input(
                    "--host and --partition are for --format parquet",
                ))
            } else {
                export(
                    &traces[0],
                    format,
                    device.as_deref(),
                    target.as_deref(),
                    output.as_deref(),
                )
            }
        }
        Cmd::Compare {
            traces,
            device,
            json,
            detect,
        } => compare(&traces, device.as_deref(), json, &detect.options()),
        Cmd::Whatif {
            trace,
            raid0,
            chunk,
            device,
            offset,
            json,
        } => whatif(&trace, raid0, chunk, device, offset, json),
        Cmd::Report(args) => report(&args),
    };
    match r {
        Ok(()) | Err(Fail::Closed) => ExitCode::SUCCESS,
        Err(Fail::Input(msg)) => {
            eprintln!("blkprof: {msg}");
            ExitCode::from(2)
        }
        Err(Fail::Output(msg)) => {
            eprintln!("blkprof: {msg}");
            ExitCode::from(1)
        }
    }
}

fn import(
    from: ImportFrom,
    input: &std::path::Path,
    output: &std::path::Path,
    skip_bad: bool,
) -> Result<(), Fail> {
    // Written beside the output and renamed into place when complete: a failed import leaves
    // no half-written trace, and never clobbers a file that was there.
    let mut part = output.as_os_str().to_owned();
    part.push(".part");
    let part = std::path::PathBuf::from(part);
    let st = match from {
        ImportFrom::Msr => analyzer::import::import_msr(input, &part, skip_bad),
        ImportFrom::Blk => analyzer::import::import_blk(input, &part, skip_bad),
    }
    .and_then(|st| {
        std::fs::rename(&part, output).map(|()| st).map_err(|e| {
            analyzer::import::ImportError::Write(tracer_common::format::FormatError::Io {
                path: output.to_path_buf(),
                source: e,
            })
        })
    });
    let st = match st {
        Ok(st) => st,
        Err(e) => {
            let _ignored = std::fs::remove_file(&part);
            return Err(Fail::input(e));
        }
    };
    eprintln!(
        "blkprof: imported {} IOs into {}",
        st.records,
        output.display()
    );
    let b = &st.blk;
    if b.merges + b.splits + b.requeues > 0 {
        eprintln!(
            "blkprof: followed {} merges, {} splits, {} requeues",
            b.merges, b.splits, b.requeues
        );
    }
    if b.unmatched_queued + b.unmatched_issued > 0 {
        eprintln!(
            "blkprof: {} queued and {} issued events had no completion (the input ended first, or the request completed under a sector that could not be followed)",
            b.unmatched_queued, b.unmatched_issued
        );
    }
    if st.skipped > 0 {
        eprintln!(
            "blkprof: skipped {} malformed lines (first: {})",
            st.skipped,
            st.first_skipped.unwrap_or_default()
        );
    }
    Ok(())
}

fn export(
    trace: &std::path::Path,
    format: analyzer::export::Format,
    device: Option<&str>,
    target: Option<&str>,
    output: Option<&std::path::Path>,
) -> Result<(), Fail> {
    // Every export error exits 2, writing ones included (ExportError::Io is the read side's
    // too): as before this type existed.
    let mut out: Box<dyn std::io::Write> = match output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Fail::Input(format!("cannot write {}: {e}", p.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let st = match analyzer::export::export(trace, format, device, target, &mut out) {
        Err(analyzer::export::ExportError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            return Err(Fail::Closed);
        }
        r => r.map_err(Fail::input)?,
    };
    if st.skipped > 0 {
        eprintln!(
            "blkprof: {} IOs an iolog cannot express were left out",
            st.skipped
        );
    }
    Ok(())
}

fn export_perfetto(
    trace: &std::path::Path,
    output: Option<&std::path::Path>,
    opts: &analyzer::export::perfetto::PerfettoOptions,
) -> Result<(), Fail> {
    use std::io::IsTerminal as _;
    let mut out: Box<dyn std::io::Write> = match output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Fail::Input(format!("cannot write {}: {e}", p.display())))?,
        )),
        None if std::io::stdout().is_terminal() => {
            return Err(Fail::input(
                "a Perfetto trace is binary: write it to a file with -o run.pftrace",
            ));
        }
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let st = match analyzer::export::perfetto::export_perfetto(trace, opts, &mut out) {
        Err(analyzer::export::ExportError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            return Err(Fail::Closed);
        }
        r => r.map_err(Fail::input)?,
    };
    eprintln!(
        "blkprof: {} IOs on {} lanes, {} counter samples, {} bytes ({:.0} bytes per IO){}",
        st.ios,
        st.lanes,
        st.counter_samples,
        st.bytes,
        st.bytes as f64 / st.ios.max(1) as f64,
        if st.cut > 0 {
            format!(
                "; {} IOs left out by --device, --from/--to or the cuts",
                st.cut
            )
        } else {
            String::new()
        }
    );
    if st.app_slices + st.app_instants + st.stress_samples > 0 {
        eprintln!(
            "blkprof: application tracks: {} flush and compaction slices, {} SSTable deletions, {} stress counter samples (those within the trace's time)",
            st.app_slices, st.app_instants, st.stress_samples
        );
    }
    if st.damaged > 0 {
        eprintln!(
            "blkprof: {} records with times outside the run were left out (as the report does)",
            st.damaged
        );
    }
    Ok(())
}

fn parse_time_point(s: &str) -> Result<analyzer::export::perfetto::TimePoint, String> {
    analyzer::export::perfetto::TimePoint::parse(s)
}

/// Bytes, or with a binary suffix: 4K, 64KiB, 512k, 1M, 2G ([`tracer_common::units`]).
fn parse_size(s: &str) -> Result<u64, String> {
    tracer_common::units::parse_size(s)
}

fn export_parquet(
    traces: &[PathBuf],
    output: Option<&std::path::Path>,
    opts: &analyzer::export::parquet::ParquetOptions,
) -> Result<(), Fail> {
    let out = output.ok_or_else(|| {
        Fail::input("Parquet is written to a file or directory: give it with -o OUT")
    })?;
    let st = analyzer::export::parquet::export_parquet(traces, out, opts).map_err(|e| match e {
        analyzer::export::ExportError::Output(_)
        | analyzer::export::ExportError::Parquet { .. } => Fail::Output(e.to_string()),
        e => Fail::input(e),
    })?;
    eprintln!(
        "blkprof: wrote {} IOs into {} Parquet file{} at {}",
        st.written,
        st.files.len(),
        if st.files.len() == 1 { "" } else { "s" },
        out.display()
    );
    if st.outside_window > 0 {
        eprintln!(
            "blkprof: left out {} records whose times cannot belong to their run (damaged), as the report does",
            st.outside_window
        );
    }
    Ok(())
}

fn compare(
    arms: &[PathBuf],
    device: Option<&str>,
    json: bool,
    opts: &analyzer::series::Options,
) -> Result<(), Fail> {
    let mut inputs = Vec::new();
    for p in arms {
        inputs.push(analyzer::compare::Input {
            path: p.display().to_string(),
            report: read_arm(p, opts)?,
        });
    }
    let c = analyzer::compare::compare_inputs(&inputs, device).map_err(Fail::input)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        write_json(&mut out, &c)
    } else {
        analyzer::compare::write_text(&mut out, &c)
    }
    .map_err(|e| Fail::stdout(&e, ""))
}

/// An arm of `compare`: a trace (it starts with the format's magic bytes), summarized here, or
/// a saved report (JSON: it starts with `{`), taken as it is.
fn read_arm(path: &std::path::Path, opts: &analyzer::series::Options) -> Result<JsonReport, Fail> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(path)
        .and_then(|f| f.take(64).read_to_end(&mut head))
        .map_err(|e| Fail::Input(format!("cannot read {}: {e}", path.display())))?;
    if head.starts_with(tracer_common::format::MAGIC) {
        return Ok(analyzer::summary::summarize(path, opts)
            .map_err(Fail::input)?
            .to_json());
    }
    if head.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Fail::Input(format!(
            "{} is neither a blkprof trace (written by blkprof-trace) nor a report (the JSON of `blkprof report --json`)",
            path.display()
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| Fail::Input(format!("cannot read {}: {e}", path.display())))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        Fail::Input(format!(
            "{} is not valid JSON ({e}): give a trace or the JSON of `blkprof report --json`",
            path.display()
        ))
    })?;
    let is_report = ["schema_version", "traces", "devices"]
        .iter()
        .all(|k| v.get(k).is_some());
    if !is_report {
        let hint = if v.get("rows").is_some() {
            ": it looks like the output of `blkprof compare --json`; give the arms' reports or traces"
        } else {
            ""
        };
        return Err(Fail::Input(format!(
            "{} is JSON but not a blkprof report (the JSON of `blkprof report --json`, with schema_version, traces and devices){hint}",
            path.display()
        )));
    }
    report_from_json(path, v).map_err(Fail::Input)
}

fn whatif(
    trace: &std::path::Path,
    members: u32,
    chunk_bytes: u64,
    device: Option<String>,
    offset_bytes: u64,
    json: bool,
) -> Result<(), Fail> {
    let opts = analyzer::whatif::Options {
        raid0: analyzer::whatif::Raid0::new(members, chunk_bytes).map_err(Fail::input)?,
        device,
        offset_bytes,
    };
    let w = analyzer::whatif::whatif(trace, &opts).map_err(Fail::input)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        write_json(&mut out, &w)
    } else {
        analyzer::whatif::write_text(&mut out, &w)
    }
    .map_err(|e| Fail::stdout(&e, ""))
}

/// Pretty JSON and a newline. The error keeps its io kind, so that a reader closing the pipe
/// (`--json | head`) is seen as that and not reported as a failure.
fn write_json(out: &mut impl std::io::Write, v: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(|e| match e.io_error_kind() {
        Some(k) => std::io::Error::new(k, e),
        None => std::io::Error::other(e),
    })?;
    writeln!(out)
}

fn report(args: &ReportArgs) -> Result<(), Fail> {
    let mut opts = args.detect.options();
    // Only what is shown pays for them.
    opts.heatmaps = args.heatmaps || args.out_dir.is_some();
    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Fail::Input(format!("cannot create {}: {e}", dir.display())))?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut emit = |t: &std::path::Path, j: &JsonReport| -> Result<(), Fail> {
        if let Some(dir) = &args.out_dir {
            write_files(dir, t, j)
                .map_err(|e| Fail::Output(format!("writing into {}: {e}", dir.display())))?;
        }
        if args.json {
            write_json(&mut out, j)
        } else {
            analyzer::text::write(&mut out, j)
        }
        .map_err(|e| Fail::stdout(&e, "writing the report"))
    };
    if let Some(path) = &args.from_json {
        return emit(path, &read_report(path).map_err(Fail::Input)?);
    }
    for (i, t) in args.traces.iter().enumerate() {
        // Local times are read in the zones given, else in the one the trace recorded:
        // each trace may come from another host.
        let trace_zone = analyzer::zone::Zone::of_trace(
            tracer_common::format::TraceReader::open(t)
                .map_err(Fail::input)?
                .header(),
        );
        let context = args.inputs.read(&trace_zone, i == 0).map_err(Fail::Input)?;
        let mut s = analyzer::summary::summarize(t, &opts).map_err(Fail::input)?;
        s.context = context;
        let j = s.to_json();
        drop(s);
        for w in &j.time_warnings {
            eprintln!("blkprof: warning: {}", w.message);
        }
        emit(t, &j)?;
    }
    Ok(())
}

/// The stress output and application logs given to `report`, and the zones to read them in.
struct Inputs<'a> {
    stress: &'a [PathBuf],
    stress_start: Option<analyzer::stress::StartTime>,
    stress_zone: &'a analyzer::zone::Zone,
    app_logs: &'a [PathBuf],
    app_log_zone: &'a analyzer::zone::Zone,
}

impl Inputs<'_> {
    /// Read them all; `notes`: also say on stderr what a file lacks (once, not per trace).
    fn read(&self, notes: bool) -> Result<analyzer::summary::Context, String> {
        let mut context = analyzer::summary::Context::default();
        for p in self.stress {
            let mut r =
                analyzer::stress::read_stress_in(p, self.stress_zone).map_err(|e| e.to_string())?;
            if let Some(start) = self.stress_start {
                let t = start
                    .unix_ns(self.stress_zone)
                    .ok_or("--stress-start: the time is out of range")?;
                analyzer::stress::anchor(&mut r, t);
            }
            context.stress.push(r);
        }
        for p in self.app_logs {
            let l = analyzer::stress::read_app_log_in(p, self.app_log_zone)
                .map_err(|e| e.to_string())?;
            if notes && l.flushes.is_empty() {
                eprintln!(
                    "blkprof: warning: {} has no flush lines (\"Enqueuing flush\" / \"Completed flushing\"): no flush markers to match",
                    p.display()
                );
            }
            context.logs.push(l);
        }
        Ok(context)
    }
}

/// A saved report (`blkprof report --json`).
fn read_report(path: &std::path::Path) -> Result<JsonReport, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "{} is not a blkprof report (the JSON of `blkprof report --json`): {e}",
            path.display()
        )
    })?;
    report_from_json(path, v)
}

/// A saved report from its JSON; warns when a newer blkprof wrote it.
fn report_from_json(path: &std::path::Path, v: serde_json::Value) -> Result<JsonReport, String> {
    let j: JsonReport = serde_json::from_value(v).map_err(|e| {
        format!(
            "{} is not a blkprof report (the JSON of `blkprof report --json`): {e}",
            path.display()
        )
    })?;
    if j.schema_version > analyzer::summary::REPORT_SCHEMA_VERSION {
        eprintln!(
            "blkprof: warning: {} was written by a newer blkprof (report schema {}, this one reads {}): what it added is not shown",
            path.display(),
            j.schema_version,
            analyzer::summary::REPORT_SCHEMA_VERSION
        );
    }
    Ok(j)
}

/// report.html, report.json and the charts as SVG files; several traces get name prefixes.
fn write_files(
    dir: &std::path::Path,
    trace: &std::path::Path,
    j: &analyzer::summary::JsonReport,
) -> std::io::Result<()> {
    let stem = trace
        .file_stem()
        .map_or_else(|| "trace".into(), |x| x.to_string_lossy().into_owned());
    std::fs::write(dir.join(format!("{stem}.html")), analyzer::html::render(j))?;
    // Not over the report being rendered (--from-json DIR/run.json -o DIR).
    let json_path = dir.join(format!("{stem}.json"));
    let same = |a: &std::path::Path, b: &std::path::Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if !same(&json_path, trace) {
        let json = serde_json::to_vec_pretty(j).map_err(std::io::Error::other)?;
        std::fs::write(json_path, json)?;
    }
    for d in &j.devices {
        for c in analyzer::plots::charts(j, d) {
            let base = dir.join(format!("{stem}-{}-{}", d.name.replace('/', "_"), c.name));
            std::fs::write(base.with_extension("svg"), c.svg())?;
            c.png(&base.with_extension("png"))?;
        }
        for h in analyzer::plots::heatmaps(j, d) {
            let base = dir.join(format!("{stem}-{}-{}", d.name.replace('/', "_"), h.name));
            std::fs::write(base.with_extension("svg"), h.svg())?;
            h.png(&base.with_extension("png"))?;
        }
    }
    eprintln!(
        "blkprof: wrote {}",
        dir.join(format!("{stem}.html")).display()
    );
    Ok(())
}

/// `blkprof check`: whether every rule passed (the table on stdout says which did not).
fn run_check(
    trace: &std::path::Path,
    baselines: &[PathBuf],
    rules: Option<&std::path::Path>,
    junit: Option<&std::path::Path>,
    allow_incomplete: bool,
    opts: &analyzer::series::Options,
) -> Result<bool, Fail> {
    fn read_json<T: serde::de::DeserializeOwned>(p: &std::path::Path) -> Result<T, String> {
        std::fs::read(p)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    }
    if baselines.is_empty() && rules.is_none() {
        return Err(Fail::input(
            "check needs --baseline BASE.json or --rules RULES.json (or both)",
        ));
    }
    let mut base: Vec<analyzer::summary::JsonReport> = Vec::new();
    for p in baselines {
        base.push(read_json(p).map_err(|e| {
            Fail::Input(format!(
                "{}: not a `blkprof report --json` document: {e}",
                p.display()
            ))
        })?);
    }
    let rules: analyzer::check::Rules = match rules {
        Some(p) => read_json(p).map_err(|e| {
            Fail::Input(format!(
                "{}: not a rules file (docs/check-rules.md): {e}",
                p.display()
            ))
        })?,
        None => analyzer::check::Rules {
            device: None,
            rules: analyzer::check::default_rules_for(base.len()),
        },
    };
    let summary = analyzer::summary::summarize(trace, opts)
        .map_err(Fail::input)?
        .to_json();
    let base: Vec<&analyzer::summary::JsonReport> = base.iter().collect();
    let verdicts = analyzer::check::check_against(&summary, &base, &rules, allow_incomplete)
        .map_err(Fail::Input)?;
    // The table is for people; the exit code and the JUnit file are the verdict, which a reader
    // that stops early (`| head`) does not change. Any other failed write is an error.
    if let Err(e) = analyzer::check::write_table(&mut std::io::stdout().lock(), &verdicts)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(Fail::stdout(&e, "writing the verdicts"));
    }
    if let Some(j) = junit {
        std::fs::write(
            j,
            analyzer::check::junit(&verdicts, &trace.display().to_string()),
        )
        .map_err(|e| Fail::Input(format!("cannot write {}: {e}", j.display())))?;
    }
    Ok(verdicts.iter().all(|v| v.pass))
}
