//! INSERT ... ON CONFLICT over unique hybrid_btree indexes.
//!
//! The executor's speculative insertion is AM-neutral except for one guard:
//! PostgreSQL 15's `BuildSpeculativeIndexInfo` (called from
//! `ExecOpenIndices` for every unique index of the target table) refuses
//! any index whose `relam` is not btree, before it looks up the equality
//! operator with btree's strategy number 3 in the index's operator family.
//! Our operator families use btree's strategy numbers, and the rest of the
//! protocol goes through our AM: the pre-check scans the index with
//! equality keys under a dirty snapshot, and the speculative insert calls
//! `aminsert` with UNIQUE_CHECK_PARTIAL, which reports a conflict without
//! raising one (insert.rs).
//!
//! So, right after `ExecutorStart` of a statement with an ON CONFLICT
//! clause, we open the target table's indexes for speculative insertion
//! ourselves (what ExecInsert would do on its first row), and only for the
//! length of that call the relcache entries of its unique hybrid_btree
//! indexes show btree's `relam` in this backend; it is put back right after
//! (also on error). No user code runs in that window.
//!
//! Partitioned targets open their partitions' indexes lazily while the
//! statement runs, outside that window, so ON CONFLICT on a partitioned
//! table with unique hybrid_btree indexes is refused at parse analysis with
//! an error that says what to do.

use pgrx::pg_sys;
use pgrx::prelude::*;

extern "C-unwind" {
    // catalog/pg_inherits.h; not among pgrx's bindings. Called only through
    // pg_guard_ffi_boundary, so an ERROR inside becomes a Rust panic.
    fn find_all_inheritors(parent: pg_sys::Oid, lockmode: i32, numparents: *mut *mut pg_sys::List) -> *mut pg_sys::List;
}

static mut PREV_PARSE_HOOK: pg_sys::post_parse_analyze_hook_type = None;
static mut PREV_EXECUTOR_START: pg_sys::ExecutorStart_hook_type = None;

pub unsafe fn install() {
    PREV_PARSE_HOOK = pg_sys::post_parse_analyze_hook;
    pg_sys::post_parse_analyze_hook = Some(post_parse_analyze);
    PREV_EXECUTOR_START = pg_sys::ExecutorStart_hook;
    pg_sys::ExecutorStart_hook = Some(executor_start);
}

/// Our AMs that can be UNIQUE (hybrid_btree, elastic_btree) in this database.
fn our_ams() -> Vec<pg_sys::Oid> {
    [c"hybrid_btree", c"elastic_btree"]
        .iter()
        .map(|n| unsafe { pg_sys::get_index_am_oid(n.as_ptr(), true) })
        .filter(|&o| o != pg_sys::InvalidOid)
        .collect()
}

/// Unique indexes of ours on `rel`, opened with `lockmode`.
unsafe fn unique_hybrid_indexes(rel: pg_sys::Relation, ams: &[pg_sys::Oid], lockmode: i32) -> Vec<pg_sys::Relation> {
    let list = pg_sys::RelationGetIndexList(rel);
    let mut out = Vec::new();
    for i in 0..pg_sys::list_length(list) {
        let idx = pg_sys::index_open(pg_sys::list_nth_oid(list, i), lockmode);
        if ams.contains(&(*(*idx).rd_rel).relam) && (*(*idx).rd_index).indisunique {
            out.push(idx);
        } else {
            pg_sys::index_close(idx, lockmode);
        }
    }
    out
}

#[pg_guard]
unsafe extern "C-unwind" fn post_parse_analyze(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    if let Some(prev) = PREV_PARSE_HOOK {
        prev(pstate, query, jstate);
    }
    if (*query).onConflict.is_null() || (*query).resultRelation <= 0 {
        return;
    }
    let ams = our_ams();
    if ams.is_empty() {
        return;
    }
    let rte = pg_sys::list_nth((*query).rtable, (*query).resultRelation - 1) as *mut pg_sys::RangeTblEntry;
    if (*rte).relkind as u8 != pg_sys::RELKIND_PARTITIONED_TABLE {
        return;
    }
    let relid = (*rte).relid;
    let parts = pg_sys::ffi::pg_guard_ffi_boundary(|| {
        find_all_inheritors(relid, pg_sys::AccessShareLock as i32, std::ptr::null_mut())
    });
    let mut offending: Option<String> = None;
    for i in 0..pg_sys::list_length(parts) {
        let rel = pg_sys::table_open(pg_sys::list_nth_oid(parts, i), pg_sys::NoLock as i32);
        for idx in unique_hybrid_indexes(rel, &ams, pg_sys::AccessShareLock as i32) {
            offending.get_or_insert_with(|| crate::storage::page::rel_name(idx));
            pg_sys::index_close(idx, pg_sys::AccessShareLock as i32);
        }
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
    }
    if let Some(name) = offending {
        crate::raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("INSERT ... ON CONFLICT on a partitioned table is not supported with the unique hybrid_btree index \"{name}\""), "Insert into the partition directly (ON CONFLICT works there), or use MERGE / INSERT ... WHERE NOT EXISTS.");
    }
}

/// ModifyTable nodes of the started statement that have an ON CONFLICT
/// clause: the top node, or a data-modifying CTE's.
unsafe fn on_conflict_nodes(qd: *mut pg_sys::QueryDesc) -> Vec<*mut pg_sys::ModifyTableState> {
    let mut states = vec![(*qd).planstate];
    let estate = (*qd).estate;
    if !estate.is_null() {
        for i in 0..pg_sys::list_length((*estate).es_subplanstates) {
            states.push(pg_sys::list_nth((*estate).es_subplanstates, i) as *mut pg_sys::PlanState);
        }
    }
    states
        .into_iter()
        .filter(|&ps| {
            !ps.is_null()
                && (*ps).type_ == pg_sys::NodeTag::T_ModifyTableState
                && (*((*ps).plan as *mut pg_sys::ModifyTable)).onConflictAction != pg_sys::OnConflictAction::ONCONFLICT_NONE
        })
        .map(|ps| ps as *mut pg_sys::ModifyTableState)
        .collect()
}

/// Opens the result relation's indexes for speculative insertion (what
/// ExecInsert would do on its first row) with its unique hybrid_btree
/// indexes shown as btree for the length of the call.
unsafe fn open_indexes_for_speculation(rri: *mut pg_sys::ResultRelInfo, ams: &[pg_sys::Oid]) {
    let rel = (*rri).ri_RelationDesc;
    if !(*(*rel).rd_rel).relhasindex || !(*rri).ri_IndexRelationDescs.is_null() {
        return;
    }
    let shown: Vec<(pg_sys::Relation, pg_sys::Oid)> = unique_hybrid_indexes(rel, ams, pg_sys::RowExclusiveLock as i32)
        .into_iter()
        .map(|idx| (idx, (*(*idx).rd_rel).relam))
        .collect();
    if shown.is_empty() {
        return;
    }
    for &(idx, _) in &shown {
        (*(*idx).rd_rel).relam = pg_sys::BTREE_AM_OID;
    }
    let restore = || {
        for &(idx, am) in &shown {
            // A relcache rebuild in the window already put the catalog value back.
            (*(*idx).rd_rel).relam = am;
            pg_sys::index_close(idx, pg_sys::NoLock as i32);
        }
    };
    pg_sys::PgTryBuilder::new(std::panic::AssertUnwindSafe(|| pg_sys::ExecOpenIndices(rri, true)))
        .finally(restore)
        .execute();
    // IndexInfo copied the relam it saw; keep it truthful.
    for j in 0..(*rri).ri_NumIndices as usize {
        let idx = *(*rri).ri_IndexRelationDescs.add(j);
        let info = *(*rri).ri_IndexRelationInfo.add(j);
        if !idx.is_null() && !info.is_null() && ams.contains(&(*(*idx).rd_rel).relam) {
            (*info).ii_Am = (*(*idx).rd_rel).relam;
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn executor_start(qd: *mut pg_sys::QueryDesc, eflags: std::os::raw::c_int) {
    if let Some(prev) = PREV_EXECUTOR_START {
        prev(qd, eflags)
    } else {
        pg_sys::standard_ExecutorStart(qd, eflags)
    }
    let stmt = (*qd).plannedstmt;
    if (*stmt).commandType != pg_sys::CmdType::CMD_INSERT && !(*stmt).hasModifyingCTE {
        return;
    }
    let nodes = on_conflict_nodes(qd);
    if nodes.is_empty() {
        return;
    }
    let ams = our_ams();
    if ams.is_empty() {
        return;
    }
    for mt in nodes {
        for i in 0..(*mt).mt_nrels as usize {
            open_indexes_for_speculation((*mt).resultRelInfo.add(i), &ams);
        }
    }
}
