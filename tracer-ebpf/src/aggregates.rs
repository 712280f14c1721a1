//! In-kernel aggregates (counts, bytes, latency sums and histograms per device, op and epoch),
//! exact against /proc/diskstats, and the `--no-records` program that keeps them alone.

#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand each program its context by value"
)]

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use tracer_common::{
    AGG_FLUSH_RQ, AGG_NOT_ACCOUNTED, AggKey, Aggregate, Counter, Cuts, LATENCY_BUCKETS,
    SIZE_BUCKETS, loglin_le_bucket,
};

use crate::kernel::{bits_of, cfg_u32, config, load, now_ns, traced_dev};
use crate::maps::{
    AGGREGATE_SLOTS, AGGREGATES, BPF_NOEXIST, CUTS, PARTS, SCRATCH_COMPLETE, atomic_add, bump,
};
use crate::requests::{lookup, track, untrack};

/// Zeroed template for creating aggregate slots (too big for the BPF stack).
#[unsafe(no_mangle)]
static ZERO_AGGREGATE: Aggregate = Aggregate {
    ios: 0,
    bytes: 0,
    total_ns_sum: 0,
    timed: 0,
    device_ns_sum: 0,
    queue_ns_sum: 0,
    size: [0; SIZE_BUCKETS],
    queue_latency: [0; LATENCY_BUCKETS],
    device_latency: [0; LATENCY_BUCKETS],
    total_latency: [0; LATENCY_BUCKETS],
};

/// Log-linear bucket of `v` below `n`, bounded in a way the verifier can see (the compiler
/// would fold a clamp it thinks redundant).
#[inline(always)]
fn bucket(v: u64, n: usize) -> usize {
    let b = loglin_le_bucket(v);
    // SAFETY: `b` is a local; the volatile read only hides its value from the optimiser.
    let b = unsafe { core::ptr::read_volatile(&raw const b) };
    if b >= n { n - 1 } else { b }
}

/// Count one IO in an aggregate without its histograms: with records on, the records hold
/// every latency and size, and the aggregates keep what the coverage check and the counters
/// need: the count, the bytes and the sum of total latencies (the mean queue size beside the
/// kernel's). The histograms' buckets and the lines they touch cost the completion tens of ns
/// per IO (BENCHMARKS.md). `enter_ns` 0: submission time unknown.
#[inline(always)]
pub(crate) fn count_io(a: *mut Aggregate, bytes: u64, enter_ns: u64, complete_ns: u64) {
    // SAFETY: `a` is an aggregate of this CPU (see `maps`). Plain adds: no other CPU writes it, and
    // the completion programs, its only writers, do not nest on a CPU.
    unsafe {
        (*a).ios += 1;
        (*a).bytes += bytes;
        if enter_ns != 0 {
            (*a).total_ns_sum += complete_ns.saturating_sub(enter_ns);
        }
    }
}

/// Count one IO in an aggregate with its histograms (`--no-records`): [`count_io`], then the
/// size and latencies. `enter_ns` 0: submission time unknown (no total or queue latency);
/// `issue_ns` 0: not seen issued (no device or queue latency).
#[inline(always)]
fn aggregate_io(a: *mut Aggregate, bytes: u64, enter_ns: u64, issue_ns: u64, complete_ns: u64) {
    count_io(a, bytes, enter_ns, complete_ns);
    // SAFETY: as in `count_io`; each bucket index is below its array's length (`bucket`).
    unsafe {
        (*a).size[bucket(bytes, SIZE_BUCKETS)] += 1;
        if issue_ns != 0 {
            let device_ns = complete_ns.saturating_sub(issue_ns);
            (*a).device_ns_sum += device_ns;
            (*a).device_latency[bucket(device_ns, LATENCY_BUCKETS)] += 1;
        }
        if enter_ns != 0 {
            let total_ns = complete_ns.saturating_sub(enter_ns);
            (*a).timed += 1;
            (*a).total_latency[bucket(total_ns, LATENCY_BUCKETS)] += 1;
            if issue_ns != 0 {
                let queue_ns = issue_ns.saturating_sub(enter_ns);
                (*a).queue_ns_sum += queue_ns;
                (*a).queue_latency[bucket(queue_ns, LATENCY_BUCKETS)] += 1;
            }
        }
    }
}

/// This CPU's aggregate of a key: its direct-mapped slot (an inlined array lookup), or, when
/// another key holds the slot, the hash map. Only the completion program touches aggregates,
/// and it does not nest on a CPU, so claiming a per-CPU slot needs no atomics.
#[inline(always)]
pub(crate) fn aggregate(key: &AggKey) -> Option<*mut Aggregate> {
    let tag = key.tag();
    if let Some(slot) = AGGREGATE_SLOTS.get_ptr_mut(tracer_common::aggregate_slot_index(key)) {
        // SAFETY: `slot` is this CPU's value of AGGREGATE_SLOTS (see `maps`), which no other CPU
        // writes.
        let t = unsafe { core::ptr::read_volatile(&raw const (*slot).tag) };
        if t == 0 {
            // SAFETY: as above; a zero tag is a free slot, whose aggregate is still zeroed.
            unsafe { core::ptr::write_volatile(&raw mut (*slot).tag, tag) };
        }
        if t == 0 || t == tag {
            // SAFETY: as above; only the field's address is taken.
            return Some(unsafe { &raw mut (*slot).agg });
        }
    }
    if let Some(a) = AGGREGATES.get_ptr_mut(key) {
        return Some(a);
    }
    #[expect(
        clippy::let_underscore_must_use,
        reason = "fails only when the map is full (the caller counts it) or the key exists"
    )]
    let _ = AGGREGATES.insert(key, &ZERO_AGGREGATE, BPF_NOEXIST);
    AGGREGATES.get_ptr_mut(key)
}

// Aggregates only (`--no-records`): one program per IO, at the completion. The kernel's own
// stamps give the times (`start_time_ns` of accounted requests, `io_start_time_ns` where the
// queue collects statistics), so no request is tracked from its submission, no in-flight count
// is kept and nothing goes to the ring. Only a request completed in parts keeps a slot, for
// the bytes done before its last part.

#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_complete_agg(ctx: BtfTracePointContext) -> i32 {
    try_complete_agg::<true>(&ctx);
    0
}

/// The same without compare-and-exchange (see `getrq::blkprof_getrq_nocas`).
#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_complete_agg_nocas(ctx: BtfTracePointContext) -> i32 {
    try_complete_agg::<false>(&ctx);
    0
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "the tracepoint's `nr_bytes` (an unsigned int) comes in a 64-bit argument slot"
)]
fn try_complete_agg<const CAS: bool>(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let nr_bytes: u32 = ctx.arg::<u64>(2) as u32;
    let dev = traced_dev(cfg, rq)?;
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let flush_seq = rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0;
    let op = cmd_flags & cfg_u32(&cfg.req_op_mask);
    let flush_rq = op == cfg_u32(&cfg.req_op_flush) && flush_seq;
    let key = bits_of(rq, SCRATCH_COMPLETE);
    let mut bytes = nr_bytes;
    if !flush_rq {
        let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
        let remaining: u32 = load(rq, cfg_u32(&cfg.rq_data_len));
        if (!bio.is_null() && nr_bytes < remaining) || flush_seq {
            // Not its end (a partial completion, or the data part of a flush sequence, which
            // the kernel accounts when the sequence ends): keep the bytes done so far.
            #[expect(
                clippy::single_match_else,
                reason = "the `if let` form compiles to another block order on the per-IO path"
            )]
            let p = match lookup(key) {
                Some(p) => p,
                None => {
                    let p = track::<CAS>(key, 0, dev, 0, 0)?;
                    if let Some(n) = PARTS.get_ptr_mut(0) {
                        atomic_add(n, 1);
                    }
                    p
                }
            };
            // SAFETY: `p` is the request's state (see `maps`); its parts complete one after the
            // other, and the completion program does not nest.
            unsafe { (*p).bytes_done = (*p).bytes_done.wrapping_add(nr_bytes) };
            return Some(());
        }
    }
    // Only while some request is between its parts does a slot hold anything: reading the
    // slot of every request would cost a cache miss per IO.
    // SAFETY: `n` is PARTS's one value (see `maps`), a word other CPUs change atomically.
    let parts = PARTS
        .get_ptr_mut(0)
        .map_or(0, |n| unsafe { core::ptr::read_volatile(n) });
    if parts != 0
        && let Some(p) = lookup(key)
    {
        // SAFETY: `p` is the request's state (see `maps`), read before `untrack` gives it up.
        bytes = bytes.wrapping_add(unsafe { (*p).bytes_done });
        untrack(key);
        if let Some(n) = PARTS.get_ptr_mut(0) {
            atomic_add(n, u64::MAX);
        }
    }
    let complete_ns = now_ns();
    let cuts = CUTS.get(0)?;
    if complete_ns <= cuts.start_after_ns || complete_ns > cuts.end_at_ns {
        return Some(());
    }
    // The kernel stamps the start of the requests it accounts (on others the field is stale)
    // and their issue where the queue collects statistics (else it is 0).
    let accounted = rq_flags & cfg_u32(&cfg.rqf_io_stat) != 0;
    let mut enter_ns: u64 = if accounted || flush_rq {
        load(rq, cfg_u32(&cfg.rq_start_time_ns))
    } else {
        0
    };
    if enter_ns > complete_ns {
        enter_ns = 0;
    }
    let mut issue_ns: u64 = load(rq, cfg_u32(&cfg.rq_io_start_time_ns));
    if issue_ns > complete_ns || issue_ns < enter_ns {
        issue_ns = 0;
    }
    let agg_key = AggKey {
        dev,
        op: op
            | if flush_rq { AGG_FLUSH_RQ } else { 0 }
            | if !accounted && !flush_rq {
                AGG_NOT_ACCOUNTED
            } else {
                0
            }
            | Cuts::epoch_of(cuts.rotation, complete_ns),
    };
    if let Some(a) = aggregate(&agg_key) {
        aggregate_io(a, u64::from(bytes), enter_ns, issue_ns, complete_ns);
    } else {
        bump(Counter::AggregateMapFull);
    }
    Some(())
}
