#![no_std]
// Library target so that `cargo check` works on the workspace; the probe is in main.rs.
