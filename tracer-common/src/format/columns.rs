//! The one mapping between an [`IoRecord`] and the values of its columns: which field goes in
//! which column, relative to what, and which fields go to the extras instead. The writer
//! ([`to_row`]) and both readers ([`from_row`]) go through here, so they cannot disagree;
//! the versions differ only in how they lay a row out ([`super::v2`]: bit-packed blocks of
//! each column, [`super::v1`]: varints record after record).

use super::chunk::ChunkTables;
use super::codec::{Cursor, put_varint, unzigzag, zigzag};
use super::record::IoRecord;
use crate::op::{Op, flags};

/// Columns of a record, in the order a version 2 block and a version 1 record store them
/// (version 5 on: versions 1 to 3 store the first [`NCOLS_V3`], version 4 [`NCOLS_V4`]).
pub(super) const NCOLS: usize = 12;
/// Columns of version 4: all but the file.
pub(super) const NCOLS_V4: usize = 11;
/// Columns of versions 1 to 3: all but the hardware queue.
pub(super) const NCOLS_V3: usize = 10;
/// Op code (low 4 bits) | stored flags << 4.
pub(super) const COL_HEAD: usize = 0;
/// Completion time minus the previous record's (the chunk's base time for the first).
pub(super) const COL_COMPLETE: usize = 1;
/// Completion minus issue; for an IO never issued, completion minus entry.
pub(super) const COL_DEVICE_NS: usize = 2;
/// Issue minus entry; 0 for an IO never issued.
pub(super) const COL_QUEUE_NS: usize = 3;
/// Index into the chunk's device table.
pub(super) const COL_DEV: usize = 4;
/// First sector minus the previous record's end sector (0 for the first).
pub(super) const COL_SECTOR: usize = 5;
/// Size code: sectors << 1, or bytes << 1 | 1 when not a whole number of sectors.
pub(super) const COL_SIZE: usize = 6;
/// Index into the chunk's task table.
pub(super) const COL_TASK: usize = 7;
pub(super) const COL_DEV_INFLIGHT: usize = 8;
pub(super) const COL_OS_INFLIGHT: usize = 9;
/// The blk-mq hardware queue's index + 1; 0 if unknown (and in files before version 4).
pub(super) const COL_HW_QUEUE: usize = 10;
/// The file of the IO's data pages: its index in the chunk's file table + 1; 0 if none or
/// unknown (and in files before version 5).
pub(super) const COL_FILE: usize = 11;
/// Columns holding signed deltas (as u64, wrapping): version 2 takes their block minimum as
/// i64, version 1 stores them zigzagged.
pub(super) const SIGNED: [bool; NCOLS] = [
    false, true, false, false, false, true, false, false, false, false, false, false,
];

/// One record's column values.
pub(super) type Row = [u64; NCOLS];

/// Flags only the file has: they say which extras follow a record.
const EXTRAS_FLAGS: u16 = flags::HAS_ERROR | flags::REQUEUED;

/// What a record's deltas are taken from: the previous record of its chunk.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deltas {
    prev_complete: u64,
    prev_end_sector: u64,
}

impl Deltas {
    /// Before the first record of a chunk whose base time is `base_ns`.
    #[inline]
    pub(super) fn start(base_ns: u64) -> Deltas {
        Deltas {
            prev_complete: base_ns,
            prev_end_sector: 0,
        }
    }

    #[inline(always)]
    #[expect(
        clippy::inline_always,
        reason = "a step of the per-record loops of the writer and the readers"
    )]
    fn advance(&mut self, r: &IoRecord) {
        self.prev_complete = r.complete_ns;
        self.prev_end_sector = r.sector.wrapping_add(u64::from(r.bytes / 512));
    }
}

/// The flags a row's head stores.
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "a step of the readers' per-record loops"
)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "the head is the op's 4 bits and the 16 flag bits above them; wider only in a \
              damaged file, whose excess bits are dropped"
)]
pub(super) fn head_flags(head: u64) -> u16 {
    (head >> 4) as u16
}

/// Whether a row's head says the IO was never issued (then its queue time column is 0, and
/// version 1 leaves it out).
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "a step of the version 1 reader's per-record loop"
)]
#[cfg(feature = "v1")]
pub(super) fn never_issued(head: u64) -> bool {
    head_flags(head) & flags::NEVER_ISSUED != 0
}

/// The column values of `r`, whose device, task and file have indexes `dev`, `task` and
/// `file` (the file column's value) in the chunk's tables; its error and requeue count, when
/// not 0, are appended to `extras`.
#[inline]
pub(super) fn to_row(
    r: &IoRecord,
    dev: u32,
    task: u32,
    file: u32,
    d: &mut Deltas,
    extras: &mut Vec<u8>,
) -> Row {
    let mut fl = r.flags & !EXTRAS_FLAGS;
    if r.error != 0 {
        fl |= flags::HAS_ERROR;
    }
    if r.requeues != 0 {
        fl |= flags::REQUEUED;
    }
    if r.issue_ns == 0 {
        fl |= flags::NEVER_ISSUED;
    }
    let (device_ns, queue_ns) = if fl & flags::NEVER_ISSUED == 0 {
        (
            r.complete_ns.saturating_sub(r.issue_ns),
            r.issue_ns.saturating_sub(r.enter_ns),
        )
    } else {
        (r.complete_ns.saturating_sub(r.enter_ns), 0)
    };
    let size = if r.bytes.is_multiple_of(512) {
        u64::from(r.bytes / 512) << 1
    } else {
        (u64::from(r.bytes) << 1) | 1
    };
    let mut row = [0u64; NCOLS];
    row[COL_HEAD] = u64::from(r.op as u8) | (u64::from(fl) << 4);
    row[COL_COMPLETE] = r.complete_ns.wrapping_sub(d.prev_complete);
    row[COL_DEVICE_NS] = device_ns;
    row[COL_QUEUE_NS] = queue_ns;
    row[COL_DEV] = u64::from(dev);
    row[COL_SECTOR] = r.sector.wrapping_sub(d.prev_end_sector);
    row[COL_SIZE] = size;
    row[COL_TASK] = u64::from(task);
    row[COL_DEV_INFLIGHT] = u64::from(r.dev_inflight);
    row[COL_OS_INFLIGHT] = u64::from(r.os_inflight);
    row[COL_HW_QUEUE] = r.hw_queue.map_or(0, |q| u64::from(q) + 1);
    row[COL_FILE] = u64::from(file);
    if fl & flags::HAS_ERROR != 0 {
        put_varint(extras, zigzag(i64::from(r.error)));
    }
    if fl & flags::REQUEUED != 0 {
        put_varint(extras, u64::from(r.requeues));
    }
    d.advance(r);
    row
}

/// The record whose column `c` holds `col(c)`, its extras read from `extras`; `None` if it
/// does not decode (an index outside the chunk's tables, a size no u32 holds, extras cut
/// short: only a damaged file has one). A function rather than a [`Row`] so that version 2
/// reads each value straight from its unpacked block, with no copy per record.
#[inline(always)]
#[expect(
    clippy::inline_always,
    reason = "the body of the readers' per-record loops, inlined into each with its `col` so \
              that a column value is a plain load"
)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "table indexes are checked by `get` (on a 64-bit target usize holds any u64); the \
              in-flight counts were written from u32s, wider only in a damaged file"
)]
pub(super) fn from_row(
    col: impl Fn(usize) -> u64,
    d: &mut Deltas,
    t: &ChunkTables,
    extras: &mut Cursor,
) -> Option<IoRecord> {
    let head = col(COL_HEAD);
    let fl = head_flags(head);
    let complete = d.prev_complete.wrapping_add(col(COL_COMPLETE));
    let (issue, enter) = if fl & flags::NEVER_ISSUED == 0 {
        let issue = complete.wrapping_sub(col(COL_DEVICE_NS));
        (issue, issue.wrapping_sub(col(COL_QUEUE_NS)))
    } else {
        (0, complete.wrapping_sub(col(COL_DEVICE_NS)))
    };
    let bytes = size_of_code(col(COL_SIZE))?;
    let &(task, tk) = t.tasks.get(col(COL_TASK) as usize)?;
    let (error, requeues) = read_extras(fl, extras)?;
    let hw_queue = match col(COL_HW_QUEUE) {
        0 => None,
        q => Some(u16::try_from(q - 1).ok()?),
    };
    let (file_dev, file_ino, file_id) = match col(COL_FILE) {
        0 => (0, 0, 0),
        f => *t.files.get(usize::try_from(f - 1).ok()?)?,
    };
    let r = IoRecord {
        complete_ns: complete,
        enter_ns: enter,
        issue_ns: issue,
        sector: d.prev_end_sector.wrapping_add(col(COL_SECTOR)),
        bytes,
        pid: tk.pid,
        task,
        dev_inflight: col(COL_DEV_INFLIGHT) as u32,
        os_inflight: col(COL_OS_INFLIGHT) as u32,
        error,
        dev: *t.devs.get(col(COL_DEV) as usize)?,
        requeues,
        flags: fl & !EXTRAS_FLAGS,
        op: Op::from_code((head & 0xf) as u8),
        cgroup: tk.cgroup,
        owner_cgroup: tk.owner_cgroup,
        file_dev,
        file_ino,
        file_id,
        hw_queue,
    };
    d.advance(&r);
    Some(r)
}

/// Bytes of a size code; `None` for a size no u32 holds (only a damaged file has one).
#[inline]
fn size_of_code(code: u64) -> Option<u32> {
    let bytes = if code & 1 == 0 {
        (code >> 1).checked_mul(512)?
    } else {
        code >> 1
    };
    u32::try_from(bytes).ok()
}

/// The error and requeue count a record's flags say follow, in this order.
#[inline]
#[expect(
    clippy::cast_possible_truncation,
    reason = "written from an i32 and a u16: wider only in a damaged file"
)]
fn read_extras(fl: u16, c: &mut Cursor) -> Option<(i32, u16)> {
    let error = if fl & flags::HAS_ERROR != 0 {
        unzigzag(c.varint()?) as i32
    } else {
        0
    };
    let requeues = if fl & flags::REQUEUED != 0 {
        c.varint()? as u16
    } else {
        0
    };
    Some((error, requeues))
}
