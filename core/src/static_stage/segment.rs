//! Segmented merges: which leaves one step of a merge rewrites.
//!
//! A merge-all (paper §5) writes a whole new static stage beside the old
//! one, so the file holds two stages while it runs and keeps the space
//! after. A segmented merge walks the stage in steps; each step rewrites a
//! run of consecutive leaves (a *segment*) with the fresh entries that fall
//! into its key range, keeps every other leaf as it is, and writes new inner
//! levels over the result. The caller switches to each step's stage and
//! frees what it retired before the next step allocates, so at most one
//! segment is doubled at a time.
//!
//! A leaf's range is [its separator, the next leaf's separator). A segment
//! never ends between two leaves that hold the same key (a posting list
//! split over leaves, or keys equal under the order with different bytes):
//! fresh entries of that key would otherwise land on one side only, out of
//! TID order with the other.

use std::cmp::Ordering;

/// Leaves `first..end` of the stage (indexes into its leaf list) are
/// rewritten by one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub first: usize,
    pub end: usize,
}

/// What a step has to go on.
pub struct SegmentInput<'a, S: AsRef<[u8]>> {
    /// Separator of each leaf, in order (the first key the leaf had).
    pub seps: &'a [S],
    /// First leaf the previous steps did not cover.
    pub start: usize,
    /// The smallest fresh key left to merge, if any.
    pub first_fresh: Option<&'a [u8]>,
    /// Every leaf from `start` on must be rewritten (dead TIDs to drop, a
    /// format change): no leaf is skipped.
    pub rewrite_all: bool,
    /// Leaves per segment (at least 1); a segment grows past it only to
    /// keep equal keys together.
    pub segment_leaves: usize,
    /// What one more step costs, in leaf writes (the inner levels it
    /// rewrites, the metapage, the recycle list): a run of at least this
    /// many leaves that take no fresh key ends the segment, since
    /// rewriting them would cost more than starting the next step past
    /// them. 0: segments always span `segment_leaves`.
    pub step_cost_leaves: usize,
    /// For a step that rewrites only the leaves fresh keys fall into
    /// (`plan_runs`): the segment ends after this many of them, so a batch
    /// that touches every leaf doubles no more per step than one that
    /// rewrites whole segments. 0: no such limit.
    pub touched_leaves: usize,
}

/// Plans the next step: the segment starts at the leaf the smallest fresh
/// key falls into (or at `start` with `rewrite_all`), spans
/// `segment_leaves` leaves, or ends after its last leaf that takes fresh
/// keys when `step_cost_leaves` leaves without any follow it (sparse
/// batches: an ascending key per district, say, touches one leaf in a
/// hundred), and moves its edges outwards while the leaves on either side
/// of an edge share a key. `last_key(i)` is the last key of the nearest
/// non-empty leaf at or before `i` (None if there is none); `takes_fresh(i)`
/// says whether any fresh key falls into leaf `i`. None when nothing is
/// left to do.
pub fn plan_segment<S: AsRef<[u8]>>(
    input: &SegmentInput<'_, S>,
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
    last_key: &mut dyn FnMut(usize) -> Option<Vec<u8>>,
    takes_fresh: &mut dyn FnMut(usize) -> bool,
) -> Option<Segment> {
    let seps = input.seps;
    let n = seps.len();
    if input.start >= n {
        return None;
    }
    let mut first = if input.rewrite_all {
        input.start
    } else {
        let k = input.first_fresh?;
        // The last leaf whose separator is <= k (the first leaf when none).
        let p = seps.partition_point(|s| cmp(s.as_ref(), k) != Ordering::Greater).saturating_sub(1);
        p.max(input.start)
    };
    let mut shares_key = |i: usize| -> bool {
        // Whether leaf i's separator equals the last key before leaf i.
        i > 0 && last_key(i - 1).is_some_and(|lk| cmp(&lk, seps[i].as_ref()) == Ordering::Equal)
    };
    while first > input.start && shares_key(first) {
        first -= 1;
    }
    let limit = (first + input.segment_leaves.max(1)).min(n);
    let mut end = limit;
    if input.touched_leaves > 0 && !input.rewrite_all {
        let mut touched = 0;
        let mut i = first;
        while i < limit && touched < input.touched_leaves {
            touched += takes_fresh(i) as usize;
            i += 1;
        }
        end = i;
    }
    if !input.rewrite_all && input.step_cost_leaves > 0 {
        // The first leaf takes the smallest fresh key; stop after the last
        // leaf that takes one once a long enough gap follows it.
        let mut last_hit = first;
        let mut i = first + 1;
        while i < limit && i - last_hit <= input.step_cost_leaves {
            if takes_fresh(i) {
                last_hit = i;
            }
            i += 1;
        }
        end = if i - last_hit > input.step_cost_leaves { last_hit + 1 } else { limit };
    }
    while end < n && shares_key(end) {
        end += 1;
    }
    Some(Segment { first, end })
}

/// How many of `fresh` (sorted) belong to a segment ending before leaf
/// `end`: those below its separator (all of them when `end` is the end).
pub fn fresh_in_segment<S: AsRef<[u8]>, K>(
    seps: &[S],
    end: usize,
    fresh: &[K],
    key: impl Fn(&K) -> &[u8],
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
) -> usize {
    if end >= seps.len() {
        return fresh.len();
    }
    let bound = seps[end].as_ref();
    fresh.partition_point(|f| cmp(key(f), bound) == Ordering::Less)
}

/// Whether any of `fresh` (sorted) falls into leaf `i`: at or above its
/// separator (any key, for the first leaf) and below the next one.
pub fn leaf_takes_fresh<S: AsRef<[u8]>, K>(
    seps: &[S],
    i: usize,
    fresh: &[K],
    key: impl Fn(&K) -> &[u8],
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
) -> bool {
    let lo = if i == 0 { 0 } else { fresh_in_segment(seps, i, fresh, &key, cmp) };
    fresh_in_segment(seps, i + 1, fresh, &key, cmp) > lo
}

/// A run of leaves one step rewrites, with the fresh entries that fall
/// into it: leaves `leaves.first..leaves.end`, fresh entries
/// `fresh.start..fresh.end` (indexes into the step's fresh slice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub leaves: Segment,
    pub fresh: std::ops::Range<usize>,
}

/// The runs of a step's segment `seg` that take fresh entries, for a step
/// that keeps every other leaf of the segment as it is: only the leaves
/// fresh keys fall into are read and rewritten (a batch of random keys a
/// hundredth of the stage's size touches about a third of its leaves, and
/// a step that rewrote its whole segment read and wrote the other two
/// thirds too). `fresh` are the segment's fresh entries, sorted. Adjacent
/// leaves that take fresh keys form one run. A run starts one leaf earlier
/// while its smallest fresh key equals the run's separator and the leaf
/// before ends with that key (`last_key`, as for `plan_segment`): fresh
/// TIDs of a key split over leaves must be merged with all of its old
/// ones. The runs' fresh ranges cover `fresh` in order.
pub fn plan_runs<S: AsRef<[u8]>, K>(
    seps: &[S],
    seg: Segment,
    fresh: &[K],
    key: impl Fn(&K) -> &[u8],
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
    last_key: &mut dyn FnMut(usize) -> Option<Vec<u8>>,
) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut pos = 0;
    while pos < fresh.len() {
        let k = key(&fresh[pos]);
        // The last leaf of the segment whose separator is <= k (its first
        // leaf for a key below every separator: the stage's first leaf).
        let within = &seps[seg.first..seg.end];
        let mut first = seg.first + within.partition_point(|s| cmp(s.as_ref(), k) != Ordering::Greater).saturating_sub(1);
        let end = first + 1;
        let upto = pos + fresh[pos..].partition_point(|f| end >= seps.len() || cmp(key(f), seps[end].as_ref()) == Ordering::Less);
        debug_assert!(upto > pos);
        while first > seg.first
            && cmp(k, seps[first].as_ref()) == Ordering::Equal
            && last_key(first - 1).is_some_and(|lk| cmp(&lk, seps[first].as_ref()) == Ordering::Equal)
        {
            first -= 1;
        }
        match runs.last_mut() {
            Some(prev) if prev.leaves.end >= first => {
                prev.leaves.end = end;
                prev.fresh.end = upto;
            }
            _ => runs.push(Run { leaves: Segment { first, end }, fresh: pos..upto }),
        }
        pos = upto.max(pos + 1);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A stage as leaves of keys (single bytes), each leaf sorted, all in
    /// order; separators are each leaf's first key.
    fn seps_of(leaves: &[Vec<u8>]) -> Vec<Vec<u8>> {
        leaves.iter().map(|l| vec![l[0]]).collect()
    }

    fn last_key_fn(leaves: &[Vec<u8>]) -> impl FnMut(usize) -> Option<Vec<u8>> + '_ {
        move |i| (0..=i).rev().find_map(|j| leaves[j].last().map(|k| vec![*k]))
    }

    fn cmp(a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }

    #[test]
    fn starts_where_the_first_fresh_key_falls() {
        let leaves = vec![vec![1, 2], vec![5, 6], vec![9, 10], vec![13, 14]];
        let seps = seps_of(&leaves);
        let input = SegmentInput { seps: &seps, start: 0, first_fresh: Some(&[7]), rewrite_all: false, segment_leaves: 1, step_cost_leaves: 0, touched_leaves: 0 };
        let s = plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut |_| true).unwrap();
        assert_eq!(s, Segment { first: 1, end: 2 });
        // A key below every separator goes to the first leaf.
        let input = SegmentInput { first_fresh: Some(&[0]), ..input };
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut |_| true).unwrap(), Segment { first: 0, end: 1 });
    }

    #[test]
    fn never_splits_a_key() {
        // Key 5 spans leaves 1..=3.
        let leaves = vec![vec![1, 2], vec![3, 5], vec![5, 5], vec![5, 8], vec![9]];
        let seps = seps_of(&leaves);
        let input = SegmentInput { seps: &seps, start: 0, first_fresh: Some(&[5]), rewrite_all: false, segment_leaves: 1, step_cost_leaves: 0, touched_leaves: 0 };
        let s = plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut |_| true).unwrap();
        assert_eq!(s, Segment { first: 1, end: 4 });
    }

    /// Whether a fresh key of `rest` (sorted) falls into leaf `i`.
    fn takes_fresh(seps: &[Vec<u8>], rest: &[u8], i: usize) -> bool {
        leaf_takes_fresh(seps, i, rest, std::slice::from_ref, &mut cmp)
    }

    #[test]
    fn sparse_batches_end_segments_early() {
        // 100 leaves of keys 2i, 2i+1; fresh keys land in leaves 10, 11 and 60.
        let leaves: Vec<Vec<u8>> = (0..100u8).map(|i| vec![2 * i, 2 * i + 1]).collect();
        let seps = seps_of(&leaves);
        let rest = [21u8, 23, 121];
        let input = SegmentInput { seps: &seps, start: 0, first_fresh: Some(&rest[..1]), rewrite_all: false, segment_leaves: 64, step_cost_leaves: 3, touched_leaves: 0 };
        let mut takes = |i: usize| takes_fresh(&seps, &rest, i);
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut takes).unwrap(), Segment { first: 10, end: 12 });
        // Without a step cost the segment spans segment_leaves.
        let input = SegmentInput { step_cost_leaves: 0, ..input };
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut takes).unwrap(), Segment { first: 10, end: 74 });
        // A gap shorter than the step cost is rewritten rather than skipped.
        let rest = [21u8, 27];
        let input = SegmentInput { step_cost_leaves: 3, ..input };
        let mut takes = |i: usize| takes_fresh(&seps, &rest, i);
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut takes).unwrap(), Segment { first: 10, end: 14 });
    }

    #[test]
    fn touched_leaves_end_segments() {
        // 100 leaves of keys 2i, 2i+1; fresh keys in leaves 10, 11, 12, 40, 41.
        let leaves: Vec<Vec<u8>> = (0..100u8).map(|i| vec![2 * i, 2 * i + 1]).collect();
        let seps = seps_of(&leaves);
        let rest = [21u8, 23, 25, 81, 83];
        let input = SegmentInput { seps: &seps, start: 0, first_fresh: Some(&rest[..1]), rewrite_all: false, segment_leaves: 64, step_cost_leaves: 0, touched_leaves: 4 };
        let mut takes = |i: usize| takes_fresh(&seps, &rest, i);
        // Four touched leaves: 10, 11, 12 and 40; the segment ends after 40.
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut takes).unwrap(), Segment { first: 10, end: 41 });
        // Fewer touched leaves than the limit: the segment spans segment_leaves.
        let input = SegmentInput { touched_leaves: 8, ..input };
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut takes).unwrap(), Segment { first: 10, end: 74 });
    }

    #[test]
    fn nothing_to_do() {
        let leaves = vec![vec![1, 2], vec![5, 6]];
        let seps = seps_of(&leaves);
        let input = SegmentInput { seps: &seps, start: 0, first_fresh: None, rewrite_all: false, segment_leaves: 4, step_cost_leaves: 0, touched_leaves: 0 };
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut |_| true), None);
        let input = SegmentInput { start: 2, first_fresh: Some(&[9]), ..input };
        assert_eq!(plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut |_| true), None);
    }

    #[test]
    fn runs_skip_leaves_without_fresh_keys() {
        // 10 leaves of keys 10i, 10i+1; fresh keys land in leaves 2, 3 and 7.
        let leaves: Vec<Vec<u8>> = (0..10u8).map(|i| vec![10 * i, 10 * i + 1]).collect();
        let seps = seps_of(&leaves);
        let fresh = [25u8, 35, 36, 75];
        let runs = plan_runs(&seps, Segment { first: 0, end: 10 }, &fresh, std::slice::from_ref, &mut cmp, &mut last_key_fn(&leaves));
        assert_eq!(runs, vec![Run { leaves: Segment { first: 2, end: 4 }, fresh: 0..3 }, Run { leaves: Segment { first: 7, end: 8 }, fresh: 3..4 }]);
        // A key below every separator falls into the first leaf.
        let runs = plan_runs(&seps[1..], Segment { first: 0, end: 9 }, &[3u8], std::slice::from_ref, &mut cmp, &mut last_key_fn(&leaves[1..]));
        assert_eq!(runs, vec![Run { leaves: Segment { first: 0, end: 1 }, fresh: 0..1 }]);
    }

    #[test]
    fn runs_take_the_leaf_a_split_key_starts_in() {
        // Key 5 starts in leaf 1 and continues in leaves 2 and 3.
        let leaves = vec![vec![1, 2], vec![3, 5], vec![5, 5], vec![5, 8], vec![9]];
        let seps = seps_of(&leaves);
        let runs = plan_runs(&seps, Segment { first: 0, end: 5 }, &[5u8], std::slice::from_ref, &mut cmp, &mut last_key_fn(&leaves));
        assert_eq!(runs, vec![Run { leaves: Segment { first: 1, end: 4 }, fresh: 0..1 }]);
        // A fresh key inside leaf 3 above the split key needs no more.
        let runs = plan_runs(&seps, Segment { first: 0, end: 5 }, &[6u8], std::slice::from_ref, &mut cmp, &mut last_key_fn(&leaves));
        assert_eq!(runs, vec![Run { leaves: Segment { first: 3, end: 4 }, fresh: 0..1 }]);
    }

    proptest! {
        /// Steps that rewrite only their runs, with fresh entries (key, TID)
        /// whose TIDs may sort before old ones of the same key, keep every
        /// entry exactly once and the leaves in (key, TID) order.
        #[test]
        fn runs_merge_everything_in_order(
            old in proptest::collection::vec((0u8..30, 0u8..200), 1..120),
            fresh in proptest::collection::vec((0u8..30, 0u8..200), 0..60),
            per_leaf in 1usize..5,
            seg in 1usize..8,
        ) {
            let mut old = old;
            old.sort();
            old.dedup();
            let mut fresh: Vec<(u8, u8)> = fresh.into_iter().filter(|e| old.binary_search(e).is_err()).collect();
            fresh.sort();
            fresh.dedup();
            let mut leaves: Vec<Vec<(u8, u8)>> = old.chunks(per_leaf).map(|c| c.to_vec()).collect();
            let mut expected = old.clone();
            expected.extend(&fresh);
            expected.sort();
            let mut rest: &[(u8, u8)] = &fresh;
            let mut from: Option<u8> = None;
            let key = |e: &(u8, u8)| -> Vec<u8> { vec![e.0] };
            let mut steps = 0;
            loop {
                steps += 1;
                prop_assert!(steps < 1000);
                let seps: Vec<Vec<u8>> = leaves.iter().map(|l| vec![l[0].0]).collect();
                let keys_only: Vec<Vec<u8>> = leaves.iter().map(|l| l.iter().map(|e| e.0).collect()).collect();
                let start = from.map(|b| seps.partition_point(|s| s[0] < b)).unwrap_or(0);
                let first_fresh = rest.first().map(key);
                let input = SegmentInput { seps: &seps, start, first_fresh: first_fresh.as_deref(), rewrite_all: false, segment_leaves: seg * 4, step_cost_leaves: 0, touched_leaves: seg };
                let wrapped_all: Vec<Vec<u8>> = rest.iter().map(key).collect();
                let mut takes = |i: usize| leaf_takes_fresh(&seps, i, &wrapped_all, |k| &k[..], &mut cmp);
                let Some(s) = plan_segment(&input, &mut cmp, &mut last_key_fn(&keys_only), &mut takes) else { break };
                let wrapped = wrapped_all.clone();
                let c = fresh_in_segment(&seps, s.end, &wrapped, |k| &k[..], &mut cmp);
                let runs = plan_runs(&seps, s, &wrapped[..c], |k| &k[..], &mut cmp, &mut last_key_fn(&keys_only));
                // Runs lie in the segment, in order, apart, and cover its fresh entries.
                let mut covered = 0;
                let mut prev_end = s.first;
                for r in &runs {
                    prop_assert!(r.leaves.first >= prev_end && r.leaves.first < r.leaves.end && r.leaves.end <= s.end);
                    prop_assert_eq!(r.fresh.start, covered);
                    covered = r.fresh.end;
                    prev_end = r.leaves.end;
                }
                prop_assert_eq!(covered, c);
                prop_assert!(c > 0, "a step merges something");
                // Rewrite each run (right to left, so indexes stay valid).
                for r in runs.iter().rev() {
                    let mut ents: Vec<(u8, u8)> = leaves[r.leaves.first..r.leaves.end].concat();
                    ents.extend(&rest[r.fresh.clone()]);
                    ents.sort();
                    let new: Vec<Vec<(u8, u8)>> = ents.chunks(per_leaf).map(|c| c.to_vec()).collect();
                    leaves.splice(r.leaves.first..r.leaves.end, new);
                }
                let all: Vec<(u8, u8)> = leaves.concat();
                prop_assert!(all.windows(2).all(|w| w[0] < w[1]), "leaves out of (key, TID) order: {:?}", leaves);
                let next = (s.end < seps.len()).then(|| seps[s.end][0]);
                rest = &rest[c..];
                match next {
                    Some(b) if !rest.is_empty() => from = Some(b),
                    _ => break,
                }
            }
            prop_assert!(rest.is_empty());
            prop_assert_eq!(leaves.concat(), expected);
        }

        /// Steps planned one after another, each merging the fresh keys of
        /// its segment, rebuild exactly the sorted union, in order, and
        /// never leave two leaves that share a key split by a step edge.
        #[test]
        fn steps_merge_everything_in_order(
            mut old in proptest::collection::vec(0u8..40, 1..120),
            mut fresh in proptest::collection::vec(0u8..40, 0..60),
            per_leaf in 1usize..5,
            seg in 1usize..8,
            step_cost in 0usize..4,
            rewrite_all in any::<bool>(),
        ) {
            old.sort();
            fresh.sort();
            let mut leaves: Vec<Vec<u8>> = old.chunks(per_leaf).map(|c| c.to_vec()).collect();
            let mut expected = old.clone();
            expected.extend(&fresh);
            expected.sort();
            let mut rest: &[u8] = &fresh;
            let mut from: Option<u8> = None;
            let mut steps = 0;
            loop {
                steps += 1;
                prop_assert!(steps < 1000);
                let seps = seps_of(&leaves);
                let start = from.map(|b| seps.partition_point(|s| s[0] < b)).unwrap_or(0);
                let input = SegmentInput {
                    seps: &seps,
                    start,
                    first_fresh: rest.first().map(std::slice::from_ref),
                    rewrite_all,
                    segment_leaves: seg,
                    step_cost_leaves: step_cost,
                    touched_leaves: 0,
                };
                let mut takes = |i: usize| takes_fresh(&seps, rest, i);
                let Some(s) = plan_segment(&input, &mut cmp, &mut last_key_fn(&leaves), &mut takes) else { break };
                prop_assert!(s.first >= start && s.first < s.end && s.end <= leaves.len());
                let wrapped: Vec<[u8; 1]> = rest.iter().map(|k| [*k]).collect();
                let c = fresh_in_segment(&seps, s.end, &wrapped, |k| &k[..], &mut cmp);
                if !rewrite_all {
                    prop_assert!(c > 0, "a step that skips leaves merges something");
                }
                // Rewrite the segment: its keys and the fresh ones, re-cut.
                let mut keys: Vec<u8> = leaves[s.first..s.end].concat();
                keys.extend(&rest[..c]);
                keys.sort();
                let new: Vec<Vec<u8>> = keys.chunks(per_leaf).map(|c| c.to_vec()).collect();
                let next = (s.end < leaves.len()).then(|| seps[s.end][0]);
                // The segment's keys stay below the next leaf's separator.
                if let (Some(b), Some(k)) = (next, keys.last()) {
                    prop_assert!(*k < b);
                }
                leaves.splice(s.first..s.end, new);
                rest = &rest[c..];
                match next {
                    Some(b) if rewrite_all || !rest.is_empty() => from = Some(b),
                    _ => break,
                }
            }
            prop_assert!(rest.is_empty());
            let all: Vec<u8> = leaves.concat();
            prop_assert_eq!(all, expected);
        }
    }
}
