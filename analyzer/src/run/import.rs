//! `blkprof import`: another tool's trace into blkprof's format (docs/importers.md).

use std::path::PathBuf;

use super::Fail;

/// `blkprof import --from`: whose trace the input is (docs/importers.md).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ImportFrom {
    /// MSR Cambridge / SNIA block trace CSV.
    Msr,
    /// blkparse's default text output, or the ftrace blk tracer's lines.
    Blk,
}

pub(crate) struct Config {
    pub(crate) from: ImportFrom,
    pub(crate) input: PathBuf,
    pub(crate) output: PathBuf,
    /// Skip malformed lines (counted and reported) instead of stopping at the first.
    pub(crate) skip_bad: bool,
}

pub(crate) fn run(cfg: &Config) -> Result<(), Fail> {
    let output = &cfg.output;
    // Written beside the output and renamed into place when complete: a failed import leaves
    // no half-written trace, and never clobbers a file that was there.
    let mut part = output.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let st = match cfg.from {
        ImportFrom::Msr => analyzer::import::import_msr(&cfg.input, &part, cfg.skip_bad),
        ImportFrom::Blk => analyzer::import::import_blk(&cfg.input, &part, cfg.skip_bad),
    }
    .and_then(|st| {
        std::fs::rename(&part, output).map(|()| st).map_err(|e| {
            analyzer::import::ImportError::Write(tracer_common::format::FormatError::Io {
                path: output.clone(),
                source: e,
            })
        })
    });
    let st = match st {
        Ok(st) => st,
        Err(e) => {
            let _ignored = std::fs::remove_file(&part);
            return Err(Fail::input(e));
        }
    };
    eprintln!(
        "blkprof: imported {} IOs into {}",
        st.records,
        output.display()
    );
    let b = &st.blk;
    if b.merges + b.splits + b.requeues > 0 {
        eprintln!(
            "blkprof: followed {} merges, {} splits, {} requeues",
            b.merges, b.splits, b.requeues
        );
    }
    if b.unmatched_queued + b.unmatched_issued > 0 {
        eprintln!(
            "blkprof: {} queued and {} issued events had no completion (the input ended first, or the request completed under a sector that could not be followed)",
            b.unmatched_queued, b.unmatched_issued
        );
    }
    if st.skipped > 0 {
        eprintln!(
            "blkprof: skipped {} malformed lines (first: {})",
            st.skipped,
            st.first_skipped.unwrap_or_default()
        );
    }
    Ok(())
}
