//! pg_hybrid.index_stats() and pg_hybrid.verify().

use std::cmp::Ordering;
use std::collections::HashSet;

use pg_hybrid_core::hot_tier;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::build::{item_to_tid, tid_to_item};
use super::delta;
use super::meta::{self, MaintenanceLock};
use super::state::{ensure_synced, SlotState};
use crate::keys::{index_desc, IndexDesc};
use crate::shmem::{self, ArenaPool};
use crate::storage::buffer::nblocks;
use crate::storage::page::{self, BLCKSZ};

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.index_stats(index regclass) RETURNS TABLE (
    dynamic_entries bigint, dynamic_bytes bigint,
    static_entries bigint, static_keys bigint, static_pages bigint,
    static_bytes bigint, relation_bytes bigint, delta_pages bigint,
    generation bigint, merges bigint, last_merge_ms double precision,
    bloom_checks bigint, bloom_skips bigint, bytes_per_entry double precision,
    standard_leaves bigint, compact_leaves bigint, state text, size_bound bigint,
    key_fetches bigint, hash_buckets bigint, hash_entries bigint,
    hash_pages bigint, overflow_pages bigint,
    hot_records bigint, hot_entries bigint, hot_bytes bigint,
    hot_hit_ratio double precision, promotions bigint, evictions bigint,
    sweeps bigint, point_reads bigint, hot_hits bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'index_stats_wrapper';
COMMENT ON FUNCTION pg_hybrid.index_stats(regclass) IS 'sizes and counters of both stages of an index of pg_hybrid (leaf forms, state and bound: elastic_btree only; hash buckets: griffin only; hot tier: tiered_btree only)';
")]
fn index_stats(
    index: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(dynamic_entries, i64),
        name!(dynamic_bytes, i64),
        name!(static_entries, i64),
        name!(static_keys, i64),
        name!(static_pages, i64),
        name!(static_bytes, i64),
        name!(relation_bytes, i64),
        name!(delta_pages, i64),
        name!(generation, i64),
        name!(merges, i64),
        name!(last_merge_ms, f64),
        name!(bloom_checks, i64),
        name!(bloom_skips, i64),
        name!(bytes_per_entry, f64),
        name!(standard_leaves, Option<i64>),
        name!(compact_leaves, Option<i64>),
        name!(state, Option<String>),
        name!(size_bound, Option<i64>),
        name!(key_fetches, Option<i64>),
        name!(hash_buckets, Option<i64>),
        name!(hash_entries, Option<i64>),
        name!(hash_pages, Option<i64>),
        name!(overflow_pages, Option<i64>),
        name!(hot_records, Option<i64>),
        name!(hot_entries, Option<i64>),
        name!(hot_bytes, Option<i64>),
        name!(hot_hit_ratio, Option<f64>),
        name!(promotions, Option<i64>),
        name!(evictions, Option<i64>),
        name!(sweeps, Option<i64>),
        name!(point_reads, Option<i64>),
        name!(hot_hits, Option<i64>),
    ),
> {
    unsafe {
        let rel = ams::open_index(index, pg_sys::AccessShareLock as i32);
        let desc = index_desc(rel);
        let slot = shmem::slot_for(rel);
        ensure_synced(rel, &desc, slot);
        let m = meta::read(rel);
        let (dyn_entries, dyn_bytes, checks, skips, fetches) = {
            let _g = slot.shared();
            let st = slot.state();
            (
                st.tree.nentries,
                st.shared_bytes(),
                st.bloom_checks.load(std::sync::atomic::Ordering::Relaxed),
                st.bloom_skips.load(std::sync::atomic::Ordering::Relaxed),
                st.key_fetches.load(std::sync::atomic::Ordering::Relaxed),
            )
        };
        let base_stats = {
            let _ml = if pg_sys::RecoveryInProgress() { None } else { Some(MaintenanceLock::share(rel)) };
            let m = meta::read(rel);
            ams::base(rel).stats(rel, &m)
        };
        // Key fetches are counted for structures that read keys from the heap.
        let key_fetches = base_stats.fetches_keys.then_some(fetches as i64);
        let hot = ams::base(rel).hot_tier(rel).map(|_| super::hot::figures(slot, &desc));
        let dyn_entries = unmerged_entries(dyn_entries, hot.as_ref());
        let rel_bytes = nblocks(rel) as u64 * BLCKSZ as u64;
        let entries = m.base.entries + dyn_entries;
        let bpe = if entries == 0 { 0.0 } else { (rel_bytes + dyn_bytes) as f64 / entries as f64 };
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        TableIterator::once((
            dyn_entries as i64,
            dyn_bytes as i64,
            m.base.entries as i64,
            m.base.keys as i64,
            m.base.pages as i64,
            (m.base.pages * BLCKSZ as u64) as i64,
            rel_bytes as i64,
            m.delta_pages as i64,
            m.base.generation as i64,
            m.merges as i64,
            m.last_merge_us as f64 / 1000.0,
            checks as i64,
            skips as i64,
            bpe,
            base_stats.standard_leaves,
            base_stats.compact_leaves,
            base_stats.state,
            base_stats.size_bound,
            key_fetches,
            base_stats.hash_buckets,
            base_stats.hash_entries,
            base_stats.hash_pages,
            base_stats.overflow_pages,
            hot.as_ref().map(|h| h.records),
            hot.as_ref().map(|h| h.entries),
            hot.as_ref().map(|h| h.bytes),
            hot.as_ref().and_then(|h| h.hit_ratio),
            hot.as_ref().map(|h| h.promotions),
            hot.as_ref().map(|h| h.evictions),
            hot.as_ref().map(|h| h.sweeps),
            hot.as_ref().map(|h| h.point_reads),
            hot.as_ref().map(|h| h.hot_hits),
        ))
    }
}

/// The dynamic stage's entries not yet merged: every entry of its tree;
/// in a tiered index, whose tree also holds its hot records (clean copies
/// and markers), the hot tier's count of dirty entries.
fn unmerged_entries(tree_entries: u64, hot: Option<&super::hot::HotFigures>) -> u64 {
    hot.map_or(tree_entries, |h| h.dirty as u64)
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.sync_lag(index regclass) RETURNS TABLE (unmerged_entries bigint, lag_ms double precision)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'sync_lag_wrapper';
COMMENT ON FUNCTION pg_hybrid.sync_lag(regclass) IS 'entries of an index of pg_hybrid not yet merged into its base structure (griffin: synced into the tree and buckets), and how long the oldest of them has waited, in ms (0 when none waits; an upper bound, within about 10 ms or 1/32 of the lag; NULL on a standby)';
")]
fn sync_lag(index: pg_sys::Oid) -> TableIterator<'static, (name!(unmerged_entries, i64), name!(lag_ms, Option<f64>))> {
    unsafe {
        let rel = ams::open_index(index, pg_sys::AccessShareLock as i32);
        let desc = index_desc(rel);
        let slot = shmem::slot_for(rel);
        ensure_synced(rel, &desc, slot);
        let hot = ams::base(rel).hot_tier(rel).map(|_| super::hot::figures(slot, &desc));
        let (tree_entries, oldest) = {
            let _g = slot.shared();
            let st = slot.state();
            (st.tree.nentries, st.clock.oldest_unmerged(st.base.merged_upto))
        };
        let entries = unmerged_entries(tree_entries, hot.as_ref()) as i64;
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        // The standby replays entries and merges without their append
        // times: it does not know the lag.
        let lag = if pg_sys::RecoveryInProgress() {
            None
        } else {
            Some(match oldest {
                Some(at) if entries > 0 => ((pg_sys::GetCurrentTimestamp() - at).max(0)) as f64 / 1000.0,
                _ => 0.0,
            })
        };
        TableIterator::once((entries, lag))
    }
}

/// Runs a structural check of an index until it passes. On a hot standby
/// nothing stops replay from changing the pages while the check reads them
/// one at a time (the primary's maintenance lock does not exist there), so a
/// failed check is taken again while replay moved on during it, up to 20
/// times; its last verdict stands. On a primary it runs once.
pub unsafe fn check_under_replay<T>(mut check: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let in_recovery = pg_sys::RecoveryInProgress();
    let mut retries = 0;
    loop {
        let replayed = if in_recovery { pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut()) } else { 0 };
        match check() {
            Err(_) if in_recovery && retries < 20 && pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut()) != replayed => {
                retries += 1;
                pg_sys::pg_usleep(20_000);
            }
            verdict => return verdict,
        }
    }
}

/// The ERROR of a failed verification.
pub fn fail(index: &str, what: String) -> ! {
    crate::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("index \"{index}\" failed verification: {what}"), "REINDEX the index.");
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.verify(index regclass, heapallindexed boolean DEFAULT false) RETURNS void
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'verify_wrapper';
COMMENT ON FUNCTION pg_hybrid.verify(regclass, boolean) IS 'check order, structure and stage consistency of an index of pg_hybrid; optionally that every live heap tuple is indexed';
")]
fn verify(index: pg_sys::Oid, heapallindexed: bool) {
    unsafe {
        let rel = ams::open_index(index, pg_sys::AccessShareLock as i32);
        let heap_oid = (*(*rel).rd_index).indrelid;
        let in_recovery = pg_sys::RecoveryInProgress();
        if in_recovery && heapallindexed {
            crate::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "pg_hybrid.verify(heapallindexed => true) cannot run during recovery",
                "Replay keeps changing the heap under the check; run it on the primary, or verify the structure here with heapallindexed => false.",
            );
        }
        let heap_lock = if in_recovery { pg_sys::AccessShareLock } else { pg_sys::ShareLock } as i32;
        let heap = pg_sys::table_open(heap_oid, heap_lock);
        let name = page::rel_name(rel);
        let desc = index_desc(rel);
        let _ml = if in_recovery { None } else { Some(MaintenanceLock::share(rel)) };
        let mut all: HashSet<(Vec<u8>, Tid)> = HashSet::new();
        // The metapage is read with each try: on a standby, a count that
        // disagrees while replay moved on is checked again against the
        // metapage replay left (check_under_replay).
        let base = ams::base(rel);
        let checked = check_under_replay(|| {
            let m = meta::read(rel);
            let nstatic = base.verify(rel, &desc, &m, heapallindexed.then_some(&mut all));
            if nstatic == m.base.entries || base.counts_kept_in_place() {
                return Ok(m);
            }
            Err(format!("base structure holds {nstatic} TIDs, metapage says {}", m.base.entries))
        });
        let m = checked.unwrap_or_else(|what| fail(&name, what));
        // Dynamic stage: the shared tree must equal the delta log.
        let slot = shmem::slot_for(rel);
        ensure_synced(rel, &desc, slot);
        let (recs, _, _) = delta::read_from(rel, m.delta_head, m.base.merged_upto, u64::MAX);
        let mut log: Vec<(Vec<u8>, Tid)> = recs.into_iter().map(|r| (r.key, r.tid)).collect();
        log.sort_by(|a, b| desc.compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
        log.dedup();
        let mut tree = Vec::new();
        {
            let _g = slot.shared();
            let st = slot.state();
            if st.base.generation == m.base.generation {
                st.tree.scan_all(&ArenaPool, |k: &[u8], t: Tid, p: u64| {
                    // The log's entries: not a tiered index's markers or
                    // clean copies (checked against the base below).
                    let logged = matches!(hot_tier::classify(t, p), hot_tier::HotKind::Dirty { .. });
                    if p >= m.base.merged_upto && logged {
                        tree.push((k.to_vec(), t));
                    }
                    true
                });
            } else {
                tree = log.clone();
            }
        }
        for w in tree.windows(2) {
            if desc.compare(&w[0].0, &w[1].0).then(w[0].1.cmp(&w[1].1)) != Ordering::Less {
                fail(&name, "dynamic stage is out of order".into());
            }
        }
        // Inserts racing with us may add to the tree after we read the log.
        // An entry whose heap tuples are dead to all may have been pruned
        // from the tree on a killed-tuple hint (state.rs,
        // prune_dead_versions): the heap says whether that is the case.
        let dead = DeadToAll::new(heap);
        for e in &log {
            if tree.binary_search_by(|x| desc.compare(&x.0, &e.0).then(x.1.cmp(&e.1))).is_err() && !dead.check(e.1) {
                fail(&name, format!("delta log entry with TID ({},{}) is missing from the shared dynamic stage", e.1.block, e.1.offset));
            }
        }
        // A tiered index's hot records: each holds every entry of its key
        // (the base's, the log's), and its clean copies are in the base.
        // The maintenance lock keeps merges and VACUUM out; an entry in
        // one tier only because a killed-tuple hint pruned it from the
        // other is dead to all.
        if ams::base(rel).hot_tier(rel).is_some() && !in_recovery {
            let (info, records) = super::hot::records(slot, &desc);
            if info.generation == m.base.generation {
                for r in &records {
                    let mut cold = Vec::new();
                    super::insert::base_tids_of_key(rel, &desc, &info, &r.marker, usize::MAX, &mut cold);
                    for &(t, clean) in &r.entries {
                        // A merge drops hinted dead TIDs from the cold
                        // tier and VACUUM later takes their clean copies.
                        if clean && !cold.contains(&t) && !dead.check(t) {
                            fail(&name, format!("the hot tier's clean copy of TID ({},{}) is not in the cold tier", t.block, t.offset));
                        }
                    }
                    for &t in &cold {
                        if !r.entries.iter().any(|&(h, _)| h == t) && !dead.check(t) {
                            fail(&name, format!("the cold tier's entry with TID ({},{}) is missing from its key's hot record", t.block, t.offset));
                        }
                    }
                }
            }
        }
        drop(dead);
        if heapallindexed {
            for (k, t) in tree {
                all.insert((desc.keycols(&k).to_vec(), t));
            }
            check_heap(heap, rel, &desc, &name, &all);
        }
        pg_sys::table_close(heap, heap_lock);
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
    }
}

/// Whether a TID's heap tuples are dead to every transaction (or gone:
/// an LP_DEAD or unused line pointer, a block past the heap's end). A
/// verifier tolerates such an entry where an interrupted VACUUM or a
/// killed-tuple prune may have left it in one part of an index and not
/// another: no scan can return it, and the next VACUUM removes it before
/// the heap reuses the TID.
pub struct DeadToAll {
    heap: pg_sys::Relation,
    snap: pg_sys::Snapshot,
}

impl DeadToAll {
    /// `heap` must stay open and locked while this lives.
    pub unsafe fn new(heap: pg_sys::Relation) -> Self {
        DeadToAll { heap, snap: pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot()) }
    }

    pub unsafe fn check(&self, tid: Tid) -> bool {
        if tid.block >= pg_sys::RelationGetNumberOfBlocksInFork(self.heap, pg_sys::ForkNumber::MAIN_FORKNUM) {
            return true;
        }
        let mut item = tid_to_item(tid);
        let mut all_dead = false;
        let found = pg_sys::table_index_fetch_tuple_check(self.heap, &mut item, self.snap, &mut all_dead);
        !found && all_dead
    }
}

impl Drop for DeadToAll {
    fn drop(&mut self) {
        unsafe { pg_sys::UnregisterSnapshot(self.snap) }
    }
}

struct HeapCheck<'a> {
    desc: &'a IndexDesc,
    all: &'a HashSet<(Vec<u8>, Tid)>,
    missing: Option<Tid>,
    key: Vec<u8>,
}

#[pg_guard]
unsafe extern "C-unwind" fn heap_check_callback(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    alive: bool,
    state: *mut std::ffi::c_void,
) {
    let hc = &mut *(state as *mut HeapCheck);
    if !alive || hc.missing.is_some() {
        return;
    }
    let mut key = std::mem::take(&mut hc.key);
    hc.desc.encode_tuple(values, isnull, &mut key);
    let t = item_to_tid(tid);
    if !hc.all.contains(&(hc.desc.keycols(&key).to_vec(), t)) {
        hc.missing = Some(t);
    }
    hc.key = key;
}

unsafe fn check_heap(heap: pg_sys::Relation, index: pg_sys::Relation, desc: &IndexDesc, name: &str, all: &HashSet<(Vec<u8>, Tid)>) {
    let info = pg_sys::BuildIndexInfo(index);
    let mut hc = HeapCheck { desc, all, missing: None, key: Vec::new() };
    pg_sys::table_index_build_scan(
        heap,
        index,
        info,
        true,
        false,
        Some(heap_check_callback),
        &mut hc as *mut HeapCheck as *mut std::ffi::c_void,
        std::ptr::null_mut(),
    );
    if let Some(t) = hc.missing {
        fail(name, format!("heap tuple ({},{}) of table \"{}\" has no index entry", t.block, t.offset, page::rel_name(heap)));
    }
}
