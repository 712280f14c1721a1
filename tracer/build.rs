//! Builds the eBPF probe (tracer-ebpf) with nightly + bpf-linker and embeds it.
//! `cargo xtask setup` installs what this needs.

#![expect(
    unused_crate_dependencies,
    reason = "tracer-ebpf is a build-dependency only so that cargo rebuilds the tracer when the \
              probe changes; this script builds it for bpfel, it does not link it"
)]

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let pkg = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "tracer-ebpf")
        .ok_or_else(|| anyhow!("tracer-ebpf package not found"))?;
    let root = pkg
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", pkg.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tracer-ebpf",
            root_dir: root.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the eBPF probe needs nightly rust-src and bpf-linker: run `cargo xtask setup`",
    )
}
