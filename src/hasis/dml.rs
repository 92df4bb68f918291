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
//! Row locks share as heap's do: a lock whose mode is compatible with the
//! modes of the running lockers joins them in a MultiXact. An UPDATE that
//! changes no key column (no column of a unique index a foreign key could
//! reference) is a no-key update (LockTupleNoKeyExclusive, no
//! KEYS_UPDATED), as heap's: it does not wait for FOR KEY SHARE lockers
//! (foreign key checks), which then share the old version's xmax with it
//! in a MultiXact holding the update, and a FOR KEY SHARE lock passes a
//! no-key update, running or committed, and also locks the newer versions
//! of the row (heap_lock_updated_tuple), so a later key update or delete
//! of them waits for the locker.

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

/// The MultiXact member status of a row lock.
#[allow(non_upper_case_globals)]
fn lock_status(mode: pg_sys::LockTupleMode::Type) -> pg_sys::MultiXactStatus::Type {
    use pg_sys::LockTupleMode::*;
    use pg_sys::MultiXactStatus::*;
    match mode {
        LockTupleKeyShare => MultiXactStatusForKeyShare,
        LockTupleShare => MultiXactStatusForShare,
        LockTupleNoKeyExclusive => MultiXactStatusForNoKeyUpdate,
        _ => MultiXactStatusForUpdate,
    }
}

#[allow(non_upper_case_globals)]
fn status_mode(status: pg_sys::MultiXactStatus::Type) -> pg_sys::LockTupleMode::Type {
    use pg_sys::LockTupleMode::*;
    use pg_sys::MultiXactStatus::*;
    match status {
        MultiXactStatusForKeyShare => LockTupleKeyShare,
        MultiXactStatusForShare => LockTupleShare,
        MultiXactStatusForNoKeyUpdate | MultiXactStatusNoKeyUpdate => LockTupleNoKeyExclusive,
        _ => LockTupleExclusive,
    }
}

/// Whether two row-lock modes conflict (heap's table: key share conflicts
/// with exclusive only, share with the two exclusive modes, no-key
/// exclusive with all but key share, exclusive with everything).
#[allow(non_upper_case_globals)]
fn modes_conflict(a: pg_sys::LockTupleMode::Type, b: pg_sys::LockTupleMode::Type) -> bool {
    use pg_sys::LockTupleMode::*;
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    match lo {
        LockTupleKeyShare => hi == LockTupleExclusive,
        LockTupleShare => hi >= LockTupleNoKeyExclusive,
        _ => true,
    }
}

/// The infomask / infomask2 lock bits for a lock-only xmax of `mode`.
fn lock_only_bits(mode: pg_sys::LockTupleMode::Type) -> (u16, u16) {
    let keys = if mode == pg_sys::LockTupleMode::LockTupleExclusive { HEAP_KEYS_UPDATED } else { 0 };
    (HEAP_XMAX_LOCK_ONLY | lock_bits(mode), keys)
}

/// One running locker of a version.
#[derive(Clone, Copy)]
struct Locker {
    xid: pg_sys::TransactionId,
    mode: pg_sys::LockTupleMode::Type,
    mine: bool,
    /// The member updated or deleted the version (its mode is then the
    /// update's: exclusive for a key update or a delete, else no-key
    /// exclusive).
    updater: bool,
}

impl Locker {
    /// The member's MultiXact status.
    fn status(&self) -> pg_sys::MultiXactStatus::Type {
        use pg_sys::MultiXactStatus::*;
        match (self.updater, self.mode == pg_sys::LockTupleMode::LockTupleExclusive) {
            (true, true) => MultiXactStatusUpdate,
            (true, false) => MultiXactStatusNoKeyUpdate,
            (false, _) => lock_status(self.mode),
        }
    }
}

fn is_update_status(status: pg_sys::MultiXactStatus::Type) -> bool {
    use pg_sys::MultiXactStatus::*;
    status == MultiXactStatusNoKeyUpdate || status == MultiXactStatusUpdate
}

/// Every member of a version's valid xmax, running or not: a lock-only
/// xid, an updater, or the members of a MultiXact (lockers, and at most one
/// updater).
unsafe fn xmax_members(m: &Mvcc) -> Vec<Locker> {
    let current = |x: pg_sys::TransactionId| pg_sys::TransactionIdIsCurrentTransactionId(x);
    if m.infomask & HEAP_XMAX_IS_MULTI != 0 {
        let mut members: *mut pg_sys::MultiXactMember = std::ptr::null_mut();
        let n = pg_sys::GetMultiXactIdMembers(m.xmax.into(), &mut members, false, xmax_locked_only(m));
        let out = (0..n.max(0) as usize)
            .map(|i| *members.add(i))
            .map(|mm| Locker { xid: mm.xid, mode: status_mode(mm.status), mine: current(mm.xid), updater: is_update_status(mm.status) })
            .collect();
        if !members.is_null() {
            pg_sys::pfree(members as *mut std::ffi::c_void);
        }
        out
    } else {
        let xid = pg_sys::TransactionId::from(m.xmax);
        let updater = !xmax_locked_only(m);
        let mode = match (updater, m.infomask2 & HEAP_KEYS_UPDATED != 0) {
            (true, true) => pg_sys::LockTupleMode::LockTupleExclusive,
            (true, false) => pg_sys::LockTupleMode::LockTupleNoKeyExclusive,
            (false, _) => held_mode(m),
        };
        vec![Locker { xid, mode, mine: current(xid), updater }]
    }
}

/// The MVCC fields once this transaction joins the version's xmax with
/// `status` beside the members that stay (`keep`: running lockers, an
/// updater): heap's compute_new_xmax_infomask. Alone it is a plain xid;
/// with others a MultiXact, whose infomask bits say the strongest member's
/// mode (GetMultiXactIdHintBits), lock-only unless it holds an update.
unsafe fn add_member(m: &Mvcc, keep: &[Locker], status: pg_sys::MultiXactStatus::Type) -> Mvcc {
    let mut members: Vec<pg_sys::MultiXactMember> = keep.iter().map(|l| pg_sys::MultiXactMember { xid: l.xid, status: l.status() }).collect();
    members.push(pg_sys::MultiXactMember { xid: pg_sys::GetCurrentTransactionId(), status });
    with_xmax(m, &mut members)
}

/// `m` with an xmax of exactly `members`: none, a plain xid (an update's
/// carries no lock bits, KEYS_UPDATED for a key update; a lock's its
/// lock-only bits), or a MultiXact with heap's GetMultiXactIdHintBits.
unsafe fn with_xmax(m: &Mvcc, members: &mut [pg_sys::MultiXactMember]) -> Mvcc {
    let mut out = *m;
    out.infomask &= !HEAP_XMAX_BITS;
    out.infomask2 &= !HEAP_KEYS_UPDATED;
    match members {
        [] => {
            out.xmax = 0;
            out.infomask |= HEAP_XMAX_INVALID;
        }
        [one] => {
            out.xmax = one.xid.into_inner();
            let mode = status_mode(one.status);
            if is_update_status(one.status) {
                if mode == pg_sys::LockTupleMode::LockTupleExclusive {
                    out.infomask2 |= HEAP_KEYS_UPDATED;
                }
            } else {
                let (bits, keys) = lock_only_bits(mode);
                out.infomask |= bits;
                out.infomask2 |= keys;
            }
        }
        _ => {
            pg_sys::MultiXactIdSetOldestMember();
            let multi = pg_sys::MultiXactIdCreateFromMembers(members.len() as i32, members.as_mut_ptr());
            let strongest = members.iter().map(|mm| status_mode(mm.status)).max().unwrap_or(pg_sys::LockTupleMode::LockTupleKeyShare);
            let has_update = members.iter().any(|mm| is_update_status(mm.status));
            out.xmax = multi.into_inner();
            out.infomask |= HEAP_XMAX_IS_MULTI | lock_bits(strongest) | if has_update { 0 } else { HEAP_XMAX_LOCK_ONLY };
            if strongest == pg_sys::LockTupleMode::LockTupleExclusive {
                out.infomask2 |= HEAP_KEYS_UPDATED;
            }
        }
    }
    out
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
    /// said (TM_BeingModified never: it was waited out, or the running
    /// lockers are this transaction (`own_lock`) or compatible with the
    /// mode asked for (`share_with`)).
    Version { loc: Located, result: pg_sys::TM_Result::Type, own_lock: bool, share_with: Vec<Locker>, mine: Vec<Locker> },
    /// The TID names no version.
    Gone,
    /// It would have to wait and the policy says skip.
    WouldBlock,
}

/// Locks the version at `tid` exclusively for a change in `mode` (a delete
/// or key update: LockTupleExclusive; a no-key update:
/// LockTupleNoKeyExclusive), waiting out running transactions whose xmax
/// conflicts.
#[allow(clippy::too_many_arguments)]
unsafe fn acquire(
    rel: pg_sys::Relation,
    meta: &Meta,
    tid: Tid,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    policy: pg_sys::LockWaitPolicy::Type,
    tuple_lock: &mut TupleLock,
    oper: pg_sys::XLTW_Oper::Type,
) -> Found {
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
            return Found::Version { loc, result, own_lock: false, share_with: Vec::new(), mine: Vec::new() };
        }
        let m = loc.header.mvcc;
        // The members that still run. An updater that ended since the check
        // (or that the check could not see behind a MultiXact's running
        // lockers, this transaction's own included) decides: committed, the
        // version is updated or deleted (heap_update's can_continue test);
        // aborted, it is as if it had never been there. Whether a member
        // runs is asked before whether it committed, so no member falls
        // between the two.
        let mut members = Vec::new();
        for l in xmax_members(&m) {
            if l.mine || pg_sys::TransactionIdIsInProgress(l.xid) {
                members.push(l);
            } else if l.updater && pg_sys::TransactionIdDidCommit(l.xid) {
                let result = if m.ctid == tid { TM_Deleted } else { TM_Updated };
                return Found::Version { loc, result, own_lock: false, share_with: Vec::new(), mine: Vec::new() };
            }
        }
        let (mine, others): (Vec<Locker>, Vec<Locker>) = members.into_iter().partition(|l| l.mine);
        if others.is_empty() {
            return Found::Version { loc, result: TM_Ok, own_lock: !mine.is_empty(), share_with: Vec::new(), mine };
        }
        // A running updater counts with its update's mode: a no-key update
        // lets key-share lockers through (heap's conflict table).
        let blocking: Vec<Locker> = others.iter().copied().filter(|l| modes_conflict(l.mode, mode)).collect();
        if blocking.is_empty() {
            return Found::Version { loc, result: TM_Ok, own_lock: !mine.is_empty(), share_with: others, mine };
        }
        drop(loc);
        if !tuple_lock.take(policy) {
            return Found::WouldBlock;
        }
        for l in &blocking {
            if !wait_for(rel, l.xid, tid, policy, oper) {
                return Found::WouldBlock;
            }
        }
    }
}

unsafe fn fill_failure(tmfd: *mut pg_sys::TM_FailureData, loc: &Located, result: pg_sys::TM_Result::Type, rel: pg_sys::Relation) {
    let m = loc.header.mvcc;
    (*tmfd).ctid = to_item_pointer(m.ctid);
    (*tmfd).xmax = pg_sys::TransactionId::from(update_xid(&m));
    (*tmfd).cmax = if result == TM_SelfModified {
        let mut ht = HeaderTuple::new(&m, loc.tid, (*rel).rd_id);
        pg_sys::HeapTupleHeaderGetCmax(ht.header())
    } else {
        pg_sys::InvalidCommandId
    };
    (*tmfd).traversed = false;
}

/// A version a DELETE or UPDATE may change, as `to_modify` found it.
struct Modifiable {
    loc: Located,
    own_lock: bool,
    share_with: Vec<Locker>,
}

/// Why `to_modify` gave up.
enum Refused {
    /// The TID names no version.
    Gone,
    /// What to return (`tmfd` filled), TM_Invisible included.
    Result(pg_sys::TM_Result::Type),
}

/// `acquire` for a DELETE or UPDATE in `mode`, with heap's check of what it
/// found: a crosscheck snapshot (a foreign key check under REPEATABLE
/// READ) that does not see the version makes it TM_Updated.
#[allow(clippy::too_many_arguments)]
unsafe fn to_modify(
    rel: pg_sys::Relation,
    meta: &Meta,
    tid: Tid,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    policy: pg_sys::LockWaitPolicy::Type,
    tlock: &mut TupleLock,
    crosscheck: pg_sys::Snapshot,
    tmfd: *mut pg_sys::TM_FailureData,
    oper: pg_sys::XLTW_Oper::Type,
) -> Result<Modifiable, Refused> {
    match acquire(rel, meta, tid, cid, mode, policy, tlock, oper) {
        Found::Version { loc, mut result, own_lock, share_with, .. } => {
            if result == TM_Ok && !crosscheck.is_null() && !visible(rel, crosscheck, &loc.header.mvcc, tid, loc.buf.buffer()).0 {
                result = TM_Updated;
            }
            if result != TM_Ok {
                fill_failure(tmfd, &loc, result, rel);
                return Err(Refused::Result(result));
            }
            Ok(Modifiable { loc, own_lock, share_with })
        }
        Found::Gone => Err(Refused::Gone),
        Found::WouldBlock => Err(Refused::Result(TM_WouldBlock)),
    }
}

/// How a delete or update removes the old version: its lock mode and the
/// running key-share lockers it shares the version with (a no-key update
/// only).
struct Removal {
    mode: pg_sys::LockTupleMode::Type,
    keep: Vec<Locker>,
}

impl Removal {
    fn delete() -> Removal {
        Removal { mode: pg_sys::LockTupleMode::LockTupleExclusive, keep: Vec::new() }
    }
}

/// The MVCC fields after this transaction deletes or updates the version
/// (heap_delete / heap_update's stamp of the old tuple).
unsafe fn stamp_removed(rel: pg_sys::Relation, loc: &Located, cid: pg_sys::CommandId, successor: Tid, how: &Removal) -> Mvcc {
    removed_mvcc(rel, &loc.header.mvcc, loc.tid, cid, successor, how)
}

/// `stamp_removed` for the version at `tid` whose fields are `m`.
unsafe fn removed_mvcc(rel: pg_sys::Relation, m: &Mvcc, tid: Tid, cid: pg_sys::CommandId, successor: Tid, how: &Removal) -> Mvcc {
    let mut ht = HeaderTuple::new(m, tid, (*rel).rd_id);
    let mut cmax = cid;
    let mut iscombo = false;
    pg_sys::HeapTupleHeaderAdjustCmax(ht.header(), &mut cmax, &mut iscombo);
    let status = if how.mode == pg_sys::LockTupleMode::LockTupleExclusive {
        pg_sys::MultiXactStatus::MultiXactStatusUpdate
    } else {
        pg_sys::MultiXactStatus::MultiXactStatusNoKeyUpdate
    };
    let mut m = add_member(m, &how.keep, status);
    m.cid = cmax;
    m.infomask &= !HEAP_COMBOCID;
    if iscombo {
        m.infomask |= HEAP_COMBOCID;
    }
    // Set again by a HOT update; a stale bit from an aborted one goes.
    m.infomask2 &= !HEAP_HOT_UPDATED;
    m.ctid = successor;
    m
}

/// Whether an UPDATE from `old` to `new` leaves every indexed column as it
/// was, byte for byte (heap_update's HOT test: the same datum, TOAST
/// pointers included). Whole-row and system-column references in index
/// expressions or predicates count as changed.
unsafe fn indexed_columns_unchanged(rel: pg_sys::Relation, old: pg_sys::HeapTuple, new: pg_sys::HeapTuple) -> bool {
    let attrs = pg_sys::RelationGetIndexAttrBitmap(rel, pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_ALL);
    let same = !tuple::columns_differ(rel, attrs, old, new);
    pg_sys::bms_free(attrs);
    same
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
    let mut loc = match to_modify(rel, &meta, tid, cid, pg_sys::LockTupleMode::LockTupleExclusive, policy, &mut tlock, crosscheck, tmfd, pg_sys::XLTW_Oper::XLTW_Delete) {
        Ok(v) => v.loc,
        Err(Refused::Gone) => invisible("delete"),
        Err(Refused::Result(r)) if r == TM_Invisible => invisible("delete"),
        Err(Refused::Result(r)) => return r,
    };
    let mut ip = to_item_pointer(tid);
    CheckForSerializableConflictIn(rel, &mut ip, tid.block);
    let schema = tuple::schema(rel);
    let old_tuple = tuple::form_payload(rel, &schema, loc.header.natts, loc.payload(), &loc.header.mvcc, tid, tid.block);
    let m = stamp_removed(rel, &loc, cid, tid, &Removal::delete());
    loc.stamp(rel, &m);
    drop(loc);
    // Before its TOAST values go: REPLICA IDENTITY FULL logs them inline.
    super::logical::log_delete(rel, old_tuple);
    tuple::toast_delete(rel, old_tuple, false);
    pg_sys::pgstat_count_heap_delete(rel);
    TM_Ok
}

/// Whether an UPDATE from `old` to the slot's row changes a key column: a
/// column of a unique index a foreign key could reference
/// (INDEX_ATTR_BITMAP_KEY), compared as heap_update does (the same datum,
/// TOAST pointers included). Such an update locks the row exclusively; any
/// other is a no-key update.
unsafe fn key_columns_changed(rel: pg_sys::Relation, old: pg_sys::HeapTuple, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let keys = pg_sys::RelationGetIndexAttrBitmap(rel, pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_KEY);
    if keys.is_null() {
        return false;
    }
    // Materialized in the slot, where `tuple::prepare` takes it again.
    let mut should_free = false;
    let new = pg_sys::ExecFetchSlotHeapTuple(slot, true, &mut should_free);
    let changed = tuple::columns_differ(rel, keys, old, new);
    pg_sys::bms_free(keys);
    changed
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
    *update_indexes = true;
    let meta = meta_or_invisible(rel, otid, "update");
    let policy = if wait { pg_sys::LockWaitPolicy::LockWaitBlock } else { pg_sys::LockWaitPolicy::LockWaitSkip };
    // The lock strength, as heap_update's: a no-key update first; if the
    // row's key columns change and key-share lockers hold the row, again
    // as a key update, which waits for them.
    let mut mode = pg_sys::LockTupleMode::LockTupleNoKeyExclusive;
    let mut tlock = TupleLock::new(rel, otid, heavy_mode(mode));
    let schema = tuple::schema(rel);
    let (loc, own_lock, keep, old_mvcc, old_tuple) = loop {
        let Modifiable { loc, own_lock, share_with } = match to_modify(rel, &meta, otid, cid, mode, policy, &mut tlock, crosscheck, tmfd, pg_sys::XLTW_Oper::XLTW_Update) {
            Ok(v) => v,
            Err(Refused::Gone) => invisible("update"),
            Err(Refused::Result(r)) if r == TM_Invisible => invisible("update"),
            Err(Refused::Result(r)) => {
                *lockmode = mode;
                return r;
            }
        };
        let old_mvcc = loc.header.mvcc;
        let old_tuple = tuple::form_payload(rel, &schema, loc.header.natts, loc.payload(), &old_mvcc, otid, otid.block);
        if mode != pg_sys::LockTupleMode::LockTupleExclusive && key_columns_changed(rel, old_tuple, slot) {
            mode = pg_sys::LockTupleMode::LockTupleExclusive;
            tlock = TupleLock::new(rel, otid, heavy_mode(mode));
            if !share_with.is_empty() {
                // Key-share lockers (foreign key checks) conflict with a
                // key update: wait for them.
                drop(loc);
                continue;
            }
        }
        break (loc, own_lock, share_with, old_mvcc, old_tuple);
    };
    *lockmode = mode;
    let mut how = Removal { mode, keep };
    let mut ip = to_item_pointer(otid);
    CheckForSerializableConflictIn(rel, &mut ip, otid.block);
    let xid = pg_sys::GetCurrentTransactionId().into_inner();
    // The new version's place is not known until it is inserted, and the
    // insert may need this extent's header block exclusively, so the old
    // version's lock is released first. Usually the old version is not
    // marked yet: the new version goes in, then the old version is locked
    // again and, if nobody changed it meanwhile, stamped once with xmax and
    // the link (one STAMP record). If somebody did (a concurrent update or
    // delete between the two locks), the new version is killed, as a lost
    // speculative insertion is, and the result is theirs.
    //
    // An old version with TOAST values is marked first (xmax, ctid = itself:
    // nobody can act on the xmax before this transaction ends, and the link
    // is set before it can commit), as before: preparing the new version
    // deletes the old values it no longer uses, which two racing updaters
    // must not both do.
    let optimistic = (*(*old_tuple).t_data).t_infomask & HEAP_HASEXTERNAL == 0;
    let mut loc = loc;
    let mut marked: Option<Mvcc> = None;
    if !optimistic {
        let m = stamp_removed(rel, &loc, cid, otid, &how);
        loc.stamp(rel, &m);
        marked = Some(m);
    }
    drop(loc);

    let new = tuple::prepare(rel, slot, old_tuple, 0);
    let mut new_mvcc = new_version(xid, cid, true);
    // HOT (heap-only) when no indexed column changes and the old version's
    // extent has room: the new version gets no index entries, and index
    // entries of the chain's root lead to it (scan.rs walk_chain).
    let hot_candidate = indexed_columns_unchanged(rel, old_tuple, new.tuple);
    // HOT: the new version goes into the old one's extent and the old one
    // is stamped in the same critical section and WAL record, if it is
    // still as checked above (else, or without room there, the update
    // goes the general way below).
    let old_slot = meta.geometry.slot(meta.extent_first(meta.extent_of(otid.block).expect("extent of the updated version")), otid).ok();
    let mut seen_mvcc = old_mvcc;
    // Retries after lost races; past a few, the general path below (which
    // never loops) takes over.
    let mut races_left = 4;
    let hot_placed = loop {
        let (true, Some(slot)) = (hot_candidate, old_slot) else { break None };
        let expect = if optimistic { seen_mvcc } else { marked.expect("marked old version") };
        let stamp = |now: &Mvcc, ntid: Tid| {
            let mut m = if optimistic { removed_mvcc(rel, now, otid, cid, ntid, &how) } else { Mvcc { ctid: ntid, ..*now } };
            m.infomask2 |= HEAP_HOT_UPDATED;
            m
        };
        let old = relation::StampOld { slot, expect, stamp: &stamp };
        let nm = with_lockers(&new_mvcc, &how.keep, own_lock);
        match relation::hot_update(rel, otid, &old, new.natts, Mvcc { infomask2: nm.infomask2 | HEAP_ONLY_TUPLE, ..nm }, &new.payload) {
            relation::Placed::At { tid, .. } => {
                new_mvcc = nm;
                break Some(tid);
            }
            relation::Placed::Changed if optimistic && races_left > 0 => {
                races_left -= 1;
                // Somebody updated, deleted or locked the old version since
                // it was checked (it carries no mark of ours yet). Wait for
                // them as the first check would have, and try again where
                // the version is still ours to update, rather than placing
                // the new version elsewhere first: under contention for a
                // few rows (pgbench_branches) that left a killed version,
                // and often a new extent, behind every lost race.
                let undo = || tuple::toast_delete_unshared(rel, new.tuple, old_tuple);
                match recheck_old(rel, &meta, otid, cid, mode, policy, &mut tlock, crosscheck, tmfd, &undo) {
                    Ok((loc, keep)) => {
                        seen_mvcc = loc.header.mvcc;
                        how.keep = keep;
                    }
                    Err(result) => return result,
                }
            }
            relation::Placed::Full | relation::Placed::Changed => break None,
        }
    };
    if let Some(ntid) = hot_placed {
        new_mvcc.infomask2 |= HEAP_ONLY_TUPLE;
        *update_indexes = false;
        (*slot).tts_tid = to_item_pointer(ntid);
        (*slot).tts_tableOid = (*rel).rd_id;
        tuple::stamp_slot(slot, &Mvcc { ctid: ntid, ..new_mvcc }, ntid);
        super::logical::log_update(rel, old_tuple, new.tuple);
        pg_sys::pgstat_count_heap_update(rel, true);
        return TM_Ok;
    }
    new_mvcc = with_lockers(&new_mvcc, &how.keep, own_lock);
    let ntid = relation::insert(rel, new.natts, new_mvcc, &new.payload, false);

    let meta = relation::meta_covering(rel, otid).expect("metapage exists");
    if !optimistic {
        let lockers = match relation::locate(rel, &meta, otid, Lock::Exclusive) {
            Lookup::Found(mut loc) if update_xid(&loc.header.mvcc) == xid => {
                let mut m = loc.header.mvcc;
                m.ctid = ntid;
                loc.stamp(rel, &m);
                // Key-share lockers that joined the marked version while
                // the new one was prepared hold the row too.
                other_lockers(&m)
            }
            _ => super::format_error(rel, otid.block, pg_hybrid_core::hasis::Error::Corrupt("updated version vanished before its successor was linked")),
        };
        carry_lockers(rel, ntid, &lockers);
        (*slot).tts_tid = to_item_pointer(ntid);
        (*slot).tts_tableOid = (*rel).rd_id;
        tuple::stamp_slot(slot, &Mvcc { ctid: ntid, ..new_mvcc }, ntid);
        super::logical::log_update(rel, old_tuple, new.tuple);
        pg_sys::pgstat_count_heap_update(rel, false);
        return TM_Ok;
    }
    let kill = || {
        kill_version(rel, ntid);
        tuple::toast_delete_unshared(rel, new.tuple, old_tuple);
    };
    match recheck_old(rel, &meta, otid, cid, mode, policy, &mut tlock, crosscheck, tmfd, &kill) {
        Ok((mut loc, keep)) => {
            how.keep = keep;
            let m = stamp_removed(rel, &loc, cid, ntid, &how);
            loc.stamp(rel, &m);
            drop(loc);
            // Key-share lockers that came after the new version was made.
            carry_lockers(rel, ntid, &how.keep);
        }
        Err(result) => return result,
    }
    (*slot).tts_tid = to_item_pointer(ntid);
    (*slot).tts_tableOid = (*rel).rd_id;
    tuple::stamp_slot(slot, &Mvcc { ctid: ntid, ..new_mvcc }, ntid);
    super::logical::log_update(rel, old_tuple, new.tuple);
    pg_sys::pgstat_count_heap_update(rel, false);
    TM_Ok
}

/// The MVCC fields of an update's new version `m` with the row's lockers
/// (heap_update's xmax_new_tuple): the key-share lockers the old version
/// keeps beside a no-key update (`keep`) hold the row, so they hold the
/// new version too, and a later key update or delete of it waits for them;
/// a lock this transaction held on the old version carries over as a
/// key-share lock (so `RETURNING (xmax = 0) AS inserted` reads as on heap
/// after ON CONFLICT DO UPDATE, which locks first).
unsafe fn with_lockers(m: &Mvcc, keep: &[Locker], own_lock: bool) -> Mvcc {
    let mut xids: Vec<pg_sys::TransactionId> = keep.iter().filter(|l| !l.updater && !l.mine).map(|l| l.xid).collect();
    if own_lock {
        xids.push(pg_sys::GetCurrentTransactionId());
    }
    key_share_xmax(m, &xids)
}

/// `m` with xmax a key-share lock of `xids` (none: no xmax).
unsafe fn key_share_xmax(m: &Mvcc, xids: &[pg_sys::TransactionId]) -> Mvcc {
    let mut members: Vec<pg_sys::MultiXactMember> = xids.iter().map(|&xid| pg_sys::MultiXactMember { xid, status: pg_sys::MultiXactStatus::MultiXactStatusForKeyShare }).collect();
    with_xmax(m, &mut members)
}

/// The running lockers of another transaction in the xmax `m`.
unsafe fn other_lockers(m: &Mvcc) -> Vec<Locker> {
    xmax_members(m).into_iter().filter(|l| !l.updater && !l.mine && pg_sys::TransactionIdIsInProgress(l.xid)).collect()
}

/// Adds the key-share `lockers` of an update's old version to its new
/// version `ntid` (this transaction's, made before they were known), beside
/// whatever locks it holds already (a walk of the update chain may have
/// locked it meanwhile).
unsafe fn carry_lockers(rel: pg_sys::Relation, ntid: Tid, lockers: &[Locker]) {
    let lockers: Vec<&Locker> = lockers.iter().filter(|l| !l.updater && !l.mine).collect();
    if lockers.is_empty() {
        return;
    }
    let Some(meta) = relation::meta_covering(rel, ntid) else { return };
    let Lookup::Found(mut loc) = relation::locate(rel, &meta, ntid, Lock::Exclusive) else { return };
    let m = loc.header.mvcc;
    let mut xids: Vec<pg_sys::TransactionId> = Vec::new();
    if m.infomask & HEAP_XMAX_INVALID == 0 && m.xmax != 0 {
        for l in xmax_members(&m) {
            if l.updater {
                // Updated again by this transaction: its later versions
                // got the lockers from this one's xmax.
                return;
            }
            if l.mine || pg_sys::TransactionIdIsInProgress(l.xid) {
                xids.push(l.xid);
            }
        }
    }
    let before = xids.len();
    for l in lockers {
        if !xids.contains(&l.xid) {
            xids.push(l.xid);
        }
    }
    if xids.len() == before {
        return;
    }
    let mut n = key_share_xmax(&m, &xids);
    n.ctid = m.ctid;
    loc.stamp(rel, &n);
}

/// An update's second look at its old version `otid`, after writing
/// something (a new version elsewhere, or nothing yet but TOAST values):
/// the version locked again in `mode`, waiting out running writers, with
/// the key-share lockers it may share the version with, when it is still
/// this update's to change; else the result to return, with `tmfd` filled
/// and `undo` having removed what the update wrote.
#[allow(clippy::too_many_arguments)]
unsafe fn recheck_old(
    rel: pg_sys::Relation,
    meta: &Meta,
    otid: Tid,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    policy: pg_sys::LockWaitPolicy::Type,
    tlock: &mut TupleLock,
    crosscheck: pg_sys::Snapshot,
    tmfd: *mut pg_sys::TM_FailureData,
    undo: &dyn Fn(),
) -> Result<(Located, Vec<Locker>), pg_sys::TM_Result::Type> {
    match to_modify(rel, meta, otid, cid, mode, policy, tlock, crosscheck, tmfd, pg_sys::XLTW_Oper::XLTW_Update) {
        Ok(v) => Ok((v.loc, v.share_with)),
        Err(Refused::Gone) => {
            undo();
            invisible("update");
        }
        Err(Refused::Result(r)) => {
            undo();
            Err(r)
        }
    }
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
        let (mut loc, mut result, own_lock, mut share_with, mine) = match acquire(rel, &meta, tid, cid, mode, policy, &mut tlock, pg_sys::XLTW_Oper::XLTW_Lock) {
            Found::Version { loc, result, own_lock, share_with, mine } => (loc, result, own_lock, share_with, mine),
            Found::Gone => return TM_Deleted,
            Found::WouldBlock => return TM_WouldBlock,
        };
        // heap_lock_tuple: a key-share lock passes an update that changed
        // no key, even a committed one (the row's key is still there): the
        // updater stays in the version's xmax beside this lock.
        let no_key_update = |m: &Mvcc| m.infomask & HEAP_XMAX_INVALID == 0 && !xmax_locked_only(m) && m.infomask2 & HEAP_KEYS_UPDATED == 0;
        if result == TM_Updated && mode == pg_sys::LockTupleMode::LockTupleKeyShare && no_key_update(&loc.header.mvcc) {
            share_with = xmax_members(&loc.header.mvcc).into_iter().filter(|l| !l.mine && (l.updater || pg_sys::TransactionIdIsInProgress(l.xid))).collect();
            result = TM_Ok;
        }
        if result == TM_Ok {
            // Locks on the newer versions first (heap_lock_updated_tuple):
            // a key-share lock on a version some no-key update replaced
            // must reach the versions that update made, or a later key
            // update or delete of them would not wait for it.
            let updater = share_with.iter().find(|l| l.updater).map(|l| l.xid);
            if let (Some(up), true) = (updater, flags as u32 & pg_sys::TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS != 0) {
                let next = loc.header.mvcc.ctid;
                let seen = loc.header.mvcc;
                drop(loc);
                if next != tid {
                    let r = lock_updated_versions(rel, next, up, mode, policy);
                    if r != TM_Ok {
                        let loc = match relation::locate(rel, &meta, tid, Lock::Share) {
                            Lookup::Found(l) => l,
                            _ => return TM_Deleted,
                        };
                        fill_failure(tmfd, &loc, r, rel);
                        tuple::store(rel, slot, &mut tuple::SlotSchema::default(), loc.header.natts, loc.payload(), &loc.header.mvcc, tid);
                        return r;
                    }
                }
                // The version again, unchanged, or the whole check again.
                loc = match relation::locate(rel, &meta, tid, Lock::Exclusive) {
                    Lookup::Found(l) if !relation::mvcc_changed(&l.header.mvcc, &seen) => l,
                    _ => continue 'retry,
                };
            }
            let mut m = loc.header.mvcc;
            let held = mine.iter().map(|l| l.mode).max();
            let stronger = !own_lock || held.is_none_or(|h| h < mode);
            let cur = pg_sys::GetCurrentTransactionId();
            if stronger && (!share_with.is_empty() || mine.iter().any(|l| l.xid != cur)) {
                // Other transactions hold compatible locks or updated the
                // version (a no-key update), or an enclosing
                // (sub)transaction of this one holds a weaker lock that must
                // outlive this subtransaction: a MultiXact of them all.
                let keep: Vec<Locker> = share_with.iter().chain(mine.iter()).copied().collect();
                m = add_member(&m, &keep, lock_status(mode));
                if xmax_locked_only(&m) {
                    m.ctid = tid;
                }
                loc.stamp(rel, &m);
            } else if stronger {
                if !own_lock || m.infomask & HEAP_XMAX_IS_MULTI != 0 {
                    m.xmax = pg_sys::GetCurrentTransactionId().into_inner();
                }
                // Keeping an older subtransaction's xid with a stronger
                // mode holds the lock a little longer than asked, never
                // shorter.
                let (bits, keys) = lock_only_bits(mode);
                m.infomask = (m.infomask & !HEAP_XMAX_BITS) | bits;
                m.infomask2 = (m.infomask2 & !HEAP_KEYS_UPDATED) | keys;
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
            prior_xmax = update_xid(&m);
            tid = m.ctid;
        }
    }
}

/// Takes a `mode` key-share lock on every version of a row newer than one
/// a no-key update replaced (heap_lock_updated_tuple): from `tid`, each
/// version made by `prior`, the updater of the one before, until the
/// newest. A version another transaction is changing in a conflicting way
/// is waited for; one that a committed transaction deleted or key-updated
/// ends the walk with TM_Updated. A version that is gone or not made by
/// `prior` (the chain broke: pruned, or the update aborted) ends it with
/// TM_Ok, as in heap.
unsafe fn lock_updated_versions(rel: pg_sys::Relation, mut tid: Tid, mut prior: pg_sys::TransactionId, mode: pg_sys::LockTupleMode::Type, policy: pg_sys::LockWaitPolicy::Type) -> pg_sys::TM_Result::Type {
    loop {
        let Some(meta) = relation::meta_covering(rel, tid) else { return TM_Ok };
        let mut loc = match relation::locate(rel, &meta, tid, Lock::Exclusive) {
            Lookup::Found(l) => l,
            _ => return TM_Ok,
        };
        let m = loc.header.mvcc;
        if pg_sys::TransactionId::from(m.xmin) != prior || m.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_INVALID || pg_sys::TransactionIdDidAbort(prior) {
            return TM_Ok;
        }
        let mut keep: Vec<Locker> = Vec::new();
        let mut already = false;
        if m.infomask & HEAP_XMAX_INVALID == 0 {
            let members = xmax_members(&m);
            let mut waits: Vec<pg_sys::TransactionId> = Vec::new();
            for l in &members {
                let running = l.mine || pg_sys::TransactionIdIsInProgress(l.xid);
                if l.mine {
                    already |= !l.updater && l.mode >= mode;
                    if !l.updater {
                        keep.push(*l);
                    }
                } else if running {
                    if modes_conflict(l.mode, mode) {
                        waits.push(l.xid);
                    } else {
                        keep.push(*l);
                    }
                } else if l.updater && pg_sys::TransactionIdDidCommit(l.xid) {
                    if modes_conflict(l.mode, mode) {
                        // Deleted, or its key changed, for good.
                        return TM_Updated;
                    }
                    keep.push(*l);
                }
            }
            if !waits.is_empty() {
                drop(loc);
                for x in waits {
                    if !wait_for(rel, x, tid, policy, pg_sys::XLTW_Oper::XLTW_LockUpdated) {
                        return TM_WouldBlock;
                    }
                }
                continue;
            }
        }
        if !already {
            let mut n = add_member(&m, &keep, lock_status(mode));
            n.ctid = m.ctid;
            loc.stamp(rel, &n);
        }
        let n = loc.header.mvcc;
        let updated = n.infomask & HEAP_XMAX_INVALID == 0 && !xmax_locked_only(&n);
        if !updated || n.ctid == tid {
            return TM_Ok;
        }
        prior = pg_sys::TransactionId::from(update_xid(&n));
        tid = n.ctid;
    }
}

/// Kills this transaction's version at `tid` at once (heap's
/// heap_abort_speculative): xmin becomes InvalidTransactionId, hinted
/// invalid, so no snapshot sees it; compaction removes it, VACUUM its index
/// entries. Returns its row as stored. TOAST values are the caller's.
unsafe fn kill_version(rel: pg_sys::Relation, tid: Tid) -> (Mvcc, pg_hybrid_core::hasis::row::Row) {
    let meta = meta_or_invisible(rel, tid, "kill");
    let mut loc = match relation::locate(rel, &meta, tid, Lock::Exclusive) {
        Lookup::Found(loc) => loc,
        _ => invisible("kill"),
    };
    let mut m = loc.header.mvcc;
    m.ctid = tid;
    m.xmin = 0;
    m.infomask &= !(HEAP_XMAX_BITS | HEAP_XMIN_COMMITTED);
    m.infomask |= HEAP_XMIN_INVALID | HEAP_XMAX_INVALID;
    m.infomask2 &= !HEAP_KEYS_UPDATED;
    loc.stamp(rel, &m);
    let schema = tuple::schema(rel);
    let row = tuple::decode(rel, &schema, loc.header.natts, loc.payload(), tid.block);
    (m, row)
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
    if succeeded {
        m.ctid = tid;
        loc.stamp(rel, &m);
        return;
    }
    drop(loc);
    let (m, row) = kill_version(rel, tid);
    tuple::toast_delete(rel, tuple::form(rel, &row, &m, tid), true);
    pg_sys::pgstat_count_heap_delete(rel);
}
