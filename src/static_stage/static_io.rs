//! Reading and writing the static stage on PostgreSQL pages.

use std::cmp::Ordering;
use std::cell::RefCell;
use std::collections::HashMap;

use pg_hybrid_core::clock_cache::CacheKey;
use pg_hybrid_core::static_stage::{self as ss, InnerView, LeafView, PageOut};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::stage::Stage;
use crate::storage::alloc::alloc_page;
use crate::storage::buffer::{Buf, Lock, Pin, ReadAhead};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

/// A static leaf copied out of its buffer, as nbtree copies a page's items,
/// so no pin or lock is held between calls of a scan. Entries are decoded
/// lazily, a window at a time: a point probe touches one restart group, not
/// the whole leaf.
pub struct LeafData {
    pub blk: u32,
    rel: pg_sys::Relation,
    /// Pinned for as long as the scan is on this leaf; VACUUM takes a
    /// cleanup lock, so the page cannot change while we hold the pin.
    pin: Pin,
    /// The share lock taken at load is still held (`try_load_leaf` with
    /// `keep_lock`): the next read of the body uses it and gives it up, so
    /// a probe locks its leaf once. `release_lock` gives it up unused.
    held: std::cell::Cell<bool>,
    /// Where the body of an LZ4 leaf is (plain leaves are read in place).
    lz4: Option<Lz4Body>,
    /// During recovery, a copy of a plain leaf's body taken at load: replay
    /// may reuse a pinned page, so the leaf is never read again.
    copy: Option<Vec<u8>>,
    nkeys: usize,
    win: Window,
    /// The decoding cursor where the last window ended, on its last entry:
    /// the next window forward goes on from it (`LeafView::resume`).
    resume: Option<ss::SuspendedCursor>,
}

const MAX_WINDOW: usize = 64;

/// Decoded entries of a leaf, flat: all keys in one buffer and all TIDs in
/// another, so a refill allocates nothing once the buffers have grown, and
/// a cursor hands them on from leaf to leaf and from rescan to rescan.
#[derive(Default)]
pub struct Window {
    /// Index of the first decoded entry.
    start: usize,
    keys: Vec<u8>,
    /// End of entry j's key in `keys` and of its TIDs in `tids`.
    ends: Vec<(u32, u32)>,
    tids: Vec<Tid>,
    /// Entries the next refill decodes: grows with each refill, so a probe
    /// decodes two entries and a range scan soon 64 at a time.
    size: usize,
}

/// Windows a backend keeps between scans, and the key bytes beyond which
/// a window is not kept (a long-key index's buffers are freed instead).
const POOLED_WINDOWS: usize = 8;
const POOLED_KEY_BYTES: usize = 64 * 1024;

thread_local! {
    /// Decode buffers of cursors that are gone: a scan begins with grown
    /// buffers, as a rescan does, instead of growing new ones by doubling
    /// on every refill of its first leaf (a quarter of a 50-row range
    /// scan's decode time went to those reallocations).
    static WINDOW_POOL: RefCell<Vec<Window>> = const { RefCell::new(Vec::new()) };
}

impl Window {
    /// Empty buffers for a new cursor, grown ones when a cursor left some.
    pub fn pooled() -> Window {
        let mut w = WINDOW_POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
        w.reset();
        w
    }

    /// Gives the buffers back for the next cursor.
    pub fn recycle(self) {
        if self.keys.capacity() == 0 || self.keys.capacity() > POOLED_KEY_BYTES {
            return;
        }
        WINDOW_POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOLED_WINDOWS {
                p.push(self);
            }
        });
    }

    fn reset(&mut self) {
        self.start = 0;
        self.keys.clear();
        self.ends.clear();
        self.tids.clear();
        self.size = 2;
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn entry(&self, j: usize) -> (&[u8], &[Tid]) {
        let (k0, t0) = if j == 0 { (0, 0) } else { self.ends[j - 1] };
        let (k1, t1) = self.ends[j];
        (&self.keys[k0 as usize..k1 as usize], &self.tids[t0 as usize..t1 as usize])
    }
}

/// The decompressed body of an LZ4 leaf: read in place in the shared leaf
/// cache while it holds this version of the page, else decompressed once
/// into backend memory.
struct Lz4Body {
    key: Option<CacheKey>,
    local: std::cell::OnceCell<Vec<u8>>,
}

impl LeafData {
    /// Runs `f` on the leaf body: plain leaves under a short share lock on
    /// the pinned page, LZ4 leaves from the shared cache or a local copy.
    fn with_view<R>(&self, f: impl FnOnce(LeafView<'_>) -> R) -> R {
        if let Some(lz) = &self.lz4 {
            let mut f = Some(f);
            if lz.local.get().is_none() {
                if let Some(key) = &lz.key {
                    let hit = crate::shmem::leaf_cache::with_cached(key, |body| (f.take().expect("called once"))(self.parse(body)));
                    if let Some(r) = hit {
                        return r;
                    }
                }
            }
            let f = f.expect("not consumed by a cache miss");
            let body = lz.local.get_or_init(|| unsafe {
                // Evicted since load: on a primary the pin and the reader
                // registration keep the page as it was; during recovery
                // `load` decompressed it into `local` already.
                let l = self.pin.share();
                decompress(self.rel, self.blk, l.page(), lz.key.as_ref())
            });
            return f(self.parse(body));
        }
        // During recovery the body was copied at load (replay may reuse a
        // pinned page); on a primary the pin and the reader registration
        // keep the page as it was.
        if let Some(copy) = &self.copy {
            return f(self.parse(copy));
        }
        unsafe {
            if self.held.get() {
                let r = f(self.parse(page::body(self.pin.page())));
                self.release_lock();
                return r;
            }
            let l = self.pin.share();
            let body = page::body(l.page());
            let r = f(self.parse(body));
            drop(l);
            r
        }
    }

    /// Gives up the lock kept from the load, if it is still held. A cursor
    /// calls it before it returns to the engine: no buffer lock is held
    /// between calls of a scan.
    pub fn release_lock(&self) {
        if self.held.replace(false) {
            unsafe { self.pin.unlock() };
        }
    }

    fn parse<'a>(&self, body: &'a [u8]) -> LeafView<'a> {
        LeafView::parse(body).unwrap_or_else(|e| self.bad(e))
    }

    fn bad(&self, e: ss::FormatError) -> ! {
        unsafe { page::corrupted(&page::rel_name(self.rel), self.blk, &format!("{e:?}")) }
    }

    pub fn len(&self) -> usize {
        self.nkeys
    }

    /// Entry `i` (< len): its key and posting list.
    pub fn get(&mut self, i: usize) -> (&[u8], &[Tid]) {
        if i < self.win.start || i >= self.win.start + self.win.len() {
            // Moving backwards, decode the window that ends at i.
            let size = self.win.size;
            let start = if i < self.win.start { (i + 1).saturating_sub(size) } else { i };
            match self.resume.take() {
                Some(s) if s.next_index() == start => self.fill(|view| match view.resume(s) {
                    Some(mut c) => c.advance().map(|_| c),
                    None => view.cursor(start),
                }),
                _ => self.fill(|view| view.cursor(start)),
            };
        }
        self.win.entry(i - self.win.start)
    }

    /// The decode buffers, for the next leaf this cursor loads.
    pub fn into_window(mut self) -> Window {
        std::mem::take(&mut self.win)
    }

    /// The decode buffers, leaving empty ones (the leaf is being dropped).
    pub fn take_window(&mut self) -> Window {
        std::mem::take(&mut self.win)
    }

    /// Decodes into `w`'s buffers from now on.
    pub fn reuse_window(&mut self, mut w: Window) {
        w.reset();
        self.win = w;
    }

    /// Index of the first entry >= bound (`cmp(stored)` = stored.cmp(bound)),
    /// with the window decoded from there: a probe walks the leaf once.
    pub fn seek(&mut self, cmp: impl FnMut(&[u8]) -> Ordering) -> usize {
        self.fill(|view| view.seek_cursor(cmp))
    }

    /// Decodes the window from the entry `position` puts a cursor on, and
    /// returns that entry's index (`len` at the end).
    fn fill(&mut self, position: impl for<'v> FnOnce(LeafView<'v>) -> Result<ss::LeafCursor<'v>, ss::FormatError>) -> usize {
        let mut win = std::mem::take(&mut self.win);
        let size = win.size.max(1);
        win.size = (size * 2).min(MAX_WINDOW);
        win.keys.clear();
        win.ends.clear();
        win.tids.clear();
        let (start, resume) = self.with_view(|view| {
            let mut c = position(view).unwrap_or_else(|e| self.bad(e));
            let start = c.index();
            if !c.valid() {
                return (start, None);
            }
            // The first entry's TIDs are decoded on their own; every next
            // entry's in the step that reaches it.
            win.tids.extend_from_slice(c.tids().unwrap_or_else(|e| self.bad(e)));
            win.keys.extend_from_slice(c.key());
            win.ends.push((win.keys.len() as u32, win.tids.len() as u32));
            while win.ends.len() < size {
                if !c.advance_into(&mut win.tids).unwrap_or_else(|e| self.bad(e)) {
                    return (start, None);
                }
                win.keys.extend_from_slice(c.key());
                win.ends.push((win.keys.len() as u32, win.tids.len() as u32));
            }
            (start, Some(c.suspend()))
        });
        win.start = start;
        self.win = win;
        self.resume = resume;
        start
    }

    /// Index of the first entry > bound.
    pub fn seek_after(&self, cmp: impl FnMut(&[u8]) -> Ordering) -> usize {
        self.with_view(|v| v.seek_after(cmp).unwrap_or_else(|e| self.bad(e)))
    }

    pub fn decode_all(&self) -> Vec<(Vec<u8>, Vec<Tid>)> {
        self.with_view(|v| v.decode_all().unwrap_or_else(|e| self.bad(e)))
    }
}

impl Drop for LeafData {
    fn drop(&mut self) {
        // During ERROR cleanup PostgreSQL releases the lock (as for `Buf`).
        if !std::thread::panicking() {
            self.release_lock();
        }
    }
}

/// A standby's replay reused a page of the stage a query reads (merge steps
/// on the primary recycle pages as soon as no primary reader holds them):
/// the query's cursor moves on to the current stage (`cursor.rs`), other
/// readers fail with a recovery conflict.
#[derive(Clone, Copy, Debug)]
pub struct Stale;

impl Stale {
    pub unsafe fn raise(self) -> ! {
        crate::raise(
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            "canceling statement due to conflict with recovery",
            "A merge replayed from the primary recycled index pages this query was reading; retry the query.",
        )
    }
}

/// Checks a static page can belong to the stage `gen`: segmented merges
/// keep the leaves they do not touch, so a stage holds pages of its own
/// generation and older ones; a page written after `gen`, or of another
/// kind, was reused after the stage retired it. On a primary that is
/// corruption (registered readers keep retired pages); during recovery it
/// is `Stale`.
unsafe fn check_static(rel: pg_sys::Relation, blk: u32, p: pg_sys::Page, gen: u32, kinds: &[PageKind]) -> Result<(), Stale> {
    // The special area's address follows from the header, so its cache
    // miss would wait for the header's: ask for both at once.
    ss::prefetch(std::slice::from_raw_parts((p as *const u8).add(page::BLCKSZ - page::SPECIAL_SIZE), page::SPECIAL_SIZE));
    let hdr = p as *const pg_sys::PageHeaderData;
    let ours = !pg_sys::PageIsNew(p)
        && (*hdr).pd_special as usize == page::BLCKSZ - page::SPECIAL_SIZE
        && page::opaque(p).magic == page::PAGE_MAGIC;
    let reused = ours
        && (page::opaque(p).generation > gen || !kinds.contains(&PageKind::from_u8(page::opaque(p).kind).unwrap_or(PageKind::Free)));
    if reused {
        if pg_sys::RecoveryInProgress() {
            return Err(Stale);
        }
        let what = if page::opaque(p).generation > gen { "static page written after this stage" } else { "page is no longer part of the static stage" };
        page::corrupted(&page::rel_name(rel), blk, what);
    }
    page::check_page(rel, blk, p, kinds);
    Ok(())
}

/// The uncompressed leaf body of a page (plain or LZ4, by its format byte).
pub unsafe fn leaf_body(rel: pg_sys::Relation, blk: u32, p: pg_sys::Page) -> Vec<u8> {
    ss::leaf_body(page::body(p))
        .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")))
        .into_owned()
}

/// Decompresses the LZ4 leaf on the locked page `p` and offers the result
/// to the shared leaf cache under `key`.
unsafe fn decompress(rel: pg_sys::Relation, blk: u32, p: pg_sys::Page, key: Option<&CacheKey>) -> Vec<u8> {
    let plain = ss::decompress_leaf(page::body(p))
        .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")));
    if let Some(k) = key {
        crate::shmem::leaf_cache::store(k, &plain);
    }
    plain
}

pub unsafe fn leaf_ntids(rel: pg_sys::Relation, blk: u32, body: &[u8]) -> usize {
    let plain = ss::leaf_body(body).unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")));
    LeafView::parse(&plain).unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}"))).ntids()
}

pub unsafe fn load_leaf(rel: pg_sys::Relation, blk: u32, stage: &Stage) -> LeafData {
    try_load_leaf(rel, blk, stage, false).unwrap_or_else(|s| s.raise())
}

/// `load_leaf`, or `Stale` when a standby's replay reused the page. With
/// `keep_lock`, a plain leaf on a primary stays share-locked until its
/// body is read once more or `release_lock` (see `LeafData::held`).
pub unsafe fn try_load_leaf(rel: pg_sys::Relation, blk: u32, stage: &Stage, keep_lock: bool) -> Result<LeafData, Stale> {
    let b = Buf::read(rel, blk, Lock::Share);
    let p = b.page();
    check_static(rel, blk, p, stage.generation, &[PageKind::StaticLeaf])?;
    let raw = page::body(p);
    let bad = |e: ss::FormatError| -> ! { page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")) };
    let recovery = pg_sys::RecoveryInProgress();
    let mut copy = None;
    let (lz4, nkeys) = if raw.first() == Some(&ss::FORMAT_LEAF_LZ4) {
        let key = crate::shmem::leaf_cache::key_of(rel, blk, p);
        let cached = if recovery {
            None
        } else {
            key.as_ref().and_then(|k| crate::shmem::leaf_cache::with_cached(k, |body| LeafView::parse(body).map(|v| v.nkeys())))
        };
        match cached {
            Some(n) => (Some(Lz4Body { key, local: Default::default() }), n.unwrap_or_else(|e| bad(e))),
            None => {
                let local = decompress(rel, blk, p, key.as_ref());
                let n = LeafView::parse(&local).unwrap_or_else(|e| bad(e)).nkeys();
                (Some(Lz4Body { key, local: local.into() }), n)
            }
        }
    } else {
        let n = LeafView::parse(raw).unwrap_or_else(|e| bad(e)).nkeys();
        if recovery {
            copy = Some(raw.to_vec());
        }
        (None, n)
    };
    let held = keep_lock && lz4.is_none() && copy.is_none();
    Ok(LeafData {
        blk,
        rel,
        pin: if held { b.into_locked_pin() } else { b.into_pin() },
        held: held.into(),
        lz4,
        copy,
        nkeys,
        win: Window { size: 2, ..Window::default() },
        resume: None,
    })
}

/// One inner page on the way from the root to a leaf, and the child taken.
/// Static pages have no sibling links (a segmented merge keeps pages whose
/// neighbours it replaces): a cursor moves to the next leaf through the
/// path it descended.
#[derive(Clone, Copy, Debug)]
pub struct PathStep {
    pub blk: u32,
    pub child: usize,
}

/// Where a descent goes at each inner page.
pub enum Descent<'a> {
    /// The child where a search for the first entry >= bound starts
    /// (`cmp` = stored.cmp(bound)).
    FirstGe(&'a mut dyn FnMut(&[u8]) -> Ordering),
    /// The child holding the last entry <= bound.
    LastLe(&'a mut dyn FnMut(&[u8]) -> Ordering),
    Leftmost,
    Rightmost,
}

/// Descends from `from` (the root, or an inner page of a path) to a leaf,
/// pushing the inner pages passed onto `path`; returns the leaf. The
/// stage's height says where the inner levels end, so the leaf itself is
/// not read here: the caller pins it once (`try_load_leaf`, which checks
/// that it is one).
pub unsafe fn descend_from(rel: pg_sys::Relation, stage: &Stage, from: u32, how: &mut Descent, path: &mut Vec<PathStep>) -> Result<u32, Stale> {
    let mut blk = from;
    if stage.height as usize > 64 {
        page::corrupted(&page::rel_name(rel), stage.root, "static stage deeper than 64 levels");
    }
    // `path` holds the inner levels above `from`; the leaf is `height - 1`
    // levels below the root.
    while path.len() + 1 < stage.height as usize {
        let (i, child) = with_inner(rel, stage, blk, |view| {
            let n = view.nchildren();
            if n == 0 {
                page::corrupted(&page::rel_name(rel), blk, "inner page without children");
            }
            let i = match how {
                Descent::FirstGe(cmp) => view.find_child(&mut **cmp),
                Descent::LastLe(cmp) => view.find_child_le(&mut **cmp),
                Descent::Leftmost => Ok(0),
                Descent::Rightmost => Ok(n - 1),
            }
            .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")));
            (i, view.child(i))
        })?;
        path.push(PathStep { blk, child: i });
        blk = child;
    }
    Ok(blk)
}

/// Runs `f` on inner page `blk` of `stage`: the backend's copy of it when
/// it has one (`inner_cache.rs`), else the page under a share lock, checked
/// and then copied for the next descent.
unsafe fn with_inner<R>(rel: pg_sys::Relation, stage: &Stage, blk: u32, f: impl FnOnce(&InnerView<'_>) -> R) -> Result<R, Stale> {
    let mut f = Some(f);
    if let Some(r) = super::inner_cache::with_cached(rel, stage, blk, |body| (f.take().expect("called once"))(&parse_inner(rel, blk, body))) {
        return Ok(r);
    }
    let b = Buf::read(rel, blk, Lock::Share);
    let p = b.page();
    check_static(rel, blk, p, stage.generation, &[PageKind::StaticInner])?;
    let body = page::body(p);
    let view = parse_inner(rel, blk, body);
    super::inner_cache::store(rel, stage, blk, body);
    Ok((f.take().expect("not consumed by a cache miss"))(&view))
}

fn parse_inner(rel: pg_sys::Relation, blk: u32, body: &[u8]) -> InnerView<'_> {
    InnerView::parse(body).unwrap_or_else(|e| unsafe { page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")) })
}

/// The leaf after (`forward`) or before the one `path` leads to, with
/// `path` updated to lead to it; None at the end of the stage.
pub unsafe fn sibling_leaf(rel: pg_sys::Relation, stage: &Stage, path: &mut Vec<PathStep>, forward: bool) -> Result<Option<u32>, Stale> {
    while let Some(step) = path.last().copied() {
        let next = if forward { step.child + 1 } else { step.child.wrapping_sub(1) };
        let child = with_inner(rel, stage, step.blk, |view| (next < view.nchildren()).then(|| view.child(next)))?;
        if let Some(child) = child {
            path.last_mut().unwrap().child = next;
            let mut how = if forward { Descent::Leftmost } else { Descent::Rightmost };
            return descend_from(rel, stage, child, &mut how, path).map(Some);
        }
        path.pop();
    }
    Ok(None)
}

/// A leaf of a stage and its separator: the first key it held when the
/// inner level above it was written (no entry of the leaf is smaller).
#[derive(Clone, Debug)]
pub struct LeafRef {
    pub sep: Vec<u8>,
    pub blk: u32,
}

/// The pages of a stage: its inner pages, and its leaves in key order.
pub struct StageMap {
    pub inner: Vec<u32>,
    /// Body bytes of the inner pages.
    pub inner_bytes: u64,
    pub leaves: Vec<LeafRef>,
}

impl StageMap {
    pub fn blocks(&self) -> Vec<u32> {
        self.inner.iter().copied().chain(self.leaves.iter().map(|l| l.blk)).collect()
    }

    /// The blocks of leaves `range`.
    pub fn blocks_of(&self, range: std::ops::Range<usize>) -> Vec<u32> {
        self.leaves[range].iter().map(|l| l.blk).collect()
    }
}

/// Body bytes in use on `blocks`, read with `ahead` (whose next blocks
/// they are) requesting the ones after.
pub unsafe fn body_bytes(rel: pg_sys::Relation, blocks: &[u32], ahead: &mut ReadAhead<'_>) -> u64 {
    blocks
        .iter()
        .map(|&blk| {
            ahead.next();
            let b = Buf::read(rel, blk, Lock::Share);
            page::opaque(b.page()).body_len as u64
        })
        .sum()
}

/// The last key of leaf `blk` of `stage`; None when the leaf is empty.
pub unsafe fn leaf_last_key(rel: pg_sys::Relation, blk: u32, stage: &Stage) -> Option<Vec<u8>> {
    let leaf = load_leaf(rel, blk, stage);
    leaf.with_view(|v| v.last_key().unwrap_or_else(|e| leaf.bad(e)))
}

/// Reads the inner levels of a stage, level by level from the root (they
/// are about one page in several hundred).
pub unsafe fn stage_map(rel: pg_sys::Relation, stage: &Stage) -> StageMap {
    let mut map = StageMap { inner: Vec::new(), inner_bytes: 0, leaves: Vec::new() };
    if stage.root == NO_BLOCK {
        return map;
    }
    let bad = |blk: u32, e: ss::FormatError| -> ! { page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")) };
    let mut level: Vec<u32> = vec![stage.root];
    for _ in 0..64 {
        let mut below: Vec<LeafRef> = Vec::new();
        let mut above_leaves = false;
        for &blk in &level {
            let b = Buf::read(rel, blk, Lock::Share);
            let p = b.page();
            check_static(rel, blk, p, stage.generation, &[PageKind::StaticLeaf, PageKind::StaticInner]).unwrap_or_else(|s| s.raise());
            if page::opaque(p).kind == PageKind::StaticLeaf as u8 {
                // Only a root is reached here as a leaf.
                let body = leaf_body(rel, blk, p);
                let first = LeafView::parse(&body).and_then(|v| v.first_key().map(|k| k.map(|k| k.to_vec())));
                map.leaves.push(LeafRef { sep: first.unwrap_or_else(|e| bad(blk, e)).unwrap_or_default(), blk });
                return map;
            }
            map.inner.push(blk);
            map.inner_bytes += page::opaque(p).body_len as u64;
            above_leaves = page::opaque(p).level == 1;
            let view = InnerView::parse(page::body(p)).unwrap_or_else(|e| bad(blk, e));
            let seps = view.seps().unwrap_or_else(|e| bad(blk, e));
            below.extend(seps.into_iter().zip(view.children()).map(|(sep, blk)| LeafRef { sep, blk }));
        }
        if above_leaves {
            map.leaves = below;
            return map;
        }
        level = below.into_iter().map(|l| l.blk).collect();
    }
    page::corrupted(&page::rel_name(rel), stage.root, "static stage deeper than 64 levels")
}

/// Every block of a static stage (inner levels and leaves).
pub unsafe fn stage_blocks(rel: pg_sys::Relation, stage: &Stage) -> Vec<u32> {
    stage_map(rel, stage).blocks()
}

/// Streams the entries of some leaves in order.
pub struct StageIter {
    rel: pg_sys::Relation,
    stage: Stage,
    leaves: std::vec::IntoIter<u32>,
    cur: std::vec::IntoIter<(Vec<u8>, Vec<Tid>)>,
}

impl StageIter {
    pub unsafe fn new(rel: pg_sys::Relation, stage: &Stage, leaves: Vec<u32>) -> StageIter {
        StageIter { rel, stage: *stage, leaves: leaves.into_iter(), cur: Vec::new().into_iter() }
    }
}

impl Iterator for StageIter {
    type Item = (Vec<u8>, Vec<Tid>);
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.cur.next() {
                return Some(e);
            }
            let blk = self.leaves.next()?;
            let leaf = unsafe { load_leaf(self.rel, blk, &self.stage) };
            self.cur = leaf.decode_all().into_iter();
        }
    }
}

/// Allocates and writes static pages of generation `gen`, each as a
/// full-page GenericXLog record. Pages carry no sibling links.
struct PageSink {
    rel: pg_sys::Relation,
    gen: u32,
    pending: RefCell<HashMap<u32, Buf>>,
    written: std::cell::Cell<u64>,
}

impl PageSink {
    fn new(rel: pg_sys::Relation, gen: u32) -> PageSink {
        PageSink { rel, gen, pending: RefCell::new(HashMap::new()), written: std::cell::Cell::new(0) }
    }

    fn alloc(&self) -> u32 {
        let b = unsafe { alloc_page(self.rel) };
        let blk = unsafe { b.blkno() };
        self.pending.borrow_mut().insert(blk, b);
        blk
    }

    fn write(&self, out: PageOut) {
        let b = self.pending.borrow_mut().remove(&out.block).expect("static stage wrote a block it did not allocate");
        unsafe {
            let mut w = WalRecord::start(self.rel);
            let p = w.register_new(&b);
            let kind = if out.level == 0 { PageKind::StaticLeaf } else { PageKind::StaticInner };
            page::init_page(p, kind, out.level as u8, self.gen);
            page::body_mut(p)[..out.body.len()].copy_from_slice(out.body);
            page::set_body_len(p, out.body.len());
            w.finish();
        }
        self.written.set(self.written.get() + 1);
    }
}

fn build_failed(e: ss::BuildError) -> ! {
    pgrx::error!("could not build hybrid_btree static stage: {e}")
}

/// Writes a new static stage of generation `gen` from sorted entries.
pub unsafe fn write_stage(
    rel: pg_sys::Relation,
    entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<Tid>)>,
    gen: u32,
    compress: bool,
    progress: &mut dyn FnMut(u64),
) -> ss::BuildResult {
    let sink = PageSink::new(rel, gen);
    let mode = if compress { ss::Compression::Lz4 } else { ss::Compression::None };
    let res = ss::build_static(entries, BODY_CAP, mode, || sink.alloc(), |out| {
        sink.write(out);
        progress(sink.written.get());
    });
    res.unwrap_or_else(|e| build_failed(e))
}

/// Writes leaves of generation `gen` for sorted entries (none when there
/// are none), the last one as `last` says once they are read: the new
/// leaves of one run of a merge step.
pub unsafe fn write_leaves(rel: pg_sys::Relation, entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<Tid>)>, gen: u32, compress: bool, last: &dyn Fn() -> ss::LastLeaf) -> ss::LeafLevel {
    let sink = PageSink::new(rel, gen);
    let mode = if compress { ss::Compression::Lz4 } else { ss::Compression::None };
    ss::build_leaves(entries, BODY_CAP, mode, false, last, &mut || sink.alloc(), &mut |out| sink.write(out)).unwrap_or_else(|e| build_failed(e))
}

/// Writes the inner levels of generation `gen` over `leaves` (at least one).
pub unsafe fn write_inner(rel: pg_sys::Relation, leaves: Vec<(Vec<u8>, u32)>, gen: u32) -> ss::InnerLevels {
    let sink = PageSink::new(rel, gen);
    ss::build_inner(leaves, BODY_CAP, &mut || sink.alloc(), &mut |out| sink.write(out)).unwrap_or_else(|e| build_failed(e))
}
