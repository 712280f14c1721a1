//! Workload shape (after Open-CAS iotrace and biopattern): per device, the workset (distinct
//! bytes read, written, and either), the write invalidation factor (bytes written / distinct
//! bytes written: how often each written byte was written, on average) and where on the device
//! the IOs land (an LBA histogram). The sequential share per op is the access pattern's.
//!
//! Worksets count distinct 4 KiB blocks, by spatial sampling (after SHARDS, Waldspurger et
//! al., FAST '15): the device is cut into regions of [`REGION_BLOCKS`] blocks (1 MiB), a
//! region is in the sample when a hash of its number is at most a threshold, and a sampled
//! region keeps one bit per block and op. While at most [`MAX_REGIONS`] regions are touched
//! every region is in the sample and the counts are exact; past that the threshold is lowered
//! (the regions above it are dropped) so that half as many stay, and a count is the sample's
//! divided by the rate. The write invalidation factor is the sample's blocks written over its
//! distinct blocks written. Cost per IO: a hash per region it touches and, for the few in the
//! sample, a map lookup; memory: at most [`MAX_REGIONS`] regions (about 1.3 MB) per device. An
//! exact count over a large random workload misses the cache on every IO instead (measured:
//! three times the whole report's time on the 50 M-IO bench trace).

use std::collections::HashMap;
use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::IoRecord;
use tracer_common::op::Op;

use super::{Names, Section, SectionDef};
use crate::analysis::per_device::index;
use crate::analysis::series::Options;

pub(super) const DEF: SectionDef = SectionDef {
    name: "workload_shape",
    new,
    text,
    html,
};

/// Sectors per block (4 KiB).
const BLOCK_SHIFT: u32 = 3;
/// Blocks per region (1 MiB), one bit each per op.
const REGION_BLOCKS: u64 = 256;
const REGION_WORDS: usize = (REGION_BLOCKS / 64) as usize;
/// Sectors per region, as a shift.
const REGION_SHIFT: u32 = BLOCK_SHIFT + 8;
/// Sampled regions per device before the rate is halved (or so).
const MAX_REGIONS: usize = 1 << 13;
/// Regions of one IO counted (64 MiB): a larger read or write is a damaged file's.
const MAX_IO_REGIONS: u64 = 64;
/// Bins of the LBA histogram over the touched range.
const LBA_BINS: usize = 64;
/// Fine bins kept while reading: the touched range is known only at the end, so IOs are
/// counted in FINE bins over [0, 2^k sectors), k growing as IOs land higher, and the 64 bins
/// are made of whole fine bins (1,024 of 32 bytes: they stay in the L1 cache).
const FINE: usize = 1024;

const OPS: [(Op, &str); 2] = [(Op::Read, "read"), (Op::Write, "write")];

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Model {
    /// Bytes of a block (the workset counts whole blocks).
    block_bytes: u64,
    /// Bytes of a region, the unit of the sample.
    region_bytes: u64,
    /// Regions per device sampled before the rate is lowered.
    max_regions: usize,
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
    /// Whether the worksets (and so the invalidation factor) are exact: every touched region
    /// was sampled.
    exact: bool,
    /// Percent of the device's regions in the sample (100 when exact).
    sampled_pct: f64,
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

/// A sampled region: its blocks read and written, and the blocks its writes wrote.
#[derive(Default)]
struct Region {
    blocks: [[u64; REGION_WORDS]; 2],
    written_blocks: u64,
}

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A 64-bit mix (splitmix64's finalizer), a bijection: every input bit moves every output bit.
#[inline]
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The sampled regions of one device, by the hash of their number (a bijection: no two
/// regions share a key).
struct Sample {
    regions: HashMap<u64, Region, std::hash::BuildHasherDefault<Prehashed>>,
    /// Regions whose hash is at most this are in the sample.
    threshold: u64,
}

impl Default for Sample {
    fn default() -> Self {
        Sample {
            regions: HashMap::default(),
            threshold: u64::MAX,
        }
    }
}

impl Sample {
    /// An IO of op `k` over sectors [start, end).
    #[inline]
    fn add(&mut self, k: usize, start: u64, end: u64) {
        let (first, last) = (start >> REGION_SHIFT, (end - 1) >> REGION_SHIFT);
        // Half-open (a sector number >> REGION_SHIFT leaves room for + 1): an inclusive
        // range costs a check per step.
        let stop = last.min(first + MAX_IO_REGIONS - 1) + 1;
        for r in first..stop {
            let h = mix(r);
            if h > self.threshold {
                continue;
            }
            let base = r << REGION_SHIFT;
            let b0 = (start.max(base) - base) >> BLOCK_SHIFT;
            let b1 =
                ((end.min(base.saturating_add(1 << REGION_SHIFT)) - base - 1) >> BLOCK_SHIFT) + 1;
            let region = self.regions.entry(h).or_default();
            set_bits(&mut region.blocks[k], b0, b1);
            if k == 1 {
                region.written_blocks += b1 - b0;
            }
            if self.regions.len() > MAX_REGIONS {
                self.halve();
            }
        }
    }

    /// Keep the half of the regions with the lowest hashes.
    fn halve(&mut self) {
        let mut hashes: Vec<u64> = self.regions.keys().copied().collect();
        let keep = MAX_REGIONS / 2;
        let (_, &mut t, _) = hashes.select_nth_unstable(keep - 1);
        self.threshold = t;
        self.regions.retain(|&h, _| h <= t);
    }

    /// The share of regions in the sample.
    fn rate(&self) -> f64 {
        (self.threshold as f64 + 1.0) / 2f64.powi(64)
    }

    /// Distinct blocks of op `k` (0 read, 1 write, 2 either) in the sample.
    fn distinct(&self, k: usize) -> u64 {
        let ones =
            |w: &[u64; REGION_WORDS]| w.iter().map(|x| u64::from(x.count_ones())).sum::<u64>();
        self.regions
            .values()
            .map(|r| match k {
                2 => {
                    let mut u = r.blocks[0];
                    u.iter_mut().zip(&r.blocks[1]).for_each(|(a, b)| *a |= b);
                    ones(&u)
                }
                k => ones(&r.blocks[k]),
            })
            .sum()
    }
}

/// Set bits [lo, hi) of a region's words.
#[inline]
fn set_bits(words: &mut [u64; REGION_WORDS], lo: u64, hi: u64) {
    let (w0, w1) = ((lo / 64) as usize, ((hi - 1) / 64) as usize);
    let first = u64::MAX << (lo % 64);
    let last = u64::MAX >> (63 - (hi - 1) % 64);
    if w0 == w1 {
        words[w0] |= first & last;
    } else {
        words[w0] |= first;
        words[w0 + 1..w1].fill(u64::MAX);
        words[w1] |= last;
    }
}

struct Device {
    dev: u32,
    sample: Sample,
    /// Fine bin i holds first sectors `[i << lba_shift, (i + 1) << lba_shift)`: per op IOs and
    /// bytes.
    lba_shift: u32,
    fine: Box<[[u64; 4]; FINE]>,
}

impl Device {
    fn new(dev: u32) -> Device {
        Device {
            dev,
            sample: Sample::default(),
            lba_shift: 0,
            // On the heap from the start (32 KiB).
            fine: vec![[0; 4]; FINE]
                .into_boxed_slice()
                .try_into()
                .expect("FINE bins"),
        }
    }

    /// Halve the fine bins' resolution (double their range).
    fn fold(&mut self) {
        for i in 0..FINE / 2 {
            let (a, b) = (self.fine[2 * i], self.fine[2 * i + 1]);
            self.fine[i] = [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]];
        }
        self.fine[FINE / 2..].fill([0; 4]);
        self.lba_shift += 1;
    }

    /// IOs and bytes of op `k`.
    fn totals(&self, k: usize) -> (u64, u64) {
        self.fine
            .iter()
            .fold((0, 0), |(n, b), f| (n + f[2 * k], b + f[2 * k + 1]))
    }

    /// The histogram over the fine bins with IOs (by their first sector).
    fn lba(&self) -> LbaModel {
        let used = |f: &&[u64; 4]| f[0] + f[2] > 0;
        let (Some(lo_f), Some(hi_f)) = (
            self.fine.iter().position(|f| used(&f)),
            self.fine.iter().rposition(|f| used(&f)),
        ) else {
            return LbaModel::default();
        };
        let nf = hi_f - lo_f + 1;
        let per = nf.div_ceil(LBA_BINS);
        // Offsets of a damaged file's sectors may pass 2^64 bytes: saturate.
        let at =
            |fine: usize| u64::try_from((fine as u128) << (self.lba_shift + 9)).unwrap_or(u64::MAX);
        let bins = (0..nf.div_ceil(per))
            .map(|k| {
                let from = lo_f + k * per;
                let to = (from + per).min(hi_f + 1);
                let mut b = LbaBin {
                    start_bytes: at(from),
                    ..LbaBin::default()
                };
                for f in &self.fine[from..to] {
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
}

fn new(_: &Options, _: &tracer_common::format::TraceHeader) -> Box<dyn Section> {
    Box::new(Shape {
        devices: Vec::new(),
        last: 0,
    })
}

impl Shape {
    /// Device `dev`, made when first needed.
    fn device(&mut self, dev: u32) -> &mut Device {
        let i = index(
            &mut self.devices,
            &mut self.last,
            dev,
            |d| d.dev,
            || Device::new(dev),
        );
        &mut self.devices[i]
    }
}

impl Section for Shape {
    fn chunk(&mut self, records: &[IoRecord]) {
        // By runs of one device (records of a device mostly come together): it is found once
        // per run, when a read or write needs it.
        for run in records.chunk_by(|a, b| a.dev == b.dev) {
            let Some(first) = run.iter().position(|r| super::read_or_write(r).is_some()) else {
                continue;
            };
            let d = self.device(run[first].dev);
            for r in &run[first..] {
                let Some(k) = super::read_or_write(r) else {
                    continue;
                };
                let bytes = u64::from(r.bytes);
                let end = r.sector.saturating_add(bytes.div_ceil(512));
                d.sample.add(k, r.sector, end);
                while (r.sector >> d.lba_shift) >= FINE as u64 {
                    d.fold();
                }
                // Below FINE: the loop above folded the bins until it is.
                let bin =
                    usize::try_from(r.sector >> d.lba_shift).map_or(FINE - 1, |b| b.min(FINE - 1));
                let f = &mut d.fine[bin];
                f[2 * k] += 1;
                f[2 * k + 1] += bytes;
            }
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        let block = 512u64 << BLOCK_SHIFT;
        let mut devices: Vec<DeviceModel> = self
            .devices
            .into_iter()
            .map(|d| {
                let rate = d.sample.rate();
                let exact = d.sample.threshold == u64::MAX;
                let sized = |blocks: u64| {
                    let bytes = blocks.saturating_mul(block);
                    if exact {
                        bytes
                    } else {
                        crate::numeric::f64_to_u64_saturating((bytes as f64 / rate).round())
                    }
                };
                let sets = [d.sample.distinct(0), d.sample.distinct(1)];
                let written: u64 = d.sample.regions.values().map(|r| r.written_blocks).sum();
                let ops = OPS
                    .iter()
                    .enumerate()
                    .map(|(k, (_, name))| (k, name, d.totals(k)))
                    .filter(|(_, _, (ios, _))| *ios > 0)
                    .map(|(k, name, (ios, bytes))| OpModel {
                        op: (*name).to_string(),
                        ios,
                        bytes,
                        workset_bytes: sized(sets[k]),
                    })
                    .collect();
                DeviceModel {
                    name: (cx.device)(d.dev),
                    workset_bytes: sized(d.sample.distinct(2)),
                    write_invalidation_factor: if sets[1] == 0 {
                        0.0
                    } else {
                        written as f64 / sets[1] as f64
                    },
                    exact,
                    sampled_pct: rate * 100.0,
                    ops,
                    lba: d.lba(),
                }
            })
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        serde_json::to_value(Model {
            block_bytes: block,
            region_bytes: REGION_BLOCKS * block,
            max_regions: MAX_REGIONS,
            devices,
        })
        .unwrap_or(Value::Null)
    }
}

/// Why a device's worksets are not exact.
fn approximate(m: &Model, d: &DeviceModel) -> String {
    format!(
        "estimated from {:.2}% of the device's {} regions (more than {} touched)",
        d.sampled_pct,
        crate::analysis::sizes::human(m.region_bytes),
        m.max_regions
    )
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
                // At most 8: x <= top.
                usize::try_from((x * 8).div_ceil(top)).map_or(8, |i| i.min(8))
            }]
        })
        .collect()
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    let h = crate::report::format::bytes;
    writeln!(
        out,
        "\nworkload shape (workset: distinct 4 KiB blocks touched; write invalidation: blocks written / distinct blocks written; sequential share: see access pattern):"
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
        if !d.exact {
            write!(out, " ({})", approximate(&m, d))?;
        }
        writeln!(out)?;
        if !d.lba.bins.is_empty() {
            writeln!(
                out,
                "  {:<12} IOs by offset, {} bins of {} from {} to {}: |{}|",
                "",
                d.lba.bins.len(),
                crate::analysis::sizes::human(d.lba.bin_bytes),
                h(d.lba.start_bytes),
                h(d.lba.end_bytes),
                sparkline(&d.lba.bins)
            )?;
        }
    }
    Ok(())
}

impl DeviceModel {
    /// Distinct bytes of `op` ("read", "write"); 0 when it had none.
    fn op_workset(&self, op: &str) -> u64 {
        self.ops
            .iter()
            .find(|o| o.op == op)
            .map_or(0, |o| o.workset_bytes)
    }

    /// Bytes written.
    fn written(&self) -> u64 {
        self.ops
            .iter()
            .find(|o| o.op == "write")
            .map_or(0, |o| o.bytes)
    }
}

/// One bin's bars in the HTML report's 640 x 80 LBA chart: reads from the bottom, writes on
/// top, heights against the busiest bin.
struct Bar {
    x: usize,
    read_y: f64,
    read_h: f64,
    write_y: f64,
    write_h: f64,
    /// Where the bin starts, as bytes.
    start: String,
    read_ios: u64,
    write_ios: u64,
}

impl LbaModel {
    fn bars(&self) -> Vec<Bar> {
        let top = self
            .bins
            .iter()
            .map(|b| b.read_ios + b.write_ios)
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        self.bins
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let rh = b.read_ios as f64 * 80.0 / top;
                let wh = b.write_ios as f64 * 80.0 / top;
                Bar {
                    x: i * 10,
                    read_y: 80.0 - rh,
                    read_h: rh,
                    write_y: 80.0 - rh - wh,
                    write_h: wh,
                    start: crate::report::format::bytes(b.start_bytes),
                    read_ios: b.read_ios,
                    write_ios: b.write_ios,
                }
            })
            .collect()
    }
}

#[derive(askama::Template)]
#[template(path = "sections/shape.html")]
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

    #[test]
    fn the_sample_counts_exactly_while_small() {
        let mut s = Sample::default();
        // Reads: 3 blocks, and across a region boundary 4 more; writes: a block 3 times.
        s.add(0, 0, 24);
        let edge = 1 << REGION_SHIFT;
        s.add(0, edge - 16, edge + 16);
        s.add(0, 8, 16);
        for _ in 0..3 {
            s.add(1, 8, 12);
        }
        assert_eq!(s.threshold, u64::MAX);
        assert_eq!(s.distinct(0), 3 + 4);
        assert_eq!(s.distinct(1), 1);
        assert_eq!(s.distinct(2), 7);
        assert_eq!(s.regions.values().map(|r| r.written_blocks).sum::<u64>(), 3);
    }

    #[test]
    fn the_sample_estimates_a_large_random_workset() {
        // 2 M random 4 KiB reads over 1 TiB, some blocks twice: far more regions than kept.
        let mut s = Sample::default();
        let mut rng = crate::numeric::Rng(0x9e37_79b9_7f4a_7c15);
        let mut truth = std::collections::HashSet::new();
        for _ in 0..2_000_000 {
            let x = rng.next_u64();
            let block = (x >> 8) % (1 << 28);
            truth.insert(block);
            s.add(0, block << BLOCK_SHIFT, (block + 1) << BLOCK_SHIFT);
        }
        assert!(s.threshold < u64::MAX);
        assert!(s.regions.len() <= MAX_REGIONS);
        let est = s.distinct(0) as f64 / s.rate();
        let err = (est - truth.len() as f64).abs() / truth.len() as f64;
        assert!(err < 0.03, "{est} against {}", truth.len());
    }
}
