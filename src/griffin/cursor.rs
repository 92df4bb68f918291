//! griffin's `BaseCursor`: a point range (equality on every key column,
//! `ScanRange::point`) is answered from the key's hash bucket, every
//! other range by the tree's cursor. The engine merges the dynamic stage in
//! either way, and checks conditions and range ends.

use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::structure::{hash_header, tree_cursor};
use crate::engine::base::{BaseCursor, Dir, ScanRange};
use crate::engine::meta::BaseInfo;
use crate::hash_path::PointHits;
use crate::keys::IndexDesc;
use crate::storage::page::NO_BLOCK;

/// Entries of one key past which a point range leaves the hash path for
/// the tree. The hash path reads a key's whole chain and sorts it before
/// the first row comes out; the tree reads in order from the first. For a
/// key of a column with few values (a million rows of one status) that
/// made `WHERE k = $1 LIMIT 1` read and sort every entry of the key: 54 ms
/// against btree's 0.8. Past this many the probe stops (after the page it
/// is on) and the tree takes the range.
const POINT_HITS_MAX: usize = 1024;

pub struct GriffinCursor {
    index: pg_sys::Relation,
    desc: Rc<IndexDesc>,
    /// The tree's cursor, made on the first non-point range: a probe
    /// through the hash path (most scans of an OLTP workload) never needs
    /// one.
    tree: Option<Box<dyn BaseCursor>>,
    /// The generation of the base structure the cursor reads.
    info: BaseInfo,
    /// The hash path's header block (NO_BLOCK: none).
    header: u32,
    /// The engine generation the cursor reads (keys the routing copy).
    generation: u32,
    /// Positioned in a point range (`hits`); otherwise the tree's cursor
    /// is.
    point: bool,
    hits: PointHits,
}

impl GriffinCursor {
    pub fn new(index: pg_sys::Relation, desc: Rc<IndexDesc>, info: &BaseInfo) -> GriffinCursor {
        GriffinCursor { index, desc, tree: None, info: *info, header: hash_header(info), generation: info.generation, point: false, hits: PointHits::new() }
    }

    fn tree(&mut self) -> &mut Box<dyn BaseCursor> {
        let (index, desc, info) = (self.index, &self.desc, &self.info);
        self.tree.get_or_insert_with(|| unsafe { tree_cursor(index, desc, info) })
    }
}

impl BaseCursor for GriffinCursor {
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange) {
        match range.point {
            true if self.header != NO_BLOCK
                && self.hits.load(self.index, &self.desc, self.header, self.generation, range.lower, dir, POINT_HITS_MAX) =>
            {
                if let Some(t) = self.tree.as_mut() {
                    t.stop();
                }
                self.point = true;
            }
            _ => {
                self.point = false;
                self.tree().start(dir, range);
            }
        }
    }

    unsafe fn seek_after(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        if !self.point {
            return self.tree().seek_after(dir, key, tid, inclusive);
        }
        self.hits.seek_after(&self.desc, dir, key, tid, inclusive);
    }

    unsafe fn peek(&mut self, dir: Dir) -> Option<(&[u8], Tid)> {
        if self.point {
            self.hits.peek()
        } else {
            self.tree().peek(dir)
        }
    }

    fn advance(&mut self, dir: Dir) {
        if self.point {
            self.hits.advance(dir);
        } else {
            self.tree().advance(dir);
        }
    }

    fn stop(&mut self) {
        if self.point {
            self.hits.stop();
        } else if let Some(t) = self.tree.as_mut() {
            t.stop();
        }
    }

    unsafe fn key_of(&mut self, tid: Tid) -> Option<Vec<u8>> {
        self.tree().key_of(tid)
    }

    fn key_fetches(&self) -> u64 {
        self.tree.as_ref().map_or(0, |t| t.key_fetches())
    }

    fn park(&mut self) {
        self.point = false;
        self.hits.clear();
        if let Some(t) = self.tree.as_mut() {
            t.park();
        }
    }

    unsafe fn reopen(&mut self, index: pg_sys::Relation, info: &BaseInfo) {
        self.index = index;
        self.header = hash_header(info);
        self.generation = info.generation;
        self.info = *info;
        if let Some(t) = self.tree.as_mut() {
            t.reopen(index, &super::structure::tree_info(info));
        }
    }
}
