//! `blkprof compare A B [...]`: the summaries side by side, with the differences that matter
//! flagged (for A/B experiments: read-ahead 4096 vs 8 KB, chunk size, document size).

use std::io::Write;

use serde::Serialize;

use crate::summary::{JsonDevice, JsonReport};

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

const OPS: [&str; 4] = ["read", "write", "discard", "flush"];

/// The rows every arm yields, whatever it holds: per op, whether any arm has IOs of it, and the
/// size classes present in any arm, smallest first (classes are disjoint ranges, so their
/// mean request sizes order them).
struct Layout {
    active: Vec<bool>,
    classes: Vec<Vec<String>>,
}

impl Layout {
    fn of(devs: &[&JsonDevice]) -> Layout {
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
        Layout { active, classes }
    }
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
        let lat =
            |f: fn(&crate::summary::JsonLatency) -> f64| per_io.map(|o| f(&o.total_latency_us));
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
    let layout = Layout::of(&devs);
    let metrics: Vec<_> = devs.iter().map(|d| device_metrics(d, &layout)).collect();
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
        "bytes" => format!("{v:.0} B"),
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
            let Some(v) = v else {
                write!(out, " {:>14}", "n/a")?;
                continue;
            };
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
        "\n{n} differences flagged (!): counts and volumes beyond 10%, latencies beyond 25%, shares beyond 5 points; n/a: the run has no such figure (no IOs of that op)"
    )?;
    Ok(())
}
