//! The analyzer's rate: a full `blkprof report` on a 50-million-IO trace, next to the time
//! to read the file once, with peak RSS.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use tracer_common::format::{
    DeviceInfo, IoRecord, TraceHeader, TraceReader, TraceTrailer, TraceWriter, comm_bytes,
};
use tracer_common::op::{Op, flags};

use crate::util::{root, run};

/// A Cassandra-shaped stream written in completion order: 4 KB random reads, 4 KB commit-log
/// writes, and every 10 s a 0.5 s burst of 512 KB writes.
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
        }],
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header)?;
    let comm = comm_bytes("java");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut t = base;
    let dev = tracer_common::dev_join(259, 1);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
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
            ..Default::default()
        };
        w.push(&r, &comm)?;
    }
    w.finish(&TraceTrailer {
        reason: "bench".into(),
        records_in_file: n,
        ..Default::default()
    })?;
    Ok(())
}

/// (wall seconds, max RSS MiB) of a child command.
fn timed(cmd: &mut Command) -> Result<(f64, f64)> {
    let t0 = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("spawn")?;
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 on our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if rc != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{cmd:?} failed");
    }
    Ok((t0.elapsed().as_secs_f64(), ru.ru_maxrss as f64 / 1024.0))
}

pub fn bench(ios: u64) -> Result<()> {
    run(crate::util::cargo().args(["build", "--release", "-p", "analyzer"]))?;
    // BLKPROF_BENCH_TRACE=FILE keeps the trace there (and reuses it when it exists), so that
    // two builds can be timed side by side on the same file.
    let keep = std::env::var_os("BLKPROF_BENCH_TRACE").map(std::path::PathBuf::from);
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
    // Read once (decode every record), in this process.
    let t0 = Instant::now();
    let mut r = TraceReader::open(&path)?;
    let mut buf = Vec::new();
    let mut n = 0u64;
    let mut bytes = 0u64;
    while r.next_chunk(&mut buf)? {
        n += buf.len() as u64;
        bytes += buf.iter().map(|r| u64::from(r.bytes)).sum::<u64>();
    }
    let read_s = t0.elapsed().as_secs_f64();
    std::hint::black_box(bytes);
    let (report_s, rss) = timed(
        Command::new(root().join("target/release/blkprof"))
            .arg("report")
            .arg(&path),
    )?;
    if keep.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    let rate = n as f64 / report_s;
    let check = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("\n| measure | value | target |");
    println!("|---|---|---|");
    println!(
        "| trace | {n} IOs, {:.1} MB ({:.2} bytes/IO) | |",
        size as f64 / 1e6,
        size as f64 / n as f64
    );
    println!(
        "| read the file once (decode every record) | {read_s:.2} s, {:.1} M IOs/s | |",
        n as f64 / read_s / 1e6
    );
    println!(
        "| full `blkprof report` | {report_s:.2} s, {:.1} M IOs/s | >= 20 M IOs/s: {} |",
        rate / 1e6,
        check(rate >= 20e6)
    );
    println!(
        "| peak RSS of the report | {rss:.0} MiB | <= 200 MiB: {} |",
        check(rss <= 200.0)
    );
    Ok(())
}
