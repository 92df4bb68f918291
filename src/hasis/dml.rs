//! DELETE, UPDATE and row locks: heap's protocol on hasis row headers.
//!
//! A modification locks the block holding the version exclusively (with
//! the extent's header block shared, so no compaction moves it), asks
//! `HeapTupleSatisfiesUpdate` what state the version is in, and either
//! stamps the MVCC fields in place (one WAL record) or waits for the
//! transaction in xmax and looks again. As in heap, waiters queue on the
//! tuple's heavyweight lock first, so a row hammered by many sessions is
//! handed out in order.
//!
//! Simplifications against heap, each safe but stricter (README.md "What
//! does not work yet"):
//! * row locks never share: a FOR SHARE / FOR KEY SHARE lock held by a
//!   running transaction makes every other locker or writer wait (heap
//!   would let compatible ones through with a MultiXact), so two sessions
//!   taking FOR SHARE on the same rows in opposite orders can deadlock
//!   where heap would not;
//! * every UPDATE counts as a key update (LockTupleExclusive, KEYS_UPDATED),
//!   so FOR KEY SHARE lockers wait for non-key updates too.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::row::Mvcc;
use pg_hybrid_core::tid::Tid;

use super::relation::{self, Located, Lookup, Meta};
use super::tuple;
use super::visibility::*;
use crate::storage::buffer::Lock;

use pg_sys::TM_Result::*;

/// The heavyweight tuple lock a waiter queues on, per row-lock strength
/// (heap's tupleLockExtraInfo).
#[allow(non_upper_case_globals)]
fn heavy_mode(mode: pg_sys::LockTupleMode::Type) -> pg_sys::LOCKMODE {
    use pg_sys::LockTupleMode::*;
    (match mode {
        LockTupleKeyShare => pg_sys::AccessShareLock,
        LockTupleShare => pg_sys::RowShareLock,
        LockTupleNoKeyExclusive => pg_sys::ExclusiveLock,
        _ => pg_sys::AccessExclusiveLock,
    }) as pg_sys::LOCKMODE
}

/// Infomask lock bits of a row lock.
#[allow(non_upper_case_globals)]
fn lock_bits(mode: pg_sys::LockTupleMode::Type) -> u16 {
    use pg_sys::LockTupleMode::*;
    match mode {
        LockTupleKeyShare => HEAP_XMAX_KEYSHR_LOCK,
        LockTupleShare => HEAP_XMAX_SHR_LOCK,
        _ => HEAP_XMAX_EXCL_LOCK,
    }
}

/// The strength of a lock-only xmax, for comparing with a requested mode.
#[allow(non_upper_case_globals)]
fn held_mode(m: &Mvcc) -> pg_sys::LockTupleMode::Type {
    use pg_sys::LockTupleMode::*;
    let bits = m.infomask & HEAP_LOCK_MASK;
    if bits == HEAP_XMAX_EXCL_LOCK {
        if m.infomask2 & HEAP_KEYS_UPDATED != 0 {
            LockTupleExclusive
        } else {
            LockTupleNoKeyExclusive
        }
    } else if bits == HEAP_XMAX_SHR_LOCK {
        LockTupleShare
    } else {
        LockTupleKeyShare
    }
}

/// The heavyweight tuple lock, released on drop (PostgreSQL releases it
/// itself at abort).
struct TupleLock {
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointerData,
    mode: pg_sys::LOCKMODE,
    held: bool,
}

impl TupleLock {
    fn new(rel: pg_sys::Relation, tid: Tid, mode: pg_sys::LOCKMODE) -> Self {
        TupleLock { rel, tid: to_item_pointer(tid), mode, held: false }
    }
    /// Takes the lock under `policy`; false if it would have to wait and
    /// the policy is to skip.
    unsafe fn take(&mut self, policy: pg_sys::LockWaitPolicy::Type) -> bool {
        if self.held {
            return true;
        }
        match policy {
            pg_sys::LockWaitPolicy::LockWaitBlock => pg_sys::LockTuple(self.rel, &mut self.tid, self.mode),
            _ => {
                if !pg_sys::ConditionalLockTuple(self.rel, &mut self.tid, self.mode) {
                    if policy == pg_sys::LockWaitPolicy::LockWaitError {
                        lock_not_available(self.rel);
                    }
                    return false;
                }
            }
        }
        self.held = true;
        true
    }
}

impl Drop for TupleLock {
    fn drop(&mut self) {
        if self.held && !std::thread::panicking() {
            unsafe { pg_sys::UnlockTuple(self.rel, &mut self.tid, self.mode) };
        }
    }
}

unsafe fn lock_not_available(rel: pg_sys::Relation) -> ! {
    crate::raise(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        format!("could not obtain lock on row in relation \"{}\"", crate::storage::page::rel_name(rel)),
        "Another transaction holds a lock on the row; retry, or use SKIP LOCKED.",
    )
}

/// Waits for `xid` to end under `policy`; false if the policy is to skip.
unsafe fn wait_for(rel: pg_sys::Relation, xid: pg_sys::TransactionId, tid: Tid, policy: pg_sys::LockWaitPolicy::Type, oper: pg_sys::XLTW_Oper::Type) -> bool {
    match policy {
        pg_sys::LockWaitPolicy::LockWaitBlock => {
            let mut ip = to_item_pointer(tid);
            pg_sys::XactLockTableWait(xid, rel, &mut ip, oper);
            true
        }
        _ => {
            if pg_sys::ConditionalXactLockTableWait(xid) {
                return true;
            }
            if policy == pg_sys::LockWaitPolicy::LockWaitError {
                lock_not_available(rel);
            }
            false
        }
    }
}

/// What a modification found.
enum Found {
    /// The version, exclusively locked, and what HeapTupleSatisfiesUpdate
    /// said (TM_BeingModified never: it was waited out, or it is a lock of
    /// this transaction, `own_lock`).
    Version { loc: Located, result: pg_sys::TM_Result::Type, own_lock: bool },
    /// The TID names no version.
    Gone,
    /// It would have to wait and the policy says skip.
    WouldBlock,
}

unsafe fn acquire(rel: pg_sys::Relation, meta: &Meta, tid: Tid, cid: pg_sys::CommandId, policy: pg_sys::LockWaitPolicy::Type, tuple_lock: &mut TupleLock, oper: pg_sys::XLTW_Oper::Type) -> Found {
    loop {
        let mut loc = match relation::locate(rel, meta, tid, Lock::Exclusive) {
            Lookup::Found(l) => l,
            Lookup::Missing | Lookup::Dead => return Found::Gone,
        };
        let mut ht = HeaderTuple::new(&loc.header.mvcc, tid, (*rel).rd_id);
        let before = ht.infomask();
        let result = pg_sys::HeapTupleSatisfiesUpdate(ht.ptr(), cid, loc.buf.buffer());
        let after = ht.infomask();
        if after != before {
            loc.set_hint(after);
            loc.header.mvcc.infomask = after;
        }
        if result != TM_BeingModified {
            return Found::Version { loc, result, own_lock: false };
        }
        let m = loc.header.mvcc;
        if m.infomask & HEAP_XMAX_IS_MULTI != 0 {
            super::format_error(rel, tid.block, pg_hybrid_core::hasis::Error::Corrupt("MultiXact in a hasis row header (hasis never writes one)"));
        }
        if pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmax)) {
            return Found::Version { loc, result: TM_Ok, own_lock: true };
        }
        drop(loc);
        if !tuple_lock.take(policy) || !wait_for(rel, pg_sys::TransactionId::from(m.xmax), tid, policy, oper) {
            return Found::WouldBlock;
        }
    }
}

unsafe fn fill_failure(tmfd: *mut pg_sys::TM_FailureData, loc: &Located, result: pg_sys::TM_Result::Type, rel: pg_sys::Relation) {
    let m = loc.header.mvcc;
    (*tmfd).ctid = to_item_pointer(m.ctid);
    (*tmfd).xmax = pg_sys::TransactionId::from(m.xmax);
    (*tmfd).cmax = if result == TM_SelfModified {
        let mut ht = HeaderTuple::new(&m, loc.tid, (*rel).rd_id);
        pg_sys::HeapTupleHeaderGetCmax(ht.header())
    } else {
        pg_sys::InvalidCommandId
    };
    (*tmfd).traversed = false;
}

/// The MVCC fields after this transaction deletes or updates the version
/// (heap_delete / heap_update's stamp of the old tuple).
unsafe fn stamp_removed(rel: pg_sys::Relation, loc: &Located, cid: pg_sys::CommandId, successor: Tid) -> Mvcc {
    let mut m = loc.header.mvcc;
    let mut ht = HeaderTuple::new(&m, loc.tid, (*rel).rd_id);
    let mut cmax = cid;
    let mut iscombo = false;
    pg_sys::HeapTupleHeaderAdjustCmax(ht.header(), &mut cmax, &mut iscombo);
    m.xmax = pg_sys::GetCurrentTransactionId().into_inner();
    m.cid = cmax;
    m.infomask &= !(HEAP_XMAX_BITS | HEAP_COMBOCID);
    if iscombo {
        m.infomask |= HEAP_COMBOCID;
    }
    m.infomask2 |= HEAP_KEYS_UPDATED;
    m.ctid = successor;
    m
}

unsafe fn meta_or_invisible(rel: pg_sys::Relation, tid: Tid, what: &str) -> Meta {
    relation::meta_covering(rel, tid).unwrap_or_else(|| invisible(what))
}

fn invisible(what: &str) -> ! {
    crate::raise(PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, format!("attempted to {what} invisible tuple"), "This is a bug in pg_hybrid's hasis; please report it.")
}

pub unsafe fn delete(
    rel: pg_sys::Relation,
    tid: Tid,
    cid: pg_sys::CommandId,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    let meta = meta_or_invisible(rel, tid, "delete");
    let policy = if wait { pg_sys::LockWaitPolicy::LockWaitBlock } else { pg_sys::LockWaitPolicy::LockWaitSkip };
    let mut tlock = TupleLock::new(rel, tid, pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE);
    let (mut loc, mut result) = match acquire(rel, &meta, tid, cid, policy, &mut tlock, pg_sys::XLTW_Oper::XLTW_Delete) {
        Found::Version { loc, result, .. } => (loc, result),
        Found::Gone => invisible("delete"),
        Found::WouldBlock => return TM_WouldBlock,
    };
    if result == TM_Invisible {
        invisible("delete");
    }
    if result == TM_Ok && !crosscheck.is_null() && !visible(rel, crosscheck, &loc.header.mvcc, tid, loc.buf.buffer()).0 {
        result = TM_Updated;
    }
    if result != TM_Ok {
        fill_failure(tmfd, &loc, result, rel);
        return result;
    }
    let mut ip = to_item_pointer(tid);
    CheckForSerializableConflictIn(rel, &mut ip, tid.block);
    let schema = tuple::schema(rel);
    let old_row = tuple::decode(rel, &schema, loc.header.natts, loc.payload(), tid.block);
    let old_mvcc = loc.header.mvcc;
    let m = stamp_removed(rel, &loc, cid, tid);
    loc.stamp(rel, &m);
    drop(loc);
    tuple::toast_delete(rel, tuple::form(rel, &old_row, &old_mvcc, tid), false);
    pg_sys::pgstat_count_heap_delete(rel);
    TM_Ok
}

#[allow(clippy::too_many_arguments)]
pub unsafe fn update(
    rel: pg_sys::Relation,
    otid: Tid,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    lockmode: *mut pg_sys::LockTupleMode::Type,
    update_indexes: *mut bool,
) -> pg_sys::TM_Result::Type {
    *lockmode = pg_sys::LockTupleMode::LockTupleExclusive;
    *update_indexes = true;
    let meta = meta_or_invisible(rel, otid, "update");
    let policy = if wait { pg_sys::LockWaitPolicy::LockWaitBlock } else { pg_sys::LockWaitPolicy::LockWaitSkip };
    let mut tlock = TupleLock::new(rel, otid, pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE);
    let (mut loc, mut result) = match acquire(rel, &meta, otid, cid, policy, &mut tlock, pg_sys::XLTW_Oper::XLTW_Update) {
        Found::Version { loc, result, .. } => (loc, result),
        Found::Gone => invisible("update"),
        Found::WouldBlock => return TM_WouldBlock,
    };
    if result == TM_Invisible {
        invisible("update");
    }
    if result == TM_Ok && !crosscheck.is_null() && !visible(rel, crosscheck, &loc.header.mvcc, otid, loc.buf.buffer()).0 {
        result = TM_Updated;
    }
    if result != TM_Ok {
        fill_failure(tmfd, &loc, result, rel);
        return result;
    }
    let mut ip = to_item_pointer(otid);
    CheckForSerializableConflictIn(rel, &mut ip, otid.block);
    let schema = tuple::schema(rel);
    let old_row = tuple::decode(rel, &schema, loc.header.natts, loc.payload(), otid.block);
    let old_mvcc = loc.header.mvcc;
    let xid = pg_sys::GetCurrentTransactionId().into_inner();
    // Mark the old version first, pointing at itself: the new version's
    // place is not known until it is inserted, and the insert may need this
    // extent's header block exclusively. Until this transaction commits,
    // nobody can act on the xmax (waiters wait for it), and it sets the
    // successor below before it can commit.
    let m = stamp_removed(rel, &loc, cid, otid);
    loc.stamp(rel, &m);
    drop(loc);

    let old_tuple = tuple::form(rel, &old_row, &old_mvcc, otid);
    let new = tuple::prepare(rel, slot, old_tuple, 0);
    let mut new_mvcc = new_version(xid, cid, true);
    // As heap_update: a row lock this transaction held on the old version
    // (ON CONFLICT DO UPDATE takes one first) carries over to the new one
    // as a key-share lock, so `RETURNING (xmax = 0) AS inserted` reads as
    // on heap.
    let held = old_mvcc.infomask & HEAP_XMAX_INVALID == 0 && old_mvcc.infomask & HEAP_XMAX_LOCK_ONLY != 0 && old_mvcc.xmax != 0;
    if held && pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(old_mvcc.xmax)) {
        new_mvcc.xmax = old_mvcc.xmax;
        new_mvcc.infomask = (new_mvcc.infomask & !HEAP_XMAX_INVALID) | HEAP_XMAX_KEYSHR_LOCK | HEAP_XMAX_LOCK_ONLY;
    }
    let ntid = relation::insert(rel, new.natts, new_mvcc, &new.payload);

    let meta = relation::meta_covering(rel, otid).expect("metapage exists");
    match relation::locate(rel, &meta, otid, Lock::Exclusive) {
        Lookup::Found(mut loc) if loc.header.mvcc.xmax == xid => {
            let mut m = loc.header.mvcc;
            m.ctid = ntid;
            loc.stamp(rel, &m);
        }
        _ => super::format_error(rel, otid.block, pg_hybrid_core::hasis::Error::Corrupt("updated version vanished before its successor was linked")),
    }
    (*slot).tts_tid = to_item_pointer(ntid);
    (*slot).tts_tableOid = (*rel).rd_id;
    tuple::stamp_slot(slot, &Mvcc { ctid: ntid, ..new_mvcc }, ntid);
    pg_sys::pgstat_count_heap_update(rel, false);
    TM_Ok
}

#[allow(clippy::too_many_arguments)]
pub unsafe fn lock(
    rel: pg_sys::Relation,
    tid_io: *mut pg_sys::ItemPointerData,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    policy: pg_sys::LockWaitPolicy::Type,
    flags: u8,
    tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    let mut tid = from_item_pointer(&*tid_io);
    let Some(mut meta) = relation::meta_covering(rel, tid) else { return TM_Deleted };
    (*tmfd).traversed = false;
    'retry: loop {
        let mut tlock = TupleLock::new(rel, tid, heavy_mode(mode));
        let (mut loc, result, own_lock) = match acquire(rel, &meta, tid, cid, policy, &mut tlock, pg_sys::XLTW_Oper::XLTW_Lock) {
            Found::Version { loc, result, own_lock } => (loc, result, own_lock),
            Found::Gone => return TM_Deleted,
            Found::WouldBlock => return TM_WouldBlock,
        };
        if result == TM_Ok {
            let mut m = loc.header.mvcc;
            let stronger = !own_lock || held_mode(&m) < mode;
            if stronger {
                if !own_lock {
                    m.xmax = pg_sys::GetCurrentTransactionId().into_inner();
                }
                // Keeping an older subtransaction's xid with a stronger
                // mode holds the lock a little longer than asked, never
                // shorter.
                m.infomask &= !HEAP_XMAX_BITS;
                m.infomask |= HEAP_XMAX_LOCK_ONLY | lock_bits(mode);
                m.infomask2 &= !HEAP_KEYS_UPDATED;
                if mode == pg_sys::LockTupleMode::LockTupleExclusive {
                    m.infomask2 |= HEAP_KEYS_UPDATED;
                }
                m.ctid = tid;
                loc.stamp(rel, &m);
            }
            tuple::store(rel, slot, &mut tuple::SlotSchema::default(), loc.header.natts, loc.payload(), &loc.header.mvcc, tid);
            *tid_io = to_item_pointer(tid);
            return TM_Ok;
        }
        fill_failure(tmfd, &loc, result, rel);
        // As heapam_tuple_lock, the slot gets the version whatever the
        // result: ON CONFLICT DO UPDATE reads xmin of a TM_Invisible one to
        // tell "affects a row a second time" from a bug.
        tuple::store(rel, slot, &mut tuple::SlotSchema::default(), loc.header.natts, loc.payload(), &loc.header.mvcc, tid);
        if result != TM_Updated || (flags as u32 & pg_sys::TUPLE_LOCK_FLAG_FIND_LAST_VERSION) == 0 {
            return result;
        }
        let next = loc.header.mvcc.ctid;
        drop(loc);
        drop(tlock);
        if next == tid {
            return TM_Deleted;
        }
        // Walk the update chain to the newest version (heapam_tuple_lock's
        // loop): each successor's xmin must be its predecessor's xmax.
        let mut prior_xmax = (*tmfd).xmax.into_inner();
        tid = next;
        (*tmfd).traversed = true;
        loop {
            if meta.extent_of(tid.block).is_none() {
                meta = relation::meta_covering(rel, tid).expect("metapage exists");
            }
            let loc = match relation::locate(rel, &meta, tid, Lock::Share) {
                Lookup::Found(l) => l,
                _ => return TM_Deleted,
            };
            let m = loc.header.mvcc;
            let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
            dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
            let (vis, hint) = visible(rel, &mut dirty, &m, tid, loc.buf.buffer());
            if let Some(h) = hint {
                loc.set_hint(h);
            }
            if m.xmin != prior_xmax {
                return TM_Deleted;
            }
            if vis {
                if dirty.xmin != pg_sys::InvalidTransactionId {
                    crate::raise(
                        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                        format!("t_xmin {} is uncommitted in tuple ({},{}) to be updated in table \"{}\"", m.xmin, tid.block, tid.offset, crate::storage::page::rel_name(rel)),
                        "",
                    );
                }
                if dirty.xmax != pg_sys::InvalidTransactionId {
                    drop(loc);
                    if !wait_for(rel, dirty.xmax, tid, policy, pg_sys::XLTW_Oper::XLTW_FetchUpdated) {
                        return TM_WouldBlock;
                    }
                    continue;
                }
                if pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(prior_xmax)) {
                    let mut ht = HeaderTuple::new(&m, tid, (*rel).rd_id);
                    let cmin = pg_sys::HeapTupleHeaderGetCmin(ht.header());
                    if cmin >= cid {
                        (*tmfd).xmax = pg_sys::TransactionId::from(prior_xmax);
                        (*tmfd).cmax = cmin;
                        return TM_SelfModified;
                    }
                }
                drop(loc);
                continue 'retry;
            }
            if m.ctid == tid {
                return TM_Deleted;
            }
            prior_xmax = m.xmax;
            tid = m.ctid;
        }
    }
}

/// Ends a speculative insertion (INSERT ... ON CONFLICT) of this
/// transaction's version at `tid`. Success replaces the token in ctid by
/// the version's own TID (heap_finish_speculative). Failure (a conflict
/// found in a unique index) kills the version at once, as
/// heap_abort_speculative does: xmin becomes InvalidTransactionId, so no
/// snapshot sees it and waiters on the token find it gone; compaction
/// removes it, VACUUM its index entries. TOASTed values it stored are
/// deleted.
pub unsafe fn complete_speculative(rel: pg_sys::Relation, tid: Tid, succeeded: bool) {
    let meta = meta_or_invisible(rel, tid, "complete speculative insertion of");
    let mut loc = match relation::locate(rel, &meta, tid, Lock::Exclusive) {
        Lookup::Found(loc) => loc,
        _ => invisible("complete speculative insertion of"),
    };
    let xid = pg_sys::GetCurrentTransactionId().into_inner();
    let mut m = loc.header.mvcc;
    if m.xmin != xid || m.ctid.offset != relation::SPEC_TOKEN_OFFSET {
        crate::raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("hasis version {tid:?} is not a speculative insertion of this transaction"),
            "This is a bug in pg_hybrid's hasis; please report it.",
        );
    }
    m.ctid = tid;
    if succeeded {
        loc.stamp(rel, &m);
        return;
    }
    // InvalidTransactionId, hinted invalid so no check has to ask the clog.
    m.xmin = 0;
    m.infomask &= !(HEAP_XMAX_BITS | HEAP_XMIN_COMMITTED);
    m.infomask |= HEAP_XMIN_INVALID | HEAP_XMAX_INVALID;
    m.infomask2 &= !HEAP_KEYS_UPDATED;
    loc.stamp(rel, &m);
    let schema = tuple::schema(rel);
    let row = tuple::decode(rel, &schema, loc.header.natts, loc.payload(), tid.block);
    drop(loc);
    tuple::toast_delete(rel, tuple::form(rel, &row, &m, tid), true);
    pg_sys::pgstat_count_heap_delete(rel);
}
