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

/// The body of a pinned and locked tree page (what follows the header).
unsafe fn leaf_body(b: &Buf) -> &[u8] {
    std::slice::from_raw_parts((b.page() as *const u8).add(page::PAGE_HEADER_SIZE), page::BODY_CAP)
}

/// An entry copied from a leaf where the range ends: its key's place in
/// `ElasticCursor::ext_keys` (None: a compact entry, keyless).
#[derive(Clone, Copy)]
struct ExtItem {
    key: Option<(u32, u32)>,
    tid: Tid,
}

/// TIDs of a copied leaf decoded at a time (`ElasticCursor::tid_at`).
const TID_RUN: usize = 64;

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
    /// Its TIDs, decoded on first use: `tids[i]` is entry i's for i in
    /// `tids_decoded`, and the window grows by `TID_RUN` entries at a time
    /// from where the scan reads (a 100-row range reads about a quarter of
    /// a leaf; decoding every TID of every leaf copied was a third of the
    /// cursor's CPU).
    tids: Vec<Tid>,
    tids_decoded: std::ops::Range<usize>,
    /// Whether it is a compact leaf (entries have no keys to decode).
    compact: bool,
    n: usize,
    /// Forward scans: position where the range ends in this leaf, when the
    /// search for the upper bound found it here.
    stop: Option<usize>,
    /// With `stop`: the position of the first entry copied to `ext_items`
    /// instead of copying `body` (the entries from the start position to
    /// the stop; their keys back to back in `ext_keys`). Both buffers are
    /// kept from leaf to leaf and scan to scan: a probe allocates nothing.
    extracted: Option<usize>,
    ext_items: Vec<ExtItem>,
    ext_keys: Vec<u8>,
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
    /// The key of the entry `peek_entry` returned last, and where it was
    /// (block, position, TID): a second peek there answers from it, without
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
            tids_decoded: 0..0,
            compact: false,
            n: 0,
            stop: None,
            extracted: None,
            ext_items: Vec::new(),
            ext_keys: Vec::new(),
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

    fn tid_at(&mut self, i: usize) -> Tid {
        if i >= self.n || i >= self.tids.len() {
            unsafe { page::corrupted(&page::rel_name(self.index), self.blk, "scan position past the leaf") }
        }
        if !self.tids_decoded.contains(&i) {
            self.decode_tids(i);
        }
        self.tids[i]
    }

    /// Widens the decoded window of the copied leaf's TIDs to hold entry
    /// `i` and up to `TID_RUN` entries beyond it in the direction it lies.
    #[inline(never)]
    fn decode_tids(&mut self, i: usize) {
        let (a, b) = (self.tids_decoded.start, self.tids_decoded.end);
        let (from, to) = if a == b {
            (i, (i + TID_RUN).min(self.n))
        } else if i >= b {
            (b, (i + TID_RUN).min(self.n))
        } else {
            (i.saturating_sub(TID_RUN - 1), a)
        };
        let leaf = Leaf::parse(&self.body).unwrap_or_else(|e| unsafe { core_error(self.index, e) });
        for j in from..to {
            self.tids[j] = leaf.item_tid(j).unwrap_or_else(|e| unsafe { core_error(self.index, e) });
        }
        self.tids_decoded = if a == b { from..to } else { from.min(a)..to.max(b) };
    }

    /// Heap reads made for keys so far.
    pub fn fetch_count(&self) -> u64 {
        self.fetcher.as_ref().map(|f| f.fetches).unwrap_or(0)
    }

    /// The leaf to `load` for `t`: with a target, as its parent names it
    /// (`load` moves right past splits); without, the rightmost, read.
    unsafe fn leaf_for(&mut self, t: Option<&Target>) -> u32 {
        let tree = if self.root != NO_BLOCK {
            ElasticTree::open_at(BufPool::reader(self.index), self.meta_blk, self.root, self.height)
        } else {
            ElasticTree::open_reader(BufPool::reader(self.index), self.meta_blk).unwrap_or_else(|e| core_error(self.index, e))
        };
        match t {
            Some(t) => tree.leaf_unread(t),
            None => tree.leaf_for(None),
        }
        .unwrap_or_else(|e| core_error(self.index, e))
    }

    /// Reads leaf `blk`; returns the position of the first entry >= `t`
    /// (0 without a target) and, with `end`, of the first entry >= `end`,
    /// searched under the same lock. When the range ends in this leaf, only
    /// its entries are copied (a probe copies one entry, not the page) and
    /// `stop` is set; otherwise the whole body is copied.
    unsafe fn load(&mut self, blk: u32, t: Option<&Target>, end: Option<&Target>) -> usize {
        self.peeked = None;
        let mut blk = blk;
        let mut hops = 0u64;
        let b = loop {
            let b = Buf::read(self.index, blk, Lock::Share);
            check_tree_page(self.index, blk, b.page());
            let op = *page::opaque(b.page());
            if op.level != 0 {
                page::corrupted(&page::rel_name(self.index), blk, "sibling link leaves the leaf level");
            }
            // The descent stops above the leaves (`leaf_unread`), so the
            // leaf is read once: a split it did not see is passed here, by
            // the rule it follows on every other level (move right while
            // the target is at or above the high key).
            let hikey = Leaf::parse(leaf_body(&b)).and_then(|l| l.high_key()).unwrap_or_else(|e| core_error(self.index, e));
            if let (Some(t), Some((k, tid)), true) = (t, hikey, op.right != NO_BLOCK) {
                if pg_hybrid_core::elastic::cmp_entry(k, tid, t) != std::cmp::Ordering::Greater {
                    hops += 1;
                    if hops > 64 && hops > crate::storage::buffer::nblocks(self.index) as u64 + 2 {
                        page::corrupted(&page::rel_name(self.index), blk, "leaf sibling chain does not end");
                    }
                    blk = op.right;
                    continue;
                }
            }
            self.hikey = hikey.map(|(k, tid)| (k.to_vec(), tid));
            break b;
        };
        let op = *page::opaque(b.page());
        let body = leaf_body(&b);
        let leaf = Leaf::parse(body).unwrap_or_else(|e| core_error(self.index, e));
        self.n = leaf.len();
        self.compact = matches!(leaf, Leaf::Compact(_));
        let mut buf = std::mem::take(&mut self.buf);
        let mut f = LazyFetcher { index: self.index, desc: &self.desc, f: &mut self.fetcher };
        let pos = match t {
            None => 0,
            Some(t) => leaf.search(t, &mut f, &mut buf).unwrap_or_else(|e| core_error(self.index, e)),
        };
        let stop = match end {
            None => None,
            Some(e) => {
                // The end is never below the start: searched from it.
                let stop = leaf.search_from(e, pos, &mut f, &mut buf).unwrap_or_else(|e| core_error(self.index, e));
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
                self.ext_items.clear();
                self.ext_keys.clear();
                for i in pos..stop.max(pos) {
                    let item = match &leaf {
                        Leaf::Std(v) => {
                            let e = v.entry(i).unwrap_or_else(|e| core_error(self.index, e));
                            let at = self.ext_keys.len() as u32;
                            self.ext_keys.extend_from_slice(e.key);
                            ExtItem { key: Some((at, e.key.len() as u32)), tid: e.tid }
                        }
                        Leaf::Compact(_) => ExtItem { key: None, tid: leaf.item_tid(i).unwrap_or_else(|e| core_error(self.index, e)) },
                    };
                    self.ext_items.push(item);
                }
                self.extracted = Some(pos);
                self.body.clear();
                self.tids.clear();
                self.tids_decoded = 0..0;
            }
            None => {
                self.extracted = None;
                self.body.clear();
                self.body.extend_from_slice(body);
                // TIDs are decoded as the scan reaches them (tid_at): a
                // keyless range walks them directly.
                self.tids.clear();
                self.tids.resize(self.n, Tid::new(0, 0));
                self.tids_decoded = 0..0;
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

    /// Entry `i` of the current leaf: its TID, and whether the leaf stores
    /// its key, which is then in `cur_key`.
    unsafe fn item_at(&mut self, i: usize) -> (bool, Tid) {
        if let Some(first) = self.extracted {
            let it = self.ext_item(first, i);
            if let Some((at, len)) = it.key {
                self.cur_key.clear();
                self.cur_key.extend_from_slice(&self.ext_keys[at as usize..(at + len) as usize]);
            }
            return (it.key.is_some(), it.tid);
        }
        if self.compact {
            return (false, self.tid_at(i));
        }
        let leaf = Leaf::parse(&self.body).unwrap_or_else(|e| core_error(self.index, e));
        let Leaf::Std(v) = leaf else { page::corrupted(&page::rel_name(self.index), self.blk, "copied leaf changed its form") };
        let e = v.entry(i).unwrap_or_else(|e| core_error(self.index, e));
        self.cur_key.clear();
        self.cur_key.extend_from_slice(e.key);
        (true, e.tid)
    }

    /// Entry `i` of the entries copied from position `first` on.
    fn ext_item(&self, first: usize, i: usize) -> ExtItem {
        match i.checked_sub(first).and_then(|j| self.ext_items.get(j)) {
            Some(it) => *it,
            None => pgrx::error!("elastic_btree: scan position outside the copied range"),
        }
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
        // The TID only: a keyless probe copies no key.
        match self.extracted {
            Some(first) => Some(self.ext_item(first, i).tid),
            None => Some(self.tid_at(i)),
        }
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
    /// leaf ends), its key in `cur_key`, or None at the end of the tree or
    /// of a range whose end was found by search. The caller checks range
    /// and conditions.
    pub unsafe fn peek_entry(&mut self, dir: Dir) -> Option<Tid> {
        loop {
            let i = self.position(dir)?;
            let (keyed, tid) = self.item_at(i);
            if keyed {
                self.check_order(i);
                return Some(tid);
            }
            self.cur_key.clear();
            let mut f = LazyFetcher { index: self.index, desc: &self.desc, f: &mut self.fetcher };
            if f.fetch(tid, &mut self.cur_key) {
                self.check_order(i);
                return Some(tid);
            }
            // Pruned: dead for every snapshot.
            self.step(dir);
        }
    }

    /// Checks `cur_key`, entry `i`'s, against the key looked at before it.
    fn check_order(&mut self, i: usize) {
        let k = &self.cur_key;
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
        let t = self.peek_entry(dir)?;
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
        for (mine, theirs) in [
            (&mut self.body, &mut fresh.body),
            (&mut self.buf, &mut fresh.buf),
            (&mut self.cur_key, &mut fresh.cur_key),
            (&mut self.ext_keys, &mut fresh.ext_keys),
            (&mut self.seen.2, &mut fresh.seen.2),
        ] {
            mine.clear();
            std::mem::swap(mine, theirs);
        }
        self.tids.clear();
        std::mem::swap(&mut self.tids, &mut fresh.tids);
        self.tids_decoded = 0..0;
        self.ext_items.clear();
        std::mem::swap(&mut self.ext_items, &mut fresh.ext_items);
        *self = fresh;
    }
}
