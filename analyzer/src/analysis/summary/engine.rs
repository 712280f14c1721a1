//! The engine: one streaming pass over a trace file that tallies every record per device and
//! op (counts, bytes, size classes, latency histograms, time series) and feeds the sections,
//! then a second pass over the chunks that overlap write bursts only.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use tracer_common::coverage::coverage;
use tracer_common::format::{FormatError, IoRecord, Scan, TraceHeader, TraceReader};
use tracer_common::op::{Op, flags};

use super::{Context, DeviceStats, OpStats, SLOT_ABSORBED, SLOTS, Summary, op_slot, slot_name};
use crate::analysis::bursts::{Classifier, ReadImpact, burst_ranges};
use crate::analysis::classes::Engine;
use crate::analysis::sections::Section;
use crate::analysis::series::{Options, Series, detect_bursts, detect_spikes};

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

/// A device of pass one: its number, its stats, and its op tallies by slot ([`op_slot`]).
type DevEntry = (u32, DeviceStats, Vec<Option<Box<OpStats>>>);

/// What pass one leaves for the rest of the summary.
struct PassOne {
    devs: Vec<DevEntry>,
    records: u64,
    /// IOs per task, by the reader's task numbering.
    task_counts: Vec<u64>,
    /// Where each chunk starts and the completion times it covers, to revisit only the chunks
    /// that overlap write bursts.
    chunks: Vec<((u64, u64), u64, u64)>,
    outside_window: u64,
    devices_without_series: u64,
    sections: Vec<(&'static str, Box<dyn Section>)>,
    classes: Option<Engine>,
    /// The chunk buffer, for pass two.
    buf: Vec<IoRecord>,
}

/// Per device, what pass two needs: the burst bins, the spike bins, and the classifier of
/// reads and writes by burst.
type Found = BTreeMap<
    u32,
    (
        Vec<crate::analysis::series::BurstBins>,
        Vec<crate::analysis::series::SpikeBins>,
        Classifier,
    ),
>;

pub fn summarize(path: &Path, opts: &Options) -> Result<Summary, FormatError> {
    let mut r = TraceReader::open(path)?;
    let header = r.header().clone();
    let t0 = header.monotonic_base_ns;
    let file_bytes = std::fs::metadata(path).map_or(u64::MAX, |m| m.len());
    let window = Window::of(&header, &r.scan()?, opts, file_bytes);
    let opts = &window.opts;
    let PassOne {
        devs,
        records,
        task_counts,
        chunks,
        outside_window,
        devices_without_series,
        sections,
        mut classes,
        mut buf,
    } = pass_one(&mut r, &window)?;
    if let Some(e) = classes.as_mut() {
        e.settle();
    }
    // The default profile is kept only where it finds its application.
    if matches!(opts.classes, crate::analysis::classes::Choice::Auto)
        && classes.as_ref().is_some_and(|e| !e.claimed())
    {
        classes = None;
    }
    let mut devices = into_devices(devs, &r);
    let trailer = r.trailer().cloned();
    let ending = r.ending().clone();
    let last_stats = r.last_stats().cloned();
    let last_record_ns = devices.values().map(|d| d.last_ns).max();
    let integrity = super::losses::integrity(
        &r,
        &window,
        records,
        outside_window,
        devices_without_series,
        last_record_ns,
    );
    let cov = trailer
        .as_ref()
        .map(|t| coverage(&header, t))
        .unwrap_or_default();

    // Bursts and spikes from the series; pass two classifies reads and writes by burst.
    let mut found = find_bursts(&mut devices, opts);
    let task_names = pass_two(path, &chunks, &mut buf, &devices, &mut found, t0, opts)?;
    let wall = |t: u64| super::wall_time(&header, t);
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
    let tasks = task_rows(&task_counts, &r);
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

/// Pass one, the hot path: totals, size mix, latency and time series per device and op, and
/// every record (inside the run's window) through the sections and the class engine.
fn pass_one(r: &mut TraceReader, window: &Window) -> Result<PassOne, FormatError> {
    let opts = &window.opts;
    let t0 = r.header().monotonic_base_ns;
    let mut p = PassOne {
        devs: Vec::new(),
        records: 0,
        task_counts: Vec::new(),
        chunks: Vec::new(),
        outside_window: 0,
        devices_without_series: 0,
        sections: crate::analysis::sections::start(opts, r.header()),
        classes: opts.classes.engine(r.header().files, t0, opts.fine_ns),
        buf: Vec::new(),
    };
    let mut bins_left = window.budget;
    let mut last = usize::MAX;
    // Whether each task's writes count towards bursts (--burst-comm), by pass one's numbering.
    let mut burst_writer: Vec<bool> = Vec::new();
    let mut kept: Vec<IoRecord> = Vec::new();
    let buf = &mut p.buf;
    loop {
        let pos = r.position();
        if !r.next_chunk(buf)? {
            break;
        }
        let (lo, hi) = buf.iter().fold((u64::MAX, 0), |(lo, hi), x| {
            (lo.min(x.complete_ns), hi.max(x.complete_ns))
        });
        p.chunks.push((pos, lo, hi));
        p.task_counts.resize(r.tasks().len(), 0);
        for t in &r.tasks()[burst_writer.len()..] {
            burst_writer.push(
                opts.burst_comms.is_empty()
                    || opts.burst_comms.iter().any(|c| t.comm.contains(c.as_str())),
            );
        }
        p.records += buf.len() as u64;
        let outside_before = p.outside_window;
        // A few hundred records at a time through the summary and then every section, so
        // that each pass after the first finds them in the L1 cache.
        for part in buf.chunks(SECTION_RECORDS) {
            let part_outside_before = p.outside_window;
            for run in part.chunk_by(|a, b| a.dev == b.dev) {
                // The run's device, found (or made) at its first record inside the window.
                let Some(first) = run.iter().position(|x| window.holds(x)) else {
                    p.outside_window += run.len() as u64;
                    continue;
                };
                p.outside_window += first as u64;
                let rec = &run[first];
                let i = crate::analysis::per_device::index(
                    &mut p.devs,
                    &mut last,
                    rec.dev,
                    |d| d.0,
                    || {
                        new_device(
                            rec,
                            window,
                            t0,
                            &mut bins_left,
                            &mut p.devices_without_series,
                        )
                    },
                );
                let (_, d, slots) = &mut p.devs[i];
                for rec in &run[first..] {
                    if !window.holds(rec) {
                        p.outside_window += 1;
                        continue;
                    }
                    p.task_counts[rec.task as usize] += 1;
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
            let part: &[IoRecord] = if p.outside_window == part_outside_before {
                part
            } else {
                kept.clear();
                kept.extend(part.iter().filter(|x| window.holds(x)));
                &kept
            };
            for (_, sec) in &mut p.sections {
                sec.chunk(part);
            }
        }
        if let Some(e) = p.classes.as_mut() {
            let chunk: &[IoRecord] = if p.outside_window == outside_before {
                buf
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
    Ok(p)
}

/// A device first met at record `rec`. Each device reserves the bins its series may need;
/// devices beyond the budget (only a damaged or hostile file has so many) get totals without
/// a series.
fn new_device(
    rec: &IoRecord,
    window: &Window,
    t0: u64,
    bins_left: &mut u64,
    devices_without_series: &mut u64,
) -> DevEntry {
    let (major, minor) = tracer_common::dev_split(rec.dev);
    let has_series = *bins_left >= window.bins_per_device;
    if has_series {
        *bins_left -= window.bins_per_device;
    } else {
        *devices_without_series += 1;
    }
    (
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
            series: Series::new(t0, &window.opts),
            bursts: Vec::new(),
            spikes: Vec::new(),
            read_impact: ReadImpact::default(),
            discards: Vec::new(),
            busy: crate::analysis::busy::Busy::default(),
        },
        (0..SLOTS).map(|_| None).collect(),
    )
}

/// Pass one's devices, their tallies folded, by device number and named as the trace names
/// them.
fn into_devices(devs: Vec<DevEntry>, r: &TraceReader) -> BTreeMap<u32, DeviceStats> {
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
    devices
}

/// Each device's write bursts and queue-depth spikes, from its series.
fn find_bursts(devices: &mut BTreeMap<u32, DeviceStats>, opts: &Options) -> Found {
    let mut found = BTreeMap::new();
    for (&dev, d) in devices {
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
    found
}

/// Pass two, over the chunks that overlap a burst only: each read and write (and, from pass
/// one, each discard) to its device's classifier. The task names, by pass two's numbering.
fn pass_two(
    path: &Path,
    chunks: &[((u64, u64), u64, u64)],
    buf: &mut Vec<IoRecord>,
    devices: &BTreeMap<u32, DeviceStats>,
    found: &mut Found,
    t0: u64,
    opts: &Options,
) -> Result<Vec<String>, FormatError> {
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
    if ranges.is_empty() {
        return Ok(Vec::new());
    }
    for (dev, d) in devices {
        if let Some((_, _, c)) = found.get_mut(dev) {
            for r in &d.discards {
                c.record(r);
            }
        }
    }
    let mut r2 = TraceReader::open(path)?;
    for &(pos, lo, hi) in chunks {
        if !ranges.iter().any(|&(a, b)| lo < b && hi >= a) {
            continue;
        }
        r2.seek(pos)?;
        if !r2.next_chunk(buf)? {
            break;
        }
        for rec in buf.iter() {
            if rec.op == Op::Discard {
                continue;
            }
            if let Some((_, _, c)) = found.get_mut(&rec.dev) {
                c.record(rec);
            }
        }
    }
    // Pass two's reader numbers tasks in the order it meets them.
    Ok(r2.tasks().iter().map(|t| t.comm.clone()).collect())
}

/// The submitting tasks by IO count, most first. One row per (pid, comm): the trace tells a
/// task apart per cgroup and per owner (a kworker writing back for several cgroups), the table
/// does not. In the order tasks were first met, so that ties keep it.
fn task_rows(task_counts: &[u64], r: &TraceReader) -> Vec<(u32, String, u64)> {
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
    tasks
}

#[cfg(test)]
mod tests {
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
