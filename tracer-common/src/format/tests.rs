//! The format as a whole: what the writer writes, the reader reads back, whole or damaged.

use std::path::Path;

use super::*;
use crate::op::{Op, flags};

fn sample(i: u64) -> IoRecord {
    IoRecord {
        complete_ns: 1_000_000 + i * 7919 + (i % 3) * 100_000,
        enter_ns: 900_000 + i * 7919,
        issue_ns: if i.is_multiple_of(17) {
            0
        } else {
            950_000 + i * 7919
        },
        sector: (i * 2_654_435_761) % 4_000_000,
        bytes: if i.is_multiple_of(5) {
            524_288
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
        cgroup: if i.is_multiple_of(3) { 0 } else { 1000 + i % 5 },
        // Writeback: a kworker's IO charged to another cgroup; else its own or unknown.
        owner_cgroup: match i % 4 {
            0 => 0,
            1 => 2000 + i % 3,
            _ => {
                if i.is_multiple_of(3) {
                    0
                } else {
                    1000 + i % 5
                }
            }
        },
        // Files: none, direct IO, the device's page cache, or one of a few files.
        file_dev: match i % 5 {
            0 => 0,
            1 => crate::FILE_DEV_ANON,
            2 => crate::FILE_DEV_DEVICE,
            _ => crate::dev_join(259, 1),
        },
        file_ino: if i % 5 >= 3 { 12 + i % 7 } else { 0 },
        file_id: 0,
        hw_queue: match i % 7 {
            0 => None,
            6 => Some(u16::MAX),
            q => Some(u16::try_from(q - 1).unwrap()),
        },
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
            queue: None,
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
        // Each (file system, inode) is one file, nothing being renamed.
        want.file_id = got.file_id;
        assert_eq!(*got, want, "record {i}");
        assert_eq!(r.tasks()[got.task as usize].comm, format!("task{}", i % 4));
        match r.file(got.file_id) {
            Some((dev, ino, None)) => assert_eq!((dev, ino), (got.file_dev, got.file_ino)),
            other => assert!(
                got.file_dev == 0 && other.is_none(),
                "record {i}: {other:?}"
            ),
        }
    }
    let ids: std::collections::HashSet<(u32, u64, u32)> = all
        .iter()
        .map(|x| (x.file_dev, x.file_ino, x.file_id))
        .collect();
    // None, direct IO, the device's page cache, seven inodes.
    assert_eq!(ids.len(), 10, "{ids:?}");
    assert_eq!(r.trailer().unwrap().records_in_file, n);
}

/// The flight recorder's way: stretches written in memory, then put into one file after its
/// header, read back as if written straight.
#[test]
fn frames_written_in_memory_append_into_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.blkp");
    let n = DEFAULT_CHUNK_RECORDS as u64 + 500;
    let mut stretches = Vec::new();
    for part in 0..3u64 {
        let mut m = TraceWriter::in_memory();
        if part == 1 {
            m.write_device(&DeviceInfo {
                name: "loop1".into(),
                major: 7,
                minor: 1,
                logical_block_size: 512,
                queue: None,
            })
            .unwrap();
        }
        for i in part * n..(part + 1) * n {
            m.push(&sample(i), &comm_bytes("t")).unwrap();
        }
        assert_eq!(m.records_in_file(), n);
        stretches.push(m.into_frames().unwrap());
    }
    let mut w = TraceWriter::create(&path, &header()).unwrap();
    for f in &stretches {
        w.append_frames(f, n).unwrap();
    }
    assert_eq!(w.records_in_file(), 3 * n);
    w.finish(&TraceTrailer {
        records_in_file: 3 * n,
        ..Default::default()
    })
    .unwrap();
    let mut r = TraceReader::open(&path).unwrap();
    let mut all = Vec::new();
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf).unwrap() {
        all.extend_from_slice(&buf);
    }
    assert_eq!(*r.ending(), Ending::Complete);
    assert_eq!(all.len() as u64, 3 * n);
    for (i, got) in all.iter().enumerate() {
        let mut want = sample(i as u64);
        want.task = got.task;
        want.file_id = got.file_id;
        assert_eq!(*got, want, "record {i}");
    }
    assert!(r.devices().iter().any(|d| d.name == "loop1"));
}

/// An inode number named anew (the file deleted, its number reused by another) is another
/// file: the IO of each keeps its own name.
#[test]
fn an_inode_named_anew_is_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.blkp");
    let mut w = TraceWriter::create(&path, &header()).unwrap();
    let fs = crate::dev_join(259, 1);
    let file = |path: &str| FileInfo {
        dev: fs,
        ino: 12,
        path: path.into(),
    };
    let rec = |i: u64| IoRecord {
        file_dev: fs,
        file_ino: 12,
        ..sample(i * 5 + 3)
    };
    // Named, two IOs; named again the same (a new trace file of a rotation would); then the
    // inode is another file's; then an IO of an inode never named.
    w.write_file(&file("/d/nb-1-big-Data.db")).unwrap();
    w.push(&rec(0), &comm_bytes("a")).unwrap();
    w.flush_chunk().unwrap();
    w.write_file(&file("/d/nb-1-big-Data.db")).unwrap();
    w.push(&rec(1), &comm_bytes("a")).unwrap();
    w.flush_chunk().unwrap();
    w.write_file(&file("/d/nb-9-big-Data.db")).unwrap();
    w.push(&rec(2), &comm_bytes("a")).unwrap();
    w.push(
        &IoRecord {
            file_ino: 99,
            ..rec(3)
        },
        &comm_bytes("a"),
    )
    .unwrap();
    w.finish(&TraceTrailer::default()).unwrap();
    let mut r = TraceReader::open(&path).unwrap();
    let mut all = Vec::new();
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf).unwrap() {
        all.extend_from_slice(&buf);
    }
    let names: Vec<(u32, Option<&str>)> = all
        .iter()
        .map(|x| (x.file_id, r.file(x.file_id).and_then(|f| f.2)))
        .collect();
    assert_eq!(
        names,
        [
            (1, Some("/d/nb-1-big-Data.db")),
            (1, Some("/d/nb-1-big-Data.db")),
            (2, Some("/d/nb-9-big-Data.db")),
            (3, None)
        ]
    );
    assert_eq!(r.file(3).map(|f| (f.0, f.1)), Some((fs, 99)));
    assert_eq!(r.file(0), None);
    assert_eq!(r.file(4), None);
    assert_eq!(r.file_path(fs, 12), Some("/d/nb-9-big-Data.db"));
}

/// Values that need every bit width up to 64: times running backwards, sectors at the
/// ends of the u64 range, odd sizes, negative errors, a lone record in the last block.
#[test]
fn extreme_values_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.blkp");
    let mut w = TraceWriter::create(&path, &header()).unwrap();
    let mut want = Vec::new();
    for i in 0..=(2 * BLOCK_RECORDS as u64) {
        let complete = if i % 2 == 0 { u64::MAX - i } else { i };
        let r = IoRecord {
            complete_ns: complete,
            enter_ns: complete / 3,
            issue_ns: complete / 2 + 1,
            sector: if i % 3 == 0 { u64::MAX - 7 } else { i << 40 },
            bytes: if i % 4 == 0 { u32::MAX } else { 511 },
            pid: u32::MAX - u32::try_from(i).unwrap(),
            dev_inflight: u32::MAX,
            os_inflight: u32::try_from(i).unwrap(),
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

/// Without the `v1` feature (the tracer on its own), a version 1 trace is refused by name.
#[cfg(not(feature = "v1"))]
#[test]
fn version_1_needs_the_v1_feature() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/cassandra-ycsb-a.blkp");
    let e = TraceReader::open(&path).err().expect("refused");
    assert!(matches!(e, FormatError::NeedsV1 { .. }), "{e}");
    assert!(
        e.to_string().contains("blkprof (the analyzer) reads it"),
        "{e}"
    );
}

/// Traces written by version 1 (zstd-compressed varints) still read: the golden traces
/// under tests/data are version 1 files.
#[cfg(feature = "v1")]
#[test]
fn version_1_files_still_read() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/cassandra-ycsb-a.blkp");
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
    let mut rng = crate::rng::Rng(0x1234_5678_9ABC_DEF1u64);
    let mut corrupt = 0;
    for _ in 0..400 {
        let x = rng.next_u64();
        let mut bad = good.clone();
        let pos = second_records + 12 + usize::try_from(x % len as u64).unwrap();
        bad[pos] ^= (1u8 << ((x >> 40) % 8)) | 1;
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
    let mut rng = crate::rng::Rng(0x9E37_79B9_7F4A_7C15u64);
    for i in 0..(DEFAULT_CHUNK_RECORDS as u64 * 2 + 777) {
        let x = rng.next_u64();
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
                queue: None,
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
const PINNED_LEN: usize = 378_564;
const PINNED_CRC: u32 = 1_762_125_857;

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
#[expect(
    clippy::cast_precision_loss,
    reason = "bytes per IO, a ratio of two counts far below 2^53"
)]
fn compact_on_a_realistic_mix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.blkp");
    let mut w = TraceWriter::create(&path, &header()).unwrap();
    let ios = 200_000u64;
    let mut now = 1_000_000_000u64;
    let mut rng = crate::rng::Rng(12345u64);
    for i in 0..ios {
        let x = rng.next_u64();
        now += 8_000 + x % 4000;
        let r = IoRecord {
            complete_ns: now,
            enter_ns: now - 90_000 - x % 1000,
            issue_ns: now - 80_000 - x % 997,
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
    let per_io = bytes as f64 / ios as f64;
    assert!(per_io <= 16.0, "{per_io} bytes per IO");
}

#[test]
fn blocks_keep_bytes_in_order_in_blocks_of_one_size() {
    use std::io::Write as _;
    let mut b = Blocks::default();
    let mut want = Vec::new();
    for i in 0..2000u32 {
        let piece: Vec<u8> = (0..(i * 7 % 1013))
            .map(|j| (i ^ j).to_le_bytes()[0])
            .collect();
        b.write_all(&piece).unwrap();
        want.extend_from_slice(&piece);
    }
    assert!(want.len() > 3 * Blocks::BLOCK);
    assert_eq!(b.len(), want.len());
    let got: Vec<u8> = b.slices().flatten().copied().collect();
    assert_eq!(got, want);
    assert!(b.slices().all(|s| s.len() <= Blocks::BLOCK));
}
