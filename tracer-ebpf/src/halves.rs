//! Half records (docs/design/records-without-shared-state.md): no per-request state and no
//! in-flight counters in the kernel. Each program writes what it alone knows to the ring of its
//! CPU (in the CPU's batch of halves, `HALFBATCH`); user space joins the halves by (request
//! address, the kernel's start stamp) and counts the requests in flight from their instants.
//! Devices on this path have the kernel stamp every request's start (iostats on).

#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand each program its context by value"
)]

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid,
        generated::{bpf_get_current_cgroup_id, bpf_get_smp_processor_id},
    },
    macros::{btf_tracepoint, raw_tracepoint},
    maps::RingBuf,
    programs::{BtfTracePointContext, RawTracePointContext},
};
use tracer_common::{
    AGG_FLUSH_RQ, AGG_NOT_ACCOUNTED, AggKey, Counter, Cuts, END_LAST, END_OFF_DEVICE, END_PART,
    EV_NOT_ACCOUNTED, EV_OUTSIDE_CUT, EndHalf, HALF_BATCH_BYTES, HALF_END, HALF_ISSUE, HALF_LOST,
    HALF_MERGE, HALF_REQUEUE, HALF_RINGS, HALF_START, HalfBatch, HalfHead, IssueHalf,
    KIND_FLUSH_RQ, KIND_IO, MarkHalf, START_AT_ISSUE, StartHalf,
};

use crate::aggregates::{aggregate, count_io};
use crate::files::file_of;
use crate::kernel::{
    bits_of, cfg_u32, config, current_comm, hw_queue, load, now_ns, owner_cgroup, rq_arg,
    skipped_for_test, traced_dev,
};
use crate::maps::{
    BPF_RB_AVAIL_DATA, BPF_RB_NO_WAKEUP, CUTS, HALFBATCH, HALFLOST, HALVES0, HALVES1, HALVES2,
    HALVES3, HALVES4, HALVES5, HALVES6, HALVES7, HOT0, HOT1, HOT2, HOT3, HOT4, HOT5, HOT6, HOT7,
    SCRATCH_COMPLETE, SCRATCH_IO_START, SCRATCH_ISSUE, SCRATCH_MERGE, SCRATCH_REQUEUE, bump,
    bump_by,
};

/// This CPU's small ring and its large one.
#[inline(always)]
fn cpu_rings() -> (&'static RingBuf, &'static RingBuf) {
    // SAFETY: a helper without preconditions.
    match unsafe { bpf_get_smp_processor_id() } as usize % HALF_RINGS {
        0 => (&HOT0, &HALVES0),
        1 => (&HOT1, &HALVES1),
        2 => (&HOT2, &HALVES2),
        3 => (&HOT3, &HALVES3),
        4 => (&HOT4, &HALVES4),
        5 => (&HOT5, &HALVES5),
        6 => (&HOT6, &HALVES6),
        _ => (&HOT7, &HALVES7),
    }
}

/// Whether `hot` has room for a record of `bytes` without a failed reservation: a small ring
/// found full stays full until the next drain, so while it holds nearly its size (less twice
/// the record) the large ring is taken at once rather than through a reservation that fails
/// under the ring's lock (a few loads against ~40 ns at saturation).
#[inline(always)]
fn hot_has_room(hot: &RingBuf, bytes: usize) -> bool {
    hot.query(BPF_RB_AVAIL_DATA)
        <= u64::from(cfg_u32(&config().hot_ring_bytes)).saturating_sub(2 * bytes as u64)
}

/// The loss class of a half counted in `lost`, named or not (see [`BATCH_LOSS_CLASSES`]).
#[inline(always)]
fn loss_class(lost: Counter, name: bool) -> usize {
    match lost {
        Counter::SubmitterLost => 0,
        Counter::HalfDrops if name => 1,
        Counter::HalfDrops => 2,
        Counter::MergeHalfDrops => 3,
        _ => 4,
    }
}

/// Add `half` (whose head is `head`, its instant `at_ns`) to this CPU's batch, writing the
/// batch to the rings first if the half does not fit. A program that interrupted another one
/// of this CPU inside the batch writes its half to the rings itself ([`write_half_direct`]).
#[inline(always)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "a batch holds at most HALF_BATCH_BYTES"
)]
fn write_half<T: 'static>(half: T, head: HalfHead, at_ns: u64, lost: Counter, name: bool) {
    let Some(b) = HALFBATCH.get_ptr_mut(0) else {
        write_half_direct(half, head, at_ns, lost, name);
        return;
    };
    let class = loss_class(lost, name);
    // SAFETY: `b` is this CPU's batch (see `maps`). Programs of this CPU nest (an interrupt's
    // completion inside a submission) but do not interleave otherwise: one that sees `busy` clear
    // runs to its end before the one it interrupted goes on.
    unsafe {
        if core::ptr::read_volatile(&raw const (*b).busy) != 0 {
            write_half_direct(half, head, at_ns, lost, name);
            return;
        }
        core::ptr::write_volatile(&raw mut (*b).busy, 1);
        let mut len = core::ptr::read_volatile(&raw const (*b).len) as usize;
        if len > HALF_BATCH_BYTES - size_of::<T>() {
            flush_batch(b, len);
            len = 0;
        }
        // The earliest instant in the batch: a program that stamped its half and was then
        // interrupted adds it after the interrupting programs' later halves.
        if len == 0 || at_ns < core::ptr::read_volatile(&raw const (*b).first_ns) {
            core::ptr::write_volatile(&raw mut (*b).first_ns, at_ns);
        }
        // Volatile, as every access between setting `busy` and clearing it, so that none is
        // moved past the clearing. Aligned: `buf` is at 40 and every half a multiple of 8.
        core::ptr::write_volatile((&raw mut (*b).buf).cast::<u8>().add(len).cast::<T>(), half);
        if let Some(n) = (*b).lost.get_mut(class) {
            core::ptr::write_volatile(n, core::ptr::read_volatile(n) + 1);
        }
        core::ptr::write_volatile(&raw mut (*b).len, (len + size_of::<T>()) as u32);
        core::ptr::write_volatile(&raw mut (*b).busy, 0);
    }
}

/// Write this CPU's batch (`len` bytes of halves) to its small ring, else to its large one;
/// with both full its halves are counted lost by class and the batch goes whole to the ring
/// of lost marks, where the join names each half's request and instant. The caller holds
/// `busy` and empties the batch.
///
/// # Safety
/// `b` is this CPU's batch, held busy.
#[inline(always)]
unsafe fn flush_batch(b: *mut HalfBatch, len: usize) {
    // SAFETY: `b` is this CPU's batch and the caller holds it busy (this function's contract);
    // `len` is checked against the buffer's size before the slice is made.
    unsafe {
        let lost = core::ptr::read_volatile(&raw const (*b).lost);
        core::ptr::write_volatile(&raw mut (*b).lost, [0; 6]);
        if len == 0 || len > HALF_BATCH_BYTES {
            return;
        }
        let data = core::slice::from_raw_parts((&raw const (*b).buf).cast::<u8>(), len);
        let (hot, large) = cpu_rings();
        if hot_has_room(hot, len) && hot.output::<[u8]>(data, BPF_RB_NO_WAKEUP).is_ok() {
            return;
        }
        if large.output::<[u8]>(data, BPF_RB_NO_WAKEUP).is_ok() {
            return;
        }
        bump_by(Counter::SubmitterLost, lost[0]);
        bump_by(Counter::HalfDrops, lost[1] + lost[2]);
        bump_by(Counter::MergeHalfDrops, lost[3]);
        bump_by(Counter::RingDrops, lost[4]);
        let named = lost[0] + lost[1] + lost[3] + lost[4];
        if named != 0 && HALFLOST.output::<[u8]>(data, BPF_RB_NO_WAKEUP).is_err() {
            bump_by(Counter::LostUnnamed, named);
        }
    }
}

/// Run by the daemon on each CPU before a drain (never attached): this CPU's batch to its
/// ring. Returns 1 if it interrupted a program inside the batch (the daemon tries again).
#[raw_tracepoint(tracepoint = "blkprof_flush_halves")]
fn blkprof_flush_halves(_ctx: RawTracePointContext) -> i32 {
    let Some(b) = HALFBATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: as in `write_half`.
    unsafe {
        if core::ptr::read_volatile(&raw const (*b).busy) != 0 {
            return 1;
        }
        core::ptr::write_volatile(&raw mut (*b).busy, 1);
        let len = core::ptr::read_volatile(&raw const (*b).len) as usize;
        if len != 0 {
            flush_batch(b, len);
            core::ptr::write_volatile(&raw mut (*b).len, 0);
        }
        core::ptr::write_volatile(&raw mut (*b).busy, 0);
    }
    0
}

/// Write `half` (whose head is `head`, its instant `at_ns`) to this CPU's small ring, else to
/// its large one; with both full it is dropped, counted in `lost`, and, if `name`, the request
/// and instant are named on the ring of lost marks (see [`HALF_LOST`]).
#[inline(always)]
fn write_half_direct<T: 'static>(half: T, head: HalfHead, at_ns: u64, lost: Counter, name: bool) {
    let (hot, large) = cpu_rings();
    let hot = if hot_has_room(hot, size_of::<T>()) {
        hot.reserve::<T>(0)
    } else {
        None
    };
    if let Some(mut e) = hot {
        e.write(half);
        e.submit(BPF_RB_NO_WAKEUP);
        return;
    }
    let entry = large.reserve::<T>(0);
    match entry {
        Some(mut e) => {
            e.write(half);
            e.submit(BPF_RB_NO_WAKEUP);
        }
        None if !name => bump(lost),
        None => {
            bump(lost);
            match HALFLOST.reserve::<MarkHalf>(0) {
                Some(mut e) => {
                    e.write(MarkHalf {
                        head: HalfHead {
                            half: head.half | HALF_LOST,
                            ..head
                        },
                        at_ns,
                    });
                    e.submit(BPF_RB_NO_WAKEUP);
                }
                None => bump(Counter::LostUnnamed),
            }
        }
    }
}

#[inline(always)]
fn half_head(half: u32, dev: u32, key: u64, start_ns: u64) -> HalfHead {
    HalfHead {
        half,
        dev,
        key,
        start_ns,
    }
}

#[btf_tracepoint(function = "block_io_start")]
fn blkprof_start_half(ctx: BtfTracePointContext) -> i32 {
    try_start_half(&ctx);
    0
}

fn try_start_half(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let dev = traced_dev(cfg, rq)?;
    let key = bits_of(rq, SCRATCH_IO_START);
    write_start_half(
        dev,
        key,
        load(rq, cfg_u32(&cfg.rq_start_time_ns)),
        now_ns(),
        0,
    );
    Some(())
}

/// The start half, at `at_ns`, with `flags` ([`START_AT_ISSUE`] or 0): the current task is
/// the request's submitter.
#[inline(always)]
#[expect(
    clippy::cast_ptr_alignment,
    reason = "unaligned stores into a byte array"
)]
fn write_start_half(dev: u32, key: u64, start_ns: u64, at_ns: u64, flags: u32) {
    let [c0, c1] = current_comm();
    let mut comm = [0u8; 16];
    // SAFETY: two unaligned u64 stores inside a 16-byte local.
    unsafe {
        core::ptr::write_unaligned(comm.as_mut_ptr().cast::<u64>(), c0);
        core::ptr::write_unaligned(comm.as_mut_ptr().cast::<u64>().add(1), c1);
    }
    let head = half_head(HALF_START, dev, key, start_ns);
    write_half(
        StartHalf {
            head,
            // SAFETY: a helper without preconditions.
            cgroup: unsafe { bpf_get_current_cgroup_id() },
            comm,
            pid: (bpf_get_current_pid_tgid() >> 32) as u32,
            flags,
            at_ns,
        },
        head,
        at_ns,
        Counter::SubmitterLost,
        true,
    );
}

#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_issue_half(ctx: BtfTracePointContext) -> i32 {
    try_issue_half(&ctx);
    0
}

fn try_issue_half(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq = rq_arg::<0>(ctx);
    let dev = traced_dev(cfg, rq)?;
    let key = bits_of(rq, SCRATCH_ISSUE);
    let start_ns: u64 = load(rq, cfg_u32(&cfg.rq_start_time_ns));
    // This program's clock, as the in-kernel path takes it: the kernel's own issue stamp may
    // be the submitter's plug's cached clock, earlier than the start program ran.
    let issue_ns = now_ns();
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    if cmd_flags & cfg_u32(&cfg.req_op_mask) == cfg_u32(&cfg.req_op_flush)
        && rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0
    {
        // The block layer's own flush request, which no start event sees: its submitter is
        // the task that issues it. At the issue's instant, where the join replays a start
        // before an issue; a later clock read would have the issue met first, then the start
        // taken for a new request at the address (each flush a missed completion).
        write_start_half(dev, key, start_ns, issue_ns, START_AT_ISSUE);
    }
    let head = half_head(HALF_ISSUE, dev, key, start_ns);
    write_half(
        IssueHalf { head, issue_ns },
        head,
        issue_ns,
        Counter::HalfDrops,
        true,
    );
    Some(())
}

#[btf_tracepoint(function = "block_rq_requeue")]
fn blkprof_requeue_half(ctx: BtfTracePointContext) -> i32 {
    try_mark_half(&ctx, HALF_REQUEUE, SCRATCH_REQUEUE);
    0
}

#[btf_tracepoint(function = "block_rq_merge")]
fn blkprof_merge_half(ctx: BtfTracePointContext) -> i32 {
    try_mark_half(&ctx, HALF_MERGE, SCRATCH_MERGE);
    0
}

#[inline(always)]
fn try_mark_half(ctx: &BtfTracePointContext, half: u32, scratch: u32) -> Option<()> {
    let cfg = config();
    let rq = rq_arg::<0>(ctx);
    let dev = traced_dev(cfg, rq)?;
    let key = bits_of(rq, scratch);
    let head = half_head(half, dev, key, load(rq, cfg_u32(&cfg.rq_start_time_ns)));
    let at_ns = now_ns();
    write_half(
        MarkHalf { head, at_ns },
        head,
        at_ns,
        if half == HALF_MERGE {
            Counter::MergeHalfDrops
        } else {
            Counter::HalfDrops
        },
        true,
    );
    Some(())
}

#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_complete_half(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_complete_half(&ctx);
    0
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "the tracepoint's `error` (a one-byte blk_status_t) and `nr_bytes` (an unsigned int) \
              come in 64-bit argument slots"
)]
fn try_complete_half(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let error = i32::from(ctx.arg::<u64>(1) as u8);
    let nr_bytes: u32 = ctx.arg::<u64>(2) as u32;
    let dev = traced_dev(cfg, rq)?;
    let key = bits_of(rq, SCRATCH_COMPLETE);
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let flush_seq = rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0;
    let op = cmd_flags & cfg_u32(&cfg.req_op_mask);
    let flush_rq = op == cfg_u32(&cfg.req_op_flush) && flush_seq;
    let end = if flush_rq {
        END_LAST
    } else {
        let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
        let remaining: u32 = load(rq, cfg_u32(&cfg.rq_data_len));
        if !bio.is_null() && nr_bytes < remaining {
            END_PART
        } else if flush_seq {
            END_OFF_DEVICE
        } else {
            END_LAST
        }
    };
    let complete_ns = now_ns();
    let start_ns: u64 = load(rq, cfg_u32(&cfg.rq_start_time_ns));
    let accounted = rq_flags & cfg_u32(&cfg.rqf_io_stat) != 0;
    let mut issue_ns: u64 = load(rq, cfg_u32(&cfg.rq_io_start_time_ns));
    if issue_ns > complete_ns || issue_ns < start_ns {
        issue_ns = 0;
    }
    let mut flags = if accounted || flush_rq {
        0
    } else {
        EV_NOT_ACCOUNTED
    };
    let (inside, epoch) = CUTS.get(0).map_or((false, 0), |c| {
        (
            complete_ns > c.start_after_ns && complete_ns <= c.end_at_ns,
            Cuts::epoch_of(c.rotation, complete_ns),
        )
    });
    if !inside {
        flags |= EV_OUTSIDE_CUT;
    }
    // The exact totals, as the `--no-records` program keeps them (its histograms aside: the
    // records have every latency), without a slot for a request completed in parts: each part
    // adds its bytes where it completes (as the kernel's own counters do), the last part the IO.
    if inside {
        let agg_key = AggKey {
            dev,
            op: op
                | if flush_rq { AGG_FLUSH_RQ } else { 0 }
                | if flags & EV_NOT_ACCOUNTED != 0 {
                    AGG_NOT_ACCOUNTED
                } else {
                    0
                }
                | epoch,
        };
        let enter_ns = if accounted || flush_rq { start_ns } else { 0 };
        match aggregate(&agg_key) {
            Some(a) if end == END_LAST => {
                count_io(a, u64::from(nr_bytes), enter_ns, complete_ns);
            }
            // SAFETY: `a` is an aggregate of this CPU (see `maps`), and the completion program, its
            // only writer, does not nest.
            Some(a) => unsafe { (*a).bytes += u64::from(nr_bytes) },
            None => bump(Counter::AggregateMapFull),
        }
    }
    let (file_dev, file_ino) = if end == END_LAST {
        file_of(cfg, rq)
    } else {
        (0, 0)
    };
    let head = half_head(HALF_END, dev, key, start_ns);
    write_half(
        EndHalf {
            head,
            complete_ns,
            issue_ns,
            sector: load(rq, cfg_u32(&cfg.rq_sector)),
            bytes: nr_bytes,
            cmd_flags,
            error,
            kind: if flush_rq { KIND_FLUSH_RQ } else { KIND_IO },
            flags,
            end,
            hw_queue: hw_queue(cfg, rq),
            file_dev,
            owner_cgroup: owner_cgroup(cfg, rq),
            file_ino,
        },
        head,
        complete_ns,
        if end == END_LAST {
            Counter::RingDrops
        } else {
            Counter::HalfDrops
        },
        // A part's loss leaves the record short of its bytes; only the last closes.
        end == END_LAST,
    );
    Some(())
}
