//! `blkprof export --format iolog` and `iolog2`: fio's iolog versions 3 (each line stamped in
//! microseconds since the start, so that `fio --read_iolog` replays the pattern with its
//! timing) and 2 (the same IOs in submission order, untimed).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

use tracer_common::format::{IoRecord, TraceReader};
use tracer_common::op::{Op, StatGroup, flags};

use super::{ExportStats, RowExport};

/// Records are in completion order; an iolog wants submission order. Hold them in a heap for
/// this long (IOs slower than this are emitted late, in completion order).
const REORDER_NS: u64 = 30_000_000_000;

/// An IO to replay: (`enter_ns`, arrival sequence, op code, offset, length).
type Io = (u64, u64, u8, u64, u32);

pub(super) struct Iolog<'a> {
    out: &'a mut dyn Write,
    target: String,
    /// Version 3 (stamped) or 2.
    timed: bool,
    /// Earliest submission first.
    heap: BinaryHeap<Reverse<Io>>,
    /// The first IO's submission: time 0.
    t0: Option<u64>,
    last_us: u64,
    seq: u64,
}

impl<'a> Iolog<'a> {
    /// Writes the iolog's header (its device added and opened).
    pub(super) fn start(
        out: &'a mut dyn Write,
        target: String,
        timed: bool,
    ) -> std::io::Result<Iolog<'a>> {
        if timed {
            writeln!(out, "fio version 3 iolog")?;
            writeln!(out, "0 {target} add")?;
            writeln!(out, "0 {target} open")?;
        } else {
            writeln!(out, "fio version 2 iolog")?;
            writeln!(out, "{target} add")?;
            writeln!(out, "{target} open")?;
        }
        Ok(Iolog {
            out,
            target,
            timed,
            heap: BinaryHeap::new(),
            t0: None,
            last_us: 0,
            seq: 0,
        })
    }

    fn emit(&mut self, (enter, _, op, off, len): Io, t0: u64) -> std::io::Result<()> {
        let us = (enter.saturating_sub(t0) / 1_000).max(self.last_us);
        self.last_us = us;
        let stamp = if self.timed {
            format!("{us} ")
        } else {
            String::new()
        };
        let target = &self.target;
        let act = match op {
            0 => "read",
            1 => "write",
            2 => "trim",
            _ => "sync",
        };
        if op == 3 {
            // fio parses a line of three fields as a file action (add, open, close) and
            // refuses "sync" there: an IO action has an offset and a length, 0 and 0 for a
            // sync, as fio's own iologs write it.
            writeln!(self.out, "{stamp}{target} {act} 0 0")
        } else {
            writeln!(self.out, "{stamp}{target} {act} {off} {len}")
        }
    }
}

impl RowExport for Iolog<'_> {
    fn record(
        &mut self,
        _r: &TraceReader,
        rec: &IoRecord,
        stats: &mut ExportStats,
    ) -> std::io::Result<()> {
        let op = match (rec.stat_group(), rec.op) {
            (StatGroup::Flush, _) => 3u8,
            (_, Op::Read) => 0,
            (_, Op::Write) => 1,
            (_, Op::Discard) => 2,
            _ => {
                stats.skipped += 1;
                return Ok(());
            }
        };
        if rec.op == Op::Flush && rec.flags & flags::FLUSH_RQ == 0 {
            stats.skipped += 1; // absorbed empty flush: the device flush is replayed
            return Ok(());
        }
        if op < 3 && rec.bytes == 0 {
            // The empty write an fsync sends with its preflush: the device flush is replayed as
            // the sync, and fio 3.33 aborts on a zero-length IO.
            stats.skipped += 1;
            return Ok(());
        }
        // A sync has no offset (a flush's sector is the trace's sentinel); a data IO's sector
        // that no disk has (a damaged or crafted trace) has no byte offset to replay.
        let offset = if op == 3 {
            0
        } else if let Some(o) = rec.sector.checked_mul(512) {
            o
        } else {
            stats.skipped += 1;
            return Ok(());
        };
        let t = *self.t0.get_or_insert(rec.enter_ns);
        self.heap.push(Reverse((
            rec.enter_ns.max(t),
            self.seq,
            op,
            offset,
            rec.bytes,
        )));
        self.seq += 1;
        while let Some(Reverse(top)) = self.heap.peek() {
            if top.0.saturating_add(REORDER_NS) > rec.complete_ns {
                break;
            }
            let Some(Reverse(e)) = self.heap.pop() else {
                break;
            };
            self.emit(e, t)?;
            stats.written += 1;
        }
        Ok(())
    }

    fn finish(&mut self, stats: &mut ExportStats) -> std::io::Result<()> {
        if let Some(t) = self.t0 {
            while let Some(Reverse(e)) = self.heap.pop() {
                self.emit(e, t)?;
                stats.written += 1;
            }
        }
        let (last_us, target) = (self.last_us, &self.target);
        if self.timed {
            writeln!(self.out, "{last_us} {target} close")?;
        } else {
            writeln!(self.out, "{target} close")?;
        }
        self.out.flush()
    }
}
