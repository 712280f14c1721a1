//! Importers into the trace format. MSR Cambridge / SNIA block traces (CSV):
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, with Timestamp in Windows
//! FILETIME (100 ns ticks since 1601) when the IO was issued, Offset and Size in bytes, and
//! `ResponseTime` in 100 ns ticks. Field mapping and what the format cannot know:
//! docs/importers.md.

use std::collections::{HashMap, VecDeque};
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
    #[error("{path}:{line}: {what}; use --skip-bad to skip such lines")]
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
    /// blk imports only.
    pub blk: BlkStats,
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
        // Times in 100 ns units since 1601 (FILETIME), to ns since 1970: checked, since the
        // trace's wall clock (i64 nanoseconds since 1970) ends in the year 2262.
        let wall = |ns: u64| i64::try_from(ns).ok().map(|_| ns);
        let parsed = parse_msr_line(&line).and_then(|(ts, host, disk, op, off, size, resp)| {
            let issue = ts
                .saturating_sub(FILETIME_UNIX_OFFSET)
                .checked_mul(100)
                .and_then(wall);
            let complete = issue
                .and_then(|i| resp.checked_mul(100)?.checked_add(i))
                .and_then(wall);
            match (issue, complete) {
                (Some(i), Some(c)) => Ok((i, c, host, disk, op, off, size)),
                _ => Err(
                    "Timestamp or ResponseTime too large (nanoseconds since 1970 must fit in 63 bits: before the year 2262)"
                        .to_string(),
                ),
            }
        });
        let (issue_ns, complete, host, disk, op, off, size) = match parsed {
            Ok(v) => v,
            Err(what) => {
                if !skip_bad {
                    return Err(ImportError::Malformed {
                        path: input.to_owned(),
                        line: n,
                        what: format!(
                            "{what} (expected Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime with Type Read or Write and numbers elsewhere)"
                        ),
                    });
                }
                stats.skipped += 1;
                stats
                    .first_skipped
                    .get_or_insert(format!("line {n}: {what}"));
                continue;
            }
        };
        let name = format!("{host}_{disk}");
        let minor = if let Some(p) = devices.iter().position(|d| d.0 == name) {
            devices[p].1
        } else {
            let Ok(m) = u32::try_from(devices.len()) else {
                return Err(ImportError::Malformed {
                    path: input.to_owned(),
                    line: n,
                    what: format!("a disk beyond the 2^32 a trace can number: {name}"),
                });
            };
            devices.push((name.clone(), m));
            if let Some(w) = writer.as_mut() {
                w.write_device(&DeviceInfo {
                    name: name.clone(),
                    major: 0,
                    minor: m,
                    logical_block_size: 512,
                    queue: None,
                })?;
            }
            m
        };
        let w = if let Some(w) = writer.as_mut() {
            w
        } else {
            base = issue_ns;
            let header = TraceHeader {
                tracer_version: format!("blkprof import msr {}", tracer_common::VERSION),
                host: host.to_string(),
                kernel: "unknown (imported from an MSR Cambridge trace)".into(),
                // Below i64::MAX: checked when parsed.
                wall_clock_start_ns: i64::try_from(issue_ns).unwrap_or(i64::MAX),
                monotonic_base_ns: issue_ns,
                devices: vec![DeviceInfo {
                    name: name.clone(),
                    major: 0,
                    minor,
                    logical_block_size: 512,
                    queue: None,
                }],
                ..Default::default()
            };
            writer.insert(TraceWriter::create(output, &header)?)
        };
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
        w.push(&r, &[0; 16])?;
        stats.records += 1;
    }
    let Some(w) = writer else {
        return Err(ImportError::Empty {
            path: input.to_owned(),
        });
    };
    w.finish(&TraceTrailer {
        // Below i64::MAX: checked when parsed.
        wall_clock_end_ns: i64::try_from(last_ns).unwrap_or(i64::MAX),
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
/// Each completion (C) becomes one IO; its issue (D), get-request (G) and queue (Q) events,
/// matched by device and sector, give the device and OS-queue times and the submitter. Merges
/// (M, F), splits (X) and requeues (R) keep the pending events straight (`BlkPairing`).
/// docs/importers.md.
pub fn import_blk(input: &Path, output: &Path, skip_bad: bool) -> Result<ImportStats, ImportError> {
    let f = std::fs::File::open(input).map_err(|source| ImportError::Read {
        path: input.to_owned(),
        source,
    })?;
    let mut stats = ImportStats::default();
    let mut pairing = BlkPairing::default();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|source| ImportError::Read {
            path: input.to_owned(),
            source,
        })?;
        let n = i as u64 + 1;
        let t = line.trim();
        if !is_blk_event_line(t) {
            continue;
        }
        if let Err(what) =
            parse_blk_line(t).and_then(|ev| ev.map_or(Ok(()), |ev| pairing.event(ev)))
        {
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
        }
    }
    let (mut recs, blk) = pairing.finish();
    stats.blk = blk;
    if recs.is_empty() {
        return Err(ImportError::Empty {
            path: input.to_owned(),
        });
    }
    recs.sort_by_key(|r| r.0.complete_ns);
    let base = recs.iter().map(|r| r.0.enter_ns).min().unwrap_or(0);
    let mut devs: Vec<u32> = recs.iter().map(|r| r.0.dev).collect();
    devs.sort_unstable();
    devs.dedup();
    let header = TraceHeader {
        tracer_version: format!("blkprof import blk {}", tracer_common::VERSION),
        host: "unknown (imported)".into(),
        kernel: "unknown (imported)".into(),
        // Event times are seconds since tracing began (blkparse) or since boot (ftrace): there is
        // no wall clock in the format; the trace starts at the Unix epoch plus that offset.
        wall_clock_start_ns: i64::try_from(base).unwrap_or(i64::MAX),
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
                    queue: None,
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
        wall_clock_end_ns: i64::try_from(last).unwrap_or(i64::MAX),
        monotonic_end_ns: last,
        reason: "import".into(),
        records_in_file: stats.records,
        ..Default::default()
    })?;
    Ok(stats)
}

/// Not event lines: blkparse's per-CPU summaries, ftrace's "# tracer: blk" header.
fn is_blk_event_line(t: &str) -> bool {
    !(t.is_empty()
        || t.starts_with('#')
        || t.starts_with("CPU")
        || t.starts_with("Total")
        || !t.contains(','))
}

/// What the blk importer saw besides the IOs themselves.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BlkStats {
    /// M and F events: bios (or whole requests) merged into a request already queued.
    pub merges: u64,
    /// X events: bios split in two, each half completing on its own.
    pub splits: u64,
    /// R events: requests sent back to the queue and issued again later.
    pub requeues: u64,
    /// Q events never matched by a completion (the trace ended first, or their request
    /// completed under a sector the importer could not follow).
    pub unmatched_queued: u64,
    /// D events never matched by a completion.
    pub unmatched_issued: u64,
}

/// A request waiting in the OS queue (or a bio that will become one): when its first bio was
/// queued (Q) and got its request (G), and by whom.
#[derive(Debug, Clone)]
struct Queued {
    time_ns: u64,
    request_ns: Option<u64>,
    pid: u32,
    comm: String,
}

impl Queued {
    /// When the IO entered the OS queue as blkprof-trace counts it: when its request was
    /// allocated (the kernel's `rq->start_time_ns`, the G event), or else the first bio's Q.
    /// The two differ by the bio's wait for a request (merge attempts, a free tag).
    fn enter_ns(&self) -> u64 {
        self.request_ns.unwrap_or(self.time_ns)
    }
}

/// A request issued to the device.
#[derive(Debug, Clone, Copy)]
struct Issued {
    time_ns: u64,
    requeues: u16,
}

/// Pairs queue, issue and completion events by (device, sector), in order. The kernel's
/// merges and requeues change which sector a pending event belongs to:
/// - G (get request): the latest pending bio at that sector became a request; its time is the
///   request's start (a G without a Q starts the request there).
/// - M (back merge): a bio appended to a request that starts at a lower sector, or (since
///   Linux 5.11) a whole request merged into the one before it. Either way the merged part
///   never completes under its own sector: its Q is consumed, and the request keeps the
///   time and submitter of its own first bio.
/// - F (front merge): a bio prepended to the request that starts right after it; the request
///   now starts at the bio's sector, so its pending Q moves there (and the bio's own Q is
///   consumed).
/// - X (split, `sector / new_sector`): the bio's tail is resubmitted at `new_sector` without a
///   Q of its own; it inherits the bio's Q.
/// - R (requeue): the request goes back to the queue and is issued again later: its pending
///   D is dropped, and the completion counts the requeue.
#[derive(Default)]
struct BlkPairing {
    queued: HashMap<(u32, u64), VecDeque<Queued>>,
    issued: HashMap<(u32, u64), VecDeque<Issued>>,
    /// Requeue counts of requests sent back to the queue, waiting for their next D.
    requeued: HashMap<(u32, u64), VecDeque<u16>>,
    records: Vec<(IoRecord, [u8; 16])>,
    stats: BlkStats,
}

impl BlkPairing {
    fn event(&mut self, ev: BlkEvent) -> Result<(), String> {
        let key = (ev.dev, ev.sector);
        match ev.action {
            'Q' => self.queued.entry(key).or_default().push_back(Queued {
                time_ns: ev.time_ns,
                request_ns: None,
                pid: ev.pid,
                comm: ev.comm,
            }),
            'G' => {
                let pending = self.queued.entry(key).or_default();
                match pending.back_mut().filter(|q| q.request_ns.is_none()) {
                    Some(q) => q.request_ns = Some(ev.time_ns),
                    None => pending.push_back(Queued {
                        time_ns: ev.time_ns,
                        request_ns: Some(ev.time_ns),
                        pid: ev.pid,
                        comm: ev.comm,
                    }),
                }
            }
            'M' => {
                self.stats.merges += 1;
                // The merged bio's Q is the latest at its sector (the same task queued it just
                // before); a missing one was queued before the trace began.
                take_latest(&mut self.queued, key);
            }
            'F' => {
                self.stats.merges += 1;
                let next = ev
                    .sector
                    .checked_add(u64::from(ev.sectors))
                    .ok_or_else(|| {
                        format!(
                            "front merge at sector {} + {} is beyond the largest sector",
                            ev.sector, ev.sectors
                        )
                    })?;
                take_latest(&mut self.queued, key);
                if let Some(rq) = take_latest(&mut self.queued, (ev.dev, next)) {
                    self.queued.entry(key).or_default().push_back(rq);
                }
            }
            'X' => {
                self.stats.splits += 1;
                if let Some(q) = self.queued.get(&key).and_then(VecDeque::back).cloned() {
                    self.queued
                        .entry((ev.dev, ev.new_sector))
                        .or_default()
                        .push_back(q);
                }
            }
            'R' => {
                self.stats.requeues += 1;
                let n = take_latest(&mut self.issued, key).map_or(0, |d| d.requeues);
                self.requeued
                    .entry(key)
                    .or_default()
                    .push_back(n.saturating_add(1));
            }
            'D' => {
                let requeues = take_first(&mut self.requeued, key).unwrap_or(0);
                self.issued.entry(key).or_default().push_back(Issued {
                    time_ns: ev.time_ns,
                    requeues,
                });
            }
            'C' => self.complete(&ev),
            _ => {}
        }
        Ok(())
    }

    fn complete(&mut self, ev: &BlkEvent) {
        let key = (ev.dev, ev.sector);
        let issue = take_first(&mut self.issued, key);
        let q = take_first(&mut self.queued, key);
        let (op, fl) = rwbs_op(&ev.rwbs);
        let issue_ns = issue.map(|d| d.time_ns);
        let enter = q
            .as_ref()
            .map(Queued::enter_ns)
            .or(issue_ns)
            .unwrap_or(ev.time_ns);
        let mut comm = [0u8; 16];
        if let Some(q) = &q {
            let b = q.comm.as_bytes();
            let n = b.len().min(15);
            comm[..n].copy_from_slice(&b[..n]);
        }
        let mut flags = fl;
        if q.is_none() {
            flags |= flags::STARTED_BEFORE;
        }
        if issue.is_none() {
            flags |= flags::NEVER_ISSUED;
        }
        self.records.push((
            IoRecord {
                complete_ns: ev.time_ns,
                enter_ns: enter.min(ev.time_ns),
                issue_ns: issue_ns.unwrap_or(0).min(ev.time_ns),
                sector: ev.sector,
                bytes: ev.bytes,
                pid: q.as_ref().map_or(0, |q| q.pid),
                dev: ev.dev,
                op,
                flags,
                error: ev.error,
                requeues: issue.map_or(0, |d| d.requeues),
                ..Default::default()
            },
            comm,
        ));
    }

    /// The IOs in input order, and what was left pending.
    fn finish(mut self) -> (Vec<(IoRecord, [u8; 16])>, BlkStats) {
        self.stats.unmatched_queued = self.queued.values().map(|q| q.len() as u64).sum();
        self.stats.unmatched_issued = self.issued.values().map(|q| q.len() as u64).sum();
        (self.records, self.stats)
    }
}

fn take_first<T>(m: &mut HashMap<(u32, u64), VecDeque<T>>, key: (u32, u64)) -> Option<T> {
    let q = m.get_mut(&key)?;
    let v = q.pop_front();
    if q.is_empty() {
        m.remove(&key);
    }
    v
}

fn take_latest<T>(m: &mut HashMap<(u32, u64), VecDeque<T>>, key: (u32, u64)) -> Option<T> {
    let q = m.get_mut(&key)?;
    let v = q.pop_back();
    if q.is_empty() {
        m.remove(&key);
    }
    v
}

/// One event line: `sector + sectors` (or, for a split X, `sector / new_sector`).
struct BlkEvent {
    dev: u32,
    time_ns: u64,
    pid: u32,
    action: char,
    rwbs: String,
    sector: u64,
    sectors: u32,
    /// `sectors` x 512.
    bytes: u32,
    /// X only: where the split-off tail starts.
    new_sector: u64,
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

/// Seconds with up to 9 decimals ("1554.878835", "0.000123456", with ftrace's trailing ':')
/// to nanoseconds.
fn parse_secs(s: &str) -> Result<u64, String> {
    let s = s.trim_end_matches(':');
    let bad = || format!("time {s:?} is not a number of seconds");
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |x: &str| x.bytes().all(|c| c.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) {
        return Err(bad());
    }
    let frac = &frac[..frac.len().min(9)];
    let mut frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| bad())?
    };
    for _ in frac.len()..9 {
        frac_ns *= 10;
    }
    whole
        .parse::<u64>()
        .ok()
        .and_then(|w| w.checked_mul(1_000_000_000))
        .and_then(|w| w.checked_add(frac_ns))
        .ok_or_else(|| format!("time {s:?} is out of range"))
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
    let Some((maj, min)) = tok[di].split_once(',') else {
        return Err("no MAJ,MIN device field".into());
    };
    let major: u32 = maj
        .parse()
        .map_err(|_| format!("major {maj:?} is too large"))?;
    let minor: u32 = min
        .parse()
        .map_err(|_| format!("minor {min:?} is too large"))?;
    if major >= 1 << 12 || minor >= 1 << 20 {
        return Err(format!("device {maj},{min} is out of range"));
    }
    let dev = tracer_common::dev_join(major, minor);
    let (time_ns, pid, ai, comm_pre) = if di > 0 && tok[di - 1].ends_with(':') {
        // ftrace: "comm-pid [cpu] flags time: dev action ..."
        let task = tok[0];
        let (comm, pid) = task.rsplit_once('-').unwrap_or((task, "0"));
        (
            parse_secs(tok[di - 1])?,
            pid.parse().unwrap_or(0),
            di + 1,
            comm.to_string(),
        )
    } else {
        // blkparse: "dev cpu seq time pid action ..."
        let Some(f) = tok.get(di + 3..di + 5) else {
            return Err("too few fields".into());
        };
        (
            parse_secs(f[0])?,
            f[1].parse()
                .map_err(|_| format!("pid {:?} is not a number", f[1]))?,
            di + 5,
            String::new(),
        )
    };
    let action = tok.get(ai).ok_or("no action")?;
    let Some(a) = action.chars().next().filter(|_| action.len() <= 2) else {
        return Err(format!("action {action:?}"));
    };
    // Only events on a "sector + count" (or a split's "sector / new sector") matter here;
    // the others (insert, plug, unplug, remap, messages) are skipped.
    if !matches!(a, 'Q' | 'G' | 'D' | 'C' | 'M' | 'F' | 'R' | 'X') {
        return Ok(None);
    }
    let rwbs = tok.get(ai + 1).ok_or("no rwbs")?.to_string();
    let sep = tok.get(ai + 3).copied();
    if sep != Some("+") && !(a == 'X' && sep == Some("/")) {
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
                bytes: 0,
                new_sector: 0,
                comm: comm_pre,
                error: 0,
            }));
        }
        return Ok(None);
    }
    let sector: u64 = tok[ai + 2]
        .parse()
        .map_err(|_| format!("sector {:?} is not a number", tok[ai + 2]))?;
    let count = tok.get(ai + 4).ok_or("no sector count")?;
    let (sectors, new_sector) = if a == 'X' {
        let to: u64 = count
            .parse()
            .map_err(|_| format!("split sector {count:?} is not a number"))?;
        (0u32, to)
    } else {
        let n: u32 = count
            .parse()
            .map_err(|_| format!("sector count {count:?} is not a number"))?;
        (n, 0)
    };
    let bytes = sectors
        .checked_mul(512)
        .ok_or_else(|| format!("sector count {sectors} is too large (over 4 GiB)"))?;
    let bracket = tok.get(ai + 5..).map(|r| r.join(" ")).unwrap_or_default();
    let inner = bracket
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let (comm, error) = if matches!(a, 'C' | 'R') {
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
        bytes,
        new_sector,
        comm,
        error,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_msr_time_past_the_wall_clock_is_a_malformed_line() {
        let dir = tempfile::tempdir().unwrap();
        let (input, output) = (dir.path().join("in.csv"), dir.path().join("out.blkprof"));
        // FILETIME 2.2e17 is in the year 2298: past i64 nanoseconds since 1970 (2262), within
        // u64 (2554): refused, not turned into a negative wall clock in the trace header.
        std::fs::write(&input, "220000000000000000,web,0,Read,4096,4096,100\n").unwrap();
        let e = import_msr(&input, &output, false).unwrap_err().to_string();
        assert!(e.contains("before the year 2262"), "{e}");
        // A time before 2262 imports.
        std::fs::write(&input, "128166372000000000,web,0,Read,4096,4096,100\n").unwrap();
        assert_eq!(import_msr(&input, &output, false).unwrap().records, 1);
    }

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
            ('Q', 3_417_048, 697, "kworker/u8:2")
        );
        let e = parse_blk_line("  7,1    0       40     0.001234000     0  C   W 2048 + 1024 [0]")
            .unwrap()
            .unwrap();
        assert_eq!((e.action, e.sectors, e.error), ('C', 1024, 0));
        assert!(parse_blk_line("garbage line, with comma").is_err());
        // Merge, requeue and split lines as the ftrace blk tracer prints them.
        let e = parse_blk_line("fio-27594 [000] d..1. 562.533957:   7,0    M  WS 131080 + 8 [fio]")
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.action, e.sector, e.bytes, e.comm.as_str()),
            ('M', 131_080, 4096, "fio")
        );
        let e =
            parse_blk_line("kworker/0:1H-60 [000] d..1. 9.000001:   7,0    R   W 2048 + 256 [-5]")
                .unwrap()
                .unwrap();
        assert_eq!((e.action, e.sector, e.error), ('R', 2048, -5));
        let e = parse_blk_line("fio-1 [001] d..1. 9.000002:   7,0    X   W 0 / 2560 [fio]")
            .unwrap()
            .unwrap();
        assert_eq!((e.action, e.sector, e.new_sector), ('X', 0, 2560));
        // Events not tied to a sector range are skipped, not errors.
        for l in [
            "fio-1 [000] d..1. 1.0:   7,0    P   N [fio]",
            "fio-1 [000] d..1. 1.0:   7,0    U   N [fio] 1",
            "fio-1 [000] d..1. 1.0:   7,0    I  WS 8 + 8 [fio]",
            "fio-1 [000] d..1. 1.0:   7,0    Q FWS [fio]",
        ] {
            assert!(parse_blk_line(l).unwrap().is_none(), "{l}");
        }
        assert_eq!(parse_secs("1.5"), Ok(1_500_000_000));
        assert_eq!(parse_secs("0.000123456789"), Ok(123_456));
        assert!(parse_secs("18446744074.0").is_err());
        assert!(parse_secs("1.+5").is_err());
        assert_eq!(
            rwbs_op("FWFS"),
            (Op::Write, flags::PREFLUSH | flags::FUA | flags::SYNC)
        );
        assert_eq!(rwbs_op("RA").0, Op::Read);
        assert_eq!(rwbs_op("FN").0, Op::Flush);
        assert_eq!(rwbs_op("DS").0, Op::Discard);
    }
}
