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
//! f(successor(upper))].
//!
//! - Scans lock the partitions of their range after reading the map and
//!   before reading entries (the whole index relation when the index has
//!   no map yet, or when its key order is not byte order). A range
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
//! - The map is written by CREATE INDEX, or by the first merge of an index
//!   built empty; it never changes afterwards. Until it exists scans lock
//!   the relation, whose lock every insert's check also meets, so the
//!   switch from no map to a map needs no lock transfer.
//!
//! Only SERIALIZABLE transactions lock or check anything.

use std::cell::RefCell;

use pgrx::pg_sys;

use pg_hybrid_core::partition::{split_pages, PartitionMap, MAX_MAP_PAGES};

use crate::keys::IndexDesc;
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
}

/// Virtual block numbers of partitions start here, far above any page.
const VIRTUAL_BASE: u32 = 0x4000_0000;
/// A scan spanning more partitions locks the relation instead (PostgreSQL
/// would promote that many page locks anyway).
const MAX_SCAN_LOCKS: usize = 32;
/// An index built empty gets its map at the first merge of at least this
/// many entries.
pub const MIN_MAP_ENTRIES: usize = 1000;

/// Whether this transaction takes predicate locks at all.
pub fn serializable() -> bool {
    unsafe { pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32 }
}

/// Whether partitions can describe the index's order (byte order).
pub fn mappable(desc: &IndexDesc) -> bool {
    desc.memcmp
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
    /// Maps never change once written: cached by (relfilenode, block).
    static MAPS: RefCell<Vec<((u32, u32), std::rc::Rc<PartitionMap>)>> = const { RefCell::new(Vec::new()) };
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

unsafe fn load_map(index: pg_sys::Relation, blk: u32) -> std::rc::Rc<PartitionMap> {
    let key = ((*index).rd_node.relNode.to_u32(), blk);
    if let Some(m) = MAPS.with(|c| c.borrow().iter().find(|e| e.0 == key).map(|e| e.1.clone())) {
        return m;
    }
    let mut boundaries = Vec::new();
    map_blocks(index, blk, Some(&mut boundaries));
    if boundaries.windows(2).any(|w| w[0] >= w[1]) {
        page::corrupted(&page::rel_name(index), blk, "partition map boundaries out of order");
    }
    let m = std::rc::Rc::new(PartitionMap::new(boundaries));
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
    map: std::rc::Rc<PartitionMap>,
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
        for b in needed.from..=needed.to {
            if b < p.locked.0 || b > p.locked.1 {
                pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPage(index, VIRTUAL_BASE + b, snapshot));
            }
        }
        p.locked = (lo, hi);
    }
}

/// A cursor over key prefixes [lower, upper] under `snapshot`, about to
/// read in direction `forward`, locks its range, or the partition it
/// starts in when the range is wide (`ScanLocks`); `lockmap` as the
/// scan's start saw it.
pub unsafe fn lock_scan(
    index: pg_sys::Relation,
    desc: &IndexDesc,
    lockmap: u32,
    lower: &[u8],
    upper: Option<&[u8]>,
    forward: bool,
    snapshot: pg_sys::Snapshot,
) -> ScanLocks {
    if !serializable() {
        return ScanLocks::Complete;
    }
    if lockmap == 0 || !mappable(desc) {
        pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockRelation(index, snapshot));
        return ScanLocks::Complete;
    }
    let map = load_map(index, lockmap);
    let (lo, hi) = map.span(lower, upper);
    if ((hi - lo) as usize) < MAX_SCAN_LOCKS {
        for p in lo..=hi {
            pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPage(index, VIRTUAL_BASE + p, snapshot));
        }
        return ScanLocks::Complete;
    }
    let edge = if forward { lo } else { hi };
    pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockPage(index, VIRTUAL_BASE + edge, snapshot));
    ScanLocks::Progressive(Progressive { map, snapshot, span: (lo, hi), locked: (edge, edge) })
}

/// A write of `key` meets the locks of the scans that read its range (and
/// whole-index locks).
pub unsafe fn check_write(index: pg_sys::Relation, desc: &IndexDesc, lockmap: u32, key: &[u8]) {
    if !serializable() {
        return;
    }
    let blk = if lockmap == 0 || !mappable(desc) { VIRTUAL_BASE } else { VIRTUAL_BASE + load_map(index, lockmap).of(desc.keycols(key)) };
    pg_sys::ffi::pg_guard_ffi_boundary(|| CheckForSerializableConflictIn(index, std::ptr::null_mut(), blk));
}
