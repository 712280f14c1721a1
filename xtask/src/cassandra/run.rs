//! One node from an empty disk, step by step: the data disk, the node, the binding's test
//! against it, the load, a small page cache, the traced run phase, the report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use super::node::{evict, start_node};
use super::scratch::Scratch;
use super::ycsb::{WORKLOAD_A, binding_test, load};
use super::{HEADROOM_MIB, Java, Options, RunOutput, VM_SLOWDOWN, report, trace};
use crate::util::{attach_loop, run};

/// What every step of a run reads.
pub(super) struct Run<'a> {
    pub(super) o: &'a Options,
    pub(super) java: &'a Path,
    pub(super) jars: &'a Java,
    /// --out, canonical: the trace, YCSB's output, the report.
    pub(super) out: PathBuf,
    /// The node's logs, in `out`.
    pub(super) logs: PathBuf,
    /// YCSB's workload file.
    pub(super) workload: PathBuf,
    /// The factor for the waits on the node and YCSB (the VM lab's emulated CPU is slower).
    pub(super) slow: u32,
}

/// One node from an empty disk: load, the traced run, the report. `prepare` first.
pub(crate) fn run_node(o: &Options, (java, jars): &(PathBuf, Java)) -> Result<RunOutput> {
    let started = Instant::now();
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
    let mut labels = o.labels.clone();
    let dev = data_device(o, &mut s, &mut labels)?;
    let mnt = mount(o, &mut s, &dev)?;
    let devname = dev.trim_start_matches("/dev/").to_string();

    let conf = s.dir.join("conf");
    std::fs::create_dir_all(&conf)?;
    std::fs::write(
        conf.join("cassandra.yaml"),
        super::node::cassandra_yaml(&mnt),
    )?;
    std::fs::write(conf.join("logback.xml"), super::node::logback_xml(&logs))?;
    let workload = s.dir.join("workloada.properties");
    std::fs::write(&workload, WORKLOAD_A)?;
    let r = Run {
        o,
        java,
        jars,
        out,
        logs,
        workload,
        slow: if o.in_vm { VM_SLOWDOWN } else { 1 },
    };

    start_node(&mut s, &r, &conf, &mnt)?;
    binding_test(&r)?;
    load(&mut s, &r)?;
    small_page_cache(&s, o, &mnt)?;
    trace::traced_run(&mut s, &r, &devname, &labels)?;

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

    let rep = report(&r.out)?;
    eprintln!(
        "cassandra: done in {:.0} s; report in {} (report.txt, report/)",
        started.elapsed().as_secs_f64(),
        r.out.display()
    );
    Ok(rep)
}

/// The node's data device: an md RAID0 of the VM lab's NVMe disks (labelled as such in the
/// trace), or a loop device over a sparse image in the scratch directory.
fn data_device(o: &Options, s: &mut Scratch, labels: &mut Vec<String>) -> Result<String> {
    if let Some(n) = o.raid0.filter(|_| o.in_vm) {
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
        Ok("/dev/md0".to_string())
    } else {
        let dev = attach_loop(&s.dir.join("disk.img"), o.disk_gib)?;
        s.loopdev = Some(dev.clone());
        Ok(dev)
    }
}

/// ext4 on `dev`, mounted with discard in the scratch directory, its read-ahead set if asked;
/// the mount point.
fn mount(o: &Options, s: &mut Scratch, dev: &str) -> Result<PathBuf> {
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-E", "nodiscard"])
        .arg(dev))?;
    let mnt = s.dir.join("mnt");
    std::fs::create_dir_all(&mnt)?;
    run(Command::new("mount")
        .args(["-o", "discard"])
        .arg(dev)
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
    Ok(mnt)
}

/// After the load: the data files out of the page cache, and the node's cgroup limited to a
/// small page cache for the run, as on a node whose data set is larger than memory.
fn small_page_cache(s: &Scratch, o: &Options, mnt: &Path) -> Result<()> {
    // Reads should reach the device: write back and drop the data files from the page cache.
    run(Command::new("sync").arg("-f").arg(mnt))?;
    let (files, bytes) = evict(&mnt.join("data"))?;
    eprintln!(
        "cassandra: evicted {files} data files ({:.0} MiB) from the page cache",
        bytes as f64 / f64::from(1 << 20)
    );
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
    Ok(())
}
