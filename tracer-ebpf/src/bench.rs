//! Programs for `cargo xtask bench`, never attached in a trace: ones that do nothing (what
//! being attached to the probe's tracepoints costs, the others are measured against them) and
//! ones that only read the clock (the floor of an exact record per IO: each of its programs
//! needs at least its own instant).

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

use crate::kernel::now_ns;

#[btf_tracepoint(function = "block_io_start")]
fn blkprof_nop_start(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_nop_issue(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_nop_complete(_ctx: BtfTracePointContext) -> i32 {
    0
}

// Programs that read the clock once and stop: being attached plus the one thing every exact
// record needs from each of its programs, its own instant (`cargo xtask bench` measures the
// floor of a record per IO with them).

/// Read the clock; volatile, so that the read is not dropped as unused.
#[inline(always)]
fn clock_only() -> i32 {
    let t = now_ns();
    // SAFETY: `t` is a local; the volatile read keeps the clock read from being dropped.
    let _ = unsafe { core::ptr::read_volatile(&raw const t) };
    0
}

#[btf_tracepoint(function = "block_io_start")]
fn blkprof_clock_start(_ctx: BtfTracePointContext) -> i32 {
    clock_only()
}

#[btf_tracepoint(function = "block_rq_issue")]
fn blkprof_clock_issue(_ctx: BtfTracePointContext) -> i32 {
    clock_only()
}

#[btf_tracepoint(function = "block_rq_complete")]
fn blkprof_clock_complete(_ctx: BtfTracePointContext) -> i32 {
    clock_only()
}
