//! Workload shape (after Open-CAS iotrace and biopattern): per device, the workset (distinct
//! bytes read, written, and either), the write invalidation factor (bytes written / distinct
//! bytes written: how often each written byte was written, on average) and where on the device
//! the IOs land (an LBA histogram). The sequential share per op is the access pattern's.
//!
//! The workset is a set of disjoint sector intervals, fed a batch at a time (sorted, then
//! merged), with consecutive IOs that continue each other joined before that. Memory is
//! bounded: above [`CAP`] intervals per device and op the smallest gaps between them are closed
//! and counted as touched, and the report says by how much the workset may be too large.

use std::fmt::Write as _;
use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::op::Op;

use super::{Names, Section, SectionDef};
use crate::html::escape;
use crate::series::Options;

pub const DEF: SectionDef = SectionDef {
    name: "workload_shape",
    new,
    text,
    html,
};

/// Intervals kept per device and op before gaps are closed (16 bytes each: 16 MiB).
const CAP: usize = 1 << 20;
/// IOs gathered before they are merged into the set (at least as many as it holds, so that
/// merging costs O(1) per IO).
const BATCH: usize = 1 << 16;
/// Bins of the LBA histogram over the touched range.
const LBA_BINS: u64 = 64;
/// Fine bins kept while reading: the touched range is known only at the end, so IOs are
/// counted in FINE bins over [0, 2^k sectors), k growing as IOs land higher, and the 64 bins
/// are made of whole fine bins.
const FINE: usize = 4096;

const OPS: [(Op, &str); 2] = [(Op::Read, "read"), (Op::Write, "write")];

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    /// Intervals kept per device and op before the smallest gaps are closed.
    cap_intervals: usize,
    devices: Vec<DeviceModel>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct DeviceModel {
    name: String,
    /// Distinct bytes read or written.
    workset_bytes: u64,
    /// Bytes written / distinct bytes written (0 without writes).
    write_invalidation_factor: f64,
    /// Whether gaps were closed to bound memory; the worksets are then at most
    /// `workset_over_bytes` too large (never too small).
    approximate: bool,
    workset_over_bytes: u64,
    ops: Vec<OpModel>,
    lba: LbaModel,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct OpModel {
    op: String,
    ios: u64,
    bytes: u64,
    /// Distinct bytes of this op.
    workset_bytes: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct LbaModel {
    /// The bins' range: the touched range, widened to the fine bins' edges.
    start_bytes: u64,
    end_bytes: u64,
    bin_bytes: u64,
    /// IOs (and their bytes) by the bin of their first sector.
    bins: Vec<LbaBin>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct LbaBin {
    start_bytes: u64,
    read_ios: u64,
    read_bytes: u64,
    write_ios: u64,
    write_bytes: u64,
}

/// Distinct sectors touched: disjoint [start, end) intervals sorted by start, plus IOs not
/// merged in yet.
struct Extents {
    set: Vec<(u64, u64)>,
    pending: Vec<(u64, u64)>,
    cap: usize,
    /// Sectors of the gaps closed to stay under `cap`: the set is at most this too large.
    over_sectors: u64,
}

/// The union of two lists of intervals sorted by start, as disjoint sorted intervals.
fn union(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    loop {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 <= y.0 => {
                i += 1;
                *x
            }
            (_, Some(y)) => {
                j += 1;
                *y
            }
            (Some(x), None) => {
                i += 1;
                *x
            }
            (None, None) => break,
        };
        match out.last_mut() {
            Some(l) if next.0 <= l.1 => l.1 = l.1.max(next.1),
            _ => out.push(next),
        }
    }
    out
}

/// Bytes of disjoint intervals (saturating: a damaged file's sectors may be anywhere).
fn bytes(set: &[(u64, u64)]) -> u64 {
    set.iter()
        .map(|(s, e)| e - s)
        .fold(0u64, u64::saturating_add)
        .saturating_mul(512)
}

impl Extents {
    fn new(cap: usize) -> Extents {
        Extents {
            set: Vec::new(),
            pending: Vec::new(),
            cap: cap.max(2),
            over_sectors: 0,
        }
    }

    #[inline]
    fn add(&mut self, start: u64, end: u64) {
        if let Some(l) = self.pending.last_mut()
            && start >= l.0
            && start <= l.1
        {
            l.1 = l.1.max(end);
            return;
        }
        self.pending.push((start, end));
        if self.pending.len() >= BATCH.max(self.set.len()) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.pending.sort_unstable_by_key(|x| x.0);
        self.set = union(&self.set, &self.pending);
        self.pending.clear();
        if self.set.len() > self.cap {
            self.coarsen();
        }
    }

    /// Close the smallest gaps until half the cap is left.
    fn coarsen(&mut self) {
        let mut gaps: Vec<u64> = self.set.windows(2).map(|w| w[1].0 - w[0].1).collect();
        let close = self.set.len() - self.cap / 2;
        let (_, &mut limit, _) = gaps.select_nth_unstable(close - 1);
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.cap);
        for &(s, e) in &self.set {
            match out.last_mut() {
                Some(l) if s - l.1 <= limit => {
                    self.over_sectors += s - l.1;
                    l.1 = e;
                }
                _ => out.push((s, e)),
            }
        }
        self.set = out;
    }
}

struct Device {
    dev: u32,
    ext: [Extents; 2],
    ios: [u64; 2],
    bytes: [u64; 2],
    /// Touched sectors: [lo, hi).
    lo: u64,
    hi: u64,
    /// Fine bin i holds first sectors [i << shift, (i + 1) << shift): per op IOs and bytes.
    shift: u32,
    fine: Vec<[u64; 4]>,
}

impl Device {
    fn new(dev: u32, cap: usize) -> Device {
        Device {
            dev,
            ext: [Extents::new(cap), Extents::new(cap)],
            ios: [0; 2],
            bytes: [0; 2],
            lo: u64::MAX,
            hi: 0,
            shift: 0,
            fine: vec![[0; 4]; FINE],
        }
    }

    /// Halve the fine bins' resolution (double their range).
    fn fold(&mut self) {
        for i in 0..FINE / 2 {
            let (a, b) = (self.fine[2 * i], self.fine[2 * i + 1]);
            self.fine[i] = [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]];
        }
        self.fine[FINE / 2..].fill([0; 4]);
        self.shift += 1;
    }

    fn lba(&self) -> LbaModel {
        if self.hi <= self.lo {
            return LbaModel::default();
        }
        let lo_f = self.lo >> self.shift;
        let hi_f = ((self.hi - 1) >> self.shift).min(FINE as u64 - 1).max(lo_f);
        let nf = hi_f - lo_f + 1;
        let per = nf.div_ceil(LBA_BINS);
        // Offsets of a damaged file's sectors may pass 2^64 bytes: saturate.
        let at =
            |fine: u64| u64::try_from(u128::from(fine) << (self.shift + 9)).unwrap_or(u64::MAX);
        let bins = (0..nf.div_ceil(per))
            .map(|k| {
                let from = lo_f + k * per;
                let to = (from + per).min(hi_f + 1);
                let mut b = LbaBin {
                    start_bytes: at(from),
                    ..LbaBin::default()
                };
                for f in &self.fine[from as usize..to as usize] {
                    b.read_ios += f[0];
                    b.read_bytes += f[1];
                    b.write_ios += f[2];
                    b.write_bytes += f[3];
                }
                b
            })
            .collect();
        LbaModel {
            start_bytes: at(lo_f),
            end_bytes: at(hi_f + 1),
            bin_bytes: at(per),
            bins,
        }
    }
}

struct Shape {
    devices: Vec<Device>,
    last: usize,
    cap: usize,
}

fn new(_: &Options) -> Box<dyn Section> {
    Box::new(Shape {
        devices: Vec::new(),
        last: 0,
        cap: CAP,
    })
}

impl Section for Shape {
    fn chunk(&mut self, records: &[IoRecord]) {
        for r in records {
            let k = match r.op {
                Op::Read => 0,
                Op::Write => 1,
                _ => continue,
            };
            if r.bytes == 0 {
                continue;
            }
            if self.devices.get(self.last).is_none_or(|d| d.dev != r.dev) {
                self.last = match self.devices.iter().position(|d| d.dev == r.dev) {
                    Some(i) => i,
                    None => {
                        self.devices.push(Device::new(r.dev, self.cap));
                        self.devices.len() - 1
                    }
                };
            }
            let d = &mut self.devices[self.last];
            let bytes = u64::from(r.bytes);
            let end = r.sector.saturating_add(bytes.div_ceil(512));
            d.ios[k] += 1;
            d.bytes[k] += bytes;
            d.lo = d.lo.min(r.sector);
            d.hi = d.hi.max(end);
            d.ext[k].add(r.sector, end);
            while (r.sector >> d.shift) >= FINE as u64 {
                d.fold();
            }
            let f = &mut d.fine[(r.sector >> d.shift) as usize];
            f[2 * k] += 1;
            f[2 * k + 1] += bytes;
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        let mut devices: Vec<DeviceModel> = self
            .devices
            .into_iter()
            .map(|mut d| {
                for e in &mut d.ext {
                    e.flush();
                }
                let all = union(&d.ext[0].set, &d.ext[1].set);
                let over = d.ext[0].over_sectors.saturating_add(d.ext[1].over_sectors);
                let write_set = bytes(&d.ext[1].set);
                let ops = OPS
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| d.ios[*k] > 0)
                    .map(|(k, (_, name))| OpModel {
                        op: (*name).to_string(),
                        ios: d.ios[k],
                        bytes: d.bytes[k],
                        workset_bytes: bytes(&d.ext[k].set),
                    })
                    .collect();
                DeviceModel {
                    name: (cx.device)(d.dev),
                    workset_bytes: bytes(&all),
                    write_invalidation_factor: if write_set == 0 {
                        0.0
                    } else {
                        d.bytes[1] as f64 / write_set as f64
                    },
                    approximate: over > 0,
                    workset_over_bytes: over.saturating_mul(512),
                    ops,
                    lba: d.lba(),
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model {
            cap_intervals: self.cap,
            devices,
        })
        .unwrap_or(Value::Null)
    }
}

fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

/// One character per bin, its height the bin's IOs against the busiest bin's.
fn sparkline(bins: &[LbaBin]) -> String {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let n = |b: &LbaBin| b.read_ios + b.write_ios;
    let top = bins.iter().map(n).max().unwrap_or(0).max(1);
    bins.iter()
        .map(|b| {
            let x = n(b);
            // Any IO shows (at least the lowest bar).
            BARS[if x == 0 {
                0
            } else {
                (x * 8).div_ceil(top) as usize
            }]
        })
        .collect()
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    let h = crate::text::bytes;
    writeln!(
        out,
        "\nworkload shape (workset: distinct bytes touched; write invalidation: bytes written / distinct bytes written; sequential share: see access pattern):"
    )?;
    for d in &m.devices {
        let ops: Vec<String> = d
            .ops
            .iter()
            .map(|o| format!("{} {}", o.op, h(o.workset_bytes)))
            .collect();
        write!(
            out,
            "  {:<12} workset {} ({}), write invalidation factor {:.2}",
            d.name,
            h(d.workset_bytes),
            ops.join(", "),
            d.write_invalidation_factor
        )?;
        if d.approximate {
            write!(
                out,
                " (approximate: at most {} too large)",
                h(d.workset_over_bytes)
            )?;
        }
        writeln!(out)?;
        if !d.lba.bins.is_empty() {
            writeln!(
                out,
                "  {:<12} IOs by offset, {} bins of {} from {} to {}: |{}|",
                "",
                d.lba.bins.len(),
                crate::sizes::human(d.lba.bin_bytes),
                h(d.lba.start_bytes),
                h(d.lba.end_bytes),
                sparkline(&d.lba.bins)
            )?;
        }
    }
    Ok(())
}

fn html(v: &Value, out: &mut String) -> std::fmt::Result {
    let Some(m) = model(v) else { return Ok(()) };
    let h = |b: u64| escape(&crate::text::bytes(b));
    out.push_str(
        "<h3>Workload shape</h3><p>Workset: distinct bytes touched. Write invalidation factor: bytes written / distinct bytes written (how often each written byte was written). Sequential share: see Access pattern.</p>\
<table><tr><th class='l'>device</th><th>workset</th><th>read workset</th><th>write workset</th><th>bytes written</th><th>write invalidation factor</th><th class='l'>note</th></tr>",
    );
    for d in &m.devices {
        let ws = |op: &str| {
            d.ops
                .iter()
                .find(|o| o.op == op)
                .map_or(0, |o| o.workset_bytes)
        };
        let written = d
            .ops
            .iter()
            .find(|o| o.op == "write")
            .map_or(0, |o| o.bytes);
        write!(
            out,
            "<tr><td class='l'>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td class='l'>{}</td></tr>",
            escape(&d.name),
            h(d.workset_bytes),
            h(ws("read")),
            h(ws("write")),
            h(written),
            d.write_invalidation_factor,
            if d.approximate {
                format!("approximate: at most {} too large", h(d.workset_over_bytes))
            } else {
                String::new()
            }
        )?;
    }
    out.push_str("</table>");
    for d in m.devices.iter().filter(|d| !d.lba.bins.is_empty()) {
        let top = d
            .lba
            .bins
            .iter()
            .map(|b| b.read_ios + b.write_ios)
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        write!(
            out,
            "<p>{}: IOs by offset (bins of {} from {} to {}; reads blue, writes orange)</p><svg width='640' height='80' role='img'>",
            escape(&d.name),
            escape(&crate::sizes::human(d.lba.bin_bytes)),
            h(d.lba.start_bytes),
            h(d.lba.end_bytes)
        )?;
        for (i, b) in d.lba.bins.iter().enumerate() {
            let x = i * 10;
            let rh = b.read_ios as f64 * 80.0 / top;
            let wh = b.write_ios as f64 * 80.0 / top;
            write!(
                out,
                "<rect x='{x}' y='{:.1}' width='9' height='{rh:.1}' fill='#4e79a7'><title>{}: {} reads</title></rect><rect x='{x}' y='{:.1}' width='9' height='{wh:.1}' fill='#f28e2b'><title>{}: {} writes</title></rect>",
                80.0 - rh,
                h(b.start_bytes),
                b.read_ios,
                80.0 - rh - wh,
                h(b.start_bytes),
                b.write_ios
            )?;
        }
        out.push_str("</svg>");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_count_distinct_sectors_and_bound_memory() {
        let mut e = Extents::new(1 << 20);
        // Overlaps, repeats, adjacency, out of order.
        for (s, x) in [
            (100, 108),
            (104, 116),
            (0, 8),
            (100, 108),
            (116, 120),
            (50, 51),
        ] {
            e.add(s, x);
        }
        e.flush();
        assert_eq!(e.set, vec![(0, 8), (50, 51), (100, 120)]);
        assert_eq!(bytes(&e.set), 29 * 512);
        // 1,000 IOs of 8 sectors 16 apart: a cap of 100 intervals closes gaps of 8, and
        // says by how much the count is over.
        let mut e = Extents::new(100);
        for i in 0..1000u64 {
            e.add(i * 16, i * 16 + 8);
        }
        e.flush();
        assert!(e.set.len() <= 100, "{}", e.set.len());
        let counted = bytes(&e.set) / 512;
        assert_eq!(counted - e.over_sectors, 8000);
        assert!(e.over_sectors > 0);
    }
}
