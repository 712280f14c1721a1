//! The agent's metrics as a real Prometheus server sees them: scraped every second while a
//! known fio job runs on a loop device, then asked through its HTTP API. The counters must
//! move exactly as /proc/diskstats does; the histograms' p99 must agree with the report of
//! the trace recorded alongside within the buckets' stated error.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use analyzer::numeric::f64_to_u64_saturating;
use blkprof_e2e::{
    Scratch, TestDir, Trace, Tracer, assert_misses_are_skipped_runs, bin, delta, fio, free_port,
    http_get, report_json,
};
use tracer_common::format::{Ending, IoRecord};
use tracer_common::op::StatGroup;

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server scraping `target` every second, stopped on drop.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target: u16) -> Prometheus {
        let port = free_port();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: blkprof\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus is installed (cargo xtask setup)");
        let p = Prometheus { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(port, "/-/ready", None).is_none_or(|(s, _)| s != 200) {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// An instant query at `at` (Unix seconds): the result vector.
    fn query(&self, q: &str, at: f64) -> Vec<serde_json::Value> {
        let (status, body) = http_get(
            self.port,
            &format!("/api/v1/query?query={}&time={at:.3}", urlencode(q)),
            None,
        )
        .expect("prometheus answers");
        assert_eq!(status, 200, "{q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The one value of an instant query.
    fn value(&self, q: &str, at: f64) -> f64 {
        let r = self.query(q, at);
        assert_eq!(r.len(), 1, "{q}: one series expected, got {r:?}");
        r[0]["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{q}: {r:?}"))
    }
}

impl Drop for Prometheus {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `promtool check metrics` passes `text` (a scrape of the endpoint) without a word.
fn assert_promtool_passes(text: &str) {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (cargo xtask setup)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = check.wait_with_output().unwrap();
    assert!(
        o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every expression of docs/agent/grafana-dashboard.json, for `device`, finds series on
/// `prom` at `at` (Unix s), and names only metrics `text` (a scrape of the endpoint) serves.
fn assert_dashboard_runs(prom: &Prometheus, text: &str, device: &str, at: f64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/agent/grafana-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard JSON");
    let mut exprs = 0;
    for p in dash["panels"].as_array().unwrap() {
        for tg in p["targets"].as_array().unwrap() {
            let e = tg["expr"].as_str().unwrap();
            for name in e
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("blkprof_"))
            {
                let base = name.strip_suffix("_bucket").unwrap_or(name);
                assert!(
                    text.contains(&format!("\n{name}{{"))
                        || text.contains(&format!("# TYPE {base} ")),
                    "{}: {name} is not served",
                    p["title"]
                );
            }
            let q = e
                .replace("$__rate_interval", "4s")
                .replace("$device", device);
            let r = prom.query(&q, at);
            assert!(!r.is_empty(), "{}: {q} found nothing", p["title"]);
            exprs += 1;
        }
    }
    assert!(exprs >= 10, "{exprs}");
}

#[test]
fn prometheus_sees_exact_counters_and_the_reports_p99() {
    let dir = TestDir::new();
    let dev = Scratch::new("prom", 512, true, false);
    let port = free_port();
    let trace = dir.join("agent.blkp");
    let addr = format!("127.0.0.1:{port}");
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        trace.to_str().unwrap(),
        "--quiet",
        "--metrics-addr",
        &addr,
    ]);
    assert!(
        t.stderr
            .contains(&format!("metrics at http://{addr}/metrics")),
        "{}",
        t.stderr
    );

    // The exposition is valid as promtool reads it, in both formats.
    let (status, text) = http_get(port, "/metrics", None).expect("the endpoint answers");
    assert_eq!(status, 200);
    assert_promtool_passes(&text);
    let (_, om) = http_get(
        port,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    )
    .unwrap();
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE blkprof_ios counter"));
    let (status, _) = http_get(port, "/nothing", None).unwrap();
    assert_eq!(status, 404);

    let prom = Prometheus::start(dir.path(), port);
    let labels = format!("job=\"blkprof\",device=\"{}\"", dev.name);
    // Scrapes succeed (Prometheus asks for OpenMetrics first, so this reads that format).
    let deadline = Instant::now() + Duration::from_secs(30);
    while prom.query("up{job=\"blkprof\"} == 1", now_s()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the tracer"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // The device is idle from `before` to t1, and from `after` to t2, and the scrapes every
    // second put a sample in each of those stretches: the values at t1 and t2 are the
    // counters as they were at `before` and `after`.
    let before = dev.diskstats();
    std::thread::sleep(Duration::from_millis(2500));
    let t1 = now_s();
    fio(&[
        "--name=agent",
        &format!("--filename={}", dev.path),
        "--rw=randrw",
        "--rwmixread=70",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--runtime=6",
        "--time_based",
        "--randrepeat=0",
    ]);
    let after = dev.diskstats();
    std::thread::sleep(Duration::from_millis(2500));
    let t2 = now_s();
    let window = format!("{}ms", f64_to_u64_saturating((t2 - t1) * 1000.0));
    let kernel = delta(&before, &after);

    // Exact, but for the completions the probe never saw (this machine's vendor kernel
    // misses about 1 in 10,000 under fio; the tracer counts them): Prometheus's delta is the
    // kernel's less those, every IO being 4 KiB.
    let mut short = 0;
    let mut rows = Vec::new();
    for (g, op) in [(StatGroup::Read, "read"), (StatGroup::Write, "write")] {
        let (k_ios, k_bytes) = kernel.get(&g).copied().unwrap_or_default();
        assert!(k_ios > 1000, "{op}: the job did IO ({k_ios})");
        let mut got = [0u64; 2];
        for (i, metric) in ["blkprof_ios_total", "blkprof_bytes_total"]
            .iter()
            .enumerate()
        {
            let sel = format!("{metric}{{{labels},op=\"{op}\"}}");
            got[i] =
                f64_to_u64_saturating(prom.value(&format!("{sel} - {sel} offset {window}"), t2));
        }
        rows.push(format!(
            "{op}: Prometheus {} IOs {} bytes, /proc/diskstats {k_ios} IOs {k_bytes} bytes",
            got[0], got[1]
        ));
        assert!(got[0] <= k_ios, "{}", rows.join("; "));
        assert_eq!(
            k_bytes - got[1],
            (k_ios - got[0]) * 4096,
            "{}",
            rows.join("; ")
        );
        short += k_ios - got[0];
    }
    eprintln!("{}", rows.join("; "));

    // Every expression of the Grafana dashboard runs on this Prometheus and finds series, and
    // names only metrics the endpoint serves.
    assert_dashboard_runs(&prom, &text, &dev.name, t1 + 4.0);

    let f = t.stop();
    assert!(f.status.success(), "{}\n{}", f.stderr, f.stdout);
    let tr = Trace::read(&trace);
    assert_misses_are_skipped_runs(&tr, "metrics");
    let c = &tr.trailer.as_ref().unwrap().counters_end;
    assert_eq!(c.ring_drops, 0);
    assert!(
        short <= c.missed_completions,
        "Prometheus is {short} IOs short of the kernel; the run reported {} missed completions",
        c.missed_completions
    );
    eprintln!(
        "short of the kernel: {short} IOs; missed completions reported by the run: {}",
        c.missed_completions
    );
    let j = report_json(&trace);
    let d = j["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == dev.name.as_str())
        .expect("the device in the report")
        .clone();
    // The trace holds only the job's IOs (the device was otherwise idle), so its p99 is the
    // window's. A quantile from log-linear buckets is within a bucket's width of the truth:
    // at most 1/4 of its value (4 buckets per power of two); the report's HDR histogram adds
    // 0.1%.
    let mut compared = Vec::new();
    for op in ["read", "write"] {
        for (phase, key) in [
            ("total", "total_latency_us"),
            ("device", "device_latency_us"),
        ] {
            let want_us = d["ops"][op][key]["p99"].as_f64().unwrap();
            let sel =
                format!("blkprof_latency_seconds_bucket{{{labels},op=\"{op}\",phase=\"{phase}\"}}");
            let q =
                format!("histogram_quantile(0.99, sum by (le) ({sel} - {sel} offset {window}))");
            let got_us = prom.value(&q, t2) * 1e6;
            let rel = (got_us - want_us).abs() / want_us;
            compared.push(format!("{op} {phase}: {got_us:.1} vs {want_us:.1} us"));
            assert!(
                rel <= 0.25 + 0.001,
                "{q}: Prometheus p99 {got_us:.1} us, report {want_us:.1} us ({:.1}% apart)",
                rel * 100.0
            );
        }
    }
    eprintln!("p99, Prometheus vs report: {}", compared.join("; "));
}

fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .try_into()
        .expect("the wall clock before 2262")
}

#[test]
fn flight_recorder_dumps_the_window_around_a_triggered_burst() {
    // A light reader for 24 s; 13 s in, a burst of 64 KB writes at queue depth 64 trips
    // `queue_depth > 16`. The dump, 4 s later, holds the 8 s before the trigger (not the
    // whole run: the recorder drops what is older) and the 4 s after, and it is exact
    // against the kernel's counters between its first and last cut.
    let dir = TestDir::new();
    let dev = Scratch::new("flight", 512, false, true);
    let dumps = dir.join("dumps");
    std::fs::create_dir_all(&dumps).unwrap();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--quiet",
        "--interval",
        "500ms",
        "--flight-recorder",
        "8s",
        "--dump-dir",
        dumps.to_str().unwrap(),
        "--trigger",
        "queue_depth > 16",
        "--dump-after",
        "4s",
    ]);
    let started = wall_ns();
    let path = dev.path.clone();
    let reader = std::thread::spawn(move || {
        fio(&[
            "--name=reader",
            &format!("--filename={path}"),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            "--rate_iops=500",
            "--runtime=24",
            "--time_based",
        ])
    });
    std::thread::sleep(Duration::from_secs(13));
    let burst_start = wall_ns();
    fio(&[
        "--name=burst",
        &format!("--filename={}", dev.path),
        "--rw=randwrite",
        "--bs=64k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=64",
        "--runtime=2",
        "--time_based",
    ]);
    let burst_end = wall_ns();
    let deadline = Instant::now() + Duration::from_secs(20);
    let dump = loop {
        let found: Vec<_> = std::fs::read_dir(&dumps)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "blkp"))
            .collect();
        if let Some(p) = found.first() {
            assert_eq!(found.len(), 1, "one trigger, one dump: {found:?}");
            break p.clone();
        }
        assert!(Instant::now() < deadline, "no dump in {}", dumps.display());
        std::thread::sleep(Duration::from_millis(200));
    };
    reader.join().unwrap();
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);
    assert!(
        f.stderr.contains("trigger") && f.stderr.contains("queue_depth > 16"),
        "{}",
        f.stderr
    );

    let trace = Trace::read(&dump);
    let tr = trace.trailer.as_ref().expect("a complete trace file");
    assert!(tr.reason.contains("queue_depth > 16"), "{}", tr.reason);
    let (from, to) = (trace.header.wall_clock_start_ns, tr.wall_clock_end_ns);
    let s = |ns: i64| (ns - burst_start) as f64 / 1e9;
    eprintln!(
        "dump {} .. {} s around the burst's start (burst ends at {:.1} s, tracer started at {:.1} s); {} records",
        s(from),
        s(to),
        s(burst_end),
        s(started),
        trace.records.len()
    );
    // The trigger fires within an interval (0.5 s) of the burst's start; the window before
    // it is kept whole, to the segment (1 s) that holds its beginning.
    assert!(
        from <= burst_start + 500_000_000 - 8_000_000_000,
        "the 8 s before the trigger"
    );
    assert!(
        from >= burst_start - 11_000_000_000,
        "nothing older than the window needs"
    );
    assert!(from > started, "the start of the run was dropped");
    assert!(
        to >= burst_end,
        "the 4 s after the trigger hold the burst's end"
    );
    let big_writes = trace
        .records
        .iter()
        .filter(|r| r.stat_group() == StatGroup::Write && r.bytes == 65536)
        .count();
    assert!(big_writes > 1000, "the burst is in the dump ({big_writes})");
    let reads_before = trace
        .records
        .iter()
        .filter(|r| {
            r.stat_group() == StatGroup::Read
                && trace.header.wall_ns(r.complete_ns) < burst_start - 6_000_000_000
        })
        .count();
    assert!(
        reads_before > 500,
        "the minutes before are in it ({reads_before} reads)"
    );
    blkprof_e2e::assert_cut_exact(&trace, &dev.name, "the dump");
    let report = Command::new(bin("blkprof"))
        .arg("report")
        .arg(&dump)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
}

/// A sample's value in an exposition text: the line of `name` whose labels include every one
/// of `labels` (`key="value"`).
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|x| l.contains(x))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A histogram's cumulative buckets in an exposition text: (le, count), in order.
fn buckets(text: &str, name: &str, labels: &[&str]) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// `--no-records`: one program at the completion, the exact aggregates in the kernel, no
/// ring. Beside a tracer writing every record of the same device: its counters move as
/// /proc/diskstats does, its histograms hold every IO, and their p50/p99 agree with the
/// records' own within a bucket (a quarter).
#[test]
fn no_records_mode_counts_exactly_and_its_histograms_agree_with_the_records() {
    let dir = TestDir::new();
    let dev = Scratch::new("norec", 512, true, false);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let trace = dir.join("records.blkp");
    let agg = Tracer::start(&[
        "--device",
        &dev.name,
        "--no-records",
        "--quiet",
        "--metrics-addr",
        &addr,
    ]);
    let rec = Tracer::start(&[
        "--device",
        &dev.name,
        "--output",
        trace.to_str().unwrap(),
        "--quiet",
    ]);
    // Options that need records are refused.
    let refused = Command::new(bin("blkprof-trace"))
        .args(["--no-records", "--output", "x.blkp"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--output needs per-IO records"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let (_, text0) = http_get(port, "/metrics", None).expect("the endpoint answers");
    let before = dev.diskstats();
    fio(&[
        "--name=norec",
        &format!("--filename={}", dev.path),
        "--rw=randrw",
        "--rwmixread=70",
        "--bsrange=4k-64k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--runtime=5",
        "--time_based",
        "--randrepeat=0",
    ]);
    let after = dev.diskstats();
    std::thread::sleep(Duration::from_millis(300));
    let (status, text) = http_get(port, "/metrics", None).expect("the endpoint answers");
    assert_eq!(status, 200);
    // Valid as promtool reads it.
    assert_promtool_passes(&text);
    let a = agg.stop();
    let r = rec.stop();
    assert!(a.status.success(), "{}\n{}", a.stderr, a.stdout);
    assert!(r.status.success(), "{}\n{}", r.stderr, r.stdout);
    assert!(
        a.stdout.contains("records: none (--no-records"),
        "{}",
        a.stdout
    );
    let tr = Trace::read(&trace);
    assert_misses_are_skipped_runs(&tr, "records");
    let missed = tr.trailer.as_ref().unwrap().counters_end.missed_completions;

    let kernel = delta(&before, &after);
    let dl = format!("device=\"{}\"", dev.name);
    for (g, op) in [(StatGroup::Read, "read"), (StatGroup::Write, "write")] {
        let ol = format!("op=\"{op}\"");
        let labels = [dl.as_str(), ol.as_str()];
        let d = |m: &str| {
            sample(&text, m, &labels).unwrap_or_else(|| panic!("{m} {op}: {text}"))
                - sample(&text0, m, &labels).unwrap_or(0.0)
        };
        let (ios, bytes) = (
            f64_to_u64_saturating(d("blkprof_ios_total")),
            f64_to_u64_saturating(d("blkprof_bytes_total")),
        );
        let (k_ios, k_bytes) = kernel.get(&g).copied().unwrap_or_default();
        eprintln!(
            "{op}: --no-records {ios} IOs {bytes} bytes; /proc/diskstats {k_ios} IOs {k_bytes} bytes; completions missed (reported by the records run): {missed}"
        );
        assert!(k_ios > 1000, "{op}: the job did IO");
        // Exact but for completions the host's kernel never reports (the records run counts
        // them; stock kernels miss none).
        assert!(ios <= k_ios && k_ios - ios <= missed, "{op}");
        if ios == k_ios {
            assert_eq!(bytes, k_bytes, "{op}");
        }

        // The histograms hold every IO, and agree with the records' latencies.
        let mut totals: Vec<u64> = tr
            .requests()
            .filter(|x| x.stat_group() == g)
            .map(IoRecord::total_ns)
            .collect();
        let mut sizes: Vec<u64> = tr
            .requests()
            .filter(|x| x.stat_group() == g)
            .map(|x| u64::from(x.bytes))
            .collect();
        for (metric, phase, exact) in [
            (
                "blkprof_latency_seconds",
                Some("phase=\"total\""),
                &mut totals,
            ),
            ("blkprof_request_bytes", None, &mut sizes),
        ] {
            let mut l = labels.to_vec();
            l.extend(phase);
            let b1 = buckets(&text, metric, &l);
            let b0 = buckets(&text0, metric, &l);
            let cum: Vec<(f64, f64)> = b1
                .iter()
                .map(|&(le, c)| {
                    let c0 = b0.iter().find(|x| x.0 == le).map_or(0.0, |x| x.1);
                    (le, c - c0)
                })
                .collect();
            let n = cum.last().unwrap().1;
            assert_eq!(
                f64_to_u64_saturating(n),
                ios,
                "{metric} {op}: every IO counted"
            );
            for q in [0.5, 0.99] {
                let rank = (q * n).ceil();
                let got = cum.iter().find(|x| x.1 >= rank).unwrap().0;
                let want = blkprof_e2e::quantile(exact, q) as f64;
                let want = if metric == "blkprof_latency_seconds" {
                    want / 1e9
                } else {
                    want
                };
                eprintln!(
                    "{op} {metric} p{}: --no-records {got}, records {want}",
                    q * 100.0
                );
                if metric == "blkprof_request_bytes" {
                    // Sizes are served at powers of two: the bound at or above the size.
                    assert_eq!(
                        got,
                        f64_to_u64_saturating(want).next_power_of_two() as f64,
                        "{op} p{q}"
                    );
                } else {
                    // The bucket's upper bound: at or above the value, by at most a quarter
                    // (the two programs read the completion time a moment apart).
                    assert!(
                        got >= want * 0.99 && got <= want * 1.26,
                        "{op} {metric} p{q}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// ext4 on a loop device, and a loop device over a file on it: writes to the upper device
/// stay in flight while the file system is frozen. Thawed, detached and unmounted on drop
/// (also when the test fails).
struct Freezable {
    upper: String,
    mnt: std::path::PathBuf,
    _lower: Scratch,
}

impl Freezable {
    fn new(dir: &TestDir) -> Freezable {
        let lower = Scratch::new("freeze", 256, true, false);
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        blkprof_e2e::sh(&format!(
            "mkfs.ext4 -q -F {0} && mount {0} {1}",
            lower.path,
            mnt.display()
        ));
        let img = mnt.join("upper.img");
        let upper = blkprof_e2e::sh(&format!(
            "truncate -s 128M {0} && losetup -f --show --direct-io=on {0}",
            img.display()
        ));
        Freezable {
            upper,
            mnt,
            _lower: lower,
        }
    }

    fn freeze(&self, frozen: bool) {
        let status = Command::new("fsfreeze")
            .arg(if frozen { "-f" } else { "-u" })
            .arg(&self.mnt)
            .status()
            .expect("fsfreeze runs");
        assert!(status.success(), "fsfreeze {frozen}");
    }
}

impl Drop for Freezable {
    #[expect(
        clippy::let_underscore_must_use,
        reason = "best-effort cleanup on drop (also when a test fails): nothing to report to"
    )]
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze")
            .arg("-u")
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("losetup").args(["-d", &self.upper]).status();
        // The upper device lets go of its file once its last opener has: until then the file
        // system is busy.
        for _ in 0..50 {
            let umounted = Command::new("umount")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
            if umounted.is_ok_and(|s| s.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_scrape_during_a_rotation_answers_at_once() {
    // A rotation waits, up to 250 ms, for the requests in flight at its instant. Writes to a
    // device whose backing file system is frozen 900 ms in every second stay in flight, so
    // the rotations (every second) mostly wait the whole 250 ms. Scrapes every 20 ms meanwhile
    // must each answer within half that wait (a scrape takes a few ms; the slack is for a
    // busy machine): the endpoint does not stop for a rotation. (A scrape arriving in a
    // rotation's first 20 ms would otherwise wait 230 ms or more.)
    const PROMPT: Duration = Duration::from_millis(125);
    let dir = TestDir::new();
    let dev = Freezable::new(&dir);
    let rot = dir.join("rot");
    std::fs::create_dir_all(&rot).unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let t = Tracer::start(&[
        "--device",
        dev.upper.trim_start_matches("/dev/"),
        "--output",
        rot.join("t.blkp").to_str().unwrap(),
        "--quiet",
        "--interval",
        "100ms",
        "--rotate-time",
        "1s",
        "--metrics-addr",
        &addr,
    ]);
    let writer = blkprof_e2e::FioGroup::spawn(&[
        "--name=stalled",
        &format!("--filename={}", dev.upper),
        "--rw=randwrite",
        "--bs=64k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=4",
        "--runtime=30",
        "--time_based",
    ]);
    let mut slowest = Duration::ZERO;
    let mut scrapes = 0;
    let until = Instant::now() + Duration::from_secs(8);
    let mut next_freeze = Instant::now();
    let mut frozen_until = None;
    while Instant::now() < until {
        let now = Instant::now();
        if frozen_until.is_some_and(|t| now >= t) {
            dev.freeze(false);
            frozen_until = None;
        }
        if frozen_until.is_none() && now >= next_freeze {
            dev.freeze(true);
            frozen_until = Some(now + Duration::from_millis(900));
            next_freeze = now + Duration::from_secs(1);
        }
        let asked = Instant::now();
        let (status, _) = http_get(port, "/metrics", None).expect("the endpoint answers");
        assert_eq!(status, 200);
        slowest = slowest.max(asked.elapsed());
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    if frozen_until.is_some() {
        dev.freeze(false);
    }
    writer.end(libc::SIGINT);
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);

    // The rotations did wait for requests held by the freeze: a rotated file's end cut
    // counts the requests still open when its wait gave up.
    let mut files: Vec<_> = std::fs::read_dir(&rot)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "blkp"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "rotated every second: {files:?}");
    let waited = files
        .iter()
        .filter_map(|p| Trace::read(p).trailer)
        .filter(|tr| tr.reason == "rotation")
        .filter(|tr| tr.end_cut.as_ref().is_some_and(|c| c.still_open > 0))
        .count();
    assert!(
        waited >= 1,
        "no rotation waited its whole grace for requests held by the freeze"
    );
    eprintln!("{scrapes} scrapes, the slowest {slowest:?}; {waited} rotations waited in full");
    assert!(
        slowest < PROMPT,
        "a scrape took {slowest:?} (of {scrapes}): the endpoint waited for a rotation"
    );
}

/// Raise this process's descriptor limit to `n` (root may raise the hard one).
fn allow_descriptors(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: a valid rlimit for the call's duration.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) };
    assert_eq!(r, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// Whether the server closed `s` before `deadline` (EOF or reset), reading what it sends.
fn closed_by(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn the_endpoint_outlives_slow_clients_and_a_connection_flood() {
    allow_descriptors(8192);
    let dev = Scratch::new("slowloris", 64, false, true);
    let port = free_port();
    let t = Tracer::start(&[
        "--device",
        &dev.name,
        "--quiet",
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(port, "/metrics", None).is_none() {
        assert!(Instant::now() < deadline, "the endpoint never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    // 300 clients send half a request and hold it.
    let opened = Instant::now();
    let mut slow: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            s
        })
        .collect();
    let asked = Instant::now();
    let (status, body) = http_get(port, "/metrics", None).expect("a fresh scrape is answered");
    let took = asked.elapsed();
    assert_eq!(status, 200);
    assert!(body.contains("blkprof_ios_total"), "{body}");
    assert!(
        took < Duration::from_secs(3),
        "a scrape beside 300 slow clients took {took:?}"
    );
    // Each is closed within the header timeout (5 s) of its start, with a second of slack.
    let by = opened + Duration::from_secs(6);
    let open = slow
        .iter_mut()
        .map(|s| closed_by(s, by))
        .filter(|c| !c)
        .count();
    assert_eq!(open, 0, "slow clients still open after the header timeout");
    drop(slow);

    // 2,000 connections opened at once, held: the server goes on.
    let flood: Vec<TcpStream> = (0..2000)
        .filter_map(|_| {
            TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_secs(5),
            )
            .ok()
        })
        .collect();
    eprintln!("{} of 2000 connections opened", flood.len());
    assert!(flood.len() > 1000, "{} connections", flood.len());
    let asked = Instant::now();
    let (status, _) = http_get(port, "/metrics", None).expect("a scrape during the flood");
    assert_eq!(status, 200);
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    drop(flood);
    let (status, _) = http_get(port, "/metrics", None).expect("a scrape after the flood");
    assert_eq!(status, 200);
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);
    assert!(!f.stderr.contains("stopped"), "{}", f.stderr);
}

/// Links to `victim` planted at the names of the dumps of the next `seconds` seconds.
fn plant_links(dumps: &Path, victim: &Path, seconds: i64) -> Vec<std::path::PathBuf> {
    let now_s = wall_ns() / 1_000_000_000;
    (now_s..now_s + seconds)
        .map(|s| {
            let stamp = tracer_common::format::rfc3339(s * 1_000_000_000)
                .replace([':', '-'], "")
                .chars()
                .take(15)
                .collect::<String>();
            let p = dumps.join(format!("flight-{stamp}Z.blkp"));
            std::os::unix::fs::symlink(victim, &p).unwrap();
            p
        })
        .collect()
}

/// POST /dump with these headers; (status, body).
fn http_post_dump(port: u16, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = "POST /dump HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n".to_string();
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// POST /dump is refused without the token, from a web page and by a name; with the token
/// it writes a dump (retried while another is being written): its path.
fn dump_only_with_the_token(port: u16, addr: &str, token: &str) -> std::path::PathBuf {
    let local = ("host", addr);
    let bearer = format!("Bearer {token}");
    let auth = ("authorization", bearer.as_str());
    assert_eq!(http_post_dump(port, &[local]).0, 401, "no credential");
    assert_eq!(
        http_post_dump(
            port,
            &[local, ("authorization", "Bearer wrong-token-0123456789ab")]
        )
        .0,
        401
    );
    assert_eq!(
        http_post_dump(port, &[local, auth, ("origin", "http://example.com")]).0,
        403,
        "a web page"
    );
    assert_eq!(
        http_post_dump(port, &[("host", "rebound.example.com:9755"), auth]).0,
        403,
        "a name that is not this machine's address"
    );
    let asked = Instant::now();
    loop {
        let (status, body) = http_post_dump(port, &[local, auth]);
        if status == 200 {
            break std::path::PathBuf::from(body.trim());
        }
        // A trigger's dump is being written: one at a time.
        assert_eq!(status, 409, "{body}");
        assert!(asked.elapsed() < Duration::from_secs(20), "{body}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn dumps_need_the_token_never_follow_a_link_and_a_trigger_storm_stays_within_the_quota() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TestDir::new();
    let dev = Scratch::new("storm", 256, false, true);
    let dumps = dir.join("dumps");
    std::fs::create_dir_all(&dumps).unwrap();
    let token = "storm-token-0123456789abcdef";
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    // A token others can read is refused at the start.
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let args = |quota: &str| {
        [
            "--device",
            &dev.name,
            "--quiet",
            "--interval",
            "500ms",
            "--metrics-addr",
            &addr,
            "--flight-recorder",
            "4s",
            "--dump-dir",
            dumps.to_str().unwrap(),
            "--dump-token",
            token_file.to_str().unwrap(),
            "--trigger",
            "queue_depth > 0",
            "--dump-after",
            "1s",
            "--dump-cooldown",
            "2s",
            "--dump-max-files",
            "3",
            "--dump-quota",
            quota,
        ]
        .map(String::from)
    };
    let refused = Command::new(bin("blkprof-trace"))
        .args(args("1300K"))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("chmod 600"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let victim = dir.join("victim");
    std::fs::write(&victim, b"not a trace").unwrap();
    let planted = plant_links(&dumps, &victim, 40);
    let argv = args("1300K");
    let t = Tracer::start(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(port, "/metrics", None).is_none() {
        assert!(Instant::now() < deadline, "the endpoint never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let path = dev.path.clone();
    // Every interval has a request in the OS: the trigger holds throughout.
    let storm = std::thread::spawn(move || {
        fio(&[
            "--name=storm",
            &format!("--filename={path}"),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            "--rate_iops=2000",
            "--runtime=16",
            "--time_based",
        ])
    });
    std::thread::sleep(Duration::from_secs(3));
    let written = dump_only_with_the_token(port, &addr, token);
    assert!(written.starts_with(&dumps), "{}", written.display());
    assert!(
        !planted.contains(&written),
        "written at a planted link's name: {}",
        written.display()
    );
    storm.join().unwrap();
    let f = t.stop();
    assert!(f.status.success(), "{}", f.stderr);
    eprintln!("{}", f.stderr);

    assert_eq!(std::fs::read(&victim).unwrap(), b"not a trace");
    for p in &planted {
        assert!(
            std::fs::symlink_metadata(p).unwrap().is_symlink(),
            "{}",
            p.display()
        );
    }
    let held: Vec<_> = std::fs::read_dir(&dumps)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !std::fs::symlink_metadata(p).unwrap().is_symlink())
        .collect();
    let total: u64 = held
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let triggered = f.stderr.matches("dumping in").count();
    let deleted = f.stderr.matches("flight recorder: deleted").count();
    eprintln!(
        "{triggered} trigger dumps, {deleted} deleted, {} held, {total} bytes",
        held.len()
    );
    assert!(triggered >= 4, "a storm: {triggered} trigger dumps");
    assert!(
        triggered <= 16 / 2 + 1,
        "one per cooldown (2 s) at most: {triggered}"
    );
    assert!(deleted >= 1, "the oldest made room");
    assert!(held.len() <= 3, "{held:?}");
    assert!(total <= 1300 * 1024, "{total} bytes");
    for p in &held {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
        assert!(
            p.extension().is_some_and(|e| e == "blkp"),
            "only finished dumps are left: {}",
            p.display()
        );
        assert_eq!(Trace::read(p).ending, Ending::Complete, "{}", p.display());
    }
}
