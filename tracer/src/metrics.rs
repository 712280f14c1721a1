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

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::{Notify, mpsc, oneshot};
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

/// At most this many connections at once: a new one beyond closes the oldest one not being
/// answered (a fresh scrape gets in whatever idle or slow connections hold), so that
/// connections cannot take the descriptors a rotation needs.
pub const MAX_CONNECTIONS: usize = 128;
/// A request's headers must arrive within this (slow clients holding half-sent headers).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection nothing moves on for this long is closed (between requests included).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Read buffer bound per connection: the requests the endpoint answers are small.
const MAX_BUF: usize = 16 * 1024;

/// Who may ask for what beyond the metrics.
#[derive(Clone, Default)]
pub struct Access {
    /// POST /dump allowed to who sends `Authorization: Bearer TOKEN`; off when None.
    pub dump_token: Option<String>,
}

/// One open connection, as the accept loop sees it.
struct Conn {
    id: u64,
    /// A request is being answered.
    busy: Arc<AtomicBool>,
    close: Arc<Notify>,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Conns(Mutex<VecDeque<Conn>>);

impl Conns {
    /// Room for one more: beyond the cap, the oldest idle connection (or the oldest) is told
    /// to close.
    fn admit(&self, conn: Conn) {
        let mut list = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if list.len() >= MAX_CONNECTIONS {
            let i = list
                .iter()
                .position(|c| !c.busy.load(Ordering::Relaxed))
                .unwrap_or(0);
            if let Some(old) = list.remove(i) {
                old.close.notify_one();
            }
        }
        list.push_back(conn);
    }

    fn gone(&self, id: u64) {
        let mut list = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.retain(|c| c.id != id);
    }
}

/// A connection's stream, noting when bytes last moved (ms since `origin`).
struct Watched {
    inner: tokio::net::TcpStream,
    origin: tokio::time::Instant,
    last_ms: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks a connection busy while a request is answered.
struct Busy(Arc<AtomicBool>);

impl Busy {
    fn new(flag: &Arc<AtomicBool>) -> Busy {
        flag.store(true, Ordering::Relaxed);
        Busy(flag.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Serve `listener` for as long as the process lives. Each connection is a task; each scrape
/// is one message to the loop. An accept error (descriptors exhausted) backs off and goes
/// on.
pub async fn serve(listener: tokio::net::TcpListener, asks: mpsc::Sender<Ask>, access: Access) {
    let conns = Arc::new(Conns::default());
    let access = Arc::new(access);
    let mut next_id = 0u64;
    let mut backoff = Duration::from_millis(10);
    let mut said_at: Option<tokio::time::Instant> = None;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(10);
                stream
            }
            Err(e) => {
                if said_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    eprintln!(
                        "blkprof-trace: metrics endpoint: cannot accept a connection ({e}); going on"
                    );
                    said_at = Some(tokio::time::Instant::now());
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let busy = Arc::new(AtomicBool::new(false));
        let close = Arc::new(Notify::new());
        conns.admit(Conn {
            id,
            busy: busy.clone(),
            close: close.clone(),
        });
        let (asks, access, conns) = (asks.clone(), access.clone(), conns.clone());
        tokio::spawn(async move {
            let origin = tokio::time::Instant::now();
            let last_ms = Arc::new(AtomicU64::new(0));
            let io = Watched {
                inner: stream,
                origin,
                last_ms: last_ms.clone(),
            };
            let flag = busy.clone();
            let svc = hyper::service::service_fn(move |req| {
                let (asks, access, flag) = (asks.clone(), access.clone(), flag.clone());
                async move {
                    let _busy = Busy::new(&flag);
                    handle(req, asks, &access).await
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_BUF);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), svc);
            let mut conn = std::pin::pin!(conn);
            let mut check = origin + IDLE_TIMEOUT;
            loop {
                tokio::select! {
                    _ = &mut conn => break,
                    () = close.notified() => break,
                    () = tokio::time::sleep_until(check) => {
                        let last = origin + Duration::from_millis(last_ms.load(Ordering::Relaxed));
                        if last + IDLE_TIMEOUT <= tokio::time::Instant::now()
                            && !busy.load(Ordering::Relaxed)
                        {
                            break;
                        }
                        check = (last + IDLE_TIMEOUT).max(tokio::time::Instant::now() + Duration::from_secs(1));
                    }
                }
            }
            conns.gone(id);
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

/// Whether a Host header names this machine by address or as localhost, not by a DNS name a
/// web page could have rebound to it.
fn host_is_local_literal(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or("", |(h, _)| h)
    } else {
        match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        }
    };
    name.parse::<std::net::IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost")
}

/// Compare without an early exit: the time taken does not say how much of a guess was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a POST /dump is refused, if it is.
fn refuse_dump<B>(req: &Request<B>, access: &Access) -> Option<Response<Full<Bytes>>> {
    let text = |status, body: &str| Some(reply(status, "text/plain", format!("{body}\n")));
    let Some(token) = &access.dump_token else {
        return text(
            StatusCode::FORBIDDEN,
            "dumps on request are off: start blkprof-trace with --dump-token FILE (or send it SIGUSR1)",
        );
    };
    let h = req.headers();
    if h.contains_key(hyper::header::ORIGIN) {
        return text(
            StatusCode::FORBIDDEN,
            "refused: a request from a web page (it has an Origin header)",
        );
    }
    let host = h.get(hyper::header::HOST).and_then(|v| v.to_str().ok());
    if !host.is_some_and(host_is_local_literal) {
        return text(
            StatusCode::FORBIDDEN,
            "refused: the Host header must be this machine's address or localhost",
        );
    }
    let given = h
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if given.is_some_and(|g| same_secret(g.as_bytes(), token.as_bytes())) {
        return None;
    }
    let mut r = reply(
        StatusCode::UNAUTHORIZED,
        "text/plain",
        "POST /dump needs Authorization: Bearer TOKEN (the --dump-token file's content)\n".into(),
    );
    r.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    Some(r)
}

async fn handle(
    req: Request<Incoming>,
    asks: mpsc::Sender<Ask>,
    access: &Access,
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
            if let Some(refused) = refuse_dump(&req, access) {
                return Ok(refused);
            }
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
    fn dumps_are_refused_without_the_token_from_pages_and_by_name() {
        let req = |headers: &[(&str, &str)]| {
            let mut b = Request::builder().method("POST").uri("/dump");
            for (k, v) in headers {
                b = b.header(*k, *v);
            }
            b.body(()).unwrap()
        };
        let token = "0123456789abcdefXYZ";
        let on = Access {
            dump_token: Some(token.into()),
        };
        let bearer = format!("Bearer {token}");
        let good = [
            ("host", "127.0.0.1:9755"),
            ("authorization", bearer.as_str()),
        ];
        assert!(refuse_dump(&req(&good), &on).is_none());
        let status = |headers: &[(&str, &str)], a: &Access| {
            refuse_dump(&req(headers), a).map(|r| r.status().as_u16())
        };
        assert_eq!(
            status(&good, &Access::default()),
            Some(403),
            "off without a token"
        );
        assert_eq!(status(&good[..1], &on), Some(401));
        assert_eq!(
            status(
                &[good[0], ("authorization", "Bearer 0123456789abcdefXYz")],
                &on
            ),
            Some(401)
        );
        assert_eq!(
            status(&[good[0], good[1], ("origin", "http://evil.example")], &on),
            Some(403)
        );
        for host in ["evil.example", "evil.example:9755", "127.0.0.1.nip.io"] {
            assert_eq!(status(&[("host", host), good[1]], &on), Some(403), "{host}");
        }
        for host in ["localhost", "[::1]:9755", "10.1.2.3", "LOCALHOST:80"] {
            assert_eq!(status(&[("host", host), good[1]], &on), None, "{host}");
        }
        assert_eq!(status(&[good[1]], &on), Some(403), "no Host");
    }

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
