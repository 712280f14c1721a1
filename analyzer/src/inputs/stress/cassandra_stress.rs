//! cassandra-stress's output (3.x and 4.x/5.x): interval lines and the "Results:" block.

use std::path::Path;

use super::{OpLatency, ParseError, StatusPoint, StressRun};
use crate::numeric::f64_to_u64_saturating;

/// cassandra-stress output. Interval lines (3.x: "total ops , op/s, pk/s, row/s, mean, med,
/// .95, .99, .999, max, time, stderr, errors, gc: #, max ms, sum ms, sdv ms, mb"; 4.x/5.x: the
/// same with a leading "type," column, one line per op type and a "total" line) become status
/// points (elapsed time from the "time" column, latencies in ms); the "Results:" block
/// ("Op rate : 12,345 op/s [WRITE: 12,345 op/s]", "Latency 99th percentile : 7.0 ms ...")
/// becomes the summary, under section "OVERALL" with one metric per line.
pub fn parse_cassandra_stress(path: &Path, text: &str) -> Result<StressRun, ParseError> {
    let mut run = StressRun {
        path: path.display().to_string(),
        tool: "cassandra-stress".into(),
        ..Default::default()
    };
    let mut columns: Vec<String> = Vec::new();
    let mut in_results = false;
    let mut last_time: Option<f64> = None;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("type,") || l.starts_with("total ops") || is_padded_type_header(l) {
            columns = l.split(',').map(|c| c.trim().to_string()).collect();
            // 4.x/5.x pad "type" to the width of the op names and leave out its comma:
            // "type          total ops,    op/s, ..." over "READ,     980,     980, ...".
            if let Some(rest) = columns[0].strip_prefix("type")
                && !rest.is_empty()
            {
                let second = rest.trim().to_string();
                columns[0] = "type".into();
                columns.insert(1, second);
            }
            in_results = false;
            continue;
        }
        if l == "Results:" {
            last_time = None;
            in_results = true;
            continue;
        }
        if in_results {
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim();
                // "12,345 op/s  [WRITE: 12,345 op/s]" -> 12345; "1.2 ms" -> 1.2; "00:01:00" (time) kept as seconds.
                let v = v.trim();
                let first = v.split('[').next().unwrap_or("").trim();
                let num = first
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .replace(',', "");
                let value = if k == "Total operation time" {
                    let p: Vec<f64> = v.split(':').filter_map(|x| x.trim().parse().ok()).collect();
                    (p.len() == 3).then(|| p[0] * 3600.0 + p[1] * 60.0 + p[2])
                } else {
                    // "NaN ms" (no GC seen) is no number.
                    num.parse::<f64>().ok().filter(|v| v.is_finite())
                };
                if let Some(v) = value {
                    let unit = first.split_whitespace().nth(1).unwrap_or("");
                    let name = if unit.is_empty() || k == "Total operation time" {
                        k.to_string()
                    } else {
                        format!("{k} ({unit})")
                    };
                    run.summary
                        .entry("OVERALL".into())
                        .or_default()
                        .insert(name, v);
                    continue;
                }
            }
            if l.is_empty() {
                continue;
            }
        }
        if !columns.is_empty() {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() == columns.len() {
                let typed = columns[0] == "type";
                let (op, vals) = if typed {
                    (f[0].to_string(), &f[1..])
                } else {
                    ("total".to_string(), &f[..])
                };
                let cols = if typed { &columns[1..] } else { &columns[..] };
                let get = |name: &str| {
                    cols.iter()
                        .position(|c| c == name)
                        .and_then(|i| vals.get(i))
                        .and_then(|v| v.replace(',', "").parse::<f64>().ok())
                };
                if let (Some(total), Some(time)) = (get("total ops"), get("time")) {
                    let ms = |v: Option<f64>| v.map(|x| x * 1000.0);
                    let lat = OpLatency {
                        op: op.to_uppercase(),
                        count: Some(f64_to_u64_saturating(total)),
                        avg_us: ms(get("mean")),
                        p90_us: None,
                        p99_us: ms(get(".99")),
                        p999_us: ms(get(".999")),
                        max_us: ms(get("max")),
                    };
                    // The op lines of one interval share its time (which has a fraction at
                    // the end of a run: 30.0 then 30.6).
                    // A line of an op already in the point starts the next interval (runs of
                    // one op print only "total" lines, and the last two can share a time).
                    let same = typed
                        && last_time == Some(time)
                        && run.status.last().is_some_and(|p| {
                            !p.latencies.iter().any(|l| l.op == op.to_uppercase())
                        });
                    last_time = Some(time);
                    if !same {
                        run.status.push(StatusPoint {
                            time_ns: None,
                            elapsed_s: f64_to_u64_saturating(time),
                            operations: f64_to_u64_saturating(total),
                            ops_per_s: get("op/s"),
                            latencies: Vec::new(),
                        });
                    }
                    // The point pushed above, or the one of an earlier line at the same time.
                    if let Some(last) = run.status.last_mut() {
                        if op == "total" {
                            last.operations = f64_to_u64_saturating(total);
                            last.ops_per_s = get("op/s");
                        }
                        last.latencies.push(lat);
                    }
                    continue;
                }
            }
        }
        run.other_lines += 1;
    }
    if run.status.is_empty() && run.summary.is_empty() {
        return Err(ParseError::NotStress {
            path: path.to_owned(),
        });
    }
    Ok(run)
}

/// "type            total ops,    op/s, ..." (cassandra-stress 4.x/5.x interval header).
pub(super) fn is_padded_type_header(l: &str) -> bool {
    l.strip_prefix("type")
        .is_some_and(|r| r.starts_with(' ') && r.trim_start().starts_with("total ops,"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cassandra_stress_3x_and_4x_styles() {
        // Written after the tools' documented formats; no real output is in the fixtures yet.
        let v3 = "Running WRITE with 200 threads for 1000000 iteration\n\
total ops , op/s, pk/s, row/s, mean, med, .95, .99, .999, max, time, stderr, errors, gc: #, max ms, sum ms, sdv ms, mb\n\
20480, 20460, 20460, 20460, 1.5, 1.1, 3.5, 7.0, 17.3, 60.3, 1.0, 0.00000, 0, 0, 0, 0, 0, 0\n\
61440, 40960, 40960, 40960, 1.2, 1.0, 2.5, 5.0, 12.1, 40.0, 2.0, 0.01234, 0, 1, 12, 12, 0, 512\n\
\n\
Results:\n\
op rate                   : 30720 [WRITE:30720]\n\
Op rate                   :   30,720 op/s  [WRITE: 30,720 op/s]\n\
Latency 99th percentile   :    7.0 ms [WRITE: 7.0 ms]\n\
Total operation time      : 00:01:02\n";
        let r = parse_cassandra_stress(Path::new("cs3.txt"), v3).unwrap();
        assert_eq!(r.status.len(), 2);
        assert_eq!(
            (
                r.status[1].elapsed_s,
                r.status[1].operations,
                r.status[1].ops_per_s
            ),
            (2, 61440, Some(40960.0))
        );
        assert_eq!(r.status[0].latencies[0].p99_us, Some(7000.0));
        assert_eq!(r.summary["OVERALL"]["Op rate (op/s)"], 30720.0);
        assert_eq!(r.summary["OVERALL"]["Latency 99th percentile (ms)"], 7.0);
        assert_eq!(r.summary["OVERALL"]["Total operation time"], 62.0);
        let v4 = "type, total ops, op/s, pk/s, row/s, mean, med, .95, .99, .999, max, time, stderr, errors, gc: #, max ms, sum ms, sdv ms, mb\n\
READ, 1000, 1000, 1000, 1000, 2.0, 1.5, 4.0, 9.0, 20.0, 30.0, 1.0, 0.0, 0, 0, 0, 0, 0, 0\n\
WRITE, 3000, 3000, 3000, 3000, 1.0, 0.8, 2.0, 4.0, 8.0, 12.0, 1.0, 0.0, 0, 0, 0, 0, 0, 0\n\
total, 4000, 4000, 4000, 4000, 1.2, 0.9, 3.0, 8.0, 18.0, 30.0, 1.0, 0.0, 0, 0, 0, 0, 0, 0\n";
        let r = parse_cassandra_stress(Path::new("cs4.txt"), v4).unwrap();
        assert_eq!(r.status.len(), 1, "one point per interval");
        let ops: Vec<&str> = r.status[0]
            .latencies
            .iter()
            .map(|l| l.op.as_str())
            .collect();
        assert_eq!(ops, ["READ", "WRITE", "TOTAL"]);
        assert_eq!(
            (r.status[0].operations, r.status[0].ops_per_s),
            (4000, Some(4000.0)),
            "from the total line"
        );
        assert_eq!(r.status[0].latencies[0].p99_us, Some(9000.0));
    }
}
