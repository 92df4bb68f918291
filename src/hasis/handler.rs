//! The `TableAmRoutine` of hasis and its SQL declaration. Every callback
//! PostgreSQL 15 may call is set: PostgreSQL asserts rather than checks
//! them, and a release build would crash on a NULL one.

#![allow(clippy::too_many_arguments)]

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::visibility::from_item_pointer;
use super::{build, ddl, dml, relation, scan, tuple};
use crate::storage::pgstat;

#[no_mangle]
pub extern "C" fn pg_finfo_hasis_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn hasis_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    pg_sys::Datum::from(&raw const ROUTINE)
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION hasis_handler(internal) RETURNS table_am_handler
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'hasis_handler';
CREATE ACCESS METHOD hasis TYPE TABLE HANDLER hasis_handler;
COMMENT ON ACCESS METHOD hasis IS 'hybrid pages (HaSiS): extents with a PAX column part and a row delta part';
"#,
    name = "hasis_am",
    requires = ["preload_check"]
);

#[pg_guard]
unsafe extern "C-unwind" fn slot_callbacks(_rel: pg_sys::Relation) -> *const pg_sys::TupleTableSlotOps {
    crate::require_preload();
    &raw const pg_sys::TTSOpsHeapTuple
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_begin(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
    key: pg_sys::ScanKey,
    parallel: pg_sys::ParallelTableScanDesc,
    flags: u32,
) -> pg_sys::TableScanDesc {
    crate::require_preload();
    let s = scan::begin(rel, snapshot, nkeys, key, parallel, flags);
    count_seq_scan(s);
    s
}

/// `seq_scan` of pg_stat_*_tables counts each start of a sequential scan,
/// rescans included, as heap's initscan counts them.
unsafe fn count_seq_scan(s: pg_sys::TableScanDesc) {
    if (*s).rs_flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN != 0 {
        pgstat::count_scan((*s).rs_rd);
    }
}

/// `seq_tup_read` (sequential, sample and TID range scans) or
/// `idx_tup_fetch` (bitmap heap scans) counts a returned row, as heap's do.
unsafe fn counted(s: pg_sys::TableScanDesc, found: bool, count: unsafe fn(pg_sys::Relation)) -> bool {
    if found {
        count((*s).rs_rd);
    }
    found
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_end(s: pg_sys::TableScanDesc) {
    crate::require_preload();
    scan::end(s)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_rescan(s: pg_sys::TableScanDesc, key: pg_sys::ScanKey, _set_params: bool, _allow_strat: bool, _allow_sync: bool, _allow_pagemode: bool) {
    crate::require_preload();
    scan::rescan(s, key);
    count_seq_scan(s);
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_getnextslot(s: pg_sys::TableScanDesc, dir: pg_sys::ScanDirection::Type, slot: *mut pg_sys::TupleTableSlot) -> bool {
    crate::require_preload();
    counted(s, scan::getnextslot(s, dir, slot), pgstat::count_returned)
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_estimate(rel: pg_sys::Relation) -> pg_sys::Size {
    crate::require_preload();
    pg_sys::table_block_parallelscan_estimate(rel)
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_initialize(rel: pg_sys::Relation, p: pg_sys::ParallelTableScanDesc) -> pg_sys::Size {
    crate::require_preload();
    pg_sys::table_block_parallelscan_initialize(rel, p)
}

#[pg_guard]
unsafe extern "C-unwind" fn parallelscan_reinitialize(rel: pg_sys::Relation, p: pg_sys::ParallelTableScanDesc) {
    crate::require_preload();
    pg_sys::table_block_parallelscan_reinitialize(rel, p)
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_begin(rel: pg_sys::Relation) -> *mut pg_sys::IndexFetchTableData {
    crate::require_preload();
    scan::fetch_begin(rel)
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_reset(_s: *mut pg_sys::IndexFetchTableData) {}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_end(s: *mut pg_sys::IndexFetchTableData) {
    crate::require_preload();
    scan::fetch_end(s)
}

#[pg_guard]
unsafe extern "C-unwind" fn index_fetch_tuple(
    s: *mut pg_sys::IndexFetchTableData,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    call_again: *mut bool,
    all_dead: *mut bool,
) -> bool {
    crate::require_preload();
    scan::index_fetch_tuple(s, tid, snapshot, slot, call_again, all_dead)
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_fetch_row_version(rel: pg_sys::Relation, tid: pg_sys::ItemPointer, snapshot: pg_sys::Snapshot, slot: *mut pg_sys::TupleTableSlot) -> bool {
    crate::require_preload();
    scan::fetch_row_version(rel, tid, snapshot, slot)
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_tid_valid(s: pg_sys::TableScanDesc, tid: pg_sys::ItemPointer) -> bool {
    crate::require_preload();
    scan::tid_valid(s, tid)
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_get_latest_tid(s: pg_sys::TableScanDesc, tid: pg_sys::ItemPointer) {
    crate::require_preload();
    scan::get_latest_tid(s, tid)
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_satisfies_snapshot(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, snapshot: pg_sys::Snapshot) -> bool {
    crate::require_preload();
    scan::satisfies_snapshot(rel, slot, snapshot)
}

#[pg_guard]
unsafe extern "C-unwind" fn index_delete_tuples(rel: pg_sys::Relation, delstate: *mut pg_sys::TM_IndexDeleteOp) -> pg_sys::TransactionId {
    crate::require_preload();
    scan::index_delete_tuples(rel, delstate)
}

/// `bulk`: COPY's multi-insert, or an insert with a bulk-insert state
/// (CREATE TABLE AS, REFRESH MATERIALIZED VIEW, ALTER TABLE's rewrite).
unsafe fn insert_slot(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cid: pg_sys::CommandId, options: i32, spec_token: Option<u32>, bulk: bool) {
    crate::require_preload();
    let xid = pg_sys::GetCurrentTransactionId().into_inner();
    // Inserts conflict with serializable readers of the whole relation.
    super::visibility::CheckForSerializableConflictIn(rel, std::ptr::null_mut(), pg_sys::InvalidBlockNumber);
    let p = tuple::prepare(rel, slot, std::ptr::null_mut(), options);
    let mut m = super::visibility::new_version(xid, cid, false);
    if let Some(token) = spec_token {
        // As heap: the token sits in ctid until the insertion completes,
        // so a unique check that meets this version (SnapshotDirty) waits
        // for the token, not for the whole transaction.
        m.ctid = pg_hybrid_core::tid::Tid::new(token, relation::SPEC_TOKEN_OFFSET);
    }
    let tid = relation::insert(rel, p.natts, m, &p.payload, bulk);
    (*slot).tts_tid = super::visibility::to_item_pointer(tid);
    (*slot).tts_tableOid = (*rel).rd_id;
    if spec_token.is_none() {
        m.ctid = tid;
        // A speculative insertion is logged for logical decoding when it is
        // confirmed (tuple_complete_speculative).
        super::logical::log_insert(rel, p.tuple);
    }
    tuple::stamp_slot(slot, &m, tid);
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_insert(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cid: pg_sys::CommandId, options: i32, bistate: *mut pg_sys::BulkInsertStateData) {
    crate::require_preload();
    insert_slot(rel, slot, cid, options, None, !bistate.is_null());
    pg_sys::pgstat_count_heap_insert(rel, 1);
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_insert_speculative(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cid: pg_sys::CommandId, options: i32, _bistate: *mut pg_sys::BulkInsertStateData, token: u32) {
    crate::require_preload();
    insert_slot(rel, slot, cid, options, Some(token), false);
    pg_sys::pgstat_count_heap_insert(rel, 1);
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_complete_speculative(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, _token: u32, succeeded: bool) {
    crate::require_preload();
    super::dml::complete_speculative(rel, super::visibility::from_item_pointer(&(*slot).tts_tid), succeeded);
    if succeeded && super::logical::wanted(rel) {
        // The row as the slot holds it, TOAST values inline (the stored
        // tuple's pointers are not at hand); the decoder takes either.
        let mut should_free = false;
        let tup = pg_sys::ExecFetchSlotHeapTuple(slot, false, &mut should_free);
        super::logical::log_insert(rel, tup);
        if should_free {
            pg_sys::heap_freetuple(tup);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn multi_insert(rel: pg_sys::Relation, slots: *mut *mut pg_sys::TupleTableSlot, nslots: i32, cid: pg_sys::CommandId, options: i32, _bistate: *mut pg_sys::BulkInsertStateData) {
    crate::require_preload();
    let xid = pg_sys::GetCurrentTransactionId().into_inner();
    // Inserts conflict with serializable readers of the whole relation
    // (once per batch, as heap_multi_insert checks).
    super::visibility::CheckForSerializableConflictIn(rel, std::ptr::null_mut(), pg_sys::InvalidBlockNumber);
    let slots: Vec<*mut pg_sys::TupleTableSlot> = (0..nslots as usize).map(|i| *slots.add(i)).collect();
    let prepared: Vec<tuple::Prepared> = slots.iter().map(|&s| tuple::prepare(rel, s, std::ptr::null_mut(), options)).collect();
    let m = super::visibility::new_version(xid, cid, false);
    let rows: Vec<(u16, &[u8])> = prepared.iter().map(|p| (p.natts, &p.payload[..])).collect();
    let tids = relation::insert_batch(rel, m, &rows);
    for ((&slot, p), &tid) in slots.iter().zip(&prepared).zip(&tids) {
        (*slot).tts_tid = super::visibility::to_item_pointer(tid);
        (*slot).tts_tableOid = (*rel).rd_id;
        super::logical::log_insert(rel, p.tuple);
        tuple::stamp_slot(slot, &pg_hybrid_core::hasis::row::Mvcc { ctid: tid, ..m }, tid);
    }
    pg_sys::pgstat_count_heap_insert(rel, nslots as i64);
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_delete(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    cid: pg_sys::CommandId,
    _snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    _changing_part: bool,
) -> pg_sys::TM_Result::Type {
    crate::require_preload();
    dml::delete(rel, from_item_pointer(&*tid), cid, crosscheck, wait, tmfd)
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_update(
    rel: pg_sys::Relation,
    otid: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    _snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    lockmode: *mut pg_sys::LockTupleMode::Type,
    update_indexes: *mut bool,
) -> pg_sys::TM_Result::Type {
    crate::require_preload();
    dml::update(rel, from_item_pointer(&*otid), slot, cid, crosscheck, wait, tmfd, lockmode, update_indexes)
}

#[pg_guard]
unsafe extern "C-unwind" fn tuple_lock(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    _snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    wait_policy: pg_sys::LockWaitPolicy::Type,
    flags: u8,
    tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    crate::require_preload();
    dml::lock(rel, tid, slot, cid, mode, wait_policy, flags, tmfd)
}

#[pg_guard]
unsafe extern "C-unwind" fn finish_bulk_insert(_rel: pg_sys::Relation, _options: i32) {}

#[pg_guard]
unsafe extern "C-unwind" fn relation_set_new_filenode(
    rel: pg_sys::Relation,
    newrnode: *const pg_sys::RelFileNode,
    persistence: std::os::raw::c_char,
    freeze_xid: *mut pg_sys::TransactionId,
    minmulti: *mut pg_sys::MultiXactId,
) {
    crate::require_preload();
    ddl::set_new_filenode(rel, newrnode, persistence, freeze_xid, minmulti)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_nontransactional_truncate(rel: pg_sys::Relation) {
    crate::require_preload();
    ddl::nontransactional_truncate(rel)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_copy_data(rel: pg_sys::Relation, newrnode: *const pg_sys::RelFileNode) {
    crate::require_preload();
    ddl::copy_data(rel, newrnode)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_copy_for_cluster(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
    old_index: pg_sys::Relation,
    _use_sort: bool,
    oldest_xmin: pg_sys::TransactionId,
    xid_cutoff: *mut pg_sys::TransactionId,
    _multi_cutoff: *mut pg_sys::MultiXactId,
    num_tuples: *mut f64,
    tups_vacuumed: *mut f64,
    tups_recently_dead: *mut f64,
) {
    crate::require_preload();
    ddl::copy_for_cluster(old, new, old_index, oldest_xmin, xid_cutoff, num_tuples, tups_vacuumed, tups_recently_dead)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_vacuum(rel: pg_sys::Relation, params: *mut pg_sys::VacuumParams, strategy: pg_sys::BufferAccessStrategy) {
    crate::require_preload();
    ddl::vacuum(rel, params, strategy)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_analyze_next_block(s: pg_sys::TableScanDesc, blockno: pg_sys::BlockNumber, strategy: pg_sys::BufferAccessStrategy) -> bool {
    crate::require_preload();
    scan::analyze_next_block(s, blockno, strategy)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_analyze_next_tuple(s: pg_sys::TableScanDesc, oldest_xmin: pg_sys::TransactionId, liverows: *mut f64, deadrows: *mut f64, slot: *mut pg_sys::TupleTableSlot) -> bool {
    crate::require_preload();
    scan::analyze_next_tuple(s, oldest_xmin, liverows, deadrows, slot)
}

#[pg_guard]
unsafe extern "C-unwind" fn index_build_range_scan(
    table: pg_sys::Relation,
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
    _allow_sync: bool,
    anyvisible: bool,
    _progress: bool,
    start_blockno: pg_sys::BlockNumber,
    numblocks: pg_sys::BlockNumber,
    callback: pg_sys::IndexBuildCallback,
    callback_state: *mut std::ffi::c_void,
    s: pg_sys::TableScanDesc,
) -> f64 {
    crate::require_preload();
    build::index_build_range_scan(table, index, info, anyvisible, start_blockno, numblocks, callback, callback_state, s)
}

#[pg_guard]
unsafe extern "C-unwind" fn index_validate_scan(table: pg_sys::Relation, index: pg_sys::Relation, info: *mut pg_sys::IndexInfo, snapshot: pg_sys::Snapshot, state: *mut pg_sys::ValidateIndexState) {
    crate::require_preload();
    build::index_validate_scan(table, index, info, snapshot, state)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_size(rel: pg_sys::Relation, fork: pg_sys::ForkNumber::Type) -> u64 {
    crate::require_preload();
    pg_sys::table_block_relation_size(rel, fork)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_needs_toast_table(rel: pg_sys::Relation) -> bool {
    crate::require_preload();
    ddl::needs_toast_table(rel)
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_toast_am(_rel: pg_sys::Relation) -> pg_sys::Oid {
    crate::require_preload();
    pg_sys::HEAP_TABLE_AM_OID
}

/// hasis's TOAST tables are heap tables (`relation_toast_am`), so this is
/// never called for them; a hasis table itself has no TOAST slices.
#[pg_guard]
unsafe extern "C-unwind" fn relation_fetch_toast_slice(_toastrel: pg_sys::Relation, _valueid: pg_sys::Oid, _attrsize: i32, _off: i32, _len: i32, _result: *mut pg_sys::varlena) {
    crate::require_preload();
    crate::raise(PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE, "a hasis table is not a TOAST table", "TOAST tables of hasis tables use the heap access method.");
}

#[pg_guard]
unsafe extern "C-unwind" fn relation_estimate_size(rel: pg_sys::Relation, attr_widths: *mut i32, pages: *mut pg_sys::BlockNumber, tuples: *mut f64, allvisfrac: *mut f64) {
    crate::require_preload();
    ddl::estimate_size(rel, attr_widths, pages, tuples, allvisfrac)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_bitmap_next_block(s: pg_sys::TableScanDesc, tbmres: *mut pg_sys::TBMIterateResult) -> bool {
    crate::require_preload();
    scan::bitmap_next_block(s, tbmres)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_bitmap_next_tuple(s: pg_sys::TableScanDesc, tbmres: *mut pg_sys::TBMIterateResult, slot: *mut pg_sys::TupleTableSlot) -> bool {
    crate::require_preload();
    counted(s, scan::bitmap_next_tuple(s, tbmres, slot), pgstat::count_fetched)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_sample_next_block(s: pg_sys::TableScanDesc, state: *mut pg_sys::SampleScanState) -> bool {
    crate::require_preload();
    scan::sample_next_block(s, state)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_sample_next_tuple(s: pg_sys::TableScanDesc, state: *mut pg_sys::SampleScanState, slot: *mut pg_sys::TupleTableSlot) -> bool {
    crate::require_preload();
    counted(s, scan::sample_next_tuple(s, state, slot), pgstat::count_returned)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_set_tidrange(s: pg_sys::TableScanDesc, min: pg_sys::ItemPointer, max: pg_sys::ItemPointer) {
    crate::require_preload();
    scan::set_tidrange(s, min, max)
}

#[pg_guard]
unsafe extern "C-unwind" fn scan_getnextslot_tidrange(s: pg_sys::TableScanDesc, dir: pg_sys::ScanDirection::Type, slot: *mut pg_sys::TupleTableSlot) -> bool {
    crate::require_preload();
    counted(s, scan::getnextslot_tidrange(s, dir, slot), pgstat::count_returned)
}

/// Whether `rel` is stored by this table access method (its relcache entry
/// points at our routine).
pub unsafe fn is_hasis(rel: pg_sys::Relation) -> bool {
    (*rel).rd_tableam == &raw const ROUTINE
}

pub static ROUTINE: pg_sys::TableAmRoutine = pg_sys::TableAmRoutine {
    type_: pg_sys::NodeTag::T_TableAmRoutine,
    slot_callbacks: Some(slot_callbacks),
    scan_begin: Some(scan_begin),
    scan_end: Some(scan_end),
    scan_rescan: Some(scan_rescan),
    scan_getnextslot: Some(scan_getnextslot),
    // TID range scans are not offered: the planner sees no TID range
    // support and uses a TID scan or a filter.
    scan_set_tidrange: Some(scan_set_tidrange),
    scan_getnextslot_tidrange: Some(scan_getnextslot_tidrange),
    parallelscan_estimate: Some(parallelscan_estimate),
    parallelscan_initialize: Some(parallelscan_initialize),
    parallelscan_reinitialize: Some(parallelscan_reinitialize),
    index_fetch_begin: Some(index_fetch_begin),
    index_fetch_reset: Some(index_fetch_reset),
    index_fetch_end: Some(index_fetch_end),
    index_fetch_tuple: Some(index_fetch_tuple),
    tuple_fetch_row_version: Some(tuple_fetch_row_version),
    tuple_tid_valid: Some(tuple_tid_valid),
    tuple_get_latest_tid: Some(tuple_get_latest_tid),
    tuple_satisfies_snapshot: Some(tuple_satisfies_snapshot),
    index_delete_tuples: Some(index_delete_tuples),
    tuple_insert: Some(tuple_insert),
    tuple_insert_speculative: Some(tuple_insert_speculative),
    tuple_complete_speculative: Some(tuple_complete_speculative),
    multi_insert: Some(multi_insert),
    tuple_delete: Some(tuple_delete),
    tuple_update: Some(tuple_update),
    tuple_lock: Some(tuple_lock),
    finish_bulk_insert: Some(finish_bulk_insert),
    relation_set_new_filenode: Some(relation_set_new_filenode),
    relation_nontransactional_truncate: Some(relation_nontransactional_truncate),
    relation_copy_data: Some(relation_copy_data),
    relation_copy_for_cluster: Some(relation_copy_for_cluster),
    relation_vacuum: Some(relation_vacuum),
    scan_analyze_next_block: Some(scan_analyze_next_block),
    scan_analyze_next_tuple: Some(scan_analyze_next_tuple),
    index_build_range_scan: Some(index_build_range_scan),
    index_validate_scan: Some(index_validate_scan),
    relation_size: Some(relation_size),
    relation_needs_toast_table: Some(relation_needs_toast_table),
    relation_toast_am: Some(relation_toast_am),
    relation_fetch_toast_slice: Some(relation_fetch_toast_slice),
    relation_estimate_size: Some(relation_estimate_size),
    scan_bitmap_next_block: Some(scan_bitmap_next_block),
    scan_bitmap_next_tuple: Some(scan_bitmap_next_tuple),
    scan_sample_next_block: Some(scan_sample_next_block),
    scan_sample_next_tuple: Some(scan_sample_next_tuple),
};
