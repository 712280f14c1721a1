//! `blkprof export --format csv`: a header row, then one row per IO, the columns of the column
//! table that CSV writes (unknown values empty).

use std::io::Write;

use tracer_common::format::{IoRecord, TraceReader};

use super::columns::{Column, Field, csv_columns};
use super::{ExportStats, RowExport};

/// Rows quoted by the csv crate as RFC 4180 says (a field holding a comma, a quote, a CR or a LF
/// is quoted; a task name, a cgroup or a file path can hold any of them), ending in LF.
pub(super) struct Csv<'a> {
    w: csv::Writer<&'a mut dyn Write>,
    columns: Vec<(&'static str, &'static Column)>,
    /// Numbers are formatted into one reused buffer, not a String per field.
    num: String,
}

impl<'a> Csv<'a> {
    /// Writes the header row.
    pub(super) fn start(out: &'a mut dyn Write) -> std::io::Result<Csv<'a>> {
        let columns = csv_columns();
        let mut w = csv::Writer::from_writer(out);
        w.write_record(columns.iter().map(|c| c.0))
            .map_err(io_error)?;
        Ok(Csv {
            w,
            columns,
            num: String::new(),
        })
    }

    fn row(&mut self, r: &TraceReader, rec: &IoRecord) -> csv::Result<()> {
        use std::fmt::Write as _;
        for (_, col) in &self.columns {
            self.num.clear();
            // A String takes any write; only a Display impl could fail it (an integer's cannot).
            match col.field(r, rec) {
                Field::Null => self.w.write_field("")?,
                // In the narrowest type that holds it: i128's formatting is the slower.
                Field::Int(v) => {
                    let written = match (u64::try_from(v), i64::try_from(v)) {
                        (Ok(u), _) => write!(self.num, "{u}"),
                        (_, Ok(i)) => write!(self.num, "{i}"),
                        _ => write!(self.num, "{v}"),
                    };
                    written.map_err(std::io::Error::other)?;
                    self.w.write_field(&self.num)?;
                }
                Field::Micros(ns) => {
                    let ns = u64::try_from(ns).map_or(ns as f64, |u| u as f64);
                    write!(self.num, "{:.3}", ns / 1e3).map_err(std::io::Error::other)?;
                    self.w.write_field(&self.num)?;
                }
                Field::Str(s) => match spreadsheet_safe(&s) {
                    Some(t) => self.w.write_field(t)?,
                    None => self.w.write_field(&*s)?,
                },
            }
        }
        self.w.write_record(None::<&[u8]>)
    }
}

impl RowExport for Csv<'_> {
    fn record(
        &mut self,
        r: &TraceReader,
        rec: &IoRecord,
        stats: &mut ExportStats,
    ) -> std::io::Result<()> {
        self.row(r, rec).map_err(io_error)?;
        stats.written += 1;
        Ok(())
    }

    fn finish(&mut self, _stats: &mut ExportStats) -> std::io::Result<()> {
        self.w.flush()
    }
}

/// A text cell a spreadsheet would take for a formula (it starts with `=`, `+`, `-`, `@`, a
/// tab or a CR: a task named `-bash`, or one a local user named `=HYPERLINK(...)`), as text:
/// prefixed with `'`, as OWASP recommends. None for any other cell, written as it is. Numbers
/// never come here; JSON lines and Parquet keep names as they are.
fn spreadsheet_safe(s: &str) -> Option<String> {
    s.starts_with(['=', '+', '-', '@', '\t', '\r'])
        .then(|| format!("'{s}"))
}

/// The csv crate's writing error as the io error under it, so that a closed pipe stays
/// `BrokenPipe` (a normal end for `| head`); its `From<csv::Error>` would make every kind Other.
fn io_error(e: csv::Error) -> std::io::Error {
    if !e.is_io_error() {
        return std::io::Error::other(e);
    }
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        k => std::io::Error::other(format!("{k:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::spreadsheet_safe;

    #[test]
    fn cells_a_spreadsheet_would_evaluate_are_text() {
        for s in ["=HYPERLINK(\"x\")", "+1", "-bash", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(spreadsheet_safe(s), Some(format!("'{s}")), "{s:?}");
        }
        for s in ["java", "/system.slice/a", "read", "sync,meta", "", "a=b"] {
            assert_eq!(spreadsheet_safe(s), None, "{s:?}");
        }
    }
}
