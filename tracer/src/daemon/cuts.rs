//! The cuts: the run's start and end (and each rotation) at one instant, written to the probe
//! ahead of time, with /proc/diskstats read just after, so that the records, the probe's
//! aggregates and the kernel's counters all split there.

use std::time::{Duration, Instant};

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use tracer_common::Cuts;
use tracer_common::format::{Cut, DiskStats};

use super::Run;
use super::agent::Asks;
use super::source::{RecordSource, drain_ring};
use crate::clock;
use crate::devices;

/// How far ahead of now a cut's instant is set: long enough for the write to reach every
/// CPU's program before the instant comes.
pub(super) const CUT_LEAD_NS: u64 = 2_000_000;
/// How long the end waits for the IOs in flight at the cut to complete before counting the
/// rest as missed completions.
pub(super) const CUT_GRACE: Duration = Duration::from_secs(2);

impl Run {
    pub(super) fn snapshot_diskstats(&self) -> Result<Vec<DiskStats>> {
        let all = devices::read_diskstats()?;
        let mut out: Vec<DiskStats> = if self.cfg.devices.is_empty() {
            // All whole disks the probe can see (bio-based ones have no request events).
            all.into_values()
                .filter(|d| devices::has_request_events(&d.name))
                .collect()
        } else {
            self.devices
                .iter()
                .filter_map(|d| all.get(&(d.major, d.minor)).cloned())
                .collect()
        };
        out.sort_by_key(|d| (d.major, d.minor));
        Ok(out)
    }

    /// Cut the run at an instant shortly ahead: write it to the probe, wait for it, then read
    /// /proc/diskstats at once. `start`: the run's start (IOs completing after it belong to the
    /// run), else its end (IOs completing by it do).
    pub(super) fn cut(&mut self, start: bool) -> Result<(Cut, Vec<DiskStats>)> {
        let at = clock::monotonic_ns() + CUT_LEAD_NS;
        let cuts = if start {
            Cuts {
                start_after_ns: at,
                end_at_ns: u64::MAX,
                ..self.cuts
            }
        } else {
            Cuts {
                end_at_ns: at,
                ..self.cuts
            }
        };
        self.set_cuts_and_read(cuts, at, start)
    }

    /// Write the cut map, then wait for the instant `at` and read /proc/diskstats at once.
    pub(super) fn set_cuts_and_read(
        &mut self,
        cuts: Cuts,
        at: u64,
        read_counters: bool,
    ) -> Result<(Cut, Vec<DiskStats>)> {
        self.probe.set_cuts(cuts)?;
        self.cuts = cuts;
        if read_counters {
            self.start_counters = Some(self.counters()?);
        }
        // A sleep of the lead at most, on the runtime's thread: a timer of the runtime's
        // millisecond would put the diskstats read later than the instant.
        loop {
            let now = clock::monotonic_ns();
            if now >= at {
                break;
            }
            std::thread::sleep(Duration::from_nanos(at - now));
        }
        let read_from_ns = clock::monotonic_ns();
        let ds = self.snapshot_diskstats()?;
        let read_to_ns = clock::monotonic_ns();
        Ok((
            Cut {
                at_ns: at,
                read_from_ns,
                read_to_ns,
                ..Cut::default()
            },
            ds,
        ))
    }

    /// After the end's cut: wait (draining the ring) until the requests in flight at the
    /// instant have completed, or for [`CUT_GRACE`]; the ones still tracked then were missed.
    /// Returns them, counted by stage (seen completing, issued, never issued).
    pub(super) async fn wait_in_flight(
        &mut self,
        ring: &mut RingBuf<MapData>,
        asks: &mut Asks,
    ) -> Result<[u64; 3]> {
        let Some(at) = self.end_cut.as_ref().map(|c| c.at_ns) else {
            return Ok([0; 3]);
        };
        if let RecordSource::Halves(_) = self.source {
            // The join holds the requests in flight; the ones left are counted as missed
            // with the join's other unclosed requests (`Run::counters`), by no stage.
            let poll = Duration::from_millis(10);
            let open = self.wait_joined(ring, asks, (0, at), CUT_GRACE, poll).await;
            if let Some(c) = &mut self.end_cut {
                c.never_completed = open;
            }
            return Ok([0; 3]);
        }
        // The in-kernel join: its request map holds the requests in flight.
        let mut pending: Vec<_> = self
            .probe
            .tracked()?
            .into_iter()
            .filter(|(_, st)| st.enter_ns <= at)
            .collect();
        let until = Instant::now() + CUT_GRACE;
        while !pending.is_empty() && Instant::now() < until {
            let poll = tokio::time::sleep(Duration::from_millis(10));
            self.serving(ring, asks, poll).await;
            drain_ring(ring, self);
            pending.retain(|(w, st)| self.probe.still_tracked(*w, st));
        }
        let mut stages = [0u64; 3];
        for (_, st) in &pending {
            stages[if st.complete_ns != 0 {
                0
            } else if st.issued != 0 || st.issue_ns != 0 {
                1
            } else {
                2
            }] += 1;
        }
        Ok(stages)
    }
}
