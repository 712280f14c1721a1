//! YCSB's output: status lines (with or without timestamps) with their latency blocks, the
//! summary block and time-series exports.

use std::path::Path;

use super::{OpLatency, ParseError, StatusPoint, StressRun, parse_stamp};
use crate::inputs::zone::Zone;
use crate::numeric::f64_to_u64_saturating;

fn parse_latency_block(op: &str, body: &str) -> OpLatency {
    let mut l = OpLatency {
        op: op.to_string(),
        ..Default::default()
    };
    for kv in body.split(',') {
        let Some((k, v)) = kv.trim().split_once('=') else {
            continue;
        };
        let v: Option<f64> = v.trim().parse().ok();
        match k.trim() {
            "Count" => l.count = v.map(f64_to_u64_saturating),
            "Avg" | "AverageLatency(us)" => l.avg_us = v,
            "90" => l.p90_us = v,
            "99" => l.p99_us = v,
            "99.9" => l.p999_us = v,
            "Max" => l.max_us = v,
            _ => {}
        }
    }
    l
}

/// "[READ: Count=1400, Max=..., 99=49023]" or "[READ AverageLatency(us)=22779.72]".
fn parse_status_blocks(s: &str) -> Vec<OpLatency> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        let inner = &rest[open + 1..open + close];
        if let Some((op, body)) = inner.split_once(": ") {
            out.push(parse_latency_block(op.trim(), body));
        } else if let Some((op, body)) = inner.split_once(' ') {
            out.push(parse_latency_block(op.trim(), body));
        }
        rest = &rest[open + close + 1..];
    }
    out
}

fn parse_status(line: &str, zone: &Zone) -> Option<StatusPoint> {
    let (time_ns, rest) = match parse_stamp(line, zone) {
        Some(t) => (Some(t), line.get(24..)?.trim_start()),
        None => (None, line.trim_start()),
    };
    let (secs, rest) = rest.split_once(" sec: ")?;
    let elapsed_s: u64 = secs.trim().parse().ok()?;
    let (ops, rest) = rest.split_once(" operations;")?;
    let operations: u64 = ops.trim().parse().ok()?;
    let ops_per_s = rest
        .split_once(" current ops/sec")
        .and_then(|(v, _)| v.trim().parse().ok());
    Some(StatusPoint {
        time_ns,
        elapsed_s,
        operations,
        ops_per_s,
        latencies: parse_status_blocks(rest),
    })
}

/// YCSB output; status lines' timestamps are local time in `zone`.
pub fn parse_ycsb(path: &Path, text: &str, zone: &Zone) -> Result<StressRun, ParseError> {
    let mut run = StressRun {
        path: path.display().to_string(),
        tool: "ycsb".into(),
        time_zone: zone.clone(),
        ..Default::default()
    };
    for line in text.lines() {
        let l = line.trim_end();
        if let Some(p) = parse_status(l, zone) {
            run.status.push(p);
            continue;
        }
        if let Some(rest) = l.strip_prefix('[')
            && let Some((section, rest)) = rest.split_once("], ")
            && let Some((metric, value)) = rest.split_once(", ")
            && let Ok(v) = value.trim().parse::<f64>()
        {
            if let Ok(ms) = metric.trim().parse::<u64>() {
                run.time_series
                    .entry(section.to_string())
                    .or_default()
                    .push((ms, v));
            } else {
                run.summary
                    .entry(section.to_string())
                    .or_default()
                    .insert(metric.trim().to_string(), v);
            }
            continue;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_with_and_without_timestamps() {
        let p = parse_status("2026-11-22 02:45:18:771 5 sec: 2825 operations; 564.77 current ops/sec; est completion in 2 days 1 hour [READ: Count=1400, Max=121535, Min=1691, Avg=19070.52, 90=32591, 99=49023, 99.9=117183, 99.99=121535] [UPDATE: Count=1506, Max=96831, Min=1587, Avg=15271.74, 90=25359, 99=53183, 99.9=92095, 99.99=96831] ", &Zone::utc()).unwrap();
        assert_eq!(
            (p.elapsed_s, p.operations, p.ops_per_s),
            (5, 2825, Some(564.77))
        );
        assert_eq!(p.latencies.len(), 2);
        assert_eq!(p.latencies[0].p99_us, Some(49023.0));
        assert_eq!(p.latencies[1].count, Some(1506));
        let q = parse_status("10 sec: 21029 operations; 2102.9 current ops/sec; est completion in 5 days 12 hours [READ AverageLatency(us)=22779.72]", &Zone::utc()).unwrap();
        assert_eq!(
            (q.time_ns, q.elapsed_s, q.latencies[0].avg_us),
            (None, 10, Some(22779.72))
        );
        let z = parse_status(
            "2026-11-22 02:45:13:865 0 sec: 0 operations; est completion in 0 second ",
            &Zone::utc(),
        )
        .unwrap();
        assert_eq!((z.operations, z.ops_per_s), (0, None));
    }
}
