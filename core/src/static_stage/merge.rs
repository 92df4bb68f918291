//! What one merge step writes: the posting lists of the leaves it rewrites
//! merged with the step's fresh (key, TID) entries, without the TIDs the
//! caller declares gone, as (key, TIDs) in index order.
//!
//! The order is the index order of (key, TID): keys by the index's
//! comparison, equal keys by TID. Consecutive live entries whose keys are
//! equal *byte for byte* form one posting list; keys that compare equal with
//! different bytes (numeric 1 and 1.0, text under a nondeterministic
//! collation) stay separate lists, interleaved in TID order.
//!
//! A merge reads every entry of the leaves it rewrites, and a batch of random
//! keys touches every leaf, so this runs once per static entry per merge.
//! Comparing pair by pair and regrouping would allocate a key and a list for
//! every entry; instead a whole old posting list passes through untouched
//! when it sorts before the next fresh key, and a run of fresh entries with
//! one key becomes a list at once. Only where an old key and a fresh key
//! compare equal does the merge go pair by pair. `reference` in the tests is
//! the pair-by-pair definition the result must equal.

use std::cell::Cell;
use std::cmp::Ordering;

use super::spare;
use crate::keys::bytes_eq;
use crate::tid::Tid;

/// How many fresh entries ahead of the one taken the merge asks the CPU
/// for the key of: each fresh key is its own allocation, and in a sorted
/// batch of random keys consecutive keys lie anywhere in memory, so
/// reading them in order missed the cache on every one (most of this
/// iterator's time in a merge of 600k random keys).
const FRESH_KEY_AHEAD: usize = 4;

/// One posting list: a key and its TIDs in order.
pub type Group = (Vec<u8>, Vec<Tid>);

/// What a merge read from the old leaves: posting lists and their TIDs
/// (before any is dropped). Shared, so the caller can read it while a
/// writer consumes the iterator.
#[derive(Default, Debug)]
pub struct OldRead {
    pub lists: Cell<u64>,
    pub tids: Cell<u64>,
    /// A fresh entry came out while old entries were left (set, never
    /// cleared, by the iterator): the fresh entries were not all appended
    /// after the old ones.
    pub fresh_among_old: Cell<bool>,
}

/// Iterator over the merged posting lists (see the module comment).
pub struct MergedGroups<'a, O, F, C, G>
where
    O: Iterator<Item = Group>,
    C: FnMut(&[u8], &[u8]) -> Ordering,
    G: FnMut(&[u8], Tid) -> bool,
{
    /// The old leaves' posting lists, in index order; a list may continue
    /// in the next one with the same key (a list split across leaves).
    old: O,
    /// The old list being read, and how many of its TIDs are taken.
    old_cur: Option<Group>,
    old_pos: usize,
    fresh: &'a [F],
    fresh_pos: usize,
    key_of: fn(&F) -> &[u8],
    tid_of: fn(&F) -> Tid,
    cmp: C,
    /// True for an entry that must not be written (VACUUM's dead TIDs,
    /// hinted ones); the caller may record it. Called once per entry.
    gone: G,
    /// A list ready to go out, held until the next one shows it is not
    /// continued by a list with the same key bytes.
    out: Option<Group>,
    read: &'a OldRead,
}

impl<'a, O, F, C, G> MergedGroups<'a, O, F, C, G>
where
    O: Iterator<Item = Group>,
    C: FnMut(&[u8], &[u8]) -> Ordering,
    G: FnMut(&[u8], Tid) -> bool,
{
    pub fn new(old: O, fresh: &'a [F], key_of: fn(&F) -> &[u8], tid_of: fn(&F) -> Tid, cmp: C, gone: G, read: &'a OldRead) -> Self {
        MergedGroups { old, old_cur: None, old_pos: 0, fresh, fresh_pos: 0, key_of, tid_of, cmp, gone, out: None, read }
    }

    /// Makes `old_cur` the list with TIDs left to take, if any.
    fn fill_old(&mut self) {
        while self.old_cur.as_ref().is_none_or(|(_, t)| self.old_pos >= t.len()) {
            match self.old.next() {
                Some(g) => {
                    self.read.lists.set(self.read.lists.get() + 1);
                    self.read.tids.set(self.read.tids.get() + g.1.len() as u64);
                    self.old_cur = Some(g);
                    self.old_pos = 0;
                }
                None => {
                    self.old_cur = None;
                    return;
                }
            }
        }
    }

    /// Asks for the key of the fresh entry `FRESH_KEY_AHEAD` places after
    /// the next one; called as a fresh entry is taken.
    #[inline]
    fn prefetch_fresh(&self) {
        if let Some(f) = self.fresh.get(self.fresh_pos + FRESH_KEY_AHEAD) {
            super::prefetch((self.key_of)(f));
        }
    }

    /// The next run of consecutive live entries with one key's bytes, in
    /// the merged order; None at the end.
    fn next_run(&mut self) -> Option<Group> {
        loop {
            self.fill_old();
            let fresh_head = self.fresh.get(self.fresh_pos);
            let order = match (&self.old_cur, fresh_head) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((ko, _)), Some(f)) => (self.cmp)(ko, (self.key_of)(f)),
            };
            if order == Ordering::Less && self.old_pos == 0 {
                // The whole old list sorts before every fresh entry left.
                let (k, mut tids) = self.old_cur.take().expect("old list present");
                let gone = &mut self.gone;
                tids.retain(|&t| !gone(&k, t));
                if tids.is_empty() {
                    spare::give((k, tids));
                    continue;
                }
                return Some((k, tids));
            }
            if order == Ordering::Greater {
                // Fresh entries with the head's key bytes all sort before
                // the old list (they compare below it).
                if self.old_cur.is_some() {
                    self.read.fresh_among_old.set(true);
                }
                let f0 = &self.fresh[self.fresh_pos];
                let k = (self.key_of)(f0);
                let mut group = spare::take();
                while let Some(f) = self.fresh.get(self.fresh_pos) {
                    if !bytes_eq((self.key_of)(f), k) {
                        break;
                    }
                    self.fresh_pos += 1;
                    self.prefetch_fresh();
                    let t = (self.tid_of)(f);
                    if !(self.gone)(k, t) {
                        group.1.push(t);
                    }
                }
                if group.1.is_empty() {
                    spare::give(group);
                    continue;
                }
                group.0.extend_from_slice(k);
                return Some(group);
            }
            // An old and a fresh key compare equal (or the old list is part
            // taken): pair by pair until the next live entry has other bytes.
            if let Some(run) = self.pairwise_run() {
                return Some(run);
            }
        }
    }

    /// One run taken entry by entry; None when every entry it met was gone
    /// and the streams ended.
    fn pairwise_run(&mut self) -> Option<Group> {
        let mut run: Option<Group> = None;
        loop {
            self.fill_old();
            let fresh_head = self.fresh.get(self.fresh_pos);
            let take_old = match (&self.old_cur, fresh_head) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((ko, to)), Some(f)) => (self.cmp)(ko, (self.key_of)(f)).then(to[self.old_pos].cmp(&(self.tid_of)(f))) != Ordering::Greater,
            };
            let (k, t): (&[u8], Tid) = if take_old {
                let (ko, to) = self.old_cur.as_ref().expect("old list present");
                (ko, to[self.old_pos])
            } else {
                let f = &self.fresh[self.fresh_pos];
                ((self.key_of)(f), (self.tid_of)(f))
            };
            if let Some((rk, _)) = &run {
                if !bytes_eq(rk, k) {
                    // Ends the run without taking the entry: whether it is
                    // gone is asked when it is taken.
                    break;
                }
            }
            let live = !(self.gone)(k, t);
            if live {
                match &mut run {
                    Some((_, tids)) => tids.push(t),
                    None => {
                        let mut group = spare::take_with_key(k);
                        group.1.push(t);
                        run = Some(group);
                    }
                }
            }
            if take_old {
                self.old_pos += 1;
            } else {
                if self.old_cur.is_some() {
                    self.read.fresh_among_old.set(true);
                }
                self.fresh_pos += 1;
                self.prefetch_fresh();
            }
        }
        run
    }
}

impl<O, F, C, G> Iterator for MergedGroups<'_, O, F, C, G>
where
    O: Iterator<Item = Group>,
    C: FnMut(&[u8], &[u8]) -> Ordering,
    G: FnMut(&[u8], Tid) -> bool,
{
    type Item = Group;

    fn next(&mut self) -> Option<Group> {
        // Runs with the same key bytes meet where a list continues across
        // leaves, or where the entries between them were all gone: they
        // become one list, without a TID twice (a step run again after a
        // crash finds its entries in the leaves already).
        loop {
            let Some((k, tids)) = self.next_run() else {
                return self.out.take();
            };
            match &mut self.out {
                Some((ok, otids)) if bytes_eq(ok, &k) => {
                    for &t in &tids {
                        if otids.last() != Some(&t) {
                            otids.push(t);
                        }
                    }
                    spare::give((k, tids));
                }
                _ => {
                    let mut tids = tids;
                    tids.dedup();
                    if let Some(done) = self.out.replace((k, tids)) {
                        return Some(done);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys compare by their first byte only, so keys with other bytes
    /// after it are equal under the order but not byte-equal.
    fn coarse(a: &[u8], b: &[u8]) -> Ordering {
        a.first().cmp(&b.first())
    }

    struct Fresh {
        key: Vec<u8>,
        tid: Tid,
    }

    /// The definition: every (key, TID) of both inputs in index order,
    /// those gone dropped, consecutive byte-equal keys grouped, a TID
    /// never twice in a row.
    fn reference(old: &[Group], fresh: &[Fresh], gone: &dyn Fn(&[u8], Tid) -> bool) -> Vec<Group> {
        let mut pairs: Vec<(Vec<u8>, Tid, usize)> = Vec::new();
        // Stable merge: old before fresh on full ties, as the merge does.
        for (k, ts) in old {
            for &t in ts {
                pairs.push((k.clone(), t, 0));
            }
        }
        for f in fresh {
            pairs.push((f.key.clone(), f.tid, 1));
        }
        pairs.sort_by(|a, b| coarse(&a.0, &b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut out: Vec<Group> = Vec::new();
        for (k, t, _) in pairs.into_iter().filter(|(k, t, _)| !gone(k, *t)) {
            match out.last_mut() {
                Some((lk, lt)) if *lk == k => {
                    if lt.last() != Some(&t) {
                        lt.push(t);
                    }
                }
                _ => out.push((k, vec![t])),
            }
        }
        out
    }

    fn run(old: &[Group], fresh: &[Fresh], gone: &dyn Fn(&[u8], Tid) -> bool) -> (Vec<Group>, u64, u64) {
        let mut asked: Vec<(Vec<u8>, Tid)> = Vec::new();
        let g = |k: &[u8], t: Tid| {
            asked.push((k.to_vec(), t));
            gone(k, t)
        };
        let read = OldRead::default();
        let out: Vec<Group> = MergedGroups::new(old.iter().cloned(), fresh, |f: &Fresh| &f.key[..], |f: &Fresh| f.tid, coarse, g, &read).collect();
        let (lists, tids) = (read.lists.get(), read.tids.get());
        // Each entry is asked about once.
        let total = old.iter().map(|(_, t)| t.len()).sum::<usize>() + fresh.len();
        assert_eq!(asked.len(), total, "gone() asked {} times for {} entries", asked.len(), total);
        (out, lists, tids)
    }

    fn t(block: u32) -> Tid {
        Tid::new(block, 1)
    }

    #[test]
    fn disjoint_lists_pass_through() {
        let old = vec![(b"a".to_vec(), vec![t(1), t(2)]), (b"c".to_vec(), vec![t(3)])];
        let fresh = vec![Fresh { key: b"b".to_vec(), tid: t(9) }, Fresh { key: b"d".to_vec(), tid: t(0) }];
        let (out, lists, tids) = run(&old, &fresh, &|_, _| false);
        assert_eq!(out, vec![(b"a".to_vec(), vec![t(1), t(2)]), (b"b".to_vec(), vec![t(9)]), (b"c".to_vec(), vec![t(3)]), (b"d".to_vec(), vec![t(0)])]);
        assert_eq!((lists, tids), (2, 3));
    }

    #[test]
    fn equal_keys_merge_by_tid_and_other_bytes_stay_apart() {
        // "a1" and "a2" compare equal, differ in bytes: interleaved by TID.
        let old = vec![(b"a1".to_vec(), vec![t(1), t(5)])];
        let fresh = vec![Fresh { key: b"a2".to_vec(), tid: t(3) }, Fresh { key: b"a1".to_vec(), tid: t(7) }];
        let (out, _, _) = run(&old, &fresh, &|_, _| false);
        assert_eq!(out, vec![(b"a1".to_vec(), vec![t(1)]), (b"a2".to_vec(), vec![t(3)]), (b"a1".to_vec(), vec![t(5), t(7)])]);
    }

    #[test]
    fn lists_meet_across_gone_entries_and_split_leaves() {
        let old = vec![(b"a1".to_vec(), vec![t(1)]), (b"a2".to_vec(), vec![t(2)]), (b"a1".to_vec(), vec![t(3)]), (b"a1".to_vec(), vec![t(4)])];
        let (out, lists, _) = run(&old, &[], &|k, _| k == b"a2");
        assert_eq!(out, vec![(b"a1".to_vec(), vec![t(1), t(3), t(4)])]);
        assert_eq!(lists, 4);
    }

    #[test]
    fn an_entry_present_in_both_is_written_once() {
        let old = vec![(b"k".to_vec(), vec![t(1), t(2)])];
        let fresh = vec![Fresh { key: b"k".to_vec(), tid: t(2) }, Fresh { key: b"k".to_vec(), tid: t(3) }];
        let (out, _, _) = run(&old, &fresh, &|_, _| false);
        assert_eq!(out, vec![(b"k".to_vec(), vec![t(1), t(2), t(3)])]);
    }

    #[test]
    fn fresh_among_old_tells_appends_apart() {
        let among = |old: &[Group], fresh: &[Fresh]| {
            let read = OldRead::default();
            let n = MergedGroups::new(old.iter().cloned(), fresh, |f: &Fresh| &f.key[..], |f: &Fresh| f.tid, coarse, |_: &[u8], _| false, &read).count();
            assert!(n > 0);
            read.fresh_among_old.get()
        };
        let old = vec![(b"b".to_vec(), vec![t(1)]), (b"d".to_vec(), vec![t(2)])];
        // After every old key: an append.
        assert!(!among(&old, &[Fresh { key: b"e".to_vec(), tid: t(9) }]));
        // Before or between old keys, or the last old key with a lower TID.
        assert!(among(&old, &[Fresh { key: b"a".to_vec(), tid: t(9) }]));
        assert!(among(&old, &[Fresh { key: b"c".to_vec(), tid: t(9) }]));
        assert!(among(&old, &[Fresh { key: b"d".to_vec(), tid: t(0) }]));
        // The last old key with a higher TID still comes after it.
        assert!(!among(&old, &[Fresh { key: b"d".to_vec(), tid: t(3) }]));
    }

    /// Old lists as a stage holds them: sorted, byte-equal neighbours
    /// grouped, some lists split in two (a list across two leaves).
    fn stage_lists(mut pairs: Vec<(Vec<u8>, Tid)>, splits: &[bool]) -> Vec<Group> {
        pairs.sort_by(|a, b| coarse(&a.0, &b.0).then(a.1.cmp(&b.1)));
        pairs.dedup();
        let mut out: Vec<Group> = Vec::new();
        for (i, (k, t)) in pairs.into_iter().enumerate() {
            let split = splits.get(i % splits.len().max(1)).copied().unwrap_or(false);
            match out.last_mut() {
                Some((lk, lt)) if *lk == k && !split => lt.push(t),
                _ => out.push((k, vec![t])),
            }
        }
        out
    }

    fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
        // Few first bytes (many equal keys), a tail that makes some of
        // them differ in bytes.
        (0u8..6, proptest::collection::vec(0u8..2, 0..2)).prop_map(|(h, tail)| {
            let mut k = vec![h];
            k.extend(tail);
            k
        })
    }

    proptest! {
        #[test]
        fn equals_the_pairwise_definition(
            old_pairs in proptest::collection::vec((key_strategy(), 0u32..40), 0..60),
            fresh_pairs in proptest::collection::vec((key_strategy(), 0u32..40), 0..40),
            splits in proptest::collection::vec(proptest::bool::weighted(0.2), 1..7),
            gone_mod in 0u32..5,
        ) {
            let old = stage_lists(old_pairs.into_iter().map(|(k, b)| (k, t(b))).collect(), &splits);
            let mut fresh: Vec<Fresh> = fresh_pairs.into_iter().map(|(k, b)| Fresh { key: k, tid: t(b) }).collect();
            fresh.sort_by(|a, b| coarse(&a.key, &b.key).then(a.tid.cmp(&b.tid)));
            fresh.dedup_by(|a, b| a.key == b.key && a.tid == b.tid);
            let gone = |_k: &[u8], t: Tid| gone_mod != 0 && t.block % 7 == gone_mod;
            let (out, lists, tids) = run(&old, &fresh, &gone);
            prop_assert_eq!(&out, &reference(&old, &fresh, &gone));
            prop_assert_eq!(lists, old.len() as u64);
            prop_assert_eq!(tids, old.iter().map(|(_, t)| t.len() as u64).sum::<u64>());
            for (_, ts) in &out {
                prop_assert!(!ts.is_empty());
            }
        }
    }
}
