//! One streaming pass over trace files: per device and op, counts, bytes, size classes and
//! latency histograms; the tracer's own loss counters; coverage against /proc/diskstats.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde::Serialize;
use tracer_common::coverage::{DeviceCoverage, coverage};
use tracer_common::format::{Ending, FormatError, TraceHeader, TraceReader, TraceTrailer, rfc3339};
use tracer_common::op::{Op, StatGroup, flags};

use crate::sizes::SizeClass;

/// Version of the JSON document `blkprof report --json` prints (docs/report-json.md).
pub const REPORT_SCHEMA_VERSION: u32 = 1;

pub struct OpStats {
    pub ios: u64,
    pub bytes: u64,
    pub sizes: BTreeMap<SizeClass, (u64, u64)>,
    pub device_latency_ns: Histogram<u64>,
    pub total_latency_ns: Histogram<u64>,
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
        OpStats { ios: 0, bytes: 0, sizes: BTreeMap::new(), device_latency_ns: h(), total_latency_ns: h(), readahead_bytes: 0, errors: 0 }
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
    /// Empty flush requests absorbed by the flush machinery (never reach the device; the kernel
    /// counts them as 0-byte reads in /proc/diskstats).
    pub absorbed_flushes: u64,
}

/// Everything the report needs from one or more trace files of one run.
pub struct Summary {
    pub paths: Vec<PathBuf>,
    pub header: TraceHeader,
    pub trailer: Option<TraceTrailer>,
    pub endings: Vec<(PathBuf, Ending)>,
    pub devices: BTreeMap<u32, DeviceStats>,
    pub records: u64,
    pub coverage: Vec<DeviceCoverage>,
}

/// The report's name for an op group.
pub fn op_key(op: Op, fl: u16) -> String {
    match StatGroup::of(op, fl) {
        StatGroup::Flush => "flush".into(),
        _ if op == Op::Flush => "flush-absorbed".into(),
        _ => op.name().into(),
    }
}

pub fn summarize(path: &Path) -> Result<Summary, FormatError> {
    let mut r = TraceReader::open(path)?;
    let header = r.header().clone();
    let mut devices: BTreeMap<u32, DeviceStats> = BTreeMap::new();
    let mut buf = Vec::new();
    let mut records = 0u64;
    while r.next_chunk(&mut buf)? {
        for rec in &buf {
            records += 1;
            let d = devices.entry(rec.dev).or_insert_with(|| {
                let (major, minor) = tracer_common::dev_split(rec.dev);
                DeviceStats {
                    name: format!("{major}:{minor}"),
                    major,
                    minor,
                    ops: BTreeMap::new(),
                    first_ns: rec.enter_ns,
                    last_ns: rec.complete_ns,
                    max_os_inflight: 0,
                    absorbed_flushes: 0,
                }
            });
            d.first_ns = d.first_ns.min(rec.enter_ns);
            d.last_ns = d.last_ns.max(rec.complete_ns);
            d.max_os_inflight = d.max_os_inflight.max(rec.os_inflight);
            let key = op_key(rec.op, rec.flags);
            if key == "flush-absorbed" {
                d.absorbed_flushes += 1;
                continue;
            }
            let o = d.ops.entry(key).or_insert_with(OpStats::new);
            o.ios += 1;
            o.bytes += u64::from(rec.bytes);
            let e = o.sizes.entry(SizeClass::of(u64::from(rec.bytes))).or_default();
            e.0 += 1;
            e.1 += u64::from(rec.bytes);
            if rec.issue_ns != 0 {
                let _ = o.device_latency_ns.record(rec.device_ns().max(1));
            }
            let _ = o.total_latency_ns.record(rec.total_ns().max(1));
            if rec.flags & flags::RAHEAD != 0 {
                o.readahead_bytes += u64::from(rec.bytes);
            }
            if rec.error != 0 {
                o.errors += 1;
            }
        }
    }
    for d in r.devices() {
        if let Some(s) = devices.get_mut(&d.dev()) {
            s.name = d.name.clone();
        }
    }
    let trailer = r.trailer().cloned();
    let cov = trailer.as_ref().map(|t| coverage(&header, t)).unwrap_or_default();
    Ok(Summary {
        paths: vec![path.to_owned()],
        header,
        trailer,
        endings: vec![(path.to_owned(), r.ending().clone())],
        devices,
        records,
        coverage: cov,
    })
}

/// What the trace knows it missed.
#[derive(Serialize, Default, Clone, Debug, PartialEq, Eq)]
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

impl Summary {
    pub fn lost(&self) -> Lost {
        let c = self.trailer.as_ref().map(|t| t.counters_end.clone()).unwrap_or_default();
        let c0 = &self.header.counters_start;
        let drops = c.ring_drops.saturating_sub(c0.ring_drops);
        let missed = c.missed_completions.saturating_sub(c0.missed_completions);
        let rec = c.recursion_misses().saturating_sub(c0.recursion_misses());
        let untracked = c.request_map_full.saturating_sub(c0.request_map_full);
        let reported = missed + rec + untracked;
        let unaccounted: u64 = self.coverage.iter().flat_map(|d| d.groups.iter()).map(|g| g.unaccounted(reported)).sum();
        Lost {
            total: drops + missed + rec + untracked + unaccounted,
            ring_drops: drops,
            missed_completions: missed,
            recursion_misses: rec,
            untracked,
            unaccounted,
            filtered_out: self.trailer.as_ref().map_or(0, |t| t.filtered_out),
        }
    }

    pub fn wall(&self, mono_ns: u64) -> String {
        let off = mono_ns as i128 - self.header.monotonic_base_ns as i128;
        rfc3339((self.header.wall_clock_start_ns as i128 + off) as i64)
    }
}

#[derive(Serialize)]
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

#[derive(Serialize)]
pub struct JsonSize {
    pub class: String,
    pub pct_ios: f64,
    pub ios: u64,
    pub bytes: u64,
}

#[derive(Serialize)]
pub struct JsonLatency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

impl JsonLatency {
    pub fn of(h: &Histogram<u64>) -> JsonLatency {
        let q = |p: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(p) as f64 / 1e3 };
        JsonLatency { p50: q(0.5), p90: q(0.9), p99: q(0.99), p999: q(0.999), p9999: q(0.9999), max: h.max() as f64 / 1e3 }
    }
}

#[derive(Serialize)]
pub struct JsonDevice {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub start: String,
    pub end: String,
    pub ops: BTreeMap<String, JsonOp>,
    pub absorbed_flushes: u64,
    pub coverage: Option<DeviceCoverage>,
    pub bursts: Vec<serde_json::Value>,
}

#[derive(Serialize)]
pub struct JsonReport {
    pub schema_version: u32,
    pub traces: Vec<String>,
    pub host: String,
    pub kernel: String,
    pub start: String,
    pub records: u64,
    pub complete: bool,
    pub devices: Vec<JsonDevice>,
    pub markers: Vec<serde_json::Value>,
    pub lost: Lost,
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
                    .map(|(c, (n, b))| JsonSize { class: c.label(), pct_ios: *n as f64 * 100.0 / o.ios.max(1) as f64, ios: *n, bytes: *b })
                    .collect();
                sizes.sort_by(|a, b| b.ios.cmp(&a.ios));
                ops.insert(k.clone(), JsonOp {
                    ios: o.ios,
                    bytes: o.bytes,
                    pct_ios: o.ios as f64 * 100.0 / tot_ios as f64,
                    pct_bytes: o.bytes as f64 * 100.0 / tot_bytes as f64,
                    block_sizes: sizes,
                    device_latency_us: JsonLatency::of(&o.device_latency_ns),
                    total_latency_us: JsonLatency::of(&o.total_latency_ns),
                    readahead_bytes: o.readahead_bytes,
                    errors: o.errors,
                });
            }
            for k in ["read", "write", "discard", "flush"] {
                if !ops.contains_key(k) {
                    let o = OpStats::new();
                    ops.insert(k.into(), JsonOp {
                        ios: 0, bytes: 0, pct_ios: 0.0, pct_bytes: 0.0, block_sizes: Vec::new(),
                        device_latency_us: JsonLatency::of(&o.device_latency_ns), total_latency_us: JsonLatency::of(&o.total_latency_ns),
                        readahead_bytes: 0, errors: 0,
                    });
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
                coverage: self.coverage.iter().find(|c| c.major == d.major && c.minor == d.minor).cloned(),
                bursts: Vec::new(),
            });
        }
        JsonReport {
            schema_version: REPORT_SCHEMA_VERSION,
            traces: self.paths.iter().map(|p| p.display().to_string()).collect(),
            host: self.header.host.clone(),
            kernel: self.header.kernel.clone(),
            start: rfc3339(self.header.wall_clock_start_ns),
            records: self.records,
            complete: self.endings.iter().all(|(_, e)| *e == Ending::Complete),
            devices,
            markers: Vec::new(),
            lost: self.lost(),
        }
    }
}
