//! blkprof's analyzer: reads trace files (streaming, one chunk in memory) and summarises what
//! the disk did. No root, no eBPF toolchain.

pub mod sizes;
pub mod summary;
pub mod text;
