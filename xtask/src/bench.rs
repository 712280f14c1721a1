//! `cargo xtask bench`: the tracer's overhead, measured side by side in one run.
//!
//! fio 4 KB random reads at iodepth 32 on a loop device over /dev/shm (the fastest blk-mq
//! device here), alternating untraced and traced runs; the in-kernel cost per IO of our
//! programs (`bpf_stats`) next to libbpf-tools `biolatency -Q -D` measured the same way; the
//! daemon's CPU and peak RSS; bytes per IO on disk.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use analyzer::numeric::median;
use anyhow::{Context as _, Result, bail};
use tracer_common::format::TraceReader;

use crate::util::{build_release, is_root, output, root, run};

struct Loop {
    dev: String,
    img: PathBuf,
}

impl Loop {
    fn new(img: &Path, size: &str, direct: bool) -> Result<Loop> {
        run(Command::new("truncate").args(["-s", size]).arg(img))?;
        let mut c = Command::new("losetup");
        c.args(["-f", "--show"]);
        if direct {
            c.arg("--direct-io=on");
        }
        let dev = output(c.arg(img))?.trim().to_string();
        Ok(Loop {
            dev,
            img: img.to_owned(),
        })
    }
    fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
        )]
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        #[expect(clippy::let_underscore_must_use, reason = "as above")]
        let _ = std::fs::remove_file(&self.img);
    }
}

/// (busy, all) jiffies of all CPUs together, from /proc/stat; idle and iowait are not busy.
fn cpu_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let all: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (all - idle, all)
}

/// fio's IOPS and the share of the machine's CPU time that was busy meanwhile.
fn fio_iops_busy(dev: &str, seconds: u64) -> Result<(f64, f64)> {
    let (b0, a0) = cpu_jiffies();
    let iops = fio_iops(dev, seconds)?;
    let (b1, a1) = cpu_jiffies();
    Ok((iops, (b1 - b0) as f64 / (a1 - a0).max(1) as f64))
}

fn fio_iops(dev: &str, seconds: u64) -> Result<f64> {
    let out = output(Command::new("fio").args([
        "--name=bench",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=json",
    ]))?;
    let start = out.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&out[start..])?;
    v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("fio JSON has no read iops")
}

fn diskstats_reads(name: &str) -> Result<u64> {
    let text = std::fs::read_to_string("/proc/diskstats")?;
    let m = tracer_common::format::parse_diskstats(&text, 0);
    m.values()
        .find(|d| d.name == name)
        .map(|d| d.read_ios)
        .context("device not in /proc/diskstats")
}

/// Spawn and wait until `needle` appears on stderr (or a program shows up).
fn spawn_tracer(bin: &Path, args: &[&str]) -> Result<Child> {
    use std::io::Read;
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting blkprof-trace")?;
    let mut err = child.stderr.take().context("stderr")?;
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut byte = [0u8; 1];
    while Instant::now() < deadline {
        if err.read(&mut byte)? == 0 {
            bail!("blkprof-trace exited: {}", String::from_utf8_lossy(&buf));
        }
        buf.push(byte[0]);
        if String::from_utf8_lossy(&buf).contains("Ctrl-C") {
            // Keep draining stderr so the tracer never blocks on it.
            std::thread::spawn(move || {
                let mut sink = Vec::new();
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "this thread only drains the tracer's stderr so that it never blocks; what it reads, or fails to, is of no use"
                )]
                let _ = err.read_to_end(&mut sink);
            });
            return Ok(child);
        }
    }
    bail!("blkprof-trace did not attach")
}

/// CPU time of all of a process's threads, in seconds, from each thread's schedstat (time on
/// CPU in ns; /proc/PID/stat counts in jiffies, 50 ns per IO at 20k IOPS over 10 s).
pub(crate) fn proc_cpu_s(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 1e9
}

fn proc_hwm_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| {
            v.split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// (sum of `run_time_ns`, sum of `run_cnt` of `complete_name`) of loaded programs whose name matches.
fn prog_stats(matches: impl Fn(&str) -> bool, complete_name: &str) -> Result<(u64, u64)> {
    let out = output(Command::new("bpftool").args(["prog", "show", "-j"]))?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    let (mut ns, mut completions) = (0, 0);
    for p in v.as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("");
        if matches(name) {
            ns += p["run_time_ns"].as_u64().unwrap_or(0);
            if name.contains(complete_name) {
                completions += p["run_cnt"].as_u64().unwrap_or(0);
            }
        }
    }
    Ok((ns, completions))
}

/// Send a child SIGINT, as Ctrl-C would: the tracer then writes its trailer and summary.
fn interrupt(child: &Child) {
    #[expect(
        clippy::cast_possible_wrap,
        reason = "a pid is at most pid_max (2^22 at most), far below i32::MAX"
    )]
    let pid = child.id() as i32;
    // SAFETY: kill(2) on our own child, not yet reaped (we hold it), so the pid is still its.
    unsafe { libc::kill(pid, libc::SIGINT) };
}

/// Stop a tracer started by [`spawn_tracer`] and wait for it; its stdout (the end summary) is
/// the error if it did not exit cleanly.
fn stop_tracer(child: Child) -> Result<()> {
    interrupt(&child);
    let o = child.wait_with_output()?;
    if !o.status.success() {
        bail!(
            "blkprof-trace failed: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    Ok(())
}

fn bpf_stats(on: bool) -> Result<()> {
    std::fs::write(
        "/proc/sys/kernel/bpf_stats_enabled",
        if on { "1" } else { "0" },
    )
    .context("setting kernel.bpf_stats_enabled")
}

/// (first quartile, median, third quartile), nearest rank.
fn quartiles(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "an index: (len - 1) * q rounded, q in [0, 1]"
    )]
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.5), at(0.75))
}

struct Traced {
    iops: f64,
    records: u64,
    kernel_ios: u64,
    drops: u64,
    misses: u64,
    ns_per_io: f64,
    /// Each program's share of `ns_per_io`: (tracepoint, ns per IO).
    per_program: Vec<(String, f64)>,
    cpu_pct: f64,
    rss_mib: f64,
    bytes_per_io: f64,
}

/// "`block_io_start` 250 ns, ...": the median over runs of each program's ns per IO, for the
/// programs that ran.
fn per_program_medians(runs: &[Traced]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in runs.iter().flat_map(|t| &t.per_program) {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names
        .iter()
        .filter_map(|&name| {
            let v: Vec<f64> = runs
                .iter()
                .flat_map(|t| &t.per_program)
                .filter(|(n, _)| n == name)
                .map(|&(_, ns)| ns)
                .collect();
            let m = median(v);
            (m >= 0.5).then(|| format!("{name} {m:.0} ns"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// fio on `lp` while blkprof-trace traces `traced` (`lp` itself, or another device for the
/// cost of programs that only filter).
fn traced_round(bin: &Path, lp: &Loop, traced: &Loop, seconds: u64, out: &Path) -> Result<Traced> {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "clears the previous round's trace; there is none before the first round"
    )]
    let _ = std::fs::remove_file(out);
    let child = spawn_tracer(
        bin,
        &[
            "--device",
            traced.name(),
            "--output",
            &out.display().to_string(),
            "--quiet",
        ],
    )?;
    let pid = child.id();
    let before = diskstats_reads(lp.name())?;
    // The daemon's CPU while fio runs (its start-up, reading the kernel's BTF and loading the
    // programs, is before).
    let cpu0 = proc_cpu_s(pid);
    let t0 = Instant::now();
    let iops = fio_iops(&lp.dev, seconds)?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = proc_cpu_s(pid) - cpu0;
    let rss = proc_hwm_mib(pid);
    let after = diskstats_reads(lp.name())?;
    stop_tracer(child)?;
    let mut r = TraceReader::open(out)?;
    let mut buf = Vec::new();
    let mut records = 0u64;
    while r.next_chunk(&mut buf)? {
        records += buf.len() as u64;
    }
    let t = r.trailer().context("trace has no trailer")?.clone();
    let ns: u64 = t.counters_end.programs.iter().map(|p| p.run_time_ns).sum();
    let completions = t
        .counters_end
        .programs
        .iter()
        .find(|p| p.name == "block_rq_complete")
        .map_or(0, |p| p.run_cnt);
    let bytes = std::fs::metadata(out)?.len();
    Ok(Traced {
        iops,
        records,
        kernel_ios: after - before,
        drops: t.counters_end.ring_drops,
        misses: t.counters_end.reported_misses(),
        ns_per_io: ns as f64 / completions.max(1) as f64,
        per_program: t
            .counters_end
            .programs
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.run_time_ns as f64 / completions.max(1) as f64,
                )
            })
            .collect(),
        cpu_pct: cpu / wall * 100.0,
        rss_mib: rss,
        bytes_per_io: bytes as f64 / records.max(1) as f64,
    })
}

/// `blkprof-trace --no-records` (the in-kernel aggregates only) on `lp`: (IOPS, program time
/// per completion in ns, 0 unless `bpf_stats` is on).
fn aggregates_round(bin: &Path, lp: &Loop, seconds: u64) -> Result<(f64, f64)> {
    let child = spawn_tracer(bin, &["--device", lp.name(), "--quiet", "--no-records"])?;
    let ours = |n: &str| n.starts_with("blkprof");
    let (ns0, c0) = prog_stats(ours, "complet")?;
    let iops = fio_iops(&lp.dev, seconds)?;
    let (ns1, c1) = prog_stats(ours, "complet")?;
    stop_tracer(child)?;
    Ok((
        iops,
        ns1.saturating_sub(ns0) as f64 / c1.saturating_sub(c0).max(1) as f64,
    ))
}

fn biolatency_round(lp: &Loop, seconds: u64) -> Result<(f64, f64)> {
    let mut child = Command::new("biolatency")
        .args(["-Q", "-D"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting biolatency (Debian package libbpf-tools)")?;
    // Wait until its programs are loaded.
    let deadline = Instant::now() + Duration::from_secs(20);
    while prog_stats(
        |n| n.starts_with("block_rq_") && !n.starts_with("blkprof"),
        "complete",
    )?
    .1 == 0
        && Instant::now() < deadline
    {
        // Tiny IO so the programs have run once (run_cnt > 0 shows they are attached).
        #[expect(
            clippy::let_underscore_must_use,
            reason = "only a nudge so that the programs run once; the loop checks whether they did, until its deadline"
        )]
        let _ = Command::new("dd")
            .args([
                "if=/dev/zero",
                &format!("of={}", lp.dev),
                "bs=4k",
                "count=1",
                "oflag=direct",
                "status=none",
            ])
            .status();
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ns0, c0) = prog_stats(|n| n.starts_with("block_rq_"), "complete")?;
    let iops = fio_iops(&lp.dev, seconds)?;
    let (ns1, c1) = prog_stats(|n| n.starts_with("block_rq_"), "complete")?;
    interrupt(&child);
    #[expect(
        clippy::let_underscore_must_use,
        reason = "reaps biolatency after its SIGINT; its exit status says nothing about the figures"
    )]
    let _ = child.wait();
    Ok((iops, (ns1 - ns0) as f64 / (c1 - c0).max(1) as f64))
}

/// A queue setting of a device, put back when dropped.
struct QueueSetting {
    path: PathBuf,
    before: String,
}

impl QueueSetting {
    fn set(dev: &str, name: &str, value: &str) -> Result<QueueSetting> {
        let path = PathBuf::from(format!("/sys/block/{dev}/queue/{name}"));
        let before = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        std::fs::write(&path, value).with_context(|| format!("writing {}", path.display()))?;
        Ok(QueueSetting {
            path,
            before: before.trim().to_string(),
        })
    }
}

impl Drop for QueueSetting {
    fn drop(&mut self) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
        )]
        let _ = std::fs::write(&self.path, &self.before);
    }
}

/// The rounds again with completions on the submitting CPU: per round, the traced/untraced
/// and biolatency/untraced throughput, the traced run's `bpf_stats` cost, biolatency's.
#[derive(Default)]
struct SameCpu {
    ratios: Vec<f64>,
    bio_ratios: Vec<f64>,
    traced: Vec<Traced>,
    bio_ns: Vec<f64>,
}

/// The loop device completes each request in a softirq on another CPU than the one that
/// submitted it (seen in `perf record -a`: the probe's completion program runs in ksoftirqd/0
/// while fio submits on CPU 1), so every request's state in the probe moves between CPUs twice
/// per IO. A device with a queue per CPU (NVMe) completes on the submitting CPU; `rq_affinity`
/// 2 makes the loop device do the same. These rounds measure untraced, traced and biolatency
/// that way: the difference to the main rounds is what the moving costs.
fn same_cpu_rounds(
    ours: &Path,
    lp: &Loop,
    seconds: u64,
    rounds: usize,
    out: &Path,
) -> Result<SameCpu> {
    let _affinity = QueueSetting::set(lp.name(), "rq_affinity", "2")?;
    let mut r = SameCpu::default();
    for round in 0..rounds {
        bpf_stats(false)?;
        let (mut u, mut t, mut b) = (0.0, 0.0, 0.0);
        for k in 0..3 {
            match (k + round) % 3 {
                0 => u = fio_iops(&lp.dev, seconds)?,
                1 => t = traced_round(ours, lp, lp, seconds, out)?.iops,
                _ => b = biolatency_round(lp, seconds)?.0,
            }
        }
        bpf_stats(true)?;
        let mut st = traced_round(ours, lp, lp, seconds.min(5), out)?;
        let bio_ns = biolatency_round(lp, seconds.min(5))?.1;
        eprintln!(
            "round {} with completions on the submitting CPU: untraced {u:.0} IOPS | blkprof {t:.0} IOPS ({:.3}), {:.0} ns/IO | biolatency {b:.0} IOPS ({:.3}), {bio_ns:.0} ns/IO",
            round + 1,
            t / u,
            st.ns_per_io,
            b / u,
        );
        st.iops = t;
        r.ratios.push(t / u);
        r.bio_ratios.push(b / u);
        r.traced.push(st);
        r.bio_ns.push(bio_ns);
    }
    Ok(r)
}

pub(crate) fn bench(seconds: u64, rounds: usize) -> Result<()> {
    if !is_root() {
        bail!(
            "benchmarks load eBPF programs and create loop devices: run `cargo xtask bench` as root"
        );
    }
    build_release()?;
    let stats_before =
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let res = bench_inner(seconds, rounds);
    #[expect(
        clippy::let_underscore_must_use,
        reason = "puts the sysctl back as best it can; the benchmark's own result is what is returned"
    )]
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", stats_before.trim());
    res
}

fn bench_inner(seconds: u64, rounds: usize) -> Result<()> {
    let pid = std::process::id();
    let lp = Loop::new(
        Path::new(&format!("/dev/shm/blkprof-bench-{pid}.img")),
        "1G",
        false,
    )?;
    // A second, idle device: tracing it while fio reads `lp` runs our programs for every IO
    // up to the device filter, the cost of being attached.
    let other = Loop::new(
        Path::new(&format!("/dev/shm/blkprof-bench-other-{pid}.img")),
        "64M",
        false,
    )?;
    let out = std::env::temp_dir().join(format!("blkprof-bench-{pid}.blkp"));
    let ncpu = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    eprintln!(
        "bench: {} over /dev/shm, fio 4k randread iodepth 32, {seconds} s per run, {rounds} rounds, {ncpu} CPUs",
        lp.dev
    );
    let ours = root().join("target/release/blkprof-trace");
    // Another build of the tracer (say, of the commit before a probe change), run in every round
    // beside ours: before/after figures from one run instead of two noisy ones.
    let baseline = std::env::var_os("BLKPROF_BENCH_BASELINE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    if let Some(b) = &baseline {
        eprintln!("bench: baseline tracer {} in every round", b.display());
    }
    let mut base_runs: Vec<Traced> = Vec::new();
    let mut base_ratios = Vec::new();
    let (mut untraced, mut traced, mut bio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratios, mut floor_ratios, mut bio_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut busy, mut shares, mut floor_costs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut agg_ratios, mut agg_costs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Throughput with kernel.bpf_stats_enabled=0 (the stats themselves cost two clock reads
        // per program run), then the same traced runs again with stats on for the cost per IO.
        // The throughput runs (untraced, attached elsewhere, traced, biolatency, --no-records and
        // the baseline) in an order rotated every round, so that no configuration
        // always runs first or right after another (the ratios compare runs of one round).
        bpf_stats(false)?;
        let (mut u, mut u_busy, mut floor, mut t, mut b_iops) = (0.0, 0.0, 0.0, None, 0.0);
        let (mut base_iops, mut agg_iops) = (0.0, 0.0);
        let arms = if baseline.is_some() { 6 } else { 5 };
        for k in 0..arms {
            match (k + round) % arms {
                0 => (u, u_busy) = fio_iops_busy(&lp.dev, seconds)?,
                1 => floor = traced_round(&ours, &lp, &other, seconds, &out)?.iops,
                2 => t = Some(traced_round(&ours, &lp, &lp, seconds, &out)?),
                3 => b_iops = biolatency_round(&lp, seconds)?.0,
                4 => agg_iops = aggregates_round(&ours, &lp, seconds)?.0,
                _ => {
                    let b = baseline.as_deref().context("baseline")?;
                    base_iops = traced_round(b, &lp, &lp, seconds, &out)?.iops;
                }
            }
        }
        let mut t = t.context("no traced run")?;
        bpf_stats(true)?;
        let stats = traced_round(&ours, &lp, &lp, seconds.min(5), &out)?;
        (t.ns_per_io, t.per_program) = (stats.ns_per_io, stats.per_program);
        // The same programs when they only filter (tracing the idle device).
        let floor_ns = traced_round(&ours, &lp, &other, seconds.min(5), &out)?.ns_per_io;
        let b = (b_iops, biolatency_round(&lp, seconds.min(5))?.1);
        let agg = (agg_iops, aggregates_round(&ours, &lp, seconds.min(5))?.1);
        if let Some(b) = &baseline {
            let mut st = traced_round(b, &lp, &lp, seconds.min(5), &out)?;
            eprintln!(
                "round {}: baseline tracer {base_iops:.0} IOPS ({:.3}), {:.0} ns/IO",
                round + 1,
                base_iops / u,
                st.ns_per_io
            );
            base_ratios.push(base_iops / u);
            st.iops = base_iops;
            base_runs.push(st);
        }

        // The tracer's CPU time (programs at their bpf_stats cost, which includes the stats'
        // own clock reads, plus the daemon) as a share of all CPUs: when fio keeps every CPU
        // busy, about what tracing takes from it.
        let share = (t.ns_per_io * t.iops / 1e9 + t.cpu_pct / 100.0) / ncpu as f64;
        eprintln!(
            "round {}: untraced {:.0} IOPS (CPUs {:.0}% busy) | attached to another device {:.0} IOPS ({:.3}), {:.0} ns/IO | blkprof {:.0} IOPS ({:.3}), {} of {} IOs recorded, {} drops, {:.0} ns/IO, daemon {:.1}% of a core, tracer {:.1}% of all CPU | --no-records {:.0} IOPS ({:.3}), {:.0} ns/IO | biolatency {:.0} IOPS ({:.3}), {:.0} ns/IO",
            round + 1,
            u,
            u_busy * 100.0,
            floor,
            floor / u,
            floor_ns,
            t.iops,
            t.iops / u,
            t.records,
            t.kernel_ios,
            t.drops,
            t.ns_per_io,
            t.cpu_pct,
            share * 100.0,
            agg.0,
            agg.0 / u,
            agg.1,
            b.0,
            b.0 / u,
            b.1
        );
        ratios.push(t.iops / u);
        floor_ratios.push(floor / u);
        floor_costs.push(floor_ns);
        bio_ratios.push(b.0 / u);
        agg_ratios.push(agg.0 / u);
        agg_costs.push(agg.1);
        busy.push(u_busy);
        shares.push(share);
        untraced.push(u);
        traced.push(t);
        bio.push(b);
    }
    let same = same_cpu_rounds(&ours, &lp, seconds, rounds, &out)?;
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of the scratch trace once the rounds are done"
    )]
    let _ = std::fs::remove_file(&out);
    #[expect(clippy::let_underscore_must_use, reason = "as above")]
    let _ = std::fs::remove_file(out.with_extension("hlog"));
    let u = median(untraced.clone());
    let t_iops = median(traced.iter().map(|t| t.iops).collect::<Vec<_>>());
    let ours_ns = median(traced.iter().map(|t| t.ns_per_io).collect::<Vec<_>>());
    let bio_ns = median(bio.iter().map(|b| b.1).collect::<Vec<_>>());
    let all_recorded = traced
        .iter()
        .all(|t| t.records + t.misses >= t.kernel_ios && t.drops == 0);
    let records: u64 = traced.iter().map(|t| t.records).sum();
    let kernel: u64 = traced.iter().map(|t| t.kernel_ios).sum();
    let misses: u64 = traced.iter().map(|t| t.misses).sum();
    let drops: u64 = traced.iter().map(|t| t.drops).sum();
    let cpu = median(traced.iter().map(|t| t.cpu_pct).collect::<Vec<_>>());
    let rss = traced.iter().map(|t| t.rss_mib).fold(0.0, f64::max);
    let bpi = median(traced.iter().map(|t| t.bytes_per_io).collect::<Vec<_>>());
    let (q1, ratio, q3) = quartiles(&ratios);
    let (fq1, floor, fq3) = quartiles(&floor_ratios);
    let (bq1, b_ratio, bq3) = quartiles(&bio_ratios);
    let busy = median(busy);
    let share = median(shares);
    let check = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("\n| measure | value | target |");
    println!("|---|---|---|");
    println!(
        "| fio 4k randread iodepth 32, untraced (median of {rounds}) | {u:.0} IOPS, CPUs {:.0}% busy | |",
        busy * 100.0
    );
    println!("| same, traced by blkprof-trace | {t_iops:.0} IOPS | |");
    println!(
        "| traced / untraced (median of per-round ratios; quartiles) | {ratio:.3} ({q1:.3}-{q3:.3}) | >= 0.95: {} |",
        check(ratio >= 0.95)
    );
    println!(
        "| same, blkprof-trace attached but tracing another device | {floor:.3} ({fq1:.3}-{fq3:.3}) | |"
    );
    println!("| same, traced by biolatency -Q -D | {b_ratio:.3} ({bq1:.3}-{bq3:.3}) | |");
    let (aq1, a_ratio, aq3) = quartiles(&agg_ratios);
    println!(
        "| same, blkprof-trace --no-records (aggregates only) | {a_ratio:.3} ({aq1:.3}-{aq3:.3}) | |"
    );
    if !base_runs.is_empty() {
        let (a, m, b) = quartiles(&base_ratios);
        println!("| same, traced by the baseline tracer | {m:.3} ({a:.3}-{b:.3}) | |");
    }
    println!(
        "| tracer's CPU (programs at bpf_stats cost + daemon), share of all {ncpu} CPUs | {:.1}% | |",
        share * 100.0
    );
    println!(
        "| IOs recorded / kernel count (all rounds) | {records} / {kernel} ({misses} reported missed) | every IO: {} |",
        check(all_recorded)
    );
    println!(
        "| ring drops at default settings | {drops} | 0: {} |",
        check(drops == 0)
    );
    println!(
        "| in-kernel cost per IO, blkprof (all programs, bpf_stats, separate runs) | {ours_ns:.0} ns | below biolatency: {} |",
        check(ours_ns < bio_ns)
    );
    println!("| in-kernel cost per IO, biolatency -Q -D | {bio_ns:.0} ns | |");
    println!(
        "| in-kernel cost per IO, --no-records (its one program, bpf_stats) | {:.0} ns | |",
        median(agg_costs)
    );
    if !base_runs.is_empty() {
        println!(
            "| in-kernel cost per IO, the baseline tracer (same rounds) | {:.0} ns ({}) | |",
            median(base_runs.iter().map(|t| t.ns_per_io).collect::<Vec<_>>()),
            per_program_medians(&base_runs)
        );
    }
    println!(
        "| blkprof's cost per IO by program (medians) | {} | |",
        per_program_medians(&traced)
    );
    println!(
        "| same programs attached to another device (they stop at the device filter) | {:.0} ns | |",
        median(floor_costs)
    );
    let (sq1, s_ratio, sq3) = quartiles(&same.ratios);
    let (bio_q1, bio_same, bio_q3) = quartiles(&same.bio_ratios);
    let same_ns = median(same.traced.iter().map(|t| t.ns_per_io).collect::<Vec<_>>());
    let same_bio_ns = median(same.bio_ns.clone());
    println!(
        "| completions on the submitting CPU (rq_affinity 2, as NVMe): traced / untraced | {s_ratio:.3} ({sq1:.3}-{sq3:.3}) | |"
    );
    println!("| same, traced by biolatency -Q -D | {bio_same:.3} ({bio_q1:.3}-{bio_q3:.3}) | |");
    println!(
        "| in-kernel cost per IO there, blkprof | {same_ns:.0} ns ({}) | below biolatency: {} |",
        per_program_medians(&same.traced),
        check(same_ns < same_bio_ns)
    );
    println!("| in-kernel cost per IO there, biolatency -Q -D | {same_bio_ns:.0} ns | |");
    println!("| daemon CPU while tracing | {cpu:.1} % of one core | |");
    println!("| daemon peak RSS | {rss:.1} MiB | |");
    println!(
        "| trace file size | {bpi:.2} bytes per IO | <= 10: {} |",
        check(bpi <= 10.0)
    );
    Ok(())
}

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
    #[expect(
        clippy::let_underscore_must_use,
        reason = "clears the previous round's trace; there is none before the first round"
    )]
    let _ = std::fs::remove_file(out);
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
    output(Command::new("fio").args([
        "--name=agent",
        &format!("--filename={}", lp.dev),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        &format!("--rate_iops={rate}"),
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=json",
    ]))?;
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
    #[expect(
        clippy::let_underscore_must_use,
        reason = "the tracer's .hlog side file is not measured: best-effort cleanup"
    )]
    let _ = std::fs::remove_file(out.with_extension("hlog"));
    Ok((cpu * 1e9 / ios.max(1) as f64, rss))
}

/// `cargo xtask bench --agent`: the daemon's CPU per IO and peak RSS in each way of running,
/// at a fixed rate (fio 4 KB random reads), the modes rotated over rounds.
pub(crate) fn bench_agent(seconds: u64, rounds: usize, rate: u64) -> Result<()> {
    if !is_root() {
        bail!(
            "benchmarks load eBPF programs and create loop devices: run `cargo xtask bench` as root"
        );
    }
    build_release()?;
    let pid = std::process::id();
    let lp = Loop::new(
        Path::new(&format!("/dev/shm/blkprof-bench-agent-{pid}.img")),
        "1G",
        false,
    )?;
    let out = std::env::temp_dir().join(format!("blkprof-bench-agent-{pid}.blkp"));
    let bin = root().join("target/release/blkprof-trace");
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
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of the scratch trace once the rounds are done"
    )]
    let _ = std::fs::remove_file(&out);
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

/// Idle time of all CPUs so far, in ns: from cpuidle's per-state residency (µs) where the
/// kernel has a cpuidle driver, else from /proc/stat (idle + iowait, in `USER_HZ` ticks).
fn idle_ns() -> u64 {
    let mut us = 0u64;
    let mut found = false;
    if let Ok(cpus) = std::fs::read_dir("/sys/devices/system/cpu") {
        for c in cpus.filter_map(Result::ok) {
            let name = c.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with("cpu") || !name[3..].chars().all(|x| x.is_ascii_digit()) {
                continue;
            }
            let Ok(states) = std::fs::read_dir(c.path().join("cpuidle")) else {
                continue;
            };
            for s in states.filter_map(Result::ok) {
                if let Some(t) = std::fs::read_to_string(s.path().join("time"))
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                {
                    us += t;
                    found = true;
                }
            }
        }
    }
    if found {
        return us * 1000;
    }
    let (busy, all) = cpu_jiffies();
    (all - busy) * 10_000_000
}

/// How a fixed-rate arm runs the tracer.
#[derive(Clone, Copy, PartialEq)]
enum CpuArm {
    Untraced,
    /// Programs that return at once on the same tracepoints (`--attach-only`).
    Floor,
    /// Programs that read the clock once each (`--attach-only=clock`): the floor of a record
    /// per IO, each program's own instant.
    Clock,
    /// Per-IO records to a trace file.
    Records,
    /// `--no-records`: the in-kernel aggregates only.
    Aggregates,
    Biolatency,
    /// `BLKPROF_BENCH_BASELINE`'s tracer, records to a file.
    Baseline,
}

impl CpuArm {
    fn name(self) -> &'static str {
        match self {
            CpuArm::Untraced => "untraced",
            CpuArm::Floor => "attached, programs that do nothing",
            CpuArm::Clock => "attached, programs that read the clock once each",
            CpuArm::Records => "blkprof-trace --output (a record per IO)",
            CpuArm::Aggregates => "blkprof-trace --no-records",
            CpuArm::Biolatency => "biolatency -Q -D",
            CpuArm::Baseline => "baseline tracer --output",
        }
    }
}

/// What a fixed-rate round measured, per IO over its window.
struct CpuRound {
    /// Busy CPU ns of the whole machine.
    busy_ns: f64,
    ios: u64,
    /// The tracer process's own CPU ns.
    tracer_ns: f64,
    /// The load's own CPU ns.
    load_ns: f64,
    /// The arm's programs' run time ns (`bpf_stats`; 0 when off).
    programs_ns: f64,
}

/// A round while a paced load ([`crate::pacer`]) reads `lp` at `rate` IOPS, over a window that
/// leaves out the load's first second and its end.
fn cpu_round(
    arm: CpuArm,
    lp: &Loop,
    rate: u64,
    seconds: u64,
    out: &Path,
    baseline: Option<&Path>,
) -> Result<CpuRound> {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "clears the previous round's trace; there is none before the first round"
    )]
    let _ = std::fs::remove_file(out);
    let ours = root().join("target/release/blkprof-trace");
    let out_s = out.display().to_string();
    let mut tracer: Option<Child> = match arm {
        CpuArm::Untraced => None,
        CpuArm::Floor => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--attach-only"],
        )?),
        CpuArm::Clock => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--attach-only=clock"],
        )?),
        CpuArm::Records => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--output", &out_s],
        )?),
        CpuArm::Aggregates => Some(spawn_tracer(
            &ours,
            &["--device", lp.name(), "--quiet", "--no-records"],
        )?),
        CpuArm::Baseline => Some(spawn_tracer(
            baseline.context("baseline")?,
            &["--device", lp.name(), "--quiet", "--output", &out_s],
        )?),
        CpuArm::Biolatency => {
            let child = Command::new("biolatency")
                .args(["-Q", "-D"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting biolatency (Debian package libbpf-tools)")?;
            // It prints nothing until Ctrl-C: give it time to load and attach.
            std::thread::sleep(Duration::from_secs(2));
            Some(child)
        }
    };
    // Let start-up work (BTF, loading, the first device scan) settle.
    std::thread::sleep(Duration::from_millis(500));
    let pid = tracer.as_ref().map(Child::id);
    // The load runs a second before the window measured, and is stopped after it.
    let load = crate::pacer::Pacer::start(&lp.dev, rate, PACED_THREADS)?;
    std::thread::sleep(Duration::from_secs(1));
    // The arm's programs: biolatency's are named after their tracepoints.
    let programs = |n: &str| {
        if arm == CpuArm::Biolatency {
            n.starts_with("block_rq_") || n.starts_with("block_io_")
        } else {
            n.starts_with("blkprof")
        }
    };
    let sample = || -> Result<(Instant, u64, u64, f64, f64)> {
        Ok((
            Instant::now(),
            idle_ns(),
            diskstats_reads(lp.name())?,
            pid.map_or(0.0, proc_cpu_s),
            proc_cpu_s(std::process::id()),
        ))
    };
    let prog0 = if arm == CpuArm::Untraced {
        0
    } else {
        prog_stats(programs, "")?.0
    };
    let (t0, idle0, before, cpu0, load0) = sample()?;
    std::thread::sleep(Duration::from_secs(seconds));
    let (t1, idle1, after, cpu1, load1) = sample()?;
    let prog1 = if arm == CpuArm::Untraced {
        0
    } else {
        prog_stats(programs, "")?.0
    };
    load.stop()?;
    let wall = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
    let idle = idle1 - idle0;
    let ios = after - before;
    let cpu = cpu1 - cpu0;
    let load_cpu = load1 - load0;
    if let Some(child) = tracer.take() {
        interrupt(&child);
        let o = child.wait_with_output()?;
        if arm != CpuArm::Biolatency && !o.status.success() {
            bail!(
                "blkprof-trace failed: {}",
                String::from_utf8_lossy(&o.stdout)
            );
        }
    }
    #[expect(
        clippy::let_underscore_must_use,
        reason = "the tracer's .hlog side file is not measured: best-effort cleanup"
    )]
    let _ = std::fs::remove_file(out.with_extension("hlog"));
    let ncpu = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as u64;
    let busy = (wall * ncpu).saturating_sub(idle);
    let n = ios.max(1) as f64;
    Ok(CpuRound {
        busy_ns: busy as f64 / n,
        ios,
        tracer_ns: cpu * 1e9 / n,
        load_ns: load_cpu * 1e9 / n,
        programs_ns: prog1.saturating_sub(prog0) as f64 / n,
    })
}

/// Threads of the paced load in `cargo xtask bench --cpu`: IOs in flight at most, as fio's
/// iodepth was.
const PACED_THREADS: usize = 8;

/// `cargo xtask bench --cpu`: what tracing costs the machine at a fixed rate, the way a user
/// pays it. Paced 4 KB random direct reads ([`crate::pacer`]) at `rate` IOPS on a loop device
/// over /dev/shm; per arm the whole machine's busy CPU time per IO (all CPUs, wall time minus
/// idle time), the arms in an order rotated every round; each traced arm's cost is its busy
/// time per IO minus the untraced arm's of the same round.
pub(crate) fn bench_cpu(seconds: u64, rounds: usize, rate: u64, parts: bool) -> Result<()> {
    if !is_root() {
        bail!(
            "benchmarks load eBPF programs and create loop devices: run `cargo xtask bench` as root"
        );
    }
    build_release()?;
    let stats_before =
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    // By parts, bpf_stats times the programs (adding two clock reads to each run, which the
    // busy-CPU measure would count).
    bpf_stats(parts)?;
    let res = bench_cpu_inner(seconds, rounds, rate, parts);
    #[expect(
        clippy::let_underscore_must_use,
        reason = "puts the sysctl back as best it can; the benchmark's own result is what is returned"
    )]
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", stats_before.trim());
    res
}

fn bench_cpu_inner(seconds: u64, rounds: usize, rate: u64, parts: bool) -> Result<()> {
    let pid = std::process::id();
    let lp = Loop::new(
        Path::new(&format!("/dev/shm/blkprof-bench-cpu-{pid}.img")),
        "1G",
        false,
    )?;
    let out = std::env::temp_dir().join(format!("blkprof-bench-cpu-{pid}.blkp"));
    let baseline = std::env::var_os("BLKPROF_BENCH_BASELINE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let mut arms = vec![
        // By parts the untraced arm measures nothing: kept first all the same, so that the
        // arms' indices stay those of the busy-CPU table.
        CpuArm::Untraced,
        CpuArm::Floor,
        CpuArm::Clock,
        CpuArm::Records,
        CpuArm::Aggregates,
        CpuArm::Biolatency,
    ];
    if baseline.is_some() {
        arms.push(CpuArm::Baseline);
    }
    eprintln!(
        "bench: CPU per IO on {} over /dev/shm, paced 4k random direct reads at {rate} IOPS ({PACED_THREADS} threads), {seconds} s per run, {rounds} rounds, arms rotated",
        lp.dev
    );
    // Per arm: busy ns per IO minus the untraced arm's of the same round; the tracer's own.
    let mut added: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
    let mut own: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
    let mut load: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
    let mut kernel: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
    let mut untraced = Vec::new();
    for round in 0..rounds {
        let mut busy = vec![0.0; arms.len()];
        let mut line = Vec::new();
        for k in 0..arms.len() {
            let i = (k + round) % arms.len();
            if parts && arms[i] == CpuArm::Untraced {
                continue;
            }
            let r = cpu_round(arms[i], &lp, rate, seconds, &out, baseline.as_deref())?;
            busy[i] = r.busy_ns;
            own[i].push(r.tracer_ns);
            load[i].push(r.load_ns);
            kernel[i].push(r.programs_ns);
            line.push(if parts {
                format!(
                    "{} kernel {:.0} + tracer {:.0} ns/IO ({} IOs)",
                    arms[i].name(),
                    r.programs_ns,
                    r.tracer_ns,
                    r.ios
                )
            } else {
                format!("{} {:.0} ns/IO ({} IOs)", arms[i].name(), r.busy_ns, r.ios)
            });
        }
        eprintln!("round {}: {}", round + 1, line.join(" | "));
        if parts {
            continue;
        }
        untraced.push(busy[0]);
        for (i, b) in busy.iter().enumerate() {
            added[i].push(b - busy[0]);
        }
    }
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of the scratch trace once the rounds are done"
    )]
    let _ = std::fs::remove_file(&out);
    if parts {
        print_parts(&arms, &kernel, &own, rate, rounds, seconds);
        return Ok(());
    }
    let floor = median(added[1].clone());
    println!(
        "\n| paced 4k random reads at {rate} IOPS, {rounds} rounds of {seconds} s | added busy CPU per IO (median; quartiles) | x the floor | the tracer process's own CPU per IO | the load's own CPU per IO |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| untraced: busy CPU per IO | {:.0} ns | | | {:.0} ns |",
        median(untraced),
        median(load[0].clone())
    );
    for (i, arm) in arms.iter().enumerate().skip(1) {
        let (a, m, b) = quartiles(&added[i]);
        let times = if floor > 0.0 {
            format!("{:.1}", m / floor)
        } else {
            "-".into()
        };
        let own = if *arm == CpuArm::Biolatency {
            "-".to_string()
        } else {
            format!("{:.0} ns", median(own[i].clone()))
        };
        println!(
            "| {} | {m:.0} ns ({a:.0} to {b:.0}) | {times} | {own} | {:.0} ns |",
            arm.name(),
            median(load[i].clone())
        );
    }
    Ok(())
}

/// The table of `cargo xtask bench --cpu --parts`: per arm, the programs' and the tracer's ns
/// per IO (median and range over the rounds), their sum, and the sum over the floor's.
fn print_parts(
    arms: &[CpuArm],
    kernel: &[Vec<f64>],
    own: &[Vec<f64>],
    rate: u64,
    rounds: usize,
    seconds: u64,
) {
    let range = |v: &[f64]| format!("{:.0} ({})", median(v.to_vec()), crate::util::range(v));
    let sum = |i: usize| {
        let s: Vec<f64> = kernel[i].iter().zip(&own[i]).map(|(k, t)| k + t).collect();
        median(s)
    };
    let floor = sum(1);
    println!(
        "\n| paced 4k random reads at {rate} IOPS, {rounds} rounds of {seconds} s, by parts | the programs, ns per IO (bpf_stats): median (range) | the tracer process, ns per IO | sum | x the floor |"
    );
    println!("|---|---|---|---|---|");
    for (i, arm) in arms.iter().enumerate().skip(1) {
        let (tracer, s) = if *arm == CpuArm::Biolatency {
            // It prints only at the end: its process does no work per IO.
            ("-".to_string(), median(kernel[i].clone()))
        } else {
            (range(&own[i]), sum(i))
        };
        let times = if floor > 0.0 {
            format!("{:.1}", s / floor)
        } else {
            "-".into()
        };
        println!(
            "| {} | {} | {tracer} | {s:.0} | {times} |",
            arm.name(),
            range(&kernel[i])
        );
    }
}
