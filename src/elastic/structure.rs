//! elastic_btree's base structure for the engine: the elastic tree, merged
//! into in place, its deleted leaves recycled through the engine.

use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::scan::ElasticCursor;
use super::tree::{self, WriteOutcome};
use super::{options, check_keys};
use crate::engine::base::{BaseCursor, BaseShape, BaseStats, BaseStructure, BuildResult, Dir, Entry, MergeResult, MergeStep, Prune, ScanRange, VacuumResult};
use crate::engine::meta::{BaseInfo, BaseRoots, IndexMeta};
use crate::keys::IndexDesc;
use crate::storage::page::{self, PageKind, NO_BLOCK};

/// elastic_btree's view of the metapage's base roots.
#[derive(Clone, Copy, Debug)]
pub struct TreeRoots {
    /// The tree's own metapage (NO_BLOCK: no tree yet).
    pub tree_meta: u32,
    /// Height and root as of the last merge or VACUUM, where readers start
    /// (a root that has split since still works: descents move right).
    pub height: u32,
    pub root: u32,
}

impl TreeRoots {
    pub fn of(info: &BaseInfo) -> TreeRoots {
        let w = info.roots.words;
        TreeRoots { tree_meta: w[0], height: w[1], root: w[2] }
    }

    fn roots(&self) -> BaseRoots {
        BaseRoots { words: [self.tree_meta, self.height, self.root, NO_BLOCK, 0] }
    }
}

pub struct ElasticBase;

pub static ELASTIC: ElasticBase = ElasticBase;

fn shape_of(out: &WriteOutcome) -> BaseShape {
    let roots = TreeRoots { tree_meta: out.meta_blk, height: out.stats.height as u32, root: out.root };
    BaseShape { roots: roots.roots(), keys: out.entries, entries: out.entries, pages: out.tree_pages, bytes: 0 }
}

impl BaseStructure for ElasticBase {
    fn am_name(&self) -> &'static CStr {
        c"elastic_btree"
    }

    /// The batch goes into the leaves in place: no leaf is rewritten to
    /// drop hinted TIDs, VACUUM removes them.
    fn prunes_on_merge(&self) -> bool {
        false
    }

    unsafe fn check_definition(&self, index: pg_sys::Relation, desc: &IndexDesc) {
        check_keys(index, desc);
    }

    unsafe fn merge_ratio(&self, index: pg_sys::Relation) -> i32 {
        options::merge_ratio(index)
    }

    /// The delta log counts against the size bound (it is part of the
    /// relation), and pages it held stay in the file: merge before the log
    /// passes 2% of the bound, but not more often than every
    /// `pg_hybrid.merge_min_entries` inserts.
    unsafe fn delta_cap(&self, index: pg_sys::Relation, key_len: usize) -> Option<u64> {
        let bound = options::size_bound(index)?;
        Some((bound / 50 / (key_len as u64 + 12)).max(crate::guc::MERGE_MIN_ENTRIES.get() as u64))
    }

    fn is_empty(&self, info: &BaseInfo) -> bool {
        TreeRoots::of(info).tree_meta == NO_BLOCK
    }

    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = Entry>,
        count: usize,
        _gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult {
        let out = tree::apply_batch(index, desc, meta, &mut entries.map(|e| (e.key, e.tid)), true, &mut |n| progress(n.min(count) as u64));
        BuildResult { shape: shape_of(&out), freed: out.deleted }
    }

    unsafe fn merge(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        step: MergeStep<'_>,
        prune: Option<Prune<'_>>,
        _gen: u32,
    ) -> MergeResult {
        // The tree takes the batch in place, in one step.
        let out = tree::apply_batch(index, desc, meta, &mut step.fresh.iter().map(|e| (e.key.clone(), e.tid)), false, &mut |_| {});
        let mut res = MergeResult {
            shape: shape_of(&out),
            retired: out.deleted,
            key_hashes: None,
            key_fetches: out.key_fetches,
            consumed: step.fresh.len(),
            next: None,
            dropped: Vec::new(),
        };
        // Hinted TIDs (not `everywhere`) never come: `prunes_on_merge`.
        if let Some(Prune { dead, everywhere: true }) = prune {
            // The engine asks for this only after a VACUUM that could not
            // drop dead TIDs in place, which the tree always can; honoured
            // all the same.
            let mut after = *meta;
            after.base.set_shape(&res.shape);
            let (_, out) = tree::bulk_delete(index, desc, &after, dead);
            res.shape = shape_of(&out);
            res.retired.extend(out.deleted);
            res.key_fetches += out.key_fetches;
        }
        res
    }

    unsafe fn bulk_delete(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> VacuumResult {
        // The tree: dead TIDs out, underfull leaves merged, compact leaves
        // reverted while the index is under its expand threshold.
        let (removed, out) = tree::bulk_delete(index, desc, meta, dead);
        VacuumResult {
            removed: removed.max(meta.base.entries.saturating_sub(out.entries)),
            kept: out.entries,
            need_merge: false,
            shape: Some(shape_of(&out)),
            retired: out.deleted,
            key_fetches: out.key_fetches,
        }
    }

    /// A bound changed by ALTER INDEX (or a size that fell) takes effect:
    /// the state is re-evaluated and leaves are reverted.
    unsafe fn vacuum_cleanup(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta) -> Option<VacuumResult> {
        if self.is_empty(&meta.base) {
            return None;
        }
        let out = tree::settle(index, desc, meta);
        Some(VacuumResult { removed: 0, kept: out.entries, need_merge: false, shape: Some(shape_of(&out)), retired: out.deleted, key_fetches: out.key_fetches })
    }

    unsafe fn cursor(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor> {
        Box::new(ElasticCursor::new(index, desc.clone(), &TreeRoots::of(info)))
    }

    /// Compact leaves hold no keys: an index-only scan would read the heap
    /// for every entry to learn its key. An index with a size bound (one
    /// that makes compact leaves) is planned through the heap instead;
    /// decided from the reloptions, so planning reads no page.
    unsafe fn can_return(&self, index: pg_sys::Relation, desc: &IndexDesc, attno: i32) -> bool {
        options::size_bound(index).is_none() && attno >= 1 && (attno as usize) <= desc.natts && desc.cols[attno as usize - 1].returnable
    }

    /// Both leaf forms, keys of compact leaves read from the heap.
    unsafe fn verify(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, all: Option<&mut HashSet<(Vec<u8>, Tid)>>) -> u64 {
        tree::verify(index, desc, meta);
        if let Some(all) = all {
            let mut c = ElasticCursor::new(index, desc.clone(), &TreeRoots::of(&meta.base));
            c.start(Dir::Fwd, &ScanRange { lower: &[], upper: None, whole_key: false, strict: (false, false), point: false });
            while let Some((k, t)) = c.peek(Dir::Fwd) {
                all.insert((desc.keycols(k).to_vec(), t));
                c.advance(Dir::Fwd);
            }
        }
        meta.base.entries
    }

    unsafe fn stats(&self, index: pg_sys::Relation, meta: &IndexMeta) -> BaseStats {
        let (sl, cl, state) = match tree::stats(index, meta) {
            Some((s, state, _)) => (s.standard_leaves as i64, s.compact_leaves as i64, state.name().to_string()),
            None => (0, 0, "normal".to_string()),
        };
        BaseStats {
            fetches_keys: true,
            standard_leaves: Some(sl),
            compact_leaves: Some(cl),
            state: Some(state),
            size_bound: options::size_bound(index).map(|b| b as i64),
            ..BaseStats::default()
        }
    }

    /// A leaf deleted by an operation that failed before listing it, once
    /// no snapshot can still follow a link to it.
    unsafe fn orphan_test<'a>(&'a self, _index: pg_sys::Relation, _meta: &'a IndexMeta) -> Box<dyn FnMut(u32, pg_sys::Page, PageKind) -> bool + 'a> {
        Box::new(|_blk, p, kind| unsafe {
            kind == PageKind::ElasticDeleted
                && pg_sys::GlobalVisCheckRemovableFullXid(std::ptr::null_mut(), pg_sys::FullTransactionId { value: page::opaque(p).first_pos })
        })
    }

    /// Standby queries that read a leaf before it was merged away may still
    /// follow links to it.
    fn retired_pages_linked(&self) -> bool {
        true
    }
}
