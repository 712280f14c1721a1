//! /proc/diskstats: one line as the tracer reads it (stored in trace headers and trailers)
//! and the parser of the file's text.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::op::StatGroup;

/// A /proc/diskstats line, with the monotonic time it was read at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStats {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub at_ns: u64,
    pub read_ios: u64,
    pub read_merges: u64,
    pub read_sectors: u64,
    pub read_ms: u64,
    pub write_ios: u64,
    pub write_merges: u64,
    pub write_sectors: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub io_ms: u64,
    pub weighted_ms: u64,
    pub discard_ios: u64,
    pub discard_merges: u64,
    pub discard_sectors: u64,
    pub discard_ms: u64,
    pub flush_ios: u64,
    pub flush_ms: u64,
}

impl DiskStats {
    /// (ios, bytes) of one stat group.
    pub fn group(&self, g: StatGroup) -> (u64, u64) {
        match g {
            StatGroup::Read => (self.read_ios, self.read_sectors.saturating_mul(512)),
            StatGroup::Write => (self.write_ios, self.write_sectors.saturating_mul(512)),
            StatGroup::Discard => (self.discard_ios, self.discard_sectors.saturating_mul(512)),
            StatGroup::Flush => (self.flush_ios, 0),
        }
    }
}

/// Parse /proc/diskstats text.
pub fn parse_diskstats(text: &str, at_ns: u64) -> HashMap<(u32, u32), DiskStats> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 {
            continue;
        }
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        let (Ok(major), Ok(minor)) = (f[0].parse(), f[1].parse()) else {
            continue;
        };
        out.insert(
            (major, minor),
            DiskStats {
                name: f[2].to_string(),
                major,
                minor,
                at_ns,
                read_ios: n(3),
                read_merges: n(4),
                read_sectors: n(5),
                read_ms: n(6),
                write_ios: n(7),
                write_merges: n(8),
                write_sectors: n(9),
                write_ms: n(10),
                in_flight: n(11),
                io_ms: n(12),
                weighted_ms: n(13),
                discard_ios: n(14),
                discard_merges: n(15),
                discard_sectors: n(16),
                discard_ms: n(17),
                flush_ios: n(18),
                flush_ms: n(19),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_a_kernel_6_line() {
        let s = "   7       3 loop3 183647 0 1469176 41234 2 0 16 1 0 53000 41235 5 0 80 2 7 3\n";
        let m = super::parse_diskstats(s, 5);
        let d = &m[&(7, 3)];
        assert_eq!(
            (d.name.as_str(), d.read_ios, d.read_sectors, d.write_ios),
            ("loop3", 183_647, 1_469_176, 2)
        );
        assert_eq!(
            (
                d.discard_ios,
                d.discard_sectors,
                d.flush_ios,
                d.flush_ms,
                d.weighted_ms
            ),
            (5, 80, 7, 3, 41235)
        );
    }
}
