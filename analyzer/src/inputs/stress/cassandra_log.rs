//! Cassandra's system.log: memtable flushes, compactions and deletions, as markers and spans
//! on the wall-clock axis.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use serde::Serialize;

use super::{ParseError, parse_stamp};
use crate::inputs::zone::Zone;
use crate::numeric::f64_to_u64_saturating;

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

#[cfg(test)]
mod tests {
    use super::*;

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
