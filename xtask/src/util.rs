use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Run a command, inheriting stdio; fail with its name if it fails.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let desc = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("cannot run {desc}"))?;
    if !status.success() {
        bail!("{desc} failed ({status})");
    }
    Ok(())
}

/// Run and capture stdout.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let desc = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("cannot run {desc}"))?;
    if !out.status.success() {
        bail!(
            "{desc} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// "lo-hi" of `v`, whole numbers (a benchmark's spread over rounds).
pub(crate) fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.0}-{hi:.0}")
}

pub(crate) fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Build the release binaries (tracer needs the eBPF toolchain).
pub(crate) fn build_release() -> Result<()> {
    run(cargo().args(["build", "--release", "-p", "tracer", "-p", "analyzer"]))
}

pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Every crate's tests but the probe's (which only builds for BPF), the e2e tests included, in
/// the release profile: one build serves the unit tests, the binaries the e2e tests run
/// (`tracer/tests/cli.rs` makes cargo build `blkprof-trace` too) and the e2e tests, whose
/// executables [`e2e_executables`] takes from it. In the debug profile the unit tests built
/// every dependency a second time, and `cargo test -p blkprof-e2e` resolves other features
/// (the analyzer's Parquet, among others) and built the e2e tests again.
const WORKSPACE_TESTS: &[&str] = &[
    "test",
    "--release",
    "--workspace",
    "--exclude",
    "tracer-ebpf",
];

/// The trace format as the tracer builds it, without the v1 feature (the workspace build
/// unifies it on).
const FORMAT_TESTS: &[&str] = &[
    "test",
    "--release",
    "-p",
    "tracer-common",
    "--features",
    "format",
];

/// The one release build of [`test`] and [`test_vms`].
fn build_for_tests() -> Result<()> {
    run(cargo().args(WORKSPACE_TESTS).arg("--no-run"))?;
    run(cargo().args(FORMAT_TESTS).arg("--no-run"))
}

pub(crate) fn test(filter: Option<&str>, steps: &mut Steps) -> Result<()> {
    steps.run("build", build_for_tests)?;
    // Unit, library and CLI tests (no root).
    steps.run("unit tests", || {
        run(cargo()
            .args(WORKSPACE_TESTS)
            .args(["--exclude", "blkprof-e2e"]))?;
        run(cargo().args(FORMAT_TESTS))
    })?;
    // A smoke pass of the fuzz targets (fuzz/; nightly), built without ASan (219 s cold against
    // 365 s with it) and at opt-level 1 (`Optimize::Quick`). In CI: 4 minutes with
    // the build, 10 to 25 s per target.
    let budget = if std::env::var("CI").is_ok_and(|v| v == "true") {
        crate::fuzz::Budget::Within {
            total_s: 240,
            min_s: 10,
            max_s: 25,
        }
    } else {
        crate::fuzz::Budget::Each { seconds: 10 }
    };
    steps.run("fuzz smoke", || {
        crate::fuzz::fuzz(
            budget,
            crate::fuzz::Sanitizer::None,
            crate::fuzz::Optimize::Quick,
            &[],
        )
    })?;
    if !is_root() {
        bail!(
            "the end-to-end tests load eBPF programs and create loop devices: run `cargo xtask test` as root"
        );
    }
    // What the packaging tests (tests/tests/dist.rs) install and run, on the host and in the
    // VMs.
    let dist = steps.run("dist", crate::dist::dist)?;
    // The tests' loop images go here instead of being deleted (tests/src/lib.rs, `Scratch`);
    // deleted while the VMs run, which use the CPUs but not this disk. One name for every run:
    // what a run stopped before the VMs left there goes with the next run's.
    let trash = std::env::temp_dir().join("blkprof-test-trash");
    std::fs::create_dir_all(&trash)
        .with_context(|| format!("cannot create {}", trash.display()))?;
    // End-to-end tests share the machine's CPUs and block layer: one at a time.
    let host = steps.run("host end-to-end tests", || {
        let mut failed = Vec::new();
        for (name, exe) in e2e_executables()? {
            eprintln!("     Running tests/{name}.rs ({exe})");
            let mut c = Command::new(&exe);
            c.current_dir(root().join("tests"));
            if let Some(f) = filter {
                c.arg(f);
            }
            c.arg("--test-threads=1");
            c.env("BLKPROF_BIN_DIR", root().join("target/release"));
            c.env("BLKPROF_DIST_DIR", &dist);
            c.env("BLKPROF_TEST_TRASH", &trash);
            if !c
                .status()
                .with_context(|| format!("cannot run {exe}"))?
                .success()
            {
                failed.push(name);
            }
        }
        if !failed.is_empty() {
            bail!(
                "end-to-end tests failed in tests/tests/{{{}}}.rs",
                failed.join(",")
            );
        }
        Ok(())
    });
    let emptying = std::thread::spawn(move || {
        let t = Instant::now();
        let files = std::fs::read_dir(&trash).map_or(0, Iterator::count);
        let r = std::fs::remove_dir_all(&trash)
            .with_context(|| format!("cannot delete {}", trash.display()));
        (files, t.elapsed().as_secs_f64(), r)
    });
    let r = host.and_then(|()| steps.run("VM tests", vm_tests));
    match emptying.join() {
        Ok((files, seconds, Ok(()))) => {
            eprintln!("test: the end-to-end tests' {files} loop images deleted in {seconds:.0} s");
        }
        Ok((_, _, Err(e))) => eprintln!("test: {e:#}"),
        Err(_) => eprintln!("test: the thread deleting the loop images panicked"),
    }
    r
}

/// `cargo xtask test --vm-only`.
pub(crate) fn test_vms() -> Result<()> {
    if !is_root() {
        bail!("the VM tests boot qemu with the host's files and load eBPF in it: run as root");
    }
    build_for_tests()?;
    crate::dist::dist()?;
    vm_tests()
}

/// The host end-to-end tests that run in the VMs too: exactness against /proc/diskstats per
/// kind of IO, accounting off, overload, SIGKILL, the fallback's submitters, the capabilities
/// kept after attaching (which differ by kernel: docs/agent/threat-model.md). Left out: those
/// that measure timing or need more IO than emulation gives in seconds (cuts under load,
/// replay timing, rotation), and those about this host's peer tools.
const VM_E2E_TESTS: &[&str] = &[
    "random_4k_reads_match_diskstats_and_fio",
    "the_in_kernel_join_is_exact_too",
    "sequential_128k_and_512k_writes_are_exact",
    "size_mix_equals_what_fio_issued_exactly",
    "trims_are_discards_with_exact_bytes",
    "fsync_driven_flushes_are_counted_like_the_kernel",
    "mean_queue_size_matches_diskstats_within_5_percent",
    "a_device_with_iostats_off_is_traced_and_said_to_be_unaccounted",
    "overload_drops_are_counted_and_aggregates_stay_exact",
    "sigkill_leaves_a_file_readable_to_its_last_chunk",
    "the_getrq_fallback_is_exact_and_names_each_submitter",
    "skipped_completion_runs_are_each_found_as_a_missed_completion",
    "after_attaching_the_tracer_keeps_at_most_cap_bpf_and_refuses_program_loads",
];

/// The e2e test executables of [`WORKSPACE_TESTS`]'s build (built already: cargo only lists
/// them), by the name of their file in tests/tests/, in cargo's order.
fn e2e_executables() -> Result<Vec<(String, String)>> {
    let json = output(
        cargo()
            .args(WORKSPACE_TESTS)
            .args(["--no-run", "--message-format=json"]),
    )?;
    let mut exes: Vec<(String, String)> = json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["kind"] == serde_json::json!(["test"])
                && m["manifest_path"]
                    .as_str()
                    .is_some_and(|p| Path::new(p) == root().join("tests/Cargo.toml"))
        })
        .filter_map(|m| {
            Some((
                m["target"]["name"].as_str()?.to_owned(),
                m["executable"].as_str()?.to_owned(),
            ))
        })
        .collect();
    exes.sort();
    if exes.is_empty() {
        bail!("cargo built no e2e test executables (tests/tests/*.rs)");
    }
    Ok(exes)
}

/// The executable of tests/tests/`name`.rs among [`e2e_executables`].
fn e2e_test_executable<'a>(exes: &'a [(String, String)], name: &str) -> Result<&'a str> {
    exes.iter()
        .find_map(|(n, exe)| (n == name).then_some(exe.as_str()))
        .with_context(|| format!("cargo built no test executable for tests/tests/{name}.rs"))
}

/// The end-to-end tests in nested VMs with stock kernels, 6.12 (the `block_io_start` path),
/// 6.1 LTS (the `block_getrq` fallback) and 5.10 LTS (the fallback without BPF
/// compare-and-exchange), each with six emulated NVMe disks:
/// `tests/tests/vm.rs` (an NVMe disk, nvme0n1; md RAID0 over nvme0n1-nvme3n1, chunks 64 and
/// 512 KB), the .deb installed into a throwaway root and traced there (`tests/tests/dist.rs`),
/// `tests/tests/vm_whatif.rs` (whatif's prediction from nvme4n1 against the md run),
/// the first test of `tests/tests/files.rs` (the files of buffered IO, whose kernel structures
/// differ between versions; the burst of names is the daemon's, tested on the host), then the
/// host tests of [`VM_E2E_TESTS`] on loop devices whose images live on
/// ext4 on nvme5n1 (tmpfs has no `O_DIRECT` on 6.1). The tests that need the VM's disks are
/// `#[ignore]`d elsewhere: here they run with `--include-ignored`.
fn vm_tests() -> Result<()> {
    let exes = e2e_executables()?;
    let vm = e2e_test_executable(&exes, "vm")?;
    let whatif = e2e_test_executable(&exes, "vm_whatif")?;
    let e2e = e2e_test_executable(&exes, "e2e")?;
    let files = e2e_test_executable(&exes, "files")?;
    let packages = e2e_test_executable(&exes, "dist")?;
    let bin_dir = root().join("target/release");
    let bin_dir = bin_dir.display();
    let dist = root().join("target/dist");
    let dist = dist.display();
    let script = format!(
        "set -e; modprobe loop max_loop=16; mkfs.ext4 -q /dev/nvme5n1; mount /dev/nvme5n1 /mnt; mkdir /mnt/whatif; \
         env BLKPROF_VM_DISK=nvme0n1 BLKPROF_BIN_DIR={bin_dir} {vm} --include-ignored --test-threads=1; \
         env BLKPROF_VM_DISK=nvme0n1 BLKPROF_DIST_DIR={dist} BLKPROF_BIN_DIR={bin_dir} {packages} --include-ignored --exact --test-threads=1 the_deb_installs_and_traces_an_nvme_disk_exactly_in_stock_kernels; \
         env BLKPROF_VM_WHATIF=/mnt/whatif BLKPROF_BIN_DIR={bin_dir} {whatif} --include-ignored --test-threads=1; \
         env TMPDIR=/mnt BLKPROF_BIN_DIR={bin_dir} {files} --exact --test-threads=1 buffered_io_is_attributed_to_its_files_even_when_deleted_right_after; \
         env TMPDIR=/mnt BLKPROF_BIN_DIR={bin_dir} {e2e} --exact --test-threads=1 {}",
        VM_E2E_TESTS.join(" ")
    );
    // Each guest is single-threaded TCG, one host CPU: they run side by side (on 2 CPUs, about
    // half the wall time of one after the other). Installs first, one at a time.
    // `BLKPROF_VM_KERNELS=5.10,6.1` runs some of them (while working on one kernel's path).
    let chosen = std::env::var("BLKPROF_VM_KERNELS").ok();
    let kernels: Vec<&str> = ["6.12", "6.1", "5.10"]
        .into_iter()
        .filter(|k| {
            chosen
                .as_deref()
                .is_none_or(|c| c.split(',').any(|x| x == *k))
        })
        .collect();
    if kernels.is_empty() {
        bail!("BLKPROF_VM_KERNELS={chosen:?} names none of 6.12, 6.1, 5.10");
    }
    for &kernel in &kernels {
        crate::vm::setup(kernel)?;
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let runs: Vec<_> = kernels
            .iter()
            .map(|&kernel| {
                let script = &script;
                s.spawn(move || vm_test_run(kernel, script))
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap_or_else(|_| bail!("the VM thread panicked")))
            .collect()
    });
    for r in results {
        r?;
    }
    Ok(())
}

/// One kernel's VM end-to-end run ([`vm_tests`]): its console goes to a file, printed whole
/// when the VM ends, so that two runs side by side do not interleave their lines.
fn vm_test_run(kernel: &str, script: &str) -> Result<()> {
    let out = root().join(format!("target/vm/out-{kernel}"));
    let console = root().join(format!("target/vm/console-{kernel}.txt"));
    eprintln!(
        "vm: {kernel}: starting; its console is in {} until it ends",
        console.display()
    );
    let o = crate::vm::Options {
        kernel: kernel.into(),
        disks: 6,
        disk_mb: 4096,
        cpus: 2,
        memory_mb: 2048,
        timeout: 1800,
        mttcg: false,
        out: Some(out),
        command: vec!["sh".into(), "-c".into(), script.into()],
        console: Some(console.clone()),
    };
    let r = crate::vm::run_vm(&o);
    {
        use std::io::Write as _;
        let text = std::fs::read(&console).unwrap_or_default();
        let mut stdout = std::io::stdout().lock();
        #[expect(
            clippy::let_underscore_must_use,
            reason = "the console is a copy for the reader; the run's outcome is what is returned"
        )]
        let _ = writeln!(stdout, "==== the {kernel} VM's console ====")
            .and_then(|()| stdout.write_all(&text))
            .and_then(|()| writeln!(stdout, "==== end of the {kernel} VM's console ===="))
            .and_then(|()| stdout.flush());
    }
    let r = r?;
    if r.code != 0 {
        bail!(
            "the VM end-to-end tests failed on {kernel} (exit code {}; the guest's dmesg: {})",
            r.code,
            r.out.join("dmesg.txt").display()
        );
    }
    eprintln!(
        "vm: end-to-end tests on {kernel} passed in {:.0} s",
        r.seconds
    );
    Ok(())
}

/// The wall time of each step of a long task, printed as each ends and all together at the
/// end (`cargo xtask test`: where CI's minutes go).
pub(crate) struct Steps {
    started: Instant,
    done: Vec<(&'static str, f64)>,
}

impl Steps {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Runs `f` as the step `name`.
    pub(crate) fn run<T>(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let t = Instant::now();
        let r = f();
        let s = t.elapsed().as_secs_f64();
        self.done.push((name, s));
        eprintln!(
            "steps: {name}: {} after {s:.0} s",
            if r.is_ok() { "done" } else { "failed" }
        );
        r
    }

    /// Prints every step's time and the total.
    pub(crate) fn summary(&self) {
        let parts: Vec<String> = self
            .done
            .iter()
            .map(|(n, s)| format!("{n} {s:.0} s"))
            .collect();
        eprintln!(
            "steps: {} (total {:.0} s)",
            parts.join(", "),
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// A sparse image of `gib` GiB at `img`, attached as a loop device with `O_DIRECT` backing (so
/// the page cache holds nothing twice); returns /dev/loopN.
pub(crate) fn attach_loop(img: &Path, gib: u64) -> Result<String> {
    run(Command::new("truncate")
        .args(["-s", &format!("{gib}G")])
        .arg(img))?;
    Ok(output(
        Command::new("losetup")
            .args(["-f", "--show", "--direct-io=on"])
            .arg(img),
    )?
    .trim()
    .to_string())
}

/// Install Debian packages (apt-get, quietly); names the packages when there is no apt-get.
pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    if !have("apt-get") {
        bail!(
            "missing {}: install them with your package manager",
            packages.join(", ")
        );
    }
    eprintln!("setup: installing {}", packages.join(" "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// From now on Ctrl-C, SIGTERM and SIGHUP only set a flag that [`interrupted`] reports, so a
/// task can stop what it started and clean up (its children run in their own process group).
pub(crate) fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

pub(crate) fn interrupted() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted: stopping what was started and cleaning up");
    }
    Ok(())
}

/// Sleep in small steps so that Ctrl-C is seen at once.
pub(crate) fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        interrupted()?;
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
    }
    Ok(())
}
