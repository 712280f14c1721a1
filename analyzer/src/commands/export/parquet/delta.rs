//! The Parquet export's integer columns (times, latencies, sizes, sectors, pids, queue depths,
//! errors), written as column chunks of our own in `DELTA_BINARY_PACKED`, the page's min/max
//! found in the same pass as the deltas. The parquet crate's column writer did the same work
//! in three passes (its statistics, its deltas, its bit packing, value by value): 36% of the
//! export's time.
//!
//! The encoding (Parquet's Encodings.md, "Delta Encoding"): a header of ULEB128 block size,
//! miniblocks per block, value count, and the first value (zigzag ULEB128); then blocks of
//! the deltas between consecutive values (wrapping in the column's type), each block its
//! minimum delta (zigzag ULEB128), a bit width byte per miniblock, and the miniblocks: each
//! delta minus the block's minimum, bit-packed little-endian at its miniblock's width. The last
//! block's miniblocks without values are left out (their widths written as 0), its last
//! miniblock with values padded with zeros. The layout is the parquet crate's: blocks of 128
//! deltas in 4 miniblocks of 32 for INT32, blocks of 256 in 4 miniblocks of 64 for INT64, so
//! that a page's bytes are the ones the crate wrote for the same values.
//!
//! A chunk is what the crate's column writer writes for these columns (version-1 data pages
//! of [`PAGE_ROWS`] rows with RLE definition levels when the column is nullable, compressed
//! with the file's codec, min/max and null count per page (column index) and per chunk, and
//! an offset index), spliced in as `dict.rs` splices the string columns.

use bytes::Bytes;
use parquet::basic::{BoundaryOrder, Compression, Encoding, PageType, Type as PhysicalType};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{
    ColumnChunkMetaData, ColumnIndexBuilder, OffsetIndexBuilder, PageEncodingStats,
};
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;

use super::dict::{PAGE_ROWS, bits_for, fit, rle_hybrid};
use crate::export::varint;

/// Miniblocks per block (the spec's example, and every writer's).
const MINIBLOCKS: usize = 4;

/// An integer type of a `DELTA_BINARY_PACKED` column: INT32 or INT64.
pub(crate) trait DeltaInt: Copy + Ord + Default + Send + 'static {
    /// Values per miniblock (a multiple of 32); a block is [`MINIBLOCKS`] of them.
    const MINIBLOCK: usize;
    const PHYSICAL: PhysicalType;
    /// `self - prev`, wrapping in the type (as every reader adds it back).
    fn delta(self, prev: Self) -> Self;
    /// `self - min` of two deltas, as the unsigned bits to pack (at most the type's width).
    fn above(self, min: Self) -> u64;
    fn to_i64(self) -> i64;
    /// The value's PLAIN encoding (little-endian), as statistics hold it.
    fn plain(self) -> Vec<u8>;
    fn statistics(s: ValueStatistics<Self>) -> Statistics;
    /// Append one miniblock (exactly [`Self::MINIBLOCK`] values) packed at `width` bits.
    fn pack(values: &[u64], width: u8, out: &mut Vec<u8>);
}

impl DeltaInt for i32 {
    const MINIBLOCK: usize = 32;
    const PHYSICAL: PhysicalType = PhysicalType::INT32;
    #[inline]
    fn delta(self, prev: i32) -> i32 {
        self.wrapping_sub(prev)
    }
    #[inline]
    fn above(self, min: i32) -> u64 {
        u64::from(self.wrapping_sub(min).cast_unsigned())
    }
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn plain(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
    fn statistics(s: ValueStatistics<i32>) -> Statistics {
        Statistics::Int32(s)
    }
    fn pack(values: &[u64], width: u8, out: &mut Vec<u8>) {
        pack_miniblock::<32>(values, width, out);
    }
}

impl DeltaInt for i64 {
    const MINIBLOCK: usize = 64;
    const PHYSICAL: PhysicalType = PhysicalType::INT64;
    #[inline]
    fn delta(self, prev: i64) -> i64 {
        self.wrapping_sub(prev)
    }
    #[inline]
    fn above(self, min: i64) -> u64 {
        self.wrapping_sub(min).cast_unsigned()
    }
    fn to_i64(self) -> i64 {
        self
    }
    fn plain(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
    fn statistics(s: ValueStatistics<i64>) -> Statistics {
        Statistics::Int64(s)
    }
    fn pack(values: &[u64], width: u8, out: &mut Vec<u8>) {
        pack_miniblock::<64>(values, width, out);
    }
}

fn zigzag(v: i64, out: &mut Vec<u8>) {
    varint(((v << 1) ^ (v >> 63)).cast_unsigned(), out);
}

/// `M` values of at most `W` bits each, packed little-endian (value 0 in the lowest bits of the
/// first byte): `M * W / 8` bytes. `W` and `M` constant, so that the loop unrolls into shifts
/// and stores without branches.
#[expect(
    clippy::inline_always,
    reason = "inlined into each (W, M) caller, the loop unrolls; measured by cargo xtask bench"
)]
#[inline(always)]
fn pack_const<const W: usize, const M: usize>(values: &[u64], out: &mut Vec<u8>) {
    out.reserve(M * W / 8);
    let mut acc = 0u64;
    let mut bits = 0;
    for &x in &values[..M] {
        acc |= x << bits;
        bits += W;
        if bits >= 64 {
            out.extend_from_slice(&acc.to_le_bytes());
            bits -= 64;
            acc = if bits == 0 { 0 } else { x >> (W - bits) };
        }
    }
    if bits > 0 {
        // M * W is a multiple of 32 bits: half a word left.
        out.extend_from_slice(&acc.to_le_bytes()[..bits / 8]);
    }
}

/// [`pack_const`] at a width known at run time.
fn pack_miniblock<const M: usize>(values: &[u64], width: u8, out: &mut Vec<u8>) {
    macro_rules! widths {
        ($($w:literal)*) => {
            match width {
                $($w => pack_const::<$w, M>(values, out),)*
                _ => pack_const::<64, M>(values, out),
            }
        };
    }
    widths!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30
        31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
        61 62 63);
}

/// The least of `v` (not empty), with eight independent minima.
#[inline]
fn min_of<T: DeltaInt>(v: &[T]) -> T {
    let mut m = [v[0]; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for (a, &b) in m.iter_mut().zip(c) {
            *a = (*a).min(b);
        }
    }
    let rest = chunks.remainder().iter().copied().fold(m[0], T::min);
    m.into_iter().fold(rest, T::min)
}

/// The least and greatest of `v` (not empty), eight of each at a time.
fn min_max<T: DeltaInt>(v: &[T]) -> (T, T) {
    let mut lo = [v[0]; 8];
    let mut hi = [v[0]; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for ((l, h), &b) in lo.iter_mut().zip(hi.iter_mut()).zip(c) {
            *l = (*l).min(b);
            *h = (*h).max(b);
        }
    }
    let r = chunks.remainder();
    (
        lo.into_iter().chain(r.iter().copied()).fold(v[0], T::min),
        hi.into_iter().chain(r.iter().copied()).fold(v[0], T::max),
    )
}

/// Appends `values` `DELTA_BINARY_PACKED` to `out`; returns their min and max (None if empty).
pub(crate) fn encode<T: DeltaInt>(values: &[T], out: &mut Vec<u8>) -> Option<(T, T)> {
    let m = T::MINIBLOCK;
    let block = m * MINIBLOCKS;
    varint(block as u64, out);
    varint(MINIBLOCKS as u64, out);
    varint(values.len() as u64, out);
    let Some(&first) = values.first() else {
        zigzag(0, out);
        return None;
    };
    zigzag(first.to_i64(), out);
    let mut deltas = [T::default(); 256];
    let mut packed = [0u64; 256];
    // Block b's deltas: its values less the values one before them (the previous block's last
    // for its first), in separate passes of independent operations (the compiler vectorizes
    // the subtractions and the masks; a loop carrying the previous value and three minima
    // from one value to the next was twice as slow).
    let mut start = 1;
    while start < values.len() {
        let end = (start + block).min(values.len());
        let n = end - start;
        for ((d, &v), &p) in deltas[..n]
            .iter_mut()
            .zip(&values[start..end])
            .zip(&values[start - 1..end - 1])
        {
            *d = v.delta(p);
        }
        let min = min_of(&deltas[..n]);
        zigzag(min.to_i64(), out);
        let widths_at = out.len();
        out.extend_from_slice(&[0; MINIBLOCKS]);
        for (i, mb) in deltas[..n].chunks(m).enumerate() {
            let p = &mut packed[..m];
            let mut or = 0u64;
            for (q, &d) in p.iter_mut().zip(mb) {
                *q = d.above(min);
                or |= *q;
            }
            // The last miniblock's padding: zeros.
            p[mb.len()..].fill(0);
            let width = bits_for(or);
            out[widths_at + i] = width;
            T::pack(p, width, out);
        }
        start = end;
    }
    let (lo, hi) = min_max(values);
    Some((lo, hi))
}

/// The file's codec, for the pages of these columns.
pub(crate) enum PageCodec {
    None,
    Snappy(Box<snap::raw::Encoder>),
    Lz4,
    Zstd(Box<zstd::bulk::Compressor<'static>>),
}

impl PageCodec {
    pub(crate) fn new(c: Compression) -> Result<PageCodec> {
        Ok(match c {
            Compression::UNCOMPRESSED => PageCodec::None,
            Compression::SNAPPY => PageCodec::Snappy(Box::new(snap::raw::Encoder::new())),
            Compression::LZ4_RAW => PageCodec::Lz4,
            Compression::ZSTD(level) => PageCodec::Zstd(Box::new(
                zstd::bulk::Compressor::new(level.compression_level())
                    .map_err(|e| ParquetError::External(Box::new(e)))?,
            )),
            other => return Err(ParquetError::NYI(format!("the {other} codec"))),
        })
    }

    /// `input` compressed, or `None` to store it as it is (no codec).
    fn compress(&mut self, input: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(match self {
            PageCodec::None => None,
            PageCodec::Snappy(e) => Some(
                e.compress_vec(input)
                    .map_err(|e| ParquetError::External(Box::new(e)))?,
            ),
            PageCodec::Lz4 => Some(lz4_flex::block::compress(input)),
            PageCodec::Zstd(c) => Some(
                c.compress(input)
                    .map_err(|e| ParquetError::External(Box::new(e)))?,
            ),
        })
    }
}

/// One integer column's chunk being written (one per row group).
pub(crate) struct DeltaColumn<T: DeltaInt> {
    descr: ColumnDescPtr,
    nullable: bool,
    compression: Compression,
    codec: PageCodec,
    /// The current page's non-null values.
    values: Vec<T>,
    /// Its rows' definition levels, kept only once a row of the page is null (until then all
    /// of its `rows` are 1).
    levels: Vec<u32>,
    rows: usize,
    nulls: usize,
    /// Page buffer, reused.
    buf: Vec<u8>,
    /// The data pages written so far.
    data: TrackedWrite<Vec<u8>>,
    column_index: ColumnIndexBuilder,
    offsets: Vec<(u64, i32, i64)>,
    last_page: Option<(T, T)>,
    ascending: bool,
    descending: bool,
    chunk_min_max: Option<(T, T)>,
    chunk_rows: u64,
    chunk_nulls: u64,
    uncompressed: u64,
    pages: i32,
}

impl<T: DeltaInt> DeltaColumn<T> {
    /// A chunk of column `descr`, its pages compressed with `compression`, written into
    /// `buf` (emptied first: memory of an earlier chunk, to reuse).
    pub(crate) fn new(
        descr: ColumnDescPtr,
        compression: Compression,
        mut buf: Vec<u8>,
    ) -> Result<DeltaColumn<T>> {
        buf.clear();
        Ok(DeltaColumn {
            nullable: descr.max_def_level() > 0,
            descr,
            compression,
            codec: PageCodec::new(compression)?,
            values: Vec::new(),
            levels: Vec::new(),
            rows: 0,
            nulls: 0,
            buf: Vec::new(),
            data: TrackedWrite::new(buf),
            column_index: ColumnIndexBuilder::new(T::PHYSICAL),
            offsets: Vec::new(),
            last_page: None,
            ascending: true,
            descending: true,
            chunk_min_max: None,
            chunk_rows: 0,
            chunk_nulls: 0,
            uncompressed: 0,
            pages: 0,
        })
    }

    /// Append rows: `values` one per row, `valid` (if any) false for a null row (whose value is
    /// not written). Without `valid` no row is null; a required column takes no `valid`.
    pub(crate) fn write(&mut self, values: &[T], valid: Option<&[bool]>) -> Result<()> {
        if let Some(v) = valid
            && (v.len() != values.len() || !self.nullable)
        {
            return Err(ParquetError::General(format!(
                "{} rows with {} validities for column {}",
                values.len(),
                v.len(),
                self.descr.name()
            )));
        }
        let mut done = 0;
        while done < values.len() {
            let take = (values.len() - done).min(PAGE_ROWS - self.rows);
            let page = &values[done..done + take];
            match valid.map(|v| &v[done..done + take]) {
                Some(ok) if ok.iter().any(|b| !b) => {
                    if self.levels.len() < self.rows {
                        self.levels.resize(self.rows, 1);
                    }
                    self.levels.extend(ok.iter().map(|&b| u32::from(b)));
                    self.values
                        .extend(page.iter().zip(ok).filter_map(|(&x, &b)| b.then_some(x)));
                    self.nulls += ok.iter().filter(|b| !**b).count();
                }
                _ => {
                    if !self.levels.is_empty() {
                        self.levels.resize(self.levels.len() + take, 1);
                    }
                    if self.rows == 0 && take == PAGE_ROWS {
                        // A whole page at once: straight from the caller's rows.
                        self.rows = take;
                        self.flush_page(Some(page))?;
                        done += take;
                        continue;
                    }
                    self.values.extend_from_slice(page);
                }
            }
            self.rows += take;
            done += take;
            if self.rows == PAGE_ROWS {
                self.flush_page(None)?;
            }
        }
        Ok(())
    }

    /// Write the current page (its values `direct`, or those buffered).
    fn flush_page(&mut self, direct: Option<&[T]>) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        if self.nullable {
            buf.extend_from_slice(&[0; 4]);
            if self.nulls == 0 {
                // One run of `rows` ones.
                varint((self.rows as u64) << 1, &mut buf);
                buf.push(1);
            } else {
                rle_hybrid(&self.levels, 1, &mut buf);
            }
            let len: u32 = fit(buf.len() - 4, "a page's definition levels size")?;
            buf[..4].copy_from_slice(&len.to_le_bytes());
        }
        let values = direct.unwrap_or(&self.values);
        let min_max = encode(values, &mut buf);
        let size = buf.len();
        let body = match self.codec.compress(&buf)? {
            Some(c) => c,
            None => buf.clone(),
        };
        self.buf = buf;
        let page = Page::DataPage {
            buf: Bytes::from(body),
            num_values: fit(self.rows, "a page's row count")?,
            encoding: Encoding::DELTA_BINARY_PACKED,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let spec = SerializedPageWriter::new(&mut self.data)
            .write_page(CompressedPage::new(page, size))?;
        self.offsets.push((
            spec.offset,
            fit(spec.compressed_size, "a page's compressed size")?,
            fit(self.rows, "a page's row count")?,
        ));
        self.uncompressed += spec.uncompressed_size as u64;
        self.pages += 1;
        let nulls: i64 = fit(self.nulls, "a page's null count")?;
        match min_max {
            Some((lo, hi)) => {
                if let Some((plo, phi)) = self.last_page {
                    self.ascending &= plo <= lo && phi <= hi;
                    self.descending &= plo >= lo && phi >= hi;
                }
                self.last_page = Some((lo, hi));
                self.column_index
                    .append(false, lo.plain(), hi.plain(), nulls, None);
                self.chunk_min_max = Some(match self.chunk_min_max {
                    Some((clo, chi)) => (clo.min(lo), chi.max(hi)),
                    None => (lo, hi),
                });
            }
            None => self
                .column_index
                .append(true, Vec::new(), Vec::new(), nulls, None),
        }
        self.chunk_rows += self.rows as u64;
        self.chunk_nulls += self.nulls as u64;
        self.values.clear();
        self.levels.clear();
        self.rows = 0;
        self.nulls = 0;
        Ok(())
    }

    /// The chunk's bytes and what the row group writer needs to splice them in
    /// ([`parquet::file::writer::SerializedRowGroupWriter::append_column`]).
    pub(crate) fn finish(mut self) -> Result<(Bytes, ColumnCloseResult)> {
        self.flush_page(None)?;
        let chunk = self.data.into_inner()?;
        let bytes_written = chunk.len() as u64;
        let total: i64 = fit(chunk.len(), "a column chunk's size")?;
        let mut offsets = OffsetIndexBuilder::new();
        for &(offset, size, rows) in &self.offsets {
            offsets.append_offset_and_size(fit(offset, "a page's offset")?, size);
            offsets.append_row_count(rows);
        }
        self.column_index.set_boundary_order(if self.ascending {
            BoundaryOrder::ASCENDING
        } else if self.descending {
            BoundaryOrder::DESCENDING
        } else {
            BoundaryOrder::UNORDERED
        });
        let (min, max) = match self.chunk_min_max {
            Some((lo, hi)) => (Some(lo), Some(hi)),
            None => (None, None),
        };
        let statistics = T::statistics(
            ValueStatistics::new(min, max, None, Some(self.chunk_nulls), false)
                .with_backwards_compatible_min_max(true),
        );
        let mut metadata = ColumnChunkMetaData::builder(self.descr.clone())
            .set_compression(self.compression)
            .set_encodings(vec![Encoding::RLE, Encoding::DELTA_BINARY_PACKED])
            .set_total_compressed_size(total)
            .set_total_uncompressed_size(fit(
                self.uncompressed,
                "a column chunk's uncompressed size",
            )?)
            .set_num_values(fit(self.chunk_rows, "a column chunk's row count")?)
            .set_data_page_offset(0)
            .set_statistics(statistics);
        if self.pages > 0 {
            metadata = metadata.set_page_encoding_stats(vec![PageEncodingStats {
                page_type: PageType::DATA_PAGE,
                encoding: Encoding::DELTA_BINARY_PACKED,
                count: self.pages,
            }]);
        }
        Ok((
            Bytes::from(chunk),
            ColumnCloseResult {
                bytes_written,
                rows_written: self.chunk_rows,
                metadata: metadata.build()?,
                bloom_filter: None,
                column_index: Some(self.column_index.build()?),
                offset_index: Some(offsets.build()),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, Int32Array, Int64Array};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::basic::ZstdLevel;
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    use super::*;

    /// A file of one column `x` (INT32 or INT64, nullable or not) written by a [`DeltaColumn`]
    /// in calls of `step` rows, read back by the parquet crate's Arrow reader: the rows, and
    /// the chunk's statistics (min, max, nulls) and pages' (min, max, nulls) as it reads them.
    #[expect(
        clippy::type_complexity,
        reason = "a test helper's tuple of what the reader saw, taken apart by each test"
    )]
    fn round_trip<T: DeltaInt + std::fmt::Debug>(
        rows: &[Option<T>],
        nullable: bool,
        codec: Compression,
        step: usize,
    ) -> (
        Vec<Option<i64>>,
        Option<(i64, i64)>,
        u64,
        Vec<Option<(i64, i64)>>,
    ) {
        let ty = if T::PHYSICAL == PhysicalType::INT32 {
            "int32"
        } else {
            "int64"
        };
        let rep = if nullable { "optional" } else { "required" };
        let schema =
            Arc::new(parse_message_type(&format!("message m {{ {rep} {ty} x; }}")).unwrap());
        let props = Arc::new(WriterProperties::builder().build());
        let mut file = SerializedFileWriter::new(Vec::new(), schema, props).unwrap();
        let descr = file.schema_descr().column(0);
        let mut rg = file.next_row_group().unwrap();
        let mut col = DeltaColumn::<T>::new(descr, codec, Vec::new()).unwrap();
        for part in rows.chunks(step.max(1)) {
            let values: Vec<T> = part.iter().map(|v| v.unwrap_or_default()).collect();
            let valid: Vec<bool> = part.iter().map(Option::is_some).collect();
            col.write(&values, nullable.then_some(&valid[..])).unwrap();
        }
        let (bytes, close) = col.finish().unwrap();
        rg.append_column(&bytes, close).unwrap();
        rg.close().unwrap();
        let data = Bytes::from(file.into_inner().unwrap());

        let reader = SerializedFileReader::new(data.clone()).unwrap();
        let meta = reader.metadata();
        let (mut stats, mut nulls) = (None, 0);
        if meta.num_row_groups() > 0 {
            let s = meta.row_group(0).column(0).statistics().unwrap();
            nulls = s.null_count_opt().unwrap();
            stats = match s {
                Statistics::Int32(v) => v
                    .min_opt()
                    .map(|&lo| (i64::from(lo), i64::from(*v.max_opt().unwrap()))),
                Statistics::Int64(v) => v.min_opt().map(|&lo| (lo, *v.max_opt().unwrap())),
                _ => panic!("statistics of another type"),
            };
        }
        let b = ParquetRecordBatchReaderBuilder::try_new_with_options(
            data,
            parquet::arrow::arrow_reader::ArrowReaderOptions::new()
                .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required),
        )
        .unwrap();
        let mut pages = Vec::new();
        if let Some(ci) = b.metadata().page_index().and_then(|p| p.column_index(0, 0)) {
            for p in 0..usize::try_from(ci.num_pages()).unwrap() {
                pages.push(match ci {
                    parquet::file::page_index::column_index::ColumnIndexMetaData::INT32(c) => c
                        .min_value(p)
                        .map(|&lo| (i64::from(lo), i64::from(*c.max_value(p).unwrap()))),
                    parquet::file::page_index::column_index::ColumnIndexMetaData::INT64(c) => {
                        c.min_value(p).map(|&lo| (lo, *c.max_value(p).unwrap()))
                    }
                    other => panic!("a column index of another type: {other:?}"),
                });
            }
        }
        let mut out = Vec::new();
        for batch in b.build().unwrap() {
            let col = batch.unwrap().column(0).clone();
            if let Some(a) = col.as_any().downcast_ref::<Int64Array>() {
                out.extend((0..a.len()).map(|i| (!a.is_null(i)).then(|| a.value(i))));
            } else {
                let a = col.as_any().downcast_ref::<Int32Array>().unwrap();
                out.extend((0..a.len()).map(|i| (!a.is_null(i)).then(|| i64::from(a.value(i)))));
            }
        }
        (out, stats, nulls, pages)
    }

    /// Round trip `rows` every way (both codecs families, whole and in pieces) and check the
    /// values, the chunk's statistics and each page's.
    fn check<T: DeltaInt + std::fmt::Debug + Into<i64>>(rows: &[Option<T>], nullable: bool) {
        let want: Vec<Option<i64>> = rows.iter().map(|v| v.map(Into::into)).collect();
        let present: Vec<i64> = want.iter().flatten().copied().collect();
        let want_stats = present
            .iter()
            .min()
            .map(|&lo| (lo, *present.iter().max().unwrap()));
        let want_pages: Vec<Option<(i64, i64)>> = want
            .chunks(PAGE_ROWS)
            .map(|p| {
                let v: Vec<i64> = p.iter().flatten().copied().collect();
                v.iter().min().map(|&lo| (lo, *v.iter().max().unwrap()))
            })
            .collect();
        for codec in [
            Compression::UNCOMPRESSED,
            Compression::SNAPPY,
            Compression::LZ4_RAW,
            Compression::ZSTD(ZstdLevel::default()),
        ] {
            for step in [rows.len(), 1000, 7] {
                if step == 7 && rows.len() > 5000 {
                    continue;
                }
                let (got, stats, nulls, pages) = round_trip(rows, nullable, codec, step);
                assert_eq!(got, want, "{codec:?}, {step} rows at a time");
                assert_eq!(stats, want_stats, "{codec:?}");
                assert_eq!(nulls, (want.len() - present.len()) as u64);
                assert_eq!(pages, want_pages, "{codec:?}: the column index");
            }
        }
    }

    /// A pseudo-random sequence (xorshift), for values of every bit width.
    fn noise(n: usize, seed: u64) -> Vec<u64> {
        let mut rng = crate::numeric::Rng(seed | 1);
        (0..n).map(|_| rng.next_u64()).collect()
    }

    #[test]
    fn the_encoding_round_trips_through_the_parquet_crates_reader() {
        // Lengths around the block and miniblock edges (one value: a header and no block).
        for n in [
            0usize, 1, 2, 31, 32, 33, 64, 65, 127, 128, 129, 255, 256, 257, 1000,
        ] {
            let v64: Vec<Option<i64>> = (0..i64::try_from(n).unwrap())
                .map(|i| Some(i * i - 500))
                .collect();
            check(&v64, false);
            let v32: Vec<Option<i32>> = (0..i32::try_from(n).unwrap())
                .map(|i| Some(-3 * i))
                .collect();
            check(&v32, true);
        }
        // All equal: deltas of 0, miniblocks of width 0.
        check(&vec![Some(7i64); 300], false);
        check(&vec![Some(-7i32); 300], false);
        // Deltas that wrap: the extremes one after the other, and back.
        let ext64 = [
            i64::MIN,
            i64::MAX,
            i64::MIN,
            0,
            -1,
            i64::MAX,
            1,
            i64::MIN,
            i64::MIN,
        ];
        let rows: Vec<Option<i64>> = ext64.iter().cycle().take(700).map(|&v| Some(v)).collect();
        check(&rows, false);
        let ext32 = [i32::MIN, i32::MAX, i32::MIN, 0, -1, i32::MAX, 1, i32::MIN];
        let rows: Vec<Option<i32>> = ext32.iter().cycle().take(700).map(|&v| Some(v)).collect();
        check(&rows, true);
        // Every width: random values masked to 0..=64 (32) bits, negative ones too.
        for bits in 0..=64u32 {
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            let rows: Vec<Option<i64>> = noise(300, u64::from(bits) + 1)
                .iter()
                .map(|&x| Some((x & mask).cast_signed()))
                .collect();
            check(&rows, false);
            if bits <= 32 {
                let rows: Vec<Option<i32>> = noise(300, u64::from(bits) + 99)
                    .iter()
                    .map(|&x| Some(u32::try_from(x & mask).unwrap().cast_signed()))
                    .collect();
                check(&rows, false);
            }
        }
    }

    #[test]
    fn nulls_pages_and_statistics_are_the_ones_readers_expect() {
        // Pages of PAGE_ROWS rows: times that grow with some noise, nulls here and there, a
        // page all nulls (a page without values), and a last short page.
        let n = PAGE_ROWS * 3 + 777;
        let r = noise(n, 5);
        let rows: Vec<Option<i64>> = (0..n)
            .map(|i| {
                let all_null = (PAGE_ROWS..2 * PAGE_ROWS).contains(&i);
                (!all_null && !r[i].is_multiple_of(17)).then(|| {
                    1_795_000_000_000_000_000
                        + i64::try_from(i).unwrap() * 25_000
                        + i64::try_from(r[i] % 5000).unwrap()
                })
            })
            .collect();
        check(&rows, true);
        // Without nulls: pages straight from the caller's rows and from the page buffer.
        let rows: Vec<Option<i32>> = (0..n).map(|i| Some((r[i] % 64) as i32 - 32)).collect();
        check(&rows, false);
        check(&rows, true);
        // Only nulls.
        check::<i64>(&vec![None; 1000], true);
    }

    #[test]
    fn a_page_is_the_bytes_the_spec_gives() {
        // 1, 2, 3, 4, 5 (the spec's first example): deltas all 1, min delta 1, width 0.
        let mut out = Vec::new();
        assert_eq!(encode(&[1i32, 2, 3, 4, 5], &mut out), Some((1, 5)));
        assert_eq!(out, [128, 1, 4, 5, 2, 2, 0, 0, 0, 0]);
        // 7, 5, 3, 1, 2, 3, 4, 5: deltas -2 -2 -2 1 1 1 1, min -2, so 0 0 0 3 3 3 3 at 2 bits.
        let mut out = Vec::new();
        assert_eq!(encode(&[7i32, 5, 3, 1, 2, 3, 4, 5], &mut out), Some((1, 7)));
        let mut want = vec![128, 1, 4, 8, 14, 3, 2, 0, 0, 0];
        // 32 values of 2 bits: 0,0,0,3 | 3,3,3,0 ... (padding zeros) = 0xC0, 0x3F, then zeros.
        want.extend([0xC0, 0x3F]);
        want.extend([0; 6]);
        assert_eq!(out, want);
        // No values: the header alone.
        let mut out = Vec::new();
        assert_eq!(encode::<i64>(&[], &mut out), None);
        assert_eq!(out, [128, 2, 4, 0, 0]);
    }

    #[test]
    fn bad_calls_are_errors_not_panics() {
        let schema = Arc::new(parse_message_type("message m { required int64 x; }").unwrap());
        let descr = parquet::schema::types::SchemaDescriptor::new(schema).column(0);
        let mut col = DeltaColumn::<i64>::new(descr, Compression::SNAPPY, vec![1, 2, 3]).unwrap();
        assert!(
            col.write(&[1, 2], Some(&[true, false])).is_err(),
            "null in a required column"
        );
        let schema = Arc::new(parse_message_type("message m { optional int64 x; }").unwrap());
        let descr = parquet::schema::types::SchemaDescriptor::new(schema).column(0);
        let mut col = DeltaColumn::<i64>::new(descr, Compression::SNAPPY, vec![1, 2, 3]).unwrap();
        assert!(
            col.write(&[1, 2], Some(&[true])).is_err(),
            "validity of another length"
        );
        assert!(col.finish().is_ok());
    }

    /// Column 0's page index as a reader sees it: the boundary order, each page's (null page,
    /// null count, min, max), and each page's first row.
    #[expect(
        clippy::type_complexity,
        reason = "a test helper's tuple of what the reader saw, taken apart by each test"
    )]
    fn page_index_of(
        file: Bytes,
    ) -> (
        Option<BoundaryOrder>,
        Vec<(bool, Option<i64>, Option<i64>, Option<i64>)>,
        Vec<i64>,
    ) {
        use parquet::file::page_index::column_index::ColumnIndexMetaData;
        use parquet::file::serialized_reader::ReadOptionsBuilder;
        let reader = SerializedFileReader::new_with_options(
            file,
            ReadOptionsBuilder::new().with_page_index().build(),
        )
        .unwrap();
        let index = reader.metadata().page_index().unwrap().clone();
        let ci = index.column_index(0, 0).unwrap();
        let ColumnIndexMetaData::INT64(c) = ci else {
            panic!("an INT64 column index")
        };
        let pages = (0..usize::try_from(ci.num_pages()).unwrap())
            .map(|p| {
                (
                    ci.is_null_page(p),
                    ci.null_count(p),
                    c.min_value(p).copied(),
                    c.max_value(p).copied(),
                )
            })
            .collect();
        let first_rows = index
            .offset_index(0, 0)
            .unwrap()
            .page_locations()
            .iter()
            .map(|l| l.first_row_index)
            .collect();
        (ci.get_boundary_order(), pages, first_rows)
    }

    /// The data pages' bytes of column 0 of a file (uncompressed, as a reader gets them).
    fn pages_of(file: Bytes) -> Vec<(u32, Vec<u8>)> {
        let reader = SerializedFileReader::new(file).unwrap();
        let mut pages = Vec::new();
        let mut pr = reader
            .get_row_group(0)
            .unwrap()
            .get_column_page_reader(0)
            .unwrap();
        while let Some(p) = pr.get_next_page().unwrap() {
            assert_eq!(p.encoding(), Encoding::DELTA_BINARY_PACKED);
            pages.push((p.num_values(), p.buffer().to_vec()));
        }
        pages
    }

    #[test]
    fn pages_are_byte_for_byte_the_parquet_crates() {
        use parquet::data_type::Int64Type;
        use parquet::file::properties::EnabledStatistics;
        let n = PAGE_ROWS * 2 + 300;
        let r = noise(n, 11);
        let values: Vec<i64> = (0..n)
            .map(|i| {
                i64::try_from(i).unwrap() * 20_000 + i64::try_from(r[i] % 5_000).unwrap()
                    - if i % 7 == 0 { 1 << 40 } else { 0 }
            })
            .collect();
        let valid: Vec<bool> = (0..n).map(|i| !r[i].is_multiple_of(13)).collect();
        let schema = Arc::new(parse_message_type("message m { optional int64 x; }").unwrap());
        // The crate's column writer, pages cut at the same rows.
        let props = Arc::new(
            WriterProperties::builder()
                .set_dictionary_enabled(false)
                .set_encoding(Encoding::DELTA_BINARY_PACKED)
                .set_data_page_row_count_limit(PAGE_ROWS)
                .set_write_batch_size(PAGE_ROWS)
                .set_statistics_enabled(EnabledStatistics::Page)
                .build(),
        );
        let mut file =
            SerializedFileWriter::new(Vec::new(), schema.clone(), props.clone()).unwrap();
        let mut rg = file.next_row_group().unwrap();
        let mut w = rg.next_column().unwrap().unwrap();
        let present: Vec<i64> = values
            .iter()
            .zip(&valid)
            .filter_map(|(&v, &ok)| ok.then_some(v))
            .collect();
        let levels: Vec<i16> = valid.iter().map(|&ok| i16::from(ok)).collect();
        w.typed::<Int64Type>()
            .write_batch(&present, Some(&levels), None)
            .unwrap();
        w.close().unwrap();
        rg.close().unwrap();
        let theirs_file = Bytes::from(file.into_inner().unwrap());
        let theirs = pages_of(theirs_file.clone());
        // Ours.
        let mut file = SerializedFileWriter::new(Vec::new(), schema, props).unwrap();
        let descr = file.schema_descr().column(0);
        let mut rg = file.next_row_group().unwrap();
        let mut col =
            DeltaColumn::<i64>::new(descr, Compression::UNCOMPRESSED, Vec::new()).unwrap();
        col.write(&values, Some(&valid)).unwrap();
        let (bytes, close) = col.finish().unwrap();
        rg.append_column(&bytes, close).unwrap();
        rg.close().unwrap();
        let ours_file = Bytes::from(file.into_inner().unwrap());
        let ours = pages_of(ours_file.clone());
        assert_eq!(ours.len(), 3);
        assert_eq!(ours, theirs);
        // The page index (min/max and null count per page, boundary order, page rows) too.
        let index = page_index_of(ours_file.clone());
        assert_eq!(index.0, Some(BoundaryOrder::ASCENDING));
        assert_eq!(index, page_index_of(theirs_file.clone()));
        // And the chunk's statistics (min, max, null count, as old readers see them too).
        let stats = |f: Bytes| {
            let r = SerializedFileReader::new(f).unwrap();
            r.metadata().row_group(0).column(0).statistics().cloned()
        };
        let ours = stats(ours_file).unwrap();
        assert_eq!(Some(ours.clone()), stats(theirs_file));
        assert_eq!(
            ours.null_count_opt(),
            Some(valid.iter().filter(|v| !**v).count() as u64)
        );
    }
}
