//! Importers into the trace format. MSR Cambridge / SNIA block traces (CSV):
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, with Timestamp in Windows
//! FILETIME (100 ns ticks since 1601) when the IO was issued, Offset and Size in bytes, and
//! ResponseTime in 100 ns ticks. Field mapping and what the format cannot know:
//! docs/importers.md.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use tracer_common::format::{DeviceInfo, IoRecord, TraceHeader, TraceTrailer, TraceWriter};
use tracer_common::op::{Op, flags};

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}:{line}: {what} (expected Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime with Type Read or Write and numbers elsewhere); use --skip-bad to skip such lines"
    )]
    Malformed {
        path: PathBuf,
        line: u64,
        what: String,
    },
    #[error("{path}: no IO lines")]
    Empty { path: PathBuf },
    #[error(transparent)]
    Write(#[from] tracer_common::format::FormatError),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportStats {
    pub records: u64,
    pub skipped: u64,
    pub first_skipped: Option<String>,
}

/// Windows FILETIME epoch (1601) to Unix epoch, in 100 ns ticks.
const FILETIME_UNIX_OFFSET: u64 = 116_444_736_000_000_000;

pub fn import_msr(input: &Path, output: &Path, skip_bad: bool) -> Result<ImportStats, ImportError> {
    let f = std::fs::File::open(input).map_err(|source| ImportError::Read {
        path: input.to_owned(),
        source,
    })?;
    let mut stats = ImportStats::default();
    let mut writer: Option<TraceWriter> = None;
    let mut devices: Vec<(String, u32)> = Vec::new();
    let mut base = 0u64;
    let mut last_ns = 0u64;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|source| ImportError::Read {
            path: input.to_owned(),
            source,
        })?;
        let n = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = parse_msr_line(&line);
        let (ts, host, disk, op, off, size, resp) = match parsed {
            Ok(v) => v,
            Err(what) => {
                if !skip_bad {
                    return Err(ImportError::Malformed {
                        path: input.to_owned(),
                        line: n,
                        what,
                    });
                }
                stats.skipped += 1;
                stats
                    .first_skipped
                    .get_or_insert(format!("line {n}: {what}"));
                continue;
            }
        };
        let issue_ns = ts.saturating_sub(FILETIME_UNIX_OFFSET) * 100;
        let name = format!("{host}_{disk}");
        let minor = match devices.iter().position(|d| d.0 == name) {
            Some(p) => devices[p].1,
            None => {
                let m = devices.len() as u32;
                devices.push((name.clone(), m));
                if let Some(w) = writer.as_mut() {
                    w.write_device(&DeviceInfo {
                        name: name.clone(),
                        major: 0,
                        minor: m,
                        logical_block_size: 512,
                    })?;
                }
                m
            }
        };
        if writer.is_none() {
            base = issue_ns;
            let header = TraceHeader {
                tracer_version: format!("blkprof import msr {}", env!("CARGO_PKG_VERSION")),
                host: host.to_string(),
                kernel: "unknown (imported from an MSR Cambridge trace)".into(),
                wall_clock_start_ns: issue_ns as i64,
                monotonic_base_ns: issue_ns,
                devices: vec![DeviceInfo {
                    name: name.clone(),
                    major: 0,
                    minor,
                    logical_block_size: 512,
                }],
                ..Default::default()
            };
            writer = Some(TraceWriter::create(output, &header)?);
        }
        let complete = issue_ns + resp * 100;
        last_ns = last_ns.max(complete);
        let r = IoRecord {
            complete_ns: complete,
            enter_ns: issue_ns,
            issue_ns,
            sector: off / 512,
            bytes: size,
            dev: tracer_common::dev_join(0, minor),
            op,
            // Unknown in this format: submitter, queue depth, OS queue time, flags.
            flags: flags::STARTED_BEFORE,
            ..Default::default()
        };
        writer.as_mut().expect("created above").push(&r, &[0; 16])?;
        stats.records += 1;
    }
    let Some(w) = writer else {
        return Err(ImportError::Empty {
            path: input.to_owned(),
        });
    };
    w.finish(&TraceTrailer {
        wall_clock_end_ns: last_ns as i64,
        monotonic_end_ns: last_ns,
        reason: "import".into(),
        records_in_file: stats.records,
        ..Default::default()
    })?;
    let _ = base;
    Ok(stats)
}

type MsrLine<'a> = (u64, &'a str, &'a str, Op, u64, u32, u64);

fn parse_msr_line(line: &str) -> Result<MsrLine<'_>, String> {
    let f: Vec<&str> = line.trim().split(',').collect();
    if f.len() != 7 {
        return Err(format!("{} fields instead of 7", f.len()));
    }
    let num = |i: usize, what: &str| {
        f[i].trim()
            .parse::<u64>()
            .map_err(|_| format!("{what} {:?} is not a number", f[i]))
    };
    let op = match f[3].trim() {
        "Read" | "read" | "R" => Op::Read,
        "Write" | "write" | "W" => Op::Write,
        other => return Err(format!("Type {other:?} is neither Read nor Write")),
    };
    let size =
        u32::try_from(num(5, "Size")?).map_err(|_| format!("Size {:?} is too large", f[5]))?;
    Ok((
        num(0, "Timestamp")?,
        f[1].trim(),
        f[2].trim(),
        op,
        num(4, "Offset")?,
        size,
        num(6, "ResponseTime")?,
    ))
}

/// blkparse's default text output, or the same events as the kernel's ftrace `blk` tracer
/// prints them:
///   blkparse: `  7,1    1       12     0.000123456  1234  C  WS 123 + 8 [0]`
///   ftrace:   `dd-19596 [001] d..1. 1554.878835:   7,1    C  WS 0 + 8 [0]`
/// Each completion (C) becomes one IO; its issue (D) and queue (Q) events, matched by device
/// and sector, give the device and OS-queue times and the submitter. docs/importers.md.
pub fn import_blk(input: &Path, output: &Path, skip_bad: bool) -> Result<ImportStats, ImportError> {
    use std::collections::{HashMap, VecDeque};
    let f = std::fs::File::open(input).map_err(|source| ImportError::Read {
        path: input.to_owned(),
        source,
    })?;
    let mut stats = ImportStats::default();
    // (dev, sector) -> queue events in order: (time, pid, comm)
    type Queued = HashMap<(u32, u64), VecDeque<(u64, u32, String)>>;
    let mut queued: Queued = HashMap::new();
    let mut issued: HashMap<(u32, u64), VecDeque<u64>> = HashMap::new();
    let mut recs: Vec<(IoRecord, [u8; 16])> = Vec::new();
    let mut devs: Vec<u32> = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|source| ImportError::Read {
            path: input.to_owned(),
            source,
        })?;
        let n = i as u64 + 1;
        let t = line.trim();
        // Not event lines: blkparse's per-CPU summaries, ftrace's "# tracer: blk" header.
        if t.is_empty()
            || t.starts_with('#')
            || t.starts_with("CPU")
            || t.starts_with("Total")
            || !t.contains(',')
        {
            continue;
        }
        let ev = match parse_blk_line(t) {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(what) => {
                if !skip_bad {
                    return Err(ImportError::Malformed {
                        path: input.to_owned(),
                        line: n,
                        what: format!("{what} (expected a blkparse or ftrace blk event line)"),
                    });
                }
                stats.skipped += 1;
                stats
                    .first_skipped
                    .get_or_insert(format!("line {n}: {what}"));
                continue;
            }
        };
        if !devs.contains(&ev.dev) {
            devs.push(ev.dev);
        }
        let key = (ev.dev, ev.sector);
        match ev.action {
            'Q' => queued
                .entry(key)
                .or_default()
                .push_back((ev.time_ns, ev.pid, ev.comm.clone())),
            'D' => issued.entry(key).or_default().push_back(ev.time_ns),
            'C' => {
                let issue = issued.get_mut(&key).and_then(VecDeque::pop_front);
                let q = queued.get_mut(&key).and_then(VecDeque::pop_front);
                let (op, fl) = rwbs_op(&ev.rwbs);
                let enter = q.as_ref().map(|q| q.0).or(issue).unwrap_or(ev.time_ns);
                let mut comm = [0u8; 16];
                if let Some((_, _, c)) = &q {
                    let b = c.as_bytes();
                    comm[..b.len().min(15)].copy_from_slice(&b[..b.len().min(15)]);
                }
                recs.push((
                    IoRecord {
                        complete_ns: ev.time_ns,
                        enter_ns: enter.min(ev.time_ns),
                        issue_ns: issue.unwrap_or(0).min(ev.time_ns),
                        sector: ev.sector,
                        bytes: ev.sectors.saturating_mul(512),
                        pid: q.as_ref().map_or(0, |q| q.1),
                        dev: ev.dev,
                        op,
                        flags: fl
                            | if q.is_none() {
                                flags::STARTED_BEFORE
                            } else {
                                0
                            }
                            | if issue.is_none() {
                                flags::NEVER_ISSUED
                            } else {
                                0
                            },
                        error: ev.error,
                        ..Default::default()
                    },
                    comm,
                ));
            }
            _ => {}
        }
    }
    if recs.is_empty() {
        return Err(ImportError::Empty {
            path: input.to_owned(),
        });
    }
    recs.sort_by_key(|r| r.0.complete_ns);
    let base = recs.iter().map(|r| r.0.enter_ns).min().unwrap_or(0);
    let header = TraceHeader {
        tracer_version: format!("blkprof import blk {}", env!("CARGO_PKG_VERSION")),
        host: "unknown (imported)".into(),
        kernel: "unknown (imported)".into(),
        // Event times are seconds since tracing began (blkparse) or since boot (ftrace): there is
        // no wall clock in the format; the trace starts at the Unix epoch plus that offset.
        wall_clock_start_ns: base as i64,
        monotonic_base_ns: base,
        devices: devs
            .iter()
            .map(|&d| {
                let (major, minor) = tracer_common::dev_split(d);
                DeviceInfo {
                    name: format!("{major}:{minor}"),
                    major,
                    minor,
                    logical_block_size: 512,
                }
            })
            .collect(),
        ..Default::default()
    };
    let mut w = TraceWriter::create(output, &header)?;
    let last = recs.last().map_or(0, |r| r.0.complete_ns);
    for (r, comm) in &recs {
        w.push(r, comm)?;
        stats.records += 1;
    }
    w.finish(&TraceTrailer {
        wall_clock_end_ns: last as i64,
        monotonic_end_ns: last,
        reason: "import".into(),
        records_in_file: stats.records,
        ..Default::default()
    })?;
    Ok(stats)
}

struct BlkEvent {
    dev: u32,
    time_ns: u64,
    pid: u32,
    action: char,
    rwbs: String,
    sector: u64,
    sectors: u32,
    comm: String,
    error: i32,
}

/// blkparse rwbs: leading F = preflush, then R/W/D/N (none = flush when alone with the
/// preflush), then modifiers F (FUA), A (readahead), S (sync), M (meta), E (secure erase).
fn rwbs_op(rwbs: &str) -> (Op, u16) {
    let mut fl = 0u16;
    let mut chars = rwbs.chars().peekable();
    if chars.peek() == Some(&'F') {
        fl |= flags::PREFLUSH;
        chars.next();
    }
    let op = match chars.next() {
        Some('R') => Op::Read,
        Some('W') => Op::Write,
        Some('D') => Op::Discard,
        Some('N') if fl & flags::PREFLUSH != 0 => Op::Flush,
        _ => Op::Other,
    };
    for c in chars {
        match c {
            'F' => fl |= flags::FUA,
            'A' => fl |= flags::RAHEAD,
            'S' => fl |= flags::SYNC,
            'M' => fl |= flags::META,
            _ => {}
        }
    }
    // The flush machinery's own request shows as "FN": count it as the kernel does.
    if op == Op::Flush {
        fl |= flags::FLUSH_RQ;
    }
    (op, fl)
}

fn parse_blk_line(t: &str) -> Result<Option<BlkEvent>, String> {
    let tok: Vec<&str> = t.split_whitespace().collect();
    let is_dev = |s: &str| {
        s.split_once(',').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
    };
    let Some(di) = tok.iter().position(|s| is_dev(s)) else {
        return Err("no MAJ,MIN device field".into());
    };
    let (maj, min) = tok[di].split_once(',').expect("checked");
    let dev = tracer_common::dev_join(
        maj.parse().map_err(|_| "bad major")?,
        min.parse().map_err(|_| "bad minor")?,
    );
    let secs = |s: &str| -> Result<u64, String> {
        let s = s.trim_end_matches(':');
        let (a, b) = s.split_once('.').unwrap_or((s, "0"));
        let whole: u64 = a
            .parse()
            .map_err(|_| format!("time {s:?} is not a number"))?;
        let mut frac = b.to_string();
        frac.truncate(9);
        while frac.len() < 9 {
            frac.push('0');
        }
        Ok(whole * 1_000_000_000
            + frac
                .parse::<u64>()
                .map_err(|_| format!("time {s:?} is not a number"))?)
    };
    let (time_ns, pid, ai, comm_pre) = if di > 0 && tok[di - 1].ends_with(':') {
        // ftrace: "comm-pid [cpu] flags time: dev action ..."
        let task = tok[0];
        let (comm, pid) = task.rsplit_once('-').unwrap_or((task, "0"));
        (
            secs(tok[di - 1])?,
            pid.parse().unwrap_or(0),
            di + 1,
            comm.to_string(),
        )
    } else {
        // blkparse: "dev cpu seq time pid action ..."
        if tok.len() < di + 6 {
            return Err("too few fields".into());
        }
        (
            secs(tok[di + 3])?,
            tok[di + 4]
                .parse()
                .map_err(|_| format!("pid {:?} is not a number", tok[di + 4]))?,
            di + 5,
            String::new(),
        )
    };
    let action = tok.get(ai).ok_or("no action")?;
    let Some(a) = action.chars().next().filter(|_| action.len() <= 2) else {
        return Err(format!("action {action:?}"));
    };
    // Only request-level events with "sector + count" matter here; others (plug, unplug,
    // messages) are skipped.
    if !matches!(a, 'Q' | 'D' | 'C') {
        return Ok(None);
    }
    let rwbs = tok.get(ai + 1).ok_or("no rwbs")?.to_string();
    if tok.get(ai + 3) != Some(&"+") {
        // "C N () ..." passthrough commands, or a flush without a sector: treat a bare flush.
        if rwbs.starts_with('F') && a == 'C' {
            return Ok(Some(BlkEvent {
                dev,
                time_ns,
                pid,
                action: a,
                rwbs,
                sector: 0,
                sectors: 0,
                comm: comm_pre,
                error: 0,
            }));
        }
        return Ok(None);
    }
    let sector: u64 = tok[ai + 2]
        .parse()
        .map_err(|_| format!("sector {:?} is not a number", tok[ai + 2]))?;
    let sectors: u32 = tok
        .get(ai + 4)
        .ok_or("no sector count")?
        .parse()
        .map_err(|_| "sector count is not a number")?;
    let bracket = tok.get(ai + 5..).map(|r| r.join(" ")).unwrap_or_default();
    let inner = bracket
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let (comm, error) = if a == 'C' {
        (comm_pre, inner.parse().unwrap_or(0))
    } else {
        (if inner.is_empty() { comm_pre } else { inner }, 0)
    };
    Ok(Some(BlkEvent {
        dev,
        time_ns,
        pid,
        action: a,
        rwbs,
        sector,
        sectors,
        comm,
        error,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_line_styles_parse() {
        let e = parse_blk_line("dd-19596 [001] d..1. 1554.878835:   7,1    Q  RS 0 + 8 [dd]")
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                e.action,
                e.sector,
                e.sectors,
                e.pid,
                e.comm.as_str(),
                e.time_ns
            ),
            ('Q', 0, 8, 19596, "dd", 1_554_878_835_000)
        );
        let e = parse_blk_line(
            "  8,0    3        1     0.000000000   697  Q  WS 3417048 + 8 [kworker/u8:2]",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.action, e.sector, e.pid, e.comm.as_str()),
            ('Q', 3417048, 697, "kworker/u8:2")
        );
        let e = parse_blk_line("  7,1    0       40     0.001234000     0  C   W 2048 + 1024 [0]")
            .unwrap()
            .unwrap();
        assert_eq!((e.action, e.sectors, e.error), ('C', 1024, 0));
        assert!(parse_blk_line("garbage line, with comma").is_err());
        assert_eq!(
            rwbs_op("FWFS"),
            (Op::Write, flags::PREFLUSH | flags::FUA | flags::SYNC)
        );
        assert_eq!(rwbs_op("RA").0, Op::Read);
        assert_eq!(rwbs_op("FN").0, Op::Flush);
        assert_eq!(rwbs_op("DS").0, Op::Discard);
    }
}
