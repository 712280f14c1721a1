//! `cargo xtask bench --agent`: the daemon's CPU per IO and peak RSS writing a trace file,
//! serving metrics only, and with the flight recorder, at a fixed IO rate.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};

use super::accounting::{diskstats_reads, proc_cpu_s, proc_hwm_mib};
use super::device::Loop;
use super::fio::fio_at_rate;
use super::tracer::{spawn_tracer, stop_tracer};
use super::{quartiles, remove_scratch, require_root_and_build, scratch_trace, tracer_bin};

/// How the agent benchmark runs the tracer.
#[derive(Clone, Copy)]
enum AgentMode {
    /// `--output FILE`: the tracer as it records traces.
    File,
    /// `--metrics-addr` alone, scraped every second: no trace written.
    Metrics,
    /// `--metrics-addr` and `--flight-recorder 10m`.
    Recorder,
}

impl AgentMode {
    const ALL: [AgentMode; 3] = [AgentMode::File, AgentMode::Metrics, AgentMode::Recorder];
    fn name(self) -> &'static str {
        match self {
            AgentMode::File => "trace file (--output)",
            AgentMode::Metrics => "metrics only (--metrics-addr, scraped every 1 s)",
            AgentMode::Recorder => "metrics + flight recorder 10m",
        }
    }
}

/// GET /metrics once (HTTP/1.0); the body's length, 0 on failure.
fn scrape(port: u16) -> usize {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    #[expect(
        clippy::let_underscore_must_use,
        reason = "without the timeout the read only waits longer; scrape() reports a failure as 0 bytes"
    )]
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return 0;
    }
    let mut body = Vec::new();
    #[expect(
        clippy::let_underscore_must_use,
        reason = "scrape() measures the bytes that arrived: a body cut short counts as what came"
    )]
    let _ = s.read_to_end(&mut body);
    body.len()
}

/// fio at a fixed rate on `lp` while the tracer runs in `mode`: the daemon's CPU time per IO
/// (user + system, from /proc) and its peak RSS.
fn agent_round(
    bin: &Path,
    lp: &Loop,
    mode: AgentMode,
    rate: u64,
    seconds: u64,
    out: &Path,
) -> Result<(f64, f64)> {
    remove_scratch(out);
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let dir = out
        .parent()
        .unwrap_or(Path::new("/tmp"))
        .display()
        .to_string();
    let out_s = out.display().to_string();
    let mut args = vec!["--device", lp.name(), "--quiet"];
    match mode {
        AgentMode::File => args.extend(["--output", out_s.as_str()]),
        AgentMode::Metrics => args.extend(["--metrics-addr", addr.as_str()]),
        AgentMode::Recorder => args.extend([
            "--metrics-addr",
            addr.as_str(),
            "--flight-recorder",
            "10m",
            "--dump-dir",
            dir.as_str(),
        ]),
    }
    let child = spawn_tracer(bin, &args)?;
    let pid = child.id();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = (!matches!(mode, AgentMode::File)).then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut bytes = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                bytes = scrape(port);
                std::thread::sleep(Duration::from_secs(1));
            }
            bytes
        })
    });
    let before = diskstats_reads(lp.name())?;
    let cpu0 = proc_cpu_s(pid);
    fio_at_rate(&lp.dev, rate, seconds)?;
    let cpu = proc_cpu_s(pid) - cpu0;
    let rss = proc_hwm_mib(pid);
    let ios = diskstats_reads(lp.name())? - before;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(s) = scraper
        && s.join().unwrap_or(0) == 0
    {
        bail!("the metrics endpoint never answered");
    }
    stop_tracer(child)?;
    remove_scratch(&out.with_extension("hlog"));
    Ok((cpu * 1e9 / ios.max(1) as f64, rss))
}

/// `cargo xtask bench --agent`: the daemon's CPU per IO and peak RSS in each way of running,
/// at a fixed rate (fio 4 KB random reads), the modes rotated over rounds.
pub(crate) fn bench_agent(seconds: u64, rounds: usize, rate: u64) -> Result<()> {
    require_root_and_build()?;
    let lp = Loop::in_shm("blkprof-bench-agent", "1G")?;
    let out = scratch_trace("blkprof-bench-agent");
    let bin = tracer_bin();
    eprintln!(
        "bench: agent modes on {} over /dev/shm, fio 4k randread at {rate} IOPS, {seconds} s per run, {rounds} rounds",
        lp.dev
    );
    let mut per_mode: Vec<(Vec<f64>, f64)> = vec![(Vec::new(), 0.0); AgentMode::ALL.len()];
    for round in 0..rounds {
        let mut line = Vec::new();
        for k in 0..AgentMode::ALL.len() {
            let i = (k + round) % AgentMode::ALL.len();
            let mode = AgentMode::ALL[i];
            let (ns, rss) = agent_round(&bin, &lp, mode, rate, seconds, &out)?;
            per_mode[i].0.push(ns);
            per_mode[i].1 = per_mode[i].1.max(rss);
            line.push(format!("{} {ns:.0} ns/IO", mode.name()));
        }
        eprintln!("round {}: {}", round + 1, line.join(" | "));
    }
    remove_scratch(&out);
    println!(
        "\n| daemon, fio 4k randread at {rate} IOPS | CPU per IO (median of {rounds}; quartiles) | peak RSS |"
    );
    println!("|---|---|---|");
    for (mode, (v, rss)) in AgentMode::ALL.iter().zip(&per_mode) {
        let (a, m, b) = quartiles(v);
        println!(
            "| {} | {m:.0} ns ({a:.0}-{b:.0}) | {rss:.1} MiB |",
            mode.name()
        );
    }
    Ok(())
}
