//! Where the records come from: whole records from the probe's ring (the probe joins each
//! request's events in the kernel), or half records joined here. Chosen once at the start;
//! the rest of the daemon drains, settles, sweeps and finishes it without asking which.

use std::time::{Duration, Instant};

use aya::maps::{MapData, RingBuf};
use tracer_common::IoEvent;
use tracer_common::format::ProbeCounters;
use tracer_common::join::{JoinStats, Joiner};

use super::Run;
use super::agent::Asks;
use super::pace::ring_footprint;
use crate::clock;
use crate::ringread::{BatchFlush, BatchRing};

/// How far behind the drain the join's sweep stays: room for a start half whose submitting
/// task was preempted between the kernel's stamp and the program.
const HALF_SLACK_NS: u64 = 100_000;

/// The records' source.
pub(super) enum RecordSource {
    /// The probe writes whole records to the ring (the in-kernel join).
    Whole,
    /// The probe writes half records (kernels with `block_io_start`, not `--whole-records`).
    Halves(Box<Halves>),
}

/// The half records' rings and their join.
pub(super) struct Halves {
    rings: Vec<BatchRing>,
    flush: BatchFlush,
    joiner: Joiner,
}

impl Halves {
    /// The join copies what it still needs of the halves it read in place (those after its
    /// sweep, the open requests' submitters), then the rings get their space back. The
    /// halves' payloads are thus read once, from the ring, rather than copied out and read
    /// again: such copies cost the daemon a cold line or two per IO at 40k IOPS.
    fn give_back(&mut self) {
        self.joiner.unborrow();
        for rb in &mut self.rings {
            rb.release();
        }
    }
}

impl RecordSource {
    /// Half records if the probe has their rings' flush (it writes halves), else whole ones.
    pub(super) fn new(rings: Vec<BatchRing>, flush: Option<BatchFlush>) -> RecordSource {
        match flush {
            Some(flush) => RecordSource::Halves(Box::new(Halves {
                joiner: Joiner::new(clock::monotonic_ns(), rings.len()),
                rings,
                flush,
            })),
            None => RecordSource::Whole,
        }
    }

    pub(super) fn is_halves(&self) -> bool {
        matches!(self, RecordSource::Halves(_))
    }

    /// The join's tallies (half records only).
    pub(super) fn join_stats(&self) -> Option<JoinStats> {
        match self {
            RecordSource::Whole => None,
            RecordSource::Halves(h) => Some(h.joiner.stats()),
        }
    }

    /// The probe is whole: a request stamped before now may have no start half.
    pub(super) fn set_attach_ns(&mut self, ns: u64) {
        if let RecordSource::Halves(h) = self {
            h.joiner.set_attach_ns(ns);
        }
    }

    /// The run's cuts, for the join to tell the run's requests from the others.
    pub(super) fn set_run(&mut self, start_ns: u64, end_ns: u64) {
        if let RecordSource::Halves(h) = self {
            h.joiner.set_run(start_ns, end_ns);
        }
    }

    /// The probe's counters completed with the join's: requests the join saw and never saw
    /// close, the kernel did not run the completion program for. A half lost to a full ring
    /// names its request and instant on the ring of lost marks (a lost last half closes the
    /// request without a record, a ring drop); if that ring was full too (`lost_unnamed`), a
    /// request whose last half was lost cannot be told from a missed completion and counts as
    /// both: the count is then an upper bound, and says so. (Mid-run, the ones open now are
    /// not among them.)
    pub(super) fn add_counters(&self, c: &mut ProbeCounters) {
        let RecordSource::Halves(h) = self else {
            return;
        };
        let st = h.joiner.stats();
        c.missed_completions += st.missed_completions + st.open_at_end;
        for (m, s) in c.missed_stage.iter_mut().zip(st.missed_stage) {
            *m += s;
        }
        c.started_before_attach += st.started_before_attach;
    }

    /// Requests open in the join that entered the OS from `from_ns` to `at_ns`.
    fn open_started_in(&self, from_ns: u64, at_ns: u64) -> u64 {
        match self {
            RecordSource::Whole => 0,
            RecordSource::Halves(h) => h.joiner.open_started_in(from_ns, at_ns) as u64,
        }
    }

    /// Requests open in the join that entered the OS by `at_ns`.
    fn open_started_by(&self, at_ns: u64) -> u64 {
        match self {
            RecordSource::Whole => 0,
            RecordSource::Halves(h) => h.joiner.open_started_by(at_ns) as u64,
        }
    }

    /// Drain the half records' rings into the join, each CPU's batch begun before
    /// `stale_before_ns` written to them first; their ring bytes, and how far a sweep may go
    /// (see `BatchFlush::settle`).
    fn drain(&mut self, stale_before_ns: u64) -> (u64, Option<u64>) {
        let RecordSource::Halves(h) = self else {
            return (0, Some(u64::MAX));
        };
        // What an earlier drain left in place and no sweep has given back since.
        h.give_back();
        let limit = h.flush.settle(stale_before_ns);
        let mut bytes = 0;
        let joiner = &mut h.joiner;
        // The lost marks' ring is the last.
        let lost = h.rings.len().saturating_sub(1);
        for (i, rb) in h.rings.iter_mut().enumerate() {
            bytes += if i == lost {
                rb.drain(|item| joiner.push_lost(i, item))
            } else {
                // SAFETY: the ring holds the records, unchanged, until `give_back` releases
                // them after the join's unborrow.
                rb.drain_held(|item| unsafe { joiner.push_in_place(i, item) })
            };
        }
        (bytes, limit)
    }

    /// The join's records up to `upto_ns`, handed to `out`.
    fn sweep(&mut self, upto_ns: u64, out: &mut impl FnMut(IoEvent)) {
        if let RecordSource::Halves(h) = self {
            h.joiner.sweep(upto_ns, out);
            h.give_back();
        }
    }

    /// Every CPU's batch written and drained, and the join swept up to the clock read before
    /// (less the slack), trying again while a batch could not be written; false if one still
    /// could not be (nothing swept then).
    fn settle(&mut self, out: &mut impl FnMut(IoEvent)) -> bool {
        if !self.is_halves() {
            return true;
        }
        for _ in 0..10 {
            let now = clock::monotonic_ns();
            if self.drain(u64::MAX).1.is_some() {
                self.sweep(now.saturating_sub(HALF_SLACK_NS), out);
                return true;
            }
        }
        false
    }

    /// The end: every half in, every record of a request that entered the OS by `end_ns` out.
    fn finish(&mut self, end_ns: u64, out: &mut impl FnMut(IoEvent)) {
        self.settle(out);
        if let RecordSource::Halves(h) = self {
            h.joiner.finish_by(end_ns, out);
            h.give_back();
        }
    }
}

/// Decode one ring record; None if it is too short (never happens with a matching probe).
fn decode_event(bytes: &[u8]) -> Option<IoEvent> {
    if bytes.len() < std::mem::size_of::<IoEvent>() {
        return None;
    }
    // SAFETY: length checked; IoEvent is plain old data for which any bit pattern is valid.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<IoEvent>()) })
}

/// Hand every record waiting in the ring, and the join's up to now, to the run (short records
/// are counted as malformed).
pub(super) fn drain_ring(rb: &mut RingBuf<MapData>, run: &mut Run) {
    // Names first: the probe hands a file's name over before the record of its IO.
    if let Some(f) = &mut run.file_names {
        f.drain();
    }
    let mut bytes = 0;
    while let Some(item) = rb.next() {
        bytes += ring_footprint(item.len());
        match decode_event(&item) {
            Some(ev) => run.handle_event(ev),
            None => run.malformed += 1,
        }
    }
    if run.source.is_halves() {
        // Every half of an instant before this clock read is in its ring once the rings are
        // drained, or in a CPU's batch (whose earliest instant the sweep stops short of), but
        // a half whose program stamped it and has not added it yet (the slack).
        let now = clock::monotonic_ns();
        let (halves, limit) = run
            .source
            .drain(now.saturating_sub(tracer_common::HALF_BATCH_STALE_NS));
        bytes += halves;
        // Not past the earliest half of a CPU's batch still waiting, less the slack (for a
        // program that stamped its half and has not added it yet); if a batch could not be
        // written, it may hold halves of any instant since the last: not at all.
        if let Some(limit) = limit {
            run.sweep(now.min(limit).saturating_sub(HALF_SLACK_NS));
        }
    }
    run.pace.drained(bytes);
}

impl Run {
    /// `f` with the source taken out of the run, so that it can hand records to the run.
    /// (The run's record handling does not look at the source.)
    fn with_source<R>(&mut self, f: impl FnOnce(&mut RecordSource, &mut Run) -> R) -> R {
        let mut source = std::mem::replace(&mut self.source, RecordSource::Whole);
        let r = f(&mut source, self);
        self.source = source;
        r
    }

    /// The join's records up to `upto_ns`, handled as the probe's own.
    pub(super) fn sweep(&mut self, upto_ns: u64) {
        self.with_source(|s, run| s.sweep(upto_ns, &mut |ev| run.handle_event(ev)));
    }

    /// See [`RecordSource::settle`].
    pub(super) fn settle(&mut self) -> bool {
        self.with_source(|s, run| s.settle(&mut |ev| run.handle_event(ev)))
    }

    /// The end: every half in, every record out.
    pub(super) fn finish_source(&mut self) {
        let end = self.end_cut.as_ref().map_or(u64::MAX, |c| c.at_ns);
        self.with_source(|s, run| s.finish(end, &mut |ev| run.handle_event(ev)));
    }

    /// Half records: drain the ring every `poll` until no request that entered the OS from
    /// `from` to `at` is open in the join, or for `grace`; then the requests open that
    /// entered by `at`, whenever. The metrics endpoint is answered meanwhile.
    pub(super) async fn wait_joined(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
        window: (u64, u64),
        grace: Duration,
        poll: Duration,
    ) -> u64 {
        let (from, at) = window;
        let until = Instant::now() + grace;
        loop {
            drain_ring(ring, self);
            // Every CPU's batch too: a request started just before the instant may have its
            // start half in a batch not yet old enough to be written, and the sweep must pass
            // the instant before the open count says anything.
            self.settle();
            let waited = self.source.open_started_in(from, at);
            if waited == 0 || Instant::now() >= until {
                return self.source.open_started_by(at);
            }
            self.serving(ring, asks, tokio::time::sleep(poll)).await;
        }
    }
}
