//! blkprof's analyzer: reads trace files (streaming, one chunk in memory) and summarises what
//! the disk did. No root, no eBPF toolchain.

pub mod bursts;
pub mod busy;
pub mod check;
pub mod compare;
pub mod export;
pub mod html;
pub mod import;
pub mod loghist;
pub mod noise;
pub mod plots;
pub mod sections;
pub mod series;
pub mod sizes;
pub mod stress;
pub mod summary;
pub mod synth;
pub mod text;
pub mod whatif;
pub mod zone;
