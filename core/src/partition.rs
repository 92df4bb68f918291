//! Order-preserving key-range partitions for predicate locking: a sorted
//! set of boundary byte strings; the partition of a key is the number of
//! boundaries <= it (byte order), which is monotone in the key, so a key
//! range maps onto a contiguous span of partitions. Boundaries may be
//! prefixes of keys (cut at `MAX_BOUNDARY` bytes) without losing that.
//! The PostgreSQL side (which blocks, which locks) is
//! src/engine/predlock.rs.

/// Boundary prefixes are cut to this many bytes.
pub const MAX_BOUNDARY: usize = 32;
/// At most this many partitions (boundaries + 1).
pub const MAX_PARTITIONS: usize = 512;

/// Boundaries for keys given in sorted order: quantiles, one per 64 keys
/// at most, deduplicated, and no more than `body_cap` bytes in the page
/// format `n u16 | (len u16, bytes)*`.
pub fn choose_boundaries<'a>(sorted: impl ExactSizeIterator<Item = &'a [u8]>, body_cap: usize) -> Vec<Vec<u8>> {
    let mut chooser = BoundaryChooser::new(sorted.len(), body_cap);
    for k in sorted {
        chooser.offer(k);
    }
    chooser.finish()
}

/// `choose_boundaries` fed one key at a time, for a build that streams its
/// sorted keys once (knowing their number beforehand).
pub struct BoundaryChooser {
    want: usize,
    step: usize,
    body_cap: usize,
    /// Keys offered so far.
    seen: usize,
    /// Bytes the boundaries take in the page format.
    used: usize,
    /// The page is full: no more boundaries.
    full: bool,
    out: Vec<Vec<u8>>,
}

impl BoundaryChooser {
    /// For `n` keys.
    pub fn new(n: usize, body_cap: usize) -> Self {
        let want = (n / 64).clamp(1, MAX_PARTITIONS - 1);
        BoundaryChooser { want, step: (n / (want + 1)).max(1), body_cap, seen: 0, used: 2, full: false, out: Vec::with_capacity(want) }
    }

    /// The next key in sorted order.
    pub fn offer(&mut self, k: &[u8]) {
        let i = self.seen;
        self.seen += 1;
        if self.full || i == 0 || i % self.step != 0 || self.out.len() >= self.want {
            return;
        }
        let b = &k[..k.len().min(MAX_BOUNDARY)];
        if self.out.last().is_some_and(|l| l.as_slice() >= b) {
            return;
        }
        if self.used + 2 + b.len() > self.body_cap {
            self.full = true;
            return;
        }
        self.used += 2 + b.len();
        self.out.push(b.to_vec());
    }

    pub fn finish(self) -> Vec<Vec<u8>> {
        self.out
    }
}

/// The smallest byte string greater than every string starting with `p`
/// (None: there is none).
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(&last) = s.last() {
        if last == 0xFF {
            s.pop();
        } else {
            *s.last_mut().unwrap() += 1;
            return Some(s);
        }
    }
    None
}

pub struct PartitionMap {
    boundaries: Vec<Vec<u8>>,
}

impl PartitionMap {
    /// `boundaries` strictly ascending.
    pub fn new(boundaries: Vec<Vec<u8>>) -> PartitionMap {
        PartitionMap { boundaries }
    }

    /// The partition of a key.
    pub fn of(&self, key: &[u8]) -> u32 {
        self.boundaries.partition_point(|b| b.as_slice() <= key) as u32
    }

    pub fn count(&self) -> u32 {
        self.boundaries.len() as u32 + 1
    }

    /// The partitions holding every key k with lower <= k and k's prefix
    /// <= upper (the bounds a scan computes; empty lower = from the start).
    pub fn span(&self, lower: &[u8], upper: Option<&[u8]>) -> (u32, u32) {
        let lo = if lower.is_empty() { 0 } else { self.of(lower) };
        let hi = match upper {
            None => self.count() - 1,
            Some(u) => match prefix_successor(u) {
                // Keys with prefix <= upper are < its successor; one equal
                // to the successor would be a boundary, so the key's
                // partition is at most of(successor).
                Some(s) => self.of(&s),
                None => self.count() - 1,
            },
        };
        (lo, hi.max(lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantiles_fit_and_ascend() {
        let keys: Vec<Vec<u8>> = (0u32..100_000).map(|i| i.to_be_bytes().to_vec()).collect();
        let b = choose_boundaries(keys.iter().map(|k| k.as_slice()), 8100);
        assert!(b.len() > 100 && b.len() < MAX_PARTITIONS);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        let m = PartitionMap::new(b);
        assert_eq!(m.span(&[], None), (0, m.count() - 1));
        // Long keys: prefixes, capped by the page.
        let long: Vec<Vec<u8>> = (0u32..100_000).map(|i| [vec![7u8; 40], i.to_be_bytes().to_vec()].concat()).collect();
        let b = choose_boundaries(long.iter().map(|k| k.as_slice()), 8100);
        assert!(b.iter().all(|x| x.len() <= MAX_BOUNDARY));
        assert!(b.len() <= 1, "equal 32-byte prefixes collapse: {}", b.len());
    }

    proptest! {
        /// Every key whose prefix lies in a scan's bounds falls in the
        /// scan's span, and partitions are monotone.
        #[test]
        fn spans_cover_their_keys(
            mut keys in prop::collection::vec(prop::collection::vec(0u8..4, 0..6), 1..400),
            lower in prop::collection::vec(0u8..4, 0..4),
            upper in prop::collection::vec(0u8..4, 0..4),
        ) {
            keys.sort();
            let m = PartitionMap::new(choose_boundaries(keys.iter().map(|k| k.as_slice()), 8100));
            for w in keys.windows(2) {
                prop_assert!(m.of(&w[0]) <= m.of(&w[1]));
            }
            let (lo, hi) = m.span(&lower, Some(&upper));
            for k in &keys {
                let in_range = k.as_slice() >= lower.as_slice() && &k[..k.len().min(upper.len())] <= upper.as_slice();
                if in_range {
                    let p = m.of(k);
                    prop_assert!(lo <= p && p <= hi, "key {:?} in partition {} outside {}..={}", k, p, lo, hi);
                }
            }
        }
    }
}
