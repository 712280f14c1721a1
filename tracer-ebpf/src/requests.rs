//! Requests in flight (whole records and the 6.1 fallback): their state from submission to
//! completion, in a direct-mapped slot or the overflow map, and the completions the kernel
//! did not run the program for.

use core::intrinsics::{AtomicOrdering, atomic_cxchg};

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, generated::bpf_get_current_cgroup_id};
use tracer_common::{
    Counter, EV_STARTED_BEFORE_ATTACH, ProbeConfig, RequestSlot, RequestState, SLOT_COUNT,
};

use crate::devices::device_state;
use crate::kernel::{cfg_u32, current_comm, load, now_ns, traced_dev};
use crate::maps::{CUTS, OVERFLOW, REQUESTS, SLOTS, atomic_add, bump};

/// Fill a fresh request state in place, field by field: a struct literal would become a
/// byte-by-byte memset call on this target.
#[inline(always)]
#[expect(
    clippy::cast_ptr_alignment,
    reason = "`comm` is at an 8-byte aligned offset of the map value"
)]
fn init_state(p: *mut RequestState, enter_ns: u64, dev: u32, in_os: u8, flags: u16) {
    // SAFETY: `p` is a RequestState in SLOTS or REQUESTS (see `maps`) that the caller has just
    // claimed for this request.
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
pub(crate) fn lookup(key: u64) -> Option<*mut RequestState> {
    if let Some(slot) = slot_of(key) {
        // SAFETY: `slot` is a value of SLOTS (see `maps`); its key is read volatile, as other CPUs
        // claim and free slots.
        if unsafe { core::ptr::read_volatile(&raw const (*slot).key) } == key {
            // SAFETY: as above; only the field's address is taken.
            return Some(unsafe { &raw mut (*slot).st });
        }
    }
    let n = OVERFLOW.get_ptr_mut(0)?;
    // SAFETY: `n` is OVERFLOW's one value (see `maps`), a word other CPUs change atomically.
    if unsafe { core::ptr::read_volatile(n) } == 0 {
        return None;
    }
    REQUESTS.get_ptr_mut(&key)
}

/// Start tracking a request: claim its slot (or an overflow entry) and fill the state in
/// place. Returns the state's location.
#[inline(always)]
pub(crate) fn track<const CAS: bool>(
    key: u64,
    enter_ns: u64,
    dev: u32,
    in_os: u8,
    flags: u16,
) -> Option<*mut RequestState> {
    if CAS && let Some(slot) = slot_of(key) {
        // SAFETY: `slot` is a value of SLOTS (see `maps`); the CAS makes one CPU the owner of a
        // free slot.
        let (old, won) = unsafe {
            atomic_cxchg::<u64, { AtomicOrdering::AcqRel }, { AtomicOrdering::Relaxed }>(
                &raw mut (*slot).key,
                0,
                key,
            )
        };
        if won || old == key {
            // SAFETY: as above; only the field's address is taken.
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
pub(crate) fn untrack(key: u64) {
    if let Some(slot) = slot_of(key) {
        // SAFETY: `slot` is a value of SLOTS (see `maps`); its key is read volatile, as other CPUs
        // claim and free slots.
        if unsafe { core::ptr::read_volatile(&raw const (*slot).key) } == key {
            // SAFETY: as above. An aligned 64-bit store is atomic, and the state was
            // last read before this point in program order (stores are not reordered with
            // earlier loads on the JITs' targets).
            unsafe { core::ptr::write_volatile(&raw mut (*slot).key, 0) };
            return;
        }
    }
    if REQUESTS.remove(&key).is_ok()
        && let Some(n) = OVERFLOW.get_ptr_mut(0)
    {
        atomic_add(n, u64::MAX);
    }
}

/// Give back the in-flight counts a request holds.
#[inline(always)]
pub(crate) fn release(st: &mut RequestState) {
    if st.in_os == 0 && st.issued == 0 {
        return;
    }
    if let Some(ds) = device_state(st.dev) {
        if st.in_os != 0 {
            // SAFETY: `ds` is the device's counts (see `maps`); the add is atomic.
            atomic_add(unsafe { &raw mut (*ds).os_inflight }, u64::MAX);
        }
        if st.issued != 0 {
            // SAFETY: as above.
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
pub(crate) fn earlier_request(cfg: &ProbeConfig, rq: *const u8, p: *const RequestState) -> bool {
    // SAFETY: `p` is a request's state (see `maps`).
    let issued_stamp = unsafe { (*p).issued_stamp };
    issued_stamp != 0 && load::<u64>(rq, cfg_u32(&cfg.rq_start_time_ns)) != issued_stamp
}

/// The request's state; created (with the current task) if its submission was not seen.
#[inline(always)]
pub(crate) fn state_or_new<const CAS: bool>(
    cfg: &ProbeConfig,
    rq: *const u8,
    key: u64,
) -> Option<*mut RequestState> {
    if let Some(p) = lookup(key) {
        if !earlier_request(cfg, rq, p) {
            return Some(p);
        }
        missed(key, p);
    }
    let dev = traced_dev(cfg, rq)?;
    track_unseen::<CAS>(cfg, rq, key, dev)
}

/// Track a request met after its submission: one submitted before the probe attached, or
/// the flush machinery's own flush request, which no submission event ever sees (the block
/// layer makes it in `blk_kick_flush`). That one is not "started before attach": it gets the
/// task that issues it, and its queue time from the kernel's stamp, like any request.
#[inline(always)]
pub(crate) fn track_unseen<const CAS: bool>(
    cfg: &ProbeConfig,
    rq: *const u8,
    key: u64,
    dev: u32,
) -> Option<*mut RequestState> {
    let cmd_flags: u32 = load(rq, cfg_u32(&cfg.rq_cmd_flags));
    let rq_flags: u32 = load(rq, cfg_u32(&cfg.rq_rq_flags));
    let flush_rq = cmd_flags & cfg_u32(&cfg.req_op_mask) == cfg_u32(&cfg.req_op_flush)
        && rq_flags & cfg_u32(&cfg.rqf_flush_seq) != 0;
    track::<CAS>(
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
pub(crate) fn missed(key: u64, old: *mut RequestState) {
    // SAFETY: `old` is the earlier request's state (see `maps`); no program of that request runs
    // any more.
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
