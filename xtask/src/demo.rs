//! `cargo xtask demo`: trace a built-in Cassandra-shaped workload and print the report.
//!
//! The workload (fio, on a scratch loop device with `O_DIRECT` backing): 4 KB random reads all
//! along, like a Cassandra read path; 512 KB sequential writes in bursts, like memtable
//! flushes; 2 MB trims every few seconds, like compaction deleting SSTables.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::util::{attach_loop, build_release, is_root, root, run};

const JOB: &str = "\
[global]
ioengine=libaio
direct=1
time_based
group_reporting=0

[reads]
rw=randread
bs=4k
iodepth=8
rate_iops=3000

[flush-bursts]
rw=write
bs=512k
iodepth=32
thinktime=4s
thinktime_blocks=400

[compaction-trims]
rw=randtrim
bs=2m
iodepth=1
thinktime=3s
thinktime_blocks=16
";

pub(crate) fn demo(seconds: u64, keep: Option<PathBuf>) -> Result<()> {
    if !is_root() {
        bail!(
            "the demo loads eBPF programs and creates a loop device: run `cargo xtask demo` as root"
        );
    }
    build_release()?;
    let dir = std::env::temp_dir().join(format!("blkprof-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let dev = attach_loop(&dir.join("disk.img"), 4)?;
    let result = demo_on(&dev, &dir, seconds, keep);
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup; the demo's own result is what is returned"
    )]
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    #[expect(clippy::let_underscore_must_use, reason = "as above")]
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn demo_on(dev: &str, dir: &std::path::Path, seconds: u64, keep: Option<PathBuf>) -> Result<()> {
    let name = dev.trim_start_matches("/dev/");
    let trace = keep.unwrap_or_else(|| dir.join("demo.blkp"));
    let job = dir.join("cassandra-shaped.fio");
    std::fs::write(&job, JOB)?;
    eprintln!(
        "demo: tracing {dev} for {seconds} s under a Cassandra-shaped fio workload (4 KB random reads, 512 KB write bursts, 2 MB trims)"
    );
    let mut tracer = Command::new(root().join("target/release/blkprof-trace"))
        .args([
            "--device",
            name,
            "--duration",
            &format!("{}s", seconds + 1),
            "--output",
        ])
        .arg(&trace)
        .spawn()
        .context("starting blkprof-trace")?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let fio = Command::new("fio")
        .arg(format!("--filename={dev}"))
        .arg(format!("--runtime={seconds}"))
        .arg(&job)
        .stdout(Stdio::null())
        .status()
        .context("running fio")?;
    let status = tracer.wait()?;
    if !fio.success() || !status.success() {
        bail!("the demo workload failed (fio {fio}, blkprof-trace {status})");
    }
    println!();
    run(Command::new(root().join("target/release/blkprof"))
        .arg("report")
        .arg(&trace))?;
    Ok(())
}
