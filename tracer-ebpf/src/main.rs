//! blkprof's kernel side: BTF tracepoints on the block layer's request life cycle.
//!
//! Attach points are tp_btf (not classic tracepoints): the kernel skips a classic tracepoint
//! program whenever any BPF program already runs on the CPU, while tp_btf programs are only
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
#![no_std]
#![no_main]
// Atomic adds on map values: core's atomics are not available for the BPF target.
#![feature(core_intrinsics)]
#![expect(
    internal_features,
    reason = "atomic_xadd is the only way to emit BPF atomic adds"
)]

use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd};

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        generated::{
            bpf_get_current_cgroup_id, bpf_get_current_task_btf, bpf_get_smp_processor_id,
        },
    },
    macros::{btf_tracepoint, map, raw_tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use tracer_common::{
    AGG_FLUSH_RQ, AGG_NOT_ACCOUNTED, AGGREGATE_SLOT_COUNT, AggKey, Aggregate, AggregateSlot,
    BIO_SLOT_BUSY, BIO_SLOT_COUNT, BioSlot, COUNTER_SLOTS, Counter, DEVICE_SLOT_COUNT, DeviceSlot,
    DeviceState, EV_NEVER_ISSUED, EV_NOT_ACCOUNTED, EV_STARTED_BEFORE_ATTACH, FILTER_LIST,
    FILTER_LIST_MAX, IoEvent, KIND_FLUSH_RQ, KIND_IO, LATENCY_BUCKETS, ProbeConfig, RequestState,
    SIZE_BUCKETS, dev_join, loglin_le_bucket,
};
use tracer_common::{Cuts, EV_OUTSIDE_CUT, RequestSlot, SLOT_COUNT};
use tracer_common::{
    END_LAST, END_OFF_DEVICE, END_PART, EndHalf, HALF_BATCH_BYTES, HALF_END, HALF_ISSUE, HALF_LOST,
    HALF_MERGE, HALF_REQUEUE, HALF_RINGS, HALF_START, HalfBatch, HalfHead, IssueHalf, MarkHalf,
    START_AT_ISSUE, StartHalf,
};
use tracer_common::{
    FILE_DEV_ANON, FILE_DEV_DEVICE, FILE_NAME_DEPTH, FILE_NAME_LEN, FileKey, FileName,
};

/// Offsets and flag values, set by user space from the running kernel's BTF.
#[unsafe(no_mangle)]
static CONFIG: ProbeConfig = ProbeConfig {
    rq_q: 0,
    rq_sector: 0,
    rq_data_len: 0,
    rq_cmd_flags: 0,
    rq_rq_flags: 0,
    rq_start_time_ns: 0,
    rq_io_start_time_ns: 0,
    rq_bio: 0,
    rq_mq_hctx: 0,
    hctx_queue_num: 0,
    q_disk: 0,
    disk_major: 0,
    disk_first_minor: 0,
    rqf_io_stat: 0,
    rqf_flush_seq: 0,
    req_op_flush: 0,
    req_op_mask: 0,
    filter_devices: 0,
    filter_list_len: 0,
    filter_list: [0; FILTER_LIST_MAX],
    bio_next: 0,
    bio_bdev: 0,
    bdev_disk: 0,
    task_comm: 0,
    owner_cgroup: 0,
    bio_blkg: 0,
    blkg_blkcg: 0,
    blkcg_cgroup: 0,
    cgroup_kn: 0,
    kn_id: 0,
    files: 0,
    bio_io_vec: 0,
    bvec_page: 0,
    page_mapping: 0,
    mapping_host: 0,
    inode_ino: 0,
    inode_mode: 0,
    inode_generation: 0,
    inode_sb: 0,
    sb_dev: 0,
    inode_dentry: 0,
    dentry_alias: 0,
    dentry_name: 0,
    dentry_parent: 0,
    hot_ring_bytes: 0,
    test_skip_completions: 0,
};

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

#[map(name = "EVENTS")]
static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);
/// Files named as they are first met ([`FileName`], about 1 KB each).
#[map(name = "FILE_NAMES")]
static FILE_NAMES: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map(name = "FILES_SEEN")]
static FILES_SEEN: LruHashMap<FileKey, u8> = LruHashMap::with_max_entries(65536, 0);
/// Requests in flight, direct-mapped by a hash of their `struct request *`: claiming a slot is
/// one compare-and-swap, much cheaper than a hash-map insert. A request whose slot is taken
/// by another goes to REQUESTS instead.
/// The run's cut: which completions belong to it (see [`Cuts`]).
#[map(name = "CUTS")]
static CUTS: Array<Cuts> = Array::with_max_entries(1, 0);
#[map(name = "SLOTS")]
static SLOTS: Array<RequestSlot> = Array::with_max_entries(SLOT_COUNT, 0);
#[map(name = "REQUESTS")]
static REQUESTS: HashMap<u64, RequestState> = HashMap::with_max_entries(65536, 0);
/// Entries in REQUESTS, so that lookups can skip it while it is empty (the common case).
#[map(name = "OVERFLOW")]
static OVERFLOW: Array<u64> = Array::with_max_entries(1, 0);
/// Per-device in-flight counts, direct-mapped by a hash of the device (array lookups are
/// inlined by the verifier; a hash-map lookup is a helper call). A device whose slot is taken
/// by another goes to DEVICES instead.
#[map(name = "DEVICE_SLOTS")]
static DEVICE_SLOTS: Array<DeviceSlot> = Array::with_max_entries(DEVICE_SLOT_COUNT, 0);
#[map(name = "DEVICES")]
static DEVICES: HashMap<u32, DeviceState> = HashMap::with_max_entries(4096, 0);
/// Per program (by the index in [`key_of`]'s callers), a word through which the request
/// pointer becomes a plain number.
#[map(name = "SCRATCH")]
static SCRATCH: PerCpuArray<u64> = PerCpuArray::with_max_entries(8, 0);
#[map(name = "AGGREGATE_SLOTS")]
static AGGREGATE_SLOTS: PerCpuArray<AggregateSlot> =
    PerCpuArray::with_max_entries(AGGREGATE_SLOT_COUNT, 0);
#[map(name = "AGGREGATES")]
/// Allocated as keys appear (BPF_F_NO_PREALLOC): preallocated, 1,024 aggregates of 5 KB would
/// take 5 MB on every CPU.
static AGGREGATES: PerCpuHashMap<AggKey, Aggregate> =
    PerCpuHashMap::with_max_entries(1024, BPF_F_NO_PREALLOC);
#[map(name = "COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);
#[map(name = "DEVICE_FILTER")]
static DEVICE_FILTER: HashMap<u32, u8> = HashMap::with_max_entries(256, 0);
/// `--no-records`: requests completed in parts so far, whose bytes wait in their slots.
#[map(name = "PARTS")]
static PARTS: Array<u64> = Array::with_max_entries(1, 0);
/// Kernels without `block_io_start`: submitters of new requests by bio address (see
/// [`blkprof_getrq`]).
#[map(name = "BIOS")]
static BIOS: Array<BioSlot> = Array::with_max_entries(BIO_SLOT_COUNT, 0);

const BPF_NOEXIST: u64 = 1;
const BPF_F_NO_PREALLOC: u32 = 1;

/// Scratch words of [`SCRATCH`], one per program: programs of different tracepoints can nest
/// on a CPU (a completion interrupting an issue), the same program cannot.
const SCRATCH_IO_START: u32 = 0;
const SCRATCH_ISSUE: u32 = 1;
const SCRATCH_REQUEUE: u32 = 2;
const SCRATCH_MERGE: u32 = 3;
const SCRATCH_COMPLETE: u32 = 4;
const SCRATCH_GETRQ: u32 = 5;
const SCRATCH_INSERT: u32 = 6;
/// The completion programs' count of runs toward the next skipped one ([`skipped_for_test`]).
const SCRATCH_SKIP: u32 = 7;

/// The request's address as a plain number, to hash and store (the verifier forbids
/// arithmetic on the typed pointer): stored into this program's per-CPU scratch word and
/// loaded back, which the verifier lets a privileged (CAP_PERFMON) program do and which costs
/// two memory accesses where `bpf_probe_read_kernel` was a helper call.
#[inline(always)]
fn key_of(ctx: &BtfTracePointContext, scratch: u32) -> u64 {
    let rq: *const u8 = ctx.arg(0);
    let Some(w) = SCRATCH.get_ptr_mut(scratch) else {
        return 0;
    };
    // SAFETY: w points to this CPU's u64 scratch word; no other run of this program can
    // interleave on this CPU.
    unsafe {
        core::ptr::write_volatile(w.cast::<*const u8>(), rq);
        core::ptr::read_volatile(w)
    }
}

/// A kernel pointer as a plain number, through this program's scratch word (see [`key_of`]).
#[inline(always)]
fn bits_of(p: *const u8, scratch: u32) -> u64 {
    let Some(w) = SCRATCH.get_ptr_mut(scratch) else {
        return 0;
    };
    // SAFETY: as in key_of.
    unsafe {
        core::ptr::write_volatile(w.cast::<*const u8>(), p);
        core::ptr::read_volatile(w)
    }
}

/// The current task's command, 16 bytes as the kernel keeps it (NUL padded): two loads from
/// the BTF-typed task, where `bpf_get_current_comm` copies it as a string.
#[inline(always)]
fn current_comm() -> [u64; 2] {
    // SAFETY: helper without preconditions; it returns the BTF-typed current task.
    let task = unsafe { bpf_get_current_task_btf() } as *const u8;
    let off = cfg_u32(&config().task_comm);
    [load(task, off), load(task, off + 8)]
}

/// Fill a fresh request state in place, field by field: a struct literal would become a
/// byte-by-byte memset call on this target.
#[inline(always)]
fn init_state(p: *mut RequestState, enter_ns: u64, dev: u32, in_os: u8, flags: u16) {
    // SAFETY: p points to a map value of type RequestState.
    unsafe {
        core::ptr::write_volatile(&raw mut (*p).enter_ns, enter_ns);
        core::ptr::write_volatile(&raw mut (*p).sector, 0);
        core::ptr::write_volatile(&raw mut (*p).issue_ns, 0);
        core::ptr::write_volatile(&raw mut (*p).issued_stamp, 0);
        core::ptr::write_volatile(&raw mut (*p).complete_ns, 0);
        core::ptr::write_volatile(&raw mut (*p).dev, dev);
        core::ptr::write_volatile(&raw mut (*p).bytes_done, 0);
        core::ptr::write_volatile(&raw mut (*p).pid, (bpf_get_current_pid_tgid() >> 32) as u32);
        core::ptr::write_volatile(&raw mut (*p).dev_inflight, 0);
        core::ptr::write_volatile(&raw mut (*p).os_inflight, 0);
        core::ptr::write_volatile(&raw mut (*p).error, 0);
        core::ptr::write_volatile(&raw mut (*p).requeues, 0);
        core::ptr::write_volatile(&raw mut (*p).flags, flags);
        core::ptr::write_volatile(&raw mut (*p).issued, 0);
        core::ptr::write_volatile(&raw mut (*p).in_os, in_os);
        let [c0, c1] = current_comm();
        core::ptr::write_volatile((&raw mut (*p).comm).cast::<u64>(), c0);
        core::ptr::write_volatile((&raw mut (*p).comm).cast::<u64>().add(1), c1);
        // The submitter's cgroup: unknown for a request met after it was submitted.
        let cgroup = if flags & EV_STARTED_BEFORE_ATTACH != 0 {
            0
        } else {
            bpf_get_current_cgroup_id()
        };
        core::ptr::write_volatile(&raw mut (*p).cgroup, cgroup);
    }
}

#[inline(always)]
fn slot_of(key: u64) -> Option<*mut RequestSlot> {
    // Requests are slab objects a few hundred bytes apart: mix the address bits (Fibonacci
    // hashing) so neighbours spread over the table.
    let idx = (key >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48;
    SLOTS.get_ptr_mut(idx as u32 & (SLOT_COUNT - 1))
}

/// The tracked state of a request, in its slot or in the overflow map.
#[inline(always)]
fn lookup(key: u64) -> Option<*mut RequestState> {
    if let Some(slot) = slot_of(key) {
        // SAFETY: array value pointer.
        if unsafe { core::ptr::read_volatile(&raw const (*slot).key) } == key {
            // SAFETY: array value pointer.
            return Some(unsafe { &raw mut (*slot).st });
        }
    }
    let n = OVERFLOW.get_ptr_mut(0)?;
    // SAFETY: array value pointer.
    if unsafe { core::ptr::read_volatile(n) } == 0 {
        return None;
    }
    REQUESTS.get_ptr_mut(&key)
}

/// Start tracking a request: claim its slot (or an overflow entry) and fill the state in
/// place. Returns the state's location.
#[inline(always)]
fn track(key: u64, enter_ns: u64, dev: u32, in_os: u8, flags: u16) -> Option<*mut RequestState> {
    if let Some(slot) = slot_of(key) {
        // SAFETY: array value pointer; the CAS makes one CPU the owner of a free slot.
        let (old, won) = unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
                &raw mut (*slot).key,
                0,
                key,
            )
        };
        if won || old == key {
            // SAFETY: array value pointer of a slot this request owns.
            let p = unsafe { &raw mut (*slot).st };
            init_state(p, enter_ns, dev, in_os, flags);
            return Some(p);
        }
    }
    let zero = RequestState::default();
    if REQUESTS.insert(&key, &zero, 0).is_err() {
        bump(Counter::RequestMapFull);
        return None;
    }
    if let Some(n) = OVERFLOW.get_ptr_mut(0) {
        atomic_add(n, 1);
    }
    let p = REQUESTS.get_ptr_mut(&key)?;
    init_state(p, enter_ns, dev, in_os, flags);
    Some(p)
}

/// Stop tracking a request (after its state is no longer read).
#[inline(always)]
fn untrack(key: u64) {
    if let Some(slot) = slot_of(key) {
        // SAFETY: array value pointer.
        if unsafe { core::ptr::read_volatile(&raw const (*slot).key) } == key {
            // SAFETY: array value pointer. An aligned 64-bit store is atomic, and the state was
            // last read before this point in program order (stores are not reordered with
            // earlier loads on the JITs' targets).
            unsafe { core::ptr::write_volatile(&raw mut (*slot).key, 0) };
            return;
        }
    }
    if REQUESTS.remove(&key).is_ok() {
        if let Some(n) = OVERFLOW.get_ptr_mut(0) {
            atomic_add(n, u64::MAX);
        }
    }
}
const BPF_RB_NO_WAKEUP: u64 = 1;
/// `bpf_ringbuf_query`: bytes written and not yet consumed.
const BPF_RB_AVAIL_DATA: u64 = 0;

#[inline(always)]
fn config() -> &'static ProbeConfig {
    &CONFIG
}

/// Load a field of a BTF-typed kernel object at a load-time constant offset.
#[inline(always)]
fn load<T: Copy>(base: *const u8, offset: u32) -> T {
    // SAFETY: base is a BTF-typed kernel pointer and the offset a member's offset from the
    // running kernel's BTF; the verifier checks the access against BTF (faults read as 0).
    unsafe { core::ptr::read_volatile(base.wrapping_add(offset as usize).cast::<T>()) }
}

#[inline(always)]
fn cfg_u32(field: &u32) -> u32 {
    // SAFETY: a field of the CONFIG global; volatile keeps the zero initialiser from being
    // folded into the code (the loader rewrites the value).
    unsafe { core::ptr::read_volatile(field) }
}

/// For tests only (`ProbeConfig::test_skip_completions`, 0 in use): whether this run of a
/// completion program returns at once, every Nth run on a CPU for a traced device's request,
/// as a kernel that skips a program's runs (platform notes) would have it. Other devices'
/// completions do not count: in a VM whose loop images sit on a disk that is not traced,
/// they took most skips (CI, session 28: none landed on the traced device).
#[inline(always)]
fn skipped_for_test(ctx: &BtfTracePointContext) -> bool {
    let cfg = config();
    let every = cfg_u32(&cfg.test_skip_completions);
    if every == 0 {
        return false;
    }
    let rq: *const u8 = ctx.arg(0);
    if traced_dev(cfg, rq).is_none() {
        return false;
    }
    let Some(n) = SCRATCH.get_ptr_mut(SCRATCH_SKIP) else {
        return false;
    };
    // SAFETY: this CPU's scratch word; a completion program does not nest in itself.
    unsafe {
        *n += 1;
        if *n < u64::from(every) {
            return false;
        }
        *n = 0;
    }
    true
}

#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn bump(counter: Counter) {
    if let Some(p) = COUNTERS.get_ptr_mut(counter as u32) {
        // Atomic although per-CPU: programs of different tracepoints nest on a CPU (a
        // completion interrupting a submission), and both may count. Counters are rare events.
        atomic_add(p, 1);
    }
}

#[inline(always)]
fn bump_by(counter: Counter, n: u32) {
    if n != 0
        && let Some(p) = COUNTERS.get_ptr_mut(counter as u32)
    {
        atomic_add(p, u64::from(n));
    }
}

#[inline(always)]
fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: p points into a map value.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// Log-linear bucket of `v` below `n`, bounded in a way the verifier can see (the compiler
/// would fold a clamp it thinks redundant).
#[inline(always)]
fn bucket(v: u64, n: usize) -> usize {
    let b = loglin_le_bucket(v);
    // SAFETY: reading a local.
    let b = unsafe { core::ptr::read_volatile(&b) };
    if b >= n { n - 1 } else { b }
}

/// Count one IO in an aggregate without its histograms: with records on, the records hold
/// every latency and size, and the aggregates keep what the coverage check and the counters
/// need: the count, the bytes and the sum of total latencies (the mean queue size beside the
/// kernel's). The histograms' buckets and the lines they touch cost the completion tens of ns
/// per IO (BENCHMARKS.md, session 31). `enter_ns` 0: submission time unknown.
#[inline(always)]
fn count_io(a: *mut Aggregate, bytes: u64, enter_ns: u64, complete_ns: u64) {
    // SAFETY: map value pointer. Plain adds: the value is this CPU's, and the completion
    // program does not nest on a CPU.
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
    // SAFETY: as in count_io; bucket indices are bounded by the arrays' lengths.
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

/// Whole-disk `dev_t` of the request, if it should be traced.
#[inline(always)]
fn traced_dev(cfg: &ProbeConfig, rq: *const u8) -> Option<u32> {
    let q: *const u8 = load(rq, cfg_u32(&cfg.rq_q));
    if q.is_null() {
        return None;
    }
    disk_dev(cfg, load(q, cfg_u32(&cfg.q_disk)))
}

/// The request's blk-mq hardware queue index + 1 (`rq->mq_hctx->queue_num`), 0 if it has none.
#[inline(always)]
fn hw_queue(cfg: &ProbeConfig, rq: *const u8) -> u16 {
    let hctx: *const u8 = load(rq, cfg_u32(&cfg.rq_mq_hctx));
    if hctx.is_null() {
        return 0;
    }
    let n: u32 = load(hctx, cfg_u32(&cfg.hctx_queue_num));
    // Kernels cap hardware queues far below this (nr_cpu_ids); a larger value is not a queue.
    if n < u32::from(u16::MAX) {
        n as u16 + 1
    } else {
        0
    }
}

/// Whole-disk `dev_t` of a `struct gendisk *`, if it should be traced.
#[inline(always)]
fn disk_dev(cfg: &ProbeConfig, disk: *const u8) -> Option<u32> {
    if disk.is_null() {
        return None;
    }
    let major: i32 = load(disk, cfg_u32(&cfg.disk_major));
    let minor: i32 = load(disk, cfg_u32(&cfg.disk_first_minor));
    let dev = dev_join(major as u32, minor as u32);
    match cfg_u32(&cfg.filter_devices) {
        0 => {}
        FILTER_LIST => {
            let n = cfg_u32(&cfg.filter_list_len) as usize;
            let mut hit = false;
            for (i, d) in cfg.filter_list.iter().enumerate() {
                hit |= i < n && cfg_u32(d) == dev;
            }
            if !hit {
                return None;
            }
        }
        // SAFETY: read-only lookup.
        _ => unsafe { DEVICE_FILTER.get(&dev) }.map(|_| ())?,
    }
    Some(dev)
}

#[inline(always)]
fn device_slot(dev: u32) -> Option<*mut DeviceSlot> {
    DEVICE_SLOTS.get_ptr_mut(tracer_common::device_slot_index(dev))
}

/// The device's in-flight counts, if it has any yet.
#[inline(always)]
fn device_state(dev: u32) -> Option<*mut DeviceState> {
    let tag = u64::from(dev) + 1;
    if let Some(slot) = device_slot(dev) {
        // SAFETY: array value pointer.
        match unsafe { core::ptr::read_volatile(&raw const (*slot).tag) } {
            // SAFETY: array value pointer.
            t if t == tag => return Some(unsafe { &raw mut (*slot).st }),
            0 => return None,
            _ => {}
        }
    }
    DEVICES.get_ptr_mut(&dev)
}

/// The device's in-flight counts, created at zero when first seen: its slot if free, else
/// the hash map.
#[inline(always)]
fn device(dev: u32) -> Option<*mut DeviceState> {
    if let Some(p) = device_state(dev) {
        return Some(p);
    }
    let tag = u64::from(dev) + 1;
    if let Some(slot) = device_slot(dev) {
        // SAFETY: array value pointer; the CAS makes one device the owner of a free slot.
        let (old, won) = unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
                &raw mut (*slot).tag,
                0,
                tag,
            )
        };
        if won || old == tag {
            // SAFETY: array value pointer of the device's slot.
            return Some(unsafe { &raw mut (*slot).st });
        }
    }
    let _ = DEVICES.insert(&dev, &DeviceState::default(), BPF_NOEXIST);
    DEVICES.get_ptr_mut(&dev)
}

/// Give back the in-flight counts a request holds.
#[inline(always)]
fn release(st: &mut RequestState) {
    if st.in_os == 0 && st.issued == 0 {
        return;
    }
    if let Some(ds) = device_state(st.dev) {
        if st.in_os != 0 {
            // SAFETY: map value pointer.
            atomic_add(unsafe { &raw mut (*ds).os_inflight }, u64::MAX);
        }
        if st.issued != 0 {
            // SAFETY: map value pointer.
            atomic_add(unsafe { &raw mut (*ds).dev_inflight }, u64::MAX);
        }
    }
    st.in_os = 0;
    st.issued = 0;
}

/// Whether the state `p` tracked at `rq`'s address is of an earlier request made in the same
/// memory, whose completion the program did not run for (some kernels skip a run). The
/// kernel stamps each request's start before its issue (at allocation up to 6.9, just after
/// `block_io_start` from 6.10, in `blk_rq_init` for the flush machinery's own request, which
/// is one per hardware queue, reused for every flush and met by no submission event) and
/// leaves the stamp alone after it (a merge, which lowers it, never takes an issued request):
/// a stamp other than the one at the state's issue is a new request. Not "later": from 6.9
/// the stamp may be a plug's cached clock, older than the issue of a request the same plug saw
/// freed. A request the kernel does not stamp has 0 up to 6.9 (not compared) and keeps the
/// last value after: two such requests at one address are not told apart.
#[inline(always)]
fn earlier_request(cfg: &ProbeConfig, rq: *const u8, p: *const RequestState) -> bool {
    // SAFETY: map value pointer.
    let issued_stamp = unsafe { (*p).issued_stamp };
    issued_stamp != 0 && load::<u64>(rq, cfg_u32(&cfg.rq_start_time_ns)) != issued_stamp
}

/// The request's state; created (with the current task) if its submission was not seen.
#[inline(always)]
fn state_or_new(cfg: &ProbeConfig, rq: *const u8, key: u64) -> Option<*mut RequestState> {
    if let Some(p) = lookup(key) {
        if !earlier_request(cfg, rq, p) {
            return Some(p);
        }
        missed(key, p);
    }
    let dev = traced_dev(cfg, rq)?;
    track_unseen(cfg, rq, key, dev)
}

/// Track a request met after its submission: one submitted before the probe attached, or
/// the flush machinery's own flush request, which no submission event ever sees (the block
/// layer makes it in `blk_kick_flush`). That one is not "started before attach": it gets the
/// task that issues it, and its queue time from the kernel's stamp, like any request.
#[inline(always)]
fn track_unseen(cfg: &ProbeConfig, rq: *const u8, key: u64, dev: u32) -> Option<*mut RequestState> {
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let flush_rq = cmd_flags & cfg_u32(&cfg.req_op_mask) == cfg_u32(&cfg.req_op_flush)
        && rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0;
    track(
        key,
        0,
        dev,
        0,
        if flush_rq {
            0
        } else {
            EV_STARTED_BEFORE_ATTACH
        },
    )
}

/// A tracked request is being submitted again: it was freed and reused, so it completed, but
/// the completion program did not run for it. Count the loss and release what it held.
///
/// The loss is the run's only if the completion may have come within it: not when the new
/// request came before the run's start, nor when the old one was last seen after its end (the
/// programs stay attached while the requests in flight at the end complete), as the join counts
/// them for half records ([`Counter::MissedOutsideRun`]).
#[inline(always)]
fn missed(key: u64, old: *mut RequestState) {
    // SAFETY: map value pointer.
    let st = unsafe { &mut *old };
    let last_seen = st.enter_ns.max(st.issue_ns).max(st.complete_ns);
    // A rare path: its own clock read. The cuts are all zero before the run's start (nothing
    // belongs to it yet).
    let outside = CUTS
        .get(0)
        .is_none_or(|c| now_ns() <= c.start_after_ns || last_seen > c.end_at_ns);
    if outside {
        bump(Counter::MissedOutsideRun);
    } else {
        bump(Counter::MissedCompletion);
        bump(if st.complete_ns != 0 {
            Counter::MissedAfterPartial
        } else if st.issued != 0 || st.issue_ns != 0 {
            Counter::MissedIssued
        } else {
            Counter::MissedNeverIssued
        });
    }
    release(st);
    untrack(key);
}

#[btf_tracepoint(function = "block_io_start")]
pub fn blkprof_io_start(ctx: BtfTracePointContext) -> i32 {
    try_io_start(&ctx);
    0
}

fn try_io_start(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let dev = traced_dev(cfg, rq)?;
    let key = key_of(ctx, SCRATCH_IO_START);
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
    track(key, enter_ns, dev, 1, 0)?;
    let ds = device(dev)?;
    // SAFETY: map value pointer.
    atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    Some(())
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn blkprof_rq_issue(ctx: BtfTracePointContext) -> i32 {
    try_rq_issue::<false>(&ctx);
    0
}

/// `block_rq_issue` on kernels without `block_io_start`.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn blkprof_issue_fb(ctx: BtfTracePointContext) -> i32 {
    try_rq_issue::<true>(&ctx);
    0
}

fn try_rq_issue<const GETRQ: bool>(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let key = key_of(ctx, SCRATCH_ISSUE);
    let p = if GETRQ {
        state_adopted(cfg, rq, key, SCRATCH_ISSUE, true)?
    } else {
        state_or_new(cfg, rq, key)?
    };
    // SAFETY: map value pointer.
    let st = unsafe { &mut *p };
    let ds = device(st.dev)?;
    if st.in_os == 0 {
        st.in_os = 1;
        // SAFETY: map value pointer.
        atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    }
    if st.issued == 0 {
        st.issued = 1;
        // SAFETY: map value pointer.
        atomic_add(unsafe { &raw mut (*ds).dev_inflight }, 1);
    }
    st.issue_ns = now_ns();
    st.issued_stamp = load(rq, cfg_u32(&cfg.rq_start_time_ns));
    st.sector = load(rq, cfg_u32(&cfg.rq_sector));
    // SAFETY: map value pointer. The two counters move concurrently on other CPUs: read each
    // once and keep the invariant (issued requests are a subset of those in the OS).
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
pub fn blkprof_rq_requeue(ctx: BtfTracePointContext) -> i32 {
    try_rq_requeue(&ctx);
    0
}

fn try_rq_requeue(ctx: &BtfTracePointContext) -> Option<()> {
    let p = lookup(key_of(ctx, SCRATCH_REQUEUE))?;
    // SAFETY: map value pointer.
    let st = unsafe { &mut *p };
    st.requeues = st.requeues.wrapping_add(1);
    if st.issued != 0 {
        st.issued = 0;
        if let Some(ds) = device_state(st.dev) {
            // SAFETY: map value pointer.
            atomic_add(unsafe { &raw mut (*ds).dev_inflight }, u64::MAX);
        }
    }
    Some(())
}

/// `rq` was merged into another request and is freed without completing.
#[btf_tracepoint(function = "block_rq_merge")]
pub fn blkprof_rq_merge(ctx: BtfTracePointContext) -> i32 {
    try_rq_merge::<false>(&ctx);
    0
}

/// `block_rq_merge` on kernels without `block_io_start`.
#[btf_tracepoint(function = "block_rq_merge")]
pub fn blkprof_merge_fb(ctx: BtfTracePointContext) -> i32 {
    try_rq_merge::<true>(&ctx);
    0
}

fn try_rq_merge<const GETRQ: bool>(ctx: &BtfTracePointContext) -> Option<()> {
    let key = key_of(ctx, SCRATCH_MERGE);
    if let Some(p) = lookup(key) {
        // SAFETY: map value pointer.
        release(unsafe { &mut *p });
        untrack(key);
    } else if GETRQ {
        // Merged before any program met it: its submitter, waiting under its first bio (still
        // `rq->bio` here), goes with it.
        let cfg = config();
        let rq: *const u8 = ctx.arg(0);
        let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
        if !bio.is_null() {
            let b = bits_of(bio, SCRATCH_MERGE);
            if let Some((_, dev)) = take_submitter(b) {
                leave_os(dev);
            }
        }
    }
    Some(())
}

#[btf_tracepoint(function = "block_rq_complete")]
pub fn blkprof_rq_complete(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_rq_complete::<false>(&ctx);
    0
}

/// `block_rq_complete` on kernels without `block_io_start`.
#[btf_tracepoint(function = "block_rq_complete")]
pub fn blkprof_complete_fb(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_rq_complete::<true>(&ctx);
    0
}

fn try_rq_complete<const GETRQ: bool>(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let error: i32 = ctx.arg::<u64>(1) as u8 as i32;
    let nr_bytes: u32 = ctx.arg::<u64>(2) as u32;
    let key = key_of(ctx, SCRATCH_COMPLETE);
    let p = if GETRQ {
        state_adopted(cfg, rq, key, SCRATCH_COMPLETE, true)?
    } else {
        state_or_new(cfg, rq, key)?
    };
    // SAFETY: map value pointer.
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
                // SAFETY: map value pointer.
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

// ---------------------------------------------------------------------------------------------
// Aggregates only (`--no-records`): one program per IO, at the completion. The kernel's own
// stamps give the times (`start_time_ns` of accounted requests, `io_start_time_ns` where the
// queue collects statistics), so no request is tracked from its submission, no in-flight count
// is kept and nothing goes to the ring. Only a request completed in parts keeps a slot, for
// the bytes done before its last part.
// ---------------------------------------------------------------------------------------------

#[btf_tracepoint(function = "block_rq_complete")]
pub fn blkprof_complete_agg(ctx: BtfTracePointContext) -> i32 {
    try_complete_agg(&ctx);
    0
}

fn try_complete_agg(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let nr_bytes: u32 = ctx.arg::<u64>(2) as u32;
    let dev = traced_dev(cfg, rq)?;
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let flush_seq = rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0;
    let op = cmd_flags & cfg_u32(&cfg.req_op_mask);
    let flush_rq = op == cfg_u32(&cfg.req_op_flush) && flush_seq;
    let key = key_of(ctx, SCRATCH_COMPLETE);
    let mut bytes = nr_bytes;
    if !flush_rq {
        let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
        let remaining: u32 = load(rq, cfg_u32(&cfg.rq_data_len));
        if (!bio.is_null() && nr_bytes < remaining) || flush_seq {
            // Not its end (a partial completion, or the data part of a flush sequence, which
            // the kernel accounts when the sequence ends): keep the bytes done so far.
            let p = match lookup(key) {
                Some(p) => p,
                None => {
                    let p = track(key, 0, dev, 0, 0)?;
                    if let Some(n) = PARTS.get_ptr_mut(0) {
                        atomic_add(n, 1);
                    }
                    p
                }
            };
            // SAFETY: map value pointer.
            unsafe { (*p).bytes_done = (*p).bytes_done.wrapping_add(nr_bytes) };
            return Some(());
        }
    }
    // Only while some request is between its parts does a slot hold anything: reading the
    // slot of every request would cost a cache miss per IO.
    // SAFETY: array value pointer.
    let parts = PARTS
        .get_ptr_mut(0)
        .map_or(0, |n| unsafe { core::ptr::read_volatile(n) });
    if parts != 0
        && let Some(p) = lookup(key)
    {
        // SAFETY: map value pointer.
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
    match aggregate(&agg_key) {
        Some(a) => aggregate_io(a, u64::from(bytes), enter_ns, issue_ns, complete_ns),
        None => bump(Counter::AggregateMapFull),
    }
    Some(())
}

// Programs that do nothing, on the tracepoints the probe uses: what being attached costs
// (`cargo xtask bench` measures the others against them).

#[btf_tracepoint(function = "block_io_start")]
pub fn blkprof_nop_start(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn blkprof_nop_issue(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "block_rq_complete")]
pub fn blkprof_nop_complete(_ctx: BtfTracePointContext) -> i32 {
    0
}

// Programs that read the clock once and stop: being attached plus the one thing every exact
// record needs from each of its programs, its own instant (`cargo xtask bench` measures the
// floor of a record per IO with them).

/// Read the clock; volatile, so that the read is not dropped as unused.
#[inline(always)]
fn clock_only() -> i32 {
    let t = now_ns();
    // SAFETY: reading a local.
    let _ = unsafe { core::ptr::read_volatile(&t) };
    0
}

#[btf_tracepoint(function = "block_io_start")]
pub fn blkprof_clock_start(_ctx: BtfTracePointContext) -> i32 {
    clock_only()
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn blkprof_clock_issue(_ctx: BtfTracePointContext) -> i32 {
    clock_only()
}

#[btf_tracepoint(function = "block_rq_complete")]
pub fn blkprof_clock_complete(_ctx: BtfTracePointContext) -> i32 {
    clock_only()
}

// ---------------------------------------------------------------------------------------------
// Kernels without `block_io_start` (Linux 6.1 to 6.4). `block_getrq` fires in the submitter's
// task once for every request `blk_mq_submit_bio` makes, just before the bio is put in it, but
// carries only the bio. It records the submitter under the bio's address; the first request
// event that meets the request (insert, issue, or completion) finds the bio through `rq->bio`
// and takes the submitter over. The slot holds one count of the device's requests in the OS
// from `block_getrq` on, as `block_io_start` would have added it, and hands it to the request
// (or gives it back when it is dropped). docs/design/kernel-6.1-fallback.md.
// ---------------------------------------------------------------------------------------------

#[inline(always)]
fn bio_slot(bio: u64) -> Option<*mut BioSlot> {
    let idx = (bio >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50;
    BIOS.get_ptr_mut(idx as u32 & (BIO_SLOT_COUNT - 1))
}

/// The device's requests in the OS, one fewer.
#[inline(always)]
fn leave_os(dev: u32) {
    if let Some(ds) = device_state(dev) {
        // SAFETY: map value pointer.
        atomic_add(unsafe { &raw mut (*ds).os_inflight }, u64::MAX);
    }
}

/// The submitter recorded under `bio`, removed from its slot: (slot, device). The one program
/// whose compare-and-swap frees the slot owns the entry's count in the OS.
#[inline(always)]
fn take_submitter(bio: u64) -> Option<(*mut BioSlot, u32)> {
    let slot = bio_slot(bio)?;
    // SAFETY: array value pointer.
    if unsafe { core::ptr::read_volatile(&raw const (*slot).key) } != bio {
        return None;
    }
    // SAFETY: as above; read before the slot is given up (a writer claims it with a CAS first,
    // which would make ours fail).
    let dev = unsafe { core::ptr::read_volatile(&raw const (*slot).dev) };
    // SAFETY: as above.
    let (_, won) = unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
            &raw mut (*slot).key,
            bio,
            0,
        )
    };
    won.then_some((slot, dev))
}

#[btf_tracepoint(function = "block_getrq")]
pub fn blkprof_getrq(ctx: BtfTracePointContext) -> i32 {
    try_getrq(&ctx);
    0
}

fn try_getrq(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let bio: *const u8 = ctx.arg(0);
    let bdev: *const u8 = load(bio, cfg_u32(&cfg.bio_bdev));
    if bdev.is_null() {
        return None;
    }
    let dev = disk_dev(cfg, load(bdev, cfg_u32(&cfg.bdev_disk)))?;
    let ds = device(dev)?;
    let key = key_of(ctx, SCRATCH_GETRQ);
    let slot = bio_slot(key)?;
    // SAFETY: array value pointer.
    let old = unsafe { core::ptr::read_volatile(&raw const (*slot).key) };
    // SAFETY: as above. Claim the slot (BUSY) so that no taker reads a half-written entry.
    let won = old != BIO_SLOT_BUSY
        && unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
                &raw mut (*slot).key,
                old,
                BIO_SLOT_BUSY,
            )
        }
        .1;
    if !won {
        // Another CPU is filling the slot this instant.
        bump(Counter::SubmitterLost);
        return None;
    }
    if old != 0 {
        // An entry no request took up: its count in the OS goes with it.
        bump(Counter::SubmitterLost);
        // SAFETY: array value pointer of a slot this program owns.
        leave_os(unsafe { core::ptr::read_volatile(&raw const (*slot).dev) });
    }
    // SAFETY: as above.
    unsafe {
        core::ptr::write_volatile(&raw mut (*slot).ts, now_ns());
        core::ptr::write_volatile(&raw mut (*slot).dev, dev);
        core::ptr::write_volatile(
            &raw mut (*slot).pid,
            (bpf_get_current_pid_tgid() >> 32) as u32,
        );
        core::ptr::write_volatile(&raw mut (*slot).cgroup, bpf_get_current_cgroup_id());
        let [c0, c1] = current_comm();
        core::ptr::write_volatile((&raw mut (*slot).comm).cast::<u64>(), c0);
        core::ptr::write_volatile((&raw mut (*slot).comm).cast::<u64>().add(1), c1);
    }
    // SAFETY: map value pointer.
    atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    // SAFETY: array value pointer; the CAS publishes the entry after its fields.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
            &raw mut (*slot).key,
            BIO_SLOT_BUSY,
            key,
        )
    };
    Some(())
}

/// The state of a request met at one of its events, on kernels without `block_io_start`:
/// tracked already, or taken up from the submitter its bios left at `block_getrq`, or (with
/// `create`) new with the submission unseen, as before attach.
#[inline(always)]
fn state_adopted(
    cfg: &ProbeConfig,
    rq: *const u8,
    key: u64,
    scratch: u32,
    create: bool,
) -> Option<*mut RequestState> {
    let head: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    let head = if head.is_null() {
        0
    } else {
        bits_of(head, scratch)
    };
    let fresh = |b: u64| {
        // SAFETY: array value pointer.
        b != 0
            && bio_slot(b)
                .is_some_and(|s| unsafe { core::ptr::read_volatile(&raw const (*s).key) } == b)
    };
    if let Some(p) = lookup(key) {
        // Tracked, yet its first bio left a submitter to take up, or the kernel stamped it
        // since: the request was freed and reused without its completion seen.
        if !fresh(head) && !earlier_request(cfg, rq, p) {
            return Some(p);
        }
        missed(key, p);
    }
    let dev = traced_dev(cfg, rq)?;
    // The request's own bio is its first unless a bio was front-merged into it since: look a
    // few bios down the chain.
    let mut bio = head;
    let mut next: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    for _ in 0..4 {
        if bio == 0 {
            break;
        }
        if let Some((slot, sdev)) = take_submitter(bio) {
            if sdev != dev {
                leave_os(sdev);
            } else if let Some(p) = track(key, 0, dev, 1, 0) {
                // SAFETY: slot and state are map value pointers; the slot is ours until
                // published again, and a getrq for another bio would have to claim it first.
                unsafe {
                    core::ptr::write_volatile(
                        &raw mut (*p).enter_ns,
                        core::ptr::read_volatile(&raw const (*slot).ts),
                    );
                    core::ptr::write_volatile(
                        &raw mut (*p).pid,
                        core::ptr::read_volatile(&raw const (*slot).pid),
                    );
                    core::ptr::write_volatile(
                        &raw mut (*p).cgroup,
                        core::ptr::read_volatile(&raw const (*slot).cgroup),
                    );
                    let c = (&raw const (*slot).comm).cast::<u64>();
                    let d = (&raw mut (*p).comm).cast::<u64>();
                    core::ptr::write_volatile(d, core::ptr::read_volatile(c));
                    core::ptr::write_volatile(d.add(1), core::ptr::read_volatile(c.add(1)));
                }
                return Some(p);
            } else {
                leave_os(dev);
                return None;
            }
        }
        if next.is_null() {
            break;
        }
        next = load(next, cfg_u32(&cfg.bio_next));
        bio = if next.is_null() {
            0
        } else {
            bits_of(next, scratch)
        };
    }
    if !create {
        return None;
    }
    track_unseen(cfg, rq, key, dev)
}

/// `block_rq_insert` on kernels without `block_io_start`: with an IO scheduler, the submitter
/// inserts its request before a worker issues it, so the request is taken up here, where the
/// current task is still its submitter's (the requeue worker inserts too: it only finds
/// requests already tracked).
#[btf_tracepoint(function = "block_rq_insert")]
pub fn blkprof_insert_fb(ctx: BtfTracePointContext) -> i32 {
    let rq: *const u8 = ctx.arg(0);
    let _ = state_adopted(
        config(),
        rq,
        key_of(&ctx, SCRATCH_INSERT),
        SCRATCH_INSERT,
        false,
    );
    0
}

/// This CPU's aggregate of a key: its direct-mapped slot (an inlined array lookup), or, when
/// another key holds the slot, the hash map. Only the completion program touches aggregates,
/// and it does not nest on a CPU, so claiming a per-CPU slot needs no atomics.
#[inline(always)]
fn aggregate(key: &AggKey) -> Option<*mut Aggregate> {
    let tag = key.tag();
    if let Some(slot) = AGGREGATE_SLOTS.get_ptr_mut(tracer_common::aggregate_slot_index(key)) {
        // SAFETY: per-CPU array value pointer.
        let t = unsafe { core::ptr::read_volatile(&raw const (*slot).tag) };
        if t == 0 {
            // SAFETY: as above; the value starts zeroed.
            unsafe { core::ptr::write_volatile(&raw mut (*slot).tag, tag) };
        }
        if t == 0 || t == tag {
            // SAFETY: as above.
            return Some(unsafe { &raw mut (*slot).agg });
        }
    }
    if let Some(a) = AGGREGATES.get_ptr_mut(key) {
        return Some(a);
    }
    let _ = AGGREGATES.insert(key, &ZERO_AGGREGATE, BPF_NOEXIST);
    AGGREGATES.get_ptr_mut(key)
}

/// The cgroup v2 id the block layer charges the request to: its first bio's blkcg, whose
/// cgroup's kernfs node id is what `bpf_get_current_cgroup_id` returns for a task. Read at the
/// last completion, before the kernel ends the bios (bios of one request share their blkg:
/// the block layer does not merge across them). 0 when off, or without a bio (flushes) or blkg.
#[inline(always)]
fn owner_cgroup(cfg: &ProbeConfig, rq: *const u8) -> u64 {
    if cfg_u32(&cfg.owner_cgroup) == 0 {
        return 0;
    }
    // Each load goes through a BTF-typed pointer: a NULL one reads as 0 down the chain.
    let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    let blkg: *const u8 = load(bio, cfg_u32(&cfg.bio_blkg));
    let blkcg: *const u8 = load(blkg, cfg_u32(&cfg.blkg_blkcg));
    let cgroup: *const u8 = load(blkcg, cfg_u32(&cfg.blkcg_cgroup));
    let kn: *const u8 = load(cgroup, cfg_u32(&cfg.cgroup_kn));
    load(kn, cfg_u32(&cfg.kn_id))
}

const S_IFMT: u16 = 0o170_000;
const S_IFBLK: u16 = 0o060_000;

/// The file of the request's first data page, as (`s_dev`, inode), or a [`FILE_DEV_ANON`] /
/// [`FILE_DEV_DEVICE`] marker; (0, 0) when off or without data pages. A file met for the
/// first time (or again after the LRU forgot it) is named on FILE_NAMES.
#[inline(always)]
fn file_of(cfg: &ProbeConfig, rq: *const u8) -> (u32, u64) {
    if cfg_u32(&cfg.files) == 0 {
        return (0, 0);
    }
    let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    let bvec: *const u8 = load(bio, cfg_u32(&cfg.bio_io_vec));
    let page: *const u8 = load(bvec, cfg_u32(&cfg.bvec_page));
    let mapping: *const u8 = load(page, cfg_u32(&cfg.page_mapping));
    let bits = bits_of(mapping, SCRATCH_COMPLETE);
    if bits == 0 {
        return (0, 0);
    }
    // PAGE_MAPPING_ANON / MOVABLE / KSM: not a page-cache page.
    if bits & 3 != 0 {
        return (FILE_DEV_ANON, 0);
    }
    let inode: *const u8 = load(mapping, cfg_u32(&cfg.mapping_host));
    let ino: u64 = load(inode, cfg_u32(&cfg.inode_ino));
    let mode: u16 = load(inode, cfg_u32(&cfg.inode_mode));
    if mode & S_IFMT == S_IFBLK {
        return (FILE_DEV_DEVICE, 0);
    }
    let sb: *const u8 = load(inode, cfg_u32(&cfg.inode_sb));
    let key = FileKey {
        ino,
        dev: load(sb, cfg_u32(&cfg.sb_dev)),
        generation: load(inode, cfg_u32(&cfg.inode_generation)),
    };
    // SAFETY: map lookup of a plain key.
    if unsafe { FILES_SEEN.get(&key) }.is_none() {
        let _ = FILES_SEEN.insert(&key, &1, 0);
        name_file(cfg, key, bits_of(inode, SCRATCH_COMPLETE));
    }
    (key.dev, ino)
}

/// Read a kernel word at a plain address (0 if it faults).
#[inline(always)]
fn read_word(addr: u64) -> u64 {
    // SAFETY: bpf_probe_read_kernel checks the address and fails (0 here) on a fault.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

/// Name a file: its first dentry's name and its parents' up to the root, on FILE_NAMES (a
/// full ring loses the name, counted; its IOs still name the inode).
#[inline(never)]
fn name_file(cfg: &ProbeConfig, key: FileKey, inode: u64) {
    let Some(mut entry) = FILE_NAMES.reserve::<FileName>(0) else {
        bump(Counter::FileNameDrops);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: ev points to the reserved FileName; every field is written before submit.
    unsafe {
        core::ptr::write_volatile(&raw mut (*ev).key, key);
        core::ptr::write_volatile(&raw mut (*ev).depth, 0);
        core::ptr::write_volatile(&raw mut (*ev).complete, 0);
    }
    let first = read_word(inode + u64::from(cfg_u32(&cfg.inode_dentry)));
    let mut d = first.wrapping_sub(u64::from(cfg_u32(&cfg.dentry_alias)));
    let mut depth = 0u32;
    let mut complete = 0u32;
    if first != 0 {
        for i in 0..FILE_NAME_DEPTH {
            let name = read_word(d + u64::from(cfg_u32(&cfg.dentry_name)));
            // SAFETY: the destination is component i of the reserved record, FILE_NAME_LEN
            // bytes; the helper NUL-terminates and fails on a bad source (an empty name).
            unsafe {
                let dst = (&raw mut (*ev).names).cast::<[u8; FILE_NAME_LEN]>().add(i);
                if aya_ebpf::helpers::generated::bpf_probe_read_kernel_str(
                    dst.cast(),
                    FILE_NAME_LEN as u32,
                    name as *const core::ffi::c_void,
                ) < 0
                {
                    core::ptr::write_volatile(dst.cast::<u8>(), 0);
                }
            }
            depth = i as u32 + 1;
            let parent = read_word(d + u64::from(cfg_u32(&cfg.dentry_parent)));
            if parent == d || parent == 0 {
                complete = 1;
                break;
            }
            d = parent;
        }
    }
    // SAFETY: as above.
    unsafe {
        core::ptr::write_volatile(&raw mut (*ev).depth, depth);
        core::ptr::write_volatile(&raw mut (*ev).complete, complete);
    }
    entry.submit(0);
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

// ---------------------------------------------------------------------------------------------
// Half records (docs/design/records-without-shared-state.md): no per-request state and no
// in-flight counters in the kernel. Each program writes what it alone knows to the ring of its
// CPU (in the CPU's batch of halves, `HALFBATCH`); user space joins the halves by (request address, the kernel's start stamp) and counts
// the requests in flight from their instants. Devices on this path have the kernel stamp every
// request's start (iostats on).
// ---------------------------------------------------------------------------------------------

#[map]
static HALVES0: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES1: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES2: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES3: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES4: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES5: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES6: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
static HALVES7: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

// Each CPU's small ring, tried first (see MAP_HOT_RINGS; sized by the loader).
#[map]
static HOT0: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT1: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT2: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT3: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT4: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT5: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT6: RingBuf = RingBuf::with_byte_size(1 << 17, 0);
#[map]
static HOT7: RingBuf = RingBuf::with_byte_size(1 << 17, 0);

/// Marks of halves lost to a full ring (sized by the loader).
#[map]
static HALFLOST: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// This CPU's small ring and its large one.
#[inline(always)]
fn cpu_rings() -> (&'static RingBuf, &'static RingBuf) {
    // SAFETY: helper without preconditions.
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

/// Each CPU's halves waiting for one ring write (see [`HalfBatch`]).
#[map]
static HALFBATCH: PerCpuArray<HalfBatch> = PerCpuArray::with_max_entries(1, 0);

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
fn write_half<T: 'static>(half: T, head: HalfHead, at_ns: u64, lost: Counter, name: bool) {
    let Some(b) = HALFBATCH.get_ptr_mut(0) else {
        write_half_direct(half, head, at_ns, lost, name);
        return;
    };
    let class = loss_class(lost, name);
    // SAFETY: b points to this CPU's batch. Programs of this CPU nest (an interrupt's
    // completion inside a submission) but do not interleave otherwise: one that sees `busy`
    // clear runs to its end before the one it interrupted goes on.
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
    // SAFETY: the caller's.
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
pub fn blkprof_flush_halves(_ctx: RawTracePointContext) -> i32 {
    let Some(b) = HALFBATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: as in write_half.
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
pub fn blkprof_start_half(ctx: BtfTracePointContext) -> i32 {
    try_start_half(&ctx);
    0
}

fn try_start_half(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let dev = traced_dev(cfg, rq)?;
    let key = key_of(ctx, SCRATCH_IO_START);
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
fn write_start_half(dev: u32, key: u64, start_ns: u64, at_ns: u64, flags: u32) {
    let [c0, c1] = current_comm();
    let mut comm = [0u8; 16];
    // SAFETY: two u64 stores into a 16-byte local.
    unsafe {
        core::ptr::write_unaligned(comm.as_mut_ptr().cast::<u64>(), c0);
        core::ptr::write_unaligned(comm.as_mut_ptr().cast::<u64>().add(1), c1);
    }
    let head = half_head(HALF_START, dev, key, start_ns);
    write_half(
        StartHalf {
            head,
            // SAFETY: helper without preconditions.
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
pub fn blkprof_issue_half(ctx: BtfTracePointContext) -> i32 {
    try_issue_half(&ctx);
    0
}

fn try_issue_half(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let dev = traced_dev(cfg, rq)?;
    let key = key_of(ctx, SCRATCH_ISSUE);
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
pub fn blkprof_requeue_half(ctx: BtfTracePointContext) -> i32 {
    try_mark_half(&ctx, HALF_REQUEUE, SCRATCH_REQUEUE);
    0
}

#[btf_tracepoint(function = "block_rq_merge")]
pub fn blkprof_merge_half(ctx: BtfTracePointContext) -> i32 {
    try_mark_half(&ctx, HALF_MERGE, SCRATCH_MERGE);
    0
}

#[inline(always)]
fn try_mark_half(ctx: &BtfTracePointContext, half: u32, scratch: u32) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let dev = traced_dev(cfg, rq)?;
    let key = key_of(ctx, scratch);
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
pub fn blkprof_complete_half(ctx: BtfTracePointContext) -> i32 {
    if skipped_for_test(&ctx) {
        return 0;
    }
    try_complete_half(&ctx);
    0
}

fn try_complete_half(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let rq: *const u8 = ctx.arg(0);
    let error: i32 = ctx.arg::<u64>(1) as u8 as i32;
    let nr_bytes: u32 = ctx.arg::<u64>(2) as u32;
    let dev = traced_dev(cfg, rq)?;
    let key = key_of(ctx, SCRATCH_COMPLETE);
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
            // SAFETY: map value pointer; this CPU's.
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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
