//! `blkprof export`: a trace as a fio iolog (`iolog.rs`: version 3, timed, so `fio
//! --read_iolog` replays the pattern with its timing), CSV (`csv.rs`), JSON lines
//! (`jsonl.rs`), Parquet ([`parquet`]: one row per IO, for SQL engines; docs/fleet.md), or a
//! Perfetto trace ([`perfetto`]: a timeline of every IO for ui.perfetto.dev; docs/perfetto.md).
//! CSV, JSON lines and Parquet write the columns of one table, `columns.rs`.

mod columns;
mod csv;
mod iolog;
mod jsonl;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod perfetto;

use std::io::Write;
use std::path::Path;

use tracer_common::format::{DeviceInfo, FormatError, IoRecord, TraceReader};

pub(crate) use columns::{dev_name, flag_names};

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
    #[error(
        "the trace names its device {0:?}, which is not a kernel device name (letters, digits, \
         '-', '_', '.', ':', not starting with '.'): give the replay target with --target"
    )]
    DeviceName(String),
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
/// Parquet's (RLE run headers, the delta encoding's header fields), the trace format's own.
#[inline]
pub(crate) fn varint(v: u64, out: &mut Vec<u8>) {
    tracer_common::format::put_varint(out, v);
}

/// `name` if it can only be a device's name under /dev: the replay target is built from the
/// trace's header, which an imported or crafted trace sets to anything (`../../etc/cron.d/x`).
fn kernel_name(name: &str) -> Result<&str, ExportError> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if plain {
        Ok(name)
    } else {
        Err(ExportError::DeviceName(name.to_string()))
    }
}

/// The device `--device` names (by name or MAJ:MIN).
pub(crate) fn find_device<'a>(
    devices: &'a [DeviceInfo],
    name: &str,
) -> Result<&'a DeviceInfo, ExportError> {
    devices
        .iter()
        .find(|d| d.name == name || format!("{}:{}", d.major, d.minor) == name)
        .ok_or_else(|| ExportError::NoDevice(name.into()))
}

/// An export written to a stream a record at a time, in the trace's order: fio iologs
/// (`iolog.rs`), CSV (`csv.rs`), JSON lines (`jsonl.rs`). Parquet and Perfetto write files
/// of their own shape ([`parquet::export_parquet`], [`perfetto::export_perfetto`]).
trait RowExport {
    /// Write `rec` (or count it as skipped).
    fn record(
        &mut self,
        r: &TraceReader,
        rec: &IoRecord,
        stats: &mut ExportStats,
    ) -> std::io::Result<()>;
    /// After the last record: write what is held, the end, and flush.
    fn finish(&mut self, stats: &mut ExportStats) -> std::io::Result<()>;
}

/// Export the trace at `path` to `out` as `format`: an iolog, CSV or JSON lines (Parquet and
/// Perfetto have their own entry points).
pub fn export(
    path: &Path,
    format: Format,
    device: Option<&str>,
    target: Option<&str>,
    out: &mut dyn Write,
) -> Result<ExportStats, ExportError> {
    let mut r = TraceReader::open(path)?;
    let devs = r.header().devices.clone();
    let dev = match device {
        Some(name) => Some(find_device(&devs, name)?.clone()),
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
    let target = match (target, &dev) {
        (Some(t), _) => t.to_string(),
        (None, Some(d)) => format!("/dev/{}", kernel_name(&d.name)?),
        (None, None) => "/dev/unknown".into(),
    };
    let mut exporter: Box<dyn RowExport + '_> = match format {
        Format::Iolog => Box::new(iolog::Iolog::start(out, target, true)?),
        Format::Iolog2 => Box::new(iolog::Iolog::start(out, target, false)?),
        Format::Csv => Box::new(csv::Csv::start(out)?),
        Format::Jsonl => Box::new(jsonl::Jsonl::new(out)),
        Format::Parquet => return Err(ExportError::ParquetNeedsFile),
        Format::Perfetto => {
            return Err(ExportError::Output(
                "a Perfetto trace is written by export::perfetto::export_perfetto".into(),
            ));
        }
    };
    let mut stats = ExportStats::default();
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf)? {
        for rec in &buf {
            if dev.as_ref().is_some_and(|d| d.dev() != rec.dev) {
                stats.other_devices += 1;
                continue;
            }
            exporter.record(&r, rec, &mut stats)?;
        }
    }
    exporter.finish(&mut stats)?;
    Ok(stats)
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
    use tracer_common::op::{Op, flags};
    use tracer_common::{FILE_DEV_ANON, FILE_DEV_DEVICE};
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
    use tracer_common::op::Op;

    #[test]
    fn a_device_name_that_is_a_path_never_becomes_the_replay_target() {
        let dir = tempfile::tempdir().unwrap();
        for (name, ok) in [
            ("../../etc/cron.d/x", false),
            ("..", false),
            (".hidden", false),
            ("sd a", false),
            ("nvme0n1\nrm", false),
            ("", false),
            ("nvme0n1", true),
            ("dm-3", true),
            ("md127", true),
        ] {
            let p = dir.path().join("t.blkp");
            let mut ios = cassandra_like(1, 100, &[]);
            let meta = crate::inputs::synth::Meta {
                device: Some(name.to_string()),
                ..Default::default()
            };
            crate::inputs::synth::write_trace_with(&p, &mut ios, &meta).unwrap();
            let mut out = Vec::new();
            let r = export(&p, Format::Iolog, None, None, &mut out);
            if ok {
                r.unwrap();
                let text = String::from_utf8(out).unwrap();
                assert!(text.contains(&format!("/dev/{name} add")), "{text}");
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("--target"), "{name:?}: {e}");
                assert!(out.is_empty(), "{name:?}: nothing written");
                // --target is the way out.
                export(&p, Format::Iolog, None, Some("/dev/loop9"), &mut Vec::new()).unwrap();
            }
        }
    }

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
    fn csv_comm_with_comma_quote_cr_and_lf_reads_back() {
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
        // A cell starting with a CR is one a spreadsheet could evaluate: marked as text.
        assert_eq!(back, ["a,b \"c\"\r\nd", "'\r", "plain"]);
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
