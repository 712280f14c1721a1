//! `cargo xtask vm`: run a command as root inside a nested VM booted from a stock Debian kernel
//! (6.12 LTS by default), with emulated NVMe disks. virtme-ng boots the kernel with this
//! machine's root file system shared read-only, so the project's binaries and fio run
//! unchanged inside; the command's exit code and the guest's dmesg come back through a shared
//! writable directory. qemu emulates the CPU (TCG): the host's KVM cannot run stock kernels
//! (../shared/notes/vmlab.md), so a guest is about 3x slower than the host and its figures are
//! functional, never performance. Single-threaded TCG by default: multi-threaded TCG was seen
//! to crash guests when programs attach or detach under IO.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::util::{apt_install, have, output, root, run};

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct Options {
    /// The guest kernel: 6.12, 6.1 (Debian 12) or 5.10 (Debian 11): the newest Debian package
    /// of that LTS series, installed when missing; or the path of a vmlinuz whose modules are
    /// in /lib/modules.
    #[arg(long, default_value = "6.12")]
    pub kernel: String,
    /// Emulated NVMe disks (nvme0n1, nvme1n1, ...), each a sparse image in /dev/shm.
    #[arg(long, default_value_t = 1)]
    pub disks: u32,
    /// Size of each disk in MiB.
    #[arg(long, default_value_t = 512)]
    pub disk_mb: u64,
    /// Guest CPUs (the NVMe disks get as many hardware queues).
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory_mb: u64,
    /// Stop the VM (and fail) after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Multi-threaded TCG: faster with several CPUs, but measured to crash guests when eBPF
    /// programs attach or detach under IO (qemu 7.2).
    #[arg(long)]
    pub mttcg: bool,
    /// Where the guest writes results (writable inside at the same path), its dmesg and its
    /// exit code. Default: target/vm/out.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The command to run in the guest (after `--`), as root, in the current directory.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    /// Where the guest's console (virtme-ng's stdout and stderr) goes instead of the terminal:
    /// for VMs run side by side, whose output would interleave.
    #[arg(skip)]
    pub console: Option<PathBuf>,
}

/// What a run left: the command's exit code and where its files are.
pub(crate) struct Outcome {
    pub code: i32,
    pub out: PathBuf,
    pub seconds: f64,
}

/// Install what the VMs need (idempotent): qemu, python3-venv, busybox-static, mdadm and
/// virtme-ng (in a venv under target/vm), and the kernel.
pub(crate) fn setup(kernel: &str) -> Result<PathBuf> {
    let mut missing = Vec::new();
    if !have("qemu-system-x86_64") {
        missing.push("qemu-system-x86");
    }
    if !Path::new("/usr/lib/python3/dist-packages/ensurepip").exists()
        && Command::new("python3")
            .args(["-c", "import ensurepip"])
            .stderr(Stdio::null())
            .status()
            .map_or(true, |s| !s.success())
    {
        missing.push("python3-venv");
    }
    // virtme-ng's guest init is a statically linked busybox (a dynamic one, as some images
    // carry, does not do: it is replaced).
    let busybox_static = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "busybox-static"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"));
    if !busybox_static {
        missing.push("busybox-static");
    }
    // md RAID arrays over the emulated NVMe disks (tests/tests/vm.rs, the raid-chunk
    // experiment); the guest runs the host's binaries.
    if !have("mdadm") {
        missing.push("mdadm");
    }
    apt_install(&missing)?;
    let venv = venv_dir();
    if !venv.join("bin/vng").exists() {
        eprintln!("vm: installing virtme-ng into {}", venv.display());
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(venv.join("bin/pip")).args(["install", "-q", "virtme-ng==1.42"]))?;
    }
    vmlinuz(kernel)
}

fn venv_dir() -> PathBuf {
    root().join("target/vm/venv")
}

/// The vmlinuz of a kernel series, installing Debian's newest package of it when none is in
/// /boot; or the path given.
pub(crate) fn vmlinuz(kernel: &str) -> Result<PathBuf> {
    let (prefix, pattern) = match kernel {
        "6.12" => (
            "vmlinuz-6.12.",
            r"^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$",
        ),
        "6.1" => (
            "vmlinuz-6.1.0-",
            r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$",
        ),
        "5.10" => (
            "vmlinuz-5.10.0-",
            r"^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$",
        ),
        path => {
            let p = PathBuf::from(path);
            if !p.is_file() {
                bail!("--kernel {path}: not 6.12, 6.1, 5.10 or a vmlinuz file");
            }
            return Ok(p);
        }
    };
    // The generic flavour: the cloud one has no 9p, which virtme-ng shares the root with.
    let installed = || -> Option<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir("/boot")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(prefix) && n.ends_with("-amd64") && !n.contains("cloud")
                })
            })
            .collect();
        v.sort();
        v.pop()
    };
    if let Some(p) = installed() {
        return Ok(p);
    }
    if !have("apt-cache") {
        bail!("no {kernel} kernel in /boot and no apt to install one: give --kernel PATH");
    }
    // Debian 11's kernels come from the bullseye suite, through an index of its own under
    // target/vm/apt: the system's sources stay as they are.
    let bullseye = kernel == "5.10";
    let apt = AptIndex::new(bullseye)?;
    #[expect(
        clippy::let_underscore_must_use,
        reason = "an index left stale (offline) is not fatal: apt-cache search next says whether a kernel package can be found"
    )]
    let _ = Command::new("apt-get")
        .args(&apt.options)
        .args(["update", "-qq"])
        .status();
    let names = output(Command::new("apt-cache").args(&apt.options).args([
        "search",
        "--names-only",
        pattern,
    ]))?;
    let mut pkgs: Vec<&str> = names
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // Newest last: compare the version numbers in the names.
    pkgs.sort_by_key(|p| {
        p.split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    let Some(pkg) = pkgs.last() else {
        bail!(
            "no Debian package matches {pattern}: is Debian's {} archive reachable?",
            if bullseye { "bullseye" } else { "bookworm" }
        );
    };
    eprintln!("vm: installing the {kernel} kernel ({pkg}); a minute or two, once");
    if bullseye {
        // Downloaded from bullseye, installed with its dependencies from the system's own
        // sources (kmod, linux-base and initramfs-tools, all newer there).
        let dir = root().join("target/vm/apt/debs");
        std::fs::create_dir_all(&dir)?;
        run(Command::new("apt-get")
            .args(&apt.options)
            .args(["download", "-qq", pkg])
            .current_dir(&dir))?;
        let deb = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{pkg}_")))
            })
            .with_context(|| format!("apt-get download {pkg} left no .deb in {}", dir.display()))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .arg(&deb)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    } else {
        // Its package hooks build an initramfs the VM does not use (virtme-ng makes its own).
        apt_install(&[pkg])?;
    }
    installed().with_context(|| format!("{pkg} installed no {prefix}* in /boot"))
}

/// apt's options for the kernel's suite: none for the system's own (bookworm); for bullseye,
/// a sources entry, lists and cache of its own under target/vm/apt.
struct AptIndex {
    options: Vec<String>,
}

impl AptIndex {
    fn new(bullseye: bool) -> Result<AptIndex> {
        if !bullseye {
            return Ok(AptIndex {
                options: Vec::new(),
            });
        }
        let dir = root().join("target/vm/apt");
        for d in ["parts", "lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        std::fs::write(
            dir.join("parts/bullseye.sources"),
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bullseye\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
        )?;
        let d = dir.display();
        Ok(AptIndex {
            options: vec![
                "-o".into(),
                format!("Dir::Etc::SourceParts={d}/parts"),
                "-o".into(),
                "Dir::Etc::SourceList=/dev/null".into(),
                "-o".into(),
                format!("Dir::State::Lists={d}/lists"),
                "-o".into(),
                format!("Dir::Cache={d}/cache"),
            ],
        })
    }
}

/// Scratch disk images, removed when dropped.
struct Disks(Vec<PathBuf>);

impl Drop for Disks {
    fn drop(&mut self) {
        for p in &self.0 {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Boot the VM, run the command, stop the VM. Fails when the VM could not run it (or ran out
/// of time); otherwise returns its exit code.
pub(crate) fn run_vm(o: &Options) -> Result<Outcome> {
    use std::os::unix::process::CommandExt as _;
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let kernel = setup(&o.kernel)?;
    let out = o
        .out
        .clone()
        .unwrap_or_else(|| root().join("target/vm/out"));
    #[expect(
        clippy::let_underscore_must_use,
        reason = "clears the previous run's output; there is none on a first run"
    )]
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let out = out.canonicalize()?;
    // Images unique to this run: VMs of one process may run side by side.
    let nth = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let disks = Disks(
        (0..o.disks)
            .map(|i| {
                PathBuf::from(format!(
                    "/dev/shm/blkprof-vm-{}-{nth}-nvme{i}.img",
                    std::process::id()
                ))
            })
            .collect(),
    );
    let mut qemu = vec![if o.mttcg {
        "-accel tcg,thread=multi".to_string()
    } else {
        "-accel tcg,thread=single".to_string()
    }];
    for (i, d) in disks.0.iter().enumerate() {
        run(Command::new("truncate")
            .args(["-s", &format!("{}M", o.disk_mb)])
            .arg(d))?;
        qemu.push(format!(
            "-drive file={},if=none,id=n{i},format=raw,cache=none,aio=threads -device nvme,serial=blkprof{i},drive=n{i}",
            d.display()
        ));
    }
    // The guest's side: udev would probe every fresh block device (and every disk a test
    // closes after writing) and add IOs a test does not expect, or hold the disk open when
    // mkfs wants it. `udevadm control --exit` stops the daemon, but a worker busy with an
    // event outlives it; any udev process still there is killed, and named in `udev.txt`.
    // The exit code and dmesg come back through `out`.
    let script = out.join("run.sh");
    let quoted: Vec<String> = o.command.iter().map(|a| shell_quote(a)).collect();
    let out_q = shell_quote(&out.display().to_string());
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             udevadm control --exit 2>/dev/null\n\
             pgrep -a -f systemd-udevd > {out_q}/udev.txt 2>&1\n\
             pkill -KILL -f systemd-udevd 2>/dev/null\n\
             i=0; while pgrep -f systemd-udevd >/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done\n\
             cd {}\n{}\nrc=$?\ndmesg > {out_q}/dmesg.txt 2>&1\necho $rc > {out_q}/rc\n",
            shell_quote(&std::env::current_dir()?.display().to_string()),
            quoted.join(" "),
        ),
    )?;
    let venv_bin = venv_dir().join("bin");
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(venv_bin.join("vng"));
    // The guest kernel's own console too (for a guest that dies: its oops is there).
    if std::env::var_os("BLKPROF_VM_VERBOSE").is_some() {
        c.arg("--verbose");
    }
    c.env("PATH", path)
        .arg("--disable-kvm")
        .arg("-r")
        .arg(&kernel)
        .args(["--user", "root", "--cpus", &o.cpus.to_string()])
        .args(["-m", &format!("{}M", o.memory_mb)])
        .arg(format!("--rwdir={}", out.display()))
        .arg(format!("--qemu-opts={}", qemu.join(" ")))
        .arg("--")
        .arg(format!("sh {}", shell_quote(&script.display().to_string())));
    // Its own process group, so that a timeout or Ctrl-C stops qemu with it.
    c.process_group(0);
    if let Some(console) = &o.console {
        let f = std::fs::File::create(console)
            .with_context(|| format!("cannot create {}", console.display()))?;
        c.stdout(f.try_clone()?).stderr(f).stdin(Stdio::null());
    }
    eprintln!(
        "vm: booting {} ({} CPU{}, {} NVMe disk{} of {} MiB, TCG {}) to run: {}",
        kernel.display(),
        o.cpus,
        if o.cpus == 1 { "" } else { "s" },
        o.disks,
        if o.disks == 1 { "" } else { "s" },
        o.disk_mb,
        if o.mttcg {
            "multi-threaded"
        } else {
            "single-threaded"
        },
        o.command.join(" ")
    );
    let started = Instant::now();
    let mut child = c.spawn().context("cannot start virtme-ng (vng)")?;
    #[expect(
        clippy::cast_possible_wrap,
        reason = "a pid is at most pid_max (2^22 at most), far below i32::MAX"
    )]
    let pgid = child.id() as i32;
    let limit = Duration::from_secs(o.timeout);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if started.elapsed() > limit || crate::util::interrupted().is_err() {
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            #[expect(
                clippy::let_underscore_must_use,
                reason = "reaps the VM just killed (timeout or Ctrl-C); the run is reported as unfinished either way"
            )]
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(disks);
    let seconds = started.elapsed().as_secs_f64();
    let Some(status) = status else {
        crate::util::interrupted()?;
        bail!(
            "vm: stopped after {} s without an end (--timeout); the guest's files are in {}",
            o.timeout,
            out.display()
        );
    };
    let rc = std::fs::read_to_string(out.join("rc")).ok();
    let Some(code) = rc.and_then(|s| s.trim().parse::<i32>().ok()) else {
        bail!(
            "vm: the guest did not run the command (virtme-ng exited with {status} after {seconds:.0} s): does qemu run here (see its messages above), and does {} boot?",
            kernel.display()
        );
    };
    eprintln!(
        "vm: the command exited with {code} after {seconds:.0} s (boot included); dmesg in {}",
        out.join("dmesg.txt").display()
    );
    Ok(Outcome { code, out, seconds })
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `cargo xtask vm`: exits with the guest command's code.
pub(crate) fn vm(o: &Options) -> Result<()> {
    crate::util::catch_signals();
    let r = run_vm(o)?;
    if r.code != 0 {
        bail!("the command failed in the VM (exit code {})", r.code);
    }
    Ok(())
}
