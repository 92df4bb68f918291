//! Per-index slots in shared memory, keyed by (database, relfilenode).
//!
//! A new relfilenode (REINDEX, TRUNCATE) is a new key, so a slot can never
//! describe storage other than the one it was built from.

use std::sync::atomic::Ordering as AtomicOrdering;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::arena::{header, lock, slot_lock, ArenaPool, LwGuard, LOCK_REGISTRY};
use crate::hybrid::state::DualStageState;

#[repr(C)]
pub struct IndexSlot {
    pub in_use: bool,
    pub db: pg_sys::Oid,
    pub relnode: pg_sys::Oid,
    pub index_oid: pg_sys::Oid,
    pub last_used: u64,
    /// Protected by the slot's LWLock.
    pub dual: DualStageState,
}

/// Identity of an index's storage.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct SlotKey {
    pub db: pg_sys::Oid,
    pub relnode: pg_sys::Oid,
}

pub unsafe fn slot_key(rel: pg_sys::Relation) -> SlotKey {
    let node = (*rel).rd_node;
    SlotKey { db: node.dbNode, relnode: node.relNode }
}

/// A located slot; its LWLock is `slot_lock(index)`.
#[derive(Clone, Copy)]
pub struct SlotRef {
    pub index: usize,
    pub slot: *mut IndexSlot,
}

impl SlotRef {
    pub fn lock(&self) -> *mut pg_sys::LWLock {
        slot_lock(self.index)
    }
    pub fn get(&self) -> &'static mut IndexSlot {
        unsafe { &mut *self.slot }
    }
}

/// Finds or creates the slot of `rel`. A created slot has an invalid dual
/// stage, so its first user rebuilds it from the index pages.
pub unsafe fn slot_for(rel: pg_sys::Relation) -> SlotRef {
    let key = slot_key(rel);
    let h = header();
    let tick = h.lru_clock.fetch_add(1, AtomicOrdering::Relaxed);
    {
        let _g = LwGuard::shared(lock(LOCK_REGISTRY));
        if let Some(i) = find(key) {
            (*h.slot(i)).last_used = tick;
            return SlotRef { index: i, slot: h.slot(i) };
        }
    }
    let _g = LwGuard::exclusive(lock(LOCK_REGISTRY));
    if let Some(i) = find(key) {
        return SlotRef { index: i, slot: h.slot(i) };
    }
    let i = match (0..h.max_indexes as usize).find(|&i| !(*h.slot(i)).in_use) {
        Some(i) => i,
        None => evict().unwrap_or_else(|| {
            crate::raise(PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, format!(
                    "pg_hybrid.max_indexes ({}) indexes with a dynamic stage are in use",
                    h.max_indexes
                ), "Raise pg_hybrid.max_indexes in postgresql.conf and restart, or run pg_hybrid.merge() on idle indexes.");
            unreachable!()
        }),
    };
    let s = h.slot(i);
    {
        // Nobody can hold this slot's lock for a different key: lookups only
        // lock slots they found under the registry lock, which we hold.
        let _sg = LwGuard::exclusive(slot_lock(i));
        (*s).dual.reset(&mut ArenaPool);
        (*s).in_use = true;
        (*s).db = key.db;
        (*s).relnode = key.relnode;
        (*s).index_oid = (*rel).rd_id;
        (*s).last_used = tick;
    }
    SlotRef { index: i, slot: s }
}

/// Finds the slot of `rel` without creating one.
pub unsafe fn existing_slot(rel: pg_sys::Relation) -> Option<SlotRef> {
    let key = slot_key(rel);
    let _g = LwGuard::shared(lock(LOCK_REGISTRY));
    find(key).map(|i| SlotRef { index: i, slot: header().slot(i) })
}

thread_local! {
    /// Where this backend last found each index; checked under the registry
    /// lock like any other slot, so a stale hint only costs the full search.
    static HINTS: std::cell::RefCell<std::collections::HashMap<SlotKey, usize>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

unsafe fn find(key: SlotKey) -> Option<usize> {
    let h = header();
    let matches = |i: usize| {
        let s = &*h.slot(i);
        s.in_use && s.db == key.db && s.relnode == key.relnode
    };
    if let Some(i) = HINTS.with(|m| m.borrow().get(&key).copied()) {
        if i < h.max_indexes as usize && matches(i) {
            return Some(i);
        }
    }
    let found = (0..h.max_indexes as usize).find(|&i| matches(i));
    if let Some(i) = found {
        HINTS.with(|m| m.borrow_mut().insert(key, i));
    }
    found
}

/// Frees the least recently used slot that holds no dynamic entries, or one
/// whose index no longer exists in this database. Caller holds the registry
/// lock exclusively.
unsafe fn evict() -> Option<usize> {
    let h = header();
    let mut best: Option<(u64, usize)> = None;
    for i in 0..h.max_indexes as usize {
        let s = &*h.slot(i);
        if !s.in_use {
            return Some(i);
        }
        let gone = s.db == pg_sys::MyDatabaseId && !relation_exists(s.index_oid, s.relnode);
        let idle = s.dual.tree.nentries == 0 && !s.dual.merge_running;
        if gone || idle {
            let age = if gone { 0 } else { s.last_used };
            if best.map_or(true, |(a, _)| age < a) {
                best = Some((age, i));
            }
        }
    }
    let (_, i) = best?;
    let _sg = LwGuard::exclusive(slot_lock(i));
    let s = h.slot(i);
    (*s).dual.reset(&mut ArenaPool);
    (*s).in_use = false;
    Some(i)
}

unsafe fn relation_exists(oid: pg_sys::Oid, relnode: pg_sys::Oid) -> bool {
    let tup = pg_sys::SearchSysCache1(
        pg_sys::SysCacheIdentifier::RELOID as i32,
        pg_sys::Datum::from(oid),
    );
    if tup.is_null() {
        return false;
    }
    let form = pg_sys::GETSTRUCT(tup) as *const pg_sys::FormData_pg_class;
    let same = (*form).relfilenode == relnode || (*form).relfilenode == pg_sys::InvalidOid;
    pg_sys::ReleaseSysCache(tup);
    same
}

/// Drops the slot of a relfilenode that is going away (DROP INDEX, REINDEX),
/// returning its blocks to the pool.
pub unsafe fn forget(key: SlotKey) {
    let h = header();
    let _g = LwGuard::exclusive(lock(LOCK_REGISTRY));
    if let Some(i) = find(key) {
        let _sg = LwGuard::exclusive(slot_lock(i));
        let s = h.slot(i);
        (*s).dual.reset(&mut ArenaPool);
        (*s).in_use = false;
    }
}
