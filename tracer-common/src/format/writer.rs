//! [`TraceWriter`]: streams a trace file, one records frame per chunk of records.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::chunk::TableBuilder;
use super::columns::{Deltas, NCOLS, to_row};
use super::frames::{FrameHead, FrameKind, file_start};
use super::meta::{CgroupInfo, DeviceInfo, FileInfo, StatsFrame, TraceHeader, TraceTrailer};
use super::record::IoRecord;
use super::{DEFAULT_CHUNK_RECORDS, FORMAT_VERSION, FormatError, v2};

/// Where a [`TraceWriter`]'s frames go: a file, or memory (the tracer's flight recorder keeps
/// the frames of its recent past and writes them out as a file on demand).
pub trait Sink: Write {
    /// Make what was written durable (fsync for a file).
    fn sync(&mut self) -> io::Result<()>;
}

impl Sink for BufWriter<File> {
    fn sync(&mut self) -> io::Result<()> {
        self.get_ref().sync_all()
    }
}

/// Bytes in memory as blocks of one size ([`Blocks::BLOCK`]), never one growing vector: a
/// process that keeps minutes of frames and drops the oldest (the flight recorder) then frees
/// and reuses allocations of a single size, and its memory stays flat (measured: with
/// vectors that doubled as they grew, the tracer's RSS crept up 55 MB over 20 minutes after
/// its window had filled).
#[derive(Default)]
pub struct Blocks {
    full: Vec<Vec<u8>>,
    cur: Vec<u8>,
}

impl Blocks {
    pub const BLOCK: usize = 256 << 10;

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.full.len() * Self::BLOCK + self.cur.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, in order, as slices.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        self.full
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(self.cur.as_slice()))
    }
}

impl Write for Blocks {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let n = buf.len();
        while !buf.is_empty() {
            if self.cur.capacity() == 0 {
                self.cur = Vec::with_capacity(Self::BLOCK);
            }
            let take = (Self::BLOCK - self.cur.len()).min(buf.len());
            self.cur.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.cur.len() == Self::BLOCK {
                self.full.push(std::mem::take(&mut self.cur));
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink for Blocks {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Streams a trace file. Frames are written whole; call [`TraceWriter::flush_chunk`] to bound
/// what a SIGKILL can lose.
pub struct TraceWriter<S: Sink = BufWriter<File>> {
    path: PathBuf,
    out: S,
    /// The current chunk, one vector per column (see [`NCOLS`]).
    cols: [Vec<u64>; NCOLS],
    /// Error and requeue values of the current chunk, varints in record order.
    extras: Vec<u8>,
    count: u32,
    base_ns: u64,
    deltas: Deltas,
    tables: TableBuilder,
    body: Vec<u8>,
    records_in_file: u64,
    bytes_written: u64,
}

impl TraceWriter {
    pub fn create(path: &Path, header: &TraceHeader) -> Result<TraceWriter, FormatError> {
        let file = File::create(path).map_err(|source| FormatError::Io {
            path: path.to_owned(),
            source,
        })?;
        TraceWriter::on_file(path, file, header)
    }

    /// A trace written to `file`, opened by the caller (who chose how: the tracer creates
    /// its files private and never through a link); `path` names it in messages.
    pub fn on_file(
        path: &Path,
        file: File,
        header: &TraceHeader,
    ) -> Result<TraceWriter, FormatError> {
        let io_err = |source| FormatError::Io {
            path: path.to_owned(),
            source,
        };
        let mut w = TraceWriter::with_sink(path, BufWriter::with_capacity(1 << 20, file));
        let start = file_start(FORMAT_VERSION);
        w.out.write_all(&start).map_err(io_err)?;
        w.bytes_written += start.len() as u64;
        let mut header = header.clone();
        header.format_version = FORMAT_VERSION;
        w.write_json(FrameKind::Header, &header)?;
        Ok(w)
    }
}

impl TraceWriter<Blocks> {
    /// Frames in memory, without the file's start and header: a stretch of a trace that
    /// [`TraceWriter::append_frames`] puts into a file later.
    pub fn in_memory() -> TraceWriter<Blocks> {
        TraceWriter::with_sink(Path::new("(memory)"), Blocks::default())
    }

    /// The frames written, the open chunk included.
    pub fn into_frames(mut self) -> Result<Blocks, FormatError> {
        self.flush_chunk()?;
        Ok(self.out)
    }
}

impl<S: Sink> TraceWriter<S> {
    fn with_sink(path: &Path, out: S) -> TraceWriter<S> {
        TraceWriter {
            path: path.to_owned(),
            out,
            cols: std::array::from_fn(|_| Vec::with_capacity(DEFAULT_CHUNK_RECORDS)),
            extras: Vec::new(),
            count: 0,
            base_ns: 0,
            deltas: Deltas::start(0),
            tables: TableBuilder::default(),
            body: Vec::with_capacity(1 << 20),
            records_in_file: 0,
            bytes_written: 0,
        }
    }

    /// Append frames written by an in-memory writer (see [`TraceWriter::in_memory`]) holding
    /// `records` records, after this writer's own.
    pub fn append_frames(&mut self, frames: &Blocks, records: u64) -> Result<(), FormatError> {
        self.flush_chunk()?;
        for s in frames.slices() {
            self.out.write_all(s).map_err(|e| self.io_err(e))?;
        }
        self.bytes_written += frames.len() as u64;
        self.records_in_file += records;
        Ok(())
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
        let Some(head) = FrameHead::encode(kind, payload) else {
            return Err(self.io_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame larger than 4 GiB",
            )));
        };
        let r = self
            .out
            .write_all(&head)
            .and_then(|()| self.out.write_all(payload));
        r.map_err(|e| self.io_err(e))?;
        self.bytes_written += (head.len() + payload.len()) as u64;
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
            self.deltas = Deltas::start(r.complete_ns);
        }
        let dev = self.tables.dev(r.dev);
        let task = self.tables.task(r.pid, comm, r.cgroup, r.owner_cgroup);
        let file = self.tables.file(r.file_dev, r.file_ino);
        let row = to_row(r, dev, task, file, &mut self.deltas, &mut self.extras);
        for (col, v) in self.cols.iter_mut().zip(row) {
            col.push(v);
        }
        self.count += 1;
        self.records_in_file += 1;
        if self.count as usize >= DEFAULT_CHUNK_RECORDS {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Encode and write the buffered records as one frame, and hand it to the OS.
    pub fn flush_chunk(&mut self) -> Result<(), FormatError> {
        if self.count > 0 {
            let mut body = std::mem::take(&mut self.body);
            body.clear();
            v2::encode(
                &mut body,
                &self.tables,
                self.count,
                self.base_ns,
                &self.extras,
                &self.cols,
            );
            self.write_frame(FrameKind::Records, &body)?;
            self.body = body;
            for col in &mut self.cols {
                col.clear();
            }
            self.extras.clear();
            self.count = 0;
            self.tables.clear();
        }
        self.out.flush().map_err(|e| self.io_err(e))
    }

    pub fn write_device(&mut self, dev: &DeviceInfo) -> Result<(), FormatError> {
        self.write_json(FrameKind::Device, dev)
    }

    /// Name a cgroup before the records of it that follow (frames are read in order).
    pub fn write_cgroup(&mut self, cg: &CgroupInfo) -> Result<(), FormatError> {
        self.write_json(FrameKind::Cgroup, cg)
    }

    /// Name a file before the records of it that follow.
    pub fn write_file(&mut self, f: &FileInfo) -> Result<(), FormatError> {
        self.write_json(FrameKind::File, f)
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
        self.out.sync().map_err(|e| self.io_err(e))?;
        Ok(self.bytes_written)
    }
}
