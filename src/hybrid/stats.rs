//! pg_hybrid.index_stats() and pg_hybrid.verify().

use std::cmp::Ordering;
use std::collections::HashSet;

use pg_hybrid_core::static_stage::{InnerView, LeafView};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::build::item_to_tid;
use super::meta::{self, MaintenanceLock};
use super::state::ensure_synced;
use super::{delta, static_io};
use crate::keys::{index_desc, IndexDesc};
use crate::shmem::{self, ArenaPool};
use crate::storage::buffer::{nblocks, Buf, Lock};
use crate::storage::page::{self, PageKind, BLCKSZ, NO_BLOCK};

/// Whether `rel` is a hybrid_btree or elastic_btree index (both run on
/// this module's machinery).
pub unsafe fn is_hybrid_index(rel: pg_sys::Relation) -> bool {
    let relam = (*(*rel).rd_rel).relam;
    [c"hybrid_btree", c"elastic_btree"].iter().any(|n| {
        let am = pg_sys::get_index_am_oid(n.as_ptr(), true);
        am != pg_sys::InvalidOid && relam == am
    })
}

/// Opens `oid` as a hybrid_btree index or raises a clear ERROR.
pub unsafe fn open_hybrid_index(oid: pg_sys::Oid, lockmode: i32) -> pg_sys::Relation {
    crate::require_preload();
    let rel = pg_sys::try_relation_open(oid, lockmode);
    if rel.is_null() {
        pgrx::ereport!(ERROR, PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, format!("relation with OID {} does not exist", oid.to_u32()));
    }
    if (*(*rel).rd_rel).relkind as u8 != pg_sys::RELKIND_INDEX || !is_hybrid_index(rel) {
        let name = page::rel_name(rel);
        pg_sys::relation_close(rel, lockmode);
        crate::raise(PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE, format!("\"{name}\" is not a hybrid_btree or elastic_btree index"), "Pass an index created with USING hybrid_btree or USING elastic_btree.");
    }
    rel
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.index_stats(index regclass) RETURNS TABLE (
    dynamic_entries bigint, dynamic_bytes bigint,
    static_entries bigint, static_keys bigint, static_pages bigint,
    static_bytes bigint, relation_bytes bigint, delta_pages bigint,
    generation bigint, merges bigint, last_merge_ms double precision,
    bloom_checks bigint, bloom_skips bigint, bytes_per_entry double precision,
    standard_leaves bigint, compact_leaves bigint, state text, size_bound bigint,
    key_fetches bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'index_stats_wrapper';
COMMENT ON FUNCTION pg_hybrid.index_stats(regclass) IS 'sizes and counters of both stages of a hybrid_btree or elastic_btree index (leaf forms, state, bound and key fetches: elastic_btree only)';
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
    ),
> {
    unsafe {
        let rel = open_hybrid_index(index, pg_sys::AccessShareLock as i32);
        let desc = index_desc(rel);
        let slot = shmem::slot_for(rel);
        ensure_synced(rel, &desc, slot);
        let m = meta::read(rel);
        let (dyn_entries, dyn_bytes, checks, skips, fetches) = {
            let _g = slot.shared();
            let st = &slot.get().dual;
            (
                st.tree.nentries,
                st.shared_bytes(),
                st.bloom_checks.load(std::sync::atomic::Ordering::Relaxed),
                st.bloom_skips.load(std::sync::atomic::Ordering::Relaxed),
                st.key_fetches.load(std::sync::atomic::Ordering::Relaxed),
            )
        };
        let elastic = crate::elastic::is_elastic(rel);
        let (std_leaves, compact_leaves, state, bound, key_fetches) = if elastic {
            let _ml = if pg_sys::RecoveryInProgress() { None } else { Some(MaintenanceLock::share(rel)) };
            let m = meta::read(rel);
            let (sl, cl, state) = match crate::elastic::tree::stats(rel, &m) {
                Some((s, state, _)) => (s.standard_leaves as i64, s.compact_leaves as i64, state.name().to_string()),
                None => (0, 0, "normal".to_string()),
            };
            (Some(sl), Some(cl), Some(state), crate::elastic::options::size_bound(rel).map(|b| b as i64), Some(fetches as i64))
        } else {
            (None, None, None, None, None)
        };
        let rel_bytes = nblocks(rel) as u64 * BLCKSZ as u64;
        let entries = m.stat.tids + dyn_entries;
        let bpe = if entries == 0 { 0.0 } else { (rel_bytes + dyn_bytes) as f64 / entries as f64 };
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        TableIterator::once((
            dyn_entries as i64,
            dyn_bytes as i64,
            m.stat.tids as i64,
            m.stat.keys as i64,
            m.stat.pages as i64,
            (m.stat.pages * BLCKSZ as u64) as i64,
            rel_bytes as i64,
            m.delta_pages as i64,
            m.stat.generation as i64,
            m.merges as i64,
            m.last_merge_us as f64 / 1000.0,
            checks as i64,
            skips as i64,
            bpe,
            std_leaves,
            compact_leaves,
            state,
            bound,
            key_fetches,
        ))
    }
}

fn fail(index: &str, what: String) -> ! {
    crate::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("hybrid_btree index \"{index}\" failed verification: {what}"), "REINDEX the index.");
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.verify(index regclass, heapallindexed boolean DEFAULT false) RETURNS void
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'verify_wrapper';
COMMENT ON FUNCTION pg_hybrid.verify(regclass, boolean) IS 'check order, structure and stage consistency of a hybrid_btree index; optionally that every live heap tuple is indexed';
")]
fn verify(index: pg_sys::Oid, heapallindexed: bool) {
    unsafe {
        let rel = open_hybrid_index(index, pg_sys::AccessShareLock as i32);
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
        let m = meta::read(rel);
        let mut all: HashSet<(Vec<u8>, Tid)> = HashSet::new();
        if crate::elastic::is_elastic(rel) {
            // Both leaf forms, keys of compact leaves read from the heap.
            crate::elastic::tree::verify(rel, &desc, &m);
            if heapallindexed {
                use crate::elastic::scan::{Dir, ElasticCursor};
                let mut c = ElasticCursor::new(rel, desc.clone(), &m.stat);
                c.start(Dir::Fwd, &[], None, false, (false, false));
                while let Some((k, t)) = c.peek(Dir::Fwd) {
                    all.insert((desc.keycols(&k).to_vec(), t));
                    c.advance(Dir::Fwd);
                }
            }
        }
        let nstatic = if crate::elastic::is_elastic(rel) {
            m.stat.tids
        } else {
            verify_static(rel, &desc, &m, &name, heapallindexed.then_some(&mut all))
        };
        if nstatic != m.stat.tids {
            fail(&name, format!("static stage holds {nstatic} TIDs, metapage says {}", m.stat.tids));
        }
        // Dynamic stage: the shared tree must equal the delta log.
        let slot = shmem::slot_for(rel);
        ensure_synced(rel, &desc, slot);
        let (recs, _, _) = delta::read_from(rel, m.delta_head, m.stat.merged_upto, u64::MAX);
        let mut log: Vec<(Vec<u8>, Tid)> = recs.into_iter().map(|r| (r.key, r.tid)).collect();
        log.sort_by(|a, b| desc.compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
        log.dedup();
        let mut tree = Vec::new();
        {
            let _g = slot.shared();
            let st = &slot.get().dual;
            if st.stat.generation == m.stat.generation {
                st.tree.scan_all(&ArenaPool, |k: &[u8], t: Tid, p: u64| {
                    if p >= m.stat.merged_upto {
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
        for e in &log {
            if tree.binary_search_by(|x| desc.compare(&x.0, &e.0).then(x.1.cmp(&e.1))).is_err() {
                fail(&name, format!("delta log entry with TID ({},{}) is missing from the shared dynamic stage", e.1.block, e.1.offset));
            }
        }
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

/// Walks leaves and inner levels; returns the number of TIDs.
unsafe fn verify_static(
    rel: pg_sys::Relation,
    desc: &IndexDesc,
    m: &meta::HybridMeta,
    name: &str,
    mut all: Option<&mut HashSet<(Vec<u8>, Tid)>>,
) -> u64 {
    if m.stat.root == NO_BLOCK {
        return 0;
    }
    let mut prev: Option<(Vec<u8>, Tid)> = None;
    let mut blk = m.stat.first_leaf;
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
        let leaf = static_io::load_leaf(rel, blk, &m.stat);
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
    if last != m.stat.last_leaf {
        fail(name, format!("last leaf is {last}, metapage says {}", m.stat.last_leaf));
    }
    // Inner pages: each separator must not exceed its child's first key.
    let mut level_blk = m.stat.root;
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
