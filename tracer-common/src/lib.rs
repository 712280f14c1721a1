//! Types shared by the eBPF probe (`no_std`) and user space, plus (feature `format`)
//! the trace file format that is the contract between tracer and analyzer.
#![cfg_attr(not(feature = "format"), no_std)]

pub mod abi;
#[cfg(feature = "assets")]
pub mod assets;
#[cfg(feature = "format")]
pub mod cgroup;
#[cfg(feature = "format")]
pub mod coverage;
#[cfg(feature = "format")]
pub mod diskstats;
#[cfg(feature = "format")]
pub mod fasthash;
#[cfg(feature = "format")]
pub mod format;
#[cfg(feature = "format")]
pub mod hdrfast;
#[cfg(feature = "format")]
pub mod join;
#[cfg(feature = "format")]
pub mod op;
// The one xorshift of the workspace (tests, planted traces, benchmarks).
pub mod rng;
#[cfg(feature = "format")]
pub mod time;
#[cfg(feature = "format")]
pub mod units;

pub use abi::*;

/// The version the binaries, the trace files and the packages carry: the git description of
/// the build when `cargo xtask dist` built it (`BLKPROF_VERSION`), else the crate's.
pub const VERSION: &str = match option_env!("BLKPROF_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

// The tests that write files (the format's, feature `format`) put them in temporary
// directories; without that feature the dev-dependency is linked into the tests but unused.
#[cfg(all(test, not(feature = "format")))]
use tempfile as _;
