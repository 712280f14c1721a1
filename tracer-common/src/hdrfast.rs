//! Counting into an HDR histogram's own buckets on the hot path, and handing the counts to
//! the real [`Histogram`] once at the end.
//!
//! `Histogram::record` costs several ns a value (bounds and resize checks, min/max and total
//! updates); the report records two latencies per IO, the tracer's daemon a size and two
//! latencies. [`HdrCounts`] keeps only the bucket
//! counts, in exactly the layout of a `Histogram::new_with_bounds(1, _, 3)` (2048 sub-buckets,
//! unit 1), and [`HdrCounts::drain_into`] records each bucket's lowest value with its count.
//! Every figure HDR derives (quantiles, min, max, mean, the counts themselves) depends only on
//! the bucket of each value, so the result is identical to recording value by value.

use hdrhistogram::Histogram;

/// The latencies' histograms cover 1 ns to 1 hour at first, and resize beyond it.
pub const LATENCY_HIGHEST_NS: u64 = 3_600_000_000_000;

/// An auto-resizing histogram from 1 to `highest` at `sigfig` significant digits: the layout
/// of every HDR histogram the tracer and the analyzer keep (see [`HdrCounts`]).
pub fn histogram(highest: u64, sigfig: u8) -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, highest, sigfig).expect("valid bounds");
    h.auto(true);
    h
}

/// `HALF`: log2 of half the sub-buckets per bucket. 10 for 3 significant digits (2048
/// sub-buckets, of which buckets above 0 use the upper half: 1024 = 2^10 entries each), the
/// default; 7 for 2 significant digits (256 sub-buckets, 128 per power of two), a sixteenth of
/// the memory, whose increments stay in cache on a path that touches each value once.
#[derive(Clone, Default)]
pub struct HdrCounts<const HALF: u32 = 10> {
    counts: Vec<u64>,
}

impl<const HALF: u32> HdrCounts<HALF> {
    const SUB_MASK: u64 = (1 << (HALF + 1)) - 1;
    /// The significant digits of the `Histogram` whose layout this is.
    pub const SIGFIG: u8 = match HALF {
        10 => 3,
        7 => 2,
        _ => panic!("HdrCounts: HALF is 10 (3 significant digits) or 7 (2)"),
    };

    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "`v >> bucket` is below 2^(HALF + 1), the sub-buckets of a bucket"
    )]
    fn index(v: u64) -> usize {
        // HDR's bucket is 64 - unit magnitude (0) - sub-bucket count magnitude (HALF + 1) -
        // the leading zeros of (v | SUB_MASK): its log2 - HALF, one bit scan (never of 0);
        // its index ((bucket + 1) << HALF) + sub - (1 << HALF).
        let bucket = (v | Self::SUB_MASK).ilog2() - HALF;
        let sub = (v >> bucket) as usize;
        ((bucket as usize) << HALF) + sub
    }

    /// The lowest value of bucket index `i`.
    fn value_of(i: usize) -> u64 {
        if i < 2 << HALF {
            return i as u64;
        }
        let bucket = (i >> HALF) - 1;
        let sub = i - (bucket << HALF);
        (sub as u64) << bucket
    }

    #[inline]
    pub fn record(&mut self, v: u64) {
        let i = Self::index(v);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        } else {
            self.counts.resize(i + 1, 0);
            self.counts[i] = 1;
        }
    }

    /// Record every counted value into `h` (which must use lowest value 1 and
    /// [`Self::SIGFIG`] significant digits, with auto-resize) and reset.
    pub fn drain_into(&mut self, h: &mut Histogram<u64>) {
        debug_assert_eq!((h.low(), h.sigfig()), (1, Self::SIGFIG));
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 {
                // Cannot fail: with auto-resize any u64 can be recorded.
                let recorded = h.record_n(Self::value_of(i), n);
                debug_assert!(recorded.is_ok(), "{recorded:?}");
            }
        }
        self.counts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(sigfig: u8) -> Histogram<u64> {
        histogram(LATENCY_HIGHEST_NS, sigfig)
    }

    /// Values across the whole u64 range, bucket edges included: the drained histogram equals
    /// one that recorded value by value, bucket for bucket, at 3 and at 2 significant digits.
    #[test]
    fn same_histogram_as_recording_each_value() {
        same_as_recording::<10>();
        same_as_recording::<7>();
    }

    #[expect(
        clippy::float_cmp,
        reason = "the histograms must be identical: the same mean to the last bit"
    )]
    fn same_as_recording<const HALF: u32>() {
        let mut values = vec![1, 2, 2047, 2048, 2049, 4095, 4096, 1 << 40, u64::MAX >> 1];
        let mut rng = crate::rng::Rng(0x2545_F491_4F6C_DD1Du64);
        for i in 0..200_000u32 {
            let x = rng.next_u64();
            values.push((x >> (x % 60)).max(1) + u64::from(i % 7));
        }
        let sigfig = HdrCounts::<HALF>::SIGFIG;
        let (mut want, mut got, mut fast) =
            (hist(sigfig), hist(sigfig), HdrCounts::<HALF>::default());
        for &v in &values {
            want.record(v).unwrap();
            fast.record(v);
        }
        fast.drain_into(&mut got);
        assert_eq!(got.len(), want.len());
        assert_eq!((got.min(), got.max()), (want.min(), want.max()));
        assert_eq!(got.mean(), want.mean());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            assert_eq!(got.value_at_quantile(q), want.value_at_quantile(q), "q {q}");
        }
        let a: Vec<_> = got
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        let b: Vec<_> = want
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        assert_eq!(a, b);
    }
}
