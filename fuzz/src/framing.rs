//! The `trace_reader` target's input encoding, so that mutations reach the record decoders
//! instead of failing a frame's checksum (or, in version 1, zstd). Shared by the fuzz crate,
//! the regression test (analyzer/tests/fuzz_regressions.rs) and the seed generator
//! (xtask/src/fuzz.rs), which include this file; it needs `tracer_common`, `zstd` and
//! `crc32fast`.
//!
//! An input that starts with the trace magic is the file itself: real traces are seeds as they
//! are. Any other input is *framed*: byte 0 picks the format version (even: 1, odd: 2), then
//! frames follow as (kind: u8, length: u32 LE, payload). [`trace_file`] writes what the tracer
//! would write: the file head, each frame's head with its checksum, and in version 1 a records
//! payload as its length and zstd. A length beyond the input's end writes that frame cut
//! short (a truncated file). docs/trace-format.md describes the file format.

use tracer_common::format::{FrameKind, MAGIC};

const RECORDS: u8 = FrameKind::Records as u8;

/// The trace file an input stands for.
pub fn trace_file(data: &[u8]) -> Vec<u8> {
    if data.starts_with(MAGIC) {
        return data.to_vec();
    }
    let Some((&pick, mut rest)) = data.split_first() else {
        return Vec::new();
    };
    let version: u16 = if pick & 1 == 0 { 1 } else { 2 };
    let mut out = Vec::with_capacity(data.len() + 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    while rest.len() >= 5 {
        let kind = rest[0];
        let len = u32::from_le_bytes(rest[1..5].try_into().expect("4 bytes")) as usize;
        rest = &rest[5..];
        let (payload, cut) = if len <= rest.len() {
            (&rest[..len], false)
        } else {
            (rest, true)
        };
        rest = &rest[payload.len()..];
        let payload = if version == 1 && kind == RECORDS && !cut {
            let mut p = (payload.len() as u32).to_le_bytes().to_vec();
            p.extend(zstd::bulk::compress(payload, 1).expect("zstd compresses any bytes"));
            p
        } else {
            payload.to_vec()
        };
        let mut head = [0u8; 12];
        head[0] = kind;
        let declared = if cut { len } else { payload.len() };
        head[4..8].copy_from_slice(&(declared as u32).to_le_bytes());
        head[8..12].copy_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&payload);
    }
    out
}

/// The framed input for a whole trace file (the inverse of [`trace_file`]), keeping the frames
/// after the header that `keep` says yes to, called in order with each frame's kind and
/// payload length; `None` when the file is not a whole trace.
pub fn framed(file: &[u8], mut keep: impl FnMut(u8, usize) -> bool) -> Option<Vec<u8>> {
    if file.len() < 12 || &file[..8] != MAGIC {
        return None;
    }
    let version = u16::from_le_bytes([file[8], file[9]]);
    let mut out = vec![if version == 1 { 0 } else { 1 }];
    let mut off = 12;
    while off < file.len() {
        let head = file.get(off..off + 12)?;
        let kind = head[0];
        let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
        let payload = file.get(off + 12..off + 12 + len)?;
        let first = off == 12;
        off += 12 + len;
        if !first && !keep(kind, len) {
            continue;
        }
        let payload = if version == 1 && kind == RECORDS {
            let raw_len = u32::from_le_bytes(payload.get(..4)?.try_into().expect("4 bytes"));
            zstd::bulk::decompress(&payload[4..], raw_len as usize).ok()?
        } else {
            payload.to_vec()
        };
        out.push(kind);
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&payload);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_trace_survives_framing() {
        let golden = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/data/cassandra-shaped-a.blkp"
        );
        let file = std::fs::read(golden).unwrap();
        let f = framed(&file, |_, _| true).unwrap();
        assert_eq!(f[0], 0, "version 1");
        // zstd at level 1 need not give the tracer's bytes: compare the frames decoded.
        assert_eq!(framed(&trace_file(&f), |_, _| true).unwrap(), f);
        assert_eq!(trace_file(&file), file);
    }
}
