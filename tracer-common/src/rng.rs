//! A small deterministic PRNG (Marsaglia's xorshift64, shifts 13, 7, 17), so planted
//! workloads, benchmarks and randomized tests are reproducible from their seed.

/// xorshift64 from a seed; a seed of 0 stays 0.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in 0..n (modulo bias aside); 0 for n = 0.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
