//! The one table of access methods the engine serves, keyed by the AM's
//! OID: every callback finds its index's base structure here, so nothing
//! in the engine asks which AM it serves.
//!
//! AMs register their static `BaseStructure` by name from `_PG_init`;
//! OIDs are per database, so each backend maps them lazily and maps again
//! when it meets an unknown `relam` (a re-created extension).

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::base::BaseStructure;

static mut REGISTERED: Vec<&'static dyn BaseStructure> = Vec::new();

/// Registers an AM's base structure; called from `_PG_init`.
pub unsafe fn register(base: &'static dyn BaseStructure) {
    (*(&raw mut REGISTERED)).push(base);
}

fn registered() -> &'static [&'static dyn BaseStructure] {
    unsafe { &*(&raw const REGISTERED) }
}

thread_local! {
    /// (database, AM OID, index into REGISTERED) seen by this backend.
    static BY_OID: RefCell<Vec<(pg_sys::Oid, pg_sys::Oid, usize)>> = const { RefCell::new(Vec::new()) };
}

fn lookup(db: pg_sys::Oid, am: pg_sys::Oid) -> Option<usize> {
    BY_OID.with(|m| m.borrow().iter().find(|e| e.0 == db && e.1 == am).map(|e| e.2))
}

/// The base structure of access method `am`, if it is one of ours.
pub fn base_for_am(am: pg_sys::Oid) -> Option<&'static dyn BaseStructure> {
    let db = unsafe { pg_sys::MyDatabaseId };
    if let Some(i) = lookup(db, am) {
        return Some(registered()[i]);
    }
    let fresh: Vec<(pg_sys::Oid, pg_sys::Oid, usize)> = registered()
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let oid = unsafe { pg_sys::get_index_am_oid(b.am_name().as_ptr(), true) };
            (oid != pg_sys::InvalidOid).then_some((db, oid, i))
        })
        .collect();
    BY_OID.with(|m| {
        let mut m = m.borrow_mut();
        m.retain(|e| e.0 != db);
        m.extend(fresh);
    });
    lookup(db, am).map(|i| registered()[i])
}

/// The base structure of `rel`, if it is an index of ours.
pub unsafe fn base_of(rel: pg_sys::Relation) -> Option<&'static dyn BaseStructure> {
    if (*(*rel).rd_rel).relkind as u8 != pg_sys::RELKIND_INDEX {
        return None;
    }
    base_for_am((*(*rel).rd_rel).relam)
}

/// The base structure of `rel`, which the caller knows is ours (an AM
/// callback's index).
pub unsafe fn base(rel: pg_sys::Relation) -> &'static dyn BaseStructure {
    match base_of(rel) {
        Some(b) => b,
        None => pgrx::error!("index \"{}\" is not an index of pg_hybrid", crate::storage::page::rel_name(rel)),
    }
}

/// OIDs of every AM of ours in this database.
pub fn am_oids() -> Vec<pg_sys::Oid> {
    registered()
        .iter()
        .map(|b| unsafe { pg_sys::get_index_am_oid(b.am_name().as_ptr(), true) })
        .filter(|&o| o != pg_sys::InvalidOid)
        .collect()
}

/// Names of the registered AMs, for messages.
fn am_names() -> Vec<String> {
    registered().iter().map(|b| b.am_name().to_string_lossy().into_owned()).collect()
}

/// "a", "a or b", "a, b or c".
fn one_of(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// Opens `oid` as an index of ours or raises a clear ERROR.
pub unsafe fn open_index(oid: pg_sys::Oid, lockmode: i32) -> pg_sys::Relation {
    crate::require_preload();
    let rel = crate::open_relation(oid, lockmode);
    if base_of(rel).is_none() {
        let name = crate::storage::page::rel_name(rel);
        pg_sys::relation_close(rel, lockmode);
        crate::raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a {} index", one_of(&am_names())),
            format!("Pass an index created with {}.", one_of(&am_names().iter().map(|n| format!("USING {n}")).collect::<Vec<_>>())),
        );
    }
    rel
}
