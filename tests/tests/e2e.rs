//! Root end-to-end tests: the real probe on real loop devices under real fio, checked against
//! the kernel's own /proc/diskstats. Each test uses its own scratch device.
//! Run with `cargo xtask test` (as root).

use std::collections::BTreeMap;
use std::time::Duration;

use analyzer::numeric::f64_to_usize_saturating;
use blkprof_e2e::{
    FioGroup, FtraceBlk, Scratch, TestDir, Trace, Tracer, WriteOnDrop, assert_cut_exact,
    assert_misses_are_skipped_runs, blk_action, delta, fio, fio_iolog, quantile, sh,
};
use tracer_common::format::{Ending, IoRecord};
use tracer_common::op::{Op, StatGroup, flags};

fn out_path(dir: &TestDir, tag: &str) -> String {
    dir.join(format!("{tag}.blkp")).display().to_string()
}

/// Trace `work` on `dev` into `TAG.blkp`; return the trace, the test's own diskstats delta
/// around `work`, and the tracer's summary.
fn traced(
    dir: &TestDir,
    tag: &str,
    dev: &Scratch,
    extra: &[&str],
    work: impl FnOnce(),
) -> (Trace, BTreeMap<StatGroup, (u64, u64)>, String) {
    let t = blkprof_e2e::traced(dev, &dir.join(format!("{tag}.blkp")), extra, &[], work);
    (t.trace, t.own, t.stdout)
}

/// [`blkprof_e2e::assert_exact`] on the scratch device.
fn assert_exact(trace: &Trace, dev: &Scratch, own: &BTreeMap<StatGroup, (u64, u64)>) -> u64 {
    blkprof_e2e::assert_exact(trace, &dev.name, own)
}

/// [`blkprof_e2e::assert_exact_but_misses`] on the scratch device.
fn assert_exact_but_misses(
    trace: &Trace,
    dev: &Scratch,
    own: &BTreeMap<StatGroup, (u64, u64)>,
) -> (u64, u64) {
    blkprof_e2e::assert_exact_but_misses(trace, &dev.name, own)
}

fn sizes(trace: &Trace, op: Op) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for r in trace.records.iter().filter(|r| r.op == op) {
        *m.entry(r.bytes).or_default() += 1;
    }
    m
}

#[test]
fn random_4k_reads_match_diskstats_and_fio() {
    let stdout = random_4k_reads_are_exact(&[]);
    // From 6.5 (block_io_start) the records come as half records joined in the daemon.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    assert_eq!(
        stdout.contains("half records: "),
        (major, minor) >= (6, 5),
        "kernel {release}: {stdout}"
    );
}

/// The in-kernel join (`--whole-records`, what kernels before 6.5 run with their own start
/// hook) stays exact on kernels that default to half records.
#[test]
fn the_in_kernel_join_is_exact_too() {
    let stdout = random_4k_reads_are_exact(&["--whole-records"]);
    assert!(!stdout.contains("half records: "), "{stdout}");
}

/// fio's random 4 KB reads, traced with `extra` options: exact against /proc/diskstats and
/// fio, each with its submitter and hardware queue. Returns the tracer's summary.
fn random_4k_reads_are_exact(extra: &[&str]) -> String {
    let dir = TestDir::new();
    let dev = Scratch::new("rr", 1024, true, false);
    dev.set_nomerges(2);
    let mut job = serde_json::Value::Null;
    let (trace, own, stdout) = traced(&dir, "rr", &dev, extra, || {
        job = fio(&[
            "--name=rr",
            &format!("--filename={}", dev.path),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=16",
            "--runtime=3",
            "--time_based",
        ]);
    });
    let misses = assert_exact(&trace, &dev, &own);
    let fio_reads = job["jobs"][0]["read"]["total_ios"].as_u64().unwrap();
    let reads = sizes(&trace, Op::Read);
    let traced_reads = reads.get(&4096).copied().unwrap_or(0);
    assert_eq!(reads.len(), 1, "only 4 KB requests: {reads:?}");
    assert!(
        traced_reads <= fio_reads && traced_reads + misses >= fio_reads,
        "every fio read is one 4 KB request: traced {traced_reads} (+{misses} reported misses) vs fio {fio_reads}"
    );
    assert!(fio_reads > 1000);
    assert!(stdout.contains("coverage: read"), "{stdout}");
    // The summary says how many were lost, and why. Skipped runs may be another device's (in
    // a VM, the loop device's backing file lives on a traced-by-nobody NVMe disk whose
    // completions nest in the loop device's): they are counted for every device.
    let c = &trace.trailer.as_ref().unwrap().counters_end;
    if traced_reads == fio_reads {
        assert!(stdout.contains("100.000%"), "{stdout}");
    } else {
        assert!(
            stdout.contains(&format!(
                "{} completions not seen by the probe, {} program runs skipped",
                c.missed_completions,
                c.recursion_misses()
            )),
            "{stdout}"
        );
    }
    // Submission times are this request's own (the kernel's stamp read at block_io_start is
    // set at allocation): a stale one would show as seconds of queueing.
    let slowest = trace.records.iter().map(IoRecord::total_ns).max().unwrap();
    assert!(slowest < 1_000_000_000, "slowest 4 KB read: {slowest} ns");
    // Submitter is fio, taken at submission.
    let fio_pids: std::collections::BTreeSet<u32> = trace.records.iter().map(|r| r.pid).collect();
    assert!(!fio_pids.contains(&0));
    // A loop device has one hardware queue, serving every CPU: the header says so and every
    // request names it (the VM test spreads NVMe requests over queues per CPU).
    let queues = &trace.header.devices[0].queue.as_ref().unwrap().hw_queues;
    assert_eq!(queues.len(), 1, "{queues:?}");
    assert_eq!(queues[0].index, 0);
    assert!(queues[0].cpus.contains(&0), "{queues:?}");
    assert!(trace.records.iter().all(|r| r.hw_queue == Some(0)));
    stdout
}

/// A device with kernel accounting off (`queue/iostats` = 0, a common NVMe tuning): /proc/diskstats
/// counts nothing, yet every IO is traced, marked as not accounted, and both the tracer and the
/// report say that the kernel's counters cannot be compared, instead of showing an empty check.
#[test]
fn a_device_with_iostats_off_is_traced_and_said_to_be_unaccounted() {
    let dir = TestDir::new();
    let dev = Scratch::new("nostat", 256, true, false);
    dev.set_nomerges(2);
    let _restore = WriteOnDrop::new(format!("/sys/block/{}/queue/iostats", dev.name), "1");
    std::fs::write(format!("/sys/block/{}/queue/iostats", dev.name), "0").expect("iostats");
    let (trace, own, stdout) = traced(&dir, "nostat", &dev, &[], || {
        fio(&[
            "--name=nostat",
            &format!("--filename={}", dev.path),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
            "--number_ios=3000",
        ]);
    });
    assert_eq!(
        own.get(&StatGroup::Read).copied().unwrap_or((0, 0)),
        (0, 0),
        "the kernel counts nothing with iostats off"
    );
    let misses = assert_misses_are_skipped_runs(&trace, "iostats off");
    let reads: Vec<_> = trace.records.iter().filter(|r| r.op == Op::Read).collect();
    assert!(
        reads.len() as u64 <= 3000 && reads.len() as u64 + misses >= 3000,
        "fio's 3,000 reads are traced: {} (+{misses} reported misses)",
        reads.len()
    );
    assert!(
        reads
            .iter()
            .all(|r| r.flags & flags::NOT_ACCOUNTED != 0 && r.bytes == 4096)
    );
    // Queue and device times are the probe's own: the kernel leaves rq->start_time_ns stale on
    // requests it does not account.
    let slowest = reads.iter().map(|r| r.total_ns()).max().unwrap();
    assert!(
        slowest < 1_000_000_000,
        "total latency of a 4 KB read on a loop device: {slowest} ns"
    );
    assert!(
        stdout.contains("read: kernel accounting is off (queue/iostats = 0)"),
        "{stdout}"
    );
    let t = trace.trailer.as_ref().unwrap();
    let cov = tracer_common::coverage::coverage(&trace.header, t);
    let g = &cov.iter().find(|d| d.name == dev.name).unwrap().groups[0];
    assert_eq!((g.kernel_ios, g.aggregate_ios), (0, 0));
    assert_eq!(g.not_accounted_ios, reads.len() as u64);
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .arg("report")
        .arg(out_path(&dir, "nostat"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("kernel accounting is off"), "{text}");
    assert!(text.contains("0 unaccounted"), "{text}");
    assert!(
        !text.contains("mean queue size"),
        "nothing to compare: {text}"
    );
}

/// Started and stopped while fio keeps a queue of 32 reads in flight: each end of the run is
/// cut at one instant, so the kernel's counters (read just after it, the IOs that completed in
/// between tallied), the exact aggregates and the records describe the same IOs: nothing
/// unaccounted, nothing counted twice, the IOs in flight at the end reported as such, and no
/// IO submitted during the stop mistaken for one of before the start.
#[test]
fn stopping_while_io_runs_cuts_the_run_at_one_instant() {
    let dir = TestDir::new();
    let dev = Scratch::new("cut", 1024, true, false);
    dev.set_nomerges(2);
    let fio = FioGroup::spawn(&[
        "--name=cut",
        &format!("--filename={}", dev.path),
        "--rw=randrw",
        "--rwmixread=80",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        "--runtime=30",
        "--time_based",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let mut in_flight_seen = 0;
    for (k, ms) in [700u64, 1300, 2100, 450].into_iter().enumerate() {
        let out = out_path(&dir, &format!("cut{k}"));
        let t = Tracer::start(&["--device", &dev.name, "--output", &out, "--quiet"]);
        std::thread::sleep(Duration::from_millis(ms));
        let f = t.stop();
        assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
        let trace = Trace::read(std::path::Path::new(&out));
        let tr = trace.trailer.as_ref().expect("trailer");
        let (start, end) = (
            tr.start_cut.as_ref().expect("start cut"),
            tr.end_cut.as_ref().expect("end cut"),
        );
        // Every record completed inside the cut.
        assert!(
            trace
                .records
                .iter()
                .all(|r| r.complete_ns > start.at_ns && r.complete_ns <= end.at_ns),
            "run {k}: a record outside ({}, {}]",
            start.at_ns,
            end.at_ns
        );
        // Only IOs submitted before the start may say so.
        let late = trace
            .records
            .iter()
            .filter(|r| r.flags & flags::STARTED_BEFORE != 0 && r.enter_ns > start.at_ns)
            .count();
        assert_eq!(
            late, 0,
            "run {k}: IOs submitted after the start marked as before it"
        );
        let misses = assert_misses_are_skipped_runs(&trace, &format!("run {k}"));
        let cov = tracer_common::coverage::coverage(&trace.header, tr);
        let d = cov.iter().find(|d| d.name == dev.name).unwrap();
        let groups = trace.groups();
        for g in &d.groups {
            let grp = g.group.unwrap();
            let rec = groups.get(&grp).copied().unwrap_or((0, 0));
            assert_eq!(
                rec.0, g.aggregate_ios,
                "run {k} {grp:?}: records vs aggregates (no ring drops at this rate)"
            );
            assert_eq!(
                g.unaccounted(misses),
                0,
                "run {k} {grp:?}: kernel {} at the cut (raw {}, +-{} during the reads), traced {}, misses {misses}",
                g.kernel_at_cut_ios(),
                g.kernel_ios,
                g.cut_during_read_end_ios + g.cut_during_read_start_ios,
                g.aggregate_ios
            );
            assert_eq!(
                g.excess(),
                0,
                "run {k} {grp:?}: counted more than the kernel"
            );
        }
        let reads = d.groups[0].aggregate_ios;
        assert!(reads > 1000, "run {k}: fio was running ({reads} reads)");
        assert!(end.never_completed <= misses);
        in_flight_seen += end.in_flight;
        assert!(
            f.stdout.contains("coverage: read") && !f.stdout.contains("unaccounted"),
            "{}",
            f.stdout
        );
    }
    fio.end(libc::SIGKILL);
    assert!(
        in_flight_seen > 0,
        "IOs were in flight at the end cuts (iodepth 32)"
    );
}

#[test]
fn sequential_128k_and_512k_writes_are_exact() {
    let dir = TestDir::new();
    let dev = Scratch::new("sw", 1024, true, false);
    dev.set_nomerges(2);
    let mut jobs = Vec::new();
    let (trace, own, _) = traced(&dir, "sw", &dev, &[], || {
        for bs in ["128k", "512k"] {
            jobs.push(fio(&[
                "--name=sw",
                &format!("--filename={}", dev.path),
                "--rw=write",
                &format!("--bs={bs}"),
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=4",
                "--size=64m",
            ]));
        }
    });
    let misses = assert_exact(&trace, &dev, &own);
    let n128 = jobs[0]["jobs"][0]["write"]["total_ios"].as_u64().unwrap();
    let n512 = jobs[1]["jobs"][0]["write"]["total_ios"].as_u64().unwrap();
    assert_eq!((n128, n512), (512, 128));
    let got = sizes(&trace, Op::Write);
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        vec![128 << 10, 512 << 10],
        "only fio's two sizes"
    );
    let missing = (n128 - got[&(128 << 10)]) + (n512 - got[&(512 << 10)]);
    assert!(
        missing <= misses,
        "128k {} of {n128}, 512k {} of {n512}, {misses} reported misses",
        got[&(128 << 10)],
        got[&(512 << 10)]
    );
    // Sequential: each write starts where the previous one (of the same job) ended.
    let w: Vec<_> = trace
        .records
        .iter()
        .filter(|r| r.op == Op::Write && r.bytes == 512 << 10)
        .collect();
    let mut starts: Vec<u64> = w.iter().map(|r| r.sector).collect();
    starts.sort_unstable();
    let gaps = starts.windows(2).filter(|p| p[1] - p[0] != 1024).count() as u64;
    assert!(
        starts.windows(2).all(|p| p[1] > p[0]),
        "no 512 KB write counted twice"
    );
    assert!(
        gaps <= misses,
        "512 KB writes cover the device once, in order ({gaps} gaps, {misses} misses)"
    );
}

#[test]
fn size_mix_equals_what_fio_issued_exactly() {
    let dir = TestDir::new();
    let dev = Scratch::new("mix", 1024, true, false);
    dev.set_nomerges(2);
    let log = dir.join("mix.iolog");
    let (trace, own, _) = traced(&dir, "mix", &dev, &[], || {
        fio(&[
            "--name=mix",
            &format!("--filename={}", dev.path),
            "--rw=randrw",
            "--rwmixread=60",
            "--bssplit=4k/50:16k/20:64k/15:512k/15",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
            "--runtime=3",
            "--time_based",
            &format!("--write_iolog={}", log.display()),
        ]);
    });
    let misses = assert_exact(&trace, &dev, &own);
    // Compare the multiset of (op, offset, size) fio issued with what the trace saw.
    let mut want: Vec<(Op, u64, u32)> = fio_iolog(&log)
        .into_iter()
        .map(|(a, off, len)| {
            (
                if a == "read" { Op::Read } else { Op::Write },
                off,
                u32::try_from(len).expect("an IO's size fits a u32"),
            )
        })
        .collect();
    let mut got: Vec<(Op, u64, u32)> = trace
        .records
        .iter()
        .filter(|r| matches!(r.op, Op::Read | Op::Write))
        .map(|r| (r.op, r.sector * 512, r.bytes))
        .collect();
    want.sort_unstable();
    got.sort_unstable();
    assert!(want.len() > 1000);
    // Multiset difference: what fio issued that the trace lacks, and what the trace has extra.
    let (mut i, mut j, mut missing, mut extra) = (0, 0, 0u64, 0u64);
    while i < want.len() || j < got.len() {
        match (want.get(i), got.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                missing += 1;
                i += 1;
            }
            (Some(_), None) => {
                missing += 1;
                i += 1;
            }
            _ => {
                extra += 1;
                j += 1;
            }
        }
    }
    assert_eq!(
        extra, 0,
        "no IO in the trace that fio did not issue, none counted twice"
    );
    assert!(
        missing <= misses,
        "{missing} of fio's {} IOs missing, {misses} misses reported",
        want.len()
    );
    if misses == 0 {
        assert!(
            got == want,
            "exactly the IOs fio issued, with their offsets and sizes"
        );
    }
}

#[test]
fn trims_are_discards_with_exact_bytes() {
    let dir = TestDir::new();
    let dev = Scratch::new("trim", 1024, true, false);
    dev.set_nomerges(2);
    let (trace, own, _) = traced(&dir, "trim", &dev, &[], || {
        fio(&[
            "--name=trim",
            &format!("--filename={}", dev.path),
            "--rw=randtrim",
            "--bs=1m",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=4",
            "--size=512m",
            "--number_ios=300",
        ]);
        sh(&format!(
            "blkdiscard --offset 0 --length 64MiB {}",
            dev.path
        ));
    });
    let misses = assert_exact(&trace, &dev, &own);
    let d = trace.groups()[&StatGroup::Discard];
    assert!(d.0 + misses >= 301, "{d:?}");
    let mb = sizes(&trace, Op::Discard)
        .get(&(1 << 20))
        .copied()
        .unwrap_or(0);
    assert!(
        mb <= 300 && mb + misses >= 300,
        "300 discards of 1 MB from fio: {mb} (+{misses} reported misses)"
    );
}

#[test]
fn fsync_driven_flushes_are_counted_like_the_kernel() {
    let dir = TestDir::new();
    let dev = Scratch::new("fsync", 1024, true, false);
    let (trace, own, _) = traced(&dir, "fsync", &dev, &[], || {
        fio(&[
            "--name=fs",
            &format!("--filename={}", dev.path),
            "--rw=write",
            "--bs=4k",
            "--direct=1",
            "--ioengine=sync",
            "--fsync=1",
            "--size=2m",
        ]);
    });
    assert_exact(&trace, &dev, &own);
    let flushes: Vec<_> = trace
        .records
        .iter()
        .filter(|r| r.flags & flags::FLUSH_RQ != 0)
        .collect();
    // 511 of the 512 fsyncs on this host.
    assert!(
        flushes.len() >= 500,
        "one device flush per fsync (512): {}",
        flushes.len()
    );
    assert!(flushes.iter().all(|r| r.op == Op::Flush && r.issue_ns != 0));
    // The flush machinery's own request is never submitted as such: it is not "started before
    // tracing" (it was, in every run, until the probe told it apart), and carries the task
    // that issued it and the kernel's queue time.
    let unseen = flushes
        .iter()
        .filter(|r| r.flags & flags::STARTED_BEFORE != 0 || r.pid == 0 || r.enter_ns == 0)
        .count();
    assert_eq!(
        unseen, 0,
        "flush requests with an issuing task and a queue time"
    );
    let t = trace.trailer.as_ref().expect("trailer");
    assert_eq!(
        t.counters_end.started_before_attach - trace.header.counters_start.started_before_attach,
        0
    );
}

#[test]
fn mean_queue_size_matches_diskstats_within_5_percent() {
    let dir = TestDir::new();
    let dev = Scratch::new("qd", 1024, true, false);
    let (trace, _, _) = traced(&dir, "qd", &dev, &[], || {
        fio(&[
            "--name=qd",
            &format!("--filename={}", dev.path),
            "--rw=randrw",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=32",
            "--runtime=4",
            "--time_based",
        ]);
    });
    let t = trace.trailer.as_ref().unwrap();
    let a = trace
        .header
        .diskstats_start
        .iter()
        .find(|d| d.name == dev.name)
        .unwrap();
    let b = t.diskstats_end.iter().find(|d| d.name == dev.name).unwrap();
    let elapsed_ns = (b.at_ns - a.at_ns) as f64;
    let kernel = (b.weighted_ms - a.weighted_ms) as f64 * 1e6 / elapsed_ns;
    // Time-weighted mean of requests in the OS, from the records' own enter/complete times.
    let traced: f64 = trace
        .records
        .iter()
        .map(|r| r.total_ns() as f64)
        .sum::<f64>()
        / elapsed_ns;
    assert!(kernel > 5.0, "a real queue: {kernel}");
    let err = (traced - kernel).abs() / kernel;
    assert!(
        err < 0.05,
        "traced {traced:.3} vs diskstats {kernel:.3} ({:.1}% off)",
        err * 100.0
    );
    // The end summary's "traced" mean comes from the exact aggregates' sum of total latencies,
    // over the same IOs and stamps as the records (misses aside), and over the same window.
    let cov = tracer_common::coverage::coverage(&trace.header, t);
    let agg = cov
        .iter()
        .find(|d| d.name == dev.name)
        .expect("coverage of the device")
        .aggregate_mean_queue;
    assert!(
        (agg - traced).abs() / traced < 0.01,
        "the aggregates' mean queue size {agg:.3} vs the records' {traced:.3}"
    );
    // In-flight counts sampled at issue are plausible: at least this IO, at most fio's iodepth
    // (plus a few requests whose completion the probe missed, if any were reported).
    let misses = assert_misses_are_skipped_runs(&trace, "qd");
    let slack = u32::try_from(misses).expect("the misses fit a u32");
    let bad: Vec<_> = trace
        .records
        .iter()
        .filter(|r| {
            r.os_inflight < 1
                || r.os_inflight > 32 + slack
                || r.dev_inflight > r.os_inflight
                || r.dev_inflight < 1
        })
        .take(5)
        .collect();
    assert!(bad.is_empty(), "implausible in-flight counts: {bad:?}");
    assert!(trace.records.iter().any(|r| r.os_inflight >= 16));
}

#[test]
fn overload_drops_are_counted_and_aggregates_stay_exact() {
    let dir = TestDir::new();
    let dev = Scratch::new("ovl", 512, false, true);
    let out = out_path(&dir, "ovl");
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--ring-size",
        "4K",
    ]);
    let before = dev.diskstats();
    // fio runs until it is ended below.
    let fio = FioGroup::spawn(&[
        "--name=ovl",
        &format!("--filename={}", dev.path),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        "--runtime=120",
        "--time_based",
    ]);
    // The daemon stopped while the kernel counts 20,000 reads (as on a host whose CPUs the
    // database takes): the rings fill whatever the machine's speed (a few hundred IOs fill
    // 4 KB rings). Stopped for a fixed time instead, the stall could pass before fio's first
    // IO in an emulated VM (no drops there); left to run, the daemon may keep up
    // even with 4 KB rings, since halves go in batches.
    dev.wait_for_reads(1_000);
    t.signal(libc::SIGSTOP);
    let stalled = dev.wait_for_reads(20_000);
    t.signal(libc::SIGCONT);
    dev.wait_for_reads(1_000);
    fio.end(libc::SIGINT);
    let after = dev.diskstats();
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);
    let trace = Trace::read(std::path::Path::new(&out));
    let tr = trace.trailer.as_ref().unwrap();
    let kernel = delta(&before, &after)[&StatGroup::Read].0;
    let drops = tr.counters_end.ring_drops;
    assert!(
        drops > 0,
        "4 KB rings must overflow while the daemon is stopped ({stalled} reads meanwhile)"
    );
    let misses = assert_misses_are_skipped_runs(&trace, "overload");
    let seen = trace.records.len() as u64 + drops;
    assert!(
        seen <= kernel && seen + misses >= kernel,
        "records {} + drops {drops} (+ misses {misses}) = diskstats {kernel}",
        trace.records.len()
    );
    let cov = tracer_common::coverage::coverage(&trace.header, tr);
    let g = &cov.iter().find(|d| d.name == dev.name).unwrap().groups[0];
    assert_eq!(g.unaccounted(misses), 0);
    assert!(
        g.aggregate_ios <= kernel && g.aggregate_ios + misses >= kernel,
        "aggregates {} + misses {misses} vs kernel {kernel}",
        g.aggregate_ios
    );
    assert!(f.stdout.contains("dropped (ring full)"), "{}", f.stdout);
}

#[test]
fn sigkill_leaves_a_file_readable_to_its_last_chunk() {
    let dir = TestDir::new();
    let dev = Scratch::new("kill", 512, true, false);
    let out = out_path(&dir, "kill");
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--interval",
        "200ms",
    ]);
    let path = dev.path.clone();
    let load = std::thread::spawn(move || {
        fio(&[
            "--name=k",
            &format!("--filename={path}"),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
            "--runtime=4",
            "--time_based",
        ]);
    });
    // Killed once fio's reads are under way and a few intervals have passed since (each
    // writes what it has): a fixed 2 s came before fio's first IO in an emulated VM, where fio
    // takes seconds to start.
    dev.wait_for_reads(2_000);
    std::thread::sleep(Duration::from_secs(1));
    t.signal(libc::SIGKILL);
    let f = t.wait();
    assert!(!f.status.success());
    load.join().unwrap();
    let trace = Trace::read(std::path::Path::new(&out));
    assert!(
        matches!(trace.ending, Ending::Truncated { .. }),
        "{:?}",
        trace.ending
    );
    assert!(trace.trailer.is_none());
    assert!(
        trace.records.len() > 1000,
        "records up to the last flushed chunk: {}",
        trace.records.len()
    );
}

#[test]
fn errors_name_the_fix() {
    let run = |args: &[&str]| {
        let o = std::process::Command::new(blkprof_e2e::bin("blkprof-trace"))
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--device", "no-such-disk", "--duration", "1s"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("\"no-such-disk\" not found"), "{err}");
    let (code, err) = run(&[
        "--device",
        "loop0",
        "--output",
        "/nonexistent-dir/x.blkp",
        "--duration",
        "1s",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("does not exist"), "{err}");
    let (code, err) = run(&["--op", "wrte"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown operation"), "{err}");
    // Without privileges.
    let o = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(blkprof_e2e::bin("blkprof-trace"))
        .args(["--duration", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("needs root") && err.contains("sudo"), "{err}");
}

/// zram0 (bio-based, nothing under it), created by `modprobe zram` if need be. A machine
/// without zram fails the test that needs it, saying so, rather than passing it unrun.
fn zram0() -> &'static str {
    if !std::path::Path::new("/sys/block/zram0").exists() {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort: whether zram0 exists afterwards is what is checked next"
        )]
        let _ = std::process::Command::new("modprobe").arg("zram").status();
    }
    assert!(
        std::path::Path::new("/sys/block/zram0").exists(),
        "no zram0 on this machine and `modprobe zram` did not make one: this test needs the \
         zram module"
    );
    "zram0"
}

/// A zram device of its own, unused (disksize 0), removed on drop: zram0 when it is unused,
/// else one added through zram-control (zram0 may be someone's swap).
struct FreeZram {
    name: String,
    added: Option<String>,
}

impl FreeZram {
    fn new() -> FreeZram {
        let zram = zram0();
        let disksize = std::fs::read_to_string(format!("/sys/block/{zram}/disksize")).unwrap();
        if disksize.trim() == "0" {
            return FreeZram {
                name: zram.to_string(),
                added: None,
            };
        }
        let id = std::fs::read_to_string("/sys/class/zram-control/hot_add")
            .unwrap_or_else(|e| panic!("{zram} is in use and zram-control cannot add one: {e}"));
        let id = id.trim().to_string();
        FreeZram {
            name: format!("zram{id}"),
            added: Some(id),
        }
    }
}

impl Drop for FreeZram {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        let _ = std::fs::write(format!("/sys/block/{}/reset", self.name), "1");
        if let Some(id) = &self.added {
            let _ = std::fs::write("/sys/class/zram-control/hot_remove", id);
        }
    }
}

/// A bio-based device has no request events: blkprof refuses it by name or MAJ:MIN, before
/// loading the probe, saying why and what to do (traced, every one of its IOs would show as
/// unaccounted).
#[test]
fn a_bio_based_device_with_no_disk_under_it_is_refused() {
    let zram = zram0();
    let majmin = std::fs::read_to_string(format!("/sys/block/{zram}/dev")).unwrap();
    for spec in [zram, majmin.trim()] {
        let o = std::process::Command::new(blkprof_e2e::bin("blkprof-trace"))
            .args(["--device", spec, "--duration", "1s"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--device {spec}: {err}");
        assert_eq!(
            err.trim(),
            "blkprof-trace: zram0 is bio-based (zram): the block layer issues no requests for it, \
             so blkprof cannot trace it; trace the disk under it, if any",
            "--device {spec}"
        );
    }
}

/// Tracing all devices, a bio-based device under load is left out: its IOs reach /proc/diskstats
/// but never the probe, so they are not in the trace's diskstats snapshots, the tracer's end
/// table, nor the report's unaccounted IOs.
#[test]
fn bio_based_devices_are_not_counted_as_lost_when_tracing_all() {
    // Reset (and removed, if added) on drop, also when an assertion fails.
    let free = FreeZram::new();
    let zram = free.name.as_str();
    std::fs::write(format!("/sys/block/{zram}/disksize"), "64M").expect("zram disksize");
    let dir = TestDir::new();
    let out = out_path(&dir, "zram");
    let zram_stats = || {
        let text = std::fs::read_to_string("/proc/diskstats").unwrap();
        tracer_common::format::parse_diskstats(&text, 0)
            .into_values()
            .find(|d| d.name == zram)
            .expect("zram0 in /proc/diskstats")
    };
    let t = Tracer::start(&["--output", &out, "--quiet"]);
    let before = zram_stats();
    sh(&format!(
        "dd if=/dev/urandom of=/dev/{zram} bs=4k count=2000 oflag=direct status=none && \
         dd if=/dev/{zram} of=/dev/null bs=4k count=2000 iflag=direct status=none"
    ));
    let after = zram_stats();
    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    let zram_ios: u64 = delta(&before, &after).values().map(|v| v.0).sum();
    assert!(
        zram_ios >= 4000,
        "the kernel counts {zram}'s IOs in /proc/diskstats: {zram_ios}"
    );
    let trace = Trace::read(std::path::Path::new(&out));
    let t_end = trace.trailer.as_ref().expect("trailer");
    assert!(
        !trace.header.diskstats_start.iter().any(|d| d.name == zram)
            && !t_end.diskstats_end.iter().any(|d| d.name == zram),
        "no diskstats of {zram} in the trace"
    );
    let (major, minor) = majmin_of(zram);
    let zram_dev = tracer_common::dev_join(major, minor);
    assert!(
        !trace.records.iter().any(|r| r.dev == zram_dev),
        "no records of {zram}"
    );
    assert!(!f.stdout.contains(zram), "{}", f.stdout);
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["report", "--json", &out])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("report JSON");
    // This traces the whole machine, whose other devices other tests may be loading: the bound
    // is about zram0's thousands of IOs, not about the rest (expected 0 there too).
    let unaccounted = j["lost"]["unaccounted"].as_u64().unwrap();
    assert!(
        unaccounted < zram_ios / 10,
        "{zram}'s {zram_ios} IOs are not unaccounted: {unaccounted} unaccounted"
    );
}

fn majmin_of(name: &str) -> (u32, u32) {
    let s = std::fs::read_to_string(format!("/sys/block/{name}/dev")).unwrap();
    let (a, b) = s.trim().split_once(':').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// SIGUSR2 changes nothing; SIGHUP (a closed terminal or SSH session) ends the run as Ctrl-C
/// does: the file complete, exact against the kernel's counters.
#[test]
fn sighup_ends_the_run_cleanly_and_sigusr2_is_ignored() {
    let dir = TestDir::new();
    let dev = Scratch::new("hup", 256, true, false);
    let out = out_path(&dir, "hup");
    let t = Tracer::start(&["--device", &dev.name, "--output", &out, "--quiet"]);
    let before = dev.diskstats();
    let file = format!("--filename={}", dev.path);
    let job = || {
        fio(&[
            "--name=hup",
            file.as_str(),
            "--direct=1",
            "--rw=randread",
            "--bs=4k",
            "--size=128m",
            "--number_ios=2000",
        ]);
    };
    job();
    t.signal(libc::SIGUSR2);
    job();
    let after = dev.diskstats();
    t.signal(libc::SIGHUP);
    let f = t.wait();
    assert!(f.status.success(), "{}", f.stderr);
    assert!(f.stderr.contains("SIGUSR2 ignored"), "{}", f.stderr);
    let trace = Trace::read(std::path::Path::new(&out));
    assert_eq!(trace.ending, Ending::Complete);
    assert_eq!(
        trace.trailer.as_ref().map(|t| t.reason.as_str()),
        Some("signal")
    );
    assert_exact(&trace, &dev, &delta(&before, &after));
}

/// A mount undone on drop, also when an assertion fails.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_filling_disk_with_keep_deletes_the_oldest_files_and_the_run_goes_on() {
    let dir = TestDir::new();
    let dev = Scratch::new("filling", 512, false, true);
    let mnt = dir.join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    sh(&format!(
        "mount -t tmpfs -o size=16m tmpfs {}",
        mnt.display()
    ));
    let _unmount = Unmount(mnt.clone());
    let out = mnt.join("db.blkp").display().to_string();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--interval",
        "200ms",
        "--rotate-size",
        "512K",
        "--keep",
        "100",
        "--duration",
        "10s",
    ]);
    let path = dev.path.clone();
    let io = std::thread::spawn(move || {
        fio(&[
            "--name=filling",
            &format!("--filename={path}"),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=16",
            "--runtime=8",
            "--time_based",
        ]);
    });
    // Something else fills the file system while the tracer writes.
    std::thread::sleep(Duration::from_secs(2));
    let used: u64 = rotated_in(&mnt)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let filler_mb = 13u64.saturating_sub(used / (1 << 20)).max(1);
    sh(&format!(
        "dd if=/dev/zero of={} bs=1M count={filler_mb} status=none",
        mnt.join("filler").display()
    ));
    io.join().unwrap();
    let f = t.wait_or_stop();
    assert!(f.status.success(), "{}", f.stderr);
    assert!(
        f.stderr.contains("deleting the oldest kept file"),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("disk full"), "{}", f.stderr);
    let left = rotated_in(&mnt);
    assert!(left.len() >= 2, "{left:?}");
    for p in &left {
        assert_eq!(Trace::read(p).ending, Ending::Complete, "{}", p.display());
    }
    let last = left.last().unwrap();
    assert_eq!(
        Trace::read(last).trailer.as_ref().unwrap().reason,
        "duration",
        "the run went on to its end"
    );
}

#[test]
fn disk_full_stops_cleanly_and_keeps_what_was_written() {
    let dir = TestDir::new();
    let dev = Scratch::new("full", 512, false, true);
    let mnt = dir.join("tiny");
    std::fs::create_dir_all(&mnt).unwrap();
    sh(&format!(
        "mount -t tmpfs -o size=192k tmpfs {}",
        mnt.display()
    ));
    let _unmount = Unmount(mnt.clone());
    let out = mnt.join("t.blkp").display().to_string();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--interval",
        "100ms",
    ]);
    fio(&[
        "--name=full",
        &format!("--filename={}", dev.path),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--runtime=4",
        "--time_based",
    ]);
    let f = t.wait_or_stop();
    let trace = Trace::read(std::path::Path::new(&out));
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr);
    assert!(f.stderr.contains("disk full"), "{}", f.stderr);
    assert!(
        trace.records.len() > 100,
        "kept {} records",
        trace.records.len()
    );
    assert!(
        matches!(trace.ending, Ending::Truncated { .. } | Ending::Complete),
        "{:?}",
        trace.ending
    );
}

#[test]
fn filters_keep_only_the_chosen_task_and_op() {
    let dir = TestDir::new();
    let dev = Scratch::new("filt", 512, true, false);
    let (trace, _, _) = traced(
        &dir,
        "filt",
        &dev,
        &["--comm", "dd", "--op", "write"],
        || {
            sh(&format!(
                "dd if=/dev/zero of={} bs=64k count=200 oflag=direct status=none",
                dev.path
            ));
            sh(&format!(
                "dd if={} of=/dev/null bs=64k count=100 iflag=direct status=none",
                dev.path
            ));
            fio(&[
                "--name=f",
                &format!("--filename={}", dev.path),
                "--rw=write",
                "--bs=4k",
                "--direct=1",
                "--size=4m",
            ]);
        },
    );
    let tr = trace.trailer.clone().unwrap();
    let misses = assert_misses_are_skipped_runs(&trace, "filters");
    let n = trace.records.len() as u64;
    assert!(
        n <= 200 && n + misses >= 200,
        "only dd's 200 writes: {n} (+{misses} reported misses)"
    );
    assert!(
        trace
            .records
            .iter()
            .all(|r| r.op == Op::Write && r.bytes == 64 << 10)
    );
    assert!(
        tr.filtered_out <= 100 + 1024 && tr.filtered_out + misses >= 100 + 1024,
        "dd's reads and fio's writes were filtered out and counted: {}",
        tr.filtered_out
    );
    assert_eq!(trace.header.filters.comms, vec!["dd".to_string()]);
}

#[test]
fn rotation_keeps_the_newest_files_within_bounds() {
    let dir = TestDir::new();
    let dev = Scratch::new("rot", 512, false, true);
    let rot = dir.join("rot");
    std::fs::create_dir_all(&rot).unwrap();
    let out = rot.join("db.blkp").display().to_string();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--interval",
        "200ms",
        "--rotate-size",
        "64K",
        "--keep",
        "3",
    ]);
    fio(&[
        "--name=rot",
        &format!("--filename={}", dev.path),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        "--runtime=3",
        "--time_based",
    ]);
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);
    let mut files: Vec<_> = std::fs::read_dir(&rot)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "blkp"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    let first_seq: u32 = files[0]
        .to_string_lossy()
        .rsplit('.')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(first_seq > 0, "older files were deleted");
    for p in &files {
        let tr = Trace::read(p);
        assert_eq!(tr.ending, Ending::Complete, "{}", p.display());
        assert!(p.with_extension("hlog").exists());
    }
}

/// The rotated files in `dir` (`.blkp`), sorted by name.
fn rotated_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "blkp"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_restart_numbers_after_the_earlier_runs_files_and_never_writes_through_a_link() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TestDir::new();
    let dev = Scratch::new("restart", 512, false, true);
    let rot = dir.join("rot");
    std::fs::create_dir_all(&rot).unwrap();
    let out = rot.join("db.blkp").display().to_string();
    let run = |keep: &str| {
        let t = Tracer::start(&[
            "--device",
            &dev.name,
            "--output",
            &out,
            "--quiet",
            "--interval",
            "200ms",
            "--rotate-size",
            "64K",
            "--keep",
            keep,
        ]);
        fio(&[
            "--name=rot",
            &format!("--filename={}", dev.path),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
            "--runtime=2",
            "--time_based",
        ]);
        let f = t.stop();
        assert!(f.status.success(), "{}", f.stderr);
        f
    };
    run("100");
    let first = rotated_in(&rot);
    assert!(first.len() >= 3, "{first:?}");
    let kept: Vec<(std::path::PathBuf, Vec<u8>)> = first
        .iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    for p in &first {
        for f in [p.clone(), p.with_extension("hlog")] {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }
    // A link planted where the next run's first file would go: not followed, not replaced.
    let n = first.len();
    let victim = dir.join("victim");
    std::fs::write(&victim, b"not a trace").unwrap();
    let planted = rot.join(format!("db.{n:06}.blkp"));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    run("100");
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a trace");
    assert!(std::fs::symlink_metadata(&planted).unwrap().is_symlink());
    for (p, bytes) in &kept {
        assert!(
            std::fs::read(p).unwrap() == *bytes,
            "{} changed",
            p.display()
        );
    }
    let all = rotated_in(&rot);
    let numbers: Vec<u32> = all
        .iter()
        .filter(|p| **p != planted)
        .map(|p| {
            p.to_string_lossy()
                .rsplit('.')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    let n = u32::try_from(n).unwrap();
    assert_eq!(numbers[..first.len()], (0..n).collect::<Vec<_>>()[..]);
    assert_eq!(
        numbers[first.len()],
        n + 1,
        "the taken number is skipped: {numbers:?}"
    );
    for w in numbers.windows(2) {
        assert_eq!(
            w[1],
            w[0] + if w[0] + 1 == n { 2 } else { 1 },
            "{numbers:?}"
        );
    }
    for p in all.iter().filter(|p| **p != planted) {
        assert_eq!(Trace::read(p).ending, Ending::Complete, "{}", p.display());
    }
    // `--keep` counts the earlier runs' files of the same name: at most 3 once the third
    // run rotates, and nothing else touched.
    std::fs::remove_file(&planted).unwrap();
    run("3");
    let left = rotated_in(&rot);
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(victim.exists());
}

#[test]
fn rotation_cuts_files_at_one_instant() {
    // fio runs through several rotations: each file holds exactly the IOs that completed
    // between its cuts, and its own aggregates and diskstats deltas agree with them.
    let dir = TestDir::new();
    let dev = Scratch::new("rotcut", 1024, true, false);
    dev.set_nomerges(2);
    let rot = dir.join("rotcut");
    std::fs::create_dir_all(&rot).unwrap();
    let out = rot.join("db.blkp").display().to_string();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--interval",
        "300ms",
        "--rotate-time",
        "600ms",
    ]);
    fio(&[
        "--name=rotcut",
        &format!("--filename={}", dev.path),
        "--rw=randrw",
        "--rwmixread=80",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        "--runtime=4",
        "--time_based",
    ]);
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);
    let mut files: Vec<_> = std::fs::read_dir(&rot)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "blkp"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let mut prev_end: Option<u64> = None;
    let mut busy = 0;
    for (k, p) in files.iter().enumerate() {
        let trace = Trace::read(p);
        let tr = trace.trailer.as_ref().expect("trailer");
        let (start, end) = (
            tr.start_cut.as_ref().expect("start cut"),
            tr.end_cut.as_ref().expect("end cut"),
        );
        if let Some(e) = prev_end {
            assert_eq!(start.at_ns, e, "file {k} starts where file {} ends", k - 1);
        }
        prev_end = Some(end.at_ns);
        assert!(
            trace
                .records
                .iter()
                .all(|r| r.complete_ns > start.at_ns && r.complete_ns <= end.at_ns),
            "file {k}: a record outside ({}, {}]",
            start.at_ns,
            end.at_ns
        );
        let d = assert_cut_exact(&trace, &dev.name, &format!("file {k}"));
        if d[&StatGroup::Read] > 1000 {
            busy += 1;
        }
    }
    assert!(busy >= 3, "fio ran through several files ({busy})");
}

#[test]
fn json_live_view_is_one_object_per_device_interval() {
    let dev = Scratch::new("json", 512, true, false);
    let t = Tracer::start(&["--device", &dev.name, "--json", "--interval", "500ms"]);
    fio(&[
        "--name=j",
        &format!("--filename={}", dev.path),
        "--rw=randrw",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=4",
        "--runtime=2",
        "--time_based",
    ]);
    let f = t.stop();
    assert!(f.status.success());
    let lines: Vec<serde_json::Value> = f
        .stdout
        .lines()
        .take_while(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert!(lines.len() >= 3, "{}", f.stdout);
    for l in &lines {
        assert_eq!(l["device"], dev.name.as_str());
        assert!(
            l["read"]["iops"].is_number()
                && l["device_latency_us"]["p99"].is_number()
                && l["queue_depth_mean"].is_number()
        );
        assert!(l["time"].as_str().unwrap().ends_with('Z'));
    }
    assert!(
        lines
            .iter()
            .any(|l| l["read"]["iops"].as_f64().unwrap() > 100.0)
    );
}

#[test]
fn fio_replays_an_exported_trace_with_the_same_io_and_timing() {
    // The records the iolog replays as IOs (flushes are its syncs).
    fn rw(t: &Trace) -> impl Iterator<Item = &IoRecord> + Clone {
        t.records
            .iter()
            .filter(|r| matches!(r.op, Op::Read | Op::Write))
    }
    let dir = TestDir::new();
    let a = Scratch::new("rtA", 512, true, false);
    let b = Scratch::new("rtB", 512, true, false);
    a.set_nomerges(2);
    b.set_nomerges(2);
    // W: a rate-limited read/write mix (fio 3.33 cannot replay trims from an iolog).
    let (orig, _, _) = traced(&dir, "rtA", &a, &[], || {
        fio(&[
            "--name=w",
            &format!("--filename={}", a.path),
            "--rw=randrw",
            "--rwmixread=70",
            "--bssplit=4k/60:64k/25:256k/15",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=4",
            "--rate_iops=1500",
            "--runtime=4",
            "--time_based",
            // An fsync every 32 writes: device flushes, which the iolog must replay as syncs.
            "--fsync=32",
        ]);
    });
    let iolog = dir.join("rt.iolog");
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args([
            "export",
            &out_path(&dir, "rtA"),
            "--format",
            "iolog",
            "--target",
            &b.path,
            "-o",
        ])
        .arg(&iolog)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (replay, _, _) = traced(&dir, "rtB", &b, &[], || {
        fio(&[
            "--name=replay",
            &format!("--read_iolog={}", iolog.display()),
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=16",
        ]);
    });
    let misses = assert_misses_are_skipped_runs(&orig, "original")
        + assert_misses_are_skipped_runs(&replay, "replay");
    let mix = |t: &Trace| {
        let mut m: BTreeMap<(Op, u32), u64> = BTreeMap::new();
        for r in rw(t) {
            *m.entry((r.op, r.bytes)).or_default() += 1;
        }
        m
    };
    // Each fsync reached the device as a flush; the replay's syncs do too (an iolog's sync
    // line needs an offset and a length, else fio refuses it as a file action).
    let flushes = |t: &Trace| {
        t.records
            .iter()
            .filter(|r| r.stat_group() == StatGroup::Flush)
            .count() as u64
    };
    let (fa, fb) = (flushes(&orig), flushes(&replay));
    assert!(fa > 10, "the original fsyncs reached the device: {fa}");
    assert!(
        fb.abs_diff(fa) <= misses,
        "flushes: original {fa}, replay {fb} ({misses} reported misses)"
    );
    let (ma, mb) = (mix(&orig), mix(&replay));
    let diff: u64 = ma
        .keys()
        .chain(mb.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|k| {
            ma.get(k)
                .copied()
                .unwrap_or(0)
                .abs_diff(mb.get(k).copied().unwrap_or(0))
        })
        .sum();
    assert!(
        diff <= misses,
        "block-size mix per op: original {ma:?} vs replay {mb:?} ({misses} reported misses)"
    );
    if misses == 0 {
        assert_eq!(ma, mb, "IO count and bytes per op and size, exactly");
    }
    let span = |t: &Trace| {
        let first = rw(t).map(|r| r.enter_ns).min().unwrap();
        let last = rw(t).map(|r| r.complete_ns).max().unwrap();
        (last - first) as f64 / 1e9
    };
    // The iolog's own stamps (microseconds since the first IO) hold the original's timing: the
    // reads' and writes' submissions span the same time, to the microsecond's flooring.
    let text = std::fs::read_to_string(&iolog).unwrap();
    let stamps: Vec<u64> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5 && matches!(f[2], "read" | "write")).then(|| f[0].parse().unwrap())
        })
        .collect();
    let rw_enter = rw(&orig).map(|r| r.enter_ns);
    let orig_us = (rw_enter.clone().max().unwrap() - rw_enter.min().unwrap()) / 1_000;
    let log_us = stamps.iter().max().unwrap() - stamps.iter().min().unwrap();
    assert!(
        log_us.abs_diff(orig_us) <= 2,
        "the iolog's submissions span {log_us} us, the original's {orig_us} us"
    );
    let (da, db) = (span(&orig), span(&replay));
    eprintln!(
        "round trip: {} IOs, original {da:.3} s, replay {db:.3} s, {misses} reported misses",
        orig.records.len()
    );
    // fio's replay runs late by 1.7-5.6% here (12 runs; always late, never early): within 5%
    // it failed 1 run in 3 on a loaded host. A replay without the stamps' timing takes a
    // fraction of the original's time.
    assert!(
        (db - da).abs() / da < 0.10,
        "duration: original {da:.3} s, replay {db:.3} s"
    );
}

#[test]
fn ftrace_blk_lines_import_to_the_same_summary_as_our_trace() {
    let dir = TestDir::new();
    let dev = Scratch::new("blk", 512, true, false);
    dev.set_nomerges(2);
    let ftrace = FtraceBlk::start(&dev.name);
    let (trace, _, _) = traced(&dir, "blk", &dev, &[], || {
        fio(&[
            "--name=mix",
            &format!("--filename={}", dev.path),
            "--rw=randrw",
            "--bssplit=4k/60:64k/30:256k/10",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=4",
            "--rate_iops=1500",
            "--runtime=3",
            "--time_based",
        ]);
        fio(&[
            "--name=trim",
            &format!("--filename={}", dev.path),
            "--rw=randtrim",
            "--bs=1m",
            "--direct=1",
            "--ioengine=libaio",
            "--number_ios=40",
            "--size=256m",
        ]);
    });
    let text = ftrace.text();
    drop(ftrace);
    let lines = dir.join("blk.txt");
    std::fs::write(&lines, &text).unwrap();
    let imported = dir.join("blk-imported.blkp");
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["import", "--from", "blk"])
        .arg(&lines)
        .arg("-o")
        .arg(&imported)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ours = trace.groups();
    let theirs = Trace::read(&imported).groups();
    let misses = assert_misses_are_skipped_runs(&trace, "blk");
    for g in [StatGroup::Read, StatGroup::Write, StatGroup::Discard] {
        let (a, b) = (
            ours.get(&g).copied().unwrap_or((0, 0)),
            theirs.get(&g).copied().unwrap_or((0, 0)),
        );
        assert!(a.0 > 0, "{g:?}: some IO");
        assert!(
            b.0 >= a.0 && b.0 - a.0 <= misses,
            "{g:?}: imported {b:?} vs traced {a:?} ({misses} reported misses)"
        );
        if misses == 0 {
            assert_eq!(a, b, "{g:?}: IOs and bytes");
        }
    }
    // A hand-broken copy fails clearly, naming the line.
    let broken = dir.join("blk-broken.txt");
    let mut b: Vec<&str> = text.lines().collect();
    let bad_at = b.iter().position(|l| l.contains(" C ")).unwrap();
    b[bad_at] = "fio-1 [000] ..... 12.000000:   7,1    C  WS notanumber + 8 [0]";
    std::fs::write(&broken, b.join("\n")).unwrap();
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["import", "--from", "blk"])
        .arg(&broken)
        .arg("-o")
        .arg(dir.join("x.blkp"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err.contains(&format!("blk-broken.txt:{}:", bad_at + 1)) && err.contains("sector"),
        "{err}"
    );
}

/// Merging on (the default): the same run recorded by the kernel's ftrace `blk` tracer and by
/// blkprof-trace. The imported lines must give the same IOs per op and the same total-latency
/// distribution (p50 and p99 within 5%; ftrace stamps events to the microsecond, so the
/// requests are made large enough to take tens of microseconds): a merged bio's queue event
/// left pending would pair with a later IO at its sector (the workload rewrites the same
/// 16 MiB 16 times) and show as milliseconds to seconds of queue time.
#[test]
fn ftrace_blk_lines_with_merges_import_to_the_same_latencies_as_our_trace() {
    let dir = TestDir::new();
    let dev = Scratch::new("blkm", 256, true, false);
    // The default; a loop device keeps the setting of its previous user.
    dev.set_nomerges(0);
    let ftrace = FtraceBlk::start(&dev.name);
    // fio submits 32 sequential 4 KB IOs per io_submit and waits for all of them: they meet in
    // the block layer's plug and are back-merged there into 128 KB requests, on reads and
    // writes alike.
    let job = |name: &str, rw: &str, offset: &str| {
        vec![
            format!("--name={name}"),
            format!("--filename={}", dev.path),
            format!("--rw={rw}"),
            "--bs=4k".into(),
            "--direct=1".into(),
            "--ioengine=libaio".into(),
            "--iodepth=32".into(),
            "--iodepth_batch_submit=32".into(),
            "--iodepth_batch_complete_min=32".into(),
            format!("--offset={offset}"),
            "--size=16m".into(),
            "--loops=16".into(),
        ]
    };
    let before = dev.diskstats();
    let (trace, _, _) = traced(&dir, "blkm", &dev, &[], || {
        let w = job("seqwrite", "write", "0");
        let r = job("seqread", "read", "64m");
        let mut args: Vec<&str> = w.iter().map(String::as_str).collect();
        args.extend(r.iter().map(String::as_str));
        fio(&args);
    });
    let after = dev.diskstats();
    let text = ftrace.text();
    drop(ftrace);
    // The block layer really merged: the kernel counted merges, and the lines show them.
    let kernel_merges =
        (after.read_merges + after.write_merges) - (before.read_merges + before.write_merges);
    let merge_lines = text
        .lines()
        .filter(|l| matches!(blk_action(l), Some("M" | "F")))
        .count() as u64;
    assert!(
        kernel_merges >= 1000 && merge_lines >= 1000,
        "few merges: diskstats {kernel_merges}, M/F lines {merge_lines}"
    );
    let lines = dir.join("blkm.txt");
    std::fs::write(&lines, &text).unwrap();
    let imported = dir.join("blkm-imported.blkp");
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["import", "--from", "blk"])
        .arg(&lines)
        .arg("-o")
        .arg(&imported)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("followed {merge_lines} merges")),
        "the importer follows every merge line: {stderr}"
    );
    let theirs = Trace::read(&imported);
    let misses = assert_misses_are_skipped_runs(&trace, "blk merges");
    eprintln!(
        "merges: {kernel_merges} in diskstats, {merge_lines} M/F lines; {misses} reported misses; {stderr}"
    );
    for op in [Op::Read, Op::Write] {
        let of_op = |t: &Trace| -> Vec<IoRecord> {
            t.records
                .iter()
                .filter(|r| r.op == op && r.flags & flags::FLUSH_RQ == 0)
                .copied()
                .collect()
        };
        let (ours, theirs) = (of_op(&trace), of_op(&theirs));
        // Every imported IO found its own request's queue and issue events.
        let unpaired = theirs
            .iter()
            .filter(|r| r.flags & (flags::STARTED_BEFORE | flags::NEVER_ISSUED) != 0)
            .count();
        assert_eq!(unpaired, 0, "{op:?}: IOs without their Q/G or D");
        let (a, b) = (ours.len() as u64, theirs.len() as u64);
        assert!(a > 1000, "{op:?}: {a} IOs traced");
        assert!(
            b >= a && b - a <= misses,
            "{op:?}: imported {b} IOs, traced {a} ({misses} reported misses)"
        );
        if misses == 0 {
            assert_eq!(a, b, "{op:?}: IOs");
        }
        let total = |v: &[IoRecord]| v.iter().map(IoRecord::total_ns).collect::<Vec<u64>>();
        let (mut ta, mut tb) = (total(&ours), total(&theirs));
        for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
            let (x, y) = (quantile(&mut ta, q), quantile(&mut tb, q));
            // The IOs the probe missed are among the imported ones: each can move an order
            // statistic of the traced ones by one rank (the p99 of 2,048 is the 21st largest,
            // and a sparse tail jumps between neighbours), so the traced quantile is held to
            // the imported ones within that many ranks of it (tb is sorted by quantile()).
            let rank = f64_to_usize_saturating((q * tb.len() as f64).ceil()).clamp(1, tb.len()) - 1;
            let slack = usize::try_from(b - a).unwrap_or(usize::MAX);
            let (lo, hi) = (
                tb[rank.saturating_sub(slack)],
                tb[rank.saturating_add(slack).min(tb.len() - 1)],
            );
            eprintln!(
                "{op:?}: {a} IOs traced, {b} imported; total latency {name} {x} ns traced, {y} ns imported ({lo}..{hi} within {slack} ranks)"
            );
            assert!(
                x as f64 >= 0.95 * lo as f64 && x as f64 <= 1.05 * hi as f64,
                "{op:?} total latency {name}: traced {x} ns, imported {y} ns ({lo}..{hi} within {slack} ranks)"
            );
        }
    }
    // The lines are tens of MB; kept only when the test fails.
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of scratch files once every check has passed"
    )]
    let _ = std::fs::remove_file(&lines);
    #[expect(clippy::let_underscore_must_use, reason = "as above")]
    let _ = std::fs::remove_file(&imported);
}

/// Workload shape and phases against fio jobs of known pattern, at depth one: 16 MiB from
/// offset 0 written sequentially three times over in 64 KiB IOs (workset 16 MiB, invalidation
/// factor 3, every write but the first of each pass sequential), then 16 MiB from 64 MiB read
/// in random order in 4 KiB IOs, each block once (fio's random map: workset 16 MiB, almost no
/// read sequential). `check` gates on the figures.
#[test]
fn workload_shape_matches_fio_jobs_of_known_pattern() {
    const MIB: u64 = 1 << 20;
    let dir = TestDir::new();
    let dev = Scratch::new("shape", 256, true, false);
    dev.set_nomerges(2);
    let (trace, _, _) = traced(&dir, "shape", &dev, &[], || {
        fio(&[
            "--name=rewrite",
            &format!("--filename={}", dev.path),
            "--rw=write",
            "--bs=64k",
            "--direct=1",
            "--ioengine=psync",
            "--offset=0",
            "--size=16m",
            "--loops=3",
        ]);
        fio(&[
            "--name=randread",
            &format!("--filename={}", dev.path),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            "--offset=64m",
            "--size=16m",
        ]);
    });
    // Reads outside fio's region (a udev probe, say) may add to the read workset: bound it by
    // them (none expected here).
    let stray_read_bytes: u64 = trace
        .records
        .iter()
        .filter(|r| r.op == Op::Read && (r.sector * 512 < 64 * MIB || r.sector * 512 >= 80 * MIB))
        .map(|r| u64::from(r.bytes))
        .sum();
    let stray_writes = trace
        .records
        .iter()
        .filter(|r| r.op == Op::Write && r.sector * 512 >= 16 * MIB)
        .count();
    assert_eq!(stray_writes, 0, "only fio writes");
    assert_misses_are_skipped_runs(&trace, "shape");
    let out = out_path(&dir, "shape");
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["report", "--json", &out])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let find = |v: &serde_json::Value, key: &str, name: &str| -> serde_json::Value {
        v[key]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == name || x["op"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {v:#}"))
    };
    let shape = find(&j["sections"]["workload_shape"], "devices", &dev.name);
    let w = find(&shape, "ops", "write");
    let r = find(&shape, "ops", "read");
    // This host's kernel now and then does not run the completion program (README, missed
    // completions): an IO never completed in the trace is missing from it, a read a block
    // short of the workset, a write 64 KiB short of the bytes written.
    let missed = j["lost"]["missed_completions"].as_u64().unwrap_or(0);
    let written = w["bytes"].as_u64().unwrap();
    assert!(
        (48 * MIB - missed * 64 * 1024..=48 * MIB).contains(&written),
        "{shape:#}"
    );
    assert_eq!(w["workset_bytes"].as_u64(), Some(16 * MIB), "{shape:#}");
    assert_eq!(
        shape["write_invalidation_factor"].as_f64(),
        Some(written as f64 / (16 * MIB) as f64)
    );
    let rws = r["workset_bytes"].as_u64().unwrap();
    assert!(
        (16 * MIB - missed * 4096..=16 * MIB + stray_read_bytes).contains(&rws),
        "read workset {rws}, stray reads {stray_read_bytes}, missed completions {missed}: {shape:#}"
    );
    let ws = shape["workset_bytes"].as_u64().unwrap();
    assert!(
        (32 * MIB - missed * 4096..=32 * MIB + stray_read_bytes).contains(&ws),
        "{shape:#}"
    );
    assert_eq!(shape["exact"].as_bool(), Some(true));
    // Sequential share (the access pattern's): 765 of 768 writes, the first of each pass
    // random. Random reads continue one of the 4 reads before them (up to 64 KiB after) by
    // chance (1.6% of the time) and when fio's random map, filling up, takes the free block
    // next to a used one: 5.3% in the first run. A write missing for a missed completion
    // leaves the next one 64 KiB after the last end, still sequential, so the trace still holds
    // 3 random writes, whichever write was missed (two missed in a row would make a fourth).
    let access = find(&j["sections"]["access_pattern"], "devices", &dev.name);
    let aw = find(&access, "ops", "write");
    let (ios, seq) = (
        aw["ios"].as_u64().unwrap(),
        aw["sequential_ios"].as_u64().unwrap(),
    );
    assert!(
        (768 - missed.min(768)..=768).contains(&ios) && (3..=3 + missed).contains(&(ios - seq)),
        "{ios} writes, {seq} sequential, {missed} missed completions: {access:#}"
    );
    let ar = find(&access, "ops", "read");
    assert!(
        ar["pct_sequential_ios"].as_f64().unwrap() < 10.0,
        "{access:#}"
    );
    // Phases: depth one, so the device was busy for part of the run only, and a read's seeks
    // are long while the writes' are none.
    let ph = find(&j["sections"]["phases"], "devices", &dev.name);
    let pa = ph["pct_active"].as_f64().unwrap();
    assert!(pa > 0.0 && pa < 100.0, "{ph:#}");
    assert!(ph["seek"]["pct_zero"].as_f64().unwrap() > 15.0, "{ph:#}");
    assert!(
        ph["seek"]["median_sectors"].as_f64().unwrap() > 100.0,
        "{ph:#}"
    );
    let pw = find(&ph, "ops", "write");
    let d2c = &pw["d2c_us"];
    assert!(
        d2c["min"].as_f64() <= d2c["p50"].as_f64() && d2c["p50"].as_f64() <= d2c["max"].as_f64()
    );
    // check gates on them: the invalidation factor of 3 fails a maximum of 2.
    let rules = dir.join("rules.json");
    std::fs::write(
        &rules,
        r#"{"rules": [{"metric": "sections.access_pattern.ops.write.pct_sequential_ios", "min": 99},
                      {"metric": "sections.workload_shape.write_invalidation_factor", "max": 2}]}"#,
    )
    .unwrap();
    let o = std::process::Command::new(blkprof_e2e::bin("blkprof"))
        .args(["check", &out, "--rules"])
        .arg(&rules)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    let line = |m: &str| {
        text.lines()
            .find(|l| l.contains(m))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("pct_sequential_ios").contains("PASS"), "{text}");
    assert!(line("write_invalidation_factor").contains("FAIL"), "{text}");
}

/// A kernel that skips a completion program's run now and then (this host's does,
/// ../shared/notes/platform.md) leaves an IO without its end. Every such IO must be found by
/// the probe itself as a missed completion, by what it had seen of the request, on each path:
/// half records joined in the daemon, the in-kernel join, and the `block_getrq` fallback. The
/// skips are the probe's own (every 251st run of the completion program on a CPU for this
/// device), so that a stock kernel shows them too. 256 fsyncs (about 3 skips among their
/// completions) bring the block layer's flush request, one per hardware queue, reused for
/// every flush, which no submission event sees. (On the fallback an fsync's empty flush meets
/// no program before its completion: one whose completion is skipped is not seen at all, and
/// counts only as a submitter not taken up.)
#[test]
fn skipped_completion_runs_are_each_found_as_a_missed_completion() {
    // Few IOs, skips often: in a TCG guest (the VM tests) each fsync costs about 25 ms, and
    // with 1,024 of them and a skip every 1,009th run the test took 280 s there.
    const EVERY: u64 = 251;
    // (path, the tracer's options, its environment)
    type Path<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let paths: [Path; 3] = [
        ("half records", &[], &[]),
        ("in-kernel join", &["--whole-records"], &[]),
        ("block_getrq", &[], &[("BLKPROF_HOOKS", "getrq")]),
    ];
    for (path, extra, env) in paths {
        let dir = TestDir::new();
        let dev = Scratch::new("skip", 1024, true, false);
        let mut env = env.to_vec();
        let every = EVERY.to_string();
        env.push(("BLKPROF_TEST_SKIP_COMPLETIONS", &every));
        let file = format!("--filename={}", dev.path);
        let run = blkprof_e2e::traced(&dev, &dir.join("skip.blkp"), extra, &env, || {
            fio(&[
                "--name=skip",
                &file,
                "--direct=1",
                "--rw=randrw",
                "--bs=4k",
                "--ioengine=libaio",
                "--iodepth=16",
                // A count, not a time: as many IOs, so as many skips, in a TCG guest as here.
                "--io_size=8m",
            ]);
            fio(&[
                "--name=flush",
                &file,
                "--direct=1",
                "--rw=write",
                "--bs=4k",
                "--size=1m",
                "--ioengine=sync",
                "--fsync=1",
            ]);
        });
        let trace = run.trace;
        // The misses here are the probe's own skips, not the kernel's: no bound by the runs.
        let (missing, ios) = assert_exact_but_misses(&trace, &dev, &run.own);
        let tr = trace.trailer.as_ref().expect("trailer");
        let cov = tracer_common::coverage::coverage(&trace.header, tr);
        let d = cov.iter().find(|d| d.name == dev.name).expect("coverage");
        let flushes = d
            .groups
            .iter()
            .find(|g| g.group == Some(StatGroup::Flush))
            .map_or(0, |g| g.kernel_ios);
        let found: u64 = tr.counters_end.missed_stage.iter().sum();
        let unseen = if trace.header.submit_hook == "block_getrq" {
            tr.counters_end.submitters_lost
        } else {
            0
        };
        eprintln!(
            "{path} ({}): {missing} IOs missing of {}, {found} found missed by stage {:?}, \
             {unseen} submitters not taken up, {flushes} flushes",
            trace.header.submit_hook, ios, tr.counters_end.missed_stage
        );
        assert!(flushes > 250, "{path}: the fsyncs made flushes: {flushes}");
        // A completion a request, but for flushes (two: the flush request's and the fsync's);
        // the count toward the next skip is per CPU (of this device's completions).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        assert!(
            missing > 0
                && missing >= (ios / (2 * EVERY)).saturating_sub(cpus)
                && missing <= 2 * ios / EVERY,
            "{path}: about one IO in {EVERY} left without its end: {missing} of {ios}"
        );
        // On the fallback an empty flush whose completion was skipped is not seen (above).
        assert!(
            found <= missing && missing <= found + unseen,
            "{path}: every IO whose completion the program skipped is found missed: \
             {missing} missing, {found} found, {unseen} submitters not taken up"
        );
    }
}

/// The fallback for kernels without `block_io_start` (Linux 6.1-6.4: `block_getrq` records the
/// submitter under the bio, the request's first event takes it up), forced on this kernel:
/// exact against /proc/diskstats, and every request names its real submitter, also with an IO
/// scheduler, where a kernel worker issues what the submitter inserted. The same runs in the
/// 6.1 guest (tests/tests/vm.rs), where the fallback is chosen by itself.
/// `--btf FILE` where /sys/kernel/btf/vmlinux is hidden (a container without it, a hardened
/// host): in a mount namespace of its own, an empty tmpfs over /sys/kernel/btf. Without the
/// flag the tracer refuses and says to give it; with a copy of the kernel's file it traces
/// exactly.
#[test]
fn btf_from_a_file_where_the_kernels_own_is_hidden() {
    let dir = TestDir::new();
    let copy = dir.join("vmlinux.btf");
    std::fs::copy("/sys/kernel/btf/vmlinux", &copy).expect("a copy of the kernel's BTF");
    let hide = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t tmpfs blkprof-hides-btf /sys/kernel/btf && exec \"$0\" \"$@\"",
    ];
    let refused = std::process::Command::new(hide[0])
        .args(&hide[1..])
        .arg(blkprof_e2e::bin("blkprof-trace"))
        .args(["--duration", "1s", "--quiet"])
        .output()
        .expect("run blkprof-trace in a mount namespace");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "refused without the file: {stderr}"
    );
    assert!(
        stderr.contains("/sys/kernel/btf/vmlinux") && stderr.contains("--btf FILE"),
        "says what is missing and what to give: {stderr}"
    );
    let dev = Scratch::new("btf", 512, true, false);
    let out = dir.join("btf.blkp");
    let copy_s = copy.to_str().expect("a UTF-8 path");
    let run = blkprof_e2e::traced_wrapped(&hide, &dev, &out, &["--btf", copy_s], &[], || {
        let file = format!("--filename={}", dev.path);
        fio(&[
            "--name=btf",
            file.as_str(),
            "--direct=1",
            "--rw=randrw",
            "--bs=4k",
            "--ioengine=libaio",
            "--iodepth=8",
            "--size=256m",
            "--runtime=2",
            "--time_based",
        ]);
    });
    assert_exact(&run.trace, &dev, &run.own);
    let subs = run.trace.submissions("fio");
    assert!(subs.requests > 1_000, "{}", subs.requests);
    assert!(
        subs.others.is_empty(),
        "submitted by fio: {:?}",
        subs.others
    );
}

#[test]
fn the_getrq_fallback_is_exact_and_names_each_submitter() {
    // `getrq-nocas`: the programs of kernels without BPF compare-and-exchange (before 5.12),
    // which track requests and submitters in hash maps; on such a kernel both are those.
    for (hooks, scheduler) in [
        ("getrq", "none"),
        ("getrq", "mq-deadline"),
        ("getrq-nocas", "none"),
        ("getrq-nocas", "mq-deadline"),
    ] {
        let dir = TestDir::new();
        let dev = Scratch::new("getrq", 1024, true, false);
        dev.set_scheduler(scheduler);
        let job = |args: &[&str]| {
            let file = format!("--filename={}", dev.path);
            let mut a = vec!["--name=getrq", file.as_str(), "--direct=1"];
            a.extend_from_slice(args);
            fio(&a);
        };
        let out = dir.join("getrq.blkp");
        let run = blkprof_e2e::traced(&dev, &out, &[], &[("BLKPROF_HOOKS", hooks)], || {
            job(&[
                "--rw=randrw",
                "--bs=4k",
                "--ioengine=libaio",
                "--iodepth=16",
                "--numjobs=2",
                "--runtime=2",
                "--time_based",
                "--size=512m",
            ]);
            // Sequential 4 KB writes from one submission of 32: merged into larger requests
            // (bios appended to requests already made, which block_getrq never sees).
            job(&[
                "--rw=write",
                "--bs=4k",
                "--ioengine=libaio",
                "--iodepth=32",
                "--iodepth_batch_submit=32",
                "--size=32m",
            ]);
            // Past the random IO's 512 MiB: the loop device punches a trim into its image, and
            // a range written at random is an extent per run of blocks, each freed with a
            // discard the trim waits for where the image's file system is mounted with
            // `discard` (16 s with the trims past that range, 29 s over it).
            job(&[
                "--rw=trim",
                "--bs=1m",
                "--offset=512m",
                "--size=64m",
                "--ioengine=sync",
            ]);
            job(&[
                "--rw=write",
                "--bs=4k",
                "--size=2m",
                "--ioengine=sync",
                "--fsync=1",
            ]);
        });
        let trace = run.trace;
        assert_eq!(trace.header.submit_hook, "block_getrq");
        assert_exact(&trace, &dev, &run.own);
        let subs = trace.submissions("fio");
        let (n, unseen, not_fio) = (subs.requests, subs.unseen, &subs.others);
        let tr = trace.trailer.as_ref().expect("trailer");
        eprintln!(
            "{hooks} {scheduler}: {} requests, {unseen} without a seen submission, submitted by others: \
             {not_fio:?}, submitters lost {}, reported misses {}",
            n,
            tr.counters_end.submitters_lost,
            tr.counters_end.reported_misses()
        );
        assert!(n > 5_000, "{n}");
        // This host's vendor kernel skips a tp_btf program's run now and then (about 1 in
        // 5,000-100,000; ../shared/notes/platform.md): a skipped `block_getrq` run leaves its
        // request without a seen submission. Stock kernels (the VM stage) skip none.
        let vendor = trace.header.kernel.contains("-fc");
        let allowed = if vendor { n as u64 / 50_000 + 2 } else { 0 };
        assert!(
            unseen as u64 <= allowed,
            "{hooks} {scheduler}: every submission seen but for skipped runs ({unseen} unseen, {allowed} allowed on {})",
            trace.header.kernel
        );
        assert!(
            not_fio.is_empty(),
            "{hooks} {scheduler}: every request submitted by fio: {not_fio:?}"
        );
        assert!(
            trace
                .requests()
                .all(|r| r.enter_ns != 0 && r.enter_ns <= r.complete_ns),
            "{hooks} {scheduler}: queue times"
        );
        let merged = trace
            .requests()
            .filter(|r| r.op == Op::Write && r.bytes > 4096)
            .count();
        assert!(merged > 0, "{hooks} {scheduler}: some writes were merged");
        // Every count of requests in flight given back: fio keeps at most 32 in flight (2 jobs
        // of 16, then one of 32), the flush machinery one more.
        let misses = u32::try_from(tr.counters_end.reported_misses()).expect("fits");
        let bad: Vec<_> = trace
            .requests()
            .filter(|r| r.os_inflight > 33 + misses || r.dev_inflight > r.os_inflight)
            .take(3)
            .collect();
        assert!(
            bad.is_empty(),
            "{hooks} {scheduler}: in-flight counts past fio's depth: {bad:?}"
        );
    }
}

/// Once attached, the tracer holds at most `CAP_BPF` on every thread (where this kernel needs it
/// to read the probe's maps), with `no_new_privs` and a seccomp filter, run as root and as an
/// unprivileged user with `CAP_BPF` and `CAP_PERFMON` only (as the packaged unit runs it). It
/// still serves a scrape, counts fio's IOs exactly, rotates, and ends with its trailer.
#[test]
fn after_attaching_the_tracer_keeps_at_most_cap_bpf_and_refuses_program_loads() {
    let dir = TestDir::new();
    let as_root = privileges_dropped_while_tracing(&dir.join("root"), &[]);
    let nobody = dir.join("nobody");
    std::fs::create_dir(&nobody).expect("a directory");
    sh(&format!("chown 65534:65534 {}", nobody.display()));
    // As the unit runs it (`AS_THE_UNIT_RUNS_IT`): the locked-memory limit lifted first, for
    // kernels before 5.11 that charge BPF maps to it.
    let as_user = privileges_dropped_while_tracing(
        &nobody,
        &[
            "sh",
            "-c",
            "ulimit -l unlimited 2>/dev/null; exec \"$@\"",
            "sh",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all,+bpf,+perfmon",
            "--ambient-caps=-all,+bpf,+perfmon",
            "--bounding-set=-all,+bpf,+perfmon",
        ],
    );
    // The decision is the kernel's: the same for both.
    assert_eq!(as_root, as_user);
}

/// [`after_attaching_the_tracer_keeps_at_most_cap_bpf_and_refuses_program_loads`] with the
/// tracer started through `wrapper`, writing into `dir`; whether it kept `CAP_BPF`.
fn privileges_dropped_while_tracing(dir: &std::path::Path, wrapper: &[&str]) -> bool {
    std::fs::create_dir_all(dir).expect("a directory");
    let dev = Scratch::new("privs", 512, true, false);
    let port = blkprof_e2e::free_port();
    let addr = format!("127.0.0.1:{port}");
    let out = dir.join("privs.blkp");
    let out_s = out.display().to_string();
    let t = Tracer::start_wrapped(
        wrapper,
        &[
            "--device",
            &dev.name,
            "--output",
            &out_s,
            "--rotate-time",
            "2s",
            "--quiet",
            "--metrics-addr",
            &addr,
        ],
        &[],
    );
    let kept = blkprof_e2e::assert_privileges_dropped(t.pid());
    let note = t
        .stderr
        .lines()
        .find(|l| l.contains("dropped capabilities after attaching"))
        .unwrap_or_else(|| panic!("the note: {}", t.stderr))
        .to_string();
    let expected = if kept {
        "; kept CAP_BPF ("
    } else {
        "; kept none;"
    };
    assert!(note.contains(expected), "{note}");
    assert!(
        note.ends_with("further program loads refused (seccomp)"),
        "{note}"
    );
    eprintln!("{wrapper:?}: {note}");
    let before = dev.diskstats();
    fio(&[
        "--name=privs",
        &format!("--filename={}", dev.path),
        "--rw=randrw",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        "--runtime=3",
        "--time_based",
    ]);
    let after = dev.diskstats();
    let (status, body) = blkprof_e2e::http_get(port, "/metrics", None).expect("a scrape");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("blkprof_ios_total") && body.contains(&dev.name),
        "{body}"
    );
    // The threads started since (tokio's blocking pool, for the rotations) hold no more.
    assert_eq!(blkprof_e2e::assert_privileges_dropped(t.pid()), kept);
    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    assert!(!f.stderr.contains("warning"), "{}", f.stderr);
    // Rotated while the IO ran: each file exact between its cuts, together all of fio's IOs.
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the output directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "blkp"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "rotated: {files:?}");
    let mut traced = 0;
    for f in &files {
        let trace = Trace::read(f);
        assert_eq!(trace.ending, Ending::Complete, "{}", f.display());
        assert_cut_exact(&trace, &dev.name, &f.display().to_string());
        traced += trace.groups().values().map(|(n, _)| n).sum::<u64>() + trace.misses();
    }
    let own: u64 = delta(&before, &after).values().map(|(n, _)| n).sum();
    assert!(
        own > 1000 && traced >= own,
        "traced {traced} vs fio's {own} IOs"
    );
    kept
}

/// Root rotating into a directory it may write only through `CAP_DAC_OVERRIDE` (another user's,
/// 0755) keeps that capability alone, says why, and rotates there as before.
#[test]
fn root_rotating_into_another_users_directory_keeps_cap_dac_override() {
    const CAP_DAC_OVERRIDE: u64 = 1 << 1;
    const CAP_BPF: u64 = 1 << 39;
    let dir = TestDir::new();
    let theirs = dir.join("theirs");
    std::fs::create_dir(&theirs).expect("a directory");
    sh(&format!(
        "chown 65534:65534 {} && chmod 0755 {0}",
        theirs.display()
    ));
    let dev = Scratch::new("dac", 256, true, false);
    let out = theirs.join("dac.blkp").display().to_string();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        &out,
        "--quiet",
        "--rotate-time",
        "1s",
        "--duration",
        "3s",
    ]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid())).expect("status");
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapEff");
    assert_eq!(eff & !CAP_BPF, CAP_DAC_OVERRIDE, "{status}");
    assert!(
        t.stderr.contains(&format!(
            "CAP_DAC_OVERRIDE (files are created in {} later)",
            theirs.display()
        )),
        "{}",
        t.stderr
    );
    let f = t.wait_or_stop();
    assert!(f.status.success(), "{}", f.stderr);
    let files: Vec<_> = std::fs::read_dir(&theirs)
        .expect("the directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "blkp"))
        .collect();
    assert!(files.len() >= 2, "rotated there: {files:?}");
    for p in &files {
        assert_eq!(Trace::read(p).ending, Ending::Complete, "{}", p.display());
    }
}
