//! End-to-end tests on a device this machine does not have: an emulated NVMe disk in a nested
//! VM with a stock kernel. `cargo xtask test` runs them inside `cargo xtask vm` (xtask/src/vm.rs)
//! with `BLKPROF_VM_DISK` naming the disk, and `--ignored`: elsewhere they are ignored.

#![expect(
    unused_crate_dependencies,
    reason = "a test crate links all the package's dependencies; the lib target checks them"
)]

use std::collections::BTreeMap;

use blkprof_e2e::{
    TestDir, Trace, Tracer, assert_misses_are_skipped_runs, delta, fio, md_raid0, md_stop,
};
use tracer_common::format::{DeviceInfo, DiskStats, Ending};
use tracer_common::op::{Op, StatGroup, flags};

/// The NVMe disk to test; a run with `--ignored` outside the VM stage fails here, saying so.
fn disk() -> String {
    std::env::var("BLKPROF_VM_DISK")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| {
            panic!("BLKPROF_VM_DISK is not set: these run in `cargo xtask test`'s VM stage")
        })
}

/// "6.1.0-56-amd64" -> (6, 1).
fn kernel_version(release: &str) -> (u32, u32) {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn diskstats(name: &str) -> DiskStats {
    let s = std::fs::read_to_string("/proc/diskstats").unwrap();
    tracer_common::format::parse_diskstats(&s, 0)
        .into_values()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("{name} in /proc/diskstats"))
}

/// Random 4 KB reads and writes at a queue depth of 16, 128 KB sequential writes, trims and
/// fsync-driven flushes on the NVMe disk: every diskstats group equals the trace's records and
/// the probe's aggregates exactly, up to the misses the tracer reported (none expected).
#[test]
#[ignore = "needs the VM stage's emulated NVMe disks (BLKPROF_VM_DISK)"]
fn an_nvme_disk_is_traced_exactly() {
    let disk = disk();
    let path = format!("/dev/{disk}");
    let dir = TestDir::new();
    let out = dir.join("nvme.blkp").display().to_string();
    let t = Tracer::start(&["--device", &disk, "--output", &out, "--quiet"]);
    // Beside it, the aggregates-only mode: one program at the completion, with the kernel's
    // own stamps.
    let agg = Tracer::start(&["--device", &disk, "--no-records", "--quiet"]);
    let before = diskstats(&disk);
    let job = |args: &[&str]| {
        let mut a = vec!["--name=vm", "--filename", path.as_str(), "--direct=1"];
        a.extend_from_slice(args);
        fio(&a);
    };
    job(&[
        "--rw=randrw",
        "--rwmixread=70",
        "--bs=4k",
        "--ioengine=libaio",
        "--iodepth=16",
        "--runtime=4",
        "--time_based",
        "--size=256m",
    ]);
    job(&[
        "--rw=write",
        "--bs=128k",
        "--size=32m",
        "--ioengine=libaio",
        "--iodepth=4",
    ]);
    job(&["--rw=trim", "--bs=1m", "--size=64m", "--ioengine=sync"]);
    job(&[
        "--rw=write",
        "--bs=4k",
        "--size=2m",
        "--ioengine=sync",
        "--fsync=1",
    ]);
    let after = diskstats(&disk);
    let a = agg.stop();
    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    assert!(a.status.success(), "{}\n{}", a.stderr, a.stdout);
    // Its summary table: op, IOs, bytes, kernel IOs, kernel bytes (between its cuts): equal
    // for every op on a stock kernel, which reports every completion.
    let mut rows = 0;
    for l in a.stdout.lines() {
        let v: Vec<&str> = l.split_whitespace().collect();
        if v.len() == 6 && ["read", "write", "discard", "flush"].contains(&v[0]) {
            let n = |i: usize| v[i].replace(',', "").parse::<u64>().unwrap();
            assert_eq!(
                (n(1), n(2)),
                (n(3), n(4)),
                "--no-records {}: {l}\n{}",
                v[0],
                a.stdout
            );
            rows += 1;
        }
    }
    assert_eq!(rows, 4, "{}", a.stdout);
    assert!(
        a.stdout.contains("records: none (--no-records"),
        "{}",
        a.stdout
    );
    eprintln!("--no-records beside it:\n{}", a.stdout);
    let trace = Trace::read(std::path::Path::new(&out));
    assert_eq!(trace.ending, Ending::Complete);
    let tr = trace.trailer.as_ref().expect("trailer");
    let misses = assert_misses_are_skipped_runs(&trace, &disk);
    let cov = tracer_common::coverage::coverage(&trace.header, tr);
    let d = cov
        .iter()
        .find(|d| d.name == disk)
        .expect("coverage of the disk");
    let groups = trace.groups();
    let own: BTreeMap<StatGroup, (u64, u64)> = delta(&before, &after);
    for g in &d.groups {
        let grp = g.group.unwrap();
        let rec = groups.get(&grp).copied().unwrap_or((0, 0));
        assert_eq!(
            rec,
            (g.aggregate_ios, g.aggregate_bytes),
            "{grp:?}: records vs aggregates"
        );
        assert_eq!(g.unaccounted(misses), 0, "{grp:?}: {g:?}, misses {misses}");
        assert_eq!(
            g.excess(),
            0,
            "{grp:?}: counted more than the kernel: {g:?}"
        );
        // Nothing else uses the disk: the test's own diskstats around the jobs agree.
        let kernel = own.get(&grp).copied().unwrap_or((0, 0));
        assert!(
            kernel.0 <= g.kernel_ios,
            "{grp:?}: the jobs' {} IOs within the run's {}",
            kernel.0,
            g.kernel_ios
        );
    }
    let ios = |g: StatGroup| groups.get(&g).map_or(0, |x| x.0);
    assert!(
        ios(StatGroup::Read) > 1000,
        "reads: {}",
        ios(StatGroup::Read)
    );
    assert!(
        ios(StatGroup::Write) > 500,
        "writes: {}",
        ios(StatGroup::Write)
    );
    assert!(
        ios(StatGroup::Discard) >= 64,
        "trims: {}",
        ios(StatGroup::Discard)
    );
    let flushes = trace
        .records
        .iter()
        .filter(|r| r.op == Op::Flush && r.flags & flags::FLUSH_RQ != 0)
        .count();
    assert!(flushes >= 256, "a device flush per fsync: {flushes}");
    // The submission hook the kernel offers: block_io_start from 6.5, else the block_getrq
    // fallback; either way every request names fio, which submitted them all.
    let (major, minor) = kernel_version(&trace.header.kernel);
    let hook = if (major, minor) >= (6, 5) {
        "block_io_start"
    } else {
        "block_getrq"
    };
    assert_eq!(trace.header.submit_hook, hook, "{}", trace.header.kernel);
    let subs = trace.submissions("fio");
    assert_eq!(subs.unseen, 0, "every submission seen");
    assert!(
        subs.others.is_empty(),
        "submitted by fio: {:?}",
        subs.others
    );
    eprintln!(
        "{disk} on {}: {} records, {misses} reported misses",
        trace.header.kernel,
        trace.records.len()
    );
}

/// Before 5.11 the kernel charges BPF maps to `RLIMIT_MEMLOCK`. Run as root without
/// `CAP_SYS_RESOURCE` under a 64 KiB limit (a unit without `LimitMEMLOCK=`, say), the tracer
/// cannot raise it: on 5.10 it fails and says what to set; from 5.11, where maps are charged
/// to the memory cgroup instead, it runs.
#[test]
#[ignore = "needs the VM stage's stock kernels (BLKPROF_VM_DISK)"]
fn a_locked_memory_limit_is_raised_or_named() {
    let disk = disk();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let o = std::process::Command::new("setpriv")
        .args([
            "--inh-caps=-sys_resource",
            "--bounding-set=-sys_resource",
            "sh",
            "-c",
            "ulimit -l 64 && exec \"$0\" \"$@\"",
        ])
        .arg(blkprof_e2e::bin("blkprof-trace"))
        .args(["--device", &disk, "--duration", "1s", "--quiet"])
        .output()
        .expect("run blkprof-trace under setpriv");
    let stderr = String::from_utf8_lossy(&o.stderr);
    if kernel_version(&release) < (5, 11) {
        assert!(
            !o.status.success(),
            "{release}: a 64 KiB limit holds no maps: {stderr}"
        );
        assert!(
            stderr.contains("locked-memory limit is 65536 bytes")
                && stderr.contains("LimitMEMLOCK=infinity"),
            "{release}: names the limit and what to set: {stderr}"
        );
    } else {
        assert!(
            o.status.success(),
            "{release}: maps are not charged to the limit: {stderr}"
        );
    }
}

/// md RAID0 of four NVMe disks, chunk 64 KB and 512 KB: `--device md0` says md0 has no request
/// events and traces its members, and each member's IOs equal its own /proc/diskstats exactly
/// (seed 000's experiment runs on this).
#[test]
#[ignore = "needs the VM stage's emulated NVMe disks (BLKPROF_VM_DISK)"]
fn md_raid0_members_are_traced_exactly() {
    // The members are the VM's first four NVMe disks; outside it, fail saying where it runs.
    disk();
    let members: Vec<String> = (0..4).map(|i| format!("nvme{i}n1")).collect();
    if !members
        .iter()
        .all(|m| std::path::Path::new("/sys/block").join(m).exists())
    {
        panic!("the VM has fewer than 4 NVMe disks (cargo xtask vm --disks 4)");
    }
    let dir = TestDir::new();
    for chunk_kb in [64u32, 512] {
        md_raid0(&members, chunk_kb.into());
        let out = dir.join(format!("md{chunk_kb}.blkp")).display().to_string();
        let t = Tracer::start(&["--device", "md0", "--output", &out, "--quiet"]);
        let base = |args: &[&str]| {
            let mut a = vec!["--name=md", "--filename=/dev/md0", "--direct=1"];
            a.extend_from_slice(args);
            fio(&a);
        };
        base(&[
            "--rw=randread",
            "--bs=4k",
            "--ioengine=libaio",
            "--iodepth=16",
            // A count, not a time: the spread check below must not depend on how fast the
            // emulated guest runs (3 s gave 19,795 reads once and 756 another time).
            "--number_ios=4000",
            "--size=256m",
        ]);
        base(&[
            "--rw=write",
            "--bs=1m",
            "--size=64m",
            "--ioengine=libaio",
            "--iodepth=4",
        ]);
        let f = t.stop();
        md_stop();
        assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
        assert!(
            f.stderr.contains(
                "md0 is bio-based (md RAID): it has no request events; tracing its members"
            ),
            "{}",
            f.stderr
        );
        let trace = Trace::read(std::path::Path::new(&out));
        let tr = trace.trailer.as_ref().expect("trailer");
        let misses = assert_misses_are_skipped_runs(&trace, &format!("md0 chunk {chunk_kb} KB"));
        let cov = tracer_common::coverage::coverage(&trace.header, tr);
        let mut per_member = Vec::new();
        for m in &members {
            let d = cov
                .iter()
                .find(|d| &d.name == m)
                .unwrap_or_else(|| panic!("chunk {chunk_kb} KB: no coverage of member {m}"));
            let mut ios = 0;
            for g in &d.groups {
                assert_eq!(
                    g.unaccounted(misses),
                    0,
                    "chunk {chunk_kb} KB, {m} {:?}: {g:?}",
                    g.group
                );
                assert_eq!(
                    g.excess(),
                    0,
                    "chunk {chunk_kb} KB, {m} {:?}: {g:?}",
                    g.group
                );
                ios += g.aggregate_ios;
            }
            // The records of the member, too.
            let dev = trace
                .header
                .devices
                .iter()
                .find(|x| &x.name == m)
                .map(DeviceInfo::dev);
            let rec = trace.records.iter().filter(|r| Some(r.dev) == dev).count() as u64;
            assert_eq!(rec, ios, "chunk {chunk_kb} KB, {m}: records vs aggregates");
            per_member.push(ios);
        }
        // A stripe spreads random reads over every member.
        assert!(
            per_member.iter().all(|&n| n > 200),
            "chunk {chunk_kb} KB: IOs per member {per_member:?}"
        );
        // md splits a 1 MB write (stripe-aligned) into chunks; the chunks one member gets are
        // contiguous on it, and a member's queue may merge them (6.1 does, 6.12 did not here):
        // at most ceil(1 MB / (4 chunks)) chunks per member request.
        let chunk = chunk_kb * 1024;
        let most = (1u32 << 20).div_ceil(4 * chunk) * chunk;
        let biggest = trace
            .records
            .iter()
            .filter(|r| r.op == Op::Write)
            .map(|r| r.bytes)
            .max()
            .unwrap_or(0);
        assert!(
            biggest <= most,
            "chunk {chunk_kb} KB: a member write of {biggest} bytes (at most {most})"
        );
        // The header records the layout, and the report groups the members by it.
        let arr = trace
            .header
            .arrays
            .iter()
            .find(|a| a.name == "md0")
            .expect("md0's layout in the header");
        assert_eq!(
            (arr.level.as_str(), arr.chunk_bytes),
            ("raid0", u64::from(chunk_kb) * 1024)
        );
        let mut listed: Vec<&str> = arr.members.iter().map(|m| m.disk.as_str()).collect();
        listed.sort_unstable();
        assert_eq!(
            listed,
            members.iter().map(String::as_str).collect::<Vec<_>>()
        );
        let report = std::process::Command::new(blkprof_e2e::bin("blkprof"))
            .args(["report", "--json", &out])
            .output()
            .unwrap();
        assert!(report.status.success());
        let j: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
        let a = &j["sections"]["arrays"]["arrays"][0];
        assert_eq!(a["name"], "md0");
        assert_eq!(a["ios"].as_u64(), Some(per_member.iter().sum::<u64>()));
        eprintln!(
            "md0 RAID0 chunk {chunk_kb} KB on {}: IOs per member {per_member:?}, {misses} reported misses; busiest member {:.2}x the mean",
            trace.header.kernel,
            a["imbalance_ios"].as_f64().unwrap_or(0.0)
        );
    }
}

/// The online CPUs, from /sys/devices/system/cpu/online ("0-1").
fn online_cpus() -> Vec<u32> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut cpus = Vec::new();
    for part in s.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// NVMe hardware queues: the driver makes one queue per CPU (the VM's CPU count predicts how
/// many), the header records each queue's CPUs as sysfs lists them, and every request goes
/// through the queue of the CPU that submitted it: 4 KB reads from a fio pinned to the first
/// CPU and 8 KB writes from one pinned to the last are each on their CPU's queue, every one of
/// them, and the report's per-queue section counts what the records say.
#[test]
#[ignore = "needs the VM stage's emulated NVMe disks (BLKPROF_VM_DISK)"]
fn nvme_requests_take_the_hardware_queue_of_their_cpu() {
    let disk = disk();
    let path = format!("/dev/{disk}");
    let cpus = online_cpus();
    let mut sysfs: Vec<(u16, String)> = std::fs::read_dir(format!("/sys/block/{disk}/mq"))
        .unwrap()
        .flatten()
        .map(|e| {
            let i = e.file_name().to_str().unwrap().parse().unwrap();
            let l = std::fs::read_to_string(e.path().join("cpu_list")).unwrap();
            (i, l.trim().to_string())
        })
        .collect();
    sysfs.sort();
    assert!(cpus.len() >= 2, "the VM has several CPUs: {cpus:?}");
    assert_eq!(
        sysfs.len(),
        cpus.len(),
        "one hardware queue per CPU: {sysfs:?} for CPUs {cpus:?}"
    );
    let dir = TestDir::new();
    let out = dir.join("hwq.blkp").display().to_string();
    let t = Tracer::start(&["--device", &disk, "--output", &out, "--quiet"]);
    let (first, last) = (cpus[0], *cpus.last().unwrap());
    for (cpu, rw, bs) in [(first, "randread", "4k"), (last, "randwrite", "8k")] {
        fio(&[
            "--name=hwq",
            "--filename",
            path.as_str(),
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
            "--size=256m",
            "--io_size=24m",
            &format!("--rw={rw}"),
            &format!("--bs={bs}"),
            &format!("--cpus_allowed={cpu}"),
        ]);
    }
    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    let trace = Trace::read(std::path::Path::new(&out));
    // The header: each queue with its CPUs, as sysfs lists them.
    let info = trace
        .header
        .devices
        .iter()
        .find(|d| d.name == disk)
        .expect("the disk in the header");
    let queues = &info.queue.as_ref().expect("queue settings").hw_queues;
    let from_header: Vec<(u16, Vec<u32>)> =
        queues.iter().map(|q| (q.index, q.cpus.clone())).collect();
    let from_sysfs: Vec<(u16, Vec<u32>)> = sysfs
        .iter()
        .map(|(i, l)| {
            (
                *i,
                l.split(',').map(|c| c.trim().parse().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(from_header, from_sysfs);
    let queue_of = |cpu: u32| {
        queues.iter().find(|q| q.cpus.contains(&cpu)).map_or_else(
            || panic!("CPU {cpu} in no queue: {from_header:?}"),
            |q| q.index,
        )
    };
    let (qa, qb) = (queue_of(first), queue_of(last));
    assert_ne!(qa, qb, "the two CPUs have queues of their own");
    // Every request of each job on its CPU's queue.
    let mut per_queue: BTreeMap<u16, u64> = BTreeMap::new();
    let (mut reads, mut writes) = (0u64, 0u64);
    for r in &trace.records {
        let q = r
            .hw_queue
            .expect("every NVMe request names its hardware queue");
        *per_queue.entry(q).or_default() += 1;
        match (r.op, r.bytes) {
            (Op::Read, 4096) => {
                reads += 1;
                assert_eq!(q, qa, "a read from CPU {first} on queue {q}: {r:?}");
            }
            (Op::Write, 8192) => {
                writes += 1;
                assert_eq!(q, qb, "a write from CPU {last} on queue {q}: {r:?}");
            }
            _ => {}
        }
    }
    assert_eq!(
        (reads, writes),
        (6144, 3072),
        "every IO of both jobs traced; the tracer's end summary (what it lost, and how):\n{}\n{}",
        f.stdout,
        f.stderr
    );
    // The report's section counts the same per queue.
    let report = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["report", "--json", &out])
        .output()
        .unwrap();
    assert!(report.status.success());
    let j: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let d = j["sections"]["hw_queues"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == disk.as_str())
        .expect("the disk in the hw_queues section");
    assert_eq!(d["queues"], sysfs.len());
    let rows: BTreeMap<u16, u64> = d["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ios"].as_u64().unwrap() > 0)
        .map(|r| {
            (
                u16::try_from(r["index"].as_u64().unwrap()).unwrap(),
                r["ios"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, per_queue);
    let text = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["report", &out])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "hardware queues of {disk}: {} hardware queues",
            sysfs.len()
        )),
        "{text}"
    );
    eprintln!(
        "{disk} on {} with CPUs {cpus:?}: queues {from_header:?}; IOs per queue {per_queue:?}",
        trace.header.kernel
    );
}

/// A cgroup below the unified hierarchy's root, removed on drop.
struct VmCgroup {
    dir: std::path::PathBuf,
    rel: String,
}

impl VmCgroup {
    fn new(root: &std::path::Path, name: &str) -> VmCgroup {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        VmCgroup {
            dir,
            rel: format!("/{name}"),
        }
    }

    /// `cmd` run by a shell that first moves itself into this cgroup.
    fn sh(&self, cmd: &str) {
        blkprof_e2e::sh(&format!(
            "echo $$ > {}/cgroup.procs && {cmd}",
            self.dir.display()
        ));
    }
}

impl Drop for VmCgroup {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Buffered writes dirtied by processes in two cgroups are written back later by the kernel's
/// flusher threads (kworkers, in the root cgroup): with the io and memory controllers on the
/// unified hierarchy (a stock kernel's default), each record names the cgroup the kernel
/// charged it to, and every written-back byte of each file is charged to the cgroup that
/// dirtied it, not to the kworker's. Direct IO is charged to its submitter's own cgroup.
#[test]
#[ignore = "needs the VM stage's emulated NVMe disks (BLKPROF_VM_DISK)"]
fn writeback_is_charged_to_the_cgroup_that_dirtied_the_pages() {
    let disk = disk();
    let root = tracer_common::cgroup::cgroup2_mount().expect("cgroup2 mounted in the VM");
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap();
    assert!(
        controllers.contains("io") && controllers.contains("memory"),
        "the VM's unified hierarchy has the io and memory controllers: {controllers}"
    );
    std::fs::write(root.join("cgroup.subtree_control"), "+io +memory").unwrap();
    let dir = TestDir::new();
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    blkprof_e2e::sh(&format!(
        "mkfs.ext4 -q -F /dev/{disk} && mount /dev/{disk} {}",
        mnt.display()
    ));
    let a = VmCgroup::new(&root, "blkprof-wb-a");
    let b = VmCgroup::new(&root, "blkprof-wb-b");
    let out = dir.join("wb.blkp");
    let t = Tracer::start(&[
        "--device",
        &disk,
        "--output",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    // Dirty pages only (no sync in the writers), 24 MiB from A and 8 MiB from B; then a direct
    // write from A; then the flusher writes everything back, asked by `sync` from this test's
    // own (root) cgroup.
    let mb = |n: u64| n << 20;
    a.sh(&format!(
        "dd if=/dev/zero of={}/a bs=1M count=24 status=none",
        mnt.display()
    ));
    b.sh(&format!(
        "dd if=/dev/zero of={}/b bs=1M count=8 status=none",
        mnt.display()
    ));
    a.sh(&format!(
        "dd if=/dev/zero of={}/direct bs=64k count=32 oflag=direct status=none",
        mnt.display()
    ));
    blkprof_e2e::sh("sync");
    let f = t.stop();
    blkprof_e2e::sh(&format!("umount {}", mnt.display()));
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    let trace = Trace::read(&out);
    let owners = trace.header.owner_cgroups.clone().expect("header says");
    assert!(owners.tracked && owners.writeback, "{owners:?}");
    let id_of = |rel: &str| {
        trace
            .cgroups
            .iter()
            .find(|(_, p)| p.as_str() == rel)
            .map_or_else(
                || panic!("{rel} named in the trace: {:?}", trace.cgroups),
                |(id, _)| *id,
            )
    };
    let (ia, ib) = (id_of(&a.rel), id_of(&b.rel));
    // Per owner: (bytes written by dd itself, bytes written by others: the flusher).
    let mut by_owner: BTreeMap<u64, (u64, u64, BTreeMap<String, u64>)> = BTreeMap::new();
    for r in trace.records.iter().filter(|r| r.op == Op::Write) {
        let e = by_owner.entry(r.owner_cgroup).or_default();
        let comm = trace.comm(r);
        if comm == "dd" {
            e.0 += u64::from(r.bytes);
        } else {
            e.1 += u64::from(r.bytes);
            *e.2.entry(comm.split('/').next().unwrap_or(comm).to_string())
                .or_default() += u64::from(r.bytes);
        }
        if comm == "dd" {
            assert_eq!(
                r.cgroup, r.owner_cgroup,
                "dd's own IO is charged to its own cgroup"
            );
        }
    }
    eprintln!(
        "writes by owner cgroup: {by_owner:?}\ncgroups: {:?}",
        trace.cgroups
    );
    let (a_dd, a_wb, a_who) = by_owner.get(&ia).cloned().unwrap_or_default();
    let (b_dd, b_wb, b_who) = by_owner.get(&ib).cloned().unwrap_or_default();
    assert_eq!(a_dd, mb(2), "A's direct writes, submitted by dd");
    assert!(
        a_wb >= mb(24) && a_wb < mb(25),
        "A's 24 MiB written back, charged to A: {a_wb} by {a_who:?}"
    );
    assert!(
        b_wb >= mb(8) && b_wb < mb(9),
        "B's 8 MiB written back, charged to B: {b_wb} by {b_who:?}"
    );
    assert_eq!(b_dd, 0, "B wrote nothing itself");
    // The report charges them there, and says how.
    let report = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("cgroups (as the block layer charges them (v2): written-back pages to the cgroup that dirtied them):"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains(&a.rel) && l.contains("submitted for it by other cgroups"))
        .unwrap_or_else(|| panic!("A's row says what was written back for it: {text}"));
    assert!(
        line.contains("25.2 MB"),
        "24 MiB written back for A: {line}"
    );
    eprintln!("{line}");
    // The flusher is not in A or B: the kworker's own cgroup is the root.
    for r in trace.records.iter().filter(|r| {
        r.op == Op::Write && (r.owner_cgroup == ia || r.owner_cgroup == ib) && trace.comm(r) != "dd"
    }) {
        assert_ne!(r.cgroup, r.owner_cgroup, "{r:?} by {}", trace.comm(r));
    }
}
