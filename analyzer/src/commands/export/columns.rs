//! The columns of the per-IO exports (CSV, JSON lines, Parquet), each written once in
//! [`COLUMNS`]: its names, its type, when its value is unknown, and its getter. The exporters
//! read the table; adding a column is a row here (and the field in the trace format).
//!
//! Where the formats write a column differently, its row says so: the text formats' names
//! (`Names`), what they write for an unknown value (`Column::text_unknown`), and how Parquet
//! stores a number (`Store`) or names an op (`Text::Op`).

use std::borrow::Cow;

use tracer_common::format::{IoRecord, TraceReader};
use tracer_common::op::{Op, flags};
use tracer_common::{FILE_DEV_ANON, FILE_DEV_DEVICE};

use crate::analysis::labels::{DEVICE_FILE, DIRECT_FILE, UnnamedCgroup, UnnamedFile};

/// A column's name in each format, `None` where the format does not write it. Parquet
/// writes every column (its positions are the table's).
#[derive(Clone, Copy, Debug)]
pub(super) struct Names {
    pub csv: Option<&'static str>,
    pub json: Option<&'static str>,
    #[cfg_attr(
        not(any(feature = "parquet", test)),
        expect(dead_code, reason = "read by the Parquet exporter only")
    )]
    pub parquet: &'static str,
}

/// What a column holds, and how each format writes it.
#[derive(Clone, Copy)]
pub(super) enum Value {
    /// A number of the record, stored in Parquet as `Store` says.
    Num(Num, Store),
    /// A string; Parquet writes it as a dictionary column.
    Text(Text),
}

/// A number of a record: its getter, and (for a value some records do not know) the test of
/// whether a record knows it.
#[derive(Clone, Copy)]
pub(super) struct Num {
    pub get: fn(&IoRecord) -> i128,
    pub known: Option<fn(&IoRecord) -> bool>,
    /// `get` and `known` over a run of records into a Parquet column, with both inlined in the
    /// loop ([`num!`] writes it from the same expressions): a call per value would cost the
    /// hand-optimized Parquet export a large part of its rate.
    #[cfg(feature = "parquet")]
    pub fill: super::parquet::Fill,
}

/// How a number is stored in Parquet (CSV and JSON lines write it as it is, in decimal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Store {
    /// Int64, saturating (the flush sector, `u64::MAX` in the trace, is `i64::MAX`).
    Int64,
    /// Int32, saturating.
    Int32,
    /// Int32 of the same 32 bits (the kernel's `pid_t` is an i32 kept as a u32).
    Int32Bits,
    /// A time on the trace's monotonic clock (ns), stored as a UTC timestamp (ns). CSV and JSON
    /// lines write the monotonic ns.
    Timestamp,
    /// A duration (ns), stored as Int64 ns. CSV writes it in microseconds with 3 decimals.
    Duration,
}

/// A string column's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Text {
    /// The `host` of the Parquet options (no text format writes it).
    Host,
    /// The device's name (`MAJ:MIN` for a device the trace did not name).
    Device,
    /// CSV and JSON lines: the record's op name; Parquet: the report's op (`flush-absorbed`
    /// for an absorbed empty flush, which the report counts apart).
    Op,
    /// The flags' names joined by `|`.
    Flags,
    /// The submitter's comm.
    Comm,
    /// The submitter's cgroup path (null when unknown).
    Cgroup,
    /// The cgroup the IO was charged to (null when unknown).
    OwnerCgroup,
    /// The file of the IO's first data page (null without data pages or files).
    File,
}

impl Text {
    /// The column may be null (the other string columns always have a value).
    pub(super) fn nullable(self) -> bool {
        matches!(self, Text::Cgroup | Text::OwnerCgroup | Text::File)
    }
}

/// What a text format writes for a number a record does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unknown {
    /// Null (CSV: an empty field).
    Null,
    /// The number the getter reads anyway (0 for a never-issued IO's issue time). Parquet
    /// always writes null.
    AsRead,
}

#[derive(Clone, Copy)]
pub(super) struct Column {
    pub names: Names,
    pub value: Value,
    pub text_unknown: Unknown,
}

impl Column {
    /// Parquet: the column may be null.
    #[cfg_attr(
        not(feature = "parquet"),
        expect(dead_code, reason = "read by the Parquet exporter only")
    )]
    pub(super) fn nullable(&self) -> bool {
        match self.value {
            Value::Num(n, _) => n.known.is_some(),
            Value::Text(t) => t.nullable(),
        }
    }
}

/// A column's value for one record, as the text formats write it.
pub(super) enum Field<'a> {
    Null,
    Int(i128),
    /// Nanoseconds written as microseconds.
    Micros(i128),
    Str(Cow<'a, str>),
}

impl Column {
    /// This column's value for `rec` in CSV and JSON lines.
    pub(super) fn field<'a>(&self, r: &'a TraceReader, rec: &IoRecord) -> Field<'a> {
        match self.value {
            Value::Num(n, store) => {
                if self.text_unknown == Unknown::Null && n.known.is_some_and(|k| !k(rec)) {
                    return Field::Null;
                }
                let v = (n.get)(rec);
                if store == Store::Duration {
                    Field::Micros(v)
                } else {
                    Field::Int(v)
                }
            }
            Value::Text(t) => match text(t, r, rec) {
                Some(s) => Field::Str(s),
                None => Field::Null,
            },
        }
    }
}

/// A string column's value for `rec` (`None`: null). Parquet reads the same functions through
/// its per-trace and per-batch dictionaries.
pub(super) fn text<'a>(t: Text, r: &'a TraceReader, rec: &IoRecord) -> Option<Cow<'a, str>> {
    Some(match t {
        Text::Host => Cow::Borrowed(r.header().host.as_str()),
        Text::Device => Cow::Owned(dev_name(r, rec.dev)),
        Text::Op => Cow::Borrowed(rec.op.name()),
        Text::Flags => Cow::Owned(flag_names(rec.flags)),
        Text::Comm => Cow::Borrowed(r.tasks()[rec.task as usize].comm.as_str()),
        Text::Cgroup => return cgroup_label(r, rec.cgroup),
        Text::OwnerCgroup => return cgroup_label(r, rec.owner_cgroup),
        Text::File => return file_label(r, rec),
    })
}

/// A [`Num`] from one getter expression over record `$r`, and optionally the test of whether
/// `$r` knows the value.
macro_rules! num {
    (|$r:ident| $get:expr) => {
        Num {
            get: |$r: &IoRecord| i128::from($get),
            known: None,
            #[cfg(feature = "parquet")]
            fill: |recs, cx, col| {
                col.extend(
                    recs,
                    cx,
                    |$r: &IoRecord| i128::from($get),
                    None::<fn(&IoRecord) -> bool>,
                )
            },
        }
    };
    (|$r:ident| $get:expr, known if $known:expr) => {
        Num {
            get: |$r: &IoRecord| i128::from($get),
            known: Some(|$r: &IoRecord| $known),
            #[cfg(feature = "parquet")]
            fill: |recs, cx, col| {
                col.extend(
                    recs,
                    cx,
                    |$r: &IoRecord| i128::from($get),
                    Some(|$r: &IoRecord| $known),
                )
            },
        }
    };
}

const fn names(
    csv: Option<&'static str>,
    json: Option<&'static str>,
    parquet: &'static str,
) -> Names {
    Names { csv, json, parquet }
}

/// Written under the same name in every format.
const fn everywhere(name: &'static str) -> Names {
    names(Some(name), Some(name), name)
}

const fn num(names: Names, num: Num, store: Store) -> Column {
    Column {
        names,
        value: Value::Num(num, store),
        text_unknown: Unknown::Null,
    }
}

const fn text_col(names: Names, t: Text) -> Column {
    Column {
        names,
        value: Value::Text(t),
        text_unknown: Unknown::Null,
    }
}

/// Written as read in the text formats even where unknown (Parquet: null).
const fn unknown_as_read(c: Column) -> Column {
    Column {
        text_unknown: Unknown::AsRead,
        ..c
    }
}

/// The IO was issued to the device (its issue time and device latency are known).
fn issued(r: &IoRecord) -> bool {
    r.issue_ns != 0
}

/// The IO's entry into the OS queue is in the trace (not before the run, not unknown).
fn entered(r: &IoRecord) -> bool {
    r.enter_ns != 0 && r.flags & flags::STARTED_BEFORE == 0
}

/// Every column, in Parquet's order. CSV's order is [`CSV_ORDER`] and JSON lines' keys are
/// sorted; columns added after those orders were fixed follow in this table's order.
pub(super) const COLUMNS: &[Column] = &[
    text_col(names(None, None, "host"), Text::Host),
    text_col(everywhere("device"), Text::Device),
    text_col(everywhere("op"), Text::Op),
    text_col(everywhere("flags"), Text::Flags),
    num(
        names(Some("complete_ns"), Some("complete_ns"), "complete_time"),
        num!(|r| r.complete_ns),
        Store::Timestamp,
    ),
    unknown_as_read(num(
        names(Some("issue_ns"), Some("issue_ns"), "issue_time"),
        num!(|r| r.issue_ns, known if issued(r)),
        Store::Timestamp,
    )),
    unknown_as_read(num(
        names(Some("enter_ns"), Some("enter_ns"), "enter_time"),
        num!(|r| r.enter_ns, known if entered(r)),
        Store::Timestamp,
    )),
    unknown_as_read(num(
        names(Some("device_us"), None, "device_latency_ns"),
        num!(|r| r.device_ns(), known if issued(r)),
        Store::Duration,
    )),
    num(
        names(Some("total_us"), None, "total_latency_ns"),
        num!(|r| r.total_ns()),
        Store::Duration,
    ),
    // Queue time needs both ends.
    unknown_as_read(num(
        names(Some("queue_us"), None, "queue_ns"),
        num!(|r| r.issue_ns.saturating_sub(r.enter_ns), known if issued(r) && entered(r)),
        Store::Duration,
    )),
    num(everywhere("bytes"), num!(|r| r.bytes), Store::Int64),
    num(everywhere("sector"), num!(|r| r.sector), Store::Int64),
    num(everywhere("pid"), num!(|r| r.pid), Store::Int32Bits),
    text_col(everywhere("comm"), Text::Comm),
    num(
        everywhere("dev_inflight"),
        num!(|r| r.dev_inflight),
        Store::Int32,
    ),
    num(
        everywhere("os_inflight"),
        num!(|r| r.os_inflight),
        Store::Int32,
    ),
    num(everywhere("error"), num!(|r| r.error), Store::Int32),
    num(
        names(None, None, "requeues"),
        num!(|r| r.requeues),
        Store::Int32,
    ),
    // The submitter's cgroup (v2) path; null when the trace has none (before format 3).
    text_col(everywhere("cgroup"), Text::Cgroup),
    // The blk-mq hardware queue (NVMe: submission queue); null when the trace has none
    // (before format 4, imported traces).
    num(
        everywhere("hw_queue"),
        num!(|r| r.hw_queue.unwrap_or(0), known if r.hw_queue.is_some()),
        Store::Int32,
    ),
    // The cgroup the IO was charged to (its pages' owner for writeback) as the tracer named
    // it; null when unknown (not tracked, before format 5).
    text_col(everywhere("owner_cgroup"), Text::OwnerCgroup),
    // The file of the IO's first data page (the report's files section's names); null without
    // data pages or when the trace names no files (before format 5, no --files).
    text_col(everywhere("file"), Text::File),
];

/// CSV's columns, in the order CSV files have had them; columns not named here follow in
/// [`COLUMNS`]' order.
const CSV_ORDER: [&str; 20] = [
    "complete_ns",
    "enter_ns",
    "issue_ns",
    "device",
    "op",
    "flags",
    "sector",
    "bytes",
    "queue_us",
    "device_us",
    "total_us",
    "pid",
    "comm",
    "dev_inflight",
    "os_inflight",
    "error",
    "hw_queue",
    "cgroup",
    "owner_cgroup",
    "file",
];

/// CSV's columns in order, with their names.
pub(super) fn csv_columns() -> Vec<(&'static str, &'static Column)> {
    let mut out: Vec<(&str, &Column)> = CSV_ORDER
        .iter()
        .filter_map(|&n| {
            COLUMNS
                .iter()
                .find(|c| c.names.csv == Some(n))
                .map(|c| (n, c))
        })
        .collect();
    for c in COLUMNS {
        if let Some(n) = c.names.csv
            && !CSV_ORDER.contains(&n)
        {
            out.push((n, c));
        }
    }
    out
}

/// JSON lines' keys (each object's keys are written sorted), with their columns.
pub(super) fn json_columns() -> Vec<(&'static str, &'static Column)> {
    COLUMNS
        .iter()
        .filter_map(|c| c.names.json.map(|n| (n, c)))
        .collect()
}

/// The name of device `dev` (`MAJ:MIN` for a device the trace did not name).
pub(crate) fn dev_name(r: &TraceReader, dev: u32) -> String {
    r.devices().iter().find(|d| d.dev() == dev).map_or_else(
        || {
            let (a, b) = tracer_common::dev_split(dev);
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

/// The report's op of a record as Parquet's `op` dictionary key: op codes 0..16, 16 for an
/// absorbed empty flush.
#[inline]
#[cfg_attr(
    not(feature = "parquet"),
    expect(dead_code, reason = "read by the Parquet exporter only")
)]
pub(super) fn report_op_index(rec: &IoRecord) -> i32 {
    if rec.flags & flags::FLUSH_RQ != 0 {
        Op::Flush as i32
    } else if rec.op == Op::Flush {
        16
    } else {
        rec.op as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_has_one_name_per_format_and_csv_keeps_its_order() {
        let csv: Vec<&str> = csv_columns().iter().map(|c| c.0).collect();
        assert_eq!(csv, CSV_ORDER);
        for format in [
            |c: &Column| c.names.csv,
            |c: &Column| c.names.json,
            |c: &Column| Some(c.names.parquet),
        ] {
            let mut seen: Vec<&str> = COLUMNS.iter().filter_map(format).collect();
            let n = seen.len();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), n, "a name twice: {seen:?}");
        }
    }
}
