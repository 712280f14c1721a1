//! When to drain the ring: a timer paced by the record rate.

use std::time::{Duration, Instant};

/// The ring space a record of `len` bytes took: its data rounded up to 8 bytes, after the
/// kernel's 8-byte header.
pub(super) fn ring_footprint(len: usize) -> u64 {
    (len as u64).next_multiple_of(8) + 8
}

/// When to drain the ring next. The probe never wakes the daemon (a wakeup per record costs
/// more than the record), so a timer does, and each drain is a wakeup: about 30 µs of CPU on
/// the bench machine, 30-40 ns per IO at 40k IOPS with a drain every 20 ms (BENCHMARKS.md).
/// So the period stretches to [`DrainPace::MAX`] while records are few and
/// shrinks to [`DrainPace::MIN`] as they come faster, keeping a period's records within an
/// eighth of the ring: at the largest period a 16 MB ring still takes a sudden 1.3 M IOs/s
/// from idle without dropping, and a drop is counted, never silent. On half records the ring
/// is each CPU's small one (`tracer_common::MAP_HOT_RINGS`), which should hold a drain's
/// halves to stay in the CPU's cache; what does not fit spills into the large rings.
pub(super) struct DrainPace {
    ring_bytes: u64,
    /// Ring bytes drained (by any drain) since `since`, the last timed drain.
    bytes: u64,
    since: Instant,
}

impl DrainPace {
    pub(super) const MIN: Duration = Duration::from_millis(20);
    const MAX: Duration = Duration::from_millis(100);

    pub(super) fn new(ring_bytes: u64) -> DrainPace {
        DrainPace {
            ring_bytes,
            bytes: 0,
            since: Instant::now(),
        }
    }

    pub(super) fn drained(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    /// At a timed drain: the period until the next one, from the rate since the last.
    pub(super) fn next(&mut self, now: Instant) -> Duration {
        let period = DrainPace::period_for(
            self.ring_bytes,
            self.bytes,
            now.saturating_duration_since(self.since),
        );
        self.bytes = 0;
        self.since = now;
        period
    }

    /// The period in which `bytes` drained over `elapsed` would fill an eighth of the ring.
    fn period_for(ring_bytes: u64, bytes: u64, elapsed: Duration) -> Duration {
        if bytes == 0 {
            return DrainPace::MAX;
        }
        let secs = elapsed.as_secs_f64() * (ring_bytes / 8) as f64 / bytes as f64;
        Duration::try_from_secs_f64(secs)
            .unwrap_or(DrainPace::MAX)
            .clamp(DrainPace::MIN, DrainPace::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_footprint_is_the_header_and_data_rounded_to_8() {
        assert_eq!(ring_footprint(112), 120);
        assert_eq!(ring_footprint(113), 128);
        assert_eq!(ring_footprint(0), 8);
    }

    #[test]
    fn the_drain_period_keeps_a_period_within_an_eighth_of_the_ring() {
        let ring = 16 << 20;
        let second = Duration::from_secs(1);
        // Idle, or 40k records of 120 bytes a second (4.8 MB/s: 2 MB in 437 ms): the longest.
        assert_eq!(DrainPace::period_for(ring, 0, second), DrainPace::MAX);
        assert_eq!(
            DrainPace::period_for(ring, 40_000 * 120, second),
            DrainPace::MAX
        );
        // 500k a second (60 MB/s): 2 MB in 35 ms.
        let p = DrainPace::period_for(ring, 500_000 * 120, second);
        assert!(
            p > Duration::from_millis(34) && p < Duration::from_millis(36),
            "{p:?}"
        );
        // Faster than the shortest period can follow, or a tiny ring: the shortest.
        assert_eq!(
            DrainPace::period_for(ring, 5_000_000 * 120, second),
            DrainPace::MIN
        );
        assert_eq!(
            DrainPace::period_for(4096, 40_000 * 120, second),
            DrainPace::MIN
        );
        // A drain right after another (elapsed 0) is not a reason to wait less than MIN.
        assert_eq!(
            DrainPace::period_for(ring, 1 << 20, Duration::ZERO),
            DrainPace::MIN
        );
    }

    #[test]
    fn the_pace_counts_every_drain_since_the_last_timed_one() {
        let mut pace = DrainPace::new(16 << 20);
        let t0 = pace.since;
        pace.drained(30_000_000);
        pace.drained(30_000_000);
        // 60 MB in 1 s: 2 MB in 35 ms.
        let p = pace.next(t0 + Duration::from_secs(1));
        assert!(
            p > Duration::from_millis(34) && p < Duration::from_millis(36),
            "{p:?}"
        );
        assert_eq!(pace.bytes, 0);
        assert_eq!(pace.next(t0 + Duration::from_secs(2)), DrainPace::MAX);
    }
}
