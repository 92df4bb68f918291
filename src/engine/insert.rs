//! aminsert: unique checks over both stages (the dynamic stage and the base
//! structure), then an append to the delta log and the shared-memory
//! dynamic stage.

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::base::{Dir, ScanRange};
use super::build::{item_to_tid, tid_to_item};
use super::meta::BaseInfo;
use super::state::{self, ensure_synced, DualStageState, SlotState};
use super::{delta, merge, predlock};
use crate::keys::{index_desc, IndexDesc};
use crate::shmem::{self, LwGuard, SlotRef};
use crate::storage::page;

#[pg_guard]
pub unsafe extern "C-unwind" fn aminsert(
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    heap_tid: pg_sys::ItemPointer,
    heap: pg_sys::Relation,
    check: pg_sys::IndexUniqueCheck::Type,
    _unchanged: bool,
    _info: *mut pg_sys::IndexInfo,
) -> bool {
    crate::require_preload();
    let desc = index_desc(index);
    let mut key = Vec::with_capacity(64);
    desc.encode_tuple(values, isnull, &mut key);
    ams::base(index).check_key(index, &key);
    let tid = item_to_tid(heap_tid);
    let slot = shmem::slot_for(index);
    ensure_synced(index, &desc, slot);

    let checks = check != pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO
        && (desc.nulls_not_distinct || !desc.has_null_keycol(&key));
    if !checks {
        let merge_now = insert_entry(index, &desc, slot, &key, tid, &DeadVersions::default());
        check_serializable(index, &desc, slot, &key);
        merge_if_overrun(index, merge_now);
        return true;
    }
    let stripe = shmem::stripe_lock(
        desc.key_hash(&key).unwrap_or(0) ^ ((*index).rd_node.relNode.to_u32() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    loop {
        let guard = LwGuard::exclusive(stripe);
        match find_conflict(index, heap, &desc, slot, &key, tid) {
            Conflict::None(dead) => {
                if check == pg_sys::IndexUniqueCheck::UNIQUE_CHECK_EXISTING {
                    return true;
                }
                insert_after_check(index, &desc, slot, &key, tid, &dead, guard);
                return true;
            }
            // A partial check (speculative insertion, deferred constraints)
            // inserts and reports the possible conflict instead of raising it.
            Conflict::Moved => continue,
            Conflict::Wait { .. } | Conflict::Live if check == pg_sys::IndexUniqueCheck::UNIQUE_CHECK_PARTIAL => {
                insert_after_check(index, &desc, slot, &key, tid, &DeadVersions::default(), guard);
                return false;
            }
            Conflict::Wait { xid, spec_token, other } => {
                drop(guard);
                let mut item = tid_to_item(other);
                if spec_token != 0 {
                    pg_sys::SpeculativeInsertionWait(xid, spec_token);
                } else {
                    pg_sys::XactLockTableWait(xid, heap, &mut item, pg_sys::XLTW_Oper::XLTW_InsertIndex);
                }
            }
            Conflict::Live => {
                drop(guard);
                // As nbtree: a conflict SSI would report is not masked by
                // the unique violation.
                check_serializable(index, &desc, slot, &key);
                report_duplicate(index, &desc, &key, false);
            }
        }
    }
}

/// The index's vacuum epoch, which every bulk delete moves on.
fn vacuum_epoch(slot: SlotRef) -> u64 {
    let _g = slot.shared();
    slot.state().base.vacuum_epoch
}

enum Conflict {
    /// No live or in-progress holder of the key.
    None(DeadVersions),
    /// A holder was found, but a VACUUM ran since the key's entries were
    /// read: the check starts again.
    Moved,
    Wait { xid: pg_sys::TransactionId, spec_token: u32, other: Tid },
    Live,
}

/// Every TID stored under the key columns of `key`, from both stages.
pub unsafe fn tids_for_key(index: pg_sys::Relation, desc: &Rc<IndexDesc>, slot: SlotRef, key: &[u8]) -> KeyTids {
    let keycols = desc.keycols(key).to_vec();
    let snap = state::snapshot(index, desc, slot, &keycols, Some(&keycols), desc.key_hash(key), &mut |_| true);
    let epoch = snap.base.vacuum_epoch;
    let mut out: Vec<Tid> = snap.items.iter().map(|(_, t)| *t).collect();
    if snap.static_may_contain {
        let fetches = base_tids_of_key(index, desc, &snap.base, &keycols, usize::MAX, &mut out);
        state::add_key_fetches(slot, fetches);
    }
    // An entry merged while the scan of the dynamic stage above ran can be
    // in both lists. Sorting, not a linear search per entry: a hot key's
    // versions can number thousands between VACUUMs.
    out.sort_unstable();
    out.dedup();
    KeyTids { tids: out, epoch }
}

/// The TIDs of a key (`tids_for_key`), and the vacuum epoch that was
/// current when they were read: the dynamic stage's under the slot lock
/// with the epoch, the base structure's after it.
pub struct KeyTids {
    /// Sorted.
    pub tids: Vec<Tid>,
    pub epoch: u64,
}

/// Appends the TIDs the base structure of generation `base` holds under
/// the key columns `keycols`, at most `limit` of them; returns the heap key
/// fetches it took. The caller keeps the generation's pages from being
/// recycled (a registered reader, or the maintenance lock).
pub unsafe fn base_tids_of_key(index: pg_sys::Relation, desc: &Rc<IndexDesc>, base: &BaseInfo, keycols: &[u8], limit: usize, out: &mut Vec<Tid>) -> u64 {
    let structure = ams::base(index);
    if structure.is_empty(base) {
        return 0;
    }
    let mut c = structure.cursor(index, desc, base);
    // The key columns as a prefix: INCLUDE columns may follow them.
    c.start(Dir::Fwd, &ScanRange { lower: keycols, upper: Some(keycols), whole_key: false, strict: (false, false), point: true });
    let mut taken = 0;
    while let Some((k, t)) = c.peek(Dir::Fwd) {
        if taken == limit || desc.compare_prefix(k, keycols) != Ordering::Equal {
            break;
        }
        out.push(t);
        taken += 1;
        c.advance(Dir::Fwd);
    }
    c.key_fetches()
}

/// The TIDs of a key that a unique check found dead to all, which the
/// insert drops from the dynamic stage, and the vacuum epoch they were
/// found in (after a VACUUM a TID may stand for a new tuple).
#[derive(Default)]
struct DeadVersions {
    /// Sorted.
    tids: Vec<Tid>,
    epoch: u64,
}

unsafe fn find_conflict(
    index: pg_sys::Relation,
    heap: pg_sys::Relation,
    desc: &Rc<IndexDesc>,
    slot: SlotRef,
    key: &[u8],
    own: Tid,
) -> Conflict {
    let found = tids_for_key(index, desc, slot, key);
    // Dead-to-all hints (killed.rs) spare heap visits, as nbtree skips
    // LP_DEAD items: a key whose row was updated without HOT again and
    // again (a hot key) has one entry per version until VACUUM.
    //
    // Skipping uses the epoch read after the entries: an entry of a TID
    // that VACUUM freed and an insert reused was added after the epoch
    // moved, so an older hint never matches it.
    //
    // Hinting needs the entries read within one epoch. An entry read
    // before a VACUUM's bulk delete may point at a tuple that VACUUM then
    // freed: the heap reports its unused line pointer as "all dead", and
    // a hint tagged with the new epoch would outlive the slot's reuse
    // (a scan skipping a live row; a merge handing the heap a TID of an
    // unused line pointer as known deletable, which it rejects as index
    // corruption). When the epoch moved, the check only skips and visits.
    let epoch = vacuum_epoch(slot);
    let may_hint = found.epoch == epoch;
    let mut dead = DeadVersions { tids: Vec::new(), epoch };
    for other in found.tids {
        if other == own || super::killed::is_marked(slot, other, epoch) {
            continue;
        }
        let mut snap: pg_sys::SnapshotData = std::mem::zeroed();
        snap.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let mut item = tid_to_item(other);
        let mut all_dead = false;
        if pg_sys::table_index_fetch_tuple_check(heap, &mut item, &mut snap, &mut all_dead) {
            if vacuum_epoch(slot) != found.epoch {
                // A VACUUM may have freed the TID after the entries were
                // read, and an insert of another key reused it: this tuple
                // need not hold our key. Read the entries again.
                return Conflict::Moved;
            }
            let xid = if snap.xmin != pg_sys::InvalidTransactionId { snap.xmin } else { snap.xmax };
            if xid != pg_sys::InvalidTransactionId {
                return Conflict::Wait { xid, spec_token: snap.speculativeToken, other };
            }
            return Conflict::Live;
        }
        if all_dead && may_hint {
            // nbtree marks the item LP_DEAD here; later checks and MVCC
            // scans of every backend skip it.
            super::killed::mark(slot, other, epoch);
            dead.tids.push(other);
        }
    }
    Conflict::None(dead)
}

pub unsafe fn report_duplicate(index: pg_sys::Relation, desc: &IndexDesc, key: &[u8], building: bool) -> ! {
    let n = desc.natts;
    let mut values = vec![pg_sys::Datum::from(0usize); n];
    let mut nulls = vec![true; n];
    desc.decode(key, &mut values, &mut nulls);
    let descr = pg_sys::BuildIndexValueDescription(index, values.as_mut_ptr(), nulls.as_mut_ptr());
    let detail = if descr.is_null() {
        None
    } else {
        Some(std::ffi::CStr::from_ptr(descr).to_string_lossy().into_owned())
    };
    let name = page::rel_name(index);
    let (msg, det) = if building {
        (format!("could not create unique index \"{name}\""), detail.map(|d| format!("Key {d} is duplicated.")))
    } else {
        (
            format!("duplicate key value violates unique constraint \"{name}\""),
            detail.map(|d| format!("Key {d} already exists.")),
        )
    };
    let mut r = pgrx::pg_sys::panic::ErrorReport::new(PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION, msg, "aminsert");
    if let Some(d) = det {
        r = r.set_detail(d);
    }
    r.report(PgLogLevel::ERROR);
    unreachable!()
}

/// The insert of a unique check that found no blocking conflict: the entry
/// goes in while the stripe is held, then (the stripe released) the SSI
/// check and a back-pressure merge.
unsafe fn insert_after_check(index: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef, key: &[u8], tid: Tid, dead: &DeadVersions, stripe: LwGuard) {
    let merge_now = insert_entry(index, desc, slot, key, tid, dead);
    drop(stripe);
    check_serializable(index, desc, slot, key);
    merge_if_overrun(index, merge_now);
}

/// SERIALIZABLE writers meet the SIREAD locks of scans that read the key's
/// range (predlock.rs); called once the entry is in the dynamic stage.
unsafe fn check_serializable(index: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef, key: &[u8]) {
    if !predlock::serializable() {
        return;
    }
    let lockmap = {
        let _g = slot.shared();
        slot.state().lockmap
    };
    predlock::check_write(index, desc, lockmap, key);
}

/// Back-pressure (insert_entry): merges in this backend, once the caller
/// holds no LWLock (a merge waits for heavyweight locks).
unsafe fn merge_if_overrun(index: pg_sys::Relation, merge_now: bool) {
    if merge_now {
        merge::merge_index(index, merge::Reason::Ratio);
    }
}

/// Puts the entry of delta-log position `pos` into the dynamic stage;
/// false when the arena has no room. The caller holds the slot lock
/// exclusively. A whole merge may have run between the append and here:
/// the entry is in the base structure then, and a tiered index's record of
/// the key (`hot`) must have it too, since the merge's settle ran before
/// the entry was in the tree.
fn place_entry(st: &mut DualStageState, desc: &IndexDesc, key: &[u8], tid: Tid, pos: u64, hot: bool) -> bool {
    if pos >= st.base.merged_upto {
        return st.insert(desc, key, tid, pos);
    }
    if hot {
        super::hot::adopt_merged(st, desc, key, tid);
    }
    true
}

/// How far apart the append times kept for the sync lag are, at least
/// (a burst of inserts keeps one).
const SYNC_LAG_RESOLUTION_US: i64 = 10_000;

/// Appends to the delta log and adds the entry to the dynamic stage,
/// dropping the key's versions that are hinted dead or that the unique
/// check just found dead (`dead`: the hint table is a bounded cache, and a
/// hot key can outrun it); requests a merge when the ratio trigger fires or the arena runs short.
/// Returns true when the caller must merge itself (back-pressure) once it
/// has released its locks.
unsafe fn insert_entry(index: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef, key: &[u8], tid: Tid, dead: &DeadVersions) -> bool {
    let base = ams::base(index);
    let hot = base.hot_tier(index);
    // Read before the append: the entry came no earlier (append_clock.rs).
    let appended_after = pg_sys::GetCurrentTimestamp();
    let pos = delta::append(index, key, tid, &slot.state().tail_hint);
    let (mut fits, want_merge, others_should_merge, overrun, sweep_due) = {
        let _g = slot.exclusive();
        let st = &mut slot.state();
        st.clock.note(pos, appended_after, st.base.merged_upto, SYNC_LAG_RESOLUTION_US);
        if pos >= st.base.merged_upto {
            let dead = if dead.epoch == st.base.vacuum_epoch { &dead.tids[..] } else { &[] };
            st.prune_dead_versions(desc, key, super::killed::owner_of(slot.key), dead);
        }
        let fits = place_entry(st, desc, key, tid, pos, hot.is_some());
        // Merges follow the delta log's growth, not the tree's: pruned
        // versions leave the tree but stay in the log until a merge. A
        // tiered index's tree also holds clean copies, which no merge
        // moves: only the log counts there.
        let unmerged = (pos + 1).saturating_sub(st.base.merged_upto);
        let logged = if hot.is_some() { unmerged } else { unmerged.max(st.tree.nentries) };
        let sweep_due = hot.as_ref().is_some_and(|h| super::hot::over_bound(st, h));
        let mut threshold = super::state::merge_threshold(base.merge_basis(&st.base, delta::record_len(128, key)), base.merge_ratio(index));
        let cap = base.delta_cap(index, key.len());
        let capped = cap.is_some();
        if let Some(cap) = cap {
            threshold = threshold.min(cap);
        }
        let short = shmem::header().free_fraction() < 0.25;
        // Under arena pressure only an index whose tree holds a real share
        // merges; otherwise every insert of a small index would merge.
        let share = st.tree.nblocks as usize * 64 >= shmem::header().nblocks as usize;
        let want = !st.merge_requested && (logged >= threshold || (short && share));
        if want {
            st.merge_requested = true;
        }
        // Back-pressure: an index whose delta log is capped (it counts
        // against a size bound) must not outrun its merges. Past twice the
        // cap, the inserter merges itself (after the merge in progress, if
        // any): a bulk load then runs at the speed of its merges and the
        // file stays within the bound.
        let overrun = capped && logged >= threshold.saturating_mul(2);
        (fits, want || overrun, short && !share, overrun, sweep_due)
    };
    if let (true, Some(h)) = (sweep_due || !fits, hot.as_ref()) {
        // The hot tier is past its bound (or the arena is full): evict
        // unreferenced records before anything else.
        super::hot::sweep_to_bound(slot, desc, h);
    }
    if others_should_merge && crate::guc::BACKGROUND_MERGE.get() {
        shmem::merge_largest_elsewhere(slot);
    }
    if !fits && hot.is_some() {
        // Evicting may have made room.
        let _g = slot.exclusive();
        let st = &mut slot.state();
        fits = place_entry(st, desc, key, tid, pos, hot.is_some());
    }
    if !fits {
        // The arena is full: the entry is durable in the log, so merging
        // moves it into the static stage; then nothing is missing. Until
        // then the tree lacks it, so the slot is marked for a rebuild in
        // case the merge is cancelled.
        {
            let _g = slot.exclusive();
            slot.state().valid = false;
        }
        merge::merge_index(index, merge::Reason::ArenaFull);
        let _g = slot.exclusive();
        let st = &mut slot.state();
        if !place_entry(st, desc, key, tid, pos, hot.is_some()) {
            st.valid = false;
            drop(_g);
            crate::raise(PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY, "pg_hybrid.shared_memory is exhausted even after a merge", "Raise pg_hybrid.shared_memory and restart the server.");
        }
        return false;
    }
    if !want_merge && !overrun {
        return false;
    }
    if predlock::serializable() {
        // Not in a SERIALIZABLE transaction: a merge of seconds inside it
        // holds back SSI's cleanup of every other serializable
        // transaction's predicate locks, which pile up until the lock
        // table is full ("out of shared memory"). The merge is left to a
        // worker; when none can start, a later insert asks again, and
        // back-pressure waits for the worker's merge instead of running its
        // own.
        if want_merge && !merge::launch_merge_worker(index) {
            let _g = slot.exclusive();
            slot.state().merge_requested = false;
        }
        return false;
    }
    // Without a background worker the merge runs here, after the caller's
    // locks are released, like the back-pressure one.
    overrun || (want_merge && !merge::launch_merge_worker(index))
}
