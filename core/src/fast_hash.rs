//! A multiplicative hasher for small backend-local maps keyed by integers
//! (OIDs, relfilenodes, registration ids, hasis extents and slots) that are
//! looked up once or more per statement, or per row. std's SipHash defends
//! against keys chosen by an attacker; nobody chooses these, and SipHash's
//! setup and finalisation cost more than the lookup itself on these paths.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Rotate, xor, multiply by an odd constant per word (the Fx hash).
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const SEED: u64 = 0x517c_c1b7_2722_0a95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(n as u64)
    }
    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.add(n as u64)
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(n as u64)
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n)
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64)
    }
}

/// A HashMap with `FastHasher`.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_of_oid_pairs_behaves_like_a_map() {
        let mut m: FastMap<(u32, u32), u64> = FastMap::default();
        for i in 0..10_000u32 {
            m.insert((16384 + i, 24576 + i * 3), i as u64);
        }
        for i in 0..10_000u32 {
            assert_eq!(m.get(&(16384 + i, 24576 + i * 3)), Some(&(i as u64)));
            assert_eq!(m.get(&(24576 + i * 3, 16384 + i)), None);
        }
        for i in (0..10_000u32).step_by(2) {
            assert!(m.remove(&(16384 + i, 24576 + i * 3)).is_some());
        }
        assert_eq!(m.len(), 5_000);
    }

    #[test]
    fn consecutive_keys_spread_over_the_high_bits() {
        // hashbrown takes its 7-bit control tag from the top of the hash.
        let tags: std::collections::HashSet<u64> = (0..1000u64)
            .map(|k| {
                let mut h = FastHasher::default();
                h.write_u64(k);
                h.finish() >> 57
            })
            .collect();
        assert!(tags.len() > 100, "{} distinct tags", tags.len());
    }
}
