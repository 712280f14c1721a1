//! `blkprof check`: gate CI on a trace. Compares the trace's summary with a saved baseline
//! (`blkprof report --json`) or explicit rules, prints a verdict table, writes JUnit XML.
//! Rules format: docs/check-rules.md.

use std::collections::BTreeMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::html::escape;
use crate::summary::{JsonDevice, JsonReport};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Rule {
    /// e.g. "read.latency_p99_us", "write.pct_bytes", "queue_depth_max", "lost.total".
    pub metric: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// |value - baseline| <= this (same unit as the metric: points for percentages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<f64>,
    /// |value - baseline| <= this percent of the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_pct: Option<f64>,
    /// A difference from the baseline this small always passes `within`/`within_pct` (run-to-run
    /// noise of small values, such as sub-millisecond latencies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rules {
    /// Device to check (default: the busiest).
    #[serde(default)]
    pub device: Option<String>,
    pub rules: Vec<Rule>,
}

/// The rules used with --baseline and no --rules.
pub fn default_rules() -> Vec<Rule> {
    let r = |metric: &str, within: Option<f64>, within_pct: Option<f64>, max: Option<f64>| Rule {
        metric: metric.into(),
        within,
        within_pct,
        max,
        min: None,
        slack: None,
    };
    let lat = |metric: &str| Rule {
        metric: metric.into(),
        within_pct: Some(50.0),
        slack: Some(1000.0),
        ..Default::default()
    };
    vec![
        r("read.pct_ios", Some(5.0), None, None),
        r("write.pct_bytes", Some(5.0), None, None),
        r("read.size_mix_distance", None, None, Some(0.1)),
        r("write.size_mix_distance", None, None, Some(0.1)),
        r("read.mean_request_bytes", None, Some(10.0), None),
        r("write.mean_request_bytes", None, Some(10.0), None),
        lat("read.latency_p99_us"),
        lat("write.latency_p99_us"),
        r("read.mb_per_s_mean", None, Some(15.0), None),
        r("write.mb_per_s_mean", None, Some(15.0), None),
    ]
}

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub rule: Rule,
    pub value: Option<f64>,
    pub baseline: Option<f64>,
    pub pass: bool,
    pub reason: String,
}

fn device<'a>(r: &'a JsonReport, name: Option<&str>) -> Option<&'a JsonDevice> {
    match name {
        Some(n) => r.devices.iter().find(|d| d.name == n),
        None => r
            .devices
            .iter()
            .max_by_key(|d| d.ops.values().map(|o| o.ios).sum::<u64>()),
    }
}

/// L1 distance / 2 between two size-class distributions (0 = same mix, 1 = disjoint).
fn mix_distance(a: &JsonDevice, b: &JsonDevice, op: &str) -> Option<f64> {
    let dist = |d: &JsonDevice| -> BTreeMap<String, f64> {
        d.ops
            .get(op)
            .map(|o| {
                o.block_sizes
                    .iter()
                    .map(|z| (z.class.clone(), z.pct_ios / 100.0))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (x, y) = (dist(a), dist(b));
    if x.is_empty() && y.is_empty() {
        return None;
    }
    let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
    Some(
        keys.iter()
            .map(|k| (x.get(*k).unwrap_or(&0.0) - y.get(*k).unwrap_or(&0.0)).abs())
            .sum::<f64>()
            / 2.0,
    )
}

/// A metric's value, or None if the report has no such figure.
pub fn metric(r: &JsonReport, d: &JsonDevice, name: &str) -> Result<Option<f64>, String> {
    if name == "lost.total" {
        return Ok(Some(r.lost.total as f64));
    }
    let t = &d.throughput;
    let simple = match name {
        "queue_depth_mean" => Some(t.queue_depth_mean),
        "queue_depth_max" => Some(f64::from(t.queue_depth_max)),
        "bursts" => Some(d.bursts.len() as f64),
        "read_p99_during_bursts_us" => Some(d.reads_during_bursts.inside_p99_us),
        _ => None,
    };
    if simple.is_some() {
        return Ok(simple);
    }
    let Some((op, what)) = name.split_once('.') else {
        return Err(format!("unknown metric {name:?} (see docs/check-rules.md)"));
    };
    if !matches!(op, "read" | "write" | "discard" | "flush") {
        return Err(format!(
            "unknown op {op:?} in metric {name:?} (read, write, discard or flush)"
        ));
    }
    let o = d.ops.get(op);
    let rate = match op {
        "read" => &t.read,
        "write" => &t.write,
        "discard" => &t.discard,
        _ => &t.flush,
    };
    let v = match what {
        "ios" => o.map(|o| o.ios as f64),
        "bytes" => o.map(|o| o.bytes as f64),
        "pct_ios" => o.map(|o| o.pct_ios),
        "pct_bytes" => o.map(|o| o.pct_bytes),
        "mean_request_bytes" => o
            .filter(|o| o.ios > 0)
            .map(|o| o.bytes as f64 / o.ios as f64),
        "latency_p50_us" => o.filter(|o| o.ios > 0).map(|o| o.total_latency_us.p50),
        "latency_p99_us" => o.filter(|o| o.ios > 0).map(|o| o.total_latency_us.p99),
        "latency_p999_us" => o.filter(|o| o.ios > 0).map(|o| o.total_latency_us.p999),
        "latency_max_us" => o.filter(|o| o.ios > 0).map(|o| o.total_latency_us.max),
        "mb_per_s_mean" => Some(rate.mean_mb_per_s),
        "mb_per_s_max" => Some(rate.max_mb_per_s),
        "iops_mean" => Some(rate.mean_iops),
        "size_mix_distance" => return Ok(None), // needs the baseline: see check()
        _ => return Err(format!("unknown metric {name:?} (see docs/check-rules.md)")),
    };
    Ok(v)
}

/// `allow_incomplete`: a trace without a trailer (cut short or corrupt) passes its
/// completeness check; otherwise it fails it, since its figures cover only part of the run.
pub fn check(
    trace: &JsonReport,
    baseline: Option<&JsonReport>,
    rules: &Rules,
    allow_incomplete: bool,
) -> Result<Vec<Verdict>, String> {
    let d = device(trace, rules.device.as_deref()).ok_or_else(|| {
        format!(
            "the trace has no device {}",
            rules.device.as_deref().unwrap_or("with IO")
        )
    })?;
    let bd = match baseline {
        Some(b) => Some(
            device(b, Some(&d.name))
                .or_else(|| device(b, None))
                .ok_or("the baseline has no device with IO")?,
        ),
        None => None,
    };
    let mut out = Vec::new();
    if !trace.complete {
        let stopped = trace
            .integrity
            .stopped
            .as_deref()
            .unwrap_or("it did not end cleanly");
        out.push(Verdict {
            rule: Rule {
                metric: "trace.complete".into(),
                min: Some(1.0),
                ..Rule::default()
            },
            value: Some(0.0),
            baseline: None,
            pass: allow_incomplete,
            reason: if allow_incomplete {
                format!("incomplete, allowed by --allow-incomplete: {stopped}")
            } else {
                format!(
                    "the trace is incomplete: {stopped}; its figures cover part of the run (--allow-incomplete checks what is intact)"
                )
            },
        });
    }
    for rule in &rules.rules {
        let needs_base = rule.within.is_some()
            || rule.within_pct.is_some()
            || rule.metric.ends_with("size_mix_distance");
        if needs_base && baseline.is_none() {
            return Err(format!(
                "rule on {:?} compares with a baseline: give --baseline",
                rule.metric
            ));
        }
        if rule.max.is_none()
            && rule.min.is_none()
            && rule.within.is_none()
            && rule.within_pct.is_none()
        {
            return Err(format!(
                "rule on {:?} has no bound (max, min, within or within_pct)",
                rule.metric
            ));
        }
        let (value, base) = if let Some(op) = rule.metric.strip_suffix(".size_mix_distance") {
            let bd = bd.expect("checked above");
            (mix_distance(d, bd, op), None)
        } else {
            let v = metric(trace, d, &rule.metric)?;
            let b = match (baseline, bd) {
                (Some(b), Some(bd)) => metric(b, bd, &rule.metric)?,
                _ => None,
            };
            (v, b)
        };
        let mut reasons = Vec::new();
        let Some(v) = value else {
            out.push(Verdict {
                rule: rule.clone(),
                value: None,
                baseline: base,
                pass: true,
                reason: "no such IO in the trace: nothing to check".into(),
            });
            continue;
        };
        if let Some(m) = rule.max.filter(|&m| v > m) {
            reasons.push(format!("{v:.3} is above the maximum {m}"));
        }
        if let Some(m) = rule.min.filter(|&m| v < m) {
            reasons.push(format!("{v:.3} is below the minimum {m}"));
        }
        if let Some(b) = base.filter(|b| (v - b).abs() > rule.slack.unwrap_or(0.0)) {
            if let Some(w) = rule.within.filter(|&w| (v - b).abs() > w) {
                reasons.push(format!(
                    "{v:.3} is {:+.3} from the baseline's {b:.3}, more than {w}",
                    v - b
                ));
            }
            if let Some(w) = rule
                .within_pct
                .filter(|&w| b != 0.0 && (v - b).abs() / b.abs() * 100.0 > w)
            {
                reasons.push(format!(
                    "{v:.3} is {:+.1}% from the baseline's {b:.3}, more than {w}%",
                    (v - b) / b.abs() * 100.0
                ));
            }
        }
        let pass = reasons.is_empty();
        out.push(Verdict {
            rule: rule.clone(),
            value: Some(v),
            baseline: base,
            pass,
            reason: if pass {
                "ok".into()
            } else {
                reasons.join("; ")
            },
        });
    }
    Ok(out)
}

pub fn write_table(out: &mut dyn Write, verdicts: &[Verdict]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<6} {:<30} {:>14} {:>14}  reason",
        "", "metric", "value", "baseline"
    )?;
    for v in verdicts {
        let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        writeln!(
            out,
            "{:<6} {:<30} {:>14} {:>14}  {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.rule.metric,
            f(v.value),
            f(v.baseline),
            v.reason
        )?;
    }
    let failed = verdicts.iter().filter(|v| !v.pass).count();
    writeln!(out, "\n{} of {} checks failed", failed, verdicts.len())
}

pub fn junit(verdicts: &[Verdict], name: &str) -> String {
    let failed = verdicts.iter().filter(|v| !v.pass).count();
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites><testsuite name=\"blkprof check {}\" tests=\"{}\" failures=\"{failed}\">\n",
        escape(name),
        verdicts.len()
    );
    for v in verdicts {
        x.push_str(&format!(
            "  <testcase classname=\"blkprof.check\" name=\"{}\">",
            escape(&v.rule.metric)
        ));
        if !v.pass {
            x.push_str(&format!("<failure message=\"{}\"/>", escape(&v.reason)));
        }
        x.push_str("</testcase>\n");
    }
    x.push_str("</testsuite></testsuites>\n");
    x
}
