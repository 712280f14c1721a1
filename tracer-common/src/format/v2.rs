//! Version 2 to 5 records frames (3 adds each task's cgroup to the task table, 4 the hardware
//! queue column, 5 each task's owner cgroup, the file table and the file column): the chunk's
//! tables, its extras (each record's error and requeue
//! count when not 0, as varints in record order: a length then the bytes), then blocks of
//! [`BLOCK_RECORDS`] records (the last one shorter), each holding the [`NCOLS`] columns
//! ([`NCOLS_V3`] before version 4) in order, bit-packed ([`pack_block`]). Not compressed: the packing is smaller than zstd over
//! varints and many times faster to read.

use super::BLOCK_RECORDS;
use super::chunk::{ChunkTables, TableBuilder, TaskIds, bad, read_tables};
use super::codec::{Cursor, MAX_PACKED, pack_block, put_varint, unpack_block, unzigzag};
use super::columns::{Deltas, NCOLS, NCOLS_V3, NCOLS_V4, SIGNED, from_row};
use super::record::IoRecord;

/// Append the body of a records frame of `count` records: `cols` holds each column's values
/// in record order.
pub(super) fn encode(
    body: &mut Vec<u8>,
    tables: &TableBuilder,
    count: u32,
    base_ns: u64,
    extras: &[u8],
    cols: &[Vec<u64>; NCOLS],
) {
    tables.write(body, count, base_ns, super::FORMAT_VERSION);
    put_varint(body, extras.len() as u64);
    body.extend_from_slice(extras);
    let n = count as usize;
    for start in (0..n).step_by(BLOCK_RECORDS) {
        let end = (start + BLOCK_RECORDS).min(n);
        for (c, col) in cols.iter().enumerate() {
            pack_block(body, &col[start..end], SIGNED[c]);
        }
    }
}

/// Decode the body of a records frame of a file of `version` into `out` (appended), its tasks
/// mapped to `ids`; returns the number of records, or why the frame does not decode.
pub(super) fn decode(
    raw: &[u8],
    version: u16,
    ids: &mut TaskIds,
    out: &mut Vec<IoRecord>,
) -> Result<u32, String> {
    // Columns a version lacks stay 0 (unknown).
    let ncols = match version {
        5.. => NCOLS,
        4 => NCOLS_V4,
        _ => NCOLS_V3,
    };
    let mut c = Cursor::new(raw);
    let t: ChunkTables = read_tables(&mut c, ids)?;
    let extras_len = c
        .varint()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| bad("no extras"))?;
    let extras = c.bytes(extras_len).ok_or_else(|| bad("short extras"))?;
    let mut xc = Cursor::new(extras);
    // Each column of a block costs at least 2 bytes: refuse counts the frame cannot hold
    // before reserving memory for them.
    let blocks = (t.count as usize).div_ceil(BLOCK_RECORDS);
    if blocks * ncols * 2 > raw.len() {
        return Err(bad("more records than the frame holds"));
    }
    out.reserve(t.count as usize);
    let mut vals = [[0u64; BLOCK_RECORDS]; NCOLS];
    let mut scratch = [0u8; MAX_PACKED + 16];
    let mut deltas = Deltas::start(t.base);
    let mut left = t.count as usize;
    while left > 0 {
        let n = left.min(BLOCK_RECORDS);
        for v in &mut vals[..ncols] {
            let min = c.varint().ok_or_else(|| bad("short block"))?;
            let bw = c
                .bytes(1)
                .map(|b| u32::from(b[0]))
                .filter(|&bw| bw <= 64)
                .ok_or_else(|| bad("bad bit width"))?;
            let packed = c
                .bytes((n * bw as usize).div_ceil(8))
                .ok_or_else(|| bad("short block"))?;
            unpack_block(
                packed,
                bw,
                unzigzag(min).cast_unsigned(),
                v,
                n,
                &mut scratch,
            );
        }
        if !records_of_block(&vals, n, &mut deltas, &t, &mut xc, out) {
            return Err(bad("record does not decode"));
        }
        left -= n;
    }
    if !c.at_end() || !xc.at_end() {
        return Err(bad("trailing bytes after the last record"));
    }
    Ok(t.count)
}

/// Append the `n` records of an unpacked block to `out`; false if one does not decode. A
/// function of its own so that the per-record loop keeps its state in registers (measured:
/// inlined in [`decode`], it spilled more).
#[inline(never)]
fn records_of_block(
    vals: &[[u64; BLOCK_RECORDS]; NCOLS],
    n: usize,
    deltas: &mut Deltas,
    t: &ChunkTables,
    extras: &mut Cursor,
    out: &mut Vec<IoRecord>,
) -> bool {
    #[expect(
        clippy::needless_range_loop,
        reason = "record i takes the i-th value of every column"
    )]
    for i in 0..n.min(BLOCK_RECORDS) {
        let Some(r) = from_row(|col| vals[col][i], deltas, t, extras) else {
            return false;
        };
        out.push(r);
    }
    true
}
