//! What a trace knows it missed and how far it can be trusted: the tracer's loss counters
//! against the coverage check, and the integrity of the file (its ending, records outside the
//! run, what was skipped).

use tracer_common::coverage::DeviceCoverage;
use tracer_common::format::{
    Ending, ProbeCounters, StatsFrame, TraceHeader, TraceReader, TraceTrailer, rfc3339,
};

use super::engine::Window;
use super::{Integrity, Lost, Summary};

/// What a trace knows it missed, from its header, its trailer (else its last stats frame: a file
/// cut short still knows its losses up to there) and its coverage check.
pub fn lost(
    header: &TraceHeader,
    trailer: Option<&TraceTrailer>,
    last_stats: Option<&StatsFrame>,
    coverage: &[DeviceCoverage],
) -> Lost {
    let c = match (trailer, last_stats) {
        (Some(t), _) => t.counters_end.clone(),
        (None, Some(st)) => st.counters.clone(),
        (None, None) => ProbeCounters::default(),
    };
    let c0 = &header.counters_start;
    let drops = c.ring_drops.saturating_sub(c0.ring_drops);
    let missed = c.missed_completions.saturating_sub(c0.missed_completions);
    let rec = c.recursion_misses().saturating_sub(c0.recursion_misses());
    let untracked = c.request_map_full.saturating_sub(c0.request_map_full);
    // IOs recorded but missing from the aggregates (their key did not fit): not lost from
    // the trace, but they explain a gap in the coverage check.
    let unaggregated = c.aggregate_map_full.saturating_sub(c0.aggregate_map_full);
    let reported = missed.saturating_add(rec).saturating_add(untracked);
    let unaccounted: u64 = coverage
        .iter()
        .flat_map(|d| d.groups.iter())
        .map(|g| g.unaccounted(reported.saturating_add(unaggregated)))
        .fold(0, u64::saturating_add);
    Lost {
        total: reported.saturating_add(drops).saturating_add(unaccounted),
        ring_drops: drops,
        missed_completions: missed,
        recursion_misses: rec,
        untracked,
        unaccounted,
        filtered_out: match (trailer, last_stats) {
            (Some(t), _) => t.filtered_out,
            (None, Some(st)) => st.filtered_out,
            (None, None) => 0,
        },
    }
}

impl Summary {
    pub fn lost(&self) -> Lost {
        lost(
            &self.header,
            self.trailer.as_ref(),
            self.last_stats.as_ref(),
            &self.coverage,
        )
    }

    pub fn wall(&self, mono_ns: u64) -> String {
        wall_time(&self.header, mono_ns)
    }
}

/// RFC 3339 wall-clock time of a `CLOCK_MONOTONIC` instant of the trace.
pub fn wall_time(header: &TraceHeader, mono_ns: u64) -> String {
    rfc3339(header.wall_ns(mono_ns))
}

/// How the file `r` ended and what the report leaves out: `records` read, `outside_window` of
/// them left out, `devices_without_series`, and the last completion read.
pub(super) fn integrity(
    r: &TraceReader,
    window: &Window,
    records: u64,
    outside_window: u64,
    devices_without_series: u64,
    last_record_ns: Option<u64>,
) -> Integrity {
    let header = r.header();
    let t0 = header.monotonic_base_ns;
    let ending = r.ending();
    let last_stats = r.last_stats();
    let wall = |t: u64| wall_time(header, t);
    let rel = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let mut integrity = Integrity {
        ending: match ending {
            Ending::Complete => "complete",
            Ending::Corrupt { .. } => "corrupt",
            _ => "truncated",
        }
        .into(),
        losses_from: if r.trailer().is_some() {
            "trailer"
        } else if last_stats.is_some() {
            "last stats frame"
        } else {
            "none"
        }
        .into(),
        records_outside_window: outside_window,
        unknown_frames_skipped: r.skipped_frames(),
        devices_without_series,
        notes: window.note.clone().into_iter().collect(),
        ..Integrity::default()
    };
    if *ending != Ending::Complete {
        let until = last_stats
            .map(|st| st.at_ns)
            .max(last_record_ns)
            .unwrap_or(t0);
        integrity.known_until = Some(wall(until));
        let losses = match last_stats {
            Some(st) => format!(
                "losses are those of its last stats frame (+{:.1} s)",
                rel(st.at_ns)
            ),
            None => "it has no stats frame, so its losses are unknown".to_string(),
        };
        integrity.stopped = Some(match ending {
            Ending::Corrupt {
                frame,
                offset,
                reason,
            } => format!(
                "corrupt at frame {frame} (byte {offset}): {reason}; reporting the {} records before it, up to +{:.1} s; {losses}",
                records,
                rel(until)
            ),
            Ending::Truncated {
                intact_bytes,
                trailing_bytes,
            } => format!(
                "truncated after +{:.1} s: no trailer after {intact_bytes} intact bytes ({trailing_bytes} trailing bytes dropped), the tracer did not stop cleanly; {losses}",
                rel(until)
            ),
            _ => format!("not read to its end; {losses}"),
        });
    }
    if outside_window > 0 {
        integrity.notes.push(format!(
            "{outside_window} records have times that cannot belong to this run (completed outside {} .. {}, or issued after completing): damaged, left out of the report",
            wall(window.lo_ns),
            wall(window.hi_ns)
        ));
    }
    if devices_without_series > 0 {
        integrity.notes.push(format!(
            "{devices_without_series} devices not announced in the trace have totals but no time series (series memory is bounded)"
        ));
    }
    if r.skipped_frames() > 0 {
        integrity.notes.push(format!(
            "{} frames of kinds this version does not know were skipped (written by a newer blkprof-trace?)",
            r.skipped_frames()
        ));
    }
    integrity
}
