//! Records into column buffers of up to [`super::BATCH_ROWS`] rows, a buffer per column of
//! [`COLUMNS`]: numbers as Parquet's integers (with their validity once a row is null),
//! strings as dictionary keys, into the trace's tables (host, device, op, flags: few values,
//! kept for the whole trace) or the batch's (comm, cgroups, file: a long trace may have many).

use std::borrow::Cow;
use std::collections::HashMap;

use tracer_common::format::{IoRecord, TraceHeader, TraceReader};
use tracer_common::op::{Op, flags};

use crate::analysis::summary::op_key;
use crate::export::columns::{
    COLUMNS, Store, Text, Value, cgroup_label, dev_name, file_label, flag_names, report_op_index,
};

/// Records converted to columns at a time: 20 KB of records, read once per column.
const L1_ROWS: usize = 256;

/// A numeric column's getter over a run of records (the table's `num!` writes one per column).
pub(crate) type Fill = fn(&[IoRecord], &Clock<'_>, &mut NumBuf);

/// The dictionary key (Parquet's are i32) of the value at index `i` of its table. The tables
/// stay far below `i32::MAX` values: flags have at most one per u16, comms, cgroups and files at
/// most one per row of a batch ([`super::BATCH_ROWS`]), devices one per distinct device number
/// met, each new one found after a linear scan of the others (two billion would never finish).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    reason = "the tables' bounds above: every index is below i32::MAX"
)]
fn dict_key(i: usize) -> i32 {
    i as i32
}

/// The trace's monotonic times as UTC ns.
pub(crate) struct Clock<'a> {
    header: &'a TraceHeader,
    /// `header.wall_ns` without its 128-bit arithmetic where 64 bits do not overflow.
    offset: Option<i64>,
}

impl Clock<'_> {
    pub(super) fn new(header: &TraceHeader) -> Clock<'_> {
        let offset = i64::try_from(
            i128::from(header.wall_clock_start_ns) - i128::from(header.monotonic_base_ns),
        )
        .ok();
        Clock { header, offset }
    }

    #[inline]
    fn wall(&self, ns: u64) -> i64 {
        match (self.offset, i64::try_from(ns)) {
            (Some(o), Ok(n)) => n.checked_add(o).unwrap_or_else(|| self.header.wall_ns(ns)),
            _ => self.header.wall_ns(ns),
        }
    }
}

/// A numeric column's buffered rows.
pub(super) enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
}

/// One numeric column of the batch.
pub(crate) struct NumBuf {
    /// Position in [`COLUMNS`] (and in the Parquet schema).
    pub(super) column: usize,
    store: Store,
    fill: Fill,
    pub(super) values: Values,
    /// A validity per row, kept only once the batch has a null (rows before it: all valid);
    /// null rows' values are not written.
    valid: Vec<bool>,
    nulls: usize,
}

impl NumBuf {
    /// Append the values of `get` for `recs`, null where `known` says the record does not know
    /// it: generic, so that both are inlined in the loops (`num!` passes them).
    #[inline]
    pub(crate) fn extend<G, K>(
        &mut self,
        recs: &[IoRecord],
        clock: &Clock<'_>,
        get: G,
        known: Option<K>,
    ) where
        G: Fn(&IoRecord) -> i128,
        K: Fn(&IoRecord) -> bool,
    {
        let start = self.len();
        match (&mut self.values, self.store) {
            (Values::I64(v), Store::Timestamp) => v.extend(
                recs.iter()
                    .map(|r| clock.wall(u64::try_from(get(r)).unwrap_or(0))),
            ),
            (Values::I64(v), _) => v.extend(recs.iter().map(|r| {
                let x = get(r);
                i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
            })),
            (Values::I32(v), Store::Int32Bits) => v.extend(
                recs.iter()
                    .map(|r| u32::try_from(get(r)).map_or(-1, u32::cast_signed)),
            ),
            (Values::I32(v), _) => v.extend(recs.iter().map(|r| {
                let x = get(r);
                i32::try_from(x).unwrap_or(if x < 0 { i32::MIN } else { i32::MAX })
            })),
        }
        if let Some(known) = known {
            self.nulls += recs.iter().filter(|r| !known(r)).count();
            if self.nulls > 0 {
                self.valid.resize(start, true);
                self.valid.extend(recs.iter().map(known));
            }
        }
    }

    fn len(&self) -> usize {
        match &self.values {
            Values::I64(v) => v.len(),
            Values::I32(v) => v.len(),
        }
    }

    /// The rows' validity, if the batch has a null.
    pub(super) fn validity(&self) -> Option<&[bool]> {
        (self.nulls > 0).then_some(self.valid.as_slice())
    }

    fn clear(&mut self) {
        match &mut self.values {
            Values::I64(v) => v.clear(),
            Values::I32(v) => v.clear(),
        }
        self.valid.clear();
        self.nulls = 0;
    }
}

/// A trace's strings as dictionary keys: per-trace tables, built as records come.
pub(super) struct Keys {
    pub(super) host: String,
    devices: Vec<(u32, String)>,
    last_dev: usize,
    /// flags bits -> index into `flag_values`, or -1.
    flag_index: Vec<i32>,
    flag_values: Vec<String>,
    op_values: Vec<String>,
}

impl Keys {
    pub(super) fn new(host: String, r: &TraceReader) -> Keys {
        // Op codes 0..16, then an absorbed empty flush ([`report_op_index`]).
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
            return dict_key(self.last_dev);
        }
        let i = if let Some(i) = self.devices.iter().position(|d| d.0 == dev) {
            i
        } else {
            // A device frame read since, or a device the file never named.
            self.devices.push((dev, dev_name(r, dev)));
            self.devices.len() - 1
        };
        self.last_dev = i;
        dict_key(i)
    }

    #[inline]
    fn flags(&mut self, f: u16) -> i32 {
        let k = self.flag_index[usize::from(f)];
        if k >= 0 {
            return k;
        }
        self.flag_values.push(flag_names(f));
        let k = dict_key(self.flag_values.len() - 1);
        self.flag_index[usize::from(f)] = k;
        k
    }

    /// The values of a trace-wide dictionary column's keys.
    fn values(&self, text: Text) -> Vec<&str> {
        match text {
            Text::Host => vec![self.host.as_str()],
            Text::Device => self.devices.iter().map(|d| d.1.as_str()).collect(),
            Text::Op => self.op_values.iter().map(String::as_str).collect(),
            Text::Flags => self.flag_values.iter().map(String::as_str).collect(),
            Text::Comm | Text::Cgroup | Text::OwnerCgroup | Text::File => Vec::new(),
        }
    }
}

/// One dictionary column of the batch: keys (-1: null) into the trace's table ([`Keys`]) or
/// into `values`, the batch's.
pub(super) struct DictBuf {
    pub(super) column: usize,
    text: Text,
    pub(super) keys: Vec<i32>,
    values: Vec<String>,
    /// Task table index -> this batch's key, or -1 (unset; a null is -2); `tasks` lists the
    /// ones set. The comm and the cgroups are a task's: one value per task met.
    of_task: Vec<i32>,
    tasks: Vec<usize>,
    /// The batch's key of each (file system, inode, file id) met, and the last one looked up
    /// (consecutive IOs mostly share a file: no hashing for those).
    file_of: HashMap<(u32, u64, u32), i32>,
    last_file: Option<((u32, u64, u32), i32)>,
}

const UNSET: i32 = -2;

impl DictBuf {
    fn extend(&mut self, recs: &[IoRecord], keys: &mut Keys, r: &TraceReader) {
        match self.text {
            Text::Host => self.keys.resize(self.keys.len() + recs.len(), 0),
            Text::Device => {
                for rec in recs {
                    self.keys.push(keys.device(rec.dev, r));
                }
            }
            Text::Op => self.keys.extend(recs.iter().map(report_op_index)),
            Text::Flags => {
                for rec in recs {
                    self.keys.push(keys.flags(rec.flags));
                }
            }
            Text::Comm | Text::Cgroup | Text::OwnerCgroup => {
                for rec in recs {
                    let k = self.task_key(rec.task as usize, r);
                    self.keys.push(k);
                }
            }
            Text::File => {
                for rec in recs {
                    let k = self.file_key(rec, r);
                    self.keys.push(k);
                }
            }
        }
    }

    /// The batch's key of task table index `t`'s comm or cgroup (-1: null).
    #[inline]
    fn task_key(&mut self, t: usize, r: &TraceReader) -> i32 {
        if t >= self.of_task.len() {
            self.of_task.resize(t + 1, UNSET);
        }
        let k = self.of_task[t];
        if k != UNSET {
            return k;
        }
        let task = r.tasks().get(t);
        // As the trace named them (one value per task, as the comm).
        let value = match self.text {
            Text::Comm => Some(task.map_or_else(String::new, |x| x.comm.clone())),
            Text::Cgroup => cgroup_label(r, task.map_or(0, |x| x.cgroup)).map(Cow::into_owned),
            _ => cgroup_label(r, task.map_or(0, |x| x.owner_cgroup)).map(Cow::into_owned),
        };
        let k = match value {
            Some(v) => {
                self.values.push(v);
                dict_key(self.values.len() - 1)
            }
            None => -1,
        };
        self.of_task[t] = k;
        self.tasks.push(t);
        k
    }

    /// The batch's `file` key of a record (-1: null, no data pages or no files traced).
    #[inline]
    fn file_key(&mut self, rec: &IoRecord, r: &TraceReader) -> i32 {
        if rec.file_dev == 0 {
            return -1;
        }
        let f = (rec.file_dev, rec.file_ino, rec.file_id);
        if let Some((last, k)) = self.last_file
            && last == f
        {
            return k;
        }
        let values = &mut self.values;
        let k = *self.file_of.entry(f).or_insert_with(|| {
            values.push(file_label(r, rec).map_or_else(String::new, Cow::into_owned));
            dict_key(values.len() - 1)
        });
        self.last_file = Some((f, k));
        k
    }

    /// The strings the keys index.
    pub(super) fn values<'a>(&'a self, keys: &'a Keys) -> Vec<&'a str> {
        match self.text {
            Text::Comm | Text::Cgroup | Text::OwnerCgroup | Text::File => {
                self.values.iter().map(String::as_str).collect()
            }
            t => keys.values(t),
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        for &t in &self.tasks {
            self.of_task[t] = UNSET;
        }
        self.tasks.clear();
        self.file_of.clear();
        self.last_file = None;
    }
}

/// One batch's columns, reused from batch to batch.
#[derive(Default)]
pub(super) struct Batch {
    rows: usize,
    pub(super) nums: Vec<NumBuf>,
    pub(super) dicts: Vec<DictBuf>,
}

impl Batch {
    pub(super) fn new() -> Batch {
        let mut b = Batch::default();
        for (column, c) in COLUMNS.iter().enumerate() {
            match c.value {
                Value::Num(n, store) => b.nums.push(NumBuf {
                    column,
                    store,
                    fill: n.fill,
                    values: match store {
                        Store::Int32 | Store::Int32Bits => Values::I32(Vec::new()),
                        Store::Int64 | Store::Timestamp | Store::Duration => {
                            Values::I64(Vec::new())
                        }
                    },
                    valid: Vec::new(),
                    nulls: 0,
                }),
                Value::Text(text) => b.dicts.push(DictBuf {
                    column,
                    text,
                    keys: Vec::new(),
                    values: Vec::new(),
                    of_task: Vec::new(),
                    tasks: Vec::new(),
                    file_of: HashMap::new(),
                    last_file: None,
                }),
            }
        }
        b
    }

    pub(super) fn len(&self) -> usize {
        self.rows
    }

    /// Append rows, a column at a time (a whole decoded chunk at once when its records all go
    /// to this file: a column's loop is a tight one, where a push per column per row was not),
    /// in runs of [`L1_ROWS`] records, so that the passes over them (about one per column)
    /// read the first-level cache (the 650 KB of a decoded chunk did not stay in it: 20% of
    /// the export's time).
    pub(super) fn extend(
        &mut self,
        recs: &[IoRecord],
        clock: &Clock<'_>,
        keys: &mut Keys,
        r: &TraceReader,
    ) {
        for run in recs.chunks(L1_ROWS) {
            for d in &mut self.dicts {
                d.extend(run, keys, r);
            }
            for n in &mut self.nums {
                let fill = n.fill;
                fill(run, clock, n);
            }
            self.rows += run.len();
        }
    }

    /// Empty the buffers (keeping their memory) and forget the batch's tables.
    pub(super) fn clear(&mut self) {
        self.rows = 0;
        for n in &mut self.nums {
            n.clear();
        }
        for d in &mut self.dicts {
            d.clear();
        }
    }
}
