//! tiered_hash's base structure: the cold tier is a hash table on
//! PostgreSQL pages (`crate::hash_path`, linear hashing); the hot tier is
//! the engine's, as for tiered_btree. The table has no key order, so the
//! AM offers equality only (`BaseStructure::ordered`): equality on every
//! key column reads one bucket; equality on some key columns of a
//! multi-column index (the planner's only other scan, costed as a walk of
//! every bucket) reads every bucket and sorts what matches, within
//! work_mem. README.md: where this follows the paper's 2-Hash and where it
//! does not.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::options;
use crate::engine::base::{BaseCursor, BaseShape, BaseStats, BaseStructure, BuildResult, Dir, Entry, HotTierSettings, MergeResult, MergeStep, Prune, ScanRange, VacuumResult};
use crate::engine::meta::{BaseInfo, BaseRoots, IndexMeta};
use crate::engine::stats::fail;
use crate::hash_path::{self as hash, BucketLoader, PointHits};
use crate::keys::IndexDesc;
use crate::storage::page::{self, PageKind, NO_BLOCK};

pub struct TieredHash;

pub static TIERED_HASH: TieredHash = TieredHash;

/// Word 0 of the base roots: the block of the table's header page
/// (NO_BLOCK until the first build or merge writes one). The header block
/// never changes once written.
fn header_of(info: &BaseInfo) -> u32 {
    info.roots.words[0]
}

/// The shape of the table at `header` as its header page counts it. The
/// table does not count distinct keys: `keys` is its entries.
unsafe fn shape_of(index: pg_sys::Relation, header: u32) -> BaseShape {
    let (s, _) = hash::stats(index, header);
    let mut roots = BaseRoots::NONE;
    roots.words[0] = header;
    BaseShape { roots, keys: s.entries, entries: s.entries, pages: s.pages, bytes: s.entry_bytes }
}

impl BaseStructure for TieredHash {
    fn am_name(&self) -> &'static CStr {
        c"tiered_hash"
    }

    /// Merges insert into buckets in place and rewrite nothing, so there is
    /// nothing to drop hinted dead TIDs from; VACUUM removes them.
    fn prunes_on_merge(&self) -> bool {
        false
    }

    fn hash_point_path(&self) -> bool {
        true
    }

    fn ordered(&self) -> bool {
        false
    }

    /// VACUUM and merges change buckets in place; the header page counts
    /// entries exactly (core verify checks it), the metapage's shape is a
    /// copy from the last merge or VACUUM.
    fn counts_kept_in_place(&self) -> bool {
        true
    }

    unsafe fn hot_tier(&self, index: pg_sys::Relation) -> Option<HotTierSettings> {
        Some(super::hot_tier(index))
    }

    unsafe fn check_definition(&self, index: pg_sys::Relation, desc: &IndexDesc) {
        hash::check_definition(index, desc, "tiered_hash's buckets need a hash function that agrees with the type's equality. Use tiered_btree for this column.");
    }

    unsafe fn check_key(&self, index: pg_sys::Relation, key: &[u8]) {
        hash::check_key(index, key);
    }

    unsafe fn merge_ratio(&self, _index: pg_sys::Relation) -> i32 {
        super::MERGE_RATIO
    }

    fn is_empty(&self, info: &BaseInfo) -> bool {
        header_of(info) == NO_BLOCK
    }

    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        _meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = Entry>,
        count: usize,
        _gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult {
        let mut loader = BucketLoader::new(index, options::bucket_fill(index) as u32, count);
        let mut done = 0u64;
        for e in entries {
            loader.push(desc, &e.key, e.tid);
            done += 1;
            if done % 10_000 == 0 {
                progress(done);
            }
        }
        progress(done);
        let header = loader.finish();
        BuildResult { shape: shape_of(index, header), freed: Vec::new() }
    }

    /// The whole batch in one step: the buckets take entries in any order
    /// (`insert_batch` groups them by bucket, so one bucket page is written
    /// once per batch) and a step run again after a crash adds nothing
    /// twice.
    unsafe fn merge(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, step: MergeStep<'_>, prune: Option<Prune<'_>>, _gen: u32) -> MergeResult {
        let mut header = header_of(&meta.base);
        let mut retired = Vec::new();
        if header == NO_BLOCK {
            // An unlogged index's init fork has no table: the first merge
            // writes one.
            let mut loader = BucketLoader::new(index, options::bucket_fill(index) as u32, step.fresh.len());
            for e in step.fresh {
                loader.push(desc, &e.key, e.tid);
            }
            header = loader.finish();
        } else {
            if let Some(Prune { dead, everywhere: true }) = prune {
                // VACUUM's merge (after a bulk delete that could not drop
                // dead TIDs in place: never for buckets, kept for the
                // contract).
                retired.extend(hash::remove_dead(index, header, dead).1);
            }
            retired.extend(hash::insert_entries(index, desc, header, step.fresh.iter().map(|e| (&e.key[..], e.tid))));
        }
        MergeResult { shape: shape_of(index, header), retired, key_hashes: None, key_fetches: 0, consumed: step.fresh.len(), next: None, dropped: Vec::new() }
    }

    unsafe fn bulk_delete(&self, index: pg_sys::Relation, _desc: &Rc<IndexDesc>, meta: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> VacuumResult {
        let header = header_of(&meta.base);
        if header == NO_BLOCK {
            return VacuumResult { removed: 0, kept: 0, need_merge: false, shape: None, retired: Vec::new(), key_fetches: 0 };
        }
        let (removed, retired) = hash::remove_dead(index, header, dead);
        let shape = shape_of(index, header);
        VacuumResult { removed, kept: shape.entries, need_merge: false, shape: Some(shape), retired, key_fetches: 0 }
    }

    unsafe fn cursor(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor> {
        Box::new(TieredHashCursor::new(index, desc.clone(), info))
    }

    /// The table's pages, each entry under its key's hash, no entry twice;
    /// every entry's (key columns, TID) into `all`.
    unsafe fn verify(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, all: Option<&mut HashSet<(Vec<u8>, Tid)>>) -> u64 {
        let name = page::rel_name(index);
        let header = header_of(&meta.base);
        if header == NO_BLOCK {
            return 0;
        }
        let entries = hash::entries_sorted(index, desc, header);
        for w in entries.windows(2) {
            if desc.compare(&w[0].0, &w[1].0) == Ordering::Equal && w[0].1 == w[1].1 {
                fail(&name, format!("the cold tier holds entry {} (TID {:?}) twice", hash::show(&w[0].0), w[0].1));
            }
        }
        let n = entries.len() as u64;
        if let Some(all) = all {
            all.extend(entries.into_iter().map(|(k, t)| (desc.keycols(&k).to_vec(), t)));
        }
        n
    }

    unsafe fn stats(&self, index: pg_sys::Relation, meta: &IndexMeta) -> BaseStats {
        hash::stats(index, header_of(&meta.base)).1
    }

    /// Hash pages the header does not reach (a split that crashed before
    /// it linked them).
    unsafe fn orphan_test<'a>(&'a self, index: pg_sys::Relation, meta: &'a IndexMeta) -> Box<dyn FnMut(u32, pg_sys::Page, PageKind) -> bool + 'a> {
        let reachable = hash::reachable(index, header_of(&meta.base));
        Box::new(move |blk, _p, kind| kind == PageKind::Hash && !reachable.contains(&blk))
    }

    /// A standby query that routed before a split may still read the split
    /// bucket's old chain.
    fn retired_pages_linked(&self) -> bool {
        true
    }
}

/// What the cursor was told to read (the default: everything). Kept in
/// buffers a rescan reuses, so a probe allocates nothing for it.
#[derive(Default)]
struct Range {
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    point: bool,
}

impl Range {
    fn is(&self, r: &ScanRange) -> bool {
        self.point == r.point && self.lower == r.lower && self.upper.as_deref() == r.upper
    }

    fn set(&mut self, r: &ScanRange) {
        self.lower.clear();
        self.lower.extend_from_slice(r.lower);
        match (r.upper, &mut self.upper) {
            (Some(u), Some(mine)) => {
                mine.clear();
                mine.extend_from_slice(u);
            }
            (u, mine) => *mine = u.map(|u| u.to_vec()),
        }
        self.point = r.point;
    }
}

/// tiered_hash's `BaseCursor`. A point range reads the key's bucket; any
/// other range (equality on leading key columns) reads every bucket and
/// keeps what lies in it, sorted. Either way the entries are a sorted list
/// the position moves over, read again when the engine reopens the cursor
/// on a newer generation or seeks without a start.
pub struct TieredHashCursor {
    index: pg_sys::Relation,
    desc: Rc<IndexDesc>,
    header: u32,
    generation: u32,
    range: Range,
    /// `hits` holds `range`'s entries of this generation.
    loaded: bool,
    hits: PointHits,
}

impl TieredHashCursor {
    fn new(index: pg_sys::Relation, desc: Rc<IndexDesc>, info: &BaseInfo) -> TieredHashCursor {
        TieredHashCursor { index, desc, header: header_of(info), generation: info.generation, range: Range::default(), loaded: false, hits: PointHits::new() }
    }

    /// Reads the entries of `range` (all of them when the engine named
    /// none), positioned before the first in `dir`.
    unsafe fn load(&mut self, dir: Dir) {
        self.loaded = true;
        if self.header == NO_BLOCK {
            self.hits.clear();
            return;
        }
        let r = &self.range;
        if r.point {
            // The hash path is tiered_hash's only path to a key.
            self.hits.load(self.index, &self.desc, self.header, self.generation, &r.lower, dir, usize::MAX);
            return;
        }
        let desc = &self.desc;
        let work_mem = pg_sys::work_mem;
        let limit = work_mem as usize * 1024;
        let index = self.index;
        let keep = |k: &[u8]| desc.compare_prefix(k, &r.lower) != Ordering::Less && r.upper.as_deref().is_none_or(|u| desc.compare_prefix(k, u) != Ordering::Greater);
        let over = self.hits.load_matching(index, desc, self.header, &keep, limit, dir);
        if over {
            crate::raise(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!("scan of tiered_hash index \"{}\" without equality on every key column matches more than work_mem ({} kB)", page::rel_name(index), work_mem),
                "tiered_hash reads such scans whole and sorts them in memory: give every key column an equality condition, raise work_mem, or use a tiered_btree index for this query.",
            );
        }
    }
}

impl BaseCursor for TieredHashCursor {
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange) {
        self.range.set(range);
        self.load(dir);
    }

    unsafe fn seek_range(&mut self, range: &ScanRange) {
        if !self.range.is(range) {
            self.range.set(range);
            self.loaded = false;
        }
    }

    unsafe fn seek_after(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        if !self.loaded {
            self.load(dir);
        }
        self.hits.seek_after(&self.desc, dir, key, tid, inclusive);
    }

    unsafe fn peek(&mut self, _dir: Dir) -> Option<(&[u8], Tid)> {
        self.hits.peek()
    }

    fn advance(&mut self, dir: Dir) {
        self.hits.advance(dir);
    }

    fn stop(&mut self) {
        self.hits.stop();
    }

    fn park(&mut self) {
        self.hits.clear();
        self.loaded = false;
    }

    unsafe fn reopen(&mut self, index: pg_sys::Relation, info: &BaseInfo) {
        self.index = index;
        self.header = header_of(info);
        self.generation = info.generation;
        self.loaded = false;
    }
}
