//! Killed-tuple hints: PostgreSQL's `kill_prior_tuple` for the engine.
//!
//! When the executor finds that the heap tuple an index scan returned is
//! dead to every transaction, it says so on the next `amgettuple`. btree
//! marks the index item LP_DEAD on its page, and every later scan, in any
//! backend, skips it without a heap visit; that is what keeps TPC-C's
//! Delivery (`min(no_o_id)` over a new_order range whose low end is all
//! deleted orders) and hot-key updates (YCSB A/B under zipfian keys) cheap
//! between VACUUMs. Our stages have no per-entry flag bits (compact static
//! leaves, a shared-memory tree), so the hints live beside them: a small
//! open-addressing tables of dead TIDs (`pg_hybrid_core::killed`, 1023 per
//! 8 kB arena block, up to `MAX_HINT_BLOCKS` = 8 blocks per index), taken at the
//! first hint, filled by any backend's scans and read by all of them.
//! It is a cache: a hint that is overwritten or never found costs a heap
//! visit, nothing more. Merges drop hinted entries from the leaves they
//! rewrite (`droppable`, nbtree's simple deletion), and an insert drops the
//! hinted versions of its key from the dynamic stage
//! (`DualStageState::prune_dead_versions`), so they do not pile up until
//! VACUUM.
//!
//! Why skipping by TID alone is safe: a TID dead to all can only be reused
//! after VACUUM has removed every index entry pointing to it (heap line
//! pointers stay LP_DEAD until index vacuuming), and every bulk delete of
//! an index of ours bumps the index's `vacuum_epoch` (and empties the
//! table), also one that finds nothing to remove because a merge dropped
//! the entries before. A cell carries the epoch its hint was made in
//! and matches only a scan of that epoch; a scan reads the epoch when its
//! cursor opens, so a reused TID is never skipped by a scan that started
//! after the VACUUM, and a scan that started before it has an MVCC snapshot
//! older than the reusing insert, to which the new tuple is invisible
//! anyway. Scans under other snapshots (SnapshotDirty for ON CONFLICT and
//! exclusion checks, SnapshotAny) do not use the hints. Unique checks
//! (insert.rs) do, as nbtree's skip LP_DEAD items, and add hints for the
//! TIDs the heap reports dead to all (nbtree marks those items LP_DEAD
//! there): they skip with the epoch read after the key's entries, so an
//! entry of a reused TID, added after the epoch moved, never meets an
//! older hint, and they hint only when that epoch is also the one the
//! entries were read in (an entry read before a bulk delete can point at a
//! line pointer VACUUM has freed since, which the heap reports "all
//! dead"; insert.rs, `find_conflict`). Nothing here is
//! persisted or WAL-logged; a standby never sets `kill_prior_tuple` and its
//! scans do not skip (`ignore_killed_tuples` is off in recovery).
//!
//! A slot can be handed to another index only when nobody reads it (no
//! registered reader), but the table also records whose hints it holds
//! (`owner`), so a scan never takes another index's hints for its own.

use std::sync::atomic::{AtomicU32, Ordering};

use pg_hybrid_core::dynamic::DYN_BLOCK_SIZE;
use pg_hybrid_core::killed::KilledTable;
use pg_hybrid_core::tid::{Tid, TidSet};
use pgrx::pg_sys;

use super::state::SlotState;
use crate::shmem::{self, LwGuard, SlotKey, SlotRef};

/// Blocks (tables of 1023 hints, 8 kB each) an index's hints may take: at
/// most this many (8k hints, 64 kB, which the slot keeps), and at most 1/64
/// of the arena. 64 blocks (65k hints) held all of a TPC-C minute's deleted
/// new_order rows (autovacuum off), but measured no better (Delivery p95
/// 2.4× against 2.8× btree's, tpmC 0.75 against 0.81, within the run-to-run
/// spread) and kept 512 kB per index for good.
pub const MAX_HINT_BLOCKS: usize = 8;
/// `DualStageState::killed_nblocks` before the first hint.
pub const NO_TABLE: u32 = 0;
/// The arena had no block when the first hint came; retried after a reset.
pub const NO_ROOM: u32 = u32::MAX;

/// The hint tables of an index's slot.
#[repr(C)]
pub struct HintBlocks {
    /// Published last (Release) once `ids` are set: NO_TABLE, NO_ROOM or
    /// the number of blocks. A slot keeps its blocks for good (a reset
    /// zeroes them; freeing one could hand a concurrent lock-free reader a
    /// block that holds something else by then).
    nblocks: AtomicU32,
    ids: [u32; MAX_HINT_BLOCKS],
}

impl HintBlocks {
    /// The state of a slot that was never used.
    pub fn init(&mut self) {
        self.nblocks = AtomicU32::new(NO_TABLE);
    }

    fn tables(&self) -> Option<(usize, &[u32])> {
        match self.nblocks.load(Ordering::Acquire) {
            NO_TABLE | NO_ROOM => None,
            n => Some((n as usize, &self.ids[..n as usize])),
        }
    }

    fn table(&self, tid: Tid) -> Option<&'static KilledTable> {
        let (n, ids) = self.tables()?;
        let b = ids[pg_hybrid_core::killed::table_for(tid, n)];
        // SAFETY: an arena block of DYN_BLOCK_SIZE bytes, zeroed when it
        // was taken, all atomics; KilledTable is exactly one block.
        Some(unsafe { &*(shmem::header().block_ptr(b) as *const KilledTable) })
    }

    /// Whether `tid` is hinted dead for scans of `epoch` of the index
    /// `owner` (`owner_of`).
    pub fn contains(&self, owner: u64, tid: Tid, epoch: u64) -> bool {
        self.table(tid).is_some_and(|t| t.contains(owner, tid, epoch))
    }

    /// Whether any hint table exists (none before the first hint).
    pub fn any(&self) -> bool {
        self.tables().is_some()
    }

    /// Arena bytes the hints take.
    pub fn bytes(&self) -> u64 {
        self.tables().map_or(0, |(n, _)| (n * DYN_BLOCK_SIZE) as u64)
    }

    /// Forgets every hint; `owner` is who the tables belong to from now on
    /// (0: their next user). A slot whose arena was full tries again.
    pub fn clear(&self, owner: u64) {
        if let Some((_, ids)) = self.tables() {
            for &b in ids {
                let t = unsafe { &*(shmem::header().block_ptr(b) as *const KilledTable) };
                t.clear(owner);
            }
        }
        let _ = self.nblocks.compare_exchange(NO_ROOM, NO_TABLE, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Takes the blocks (caller holds the slot lock exclusively): kept
    /// blocks of the arena (`shmem::take_kept`, at most 1/8 of it for all
    /// slots together).
    fn allocate(&mut self) {
        if self.nblocks.load(Ordering::Acquire) != NO_TABLE {
            return;
        }
        let want = (shmem::header().nblocks as usize / 64).clamp(1, MAX_HINT_BLOCKS);
        let n = shmem::take_kept(want, &mut self.ids);
        self.nblocks.store(if n == 0 { NO_ROOM } else { n as u32 }, Ordering::Release);
    }
}

/// The table's owner value of an index: its (database, relfilenode), so a
/// rewritten index starts with no hints.
pub fn owner_of(key: SlotKey) -> u64 {
    (key.db.to_u32() as u64) << 32 | key.relnode.to_u32() as u64
}

/// Records a dead TID seen by a scan of `epoch` of the index of `slot`;
/// the first hint of a slot takes arena blocks for its tables.
pub fn mark(slot: SlotRef, tid: Tid, epoch: u64) {
    let st = slot.state();
    let table = match st.hints.table(tid) {
        Some(t) => t,
        None => {
            if st.hints.nblocks.load(Ordering::Acquire) == NO_ROOM {
                return;
            }
            let _g = LwGuard::exclusive(slot.lock());
            if !slot.holds_key() {
                // The slot went to another index: a hint is not worth an ERROR.
                return;
            }
            st.hints.allocate();
            match st.hints.table(tid) {
                Some(t) => t,
                None => return,
            }
        }
    };
    table.insert(owner_of(slot.key), tid, epoch);
}

/// Whether a scan of `epoch` of the index of `slot` may skip `tid`.
pub fn is_marked(slot: SlotRef, tid: Tid, epoch: u64) -> bool {
    slot.state().hints.contains(owner_of(slot.key), tid, epoch)
}

/// Whether a scan may skip hinted TIDs: an MVCC snapshot, and a
/// transaction that did not start in recovery (PostgreSQL's
/// `ignore_killed_tuples`).
pub unsafe fn usable(scan: pg_sys::IndexScanDesc) -> bool {
    let snap = (*scan).xs_snapshot;
    (*scan).ignore_killed_tuples
        && !snap.is_null()
        && matches!((*snap).snapshot_type, pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC)
}

/// Hinted TIDs a merge may drop from the entries it rewrites, and the
/// newest xid their removal takes away (for the standby conflict).
pub struct DroppableTids {
    pub tids: TidSet,
    pub horizon: pg_sys::TransactionId,
}

/// Every TID the slot's tables hint for `epoch`, sorted.
pub fn hinted(slot: SlotRef, epoch: u64) -> Vec<Tid> {
    let st = slot.state();
    let Some((_, ids)) = st.hints.tables() else { return Vec::new() };
    let owner = owner_of(slot.key);
    let mut all: Vec<Tid> = ids
        .iter()
        .flat_map(|&b| unsafe { &*(shmem::header().block_ptr(b) as *const KilledTable) }.hints(owner, epoch))
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Takes back the hints of `tids`, whose index entries a merge dropped.
pub fn forget(slot: SlotRef, tids: &[Tid], epoch: u64) {
    let owner = owner_of(slot.key);
    for &t in tids {
        if let Some(table) = slot.state().hints.table(t) {
            table.forget(owner, t, epoch);
        }
    }
}

/// TIDs of `index` that a merge may drop, nbtree's simple and bottom-up
/// deletion for our stages: the entries go when a merge rewrites them
/// anyway, so a range whose low end is all deleted rows (TPC-C's
/// new_order) does not keep growing until VACUUM, nor does a key updated
/// again and again. Two sources: the hints (as trustworthy as LP_DEAD
/// bits, so passed as known deletable) and `versions`, the entries of keys
/// the batch brings new versions of (merge.rs), which the heap AM checks.
/// The hint table is a bounded cache; under a heavy stream of updates it
/// loses hints faster than merges use them, and without the second source
/// a hot key's dead versions would pile up in the static stage until
/// VACUUM, every probe of it walking them all. The heap AM computes the
/// conflict horizon from the tuples (`table_index_delete_tuples`, as
/// nbtree does). None when there is nothing to drop, or the
/// heap cannot be locked right now (AccessShareLock, conditionally: a
/// merge worker holds only the index, and must not wait behind DDL in the
/// wrong lock order); the merge then keeps every entry. The caller holds
/// the maintenance lock, so no VACUUM changes the epoch meanwhile.
pub unsafe fn droppable(index: pg_sys::Relation, slot: SlotRef, epoch: u64, versions: &[Tid]) -> Option<DroppableTids> {
    let hinted = hinted(slot, epoch);
    // Versions the heap has to judge (nbtree's bottom-up deletion): the
    // hinted ones are known dead already.
    let unhinted: Vec<Tid> = versions.iter().copied().filter(|t| hinted.binary_search(t).is_err()).collect();
    if hinted.is_empty() && unhinted.is_empty() {
        return None;
    }
    let heap_oid = (*(*index).rd_index).indrelid;
    if !pg_sys::ConditionalLockRelationOid(heap_oid, pg_sys::AccessShareLock as i32) {
        return None;
    }
    let heap = pg_sys::relation_open(heap_oid, pg_sys::NoLock as i32);
    let mut out: Vec<Tid> = Vec::new();
    let mut horizon = pg_sys::InvalidTransactionId;
    for (tids, known) in [(&hinted[..], true), (&unhinted[..], false)] {
        // The heap AM's batch ids are int16.
        for batch in tids.chunks(i16::MAX as usize) {
            let h = deletable_in_heap(heap, index, batch, known, &mut out);
            if h != pg_sys::InvalidTransactionId && (horizon == pg_sys::InvalidTransactionId || pg_sys::TransactionIdPrecedes(horizon, h)) {
                horizon = h;
            }
        }
    }
    pg_sys::relation_close(heap, pg_sys::NoLock as i32);
    (!out.is_empty()).then(|| DroppableTids { tids: TidSet::new(out), horizon })
}

/// One `table_index_delete_tuples` call (simple deletion) over at most
/// 32767 TIDs: appends the deletable ones to `out` and returns the newest
/// xid their removal takes away. `known`: the TIDs are known dead (hints),
/// otherwise the heap AM checks each one's HOT chain.
unsafe fn deletable_in_heap(heap: pg_sys::Relation, index: pg_sys::Relation, tids: &[Tid], known: bool, out: &mut Vec<Tid>) -> pg_sys::TransactionId {
    let mut deltids: Vec<pg_sys::TM_IndexDelete> = tids
        .iter()
        .enumerate()
        .map(|(i, &t)| pg_sys::TM_IndexDelete { tid: super::build::tid_to_item(t), id: i as i16 })
        .collect();
    let mut status: Vec<pg_sys::TM_IndexStatus> = (0..tids.len())
        .map(|i| pg_sys::TM_IndexStatus { idxoffnum: (i + 1) as u16, knowndeletable: known, promising: false, freespace: 0 })
        .collect();
    let mut op = pg_sys::TM_IndexDeleteOp {
        irel: index,
        iblknum: pg_sys::InvalidBlockNumber,
        bottomup: false,
        bottomupfreespace: 0,
        ndeltids: deltids.len() as i32,
        deltids: deltids.as_mut_ptr(),
        status: status.as_mut_ptr(),
    };
    let horizon = pg_sys::table_index_delete_tuples(heap, &mut op);
    // The heap AM sorts deltids and keeps the deletable ones in front.
    out.extend(deltids[..op.ndeltids.max(0) as usize].iter().filter(|d| status[d.id as usize].knowndeletable).map(|d| tids[d.id as usize]));
    horizon
}
