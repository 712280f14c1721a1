//! Time series per device: per interval (default 1 s) IOPS, bytes and latency per op, queue
//! depth (time-weighted mean and max); per fine bin (100 ms) write bytes and queue depth for
//! burst and spike detection.

use crate::analysis::loghist::LogHist;
use crate::numeric::{median, u64_to_usize_saturating};
use tracer_common::format::IoRecord;
use tracer_common::op::StatGroup;

#[derive(Clone, Debug)]
pub struct Options {
    /// Interval of the reported time series.
    pub interval_ns: u64,
    /// Resolution of burst and spike detection.
    pub fine_ns: u64,
    /// A write burst: write throughput above `burst_factor` x the run's median write rate...
    pub burst_factor: f64,
    /// ...and above `burst_mean_factor` x the run's mean write rate...
    pub burst_mean_factor: f64,
    /// ...and above this many bytes per second.
    pub burst_min_bytes_per_s: f64,
    /// Bursts closer than this are merged.
    pub burst_gap_ns: u64,
    /// Only writes by tasks whose comm contains one of these count towards bursts (empty:
    /// every writer), e.g. Cassandra's `MemtableFlushWr` to tell flushes from compactions.
    pub burst_comms: Vec<String>,
    /// Discards within this long after a burst's end are attributed to it.
    pub discard_window_ns: u64,
    /// A queue-depth spike: time-weighted queue depth above `spike_factor` x the median...
    pub spike_factor: f64,
    /// ...and at least this deep.
    pub spike_min_depth: f64,
    /// Spikes closer than this are merged.
    pub spike_gap_ns: u64,
    /// Whether to make the heatmaps ([`crate::analysis::sections::heatmaps`]): only for the HTML report
    /// and charts, or when asked, since they cost a few ns per IO.
    pub heatmaps: bool,
    /// The application IO classes' profile (`--classes`).
    pub classes: crate::analysis::classes::Choice,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            interval_ns: 1_000_000_000,
            fine_ns: 100_000_000,
            burst_factor: 4.0,
            burst_mean_factor: 2.0,
            burst_min_bytes_per_s: 1e6,
            burst_gap_ns: 1_000_000_000,
            burst_comms: Vec::new(),
            discard_window_ns: 60_000_000_000,
            spike_factor: 4.0,
            spike_min_depth: 16.0,
            spike_gap_ns: 500_000_000,
            heatmaps: false,
            classes: crate::analysis::classes::Choice::Auto,
        }
    }
}

/// One interval's figures, finalised.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    /// (ios, bytes) per diskstats group: read, write, discard, flush.
    pub groups: [(u64, u64); 4],
    /// Integral of requests in the OS over the interval, in request-ns.
    pub queue_area_ns: u128,
    pub queue_max: u32,
    /// Total latency percentiles (ns) of reads and writes completed in the interval:
    /// p50, p99, p99.9, max.
    pub read_lat: [u64; 4],
    pub write_lat: [u64; 4],
}

struct Open {
    read: LogHist,
    write: LogHist,
}

pub struct Series {
    pub t0_ns: u64,
    pub interval_ns: u64,
    pub fine_ns: u64,
    pub intervals: Vec<Interval>,
    open: Vec<Option<Box<Open>>>,
    /// Per fine bin: write bytes, read IOs, integral of requests in the OS, max in-flight seen.
    pub fine_write_bytes: Vec<u64>,
    pub fine_queue_area_ns: Vec<u128>,
    pub fine_queue_max: Vec<u32>,
    /// Records whose interval had already been finalised (very late in completion order).
    pub late: u64,
    highest: usize,
    /// The last fine bin and interval looked up: consecutive times mostly fall in them, and a
    /// 64-bit division per lookup was the costliest part of recording a record.
    fine_bin: BinCache,
    interval_bin: BinCache,
    /// Fine bins per interval when an interval is a whole number of them (the default 1 s of
    /// 100 ms): the intervals' queue area and max are then summed from the fine bins at the
    /// end instead of being kept twice per record.
    fine_per_interval: Option<usize>,
    /// Sums for the fine bin the last records fell in, added to the vectors when a record
    /// falls elsewhere (see [`Series::record`]).
    acc: Acc,
}

/// What the records wholly inside one fine bin add up to, kept out of the vectors while
/// records keep coming for that bin (nearly all of them: records arrive in completion order).
struct Acc {
    /// The bin, as an offset from t0 ([`u64::MAX`]: none yet), its index and interval.
    lo: u64,
    fine: usize,
    interval: usize,
    /// (ios, bytes) per diskstats group.
    groups: [(u64, u64); 4],
    queue_area_ns: u128,
    queue_max: u32,
    write_bytes: u64,
    /// The interval's open latency histograms, taken out of `Series::open` while cached;
    /// None when the interval is already finalised (records count as late).
    open: Option<Box<Open>>,
}

impl Acc {
    fn none() -> Acc {
        Acc {
            lo: u64::MAX,
            fine: 0,
            interval: 0,
            groups: [(0, 0); 4],
            queue_area_ns: 0,
            queue_max: 0,
            write_bytes: 0,
            open: None,
        }
    }
}

/// Bin index of an offset from t0, remembering the last bin found.
#[derive(Clone, Copy, Debug)]
struct BinCache {
    /// Offset where the cached bin starts, and its index.
    lo: u64,
    idx: usize,
    width: u64,
}

impl BinCache {
    fn new(width: u64) -> BinCache {
        BinCache {
            lo: 0,
            idx: 0,
            width,
        }
    }

    #[inline]
    fn of(&mut self, offset: u64) -> usize {
        if offset.wrapping_sub(self.lo) < self.width {
            return self.idx;
        }
        let i = offset / self.width;
        self.lo = i * self.width;
        self.idx = u64_to_usize_saturating(i);
        self.idx
    }
}

/// How many intervals stay open behind the newest one (records arrive nearly in completion
/// order; a few ms of skew between CPUs).
const OPEN_WINDOW: usize = 3;

fn grow<T: Clone + Default>(v: &mut Vec<T>, i: usize) {
    if v.len() <= i {
        v.resize(i + 1, T::default());
    }
}

impl Series {
    pub fn new(t0_ns: u64, o: &Options) -> Series {
        Series {
            t0_ns,
            interval_ns: o.interval_ns,
            fine_ns: o.fine_ns,
            intervals: Vec::new(),
            open: Vec::new(),
            fine_write_bytes: Vec::new(),
            fine_queue_area_ns: Vec::new(),
            fine_queue_max: Vec::new(),
            late: 0,
            highest: 0,
            fine_bin: BinCache::new(o.fine_ns),
            interval_bin: BinCache::new(o.interval_ns),
            fine_per_interval: (o.interval_ns >= o.fine_ns
                && o.interval_ns.is_multiple_of(o.fine_ns))
            .then(|| u64_to_usize_saturating(o.interval_ns / o.fine_ns)),
            acc: Acc::none(),
        }
    }

    fn at(&self, t: u64, bin: u64) -> usize {
        u64_to_usize_saturating(t.saturating_sub(self.t0_ns) / bin)
    }

    /// `g`: the record's [`IoRecord::stat_group`]; `burst_writer`: whether this IO's task is
    /// one whose writes count towards bursts.
    #[inline]
    pub fn record(&mut self, r: &IoRecord, g: StatGroup, burst_writer: bool) {
        // Fast path: entered, issued and completed inside the fine bin of the last records.
        let start = r.enter_ns.min(r.complete_ns).max(self.t0_ns);
        let at = if r.issue_ns != 0 {
            r.issue_ns
        } else {
            r.enter_ns
        };
        let a = &mut self.acc;
        let lo = self.t0_ns.wrapping_add(a.lo);
        if a.lo != u64::MAX
            && r.complete_ns.wrapping_sub(lo) < self.fine_ns
            && start >= lo
            && at.wrapping_sub(lo) < self.fine_ns
        {
            a.groups[g as usize].0 += 1;
            a.groups[g as usize].1 += u64::from(r.bytes);
            if let Some(o) = &mut a.open {
                match g {
                    StatGroup::Read => o.read.record(r.total_ns()),
                    StatGroup::Write => o.write.record(r.total_ns()),
                    _ => {}
                }
            } else if matches!(g, StatGroup::Read | StatGroup::Write) {
                self.late += 1;
            }
            a.queue_area_ns += u128::from(r.complete_ns - start);
            a.queue_max = a.queue_max.max(r.os_inflight);
            if g == StatGroup::Write && burst_writer {
                a.write_bytes += u64::from(r.bytes);
            }
            return;
        }
        self.flush_acc();
        self.record_slow(r, g, burst_writer);
        // Cache the bin this record completed in, for the records that follow.
        if let Some(m) = self.fine_per_interval {
            let dc = r.complete_ns.saturating_sub(self.t0_ns);
            let fine = self.fine_bin.of(dc);
            let interval = fine / m;
            // A finalised interval counts its reads and writes as late; an open one needs its
            // histograms, which exist once a read or write completed in it.
            let late = interval + OPEN_WINDOW < self.highest;
            let open = if late {
                None
            } else {
                self.open.get_mut(interval).and_then(Option::take)
            };
            if late || open.is_some() {
                self.acc = Acc {
                    lo: fine as u64 * self.fine_ns,
                    fine,
                    interval,
                    open,
                    ..Acc::none()
                };
            }
        }
    }

    /// Add the cached bin's sums to the vectors and give its histograms back.
    fn flush_acc(&mut self) {
        let a = std::mem::replace(&mut self.acc, Acc::none());
        if a.lo == u64::MAX {
            return;
        }
        grow(&mut self.intervals, a.interval);
        grow(&mut self.fine_queue_area_ns, a.fine);
        grow(&mut self.fine_queue_max, a.fine);
        grow(&mut self.fine_write_bytes, a.fine);
        let iv = &mut self.intervals[a.interval];
        for (t, s) in iv.groups.iter_mut().zip(a.groups) {
            t.0 += s.0;
            t.1 += s.1;
        }
        self.fine_queue_area_ns[a.fine] += a.queue_area_ns;
        self.fine_queue_max[a.fine] = self.fine_queue_max[a.fine].max(a.queue_max);
        self.fine_write_bytes[a.fine] += a.write_bytes;
        if a.open.is_some() {
            self.open[a.interval] = a.open;
        }
    }

    fn record_slow(&mut self, r: &IoRecord, g: StatGroup, burst_writer: bool) {
        let dc = r.complete_ns.saturating_sub(self.t0_ns);
        let i = self.interval_bin.of(dc);
        grow(&mut self.intervals, i);
        if self.open.len() <= i {
            self.open.resize_with(i + 1, || None);
        }
        let iv = &mut self.intervals[i];
        iv.groups[g as usize].0 += 1;
        iv.groups[g as usize].1 += u64::from(r.bytes);
        let total = r.total_ns();
        if matches!(g, StatGroup::Read | StatGroup::Write) {
            if i + OPEN_WINDOW < self.highest {
                self.late += 1;
            } else {
                let o = self.open[i].get_or_insert_with(|| {
                    Box::new(Open {
                        read: LogHist::default(),
                        write: LogHist::default(),
                    })
                });
                if g == StatGroup::Read {
                    o.read.record(total);
                } else {
                    o.write.record(total);
                }
            }
        }
        if i > self.highest {
            let old = self.highest;
            self.highest = i;
            for k in old.saturating_sub(OPEN_WINDOW)..i.saturating_sub(OPEN_WINDOW) {
                self.finalise(k);
            }
        }
        // Queue depth: spread the request's time in the OS over the bins it spans; the in-flight
        // count sampled at its issue belongs to the bin of the issue.
        self.add_area(r.enter_ns.min(r.complete_ns), r.complete_ns);
        let at = if r.issue_ns != 0 {
            r.issue_ns
        } else {
            r.enter_ns
        };
        let da = at.saturating_sub(self.t0_ns);
        let fi = self.fine_bin.of(da);
        grow(&mut self.fine_queue_max, fi);
        self.fine_queue_max[fi] = self.fine_queue_max[fi].max(r.os_inflight);
        if self.fine_per_interval.is_none() {
            let ii = self.interval_bin.of(da);
            grow(&mut self.intervals, ii);
            self.intervals[ii].queue_max = self.intervals[ii].queue_max.max(r.os_inflight);
        }
        let f = self.fine_bin.of(dc);
        grow(&mut self.fine_write_bytes, f);
        if g == StatGroup::Write && burst_writer {
            self.fine_write_bytes[f] += u64::from(r.bytes);
        }
    }

    fn add_area(&mut self, start: u64, end: u64) {
        let s = start.max(self.t0_ns);
        if end <= s {
            return;
        }
        let (ds, de) = (s - self.t0_ns, end - 1 - self.t0_ns);
        let (fs, fe) = (self.fine_bin.of(ds), self.fine_bin.of(de));
        grow(&mut self.fine_queue_area_ns, fe);
        grow(&mut self.fine_queue_max, fe);
        if fs == fe {
            self.fine_queue_area_ns[fs] += u128::from(end - s);
        } else {
            for b in fs..=fe {
                let lo = self.t0_ns + b as u64 * self.fine_ns;
                let hi = lo + self.fine_ns;
                self.fine_queue_area_ns[b] += u128::from(end.min(hi) - s.max(lo));
            }
        }
        if self.fine_per_interval.is_some() {
            return;
        }
        let (is, ie) = (self.interval_bin.of(ds), self.interval_bin.of(de));
        grow(&mut self.intervals, ie);
        if is == ie {
            self.intervals[is].queue_area_ns += u128::from(end - s);
        } else {
            for b in is..=ie {
                let lo = self.t0_ns + b as u64 * self.interval_ns;
                let hi = lo + self.interval_ns;
                self.intervals[b].queue_area_ns += u128::from(end.min(hi) - s.max(lo));
            }
        }
    }

    fn finalise(&mut self, k: usize) {
        if let Some(o) = self.open.get_mut(k).and_then(Option::take) {
            let q = |h: &LogHist| {
                [
                    h.quantile(0.5),
                    h.quantile(0.99),
                    h.quantile(0.999),
                    h.max(),
                ]
            };
            self.intervals[k].read_lat = q(&o.read);
            self.intervals[k].write_lat = q(&o.write);
        }
    }

    pub fn finish(&mut self) {
        self.flush_acc();
        for k in 0..self.open.len() {
            self.finalise(k);
        }
        let n = self
            .fine_write_bytes
            .len()
            .max(self.fine_queue_area_ns.len());
        self.fine_write_bytes.resize(n, 0);
        self.fine_queue_area_ns.resize(n, 0);
        self.fine_queue_max.resize(n, 0);
        if let Some(m) = self.fine_per_interval {
            if n > 0 {
                grow(&mut self.intervals, (n - 1) / m);
            }
            for (b, (&area, &max)) in self
                .fine_queue_area_ns
                .iter()
                .zip(&self.fine_queue_max)
                .enumerate()
            {
                let iv = &mut self.intervals[b / m];
                iv.queue_area_ns += area;
                iv.queue_max = iv.queue_max.max(max);
            }
        }
    }

    /// Mean requests in the OS over a fine bin.
    pub fn fine_queue(&self, b: usize) -> f64 {
        self.fine_queue_area_ns
            .get(b)
            .map_or(0.0, |&a| a as f64 / self.fine_ns as f64)
    }

    pub fn interval_queue(&self, i: usize) -> f64 {
        self.intervals
            .get(i)
            .map_or(0.0, |iv| iv.queue_area_ns as f64 / self.interval_ns as f64)
    }

    /// Interval index of a monotonic time.
    pub fn at_interval(&self, t: u64) -> usize {
        self.at(t, self.interval_ns)
    }

    pub fn bin_start(&self, b: usize, bin_ns: u64) -> u64 {
        self.t0_ns + b as u64 * bin_ns
    }
}

/// Runs of fine bins where `hot(bin)` holds, merged across gaps of at most `gap_bins`.
fn runs(n: usize, gap_bins: usize, hot: impl Fn(usize) -> bool) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut b = 0;
    while b < n {
        if hot(b) {
            let s = b;
            while b < n && hot(b) {
                b += 1;
            }
            match out.last_mut() {
                Some(last) if s - last.1 <= gap_bins => last.1 = b,
                _ => out.push((s, b)),
            }
        } else {
            b += 1;
        }
    }
    out
}

/// A write burst in fine bins [start, end).
#[derive(Clone, Debug, PartialEq)]
pub struct BurstBins {
    pub start: usize,
    pub end: usize,
    pub threshold_bytes_per_s: f64,
    pub baseline_bytes_per_s: f64,
}

pub fn detect_bursts(s: &Series, o: &Options) -> Vec<BurstBins> {
    let per_s = 1e9 / s.fine_ns as f64;
    let rates: Vec<f64> = s
        .fine_write_bytes
        .iter()
        .map(|&b| b as f64 * per_s)
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    let baseline = median(rates.clone());
    let threshold = (baseline * o.burst_factor)
        .max(mean * o.burst_mean_factor)
        .max(o.burst_min_bytes_per_s);
    let gap = u64_to_usize_saturating(o.burst_gap_ns / s.fine_ns);
    runs(rates.len(), gap, |b| rates[b] > threshold)
        .into_iter()
        .map(|(a, b)| BurstBins {
            start: a,
            end: b,
            threshold_bytes_per_s: threshold,
            baseline_bytes_per_s: baseline,
        })
        .collect()
}

/// A queue-depth spike in fine bins [start, end).
#[derive(Clone, Debug, PartialEq)]
pub struct SpikeBins {
    pub start: usize,
    pub end: usize,
    pub threshold: f64,
    pub baseline: f64,
}

pub fn detect_spikes(s: &Series, o: &Options) -> Vec<SpikeBins> {
    let n = s.fine_queue_area_ns.len();
    let q: Vec<f64> = (0..n).map(|b| s.fine_queue(b)).collect();
    let baseline = median(q.iter().copied().filter(|&v| v > 0.0).collect());
    let threshold = (baseline * o.spike_factor).max(o.spike_min_depth);
    let gap = u64_to_usize_saturating(o.spike_gap_ns / s.fine_ns);
    runs(n, gap, |b| q[b] > threshold)
        .into_iter()
        .map(|(a, b)| SpikeBins {
            start: a,
            end: b,
            threshold,
            baseline,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast paths (one cached fine bin summed in an accumulator, intervals derived from
    /// the fine bins) give exactly what recording each record into every vector gives.
    #[test]
    fn fast_paths_equal_the_plain_path() {
        use tracer_common::op::Op;
        let t0 = 1_000_000_000u64;
        let mut rng = crate::numeric::Rng(0x9E37_79B9_7F4A_7C15);
        let mut next = || rng.next_u64();
        let mut recs = Vec::new();
        let mut t = t0;
        for i in 0..200_000u64 {
            let r = next();
            t += r % 200_000; // 0-200 us apart: many records per 100 ms bin
            // Latencies from 1 us to 300 ms, so that areas span bin and interval edges;
            // now and then a record completes out of order or long after (late).
            let lat = match r % 100 {
                0..=89 => 1_000 + r % 500_000,
                90..=98 => 1_000_000 + r % 300_000_000,
                _ => 0,
            };
            let complete = if i % 997 == 0 {
                t.saturating_sub(5_000_000_000)
            } else {
                t
            };
            let op = [Op::Read, Op::Write, Op::Discard, Op::Flush][(r >> 20) as usize % 4];
            recs.push(IoRecord {
                complete_ns: complete,
                enter_ns: complete.saturating_sub(lat),
                issue_ns: if r % 7 == 0 {
                    0
                } else {
                    complete.saturating_sub(lat / 2)
                },
                bytes: 4096 * (1 + u32::try_from((r >> 30) % 8).expect("below 8")),
                os_inflight: u32::try_from((r >> 40) % 64).expect("below 64"),
                op,
                ..Default::default()
            });
        }
        let o = Options::default();
        let mut fast = Series::new(t0, &o);
        let mut plain = Series::new(t0, &o);
        plain.fine_per_interval = None;
        for (i, r) in recs.iter().enumerate() {
            let g = r.stat_group();
            fast.record(r, g, i % 3 != 0);
            plain.record_slow(r, g, i % 3 != 0);
        }
        fast.finish();
        plain.finish();
        assert!(fast.late > 0, "the data should have late records");
        assert_eq!(fast.late, plain.late);
        assert_eq!(fast.intervals, plain.intervals);
        assert_eq!(fast.fine_write_bytes, plain.fine_write_bytes);
        assert_eq!(fast.fine_queue_area_ns, plain.fine_queue_area_ns);
        assert_eq!(fast.fine_queue_max, plain.fine_queue_max);
    }

    #[test]
    fn runs_merge_across_small_gaps() {
        let hot = [0, 1, 1, 0, 1, 0, 0, 0, 1, 1];
        assert_eq!(runs(hot.len(), 1, |b| hot[b] == 1), vec![(1, 5), (8, 10)]);
        assert_eq!(
            runs(hot.len(), 0, |b| hot[b] == 1),
            vec![(1, 3), (4, 5), (8, 10)]
        );
    }
}
