//! Clocks: the probe stamps IOs with CLOCK_MONOTONIC (bpf_ktime_get_ns).

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn realtime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Wall clock and monotonic clock read as close together as possible.
pub fn clock_pair() -> (i64, u64) {
    // Take the pair whose monotonic reads bracket the wall-clock read most tightly.
    let mut best = (0, 0, u64::MAX);
    for _ in 0..5 {
        let a = monotonic_ns();
        let w = realtime_ns();
        let b = monotonic_ns();
        if b - a < best.2 {
            best = (w, a + (b - a) / 2, b - a);
        }
    }
    (best.0, best.1)
}
