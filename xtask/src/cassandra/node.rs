//! The Cassandra node: its configuration, its start, the wait for CQL, and the eviction of its
//! data files from the page cache.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::cgroup::Cgroup;
use super::java::JVM17_FLAGS;
use super::run::Run;
use super::scratch::Scratch;
use super::{CQL_PORT, STORAGE_PORT, tail};
use crate::util::interrupted;

/// The node's cassandra.yaml, every directory under `data`.
pub(super) fn cassandra_yaml(data: &Path) -> String {
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
pub(super) fn logback_xml(logdir: &Path) -> String {
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

/// Start the node with its configuration in `conf` and its data under `mnt`, in a memory
/// cgroup when the page cache is to be limited; wait until it answers CQL.
pub(super) fn start_node(s: &mut Scratch, r: &Run, conf: &Path, mnt: &Path) -> Result<()> {
    let node_out = r.logs.join("cassandra.out");
    let mut node = Command::new(r.java);
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
    .arg(format!("-javaagent:{}", r.jars.jamm))
    .arg(format!(
        "-Dcassandra.config=file://{}",
        conf.join("cassandra.yaml").display()
    ))
    .arg(format!(
        "-Dlogback.configurationFile={}",
        conf.join("logback.xml").display()
    ))
    .arg(format!("-Dcassandra.logdir={}", r.logs.display()))
    .arg(format!("-Dcassandra.storagedir={}", mnt.display()))
    .args([
        "-Dcassandra-foreground=yes",
        "-Dcassandra.ring_delay_ms=1000",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Duser.timezone=UTC",
        "-cp",
    ])
    .arg(format!("{}:{}", conf.display(), r.jars.server_cp))
    .arg("org.apache.cassandra.service.CassandraDaemon")
    .stdout(std::fs::File::create(&node_out)?)
    .stderr(std::fs::File::create(r.logs.join("cassandra.err"))?)
    .stdin(Stdio::null());
    let t = Instant::now();
    let pid = s.spawn("cassandra", &mut node, Duration::from_secs(60))?;
    if r.o.page_cache_mib > 0 {
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
        s,
        &r.logs.join("system.log"),
        Duration::from_secs(180 * u64::from(r.slow)),
    )?;
    eprintln!("cassandra: CQL up after {:.0} s", t.elapsed().as_secs_f64());
    Ok(())
}

/// Wait until the node answers on the CQL port; fails if it exits first, with its log's end.
pub(super) fn wait_for_cql(s: &mut Scratch, log: &Path, timeout: Duration) -> Result<()> {
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

/// Drop the data files from the page cache so that YCSB's reads reach the device.
pub(super) fn evict(dir: &Path) -> Result<(u64, u64)> {
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
