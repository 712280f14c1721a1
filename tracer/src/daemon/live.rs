//! The interval's end: the live lines, the .hlog, the flight recorder's triggers, and the
//! open file's stats frame.

use std::io::Write;
use std::time::Instant;

use tracer_common::dev_split;
use tracer_common::format::StatsFrame;

use super::Run;
use super::output::Writer;
use crate::clock;
use crate::devices;
use crate::probe::ProbeMode;
use crate::stats::{IntervalLine, print_line};

/// The live interval: when the run and the interval started.
pub(super) struct Interval {
    started: Instant,
    start: Instant,
    start_wall: i64,
}

impl Interval {
    pub(super) fn new(start_wall: i64) -> Interval {
        Interval {
            started: Instant::now(),
            start: Instant::now(),
            start_wall,
        }
    }
}

impl Run {
    /// End the interval and start the next.
    pub(super) fn end_interval(&mut self, iv: &mut Interval) {
        let len = clock::duration_ns(iv.start.elapsed());
        self.tick(iv.start_wall, iv.started.elapsed().as_secs_f64(), len);
        iv.start = Instant::now();
        iv.start_wall = clock::realtime_ns();
    }

    /// The run's last interval, up to now (never empty).
    pub(super) fn last_interval(&mut self, iv: &Interval) {
        let len = clock::duration_ns(iv.start.elapsed());
        self.tick(
            iv.start_wall,
            iv.started.elapsed().as_secs_f64(),
            len.max(1),
        );
    }

    fn tick(&mut self, interval_start_wall: i64, t_s: f64, len_ns: u64) {
        // Without records, the devices come to light in the aggregates (tracing all devices).
        let aggregates = (self.probe.mode != ProbeMode::Records).then(|| {
            let now = self.probe.aggregates().unwrap_or_default();
            for a in &now {
                self.new_device(tracer_common::dev_join(a.major, a.minor));
            }
            now
        });
        let names = self.names.clone();
        let name_of = move |dev: u32| {
            names.get(&dev).cloned().unwrap_or_else(|| {
                let (ma, mi) = dev_split(dev);
                format!("{ma}:{mi}")
            })
        };
        let hlog = self.output.as_mut().and_then(|o| o.hlog.as_mut());
        let triggers = self
            .recorder
            .as_ref()
            .map_or(&[][..], |r| r.triggers.as_slice());
        let (lines, fired) = if let Some(now) = aggregates {
            let names = &self.names;
            let inflight = |dev: u32| {
                names
                    .get(&dev)
                    .and_then(|n| devices::inflight(n))
                    .map_or(0, |q| u32::try_from(q).unwrap_or(u32::MAX))
            };
            let lines = crate::stats::aggregate_lines(
                &self.prev_aggregates,
                &now,
                interval_start_wall,
                t_s,
                len_ns,
                &name_of,
                &inflight,
            );
            self.prev_aggregates = now;
            (lines, Vec::new())
        } else {
            self.stats
                .end_interval(interval_start_wall, t_s, len_ns, &name_of, hlog, triggers)
        };
        if !fired.is_empty()
            && self.pending_dump.is_none()
            && let Some(rec) = &mut self.recorder
        {
            // A sustained incident fires every interval: one dump per cooldown.
            let cooling = rec
                .last_trigger_dump
                .is_some_and(|last| last.elapsed() < rec.limits.cooldown);
            if cooling {
                if !rec.cooldown_said {
                    rec.cooldown_said = true;
                    eprintln!(
                        "blkprof-trace: flight recorder: trigger {} again; no dump before {} after the last (--dump-cooldown)",
                        fired.join("; "),
                        tracer_common::units::format_duration_ns(clock::duration_ns(
                            rec.limits.cooldown
                        ))
                    );
                }
            } else {
                rec.last_trigger_dump = Some(std::time::Instant::now());
                rec.cooldown_said = false;
                rec.hold(clock::monotonic_ns());
                let why = format!("trigger {}", fired.join("; "));
                eprintln!(
                    "blkprof-trace: flight recorder: {why}; dumping in {}",
                    tracer_common::units::format_duration_ns(clock::duration_ns(rec.after))
                );
                self.pending_dump = Some((tokio::time::Instant::now() + rec.after, why));
            }
        }
        if !self.cfg.quiet {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "the live view is for whoever watches: a closed stdout (the view piped \
                          into `head`) must not stop the trace"
            )]
            let _ = live_lines(&mut self.stdout.lock(), &lines, self.cfg.json);
        }
        // Bound what a SIGKILL can lose to one interval, and record losses so far.
        if let Ok(counters) = self.counters()
            && let Some(o) = &mut self.output
            && let Writer::File(w) = &mut o.writer
        {
            let stats = StatsFrame {
                at_ns: clock::monotonic_ns(),
                counters,
                records_in_file: w.records_in_file(),
                filtered_out: self.filtered_out_file,
            };
            if let Err(e) = w.write_stats(&stats) {
                self.write_error.get_or_insert(e);
            }
        }
    }
}

/// An interval's live lines, as JSON lines or as the table's rows.
pub(super) fn live_lines(
    out: &mut impl Write,
    lines: &[IntervalLine],
    json: bool,
) -> std::io::Result<()> {
    for l in lines {
        if json {
            serde_json::to_writer(&mut *out, l)?;
            writeln!(out)?;
        } else {
            print_line(out, l)?;
        }
    }
    out.flush()
}
