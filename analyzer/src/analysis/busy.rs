//! Busy time: how long a device had at least one IO in the OS (entered, not completed), from
//! the records' own intervals; iostat's %util counts the same from the kernel's `io_ticks`.
//!
//! Records come in completion order (nearly: CPUs race to the ring), so the union of their
//! [entry, completion] intervals is built as they come: the run of overlapping IOs being
//! extended, and the last [`RECENT_GAPS`] idle gaps before it, which an IO arriving late (it
//! entered before them and completed after) still closes. A gap older than that is final; it
//! could only be wrong for an IO that completed after [`RECENT_GAPS`] later idle periods, and
//! then the busy time is under-counted by what that IO covered. One or two comparisons per IO.

use std::collections::VecDeque;

/// Idle gaps kept open to IOs that arrive late.
pub const RECENT_GAPS: usize = 32;

#[derive(Default)]
pub struct Busy {
    started: bool,
    /// The run being extended: [start, end].
    start: u64,
    end: u64,
    /// Recent idle gaps [from, to), oldest first, all before `start`.
    gaps: VecDeque<(u64, u64)>,
    /// Idle time of the gaps no longer kept.
    idle_final_ns: u64,
    first_ns: u64,
}

impl Busy {
    /// An IO in the OS from `enter` to `complete`.
    #[inline]
    pub fn record(&mut self, enter: u64, complete: u64) {
        let complete = complete.max(enter);
        if enter >= self.start && enter <= self.end && self.started {
            self.end = self.end.max(complete);
        } else if !self.started {
            *self = Busy {
                started: true,
                start: enter,
                end: complete,
                first_ns: enter,
                ..Busy::default()
            };
        } else if enter > self.end {
            self.gaps.push_back((self.end, enter));
            if self.gaps.len() > RECENT_GAPS
                && let Some((a, b)) = self.gaps.pop_front()
            {
                self.idle_final_ns += b - a;
            }
            self.start = enter;
            self.end = complete;
        } else {
            self.late(enter, complete);
        }
    }

    /// An IO that entered before the current run began.
    #[cold]
    fn late(&mut self, enter: u64, complete: u64) {
        if enter < self.first_ns {
            // Before everything so far: idle between it and what came first.
            if complete < self.first_ns {
                self.gaps.push_front((complete, self.first_ns));
            }
            self.first_ns = enter;
        }
        if complete >= self.start {
            self.start = enter;
            self.end = self.end.max(complete);
        }
        // Cut [enter, complete] out of the gaps it overlaps, newest first.
        let mut i = self.gaps.len();
        while i > 0 {
            i -= 1;
            let (g0, g1) = self.gaps[i];
            if g1 <= enter {
                break;
            }
            if complete <= g0 {
                continue;
            }
            match (enter > g0, complete < g1) {
                (false, false) => {
                    self.gaps.remove(i);
                }
                (true, false) => self.gaps[i].1 = enter,
                (false, true) => self.gaps[i].0 = complete,
                (true, true) => {
                    self.gaps[i].1 = enter;
                    self.gaps.insert(i + 1, (complete, g1));
                }
            }
        }
    }

    /// From the first entry to the last completion.
    pub fn span_ns(&self) -> u64 {
        if self.started {
            self.end.max(self.start) - self.first_ns.min(self.start)
        } else {
            0
        }
    }

    /// Time with no IO in the OS within the span.
    pub fn idle_ns(&self) -> u64 {
        self.idle_final_ns + self.gaps.iter().map(|(a, b)| b - a).sum::<u64>()
    }

    /// Time with at least one IO in the OS.
    pub fn busy_ns(&self) -> u64 {
        self.span_ns().saturating_sub(self.idle_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The union's length, the slow way.
    fn union_ns(ios: &[(u64, u64)]) -> u64 {
        let mut v = ios.to_vec();
        v.sort_unstable();
        let mut total = 0;
        let mut cur: Option<(u64, u64)> = None;
        for (a, c) in v {
            cur = match cur {
                Some((s, e)) if a <= e => Some((s, e.max(c))),
                Some((s, e)) => {
                    total += e - s;
                    Some((a, c))
                }
                None => Some((a, c)),
            };
        }
        total + cur.map_or(0, |(s, e)| e - s)
    }

    #[test]
    fn busy_time_is_the_union_of_intervals_given_in_completion_order() {
        let mut rng = crate::numeric::Rng(0x2545_f491_4f6c_dd1d);
        let mut next = |m: u64| rng.below(m);
        for round in 0..200 {
            // Arrivals about 20 us apart, latencies from 1 us to 100 us (or 5 ms in some
            // rounds: many in flight at once), idle stretches between bursts.
            let long = round % 3 == 0;
            let mut t = 1_000_000u64;
            let mut ios = Vec::new();
            for _ in 0..500 {
                t += 1 + next(40_000) + if next(10) == 0 { next(2_000_000) } else { 0 };
                let lat = 1_000 + next(if long { 5_000_000 } else { 100_000 });
                ios.push((t, t + lat));
            }
            // Completion order, with neighbours swapped now and then (CPUs racing).
            ios.sort_by_key(|io| io.1);
            for i in 1..ios.len() {
                if next(5) == 0 {
                    ios.swap(i - 1, i);
                }
            }
            let mut b = Busy::default();
            for &(a, c) in &ios {
                b.record(a, c);
            }
            let first = ios.iter().map(|io| io.0).min().unwrap();
            let last = ios.iter().map(|io| io.1).max().unwrap();
            assert_eq!(b.span_ns(), last - first, "round {round}");
            assert_eq!(b.busy_ns(), union_ns(&ios), "round {round}");
        }
    }

    #[test]
    fn an_io_inside_an_old_gap_splits_it() {
        let mut b = Busy::default();
        for io in [(0, 10), (100, 110), (200, 210), (50, 60), (5, 120)] {
            b.record(io.0, io.1);
        }
        // Union: [0, 120] and [200, 210].
        assert_eq!(b.busy_ns(), 130);
        assert_eq!(b.idle_ns(), 80);
        assert_eq!(Busy::default().busy_ns(), 0);
    }
}
