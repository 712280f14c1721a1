//! What the programs read from the kernel: the CONFIG of offsets and flags user space fills
//! from the running kernel's BTF, typed loads at those offsets, the clock, the current task,
//! and the request's device, queue and owner.

use aya_ebpf::{
    helpers::{
        bpf_ktime_get_ns,
        generated::{bpf_get_current_comm, bpf_get_current_task_btf},
    },
    programs::BtfTracePointContext,
};
use tracer_common::{FILTER_LIST, FILTER_LIST_MAX, ProbeConfig, dev_join};

use crate::maps::{DEVICE_FILTER, SCRATCH, SCRATCH_SKIP};

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
    rq_disk: 0,
    bio_disk: 0,
    rq_arg: 0,
    getrq_bio_arg: 0,
    cas: 0,
    task_btf: 0,
    test_skip_completions: 0,
};

/// The request of `block_rq_insert`, `_issue`, `_merge` or `_requeue`: argument `N`, 0, or 1
/// on kernels whose prototypes take the queue first ([`ProbeConfig::rq_arg`]). A compile-time
/// choice, one program per position: the verifier refuses a context read at a computed
/// offset, which is what the compiler makes of a choice at run time.
#[inline(always)]
pub(crate) fn rq_arg<const N: usize>(ctx: &BtfTracePointContext) -> *const u8 {
    ctx.arg(N)
}

/// The request's (or a bio's) address as a plain number, to hash and store (the verifier
/// forbids arithmetic on the typed pointer): stored into this program's per-CPU scratch word
/// and loaded back, which the verifier lets a privileged (`CAP_PERFMON`) program do and which
/// costs two memory accesses where `bpf_probe_read_kernel` would be a helper call.
#[inline(always)]
pub(crate) fn bits_of(p: *const u8, scratch: u32) -> u64 {
    let Some(w) = SCRATCH.get_ptr_mut(scratch) else {
        return 0;
    };
    // SAFETY: `w` is this program's scratch word on this CPU (see `maps`), a u64 that a pointer
    // fits; no other run of this program can interleave on this CPU.
    unsafe {
        core::ptr::write_volatile(w.cast::<*const u8>(), p);
        core::ptr::read_volatile(w)
    }
}

/// The current task's command, 16 bytes as the kernel keeps it (NUL padded): two loads from
/// the BTF-typed task, where `bpf_get_current_comm` copies it as a string; that copy on
/// kernels before 5.11 ([`ProbeConfig::task_btf`]).
#[inline(always)]
pub(crate) fn current_comm() -> [u64; 2] {
    let cfg = config();
    if cfg_u32(&cfg.task_btf) == 0 {
        let mut comm = [0u64; 2];
        // SAFETY: the helper writes at most 16 bytes (NUL terminated) into the buffer given.
        unsafe { bpf_get_current_comm(comm.as_mut_ptr().cast(), 16) };
        return comm;
    }
    // SAFETY: a helper without preconditions; it returns the BTF-typed current task.
    let task = unsafe { bpf_get_current_task_btf() } as *const u8;
    let off = cfg_u32(&cfg.task_comm);
    [load(task, off), load(task, off + 8)]
}

#[inline(always)]
pub(crate) fn config() -> &'static ProbeConfig {
    &CONFIG
}

/// Load a field of a BTF-typed kernel object at a load-time constant offset.
#[inline(always)]
pub(crate) fn load<T: Copy>(base: *const u8, offset: u32) -> T {
    // SAFETY: base is a BTF-typed kernel pointer and the offset a member's offset from the
    // running kernel's BTF; the verifier checks the access against BTF (faults read as 0, but
    // callers check NULL links first: see `owner_cgroup`).
    unsafe { core::ptr::read_volatile(base.wrapping_add(offset as usize).cast::<T>()) }
}

#[inline(always)]
pub(crate) fn cfg_u32(field: &u32) -> u32 {
    // SAFETY: a field of the CONFIG global; volatile keeps the zero initialiser from being
    // folded into the code (the loader rewrites the value).
    unsafe { core::ptr::read_volatile(field) }
}

/// For tests only (`ProbeConfig::test_skip_completions`, 0 in use): whether this run of a
/// completion program returns at once, every Nth run on a CPU for a traced device's request,
/// as a kernel that skips a program's runs (platform notes) would have it. Other devices'
/// completions do not count: in a VM whose loop images sit on a disk that is not traced,
/// they would take most skips, and none might land on the traced device.
#[inline(always)]
pub(crate) fn skipped_for_test(ctx: &BtfTracePointContext) -> bool {
    let cfg = config();
    let every = cfg_u32(&cfg.test_skip_completions);
    if every == 0 {
        return false;
    }
    let rq: *const u8 = ctx.arg(0); // block_rq_complete's request is always the first.
    if traced_dev(cfg, rq).is_none() {
        return false;
    }
    let Some(n) = SCRATCH.get_ptr_mut(SCRATCH_SKIP) else {
        return false;
    };
    // SAFETY: `n` is this CPU's scratch word for it (see `maps`); a completion program does not
    // nest in itself.
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
pub(crate) fn now_ns() -> u64 {
    // SAFETY: a helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Whole-disk `dev_t` of the request, if it should be traced.
#[inline(always)]
pub(crate) fn traced_dev(cfg: &ProbeConfig, rq: *const u8) -> Option<u32> {
    let rq_disk = cfg_u32(&cfg.rq_disk);
    if rq_disk != 0 {
        return disk_dev(cfg, load(rq, rq_disk));
    }
    let q: *const u8 = load(rq, cfg_u32(&cfg.rq_q));
    if q.is_null() {
        return None;
    }
    disk_dev(cfg, load(q, cfg_u32(&cfg.q_disk)))
}

/// The request's blk-mq hardware queue index + 1 (`rq->mq_hctx->queue_num`), 0 if it has none.
#[inline(always)]
#[expect(
    clippy::cast_possible_truncation,
    reason = "checked below u16::MAX just before"
)]
pub(crate) fn hw_queue(cfg: &ProbeConfig, rq: *const u8) -> u16 {
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
pub(crate) fn disk_dev(cfg: &ProbeConfig, disk: *const u8) -> Option<u32> {
    if disk.is_null() {
        return None;
    }
    let major: i32 = load(disk, cfg_u32(&cfg.disk_major));
    let minor: i32 = load(disk, cfg_u32(&cfg.disk_first_minor));
    let dev = dev_join(major.cast_unsigned(), minor.cast_unsigned());
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
        // SAFETY: the value is not read, only whether the device is there.
        _ => unsafe { DEVICE_FILTER.get(&dev) }.map(|_| ())?,
    }
    Some(dev)
}

/// The cgroup v2 id the block layer charges the request to: its first bio's blkcg, whose
/// cgroup's kernfs node id is what `bpf_get_current_cgroup_id` returns for a task. Read at the
/// last completion, before the kernel ends the bios (bios of one request share their blkg:
/// the block layer does not merge across them). 0 when off, or without a bio (flushes) or blkg.
#[inline(always)]
pub(crate) fn owner_cgroup(cfg: &ProbeConfig, rq: *const u8) -> u64 {
    if cfg_u32(&cfg.owner_cgroup) == 0 {
        return 0;
    }
    // A NULL link (no bio: a flush) ends the chain here, not in a load that faults: the
    // verifier makes a faulting load read 0, but 5.10's fault path for BPF programs was seen to
    // oops while looking the load up (docs/design/kernel-5.10.md).
    let bio: *const u8 = load(rq, cfg_u32(&cfg.rq_bio));
    if bio.is_null() {
        return 0;
    }
    let blkg: *const u8 = load(bio, cfg_u32(&cfg.bio_blkg));
    if blkg.is_null() {
        return 0;
    }
    let blkcg: *const u8 = load(blkg, cfg_u32(&cfg.blkg_blkcg));
    if blkcg.is_null() {
        return 0;
    }
    let cgroup: *const u8 = load(blkcg, cfg_u32(&cfg.blkcg_cgroup));
    if cgroup.is_null() {
        return 0;
    }
    let kn: *const u8 = load(cgroup, cfg_u32(&cfg.cgroup_kn));
    if kn.is_null() {
        return 0;
    }
    load(kn, cfg_u32(&cfg.kn_id))
}
