//! Command-line durations and sizes, shared by blkprof-trace and blkprof.

use std::time::Duration;

/// "30s", "500ms", "2m", "1.5h", "1d", "250us", "5" (seconds) -> a positive duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 30s, 5m, 2h, 500ms)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ns" => v / 1e9,
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (use ns, us, ms, s, m, h, d)"
            ));
        }
    };
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("{s:?}: a duration must be positive")),
        Err(_) => Err(format!("{s:?}: not a duration this tool can use")),
    }
}

/// "4096", "4K", "64KiB", "512k", "1 MB", "2G", "1T" -> bytes (binary units: block sizes are
/// quoted in them). Zero is a size here; callers that need more say so.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (try 4096, 4K, 64KiB, 1M)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (use K, M, G, T, as in 64K or 64KiB)"
            ));
        }
    };
    v.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?}: too large"))
}

/// A duration in the largest unit that states it exactly: "1s", "100ms", "90s", "250us".
pub fn format_duration_ns(ns: u64) -> String {
    for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= per && ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        for ns in [
            1,
            250_000,
            100_000_000,
            1_000_000_000,
            90_000_000_000,
            1_500_000_000,
        ] {
            let text = format_duration_ns(ns);
            assert_eq!(
                parse_duration(&text).unwrap().as_nanos(),
                u128::from(ns),
                "{text}"
            );
        }
        assert_eq!(format_duration_ns(100_000_000), "100ms");
        for bad in ["abc", "0s", "0.1ns", "5y", "", "99999999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        for (text, bytes) in [
            ("4096", 4096),
            ("4K", 4096),
            ("64K", 65536),
            ("64KiB", 65536),
            ("64kib", 65536),
            ("64KB", 65536),
            ("512k", 512 << 10),
            ("1 M", 1 << 20),
            ("2G", 2 << 30),
            ("1T", 1 << 40),
            ("0", 0),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in ["", "K", "64X", "-4K", "1.5M", "99999999999T", "64KK", "64I"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
