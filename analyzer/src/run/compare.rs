//! `blkprof compare`: runs side by side; each arm a trace or a saved report.

use std::path::{Path, PathBuf};

use analyzer::summary::JsonReport;

use super::report::report_from_json;
use super::{Fail, write_json};

pub(crate) struct Config {
    /// Two or more; the first is the baseline.
    pub(crate) arms: Vec<PathBuf>,
    pub(crate) device: Option<String>,
    pub(crate) json: bool,
    /// How the arms that are traces are summarized.
    pub(crate) opts: analyzer::series::Options,
}

pub(crate) fn run(cfg: &Config) -> Result<(), Fail> {
    let mut inputs = Vec::new();
    for p in &cfg.arms {
        inputs.push(analyzer::compare::Input {
            path: p.display().to_string(),
            report: read_arm(p, &cfg.opts)?,
        });
    }
    let c =
        analyzer::compare::compare_inputs(&inputs, cfg.device.as_deref()).map_err(Fail::input)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if cfg.json {
        write_json(&mut out, &c)
    } else {
        analyzer::compare::write_text(&mut analyzer::terminal::Escaped::new(&mut out), &c)
    }
    .map_err(|e| Fail::stdout(&e, ""))
}

/// An arm: a trace (it starts with the format's magic bytes), summarized here, or a saved
/// report (JSON: it starts with `{`), taken as it is.
fn read_arm(path: &Path, opts: &analyzer::series::Options) -> Result<JsonReport, Fail> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(path)
        .and_then(|f| f.take(64).read_to_end(&mut head))
        .map_err(|e| Fail::Input(format!("cannot read {}: {e}", path.display())))?;
    if head.starts_with(tracer_common::format::MAGIC) {
        return Ok(analyzer::summary::summarize(path, opts)
            .map_err(Fail::input)?
            .to_json());
    }
    if head.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Fail::Input(format!(
            "{} is neither a blkprof trace (written by blkprof-trace) nor a report (the JSON of `blkprof report --json`)",
            path.display()
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| Fail::Input(format!("cannot read {}: {e}", path.display())))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        Fail::Input(format!(
            "{} is not valid JSON ({e}): give a trace or the JSON of `blkprof report --json`",
            path.display()
        ))
    })?;
    let is_report = ["schema_version", "traces", "devices"]
        .iter()
        .all(|k| v.get(k).is_some());
    if !is_report {
        let hint = if v.get("rows").is_some() {
            ": it looks like the output of `blkprof compare --json`; give the arms' reports or traces"
        } else {
            ""
        };
        return Err(Fail::Input(format!(
            "{} is JSON but not a blkprof report (the JSON of `blkprof report --json`, with schema_version, traces and devices){hint}",
            path.display()
        )));
    }
    report_from_json(path, v).map_err(Fail::Input)
}
