//! The stress tool's own results and the application's log, parsed so that they can sit on
//! the trace's wall-clock axis: YCSB (status lines with or without timestamps, the summary
//! block, time-series exports) and Cassandra's system.log (flushes, compactions, deletions).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::inputs::zone::Zone;
use crate::numeric::f64_to_u64_saturating;

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

fn parse_latency_block(op: &str, body: &str) -> OpLatency {
    let mut l = OpLatency {
        op: op.to_string(),
        ..Default::default()
    };
    for kv in body.split(',') {
        let Some((k, v)) = kv.trim().split_once('=') else {
            continue;
        };
        let v: Option<f64> = v.trim().parse().ok();
        match k.trim() {
            "Count" => l.count = v.map(f64_to_u64_saturating),
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
        let Some(close) = rest[open..].find(']') else {
            break;
        };
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

fn parse_status(line: &str, zone: &Zone) -> Option<StatusPoint> {
    let (time_ns, rest) = match parse_stamp(line, zone) {
        Some(t) => (Some(t), line.get(24..)?.trim_start()),
        None => (None, line.trim_start()),
    };
    let (secs, rest) = rest.split_once(" sec: ")?;
    let elapsed_s: u64 = secs.trim().parse().ok()?;
    let (ops, rest) = rest.split_once(" operations;")?;
    let operations: u64 = ops.trim().parse().ok()?;
    let ops_per_s = rest
        .split_once(" current ops/sec")
        .and_then(|(v, _)| v.trim().parse().ok());
    Some(StatusPoint {
        time_ns,
        elapsed_s,
        operations,
        ops_per_s,
        latencies: parse_status_blocks(rest),
    })
}

/// YCSB output; status lines' timestamps are local time in `zone`.
pub fn parse_ycsb(path: &Path, text: &str, zone: &Zone) -> Result<StressRun, ParseError> {
    let mut run = StressRun {
        path: path.display().to_string(),
        tool: "ycsb".into(),
        time_zone: zone.clone(),
        ..Default::default()
    };
    for line in text.lines() {
        let l = line.trim_end();
        if let Some(p) = parse_status(l, zone) {
            run.status.push(p);
            continue;
        }
        if let Some(rest) = l.strip_prefix('[')
            && let Some((section, rest)) = rest.split_once("], ")
            && let Some((metric, value)) = rest.split_once(", ")
            && let Ok(v) = value.trim().parse::<f64>()
        {
            if let Ok(ms) = metric.trim().parse::<u64>() {
                run.time_series
                    .entry(section.to_string())
                    .or_default()
                    .push((ms, v));
            } else {
                run.summary
                    .entry(section.to_string())
                    .or_default()
                    .insert(metric.trim().to_string(), v);
            }
            continue;
        }
        run.other_lines += 1;
    }
    if run.status.is_empty() && run.summary.is_empty() {
        return Err(ParseError::NotStress {
            path: path.to_owned(),
        });
    }
    Ok(run)
}

/// cassandra-stress output. Interval lines (3.x: "total ops , op/s, pk/s, row/s, mean, med,
/// .95, .99, .999, max, time, stderr, errors, gc: #, max ms, sum ms, sdv ms, mb"; 4.x/5.x: the
/// same with a leading "type," column, one line per op type and a "total" line) become status
/// points (elapsed time from the "time" column, latencies in ms); the "Results:" block
/// ("Op rate : 12,345 op/s [WRITE: 12,345 op/s]", "Latency 99th percentile : 7.0 ms ...")
/// becomes the summary, under section "OVERALL" with one metric per line.
pub fn parse_cassandra_stress(path: &Path, text: &str) -> Result<StressRun, ParseError> {
    let mut run = StressRun {
        path: path.display().to_string(),
        tool: "cassandra-stress".into(),
        ..Default::default()
    };
    let mut columns: Vec<String> = Vec::new();
    let mut in_results = false;
    let mut last_time: Option<f64> = None;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("type,") || l.starts_with("total ops") || is_padded_type_header(l) {
            columns = l.split(',').map(|c| c.trim().to_string()).collect();
            // 4.x/5.x pad "type" to the width of the op names and leave out its comma:
            // "type          total ops,    op/s, ..." over "READ,     980,     980, ...".
            if let Some(rest) = columns[0].strip_prefix("type")
                && !rest.is_empty()
            {
                let second = rest.trim().to_string();
                columns[0] = "type".into();
                columns.insert(1, second);
            }
            in_results = false;
            continue;
        }
        if l == "Results:" {
            last_time = None;
            in_results = true;
            continue;
        }
        if in_results {
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim();
                // "12,345 op/s  [WRITE: 12,345 op/s]" -> 12345; "1.2 ms" -> 1.2; "00:01:00" (time) kept as seconds.
                let v = v.trim();
                let first = v.split('[').next().unwrap_or("").trim();
                let num = first
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .replace(',', "");
                let value = if k == "Total operation time" {
                    let p: Vec<f64> = v.split(':').filter_map(|x| x.trim().parse().ok()).collect();
                    (p.len() == 3).then(|| p[0] * 3600.0 + p[1] * 60.0 + p[2])
                } else {
                    // "NaN ms" (no GC seen) is no number.
                    num.parse::<f64>().ok().filter(|v| v.is_finite())
                };
                if let Some(v) = value {
                    let unit = first.split_whitespace().nth(1).unwrap_or("");
                    let name = if unit.is_empty() || k == "Total operation time" {
                        k.to_string()
                    } else {
                        format!("{k} ({unit})")
                    };
                    run.summary
                        .entry("OVERALL".into())
                        .or_default()
                        .insert(name, v);
                    continue;
                }
            }
            if l.is_empty() {
                continue;
            }
        }
        if !columns.is_empty() {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() == columns.len() {
                let typed = columns[0] == "type";
                let (op, vals) = if typed {
                    (f[0].to_string(), &f[1..])
                } else {
                    ("total".to_string(), &f[..])
                };
                let cols = if typed { &columns[1..] } else { &columns[..] };
                let get = |name: &str| {
                    cols.iter()
                        .position(|c| c == name)
                        .and_then(|i| vals.get(i))
                        .and_then(|v| v.replace(',', "").parse::<f64>().ok())
                };
                if let (Some(total), Some(time)) = (get("total ops"), get("time")) {
                    let ms = |v: Option<f64>| v.map(|x| x * 1000.0);
                    let lat = OpLatency {
                        op: op.to_uppercase(),
                        count: Some(f64_to_u64_saturating(total)),
                        avg_us: ms(get("mean")),
                        p90_us: None,
                        p99_us: ms(get(".99")),
                        p999_us: ms(get(".999")),
                        max_us: ms(get("max")),
                    };
                    // The op lines of one interval share its time (which has a fraction at
                    // the end of a run: 30.0 then 30.6).
                    // A line of an op already in the point starts the next interval (runs of
                    // one op print only "total" lines, and the last two can share a time).
                    let same = typed
                        && last_time == Some(time)
                        && run.status.last().is_some_and(|p| {
                            !p.latencies.iter().any(|l| l.op == op.to_uppercase())
                        });
                    last_time = Some(time);
                    if !same {
                        run.status.push(StatusPoint {
                            time_ns: None,
                            elapsed_s: f64_to_u64_saturating(time),
                            operations: f64_to_u64_saturating(total),
                            ops_per_s: get("op/s"),
                            latencies: Vec::new(),
                        });
                    }
                    // The point pushed above, or the one of an earlier line at the same time.
                    if let Some(last) = run.status.last_mut() {
                        if op == "total" {
                            last.operations = f64_to_u64_saturating(total);
                            last.ops_per_s = get("op/s");
                        }
                        last.latencies.push(lat);
                    }
                    continue;
                }
            }
        }
        run.other_lines += 1;
    }
    if run.status.is_empty() && run.summary.is_empty() {
        return Err(ParseError::NotStress {
            path: path.to_owned(),
        });
    }
    Ok(run)
}

/// "type            total ops,    op/s, ..." (cassandra-stress 4.x/5.x interval header).
fn is_padded_type_header(l: &str) -> bool {
    l.strip_prefix("type")
        .is_some_and(|r| r.starts_with(' ') && r.trim_start().starts_with("total ops,"))
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

/// A point or span from the application's log, on the wall-clock axis.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct Marker {
    /// RFC 3339.
    pub time: String,
    /// The same as Unix ns.
    pub time_ns: i64,
    /// flush-enqueued, flush-completed, compaction-started, compaction-completed, sstable-deleted
    pub kind: String,
    pub table: Option<String>,
    pub bytes: Option<u64>,
    pub detail: String,
}

/// A memtable flush from "Enqueuing flush" to "Completed flushing".
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct Flush {
    pub table: String,
    pub start: String,
    pub end: String,
    #[serde(skip)]
    pub start_ns: i64,
    #[serde(skip)]
    pub end_ns: i64,
    pub bytes: Option<u64>,
    /// The SSTable it wrote (`<dir>/nb-12-big`), from "Completed flushing <path>".
    pub sstable: Option<String>,
}

/// A compaction from "Compacting (id)" to "Compacted (id)".
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct Compaction {
    pub id: String,
    pub start: String,
    pub end: String,
    #[serde(skip)]
    pub start_ns: i64,
    #[serde(skip)]
    pub end_ns: i64,
    /// The SSTables it wrote (`<dir>/nb-12-big`), from "Compacted (id) N sstables to [...]".
    pub outputs: Vec<String>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct AppLog {
    pub path: String,
    pub markers: Vec<Marker>,
    pub flushes: Vec<Flush>,
    #[serde(default)]
    pub compactions: Vec<Compaction>,
    pub log_lines: u64,
    pub other_lines: u64,
    /// The zone the timestamps were read in.
    #[serde(skip)]
    pub time_zone: Zone,
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
    Some(f64_to_u64_saturating((v * m).round()))
}

/// keyspace.table from a data path ".../data/<ks>/<table>-<uuid>/nb-73-big-Data.db".
fn table_of_path(p: &str) -> Option<String> {
    let parts: Vec<&str> = p.split('/').collect();
    let n = parts.len();
    if n < 3 {
        return None;
    }
    let table = parts[n - 2]
        .rsplit_once('-')
        .map_or(parts[n - 2], |(t, _)| t);
    Some(format!("{}.{}", parts[n - 3], table))
}

/// Cassandra's system.log; its timestamps are local time in `zone`.
pub fn parse_cassandra_log(path: &Path, text: &str, zone: &Zone) -> Result<AppLog, ParseError> {
    let mut log = AppLog {
        path: path.display().to_string(),
        time_zone: zone.clone(),
        ..Default::default()
    };
    let mut pending: HashMap<String, VecDeque<i64>> = HashMap::new();
    let mut compacting: HashMap<String, i64> = HashMap::new();
    let wall = tracer_common::format::rfc3339;
    for line in text.lines() {
        // "INFO  [thread] 2026-11-22 02:45:25,863 File.java:1052 - message"
        let Some(close) = line.find("] ") else {
            log.other_lines += 1;
            continue;
        };
        let rest = &line[close + 2..];
        let Some(t) = parse_stamp(rest, zone) else {
            log.other_lines += 1;
            continue;
        };
        log.log_lines += 1;
        let Some((_, msg)) = rest.split_once(" - ") else {
            continue;
        };
        let mut push = |kind: &str, table: Option<String>, bytes: Option<u64>| {
            log.markers.push(Marker {
                time: wall(t),
                time_ns: t,
                kind: kind.into(),
                table,
                bytes,
                detail: msg.chars().take(200).collect(),
            });
        };
        if let Some(r) = msg.strip_prefix("Enqueuing flush of ") {
            let table = r.split(',').next().unwrap_or("").trim().to_string();
            pending.entry(table.clone()).or_default().push_back(t);
            push("flush-enqueued", Some(table), None);
        } else if let Some(r) = msg.strip_prefix("Completed flushing ") {
            let (p, tail) = r.split_once(" (").unwrap_or((r, ""));
            let bytes = tail.split_once(')').and_then(|(s, _)| parse_size(s));
            let table = table_of_path(p);
            if let Some(tb) = &table
                && let Some(start) = pending.get_mut(tb).and_then(VecDeque::pop_front)
            {
                log.flushes.push(Flush {
                    table: tb.clone(),
                    start: wall(start),
                    end: wall(t),
                    start_ns: start,
                    end_ns: t,
                    bytes,
                    sstable: crate::analysis::classes::sstable_group(p).map(str::to_string),
                });
            }
            push("flush-completed", table, bytes);
        } else if let Some(r) = msg.strip_prefix("Compacting (") {
            if let Some((id, _)) = r.split_once(')') {
                compacting.insert(id.to_string(), t);
            }
            push("compaction-started", None, None);
        } else if let Some(r) = msg.strip_prefix("Compacted (") {
            if let Some((id, rest)) = r.split_once(')')
                && let Some(start) = compacting.remove(id)
            {
                // "... 7 sstables to [/d/ks/t-1/nb-8-big,] to level=0. ..."
                let outputs = rest
                    .split_once(" to [")
                    .and_then(|(_, l)| l.split_once(']'))
                    .map(|(l, _)| {
                        l.split(',')
                            .map(str::trim)
                            .filter(|x| !x.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                log.compactions.push(Compaction {
                    id: id.to_string(),
                    start: wall(start),
                    end: wall(t),
                    start_ns: start,
                    end_ns: t,
                    outputs,
                });
            }
            push("compaction-completed", None, None);
        } else if let Some(p) = msg.strip_prefix("Deleting sstable: ") {
            push("sstable-deleted", table_of_path(&format!("{p}/x")), None);
        }
    }
    if log.log_lines == 0 {
        return Err(ParseError::NotAppLog {
            path: path.to_owned(),
        });
    }
    Ok(log)
}

/// Cassandra's system.log, its timestamps read as UTC.
pub fn read_app_log(path: &Path) -> Result<AppLog, ParseError> {
    read_app_log_in(path, &Zone::utc())
}

/// [`read_app_log`] with timestamps read as local time in `zone`.
pub fn read_app_log_in(path: &Path, zone: &Zone) -> Result<AppLog, ParseError> {
    let text = std::fs::read_to_string(path).map_err(|source| ParseError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_cassandra_log(path, &text, zone)
}

/// Flushes smaller than this cannot show as a burst and are left out of the match.
pub const MIN_MATCH_FLUSH_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct FlushMatch {
    pub flushes: usize,
    pub flushes_matched: usize,
    pub bursts: usize,
    pub bursts_matched: usize,
    pub precision: f64,
    pub recall: f64,
    pub tolerance_s: f64,
    pub small_flushes_ignored: usize,
    /// Bursts that match no flush but overlap a compaction (same tolerance).
    #[serde(default)]
    pub unmatched_in_compactions: usize,
    /// Per flush: (table, start, end, matched burst start if any).
    pub rows: Vec<(String, String, String, Option<String>)>,
    /// Per burst: what it matched ("flush", "compaction" or "none") and who wrote it.
    #[serde(default)]
    pub burst_rows: Vec<BurstMatch>,
    /// The IO classes the trace alone gave (`blkprof report --classes`) against the log; null
    /// without classes.
    pub classes: Option<ClassAgreement>,
}

/// The trace's IO classes against the application's log: each burst's class (of most of its
/// written bytes) against what the log says was going on (the flushes and compactions it
/// overlaps), and the class of each SSTable the trace saw made against the log's account of it
/// (flushed, or written by a compaction).
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct ClassAgreement {
    pub profile: String,
    pub bursts: usize,
    /// Bursts the log explains as a flush, and how many of them the trace labels flush.
    pub log_flush: usize,
    pub log_flush_labelled_flush: usize,
    /// Bursts the log explains as a compaction, and how many the trace labels compaction.
    pub log_compaction: usize,
    pub log_compaction_labelled_compaction: usize,
    /// Of those, the bursts that overlap both a flush and a compaction, explained by the
    /// flushes' logged sizes (see [`BurstMatch::log`]).
    pub log_both: usize,
    /// Bursts the log does not explain, and their labels.
    pub log_none: usize,
    pub log_none_labels: Vec<(String, usize)>,
    /// SSTables both the trace saw made and the log names, the trace's class and the log's
    /// agreeing; by the log's account.
    pub sstables_compared: usize,
    pub sstables_agree: usize,
    pub sstables_flushed: usize,
    pub sstables_compacted: usize,
    /// (path, the log's account, the trace's class), at most 20.
    pub sstables_disagree: Vec<(String, String, String)>,
    /// SSTables the trace saw made that the log does not name (made before its last line
    /// or not by a flush or compaction), and SSTables the log names that the trace did not see
    /// made (before or after the trace, or not written during it by a thread that is not
    /// writeback).
    pub sstables_trace_only: usize,
    pub sstables_log_only: usize,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, Default)]
#[serde(default)]
pub struct BurstMatch {
    pub start: String,
    pub matched: String,
    pub writers: String,
    /// The comm that wrote most of the burst ("-" if unknown).
    #[serde(default)]
    pub main_writer: String,
    /// Its IO class from the trace alone ("" without classes).
    pub class: String,
    /// What the log explains it as: "flush" when it overlaps a flush and no compaction, or
    /// both but the flushes it overlaps wrote (by the log's own sizes) at least half its bytes;
    /// "compaction" when it overlaps a compaction otherwise; else "none".
    pub log: String,
    /// It overlaps both a flush and a compaction.
    pub log_both: bool,
}

/// A detected burst for matching: wall-clock span, its start as text, its writers as text
/// and the comm that wrote most of it.
pub struct BurstSpan {
    pub start_ns: i64,
    pub end_ns: i64,
    pub start: String,
    pub writers: String,
    pub main_writer: String,
    /// Its IO class from the trace alone ("" without classes).
    pub class: String,
    /// Its written bytes.
    pub write_bytes: u64,
}

/// A burst matches a flush when it overlaps [enqueued - tol, completed + tol]. Bursts that
/// match no flush are checked against the compactions the same way, to say what they were.
pub fn match_flushes(
    flushes: &[Flush],
    compactions: &[Compaction],
    bursts: &[BurstSpan],
    tol_ns: i64,
    classes: Option<&crate::analysis::classes::Classes>,
) -> FlushMatch {
    let big: Vec<&Flush> = flushes
        .iter()
        .filter(|f| f.bytes.is_none_or(|b| b >= MIN_MATCH_FLUSH_BYTES))
        .collect();
    let overlaps = |f: &Flush, b: &BurstSpan| {
        b.start_ns <= f.end_ns + tol_ns && b.end_ns >= f.start_ns - tol_ns
    };
    let in_compaction = |b: &BurstSpan| {
        compactions
            .iter()
            .any(|c| b.start_ns <= c.end_ns + tol_ns && b.end_ns >= c.start_ns - tol_ns)
    };
    let mut rows = Vec::new();
    let mut fm = 0;
    for f in &big {
        let hit = bursts.iter().find(|b| overlaps(f, b));
        fm += usize::from(hit.is_some());
        rows.push((
            f.table.clone(),
            f.start.clone(),
            f.end.clone(),
            hit.map(|b| b.start.clone()),
        ));
    }
    let mut bm = 0;
    let mut in_comp = 0;
    let burst_rows: Vec<BurstMatch> = bursts
        .iter()
        .map(|b| {
            let flush = big.iter().any(|f| overlaps(f, b));
            let compaction = in_compaction(b);
            let flushed: u64 = big
                .iter()
                .filter(|f| overlaps(f, b))
                .map(|f| f.bytes.unwrap_or(u64::MAX))
                .fold(0, u64::saturating_add);
            let matched = if flush {
                bm += 1;
                "flush"
            } else if compaction {
                in_comp += 1;
                "compaction"
            } else {
                "none"
            };
            BurstMatch {
                start: b.start.clone(),
                matched: matched.into(),
                writers: b.writers.clone(),
                main_writer: b.main_writer.clone(),
                class: b.class.clone(),
                log: match (flush, compaction) {
                    (true, false) => "flush",
                    (true, true) if flushed.saturating_mul(2) >= b.write_bytes => "flush",
                    (_, true) => "compaction",
                    (false, false) => "none",
                }
                .into(),
                log_both: flush && compaction,
            }
        })
        .collect();
    let classes = classes.map(|c| agreement(c, &burst_rows, flushes, compactions));
    FlushMatch {
        flushes: big.len(),
        flushes_matched: fm,
        bursts: bursts.len(),
        bursts_matched: bm,
        precision: if bursts.is_empty() {
            0.0
        } else {
            bm as f64 / bursts.len() as f64
        },
        recall: if big.is_empty() {
            0.0
        } else {
            fm as f64 / big.len() as f64
        },
        tolerance_s: tol_ns as f64 / 1e9,
        small_flushes_ignored: flushes.len() - big.len(),
        unmatched_in_compactions: in_comp,
        rows,
        burst_rows,
        classes,
    }
}

/// [`ClassAgreement`] from the matched bursts and the log's SSTables.
fn agreement(
    c: &crate::analysis::classes::Classes,
    bursts: &[BurstMatch],
    flushes: &[Flush],
    compactions: &[Compaction],
) -> ClassAgreement {
    let mut a = ClassAgreement {
        profile: c.profile.clone(),
        bursts: bursts.len(),
        ..ClassAgreement::default()
    };
    let mut none: BTreeMap<String, usize> = BTreeMap::new();
    for b in bursts {
        a.log_both += usize::from(b.log_both);
        match b.log.as_str() {
            "flush" => {
                a.log_flush += 1;
                a.log_flush_labelled_flush += usize::from(b.class == "flush");
            }
            "compaction" => {
                a.log_compaction += 1;
                a.log_compaction_labelled_compaction += usize::from(b.class == "compaction");
            }
            _ => {
                a.log_none += 1;
                *none.entry(b.class.clone()).or_default() += 1;
            }
        }
    }
    a.log_none_labels = none.into_iter().collect();
    // The log's account of each SSTable: flushed, or written by a compaction.
    let mut log: HashMap<&str, &str> = HashMap::new();
    for f in flushes {
        if let Some(s) = &f.sstable {
            log.insert(s, "flush");
        }
    }
    for k in compactions {
        for s in &k.outputs {
            log.insert(s, "compaction");
        }
    }
    let mut seen: HashSet<&str> = HashSet::new();
    for m in &c.made {
        let Some(&account) = log.get(m.path.as_str()) else {
            // Only SSTables: other files a thread made (the commit log) are not the log's.
            if crate::analysis::classes::is_sstable_group(&m.path) {
                a.sstables_trace_only += 1;
            }
            continue;
        };
        seen.insert(m.path.as_str());
        a.sstables_compared += 1;
        if account == m.class {
            a.sstables_agree += 1;
        } else if a.sstables_disagree.len() < 20 {
            a.sstables_disagree
                .push((m.path.clone(), account.to_string(), m.class.clone()));
        }
        match account {
            "flush" => a.sstables_flushed += 1,
            _ => a.sstables_compacted += 1,
        }
    }
    a.sstables_log_only = log.keys().filter(|k| !seen.contains(*k)).count();
    a
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
    fn status_lines_with_and_without_timestamps() {
        let p = parse_status("2026-11-22 02:45:18:771 5 sec: 2825 operations; 564.77 current ops/sec; est completion in 2 days 1 hour [READ: Count=1400, Max=121535, Min=1691, Avg=19070.52, 90=32591, 99=49023, 99.9=117183, 99.99=121535] [UPDATE: Count=1506, Max=96831, Min=1587, Avg=15271.74, 90=25359, 99=53183, 99.9=92095, 99.99=96831] ", &Zone::utc()).unwrap();
        assert_eq!(
            (p.elapsed_s, p.operations, p.ops_per_s),
            (5, 2825, Some(564.77))
        );
        assert_eq!(p.latencies.len(), 2);
        assert_eq!(p.latencies[0].p99_us, Some(49023.0));
        assert_eq!(p.latencies[1].count, Some(1506));
        let q = parse_status("10 sec: 21029 operations; 2102.9 current ops/sec; est completion in 5 days 12 hours [READ AverageLatency(us)=22779.72]", &Zone::utc()).unwrap();
        assert_eq!(
            (q.time_ns, q.elapsed_s, q.latencies[0].avg_us),
            (None, 10, Some(22779.72))
        );
        let z = parse_status(
            "2026-11-22 02:45:13:865 0 sec: 0 operations; est completion in 0 second ",
            &Zone::utc(),
        )
        .unwrap();
        assert_eq!((z.operations, z.ops_per_s), (0, None));
    }

    #[test]
    fn sizes_and_tables() {
        assert_eq!(parse_size("2.475MiB"), Some(2_595_226));
        assert_eq!(parse_size("183B"), Some(183));
        assert_eq!(
            table_of_path("/var/lib/c/data/data/ycsb/usertable-1b2c/nb-73-big-Data.db").as_deref(),
            Some("ycsb.usertable")
        );
    }

    #[test]
    fn cassandra_stress_3x_and_4x_styles() {
        // Written after the tools' documented formats; no real output is in the fixtures yet.
        let v3 = "Running WRITE with 200 threads for 1000000 iteration\n\
total ops , op/s, pk/s, row/s, mean, med, .95, .99, .999, max, time, stderr, errors, gc: #, max ms, sum ms, sdv ms, mb\n\
20480, 20460, 20460, 20460, 1.5, 1.1, 3.5, 7.0, 17.3, 60.3, 1.0, 0.00000, 0, 0, 0, 0, 0, 0\n\
61440, 40960, 40960, 40960, 1.2, 1.0, 2.5, 5.0, 12.1, 40.0, 2.0, 0.01234, 0, 1, 12, 12, 0, 512\n\
\n\
Results:\n\
op rate                   : 30720 [WRITE:30720]\n\
Op rate                   :   30,720 op/s  [WRITE: 30,720 op/s]\n\
Latency 99th percentile   :    7.0 ms [WRITE: 7.0 ms]\n\
Total operation time      : 00:01:02\n";
        let r = parse_cassandra_stress(Path::new("cs3.txt"), v3).unwrap();
        assert_eq!(r.status.len(), 2);
        assert_eq!(
            (
                r.status[1].elapsed_s,
                r.status[1].operations,
                r.status[1].ops_per_s
            ),
            (2, 61440, Some(40960.0))
        );
        assert_eq!(r.status[0].latencies[0].p99_us, Some(7000.0));
        assert_eq!(r.summary["OVERALL"]["Op rate (op/s)"], 30720.0);
        assert_eq!(r.summary["OVERALL"]["Latency 99th percentile (ms)"], 7.0);
        assert_eq!(r.summary["OVERALL"]["Total operation time"], 62.0);
        let v4 = "type, total ops, op/s, pk/s, row/s, mean, med, .95, .99, .999, max, time, stderr, errors, gc: #, max ms, sum ms, sdv ms, mb\n\
READ, 1000, 1000, 1000, 1000, 2.0, 1.5, 4.0, 9.0, 20.0, 30.0, 1.0, 0.0, 0, 0, 0, 0, 0, 0\n\
WRITE, 3000, 3000, 3000, 3000, 1.0, 0.8, 2.0, 4.0, 8.0, 12.0, 1.0, 0.0, 0, 0, 0, 0, 0, 0\n\
total, 4000, 4000, 4000, 4000, 1.2, 0.9, 3.0, 8.0, 18.0, 30.0, 1.0, 0.0, 0, 0, 0, 0, 0, 0\n";
        let r = parse_cassandra_stress(Path::new("cs4.txt"), v4).unwrap();
        assert_eq!(r.status.len(), 1, "one point per interval");
        let ops: Vec<&str> = r.status[0]
            .latencies
            .iter()
            .map(|l| l.op.as_str())
            .collect();
        assert_eq!(ops, ["READ", "WRITE", "TOTAL"]);
        assert_eq!(
            (r.status[0].operations, r.status[0].ops_per_s),
            (4000, Some(4000.0)),
            "from the total line"
        );
        assert_eq!(r.status[0].latencies[0].p99_us, Some(9000.0));
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

    #[test]
    fn flush_matching_counts_precision_and_recall() {
        let f = |s: i64, e: i64| Flush {
            table: "ks.t".into(),
            start: String::new(),
            end: String::new(),
            start_ns: s * 1_000_000_000,
            end_ns: e * 1_000_000_000,
            bytes: Some(5 << 20),
            sstable: None,
        };
        let flushes = [f(10, 11), f(20, 21), f(30, 31)];
        let b = |s: i64, e: i64| BurstSpan {
            start_ns: s * 1_000_000_000,
            end_ns: e * 1_000_000_000,
            start: format!("t{s}"),
            writers: "w".into(),
            main_writer: "w".into(),
            class: String::new(),
            write_bytes: 0,
        };
        // Compaction 40..45 s: the burst at 46 s is within the 1 s tolerance, at 60 s is not.
        let compactions = [Compaction {
            id: "c1".into(),
            start: String::new(),
            end: String::new(),
            start_ns: 40_000_000_000,
            end_ns: 45_000_000_000,
            outputs: Vec::new(),
        }];
        let m = match_flushes(
            &flushes,
            &compactions,
            &[b(11, 12), b(22, 23), b(46, 47), b(60, 61)],
            1_000_000_000,
            None,
        );
        assert_eq!(
            (m.flushes, m.flushes_matched, m.bursts, m.bursts_matched),
            (3, 2, 4, 2)
        );
        assert!((m.precision - 0.5).abs() < 1e-9 && (m.recall - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(m.unmatched_in_compactions, 1);
        let kinds: Vec<&str> = m.burst_rows.iter().map(|r| r.matched.as_str()).collect();
        assert_eq!(kinds, ["flush", "flush", "compaction", "none"]);
        // Flush 20..21 s, burst from 22 s: exactly the 1 s tolerance after its end.
        assert_eq!(m.rows[1].3.as_deref(), Some("t22"));
        assert_eq!(m.rows[2].3, None);
        assert!(m.classes.is_none());
    }

    /// The trace's classes against the log: a burst over a flush and a compaction is what the
    /// flushes' logged sizes make of it; SSTables by the log's account of them.
    #[test]
    fn classes_are_checked_against_the_log() {
        let s = 1_000_000_000;
        let flushes = [
            Flush {
                start_ns: 10 * s,
                end_ns: 11 * s,
                bytes: Some(2 << 20),
                sstable: Some("/d/nb-1-big".into()),
                ..Flush::default()
            },
            Flush {
                start_ns: 40 * s,
                end_ns: 41 * s,
                bytes: Some(2 << 20),
                sstable: Some("/d/nb-3-big".into()),
                ..Flush::default()
            },
        ];
        let compactions = [Compaction {
            start_ns: 39 * s,
            end_ns: 45 * s,
            outputs: vec!["/d/nb-2-big".into(), "/d/nb-4-big".into()],
            ..Compaction::default()
        }];
        let b = |t: i64, mb: u64, class: &str| BurstSpan {
            start_ns: t * s,
            end_ns: t * s + s / 2,
            start: format!("t{t}"),
            writers: String::new(),
            main_writer: String::new(),
            class: class.into(),
            write_bytes: mb << 20,
        };
        let bursts = [
            b(10, 2, "flush"),
            // Over the 40 s flush and the compaction: 3 MiB is flush-sized, 40 MiB is not.
            b(40, 3, "flush"),
            b(42, 40, "compaction"),
            b(44, 30, "flush"),
            b(80, 1, "commit log"),
        ];
        let made = |path: &str, class: &str| crate::analysis::classes::Made {
            path: path.into(),
            class: class.into(),
            creator: String::new(),
        };
        let classes = crate::analysis::classes::Classes {
            profile: "cassandra".into(),
            devices: Vec::new(),
            made: vec![
                made("/d/nb-1-big", "flush"),
                made("/d/nb-2-big", "compaction"),
                made("/d/nb-3-big", "compaction"),
                made("/d/nb-9-big", "flush"),
                made("/c/CommitLog-7-1.log", "commit log"),
            ],
            ..crate::analysis::classes::Classes::default()
        };
        let m = match_flushes(&flushes, &compactions, &bursts, s, Some(&classes));
        let logs: Vec<&str> = m.burst_rows.iter().map(|r| r.log.as_str()).collect();
        assert_eq!(logs, ["flush", "flush", "compaction", "compaction", "none"]);
        let a = m.classes.unwrap();
        assert_eq!(
            (a.bursts, a.log_flush, a.log_flush_labelled_flush),
            (5, 2, 2)
        );
        assert_eq!(
            (
                a.log_compaction,
                a.log_compaction_labelled_compaction,
                a.log_both
            ),
            (2, 1, 2)
        );
        assert_eq!(a.log_none_labels, [("commit log".to_string(), 1)]);
        assert_eq!(
            (
                a.sstables_compared,
                a.sstables_agree,
                a.sstables_flushed,
                a.sstables_compacted
            ),
            (3, 2, 2, 1)
        );
        assert_eq!(
            a.sstables_disagree,
            [(
                "/d/nb-3-big".to_string(),
                "flush".to_string(),
                "compaction".to_string()
            )]
        );
        // nb-9 made in the trace only (not the commit log: not an SSTable); nb-4 in the log only.
        assert_eq!((a.sstables_trace_only, a.sstables_log_only), (1, 1));
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
    fn compactions_are_spans_by_id() {
        let log = "INFO  [CompactionExecutor:1] 2026-11-22 05:57:47,531 CompactionTask.java:167 - Compacting (a4a8-1) [/d/ks/t-1/nb-7-big-Data.db:level=0, ]\n\
INFO  [CompactionExecutor:2] 2026-11-22 05:57:48,000 CompactionTask.java:167 - Compacting (b5b9-2) [/d/ks/t-1/nb-9-big-Data.db:level=0, ]\n\
INFO  [CompactionExecutor:1] 2026-11-22 05:57:47,656 CompactionTask.java:258 - Compacted (a4a8-1) 7 sstables to [/d/ks/t-1/nb-8-big,/d/ks/t-1/nb-10-big,] to level=0.\n\
INFO  [NativePoolCleaner] 2026-11-22 05:57:49,000 ColumnFamilyStore.java:1052 - Enqueuing flush of ks.t, Reason: MEMTABLE_LIMIT, Usage: 5 MiB (3%) on-heap\n\
INFO  [PerDiskMemtableFlushWriter_0:1] 2026-11-22 05:57:49,100 Flushing.java:179 - Completed flushing /d/ks/t-1/nb-11-big-Data.db (1.855MiB) for commitlog position CommitLogPosition(segmentId=1, position=2)\n";
        let l = parse_cassandra_log(Path::new("s.log"), log, &Zone::utc()).unwrap();
        assert_eq!(l.compactions.len(), 1, "b5b9-2 never completed");
        let c = &l.compactions[0];
        assert_eq!(c.id, "a4a8-1");
        assert_eq!(c.end_ns - c.start_ns, 125_000_000);
        assert_eq!(c.outputs, ["/d/ks/t-1/nb-8-big", "/d/ks/t-1/nb-10-big"]);
        assert_eq!(l.flushes.len(), 1);
        assert_eq!(l.flushes[0].sstable.as_deref(), Some("/d/ks/t-1/nb-11-big"));
    }
}
