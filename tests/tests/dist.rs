//! What `cargo xtask dist` ships, installed and run as a production host would: the .deb
//! installed by dpkg into a throwaway root and its tracer run as the package's user with two
//! capabilities, the .rpm's files against the .deb's, the OCI image under podman without
//! privileges, and the tarball as a newcomer without Rust uses it. `cargo xtask test` builds
//! the artifacts first (`BLKPROF_DIST_DIR`); the NVMe variant runs in its VM stage.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use blkprof_e2e::dist::{AS_THE_UNIT_RUNS_IT, ThrowawayRoot, artifact};
use blkprof_e2e::{
    Scratch, TestDir, Trace, Tracer, assert_exact, assert_privileges_dropped, delta, fio, sh,
};
use tracer_common::format::{DiskStats, Ending, parse_diskstats};
use tracer_common::op::StatGroup;

fn diskstats(name: &str) -> DiskStats {
    let s = std::fs::read_to_string("/proc/diskstats").expect("/proc/diskstats");
    parse_diskstats(&s, 0)
        .into_values()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("{name} in /proc/diskstats"))
}

fn stdout(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Random 4 KB reads and writes on `path` for 2 s.
fn randrw(path: &str) {
    let file = format!("--filename={path}");
    fio(&[
        "--name=pkg",
        file.as_str(),
        "--direct=1",
        "--rw=randrw",
        "--bs=4k",
        "--ioengine=libaio",
        "--iodepth=8",
        "--size=256m",
        "--runtime=2",
        "--time_based",
    ]);
}

/// Trace `device` with the tracer `cmd` runs (writing `trace` as the host sees it) around
/// `work`, which is given the running tracer: the trace, complete, and the device's diskstats
/// delta around the work.
fn trace_with(
    cmd: Command,
    device: &str,
    trace: &Path,
    work: impl FnOnce(&Tracer),
) -> (Trace, BTreeMap<StatGroup, (u64, u64)>) {
    let t = Tracer::start_command(cmd);
    let before = diskstats(device);
    work(&t);
    let after = diskstats(device);
    let f = t.stop();
    assert!(
        f.status.success(),
        "tracer failed: {}\n{}",
        f.stderr,
        f.stdout
    );
    let read = Trace::read(trace);
    assert_eq!(read.ending, Ending::Complete, "{}", trace.display());
    (read, delta(&before, &after))
}

/// The running tracer holds at most `CAP_BPF`, with `no_new_privs` and a seccomp filter
/// ([`assert_privileges_dropped`]), and its note at the start says which; printed with the
/// kernel's release, the record of which kernels keep `CAP_BPF`.
fn privileges_dropped(t: &Tracer) {
    let kept = assert_privileges_dropped(t.pid());
    let note = t
        .stderr
        .lines()
        .find(|l| l.contains("dropped capabilities after attaching"))
        .unwrap_or_else(|| panic!("the note: {}", t.stderr));
    let expected = if kept {
        "; kept CAP_BPF ("
    } else {
        "; kept none;"
    };
    assert!(note.contains(expected), "{note}");
    assert!(
        note.ends_with("further program loads refused (seccomp)"),
        "{note}"
    );
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    eprintln!("privileges on {}: {note}", release.trim());
}

/// Install the .deb with dpkg into `root`, check what it set up (user, state directory, unit,
/// man pages), then trace `device` with the installed tracer as the unit runs it (the
/// `blkprof` user with `CAP_BPF` and `CAP_PERFMON` only): exact against /proc/diskstats, and
/// read back by the installed analyzer as that user.
fn install_and_trace(root: &ThrowawayRoot, device: &str, work: impl FnOnce()) {
    let t0 = std::time::Instant::now();
    let step = |what: &str| eprintln!("{:6.1} s  {what}", t0.elapsed().as_secs_f64());
    let deb = artifact(".deb");
    root.put(&deb, "/tmp/blkprof.deb");
    // man-db's trigger re-indexes every man page on each install and removal: minutes in an
    // emulated guest. Off (debconf's man-db/auto-update false), as in container images; `man -w` below needs no index.
    root.ok(&["rm", "-f", "/var/lib/man-db/auto-update"]);
    let log = root.ok(&["dpkg", "-i", "/tmp/blkprof.deb"]);
    step("installed");
    assert!(log.contains("Setting up blkprof"), "{log}");
    let user = root.ok(&["getent", "passwd", "blkprof"]);
    assert!(
        user.trim_end()
            .ends_with(":/var/lib/blkprof:/usr/sbin/nologin"),
        "a system user without a login: {user}"
    );
    assert_eq!(
        root.ok(&["stat", "-c", "%a %U %G", "/var/lib/blkprof"])
            .trim(),
        "700 blkprof blkprof"
    );
    // The unit as installed: it verifies, runs as the package's user with the two
    // capabilities and nothing more.
    let unit = "/usr/lib/systemd/system/blkprof-agent.service";
    let verify = root.run(&["systemd-analyze", "verify", unit]);
    assert!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    // systemd's own score of the sandbox (0 safest, 10 none): 1.7 since bpf, perf_event_open
    // and capset are allowed for real (1.4 before, when the deny line took them back out of
    // the allow list); a change that loosens the unit shows here.
    let security = root.ok(&["systemd-analyze", "security", "--offline=yes", unit]);
    let exposure: f64 = security
        .lines()
        .find_map(|l| l.split("blkprof-agent.service: ").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("an exposure level: {security}"));
    assert!(exposure <= 1.7, "exposure {exposure}: {security}");
    let text = std::fs::read_to_string(root.host_path(unit)).expect("the unit");
    for line in [
        "User=blkprof",
        "CapabilityBoundingSet=CAP_BPF CAP_PERFMON",
        "AmbientCapabilities=CAP_BPF CAP_PERFMON",
        "NoNewPrivileges=yes",
        "UMask=0077",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in the unit");
    }
    for page in [
        "blkprof-trace",
        "blkprof",
        "blkprof-report",
        "blkprof-export",
    ] {
        let found = root.ok(&["man", "-w", page]);
        assert!(
            found.trim() == format!("/usr/share/man/man1/{page}.1.gz"),
            "{page}: {found}"
        );
    }
    // The version the binaries print is the package's: 0.1.0-N-gHASH as 0.1.0+N.gHASH.
    let version = root.ok(&["dpkg-query", "-W", "-f", "${Version}", "blkprof"]);
    let printed = root.ok(&["blkprof-trace", "--version"]);
    let described = printed
        .trim()
        .strip_prefix("blkprof-trace ")
        .expect("blkprof-trace VERSION");
    let hash = described
        .trim_end_matches("-dirty")
        .rsplit('-')
        .next()
        .expect("a hash");
    assert!(
        version.contains(hash),
        "dpkg's {version} vs --version's {described}"
    );
    assert_eq!(
        root.ok(&["blkprof", "--version"]).trim(),
        format!("blkprof {described}")
    );

    step("checked the user, the unit, the pages and the version");
    let inside = "/var/lib/blkprof/packaged.blkp";
    let mut cmd = Command::new("chroot");
    cmd.args(&root.chroot()[1..])
        .args(AS_THE_UNIT_RUNS_IT)
        .arg("/usr/bin/blkprof-trace")
        .args(["--device", device, "--output", inside, "--quiet"]);
    let (trace, own) = trace_with(cmd, device, &root.host_path(inside), |t| {
        privileges_dropped(t);
        work();
    });
    assert_exact(&trace, device, &own);
    assert!(trace.requests().count() > 1_000, "{}", trace.records.len());
    let report = root.ok(&[
        "setpriv",
        "--reuid=blkprof",
        "--regid=blkprof",
        "--clear-groups",
        "blkprof",
        "report",
        "--json",
        inside,
    ]);
    let json: serde_json::Value = serde_json::from_str(&report).expect("report JSON");
    assert!(report.contains(device), "the report names {device}");
    assert!(json.is_object());
    step("traced and reported");

    // Removal keeps the evidence; purge takes the state directory too.
    root.ok(&["dpkg", "-r", "blkprof"]);
    assert!(!root.host_path("/usr/bin/blkprof-trace").exists());
    assert!(root.host_path(inside).exists(), "dpkg -r keeps the traces");
    root.ok(&["dpkg", "--purge", "blkprof"]);
    assert!(!root.host_path("/var/lib/blkprof").exists());
    step("removed and purged");
}

#[test]
fn the_deb_installs_a_tracer_that_traces_exactly_as_its_user_with_two_capabilities() {
    let root = ThrowawayRoot::new();
    let dev = Scratch::new("deb", 512, true, false);
    install_and_trace(&root, &dev.name, || randrw(&dev.path));
}

/// The same in the VM stage's stock kernels (6.12, 6.1, 5.10) on an emulated NVMe disk.
#[test]
#[ignore = "needs the VM stage's emulated NVMe disks (BLKPROF_VM_DISK)"]
fn the_deb_installs_and_traces_an_nvme_disk_exactly_in_stock_kernels() {
    let disk = std::env::var("BLKPROF_VM_DISK")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| {
            panic!("BLKPROF_VM_DISK is not set: this runs in `cargo xtask test`'s VM stage")
        });
    let root = ThrowawayRoot::new();
    let path = format!("/dev/{disk}");
    install_and_trace(&root, &disk, || randrw(&path));
}

/// The .rpm holds the .deb's files (but for the zsh completions' directory, which differs
/// between Debian and Fedora), with the same version.
#[test]
fn the_rpm_holds_the_files_of_the_deb() {
    let deb = artifact(".deb");
    let rpm = artifact(".rpm");
    let deb_files: BTreeSet<String> = stdout(Command::new("dpkg-deb").arg("-c").arg(&deb))
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| {
            p.trim_start_matches('.').replacen(
                "/usr/share/zsh/vendor-completions/",
                "/usr/share/zsh/site-functions/",
                1,
            )
        })
        .collect();
    let rpm_files: BTreeSet<String> = stdout(Command::new("rpm").arg("-qlp").arg(&rpm))
        .lines()
        .map(str::to_string)
        .collect();
    assert!(deb_files.len() > 30, "{deb_files:?}");
    assert_eq!(deb_files, rpm_files);
    let deb_version = stdout(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&deb)
            .arg("Version"),
    );
    let rpm_version = stdout(
        Command::new("rpm")
            .args(["-qp", "--queryformat", "%{VERSION}"])
            .arg(&rpm),
    );
    assert_eq!(deb_version.trim(), rpm_version.trim());
    // The scriptlets create the user as the .deb's do.
    let scripts = stdout(Command::new("rpm").args(["-qp", "--scripts"]).arg(&rpm));
    assert!(scripts.contains("install -d -m 0700 -o blkprof -g blkprof /var/lib/blkprof"));
}

/// podman as this machine runs it (runc, cgroupfs, no rlimits it cannot set).
fn podman(conf: &Path) -> Command {
    let mut c = Command::new("podman");
    c.env("CONTAINERS_CONF", conf)
        .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    c
}

/// The image under podman, not privileged: every capability dropped but `CAP_BPF` and
/// `CAP_PERFMON`, with the seccomp profile the packages ship (podman 4.3's default allows `bpf()`
/// only with `CAP_SYS_ADMIN`: without it the tracer says so). It traces a loop device of the
/// host exactly, and the image's analyzer reads the trace.
#[test]
fn the_image_traces_a_host_disk_under_podman_with_two_capabilities() {
    let dir = TestDir::new();
    let conf = dir.join("containers.conf");
    std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n").expect("containers.conf");
    let loaded = stdout(
        podman(&conf)
            .arg("load")
            .arg("-i")
            .arg(artifact("-oci.tar")),
    );
    let image = loaded
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .unwrap_or_else(|| panic!("podman load: {loaded}"))
        .trim()
        .to_string();
    let dev = Scratch::new("oci", 512, true, false);
    let out = dir.join("out");
    std::fs::create_dir(&out).expect("out");
    let volume = format!("{}:/out", out.display());
    let seccomp = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/container/seccomp.json");
    let run = |with_profile: bool| {
        let mut c = podman(&conf);
        c.args([
            "run",
            "--rm",
            "--cap-drop",
            "all",
            "--cap-add",
            "bpf,perfmon",
        ]);
        if with_profile {
            c.arg("--security-opt")
                .arg(format!("seccomp={}", seccomp.display()));
        }
        c.args(["-v", &volume, &image]);
        c
    };
    let mut default = run(false);
    default.args(["--device", &dev.name, "--duration", "1s", "--quiet"]);
    let o = default.output().expect("podman run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("seccomp="),
        "without the profile: refused, saying what to do: {err}"
    );
    let mut cmd = run(true);
    cmd.args([
        "--device",
        &dev.name,
        "--output",
        "/out/image.blkp",
        "--quiet",
    ]);
    let (trace, own) = trace_with(cmd, &dev.name, &out.join("image.blkp"), |_| {
        randrw(&dev.path);
    });
    assert_exact(&trace, &dev.name, &own);
    assert!(trace.requests().count() > 1_000);
    let mut report = podman(&conf);
    report
        .args(["run", "--rm", "--cap-drop", "all", "-v", &volume])
        .args(["--entrypoint", "/usr/bin/blkprof", &image])
        .args(["report", "/out/image.blkp"]);
    let text = stdout(&mut report);
    assert!(text.contains(&format!("{} (", dev.name)), "{text}");
    sh(&format!(
        "CONTAINERS_CONF={} podman --runtime runc --cgroup-manager cgroupfs rmi {image}",
        conf.display()
    ));
}

/// The tarball alone, as the README's Install section says: static binaries that run
/// without Rust or any library, a disk traced exactly and the report read.
#[test]
fn a_newcomer_with_only_the_tarball_traces_a_disk_and_reads_the_report() {
    let dir = TestDir::new();
    let tarball = artifact("-x86_64-linux-musl.tar.gz");
    sh(&format!(
        "tar -xzf {} -C {}",
        tarball.display(),
        dir.path().display()
    ));
    let top = std::fs::read_dir(dir.path())
        .expect("extracted")
        .next()
        .expect("one directory")
        .expect("an entry")
        .path();
    for b in ["blkprof-trace", "blkprof"] {
        let what = stdout(Command::new("file").arg(top.join(b)));
        assert!(what.contains("static"), "{what}");
    }
    for page in [
        "man/man1/blkprof-trace.1.gz",
        "systemd/system/blkprof-agent.service",
    ] {
        assert!(
            top.join("share").join(page).exists() || top.join("lib").join(page).exists(),
            "{page}"
        );
    }
    let dev = Scratch::new("tarball", 512, true, false);
    let out = dir.join("first.blkp");
    let mut cmd = Command::new(top.join("blkprof-trace"));
    cmd.args(["--device", &dev.name, "--output"])
        .arg(&out)
        .arg("--quiet")
        // Nothing from the build machine: no PATH to cargo, no library path.
        .env_clear();
    let (trace, own) = trace_with(cmd, &dev.name, &out, |t| {
        privileges_dropped(t);
        randrw(&dev.path);
    });
    assert_exact(&trace, &dev.name, &own);
    let text = stdout(
        Command::new(top.join("blkprof"))
            .arg("report")
            .arg(&out)
            .env_clear(),
    );
    let reads = trace
        .requests()
        .filter(|r| r.op == tracer_common::op::Op::Read)
        .count();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("read "))
        .unwrap_or_else(|| panic!("a read row: {text}"));
    let count = line
        .split_whitespace()
        .nth(1)
        .expect("a count")
        .replace(',', "");
    assert_eq!(count.parse::<usize>().expect("a number"), reads, "{line}");
}
