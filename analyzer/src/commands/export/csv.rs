//! `blkprof export --format csv`.

use std::io::Write;

use tracer_common::format::{DeviceInfo, TraceReader};

use super::{ExportError, ExportStats, cgroup_label, dev_name, file_label, flag_names};

/// One row per record, quoted by the csv crate as RFC 4180 says (a field holding a comma, a
/// quote, a CR or a LF is quoted; a task name, a cgroup or a file path can hold any of them),
/// rows ending in LF. The columns are those of the JSON lines (`mod.rs`), unknown values empty.
pub(super) fn write(
    r: &mut TraceReader,
    dev: Option<&DeviceInfo>,
    out: &mut dyn Write,
    stats: &mut ExportStats,
) -> Result<(), ExportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
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
    ])
    .map_err(io_error)?;
    // Numbers are formatted into one reused buffer, not a String per field.
    let mut num = String::new();
    let mut field = |w: &mut csv::Writer<&mut dyn Write>, v: std::fmt::Arguments| {
        use std::fmt::Write as _;
        num.clear();
        // A String takes any write; only a Display impl could fail it (an integer's cannot).
        num.write_fmt(v).map_err(std::io::Error::other)?;
        w.write_field(&num)
    };
    let mut buf = Vec::new();
    while r.next_chunk(&mut buf)? {
        for rec in &buf {
            if dev.is_some_and(|d| d.dev() != rec.dev) {
                stats.other_devices += 1;
                continue;
            }
            (|| {
                field(&mut w, format_args!("{}", rec.complete_ns))?;
                field(&mut w, format_args!("{}", rec.enter_ns))?;
                field(&mut w, format_args!("{}", rec.issue_ns))?;
                w.write_field(dev_name(r, rec))?;
                w.write_field(rec.op.name())?;
                w.write_field(flag_names(rec.flags))?;
                field(&mut w, format_args!("{}", rec.sector))?;
                field(&mut w, format_args!("{}", rec.bytes))?;
                let us = |ns: u64| ns as f64 / 1e3;
                let queue_ns = rec.issue_ns.saturating_sub(rec.enter_ns);
                field(&mut w, format_args!("{:.3}", us(queue_ns)))?;
                field(&mut w, format_args!("{:.3}", us(rec.device_ns())))?;
                field(&mut w, format_args!("{:.3}", us(rec.total_ns())))?;
                field(&mut w, format_args!("{}", rec.pid))?;
                w.write_field(&r.tasks()[rec.task as usize].comm)?;
                field(&mut w, format_args!("{}", rec.dev_inflight))?;
                field(&mut w, format_args!("{}", rec.os_inflight))?;
                field(&mut w, format_args!("{}", rec.error))?;
                match rec.hw_queue {
                    Some(q) => field(&mut w, format_args!("{q}"))?,
                    None => w.write_field("")?,
                }
                // Unknown (null in the other formats): empty.
                for id in [rec.cgroup, rec.owner_cgroup] {
                    w.write_field(cgroup_label(r, id).as_deref().unwrap_or(""))?;
                }
                w.write_field(file_label(r, rec).as_deref().unwrap_or(""))?;
                w.write_record(None::<&[u8]>)
            })()
            .map_err(io_error)?;
            stats.written += 1;
        }
    }
    w.flush()?;
    Ok(())
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
