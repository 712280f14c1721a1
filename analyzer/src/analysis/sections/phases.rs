//! Phase table, after blktrace's btt: per device and op, the time an IO spent queued in the OS
//! (Q2D: entering the queue to issue), at the device (D2C: issue to completion) and in all
//! (Q2C); per device the seek distance between consecutive IOs in submission order and the
//! time with at least one IO in the OS (active) against none (idle).
//!
//! The phases' figures come from the summary's histograms (it counts every IO's queue, device
//! and total latency once); this section adds what the summary does not count.
//!
//! Seeks want submission order, and records arrive in completion order (nearly: CPUs race
//! to the ring); a window of at least [`WINDOW`] IOs per device restores it: an IO submitted
//! before one already taken from the window is taken late and counted in `out_of_order`. The
//! window costs about as much per IO as the rest of the report's sections together, so seeks
//! are measured on a sample: all of the first [`ALL_IOS`] records, then runs of [`SAMPLE_RUN`]
//! consecutive records, one in every [`SAMPLE_PERIOD`] (so that each seek is between
//! neighbours, with the window restarted at each run). Busy
//! and idle time are the summary's (the union of the IOs' intervals, see `crate::analysis::busy`).
//!
//! btt's merge ratio (bios queued per request) needs the bios, which the probe does not see:
//! the trace holds requests only, so it is not reported.

use std::io::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::op::{Op, StatGroup};

use super::{Names, Section, SectionDef};
use crate::analysis::per_device::index;
use crate::analysis::series::Options;

pub(super) const DEF: SectionDef = SectionDef {
    name: "phases",
    new,
    text,
    html,
};

/// IOs of a device held to restore submission order from completion order.
const WINDOW: usize = 64;
/// Records (in file order) whose seeks are all measured: traces of up to this many IOs are
/// measured whole.
const ALL_IOS: u64 = 1 << 17;
/// Past those, seeks are measured on the first [`SAMPLE_RUN`] records of every
/// [`SAMPLE_PERIOD`] (one in eight).
const SAMPLE_RUN: u64 = 1 << 13;
const SAMPLE_PERIOD: u64 = 1 << 16;

/// What the merge ratio is, in every output that shows one.
const MERGES: &str = "merge ratio: bios per request, (requests + merges) / requests, from /proc/diskstats over the run (the kernel's merge counts, iostat's rrqm/s and wrqm/s): the whole device, not only the traced IOs; absent without the trailer's diskstats";

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    /// IOs per device held to restore submission order.
    window: usize,
    /// Percent of the IOs whose seeks were measured (runs of consecutive IOs).
    seeks_sampled_pct: f64,
    /// Why btt's merge ratio is absent.
    merge_ratio: String,
    devices: Vec<DeviceModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DeviceModel {
    name: String,
    ops: Vec<OpModel>,
    seek: SeekModel,
    /// From the first IO's entry to the last completion.
    span_s: f64,
    /// With at least one IO in the OS (entered, not completed): the union of the IOs'
    /// intervals.
    active_s: f64,
    idle_s: f64,
    pct_active: f64,
    /// IOs of the seek sample taken from the window after one submitted later (submission
    /// order not restored).
    out_of_order: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct OpModel {
    op: String,
    ios: u64,
    /// Bios merged into requests on the device during the run, and (requests + merges) /
    /// requests, from /proc/diskstats (read, write, discard; absent without diskstats).
    #[serde(skip_serializing_if = "Option::is_none")]
    merged_bios: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bios_per_request: Option<f64>,
    q2d_us: PhaseModel,
    d2c_us: PhaseModel,
    q2c_us: PhaseModel,
}

/// Microseconds, from the summary's HDR histogram of the phase (3 significant digits).
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct PhaseModel {
    /// IOs with this phase (Q2D and D2C: those issued to the device).
    ios: u64,
    min: f64,
    avg: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

impl OpModel {
    /// Its phases in the order the HTML table shows them.
    fn phases(&self) -> [&PhaseModel; 3] {
        [&self.q2d_us, &self.d2c_us, &self.q2c_us]
    }
}

impl PhaseModel {
    /// Its figures in the order the HTML table shows them.
    fn figures(&self) -> [f64; 5] {
        [self.min, self.avg, self.p50, self.p99, self.max]
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct SeekModel {
    /// Pairs of consecutive IOs with data (flushes have none).
    seeks: u64,
    /// |start - end of the IO before|, in 512-byte sectors.
    mean_sectors: f64,
    /// Exact below 32 sectors, within 1.6% above (the middle of a bucket 3% wide).
    median_sectors: f64,
    /// Seeks of 0 sectors: the IO starts where the one submitted before it ended.
    pct_zero: f64,
}

/// A phase's figures from the summary's histogram of it.
fn phase(h: &Histogram<u64>) -> PhaseModel {
    if h.is_empty() {
        return PhaseModel::default();
    }
    let us = |ns: u64| ns as f64 / 1e3;
    PhaseModel {
        ios: h.len(),
        min: us(h.min()),
        avg: h.mean() / 1e3,
        p50: us(h.value_at_quantile(0.5)),
        p99: us(h.value_at_quantile(0.99)),
        max: us(h.max()),
    }
}

/// Sub-buckets per power of two of [`SeekHist`].
const SEEK_SUB: u64 = SEEK_SUB_USIZE as u64;
const SEEK_SUB_USIZE: usize = 32;
/// Buckets of [`SeekHist`]: [`SEEK_SUB`] for each power of two of a u64.
const SEEK_BUCKETS: usize = 64 * SEEK_SUB_USIZE;

/// Seek distances, log-linear: exact below [`SEEK_SUB`] sectors, then [`SEEK_SUB`] buckets per
/// power of two (3%). 16 KiB, so that it stays in the cache (an HDR histogram of 3
/// significant digits over random seeks missed it on every IO).
struct SeekHist {
    counts: Box<[u64; SEEK_BUCKETS]>,
}

impl Default for SeekHist {
    fn default() -> Self {
        SeekHist {
            counts: Box::new([0; SEEK_BUCKETS]),
        }
    }
}

impl SeekHist {
    #[inline]
    fn index(v: u64) -> usize {
        let i = if v < SEEK_SUB {
            v
        } else {
            let octave = u64::from(v.ilog2()); // >= 5
            (octave - 4) * SEEK_SUB + ((v >> (octave - 5)) & (SEEK_SUB - 1))
        };
        // At most 59 * SEEK_SUB + 31 (octave <= 63): always below SEEK_BUCKETS.
        usize::try_from(i).unwrap_or(SEEK_BUCKETS - 1)
    }

    #[inline]
    fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
    }

    /// The middle of the bucket holding the median of `n` values.
    fn median(&self, n: u64) -> f64 {
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if c > 0 && seen * 2 >= n {
                let i = i as u64;
                if i < SEEK_SUB {
                    return i as f64;
                }
                let (octave, sub) = (i / SEEK_SUB + 4, i % SEEK_SUB);
                let lo = (SEEK_SUB + sub) << (octave - 5);
                return lo as f64 + ((1u64 << (octave - 5)) - 1) as f64 / 2.0;
            }
        }
        0.0
    }
}

#[derive(Clone, Copy)]
struct Pending {
    enter_ns: u64,
    sector: u64,
    sectors: u64,
}

struct Device {
    dev: u32,
    /// The latest IOs, sorted by entry time; the first [`WINDOW`] are taken (in submission
    /// order) once it holds twice that many, so each is taken after at least [`WINDOW`] IOs
    /// that completed after it.
    window: Vec<Pending>,
    last_enter_ns: u64,
    out_of_order: u64,
    /// End sector of the IO with data taken before, in this run of sampled chunks.
    prev_end: Option<u64>,
    seeks: u64,
    seek_sum: u128,
    seek_zero: u64,
    seek_counts: SeekHist,
}

impl Device {
    fn new(dev: u32) -> Device {
        Device {
            dev,
            window: Vec::with_capacity(2 * WINDOW),
            last_enter_ns: 0,
            out_of_order: 0,
            prev_end: None,
            seeks: 0,
            seek_sum: 0,
            seek_zero: 0,
            seek_counts: SeekHist::default(),
        }
    }

    #[inline]
    fn push(&mut self, p: Pending) {
        // Insert by entry time, from the back: usually at the back itself.
        let mut i = self.window.len();
        while i > 0 && self.window[i - 1].enter_ns > p.enter_ns {
            i -= 1;
        }
        self.window.insert(i, p);
        if self.window.len() == 2 * WINDOW {
            self.take(WINDOW);
        }
    }

    /// Take the first `n` IOs of the window in submission order.
    fn take(&mut self, n: usize) {
        for k in 0..n {
            let p = self.window[k];
            if p.enter_ns < self.last_enter_ns {
                self.out_of_order += 1;
            }
            self.last_enter_ns = self.last_enter_ns.max(p.enter_ns);
            if p.sectors > 0 {
                if let Some(prev) = self.prev_end {
                    let d = p.sector.abs_diff(prev);
                    self.seeks += 1;
                    self.seek_sum += u128::from(d);
                    self.seek_zero += u64::from(d == 0);
                    self.seek_counts.record(d);
                }
                self.prev_end = Some(p.sector.saturating_add(p.sectors));
            }
        }
        self.window.drain(..n);
    }

    /// End a run of sampled chunks: take what the window holds; the next run starts afresh.
    fn end_run(&mut self) {
        self.take(self.window.len());
        self.prev_end = None;
        self.last_enter_ns = 0;
    }
}

#[derive(Default)]
struct Phases {
    devices: Vec<Device>,
    last: usize,
    /// Records seen, and those whose seeks were measured.
    ios: u64,
    sampled_ios: u64,
    /// Whether the last record seen was in the sample.
    in_run: bool,
}

fn new(_: &Options, _: &tracer_common::format::TraceHeader) -> Box<dyn Section> {
    Box::<Phases>::default()
}

impl Phases {
    fn sample(&mut self, records: &[IoRecord]) {
        for r in records {
            // An empty flush the flush machinery absorbed never reached the device (the
            // report's `flush-absorbed`).
            if r.op == Op::Flush && r.stat_group() != StatGroup::Flush {
                continue;
            }
            let i = index(
                &mut self.devices,
                &mut self.last,
                r.dev,
                |d| d.dev,
                || Device::new(r.dev),
            );
            self.devices[i].push(Pending {
                enter_ns: r.enter_ns,
                sector: r.sector,
                sectors: u64::from(r.bytes).div_ceil(512),
            });
        }
    }
}

impl Section for Phases {
    fn chunk(&mut self, records: &[IoRecord]) {
        let mut i = 0;
        while i < records.len() {
            let p = self.ios + i as u64;
            let (sampled, end) = if p < ALL_IOS {
                (true, ALL_IOS)
            } else {
                let off = (p - ALL_IOS) % SAMPLE_PERIOD;
                if off < SAMPLE_RUN {
                    (true, p - off + SAMPLE_RUN)
                } else {
                    (false, p - off + SAMPLE_PERIOD)
                }
            };
            let j = records
                .len()
                .min(crate::numeric::u64_to_usize_saturating(end - self.ios));
            if sampled {
                self.sample(&records[i..j]);
                self.sampled_ios += (j - i) as u64;
                self.in_run = true;
            } else if self.in_run {
                // Runs of the sample are measured apart: no seek across what is left out.
                self.devices.iter_mut().for_each(Device::end_run);
                self.in_run = false;
            }
            i = j;
        }
        self.ios += records.len() as u64;
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        let mut sampled = self.devices;
        // Every device the summary saw, with or without IOs in the seek sample.
        let mut devices: Vec<DeviceModel> = cx
            .devices
            .iter()
            .map(|(&dev, stats)| {
                let mut d = match sampled.iter().position(|d| d.dev == dev) {
                    Some(i) => sampled.swap_remove(i),
                    None => Device::new(dev),
                };
                d.end_run();
                let span_ns = stats.busy.span_ns();
                let active_ns = stats.busy.busy_ns();
                let pct = |a: u64, b: u64| {
                    if b == 0 {
                        0.0
                    } else {
                        a as f64 * 100.0 / b as f64
                    }
                };
                // The phases' histograms are the summary's (its device and total latency).
                let mut ops: Vec<OpModel> = stats
                    .ops
                    .iter()
                    .map(|(op, o)| {
                        let m = merges(cx, (stats.major, stats.minor), op);
                        OpModel {
                            op: op.clone(),
                            ios: o.ios,
                            merged_bios: m.map(|m| m.0),
                            bios_per_request: m.map(|m| m.1),
                            q2d_us: phase(&o.queue_latency_ns),
                            d2c_us: phase(&o.device_latency_ns),
                            q2c_us: phase(&o.total_latency_ns),
                        }
                    })
                    .collect();
                // The report's order: read, write, discard, flush, then the rest by name.
                let rank = |op: &str| {
                    StatGroup::ALL
                        .iter()
                        .position(|g| g.name() == op)
                        .unwrap_or(StatGroup::ALL.len())
                };
                ops.sort_by(|a, b| (rank(&a.op), &a.op).cmp(&(rank(&b.op), &b.op)));
                DeviceModel {
                    name: (cx.device)(d.dev),
                    ops,
                    seek: SeekModel {
                        seeks: d.seeks,
                        mean_sectors: if d.seeks == 0 {
                            0.0
                        } else {
                            d.seek_sum as f64 / d.seeks as f64
                        },
                        median_sectors: if d.seeks == 0 {
                            0.0
                        } else {
                            d.seek_counts.median(d.seeks)
                        },
                        pct_zero: pct(d.seek_zero, d.seeks),
                    },
                    span_s: span_ns as f64 / 1e9,
                    active_s: active_ns as f64 / 1e9,
                    idle_s: (span_ns - active_ns) as f64 / 1e9,
                    pct_active: pct(active_ns, span_ns),
                    out_of_order: d.out_of_order,
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model {
            window: WINDOW,
            seeks_sampled_pct: if self.ios == 0 {
                100.0
            } else {
                self.sampled_ios as f64 * 100.0 / self.ios as f64
            },
            merge_ratio: MERGES.into(),
            devices,
        })
        .unwrap_or(Value::Null)
    }
}

/// (merges, bios per request) of an op on a device over the run, from /proc/diskstats.
fn merges(cx: &Names, (major, minor): (u32, u32), op: &str) -> Option<(u64, f64)> {
    let find = |v: &[tracer_common::diskstats::DiskStats]| {
        v.iter()
            .find(|x| x.major == major && x.minor == minor)
            .cloned()
    };
    let (a, b) = (find(cx.diskstats.0)?, find(cx.diskstats.1)?);
    let (ios, merged) = match op {
        "read" => (
            b.read_ios.checked_sub(a.read_ios)?,
            b.read_merges.checked_sub(a.read_merges)?,
        ),
        "write" => (
            b.write_ios.checked_sub(a.write_ios)?,
            b.write_merges.checked_sub(a.write_merges)?,
        ),
        "discard" => (
            b.discard_ios.checked_sub(a.discard_ios)?,
            b.discard_merges.checked_sub(a.discard_merges)?,
        ),
        _ => return None,
    };
    (ios > 0).then(|| (merged, (ios as f64 + merged as f64) / ios as f64))
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn us(v: f64) -> String {
    crate::report::format::fmt_us(v)
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    writeln!(
        out,
        "\nphases (btt: Q2D queued in the OS, D2C at the device, Q2C in all; min / avg / p50 / p99 / max):"
    )?;
    for d in &m.devices {
        for o in &d.ops {
            let p = |p: &PhaseModel| {
                if p.ios == 0 {
                    "-".to_string()
                } else {
                    format!(
                        "{} / {} / {} / {} / {}",
                        us(p.min),
                        us(p.avg),
                        us(p.p50),
                        us(p.p99),
                        us(p.max)
                    )
                }
            };
            writeln!(
                out,
                "  {:<12} {:<7} {:>10} IOs  Q2D {}  D2C {}  Q2C {}",
                d.name,
                o.op,
                tracer_common::coverage::thousands(o.ios),
                p(&o.q2d_us),
                p(&o.d2c_us),
                p(&o.q2c_us)
            )?;
        }
        let merges: Vec<String> = d
            .ops
            .iter()
            .filter_map(|o| {
                let r = o.bios_per_request?;
                Some(format!(
                    "{} {r:.2} ({} merged)",
                    o.op,
                    tracer_common::coverage::thousands(o.merged_bios.unwrap_or(0))
                ))
            })
            .collect();
        if !merges.is_empty() {
            writeln!(
                out,
                "  {:<12} bios per request (diskstats): {}",
                d.name,
                merges.join(", ")
            )?;
        }
        writeln!(
            out,
            "  {:<12} seeks in submission order{}: mean {:.0} sectors, median {:.0}, {:.1}% none (sequential share: see access pattern); active {:.3} s, idle {:.3} s ({:.1}% active)",
            d.name,
            if m.seeks_sampled_pct < 100.0 {
                format!(" (measured on {:.1}% of the IOs)", m.seeks_sampled_pct)
            } else {
                String::new()
            },
            d.seek.mean_sectors,
            d.seek.median_sectors,
            d.seek.pct_zero,
            d.active_s,
            d.idle_s,
            d.pct_active
        )?;
    }
    writeln!(out, "  {}", m.merge_ratio)?;
    Ok(())
}

#[derive(askama::Template)]
#[template(path = "sections/phases.html")]
struct Html<'a> {
    m: &'a Model,
}

fn html(v: &Value, h: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    super::render_html(&Html { m: &m }, h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::diskstats::DiskStats;

    #[test]
    fn merge_ratios_come_from_the_runs_diskstats() {
        let at = |read_ios, read_merges, write_ios, write_merges| DiskStats {
            major: 259,
            minor: 0,
            read_ios,
            read_merges,
            write_ios,
            write_merges,
            ..Default::default()
        };
        let (start, end) = ([at(100, 5, 10, 0)], [at(1100, 505, 10, 0)]);
        let d = (259, 0);
        let devices = std::collections::BTreeMap::default();
        let cx = Names {
            devices: &devices,
            device: &|_| String::new(),
            cgroup: &|_| None,
            file: &|_| None,
            arrays: &[],
            diskstats: (&start, &end),
        };
        // 1,000 requests, 500 bios merged into them: 1.5 bios per request.
        assert_eq!(merges(&cx, d, "read"), Some((500, 1.5)));
        // No write requests in the run: no ratio.
        assert_eq!(merges(&cx, d, "write"), None);
        assert_eq!(merges(&cx, d, "flush"), None);
        let none = Names {
            diskstats: (&start, &[]),
            ..cx
        };
        assert_eq!(merges(&none, d, "read"), None);
    }

    #[test]
    fn seek_buckets_hold_their_values() {
        for v in [
            0u64,
            1,
            31,
            32,
            33,
            63,
            64,
            992,
            1_000_000,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let mut h = SeekHist::default();
            h.record(v);
            let m = h.median(1);
            assert!((m - v as f64).abs() <= v as f64 / 64.0 + 0.5, "{v}: {m}");
        }
        // The median of 1, 2 and 3.
        let mut h = SeekHist::default();
        for v in [1, 2, 3] {
            h.record(v);
        }
        assert_eq!(h.median(3), 2.0);
    }
}
