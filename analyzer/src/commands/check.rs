//! `blkprof check`: gate CI on a trace. Compares the trace's summary with a saved baseline
//! (`blkprof report --json`) or explicit rules, prints a verdict table, writes JUnit XML.
//! Rules format: docs/check-rules.md.

use std::collections::BTreeMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::report::format::escape;
use crate::report::model::{JsonDevice, JsonReport};

use crate::analysis::noise;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Rule {
    /// e.g. `read.latency_p99_us`, `write.pct_bytes`, `queue_depth_max`, `lost.total`.
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
    /// Which way a difference from the baseline fails: "up", "down" or "both" (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Too few IOs to judge: the rule passes unless the trace and every baseline have at least
    /// this many IOs of the metric's op (device-wide metrics: IOs of all ops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ios: Option<u64>,
    /// Widen each figure into an interval of this many standard errors of its sampling noise
    /// (a percentile: the values at the ranks its order statistic may take) before comparing;
    /// only a difference beyond the intervals counts (docs/check-rules.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigmas: Option<f64>,
}

/// Which way a difference from the baseline fails a rule.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Only a rise above the baseline (latency getting worse).
    Up,
    /// Only a fall below it.
    Down,
    #[default]
    Both,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rules {
    /// Device to check (default: the busiest).
    #[serde(default)]
    pub device: Option<String>,
    pub rules: Vec<Rule>,
}

/// The rules used with one --baseline and no --rules: [`default_rules_for`] one baseline.
pub fn default_rules() -> Vec<Rule> {
    default_rules_for(1)
}

/// The rules used with `baselines` --baseline files and no --rules. The workload's shape is
/// compared tightly, beyond the sampling noise of the IO counts. Latency only fails on a rise
/// beyond the run-to-run spread: with fewer than [`SPREAD_BASELINES`] baselines that spread
/// is unknown and the allowance is the one measured on reruns of one job here; with more, the
/// baselines show it. Throughput is not compared: a fixed-duration, unthrottled job's
/// throughput measures the machine. Measurements and reasons: docs/check-rules.md.
pub fn default_rules_for(baselines: usize) -> Vec<Rule> {
    let shape = |metric: &str, within: Option<f64>, within_pct: Option<f64>| Rule {
        metric: metric.into(),
        within,
        within_pct,
        sigmas: Some(4.0),
        min_ios: Some(100),
        ..Rule::default()
    };
    let mix = |metric: &str| Rule {
        metric: metric.into(),
        max: Some(0.05),
        sigmas: Some(4.0),
        min_ios: Some(100),
        ..Rule::default()
    };
    let lat = |metric: &str, within_pct: f64, slack: Option<f64>, min_ios: u64| Rule {
        metric: metric.into(),
        within_pct: Some(within_pct),
        slack,
        direction: Some(Direction::Up),
        sigmas: Some(3.0),
        min_ios: Some(min_ios),
        ..Rule::default()
    };
    // The median moves with what the machine is doing: reruns reached 1.66x the highest of
    // three baselines recorded in another hour, a device twice as slow as little as 1.32x (p1
    // catches that one). So the median only fails on a gross rise: more than 2x; with fewer
    // than three baselines (one may be an outlier run, 11 us where reruns had 21-46 us) also
    // more than 50 us.
    let (p50_pct, p50_slack) = if baselines >= SPREAD_BASELINES {
        (100.0, None)
    } else {
        (100.0, Some(50.0))
    };
    vec![
        shape("read.pct_ios", Some(2.0), None),
        shape("write.pct_bytes", Some(2.0), None),
        mix("read.size_mix_distance"),
        mix("write.size_mix_distance"),
        shape("read.mean_request_bytes", None, Some(5.0)),
        shape("write.mean_request_bytes", None, Some(5.0)),
        lat("read.latency_p50_us", p50_pct, p50_slack, 100),
        lat("write.latency_p50_us", p50_pct, p50_slack, 100),
        // The floor: the fastest 1% of IOs waited for nothing but the device, so a busy machine
        // leaves it alone (5.2-5.8 us over 40 reruns, with a CPU-bound neighbour or not) and a
        // device twice as slow doubles it (12.1-12.6 us): a rise of more than 50% and 2 us.
        lat("read.latency_p1_us", 50.0, Some(2.0), 1000),
        lat("write.latency_p1_us", 50.0, Some(2.0), 1000),
        // A p99 moved 52-fold between reruns (76 us to 4 ms, CPU contention): only a rise of
        // more than 2x and 5 ms fails.
        lat("read.latency_p99_us", 100.0, Some(5000.0), 1000),
        lat("write.latency_p99_us", 100.0, Some(5000.0), 1000),
    ]
}

/// From this many baselines on, the default latency rules compare with the band they span.
pub const SPREAD_BASELINES: usize = 3;

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub rule: Rule,
    pub value: Option<f64>,
    /// The baseline's figure (with several baselines, the middle one).
    pub baseline: Option<f64>,
    /// With several baselines: the lowest and highest of their figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_range: Option<(f64, f64)>,
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

const OPS: [&str; 4] = tracer_common::op::StatGroup::NAMES;

/// The quantile level of a latency percentile metric (`latency_p99_us` -> 0.99).
fn percentile_level(what: &str) -> Option<f64> {
    Some(match what {
        "latency_p1_us" => 0.01,
        "latency_p5_us" => 0.05,
        "latency_p10_us" => 0.1,
        "latency_p25_us" => 0.25,
        "latency_p50_us" => 0.5,
        "latency_p90_us" => 0.9,
        "latency_p99_us" => 0.99,
        "latency_p999_us" => 0.999,
        "latency_p9999_us" => 0.9999,
        _ => return None,
    })
}

/// A metric's value, or None if the report has no such figure.
pub fn metric(r: &JsonReport, d: &JsonDevice, name: &str) -> Result<Option<f64>, String> {
    if name == "lost.total" {
        return Ok(Some(r.lost.total as f64));
    }
    if let Some(path) = name.strip_prefix("sections.") {
        return section_metric(r, d, name, path);
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
    if !OPS.contains(&op) {
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
    let with_ios = o.filter(|o| o.ios > 0);
    let l = with_ios.map(|o| &o.total_latency_us);
    let v = match what {
        "ios" => o.map(|o| o.ios as f64),
        "bytes" => o.map(|o| o.bytes as f64),
        "pct_ios" => o.map(|o| o.pct_ios),
        "pct_bytes" => o.map(|o| o.pct_bytes),
        "mean_request_bytes" => with_ios.map(|o| o.bytes as f64 / o.ios as f64),
        // The low percentiles are on the report's ladder only (reports before it lack them).
        "latency_p1_us" | "latency_p5_us" | "latency_p10_us" | "latency_p25_us" => {
            let q = percentile_level(what);
            l.and_then(|l| l.quantiles.iter().find(|e| Some(e[0]) == q).map(|e| e[1]))
        }
        "latency_p50_us" => l.map(|l| l.p50),
        "latency_p90_us" => l.map(|l| l.p90),
        "latency_p99_us" => l.map(|l| l.p99),
        "latency_p999_us" => l.map(|l| l.p999),
        "latency_p9999_us" => l.map(|l| l.p9999),
        "latency_max_us" => l.map(|l| l.max),
        "mb_per_s_mean" => Some(rate.mean_mb_per_s),
        "mb_per_s_max" => Some(rate.max_mb_per_s),
        "iops_mean" => Some(rate.mean_iops),
        "size_mix_distance" => return Ok(None), // needs the baseline: see check()
        _ => return Err(format!("unknown metric {name:?} (see docs/check-rules.md)")),
    };
    Ok(v)
}

/// A number in a section's part of the report (`sections.NAME.PATH`), in the entry of
/// `devices[]` named like the device: PATH walks objects by key and picks from an array the
/// element whose `op` or `name` is the next step, so `sections.access_pattern.ops.write.
/// pct_sequential_ios` is the write entry's share. None when the section or the device has no
/// such entry (no IO of that op, a report from before the section); an error for a section
/// no report has, or a path that does not lead to a number.
fn section_metric(
    r: &JsonReport,
    d: &JsonDevice,
    name: &str,
    path: &str,
) -> Result<Option<f64>, String> {
    let unknown = || {
        let names: Vec<&str> = crate::analysis::sections::SECTIONS
            .iter()
            .map(|s| s.name)
            .collect();
        format!(
            "unknown metric {name:?}: write sections.SECTION.FIELD with SECTION one of {} (see docs/check-rules.md)",
            names.join(", ")
        )
    };
    let Some((section, mut rest)) = path.split_once('.') else {
        return Err(unknown());
    };
    if !crate::analysis::sections::SECTIONS
        .iter()
        .any(|s| s.name == section)
    {
        return Err(unknown());
    }
    let Some(v) = r.sections.get(section) else {
        return Ok(None);
    };
    let Some(mut at) = v["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|x| x["name"] == d.name.as_str()))
    else {
        return Ok(None);
    };
    while !rest.is_empty() {
        let (step, more) = rest.split_once('.').unwrap_or((rest, ""));
        rest = more;
        at = match at {
            serde_json::Value::Object(o) => match o.get(step) {
                Some(x) => x,
                None => {
                    return Err(format!(
                        "metric {name:?}: the section has no field {step:?} here (fields: {}; see docs/report-json.md)",
                        o.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
                    ));
                }
            },
            serde_json::Value::Array(a) => {
                match a.iter().find(|x| x["op"] == step || x["name"] == step) {
                    Some(x) => x,
                    // An op the device had no IO of: nothing to check.
                    None => return Ok(None),
                }
            }
            _ => {
                return Err(format!(
                    "metric {name:?}: {step:?} follows a value that is not an object or list"
                ));
            }
        };
    }
    match at.as_f64() {
        Some(x) => Ok(Some(x)),
        None => Err(format!(
            "metric {name:?} is not a number in the report (it is {at}); name a field below it"
        )),
    }
}

/// IOs behind a metric: of its op, or of all ops for a device-wide one.
fn ios_behind(d: &JsonDevice, name: &str) -> u64 {
    if name.starts_with("sections.") {
        // The op a section metric picks (`...ops.write...`), if any.
        let steps: Vec<&str> = name.split('.').collect();
        return match steps
            .windows(2)
            .find(|w| w[0] == "ops" && OPS.contains(&w[1]))
        {
            Some(w) => d.ops.get(w[1]).map_or(0, |o| o.ios),
            None => d.ops.values().map(|o| o.ios).sum(),
        };
    }
    match name.split_once('.') {
        Some((op, _)) if OPS.contains(&op) => d.ops.get(op).map_or(0, |o| o.ios),
        _ => d.ops.values().map(|o| o.ios).sum(),
    }
}

/// A figure and the interval its sampling noise allows (lo = value = hi without noise).
#[derive(Clone, Copy, Debug)]
struct Figure {
    value: f64,
    lo: f64,
    hi: f64,
}

/// A metric's figure widened by `sigmas` standard errors ([`crate::analysis::noise`]). Metrics without a
/// sampling model (throughput, queue depth, counts) keep a point.
fn figure(
    r: &JsonReport,
    d: &JsonDevice,
    name: &str,
    sigmas: f64,
) -> Result<Option<Figure>, String> {
    let Some(value) = metric(r, d, name)? else {
        return Ok(None);
    };
    let point = Figure {
        value,
        lo: value,
        hi: value,
    };
    let Some((op, what)) = name.split_once('.') else {
        return Ok(Some(point));
    };
    let Some(o) = d.ops.get(op).filter(|o| o.ios > 0) else {
        return Ok(Some(point));
    };
    if sigmas == 0.0 {
        return Ok(Some(point));
    }
    if let Some(q) = percentile_level(what) {
        let (qlo, qhi) = noise::quantile_rank_bounds(q, o.ios, sigmas);
        let l = &o.total_latency_us;
        return Ok(Some(Figure {
            value,
            lo: noise::latency_at(l, o.ios, qlo).min(value),
            hi: noise::latency_at(l, o.ios, qhi).max(value),
        }));
    }
    let se = match what {
        "pct_ios" => noise::pct_ios_se(o.ios, d.ops.values().map(|o| o.ios).sum()),
        "pct_bytes" => {
            let others: Vec<_> = d
                .ops
                .iter()
                .filter(|(k, _)| k.as_str() != op)
                .map(|(_, o)| o)
                .collect();
            noise::pct_bytes_se(o, &others)
        }
        "mean_request_bytes" => noise::mean_bytes_se(o),
        _ => 0.0,
    };
    Ok(Some(Figure {
        value,
        lo: value - sigmas * se,
        hi: value + sigmas * se,
    }))
}

/// `allow_incomplete`: a trace without a trailer (cut short or corrupt) passes its
/// completeness check; otherwise it fails it, since its figures cover only part of the run.
pub fn check(
    trace: &JsonReport,
    baseline: Option<&JsonReport>,
    rules: &Rules,
    allow_incomplete: bool,
) -> Result<Vec<Verdict>, String> {
    check_against(trace, baseline.as_slice(), rules, allow_incomplete)
}

fn fmt_num(x: f64) -> String {
    format!("{x:.3}")
}

/// Like [`check`], against any number of baselines: recordings of the same workload whose
/// spread shows the run-to-run noise. A figure is compared with the range they span.
pub fn check_against(
    trace: &JsonReport,
    baselines: &[&JsonReport],
    rules: &Rules,
    allow_incomplete: bool,
) -> Result<Vec<Verdict>, String> {
    let d = device(trace, rules.device.as_deref()).ok_or_else(|| {
        format!(
            "the trace has no device {}",
            rules.device.as_deref().unwrap_or("with IO")
        )
    })?;
    let bds: Vec<(&JsonReport, &JsonDevice)> = baselines
        .iter()
        .map(|b| {
            device(b, Some(&d.name))
                .or_else(|| device(b, None))
                .map(|bd| (*b, bd))
                .ok_or("the baseline has no device with IO")
        })
        .collect::<Result<_, _>>()?;
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
            baseline_range: None,
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
        out.push(verdict(trace, d, &bds, rule)?);
    }
    Ok(out)
}

fn verdict(
    trace: &JsonReport,
    d: &JsonDevice,
    bds: &[(&JsonReport, &JsonDevice)],
    rule: &Rule,
) -> Result<Verdict, String> {
    let sigmas = rule_sigmas(rule, !bds.is_empty())?;
    let mut v = Verdict {
        rule: rule.clone(),
        value: None,
        baseline: None,
        baseline_range: None,
        pass: true,
        reason: "ok".into(),
    };
    let (fig, base) = figures(trace, d, bds, rule, sigmas)?;
    if !base.is_empty() {
        let mut vals: Vec<f64> = base.iter().map(|b| b.value).collect();
        vals.sort_by(f64::total_cmp);
        v.baseline = Some(vals[(vals.len() - 1) / 2]);
        if vals.len() > 1 {
            v.baseline_range = Some((vals[0], vals[vals.len() - 1]));
        }
    }
    let Some(f) = fig else {
        v.reason = "no such IO in the trace: nothing to check".into();
        return Ok(v);
    };
    v.value = Some(f.value);
    if let Some(m) = rule.min_ios {
        let n = ios_behind(d, &rule.metric);
        let least_base = bds.iter().map(|(_, bd)| ios_behind(bd, &rule.metric)).min();
        if n < m {
            v.reason = format!("{n} IOs, fewer than min_ios {m}: too few to judge");
            return Ok(v);
        }
        if let Some(nb) = least_base.filter(|&nb| nb < m) {
            v.reason =
                format!("the baseline has {nb} IOs, fewer than min_ios {m}: too few to judge");
            return Ok(v);
        }
    }
    if base.is_empty()
        && !bds.is_empty()
        && (rule.within.is_some() || rule.within_pct.is_some())
        && rule.max.is_none()
        && rule.min.is_none()
    {
        v.reason = "the baseline has no such figure (a report written before it existed): nothing to compare".into();
        return Ok(v);
    }
    let noisy = sigmas > 0.0;
    let mut reasons = Vec::new();
    if let Some(m) = rule.max.filter(|&m| f.lo > m) {
        reasons.push(if noisy && f.lo < f.value {
            format!(
                "{} is above the maximum {m}, and so is {} at the edge of its sampling noise",
                fmt_num(f.value),
                fmt_num(f.lo)
            )
        } else {
            format!("{} is above the maximum {m}", fmt_num(f.value))
        });
    }
    if let Some(m) = rule.min.filter(|&m| f.hi < m) {
        reasons.push(format!("{} is below the minimum {m}", fmt_num(f.value)));
    }
    if !base.is_empty() && (rule.within.is_some() || rule.within_pct.is_some()) {
        reasons.extend(within_reasons(rule, &f, &base, v.baseline_range, noisy));
    }
    v.pass = reasons.is_empty();
    if !v.pass {
        v.reason = reasons.join("; ");
    }
    Ok(v)
}

/// The rule's sigmas, once the rule is one that can be checked: it has a bound, and a baseline
/// if it compares with one.
fn rule_sigmas(rule: &Rule, have_baseline: bool) -> Result<f64, String> {
    let mix = rule.metric.ends_with(".size_mix_distance");
    let needs_base = rule.within.is_some() || rule.within_pct.is_some() || mix;
    if needs_base && !have_baseline {
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
    let sigmas = rule.sigmas.unwrap_or(0.0);
    if !(sigmas >= 0.0 && sigmas.is_finite()) {
        return Err(format!(
            "rule on {:?}: sigmas must be a number >= 0",
            rule.metric
        ));
    }
    Ok(sigmas)
}

/// The rule's figure in the trace and in each baseline that has it. A size-mix distance is one
/// figure, the distance to the closest baseline less its sampling noise, and no baselines.
fn figures(
    trace: &JsonReport,
    d: &JsonDevice,
    bds: &[(&JsonReport, &JsonDevice)],
    rule: &Rule,
    sigmas: f64,
) -> Result<(Option<Figure>, Vec<Figure>), String> {
    if let Some(op) = rule.metric.strip_suffix(".size_mix_distance") {
        if !OPS.contains(&op) {
            return Err(format!(
                "unknown op {op:?} in metric {:?} (read, write, discard or flush)",
                rule.metric
            ));
        }
        let closest = bds
            .iter()
            .filter_map(|(_, bd)| {
                let dist = mix_distance(d, bd, op)?;
                let se = match (d.ops.get(op), bd.ops.get(op)) {
                    (Some(a), Some(b)) => noise::size_mix_se(a, b),
                    _ => 0.0,
                };
                Some(Figure {
                    value: dist,
                    lo: (dist - sigmas * se).max(0.0),
                    hi: dist + sigmas * se,
                })
            })
            .min_by(|a, b| a.lo.total_cmp(&b.lo));
        return Ok((closest, Vec::new()));
    }
    let f = figure(trace, d, &rule.metric, sigmas)?;
    let mut base = Vec::new();
    for (b, bd) in bds {
        if let Some(x) = figure(b, bd, &rule.metric, sigmas)? {
            base.push(x);
        }
    }
    Ok((f, base))
}

/// Why the figure `f` is not within `within`/`within_pct` of the baselines (`base`, not empty;
/// `range`: theirs when several); empty when it is.
fn within_reasons(
    rule: &Rule,
    f: &Figure,
    base: &[Figure],
    range: Option<(f64, f64)>,
    noisy: bool,
) -> Vec<String> {
    let what = match range {
        Some((lo, hi)) => format!("the baselines' {}..{}", fmt_num(lo), fmt_num(hi)),
        None => format!("the baseline's {}", fmt_num(base[0].value)),
    };
    let highest = base
        .iter()
        .max_by(|a, b| a.value.total_cmp(&b.value))
        .expect("a baseline");
    let lowest = base
        .iter()
        .min_by(|a, b| a.value.total_cmp(&b.value))
        .expect("a baseline");
    // A rise is measured from the highest baseline, a fall from the lowest (one baseline:
    // the same); the two figures' noise adds in quadrature and is taken off the difference.
    let dir = rule.direction.unwrap_or_default();
    let mut sides = Vec::new();
    if dir != Direction::Down {
        let noise = (f.value - f.lo).hypot(highest.hi - highest.value);
        sides.push((f.value - highest.value, 1.0, noise, highest.value));
    }
    if dir != Direction::Up {
        let noise = (f.hi - f.value).hypot(lowest.value - lowest.lo);
        sides.push((f.value - lowest.value, -1.0, noise, lowest.value));
    }
    let slack = rule.slack.unwrap_or(0.0);
    let mut reasons = Vec::new();
    for (diff, sign, noise, edge) in sides {
        let gap = sign * diff - noise;
        if gap <= slack || gap <= 0.0 {
            continue;
        }
        let beyond = if noisy {
            format!(" (sampling noise {})", fmt_num(noise))
        } else {
            String::new()
        };
        if let Some(w) = rule.within.filter(|&w| gap > w) {
            reasons.push(format!(
                "{} is {:+.3} from {what}, more than {w}{beyond}",
                fmt_num(f.value),
                diff
            ));
        }
        if let Some(w) = rule
            .within_pct
            .filter(|&w| edge != 0.0 && gap / edge.abs() * 100.0 > w)
        {
            reasons.push(format!(
                "{} is {:+.1}% from {what}, more than {w}%{beyond}",
                fmt_num(f.value),
                diff / edge.abs() * 100.0
            ));
        }
    }
    reasons
}

/// A number in at most 6 characters' precision, for a range in a 14-character column.
fn short(x: f64) -> String {
    if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

pub fn write_table(out: &mut dyn Write, verdicts: &[Verdict]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<6} {:<30} {:>14} {:>14}  reason",
        "", "metric", "value", "baseline"
    )?;
    for v in verdicts {
        let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        let base = match v.baseline_range {
            Some((lo, hi)) => format!("{}..{}", short(lo), short(hi)),
            None => f(v.baseline),
        };
        writeln!(
            out,
            "{:<6} {:<30} {:>14} {:>14}  {}",
            if v.pass { "PASS" } else { "FAIL" },
            v.rule.metric,
            f(v.value),
            base,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{JsonLatency, JsonOp, JsonSize};

    /// A report of one device with reads and writes of one size each; `lat_us(q)` gives the
    /// latency at quantile level q (both ops).
    fn report(reads: u64, writes: u64, write_size: u64, lat_us: impl Fn(f64) -> f64) -> JsonReport {
        let latency = || JsonLatency {
            p50: lat_us(0.5),
            p90: lat_us(0.9),
            p99: lat_us(0.99),
            p999: lat_us(0.999),
            p9999: lat_us(0.9999),
            max: lat_us(1.0),
            quantiles: noise::QUANTILE_LEVELS
                .iter()
                .map(|&l| [l, lat_us(l)])
                .collect(),
        };
        let all = (reads + writes).max(1) as f64;
        let all_bytes = (reads * 4096 + writes * write_size).max(1) as f64;
        let op = |ios: u64, size: u64| JsonOp {
            ios,
            bytes: ios * size,
            pct_ios: ios as f64 * 100.0 / all,
            pct_bytes: (ios * size) as f64 * 100.0 / all_bytes,
            block_sizes: vec![JsonSize {
                class: format!("{}KB", size / 1024),
                pct_ios: 100.0,
                ios,
                bytes: ios * size,
            }],
            total_latency_us: latency(),
            ..JsonOp::default()
        };
        let mut d = JsonDevice {
            name: "loop0".into(),
            ..JsonDevice::default()
        };
        d.ops.insert("read".into(), op(reads, 4096));
        d.ops.insert("write".into(), op(writes, write_size));
        JsonReport {
            complete: true,
            devices: vec![d],
            ..JsonReport::default()
        }
    }

    /// Latency of an exponential distribution with mean `mean_us`, at level q.
    fn exp(mean_us: f64) -> impl Fn(f64) -> f64 {
        move |q: f64| -mean_us * (1.0 - q.min(0.999_999)).ln()
    }

    fn rules(rules: Vec<Rule>) -> Rules {
        Rules {
            device: None,
            rules,
        }
    }

    fn failed(v: &[Verdict]) -> Vec<&str> {
        v.iter()
            .filter(|v| !v.pass)
            .map(|v| v.rule.metric.as_str())
            .collect()
    }

    #[test]
    fn default_rules_pass_the_same_workload_and_fail_a_changed_one() {
        let base = report(80_000, 20_000, 4096, exp(50.0));
        let r = rules(default_rules());
        // Same shape, a little faster or slower, a little shorter.
        for (reads, writes, mean) in [(79_000, 20_100, 40.0), (81_000, 19_900, 90.0)] {
            let v = check(
                &report(reads, writes, 4096, exp(mean)),
                Some(&base),
                &r,
                false,
            )
            .unwrap();
            assert!(failed(&v).is_empty(), "{reads}/{writes} {mean} us: {v:#?}");
        }
        let v = check(
            &report(50_000, 50_000, 4096, exp(50.0)),
            Some(&base),
            &r,
            false,
        )
        .unwrap();
        assert_eq!(failed(&v), ["read.pct_ios", "write.pct_bytes"]);
        let v = check(
            &report(80_000, 20_000, 8192, exp(50.0)),
            Some(&base),
            &r,
            false,
        )
        .unwrap();
        assert_eq!(
            failed(&v),
            [
                "write.pct_bytes",
                "write.size_mix_distance",
                "write.mean_request_bytes"
            ]
        );
        // Three times slower: every latency rule.
        let v = check(
            &report(80_000, 20_000, 4096, exp(150.0)),
            Some(&base),
            &r,
            false,
        )
        .unwrap();
        assert_eq!(
            failed(&v),
            ["read.latency_p50_us", "write.latency_p50_us"],
            "{:#?}",
            v.iter()
                .filter(|v| !v.pass)
                .map(|v| &v.reason)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_percentile_of_few_ios_never_fails_and_a_clear_rise_over_many_always_does() {
        let p99 = |min_ios| {
            rules(vec![Rule {
                metric: "read.latency_p99_us".into(),
                within_pct: Some(50.0),
                direction: Some(Direction::Up),
                sigmas: Some(3.0),
                min_ios,
                ..Rule::default()
            }])
        };
        let base = report(100_000, 0, 4096, exp(50.0));
        // 300 reads: their p99 is the 3rd largest, anywhere up to the maximum: even ten times
        // the baseline's p99 passes, with or without min_ios.
        for min_ios in [None, Some(1000)] {
            let v = check(
                &report(300, 0, 4096, |q| if q >= 0.99 { 2300.0 } else { 50.0 }),
                Some(&base),
                &p99(min_ios),
                false,
            )
            .unwrap();
            assert!(v[0].pass, "{:?}", v[0]);
        }
        // 300 reads with min_ios 1000: too few, whatever they show.
        let v = check(
            &report(300, 0, 4096, exp(5000.0)),
            Some(&base),
            &p99(Some(1000)),
            false,
        )
        .unwrap();
        assert!(v[0].pass && v[0].reason.contains("too few"), "{:?}", v[0]);
        // The same 300 reads without min_ios: a hundredfold rise is beyond the noise.
        let v = check(
            &report(300, 0, 4096, exp(5000.0)),
            Some(&base),
            &p99(None),
            false,
        )
        .unwrap();
        assert!(!v[0].pass, "{:?}", v[0]);
        // 100,000 reads: 1.6 times the p99 fails, 1.4 times passes.
        for (mean, fails) in [(80.0, true), (70.0, false)] {
            let v = check(
                &report(100_000, 0, 4096, exp(mean)),
                Some(&base),
                &p99(Some(1000)),
                false,
            )
            .unwrap();
            assert_eq!(!v[0].pass, fails, "{:?}", v[0]);
        }
        // Faster is not a regression.
        let v = check(
            &report(100_000, 0, 4096, exp(5.0)),
            Some(&base),
            &p99(None),
            false,
        )
        .unwrap();
        assert!(v[0].pass, "{:?}", v[0]);
    }

    #[test]
    fn shares_are_judged_beyond_their_sampling_noise() {
        let rule = rules(vec![Rule {
            metric: "read.pct_ios".into(),
            within: Some(2.0),
            sigmas: Some(4.0),
            ..Rule::default()
        }]);
        let base = report(80, 20, 4096, exp(50.0));
        // 100 IOs: 70% reads instead of 80% is within 4 standard errors (4 points each side).
        let v = check(&report(70, 30, 4096, exp(50.0)), Some(&base), &rule, false).unwrap();
        assert!(v[0].pass, "{:?}", v[0]);
        // 100,000 IOs: 76% against 80% is not (the noise takes half a point each side).
        let base = report(80_000, 20_000, 4096, exp(50.0));
        let v = check(
            &report(76_000, 24_000, 4096, exp(50.0)),
            Some(&base),
            &rule,
            false,
        )
        .unwrap();
        assert!(
            !v[0].pass && v[0].reason.contains("sampling noise"),
            "{:?}",
            v[0]
        );
        // Without sigmas, the old rule: 3 points is more than 2.
        let plain = rules(vec![Rule {
            sigmas: None,
            ..rule.rules[0].clone()
        }]);
        let v = check(&report(77, 23, 4096, exp(50.0)), Some(&base), &plain, false).unwrap();
        assert!(!v[0].pass, "{:?}", v[0]);
    }

    #[test]
    fn several_baselines_allow_the_spread_between_them() {
        let rule = rules(vec![Rule {
            metric: "read.latency_p50_us".into(),
            within_pct: Some(20.0),
            ..Rule::default()
        }]);
        let (a, b) = (
            report(10_000, 0, 4096, exp(40.0)),
            report(10_000, 0, 4096, exp(60.0)),
        );
        let trace = report(10_000, 0, 4096, exp(65.0));
        // 65 against 40: +62%; against the band 40..60, +8%.
        let v = check_against(&trace, &[&a], &rule, false).unwrap();
        assert!(!v[0].pass);
        let v = check_against(&trace, &[&a, &b], &rule, false).unwrap();
        assert!(v[0].pass, "{:?}", v[0]);
        assert_eq!(
            v[0].baseline_range.map(|(lo, hi)| (lo.round(), hi.round())),
            Some((28.0, 42.0))
        );
        // Below the band, as far: fails (direction both).
        let v =
            check_against(&report(10_000, 0, 4096, exp(20.0)), &[&a, &b], &rule, false).unwrap();
        assert!(
            !v[0].pass && v[0].reason.contains("baselines'"),
            "{:?}",
            v[0]
        );
    }

    #[test]
    fn rules_files_without_the_new_fields_still_load() {
        let r: Rules = serde_json::from_str(
            r#"{"rules": [{"metric": "read.latency_p99_us", "within_pct": 50, "slack": 1000}]}"#,
        )
        .unwrap();
        assert_eq!(r.rules[0].sigmas, None);
        assert_eq!(r.rules[0].direction, None);
        let r: Rules = serde_json::from_str(
            r#"{"rules": [{"metric": "read.latency_p99_us", "within_pct": 50, "direction": "up", "min_ios": 1000, "sigmas": 3}]}"#,
        )
        .unwrap();
        assert_eq!(r.rules[0].direction, Some(Direction::Up));
        assert_eq!(r.rules[0].min_ios, Some(1000));
        let bad = serde_json::from_str::<Rules>(
            r#"{"rules": [{"metric": "read.latency_p99_us", "max": 5, "direction": "sideways"}]}"#,
        );
        assert!(bad.is_err());
        let neg = rules(vec![Rule {
            metric: "read.ios".into(),
            max: Some(1.0),
            sigmas: Some(-1.0),
            ..Rule::default()
        }]);
        let base = report(10, 0, 4096, exp(1.0));
        assert!(
            check(&base, None, &neg, false)
                .unwrap_err()
                .contains("sigmas")
        );
    }
}
