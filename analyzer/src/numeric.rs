//! Small numeric pieces the layers share: a median, and the xorshift generator behind the
//! synthetic traces and the randomized tests. A leaf: it imports nothing from the crate.

/// The upper median (the middle value, the higher of the two middle ones for an even count);
/// 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A small deterministic PRNG (Marsaglia's xorshift64, shifts 13, 7, 17), so planted
/// workloads and randomized tests are reproducible from their seed. A seed of 0 stays 0.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in 0..n (modulo bias aside); 0 for n = 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_upper_middle_value() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn the_sequence_is_xorshift64() {
        // The first outputs from seed 1, as the shifts 13, 7, 17 give them.
        let mut r = Rng(1);
        assert_eq!(r.next_u64(), 1_082_269_761);
        assert_eq!(r.next_u64(), 1_152_992_998_833_853_505);
    }
}
