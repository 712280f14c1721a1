//! Library target so that `cargo check` works on the workspace; the probe is in main.rs.
#![no_std]
#![expect(
    unused_crate_dependencies,
    reason = "the dependencies are the probe binary's; this target is empty"
)]
