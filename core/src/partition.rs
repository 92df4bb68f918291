//! Order-preserving key-range partitions for predicate locking: a sorted
//! set of boundaries; the partition of a key is the number of boundaries
//! <= it, which is monotone in the key, so a key range maps onto a
//! contiguous span of partitions. In byte order (keys whose bytes sort as
//! the index does) boundaries may be prefixes of keys (cut at
//! `MAX_BOUNDARY` bytes) without losing that. Keys whose bytes do not sort
//! as the index does (collated text, numeric) are compared by a
//! `KeyOrder`, and their boundaries are whole keys of at most
//! `MAX_BOUNDARY` bytes (a cut key would not compare in that order).
//! The PostgreSQL side (which blocks, which locks) is
//! src/engine/predlock.rs.

use std::cmp::Ordering;
use std::rc::Rc;

/// The index's order, for keys whose bytes are not in it.
pub trait KeyOrder {
    /// Orders two keys' key columns (a boundary is such a key).
    fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering;
    /// Orders a key (or boundary) against a scan bound holding its first
    /// columns: Equal when the key starts with values equal to the bound's.
    fn cmp_prefix(&self, key: &[u8], bound: &[u8]) -> Ordering;
}

/// A map's order: None is byte order.
pub type Order = Option<Rc<dyn KeyOrder>>;

fn less(order: Option<&dyn KeyOrder>, a: &[u8], b: &[u8]) -> bool {
    match order {
        None => a < b,
        Some(o) => o.cmp(a, b) == Ordering::Less,
    }
}

/// What of key `k` can be a boundary: in byte order its first
/// `MAX_BOUNDARY` bytes; in another order the whole key, or nothing when
/// it is longer (its partitions are then wider).
fn as_boundary<'k>(order: Option<&dyn KeyOrder>, k: &'k [u8]) -> Option<&'k [u8]> {
    match order {
        None => Some(&k[..k.len().min(MAX_BOUNDARY)]),
        Some(_) => (k.len() <= MAX_BOUNDARY).then_some(k),
    }
}

/// Boundary prefixes are cut to this many bytes.
pub const MAX_BOUNDARY: usize = 32;
/// At most this many partitions (boundaries + 1). A partition of at least
/// 64 keys, so an index of 2M keys gets all of them (~250 keys each, a
/// btree leaf of int8 keys holds ~400): one map page of 511 partitions
/// left 4k keys under each lock, and SERIALIZABLE range reads failed where
/// btree's page locks let them pass (engine suite: 3 failures in 286k
/// transactions against none).
pub const MAX_PARTITIONS: usize = 8192;
/// A map spans at most this many pages (a chain, `split_pages`).
pub const MAX_MAP_PAGES: usize = 16;

/// Bytes of boundaries (`(len u16, bytes)` each) that `MAX_MAP_PAGES`
/// pages of `body_cap` bytes always hold, however `split_pages` cuts
/// them: each page starts with `n u16`, and a page is closed with less
/// than one boundary's room (at most 2 + MAX_BOUNDARY bytes) unused.
pub fn map_capacity(body_cap: usize) -> usize {
    MAX_MAP_PAGES * body_cap.saturating_sub(2 + 2 + MAX_BOUNDARY)
}

/// Boundaries for keys given in sorted order: quantiles, one per 64 keys
/// at most, deduplicated, and no more than `cap` bytes of `(len u16,
/// bytes)` entries (`map_capacity`).
pub fn choose_boundaries<'a>(sorted: impl ExactSizeIterator<Item = &'a [u8]>, cap: usize) -> Vec<Vec<u8>> {
    let mut chooser = BoundaryChooser::new(sorted.len(), cap);
    for k in sorted {
        chooser.offer(k);
    }
    chooser.finish()
}

/// Cuts boundaries into pages of the format `n u16 | (len u16, bytes)*`
/// with at most `body_cap` bytes each, filling each page before the next:
/// the index ranges of the pages, in order (none for no boundaries).
pub fn split_pages(boundaries: &[Vec<u8>], body_cap: usize) -> Vec<std::ops::Range<usize>> {
    let mut pages = Vec::new();
    let mut start = 0;
    let mut used = 2;
    for (i, b) in boundaries.iter().enumerate() {
        let need = 2 + b.len();
        if used + need > body_cap && i > start {
            pages.push(start..i);
            start = i;
            used = 2;
        }
        used += need;
    }
    if start < boundaries.len() {
        pages.push(start..boundaries.len());
    }
    pages
}

/// `choose_boundaries` fed one key at a time, for a build that streams its
/// sorted keys once (knowing their number beforehand).
pub struct BoundaryChooser {
    want: usize,
    step: usize,
    cap: usize,
    /// Keys offered so far.
    seen: usize,
    /// Bytes the boundaries take as `(len u16, bytes)` entries.
    used: usize,
    /// `cap` is reached: no more boundaries.
    full: bool,
    out: Vec<Vec<u8>>,
    order: Order,
}

impl BoundaryChooser {
    /// For `n` keys, at most `cap` bytes (`map_capacity`).
    pub fn new(n: usize, cap: usize) -> Self {
        Self::limited(n, cap, MAX_PARTITIONS - 1)
    }

    /// For a map chosen again because a partition that filled could not
    /// split: half the partitions and half the bytes, so partitions that
    /// fill can split (`split_points`) until the index has about doubled.
    pub fn with_room(n: usize, cap: usize) -> Self {
        Self::limited(n, cap / 2, MAX_PARTITIONS / 2 - 1)
    }

    fn limited(n: usize, cap: usize, most: usize) -> Self {
        let want = (n / 64).clamp(1, most);
        BoundaryChooser { want, step: (n / (want + 1)).max(1), cap, seen: 0, used: 0, full: false, out: Vec::with_capacity(want), order: None }
    }

    /// Keys offered in `order` (default: byte order).
    pub fn in_order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// The next key in sorted order.
    pub fn offer(&mut self, k: &[u8]) {
        let i = self.seen;
        self.seen += 1;
        if self.full || i == 0 || i % self.step != 0 || self.out.len() >= self.want {
            return;
        }
        let order = self.order.as_deref();
        let Some(b) = as_boundary(order, k) else { return };
        if self.out.last().is_some_and(|l| !less(order, l, b)) {
            return;
        }
        if self.used + 2 + b.len() > self.cap {
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

/// The boundaries side by side in one buffer: a map of thousands of them
/// is searched on every SERIALIZABLE insert and scan, and kept by every
/// backend that used it.
pub struct PartitionMap {
    bytes: Vec<u8>,
    /// End of boundary i in `bytes` (its start is the end of i - 1).
    ends: Vec<u32>,
    order: Order,
}

impl PartitionMap {
    /// `boundaries` strictly ascending in byte order.
    pub fn new(boundaries: Vec<Vec<u8>>) -> PartitionMap {
        Self::ordered(boundaries, None)
    }

    /// `boundaries` strictly ascending in `order`.
    pub fn ordered(boundaries: Vec<Vec<u8>>, order: Order) -> PartitionMap {
        let mut bytes = Vec::with_capacity(boundaries.iter().map(|b| b.len()).sum());
        let mut ends = Vec::with_capacity(boundaries.len());
        for b in &boundaries {
            bytes.extend_from_slice(b);
            ends.push(bytes.len() as u32);
        }
        PartitionMap { bytes, ends, order }
    }

    /// Whether the boundaries ascend strictly (a map read from disk).
    pub fn ascending(&self) -> bool {
        (1..self.ends.len()).all(|i| less(self.order.as_deref(), self.boundary(i - 1), self.boundary(i)))
    }

    /// The first of `n` boundaries for which `after` holds, `after` being
    /// false up to some point and true from it.
    fn first_where(&self, after: impl Fn(&[u8]) -> bool) -> usize {
        let (mut lo, mut hi) = (0usize, self.ends.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if after(self.boundary(mid)) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    fn boundary(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// The partition of a key.
    pub fn of(&self, key: &[u8]) -> u32 {
        // Boundaries <= key come first.
        match self.order.as_deref() {
            None => self.first_where(|b| b > key) as u32,
            Some(o) => self.first_where(|b| o.cmp(b, key) == Ordering::Greater) as u32,
        }
    }

    pub fn count(&self) -> u32 {
        self.ends.len() as u32 + 1
    }

    /// The partitions holding every key k with lower <= k and k's prefix
    /// <= upper (the bounds a scan computes; empty lower = from the start).
    pub fn span(&self, lower: &[u8], upper: Option<&[u8]>) -> (u32, u32) {
        if let Some(o) = self.order.as_deref() {
            // A boundary whose first columns equal `lower` may lie above
            // keys that start with `lower`: only those below it come
            // before the span. One whose first columns equal `upper` may
            // lie below such keys: the partition it starts is in.
            let lo = if lower.is_empty() { 0 } else { self.first_where(|b| o.cmp_prefix(b, lower) != Ordering::Less) as u32 };
            let hi = match upper {
                None => self.count() - 1,
                Some(u) => self.first_where(|b| o.cmp_prefix(b, u) == Ordering::Greater) as u32,
            };
            return (lo, hi.max(lo));
        }
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

/// A map is chosen again once the index holds twice the entries it was
/// chosen from (`map_entries`; 0 for maps written before that was
/// recorded, which count as `partitions` × 64, what the chooser aims
/// for). An index built empty takes its map from its first merge of a
/// thousand entries, so without this every key loaded afterwards shares
/// the last partition; doubling keeps the reads of every key that a new
/// map costs at about two per entry over the index's growth.
pub fn remap_due(map_entries: u64, partitions: u32, entries: u64) -> bool {
    let basis = if map_entries > 0 { map_entries } else { partitions as u64 * 64 };
    entries >= 2 * basis.max(1)
}

/// How many keys of a batch fall into one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionCount {
    pub partition: u32,
    pub count: usize,
}

/// Boundaries that cut the keys of one partition (given in `order`) into
/// pieces of `piece` keys: every `piece`-th key's boundary, each above
/// `after` (the partition's lower boundary) and the one before it. The
/// caller's keys are all below the partition's upper boundary, so the
/// points fall strictly inside the partition.
pub fn split_points<'a>(keys: impl Iterator<Item = &'a [u8]>, piece: usize, after: Option<&[u8]>, order: Option<&dyn KeyOrder>) -> Vec<Vec<u8>> {
    let piece = piece.max(1);
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (i, k) in keys.enumerate() {
        if i == 0 || i % piece != 0 {
            continue;
        }
        let Some(b) = as_boundary(order, k) else { continue };
        let above = match out.last() {
            Some(l) => less(order, l, b),
            None => after.is_none_or(|a| less(order, a, b)),
        };
        if above {
            out.push(b.to_vec());
        }
    }
    out
}

/// Bytes a list of boundaries takes as `(len u16, bytes)` entries.
pub fn boundary_bytes(boundaries: &[Vec<u8>]) -> usize {
    boundaries.iter().map(|b| 2 + b.len()).sum()
}

/// A partition of an old map and one of a new map that share a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionPair {
    pub old: u32,
    pub new: u32,
}

impl PartitionMap {
    /// The boundary below partition `p` (None for the first) and the one
    /// above it (None for the last).
    pub fn bounds_of(&self, p: u32) -> (Option<&[u8]>, Option<&[u8]>) {
        let p = p as usize;
        let lower = if p == 0 { None } else { Some(self.boundary(p - 1)) };
        let upper = if p < self.ends.len() { Some(self.boundary(p)) } else { None };
        (lower, upper)
    }

    /// Whether `key` falls in partitions `from..=to`: two comparisons with
    /// the boundaries around them, where `of` searches (a wide scan asks
    /// this of every item it returns, and a key of collated text compares
    /// through the collation).
    pub fn within(&self, from: u32, to: u32, key: &[u8]) -> bool {
        let order = self.order.as_deref();
        let lower = self.bounds_of(from).0;
        let upper = self.bounds_of(to).1;
        lower.is_none_or(|l| !less(order, key, l)) && upper.is_none_or(|u| less(order, key, u))
    }

    /// The non-empty partitions of keys given in ascending order, with how
    /// many keys each holds: one binary search per partition met, not per
    /// key.
    pub fn counts_sorted<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Vec<PartitionCount> {
        let mut out: Vec<PartitionCount> = Vec::new();
        let mut upper: Option<&[u8]> = Some(&[]);
        let order = self.order.as_deref();
        for k in keys {
            let inside = matches!(out.last(), Some(_)) && upper.is_none_or(|u| less(order, k, u));
            if inside {
                out.last_mut().unwrap().count += 1;
                continue;
            }
            let p = self.of(k);
            upper = self.bounds_of(p).1;
            out.push(PartitionCount { partition: p, count: 1 });
        }
        out
    }

    /// The boundaries with `extra` (sorted, each strictly inside the
    /// partition it splits, `split_points`) put in place.
    pub fn with_boundaries(&self, extra: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.ends.len() + extra.len());
        let mut e = extra.iter().peekable();
        for i in 0..self.ends.len() {
            let b = self.boundary(i);
            while let Some(x) = e.next_if(|x| less(self.order.as_deref(), x, b)) {
                out.push(x.clone());
            }
            out.push(b.to_vec());
        }
        out.extend(e.cloned());
        out
    }

    /// Every pair (old partition, new partition) whose key ranges meet:
    /// keys of new partition j lie in [new_{j-1}, new_j), so their old
    /// partitions lie in [old.of(new_{j-1}), old.of(new_j)] (partitions are
    /// monotone). A remap copies each SIREAD lock of an old partition to
    /// the new partitions paired with it (predlock.rs); the bound may name
    /// one old partition too many (when new_j is an old boundary), which
    /// costs a needless copy, never a missed one. At most
    /// `count() + 2 * new.count()` pairs.
    pub fn overlapping(&self, new: &PartitionMap) -> Vec<PartitionPair> {
        let mut out = Vec::with_capacity((self.count() + 2 * new.count()) as usize);
        let n = new.count();
        for j in 0..n {
            let lo = if j == 0 { 0 } else { self.of(new.boundary(j as usize - 1)) };
            let hi = if j + 1 == n { self.count() - 1 } else { self.of(new.boundary(j as usize)) };
            for i in lo..=hi {
                out.push(PartitionPair { old: i, new: j });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantiles_fit_and_ascend() {
        let keys: Vec<Vec<u8>> = (0u32..100_000).map(|i| i.to_be_bytes().to_vec()).collect();
        let b = choose_boundaries(keys.iter().map(|k| k.as_slice()), map_capacity(8100));
        assert!(b.len() > 1000 && b.len() < MAX_PARTITIONS);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        let m = PartitionMap::new(b);
        assert_eq!(m.span(&[], None), (0, m.count() - 1));
        // Long keys: prefixes, capped by the page.
        let long: Vec<Vec<u8>> = (0u32..100_000).map(|i| [vec![7u8; 40], i.to_be_bytes().to_vec()].concat()).collect();
        let b = choose_boundaries(long.iter().map(|k| k.as_slice()), map_capacity(8100));
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
            let m = PartitionMap::new(choose_boundaries(keys.iter().map(|k| k.as_slice()), map_capacity(8100)));
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

    /// An order in which bytes are not: each byte a column, compared by
    /// half its value (so 0 and 1 are equal values of different bytes),
    /// as collated text or numeric compare.
    struct Halves;

    impl KeyOrder for Halves {
        fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering {
            a.iter().map(|x| x / 2).cmp(b.iter().map(|x| x / 2))
        }
        fn cmp_prefix(&self, key: &[u8], bound: &[u8]) -> Ordering {
            let m = key.len().min(bound.len());
            self.cmp(&key[..m], &bound[..m]).then(if key.len() < bound.len() { Ordering::Less } else { Ordering::Equal })
        }
    }

    proptest! {
        /// In an order that is not byte order: boundaries ascend in it,
        /// partitions are monotone, every key whose first columns lie in
        /// a scan's bounds falls in its span, equal keys share their
        /// partition, and splits and counts keep those properties.
        #[test]
        fn ordered_maps_cover_their_keys(
            mut keys in prop::collection::vec(prop::collection::vec(0u8..6, 0..5), 1..400),
            lower in prop::collection::vec(0u8..6, 0..4),
            upper in prop::collection::vec(0u8..6, 0..4),
            piece in 1usize..20,
        ) {
            let order: Rc<dyn KeyOrder> = Rc::new(Halves);
            keys.sort_by(|a, b| Halves.cmp(a, b));
            let mut chooser = BoundaryChooser::new(keys.len(), map_capacity(8100)).in_order(Some(order.clone()));
            for k in &keys {
                chooser.offer(k);
            }
            let m = PartitionMap::ordered(chooser.finish(), Some(order.clone()));
            prop_assert!(m.ascending());
            for w in keys.windows(2) {
                prop_assert!(m.of(&w[0]) <= m.of(&w[1]));
                if Halves.cmp(&w[0], &w[1]) == Ordering::Equal {
                    prop_assert_eq!(m.of(&w[0]), m.of(&w[1]));
                }
            }
            for k in &keys {
                for from in 0..m.count() {
                    prop_assert_eq!(m.within(from, from, k), m.of(k) == from);
                }
            }
            let (lo, hi) = m.span(&lower, Some(&upper));
            for k in &keys {
                if Halves.cmp_prefix(k, &lower) != Ordering::Less && Halves.cmp_prefix(k, &upper) != Ordering::Greater {
                    let p = m.of(k);
                    prop_assert!(lo <= p && p <= hi, "key {:?} in partition {} outside {}..={}", k, p, lo, hi);
                }
            }
            let counts = m.counts_sorted(keys.iter().map(|k| k.as_slice()));
            prop_assert_eq!(counts.iter().map(|c| c.count).sum::<usize>(), keys.len());
            let mut extra = Vec::new();
            for c in &counts {
                let inside: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).filter(|k| m.of(k) == c.partition).collect();
                prop_assert!(inside.len() == c.count);
                let (blo, bhi) = m.bounds_of(c.partition);
                let pts = split_points(inside.into_iter(), piece, blo, Some(&Halves));
                for x in &pts {
                    prop_assert!(blo.is_none_or(|l| Halves.cmp(l, x) == Ordering::Less));
                    prop_assert!(bhi.is_none_or(|h| Halves.cmp(x, h) == Ordering::Less));
                }
                extra.extend(pts);
            }
            let split = PartitionMap::ordered(m.with_boundaries(&extra), Some(order));
            prop_assert!(split.ascending());
            for w in keys.windows(2) {
                prop_assert!(split.of(&w[0]) <= split.of(&w[1]));
            }
            for p in m.overlapping(&split) {
                prop_assert!(p.old < m.count() && p.new < split.count());
            }
            for k in &keys {
                let want = PartitionPair { old: m.of(k), new: split.of(k) };
                prop_assert!(m.overlapping(&split).contains(&want));
            }
        }
    }

    /// Keys of 2M distinct 32-byte prefixes: the chooser stops at the
    /// capacity, and the pages it needs stay within MAX_MAP_PAGES.
    #[test]
    fn long_boundaries_fit_the_page_chain() {
        let keys: Vec<Vec<u8>> = (0u32..2_000_000).map(|i| [vec![1u8; 28], i.to_be_bytes().to_vec(), vec![9u8; 8]].concat()).collect();
        let b = choose_boundaries(keys.iter().map(|k| k.as_slice()), map_capacity(8100));
        assert!(b.iter().all(|x| x.len() == MAX_BOUNDARY));
        let pages = split_pages(&b, 8100);
        assert!(pages.len() <= MAX_MAP_PAGES, "{} pages for {} boundaries", pages.len(), b.len());
        // The capacity, not MAX_PARTITIONS, ended the choice.
        assert!(b.len() > 3000 && b.len() < MAX_PARTITIONS - 1);
    }

    proptest! {
        /// Pages are filled in order, each within its capacity, and
        /// together hold every boundary once; anything the chooser keeps
        /// fits MAX_MAP_PAGES pages.
        #[test]
        fn split_pages_fill_in_order(lens in prop::collection::vec(0usize..=MAX_BOUNDARY, 0..3000), cap in 200usize..1000) {
            let b: Vec<Vec<u8>> = lens.iter().map(|&l| vec![7u8; l]).collect();
            let pages = split_pages(&b, cap);
            let mut next = 0;
            for r in &pages {
                prop_assert_eq!(r.start, next);
                prop_assert!(r.end > r.start);
                let bytes: usize = 2 + b[r.clone()].iter().map(|x| 2 + x.len()).sum::<usize>();
                prop_assert!(bytes <= cap, "page {:?} takes {} bytes", r, bytes);
                next = r.end;
            }
            prop_assert_eq!(next, b.len());
            let total: usize = b.iter().map(|x| 2 + x.len()).sum();
            if total <= map_capacity(cap) {
                prop_assert!(pages.len() <= MAX_MAP_PAGES);
            }
        }

        /// The flat map answers as a partition_point over the boundaries.
        #[test]
        fn flat_map_matches_partition_point(
            mut bounds in prop::collection::vec(prop::collection::vec(0u8..4, 0..5), 0..60),
            probes in prop::collection::vec(prop::collection::vec(0u8..4, 0..6), 0..60),
        ) {
            bounds.sort();
            bounds.dedup();
            let m = PartitionMap::new(bounds.clone());
            prop_assert_eq!(m.count() as usize, bounds.len() + 1);
            for p in &probes {
                prop_assert_eq!(m.of(p) as usize, bounds.partition_point(|b| b.as_slice() <= p.as_slice()));
                // `within` says what `of` says about a run of partitions.
                for from in 0..m.count() {
                    for to in from..m.count().min(from + 3) {
                        prop_assert_eq!(m.within(from, to, p), (from..=to).contains(&m.of(p)));
                    }
                }
            }
        }
    }

    #[test]
    fn remaps_when_entries_double() {
        // Built empty: a map of the first 1000 keys, 15 partitions.
        assert!(!remap_due(1000, 16, 1999));
        assert!(remap_due(1000, 16, 2000));
        // Not recorded: 8191 partitions stand for 524k entries.
        assert!(!remap_due(0, 8192, 1_000_000));
        assert!(remap_due(0, 8192, 1_048_576));
        assert!(remap_due(0, 1, 128));
    }

    proptest! {
        /// Every key's (old partition, new partition) is among the pairs,
        /// so a lock copied along each pair reaches every new partition
        /// that holds a key its old partition held.
        #[test]
        fn overlapping_pairs_cover_every_key(
            mut old in prop::collection::vec(prop::collection::vec(0u8..4, 0..5), 0..40),
            mut new in prop::collection::vec(prop::collection::vec(0u8..4, 0..5), 0..40),
            keys in prop::collection::vec(prop::collection::vec(0u8..4, 0..6), 0..80),
        ) {
            old.sort();
            old.dedup();
            new.sort();
            new.dedup();
            let (old, new) = (PartitionMap::new(old), PartitionMap::new(new));
            let pairs = old.overlapping(&new);
            prop_assert!(pairs.len() <= (old.count() + 2 * new.count()) as usize);
            for k in &keys {
                let want = PartitionPair { old: old.of(k), new: new.of(k) };
                prop_assert!(pairs.contains(&want), "key {:?}: {:?} missing", k, want);
            }
            // Every new partition gets some old partition's locks.
            for j in 0..new.count() {
                prop_assert!(pairs.iter().any(|p| p.new == j));
            }
        }
    }

    proptest! {
        /// Counting a sorted batch by partition agrees with `of` per key;
        /// split points fall strictly inside their partition, and the map
        /// with them stays strictly ascending.
        #[test]
        fn counts_and_splits(
            mut bounds in prop::collection::vec(prop::collection::vec(0u8..4, 0..5), 0..30),
            mut keys in prop::collection::vec(prop::collection::vec(0u8..4, 0..6), 0..300),
            piece in 1usize..20,
        ) {
            bounds.sort();
            bounds.dedup();
            keys.sort();
            let m = PartitionMap::new(bounds);
            let counts = m.counts_sorted(keys.iter().map(|k| k.as_slice()));
            let mut want: Vec<PartitionCount> = Vec::new();
            for k in &keys {
                let p = m.of(k);
                match want.last_mut() {
                    Some(c) if c.partition == p => c.count += 1,
                    _ => want.push(PartitionCount { partition: p, count: 1 }),
                }
            }
            prop_assert_eq!(&counts, &want);
            let mut extra = Vec::new();
            for c in &counts {
                let (lo, hi) = m.bounds_of(c.partition);
                let inside: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).filter(|k| m.of(k) == c.partition).collect();
                let pts = split_points(inside.into_iter(), piece, lo, None);
                for x in &pts {
                    prop_assert!(lo.is_none_or(|l| l < x.as_slice()));
                    prop_assert!(hi.is_none_or(|h| x.as_slice() < h));
                }
                extra.extend(pts);
            }
            let all = m.with_boundaries(&extra);
            prop_assert_eq!(all.len(), m.count() as usize - 1 + extra.len());
            prop_assert!(all.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
