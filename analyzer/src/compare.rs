//! `blkprof compare A B [...]`: the summaries side by side, with the differences that matter
//! flagged (for A/B experiments: read-ahead 4096 vs 8 KB, chunk size, document size).

use std::io::Write;

use serde::Serialize;

use crate::summary::{JsonDevice, JsonReport};

/// One compared figure.
#[derive(Serialize, Clone, Debug)]
pub struct Row {
    pub metric: String,
    pub values: Vec<f64>,
    /// Relative change of each run against the first (None for the first, or a zero base).
    pub change: Vec<Option<f64>>,
    pub flagged: bool,
    pub unit: String,
}

#[derive(Serialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub traces: Vec<String>,
    pub devices: Vec<String>,
    pub rows: Vec<Row>,
}

/// How far a figure may move before it is flagged: volumes and counts 10%, latency 25%,
/// shares (percentage points) 5.
fn threshold(unit: &str) -> f64 {
    match unit {
        "us" => 0.25,
        "pp" => 5.0,
        _ => 0.10,
    }
}

fn device_metrics(d: &JsonDevice) -> Vec<(String, f64, &'static str)> {
    let mut m = Vec::new();
    for k in ["read", "write", "discard", "flush"] {
        let Some(o) = d.ops.get(k) else { continue };
        m.push((format!("{k} IOs"), o.ios as f64, "count"));
        m.push((format!("{k} bytes"), o.bytes as f64, "bytes"));
        if o.ios > 0 {
            m.push((
                format!("{k} mean request size"),
                o.bytes as f64 / o.ios as f64,
                "bytes",
            ));
            m.push((format!("{k} % of IOs"), o.pct_ios, "pp"));
            m.push((format!("{k} % of volume"), o.pct_bytes, "pp"));
            if let Some(top) = o.block_sizes.first() {
                m.push((format!("{k} share of {}", top.class), top.pct_ios, "pp"));
            }
            m.push((format!("{k} latency p50"), o.total_latency_us.p50, "us"));
            m.push((format!("{k} latency p99"), o.total_latency_us.p99, "us"));
            m.push((format!("{k} latency p99.9"), o.total_latency_us.p999, "us"));
        }
    }
    if let Some(r) = d.ops.get("read").filter(|o| o.bytes > 0) {
        m.push((
            "read-ahead % of read bytes".into(),
            r.readahead_bytes as f64 * 100.0 / r.bytes as f64,
            "pp",
        ));
    }
    let t = &d.throughput;
    m.push(("write MB/s mean".into(), t.write.mean_mb_per_s, "MB/s"));
    m.push(("write MB/s max".into(), t.write.max_mb_per_s, "MB/s"));
    m.push(("read MB/s mean".into(), t.read.mean_mb_per_s, "MB/s"));
    m.push(("queue depth mean".into(), t.queue_depth_mean, "requests"));
    m.push((
        "queue depth max".into(),
        f64::from(t.queue_depth_max),
        "requests",
    ));
    m.push(("write bursts".into(), d.bursts.len() as f64, "count"));
    if !d.bursts.is_empty() {
        m.push((
            "read p99 during bursts".into(),
            d.reads_during_bursts.inside_p99_us,
            "us",
        ));
    }
    m.push((
        "read p99 outside bursts".into(),
        d.reads_during_bursts.outside_p99_us,
        "us",
    ));
    m
}

/// Compare the first device of each report (or the device of the same name).
pub fn compare(reports: &[JsonReport], device: Option<&str>) -> Result<Comparison, String> {
    let mut devs = Vec::new();
    for r in reports {
        let d = match device {
            Some(name) => r
                .devices
                .iter()
                .find(|d| d.name == name)
                .ok_or_else(|| format!("{}: no device {name}", r.traces.join(", ")))?,
            None => r
                .devices
                .iter()
                .max_by_key(|d| d.ops.values().map(|o| o.ios).sum::<u64>())
                .ok_or_else(|| format!("{}: no IOs", r.traces.join(", ")))?,
        };
        devs.push(d);
    }
    let metrics: Vec<Vec<(String, f64, &str)>> = devs.iter().map(|d| device_metrics(d)).collect();
    let mut rows = Vec::new();
    for (name, v0, unit) in &metrics[0] {
        let values: Vec<f64> = metrics
            .iter()
            .map(|m| m.iter().find(|x| &x.0 == name).map_or(0.0, |x| x.1))
            .collect();
        let change: Vec<Option<f64>> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i == 0 {
                    None
                } else if *unit == "pp" {
                    Some(v - v0)
                } else if *v0 != 0.0 {
                    Some((v - v0) / v0)
                } else {
                    None
                }
            })
            .collect();
        let th = threshold(unit);
        let flagged = change.iter().flatten().any(|c| c.abs() > th)
            || (*v0 == 0.0 && values.iter().any(|&v| v != 0.0) && *unit != "pp");
        rows.push(Row {
            metric: name.clone(),
            values,
            change,
            flagged,
            unit: (*unit).to_string(),
        });
    }
    Ok(Comparison {
        schema_version: crate::summary::REPORT_SCHEMA_VERSION,
        traces: reports.iter().map(|r| r.traces.join(", ")).collect(),
        devices: devs.iter().map(|d| d.name.clone()).collect(),
        rows,
    })
}

fn fmt(v: f64, unit: &str) -> String {
    match unit {
        "bytes" if v >= 1e9 => format!("{:.2} GB", v / 1e9),
        "bytes" if v >= 1e6 => format!("{:.1} MB", v / 1e6),
        "bytes" if v >= 1e3 => format!("{:.1} KB", v / 1e3),
        "us" if v >= 1000.0 => format!("{:.2} ms", v / 1e3),
        "us" => format!("{v:.0} us"),
        "pp" => format!("{v:.1}%"),
        "count" => format!("{v:.0}"),
        _ => format!("{v:.1}"),
    }
}

pub fn write_text(out: &mut dyn Write, c: &Comparison) -> std::io::Result<()> {
    for (i, t) in c.traces.iter().enumerate() {
        writeln!(
            out,
            "{} = {} ({})",
            (b'A' + i as u8) as char,
            t,
            c.devices[i]
        )?;
    }
    write!(out, "\n  {:<32}", "")?;
    for i in 0..c.traces.len() {
        write!(out, " {:>14}", (b'A' + i as u8) as char)?;
    }
    writeln!(out)?;
    for r in &c.rows {
        write!(
            out,
            "{} {:<32}",
            if r.flagged { "!" } else { " " },
            r.metric
        )?;
        for (i, v) in r.values.iter().enumerate() {
            let ch = match r.change[i] {
                Some(x) if r.unit == "pp" => format!(" ({x:+.1})"),
                Some(x) => format!(" ({:+.0}%)", x * 100.0),
                None => String::new(),
            };
            write!(out, " {:>14}", format!("{}{ch}", fmt(*v, &r.unit)))?;
        }
        writeln!(out)?;
    }
    let n = c.rows.iter().filter(|r| r.flagged).count();
    writeln!(
        out,
        "\n{n} differences flagged (!): counts and volumes beyond 10%, latencies beyond 25%, shares beyond 5 points"
    )?;
    Ok(())
}
