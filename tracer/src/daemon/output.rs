//! The output: the open trace file (and its .hlog) or flight-recorder segment, how the next
//! one is created, how one is closed, and `--keep`.

use std::io;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use tracer_common::format::{
    AggregateSnapshot, Blocks, CgroupInfo, DeviceInfo, DiskStats, FileInfo, Filters, FormatError,
    IoRecord, ProbeCounters, TraceHeader, TraceTrailer, TraceWriter,
};

use super::Run;
use crate::clock;
use crate::recorder::Segment;
use crate::stats::HlogWriter;

/// Where the records go: a trace file, or the flight recorder's open segment in memory.
pub(super) enum Writer {
    File(TraceWriter),
    Memory(TraceWriter<Blocks>),
}

impl Writer {
    pub(super) fn push(&mut self, r: &IoRecord, comm: &[u8; 16]) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.push(r, comm),
            Writer::Memory(w) => w.push(r, comm),
        }
    }
    pub(super) fn write_device(&mut self, d: &DeviceInfo) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.write_device(d),
            Writer::Memory(w) => w.write_device(d),
        }
    }
    pub(super) fn write_cgroup(&mut self, c: &CgroupInfo) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.write_cgroup(c),
            Writer::Memory(w) => w.write_cgroup(c),
        }
    }
    pub(super) fn write_file(&mut self, f: &FileInfo) -> Result<(), FormatError> {
        match self {
            Writer::File(w) => w.write_file(f),
            Writer::Memory(w) => w.write_file(f),
        }
    }
    pub(super) fn records_in_file(&self) -> u64 {
        match self {
            Writer::File(w) => w.records_in_file(),
            Writer::Memory(w) => w.records_in_file(),
        }
    }
    pub(super) fn bytes_written(&self) -> u64 {
        match self {
            Writer::File(w) => w.bytes_written(),
            Writer::Memory(w) => w.bytes_written(),
        }
    }
}

/// One open trace file (and its .hlog) or recorder segment, with rotation bookkeeping.
pub(super) struct Output {
    pub(super) writer: Writer,
    pub(super) hlog: Option<HlogWriter>,
    pub(super) opened: Instant,
}

/// A trace file that cannot be created. The message says what to do; the I/O error is kept
/// for the stop reason (not as a source, which would print it twice).
#[derive(Debug, thiserror::Error)]
#[error("cannot write the trace file {}: {io} (choose a writable --output path)", path.display())]
pub(super) struct CannotCreate {
    path: PathBuf,
    pub(super) io: io::Error,
}

/// A file (or recorder segment) created, not yet the open one.
pub(super) struct NextFile {
    output: Output,
    header: TraceHeader,
    path: Option<PathBuf>,
}

/// A file ended: its trailer still to write, and its data to sync (blocking calls, which a
/// rotation makes away from the runtime's thread).
pub(super) struct Closing {
    writer: TraceWriter,
    hlog: Option<HlogWriter>,
    trailer: TraceTrailer,
}

impl Closing {
    /// Write the trailer and sync; the path, its records and its bytes (0 if the trailer could
    /// not be written).
    pub(super) fn finish(self) -> (PathBuf, u64, u64) {
        if let Some(mut h) = self.hlog
            && let Err(e) = h.flush()
        {
            eprintln!("blkprof-trace: warning: writing the .hlog failed: {e}");
        }
        let path = self.writer.path().to_owned();
        let records = self.trailer.records_in_file;
        match self.writer.finish(&self.trailer) {
            Ok(bytes) => (path, records, bytes),
            Err(e) => {
                eprintln!("blkprof-trace: {e}; the file is readable up to its last complete chunk");
                (path, records, 0)
            }
        }
    }
}

/// Delete files `--keep` let go of, with their .hlog. What it cannot delete stays: a file
/// already gone (removed by hand) is what it wants, and one it cannot delete is no reason to
/// stop tracing.
pub(super) fn remove_files(paths: &[PathBuf]) {
    for p in paths {
        #[expect(clippy::let_underscore_must_use, reason = "see the function's comment")]
        let _ = std::fs::remove_file(p);
        #[expect(clippy::let_underscore_must_use, reason = "see the function's comment")]
        let _ = std::fs::remove_file(p.with_extension("hlog"));
    }
}

impl Run {
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

    /// The header of file `seq`. The run's first file starts at the start's cut, where nothing
    /// is aggregated yet and the loss counters are those read as it was set; a rotated file at
    /// the rotation's cut `start_at`, with the aggregates and diskstats of that instant (set by
    /// `rotate`).
    fn header_for(&mut self, seq: u32, start_at: Option<u64>) -> Result<TraceHeader> {
        let mut header = TraceHeader {
            format_version: tracer_common::format::FORMAT_VERSION,
            tracer_version: tracer_common::VERSION.into(),
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
            sequence: seq,
            aggregates_start: match self.start_aggregates.take() {
                Some(a) => a,
                None if seq == 0 && self.start_cut.is_some() => Vec::new(),
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
        if seq > 0 {
            // A rotated file starts at its cut's instant, on the same clocks.
            let (w, m) = clock::clock_pair();
            let at = start_at.map_or(m, |at| at.min(m));
            header.wall_clock_start_ns = w.saturating_sub_unsigned(m - at);
            header.monotonic_base_ns = at;
        }
        // Each file its own: a rotated file may start after a daylight-saving change.
        (header.utc_offset_s, header.time_zone) = clock::local_zone(header.wall_clock_start_ns);
        Ok(header)
    }

    /// Create file `seq` (or the flight recorder's next segment), starting at `start_at` if
    /// it is a rotation's; None when the run writes neither.
    pub(super) fn create_output(
        &mut self,
        seq: u32,
        start_at: Option<u64>,
    ) -> Result<Option<NextFile>> {
        let path = self.file_path(seq);
        if path.is_none() && self.recorder.is_none() {
            return Ok(None);
        }
        let header = self.header_for(seq, start_at)?;
        let Some(path) = path else {
            // The flight recorder's next segment: frames in memory, the header kept beside.
            return Ok(Some(NextFile {
                output: Output {
                    writer: Writer::Memory(TraceWriter::in_memory()),
                    hlog: None,
                    opened: Instant::now(),
                },
                header,
                path: None,
            }));
        };
        let writer = TraceWriter::create(&path, &header).map_err(|e| match e {
            FormatError::Io { path, source } => {
                anyhow::Error::new(CannotCreate { path, io: source })
            }
            e => e.into(),
        })?;
        let hlog_path = path.with_extension("hlog");
        let hlog = HlogWriter::create(&hlog_path, header.wall_clock_start_ns)
            .with_context(|| format!("cannot write {}", hlog_path.display()))?;
        Ok(Some(NextFile {
            output: Output {
                writer: Writer::File(writer),
                hlog: Some(hlog),
                opened: Instant::now(),
            },
            header,
            path: Some(path),
        }))
    }

    /// Make `next` the open file: the records from here go to it.
    pub(super) fn install(&mut self, next: Option<NextFile>) {
        // Each file (and recorder segment) names the cgroups and files of its own records.
        self.cgroups_named.new_file();
        self.last_cgroups = None;
        if let Some(f) = &mut self.file_names {
            f.new_file();
        }
        let Some(next) = next else {
            return;
        };
        self.header = next.header;
        self.output = Some(next.output);
        if let Some(path) = next.path {
            self.files.push_back(path);
        }
        self.filtered_out_file = 0;
    }

    /// Open the run's first file.
    pub(super) fn open_output(&mut self) -> Result<()> {
        let next = self.create_output(self.seq, None)?;
        self.install(next);
        Ok(())
    }

    /// End the open file: its trailer, saying `reason`, is returned to be written (a
    /// recorder segment goes to the recorder, complete).
    pub(super) fn end_file(
        &mut self,
        reason: &str,
        diskstats_end: Vec<DiskStats>,
        aggregates_end: Vec<AggregateSnapshot>,
        counters_end: ProbeCounters,
    ) -> Option<Closing> {
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
        match out.writer {
            Writer::File(writer) => Some(Closing {
                writer,
                hlog: out.hlog,
                trailer,
            }),
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
                None
            }
        }
    }

    /// `--keep`: the oldest files beyond it, taken off the list, to delete.
    pub(super) fn beyond_keep(&mut self) -> Vec<PathBuf> {
        let mut old = Vec::new();
        if let Some(keep) = self.cfg.keep {
            while self.files.len() > keep {
                old.extend(self.files.pop_front());
            }
        }
        old
    }
}
