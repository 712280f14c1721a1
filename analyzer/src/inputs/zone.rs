//! Time zones of the inputs. The trace is on Unix time; applications and stress tools log the
//! host's local wall-clock time. Each log or stress file is read in one zone: the one given
//! with `--app-log-tz` / `--stress-tz`, else the one the tracer recorded in the trace header.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use tracer_common::format::TraceHeader;

/// A zone to read local times in, with the name it is shown by ("UTC", "+02:00",
/// "Europe/Berlin").
#[derive(Clone, Debug)]
pub struct Zone {
    pub tz: TimeZone,
    pub label: String,
}

impl Default for Zone {
    fn default() -> Zone {
        Zone::utc()
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.label == other.label
    }
}

/// How `--app-log-tz` and `--stress-tz` are written, for error messages.
pub const ZONE_FORMS: &str =
    "UTC, an offset such as +02:00 or -05:30, or an IANA name such as Europe/Berlin";

impl Zone {
    pub fn utc() -> Zone {
        Zone {
            tz: TimeZone::UTC,
            label: "UTC".into(),
        }
    }

    /// A fixed offset east of UTC, in seconds (0 is "UTC").
    pub fn fixed(offset_s: i32) -> Option<Zone> {
        if offset_s == 0 {
            return Some(Zone::utc());
        }
        Some(Zone {
            tz: TimeZone::fixed(Offset::from_seconds(offset_s).ok()?),
            label: format_offset(offset_s),
        })
    }

    /// "UTC", "+02:00", "-0530", "+05", or an IANA name ("Europe/Berlin", any case).
    pub fn parse(s: &str) -> Result<Zone, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("z") {
            return Ok(Zone::utc());
        }
        if t.starts_with(['+', '-']) {
            return parse_offset(t)
                .and_then(|o| Zone::fixed(o).map(|z| Zone { label: t.into(), ..z }))
                .ok_or_else(|| {
                    format!("'{s}': not a UTC offset: write it as +HH:MM (-12:00 to +14:00), e.g. +02:00 or -05:30")
                });
        }
        match lookup(t) {
            Some(tz) => Ok(Zone {
                label: tz.iana_name().unwrap_or(t).to_string(),
                tz,
            }),
            None => Err(format!("'{s}': not a time zone: expected {ZONE_FORMS}")),
        }
    }

    /// The zone the tracer recorded: its name when this machine's (or the bundled) tz
    /// database knows it and agrees with the recorded offset, else the offset; UTC for traces
    /// written before the tracer recorded it.
    pub fn of_trace(h: &TraceHeader) -> Zone {
        let at = Timestamp::from_nanosecond(i128::from(h.wall_clock_start_ns)).ok();
        if !h.time_zone.is_empty()
            && let Some(tz) = lookup(&h.time_zone)
            && at.is_some_and(|at| tz.to_offset(at).seconds() == h.utc_offset_s)
        {
            return Zone {
                tz,
                label: h.time_zone.clone(),
            };
        }
        Zone::fixed(h.utc_offset_s).unwrap_or_default()
    }

    /// Unix ns of a local wall-clock time in this zone. A time that a daylight-saving change
    /// repeats is taken the first time, one it skips as if the clock had not changed
    /// (jiff's "compatible" rule, the same as java.time's).
    pub fn unix_ns(&self, dt: DateTime) -> Option<i64> {
        let ts = self.tz.to_timestamp(dt).ok()?;
        i64::try_from(ts.as_nanosecond()).ok()
    }

    /// The zone's offset east of UTC at a Unix instant, in seconds.
    pub fn offset_s_at(&self, unix_ns: i64) -> i32 {
        Timestamp::from_nanosecond(i128::from(unix_ns))
            .map_or(0, |ts| self.tz.to_offset(ts).seconds())
    }
}

/// An IANA zone by name, in any case: from the system's tz database (kept current by the
/// system's updates), else from the copy built into blkprof, so that a name resolves on any
/// machine (containers and CI images often lack /usr/share/zoneinfo).
fn lookup(name: &str) -> Option<TimeZone> {
    jiff::tz::db()
        .get(name)
        .or_else(|_| jiff::tz::TimeZoneDatabase::bundled().get(name))
        .ok()
}

/// "+HH:MM", "+HHMM" or "+HH" (or with "-") within -12:00..=+14:00, to seconds east of UTC.
fn parse_offset(s: &str) -> Option<i32> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = match rest.len() {
        2 => (rest, "00"),
        4 => rest.split_at(2),
        5 if rest.as_bytes()[2] == b':' => (&rest[..2], &rest[3..]),
        _ => return None,
    };
    if !(h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit())) {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    let secs = sign * (h * 3600 + m * 60);
    (m < 60 && (-12 * 3600..=14 * 3600).contains(&secs)).then_some(secs)
}

/// Seconds east of UTC as "+HH:MM" ("-05:30"; seconds beyond the minute are dropped).
pub fn format_offset(offset_s: i32) -> String {
    let sign = if offset_s < 0 { '-' } else { '+' };
    let a = offset_s.unsigned_abs();
    format!("{sign}{:02}:{:02}", a / 3600, a % 3600 / 60)
}

/// The whole- and half-hour UTC offsets, -12:00 to +14:00, in seconds: the offsets to try on
/// a log that does not line up with the trace.
pub fn candidate_offsets() -> impl Iterator<Item = i32> {
    (-24..=28).map(|half_hours| half_hours * 1800)
}

/// Of scored offsets, the best (a zero score never is) and the others that score as well.
/// Ties go to whole hours, then to the offset nearest `near_s`, then to the lower.
pub fn pick_offset<S: Ord + Copy + Default>(
    scored: &[(i32, S)],
    near_s: i32,
) -> Option<(i32, S, Vec<i32>)> {
    let best = scored
        .iter()
        .filter(|(_, s)| *s > S::default())
        .max_by_key(|(o, s)| {
            let far = (o - near_s).abs();
            (*s, o % 3600 == 0, std::cmp::Reverse((far, *o)))
        })?;
    let also = scored
        .iter()
        .filter(|(o, s)| *s == best.1 && *o != best.0)
        .map(|(o, _)| *o)
        .collect();
    Some((best.0, best.1, also))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_parse_from_utc_offsets_and_iana_names() {
        for s in ["UTC", "utc", "Z"] {
            assert_eq!(Zone::parse(s).unwrap().label, "UTC", "{s}");
        }
        let z = Zone::parse("+02:00").unwrap();
        assert_eq!((z.label.as_str(), z.offset_s_at(0)), ("+02:00", 7200));
        assert_eq!(Zone::parse("-05:30").unwrap().offset_s_at(0), -19_800);
        assert_eq!(Zone::parse("+0530").unwrap().offset_s_at(0), 19_800);
        assert_eq!(Zone::parse("-03").unwrap().offset_s_at(0), -10_800);
        // Berlin: +01:00 in winter, +02:00 in summer (2026-07-15T12:00:00Z).
        let b = Zone::parse("europe/berlin").unwrap();
        assert_eq!(b.label, "Europe/Berlin");
        assert_eq!(b.offset_s_at(0), 3600);
        assert_eq!(b.offset_s_at(1_784_116_800_000_000_000), 7200);
        for bad in [
            "",
            "garbage",
            "Mars/Olympus_Mons",
            "+2:00",
            "+02:60",
            "+15:00",
            "-12:30",
            "+02:00:00",
            "02:00",
        ] {
            let e = Zone::parse(bad).unwrap_err();
            assert!(e.contains("+02:00"), "{bad}: {e}");
        }
        assert!(
            Zone::parse("garbage")
                .unwrap_err()
                .contains("Europe/Berlin")
        );
    }

    #[test]
    fn the_built_in_tz_database_knows_iana_names() {
        // What resolves names on a machine without a system tz database.
        let db = jiff::tz::TimeZoneDatabase::bundled();
        for name in [
            "Europe/Berlin",
            "America/New_York",
            "Asia/Kolkata",
            "Australia/Lord_Howe",
        ] {
            assert!(db.get(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn local_times_convert_in_the_zone() {
        let dt = jiff::civil::date(2026, 11, 22).at(8, 45, 3, 0);
        let utc = Zone::utc().unix_ns(dt).unwrap();
        assert_eq!(utc, 1_795_337_103_000_000_000);
        let plus2 = Zone::parse("+02:00").unwrap().unix_ns(dt).unwrap();
        assert_eq!(utc - plus2, 7_200_000_000_000);
        let minus530 = Zone::parse("-05:30").unwrap().unix_ns(dt).unwrap();
        assert_eq!(minus530 - utc, 19_800_000_000_000);
        // November in Berlin is +01:00.
        let berlin = Zone::parse("Europe/Berlin").unwrap().unix_ns(dt).unwrap();
        assert_eq!(utc - berlin, 3_600_000_000_000);
    }

    #[test]
    fn offsets_format_as_sign_hours_minutes() {
        assert_eq!(format_offset(7200), "+02:00");
        assert_eq!(format_offset(-19_800), "-05:30");
        assert_eq!(format_offset(0), "+00:00");
        assert_eq!(format_offset(20_700), "+05:45");
    }

    #[test]
    fn the_trace_header_names_the_default_zone() {
        let mut h = TraceHeader {
            wall_clock_start_ns: 1_784_116_800_000_000_000,
            ..Default::default()
        };
        assert_eq!(Zone::of_trace(&h).label, "UTC", "older traces: UTC");
        h.utc_offset_s = 7200;
        assert_eq!(Zone::of_trace(&h).label, "+02:00", "no name: the offset");
        h.time_zone = "Europe/Berlin".into();
        assert_eq!(Zone::of_trace(&h).label, "Europe/Berlin");
        h.time_zone = "Nowhere/Atlantis".into();
        assert_eq!(
            Zone::of_trace(&h).label,
            "+02:00",
            "unknown name: the offset"
        );
        h.time_zone = "Asia/Tokyo".into();
        assert_eq!(
            Zone::of_trace(&h).label,
            "+02:00",
            "name and offset disagree: the offset"
        );
    }

    #[test]
    fn the_best_offset_scores_highest_then_is_a_whole_hour_then_nearest() {
        assert_eq!(candidate_offsets().count(), 53);
        assert_eq!(candidate_offsets().next(), Some(-43_200));
        assert_eq!(candidate_offsets().last(), Some(50_400));
        assert_eq!(pick_offset::<usize>(&[(0, 0), (3600, 0)], 0), None);
        assert_eq!(
            pick_offset(&[(0, 0), (5400, 3), (7200, 5), (9000, 4)], 0),
            Some((7200, 5, vec![]))
        );
        // A log longer than the trace fits at several offsets: all are named.
        assert_eq!(
            pick_offset(&[(5400, 5), (7200, 5), (10_800, 5), (-3600, 5)], 0),
            Some((-3600, 5, vec![5400, 7200, 10_800]))
        );
        assert_eq!(
            pick_offset(&[(5400, 5), (7200, 5), (10_800, 5)], 9000),
            Some((7200, 5, vec![5400, 10_800]))
        );
    }
}
