//! `cargo xtask cassandra`: the seeds' experiment for real. A Cassandra 5.0 node with its data
//! on a scratch loop device (ext4 mounted with `discard`), YCSB workload A against it through
//! the project's own CQL binding, blkprof-trace recording the device during the run phase, and
//! the report with YCSB's results and Cassandra's flush and compaction lines on one time axis.
//!
//! Everything it starts is stopped by pid, and the mount, loop device and scratch files are
//! removed, also when a step fails or on Ctrl-C / SIGTERM (children run in their own process
//! group, so a terminal's Ctrl-C reaches only this task, which then stops them in order).

mod cgroup;
mod java;
mod lab;
mod node;
mod report;
mod run;
mod scratch;
mod trace;
mod ycsb;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};

pub(crate) use java::Java;
pub(crate) use report::report;
pub(crate) use run::run_node;

use crate::util::{catch_signals, is_root};

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

/// Where one run left its results.
pub(crate) struct RunOutput {
    /// The run's JSON report (`report -o`), with YCSB's results and the node's log.
    pub report_json: PathBuf,
    /// The text report.
    pub report_txt: PathBuf,
}

pub(crate) fn cassandra(o: &Options) -> Result<()> {
    if o.raid0.is_some() && !o.in_vm {
        return lab::in_vm(o);
    }
    let java = prepare()?;
    let r = run_node(o, &java)?;
    println!("{}", std::fs::read_to_string(&r.report_txt)?);
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
        java::packages()?;
    }
    let jdk = java::java()?;
    Ok((jdk, java::build_java()?))
}

/// The last `lines` lines of a file (empty if it cannot be read), for an error message.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}
