//! `blkprof compare A B [...]`: the summaries side by side, with the differences that matter
//! flagged (for A/B experiments: read-ahead 4096 vs 8 KB, chunk size, document size), each arm
//! named by what differs between them, and the flagged differences said in sentences.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;
use tracer_common::coverage::thousands;

use crate::report::model::{JsonDevice, JsonReport, queue_parts};

/// One arm as given: the path on the command line (a trace, or a saved report) and its report.
pub struct Input {
    pub path: String,
    pub report: JsonReport,
}

/// An arm of the comparison.
#[derive(Serialize, Clone, Debug)]
pub struct Arm {
    /// The labels whose values differ between the arms (`read_ahead_kb=8`), else the queue
    /// settings that differ (`read-ahead 8 KB`), else `input`.
    pub name: String,
    /// The path given on the command line: a trace or a saved report.
    pub input: String,
    /// The trace(s) the report was made of.
    pub trace: String,
    pub device: String,
    pub labels: BTreeMap<String, String>,
}

/// A flagged difference said in a sentence, comparing one arm with the first.
#[derive(Serialize, Clone, Debug)]
pub struct Finding {
    pub text: String,
    /// The rows it comes from.
    pub metrics: Vec<String>,
    /// The arm compared with the first (an index into `arms`).
    pub arm: usize,
}

/// One compared figure. An arm that has no such figure (the op is absent from its report, or
/// it has no IOs of that op for a per-IO figure) has `None`: "n/a" in text, null in JSON.
#[derive(Serialize, Clone, Debug)]
pub struct Row {
    pub metric: String,
    pub values: Vec<Option<f64>>,
    /// Change of each run against the first: relative, or in points for shares. None for the
    /// first, for a zero base, and wherever either value is missing.
    pub change: Vec<Option<f64>>,
    /// Some value moved beyond the threshold of its unit; a missing value never counts.
    pub flagged: bool,
    pub unit: String,
}

#[derive(Serialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub traces: Vec<String>,
    pub devices: Vec<String>,
    pub arms: Vec<Arm>,
    pub rows: Vec<Row>,
    pub findings: Vec<Finding>,
}

/// At most this many findings: the most important first.
pub const MAX_FINDINGS: usize = 8;

/// How far a figure may move before it is flagged: volumes, counts, rates and settings 10%,
/// latency 25%, shares (percentage points) 5.
fn threshold(unit: &str) -> f64 {
    match unit {
        "us" => 0.25,
        "pp" => 5.0,
        _ => 0.10,
    }
}

const OPS: [&str; 4] = tracer_common::op::StatGroup::NAMES;

/// The rows every arm yields, whatever it holds: per op, whether any arm has IOs of it, and the
/// size classes present in any arm, smallest first (classes are disjoint ranges, so their
/// mean request sizes order them).
struct Layout {
    active: Vec<bool>,
    classes: Vec<Vec<String>>,
    /// The stress tool's operations any arm has results of, in [`CLIENT_OPS`] order, then
    /// by name.
    client_ops: Vec<String>,
}

impl Layout {
    fn of(devs: &[&JsonDevice], clients: &[Client]) -> Layout {
        let ops = |k: &'static str| devs.iter().filter_map(move |d| d.ops.get(k));
        let active = OPS.iter().map(|k| ops(k).any(|o| o.ios > 0)).collect();
        let classes = OPS
            .iter()
            .map(|k| {
                let mut classes: Vec<(String, f64)> = Vec::new();
                for z in ops(k).flat_map(|o| &o.block_sizes).filter(|z| z.ios > 0) {
                    if !classes.iter().any(|c| c.0 == z.class) {
                        classes.push((z.class.clone(), z.bytes as f64 / z.ios as f64));
                    }
                }
                classes.sort_by(|a, b| a.1.total_cmp(&b.1));
                classes.into_iter().map(|c| c.0).collect()
            })
            .collect();
        let mut client_ops: Vec<String> = Vec::new();
        for o in clients.iter().flat_map(|c| c.ops.keys()) {
            if !client_ops.contains(o) {
                client_ops.push(o.clone());
            }
        }
        client_ops.sort_by_key(|o| {
            (
                CLIENT_OPS
                    .iter()
                    .position(|k| k == o)
                    .unwrap_or(CLIENT_OPS.len()),
                o.clone(),
            )
        });
        Layout {
            active,
            classes,
            client_ops,
        }
    }
}

/// YCSB's operations in the order the rows show them (others follow by name).
const CLIENT_OPS: [&str; 7] = [
    "read",
    "update",
    "insert",
    "scan",
    "read-modify-write",
    "delete",
    "overall",
];

/// One operation's results from the stress tool's summary.
#[derive(Default)]
struct ClientOp {
    count: Option<f64>,
    mean_us: Option<f64>,
    p99_us: Option<f64>,
}

/// The stress tool's overall results of an arm (its summary block; none without one).
#[derive(Default)]
struct Client {
    ops_per_s: Option<f64>,
    /// By lower-case op name (`read`, `update`; cassandra-stress: `overall`).
    ops: BTreeMap<String, ClientOp>,
}

impl Client {
    /// From the first stress run of the report that has a summary block: YCSB's `[OVERALL]
    /// Throughput(ops/sec)` and per `[OP]` its `Operations`, `AverageLatency(us)` and
    /// `99thPercentileLatency(us)` (not `[CLEANUP]`, YCSB's own thread teardown);
    /// cassandra-stress's `Op rate`, and as op `overall` its `Latency mean` and `Latency 99th
    /// percentile` (it prints no count per op).
    fn of(r: &JsonReport) -> Client {
        let Some(run) = r.stress.iter().find(|s| !s.summary.is_empty()) else {
            return Client::default();
        };
        let get = |sec: &str, k: &str| run.summary.get(sec).and_then(|m| m.get(k)).copied();
        if run.tool == "cassandra-stress" {
            let ms = |k: &str| get("OVERALL", k).map(|v| v * 1000.0);
            let overall = ClientOp {
                count: None,
                mean_us: ms("Latency mean (ms)"),
                p99_us: ms("Latency 99th percentile (ms)"),
            };
            let mut ops = BTreeMap::new();
            if overall.mean_us.is_some() || overall.p99_us.is_some() {
                ops.insert("overall".to_string(), overall);
            }
            return Client {
                ops_per_s: get("OVERALL", "Op rate (op/s)"),
                ops,
            };
        }
        let ops = run
            .summary
            .iter()
            .filter(|(sec, m)| {
                m.contains_key("Operations") && !matches!(sec.as_str(), "OVERALL" | "CLEANUP")
            })
            .map(|(sec, m)| {
                (
                    sec.to_lowercase(),
                    ClientOp {
                        count: m.get("Operations").copied(),
                        mean_us: m.get("AverageLatency(us)").copied(),
                        p99_us: m.get("99thPercentileLatency(us)").copied(),
                    },
                )
            })
            .collect();
        Client {
            ops_per_s: get("OVERALL", "Throughput(ops/sec)"),
            ops,
        }
    }
}

/// The figures of the disk's settings and of the stress tool, before the disk's own: the
/// read-ahead setting, client throughput, per client op its count, mean and p99 latency, and
/// the device's read bytes per client read (what read-ahead costs).
fn client_metrics(
    d: &JsonDevice,
    c: &Client,
    layout: &Layout,
) -> Vec<(String, Option<f64>, &'static str)> {
    let mut m = vec![(
        "read-ahead KB".to_string(),
        d.queue
            .as_ref()
            .and_then(|q| q.read_ahead_kb)
            .map(f64::from),
        "KB",
    )];
    m.push(("client ops/s".into(), c.ops_per_s, "ops/s"));
    for k in &layout.client_ops {
        let o = c.ops.get(k);
        m.push((format!("client {k} ops"), o.and_then(|o| o.count), "count"));
        m.push((
            format!("client {k} latency mean"),
            o.and_then(|o| o.mean_us),
            "us",
        ));
        m.push((
            format!("client {k} latency p99"),
            o.and_then(|o| o.p99_us),
            "us",
        ));
    }
    let client_reads = c.ops.get("read").and_then(|o| o.count).filter(|&n| n > 0.0);
    m.push((
        "device bytes per client read".into(),
        d.ops
            .get("read")
            .zip(client_reads)
            .map(|(o, n)| o.bytes as f64 / n),
        "bytes",
    ));
    m
}

/// The figures of one arm, in an order and with names that depend only on the layout, so
/// that every arm yields the same rows. An op no arm has IOs of shows its count and bytes only.
fn device_metrics(d: &JsonDevice, layout: &Layout) -> Vec<(String, Option<f64>, &'static str)> {
    let mut m = Vec::new();
    for ((k, classes), &active) in OPS.iter().zip(&layout.classes).zip(&layout.active) {
        let op = d.ops.get(*k);
        // Figures per IO exist only when the op has IOs.
        let per_io = op.filter(|o| o.ios > 0);
        m.push((format!("{k} IOs"), op.map(|o| o.ios as f64), "count"));
        m.push((format!("{k} bytes"), op.map(|o| o.bytes as f64), "bytes"));
        if !active {
            continue;
        }
        m.push((
            format!("{k} mean request size"),
            per_io.map(|o| o.bytes as f64 / o.ios as f64),
            "bytes",
        ));
        m.push((format!("{k} % of IOs"), op.map(|o| o.pct_ios), "pp"));
        m.push((format!("{k} % of volume"), op.map(|o| o.pct_bytes), "pp"));
        for c in classes {
            m.push((
                format!("{k} share of {c}"),
                per_io.map(|o| {
                    o.block_sizes
                        .iter()
                        .find(|z| &z.class == c)
                        .map_or(0.0, |z| z.pct_ios)
                }),
                "pp",
            ));
        }
        let lat = |f: fn(&crate::report::model::JsonLatency) -> f64| {
            per_io.map(|o| f(&o.total_latency_us))
        };
        m.push((format!("{k} latency p50"), lat(|l| l.p50), "us"));
        m.push((format!("{k} latency p99"), lat(|l| l.p99), "us"));
        m.push((format!("{k} latency p99.9"), lat(|l| l.p999), "us"));
    }
    m.push((
        "read-ahead % of read bytes".into(),
        d.ops
            .get("read")
            .filter(|o| o.bytes > 0)
            .map(|r| r.readahead_bytes as f64 * 100.0 / r.bytes as f64),
        "pp",
    ));
    let t = &d.throughput;
    m.push((
        "write MB/s mean".into(),
        Some(t.write.mean_mb_per_s),
        "MB/s",
    ));
    m.push(("write MB/s max".into(), Some(t.write.max_mb_per_s), "MB/s"));
    m.push(("read MB/s mean".into(), Some(t.read.mean_mb_per_s), "MB/s"));
    m.push((
        "queue depth mean".into(),
        Some(t.queue_depth_mean),
        "requests",
    ));
    m.push((
        "queue depth max".into(),
        Some(f64::from(t.queue_depth_max)),
        "requests",
    ));
    m.push(("write bursts".into(), Some(d.bursts.len() as f64), "count"));
    let r = &d.reads_during_bursts;
    m.push((
        "read p99 during bursts".into(),
        (r.inside_ios > 0).then_some(r.inside_p99_us),
        "us",
    ));
    m.push((
        "read p99 outside bursts".into(),
        (r.outside_ios > 0).then_some(r.outside_p99_us),
        "us",
    ));
    m
}

/// Change of `v` against `v0` and whether it is beyond the unit's threshold.
fn change(v0: Option<f64>, v: Option<f64>, unit: &str) -> (Option<f64>, bool) {
    let (Some(v0), Some(v)) = (v0, v) else {
        return (None, false);
    };
    let th = threshold(unit);
    if unit == "pp" {
        let c = v - v0;
        (Some(c), c.abs() > th)
    } else if v0 != 0.0 {
        let c = (v - v0) / v0;
        (Some(c), c.abs() > th)
    } else {
        // From a real zero to something: no ratio, but a change.
        (None, v != 0.0)
    }
}

/// Compare the first device of each report (or the device of the same name); each arm is
/// known by its reports' trace paths.
pub fn compare(reports: &[JsonReport], device: Option<&str>) -> Result<Comparison, String> {
    let arms: Vec<(String, &JsonReport)> =
        reports.iter().map(|r| (r.traces.join(", "), r)).collect();
    compare_arms(&arms, device)
}

/// Compare the busiest device of each arm (or the device of the same name).
pub fn compare_inputs(inputs: &[Input], device: Option<&str>) -> Result<Comparison, String> {
    let arms: Vec<(String, &JsonReport)> =
        inputs.iter().map(|i| (i.path.clone(), &i.report)).collect();
    compare_arms(&arms, device)
}

/// Each arm's path as given and its report.
fn compare_arms(
    inputs: &[(String, &JsonReport)],
    device: Option<&str>,
) -> Result<Comparison, String> {
    let reports: Vec<&JsonReport> = inputs.iter().map(|i| i.1).collect();
    let mut devs = Vec::new();
    for (r, i) in reports.iter().zip(inputs) {
        let d = match device {
            Some(name) => r
                .devices
                .iter()
                .find(|d| d.name == name)
                .ok_or_else(|| format!("{}: no device {name}", i.0))?,
            None => r
                .devices
                .iter()
                .max_by_key(|d| d.ops.values().map(|o| o.ios).sum::<u64>())
                .ok_or_else(|| format!("{}: no IOs", i.0))?,
        };
        devs.push(d);
    }
    let clients: Vec<Client> = reports.iter().map(|r| Client::of(r)).collect();
    let layout = Layout::of(&devs, &clients);
    let metrics: Vec<_> = devs
        .iter()
        .zip(&clients)
        .map(|(d, c)| {
            let mut m = client_metrics(d, c, &layout);
            m.extend(device_metrics(d, &layout));
            m
        })
        .collect();
    let mut rows = Vec::new();
    for (i, (name, v0, unit)) in metrics.first().into_iter().flatten().enumerate() {
        let values: Vec<Option<f64>> = metrics.iter().map(|m| m[i].1).collect();
        if values.iter().all(Option::is_none) {
            // No arm has it (no bursts anywhere, no reads anywhere): not a row.
            continue;
        }
        let mut flagged = false;
        let change: Vec<Option<f64>> = values
            .iter()
            .enumerate()
            .map(|(j, &v)| {
                if j == 0 {
                    return None;
                }
                let (c, beyond) = change(*v0, v, unit);
                flagged |= beyond;
                c
            })
            .collect();
        rows.push(Row {
            metric: name.clone(),
            values,
            change,
            flagged,
            unit: (*unit).to_string(),
        });
    }
    let names = arm_names(inputs, &devs);
    let arms: Vec<Arm> = inputs
        .iter()
        .zip(&devs)
        .zip(names)
        .map(|((i, d), name)| Arm {
            name,
            input: i.0.clone(),
            trace: i.1.traces.join(", "),
            device: d.name.clone(),
            labels: i.1.labels.clone(),
        })
        .collect();
    let findings = findings(&rows, &arms);
    Ok(Comparison {
        schema_version: crate::report::model::REPORT_SCHEMA_VERSION,
        traces: reports.iter().map(|r| r.traces.join(", ")).collect(),
        devices: devs.iter().map(|d| d.name.clone()).collect(),
        arms,
        rows,
        findings,
    })
}

/// Each arm's name: the labels whose values differ between the arms (`read_ahead_kb=8`), else
/// the compared device's queue settings that differ (`read-ahead 8 KB`), else its path. An
/// arm that has none of the differing labels is named by its path; arms that would share a
/// name of labels or settings (repeated runs of one arm) get their letter after it.
fn arm_names(inputs: &[(String, &JsonReport)], devs: &[&JsonDevice]) -> Vec<String> {
    // Per arm, (key, text) parts; a key differs when some arm's text for it differs (a
    // missing one included).
    fn differing(parts: &[Vec<(String, String)>], sep: &str) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for (k, _) in parts.iter().flatten() {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
        let text = |p: &Vec<(String, String)>, k: &str| {
            p.iter().find(|(pk, _)| pk == k).map(|(_, t)| t.clone())
        };
        parts
            .iter()
            .map(|p| {
                keys.iter()
                    .filter(|k| parts.iter().any(|q| text(q, k) != text(&parts[0], k)))
                    .filter_map(|k| text(p, k))
                    .collect::<Vec<_>>()
                    .join(sep)
            })
            .collect()
    }
    let labels: Vec<Vec<(String, String)>> = inputs
        .iter()
        .map(|i| {
            i.1.labels
                .iter()
                .map(|(k, v)| (k.clone(), format!("{k}={v}")))
                .collect()
        })
        .collect();
    // An `arm=` label names what another differing label says better (arm=ra8 beside
    // read_ahead_kb=8): left out when the others name every arm apart.
    let settings: Vec<Vec<(String, String)>> = labels
        .iter()
        .map(|p| p.iter().filter(|(k, _)| k != "arm").cloned().collect())
        .collect();
    let by_settings = differing(&settings, " ");
    let apart = by_settings.iter().all(|n| !n.is_empty())
        && by_settings
            .iter()
            .enumerate()
            .all(|(i, n)| !by_settings[..i].contains(n));
    let mut names = if apart {
        by_settings
    } else {
        differing(&labels, " ")
    };
    if names.iter().all(String::is_empty) {
        let queues: Vec<Vec<(String, String)>> = devs
            .iter()
            .map(|d| {
                d.queue
                    .as_ref()
                    .map(queue_parts)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, t)| (k.to_string(), t))
                    .collect()
            })
            .collect();
        names = differing(&queues, ", ");
    }
    let mut names: Vec<String> = names
        .into_iter()
        .zip(inputs)
        .map(|(n, i)| if n.is_empty() { i.0.clone() } else { n })
        .collect();
    // A path named twice stays as it is (the same file given twice).
    let dup: Vec<bool> = names
        .iter()
        .zip(inputs)
        .map(|(n, i)| *n != i.0 && names.iter().filter(|m| *m == n).count() > 1)
        .collect();
    for (i, n) in names.iter_mut().enumerate() {
        if dup[i] {
            n.push_str(&format!(" ({})", letter(i)));
        }
    }
    names
}

/// The column letter of arm `i`: A..Z, then #27, #28...
pub fn letter(i: usize) -> String {
    match u8::try_from(i) {
        Ok(k) if k < 26 => char::from(b'A' + k).to_string(),
        _ => format!("#{}", i + 1),
    }
}

fn fmt(v: f64, unit: &str) -> String {
    match unit {
        "bytes" if v >= 1e9 => format!("{:.2} GB", v / 1e9),
        "bytes" if v >= 1e6 => format!("{:.1} MB", v / 1e6),
        "bytes" if v >= 1e3 => format!("{:.1} KB", v / 1e3),
        "bytes" => format!("{v:.0} B"),
        "us" if v >= 1000.0 => format!("{:.2} ms", v / 1e3),
        "us" => format!("{v:.0} us"),
        "pp" => format!("{v:.1}%"),
        "count" => format!("{v:.0}"),
        "KB" => format!("{v:.0} KB"),
        "ops/s" => thousands(crate::numeric::f64_to_u64_saturating(v.round())),
        _ => format!("{v:.1}"),
    }
}

/// A change as the table shows it: points for shares, else percent, or from twice the base
/// up a factor (`(2.3x)`, `(26x)`), which keeps five arms' columns narrow.
fn fmt_change(x: f64, unit: &str) -> String {
    if unit == "pp" {
        format!("({x:+.1})")
    } else if x >= 9.0 {
        format!("({:.0}x)", x + 1.0)
    } else if x >= 1.0 {
        format!("({:.1}x)", x + 1.0)
    } else {
        format!("({:+.0}%)", x * 100.0)
    }
}

pub fn write_text(out: &mut dyn Write, c: &Comparison) -> std::io::Result<()> {
    for (i, a) in c.arms.iter().enumerate() {
        if a.name == a.input {
            writeln!(out, "{} = {} ({})", letter(i), a.input, a.device)?;
        } else {
            writeln!(
                out,
                "{} = {} ({}, {})",
                letter(i),
                a.name,
                a.input,
                a.device
            )?;
        }
    }
    // Columns as wide as their widest cell: five arms fit in about 110 columns.
    let cells: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            r.values
                .iter()
                .zip(&r.change)
                .map(|(v, ch)| match (v, ch) {
                    (None, _) => "n/a".to_string(),
                    (Some(v), Some(x)) => {
                        format!("{} {}", fmt(*v, &r.unit), fmt_change(*x, &r.unit))
                    }
                    (Some(v), None) => fmt(*v, &r.unit),
                })
                .collect()
        })
        .collect();
    let name_w = c.rows.iter().map(|r| r.metric.len()).max().unwrap_or(0);
    let col_w = cells.iter().flatten().map(String::len).max().unwrap_or(1);
    write!(out, "\n  {:<name_w$}", "")?;
    for i in 0..c.arms.len() {
        write!(out, " {:>col_w$}", letter(i))?;
    }
    writeln!(out)?;
    for (r, cells) in c.rows.iter().zip(&cells) {
        write!(
            out,
            "{} {:<name_w$}",
            if r.flagged { "!" } else { " " },
            r.metric
        )?;
        for cell in cells {
            write!(out, " {cell:>col_w$}")?;
        }
        writeln!(out)?;
    }
    let n = c.rows.iter().filter(|r| r.flagged).count();
    writeln!(
        out,
        "\n{n} differences flagged (!): counts, volumes, rates and settings beyond 10%, latencies beyond 25%, shares beyond 5 points; n/a: the run has no such figure (no IOs of that op, no stress results)"
    )?;
    if !c.findings.is_empty() {
        writeln!(
            out,
            "\nFindings (each arm against A, most important first):"
        )?;
        for f in &c.findings {
            writeln!(out, "  - {}", f.text)?;
        }
    }
    Ok(())
}

/// How much a finding of a row matters: the client's throughput and tail latency first, then
/// what read-ahead costs the device per client read and the read size, then the rest.
fn priority(metric: &str) -> u8 {
    match metric {
        "client ops/s" => 0,
        m if m.starts_with("client ") && m.ends_with(" latency p99") => 1,
        "device bytes per client read" => 2,
        "read mean request size" => 3,
        m if m.starts_with("client ") => 4,
        "read bytes" | "write bytes" | "read latency p99" | "write latency p99" => 5,
        "read-ahead % of read bytes" | "write bursts" | "read p99 during bursts" => 6,
        m if m.ends_with(" latency p50") || m.ends_with(" latency p99.9") => 8,
        _ => 7,
    }
}

/// `4.1x higher in B than in A (31 ms vs 13 ms)`, or for a smaller move `18% lower in B than
/// in A (...)`: the larger of a ratio beyond 1.5 first.
fn comparative(v0: f64, v: f64, unit: &str, (up, down): (&str, &str), a0: &str, a: &str) -> String {
    let vals = |x: f64, y: f64| {
        let suffix = if unit == "ops/s" { " ops/s" } else { "" };
        format!("({} vs {}{suffix})", fmt(x, unit), fmt(y, unit))
    };
    let r = v / v0;
    if r >= 1.5 {
        format!("{r:.1}x {up} in {a} than in {a0} {}", vals(v, v0))
    } else if r <= 1.0 / 1.5 {
        format!("{:.1}x {up} in {a0} than in {a} {}", 1.0 / r, vals(v0, v))
    } else {
        let p = (r - 1.0).abs() * 100.0;
        let w = if r > 1.0 { up } else { down };
        format!("{p:.0}% {w} in {a} than in {a0} {}", vals(v, v0))
    }
}

/// The flagged differences of each arm against the first, one sentence each, most important
/// first, at most [`MAX_FINDINGS`]. Each comes from one row that moved beyond its threshold in
/// that arm (the mean read size takes the read-ahead share with it when that moved too) and
/// says only what the rows show. The read-ahead setting is the experiment's own variable,
/// named in the arms, not a finding.
fn findings(rows: &[Row], arms: &[Arm]) -> Vec<Finding> {
    let row = |m: &str| rows.iter().find(|r| r.metric == m);
    let mut out: Vec<(u8, f64, Finding)> = Vec::new();
    let a0 = arms.first().map_or("", |a| a.name.as_str());
    for (j, arm) in arms.iter().enumerate().skip(1) {
        let a = arm.name.as_str();
        let moved = |r: &Row| -> Option<(f64, f64)> {
            let (Some(v0), Some(v)) = (r.values[0], r.values[j]) else {
                return None;
            };
            change(Some(v0), Some(v), &r.unit).1.then_some((v0, v))
        };
        let readahead_with_size = row("read mean request size").and_then(moved).is_some()
            && row("read-ahead % of read bytes").and_then(moved).is_some();
        for r in rows
            .iter()
            .filter(|r| r.flagged && r.metric != "read-ahead KB")
        {
            let Some((v0, v)) = moved(r) else { continue };
            let mut metrics = vec![r.metric.clone()];
            let text = match r.metric.as_str() {
                "read-ahead % of read bytes" if readahead_with_size => continue,
                "read mean request size" if v0 > 0.0 && v > 0.0 => {
                    let big = if v >= v0 {
                        (v, a, v0, a0)
                    } else {
                        (v0, a0, v, a)
                    };
                    let mut t = format!(
                        "reads {:.1}x larger in {} than in {} (mean {} vs {})",
                        big.0 / big.2,
                        big.1,
                        big.3,
                        fmt(big.0, "bytes"),
                        fmt(big.2, "bytes")
                    );
                    if readahead_with_size
                        && let Some(ra) = row("read-ahead % of read bytes")
                        && let (Some(r0), Some(rj)) = (ra.values[0], ra.values[j])
                    {
                        let (rb, rs) = if v >= v0 { (rj, r0) } else { (r0, rj) };
                        t.push_str(&format!(
                            ": read-ahead brings {rb:.0}% vs {rs:.0}% of read bytes"
                        ));
                        metrics.push(ra.metric.clone());
                    }
                    t
                }
                "device bytes per client read" if v0 > 0.0 => format!(
                    "{a} reads {:.2}x the device bytes per client read of {a0} ({} vs {})",
                    v / v0,
                    fmt(v, "bytes"),
                    fmt(v0, "bytes")
                ),
                "client ops/s" if v0 > 0.0 => format!(
                    "client throughput {}",
                    comparative(v0, v, "ops/s", ("higher", "lower"), a0, a)
                ),
                _ if r.unit == "count" || r.unit == "pp" || v0 == 0.0 || v == 0.0 => format!(
                    "{}: {} in {a0}, {} in {a}",
                    r.metric,
                    fmt(v0, &r.unit),
                    fmt(v, &r.unit)
                ),
                m if m.contains("size") => format!(
                    "{m} {}",
                    comparative(v0, v, &r.unit, ("larger", "smaller"), a0, a)
                ),
                m => format!(
                    "{m} {}",
                    comparative(v0, v, &r.unit, ("higher", "lower"), a0, a)
                ),
            };
            let magnitude = if r.unit == "pp" {
                (v - v0).abs() / 100.0
            } else if v0 > 0.0 && v > 0.0 {
                (v / v0).ln().abs()
            } else {
                f64::INFINITY
            };
            out.push((
                priority(&r.metric),
                magnitude,
                Finding {
                    text,
                    metrics,
                    arm: j,
                },
            ));
        }
    }
    out.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.total_cmp(&x.1)));
    out.into_iter().take(MAX_FINDINGS).map(|f| f.2).collect()
}
