//! griffin's `BaseCursor`: a point range (equality on every key column,
//! `ScanRange::point`) is answered from the key's hash bucket, every
//! other range by the tree's cursor. The engine merges the dynamic stage in
//! either way, and checks conditions and range ends.

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::hash_path::Matches;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::hash_io;
use super::structure::{hash_header, key_hash, tree_cursor};
use crate::engine::base::{BaseCursor, Dir, ScanRange};
use crate::engine::meta::BaseInfo;
use crate::keys::IndexDesc;
use crate::storage::page::NO_BLOCK;

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
    /// Positioned in a point range: the entries are `hits`, in index order
    /// through `order`, and `pos` is the position; otherwise the tree's
    /// cursor is.
    point: bool,
    hits: Matches,
    order: Vec<usize>,
    pos: isize,
}

impl GriffinCursor {
    pub fn new(index: pg_sys::Relation, desc: Rc<IndexDesc>, info: &BaseInfo) -> GriffinCursor {
        GriffinCursor { index, desc, tree: None, info: *info, header: hash_header(info), generation: info.generation, point: false, hits: Matches::new(), order: Vec::new(), pos: 0 }
    }

    fn tree(&mut self) -> &mut Box<dyn BaseCursor> {
        let (index, desc, info) = (self.index, &self.desc, &self.info);
        self.tree.get_or_insert_with(|| unsafe { tree_cursor(index, desc, info) })
    }

    fn entry(&self, at: isize) -> Option<(&[u8], Tid)> {
        if at < 0 {
            return None;
        }
        let &i = self.order.get(at as usize)?;
        Some((self.hits.key(i), self.hits.tid(i)))
    }

    fn cmp_entry(&self, i: usize, key: &[u8], tid: Tid) -> Ordering {
        self.desc.compare(self.hits.key(i), key).then(self.hits.tid(i).cmp(&tid))
    }

    /// Reads the key's bucket: every entry whose key columns equal
    /// `keycols`, in (key, TID) order.
    unsafe fn load(&mut self, keycols: &[u8]) {
        let desc = &self.desc;
        let hash = key_hash(desc, keycols);
        if desc.hashable {
            // Equal keys have equal bytes.
            hash_io::lookup(self.index, self.header, self.generation, hash, &mut |k| desc.keycols(k) == keycols, &mut self.hits);
        } else {
            hash_io::lookup(self.index, self.header, self.generation, hash, &mut |k| desc.compare_keycols(k, keycols) == Ordering::Equal, &mut self.hits);
        }
        self.order.clear();
        self.order.extend(0..self.hits.len());
        let (hits, desc) = (&self.hits, &self.desc);
        self.order.sort_by(|&a, &b| desc.compare(hits.key(a), hits.key(b)).then(hits.tid(a).cmp(&hits.tid(b))));
    }
}

impl BaseCursor for GriffinCursor {
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange) {
        match range.point {
            true if self.header != NO_BLOCK => {
                if let Some(t) = self.tree.as_mut() {
                    t.stop();
                }
                self.point = true;
                self.load(range.lower);
                self.pos = match dir {
                    Dir::Fwd => 0,
                    Dir::Bwd => self.order.len() as isize - 1,
                };
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
        let n = self.order.len();
        self.pos = match dir {
            // The first entry after (key, tid), or at it when inclusive.
            Dir::Fwd => (0..n)
                .find(|&p| {
                    let c = self.cmp_entry(self.order[p], key, tid);
                    c == Ordering::Greater || (inclusive && c == Ordering::Equal)
                })
                .unwrap_or(n) as isize,
            Dir::Bwd => (0..n)
                .rev()
                .find(|&p| {
                    let c = self.cmp_entry(self.order[p], key, tid);
                    c == Ordering::Less || (inclusive && c == Ordering::Equal)
                })
                .map(|p| p as isize)
                .unwrap_or(-1),
        };
    }

    unsafe fn peek(&mut self, dir: Dir) -> Option<(&[u8], Tid)> {
        if self.point {
            self.entry(self.pos)
        } else {
            self.tree().peek(dir)
        }
    }

    fn advance(&mut self, dir: Dir) {
        if self.point {
            self.pos += dir.step();
        } else {
            self.tree().advance(dir);
        }
    }

    fn stop(&mut self) {
        if self.point {
            self.pos = self.order.len() as isize;
            self.order.clear();
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
        self.order.clear();
        if let Some(t) = self.tree.as_mut() {
            t.park();
        }
    }

    unsafe fn reopen(&mut self, info: &BaseInfo) {
        self.header = hash_header(info);
        self.generation = info.generation;
        self.info = *info;
        if let Some(t) = self.tree.as_mut() {
            t.reopen(&super::structure::tree_info(info));
        }
    }
}
