//! Helpers for blkprof's root end-to-end tests: scratch loop devices, the real tracer binary,
//! real fio, and /proc/diskstats.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use analyzer::numeric::f64_to_usize_saturating;
use tracer_common::format::{
    DiskStats, Ending, IoRecord, ProbeCounters, Task, TraceHeader, TraceReader, TraceTrailer,
    parse_diskstats,
};
use tracer_common::op::StatGroup;

pub mod dist;
mod exact;
mod ftrace;

pub use exact::{Around, BpfStats, assert_cut_exact, assert_misses_are_skipped_runs};
pub use ftrace::{FtraceBlk, blk_action};

/// The repository's root (the workspace holding this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The project's Python (target/fleet/venv, made by `cargo xtask setup` with duckdb, pyspark
/// and perfetto; xtask/src/fleet.rs pins them).
pub fn venv_python() -> PathBuf {
    let p = repo_root().join("target/fleet/venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `cargo xtask setup` (it creates the venv with duckdb, pyspark and perfetto)",
        p.display()
    );
    p
}

pub fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("BLKPROF_BIN_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release"),
        PathBuf::from,
    );
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} not built: run `cargo xtask test`",
        p.display()
    );
    p
}

pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A fresh md RAID0 `/dev/md0` of these whole disks (names under /dev) with this chunk: any
/// md0 left over is stopped first. Stop it with [`md_stop`].
pub fn md_raid0(members: &[impl AsRef<str>], chunk_kb: u64) {
    md_stop();
    let devs: Vec<String> = members
        .iter()
        .map(|m| format!("/dev/{}", m.as_ref()))
        .collect();
    sh(&format!(
        "mdadm --create /dev/md0 --level=0 --raid-devices={} --chunk={chunk_kb} --run --force --metadata=1.2 {} 2>&1",
        members.len(),
        devs.join(" ")
    ));
}

/// Stop `/dev/md0` if it runs.
pub fn md_stop() {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort: there may be no md0; `md_raid0`'s create fails loudly if one is left"
    )]
    let _ = Command::new("mdadm")
        .args(["--stop", "/dev/md0"])
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status();
}

/// One test's scratch directory (trace files, logs, mount points) under the temp directory,
/// removed when it is dropped at the end of the test. A failing test keeps it, and so does
/// every test with `BLKPROF_KEEP=1`; the path is then printed with the test's output.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// `blkprof-e2e-PID-N-TEST`, named after the running test (libtest runs each test on a
    /// thread named after it).
    #[expect(
        clippy::new_without_default,
        reason = "creates a directory: not a default value"
    )]
    pub fn new() -> TestDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let test: String = std::thread::current()
            .name()
            .unwrap_or("test")
            .rsplit("::")
            .next()
            .unwrap_or("test")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let path =
            std::env::temp_dir().join(format!("blkprof-e2e-{}-{n}-{test}", std::process::id()));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("scratch directory {}: {e}", path.display()));
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let keep = std::env::var_os("BLKPROF_KEEP").is_some_and(|v| v == "1");
        if std::thread::panicking() || keep {
            let why = if keep {
                "BLKPROF_KEEP=1"
            } else {
                "the test failed; delete it when done"
            };
            eprintln!("test files kept in {} ({why})", self.path.display());
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// Files written when dropped, in order, also when a test panics: the settings a test changed
/// (sysfs, tracefs) put back.
pub struct WriteOnDrop(pub Vec<(PathBuf, String)>);

impl WriteOnDrop {
    /// One file to write `value` to.
    pub fn new(path: impl Into<PathBuf>, value: &str) -> WriteOnDrop {
        WriteOnDrop(vec![(path.into(), value.to_string())])
    }
}

impl Drop for WriteOnDrop {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        for (path, value) in &self.0 {
            let _ = std::fs::write(path, value);
        }
    }
}

/// A loop device over a sparse file, detached and removed on drop.
pub struct Scratch {
    pub name: String,
    pub path: String,
    img: PathBuf,
}

impl Scratch {
    /// `direct_io`: loop reads/writes the backing file with `O_DIRECT` (realistic latency);
    /// `in_shm`: back it by /dev/shm (fastest device for overhead tests).
    pub fn new(tag: &str, size_mb: u64, direct_io: bool, in_shm: bool) -> Scratch {
        // Named once per process and image: a test that makes two devices with one tag (one
        // after the other, or both at once) gets two files, also among the moved images
        // (`BLKPROF_TEST_TRASH`, on drop), where one name taken twice would be a deletion
        // waited for.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = if in_shm {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let img = dir.join(format!("blkprof-{tag}-{}-{n}.img", std::process::id()));
        sh(&format!("truncate -s {size_mb}M {}", img.display()));
        let dio = if direct_io { "--direct-io=on" } else { "" };
        let path = sh(&format!("losetup -f --show {dio} {}", img.display()));
        let name = path.trim_start_matches("/dev/").to_string();
        Scratch { name, path, img }
    }

    /// The device's IO scheduler ("none", "mq-deadline", ...); set back to none on drop.
    pub fn set_scheduler(&self, name: &str) {
        std::fs::write(format!("/sys/block/{}/queue/scheduler", self.name), name)
            .unwrap_or_else(|e| panic!("scheduler {name} on {}: {e}", self.name));
    }

    /// 2 = no merging at all: every bio becomes its own request.
    pub fn set_nomerges(&self, v: u32) {
        std::fs::write(
            format!("/sys/block/{}/queue/nomerges", self.name),
            v.to_string(),
        )
        .expect("nomerges");
    }

    pub fn diskstats(&self) -> DiskStats {
        let text = std::fs::read_to_string("/proc/diskstats").expect("diskstats");
        parse_diskstats(&text, 0)
            .into_values()
            .find(|d| d.name == self.name)
            .expect("device in diskstats")
    }

    /// Wait until the kernel has counted `n` more reads on the device (a minute at most, so
    /// that IO that stops fails the test's own check instead of hanging it); how many it
    /// counted. For tests that act while a load runs: a fixed sleep can pass before fio's first
    /// IO in an emulated VM, where fio takes seconds to start.
    pub fn wait_for_reads(&self, n: u64) -> u64 {
        let reads = || self.diskstats().group(StatGroup::Read).0;
        let from = reads();
        let deadline = Instant::now() + Duration::from_secs(60);
        while reads() < from + n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        reads() - from
    }
}

/// fio in a process group of its own, so that its job processes end with it: killing fio's
/// parent alone left its job doing IO for the rest of its run, on the CPUs of the tests that
/// followed. Killed whole on drop too (a test that fails before [`FioGroup::end`]).
pub struct FioGroup(Option<Child>);

impl FioGroup {
    pub fn spawn(args: &[&str]) -> FioGroup {
        use std::os::unix::process::CommandExt as _;
        FioGroup(Some(
            Command::new("fio")
                .args(args)
                .stdout(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("fio is installed (cargo xtask setup)"),
        ))
    }

    /// Send `signal` to the whole group and reap fio. Its exit status says nothing a test
    /// checks (128 on SIGINT): after SIGINT its jobs have ended and their IOs completed.
    pub fn end(mut self, signal: i32) {
        self.signal_and_reap(signal);
    }

    fn signal_and_reap(&mut self, signal: i32) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on the process group our child leads, not reaped until the
            // wait below.
            unsafe { libc::kill(-pid, signal) };
        }
        #[expect(
            clippy::let_underscore_must_use,
            reason = "fio's status after a signal says nothing about the test"
        )]
        let _ = child.wait();
    }
}

impl Drop for FioGroup {
    fn drop(&mut self) {
        self.signal_and_reap(libc::SIGKILL);
    }
}

impl Drop for Scratch {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        // Loop devices keep queue settings across detach: leave the default for the next user.
        let _ = std::fs::write(format!("/sys/block/{}/queue/nomerges", self.name), "0");
        let _ = std::fs::write(format!("/sys/block/{}/queue/scheduler", self.name), "none");
        let _ = Command::new("losetup").args(["-d", &self.path]).status();
        // Deleting an image a test wrote at random takes 10-20 s on a file system mounted with
        // `discard` (one discard per extent, waited for). `cargo xtask test` names a directory
        // to move the images to instead, on the same file system, and deletes it while the
        // VMs run.
        if let Some(trash) = std::env::var_os("BLKPROF_TEST_TRASH").filter(|t| !t.is_empty())
            && let Some(file) = self.img.file_name()
            && std::fs::rename(&self.img, Path::new(&trash).join(file)).is_ok()
        {
            return;
        }
        let _ = std::fs::remove_file(&self.img);
    }
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET over HTTP/1.0; (status, body).
pub fn http_get(port: u16, path_and_query: &str, accept: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// What a running tracer may do, from /proc/PID/status and every /proc/PID/task/TID/status:
/// asserts that no thread holds a capability but `CAP_BPF` (effective, permitted, inheritable,
/// ambient), that `CAP_BPF` is effective where it is permitted, that each thread has
/// `no_new_privs` and a seccomp filter, and that the threads agree. Returns whether `CAP_BPF` is
/// kept.
pub fn assert_privileges_dropped(pid: i32) -> bool {
    const CAP_BPF: u64 = 1 << 39;
    let mut files = vec![PathBuf::from(format!("/proc/{pid}/status"))];
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the tracer's threads");
    files.extend(tasks.map(|t| t.expect("a thread").path().join("status")));
    let mut kept = std::collections::BTreeSet::new();
    for f in &files {
        let s = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let field = |k: &str| {
            s.lines()
                .find_map(|l| Some(l.strip_prefix(k)?.strip_prefix(':')?.trim()))
                .unwrap_or_else(|| panic!("{k} in {}: {s}", f.display()))
        };
        let mask = |k: &str| u64::from_str_radix(field(k), 16).expect("a hex mask");
        for k in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
            assert_eq!(
                mask(k) & !CAP_BPF,
                0,
                "{}: {k} {:#x} holds more than CAP_BPF:\n{s}",
                f.display(),
                mask(k)
            );
        }
        assert_eq!((mask("CapInh"), mask("CapAmb")), (0, 0), "{}", f.display());
        assert_eq!(mask("CapEff"), mask("CapPrm"), "{}", f.display());
        assert_eq!(field("NoNewPrivs"), "1", "{}", f.display());
        assert_eq!(field("Seccomp"), "2", "{}", f.display());
        kept.insert(mask("CapEff") == CAP_BPF);
    }
    assert_eq!(kept.len(), 1, "the threads disagree: {files:?}");
    kept.contains(&true)
}

/// A running blkprof-trace.
pub struct Tracer {
    child: Child,
    /// On from before the probe attaches until after the tracer has written its trailer.
    _bpf_stats: BpfStats,
    stdout: mpsc::Receiver<String>,
    stderr_lines: mpsc::Receiver<String>,
    pub stderr: String,
}

pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Tracer {
    /// Start and wait until the probe is attached.
    pub fn start(args: &[&str]) -> Tracer {
        Self::start_env(args, &[])
    }

    /// [`Tracer::start`] with environment variables set for the tracer.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Tracer {
        Self::start_wrapped(&[], args, env)
    }

    /// [`Tracer::start_env`] through a command that execs its arguments (`unshare`, `sh -c
    /// '... exec "$0" "$@"'`), the tracer's path and `args` after `wrapper`.
    pub fn start_wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Tracer {
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin("blkprof-trace"));
                c
            }
            None => Command::new(bin("blkprof-trace")),
        };
        cmd.args(args).envs(env.iter().copied());
        Self::start_command(cmd)
    }

    /// [`Tracer::start`] of a command that runs a tracer (a packaged one, in a container).
    pub fn start_command(mut cmd: Command) -> Tracer {
        let bpf_stats = BpfStats::enable();
        exact::tracer_starting();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn blkprof-trace");
        let (tx, stdout) = mpsc::channel();
        let mut out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            let mut s = String::new();
            #[expect(
                clippy::let_underscore_must_use,
                reason = "on a read error the test gets the output read so far (or none)"
            )]
            let _ = out.read_to_string(&mut s);
            #[expect(
                clippy::let_underscore_must_use,
                reason = "the receiver is gone when the test dropped the tracer without waiting"
            )]
            let _ = tx.send(s);
        });
        let (etx, stderr_lines) = mpsc::channel();
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if etx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut t = Tracer {
            child,
            _bpf_stats: bpf_stats,
            stdout,
            stderr_lines,
            stderr: String::new(),
        };
        // A deadline so that a tracer that never attaches fails the test instead of hanging
        // it, not a measure of anything: generous, since the attach takes 3.7-7.0 s in the
        // 6.1 guest (TCG) and has taken over 30 s there, for no cause found.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match t.stderr_lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    t.stderr.push_str(&line);
                    t.stderr.push('\n');
                    // The attach line, not a device note that also says "tracing" ("md0 is
                    // bio-based ...; tracing its members ..."), which comes before the attach.
                    if line.starts_with("blkprof-trace: tracing ") {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = t.child.try_wait() {
                        panic!(
                            "blkprof-trace exited ({status}) before attaching: {}",
                            t.stderr
                        );
                    }
                    assert!(
                        Instant::now() < deadline,
                        "blkprof-trace did not attach: {}",
                        t.stderr
                    );
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    #[expect(
                        clippy::let_underscore_must_use,
                        reason = "reaps the exited tracer; the panic that follows is the failure"
                    )]
                    let _ = t.child.wait();
                    panic!("blkprof-trace exited before attaching: {}", t.stderr);
                }
            }
        }
        t
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a pid fits a pid_t")
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// SIGINT, then wait for it to finish.
    pub fn stop(self) -> Finished {
        self.signal(libc::SIGINT);
        self.wait()
    }

    /// Wait up to 20 s for it to stop by itself, then SIGINT it.
    pub fn wait_or_stop(mut self) -> Finished {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.wait();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.signal(libc::SIGINT);
        self.wait()
    }

    pub fn wait(mut self) -> Finished {
        let status = self.child.wait().expect("wait");
        let stdout = self
            .stdout
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        while let Ok(l) = self.stderr_lines.recv_timeout(Duration::from_millis(200)) {
            self.stderr.push_str(&l);
            self.stderr.push('\n');
        }
        Finished {
            status,
            stdout,
            stderr: std::mem::take(&mut self.stderr),
        }
    }
}

impl Drop for Tracer {
    /// A test that panics leaves no tracer attached behind it.
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What [`traced`] saw.
pub struct Traced {
    pub trace: Trace,
    /// The device's diskstats delta around the work (the test's own snapshots).
    pub own: BTreeMap<StatGroup, (u64, u64)>,
    /// The tracer's end summary.
    pub stdout: String,
}

/// blkprof-trace on `dev` writing `out`, with `extra` options and environment `env`, started
/// before `work` and stopped after it. The tracer must succeed and end its file complete.
pub fn traced(
    dev: &Scratch,
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
    work: impl FnOnce(),
) -> Traced {
    traced_wrapped(&[], dev, out, extra, env, work)
}

/// [`traced`] with the tracer started through `wrapper` ([`Tracer::start_wrapped`]).
pub fn traced_wrapped(
    wrapper: &[&str],
    dev: &Scratch,
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
    work: impl FnOnce(),
) -> Traced {
    let out_s = out.to_str().expect("a UTF-8 path");
    let mut args = vec!["--device", dev.name.as_str(), "--output", out_s, "--quiet"];
    args.extend_from_slice(extra);
    let t = Tracer::start_wrapped(wrapper, &args, env);
    let before = dev.diskstats();
    work();
    let after = dev.diskstats();
    let f = t.stop();
    assert!(
        f.status.success(),
        "tracer failed: {}\n{}",
        f.stderr,
        f.stdout
    );
    let trace = Trace::read(out);
    assert_eq!(trace.ending, Ending::Complete, "{}", out.display());
    Traced {
        trace,
        own: delta(&before, &after),
        stdout: f.stdout,
    }
}

/// Run a fio job with JSON output; panics if fio fails.
pub fn fio(args: &[&str]) -> serde_json::Value {
    let out = Command::new("fio")
        .args(args)
        .arg("--output-format=json")
        .output()
        .expect("fio is installed (cargo xtask setup)");
    assert!(
        out.status.success(),
        "fio {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON document.
    let start = text.find('{').expect("fio JSON");
    serde_json::from_str(&text[start..]).expect("fio JSON parses")
}

/// Everything a test wants from a trace file.
pub struct Trace {
    pub header: TraceHeader,
    pub trailer: Option<TraceTrailer>,
    pub ending: Ending,
    pub records: Vec<IoRecord>,
    /// The submitting tasks the records name (`IoRecord::task` indexes it).
    pub tasks: Vec<Task>,
    /// The paths of the cgroups the records name, by v2 id.
    pub cgroups: BTreeMap<u64, String>,
    /// The paths of the files the records name, by (file system, inode).
    pub files: std::collections::HashMap<(u32, u64), String>,
    /// What the kernel counted from the start of the tracer that wrote this trace (this
    /// thread's) to its reading.
    pub around: Option<exact::Around>,
}

/// What [`Trace::submissions`] counts.
#[derive(Debug, Default)]
pub struct Submissions<'a> {
    pub requests: usize,
    pub unseen: usize,
    pub others: BTreeMap<&'a str, usize>,
}

impl Trace {
    pub fn read(path: &Path) -> Trace {
        let mut r = TraceReader::open(path).expect("trace opens");
        let mut records = Vec::new();
        let mut buf = Vec::new();
        while r.next_chunk(&mut buf).expect("trace reads") {
            records.extend_from_slice(&buf);
        }
        let around = exact::trace_read();
        Trace {
            around,
            header: r.header().clone(),
            trailer: r.trailer().cloned(),
            ending: r.ending().clone(),
            records,
            tasks: r.tasks().to_vec(),
            cgroups: r.cgroups().clone(),
            files: r.files().clone(),
        }
    }

    /// The command name of the task that submitted `r` ("" if unknown).
    pub fn comm(&self, r: &IoRecord) -> &str {
        self.tasks
            .get(r.task as usize)
            .map_or("", |t| t.comm.as_str())
    }

    /// The records of submitted requests: all but the flush machinery's own flushes (which
    /// no task submits).
    pub fn requests(&self) -> impl Iterator<Item = &IoRecord> {
        self.records
            .iter()
            .filter(|r| r.flags & tracer_common::op::flags::FLUSH_RQ == 0)
    }

    /// Who submitted the requests (every record but the flush machinery's own flushes): how
    /// many, how many without a seen submission (`STARTED_BEFORE`), and the count per submitter
    /// other than `expected`.
    pub fn submissions(&self, expected: &str) -> Submissions<'_> {
        let mut s = Submissions::default();
        for r in self.requests() {
            s.requests += 1;
            if r.flags & tracer_common::op::flags::STARTED_BEFORE != 0 {
                s.unseen += 1;
            }
            let c = self.comm(r);
            if c != expected {
                *s.others.entry(c).or_default() += 1;
            }
        }
        s
    }

    /// (ios, bytes) per diskstats group.
    pub fn groups(&self) -> BTreeMap<StatGroup, (u64, u64)> {
        let mut m = BTreeMap::new();
        for r in &self.records {
            let e = m.entry(r.stat_group()).or_insert((0, 0));
            e.0 += 1;
            e.1 += u64::from(r.bytes);
        }
        m
    }

    /// The misses the trace reports over its span: program runs the kernel skipped,
    /// completions never seen, requests the probe could not track.
    pub fn misses(&self) -> u64 {
        let end = &self.trailer.as_ref().expect("trailer").counters_end;
        end.reported_misses()
            .saturating_sub(self.header.counters_start.reported_misses())
    }

    /// Runs of the probe's program on `tracepoint` over the trace, as the kernel counted them
    /// (while [`BpfStats`] is held); `None` if the probe had no program there.
    pub fn runs(&self, tracepoint: &str) -> Option<u64> {
        let of = |c: &ProbeCounters| {
            c.programs
                .iter()
                .find(|p| p.name == tracepoint)
                .map(|p| p.run_cnt)
        };
        let end = of(&self.trailer.as_ref().expect("trailer").counters_end)?;
        Some(end.saturating_sub(of(&self.header.counters_start).unwrap_or(0)))
    }

    /// Diskstats delta of one device over the trace (the tracer's own snapshots).
    pub fn kernel_delta(&self, name: &str) -> BTreeMap<StatGroup, (u64, u64)> {
        let t = self.trailer.as_ref().expect("trailer");
        let a = self
            .header
            .diskstats_start
            .iter()
            .find(|d| d.name == name)
            .expect("start diskstats");
        let b = t
            .diskstats_end
            .iter()
            .find(|d| d.name == name)
            .expect("end diskstats");
        delta(a, b)
    }
}

pub fn delta(a: &DiskStats, b: &DiskStats) -> BTreeMap<StatGroup, (u64, u64)> {
    StatGroup::ALL
        .iter()
        .map(|&g| {
            let (i0, b0) = a.group(g);
            let (i1, b1) = b.group(g);
            (g, (i1 - i0, b1 - b0))
        })
        .collect()
}

/// Parse fio's iolog (`--write_iolog`, version 2 `file action offset length` or version 3
/// with a leading timestamp): (action, offset, length) of every IO fio issued.
pub fn fio_iolog(path: &Path) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(path).expect("iolog");
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let f = if f.len() == 5 { &f[1..] } else { &f[..] };
        if f.len() == 4 && matches!(f[1], "read" | "write" | "trim") {
            out.push((
                f[1].to_string(),
                f[2].parse().expect("offset"),
                f[3].parse().expect("length"),
            ));
        }
    }
    out
}

/// The `q`-quantile (0..=1) of `v` by nearest rank; `v` need not be sorted.
pub fn quantile(v: &mut [u64], q: f64) -> u64 {
    assert!(!v.is_empty(), "quantile of nothing");
    v.sort_unstable();
    let rank = f64_to_usize_saturating((q * v.len() as f64).ceil()).clamp(1, v.len());
    v[rank - 1]
}

/// A report JSON's element of `array` (a JSON array) whose `key` is `value`, e.g. the row of
/// a cgroup by its path; panics naming the array when there is none.
pub fn json_row<'a>(array: &'a serde_json::Value, key: &str, value: &str) -> &'a serde_json::Value {
    array
        .as_array()
        .and_then(|a| a.iter().find(|x| x[key] == value))
        .unwrap_or_else(|| panic!("no {key} = {value:?} in {array}"))
}

/// `blkprof report --json TRACE`, which must succeed, parsed.
pub fn report_json(trace: &Path) -> serde_json::Value {
    let o = std::process::Command::new(bin("blkprof"))
        .args(["report", "--json"])
        .arg(trace)
        .output()
        .expect("run blkprof report");
    assert!(
        o.status.success(),
        "blkprof report {}: {}",
        trace.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("report JSON")
}

/// Per diskstats group, the trace's records and the probe's aggregates equal the kernel's
/// counts exactly, but for the misses the tracer reports, each a program run the kernel
/// skipped; returns the misses.
pub fn assert_exact(trace: &Trace, device: &str, own: &BTreeMap<StatGroup, (u64, u64)>) -> u64 {
    assert_exact_but_misses(trace, device, own);
    assert_misses_are_skipped_runs(trace, device)
}

/// [`assert_exact`] but for how many IOs the probe missed: (missed, the kernel's IOs).
pub fn assert_exact_but_misses(
    trace: &Trace,
    device: &str,
    own: &BTreeMap<StatGroup, (u64, u64)>,
) -> (u64, u64) {
    let kernel = trace.kernel_delta(device);
    let t = trace.trailer.as_ref().expect("trailer");
    let c = &t.counters_end;
    assert_eq!(
        c.ring_drops, 0,
        "no ring drops at this rate with default settings"
    );
    // The test's own snapshots around the workload see the same (nothing else uses the device).
    assert_eq!(
        &kernel, own,
        "diskstats around the workload vs over the trace"
    );
    let misses = c.reported_misses();
    let cov = tracer_common::coverage::coverage(&trace.header, t);
    let d = cov
        .iter()
        .find(|d| d.name == device)
        .expect("coverage of the device");
    let groups = trace.groups();
    let mut missed_total = 0;
    for g in &d.groups {
        let grp = g.group.unwrap();
        let rec = groups.get(&grp).copied().unwrap_or((0, 0));
        // Records and the exact in-kernel aggregates agree with each other...
        assert_eq!(
            rec,
            (g.aggregate_ios, g.aggregate_bytes),
            "records vs in-kernel aggregates, {grp:?}"
        );
        // ...and with the kernel, up to the misses the tracer itself reported.
        assert!(
            g.aggregate_ios <= g.kernel_ios,
            "{grp:?}: more IOs than the kernel counted"
        );
        assert_eq!(
            g.unaccounted(misses),
            0,
            "{grp:?}: trace {} vs kernel {} IOs, reported misses {misses}",
            g.aggregate_ios,
            g.kernel_ios
        );
        if g.aggregate_ios == g.kernel_ios {
            assert_eq!(g.aggregate_bytes, g.kernel_bytes, "{grp:?} bytes");
        }
        missed_total += g.kernel_ios - g.aggregate_ios;
    }
    // Every missing IO is a reported miss (the misses reported can be more: a program run the
    // kernel skipped for recursion is one, whichever program it was). But on the
    // `block_getrq` fallback an empty flush (an fsync's) meets no program before its
    // completion: if the kernel skips that run (this host's does, now and then), the IO is
    // not seen at all, and shows only as a submitter not taken up.
    let unseen = if trace.header.submit_hook == "block_getrq" {
        c.submitters_lost
    } else {
        0
    };
    assert!(
        missed_total <= misses + unseen,
        "IOs missing against the kernel's counters ({missed_total}) vs misses reported \
         ({misses}; submitters not taken up {unseen})"
    );
    (missed_total, d.groups.iter().map(|g| g.kernel_ios).sum())
}
