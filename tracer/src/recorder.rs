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
//! a dump is being written live until it is done.
//!
//! The bound (`--flight-recorder-size`) counts everything a segment holds: its frames (the
//! records, and the names of cgroups and files as frames) and its header and trailer (whose
//! aggregates carry histograms per device and op). The open segment is cut at a twentieth of
//! the bound, and one dump is written at a time, so the recorder holds at most 1.05 times the
//! bound, and 2.05 times while a dump is being written.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracer_common::format::{Blocks, FormatError, TraceHeader, TraceTrailer, TraceWriter};
use tracer_common::op::StatGroup;

use crate::outdir::OutDir;

/// A stretch of the trace between two cuts.
pub struct Segment {
    pub header: TraceHeader,
    pub frames: Blocks,
    pub trailer: TraceTrailer,
    pub records: u64,
}

impl Segment {
    /// The memory it holds, as the bound counts it: the frames (records and the names of
    /// cgroups and files, written as frames), and the header and trailer beside them, whose
    /// aggregates carry a histogram set per device and op.
    pub fn held_bytes(&self) -> u64 {
        let aggregates = |a: &[tracer_common::format::AggregateSnapshot]| -> usize {
            a.iter()
                .map(|x| {
                    size_of_val(x)
                        + 8 * (x.size.capacity()
                            + x.queue_latency.capacity()
                            + x.device_latency.capacity()
                            + x.total_latency.capacity())
                })
                .sum()
        };
        // The rest of the header and trailer (device lists, diskstats, cuts, labels) is
        // about as large in memory as written.
        let rest = serde_json::to_vec(&(
            &self.header.devices,
            &self.header.diskstats_start,
            &self.header.labels,
            &self.trailer.diskstats_end,
            &self.trailer.start_cut,
            &self.trailer.end_cut,
        ))
        .map_or(0, |v| v.len());
        let meta = size_of::<Segment>()
            + aggregates(&self.header.aggregates_start)
            + aggregates(&self.trailer.aggregates_end)
            + rest;
        self.frames.len() as u64 + meta as u64
    }
}

pub struct Recorder {
    /// How much of the past to keep.
    pub window: Duration,
    /// At most this many bytes of segments (the oldest go first).
    pub max_bytes: u64,
    /// How long a segment runs before the next cut: the dump's granularity.
    pub segment: Duration,
    pub dir: Arc<OutDir>,
    /// After a trigger fires: the dump waits this long.
    pub after: Duration,
    pub triggers: Vec<Trigger>,
    /// What `--dump-dir` may hold, and how often triggers may dump.
    pub limits: DumpLimits,
    /// When the last trigger's dump was written (monotonic): triggers re-arm a cooldown later.
    pub last_trigger_dump: Option<std::time::Instant>,
    /// The cooldown's refusal has been said since the last dump.
    pub cooldown_said: bool,
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
        dir: Arc<OutDir>,
        after: Duration,
        triggers: Vec<Trigger>,
        limits: DumpLimits,
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
            limits,
            last_trigger_dump: None,
            cooldown_said: false,
            segments: VecDeque::new(),
            bytes: 0,
            shortened: 0,
            hold_from: None,
        }
    }

    /// Add a closed segment; drop the ones no longer needed to cover the window before
    /// `now_ns` (monotonic), and the oldest beyond the byte bound.
    pub fn push(&mut self, s: Segment, now_ns: u64) {
        self.bytes += s.held_bytes();
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
                self.bytes -= old.held_bytes();
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
    /// The bytes of the segments' frames: about the dump's size.
    pub fn frame_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.frames.len() as u64).sum()
    }

    /// Write the segments as one trace file in `dir`, named for `wall_ns`
    /// (`flight-YYYYMMDDTHHMMSSZ[-N].blkp`): through a `.part` file created new, renamed when
    /// complete to a name nothing holds. Returns the path, records, bytes and the first and
    /// last monotonic instants.
    pub fn write(&self, dir: &OutDir, wall_ns: i64, reason: &str) -> Result<Written, FormatError> {
        let (Some(first), Some(last)) = (self.segments.first(), self.segments.last()) else {
            return Err(FormatError::Io {
                path: dir.path().to_owned(),
                source: std::io::Error::other("the flight recorder holds nothing yet"),
            });
        };
        let stamp = dump_stamp(wall_ns);
        let io_err = |path: PathBuf| move |source| FormatError::Io { path, source };
        let (mut n, part, file) = {
            let mut n = 1;
            loop {
                let name = dump_name(&stamp, n);
                let part = OsString::from(format!("{}.part", name.to_string_lossy()));
                if !dir.exists(&name) {
                    match dir.create_new(&part) {
                        Ok(f) => break (n, part, f),
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {}
                        Err(e) => return Err(io_err(dir.join(&part))(e)),
                    }
                }
                n += 1;
            }
        };
        let part_path = dir.join(&part);
        let mut header = first.header.clone();
        header.sequence = 0;
        // Devices seen during the window are in its device frames; the header lists the ones
        // known at its start.
        let mut w = TraceWriter::on_file(&part_path, file, &header)?;
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
        loop {
            let name = dump_name(&stamp, n);
            match dir.rename_new(&part, &name) {
                Ok(()) => {
                    return Ok(Written {
                        path: dir.join(&name),
                        records,
                        bytes,
                        from_ns: first.header.monotonic_base_ns,
                        to_ns: last.trailer.monotonic_end_ns,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(io_err(part_path)(e)),
            }
        }
    }
}

/// A dump written.
pub struct Written {
    pub path: PathBuf,
    pub records: u64,
    pub bytes: u64,
    pub from_ns: u64,
    pub to_ns: u64,
}

/// How much `--dump-dir` may hold, and how soon a trigger may dump again.
#[derive(Clone, Copy, Debug)]
pub struct DumpLimits {
    /// At most this many dumps (the oldest go first).
    pub max_files: usize,
    /// At most this many bytes of dumps (the oldest go first).
    pub quota: u64,
    /// After a trigger's dump, triggers wait this long.
    pub cooldown: Duration,
}

/// The dumps in `dir` (complete, and `.part`s left by a run that stopped while writing one),
/// oldest first, with their sizes.
fn dumps_in(dir: &OutDir) -> Vec<(OsString, u64)> {
    let mut found: Vec<((String, u32), OsString, u64)> = dir
        .names()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            let key = parse_dump_name(n.to_str()?)?;
            let size = dir.size_of(&n)?;
            Some((key, n, size))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, n, size)| (n, size)).collect()
}

/// (stamp, N) of `flight-STAMPZ[-N].blkp[.part]`.
fn parse_dump_name(n: &str) -> Option<(String, u32)> {
    let n = n.strip_prefix("flight-")?;
    let n = n.strip_suffix(".part").unwrap_or(n).strip_suffix(".blkp")?;
    let (stamp, k) = match n.split_once("Z-") {
        Some((s, k)) => (s, k.parse().ok()?),
        None => (n.strip_suffix('Z')?, 1),
    };
    (stamp.len() == 15 && stamp.as_bytes()[8] == b'T').then(|| (stamp.to_string(), k))
}

/// Make room in `dir` for a dump of about `need` bytes within `limits`, deleting the oldest
/// dumps; `Err` (and nothing deleted) if the dump alone is beyond the quota. Returns the
/// names deleted.
pub fn make_room(dir: &OutDir, need: u64, limits: DumpLimits) -> Result<Vec<OsString>, String> {
    if need > limits.quota {
        return Err(format!(
            "the dump would take about {} bytes, more than --dump-quota {}",
            need, limits.quota
        ));
    }
    let mut held = dumps_in(dir);
    let mut total: u64 = held.iter().map(|d| d.1).sum();
    let mut deleted = Vec::new();
    while !held.is_empty()
        && (held.len() + 1 > limits.max_files || total.saturating_add(need) > limits.quota)
    {
        let (name, size) = held.remove(0);
        if dir.remove(&name).is_ok() {
            deleted.push(name);
        }
        total -= size;
    }
    Ok(deleted)
}

/// After a dump is written: delete the oldest others while the dumps are beyond the quota
/// (the dump was larger than its estimate), never the one just written.
pub fn trim(dir: &OutDir, written: &OsStr, limits: DumpLimits) -> Vec<OsString> {
    let mut held = dumps_in(dir);
    let mut total: u64 = held.iter().map(|d| d.1).sum();
    let mut deleted = Vec::new();
    while total > limits.quota || held.len() > limits.max_files {
        let Some(i) = held.iter().position(|d| d.0 != written) else {
            break;
        };
        let (name, size) = held.remove(i);
        if dir.remove(&name).is_ok() {
            deleted.push(name);
        }
        total -= size;
    }
    deleted
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

/// `YYYYMMDDTHHMMSS` of `wall_ns` (UTC).
fn dump_stamp(wall_ns: i64) -> String {
    tracer_common::format::rfc3339(wall_ns)
        .replace([':', '-'], "")
        .chars()
        .take(15)
        .collect()
}

/// The `n`th dump name (from 1) of a stamp: names sort by time, then by n.
fn dump_name(stamp: &str, n: u32) -> OsString {
    if n <= 1 {
        format!("flight-{stamp}Z.blkp").into()
    } else {
        format!("flight-{stamp}Z-{n}.blkp").into()
    }
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
    fn dump_names_parse_and_order() {
        assert_eq!(dump_stamp(1_700_000_000_000_000_000), "20231114T221320");
        assert_eq!(
            dump_name("20231114T221320", 1),
            "flight-20231114T221320Z.blkp"
        );
        assert_eq!(
            dump_name("20231114T221320", 3),
            "flight-20231114T221320Z-3.blkp"
        );
        assert_eq!(
            parse_dump_name("flight-20231114T221320Z.blkp"),
            Some(("20231114T221320".into(), 1))
        );
        assert_eq!(
            parse_dump_name("flight-20231114T221320Z-12.blkp.part"),
            Some(("20231114T221320".into(), 12))
        );
        for other in [
            "flight-x.blkp",
            "run.000001.blkp",
            "flight-20231114T221320Z.hlog",
        ] {
            assert_eq!(parse_dump_name(other), None, "{other}");
        }
    }

    #[test]
    fn room_is_made_oldest_first_within_the_count_and_the_quota() {
        let t = tempfile::tempdir().unwrap();
        let d = OutDir::open(t.path()).unwrap();
        for (name, size) in [
            ("flight-20231114T221320Z-2.blkp", 100),
            ("flight-20231114T221320Z.blkp", 100),
            ("flight-20231114T221321Z.blkp", 100),
            ("flight-20231114T221322Z.blkp.part", 50),
            ("other.blkp", 1000),
        ] {
            std::fs::write(t.path().join(name), vec![0u8; size]).unwrap();
        }
        let limits = DumpLimits {
            max_files: 10,
            quota: 400,
            cooldown: Duration::ZERO,
        };
        // 350 held + 100 > 400: the oldest (N=1 before N=2) goes.
        assert_eq!(
            make_room(&d, 100, limits).unwrap(),
            vec![OsString::from("flight-20231114T221320Z.blkp")]
        );
        assert!(
            make_room(&d, 401, limits)
                .unwrap_err()
                .contains("--dump-quota")
        );
        let two = DumpLimits {
            max_files: 2,
            ..limits
        };
        assert_eq!(make_room(&d, 0, two).unwrap().len(), 2);
        assert!(
            t.path().join("other.blkp").exists(),
            "only dumps are ever deleted"
        );
        assert!(t.path().join("flight-20231114T221322Z.blkp.part").exists());
        std::fs::write(
            t.path().join("flight-20231114T221323Z.blkp"),
            vec![0u8; 500],
        )
        .unwrap();
        assert_eq!(
            trim(&d, OsStr::new("flight-20231114T221323Z.blkp"), limits),
            vec![OsString::from("flight-20231114T221322Z.blkp.part")]
        );
        assert!(t.path().join("flight-20231114T221323Z.blkp").exists());
    }
}
