//! Merge-all (paper §5): the whole dynamic stage and the old static stage
//! are merged into a new static stage written beside the old one; the
//! metapage switches to it in one WAL record, and the old stage's pages are
//! recycled once no snapshot can still be reading them.

use std::time::Instant;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::meta::{self, MaintenanceLock, StaticInfo};
use super::state::{expected_dynamic, KeyFilter};
use super::{delta, options, static_io};
use crate::keys::index_desc;
use crate::shmem::{self, ArenaPool, SlotRef};
use crate::storage::alloc::{alloc_page, free_pages};
use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Manual,
    Ratio,
    ArenaFull,
    Vacuum,
}

pub struct MergeOutcome {
    pub merged_entries: u64,
    pub static_entries: u64,
    pub millis: f64,
}

/// Runs one merge of `index` in this process. Waits for a merge or VACUUM
/// already running on the index.
pub unsafe fn merge_index(index: pg_sys::Relation, reason: Reason) -> MergeOutcome {
    crate::require_preload();
    if pg_sys::RecoveryInProgress() {
        crate::raise(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot merge a hybrid_btree index during recovery",
            "Merges run on the primary and reach standbys through WAL.",
        );
    }
    let _ml = MaintenanceLock::exclusive(index);
    merge_locked(index, reason, None)
}

/// The merge proper; the caller holds the maintenance lock exclusively.
/// `dead` (VACUUM's callback) drops TIDs from the old static stage on the way.
pub unsafe fn merge_locked(
    index: pg_sys::Relation,
    _reason: Reason,
    mut dead: Option<&mut dyn FnMut(Tid) -> bool>,
) -> MergeOutcome {
    let start = Instant::now();
    let desc = index_desc(index);
    let slot = shmem::slot_for(index);
    {
        let _g = slot.exclusive();
        slot.get().dual.merge_running = true;
    }
    struct Running(SlotRef);
    impl Drop for Running {
        fn drop(&mut self) {
            // Also on ERROR: flags are plain stores, no lock needed for them.
            let st = &mut self.0.get().dual;
            st.merge_running = false;
            st.merge_requested = false;
        }
    }
    let _running = Running(slot);

    recycle_if_safe(index);
    let m = meta::read(index);
    let (cutoff, cutoff_blk) = delta::end_pos(index, m.delta_tail);
    let (recs, _, _) = delta::read_from(index, m.delta_head, m.stat.merged_upto, cutoff);
    let mut fresh: Vec<(Vec<u8>, Tid)> = recs.into_iter().map(|r| (r.key, r.tid)).collect();
    fresh.sort_unstable_by(|a, b| desc.compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
    fresh.dedup();
    let merged_entries = fresh.len() as u64;
    // Nothing to move and no dead TIDs to drop: the stage on disk is what a
    // merge would write again (a rewrite would only double the file).
    if merged_entries == 0 && dead.is_none() {
        return MergeOutcome { merged_entries, static_entries: m.stat.tids, millis: 0.0 };
    }

    if crate::elastic::is_elastic(index) {
        return merge_elastic(index, &desc, slot, &m, fresh, cutoff, start);
    }
    let gen = m.next_generation;
    meta::update(index, |mm| mm.next_generation = gen + 1);

    let compress = options::compression_lz4(index);
    let mut old_iter = if m.stat.root == NO_BLOCK { None } else { Some(static_io::StageIter::new(index, &m.stat)) };
    // Merge as (key, TID) pairs in index order, then group byte-equal
    // neighbours into posting lists: keys that compare equal with different
    // bytes (numeric 1 vs 1.0) stay separate entries, still in TID order.
    let old_pairs = old_iter.as_mut().into_iter().flatten().flat_map(|(k, tids)| {
        let k = std::rc::Rc::new(k);
        tids.into_iter().map(move |t| (k.clone(), t))
    });
    let old_pairs = old_pairs.filter(|(_, t)| match dead.as_mut() {
        Some(d) => !d(*t),
        None => true,
    });
    let fresh_pairs = fresh.into_iter().map(|(k, t)| (std::rc::Rc::new(k), t));
    let merged = Regroup {
        pairs: MergePairs { a: old_pairs.peekable(), b: fresh_pairs.peekable(), desc: &desc },
        pending: None,
    };
    // A unique index gets a filter over the new stage's keys, from the
    // same stream.
    let want_filter = desc.unique && desc.hashable;
    let mut hashes: Vec<u64> = Vec::new();
    let mut stream = merged.inspect(|(k, _)| {
        if want_filter {
            hashes.extend(desc.key_hash(k));
        }
    });
    let res = static_io::write_stage(index, &mut stream, gen, compress, &mut |_| {});
    drop(stream);
    let key_filter = if want_filter { KeyFilter::build(gen, &hashes) } else { None };
    drop(hashes);

    // Everything the new stage replaces: old static pages and fully merged
    // delta pages, listed on recycle pages before the switch.
    let mut retired = static_io::stage_blocks(index, &m.stat);
    let (dead_delta, new_head) = delta::pages_below(index, m.delta_head, cutoff);
    let _ = cutoff_blk;
    let ndead_delta = dead_delta.len() as u32;
    retired.extend(dead_delta);
    let recycle_head = write_recycle_list(index, &retired, m.recycle_head, m.stat.generation);

    let millis = start.elapsed().as_secs_f64() * 1000.0;
    let new_stat = StaticInfo {
        generation: gen,
        root: res.root,
        height: res.height,
        first_leaf: res.first_leaf,
        last_leaf: res.last_leaf,
        compressed: compress as u32,
        keys: res.nkeys,
        tids: res.ntids,
        pages: (res.nleaves + res.ninner) as u64,
        body_bytes: res.body_bytes,
        merged_upto: cutoff,
        vacuum_epoch: m.stat.vacuum_epoch,
    };
    switch(index, &desc, slot, &m, new_stat, new_head, recycle_head, ndead_delta, millis, key_filter, cutoff);
    // With no reader left on the old stage its pages are free right away.
    recycle_if_safe(index);
    MergeOutcome { merged_entries, static_entries: res.ntids, millis }
}

/// The switch of a merge: the metapage (new stage, delta head, recycle
/// list) in one WAL record, then the shared state. Metapage first, so the
/// lock order (buffer, then slot LWLock) matches inserters.
#[allow(clippy::too_many_arguments)]
unsafe fn switch(
    index: pg_sys::Relation,
    desc: &crate::keys::IndexDesc,
    slot: SlotRef,
    m: &meta::HybridMeta,
    new_stat: StaticInfo,
    new_head: u32,
    recycle_head: u32,
    ndead_delta: u32,
    millis: f64,
    key_filter: Option<super::state::PendingKeyFilter>,
    cutoff: u64,
) {
    // The previous newest recycle segment keeps its own horizon from now on,
    // stamped in the same WAL record, so it can be freed before ours.
    let old_head = if recycle_head != m.recycle_head && m.recycle_head != NO_BLOCK {
        Some(Buf::read(index, m.recycle_head, Lock::Exclusive))
    } else {
        None
    };
    let metab = Buf::read(index, meta::META_BLOCK, Lock::Exclusive);
    let mut mm = meta::load(index, &metab);
    mm.stat = new_stat;
    mm.delta_head = new_head;
    let old_safexid = mm.recycle_safexid;
    if recycle_head != mm.recycle_head {
        mm.recycle_head = recycle_head;
        mm.recycle_safexid = pg_sys::ReadNextFullTransactionId().value;
    }
    mm.merges += 1;
    mm.last_merge_us = (millis * 1000.0) as u64;
    let delta_pages = mm.delta_pages;
    mm.delta_pages = delta_pages.saturating_sub(ndead_delta).max(1);
    store_meta_and_old_horizon(index, &metab, &mm, old_head.as_ref().map(|b| (b, m.recycle_head)), old_safexid);
    drop(old_head);
    {
        let _g = slot.exclusive();
        let st = &mut slot.get().dual;
        st.tree.retain(&mut ArenaPool, |_k: &[u8], _t: Tid, p: u64| p >= cutoff);
        st.set_stat(new_stat);
        st.install_key_filter(key_filter);
        let expected = expected_dynamic(desc, &new_stat, index);
        st.rebuild_bloom(desc, expected);
    }
    drop(metab);
}

/// The merge of an elastic_btree index: the sorted dynamic stage goes into
/// the tree's leaves in place (steps of at most four pages), leaves merged
/// away and fully merged delta pages are listed for recycling, and the
/// switch moves `merged_upto` (README.md of src/elastic).
unsafe fn merge_elastic(
    index: pg_sys::Relation,
    desc: &std::rc::Rc<crate::keys::IndexDesc>,
    slot: SlotRef,
    m: &meta::HybridMeta,
    fresh: Vec<(Vec<u8>, Tid)>,
    cutoff: u64,
    start: Instant,
) -> MergeOutcome {
    let merged_entries = fresh.len() as u64;
    // Every merge starts a new reader generation: readers registered before
    // the switch may hold links to leaves this merge deletes; readers that
    // start after it descend a tree in which those leaves are unlinked. So
    // the segment is free once no reader of the old generation is left,
    // not only when the xid horizon passes it (a bulk load's own
    // transaction holds the horizon back for its whole length, and the
    // file grew far past the size bound).
    let gen = m.next_generation;
    meta::update(index, |mm| mm.next_generation = gen + 1);
    let out = crate::elastic::tree::apply_batch(index, desc, m, &fresh, false, &mut |_| {});
    drop(fresh);
    // Leaves merged away and fully merged delta pages: one segment, listed
    // in the switch record.
    let (dead_delta, new_head) = delta::pages_below(index, m.delta_head, cutoff);
    let ndead_delta = dead_delta.len() as u32;
    let mut retired = out.deleted;
    retired.extend(dead_delta);
    let recycle_head = write_recycle_list(index, &retired, m.recycle_head, m.stat.generation);
    let millis = start.elapsed().as_secs_f64() * 1000.0;
    let tids = out.entries;
    let new_stat = StaticInfo {
        generation: gen,
        root: out.meta_blk,
        height: out.stats.height as u32,
        // elastic_btree: the tree's root, where readers start (README.md).
        first_leaf: out.root,
        last_leaf: NO_BLOCK,
        compressed: 0,
        keys: tids,
        tids,
        pages: out.tree_pages,
        body_bytes: 0,
        merged_upto: cutoff,
        vacuum_epoch: m.stat.vacuum_epoch,
    };
    add_key_fetches(slot, out.key_fetches);
    switch(index, desc, slot, m, new_stat, new_head, recycle_head, ndead_delta, millis, None, cutoff);
    recycle_if_safe(index);
    MergeOutcome { merged_entries, static_entries: tids, millis }
}

pub fn add_key_fetches(slot: SlotRef, n: u64) {
    slot.get().dual.key_fetches.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

/// Lists `blocks` (leaves an elastic tree marked deleted) on a new recycle
/// segment of their own, with today's horizon; freed once no snapshot can
/// still be on them. Caller holds the maintenance lock exclusively.
pub unsafe fn list_for_recycling(index: pg_sys::Relation, blocks: &[u32]) {
    if blocks.is_empty() {
        return;
    }
    let m = meta::read(index);
    let head = write_recycle_list(index, blocks, m.recycle_head, 0);
    let old_head = if m.recycle_head != NO_BLOCK { Some(Buf::read(index, m.recycle_head, Lock::Exclusive)) } else { None };
    let metab = Buf::read(index, meta::META_BLOCK, Lock::Exclusive);
    let mut mm = meta::load(index, &metab);
    let old_safexid = mm.recycle_safexid;
    mm.recycle_head = head;
    mm.recycle_safexid = pg_sys::ReadNextFullTransactionId().value;
    store_meta_and_old_horizon(index, &metab, &mm, old_head.as_ref().map(|b| (b, m.recycle_head)), old_safexid);
}

/// One WAL record: the metapage `mm`, and the horizon `old_safexid` stamped
/// on the first page of the segment that was newest until now (its own
/// horizon from now on; the metapage holds the newest segment's).
unsafe fn store_meta_and_old_horizon(index: pg_sys::Relation, metab: &Buf, mm: &meta::HybridMeta, old_head: Option<(&Buf, u32)>, old_safexid: u64) {
    let mut w = WalRecord::start(index);
    if let Some((ob, blk)) = old_head {
        let op = w.register(ob);
        page::check_page(index, blk, op, &[PageKind::Recycle]);
        page::body_mut(op)[8..16].copy_from_slice(&old_safexid.to_le_bytes());
    }
    meta::store(w.register(metab), mm);
    w.finish();
}

/// Recycle page body: `n u32 | segment_first u32 | safexid u64 | n blocks`.
/// Each merge writes one segment; its first page carries the segment's
/// horizon once a newer segment exists (the newest one's is in the metapage).
const RECYCLE_HDR: usize = 16;
const RECYCLE_CAP: usize = (BODY_CAP - RECYCLE_HDR) / 4;

/// Writes `blocks` as a new segment in front of the chain `tail`; returns the
/// new head (or `tail` when there is nothing to list). Unreferenced until the
/// metapage points at it.
unsafe fn write_recycle_list(index: pg_sys::Relation, blocks: &[u32], tail: u32, retired_gen: u32) -> u32 {
    let mut next = tail;
    let chunks: Vec<&[u32]> = blocks.chunks(RECYCLE_CAP).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let b = alloc_page(index);
        let mut w = WalRecord::start(index);
        let p = w.register_new(&b);
        // The page's generation names the stage the segment retires.
        page::init_page(p, PageKind::Recycle, 0, retired_gen);
        page::opaque_mut(p).right = next;
        let body = page::body_mut(p);
        body[..4].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
        let first = (i + 1 == chunks.len()) as u32; // written last, read first
        body[4..8].copy_from_slice(&first.to_le_bytes());
        body[8..16].copy_from_slice(&0u64.to_le_bytes());
        for (j, blk) in chunk.iter().enumerate() {
            body[RECYCLE_HDR + 4 * j..RECYCLE_HDR + 4 * j + 4].copy_from_slice(&blk.to_le_bytes());
        }
        page::set_body_len(p, RECYCLE_HDR + 4 * chunk.len());
        w.finish();
        next = b.blkno();
    }
    next
}

struct Segment {
    safexid: u64,
    /// Generation of the stage whose pages these are; 0 = not recorded.
    generation: u32,
    pages: Vec<u32>,
    blocks: Vec<u32>,
}

/// The recycle chain, newest segment first.
pub unsafe fn recycle_segments(index: pg_sys::Relation, head: u32, head_safexid: u64) -> Vec<(u64, u32, Vec<u32>, Vec<u32>)> {
    let mut segs: Vec<Segment> = Vec::new();
    let mut blk = head;
    while blk != NO_BLOCK {
        let b = Buf::read(index, blk, Lock::Share);
        page::check_page(index, blk, b.page(), &[PageKind::Recycle]);
        let body = page::body(b.page());
        if body.len() < RECYCLE_HDR {
            page::corrupted(&page::rel_name(index), blk, "recycle page too short");
        }
        let n = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
        let first = u32::from_le_bytes(body[4..8].try_into().unwrap()) != 0;
        if RECYCLE_HDR + 4 * n > body.len() {
            page::corrupted(&page::rel_name(index), blk, "recycle list overruns page");
        }
        if first || segs.is_empty() {
            let x = u64::from_le_bytes(body[8..16].try_into().unwrap());
            let generation = page::opaque(b.page()).generation;
            segs.push(Segment { safexid: if segs.is_empty() { head_safexid } else { x }, generation, pages: Vec::new(), blocks: Vec::new() });
        }
        let seg = segs.last_mut().unwrap();
        seg.pages.push(blk);
        for i in 0..n {
            seg.blocks.push(u32::from_le_bytes(body[RECYCLE_HDR + 4 * i..RECYCLE_HDR + 4 * i + 4].try_into().unwrap()));
        }
        blk = page::opaque(b.page()).right;
    }
    segs.into_iter().map(|s| (s.safexid, s.generation, s.pages, s.blocks)).collect()
}

/// Frees the recycle segments whose horizon every snapshot has passed (the
/// nbtree rule for deleted pages). Segments are newest first and horizons
/// only grow, so those are a suffix of the chain. Caller holds the
/// maintenance lock exclusively.
pub unsafe fn recycle_if_safe(index: pg_sys::Relation) -> u64 {
    let m = meta::read(index);
    if m.recycle_head == NO_BLOCK {
        return 0;
    }
    let segs = recycle_segments(index, m.recycle_head, m.recycle_safexid);
    let visible = |x: u64| pg_sys::GlobalVisCheckRemovableFullXid(std::ptr::null_mut(), pg_sys::FullTransactionId { value: x });
    // No slot: no backend is reading through one (readers.rs).
    let slot = shmem::existing_slot(index);
    let unread = |gen: u32| {
        gen != 0
            && match slot {
                Some(s) => {
                    let _g = s.shared();
                    s.get().dual.readers.generation_free(gen)
                }
                None => true,
            }
    };
    // Newest first; once one segment is free, every older one is too.
    let Some(cut) = segs.iter().position(|s| visible(s.0) || unread(s.1)) else {
        return 0;
    };
    // Unlink first: a crash after this leaks pages until VACUUM's sweep, but
    // never frees a page twice.
    if cut == 0 {
        meta::update(index, |mm| mm.recycle_head = NO_BLOCK);
    } else {
        let last = *segs[cut - 1].2.last().unwrap();
        let b = Buf::read(index, last, Lock::Exclusive);
        let mut w = WalRecord::start(index);
        page::opaque_mut(w.register(&b)).right = NO_BLOCK;
        w.finish();
    }
    if crate::elastic::is_elastic(index) {
        // Deleted leaves of the tree: standby queries as old as the newest
        // horizon freed here may still hold links to them.
        let newest = segs[cut..].iter().map(|s| s.0).max().unwrap_or(0);
        super::wal::log_recycle_conflict(index, newest);
    }
    let mut blocks = Vec::new();
    let mut lists = Vec::new();
    for (_, _, pages, blks) in &segs[cut..] {
        blocks.extend_from_slice(blks);
        lists.extend_from_slice(pages);
    }
    free_pages(index, &blocks);
    free_pages(index, &lists);
    pg_sys::IndexFreeSpaceMapVacuum(index);
    (blocks.len() + lists.len()) as u64
}

/// Starts a background merge worker for the index; false when background
/// merges are off or no worker slot is free (the caller merges itself).
pub unsafe fn launch_merge_worker(index: pg_sys::Relation) -> bool {
    crate::guc::BACKGROUND_MERGE.get() && crate::workers::launch_merge_worker(pg_sys::MyDatabaseId, (*index).rd_id)
}

/// pg_hybrid.merge(index): merges now and returns the entries moved.
#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.merge(index regclass) RETURNS bigint
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'merge_wrapper';
COMMENT ON FUNCTION pg_hybrid.merge(regclass) IS 'merge the dynamic stage of a hybrid_btree index into its static stage now';
")]
fn merge(index: pg_sys::Oid) -> i64 {
    unsafe {
        let rel = crate::hybrid::stats::open_hybrid_index(index, pg_sys::RowExclusiveLock as i32);
        let out = merge_index(rel, Reason::Manual);
        pg_sys::index_close(rel, pg_sys::RowExclusiveLock as i32);
        out.merged_entries as i64
    }
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
