//! End-to-end tests on a device this machine does not have: an emulated NVMe disk in a nested
//! VM with a stock kernel. `cargo xtask test` runs them inside `cargo xtask vm` (xtask/src/vm.rs)
//! with BLKPROF_VM_DISK naming the disk; without it (on the host) they are skipped, said so.

use std::collections::BTreeMap;

use blkprof_e2e::{TestDir, Trace, Tracer, delta, fio};
use tracer_common::format::{DiskStats, Ending};
use tracer_common::op::{Op, StatGroup, flags};

fn disk() -> Option<String> {
    let d = std::env::var("BLKPROF_VM_DISK")
        .ok()
        .filter(|d| !d.is_empty());
    if d.is_none() {
        eprintln!("skipped: BLKPROF_VM_DISK is not set (these run in `cargo xtask test`'s VM)");
    }
    d
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
fn an_nvme_disk_is_traced_exactly() {
    let Some(disk) = disk() else { return };
    let path = format!("/dev/{disk}");
    let dir = TestDir::new();
    let out = dir.join("nvme.blkp").display().to_string();
    let t = Tracer::start(&["--device", &disk, "--output", &out, "--quiet"]);
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
    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    let trace = Trace::read(std::path::Path::new(&out));
    assert_eq!(trace.ending, Ending::Complete);
    let tr = trace.trailer.as_ref().expect("trailer");
    let misses = tr.counters_end.reported_misses();
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
    eprintln!(
        "{disk} on {}: {} records, {misses} reported misses",
        trace.header.kernel,
        trace.records.len()
    );
}
