//! The blkprof trace file format, version 2 (version 1 is still read). Specified in `docs/trace-format.md`; this module
//! is the one implementation of it, used by the tracer (writer) and the analyzer (reader).
//!
//! A file is a magic, then frames. Each frame carries a CRC-32 of its payload, so a file cut
//! short (tracer killed, disk full) reads back up to its last whole frame, and corruption is
//! detected and located rather than silently decoded.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::op::{Op, StatGroup, flags};

pub const MAGIC: &[u8; 8] = b"BLKPTRC\0";
pub const FORMAT_VERSION: u16 = 2;
/// The oldest version this build still reads (records as zstd-compressed varints).
pub const OLDEST_READABLE_VERSION: u16 = 1;
/// Largest frame payload a reader accepts (guards against a corrupt length).
pub const MAX_FRAME_BYTES: u32 = 256 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    Header = 1,
    Records = 2,
    Device = 3,
    Stats = 4,
    Trailer = 5,
}

impl FrameKind {
    fn from_u8(v: u8) -> Option<FrameKind> {
        Some(match v {
            1 => FrameKind::Header,
            2 => FrameKind::Records,
            3 => FrameKind::Device,
            4 => FrameKind::Stats,
            5 => FrameKind::Trailer,
            _ => return None,
        })
    }
}

/// One traced block device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    pub logical_block_size: u32,
}

impl DeviceInfo {
    pub fn dev(&self) -> u32 {
        crate::dev_join(self.major, self.minor)
    }
}

/// The user's filters, as given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    pub devices: Vec<String>,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub ops: Vec<String>,
}

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

/// Exact in-kernel aggregate of one (device, op), as snapshotted by the tracer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateSnapshot {
    pub major: u32,
    pub minor: u32,
    pub op: Option<Op>,
    /// The block layer's own flush request.
    pub flush_rq: bool,
    /// Requests the kernel did not account in /proc/diskstats (queue/iostats off, or
    /// passthrough); absent in files of tracers before it.
    #[serde(default)]
    pub not_accounted: bool,
    pub ios: u64,
    pub bytes: u64,
    pub total_ns_sum: u64,
    pub size_log2: Vec<u64>,
    pub device_latency_log2: Vec<u64>,
    pub total_latency_log2: Vec<u64>,
}

impl AggregateSnapshot {
    /// Two sets of aggregates added key by key (device, op, flush request, accounted), sorted.
    pub fn sum(a: &[AggregateSnapshot], b: &[AggregateSnapshot]) -> Vec<AggregateSnapshot> {
        let add = |x: &mut Vec<u64>, y: &[u64]| {
            if x.len() < y.len() {
                x.resize(y.len(), 0);
            }
            for (x, y) in x.iter_mut().zip(y) {
                *x = x.saturating_add(*y);
            }
        };
        let mut out: Vec<AggregateSnapshot> = a.to_vec();
        for s in b {
            match out.iter_mut().find(|o| {
                (o.major, o.minor, o.op, o.flush_rq, o.not_accounted)
                    == (s.major, s.minor, s.op, s.flush_rq, s.not_accounted)
            }) {
                Some(o) => {
                    o.ios = o.ios.saturating_add(s.ios);
                    o.bytes = o.bytes.saturating_add(s.bytes);
                    o.total_ns_sum = o.total_ns_sum.saturating_add(s.total_ns_sum);
                    add(&mut o.size_log2, &s.size_log2);
                    add(&mut o.device_latency_log2, &s.device_latency_log2);
                    add(&mut o.total_latency_log2, &s.total_latency_log2);
                }
                None => out.push(s.clone()),
            }
        }
        out.sort_by_key(|a| (a.major, a.minor, a.op, a.flush_rq, a.not_accounted));
        out
    }

    pub fn group(&self) -> StatGroup {
        StatGroup::of(
            self.op.unwrap_or(Op::Other),
            if self.flush_rq { flags::FLUSH_RQ } else { 0 },
        )
    }
}

/// Per-program kernel statistics (`bpf_prog_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramStats {
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// Runs the kernel skipped (BPF recursion protection): IOs possibly missed.
    pub recursion_misses: u64,
}

/// The probe's loss and health counters (cumulative since attach).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCounters {
    /// Records lost because the ring buffer was full (aggregates still counted them).
    pub ring_drops: u64,
    /// Requests not tracked because the in-kernel request map was full.
    pub request_map_full: u64,
    /// Completions of requests submitted before the tracer attached.
    pub started_before_attach: u64,
    pub aggregate_map_full: u64,
    pub records_written: u64,
    /// Requests whose completion the probe's programs never saw (detected when the kernel
    /// reused the request): IOs the kernel counted that the trace cannot have.
    #[serde(default)]
    pub missed_completions: u64,
    /// Of `missed_completions`, how far the probe had seen the request go before it was reused:
    /// (seen completing but not closed: a partial completion or a flush sequence's data part,
    /// issued to the device, never issued). A diagnostic for the cause.
    #[serde(default)]
    pub missed_stage: [u64; 3],
    pub programs: Vec<ProgramStats>,
}

impl ProbeCounters {
    pub fn recursion_misses(&self) -> u64 {
        self.programs
            .iter()
            .map(|p| p.recursion_misses)
            .fold(0, u64::saturating_add)
    }

    /// Every IO the probe knows it may have missed in its exact aggregates: program runs the
    /// kernel skipped, completions never seen, requests it could not track, and completions
    /// whose aggregate it could not create (their records exist).
    pub fn reported_misses(&self) -> u64 {
        self.recursion_misses()
            .saturating_add(self.missed_completions)
            .saturating_add(self.request_map_full)
            .saturating_add(self.aggregate_map_full)
    }
}

/// The first frame: describes the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    pub format_version: u16,
    pub tracer_version: String,
    pub host: String,
    pub kernel: String,
    /// Wall-clock time (Unix epoch, ns) at `monotonic_base_ns`.
    pub wall_clock_start_ns: i64,
    /// CLOCK_MONOTONIC at the start; all record times are on this clock.
    pub monotonic_base_ns: u64,
    pub devices: Vec<DeviceInfo>,
    pub filters: Filters,
    pub interval_ms: u64,
    pub ring_bytes: u64,
    /// Position of this file in a rotated series (0 for the first or only file).
    pub sequence: u32,
    pub diskstats_start: Vec<DiskStats>,
    pub aggregates_start: Vec<AggregateSnapshot>,
    pub counters_start: ProbeCounters,
    /// The host's offset from UTC at `wall_clock_start_ns`, in seconds east of UTC: the
    /// analyzer reads the host's local-time logs with it. 0 (UTC) in older traces.
    #[serde(default)]
    pub utc_offset_s: i32,
    /// The host's IANA time zone name ("Europe/Berlin") when known, else "".
    #[serde(default)]
    pub time_zone: String,
}

/// Periodic counters, so a file cut short still knows its losses up to its last frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsFrame {
    pub at_ns: u64,
    pub counters: ProbeCounters,
    pub records_in_file: u64,
    pub filtered_out: u64,
}

/// The last frame: how the run ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceTrailer {
    pub wall_clock_end_ns: i64,
    pub monotonic_end_ns: u64,
    /// "duration", "signal", "rotation", "disk-full", "error".
    pub reason: String,
    pub diskstats_end: Vec<DiskStats>,
    pub aggregates_end: Vec<AggregateSnapshot>,
    pub counters_end: ProbeCounters,
    /// Records stored in this file.
    pub records_in_file: u64,
    /// Records received but not stored because of --pid/--comm/--op filters.
    pub filtered_out: u64,
    /// How the run was cut at its start and end (the first and the last file of a run; absent
    /// in files of older tracers, and at rotation boundaries).
    #[serde(default)]
    pub start_cut: Option<Cut>,
    #[serde(default)]
    pub end_cut: Option<Cut>,
}

/// One end of a run, cut at a CLOCK_MONOTONIC instant `at_ns` that the tracer wrote to its
/// probe ahead of time: the run holds exactly the IOs completing after the start's instant and
/// by the end's, in its records and in its exact aggregates. /proc/diskstats is read just
/// after each instant, so the kernel's counters also include the IOs that completed between
/// the instant and the read; those are tallied here from the records, per device and group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cut {
    pub at_ns: u64,
    /// When /proc/diskstats was read (its read began and ended; the kernel sums its per-CPU
    /// counters somewhere in between).
    pub read_from_ns: u64,
    pub read_to_ns: u64,
    pub devices: Vec<CutDevice>,
    /// End only: IOs in flight at the instant that completed after it (within a grace period):
    /// not part of the run.
    pub in_flight: u64,
    /// End only: IOs in flight at the instant that had not completed a grace period later:
    /// missed completions (or IOs slower than the grace period), counted by stage in
    /// `counters_end.missed_completions` and `missed_stage`.
    pub never_completed: u64,
}

/// IOs of one device that completed between a cut's instant and the diskstats read, and during
/// the read, as (ios, bytes) per diskstats group (read, write, discard, flush).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CutDevice {
    pub major: u32,
    pub minor: u32,
    pub before_read: [(u64, u64); 4],
    pub during_read: [(u64, u64); 4],
}

impl Cut {
    /// Tally an IO that completed after the instant, if it did so before the read ended.
    pub fn tally(&mut self, dev: u32, group: usize, bytes: u64, complete_ns: u64) {
        if complete_ns <= self.at_ns || complete_ns > self.read_to_ns {
            return;
        }
        let (major, minor) = crate::dev_split(dev);
        let i = match self
            .devices
            .iter()
            .position(|d| d.major == major && d.minor == minor)
        {
            Some(i) => i,
            None => {
                self.devices.push(CutDevice {
                    major,
                    minor,
                    ..CutDevice::default()
                });
                self.devices.len() - 1
            }
        };
        let d = &mut self.devices[i];
        let slot = if complete_ns < self.read_from_ns {
            &mut d.before_read[group]
        } else {
            &mut d.during_read[group]
        };
        slot.0 += 1;
        slot.1 += bytes;
    }

    /// (before_read, during_read) of one device and group.
    pub fn of(&self, major: u32, minor: u32, group: usize) -> ((u64, u64), (u64, u64)) {
        self.devices
            .iter()
            .find(|d| d.major == major && d.minor == minor)
            .map_or(((0, 0), (0, 0)), |d| {
                (d.before_read[group], d.during_read[group])
            })
    }
}

/// One IO as stored in (and decoded from) a trace file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoRecord {
    /// CLOCK_MONOTONIC ns at completion.
    pub complete_ns: u64,
    /// When it entered the OS queue.
    pub enter_ns: u64,
    /// When it was issued to the device; 0 if never issued.
    pub issue_ns: u64,
    /// First sector (512-byte units).
    pub sector: u64,
    pub bytes: u32,
    /// Submitting process; with `task` naming its comm.
    pub pid: u32,
    /// Index into the reader's task table ([`TraceReader::tasks`]); ignored by the writer.
    pub task: u32,
    pub dev_inflight: u32,
    pub os_inflight: u32,
    pub error: i32,
    /// major << 20 | minor.
    pub dev: u32,
    pub requeues: u16,
    /// [`flags`] bits.
    pub flags: u16,
    pub op: Op,
}

impl IoRecord {
    pub fn total_ns(&self) -> u64 {
        self.complete_ns.saturating_sub(self.enter_ns)
    }
    pub fn device_ns(&self) -> u64 {
        if self.issue_ns == 0 {
            0
        } else {
            self.complete_ns.saturating_sub(self.issue_ns)
        }
    }
    pub fn stat_group(&self) -> StatGroup {
        StatGroup::of(self.op, self.flags)
    }
}

/// A (pid, comm) pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    pub pid: u32,
    pub comm: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: not a blkprof trace file (bad magic)")]
    NotATrace { path: PathBuf },
    #[error(
        "{path}: trace format version {found} is not supported (this build reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}); use a newer blkprof"
    )]
    UnknownVersion { path: PathBuf, found: u16 },
    #[error("{path}: corrupt frame {frame} at byte {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        frame: u64,
        offset: u64,
        reason: String,
    },
    #[error("{path}: the file does not start with a header frame")]
    NoHeader { path: PathBuf },
}

// ---------------------------------------------------------------- varints

#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Bytes of a size code: sectors << 1, or bytes << 1 | 1 when not a whole number of sectors;
/// `None` for a size no u32 holds (only a damaged file has one).
#[inline]
fn size_of_code(code: u64) -> Option<u32> {
    let bytes = if code & 1 == 0 {
        (code >> 1).checked_mul(512)?
    } else {
        code >> 1
    };
    u32::try_from(bytes).ok()
}

/// The error and requeue count a record's flags say follow, read from `c` (both versions
/// store them as varints in this order).
#[inline]
fn read_extras(fl: u16, c: &mut Cursor) -> Option<(i32, u16)> {
    let error = if fl & flags::HAS_ERROR != 0 {
        unzigzag(c.varint()?) as i32
    } else {
        0
    };
    let requeues = if fl & flags::REQUEUED != 0 {
        c.varint()? as u16
    } else {
        0
    };
    Some((error, requeues))
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn varint(&mut self) -> Option<u64> {
        // Fast paths: most fields fit in one or two bytes.
        if let Some(&[b0, b1]) = self
            .buf
            .get(self.pos..self.pos + 2)
            .map(|s| <&[u8; 2]>::try_from(s).expect("2 bytes"))
        {
            if b0 < 0x80 {
                self.pos += 1;
                return Some(u64::from(b0));
            }
            if b1 < 0x80 {
                self.pos += 2;
                return Some(u64::from(b0 & 0x7f) | (u64::from(b1) << 7));
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
}

// ---------------------------------------------------------------- bit packing

/// Append one block of a column: its minimum (zigzag varint; for a signed column the minimum
/// as i64), the bit width of (value - minimum), then every (value - minimum) in that many bits,
/// least significant bit first, padded to a whole byte.
fn pack_block(out: &mut Vec<u8>, vals: &[u64], signed: bool) {
    let (min, range) = if signed {
        let (lo, hi) = vals.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &v| {
            (lo.min(v as i64), hi.max(v as i64))
        });
        (lo as u64, (hi as u64).wrapping_sub(lo as u64))
    } else {
        let (lo, hi) = vals
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        (lo, hi.wrapping_sub(lo))
    };
    let (min, range) = if vals.is_empty() {
        (0, 0)
    } else {
        (min, range)
    };
    let bw = 64 - range.leading_zeros();
    put_varint(out, zigzag(min as i64));
    out.push(bw as u8);
    if bw == 0 {
        return;
    }
    // Whole 64-bit words while they fill, then the last bits rounded up to a byte.
    out.reserve((vals.len() * bw as usize).div_ceil(8) + 8);
    let mut acc = 0u128;
    let mut nb = 0u32;
    for &v in vals {
        acc |= u128::from(v.wrapping_sub(min)) << nb;
        nb += bw;
        if nb >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            nb -= 64;
        }
    }
    out.extend_from_slice(&acc.to_le_bytes()[..nb.div_ceil(8) as usize]);
}

/// Bytes a block's column can take: 128 values of 64 bits.
const MAX_PACKED: usize = BLOCK_RECORDS * 8;

/// Unpack `out.len()` (at most [`BLOCK_RECORDS`]) values of `bw` bits from `packed`, adding
/// `min`. The bytes are first copied into a zero-padded block so that every load is in bounds
/// without a check per value.
#[inline]
fn unpack_block(
    packed: &[u8],
    bw: u32,
    min: u64,
    out: &mut [u64],
    scratch: &mut [u8; MAX_PACKED + 16],
) {
    if bw == 0 {
        out.fill(min);
        return;
    }
    let n = packed.len().min(MAX_PACKED);
    scratch[..n].copy_from_slice(&packed[..n]);
    scratch[n..n + 16].fill(0);
    let bw = bw as usize;
    if bw <= 56 {
        let mask = (1u64 << bw) - 1;
        for (i, o) in out.iter_mut().enumerate() {
            let bit = i * bw;
            let at = (bit >> 3) & (MAX_PACKED - 1);
            let w = u64::from_le_bytes(scratch[at..at + 8].try_into().expect("8 bytes"));
            *o = min.wrapping_add((w >> (bit & 7)) & mask);
        }
    } else {
        let mask = if bw == 64 {
            u128::from(u64::MAX)
        } else {
            (1u128 << bw) - 1
        };
        for (i, o) in out.iter_mut().enumerate() {
            let bit = i * bw;
            let at = (bit >> 3) & (MAX_PACKED - 1);
            let w = u128::from_le_bytes(scratch[at..at + 16].try_into().expect("16 bytes"));
            *o = min.wrapping_add(((w >> (bit & 7)) & mask) as u64);
        }
    }
}

// ---------------------------------------------------------------- writer

/// Records per chunk before it is written: 8192 records decode into about 600 KB, which stays
/// in a core's L2 cache while the analyzer works through them.
pub const DEFAULT_CHUNK_RECORDS: usize = 8192;

/// Records per bit-packed block of a version 2 chunk.
pub const BLOCK_RECORDS: usize = 128;

/// Columns of a version 2 chunk, in the order each block stores them.
const NCOLS: usize = 10;
const COL_HEAD: usize = 0;
const COL_COMPLETE: usize = 1;
const COL_DEVICE_NS: usize = 2;
const COL_QUEUE_NS: usize = 3;
const COL_DEV: usize = 4;
const COL_SECTOR: usize = 5;
const COL_SIZE: usize = 6;
const COL_TASK: usize = 7;
const COL_DEV_INFLIGHT: usize = 8;
const COL_OS_INFLIGHT: usize = 9;
/// Columns holding signed deltas: their block minimum is taken as i64.
const SIGNED: [bool; NCOLS] = [
    false, true, false, false, false, true, false, false, false, false,
];

/// Streams a trace file. Frames are written whole; call [`TraceWriter::flush_chunk`] to bound
/// what a SIGKILL can lose.
pub struct TraceWriter {
    path: PathBuf,
    out: BufWriter<File>,
    /// The current chunk, one vector per column (see [`NCOLS`]).
    cols: [Vec<u64>; NCOLS],
    /// Error and requeue values of the current chunk, varints in record order.
    extras: Vec<u8>,
    count: u32,
    base_ns: u64,
    prev_complete: u64,
    prev_end_sector: u64,
    devs: Vec<u32>,
    dev_index: HashMap<u32, u32>,
    tasks: Vec<(u32, [u8; 16])>,
    task_index: HashMap<(u32, [u8; 16]), u32>,
    /// Consecutive records mostly share device and task: skip the hash lookups then.
    last_dev: Option<(u32, u32)>,
    last_task: Option<((u32, [u8; 16]), u32)>,
    body: Vec<u8>,
    records_in_file: u64,
    bytes_written: u64,
}

impl TraceWriter {
    pub fn create(path: &Path, header: &TraceHeader) -> Result<TraceWriter, FormatError> {
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::create(path).map_err(io_err)?;
        let mut w = TraceWriter {
            path: path.to_owned(),
            out: BufWriter::with_capacity(1 << 20, file),
            cols: std::array::from_fn(|_| Vec::with_capacity(DEFAULT_CHUNK_RECORDS)),
            extras: Vec::new(),
            count: 0,
            base_ns: 0,
            prev_complete: 0,
            prev_end_sector: 0,
            devs: Vec::new(),
            dev_index: HashMap::new(),
            tasks: Vec::new(),
            task_index: HashMap::new(),
            last_dev: None,
            last_task: None,
            body: Vec::with_capacity(1 << 20),
            records_in_file: 0,
            bytes_written: 0,
        };
        let mut start = Vec::with_capacity(12);
        start.extend_from_slice(MAGIC);
        start.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        start.extend_from_slice(&0u16.to_le_bytes());
        w.out.write_all(&start).map_err(io_err)?;
        w.bytes_written += start.len() as u64;
        let mut header = header.clone();
        header.format_version = FORMAT_VERSION;
        w.write_json(FrameKind::Header, &header)?;
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written to the file so far (frames flushed to the OS or buffered).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    pub fn records_in_file(&self) -> u64 {
        self.records_in_file
    }

    /// Records buffered in the current chunk.
    pub fn pending(&self) -> u32 {
        self.count
    }

    fn io_err(&self, source: io::Error) -> FormatError {
        FormatError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn write_frame(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), FormatError> {
        let len = u32::try_from(payload.len()).map_err(|_| {
            self.io_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame larger than 4 GiB",
            ))
        })?;
        let mut head = [0u8; 12];
        head[0] = kind as u8;
        head[4..8].copy_from_slice(&len.to_le_bytes());
        head[8..12].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        let r = self
            .out
            .write_all(&head)
            .and_then(|()| self.out.write_all(payload));
        r.map_err(|e| self.io_err(e))?;
        self.bytes_written += 12 + payload.len() as u64;
        Ok(())
    }

    fn write_json<T: Serialize>(&mut self, kind: FrameKind, v: &T) -> Result<(), FormatError> {
        let json = serde_json::to_vec(v).map_err(|e| self.io_err(io::Error::other(e)))?;
        self.write_frame(kind, &json)
    }

    /// Append one IO. `comm` is the submitting task's NUL-padded command.
    pub fn push(&mut self, r: &IoRecord, comm: &[u8; 16]) -> Result<(), FormatError> {
        if self.count == 0 {
            self.base_ns = r.complete_ns;
            self.prev_complete = r.complete_ns;
            self.prev_end_sector = 0;
        }
        let dev_idx = match self.last_dev {
            Some((d, i)) if d == r.dev => i,
            _ => {
                let i = match self.dev_index.get(&r.dev) {
                    Some(&i) => i,
                    None => {
                        let i = self.devs.len() as u32;
                        self.devs.push(r.dev);
                        self.dev_index.insert(r.dev, i);
                        i
                    }
                };
                self.last_dev = Some((r.dev, i));
                i
            }
        };
        let task_key = (r.pid, *comm);
        let task_idx = match self.last_task {
            Some((k, i)) if k == task_key => i,
            _ => {
                let i = match self.task_index.get(&task_key) {
                    Some(&i) => i,
                    None => {
                        let i = self.tasks.len() as u32;
                        self.tasks.push(task_key);
                        self.task_index.insert(task_key, i);
                        i
                    }
                };
                self.last_task = Some((task_key, i));
                i
            }
        };
        let mut fl = r.flags & !(flags::HAS_ERROR | flags::REQUEUED);
        if r.error != 0 {
            fl |= flags::HAS_ERROR;
        }
        if r.requeues != 0 {
            fl |= flags::REQUEUED;
        }
        if r.issue_ns == 0 {
            fl |= flags::NEVER_ISSUED;
        }
        let (device_ns, queue_ns) = if fl & flags::NEVER_ISSUED == 0 {
            (
                r.complete_ns.saturating_sub(r.issue_ns),
                r.issue_ns.saturating_sub(r.enter_ns),
            )
        } else {
            (r.complete_ns.saturating_sub(r.enter_ns), 0)
        };
        let size = if r.bytes.is_multiple_of(512) {
            u64::from(r.bytes / 512) << 1
        } else {
            (u64::from(r.bytes) << 1) | 1
        };
        let row = [
            u64::from(r.op as u8) | (u64::from(fl) << 4),
            r.complete_ns.wrapping_sub(self.prev_complete),
            device_ns,
            queue_ns,
            u64::from(dev_idx),
            r.sector.wrapping_sub(self.prev_end_sector),
            size,
            u64::from(task_idx),
            u64::from(r.dev_inflight),
            u64::from(r.os_inflight),
        ];
        for (col, v) in self.cols.iter_mut().zip(row) {
            col.push(v);
        }
        if fl & flags::HAS_ERROR != 0 {
            put_varint(&mut self.extras, zigzag(i64::from(r.error)));
        }
        if fl & flags::REQUEUED != 0 {
            put_varint(&mut self.extras, u64::from(r.requeues));
        }
        self.prev_complete = r.complete_ns;
        self.prev_end_sector = r.sector.wrapping_add(u64::from(r.bytes / 512));
        self.count += 1;
        self.records_in_file += 1;
        if self.count as usize >= DEFAULT_CHUNK_RECORDS {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Compress and write the buffered records as one frame, and hand it to the OS.
    pub fn flush_chunk(&mut self) -> Result<(), FormatError> {
        if self.count > 0 {
            let mut body = std::mem::take(&mut self.body);
            body.clear();
            body.extend_from_slice(&self.count.to_le_bytes());
            body.extend_from_slice(&self.base_ns.to_le_bytes());
            put_varint(&mut body, self.devs.len() as u64);
            for &d in &self.devs {
                put_varint(&mut body, u64::from(d));
            }
            put_varint(&mut body, self.tasks.len() as u64);
            for (pid, comm) in &self.tasks {
                put_varint(&mut body, u64::from(*pid));
                let n = comm.iter().position(|&c| c == 0).unwrap_or(16);
                body.push(n as u8);
                body.extend_from_slice(&comm[..n]);
            }
            put_varint(&mut body, self.extras.len() as u64);
            body.extend_from_slice(&self.extras);
            let n = self.count as usize;
            for start in (0..n).step_by(BLOCK_RECORDS) {
                let end = (start + BLOCK_RECORDS).min(n);
                for (c, col) in self.cols.iter().enumerate() {
                    pack_block(&mut body, &col[start..end], SIGNED[c]);
                }
            }
            self.write_frame(FrameKind::Records, &body)?;
            self.body = body;
            for col in &mut self.cols {
                col.clear();
            }
            self.extras.clear();
            self.count = 0;
            self.devs.clear();
            self.dev_index.clear();
            self.tasks.clear();
            self.task_index.clear();
            self.last_dev = None;
            self.last_task = None;
        }
        self.out.flush().map_err(|e| self.io_err(e))
    }

    pub fn write_device(&mut self, dev: &DeviceInfo) -> Result<(), FormatError> {
        self.write_json(FrameKind::Device, dev)
    }

    pub fn write_stats(&mut self, stats: &StatsFrame) -> Result<(), FormatError> {
        self.flush_chunk()?;
        self.write_json(FrameKind::Stats, stats)?;
        self.out.flush().map_err(|e| self.io_err(e))
    }

    /// Write the trailer and close the file (fsync).
    pub fn finish(mut self, trailer: &TraceTrailer) -> Result<u64, FormatError> {
        self.flush_chunk()?;
        self.write_json(FrameKind::Trailer, trailer)?;
        self.out.flush().map_err(|e| self.io_err(e))?;
        self.out.get_ref().sync_all().map_err(|e| self.io_err(e))?;
        Ok(self.bytes_written)
    }
}

// ---------------------------------------------------------------- reader

/// How the file ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Not read to the end yet.
    Unread,
    /// A trailer frame: the run ended cleanly.
    Complete,
    /// The file stops without a trailer after its last whole frame (tracer killed, disk full,
    /// or still running): everything before is intact.
    Truncated {
        intact_bytes: u64,
        trailing_bytes: u64,
    },
    /// A frame failed its checksum or could not be decoded; frames before it are intact.
    Corrupt {
        frame: u64,
        offset: u64,
        reason: String,
    },
}

/// What a quick pass over the frame heads finds before the records are read: the run's end
/// (trailer, or the last stats frame of a file cut short) and the devices announced, so that
/// a reader can check every record's time against the run's window.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    pub trailer: Option<TraceTrailer>,
    pub last_stats: Option<StatsFrame>,
    /// Devices of the header and of device frames.
    pub devices: Vec<DeviceInfo>,
}

/// The tables at the start of a records body.
struct ChunkTables {
    count: u32,
    base: u64,
    devs: Vec<u32>,
    /// (reader's task id, pid) per entry of the chunk's task table.
    tasks: Vec<(u32, u32)>,
}

/// Streams a trace file chunk by chunk; memory use is one chunk.
pub struct TraceReader {
    path: PathBuf,
    input: BufReader<File>,
    offset: u64,
    frame_no: u64,
    header: TraceHeader,
    devices: Vec<DeviceInfo>,
    trailer: Option<TraceTrailer>,
    last_stats: Option<StatsFrame>,
    tasks: Vec<Task>,
    task_ids: HashMap<(u32, Vec<u8>), u32>,
    ending: Ending,
    payload: Vec<u8>,
    raw: Vec<u8>,
    decompressor: zstd::bulk::Decompressor<'static>,
    version: u16,
    records_read: u64,
    file_len: u64,
    skipped_frames: u64,
    /// Where the first frame after the header starts.
    body_start: u64,
}

enum Frame {
    Eof,
    Partial,
    Whole(FrameKind),
    /// A whole frame of a kind this build does not know, with a valid checksum: written by a
    /// newer tracer (new frame kinds need no version change), skipped.
    Unknown,
}

impl TraceReader {
    pub fn open(path: &Path) -> Result<TraceReader, FormatError> {
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let file_len = file.metadata().map_err(io_err)?.len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut start = [0u8; 12];
        if let Err(e) = input.read_exact(&mut start) {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                return Err(FormatError::NotATrace {
                    path: path.to_owned(),
                });
            }
            return Err(io_err(e));
        }
        if &start[..8] != MAGIC {
            return Err(FormatError::NotATrace {
                path: path.to_owned(),
            });
        }
        let version = u16::from_le_bytes([start[8], start[9]]);
        if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(FormatError::UnknownVersion {
                path: path.to_owned(),
                found: version,
            });
        }
        let mut r = TraceReader {
            path: path.to_owned(),
            input,
            offset: 12,
            frame_no: 0,
            header: TraceHeader::default(),
            devices: Vec::new(),
            trailer: None,
            last_stats: None,
            tasks: Vec::new(),
            task_ids: HashMap::new(),
            ending: Ending::Unread,
            payload: Vec::new(),
            raw: Vec::new(),
            decompressor: zstd::bulk::Decompressor::new().map_err(io_err)?,
            version,
            records_read: 0,
            file_len,
            skipped_frames: 0,
            body_start: 0,
        };
        match r.next_frame()? {
            Frame::Whole(FrameKind::Header) => {
                r.header = r.parse_json()?;
                r.offset += 12 + r.payload.len() as u64;
                r.frame_no += 1;
                r.devices = r.header.devices.clone();
                r.body_start = r.offset;
            }
            _ => {
                return Err(FormatError::NoHeader {
                    path: path.to_owned(),
                });
            }
        }
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }
    /// Devices from the header and from device frames read so far.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }
    pub fn trailer(&self) -> Option<&TraceTrailer> {
        self.trailer.as_ref()
    }
    /// The last periodic stats frame read (losses up to that point).
    pub fn last_stats(&self) -> Option<&StatsFrame> {
        self.last_stats.as_ref()
    }
    pub fn ending(&self) -> &Ending {
        &self.ending
    }
    /// Where the next frame starts: (byte offset, frame number), for [`TraceReader::seek`].
    pub fn position(&self) -> (u64, u64) {
        (self.offset, self.frame_no)
    }

    /// Continue reading at a position returned by [`TraceReader::position`] on this file (to
    /// revisit chunks). Records read after a seek keep task ids of the task table built so far.
    pub fn seek(&mut self, pos: (u64, u64)) -> Result<(), FormatError> {
        use std::io::Seek as _;
        self.input
            .seek(io::SeekFrom::Start(pos.0))
            .map_err(|e| FormatError::Io {
                path: self.path.clone(),
                source: e,
            })?;
        self.offset = pos.0;
        self.frame_no = pos.1;
        self.ending = Ending::Unread;
        Ok(())
    }

    /// Walk the frame heads from the first frame after the header to the first one that is cut
    /// short, implausible or (for the small JSON frames it reads) corrupt, reading only the
    /// trailer, stats and device frames: a few syscalls per records frame. The reading
    /// position is unchanged.
    pub fn scan(&self) -> Result<Scan, FormatError> {
        use std::os::unix::fs::FileExt as _;
        let file = self.input.get_ref();
        let mut scan = Scan {
            devices: self.header.devices.clone(),
            ..Scan::default()
        };
        let mut off = self.body_start;
        let mut payload = Vec::new();
        loop {
            let mut head = [0u8; 12];
            match file.read_exact_at(&mut head, off) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => {
                    return Err(FormatError::Io {
                        path: self.path.clone(),
                        source: e,
                    });
                }
            }
            let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
            let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
            let end = off + 12 + u64::from(len);
            if len > MAX_FRAME_BYTES || end > self.file_len {
                break;
            }
            let kind = FrameKind::from_u8(head[0]);
            if matches!(
                kind,
                Some(FrameKind::Stats | FrameKind::Trailer | FrameKind::Device)
            ) {
                payload.resize(len as usize, 0);
                if file.read_exact_at(&mut payload, off + 12).is_err()
                    || crc32fast::hash(&payload) != crc
                {
                    break;
                }
                let ok = match kind {
                    Some(FrameKind::Stats) => serde_json::from_slice(&payload)
                        .map(|st| scan.last_stats = Some(st))
                        .is_ok(),
                    Some(FrameKind::Trailer) => serde_json::from_slice(&payload)
                        .map(|t| scan.trailer = Some(t))
                        .is_ok(),
                    _ => serde_json::from_slice::<DeviceInfo>(&payload)
                        .map(|d| {
                            if !scan.devices.iter().any(|x| x.dev() == d.dev()) {
                                scan.devices.push(d);
                            }
                        })
                        .is_ok(),
                };
                if !ok {
                    break;
                }
            }
            off = end;
        }
        Ok(scan)
    }

    /// Whole frames of kinds this build does not know (from a newer tracer), skipped.
    pub fn skipped_frames(&self) -> u64 {
        self.skipped_frames
    }

    pub fn records_read(&self) -> u64 {
        self.records_read
    }
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    fn corrupt(&self, reason: impl Into<String>) -> FormatError {
        FormatError::Corrupt {
            path: self.path.clone(),
            frame: self.frame_no,
            offset: self.offset,
            reason: reason.into(),
        }
    }

    fn parse_json<T: for<'de> Deserialize<'de>>(&self) -> Result<T, FormatError> {
        serde_json::from_slice(&self.payload).map_err(|e| self.corrupt(format!("bad JSON: {e}")))
    }

    fn next_frame(&mut self) -> Result<Frame, FormatError> {
        let mut head = [0u8; 12];
        let mut got = 0;
        while got < head.len() {
            match self.input.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(FormatError::Io {
                        path: self.path.clone(),
                        source: e,
                    });
                }
            }
        }
        if got == 0 {
            return Ok(Frame::Eof);
        }
        if got < head.len() {
            return Ok(Frame::Partial);
        }
        let kind = FrameKind::from_u8(head[0]);
        let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if len > MAX_FRAME_BYTES {
            return Err(self.corrupt(format!("frame length {len} is implausible")));
        }
        if self.offset + 12 + u64::from(len) > self.file_len {
            return Ok(Frame::Partial);
        }
        self.payload.resize(len as usize, 0);
        self.input
            .read_exact(&mut self.payload)
            .map_err(|e| FormatError::Io {
                path: self.path.clone(),
                source: e,
            })?;
        if crc32fast::hash(&self.payload) != crc {
            return Err(self.corrupt(match kind {
                Some(_) => "checksum mismatch".to_string(),
                None => format!("unknown frame kind {} and checksum mismatch", head[0]),
            }));
        }
        Ok(kind.map_or(Frame::Unknown, Frame::Whole))
    }

    /// Decode the next records frame into `out` (cleared first). Returns false at the end of
    /// the file; then [`TraceReader::ending`] says whether it ended cleanly. A corrupt frame
    /// ends reading too (as [`Ending::Corrupt`]); the records before it stay valid.
    pub fn next_chunk(&mut self, out: &mut Vec<IoRecord>) -> Result<bool, FormatError> {
        out.clear();
        loop {
            let frame = match self.next_frame() {
                Ok(f) => f,
                Err(FormatError::Corrupt {
                    frame,
                    offset,
                    reason,
                    ..
                }) => {
                    self.ending = Ending::Corrupt {
                        frame,
                        offset,
                        reason,
                    };
                    return Ok(false);
                }
                Err(e) => return Err(e),
            };
            let start = self.offset;
            match frame {
                Frame::Eof | Frame::Partial => {
                    if self.trailer.is_some() {
                        self.ending = Ending::Complete;
                    } else {
                        self.ending = Ending::Truncated {
                            intact_bytes: start,
                            trailing_bytes: self.file_len.saturating_sub(start),
                        };
                    }
                    return Ok(false);
                }
                Frame::Unknown => {
                    self.offset += 12 + self.payload.len() as u64;
                    self.frame_no += 1;
                    self.skipped_frames += 1;
                }
                Frame::Whole(kind) => {
                    self.offset += 12 + self.payload.len() as u64;
                    self.frame_no += 1;
                    let res = match kind {
                        FrameKind::Records => self.decode_records(out).map(|()| true),
                        FrameKind::Device => self.parse_json::<DeviceInfo>().map(|d| {
                            if !self.devices.iter().any(|x| x.dev() == d.dev()) {
                                self.devices.push(d);
                            }
                            false
                        }),
                        FrameKind::Stats => self.parse_json::<StatsFrame>().map(|s| {
                            self.last_stats = Some(s);
                            false
                        }),
                        FrameKind::Trailer => self.parse_json::<TraceTrailer>().map(|t| {
                            self.trailer = Some(t);
                            false
                        }),
                        FrameKind::Header => Err(self.corrupt("a second header frame")),
                    };
                    match res {
                        Ok(true) => return Ok(true),
                        Ok(false) => {}
                        Err(FormatError::Corrupt {
                            frame,
                            offset,
                            reason,
                            ..
                        }) => {
                            out.clear();
                            self.ending = Ending::Corrupt {
                                frame,
                                offset,
                                reason,
                            };
                            return Ok(false);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    fn decode_records(&mut self, out: &mut Vec<IoRecord>) -> Result<(), FormatError> {
        if self.version >= 2 {
            let payload = std::mem::take(&mut self.payload);
            let res = self.decode_v2(&payload, out);
            self.payload = payload;
            return res;
        }
        if self.payload.len() < 4 {
            return Err(self.corrupt("records frame too short"));
        }
        let raw_len = u32::from_le_bytes(self.payload[..4].try_into().expect("4 bytes")) as usize;
        if raw_len > MAX_FRAME_BYTES as usize {
            return Err(self.corrupt("implausible decompressed size"));
        }
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        raw.reserve(raw_len);
        let res = self
            .decompressor
            .decompress_to_buffer(&self.payload[4..], &mut raw);
        let res = match res {
            Ok(n) if n == raw_len => self.decode_raw(&raw, out),
            Ok(n) => Err(self.corrupt(format!("decompressed {n} bytes, header says {raw_len}"))),
            Err(e) => Err(self.corrupt(format!("zstd: {e}"))),
        };
        self.raw = raw;
        res
    }

    /// The start of a records body, common to versions 1 and 2: count, base time, the device
    /// table and the task table (tasks mapped to this reader's task ids).
    fn read_tables(&mut self, c: &mut Cursor) -> Result<ChunkTables, FormatError> {
        let bad = |what: &str| format!("records frame: {what}");
        let count = c
            .bytes(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
            .ok_or_else(|| self.corrupt(bad("no count")))?;
        let base = c
            .bytes(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
            .ok_or_else(|| self.corrupt(bad("no base time")))?;
        let ndev = c
            .varint()
            .ok_or_else(|| self.corrupt(bad("no device table")))?;
        // Every count is bounded by the bytes that remain (each entry takes at least one byte
        // for a device, two for a task) before memory is reserved for it.
        if ndev > c.remaining() as u64 {
            return Err(self.corrupt(bad("device table longer than the frame")));
        }
        let mut devs = Vec::with_capacity(ndev as usize);
        for _ in 0..ndev {
            devs.push(
                c.varint()
                    .ok_or_else(|| self.corrupt(bad("short device table")))? as u32,
            );
        }
        let ntask = c
            .varint()
            .ok_or_else(|| self.corrupt(bad("no task table")))?;
        if ntask > u64::from(count) {
            return Err(self.corrupt(bad("more tasks than records")));
        }
        if ntask > c.remaining() as u64 / 2 {
            return Err(self.corrupt(bad("task table longer than the frame")));
        }
        let mut tasks = Vec::with_capacity(ntask as usize);
        for _ in 0..ntask {
            let pid = c
                .varint()
                .ok_or_else(|| self.corrupt(bad("short task table")))? as u32;
            let n = *c
                .bytes(1)
                .and_then(|b| b.first())
                .ok_or_else(|| self.corrupt(bad("short task table")))? as usize;
            let comm = c
                .bytes(n.min(16))
                .ok_or_else(|| self.corrupt(bad("short task table")))?
                .to_vec();
            let next = self.tasks.len() as u32;
            let id = *self.task_ids.entry((pid, comm.clone())).or_insert(next);
            if id == next {
                self.tasks.push(Task {
                    pid,
                    comm: String::from_utf8_lossy(&comm).into_owned(),
                });
            }
            tasks.push((id, pid));
        }
        Ok(ChunkTables {
            count,
            base,
            devs,
            tasks,
        })
    }

    fn decode_v2(&mut self, raw: &[u8], out: &mut Vec<IoRecord>) -> Result<(), FormatError> {
        let bad = |what: &str| format!("records frame: {what}");
        let mut c = Cursor { buf: raw, pos: 0 };
        let t = self.read_tables(&mut c)?;
        let extras_len = c
            .varint()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.corrupt(bad("no extras")))?;
        let xstart = c.pos;
        c.bytes(extras_len)
            .ok_or_else(|| self.corrupt(bad("short extras")))?;
        let extras = &raw[xstart..xstart + extras_len];
        let mut xc = Cursor {
            buf: extras,
            pos: 0,
        };
        // Each column of a block costs at least 2 bytes: refuse counts the frame cannot hold
        // before reserving memory for them.
        let blocks = (t.count as usize).div_ceil(BLOCK_RECORDS);
        if blocks * NCOLS * 2 > raw.len() {
            return Err(self.corrupt(bad("more records than the frame holds")));
        }
        out.reserve(t.count as usize);
        let mut vals = [[0u64; BLOCK_RECORDS]; NCOLS];
        let mut scratch = [0u8; MAX_PACKED + 16];
        let mut prev_complete = t.base;
        let mut prev_end_sector = 0u64;
        let mut left = t.count as usize;
        while left > 0 {
            let n = left.min(BLOCK_RECORDS);
            for v in vals.iter_mut() {
                let min = c.varint().ok_or_else(|| self.corrupt(bad("short block")))?;
                let bw = c
                    .bytes(1)
                    .map(|b| u32::from(b[0]))
                    .filter(|&bw| bw <= 64)
                    .ok_or_else(|| self.corrupt(bad("bad bit width")))?;
                let packed = c
                    .bytes((n * bw as usize).div_ceil(8))
                    .ok_or_else(|| self.corrupt(bad("short block")))?;
                unpack_block(packed, bw, unzigzag(min) as u64, &mut v[..n], &mut scratch);
            }
            // Record i takes the i-th value of each of the ten columns.
            #[allow(clippy::needless_range_loop)]
            for i in 0..n {
                let r = (|| {
                    let head = vals[COL_HEAD][i];
                    let fl = (head >> 4) as u16;
                    let complete = prev_complete.wrapping_add(vals[COL_COMPLETE][i]);
                    let (issue, enter) = if fl & flags::NEVER_ISSUED == 0 {
                        let issue = complete.wrapping_sub(vals[COL_DEVICE_NS][i]);
                        (issue, issue.wrapping_sub(vals[COL_QUEUE_NS][i]))
                    } else {
                        (0, complete.wrapping_sub(vals[COL_DEVICE_NS][i]))
                    };
                    let bytes = size_of_code(vals[COL_SIZE][i])?;
                    let &(task, pid) = t.tasks.get(vals[COL_TASK][i] as usize)?;
                    let (error, requeues) = read_extras(fl, &mut xc)?;
                    Some(IoRecord {
                        complete_ns: complete,
                        enter_ns: enter,
                        issue_ns: issue,
                        sector: prev_end_sector.wrapping_add(vals[COL_SECTOR][i]),
                        bytes,
                        pid,
                        task,
                        dev_inflight: vals[COL_DEV_INFLIGHT][i] as u32,
                        os_inflight: vals[COL_OS_INFLIGHT][i] as u32,
                        error,
                        dev: *t.devs.get(vals[COL_DEV][i] as usize)?,
                        requeues,
                        flags: fl & !(flags::HAS_ERROR | flags::REQUEUED),
                        op: Op::from_code((head & 0xf) as u8),
                    })
                })();
                let Some(r) = r else {
                    return Err(self.corrupt(bad("record does not decode")));
                };
                prev_complete = r.complete_ns;
                prev_end_sector = r.sector.wrapping_add(u64::from(r.bytes / 512));
                out.push(r);
            }
            left -= n;
        }
        if c.pos != raw.len() || xc.pos != extras.len() {
            return Err(self.corrupt(bad("trailing bytes after the last record")));
        }
        self.records_read += u64::from(t.count);
        Ok(())
    }

    fn decode_raw(&mut self, raw: &[u8], out: &mut Vec<IoRecord>) -> Result<(), FormatError> {
        let bad = |what: &str| format!("records frame: {what}");
        let mut c = Cursor { buf: raw, pos: 0 };
        let ChunkTables {
            count,
            base,
            devs,
            tasks,
        } = self.read_tables(&mut c)?;
        // A version 1 record takes at least 9 bytes (nine varints).
        if count as usize > c.remaining() / 9 {
            return Err(self.corrupt(bad("more records than the frame holds")));
        }
        out.reserve(count as usize);
        let mut prev_complete = base;
        let mut prev_end_sector = 0u64;
        for _ in 0..count {
            let r = (|| {
                let head = c.varint()?;
                let op = Op::from_code((head & 0xf) as u8);
                let fl = (head >> 4) as u16;
                let complete = prev_complete.wrapping_add(unzigzag(c.varint()?) as u64);
                let (issue, enter) = if fl & flags::NEVER_ISSUED == 0 {
                    let dev_ns = c.varint()?;
                    let queue_ns = c.varint()?;
                    let issue = complete.wrapping_sub(dev_ns);
                    (issue, issue.wrapping_sub(queue_ns))
                } else {
                    (0, complete.wrapping_sub(c.varint()?))
                };
                let dev = *devs.get(c.varint()? as usize)?;
                let sector = prev_end_sector.wrapping_add(unzigzag(c.varint()?) as u64);
                let bytes = size_of_code(c.varint()?)?;
                let task_i = c.varint()? as usize;
                let (task, pid) = *tasks.get(task_i)?;
                let dev_inflight = c.varint()? as u32;
                let os_inflight = c.varint()? as u32;
                let (error, requeues) = read_extras(fl, &mut c)?;
                Some(IoRecord {
                    complete_ns: complete,
                    enter_ns: enter,
                    issue_ns: issue,
                    sector,
                    bytes,
                    pid,
                    task,
                    dev_inflight,
                    os_inflight,
                    error,
                    dev,
                    requeues,
                    flags: fl & !(flags::HAS_ERROR | flags::REQUEUED),
                    op,
                })
            })();
            let Some(r) = r else {
                return Err(self.corrupt(bad("record does not decode")));
            };
            prev_complete = r.complete_ns;
            prev_end_sector = r.sector.wrapping_add(u64::from(r.bytes / 512));
            out.push(r);
        }
        if c.pos != raw.len() {
            return Err(self.corrupt(bad("trailing bytes after the last record")));
        }
        self.records_read += u64::from(count);
        Ok(())
    }
}

pub fn comm_bytes(comm: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let b = comm.as_bytes();
    let n = b.len().min(15);
    out[..n].copy_from_slice(&b[..n]);
    out
}

pub fn comm_str(comm: &[u8; 16]) -> &str {
    let n = comm.iter().position(|&c| c == 0).unwrap_or(16);
    std::str::from_utf8(&comm[..n]).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_add_key_by_key() {
        let a = |minor, op, ios: u64| AggregateSnapshot {
            major: 7,
            minor,
            op: Some(op),
            ios,
            bytes: ios * 4096,
            size_log2: vec![0, ios],
            ..AggregateSnapshot::default()
        };
        let s = AggregateSnapshot::sum(
            &[a(1, Op::Write, 5), a(0, Op::Read, 2)],
            &[a(0, Op::Read, 3), a(2, Op::Read, 1)],
        );
        let got: Vec<_> = s.iter().map(|x| (x.minor, x.op, x.ios, x.bytes)).collect();
        assert_eq!(
            got,
            [
                (0, Some(Op::Read), 5, 5 * 4096),
                (1, Some(Op::Write), 5, 5 * 4096),
                (2, Some(Op::Read), 1, 4096)
            ]
        );
        assert_eq!(s[0].size_log2, [0, 5]);
    }

    fn sample(i: u64) -> IoRecord {
        IoRecord {
            complete_ns: 1_000_000 + i * 7919 + (i % 3) * 100_000,
            enter_ns: 900_000 + i * 7919,
            issue_ns: if i.is_multiple_of(17) {
                0
            } else {
                950_000 + i * 7919
            },
            sector: (i * 2654435761) % 4_000_000,
            bytes: if i.is_multiple_of(5) {
                524288
            } else if i.is_multiple_of(11) {
                1000
            } else {
                4096
            },
            pid: 100 + (i % 4) as u32,
            task: 0,
            dev_inflight: (i % 32) as u32,
            os_inflight: (i % 40) as u32,
            error: if i.is_multiple_of(97) { 10 } else { 0 },
            dev: crate::dev_join(7, (i % 2) as u32),
            requeues: if i.is_multiple_of(101) { 2 } else { 0 },
            flags: if i.is_multiple_of(17) {
                flags::NEVER_ISSUED
            } else {
                flags::SYNC
            },
            op: Op::from_code((i % 4) as u8),
        }
    }

    fn header() -> TraceHeader {
        TraceHeader {
            host: "h".into(),
            devices: vec![DeviceInfo {
                name: "loop0".into(),
                major: 7,
                minor: 0,
                logical_block_size: 512,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_is_exact_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&path, &header()).unwrap();
        let n = DEFAULT_CHUNK_RECORDS as u64 + 1234;
        for i in 0..n {
            let comm = comm_bytes(&format!("task{}", i % 4));
            w.push(&sample(i), &comm).unwrap();
        }
        w.finish(&TraceTrailer {
            reason: "duration".into(),
            records_in_file: n,
            ..Default::default()
        })
        .unwrap();

        let mut r = TraceReader::open(&path).unwrap();
        assert_eq!(r.header().devices[0].name, "loop0");
        let mut all = Vec::new();
        let mut buf = Vec::new();
        while r.next_chunk(&mut buf).unwrap() {
            all.extend_from_slice(&buf);
        }
        assert_eq!(*r.ending(), Ending::Complete);
        assert_eq!(all.len() as u64, n);
        for (i, got) in all.iter().enumerate() {
            let mut want = sample(i as u64);
            want.task = got.task;
            assert_eq!(*got, want, "record {i}");
            assert_eq!(r.tasks()[got.task as usize].comm, format!("task{}", i % 4));
        }
        assert_eq!(r.trailer().unwrap().records_in_file, n);
    }

    /// Values that need every bit width up to 64: times running backwards, sectors at the
    /// ends of the u64 range, odd sizes, negative errors, a lone record in the last block.
    #[test]
    fn extreme_values_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&path, &header()).unwrap();
        let mut want = Vec::new();
        for i in 0..(2 * BLOCK_RECORDS as u64 + 1) {
            let complete = if i % 2 == 0 { u64::MAX - i } else { i };
            let r = IoRecord {
                complete_ns: complete,
                enter_ns: complete / 3,
                issue_ns: complete / 2 + 1,
                sector: if i % 3 == 0 { u64::MAX - 7 } else { i << 40 },
                bytes: if i % 4 == 0 { u32::MAX } else { 511 },
                pid: u32::MAX - i as u32,
                dev_inflight: u32::MAX,
                os_inflight: i as u32,
                error: if i % 5 == 0 { i32::MIN } else { -5 },
                dev: crate::dev_join(4095, 1_048_575),
                requeues: u16::MAX,
                flags: flags::SYNC | flags::FUA,
                op: Op::Other,
                ..Default::default()
            };
            w.push(&r, &comm_bytes("0123456789abcdef")).unwrap();
            want.push(r);
        }
        w.finish(&TraceTrailer::default()).unwrap();
        let mut r = TraceReader::open(&path).unwrap();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while r.next_chunk(&mut buf).unwrap() {
            got.extend(buf.iter().map(|x| IoRecord { task: 0, ..*x }));
        }
        assert_eq!(*r.ending(), Ending::Complete);
        assert_eq!(got, want);
        assert_eq!(r.tasks()[0].comm, "0123456789abcde");
    }

    /// Traces written by version 1 (zstd-compressed varints) still read: the golden traces
    /// under tests/data are version 1 files.
    #[test]
    fn version_1_files_still_read() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/cassandra-ycsb-a.blkp");
        let mut r = TraceReader::open(&path).unwrap();
        assert_eq!(r.version, 1);
        let mut buf = Vec::new();
        let mut n = 0u64;
        while r.next_chunk(&mut buf).unwrap() {
            n += buf.len() as u64;
        }
        assert_eq!(*r.ending(), Ending::Complete);
        assert_eq!(n, r.trailer().unwrap().records_in_file);
        assert!(n > 10_000, "{n}");
    }

    /// Damage that the checksum does not catch (a byte changed and the CRC recomputed, as a
    /// buggy writer would produce) never panics the reader: each case decodes or ends as
    /// corrupt, keeping the chunks before.
    #[test]
    fn damaged_records_with_valid_crc_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&path, &header()).unwrap();
        for i in 0..3000 {
            w.push(&sample(i), &comm_bytes(&format!("t{}", i % 3)))
                .unwrap();
            if i % 1000 == 999 {
                w.flush_chunk().unwrap();
            }
        }
        w.finish(&TraceTrailer::default()).unwrap();
        let good = std::fs::read(&path).unwrap();
        // Frame offsets: magic, then 12-byte heads and payloads.
        let mut frames = Vec::new();
        let mut at = 12;
        while at + 12 <= good.len() {
            let len = u32::from_le_bytes(good[at + 4..at + 8].try_into().unwrap()) as usize;
            frames.push((good[at], at));
            at += 12 + len;
        }
        let (_, second_records) = frames.iter().filter(|f| f.0 == 2).nth(1).copied().unwrap();
        let len = u32::from_le_bytes(
            good[second_records + 4..second_records + 8]
                .try_into()
                .unwrap(),
        ) as usize;
        let mut x = 0x1234_5678_9ABC_DEF1u64;
        let mut corrupt = 0;
        for _ in 0..400 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bad = good.clone();
            let p = second_records + 12 + (x as usize % len);
            bad[p] ^= (1u8 << ((x >> 40) % 8)) | 1;
            let crc = crc32fast::hash(&bad[second_records + 12..second_records + 12 + len]);
            bad[second_records + 8..second_records + 12].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(&path, &bad).unwrap();
            let mut r = TraceReader::open(&path).unwrap();
            let mut buf = Vec::new();
            let mut n = 0;
            while r.next_chunk(&mut buf).unwrap() {
                n += buf.len();
            }
            assert!(n >= 1000, "the chunk before the damage is kept");
            if matches!(r.ending(), Ending::Corrupt { .. }) {
                corrupt += 1;
            }
        }
        assert!(corrupt > 0, "some damage is detected by the decoder itself");
    }

    /// The bytes the writer produces, pinned: a file of every kind of record (never issued,
    /// errors, requeues, odd and huge sizes, times and sectors going backwards, several devices
    /// and tasks, partial blocks, chunks cut by hand, device and stats frames) must hash to
    /// what the writer wrote when this test was made. A refactoring of the writer that changes
    /// one byte on disk fails here; a deliberate format change updates the figures.
    #[test]
    fn writer_output_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut header = header();
        header.tracer_version = "pinned".into();
        header.monotonic_base_ns = 1_000;
        let mut w = TraceWriter::create(&path, &header).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..(DEFAULT_CHUNK_RECORDS as u64 * 2 + 777) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut r = sample(i);
            if i % 1000 == 500 {
                r.complete_ns = r.complete_ns.wrapping_sub(x % 10_000_000);
                r.sector = u64::MAX - x % 1000;
                r.bytes = u32::MAX - (x % 3) as u32;
                r.error = -((x % 200) as i32);
            }
            if i % 777 == 0 {
                r.error = i32::MIN;
                r.requeues = u16::MAX;
            }
            r.dev = crate::dev_join(7 + (x % 3) as u32, (i % 5) as u32);
            w.push(&r, &comm_bytes(&format!("task{}", x % 37))).unwrap();
            if i == 3000 {
                w.flush_chunk().unwrap();
                w.write_device(&DeviceInfo {
                    name: "sdz".into(),
                    major: 8,
                    minor: 0,
                    logical_block_size: 4096,
                })
                .unwrap();
            }
            if i == 12_345 {
                w.write_stats(&StatsFrame {
                    at_ns: 5,
                    records_in_file: i,
                    ..Default::default()
                })
                .unwrap();
            }
        }
        let len = w
            .finish(&TraceTrailer {
                reason: "duration".into(),
                ..Default::default()
            })
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, len);
        assert_eq!(
            (bytes.len(), crc32fast::hash(&bytes)),
            (PINNED_LEN, PINNED_CRC),
            "the writer's bytes changed"
        );
    }
    const PINNED_LEN: usize = 291_399;
    const PINNED_CRC: u32 = 181_701_899;

    #[test]
    fn cut_file_reads_to_last_whole_frame() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&path, &header()).unwrap();
        for i in 0..1000 {
            w.push(&sample(i), &comm_bytes("a")).unwrap();
        }
        w.flush_chunk().unwrap();
        let first_chunk_end = w.bytes_written();
        for i in 1000..1500 {
            w.push(&sample(i), &comm_bytes("a")).unwrap();
        }
        w.finish(&TraceTrailer::default()).unwrap();
        // Cut into the middle of the second records frame.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(first_chunk_end + 100).unwrap();
        let mut r = TraceReader::open(&path).unwrap();
        let mut buf = Vec::new();
        let mut total = 0;
        while r.next_chunk(&mut buf).unwrap() {
            total += buf.len();
        }
        assert_eq!(total, 1000);
        assert!(
            matches!(r.ending(), Ending::Truncated { .. }),
            "{:?}",
            r.ending()
        );
    }

    #[test]
    fn flipped_byte_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&path, &header()).unwrap();
        for i in 0..1000 {
            w.push(&sample(i), &comm_bytes("a")).unwrap();
        }
        w.finish(&TraceTrailer::default()).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let hdr_len = 12 + 12 + u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
        bytes[hdr_len + 40] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let mut r = TraceReader::open(&path).unwrap();
        let mut buf = Vec::new();
        assert!(!r.next_chunk(&mut buf).unwrap());
        assert!(
            matches!(r.ending(), Ending::Corrupt { frame: 1, .. }),
            "{:?}",
            r.ending()
        );
    }

    #[test]
    fn wrong_magic_and_version_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        std::fs::write(&path, b"hello world, not a trace").unwrap();
        assert!(matches!(
            TraceReader::open(&path),
            Err(FormatError::NotATrace { .. })
        ));
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&9u16.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        std::fs::write(&path, &b).unwrap();
        let e = TraceReader::open(&path).err().unwrap();
        assert!(e.to_string().contains("version 9"), "{e}");
    }

    #[test]
    fn compact_on_a_realistic_mix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&path, &header()).unwrap();
        let n = 200_000u64;
        let mut t = 1_000_000_000u64;
        let mut x = 12345u64;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += 8_000 + x % 4000;
            let r = IoRecord {
                complete_ns: t,
                enter_ns: t - 90_000 - x % 1000,
                issue_ns: t - 80_000 - x % 997,
                sector: (x % 4_000_000) & !7,
                bytes: 4096,
                pid: 7,
                dev_inflight: (x % 32) as u32,
                os_inflight: (x % 32) as u32,
                dev: crate::dev_join(7, 0),
                flags: flags::SYNC,
                op: if i % 2 == 0 { Op::Read } else { Op::Write },
                ..Default::default()
            };
            w.push(&r, &comm_bytes("fio")).unwrap();
        }
        let bytes = w.finish(&TraceTrailer::default()).unwrap();
        let per_io = bytes as f64 / n as f64;
        assert!(per_io <= 16.0, "{per_io} bytes per IO");
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

/// RFC 3339 UTC time with milliseconds for a Unix-epoch nanosecond timestamp.
pub fn rfc3339(unix_ns: i64) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let ms = unix_ns.rem_euclid(1_000_000_000) / 1_000_000;
    let days = secs.div_euclid(86400);
    let sod = secs.rem_euclid(86400);
    // Civil-from-days (proleptic Gregorian), after H. Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn parses_a_kernel_6_line() {
        let s = "   7       3 loop3 183647 0 1469176 41234 2 0 16 1 0 53000 41235 5 0 80 2 7 3\n";
        let m = super::parse_diskstats(s, 5);
        let d = &m[&(7, 3)];
        assert_eq!(
            (d.name.as_str(), d.read_ios, d.read_sectors, d.write_ios),
            ("loop3", 183647, 1469176, 2)
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

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(1_795_833_925_863_000_000),
            "2026-11-28T02:45:25.863Z"
        );
        assert_eq!(
            super::rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
