//! `blkprof export`: a trace as a fio iolog (version 3, timed, so `fio --read_iolog` replays
//! the pattern with its timing), CSV, JSON lines (here), or Parquet ([`parquet`]: one row per
//! IO, for SQL engines; docs/fleet.md), or a Perfetto trace ([`perfetto`]: a timeline of every
//! IO for ui.perfetto.dev; docs/perfetto.md).

mod csv;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "parquet")]
mod parquet_delta;
#[cfg(feature = "parquet")]
mod parquet_dict;
pub mod perfetto;

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::path::Path;

use tracer_common::format::{FormatError, IoRecord, TraceReader};
use tracer_common::op::{Op, StatGroup, flags};
use tracer_common::{FILE_DEV_ANON, FILE_DEV_DEVICE};

use crate::analysis::labels::{DEVICE_FILE, DIRECT_FILE, UnnamedCgroup, UnnamedFile};

/// Also `blkprof export --format`: the variant names are the values, their docs the help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// fio iolog version 3: each line stamped (microseconds), replayed with its timing.
    Iolog,
    /// fio iolog version 2: the same IOs in submission order, without timing.
    Iolog2,
    /// One row per IO with a header row (RFC 4180).
    Csv,
    /// One JSON object per IO and line.
    Jsonl,
    /// Apache Parquet, one row per IO, for SQL engines (DuckDB, Spark, ...): needs -o; with
    /// several traces or --partition, -o is a directory of host=H/date=D/part-N.parquet.
    Parquet,
    /// Perfetto's protobuf trace for ui.perfetto.dev: a slice per IO on lanes per device,
    /// and the report's per-interval series as counters (docs/perfetto.md).
    Perfetto,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("writing the export: {0}")]
    Io(#[from] std::io::Error),
    #[error("the trace has several devices ({0}): choose one with --device")]
    SeveralDevices(String),
    #[error("the trace has no device {0}")]
    NoDevice(String),
    #[error("Parquet is written to a file or directory: give it with -o OUT")]
    ParquetNeedsFile,
    #[cfg(feature = "parquet")]
    #[error("writing Parquet {path}: {source}")]
    Parquet {
        path: std::path::PathBuf,
        source: ::parquet::errors::ParquetError,
    },
    #[error("{0}")]
    Output(String),
}

#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct ExportStats {
    pub written: u64,
    /// IOs an iolog cannot express (fio replays reads, writes, trims and syncs).
    pub skipped: u64,
    pub other_devices: u64,
}

/// Appends `v` as an unsigned LEB128 varint: Protocol Buffers' (the Perfetto trace) and
/// Parquet's (RLE run headers, the delta encoding's header fields).
pub(crate) fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let low7 = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low7);
            return;
        }
        out.push(low7 | 0x80);
    }
}

/// Records are in completion order; an iolog wants submission order. Hold them in a heap for
/// this long (IOs slower than this are emitted late, in completion order).
const REORDER_NS: u64 = 30_000_000_000;

pub fn export(
    path: &Path,
    format: Format,
    device: Option<&str>,
    target: Option<&str>,
    out: &mut dyn Write,
) -> Result<ExportStats, ExportError> {
    // (enter_ns, arrival sequence, op code, offset, length), earliest submission first.
    type Pending = Reverse<(u64, u64, u8, u64, u32)>;
    let mut r = TraceReader::open(path)?;
    let devs = r.header().devices.clone();
    let dev = match device {
        Some(name) => Some(
            devs.iter()
                .find(|d| d.name == name || format!("{}:{}", d.major, d.minor) == name)
                .ok_or_else(|| ExportError::NoDevice(name.into()))?
                .clone(),
        ),
        None if devs.len() > 1 && matches!(format, Format::Iolog | Format::Iolog2) => {
            return Err(ExportError::SeveralDevices(
                devs.iter()
                    .map(|d| d.name.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
        None => devs.first().cloned(),
    };
    let target = target
        .map(str::to_string)
        .or_else(|| dev.as_ref().map(|d| format!("/dev/{}", d.name)))
        .unwrap_or_else(|| "/dev/unknown".into());
    let mut stats = ExportStats::default();
    if format == Format::Csv {
        csv::write(&mut r, dev.as_ref(), out, &mut stats)?;
        return Ok(stats);
    }
    let mut buf = Vec::new();
    match format {
        Format::Iolog => {
            writeln!(out, "fio version 3 iolog")?;
            writeln!(out, "0 {target} add")?;
            writeln!(out, "0 {target} open")?;
        }
        Format::Iolog2 => {
            writeln!(out, "fio version 2 iolog")?;
            writeln!(out, "{target} add")?;
            writeln!(out, "{target} open")?;
        }
        Format::Csv | Format::Jsonl => {}
        Format::Parquet => return Err(ExportError::ParquetNeedsFile),
        Format::Perfetto => {
            return Err(ExportError::Output(
                "a Perfetto trace is written by export::perfetto::export_perfetto".into(),
            ));
        }
    }
    let mut heap: BinaryHeap<Pending> = BinaryHeap::new();
    let mut t0: Option<u64> = None;
    // fio's version 3 iologs stamp each line in microseconds since the start.
    let mut last_us = 0u64;
    let mut seq = 0u64;
    let timed = format == Format::Iolog;
    let emit = |out: &mut dyn Write,
                (enter, _, op, off, len): (u64, u64, u8, u64, u32),
                t0: u64,
                last_us: &mut u64|
     -> std::io::Result<()> {
        let us = (enter.saturating_sub(t0) / 1_000).max(*last_us);
        *last_us = us;
        let stamp = if timed {
            format!("{us} ")
        } else {
            String::new()
        };
        let act = match op {
            0 => "read",
            1 => "write",
            2 => "trim",
            _ => "sync",
        };
        if op == 3 {
            // fio parses a line of three fields as a file action (add, open, close) and
            // refuses "sync" there: an IO action has an offset and a length, 0 and 0 for a
            // sync, as fio's own iologs write it.
            writeln!(out, "{stamp}{target} {act} 0 0")
        } else {
            writeln!(out, "{stamp}{target} {act} {off} {len}")
        }
    };
    while r.next_chunk(&mut buf)? {
        for rec in &buf {
            if dev.as_ref().is_some_and(|d| d.dev() != rec.dev) {
                stats.other_devices += 1;
                continue;
            }
            match format {
                Format::Iolog | Format::Iolog2 => {
                    let op = match (rec.stat_group(), rec.op) {
                        (StatGroup::Flush, _) => 3u8,
                        (_, Op::Read) => 0,
                        (_, Op::Write) => 1,
                        (_, Op::Discard) => 2,
                        _ => {
                            stats.skipped += 1;
                            continue;
                        }
                    };
                    if rec.op == Op::Flush && rec.flags & flags::FLUSH_RQ == 0 {
                        stats.skipped += 1; // absorbed empty flush: the device flush is replayed
                        continue;
                    }
                    if op < 3 && rec.bytes == 0 {
                        // The empty write an fsync sends with its preflush: the device flush
                        // is replayed as the sync, and fio 3.33 aborts on a zero-length IO.
                        stats.skipped += 1;
                        continue;
                    }
                    let t = *t0.get_or_insert(rec.enter_ns);
                    heap.push(Reverse((
                        rec.enter_ns.max(t),
                        seq,
                        op,
                        rec.sector * 512,
                        rec.bytes,
                    )));
                    seq += 1;
                    while let Some(Reverse(top)) = heap.peek() {
                        if top.0 + REORDER_NS > rec.complete_ns {
                            break;
                        }
                        let Some(Reverse(e)) = heap.pop() else { break };
                        emit(out, e, t, &mut last_us)?;
                        stats.written += 1;
                    }
                }
                Format::Csv | Format::Parquet | Format::Perfetto => {
                    unreachable!("written before the loop")
                }
                Format::Jsonl => {
                    let v = serde_json::json!({
                        "complete_ns": rec.complete_ns, "enter_ns": rec.enter_ns, "issue_ns": rec.issue_ns,
                        "device": dev_name(&r, rec), "op": rec.op.name(), "flags": flag_names(rec.flags),
                        "sector": rec.sector, "bytes": rec.bytes, "pid": rec.pid, "comm": r.tasks()[rec.task as usize].comm,
                        "dev_inflight": rec.dev_inflight, "os_inflight": rec.os_inflight, "error": rec.error,
                        "hw_queue": rec.hw_queue, "cgroup": cgroup_label(&r, rec.cgroup),
                        "owner_cgroup": cgroup_label(&r, rec.owner_cgroup), "file": file_label(&r, rec),
                    });
                    serde_json::to_writer(&mut *out, &v).map_err(|e| match e.io_error_kind() {
                        // Keep the kind (a closed pipe is a normal end for `| head`).
                        Some(k) => std::io::Error::new(k, e),
                        None => std::io::Error::other(e),
                    })?;
                    writeln!(out)?;
                    stats.written += 1;
                }
            }
        }
    }
    if let Some(t) = t0 {
        while let Some(Reverse(e)) = heap.pop() {
            emit(out, e, t, &mut last_us)?;
            stats.written += 1;
        }
    }
    match format {
        Format::Iolog => writeln!(out, "{last_us} {target} close")?,
        Format::Iolog2 => writeln!(out, "{target} close")?,
        _ => {}
    }
    out.flush()?;
    Ok(stats)
}

pub(crate) fn dev_name(r: &TraceReader, rec: &IoRecord) -> String {
    r.devices().iter().find(|d| d.dev() == rec.dev).map_or_else(
        || {
            let (a, b) = tracer_common::dev_split(rec.dev);
            format!("{a}:{b}")
        },
        |d| d.name.clone(),
    )
}

/// A cgroup column's value (`cgroup`, `owner_cgroup`): the path the trace gave cgroup `id`, or
/// `(id N)` where it gave none; `None` (null) for id 0: unknown (a submitter from before the
/// run or format 3, an owner the trace does not track or from before format 5).
pub(crate) fn cgroup_label(r: &TraceReader, id: u64) -> Option<Cow<'_, str>> {
    if id == 0 {
        return None;
    }
    Some(
        r.cgroup_path(id)
            .map_or_else(|| Cow::Owned(UnnamedCgroup(id).to_string()), Cow::Borrowed),
    )
}

/// The `file` column's value: the path of the file of the IO's first data page, as the report's
/// files section names it (direct IO and the device's own page cache by their kind in
/// parentheses, a file the trace did not name as `(inode N on MAJ:MIN)`); `None` (null) for an
/// IO without data pages, or from a trace that does not name files (before format 5, or
/// traced without `--files`).
pub(crate) fn file_label<'a>(r: &'a TraceReader, rec: &IoRecord) -> Option<Cow<'a, str>> {
    let ino = rec.file_ino;
    Some(match rec.file_dev {
        0 => return None,
        FILE_DEV_ANON => Cow::Borrowed(DIRECT_FILE),
        FILE_DEV_DEVICE => Cow::Borrowed(DEVICE_FILE),
        // By the file's id: an inode number named anew is another file.
        dev => match rec.file_id {
            0 => r.file_path(dev, ino),
            id => r.file(id).and_then(|f| f.2),
        }
        .map_or_else(
            || Cow::Owned(UnnamedFile { dev, ino }.to_string()),
            Cow::Borrowed,
        ),
    })
}

pub(crate) fn flag_names(f: u16) -> String {
    flags::NAMES
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join("|")
}

/// A version 5 trace of `n` IOs (for the tests of every row format) cycling through what the
/// `cgroup`, `owner_cgroup` and `file` columns tell apart, with each row's expected (cgroup,
/// owner cgroup, file): an IO without data pages, direct IO, the device's page cache (written
/// back by a kworker of no cgroup for a named owner), a named file (whose path and owner's
/// path hold a comma and a quote, which CSV must quote), and an unnamed file of an unnamed owner.
#[cfg(test)]
pub(crate) fn owner_and_file_trace(
    path: &Path,
    n: u64,
) -> Vec<(Option<String>, Option<String>, Option<String>)> {
    use tracer_common::format::{
        CgroupInfo, DeviceInfo, FileInfo, OwnerCgroups, TraceHeader, TraceTrailer, TraceWriter,
        comm_bytes,
    };
    let fs = tracer_common::dev_join(259, 1);
    let header = TraceHeader {
        devices: vec![DeviceInfo {
            name: "nvme0n1".into(),
            major: 259,
            minor: 0,
            logical_block_size: 512,
            queue: None,
        }],
        owner_cgroups: Some(OwnerCgroups {
            tracked: true,
            ..Default::default()
        }),
        files: true,
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header).unwrap();
    w.write_cgroup(&CgroupInfo {
        id: 77,
        path: "/system.slice/app.service".into(),
    })
    .unwrap();
    w.write_cgroup(&CgroupInfo {
        id: 88,
        path: "/user.slice/a,\"b\"".into(),
    })
    .unwrap();
    w.write_file(&FileInfo {
        dev: fs,
        ino: 12,
        path: "/data/ks/t-1-big-Data,\"x\".db".into(),
    })
    .unwrap();
    let s = |x: &str| Some(x.to_string());
    let mut want = Vec::new();
    for i in 0..n {
        // (cgroup, owner, file system, inode, comm, expected)
        let (cgroup, owner, file_dev, file_ino, comm, expect) = match i % 5 {
            0 => (
                77,
                0,
                0,
                0,
                "app",
                (s("/system.slice/app.service"), None, None),
            ),
            1 => (
                77,
                77,
                FILE_DEV_ANON,
                0,
                "app",
                (
                    s("/system.slice/app.service"),
                    s("/system.slice/app.service"),
                    s("(direct IO)"),
                ),
            ),
            2 => (
                0,
                88,
                FILE_DEV_DEVICE,
                0,
                "kworker/u4:1",
                (None, s("/user.slice/a,\"b\""), s("(metadata and journal)")),
            ),
            3 => (
                77,
                88,
                fs,
                12,
                "app",
                (
                    s("/system.slice/app.service"),
                    s("/user.slice/a,\"b\""),
                    s("/data/ks/t-1-big-Data,\"x\".db"),
                ),
            ),
            _ => (
                0,
                99,
                fs,
                4242,
                "kworker/u4:1",
                (None, s("(id 99)"), s("(inode 4242 on 259:1)")),
            ),
        };
        let rec = IoRecord {
            complete_ns: 2_000_000 + i * 1000,
            enter_ns: 1_999_000 + i * 1000,
            issue_ns: 1_999_500 + i * 1000,
            sector: 8 * i,
            bytes: if file_dev == 0 { 0 } else { 4096 },
            pid: if comm == "app" { 100 } else { 7 },
            dev: tracer_common::dev_join(259, 0),
            op: if file_dev == 0 { Op::Flush } else { Op::Write },
            flags: if file_dev == 0 { flags::FLUSH_RQ } else { 0 },
            cgroup,
            owner_cgroup: owner,
            file_dev,
            file_ino,
            ..IoRecord::default()
        };
        w.push(&rec, &comm_bytes(comm)).unwrap();
        want.push(expect);
    }
    w.finish(&TraceTrailer::default()).unwrap();
    want
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::synth::{cassandra_like, write_trace};

    #[test]
    fn iolog_is_in_submission_order_with_every_read_and_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(10, 500, &[(3.0, 1.0, 500.0)]);
        write_trace(&p, &mut ios).unwrap();
        let mut out = Vec::new();
        let st = export(&p, Format::Iolog, None, Some("/dev/loop9"), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "fio version 3 iolog");
        assert_eq!(lines[1], "0 /dev/loop9 add");
        let io_lines: Vec<Vec<&str>> = lines
            .iter()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|f| f.len() == 5)
            .collect();
        assert_eq!(io_lines.len() as u64, st.written);
        assert_eq!(st.written, ios.len() as u64);
        let ts: Vec<u64> = io_lines.iter().map(|f| f[0].parse().unwrap()).collect();
        assert!(
            ts.windows(2).all(|w| w[0] <= w[1]),
            "timestamps never go back"
        );
        let reads = io_lines.iter().filter(|f| f[2] == "read").count();
        assert_eq!(reads, ios.iter().filter(|i| i.op == Op::Read).count());
        assert!(lines.last().unwrap().ends_with("close"));
    }

    /// A task can name itself anything (prctl `PR_SET_NAME`): a CSV reader must get it back.
    #[test]
    fn csv_comm_with_comma_quote_cr_and_lf_reads_back_unchanged() {
        use tracer_common::format::{
            DeviceInfo, TraceHeader, TraceTrailer, TraceWriter, comm_bytes,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let comms = ["a,b \"c\"\r\nd", "\r", "plain"];
        let header = TraceHeader {
            devices: vec![DeviceInfo {
                name: "sda".into(),
                major: 8,
                minor: 0,
                logical_block_size: 512,
                queue: None,
            }],
            ..Default::default()
        };
        let mut w = TraceWriter::create(&p, &header).unwrap();
        for ((i, pid), comm) in (0u64..).zip(100u32..).zip(comms) {
            let rec = IoRecord {
                complete_ns: 2_000 + i,
                enter_ns: 1_000,
                issue_ns: 1_500,
                sector: 8 * i,
                bytes: 4096,
                pid,
                task: 0,
                dev_inflight: 1,
                os_inflight: 1,
                error: 0,
                dev: tracer_common::dev_join(8, 0),
                requeues: 0,
                flags: 0,
                op: Op::Read,
                cgroup: 0,
                owner_cgroup: 0,
                file_dev: 0,
                file_ino: 0,
                file_id: 0,
                hw_queue: None,
            };
            w.push(&rec, &comm_bytes(comm)).unwrap();
        }
        w.finish(&TraceTrailer::default()).unwrap();
        let mut out = Vec::new();
        let st = export(&p, Format::Csv, None, None, &mut out).unwrap();
        assert_eq!(st.written, 3);
        let mut rd = ::csv::Reader::from_reader(&out[..]);
        assert_eq!(&rd.headers().unwrap()[12], "comm");
        let back: Vec<String> = rd
            .records()
            .map(|row| row.unwrap()[12].to_string())
            .collect();
        assert_eq!(back, comms);
    }

    #[test]
    fn csv_and_jsonl_name_each_ios_cgroups_and_file_as_the_report_does() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let want = owner_and_file_trace(&p, 10);
        let mut out = Vec::new();
        assert_eq!(
            export(&p, Format::Csv, None, None, &mut out)
                .unwrap()
                .written,
            10
        );
        let mut rd = ::csv::Reader::from_reader(&out[..]);
        let headers = rd.headers().unwrap().clone();
        // Added at the end: the earlier columns keep their positions.
        assert_eq!(&headers[12], "comm");
        assert_eq!(&headers[16], "hw_queue");
        assert_eq!(
            headers.iter().skip(17).collect::<Vec<_>>(),
            ["cgroup", "owner_cgroup", "file"]
        );
        let empty = |v: &Option<String>| v.clone().unwrap_or_default();
        for (i, (row, (cgroup, owner, file))) in rd.records().zip(&want).enumerate() {
            let row = row.unwrap();
            assert_eq!(
                (&row[17], &row[18], &row[19]),
                (
                    empty(cgroup).as_str(),
                    empty(owner).as_str(),
                    empty(file).as_str()
                ),
                "row {i}"
            );
        }
        let mut out = Vec::new();
        export(&p, Format::Jsonl, None, None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let got: Vec<_> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let s = |k: &str| {
                    assert!(v.get(k).is_some(), "{k} in {l}");
                    v[k].as_str().map(str::to_string)
                };
                (s("cgroup"), s("owner_cgroup"), s("file"))
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn csv_has_a_row_per_io() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(2, 100, &[]);
        write_trace(&p, &mut ios).unwrap();
        let mut out = Vec::new();
        export(&p, Format::Csv, None, None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), ios.len() + 1);
        assert!(text.lines().nth(1).unwrap().contains(",nvme0n1,"));
    }
}
