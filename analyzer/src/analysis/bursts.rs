//! Write bursts (the memtable-flush signature) and queue-depth spikes, with what the reads
//! suffered inside bursts compared with outside.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;
use tracer_common::format::IoRecord;
use tracer_common::op::{Op, StatGroup};

use crate::analysis::series::{BurstBins, Options, Series, SpikeBins};
use crate::analysis::sizes::SizeClass;

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct Burst {
    /// RFC 3339 wall-clock times.
    pub start: String,
    pub end: String,
    pub start_s: f64,
    pub duration_s: f64,
    pub write_bytes: u64,
    pub write_ios: u64,
    pub peak_mb_per_s: f64,
    pub mean_mb_per_s: f64,
    pub dominant_write_size: String,
    pub dominant_write_size_pct: f64,
    /// Discards completed after the burst (within the window, before the next burst).
    pub discards_after: u64,
    pub discard_bytes_after: u64,
    pub first_discard_after_s: Option<f64>,
    pub read_p99_us: f64,
    pub queue_depth_mean: f64,
    pub queue_depth_max: u32,
    /// The tasks that submitted the burst's writes, most bytes first (at most three).
    #[serde(default)]
    pub writers: Vec<Writer>,
    /// The application IO classes of its written bytes ([`crate::analysis::classes`]), most
    /// first; empty when the report has no classes.
    pub classes: Vec<BurstClass>,
    /// The class of most of its written bytes ("" without classes).
    pub class: String,
    #[serde(skip)]
    pub start_ns: u64,
    #[serde(skip)]
    pub end_ns: u64,
}

/// A task's share of a burst's written bytes.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct Writer {
    pub comm: String,
    pub bytes: u64,
    pub pct: f64,
}

/// An IO class's share of a burst's written bytes.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct BurstClass {
    pub class: String,
    pub bytes: u64,
    pub pct: f64,
}

/// `"flush 97%, commit log 3%"`.
pub fn classes_text(c: &[BurstClass]) -> String {
    shares_text(c.iter().map(|c| (c.class.as_str(), c.pct)))
}

/// `"MemtableFlushWr 85%, jbd2/loop0-8 15%"`.
pub fn writers_text(w: &[Writer]) -> String {
    shares_text(w.iter().map(|w| (w.comm.as_str(), w.pct)))
}

/// Names with their shares, `"a 85%, b 15%"`; "-" for none.
fn shares_text<'a>(shares: impl Iterator<Item = (&'a str, f64)>) -> String {
    let v: Vec<String> = shares.map(|(n, pct)| format!("{n} {pct:.0}%")).collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(", ")
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct Spike {
    pub start: String,
    pub start_s: f64,
    pub duration_s: f64,
    /// Highest time-weighted queue depth over a fine bin, and the most requests seen in the
    /// OS at one issue.
    pub peak_mean_depth: f64,
    pub peak_inflight: u32,
    pub baseline_depth: f64,
}

/// Reads inside bursts versus outside.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct ReadImpact {
    pub inside_ios: u64,
    pub outside_ios: u64,
    pub inside_p50_us: f64,
    pub inside_p99_us: f64,
    pub inside_max_us: f64,
    pub outside_p50_us: f64,
    pub outside_p99_us: f64,
    pub outside_max_us: f64,
    pub inside_queue_depth_mean: f64,
    pub outside_queue_depth_mean: f64,
}

/// Pass-two accumulator: needs the bursts found in pass one.
pub struct Classifier {
    bursts: Vec<(u64, u64)>,
    windows: Vec<(u64, u64)>,
    inside: Histogram<u64>,
    outside: Histogram<u64>,
    per_burst_reads: Vec<Histogram<u64>>,
    per_burst_sizes: Vec<BTreeMap<SizeClass, u64>>,
    per_burst_writes: Vec<(u64, u64)>,
    /// Bytes written per burst by task index.
    per_burst_writers: Vec<BTreeMap<u32, u64>>,
    discards: Vec<(u64, u64, Option<u64>)>,
}

fn hist() -> Histogram<u64> {
    tracer_common::hdrfast::histogram(tracer_common::hdrfast::LATENCY_HIGHEST_NS, 3)
}

/// Counts a latency. The histograms resize themselves, so this cannot fail for a u64 on a
/// 64-bit machine; should it, the latency is counted at the top of the range, not lost.
fn record(h: &mut Histogram<u64>, ns: u64) {
    if h.record(ns).is_err() {
        h.saturating_record(ns);
    }
}

impl Classifier {
    pub fn new(bursts: &[(u64, u64)], discard_window_ns: u64) -> Classifier {
        let windows = bursts
            .iter()
            .enumerate()
            .map(|(i, &(_, end))| {
                let next = bursts.get(i + 1).map_or(u64::MAX, |b| b.0);
                (end, next.min(end.saturating_add(discard_window_ns)))
            })
            .collect();
        Classifier {
            bursts: bursts.to_vec(),
            windows,
            inside: hist(),
            outside: hist(),
            per_burst_reads: bursts.iter().map(|_| hist()).collect(),
            per_burst_sizes: bursts.iter().map(|_| BTreeMap::new()).collect(),
            per_burst_writes: vec![(0, 0); bursts.len()],
            per_burst_writers: bursts.iter().map(|_| BTreeMap::new()).collect(),
            discards: vec![(0, 0, None); bursts.len()],
        }
    }

    /// Reads outside bursts, from the distribution of all reads (pass two only visits the
    /// chunks that overlap bursts).
    pub fn set_outside(&mut self, all_reads: &Histogram<u64>) {
        let mut o = all_reads.clone();
        // The reads pass two found inside bursts are some of pass one's reads, so this cannot
        // fail; should the passes ever disagree, a half-subtracted histogram would be wrong
        // without a sign: the reads outside bursts are then left out (none) instead.
        if o.subtract(&self.inside).is_err() {
            o.reset();
        }
        self.outside = o;
    }

    /// Index of the burst containing t, if any.
    fn burst_at(&self, t: u64) -> Option<usize> {
        let i = self.bursts.partition_point(|&(s, _)| s <= t);
        (i > 0 && t < self.bursts[i - 1].1).then(|| i - 1)
    }

    #[inline]
    pub fn record(&mut self, r: &IoRecord) {
        match r.stat_group() {
            StatGroup::Read if r.op == Op::Read => {
                // A read is "inside" if it completed during a burst.
                let lat = r.total_ns().max(1);
                if let Some(b) = self.burst_at(r.complete_ns) {
                    record(&mut self.inside, lat);
                    record(&mut self.per_burst_reads[b], lat);
                }
            }
            StatGroup::Write => {
                if let Some(b) = self.burst_at(r.complete_ns) {
                    *self.per_burst_sizes[b]
                        .entry(SizeClass::of(u64::from(r.bytes)))
                        .or_default() += 1;
                    self.per_burst_writes[b].0 += 1;
                    self.per_burst_writes[b].1 += u64::from(r.bytes);
                    *self.per_burst_writers[b].entry(r.task).or_default() += u64::from(r.bytes);
                }
            }
            StatGroup::Discard => {
                let t = r.complete_ns;
                let i = self.windows.partition_point(|&(s, _)| s <= t);
                if i > 0 && t < self.windows[i - 1].1 {
                    let d = &mut self.discards[i - 1];
                    d.0 += 1;
                    d.1 += u64::from(r.bytes);
                    d.2 = Some(d.2.map_or(t, |x: u64| x.min(t)));
                }
            }
            _ => {}
        }
    }
}

/// What splits a device's bursts by IO class: the classes, and the bytes written per class
/// in a run of fine bins ([`crate::analysis::classes::Engine::written`]).
pub struct ClassNames<'a> {
    pub classes: &'a [String],
    pub written: &'a dyn Fn(u64, u64) -> Option<Vec<u64>>,
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1e3
    }
}

/// Assemble bursts from pass one's bins and pass two's classification.
pub fn bursts(
    s: &Series,
    bins: &[BurstBins],
    c: &Classifier,
    wall: &dyn Fn(u64) -> String,
    base_ns: u64,
    comm: &dyn Fn(u32) -> String,
    names: Option<&ClassNames>,
) -> (Vec<Burst>, ReadImpact) {
    let mut out = Vec::new();
    let fine_s = s.fine_ns as f64 / 1e9;
    let mut inside_q = (0.0, 0usize);
    for (i, b) in bins.iter().enumerate() {
        let start_ns = s.bin_start(b.start, s.fine_ns);
        let end_ns = s.bin_start(b.end, s.fine_ns);
        let peak = (b.start..b.end)
            .map(|k| s.fine_write_bytes[k])
            .max()
            .unwrap_or(0) as f64
            / fine_s
            / 1e6;
        let (ios, bytes) = c.per_burst_writes[i];
        let dur = (end_ns - start_ns) as f64 / 1e9;
        let (dom, dom_n) = c.per_burst_sizes[i]
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or(("-".into(), 0), |(k, n)| (k.label(), *n));
        let (dn, db, first) = c.discards[i];
        // Tasks of the same name (the threads of a pool, a kworker's instances) are one writer.
        let mut by_comm: BTreeMap<String, u64> = BTreeMap::new();
        for (&task, &b) in &c.per_burst_writers[i] {
            *by_comm.entry(comm(task)).or_default() += b;
        }
        let mut writers: Vec<Writer> = by_comm
            .into_iter()
            .map(|(comm, b)| Writer {
                comm,
                bytes: b,
                pct: b as f64 * 100.0 / bytes.max(1) as f64,
            })
            .collect();
        writers.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.comm.cmp(&b.comm)));
        writers.truncate(3);
        let mut classes: Vec<BurstClass> = names
            .and_then(|n| {
                let w = (n.written)(b.start as u64, b.end as u64)?;
                Some(
                    w.into_iter()
                        .zip(n.classes)
                        .filter(|(b, _)| *b > 0)
                        .map(|(b, class)| BurstClass {
                            class: class.clone(),
                            bytes: b,
                            pct: b as f64 * 100.0 / bytes.max(1) as f64,
                        })
                        .collect(),
                )
            })
            .unwrap_or_default();
        classes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.class.cmp(&b.class)));
        let q: f64 = (b.start..b.end).map(|k| s.fine_queue(k)).sum::<f64>();
        inside_q.0 += q;
        inside_q.1 += b.end - b.start;
        out.push(Burst {
            start: wall(start_ns),
            end: wall(end_ns),
            start_s: (start_ns - base_ns) as f64 / 1e9,
            duration_s: dur,
            write_bytes: bytes,
            write_ios: ios,
            peak_mb_per_s: peak,
            mean_mb_per_s: bytes as f64 / 1e6 / dur.max(1e-9),
            dominant_write_size: dom,
            dominant_write_size_pct: dom_n as f64 * 100.0 / ios.max(1) as f64,
            discards_after: dn,
            discard_bytes_after: db,
            first_discard_after_s: first.map(|t| (t - end_ns) as f64 / 1e9),
            read_p99_us: us(&c.per_burst_reads[i], 0.99),
            queue_depth_mean: q / (b.end - b.start).max(1) as f64,
            queue_depth_max: (b.start..b.end)
                .map(|k| s.fine_queue_max[k])
                .max()
                .unwrap_or(0),
            writers,
            class: classes.first().map(|c| c.class.clone()).unwrap_or_default(),
            classes,
            start_ns,
            end_ns,
        });
    }
    let n = s.fine_queue_area_ns.len();
    let total_q: f64 = (0..n).map(|k| s.fine_queue(k)).sum();
    let outside_bins = n.saturating_sub(inside_q.1);
    let impact = ReadImpact {
        inside_ios: c.inside.len(),
        outside_ios: c.outside.len(),
        inside_p50_us: us(&c.inside, 0.5),
        inside_p99_us: us(&c.inside, 0.99),
        inside_max_us: c.inside.max() as f64 / 1e3,
        outside_p50_us: us(&c.outside, 0.5),
        outside_p99_us: us(&c.outside, 0.99),
        outside_max_us: c.outside.max() as f64 / 1e3,
        inside_queue_depth_mean: if inside_q.1 > 0 {
            inside_q.0 / inside_q.1 as f64
        } else {
            0.0
        },
        outside_queue_depth_mean: if outside_bins > 0 {
            (total_q - inside_q.0) / outside_bins as f64
        } else {
            0.0
        },
    };
    (out, impact)
}

pub fn spikes(
    s: &Series,
    bins: &[SpikeBins],
    wall: &dyn Fn(u64) -> String,
    base_ns: u64,
) -> Vec<Spike> {
    bins.iter()
        .map(|b| {
            let start_ns = s.bin_start(b.start, s.fine_ns);
            Spike {
                start: wall(start_ns),
                start_s: (start_ns - base_ns) as f64 / 1e9,
                duration_s: (b.end - b.start) as f64 * s.fine_ns as f64 / 1e9,
                peak_mean_depth: (b.start..b.end)
                    .map(|k| s.fine_queue(k))
                    .fold(0.0, f64::max),
                peak_inflight: (b.start..b.end)
                    .map(|k| s.fine_queue_max[k])
                    .max()
                    .unwrap_or(0),
                baseline_depth: b.baseline,
            }
        })
        .collect()
}

pub fn burst_ranges(s: &Series, bins: &[BurstBins]) -> Vec<(u64, u64)> {
    bins.iter()
        .map(|b| {
            (
                s.bin_start(b.start, s.fine_ns),
                s.bin_start(b.end, s.fine_ns),
            )
        })
        .collect()
}

pub fn default_options() -> Options {
    Options::default()
}
