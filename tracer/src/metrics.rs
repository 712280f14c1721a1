//! The agent's metrics endpoint: `GET /metrics` in the Prometheus text format (or OpenMetrics
//! when the scraper asks for it).
//!
//! - `blkprof_ios_total` and `blkprof_bytes_total` come from the probe's exact in-kernel
//!   aggregates, read at each scrape, grouped as /proc/diskstats groups them (read, write,
//!   discard, flush): they move exactly as the kernel's counters do. IOs the kernel does not
//!   account (iostats off, passthrough) are in `blkprof_unaccounted_ios_total` instead.
//! - The histograms are kept here from the records (so they cover the IOs the filters keep,
//!   and miss the records the ring dropped, which `blkprof_lost_ios_total` counts).
//! - The daemon owns all of it: a scrape is a message to its loop, answered with the text, so
//!   the per-record path takes no lock.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{mpsc, oneshot};
use tracer_common::format::{AggregateSnapshot, IoRecord, ProbeCounters};
use tracer_common::op::{Op, StatGroup};

/// Latency phases, in label order.
const PHASES: [&str; 3] = ["queue", "device", "total"];

/// Latency bucket bounds: 1 us, then `per_octave` linear steps in each power of two up to
/// 2^26 us (67 s). A quantile interpolated inside a bucket is off by at most the bucket's
/// width, relative to its lower bound: 1/`per_octave` (25% at the default 4).
pub fn latency_bounds_ns(per_octave: u32) -> Vec<u64> {
    let n = u64::from(per_octave);
    let mut b = vec![1_000];
    for k in 0..26u32 {
        let base = 1_000u64 << k;
        for j in 1..=n {
            b.push(base + base * j / n);
        }
    }
    b
}

/// Request size bucket bounds: powers of two from 512 bytes to 64 MiB (sizes are multiples of
/// the sector, so a power-of-two size falls exactly on a bound).
fn size_bounds() -> Vec<u64> {
    (9..=26).map(|k| 1u64 << k).collect()
}

/// With `--no-records`, the kernel's log-linear buckets as the endpoint's: the bucket
/// boundaries `k` (bound `loglin_lower(k)`, holding the kernel's buckets below `k`) from 1,024
/// ns to 2^36 ns (69 s), `per_octave` (1, 2 or 4) to a power of two.
pub fn kernel_latency_bounds(per_octave: u32) -> Vec<usize> {
    let step = (4 / per_octave.clamp(1, 4)) as usize;
    (40..=144).step_by(step).collect()
}

/// Size bounds of the kernel's buckets: the powers of two from 512 bytes to 64 MiB, as
/// [`size_bounds`].
fn kernel_size_bounds() -> Vec<usize> {
    (9..=26).map(|m| 4 * (m - 1)).collect()
}

/// A kernel histogram ([`tracer_common::loglin_le_bucket`]s) cut at boundaries `ks`.
fn kernel_hist(h: &[u64], ks: &[usize], sum: u64) -> Hist {
    let mut counts = Vec::with_capacity(ks.len() + 1);
    let mut from = 0;
    for &k in ks {
        let to = k.min(h.len()).max(from);
        counts.push(h[from..to].iter().sum());
        from = to;
    }
    counts.push(h[from..].iter().sum());
    Hist { counts, sum }
}

/// Counts per bucket (not cumulative), their sum and count.
#[derive(Clone)]
struct Hist {
    counts: Vec<u64>,
    sum: u64,
}

impl Hist {
    fn new(buckets: usize) -> Hist {
        Hist {
            // One more: above the last bound (+Inf).
            counts: vec![0; buckets + 1],
            sum: 0,
        }
    }
    #[inline]
    fn record(&mut self, bounds: &[u64], v: u64) {
        let i = bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum = self.sum.saturating_add(v);
    }
    fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// One device's histograms: per stat group, latency per phase and request size.
struct DevHists {
    dev: u32,
    latency: Vec<[Hist; 3]>,
    size: Vec<Hist>,
    seen: [bool; 4],
}

/// What the daemon keeps for the endpoint.
pub struct Metrics {
    /// `--no-records`: the histograms are the kernel's, read from the aggregates at a scrape,
    /// cut at these boundaries ([`kernel_latency_bounds`]).
    kernel: Option<Vec<usize>>,
    lat_bounds: Vec<u64>,
    size_bounds: Vec<u64>,
    devs: Vec<DevHists>,
    /// The index of the last record's device.
    last: usize,
    started_unix_s: f64,
}

impl Metrics {
    pub fn new(per_octave: u32, started_unix_ns: i64) -> Metrics {
        Metrics {
            kernel: None,
            lat_bounds: latency_bounds_ns(per_octave),
            size_bounds: size_bounds(),
            devs: Vec::new(),
            last: 0,
            started_unix_s: started_unix_ns as f64 / 1e9,
        }
    }

    /// The histograms from the kernel's aggregates (`--no-records`), at `per_octave` (1, 2, 4).
    pub fn from_kernel(per_octave: u32, started_unix_ns: i64) -> Metrics {
        let ks = kernel_latency_bounds(per_octave);
        Metrics {
            kernel: Some(ks.clone()),
            lat_bounds: ks.iter().map(|&k| tracer_common::loglin_lower(k)).collect(),
            size_bounds: kernel_size_bounds()
                .iter()
                .map(|&k| tracer_common::loglin_lower(k))
                .collect(),
            devs: Vec::new(),
            last: 0,
            started_unix_s: started_unix_ns as f64 / 1e9,
        }
    }

    /// With `--no-records`: the histograms now, from the kernel's aggregates.
    fn fill_from_kernel(&mut self, aggregates: &[AggregateSnapshot]) {
        let Some(ks) = self.kernel.clone() else {
            return;
        };
        let sks = kernel_size_bounds();
        for d in &mut self.devs {
            for h in d.latency.iter_mut().flatten().chain(d.size.iter_mut()) {
                h.counts.iter_mut().for_each(|c| *c = 0);
                h.sum = 0;
            }
        }
        for a in aggregates {
            let g = a.group();
            // The block layer's absorbed empty flush (a 0-byte read to the kernel): as
            // `record` leaves it out.
            if g != StatGroup::Flush && a.op == Some(Op::Flush) {
                continue;
            }
            let i = self.index(tracer_common::dev_join(a.major, a.minor));
            let d = &mut self.devs[i];
            let g = g as usize;
            d.seen[g] = true;
            for (h, (src, sum)) in d.latency[g].iter_mut().zip([
                (&a.queue_latency, a.queue_ns_sum),
                (&a.device_latency, a.device_ns_sum),
                (&a.total_latency, a.total_ns_sum),
            ]) {
                let k = kernel_hist(src, &ks, sum);
                for (c, v) in h.counts.iter_mut().zip(&k.counts) {
                    *c += v;
                }
                h.sum += k.sum;
            }
            let k = kernel_hist(&a.size, &sks, a.bytes);
            for (c, v) in d.size[g].counts.iter_mut().zip(&k.counts) {
                *c += v;
            }
            d.size[g].sum += k.sum;
        }
    }

    /// Give a traced device its read and write series from the first scrape, so that a
    /// rate over its first IOs is whole (discard and flush series appear with their first IO).
    pub fn add_device(&mut self, dev: u32) {
        let i = self.index(dev);
        self.devs[i].seen[StatGroup::Read as usize] = true;
        self.devs[i].seen[StatGroup::Write as usize] = true;
    }

    fn index(&mut self, dev: u32) -> usize {
        if let Some(i) = self.devs.iter().position(|d| d.dev == dev) {
            return i;
        }
        let hs = Hist::new(self.lat_bounds.len());
        self.devs.push(DevHists {
            dev,
            latency: vec![[hs.clone(), hs.clone(), hs]; 4],
            size: vec![Hist::new(self.size_bounds.len()); 4],
            seen: [false; 4],
        });
        self.devs.len() - 1
    }

    /// Add one record.
    #[inline]
    pub fn record(&mut self, r: &IoRecord) {
        // The block layer's absorbed empty flush: counted by the kernel as a 0-byte read, not
        // an IO whose latency or size says anything (the report leaves it out too).
        let g = r.stat_group();
        if g != StatGroup::Flush && r.op == Op::Flush {
            return;
        }
        // Devices are few, and consecutive records mostly share one.
        if self.devs.get(self.last).is_none_or(|d| d.dev != r.dev) {
            self.last = self.index(r.dev);
        }
        let d = &mut self.devs[self.last];
        let g = g as usize;
        d.seen[g] = true;
        let [queue, device, total] = &mut d.latency[g];
        if r.issue_ns != 0 {
            queue.record(&self.lat_bounds, r.issue_ns.saturating_sub(r.enter_ns));
            device.record(&self.lat_bounds, r.device_ns());
        }
        total.record(&self.lat_bounds, r.total_ns());
        d.size[g].record(&self.size_bounds, u64::from(r.bytes));
    }
}

/// What a scrape reads from the probe and the daemon, besides the histograms.
pub struct Scrape<'a> {
    pub aggregates: &'a [AggregateSnapshot],
    pub counters: &'a ProbeCounters,
    /// (dev, requests in the OS, requests at the device) now.
    /// (dev, requests in the OS, requests at the device if known) now.
    pub inflight: &'a [(u32, u64, Option<u64>)],
    pub name_of: &'a dyn Fn(u32) -> String,
    pub records: u64,
    pub filtered_out: u64,
    pub bpf_stats_enabled: bool,
    pub kernel: &'a str,
}

/// Label value escaping of the text format: backslash, double quote and line feed.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// A float as the exposition formats write it (`+Inf`, and integers without a fraction).
fn num(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

struct Out {
    s: String,
    open: bool,
}

impl Out {
    /// A metric family's HELP and TYPE (OpenMetrics names a counter's family without its
    /// `_total` suffix).
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let fam = if self.open && kind == "counter" {
            name.strip_suffix("_total").unwrap_or(name)
        } else {
            name
        };
        for (line, text) in [("# HELP ", help), ("# TYPE ", kind)] {
            self.s.push_str(line);
            self.s.push_str(fam);
            self.s.push(' ');
            self.s.push_str(text);
            self.s.push('\n');
        }
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.s.push_str(name);
        if !labels.is_empty() {
            self.s.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.s.push(',');
                }
                self.s.push_str(k);
                self.s.push_str("=\"");
                self.s.push_str(&esc(val));
                self.s.push('"');
            }
            self.s.push('}');
        }
        self.s.push(' ');
        self.s.push_str(&num(v));
        self.s.push('\n');
    }
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds: &[u64],
        div: f64,
        h: &Hist,
    ) {
        let mut cum = 0u64;
        let bucket = format!("{name}_bucket");
        for (i, c) in h.counts.iter().enumerate() {
            cum += c;
            let le = match bounds.get(i) {
                Some(&b) => num(b as f64 / div),
                None => "+Inf".into(),
            };
            let mut l = labels.to_vec();
            l.push(("le", &le));
            self.sample(&bucket, &l, cum as f64);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum as f64 / div);
        self.sample(&format!("{name}_count"), labels, h.count() as f64);
    }
}

/// The exact counters, summed per (device, diskstats group, accounted).
fn exact_counters(o: &mut Out, sc: &Scrape) {
    let dev_name = |dev: u32| (sc.name_of)(dev);
    let group = |g: usize| StatGroup::ALL[g].name();
    let mut sums: std::collections::BTreeMap<(u32, u32, usize, bool), (u64, u64)> =
        std::collections::BTreeMap::default();
    for a in sc.aggregates {
        let e = sums
            .entry((a.major, a.minor, a.group() as usize, a.not_accounted))
            .or_default();
        e.0 = e.0.saturating_add(a.ios);
        e.1 = e.1.saturating_add(a.bytes);
    }
    for (accounted, ios, bytes, what) in [
        (
            true,
            "blkprof_ios_total",
            "blkprof_bytes_total",
            "as /proc/diskstats counts them",
        ),
        (
            false,
            "blkprof_unaccounted_ios_total",
            "blkprof_unaccounted_bytes_total",
            "that the kernel does not account in /proc/diskstats (iostats off, passthrough)",
        ),
    ] {
        let rows: Vec<_> = sums
            .iter()
            .filter(|((_, _, _, na), _)| *na != accounted)
            .collect();
        if rows.is_empty() && !accounted {
            continue;
        }
        for (name, col, unit) in [(ios, 0, "IOs"), (bytes, 1, "bytes")] {
            o.family(
                name,
                "counter",
                &format!("Completed {unit} by device and op, exact (in-kernel), {what}."),
            );
            for ((ma, mi, g, _), v) in &rows {
                let dn = dev_name(tracer_common::dev_join(*ma, *mi));
                let val = if col == 0 { v.0 } else { v.1 };
                o.sample(name, &[("device", &dn), ("op", group(*g))], val as f64);
            }
        }
    }
}

/// The losses, the records, the programs' runs, and the tracer itself.
fn probe_families(o: &mut Out, m: &Metrics, sc: &Scrape) {
    let c = sc.counters;
    o.family(
        "blkprof_lost_ios_total",
        "counter",
        "IOs or records lost, by reason: ring_full (records dropped; the exact counters still have them), missed_completion, bpf_recursion, request_map_full, aggregate_map_full.",
    );
    for (reason, v) in [
        ("ring_full", c.ring_drops),
        ("missed_completion", c.missed_completions),
        ("bpf_recursion", c.recursion_misses()),
        ("request_map_full", c.request_map_full),
        ("aggregate_map_full", c.aggregate_map_full),
    ] {
        o.sample("blkprof_lost_ios_total", &[("reason", reason)], v as f64);
    }
    o.family(
        "blkprof_records_total",
        "counter",
        "Per-IO records received from the probe.",
    );
    o.sample("blkprof_records_total", &[], sc.records as f64);
    o.family(
        "blkprof_filtered_out_total",
        "counter",
        "Records left out by --pid, --comm or --op.",
    );
    o.sample("blkprof_filtered_out_total", &[], sc.filtered_out as f64);

    o.family(
        "blkprof_bpf_run_seconds_total",
        "counter",
        "Time the probe's programs ran in the kernel (counted while kernel.bpf_stats_enabled is 1).",
    );
    for p in &c.programs {
        o.sample(
            "blkprof_bpf_run_seconds_total",
            &[("program", &p.name)],
            p.run_time_ns as f64 / 1e9,
        );
    }
    o.family(
        "blkprof_bpf_runs_total",
        "counter",
        "Runs of the probe's programs (counted while kernel.bpf_stats_enabled is 1).",
    );
    for p in &c.programs {
        o.sample(
            "blkprof_bpf_runs_total",
            &[("program", &p.name)],
            p.run_cnt as f64,
        );
    }
    o.family(
        "blkprof_bpf_stats_enabled",
        "gauge",
        "1 if kernel.bpf_stats_enabled is on (the bpf run counters move only then).",
    );
    o.sample(
        "blkprof_bpf_stats_enabled",
        &[],
        f64::from(u8::from(sc.bpf_stats_enabled)),
    );
    o.family(
        "blkprof_start_time_seconds",
        "gauge",
        "When the tracer started (Unix time).",
    );
    o.sample("blkprof_start_time_seconds", &[], m.started_unix_s);
    o.family(
        "blkprof_build_info",
        "gauge",
        "The tracer's version and the kernel it runs on.",
    );
    o.sample(
        "blkprof_build_info",
        &[("version", tracer_common::VERSION), ("kernel", sc.kernel)],
        1.0,
    );
}

/// The exposition text (`openmetrics`: the OpenMetrics 1.0 variant, ending in `# EOF`).
pub fn render(m: &mut Metrics, sc: &Scrape, openmetrics: bool) -> String {
    if m.kernel.is_some() {
        m.fill_from_kernel(sc.aggregates);
    }
    let m = &*m;
    let mut o = Out {
        s: String::with_capacity(64 << 10),
        open: openmetrics,
    };
    let dev_name = |dev: u32| (sc.name_of)(dev);
    let group = |g: usize| StatGroup::ALL[g].name();

    exact_counters(&mut o, sc);

    o.family(
        "blkprof_latency_seconds",
        "histogram",
        "Latency by device, op and phase (queue: submission to issue, device: issue to completion, total: submission to completion).",
    );
    for d in &m.devs {
        let dn = dev_name(d.dev);
        for g in 0..4 {
            if !d.seen[g] {
                continue;
            }
            for (p, h) in PHASES.iter().zip(&d.latency[g]) {
                o.histogram(
                    "blkprof_latency_seconds",
                    &[("device", &dn), ("op", group(g)), ("phase", p)],
                    &m.lat_bounds,
                    1e9,
                    h,
                );
            }
        }
    }
    o.family(
        "blkprof_request_bytes",
        "histogram",
        "Request size by device and op.",
    );
    for d in &m.devs {
        let dn = dev_name(d.dev);
        for g in 0..4 {
            if d.seen[g] {
                o.histogram(
                    "blkprof_request_bytes",
                    &[("device", &dn), ("op", group(g))],
                    &m.size_bounds,
                    1.0,
                    &d.size[g],
                );
            }
        }
    }

    o.family(
        "blkprof_inflight",
        "gauge",
        "Requests in flight now: where=os from submission to completion, where=device from issue to completion.",
    );
    for (dev, os, device) in sc.inflight {
        let dn = dev_name(*dev);
        o.sample(
            "blkprof_inflight",
            &[("device", &dn), ("where", "os")],
            *os as f64,
        );
        if let Some(device) = device {
            o.sample(
                "blkprof_inflight",
                &[("device", &dn), ("where", "device")],
                *device as f64,
            );
        }
    }

    probe_families(&mut o, m, sc);
    if openmetrics {
        o.s.push_str("# EOF\n");
    }
    o.s
}

/// What the endpoint asks of the daemon's loop.
pub enum Ask {
    /// The exposition text; `true`: OpenMetrics.
    Metrics(bool, oneshot::Sender<String>),
    /// A flight-recorder dump now: the file written, or why not.
    Dump(oneshot::Sender<Result<std::path::PathBuf, String>>),
}

/// Serve `addr` until the daemon's loop goes away. Each connection is a task; each scrape is
/// one message to the loop.
pub async fn serve(
    listener: tokio::net::TcpListener,
    asks: mpsc::Sender<Ask>,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let asks = asks.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(req, asks.clone()));
            #[expect(
                clippy::let_underscore_must_use,
                reason = "a client that hangs up mid-request is its own business"
            )]
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Bind before the probe attaches, so a taken port fails the start, not the run.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: cannot listen: {e}"))
}

fn reply(status: StatusCode, ctype: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn handle(
    req: Request<Incoming>,
    asks: mpsc::Sender<Ask>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
    const OPEN: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let open = req
                .headers()
                .get_all(hyper::header::ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            let (tx, rx) = oneshot::channel();
            match asks.send(Ask::Metrics(open, tx)).await {
                Ok(()) => match rx.await {
                    Ok(body) => reply(StatusCode::OK, if open { OPEN } else { TEXT }, body),
                    Err(_) => reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "text/plain",
                        "blkprof-trace is stopping\n".into(),
                    ),
                },
                Err(_) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "blkprof-trace is stopping\n".into(),
                ),
            }
        }
        (&Method::POST, "/dump") => {
            let (tx, rx) = oneshot::channel();
            let answer = match asks.send(Ask::Dump(tx)).await {
                Ok(()) => rx.await.unwrap_or_else(|_| Err("blkprof-trace is stopping".into())),
                Err(_) => Err("blkprof-trace is stopping".into()),
            };
            match answer {
                Ok(p) => reply(StatusCode::OK, "text/plain", format!("{}\n", p.display())),
                Err(e) => reply(StatusCode::CONFLICT, "text/plain", format!("{e}\n")),
            }
        }
        (_, "/dump") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "POST /dump\n".into(),
        ),
        (_, "/metrics") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET /metrics\n".into(),
        ),
        (&Method::GET, "/") => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            "<html><body><h1>blkprof-trace</h1><p><a href=\"/metrics\">/metrics</a></p></body></html>\n"
                .into(),
        ),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found; try GET /metrics\n".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_log_linear() {
        let b = latency_bounds_ns(4);
        assert_eq!(b.len(), 1 + 26 * 4);
        assert_eq!(&b[..6], &[1_000, 1_250, 1_500, 1_750, 2_000, 2_500]);
        assert_eq!(*b.last().unwrap(), 1_000u64 << 26);
        // Every bucket is at most 1/4 wider than its lower bound.
        for w in b.windows(2) {
            assert!((w[1] - w[0]) * 4 <= w[0], "{w:?}");
        }
    }

    fn rec(dev: u32, op: Op, enter: u64, issue: u64, complete: u64, bytes: u32) -> IoRecord {
        IoRecord {
            complete_ns: complete,
            enter_ns: enter,
            issue_ns: issue,
            bytes,
            dev,
            op,
            ..IoRecord::default()
        }
    }

    #[test]
    fn text_format_has_cumulative_buckets_and_exact_counters() {
        let mut m = Metrics::new(4, 1_700_000_000_000_000_000);
        let dev = tracer_common::dev_join(7, 3);
        m.record(&rec(dev, Op::Read, 100, 1_100, 2_600, 4096)); // queue 1 us, device 1.5 us
        m.record(&rec(dev, Op::Read, 0, 0, 3_000_000, 8192)); // never issued, 3 ms total
        m.record(&rec(dev, Op::Flush, 0, 10, 20, 0)); // absorbed flush: left out
        let aggs = [AggregateSnapshot {
            major: 7,
            minor: 3,
            op: Some(Op::Read),
            ios: 5,
            bytes: 20480,
            ..AggregateSnapshot::default()
        }];
        let counters = ProbeCounters {
            ring_drops: 2,
            ..ProbeCounters::default()
        };
        let name = |_: u32| "loop3".to_string();
        let sc = Scrape {
            aggregates: &aggs,
            counters: &counters,
            inflight: &[(dev, 3, Some(1))],
            name_of: &name,
            records: 3,
            filtered_out: 0,
            bpf_stats_enabled: false,
            kernel: "6.1\"x",
        };
        let t = render(&mut m, &sc, false);
        assert!(
            t.contains("blkprof_ios_total{device=\"loop3\",op=\"read\"} 5\n"),
            "{t}"
        );
        assert!(t.contains("blkprof_bytes_total{device=\"loop3\",op=\"read\"} 20480\n"));
        assert!(t.contains(
            "blkprof_latency_seconds_bucket{device=\"loop3\",op=\"read\",phase=\"device\",le=\"0.0000015\"} 1\n"
        ));
        assert!(t.contains(
            "blkprof_latency_seconds_bucket{device=\"loop3\",op=\"read\",phase=\"total\",le=\"+Inf\"} 2\n"
        ));
        assert!(t.contains(
            "blkprof_latency_seconds_count{device=\"loop3\",op=\"read\",phase=\"queue\"} 1\n"
        ));
        assert!(t.contains(
            "blkprof_request_bytes_bucket{device=\"loop3\",op=\"read\",le=\"4096\"} 1\n"
        ));
        assert!(
            !t.contains("op=\"flush\""),
            "the absorbed flush is left out"
        );
        assert!(t.contains("blkprof_inflight{device=\"loop3\",where=\"os\"} 3\n"));
        assert!(t.contains("blkprof_lost_ios_total{reason=\"ring_full\"} 2\n"));
        assert!(t.contains("kernel=\"6.1\\\"x\""), "label values escaped");
        assert!(!t.contains("# EOF"));
        let om = render(&mut m, &sc, true);
        assert!(om.ends_with("# EOF\n"));
        assert!(om.contains("# TYPE blkprof_ios counter\n"));
    }
}
