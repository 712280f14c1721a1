//! `cargo xtask setup`: everything a fresh machine lacks, idempotently.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::util::{apt_install, have, output, run};

pub(crate) fn setup() -> Result<()> {
    nightly()?;
    bpf_linker()?;
    packages()?;
    musl()?;
    crate::fleet::venv()?;
    tracefs();
    Ok(())
}

pub(crate) fn nightly() -> Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup is needed (https://rustup.rs); it manages the nightly toolchain the eBPF probe builds with")?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("setup: installing the nightly toolchain");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let comps = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))?;
    if !comps.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("setup: adding rust-src to nightly");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

pub(crate) fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cargo"),
        PathBuf::from,
    )
}

/// bpf-linker must link the same LLVM major as the nightly rustc; build it against the
/// nightly's own libLLVM (no system LLVM needed).
fn bpf_linker() -> Result<()> {
    let vv = output(Command::new("rustup").args(["run", "nightly", "rustc", "-vV"]))?;
    let llvm = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .context("nightly rustc -vV shows no LLVM version")?
        .trim()
        .to_string();
    let major = llvm.split('.').next().unwrap_or("").to_string();
    let stamp = cargo_home().join("blkprof-bpf-linker-llvm");
    let linker = cargo_home().join("bin/bpf-linker");
    if linker.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(major.as_str()) {
        return Ok(());
    }
    if linker.exists() && !stamp.exists() {
        // Installed by hand: trust it if it runs; record what it was presumably built for.
        // It links the nightly's libLLVM, so it only runs under `rustup run nightly`.
        if Command::new("rustup")
            .args(["run", "nightly", "bpf-linker", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            std::fs::write(&stamp, &major)?;
            return Ok(());
        }
    }
    let sysroot =
        output(Command::new("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"]))?;
    let libdir = PathBuf::from(sysroot.trim()).join("lib");
    let lib = std::fs::read_dir(&libdir)?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .find(|n| {
            n.starts_with(&format!("libLLVM.so.{major}"))
                || (n.starts_with("libLLVM") && n.contains(&format!("-{major}")))
        })
        .with_context(|| format!("no libLLVM for LLVM {major} in {}", libdir.display()))?;
    let shim = std::env::temp_dir().join(format!("blkprof-llvm-{major}"));
    std::fs::create_dir_all(shim.join("lib"))?;
    let link = shim.join("lib/libLLVM.so");
    #[expect(
        clippy::let_underscore_must_use,
        reason = "clears the link an earlier run left; if it is still there, symlink() next fails"
    )]
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(libdir.join(&lib), &link)?;
    eprintln!("setup: building bpf-linker against the nightly's LLVM {llvm} (about 75 s)");
    run(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--locked",
            "--force",
            "--no-default-features",
            "--features",
            &format!("llvm-{major}"),
        ])
        .env("LLVM_PREFIX", &shim))
    .context("building bpf-linker failed")?;
    std::fs::write(&stamp, &major)?;
    Ok(())
}

/// What `cargo xtask dist` builds the static binaries with: Rust's musl target, rpmbuild, and
/// a C compiler for the C in the analyzer's dependencies (zstd) against musl's headers. The
/// headers come from Debian's musl-dev unpacked under target/musl, not installed: Debian's
/// `musl` package puts /lib/ld-musl-x86_64.so.1 on the host, and snappy-java (Spark's Parquet
/// reader) then takes the host for a musl one and fails to load (measured: the fleet test's
/// Spark run, "libc.musl-x86_64.so.1: cannot open shared object file"). The binaries link
/// with Rust's own musl (self-contained); the compiler here only needs the headers.
/// Returns the compiler to give cargo as `CC_x86_64_unknown_linux_musl`.
pub(crate) fn musl() -> Result<PathBuf> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if !installed
        .lines()
        .any(|l| l.trim() == "x86_64-unknown-linux-musl")
    {
        eprintln!("setup: adding the x86_64-unknown-linux-musl target");
        run(Command::new("rustup").args(["target", "add", "x86_64-unknown-linux-musl"]))?;
    }
    let mut missing = Vec::new();
    for (cmd, pkg) in [("rpmbuild", "rpm"), ("dpkg-deb", "dpkg"), ("gcc", "gcc")] {
        if !have(cmd) {
            missing.push(pkg);
        }
    }
    apt_install(&missing)?;
    let dir = crate::util::root().join("target/musl");
    let include = dir.join("root/usr/include/x86_64-linux-musl");
    let cc = dir.join("cc");
    if !include.join("stdlib.h").exists() {
        eprintln!(
            "setup: unpacking Debian's musl-dev (headers) under {}",
            dir.display()
        );
        std::fs::create_dir_all(&dir)?;
        let fetched = Command::new("apt-get")
            .args(["download", "-qq", "musl-dev"])
            .current_dir(&dir)
            .status()?
            .success();
        if !fetched {
            run(Command::new("apt-get").args(["update", "-qq"]))?;
            run(Command::new("apt-get")
                .args(["download", "-qq", "musl-dev"])
                .current_dir(&dir))?;
        }
        let deb = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("musl-dev_"))
            })
            .context("apt-get download musl-dev left no .deb")?;
        run(Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(dir.join("root")))?;
    }
    let gcc_include = output(Command::new("gcc").args(["-print-file-name=include"]))?;
    std::fs::write(
        &cc,
        format!(
            "#!/bin/sh\n# gcc against musl's headers (cargo xtask setup writes this).\n\
             exec gcc -nostdinc -isystem {} -isystem {} \"$@\"\n",
            include.display(),
            gcc_include.trim()
        ),
    )?;
    std::fs::set_permissions(&cc, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    Ok(cc)
}

fn packages() -> Result<()> {
    // (command that proves it is there, Debian package)
    let wanted = [
        ("fio", "fio"),
        ("bpftool", "bpftool"),
        ("biolatency", "libbpf-tools"),
        ("losetup", "mount"),
        ("mkfs.ext4", "e2fsprogs"),
        ("chromium", "chromium"),
        // The metrics test scrapes the tracer with a real server; promtool checks the format.
        ("prometheus", "prometheus"),
        ("promtool", "prometheus"),
        // The packages' tests: the OCI image under podman (runc: crun cannot set rlimits in
        // this sandbox), systemd-analyze for the unit.
        ("podman", "podman"),
        ("runc", "runc"),
        ("systemd-analyze", "systemd"),
        ("file", "file"),
        ("man", "man-db"),
    ];
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(cmd, _)| !have(cmd))
        .map(|(_, pkg)| *pkg)
        .collect();
    apt_install(&missing)
}

/// The ftrace `blk` tracer and peer tools need tracefs; blkprof itself does not (`tp_btf`).
fn tracefs() {
    if std::path::Path::new("/sys/kernel/tracing/events").exists() {
        return;
    }
    #[expect(
        clippy::let_underscore_must_use,
        reason = "only the peer tools need tracefs (blkprof does not): set-up goes on without it"
    )]
    let _ = Command::new("mount")
        .args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"])
        .status();
}
