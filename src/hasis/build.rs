//! CREATE INDEX's scan of a hasis table (heapam_index_build_range_scan's
//! rules on hasis versions).

use pgrx::pg_sys;

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
    if (*info).ii_Concurrent {
        super::not_supported(
            "CREATE INDEX CONCURRENTLY",
            "Use CREATE INDEX without CONCURRENTLY (it blocks writes while it runs), then DROP the invalid index this command left.",
        );
    }
    let callback = callback.expect("index build callback");
    let scan = if given_scan.is_null() {
        scan::begin(table, &raw mut pg_sys::SnapshotAnyData, 0, std::ptr::null_mut(), std::ptr::null_mut(), pg_sys::ScanOptions::SO_ALLOW_STRAT)
    } else {
        given_scan
    };
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
    while let Some(k) = scan::next_extent(scan) {
        let st = scan::state(scan);
        let meta = st.meta.expect("extent of a non-empty table");
        batch.clear();
        relation::visit_extent(table, &meta, k, Select::All, std::ptr::null_mut(), &mut |v| {
            if range.as_ref().is_some_and(|r| !r.contains(&v.tid.block)) {
                return;
            }
            let m = v.header.mvcc;
            let (r, hint, _) = vacuum_state(&m, v.tid, relid, oldest, v.buffer);
            if let Some(h) = hint {
                v.set_hint(h);
            }
            use pg_sys::HTSV_Result::*;
            let alive = match r {
                HEAPTUPLE_DEAD => return,
                HEAPTUPLE_RECENTLY_DEAD => false,
                // CREATE INDEX holds a lock that excludes other writers, so
                // an in-progress change is this transaction's own (or a
                // prepared transaction's): index it.
                HEAPTUPLE_DELETE_IN_PROGRESS => anyvisible || !pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmax)),
                _ => true,
            };
            batch.push(Indexed { tid: v.tid, mvcc: m, natts: v.header.natts, payload: v.payload.to_vec(), alive });
        });
        for e in &batch {
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            tuple::store(table, slot, &mut slot_schema, e.natts, &e.payload, &e.mvcc, e.tid);
            if e.alive {
                reltuples += 1.0;
            }
            if !predicate.is_null() && !exec_qual(predicate, econtext) {
                continue;
            }
            pg_sys::FormIndexDatum(info, slot, estate, values.as_mut_ptr(), isnull.as_mut_ptr());
            let mut ip = to_item_pointer(e.tid);
            callback(index, &mut ip, values.as_mut_ptr(), isnull.as_mut_ptr(), e.alive, callback_state);
        }
    }
    scan::end(scan);
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::FreeExecutorState(estate);
    (*info).ii_ExpressionsState = std::ptr::null_mut();
    (*info).ii_PredicateState = std::ptr::null_mut();
    reltuples
}
