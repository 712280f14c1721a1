//! blkprof-trace: load the eBPF probe, stream its records, keep live statistics, and write
//! trace files (format in `tracer_common::format`).

pub mod btf;
pub mod cgroups;
pub mod cli;
pub mod clock;
pub mod daemon;
pub mod devices;
pub mod files;
pub mod kernel;
pub mod metrics;
pub mod named;
pub mod outdir;
pub mod privs;
pub mod probe;
pub mod recorder;
pub mod ringread;
pub mod stats;
