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

/// A `FastMap` whose values are counted in bytes (given with each) against a
/// budget given at each insert: past it, entries go in the map's hash
/// order, which is as good as at random for these keys, until three
/// quarters of the budget are left, so a full map does not evict on
/// every insert. For per-backend caches of things parsed from pages,
/// which must not grow with the tables a backend reads.
pub struct BudgetMap<K, V> {
    map: FastMap<K, (V, usize)>,
    bytes: usize,
}

impl<K, V> Default for BudgetMap<K, V> {
    fn default() -> Self {
        BudgetMap { map: FastMap::default(), bytes: 0 }
    }
}

impl<K: std::hash::Hash + Eq + Copy, V> BudgetMap<K, V> {
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|(v, _)| v)
    }

    /// Keeps `value`, of `bytes`, under `key`, then evicts others while
    /// the map is over `budget` (the new entry always stays).
    pub fn insert(&mut self, key: K, value: V, bytes: usize, budget: usize) {
        self.bytes += bytes;
        if let Some((_, old)) = self.map.insert(key, (value, bytes)) {
            self.bytes -= old;
        }
        if self.bytes > budget {
            let target = budget / 4 * 3;
            let mut left = self.bytes;
            self.map.retain(|k, (_, b)| {
                if left <= target || *k == key {
                    return true;
                }
                left -= *b;
                false
            });
            self.bytes = left;
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The bytes of the values kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn budget_map_keeps_within_budget_and_the_newest() {
        let mut m = BudgetMap::<u32, u32>::default();
        for k in 0..1000u32 {
            m.insert(k, k * 2, 100, 10_000);
            assert!(m.bytes() <= 10_000, "{} bytes after {}", m.bytes(), k);
            assert_eq!(m.get(&k), Some(&(k * 2)), "the entry just inserted stays");
            assert_eq!(m.bytes(), m.len() * 100);
        }
        // Evictions bring it down to three quarters, not one entry below.
        assert!(m.len() > 70, "{}", m.len());
        // Replacing an entry counts its new size only.
        let len = m.len();
        m.insert(999, 1, 50, 10_000);
        assert_eq!(m.len(), len);
        assert_eq!(m.bytes(), (len - 1) * 100 + 50);
        // A zero budget keeps the newest alone.
        m.insert(5000, 7, 10, 0);
        assert_eq!((m.len(), m.bytes(), m.get(&5000)), (1, 10, Some(&7)));
    }

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
