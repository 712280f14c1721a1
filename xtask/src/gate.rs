//! `cargo xtask gate-stability`: does `blkprof check` cry wolf, and does it catch what it should?
//!
//! Records baselines of one fixed fio job (4 KB random reads and writes 80/20, iodepth 8,
//! libaio, `O_DIRECT`) on a loop device with `O_DIRECT` backing, traced by the real blkprof-trace;
//! then the same job many times (alone and next to a busy neighbour) and three changed
//! workloads (a higher write share, 512 KB writes mixed in, a slower device); checks every
//! recording against the baselines with `blkprof check` and prints a pass/fail tally per
//! scenario; then checks them all again against baselines drawn at random from the recordings
//! of the same job. Each scenario's recordings are spread evenly over the run, so every
//! scenario meets the machine in the same states. `--recheck DIR` checks kept recordings again
//! without recording (no root needed). docs/check-rules.md has the figures.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::signal::{signal, signal_group};
use crate::util::{catch_signals, interrupted, is_root, output, range, root, sleep};

#[derive(clap::Args)]
#[expect(
    clippy::doc_markdown,
    reason = "clap help text: backticks would show in --help"
)]
pub(crate) struct Options {
    /// Recordings of the baseline's own workload, each checked against the baseline.
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    /// Recordings of the same workload next to a busy neighbour (a process spinning on a CPU).
    #[arg(long, default_value_t = 10)]
    pub busy_runs: usize,
    /// Recordings of each changed workload (write share, big writes, slow device).
    #[arg(long, default_value_t = 10)]
    pub changed_runs: usize,
    /// Recordings that make the baseline (each given to `blkprof check` as a --baseline;
    /// from 3 on, the default latency rules compare with the band they span).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub baselines: u64,
    /// After the tally, check everything again against this many sets of --baselines
    /// recordings drawn at random from all recordings of the same workload (baseline, same,
    /// busy): how often would another choice of baselines have cried wolf, or missed a change?
    /// 0 to skip.
    #[arg(long, default_value_t = 300)]
    pub resample: usize,
    /// Seconds of fio per recording.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub seconds: u64,
    /// Directory of the loop device's 1 GiB backing file (O_DIRECT must work there): /dev/shm
    /// makes the device as fast as the CPUs; a directory on a disk adds the disk's own noise.
    #[arg(long, default_value = "/dev/shm")]
    pub backing_dir: PathBuf,
    /// The slow device: the traced loop device over this many more loop devices over the same
    /// file (each layer one more trip through the block layer and a loop worker; 3 doubled
    /// the median latency here).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..8))]
    pub slow_layers: u64,
    /// Keep the recordings, their reports and the check outputs in this directory.
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// Record nothing: check the recordings kept in this directory (by --keep) again, with
    /// the blkprof in target/release and --rules.
    #[arg(long, conflicts_with = "keep")]
    pub recheck: Option<PathBuf>,
    /// With --recheck: take the baselines (and the resampled ones) from the recordings kept in
    /// this other directory: baselines recorded at one time, checks at another.
    #[arg(long, requires = "recheck")]
    pub baselines_from: Option<PathBuf>,
    /// Check with this rules file instead of the default rules.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Use the binaries already in target/release (no set-up, no cargo build).
    #[arg(long)]
    pub prebuilt: bool,
}

/// How a recording differs from the baseline's.
struct Scenario {
    name: &'static str,
    /// What `blkprof check` should say: fail (the workload or device changed) or pass.
    expect_fail: bool,
    what: &'static str,
    /// Percent of IOs that are reads.
    read_pct: u32,
    /// fio --bssplit, or None for 4 KB everywhere.
    bssplit: Option<&'static str>,
    slow_device: bool,
    busy_neighbour: bool,
}

const SAME: Scenario = Scenario {
    name: "same",
    expect_fail: false,
    what: "the baseline's workload",
    read_pct: 80,
    bssplit: None,
    slow_device: false,
    busy_neighbour: false,
};

const SCENARIOS: [Scenario; 5] = [
    SAME,
    Scenario {
        name: "busy",
        what: "the same, next to a process spinning on one CPU",
        busy_neighbour: true,
        ..SAME
    },
    Scenario {
        name: "write-share",
        expect_fail: true,
        what: "50/50 reads and writes instead of 80/20",
        read_pct: 50,
        ..SAME
    },
    Scenario {
        name: "big-writes",
        expect_fail: true,
        what: "5% of writes 512 KB instead of 4 KB",
        bssplit: Some("4k/100,4k/95:512k/5"),
        ..SAME
    },
    Scenario {
        name: "slow-device",
        expect_fail: true,
        what: "the same job on a slower device (loop over loop devices)",
        slow_device: true,
        ..SAME
    },
];

fn bin(name: &str) -> PathBuf {
    root().join("target/release").join(name)
}

/// Loop devices and the backing file, detached and removed on drop.
#[derive(Default)]
struct Devices {
    img: Option<PathBuf>,
    /// In attach order: the plain device first, then the slow stack bottom up.
    loops: Vec<String>,
}

impl Devices {
    fn attach(&mut self, backing: &Path) -> Result<String> {
        let dev = output(
            Command::new("losetup")
                .args(["-f", "--show", "--direct-io=on"])
                .arg(backing),
        )?
        .trim()
        .to_string();
        self.loops.push(dev.clone());
        let name = dev.trim_start_matches("/dev/");
        let dio =
            std::fs::read_to_string(format!("/sys/block/{name}/loop/dio")).unwrap_or_default();
        if dio.trim() != "1" {
            bail!(
                "{dev} over {} does not use O_DIRECT (its file system refuses it): give --backing-dir a directory on ext4, xfs or tmpfs",
                backing.display()
            );
        }
        Ok(dev)
    }
}

impl Drop for Devices {
    fn drop(&mut self) {
        while let Some(d) = self.loops.pop() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = Command::new("losetup").args(["-d", &d]).status();
        }
        if let Some(img) = self.img.take() {
            #[expect(
                clippy::let_underscore_must_use,
                reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
            )]
            let _ = std::fs::remove_file(img);
        }
    }
}

/// Children killed (their whole process group) when dropped: the tracer, fio, the neighbour.
struct Spawned(Vec<Child>);

impl Drop for Spawned {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                signal_group(c, libc::SIGKILL);
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "reaps the child just killed in Drop; its exit status is of no use"
                )]
                let _ = c.wait();
            }
        }
    }
}

/// Write `bytes` of zeros, so that the device's blocks exist before it is measured (the
/// first writes into a sparse file allocate, and ran at half the speed here).
fn prefill(path: &Path, bytes: u64) -> Result<()> {
    use std::io::Write as _;
    let mut f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..bytes / chunk.len() as u64 {
        f.write_all(&chunk)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    f.sync_all()?;
    Ok(())
}

/// Trace `dev` while fio runs `s`'s job on it; writes `trace`, `trace`.json (the report) and
/// `trace`.fio.json.
fn record(dev: &str, s: &Scenario, seconds: u64, trace: &Path) -> Result<()> {
    let name = dev.trim_start_matches("/dev/");
    let mut spawned = Spawned(Vec::new());
    let mut tracer = Command::new(bin("blkprof-trace"))
        .args(["--device", name, "--quiet", "--output"])
        .arg(trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .context("cannot start blkprof-trace")?;
    let mut err = tracer.stderr.take().context("tracer stderr")?;
    spawned.0.push(tracer);
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        let mut attached = false;
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if !attached && seen.contains("tracing ") {
                attached = true;
                #[expect(
                    clippy::let_underscore_must_use,
                    reason = "the receiver stops listening once it has given up waiting; then there is no one to tell"
                )]
                let _ = tx.send(());
            }
        }
        seen
    });
    let end = Instant::now() + Duration::from_secs(60);
    while rx.recv_timeout(Duration::from_millis(100)).is_err() {
        interrupted()?;
        if let Some(st) = spawned.0[0].try_wait()? {
            bail!(
                "blkprof-trace exited ({st}) before attaching: {}",
                stderr.join().unwrap_or_default()
            );
        }
        if Instant::now() > end {
            bail!("blkprof-trace did not attach within 60 s");
        }
    }
    if s.busy_neighbour {
        spawned.0.push(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .process_group(0)
                .spawn()
                .context("cannot start the busy neighbour")?,
        );
    }
    let mut fio = Command::new("fio");
    fio.args([
        "--name=gate",
        &format!("--filename={dev}"),
        "--rw=randrw",
        &format!("--rwmixread={}", s.read_pct),
        "--iodepth=8",
        "--ioengine=libaio",
        "--direct=1",
        // Without it, fio shrinks a big IO to fit between blocks already touched.
        "--norandommap",
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=json",
    ]);
    // Into files, not pipes that nobody reads while fio runs.
    let fio_json = with_suffix(trace, ".fio.json");
    let fio_err = with_suffix(trace, ".fio.err");
    fio.arg(format!("--output={}", fio_json.display()));
    match s.bssplit {
        Some(split) => fio.arg(format!("--bssplit={split}")),
        None => fio.arg("--bs=4k"),
    };
    let fio = fio
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&fio_err)?)
        .process_group(0)
        .spawn()
        .context("cannot start fio (cargo xtask setup installs it)")?;
    spawned.0.push(fio);
    let deadline = Instant::now() + Duration::from_secs(seconds + 60);
    while spawned.0.last_mut().expect("fio").try_wait()?.is_none() {
        sleep(Duration::from_millis(50))?;
        if Instant::now() > deadline {
            bail!("fio did not end within {} s", seconds + 60);
        }
    }
    let status = spawned.0.pop().expect("fio").wait()?;
    let messages = std::fs::read_to_string(&fio_err).unwrap_or_default();
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup of fio's stderr file, already read"
    )]
    let _ = std::fs::remove_file(&fio_err);
    if !status.success() {
        bail!("fio failed ({status}): {messages}");
    }
    if s.busy_neighbour {
        // Dropping the guard kills it.
        drop(Spawned(spawned.0.pop().into_iter().collect()));
    }
    let mut tracer = spawned.0.pop().expect("tracer");
    signal(&tracer, libc::SIGINT);
    let status = tracer.wait()?;
    let messages = stderr.join().unwrap_or_default();
    if !status.success() {
        bail!("blkprof-trace failed ({status}): {messages}");
    }
    report(trace)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `blkprof report TRACE --json` to TRACE.json.
fn report(trace: &Path) -> Result<()> {
    let json = output(
        Command::new(bin("blkprof"))
            .arg("report")
            .arg(trace)
            .arg("--json"),
    )?;
    std::fs::write(with_suffix(trace, ".json"), json)?;
    Ok(())
}

/// What the tally shows of one recording.
struct Checked {
    pass: bool,
    failed_rules: Vec<String>,
    read_p1_us: f64,
    read_p50_us: f64,
    read_p99_us: f64,
    write_p99_us: f64,
    read_iops: f64,
    read_pct_ios: f64,
}

fn figures(trace: &Path) -> Result<serde_json::Value> {
    let path = with_suffix(trace, ".json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    // The busiest device: the only one traced.
    let dev = v["devices"]
        .as_array()
        .and_then(|d| {
            d.iter().max_by_key(|d| {
                d["ops"]
                    .as_object()
                    .map(|o| o.values().filter_map(|o| o["ios"].as_u64()).sum::<u64>())
            })
        })
        .cloned()
        .with_context(|| format!("{}: no device", path.display()))?;
    Ok(dev)
}

fn check(trace: &Path, baselines: &[PathBuf], rules: Option<&Path>) -> Result<Checked> {
    let mut c = Command::new(bin("blkprof"));
    c.arg("check").arg(trace);
    for b in baselines {
        c.arg("--baseline").arg(b);
    }
    if let Some(r) = rules {
        c.arg("--rules").arg(r);
    }
    let out = c.output().context("cannot run blkprof check")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(with_suffix(trace, ".check.txt"), &text)?;
    let pass = match out.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => bail!(
            "blkprof check {} failed ({}): {}",
            trace.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    let failed_rules = text
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL"))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect();
    let d = figures(trace)?;
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    Ok(Checked {
        pass,
        failed_rules,
        read_p1_us: d["ops"]["read"]["total_latency_us"]["quantiles"]
            .as_array()
            .and_then(|q| q.iter().find(|e| e[0].as_f64() == Some(0.01)))
            .map_or(f64::NAN, |e| f(&e[1])),
        read_p50_us: f(&d["ops"]["read"]["total_latency_us"]["p50"]),
        read_p99_us: f(&d["ops"]["read"]["total_latency_us"]["p99"]),
        write_p99_us: f(&d["ops"]["write"]["total_latency_us"]["p99"]),
        read_iops: f(&d["throughput"]["read"]["mean_iops"]),
        read_pct_ios: f(&d["ops"]["read"]["pct_ios"]),
    })
}

/// The median of the finite values; NaN (shown as n/a) if there are none.
fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    analyzer::numeric::median(v)
}

fn trace_name(scenario: &str, i: usize) -> String {
    format!("{scenario}-{:02}.blkp", i + 1)
}

pub(crate) fn gate_stability(o: &Options) -> Result<()> {
    let started = Instant::now();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let counts = |s: &Scenario| match s.name {
        "same" => o.runs,
        "busy" => o.busy_runs,
        _ => o.changed_runs,
    };
    let mut dir_guard = None;
    let dir = if let Some(d) = &o.recheck {
        d.clone()
    } else {
        if !is_root() {
            bail!(
                "this task creates loop devices and loads eBPF programs: run `cargo xtask gate-stability` as root (or --recheck DIR on kept recordings)"
            );
        }
        catch_signals();
        let d = if let Some(d) = &o.keep {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        } else {
            let d = std::env::temp_dir().join(format!("blkprof-gate-{}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            dir_guard = Some(TempDir(d.clone()));
            d
        };
        record_all(o, &d, &counts)?;
        d
    };

    let base_dir = o.baselines_from.clone().unwrap_or_else(|| dir.clone());
    let baselines: Vec<PathBuf> = (0..usize::try_from(o.baselines)?)
        .map(|i| base_dir.join(trace_name("baseline", i)))
        .collect();
    if o.recheck.is_some() {
        for b in &baselines {
            if !b.exists() {
                bail!(
                    "{} is missing (recorded with fewer --baselines?)",
                    b.display()
                );
            }
            report(b)?;
        }
    }
    let baseline_json: Vec<PathBuf> = baselines.iter().map(|b| with_suffix(b, ".json")).collect();
    let base: Vec<serde_json::Value> = baselines
        .iter()
        .map(|b| figures(b))
        .collect::<Result<_>>()?;
    let base_p50 = median(
        base.iter()
            .map(|d| {
                d["ops"]["read"]["total_latency_us"]["p50"]
                    .as_f64()
                    .unwrap_or(f64::NAN)
            })
            .collect(),
    );

    print_header(o, baselines.len(), &dir);
    let mut unexpected = 0;
    let mut total = 0;
    for s in &SCENARIOS {
        let n = counts(s);
        if n == 0 {
            continue;
        }
        let (wrong, checked) = check_scenario(o, s, n, &dir, &baseline_json, base_p50)?;
        unexpected += wrong;
        total += checked;
    }
    println!("\nscenarios:");
    for s in &SCENARIOS {
        println!("  {:<12} {}", s.name, s.what);
    }
    println!(
        "figures: median (range) over the recordings; latency is total latency (OS queue + device); baseline read p50 {base_p50:.0} us"
    );
    if o.recheck.is_none() {
        println!(
            "{} recordings of {} s in {:.1} min; load average before: {}, after: {}",
            total + baselines.len(),
            o.seconds,
            started.elapsed().as_secs_f64() / 60.0,
            load_before
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if o.resample > 0 {
        resample(o, &dir, &counts)?;
    }
    drop(dir_guard);
    if unexpected > 0 {
        bail!("{unexpected} of {total} verdicts were not the expected one");
    }
    Ok(())
}

/// The table's title (what is checked against which baselines) and its column heads.
fn print_header(o: &Options, baselines: usize, dir: &Path) {
    println!();
    println!(
        "blkprof check {} against {} ({}{}):",
        if o.rules.is_some() {
            "with --rules"
        } else {
            "with the default rules"
        },
        if baselines == 1 {
            "one baseline recording".to_string()
        } else {
            format!("{baselines} baseline recordings")
        },
        dir.display(),
        match &o.baselines_from {
            Some(b) => format!(", baselines from {}", b.display()),
            None => String::new(),
        }
    );
    println!(
        "{:<12} {:<6} {:>4} {:>4} {:>8}  {:>16} {:>15} {:>6} {:>16} {:>16} {:>19} {:>6}  rules that failed (times)",
        "scenario",
        "expect",
        "pass",
        "fail",
        "expected",
        "read p1 us",
        "read p50 us",
        "x base",
        "read p99 us",
        "write p99 us",
        "read IOPS",
        "read %"
    );
}

/// Check scenario `s`'s `n` recordings in `dir` against the baselines and print its row:
/// (verdicts that were not the expected one, verdicts).
fn check_scenario(
    o: &Options,
    s: &Scenario,
    n: usize,
    dir: &Path,
    baseline_json: &[PathBuf],
    base_p50: f64,
) -> Result<(usize, usize)> {
    let mut results = Vec::new();
    for i in 0..n {
        let t = dir.join(trace_name(s.name, i));
        if o.recheck.is_some() && !t.exists() {
            break;
        }
        if o.recheck.is_some() {
            report(&t)?;
        }
        results.push(check(&t, baseline_json, o.rules.as_deref())?);
    }
    let pass = results.iter().filter(|r| r.pass).count();
    let fail = results.len() - pass;
    let ok = if s.expect_fail { fail } else { pass };
    let mut failed: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &results {
        for m in &r.failed_rules {
            *failed.entry(m).or_default() += 1;
        }
    }
    let col = |f: fn(&Checked) -> f64| results.iter().map(f).collect::<Vec<f64>>();
    let spread = |v: Vec<f64>| format!("{:.0} ({})", median(v.clone()), range(&v));
    let spread1 = |v: Vec<f64>| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{:.1} ({lo:.1}-{hi:.1})", median(v))
    };
    let p50 = col(|r| r.read_p50_us);
    println!(
        "{:<12} {:<6} {:>4} {:>4} {:>8}  {:>16} {:>15} {:>6.2} {:>16} {:>16} {:>19} {:>6.1}  {}",
        s.name,
        if s.expect_fail { "fail" } else { "pass" },
        pass,
        fail,
        format!("{ok}/{}", results.len()),
        spread1(col(|r| r.read_p1_us)),
        spread(p50.clone()),
        median(p50) / base_p50,
        spread(col(|r| r.read_p99_us)),
        spread(col(|r| r.write_p99_us)),
        spread(col(|r| r.read_iops)),
        median(col(|r| r.read_pct_ios)),
        failed
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((results.len() - ok, results.len()))
}

/// The scratch directory of a run without --keep, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        #[expect(
            clippy::let_underscore_must_use,
            reason = "best-effort cleanup in Drop: there is no caller to report a failure to"
        )]
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn record_all(o: &Options, dir: &Path, counts: &dyn Fn(&Scenario) -> usize) -> Result<()> {
    let mut devs = Devices::default();
    let img = o
        .backing_dir
        .join(format!("blkprof-gate-{}.img", std::process::id()));
    devs.img = Some(img.clone());
    prefill(&img, 1 << 30)?;
    let plain = devs.attach(&img)?;
    let mut slow = devs.attach(&img)?;
    for _ in 0..o.slow_layers {
        slow = devs.attach(Path::new(&slow))?;
    }
    eprintln!(
        "gate-stability: plain device {plain}, slow device {slow} ({} loop devices over the same file), backing file {}",
        o.slow_layers + 1,
        img.display()
    );
    let total = usize::try_from(o.baselines)? + SCENARIOS.iter().map(counts).sum::<usize>();
    let mut done = 0;
    let mut step = |s: &Scenario, name: String| -> Result<()> {
        interrupted()?;
        done += 1;
        let t = Instant::now();
        let dev = if s.slow_device { &slow } else { &plain };
        record(dev, s, o.seconds, &dir.join(&name))?;
        eprintln!(
            "gate-stability: [{done}/{total}] {name} ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
        Ok(())
    };
    for i in 0..usize::try_from(o.baselines)? {
        step(&SAME, trace_name("baseline", i))?;
    }
    // Each scenario's recordings spread evenly over the rounds: each meets the machine in the
    // same states.
    let rounds = SCENARIOS.iter().map(counts).max().unwrap_or(0);
    for i in 0..rounds {
        for s in &SCENARIOS {
            let n = counts(s);
            let (before, after) = (i * n / rounds, (i + 1) * n / rounds);
            if after > before {
                step(s, trace_name(s.name, before))?;
            }
        }
    }
    Ok(())
}

type Report = analyzer::summary::JsonReport;

/// A kept run's reports: of the same workload (baselines, same, busy), and of each changed one.
type Recordings = (Vec<Report>, Vec<(&'static str, Vec<Report>)>);

fn load(trace: &Path) -> Result<Report> {
    let path = with_suffix(trace, ".json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a report", path.display()))
}

/// Check every recording again against baselines of `--baselines` recordings drawn from all
/// recordings of the same workload (the check's own code, on the kept reports): with the
/// baseline the tally used, a lucky or unlucky draw would not show.
fn resample(o: &Options, dir: &Path, counts: &dyn Fn(&Scenario) -> usize) -> Result<()> {
    let k = usize::try_from(o.baselines)?;
    // (recordings of the same workload, of each changed one)
    let recordings = |dir: &Path| -> Result<Recordings> {
        let mut same = Vec::new();
        let mut changed = Vec::new();
        for i in 0.. {
            let t = dir.join(trace_name("baseline", i));
            if !t.exists() {
                break;
            }
            same.push(load(&t)?);
        }
        for s in &SCENARIOS {
            let mut v = Vec::new();
            for i in 0..counts(s) {
                let t = dir.join(trace_name(s.name, i));
                if t.exists() {
                    v.push(load(&t)?);
                }
            }
            if s.expect_fail {
                changed.push((s.name, v));
            } else {
                same.extend(v);
            }
        }
        Ok((same, changed))
    };
    let (pool, changed) = recordings(dir)?;
    // Baselines from another time, or from the same recordings (then never checked against
    // themselves).
    let other = match &o.baselines_from {
        Some(b) => Some(recordings(b)?.0),
        None => None,
    };
    let own = other.is_none();
    let base_pool = other.as_ref().unwrap_or(&pool);
    if base_pool.len() <= k {
        return Ok(());
    }
    let rules = match &o.rules {
        Some(p) => serde_json::from_slice(&std::fs::read(p)?)
            .with_context(|| format!("{}: not a rules file", p.display()))?,
        None => analyzer::check::Rules {
            device: None,
            rules: analyzer::check::default_rules_for(k),
        },
    };
    // One baseline: each recording in turn; more: random sets.
    let mut rng = analyzer::synth::Rng(0x9e37_79b9_7f4a_7c15);
    let sets: Vec<Vec<usize>> = if k == 1 {
        (0..base_pool.len()).map(|i| vec![i]).collect()
    } else {
        (0..o.resample)
            .map(|_| {
                let mut set = Vec::new();
                while set.len() < k {
                    #[expect(
                        clippy::cast_possible_truncation,
                        reason = "below base_pool.len(), a usize"
                    )]
                    let i = rng.below(base_pool.len() as u64) as usize;
                    if !set.contains(&i) {
                        set.push(i);
                    }
                }
                set
            })
            .collect()
    };
    // The rules a check failed (none: it passed).
    let failed = |trace: &Report, set: &[usize]| -> Result<Vec<String>> {
        let base: Vec<&Report> = set.iter().map(|&i| &base_pool[i]).collect();
        let v = analyzer::check::check_against(trace, &base, &rules, false)
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(v.into_iter()
            .filter(|v| !v.pass)
            .map(|v| v.rule.metric)
            .collect())
    };
    let fails =
        |trace: &Report, set: &[usize]| -> Result<bool> { Ok(!failed(trace, set)?.is_empty()) };
    let (mut wolf, mut same_checks) = (0, 0);
    let mut wolf_rules: BTreeMap<String, usize> = BTreeMap::new();
    let mut missed: Vec<(&str, usize, usize)> = Vec::new();
    for set in &sets {
        for (i, r) in pool.iter().enumerate() {
            if !own || !set.contains(&i) {
                same_checks += 1;
                let f = failed(r, set)?;
                wolf += usize::from(!f.is_empty());
                for m in f {
                    *wolf_rules.entry(m).or_default() += 1;
                }
            }
        }
    }
    for (name, v) in &changed {
        let mut m = 0;
        for set in &sets {
            for r in v {
                m += usize::from(!fails(r, set)?);
            }
        }
        missed.push((name, m, sets.len() * v.len()));
    }
    println!(
        "resampled: {} baseline sets of {k} drawn from the {} recordings of the same workload{}: {wolf} of {same_checks} checks of the same workload failed{}; changed workloads passed: {}",
        sets.len(),
        base_pool.len(),
        if own { "" } else { " in --baselines-from" },
        if wolf_rules.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                wolf_rules
                    .iter()
                    .map(|(m, n)| format!("{m} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        missed
            .iter()
            .map(|(n, m, of)| format!("{n} {m} of {of}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
