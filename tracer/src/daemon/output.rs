//! The output: the open trace file (and its .hlog) or flight-recorder segment, how the next
//! one is created, how one is closed, and `--keep`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};
use tracer_common::format::{
    AggregateSnapshot, Blocks, CgroupInfo, DeviceInfo, DiskStats, FileInfo, Filters, FormatError,
    IoRecord, ProbeCounters, TraceHeader, TraceTrailer, TraceWriter,
};

use super::Run;
use crate::clock;
use crate::outdir::OutDir;
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
    name: Option<OsString>,
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
pub(super) fn remove_files(dir: &OutDir, names: &[OsString]) {
    for n in names {
        #[expect(clippy::let_underscore_must_use, reason = "see the function's comment")]
        let _ = dir.remove(n);
        #[expect(clippy::let_underscore_must_use, reason = "see the function's comment")]
        let _ = dir.remove(Path::new(n).with_extension("hlog").as_os_str());
    }
}

/// The trace file and .hlog of the next file, created before the cut that starts it: a file
/// that cannot be created leaves the run as it was.
#[derive(Debug)]
pub(super) struct Prepared {
    name: OsString,
    trace: File,
    hlog: File,
}

/// Where the run's files go: `--output`'s directory held open, how they are named, and the
/// number of the run's first rotated file (after the highest one already there, so a restart
/// never overwrites the files of an earlier run).
pub(super) struct OutFiles {
    pub(super) dir: Arc<OutDir>,
    name: OsString,
    rotating: bool,
    first_number: u64,
}

/// `STEM.NNNNNN.EXT` of a rotated `--output STEM.EXT`.
fn numbered(stem: &str, ext: &str, n: u64) -> OsString {
    format!("{stem}.{n:06}.{ext}").into()
}

/// The number of `name` if it is one of `STEM.NNNNNN.EXT`.
fn number_of(stem: &str, ext: &str, name: &OsStr) -> Option<u64> {
    let n = name.to_str()?.strip_prefix(stem)?.strip_prefix('.')?;
    let n = n.strip_suffix(ext)?.strip_suffix('.')?;
    (n.len() >= 6 && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

impl OutFiles {
    /// `--output`'s directory opened, and the files of earlier runs with the same name
    /// pattern (oldest first), which `--keep` counts with this run's.
    pub(super) fn open(output: &Path, rotating: bool) -> Result<(OutFiles, Vec<OsString>)> {
        let parent = output.parent().unwrap_or(Path::new(""));
        let name = output
            .file_name()
            .with_context(|| format!("--output {}: not a file name", output.display()))?
            .to_owned();
        let dir = OutDir::open(parent).map_err(|e| {
            let shown = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            let why = if e.kind() == io::ErrorKind::NotFound {
                " does not exist".to_string()
            } else {
                format!(": {e}")
            };
            anyhow::anyhow!(
                "cannot write the trace file {}: directory {}{why}",
                output.display(),
                shown.display()
            )
        })?;
        let mut files = OutFiles {
            dir: Arc::new(dir),
            name,
            rotating,
            first_number: 0,
        };
        let mut earlier = Vec::new();
        if rotating {
            let (stem, ext) = files.stem_ext();
            let names = files.dir.names().with_context(|| {
                format!(
                    "cannot list {} for earlier files",
                    files.dir.path().display()
                )
            })?;
            let mut found: Vec<(u64, OsString)> = names
                .into_iter()
                .filter_map(|n| Some((number_of(&stem, &ext, &n)?, n)))
                .collect();
            found.sort_unstable();
            files.first_number = found.last().map_or(0, |(n, _)| n + 1);
            earlier = found.into_iter().map(|(_, n)| n).collect();
        }
        Ok((files, earlier))
    }

    fn stem_ext(&self) -> (String, String) {
        let p = Path::new(&self.name);
        let stem = p
            .file_stem()
            .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
        let ext = p
            .extension()
            .map_or_else(|| "blkp".into(), |s| s.to_string_lossy().into_owned());
        (stem, ext)
    }

    /// The name of the run's file `seq`.
    fn name_of(&self, seq: u32) -> OsString {
        if !self.rotating {
            return self.name.clone();
        }
        let (stem, ext) = self.stem_ext();
        numbered(&stem, &ext, self.first_number + u64::from(seq))
    }

    /// Create file `seq` and its .hlog. A rerun of one `--output` replaces its regular
    /// files; a rotated file is always new: a name taken (by another writer, or a link
    /// planted there) is skipped, the numbers after it shift.
    pub(super) fn prepare(&mut self, seq: u32) -> Result<Prepared> {
        let mut skipped = 0;
        loop {
            let name = self.name_of(seq);
            let hlog_name = Path::new(&name).with_extension("hlog").into_os_string();
            let create = |n: &OsStr| {
                if self.rotating {
                    self.dir.create_new(n)
                } else {
                    self.dir.replace(n)
                }
            };
            let cannot = |n: &OsStr, io: io::Error| {
                anyhow::Error::new(CannotCreate {
                    path: self.dir.join(n),
                    io,
                })
            };
            let trace = match create(&name) {
                Ok(f) => f,
                Err(e)
                    if self.rotating
                        && e.kind() == io::ErrorKind::AlreadyExists
                        && skipped < 100 =>
                {
                    eprintln!(
                        "blkprof-trace: warning: {} is already there (not written by this run): skipping its number",
                        self.dir.join(&name).display()
                    );
                    self.first_number += 1;
                    skipped += 1;
                    continue;
                }
                Err(e) => return Err(cannot(&name, e)),
            };
            let hlog = match create(&hlog_name) {
                Ok(f) => f,
                Err(e) => {
                    // Not left behind: a retry creates both again.
                    #[expect(
                        clippy::let_underscore_must_use,
                        reason = "the file just created; the error that matters is the .hlog's"
                    )]
                    let _ = self.dir.remove(&name);
                    return Err(cannot(&hlog_name, e));
                }
            };
            return Ok(Prepared { name, trace, hlog });
        }
    }
}

impl Run {
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

    /// The open file's successor `seq` (or the flight recorder's next segment), starting at
    /// `start_at` if it is a rotation's, on the files `prepared` before its cut; None when
    /// the run writes neither.
    pub(super) fn create_output(
        &mut self,
        seq: u32,
        start_at: Option<u64>,
        prepared: Option<Prepared>,
    ) -> Result<Option<NextFile>> {
        if prepared.is_none() && self.recorder.is_none() {
            return Ok(None);
        }
        let header = self.header_for(seq, start_at)?;
        let Some(p) = prepared else {
            // The flight recorder's next segment: frames in memory, the header kept beside.
            return Ok(Some(NextFile {
                output: Output {
                    writer: Writer::Memory(TraceWriter::in_memory()),
                    hlog: None,
                    opened: Instant::now(),
                },
                header,
                name: None,
            }));
        };
        let dir = self
            .out
            .as_ref()
            .map(|o| o.dir.clone())
            .context("no output directory")?;
        let path = dir.join(&p.name);
        let writer = TraceWriter::on_file(&path, p.trace, &header).map_err(|e| match e {
            FormatError::Io { path, source } => {
                anyhow::Error::new(CannotCreate { path, io: source })
            }
            e => e.into(),
        })?;
        let hlog_path = path.with_extension("hlog");
        let hlog = HlogWriter::on_file(p.hlog, header.wall_clock_start_ns)
            .with_context(|| format!("cannot write {}", hlog_path.display()))?;
        Ok(Some(NextFile {
            output: Output {
                writer: Writer::File(writer),
                hlog: Some(hlog),
                opened: Instant::now(),
            },
            header,
            name: Some(p.name),
        }))
    }

    /// The files of the run's file `seq`, if it writes files.
    pub(super) fn prepare_files(&mut self, seq: u32) -> Result<Option<Prepared>> {
        self.out.as_mut().map(|o| o.prepare(seq)).transpose()
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
        if let Some(name) = next.name {
            self.files.push_back(name);
        }
        self.filtered_out_file = 0;
    }

    /// Open the run's first file.
    pub(super) fn open_output(&mut self) -> Result<()> {
        let prepared = self.prepare_files(self.seq)?;
        let next = self.create_output(self.seq, None, prepared)?;
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

    /// With `--keep`, room before the disk fills: while the output's file system has less
    /// free than a margin (the write buffer twice, and four intervals of the trace at the
    /// last one's rate), the oldest kept files go early (never the open one), so that the
    /// trace's writes do not fail. Called at each interval's end.
    pub(super) fn keep_room(&mut self) {
        let written = self.output.as_ref().map_or(0, |o| o.writer.bytes_written());
        let rate = written.saturating_sub(self.written_at_last_tick);
        self.written_at_last_tick = written;
        let (Some(_), Some(out)) = (self.cfg.keep, &self.out) else {
            return;
        };
        let margin = (2 << 20) + 4 * rate;
        while self.files.len() > 1 {
            let Some(free) = out.dir.free_bytes() else {
                return;
            };
            if free >= margin {
                return;
            }
            let Some(old) = self.files.pop_front() else {
                return;
            };
            eprintln!(
                "blkprof-trace: {free} bytes free beside the trace: deleting the oldest kept file {} early",
                out.dir.join(&old).display()
            );
            remove_files(&out.dir, &[old]);
        }
    }

    /// `--keep`: the oldest files beyond it (this run's and earlier runs' of the same name
    /// pattern), taken off the list, to delete.
    pub(super) fn beyond_keep(&mut self) -> Vec<OsString> {
        let mut old = Vec::new();
        if let Some(keep) = self.cfg.keep {
            while self.files.len() > keep {
                old.extend(self.files.pop_front());
            }
        }
        old
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn rotated_names_resume_after_the_highest_and_skip_taken_ones() {
        let t = tempfile::tempdir().unwrap();
        for n in [
            "db.000000.blkp",
            "db.000007.blkp",
            "db.000003.blkp",
            "db.12.blkp",
            "x.000009.blkp",
        ] {
            std::fs::write(t.path().join(n), b"").unwrap();
        }
        let (mut out, earlier) = OutFiles::open(&t.path().join("db.blkp"), true).unwrap();
        assert_eq!(
            earlier,
            ["db.000000.blkp", "db.000003.blkp", "db.000007.blkp"]
        );
        // Something appears at the next name while the run goes on: its number is skipped.
        std::os::unix::fs::symlink("/nowhere", t.path().join("db.000008.blkp")).unwrap();
        let p = out.prepare(0).unwrap();
        assert_eq!(p.name, "db.000009.blkp");
        let mode = std::fs::metadata(t.path().join("db.000009.hlog"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(out.prepare(1).unwrap().name, "db.000010.blkp");

        // One file, not rotated: a rerun replaces it; a link there is refused.
        let (mut one, earlier) = OutFiles::open(&t.path().join("x.000009.blkp"), false).unwrap();
        assert!(earlier.is_empty());
        assert_eq!(one.prepare(0).unwrap().name, "x.000009.blkp");
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("l.blkp")).unwrap();
        let (mut l, _) = OutFiles::open(&t.path().join("l.blkp"), false).unwrap();
        assert!(format!("{:#}", l.prepare(0).unwrap_err()).contains("symbolic link"));
        assert!(OutFiles::open(&t.path().join("none/db.blkp"), false).is_err());
    }
}
