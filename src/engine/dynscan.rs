//! Reading a scan's range of the shared-memory dynamic stage in bounded
//! chunks, so a scan costs what it reads, not what the stage holds.
//!
//! A chunk is copied under the slot's shared lock into one byte buffer
//! (no allocation per entry), positioned after the last entry of the
//! previous chunk; chunks grow from 16 to 1024 entries, so a `LIMIT 50`
//! scan copies about 80 entries and a long range scan takes the lock once
//! per thousand. Between chunks the stage may change: inserts add entries
//! (heap visibility sorts them out, as for any index), VACUUM removes dead
//! ones (never returned anyway), and a merge moves entries into a new
//! generation of the base structure. The reader notices the last at its
//! next refill (the generation differs) and answers `Stale`: the scan then
//! re-seeks both streams in the new generation after the last entry it
//! returned.

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::hot_tier;
use pg_hybrid_core::tid::Tid;

use super::base::Dir;
use super::state::{shared_usable, SlotState};
use crate::keys::IndexDesc;
use crate::shmem::{ArenaPool, SlotRef};

const FIRST_CHUNK: usize = 16;
const MAX_CHUNK: usize = 1024;

/// An entry of the current chunk: its key in `DynReader::keys`.
#[derive(Clone, Copy)]
struct ChunkItem {
    off: u32,
    len: u32,
    tid: Tid,
}

/// What the reader has at its position.
pub enum DynPeek<'a> {
    Item(&'a [u8], Tid),
    End,
    /// A merge moved the stage into a new generation since the scan began.
    Stale,
}

/// Where the next chunk starts.
enum Resume {
    /// The range's edge in the scan's direction.
    Edge,
    /// Strictly after this entry in the scan's direction.
    After(Vec<u8>, Tid),
}

pub struct DynReader {
    slot: SlotRef,
    desc: Rc<IndexDesc>,
    /// The base generation the scan reads; entries below `merged_upto`
    /// are in it.
    generation: u32,
    merged_upto: u64,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    /// A full-key probe the Bloom filter ruled out: nothing to read.
    none: bool,
    dir: Dir,
    keys: Vec<u8>,
    items: Vec<ChunkItem>,
    pos: usize,
    /// Entries past the chunk may exist.
    more: bool,
    next_size: usize,
    stale: bool,
    /// A tiered index's hot tier holds the point key's whole record (its
    /// marker came first in the range): every entry of the key is read
    /// from here, merged ones included, and the base need not be.
    complete: bool,
}

impl DynReader {
    pub fn new(slot: SlotRef, desc: Rc<IndexDesc>, generation: u32, merged_upto: u64, lower: &[u8], upper: Option<&[u8]>, none: bool) -> DynReader {
        DynReader {
            slot,
            desc,
            generation,
            merged_upto,
            lower: lower.to_vec(),
            upper: upper.map(|u| u.to_vec()),
            none,
            dir: Dir::Fwd,
            keys: Vec::new(),
            items: Vec::new(),
            pos: 0,
            more: false,
            next_size: FIRST_CHUNK,
            stale: false,
            complete: false,
        }
    }

    /// Makes this reader one for another range or generation, in its own
    /// buffers (a rescan allocates nothing).
    pub fn reset(&mut self, generation: u32, merged_upto: u64, lower: &[u8], upper: Option<&[u8]>, none: bool) {
        self.generation = generation;
        self.merged_upto = merged_upto;
        self.lower.clear();
        self.lower.extend_from_slice(lower);
        match (upper, &mut self.upper) {
            (Some(u), Some(mine)) => {
                mine.clear();
                mine.extend_from_slice(u);
            }
            (u, mine) => *mine = u.map(|u| u.to_vec()),
        }
        self.none = none;
        self.keys.clear();
        self.items.clear();
        self.pos = 0;
        self.more = false;
        self.next_size = FIRST_CHUNK;
        self.stale = false;
        self.complete = false;
    }

    /// Whether the point key's record is complete here (`complete`).
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Positions before the first entry of the range in `dir`.
    pub unsafe fn start(&mut self, index: pgrx::pg_sys::Relation, dir: Dir, filter: &mut dyn FnMut(&[u8]) -> bool) {
        self.dir = dir;
        self.next_size = FIRST_CHUNK;
        self.complete = false;
        self.fill(index, Resume::Edge, filter);
    }

    /// Positions after (key, tid) in `dir`.
    pub unsafe fn seek_after(&mut self, index: pgrx::pg_sys::Relation, dir: Dir, key: &[u8], tid: Tid, filter: &mut dyn FnMut(&[u8]) -> bool) {
        self.dir = dir;
        self.next_size = FIRST_CHUNK;
        self.complete = false;
        self.fill(index, Resume::After(key.to_vec(), tid), filter);
    }

    /// The entry at the position, refilling past the chunk's end.
    pub unsafe fn peek(&mut self, index: pgrx::pg_sys::Relation, filter: &mut dyn FnMut(&[u8]) -> bool) -> DynPeek<'_> {
        if self.pos >= self.items.len() && self.more && !self.stale {
            let last = self.items[self.items.len() - 1];
            let key = self.keys[last.off as usize..(last.off + last.len) as usize].to_vec();
            self.fill(index, Resume::After(key, last.tid), filter);
        }
        if self.stale {
            return DynPeek::Stale;
        }
        match self.items.get(self.pos) {
            Some(it) => DynPeek::Item(&self.keys[it.off as usize..(it.off + it.len) as usize], it.tid),
            None => DynPeek::End,
        }
    }

    /// Whether the reader is past its last entry without a refill pending.
    pub fn exhausted(&self) -> bool {
        self.pos >= self.items.len() && !self.more && !self.stale
    }

    pub fn advance(&mut self) {
        self.pos += 1;
    }

    /// Copies the next chunk in `self.dir` from `from`.
    unsafe fn fill(&mut self, index: pgrx::pg_sys::Relation, from: Resume, filter: &mut dyn FnMut(&[u8]) -> bool) {
        self.keys.clear();
        self.items.clear();
        self.pos = 0;
        self.more = false;
        if self.none {
            return;
        }
        let limit = self.next_size;
        self.next_size = (self.next_size * 4).min(MAX_CHUNK);
        let _g = shared_usable(index, &self.desc, self.slot);
        let st = self.slot.state();
        if st.base.generation != self.generation || st.base.merged_upto != self.merged_upto {
            self.stale = true;
            return;
        }
        if st.tree.nentries == 0 {
            return;
        }
        let desc = self.desc.clone();
        let merged = self.merged_upto;
        let (lower, upper) = (&self.lower, &self.upper);
        // Only a forward point read from the range's start meets the
        // key's marker before its entries.
        let point_start = matches!(from, Resume::Edge) && self.dir == Dir::Fwd && upper.as_deref() == Some(&lower[..]);
        let mut marker_referenced = None;
        let complete = &mut self.complete;
        let (keys, items, more) = (&mut self.keys, &mut self.items, &mut self.more);
        let mut take = |k: &[u8], t: Tid, p: u64| -> bool {
            if hot_tier::is_marker(t) {
                if point_start && desc.compare_prefix(k, lower) == Ordering::Equal {
                    *complete = true;
                    marker_referenced = Some(matches!(hot_tier::classify(t, p), hot_tier::HotKind::Marker { referenced: true }));
                }
                return true;
            }
            if (p >= merged || *complete) && filter(k) {
                items.push(ChunkItem { off: keys.len() as u32, len: k.len() as u32, tid: t });
                keys.extend_from_slice(k);
                if items.len() == limit {
                    *more = true;
                    return false;
                }
            }
            true
        };
        let mut cmp = |a: &[u8], b: &[u8]| desc.compare(a, b);
        match self.dir {
            Dir::Fwd => {
                let mut visit = |k: &[u8], t: Tid, p: u64| {
                    if upper.as_ref().is_some_and(|u| desc.compare_prefix(k, u) == Ordering::Greater) {
                        return false;
                    }
                    take(k, t, p)
                };
                // Keys that compare as bytes find their place through the
                // leaves' key hints (core/src/DYNAMIC.md).
                match &from {
                    Resume::Edge if desc.memcmp => st.tree.scan_bytewise(&ArenaPool, lower, visit),
                    Resume::Edge => st.tree.scan(&ArenaPool, &mut |k| desc.compare_prefix(k, lower), visit),
                    Resume::After(key, tid) if desc.memcmp => st.tree.scan_after_bytewise(&ArenaPool, key, *tid, &mut visit),
                    Resume::After(key, tid) => st.tree.scan_after(&ArenaPool, &mut cmp, key, *tid, &mut visit),
                }
            }
            Dir::Bwd => {
                let visit = |k: &[u8], t: Tid, p: u64| {
                    if !lower.is_empty() && desc.compare_prefix(k, lower) == Ordering::Less {
                        return false;
                    }
                    take(k, t, p)
                };
                let mut before = |k: &[u8], t: Tid| match &from {
                    Resume::Edge => upper.as_ref().is_none_or(|u| desc.compare_prefix(k, u) != Ordering::Greater),
                    Resume::After(key, tid) => desc.compare(k, key).then(t.cmp(tid)) == Ordering::Less,
                };
                st.tree.scan_before(&ArenaPool, &mut cmp, &mut before, visit);
            }
        }
        if let Some(referenced) = marker_referenced {
            st.hot.hot_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !referenced {
                // CLOCK's reference bit: a hint, set without WAL.
                hot_tier::touch(&st.tree, &ArenaPool, &mut |a, b| desc.compare(a, b), lower);
            }
        }
    }
}
