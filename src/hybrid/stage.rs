//! hybrid_btree's base structure: the paper's static stage (compact,
//! 100%-full leaves with front-coded keys and posting lists, optionally
//! LZ4), rewritten whole by each merge beside the old one (merge-all).

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::static_stage::{FormatError, InnerView, LeafView};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::cursor::HybridCursor;
use super::{options, static_io};
use crate::engine::base::{BaseCursor, BaseShape, BaseStructure, BuildResult, Entry, EntryRef, MergeResult, VacuumResult};
use crate::engine::meta::{BaseInfo, BaseRoots, IndexMeta};
use crate::engine::stats::fail;
use crate::keys::IndexDesc;
use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

/// hybrid_btree's view of the metapage's base roots: one static stage.
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

pub struct HybridStage;

pub static HYBRID: HybridStage = HybridStage;

/// The shape of a stage written by `static_io::write_stage`.
fn shape_of(res: &pg_hybrid_core::static_stage::BuildResult, gen: u32, compressed: bool) -> BaseShape {
    let stage = Stage { generation: gen, root: res.root, height: res.height, first_leaf: res.first_leaf, last_leaf: res.last_leaf, compressed };
    BaseShape { roots: stage.roots(), keys: res.nkeys, entries: res.ntids, pages: (res.nleaves + res.ninner) as u64, bytes: res.body_bytes }
}

impl BaseStructure for HybridStage {
    fn am_name(&self) -> &'static CStr {
        c"hybrid_btree"
    }

    unsafe fn merge_ratio(&self, index: pg_sys::Relation) -> i32 {
        options::merge_ratio(index)
    }

    fn is_empty(&self, info: &BaseInfo) -> bool {
        Stage::of(info).root == NO_BLOCK
    }

    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        _desc: &Rc<IndexDesc>,
        _meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = EntryRef<'_>>,
        _count: usize,
        gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult {
        let compress = options::compression_lz4(index);
        let mut grouped = Grouped { entries: entries.peekable() };
        let res = static_io::write_stage(index, &mut grouped, gen, compress, progress);
        BuildResult { shape: shape_of(&res, gen, compress), freed: Vec::new() }
    }

    unsafe fn merge(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        fresh: Vec<Entry>,
        mut dead: Option<&mut dyn FnMut(Tid) -> bool>,
        gen: u32,
    ) -> MergeResult {
        let old = Stage::of(&meta.base);
        let compress = options::compression_lz4(index);
        let mut old_iter = if old.root == NO_BLOCK { None } else { Some(static_io::StageIter::new(index, &old)) };
        // Merge as (key, TID) pairs in index order, then group byte-equal
        // neighbours into posting lists: keys that compare equal with
        // different bytes (numeric 1 vs 1.0) stay separate entries, still in
        // TID order.
        let old_pairs = old_iter.as_mut().into_iter().flatten().flat_map(|(k, tids)| {
            let k = Rc::new(k);
            tids.into_iter().map(move |t| (k.clone(), t))
        });
        let old_pairs = old_pairs.filter(|(_, t)| match dead.as_mut() {
            Some(d) => !d(*t),
            None => true,
        });
        let fresh_pairs = fresh.into_iter().map(|e| (Rc::new(e.key), e.tid));
        let merged = Regroup { pairs: MergePairs { a: old_pairs.peekable(), b: fresh_pairs.peekable(), desc }, pending: None };
        // A unique index gets a filter over the new stage's keys, from the
        // same stream.
        let want_hashes = desc.unique && desc.hashable;
        let mut hashes: Vec<u64> = Vec::new();
        let mut stream = merged.inspect(|(k, _)| {
            if want_hashes {
                hashes.extend(desc.key_hash(k));
            }
        });
        let res = static_io::write_stage(index, &mut stream, gen, compress, &mut |_| {});
        drop(stream);
        MergeResult {
            shape: shape_of(&res, gen, compress),
            retired: static_io::stage_blocks(index, &old),
            key_hashes: want_hashes.then_some(hashes),
            key_fetches: 0,
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
        let mut blk = if stage.root == NO_BLOCK { NO_BLOCK } else { stage.first_leaf };
        while blk != NO_BLOCK {
            pg_sys::vacuum_delay_point();
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
                        let mut w = WalRecord::start(index);
                        let p = w.register(&b);
                        page::body_mut(p)[..used].copy_from_slice(&out[..used]);
                        page::set_body_len(p, used);
                        w.finish();
                    }
                }
                Err(FormatError::NoSpace) => {
                    need_merge = true;
                    break;
                }
                Err(e) => page::corrupted(&page::rel_name(index), blk, &format!("{e:?}")),
            }
            blk = page::opaque(b.page()).right;
        }

        VacuumResult { removed, kept, need_merge, shape: None, retired: Vec::new(), key_fetches: 0 }
    }

    unsafe fn cursor(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor> {
        Box::new(HybridCursor::new(index, desc.clone(), Stage::of(info)))
    }

    unsafe fn verify(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, all: Option<&mut HashSet<(Vec<u8>, Tid)>>) -> u64 {
        verify_static(index, desc, &Stage::of(&meta.base), &page::rel_name(index), all)
    }

    /// Static pages of another generation that no recycle list names were
    /// written by a merge that crashed before its switch.
    unsafe fn is_orphan(&self, p: pg_sys::Page, kind: PageKind, meta: &IndexMeta) -> bool {
        matches!(kind, PageKind::StaticLeaf | PageKind::StaticInner) && page::opaque(p).generation != meta.base.generation
    }
}

/// Groups equal keys of a sorted build stream into (key, TIDs).
struct Grouped<'a, 'b> {
    entries: std::iter::Peekable<&'b mut dyn Iterator<Item = EntryRef<'a>>>,
}

impl Iterator for Grouped<'_, '_> {
    type Item = (Vec<u8>, Vec<Tid>);
    fn next(&mut self) -> Option<Self::Item> {
        let first = self.entries.next()?;
        let mut tids = vec![first.tid];
        while let Some(e) = self.entries.next_if(|e| e.key == first.key) {
            tids.push(e.tid);
        }
        Some((first.key.to_vec(), tids))
    }
}

/// Walks leaves and inner levels; returns the number of TIDs.
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
    let mut prev: Option<(Vec<u8>, Tid)> = None;
    let mut blk = stage.first_leaf;
    let mut left = NO_BLOCK;
    let mut ntids = 0u64;
    let mut last = NO_BLOCK;
    while blk != NO_BLOCK {
        {
            let b = Buf::read(rel, blk, Lock::Share);
            let body = static_io::leaf_body(rel, blk, b.page());
            let v = LeafView::parse(&body).unwrap_or_else(|e| fail(name, format!("leaf {blk}: {e:?}")));
            v.verify(|a, b| desc.compare(a, b)).unwrap_or_else(|e| fail(name, format!("leaf {blk}: {e:?}")));
        }
        let leaf = static_io::load_leaf(rel, blk, stage);
        if leaf.left != left {
            fail(name, format!("leaf {blk} has left link {} instead of {left}", leaf.left));
        }
        for (k, tids) in &leaf.decode_all() {
            if desc.schema.split(k).is_err() {
                fail(name, format!("leaf {blk} holds a malformed key"));
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
        left = blk;
        last = blk;
        blk = leaf.right;
    }
    if last != stage.last_leaf {
        fail(name, format!("last leaf is {last}, metapage says {}", stage.last_leaf));
    }
    // Inner pages: each separator must not exceed its child's first key.
    let mut level_blk = stage.root;
    loop {
        let b = Buf::read(rel, level_blk, Lock::Share);
        if page::opaque(b.page()).kind == PageKind::StaticLeaf as u8 {
            break;
        }
        drop(b);
        let mut blk = level_blk;
        let mut first_child = NO_BLOCK;
        while blk != NO_BLOCK {
            let b = Buf::read(rel, blk, Lock::Share);
            page::check_page(rel, blk, b.page(), &[PageKind::StaticInner]);
            let view = InnerView::parse(page::body(b.page())).unwrap_or_else(|e| fail(name, format!("inner page {blk}: {e:?}")));
            for i in 0..view.nchildren() {
                let child = view.child(i);
                if first_child == NO_BLOCK {
                    first_child = child;
                }
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
                    if i > 0 && desc.compare(&sep, &f) == Ordering::Greater {
                        fail(name, format!("separator {i} of inner page {blk} exceeds the first key of child {child}"));
                    }
                }
            }
            blk = page::opaque(b.page()).right;
        }
        level_blk = first_child;
    }
    ntids
}

type Pair = (std::rc::Rc<Vec<u8>>, Tid);

/// Two sorted (key, TID) streams merged in index order.
struct MergePairs<'a, A: Iterator<Item = Pair>, B: Iterator<Item = Pair>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
    desc: &'a crate::keys::IndexDesc,
}

impl<A: Iterator<Item = Pair>, B: Iterator<Item = Pair>> Iterator for MergePairs<'_, A, B> {
    type Item = Pair;
    fn next(&mut self) -> Option<Pair> {
        let take_a = match (self.a.peek(), self.b.peek()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((ka, ta)), Some((kb, tb))) => {
                self.desc.compare(ka, kb).then(ta.cmp(tb)) != std::cmp::Ordering::Greater
            }
        };
        if take_a {
            self.a.next()
        } else {
            self.b.next()
        }
    }
}

/// Consecutive pairs with byte-equal keys become one posting list.
struct Regroup<I: Iterator<Item = Pair>> {
    pairs: I,
    pending: Option<Pair>,
}

impl<I: Iterator<Item = Pair>> Iterator for Regroup<I> {
    type Item = (Vec<u8>, Vec<Tid>);
    fn next(&mut self) -> Option<Self::Item> {
        let (key, t) = self.pending.take().or_else(|| self.pairs.next())?;
        let mut tids = vec![t];
        for (k, t) in self.pairs.by_ref() {
            if *k == *key {
                if tids.last() != Some(&t) {
                    tids.push(t);
                }
            } else {
                self.pending = Some((k, t));
                break;
            }
        }
        Some((std::rc::Rc::try_unwrap(key).unwrap_or_else(|k| (*k).clone()), tids))
    }
}
