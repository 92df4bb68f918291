//! elastic_btree's `BaseCursor`: a position in the elastic tree (the
//! engine's scan merges it with the dynamic stage's entries).
//!
//! The cursor copies one leaf at a time (TIDs, and keys of standard
//! leaves; keys of compact entries are read from the heap when the scan
//! first looks at them) and holds no lock between calls. Moving on follows
//! README.md, "Readers and concurrent writers": forward, the next leaf is
//! searched from the previous leaf's high key, so entries a merge moved
//! there from a leaf already returned are skipped; backward, nbtree's walk
//! left re-finds the page whose right link is the one we came from.

use std::rc::Rc;

use pg_hybrid_core::elastic::tree::{ElasticTree, Leaf, NO_BLOCK};
use pg_hybrid_core::elastic::{KeyFetcher, Target, TidPos};
use pg_hybrid_core::partition::prefix_successor;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::fetch::HeapFetcher;
use super::pool::{check_tree_page, BufPool};
use super::structure::TreeRoots;
use super::tree::core_error;
use crate::engine::base::{BaseCursor, Dir, ScanRange};
use crate::engine::meta::BaseInfo;
use crate::keys::IndexDesc;
use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind};

/// Creates the heap fetcher on its first use: probes that stay in
/// standard leaves never open the heap.
struct LazyFetcher<'a> {
    index: pg_sys::Relation,
    desc: &'a Rc<IndexDesc>,
    f: &'a mut Option<HeapFetcher>,
}

impl KeyFetcher for LazyFetcher<'_> {
    fn fetch(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool {
        if self.f.is_none() {
            *self.f = Some(unsafe { HeapFetcher::open(self.index, self.desc.clone()) });
        }
        self.f.as_mut().unwrap().fetch(tid, out)
    }
}

pub struct ElasticCursor {
    index: pg_sys::Relation,
    desc: Rc<IndexDesc>,
    meta_blk: u32,
    /// Root and height as of the scan's snapshot of the metapage (NO_BLOCK:
    /// read the tree's metapage).
    root: u32,
    height: u8,
    fetcher: Option<HeapFetcher>,
    /// Copy of the current leaf's body; entries are decoded on access.
    body: Vec<u8>,
    /// Its TIDs, decoded when it was copied.
    tids: Vec<Tid>,
    /// Whether it is a compact leaf (entries have no keys to decode).
    compact: bool,
    n: usize,
    /// Forward scans: position where the range ends in this leaf, when the
    /// search for the upper bound found it here.
    stop: Option<usize>,
    /// With `stop`: the entries from the start position to it (first
    /// position, entries), copied instead of `body`.
    extracted: Option<(usize, Vec<pg_hybrid_core::elastic::tree::ScanItem>)>,
    /// Forward scans: the upper bound as a search target (key, TID side).
    end: Option<(Vec<u8>, TidPos)>,
    /// (block, position, key) of the last entry whose key was looked at, so
    /// keys out of order in a leaf (a damaged page: a TID pointing at some
    /// other row) are an ERROR, not extra rows.
    seen: (u32, isize, Vec<u8>),
    pos: isize,
    blk: u32,
    left: u32,
    right: u32,
    hikey: Option<(Vec<u8>, Tid)>,
    pub done: bool,
    buf: Vec<u8>,
    /// The key of the entry `peek` returned last, and where it was (block,
    /// position, TID): a second peek there answers from it, without
    /// reading a compact entry's key from the heap again.
    cur_key: Vec<u8>,
    peeked: Option<(u32, isize, Tid)>,
}

impl ElasticCursor {
    pub fn new(index: pg_sys::Relation, desc: Rc<IndexDesc>, roots: &TreeRoots) -> ElasticCursor {
        let meta_blk = roots.tree_meta;
        let known = roots.root != NO_BLOCK && roots.height > 0 && roots.height < 40;
        ElasticCursor {
            index,
            desc,
            meta_blk,
            root: if known { roots.root } else { NO_BLOCK },
            height: if known { roots.height as u8 } else { 0 },
            fetcher: None,
            body: Vec::new(),
            tids: Vec::new(),
            compact: false,
            n: 0,
            stop: None,
            extracted: None,
            end: None,
            seen: (NO_BLOCK, 0, Vec::new()),
            pos: 0,
            blk: NO_BLOCK,
            left: NO_BLOCK,
            right: NO_BLOCK,
            hikey: None,
            done: meta_blk == NO_BLOCK,
            buf: Vec::new(),
            cur_key: Vec::new(),
            peeked: None,
        }
    }

    fn fetcher(&mut self) -> LazyFetcher<'_> {
        LazyFetcher { index: self.index, desc: &self.desc, f: &mut self.fetcher }
    }

    fn leaf(&self) -> Leaf<'_> {
        Leaf::parse(&self.body).unwrap_or_else(|e| unsafe { core_error(self.index, e) })
    }

    fn tid_at(&self, i: usize) -> Tid {
        match self.tids.get(i) {
            Some(t) => *t,
            None => unsafe { page::corrupted(&page::rel_name(self.index), self.blk, "scan position past the leaf") },
        }
    }

    /// Heap reads made for keys so far.
    pub fn fetch_count(&self) -> u64 {
        self.fetcher.as_ref().map(|f| f.fetches).unwrap_or(0)
    }

    unsafe fn leaf_for(&mut self, t: Option<&Target>) -> u32 {
        let tree = if self.root != NO_BLOCK {
            ElasticTree::open_at(BufPool::reader(self.index), self.meta_blk, self.root, self.height)
        } else {
            ElasticTree::open_reader(BufPool::reader(self.index), self.meta_blk).unwrap_or_else(|e| core_error(self.index, e))
        };
        tree.leaf_for(t).unwrap_or_else(|e| core_error(self.index, e))
    }

    /// Reads leaf `blk`; returns the position of the first entry >= `t`
    /// (0 without a target) and, with `end`, of the first entry >= `end`,
    /// searched under the same lock. When the range ends in this leaf, only
    /// its entries are copied (a probe copies one entry, not the page) and
    /// `stop` is set; otherwise the whole body is copied.
    unsafe fn load(&mut self, blk: u32, t: Option<&Target>, end: Option<&Target>) -> usize {
        self.peeked = None;
        let b = Buf::read(self.index, blk, Lock::Share);
        check_tree_page(self.index, blk, b.page());
        let op = *page::opaque(b.page());
        if op.level != 0 {
            page::corrupted(&page::rel_name(self.index), blk, "sibling link leaves the leaf level");
        }
        let body = std::slice::from_raw_parts((b.page() as *const u8).add(page::PAGE_HEADER_SIZE), page::BODY_CAP);
        let leaf = Leaf::parse(body).unwrap_or_else(|e| core_error(self.index, e));
        self.n = leaf.len();
        self.compact = matches!(leaf, Leaf::Compact(_));
        self.hikey = leaf.high_key().unwrap_or_else(|e| core_error(self.index, e)).map(|(k, t)| (k.to_vec(), t));
        let mut buf = std::mem::take(&mut self.buf);
        let mut f = LazyFetcher { index: self.index, desc: &self.desc, f: &mut self.fetcher };
        let pos = match t {
            None => 0,
            Some(t) => leaf.search(t, &mut f, &mut buf).unwrap_or_else(|e| core_error(self.index, e)),
        };
        let stop = match end {
            None => None,
            Some(e) => {
                let stop = leaf.search(e, &mut f, &mut buf).unwrap_or_else(|e| core_error(self.index, e));
                // The range ends here if the page's upper bound is past its
                // end, or if an entry at or after `stop` is live (it is then
                // >= the end, and so is everything right of it). Compact
                // entries there may all be dead (pruned keys can sit on
                // either side of the searched position), and then live
                // entries below the end may follow in the next leaf.
                let hikey_past = match &self.hikey {
                    None => true,
                    Some((k, tid)) => pg_hybrid_core::elastic::cmp_entry(k, *tid, e) != std::cmp::Ordering::Less,
                };
                let mut live_after = |f: &mut LazyFetcher| match &leaf {
                    Leaf::Std(_) => stop < self.n,
                    Leaf::Compact(v) => (stop..self.n).any(|i| {
                        buf.clear();
                        f.fetch(v.tid(i), &mut buf)
                    }),
                };
                (hikey_past || live_after(&mut f)).then_some(stop)
            }
        };
        self.buf = buf;
        self.stop = stop;
        match stop {
            Some(stop) => {
                let mut items = Vec::with_capacity(stop.saturating_sub(pos));
                for i in pos..stop.max(pos) {
                    items.push(leaf.item(i).unwrap_or_else(|e| core_error(self.index, e)));
                }
                self.extracted = Some((pos, items));
                self.body.clear();
            }
            None => {
                self.extracted = None;
                self.body.clear();
                self.body.extend_from_slice(body);
                // TIDs decoded once: a keyless range walks them directly.
                self.tids.clear();
                for i in 0..self.n {
                    self.tids.push(leaf.item_tid(i).unwrap_or_else(|e| core_error(self.index, e)));
                }
            }
        }
        drop(b);
        self.blk = blk;
        self.left = op.left;
        self.right = op.right;
        pos
    }

    /// Positions before the first entry of the range in `dir`: `lower` and
    /// `upper` are key prefixes, inclusive, as hybrid's scan computes them.
    /// `whole_key`: they are complete keys (a one-column index), so their
    /// positions are searched as keys, and `strict` = (lower, upper) may
    /// exclude the bound itself.
    pub unsafe fn start_range(&mut self, dir: Dir, lower: &[u8], upper: Option<&[u8]>, whole_key: bool, strict: (bool, bool)) {
        if self.meta_blk == NO_BLOCK {
            self.done = true;
            return;
        }
        self.done = false;
        match dir {
            Dir::Fwd => {
                let t = if whole_key && strict.0 { Target::last(lower) } else { Target::first(lower) };
                let blk = self.leaf_for(Some(&t));
                // Where the range ends, searched in every leaf the scan
                // reads: a probe reads no entry past its key (one key
                // fetch), and entries before it need no key for the bound.
                self.end = match (upper, whole_key) {
                    (Some(u), true) => Some((u.to_vec(), if strict.1 { TidPos::First } else { TidPos::Last })),
                    (Some(u), false) => prefix_successor(u).map(|s| (s, TidPos::First)),
                    (None, _) => None,
                };
                let end = self.end.clone();
                let end_t = end.as_ref().map(|(k, p)| Target { key: k, tid: *p });
                self.pos = self.load(blk, Some(&t), end_t.as_ref()) as isize;
            }
            Dir::Bwd => {
                self.end = None;
                let succ = upper.and_then(prefix_successor);
                match succ {
                    Some(s) => {
                        let t = Target::first(&s);
                        let blk = self.leaf_for(Some(&t));
                        self.pos = self.load(blk, Some(&t), None) as isize - 1;
                    }
                    None => {
                        let blk = self.leaf_for(None);
                        self.load(blk, None, None);
                        self.pos = self.n as isize - 1;
                    }
                }
            }
        }
    }

    /// Moves past leaf ends in `dir` to a valid position and returns it; None
    /// at the end of the tree or of a range whose end was found by search.
    unsafe fn position(&mut self, dir: Dir) -> Option<usize> {
        loop {
            if self.done {
                return None;
            }
            if let (Some(stop), Dir::Fwd) = (self.stop, dir) {
                if self.pos >= stop as isize {
                    self.done = true;
                    return None;
                }
            }
            if self.pos < 0 || self.pos >= self.n as isize {
                if !self.next_leaf(dir) {
                    self.done = true;
                    return None;
                }
                continue;
            }
            return Some(self.pos as usize);
        }
    }

    /// Entry `i` of the current leaf: its TID, and its key if the leaf
    /// stores keys.
    unsafe fn item_at(&self, i: usize) -> (Option<Vec<u8>>, Tid) {
        if let Some((base, v)) = &self.extracted {
            return match i.checked_sub(*base).and_then(|j| v.get(j)) {
                Some(it) => (it.key.clone(), it.tid),
                None => pgrx::error!("elastic_btree: scan position outside the copied range"),
            };
        }
        if self.compact {
            return (None, self.tid_at(i));
        }
        let it = self.leaf().item(i).unwrap_or_else(|e| core_error(self.index, e));
        (it.key, it.tid)
    }

    /// Forward scans started with an upper bound: the TID at the position,
    /// without reading its key. Every entry it returns lies below the upper
    /// bound (its position was searched); a pruned entry's TID may come
    /// back, which the heap answers with nothing.
    pub unsafe fn peek_tid_at(&mut self) -> Option<Tid> {
        if self.end.is_none() {
            return None;
        }
        let i = self.position(Dir::Fwd)?;
        if self.extracted.is_none() {
            return Some(self.tid_at(i));
        }
        Some(self.item_at(i).1)
    }

    /// Whether the scan knows where its range ends (forward, upper bound).
    pub fn is_bounded_forward(&self) -> bool {
        self.end.is_some()
    }

    /// The key of `tid`, read from the heap (None: pruned).
    pub fn heap_key_of(&mut self, tid: Tid) -> Option<Vec<u8>> {
        let mut k = Vec::new();
        self.fetcher().fetch(tid, &mut k).then_some(k)
    }

    /// Positions at the entry after (key, tid) in `dir`, or at it when
    /// `inclusive`.
    pub unsafe fn seek_entry(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        if self.meta_blk == NO_BLOCK {
            self.done = true;
            return;
        }
        self.done = false;
        self.end = None;
        let t = Target::at(key, tid);
        let blk = self.leaf_for(Some(&t));
        let p = self.load(blk, Some(&t), None);
        let equal = p < self.n && self.tid_at(p) == tid;
        self.pos = match dir {
            Dir::Fwd => p as isize + (equal && !inclusive) as isize,
            Dir::Bwd => p as isize - 1 + (equal && inclusive) as isize,
        };
    }

    /// The entry at the position (moving in `dir` past dead entries and
    /// leaf ends), or None at the end of the tree or of a range whose end
    /// was found by search. The caller checks range and conditions.
    pub unsafe fn peek_entry(&mut self, dir: Dir) -> Option<(Vec<u8>, Tid)> {
        loop {
            let i = self.position(dir)?;
            let (key, tid) = self.item_at(i);
            if let Some(k) = key {
                self.check_order(i, &k);
                return Some((k, tid));
            }
            let mut k = Vec::new();
            if self.fetcher().fetch(tid, &mut k) {
                self.check_order(i, &k);
                return Some((k, tid));
            }
            // Pruned: dead for every snapshot.
            self.step(dir);
        }
    }

    fn check_order(&mut self, i: usize, k: &[u8]) {
        let (blk, pos, prev) = &mut self.seen;
        if *blk == self.blk && *pos != i as isize {
            let o = pg_hybrid_core::keys::bytes_cmp(prev, k);
            let bad = if (i as isize) > *pos { o == std::cmp::Ordering::Greater } else { o == std::cmp::Ordering::Less };
            if bad {
                unsafe { page::corrupted(&page::rel_name(self.index), self.blk, "leaf entries are out of key order (a TID or key bits are damaged)") };
            }
        }
        *blk = self.blk;
        *pos = i as isize;
        prev.clear();
        prev.extend_from_slice(k);
    }

    pub fn step(&mut self, dir: Dir) {
        self.pos += if dir == Dir::Fwd { 1 } else { -1 };
    }

    unsafe fn next_leaf(&mut self, dir: Dir) -> bool {
        match dir {
            Dir::Fwd => {
                if self.right == NO_BLOCK {
                    return false;
                }
                let hk = self.hikey.take();
                let right = self.right;
                let end = self.end.clone();
                let end_t = end.as_ref().map(|(k, p)| Target { key: k, tid: *p });
                let p = match &hk {
                    Some((k, t)) => self.load(right, Some(&Target::at(k, *t)), end_t.as_ref()),
                    None => self.load(right, None, end_t.as_ref()),
                };
                self.pos = p as isize;
                true
            }
            Dir::Bwd => {
                if self.left == NO_BLOCK {
                    return false;
                }
                let came_from = self.blk;
                let blk = self.walk_left(self.left, came_from);
                self.load(blk, None, None);
                self.pos = self.n as isize - 1;
                true
            }
        }
    }

    /// The page left of `came_from`, starting at its old left link `cand`.
    unsafe fn walk_left(&mut self, mut cand: u32, came_from: u32) -> u32 {
        let limit = crate::storage::buffer::nblocks(self.index) as u64 + 2;
        for _ in 0..limit {
            let (kind, right) = {
                let b = Buf::read(self.index, cand, Lock::Share);
                let k = check_tree_page(self.index, cand, b.page());
                (k, page::opaque(b.page()).right)
            };
            // A deleted page's content is what it held when it was merged
            // into its right neighbour: if that is where we came from, we
            // read it before the merge, so this content is what is missing.
            if kind == PageKind::ElasticDeleted || right == came_from {
                return cand;
            }
            // Our page was merged away after we read it: its left
            // neighbour now links past it, and is the one we want.
            let from_deleted = {
                let b = Buf::read(self.index, came_from, Lock::Share);
                check_tree_page(self.index, came_from, b.page()) == PageKind::ElasticDeleted
            };
            if from_deleted || right == NO_BLOCK {
                return cand;
            }
            // The left page split after we left it: move right.
            cand = right;
        }
        page::corrupted(&page::rel_name(self.index), cand, "left walk does not find the page it came from");
    }
}

impl BaseCursor for ElasticCursor {
    unsafe fn start(&mut self, dir: Dir, range: &ScanRange) {
        self.peeked = None;
        self.start_range(dir, range.lower, range.upper, range.whole_key, range.strict);
    }

    unsafe fn seek_after(&mut self, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        self.peeked = None;
        self.seek_entry(dir, key, tid, inclusive);
    }

    unsafe fn peek(&mut self, dir: Dir) -> Option<(&[u8], Tid)> {
        if let Some((blk, pos, tid)) = self.peeked {
            if blk == self.blk && pos == self.pos && !self.done {
                return Some((&self.cur_key, tid));
            }
        }
        let (k, t) = self.peek_entry(dir)?;
        self.cur_key = k;
        self.peeked = Some((self.blk, self.pos, t));
        Some((&self.cur_key, t))
    }

    fn advance(&mut self, dir: Dir) {
        self.step(dir);
    }

    fn stop(&mut self) {
        self.done = true;
        self.peeked = None;
    }

    fn keyless(&self) -> bool {
        true
    }

    fn bounded_forward(&self) -> bool {
        self.is_bounded_forward()
    }

    unsafe fn peek_tid(&mut self) -> Option<Tid> {
        self.peek_tid_at()
    }

    unsafe fn key_of(&mut self, tid: Tid) -> Option<Vec<u8>> {
        self.heap_key_of(tid)
    }

    fn key_fetches(&self) -> u64 {
        self.fetch_count()
    }

    fn park(&mut self) {
        // The heap fetcher holds a heap relation and slot: let it go.
        self.fetcher = None;
        self.extracted = None;
        self.peeked = None;
        self.done = true;
    }

    unsafe fn reopen(&mut self, index: pg_sys::Relation, info: &BaseInfo) {
        // A fresh cursor that keeps this one's buffers.
        let mut fresh = ElasticCursor::new(index, self.desc.clone(), &TreeRoots::of(info));
        for (mine, theirs) in [(&mut self.body, &mut fresh.body), (&mut self.buf, &mut fresh.buf), (&mut self.cur_key, &mut fresh.cur_key)] {
            mine.clear();
            std::mem::swap(mine, theirs);
        }
        self.tids.clear();
        std::mem::swap(&mut self.tids, &mut fresh.tids);
        *self = fresh;
    }
}
