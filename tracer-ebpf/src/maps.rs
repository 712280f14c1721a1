//! Every map of the probe, by the name user space opens it with (`tracer_common::abi`), the
//! per-program scratch words, and the counters of rare events.
//!
//! A value pointer from a lookup in these maps (`get_ptr_mut`, `get`) or a reserved ring entry
//! is non-null, aligned for its type and valid memory for the rest of the program's run: the
//! verifier makes each program check a lookup's result for null and bounds every access,
//! array values are never freed, and a hash-map value deleted meanwhile is reused or freed
//! only after the run (preallocated elements, RCU). Values other CPUs may touch are read and
//! written with volatile or atomic accesses.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tracer_common::{
    AGGREGATE_SLOT_COUNT, AggKey, Aggregate, AggregateSlot, BIO_SLOT_COUNT, BioSlot, COUNTER_SLOTS,
    Counter, Cuts, DEVICE_SLOT_COUNT, DeviceSlot, DeviceState, FileKey, HalfBatch, RequestSlot,
    RequestState, SLOT_COUNT,
};

#[map(name = "EVENTS")]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);
/// Files named as they are first met ([`FileName`], about 1 KB each).
#[map(name = "FILE_NAMES")]
pub(crate) static FILE_NAMES: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map(name = "FILES_SEEN")]
pub(crate) static FILES_SEEN: LruHashMap<FileKey, u8> = LruHashMap::with_max_entries(65536, 0);
/// The run's cut: which completions belong to it (see [`Cuts`]).
#[map(name = "CUTS")]
pub(crate) static CUTS: Array<Cuts> = Array::with_max_entries(1, 0);
/// Requests in flight, direct-mapped by a hash of their `struct request *`: claiming a slot is
/// one compare-and-swap, much cheaper than a hash-map insert. A request whose slot is taken
/// by another goes to REQUESTS instead.
#[map(name = "SLOTS")]
pub(crate) static SLOTS: Array<RequestSlot> = Array::with_max_entries(SLOT_COUNT, 0);
#[map(name = "REQUESTS")]
pub(crate) static REQUESTS: HashMap<u64, RequestState> = HashMap::with_max_entries(65536, 0);
/// Entries in REQUESTS, so that lookups can skip it while it is empty (the common case).
#[map(name = "OVERFLOW")]
pub(crate) static OVERFLOW: Array<u64> = Array::with_max_entries(1, 0);
/// Per-device in-flight counts, direct-mapped by a hash of the device (array lookups are
/// inlined by the verifier; a hash-map lookup is a helper call). A device whose slot is taken
/// by another goes to DEVICES instead.
#[map(name = "DEVICE_SLOTS")]
pub(crate) static DEVICE_SLOTS: Array<DeviceSlot> = Array::with_max_entries(DEVICE_SLOT_COUNT, 0);
#[map(name = "DEVICES")]
pub(crate) static DEVICES: HashMap<u32, DeviceState> = HashMap::with_max_entries(4096, 0);
/// Per program (`SCRATCH_*` below), a word through which a kernel pointer becomes a plain
/// number ([`crate::kernel::bits_of`]).
#[map(name = "SCRATCH")]
pub(crate) static SCRATCH: PerCpuArray<u64> = PerCpuArray::with_max_entries(8, 0);
#[map(name = "AGGREGATE_SLOTS")]
pub(crate) static AGGREGATE_SLOTS: PerCpuArray<AggregateSlot> =
    PerCpuArray::with_max_entries(AGGREGATE_SLOT_COUNT, 0);
/// Allocated as keys appear (`BPF_F_NO_PREALLOC`): preallocated, 1,024 aggregates of 5 KB would
/// take 5 MB on every CPU.
#[map(name = "AGGREGATES")]
pub(crate) static AGGREGATES: PerCpuHashMap<AggKey, Aggregate> =
    PerCpuHashMap::with_max_entries(1024, BPF_F_NO_PREALLOC);
#[map(name = "COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);
#[map(name = "DEVICE_FILTER")]
pub(crate) static DEVICE_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(256, 0);
/// `--no-records`: requests completed in parts so far, whose bytes wait in their slots.
#[map(name = "PARTS")]
pub(crate) static PARTS: Array<u64> = Array::with_max_entries(1, 0);
/// Kernels without `block_io_start`: submitters of new requests by bio address (see
/// `getrq`).
#[map(name = "BIOS")]
pub(crate) static BIOS: Array<BioSlot> = Array::with_max_entries(BIO_SLOT_COUNT, 0);
/// The same on kernels without BPF compare-and-exchange (before 5.12), where a hash map's
/// insert and delete decide which program owns an entry (user space shrinks the one not used).
#[map(name = "BIOS_HASH")]
pub(crate) static BIOS_HASH: HashMap<u64, BioSlot> = HashMap::with_max_entries(BIO_SLOT_COUNT, 0);
/// Kernels without compare-and-exchange: this CPU's copy of the submitter a program has just
/// taken out of [`BIOS_HASH`] (the map's own value is freed or reused once deleted), one per
/// program as [`SCRATCH`]'s words.
#[map(name = "BIO_TAKEN")]
pub(crate) static BIO_TAKEN: PerCpuArray<BioSlot> = PerCpuArray::with_max_entries(8, 0);

pub(crate) const BPF_NOEXIST: u64 = 1;
const BPF_F_NO_PREALLOC: u32 = 1;

/// Scratch words of [`SCRATCH`], one per program: programs of different tracepoints can nest
/// on a CPU (a completion interrupting an issue), the same program cannot.
pub(crate) const SCRATCH_IO_START: u32 = 0;
pub(crate) const SCRATCH_ISSUE: u32 = 1;
pub(crate) const SCRATCH_REQUEUE: u32 = 2;
pub(crate) const SCRATCH_MERGE: u32 = 3;
pub(crate) const SCRATCH_COMPLETE: u32 = 4;
pub(crate) const SCRATCH_GETRQ: u32 = 5;
pub(crate) const SCRATCH_INSERT: u32 = 6;
/// The completion programs' count of runs toward the next skipped one
/// ([`crate::kernel::skipped_for_test`]).
pub(crate) const SCRATCH_SKIP: u32 = 7;

pub(crate) const BPF_RB_NO_WAKEUP: u64 = 1;
/// `bpf_ringbuf_query`: bytes written and not yet consumed.
pub(crate) const BPF_RB_AVAIL_DATA: u64 = 0;

// Half records (`halves`): each CPU's large ring, by CPU number modulo HALF_RINGS.
#[map]
pub(crate) static HALVES0: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES1: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES2: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES3: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES4: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES5: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES6: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub(crate) static HALVES7: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

// Each CPU's small ring, tried first (see `MAP_HOT_RINGS`; sized by the loader).
#[map]
pub(crate) static HOT0: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT1: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT2: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT3: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT4: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT5: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT6: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
pub(crate) static HOT7: RingBuf = RingBuf::with_byte_size(1 << 17, 0);

/// Marks of halves lost to a full ring (sized by the loader).
#[map]
pub(crate) static HALFLOST: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Each CPU's halves waiting for one ring write (see [`HalfBatch`]).
#[map]
pub(crate) static HALFBATCH: PerCpuArray<HalfBatch> = PerCpuArray::with_max_entries(1, 0);

/// Count one rare event.
#[inline(always)]
pub(crate) fn bump(counter: Counter) {
    if let Some(p) = COUNTERS.get_ptr_mut(counter as u32) {
        // Atomic although per-CPU: programs of different tracepoints nest on a CPU (a
        // completion interrupting a submission), and both may count. Counters are rare events.
        atomic_add(p, 1);
    }
}

/// Count `n` rare events.
#[inline(always)]
pub(crate) fn bump_by(counter: Counter, n: u32) {
    if n != 0
        && let Some(p) = COUNTERS.get_ptr_mut(counter as u32)
    {
        atomic_add(p, u64::from(n));
    }
}

/// Add `v` to a u64 in a map value, atomically.
#[inline(always)]
pub(crate) fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: every caller passes a u64 inside a map value (valid and aligned for the run, as
    // the module's doc says); the add is atomic.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}
