//! The fallback for kernels without `block_io_start` (Linux 6.1 to 6.4). `block_getrq` fires in
//! the submitter's task once for every request `blk_mq_submit_bio` makes, just before the bio is
//! put in it, but carries only the bio. It records the submitter under the bio's address; the
//! first request event that meets the request (insert, issue, or completion) finds the bio
//! through `rq->bio` and takes the submitter over. The slot holds one count of the device's
//! requests in the OS from `block_getrq` on, as `block_io_start` would have added it, and hands
//! it to the request (or gives it back when it is dropped). See
//! docs/design/kernel-6.1-fallback.md. The issue, merge and completion programs of this path
//! are the whole-record ones (`records`, the `_fb` programs).

#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand each program its context by value"
)]

use core::intrinsics::{AtomicOrdering, atomic_cxchg};

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_current_cgroup_id},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use tracer_common::{BIO_SLOT_BUSY, BIO_SLOT_COUNT, BioSlot, Counter, ProbeConfig, RequestState};

use crate::devices::{device, device_state};
use crate::kernel::{
    bits_of, cfg_u32, config, current_comm, disk_dev, load, now_ns, rq_arg, traced_dev,
};
use crate::maps::{
    BIO_TAKEN, BIOS, BIOS_HASH, BPF_NOEXIST, SCRATCH_GETRQ, SCRATCH_INSERT, atomic_add, bump,
};
use crate::requests::{earlier_request, lookup, missed, track, track_unseen};

#[inline(always)]
fn bio_slot(bio: u64) -> Option<*mut BioSlot> {
    let idx = (bio >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50;
    BIOS.get_ptr_mut(idx as u32 & (BIO_SLOT_COUNT - 1))
}

/// The device's requests in the OS, one fewer.
#[inline(always)]
pub(crate) fn leave_os(dev: u32) {
    if let Some(ds) = device_state(dev) {
        // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
        atomic_add(unsafe { &raw mut (*ds).os_inflight }, u64::MAX);
    }
}

/// Whether `bio` has a submitter waiting for its request.
#[inline(always)]
fn has_submitter<const CAS: bool>(bio: u64) -> bool {
    if bio == 0 {
        return false;
    }
    if !CAS {
        // SAFETY: only whether the entry is there is read.
        return unsafe { BIOS_HASH.get(&bio) }.is_some();
    }
    // SAFETY: `s` is a value of BIOS (see `maps`); its key is read volatile, as other CPUs
    // change it with a CAS.
    bio_slot(bio).is_some_and(|s| unsafe { core::ptr::read_volatile(&raw const (*s).key) } == bio)
}

/// The submitter recorded under `bio`, removed from its slot: (slot, device). The one program
/// whose compare-and-swap frees the slot owns the entry's count in the OS. Without
/// compare-and-exchange, the one whose delete succeeds; the entry is then this program's copy
/// in [`BIO_TAKEN`] (`scratch`).
#[inline(always)]
pub(crate) fn take_submitter<const CAS: bool>(
    bio: u64,
    scratch: u32,
) -> Option<(*mut BioSlot, u32)> {
    if !CAS {
        return take_submitter_hashed(bio, scratch);
    }
    let slot = bio_slot(bio)?;
    // SAFETY: `slot` is a value of BIOS (see `maps`); its key is read volatile, as other CPUs
    // change it with a CAS.
    if unsafe { core::ptr::read_volatile(&raw const (*slot).key) } != bio {
        return None;
    }
    // SAFETY: as above. Read before the slot is given up: a writer claims it with a CAS first,
    // which would make ours fail.
    let dev = unsafe { core::ptr::read_volatile(&raw const (*slot).dev) };
    // SAFETY: as above; the CAS makes one taker the owner of the entry.
    let (_, won) = unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
            &raw mut (*slot).key,
            bio,
            0,
        )
    };
    won.then_some((slot, dev))
}

#[inline(always)]
#[expect(
    clippy::cast_ptr_alignment,
    reason = "`comm` is at an 8-byte aligned offset of the map value"
)]
fn take_submitter_hashed(bio: u64, scratch: u32) -> Option<(*mut BioSlot, u32)> {
    // SAFETY: a value of BIOS_HASH, read at once into the copy below; if another program
    // deletes it meanwhile, that program's delete wins and this copy is dropped.
    let v: *const BioSlot = unsafe { BIOS_HASH.get(&bio) }?;
    let copy = BIO_TAKEN.get_ptr_mut(scratch)?;
    // SAFETY: `copy` is this program's entry of BIO_TAKEN on this CPU (see `maps`); `v` as above.
    let dev = unsafe {
        let dev = core::ptr::read_volatile(&raw const (*v).dev);
        core::ptr::write_volatile(&raw mut (*copy).dev, dev);
        core::ptr::write_volatile(
            &raw mut (*copy).ts,
            core::ptr::read_volatile(&raw const (*v).ts),
        );
        core::ptr::write_volatile(
            &raw mut (*copy).cgroup,
            core::ptr::read_volatile(&raw const (*v).cgroup),
        );
        core::ptr::write_volatile(
            &raw mut (*copy).pid,
            core::ptr::read_volatile(&raw const (*v).pid),
        );
        let c = (&raw const (*v).comm).cast::<u64>();
        let d = (&raw mut (*copy).comm).cast::<u64>();
        core::ptr::write_volatile(d, core::ptr::read_volatile(c));
        core::ptr::write_volatile(d.add(1), core::ptr::read_volatile(c.add(1)));
        dev
    };
    BIOS_HASH.remove(&bio).ok()?;
    Some((copy, dev))
}

/// `block_getrq` without compare-and-exchange: the submitter goes into [`BIOS_HASH`]; an entry
/// already there under the bio (no request took it up) is deleted first, and its count in the
/// OS given back by whichever program's delete succeeds.
#[inline(always)]
fn record_submitter_hashed(key: u64, dev: u32, ds: *mut tracer_common::DeviceState) {
    let v = BioSlot {
        key,
        ts: now_ns(),
        // SAFETY: a helper without preconditions.
        cgroup: unsafe { bpf_get_current_cgroup_id() },
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        dev,
        // SAFETY: two u64s are 16 bytes, any of which is a valid u8.
        comm: unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>(current_comm()) },
    };
    // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic. Counted before the
    // entry is visible, so that a taker never gives back a count not yet added.
    atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    if BIOS_HASH.insert(&key, &v, BPF_NOEXIST).is_ok() {
        return;
    }
    bump(Counter::SubmitterLost);
    // SAFETY: a value of BIOS_HASH; only its device is read before the delete decides.
    if let Some(old) = unsafe { BIOS_HASH.get(&key) } {
        let odev = old.dev;
        if BIOS_HASH.remove(&key).is_ok() {
            leave_os(odev);
        }
    }
    if BIOS_HASH.insert(&key, &v, BPF_NOEXIST).is_err() {
        // Full, or another CPU's entry came first: this submitter is lost.
        leave_os(dev);
    }
}

#[btf_tracepoint(function = "block_getrq")]
fn blkprof_getrq(ctx: BtfTracePointContext) -> i32 {
    try_getrq::<true, 0>(&ctx);
    0
}

/// `block_getrq` on kernels without BPF compare-and-exchange (before 5.12): the verifier
/// refuses a program holding the instruction even where it cannot run, so these programs
/// are compiled without it. The `_q` programs are for prototypes that take the queue first
/// (before 5.11; `ProbeConfig::rq_arg`, `getrq_bio_arg`).
#[btf_tracepoint(function = "block_getrq")]
fn blkprof_getrq_nocas(ctx: BtfTracePointContext) -> i32 {
    try_getrq::<false, 0>(&ctx);
    0
}

#[btf_tracepoint(function = "block_getrq")]
fn blkprof_getrq_nocas_q(ctx: BtfTracePointContext) -> i32 {
    try_getrq::<false, 1>(&ctx);
    0
}

#[expect(
    clippy::cast_ptr_alignment,
    reason = "`comm` is at an 8-byte aligned offset of the map value"
)]
fn try_getrq<const CAS: bool, const BIO: usize>(ctx: &BtfTracePointContext) -> Option<()> {
    let cfg = config();
    let bio: *const u8 = ctx.arg(BIO);
    let bio_disk = cfg_u32(&cfg.bio_disk);
    let disk: *const u8 = if bio_disk != 0 {
        load(bio, bio_disk)
    } else {
        let bdev: *const u8 = load(bio, cfg_u32(&cfg.bio_bdev));
        if bdev.is_null() {
            return None;
        }
        load(bdev, cfg_u32(&cfg.bdev_disk))
    };
    let dev = disk_dev(cfg, disk)?;
    let ds = device::<CAS>(dev)?;
    let key = bits_of(bio, SCRATCH_GETRQ);
    if !CAS {
        record_submitter_hashed(key, dev, ds);
        return Some(());
    }
    let slot = bio_slot(key)?;
    // SAFETY: `slot` is a value of BIOS (see `maps`); its key is read volatile, as other CPUs
    // change it with a CAS.
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
        // SAFETY: as above; the slot is this program's (BUSY), and this is the entry it replaces.
        leave_os(unsafe { core::ptr::read_volatile(&raw const (*slot).dev) });
    }
    // SAFETY: as above; while the slot is BUSY no taker reads these fields.
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
    // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
    atomic_add(unsafe { &raw mut (*ds).os_inflight }, 1);
    // SAFETY: as above; the CAS publishes the entry after its fields.
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
#[expect(
    clippy::cast_ptr_alignment,
    reason = "`comm` is at an 8-byte aligned offset of the map value"
)]
pub(crate) fn state_adopted<const CAS: bool>(
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
    if let Some(p) = lookup(key) {
        // Tracked, yet its first bio left a submitter to take up, or the kernel stamped it
        // since: the request was freed and reused without its completion seen.
        if !has_submitter::<CAS>(head) && !earlier_request(cfg, rq, p) {
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
        if let Some((slot, sdev)) = take_submitter::<CAS>(bio, scratch) {
            if sdev != dev {
                leave_os(sdev);
            } else if let Some(p) = track::<CAS>(key, 0, dev, 1, 0) {
                // SAFETY: `slot` and `p` are map values (see `maps`); the slot is ours until
                // published again (a getrq for another bio would have to claim it first), and the
                // state is the new request's.
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
    track_unseen::<CAS>(cfg, rq, key, dev)
}

/// `block_rq_insert` on kernels without `block_io_start`: with an IO scheduler, the submitter
/// inserts its request before a worker issues it, so the request is taken up here, where the
/// current task is still its submitter's (the requeue worker inserts too: it only finds
/// requests already tracked).
#[btf_tracepoint(function = "block_rq_insert")]
fn blkprof_insert_fb(ctx: BtfTracePointContext) -> i32 {
    insert::<true, 0>(&ctx)
}

/// `block_rq_insert` without compare-and-exchange (see `blkprof_getrq_nocas`).
#[btf_tracepoint(function = "block_rq_insert")]
fn blkprof_insert_nocas(ctx: BtfTracePointContext) -> i32 {
    insert::<false, 0>(&ctx)
}

#[btf_tracepoint(function = "block_rq_insert")]
fn blkprof_insert_nocas_q(ctx: BtfTracePointContext) -> i32 {
    insert::<false, 1>(&ctx)
}

#[inline(always)]
fn insert<const CAS: bool, const RQ: usize>(ctx: &BtfTracePointContext) -> i32 {
    let rq = rq_arg::<RQ>(ctx);
    let _ = state_adopted::<CAS>(
        config(),
        rq,
        bits_of(rq, SCRATCH_INSERT),
        SCRATCH_INSERT,
        false,
    );
    0
}
