//! INSERT ... ON CONFLICT over unique indexes of ours.
//!
//! The executor's speculative insertion is AM-neutral except for one step:
//! PostgreSQL 15's `BuildSpeculativeIndexInfo` (called by
//! `ExecOpenIndices(rri, true)` for every unique index of the target table)
//! refuses any index whose `relam` is not btree. What it builds is small:
//! per key column, the equality operator of the index's operator family
//! (btree strategy 3, which our families use too), its function, and the
//! strategy number, for the executor's pre-check scan. The rest of the
//! protocol goes through our AM: the pre-check scans the index with those
//! equality keys under a dirty snapshot, and the speculative insert calls
//! `aminsert` with UNIQUE_CHECK_PARTIAL, which reports a conflict without
//! raising one (insert.rs).
//!
//! So, right after `ExecutorStart` of a statement with an ON CONFLICT
//! clause, we open the target table's indexes ourselves, as ExecInsert
//! would on its first row but without speculation
//! (`ExecOpenIndices(rri, false)`), and fill the speculative fields of each
//! unique index's IndexInfo: btree's through `BuildSpeculativeIndexInfo`,
//! ours from our operator family, the same way. Nothing pretends to be
//! btree, so relcache invalidations arriving while the indexes are locked
//! (CREATE INDEX CONCURRENTLY, DROP INDEX on the table) cannot matter.
//!
//! Partitioned targets open their partitions' indexes lazily while the
//! statement runs, outside our reach, so ON CONFLICT on a partitioned
//! table with unique indexes of ours is refused at parse analysis with an
//! error that says what to do.

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

/// Our AMs (every one can be UNIQUE) in this database.
fn our_ams() -> Vec<pg_sys::Oid> {
    super::ams::am_oids()
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
    let mut offending: Option<(String, String)> = None;
    for i in 0..pg_sys::list_length(parts) {
        let rel = pg_sys::table_open(pg_sys::list_nth_oid(parts, i), pg_sys::NoLock as i32);
        for idx in unique_hybrid_indexes(rel, &ams, pg_sys::AccessShareLock as i32) {
            offending.get_or_insert_with(|| (crate::storage::page::rel_name(idx), super::ams::base(idx).am_name().to_string_lossy().into_owned()));
            pg_sys::index_close(idx, pg_sys::AccessShareLock as i32);
        }
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
    }
    if let Some((name, am)) = offending {
        crate::raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("INSERT ... ON CONFLICT on a partitioned table is not supported with the unique {am} index \"{name}\""), "Insert into the partition directly (ON CONFLICT works there), or use MERGE / INSERT ... WHERE NOT EXISTS.");
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
/// ExecInsert would do on its first row) when one of its unique indexes is
/// ours; see the module comment.
unsafe fn open_indexes_for_speculation(rri: *mut pg_sys::ResultRelInfo, ams: &[pg_sys::Oid], query_cxt: pg_sys::MemoryContext) {
    let rel = (*rri).ri_RelationDesc;
    if !(*(*rel).rd_rel).relhasindex || !(*rri).ri_IndexRelationDescs.is_null() {
        return;
    }
    let ours = unique_hybrid_indexes(rel, ams, pg_sys::RowExclusiveLock as i32);
    let any_ours = !ours.is_empty();
    for idx in ours {
        // ExecOpenIndices takes the same lock again; ours is released at
        // the end of the transaction like its.
        pg_sys::index_close(idx, pg_sys::NoLock as i32);
    }
    if !any_ours {
        return;
    }
    // The IndexInfos live as long as the statement, as ExecInsert's would.
    let old = pg_sys::MemoryContextSwitchTo(query_cxt);
    pg_sys::ExecOpenIndices(rri, false);
    for j in 0..(*rri).ri_NumIndices as usize {
        let idx = *(*rri).ri_IndexRelationDescs.add(j);
        let info = *(*rri).ri_IndexRelationInfo.add(j);
        if idx.is_null() || info.is_null() || !(*info).ii_Unique {
            continue;
        }
        if ams.contains(&(*(*idx).rd_rel).relam) {
            fill_speculative_info(idx, info);
        } else {
            pg_sys::BuildSpeculativeIndexInfo(idx, info);
        }
    }
    pg_sys::MemoryContextSwitchTo(old);
}

/// `BuildSpeculativeIndexInfo` for an index of ours: the equality operator
/// (btree strategy 3) of each key column's operator family.
unsafe fn fill_speculative_info(index: pg_sys::Relation, info: *mut pg_sys::IndexInfo) {
    const EQUAL: u16 = 3;
    let nkeys = (*(*index).rd_index).indnkeyatts as usize;
    let ops = pg_sys::palloc(std::mem::size_of::<pg_sys::Oid>() * nkeys) as *mut pg_sys::Oid;
    let procs = pg_sys::palloc(std::mem::size_of::<pg_sys::Oid>() * nkeys) as *mut pg_sys::Oid;
    let strats = pg_sys::palloc(std::mem::size_of::<u16>() * nkeys) as *mut u16;
    for i in 0..nkeys {
        let family = *(*index).rd_opfamily.add(i);
        let intype = *(*index).rd_opcintype.add(i);
        let op = pg_sys::get_opfamily_member(family, intype, intype, EQUAL as i16);
        if op == pg_sys::InvalidOid {
            crate::raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("operator family of column {} of index \"{}\" has no equality operator", i + 1, crate::storage::page::rel_name(index)),
                "Use one of pg_hybrid's operator classes for the column.",
            );
        }
        *ops.add(i) = op;
        *procs.add(i) = pg_sys::get_opcode(op);
        *strats.add(i) = EQUAL;
    }
    (*info).ii_UniqueOps = ops;
    (*info).ii_UniqueProcs = procs;
    (*info).ii_UniqueStrats = strats;
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
            open_indexes_for_speculation((*mt).resultRelInfo.add(i), &ams, (*(*qd).estate).es_query_cxt);
        }
    }
}
