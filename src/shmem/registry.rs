//! Per-index slots in shared memory, keyed by (database, relfilenode).
//!
//! A new relfilenode (REINDEX, TRUNCATE) is a new key, so a slot can never
//! describe storage other than the one it was built from. What a slot holds
//! beyond its key is its user's (the staged-index engine's per-index
//! state): an opaque payload whose size and lifecycle the user registers
//! through [`SlotPayload`] from `_PG_init`.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::arena::{header, lock, slot_lock, LwGuard, LOCK_REGISTRY};

/// What the registry needs to know of a slot's payload. Every method is
/// called with the slot's LWLock held (shared for the `&` ones).
pub trait SlotPayload: Sync {
    /// Bytes of the payload (fixed for the life of the server).
    fn size(&self) -> usize;
    /// Initialises never-used payload memory (zeroed).
    unsafe fn init(&self, p: *mut u8);
    /// Frees what the payload holds in the arena; it is then as new.
    unsafe fn reset(&self, p: *mut u8);
    /// Whether the slot may be evicted (holds nothing that is not on disk
    /// and nobody relies on it).
    unsafe fn idle(&self, p: *const u8) -> bool;
    /// Arena blocks the payload holds (arena pressure picks the largest).
    unsafe fn arena_blocks(&self, p: *const u8) -> u32;
    /// Marks a background merge as asked for; false when one is already
    /// asked for or running.
    unsafe fn claim_merge(&self, p: *mut u8) -> bool;
    /// Withdraws a claim whose worker could not start.
    unsafe fn unclaim_merge(&self, p: *mut u8);
}

static mut PAYLOAD: Option<&'static dyn SlotPayload> = None;

/// Registers the slots' payload; called from `_PG_init` before shared
/// memory is requested.
pub unsafe fn set_payload(p: &'static dyn SlotPayload) {
    PAYLOAD = Some(p);
}

pub(super) fn payload_ops() -> &'static dyn SlotPayload {
    unsafe { (*(&raw const PAYLOAD)).expect("pg_hybrid: no slot payload registered") }
}

/// Bytes from a slot's start to its payload.
pub(super) const PAYLOAD_OFFSET: usize = std::mem::size_of::<IndexSlot>().div_ceil(64) * 64;

/// Bytes of one slot, payload included.
pub(super) fn slot_stride() -> usize {
    (PAYLOAD_OFFSET + payload_ops().size()).div_ceil(64) * 64
}

#[repr(C)]
pub struct IndexSlot {
    pub in_use: bool,
    pub db: pg_sys::Oid,
    pub relnode: pg_sys::Oid,
    pub index_oid: pg_sys::Oid,
    /// When the slot was last looked up (`use_tick`), to a second: what
    /// eviction takes as least recently used.
    pub last_used: AtomicU64,
}

impl IndexSlot {
    /// The payload, protected by the slot's LWLock.
    pub fn payload(&self) -> *mut u8 {
        unsafe { (self as *const IndexSlot as *mut u8).add(PAYLOAD_OFFSET) }
    }
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

/// A located slot; its LWLock is `slot_lock(index)`. The registry lock is
/// released once the slot is found, so under slot pressure the slot could be
/// evicted and given to another index before its user locks it: `shared`
/// and `exclusive` check, under the slot lock, that it still holds `key`.
#[derive(Clone, Copy)]
pub struct SlotRef {
    pub index: usize,
    pub slot: *mut IndexSlot,
    pub key: SlotKey,
}

impl SlotRef {
    pub fn lock(&self) -> *mut pg_sys::LWLock {
        slot_lock(self.index)
    }
    pub fn get(&self) -> &'static mut IndexSlot {
        unsafe { &mut *self.slot }
    }
    /// The slot's payload (lock it first).
    pub fn payload(&self) -> *mut u8 {
        self.get().payload()
    }
    pub fn shared(&self) -> LwGuard {
        self.checked(LwGuard::shared(self.lock()))
    }
    pub fn exclusive(&self) -> LwGuard {
        self.checked(LwGuard::exclusive(self.lock()))
    }
    /// Whether the slot still belongs to `key` (read under its lock).
    pub fn holds_key(&self) -> bool {
        let s = self.get();
        s.in_use && s.db == self.key.db && s.relnode == self.key.relnode
    }
    fn checked(&self, g: LwGuard) -> LwGuard {
        if !self.holds_key() {
            drop(g);
            crate::raise(PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE, "pg_hybrid index slot was reassigned while in use", "More indexes are active than pg_hybrid.max_indexes allows; retry the statement, and raise pg_hybrid.max_indexes.");
        }
        g
    }
}

/// The clock of `IndexSlot::last_used`: the statement's start (µs), which
/// PostgreSQL keeps anyway, or the time where no statement runs (workers).
fn use_tick() -> u64 {
    let t = unsafe { pg_sys::GetCurrentStatementStartTimestamp() };
    let t = if t > 0 { t } else { unsafe { pg_sys::GetCurrentTimestamp() } };
    t.max(1) as u64
}

/// Notes a use of slot `s`. A slot used all the time is written once a
/// second, not once per statement: every backend writing one cache line per
/// scan costs more than eviction gains from a finer order.
fn touch(s: &IndexSlot, tick: u64) {
    if tick > s.last_used.load(AtomicOrdering::Relaxed) + 1_000_000 {
        s.last_used.store(tick, AtomicOrdering::Relaxed);
    }
}

/// Finds or creates the slot of `rel`. A created slot has an invalid dual
/// stage, so its first user rebuilds it from the index pages.
///
/// The slot this backend found last for `rel` is checked without the
/// registry lock: a slot reassigned under us is caught anyway, under the
/// slot's own lock (`SlotRef::shared`/`exclusive`), since nothing keeps it
/// from being reassigned between this lookup and that lock either way.
pub unsafe fn slot_for(rel: pg_sys::Relation) -> SlotRef {
    let key = slot_key(rel);
    let h = header();
    let tick = use_tick();
    if let Some(i) = hinted(key) {
        touch(&*h.slot(i), tick);
        return SlotRef { index: i, slot: h.slot(i), key };
    }
    {
        let _g = LwGuard::shared(lock(LOCK_REGISTRY));
        if let Some(i) = find(key) {
            touch(&*h.slot(i), tick);
            return SlotRef { index: i, slot: h.slot(i), key };
        }
    }
    let _g = LwGuard::exclusive(lock(LOCK_REGISTRY));
    if let Some(i) = find(key) {
        return SlotRef { index: i, slot: h.slot(i), key };
    }
    let i = match (0..h.max_indexes as usize).find(|&i| !(*h.slot(i)).in_use) {
        Some(i) => i,
        None => evict().unwrap_or_else(|| {
            crate::raise(PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, format!(
                    "pg_hybrid.max_indexes ({}) indexes with a dynamic stage are in use",
                    h.max_indexes
                ), "Raise pg_hybrid.max_indexes in postgresql.conf and restart, or run pg_hybrid.merge() on idle indexes.");
        }),
    };
    let s = h.slot(i);
    {
        // Whoever still holds a SlotRef of the old key finds the new key
        // under this lock and stops (`SlotRef::checked`).
        let _sg = LwGuard::exclusive(slot_lock(i));
        payload_ops().reset((*s).payload());
        (*s).in_use = true;
        (*s).db = key.db;
        (*s).relnode = key.relnode;
        (*s).index_oid = (*rel).rd_id;
        (*s).last_used.store(tick, AtomicOrdering::Relaxed);
    }
    SlotRef { index: i, slot: s, key }
}

/// Whether `slot`, found earlier for `rel`, still holds it (a slot kept
/// from an ended scan for the next, engine/scan.rs); notes the use as
/// `slot_for` does. Reassignment after this is caught as with any SlotRef,
/// under the slot's lock.
pub unsafe fn still_for(rel: pg_sys::Relation, slot: SlotRef) -> bool {
    let key = slot_key(rel);
    if slot.key != key || !slot_matches(slot.index, key) {
        return false;
    }
    touch(&*header().slot(slot.index), use_tick());
    true
}

/// Finds the slot of `rel` without creating one.
pub unsafe fn existing_slot(rel: pg_sys::Relation) -> Option<SlotRef> {
    let key = slot_key(rel);
    let _g = LwGuard::shared(lock(LOCK_REGISTRY));
    find(key).map(|i| SlotRef { index: i, slot: header().slot(i), key })
}

thread_local! {
    /// Where this backend last found each index; `hinted` checks that the
    /// slot still holds the key, so a stale hint only costs the full search.
    static HINTS: std::cell::RefCell<pg_hybrid_core::fast_hash::FastMap<SlotKey, usize>> =
        std::cell::RefCell::new(Default::default());
}

fn slot_matches(i: usize, key: SlotKey) -> bool {
    let h = header();
    if i >= h.max_indexes as usize {
        return false;
    }
    let s = unsafe { &*h.slot(i) };
    s.in_use && s.db == key.db && s.relnode == key.relnode
}

/// The slot this backend last found for `key`, if it still holds `key`.
fn hinted(key: SlotKey) -> Option<usize> {
    HINTS.with(|m| m.borrow().get(&key).copied()).filter(|&i| slot_matches(i, key))
}

/// The slot of `key`; caller holds the registry lock.
unsafe fn find(key: SlotKey) -> Option<usize> {
    if let Some(i) = hinted(key) {
        return Some(i);
    }
    let found = (0..header().max_indexes as usize).find(|&i| slot_matches(i, key));
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
        let idle = payload_ops().idle(s.payload());
        if gone || idle {
            let age = if gone { 0 } else { s.last_used.load(AtomicOrdering::Relaxed) };
            if best.map_or(true, |(a, _)| age < a) {
                best = Some((age, i));
            }
        }
    }
    let (_, i) = best?;
    let _sg = LwGuard::exclusive(slot_lock(i));
    let s = h.slot(i);
    payload_ops().reset((*s).payload());
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

/// Drops the slots of `index_oid` in database `db` (every storage it had:
/// DROP, or REINDEX/TRUNCATE giving it a new relfilenode) and, if given, the
/// slot of the relfilenode `also` (a relfilenode number the system reused).
/// The dropped state is a cache: if the dropping transaction rolls back, the
/// next user rebuilds the slot from the delta log.
pub unsafe fn forget_index(db: pg_sys::Oid, index_oid: pg_sys::Oid, also: Option<SlotKey>) -> usize {
    forget_where(|s| (s.db == db && s.index_oid == index_oid) || also.is_some_and(|k| s.db == k.db && s.relnode == k.relnode))
}

/// Drops every slot of a database that is being dropped.
pub unsafe fn forget_database(db: pg_sys::Oid) -> usize {
    forget_where(|s| s.db == db)
}

unsafe fn forget_where(matches: impl Fn(&IndexSlot) -> bool) -> usize {
    let h = header();
    let _g = LwGuard::exclusive(lock(LOCK_REGISTRY));
    let mut n = 0;
    for i in 0..h.max_indexes as usize {
        let s = h.slot(i);
        if (*s).in_use && matches(&*s) {
            let _sg = LwGuard::exclusive(slot_lock(i));
            payload_ops().reset((*s).payload());
            (*s).in_use = false;
            n += 1;
        }
    }
    n
}

/// Under arena pressure, asks a background worker to merge the index (of any
/// database) that holds the most arena blocks, unless it is merging already.
/// An inserting index that is small would otherwise merge itself on every
/// insert while idle indexes keep the memory. At most one request per 100 ms.
pub unsafe fn merge_largest_elsewhere(this: SlotRef) {
    let h = header();
    let now = (pg_sys::GetCurrentTimestamp() / 1000) as u64;
    let last = h.pressure_ms.load(AtomicOrdering::Relaxed);
    if now < last + 100
        || h.pressure_ms.compare_exchange(last, now, AtomicOrdering::Relaxed, AtomicOrdering::Relaxed).is_err()
    {
        return;
    }
    let ops = payload_ops();
    let victim = {
        let _g = LwGuard::shared(lock(LOCK_REGISTRY));
        (0..h.max_indexes as usize)
            .filter(|&i| i != this.index)
            .map(|i| (i, &*h.slot(i)))
            .filter(|(_, s)| s.in_use)
            .map(|(i, s)| (i, s, ops.arena_blocks(s.payload())))
            .max_by_key(|&(_, _, blocks)| blocks)
            .filter(|&(_, _, blocks)| blocks as usize * 64 >= h.nblocks as usize)
            .map(|(i, s, _)| (i, s.db, s.index_oid))
    };
    let Some((i, db, oid)) = victim else { return };
    {
        let _sg = LwGuard::exclusive(slot_lock(i));
        let s = &mut *h.slot(i);
        if !s.in_use || s.db != db || s.index_oid != oid || !ops.claim_merge(s.payload()) {
            return;
        }
    }
    if !crate::workers::launch_merge_worker(db, oid) {
        let _sg = LwGuard::exclusive(slot_lock(i));
        ops.unclaim_merge((*h.slot(i)).payload());
    }
}

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

/// Frees the shared state of dropped indexes and databases at once, instead
/// of leaving it to eviction.
pub unsafe fn install_drop_hook() {
    PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
    pg_sys::object_access_hook = Some(object_access);
}

#[pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: std::os::raw::c_int,
    arg: *mut std::ffi::c_void,
) {
    if let Some(prev) = PREV_OBJECT_ACCESS {
        prev(access, class_id, object_id, sub_id, arg);
    }
    if access != pg_sys::ObjectAccessType::OAT_DROP || !super::arena::available() {
        return;
    }
    if class_id == pg_sys::RelationRelationId && sub_id == 0 {
        forget_index(pg_sys::MyDatabaseId, object_id, None);
    } else if class_id == pg_sys::DatabaseRelationId {
        forget_database(object_id);
    }
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.arena_stats() RETURNS TABLE (
    arena_bytes bigint, free_bytes bigint, slots bigint, slots_in_use bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'arena_stats_wrapper';
COMMENT ON FUNCTION pg_hybrid.arena_stats() IS 'size and use of the shared-memory arena (pg_hybrid.shared_memory) holding dynamic stages and Bloom filters';
")]
fn arena_stats() -> TableIterator<
    'static,
    (name!(arena_bytes, i64), name!(free_bytes, i64), name!(slots, i64), name!(slots_in_use, i64)),
> {
    crate::require_preload();
    let h = header();
    let block = pg_hybrid_core::dynamic::DYN_BLOCK_SIZE as i64;
    let in_use = {
        let _g = LwGuard::shared(lock(LOCK_REGISTRY));
        (0..h.max_indexes as usize).filter(|&i| unsafe { (*h.slot(i)).in_use }).count()
    };
    TableIterator::once((
        h.nblocks as i64 * block,
        h.free_blocks.load(AtomicOrdering::Relaxed) as i64 * block,
        h.max_indexes as i64,
        in_use as i64,
    ))
}
