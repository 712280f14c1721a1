//! The sampling noise of a report's figures: how far a figure computed from n IOs moves between
//! two recordings of the same workload by chance alone, if its IOs were independent draws.
//! `blkprof check` widens a figure into an interval of ± `sigmas` standard errors before
//! comparing it (docs/check-rules.md). IOs are not independent (a stall delays the IOs queued
//! behind it), so this is a floor under the noise, not all of it: the rules' tolerances cover
//! the rest, as measured run to run.

use crate::report::model::{JsonLatency, JsonOp};

/// The quantile levels between which the sample q-quantile of n values lies: the number of
/// values below the true q-quantile is binomial(n, q), so its rank is within
/// n·q ± sigmas·sqrt(n·q·(1-q)). Clamped to [0, 1].
pub fn quantile_rank_bounds(q: f64, n: u64, sigmas: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let half = sigmas * (q * (1.0 - q) / n as f64).sqrt();
    ((q - half).max(0.0), (q + half).min(1.0))
}

/// The levels of a report's `quantiles` ladder (1-2-5 steps in the tail), dense enough to
/// read a percentile's rank bounds off by interpolation. The low end (p1, p5) is the device's
/// floor: the IOs that waited for nothing.
pub const QUANTILE_LEVELS: [f64; 16] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995, 0.9998,
    0.9999,
];

/// The latency at quantile level `q` of an op with `n` IOs, read off the report's percentiles
/// (its `quantiles` ladder, p50 to p99.99, and the maximum at level 1 - 1/n) by interpolating
/// linearly in the number of nines (-log10(1 - q)). At or above 1 - 1/n it is the maximum.
/// Below the lowest level it is interpolated towards 0 at level 0: an underestimate, which
/// only widens a lower bound. Levels missing from older reports (no ladder; a 0 or a value
/// below the one before) are skipped.
pub fn latency_at(l: &JsonLatency, n: u64, q: f64) -> f64 {
    let top = 1.0 - 1.0 / n.max(1) as f64;
    if q >= top {
        return l.max;
    }
    let nines = |q: f64| -(1.0 - q).log10();
    let mut ladder: Vec<[f64; 2]> = l.quantiles.clone();
    ladder.extend([
        [0.5, l.p50],
        [0.9, l.p90],
        [0.99, l.p99],
        [0.999, l.p999],
        [0.9999, l.p9999],
    ]);
    ladder.sort_by(|a, b| a[0].total_cmp(&b[0]));
    ladder.dedup_by(|a, b| a[0] == b[0]);
    let mut points = vec![(0.0, 0.0)];
    let mut last = 0.0;
    for [level, v] in ladder {
        if level < top && v > 0.0 && v >= last {
            points.push((nines(level), v));
            last = v;
        }
    }
    points.push((nines(top), l.max.max(last)));
    let x = nines(q);
    for w in points.windows(2) {
        let ((x0, v0), (x1, v1)) = (w[0], w[1]);
        if x <= x1 {
            let t = if x1 > x0 { (x - x0) / (x1 - x0) } else { 1.0 };
            return v0 + t * (v1 - v0);
        }
    }
    l.max
}

/// Σ of size² over an op's IOs, each IO counted at its size class's mean size (the report
/// keeps classes, not single sizes, so this leaves out the spread inside a class).
fn sum_sq_bytes(o: &JsonOp) -> f64 {
    if o.block_sizes.is_empty() {
        return if o.ios > 0 {
            (o.bytes as f64).powi(2) / o.ios as f64
        } else {
            0.0
        };
    }
    o.block_sizes
        .iter()
        .filter(|z| z.ios > 0)
        .map(|z| (z.bytes as f64).powi(2) / z.ios as f64)
        .sum()
}

/// Standard error, in percentage points, of an op's share of all IOs (binomial).
pub fn pct_ios_se(op_ios: u64, all_ios: u64) -> f64 {
    if all_ios == 0 {
        return 0.0;
    }
    let p = op_ios as f64 / all_ios as f64;
    100.0 * (p * (1.0 - p) / all_ios as f64).sqrt()
}

/// Standard error, in percentage points, of an op's share of all bytes: a ratio of two sums
/// over the same IOs, `R = Σ_op x / Σ x`, whose variance is `Σ_i (w_i - R)² x_i² / (Σ x)²` to first
/// order (`w_i` = 1 for the op's IOs, 0 for the others).
pub fn pct_bytes_se(op: &JsonOp, others: &[&JsonOp]) -> f64 {
    let all: f64 = op.bytes as f64 + others.iter().map(|o| o.bytes as f64).sum::<f64>();
    if all == 0.0 {
        return 0.0;
    }
    let r = op.bytes as f64 / all;
    let s_op = sum_sq_bytes(op);
    let s_other: f64 = others.iter().map(|o| sum_sq_bytes(o)).sum();
    100.0 * ((1.0 - r).powi(2) * s_op + r.powi(2) * s_other).sqrt() / all
}

/// Standard error of an op's mean request size (bytes): the size's standard deviation over
/// its IOs (from the size classes) / sqrt(IOs).
pub fn mean_bytes_se(o: &JsonOp) -> f64 {
    if o.ios == 0 {
        return 0.0;
    }
    let n = o.ios as f64;
    let mean = o.bytes as f64 / n;
    let var = (sum_sq_bytes(o) / n - mean * mean).max(0.0);
    (var / n).sqrt()
}

/// One standard error of the size-mix distance (half the L1 distance of the size-class shares)
/// between two samples of the same mix: each class's share differs by chance with standard
/// error `sqrt(p(1-p)(1/n_a + 1/n_b))` (p pooled), and the distance adds half of each.
pub fn size_mix_se(a: &JsonOp, b: &JsonOp) -> f64 {
    if a.ios == 0 || b.ios == 0 {
        return 0.0;
    }
    let (na, nb) = (a.ios as f64, b.ios as f64);
    let mut classes: std::collections::BTreeMap<&str, (f64, f64)> =
        std::collections::BTreeMap::default();
    for z in &a.block_sizes {
        classes.entry(&z.class).or_default().0 += z.ios as f64;
    }
    for z in &b.block_sizes {
        classes.entry(&z.class).or_default().1 += z.ios as f64;
    }
    classes
        .values()
        .map(|(ka, kb)| {
            let p = (ka + kb) / (na + nb);
            (p * (1.0 - p) * (1.0 / na + 1.0 / nb)).sqrt()
        })
        .sum::<f64>()
        / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::JsonSize;

    fn lat() -> JsonLatency {
        JsonLatency {
            p50: 100.0,
            p90: 200.0,
            p99: 400.0,
            p999: 800.0,
            p9999: 1600.0,
            max: 3200.0,
            quantiles: Vec::new(),
        }
    }

    #[test]
    fn rank_bounds_shrink_with_the_sample() {
        let (lo, hi) = quantile_rank_bounds(0.99, 300, 3.0);
        // 300 samples: the p99 is the 3rd largest, its rank anywhere from 0.973 to 1.
        assert!((lo - 0.9728).abs() < 1e-3 && hi == 1.0, "{lo} {hi}");
        let (lo, hi) = quantile_rank_bounds(0.99, 1_000_000, 3.0);
        assert!((hi - 0.99 - 0.0003).abs() < 1e-5 && (0.99 - lo - 0.0003).abs() < 1e-5);
        assert_eq!(quantile_rank_bounds(0.5, 100, 0.0), (0.5, 0.5));
    }

    #[test]
    fn latency_at_reads_the_percentile_ladder() {
        let l = lat();
        let n = 1_000_000;
        for (q, v) in [(0.5, 100.0), (0.9, 200.0), (0.99, 400.0), (0.999, 800.0)] {
            assert!((latency_at(&l, n, q) - v).abs() < 1e-9, "{q}");
        }
        // Halfway between p99 and p99.9 in nines.
        let mid = 1.0 - 10f64.powf(-2.5);
        assert!((latency_at(&l, n, mid) - 600.0).abs() < 1e-6);
        assert_eq!(latency_at(&l, n, 1.0), 3200.0);
        // Below the median: towards 0, never above p50.
        let v = latency_at(&l, n, 0.45);
        assert!(v < 100.0 && v > 80.0, "{v}");
        // 300 IOs: anything above 1 - 1/300 is the maximum; p99.9 and p99.99 are not used.
        assert_eq!(latency_at(&l, 300, 0.998), 3200.0);
        let v = latency_at(&l, 300, 0.995);
        assert!(v > 400.0 && v < 3200.0, "{v}");
    }

    #[test]
    fn latency_at_skips_percentiles_an_old_report_lacks() {
        let l = JsonLatency {
            p9999: 0.0,
            p90: 0.0,
            ..lat()
        };
        let v = latency_at(&l, 1_000_000, 0.9);
        assert!(v > 100.0 && v < 400.0, "{v}");
        let v = latency_at(&l, 1_000_000, 0.9995);
        assert!(v > 800.0 && v < 3200.0, "{v}");
    }

    fn op(sizes: &[(u64, u64)]) -> JsonOp {
        let block_sizes: Vec<JsonSize> = sizes
            .iter()
            .map(|&(size, ios)| JsonSize {
                class: format!("{size}"),
                pct_ios: 0.0,
                ios,
                bytes: size * ios,
            })
            .collect();
        JsonOp {
            ios: sizes.iter().map(|s| s.1).sum(),
            bytes: sizes.iter().map(|s| s.0 * s.1).sum(),
            block_sizes,
            ..JsonOp::default()
        }
    }

    #[test]
    fn standard_errors_of_shares_and_sizes() {
        // 80/20 of 10,000 IOs: 0.4 points.
        assert!((pct_ios_se(8000, 10_000) - 0.4).abs() < 1e-9);
        // One size everywhere: bytes follow IOs, so the byte share's error is the IO share's.
        let (r, w) = (op(&[(4096, 8000)]), op(&[(4096, 2000)]));
        assert!((pct_bytes_se(&w, &[&r]) - 0.4).abs() < 1e-9);
        assert_eq!(mean_bytes_se(&w), 0.0);
        // Half 4 KB, half 12 KB: sd 4 KB, over 10,000 IOs 40 bytes.
        assert!((mean_bytes_se(&op(&[(4096, 5000), (12288, 5000)])) - 40.96).abs() < 1e-6);
        // Same single class: no noise; two classes 50/50 of 100 each: ½·2·sqrt(¼·2/100).
        assert_eq!(size_mix_se(&w, &w), 0.0);
        let m = op(&[(4096, 50), (8192, 50)]);
        assert!((size_mix_se(&m, &m) - (0.25f64 * 0.02).sqrt()).abs() < 1e-9);
    }
}
