//! The stress tool's own results and the application's log, parsed so that they can sit on
//! the trace's wall-clock axis: YCSB (status lines with or without timestamps, the summary
//! block, time-series exports) and Cassandra's system.log (flushes, compactions, deletions).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: not YCSB output (no status lines like \"10 sec: 21029 operations; ...\" and no summary lines like \"[READ], Operations, 81898\")")]
    NotStress { path: PathBuf },
    #[error("{path}: no Cassandra log lines (\"INFO  [thread] 2026-11-22 02:45:25,863 File.java:1 - ...\") found")]
    NotAppLog { path: PathBuf },
}

/// Civil date-time (taken as UTC) to Unix epoch nanoseconds.
pub fn civil_to_unix_ns(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32, ms: u32) -> Option<i64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 || ms > 999 {
        return None;
    }
    // Days from civil, after H. Hinnant.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(mo) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s)) * 1000 + i64::from(ms)) * 1_000_000)
}

/// "2026-11-22 02:45:18:771" (YCSB) or "2026-11-22 02:45:25,863" (log4j/logback).
fn parse_stamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 23 || b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' || b[16] != b':' || !(b[19] == b':' || b[19] == b',' || b[19] == b'.') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r).and_then(|v| v.parse::<u32>().ok());
    civil_to_unix_ns(i64::from(n(0..4)?), n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?, n(20..23)?)
}

#[derive(Clone, Debug, Serialize, Default)]
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
#[derive(Clone, Debug, Serialize)]
pub struct StatusPoint {
    /// Wall-clock time (Unix ns) when the line has a timestamp.
    pub time_ns: Option<i64>,
    pub elapsed_s: u64,
    pub operations: u64,
    pub ops_per_s: Option<f64>,
    pub latencies: Vec<OpLatency>,
}

#[derive(Clone, Debug, Serialize, Default)]
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
}

fn parse_latency_block(op: &str, body: &str) -> OpLatency {
    let mut l = OpLatency { op: op.to_string(), ..Default::default() };
    for kv in body.split(',') {
        let Some((k, v)) = kv.trim().split_once('=') else { continue };
        let v: Option<f64> = v.trim().parse().ok();
        match k.trim() {
            "Count" => l.count = v.map(|x| x as u64),
            "Avg" | "AverageLatency(us)" => l.avg_us = v,
            "90" => l.p90_us = v,
            "99" => l.p99_us = v,
            "99.9" => l.p999_us = v,
            "Max" => l.max_us = v,
            _ => {}
        }
    }
    l
}

/// "[READ: Count=1400, Max=..., 99=49023]" or "[READ AverageLatency(us)=22779.72]".
fn parse_status_blocks(s: &str) -> Vec<OpLatency> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else { break };
        let inner = &rest[open + 1..open + close];
        if let Some((op, body)) = inner.split_once(": ") {
            out.push(parse_latency_block(op.trim(), body));
        } else if let Some((op, body)) = inner.split_once(' ') {
            out.push(parse_latency_block(op.trim(), body));
        }
        rest = &rest[open + close + 1..];
    }
    out
}

fn parse_status(line: &str) -> Option<StatusPoint> {
    let (time_ns, rest) = match parse_stamp(line) {
        Some(t) => (Some(t), line.get(24..)?.trim_start()),
        None => (None, line.trim_start()),
    };
    let (secs, rest) = rest.split_once(" sec: ")?;
    let elapsed_s: u64 = secs.trim().parse().ok()?;
    let (ops, rest) = rest.split_once(" operations;")?;
    let operations: u64 = ops.trim().parse().ok()?;
    let ops_per_s = rest.split_once(" current ops/sec").and_then(|(v, _)| v.trim().parse().ok());
    Some(StatusPoint { time_ns, elapsed_s, operations, ops_per_s, latencies: parse_status_blocks(rest) })
}

pub fn parse_ycsb(path: &Path, text: &str) -> Result<StressRun, ParseError> {
    let mut run = StressRun { path: path.display().to_string(), tool: "ycsb".into(), ..Default::default() };
    for line in text.lines() {
        let l = line.trim_end();
        if let Some(p) = parse_status(l) {
            run.status.push(p);
            continue;
        }
        if let Some(rest) = l.strip_prefix('[') {
            if let Some((section, rest)) = rest.split_once("], ") {
                if let Some((metric, value)) = rest.split_once(", ") {
                    if let Ok(v) = value.trim().parse::<f64>() {
                        if let Ok(ms) = metric.trim().parse::<u64>() {
                            run.time_series.entry(section.to_string()).or_default().push((ms, v));
                        } else {
                            run.summary.entry(section.to_string()).or_default().insert(metric.trim().to_string(), v);
                        }
                        continue;
                    }
                }
            }
        }
        run.other_lines += 1;
    }
    if run.status.is_empty() && run.summary.is_empty() {
        return Err(ParseError::NotStress { path: path.to_owned() });
    }
    Ok(run)
}

pub fn read_stress(path: &Path) -> Result<StressRun, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|source| ParseError::Read { path: path.to_owned(), source })?;
    parse_ycsb(path, &text)
}

/// A point or span from the application's log, on the wall-clock axis.
#[derive(Clone, Debug, Serialize)]
pub struct Marker {
    /// RFC 3339.
    pub time: String,
    #[serde(skip)]
    pub time_ns: i64,
    /// flush-enqueued, flush-completed, compaction-started, compaction-completed, sstable-deleted
    pub kind: String,
    pub table: Option<String>,
    pub bytes: Option<u64>,
    pub detail: String,
}

/// A memtable flush from "Enqueuing flush" to "Completed flushing".
#[derive(Clone, Debug, Serialize)]
pub struct Flush {
    pub table: String,
    pub start: String,
    pub end: String,
    #[serde(skip)]
    pub start_ns: i64,
    #[serde(skip)]
    pub end_ns: i64,
    pub bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Default)]
pub struct AppLog {
    pub path: String,
    pub markers: Vec<Marker>,
    pub flushes: Vec<Flush>,
    pub log_lines: u64,
    pub other_lines: u64,
}

/// "2.475MiB", "183B", "1.953KiB" -> bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let v: f64 = s[..split].parse().ok()?;
    let m = match &s[split..] {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024f64.powi(4),
        _ => return None,
    };
    Some((v * m).round() as u64)
}

/// keyspace.table from a data path ".../data/<ks>/<table>-<uuid>/nb-73-big-Data.db".
fn table_of_path(p: &str) -> Option<String> {
    let parts: Vec<&str> = p.split('/').collect();
    let n = parts.len();
    if n < 3 {
        return None;
    }
    let table = parts[n - 2].rsplit_once('-').map_or(parts[n - 2], |(t, _)| t);
    Some(format!("{}.{}", parts[n - 3], table))
}

pub fn parse_cassandra_log(path: &Path, text: &str) -> Result<AppLog, ParseError> {
    let mut log = AppLog { path: path.display().to_string(), ..Default::default() };
    let mut pending: HashMap<String, VecDeque<i64>> = HashMap::new();
    let wall = tracer_common::format::rfc3339;
    for line in text.lines() {
        // "INFO  [thread] 2026-11-22 02:45:25,863 File.java:1052 - message"
        let Some(close) = line.find("] ") else {
            log.other_lines += 1;
            continue;
        };
        let rest = &line[close + 2..];
        let Some(t) = parse_stamp(rest) else {
            log.other_lines += 1;
            continue;
        };
        log.log_lines += 1;
        let Some((_, msg)) = rest.split_once(" - ") else { continue };
        let mut push = |kind: &str, table: Option<String>, bytes: Option<u64>| {
            log.markers.push(Marker { time: wall(t), time_ns: t, kind: kind.into(), table, bytes, detail: msg.chars().take(200).collect() });
        };
        if let Some(r) = msg.strip_prefix("Enqueuing flush of ") {
            let table = r.split(',').next().unwrap_or("").trim().to_string();
            pending.entry(table.clone()).or_default().push_back(t);
            push("flush-enqueued", Some(table), None);
        } else if let Some(r) = msg.strip_prefix("Completed flushing ") {
            let (p, tail) = r.split_once(" (").unwrap_or((r, ""));
            let bytes = tail.split_once(')').and_then(|(s, _)| parse_size(s));
            let table = table_of_path(p);
            if let Some(tb) = &table {
                if let Some(start) = pending.get_mut(tb).and_then(VecDeque::pop_front) {
                    log.flushes.push(Flush { table: tb.clone(), start: wall(start), end: wall(t), start_ns: start, end_ns: t, bytes });
                }
            }
            push("flush-completed", table, bytes);
        } else if msg.starts_with("Compacting (") {
            push("compaction-started", None, None);
        } else if msg.starts_with("Compacted (") {
            push("compaction-completed", None, None);
        } else if let Some(p) = msg.strip_prefix("Deleting sstable: ") {
            push("sstable-deleted", table_of_path(&format!("{p}/x")), None);
        }
    }
    if log.log_lines == 0 {
        return Err(ParseError::NotAppLog { path: path.to_owned() });
    }
    Ok(log)
}

pub fn read_app_log(path: &Path) -> Result<AppLog, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|source| ParseError::Read { path: path.to_owned(), source })?;
    parse_cassandra_log(path, &text)
}

/// Flushes smaller than this cannot show as a burst and are left out of the match.
pub const MIN_MATCH_FLUSH_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, Serialize, Default)]
pub struct FlushMatch {
    pub flushes: usize,
    pub flushes_matched: usize,
    pub bursts: usize,
    pub bursts_matched: usize,
    pub precision: f64,
    pub recall: f64,
    pub tolerance_s: f64,
    pub small_flushes_ignored: usize,
    /// Per flush: (table, start, end, matched burst start if any).
    pub rows: Vec<(String, String, String, Option<String>)>,
}

/// A burst matches a flush when it overlaps [enqueued - tol, completed + tol].
pub fn match_flushes(flushes: &[Flush], bursts: &[(i64, i64, String)], tol_ns: i64) -> FlushMatch {
    let big: Vec<&Flush> = flushes.iter().filter(|f| f.bytes.is_none_or(|b| b >= MIN_MATCH_FLUSH_BYTES)).collect();
    let overlaps = |f: &Flush, b: &(i64, i64, String)| b.0 <= f.end_ns + tol_ns && b.1 >= f.start_ns - tol_ns;
    let mut rows = Vec::new();
    let mut fm = 0;
    for f in &big {
        let hit = bursts.iter().find(|b| overlaps(f, b));
        fm += usize::from(hit.is_some());
        rows.push((f.table.clone(), f.start.clone(), f.end.clone(), hit.map(|b| b.2.clone())));
    }
    let bm = bursts.iter().filter(|b| big.iter().any(|f| overlaps(f, b))).count();
    FlushMatch {
        flushes: big.len(),
        flushes_matched: fm,
        bursts: bursts.len(),
        bursts_matched: bm,
        precision: if bursts.is_empty() { 0.0 } else { bm as f64 / bursts.len() as f64 },
        recall: if big.is_empty() { 0.0 } else { fm as f64 / big.len() as f64 },
        tolerance_s: tol_ns as f64 / 1e9,
        small_flushes_ignored: flushes.len() - big.len(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        assert_eq!(parse_stamp("2026-11-22 02:45:25,863 x"), Some(1_795_315_525_863_000_000));
        assert_eq!(parse_stamp("2026-11-22 02:45:18:771 5 sec"), Some(1_795_315_518_771_000_000));
        assert_eq!(parse_stamp("2026-13-22 02:45:18:771"), None);
        assert_eq!(parse_stamp("10 sec: 5 operations"), None);
    }

    #[test]
    fn status_lines_with_and_without_timestamps() {
        let p = parse_status("2026-11-22 02:45:18:771 5 sec: 2825 operations; 564.77 current ops/sec; est completion in 2 days 1 hour [READ: Count=1400, Max=121535, Min=1691, Avg=19070.52, 90=32591, 99=49023, 99.9=117183, 99.99=121535] [UPDATE: Count=1506, Max=96831, Min=1587, Avg=15271.74, 90=25359, 99=53183, 99.9=92095, 99.99=96831] ").unwrap();
        assert_eq!((p.elapsed_s, p.operations, p.ops_per_s), (5, 2825, Some(564.77)));
        assert_eq!(p.latencies.len(), 2);
        assert_eq!(p.latencies[0].p99_us, Some(49023.0));
        assert_eq!(p.latencies[1].count, Some(1506));
        let q = parse_status("10 sec: 21029 operations; 2102.9 current ops/sec; est completion in 5 days 12 hours [READ AverageLatency(us)=22779.72]").unwrap();
        assert_eq!((q.time_ns, q.elapsed_s, q.latencies[0].avg_us), (None, 10, Some(22779.72)));
        let z = parse_status("2026-11-22 02:45:13:865 0 sec: 0 operations; est completion in 0 second ").unwrap();
        assert_eq!((z.operations, z.ops_per_s), (0, None));
    }

    #[test]
    fn sizes_and_tables() {
        assert_eq!(parse_size("2.475MiB"), Some(2_595_226));
        assert_eq!(parse_size("183B"), Some(183));
        assert_eq!(table_of_path("/var/lib/c/data/data/ycsb/usertable-1b2c/nb-73-big-Data.db").as_deref(), Some("ycsb.usertable"));
    }

    #[test]
    fn garbage_is_refused_plainly() {
        let e = parse_ycsb(Path::new("x.txt"), "hello\nworld\n").unwrap_err();
        assert!(e.to_string().contains("not YCSB output"), "{e}");
        let e = parse_cassandra_log(Path::new("x.log"), "hello\n").unwrap_err();
        assert!(e.to_string().contains("no Cassandra log lines"), "{e}");
    }

    #[test]
    fn flush_matching_counts_precision_and_recall() {
        let f = |s: i64, e: i64| Flush { table: "ks.t".into(), start: String::new(), end: String::new(), start_ns: s * 1_000_000_000, end_ns: e * 1_000_000_000, bytes: Some(5 << 20) };
        let flushes = [f(10, 11), f(20, 21), f(30, 31)];
        let b = |s: i64, e: i64| (s * 1_000_000_000, e * 1_000_000_000, String::new());
        let m = match_flushes(&flushes, &[b(11, 12), b(22, 23), b(50, 51)], 1_000_000_000);
        assert_eq!((m.flushes, m.flushes_matched, m.bursts, m.bursts_matched), (3, 2, 3, 2));
        assert!((m.precision - 2.0 / 3.0).abs() < 1e-9 && (m.recall - 2.0 / 3.0).abs() < 1e-9);
    }
}
