//! `blkprof whatif`: a traced disk's IO laid onto a modelled md RAID0.

use std::path::PathBuf;

use super::{Fail, write_json};

pub(crate) struct Config {
    pub(crate) trace: PathBuf,
    /// The array (checked) and where its data starts.
    pub(crate) opts: analyzer::whatif::Options,
    pub(crate) json: bool,
}

pub(crate) fn run(cfg: &Config) -> Result<(), Fail> {
    let w = analyzer::whatif::whatif(&cfg.trace, &cfg.opts).map_err(Fail::input)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if cfg.json {
        write_json(&mut out, &w)
    } else {
        analyzer::whatif::write_text(&mut analyzer::terminal::Escaped::new(&mut out), &w)
    }
    .map_err(|e| Fail::stdout(&e, ""))
}
