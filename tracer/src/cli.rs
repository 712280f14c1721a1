//! Command line, turned into one validated [`Config`] before any work starts.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tracer_common::format::DeviceInfo;
use tracer_common::op::Op;

#[derive(Parser, Debug)]
#[command(
    name = "blkprof-trace",
    version = tracer_common::VERSION,
    about = "Trace every block IO with eBPF: live per-device stats, exact totals, and a compact trace file.",
    long_about = "Trace every block IO with eBPF: live per-device stats, exact totals, and a compact trace file.\n\n\
Every request's submission, issue and completion is captured (device, sector, size, op and flags, \
submitting pid/comm, queue and device latency, in-flight counts). Totals are kept exactly in the kernel \
even if the ring buffer overflows, and checked against /proc/diskstats at the end.\n\n\
Needs root (or CAP_BPF + CAP_PERFMON) and a kernel with BTF (Linux 5.10+; submitters are taken at block_io_start from 6.5, at block_getrq before).",
    after_help = "Examples:\n  \
blkprof-trace --device loop3 --duration 30s --output run.blkp\n  \
blkprof-trace --device nvme0n1 --json --interval 5s\n  \
blkprof-trace --device sdb --output /var/log/blkprof/db.blkp --rotate-size 1G --keep 48\n  \
blkprof-trace --device nvme0n1 --quiet --metrics-addr 127.0.0.1:9755   (an agent: metrics only)\n  \
blkprof-trace --device nvme0n1 --no-records --metrics-addr 127.0.0.1:9755   (always on: in-kernel aggregates, no records)\n\n\
Then: blkprof report run.blkp"
)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent command-line switches (--json, --quiet, --no-records, ...), not the \
              states of one thing"
)]
#[expect(
    clippy::doc_markdown,
    reason = "clap prints these docs as the --help text, where backticks would show"
)]
pub struct Args {
    /// Device to trace: a name (loop0, /dev/nvme0n1), a node (/dev/mapper/vg-data) or MAJ:MIN
    /// (7:0). Repeatable. Default: all.
    /// A bio-based device (md RAID, device-mapper) is traced through the disks under it.
    #[arg(short, long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Keep only IOs submitted by this process id. Repeatable.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Keep only IOs submitted by a task with this command name (exact, as in /proc/PID/comm). Repeatable.
    #[arg(long = "comm", value_name = "COMM")]
    pub comms: Vec<String>,
    /// Keep only IOs submitted from this cgroup or below it (cgroup v2; a path below the
    /// unified hierarchy's mount, like /system.slice/cassandra.service, or the same with the
    /// mount in front). Repeatable. Written-back pages count where their writer (a kernel
    /// thread) is, not where they were dirtied.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// Keep only these operations: read, write, flush, discard, write-zeroes, secure-erase, ... Repeatable.
    #[arg(long = "op", value_name = "OP")]
    pub ops: Vec<String>,
    /// Stop after this long (e.g. 30s, 5m, 2h). Default: until Ctrl-C or SIGTERM.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Interval of the live view and the time series.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub interval: Duration,
    /// Write the trace here (blkprof's compact format); HDR histograms go next to it as .hlog.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print the live view as JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No live view; only the end summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Continuous mode: start a new trace file when the current one reaches this size (e.g. 1G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub rotate_size: Option<u64>,
    /// Continuous mode: start a new trace file after this long (e.g. 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub rotate_time: Option<Duration>,
    /// Continuous mode: keep only the newest N trace files (older ones are deleted), counting
    /// earlier runs' files of the same name. When the disk fills (something else writing), the
    /// oldest go early, never the open one.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Kernel ring buffer memory (power of two, at least 4K). Larger rides out longer stalls.
    /// From Linux 6.5 it is split into a ring per CPU (up to 8), each at least 64K, plus a ring
    /// of an eighth (at least 1M) that names what a full ring lost; each CPU writes first to a
    /// small ring of its own (128K, or its whole share of a smaller budget), which stays in its
    /// cache, and spills into its share of the budget only when that one is full.
    #[arg(long, default_value = "16M", value_name = "SIZE", value_parser = parse_size)]
    pub ring_size: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (OpenMetrics when the scraper asks):
    /// exact per-device IO and byte counters, latency histograms per op and phase, request
    /// sizes, in-flight gauges, losses and the probe's own cost. A bare port (9755) listens on
    /// 127.0.0.1 only; give an address (0.0.0.0:9755) to listen beyond this machine.
    /// Works with or without --output.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Latency histogram buckets per power of two (1, 2, 4 or 8): a quantile from them is off
    /// by at most 1/N of its value (25% at 4). More buckets: finer quantiles, more series.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = parse_per_octave)]
    pub metrics_buckets_per_octave: u32,
    /// Keep the last DURATION of per-IO records in memory (about 10 bytes per IO, bounded by
    /// --flight-recorder-size) and write them as a trace file on SIGUSR1, on POST /dump to the
    /// metrics endpoint, or when a --trigger fires. Instead of --output.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub flight_recorder: Option<Duration>,
    /// The flight recorder's memory bound, counting all it holds (records, names, and each
    /// segment's aggregates); beyond it the oldest records go first (and the dump says its
    /// window is shorter). While a dump is written, its records are held as well: up to about
    /// twice this.
    #[arg(long, default_value = "512M", value_name = "SIZE", value_parser = parse_size)]
    pub flight_recorder_size: u64,
    /// Name the run: KEY=VALUE written into the trace's header (e.g. arm=ra8,
    /// read_ahead_kb=8, node=cass-3). `blkprof report` shows the labels and `blkprof compare`
    /// names each trace by the ones that differ between them. Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Where the flight recorder writes its dumps (flight-YYYYMMDDTHHMMSSZ.blkp).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub dump_dir: PathBuf,
    /// At most this many dumps in --dump-dir: before writing one, the oldest go.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub dump_max_files: usize,
    /// At most this many bytes of dumps in --dump-dir: before writing one, the oldest go (a
    /// dump larger than this is not written). Default: 4 times --flight-recorder-size.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub dump_quota: Option<u64>,
    /// After a trigger's dump, triggers wait this long before the next (a sustained incident
    /// fires every interval). Default: the --flight-recorder window, so dumps do not overlap.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub dump_cooldown: Option<Duration>,
    /// Allow POST /dump on the metrics endpoint to those who send `Authorization: Bearer
    /// TOKEN`, TOKEN being this file's content (at least 16 characters; the file readable by
    /// its owner only, e.g. `head -c 24 /dev/urandom | base64 > F; chmod 600 F`). Without it,
    /// dumps come only from SIGUSR1 and --trigger. Requests from web pages (an Origin header)
    /// or naming another host are refused.
    #[arg(long, value_name = "FILE")]
    pub dump_token: Option<PathBuf>,
    /// Dump when this holds for a device in an interval: OP.PHASE.pQ > DURATION (OP read,
    /// write, discard, flush or any; PHASE total or device; Q 50, 90, 99, 999 or 9999), e.g.
    /// 'read.total.p99 > 20ms', or 'queue_depth > 256' (the most requests in the OS).
    /// Repeatable; any one fires.
    #[arg(long = "trigger", value_name = "RULE", value_parser = crate::recorder::parse_trigger)]
    pub triggers: Vec<crate::recorder::Trigger>,
    /// After a trigger fires, keep recording this long before the dump, so it holds what
    /// came after as well as the window before.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub dump_after: Duration,
    /// Aggregates only, for always-on use: exact per (device, op) counts, bytes and log-linear
    /// size and latency histograms kept in the kernel by one program at the completion, no
    /// per-IO record. The kernel's own time stamps give the latencies: total latency needs the
    /// device's iostats on (the default), device and queue latency a queue that collects
    /// statistics (write-back throttling or another user turns it on; see the summary). Live
    /// lines, the end summary and --metrics-addr come from the aggregates. Not with --output,
    /// --flight-recorder or the --pid, --comm, --cgroup and --op filters, which need records.
    #[arg(long)]
    pub no_records: bool,
    /// Name the file each IO belongs to: for IO on page-cache pages (buffered reads, read-ahead,
    /// writeback), the file of its first page, named with its path when first met (so a file
    /// deleted right after its IO keeps its name); direct IO and the file systems' metadata are
    /// told apart. The report lists the top files per device and groups them by kind.
    #[arg(long)]
    pub files: bool,
    /// The running kernel's BTF from this file instead of /sys/kernel/btf/vmlinux: for hosts
    /// and containers where that file is hidden or absent (a copy of it, or the file
    /// btfhub-archive publishes for the kernel's exact build). The kernel must still have been
    /// built with BTF (CONFIG_DEBUG_INFO_BTF=y): BTF tracepoints are checked against its own.
    #[arg(long, value_name = "FILE")]
    pub btf: Option<std::path::PathBuf>,
    /// Keep every capability for the whole run, and allow loading programs after the attach
    /// (for debugging). By default, once the probe is attached, the tracer drops every
    /// capability but CAP_BPF where the kernel needs it to read the probe's maps (before about
    /// Linux 5.19, with kernel.unprivileged_bpf_disabled set), and refuses further program
    /// loads, perf events, ptrace and module loads with a seccomp filter.
    #[arg(long)]
    pub keep_privileges: bool,
    /// Attach programs that do nothing, or (`--attach-only=clock`) that read the clock once
    /// each (benchmarks: the cost of being attached, and the floor of a record per IO).
    #[arg(long, hide = true, value_enum, num_args = 0..=1, require_equals = true,
          default_missing_value = "nothing")]
    pub attach_only: Option<AttachOnly>,
    /// Read each IO's owner cgroup even where the io controller is on a v1 hierarchy
    /// (benchmarks: the cost of the loads; the ids are then v1 cgroups').
    #[arg(long, hide = true)]
    pub owner_cgroups_always: bool,
    /// Records joined in the kernel, one ring record per IO (the path of kernels without
    /// block_io_start), where half records on a ring per CPU joined here are the default
    /// (docs/design/records-without-shared-state.md): for benchmarks and comparison.
    #[arg(long, hide = true)]
    pub whole_records: bool,
}

fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("{s:?} is not an address to listen on (try 127.0.0.1:9755, [::1]:9755 or 9755)")
    })
}

/// Most labels one run may carry, and the longest key and value: a header stays small.
const MAX_LABELS: usize = 32;
const MAX_LABEL_KEY: usize = 64;
const MAX_LABEL_VALUE: usize = 256;

/// `KEY=VALUE`: the key letters, digits, `_`, `-` and `.`; the value any printable text.
fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: a label is KEY=VALUE (e.g. read_ahead_kb=8)"))?;
    let key_ok = !k.is_empty()
        && k.len() <= MAX_LABEL_KEY
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !key_ok {
        return Err(format!(
            "{k:?}: a label's key is 1-{MAX_LABEL_KEY} letters, digits, '_', '-' or '.'"
        ));
    }
    if v.len() > MAX_LABEL_VALUE || v.chars().any(char::is_control) {
        return Err(format!(
            "{k}: a label's value is at most {MAX_LABEL_VALUE} bytes of printable text"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

fn parse_per_octave(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n @ (1 | 2 | 4 | 8)) => Ok(n),
        _ => Err(format!("{s:?}: one of 1, 2, 4, 8")),
    }
}

pub use tracer_common::units::parse_duration;

/// A positive size ("64K", "16MiB", "1G"): the analyzer's parser, which the tracer's sizes
/// share, with zero refused (no buffer, file or rotation can be empty).
pub fn parse_size(s: &str) -> Result<u64, String> {
    match tracer_common::units::parse_size(s)? {
        0 => Err(format!("{s:?}: size must be positive")),
        v => Ok(v),
    }
}

/// What `--attach-only`'s programs do (benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttachOnly {
    /// Return at once: the cost of being attached.
    Nothing,
    /// Read the clock once each: the instant every exact record needs from each program.
    Clock,
}

#[derive(Debug, Clone)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the options' independent switches, as `Args` has them"
)]
pub struct Config {
    /// What the probe does per IO (`--no-records`: aggregates only).
    pub mode: crate::probe::ProbeMode,
    /// `--owner-cgroups-always` (benchmarks).
    pub owner_always: bool,
    /// Half records where the kernel has `block_io_start` (not `--whole-records`).
    pub halves: bool,
    /// `--files`.
    pub files: bool,
    /// `--btf`: the kernel's BTF from this file.
    pub btf: Option<std::path::PathBuf>,
    /// `--keep-privileges`: no capability dropped, no seccomp filter after the attach.
    pub keep_privileges: bool,
    /// `--device` as given (recorded in the trace header's filters).
    pub devices: Vec<String>,
    /// The whole disks to trace, from `devices` (empty: all): a bio-based device given there is
    /// replaced by the request-based disks under it.
    pub targets: Vec<DeviceInfo>,
    /// What to tell the user about that replacement, once, at the start.
    pub device_notes: Vec<String>,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    /// `--cgroup`, as paths below the cgroup2 mount.
    pub cgroups: Vec<String>,
    pub ops: Vec<Op>,
    pub duration: Option<Duration>,
    pub interval: Duration,
    pub output: Option<PathBuf>,
    pub json: bool,
    pub quiet: bool,
    pub rotate_size: Option<u64>,
    pub rotate_time: Option<Duration>,
    pub keep: Option<usize>,
    pub ring_bytes: u32,
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// `--label`s, written into every file's header.
    pub labels: std::collections::BTreeMap<String, String>,
    pub metrics_per_octave: u32,
    pub flight_recorder: Option<FlightRecorder>,
    /// `--dump-token`'s content: POST /dump allowed to who sends it.
    pub dump_token: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FlightRecorder {
    pub window: Duration,
    pub max_bytes: u64,
    pub dir: std::sync::Arc<crate::outdir::OutDir>,
    pub triggers: Vec<crate::recorder::Trigger>,
    pub after: Duration,
    pub limits: crate::recorder::DumpLimits,
}

/// The content of `--dump-token FILE`, refused unless only its owner can read it.
fn read_token(path: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt as _;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("--dump-token {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("--dump-token {shown}: not a regular file"));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "--dump-token {shown}: readable or writable by others (mode {:o}): chmod 600 it",
            meta.mode() & 0o777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("--dump-token {shown}: {e}"))?;
    let token = text.trim();
    if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--dump-token {shown}: the token must be one word of at least 16 characters"
        ));
    }
    Ok(token.to_string())
}

impl Args {
    /// The probe's mode, and the options that need records refused without them.
    fn mode(&self) -> Result<crate::probe::ProbeMode, String> {
        let mode = match (self.no_records, self.attach_only) {
            (true, Some(_)) => {
                return Err("--no-records and --attach-only exclude each other".into());
            }
            (false, None) => crate::probe::ProbeMode::Records,
            (true, None) => crate::probe::ProbeMode::Aggregates,
            (false, Some(AttachOnly::Nothing)) => crate::probe::ProbeMode::Nop,
            (false, Some(AttachOnly::Clock)) => crate::probe::ProbeMode::Clock,
        };
        if mode != crate::probe::ProbeMode::Records {
            let flag = if self.no_records {
                "--no-records"
            } else {
                "--attach-only"
            };
            for (given, what) in [
                (self.output.is_some(), "--output"),
                (self.flight_recorder.is_some(), "--flight-recorder"),
                (!self.pids.is_empty(), "--pid"),
                (!self.comms.is_empty(), "--comm"),
                (!self.cgroups.is_empty(), "--cgroup"),
                (!self.ops.is_empty(), "--op"),
                (self.files, "--files"),
            ] {
                if given {
                    return Err(format!(
                        "{what} needs per-IO records, which {flag} does not make (it keeps the exact aggregates only)"
                    ));
                }
            }
            if self.no_records && ![1, 2, 4].contains(&self.metrics_buckets_per_octave) {
                return Err(format!(
                    "--metrics-buckets-per-octave {}: with --no-records the histograms are the kernel's, 4 buckets per power of two (give 1, 2 or 4)",
                    self.metrics_buckets_per_octave
                ));
            }
        }
        Ok(mode)
    }

    pub fn into_config(self) -> Result<Config, String> {
        let mut ops = Vec::new();
        for o in &self.ops {
            let op = Op::parse(o).ok_or_else(|| {
                let names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
                format!(
                    "--op {o:?}: unknown operation (one of: {})",
                    names.join(", ")
                )
            })?;
            ops.push(op);
        }
        for c in &self.comms {
            if c.len() > 15 {
                return Err(format!(
                    "--comm {c:?}: the kernel keeps at most 15 characters of a command name"
                ));
            }
        }
        let ring_bytes = u32::try_from(self.ring_size)
            .ok()
            .filter(|s| s.is_power_of_two() && (4096..=1 << 30).contains(s))
            .ok_or_else(|| {
                format!(
                    "--ring-size {}: must be a power of two between 4K and 1G",
                    self.ring_size
                )
            })?;
        let rotating = self.rotate_size.is_some() || self.rotate_time.is_some();
        if (rotating || self.keep.is_some()) && self.output.is_none() {
            return Err("--rotate-size, --rotate-time and --keep need --output FILE".into());
        }
        if self.keep == Some(0) {
            return Err("--keep must be at least 1".into());
        }
        if self.keep.is_some() && !rotating {
            return Err("--keep needs --rotate-size or --rotate-time".into());
        }
        if self.interval < Duration::from_millis(10) {
            return Err("--interval must be at least 10ms".into());
        }
        let mode = self.mode()?;
        let flight_recorder = match self.flight_recorder {
            Some(window) => {
                if self.output.is_some() {
                    return Err(
                        "--flight-recorder keeps the records in memory and dumps them on demand: it does not go with --output"
                            .into(),
                    );
                }
                let dir = crate::outdir::OutDir::open(&self.dump_dir)
                    .map_err(|e| format!("--dump-dir {}: {e}", self.dump_dir.display()))?;
                if self.dump_max_files == 0 {
                    return Err("--dump-max-files must be at least 1".into());
                }
                Some(FlightRecorder {
                    window,
                    max_bytes: self.flight_recorder_size,
                    dir: std::sync::Arc::new(dir),
                    triggers: self.triggers,
                    after: self.dump_after,
                    limits: crate::recorder::DumpLimits {
                        max_files: self.dump_max_files,
                        quota: self
                            .dump_quota
                            .unwrap_or(self.flight_recorder_size.saturating_mul(4)),
                        cooldown: self.dump_cooldown.unwrap_or(window),
                    },
                })
            }
            None if !self.triggers.is_empty() => {
                return Err("--trigger needs --flight-recorder DURATION".into());
            }
            None if self.dump_token.is_some() => {
                return Err("--dump-token needs --flight-recorder DURATION".into());
            }
            None => None,
        };
        let dump_token = match &self.dump_token {
            Some(_) if self.metrics_addr.is_none() => {
                return Err("--dump-token allows POST /dump on the metrics endpoint: it needs --metrics-addr".into());
            }
            Some(p) => Some(read_token(p)?),
            None => None,
        };
        let cgroups = if self.cgroups.is_empty() {
            Vec::new()
        } else {
            let cg = crate::cgroups::Cgroups::new();
            self.cgroups
                .iter()
                .map(|c| cg.resolve_filter(c))
                .collect::<Result<Vec<_>, _>>()?
        };
        let targets = crate::devices::targets(&self.devices).map_err(|e| e.to_string())?;
        if self.labels.len() > MAX_LABELS {
            return Err(format!(
                "at most {MAX_LABELS} --label (got {})",
                self.labels.len()
            ));
        }
        let mut labels = std::collections::BTreeMap::new();
        for (k, v) in self.labels {
            if labels.insert(k.clone(), v).is_some() {
                return Err(format!("--label {k}=... given twice"));
            }
        }
        Ok(Config {
            labels,
            devices: self.devices,
            targets: targets.devices,
            device_notes: targets.notes,
            pids: self.pids,
            comms: self.comms,
            cgroups,
            ops,
            duration: self.duration,
            interval: self.interval,
            output: self.output,
            json: self.json,
            quiet: self.quiet,
            rotate_size: self.rotate_size,
            rotate_time: self.rotate_time,
            keep: self.keep,
            ring_bytes,
            metrics_addr: self.metrics_addr,
            metrics_per_octave: self.metrics_buckets_per_octave,
            flight_recorder,
            dump_token,
            mode,
            owner_always: self.owner_cgroups_always,
            halves: !self.whole_records,
            files: self.files,
            btf: self.btf.clone(),
            keep_privileges: self.keep_privileges,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5y").is_err());
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("0K").unwrap_err().contains("positive"));
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
    }

    #[test]
    fn bad_combinations_are_refused() {
        let a = Args::parse_from(["blkprof-trace", "--keep", "3", "-o", "x.blkp"]);
        assert!(a.into_config().unwrap_err().contains("--keep needs"));
        let a = Args::parse_from(["blkprof-trace", "--op", "wrte"]);
        assert!(a.into_config().unwrap_err().contains("unknown operation"));
        let a = Args::parse_from(["blkprof-trace", "--label", "a=1", "--label", "a=2"]);
        assert!(a.into_config().unwrap_err().contains("given twice"));
        assert!(Args::try_parse_from(["blkprof-trace", "--label", "noequals"]).is_err());
        assert!(Args::try_parse_from(["blkprof-trace", "--label", "sp ace=1"]).is_err());
        assert!(Args::try_parse_from(["blkprof-trace", "--label", "k=a\nb"]).is_err());
        let a = Args::parse_from(["blkprof-trace", "--label", "arm=ra 8", "--label", "x=a=b"]);
        let c = a.into_config().unwrap();
        assert_eq!(c.labels["arm"], "ra 8");
        assert_eq!(c.labels["x"], "a=b");
        let a = Args::parse_from(["blkprof-trace", "--ring-size", "5000"]);
        assert!(a.into_config().unwrap_err().contains("power of two"));
        assert!(Args::try_parse_from(["blkprof-trace", "--metrics-addr", "localhost"]).is_err());
        assert!(
            Args::try_parse_from(["blkprof-trace", "--metrics-buckets-per-octave", "3"]).is_err()
        );
    }

    #[test]
    fn attach_only_attaches_nothing_or_clock_reads() {
        use crate::probe::ProbeMode;
        let mode = |args: &[&str]| {
            let mut v = vec!["blkprof-trace"];
            v.extend_from_slice(args);
            Args::try_parse_from(v).map(|a| a.into_config().map(|c| c.mode))
        };
        assert_eq!(mode(&[]).unwrap(), Ok(ProbeMode::Records));
        assert_eq!(mode(&["--attach-only"]).unwrap(), Ok(ProbeMode::Nop));
        assert_eq!(
            mode(&["--attach-only", "--quiet"]).unwrap(),
            Ok(ProbeMode::Nop)
        );
        assert_eq!(
            mode(&["--attach-only=clock"]).unwrap(),
            Ok(ProbeMode::Clock)
        );
        assert!(mode(&["--attach-only=often"]).is_err());
        assert!(
            mode(&["--attach-only=clock", "--no-records"])
                .unwrap()
                .unwrap_err()
                .contains("exclude each other")
        );
    }

    #[test]
    fn a_bare_port_listens_on_localhost_only() {
        let a = Args::parse_from(["blkprof-trace", "--metrics-addr", "9755"]);
        assert_eq!(a.metrics_addr, Some("127.0.0.1:9755".parse().unwrap()));
        let a = Args::parse_from(["blkprof-trace", "--metrics-addr", "0.0.0.0:9100"]);
        assert_eq!(a.metrics_addr, Some("0.0.0.0:9100".parse().unwrap()));
    }
}
