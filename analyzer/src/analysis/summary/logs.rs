//! The summary beside the application's log and the stress tool's output: discards after
//! compactions, write bursts matched with flushes, and the files whose times miss the trace
//! (with the time zone that would bring them onto it).

use tracer_common::format::rfc3339;

use super::{
    COMPACTION_DISCARD_WINDOW_NS, CompactionDiscards, CompactionRow, DeviceStats, NEAR_TRACE_NS,
    Summary, TimeWarning,
};

impl Summary {
    /// The discards that followed each compaction of the application's log, per device.
    pub fn compaction_discards(&self) -> Vec<(String, CompactionDiscards)> {
        let mut comps: Vec<crate::inputs::stress::Compaction> = self
            .context
            .logs
            .iter()
            .flat_map(|l| l.compactions.iter().cloned())
            .collect();
        comps.sort_by_key(|c| c.end_ns);
        self.devices
            .values()
            .filter_map(|d| {
                let lo = self.header.wall_ns(d.first_ns);
                let hi = self.header.wall_ns(d.last_ns);
                let inside: Vec<&crate::inputs::stress::Compaction> = comps
                    .iter()
                    .filter(|c| c.end_ns >= lo && c.end_ns <= hi)
                    .collect();
                if inside.is_empty() {
                    return None;
                }
                let mut out = CompactionDiscards {
                    compactions: inside.len(),
                    window_s: COMPACTION_DISCARD_WINDOW_NS as f64 / 1e9,
                    ..Default::default()
                };
                for (i, c) in inside.iter().enumerate() {
                    let next = inside.get(i + 1).map_or(i64::MAX, |n| n.end_ns);
                    let until = next.min(c.end_ns + COMPACTION_DISCARD_WINDOW_NS);
                    let mono = |w: i64| self.header.mono_ns(w);
                    let (a, b) = (mono(c.end_ns), mono(until));
                    let from = d.discards.partition_point(|r| r.complete_ns < a);
                    let to = d.discards.partition_point(|r| r.complete_ns < b);
                    let slice = &d.discards[from..to.max(from)];
                    let n = slice.len() as u64;
                    let bytes: u64 = slice.iter().map(|r| u64::from(r.bytes)).sum();
                    out.discards += n;
                    out.discard_bytes += bytes;
                    out.followed_by_discards += usize::from(n > 0);
                    out.rows.push(CompactionRow {
                        id: c.id.clone(),
                        start: c.start.clone(),
                        end: c.end.clone(),
                        discards: n,
                        discard_bytes: bytes,
                        first_discard_after_s: slice
                            .first()
                            .map(|r| (r.complete_ns - a) as f64 / 1e9),
                    });
                }
                Some((d.name.clone(), out))
            })
            .collect()
    }

    /// The trace's wall-clock span (Unix ns): its start, and its end from the trailer or, in a
    /// trace cut short, its last completion.
    pub fn wall_span(&self) -> (i64, i64) {
        if let Some(t) = &self.trailer {
            (self.header.wall_clock_start_ns, t.wall_clock_end_ns)
        } else {
            let last = self.devices.values().map(|d| d.last_ns).max().unwrap_or(0);
            (self.header.wall_clock_start_ns, self.header.wall_ns(last))
        }
    }

    /// Whether a wall-clock instant (Unix ns) is on the trace: within [`NEAR_TRACE_NS`] of
    /// its span.
    pub fn near_trace(&self, unix_ns: i64) -> bool {
        let (a, b) = self.wall_span();
        unix_ns >= a - NEAR_TRACE_NS && unix_ns <= b + NEAR_TRACE_NS
    }

    /// A device's write bursts on the wall clock, for matching with the log's flushes.
    fn burst_spans(&self, d: &DeviceStats) -> Vec<crate::inputs::stress::BurstSpan> {
        d.bursts
            .iter()
            .map(|b| crate::inputs::stress::BurstSpan {
                start_ns: self.header.wall_ns(b.start_ns),
                end_ns: self.header.wall_ns(b.end_ns),
                start: b.start.clone(),
                writers: crate::analysis::bursts::writers_text(&b.writers),
                main_writer: b
                    .writers
                    .first()
                    .map_or_else(|| "-".to_string(), |w| w.comm.clone()),
                class: b.class.clone(),
                write_bytes: b.write_bytes,
            })
            .collect()
    }

    /// Match each device's write bursts with the logs' flushes (1 s tolerance).
    pub fn flush_matches(&self) -> Vec<(String, crate::inputs::stress::FlushMatch)> {
        // Only flushes within the traced time can be matched.
        let (t_start, t_end) = self.wall_span();
        let flushes: Vec<crate::inputs::stress::Flush> = self
            .context
            .logs
            .iter()
            .flat_map(|l| l.flushes.iter().cloned())
            .filter(|f| f.end_ns >= t_start && f.start_ns <= t_end)
            .collect();
        let compactions: Vec<crate::inputs::stress::Compaction> = self
            .context
            .logs
            .iter()
            .flat_map(|l| l.compactions.iter().cloned())
            .collect();
        if flushes.is_empty() {
            return Vec::new();
        }
        self.devices
            .values()
            .map(|d| {
                (
                    d.name.clone(),
                    crate::inputs::stress::match_flushes(
                        &flushes,
                        &compactions,
                        &self.burst_spans(d),
                        FLUSH_MATCH_TOLERANCE_NS,
                        self.classes.as_ref(),
                    ),
                )
            })
            .collect()
    }

    /// The application logs and stress files none of whose events falls on the trace, each
    /// with the whole- or half-hour UTC offset that would bring them onto it: a local-time
    /// file read in the wrong zone would otherwise just lose its sections.
    pub fn time_warnings(&self) -> Vec<TimeWarning> {
        use crate::inputs::zone::{Zone, candidate_offsets, format_offset, pick_offset};
        const S: i64 = 1_000_000_000;
        let (t_start, t_end) = self.wall_span();
        let span = |times: &[i64]| {
            (
                rfc3339(times.iter().copied().min().unwrap_or(0)),
                rfc3339(times.iter().copied().max().unwrap_or(0)),
            )
        };
        // Local wall-clock time as written (read as if UTC): read at offset o it is at local - o.
        let local = |zone: &Zone, t: i64| t + i64::from(zone.offset_s_at(t)) * S;
        let warning = |kind: &str, path: &str, zone: &Zone, times: &[i64], what: &str| {
            let (first, last) = span(times);
            TimeWarning {
                kind: kind.into(),
                path: path.into(),
                time_zone: zone.label.clone(),
                events: times.len(),
                message: format!(
                    "{path}: no {what} falls inside the trace (its {} {what}s {first} .. {last} read as {}; the trace {} .. {})",
                    times.len(),
                    zone.label,
                    rfc3339(t_start),
                    rfc3339(t_end)
                ),
                first,
                last,
                trace_start: rfc3339(t_start),
                trace_end: rfc3339(t_end),
                suggested_offset: None,
                also_fitting: Vec::new(),
            }
        };
        let bursts: Vec<crate::inputs::stress::BurstSpan> = self
            .devices
            .values()
            .flat_map(|d| self.burst_spans(d))
            .collect();
        let mut out = Vec::new();
        for log in &self.context.logs {
            let times: Vec<i64> = log.markers.iter().map(|m| m.time_ns).collect();
            if times.is_empty() || times.iter().any(|&t| self.near_trace(t)) {
                continue;
            }
            let zone = &log.time_zone;
            let mut w = warning("app-log", &log.path, zone, &times, "event");
            // Scored by the flushes that would match write bursts, then by the events inside.
            let scored: Vec<(i32, (usize, usize))> = candidate_offsets()
                .map(|o| {
                    let shift = |t: i64| local(zone, t) - i64::from(o) * S;
                    let inside = times.iter().filter(|&&t| self.near_trace(shift(t))).count();
                    let flushes: Vec<crate::inputs::stress::Flush> = log
                        .flushes
                        .iter()
                        .map(|f| crate::inputs::stress::Flush {
                            start_ns: shift(f.start_ns),
                            end_ns: shift(f.end_ns),
                            ..f.clone()
                        })
                        .collect();
                    let m = crate::inputs::stress::match_flushes(
                        &flushes,
                        &[],
                        &bursts,
                        FLUSH_MATCH_TOLERANCE_NS,
                        None,
                    );
                    (o, (m.flushes_matched, inside))
                })
                .collect();
            let near = zone.offset_s_at(times[0]);
            match pick_offset(&scored, near) {
                Some((o, (flushes, inside), also)) => {
                    let off = format_offset(o);
                    let gain = if flushes > 0 {
                        format!("{flushes} of its flushes would match write bursts")
                    } else {
                        format!("{inside} of its events would fall inside it")
                    };
                    w.message += &format!("; read as {off}, {gain}: try --app-log-tz {off}");
                    w.suggested_offset = Some(off);
                    w.also_fitting = also.into_iter().map(format_offset).collect();
                }
                None => {
                    w.message += "; no whole- or half-hour UTC offset brings any of them inside: is it the log of this run?";
                }
            }
            if !w.also_fitting.is_empty() {
                w.message += &format!(
                    " (so would {}: the log is longer than the trace; choose the zone of the host that wrote it)",
                    w.also_fitting.join(", ")
                );
            }
            out.push(w);
        }
        for run in &self.context.stress {
            let times: Vec<i64> = run.status.iter().filter_map(|p| p.time_ns).collect();
            if times.is_empty() || times.iter().any(|&t| self.near_trace(t)) {
                continue;
            }
            let zone = &run.time_zone;
            let mut w = warning("stress", &run.path, zone, &times, "status line");
            if run.anchored > 0 {
                // Placed by --stress-start, not by their own stamps: that is what to check.
                w.message += &format!(
                    "; they are placed by --stress-start: check it (a time without Z or an offset is read in --stress-tz, here {})",
                    zone.label
                );
                out.push(w);
                continue;
            }
            let scored: Vec<(i32, usize)> = candidate_offsets()
                .map(|o| {
                    let inside = times
                        .iter()
                        .filter(|&&t| self.near_trace(local(zone, t) - i64::from(o) * S))
                        .count();
                    (o, inside)
                })
                .collect();
            match pick_offset(&scored, zone.offset_s_at(times[0])) {
                Some((o, inside, also)) => {
                    let off = format_offset(o);
                    w.message += &format!(
                        "; read as {off}, {inside} of them would fall inside it: try --stress-tz {off}"
                    );
                    w.suggested_offset = Some(off);
                    w.also_fitting = also.into_iter().map(format_offset).collect();
                }
                None => {
                    w.message += "; no whole- or half-hour UTC offset brings any of them inside: is it the output of this run?";
                }
            }
            if !w.also_fitting.is_empty() {
                w.message += &format!(
                    " (so would {}: the output is longer than the trace; choose the zone of the host that wrote it)",
                    w.also_fitting.join(", ")
                );
            }
            out.push(w);
        }
        out
    }
}

/// A write burst matches a flush it overlaps within this tolerance.
pub const FLUSH_MATCH_TOLERANCE_NS: i64 = 1_000_000_000;
