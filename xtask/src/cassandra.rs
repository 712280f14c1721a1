//! `cargo xtask cassandra`: the seeds' experiment for real. A Cassandra 5.0 node with its data
//! on a scratch loop device (ext4 mounted with `discard`), YCSB workload A against it through
//! the project's own CQL binding, blkprof-trace recording the device during the run phase, and
//! the report with YCSB's results and Cassandra's flush and compaction lines on one time axis.
//!
//! Everything it starts is stopped by pid, and the mount, loop device and scratch files are
//! removed, also when a step fails or on Ctrl-C / SIGTERM (children run in their own process
//! group, so a terminal's Ctrl-C reaches only this task, which then stops them in order).

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::util::{
    apt_install, attach_loop, catch_signals, have, interrupted, is_root, output, root, run, sleep,
};

#[derive(clap::Args)]
#[expect(
    clippy::doc_markdown,
    reason = "clap help text: backticks would show in --help"
)]
pub(crate) struct Options {
    /// Seconds of YCSB workload A (the traced run phase).
    #[arg(long, default_value_t = 120)]
    pub duration: u64,
    /// YCSB records loaded before the run (about 1.1 KB each).
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    /// YCSB client threads.
    #[arg(long, default_value_t = 16)]
    pub threads: u32,
    /// Directory for the trace, the logs, YCSB's output and the report.
    #[arg(long, default_value = "target/cassandra-run")]
    pub out: PathBuf,
    /// Size of the scratch disk image in GiB (sparse: only what is written takes space).
    #[arg(long, default_value_t = 8)]
    pub disk_gib: u64,
    /// Page cache (MiB) the node may use during the run, beyond its own memory plus 128 MiB
    /// of headroom (a memory cgroup); 0 for no limit. Small, so that reads reach the device
    /// as on a node whose data set is larger than memory.
    #[arg(long, default_value_t = 64)]
    pub page_cache_mib: u64,
    /// Set the data disk's read_ahead_kb (sysfs) before the node starts: the most the page
    /// cache reads ahead of a sequential reader (the kernel's default here is 128; CentOS
    /// tunings use 4096, Cassandra guides 8). Default: left as the kernel made it. The value
    /// in force is recorded in the trace either way.
    #[arg(long, value_name = "KB")]
    pub read_ahead_kb: Option<u32>,
    /// YCSB fields per document (the table's text columns field0..).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub field_count: u32,
    /// Bytes per YCSB field: a document is field-count x field-length bytes (YCSB's default
    /// 10 x 100, about 1 KB).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub field_length: u32,
    /// Updates write every field of the document (YCSB writeallfields), not one.
    #[arg(long)]
    pub write_all_fields: bool,
    /// KEY=VALUE written into the trace's header (blkprof-trace --label). Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// Run the node in the VM lab (`cargo xtask vm`: a stock Debian 6.12 kernel under qemu)
    /// with its data on an md RAID0 of N emulated NVMe disks, traced through the members (seed
    /// 000's setup). The guest's CPU is emulated (TCG), about 20x slower than this host for
    /// the JVM: give it a few thousand --records; the node takes minutes to start.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=8))]
    pub raid0: Option<u32>,
    /// The md RAID0 chunk size in KB (with --raid0): a power of two, 4 to 4096.
    #[arg(long, value_name = "KB", default_value_t = 64, requires = "raid0")]
    pub chunk_kb: u32,
    /// Set by the host for the run inside the VM (with --raid0).
    #[arg(long, hide = true)]
    pub in_vm: bool,
}

/// How much slower everything is in the VM lab's emulated CPU (the JVM measured 20x): the
/// factor for the waits on the node and YCSB.
const VM_SLOWDOWN: u32 = 20;

const CQL_PORT: u16 = 9042;
/// Set (by the host) when the Java side is already built: no Maven, no packages.
const PREBUILT_ENV: &str = "BLKPROF_CASSANDRA_PREBUILT";
/// Memory the node may gain during the run before its page cache shrinks below the budget.
const HEADROOM_MIB: u64 = 128;
const STORAGE_PORT: u16 = 7000;

/// What was started and set up, undone in reverse order on drop.
#[derive(Default)]
struct Scratch {
    dir: PathBuf,
    cgroup: Option<Cgroup>,
    loopdev: Option<String>,
    /// An md array made for the run (in the VM lab), stopped after the unmount.
    md: Option<String>,
    mounted: Option<PathBuf>,
    /// (what, child): stopped with SIGTERM, then SIGKILL after the grace time.
    children: Vec<(String, Child, Duration)>,
}

impl Scratch {
    fn spawn(&mut self, what: &str, cmd: &mut Command, grace: Duration) -> Result<u32> {
        let child = cmd
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {what}: {cmd:?}"))?;
        let pid = child.id();
        self.children.push((what.to_string(), child, grace));
        Ok(pid)
    }

    fn child(&mut self, what: &str) -> Option<&mut Child> {
        self.children
            .iter_mut()
            .find(|(w, ..)| w == what)
            .map(|(_, c, _)| c)
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status if it ended by itself
    /// or on SIGTERM.
    fn stop(&mut self, what: &str) -> Option<std::process::ExitStatus> {
        let i = self.children.iter().position(|(w, ..)| w == what)?;
        let (what, mut child, grace) = self.children.remove(i);
        stop_child(&what, &mut child, grace)
    }
}

fn stop_child(what: &str, child: &mut Child, grace: Duration) -> Option<std::process::ExitStatus> {
    if let Ok(Some(s)) = child.try_wait() {
        return Some(s);
    }
    #[expect(
        clippy::cast_possible_wrap,
        reason = "a pid is at most pid_max (2^22 at most), far below i32::MAX"
    )]
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on a pid we spawned and have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "cassandra: {what} (pid {pid}) did not stop within {} s of SIGTERM: SIGKILL",
        grace.as_secs()
    );
    // The whole group: a JVM or fio may have children of its own.
    // SAFETY: as above; the group is the child's own (process_group(0)).
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    #[expect(
        clippy::let_underscore_must_use,
        reason = "reaps the child just killed; it did not stop when asked, so its exit status says nothing"
    )]
    let _ = child.wait();
    None
}

impl Drop for Scratch {
    fn drop(&mut self) {
        while let Some((what, mut child, grace)) = self.children.pop() {
            stop_child(&what, &mut child, grace);
        }
        self.cgroup.take();
        if let Some(m) = self.mounted.take() {
            let ok = Command::new("umount")
                .arg(&m)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!(
                    "cassandra: umount {} failed; detaching it lazily",
                    m.display()
                );
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
                )]
                let _ = Command::new("umount").arg("-l").arg(&m).status();
            }
        }
        if let Some(d) = self.loopdev.take() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = Command::new("losetup").args(["-d", &d]).status();
        }
        if let Some(md) = self.md.take() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = Command::new("mdadm").args(["--stop", &md]).status();
        }
        if !self.dir.as_os_str().is_empty() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A memory cgroup for the node (v2 or v1), so that the run phase has a small page cache and
/// YCSB's reads reach the device as they do when the data set is larger than memory.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    fn create(name: &str) -> Option<Cgroup> {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let base = if v2 {
            PathBuf::from("/sys/fs/cgroup")
        } else {
            PathBuf::from("/sys/fs/cgroup/memory")
        };
        if v2 {
            // The memory controller must be enabled for children of the root.
            #[expect(
                clippy::let_underscore_must_use,
                reason = "the controller may already be enabled, or not be allowed here; whether the cgroup can limit memory is checked next (its limit file)"
            )]
            let _ = std::fs::write(base.join("cgroup.subtree_control"), "+memory");
        }
        let dir = base.join(name);
        std::fs::create_dir(&dir).ok()?;
        let limit = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        if !dir.join(limit).exists() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup of a cgroup that cannot be used; the node then runs without one"
            )]
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Cgroup { dir, v2 })
    }

    fn add(&self, pid: u32) -> Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving pid {pid} into {}", self.dir.display()))
    }

    fn stat(&self, key: &str) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
            .unwrap_or(0)
    }

    /// Memory the node holds that is not page cache.
    fn anon(&self) -> u64 {
        if self.v2 {
            self.stat("anon") + self.stat("kernel")
        } else {
            self.stat("total_rss")
        }
    }

    fn page_cache(&self) -> u64 {
        if self.v2 {
            self.stat("file")
        } else {
            self.stat("total_cache")
        }
    }

    fn limit(&self, bytes: u64) -> Result<()> {
        let f = if self.v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(self.dir.join(f), bytes.to_string())
            .with_context(|| format!("setting {} of {}", f, self.dir.display()))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once the node has exited; a few tries while the kernel lets go of it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("cassandra: could not remove {}", self.dir.display());
    }
}

/// The JPMS flags Cassandra 5.0 ships in conf/jvm17-server.options (not in the jar).
const JVM17_FLAGS: &[&str] = &[
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
];

fn java() -> Result<PathBuf> {
    let jdk17 = Path::new("/usr/lib/jvm/java-17-openjdk-amd64/bin/java");
    if jdk17.exists() {
        return Ok(jdk17.to_path_buf());
    }
    let v = Command::new("java").arg("-version").output();
    if let Ok(v) = v
        && String::from_utf8_lossy(&v.stderr).contains("version \"17")
    {
        return Ok("java".into());
    }
    bail!(
        "Cassandra 5.0 needs Java 17: install openjdk-17-jdk-headless (apt-get install openjdk-17-jdk-headless)"
    )
}

/// Maven and a JDK 17 from Debian's packages if missing.
fn packages() -> Result<()> {
    let mut missing = Vec::new();
    if !have("mvn") {
        missing.push("maven");
    }
    if !Path::new("/usr/lib/jvm/java-17-openjdk-amd64/bin/javac").exists() && !have("javac") {
        missing.push("openjdk-17-jdk-headless");
    }
    apt_install(&missing)
}

fn mvn(pom_dir: &Path, goals: &[&str]) -> Result<()> {
    let mut c = Command::new("mvn");
    c.args(["-B", "-q", "-Dstyle.color=never", "-f"])
        .arg(pom_dir.join("pom.xml"))
        .args(goals);
    if Path::new("/usr/lib/jvm/java-17-openjdk-amd64").exists() {
        c.env("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64");
    }
    run(&mut c)
}

/// Class paths: the node's, the YCSB client's (with the binding) and the binding test's.
pub(crate) struct Java {
    server_cp: String,
    jamm: String,
    client_cp: String,
    test_cp: String,
}

/// Cassandra's jars, and the YCSB client with the binding, compiled and unit-tested.
pub(crate) fn build_java() -> Result<Java> {
    let base = root().join("cassandra");
    let t = Instant::now();
    // Inside the VM lab the host built it, and the repository is read-only.
    if std::env::var_os(PREBUILT_ENV).is_none() {
        eprintln!(
            "cassandra: fetching Cassandra 5.0.4, YCSB 0.17.0 and the Java driver (Maven Central), building the CQL binding"
        );
        mvn(&base.join("server"), &["dependency:copy-dependencies"])?;
        mvn(
            &base.join("ycsb-cql"),
            &["package", "dependency:copy-dependencies"],
        )?;
        eprintln!(
            "cassandra: Java side ready in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let jars = |d: PathBuf| -> Result<Vec<String>> {
        let mut v: Vec<String> = std::fs::read_dir(&d)
            .with_context(|| format!("reading {}", d.display()))?
            .filter_map(std::result::Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .map(|p| p.display().to_string())
            .collect();
        v.sort();
        Ok(v)
    };
    let server = jars(base.join("server/target/dependency"))?;
    let jamm = server
        .iter()
        .find(|j| j.contains("/jamm-"))
        .context("no jamm jar among Cassandra's dependencies")?
        .clone();
    let b = base.join("ycsb-cql/target");
    let mut client = vec![b.join("ycsb-cql-1.jar").display().to_string()];
    client.extend(jars(b.join("dependency"))?);
    let test_cp = format!("{}:{}", b.join("test-classes").display(), client.join(":"));
    Ok(Java {
        server_cp: server.join(":"),
        jamm,
        client_cp: client.join(":"),
        test_cp,
    })
}

fn cassandra_yaml(data: &Path) -> String {
    let d = data.display();
    format!(
        "\
# Written by `cargo xtask cassandra`: a single node on 127.0.0.1, every directory on the
# traced filesystem, small memtables so that flushes come every few seconds under YCSB.
cluster_name: blkprof
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: \"127.0.0.1:{STORAGE_PORT}\"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: {STORAGE_PORT}
native_transport_port: {CQL_PORT}
start_native_transport: true
data_file_directories:
  - {d}/data
commitlog_directory: {d}/commitlog
saved_caches_directory: {d}/saved_caches
hints_directory: {d}/hints
cdc_raw_directory: {d}/cdc_raw
# Scaled down with the memtables: with the default 10 s, each commit log sync writes as much
# as a 16 MiB memtable's flush, and the two kinds of write burst cannot be told apart.
commitlog_sync: periodic
commitlog_sync_period: 100ms
commitlog_segment_size: 32MiB
memtable_allocation_type: heap_buffers
memtable_heap_space: 16MiB
memtable_flush_writers: 1
auto_snapshot: false
# Cassandra's own cache of data chunks, scaled down too: reads should reach the device.
file_cache_size: 16MiB
"
    )
}

/// Cassandra's own log line shape: the analyzer reads flushes and compactions from it.
fn logback_xml(logdir: &Path) -> String {
    format!(
        r#"<configuration scan="false">
  <appender name="SYSTEMLOG" class="ch.qos.logback.core.FileAppender">
    <file>{}/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="SYSTEMLOG" /></root>
</configuration>
"#,
        logdir.display()
    )
}

const WORKLOAD_A: &str = "\
# YCSB core workload A (update heavy: 50% reads, 50% updates, zipfian), as shipped by YCSB.
workload=site.ycsb.workloads.CoreWorkload
readallfields=true
readproportion=0.5
updateproportion=0.5
scanproportion=0
insertproportion=0
requestdistribution=zipfian
";

fn wait_for_cql(s: &mut Scratch, log: &Path, timeout: Duration) -> Result<()> {
    let addr: SocketAddr = ([127, 0, 0, 1], CQL_PORT).into();
    let end = Instant::now() + timeout;
    loop {
        interrupted()?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(c) = s.child("cassandra")
            && let Ok(Some(status)) = c.try_wait()
        {
            bail!(
                "Cassandra exited ({status}) before it answered CQL; the end of {}:\n{}",
                log.display(),
                tail(log, 30)
            );
        }
        if Instant::now() > end {
            bail!(
                "Cassandra did not answer CQL on 127.0.0.1:{CQL_PORT} within {} s; the end of {}:\n{}",
                timeout.as_secs(),
                log.display(),
                tail(log, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Wait for a child to end by itself, watching for Ctrl-C.
fn wait_child(s: &mut Scratch, what: &str, timeout: Duration) -> Result<std::process::ExitStatus> {
    let end = Instant::now() + timeout;
    loop {
        interrupted()?;
        let c = s
            .child(what)
            .with_context(|| format!("{what} is not running"))?;
        if let Some(st) = c.try_wait()? {
            s.children.retain(|(w, ..)| w != what);
            return Ok(st);
        }
        if Instant::now() > end {
            bail!("{what} did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Drop the data files from the page cache so that YCSB's reads reach the device.
fn evict(dir: &Path) -> Result<(u64, u64)> {
    let mut files = 0;
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                // Compaction deletes SSTables while we walk: a file gone is nothing to evict.
                let f = match std::fs::File::open(e.path()) {
                    Ok(f) => f,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(err.into()),
                };
                // SAFETY: a valid fd; offset 0 and length 0 mean the whole file.
                let r =
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                if r == 0 {
                    files += 1;
                    bytes += f.metadata()?.len();
                }
            }
        }
    }
    Ok((files, bytes))
}

/// The driver's request timeout: its default 10 s, longer on the VM lab's emulated CPU
/// (where creating the schema alone took more than 10 s).
fn cql_timeout_ms(o: &Options) -> u64 {
    if o.in_vm {
        10_000 * u64::from(VM_SLOWDOWN)
    } else {
        10_000
    }
}

fn ycsb(
    java: &Path,
    client_cp: &str,
    phase: &str,
    o: &Options,
    workload: &Path,
    extra: &[String],
) -> Command {
    let mut c = Command::new(java);
    c.args([
        "-Xmx1G",
        "-Duser.timezone=UTC",
        "-cp",
        client_cp,
        "site.ycsb.Client",
    ])
    .arg(phase)
    .args(["-db", "blkprof.ycsb.CqlDb", "-P"])
    .arg(workload)
    .args([
        "-s",
        "-threads",
        &o.threads.to_string(),
        "-p",
        &format!("recordcount={}", o.records),
        "-p",
        &format!("cql.port={CQL_PORT}"),
        "-p",
        &format!("fieldcount={}", o.field_count),
        "-p",
        &format!("fieldlength={}", o.field_length),
        "-p",
        &format!("writeallfields={}", o.write_all_fields),
        "-p",
        &format!("cql.timeout_ms={}", cql_timeout_ms(o)),
    ]);
    for e in extra {
        c.args(["-p", e]);
    }
    c
}

/// Where one run left its results.
pub(crate) struct RunOutput {
    /// The run's JSON report (`report -o`), with YCSB's results and the node's log.
    pub report_json: PathBuf,
    /// The text report.
    pub report_txt: PathBuf,
}

pub(crate) fn cassandra(o: &Options) -> Result<()> {
    if o.raid0.is_some() && !o.in_vm {
        return in_vm(o);
    }
    let java = prepare()?;
    let r = run_node(o, &java)?;
    println!("{}", std::fs::read_to_string(&r.report_txt)?);
    Ok(())
}

/// `--raid0`: the Java side built here, then this same command inside the VM lab with N NVMe
/// disks, the node's data on their md RAID0; the run's files land in --out as on the host.
fn in_vm(o: &Options) -> Result<()> {
    let n = o.raid0.context("--raid0")?;
    if !(4..=4096).contains(&o.chunk_kb) || !o.chunk_kb.is_power_of_two() {
        bail!(
            "--chunk-kb {}: md RAID0 takes a power of two from 4 to 4096 KB",
            o.chunk_kb
        );
    }
    prepare()?;
    std::fs::create_dir_all(&o.out)
        .with_context(|| format!("cannot create {}", o.out.display()))?;
    let out = o.out.canonicalize()?;
    let xtask = std::env::current_exe().context("the xtask binary")?;
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!("{PREBUILT_ENV}=1"),
        xtask.display().to_string(),
        "cassandra".into(),
        "--prebuilt".into(),
        "--in-vm".into(),
        format!("--raid0={n}"),
        format!("--chunk-kb={}", o.chunk_kb),
        format!("--duration={}", o.duration),
        format!("--records={}", o.records),
        format!("--threads={}", o.threads),
        format!("--out={}", out.display()),
        format!("--disk-gib={}", o.disk_gib),
        format!("--page-cache-mib={}", o.page_cache_mib),
        format!("--field-count={}", o.field_count),
        format!("--field-length={}", o.field_length),
    ];
    if let Some(kb) = o.read_ahead_kb {
        cmd.push(format!("--read-ahead-kb={kb}"));
    }
    if o.write_all_fields {
        cmd.push("--write-all-fields".into());
    }
    for l in &o.labels {
        cmd.push(format!("--label={l}"));
    }
    let vm = crate::vm::Options {
        kernel: "6.12".into(),
        disks: n,
        // The array holds the disk image's size, spread over the members.
        disk_mb: (o.disk_gib * 1024).div_ceil(u64::from(n)).max(1024),
        cpus: 2,
        // The node's 2 GiB heap, YCSB's JVM, the guest's page cache.
        memory_mb: 6144,
        timeout: 3600 + o.duration * 2,
        mttcg: false,
        out: Some(out.clone()),
        command: cmd,
        console: None,
    };
    eprintln!(
        "cassandra: in the VM lab on md RAID0 of {n} NVMe disks, chunk {} KB (the guest's CPU is emulated: expect tens of minutes)",
        o.chunk_kb
    );
    let r = crate::vm::run_vm(&vm)?;
    if r.code != 0 {
        bail!(
            "the node's run in the VM failed (exit code {}); the guest's dmesg: {}",
            r.code,
            r.out.join("dmesg.txt").display()
        );
    }
    std::fs::write(out.join("vm-seconds.txt"), format!("{:.0}", r.seconds))?;
    println!("{}", std::fs::read_to_string(out.join("report.txt"))?);
    Ok(())
}

/// What every run needs: root, a free CQL port, Java 17, the Java side built.
pub(crate) fn prepare() -> Result<(PathBuf, Java)> {
    if !is_root() {
        bail!(
            "this task creates a loop device, mounts a filesystem and loads eBPF programs: run `cargo xtask cassandra` as root"
        );
    }
    catch_signals();
    if TcpStream::connect_timeout(
        &([127, 0, 0, 1], CQL_PORT).into(),
        Duration::from_millis(200),
    )
    .is_ok()
    {
        bail!(
            "something already listens on 127.0.0.1:{CQL_PORT} (another Cassandra?): stop it first"
        );
    }
    if std::env::var_os(PREBUILT_ENV).is_none() {
        packages()?;
    }
    let java = java()?;
    Ok((java, build_java()?))
}

/// One node from an empty disk: load, the traced run, the report. `prepare` first.
pub(crate) fn run_node(o: &Options, (java, jars): &(PathBuf, Java)) -> Result<RunOutput> {
    let started = Instant::now();
    let java = java.clone();
    let Java {
        server_cp,
        jamm,
        client_cp,
        test_cp,
    } = jars;

    std::fs::create_dir_all(&o.out)
        .with_context(|| format!("cannot create {}", o.out.display()))?;
    let out = o.out.canonicalize()?;
    let logs = out.join("cassandra-logs");
    #[expect(
        clippy::let_underscore_must_use,
        reason = "clears an earlier run's logs; there are none on a first run"
    )]
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;

    let mut s = Scratch::default();
    s.dir = std::env::temp_dir().join(format!("blkprof-cassandra-{}", std::process::id()));
    std::fs::create_dir_all(&s.dir)?;
    let slow = if o.in_vm { VM_SLOWDOWN } else { 1 };
    let mut labels = o.labels.clone();
    let dev = if let Some(n) = o.raid0.filter(|_| o.in_vm) {
        let members: Vec<String> = (0..n).map(|i| format!("/dev/nvme{i}n1")).collect();
        run(Command::new("mdadm")
            .args(["--create", "/dev/md0", "--level=0", "--run", "--force"])
            .arg(format!("--raid-devices={n}"))
            .arg(format!("--chunk={}", o.chunk_kb))
            .args(&members))?;
        s.md = Some("/dev/md0".into());
        for (k, v) in [("raid0", n), ("chunk_kb", o.chunk_kb)] {
            if !labels.iter().any(|l| l.starts_with(&format!("{k}="))) {
                labels.push(format!("{k}={v}"));
            }
        }
        eprintln!(
            "cassandra: /dev/md0: RAID0 of {}, chunk {} KB",
            members.join(" "),
            o.chunk_kb
        );
        "/dev/md0".to_string()
    } else {
        let dev = attach_loop(&s.dir.join("disk.img"), o.disk_gib)?;
        s.loopdev = Some(dev.clone());
        dev
    };
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-E", "nodiscard"])
        .arg(&dev))?;
    let mnt = s.dir.join("mnt");
    std::fs::create_dir_all(&mnt)?;
    run(Command::new("mount")
        .args(["-o", "discard"])
        .arg(&dev)
        .arg(&mnt))?;
    s.mounted = Some(mnt.clone());
    let devname = dev.trim_start_matches("/dev/").to_string();
    if let Some(kb) = o.read_ahead_kb {
        let f = format!("/sys/block/{devname}/queue/read_ahead_kb");
        std::fs::write(&f, kb.to_string()).with_context(|| format!("setting {f} to {kb}"))?;
        let got = std::fs::read_to_string(&f)?.trim().to_string();
        if got != kb.to_string() {
            bail!(
                "{f} reads {got} after writing {kb}: the kernel rounded it; pick a multiple of the page size in KB"
            );
        }
        eprintln!("cassandra: {devname} read_ahead_kb = {kb}");
    }
    eprintln!(
        "cassandra: {dev} ({} GiB, ext4 mounted with discard at {})",
        o.disk_gib,
        mnt.display()
    );

    let conf = s.dir.join("conf");
    std::fs::create_dir_all(&conf)?;
    std::fs::write(conf.join("cassandra.yaml"), cassandra_yaml(&mnt))?;
    std::fs::write(conf.join("logback.xml"), logback_xml(&logs))?;
    let workload = s.dir.join("workloada.properties");
    std::fs::write(&workload, WORKLOAD_A)?;

    // The node.
    let node_out = logs.join("cassandra.out");
    let mut node = Command::new(&java);
    node.args([
        "-Xms2G",
        "-Xmx2G",
        // The whole heap resident from the start: the node's memory stays flat, and the
        // cgroup limit set after the load leaves a known page cache.
        "-XX:+AlwaysPreTouch",
        "-Xss256k",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=300",
    ])
    .args(JVM17_FLAGS)
    .arg(format!("-javaagent:{jamm}"))
    .arg(format!(
        "-Dcassandra.config=file://{}",
        conf.join("cassandra.yaml").display()
    ))
    .arg(format!(
        "-Dlogback.configurationFile={}",
        conf.join("logback.xml").display()
    ))
    .arg(format!("-Dcassandra.logdir={}", logs.display()))
    .arg(format!("-Dcassandra.storagedir={}", mnt.display()))
    .args([
        "-Dcassandra-foreground=yes",
        "-Dcassandra.ring_delay_ms=1000",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Duser.timezone=UTC",
        "-cp",
    ])
    .arg(format!("{}:{server_cp}", conf.display()))
    .arg("org.apache.cassandra.service.CassandraDaemon")
    .stdout(std::fs::File::create(&node_out)?)
    .stderr(std::fs::File::create(logs.join("cassandra.err"))?)
    .stdin(Stdio::null());
    let t = Instant::now();
    let pid = s.spawn("cassandra", &mut node, Duration::from_secs(60))?;
    if o.page_cache_mib > 0 {
        s.cgroup = Cgroup::create(&format!("blkprof-cassandra-{}", std::process::id()));
        match &s.cgroup {
            Some(cg) => cg.add(pid)?,
            None => eprintln!(
                "cassandra: no memory cgroup here: the page cache is not limited, and reads will hit it once the data is cached"
            ),
        }
    }
    eprintln!("cassandra: node started (pid {pid}), waiting for CQL on 127.0.0.1:{CQL_PORT}");
    wait_for_cql(
        &mut s,
        &logs.join("system.log"),
        Duration::from_secs(180 * u64::from(slow)),
    )?;
    eprintln!("cassandra: CQL up after {:.0} s", t.elapsed().as_secs_f64());

    // The binding's own test, against this node.
    let it_out = out.join("binding-test.txt");
    let st = Command::new(&java)
        .args(["-Duser.timezone=UTC", "-cp", test_cp])
        .arg("-Dcql.host=127.0.0.1")
        .arg(format!("-Dcql.port={CQL_PORT}"))
        .arg(format!("-Dcql.timeout_ms={}", cql_timeout_ms(o)))
        .args(["org.junit.runner.JUnitCore", "blkprof.ycsb.CqlBindingIT"])
        .stdout(std::fs::File::create(&it_out)?)
        .stderr(Stdio::inherit())
        .process_group(0)
        .status()?;
    interrupted()?;
    if !st.success() {
        bail!(
            "the CQL binding's test against the node failed:\n{}",
            tail(&it_out, 40)
        );
    }
    eprintln!(
        "cassandra: binding test passed against the node ({})",
        it_out.display()
    );

    // Load.
    let t = Instant::now();
    eprintln!(
        "cassandra: loading {} YCSB records ({} threads)",
        o.records, o.threads
    );
    let mut load = ycsb(
        &java,
        client_cp,
        "-load",
        o,
        &workload,
        &[
            "cql.create_schema=true".into(),
            format!("operationcount={}", o.records),
            "status.interval=5".into(),
        ],
    );
    load.stdout(std::fs::File::create(out.join("ycsb-load.txt"))?)
        .stderr(std::fs::File::create(out.join("ycsb-load.err"))?);
    s.spawn("ycsb load", &mut load, Duration::from_secs(10))?;
    let st = wait_child(
        &mut s,
        "ycsb load",
        Duration::from_secs(1800 * u64::from(slow)),
    )?;
    if !st.success() {
        bail!(
            "YCSB load failed ({st}); the end of its output:\n{}",
            tail(&out.join("ycsb-load.err"), 20)
        );
    }
    eprintln!("cassandra: loaded in {:.0} s", t.elapsed().as_secs_f64());

    // Reads should reach the device: write back and drop the data files from the page cache.
    run(Command::new("sync").arg("-f").arg(&mnt))?;
    let (files, bytes) = evict(&mnt.join("data"))?;
    eprintln!(
        "cassandra: evicted {files} data files ({:.0} MiB) from the page cache",
        bytes as f64 / f64::from(1 << 20)
    );

    // A small page cache for the run, as on a node whose data set is larger than memory.
    if let Some(cg) = &s.cgroup {
        let anon = cg.anon();
        // Room for the JVM to grow a little (threads, metaspace, direct buffers) on top: it
        // grew by 12 MiB over a 2-minute run here.
        let limit = anon + (HEADROOM_MIB << 20) + (o.page_cache_mib << 20);
        cg.limit(limit)?;
        eprintln!(
            "cassandra: node memory {} MiB; cgroup limit {} MiB leaves about {} MiB of page cache",
            anon >> 20,
            limit >> 20,
            o.page_cache_mib + HEADROOM_MIB
        );
    }

    // Trace the run.
    let trace = out.join("cassandra.blkp");
    let trace_out = out.join("trace-summary.txt");
    let mut tracer = Command::new(root().join("target/release/blkprof-trace"));
    tracer
        // The files of each IO: SSTable components, the commit log, metadata.
        .args(["--device", &devname, "--files", "--quiet", "--output"])
        .arg(&trace)
        .args(labels.iter().flat_map(|l| ["--label", l.as_str()]))
        .stdout(std::fs::File::create(&trace_out)?)
        .stderr(Stdio::piped());
    s.spawn("blkprof-trace", &mut tracer, Duration::from_secs(30))?;
    wait_attached(&mut s)?;
    let t = Instant::now();
    eprintln!(
        "cassandra: tracing {devname}; YCSB workload A for {} s ({} threads)",
        o.duration, o.threads
    );
    let mut runc = ycsb(
        &java,
        client_cp,
        "-t",
        o,
        &workload,
        &[
            // Stopped by maxexecutiontime; YCSB runs nothing with operationcount=0.
            "operationcount=2000000000".into(),
            format!("maxexecutiontime={}", o.duration),
            "status.interval=1".into(),
        ],
    );
    runc.stdout(std::fs::File::create(out.join("ycsb-run.txt"))?)
        .stderr(std::fs::File::create(out.join("ycsb-run.err"))?);
    s.spawn("ycsb run", &mut runc, Duration::from_secs(10))?;
    let st = wait_child(
        &mut s,
        "ycsb run",
        Duration::from_secs(o.duration + 300 * u64::from(slow)),
    )?;
    if !st.success() {
        bail!(
            "YCSB run failed ({st}); the end of its output:\n{}",
            tail(&out.join("ycsb-run.err"), 20)
        );
    }
    sleep(Duration::from_secs(1))?;
    let st = s.stop("blkprof-trace");
    if !st.is_some_and(|st| st.success()) {
        bail!(
            "blkprof-trace did not end cleanly ({st:?}); see {}",
            trace_out.display()
        );
    }
    eprintln!(
        "cassandra: run phase traced for {:.0} s -> {}",
        t.elapsed().as_secs_f64(),
        trace.display()
    );

    if let Some(cg) = &s.cgroup {
        eprintln!(
            "cassandra: at the end of the run: node memory {} MiB, page cache {} MiB",
            cg.anon() >> 20,
            cg.page_cache() >> 20
        );
    }

    // Stop the node (SIGTERM drains it), then the report.
    let t = Instant::now();
    s.stop("cassandra");
    eprintln!(
        "cassandra: node stopped in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    drop(s);

    let r = report(&out)?;
    eprintln!(
        "cassandra: done in {:.0} s; report in {} (report.txt, report/)",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(r)
}

/// The report of a run in `out` (its trace, YCSB's output, the node's log): report.txt and
/// report/ (HTML, JSON, charts). Run again on a finished run after a change to the analyzer.
pub(crate) fn report(out: &Path) -> Result<RunOutput> {
    let trace = out.join("cassandra.blkp");
    let logs = out.join("cassandra-logs");
    let report_dir = out.join("report");
    let mut rep = Command::new(root().join("target/release/blkprof"));
    rep.arg("report")
        .arg(&trace)
        .arg("--stress")
        .arg(out.join("ycsb-run.txt"))
        .arg("--stress")
        .arg(out.join("ycsb-run.err"))
        .arg("--app-log")
        .arg(logs.join("system.log"))
        // Node and client run with -Duser.timezone=UTC, whatever the host's zone (which
        // the trace records and the report would otherwise read their logs in).
        .args(["--app-log-tz", "UTC", "--stress-tz", "UTC"])
        .arg("-o")
        .arg(&report_dir);
    let text = output(&mut rep)?;
    let report_txt = out.join("report.txt");
    std::fs::write(&report_txt, &text)?;
    // -o writes the JSON report beside the HTML, named after the trace.
    let report_json = report_dir.join("cassandra.json");
    Ok(RunOutput {
        report_json,
        report_txt,
    })
}

/// blkprof-trace says "tracing ..." on stderr once the probe is attached.
fn wait_attached(s: &mut Scratch) -> Result<()> {
    let c = s.child("blkprof-trace").context("tracer not running")?;
    let mut err = c.stderr.take().context("tracer stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut seen = String::new();
        let mut sent = false;
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            let chunk = String::from_utf8_lossy(&buf[..n]).into_owned();
            eprint!("{chunk}");
            seen.push_str(&chunk);
            if !sent && seen.contains("tracing ") {
                sent = true;
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "the receiver stops listening once it has given up waiting; then there is no one to tell"
                )]
                let _ = tx.send(());
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        interrupted()?;
        if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        let c = s.child("blkprof-trace").context("tracer not running")?;
        if let Some(st) = c.try_wait()? {
            bail!("blkprof-trace exited ({st}) before attaching (its messages are above)");
        }
        if Instant::now() > end {
            bail!("blkprof-trace did not attach within 60 s");
        }
    }
}
