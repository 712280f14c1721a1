//! One streaming pass over trace files: per device and op, counts, bytes, size classes and
//! latency histograms; the tracer's own loss counters; coverage against /proc/diskstats.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use tracer_common::coverage::{DeviceCoverage, coverage};
use tracer_common::format::{
    Ending, FormatError, IoRecord, ProbeCounters, Scan, StatsFrame, TraceHeader, TraceReader,
    TraceTrailer, rfc3339,
};
use tracer_common::op::{Op, StatGroup, flags};

use crate::analysis::bursts::{Burst, Classifier, ReadImpact, Spike, burst_ranges};
use crate::analysis::series::{Options, Series, detect_bursts, detect_spikes};
use crate::analysis::sizes::SizeClass;
use tracer_common::hdrfast::HdrCounts;

// The report model, where the other modules and crates have always found it.
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
        let h = || {
            let mut h = Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
            h.auto(true);
            h
        };
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

/// Fine bins (of [`Options::fine_ns`]) the time series of all devices may hold together: about
/// 45 bytes each, so at most about 190 MB whatever the trace says of its own length.
pub const SERIES_BIN_BUDGET: u64 = 1 << 22;

/// A file gets at most this many fine bins per byte of it (and at least [`MIN_SERIES_BINS`]):
/// a tiny file that claims a span of years (a damaged or hostile one) is not worth 190 MB of
/// empty bins, so memory follows the input. A record takes at least a byte, so a real trace
/// is never coarsened by this before it is by [`SERIES_BIN_BUDGET`] unless it is sparse.
const SERIES_BINS_PER_BYTE: u64 = 16;
/// 1.8 hours at 100 ms.
const MIN_SERIES_BINS: u64 = 1 << 16;

/// The series budget of a file of `file_bytes`.
pub fn series_budget(file_bytes: u64) -> u64 {
    file_bytes
        .saturating_mul(SERIES_BINS_PER_BYTE)
        .clamp(MIN_SERIES_BINS, SERIES_BIN_BUDGET)
}

/// How far outside the run (header start to trailer end) a record's completion may lie and still
/// count as part of it: records come from the ring a little after the clocks were read.
const WINDOW_SLACK_NS: u64 = 60_000_000_000;

/// The span of `CLOCK_MONOTONIC` a trace's records may complete in, and the time-series options
/// that fit that span into [`SERIES_BIN_BUDGET`].
#[derive(Clone, Debug)]
pub struct Window {
    pub lo_ns: u64,
    pub hi_ns: u64,
    /// Fine bins all devices' series may hold together ([`series_budget`]).
    pub budget: u64,
    /// Fine bins each announced device's series may need.
    pub bins_per_device: u64,
    /// The options actually used (intervals and resolution scaled up for very long traces).
    pub opts: Options,
    /// Said in the report when the resolution had to be coarsened.
    pub note: Option<String>,
}

impl Window {
    /// From the header's start to the trailer's end; for a file cut short, to one interval after
    /// its last stats frame (the tracer writes one every interval); with neither, as far as the
    /// series budget reaches at the chosen resolution. `devices`: how many devices the trace
    /// announces (each gets a series).
    pub fn of(header: &TraceHeader, scan: &Scan, opts: &Options, file_bytes: u64) -> Window {
        let budget = series_budget(file_bytes);
        let t0 = header.monotonic_base_ns;
        let ndev = scan.devices.len().max(1) as u64;
        let interval_ns = header.interval_ms.clamp(1, 3_600_000) * 1_000_000;
        // An end before the start says nothing (a writer that left it 0): as if unknown.
        let end = match (&scan.trailer, &scan.last_stats) {
            (Some(t), _) if t.monotonic_end_ns >= t0 => Some(t.monotonic_end_ns),
            (_, Some(st)) if st.at_ns >= t0 => Some(st.at_ns.saturating_add(2 * interval_ns)),
            _ => None,
        };
        let lo_ns = t0.saturating_sub(WINDOW_SLACK_NS);
        let mut opts = opts.clone();
        let mut note = None;
        let hi_ns = match end {
            Some(e) => {
                let hi = e.max(t0).saturating_add(WINDOW_SLACK_NS);
                let bins = (hi - t0) / opts.fine_ns + 1;
                let k = bins.saturating_mul(ndev).div_ceil(budget);
                if k > 1 {
                    opts.fine_ns *= k;
                    opts.interval_ns *= k;
                    note = Some(format!(
                        "the trace spans {:.1} h: time series at {} intervals and {} resolution instead of {} and {}, to keep memory bounded",
                        (hi - t0) as f64 / 3.6e12,
                        tracer_common::units::format_duration_ns(opts.interval_ns),
                        tracer_common::units::format_duration_ns(opts.fine_ns),
                        tracer_common::units::format_duration_ns(opts.interval_ns / k),
                        tracer_common::units::format_duration_ns(opts.fine_ns / k),
                    ));
                }
                hi
            }
            None => t0.saturating_add((budget / ndev) * opts.fine_ns - 1),
        };
        Window {
            budget,
            lo_ns,
            hi_ns,
            bins_per_device: (hi_ns.saturating_sub(t0)) / opts.fine_ns + 1,
            opts,
            note,
        }
    }

    /// Whether a record's times can belong to the run: completed inside the window, and
    /// issued (if at all) before it completed. Damaged records fail this.
    #[inline]
    pub fn holds(&self, r: &IoRecord) -> bool {
        r.complete_ns.wrapping_sub(self.lo_ns) <= self.hi_ns - self.lo_ns
            && r.issue_ns <= r.complete_ns
    }
}

/// Records given to the summary's loop and the sections at a time (a chunk of the file is up
/// to 8192 records of 112 bytes, which the L1 cache does not hold): 256 records, 28 KiB.
const SECTION_RECORDS: usize = 256;

pub fn summarize(path: &Path, opts: &Options) -> Result<Summary, FormatError> {
    // (dev, stats, per-op-slot tallies)
    type DevEntry = (u32, DeviceStats, Vec<Option<Box<OpStats>>>);
    let mut r = TraceReader::open(path)?;
    let header = r.header().clone();
    let t0 = header.monotonic_base_ns;
    let file_bytes = std::fs::metadata(path).map_or(u64::MAX, |m| m.len());
    let window = Window::of(&header, &r.scan()?, opts, file_bytes);
    let opts = &window.opts;
    let mut bins_left = window.budget;
    let mut outside_window = 0u64;
    let mut devices_without_series = 0u64;
    let mut devs: Vec<DevEntry> = Vec::new();
    let mut last = usize::MAX;
    let mut buf = Vec::new();
    let mut records = 0u64;
    let mut task_counts: Vec<u64> = Vec::new();
    // Where each chunk starts and the completion times it covers, to revisit only the chunks
    // that overlap write bursts; and every discard (few), to attribute them to bursts.
    let mut chunks: Vec<((u64, u64), u64, u64)> = Vec::new();
    // Whether each task's writes count towards bursts (--burst-comm), by pass one's numbering.
    let mut burst_writer: Vec<bool> = Vec::new();
    let mut sections = crate::analysis::sections::start(opts, r.header());
    let mut classes = opts.classes.engine(r.header().files, t0, opts.fine_ns);
    let mut kept: Vec<IoRecord> = Vec::new();
    // Pass one: totals, size mix, latency, time series.
    loop {
        let pos = r.position();
        if !r.next_chunk(&mut buf)? {
            break;
        }
        let (lo, hi) = buf.iter().fold((u64::MAX, 0), |(lo, hi), x| {
            (lo.min(x.complete_ns), hi.max(x.complete_ns))
        });
        chunks.push((pos, lo, hi));
        task_counts.resize(r.tasks().len(), 0);
        for t in &r.tasks()[burst_writer.len()..] {
            burst_writer.push(
                opts.burst_comms.is_empty()
                    || opts.burst_comms.iter().any(|c| t.comm.contains(c.as_str())),
            );
        }
        records += buf.len() as u64;
        let outside_before = outside_window;
        // A few hundred records at a time through the summary and then every section, so
        // that each pass after the first finds them in the L1 cache.
        for part in buf.chunks(SECTION_RECORDS) {
            let part_outside_before = outside_window;
            for run in part.chunk_by(|a, b| a.dev == b.dev) {
                // The run's device, found (or made) at its first record inside the window.
                let Some(first) = run.iter().position(|x| window.holds(x)) else {
                    outside_window += run.len() as u64;
                    continue;
                };
                outside_window += first as u64;
                let rec = &run[first];
                if devs.get(last).is_none_or(|d| d.0 != rec.dev) {
                    last = if let Some(i) = devs.iter().position(|d| d.0 == rec.dev) {
                        i
                    } else {
                        let (major, minor) = tracer_common::dev_split(rec.dev);
                        // Each device reserves the bins its series may need; devices beyond
                        // the budget (only a damaged or hostile file has so many) get totals
                        // without a series.
                        let has_series = bins_left >= window.bins_per_device;
                        if has_series {
                            bins_left -= window.bins_per_device;
                        } else {
                            devices_without_series += 1;
                        }
                        devs.push((
                            rec.dev,
                            DeviceStats {
                                name: format!("{major}:{minor}"),
                                major,
                                minor,
                                ops: BTreeMap::new(),
                                first_ns: rec.enter_ns.max(window.lo_ns),
                                last_ns: rec.complete_ns,
                                has_series,
                                max_os_inflight: 0,
                                absorbed_flushes: 0,
                                series: Series::new(t0, opts),
                                bursts: Vec::new(),
                                spikes: Vec::new(),
                                read_impact: ReadImpact::default(),
                                discards: Vec::new(),
                                busy: crate::analysis::busy::Busy::default(),
                            },
                            (0..SLOTS).map(|_| None).collect(),
                        ));
                        devs.len() - 1
                    };
                }
                let (_, d, slots) = &mut devs[last];
                for rec in &run[first..] {
                    if !window.holds(rec) {
                        outside_window += 1;
                        continue;
                    }
                    task_counts[rec.task as usize] += 1;
                    d.first_ns = d.first_ns.min(rec.enter_ns.max(window.lo_ns));
                    d.last_ns = d.last_ns.max(rec.complete_ns);
                    d.max_os_inflight = d.max_os_inflight.max(rec.os_inflight);
                    d.busy.record(rec.enter_ns, rec.complete_ns);
                    let g = rec.stat_group();
                    if d.has_series {
                        d.series.record(rec, g, burst_writer[rec.task as usize]);
                    }
                    if rec.op == Op::Discard {
                        d.discards.push(*rec);
                    }
                    let slot = op_slot(g, rec.op);
                    if slot == SLOT_ABSORBED {
                        d.absorbed_flushes += 1;
                        continue;
                    }
                    let o = slots[slot].get_or_insert_with(|| Box::new(OpStats::new()));
                    o.ios += 1;
                    o.bytes += u64::from(rec.bytes);
                    o.count_size(rec.bytes);
                    if rec.issue_ns != 0 {
                        o.device_counts.record(rec.device_ns().max(1));
                        o.queue_counts
                            .record(rec.issue_ns.saturating_sub(rec.enter_ns).max(1));
                    }
                    o.total_counts.record(rec.total_ns().max(1));
                    if rec.flags & flags::RAHEAD != 0 {
                        o.readahead_bytes += u64::from(rec.bytes);
                    }
                    if rec.error != 0 {
                        o.errors += 1;
                    }
                }
            }
            // The sections see what the summary saw: without records outside the run's window.
            let part: &[IoRecord] = if outside_window == part_outside_before {
                part
            } else {
                kept.clear();
                kept.extend(part.iter().filter(|x| window.holds(x)));
                &kept
            };
            for (_, sec) in &mut sections {
                sec.chunk(part);
            }
        }
        if let Some(e) = classes.as_mut() {
            let chunk: &[IoRecord] = if outside_window == outside_before {
                &buf
            } else {
                kept.clear();
                kept.extend(buf.iter().filter(|x| window.holds(x)));
                &kept
            };
            e.chunk(chunk, r.tasks(), &|id| {
                r.file(id).and_then(|f| f.2).map(str::to_string)
            });
        }
    }
    if let Some(e) = classes.as_mut() {
        e.settle();
    }
    // The default profile is kept only where it finds its application.
    if matches!(opts.classes, crate::analysis::classes::Choice::Auto)
        && classes.as_ref().is_some_and(|e| !e.claimed())
    {
        classes = None;
    }
    let mut devices: BTreeMap<u32, DeviceStats> = BTreeMap::new();
    for (dev, mut d, slots) in devs {
        for (i, o) in slots.into_iter().enumerate() {
            if let Some(mut o) = o {
                o.finish();
                d.ops.insert(slot_name(i), *o);
            }
        }
        // Records come nearly, not exactly, in completion order (CPUs race to the ring).
        d.discards.sort_by_key(|r| r.complete_ns);
        devices.insert(dev, d);
    }
    for d in r.devices() {
        if let Some(s) = devices.get_mut(&d.dev()) {
            s.name.clone_from(&d.name);
        }
    }
    let trailer = r.trailer().cloned();
    let ending = r.ending().clone();
    let last_stats = r.last_stats().cloned();
    let last_record_ns = devices.values().map(|d| d.last_ns).max();
    let wall = |t: u64| wall_time(&header, t);
    let rel = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let mut integrity = Integrity {
        ending: match ending {
            Ending::Complete => "complete",
            Ending::Corrupt { .. } => "corrupt",
            _ => "truncated",
        }
        .into(),
        losses_from: if trailer.is_some() {
            "trailer"
        } else if last_stats.is_some() {
            "last stats frame"
        } else {
            "none"
        }
        .into(),
        records_outside_window: outside_window,
        unknown_frames_skipped: r.skipped_frames(),
        devices_without_series,
        notes: window.note.clone().into_iter().collect(),
        ..Integrity::default()
    };
    if ending != Ending::Complete {
        let until = last_stats
            .as_ref()
            .map(|st| st.at_ns)
            .max(last_record_ns)
            .unwrap_or(t0);
        integrity.known_until = Some(wall(until));
        let losses = match &last_stats {
            Some(st) => format!(
                "losses are those of its last stats frame (+{:.1} s)",
                rel(st.at_ns)
            ),
            None => "it has no stats frame, so its losses are unknown".to_string(),
        };
        integrity.stopped = Some(match &ending {
            Ending::Corrupt {
                frame,
                offset,
                reason,
            } => format!(
                "corrupt at frame {frame} (byte {offset}): {reason}; reporting the {} records before it, up to +{:.1} s; {losses}",
                records,
                rel(until)
            ),
            Ending::Truncated {
                intact_bytes,
                trailing_bytes,
            } => format!(
                "truncated after +{:.1} s: no trailer after {intact_bytes} intact bytes ({trailing_bytes} trailing bytes dropped), the tracer did not stop cleanly; {losses}",
                rel(until)
            ),
            _ => format!("not read to its end; {losses}"),
        });
    }
    if outside_window > 0 {
        integrity.notes.push(format!(
            "{outside_window} records have times that cannot belong to this run (completed outside {} .. {}, or issued after completing): damaged, left out of the report",
            wall(window.lo_ns),
            wall(window.hi_ns)
        ));
    }
    if devices_without_series > 0 {
        integrity.notes.push(format!(
            "{devices_without_series} devices not announced in the trace have totals but no time series (series memory is bounded)"
        ));
    }
    if r.skipped_frames() > 0 {
        integrity.notes.push(format!(
            "{} frames of kinds this version does not know were skipped (written by a newer blkprof-trace?)",
            r.skipped_frames()
        ));
    }
    let cov = trailer
        .as_ref()
        .map(|t| coverage(&header, t))
        .unwrap_or_default();

    // Bursts and spikes from the series; pass two classifies reads and writes by burst.
    let mut found = BTreeMap::new();
    for (&dev, d) in &mut devices {
        d.series.finish();
        let bins = detect_bursts(&d.series, opts);
        let spikes = detect_spikes(&d.series, opts);
        found.insert(
            dev,
            (
                bins.clone(),
                spikes,
                Classifier::new(&burst_ranges(&d.series, &bins), opts.discard_window_ns),
            ),
        );
    }
    // Burst spans of all devices (a superset is fine: records are routed by device).
    let ranges: Vec<(u64, u64)> = found
        .values()
        .flat_map(|(bins, _, _)| {
            bins.iter().map(|b| {
                (
                    t0 + b.start as u64 * opts.fine_ns,
                    t0 + b.end as u64 * opts.fine_ns,
                )
            })
        })
        .collect();
    // Pass two's reader numbers tasks in the order it meets them: names by its numbering.
    let mut task_names: Vec<String> = Vec::new();
    if !ranges.is_empty() {
        for (dev, d) in &devices {
            if let Some((_, _, c)) = found.get_mut(dev) {
                for r in &d.discards {
                    c.record(r);
                }
            }
        }
        // Pass two, over the chunks that overlap a burst only.
        let mut r2 = TraceReader::open(path)?;
        for &(pos, lo, hi) in &chunks {
            if !ranges.iter().any(|&(a, b)| lo < b && hi >= a) {
                continue;
            }
            r2.seek(pos)?;
            if !r2.next_chunk(&mut buf)? {
                break;
            }
            for rec in &buf {
                if rec.op == Op::Discard {
                    continue;
                }
                if let Some((_, _, c)) = found.get_mut(&rec.dev) {
                    c.record(rec);
                }
            }
        }
        task_names = r2.tasks().iter().map(|t| t.comm.clone()).collect();
    }
    for (dev, (bins, spike_bins, mut c)) in found {
        // `found` has the keys of `devices`.
        let Some(d) = devices.get_mut(&dev) else {
            continue;
        };
        // Reads outside bursts: all reads of pass one minus those pass two found inside.
        if let Some(reads) = d.ops.get("read") {
            c.set_outside(&reads.total_latency_ns);
        }
        let comm = |task: u32| {
            task_names
                .get(task as usize)
                .cloned()
                .unwrap_or_else(|| "?".to_string())
        };
        let written = |a: u64, b: u64| classes.as_ref().and_then(|e| e.written(dev, a, b));
        let class_names = classes
            .as_ref()
            .map(|e| crate::analysis::bursts::ClassNames {
                classes: &e.profile().classes,
                written: &written,
            });
        let (bursts, impact) = crate::analysis::bursts::bursts(
            &d.series,
            &bins,
            &c,
            &wall,
            t0,
            &comm,
            class_names.as_ref(),
        );
        d.bursts = bursts;
        d.read_impact = impact;
        d.spikes = crate::analysis::bursts::spikes(&d.series, &spike_bins, &wall, t0);
    }
    // One row per (pid, comm): the trace tells a task apart per cgroup and per owner (a
    // kworker writing back for several cgroups), the table does not.
    // In the order tasks were first met, so that ties keep it.
    let mut row_of: HashMap<(u32, &str), usize> = HashMap::new();
    let mut tasks: Vec<(u32, String, u64)> = Vec::new();
    for (i, n) in task_counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        let t = &r.tasks()[i];
        let row = *row_of.entry((t.pid, t.comm.as_str())).or_insert_with(|| {
            tasks.push((t.pid, t.comm.clone(), 0));
            tasks.len() - 1
        });
        tasks[row].2 += *n;
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.2));
    let name = |dev: u32| {
        devices.get(&dev).map_or_else(
            || {
                let (ma, mi) = tracer_common::dev_split(dev);
                format!("{ma}:{mi}")
            },
            |d| d.name.clone(),
        )
    };
    let cgroup = |id: u64| r.cgroup_path(id).map(str::to_string);
    let file = |id: u32| {
        r.file(id)
            .map(|(dev, ino, path)| (dev, ino, path.map(str::to_string)))
    };
    let names = crate::analysis::sections::Names {
        devices: &devices,
        device: &name,
        cgroup: &cgroup,
        file: &file,
        arrays: &r.header().arrays,
        diskstats: (
            &header.diskstats_start,
            trailer.as_ref().map_or(&[][..], |t| &t.diskstats_end),
        ),
    };
    let classes = classes.map(|e| e.report(&name));
    // A section with nothing to say (Null) leaves no key.
    let sections = sections
        .into_iter()
        .map(|(n, sec)| (n.to_string(), sec.finish(&names)))
        .filter(|(_, v)| !v.is_null())
        .collect();
    Ok(Summary {
        sections,
        classes,
        tasks,
        context: Context::default(),
        paths: vec![path.to_owned()],
        header,
        trailer,
        endings: vec![(path.to_owned(), ending)],
        devices,
        records,
        coverage: cov,
        last_stats,
        integrity,
    })
}

/// RFC 3339 wall-clock time of a `CLOCK_MONOTONIC` instant of the trace.
pub fn wall_time(header: &TraceHeader, mono_ns: u64) -> String {
    rfc3339(header.wall_ns(mono_ns))
}

/// What a trace knows it missed, from its header, its trailer (else its last stats frame: a file
/// cut short still knows its losses up to there) and its coverage check.
pub fn lost(
    header: &TraceHeader,
    trailer: Option<&TraceTrailer>,
    last_stats: Option<&StatsFrame>,
    coverage: &[DeviceCoverage],
) -> Lost {
    let c = match (trailer, last_stats) {
        (Some(t), _) => t.counters_end.clone(),
        (None, Some(st)) => st.counters.clone(),
        (None, None) => ProbeCounters::default(),
    };
    let c0 = &header.counters_start;
    let drops = c.ring_drops.saturating_sub(c0.ring_drops);
    let missed = c.missed_completions.saturating_sub(c0.missed_completions);
    let rec = c.recursion_misses().saturating_sub(c0.recursion_misses());
    let untracked = c.request_map_full.saturating_sub(c0.request_map_full);
    // IOs recorded but missing from the aggregates (their key did not fit): not lost from
    // the trace, but they explain a gap in the coverage check.
    let unaggregated = c.aggregate_map_full.saturating_sub(c0.aggregate_map_full);
    let reported = missed.saturating_add(rec).saturating_add(untracked);
    let unaccounted: u64 = coverage
        .iter()
        .flat_map(|d| d.groups.iter())
        .map(|g| g.unaccounted(reported.saturating_add(unaggregated)))
        .fold(0, u64::saturating_add);
    Lost {
        total: reported.saturating_add(drops).saturating_add(unaccounted),
        ring_drops: drops,
        missed_completions: missed,
        recursion_misses: rec,
        untracked,
        unaccounted,
        filtered_out: match (trailer, last_stats) {
            (Some(t), _) => t.filtered_out,
            (None, Some(st)) => st.filtered_out,
            (None, None) => 0,
        },
    }
}

impl Summary {
    pub fn lost(&self) -> Lost {
        lost(
            &self.header,
            self.trailer.as_ref(),
            self.last_stats.as_ref(),
            &self.coverage,
        )
    }

    pub fn wall(&self, mono_ns: u64) -> String {
        wall_time(&self.header, mono_ns)
    }
}

impl Summary {
    pub fn to_json(&self) -> JsonReport {
        let mut devices = Vec::new();
        for d in self.devices.values() {
            let tot_ios: u64 = d.ops.values().map(|o| o.ios).sum::<u64>().max(1);
            let tot_bytes: u64 = d.ops.values().map(|o| o.bytes).sum::<u64>().max(1);
            let mut ops = BTreeMap::new();
            for (k, o) in &d.ops {
                let mut sizes: Vec<JsonSize> = o
                    .sizes
                    .iter()
                    .map(|(c, (n, b))| JsonSize {
                        class: c.label(),
                        pct_ios: *n as f64 * 100.0 / o.ios.max(1) as f64,
                        ios: *n,
                        bytes: *b,
                    })
                    .collect();
                sizes.sort_by_key(|z| std::cmp::Reverse(z.ios));
                ops.insert(
                    k.clone(),
                    JsonOp {
                        ios: o.ios,
                        bytes: o.bytes,
                        pct_ios: o.ios as f64 * 100.0 / tot_ios as f64,
                        pct_bytes: o.bytes as f64 * 100.0 / tot_bytes as f64,
                        block_sizes: sizes,
                        device_latency_us: JsonLatency::of(&o.device_latency_ns),
                        total_latency_us: JsonLatency::of(&o.total_latency_ns),
                        readahead_bytes: o.readahead_bytes,
                        errors: o.errors,
                    },
                );
            }
            for k in ["read", "write", "discard", "flush"] {
                if !ops.contains_key(k) {
                    let o = OpStats::new();
                    ops.insert(
                        k.into(),
                        JsonOp {
                            ios: 0,
                            bytes: 0,
                            pct_ios: 0.0,
                            pct_bytes: 0.0,
                            block_sizes: Vec::new(),
                            device_latency_us: JsonLatency::of(&o.device_latency_ns),
                            total_latency_us: JsonLatency::of(&o.total_latency_ns),
                            readahead_bytes: 0,
                            errors: 0,
                        },
                    );
                }
            }
            devices.push(JsonDevice {
                name: d.name.clone(),
                major: d.major,
                minor: d.minor,
                start: self.wall(d.first_ns),
                end: self.wall(d.last_ns),
                ops,
                absorbed_flushes: d.absorbed_flushes,
                coverage: self
                    .coverage
                    .iter()
                    .find(|c| c.major == d.major && c.minor == d.minor)
                    .cloned(),
                throughput: throughput(d),
                bursts: d.bursts.clone(),
                queue_depth_spikes: d.spikes.clone(),
                reads_during_bursts: d.read_impact.clone(),
                series: self.series_json(d),
                classes: self
                    .classes
                    .as_ref()
                    .and_then(|c| c.devices.iter().find(|x| x.name == d.name))
                    .map(|x| x.classes.clone())
                    .unwrap_or_default(),
                queue: self
                    .header
                    .devices
                    .iter()
                    .find(|i| i.major == d.major && i.minor == d.minor)
                    .and_then(|i| i.queue.clone()),
            });
        }
        JsonReport {
            schema_version: REPORT_SCHEMA_VERSION,
            traces: self.paths.iter().map(|p| p.display().to_string()).collect(),
            host: self.header.host.clone(),
            kernel: self.header.kernel.clone(),
            start: rfc3339(self.header.wall_clock_start_ns),
            labels: self.header.labels.clone(),
            start_unix_ns: self.header.wall_clock_start_ns,
            duration_s: self.trailer.as_ref().map(|t| {
                t.monotonic_end_ns
                    .saturating_sub(self.header.monotonic_base_ns) as f64
                    / 1e9
            }),
            records: self.records,
            complete: self.endings.iter().all(|(_, e)| *e == Ending::Complete),
            devices,
            markers: self
                .context
                .logs
                .iter()
                .flat_map(|l| l.markers.iter().cloned())
                .collect(),
            stress: self.context.stress.clone(),
            flush_match: self.flush_matches(),
            compaction_discards: self.compaction_discards(),
            lost: self.lost(),
            integrity: self.integrity.clone(),
            time_zones: JsonTimeZones {
                trace: crate::inputs::zone::Zone::of_trace(&self.header).label,
                app_log: self.context.logs.first().map(|l| l.time_zone.label.clone()),
                stress: self
                    .context
                    .stress
                    .first()
                    .map(|r| r.time_zone.label.clone()),
            },
            time_warnings: self.time_warnings(),
            client_vs_disk: self.client_vs_disk(),
            top_tasks: self
                .tasks
                .iter()
                .take(TOP_TASKS)
                .map(|(pid, comm, ios)| JsonTask {
                    pid: *pid,
                    comm: comm.clone(),
                    ios: *ios,
                })
                .collect(),
            tasks: self.tasks.len(),
            sections: self.sections.clone(),
            class_profile: self.classes.as_ref().map(|c| c.profile.clone()),
        }
    }

    /// [`JsonReport::client_vs_disk`].
    fn client_vs_disk(&self) -> Vec<ClientVsDisk> {
        let Some(d) = self.devices.values().next() else {
            return Vec::new();
        };
        let to_mono = |w: i64| self.header.mono_ns(w);
        let mut out = Vec::new();
        for run in &self.context.stress {
            let timed: Vec<_> = run
                .status
                .iter()
                .filter(|p| p.time_ns.is_some() && p.ops_per_s.is_some())
                .collect();
            if !timed
                .iter()
                .any(|p| p.time_ns.is_some_and(|t| self.near_trace(t)))
            {
                continue;
            }
            let s = &d.series;
            let mut prev: Option<i64> = None;
            let mut rows = Vec::new();
            for p in timed {
                let t = p.time_ns.unwrap_or(0);
                let from = prev.unwrap_or(t - 5_000_000_000);
                prev = Some(t);
                let (a, b) = (s.at_interval(to_mono(from)), s.at_interval(to_mono(t)));
                let ivs = s.intervals.get(a..b.min(s.intervals.len())).unwrap_or(&[]);
                let secs = (ivs.len() as f64 * s.interval_ns as f64 / 1e9).max(1e-9);
                rows.push(ClientDiskRow {
                    time: rfc3339(t),
                    ops_per_s: p.ops_per_s.unwrap_or(0.0),
                    client_p99_us: p
                        .latencies
                        .iter()
                        .filter_map(|l| l.p99_us.or(l.avg_us))
                        .fold(0.0, f64::max),
                    disk: (!ivs.is_empty()).then(|| DiskWindow {
                        write_mb_per_s: ivs.iter().map(|iv| iv.groups[1].1).sum::<u64>() as f64
                            / 1e6
                            / secs,
                        read_iops: ivs.iter().map(|iv| iv.groups[0].0).sum::<u64>() as f64 / secs,
                        queue_depth: (a..b).map(|i| s.interval_queue(i)).sum::<f64>()
                            / (b - a).max(1) as f64,
                        read_p99_us: ivs.iter().map(|iv| iv.read_lat[1]).max().unwrap_or(0) as f64
                            / 1e3,
                    }),
                });
            }
            out.push(ClientVsDisk {
                path: run.path.clone(),
                device: d.name.clone(),
                rows,
            });
        }
        out
    }
}

fn rate(s: &Series, g: StatGroup) -> JsonRate {
    let secs = s.interval_ns as f64 / 1e9;
    let n = s.intervals.len().max(1) as f64;
    let ios: Vec<f64> = s
        .intervals
        .iter()
        .map(|iv| iv.groups[g as usize].0 as f64 / secs)
        .collect();
    let mbs: Vec<f64> = s
        .intervals
        .iter()
        .map(|iv| iv.groups[g as usize].1 as f64 / 1e6 / secs)
        .collect();
    JsonRate {
        mean_mb_per_s: mbs.iter().sum::<f64>() / n,
        max_mb_per_s: mbs.iter().copied().fold(0.0, f64::max),
        mean_iops: ios.iter().sum::<f64>() / n,
        max_iops: ios.iter().copied().fold(0.0, f64::max),
    }
}

fn throughput(d: &DeviceStats) -> JsonThroughput {
    let s = &d.series;
    let n = s.intervals.len();
    JsonThroughput {
        read: rate(s, StatGroup::Read),
        write: rate(s, StatGroup::Write),
        discard: rate(s, StatGroup::Discard),
        flush: rate(s, StatGroup::Flush),
        queue_depth_mean: (0..n).map(|i| s.interval_queue(i)).sum::<f64>() / n.max(1) as f64,
        queue_depth_max: s.intervals.iter().map(|iv| iv.queue_max).max().unwrap_or(0),
    }
}

impl Summary {
    fn series_json(&self, d: &DeviceStats) -> JsonSeries {
        let s = &d.series;
        let secs = s.interval_ns as f64 / 1e9;
        let g = |f: &dyn Fn(&crate::analysis::series::Interval) -> f64| {
            s.intervals.iter().map(f).collect::<Vec<f64>>()
        };
        JsonSeries {
            interval_s: secs,
            start: self.wall(s.t0_ns),
            read_iops: g(&|iv| iv.groups[0].0 as f64 / secs),
            read_mb_per_s: g(&|iv| iv.groups[0].1 as f64 / 1e6 / secs),
            write_iops: g(&|iv| iv.groups[1].0 as f64 / secs),
            write_mb_per_s: g(&|iv| iv.groups[1].1 as f64 / 1e6 / secs),
            discard_mb_per_s: g(&|iv| iv.groups[2].1 as f64 / 1e6 / secs),
            flush_iops: g(&|iv| iv.groups[3].0 as f64 / secs),
            queue_depth_mean: (0..s.intervals.len())
                .map(|i| s.interval_queue(i))
                .collect(),
            queue_depth_max: s.intervals.iter().map(|iv| iv.queue_max).collect(),
            read_p99_us: g(&|iv| iv.read_lat[1] as f64 / 1e3),
            read_max_us: g(&|iv| iv.read_lat[3] as f64 / 1e3),
            write_p99_us: g(&|iv| iv.write_lat[1] as f64 / 1e3),
            write_max_us: g(&|iv| iv.write_lat[3] as f64 / 1e3),
            fine_interval_s: s.fine_ns as f64 / 1e9,
            fine_write_mb_per_s: {
                let fine_s = s.fine_ns as f64 / 1e9;
                s.fine_write_bytes
                    .iter()
                    .map(|&b| b as f64 / 1e6 / fine_s)
                    .collect()
            },
            fine_class_write_mb_per_s: self.classes.as_ref().map_or_else(Vec::new, |c| {
                let fine_s = s.fine_ns as f64 / 1e9;
                c.fine_written(
                    tracer_common::dev_join(d.major, d.minor),
                    s.fine_write_bytes.len(),
                )
                .into_iter()
                .map(|(class, v)| crate::report::model::ClassSeries {
                    class: class.to_string(),
                    mb_per_s: v.into_iter().map(|b| b as f64 / 1e6 / fine_s).collect(),
                })
                .collect()
            }),
        }
    }
}

impl Summary {
    /// The discards that followed each compaction of the application's log, per device.
    pub fn compaction_discards(&self) -> Vec<(String, CompactionDiscards)> {
        let mut comps: Vec<crate::inputs::stress::Compaction> = self
            .context
            .logs
            .iter()
            .flat_map(|l| l.compactions.iter().cloned())
            .collect();
        comps.sort_by_key(|c| c.end_ns);
        self.devices
            .values()
            .filter_map(|d| {
                let lo = self.header.wall_ns(d.first_ns);
                let hi = self.header.wall_ns(d.last_ns);
                let inside: Vec<&crate::inputs::stress::Compaction> = comps
                    .iter()
                    .filter(|c| c.end_ns >= lo && c.end_ns <= hi)
                    .collect();
                if inside.is_empty() {
                    return None;
                }
                let mut out = CompactionDiscards {
                    compactions: inside.len(),
                    window_s: COMPACTION_DISCARD_WINDOW_NS as f64 / 1e9,
                    ..Default::default()
                };
                for (i, c) in inside.iter().enumerate() {
                    let next = inside.get(i + 1).map_or(i64::MAX, |n| n.end_ns);
                    let until = next.min(c.end_ns + COMPACTION_DISCARD_WINDOW_NS);
                    let mono = |w: i64| self.header.mono_ns(w);
                    let (a, b) = (mono(c.end_ns), mono(until));
                    let from = d.discards.partition_point(|r| r.complete_ns < a);
                    let to = d.discards.partition_point(|r| r.complete_ns < b);
                    let slice = &d.discards[from..to.max(from)];
                    let n = slice.len() as u64;
                    let bytes: u64 = slice.iter().map(|r| u64::from(r.bytes)).sum();
                    out.discards += n;
                    out.discard_bytes += bytes;
                    out.followed_by_discards += usize::from(n > 0);
                    out.rows.push(CompactionRow {
                        id: c.id.clone(),
                        start: c.start.clone(),
                        end: c.end.clone(),
                        discards: n,
                        discard_bytes: bytes,
                        first_discard_after_s: slice
                            .first()
                            .map(|r| (r.complete_ns - a) as f64 / 1e9),
                    });
                }
                Some((d.name.clone(), out))
            })
            .collect()
    }

    /// The trace's wall-clock span (Unix ns): its start, and its end from the trailer or, in a
    /// trace cut short, its last completion.
    pub fn wall_span(&self) -> (i64, i64) {
        if let Some(t) = &self.trailer {
            (self.header.wall_clock_start_ns, t.wall_clock_end_ns)
        } else {
            let last = self.devices.values().map(|d| d.last_ns).max().unwrap_or(0);
            (self.header.wall_clock_start_ns, self.header.wall_ns(last))
        }
    }

    /// Whether a wall-clock instant (Unix ns) is on the trace: within [`NEAR_TRACE_NS`] of
    /// its span.
    pub fn near_trace(&self, unix_ns: i64) -> bool {
        let (a, b) = self.wall_span();
        unix_ns >= a - NEAR_TRACE_NS && unix_ns <= b + NEAR_TRACE_NS
    }

    /// A device's write bursts on the wall clock, for matching with the log's flushes.
    fn burst_spans(&self, d: &DeviceStats) -> Vec<crate::inputs::stress::BurstSpan> {
        d.bursts
            .iter()
            .map(|b| crate::inputs::stress::BurstSpan {
                start_ns: self.header.wall_ns(b.start_ns),
                end_ns: self.header.wall_ns(b.end_ns),
                start: b.start.clone(),
                writers: crate::analysis::bursts::writers_text(&b.writers),
                main_writer: b
                    .writers
                    .first()
                    .map_or_else(|| "-".to_string(), |w| w.comm.clone()),
                class: b.class.clone(),
                write_bytes: b.write_bytes,
            })
            .collect()
    }

    /// Match each device's write bursts with the logs' flushes (1 s tolerance).
    pub fn flush_matches(&self) -> Vec<(String, crate::inputs::stress::FlushMatch)> {
        // Only flushes within the traced time can be matched.
        let (t_start, t_end) = self.wall_span();
        let flushes: Vec<crate::inputs::stress::Flush> = self
            .context
            .logs
            .iter()
            .flat_map(|l| l.flushes.iter().cloned())
            .filter(|f| f.end_ns >= t_start && f.start_ns <= t_end)
            .collect();
        let compactions: Vec<crate::inputs::stress::Compaction> = self
            .context
            .logs
            .iter()
            .flat_map(|l| l.compactions.iter().cloned())
            .collect();
        if flushes.is_empty() {
            return Vec::new();
        }
        self.devices
            .values()
            .map(|d| {
                (
                    d.name.clone(),
                    crate::inputs::stress::match_flushes(
                        &flushes,
                        &compactions,
                        &self.burst_spans(d),
                        FLUSH_MATCH_TOLERANCE_NS,
                        self.classes.as_ref(),
                    ),
                )
            })
            .collect()
    }

    /// The application logs and stress files none of whose events falls on the trace, each
    /// with the whole- or half-hour UTC offset that would bring them onto it: a local-time
    /// file read in the wrong zone would otherwise just lose its sections.
    pub fn time_warnings(&self) -> Vec<TimeWarning> {
        use crate::inputs::zone::{Zone, candidate_offsets, format_offset, pick_offset};
        const S: i64 = 1_000_000_000;
        let (t_start, t_end) = self.wall_span();
        let span = |times: &[i64]| {
            (
                rfc3339(times.iter().copied().min().unwrap_or(0)),
                rfc3339(times.iter().copied().max().unwrap_or(0)),
            )
        };
        // Local wall-clock time as written (read as if UTC): read at offset o it is at local - o.
        let local = |zone: &Zone, t: i64| t + i64::from(zone.offset_s_at(t)) * S;
        let warning = |kind: &str, path: &str, zone: &Zone, times: &[i64], what: &str| {
            let (first, last) = span(times);
            TimeWarning {
                kind: kind.into(),
                path: path.into(),
                time_zone: zone.label.clone(),
                events: times.len(),
                message: format!(
                    "{path}: no {what} falls inside the trace (its {} {what}s {first} .. {last} read as {}; the trace {} .. {})",
                    times.len(),
                    zone.label,
                    rfc3339(t_start),
                    rfc3339(t_end)
                ),
                first,
                last,
                trace_start: rfc3339(t_start),
                trace_end: rfc3339(t_end),
                suggested_offset: None,
                also_fitting: Vec::new(),
            }
        };
        let bursts: Vec<crate::inputs::stress::BurstSpan> = self
            .devices
            .values()
            .flat_map(|d| self.burst_spans(d))
            .collect();
        let mut out = Vec::new();
        for log in &self.context.logs {
            let times: Vec<i64> = log.markers.iter().map(|m| m.time_ns).collect();
            if times.is_empty() || times.iter().any(|&t| self.near_trace(t)) {
                continue;
            }
            let zone = &log.time_zone;
            let mut w = warning("app-log", &log.path, zone, &times, "event");
            // Scored by the flushes that would match write bursts, then by the events inside.
            let scored: Vec<(i32, (usize, usize))> = candidate_offsets()
                .map(|o| {
                    let shift = |t: i64| local(zone, t) - i64::from(o) * S;
                    let inside = times.iter().filter(|&&t| self.near_trace(shift(t))).count();
                    let flushes: Vec<crate::inputs::stress::Flush> = log
                        .flushes
                        .iter()
                        .map(|f| crate::inputs::stress::Flush {
                            start_ns: shift(f.start_ns),
                            end_ns: shift(f.end_ns),
                            ..f.clone()
                        })
                        .collect();
                    let m = crate::inputs::stress::match_flushes(
                        &flushes,
                        &[],
                        &bursts,
                        FLUSH_MATCH_TOLERANCE_NS,
                        None,
                    );
                    (o, (m.flushes_matched, inside))
                })
                .collect();
            let near = zone.offset_s_at(times[0]);
            match pick_offset(&scored, near) {
                Some((o, (flushes, inside), also)) => {
                    let off = format_offset(o);
                    let gain = if flushes > 0 {
                        format!("{flushes} of its flushes would match write bursts")
                    } else {
                        format!("{inside} of its events would fall inside it")
                    };
                    w.message += &format!("; read as {off}, {gain}: try --app-log-tz {off}");
                    w.suggested_offset = Some(off);
                    w.also_fitting = also.into_iter().map(format_offset).collect();
                }
                None => {
                    w.message += "; no whole- or half-hour UTC offset brings any of them inside: is it the log of this run?";
                }
            }
            if !w.also_fitting.is_empty() {
                w.message += &format!(
                    " (so would {}: the log is longer than the trace; choose the zone of the host that wrote it)",
                    w.also_fitting.join(", ")
                );
            }
            out.push(w);
        }
        for run in &self.context.stress {
            let times: Vec<i64> = run.status.iter().filter_map(|p| p.time_ns).collect();
            if times.is_empty() || times.iter().any(|&t| self.near_trace(t)) {
                continue;
            }
            let zone = &run.time_zone;
            let mut w = warning("stress", &run.path, zone, &times, "status line");
            if run.anchored > 0 {
                // Placed by --stress-start, not by their own stamps: that is what to check.
                w.message += &format!(
                    "; they are placed by --stress-start: check it (a time without Z or an offset is read in --stress-tz, here {})",
                    zone.label
                );
                out.push(w);
                continue;
            }
            let scored: Vec<(i32, usize)> = candidate_offsets()
                .map(|o| {
                    let inside = times
                        .iter()
                        .filter(|&&t| self.near_trace(local(zone, t) - i64::from(o) * S))
                        .count();
                    (o, inside)
                })
                .collect();
            match pick_offset(&scored, zone.offset_s_at(times[0])) {
                Some((o, inside, also)) => {
                    let off = format_offset(o);
                    w.message += &format!(
                        "; read as {off}, {inside} of them would fall inside it: try --stress-tz {off}"
                    );
                    w.suggested_offset = Some(off);
                    w.also_fitting = also.into_iter().map(format_offset).collect();
                }
                None => {
                    w.message += "; no whole- or half-hour UTC offset brings any of them inside: is it the output of this run?";
                }
            }
            if !w.also_fitting.is_empty() {
                w.message += &format!(
                    " (so would {}: the output is longer than the trace; choose the zone of the host that wrote it)",
                    w.also_fitting.join(", ")
                );
            }
            out.push(w);
        }
        out
    }
}

/// A write burst matches a flush it overlaps within this tolerance.
pub const FLUSH_MATCH_TOLERANCE_NS: i64 = 1_000_000_000;

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[test]
    fn the_series_budget_follows_the_file_size() {
        // A 1.4 KB file (a damaged import of 19 IOs claiming 2.5 years): the floor, 3 MB of bins.
        assert_eq!(series_budget(1_412), 1 << 16);
        // The golden traces (about 200 KB): far more than their minute needs at 100 ms.
        assert_eq!(series_budget(205_695), 205_695 * 16);
        // Big traces: the global bound.
        assert_eq!(series_budget(1 << 30), SERIES_BIN_BUDGET);
        assert_eq!(series_budget(u64::MAX), SERIES_BIN_BUDGET);
    }
}
