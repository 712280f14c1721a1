//! blkprof's kernel side: BTF tracepoints on the block layer's request life cycle.
//!
//! Attach points are `tp_btf` (not classic tracepoints): the kernel skips a classic tracepoint
//! program whenever any BPF program already runs on the CPU, while `tp_btf` programs are only
//! skipped on re-entry of the same program (counted in `bpf_prog_info.recursion_misses`, which
//! user space reads and reports).
//!
//! The accounting mirrors the kernel's own /proc/diskstats accounting so that totals can be
//! checked against it exactly. The kernel counts a request in `blk_account_io_done` when it
//! ends with `RQF_IO_STAT` set and outside a flush sequence, right after its last
//! `block_rq_complete`; the block layer's own flush request is counted in
//! `blk_account_io_flush`. The probe closes IOs at that same `block_rq_complete`.
//!
//! Kernel struct fields are loaded directly through the BTF-typed `struct request *` at
//! offsets that user space reads from the running kernel's BTF and stores in the read-only
//! CONFIG global, which the verifier treats as constants.
//!
//! The programs, by family: `records` (whole records, the default), `halves` (half records,
//! joined in user space), `aggregates` (`--no-records`), `getrq` (kernels without
//! `block_io_start`), `files` (file naming) and `bench` (for `cargo xtask bench`). What they
//! share: `maps`, `kernel` (the reads of kernel objects), `requests` and `devices` (the state
//! in flight).
#![no_std]
#![no_main]
// Atomic adds on map values: core's atomics are not available for the BPF target.
#![feature(core_intrinsics)]
#![expect(
    internal_features,
    reason = "atomic_xadd is the only way to emit BPF atomic adds"
)]
#![expect(
    clippy::inline_always,
    reason = "the per-IO cost is measured to the nanosecond (BENCHMARKS.md): every helper is \
              inlined into its program, not a BPF-to-BPF call"
)]
#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "aya's map methods take `impl Borrow`: a key or value passed by value there costs \
              extra stack copies in the programs"
)]

mod aggregates;
mod bench;
mod devices;
mod files;
mod getrq;
mod halves;
mod kernel;
mod maps;
mod records;
mod requests;

// The library target only lets `cargo check` see the crate; the probe is this binary.
use tracer_ebpf as _;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
