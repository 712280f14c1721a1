//! `blkprof export --format jsonl`: one JSON object per IO and line, its keys sorted, the
//! columns of the column table that JSON lines write (unknown values null).

use std::io::Write;

use serde_json::{Map, Value};
use tracer_common::format::{IoRecord, TraceReader};

use super::columns::{Column, Field, json_columns};
use super::{ExportStats, RowExport};

pub(super) struct Jsonl<'a> {
    out: &'a mut dyn Write,
    columns: Vec<(&'static str, &'static Column)>,
}

impl<'a> Jsonl<'a> {
    pub(super) fn new(out: &'a mut dyn Write) -> Jsonl<'a> {
        Jsonl {
            out,
            columns: json_columns(),
        }
    }
}

/// An integer as JSON writes it (every column's integers fit in an i64 or a u64).
fn number(v: i128) -> Value {
    match (u64::try_from(v), i64::try_from(v)) {
        (Ok(u), _) => Value::from(u),
        (_, Ok(i)) => Value::from(i),
        _ => Value::from(v.to_string()),
    }
}

impl RowExport for Jsonl<'_> {
    fn record(
        &mut self,
        r: &TraceReader,
        rec: &IoRecord,
        stats: &mut ExportStats,
    ) -> std::io::Result<()> {
        let mut obj = Map::new();
        for (name, col) in &self.columns {
            let v = match col.field(r, rec) {
                Field::Null => Value::Null,
                Field::Int(v) => number(v),
                Field::Micros(ns) => Value::from(ns as f64 / 1e3),
                Field::Str(s) => Value::String(s.into_owned()),
            };
            obj.insert((*name).to_string(), v);
        }
        serde_json::to_writer(&mut *self.out, &obj).map_err(|e| match e.io_error_kind() {
            // Keep the kind (a closed pipe is a normal end for `| head`).
            Some(k) => std::io::Error::new(k, e),
            None => std::io::Error::other(e),
        })?;
        writeln!(self.out)?;
        stats.written += 1;
        Ok(())
    }

    fn finish(&mut self, _stats: &mut ExportStats) -> std::io::Result<()> {
        self.out.flush()
    }
}
