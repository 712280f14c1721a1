//! blkprof's analyzer: reads trace files (streaming, one chunk in memory) and summarises what
//! the disk did. No root, no eBPF toolchain.
//!
//! Layers, in the order data flows through them:
//! - [`inputs`]: trace-side and external inputs (importers, stress and app logs, time zones,
//!   synthetic traces);
//! - [`analysis`]: what is computed from the records, into the report model
//!   ([`report::model`]); each section also renders its own part (with [`report::format`]);
//! - [`report`]: the model, and its rendering as text, HTML and charts;
//! - [`commands`]: `check`, `compare`, `export`;
//!
//! and [`numeric`], a leaf any of them may use (median, the xorshift generator).

#![forbid(unsafe_code)]

// Dependencies this target links without naming them (`unused_crate_dependencies`):
// plotters-svg only turns on the bitmap encoder of plotters' SVG backend (the heatmaps' cells);
use plotters_svg as _;
// the integration tests' dev-dependencies, linked into the unit tests as well.
#[cfg(test)]
use {crc32fast as _, insta as _};

pub mod analysis;
pub mod commands;
pub mod inputs;
pub mod numeric;
pub mod report;

// Short paths to the modules (`analyzer::summary`, ...), used by the binary, the other crates
// of the workspace and the tests.
pub use analysis::{
    bursts, busy, classes, loghist, noise, sections, series, sizes, summary, whatif,
};
pub use commands::{check, compare, export};
pub use inputs::{import, stress, synth, zone};
pub use report::{html, plots, terminal, text};
