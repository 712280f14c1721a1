//! Version 1 records frames (read only): the uncompressed body's length (u32 LE), then the
//! body compressed with zstd. The body is the chunk's tables, then each record as varints:
//! its [`NCOLS`] columns in order (the [`SIGNED`] ones zigzagged; no queue time for an IO
//! never issued), then its extras (error, requeue count) as its flags say.

use super::MAX_FRAME_BYTES;
use super::chunk::{ChunkTables, TaskIds, bad, read_tables};
use super::codec::{Cursor, unzigzag};
use super::columns::{COL_HEAD, COL_QUEUE_NS, Deltas, NCOLS, Row, SIGNED, from_row, never_issued};
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
        let r = read_row(&mut c).and_then(|row| from_row(&row, &mut deltas, &t, &mut c));
        out.push(r.ok_or_else(|| bad("record does not decode"))?);
    }
    if !c.at_end() {
        return Err(bad("trailing bytes after the last record"));
    }
    Ok(t.count)
}

/// One record's columns; its extras follow.
#[inline(always)]
fn read_row(c: &mut Cursor) -> Option<Row> {
    let mut row = [0u64; NCOLS];
    row[COL_HEAD] = c.varint()?;
    for col in COL_HEAD + 1..NCOLS {
        if col == COL_QUEUE_NS && never_issued(row[COL_HEAD]) {
            continue;
        }
        let v = c.varint()?;
        row[col] = if SIGNED[col] { unzigzag(v) as u64 } else { v };
    }
    Some(row)
}
