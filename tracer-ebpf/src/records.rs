//! Whole records: one record per IO on the EVENTS ring, written at its last completion from
//! the state its earlier events kept. The `_fb` programs are the same programs on kernels
//! without `block_io_start`, where the state comes from `block_getrq` (see `getrq`).

#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand each program its context by value"
)]

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use tracer_common::{
    AGG_FLUSH_RQ, AGG_NOT_ACCOUNTED, AggKey, Counter, Cuts, EV_NEVER_ISSUED, EV_NOT_ACCOUNTED,
    EV_OUTSIDE_CUT, EV_STARTED_BEFORE_ATTACH, IoEvent, KIND_FLUSH_RQ, KIND_IO, ProbeConfig,
    RequestState,
};

use crate::aggregates::{aggregate, count_io};
use crate::devices::{device, device_state};
use crate::files::file_of;
use crate::getrq::{leave_os, state_adopted, take_submitter};
use crate::kernel::{
    bits_of, cfg_u32, config, hw_queue, load, now_ns, owner_cgroup, rq_arg, skipped_for_test,
    traced_dev,
};
use crate::maps::{
    BPF_RB_NO_WAKEUP, CUTS, EVENTS, SCRATCH_COMPLETE, SCRATCH_IO_START, SCRATCH_ISSUE,
    SCRATCH_MERGE, SCRATCH_REQUEUE, atomic_add, bump,
};
use crate::requests::{lookup, missed, release, state_or_new, track, untrack};

#[btf_tracepoint(function = "block_io_start")]
fn blkprof_io_start(ctx: BtfTracePointContext) -> i32 {
    try_io_start(&ctx);
    0
}

fn try_io_start(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let dev = traced_dev(cfg, rq)?;
    let key = bits_of(rq, SCRATCH_IO_START);
    if let Some(old) = lookup(key) {
        missed(key, old);
    }
    // The kernel's own start stamp when it keeps one: no clock read. It stamps a request at
    // allocation when it accounts it (RQF_IO_STAT); on others (iostats off) the field holds
    // whatever an earlier request of the same tag left there (seen minutes old).
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let kernel_start: u64 = if rq_flags & cfg_u32(&cfg.rqf_io_stat) != 0 {
        load(rq, cfg_u32(&cfg.rq_start_time_ns))
    } else {
        0
    };
    let enter_ns = if kernel_start != 0 {
        kernel_start
    } else {
        now_ns()
    };
    track::<true>(key, enter_ns, dev, 1, 0)?;
    let ds = device::<true>(dev)?;
    // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
    atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    Some(())
}

#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_rq_issue(ctx: BtfTracePointContext) -> i32 {
    try_rq_issue::<false, true, 0>(&ctx);
    0
}

/// `block_rq_issue` on kernels without `block_io_start`.
#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_issue_fb(ctx: BtfTracePointContext) -> i32 {
    try_rq_issue::<true, true, 0>(&ctx);
    0
}

/// The same without compare-and-exchange (see `getrq::blkprof_getrq_nocas`), and the request
/// after the queue (`_q`).
#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_issue_nocas(ctx: BtfTracePointContext) -> i32 {
    try_rq_issue::<true, false, 0>(&ctx);
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_issue_nocas_q(ctx: BtfTracePointContext) -> i32 {
    try_rq_issue::<true, false, 1>(&ctx);
    0
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "in-flight counts are far below 2^32; the record keeps 32 bits"
)]
fn try_rq_issue<const GETRQ: bool, const CAS: bool, const RQ: usize>(
    ctx: &BtfTracePointContext,
) -> Option<()> {
    let cfg = config();
    let rq = rq_arg::<RQ>(ctx);
    let key = bits_of(rq, SCRATCH_ISSUE);
    let p = if GETRQ {
        state_adopted::<CAS>(cfg, rq, key, SCRATCH_ISSUE, true)?
    } else {
        state_or_new::<CAS>(cfg, rq, key)?
    };
    // SAFETY: `p` is the request's state (see `maps`); the events of one request do not overlap, so
    // this program has it alone.
    let st = unsafe { &mut *p };
    let ds = device::<CAS>(st.dev)?;
    if st.in_os == 0 {
        st.in_os = 1;
        // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
        atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    }
    if st.issued == 0 {
        st.issued = 1;
        // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
        atomic_add(unsafe { &raw mut (*ds).dev_inflight }, 1);
    }
    st.issue_ns = now_ns();
    st.issued_stamp = load(rq, cfg_u32(&cfg.rq_start_time_ns));
    st.sector = load(rq, cfg_u32(&cfg.rq_sector));
    // SAFETY: as above. The two counters move concurrently on other CPUs: read each once and keep
    // the invariant (issued requests are a subset of those in the OS).
    let (dev_n, os_n) = unsafe {
        (
            core::ptr::read_volatile(&raw const (*ds).dev_inflight) as u32,
            core::ptr::read_volatile(&raw const (*ds).os_inflight) as u32,
        )
    };
    st.os_inflight = if os_n < dev_n { dev_n } else { os_n };
    st.dev_inflight = dev_n;
    Some(())
}

#[btf_tracepoint(function = "block_rq_requeue")]
fn blkprof_rq_requeue(ctx: BtfTracePointContext) -> i32 {
    try_rq_requeue::<0>(&ctx);
    0
}

/// The request after the queue (see `blkprof_issue_nocas_q`).
#[btf_tracepoint(function = "block_rq_requeue")]
fn blkprof_requeue_q(ctx: BtfTracePointContext) -> i32 {
    try_rq_requeue::<1>(&ctx);
    0
}

fn try_rq_requeue<const RQ: usize>(ctx: &BtfTracePointContext) -> Option<()> {
    let p = lookup(bits_of(rq_arg::<RQ>(ctx), SCRATCH_REQUEUE))?;
    // SAFETY: `p` is the request's state (see `maps`); the events of one request do not overlap, so
    // this program has it alone.
    let st = unsafe { &mut *p };
    st.requeues = st.requeues.wrapping_add(1);
    if st.issued != 0 {
        st.issued = 0;
        if let Some(ds) = device_state(st.dev) {
            // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
            atomic_add(unsafe { &raw mut (*ds).dev_inflight }, u64::MAX);
        }
    }
    Some(())
}

/// `rq` was merged into another request and is freed without completing.
#[btf_tracepoint(function = "block_rq_merge")]
fn blkprof_rq_merge(ctx: BtfTracePointContext) -> i32 {
    try_rq_merge::<false, true, 0>(&ctx);
    0
}

/// `block_rq_merge` on kernels without `block_io_start`.
#[btf_tracepoint(function = "block_rq_merge")]
fn blkprof_merge_fb(ctx: BtfTracePointContext) -> i32 {
    try_rq_merge::<true, true, 0>(&ctx);
    0
}

/// The same without compare-and-exchange (see `getrq::blkprof_getrq_nocas`).
#[btf_tracepoint(function = "block_rq_merge")]
fn blkprof_merge_nocas(ctx: BtfTracePointContext) -> i32 {
    try_rq_merge::<true, false, 0>(&ctx);
    0
}

#[btf_tracepoint(function = "block_rq_merge")]
fn blkprof_merge_nocas_q(ctx: BtfTracePointContext) -> i32 {
    try_rq_merge::<true, false, 1>(&ctx);
    0
}

fn try_rq_merge<const GETRQ: bool, const CAS: bool, const RQ: usize>(ctx: &BtfTracePointContext) {
    let rq = rq_arg::<RQ>(ctx);
    let key = bits_of(rq, SCRATCH_MERGE);
    if let Some(p) = lookup(key) {
        // SAFETY: `p` is the request's state (see `maps`); the events of one request do not
        // overlap, so this program has it alone.
        release(unsafe { &mut *p });
        untrack(key);
    } else if GETRQ {
        // Merged before any program met it: its submitter, waiting under its first bio (still
        // `rq->bio` here), goes with it.
        let cfg = config();
        let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
        if !bio.is_null() {
            let b = bits_of(bio, SCRATCH_MERGE);
            if let Some((_, dev)) = take_submitter::<CAS>(b, SCRATCH_MERGE) {
                leave_os(dev);
            }
        }
    }
}

#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_rq_complete(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_rq_complete::<false, true>(&ctx);
    0
}

/// `block_rq_complete` on kernels without `block_io_start`.
#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_complete_fb(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_rq_complete::<true, true>(&ctx);
    0
}

/// The same without compare-and-exchange (see `getrq::blkprof_getrq_nocas`).
#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_complete_nocas(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_rq_complete::<true, false>(&ctx);
    0
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "the tracepoint's `error` (a one-byte blk_status_t) and `nr_bytes` (an unsigned int) \
              come in 64-bit argument slots"
)]
fn try_rq_complete<const GETRQ: bool, const CAS: bool>(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let error = i32::from(ctx.arg::<u64>(1) as u8);
    let nr_bytes: u32 = ctx.arg::<u64>(2) as u32;
    let key = bits_of(rq, SCRATCH_COMPLETE);
    let p = if GETRQ {
        state_adopted::<CAS>(cfg, rq, key, SCRATCH_COMPLETE, true)?
    } else {
        state_or_new::<CAS>(cfg, rq, key)?
    };
    // SAFETY: `p` is the request's state (see `maps`); the events of one request do not overlap, so
    // this program has it alone.
    let st = unsafe { &mut *p };
    if st.complete_ns == 0 {
        st.complete_ns = now_ns();
    }
    st.bytes_done = st.bytes_done.wrapping_add(nr_bytes);
    if error != 0 {
        st.error = error;
    }
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let flush_seq = rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0;
    if cmd_flags & cfg_u32(&cfg.req_op_mask) == cfg_u32(&cfg.req_op_flush) && flush_seq {
        // The block layer's own flush request: the kernel accounts it in flush_end_io.
        finish(cfg, rq, st, KIND_FLUSH_RQ, cmd_flags);
        untrack(key);
        return Some(());
    }
    // Partial completion: the request goes on (blk_update_request returns true).
    let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    let remaining: u32 = load(rq, cfg_u32(&cfg.rq_data_len));
    if !bio.is_null() && nr_bytes < remaining {
        return Some(());
    }
    if flush_seq {
        // Data part of a flush sequence: the kernel accounts the request when the sequence
        // ends, with another block_rq_complete.
        if st.issued != 0 {
            st.issued = 0;
            if let Some(ds) = device_state(st.dev) {
                // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
                atomic_add(unsafe { &raw mut (*ds).dev_inflight }, u64::MAX);
            }
        }
        return Some(());
    }
    // Without RQF_IO_STAT the kernel does not account the request (the device's iostats is
    // off, or a passthrough command): record it all the same, marked, and aggregate it apart.
    if rq_flags & cfg_u32(&cfg.rqf_io_stat) == 0 {
        st.flags |= EV_NOT_ACCOUNTED;
    }
    finish(cfg, rq, st, KIND_IO, cmd_flags);
    untrack(key);
    Some(())
}

/// Close an IO: exact aggregates first, then the ring record (which may be dropped).
#[inline(always)]
fn finish(cfg: &ProbeConfig, rq: *const u8, st: &mut RequestState, kind: u16, cmd_flags: u32) {
    let complete_ns = st.complete_ns;
    // The kernel's own start stamp is what /proc/diskstats measures from. It stamps only
    // requests it accounts (or schedules): on an unaccounted one it is a stale value left by an
    // earlier request of the same tag (seen 20 s old with iostats off), so use our own.
    let kernel_start: u64 = if st.flags & EV_NOT_ACCOUNTED == 0 {
        load(rq, cfg_u32(&cfg.rq_start_time_ns))
    } else {
        0
    };
    let enter_ns = if kernel_start != 0 && kernel_start <= complete_ns {
        kernel_start
    } else {
        st.enter_ns
    };
    let mut flags = st.flags;
    if st.issue_ns == 0 {
        flags |= EV_NEVER_ISSUED;
    }
    // Only IOs completing inside the run's cut are aggregated; the others still go to the
    // ring, marked, so user space can tally them against the kernel's counters.
    let (inside, epoch) = CUTS.get(0).map_or((false, 0), |c| {
        (
            complete_ns > c.start_after_ns && complete_ns <= c.end_at_ns,
            Cuts::epoch_of(c.rotation, complete_ns),
        )
    });
    if !inside {
        flags |= EV_OUTSIDE_CUT;
    } else if flags & EV_STARTED_BEFORE_ATTACH != 0 {
        bump(Counter::StartedBeforeAttach);
    }
    release(st);

    let op = cmd_flags & cfg_u32(&cfg.req_op_mask);
    let agg_key = AggKey {
        dev: st.dev,
        op: op
            | if kind == KIND_FLUSH_RQ {
                AGG_FLUSH_RQ
            } else {
                0
            }
            | if flags & EV_NOT_ACCOUNTED != 0 {
                AGG_NOT_ACCOUNTED
            } else {
                0
            }
            | epoch,
    };
    match if inside { aggregate(&agg_key) } else { None } {
        Some(a) => count_io(a, u64::from(st.bytes_done), enter_ns, complete_ns),
        None if inside => bump(Counter::AggregateMapFull),
        None => {}
    }

    let (file_dev, file_ino) = file_of(cfg, rq);
    let Some(mut entry) = EVENTS.reserve::<IoEvent>(0) else {
        bump(Counter::RingDrops);
        return;
    };
    entry.write(IoEvent {
        enter_ns,
        issue_ns: st.issue_ns,
        complete_ns,
        sector: if st.issue_ns != 0 {
            st.sector
        } else {
            load(rq, cfg_u32(&cfg.rq_sector))
        },
        dev: st.dev,
        bytes: st.bytes_done,
        cmd_flags,
        pid: st.pid,
        dev_inflight: st.dev_inflight,
        os_inflight: st.os_inflight,
        error: st.error,
        requeues: st.requeues,
        kind,
        flags,
        hw_queue: hw_queue(cfg, rq),
        file_dev,
        comm: st.comm,
        cgroup: st.cgroup,
        owner_cgroup: owner_cgroup(cfg, rq),
        file_ino,
    });
    // No wakeup: the daemon drains the ring on a timer (every 20 ms; a 16 MB ring holds 0.8 s
    // at 200k IOPS). Asking how full the ring is, per record, read a line the reader writes.
    entry.submit(BPF_RB_NO_WAKEUP);
}
