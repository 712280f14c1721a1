//! `blkprof report`: summarize traces (or render a saved report) as text or JSON, and with
//! `-o DIR` as HTML, JSON and charts.

use std::path::{Path, PathBuf};

use analyzer::summary::JsonReport;

use super::inputs::AppInputs;
use super::{Fail, write_json};

pub(crate) struct Config {
    /// Empty with `from_json`.
    pub(crate) traces: Vec<PathBuf>,
    pub(crate) json: bool,
    /// A saved report to render instead of traces.
    pub(crate) from_json: Option<PathBuf>,
    pub(crate) inputs: AppInputs,
    pub(crate) out_dir: Option<PathBuf>,
    /// Heatmaps included when shown: with `--heatmaps` or `-o`.
    pub(crate) opts: analyzer::series::Options,
}

pub(crate) fn run(cfg: &Config) -> Result<(), Fail> {
    if let Some(dir) = &cfg.out_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Fail::Input(format!("cannot create {}: {e}", dir.display())))?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut emit = |t: &Path, j: &JsonReport| -> Result<(), Fail> {
        if let Some(dir) = &cfg.out_dir {
            write_files(dir, t, j)
                .map_err(|e| Fail::Output(format!("writing into {}: {e}", dir.display())))?;
        }
        if cfg.json {
            write_json(&mut out, j)
        } else {
            analyzer::text::write(&mut analyzer::terminal::Escaped::new(&mut out), j)
        }
        .map_err(|e| Fail::stdout(&e, "writing the report"))
    };
    if let Some(path) = &cfg.from_json {
        return emit(path, &read_report(path).map_err(Fail::Input)?);
    }
    for (i, t) in cfg.traces.iter().enumerate() {
        // Local times are read in the zones given, else in the one the trace recorded:
        // each trace may come from another host.
        let trace_zone = analyzer::zone::Zone::of_trace(
            tracer_common::format::TraceReader::open(t)
                .map_err(Fail::input)?
                .header(),
        );
        let context = cfg.inputs.read(&trace_zone, i == 0).map_err(Fail::Input)?;
        let mut s = analyzer::summary::summarize(t, &cfg.opts).map_err(Fail::input)?;
        s.context = context;
        let j = s.to_json();
        drop(s);
        for w in &j.time_warnings {
            eprintln!("blkprof: warning: {}", w.message);
        }
        emit(t, &j)?;
    }
    Ok(())
}

/// A saved report (`blkprof report --json`).
fn read_report(path: &Path) -> Result<JsonReport, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "{} is not a blkprof report (the JSON of `blkprof report --json`): {e}",
            path.display()
        )
    })?;
    report_from_json(path, v)
}

/// A saved report from its JSON; warns when a newer blkprof wrote it.
pub(crate) fn report_from_json(path: &Path, v: serde_json::Value) -> Result<JsonReport, String> {
    let j: JsonReport = serde_json::from_value(v).map_err(|e| {
        format!(
            "{} is not a blkprof report (the JSON of `blkprof report --json`): {e}",
            path.display()
        )
    })?;
    j.check_series()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if j.schema_version > analyzer::summary::REPORT_SCHEMA_VERSION {
        eprintln!(
            "blkprof: warning: {} was written by a newer blkprof (report schema {}, this one reads {}): what it added is not shown",
            path.display(),
            j.schema_version,
            analyzer::summary::REPORT_SCHEMA_VERSION
        );
    }
    Ok(j)
}

/// report.html, report.json and the charts as SVG files; several traces get name prefixes.
fn write_files(dir: &Path, trace: &Path, j: &JsonReport) -> std::io::Result<()> {
    let stem = trace
        .file_stem()
        .map_or_else(|| "trace".into(), |x| x.to_string_lossy().into_owned());
    std::fs::write(dir.join(format!("{stem}.html")), analyzer::html::render(j))?;
    // Not over the report being rendered (--from-json DIR/run.json -o DIR).
    let json_path = dir.join(format!("{stem}.json"));
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if !same(&json_path, trace) {
        let json = serde_json::to_vec_pretty(j).map_err(std::io::Error::other)?;
        std::fs::write(json_path, json)?;
    }
    // `STEM-DEVICE-CHART.svg`, appended rather than `with_extension`: a rotated trace's stem
    // (`db.000003`) has a dot of its own, which would make every chart `db.svg`.
    let chart = |d: &str, name: &str, ext: &str| {
        dir.join(format!("{stem}-{}-{name}.{ext}", d.replace('/', "_")))
    };
    for d in &j.devices {
        for c in analyzer::plots::charts(j, d) {
            std::fs::write(chart(&d.name, &c.name, "svg"), c.svg())?;
            c.png(&chart(&d.name, &c.name, "png"))?;
        }
        for h in analyzer::plots::heatmaps(j, d) {
            std::fs::write(chart(&d.name, &h.name, "svg"), h.svg())?;
            h.png(&chart(&d.name, &h.name, "png"))?;
        }
    }
    eprintln!(
        "blkprof: wrote {}",
        dir.join(format!("{stem}.html")).display()
    );
    Ok(())
}
