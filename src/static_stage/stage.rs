//! The static stage as a base structure of the engine (hybrid-index
//! paper's compact, 100%-full leaves with front-coded keys and posting
//! lists, optionally LZ4), rewritten by each merge one key-range segment at
//! a time (README.md). An access method serves it through a `StaticStage`
//! that names the AM and reads its reloptions; hybrid_btree is exactly
//! that, and an AM that pairs the tree with a structure of its own calls
//! these methods from its own `BaseStructure`.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::static_stage::{fresh_in_segment, leaf_takes_fresh, plan_runs, plan_segment, FormatError, InnerView, LastLeaf, LeafView, MergedGroups, OldRead, Run, SegmentInput};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::cursor::StaticCursor;
use super::static_io;
use crate::engine::base::{BaseCursor, BaseShape, BaseStructure, BuildResult, Entry, HotTierSettings, MergeResult, MergeStep, Prune, VacuumResult};
use crate::engine::meta::{self, BaseInfo, BaseRoots, IndexMeta};
use crate::engine::stats::fail;
use crate::keys::IndexDesc;
use crate::storage::buffer::{Buf, Lock, ReadAhead};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

/// The static stage's view of the metapage's base roots.
#[derive(Clone, Copy, Debug)]
pub struct Stage {
    /// Generation written into every page of the stage.
    pub generation: u32,
    pub root: u32,
    pub height: u32,
    pub first_leaf: u32,
    pub last_leaf: u32,
    /// Leaves are LZ4-compressed.
    pub compressed: bool,
}

impl Stage {
    pub fn of(info: &BaseInfo) -> Stage {
        let w = info.roots.words;
        Stage { generation: info.generation, root: w[0], height: w[1], first_leaf: w[2], last_leaf: w[3], compressed: w[4] != 0 }
    }

    fn roots(&self) -> BaseRoots {
        BaseRoots { words: [self.root, self.height, self.first_leaf, self.last_leaf, self.compressed as u32] }
    }
}

/// What the stage needs to know of its index's reloptions.
#[derive(Clone, Copy, Debug)]
pub struct StageSettings {
    /// Merge when the delta log holds the stage's bytes / merge_ratio.
    pub merge_ratio: i32,
    /// Write LZ4 leaves.
    pub compress: bool,
}

/// The static stage served to the engine as the base structure of `am`.
pub struct StaticStage {
    /// pg_am.amname of the access method.
    pub am: &'static CStr,
    /// The index's settings, from its reloptions.
    pub settings: unsafe fn(pg_sys::Relation) -> StageSettings,
    /// A tiered index's hot tier in front of the stage (the stage is then
    /// its cold tier), from its reloptions; None for a dual-stage AM, which
    /// then pays nothing for the question on its scans and inserts.
    pub hot_tier: Option<unsafe fn(pg_sys::Relation) -> HotTierSettings>,
}

/// The shape of a stage written by `static_io::write_stage`.
fn shape_of(res: &pg_hybrid_core::static_stage::BuildResult, gen: u32, compressed: bool) -> BaseShape {
    let stage = Stage { generation: gen, root: res.root, height: res.height, first_leaf: res.first_leaf, last_leaf: res.last_leaf, compressed };
    BaseShape { roots: stage.roots(), keys: res.nkeys, entries: res.ntids, pages: (res.nleaves + res.ninner) as u64, bytes: res.body_bytes }
}

impl BaseStructure for StaticStage {
    fn am_name(&self) -> &'static CStr {
        self.am
    }

    unsafe fn merge_ratio(&self, index: pg_sys::Relation) -> i32 {
        (self.settings)(index).merge_ratio
    }

    unsafe fn hot_tier(&self, index: pg_sys::Relation) -> Option<HotTierSettings> {
        self.hot_tier.map(|f| f(index))
    }

    fn is_empty(&self, info: &BaseInfo) -> bool {
        Stage::of(info).root == NO_BLOCK
    }

    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        _desc: &Rc<IndexDesc>,
        _meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = Entry>,
        _count: usize,
        gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult {
        let compress = (self.settings)(index).compress;
        let mut grouped = Grouped { entries: entries.peekable() };
        let res = static_io::write_stage(index, &mut grouped, gen, compress, progress);
        BuildResult { shape: shape_of(&res, gen, compress), freed: Vec::new() }
    }

    /// One segment per step (module `core::static_stage::segment`): the
    /// leaves the smallest fresh key falls into and their neighbours up to
    /// a segment's length are rewritten with the fresh entries of their key
    /// range; every other leaf stays; the inner levels are written anew
    /// over the result. An empty or one-leaf stage, a change of leaf format
    /// and VACUUM's merge (`prune.everywhere`) walk every leaf; hinted dead
    /// TIDs leave only the leaves a step rewrites.
    unsafe fn merge(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        step: MergeStep<'_>,
        prune: Option<Prune<'_>>,
        gen: u32,
    ) -> MergeResult {
        let everywhere = prune.as_ref().is_some_and(|p| p.everywhere);
        let mut dead: Option<&mut dyn FnMut(Tid) -> bool> = prune.map(|p| p.dead);
        let old = Stage::of(&meta.base);
        let compress = (self.settings)(index).compress;
        let want_hashes = step.key_hashes && desc.unique && desc.hashable;
        let mut hashes: Vec<u64> = Vec::new();
        let mut cmp = |a: &[u8], b: &[u8]| desc.compare(a, b);

        if old.root == NO_BLOCK || old.height == 1 {
            // Nothing worth segmenting: one step writes the whole stage.
            let map = static_io::stage_map(index, &old);
            let old_leaves: Vec<u32> = map.leaves.iter().map(|l| l.blk).collect();
            let counts = Counts { record_dropped: !everywhere, ..Counts::default() };
            let mut stream = merged_stream(index, &old, old_leaves, step.fresh, dead.as_deref_mut(), desc, &counts).inspect(|(k, _)| {
                if want_hashes {
                    hashes.extend(desc.key_hash(k));
                }
            });
            let res = static_io::write_stage(index, &mut stream, gen, compress, &mut |_| {});
            drop(stream);
            return MergeResult {
                shape: shape_of(&res, gen, compress),
                retired: map.blocks(),
                key_hashes: want_hashes.then_some(hashes),
                key_fetches: 0,
                consumed: step.fresh.len(),
                next: None,
                dropped: counts.dropped.take(),
            };
        }

        let map = static_io::stage_map(index, &old);
        let seps: Vec<&[u8]> = map.leaves.iter().map(|l| &l.sep[..]).collect();
        let n = seps.len();
        let start = step.from.map(|b| seps.partition_point(|s| cmp(s, b) == Ordering::Less)).unwrap_or(0);
        let rewrite_all = everywhere || compress != old.compressed;
        // A step rewrites only the leaves fresh keys fall into (runs) while
        // the stage's leaves are full enough; below that, or to change the
        // format, it repacks its whole segment full (compaction).
        let by_runs = !rewrite_all && !compress && fill_of(&meta.base) >= REPACK_BELOW_FILL;
        let segment_leaves = (n / SEGMENTS_PER_STAGE).max(MIN_SEGMENT_LEAVES);
        let input = SegmentInput {
            seps: &seps,
            start,
            first_fresh: step.fresh.first().map(|e| &e.key[..]),
            rewrite_all,
            // Runs rewrite a part of their segment (a third for a batch of
            // random keys a hundredth of the stage): segments up to 4x longer,
            // so fewer steps rewrite the inner levels, but ending after as
            // many rewritten leaves as a whole segment would have, so a
            // step doubles no more.
            segment_leaves: segment_leaves * if by_runs { RUN_SEGMENT_FACTOR } else { 1 },
            // A step rewrites every inner page and writes the metapage and
            // a recycle list page. Runs skip untouched leaves at no cost.
            step_cost_leaves: if by_runs { 0 } else { map.inner.len() + 2 },
            touched_leaves: if by_runs { segment_leaves } else { 0 },
        };
        let mut last_key = |i: usize| -> Option<Vec<u8>> {
            // The last key of the nearest non-empty leaf at or before i
            // (VACUUM may have emptied some).
            (0..=i).rev().take(64).find_map(|j| static_io::leaf_last_key(index, map.leaves[j].blk, &old))
        };
        let mut takes_fresh = |i: usize| leaf_takes_fresh(&seps, i, step.fresh, |e| &e.key[..], &mut |a, b| desc.compare(a, b));
        let Some(seg) = plan_segment(&input, &mut cmp, &mut last_key, &mut takes_fresh) else {
            // No fresh entries left and no leaf to visit: the step changes
            // nothing but the generation (the engine still switches to it,
            // and checks that nothing was left unmerged).
            let b = &meta.base;
            let shape = BaseShape { roots: Stage { generation: gen, ..old }.roots(), keys: b.keys, entries: b.entries, pages: b.pages, bytes: b.bytes };
            return MergeResult { shape, retired: Vec::new(), key_hashes: None, key_fetches: 0, consumed: 0, next: None, dropped: Vec::new() };
        };
        let consumed = fresh_in_segment(&seps, seg.end, step.fresh, |e| &e.key[..], &mut cmp);
        let fresh = &step.fresh[..consumed];
        let runs = if by_runs {
            plan_runs(&seps, seg, fresh, |e| &e.key[..], &mut cmp, &mut last_key)
        } else {
            vec![Run { leaves: seg, fresh: 0..consumed }]
        };
        let counts = Counts { record_dropped: !everywhere, ..Counts::default() };
        let mut children: Vec<(Vec<u8>, u32)> = Vec::with_capacity(n + runs.len());
        children.extend(map.leaves[..seg.first].iter().map(|l| (l.sep.clone(), l.blk)));
        let mut retired: Vec<u32> = Vec::new();
        let mut written = Written::default();
        let mut kept_from = seg.first;
        // The step's old leaves, in the order it reads them, requested
        // ahead of each read.
        let run_blocks: Vec<u32> = runs.iter().flat_map(|r| map.blocks_of(r.leaves.first..r.leaves.end)).collect();
        let mut ahead = ReadAhead::new(index, &run_blocks);
        for run in &runs {
            children.extend(map.leaves[kept_from..run.leaves.first].iter().map(|l| (l.sep.clone(), l.blk)));
            let blocks = map.blocks_of(run.leaves.first..run.leaves.end);
            let run_fresh = &fresh[run.fresh.clone()];
            written.old_bytes += static_io::body_bytes(index, &blocks, &mut ahead);
            counts.read.fresh_among_old.set(false);
            let mut stream = merged_stream(index, &old, blocks.clone(), run_fresh, dead.as_deref_mut(), desc, &counts).inspect(|(k, _)| {
                if want_hashes {
                    hashes.extend(desc.key_hash(k));
                }
            });
            // Fresh keys after every old key of the run (ascending loads)
            // leave its last leaf for the next appends to fill; fresh keys
            // among old ones split the last two leaves evenly.
            let last = || if by_runs && counts.read.fresh_among_old.get() { LastLeaf::Balanced } else { LastLeaf::Packed };
            let level = static_io::write_leaves(index, &mut stream, gen, compress, &last);
            drop(stream);
            written.nkeys += level.nkeys;
            written.ntids += level.ntids;
            written.body_bytes += level.body_bytes;
            written.leaves += level.leaves.len() as u64;
            written.old_leaves += blocks.len() as u64;
            children.extend(level.leaves);
            retired.extend(blocks);
            kept_from = run.leaves.end;
        }
        children.extend(map.leaves[kept_from..].iter().map(|l| (l.sep.clone(), l.blk)));
        let rest_consumed = consumed == step.fresh.len();
        let next = (seg.end < n && (rewrite_all || !rest_consumed)).then(|| seps[seg.end].to_vec());
        if children.is_empty() {
            // Every entry died: the stage becomes one empty leaf.
            let res = static_io::write_stage(index, &mut std::iter::empty(), gen, compress, &mut |_| {});
            retired = map.blocks();
            return MergeResult { shape: shape_of(&res, gen, compress), retired, key_hashes: None, key_fetches: 0, consumed, next: None, dropped: counts.dropped.take() };
        }
        let (first_leaf, last_leaf) = (children[0].1, children.last().unwrap().1);
        let inner = static_io::write_inner(index, children, gen);
        let stage = Stage { generation: gen, root: inner.root, height: inner.height, first_leaf, last_leaf, compressed: compress };
        let b = &meta.base;
        let shape = BaseShape {
            roots: stage.roots(),
            keys: (b.keys + written.nkeys).saturating_sub(counts.read.lists.get()),
            entries: (b.entries + written.ntids).saturating_sub(counts.read.tids.get()),
            pages: (b.pages + written.leaves + inner.ninner).saturating_sub(written.old_leaves + map.inner.len() as u64),
            bytes: (b.bytes + written.body_bytes + inner.body_bytes).saturating_sub(written.old_bytes + map.inner_bytes),
        };
        retired.extend_from_slice(&map.inner);
        // Keys of the segment only: complete for the stage when the steps
        // together cover every leaf (runs that skipped a leaf do not).
        let whole_segment = runs.len() == 1 && runs[0].leaves == seg;
        let covered = whole_segment && seg.first == start && (seg.end == n || next.is_some());
        MergeResult {
            shape,
            retired,
            key_hashes: (want_hashes && covered).then_some(hashes),
            key_fetches: 0,
            consumed,
            next,
            dropped: counts.dropped.take(),
        }
    }

    /// Static leaves are rewritten in place without their dead TIDs. An LZ4
    /// leaf can fail to recompress into its page; then a merge that drops
    /// dead TIDs rewrites the stage instead.
    unsafe fn bulk_delete(&self, index: pg_sys::Relation, _desc: &Rc<IndexDesc>, meta: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> VacuumResult {
        let stage = Stage::of(&meta.base);
        let mut removed = 0u64;
        let mut kept = 0u64;
        let mut need_merge = false;
        let leaves: Vec<u32> = static_io::stage_map(index, &stage).leaves.iter().map(|l| l.blk).collect();
        let mut ahead = ReadAhead::new(index, &leaves);
        for &blk in &leaves {
            pg_sys::vacuum_delay_point();
            ahead.next();
            let b = Buf::read(index, blk, Lock::Cleanup);
            page::check_page(index, blk, b.page(), &[PageKind::StaticLeaf]);
            let body = page::body(b.page());
            let ntids = static_io::leaf_ntids(index, blk, body);
            let mut out = vec![0u8; BODY_CAP];
            match pg_hybrid_core::static_stage::rewrite_leaf_without(body, &mut *dead, &mut out) {
                Ok((used, dropped)) => {
                    kept += ntids as u64 - dropped as u64;
                    if dropped > 0 {
                        removed += dropped as u64;
                        // The metapage's entry count in the same WAL record,
                        // so a VACUUM cut short (or a crash) leaves it exact.
                        // Leaf, then metapage: no one holds the metapage while
                        // waiting for a static leaf.
                        let metab = Buf::read(index, meta::META_BLOCK, Lock::Exclusive);
                        let mut mm = meta::load(index, &metab);
                        mm.base.entries = mm.base.entries.saturating_sub(dropped as u64);
                        let mut w = WalRecord::start(index);
                        let p = w.register(&b);
                        page::body_mut(p)[..used].copy_from_slice(&out[..used]);
                        page::set_body_len(p, used);
                        meta::store(w.register(&metab), &mm);
                        w.finish();
                    }
                }
                Err(FormatError::NoSpace) => {
                    need_merge = true;
                    break;
                }
                Err(e) => page::corrupted(&page::rel_name(index), blk, &format!("{e:?}")),
            }
        }

        VacuumResult { removed, kept, need_merge, shape: None, retired: Vec::new(), key_fetches: 0 }
    }

    unsafe fn cursor(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor> {
        Box::new(StaticCursor::new(index, desc.clone(), Stage::of(info)))
    }

    unsafe fn verify(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, all: Option<&mut HashSet<(Vec<u8>, Tid)>>) -> u64 {
        verify_static(index, desc, &Stage::of(&meta.base), &page::rel_name(index), all)
    }

    /// Static pages that neither the stage nor a recycle list holds were
    /// written by a merge step that crashed before its switch (a stage
    /// holds pages of many generations, so only reachability tells).
    unsafe fn orphan_test<'a>(&'a self, index: pg_sys::Relation, meta: &'a IndexMeta) -> Box<dyn FnMut(u32, pg_sys::Page, PageKind) -> bool + 'a> {
        let live: HashSet<u32> = static_io::stage_blocks(index, &Stage::of(&meta.base)).into_iter().collect();
        Box::new(move |blk, _p, kind| matches!(kind, PageKind::StaticLeaf | PageKind::StaticInner) && !live.contains(&blk))
    }
}

/// Below this fill of its pages (body bytes over page capacity), a stage's
/// next merge repacks every segment it touches full instead of rewriting
/// only the leaves fresh keys fall into. Runs split leaves as a B+tree does
/// (random keys settle near 70%), so this bounds what they cost in space;
/// a batch that touches every leaf repacks anyway.
const REPACK_BELOW_FILL: f64 = 0.6;

/// Body bytes over the capacity of the pages of a stage (1 when empty).
fn fill_of(base: &BaseInfo) -> f64 {
    if base.pages == 0 {
        return 1.0;
    }
    base.bytes as f64 / (base.pages as f64 * BODY_CAP as f64)
}

/// What a step's runs wrote, and what the leaves they replaced held.
#[derive(Default)]
struct Written {
    leaves: u64,
    nkeys: u64,
    ntids: u64,
    body_bytes: u64,
    old_leaves: u64,
    old_bytes: u64,
}

/// A stage is merged in about this many steps (segments)...
const SEGMENTS_PER_STAGE: usize = 32;
/// ...of at least this many leaves (512 KB of plain leaves): fewer, larger
/// steps for small stages, since each step rewrites the inner levels.
const MIN_SEGMENT_LEAVES: usize = 64;
/// Segments of a step that rewrites runs span up to this many times more
/// leaves.
const RUN_SEGMENT_FACTOR: usize = 4;

/// What a merge step read from the old leaves of its segment, and what a
/// hinted prune dropped from it (`MergeResult::dropped`).
#[derive(Default)]
struct Counts {
    read: OldRead,
    /// Set for a hinted prune: VACUUM's may drop millions, and reaches the
    /// other parts of a structure by itself.
    record_dropped: bool,
    dropped: RefCell<Vec<Entry>>,
}

/// The entries of the old `leaves` (without TIDs `dead` accepts) merged
/// with `fresh`, as (key, TIDs) in index order: byte-equal neighbours
/// grouped into posting lists; keys that compare equal with different bytes
/// (numeric 1 vs 1.0) stay separate entries, still in TID order
/// (`pg_hybrid_core::static_stage::merge`); `counts.read` follows what
/// it reads from the old leaves.
fn merged_stream<'a, 'd: 'a>(
    index: pg_sys::Relation,
    old: &Stage,
    leaves: Vec<u32>,
    fresh: &'a [Entry],
    mut dead: Option<&'a mut (dyn FnMut(Tid) -> bool + 'd)>,
    desc: &'a IndexDesc,
    counts: &'a Counts,
) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<Tid>)> + 'a> {
    let old_lists = unsafe { static_io::StageIter::new(index, old, leaves) };
    // Dead TIDs leave the batch too: the batch is the delta log, which
    // keeps every version a key went through since the last merge (the
    // dynamic stage drops dead versions from its tree only).
    let gone = move |k: &[u8], t: Tid| match dead.as_mut() {
        Some(d) => {
            let gone = d(t);
            if gone && counts.record_dropped {
                counts.dropped.borrow_mut().push(Entry { key: k.to_vec(), tid: t });
            }
            gone
        }
        None => false,
    };
    let cmp = move |a: &[u8], b: &[u8]| desc.compare(a, b);
    Box::new(MergedGroups::new(old_lists, fresh, |e: &Entry| &e.key[..], |e: &Entry| e.tid, cmp, gone, &counts.read))
}

/// Groups equal keys of a sorted build stream into (key, TIDs).
struct Grouped<'b> {
    entries: std::iter::Peekable<&'b mut dyn Iterator<Item = Entry>>,
}

impl Iterator for Grouped<'_> {
    type Item = (Vec<u8>, Vec<Tid>);
    fn next(&mut self) -> Option<Self::Item> {
        let first = self.entries.next()?;
        let mut tids = vec![first.tid];
        while let Some(e) = self.entries.next_if(|e| e.key == first.key) {
            tids.push(e.tid);
        }
        Some((first.key, tids))
    }
}

/// Walks the inner levels and the leaves; returns the number of TIDs.
unsafe fn verify_static(
    rel: pg_sys::Relation,
    desc: &IndexDesc,
    stage: &Stage,
    name: &str,
    mut all: Option<&mut HashSet<(Vec<u8>, Tid)>>,
) -> u64 {
    if stage.root == NO_BLOCK {
        return 0;
    }
    let map = static_io::stage_map(rel, stage);
    let mut prev: Option<(Vec<u8>, Tid)> = None;
    let mut ntids = 0u64;
    let leaf_blocks: Vec<u32> = map.leaves.iter().map(|l| l.blk).collect();
    let mut ahead = ReadAhead::new(rel, &leaf_blocks);
    for (i, l) in map.leaves.iter().enumerate() {
        let blk = l.blk;
        ahead.next();
        {
            let b = Buf::read(rel, blk, Lock::Share);
            let body = static_io::leaf_body(rel, blk, b.page());
            let v = LeafView::parse(&body).unwrap_or_else(|e| fail(name, format!("leaf {blk}: {e:?}")));
            v.verify(|a, b| desc.compare(a, b)).unwrap_or_else(|e| fail(name, format!("leaf {blk}: {e:?}")));
        }
        let leaf = static_io::load_leaf(rel, blk, stage);
        for (j, (k, tids)) in leaf.decode_all().iter().enumerate() {
            if desc.schema.split(k).is_err() {
                fail(name, format!("leaf {blk} holds a malformed key"));
            }
            // Search relies on it: no entry below its leaf's separator
            // (the first leaf's is never compared).
            if j == 0 && i > 0 && desc.compare(k, &l.sep) == Ordering::Less {
                fail(name, format!("leaf {blk} holds a key below its separator"));
            }
            for &t in tids {
                if let Some((pk, pt)) = &prev {
                    if desc.compare(pk, k).then(pt.cmp(&t)) != Ordering::Less {
                        fail(name, format!("static stage out of order at leaf {blk}"));
                    }
                }
                prev = Some((k.clone(), t));
                ntids += 1;
                if let Some(a) = all.as_deref_mut() {
                    a.insert((desc.keycols(k).to_vec(), t));
                }
            }
        }
    }
    if map.leaves.first().map(|l| l.blk) != Some(stage.first_leaf) || map.leaves.last().map(|l| l.blk) != Some(stage.last_leaf) {
        fail(name, format!("first and last leaves are not {} and {} as the metapage says", stage.first_leaf, stage.last_leaf));
    }
    // Inner pages: separators in order, each no greater than the first key
    // of the child's subtree.
    for &blk in &map.inner {
        let b = Buf::read(rel, blk, Lock::Share);
        let view = InnerView::parse(page::body(b.page())).unwrap_or_else(|e| fail(name, format!("inner page {blk}: {e:?}")));
        view.verify(|a, b| desc.compare(a, b)).unwrap_or_else(|e| fail(name, format!("inner page {blk}: {e:?}")));
        for i in 1..view.nchildren() {
            let child = view.child(i);
            let sep = view.sep(i).unwrap_or_else(|e| fail(name, format!("inner page {blk}: {e:?}")));
            let cb = Buf::read(rel, child, Lock::Share);
            let cp = cb.page();
            let first: Option<Vec<u8>> = if page::opaque(cp).kind == PageKind::StaticLeaf as u8 {
                let body = static_io::leaf_body(rel, child, cp);
                let v = LeafView::parse(&body).unwrap_or_else(|e| fail(name, format!("leaf {child}: {e:?}")));
                if v.nkeys() > 0 { Some(v.entry(0).unwrap_or_else(|e| fail(name, format!("leaf {child}: {e:?}"))).0) } else { None }
            } else {
                let v = InnerView::parse(page::body(cp)).unwrap_or_else(|e| fail(name, format!("inner {child}: {e:?}")));
                Some(v.sep(0).unwrap_or_else(|e| fail(name, format!("inner {child}: {e:?}"))))
            };
            if let Some(f) = first {
                if desc.compare(&sep, &f) == Ordering::Greater {
                    fail(name, format!("separator {i} of inner page {blk} exceeds the first key of child {child}"));
                }
            }
        }
    }
    ntids
}

