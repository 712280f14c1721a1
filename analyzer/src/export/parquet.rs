//! `blkprof export --format parquet`: one row per IO in Apache Parquet, for the SQL engines a
//! fleet already runs (DuckDB, Spark, Trino, ...; recipes in docs/fleet.md).
//!
//! Streaming: records go from each decoded chunk into column buffers of [`BATCH_ROWS`] rows,
//! which become an Arrow record batch for the Parquet writer; the writer holds at most one row
//! group, so memory does not grow with the trace. The columns mean what `blkprof report`
//! means: `op` is the report's op (absorbed empty flushes are `flush-absorbed`, as the report
//! counts them apart), `device_latency_ns` is null for IOs never issued to the device (the
//! report's device latency leaves them out), `total_latency_ns` is completion minus entry, and
//! records the report leaves out as damaged (completed outside the run's window) are left out
//! and counted here too.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use serde::Serialize;
use tracer_common::format::{Ending, IoRecord, TraceHeader, TraceReader};
use tracer_common::op::{Op, flags};

use super::{ExportError, flag_names};
use crate::summary::{Lost, Window, op_key};

/// Rows per Arrow record batch handed to the writer (column buffers are reused).
const BATCH_ROWS: usize = 65_536;

/// Rows per row group by default: the unit engines skip by statistics and read in parallel.
/// Not yet measured against the others: `cargo xtask bench --analyzer-only` compares 128 Ki,
/// 1 Mi and 4 Mi rows (and the codecs) and its figures belong in BENCHMARKS.md.
pub const DEFAULT_ROW_GROUP_ROWS: usize = 1 << 20;

/// Key of the file's key-value metadata that holds the run's description ([`RunMeta`], JSON).
pub const RUN_META_KEY: &str = "blkprof.run";

const NS_PER_DAY: i64 = 86_400_000_000_000;

/// `blkprof export --compression`: the Parquet codec of every column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    /// Zstandard (the default; `cargo xtask bench --analyzer-only` compares the codecs).
    Zstd,
    /// Snappy: what Spark writes by default.
    Snappy,
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
            codec: Codec::Zstd,
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

/// The Arrow schema of the export: one row per IO.
pub fn schema() -> SchemaRef {
    let dict = || DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let ts = || DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new("host", dict(), false),
        Field::new("device", dict(), false),
        Field::new("op", dict(), false),
        Field::new("flags", dict(), false),
        Field::new("complete_time", ts(), false),
        Field::new("issue_time", ts(), true),
        Field::new("enter_time", ts(), true),
        Field::new("device_latency_ns", DataType::Int64, true),
        Field::new("total_latency_ns", DataType::Int64, false),
        Field::new("queue_ns", DataType::Int64, true),
        Field::new("bytes", DataType::Int64, false),
        Field::new("sector", DataType::Int64, false),
        Field::new("pid", DataType::Int32, false),
        Field::new("comm", dict(), false),
        Field::new("dev_inflight", DataType::Int32, false),
        Field::new("os_inflight", DataType::Int32, false),
        Field::new("error", DataType::Int32, false),
        Field::new("requeues", DataType::Int32, false),
        // The submitter's cgroup (v2) path; null when the trace has none (before format 3).
        Field::new("cgroup", dict(), true),
    ]))
}

fn properties(opts: &ParquetOptions) -> WriterProperties {
    let col = |n: &str| ColumnPath::from(n);
    let mut b = WriterProperties::builder()
        .set_compression(opts.codec.parquet())
        .set_max_row_group_row_count(Some(opts.row_group_rows.max(1)))
        // Min/max per page and row group (column and offset indexes): engines skip row groups
        // and pages by time and device.
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_created_by(format!("blkprof {}", env!("CARGO_PKG_VERSION")));
    // Times grow (nearly) monotonically and latencies vary little from one IO to the next: delta
    // encoding packs them in a few bits each, where dictionaries would not help.
    for c in [
        "complete_time",
        "issue_time",
        "enter_time",
        "device_latency_ns",
        "total_latency_ns",
        "queue_ns",
        "sector",
    ] {
        b = b
            .set_column_dictionary_enabled(col(c), false)
            .set_column_encoding(col(c), Encoding::DELTA_BINARY_PACKED);
    }
    b.build()
}

/// A trace's strings as dictionary keys: per-trace tables, built as records come.
struct Keys {
    host: String,
    devices: Vec<(u32, String)>,
    last_dev: usize,
    /// flags bits -> index into `flag_values`, or -1.
    flag_index: Vec<i32>,
    flag_values: Vec<String>,
    op_values: Vec<String>,
}

/// Dictionary index of the report's op of a record: op codes 0..16, 16 for an absorbed empty
/// flush (names from [`op_key`], one place).
#[inline]
fn op_index(rec: &IoRecord) -> i32 {
    if rec.flags & flags::FLUSH_RQ != 0 {
        Op::Flush as i32
    } else if rec.op == Op::Flush {
        16
    } else {
        rec.op as i32
    }
}

impl Keys {
    fn new(host: String, r: &TraceReader) -> Keys {
        let mut op_values: Vec<String> = (0..16u8).map(|c| op_key(Op::from_code(c), 0)).collect();
        op_values[Op::Flush as usize] = op_key(Op::Flush, flags::FLUSH_RQ);
        op_values.push(op_key(Op::Flush, 0));
        Keys {
            host,
            devices: r
                .devices()
                .iter()
                .map(|d| (d.dev(), d.name.clone()))
                .collect(),
            last_dev: 0,
            flag_index: vec![-1; 1 << 16],
            flag_values: Vec::new(),
            op_values,
        }
    }

    #[inline]
    fn device(&mut self, dev: u32, r: &TraceReader) -> i32 {
        if self.devices.get(self.last_dev).is_some_and(|d| d.0 == dev) {
            return self.last_dev as i32;
        }
        let i = match self.devices.iter().position(|d| d.0 == dev) {
            Some(i) => i,
            None => {
                // A device frame read since, or a device the file never named.
                self.devices.push((
                    dev,
                    super::dev_name(
                        r,
                        &IoRecord {
                            dev,
                            ..IoRecord::default()
                        },
                    ),
                ));
                self.devices.len() - 1
            }
        };
        self.last_dev = i;
        i as i32
    }

    #[inline]
    fn flags(&mut self, f: u16) -> i32 {
        let k = self.flag_index[usize::from(f)];
        if k >= 0 {
            return k;
        }
        self.flag_values.push(flag_names(f));
        let k = (self.flag_values.len() - 1) as i32;
        self.flag_index[usize::from(f)] = k;
        k
    }
}

/// One batch's columns, reused from batch to batch.
#[derive(Default)]
struct Columns {
    device: Vec<i32>,
    op: Vec<i32>,
    flags: Vec<i32>,
    complete: Vec<i64>,
    issue: Vec<i64>,
    issue_valid: Vec<bool>,
    enter: Vec<i64>,
    enter_valid: Vec<bool>,
    device_latency: Vec<i64>,
    total_latency: Vec<i64>,
    queue: Vec<i64>,
    bytes: Vec<i64>,
    sector: Vec<i64>,
    pid: Vec<i32>,
    /// Index into `comm_values` (per batch: a long trace may have many tasks).
    comm: Vec<i32>,
    comm_values: Vec<String>,
    /// Task table index -> this batch's comm key, or -1; `comm_tasks` lists the ones set.
    comm_of_task: Vec<i32>,
    comm_tasks: Vec<usize>,
    /// The same for the task's cgroup path (-1 in `cgroup` for null, when the task's cgroup
    /// is unknown); `cgroup_of_task` is set with `comm_of_task`.
    cgroup: Vec<i32>,
    cgroup_values: Vec<String>,
    cgroup_of_task: Vec<i32>,
    dev_inflight: Vec<i32>,
    os_inflight: Vec<i32>,
    error: Vec<i32>,
    requeues: Vec<i32>,
}

impl Columns {
    fn len(&self) -> usize {
        self.complete.len()
    }

    #[inline]
    fn push(&mut self, rec: &IoRecord, header: &TraceHeader, keys: &mut Keys, r: &TraceReader) {
        let wall = |ns: u64| header.wall_ns(ns);
        self.device.push(keys.device(rec.dev, r));
        self.op.push(op_index(rec));
        self.flags.push(keys.flags(rec.flags));
        self.complete.push(wall(rec.complete_ns));
        let issued = rec.issue_ns != 0;
        self.issue.push(if issued { wall(rec.issue_ns) } else { 0 });
        self.issue_valid.push(issued);
        let entered = rec.enter_ns != 0 && rec.flags & flags::STARTED_BEFORE == 0;
        self.enter
            .push(if entered { wall(rec.enter_ns) } else { 0 });
        self.enter_valid.push(entered);
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.device_latency.push(clamp(rec.device_ns()));
        self.total_latency.push(clamp(rec.total_ns()));
        self.queue
            .push(clamp(rec.issue_ns.saturating_sub(rec.enter_ns)));
        self.bytes.push(i64::from(rec.bytes));
        self.sector.push(clamp(rec.sector));
        self.pid.push(rec.pid as i32);
        let t = rec.task as usize;
        if t >= self.comm_of_task.len() {
            self.comm_of_task.resize(t + 1, -1);
        }
        if t >= self.cgroup_of_task.len() {
            self.cgroup_of_task.resize(t + 1, -1);
        }
        let mut k = self.comm_of_task[t];
        if k < 0 {
            let task = r.tasks().get(t);
            self.comm_values
                .push(task.map_or_else(String::new, |x| x.comm.clone()));
            k = (self.comm_values.len() - 1) as i32;
            self.comm_of_task[t] = k;
            self.comm_tasks.push(t);
            // A cgroup's path, as the trace named it (one value per task, as the comm).
            self.cgroup_of_task[t] = match task.map(|x| x.cgroup) {
                Some(id) if id != 0 => {
                    self.cgroup_values.push(
                        r.cgroup_path(id)
                            .map_or_else(|| format!("(id {id})"), str::to_string),
                    );
                    (self.cgroup_values.len() - 1) as i32
                }
                _ => -1,
            };
        }
        self.comm.push(k);
        self.cgroup.push(self.cgroup_of_task[t]);
        let u32_col = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        self.dev_inflight.push(u32_col(rec.dev_inflight));
        self.os_inflight.push(u32_col(rec.os_inflight));
        self.error.push(rec.error);
        self.requeues.push(i32::from(rec.requeues));
    }

    /// The buffered rows as a record batch; the buffers are left empty for the next batch.
    fn take_batch(&mut self, schema: &SchemaRef, keys: &Keys) -> Result<RecordBatch, String> {
        let n = self.len();
        let dict = |k: &mut Vec<i32>, values: &mut dyn Iterator<Item = &str>| -> ArrayRef {
            let keys = Int32Array::new(ScalarBuffer::from(std::mem::take(k)), None);
            let values: ArrayRef = Arc::new(StringArray::from_iter_values(values));
            Arc::new(DictionaryArray::<Int32Type>::new(keys, values))
        };
        let i64s = |v: &mut Vec<i64>, valid: Option<NullBuffer>| -> ArrayRef {
            Arc::new(Int64Array::new(
                ScalarBuffer::from(std::mem::take(v)),
                valid,
            ))
        };
        let i32s = |v: &mut Vec<i32>| -> ArrayRef {
            Arc::new(Int32Array::new(ScalarBuffer::from(std::mem::take(v)), None))
        };
        let ts = |v: &mut Vec<i64>, valid: Option<NullBuffer>| -> ArrayRef {
            Arc::new(
                TimestampNanosecondArray::new(ScalarBuffer::from(std::mem::take(v)), valid)
                    .with_timezone("UTC"),
            )
        };
        let nulls = |v: &mut Vec<bool>| -> Option<NullBuffer> {
            let b = NullBuffer::from(std::mem::take(v));
            (b.null_count() > 0).then_some(b)
        };
        let issue_valid = nulls(&mut self.issue_valid);
        let enter_valid = nulls(&mut self.enter_valid);
        // Queue time needs both ends.
        let queue_valid = NullBuffer::union(issue_valid.as_ref(), enter_valid.as_ref());
        let mut host_keys = vec![0i32; n];
        let columns: Vec<ArrayRef> = vec![
            dict(&mut host_keys, &mut std::iter::once(keys.host.as_str())),
            dict(
                &mut self.device,
                &mut keys.devices.iter().map(|d| d.1.as_str()),
            ),
            dict(&mut self.op, &mut keys.op_values.iter().map(String::as_str)),
            dict(
                &mut self.flags,
                &mut keys.flag_values.iter().map(String::as_str),
            ),
            ts(&mut self.complete, None),
            ts(&mut self.issue, issue_valid.clone()),
            ts(&mut self.enter, enter_valid),
            i64s(&mut self.device_latency, issue_valid),
            i64s(&mut self.total_latency, None),
            i64s(&mut self.queue, queue_valid),
            i64s(&mut self.bytes, None),
            i64s(&mut self.sector, None),
            i32s(&mut self.pid),
            dict(
                &mut self.comm,
                &mut self.comm_values.iter().map(String::as_str),
            ),
            i32s(&mut self.dev_inflight),
            i32s(&mut self.os_inflight),
            i32s(&mut self.error),
            i32s(&mut self.requeues),
            {
                let keys = std::mem::take(&mut self.cgroup);
                let valid: Vec<bool> = keys.iter().map(|&k| k >= 0).collect();
                let keys: Vec<i32> = keys.into_iter().map(|k| k.max(0)).collect();
                let valid = NullBuffer::from(valid);
                let keys = Int32Array::new(
                    ScalarBuffer::from(keys),
                    (valid.null_count() > 0).then_some(valid),
                );
                // A dictionary needs a value for its null keys to point at.
                if self.cgroup_values.is_empty() {
                    self.cgroup_values.push(String::new());
                }
                let values: ArrayRef = Arc::new(StringArray::from_iter_values(
                    self.cgroup_values.iter().map(String::as_str),
                ));
                Arc::new(DictionaryArray::<Int32Type>::new(keys, values))
            },
        ];
        for &t in &self.comm_tasks {
            self.comm_of_task[t] = -1;
            self.cgroup_of_task[t] = -1;
        }
        self.comm_tasks.clear();
        self.comm_values.clear();
        self.cgroup_values.clear();
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
    }
}

/// One Parquet file being written: under a `.part` name until complete.
struct Part {
    part_path: PathBuf,
    path: PathBuf,
    writer: ArrowWriter<BufWriter<File>>,
    cols: Columns,
    rows: u64,
    /// The UTC day (days since the epoch) of a partitioned file; for flushing days gone by.
    day: i64,
    flushed: bool,
}

impl Part {
    fn create(
        path: PathBuf,
        schema: &SchemaRef,
        props: WriterProperties,
    ) -> Result<Part, ExportError> {
        let part_path = part_name(&path);
        if let Some(dir) = part_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                ExportError::Output(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let file = File::create(&part_path).map_err(|e| {
            ExportError::Output(format!("cannot write {}: {e}", part_path.display()))
        })?;
        let writer = ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, file),
            schema.clone(),
            Some(props),
        )
        .map_err(|e| ExportError::Parquet {
            path: part_path.clone(),
            source: e,
        })?;
        Ok(Part {
            part_path,
            path,
            writer,
            cols: Columns::default(),
            rows: 0,
            day: 0,
            flushed: false,
        })
    }

    fn write_batch(&mut self, schema: &SchemaRef, keys: &Keys) -> Result<(), ExportError> {
        if self.cols.len() == 0 {
            return Ok(());
        }
        let batch = self
            .cols
            .take_batch(schema, keys)
            .map_err(ExportError::Output)?;
        self.writer.write(&batch).map_err(|e| ExportError::Parquet {
            path: self.part_path.clone(),
            source: e,
        })
    }

    /// Write what is buffered, the metadata, the footer; rename into place.
    fn finish(
        mut self,
        schema: &SchemaRef,
        keys: &Keys,
        meta: &RunMeta,
    ) -> Result<PathBuf, ExportError> {
        self.write_batch(schema, keys)?;
        let meta = RunMeta {
            rows: self.rows,
            ..meta.clone()
        };
        self.writer.append_key_value_metadata(KeyValue::new(
            RUN_META_KEY.to_string(),
            serde_json::to_string(&meta).map_err(|e| ExportError::Output(e.to_string()))?,
        ));
        let perr = |path: &Path| {
            let path = path.to_path_buf();
            move |e| ExportError::Parquet { path, source: e }
        };
        let mut out = self.writer.into_inner().map_err(perr(&self.part_path))?;
        std::io::Write::flush(&mut out)?;
        drop(out);
        std::fs::rename(&self.part_path, &self.path).map_err(|e| {
            ExportError::Output(format!(
                "cannot rename {} to {}: {e}",
                self.part_path.display(),
                self.path.display()
            ))
        })?;
        Ok(self.path)
    }
}

fn part_name(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
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
    let partitioned = opts.partition || traces.len() > 1;
    let mut stats = ParquetStats::default();
    if !partitioned {
        return export_one(&traces[0], opts, &mut stats, Dest::File(out)).map(|()| stats);
    }
    if out.exists() {
        let empty = std::fs::read_dir(out)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
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
        &crate::series::Options::default(),
        file_bytes,
    );
    let only = match &opts.device {
        Some(name) => Some(
            header
                .devices
                .iter()
                .find(|d| d.name == *name || format!("{}:{}", d.major, d.minor) == *name)
                .ok_or_else(|| ExportError::NoDevice(name.clone()))?
                .dev(),
        ),
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
    let mut parts: Vec<Part> = Vec::new();
    let mut cur = usize::MAX;
    let mut outside = 0u64;
    let mut buf = Vec::new();
    let result = (|| -> Result<(), ExportError> {
        while r.next_chunk(&mut buf)? {
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
                    cur = match parts.iter().position(|p| p.day == day) {
                        Some(i) => i,
                        None => {
                            let path = path_of(day);
                            let mut p = Part::create(path, &schema, props.clone())?;
                            p.day = day;
                            parts.push(p);
                            parts.len() - 1
                        }
                    };
                    // Days more than a minute behind get no more records (completions arrive
                    // in order, give or take CPUs): write their row group out now.
                    let t = header.wall_ns(rec.complete_ns);
                    for p in parts.iter_mut().filter(|_| partitioned) {
                        if !p.flushed && (p.day + 1) * NS_PER_DAY + 60_000_000_000 < t {
                            p.write_batch(&schema, &keys)?;
                            p.writer.flush().map_err(|e| ExportError::Parquet {
                                path: p.part_path.clone(),
                                source: e,
                            })?;
                            p.flushed = true;
                        }
                    }
                }
                let p = &mut parts[cur];
                p.cols.push(rec, &header, &mut keys, &r);
                p.rows += 1;
                if p.cols.len() >= BATCH_ROWS {
                    p.write_batch(&schema, &keys)?;
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
    let trailer = r.trailer().cloned();
    let coverage = trailer
        .as_ref()
        .map(|t| tracer_common::coverage::coverage(&header, t))
        .unwrap_or_default();
    let meta = RunMeta {
        schema_version: 1,
        trace: trace.display().to_string(),
        host: host.clone(),
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
        lost: crate::summary::lost(&header, trailer.as_ref(), r.last_stats(), &coverage),
        coverage,
        devices: r.devices().to_vec(),
        time_zone: header.time_zone.clone(),
        utc_offset_s: header.utc_offset_s,
    };
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
        match p.finish(&schema, &keys, &meta) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Io, WALL_NS, cassandra_like, write_trace};
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

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
                    Some(values.value(d.keys().value(r) as usize).to_string())
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
                    WALL_NS + (io.complete_ns - crate::synth::BASE_NS) as i64
                );
                let name = op_names.value(op.keys().value(r) as usize);
                if io.issue_ns == 0 {
                    assert!(dlat.is_null(r));
                    assert_eq!(name, "flush-absorbed");
                } else {
                    assert_eq!(dlat.value(r), (io.complete_ns - io.issue_ns) as i64);
                    assert_eq!(name, io.op.name());
                }
                i += 1;
            }
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
