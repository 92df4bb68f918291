//! CREATE INDEX's scan of a hasis table (heapam_index_build_range_scan's
//! rules on hasis versions).

use pgrx::pg_sys;

use pg_hybrid_core::hasis::hot::Chains;
use pg_hybrid_core::hasis::layout::Geometry;
use pg_hybrid_core::hasis::row::Mvcc;
use pg_hybrid_core::tid::Tid;

use super::relation::{self, Select};
use super::scan;
use super::tuple;
use super::visibility::*;

struct Indexed {
    tid: Tid,
    mvcc: Mvcc,
    natts: u16,
    payload: Vec<u8>,
    alive: bool,
}

/// The HOT chains of one extent, gathered during a visit of its versions:
/// index entries name a chain's root, so every version indexed gets its
/// root's TID (heap_get_root_tuples).
struct ExtentChains {
    first: u32,
    chains: Chains,
}

impl ExtentChains {
    fn new(first: u32) -> Self {
        ExtentChains { first, chains: Chains::new() }
    }
    fn add(&mut self, g: &Geometry, tid: Tid, m: &Mvcc) {
        if let Ok(slot) = g.slot(self.first, tid) {
            self.chains.add_version(slot, chain_link(g, self.first, m));
        }
    }
    /// Adds the extent's redirects and returns each version's root TID.
    /// Read after the visit, under a new header lock: a compaction in
    /// between (CREATE INDEX CONCURRENTLY lets writers in) only turns
    /// removed roots into redirects to later members, and a member's root
    /// slot never changes, so every version visited still finds its root.
    unsafe fn roots(mut self, rel: pg_sys::Relation, meta: &relation::Meta, g: &Geometry) -> std::collections::BTreeMap<Tid, Tid> {
        for (slot, target) in relation::redirects(rel, meta, self.first) {
            self.chains.add_redirect(slot, target);
        }
        self.chains
            .roots()
            .into_iter()
            .filter_map(|(m, r)| Some((g.tid(self.first, m).ok()?, g.tid(self.first, r).ok()?)))
            .collect()
    }
}

/// The root TID of an indexed version: itself unless heap-only.
unsafe fn root_of(rel: pg_sys::Relation, roots: &std::collections::BTreeMap<Tid, Tid>, e: &Indexed) -> Tid {
    if !is_heap_only(&e.mvcc) {
        return e.tid;
    }
    match roots.get(&e.tid) {
        Some(&r) => r,
        None => crate::raise(
            pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("failed to find parent tuple for heap-only tuple at ({},{}) in table \"{}\"", e.tid.block, e.tid.offset, crate::storage::page::rel_name(rel)),
            "Run pg_hybrid.verify_table() on the table; a HOT chain is broken.",
        ),
    }
}

/// ExecQual (an inline function in PostgreSQL's headers).
unsafe fn exec_qual(state: *mut pg_sys::ExprState, econtext: *mut pg_sys::ExprContext) -> bool {
    if state.is_null() {
        return true;
    }
    let old = pg_sys::CurrentMemoryContext;
    pg_sys::CurrentMemoryContext = (*econtext).ecxt_per_tuple_memory;
    let mut isnull = false;
    let d = ((*state).evalfunc.expect("compiled expression"))(state, econtext, &mut isnull);
    pg_sys::CurrentMemoryContext = old;
    !isnull && d.value() != 0
}

#[allow(clippy::too_many_arguments)]
pub unsafe fn index_build_range_scan(
    table: pg_sys::Relation,
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
    anyvisible: bool,
    start_blockno: pg_sys::BlockNumber,
    numblocks: pg_sys::BlockNumber,
    callback: pg_sys::IndexBuildCallback,
    callback_state: *mut std::ffi::c_void,
    given_scan: pg_sys::TableScanDesc,
) -> f64 {
    let callback = callback.expect("index build callback");
    // As heap: a plain build indexes every version some snapshot may still
    // see (SnapshotAny and the vacuum rules); CREATE INDEX CONCURRENTLY
    // indexes what its MVCC snapshot sees, and validate_scan adds what
    // committed since.
    let scan = if !given_scan.is_null() {
        given_scan
    } else if (*info).ii_Concurrent {
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
        let flags = pg_sys::ScanOptions::SO_ALLOW_STRAT | pg_sys::ScanOptions::SO_TEMP_SNAPSHOT;
        scan::begin(table, snapshot, 0, std::ptr::null_mut(), std::ptr::null_mut(), flags)
    } else {
        scan::begin(table, &raw mut pg_sys::SnapshotAnyData, 0, std::ptr::null_mut(), std::ptr::null_mut(), pg_sys::ScanOptions::SO_ALLOW_STRAT)
    };
    let snapshot = (*scan).rs_snapshot;
    let mvcc = (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC;
    let estate = pg_sys::CreateExecutorState();
    let econtext = pg_sys::MakePerTupleExprContext(estate);
    let slot = pg_sys::table_slot_create(table, std::ptr::null_mut());
    (*econtext).ecxt_scantuple = slot;
    let predicate = pg_sys::ExecPrepareQual((*info).ii_Predicate, estate);
    let oldest = pg_sys::GetOldestNonRemovableTransactionId(table);
    let range = (numblocks != pg_sys::InvalidBlockNumber).then(|| start_blockno..start_blockno.saturating_add(numblocks));
    let relid = (*table).rd_id;
    let mut values = [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize];
    let mut isnull = [false; pg_sys::INDEX_MAX_KEYS as usize];
    let mut reltuples = 0f64;
    let mut batch: Vec<Indexed> = Vec::new();
    let mut slot_schema = tuple::SlotSchema::default();
    let mut broken_chain = false;
    while let Some(k) = scan::next_extent(scan) {
        let st = scan::state(scan);
        let meta = st.meta.expect("extent of a non-empty table");
        let g = meta.geometry;
        batch.clear();
        let mut chains = ExtentChains::new(meta.extent_first(k));
        relation::visit_extent(table, &meta, k, Select::All, std::ptr::null_mut(), &mut |v| {
            let m = v.header.mvcc;
            chains.add(&g, v.tid, &m);
            if mvcc {
                let (vis, hint) = visible(table, snapshot, &m, v.tid, v.buffer);
                if let Some(h) = hint {
                    v.set_hint(h);
                }
                if vis {
                    batch.push(Indexed { tid: v.tid, mvcc: m, natts: v.header.natts, payload: v.payload.to_vec(), alive: true });
                }
                return;
            }
            let (r, hint, _) = vacuum_state(&m, v.tid, relid, oldest, v.buffer);
            if let Some(h) = hint {
                v.set_hint(h);
            }
            use pg_sys::HTSV_Result::*;
            let own_delete = || pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(super::visibility::update_xid(&m)));
            let alive = match r {
                HEAPTUPLE_DEAD => return,
                // A HOT-updated version that some snapshot may still see:
                // only the chain's live end gets an entry, so the index is
                // not safe for older snapshots (indcheckxmin), as on heap.
                HEAPTUPLE_RECENTLY_DEAD if is_hot_updated(&m) => {
                    broken_chain = true;
                    return;
                }
                HEAPTUPLE_RECENTLY_DEAD => false,
                // CREATE INDEX holds a lock that excludes other writers, so
                // an in-progress change is this transaction's own (or a
                // prepared transaction's): index it.
                HEAPTUPLE_DELETE_IN_PROGRESS if !anyvisible && own_delete() && is_hot_updated(&m) => {
                    broken_chain = true;
                    return;
                }
                HEAPTUPLE_DELETE_IN_PROGRESS => anyvisible || !own_delete(),
                _ => true,
            };
            batch.push(Indexed { tid: v.tid, mvcc: m, natts: v.header.natts, payload: v.payload.to_vec(), alive });
        });
        let roots = chains.roots(table, &meta, &g);
        for e in &batch {
            let root = root_of(table, &roots, e);
            if range.as_ref().is_some_and(|r| !r.contains(&root.block)) {
                continue;
            }
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            tuple::store(table, slot, &mut slot_schema, e.natts, &e.payload, &e.mvcc, e.tid);
            if e.alive {
                reltuples += 1.0;
            }
            if !predicate.is_null() && !exec_qual(predicate, econtext) {
                continue;
            }
            pg_sys::FormIndexDatum(info, slot, estate, values.as_mut_ptr(), isnull.as_mut_ptr());
            let mut ip = to_item_pointer(root);
            callback(index, &mut ip, values.as_mut_ptr(), isnull.as_mut_ptr(), e.alive, callback_state);
        }
    }
    if broken_chain {
        (*info).ii_BrokenHotChain = true;
    }
    scan::end(scan);
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::FreeExecutorState(estate);
    (*info).ii_ExpressionsState = std::ptr::null_mut();
    (*info).ii_PredicateState = std::ptr::null_mut();
    reltuples
}

/// itemptr_encode / itemptr_decode (catalog/index.h): how validate_index
/// hands index TIDs over in its tuplesort.
fn decode_tid(d: i64) -> Tid {
    Tid::new((d >> 16) as u32, (d & 0xffff) as u16)
}

/// CREATE INDEX CONCURRENTLY's last table pass (heapam_index_validate_scan).
/// Every version `snapshot` sees whose HOT chain root the index lacks is
/// inserted under the root's TID;
/// `state.tuplesort` holds the index's TIDs in order, and each extent's
/// visible versions are merged against it in TID order (extents cover
/// ascending, disjoint block ranges).
pub unsafe fn index_validate_scan(
    table: pg_sys::Relation,
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
    snapshot: pg_sys::Snapshot,
    state: *mut pg_sys::ValidateIndexState,
) {
    let scan = scan::begin(table, snapshot, 0, std::ptr::null_mut(), std::ptr::null_mut(), pg_sys::ScanOptions::SO_ALLOW_STRAT);
    let estate = pg_sys::CreateExecutorState();
    let econtext = pg_sys::MakePerTupleExprContext(estate);
    let slot = pg_sys::table_slot_create(table, std::ptr::null_mut());
    (*econtext).ecxt_scantuple = slot;
    let predicate = pg_sys::ExecPrepareQual((*info).ii_Predicate, estate);
    let mut values = [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize];
    let mut isnull = [false; pg_sys::INDEX_MAX_KEYS as usize];
    let mut slot_schema = tuple::SlotSchema::default();
    let unique = if (*info).ii_Unique { pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES } else { pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO };
    // The smallest index TID not yet passed (None: the sort is exhausted).
    let next_indexed = |st: *mut pg_sys::ValidateIndexState| -> Option<Tid> {
        let mut d = pg_sys::Datum::from(0usize);
        let mut null = false;
        pg_sys::tuplesort_getdatum((*st).tuplesort, true, &mut d, &mut null, std::ptr::null_mut()).then(|| decode_tid(d.value() as i64))
    };
    let mut cursor = next_indexed(state);
    let mut batch: Vec<Indexed> = Vec::new();
    while let Some(k) = scan::next_extent(scan) {
        let meta = scan::state(scan).meta.expect("extent of a non-empty table");
        let g = meta.geometry;
        batch.clear();
        let mut chains = ExtentChains::new(meta.extent_first(k));
        relation::visit_extent(table, &meta, k, Select::All, std::ptr::null_mut(), &mut |v| {
            let m = v.header.mvcc;
            chains.add(&g, v.tid, &m);
            let (vis, hint) = visible(table, snapshot, &m, v.tid, v.buffer);
            if let Some(h) = hint {
                v.set_hint(h);
            }
            if vis {
                batch.push(Indexed { tid: v.tid, mvcc: m, natts: v.header.natts, payload: v.payload.to_vec(), alive: true });
            }
        });
        let roots = chains.roots(table, &meta, &g);
        let mut rooted: Vec<(Tid, &Indexed)> = batch.iter().map(|e| (root_of(table, &roots, e), e)).collect();
        rooted.sort_by_key(|(root, _)| *root);
        for (root, e) in rooted {
            pgrx::check_for_interrupts!();
            (*state).htups += 1.0;
            while cursor.is_some_and(|c| c < root) {
                cursor = next_indexed(state);
            }
            if cursor == Some(root) {
                continue;
            }
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            tuple::store(table, slot, &mut slot_schema, e.natts, &e.payload, &e.mvcc, e.tid);
            if !predicate.is_null() && !exec_qual(predicate, econtext) {
                continue;
            }
            pg_sys::FormIndexDatum(info, slot, estate, values.as_mut_ptr(), isnull.as_mut_ptr());
            let mut ip = to_item_pointer(root);
            pg_sys::index_insert(index, values.as_mut_ptr(), isnull.as_mut_ptr(), &mut ip, table, unique, false, info);
            (*state).tups_inserted += 1.0;
        }
    }
    scan::end(scan);
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::FreeExecutorState(estate);
    (*info).ii_ExpressionsState = std::ptr::null_mut();
    (*info).ii_PredicateState = std::ptr::null_mut();
}
