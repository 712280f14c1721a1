//! `blkprof export --format parquet`: one row per IO in Apache Parquet, for the SQL engines a
//! fleet already runs (DuckDB, Spark, Trino, ...; recipes in docs/fleet.md).
//!
//! Streaming: records go from each decoded chunk into column buffers of [`BATCH_ROWS`] rows
//! (`batch.rs`, reused from batch to batch; a column per row of the export's column table),
//! which `delta.rs` writes as `DELTA_BINARY_PACKED` pages (the numeric columns) and `dict.rs`
//! as dictionary keys (the string columns), into the file `part.rs` writes; a file holds at
//! most one row group in memory, so memory does not grow with the trace. The file is what the
//! crate's Arrow writer writes for [`schema`] (the Arrow schema is in its metadata), at a fifth
//! of its cost: that writer re-interned every row's strings, copied every value through a
//! gather, and its column writers took three passes over every number (statistics, deltas, bit
//! packing). The columns mean what `blkprof report` means: `op` is the report's op (absorbed
//! empty flushes are `flush-absorbed`, as the report counts them apart), `device_latency_ns` is
//! null for IOs never issued to the device (the report's device latency leaves them out),
//! `total_latency_ns` is completion minus entry, and records the report leaves out as damaged
//! (completed outside the run's window) are left out and counted here too.

mod batch;
mod delta;
mod dict;
mod part;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::Serialize;
use tracer_common::format::{Ending, TraceReader};

pub(crate) use batch::Fill;
use batch::{Clock, Keys};
use part::{Part, part_name};

use super::ExportError;
use super::columns::{COLUMNS, Store, Value};
use crate::analysis::summary::Window;
use crate::report::model::Lost;

/// Rows buffered per column before they go to the column writers (the buffers are reused).
const BATCH_ROWS: usize = 65_536;

/// Rows per row group by default: the unit engines skip by statistics and read in parallel.
/// `cargo xtask bench --analyzer-only` compares 128 Ki, 1 Mi and 4 Mi rows (and the codecs):
/// 1 Mi was the fastest, at 45 MiB peak RSS (BENCHMARKS.md).
pub const DEFAULT_ROW_GROUP_ROWS: usize = 1 << 20;

/// Key of the file's key-value metadata that holds the run's description ([`RunMeta`], JSON).
pub const RUN_META_KEY: &str = "blkprof.run";

const NS_PER_DAY: i64 = 86_400_000_000_000;

/// `blkprof export --compression`: the Parquet codec of the numeric columns (the dictionary
/// string columns' bit-packed keys are stored as they are: `dict.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    /// Zstandard: the smallest file (1% smaller than snappy on the bench trace, whose columns
    /// are delta- and dictionary-encoded already), for 20% more CPU time.
    Zstd,
    /// Snappy: the default (`cargo xtask bench --analyzer-only` compares the codecs), and what
    /// Spark writes by default.
    Snappy,
    #[expect(
        clippy::doc_markdown,
        reason = "clap prints this doc as the value's help"
    )]
    /// LZ4 (the LZ4_RAW codec of the Parquet spec).
    Lz4,
    /// No compression.
    None,
}

impl Codec {
    fn parquet(self) -> Compression {
        match self {
            Codec::Zstd => Compression::ZSTD(ZstdLevel::default()),
            Codec::Snappy => Compression::SNAPPY,
            Codec::Lz4 => Compression::LZ4_RAW,
            Codec::None => Compression::UNCOMPRESSED,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ParquetOptions {
    /// The `host` column and partition (default: the trace header's host name).
    pub host: Option<String>,
    /// Write a directory of host=H/date=D/part-N.parquet even for one trace.
    pub partition: bool,
    /// Only this device (name or MAJ:MIN).
    pub device: Option<String>,
    pub codec: Codec,
    pub row_group_rows: usize,
}

impl Default for ParquetOptions {
    fn default() -> ParquetOptions {
        ParquetOptions {
            host: None,
            partition: false,
            device: None,
            codec: Codec::Snappy,
            row_group_rows: DEFAULT_ROW_GROUP_ROWS,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParquetStats {
    /// Rows written.
    pub written: u64,
    /// The Parquet files written (final paths).
    pub files: Vec<PathBuf>,
    /// Records left out as damaged (completed outside the run's window), as the report does.
    pub outside_window: u64,
    /// Records of other devices than --device.
    pub other_devices: u64,
}

/// The run a Parquet file's rows come from, as its key-value metadata [`RUN_META_KEY`]: what an
/// engine needs to judge the rows' coverage (`SELECT value FROM parquet_kv_metadata(...)` in
/// DuckDB).
#[derive(Serialize, serde::Deserialize, Clone, Debug, Default)]
pub struct RunMeta {
    /// Version of this object.
    pub schema_version: u32,
    /// The trace file exported.
    pub trace: String,
    /// The `host` column's value (--host, else the header's host name).
    pub host: String,
    /// The host name the tracer recorded.
    pub traced_host: String,
    pub kernel: String,
    pub tracer_version: String,
    /// Start of the run (wall clock, RFC 3339 UTC) and its end (trailer), if known.
    pub start: String,
    pub end: Option<String>,
    /// Position of the trace in a rotated series.
    pub sequence: u32,
    /// "complete", "truncated" or "corrupt", as in the report's integrity.
    pub ending: String,
    /// Rows of this trace in this file.
    pub rows: u64,
    /// Records of the trace left out as damaged (completed outside the run's window).
    pub records_outside_window: u64,
    /// What the trace knows it missed (the report's `lost`).
    pub lost: Lost,
    /// The self-check against /proc/diskstats per device and group (the report's coverage).
    pub coverage: Vec<tracer_common::coverage::DeviceCoverage>,
    pub devices: Vec<tracer_common::format::DeviceInfo>,
    /// The host's time zone as recorded (the timestamps themselves are UTC).
    pub time_zone: String,
    pub utc_offset_s: i32,
}

/// The Arrow schema of the export: one row per IO, a column per row of the column table.
pub fn schema() -> SchemaRef {
    let fields: Vec<Field> = COLUMNS
        .iter()
        .map(|c| {
            let ty = match c.value {
                Value::Text(_) => {
                    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
                }
                Value::Num(_, Store::Timestamp) => {
                    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
                }
                Value::Num(_, Store::Int64 | Store::Duration) => DataType::Int64,
                Value::Num(_, Store::Int32 | Store::Int32Bits) => DataType::Int32,
            };
            Field::new(c.names.parquet, ty, c.nullable())
        })
        .collect();
    Arc::new(Schema::new(fields))
}

fn properties(opts: &ParquetOptions) -> WriterProperties {
    // The numeric columns are DELTA_BINARY_PACKED (delta.rs writes their pages, these
    // properties give them only the codec): times grow (nearly) monotonically and latencies
    // vary little from one IO to the next, so their deltas pack in a few bits each, where
    // dictionaries would not help. The small integers (sizes, pids, queue depths, errors) too:
    // a dictionary of them hashes every value (10% of the export's time) to save 0.3 bytes per
    // IO on the bench trace. The string columns' chunks are dict.rs's.
    WriterProperties::builder()
        .set_compression(opts.codec.parquet())
        .set_max_row_group_row_count(Some(opts.row_group_rows.max(1)))
        // Min/max per page and row group (column and offset indexes): engines skip row groups
        // and pages by time and device.
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_created_by(format!("blkprof {}", tracer_common::VERSION))
        .build()
}

/// A partition value as a path segment: Hive escaping (%XX) of what a path cannot hold.
fn hive_value(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
            out.push(c);
        } else {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    if out.is_empty() || out == "." || out == ".." {
        out = format!("%{}", out.len()); // never a path of its own
    }
    out
}

/// The UTC date of a day number, YYYY-MM-DD.
fn date_of(day: i64) -> String {
    tracer_common::time::rfc3339(day.saturating_mul(NS_PER_DAY))[..10].to_string()
}

/// Export traces to Parquet at `out`: a file for one trace without `partition`, else a
/// directory (which must not exist yet, or be empty) of host=H/date=D/part-N.parquet, N the
/// trace's position in `traces`. Everything is written under `.part` names and renamed when
/// complete, so a failure leaves no partial output.
pub fn export_parquet(
    traces: &[PathBuf],
    out: &Path,
    opts: &ParquetOptions,
) -> Result<ParquetStats, ExportError> {
    if traces.is_empty() {
        return Err(ExportError::Output("no trace to export".into()));
    }
    // `-o DIR/` or an existing directory names a directory even for one trace (it was taken
    // for a file name, and the export failed renaming onto it).
    let text = out.as_os_str().to_string_lossy();
    let names_dir = (text.len() > 1 && text.ends_with('/')) || out.is_dir();
    let trimmed = PathBuf::from(text.trim_end_matches('/'));
    let out = if names_dir && !trimmed.as_os_str().is_empty() {
        trimmed.as_path()
    } else {
        out
    };
    let partitioned = opts.partition || traces.len() > 1 || names_dir;
    let mut stats = ParquetStats::default();
    if !partitioned {
        return export_one(&traces[0], opts, &mut stats, Dest::File(out)).map(|()| stats);
    }
    if out.exists() {
        let empty = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_none());
        if !empty {
            return Err(ExportError::Output(format!(
                "{} exists and is not an empty directory: give a new directory (exporting into one that holds an earlier export would mix the two)",
                out.display()
            )));
        }
    }
    let staging = part_name(out);
    if staging.exists() {
        return Err(ExportError::Output(format!(
            "{} exists (left by an interrupted export?): remove it and run again",
            staging.display()
        )));
    }
    let result = (|| {
        for (i, t) in traces.iter().enumerate() {
            let dir = |host: &str, day: i64| {
                staging
                    .join(format!("host={}", hive_value(host)))
                    .join(format!("date={}", date_of(day)))
                    .join(format!("part-{i}.parquet"))
            };
            export_one(t, opts, &mut stats, Dest::Partitioned(&dir))?;
        }
        if out.exists() {
            std::fs::remove_dir(out)?; // empty, checked above
        }
        std::fs::rename(&staging, out).map_err(|e| {
            ExportError::Output(format!(
                "cannot rename {} to {}: {e}",
                staging.display(),
                out.display()
            ))
        })
    })();
    match result {
        Ok(()) => {
            for f in &mut stats.files {
                if let Ok(rest) = f.strip_prefix(&staging) {
                    *f = out.join(rest);
                }
            }
            Ok(stats)
        }
        Err(e) => {
            let _ignored = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// Where one trace goes: one file, or one file per UTC day at the path of (host, day).
#[derive(Clone, Copy)]
enum Dest<'a> {
    File(&'a Path),
    Partitioned(&'a dyn Fn(&str, i64) -> PathBuf),
}

fn export_one(
    trace: &Path,
    opts: &ParquetOptions,
    stats: &mut ParquetStats,
    dest: Dest<'_>,
) -> Result<(), ExportError> {
    let partitioned = matches!(dest, Dest::Partitioned(_));
    let mut r = TraceReader::open(trace)?;
    let header = r.header().clone();
    let file_bytes = std::fs::metadata(trace).map_or(u64::MAX, |m| m.len());
    let window = Window::of(
        &header,
        &r.scan()?,
        &crate::analysis::series::Options::default(),
        file_bytes,
    );
    let only = match &opts.device {
        Some(name) => Some(super::find_device(&header.devices, name)?.dev()),
        None => None,
    };
    let host = opts
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| {
            if header.host.is_empty() {
                "unknown".into()
            } else {
                header.host.clone()
            }
        });
    let path_of = |day: i64| match dest {
        Dest::Partitioned(f) => f(&host, day),
        Dest::File(out) => out.to_path_buf(),
    };
    let schema = schema();
    let props = properties(opts);
    let mut keys = Keys::new(host.clone(), &r);
    let clock = Clock::new(&header);
    let mut parts: Vec<Part> = Vec::new();
    let mut cur = usize::MAX;
    let mut outside = 0u64;
    let mut buf = Vec::new();
    let result = (|| -> Result<(), ExportError> {
        while r.next_chunk(&mut buf)? {
            // The common case: every record of the chunk goes to the current file.
            if let Some(p) = parts.get_mut(cur)
                && !buf.is_empty()
                && buf.iter().all(|rec| {
                    window.holds(rec)
                        && only.is_none_or(|d| d == rec.dev)
                        && (!partitioned
                            || header.wall_ns(rec.complete_ns).div_euclid(NS_PER_DAY) == p.day)
                })
            {
                p.batch.extend(&buf, &clock, &mut keys, &r);
                p.rows += buf.len() as u64;
                if p.batch.len() >= BATCH_ROWS {
                    p.write_batch(&keys)?;
                }
                continue;
            }
            for rec in &buf {
                if !window.holds(rec) {
                    outside += 1;
                    continue;
                }
                if only.is_some_and(|d| d != rec.dev) {
                    stats.other_devices += 1;
                    continue;
                }
                let day = if partitioned {
                    header.wall_ns(rec.complete_ns).div_euclid(NS_PER_DAY)
                } else {
                    0
                };
                if parts.get(cur).is_none_or(|p| p.day != day) {
                    cur = if let Some(i) = parts.iter().position(|p| p.day == day) {
                        i
                    } else {
                        let path = path_of(day);
                        let mut p = Part::create(path, &schema, props.clone())?;
                        p.day = day;
                        parts.push(p);
                        parts.len() - 1
                    };
                    // Days more than a minute behind get no more records (completions arrive
                    // in order, give or take CPUs): write their row group out now.
                    let t = header.wall_ns(rec.complete_ns);
                    for p in parts.iter_mut().filter(|_| partitioned) {
                        if !p.flushed && (p.day + 1) * NS_PER_DAY + 60_000_000_000 < t {
                            p.write_batch(&keys)?;
                            p.finish_group()?;
                            p.flushed = true;
                        }
                    }
                }
                let p = &mut parts[cur];
                p.batch
                    .extend(std::slice::from_ref(rec), &clock, &mut keys, &r);
                p.rows += 1;
                if p.batch.len() >= BATCH_ROWS {
                    p.write_batch(&keys)?;
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        for p in parts {
            let _ignored = std::fs::remove_file(&p.part_path);
        }
        return Err(e);
    }
    let meta = run_meta(trace, &r, &host, outside);
    if parts.is_empty() {
        // No rows (an empty trace, or none of --device): still a file with the schema and the
        // run's metadata, so that "no IO" is an answer and not a missing file.
        let day = header.wall_clock_start_ns.div_euclid(NS_PER_DAY);
        parts.push(Part::create(path_of(day), &schema, props)?);
    }
    let mut left: Vec<Part> = parts;
    while let Some(p) = left.pop() {
        let rows = p.rows;
        let part_path = p.part_path.clone();
        match p.finish(&keys, &meta) {
            Ok(path) => {
                stats.files.push(path);
                stats.written += rows;
            }
            Err(e) => {
                let _ignored = std::fs::remove_file(&part_path);
                for p in left {
                    let _ignored = std::fs::remove_file(&p.part_path);
                }
                return Err(e);
            }
        }
    }
    stats.outside_window += outside;
    Ok(())
}

/// The run a trace's rows come from ([`RunMeta`]), once its records are read.
fn run_meta(trace: &Path, r: &TraceReader, host: &str, outside: u64) -> RunMeta {
    let header = r.header();
    let trailer = r.trailer().cloned();
    let coverage = trailer
        .as_ref()
        .map(|t| tracer_common::coverage::coverage(header, t))
        .unwrap_or_default();
    RunMeta {
        schema_version: 1,
        trace: trace.display().to_string(),
        host: host.to_string(),
        traced_host: header.host.clone(),
        kernel: header.kernel.clone(),
        tracer_version: header.tracer_version.clone(),
        start: tracer_common::time::rfc3339(header.wall_clock_start_ns),
        end: trailer
            .as_ref()
            .filter(|t| t.wall_clock_end_ns != 0)
            .map(|t| tracer_common::time::rfc3339(t.wall_clock_end_ns)),
        sequence: header.sequence,
        ending: match r.ending() {
            Ending::Complete => "complete",
            Ending::Corrupt { .. } => "corrupt",
            _ => "truncated",
        }
        .into(),
        rows: 0,
        records_outside_window: outside,
        lost: crate::analysis::summary::lost(header, trailer.as_ref(), r.last_stats(), &coverage),
        coverage,
        devices: r.devices().to_vec(),
        time_zone: header.time_zone.clone(),
        utc_offset_s: header.utc_offset_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::synth::{Io, WALL_NS, cassandra_like, write_trace};
    use arrow_array::types::Int32Type;
    use arrow_array::{Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::fs::File;
    use tracer_common::op::{Op, flags};

    /// Every row of every file, as (rows, run metadata of the first file).
    fn read_back(files: &[PathBuf]) -> (Vec<RecordBatch>, RunMeta) {
        let mut batches = Vec::new();
        let mut meta = None;
        for f in files {
            let b = ParquetRecordBatchReaderBuilder::try_new(File::open(f).unwrap()).unwrap();
            let kv = b.metadata().file_metadata().key_value_metadata().unwrap();
            let v = kv.iter().find(|k| k.key == RUN_META_KEY).unwrap();
            meta.get_or_insert(serde_json::from_str(v.value.as_deref().unwrap()).unwrap());
            batches.extend(b.build().unwrap().map(Result::unwrap));
        }
        (batches, meta.unwrap())
    }

    #[test]
    fn the_cgroup_column_names_each_ios_cgroup_as_the_trace_did() {
        use tracer_common::format::{
            CgroupInfo, IoRecord, TraceHeader, TraceTrailer, TraceWriter, comm_bytes,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&p, &TraceHeader::default()).unwrap();
        w.write_cgroup(&CgroupInfo {
            id: 77,
            path: "/system.slice/cassandra.service".into(),
        })
        .unwrap();
        // Cgroups 77 (named), 0 (unknown: null) and 78 (never named), in turn.
        let ids = [77u64, 0, 78];
        for i in 0..30u64 {
            let r = IoRecord {
                complete_ns: 1_000_000 + i * 1000,
                enter_ns: 999_000 + i * 1000,
                issue_ns: 999_500 + i * 1000,
                bytes: 4096,
                pid: 10 + (i % 3) as u32,
                cgroup: ids[(i % 3) as usize],
                ..IoRecord::default()
            };
            w.push(&r, &comm_bytes("java")).unwrap();
        }
        w.finish(&TraceTrailer::default()).unwrap();
        let out = dir.path().join("t.parquet");
        let st = export_parquet(&[p], &out, &ParquetOptions::default()).unwrap();
        let (batches, _) = read_back(&st.files);
        let mut got = Vec::new();
        for b in &batches {
            let col = b.column_by_name("cgroup").unwrap();
            let d = arrow_array::cast::AsArray::as_dictionary::<Int32Type>(&**col);
            let values = d.values().as_any().downcast_ref::<StringArray>().unwrap();
            for r in 0..b.num_rows() {
                got.push(if d.is_null(r) {
                    None
                } else {
                    Some(
                        values
                            .value(usize::try_from(d.keys().value(r)).unwrap())
                            .to_string(),
                    )
                });
            }
        }
        assert_eq!(got.len(), 30);
        for (i, g) in got.iter().enumerate() {
            let want = match i % 3 {
                0 => Some("/system.slice/cassandra.service".to_string()),
                1 => None,
                _ => Some("(id 78)".to_string()),
            };
            assert_eq!(*g, want, "row {i}");
        }
    }

    #[test]
    fn one_trace_to_a_directory_is_partitioned_there() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        write_trace(&p, &mut cassandra_like(1, 100, &[])).unwrap();
        for out in [
            format!("{}/", dir.path().join("new").display()),
            dir.path().join("empty").display().to_string(),
        ] {
            if !out.ends_with('/') {
                std::fs::create_dir(&out).unwrap();
            }
            let st = export_parquet(
                std::slice::from_ref(&p),
                Path::new(&out),
                &ParquetOptions::default(),
            )
            .unwrap();
            assert_eq!(st.files.len(), 1, "{out}");
            assert!(
                st.files[0].starts_with(out.trim_end_matches('/'))
                    && st.files[0].to_string_lossy().contains("/host="),
                "{out}: {:?}",
                st.files
            );
            assert!(st.files[0].exists());
        }
    }

    #[test]
    fn the_hw_queue_column_is_each_ios_queue_or_null() {
        use arrow_array::Array as _;
        use tracer_common::format::{IoRecord, TraceHeader, TraceTrailer, TraceWriter, comm_bytes};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut w = TraceWriter::create(&p, &TraceHeader::default()).unwrap();
        // Queues 0, 3, unknown, 65535 in turn; the first 100 rows all known (the validity
        // starts mid-batch).
        let q = |i: u64| match (i < 100, i % 4) {
            (true, _) | (false, 0) => Some((i % 2) as u16 * 3),
            (false, 1) => Some(3),
            (false, 2) => None,
            _ => Some(u16::MAX),
        };
        for i in 0..300u64 {
            let r = IoRecord {
                complete_ns: 1_000_000 + i * 1000,
                enter_ns: 999_000 + i * 1000,
                issue_ns: 999_500 + i * 1000,
                bytes: 4096,
                hw_queue: q(i),
                ..IoRecord::default()
            };
            w.push(&r, &comm_bytes("fio")).unwrap();
        }
        w.finish(&TraceTrailer::default()).unwrap();
        let out = dir.path().join("t.parquet");
        let opts = ParquetOptions {
            row_group_rows: 128,
            ..Default::default()
        };
        let st = export_parquet(&[p], &out, &opts).unwrap();
        let (batches, _) = read_back(&st.files);
        let mut got = Vec::new();
        for b in &batches {
            let col = b.column_by_name("hw_queue").unwrap();
            let a =
                arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int32Type>(&**col);
            for r in 0..b.num_rows() {
                got.push((!a.is_null(r)).then(|| a.value(r)));
            }
        }
        let want: Vec<Option<i32>> = (0..300).map(|i| q(i).map(i32::from)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn one_row_per_io_with_the_reports_values_and_the_run_in_the_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(3, 500, &[(1.0, 0.5, 400.0)]);
        // An absorbed empty flush (never issued): no device latency, named as the report does.
        ios.push(Io {
            enter_ns: ios[0].complete_ns + 10,
            issue_ns: 0,
            complete_ns: ios[0].complete_ns + 50,
            op: Op::Flush,
            bytes: 0,
            sector: 0,
            os_inflight: 1,
            flags: flags::NEVER_ISSUED,
        });
        write_trace(&p, &mut ios).unwrap();
        let out = dir.path().join("t.parquet");
        let opts = ParquetOptions {
            row_group_rows: 1000,
            ..Default::default()
        };
        let st = export_parquet(&[p], &out, &opts).unwrap();
        assert_eq!(st.written, ios.len() as u64);
        assert_eq!(st.files, vec![out.clone()]);
        assert!(!part_name(&out).exists(), "no .part left");
        let (batches, meta) = read_back(&st.files);
        assert_eq!(meta.host, "synth");
        assert_eq!(meta.ending, "complete");
        assert_eq!(meta.rows, ios.len() as u64);
        assert_eq!(meta.coverage.len(), 1, "the diskstats check per device");
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, ios.len());
        let meta_file = parquet::file::reader::SerializedFileReader::new(File::open(&out).unwrap());
        let groups =
            parquet::file::reader::FileReader::metadata(&meta_file.unwrap()).num_row_groups();
        assert_eq!(
            groups,
            ios.len().div_ceil(1000),
            "row groups of the size asked"
        );
        // Row by row against the planted IOs (both in completion order).
        ios.sort_by_key(|i| i.complete_ns);
        let mut i = 0;
        for b in &batches {
            let col = |n: &str| b.column_by_name(n).unwrap().clone();
            let complete = col("complete_time");
            let complete = complete
                .as_any()
                .downcast_ref::<TimestampNanosecondArray>()
                .unwrap();
            let dlat = col("device_latency_ns");
            let dlat = dlat.as_any().downcast_ref::<Int64Array>().unwrap();
            let op = arrow_array::cast::AsArray::as_dictionary::<Int32Type>(&*col("op")).clone();
            let op_names = op
                .values()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .clone();
            for r in 0..b.num_rows() {
                let io = &ios[i];
                assert_eq!(
                    complete.value(r),
                    WALL_NS
                        + i64::try_from(io.complete_ns - crate::inputs::synth::BASE_NS).unwrap()
                );
                let name = op_names.value(usize::try_from(op.keys().value(r)).unwrap());
                if io.issue_ns == 0 {
                    assert!(dlat.is_null(r));
                    assert_eq!(name, "flush-absorbed");
                } else {
                    assert_eq!(
                        dlat.value(r),
                        i64::try_from(io.complete_ns - io.issue_ns).unwrap()
                    );
                    assert_eq!(name, io.op.name());
                }
                i += 1;
            }
        }
    }

    #[test]
    fn string_columns_carry_the_statistics_and_page_index_engines_skip_by() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(3, 500, &[(1.0, 0.5, 400.0)]);
        write_trace(&p, &mut ios).unwrap();
        let out = dir.path().join("t.parquet");
        let opts = ParquetOptions {
            row_group_rows: 1000,
            ..Default::default()
        };
        let st = export_parquet(&[p], &out, &opts).unwrap();
        let (batches, _) = read_back(&st.files);
        let mut ops = Vec::new();
        for b in &batches {
            let op = arrow_array::cast::AsArray::as_dictionary::<Int32Type>(
                &**b.column_by_name("op").unwrap(),
            )
            .clone();
            let names = op.values().as_any().downcast_ref::<StringArray>().unwrap();
            ops.extend((0..b.num_rows()).map(|r| {
                names
                    .value(usize::try_from(op.keys().value(r)).unwrap())
                    .to_string()
            }));
        }
        let reader =
            parquet::file::reader::SerializedFileReader::new(File::open(&out).unwrap()).unwrap();
        let meta = parquet::file::reader::FileReader::metadata(&reader);
        assert!(meta.num_row_groups() > 2);
        let mut seen = std::collections::BTreeSet::new();
        for (g, rg) in meta.row_groups().iter().enumerate() {
            let rows = &ops[g * 1000..(g * 1000 + 1000).min(ops.len())];
            assert_eq!(usize::try_from(rg.num_rows()).unwrap(), rows.len());
            let stats = rg.column(2).statistics().expect("op statistics");
            let min = rows.iter().min().unwrap();
            let max = rows.iter().max().unwrap();
            assert_eq!(stats.min_bytes_opt(), Some(min.as_bytes()), "row group {g}");
            assert_eq!(stats.max_bytes_opt(), Some(max.as_bytes()), "row group {g}");
            seen.extend(rows.iter().cloned());
            // No cgroups, owners or files in this trace: the columns are all nulls, and say so.
            for (i, name) in [(18, "cgroup"), (20, "owner_cgroup"), (21, "file")] {
                let stats = rg.column(i).statistics().expect("statistics");
                assert_eq!(stats.null_count_opt(), Some(rows.len() as u64), "{name}");
            }
            for c in rg.columns() {
                assert!(
                    c.column_index_offset().is_some() && c.offset_index_offset().is_some(),
                    "page index of {}",
                    c.column_path()
                );
            }
        }
        assert!(seen.len() >= 2, "reads and writes: {seen:?}");
    }

    /// The strings of a dictionary column, row by row.
    fn strings(batches: &[RecordBatch], name: &str) -> Vec<Option<String>> {
        let mut out = Vec::new();
        for b in batches {
            let col = b.column_by_name(name).unwrap();
            let d = arrow_array::cast::AsArray::as_dictionary::<Int32Type>(&**col);
            let values = d.values().as_any().downcast_ref::<StringArray>().unwrap();
            out.extend((0..b.num_rows()).map(|r| {
                (!d.is_null(r)).then(|| {
                    values
                        .value(usize::try_from(d.keys().value(r)).unwrap())
                        .to_string()
                })
            }));
        }
        out
    }

    #[test]
    fn the_owner_cgroup_and_file_columns_name_them_as_the_report_does() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        // Past one batch: the second's dictionaries start anew.
        let n = BATCH_ROWS as u64 + 1000;
        let want = crate::export::owner_and_file_trace(&p, n);
        let out = dir.path().join("t.parquet");
        let opts = ParquetOptions {
            row_group_rows: 50_000,
            ..Default::default()
        };
        let st = export_parquet(&[p], &out, &opts).unwrap();
        assert_eq!(st.written, n);
        let (batches, _) = read_back(&st.files);
        let names: Vec<String> = schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names[19], "hw_queue", "earlier columns keep their place");
        assert_eq!(names[20..], ["owner_cgroup", "file"]);
        let cgroup = strings(&batches, "cgroup");
        let owner = strings(&batches, "owner_cgroup");
        let file = strings(&batches, "file");
        assert_eq!(file.len(), want.len());
        for (i, w) in want.iter().enumerate() {
            assert_eq!(
                (&cgroup[i], &owner[i], &file[i]),
                (&w.0, &w.1, &w.2),
                "row {i}"
            );
        }
    }

    #[test]
    fn a_reader_skipping_pages_by_the_offset_index_reads_the_same_rows() {
        use parquet::arrow::arrow_reader::{ArrowReaderOptions, RowSelection, RowSelector};
        use parquet::file::metadata::PageIndexPolicy;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(60, 1000, &[(10.0, 2.0, 400.0)]);
        write_trace(&p, &mut ios).unwrap();
        assert!(
            ios.len() > 50_000,
            "pages of 20,000 rows to skip: {}",
            ios.len()
        );
        let out = dir.path().join("t.parquet");
        let st = export_parquet(&[p], &out, &ParquetOptions::default()).unwrap();
        let (all, _) = read_back(&st.files);
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
        let b = ParquetRecordBatchReaderBuilder::try_new_with_options(
            File::open(&out).unwrap(),
            options,
        )
        .unwrap();
        let selection =
            RowSelection::from(vec![RowSelector::skip(45_000), RowSelector::select(300)]);
        let some: Vec<RecordBatch> = b
            .with_row_selection(selection)
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for name in ["op", "device", "comm", "cgroup"] {
            assert_eq!(
                strings(&some, name),
                strings(&all, name)[45_000..45_300],
                "{name}"
            );
        }
    }

    #[test]
    fn several_traces_go_to_host_and_date_partitions_and_a_failure_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.blkp");
        let mut ios = cassandra_like(2, 200, &[]);
        write_trace(&p, &mut ios).unwrap();
        let out = dir.path().join("fleet");
        let st = export_parquet(&[p.clone(), p.clone()], &out, &ParquetOptions::default()).unwrap();
        assert_eq!(st.written, 2 * ios.len() as u64);
        let date = date_of(WALL_NS.div_euclid(NS_PER_DAY));
        for i in 0..2 {
            let f = out.join(format!("host=synth/date={date}/part-{i}.parquet"));
            assert!(f.exists(), "{}", f.display());
        }
        assert!(!part_name(&out).exists());
        // A second export into the same directory would mix runs: refused, nothing changed.
        let e = export_parquet(
            std::slice::from_ref(&p),
            &out,
            &ParquetOptions {
                partition: true,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("not an empty directory"), "{e}");
        // A trace that is not one: no directory, no staging left behind.
        let bad = dir.path().join("bad.blkp");
        std::fs::write(&bad, b"not a trace").unwrap();
        let out2 = dir.path().join("fleet2");
        assert!(export_parquet(&[p, bad], &out2, &ParquetOptions::default()).is_err());
        assert!(!out2.exists() && !part_name(&out2).exists());
    }

    #[test]
    fn host_names_are_safe_partition_values() {
        assert_eq!(hive_value("db-7.example"), "db-7.example");
        assert_eq!(hive_value("a/b=c"), "a%2Fb%3Dc");
        assert!(!hive_value("..").contains('/') && hive_value("..") != "..");
        assert_eq!(date_of(0), "1970-01-01");
    }
}
