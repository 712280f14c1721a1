//! The Parquet export's dictionary string columns (host, device, op, flags, comm, cgroup,
//! `owner_cgroup`, file), written as column chunks of our own: each row is already a key into a
//! small table of the trace's strings, so the chunk's dictionary is built once per distinct
//! value and a row costs a table look-up. The parquet crate's Arrow writer hashes, compares and re-interns every row's
//! string (and compares it again for the statistics): that was 40% of the export's time.
//!
//! A chunk is what the Arrow writer would write for a `Dictionary(Int32, Utf8)` column: a
//! PLAIN dictionary page of the distinct values in first-use order, then version-1 data pages
//! of `RLE_DICTIONARY` keys (RLE/bit-packed hybrid, with RLE definition levels for a nullable
//! column), min/max statistics per page (column index) and per chunk, and an offset index. The
//! pages are stored uncompressed: bit-packed keys of a few distinct values leave a codec
//! nothing to gain (on the bench trace these columns are 0.01 bytes per IO).

use std::collections::HashMap;

use bytes::Bytes;
use parquet::basic::{Compression, Encoding, Type as PhysicalType};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::data_type::ByteArray;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ColumnChunkMetaData, ColumnIndexBuilder, OffsetIndexBuilder};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

use crate::export::varint;

/// Rows per data page: the parquet crate's default page row limit, so that engines skip pages
/// of these columns as finely as the others'.
pub(crate) const PAGE_ROWS: usize = 20_000;

/// Bits to hold `max` (0 to 64).
#[expect(
    clippy::cast_possible_truncation,
    reason = "at most u64::BITS, 64, which a u8 holds"
)]
pub(crate) fn bits_for(max: u64) -> u8 {
    (u64::BITS - max.leading_zeros()) as u8
}

/// `x` in the integer type of a Parquet structure's field (a page's i32 sizes and u32 counts,
/// a chunk's i64 sizes), or an error naming the field: a page or chunk the format cannot
/// describe is not written with a wrapped size.
pub(crate) fn fit<T, U>(x: U, field: &str) -> Result<T>
where
    T: TryFrom<U>,
    U: Copy + std::fmt::Display,
{
    T::try_from(x).map_err(|_| {
        ParquetError::General(format!(
            "{field} {x} is past what the Parquet format's field holds"
        ))
    })
}

/// A source key as an index, for keys the caller has checked are not negative (nulls).
#[expect(
    clippy::cast_sign_loss,
    reason = "callers pass only keys they checked are >= 0"
)]
fn key_index(k: i32) -> usize {
    k as usize
}

/// Appends `values` in Parquet's RLE/bit-packed hybrid encoding of `bit_width` bits (no
/// length prefix): runs of 8 or more equal values as RLE runs, the rest bit-packed in groups
/// of 8 (the last group padded with zeros, which the page's value count leaves unread).
pub(crate) fn rle_hybrid(values: &[u32], bit_width: u8, out: &mut Vec<u8>) {
    let value_bytes = usize::from(bit_width).div_ceil(8);
    let mut literal: Vec<u32> = Vec::new();
    let flush_literal = |literal: &mut Vec<u32>, out: &mut Vec<u8>| {
        if literal.is_empty() {
            return;
        }
        let groups = literal.len().div_ceil(8);
        literal.resize(groups * 8, 0);
        varint((groups as u64) << 1 | 1, out);
        let mut acc = 0u64;
        let mut bits = 0u32;
        for &v in literal.iter() {
            acc |= u64::from(v) << bits;
            bits += u32::from(bit_width);
            while bits >= 8 {
                out.push((acc & 0xff) as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        debug_assert_eq!(bits, 0, "groups of 8 values fill whole bytes");
        literal.clear();
    };
    let mut i = 0;
    while i < values.len() {
        let v = values[i];
        let mut run = 1;
        while i + run < values.len() && values[i + run] == v {
            run += 1;
        }
        if run >= 8 && !literal.len().is_multiple_of(8) {
            // A bit-packed run holds whole groups: complete the group from this run.
            let fill = 8 - literal.len() % 8;
            literal.extend(std::iter::repeat_n(v, fill));
            i += fill;
            continue;
        }
        if run >= 8 {
            flush_literal(&mut literal, out);
            varint((run as u64) << 1, out);
            out.extend_from_slice(&v.to_le_bytes()[..value_bytes]);
        } else {
            literal.extend(std::iter::repeat_n(v, run));
            // Bounded runs, as other writers emit (one header byte).
            if literal.len() >= 504 && literal.len().is_multiple_of(8) {
                flush_literal(&mut literal, out);
            }
        }
        i += run;
    }
    flush_literal(&mut literal, out);
}

/// One dictionary string column's chunk being written (one per row group).
pub(crate) struct DictColumn {
    descr: ColumnDescPtr,
    nullable: bool,
    /// The chunk's dictionary, in first-use order, and its index.
    values: Vec<String>,
    index: HashMap<String, u32>,
    /// Source key -> chunk key for the current `write` call (`u32::MAX`: not yet looked up).
    source_map: Vec<u32>,
    /// Source keys a page uses (scratch).
    seen: Vec<bool>,
    /// The current page: keys of its non-null rows, and its rows' definition levels.
    keys: Vec<u32>,
    levels: Vec<u32>,
    rows: usize,
    nulls: usize,
    /// The chunk keys the current page uses: `used_in[k] == page_no` for each.
    used_in: Vec<u32>,
    used: Vec<u32>,
    page_no: u32,
    /// The data pages written so far (offsets relative to the first data page).
    data: TrackedWrite<Vec<u8>>,
    column_index: ColumnIndexBuilder,
    pages: Vec<(u64, i32, i64)>,
    chunk_min: Option<u32>,
    chunk_max: Option<u32>,
    chunk_rows: u64,
    chunk_nulls: u64,
}

impl DictColumn {
    pub(crate) fn new(descr: ColumnDescPtr) -> DictColumn {
        DictColumn {
            nullable: descr.max_def_level() > 0,
            descr,
            values: Vec::new(),
            index: HashMap::new(),
            source_map: Vec::new(),
            seen: Vec::new(),
            keys: Vec::with_capacity(PAGE_ROWS),
            levels: Vec::new(),
            rows: 0,
            nulls: 0,
            used_in: Vec::new(),
            used: Vec::new(),
            page_no: 1,
            data: TrackedWrite::new(Vec::new()),
            column_index: ColumnIndexBuilder::new(PhysicalType::BYTE_ARRAY),
            pages: Vec::new(),
            chunk_min: None,
            chunk_max: None,
            chunk_rows: 0,
            chunk_nulls: 0,
        }
    }

    /// Append rows: `keys` index `source` (the strings they stand for); a negative key is a
    /// null (only in a nullable column).
    pub(crate) fn write(&mut self, keys: &[i32], source: &[&str]) -> Result<()> {
        self.source_map.clear();
        self.source_map.resize(source.len(), u32::MAX);
        let mut rest = keys;
        while !rest.is_empty() {
            let (page, next) = rest.split_at(rest.len().min(PAGE_ROWS - self.rows));
            rest = next;
            let first = page[0];
            if first >= 0 && page.iter().all(|&k| k == first) {
                // One value throughout (host, and often device, comm, cgroup): no per-row work.
                let c = self.chunk_key(key_index(first), source)?;
                self.keys.resize(self.keys.len() + page.len(), c);
                if self.nullable {
                    self.levels.resize(self.levels.len() + page.len(), 1);
                }
            } else if self.nullable && page.iter().all(|&k| k < 0) {
                // All nulls (cgroup in traces without cgroups).
                self.levels.resize(self.levels.len() + page.len(), 0);
                self.nulls += page.len();
            } else if page.iter().all(|&k| k >= 0 && key_index(k) < source.len()) {
                // No nulls: the source keys the page uses, looked up once each, then a chunk
                // key per row from a table (a look-up and a branch per row were 7% of the
                // export's time).
                self.seen.clear();
                self.seen.resize(source.len(), false);
                for &k in page {
                    self.seen[key_index(k)] = true;
                }
                for k in 0..source.len() {
                    if self.seen[k] {
                        self.chunk_key(k, source)?;
                    }
                }
                let map = &self.source_map;
                self.keys.extend(page.iter().map(|&k| map[key_index(k)]));
                if self.nullable {
                    self.levels.resize(self.levels.len() + page.len(), 1);
                }
            } else {
                for &k in page {
                    if k < 0 {
                        debug_assert!(self.nullable, "a null in a required column");
                        self.levels.push(0);
                        self.nulls += 1;
                    } else {
                        let c = self.chunk_key(key_index(k), source)?;
                        self.keys.push(c);
                        if self.nullable {
                            self.levels.push(1);
                        }
                    }
                }
            }
            self.rows += page.len();
            if self.rows == PAGE_ROWS {
                self.flush_page()?;
            }
        }
        Ok(())
    }

    /// The chunk key of source key `k`, noted as used by the current page.
    #[inline]
    fn chunk_key(&mut self, k: usize, source: &[&str]) -> Result<u32> {
        let mut c = self.source_map[k];
        if c == u32::MAX {
            c = self.intern(source[k])?;
            self.source_map[k] = c;
        }
        if self.used_in[c as usize] != self.page_no {
            self.used_in[c as usize] = self.page_no;
            self.used.push(c);
        }
        Ok(c)
    }

    fn intern(&mut self, s: &str) -> Result<u32> {
        if let Some(&c) = self.index.get(s) {
            return Ok(c);
        }
        let c = fit(self.values.len(), "a column chunk's dictionary size")?;
        self.values.push(s.to_string());
        self.index.insert(s.to_string(), c);
        self.used_in.push(0);
        Ok(c)
    }

    /// The lowest and highest (byte-wise, as Parquet orders UTF-8) of chunk keys.
    fn min_max(&self, keys: impl Iterator<Item = u32>) -> Option<(u32, u32)> {
        let v = |k: u32| self.values[k as usize].as_bytes();
        keys.fold(None, |acc, k| match acc {
            None => Some((k, k)),
            Some((lo, hi)) => Some((
                if v(k) < v(lo) { k } else { lo },
                if v(k) > v(hi) { k } else { hi },
            )),
        })
    }

    fn flush_page(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(16 + self.keys.len() / 2);
        if self.nullable {
            let mut levels = Vec::new();
            rle_hybrid(&self.levels, 1, &mut levels);
            let levels_len: u32 = fit(levels.len(), "a page's definition levels size")?;
            buf.extend_from_slice(&levels_len.to_le_bytes());
            buf.extend_from_slice(&levels);
        }
        let bit_width = bits_for(self.values.len().saturating_sub(1) as u64);
        buf.push(bit_width);
        rle_hybrid(&self.keys, bit_width, &mut buf);
        let size = buf.len();
        let page = Page::DataPage {
            buf: Bytes::from(buf),
            num_values: fit(self.rows, "a page's row count")?,
            encoding: Encoding::RLE_DICTIONARY,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let spec = SerializedPageWriter::new(&mut self.data)
            .write_page(CompressedPage::new(page, size))?;
        self.pages.push((
            spec.offset,
            fit(spec.compressed_size, "a page's compressed size")?,
            fit(self.rows, "a page's row count")?,
        ));
        let nulls: i64 = fit(self.nulls, "a page's null count")?;
        let page_min_max = self.min_max(self.used.iter().copied());
        let bytes = |k: u32| self.values[k as usize].as_bytes().to_vec();
        match page_min_max {
            Some((lo, hi)) => {
                self.column_index
                    .append(false, bytes(lo), bytes(hi), nulls, None);
                let (cmin, cmax) = self
                    .min_max(
                        [lo, hi]
                            .into_iter()
                            .chain(self.chunk_min)
                            .chain(self.chunk_max),
                    )
                    .expect("a page's keys");
                self.chunk_min = Some(cmin);
                self.chunk_max = Some(cmax);
            }
            None => self
                .column_index
                .append(true, Vec::new(), Vec::new(), nulls, None),
        }
        self.chunk_rows += self.rows as u64;
        self.chunk_nulls += self.nulls as u64;
        self.keys.clear();
        self.levels.clear();
        self.used.clear();
        self.rows = 0;
        self.nulls = 0;
        self.page_no += 1;
        Ok(())
    }

    /// The chunk's bytes (dictionary page first) and what the row group writer needs to splice
    /// them in ([`parquet::file::writer::SerializedRowGroupWriter::append_column`]).
    pub(crate) fn finish(mut self) -> Result<(Bytes, ColumnCloseResult)> {
        self.flush_page()?;
        let mut dict = TrackedWrite::new(Vec::new());
        let mut plain = Vec::new();
        for v in &self.values {
            let len: u32 = fit(v.len(), "a dictionary string's length")?;
            plain.extend_from_slice(&len.to_le_bytes());
            plain.extend_from_slice(v.as_bytes());
        }
        let size = plain.len();
        let page = Page::DictionaryPage {
            buf: Bytes::from(plain),
            num_values: fit(self.values.len(), "a column chunk's dictionary size")?,
            encoding: Encoding::PLAIN,
            is_sorted: false,
        };
        SerializedPageWriter::new(&mut dict).write_page(CompressedPage::new(page, size))?;
        let mut chunk = dict.into_inner()?;
        let dict_len: i64 = fit(chunk.len(), "a dictionary page's size")?;
        chunk.extend_from_slice(&self.data.into_inner()?);
        let bytes_written = chunk.len() as u64;
        let total: i64 = fit(chunk.len(), "a column chunk's size")?;
        let mut offsets = OffsetIndexBuilder::new();
        for &(offset, size, rows) in &self.pages {
            let offset: i64 = fit(offset, "a page's offset")?;
            offsets.append_offset_and_size(offset + dict_len, size);
            offsets.append_row_count(rows);
        }
        let value = |k: Option<u32>| {
            k.map(|k| ByteArray::from(self.values[k as usize].as_bytes().to_vec()))
        };
        let statistics = Statistics::byte_array(
            value(self.chunk_min),
            value(self.chunk_max),
            None,
            Some(self.chunk_nulls),
            false,
        );
        let metadata = ColumnChunkMetaData::builder(self.descr.clone())
            .set_compression(Compression::UNCOMPRESSED)
            .set_encodings(vec![
                Encoding::PLAIN,
                Encoding::RLE,
                Encoding::RLE_DICTIONARY,
            ])
            .set_total_compressed_size(total)
            .set_total_uncompressed_size(total)
            .set_num_values(fit(self.chunk_rows, "a column chunk's row count")?)
            .set_dictionary_page_offset(Some(0))
            .set_data_page_offset(dict_len)
            .set_statistics(statistics)
            .build()?;
        Ok((
            Bytes::from(chunk),
            ColumnCloseResult {
                bytes_written,
                rows_written: self.chunk_rows,
                metadata,
                bloom_filter: None,
                column_index: Some(self.column_index.build()?),
                offset_index: Some(offsets.build()),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decode the hybrid encoding (the spec's reading), for the round trip.
    fn decode(mut b: &[u8], bit_width: u8, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let byte = |b: &mut &[u8]| {
            let x = b[0];
            *b = &b[1..];
            x
        };
        while out.len() < n {
            let mut header = 0u64;
            let mut shift = 0;
            loop {
                let x = byte(&mut b);
                header |= u64::from(x & 0x7f) << shift;
                shift += 7;
                if x & 0x80 == 0 {
                    break;
                }
            }
            if header & 1 == 0 {
                let mut v = 0u32;
                for i in 0..usize::from(bit_width).div_ceil(8) {
                    v |= u32::from(byte(&mut b)) << (8 * i);
                }
                out.extend(std::iter::repeat_n(v, (header >> 1) as usize));
            } else {
                let count = (header >> 1) as usize * 8;
                let mut acc = 0u64;
                let mut bits = 0;
                for _ in 0..count {
                    while bits < u32::from(bit_width) {
                        acc |= u64::from(byte(&mut b)) << bits;
                        bits += 8;
                    }
                    out.push(u32::try_from(acc & ((1u64 << bit_width) - 1)).unwrap());
                    acc >>= bit_width;
                    bits -= u32::from(bit_width);
                }
            }
        }
        assert!(b.is_empty(), "no bytes left over");
        out.truncate(n);
        out
    }

    #[test]
    fn the_hybrid_encoding_round_trips_runs_literals_and_their_mixes() {
        let mut x = 7u32;
        let mut random = Vec::new();
        for _ in 0..1000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            random.push((x >> 16) % 5);
        }
        let cases: Vec<(Vec<u32>, u8)> = vec![
            (vec![0; 20_000], 0),
            (vec![3; 9], 2),
            (vec![1, 2, 3], 2),
            (
                [vec![1, 2, 3], vec![0; 30], vec![2; 5], vec![1; 8]].concat(),
                2,
            ),
            (random.clone(), 3),
            ((0..2000).map(|i| i % 300).collect(), 9),
            (random.iter().map(|&r| r * 70_000).collect(), 19),
        ];
        for (values, bw) in cases {
            let mut out = Vec::new();
            rle_hybrid(&values, bw, &mut out);
            assert_eq!(decode(&out, bw, values.len()), values, "bit width {bw}");
        }
        let mut out = Vec::new();
        rle_hybrid(&vec![0; 20_000], 0, &mut out);
        assert!(
            out.len() <= 4,
            "a constant page is one run: {} bytes",
            out.len()
        );
    }
}
