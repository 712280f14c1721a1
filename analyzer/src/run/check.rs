//! `blkprof check`: gate CI on a trace against baselines or rules (docs/check-rules.md).

use std::path::{Path, PathBuf};

use analyzer::summary::JsonReport;

use super::Fail;

pub(crate) struct Config {
    pub(crate) trace: PathBuf,
    /// At least one baseline or a rules file.
    pub(crate) baselines: Vec<PathBuf>,
    pub(crate) rules: Option<PathBuf>,
    pub(crate) junit: Option<PathBuf>,
    pub(crate) allow_incomplete: bool,
    pub(crate) opts: analyzer::series::Options,
}

/// Whether every rule passed (the table on stdout says which did not).
pub(crate) fn run(cfg: &Config) -> Result<bool, Fail> {
    fn read_json<T: serde::de::DeserializeOwned>(p: &Path) -> Result<T, String> {
        std::fs::read(p)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    }
    let mut base: Vec<JsonReport> = Vec::new();
    for p in &cfg.baselines {
        base.push(read_json(p).map_err(|e| {
            Fail::Input(format!(
                "{}: not a `blkprof report --json` document: {e}",
                p.display()
            ))
        })?);
    }
    let rules: analyzer::check::Rules = match &cfg.rules {
        Some(p) => read_json(p).map_err(|e| {
            Fail::Input(format!(
                "{}: not a rules file (docs/check-rules.md): {e}",
                p.display()
            ))
        })?,
        None => analyzer::check::Rules {
            device: None,
            rules: analyzer::check::default_rules_for(base.len()),
        },
    };
    let summary = analyzer::summary::summarize(&cfg.trace, &cfg.opts)
        .map_err(Fail::input)?
        .to_json();
    let base: Vec<&JsonReport> = base.iter().collect();
    let verdicts = analyzer::check::check_against(&summary, &base, &rules, cfg.allow_incomplete)
        .map_err(Fail::Input)?;
    // The table is for people; the exit code and the JUnit file are the verdict, which a reader
    // that stops early (`| head`) does not change. Any other failed write is an error.
    if let Err(e) = analyzer::check::write_table(
        &mut analyzer::terminal::Escaped::new(std::io::stdout().lock()),
        &verdicts,
    ) && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(Fail::stdout(&e, "writing the verdicts"));
    }
    if let Some(j) = &cfg.junit {
        std::fs::write(
            j,
            analyzer::check::junit(&verdicts, &cfg.trace.display().to_string()),
        )
        .map_err(|e| Fail::Input(format!("cannot write {}: {e}", j.display())))?;
    }
    Ok(verdicts.iter().all(|v| v.pass))
}
