//! Streaming statistics: per-interval time series for the live view, and HDR histograms per
//! (device, op group) for size and latency, written as a standard HdrHistogram interval log.

use std::collections::BTreeMap;
use std::io::Write;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use serde::Serialize;
use tracer_common::format::{AggregateSnapshot, IoRecord};
use tracer_common::hdrfast::HdrCounts;
use tracer_common::op::StatGroup;

use crate::recorder::Trigger;

/// Histograms of one (device, group).
pub struct Hists {
    pub size_bytes: Histogram<u64>,
    pub device_latency_ns: Histogram<u64>,
    pub total_latency_ns: Histogram<u64>,
    /// What records add between two [`Hists::settle`] calls, in the histograms' own buckets.
    counts: [HdrCounts<LIVE_HALF>; 3],
}

/// The live histograms keep 2 significant digits (values within 1%): their counts are a
/// sixteenth of 3 digits' (1 KB per power of two instead of 8 KB),
/// so the two increments each record makes stay in cache between drains; at 3 digits they were
/// most of the daemon's cost per record (BENCHMARKS.md). The trace keeps every
/// value exact.
const LIVE_HALF: u32 = 7;
const LIVE_SIGFIG: u8 = HdrCounts::<LIVE_HALF>::SIGFIG;

impl Hists {
    fn new() -> Hists {
        // Sizes up to 4 GiB, latencies up to 1 hour (auto-resize beyond).
        let mk = |hi: u64| tracer_common::hdrfast::histogram(hi, LIVE_SIGFIG);
        Hists {
            size_bytes: mk(1 << 32),
            device_latency_ns: mk(tracer_common::hdrfast::LATENCY_HIGHEST_NS),
            total_latency_ns: mk(tracer_common::hdrfast::LATENCY_HIGHEST_NS),
            counts: Default::default(),
        }
    }
    #[inline]
    fn record(&mut self, r: &IoRecord) {
        self.counts[0].record(u64::from(r.bytes).max(1));
        if r.issue_ns != 0 {
            self.counts[1].record(r.device_ns().max(1));
        }
        self.counts[2].record(r.total_ns().max(1));
    }
    /// Move the counted values into the histograms.
    fn settle(&mut self) {
        let [s, d, t] = &mut self.counts;
        s.drain_into(&mut self.size_bytes);
        d.drain_into(&mut self.device_latency_ns);
        t.drain_into(&mut self.total_latency_ns);
    }
    fn reset(&mut self) {
        self.size_bytes.reset();
        self.device_latency_ns.reset();
        self.total_latency_ns.reset();
    }
    fn add(&mut self, o: &Hists) {
        merge(&mut self.size_bytes, &o.size_bytes);
        merge(&mut self.device_latency_ns, &o.device_latency_ns);
        merge(&mut self.total_latency_ns, &o.total_latency_ns);
    }
}

/// An empty histogram at the live precision, resizing itself to any value.
fn live_histogram() -> Histogram<u64> {
    Histogram::new(LIVE_SIGFIG).expect("LIVE_SIGFIG is a valid precision (at most 5)")
}

/// Add `from`'s counts into `into`. Every histogram here resizes itself (`auto(true)`, or
/// `Histogram::new`), so `add` cannot refuse a value; its one other error, a size beyond
/// `usize`, cannot happen on the 64-bit hosts the probe runs on.
fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    let added = into.add(from);
    debug_assert!(
        added.is_ok(),
        "a resizing histogram refused counts: {added:?}"
    );
}

#[derive(Default, Clone, Copy)]
struct Counts {
    ios: u64,
    bytes: u64,
}

/// One device's current interval.
struct DevInterval {
    groups: [Counts; 4],
    hists: BTreeMap<StatGroup, Hists>,
    total_ns_sum: u64,
    max_os_inflight: u32,
    max_dev_inflight: u32,
}

impl DevInterval {
    fn new() -> DevInterval {
        DevInterval {
            groups: [Counts::default(); 4],
            hists: BTreeMap::new(),
            total_ns_sum: 0,
            max_os_inflight: 0,
            max_dev_inflight: 0,
        }
    }
}

#[derive(Serialize)]
pub struct OpRate {
    pub iops: f64,
    pub mb_per_s: f64,
}

#[derive(Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One live line: one device, one interval.
#[derive(Serialize)]
pub struct IntervalLine {
    pub time: String,
    pub t_s: f64,
    pub device: String,
    pub read: OpRate,
    pub write: OpRate,
    pub discard: OpRate,
    pub flush: OpRate,
    /// Device latency (issue to complete) over all ops, microseconds.
    pub device_latency_us: Percentiles,
    /// Total latency (OS queue entry to complete) over all ops, microseconds.
    pub total_latency_us: Percentiles,
    /// Time-weighted mean of requests in the OS (as iostat's aqu-sz), and the most seen at an issue.
    pub queue_depth_mean: f64,
    pub queue_depth_max: u32,
    pub device_inflight_max: u32,
}

pub struct Stats {
    interval: BTreeMap<u32, DevInterval>,
    pub cumulative: BTreeMap<(u32, StatGroup), Hists>,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            interval: BTreeMap::new(),
            cumulative: BTreeMap::new(),
        }
    }

    pub fn record(&mut self, r: &IoRecord) {
        let d = self.interval.entry(r.dev).or_insert_with(DevInterval::new);
        let g = r.stat_group();
        let c = &mut d.groups[g as usize];
        c.ios += 1;
        c.bytes += u64::from(r.bytes);
        d.hists.entry(g).or_insert_with(Hists::new).record(r);
        d.total_ns_sum += r.total_ns();
        d.max_os_inflight = d.max_os_inflight.max(r.os_inflight);
        d.max_dev_inflight = d.max_dev_inflight.max(r.dev_inflight);
    }

    /// Close the interval [start, start+len): live lines for devices with IO, the interval
    /// histograms to the .hlog, and which `triggers` held for a device (described).
    pub fn end_interval(
        &mut self,
        start_wall_ns: i64,
        t_s: f64,
        len_ns: u64,
        name_of: &dyn Fn(u32) -> String,
        hlog: Option<&mut HlogWriter>,
        triggers: &[Trigger],
    ) -> (Vec<IntervalLine>, Vec<String>) {
        let secs = len_ns as f64 / 1e9;
        let mut lines = Vec::new();
        let mut fired = Vec::new();
        let mut hlog = hlog;
        for (&dev, d) in &mut self.interval {
            let ios: u64 = d.groups.iter().map(|c| c.ios).sum();
            if ios == 0 {
                continue;
            }
            let rate = |c: Counts| OpRate {
                iops: c.ios as f64 / secs,
                mb_per_s: c.bytes as f64 / 1e6 / secs,
            };
            let mut dev_lat = live_histogram();
            let mut tot_lat = live_histogram();
            for h in d.hists.values_mut() {
                h.settle();
            }
            for h in d.hists.values() {
                merge(&mut dev_lat, &h.device_latency_ns);
                merge(&mut tot_lat, &h.total_latency_ns);
            }
            let pct = |h: &Histogram<u64>| Percentiles {
                p50: h.value_at_quantile(0.5) as f64 / 1e3,
                p99: h.value_at_quantile(0.99) as f64 / 1e3,
                p999: h.value_at_quantile(0.999) as f64 / 1e3,
                max: h.max() as f64 / 1e3,
            };
            let name = name_of(dev);
            for t in triggers {
                let seen = match t {
                    Trigger::QueueDepth { above, .. } => (d.max_os_inflight > *above)
                        .then(|| format!("{} requests", d.max_os_inflight)),
                    Trigger::Latency {
                        group,
                        total,
                        quantile,
                        above_ns,
                        ..
                    } => {
                        let h = match group {
                            Some(g) => d.hists.get(g).map(|h| {
                                if *total {
                                    &h.total_latency_ns
                                } else {
                                    &h.device_latency_ns
                                }
                            }),
                            None => Some(if *total { &tot_lat } else { &dev_lat }),
                        };
                        h.filter(|h| !h.is_empty())
                            .map(|h| h.value_at_quantile(*quantile))
                            .filter(|v| v > above_ns)
                            .map(|v| format!("{:.3} ms", v as f64 / 1e6))
                    }
                };
                if let Some(v) = seen {
                    fired.push(format!("{name}: {} ({v})", t.text()));
                }
            }
            lines.push(IntervalLine {
                time: tracer_common::format::rfc3339(start_wall_ns),
                t_s,
                device: name.clone(),
                read: rate(d.groups[StatGroup::Read as usize]),
                write: rate(d.groups[StatGroup::Write as usize]),
                discard: rate(d.groups[StatGroup::Discard as usize]),
                flush: rate(d.groups[StatGroup::Flush as usize]),
                device_latency_us: pct(&dev_lat),
                total_latency_us: pct(&tot_lat),
                queue_depth_mean: d.total_ns_sum as f64 / len_ns as f64,
                queue_depth_max: d.max_os_inflight,
                device_inflight_max: d.max_dev_inflight,
            });
            for (&g, h) in &mut d.hists {
                if let Some(w) = hlog.as_deref_mut() {
                    let tag = format!("{name}.{}", g.name());
                    w.write(
                        &format!("{tag}.size_bytes"),
                        start_wall_ns,
                        len_ns,
                        &h.size_bytes,
                    );
                    w.write(
                        &format!("{tag}.device_latency_ns"),
                        start_wall_ns,
                        len_ns,
                        &h.device_latency_ns,
                    );
                    w.write(
                        &format!("{tag}.total_latency_ns"),
                        start_wall_ns,
                        len_ns,
                        &h.total_latency_ns,
                    );
                }
                self.cumulative
                    .entry((dev, g))
                    .or_insert_with(Hists::new)
                    .add(h);
                h.reset();
            }
            d.groups = [Counts::default(); 4];
            d.total_ns_sum = 0;
            d.max_os_inflight = 0;
            d.max_dev_inflight = 0;
        }
        (lines, fired)
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

/// The value at quantile `q` of a probe histogram ([`tracer_common::loglin_le_bucket`]s): the
/// upper bound of the bucket holding it, as HdrHistogram reports its highest equivalent value.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "q is a quantile level in 0..=1, so q * n is in 0..=n; the rank is clamped to 1..=n"
)]
pub fn loglin_quantile(h: &[u64], q: f64) -> u64 {
    let n: u64 = h.iter().sum();
    if n == 0 {
        return 0;
    }
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    let mut seen = 0;
    for (i, &c) in h.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return tracer_common::loglin_lower(i + 1);
        }
    }
    tracer_common::loglin_lower(h.len())
}

/// `--no-records`: an interval's live lines from the change in the probe's aggregates.
/// `inflight(dev)`: the device's requests in flight now (the queue depth columns have only
/// this sample).
pub fn aggregate_lines(
    prev: &[AggregateSnapshot],
    now: &[AggregateSnapshot],
    start_wall_ns: i64,
    t_s: f64,
    len_ns: u64,
    name_of: &dyn Fn(u32) -> String,
    inflight: &dyn Fn(u32) -> u32,
) -> Vec<IntervalLine> {
    #[derive(Default)]
    struct Dev {
        groups: [Counts; 4],
        device: Vec<u64>,
        total: Vec<u64>,
        total_ns_sum: u64,
    }
    let sub = |a: &[u64], b: Option<&[u64]>, into: &mut Vec<u64>| {
        if into.len() < a.len() {
            into.resize(a.len(), 0);
        }
        for (i, &v) in a.iter().enumerate() {
            let before = b.and_then(|b| b.get(i)).copied().unwrap_or(0);
            into[i] += v.saturating_sub(before);
        }
    };
    let mut devs: BTreeMap<u32, Dev> = BTreeMap::new();
    for a in now {
        let p = prev.iter().find(|p| {
            (p.major, p.minor, p.op, p.flush_rq, p.not_accounted)
                == (a.major, a.minor, a.op, a.flush_rq, a.not_accounted)
        });
        let ios = a.ios.saturating_sub(p.map_or(0, |p| p.ios));
        if ios == 0 {
            continue;
        }
        let d = devs
            .entry(tracer_common::dev_join(a.major, a.minor))
            .or_default();
        let c = &mut d.groups[a.group() as usize];
        c.ios += ios;
        c.bytes += a.bytes.saturating_sub(p.map_or(0, |p| p.bytes));
        d.total_ns_sum += a
            .total_ns_sum
            .saturating_sub(p.map_or(0, |p| p.total_ns_sum));
        sub(
            &a.device_latency,
            p.map(|p| &p.device_latency[..]),
            &mut d.device,
        );
        sub(
            &a.total_latency,
            p.map(|p| &p.total_latency[..]),
            &mut d.total,
        );
    }
    let secs = len_ns as f64 / 1e9;
    let rate = |c: Counts| OpRate {
        iops: c.ios as f64 / secs,
        mb_per_s: c.bytes as f64 / 1e6 / secs,
    };
    let pct = |h: &[u64]| {
        let max = h
            .iter()
            .rposition(|&c| c != 0)
            .map_or(0, |i| tracer_common::loglin_lower(i + 1));
        Percentiles {
            p50: loglin_quantile(h, 0.5) as f64 / 1e3,
            p99: loglin_quantile(h, 0.99) as f64 / 1e3,
            p999: loglin_quantile(h, 0.999) as f64 / 1e3,
            max: max as f64 / 1e3,
        }
    };
    devs.iter()
        .map(|(&dev, d)| {
            let q = inflight(dev);
            IntervalLine {
                time: tracer_common::format::rfc3339(start_wall_ns),
                t_s,
                device: name_of(dev),
                read: rate(d.groups[StatGroup::Read as usize]),
                write: rate(d.groups[StatGroup::Write as usize]),
                discard: rate(d.groups[StatGroup::Discard as usize]),
                flush: rate(d.groups[StatGroup::Flush as usize]),
                device_latency_us: pct(&d.device),
                total_latency_us: pct(&d.total),
                queue_depth_mean: d.total_ns_sum as f64 / len_ns.max(1) as f64,
                queue_depth_max: q,
                device_inflight_max: 0,
            }
        })
        .collect()
}

pub fn print_header(out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<8} {:<10} {:>9} {:>8} {:>9} {:>8} {:>7} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
        "time",
        "device",
        "r/s",
        "rMB/s",
        "w/s",
        "wMB/s",
        "d/s",
        "dMB/s",
        "f/s",
        "p50_us",
        "p99_us",
        "p99.9_us",
        "max_us",
        "qd_avg",
        "qd_max"
    )
}

pub fn print_line(out: &mut dyn Write, l: &IntervalLine) -> std::io::Result<()> {
    let hms = l.time.get(11..19).unwrap_or("");
    writeln!(
        out,
        "{:<8} {:<10} {:>9.0} {:>8.1} {:>9.0} {:>8.1} {:>7.0} {:>8.1} {:>6.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>7.2} {:>6}",
        hms,
        l.device,
        l.read.iops,
        l.read.mb_per_s,
        l.write.iops,
        l.write.mb_per_s,
        l.discard.iops,
        l.discard.mb_per_s,
        l.flush.iops,
        l.device_latency_us.p50,
        l.device_latency_us.p99,
        l.device_latency_us.p999,
        l.device_latency_us.max,
        l.queue_depth_mean,
        l.queue_depth_max,
    )
}

/// Writes an HdrHistogram interval log (.hlog, format 1.3) that standard readers
/// (`HistogramLogReader`, `HistogramLogAnalyzer`, hdrhistogram's `IntervalLogIterator`) read.
pub struct HlogWriter {
    out: std::io::BufWriter<std::fs::File>,
    serializer: V2DeflateSerializer,
    buf: Vec<u8>,
    base_wall_ns: i64,
    pub error: Option<std::io::Error>,
}

impl HlogWriter {
    /// The log written to `file` (created by the caller).
    pub fn on_file(file: std::fs::File, base_wall_ns: i64) -> std::io::Result<HlogWriter> {
        let mut out = std::io::BufWriter::new(file);
        let secs = base_wall_ns as f64 / 1e9;
        writeln!(
            out,
            "#[blkprof-trace {}: tags are DEVICE.OP.METRIC; values in ns or bytes]",
            tracer_common::VERSION
        )?;
        writeln!(out, "#[Histogram log format version 1.3]")?;
        writeln!(
            out,
            "#[StartTime: {secs:.3} (seconds since epoch), {}]",
            tracer_common::format::rfc3339(base_wall_ns)
        )?;
        writeln!(out, "#[BaseTime: {secs:.3} (seconds since epoch)]")?;
        writeln!(
            out,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )?;
        Ok(HlogWriter {
            out,
            serializer: V2DeflateSerializer::new(),
            buf: Vec::new(),
            base_wall_ns,
            error: None,
        })
    }

    pub fn write(&mut self, tag: &str, start_wall_ns: i64, len_ns: u64, h: &Histogram<u64>) {
        if h.is_empty() || self.error.is_some() {
            return;
        }
        self.buf.clear();
        if let Err(e) = self.serializer.serialize(h, &mut self.buf) {
            self.error = Some(std::io::Error::other(format!("{e:?}")));
            return;
        }
        let start = (start_wall_ns - self.base_wall_ns) as f64 / 1e9;
        let r = writeln!(
            self.out,
            "Tag={tag},{start:.3},{:.3},{:.3},{}",
            len_ns as f64 / 1e9,
            h.max() as f64 / 1e9,
            BASE64.encode(&self.buf)
        );
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    #[test]
    fn hlog_reads_back_with_hdrhistograms_own_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.hlog");
        let mut w = HlogWriter::on_file(
            std::fs::File::create(&path).unwrap(),
            1_700_000_000_000_000_000,
        )
        .unwrap();
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in [1000u64, 2000, 3000, 1_000_000] {
            h.record(v).unwrap();
        }
        w.write(
            "loop0.read.device_latency_ns",
            1_700_000_001_000_000_000,
            1_000_000_000,
            &h,
        );
        w.flush().unwrap();
        let text = std::fs::read(&path).unwrap();
        let mut n = 0;
        let mut deser = hdrhistogram::serialization::Deserializer::new();
        for e in IntervalLogIterator::new(&text) {
            if let Ok(LogEntry::Interval(i)) = e {
                n += 1;
                assert_eq!(i.tag().unwrap().as_str(), "loop0.read.device_latency_ns");
                let bytes = BASE64.decode(i.encoded_histogram()).unwrap();
                let back: Histogram<u64> = deser.deserialize(&mut &bytes[..]).unwrap();
                assert_eq!(back.len(), 4);
                assert_eq!(back.max(), h.max());
            }
        }
        assert_eq!(n, 1);
    }
}
