//! The stress tool's own results and the application's log, parsed so that they can sit on
//! the trace's wall-clock axis: one parser per file (YCSB, cassandra-stress, Cassandra's
//! system.log), and the matching of the log's flushes with the trace's write bursts. Here: the
//! types of a stress run, its time stamps, and the choice of parser.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::inputs::zone::Zone;

mod cassandra_log;
mod cassandra_stress;
mod flush_match;
mod ycsb;

pub use cassandra_log::{
    AppLog, Compaction, Flush, Marker, parse_cassandra_log, read_app_log, read_app_log_in,
};
use cassandra_stress::is_padded_type_header;
pub use cassandra_stress::parse_cassandra_stress;
pub use flush_match::{
    BurstMatch, BurstSpan, ClassAgreement, FlushMatch, MIN_MATCH_FLUSH_BYTES, match_flushes,
};
pub use ycsb::parse_ycsb;

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: not YCSB or cassandra-stress output (no status lines like \"10 sec: 21029 operations; ...\" or \"total, 20480, 20460, ...\", and no summary lines like \"[READ], Operations, 81898\" or \"Op rate : 12,345 op/s\")"
    )]
    NotStress { path: PathBuf },
    #[error(
        "{path}: no Cassandra log lines (\"INFO  [thread] 2026-11-22 02:45:25,863 File.java:1 - ...\") found"
    )]
    NotAppLog { path: PathBuf },
}

/// When a stress run started, as given with `--stress-start`: an instant (with "Z" or an
/// offset) or a local wall-clock time, read in the stress zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartTime {
    Instant(i64),
    Local(jiff::civil::DateTime),
}

impl StartTime {
    /// "2026-11-22T06:45:03Z", "2026-11-22T08:45:03.5+02:00", or without zone
    /// "2026-11-22 08:45:03" (local). Seconds are required.
    pub fn parse(s: &str) -> Option<StartTime> {
        let t = s.trim();
        let b = t.as_bytes();
        // Date and time to the second; jiff alone would also take a date or minutes only.
        let shape = b"dddd-dd-ddTdd:dd:dd";
        if b.len() < shape.len()
            || !shape.iter().zip(b).all(|(&want, &c)| match want {
                b'd' => c.is_ascii_digit(),
                b'T' => c == b'T' || c == b' ',
                w => c == w,
            })
        {
            return None;
        }
        if t.ends_with(['Z', 'z']) || t[shape.len()..].contains(['+', '-']) {
            let ts: jiff::Timestamp = t.parse().ok()?;
            i64::try_from(ts.as_nanosecond())
                .ok()
                .map(StartTime::Instant)
        } else {
            t.parse().ok().map(StartTime::Local)
        }
    }

    /// Unix ns; a local time in `zone`.
    pub fn unix_ns(self, zone: &Zone) -> Option<i64> {
        match self {
            StartTime::Instant(t) => Some(t),
            StartTime::Local(dt) => zone.unix_ns(dt),
        }
    }
}

/// `--stress-start` read as UTC when it has no zone: Unix ns.
pub fn parse_start(s: &str) -> Option<i64> {
    StartTime::parse(s)?.unix_ns(&Zone::utc())
}

/// Give a run's status points without wall-clock times the time `start` + their elapsed
/// seconds (cassandra-stress prints elapsed time only). Returns how many were placed.
pub fn anchor(run: &mut StressRun, start_ns: i64) -> usize {
    let mut n = 0;
    for p in run.status.iter_mut().filter(|p| p.time_ns.is_none()) {
        // A damaged or hostile file may claim any elapsed time: saturate.
        let elapsed_ns = i64::try_from(p.elapsed_s)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000_000);
        p.time_ns = Some(start_ns.saturating_add(elapsed_ns));
        n += 1;
    }
    run.anchored += n;
    n
}

/// "2026-11-22 02:45:18:771" (YCSB) or "2026-11-22 02:45:25,863" (log4j/logback), local
/// time in `zone`, to Unix ns.
fn parse_stamp(s: &str, zone: &Zone) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 23
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
        || !(b[19] == b':' || b[19] == b',' || b[19] == b'.')
    {
        return None;
    }
    let n = |r: std::ops::Range<usize>| {
        s.get(r)
            .filter(|v| v.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|v| v.parse::<i16>().ok())
    };
    let dt = jiff::civil::DateTime::new(
        n(0..4)?,
        i8::try_from(n(5..7)?).ok()?,
        i8::try_from(n(8..10)?).ok()?,
        i8::try_from(n(11..13)?).ok()?,
        i8::try_from(n(14..16)?).ok()?,
        i8::try_from(n(17..19)?).ok()?,
        i32::from(n(20..23)?) * 1_000_000,
    )
    .ok()?;
    zone.unix_ns(dt)
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct OpLatency {
    pub op: String,
    pub count: Option<u64>,
    pub avg_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub max_us: Option<f64>,
}

/// One YCSB status line.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct StatusPoint {
    /// Wall-clock time (Unix ns) when the line has a timestamp.
    pub time_ns: Option<i64>,
    pub elapsed_s: u64,
    pub operations: u64,
    pub ops_per_s: Option<f64>,
    pub latencies: Vec<OpLatency>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct StressRun {
    pub path: String,
    pub tool: String,
    pub status: Vec<StatusPoint>,
    /// Summary block: section -> metric -> value ("[READ], 99thPercentileLatency(us), 24703").
    pub summary: BTreeMap<String, BTreeMap<String, f64>>,
    /// Time-series export lines ("[READ], 1000, 25891.85": ms offset, average latency us).
    pub time_series: BTreeMap<String, Vec<(u64, f64)>>,
    /// Lines that are neither (driver logs, banners), counted.
    pub other_lines: u64,
    /// The zone the status lines' timestamps were read in.
    #[serde(skip)]
    pub time_zone: Zone,
    /// Status points placed by [`anchor`] (`--stress-start`) rather than by their own stamps.
    #[serde(skip)]
    pub anchored: usize,
}

/// YCSB or cassandra-stress output, told apart by their own header lines; timestamps read as UTC.
pub fn read_stress(path: &Path) -> Result<StressRun, ParseError> {
    read_stress_in(path, &Zone::utc())
}

/// [`read_stress`] with timestamps read as local time in `zone`.
pub fn read_stress_in(path: &Path, zone: &Zone) -> Result<StressRun, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|source| ParseError::Read {
        path: path.to_owned(),
        source,
    })?;
    let is_cs = text.lines().any(|l| {
        let l = l.trim();
        l.starts_with("type,") && l.contains("op/s")
            || is_padded_type_header(l)
            || l.starts_with("total ops ,")
            || l.starts_with("Op rate")
    });
    if is_cs {
        return parse_cassandra_stress(path, &text);
    }
    parse_ycsb(path, &text, zone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        let utc = Zone::utc();
        assert_eq!(
            parse_stamp("2026-11-22 02:45:25,863 x", &utc),
            Some(1_795_315_525_863_000_000)
        );
        assert_eq!(
            parse_stamp("2026-11-22 02:45:18:771 5 sec", &utc),
            Some(1_795_315_518_771_000_000)
        );
        assert_eq!(parse_stamp("2026-13-22 02:45:18:771", &utc), None);
        assert_eq!(parse_stamp("2026-02-30 02:45:18:771", &utc), None);
        assert_eq!(parse_stamp("10 sec: 5 operations", &utc), None);
        // Local time two hours east of UTC is two hours earlier on the Unix clock.
        let plus2 = Zone::parse("+02:00").unwrap();
        assert_eq!(
            parse_stamp("2026-11-22 04:45:25,863 x", &plus2),
            Some(1_795_315_525_863_000_000)
        );
    }

    #[test]
    fn start_times_anchor_elapsed_only_status_lines() {
        let t = parse_start("2026-11-22T06:45:03Z").unwrap();
        assert_eq!(parse_start("2026-11-22 06:45:03"), Some(t));
        assert_eq!(parse_start("2026-11-22T06:45:03.5Z"), Some(t + 500_000_000));
        assert_eq!(
            parse_start("2026-11-22T06:45:03.123Z"),
            Some(t + 123_000_000)
        );
        // With an offset: that instant, whatever the stress zone; without: local time in it.
        let plus2 = Zone::parse("+02:00").unwrap();
        for with_offset in ["2026-11-22T08:45:03+02:00", "2026-11-22 08:45:03+02:00"] {
            let s = StartTime::parse(with_offset).unwrap();
            assert_eq!(s.unix_ns(&Zone::utc()), Some(t), "{with_offset}");
            assert_eq!(s.unix_ns(&plus2), Some(t), "{with_offset}");
        }
        assert_eq!(
            StartTime::parse("2026-11-22T01:15:03-05:30")
                .unwrap()
                .unix_ns(&plus2),
            Some(t)
        );
        let local = StartTime::parse("2026-11-22 08:45:03").unwrap();
        assert_eq!(local.unix_ns(&plus2), Some(t));
        assert_eq!(local.unix_ns(&Zone::utc()), Some(t + 7_200_000_000_000));
        for bad in [
            "",
            "yesterday",
            "2026-11-22",
            "2026-11-22T06:45Z",
            "2026-13-01T00:00:00Z",
            "2026-11-22T06:45:03.x",
            "2026-11-22T06:45:03 Europe/Berlin",
        ] {
            assert_eq!(parse_start(bad), None, "{bad}");
        }
        let mut r = StressRun {
            status: vec![
                StatusPoint {
                    time_ns: None,
                    elapsed_s: 1,
                    operations: 10,
                    ops_per_s: Some(10.0),
                    latencies: Vec::new(),
                },
                StatusPoint {
                    time_ns: Some(7),
                    elapsed_s: 2,
                    operations: 20,
                    ops_per_s: Some(10.0),
                    latencies: Vec::new(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(anchor(&mut r, t), 1);
        assert_eq!(r.status[0].time_ns, Some(t + 1_000_000_000));
        assert_eq!(r.status[1].time_ns, Some(7), "times it had are kept");
    }

    #[test]
    fn garbage_is_refused_plainly() {
        let e = parse_ycsb(Path::new("x.txt"), "hello\nworld\n", &Zone::utc()).unwrap_err();
        assert!(
            e.to_string()
                .contains("not YCSB or cassandra-stress output"),
            "{e}"
        );
        let e = parse_cassandra_log(Path::new("x.log"), "hello\n", &Zone::utc()).unwrap_err();
        assert!(e.to_string().contains("no Cassandra log lines"), "{e}");
    }
}
