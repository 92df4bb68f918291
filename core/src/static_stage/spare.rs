//! Spare posting-list buffers for merge steps.
//!
//! A merge step decodes every entry of the leaves it rewrites into a
//! (key, TIDs) [`Group`], the merge passes most of them through untouched,
//! and the leaf writer drops each one once its bytes are in a page: two
//! allocations and two frees per entry, about a tenth of a sync's CPU under
//! random inserts (the allocator's consolidation of the freed chunks
//! included). The writer (`build_leaves`) hands the buffers back here and
//! the decoder (`LeafView::decode_all`) and the merge take them from
//! here, so a step reuses the same few hundred buffers leaf after leaf.
//!
//! Per thread (a PostgreSQL process runs one), bounded in count and in the
//! size of each buffer kept, so a long posting list or a large build does
//! not stay allocated.

use std::cell::RefCell;

use super::merge::Group;

/// Buffers kept at most: a few leaves' entries (a leaf of unique int8 keys
/// holds about 500).
const MAX_SPARE: usize = 4096;
/// Largest key and TID capacities worth keeping (bytes, TIDs).
const MAX_KEY_CAP: usize = 256;
const MAX_TID_CAP: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<Group>> = const { RefCell::new(Vec::new()) };
}

/// An empty group, reusing a spare one's buffers when there is one.
#[inline]
pub fn take() -> Group {
    SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default()
}

/// An empty group holding a copy of `key`.
#[inline]
pub fn take_with_key(key: &[u8]) -> Group {
    let mut g = take();
    g.0.extend_from_slice(key);
    g
}

/// Gives a group's buffers back for the next `take`.
#[inline]
pub fn give(mut g: Group) {
    if g.0.capacity() > MAX_KEY_CAP || g.1.capacity() > MAX_TID_CAP || (g.0.capacity() == 0 && g.1.capacity() == 0) {
        return;
    }
    g.0.clear();
    g.1.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < MAX_SPARE {
            s.push(g);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tid::Tid;

    #[test]
    fn given_buffers_come_back_empty_and_bounded() {
        let mut g = take_with_key(b"abc");
        g.1.push(Tid { block: 1, offset: 2 });
        let kp = g.0.as_ptr();
        give(g);
        let g = take();
        assert!(g.0.is_empty() && g.1.is_empty());
        assert_eq!(g.0.as_ptr(), kp, "the key buffer is reused");
        // A long posting list is not kept.
        give((vec![1], vec![Tid { block: 0, offset: 1 }; 1000]));
        assert!(take().1.capacity() < 1000);
        for _ in 0..MAX_SPARE + 10 {
            give((Vec::with_capacity(8), Vec::with_capacity(1)));
        }
        assert_eq!(SPARE.with(|s| s.borrow().len()), MAX_SPARE);
    }
}
