//! Merges: the dynamic stage (the delta log above `merged_upto`) goes into
//! the base structure as one sorted batch; the base writes what changed
//! and names the pages that leave it; the metapage switches to the new
//! generation in one WAL record, and retired pages are recycled once no
//! reader of an older generation is left, or the xid horizon passed them.

use std::cmp::Ordering;
use std::rc::Rc;
use std::time::Instant;

use pg_hybrid_core::keys::{bytes_cmp, bytes_eq, key_head};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::base::{Dir, Entry, MergeStep, Prune, ScanRange};
use super::killed;
use super::wal;
use super::delta;
use super::meta::{self, BaseInfo, MaintenanceLock};
use super::predlock;
use super::state::{add_key_fetches, expected_dynamic, KeyFilter, SlotState};
use crate::keys::{index_desc, IndexDesc};
use crate::shmem::{self, ArenaPool, SlotRef};
use crate::storage::alloc::{alloc_page, free_pages};
use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Manual,
    Ratio,
    ArenaFull,
    Vacuum,
}

pub struct MergeOutcome {
    pub merged_entries: u64,
    pub static_entries: u64,
    pub millis: f64,
}

/// Runs one merge of `index` in this process. Waits for a merge or VACUUM
/// already running on the index.
pub unsafe fn merge_index(index: pg_sys::Relation, reason: Reason) -> MergeOutcome {
    crate::require_preload();
    if pg_sys::RecoveryInProgress() {
        crate::raise(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot merge an index during recovery",
            "Merges run on the primary and reach standbys through WAL.",
        );
    }
    let _ml = MaintenanceLock::exclusive(index);
    merge_locked(index, reason, None)
}

/// Lets go of the catalog snapshot, which the catalog lookups of a merge
/// (opening the heap, the key's support functions) take and would keep for
/// the rest of the transaction: in a merge worker it is the only snapshot,
/// and its xmin would hold back the horizon for the whole merge, so no
/// version made meanwhile could be found dead to all (the hot keys of an
/// update-heavy load would pile up versions that every probe walks). A
/// backend merging inline keeps its statement's snapshot anyway.
fn release_catalog_snapshot() {
    unsafe { pg_sys::InvalidateCatalogSnapshot() };
}

/// Keys of a batch looked at for dead versions per merge, and TIDs the
/// heap checks at most: about 50 ms of heap visits.
const MAX_VERSION_KEYS: usize = 16384;
const MAX_VERSION_TIDS: usize = 1 << 17;

/// The entries of the keys that `fresh` (the batch, sorted) brings new
/// versions of, from the batch and from the base structure of `base`,
/// sorted: what nbtree's bottom-up deletion would look at. A key counts
/// when the batch holds it twice or more: a row updated again and again
/// without HOT since the last merge (a hot key). Keys updated once leave
/// their old version to the hints, as before: looking each of them up in
/// the base structure at every merge (the first form of this) cost TPC-C
/// a tenth of its throughput (bench runs e and f of 2026-11-26: tpmC 0.75
/// and Delivery p95 1.66 of btree's, against 0.85 and 1.31 without). Keys
/// with the most entries in the batch come first, at most
/// `MAX_VERSION_KEYS` of them and `MAX_VERSION_TIDS` TIDs, so the cost of
/// a merge stays bounded whatever the batch (a bulk load of duplicates
/// into a non-unique index pays for at most that many heap visits). The
/// heap decides which of them are dead to all (`killed::droppable`).
unsafe fn superseded_candidates(index: pg_sys::Relation, desc: &Rc<IndexDesc>, base: &BaseInfo, fresh: &[Entry]) -> Vec<Tid> {
    struct KeyRun {
        start: usize,
        len: usize,
    }
    let mut runs: Vec<KeyRun> = Vec::new();
    let mut i = 0;
    while i < fresh.len() {
        let keycols = desc.keycols(&fresh[i].key);
        let mut j = i + 1;
        while j < fresh.len() && bytes_eq(desc.keycols(&fresh[j].key), keycols) {
            j += 1;
        }
        if j - i >= 2 {
            runs.push(KeyRun { start: i, len: j - i });
        }
        i = j;
    }
    runs.sort_by(|a, b| b.len.cmp(&a.len));
    let mut out: Vec<Tid> = Vec::new();
    for run in runs.iter().take(MAX_VERSION_KEYS) {
        let batch = &fresh[run.start..run.start + run.len];
        out.extend(batch.iter().map(|e| e.tid));
        let room = MAX_VERSION_TIDS.saturating_sub(out.len());
        super::insert::base_tids_of_key(index, desc, base, desc.keycols(&batch[0].key), room, &mut out);
        if out.len() >= MAX_VERSION_TIDS {
            break;
        }
        pgrx::check_for_interrupts!();
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The merge proper; the caller holds the maintenance lock exclusively.
/// `dead` (VACUUM's callback) drops TIDs from the whole base structure on
/// the way. Without it, entries that scans found dead to all (killed-tuple
/// hints) leave the parts of the structure the merge rewrites anyway.
///
/// The base structure works in steps (a segmented structure rewrites one
/// key-range segment per step); each step is switched to on its own, and
/// its retired pages are recycled before the next step allocates, so the
/// file grows by one segment, not by a second copy of the structure. Each
/// step's entries leave the dynamic stage at its switch (`Switch::moved`);
/// the delta log keeps the batch until the last step moves `merged_upto`,
/// so a merge cut short is run again from the same delta-log position (and
/// a scan meeting entries in both stages returns them once).
pub unsafe fn merge_locked(
    index: pg_sys::Relation,
    _reason: Reason,
    mut dead: Option<&mut dyn FnMut(Tid) -> bool>,
) -> MergeOutcome {
    let start = Instant::now();
    let desc = index_desc(index);
    let slot = shmem::slot_for(index);
    {
        let _g = slot.exclusive();
        slot.state().merge_running = true;
    }
    struct Running(SlotRef);
    impl Drop for Running {
        fn drop(&mut self) {
            // Also on ERROR: flags are plain stores, no lock needed for them.
            let st = self.0.state();
            st.merge_running = false;
            st.merge_requested = false;
        }
    }
    let _running = Running(slot);

    recycle_if_safe(index);
    let mut m = meta::read(index);
    let (cutoff, _) = delta::end_pos(index, m.delta_tail);
    let (recs, _, _) = delta::read_from(index, m.delta_head, m.base.merged_upto, cutoff);
    let mut fresh: Vec<Entry> = recs.into_iter().map(|r| Entry { key: r.key, tid: r.tid }).collect();
    let dynamic_fill = dynamic_fill_after(&desc, &fresh);
    sort_batch(&desc, &mut fresh);
    // TIDs first: they differ far more often than keys.
    fresh.dedup_by(|a, b| a.tid == b.tid && bytes_eq(&a.key, &b.key));
    let merged_entries = fresh.len() as u64;
    // Nothing to move and no dead TIDs to drop: the structure on disk is
    // what a merge would write again (a rewrite would only grow the file).
    if merged_entries == 0 && dead.is_none() {
        return MergeOutcome { merged_entries, static_entries: m.base.entries, millis: 0.0 };
    }
    let droppable = if dead.is_none() && ams::base(index).prunes_on_merge() {
        let versions = superseded_candidates(index, &desc, &m.base, &fresh);
        killed::droppable(index, slot, m.base.vacuum_epoch, &versions)
    } else {
        None
    };
    if let Some(d) = &droppable {
        // Before any page of the new generation: a standby switches to it
        // only after the queries that could still see the tuples are gone.
        wal::log_snapshot_conflict(index, d.horizon);
    }
    let dropped: std::cell::RefCell<Vec<Tid>> = std::cell::RefCell::new(Vec::new());
    let mut drop_hinted = |t: Tid| {
        let hit = droppable.as_ref().is_some_and(|d| d.tids.contains(t));
        if hit {
            dropped.borrow_mut().push(t);
        }
        hit
    };
    let outcome;

    let want_filter = desc.unique && desc.hashable;
    // The key filter in place takes the batch's keys unless it is missing
    // or overfull: building it anew from every key of the base at each
    // merge of a batch that touches every leaf cost a tenth of the merge
    // (hashing 5M keys and setting their bits all over a 5 MB filter).
    let rebuild_filter = want_filter && key_filter_stale(slot, m.base.generation, fresh.len(), m.base.keys + merged_entries);
    let mut hashes: Option<Vec<u64>> = rebuild_filter.then(Vec::new);
    let mut rest: &[Entry] = &fresh;
    let mut from: Option<Vec<u8>> = None;
    // A step's entries leave the dynamic stage at its switch, not all at
    // the last one: a batch of random keys is merged in some 30 steps
    // over a second or more, and the stage held it whole until the end
    // besides what arrived meanwhile. A tiered index keeps its hot
    // records' merged entries (hot.rs), at the last step.
    let moves_early = ams::base(index).hot_tier(index).is_none();
    let mut moved_before = 0usize;
    loop {
        // Every step starts a new reader generation: readers registered
        // before its switch may be on pages it retires; readers that start
        // after it never see them.
        let gen = m.next_generation;
        meta::update(index, |mm| mm.next_generation = gen + 1);
        let step = MergeStep { fresh: rest, from: from.as_deref(), key_hashes: hashes.is_some() };
        let prune = match dead.as_mut() {
            Some(d) => Some(Prune { dead: &mut **d, everywhere: true }),
            None if droppable.is_some() => Some(Prune { dead: &mut drop_hinted, everywhere: false }),
            None => None,
        };
        release_catalog_snapshot();
        let res = ams::base(index).merge(index, &desc, &m, step, prune, gen);
        add_key_fetches(slot, res.key_fetches);
        hashes = match (hashes, res.key_hashes) {
            (Some(mut all), Some(h)) if want_filter => {
                all.extend(h);
                Some(all)
            }
            _ => None,
        };
        let taken = &rest[..res.consumed.min(rest.len())];
        rest = &rest[taken.len()..];
        let last = res.next.is_none();
        if last && !rest.is_empty() {
            // The last step moves merged_upto past the whole batch: entries
            // no step took would be lost.
            pgrx::error!("index \"{}\": merge ended with {} entries not merged (base structure {})", crate::storage::page::rel_name(index), rest.len(), ams::base(index).am_name().to_string_lossy());
        }

        let mut new_base = BaseInfo { generation: gen, merged_upto: m.base.merged_upto, vacuum_epoch: m.base.vacuum_epoch, ..Default::default() };
        new_base.set_shape(&res.shape);
        let mut retired = res.retired;
        let millis = start.elapsed().as_secs_f64() * 1000.0;
        let switch = if last {
            // The batch leaves the dynamic stage, and the delta pages it
            // filled retire with this step's pages, as one recycle segment.
            // Keys of the last filter tried: when it got no arena blocks,
            // none is tried again for a while (KeyFilter::stale).
            let tried = std::cell::Cell::new(0u64);
            let build_filter = |h: &[u64]| {
                tried.set(h.len() as u64);
                KeyFilter::build(gen, h)
            };
            let mut key_filter = hashes.as_deref().and_then(build_filter);
            if rebuild_filter && key_filter.is_none() && tried.get() == 0 {
                // Steps skipped leaves (an ascending load merges into the
                // last one only) and the filter in place is missing or
                // overfull: read every key of the new base once. Sized
                // with room, this happens each time the keys grow ~2.25×.
                let all = every_key_hash(index, &desc, &new_base);
                if let Some(h) = &all {
                    debug1!("index \"{}\": key filter built from all {} keys of the base", crate::storage::page::rel_name(index), h.len());
                }
                key_filter = all.as_deref().and_then(build_filter);
            }
            let no_room = (want_filter && key_filter.is_none() && tried.get() > 0).then_some(tried.get());
            // Without every key at hand (steps skipped leaves nothing was
            // merged into), the filter in place takes the batch's keys.
            let fresh_hashes = if want_filter && key_filter.is_none() { fresh[moved_before..].iter().filter_map(|e| desc.key_hash(&e.key)).collect() } else { Vec::new() };
            let (dead_delta, new_head) = delta::pages_below(index, m.delta_head, cutoff);
            let ndead_delta = dead_delta.len() as u32;
            retired.extend(dead_delta);
            new_base.merged_upto = cutoff;
            let recycle_head = write_recycle_list(index, &retired, m.recycle_head, m.base.generation);
            Switch { new_base, new_head, recycle_head, ndead_delta, millis, key_filter, no_room, fresh_hashes, moved: &[], cutoff, dynamic_fill, drained: Some(cutoff) }
        } else {
            let recycle_head = write_recycle_list(index, &retired, m.recycle_head, m.base.generation);
            let moved = if moves_early { taken } else { &[] };
            moved_before += moved.len();
            // Hashed before the slot lock is taken.
            let fresh_hashes = if want_filter { moved.iter().filter_map(|e| desc.key_hash(&e.key)).collect() } else { Vec::new() };
            Switch { new_base, new_head: m.delta_head, recycle_head, ndead_delta: 0, millis, key_filter: None, no_room: None, fresh_hashes, moved, cutoff, dynamic_fill, drained: None }
        };
        // A tiered index's hot records lose what the merge pruned from the
        // cold tier (VACUUM's dead TIDs, hinted ones), so no clean copy
        // outlives its cold entry.
        let mut pruned = |t: Tid| match dead.as_mut() {
            Some(d) => d(t),
            None => droppable.as_ref().is_some_and(|d| d.tids.contains(t)),
        };
        switch.apply(index, &desc, slot, &m, &mut pruned);
        // With no reader left on the old generation its pages are free
        // right away, for the next step to reuse.
        recycle_if_safe(index);
        if last {
            outcome = MergeOutcome { merged_entries, static_entries: res.shape.entries, millis };
            break;
        }
        pgrx::check_for_interrupts!();
        from = res.next;
        m = meta::read(index);
    }
    // The cells of hints whose entries are gone take new hints.
    killed::forget(slot, &dropped.borrow(), m.base.vacuum_epoch);
    // Predicate-lock partitions of the keys the index holds now: the
    // first map of an index built empty, or a new one once it has doubled.
    predlock::remap_if_due(index, &desc, slot, fresh.iter().map(|e| desc.keycols(&e.key)));
    outcome
}

/// Sorts a merge's batch by key, then TID. Byte-ordered keys sort as
/// (`key_head`, position) pairs first, the rest of
/// the key and the TID breaking ties: comparing entries in place followed
/// each one's key to its own allocation, and sorting the 600k entries of
/// a batch that way took a tenth of the merge.
fn sort_batch(desc: &IndexDesc, fresh: &mut Vec<Entry>) {
    if !desc.memcmp {
        fresh.sort_unstable_by(|a, b| desc.compare(&a.key, &b.key).then(a.tid.cmp(&b.tid)));
        return;
    }
    struct Position {
        head: u64,
        at: u32,
    }
    let mut order: Vec<Position> = fresh.iter().enumerate().map(|(i, e)| Position { head: key_head(&e.key), at: i as u32 }).collect();
    order.sort_unstable_by(|a, b| {
        a.head.cmp(&b.head).then_with(|| {
            let (x, y) = (&fresh[a.at as usize], &fresh[b.at as usize]);
            desc.compare(&x.key, &y.key).then(x.tid.cmp(&y.tid))
        })
    });
    let sorted: Vec<Entry> = order.iter().map(|p| {
        let e = &mut fresh[p.at as usize];
        Entry { key: std::mem::take(&mut e.key), tid: e.tid }
    }).collect();
    *fresh = sorted;
}

/// A step's release repacks the dynamic stage when its leaves are less
/// than 4/7 full on average, and it holds at least this many blocks more
/// than packed full (a small tree is not worth the walk: a repack of 250k
/// entries holds the slot lock for about 10 ms).
const MIN_REPACK_BLOCKS: u64 = 64;

/// The leaf fill of a merge's repacks of the dynamic stage (its cleanup
/// at the last step, and the one above) when keys arrive out of order: a
/// B+tree under random inserts settles around 70%, and a leaf packed full
/// splits into two half-empty ones at its first insert.
const DYNAMIC_FILL_PCT: usize = 70;

const FILL_SAMPLE_PAIRS: usize = 4096;

/// The fill for the inserts to come, judged by the batch in arrival order
/// (the delta log's): keys that mostly arrived ascending (a serial key,
/// a timestamp) go on arriving right of the last leaf, and room left in
/// the others would stay empty, so the leaves are packed full as before.
/// Judged on at most `FILL_SAMPLE_PAIRS` neighbours, spread over the
/// batch: a collation's comparison costs a microsecond or so.
fn dynamic_fill_after(desc: &IndexDesc, arrived: &[Entry]) -> usize {
    let pairs = arrived.len().saturating_sub(1);
    let stride = pairs.div_ceil(FILL_SAMPLE_PAIRS).max(1);
    let (mut seen, mut ascending) = (0usize, 0usize);
    for i in (0..pairs).step_by(stride) {
        seen += 1;
        ascending += (desc.compare(&arrived[i].key, &arrived[i + 1].key) != Ordering::Greater) as usize;
    }
    if ascending * 10 >= seen * 9 {
        100
    } else {
        DYNAMIC_FILL_PCT
    }
}

/// What a merge step switches to, in one WAL record and then in shared
/// memory.
struct Switch<'a> {
    new_base: BaseInfo,
    new_head: u32,
    recycle_head: u32,
    ndead_delta: u32,
    millis: f64,
    key_filter: Option<super::state::PendingKeyFilter>,
    /// The arena had no room for a filter over this many keys.
    no_room: Option<u64>,
    /// Hashes of the keys this step adds to the base that the key filter
    /// in place takes: a step's `moved` entries, or at the last step the
    /// batch's entries not moved before, when no new filter was built.
    fresh_hashes: Vec<u64>,
    /// Entries of the batch a step before the last put in the base: they
    /// leave the dynamic stage at its switch (its copies that came in
    /// below `cutoff`). Empty at the last step, whose retain takes all.
    moved: &'a [Entry],
    cutoff: u64,
    /// Leaf fill of the dynamic stage's repacks (`dynamic_fill_after`).
    dynamic_fill: usize,
    /// The last step: the delta-log position below which the dynamic
    /// stage is now merged.
    drained: Option<u64>,
}

impl Switch<'_> {
    /// The metapage (new base, delta head, recycle list) in one WAL record,
    /// then the shared state. Metapage first, so the lock order (buffer,
    /// then slot LWLock) matches inserters.
    unsafe fn apply(self, index: pg_sys::Relation, desc: &crate::keys::IndexDesc, slot: SlotRef, m: &meta::IndexMeta, pruned: &mut dyn FnMut(Tid) -> bool) {
        // The previous newest recycle segment keeps its own horizon from
        // now on, stamped in the same WAL record, so it can be freed before
        // ours.
        let old_head = if self.recycle_head != m.recycle_head && m.recycle_head != NO_BLOCK {
            Some(Buf::read(index, m.recycle_head, Lock::Exclusive))
        } else {
            None
        };
        let metab = Buf::read(index, meta::META_BLOCK, Lock::Exclusive);
        let mut mm = meta::load(index, &metab);
        mm.base = self.new_base;
        mm.delta_head = self.new_head;
        let old_safexid = mm.recycle_safexid;
        if self.recycle_head != mm.recycle_head {
            mm.recycle_head = self.recycle_head;
            mm.recycle_safexid = pg_sys::ReadNextFullTransactionId().value;
        }
        if self.drained.is_some() {
            mm.merges += 1;
            mm.last_merge_us = (self.millis * 1000.0) as u64;
        }
        mm.delta_pages = mm.delta_pages.saturating_sub(self.ndead_delta).max(1);
        store_meta_and_old_horizon(index, &metab, &mm, old_head.as_ref().map(|b| (b, m.recycle_head)), old_safexid);
        drop(old_head);
        {
            let _g = slot.exclusive();
            let st = slot.state();
            let old_gen = st.base.generation;
            st.set_base(self.new_base);
            if self.drained.is_none() && st.key_filter.generation == old_gen && old_gen != 0 {
                // The keys a step before the last adds to the base are
                // either still in the dynamic stage, where a unique check
                // looks anyway, or leave it now (`moved`) and go into the
                // filter: it still answers "not in the base" correctly for
                // every other key. (A filter of another generation answers
                // "maybe" for every key.)
                st.key_filter.bloom.add_all(&self.fresh_hashes);
                st.key_filter.added += self.fresh_hashes.len() as u64;
                st.key_filter.generation = self.new_base.generation;
            }
            if !self.moved.is_empty() {
                // Under the same lock as the new base: a reader takes both
                // at one instant (state::snapshot), and a range scan's
                // reader sees the generation change at its next refill.
                fn key_of(e: &Entry) -> &[u8] {
                    &e.key
                }
                fn tid_of(e: &Entry) -> Tid {
                    e.tid
                }
                // Under the exclusive slot lock: byte order without a call
                // through the descriptor where that is the index order.
                let mut cmp: Box<dyn FnMut(&[u8], &[u8]) -> Ordering> = if desc.memcmp { Box::new(bytes_cmp) } else { Box::new(|a: &[u8], b: &[u8]| desc.compare(a, b)) };
                st.tree.remove_batch(&mut ArenaPool, &mut *cmp, self.moved, key_of, tid_of, self.cutoff);
                // The leaves the steps emptied stay until they are packed,
                // while inserts spread over the whole key range split the
                // full ones: the tree grew to twice the blocks its entries
                // need. Repacked when its leaves are 4/7 full on average.
                if st.tree.nblocks as u64 > st.tree.packed_leaf_blocks() * 7 / 4 + MIN_REPACK_BLOCKS {
                    st.tree.repack_to(&mut ArenaPool, self.dynamic_fill);
                }
            }
            if let Some(cutoff) = self.drained {
                if ams::base(index).hot_tier(index).is_some() {
                    // A tiered index keeps its hot records' merged entries
                    // as clean copies (hot.rs).
                    super::hot::settle(st, desc, cutoff, pruned);
                } else {
                    st.tree.retain_to(&mut ArenaPool, |_k: &[u8], _t: Tid, p: u64| p >= cutoff, self.dynamic_fill);
                }
                let carried = st.key_filter.generation == old_gen && old_gen != 0;
                if self.key_filter.is_none() && carried && !self.fresh_hashes.is_empty() {
                    // Bloom filters take more keys: the old stage's keys plus
                    // the batch's are every key of the new one (more false
                    // positives as it fills; the next merge that reads every
                    // leaf builds a filter of the right size).
                    st.key_filter.bloom.add_all(&self.fresh_hashes);
                    st.key_filter.added += self.fresh_hashes.len() as u64;
                    st.key_filter.generation = self.new_base.generation;
                } else if let Some(keys) = self.no_room {
                    st.key_filter_no_room(keys);
                } else {
                    st.install_key_filter(self.key_filter);
                }
                let expected = expected_dynamic(desc, &self.new_base, index);
                st.rebuild_bloom(desc, expected);
            }
        }
        drop(metab);
    }
}

/// Whether the key filter of generation `gen` should be built anew rather
/// than take `more` keys in place (KeyFilter::stale).
unsafe fn key_filter_stale(slot: SlotRef, gen: u32, more: usize, base_keys: u64) -> bool {
    let _g = slot.shared();
    slot.state().key_filter.stale(gen, more as u64, base_keys)
}

/// The hash of every distinct key of the base structure of `base`, read in
/// key order (None when the structure has no order or stores no keys). The
/// caller holds the maintenance lock, so no page of `base` is recycled.
unsafe fn every_key_hash(index: pg_sys::Relation, desc: &Rc<IndexDesc>, base: &BaseInfo) -> Option<Vec<u64>> {
    if !ams::base(index).ordered() {
        return None;
    }
    let mut out = Vec::with_capacity(base.keys as usize);
    let mut last: Option<u64> = None;
    let mut hashable = true;
    let walked = each_key_from(index, desc, base, &[], |k| {
        let Some(h) = desc.key_hash(k) else {
            hashable = false;
            return false;
        };
        if last != Some(h) {
            out.push(h);
            last = Some(h);
        }
        true
    });
    (walked && hashable).then_some(out)
}

/// Shows the key of every entry of the base structure `base` from the
/// key prefix `lower` on (a cursor may start a little before it) to
/// `each`, in index order, until `each` returns false. False when the
/// structure's cursor does not know its keys or `each` stopped the walk.
/// The caller holds the maintenance lock, so no merge moves the pages.
pub unsafe fn each_key_from(index: pg_sys::Relation, desc: &Rc<IndexDesc>, base: &BaseInfo, lower: &[u8], mut each: impl FnMut(&[u8]) -> bool) -> bool {
    let structure = ams::base(index);
    if structure.is_empty(base) {
        return true;
    }
    let mut c = structure.cursor(index, desc, base);
    if c.keyless() {
        c.stop();
        return false;
    }
    c.start(Dir::Fwd, &ScanRange { lower, upper: None, whole_key: false, strict: (false, false), point: false });
    let mut n = 0u64;
    let mut complete = true;
    while let Some((k, _)) = c.peek(Dir::Fwd) {
        if !each(k) {
            complete = false;
            break;
        }
        c.advance(Dir::Fwd);
        n += 1;
        if n % 65536 == 0 {
            pgrx::check_for_interrupts!();
        }
    }
    c.stop();
    complete
}

/// Lists `blocks` (pages a base structure deleted outside a merge) on a new
/// recycle segment of their own, with today's horizon; freed once no
/// snapshot can still be on them. Caller holds the maintenance lock
/// exclusively.
pub unsafe fn list_for_recycling(index: pg_sys::Relation, blocks: &[u32]) {
    if blocks.is_empty() {
        return;
    }
    let m = meta::read(index);
    let head = write_recycle_list(index, blocks, m.recycle_head, 0);
    let old_head = if m.recycle_head != NO_BLOCK { Some(Buf::read(index, m.recycle_head, Lock::Exclusive)) } else { None };
    let metab = Buf::read(index, meta::META_BLOCK, Lock::Exclusive);
    let mut mm = meta::load(index, &metab);
    let old_safexid = mm.recycle_safexid;
    mm.recycle_head = head;
    mm.recycle_safexid = pg_sys::ReadNextFullTransactionId().value;
    store_meta_and_old_horizon(index, &metab, &mm, old_head.as_ref().map(|b| (b, m.recycle_head)), old_safexid);
}

/// One WAL record: the metapage `mm`, and the horizon `old_safexid` stamped
/// on the first page of the segment that was newest until now (its own
/// horizon from now on; the metapage holds the newest segment's).
unsafe fn store_meta_and_old_horizon(index: pg_sys::Relation, metab: &Buf, mm: &meta::IndexMeta, old_head: Option<(&Buf, u32)>, old_safexid: u64) {
    let mut w = WalRecord::start(index);
    if let Some((ob, blk)) = old_head {
        let op = w.register(ob);
        page::check_page(index, blk, op, &[PageKind::Recycle]);
        page::body_mut(op)[8..16].copy_from_slice(&old_safexid.to_le_bytes());
    }
    meta::store(w.register(metab), mm);
    w.finish();
}

/// Recycle page body: `n u32 | segment_first u32 | safexid u64 | n blocks`.
/// Each merge writes one segment; its first page carries the segment's
/// horizon once a newer segment exists (the newest one's is in the metapage).
const RECYCLE_HDR: usize = 16;
const RECYCLE_CAP: usize = (BODY_CAP - RECYCLE_HDR) / 4;

/// Writes `blocks` as a new segment in front of the chain `tail`; returns the
/// new head (or `tail` when there is nothing to list). Unreferenced until the
/// metapage points at it.
unsafe fn write_recycle_list(index: pg_sys::Relation, blocks: &[u32], tail: u32, retired_gen: u32) -> u32 {
    let mut next = tail;
    let chunks: Vec<&[u32]> = blocks.chunks(RECYCLE_CAP).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let b = alloc_page(index);
        let mut w = WalRecord::start(index);
        let p = w.register_new(&b);
        // The page's generation names the stage the segment retires.
        page::init_page(p, PageKind::Recycle, 0, retired_gen);
        page::opaque_mut(p).right = next;
        let body = page::body_mut(p);
        body[..4].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
        let first = (i + 1 == chunks.len()) as u32; // written last, read first
        body[4..8].copy_from_slice(&first.to_le_bytes());
        body[8..16].copy_from_slice(&0u64.to_le_bytes());
        for (j, blk) in chunk.iter().enumerate() {
            body[RECYCLE_HDR + 4 * j..RECYCLE_HDR + 4 * j + 4].copy_from_slice(&blk.to_le_bytes());
        }
        page::set_body_len(p, RECYCLE_HDR + 4 * chunk.len());
        w.finish();
        next = b.blkno();
    }
    next
}

struct Segment {
    safexid: u64,
    /// Generation of the stage whose pages these are; 0 = not recorded.
    generation: u32,
    pages: Vec<u32>,
    blocks: Vec<u32>,
}

/// The recycle chain, newest segment first.
pub unsafe fn recycle_segments(index: pg_sys::Relation, head: u32, head_safexid: u64) -> Vec<(u64, u32, Vec<u32>, Vec<u32>)> {
    let mut segs: Vec<Segment> = Vec::new();
    let mut blk = head;
    while blk != NO_BLOCK {
        let b = Buf::read(index, blk, Lock::Share);
        page::check_page(index, blk, b.page(), &[PageKind::Recycle]);
        let body = page::body(b.page());
        if body.len() < RECYCLE_HDR {
            page::corrupted(&page::rel_name(index), blk, "recycle page too short");
        }
        let n = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
        let first = u32::from_le_bytes(body[4..8].try_into().unwrap()) != 0;
        if RECYCLE_HDR + 4 * n > body.len() {
            page::corrupted(&page::rel_name(index), blk, "recycle list overruns page");
        }
        if first || segs.is_empty() {
            let x = u64::from_le_bytes(body[8..16].try_into().unwrap());
            let generation = page::opaque(b.page()).generation;
            segs.push(Segment { safexid: if segs.is_empty() { head_safexid } else { x }, generation, pages: Vec::new(), blocks: Vec::new() });
        }
        let seg = segs.last_mut().unwrap();
        seg.pages.push(blk);
        for i in 0..n {
            seg.blocks.push(u32::from_le_bytes(body[RECYCLE_HDR + 4 * i..RECYCLE_HDR + 4 * i + 4].try_into().unwrap()));
        }
        blk = page::opaque(b.page()).right;
    }
    segs.into_iter().map(|s| (s.safexid, s.generation, s.pages, s.blocks)).collect()
}

/// Frees the recycle segments whose horizon every snapshot has passed (the
/// nbtree rule for deleted pages). Segments are newest first and horizons
/// only grow, so those are a suffix of the chain. Caller holds the
/// maintenance lock exclusively.
pub unsafe fn recycle_if_safe(index: pg_sys::Relation) -> u64 {
    let m = meta::read(index);
    if m.recycle_head == NO_BLOCK {
        return 0;
    }
    let segs = recycle_segments(index, m.recycle_head, m.recycle_safexid);
    let visible = |x: u64| pg_sys::GlobalVisCheckRemovableFullXid(std::ptr::null_mut(), pg_sys::FullTransactionId { value: x });
    // No slot: no backend is reading through one (readers.rs).
    let slot = shmem::existing_slot(index);
    let unread = |gen: u32| {
        gen != 0
            && match slot {
                Some(s) => {
                    let _g = s.shared();
                    s.state().readers.generation_free(gen)
                }
                None => true,
            }
    };
    // Newest first; once one segment is free, every older one is too.
    let Some(cut) = segs.iter().position(|s| visible(s.0) || unread(s.1)) else {
        return 0;
    };
    // Unlink first: a crash after this leaks pages until VACUUM's sweep, but
    // never frees a page twice.
    if cut == 0 {
        meta::update(index, |mm| mm.recycle_head = NO_BLOCK);
    } else {
        let last = *segs[cut - 1].2.last().unwrap();
        let b = Buf::read(index, last, Lock::Exclusive);
        let mut w = WalRecord::start(index);
        page::opaque_mut(w.register(&b)).right = NO_BLOCK;
        w.finish();
    }
    if ams::base(index).retired_pages_linked() {
        // Standby queries as old as the newest horizon freed here may still
        // hold links to these pages.
        let newest = segs[cut..].iter().map(|s| s.0).max().unwrap_or(0);
        super::wal::log_recycle_conflict(index, newest);
    }
    let mut blocks = Vec::new();
    let mut lists = Vec::new();
    for (_, _, pages, blks) in &segs[cut..] {
        blocks.extend_from_slice(blks);
        lists.extend_from_slice(pages);
    }
    free_pages(index, &blocks);
    free_pages(index, &lists);
    pg_sys::IndexFreeSpaceMapVacuum(index);
    (blocks.len() + lists.len()) as u64
}

/// Starts a background merge worker for the index; false when background
/// merges are off or no worker slot is free (the caller merges itself).
pub unsafe fn launch_merge_worker(index: pg_sys::Relation) -> bool {
    crate::guc::BACKGROUND_MERGE.get() && crate::workers::launch_merge_worker(pg_sys::MyDatabaseId, (*index).rd_id)
}

/// pg_hybrid.merge(index): merges now and returns the entries moved.
#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.merge(index regclass) RETURNS bigint
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'merge_wrapper';
COMMENT ON FUNCTION pg_hybrid.merge(regclass) IS 'merge the dynamic stage of an index of pg_hybrid into its base structure now';
")]
fn merge(index: pg_sys::Oid) -> i64 {
    unsafe {
        let rel = ams::open_index(index, pg_sys::RowExclusiveLock as i32);
        let out = merge_index(rel, Reason::Manual);
        pg_sys::index_close(rel, pg_sys::RowExclusiveLock as i32);
        out.merged_entries as i64
    }
}
