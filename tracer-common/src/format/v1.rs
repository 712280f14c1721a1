//! Version 1 records frames (read only): the uncompressed body's length (u32 LE), then the
//! body compressed with zstd. The body is the chunk's tables, then each record as varints:
//! its first [`NCOLS_V3`] columns in order (the [`SIGNED`] ones zigzagged; no queue time for an IO
//! never issued), then its extras (error, requeue count) as its flags say.

use super::MAX_FRAME_BYTES;
use super::chunk::{ChunkTables, TaskIds, bad, read_tables};
use super::codec::{Cursor, unzigzag};
use super::columns::{
    COL_HEAD, COL_QUEUE_NS, Deltas, NCOLS, NCOLS_V3, Row, SIGNED, from_row, never_issued,
};
use super::record::IoRecord;

/// Decompress a records frame's payload into `raw` and decode it into `out` (appended), its
/// tasks mapped to `ids`; returns the number of records, or why the frame does not decode.
pub(super) fn decode(
    payload: &[u8],
    decompressor: &mut zstd::bulk::Decompressor<'static>,
    raw: &mut Vec<u8>,
    ids: &mut TaskIds,
    out: &mut Vec<IoRecord>,
) -> Result<u32, String> {
    if payload.len() < 4 {
        return Err("records frame too short".to_string());
    }
    let raw_len = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes")) as usize;
    if raw_len > MAX_FRAME_BYTES as usize {
        return Err("implausible decompressed size".to_string());
    }
    raw.clear();
    raw.reserve(raw_len);
    match decompressor.decompress_to_buffer(&payload[4..], raw) {
        Ok(n) if n == raw_len => decode_raw(raw, ids, out),
        Ok(n) => Err(format!("decompressed {n} bytes, header says {raw_len}")),
        Err(e) => Err(format!("zstd: {e}")),
    }
}

fn decode_raw(raw: &[u8], ids: &mut TaskIds, out: &mut Vec<IoRecord>) -> Result<u32, String> {
    let mut c = Cursor::new(raw);
    let t: ChunkTables = read_tables(&mut c, ids)?;
    // A version 1 record takes at least 9 bytes (nine varints).
    if t.count as usize > c.remaining() / 9 {
        return Err(bad("more records than the frame holds"));
    }
    out.reserve(t.count as usize);
    let mut deltas = Deltas::start(t.base);
    for _ in 0..t.count {
        let r = read_row(&mut c).and_then(|row| from_row(|col| row[col], &mut deltas, &t, &mut c));
        out.push(r.ok_or_else(|| bad("record does not decode"))?);
    }
    if !c.at_end() {
        return Err(bad("trailing bytes after the last record"));
    }
    Ok(t.count)
}

/// One record's columns; its extras follow.
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "the start of the version 1 reader's per-record loop, which builds the row in \
              registers"
)]
fn read_row(c: &mut Cursor) -> Option<Row> {
    let mut row = [0u64; NCOLS];
    row[COL_HEAD] = c.varint()?;
    // Columns past NCOLS_V3 (the hardware queue, the file) are 0: unknown.
    for col in COL_HEAD + 1..NCOLS_V3 {
        if col == COL_QUEUE_NS && never_issued(row[COL_HEAD]) {
            continue;
        }
        let v = c.varint()?;
        row[col] = if SIGNED[col] {
            unzigzag(v).cast_unsigned()
        } else {
            v
        };
    }
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::chunk::TableBuilder;
    use crate::format::codec::{put_varint, zigzag};
    use crate::format::columns::to_row;
    use crate::op::{Op, flags};

    /// A version 1 frame laid out as version 1 writers did, from the rows the writer makes now:
    /// the v1 reader decodes the records back, errors, requeues, IOs never issued, odd sizes
    /// and times running backwards included (the golden v1 traces have few of these).
    #[test]
    fn rows_laid_out_as_version_1_read_back() {
        let records: Vec<IoRecord> = (0..300u64)
            .map(|i| IoRecord {
                complete_ns: if i % 7 == 3 {
                    1 << 40
                } else {
                    (1 << 41) + i * 1000
                },
                enter_ns: (1 << 39) + i,
                issue_ns: if i % 5 == 0 { 0 } else { (1 << 40) - i },
                sector: if i % 11 == 0 { u64::MAX - i } else { i * 8 },
                bytes: if i % 3 == 0 { 1000 } else { 4096 },
                pid: (i % 4) as u32,
                error: if i % 13 == 0 { -5 } else { 0 },
                requeues: u16::from(i % 17 == 0) * 3,
                dev: crate::dev_join(8, (i % 2) as u32),
                flags: if i % 5 == 0 {
                    flags::NEVER_ISSUED
                } else {
                    flags::SYNC
                },
                op: Op::from_code((i % 4) as u8),
                ..IoRecord::default()
            })
            .collect();
        let mut tables = TableBuilder::default();
        let base = records[0].complete_ns;
        let mut deltas = Deltas::start(base);
        let mut rows = Vec::new();
        for r in &records {
            let mut extras = Vec::new();
            let (dev, task) = (tables.dev(r.dev), tables.task(r.pid, &[b'x'; 16], 0, 0));
            let row = to_row(r, dev, task, 0, &mut deltas, &mut extras);
            rows.push((row, extras));
        }
        let mut body = Vec::new();
        tables.write(&mut body, u32::try_from(records.len()).unwrap(), base, 1);
        for (row, extras) in &rows {
            for (col, &v) in row[..NCOLS_V3].iter().enumerate() {
                if col == COL_QUEUE_NS && never_issued(row[COL_HEAD]) {
                    continue;
                }
                put_varint(
                    &mut body,
                    if SIGNED[col] {
                        zigzag(v.cast_signed())
                    } else {
                        v
                    },
                );
            }
            body.extend_from_slice(extras);
        }
        let mut payload = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
        payload.extend(zstd::bulk::compress(&body, 3).unwrap());

        let mut out = Vec::new();
        let mut ids = TaskIds::default();
        let n = decode(
            &payload,
            &mut zstd::bulk::Decompressor::new().unwrap(),
            &mut Vec::new(),
            &mut ids,
            &mut out,
        )
        .unwrap();
        assert_eq!(n as usize, records.len());
        let got: Vec<IoRecord> = out.iter().map(|r| IoRecord { task: 0, ..*r }).collect();
        assert_eq!(got, records);
        assert_eq!(ids.tasks.len(), 4);
    }
}
