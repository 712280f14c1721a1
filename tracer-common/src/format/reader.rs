//! [`TraceReader`]: streams a trace file chunk by chunk, whatever its version; a file cut
//! short or damaged reads up to its last good frame and says how it ended.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::chunk::TaskIds;
use super::frames::{FrameHead, FrameKind, HEAD_BYTES, START_BYTES, version_of_start};
use super::meta::{CgroupInfo, DeviceInfo, FileInfo, StatsFrame, TraceHeader, TraceTrailer};
use super::record::{IoRecord, Task};
#[cfg(feature = "v1")]
use super::v1;
use super::{FORMAT_VERSION, FormatError, MAX_FRAME_BYTES, OLDEST_READABLE_VERSION, v2};

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

/// Streams a trace file chunk by chunk; memory use is one chunk.
pub struct TraceReader {
    path: PathBuf,
    input: BufReader<File>,
    offset: u64,
    frame_no: u64,
    header: TraceHeader,
    devices: Vec<DeviceInfo>,
    cgroups: std::collections::BTreeMap<u64, String>,
    /// Paths of the files named so far, by (file system, inode).
    files: std::collections::HashMap<(u32, u64), String>,
    trailer: Option<TraceTrailer>,
    last_stats: Option<StatsFrame>,
    task_ids: TaskIds,
    ending: Ending,
    payload: Vec<u8>,
    #[cfg(feature = "v1")]
    raw: Vec<u8>,
    #[cfg(feature = "v1")]
    decompressor: zstd::bulk::Decompressor<'static>,
    pub(super) version: u16,
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
        let mut start = [0u8; START_BYTES];
        if let Err(e) = input.read_exact(&mut start) {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                return Err(FormatError::NotATrace {
                    path: path.to_owned(),
                });
            }
            return Err(io_err(e));
        }
        let Some(version) = version_of_start(&start) else {
            return Err(FormatError::NotATrace {
                path: path.to_owned(),
            });
        };
        if version == 1 && !cfg!(feature = "v1") {
            return Err(FormatError::NeedsV1 {
                path: path.to_owned(),
            });
        }
        if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(FormatError::UnknownVersion {
                path: path.to_owned(),
                found: version,
            });
        }
        let mut r = TraceReader {
            path: path.to_owned(),
            input,
            offset: START_BYTES as u64,
            frame_no: 0,
            header: TraceHeader::default(),
            devices: Vec::new(),
            cgroups: std::collections::BTreeMap::default(),
            files: std::collections::HashMap::default(),
            trailer: None,
            last_stats: None,
            task_ids: TaskIds {
                cgroups: version >= 3,
                owners: version >= 5,
                ..TaskIds::default()
            },
            ending: Ending::Unread,
            payload: Vec::new(),
            #[cfg(feature = "v1")]
            raw: Vec::new(),
            #[cfg(feature = "v1")]
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
                r.offset += (HEAD_BYTES + r.payload.len()) as u64;
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

    /// The path of a cgroup the records read so far name, if the trace gave it.
    pub fn cgroup_path(&self, id: u64) -> Option<&str> {
        self.cgroups.get(&id).map(String::as_str)
    }

    /// The path of a file the records read so far name, if the trace gave it.
    pub fn file_path(&self, dev: u32, ino: u64) -> Option<&str> {
        self.files.get(&(dev, ino)).map(String::as_str)
    }

    /// A file by the id records carry ([`IoRecord::file_id`]): its file system, inode and,
    /// once named, path. Ids count from 1 in the order files are met, each file its own: an
    /// inode number named anew is a new id, so the IO of a deleted file and of the file that
    /// took its inode number are told apart.
    pub fn file(&self, id: u32) -> Option<(u32, u64, Option<&str>)> {
        let (dev, ino, path) = self.task_ids.files.get((id as usize).checked_sub(1)?)?;
        Some((*dev, *ino, path.as_deref()))
    }

    /// Every file named so far: (file system, inode) to path.
    pub fn files(&self) -> &std::collections::HashMap<(u32, u64), String> {
        &self.files
    }

    /// Every cgroup named so far: (id, path).
    pub fn cgroups(&self) -> &std::collections::BTreeMap<u64, String> {
        &self.cgroups
    }
    pub fn tasks(&self) -> &[Task] {
        &self.task_ids.tasks
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
            let mut head = [0u8; HEAD_BYTES];
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
            let head = FrameHead::decode(&head);
            let end = off + HEAD_BYTES as u64 + u64::from(head.len);
            if head.len > MAX_FRAME_BYTES || end > self.file_len {
                break;
            }
            let kind = head.kind();
            if matches!(
                kind,
                Some(FrameKind::Stats | FrameKind::Trailer | FrameKind::Device)
            ) {
                payload.resize(head.len as usize, 0);
                if file
                    .read_exact_at(&mut payload, off + HEAD_BYTES as u64)
                    .is_err()
                    || !head.checks(&payload)
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
        let mut head = [0u8; HEAD_BYTES];
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
        let head = FrameHead::decode(&head);
        let (kind, len) = (head.kind(), head.len);
        if len > MAX_FRAME_BYTES {
            return Err(self.corrupt(format!("frame length {len} is implausible")));
        }
        if self.offset + HEAD_BYTES as u64 + u64::from(len) > self.file_len {
            return Ok(Frame::Partial);
        }
        self.payload.resize(len as usize, 0);
        self.input
            .read_exact(&mut self.payload)
            .map_err(|e| FormatError::Io {
                path: self.path.clone(),
                source: e,
            })?;
        if !head.checks(&self.payload) {
            return Err(self.corrupt(match kind {
                Some(_) => "checksum mismatch".to_string(),
                None => format!(
                    "unknown frame kind {} and checksum mismatch",
                    head.kind_byte
                ),
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
                    self.offset += (HEAD_BYTES + self.payload.len()) as u64;
                    self.frame_no += 1;
                    self.skipped_frames += 1;
                }
                Frame::Whole(kind) => {
                    self.offset += (HEAD_BYTES + self.payload.len()) as u64;
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
                        FrameKind::Cgroup => self.parse_json::<CgroupInfo>().map(|c| {
                            self.cgroups.insert(c.id, c.path);
                            false
                        }),
                        FrameKind::File => self.parse_json::<FileInfo>().map(|f| {
                            self.task_ids.name_file(f.dev, f.ino, &f.path);
                            self.files.insert((f.dev, f.ino), f.path);
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
        #[cfg(feature = "v1")]
        let res = if self.version >= 2 {
            v2::decode(&self.payload, self.version, &mut self.task_ids, out)
        } else {
            v1::decode(
                &self.payload,
                &mut self.decompressor,
                &mut self.raw,
                &mut self.task_ids,
                out,
            )
        };
        // Opening refused version 1.
        #[cfg(not(feature = "v1"))]
        let res = v2::decode(&self.payload, self.version, &mut self.task_ids, out);
        match res {
            Ok(count) => {
                self.records_read += u64::from(count);
                Ok(())
            }
            Err(reason) => Err(self.corrupt(reason)),
        }
    }
}
