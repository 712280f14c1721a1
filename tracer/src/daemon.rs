//! The tracing daemon: attach, stream the ring buffer, keep live statistics, write trace files
//! (rotating if asked), and end the same way on --duration, SIGINT and SIGTERM.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{SignalKind, signal};
use tracer_common::coverage::{GroupCoverage, coverage, describe, thousands};
use tracer_common::format::Cut;
use tracer_common::format::{
    AggregateSnapshot, CgroupInfo, DeviceInfo, DiskStats, Filters, FormatError, IoRecord,
    ProbeCounters, StatsFrame, TraceHeader, TraceTrailer, TraceWriter,
};
use tracer_common::op::{StatGroup, flags};
use tracer_common::{
    AGG_EPOCH, Cuts, EV_NEVER_ISSUED, EV_NOT_ACCOUNTED, EV_OUTSIDE_CUT, EV_STARTED_BEFORE_ATTACH,
    IoEvent, KIND_FLUSH_RQ, dev_split,
};

use crate::cgroups::{Cgroups, within};
use crate::cli::Config;
use crate::clock;
use crate::devices;
use crate::metrics::{self, Ask, Metrics, Scrape};
use crate::probe::{Probe, ProbeMode, ProbeOptions};
use crate::recorder::{Recorder, Segment};
use crate::stats::{HlogWriter, IntervalLine, Stats, print_header, print_line};

/// Decode one ring record; None if it is too short (never happens with a matching probe).
fn decode_event(bytes: &[u8]) -> Option<IoEvent> {
    if bytes.len() < std::mem::size_of::<IoEvent>() {
        return None;
    }
    // SAFETY: length checked; IoEvent is plain old data for which any bit pattern is valid.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<IoEvent>()) })
}

struct Filter {
    pids: Vec<u32>,
    comms: Vec<[u8; 16]>,
    ops: Vec<tracer_common::op::Op>,
}

impl Filter {
    fn keep(&self, r: &IoRecord, comm: &[u8; 16]) -> bool {
        (self.pids.is_empty() || self.pids.contains(&r.pid))
            && (self.comms.is_empty() || self.comms.contains(comm))
            && (self.ops.is_empty() || self.ops.contains(&r.op))
    }
}

/// Where the records go: a trace file, or the flight recorder's open segment in memory.
enum Writer {
    File(TraceWriter),
    Memory(TraceWriter<tracer_common::format::Blocks>),
}

impl Writer {
    fn push(&mut self, r: &IoRecord, comm: &[u8; 16]) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.push(r, comm),
            Writer::Memory(w) => w.push(r, comm),
        }
    }
    fn write_device(&mut self, d: &DeviceInfo) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.write_device(d),
            Writer::Memory(w) => w.write_device(d),
        }
    }
    fn write_cgroup(&mut self, c: &CgroupInfo) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.write_cgroup(c),
            Writer::Memory(w) => w.write_cgroup(c),
        }
    }
    fn write_file(&mut self, f: &tracer_common::format::FileInfo) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.write_file(f),
            Writer::Memory(w) => w.write_file(f),
        }
    }
    fn records_in_file(&self) -> u64 {
        match self {
            Writer::File(w) => w.records_in_file(),
            Writer::Memory(w) => w.records_in_file(),
        }
    }
    fn bytes_written(&self) -> u64 {
        match self {
            Writer::File(w) => w.bytes_written(),
            Writer::Memory(w) => w.bytes_written(),
        }
    }
}

/// One open trace file (and its .hlog) or recorder segment, with rotation bookkeeping.
struct Output {
    writer: Writer,
    hlog: Option<HlogWriter>,
    opened: Instant,
}

struct Run {
    cfg: Config,
    probe: Probe,
    wall_start_ns: i64,
    mono_base_ns: u64,
    host: String,
    kernel: String,
    devices: Vec<DeviceInfo>,
    names: HashMap<u32, String>,
    stats: Stats,
    filter: Filter,
    output: Option<Output>,
    seq: u32,
    files: VecDeque<PathBuf>,
    /// Per file: header written at open.
    header: TraceHeader,
    received: Vec<(u32, [(u64, u64); 4])>,
    last_dev: usize,
    received_total: u64,
    filtered_out: u64,
    filtered_out_file: u64,
    malformed: u64,
    write_error: Option<String>,
    stdout: std::io::Stdout,
    /// The run's cuts (see [`Cut`]) and the diskstats read at the start's.
    start_cut: Option<Cut>,
    end_cut: Option<Cut>,
    /// What the probe's cut map holds now.
    cuts: Cuts,
    /// Where the open file starts: the run's start cut, or the rotation that opened it (its
    /// IOs completing between the instant and the diskstats read are tallied on it).
    file_start_cut: Option<Cut>,
    /// While a rotation drains the ring: records completing after this instant belong to the
    /// next file and wait here (with the filtered-out ones counted) until it is open.
    hold_after: Option<u64>,
    held: Vec<(IoRecord, [u8; 16])>,
    held_filtered_out: u64,
    /// The exact aggregates of the epoch parity that is not being written, as frozen at the
    /// last rotation (see [`Cuts::rotation`]).
    frozen_other: Vec<AggregateSnapshot>,
    start_diskstats: Option<Vec<DiskStats>>,
    start_aggregates: Option<Vec<AggregateSnapshot>>,
    start_counters: Option<ProbeCounters>,
    /// /proc/diskstats at the run's start, for the end's summary of the whole run.
    diskstats_at_run_start: Vec<DiskStats>,
    /// Records of IOs that completed before the start's instant (not part of the run).
    before_start: u64,
    /// `--no-records`: the aggregates at the last tick (live lines are their change).
    prev_aggregates: Vec<AggregateSnapshot>,
    /// The histograms behind `--metrics-addr`.
    metrics: Option<Metrics>,
    /// The md arrays over the traced disks, read at the start.
    arrays: Vec<tracer_common::format::ArrayInfo>,
    recorder: Option<Recorder>,
    /// Flight-recorder dumps being written.
    dumps: Vec<tokio::task::JoinHandle<()>>,
    /// cgroup ids to paths, and the ids the open file (or segment) has named.
    cgroups: Cgroups,
    /// `--files`: the names the probe hands over, and the ones the open file has named.
    file_names: Option<crate::files::Files>,
    cgroups_named: crate::named::NamedOnce<u64>,
    /// The last record's (submitter, owner) cgroups, both named.
    last_cgroups: Option<(u64, u64)>,
    /// `--cgroup`: whether each id seen is inside one of them.
    cgroup_keep: HashMap<u64, bool>,
    /// A trigger fired: dump at this instant, saying why.
    pending_dump: Option<(tokio::time::Instant, String)>,
    /// Half records' rings and their join (kernels with `block_io_start`, not
    /// `--whole-records`).
    halves: Option<Halves>,
    /// When the ring is drained next.
    pace: DrainPace,
}

/// How far ahead of now a cut's instant is set: long enough for the write to reach every
/// CPU's program before the instant comes.
const CUT_LEAD_NS: u64 = 2_000_000;
/// How long the end waits for the IOs in flight at the cut to complete before counting the
/// rest as missed completions.
const CUT_GRACE: Duration = Duration::from_secs(2);
/// How long a rotation waits for the requests in flight at its instant (see [`Run::rotate`]).
const ROTATION_GRACE: Duration = Duration::from_millis(250);
/// A rotation does not wait for requests that entered the OS this long before its instant:
/// a completion missed long ago whose address has not come back (its device gone idle) would
/// otherwise hold every rotation for [`ROTATION_GRACE`]. They are counted as still open.
const ROTATION_WAITS_FOR_NS: u64 = 1_000_000_000;

fn read_file(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Run {
    fn snapshot_diskstats(&self) -> Result<Vec<DiskStats>> {
        let all = devices::read_diskstats()?;
        let mut out: Vec<DiskStats> = if self.cfg.devices.is_empty() {
            // All whole disks the probe can see (bio-based ones have no request events).
            all.into_values()
                .filter(|d| devices::has_request_events(&d.name))
                .collect()
        } else {
            self.devices
                .iter()
                .filter_map(|d| all.get(&(d.major, d.minor)).cloned())
                .collect()
        };
        out.sort_by_key(|d| (d.major, d.minor));
        Ok(out)
    }

    fn file_path(&self, seq: u32) -> Option<PathBuf> {
        let base = self.cfg.output.as_ref()?;
        if self.cfg.rotate_size.is_none() && self.cfg.rotate_time.is_none() {
            return Some(base.clone());
        }
        let stem = base
            .file_stem()
            .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
        let ext = base
            .extension()
            .map_or_else(|| "blkp".into(), |s| s.to_string_lossy().into_owned());
        Some(base.with_file_name(format!("{stem}.{seq:06}.{ext}")))
    }

    fn open_output(&mut self) -> Result<()> {
        // Each file (and recorder segment) names the cgroups of its own records.
        self.cgroups_named.new_file();
        self.last_cgroups = None;
        if let Some(f) = &mut self.file_names {
            f.new_file();
        }
        let path = self.file_path(self.seq);
        if path.is_none() && self.recorder.is_none() {
            return Ok(());
        }
        self.header = TraceHeader {
            format_version: tracer_common::format::FORMAT_VERSION,
            tracer_version: env!("CARGO_PKG_VERSION").into(),
            host: self.host.clone(),
            kernel: self.kernel.clone(),
            wall_clock_start_ns: self.wall_start_ns,
            monotonic_base_ns: self.mono_base_ns,
            devices: self.devices.clone(),
            filters: Filters {
                devices: self.cfg.devices.clone(),
                pids: self.cfg.pids.clone(),
                comms: self.cfg.comms.clone(),
                ops: self.cfg.ops.iter().map(|o| o.name().to_string()).collect(),
                cgroups: self.cfg.cgroups.clone(),
            },
            interval_ms: clock::duration_ms(self.cfg.interval),
            ring_bytes: u64::from(self.cfg.ring_bytes),
            sequence: self.seq,
            // The run's first file starts at the start's cut, where nothing is aggregated yet
            // and the loss counters are those read as it was set; a rotated file at the
            // rotation's cut, with the aggregates and diskstats of that instant (set by
            // `rotate`).
            aggregates_start: match self.start_aggregates.take() {
                Some(a) => a,
                None if self.seq == 0 && self.start_cut.is_some() => Vec::new(),
                None => self.probe.aggregates()?,
            },
            diskstats_start: match self.start_diskstats.take() {
                Some(ds) => ds,
                None => self.snapshot_diskstats()?,
            },
            counters_start: match self.start_counters.take() {
                Some(c) => c,
                None => self.counters()?,
            },
            // Set below, once this file's start time is known.
            utc_offset_s: 0,
            time_zone: String::new(),
            arrays: self.arrays.clone(),
            submit_hook: self.probe.hooks.name().into(),
            labels: self.cfg.labels.clone(),
            owner_cgroups: Some(self.probe.owner_cgroups.clone()),
            files: self.file_names.is_some(),
        };
        if self.seq > 0 {
            // A rotated file starts at its cut's instant, on the same clocks.
            let (w, m) = clock::clock_pair();
            let at = self.file_start_cut.as_ref().map_or(m, |c| c.at_ns.min(m));
            self.header.wall_clock_start_ns = w.saturating_sub_unsigned(m - at);
            self.header.monotonic_base_ns = at;
        }
        // Each file its own: a rotated file may start after a daylight-saving change.
        (self.header.utc_offset_s, self.header.time_zone) =
            clock::local_zone(self.header.wall_clock_start_ns);
        let Some(path) = path else {
            // The flight recorder's next segment: frames in memory, the header kept beside.
            self.output = Some(Output {
                writer: Writer::Memory(TraceWriter::in_memory()),
                hlog: None,
                opened: Instant::now(),
            });
            self.filtered_out_file = 0;
            return Ok(());
        };
        let writer = TraceWriter::create(&path, &self.header).map_err(|e| match e {
            FormatError::Io { path, source } => anyhow::anyhow!(
                "cannot write the trace file {}: {source} (choose a writable --output path)",
                path.display()
            ),
            e => e.into(),
        })?;
        let hlog_path = path.with_extension("hlog");
        let hlog = HlogWriter::create(&hlog_path, self.header.wall_clock_start_ns)
            .with_context(|| format!("cannot write {}", hlog_path.display()))?;
        self.output = Some(Output {
            writer: Writer::File(writer),
            hlog: Some(hlog),
            opened: Instant::now(),
        });
        self.files.push_back(path);
        self.filtered_out_file = 0;
        Ok(())
    }

    /// Close the current file with a trailer. Returns the path.
    fn close_output(
        &mut self,
        reason: &str,
        diskstats_end: Vec<DiskStats>,
        aggregates_end: Vec<AggregateSnapshot>,
        counters_end: ProbeCounters,
    ) -> Option<(PathBuf, u64, u64)> {
        let out = self.output.take()?;
        let records = out.writer.records_in_file();
        let (w, m) = clock::clock_pair();
        let trailer = TraceTrailer {
            wall_clock_end_ns: w,
            monotonic_end_ns: m,
            reason: reason.into(),
            diskstats_end,
            aggregates_end,
            counters_end,
            records_in_file: records,
            filtered_out: self.filtered_out_file,
            // The start's cut belongs to the run's first file, the end's to its last; a
            // rotation's ends one file and starts the next.
            start_cut: self.file_start_cut.clone(),
            end_cut: self.end_cut.clone(),
        };
        if let Some(mut h) = out.hlog
            && let Err(e) = h.flush()
        {
            eprintln!("blkprof-trace: warning: writing the .hlog failed: {e}");
        }
        let w = match out.writer {
            Writer::File(w) => w,
            Writer::Memory(w) => {
                match w.into_frames() {
                    Ok(frames) => {
                        if let Some(rec) = &mut self.recorder {
                            let seg = Segment {
                                header: self.header.clone(),
                                frames,
                                trailer,
                                records,
                            };
                            rec.push(seg, m);
                        }
                    }
                    Err(e) => eprintln!("blkprof-trace: flight recorder: {e}"),
                }
                return None;
            }
        };
        let path = w.path().to_owned();
        match w.finish(&trailer) {
            Ok(bytes) => Some((path, records, bytes)),
            Err(e) => {
                eprintln!("blkprof-trace: {e}; the file is readable up to its last complete chunk");
                Some((path, records, 0))
            }
        }
    }

    /// Cut the run at an instant shortly ahead: write it to the probe, wait for it, then read
    /// /proc/diskstats at once. `start`: the run's start (IOs completing after it belong to the
    /// run), else its end (IOs completing by it do).
    fn cut(&mut self, start: bool) -> Result<(Cut, Vec<DiskStats>)> {
        let at = clock::monotonic_ns() + CUT_LEAD_NS;
        let cuts = if start {
            Cuts {
                start_after_ns: at,
                end_at_ns: u64::MAX,
                ..self.cuts
            }
        } else {
            Cuts {
                end_at_ns: at,
                ..self.cuts
            }
        };
        self.set_cuts_and_read(cuts, at, start)
    }

    /// Write the cut map, then wait for the instant `at` and read /proc/diskstats at once.
    fn set_cuts_and_read(
        &mut self,
        cuts: Cuts,
        at: u64,
        read_counters: bool,
    ) -> Result<(Cut, Vec<DiskStats>)> {
        self.probe.set_cuts(cuts)?;
        self.cuts = cuts;
        if read_counters {
            self.start_counters = Some(self.counters()?);
        }
        loop {
            let now = clock::monotonic_ns();
            if now >= at {
                break;
            }
            std::thread::sleep(Duration::from_nanos(at - now));
        }
        let read_from_ns = clock::monotonic_ns();
        let ds = self.snapshot_diskstats()?;
        let read_to_ns = clock::monotonic_ns();
        Ok((
            Cut {
                at_ns: at,
                read_from_ns,
                read_to_ns,
                ..Cut::default()
            },
            ds,
        ))
    }

    /// After the end's cut: wait (draining the ring) until the requests in flight at the
    /// instant have completed, or for [`CUT_GRACE`]; the ones still tracked then were missed.
    /// Returns them, counted by stage (seen completing, issued, never issued).
    fn wait_in_flight(&mut self, ring: &mut RingBuf<MapData>) -> Result<[u64; 3]> {
        let Some(at) = self.end_cut.as_ref().map(|c| c.at_ns) else {
            return Ok([0; 3]);
        };
        if self.halves.is_some() {
            // The join holds the requests in flight; the ones left are counted as missed
            // with the join's other unclosed requests (`Run::counters`), by no stage.
            let open = self.wait_joined(ring, 0, at, CUT_GRACE, Duration::from_millis(10));
            if let Some(c) = &mut self.end_cut {
                c.never_completed = open;
            }
            return Ok([0; 3]);
        }
        let mut pending: Vec<_> = self
            .probe
            .tracked()?
            .into_iter()
            .filter(|(_, st)| st.enter_ns <= at)
            .collect();
        let until = Instant::now() + CUT_GRACE;
        while !pending.is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
            drain_ring(ring, self);
            pending.retain(|(w, st)| self.probe.still_tracked(*w, st));
        }
        let mut stages = [0u64; 3];
        for (_, st) in &pending {
            stages[if st.complete_ns != 0 {
                0
            } else if st.issued != 0 || st.issue_ns != 0 {
                1
            } else {
                2
            }] += 1;
        }
        Ok(stages)
    }

    /// Half records: drain the ring every `poll` until no request that entered the OS from
    /// `from` to `at` is open in the join, or for `grace`; then the requests open that
    /// entered by `at`, whenever.
    fn wait_joined(
        &mut self,
        ring: &mut RingBuf<MapData>,
        from: u64,
        at: u64,
        grace: Duration,
        poll: Duration,
    ) -> u64 {
        let until = Instant::now() + grace;
        loop {
            drain_ring(ring, self);
            // Every CPU's batch too: a request started just before the instant may have its
            // start half in a batch not yet old enough to be written, and the sweep must pass
            // the instant before the open count says anything.
            self.settle_halves();
            let waited = self
                .halves
                .as_ref()
                .map_or(0, |h| h.joiner.open_started_in(from, at));
            if waited == 0 || Instant::now() >= until {
                return self
                    .halves
                    .as_ref()
                    .map_or(0, |h| h.joiner.open_started_by(at) as u64);
            }
            std::thread::sleep(poll);
        }
    }

    /// End the open file and start the next at one instant, as the run's start and end are
    /// cut: the probe's aggregates flip epoch parity there, /proc/diskstats is read just
    /// after, and records go to the file their completion time belongs to.
    fn rotate(&mut self, ring: &mut RingBuf<MapData>) -> Result<()> {
        drain_ring(ring, self);
        // With half records, misses found from here on may be of requests in flight at the
        // instant (below).
        let misses = match self.halves {
            Some(_) => self.counters()?.missed_completions,
            None => 0,
        };
        let at = clock::monotonic_ns() + CUT_LEAD_NS;
        let before = Cuts::epoch_of(self.cuts.rotation, at);
        let after = before ^ AGG_EPOCH;
        let cuts = Cuts {
            rotation: Cuts::rotation_at(at, after / AGG_EPOCH),
            ..self.cuts
        };
        let at = cuts.rotation & !1;
        let (cut, ds) = self.set_cuts_and_read(cuts, at, false)?;
        // From here the records completing after the instant wait for the next file, and the
        // ones up to `read_to_ns` are tallied on the cut (for both files' coverage).
        self.hold_after = Some(at);
        self.end_cut = Some(cut);
        drain_ring(ring, self);
        // A program that read the clock before the instant has finished long before this
        // (tracepoint probes run with preemption off); what it wrote is in the ring by now.
        std::thread::sleep(Duration::from_millis(1));
        drain_ring(ring, self);
        // Every CPU's batch too, then the join's records up to the instant and past it
        // through the counters' read (those are tallied on the cut, for both files), before
        // the file closes; the ones after the instant are held for the next file. (If a
        // batch could not be written, the records up to the instant only: what it holds
        // comes late.)
        if !self.settle_halves() {
            self.sweep_halves(at);
        }
        // A completion the kernel did not run the program for is found only when its request's
        // address starts another request, and the kernel counted it somewhere between the
        // request's last event and then: for a request in flight at the instant, the count
        // and the miss can fall in different files. So with half records the file stays open
        // (the records after the instant held) until the requests that entered the OS in the
        // second before the instant have completed or been found missed. The misses found
        // meanwhile are this file's, and the next file's coverage allows for them (the kernel
        // may have counted them after the instant); the requests still open then will be a
        // later file's if found missed, and this file's coverage allows for them. Under load
        // this takes about as long as the slowest of them. (The in-kernel join does not wait:
        // its request map takes tens of ms to scan.)
        let still_open = if self.halves.is_some() {
            Some(self.wait_joined(
                ring,
                at.saturating_sub(ROTATION_WAITS_FOR_NS),
                at,
                ROTATION_GRACE,
                Duration::from_millis(2),
            ))
        } else {
            None
        };
        // The parity before the instant no longer changes: it and the other's value frozen at
        // the last rotation are the aggregates at the instant.
        let frozen = self.probe.aggregates_of(Some(before))?;
        let ag = AggregateSnapshot::sum(&frozen, &self.frozen_other);
        self.frozen_other = frozen;
        let ct = self.counters()?;
        if let (Some(open), Some(c)) = (still_open, &mut self.end_cut) {
            c.missed_after = ct.missed_completions.saturating_sub(misses);
            c.still_open = open;
        }
        // The next file's loss counters start where this file's end, whatever changes while
        // this one closes.
        self.start_counters = Some(ct.clone());
        self.close_output("rotation", ds.clone(), ag.clone(), ct);
        self.file_start_cut = self.end_cut.take();
        self.start_diskstats = Some(ds);
        self.start_aggregates = Some(ag);
        self.seq += 1;
        self.open_output()?;
        self.hold_after = None;
        self.filtered_out_file = std::mem::take(&mut self.held_filtered_out);
        for (r, comm) in std::mem::take(&mut self.held) {
            self.write(&r, &comm);
        }
        if let Some(keep) = self.cfg.keep {
            while self.files.len() > keep {
                if let Some(old) = self.files.pop_front() {
                    #[expect(
                        clippy::let_underscore_must_use,
                        reason = "--keep deletes what it can: a file already gone (removed by \
                                  hand) is what it wants, and a file it cannot delete is no \
                                  reason to stop tracing"
                    )]
                    let _ = std::fs::remove_file(&old);
                    #[expect(clippy::let_underscore_must_use, reason = "as above")]
                    let _ = std::fs::remove_file(old.with_extension("hlog"));
                }
            }
        }
        Ok(())
    }

    /// Drain the half records' rings into the join, each CPU's batch begun before
    /// `stale_before_ns` written to them first; their ring bytes, and how far a sweep may go
    /// (see `BatchFlush::settle`).
    fn drain_halves(&mut self, stale_before_ns: u64) -> (u64, Option<u64>) {
        let Some(h) = &mut self.halves else {
            return (0, Some(u64::MAX));
        };
        // What an earlier drain left in place and no sweep has given back since.
        h.give_back();
        let limit = h.flush.settle(stale_before_ns);
        let mut bytes = 0;
        let joiner = &mut h.joiner;
        // The lost marks' ring is the last.
        let lost = h.rings.len().saturating_sub(1);
        for (i, rb) in h.rings.iter_mut().enumerate() {
            bytes += if i == lost {
                rb.drain(|item| joiner.push_lost(i, item))
            } else {
                // SAFETY: the ring holds the records, unchanged, until `give_back` releases
                // them after the join's unborrow.
                rb.drain_held(|item| unsafe { joiner.push_in_place(i, item) })
            };
        }
        (bytes, limit)
    }

    /// The join's records up to `upto_ns`, handled as the probe's own.
    fn sweep_halves(&mut self, upto_ns: u64) {
        let Some(mut h) = self.halves.take() else {
            return;
        };
        h.joiner.sweep(upto_ns, &mut |ev| self.handle_event(ev));
        h.give_back();
        self.halves = Some(h);
    }

    /// Every CPU's batch written and drained, and the join swept up to the clock read before
    /// (less the slack), trying again while a batch could not be written; false if one still
    /// could not be (nothing swept then).
    fn settle_halves(&mut self) -> bool {
        if self.halves.is_none() {
            return true;
        }
        for _ in 0..10 {
            let now = clock::monotonic_ns();
            if self.drain_halves(u64::MAX).1.is_some() {
                self.sweep_halves(now.saturating_sub(HALF_SLACK_NS));
                return true;
            }
        }
        false
    }

    /// The end: every half in, every record out.
    fn finish_halves(&mut self) {
        self.settle_halves();
        let Some(mut h) = self.halves.take() else {
            return;
        };
        let end = self.end_cut.as_ref().map_or(u64::MAX, |c| c.at_ns);
        h.joiner.finish_by(end, &mut |ev| self.handle_event(ev));
        h.give_back();
        self.halves = Some(h);
    }

    fn handle(&mut self, bytes: &[u8]) {
        let Some(ev) = decode_event(bytes) else {
            self.malformed += 1;
            return;
        };
        self.handle_event(ev);
    }

    fn handle_event(&mut self, ev: IoEvent) {
        let (op, mut fl) = self.probe.decoder.decode(ev.cmd_flags);
        if ev.kind == KIND_FLUSH_RQ {
            fl |= flags::FLUSH_RQ;
        }
        if ev.flags & EV_NEVER_ISSUED != 0 {
            fl |= flags::NEVER_ISSUED;
        }
        if ev.flags & EV_STARTED_BEFORE_ATTACH != 0 {
            fl |= flags::STARTED_BEFORE;
        }
        if ev.flags & EV_NOT_ACCOUNTED != 0 {
            fl |= flags::NOT_ACCOUNTED;
        }
        if ev.flags & EV_OUTSIDE_CUT != 0 {
            // Not part of the run: tally what completed after the end's instant against the
            // kernel's counters read then.
            match &mut self.end_cut {
                Some(c) if ev.complete_ns > c.at_ns => {
                    let g = StatGroup::of(op, fl) as usize;
                    c.tally(ev.dev, g, u64::from(ev.bytes), ev.complete_ns);
                    if ev.enter_ns <= c.at_ns {
                        c.in_flight += 1;
                    }
                }
                _ => self.before_start += 1,
            }
            return;
        }
        // Tallied on the cut that starts the open file and on a rotation's in progress (each
        // counts only what completed between its instant and its diskstats read).
        let g = StatGroup::of(op, fl) as usize;
        for c in [&mut self.file_start_cut, &mut self.end_cut]
            .into_iter()
            .flatten()
        {
            c.tally(ev.dev, g, u64::from(ev.bytes), ev.complete_ns);
        }
        let r = IoRecord {
            complete_ns: ev.complete_ns,
            enter_ns: ev.enter_ns,
            issue_ns: ev.issue_ns,
            sector: ev.sector,
            bytes: ev.bytes,
            pid: ev.pid,
            task: 0,
            dev_inflight: ev.dev_inflight,
            os_inflight: ev.os_inflight,
            error: ev.error,
            dev: ev.dev,
            requeues: ev.requeues,
            flags: fl,
            op,
            cgroup: ev.cgroup,
            owner_cgroup: ev.owner_cgroup,
            file_dev: ev.file_dev,
            file_ino: ev.file_ino,
            file_id: 0,
            hw_queue: ev.hw_queue.checked_sub(1),
        };
        self.received_total += 1;
        // Per device and diskstats group; devices are few, and consecutive records mostly
        // share one, so a cached index beats hashing on this path.
        if self
            .received
            .get(self.last_dev)
            .is_none_or(|(d, _)| *d != r.dev)
        {
            self.last_dev = if let Some(i) = self.received.iter().position(|(d, _)| *d == r.dev) {
                i
            } else {
                self.new_device(r.dev);
                self.received.push((r.dev, [(0, 0); 4]));
                self.received.len() - 1
            };
        }
        let e = &mut self.received[self.last_dev].1[r.stat_group() as usize];
        e.0 += 1;
        e.1 += u64::from(r.bytes);
        let next_file = self.hold_after.is_some_and(|t| r.complete_ns > t);
        if !self.filter.keep(&r, &ev.comm)
            || (!self.cfg.cgroups.is_empty()
                && !self.cgroup_kept(r.cgroup)
                && (r.owner_cgroup == 0 || !self.cgroup_kept(r.owner_cgroup)))
        {
            self.filtered_out += 1;
            if next_file {
                self.held_filtered_out += 1;
            } else {
                self.filtered_out_file += 1;
            }
            return;
        }
        self.stats.record(&r);
        if let Some(m) = &mut self.metrics {
            m.record(&r);
        }
        if next_file {
            self.held.push((r, ev.comm));
        } else {
            self.write(&r, &ev.comm);
        }
    }

    fn write(&mut self, r: &IoRecord, comm: &[u8; 16]) {
        if self.last_cgroups != Some((r.cgroup, r.owner_cgroup)) {
            self.name_cgroups(r.cgroup, r.owner_cgroup);
        }
        if let Some(f) = &mut self.file_names
            && f.must_name(r.file_dev, r.file_ino)
        {
            self.name_file(r.file_dev, r.file_ino);
        }
        if let Some(out) = &mut self.output
            && self.write_error.is_none()
            && let Err(e) = out.writer.push(r, comm)
        {
            self.write_error = Some(e.to_string());
        }
    }

    /// Write the paths of a record's cgroups (submitter's and owner) before the first record
    /// of each in the open file.
    #[cold]
    fn name_cgroups(&mut self, cgroup: u64, owner: u64) {
        self.last_cgroups = Some((cgroup, owner));
        for id in [cgroup, owner] {
            if id == 0 || !self.cgroups_named.first(id) {
                continue;
            }
            let Some(out) = &mut self.output else {
                return;
            };
            let path = self
                .cgroups
                .path(id)
                .map_or_else(|| "(gone)".to_string(), str::to_string);
            if let Err(e) = out.writer.write_cgroup(&CgroupInfo { id, path }) {
                self.write_error.get_or_insert(e.to_string());
            }
        }
    }

    /// The probe's counters, with the file names user space left out.
    fn counters(&self) -> Result<ProbeCounters, crate::probe::ProbeError> {
        let mut c = self.probe.counters()?;
        if let Some(h) = &self.halves {
            let st = h.joiner.stats();
            // Requests the join saw and never saw close: the kernel did not run the
            // completion program for them. A half lost to a full ring names its request and
            // instant on the ring of lost marks (a lost last half closes the request without a
            // record, a ring drop); if that ring was full too (`lost_unnamed`), a request whose
            // last half was lost cannot be told from a missed completion and counts as both:
            // the count is then an upper bound, and says so. (Mid-run, the ones open now are
            // not among them.)
            c.missed_completions += st.missed_completions + st.open_at_end;
            for (m, s) in c.missed_stage.iter_mut().zip(st.missed_stage) {
                *m += s;
            }
            c.started_before_attach += st.started_before_attach;
        }
        if let Some(f) = &self.file_names {
            c.file_name_drops += f.dropped;
        }
        Ok(c)
    }

    /// Write a file's path before the first record of it in the open file (a file the probe
    /// could not name is left out: its records name the inode only).
    #[cold]
    fn name_file(&mut self, dev: u32, ino: u64) {
        let (Some(files), Some(out)) = (&mut self.file_names, &mut self.output) else {
            return;
        };
        if files.path(dev, ino).is_none() {
            // The probe hands a file's name over before its IO's record, but the name may have
            // come after this drain took the names: it is in the names ring now.
            files.drain();
        }
        let Some(path) = files.path(dev, ino) else {
            return;
        };
        let f = tracer_common::format::FileInfo {
            dev,
            ino,
            path: path.to_string(),
        };
        if let Err(e) = out.writer.write_file(&f) {
            self.write_error.get_or_insert(e.to_string());
        }
    }

    /// `--cgroup`: is this id inside one of them?
    #[cold]
    fn cgroup_kept(&mut self, id: u64) -> bool {
        if let Some(&k) = self.cgroup_keep.get(&id) {
            return k;
        }
        let k = self
            .cgroups
            .path(id)
            .is_some_and(|p| self.cfg.cgroups.iter().any(|c| within(p, c)));
        self.cgroup_keep.insert(id, k);
        k
    }

    /// Cut the flight recorder's open segment and write everything it holds as a trace file,
    /// in a blocking task (the loop goes on reading the ring); `reply` gets the file written,
    /// or why not, when it is done.
    fn dump(
        &mut self,
        ring: &mut RingBuf<MapData>,
        why: &str,
        reply: Option<tokio::sync::oneshot::Sender<Result<PathBuf, String>>>,
    ) {
        let answer = |r: Result<PathBuf, String>| {
            if let Some(tx) = reply {
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "the asker hung up (its connection closed): nobody is left to tell"
                )]
                let _ = tx.send(r);
            }
        };
        if self.recorder.is_none() {
            return answer(Err(
                "no flight recorder: start blkprof-trace with --flight-recorder DURATION".into(),
            ));
        }
        if let Err(e) = self.rotate(ring) {
            return answer(Err(e.to_string()));
        }
        let Some(rec) = self.recorder.as_mut() else {
            return answer(Err("no flight recorder".into()));
        };
        let Some(snapshot) = rec.snapshot() else {
            eprintln!("blkprof-trace: flight recorder: cannot dump: it holds nothing yet");
            return answer(Err("the flight recorder holds nothing yet".into()));
        };
        let path = crate::recorder::dump_name(&rec.dir, clock::realtime_ns());
        let why = why.to_string();
        self.dumps.retain(|d| !d.is_finished());
        self.dumps
            .push(tokio::task::spawn_blocking(move || {
                let r = match snapshot.write(&path, &why) {
                    Ok((records, bytes, from, to)) => {
                        eprintln!(
                            "blkprof-trace: flight recorder: wrote {} ({} IOs over {:.1} s, {} bytes; {why}){}",
                            path.display(),
                            thousands(records),
                            to.saturating_sub(from) as f64 / 1e9,
                            thousands(bytes),
                            if snapshot.shortened > 0 {
                                format!(
                                    "; the window is shorter than asked: {} segments went for --flight-recorder-size",
                                    snapshot.shortened
                                )
                            } else {
                                String::new()
                            }
                        );
                        Ok(path)
                    }
                    Err(e) => {
                        eprintln!("blkprof-trace: flight recorder: cannot dump: {e}");
                        Err(e.to_string())
                    }
                };
                answer(r);
            }));
    }

    /// The metrics endpoint's text, from the probe's counters read now.
    fn scrape(&mut self, openmetrics: bool) -> String {
        if self.metrics.is_none() {
            return String::new();
        }
        let aggregates = self.probe.aggregates().unwrap_or_default();
        let counters = self.counters().unwrap_or_default();
        let mut inflight: Vec<(u32, u64, Option<u64>)> = if self.probe.mode == ProbeMode::Records {
            self.probe
                .device_states()
                .into_iter()
                .map(|(d, st)| (d, st.os_inflight, Some(st.dev_inflight)))
                .collect()
        } else {
            // No counts of our own: the kernel's requests in flight per device (sysfs), and
            // none at the device.
            self.names
                .iter()
                .map(|(&d, name)| (d, devices::inflight(name).unwrap_or(0), None))
                .collect()
        };
        // Every traced device has its series from the first scrape, IO or not.
        let mut zeros = Vec::new();
        for d in &self.devices {
            let dev = d.dev();
            if !inflight.iter().any(|x| x.0 == dev) {
                inflight.push((dev, 0, Some(0)));
            }
            for g in StatGroup::ALL {
                if !aggregates.iter().any(|a| {
                    a.major == d.major && a.minor == d.minor && a.group() == g && !a.not_accounted
                }) {
                    zeros.push(AggregateSnapshot {
                        major: d.major,
                        minor: d.minor,
                        op: Some(match g {
                            StatGroup::Read => tracer_common::op::Op::Read,
                            StatGroup::Write => tracer_common::op::Op::Write,
                            StatGroup::Discard => tracer_common::op::Op::Discard,
                            StatGroup::Flush => tracer_common::op::Op::Flush,
                        }),
                        flush_rq: g == StatGroup::Flush,
                        ..AggregateSnapshot::default()
                    });
                }
            }
        }
        inflight.sort_unstable();
        let mut all = aggregates;
        all.extend(zeros);
        let names = &self.names;
        let name_of = |dev: u32| {
            names.get(&dev).cloned().unwrap_or_else(|| {
                let (ma, mi) = dev_split(dev);
                devices::name_of(ma, mi).unwrap_or_else(|| format!("{ma}:{mi}"))
            })
        };
        metrics::render(
            self.metrics.as_mut().expect("checked above"),
            &Scrape {
                aggregates: &all,
                counters: &counters,
                inflight: &inflight,
                name_of: &name_of,
                records: self.received_total,
                filtered_out: self.filtered_out,
                bpf_stats_enabled: read_file("/proc/sys/kernel/bpf_stats_enabled") == "1",
                kernel: &self.kernel,
            },
            openmetrics,
        )
    }

    fn new_device(&mut self, dev: u32) {
        if self.names.contains_key(&dev) {
            return;
        }
        let (ma, mi) = dev_split(dev);
        let info = devices::name_of(ma, mi)
            .and_then(|n| devices::info(&n).ok())
            .unwrap_or(DeviceInfo {
                name: format!("{ma}:{mi}"),
                major: ma,
                minor: mi,
                logical_block_size: 512,
                queue: None,
            });
        self.names.insert(dev, info.name.clone());
        if !self.devices.iter().any(|d| d.dev() == dev) {
            self.devices.push(info.clone());
            if let Some(out) = &mut self.output
                && let Err(e) = out.writer.write_device(&info)
            {
                self.write_error.get_or_insert(e.to_string());
            }
        }
    }

    fn tick(&mut self, interval_start_wall: i64, t_s: f64, len_ns: u64) {
        // Without records, the devices come to light in the aggregates (tracing all devices).
        let aggregates = (self.probe.mode != ProbeMode::Records).then(|| {
            let now = self.probe.aggregates().unwrap_or_default();
            for a in &now {
                self.new_device(tracer_common::dev_join(a.major, a.minor));
            }
            now
        });
        let names = self.names.clone();
        let name_of = move |dev: u32| {
            names.get(&dev).cloned().unwrap_or_else(|| {
                let (ma, mi) = dev_split(dev);
                format!("{ma}:{mi}")
            })
        };
        let hlog = self.output.as_mut().and_then(|o| o.hlog.as_mut());
        let triggers = self
            .recorder
            .as_ref()
            .map_or(&[][..], |r| r.triggers.as_slice());
        let (lines, fired) = if let Some(now) = aggregates {
            let names = &self.names;
            let inflight = |dev: u32| {
                names
                    .get(&dev)
                    .and_then(|n| devices::inflight(n))
                    .map_or(0, |q| u32::try_from(q).unwrap_or(u32::MAX))
            };
            let lines = crate::stats::aggregate_lines(
                &self.prev_aggregates,
                &now,
                interval_start_wall,
                t_s,
                len_ns,
                &name_of,
                &inflight,
            );
            self.prev_aggregates = now;
            (lines, Vec::new())
        } else {
            self.stats
                .end_interval(interval_start_wall, t_s, len_ns, &name_of, hlog, triggers)
        };
        if !fired.is_empty()
            && self.pending_dump.is_none()
            && let Some(rec) = &mut self.recorder
        {
            rec.hold(clock::monotonic_ns());
            let why = format!("trigger {}", fired.join("; "));
            eprintln!(
                "blkprof-trace: flight recorder: {why}; dumping in {}",
                tracer_common::units::format_duration_ns(clock::duration_ns(rec.after))
            );
            self.pending_dump = Some((tokio::time::Instant::now() + rec.after, why));
        }
        if !self.cfg.quiet {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "the live view is for whoever watches: a closed stdout (the view piped \
                          into `head`) must not stop the trace"
            )]
            let _ = live_lines(&mut self.stdout.lock(), &lines, self.cfg.json);
        }
        // Bound what a SIGKILL can lose to one interval, and record losses so far.
        if let Ok(counters) = self.counters()
            && let Some(o) = &mut self.output
            && let Writer::File(w) = &mut o.writer
        {
            let stats = StatsFrame {
                at_ns: clock::monotonic_ns(),
                counters,
                records_in_file: w.records_in_file(),
                filtered_out: self.filtered_out_file,
            };
            if let Err(e) = w.write_stats(&stats) {
                self.write_error.get_or_insert(e.to_string());
            }
        }
    }
}

/// Hand every record waiting in the ring to the run (short records are counted as malformed
/// by `Run::handle`).
fn drain_ring(rb: &mut RingBuf<MapData>, run: &mut Run) {
    // Names first: the probe hands a file's name over before the record of its IO.
    if let Some(f) = &mut run.file_names {
        f.drain();
    }
    let mut bytes = 0;
    while let Some(item) = rb.next() {
        bytes += ring_footprint(item.len());
        run.handle(&item);
    }
    if run.halves.is_some() {
        // Every half of an instant before this clock read is in its ring once the rings are
        // drained, or in a CPU's batch (whose earliest instant the sweep stops short of), but
        // a half whose program stamped it and has not added it yet (the slack).
        let now = clock::monotonic_ns();
        let (halves, limit) =
            run.drain_halves(now.saturating_sub(tracer_common::HALF_BATCH_STALE_NS));
        bytes += halves;
        // Not past the earliest half of a CPU's batch still waiting, less the slack (for a
        // program that stamped its half and has not added it yet); if a batch could not be
        // written, it may hold halves of any instant since the last: not at all.
        if let Some(limit) = limit {
            run.sweep_halves(now.min(limit).saturating_sub(HALF_SLACK_NS));
        }
    }
    run.pace.drained(bytes);
}

/// How far behind the drain the join's sweep stays: room for a start half whose submitting
/// task was preempted between the kernel's stamp and the program.
const HALF_SLACK_NS: u64 = 100_000;

/// The half records' rings and their join.
struct Halves {
    rings: Vec<crate::ringread::BatchRing>,
    flush: crate::ringread::BatchFlush,
    joiner: tracer_common::join::Joiner,
}

impl Halves {
    /// The join copies what it still needs of the halves it read in place (those after its
    /// sweep, the open requests' submitters), then the rings get their space back. The
    /// halves' payloads are thus read once, from the ring, rather than copied out and read
    /// again: at 40k IOPS those copies were a cold line or two per IO for the daemon.
    fn give_back(&mut self) {
        self.joiner.unborrow();
        for rb in &mut self.rings {
            rb.release();
        }
    }
}

/// The ring space a record of `len` bytes took: its data rounded up to 8 bytes, after the
/// kernel's 8-byte header.
fn ring_footprint(len: usize) -> u64 {
    (len as u64).next_multiple_of(8) + 8
}

/// When to drain the ring next. The probe never wakes the daemon (a wakeup per record costs
/// more than the record), so a timer does, and each drain is a wakeup: about 30 µs of CPU on
/// the bench machine, 30-40 ns per IO at 40k IOPS with a drain every 20 ms (BENCHMARKS.md,
/// 2026-11-24). So the period stretches to [`DrainPace::MAX`] while records are few and
/// shrinks to [`DrainPace::MIN`] as they come faster, keeping a period's records within an
/// eighth of the ring: at the largest period a 16 MB ring still takes a sudden 1.3 M IOs/s
/// from idle without dropping, and a drop is counted, never silent. On half records the ring
/// is each CPU's small one (`tracer_common::MAP_HOT_RINGS`), which should hold a drain's
/// halves to stay in the CPU's cache; what does not fit spills into the large rings.
struct DrainPace {
    ring_bytes: u64,
    /// Ring bytes drained (by any drain) since `since`, the last timed drain.
    bytes: u64,
    since: Instant,
}

impl DrainPace {
    const MIN: Duration = Duration::from_millis(20);
    const MAX: Duration = Duration::from_millis(100);

    fn new(ring_bytes: u64) -> DrainPace {
        DrainPace {
            ring_bytes,
            bytes: 0,
            since: Instant::now(),
        }
    }

    fn drained(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    /// At a timed drain: the period until the next one, from the rate since the last.
    fn next(&mut self, now: Instant) -> Duration {
        let period = DrainPace::period_for(
            self.ring_bytes,
            self.bytes,
            now.saturating_duration_since(self.since),
        );
        self.bytes = 0;
        self.since = now;
        period
    }

    /// The period in which `bytes` drained over `elapsed` would fill an eighth of the ring.
    fn period_for(ring_bytes: u64, bytes: u64, elapsed: Duration) -> Duration {
        if bytes == 0 {
            return DrainPace::MAX;
        }
        let secs = elapsed.as_secs_f64() * (ring_bytes / 8) as f64 / bytes as f64;
        Duration::try_from_secs_f64(secs)
            .unwrap_or(DrainPace::MAX)
            .clamp(DrainPace::MIN, DrainPace::MAX)
    }
}

/// An interval's live lines, as JSON lines or as the table's rows.
fn live_lines(out: &mut impl Write, lines: &[IntervalLine], json: bool) -> std::io::Result<()> {
    for l in lines {
        if json {
            serde_json::to_writer(&mut *out, l)?;
            writeln!(out)?;
        } else {
            print_line(out, l)?;
        }
    }
    out.flush()
}

fn is_disk_full(msg: &str) -> bool {
    msg.contains("No space left") || msg.contains("os error 28") || msg.contains("quota")
}

/// Trace until the duration, a signal or a write error; the exit code: 0, or 1 when the trace
/// could not be written to its end (disk full, write error).
pub async fn run(cfg: Config) -> Result<u8> {
    let devices = cfg.targets.clone();
    let devices_for_arrays = devices.clone();
    if let Some(out) = &cfg.output
        && let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        bail!(
            "cannot write the trace file {}: directory {} does not exist",
            out.display(),
            parent.display()
        );
    }
    // Listen before the probe attaches: a taken port fails the start, not the run.
    let listener = match cfg.metrics_addr {
        Some(a) => Some(metrics::bind(a).await?),
        None => None,
    };
    let mut probe = Probe::load(&ProbeOptions {
        mode: cfg.mode,
        // Without records the ring stays empty: the smallest one.
        ring_bytes: if cfg.mode == ProbeMode::Records {
            cfg.ring_bytes
        } else {
            4096
        },
        devices: devices.iter().map(DeviceInfo::dev).collect(),
        owner_always: cfg.owner_always,
        files: cfg.files,
        halves: cfg.halves,
    })?;
    let ring = probe.take_ring()?;
    let half_rings = probe.take_half_rings()?;
    let half_flush = probe.take_half_flush()?;
    // Paced by the small rings: a drain's halves should fit them, where they stay in the
    // CPUs' caches; what does not spills into the large rings, not lost.
    let hot_ring_bytes = probe.halves.then_some(probe.hot_ring_bytes);
    let halves = half_flush.map(|flush| Halves {
        joiner: tracer_common::join::Joiner::new(clock::monotonic_ns(), half_rings.len()),
        rings: half_rings,
        flush,
    });
    let file_names = if probe.config.files != 0 {
        Some(crate::files::Files::new(probe.take_names_ring()?))
    } else {
        None
    };
    let names = devices.iter().map(|d| (d.dev(), d.name.clone())).collect();
    let filter = Filter {
        pids: cfg.pids.clone(),
        comms: cfg
            .comms
            .iter()
            .map(|c| tracer_common::format::comm_bytes(c))
            .collect(),
        ops: cfg.ops.clone(),
    };
    let cfg_ring_bytes = cfg.ring_bytes;
    let mut run = Run {
        host: read_file("/proc/sys/kernel/hostname"),
        kernel: read_file("/proc/sys/kernel/osrelease"),
        cfg,
        probe,
        wall_start_ns: 0,
        mono_base_ns: 0,
        devices,
        names,
        stats: Stats::new(),
        filter,
        output: None,
        seq: 0,
        files: VecDeque::new(),
        header: TraceHeader::default(),
        received: Vec::new(),
        last_dev: 0,
        received_total: 0,
        filtered_out: 0,
        filtered_out_file: 0,
        malformed: 0,
        write_error: None,
        stdout: std::io::stdout(),
        start_cut: None,
        end_cut: None,
        cuts: Cuts::default(),
        file_start_cut: None,
        hold_after: None,
        held: Vec::new(),
        held_filtered_out: 0,
        frozen_other: Vec::new(),
        start_diskstats: None,
        start_aggregates: None,
        diskstats_at_run_start: Vec::new(),
        start_counters: None,
        before_start: 0,
        metrics: None,
        prev_aggregates: Vec::new(),
        arrays: devices::arrays_of(&devices_for_arrays),
        recorder: None,
        dumps: Vec::new(),
        cgroups: Cgroups::new(),
        file_names,
        cgroups_named: crate::named::NamedOnce::default(),
        last_cgroups: None,
        cgroup_keep: HashMap::new(),
        pending_dump: None,
        halves,
        // Half records: the pace of one ring, as if every IO were on one CPU.
        pace: DrainPace::new(u64::from(hot_ring_bytes.unwrap_or(cfg_ring_bytes))),
    };
    run.probe.attach()?;
    if let Some(h) = &mut run.halves {
        // The start program attaches last: a request stamped before now may have no start
        // half (it started before the probe was whole).
        h.joiner.set_attach_ns(clock::monotonic_ns());
    }
    // The start: IOs completing after this instant belong to the run, in the records, the
    // aggregates and the kernel's counters alike.
    let (cut, ds) = run.cut(true)?;
    if let Some(h) = &mut run.halves {
        h.joiner.set_run(cut.at_ns, u64::MAX);
    }
    run.start_cut = Some(cut.clone());
    run.file_start_cut = Some(cut);
    run.diskstats_at_run_start = ds.clone();
    run.start_diskstats = Some(ds);
    let (w, m) = clock::clock_pair();
    run.wall_start_ns = w;
    run.mono_base_ns = m;
    if let Some(f) = &run.cfg.flight_recorder {
        run.recorder = Some(Recorder::new(
            f.window,
            f.max_bytes,
            f.dir.clone(),
            f.after,
            f.triggers.clone(),
        ));
    }
    if run.cfg.output.is_some() || run.recorder.is_some() {
        run.open_output()?;
    } else {
        let (utc_offset_s, time_zone) = clock::local_zone(w);
        run.header = TraceHeader {
            wall_clock_start_ns: w,
            monotonic_base_ns: m,
            diskstats_start: run.start_diskstats.take().unwrap_or_default(),
            counters_start: run.start_counters.take().unwrap_or_default(),
            utc_offset_s,
            time_zone,
            ..Default::default()
        };
    }
    let what = if run.devices.is_empty() {
        "all block devices".to_string()
    } else {
        run.devices
            .iter()
            .map(|d| format!("{} ({}:{})", d.name, d.major, d.minor))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut asks = None;
    if let Some(l) = listener {
        let mut m = if run.cfg.mode == ProbeMode::Records {
            Metrics::new(run.cfg.metrics_per_octave, run.wall_start_ns)
        } else {
            Metrics::from_kernel(run.cfg.metrics_per_octave, run.wall_start_ns)
        };
        for d in &run.devices {
            m.add_device(d.dev());
        }
        run.metrics = Some(m);
        let (tx, rx) = tokio::sync::mpsc::channel::<Ask>(16);
        let addr = l.local_addr()?;
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(l, tx).await {
                eprintln!("blkprof-trace: the metrics endpoint stopped: {e}");
            }
        });
        asks = Some(rx);
        eprintln!("blkprof-trace: metrics at http://{addr}/metrics");
    }
    eprintln!("blkprof-trace: tracing {what}; Ctrl-C to stop");
    if !run.cfg.quiet && !run.cfg.json {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "as the live lines (`live_lines`): a closed stdout must not stop the trace"
        )]
        let _ = print_header(&mut run.stdout.lock());
    }

    // SAFETY: the RingBuf owns its map fd, which stays open and unchanged while the AsyncFd lives.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigusr1 = signal(SignalKind::user_defined1())?;
    let started = Instant::now();
    let deadline = run.cfg.duration.map(|d| tokio::time::Instant::now() + d);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + run.cfg.interval,
        run.cfg.interval,
    );
    // The probe never wakes us: drain the ring on a timer paced by the record rate
    // ([`DrainPace`]). (Without records the ring stays empty: no timer.)
    let records = run.probe.mode == ProbeMode::Records;
    // The first drain comes soon: the rate is not known yet.
    let mut next_drain = tokio::time::Instant::now() + DrainPace::MIN;
    let mut interval_start_wall = run.wall_start_ns;
    let mut interval_start = Instant::now();
    let reason: &str = loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain_ring(guard.get_inner_mut(), &mut run);
                guard.clear_ready();
            }
            () = tokio::time::sleep_until(next_drain), if records => {
                drain_ring(ring.get_mut(), &mut run);
                let now = tokio::time::Instant::now();
                next_drain = now + run.pace.next(now.into_std());
            }
            _ = ticker.tick() => {
                // The interval holds every record completed before its end.
                drain_ring(ring.get_mut(), &mut run);
                let len = clock::duration_ns(interval_start.elapsed());
                run.tick(interval_start_wall, started.elapsed().as_secs_f64(), len);
                interval_start = Instant::now();
                interval_start_wall = clock::realtime_ns();
                let rotate = run.output.as_ref().is_some_and(|o| {
                    run.cfg.rotate_size.is_some_and(|s| o.writer.bytes_written() >= s)
                        || run.cfg.rotate_time.is_some_and(|t| o.opened.elapsed() >= t)
                        || run.recorder.as_ref().is_some_and(|r| o.opened.elapsed() >= r.segment)
                });
                if rotate && run.write_error.is_none() {
                    run.rotate(ring.get_mut())?;
                }
            }
            Some(ask) = async {
                match &mut asks {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                // The histograms up to now, then the kernel's counters.
                drain_ring(ring.get_mut(), &mut run);
                match ask {
                    Ask::Metrics(open, reply) => {
                        #[expect(
                            clippy::let_underscore_must_use,
                            reason = "the scraper hung up (its connection closed): nobody is left \
                                      to answer"
                        )]
                        let _ = reply.send(run.scrape(open));
                    }
                    Ask::Dump(reply) => run.dump(ring.get_mut(), "POST /dump", Some(reply)),
                }
            }
            _ = sigusr1.recv() => {
                if run.recorder.is_some() {
                    run.dump(ring.get_mut(), "SIGUSR1", None);
                } else {
                    eprintln!("blkprof-trace: SIGUSR1: no flight recorder to dump (start with --flight-recorder DURATION)");
                }
            }
            () = async {
                match run.pending_dump.as_ref().map(|p| p.0) {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, why)) = run.pending_dump.take() {
                    run.dump(ring.get_mut(), &why, None);
                }
            }
            () = sleep => break "duration",
            _ = sigint.recv() => break "signal",
            _ = sigterm.recv() => break "signal",
        }
        if let Some(e) = &run.write_error {
            if is_disk_full(e) {
                eprintln!(
                    "blkprof-trace: disk full while writing the trace ({e}); stopping cleanly"
                );
                break "disk-full";
            }
            eprintln!("blkprof-trace: writing the trace failed ({e}); stopping cleanly");
            break "error";
        }
    };

    // A trigger fired and its dump is still waiting: write it now, with what there is.
    if let Some((_, why)) = run.pending_dump.take() {
        run.dump(
            ring.get_mut(),
            &format!("{why}; the tracer stopped before its time after"),
            None,
        );
    }
    // Dumps being written finish before the tracer says it is done.
    for d in std::mem::take(&mut run.dumps) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "a dump reports its own outcome (stderr, the POST /dump reply); a task that \
                      panicked has had its panic printed"
        )]
        let _ = d.await;
    }
    // The end: IOs completing by this instant belong to the run. The programs stay attached
    // while the IOs in flight at the cut complete (tallied, not stored), so nothing submitted
    // later is mistaken for an IO of before the start, and the ones that never complete are
    // known by stage.
    drain_ring(ring.get_mut(), &mut run);
    let (cut, diskstats_end) = run.cut(false)?;
    if let (Some(h), Some(start)) = (&mut run.halves, &run.start_cut) {
        h.joiner.set_run(start.at_ns, cut.at_ns);
    }
    run.end_cut = Some(cut);
    let stuck = run.wait_in_flight(ring.get_mut())?;
    drain_ring(ring.get_mut(), &mut run);
    if let Some(c) = &mut run.end_cut {
        c.never_completed += stuck.iter().sum::<u64>();
    }
    run.probe.detach();
    drain_ring(ring.get_mut(), &mut run);
    run.finish_halves();
    let len = clock::duration_ns(interval_start.elapsed());
    run.tick(
        interval_start_wall,
        started.elapsed().as_secs_f64(),
        len.max(1),
    );
    let mut counters = run.counters()?;
    counters.missed_completions += stuck.iter().sum::<u64>();
    for (m, s) in counters.missed_stage.iter_mut().zip(stuck) {
        *m += s;
    }
    if let (Some(start), Some(end)) = (&run.start_cut, &run.end_cut) {
        counters.submitters_lost += run.probe.submitters_left(start.at_ns, end.at_ns)?;
    }
    let aggregates = run.probe.aggregates()?;
    if run.halves.is_some() {
        // The join finds a missed completion by its request; under a ring so overloaded that
        // lost halves went unnamed it can miss one whose every half was lost. The kernel's
        // counters against the exact aggregates count them all where the kernel accounts.
        let gap: u64 = run_coverage(&run, &diskstats_end, &aggregates)
            .iter()
            .flat_map(|d| &d.groups)
            .map(|g| g.unaccounted(0))
            .sum();
        counters.missed_completions = counters.missed_completions.max(gap);
    }
    let closed = run.close_output(
        reason,
        diskstats_end.clone(),
        aggregates.clone(),
        counters.clone(),
    );
    #[expect(
        clippy::let_underscore_must_use,
        reason = "the trace is written by now; a closed stdout (piped into `head`) loses only \
                  the summary, and the exit code says how the trace ended"
    )]
    let _ = summary(
        &run,
        &diskstats_end,
        &aggregates,
        &counters,
        closed.as_ref(),
        reason,
    );
    Ok(u8::from(reason == "disk-full" || reason == "error"))
}

/// The whole run's coverage, from its start's cut to its end's, whatever files it was
/// written to.
fn run_coverage(
    run: &Run,
    diskstats_end: &[DiskStats],
    aggregates: &[AggregateSnapshot],
) -> Vec<tracer_common::coverage::DeviceCoverage> {
    let header = TraceHeader {
        diskstats_start: run.diskstats_at_run_start.clone(),
        aggregates_start: Vec::new(),
        ..TraceHeader::default()
    };
    let trailer = TraceTrailer {
        diskstats_end: diskstats_end.to_vec(),
        aggregates_end: aggregates.to_vec(),
        start_cut: run.start_cut.clone(),
        end_cut: run.end_cut.clone(),
        ..Default::default()
    };
    coverage(&header, &trailer)
}

/// The end's summary on stdout: the whole run's coverage per device and op, what was lost and
/// why, and the trace written.
fn summary(
    run: &Run,
    diskstats_end: &[DiskStats],
    aggregates: &[AggregateSnapshot],
    counters: &ProbeCounters,
    closed: Option<&(PathBuf, u64, u64)>,
    reason: &str,
) -> std::io::Result<()> {
    let mut out = run.stdout.lock();
    let cov = run_coverage(run, diskstats_end, aggregates);
    let misses = counters.reported_misses();
    writeln!(out, "\nblkprof-trace: stopped ({reason})")?;
    for d in &cov {
        let any = d.groups.iter().any(GroupCoverage::any);
        if !any && run.cfg.devices.is_empty() {
            continue;
        }
        writeln!(out, "{} ({}:{}):", d.name, d.major, d.minor)?;
        writeln!(
            out,
            "  {:<8} {:>12} {:>14} {:>12} {:>14} {:>12}",
            "op", "IOs", "bytes", "kernel IOs", "kernel bytes", "records"
        )?;
        let dev = tracer_common::dev_join(d.major, d.minor);
        for g in &d.groups {
            let grp = g.group.unwrap_or(StatGroup::Read);
            let rec = run
                .received
                .iter()
                .find(|(d, _)| *d == dev)
                .map(|(_, g)| g[grp as usize])
                .unwrap_or_default();
            writeln!(
                out,
                "  {:<8} {:>12} {:>14} {:>12} {:>14} {:>12}",
                grp.name(),
                thousands(g.aggregate_ios + g.not_accounted_ios),
                thousands(g.aggregate_bytes + g.not_accounted_bytes),
                thousands(g.kernel_at_cut_ios()),
                thousands(g.kernel_at_cut_bytes()),
                thousands(rec.0)
            )?;
        }
        for g in &d.groups {
            if g.any() {
                let gap = g.unaccounted(misses);
                let extra = g.excess();
                let not_seen = g
                    .kernel_at_cut_ios()
                    .saturating_sub(g.cut_during_read_end_ios)
                    .saturating_sub(g.aggregate_ios);
                let note = if gap > 0 {
                    format!("  <- {gap} IOs unaccounted")
                } else if not_seen > 0 {
                    format!("  <- {not_seen} missed, reported below")
                } else if extra > 0 {
                    format!("  <- {extra} more than the kernel counted")
                } else {
                    String::new()
                };
                writeln!(out, "  coverage: {}{note}", describe(g))?;
            }
        }
        if !d.accounting_off() {
            writeln!(
                out,
                "  mean queue size (requests in OS): {:.3} traced, {:.3} by /proc/diskstats",
                d.aggregate_mean_queue, d.kernel_mean_queue
            )?;
        }
    }
    if run.probe.mode == ProbeMode::Records {
        writeln!(
            out,
            "records: {} received, {} dropped (ring full), {} filtered out; missed IOs: {} completions not seen by the probe, {} program runs skipped by the kernel (BPF recursion), {} untracked (request map full)",
            thousands(run.received_total),
            thousands(counters.ring_drops),
            thousands(run.filtered_out),
            thousands(counters.missed_completions),
            thousands(counters.recursion_misses()),
            thousands(counters.request_map_full)
        )?;
        if counters.lost_unnamed > 0 {
            writeln!(
                out,
                "note: {} halves lost to the full ring could not be named to the join (the ring of lost marks was full too): the completions not seen by the probe are an upper bound, lost records among them; a larger --ring-size avoids it",
                thousands(counters.lost_unnamed),
            )?;
        }
    } else {
        writeln!(
            out,
            "records: none (--no-records: the exact in-kernel aggregates only){}",
            if counters.recursion_misses() > 0 {
                format!(
                    "; {} program runs skipped by the kernel (BPF recursion)",
                    thousands(counters.recursion_misses())
                )
            } else {
                String::new()
            }
        )?;
        if let Some(a) = aggregates.iter().find(|a| a.ios > 0 && a.timed < a.ios) {
            writeln!(
                out,
                "note: {} of {} IOs have no latency: the kernel stamps the start only of requests it accounts (iostats on)",
                thousands(a.ios - a.timed),
                thousands(a.ios)
            )?;
        }
        if aggregates
            .iter()
            .any(|a| a.timed > 0 && a.device_latency.iter().all(|&c| c == 0))
        {
            writeln!(
                out,
                "note: no device latency: the kernel stamps the issue only where the queue collects statistics (e.g. with write-back throttling on: /sys/block/NAME/queue/wbt_lat_usec)"
            )?;
        }
    }
    if counters.aggregate_map_full > 0 {
        writeln!(
            out,
            "warning: {} IOs were recorded but left out of the exact aggregates (aggregate map full): the coverage check counts them as missed",
            thousands(counters.aggregate_map_full)
        )?;
    }
    if counters.submitters_lost > 0 && run.halves.is_none() {
        writeln!(
            out,
            "note: {} submitters seen at block_getrq were not taken up by their requests (this kernel has no block_io_start): those IOs, if they completed, show no submitter",
            thousands(counters.submitters_lost)
        )?;
    }
    if counters.missed_completions > 0 {
        let [partial, issued, queued] = counters.missed_stage;
        writeln!(
            out,
            "missed completions by what the probe had seen of the request: {partial} completing (partially or inside a flush sequence), {issued} issued, {queued} never issued"
        )?;
    }
    if let Some(c) = &run.end_cut
        && c.in_flight > 0
    {
        writeln!(
            out,
            "stop: the run was cut at one instant; {} IOs in flight then completed after it and are not part of it{}",
            thousands(c.in_flight),
            if c.never_completed > 0 {
                format!(
                    "; {} more had not completed {} s later: counted as missed completions",
                    c.never_completed,
                    CUT_GRACE.as_secs()
                )
            } else {
                String::new()
            }
        )?;
    }
    if counters.started_before_attach > 0 {
        writeln!(
            out,
            "note: {} IOs were submitted before tracing started (no submitter or queue time)",
            counters.started_before_attach
        )?;
    }
    if run.malformed > 0 {
        writeln!(out, "warning: {} malformed ring records", run.malformed)?;
    }
    if let Some(h) = &run.halves {
        let st = h.joiner.stats();
        writeln!(
            out,
            "half records: {} joined, {} started before the attach, {} without their start half, {} closed by a lost last half, {} behind the sweep, {} malformed, {} open at the end",
            thousands(st.joined),
            thousands(st.started_before_attach),
            thousands(st.starts_lost),
            thousands(st.gone),
            thousands(st.late),
            thousands(st.malformed),
            thousands(st.open_at_end),
        )?;
        let c = counters;
        if c.half_drops + c.merge_half_drops + c.submitters_lost + c.lost_unnamed > 0 {
            writeln!(
                out,
                "half records lost (ring full): {} start halves (records without a submitter), {} issue, requeue or partial-completion halves (records short of an instant or bytes), {} merge halves; {} of them not named to the join",
                thousands(c.submitters_lost),
                thousands(c.half_drops),
                thousands(c.merge_half_drops),
                thousands(c.lost_unnamed),
            )?;
        }
    }
    if let Some((path, records, bytes)) = closed {
        let per_io = if *records > 0 {
            *bytes as f64 / *records as f64
        } else {
            0.0
        };
        writeln!(
            out,
            "trace: {} ({} records, {} bytes, {per_io:.1} bytes/IO); histograms: {}",
            path.display(),
            thousands(*records),
            thousands(*bytes),
            path.with_extension("hlog").display()
        )?;
        if run.files.len() > 1 {
            writeln!(out, "rotated files kept: {}", run.files.len())?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_footprint_is_the_header_and_data_rounded_to_8() {
        assert_eq!(ring_footprint(112), 120);
        assert_eq!(ring_footprint(113), 128);
        assert_eq!(ring_footprint(0), 8);
    }

    #[test]
    fn the_drain_period_keeps_a_period_within_an_eighth_of_the_ring() {
        let ring = 16 << 20;
        let second = Duration::from_secs(1);
        // Idle, or 40k records of 120 bytes a second (4.8 MB/s: 2 MB in 437 ms): the longest.
        assert_eq!(DrainPace::period_for(ring, 0, second), DrainPace::MAX);
        assert_eq!(
            DrainPace::period_for(ring, 40_000 * 120, second),
            DrainPace::MAX
        );
        // 500k a second (60 MB/s): 2 MB in 35 ms.
        let p = DrainPace::period_for(ring, 500_000 * 120, second);
        assert!(
            p > Duration::from_millis(34) && p < Duration::from_millis(36),
            "{p:?}"
        );
        // Faster than the shortest period can follow, or a tiny ring: the shortest.
        assert_eq!(
            DrainPace::period_for(ring, 5_000_000 * 120, second),
            DrainPace::MIN
        );
        assert_eq!(
            DrainPace::period_for(4096, 40_000 * 120, second),
            DrainPace::MIN
        );
        // A drain right after another (elapsed 0) is not a reason to wait less than MIN.
        assert_eq!(
            DrainPace::period_for(ring, 1 << 20, Duration::ZERO),
            DrainPace::MIN
        );
    }

    #[test]
    fn the_pace_counts_every_drain_since_the_last_timed_one() {
        let mut pace = DrainPace::new(16 << 20);
        let t0 = pace.since;
        pace.drained(30_000_000);
        pace.drained(30_000_000);
        // 60 MB in 1 s: 2 MB in 35 ms.
        let p = pace.next(t0 + Duration::from_secs(1));
        assert!(
            p > Duration::from_millis(34) && p < Duration::from_millis(36),
            "{p:?}"
        );
        assert_eq!(pace.bytes, 0);
        assert_eq!(pace.next(t0 + Duration::from_secs(2)), DrainPace::MAX);
    }
}
