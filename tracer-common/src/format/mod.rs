//! The blkprof trace file format, version 5 (versions 1 to 4 are still read). Specified in
//! `docs/trace-format.md`; this module is the one implementation of it, used by the tracer
//! (writer) and the analyzer (reader).
//!
//! A file is a magic, then frames. Each frame carries a CRC-32 of its payload, so a file cut
//! short (tracer killed, disk full) reads back up to its last whole frame, and corruption is
//! detected and located rather than silently decoded.
//!
//! | file | what |
//! |---|---|
//! | `meta.rs` | the JSON frames: header, device, stats, trailer, and what they hold |
//! | `record.rs` | [`IoRecord`], one IO as stored and decoded |
//! | `frames.rs` | the file start, frame kinds and the frame head (length, CRC) |
//! | `codec.rs` | varints, zigzag, the bit packing of a block, the cursor the decoders read with |
//! | `chunk.rs` | the start of a records frame: count, base time, device and task tables |
//! | `columns.rs` | the one mapping between an [`IoRecord`] and its column values |
//! | `v2.rs`, `v1.rs` | how a records frame lays the columns out, in each version |
//! | `writer.rs`, `reader.rs` | [`TraceWriter`], [`TraceReader`] |

use std::io;
use std::path::PathBuf;

mod chunk;
mod codec;
mod columns;
mod frames;
mod meta;
mod reader;
mod record;
#[cfg(test)]
mod tests;
#[cfg(feature = "v1")]
mod v1;
mod v2;
mod writer;

pub use crate::diskstats::{DiskStats, parse_diskstats};
pub use crate::time::rfc3339;
/// Unsigned LEB128, as the format writes its varints (the exports write Protocol Buffers' and
/// Parquet's with it).
pub use codec::put_varint;
pub use frames::FrameKind;
pub use meta::{
    AggregateSnapshot, ArrayInfo, ArrayMember, CgroupInfo, Cut, CutDevice, DeviceInfo, FileInfo,
    Filters, HwQueue, OwnerCgroups, ProbeCounters, ProgramStats, QueueSettings, StatsFrame,
    TraceHeader, TraceTrailer,
};
pub use reader::{Ending, Scan, TraceReader};
pub use record::{IoRecord, Task, comm_bytes};
pub use writer::{Blocks, TraceWriter};

pub const MAGIC: &[u8; 8] = b"BLKPTRC\0";
pub const FORMAT_VERSION: u16 = 5;
/// The oldest version this build still reads: 1 (records as zstd-compressed varints) with the
/// `v1` feature, else 2.
pub const OLDEST_READABLE_VERSION: u16 = if cfg!(feature = "v1") { 1 } else { 2 };
/// Largest frame payload a reader accepts (guards against a corrupt length).
pub const MAX_FRAME_BYTES: u32 = 256 << 20;

/// Records per chunk before it is written: 8192 records decode into about 600 KB, which stays
/// in a core's L2 cache while the analyzer works through them.
pub const DEFAULT_CHUNK_RECORDS: usize = 8192;

/// Records per bit-packed block of a version 2 chunk.
pub const BLOCK_RECORDS: usize = 128;

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
    #[error(
        "{path}: a version 1 trace (records compressed with zstd): this build reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}; blkprof (the analyzer) reads it"
    )]
    NeedsV1 { path: PathBuf },
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
