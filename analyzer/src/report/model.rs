//! The report model: the typed form of `blkprof report --json` (docs/report-json.md). The
//! summary ([`crate::analysis::summary`]) fills it; text, HTML, charts, `compare` and `check`
//! read only it, so `report --from-json` renders a saved report as it would the trace.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;
use tracer_common::coverage::DeviceCoverage;

use crate::analysis::bursts::{Burst, ReadImpact, Spike};

/// Version of the JSON document `blkprof report --json` prints (docs/report-json.md).
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// How far the input can be trusted: how the file ended, where the loss figures come from,
/// and what was left out because it could not belong to the run.
#[derive(Serialize, serde::Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Integrity {
    /// "complete" (a trailer), "truncated" (cut short after a whole frame) or "corrupt".
    pub ending: String,
    /// For a file that is not complete: where reading stopped and why.
    pub stopped: Option<String>,
    /// For a file that is not complete: the last instant it accounts for (wall clock), the later
    /// of its last stats frame and its last record.
    pub known_until: Option<String>,
    /// Where the loss counters come from: "trailer", "last stats frame", or "none" (a file
    /// cut short before its first stats frame: losses unknown).
    pub losses_from: String,
    /// Records whose times cannot belong to the run (completed outside the header-to-trailer
    /// window, or issued after they completed): damaged, counted and left out of the report.
    pub records_outside_window: u64,
    /// Whole frames of kinds this build does not know (from a newer tracer), skipped.
    pub unknown_frames_skipped: u64,
    /// Devices that got totals but no time series (more devices than the series budget holds).
    pub devices_without_series: u64,
    /// Anything else the reader should know, as sentences.
    pub notes: Vec<String>,
}

/// What the trace knows it missed.
#[derive(Serialize, serde::Deserialize, Default, Clone, Debug, PartialEq, Eq)]
#[serde(default)]
pub struct Lost {
    /// Every IO the trace knows it missed, for any reason (ring drops + missed completions +
    /// kernel-skipped runs + untracked requests), plus IOs the kernel counted beyond those.
    pub total: u64,
    pub ring_drops: u64,
    pub missed_completions: u64,
    pub recursion_misses: u64,
    pub untracked: u64,
    /// IOs /proc/diskstats counted that none of the above explains.
    pub unaccounted: u64,
    /// Records left out on purpose by --pid/--comm/--op (not lost).
    pub filtered_out: u64,
}

#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonOp {
    pub ios: u64,
    pub bytes: u64,
    pub pct_ios: f64,
    pub pct_bytes: f64,
    pub block_sizes: Vec<JsonSize>,
    pub device_latency_us: JsonLatency,
    pub total_latency_us: JsonLatency,
    pub readahead_bytes: u64,
    pub errors: u64,
}

#[derive(Serialize, serde::Deserialize, Default, Clone, Debug)]
#[serde(default)]
pub struct JsonSize {
    pub class: String,
    pub pct_ios: f64,
    pub ios: u64,
    pub bytes: u64,
}

#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonLatency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    /// `[level, us]` at more quantile levels ([`crate::analysis::noise::QUANTILE_LEVELS`]), for check rules
    /// that bound a percentile by the ranks its order statistic may take.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quantiles: Vec<[f64; 2]>,
}

impl JsonLatency {
    pub fn of(h: &Histogram<u64>) -> JsonLatency {
        let q = |p: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(p) as f64 / 1e3
            }
        };
        JsonLatency {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max() as f64 / 1e3,
            quantiles: if h.is_empty() {
                Vec::new()
            } else {
                crate::analysis::noise::QUANTILE_LEVELS
                    .iter()
                    .map(|&l| [l, q(l)])
                    .collect()
            },
        }
    }
}

#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonDevice {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub start: String,
    pub end: String,
    pub ops: BTreeMap<String, JsonOp>,
    pub absorbed_flushes: u64,
    pub coverage: Option<DeviceCoverage>,
    pub throughput: JsonThroughput,
    pub bursts: Vec<Burst>,
    pub queue_depth_spikes: Vec<Spike>,
    pub reads_during_bursts: ReadImpact,
    pub series: JsonSeries,
    /// The application IO classes ([`crate::analysis::classes`]): empty without a profile.
    pub classes: Vec<crate::analysis::classes::ClassRow>,
    /// The disk's queue settings at the start (read-ahead, scheduler, ...), as the tracer
    /// read them from sysfs; null when the trace does not say (older tracers, devices met
    /// mid-run).
    pub queue: Option<tracer_common::format::QueueSettings>,
}

#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonRate {
    pub mean_mb_per_s: f64,
    pub max_mb_per_s: f64,
    pub mean_iops: f64,
    pub max_iops: f64,
}

#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonThroughput {
    pub read: JsonRate,
    pub write: JsonRate,
    pub discard: JsonRate,
    pub flush: JsonRate,
    pub queue_depth_mean: f64,
    pub queue_depth_max: u32,
}

/// Per-interval series (arrays of equal length; index i covers [start + i*interval, +interval)).
#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonSeries {
    pub interval_s: f64,
    pub start: String,
    pub read_iops: Vec<f64>,
    pub read_mb_per_s: Vec<f64>,
    pub write_iops: Vec<f64>,
    pub write_mb_per_s: Vec<f64>,
    pub discard_mb_per_s: Vec<f64>,
    pub flush_iops: Vec<f64>,
    pub queue_depth_mean: Vec<f64>,
    pub queue_depth_max: Vec<u32>,
    pub read_p99_us: Vec<f64>,
    pub read_max_us: Vec<f64>,
    pub write_p99_us: Vec<f64>,
    pub write_max_us: Vec<f64>,
    /// Write throughput at the resolution of burst detection (`--resolution`, 100 ms by
    /// default), which the per-interval figures average away.
    pub fine_interval_s: f64,
    pub fine_write_mb_per_s: Vec<f64>,
    /// The same split by IO class ([`crate::analysis::classes`]): one series per class that
    /// wrote anything; empty without classes.
    pub fine_class_write_mb_per_s: Vec<ClassSeries>,
}

/// One IO class's write throughput per fine bin.
#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct ClassSeries {
    pub class: String,
    pub mb_per_s: Vec<f64>,
}

#[derive(Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct JsonReport {
    pub schema_version: u32,
    pub traces: Vec<String>,
    pub host: String,
    pub kernel: String,
    pub start: String,
    /// The trace's `--label KEY=VALUE`s (an experiment's arm, a node's role); empty when none.
    pub labels: BTreeMap<String, String>,
    /// `start` as Unix ns, the origin of the charts' time axis.
    pub start_unix_ns: i64,
    /// From the start to the trailer's end; null when the trace has no trailer.
    pub duration_s: Option<f64>,
    pub records: u64,
    pub complete: bool,
    pub devices: Vec<JsonDevice>,
    pub markers: Vec<crate::inputs::stress::Marker>,
    pub stress: Vec<crate::inputs::stress::StressRun>,
    /// Write bursts against the application's flushes, per device (when a log was given).
    pub flush_match: Vec<(String, crate::inputs::stress::FlushMatch)>,
    /// Per device, the application's compactions and the discards that followed each.
    #[serde(default)]
    pub compaction_discards: Vec<(String, CompactionDiscards)>,
    pub lost: Lost,
    /// How the file ended and what was left out (absent from reports of older versions).
    #[serde(default)]
    pub integrity: Integrity,
    /// The zones local times were read in.
    #[serde(default)]
    pub time_zones: JsonTimeZones,
    /// Application logs and stress output with no event on the trace's clock, and the UTC
    /// offset that would put them there.
    #[serde(default)]
    pub time_warnings: Vec<TimeWarning>,
    /// Each stress run's timed status lines next to the disk (the report's first device),
    /// when they fall on the trace.
    #[serde(default)]
    pub client_vs_disk: Vec<ClientVsDisk>,
    /// The tasks that submitted the most IOs (at most [`TOP_TASKS`]), most first, and how many
    /// submitted any.
    #[serde(default)]
    pub top_tasks: Vec<JsonTask>,
    #[serde(default)]
    pub tasks: usize,
    /// What each registered section made ([`crate::analysis::sections`]), by its name.
    #[serde(default)]
    pub sections: BTreeMap<String, serde_json::Value>,
    /// The IO-class profile in force (`--classes`; docs/classes.md), null for none.
    #[serde(default)]
    pub class_profile: Option<String>,
}

/// The longest interval a saved report's series may have: a year, far above any real one.
const MAX_INTERVAL_S: f64 = 366.0 * 86_400.0;

impl JsonReport {
    /// What the charts and tables take from a saved report's series without looking, which a
    /// crafted or damaged file can set to anything: the length of its intervals, a positive
    /// number of seconds (where the series has values). At 1e308 s the charts' time axis
    /// overflows to infinity and they are never drawn.
    pub fn check_series(&self) -> Result<(), String> {
        for d in &self.devices {
            let s = &d.series;
            for (what, interval, values) in [
                ("interval_s", s.interval_s, s.read_iops.len()),
                (
                    "fine_interval_s",
                    s.fine_interval_s,
                    s.fine_write_mb_per_s.len(),
                ),
            ] {
                if values > 0 && !(interval > 0.0 && interval <= MAX_INTERVAL_S) {
                    return Err(format!(
                        "the series of {} have an interval ({what}) of {interval} s: not a \
                         blkprof report (its intervals are positive and under a year)",
                        d.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A disk's queue settings as the reports say them, one part per setting sysfs gave, each
/// with its sysfs name: `read-ahead 8 KB`, `scheduler none`, `nr_requests 64`,
/// `max_sectors_kb 1280`, `rotational` or `non-rotational`. `compare` names arms by the
/// settings that differ.
pub fn queue_parts(q: &tracer_common::format::QueueSettings) -> Vec<(&'static str, String)> {
    let mut p = Vec::new();
    if let Some(kb) = q.read_ahead_kb {
        p.push(("read_ahead_kb", format!("read-ahead {kb} KB")));
    }
    if !q.scheduler.is_empty() {
        p.push(("scheduler", format!("scheduler {}", q.scheduler)));
    }
    if let Some(n) = q.nr_requests {
        p.push(("nr_requests", format!("nr_requests {n}")));
    }
    if let Some(kb) = q.max_sectors_kb {
        p.push(("max_sectors_kb", format!("max_sectors_kb {kb}")));
    }
    if let Some(r) = q.rotational {
        let s = if r { "rotational" } else { "non-rotational" };
        p.push(("rotational", s.to_string()));
    }
    p
}

/// [`queue_parts`] in one line: `read-ahead 8 KB, scheduler none, ...`; None when sysfs gave
/// none.
pub fn describe_queue(q: &tracer_common::format::QueueSettings) -> Option<String> {
    let p = queue_parts(q);
    (!p.is_empty()).then(|| p.into_iter().map(|(_, s)| s).collect::<Vec<_>>().join(", "))
}

/// A trace's labels as the reports say them: `experiment=readahead read_ahead_kb=8`.
pub fn describe_labels(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many submitting tasks the report lists.
pub const TOP_TASKS: usize = 20;

#[derive(Serialize, serde::Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct JsonTask {
    pub pid: u32,
    pub comm: String,
    pub ios: u64,
}

#[derive(Serialize, serde::Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct ClientVsDisk {
    /// The stress run's `path`.
    pub path: String,
    pub device: String,
    pub rows: Vec<ClientDiskRow>,
}

/// One status line: the client's figures, and the disk's over the preceding status interval
/// (the 5 s before the first line).
#[derive(Serialize, serde::Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct ClientDiskRow {
    pub time: String,
    pub ops_per_s: f64,
    /// The highest p99 (or mean, when the tool prints no p99) over the line's ops.
    pub client_p99_us: f64,
    /// Null when the interval lies outside the trace.
    pub disk: Option<DiskWindow>,
}

#[derive(Serialize, serde::Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct DiskWindow {
    pub write_mb_per_s: f64,
    pub read_iops: f64,
    pub queue_depth: f64,
    /// The highest per-interval read p99.
    pub read_p99_us: f64,
}

/// The zones local times were read in ("UTC", "+02:00", "Europe/Berlin").
#[derive(Serialize, serde::Deserialize, Default, Clone, Debug)]
#[serde(default)]
pub struct JsonTimeZones {
    /// The tracing host's, as the tracer recorded it ("UTC" for traces that predate it).
    pub trace: String,
    /// The application logs' (`--app-log-tz`, default the trace's); null without a log.
    pub app_log: Option<String>,
    /// The stress output's (`--stress-tz`, default the trace's); null without stress output.
    pub stress: Option<String>,
}

/// An application log or stress file none of whose events falls inside the trace.
#[derive(Serialize, serde::Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct TimeWarning {
    /// "app-log" or "stress".
    pub kind: String,
    pub path: String,
    /// The zone its local times were read in.
    pub time_zone: String,
    /// Its events (log markers, timed status lines): how many, the first and the last.
    pub events: usize,
    pub first: String,
    pub last: String,
    pub trace_start: String,
    pub trace_end: String,
    /// The whole- or half-hour UTC offset ("+02:00") that would bring the most events inside
    /// (for a log: the most flushes onto write bursts, then the most events), if any does.
    pub suggested_offset: Option<String>,
    /// Other offsets that would do as well (a file much longer than the trace).
    pub also_fitting: Vec<String>,
    /// What the report prints.
    pub message: String,
}

/// An event within this long of the trace's span is on it: YCSB prints its last status line
/// after the run, and a log's event may be stamped just before the trace starts.
pub const NEAR_TRACE_NS: i64 = 5_000_000_000;

/// Discards completing after each compaction's end ("Compacted" in the log), up to
/// [`COMPACTION_DISCARD_WINDOW_NS`] later or the next compaction's end.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct CompactionDiscards {
    pub compactions: usize,
    pub followed_by_discards: usize,
    pub discards: u64,
    pub discard_bytes: u64,
    pub window_s: f64,
    pub rows: Vec<CompactionRow>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct CompactionRow {
    pub id: String,
    pub start: String,
    pub end: String,
    pub discards: u64,
    pub discard_bytes: u64,
    pub first_discard_after_s: Option<f64>,
}

/// ext4 mounted with `discard` sends the discards of deleted files at its next journal commit
/// (every 5 s by default): 10 s covers it.
pub const COMPACTION_DISCARD_WINDOW_NS: i64 = 10_000_000_000;
