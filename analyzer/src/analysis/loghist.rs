//! A compact log-linear latency histogram (8 sub-buckets per power of two, about 9% relative
//! resolution) for per-interval series, where a full HDR histogram per interval would cost
//! too much memory on long traces.

use crate::numeric::f64_to_u64_saturating;

pub const SUB: u32 = 8;
const OCTAVES: u32 = 40;
pub const BUCKETS: usize = (SUB * OCTAVES) as usize;

#[derive(Clone)]
pub struct LogHist {
    counts: Box<[u32; BUCKETS]>,
    max: u64,
}

impl Default for LogHist {
    fn default() -> Self {
        LogHist {
            counts: Box::new([0; BUCKETS]),
            max: 0,
        }
    }
}

/// Values below 8 have a bucket each; from 8 on, octave o (2^o <= v < 2^(o+1)) has its 8
/// buckets from (o - 2) * 8, by the 3 bits after the leading one. Without a branch: with
/// s = log2(v | 15) - 3 (0 below 16), the bucket is s * 8 + (v >> s), as v >> s is 8 + those
/// 3 bits from 8 on, and v itself below.
#[inline]
fn index(v: u64) -> usize {
    let shift = (v | 15).ilog2() - 3;
    let i = (u64::from(shift) << 3) + (v >> shift);
    // The top bucket takes the rest.
    usize::try_from(i).map_or(BUCKETS - 1, |i| i.min(BUCKETS - 1))
}

/// Upper bound of bucket i (the value reported for a quantile that falls in it).
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < u64::from(SUB) {
        return i;
    }
    let octave = i / u64::from(SUB) + 2;
    let sub = i % u64::from(SUB);
    ((u64::from(SUB) + sub + 1) << (octave - 3)) - 1
}

impl LogHist {
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.max = self.max.max(v);
    }

    pub fn add(&mut self, o: &LogHist) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.max = self.max.max(o.max);
    }

    /// Values recorded (summed over the buckets: the hot path only counts).
    pub fn len(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile q (upper edge of its bucket, capped at the max seen).
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.len();
        if total == 0 {
            return 0;
        }
        let rank = f64_to_u64_saturating((q * total as f64).ceil()).clamp(1, total);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return upper(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_resolution() {
        let mut h = LogHist::default();
        for v in 1..=100_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [
            (0.5, 50_000_000f64),
            (0.99, 99_000_000.0),
            (0.999, 99_900_000.0),
        ] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.13, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), 100_000_000);
        assert_eq!(h.max(), 100_000_000);
        assert!(index(u64::MAX) < BUCKETS);
        // The bucket as first defined, with a branch.
        let by_octave = |v: u64| {
            let i = if v < u64::from(SUB) {
                v
            } else {
                let octave = u64::from(v.ilog2());
                (octave - 2) * u64::from(SUB) + ((v >> (octave - 3)) & u64::from(SUB - 1))
            };
            usize::try_from(i).map_or(BUCKETS - 1, |i| i.min(BUCKETS - 1))
        };
        let mut rng = crate::numeric::Rng(0x2545_F491_4F6C_DD1D);
        for v in (0..5000).chain((0..64).flat_map(|b| [(1u64 << b) - 1, 1 << b, (1 << b) + 1])) {
            assert_eq!(index(v), by_octave(v), "{v}");
            let x = rng.next_u64();
            let w = x >> (x % 64);
            assert_eq!(index(w), by_octave(w), "{w}");
        }
        assert_eq!(index(u64::MAX), by_octave(u64::MAX));
        for v in [0u64, 1, 7, 8, 9, 15, 16, 1000, 1 << 40] {
            assert!(upper(index(v)) >= v, "{v}");
        }
    }
}
