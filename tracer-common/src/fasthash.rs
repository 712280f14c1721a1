//! A hash map for the daemon's per-IO lookups: keys of a few machine words (request addresses,
//! devices, tasks), hashed a word at a time with one multiplication each, where the standard
//! hasher's `SipHash` costs tens of ns per lookup. Not for keys an adversary picks: a trace's
//! own tables only.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hashing, a machine word at a time.
#[derive(Default)]
pub struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        // The product's high bits depend on every bit of the key, its low bits only on the
        // key's low bits; hashbrown takes the bucket from the low bits, and keys such as
        // request addresses (64-byte aligned, and more) have theirs zero: the rotation puts
        // the mixed high bits there.
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(w) ^ (rest.len() as u64) << 56);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A [`HashMap`] with [`MulHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<MulHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: &T) -> u64 {
        BuildHasherDefault::<MulHasher>::default().hash_one(v)
    }

    #[test]
    fn keys_that_differ_in_any_word_or_byte_hash_apart() {
        let base = (1234u32, *b"cassandra\0\0\0\0\0\0\0", 42u64, 7u64);
        let mut seen = std::collections::HashSet::new();
        assert!(seen.insert(hash(&base)));
        for i in 0..16 {
            let mut k = base;
            k.1[i] ^= 1;
            assert!(seen.insert(hash(&k)), "comm byte {i}");
        }
        assert!(seen.insert(hash(&(base.0 + 1, base.1, base.2, base.3))));
        assert!(seen.insert(hash(&(base.0, base.1, base.2 + 1, base.3))));
        assert!(seen.insert(hash(&(base.0, base.1, base.2, base.3 + 1))));
        // A short tail is not confused with its zero-padded longer self.
        assert_ne!(hash(&[1u8, 0, 0].as_slice()), hash(&[1u8, 0].as_slice()));
        let mut m: FastMap<u64, u64> = FastMap::default();
        for a in 0..10_000u64 {
            m.insert(0xffff_8880_0000_0000 + a * 0x140, a);
        }
        assert!((0..10_000u64).all(|a| m[&(0xffff_8880_0000_0000 + a * 0x140)] == a));
    }

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        // hashbrown's bucket is the hash's low bits; request addresses are 64-byte aligned (a
        // request's size rounded to a cache line), so without mixing into the low bits 1,024
        // of them would start their probes at 16 buckets of 1,024.
        let buckets: std::collections::HashSet<u64> = (0..1024u64)
            .map(|a| hash(&(0xffff_8880_1000_0000 + a * 0x140)) & 1023)
            .collect();
        assert!(buckets.len() > 500, "{} buckets of 1024", buckets.len());
    }
}
