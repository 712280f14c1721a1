//! Clocks: the probe stamps IOs with `CLOCK_MONOTONIC` (`bpf_ktime_get_ns`).

use std::time::Duration;

#[expect(
    clippy::cast_sign_loss,
    reason = "CLOCK_MONOTONIC counts from boot: tv_sec is never negative, tv_nsec is in 0..1e9"
)]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn realtime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &raw mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// `d` in nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `d` in milliseconds, saturating at `u64::MAX`.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Wall clock and monotonic clock read as close together as possible.
pub fn clock_pair() -> (i64, u64) {
    // Take the pair whose monotonic reads bracket the wall-clock read most tightly.
    let mut best = (0, 0, u64::MAX);
    for _ in 0..5 {
        let a = monotonic_ns();
        let w = realtime_ns();
        let b = monotonic_ns();
        if b - a < best.2 {
            best = (w, a + (b - a) / 2, b - a);
        }
    }
    (best.0, best.1)
}

/// The host's time zone at a wall-clock instant: its offset from UTC in seconds and its IANA
/// name, or "" when the name is unknown. Recorded in the trace header so that the analyzer can
/// read the host's local-time logs (Cassandra's system.log, YCSB's status lines).
///
/// jiff finds the zone as the C library does ($TZ, else /etc/localtime) and names it from $TZ
/// or /etc/localtime's link into zoneinfo. A copied /etc/localtime has no name: then
/// /etc/timezone (Debian) names it, if $TZ is unset and that zone has the same offset. A host
/// whose zone cannot be read is taken as UTC, as the C library takes it.
pub fn local_zone(wall_ns: i64) -> (i32, String) {
    match jiff::tz::TimeZone::try_system() {
        Ok(tz) => zone_at(
            &tz,
            std::env::var_os("TZ").is_some(),
            &std::fs::read_to_string("/etc/timezone").unwrap_or_default(),
            wall_ns,
        ),
        Err(_) => (0, String::new()),
    }
}

fn zone_at(
    tz: &jiff::tz::TimeZone,
    tz_env: bool,
    etc_timezone: &str,
    wall_ns: i64,
) -> (i32, String) {
    let Ok(at) = jiff::Timestamp::from_nanosecond(i128::from(wall_ns)) else {
        return (0, String::new());
    };
    let offset_s = tz.to_offset(at).seconds();
    let name = match tz.iana_name() {
        Some(n) => n.to_string(),
        None if !tz_env => {
            let n = etc_timezone.trim();
            match jiff::tz::TimeZone::get(n) {
                Ok(z) if z.to_offset(at).seconds() == offset_s => n.to_string(),
                _ => String::new(),
            }
        }
        None => String::new(),
    };
    (offset_s, name)
}

#[cfg(test)]
mod tests {
    use jiff::tz::{Offset, TimeZone};

    use super::zone_at;

    // 2026-01-15T12:00:00Z and 2026-07-15T12:00:00Z.
    const WINTER: i64 = 1_768_478_400_000_000_000;
    const SUMMER: i64 = 1_784_116_800_000_000_000;

    #[test]
    fn a_named_zone_gives_its_offset_at_that_instant() {
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        assert_eq!(
            zone_at(&berlin, false, "", WINTER),
            (3600, "Europe/Berlin".into())
        );
        assert_eq!(
            zone_at(&berlin, false, "", SUMMER),
            (7200, "Europe/Berlin".into())
        );
        assert_eq!(
            zone_at(&TimeZone::UTC, false, "", SUMMER),
            (0, "UTC".into())
        );
    }

    #[test]
    fn an_unnamed_zone_takes_etc_timezone_only_when_it_agrees() {
        let plus2 = TimeZone::fixed(Offset::from_seconds(7200).unwrap());
        assert_eq!(
            zone_at(&plus2, false, "Europe/Berlin\n", SUMMER),
            (7200, "Europe/Berlin".into())
        );
        // Stale /etc/timezone (another offset), $TZ set, or no such zone: offset only.
        assert_eq!(
            zone_at(&plus2, false, "Europe/Berlin\n", WINTER),
            (7200, String::new())
        );
        assert_eq!(
            zone_at(&plus2, true, "Europe/Berlin\n", SUMMER),
            (7200, String::new())
        );
        assert_eq!(
            zone_at(&plus2, false, "Mars/Olympus", SUMMER),
            (7200, String::new())
        );
    }
}
