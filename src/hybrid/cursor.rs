//! hybrid_btree's `BaseCursor`: a position (entry, TID of its posting list)
//! in a copied static leaf; moving past a leaf end loads its neighbour
//! through the path of inner pages it descended (static pages have no
//! sibling links). The engine checks range ends and conditions.

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::stage::Stage;
use super::static_io::{self, Descent, LeafData, PathStep};
use crate::engine::base::{BaseCursor, Dir, ScanRange};
use crate::keys::IndexDesc;
use crate::storage::page::NO_BLOCK;

pub struct HybridCursor {
    index: pg_sys::Relation,
    desc: Rc<IndexDesc>,
    stage: Stage,
    leaf: Option<LeafData>,
    /// Inner pages from the root to `leaf`, with the child taken at each.
    path: Vec<PathStep>,
    /// Entry and TID position in `leaf`; `ti == isize::MAX` is "the last
    /// TID of the entry" (moving backwards into an entry).
    ei: isize,
    ti: isize,
    done: bool,
}

impl HybridCursor {
    pub fn new(index: pg_sys::Relation, desc: Rc<IndexDesc>, stage: Stage) -> HybridCursor {
        HybridCursor { index, desc, stage, leaf: None, path: Vec::new(), ei: 0, ti: 0, done: true }
    }

    /// Descends from the root and loads the leaf `how` leads to.
    unsafe fn descend(&mut self, mut how: Descent) -> LeafData {
        self.path.clear();
        let blk = static_io::descend_from(self.index, &self.stage, self.stage.root, &mut how, &mut self.path);
        static_io::load_leaf(self.index, blk, &self.stage)
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

    /// Moves onto a valid (entry, TID) in `dir`, loading siblings past leaf
    /// ends; sets `done` at the end of the stage.
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
                let Some(next) = static_io::sibling_leaf(self.index, &self.stage, &mut self.path, dir == Dir::Fwd) else {
                    self.done = true;
                    return;
                };
                let l = static_io::load_leaf(self.index, next, &self.stage);
                self.ei = if dir == Dir::Fwd { 0 } else { l.len() as isize - 1 };
                self.ti = if dir == Dir::Fwd { 0 } else { isize::MAX };
                self.leaf = Some(l);
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
}

impl BaseCursor for HybridCursor {
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange) {
        if self.stage.root == NO_BLOCK {
            self.done = true;
            return;
        }
        self.done = false;
        let desc = self.desc.clone();
        match dir {
            Dir::Fwd => {
                let lower = range.lower;
                let mut leaf = if lower.is_empty() {
                    self.descend(Descent::Leftmost)
                } else {
                    self.descend(Descent::FirstGe(&mut |k| desc.compare_prefix(k, lower)))
                };
                let ei = if lower.is_empty() { 0 } else { leaf.seek(|k| desc.compare_prefix(k, lower)) };
                self.leaf = Some(leaf);
                self.ei = ei as isize;
                self.ti = 0;
            }
            Dir::Bwd => {
                let leaf = match range.upper {
                    None => self.descend(Descent::Rightmost),
                    Some(u) => self.descend(Descent::LastLe(&mut |k| desc.compare_prefix(k, u))),
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
    }

    unsafe fn seek_after(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        if self.stage.root == NO_BLOCK {
            self.done = true;
            return;
        }
        self.done = false;
        let desc = self.desc.clone();
        let mut cmp = |k: &[u8]| desc.compare(k, key);
        let mut leaf = self.descend(if dir == Dir::Bwd { Descent::LastLe(&mut cmp) } else { Descent::FirstGe(&mut cmp) });
        // Flatten the position search over (entry, tid).
        let ei = leaf.seek(|k| desc.compare(k, key));
        let (ei, ti) = if ei < leaf.len() && desc.compare(&leaf.get(ei).0, key) == Ordering::Equal {
            let tids = &leaf.get(ei).1;
            let ti = tids.partition_point(|t| *t < tid || (!inclusive && dir == Dir::Fwd && *t == tid) || (inclusive && dir == Dir::Bwd && *t == tid));
            (ei as isize, ti as isize)
        } else {
            (ei as isize, 0)
        };
        self.leaf = Some(leaf);
        match dir {
            Dir::Fwd => {
                self.ei = ei;
                self.ti = ti;
            }
            Dir::Bwd => {
                // The item before (ei, ti).
                self.ei = ei;
                self.ti = ti - 1;
                if self.ti < 0 {
                    self.ei -= 1;
                    self.ti = isize::MAX;
                }
            }
        }
    }

    unsafe fn peek(&mut self, dir: Dir) -> Option<(&[u8], Tid)> {
        self.settle(dir);
        if self.done {
            return None;
        }
        let (ei, ti) = (self.ei as usize, self.ti as usize);
        let (k, tids) = self.leaf.as_mut().unwrap().get(ei);
        Some((k.as_slice(), tids[ti]))
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
}
