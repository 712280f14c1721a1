//! `blkprof export`: a trace as a fio iolog, CSV or JSON lines (to a file or standard output),
//! as a Perfetto trace, or traces as Parquet.

use std::io::Write;
use std::path::{Path, PathBuf};

use analyzer::export::ExportError;
use analyzer::export::parquet::ParquetOptions;
use analyzer::export::perfetto::TimePoint;

use super::Fail;
use super::inputs::AppInputs;

pub(crate) enum Config {
    Rows(Rows),
    Perfetto(Perfetto),
    Parquet(Parquet),
}

/// A format of one row per IO written as a stream: iolog, iolog2, CSV, JSON lines.
pub(crate) struct Rows {
    pub(crate) trace: PathBuf,
    pub(crate) format: analyzer::export::Format,
    pub(crate) device: Option<String>,
    /// The iolog's replay target.
    pub(crate) target: Option<String>,
    /// `None`: standard output.
    pub(crate) output: Option<PathBuf>,
}

pub(crate) struct Perfetto {
    pub(crate) trace: PathBuf,
    /// `None`: standard output, which is not a terminal.
    pub(crate) output: Option<PathBuf>,
    pub(crate) device: Option<String>,
    pub(crate) from: Option<TimePoint>,
    pub(crate) to: Option<TimePoint>,
    pub(crate) min_latency_ns: u64,
    pub(crate) min_bytes: u64,
    pub(crate) inputs: AppInputs,
}

pub(crate) struct Parquet {
    pub(crate) traces: Vec<PathBuf>,
    /// A file, or a directory (several traces, `--partition`).
    pub(crate) output: PathBuf,
    pub(crate) opts: ParquetOptions,
}

pub(crate) fn run(cfg: &Config) -> Result<(), Fail> {
    match cfg {
        Config::Rows(c) => rows(c),
        Config::Perfetto(c) => perfetto(c),
        Config::Parquet(c) => parquet(c),
    }
}

/// The output file, or standard output; failing to create the file is bad input (exit 2), as
/// every export error is.
fn open_output(output: Option<&Path>) -> Result<Box<dyn Write>, Fail> {
    Ok(match output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Fail::Input(format!("cannot write {}: {e}", p.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

/// An export's result: a reader closing standard output stops it quietly; every other error,
/// writing ones included (`ExportError::Io` is the read side's too), is bad input.
fn closed_or_input<T>(r: Result<T, ExportError>) -> Result<T, Fail> {
    match r {
        Err(ExportError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Fail::Closed),
        r => r.map_err(Fail::input),
    }
}

fn rows(c: &Rows) -> Result<(), Fail> {
    let mut out = open_output(c.output.as_deref())?;
    let st = closed_or_input(analyzer::export::export(
        &c.trace,
        c.format,
        c.device.as_deref(),
        c.target.as_deref(),
        &mut out,
    ))?;
    if st.skipped > 0 {
        eprintln!(
            "blkprof: {} IOs an iolog cannot express were left out",
            st.skipped
        );
    }
    Ok(())
}

fn perfetto(c: &Perfetto) -> Result<(), Fail> {
    let zone = analyzer::zone::Zone::of_trace(
        tracer_common::format::TraceReader::open(&c.trace)
            .map_err(Fail::input)?
            .header(),
    );
    let context = c.inputs.read(&zone, true).map_err(Fail::Input)?;
    let opts = analyzer::export::perfetto::PerfettoOptions {
        device: c.device.clone(),
        from_ns: c.from,
        to_ns: c.to,
        min_latency_ns: c.min_latency_ns,
        min_bytes: c.min_bytes,
        context,
    };
    let mut out = open_output(c.output.as_deref())?;
    let st = closed_or_input(analyzer::export::perfetto::export_perfetto(
        &c.trace, &opts, &mut out,
    ))?;
    eprintln!(
        "blkprof: {} IOs on {} lanes, {} counter samples, {} bytes ({:.0} bytes per IO){}",
        st.ios,
        st.lanes,
        st.counter_samples,
        st.bytes,
        st.bytes as f64 / st.ios.max(1) as f64,
        if st.cut > 0 {
            format!(
                "; {} IOs left out by --device, --from/--to or the cuts",
                st.cut
            )
        } else {
            String::new()
        }
    );
    if st.app_slices + st.app_instants + st.stress_samples > 0 {
        eprintln!(
            "blkprof: application tracks: {} flush and compaction slices, {} SSTable deletions, {} stress counter samples (those within the trace's time)",
            st.app_slices, st.app_instants, st.stress_samples
        );
    }
    if st.damaged > 0 {
        eprintln!(
            "blkprof: {} records with times outside the run were left out (as the report does)",
            st.damaged
        );
    }
    Ok(())
}

fn parquet(c: &Parquet) -> Result<(), Fail> {
    let out = &c.output;
    let st = analyzer::export::parquet::export_parquet(&c.traces, out, &c.opts).map_err(
        |e| match e {
            ExportError::Output(_) | ExportError::Parquet { .. } => Fail::Output(e.to_string()),
            e => Fail::input(e),
        },
    )?;
    eprintln!(
        "blkprof: wrote {} IOs into {} Parquet file{} at {}",
        st.written,
        st.files.len(),
        if st.files.len() == 1 { "" } else { "s" },
        out.display()
    );
    if st.outside_window > 0 {
        eprintln!(
            "blkprof: left out {} records whose times cannot belong to their run (damaged), as the report does",
            st.outside_window
        );
    }
    Ok(())
}
