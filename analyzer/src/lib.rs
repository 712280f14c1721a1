//! blkprof's analyzer: reads trace files (streaming, one chunk in memory) and summarises what
//! the disk did. No root, no eBPF toolchain.
//!
//! Layers, each using only those above it (sections also render their own part):
//! - [`inputs`]: trace-side and external inputs (importers, stress and app logs, time zones,
//!   synthetic traces);
//! - [`analysis`]: what is computed from the records, into the report model;
//! - [`report`]: rendering the model as text, HTML and charts;
//! - [`commands`]: `check`, `compare`, `export`.

pub mod analysis;
pub mod commands;
pub mod inputs;
pub mod report;

// The paths from before the layers, used by the other crates of the workspace and the tests.
pub use analysis::{bursts, busy, loghist, noise, sections, series, sizes, summary, whatif};
pub use commands::{check, compare, export};
pub use inputs::{import, stress, synth, zone};
pub use report::{html, plots, text};
