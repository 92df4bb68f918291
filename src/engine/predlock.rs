//! Predicate locks (SSI) at key-range granularity, so a SERIALIZABLE scan
//! conflicts only with inserts into the ranges it read (`ampredlocks`).
//!
//! Neither stage has pages that stay put for a key range (the dynamic
//! stage lives in shared memory; merges move entries between base pages),
//! so the lock targets are *virtual* block numbers of the index: key-range
//! partitions that scans and inserts compute the same way, as GIN locks
//! its metapage for the pending list. The partitions are fixed per index
//! storage by a *partition map*: up to 8191 boundary keys (quantiles of
//! the keys, one per 64 keys at most, prefixes of at most 32 bytes) on a
//! chain of up to 16 WAL-logged pages whose first the metapage points at
//! (`lockmap`). The partition of a key is
//! the number of boundaries <= the key, in byte order; that is monotone in
//! the key, so a range [lower, upper] covers partitions [f(lower),
//! f(successor(upper))]. Where the key's bytes are not in the index's
//! order (numeric, bpchar, text under a non-C collation) boundaries are
//! whole keys of at most 32 bytes, compared as the index compares
//! (`key_order`: the opclass's support function under the column's
//! collation), and a range covers the partitions from the first boundary
//! whose first columns reach `lower` to the last whose first columns do
//! not pass `upper`; longer keys are not chosen as boundaries (their
//! partitions are wider). Equal keys of different bytes (numeric 1.0 and
//! 1.00) compare equal, so they share a partition.
//!
//! - Scans lock the partitions of their range after reading the map and
//!   before reading entries (the whole index relation when the index has
//!   no map yet). A range
//!   spanning more than `MAX_SCAN_LOCKS` partitions is locked as it is
//!   read instead, from the partition it starts in (`ScanLocks`), so a
//!   `LIMIT` scan with an open end locks what it reads, not the rest of
//!   the index; past `MAX_SCAN_LOCKS` it locks the relation.
//! - Inserts check the partition of their key after their entry is in the
//!   dynamic stage (a scan that started before the entry was there holds
//!   its lock by now; one that starts later sees the entry and meets the
//!   writer through the heap tuple's SSI check). Unique checks check it
//!   before reporting a duplicate, as nbtree does, so a conflict that SSI
//!   would report is not masked by the unique violation.
//! - The map is written by CREATE INDEX, or by the first merge after an
//!   index built empty holds `MIN_MAP_ENTRIES` entries. Until it exists
//!   scans lock the relation, whose lock every insert's check also meets,
//!   so the switch from no map to a map needs no lock transfer.
//! - A merge writes a new map from every key of the base structure once
//!   the index holds twice the entries its map was chosen from
//!   (`remap_if_due`): otherwise every key loaded after an index was built
//!   empty would share its last partition. The new map has the next
//!   *epoch*, whose virtual blocks differ from the old map's. The metapage
//!   (WAL-logged) and the slot switch to it under the metapage's buffer
//!   lock and the slot's exclusive lock, and under both every SIREAD lock
//!   on an old partition is copied to each new partition sharing a key with
//!   it (`PredicateLockPageSplit`, as nbtree does at a page split). Inserts
//!   check the partition of the map they read from the slot: an old
//!   partition keeps its locks, a new one has their copies. A scan that
//!   read the old map may lock after the copy, so it reads the slot's map
//!   again after locking (`lock_scan`, `ScanLocks::extend`) and, if it
//!   changed, locks under the new one (a scan's locks taken before that
//!   read were copied, since the switch came after it). The old map's
//!   pages go to the recycle list, freed once no snapshot of the time is
//!   left; maps are cached per (relation, block, epoch), so a page reused
//!   by a later map is never mistaken for the old one.
//!
//! Only SERIALIZABLE transactions lock or check anything.

use std::cell::RefCell;

use pgrx::pg_sys;

use std::rc::Rc;

use pg_hybrid_core::partition::{boundary_bytes, map_capacity, remap_due, split_pages, split_points, BoundaryChooser, KeyOrder, Order, PartitionCount, PartitionMap, MAX_MAP_PAGES, MAX_PARTITIONS};

use super::ams;
use super::meta;
use super::state::SlotState;
use crate::keys::IndexDesc;
use crate::shmem::SlotRef;
use crate::storage::alloc::alloc_page;
use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind};
use crate::storage::wal::WalRecord;

extern "C-unwind" {
    // storage/predicate.h; not among pgrx's bindings. Called only through
    // pg_guard_ffi_boundary, so an ERROR inside becomes a Rust panic.
    fn PredicateLockPage(relation: pg_sys::Relation, blkno: pg_sys::BlockNumber, snapshot: pg_sys::Snapshot);
    fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot);
    fn CheckForSerializableConflictIn(relation: pg_sys::Relation, tid: pg_sys::ItemPointer, blkno: pg_sys::BlockNumber);
    fn PredicateLockPageSplit(relation: pg_sys::Relation, oldblkno: pg_sys::BlockNumber, newblkno: pg_sys::BlockNumber);
}

/// Virtual block numbers of partitions start here, far above any page.
const VIRTUAL_BASE: u32 = 0x4000_0000;
/// Epochs of maps take turns in this many ranges of `MAX_PARTITIONS`
/// virtual blocks (up to 0x7fff_ffff). Epoch 0 is VIRTUAL_BASE + p, as
/// before maps had epochs.
const EPOCHS: u32 = 1 << 17;

/// Which partition map scans and inserts use: its first page (0 = none
/// yet) and its epoch. In the metapage and the slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockMapRef {
    pub block: u32,
    pub epoch: u32,
}

impl LockMapRef {
    pub const NONE: LockMapRef = LockMapRef { block: 0, epoch: 0 };

    /// The virtual block that stands for partition `p` of this map.
    fn target(self, p: u32) -> u32 {
        VIRTUAL_BASE + (self.epoch % EPOCHS) * MAX_PARTITIONS as u32 + p
    }
}

/// The map the slot names now (a remap changes it under the slot's
/// exclusive lock).
unsafe fn current(slot: SlotRef) -> LockMapRef {
    let _g = slot.shared();
    slot.state().lockmap
}
/// A scan spanning more partitions locks the relation instead (PostgreSQL
/// would promote that many page locks anyway).
const MAX_SCAN_LOCKS: usize = 32;
/// An index built empty gets its map at the first merge after it holds
/// this many entries.
pub const MIN_MAP_ENTRIES: usize = 1000;

/// Whether this transaction takes predicate locks at all.
pub fn serializable() -> bool {
    unsafe { pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32 }
}

/// The order partitions compare keys in: byte order when the key's bytes
/// sort as the index does, else the index's own comparison (collated
/// text, numeric: the opclass's support function).
pub fn key_order(desc: &Rc<IndexDesc>) -> Order {
    if desc.memcmp {
        None
    } else {
        Some(Rc::new(DescOrder(desc.clone())))
    }
}

struct DescOrder(Rc<IndexDesc>);

impl KeyOrder for DescOrder {
    fn cmp(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        self.0.compare_keycols(a, b)
    }
    fn cmp_prefix(&self, key: &[u8], bound: &[u8]) -> std::cmp::Ordering {
        self.0.compare_prefix(key, bound)
    }
}

/// Writes the map of `boundaries` (core's `choose_boundaries` with
/// `map_capacity(BODY_CAP)`, so they fit `MAX_MAP_PAGES` pages): a chain
/// of LockMap pages linked by `right`, the first of which the caller
/// stores in the metapage (`lockmap`). Each page is WAL-logged on its own;
/// pages written before a crash that never got linked are orphans VACUUM
/// frees (vacuum.rs). Returns the first page's block.
pub unsafe fn write_map(index: pg_sys::Relation, boundaries: &[Vec<u8>]) -> u32 {
    let pages = split_pages(boundaries, page::BODY_CAP);
    // An index of one key still gets a page (no boundaries: one partition).
    let pages = if pages.is_empty() { vec![0..0] } else { pages };
    if pages.len() > MAX_MAP_PAGES {
        pgrx::error!("index \"{}\": a partition map of {} pages (at most {})", page::rel_name(index), pages.len(), MAX_MAP_PAGES);
    }
    // Last page first, so each page is written once with its successor's
    // block, and one buffer is locked at a time.
    let mut next = page::NO_BLOCK;
    for range in pages.iter().rev() {
        let b = alloc_page(index);
        let mut w = WalRecord::start(index);
        let p = w.register_new(&b);
        page::init_page(p, PageKind::LockMap, 0, 0);
        page::opaque_mut(p).right = next;
        let part = &boundaries[range.clone()];
        let body = page::body_mut(p);
        body[..2].copy_from_slice(&(part.len() as u16).to_le_bytes());
        let mut at = 2;
        for k in part {
            body[at..at + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
            body[at + 2..at + 2 + k.len()].copy_from_slice(k);
            at += 2 + k.len();
        }
        page::set_body_len(p, at);
        w.finish();
        next = b.blkno();
    }
    next
}

thread_local! {
    /// A map never changes once written: cached by (relfilenode, block,
    /// epoch), since a page of a map replaced and freed may hold a later one.
    static MAPS: RefCell<Vec<(MapKey, Rc<PartitionMap>)>> = const { RefCell::new(Vec::new()) };
}

/// The blocks of the map that starts at `first`, in order, each read and
/// checked as a LockMap page; their boundaries go to `out` when given.
/// A chain longer than `MAX_MAP_PAGES` (a cycle) is corruption.
pub unsafe fn map_blocks(index: pg_sys::Relation, first: u32, mut out: Option<&mut Vec<Vec<u8>>>) -> Vec<u32> {
    let mut blocks = Vec::new();
    let mut blk = first;
    while blk != page::NO_BLOCK {
        if blocks.len() >= MAX_MAP_PAGES {
            page::corrupted(&page::rel_name(index), blk, "partition map chain longer than its maximum");
        }
        blocks.push(blk);
        let b = Buf::read(index, blk, Lock::Share);
        page::check_page(index, blk, b.page(), &[PageKind::LockMap]);
        if let Some(out) = out.as_deref_mut() {
            read_boundaries(index, blk, page::body(b.page()), out);
        }
        blk = page::opaque(b.page()).right;
    }
    blocks
}

/// Appends the boundaries of the map page `blk` with body `body` to `out`.
unsafe fn read_boundaries(index: pg_sys::Relation, blk: u32, body: &[u8], out: &mut Vec<Vec<u8>>) {
    let bad = || page::corrupted(&page::rel_name(index), blk, "partition map overruns its page");
    if body.len() < 2 {
        bad();
    }
    let n = u16::from_le_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    for _ in 0..n {
        if at + 2 > body.len() {
            bad();
        }
        let len = u16::from_le_bytes([body[at], body[at + 1]]) as usize;
        if at + 2 + len > body.len() {
            bad();
        }
        out.push(body[at + 2..at + 2 + len].to_vec());
        at += 2 + len;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct MapKey {
    relnode: u32,
    map: LockMapRef,
}

unsafe fn load_map(index: pg_sys::Relation, at: LockMapRef) -> Rc<PartitionMap> {
    let key = MapKey { relnode: (*index).rd_node.relNode.to_u32(), map: at };
    if let Some(m) = MAPS.with(|c| c.borrow().iter().find(|e| e.0 == key).map(|e| e.1.clone())) {
        return m;
    }
    let mut boundaries = Vec::new();
    map_blocks(index, at.block, Some(&mut boundaries));
    let map = index_map(index, boundaries);
    if !map.ascending() {
        page::corrupted(&page::rel_name(index), at.block, "partition map boundaries out of order");
    }
    cache_map(key, Rc::new(map))
}

/// A map of `index`'s boundaries, in the index's key order: every map a
/// backend uses is made here (a map in byte order of keys that are not
/// would place keys and new boundaries wrongly).
unsafe fn index_map(index: pg_sys::Relation, boundaries: Vec<Vec<u8>>) -> PartitionMap {
    PartitionMap::ordered(boundaries, key_order(&crate::keys::index_desc(index)))
}

fn cache_map(key: MapKey, m: Rc<PartitionMap>) -> Rc<PartitionMap> {
    MAPS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= 64 {
            c.remove(0);
        }
        c.push((key, m.clone()));
    });
    m
}

/// The SIREAD locks of one cursor's range. A range that fits in
/// `MAX_SCAN_LOCKS` partitions is locked whole before it is read; a wider
/// one (an open-ended `k >= $1 ORDER BY k LIMIT n`) is locked as the scan
/// goes, partition by partition from the edge it starts at, as nbtree
/// locks the leaf pages it reads: the cursor asks `needs` before it
/// returns an item or reports the end, and after `extend` re-reads from
/// its last item, so an entry inserted into a newly locked partition
/// before the lock is read, and one inserted after it meets the lock
/// (inserts check after their entry is in the dynamic stage).
pub enum ScanLocks {
    /// Nothing more to lock: not SERIALIZABLE, or the range (or the whole
    /// relation) is locked.
    Complete,
    Progressive(Progressive),
}

pub struct Progressive {
    map: Rc<PartitionMap>,
    /// Which map `map` is, and the slot that says whether it still is.
    at: LockMapRef,
    slot: SlotRef,
    snapshot: pg_sys::Snapshot,
    /// The partitions of the cursor's range.
    span: (u32, u32),
    /// The partitions locked so far: one interval within `span`.
    locked: (u32, u32),
}

/// Partitions a progressive cursor must lock before going on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needed {
    pub from: u32,
    pub to: u32,
}

impl ScanLocks {
    /// Whether the cursor must check its items against the locks.
    pub fn progressive(&self) -> bool {
        matches!(self, ScanLocks::Progressive(_))
    }

    /// The partitions to lock before the cursor returns what it found in
    /// direction `forward`: an item of key prefix `Some(keycols)`, an item
    /// whose key it does not know (`Some(None)`: the whole range), or the
    /// end of the range (`None`: everything from the locked partitions to
    /// the range's end).
    pub fn needs(&self, found: Option<Option<&[u8]>>, forward: bool) -> Option<Needed> {
        let ScanLocks::Progressive(p) = self else { return None };
        let (lo, hi) = p.locked;
        let (from, to) = match found {
            Some(Some(k)) => {
                // Most items lie in what is locked already.
                if p.map.within(lo, hi, k) {
                    return None;
                }
                let at = p.map.of(k).clamp(p.span.0, p.span.1);
                (at.min(lo), at.max(hi))
            }
            Some(None) => p.span,
            None if forward => (lo, p.span.1),
            None => (p.span.0, hi),
        };
        if from < lo || to > hi {
            Some(Needed { from, to })
        } else {
            None
        }
    }

    /// Takes the locks `needed` names, which include the ones held (a
    /// range the caller then reads again).
    pub unsafe fn extend(&mut self, index: pg_sys::Relation, needed: Needed) {
        let ScanLocks::Progressive(p) = self else { return };
        let (lo, hi) = (needed.from.min(p.locked.0), needed.to.max(p.locked.1));
        let snapshot = p.snapshot;
        if (hi - lo) as usize >= MAX_SCAN_LOCKS {
            pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockRelation(index, snapshot));
            *self = ScanLocks::Complete;
            return;
        }
        let at = p.at;
        for b in needed.from..=needed.to {
            if b < p.locked.0 || b > p.locked.1 {
                pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPage(index, at.target(b), snapshot));
            }
        }
        p.locked = (lo, hi);
        if current(p.slot) != at {
            // A remap copied the locks before these were taken: the rest
            // of the range under one lock, as a scan past MAX_SCAN_LOCKS.
            pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockRelation(index, snapshot));
            *self = ScanLocks::Complete;
        }
    }
}

/// A cursor over key prefixes [lower, upper] under `snapshot`, about to
/// read in direction `forward`, locks its range, or the partition it
/// starts in when the range is wide (`ScanLocks`); `lockmap` as the
/// scan's start saw it, checked against the slot once the locks are
/// taken (a remap in between: the locks again, under the new map).
pub unsafe fn lock_scan(
    index: pg_sys::Relation,
    slot: SlotRef,
    mut lockmap: LockMapRef,
    lower: &[u8],
    upper: Option<&[u8]>,
    forward: bool,
    snapshot: pg_sys::Snapshot,
) -> ScanLocks {
    if !serializable() {
        return ScanLocks::Complete;
    }
    // Remaps come once the index has doubled: a third in a row means
    // something else is wrong, and the relation lock is always right.
    for _ in 0..3 {
        if lockmap.block == 0 {
            break;
        }
        let map = load_map(index, lockmap);
        let (lo, hi) = map.span(lower, upper);
        let locks = if ((hi - lo) as usize) < MAX_SCAN_LOCKS {
            for p in lo..=hi {
                pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPage(index, lockmap.target(p), snapshot));
            }
            ScanLocks::Complete
        } else {
            let edge = if forward { lo } else { hi };
            pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPage(index, lockmap.target(edge), snapshot));
            ScanLocks::Progressive(Progressive { map, at: lockmap, slot, snapshot, span: (lo, hi), locked: (edge, edge) })
        };
        let now = current(slot);
        if now == lockmap {
            return locks;
        }
        lockmap = now;
    }
    pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockRelation(index, snapshot));
    ScanLocks::Complete
}

/// A write of `key` meets the locks of the scans that read its range (and
/// whole-index locks); `lockmap` as the slot names it once the entry is in
/// the dynamic stage.
pub unsafe fn check_write(index: pg_sys::Relation, desc: &IndexDesc, lockmap: LockMapRef, key: &[u8]) {
    if !serializable() {
        return;
    }
    let blk = if lockmap.block == 0 { VIRTUAL_BASE } else { lockmap.target(load_map(index, lockmap).of(desc.keycols(key))) };
    pg_sys::ffi::pg_guard_ffi_boundary(|| CheckForSerializableConflictIn(index, std::ptr::null_mut(), blk));
}

/// Keeps the partition map fit for the keys the index holds; called by a
/// merge (which holds the maintenance lock exclusively, so no other
/// merge, VACUUM or slot rebuild runs meanwhile) with its batch's key
/// columns in order:
///
/// - an index without a map gets one of every key once it holds
///   `MIN_MAP_ENTRIES`;
/// - an index that holds twice the entries its map was chosen from
///   (`remap_due`) gets a new one of every key;
/// - otherwise a partition into which the batch put at least twice the
///   map's average partition is *split*: its keys are read from the base
///   structure and cut into pieces of the average. An ascending load puts
///   every batch into the last partition, which without splits would hold
///   all keys added since the map was chosen. When the splits do not fit
///   the map, it is chosen again from every key with half the partitions
///   it may have (`BoundaryChooser::with_room`), which leaves room for the
///   splits of about as many keys again. An ascending load so reads every
///   key about twice per doubling; random inserts, once.
///
/// The switch copies every SIREAD lock held to the new map's partitions
/// (`switch_map`).
pub unsafe fn remap_if_due<'a>(index: pg_sys::Relation, desc: &Rc<IndexDesc>, slot: SlotRef, batch: impl Iterator<Item = &'a [u8]>) {
    let started = std::time::Instant::now();
    let m = meta::read(index);
    let structure = ams::base(index);
    if !structure.ordered() || structure.is_empty(&m.base) {
        return;
    }
    let entries = m.base.entries;
    let old = m.lock_map();
    if old.block == 0 {
        if entries >= MIN_MAP_ENTRIES as u64 {
            if let Some(b) = choose_all(index, desc, &m.base, BoundaryChooser::new(entries as usize, map_capacity(page::BODY_CAP)).in_order(key_order(desc))) {
                switch_map(index, slot, old, b, entries, started);
            }
        }
        return;
    }
    let map = load_map(index, old);
    if remap_due(m.map_entries, map.count(), entries) {
        if let Some(b) = choose_all(index, desc, &m.base, BoundaryChooser::new(entries as usize, map_capacity(page::BODY_CAP)).in_order(key_order(desc))) {
            switch_map(index, slot, old, b, entries, started);
        }
        return;
    }
    let basis = if m.map_entries > 0 { m.map_entries } else { entries };
    let piece = ((basis / map.count() as u64) as usize).max(64);
    let crowded: Vec<PartitionCount> = map.counts_sorted(batch).into_iter().filter(|c| c.count >= 2 * piece).collect();
    if crowded.is_empty() {
        return;
    }
    let mut extra: Vec<Vec<u8>> = Vec::new();
    let order = key_order(desc);
    for c in &crowded {
        let p = c.partition;
        let lower = map.bounds_of(p).0;
        // The partition's keys, compared in the map's own order: a cursor
        // may start before the lower boundary (prefix bounds), and the
        // walk stops past the upper one.
        let mut keys: Vec<Vec<u8>> = Vec::new();
        // (A cursor that does not know its keys yields none: no split.)
        super::merge::each_key_from(index, desc, &m.base, lower.unwrap_or(&[]), |k| {
            let k = desc.keycols(k);
            if !map.within(0, p, k) {
                return false;
            }
            if map.within(p, p, k) {
                // In byte order a boundary is a key's first bytes; in
                // another a whole key, of at most the same length.
                let keep = if desc.memcmp { k.len().min(pg_hybrid_core::partition::MAX_BOUNDARY) } else { k.len() };
                keys.push(k[..keep].to_vec());
            }
            true
        });
        if keys.len() >= 2 * piece {
            extra.extend(split_points(keys.iter().map(|k| k.as_slice()), piece, lower, order.as_deref()));
        }
    }
    if extra.is_empty() {
        return;
    }
    let boundaries = map.with_boundaries(&extra);
    let fits = boundaries.len() < MAX_PARTITIONS && boundary_bytes(&boundaries) <= map_capacity(page::BODY_CAP);
    if fits {
        // The map's basis stays: doubling is counted from the last map of
        // every key.
        switch_map(index, slot, old, boundaries, m.map_entries, started);
    } else if let Some(b) = choose_all(index, desc, &m.base, BoundaryChooser::with_room(entries as usize, map_capacity(page::BODY_CAP)).in_order(key_order(desc))) {
        switch_map(index, slot, old, b, entries, started);
    }
}

/// Boundaries from every key of the base structure (None when its cursor
/// does not know its keys).
unsafe fn choose_all(index: pg_sys::Relation, desc: &Rc<IndexDesc>, base: &super::meta::BaseInfo, mut chooser: BoundaryChooser) -> Option<Vec<Vec<u8>>> {
    let known = super::merge::each_key_from(index, desc, base, &[], |k| {
        chooser.offer(desc.keycols(k));
        true
    });
    known.then(|| chooser.finish())
}

/// Writes the map of `boundaries` and switches the index to it: the
/// metapage (one WAL record, `map_entries` as given) and, under its buffer
/// lock and the slot's exclusive lock, a copy of every SIREAD lock of an
/// old partition to each new partition sharing keys with it, and the
/// slot's map. The old map's pages go to the recycle list.
unsafe fn switch_map(index: pg_sys::Relation, slot: SlotRef, old: LockMapRef, boundaries: Vec<Vec<u8>>, map_entries: u64, started: std::time::Instant) {
    let block = write_map(index, &boundaries);
    // The first map keeps the epoch: nothing locked partitions before it.
    let new = LockMapRef { block, epoch: if old.block == 0 { old.epoch } else { old.epoch.wrapping_add(1) } };
    let relnode = (*index).rd_node.relNode.to_u32();
    let new_map = cache_map(MapKey { relnode, map: new }, Rc::new(index_map(index, boundaries)));
    let (pairs, old_pages) = if old.block == 0 {
        (Vec::new(), Vec::new())
    } else {
        (load_map(index, old).overlapping(&new_map), map_blocks(index, old.block, None))
    };
    meta::update_then(
        index,
        |mm| {
            mm.lockmap = new.block;
            mm.lockmap_epoch = new.epoch;
            mm.map_entries = map_entries;
        },
        |_| {
            let _g = slot.exclusive();
            for p in &pairs {
                // Returns at once when no SERIALIZABLE transaction runs.
                pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPageSplit(index, old.target(p.old), new.target(p.new)));
            }
            slot.state().lockmap = new;
        },
    );
    super::merge::list_for_recycling(index, &old_pages);
    pgrx::debug1!("index \"{}\": partition map of {} partitions (epoch {}, basis {} entries); {} lock copies; {:.1} ms", page::rel_name(index), new_map.count(), new.epoch, map_entries, pairs.len(), started.elapsed().as_secs_f64() * 1000.0);
}
