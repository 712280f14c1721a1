//! Rotation: end the open file and start the next at one instant, cut as the run's start and
//! end are.

use std::time::Duration;

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use tracer_common::format::AggregateSnapshot;
use tracer_common::{AGG_EPOCH, Cuts};

use super::Run;
use super::agent::Asks;
use super::cuts::CUT_LEAD_NS;
use super::output::{Prepared, remove_files};
use super::source::drain_ring;
use super::stop::StopReason;
use crate::clock;

/// How long a rotation waits for the requests in flight at its instant (see
/// [`Run::rotate`]).
const ROTATION_GRACE: Duration = Duration::from_millis(250);
/// A rotation does not wait for requests that entered the OS this long before its instant:
/// a completion missed long ago whose address has not come back (its device gone idle) would
/// otherwise hold every rotation for [`ROTATION_GRACE`]. They are counted as still open.
const ROTATION_WAITS_FOR_NS: u64 = 1_000_000_000;
/// After the next file could not be created, the rotation is tried again this much later.
const ROTATION_RETRY: Duration = Duration::from_secs(10);

impl Run {
    /// End the open file and start the next at one instant, as the run's start and end are
    /// cut: the probe's aggregates flip epoch parity there, /proc/diskstats is read just
    /// after, and records go to the file their completion time belongs to. The waits answer
    /// the metrics endpoint meanwhile.
    ///
    /// If the next file cannot be created, the open file goes on and the rotation is retried
    /// later. If it fails after its cut, the open file stays open (with the records held for
    /// the next one), the run's stop reason is set and said, and the end closes the file with
    /// its trailer.
    pub(super) async fn rotate(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
    ) -> Result<()> {
        let prepared = match self.prepare_next() {
            Ok(p) => p,
            Err(e) => {
                // Nothing has changed yet: the open file goes on, and the rotation is tried
                // again later.
                eprintln!(
                    "blkprof-trace: cannot start the next trace file ({e:#}); the open one goes on, retrying in {} s",
                    ROTATION_RETRY.as_secs()
                );
                self.rotation_retry = Some(std::time::Instant::now() + ROTATION_RETRY);
                return Err(e);
            }
        };
        self.rotation_retry = None;
        let r = self.rotate_at_a_cut(ring, asks, prepared).await;
        if let Err(e) = &r {
            self.abandon_rotation();
            let reason = StopReason::of_error(&**e);
            if reason == StopReason::DiskFull {
                eprintln!(
                    "blkprof-trace: disk full while rotating the trace ({e:#}); stopping cleanly"
                );
            } else {
                eprintln!("blkprof-trace: rotating the trace failed ({e:#}); stopping cleanly");
            }
            self.stop.get_or_insert(reason);
        }
        r
    }

    /// The next file's files, before anything changes. A disk too full to create them, with
    /// `--keep`, frees the oldest kept file and tries again (the open file is never one).
    fn prepare_next(&mut self) -> Result<Option<Prepared>> {
        loop {
            match self.prepare_files(self.seq + 1) {
                Err(e)
                    if StopReason::of_error(&*e) == StopReason::DiskFull
                        && self.cfg.keep.is_some()
                        && self.files.len() > 1 =>
                {
                    if let (Some(old), Some(out)) = (self.files.pop_front(), &self.out) {
                        eprintln!(
                            "blkprof-trace: disk full: deleting the oldest kept file {} early",
                            out.dir.join(&old).display()
                        );
                        remove_files(&out.dir, &[old]);
                    }
                }
                r => return r,
            }
        }
    }

    /// The rotation from its cut to the next file open; nothing after that can fail.
    async fn rotate_at_a_cut(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
        prepared: Option<Prepared>,
    ) -> Result<()> {
        drain_ring(ring, self);
        // With half records, misses found from here on may be of requests in flight at the
        // instant (below).
        let misses = if self.source.is_halves() {
            self.counters()?.missed_completions
        } else {
            0
        };
        let at = clock::monotonic_ns() + CUT_LEAD_NS;
        let before = Cuts::epoch_of(self.cuts.rotation, at);
        let after = before ^ AGG_EPOCH;
        let cuts = Cuts {
            rotation: Cuts::rotation_at(at, after / AGG_EPOCH),
            ..self.cuts
        };
        let at = cuts.rotation & !1;
        let (cut, ds) = self.set_cuts_and_read(cuts, at, false)?;
        // From here the records completing after the instant wait for the next file, and the
        // ones up to `read_to_ns` are tallied on the cut (for both files' coverage).
        self.hold_after = Some(at);
        self.end_cut = Some(cut);
        drain_ring(ring, self);
        // A program that read the clock before the instant has finished long before this
        // (tracepoint probes run with preemption off); what it wrote is in the ring by now.
        let settle = tokio::time::sleep(Duration::from_millis(1));
        self.serving(ring, asks, settle).await;
        drain_ring(ring, self);
        // Every CPU's batch too, then the join's records up to the instant and past it
        // through the counters' read (those are tallied on the cut, for both files), before
        // the file closes; the ones after the instant are held for the next file. (If a
        // batch could not be written, the records up to the instant only: what it holds
        // comes late.)
        if !self.settle() {
            self.sweep(at);
        }
        // A completion the kernel did not run the program for is found only when its request's
        // address starts another request, and the kernel counted it somewhere between the
        // request's last event and then: for a request in flight at the instant, the count
        // and the miss can fall in different files. So with half records the file stays open
        // (the records after the instant held) until the requests that entered the OS in the
        // second before the instant have completed or been found missed. The misses found
        // meanwhile are this file's, and the next file's coverage allows for them (the kernel
        // may have counted them after the instant); the requests still open then will be a
        // later file's if found missed, and this file's coverage allows for them. Under load
        // this takes about as long as the slowest of them. (The in-kernel join does not wait:
        // its request map takes tens of ms to scan.)
        let still_open = if self.source.is_halves() {
            let window = (at.saturating_sub(ROTATION_WAITS_FOR_NS), at);
            let poll = Duration::from_millis(2);
            Some(
                self.wait_joined(ring, asks, window, ROTATION_GRACE, poll)
                    .await,
            )
        } else {
            None
        };
        // The parity before the instant no longer changes: it and the other's value frozen at
        // the last rotation are the aggregates at the instant.
        let frozen = self.probe.aggregates_of(Some(before))?;
        let ag = AggregateSnapshot::sum(&frozen, &self.frozen_other);
        let ct = self.counters()?;
        if let (Some(open), Some(c)) = (still_open, &mut self.end_cut) {
            c.missed_after = ct.missed_completions.saturating_sub(misses);
            c.still_open = open;
        }
        // The next file's loss counters start where this file's end, whatever changes while
        // this one closes.
        self.start_counters = Some(ct.clone());
        self.start_diskstats = Some(ds.clone());
        self.start_aggregates = Some(ag.clone());
        let next = self.create_output(self.seq + 1, Some(at), prepared)?;
        self.frozen_other = frozen;
        let closing = self.end_file("rotation", ds, ag, ct);
        self.file_start_cut = self.end_cut.take();
        self.seq += 1;
        self.install(next);
        self.hold_after = None;
        self.filtered_out_file = std::mem::take(&mut self.held_filtered_out);
        for (r, comm) in std::mem::take(&mut self.held) {
            self.write(&r, &comm);
        }
        // The trailer's write and the file's sync, and `--keep`'s deletions, on a blocking
        // thread: they can take long on a busy disk.
        let old = self.beyond_keep();
        let dir = self.out.as_ref().map(|o| o.dir.clone());
        let done = tokio::task::spawn_blocking(move || {
            if let Some(c) = closing {
                c.finish();
            }
            if let Some(dir) = dir {
                remove_files(&dir, &old);
            }
        });
        if let Err(e) = self.serving(ring, asks, done).await {
            eprintln!("blkprof-trace: closing the rotated file failed: {e}");
        }
        Ok(())
    }

    /// A rotation that failed before the next file was open: the open file goes on to the
    /// run's end, with the records held for the next.
    fn abandon_rotation(&mut self) {
        if self.hold_after.take().is_none() {
            return;
        }
        self.end_cut = None;
        self.filtered_out_file += std::mem::take(&mut self.held_filtered_out);
        for (r, comm) in std::mem::take(&mut self.held) {
            self.write(&r, &comm);
        }
    }
}
