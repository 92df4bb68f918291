//! The trait an access method implements to run on the staged-index engine:
//! its *base structure*, the on-disk structure that the dynamic stage is
//! merged into (hybrid_btree's compact static stage, elastic_btree's elastic
//! tree). The engine owns everything around it: metapage, delta log and its
//! WAL, the shared-memory dynamic stage, readers, inserts, unique checks,
//! ON CONFLICT, scan keys and the merged cursor, merges, VACUUM of the delta
//! log, recycling, SQL functions. README.md draws how they fit.
//!
//! A base structure is told what to do with sorted batches of entries and
//! answers with named results; it never sees the dynamic stage, and the
//! engine never reads its pages.

use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::meta::{BaseInfo, BaseRoots, IndexMeta};
use crate::keys::IndexDesc;
use crate::storage::page::PageKind;

/// Scan direction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dir {
    Fwd,
    Bwd,
}

impl Dir {
    pub fn step(self) -> isize {
        match self {
            Dir::Fwd => 1,
            Dir::Bwd => -1,
        }
    }
}

/// One (key, TID) index entry; batches are sorted by key, then TID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub tid: Tid,
}

/// The part of the metapage a base structure fills: where it is and how
/// big (the engine adds generation, merge position and VACUUM epoch).
#[derive(Clone, Copy, Debug)]
pub struct BaseShape {
    pub roots: BaseRoots,
    /// Distinct keys and entries (TIDs) it holds.
    pub keys: u64,
    pub entries: u64,
    /// Pages it occupies, and the bytes of their bodies.
    pub pages: u64,
    pub bytes: u64,
}

/// What CREATE INDEX wrote.
pub struct BuildResult {
    pub shape: BaseShape,
    /// Pages the build freed again (an elastic leaf converted away), to be
    /// listed for recycling.
    pub freed: Vec<u32>,
}

/// One step of a merge: what is left of the sorted batch, and where the
/// previous step of the same merge stopped.
#[derive(Clone, Copy)]
pub struct MergeStep<'a> {
    /// Sorted by key, then TID; deduplicated.
    pub fresh: &'a [Entry],
    /// The key the previous step stopped before; None for the first step.
    pub from: Option<&'a [u8]>,
    /// The engine builds its key filter anew from this merge: a structure
    /// that reads every key of the part a step covers returns their hashes
    /// (`MergeResult::key_hashes`). False when the filter in place only
    /// takes the batch's keys, so no step hashes keys it only copies.
    pub key_hashes: bool,
}

/// TIDs a merge step drops from the base structure.
pub struct Prune<'a> {
    /// Whether an entry with this TID goes.
    pub dead: &'a mut dyn FnMut(Tid) -> bool,
    /// VACUUM: every entry of the structure must be tested, whatever the
    /// step would otherwise rewrite. Otherwise (TIDs scans found dead to
    /// all, `killed::droppable`) only the entries the step rewrites anyway
    /// are tested; a structure that rewrites none may ignore it.
    pub everywhere: bool,
}

/// What one step of a merge wrote.
pub struct MergeResult {
    pub shape: BaseShape,
    /// Pages that leave the structure with this step; the engine lists
    /// them for recycling under the generation the step replaces.
    pub retired: Vec<u32>,
    /// Hashes of every key of the part of the structure the step covered
    /// (from `from` to `next`, or to the end), when it had them all at hand
    /// (a unique index's key filter); None drops the filter.
    pub key_hashes: Option<Vec<u64>>,
    /// Heap reads made to learn keys (structures that store none).
    pub key_fetches: u64,
    /// How many entries of the step's `fresh` (a prefix) it merged.
    pub consumed: usize,
    /// Where the next step starts (its `from`); None when the merge is
    /// complete.
    pub next: Option<Vec<u8>>,
    /// The entries a hinted prune (`Prune { everywhere: false }`) took out
    /// of the step's part, with their keys: a structure that holds its
    /// entries twice (griffin's tree and buckets) drops them from its other
    /// part by key. Empty for VACUUM's prune, which reaches every part.
    pub dropped: Vec<Entry>,
}

/// What VACUUM did to the structure.
pub struct VacuumResult {
    pub removed: u64,
    pub kept: u64,
    /// The structure could not drop its dead TIDs in place: the engine runs
    /// a merge that drops them instead.
    pub need_merge: bool,
    /// Set when the structure's shape changed (roots, pages).
    pub shape: Option<BaseShape>,
    /// Pages it deleted; listed for recycling once the xid horizon passes.
    pub retired: Vec<u32>,
    pub key_fetches: u64,
}

/// A tiered index's hot tier (`core/src/hot_tier.rs`): complete records of
/// hot keys kept in the dynamic stage beside its unmerged entries.
#[derive(Clone, Copy, Debug)]
pub struct HotTierSettings {
    /// Bound on the hot tier's live bytes (entries, markers, keys); a
    /// CLOCK sweep evicts records past it and a merge writes dirty entries
    /// down when they alone pass half of it.
    pub hot_bytes: u64,
    /// Chance that a point read which had to read the cold tier copies the
    /// key's record up (the paper's F).
    pub sample_rate: f64,
}

/// Columns of `pg_hybrid.index_stats` only some structures have.
#[derive(Default)]
pub struct BaseStats {
    /// The structure reads keys from the heap (key_fetches is reported).
    pub fetches_keys: bool,
    pub standard_leaves: Option<i64>,
    pub compact_leaves: Option<i64>,
    pub state: Option<String>,
    pub size_bound: Option<i64>,
    /// A hash path's buckets, entries, pages (bucket, overflow, directory
    /// and header) and overflow pages.
    pub hash_buckets: Option<i64>,
    pub hash_entries: Option<i64>,
    pub hash_pages: Option<i64>,
    pub overflow_pages: Option<i64>,
}

/// The range a scan reads: inclusive key prefixes as the engine computes
/// them from its conditions.
pub struct ScanRange<'a> {
    pub lower: &'a [u8],
    pub upper: Option<&'a [u8]>,
    /// The bounds are whole keys (a one-column index), so a structure may
    /// search their positions as keys and honour `strict`.
    pub whole_key: bool,
    /// (lower, upper) exclude the bound itself.
    pub strict: (bool, bool),
    /// The range is one key: equality on every key column (`lower` is the
    /// key columns; INCLUDE columns may follow them in the entries). A
    /// structure with a hash path may answer from it instead of a search
    /// (hashing `lower` so that equal keys agree,
    /// `IndexDesc::canonical_hash`); it still yields the key's entries in
    /// (key, TID) order.
    pub point: bool,
}

/// A position in the base structure. It yields entries in index order from
/// where `start` or `seek_after` put it; the engine checks range ends and
/// conditions, merges in the dynamic stage and remembers the last entry
/// returned. It holds no lock between calls.
pub trait BaseCursor {
    /// Positions before the first entry of `range` in `dir`.
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange);
    /// Positions at the entry after (key, tid) in `dir`, or at it when
    /// `inclusive`. May come without a `start` (a cursor opened again after
    /// a merge, mark/restore, a change of direction); the engine then says
    /// first which range it is in (`seek_range`).
    unsafe fn seek_after(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool);
    /// The range the next `seek_after` lies in. A structure that can seek
    /// by key alone ignores it; one without order (a hash table) needs it
    /// to know what to read.
    unsafe fn seek_range(&mut self, _range: &ScanRange) {}
    /// The entry at the position (moving past page ends), or None at the
    /// end of the structure or of a range it bounded by search.
    unsafe fn peek(&mut self, dir: Dir) -> Option<(&[u8], Tid)>;
    fn advance(&mut self, dir: Dir);
    /// The engine saw the range end: nothing more until the next start.
    fn stop(&mut self);
    /// Whether the structure can return entries without their keys
    /// (`peek_tid`), for scans whose bounds imply their conditions.
    fn keyless(&self) -> bool {
        false
    }
    /// Whether the position is in a forward range whose end `start` found
    /// by search, so `peek_tid` may be used.
    fn bounded_forward(&self) -> bool {
        false
    }
    /// With `bounded_forward`: the TID at the position without reading its
    /// key; every entry it returns lies in the searched range. None at the
    /// end of the range.
    unsafe fn peek_tid(&mut self) -> Option<Tid> {
        None
    }
    /// The key of `tid` (for repositioning after keyless items); None when
    /// the structure cannot tell or the tuple is gone.
    unsafe fn key_of(&mut self, _tid: Tid) -> Option<Vec<u8>> {
        None
    }
    /// Heap reads made so far to learn keys the structure does not store
    /// (the engine adds them to the index's counter when the cursor ends).
    fn key_fetches(&self) -> u64 {
        0
    }
    /// The scan is being rescanned or ended: release everything the
    /// position holds (pins, page copies, heap fetchers) but keep the
    /// allocations, so the next subscan reuses this cursor (a nested-loop
    /// probe then allocates nothing). `key_fetches` starts again from 0.
    fn park(&mut self);
    /// Reads the structure `info` describes from now on (the same index, a
    /// newer metapage snapshot); `start` or `seek_after` follows. `index`
    /// is the relation of the scan that reuses the cursor: a parked cursor
    /// may be kept from one scan to the next (scan.rs, warm scans), and the
    /// relcache entry of the earlier scan may be gone by then.
    unsafe fn reopen(&mut self, index: pg_sys::Relation, info: &BaseInfo);
}

/// An access method's base structure. One static instance per AM, found by
/// the engine through the AM's OID (registry.rs).
pub trait BaseStructure: Sync {
    /// pg_am.amname of the access method.
    fn am_name(&self) -> &'static CStr;

    /// Whether `merge` drops hinted dead TIDs from what it rewrites
    /// (`Prune { everywhere: false }`). Only then does the engine ask the
    /// heap for their conflict horizon and log it; a structure that merges
    /// in place and ignores them would pay for that and cancel standby
    /// queries for nothing.
    fn prunes_on_merge(&self) -> bool {
        true
    }

    /// Whether the structure answers equality on every key column from a
    /// hash path (`ScanRange::point`) rather than a tree descent; the
    /// planner then costs such scans as hash index scans (cost.rs).
    fn hash_point_path(&self) -> bool {
        false
    }

    /// The hot tier of a tiered index, None for every other structure. With
    /// one, the engine keeps complete records of hot keys in the dynamic
    /// stage (clean copies of cold entries behind a marker), answers point
    /// reads of such keys without the base structure, samples cold point
    /// reads for promotion and runs the CLOCK sweep; merges turn the merged
    /// entries of those keys into clean copies instead of dropping them.
    unsafe fn hot_tier(&self, _index: pg_sys::Relation) -> Option<HotTierSettings> {
        None
    }

    /// Raises an ERROR (with a hint) for index definitions the structure
    /// cannot serve; called by CREATE INDEX.
    unsafe fn check_definition(&self, _index: pg_sys::Relation, _desc: &IndexDesc) {}

    /// Raises an ERROR for an encoded key the structure cannot hold, beyond
    /// the engine's own limit (`keys::MAX_KEY_BYTES`); called by `aminsert`
    /// before the entry is logged, so no merge meets a key it must refuse.
    unsafe fn check_key(&self, _index: pg_sys::Relation, _key: &[u8]) {}

    /// Merge trigger: a merge runs when the delta log holds the structure's
    /// `merge_basis` / merge_ratio (`state::merge_threshold`).
    unsafe fn merge_ratio(&self, index: pg_sys::Relation) -> i32;

    /// What a ratio-triggered merge measures the delta log against, in
    /// delta records of `delta_record` bytes: the structure's bytes (its
    /// entries when it reports no bytes). A structure whose merges also
    /// rewrite pages it does not count in its bytes adds them here, or it
    /// merges too small batches into them, each rewriting pages all over.
    fn merge_basis(&self, info: &BaseInfo, delta_record: usize) -> u64 {
        if info.bytes > 0 {
            info.bytes / delta_record.max(1) as u64
        } else {
            info.entries
        }
    }

    /// A cap on unmerged entries when the delta log counts against a size
    /// bound; past twice the cap inserters merge themselves. A hot tier
    /// counts its unmerged (dirty) entries against its bound: a merge
    /// starts when they take half of it, and inserters wait for merges
    /// past the whole of it.
    unsafe fn delta_cap(&self, index: pg_sys::Relation, key_len: usize) -> Option<u64> {
        let hot = self.hot_tier(index)?;
        Some((hot.hot_bytes / 2 / (pg_hybrid_core::hot_tier::ENTRY_OVERHEAD + key_len as u64)).max(1))
    }

    /// Whether the structure changes its pages in place and keeps its own
    /// exact counts there (a hash table's header), the metapage's shape
    /// being a copy taken when a merge step or VACUUM returns: a crash in
    /// between leaves the copy behind until the next one. `verify` then
    /// checks the structure's counts itself, and the engine does not hold
    /// them against the metapage's.
    fn counts_kept_in_place(&self) -> bool {
        false
    }

    /// Whether the structure keeps its entries in key order, so the AM
    /// offers ordered scans, ranges and merge joins (btree's strategies).
    /// A structure without order (tiered_hash's buckets) serves only
    /// equality: its AM offers `=` alone, answers equality on every key
    /// column from one bucket, and any other scan (equality on some key
    /// columns of a multi-column index) by reading every bucket and
    /// sorting what matches; the planner costs that as such (cost.rs).
    fn ordered(&self) -> bool {
        true
    }

    /// Whether the structure holds nothing (no pages at all).
    fn is_empty(&self, info: &BaseInfo) -> bool;

    /// CREATE INDEX: writes the structure for `entries` (`count` of them,
    /// sorted by key, then TID) as generation `gen`, into an index that has
    /// its metapage and delta log.
    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = Entry>,
        count: usize,
        gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult;

    /// One step of a merge: a prefix of `step.fresh` goes into the
    /// structure of `meta`, entries whose TID `prune` accepts leave the part
    /// it covers (all of the structure when `prune.everywhere`); the result is generation `gen`. The engine switches to
    /// each step's result (and may recycle what it retired) before the
    /// next step, so a structure that rewrites itself in key-range segments
    /// keeps only one segment doubled at a time. Entries a step merged stay
    /// in the dynamic stage until the last step (scans return an entry
    /// present in both stages once), so a merge cut short by a crash is
    /// simply run again. The caller holds the maintenance lock exclusively.
    unsafe fn merge(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        step: MergeStep<'_>,
        prune: Option<Prune<'_>>,
        gen: u32,
    ) -> MergeResult;

    /// VACUUM: removes entries whose TID `dead` accepts.
    unsafe fn bulk_delete(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> VacuumResult;

    /// VACUUM's cleanup pass (also when bulk delete was skipped): a chance
    /// to apply changed reloptions. None when there is nothing to do.
    unsafe fn vacuum_cleanup(&self, _index: pg_sys::Relation, _desc: &Rc<IndexDesc>, _meta: &IndexMeta) -> Option<VacuumResult> {
        None
    }

    /// A cursor over the structure described by `info`.
    unsafe fn cursor(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor>;

    /// amcanreturn for key column `attno` (1-based).
    unsafe fn can_return(&self, _index: pg_sys::Relation, desc: &IndexDesc, attno: i32) -> bool {
        attno >= 1 && (attno as usize) <= desc.natts && desc.cols[attno as usize - 1].returnable
    }

    /// amcheck-like check; returns the entries found and, with `all`, adds
    /// each (key columns, TID) to it.
    unsafe fn verify(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, all: Option<&mut HashSet<(Vec<u8>, Tid)>>) -> u64;

    /// The structure's own index_stats columns.
    unsafe fn stats(&self, _index: pg_sys::Relation, _meta: &IndexMeta) -> BaseStats {
        BaseStats::default()
    }

    /// VACUUM's sweep (under the maintenance lock): a test of whether a
    /// page (block, page, kind) that no recycle list names was left behind
    /// by an operation that crashed, so the sweep frees it.
    unsafe fn orphan_test<'a>(&'a self, index: pg_sys::Relation, meta: &'a IndexMeta) -> Box<dyn FnMut(u32, pg_sys::Page, PageKind) -> bool + 'a>;

    /// Whether standby queries may hold links to retired pages, so their
    /// reuse must cancel queries older than the pages' horizon.
    fn retired_pages_linked(&self) -> bool {
        false
    }
}
