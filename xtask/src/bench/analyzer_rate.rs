//! The analyzer's rate: a full `blkprof report` on a 50-million-IO trace, next to the time
//! to read the file once, with peak RSS.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use analyzer::numeric::{Rng, median};
use anyhow::{Context as _, Result, bail};
use tracer_common::format::{
    DeviceInfo, IoRecord, TraceHeader, TraceReader, TraceTrailer, TraceWriter, comm_bytes,
};
use tracer_common::op::{Op, flags};

use crate::util::{root, run};

/// A Cassandra-shaped stream written in completion order: 4 KB random reads, 4 KB commit-log
/// writes, and every 10 s a 0.5 s burst of 512 KB writes.
#[expect(
    clippy::many_single_char_names,
    reason = "a generator's short-lived state: n IOs, w the writer, x the random state, t the time, r each record"
)]
fn write_big(path: &Path, n: u64) -> Result<()> {
    let base = 1_000_000_000_000u64;
    let header = TraceHeader {
        tracer_version: "bench".into(),
        host: "bench".into(),
        wall_clock_start_ns: 1_795_000_000_000_000_000,
        monotonic_base_ns: base,
        devices: vec![DeviceInfo {
            name: "nvme0n1".into(),
            major: 259,
            minor: 1,
            logical_block_size: 512,
            queue: None,
        }],
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header)?;
    let comm = comm_bytes("java");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut t = base;
    let dev = tracer_common::dev_join(259, 1);
    for i in 0..n {
        let x = rng.next_u64();
        t += 20_000 + x % 5_000; // ~40k IOPS
        let in_burst = (t - base) % 10_000_000_000 < 500_000_000;
        let (op, bytes, lat) = if in_burst && i % 3 == 0 {
            (Op::Write, 512 << 10, 2_000_000 + x % 1_000_000)
        } else if i % 10 == 0 {
            (Op::Write, 4096, 30_000 + x % 10_000)
        } else {
            (
                Op::Read,
                4096,
                if in_burst {
                    5_000_000 + x % 5_000_000
                } else {
                    80_000 + x % 40_000
                },
            )
        };
        let r = IoRecord {
            complete_ns: t,
            enter_ns: t - lat,
            issue_ns: t - lat + 2_000,
            sector: ((x >> 8) % (1 << 31)) & !7,
            bytes,
            pid: 4242,
            dev_inflight: (x % 32) as u32,
            os_inflight: (x % 32) as u32 + 1,
            dev,
            flags: flags::SYNC,
            op,
            // An NVMe disk on 2 CPUs: each request on its submitter's CPU's queue.
            hw_queue: Some(((x >> 37) & 1) as u16),
            ..Default::default()
        };
        w.push(&r, &comm)?;
    }
    w.finish(&TraceTrailer {
        reason: "bench".into(),
        monotonic_end_ns: t,
        records_in_file: n,
        ..Default::default()
    })?;
    Ok(())
}

/// What one run of a child command cost.
struct Cost {
    wall_s: f64,
    /// user + system CPU time.
    cpu_s: f64,
    rss_mib: f64,
}

fn timed(cmd: &mut Command) -> Result<Cost> {
    // A child started by posix_spawn (vfork: std's default) takes this process's peak RSS
    // into its own at exec (the kernel keeps the larger of the old address space's high-water
    // mark and the new one's): after the join bench's 200 MB of halves in this process, every
    // child reported at least that. A hook before exec makes std fork instead, so the child's
    // peak is its own, or this process's resident pages at the fork if larger (a few MiB).
    // SAFETY: the hook does nothing, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| Ok(()));
    }
    let t0 = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("spawn")?;
    let pid = crate::signal::pid(&child);
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 on our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    let rc = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut ru) };
    if rc != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{cmd:?} failed");
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Cost {
        wall_s: t0.elapsed().as_secs_f64(),
        cpu_s: secs(ru.ru_utime) + secs(ru.ru_stime),
        rss_mib: ru.ru_maxrss as f64 / 1024.0,
    })
}

/// CPU time of this process so far (user + system), seconds.
fn own_cpu_s() -> f64 {
    // SAFETY: rusage is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Decode every record of the file once, in this process: (records, wall s, CPU s).
fn read_once(path: &Path) -> Result<(u64, f64, f64)> {
    let (t0, c0) = (Instant::now(), own_cpu_s());
    let mut r = TraceReader::open(path)?;
    let mut buf = Vec::new();
    let mut n = 0u64;
    let mut bytes = 0u64;
    while r.next_chunk(&mut buf)? {
        n += buf.len() as u64;
        bytes += buf.iter().map(|r| u64::from(r.bytes)).sum::<u64>();
    }
    std::hint::black_box(bytes);
    Ok((n, t0.elapsed().as_secs_f64(), own_cpu_s() - c0))
}

/// Rounds of (read once, full report), alternating, so that both see the same machine.
const ROUNDS: usize = 5;

pub(crate) fn bench(ios: u64) -> Result<()> {
    run(crate::util::cargo().args(["build", "--release", "-p", "analyzer"]))?;
    // BLKPROF_BENCH_TRACE=FILE keeps the trace there (and reuses it when it exists), so that
    // two builds can be timed side by side on the same file.
    let keep = std::env::var_os("BLKPROF_BENCH_TRACE")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let path = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "blkprof-bench-analyzer-{}.blkp",
            std::process::id()
        ))
    });
    if keep.is_none() || !path.exists() {
        eprintln!("bench: writing a {ios}-IO synthetic trace");
        write_big(&path, ios)?;
    }
    let size = std::fs::metadata(&path)?.len();
    let blkprof = root().join("target/release/blkprof");
    // BLKPROF_BENCH_BASELINE_ANALYZER=BIN: another build's blkprof, timed on the same trace in
    // every round (alternating which goes first), for a before/after ratio on one machine state.
    let baseline = std::env::var_os("BLKPROF_BENCH_BASELINE_ANALYZER")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let (mut n, mut reads, mut reports, mut base_reports) = (0, Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let (records, wall, cpu) = read_once(&path)?;
        n = records;
        let mut this = None;
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_base in order {
            match (&baseline, is_base) {
                (Some(b), true) => {
                    let r = timed(Command::new(b).arg("report").arg(&path))?;
                    eprintln!(
                        "round {round}: baseline report {:.2} s wall, {:.2} s CPU, {:.0} MiB",
                        r.wall_s, r.cpu_s, r.rss_mib
                    );
                    base_reports.push(r);
                }
                (_, false) => this = Some(timed(Command::new(&blkprof).arg("report").arg(&path))?),
                (None, true) => {}
            }
        }
        let rep = this.expect("timed");
        eprintln!(
            "round {round}: read once {wall:.2} s wall, {cpu:.2} s CPU | report {:.2} s wall, {:.2} s CPU, {:.0} MiB",
            rep.wall_s, rep.cpu_s, rep.rss_mib
        );
        reads.push((wall, cpu));
        reports.push(rep);
    }
    let parquet = bench_parquet(&blkprof, &path, n, size);
    if keep.is_none() {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup of the generated trace; the Parquet benchmark's result is checked next"
        )]
        let _ = std::fs::remove_file(&path);
    }
    let parquet = parquet?;
    let (read_wall, read_cpu) = (
        median(reads.iter().map(|r| r.0).collect()),
        median(reads.iter().map(|r| r.1).collect()),
    );
    let (rep_wall, rep_cpu) = (
        median(reports.iter().map(|r| r.wall_s).collect()),
        median(reports.iter().map(|r| r.cpu_s).collect()),
    );
    let rss = reports.iter().map(|r| r.rss_mib).fold(0.0, f64::max);
    let rate = |s: f64| n as f64 / s / 1e6;
    let check = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("\n| measure (median of {ROUNDS} alternating rounds) | value | target |");
    println!("|---|---|---|");
    println!(
        "| trace | {n} IOs, {:.1} MB ({:.2} bytes/IO) | |",
        size as f64 / 1e6,
        size as f64 / n as f64
    );
    println!(
        "| read the file once (decode every record), CPU time | {read_cpu:.2} s, {:.1} M IOs/s | |",
        rate(read_cpu)
    );
    println!(
        "| read the file once, wall time | {read_wall:.2} s, {:.1} M IOs/s | |",
        rate(read_wall)
    );
    println!(
        "| full `blkprof report`, CPU time (one thread: one core) | {rep_cpu:.2} s, {:.1} M IOs/s | >= 20 M IOs/s: {} |",
        rate(rep_cpu),
        check(rate(rep_cpu) >= 20.0)
    );
    println!(
        "| full `blkprof report`, wall time | {rep_wall:.2} s, {:.1} M IOs/s | |",
        rate(rep_wall)
    );
    println!(
        "| peak RSS of the report (max of the rounds) | {rss:.0} MiB | <= 200 MiB: {} |",
        check(rss <= 200.0)
    );
    print!("{parquet}");
    if let Some(b) = &baseline {
        let cpu = median(base_reports.iter().map(|r| r.cpu_s).collect());
        let rss = base_reports.iter().map(|r| r.rss_mib).fold(0.0, f64::max);
        println!(
            "| baseline `blkprof report` ({}), CPU time | {cpu:.2} s, {:.1} M IOs/s; this build / baseline: {:.3} | |",
            b.display(),
            rate(cpu),
            rep_cpu / cpu
        );
        println!("| baseline peak RSS | {rss:.0} MiB | |");
    }
    Ok(())
}

/// `blkprof export --format parquet`: the codecs and row-group sizes on a 10 M-IO prefix of the
/// same workload, then the default on the whole trace (rate on one core, bytes per IO against
/// the .blkp's, peak RSS at both lengths). Returns the table's rows.
fn bench_parquet(blkprof: &Path, path: &Path, n: u64, size: u64) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("blkprof-bench-parquet-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = (|| -> Result<String> {
        let small_n = n.min(10_000_000);
        let small = dir.join("small.blkp");
        write_big(&small, small_n)?;
        let small_size = std::fs::metadata(&small)?.len();
        let out = dir.join("out.parquet");
        let export = |trace: &Path, args: &[&str]| -> Result<(Cost, u64)> {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "clears the previous export; there is none before the first"
            )]
            let _ = std::fs::remove_file(&out);
            let c = timed(
                Command::new(blkprof)
                    .arg("export")
                    .arg(trace)
                    .args(["--format", "parquet", "-o"])
                    .arg(&out)
                    .args(args)
                    .stderr(std::process::Stdio::null()),
            )?;
            Ok((c, std::fs::metadata(&out)?.len()))
        };
        let mut rows = String::new();
        for codec in ["snappy", "zstd", "lz4", "none"] {
            for rg in ["131072", "1048576", "4194304"] {
                if codec != "snappy" && rg != "1048576" {
                    continue;
                }
                let (c, bytes) = export(&small, &["--compression", codec, "--row-group-rows", rg])?;
                eprintln!(
                    "parquet {codec} row groups {rg}: {:.2} s CPU, {:.2} bytes/IO, {:.0} MiB",
                    c.cpu_s,
                    bytes as f64 / small_n as f64,
                    c.rss_mib
                );
                rows += &format!(
                    "| Parquet export, {small_n} IOs, {codec}, row groups of {rg} | {:.2} s CPU, {:.1} M IOs/s; {:.2} bytes/IO ({:.2}x the .blkp's {:.2}); {:.0} MiB peak RSS | |\n",
                    c.cpu_s,
                    small_n as f64 / c.cpu_s / 1e6,
                    bytes as f64 / small_n as f64,
                    bytes as f64 / small_size as f64,
                    small_size as f64 / small_n as f64,
                    c.rss_mib
                );
            }
        }
        let (c, bytes) = export(path, &[])?;
        let rate = n as f64 / c.cpu_s / 1e6;
        let ratio = bytes as f64 / size as f64;
        let check = |ok: bool| if ok { "met" } else { "NOT met" };
        rows += &format!(
            "| Parquet export (default: snappy, 1 Mi-row groups), {n} IOs, CPU time (one thread) | {:.2} s, {rate:.1} M IOs/s ({:.2} s wall) | >= 10 M IOs/s: {} |\n",
            c.cpu_s,
            c.wall_s,
            check(rate >= 10.0)
        );
        rows += &format!(
            "| Parquet bytes per IO vs .blkp | {:.2} vs {:.2} bytes/IO: {ratio:.2}x | <= 2x: {} |\n",
            bytes as f64 / n as f64,
            size as f64 / n as f64,
            check(ratio <= 2.0)
        );
        rows += &format!(
            "| Parquet export peak RSS, {n} IOs (snappy, 1 Mi-row groups at {small_n} IOs above) | {:.0} MiB | bounded |\n",
            c.rss_mib
        );
        Ok(rows)
    })();
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of the scratch directory; the benchmark's own result is what is returned"
    )]
    let _ = std::fs::remove_dir_all(&dir);
    result
}
