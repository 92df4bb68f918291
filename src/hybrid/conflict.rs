//! INSERT ... ON CONFLICT and hybrid_btree.
//!
//! PostgreSQL 15's executor builds speculative-insertion info only for btree
//! (execIndexing.c, BuildSpeculativeIndexInfo: "unexpected non-btree
//! speculative unique index"), for every unique index of the target table.
//! An extension cannot change that, so we refuse such statements at parse
//! analysis with an error that says what to do, instead of the internal one.

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_HOOK: pg_sys::post_parse_analyze_hook_type = None;

pub unsafe fn install() {
    PREV_HOOK = pg_sys::post_parse_analyze_hook;
    pg_sys::post_parse_analyze_hook = Some(post_parse_analyze);
}

#[pg_guard]
unsafe extern "C-unwind" fn post_parse_analyze(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    if let Some(prev) = PREV_HOOK {
        prev(pstate, query, jstate);
    }
    if (*query).onConflict.is_null() || (*query).resultRelation <= 0 {
        return;
    }
    let am = pg_sys::get_index_am_oid(c"hybrid_btree".as_ptr(), true);
    if am == pg_sys::InvalidOid {
        return;
    }
    let rte = pg_sys::list_nth((*query).rtable, (*query).resultRelation - 1) as *mut pg_sys::RangeTblEntry;
    let rel = pg_sys::table_open((*rte).relid, pg_sys::NoLock as i32);
    let list = pg_sys::RelationGetIndexList(rel);
    let mut offending: Option<String> = None;
    for i in 0..pg_sys::list_length(list) {
        let idx_oid = pg_sys::list_nth_oid(list, i);
        let idx = pg_sys::index_open(idx_oid, pg_sys::AccessShareLock as i32);
        if (*(*idx).rd_rel).relam == am && (*(*idx).rd_index).indisunique {
            offending = Some(crate::storage::page::rel_name(idx));
        }
        pg_sys::index_close(idx, pg_sys::AccessShareLock as i32);
        if offending.is_some() {
            break;
        }
    }
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    if let Some(name) = offending {
        crate::raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("INSERT ... ON CONFLICT is not supported on a table with the unique hybrid_btree index \"{name}\""), "PostgreSQL 15 performs speculative insertion only through btree unique indexes. Make that index non-unique and keep a btree UNIQUE index for ON CONFLICT, or use INSERT ... WHERE NOT EXISTS / MERGE.");
    }
}
