//! Heap tuple identifiers, as PostgreSQL's ItemPointerData but plain Rust.

/// A heap TID: block number and 1-based line pointer offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    pub const fn new(block: u32, offset: u16) -> Self {
        Tid { block, offset }
    }
    /// Packs into 48 bits preserving order.
    pub const fn to_u64(self) -> u64 {
        ((self.block as u64) << 16) | self.offset as u64
    }
    pub const fn from_u64(v: u64) -> Self {
        Tid { block: (v >> 16) as u32, offset: (v & 0xffff) as u16 }
    }
}

/// A set of TIDs that answers `contains` for every entry of an index in
/// turn: a merge asks it once per entry of each leaf it rewrites (a
/// million entries for the thousands of TIDs it may drop), hasis's VACUUM
/// once per entry of every index of the table. A sorted vector
/// alone costs a binary search each, a dozen dependent loads mostly into
/// memory that is not cached; that was a fifth of a merge of an update
/// stream's batch. In front of it, one bit per hash of a TID, about 16
/// bits per member, rules out all but ~1/16 of the non-members with a
/// single load from a table small enough to stay cached.
#[derive(Clone, Debug, Default)]
pub struct TidSet {
    /// Sorted, without duplicates.
    tids: Vec<Tid>,
    /// Bit `tid_bit(t)` is set for every member.
    filter: Vec<u64>,
    /// 64 - log2(bits of `filter`).
    shift: u32,
}

/// Filter bits per member (rounded up to a power of two in all).
const TIDSET_BITS_PER_MEMBER: usize = 16;

impl TidSet {
    pub fn new(mut tids: Vec<Tid>) -> TidSet {
        tids.sort_unstable();
        tids.dedup();
        let bits = (tids.len() * TIDSET_BITS_PER_MEMBER).next_power_of_two().max(64);
        let mut set = TidSet { tids: Vec::new(), filter: vec![0; bits / 64], shift: 64 - bits.trailing_zeros() };
        for &t in &tids {
            let b = set.tid_bit(t);
            set.filter[b / 64] |= 1 << (b % 64);
        }
        set.tids = tids;
        set
    }

    #[inline(always)]
    fn tid_bit(&self, t: Tid) -> usize {
        (t.to_u64().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    #[inline]
    pub fn contains(&self, t: Tid) -> bool {
        let b = self.tid_bit(t);
        self.filter[b / 64] & (1 << (b % 64)) != 0 && self.tids.binary_search(&t).is_ok()
    }

    /// The members, sorted.
    pub fn as_slice(&self) -> &[Tid] {
        &self.tids
    }

    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tidset_contains_exactly_its_members(
            members in proptest::collection::vec((0u32..64, 1u16..8), 0..200),
            probes in proptest::collection::vec((0u32..64, 1u16..8), 0..400),
        ) {
            let tids: Vec<Tid> = members.iter().map(|&(b, o)| Tid::new(b, o)).collect();
            let set = TidSet::new(tids.clone());
            for &t in &tids {
                prop_assert!(set.contains(t));
            }
            for &(b, o) in &probes {
                let t = Tid::new(b, o);
                prop_assert_eq!(set.contains(t), tids.contains(&t));
            }
            let mut sorted = tids.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(set.as_slice(), &sorted[..]);
        }
    }

    #[test]
    fn tidset_filter_rules_out_most_non_members() {
        let set = TidSet::new((0..1000u32).map(|b| Tid::new(b * 7, 3)).collect());
        let passed = (0..100_000u32)
            .map(|i| Tid::new(i, 5))
            .filter(|&t| {
                let b = set.tid_bit(t);
                set.filter[b / 64] & (1 << (b % 64)) != 0
            })
            .count();
        // About 1/16 of the probes share a bit with a member (16 bits per
        // member, rounded up to 16384 bits for 1000).
        assert!(passed < 100_000 / 8, "{passed} of 100000 non-members passed the filter");
        assert!((0..1000u32).all(|b| set.contains(Tid::new(b * 7, 3))));
        assert!(!set.contains(Tid::new(1, 3)));
        assert!(TidSet::new(Vec::new()).is_empty() && !TidSet::new(Vec::new()).contains(Tid::new(0, 1)));
    }
}
