//! The summary of a trace: per device and op, counts, bytes, size classes and latency
//! histograms; the tracer's own loss counters; coverage against /proc/diskstats.
//!
//! The types are here; the jobs in files named for them: the streaming pass that fills them
//! (`engine.rs`), what the trace missed and how far it holds (`losses.rs`), the report model
//! made from them (`json.rs`), and the application's log and stress output set beside them
//! (`logs.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use hdrhistogram::Histogram;
use tracer_common::coverage::DeviceCoverage;
use tracer_common::format::{Ending, IoRecord, StatsFrame, TraceHeader, TraceTrailer};
use tracer_common::hdrfast::HdrCounts;
use tracer_common::op::{Op, StatGroup};

use crate::analysis::bursts::{Burst, ReadImpact, Spike};
use crate::analysis::series::Series;
use crate::analysis::sizes::SizeClass;

mod engine;
mod json;
mod logs;
mod losses;

pub use engine::{SERIES_BIN_BUDGET, Window, series_budget, summarize};
pub use logs::FLUSH_MATCH_TOLERANCE_NS;
pub use losses::{lost, wall_time};

// The report model, also reachable here: the summary's callers use it with the summary.
pub use crate::report::model::{
    COMPACTION_DISCARD_WINDOW_NS, ClientDiskRow, ClientVsDisk, CompactionDiscards, CompactionRow,
    DiskWindow, Integrity, JsonDevice, JsonLatency, JsonOp, JsonRate, JsonReport, JsonSeries,
    JsonSize, JsonTask, JsonThroughput, JsonTimeZones, Lost, NEAR_TRACE_NS, REPORT_SCHEMA_VERSION,
    TOP_TASKS, TimeWarning, describe_labels, describe_queue, queue_parts,
};

pub struct OpStats {
    pub ios: u64,
    pub bytes: u64,
    pub sizes: BTreeMap<SizeClass, (u64, u64)>,
    /// Exact sizes seen (bytes, count), filled on the hot path and folded into `sizes`.
    exact: Vec<(u32, u64)>,
    last_exact: usize,
    pub device_latency_ns: Histogram<u64>,
    pub total_latency_ns: Histogram<u64>,
    /// Entry to issue (btt's Q2D), of the IOs issued to the device.
    pub queue_latency_ns: Histogram<u64>,
    /// The latencies as counted on the hot path, drained into the histograms at the end.
    device_counts: HdrCounts,
    total_counts: HdrCounts,
    queue_counts: HdrCounts,
    pub readahead_bytes: u64,
    pub errors: u64,
}

impl OpStats {
    fn new() -> OpStats {
        let h = || tracer_common::hdrfast::histogram(tracer_common::hdrfast::LATENCY_HIGHEST_NS, 3);
        OpStats {
            ios: 0,
            bytes: 0,
            sizes: BTreeMap::new(),
            exact: Vec::new(),
            last_exact: 0,
            device_latency_ns: h(),
            total_latency_ns: h(),
            queue_latency_ns: h(),
            device_counts: HdrCounts::default(),
            total_counts: HdrCounts::default(),
            queue_counts: HdrCounts::default(),
            readahead_bytes: 0,
            errors: 0,
        }
    }

    #[inline]
    fn count_size(&mut self, bytes: u32) {
        if let Some(e) = self.exact.get_mut(self.last_exact).filter(|e| e.0 == bytes) {
            e.1 += 1;
            return;
        }
        if let Some(i) = self.exact.iter().position(|e| e.0 == bytes) {
            self.exact[i].1 += 1;
            self.last_exact = i;
        } else {
            self.exact.push((bytes, 1));
            self.last_exact = self.exact.len() - 1;
        }
    }

    /// Fold what the hot path counted into the size classes and latency histograms.
    fn finish(&mut self) {
        self.device_counts.drain_into(&mut self.device_latency_ns);
        self.total_counts.drain_into(&mut self.total_latency_ns);
        self.queue_counts.drain_into(&mut self.queue_latency_ns);
        for &(b, n) in &self.exact {
            let e = self.sizes.entry(SizeClass::of(u64::from(b))).or_default();
            e.0 += n;
            e.1 += n * u64::from(b);
        }
        self.exact.clear();
    }
}

/// Slot of an op in the per-device table: op codes 0..16, then the device flush and the
/// absorbed empty flush.
const SLOT_FLUSH: usize = 16;
const SLOT_ABSORBED: usize = 17;
const SLOTS: usize = 18;

/// Slot of an op given its stat group: the device flush and the absorbed empty flush have
/// their own.
#[inline]
fn op_slot(g: StatGroup, op: Op) -> usize {
    match g {
        StatGroup::Flush => SLOT_FLUSH,
        _ if op == Op::Flush => SLOT_ABSORBED,
        _ => op as usize,
    }
}

fn slot_name(slot: usize) -> String {
    match slot {
        SLOT_FLUSH => "flush".into(),
        SLOT_ABSORBED => "flush-absorbed".into(),
        // Op codes are below SLOT_FLUSH; anything else names itself "other" as from_code does.
        s => Op::from_code(u8::try_from(s).unwrap_or(u8::MAX))
            .name()
            .into(),
    }
}

pub struct DeviceStats {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    /// Keyed by the op as the report groups them: read, write, discard, flush (device flushes),
    /// and others by name.
    pub ops: BTreeMap<String, OpStats>,
    pub first_ns: u64,
    pub last_ns: u64,
    pub max_os_inflight: u32,
    /// Whether the device has a time series (see [`SERIES_BIN_BUDGET`]).
    pub has_series: bool,
    /// Empty flush requests absorbed by the flush machinery (never reach the device; the kernel
    /// counts them as 0-byte reads in /proc/diskstats).
    pub absorbed_flushes: u64,
    pub series: Series,
    pub bursts: Vec<Burst>,
    pub spikes: Vec<Spike>,
    pub read_impact: ReadImpact,
    /// Every discard, sorted by completion time (discards are few).
    pub discards: Vec<IoRecord>,
    /// Time with at least one IO in the OS.
    pub busy: crate::analysis::busy::Busy,
}

/// What came with the trace: the stress tool's results and the application's logs.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub stress: Vec<crate::inputs::stress::StressRun>,
    pub logs: Vec<crate::inputs::stress::AppLog>,
}

/// Everything the report needs from one or more trace files of one run.
pub struct Summary {
    pub context: Context,
    /// Submitting tasks (pid, comm), by IO count, most first.
    pub tasks: Vec<(u32, String, u64)>,
    pub paths: Vec<PathBuf>,
    pub header: TraceHeader,
    pub trailer: Option<TraceTrailer>,
    pub endings: Vec<(PathBuf, Ending)>,
    pub devices: BTreeMap<u32, DeviceStats>,
    pub records: u64,
    pub coverage: Vec<DeviceCoverage>,
    /// The last periodic stats frame read: the losses of a file without a trailer.
    pub last_stats: Option<StatsFrame>,
    pub integrity: Integrity,
    /// What the registered sections ([`crate::analysis::sections`]) made, by name.
    pub sections: BTreeMap<String, serde_json::Value>,
    /// The application IO classes, when a profile is in force.
    pub classes: Option<crate::analysis::classes::Classes>,
}

/// The report's name for an op group.
pub fn op_key(op: Op, fl: u16) -> String {
    slot_name(op_slot(StatGroup::of(op, fl), op))
}
