//! The fleet check's Python side: a project-local virtual environment (target/fleet/venv) with
//! DuckDB and PySpark from PyPI (and the `perfetto` package, whose compiled protos
//! tests/tests/perfetto.rs parses the Perfetto export with), made by `cargo xtask setup`
//! (idempotent: a stamp names the pinned versions), and `cargo xtask fleet-check`, which runs
//! the proof of docs/fleet.md on both engines (tests/tests/fleet.rs) with timings.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::util::{cargo, root, run};

/// What the recipes are proven on (docs/fleet.md). PySpark 4 runs on Java 17.
const PACKAGES: [&str; 4] = [
    "duckdb==2.0.0",
    "pyspark==4.3.0",
    // Perfetto's compiled trace protos, for tests/tests/perfetto.rs (and the protobuf runtime
    // they were tried with).
    "perfetto==0.59.1",
    "protobuf==7.36.2",
];

pub(crate) fn venv_dir() -> PathBuf {
    root().join("target/fleet/venv")
}

/// Create the venv and install the pinned packages when the stamp says otherwise.
pub(crate) fn venv() -> Result<()> {
    let dir = venv_dir();
    let stamp = dir.join("blkprof-packages");
    let want = PACKAGES.join(" ");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("setup: Python venv for the fleet check ({want}; about a minute, once)");
    if !dir.join("bin/python").exists() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&dir)).context(
            "python3 -m venv failed: install python3 and python3-venv (Debian) for the fleet check",
        )?;
    }
    run(Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(PACKAGES))
    .context("pip could not install the fleet check's packages from PyPI")?;
    std::fs::write(&stamp, &want)?;
    Ok(())
}

/// The fleet check on DuckDB and Spark (tests/tests/fleet.rs), release build.
pub(crate) fn fleet_check() -> Result<()> {
    venv()?;
    if !crate::util::have("java") {
        crate::util::apt_install(&["openjdk-17-jre-headless"])?;
    }
    run(cargo().args(["build", "--release", "-p", "analyzer"]))?;
    let t = std::time::Instant::now();
    run(cargo()
        .args([
            "test",
            "--release",
            "-p",
            "blkprof-e2e",
            "--test",
            "fleet",
            "--",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BLKPROF_BIN_DIR", root().join("target/release")))?;
    eprintln!(
        "fleet-check: passed in {:.0} s (with the build)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
