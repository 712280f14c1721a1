//! The file start and the frames: a file is [`MAGIC`], the format version and two reserved
//! bytes, then frames, each a 12-byte head (kind, three reserved bytes, payload length,
//! CRC-32 of the payload) and its payload.

use super::MAGIC;

/// Bytes of the file start: magic, version (u16 LE), two reserved bytes.
pub(super) const START_BYTES: usize = 12;
/// Bytes of a frame head.
pub(super) const HEAD_BYTES: usize = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    Header = 1,
    Records = 2,
    Device = 3,
    Stats = 4,
    Trailer = 5,
    /// A cgroup the records name: its v2 id and path, written before the first record of it.
    Cgroup = 6,
    /// A file the records name: its file system, inode and path, written before the first
    /// record of it (format version 5 on).
    File = 7,
}

impl FrameKind {
    pub(super) fn from_u8(v: u8) -> Option<FrameKind> {
        Some(match v {
            1 => FrameKind::Header,
            2 => FrameKind::Records,
            3 => FrameKind::Device,
            4 => FrameKind::Stats,
            5 => FrameKind::Trailer,
            6 => FrameKind::Cgroup,
            7 => FrameKind::File,
            _ => return None,
        })
    }
}

/// The start of a file of format `version`.
pub(super) fn file_start(version: u16) -> [u8; START_BYTES] {
    let mut start = [0u8; START_BYTES];
    start[..8].copy_from_slice(MAGIC);
    start[8..10].copy_from_slice(&version.to_le_bytes());
    start
}

/// The version of a file start, or `None` if it is not a trace's (bad magic).
pub(super) fn version_of_start(start: &[u8; START_BYTES]) -> Option<u16> {
    (&start[..8] == MAGIC).then(|| u16::from_le_bytes([start[8], start[9]]))
}

/// A frame head as read: the kind byte as stored (a newer tracer may write kinds this build
/// does not know), the payload's length and checksum.
pub(super) struct FrameHead {
    pub kind_byte: u8,
    pub len: u32,
    pub crc: u32,
}

impl FrameHead {
    /// The head of a frame of `kind` carrying `payload`; `None` if its length does not fit in
    /// a u32.
    pub(super) fn encode(kind: FrameKind, payload: &[u8]) -> Option<[u8; HEAD_BYTES]> {
        let len = u32::try_from(payload.len()).ok()?;
        let mut head = [0u8; HEAD_BYTES];
        head[0] = kind as u8;
        head[4..8].copy_from_slice(&len.to_le_bytes());
        head[8..12].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
        Some(head)
    }

    pub(super) fn decode(head: &[u8; HEAD_BYTES]) -> FrameHead {
        FrameHead {
            kind_byte: head[0],
            len: u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")),
            crc: u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")),
        }
    }

    pub(super) fn kind(&self) -> Option<FrameKind> {
        FrameKind::from_u8(self.kind_byte)
    }

    /// Whether `payload` is the one this head's checksum was computed over.
    pub(super) fn checks(&self, payload: &[u8]) -> bool {
        crc32fast::hash(payload) == self.crc
    }
}
