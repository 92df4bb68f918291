//! hybrid_btree's `BaseCursor`: a position (entry, TID of its posting list)
//! in a copied static leaf; moving past a leaf end loads its neighbour
//! through the path of inner pages it descended (static pages have no
//! sibling links). The engine checks range ends and conditions.
//!
//! On a standby, replay may reuse a page of the stage the cursor reads
//! (merge steps on the primary recycle pages as soon as no primary reader
//! holds them). The cursor then moves on to the stage the metapage names
//! now, re-seeking after the entry it stood at: both stages hold the same
//! entries up to the moved ones, and the engine returns an entry present in
//! both stages once. A re-seek must land strictly after that entry even when
//! it is the first of a leaf in the new stage (`skip_through`).

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::stage::Stage;
use super::static_io::{self, Descent, LeafData, PathStep, Stale, Window};
use crate::engine::base::{BaseCursor, Dir, ScanRange};
use crate::engine::meta::{self, BaseInfo};
use crate::keys::IndexDesc;
use crate::storage::page::NO_BLOCK;

pub struct StaticCursor {
    index: pg_sys::Relation,
    desc: Rc<IndexDesc>,
    stage: Stage,
    leaf: Option<LeafData>,
    /// Decode buffers while no leaf is loaded (a parked cursor), handed to
    /// the next leaf: a rescan allocates nothing once they have grown.
    spare: Window,
    /// Inner pages from the root to `leaf`, with the child taken at each.
    path: Vec<PathStep>,
    /// Entry and TID position in `leaf`; `ti == isize::MAX` is "the last
    /// TID of the entry" (moving backwards into an entry).
    ei: isize,
    ti: isize,
    done: bool,
}

impl Drop for StaticCursor {
    /// The decode buffers go back to the backend's pool (the leaf itself,
    /// dropped after this, unpins its page as before).
    fn drop(&mut self) {
        let w = match self.leaf.as_mut() {
            Some(l) => l.take_window(),
            None => std::mem::take(&mut self.spare),
        };
        w.recycle();
    }
}

impl StaticCursor {
    pub fn new(index: pg_sys::Relation, desc: Rc<IndexDesc>, stage: Stage) -> StaticCursor {
        StaticCursor { index, desc, stage, leaf: None, spare: Window::pooled(), path: Vec::with_capacity(4), ei: 0, ti: 0, done: true }
    }

    /// Descends from the root and loads the leaf `how` leads to (dropping
    /// the current one and taking over its decode buffers), still
    /// share-locked for the positioning search that follows
    /// (`release_leaf_lock`).
    unsafe fn descend(&mut self, mut how: Descent) -> Result<LeafData, Stale> {
        self.path.clear();
        let blk = static_io::descend_from(self.index, &self.stage, self.stage.root, &mut how, &mut self.path)?;
        let mut leaf = static_io::try_load_leaf(self.index, blk, &self.stage, true)?;
        leaf.reuse_window(self.take_window());
        Ok(leaf)
    }

    /// The decode buffers of the current leaf (which is dropped, unpinning
    /// its page), or the spare ones.
    fn take_window(&mut self) -> Window {
        match self.leaf.take() {
            Some(l) => l.into_window(),
            None => std::mem::take(&mut self.spare),
        }
    }

    /// A page of the stage was reused during recovery: read the stage the
    /// metapage names now (newer, or the query cannot go on).
    unsafe fn move_to_current_stage(&mut self, stale: Stale) {
        let base = meta::read(self.index).base;
        if base.generation <= self.stage.generation {
            stale.raise();
        }
        pgrx::debug1!("pg_hybrid: standby scan moves from stage {} to {}", self.stage.generation, base.generation);
        self.stage = Stage::of(&base);
        self.spare = self.take_window();
        self.path.clear();
    }

    fn step_entry(&mut self, dir: Dir) {
        match dir {
            Dir::Fwd => {
                self.ei += 1;
                self.ti = 0;
            }
            Dir::Bwd => {
                self.ei -= 1;
                self.ti = isize::MAX;
            }
        }
    }

    /// Moves onto a valid (entry, TID) in `dir`, loading neighbours past
    /// leaf ends; sets `done` at the end of the stage.
    unsafe fn settle(&mut self, dir: Dir) {
        loop {
            if self.done {
                return;
            }
            let leaf = self.leaf.as_mut().unwrap();
            let len = leaf.len() as isize;
            if dir == Dir::Fwd && self.ei < 0 {
                self.ei = 0;
                self.ti = 0;
                continue;
            }
            if dir == Dir::Bwd && self.ei >= len && len > 0 {
                self.ei = len - 1;
                self.ti = isize::MAX;
                continue;
            }
            if self.ei >= len || self.ei < 0 {
                match static_io::sibling_leaf(self.index, &self.stage, &mut self.path, dir == Dir::Fwd)
                    .and_then(|next| next.map(|b| static_io::try_load_leaf(self.index, b, &self.stage, false)).transpose())
                {
                    Ok(None) => {
                        self.done = true;
                        return;
                    }
                    Ok(Some(mut l)) => {
                        self.ei = if dir == Dir::Fwd { 0 } else { l.len() as isize - 1 };
                        self.ti = if dir == Dir::Fwd { 0 } else { isize::MAX };
                        l.reuse_window(self.take_window());
                        self.leaf = Some(l);
                    }
                    Err(stale) => {
                        // Continue after the leaf's edge entry in the current stage.
                        if len == 0 {
                            stale.raise();
                        }
                        let edge = if dir == Dir::Fwd { len as usize - 1 } else { 0 };
                        let (k, tids) = leaf.get(edge);
                        let t = if dir == Dir::Fwd { *tids.last().unwrap() } else { tids[0] };
                        let k = k.to_vec();
                        self.move_to_current_stage(stale);
                        self.seek_after(dir, &k, t, false);
                    }
                }
                continue;
            }
            let nt = leaf.get(self.ei as usize).1.len() as isize;
            if self.ti == isize::MAX {
                self.ti = nt - 1;
            }
            if self.ti >= nt || self.ti < 0 || nt == 0 {
                self.step_entry(dir);
                continue;
            }
            return;
        }
    }

    unsafe fn try_start(&mut self, dir: Dir, range: &ScanRange) -> Result<(), Stale> {
        let desc = self.desc.clone();
        match dir {
            Dir::Fwd => {
                let lower = range.lower;
                let mut leaf = if lower.is_empty() {
                    self.descend(Descent::Leftmost)?
                } else {
                    self.descend(Descent::FirstGe(&mut |k| desc.compare_prefix(k, lower)))?
                };
                let ei = if lower.is_empty() { 0 } else { leaf.seek(|k| desc.compare_prefix(k, lower)) };
                self.leaf = Some(leaf);
                self.ei = ei as isize;
                self.ti = 0;
            }
            Dir::Bwd => {
                let leaf = match range.upper {
                    None => self.descend(Descent::Rightmost)?,
                    Some(u) => self.descend(Descent::LastLe(&mut |k| desc.compare_prefix(k, u)))?,
                };
                let n = match range.upper {
                    None => leaf.len(),
                    Some(u) => leaf.seek_after(|k| desc.compare_prefix(k, u)),
                };
                self.leaf = Some(leaf);
                self.ei = n as isize - 1;
                self.ti = isize::MAX;
            }
        }
        self.release_leaf_lock();
        Ok(())
    }

    /// The leaf's lock kept from its load (`descend`) is not held past the
    /// positioning search: no buffer lock between calls of a scan.
    fn release_leaf_lock(&self) {
        if let Some(l) = &self.leaf {
            l.release_lock();
        }
    }

    /// Descends to `key`: forward, onto the first entry >= `key` in the
    /// leaf the descent reaches (or past its end); backward, onto the last
    /// TID of the last entry <= `key` there (or before its start).
    /// `skip_through` then moves past (key, tid), across leaves if need be.
    unsafe fn try_seek_key(&mut self, dir: Dir, key: &[u8]) -> Result<(), Stale> {
        let desc = self.desc.clone();
        let mut cmp = |k: &[u8]| desc.compare(k, key);
        match dir {
            Dir::Fwd => {
                let mut leaf = self.descend(Descent::FirstGe(&mut cmp))?;
                let ei = leaf.seek(|k| desc.compare(k, key));
                self.leaf = Some(leaf);
                self.ei = ei as isize;
                self.ti = 0;
            }
            Dir::Bwd => {
                let leaf = self.descend(Descent::LastLe(&mut cmp))?;
                let n = leaf.seek_after(|k| desc.compare(k, key));
                self.leaf = Some(leaf);
                self.ei = n as isize - 1;
                self.ti = isize::MAX;
            }
        }
        self.release_leaf_lock();
        Ok(())
    }

    /// Moves from where `try_seek_key` left the cursor to the first item
    /// after (key, tid) in `dir` (at it when `inclusive`). The descent
    /// reads one leaf, but the items to step over can go on in the next
    /// ones: a forward descent stops left of a separator equal to `key`
    /// (a posting list split over leaves may start in the leaf before), so
    /// when `key` is the first key of a leaf the position is past the end
    /// of the leaf before it, and `settle` moves onto (key, tid) itself in
    /// the next leaf; a split posting list has TIDs on both sides of a leaf
    /// end in either direction. Searching the TIDs only in the leaf the
    /// descent reached returned such items a second time: a scan re-seeking
    /// after a merge (or, on a standby, after replay reused a page it was
    /// reading) returned its last entry again, a direction change or a
    /// restored mark too. So each entry equal to `key` that the position
    /// reaches has its TIDs searched, in whatever leaf it is; a unique key
    /// is in one entry, a split list in one per leaf it spans.
    unsafe fn skip_through(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        let desc = self.desc.clone();
        loop {
            self.settle(dir);
            if self.done {
                return;
            }
            let ti = self.ti;
            let leaf = self.leaf.as_mut().expect("a settled cursor is on a leaf");
            let (k, tids) = leaf.get(self.ei as usize);
            let to = match (desc.compare(k, key), dir) {
                // The first TID past `tid`, or the last one before it.
                (Ordering::Equal, Dir::Fwd) => tids.partition_point(|t| *t < tid || (!inclusive && *t == tid)) as isize,
                (Ordering::Equal, Dir::Bwd) => tids.partition_point(|t| *t < tid || (inclusive && *t == tid)) as isize - 1,
                // Before `key` in `dir`: the descent never leaves the
                // position there, but the step past it is cheap to make.
                (Ordering::Less, Dir::Fwd) | (Ordering::Greater, Dir::Bwd) => {
                    self.advance(dir);
                    continue;
                }
                _ => return,
            };
            let past = match dir {
                Dir::Fwd => ti >= to,
                Dir::Bwd => ti <= to,
            };
            if past {
                return;
            }
            // Past the entry's end (or before its start): `settle` moves on
            // to the next entry, in the next leaf if need be.
            self.ti = to;
        }
    }
}

impl BaseCursor for StaticCursor {
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange) {
        loop {
            if self.stage.root == NO_BLOCK {
                self.done = true;
                return;
            }
            self.done = false;
            match self.try_start(dir, range) {
                Ok(()) => return,
                Err(stale) => self.move_to_current_stage(stale),
            }
        }
    }

    unsafe fn seek_after(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        loop {
            if self.stage.root == NO_BLOCK {
                self.done = true;
                return;
            }
            self.done = false;
            match self.try_seek_key(dir, key) {
                Ok(()) => break,
                Err(stale) => self.move_to_current_stage(stale),
            }
        }
        self.skip_through(dir, key, tid, inclusive);
    }

    unsafe fn peek(&mut self, dir: Dir) -> Option<(&[u8], Tid)> {
        self.settle(dir);
        if self.done {
            return None;
        }
        let (ei, ti) = (self.ei as usize, self.ti as usize);
        let (k, tids) = self.leaf.as_mut().unwrap().get(ei);
        Some((k, tids[ti]))
    }

    fn advance(&mut self, dir: Dir) {
        match dir {
            Dir::Fwd => self.ti += 1,
            Dir::Bwd => self.ti -= 1,
        }
    }

    fn stop(&mut self) {
        self.done = true;
    }

    fn park(&mut self) {
        self.spare = self.take_window();
        self.path.clear();
        self.done = true;
    }

    unsafe fn reopen(&mut self, index: pg_sys::Relation, info: &BaseInfo) {
        self.park();
        self.index = index;
        self.stage = Stage::of(info);
    }
}
