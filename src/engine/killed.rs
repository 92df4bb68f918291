//! Killed-tuple hints: PostgreSQL's `kill_prior_tuple` for the engine.
//!
//! When the executor finds that the heap tuple an index scan returned is
//! dead to every transaction, it says so on the next `amgettuple`. btree
//! marks the index item LP_DEAD and later scans skip it without a heap
//! visit; that is what keeps TPC-C's Delivery (`min(no_o_id)` over a
//! new_order range whose low end is all deleted orders) and hot-key updates
//! cheap between VACUUMs. Our stages have no per-entry flag bits (compact
//! static leaves, a shared-memory tree), so each backend keeps a set of the
//! TIDs its scans were told are dead, per index, and its MVCC scans skip
//! them.
//!
//! Why skipping by TID alone is safe: a TID dead to all can only be reused
//! after VACUUM has removed every index entry pointing to it (heap line
//! pointers stay LP_DEAD until index vacuuming), and every VACUUM that
//! removes entries from an index of ours bumps the index's `vacuum_epoch`.
//! A scan reads the epoch when it starts and the set is emptied when the
//! epoch moved, so a reused TID is never skipped by a scan that started
//! after the VACUUM; a scan that started before it has an MVCC snapshot
//! older than the reusing insert, to which the new tuple is invisible
//! anyway. Scans under other snapshots (SnapshotDirty for ON CONFLICT and
//! exclusion checks, SnapshotAny) do not use the hints. Nothing here is
//! shared, persisted or WAL-logged; a standby never sets `kill_prior_tuple`.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

/// Per index, a bound on remembered TIDs (8 bytes each plus the set's
/// overhead); past it the set starts over.
const MAX_KILLED: usize = 65_536;

pub struct KilledSet {
    epoch: u64,
    tids: HashSet<Tid>,
}

impl KilledSet {
    /// Empties the set when VACUUM ran since it was filled.
    pub fn sync_epoch(&mut self, epoch: u64) {
        if self.epoch != epoch {
            self.tids.clear();
            self.epoch = epoch;
        }
    }

    pub fn insert(&mut self, tid: Tid) {
        if self.tids.len() >= MAX_KILLED {
            self.tids.clear();
        }
        self.tids.insert(tid);
    }

    pub fn contains(&self, tid: &Tid) -> bool {
        !self.tids.is_empty() && self.tids.contains(tid)
    }
}

pub type SharedKilled = Rc<RefCell<KilledSet>>;

thread_local! {
    static SETS: RefCell<HashMap<(u32, u32), SharedKilled>> = RefCell::new(HashMap::new());
}

/// The backend's killed set of `index` (keyed by database and relfilenode,
/// so a rewritten index starts empty).
pub unsafe fn set_of(index: pg_sys::Relation) -> SharedKilled {
    let node = (*index).rd_node;
    let key = (node.dbNode.to_u32(), node.relNode.to_u32());
    SETS.with(|s| {
        s.borrow_mut()
            .entry(key)
            .or_insert_with(|| Rc::new(RefCell::new(KilledSet { epoch: u64::MAX, tids: HashSet::new() })))
            .clone()
    })
}

/// Whether a scan may skip the TIDs of the set: an MVCC snapshot, and a
/// transaction that did not start in recovery (PostgreSQL's
/// `ignore_killed_tuples`).
pub unsafe fn usable(scan: pg_sys::IndexScanDesc) -> bool {
    let snap = (*scan).xs_snapshot;
    (*scan).ignore_killed_tuples
        && !snap.is_null()
        && matches!((*snap).snapshot_type, pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC)
}
