//! The flight recorder: the last minutes of per-IO records kept in memory, in the trace's own
//! compact chunks, written out as a normal trace file when asked (SIGUSR1, `POST /dump`) or
//! when a trigger rule fires.
//!
//! The recent past is a queue of segments, each a stretch of the trace between two cuts of
//! the run at one instant (the same cut as file rotation: the probe's aggregates flip epoch
//! there and /proc/diskstats is read just after), so a dump of consecutive segments is exact
//! against the kernel's counters from its first cut to its last, as any trace file is.
//!
//! A dump takes the segments held (shared, not copied) and is written by a blocking task off
//! the daemon's loop, which goes on reading the ring meanwhile: writing 10 minutes of IOs
//! takes long enough to overflow the ring at a high rate. Segments the recorder lets go while
//! a dump is being written live until it is done, so memory may reach twice the bound then.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracer_common::format::{Blocks, FormatError, TraceHeader, TraceTrailer, TraceWriter};
use tracer_common::op::StatGroup;

/// A stretch of the trace between two cuts.
pub struct Segment {
    pub header: TraceHeader,
    pub frames: Blocks,
    pub trailer: TraceTrailer,
    pub records: u64,
}

pub struct Recorder {
    /// How much of the past to keep.
    pub window: Duration,
    /// At most this many bytes of segments (the oldest go first).
    pub max_bytes: u64,
    /// How long a segment runs before the next cut: the dump's granularity.
    pub segment: Duration,
    pub dir: PathBuf,
    /// After a trigger fires: the dump waits this long.
    pub after: Duration,
    pub triggers: Vec<Trigger>,
    segments: VecDeque<Arc<Segment>>,
    bytes: u64,
    /// Segments dropped for the byte bound while still inside the window.
    pub shortened: u64,
    /// A trigger fired at this instant (monotonic) and its dump waits: keep the window
    /// before it, not only before now.
    hold_from: Option<u64>,
}

impl Recorder {
    pub fn new(
        window: Duration,
        max_bytes: u64,
        dir: PathBuf,
        after: Duration,
        triggers: Vec<Trigger>,
    ) -> Recorder {
        // Twenty segments per window, 1 s to 30 s each.
        let segment = (window / 20).clamp(Duration::from_secs(1), Duration::from_secs(30));
        Recorder {
            window,
            max_bytes,
            segment,
            dir,
            after,
            triggers,
            segments: VecDeque::new(),
            bytes: 0,
            shortened: 0,
            hold_from: None,
        }
    }

    /// Add a closed segment; drop the ones no longer needed to cover the window before
    /// `now_ns` (monotonic), and the oldest beyond the byte bound.
    pub fn push(&mut self, s: Segment, now_ns: u64) {
        self.bytes += s.frames.len() as u64;
        self.segments.push_back(Arc::new(s));
        let window_ns = crate::clock::duration_ns(self.window);
        let needed_from = self
            .hold_from
            .unwrap_or(u64::MAX)
            .min(now_ns)
            .saturating_sub(window_ns);
        while self.segments.len() > 1 {
            let second_start = self.segments[1].header.monotonic_base_ns;
            let over_window = second_start <= needed_from;
            let over_bytes = self.bytes > self.max_bytes;
            if !over_window && !over_bytes {
                break;
            }
            if over_bytes && !over_window {
                self.shortened += 1;
            }
            if let Some(old) = self.segments.pop_front() {
                self.bytes -= old.frames.len() as u64;
            }
        }
    }

    /// A trigger fired at `at_ns` (monotonic): keep the window before it until the dump.
    pub fn hold(&mut self, at_ns: u64) {
        self.hold_from = Some(at_ns);
    }

    /// What a dump writes: every segment held now (shared with the recorder, which goes on).
    pub fn snapshot(&mut self) -> Option<Snapshot> {
        if self.segments.is_empty() {
            return None;
        }
        self.hold_from = None;
        Some(Snapshot {
            segments: self.segments.iter().cloned().collect(),
            shortened: self.shortened,
        })
    }
}

/// The segments of one dump.
pub struct Snapshot {
    segments: Vec<Arc<Segment>>,
    /// Segments dropped for the byte bound inside the window, up to this dump.
    pub shortened: u64,
}

impl Snapshot {
    /// Write the segments as one trace file at `path` (through a `.part` file renamed when
    /// complete). Returns (records, bytes, first and last monotonic instants).
    pub fn write(&self, path: &Path, reason: &str) -> Result<(u64, u64, u64, u64), FormatError> {
        let (Some(first), Some(last)) = (self.segments.first(), self.segments.last()) else {
            return Err(FormatError::Io {
                path: path.to_owned(),
                source: std::io::Error::other("the flight recorder holds nothing yet"),
            });
        };
        let part = path.with_extension("blkp.part");
        let mut header = first.header.clone();
        header.sequence = 0;
        // Devices seen during the window are in its device frames; the header lists the ones
        // known at its start.
        let mut w = TraceWriter::create(&part, &header)?;
        let mut records = 0;
        for s in &self.segments {
            w.append_frames(&s.frames, s.records)?;
            records += s.records;
        }
        let trailer = TraceTrailer {
            reason: format!("flight-recorder dump ({reason})"),
            records_in_file: records,
            filtered_out: self.segments.iter().map(|s| s.trailer.filtered_out).sum(),
            start_cut: first.trailer.start_cut.clone(),
            ..last.trailer.clone()
        };
        let bytes = w.finish(&trailer)?;
        std::fs::rename(&part, path).map_err(|source| FormatError::Io {
            path: path.to_owned(),
            source,
        })?;
        Ok((
            records,
            bytes,
            first.header.monotonic_base_ns,
            last.trailer.monotonic_end_ns,
        ))
    }
}

/// A condition on one interval of one device that makes the recorder dump.
#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    /// A latency quantile of an op group (None: all) above a bound.
    Latency {
        group: Option<StatGroup>,
        /// true: total (submission to completion); false: device (issue to completion).
        total: bool,
        quantile: f64,
        above_ns: u64,
        text: String,
    },
    /// The most requests in the OS seen in the interval above a bound.
    QueueDepth { above: u32, text: String },
}

impl Trigger {
    pub fn text(&self) -> &str {
        match self {
            Trigger::Latency { text, .. } | Trigger::QueueDepth { text, .. } => text,
        }
    }
}

/// `OP.PHASE.pQ > DURATION` (OP: read, write, discard, flush or any; PHASE: total or device;
/// Q: 50, 90, 99, 999 or 9999) or `queue_depth > N`.
pub fn parse_trigger(s: &str) -> Result<Trigger, String> {
    let help = "a trigger is OP.PHASE.pQ > DURATION (read.total.p99 > 20ms; OP read, write, discard, flush or any; PHASE total or device; Q 50, 90, 99, 999, 9999) or queue_depth > N";
    let (lhs, rhs) = s
        .split_once('>')
        .ok_or_else(|| format!("{s:?}: no '>'; {help}"))?;
    let (lhs, rhs) = (lhs.trim(), rhs.trim());
    if lhs == "queue_depth" {
        let above = rhs
            .parse()
            .map_err(|_| format!("{s:?}: {rhs:?} is not a count; {help}"))?;
        return Ok(Trigger::QueueDepth {
            above,
            text: s.trim().to_string(),
        });
    }
    let parts: Vec<&str> = lhs.split('.').collect();
    let [op, phase, q] = parts[..] else {
        return Err(format!("{s:?}: {lhs:?}; {help}"));
    };
    let group = match op {
        "any" => None,
        _ => Some(
            StatGroup::ALL
                .into_iter()
                .find(|g| g.name() == op)
                .ok_or_else(|| format!("{s:?}: unknown op {op:?}; {help}"))?,
        ),
    };
    let total = match phase {
        "total" => true,
        "device" => false,
        _ => return Err(format!("{s:?}: unknown phase {phase:?}; {help}")),
    };
    let quantile = match q {
        "p50" => 0.5,
        "p90" => 0.9,
        "p99" => 0.99,
        "p999" => 0.999,
        "p9999" => 0.9999,
        _ => return Err(format!("{s:?}: unknown quantile {q:?}; {help}")),
    };
    let above = tracer_common::units::parse_duration(rhs)
        .or_else(|_| parse_small_duration(rhs))
        .map_err(|()| format!("{s:?}: {rhs:?} is not a duration (20ms, 500us, 1s); {help}"))?;
    Ok(Trigger::Latency {
        group,
        total,
        quantile,
        above_ns: crate::clock::duration_ns(above),
        text: s.trim().to_string(),
    })
}

/// Durations below a millisecond, which the tracer's other options do not take.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "v is finite and positive (checked); `as` drops the fraction of a nanosecond and \
              saturates beyond u64::MAX, as wanted"
)]
fn parse_small_duration(s: &str) -> Result<Duration, ()> {
    let (num, mult) = if let Some(n) = s.strip_suffix("us") {
        (n, 1_000.0)
    } else if let Some(n) = s.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else {
        return Err(());
    };
    let v: f64 = num.trim().parse().map_err(|_| ())?;
    if !(v.is_finite() && v > 0.0) {
        return Err(());
    }
    Ok(Duration::from_nanos((v * mult) as u64))
}

/// The file name of a dump taken at `wall_ns`.
pub fn dump_name(dir: &Path, wall_ns: i64) -> PathBuf {
    let stamp = tracer_common::format::rfc3339(wall_ns)
        .replace([':', '-'], "")
        .chars()
        .take(15)
        .collect::<String>();
    let mut p = dir.join(format!("flight-{stamp}Z.blkp"));
    let mut n = 1;
    while p.exists() {
        n += 1;
        p = dir.join(format!("flight-{stamp}Z-{n}.blkp"));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_parse_and_explain_mistakes() {
        assert_eq!(
            parse_trigger("read.total.p99 > 20ms").unwrap(),
            Trigger::Latency {
                group: Some(StatGroup::Read),
                total: true,
                quantile: 0.99,
                above_ns: 20_000_000,
                text: "read.total.p99 > 20ms".into()
            }
        );
        assert!(matches!(
            parse_trigger("any.device.p999>500us").unwrap(),
            Trigger::Latency {
                group: None,
                total: false,
                above_ns: 500_000,
                ..
            }
        ));
        assert!(matches!(
            parse_trigger("queue_depth > 64").unwrap(),
            Trigger::QueueDepth { above: 64, .. }
        ));
        for bad in [
            "read.p99 > 1ms",
            "reed.total.p99 > 1ms",
            "read.total.p98 > 1ms",
            "queue_depth > x",
            "read.total.p99 < 1ms",
            "read.total.p99 > fast",
        ] {
            let e = parse_trigger(bad).unwrap_err();
            assert!(e.contains("a trigger is"), "{bad}: {e}");
        }
    }

    #[test]
    fn dump_names_sort_by_time_and_never_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let a = dump_name(dir.path(), 1_700_000_000_000_000_000);
        assert_eq!(a.file_name().unwrap(), "flight-20231114T221320Z.blkp");
        std::fs::write(&a, b"x").unwrap();
        let b = dump_name(dir.path(), 1_700_000_000_000_000_000);
        assert_eq!(b.file_name().unwrap(), "flight-20231114T221320Z-2.blkp");
    }
}
