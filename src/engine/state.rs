//! The shared-memory dual-stage state of one index (the payload of its
//! shmem slot) and the protocols that keep it equal to the delta log
//! (README.md, "Dynamic stage").

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use pg_hybrid_core::append_clock::AppendClock;
use pg_hybrid_core::bloom;
use pg_hybrid_core::hot_tier;
use pg_hybrid_core::dynamic::{BlockPool, DynTree, DYN_BLOCK_SIZE};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::delta;
use super::meta::{self, BaseInfo, MaintenanceLock};
use crate::keys::IndexDesc;
use crate::shmem::{self, ArenaPool, LwGuard, SlotPayload, SlotRef};

pub const MAX_BLOOM_BLOCKS: usize = 256;
const BLOOM_BITS_PER_ITEM: usize = 10;
/// The static key filter may span more blocks: it covers the whole static
/// stage, not one merge interval.
pub const MAX_KEY_FILTER_BLOCKS: usize = 1024;
const KEY_FILTER_BITS_PER_ITEM: usize = 6;

/// A blocked Bloom filter in arena blocks (at most N of them).
#[repr(C)]
pub struct SharedBloom<const N: usize> {
    pub nblocks: u32,
    pub nhashes: u32,
    pub blocks: [u32; N],
}

impl<const N: usize> SharedBloom<N> {
    /// Replaces the filter by an empty one sized for `expected` items at
    /// `bits` bits each, within 1/32 of the arena (and N blocks), so filters
    /// cannot starve the dynamic stages. Returns false when the arena had
    /// no block at all to give.
    fn allocate(&mut self, pool: &mut ArenaPool, expected: u64, bits: usize) -> bool {
        self.free(pool);
        let want = Self::wanted_blocks(expected, bits).min(Self::cap_blocks());
        for _ in 0..want {
            match pool.alloc() {
                Some(b) => {
                    unsafe { std::ptr::write_bytes(pool.block(b), 0, DYN_BLOCK_SIZE) };
                    self.blocks[self.nblocks as usize] = b;
                    self.nblocks += 1;
                }
                None => break,
            }
        }
        // Fewer blocks than asked for: fewer bits per item, fewer hashes.
        let got_bits = (self.nblocks as usize * DYN_BLOCK_SIZE * 8) / expected.max(1) as usize;
        self.nhashes = bloom::bloom_optimal_hashes(got_bits.clamp(1, bits));
        self.nblocks > 0
    }

    /// Blocks a filter for `expected` items at `bits` bits each would take
    /// without the cap.
    fn wanted_blocks(expected: u64, bits: usize) -> usize {
        let words = bloom::bloom_words_for(expected.max(4096) as usize, bits);
        words.div_ceil(DYN_BLOCK_SIZE / 8).max(1)
    }

    /// The most blocks one filter may take: 1/32 of the arena, at most N.
    fn cap_blocks() -> usize {
        (shmem::header().nblocks as usize / 32).clamp(1, N)
    }

    fn free(&mut self, pool: &mut ArenaPool) {
        for i in 0..self.nblocks as usize {
            pool.free(self.blocks[i]);
        }
        self.nblocks = 0;
    }

    pub fn bytes(&self) -> u64 {
        self.nblocks as u64 * DYN_BLOCK_SIZE as u64
    }

    fn words(&self, h: u64) -> Option<&mut [u64]> {
        let n = self.nblocks as usize;
        if n == 0 {
            return None;
        }
        let blk = self.blocks[((h >> 40) as usize) % n];
        Some(unsafe { std::slice::from_raw_parts_mut(shmem::header().block_ptr(blk) as *mut u64, DYN_BLOCK_SIZE / 8) })
    }

    pub fn add(&self, h: u64) {
        if let Some(w) = self.words(h) {
            bloom::bloom_add(w, self.nhashes, h);
        }
    }

    /// Adds every hash of `hashes`, asking the CPU for the block of the
    /// hash `ADD_AHEAD` places on while it sets the bits of this one. A
    /// filter of millions of keys misses the cache on every add: one at a
    /// time, the key filter's adds were a fifth of a CREATE INDEX of 5M
    /// int8 keys, and a merge makes its batch's adds under the slot lock.
    pub fn add_all(&self, hashes: &[u64]) {
        const ADD_AHEAD: usize = 16;
        for (i, &h) in hashes.iter().enumerate() {
            if let Some(&next) = hashes.get(i + ADD_AHEAD) {
                self.prefetch(next);
            }
            self.add(h);
        }
    }

    fn prefetch(&self, h: u64) {
        if let Some(w) = self.words(h) {
            if let Some(start) = bloom::bloom_block_start(w.len(), h) {
                let block = &w[start..start + bloom::BLOOM_BLOCK_WORDS];
                // SAFETY: u64 words viewed as their bytes.
                pg_hybrid_core::static_stage::prefetch(unsafe { std::slice::from_raw_parts(block.as_ptr() as *const u8, 64) });
            }
        }
    }

    /// False only when the item was certainly never added (true when the
    /// filter has no blocks).
    pub fn may_contain(&self, h: u64) -> bool {
        match self.words(h) {
            Some(w) => bloom::bloom_may_contain(w, self.nhashes, h),
            None => true,
        }
    }
}

/// A filter over every key of one static-stage generation of a UNIQUE
/// index, so most unique checks of new keys skip the static descent. Built
/// from the stream a build or merge writes, or from a scan of the whole
/// base when a merge did not read every leaf and the filter in place is
/// missing (after a restart) or overfull (merge.rs, `key_filter_stale`).
#[repr(C)]
pub struct KeyFilter {
    /// Generation the filter describes; 0 = none.
    pub generation: u32,
    /// Keys the filter was sized for, and keys added to it since (merges
    /// that skip leaves add their batch in place).
    pub sized_for: u64,
    pub added: u64,
    /// The filter got the most blocks a filter may have: a bigger one
    /// cannot be built, so it is not rebuilt for being overfull.
    pub at_cap: bool,
    /// With no filter: a filter for half this many keys found the arena
    /// short, so none is tried again before the base holds this many
    /// (each try reads every key of the base). 0 = try.
    pub no_room_below: u64,
    pub bloom: SharedBloom<MAX_KEY_FILTER_BLOCKS>,
}

/// A key filter built but not yet installed in a slot; its arena blocks go
/// back to the pool if it is dropped (e.g. the merge fails).
pub struct PendingKeyFilter {
    filter: Box<KeyFilter>,
    /// Hashes `add` took and has not yet set, set in batches (`add_all`).
    queued: Vec<u64>,
}

/// Hashes `PendingKeyFilter::add` gathers before it sets them.
const ADD_BATCH: usize = 256;

impl Drop for PendingKeyFilter {
    fn drop(&mut self) {
        self.filter.bloom.free(&mut ArenaPool);
    }
}

impl PendingKeyFilter {
    /// Adds the key hash `h` (set by the next batch, or by `finished`).
    pub fn add(&mut self, h: u64) {
        self.queued.push(h);
        if self.queued.len() >= ADD_BATCH {
            self.set_queued();
        }
    }

    fn set_queued(&mut self) {
        self.filter.bloom.add_all(&self.queued);
        self.filter.added += self.queued.len() as u64;
        self.queued.clear();
    }

    /// The filter with every hash added so far set.
    fn finished(&mut self) -> &mut KeyFilter {
        self.set_queued();
        &mut self.filter
    }
}

impl KeyFilter {
    /// Fills a filter on fresh arena blocks, outside any lock: nobody sees
    /// it until `install_key_filter`. It is sized for half as many keys
    /// again as `hashes`: room for the batches that later merges which
    /// skip leaves add in place.
    pub fn build(generation: u32, hashes: &[u64]) -> Option<PendingKeyFilter> {
        let mut f = Self::start(generation, hashes.len() as u64)?;
        f.filter.bloom.add_all(hashes);
        f.filter.added += hashes.len() as u64;
        Some(f)
    }

    /// An empty filter on fresh arena blocks for about `keys` keys, sized
    /// as `build` sizes one; keys are added as they come (CREATE INDEX adds
    /// them as they stream out of its sort, instead of gathering them).
    pub fn start(generation: u32, keys: u64) -> Option<PendingKeyFilter> {
        let sized_for = keys.saturating_mul(3) / 2;
        let mut f: Box<KeyFilter> = Box::new(KeyFilter {
            generation,
            sized_for,
            added: 0,
            at_cap: false,
            no_room_below: 0,
            bloom: SharedBloom { nblocks: 0, nhashes: 0, blocks: [0; MAX_KEY_FILTER_BLOCKS] },
        });
        if !f.bloom.allocate(&mut ArenaPool, sized_for, KEY_FILTER_BITS_PER_ITEM) {
            return None;
        }
        let wanted = SharedBloom::<MAX_KEY_FILTER_BLOCKS>::wanted_blocks(sized_for, KEY_FILTER_BITS_PER_ITEM);
        f.at_cap = (f.bloom.nblocks as usize) < wanted;
        Some(PendingKeyFilter { filter: f, queued: Vec::with_capacity(ADD_BATCH) })
    }

    /// True when a merge to generation `gen`'s successor that adds `more`
    /// keys in place should build the filter anew from every key of the
    /// base (`base_keys` of them): there is none for `gen` (a restart, or
    /// the arena was short, unless it was short for about as many keys),
    /// or it would hold more than 3/2 of the keys it was sized for (6 bits
    /// per key fall to 4: about 1 false positive in 6, and an ascending
    /// load, whose merges skip every leaf but the last, never rebuilds it
    /// otherwise).
    pub fn stale(&self, gen: u32, more: u64, base_keys: u64) -> bool {
        if self.bloom.nblocks == 0 && base_keys < self.no_room_below {
            return false;
        }
        if self.generation != gen || gen == 0 || self.bloom.nblocks == 0 {
            return true;
        }
        !self.at_cap && (self.added + more).saturating_mul(2) > self.sized_for.saturating_mul(3)
    }

    /// False only when no key hashing to `h` is in static generation `gen`.
    /// (A filter of another generation knows nothing: true.)
    pub fn may_contain(&self, gen: u32, h: u64) -> bool {
        self.generation != gen || self.bloom.nblocks == 0 || self.bloom.may_contain(h)
    }
}

/// Entries of a key one insert looks at for dead versions to prune
/// (`prune_dead_versions`). A hot key's run is mostly dead versions and is
/// tidied a little by every insert of it; an index on a column with few
/// values holds runs of thousands of live entries, which every insert of
/// the key walked whole: 100k inserts of one value into a million-row
/// griffin index took 56 s against 0.45 s without any hint.
const PRUNE_KEY_VISIT: usize = 128;

#[repr(C)]
pub struct DualStageState {
    /// Primary: the tree holds every delta-log entry at or above
    /// `base.merged_upto` (inserters add theirs as they append).
    pub valid: bool,
    /// Standby: the tree was synced from the log up to `applied_upto`.
    pub synced_in_recovery: bool,
    pub merge_requested: bool,
    pub merge_running: bool,
    pub base: BaseInfo,
    pub applied_upto: u64,
    pub applied_block: u32,
    pub tree: DynTree,
    pub bloom: SharedBloom<MAX_BLOOM_BLOCKS>,
    pub key_filter: KeyFilter,
    pub bloom_skips: AtomicU64,
    pub bloom_checks: AtomicU64,
    /// Last known delta-log tail block (0 = unknown; block 0 is the metapage).
    pub tail_hint: std::sync::atomic::AtomicU32,
    /// Readers of base structures (readers.rs): those of `base.generation`,
    /// and of older generations still being read.
    pub readers: super::readers::ReaderCounts,
    /// The metapage's predicate-lock partition map (predlock.rs). A remap
    /// changes it under the slot's exclusive lock together with the copy
    /// of every SIREAD lock to the new partitions.
    pub lockmap: super::predlock::LockMapRef,
    /// Heap reads base structures made to learn keys they do not store.
    pub key_fetches: AtomicU64,
    /// Arena blocks of the killed-tuple hints of every backend's scans
    /// (killed.rs; none until the first hint).
    pub hints: super::killed::HintBlocks,
    /// A tiered index's hot tier: counters and the CLOCK hand (hot.rs).
    pub hot: super::hot::HotState,
    /// When the unmerged entries were appended, sampled (primary only):
    /// the sync lag of `pg_hybrid.sync_lag`.
    pub clock: AppendClock,
}

impl DualStageState {
    /// The state of a slot that has never been used (shared memory starts
    /// zeroed, which is not a valid tree header).
    pub fn init_empty(&mut self) {
        self.tree = DynTree::new();
        self.bloom.nblocks = 0;
        self.key_filter.generation = 0;
        self.key_filter.bloom.nblocks = 0;
        self.valid = false;
        self.synced_in_recovery = false;
        self.merge_requested = false;
        self.merge_running = false;
        self.readers.clear();
        self.hints.init();
        self.hot.clear();
        self.clock = AppendClock::default();
    }

    /// Frees everything and marks the state as needing a rebuild.
    pub fn reset(&mut self, pool: &mut ArenaPool) {
        self.tree.clear(pool);
        self.tree = DynTree::new();
        self.bloom.free(pool);
        self.drop_key_filter(pool);
        self.valid = false;
        self.synced_in_recovery = false;
        self.merge_requested = false;
        self.merge_running = false;
        self.base = BaseInfo::default();
        self.applied_upto = 0;
        self.applied_block = 0;
        self.bloom_skips = AtomicU64::new(0);
        self.bloom_checks = AtomicU64::new(0);
        self.tail_hint = std::sync::atomic::AtomicU32::new(0);
        self.readers.clear();
        self.lockmap = super::predlock::LockMapRef::NONE;
        self.key_fetches = AtomicU64::new(0);
        // The hint block stays with the slot (killed.rs), emptied.
        self.hints.clear(0);
        self.hot.clear();
        self.clock.clear();
    }

    /// Switches to another static stage; readers of the one left behind
    /// keep being counted under its generation. Caller holds the slot lock
    /// exclusively.
    pub fn set_base(&mut self, base: BaseInfo) {
        if base.generation != self.base.generation {
            self.readers.retire_current(self.base.generation);
        }
        self.base = base;
    }

    pub fn drop_key_filter(&mut self, pool: &mut ArenaPool) {
        self.key_filter.bloom.free(pool);
        self.key_filter.generation = 0;
    }

    /// Replaces the key filter by `f` (or drops it); caller holds the slot
    /// lock exclusively and switches `base` to `f`'s generation with it.
    pub fn install_key_filter(&mut self, f: Option<PendingKeyFilter>) {
        self.drop_key_filter(&mut ArenaPool);
        if let Some(mut pending) = f {
            let f = pending.finished();
            let n = f.bloom.nblocks as usize;
            self.key_filter.bloom.nhashes = f.bloom.nhashes;
            self.key_filter.bloom.blocks[..n].copy_from_slice(&f.bloom.blocks[..n]);
            self.key_filter.bloom.nblocks = n as u32;
            self.key_filter.generation = f.generation;
            self.key_filter.sized_for = f.sized_for;
            self.key_filter.added = f.added;
            self.key_filter.at_cap = f.at_cap;
            self.key_filter.no_room_below = 0;
            f.bloom.nblocks = 0; // the slot owns the blocks now
        }
    }

    /// A filter for `keys` keys could not get its arena blocks: none is
    /// tried again before the base holds twice as many (`KeyFilter::stale`).
    /// Caller holds the slot lock exclusively.
    pub fn key_filter_no_room(&mut self, keys: u64) {
        self.drop_key_filter(&mut ArenaPool);
        self.key_filter.no_room_below = keys.saturating_mul(2).max(1);
    }

    /// Sizes the Bloom filter for `expected` entries and fills it from the tree.
    pub fn rebuild_bloom(&mut self, desc: &IndexDesc, expected: u64) {
        let mut pool = ArenaPool;
        self.bloom.free(&mut pool);
        if !desc.hashable {
            return;
        }
        self.bloom.allocate(&mut pool, expected, BLOOM_BITS_PER_ITEM);
        let mut hashes = Vec::with_capacity(self.tree.nentries as usize);
        self.tree.scan_all(&ArenaPool, |k: &[u8], _t: Tid, _p: u64| {
            if let Some(h) = desc.key_hash(k) {
                hashes.push(h);
            }
            true
        });
        self.bloom.add_all(&hashes);
    }

    pub fn bloom_add(&self, h: u64) {
        self.bloom.add(h);
    }

    /// False only when the key is certainly not in the dynamic stage;
    /// counted in `bloom_checks` / `bloom_skips` (index_stats).
    pub fn bloom_may_contain(&self, h: u64) -> bool {
        self.bloom_checks.fetch_add(1, AtomicOrdering::Relaxed);
        let maybe = self.bloom.may_contain(h);
        if !maybe {
            self.bloom_skips.fetch_add(1, AtomicOrdering::Relaxed);
        }
        maybe
    }

    /// Shared memory held: tree, Bloom filter and key filter.
    pub fn shared_bytes(&self) -> u64 {
        self.tree.bytes_used() + self.bloom.bytes() + self.key_filter.bloom.bytes() + self.hints.bytes()
    }

    /// Drops from the tree the versions of `key` (its key columns) that
    /// scans hinted dead to all in the current vacuum epoch, among the
    /// first `PRUNE_KEY_VISIT` of them; the caller
    /// holds the slot lock exclusively and is about to insert `key`.
    /// nbtree deletes its LP_DEAD items when an insert would split their
    /// page; here every insert of a key tidies that key's run, so a key
    /// updated over and over (a zipfian hot key) keeps a few live entries
    /// in the tree instead of every version since the last merge, each of
    /// which every probe of the key would walk. Only the shared tree
    /// changes: the delta log keeps the records (a merge drops hinted ones
    /// with a standby conflict, VACUUM removes them), a rebuild from the
    /// log brings them back, and a standby's tree, built by replay, never
    /// loses them. A scan of this epoch would skip every pruned entry, and
    /// one that opened before the epoch's VACUUM has a snapshot that cannot
    /// see a tuple dead to all.
    pub fn prune_dead_versions(&mut self, desc: &IndexDesc, key: &[u8], owner: u64, dead: &[Tid]) -> usize {
        if self.tree.nentries == 0 || (dead.is_empty() && !self.hints.any()) {
            return 0;
        }
        // A key the Bloom filter has not seen has no versions in the tree
        // (the filter holds every key the tree does): most inserts into a
        // unique index bring a new key, and the descent to find nothing
        // cost about as much as the insert's own.
        if desc.key_hash(key).is_some_and(|h| !self.bloom.may_contain(h)) {
            return 0;
        }
        let (epoch, hints) = (self.base.vacuum_epoch, &self.hints);
        let keycols = desc.keycols(key);
        // `dead` is sorted (the unique check walks the key's TIDs in order).
        self.tree.prune_key(&mut ArenaPool, &mut |k| desc.compare_prefix(k, keycols), PRUNE_KEY_VISIT, &mut |t| {
            dead.binary_search(&t).is_ok() || hints.contains(owner, t, epoch)
        })
    }

    /// `prune_dead_versions` over the keys from `lo` to `hi`, looking at
    /// `budget` entries at most (`prune_dead_range`).
    fn prune_dead_between(&mut self, desc: &IndexDesc, lo: &[u8], hi: &[u8], budget: usize, owner: u64) -> usize {
        if self.tree.nentries == 0 || !self.hints.any() {
            return 0;
        }
        let (epoch, hints) = (self.base.vacuum_epoch, &self.hints);
        let mut cmp = |x: &[u8], y: &[u8]| desc.compare(x, y);
        self.tree.prune_range(&mut ArenaPool, &mut cmp, lo, hi, budget, &mut |t| hints.contains(owner, t, epoch))
    }

    pub fn insert(&mut self, desc: &IndexDesc, key: &[u8], tid: Tid, pos: u64) -> bool {
        let mut cmp = |a: &[u8], b: &[u8]| desc.compare(a, b);
        // Keys ordered by their bytes let the leaf search read the slot
        // array's key hints instead of the entries (core/src/DYNAMIC.md).
        let done = if desc.memcmp {
            self.tree.insert_bytewise(&mut ArenaPool, key, tid, pos)
        } else {
            self.tree.insert(&mut ArenaPool, &mut cmp, key, tid, pos)
        };
        match done {
            Ok(()) => {
                if let Some(h) = desc.key_hash(key) {
                    self.bloom_add(h);
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// Makes the slot's dynamic stage usable by this process: rebuilt from the
/// delta log after a restart (primary) or caught up with replay (standby).
pub unsafe fn ensure_synced(rel: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef) {
    if pg_sys::RecoveryInProgress() {
        sync_standby(rel, desc, slot);
        return;
    }
    {
        let _g = slot.shared();
        if slot.state().valid {
            return;
        }
    }
    rebuild_primary(rel, desc, slot);
}

/// The slot lock in shared mode over a dynamic stage this process may
/// read: a primary's valid stage needs nothing more than this one lock
/// (a valid stage stays valid); a stage that needs a rebuild, and a
/// standby's (which catches up with replay every time), is synced first.
pub unsafe fn shared_usable(rel: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef) -> LwGuard {
    let in_recovery = pg_sys::RecoveryInProgress();
    let mut synced = !in_recovery;
    loop {
        if !synced {
            ensure_synced(rel, desc, slot);
        }
        let g = slot.shared();
        let st = slot.state();
        if if in_recovery { st.synced_in_recovery } else { st.valid } {
            return g;
        }
        synced = false;
    }
}

unsafe fn out_of_arena(rel: pg_sys::Relation) -> ! {
    crate::raise(PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY, format!(
            "pg_hybrid.shared_memory is too small for the dynamic stage of index \"{}\"",
            crate::storage::page::rel_name(rel)
        ), "Raise pg_hybrid.shared_memory (it must be at least as large as on the primary) and restart, or run pg_hybrid.merge() on the primary.");
}

unsafe fn rebuild_primary(rel: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef) {
    let _ml = MaintenanceLock::share(rel);
    let m = meta::read(rel);
    let (recs, end, _) = delta::read_from(rel, m.delta_head, m.base.merged_upto, u64::MAX);
    let _g = slot.exclusive();
    let st = &mut slot.state();
    if st.valid {
        return;
    }
    let merged = m.base.merged_upto;
    st.lockmap = m.lock_map();
    // Entries at or past `end` were added by inserters after our read.
    st.tree.retain(&mut ArenaPool, |_k: &[u8], _t: Tid, p: u64| p >= end && p >= merged);
    st.set_base(m.base);
    // The log does not say when its entries came: those read here are
    // dated from now (README "Sync lag").
    if let Some(first) = recs.first() {
        st.clock.note(first.pos, pg_sys::GetCurrentTimestamp(), merged, 0);
    }
    for r in &recs {
        if !st.insert(desc, &r.key, r.tid, r.pos) {
            st.tree.clear(&mut ArenaPool);
            drop(_g);
            out_of_arena(rel);
        }
    }
    let expected = expected_dynamic(desc, &m.base, rel);
    st.rebuild_bloom(desc, expected.max(st.tree.nentries));
    st.valid = true;
    st.synced_in_recovery = false;
}

/// Dynamic-stage entries at which a ratio-triggered merge starts: when the
/// delta log reaches the base structure's bytes / merge_ratio (the paper's
/// trigger compares stage sizes), `basis` being those bytes in delta
/// records (`BaseStructure::merge_basis`). A delta record (full key and
/// TID) is about twice a static entry, so counting entries let the log
/// grow to a third of the static stage, and the relation kept that
/// high-water mark as free pages after each merge.
pub fn merge_threshold(basis: u64, ratio: i32) -> u64 {
    (basis / ratio.max(1) as u64).max(crate::guc::MERGE_MIN_ENTRIES.get() as u64)
}

/// The dynamic-stage size at which a merge triggers, for Bloom sizing: an
/// upper bound of `merge_threshold` for every key. A delta record is never
/// smaller than a base entry, so the basis in records of a base entry's
/// average size bounds it; the filter is never too small.
pub unsafe fn expected_dynamic(_desc: &IndexDesc, base: &BaseInfo, rel: pg_sys::Relation) -> u64 {
    let structure = super::ams::base(rel);
    let entry_bytes = if base.entries > 0 { base.bytes.div_ceil(base.entries) } else { 1 };
    merge_threshold(structure.merge_basis(base, entry_bytes.max(1) as usize), structure.merge_ratio(rel))
}

unsafe fn sync_standby(rel: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef) {
    for _attempt in 0..100 {
        let m = meta::read(rel);
        let (end, _tail) = delta::end_pos(rel, m.delta_tail);
        let (full, from_blk, from_pos) = {
            let _g = slot.shared();
            let st = &slot.state();
            // A merge step that is not the last changes only the base
            // (generation and roots): the dynamic stage stays as it is.
            let same = st.synced_in_recovery
                && st.base.vacuum_epoch == m.base.vacuum_epoch
                && st.base.merged_upto == m.base.merged_upto;
            if same && st.base.generation == m.base.generation && st.applied_upto >= end {
                return;
            }
            if same {
                (false, st.applied_block, st.applied_upto)
            } else {
                (true, m.delta_head, m.base.merged_upto)
            }
        };
        let read = delta::read_from_during_replay(rel, from_blk, from_pos, u64::MAX);
        let m2 = meta::read(rel);
        if m2.base.generation != m.base.generation || m2.base.vacuum_epoch != m.base.vacuum_epoch {
            continue; // replay moved under us; try again
        }
        // A page of another kind in a chain replay did not move: corrupt,
        // and the strict read says where.
        let (recs, seen_end, last_blk) = read.unwrap_or_else(|| delta::read_from(rel, from_blk, from_pos, u64::MAX));
        let _g = slot.exclusive();
        let st = &mut slot.state();
        if full {
            st.tree.clear(&mut ArenaPool);
            st.set_base(m.base);
            st.lockmap = m.lock_map();
        } else if st.applied_upto != from_pos || st.base.vacuum_epoch != m.base.vacuum_epoch || st.base.merged_upto != m.base.merged_upto {
            continue; // another backend synced meanwhile
        } else if st.base.generation != m.base.generation {
            st.set_base(m.base);
            st.lockmap = m.lock_map();
        }
        for r in &recs {
            if !st.insert(desc, &r.key, r.tid, r.pos) {
                st.tree.clear(&mut ArenaPool);
                st.synced_in_recovery = false;
                drop(_g);
                out_of_arena(rel);
            }
        }
        if full {
            let expected = expected_dynamic(desc, &m.base, rel);
            st.rebuild_bloom(desc, expected.max(st.tree.nentries));
        }
        st.applied_upto = seen_end;
        st.applied_block = last_blk;
        st.synced_in_recovery = true;
        st.valid = false;
        return;
    }
    crate::raise(PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE, format!("could not read a stable dynamic stage of index \"{}\" during recovery", crate::storage::page::rel_name(rel)), "Retry the query.");
}

/// The start of a scan: the base structure it reads (registered, so its
/// pages stay), and whether the dynamic stage can hold a point key.
pub struct ScanStart {
    pub base: BaseInfo,
    /// The predicate-lock partition map (predlock.rs).
    pub lockmap: super::predlock::LockMapRef,
    /// False when the Bloom filter rules the point key out of the
    /// dynamic stage.
    pub dynamic_may_contain: bool,
    pub reader: super::readers::ReaderToken,
}

/// Registers a reader of the current base generation (keeping `held`, the
/// registration of the scan's previous cursor, when it is of that
/// generation); `point_hash` is the key hash of a full-key equality scan,
/// which the Bloom filter may rule out of the dynamic stage.
pub unsafe fn start_scan(rel: pg_sys::Relation, desc: &IndexDesc, slot: SlotRef, point_hash: Option<u64>, mut held: Option<super::readers::ReaderToken>) -> ScanStart {
    let _g = shared_usable(rel, desc, slot);
    let st = slot.state();
    let dynamic_may_contain = st.tree.nentries > 0 && point_hash.is_none_or(|h| st.bloom_may_contain(h));
    let reader = match held.take() {
        Some(t) if t.covers(slot, st) => t,
        other => {
            // An outdated registration is dropped after the lock is
            // released (deregistering takes it again).
            held = other;
            super::readers::ReaderToken::register(slot, st)
        }
    };
    let start = ScanStart { base: st.base, lockmap: st.lockmap, dynamic_may_contain, reader };
    drop(_g);
    drop(held);
    start
}

/// Entries of the dynamic stage matching a scan range, copied out together
/// with the base structure they complement.
pub struct DynSnapshot {
    pub base: BaseInfo,
    pub items: Vec<(Vec<u8>, Tid)>,
    /// False when the key filter rules the point key out of `base`.
    pub static_may_contain: bool,
    /// Keeps `base`'s pages from being recycled while it lives.
    pub reader: super::readers::ReaderToken,
}

/// Copies the dynamic entries with `lower <= key (prefix) <= upper` that pass
/// `filter`. `point_hash` is the key hash when the scan is a full-key
/// equality, so the Bloom filter can skip the tree.
pub unsafe fn snapshot(
    rel: pg_sys::Relation,
    desc: &IndexDesc,
    slot: SlotRef,
    lower: &[u8],
    upper: Option<&[u8]>,
    point_hash: Option<u64>,
    filter: &mut dyn FnMut(&[u8]) -> bool,
) -> DynSnapshot {
    let _g = shared_usable(rel, desc, slot);
    let st = &slot.state();
    let mut items = Vec::new();
    let mut complete = false;
    if st.tree.nentries > 0 {
        if point_hash.is_none_or(|h| st.bloom_may_contain(h)) {
            let merged = st.base.merged_upto;
            let visit = |k: &[u8], t: Tid, p: u64| {
                if let Some(u) = upper {
                    if desc.compare_prefix(k, u) == Ordering::Greater {
                        return false;
                    }
                }
                if hot_tier::is_marker(t) {
                    // A tiered index's record of the point key: every
                    // entry of the key is here, merged ones included.
                    complete |= upper == Some(lower) && desc.compare_prefix(k, lower) == Ordering::Equal;
                    return true;
                }
                if (p >= merged || complete) && filter(k) {
                    items.push((k.to_vec(), t));
                }
                true
            };
            if desc.memcmp {
                st.tree.scan_bytewise(&ArenaPool, lower, visit);
            } else {
                st.tree.scan(&ArenaPool, &mut |k: &[u8]| desc.compare_prefix(k, lower), visit);
            }
        }
    }
    if complete {
        let mut cmp = |a: &[u8], b: &[u8]| desc.compare(a, b);
        hot_tier::touch(&st.tree, &ArenaPool, &mut cmp, lower);
    }
    let static_may_contain = !complete && point_hash.is_none_or(|h| st.key_filter.may_contain(st.base.generation, h));
    let reader = super::readers::ReaderToken::register(slot, st);
    DynSnapshot { base: st.base, items, static_may_contain, reader }
}

/// The engine's state as the payload of a shmem slot (shmem::SlotPayload).
pub struct EnginePayload;

pub static PAYLOAD: EnginePayload = EnginePayload;

unsafe fn payload<'a>(p: *const u8) -> &'a mut DualStageState {
    &mut *(p as *mut DualStageState)
}

impl SlotPayload for EnginePayload {
    fn size(&self) -> usize {
        std::mem::size_of::<DualStageState>()
    }
    unsafe fn init(&self, p: *mut u8) {
        payload(p).init_empty();
    }
    unsafe fn reset(&self, p: *mut u8) {
        payload(p).reset(&mut ArenaPool);
    }
    unsafe fn idle(&self, p: *const u8) -> bool {
        let st = payload(p);
        st.tree.nentries == 0 && !st.merge_running && !st.readers.any()
    }
    unsafe fn arena_blocks(&self, p: *const u8) -> u32 {
        let st = payload(p);
        if st.merge_requested || st.merge_running {
            0
        } else {
            st.tree.nblocks
        }
    }
    unsafe fn claim_merge(&self, p: *mut u8) -> bool {
        let st = payload(p);
        if st.merge_requested || st.merge_running {
            return false;
        }
        st.merge_requested = true;
        true
    }
    unsafe fn unclaim_merge(&self, p: *mut u8) {
        payload(p).merge_requested = false;
    }
}

/// The dual-stage state in a slot.
pub trait SlotState {
    /// Lock the slot first (shared to read, exclusive to change).
    fn state(&self) -> &'static mut DualStageState;
}

impl SlotState for SlotRef {
    fn state(&self) -> &'static mut DualStageState {
        unsafe { payload(self.payload()) }
    }
}

/// Adds heap reads a base structure made for keys to the index's counter.
pub fn add_key_fetches(slot: SlotRef, n: u64) {
    if n > 0 {
        slot.state().key_fetches.fetch_add(n, AtomicOrdering::Relaxed);
    }
}

/// Drops from the dynamic stage the entries with keys between `a` and `b`
/// (either order) whose TIDs are hinted dead in the current epoch, when a
/// scan has just stepped over `seen` of them (scan.rs, `DeadSeen`); the
/// same pruning as `DualStageState::prune_dead_versions`, over a range.
/// The lock is taken only if it is free at once: inserters and other scans
/// are not made to wait for a tidy-up, and the next scan tries again.
pub fn prune_dead_range(slot: SlotRef, desc: &IndexDesc, a: &[u8], b: &[u8], seen: u32) -> usize {
    if unsafe { pg_sys::RecoveryInProgress() } {
        return 0;
    }
    let Some(_g) = crate::shmem::LwGuard::try_exclusive(slot.lock()) else { return 0 };
    if !slot.holds_key() {
        return 0;
    }
    let st = slot.state();
    if !st.valid {
        return 0;
    }
    let (lo, hi) = if desc.compare(a, b) == Ordering::Greater { (b, a) } else { (a, b) };
    // The scan stepped over `seen` dead entries in that range; live ones
    // between them are walked too, but not without bound.
    let budget = seen as usize * 4 + 64;
    st.prune_dead_between(desc, lo, hi, budget, super::killed::owner_of(slot.key))
}
