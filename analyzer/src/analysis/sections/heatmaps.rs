//! Heatmaps per device and op (read, write): IOs by time (x) and by total latency, request
//! size or position on the device (y), for the HTML report and the chart files
//! ([`crate::report::plots::heatmaps`] draws them, over the device's bursts and the log's markers).
//! Made only when asked for ([`Options::heatmaps`]: `report -o DIR` or `--heatmaps`), so a
//! plain report does no work for them.
//!
//! Per IO: a column (by completion time, like the series), three rows and three increments
//! into one column of counts (under 2 KB: it stays in the L1 cache). Time and
//! position are not known ahead (a damaged file may claim years, a truncated one no end), so
//! both start fine and are folded: when an IO lands past the last column (or row), the
//! columns (rows) are merged by a power of two. Memory is fixed whatever the file says:
//! [`COLS`] x [`COL_STRIDE`] counters per device, for at most [`MAX_DEVICES`] devices.

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracer_common::format::{IoRecord, TraceHeader};

use super::{Names, Section, SectionDef};
use crate::analysis::series::Options;

pub const DEF: SectionDef = SectionDef {
    name: "heatmaps",
    new,
    text,
    html,
};

/// Columns kept while reading; between half and all of them are used once folded.
const COLS: usize = 256;
/// Latency rows: two per power of two (at 1 and 1.5 times it), from `2^LAT_MIN_LOG2` ns.
const LAT_ROWS: usize = 64;
const LAT_MIN_LOG2: u32 = 6;
/// Size rows: one per power of two from 1 KiB (the first also holds smaller requests); a
/// request is at most 4 GiB (u32 bytes).
const SIZE_ROWS: usize = 24;
const SIZE_MIN_LOG2: u32 = 9;
/// Fine position rows while reading, over `[0, OFF_ROWS << shift)` sectors; the model keeps
/// at most [`OFF_OUT_ROWS`] rows over the touched range.
const OFF_ROWS: usize = 128;
const OFF_OUT_ROWS: usize = 64;
/// Counters per op in a column: latency, size and position rows one after the other.
const ROWS: usize = LAT_ROWS + SIZE_ROWS + OFF_ROWS;
const SIZE_AT: usize = LAT_ROWS;
const OFF_AT: usize = LAT_ROWS + SIZE_ROWS;
/// Counters per op pair.
const STRIDE: usize = 2 * ROWS;
/// Counters per column.
const COL_STRIDE: usize = STRIDE;
/// Devices with heatmaps (about 460 KB each); more are counted in the model.
const MAX_DEVICES: usize = 32;

const OPS: [&str; 2] = ["read", "write"];

/// The latency row of a total latency in ns: 2 log2(v), plus 1 in the upper half of the
/// power of two, from `2^LAT_MIN_LOG2` (lower values in the first row, higher in the last).
#[inline]
fn latency_row(ns: u64) -> usize {
    let v = ns | 2;
    let log2 = v.ilog2();
    let half = ((v >> (log2 - 1)) & 1) as u32;
    ((2 * log2 + half).saturating_sub(2 * LAT_MIN_LOG2) as usize).min(LAT_ROWS - 1)
}

/// Lower edge of latency row r in ns (0 for the first, which holds everything below; the
/// last also holds everything above its upper edge).
fn latency_edge(r: usize) -> u64 {
    match r {
        0 => 0,
        r => {
            let r = r as u64;
            ((2 + r % 2) << (r / 2 + u64::from(LAT_MIN_LOG2))) >> 1
        }
    }
}

/// The size row of a request of `bytes` (> 0): floor(log2) from `2^(SIZE_MIN_LOG2 + 1)`.
#[inline]
fn size_row(bytes: u32) -> usize {
    ((bytes | 1).ilog2().saturating_sub(SIZE_MIN_LOG2) as usize).min(SIZE_ROWS - 1)
}

fn size_edge(r: usize) -> u64 {
    if r == 0 {
        0
    } else {
        1u64 << (r as u64 + u64::from(SIZE_MIN_LOG2))
    }
}

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct Model {
    /// Width of a column; column c covers completions in `[c, c + 1) x column_ns` after the
    /// trace's start (the few completing before it are in column 0).
    pub column_ns: u64,
    pub devices: Vec<DeviceModel>,
    /// Devices past [`MAX_DEVICES`], without heatmaps.
    pub devices_left_out: u64,
}

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct DeviceModel {
    pub name: String,
    /// Columns from the trace's start to the last with an IO.
    pub columns: usize,
    /// Total latency (OS queue + device), ns.
    pub latency: Map,
    /// Request size, bytes.
    pub size: Map,
    /// First byte's offset on the device, bytes.
    pub offset: Map,
}

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct Map {
    /// Row r holds values in `[row_edges[r], row_edges[r + 1])`: rows + 1 edges, lowest first.
    /// The scale's first row (edge 0) also holds smaller values and its last row (latency
    /// from 2^37 x 1.5 ns, size from 4 GiB) larger ones.
    pub row_edges: Vec<u64>,
    pub ops: Vec<OpMap>,
}

#[derive(Serialize, Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct OpMap {
    pub op: String,
    /// IOs counted (every read or write of nonzero size, once in each map).
    pub ios: u64,
    /// Per row (lowest first), the IOs of each column, as decimal numbers separated by
    /// spaces: one string per row keeps the pretty-printed report at one line per row.
    pub counts: Vec<String>,
}

impl OpMap {
    /// The counts as numbers, `[row][column]` (a malformed number reads as 0).
    pub fn matrix(&self) -> Vec<Vec<u64>> {
        self.counts
            .iter()
            .map(|r| r.split(' ').map(|x| x.parse().unwrap_or(0)).collect())
            .collect()
    }
}

struct Device {
    dev: u32,
    /// Position row i holds first sectors `[i << off_shift, (i + 1) << off_shift)`.
    off_shift: u32,
    /// `[column][op][row]`, `COLS x COL_STRIDE`.
    counts: Vec<u32>,
}

impl Device {
    /// Merge position rows so that sector `s` has one: rows by 2^k.
    fn fold_rows(&mut self, s: u64) {
        let mut k = 0;
        while (s >> (self.off_shift + k)) >= OFF_ROWS as u64 {
            k += 1;
        }
        for block in self.counts.chunks_exact_mut(ROWS) {
            let rows = &mut block[OFF_AT..];
            for i in 1..OFF_ROWS {
                let to = i >> k;
                let x = std::mem::take(&mut rows[i]);
                rows[to] = rows[to].saturating_add(x);
            }
        }
        self.off_shift += k;
    }

    /// Merge columns by 2^k.
    fn fold_columns(&mut self, k: u32) {
        for c in 1..COLS {
            let to = c >> k;
            if to == c {
                continue;
            }
            let (lo, hi) = self.counts.split_at_mut(c * COL_STRIDE);
            let dst = &mut lo[to * COL_STRIDE..(to + 1) * COL_STRIDE];
            for (a, b) in dst.iter_mut().zip(&mut hi[..COL_STRIDE]) {
                *a = a.saturating_add(std::mem::take(b));
            }
        }
    }
}

struct Heat {
    t0_ns: u64,
    column_ns: u64,
    /// The column the last record fell in: its start (offset from t0) and index.
    col_lo: u64,
    col: usize,
    devices: Vec<Device>,
    last: usize,
    left_out: Vec<u32>,
}

/// A section that was not asked for.
struct Off;

impl Section for Off {
    fn chunk(&mut self, _: &[IoRecord]) {}
    fn finish(self: Box<Self>, _: &Names) -> Value {
        Value::Null
    }
}

fn new(opts: &Options, header: &TraceHeader) -> Box<dyn Section> {
    if !opts.heatmaps {
        return Box::new(Off);
    }
    Box::new(Heat {
        t0_ns: header.monotonic_base_ns,
        column_ns: opts.fine_ns.max(1),
        col_lo: 0,
        col: 0,
        devices: Vec::new(),
        last: 0,
        left_out: Vec::new(),
    })
}

impl Heat {
    /// The column of an offset from t0 not in the cached one; folds when it is past the last.
    #[cold]
    fn locate(&mut self, dt: u64) {
        let mut k = 0;
        while dt / self.column_ns >= COLS as u64 {
            self.column_ns = self.column_ns.saturating_mul(2);
            k += 1;
        }
        if k > 0 {
            for d in &mut self.devices {
                d.fold_columns(k);
            }
        }
        // Below COLS: the loop above widened the columns until it is.
        self.col = usize::try_from(dt / self.column_ns).unwrap_or(COLS - 1);
        self.col_lo = self.col as u64 * self.column_ns;
    }

    /// The index of device `dev`, None past [`MAX_DEVICES`].
    #[cold]
    fn device(&mut self, dev: u32) -> Option<usize> {
        if let Some(i) = self.devices.iter().position(|d| d.dev == dev) {
            return Some(i);
        }
        if self.devices.len() >= MAX_DEVICES {
            if !self.left_out.contains(&dev) {
                self.left_out.push(dev);
            }
            return None;
        }
        self.devices.push(Device {
            dev,
            off_shift: 0,
            counts: vec![0; COLS * COL_STRIDE],
        });
        Some(self.devices.len() - 1)
    }
}

impl Section for Heat {
    fn chunk(&mut self, records: &[IoRecord]) {
        for r in records {
            let Some(k) = super::read_or_write(r) else {
                continue;
            };
            if self.devices.get(self.last).is_none_or(|d| d.dev != r.dev) {
                match self.device(r.dev) {
                    Some(i) => self.last = i,
                    None => continue,
                }
            }
            let dt = r.complete_ns.saturating_sub(self.t0_ns);
            if dt.wrapping_sub(self.col_lo) >= self.column_ns {
                self.locate(dt);
            }
            let d = &mut self.devices[self.last];
            if (r.sector >> d.off_shift) >= OFF_ROWS as u64 {
                d.fold_rows(r.sector);
            }
            let base = self.col * COL_STRIDE + k * ROWS;
            let c = &mut d.counts[base..base + ROWS];
            let l = latency_row(r.total_ns());
            c[l] = c[l].wrapping_add(1);
            let s = SIZE_AT + size_row(r.bytes);
            c[s] = c[s].wrapping_add(1);
            // Below OFF_ROWS: fold_rows widened the rows until it is.
            let o = OFF_AT + usize::try_from(r.sector >> d.off_shift).unwrap_or(OFF_ROWS - 1);
            c[o] = c[o].wrapping_add(1);
        }
    }

    fn finish(self: Box<Self>, cx: &Names) -> Value {
        let mut devices: Vec<DeviceModel> = self
            .devices
            .iter()
            .filter_map(|d| device_model(d, (cx.device)(d.dev)))
            .collect();
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        if devices.is_empty() {
            return Value::Null;
        }
        serde_json::to_value(Model {
            column_ns: self.column_ns,
            devices,
            devices_left_out: self.left_out.len() as u64,
        })
        .unwrap_or(Value::Null)
    }
}

/// Rows [lo, hi] of the counters at `at` (len `n`) used by any op in any column of `cols`.
fn used_rows(d: &Device, cols: usize, at: usize, n: usize) -> Option<(usize, usize)> {
    let mut used = vec![false; n];
    for c in 0..cols {
        for k in 0..2 {
            let b = c * COL_STRIDE + k * ROWS + at;
            for (u, &x) in used.iter_mut().zip(&d.counts[b..b + n]) {
                *u |= x > 0;
            }
        }
    }
    Some((
        used.iter().position(|&u| u)?,
        used.iter().rposition(|&u| u)?,
    ))
}

/// One map: rows [lo, hi] of the counters at `at`, `per` fine rows to a row, edges by `edge`.
fn map(
    d: &Device,
    cols: usize,
    at: usize,
    (lo, hi): (usize, usize),
    per: usize,
    edge: &dyn Fn(usize) -> u64,
) -> Map {
    let rows = (hi - lo + 1).div_ceil(per);
    let ops = (0..2)
        .map(|k| {
            let mut ios = 0u64;
            let counts = (0..rows)
                .map(|r| {
                    let from = lo + r * per;
                    let to = (from + per).min(hi + 1);
                    let cells: Vec<String> = (0..cols)
                        .map(|c| {
                            let b = c * COL_STRIDE + k * ROWS + at;
                            let x: u64 = d.counts[b + from..b + to]
                                .iter()
                                .map(|&x| u64::from(x))
                                .sum();
                            ios += x;
                            x.to_string()
                        })
                        .collect();
                    cells.join(" ")
                })
                .collect();
            OpMap {
                op: OPS[k].to_string(),
                ios,
                counts,
            }
        })
        .filter(|o| o.ios > 0)
        .collect();
    Map {
        row_edges: (0..=rows)
            .map(|r| edge((lo + r * per).min(hi + 1)))
            .collect(),
        ops,
    }
}

fn device_model(d: &Device, name: String) -> Option<DeviceModel> {
    let col_used = |c: usize| {
        d.counts[c * COL_STRIDE..(c + 1) * COL_STRIDE]
            .iter()
            .any(|&x| x > 0)
    };
    let cols = (0..COLS).rposition(col_used)? + 1;
    let lat = used_rows(d, cols, 0, LAT_ROWS)?;
    let size = used_rows(d, cols, SIZE_AT, SIZE_ROWS)?;
    let off = used_rows(d, cols, OFF_AT, OFF_ROWS)?;
    let per = (off.1 - off.0 + 1).div_ceil(OFF_OUT_ROWS);
    // Byte offsets of a damaged file's sectors may pass 2^64: saturate.
    let shift = d.off_shift + 9;
    let off_edge = |r: usize| u64::try_from((r as u128) << shift).unwrap_or(u64::MAX);
    Some(DeviceModel {
        name,
        columns: cols,
        latency: map(d, cols, 0, lat, 1, &latency_edge),
        size: map(d, cols, SIZE_AT, size, 1, &size_edge),
        offset: map(d, cols, OFF_AT, off, per, &off_edge),
    })
}

/// The model, if the report has heatmaps.
pub fn model(v: &Value) -> Option<Model> {
    Model::deserialize(v).ok().filter(|m| !m.devices.is_empty())
}

fn text(v: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(m) = model(v) else { return Ok(()) };
    writeln!(
        out,
        "\nheatmaps (IOs by time and latency, size, offset; drawn in the HTML report and the heatmap charts of -o DIR):"
    )?;
    for d in &m.devices {
        writeln!(
            out,
            "  {:<12} {} columns of {}, {} latency rows, {} size rows, {} offset rows",
            d.name,
            d.columns,
            tracer_common::units::format_duration_ns(m.column_ns),
            d.latency.row_edges.len().saturating_sub(1),
            d.size.row_edges.len().saturating_sub(1),
            d.offset.row_edges.len().saturating_sub(1)
        )?;
    }
    if m.devices_left_out > 0 {
        writeln!(
            out,
            "  ({} more devices without heatmaps: at most {MAX_DEVICES} are kept)",
            m.devices_left_out
        )?;
    }
    Ok(())
}

/// The heatmaps are drawn per device with its other charts ([`crate::report::plots::heatmaps`],
/// called by the HTML report and by `-o DIR`), because they overlay the device's bursts and
/// the application log's markers, which are outside this section's part of the report.
#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature of every section's HTML renderer (SectionDef::html)"
)]
fn html(_: &Value, _: &mut String) -> std::fmt::Result {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_their_edges_agree() {
        for ns in [
            0u64,
            1,
            63,
            64,
            95,
            96,
            127,
            128,
            1_000,
            4_096,
            1 << 30,
            u64::MAX,
        ] {
            let r = latency_row(ns);
            assert!(latency_edge(r) <= ns, "{ns}: row {r}");
            assert!(
                r == LAT_ROWS - 1 || ns < latency_edge(r + 1),
                "{ns}: row {r}"
            );
        }
        for b in [
            1u32,
            511,
            512,
            1023,
            1024,
            4096,
            4097,
            8191,
            1 << 20,
            u32::MAX,
        ] {
            let r = size_row(b);
            assert!(size_edge(r) <= u64::from(b), "{b}: row {r}");
            assert!(u64::from(b) < size_edge(r + 1), "{b}: row {r}");
        }
        assert_eq!(size_row(4096), size_row(8191));
        assert_ne!(size_row(4096), size_row(8192));
    }
}
