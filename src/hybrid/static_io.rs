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
use crate::storage::buffer::{Buf, Lock, Pin};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

/// A static leaf copied out of its buffer, as nbtree copies a page's items,
/// so no pin or lock is held between calls of a scan. Entries are decoded
/// lazily, a window at a time: a point probe touches one restart group, not
/// the whole leaf.
pub struct LeafData {
    pub blk: u32,
    pub left: u32,
    pub right: u32,
    rel: pg_sys::Relation,
    /// Pinned for as long as the scan is on this leaf; VACUUM takes a
    /// cleanup lock, so the page cannot change while we hold the pin.
    pin: Pin,
    /// Where the body of an LZ4 leaf is (plain leaves are read in place).
    lz4: Option<Lz4Body>,
    nkeys: usize,
    win_start: usize,
    win: Vec<(Vec<u8>, Vec<Tid>)>,
    /// Grows with each refill: a probe decodes two entries, a range scan
    /// soon decodes 64 at a time.
    win_size: usize,
}

const MAX_WINDOW: usize = 64;

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
                // Evicted since load: the pin keeps the page as it was.
                let l = self.pin.share();
                decompress(self.rel, self.blk, l.page(), lz.key.as_ref())
            });
            return f(self.parse(body));
        }
        unsafe {
            let l = self.pin.share();
            let body = page::body(l.page());
            let r = f(self.parse(body));
            drop(l);
            r
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

    /// Entry `i` (< len).
    pub fn get(&mut self, i: usize) -> &(Vec<u8>, Vec<Tid>) {
        if i < self.win_start || i >= self.win_start + self.win.len() {
            // Moving backwards, decode the window that ends at i.
            let size = self.win_size;
            let start = if i < self.win_start { (i + 1).saturating_sub(size) } else { i };
            self.fill(|view| view.cursor(start));
        }
        &self.win[i - self.win_start]
    }

    /// Index of the first entry >= bound (`cmp(stored)` = stored.cmp(bound)),
    /// with the window decoded from there: a probe walks the leaf once.
    pub fn seek(&mut self, cmp: impl FnMut(&[u8]) -> Ordering) -> usize {
        self.fill(|view| view.seek_cursor(cmp))
    }

    /// Decodes the window from the entry `position` puts a cursor on, and
    /// returns that entry's index (`len` at the end).
    fn fill(&mut self, position: impl for<'v> FnOnce(LeafView<'v>) -> Result<ss::LeafCursor<'v>, ss::FormatError>) -> usize {
        let size = self.win_size;
        self.win_size = (size * 2).min(MAX_WINDOW);
        let mut win = std::mem::take(&mut self.win);
        win.clear();
        let start = self.with_view(|view| {
            let mut c = position(view).unwrap_or_else(|e| self.bad(e));
            let start = c.index();
            while c.valid() && win.len() < size {
                let tids = c.tids().unwrap_or_else(|e| self.bad(e)).to_vec();
                win.push((c.key().to_vec(), tids));
                if !c.advance().unwrap_or_else(|e| self.bad(e)) {
                    break;
                }
            }
            start
        });
        self.win = win;
        self.win_start = start;
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

unsafe fn stale_page(rel: pg_sys::Relation, blk: u32, what: &str) -> ! {
    if pg_sys::RecoveryInProgress() {
        crate::raise(PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE, "canceling statement due to conflict with recovery", "A merge replayed from the primary recycled index pages this query was reading; retry the query.");
    }
    page::corrupted(&page::rel_name(rel), blk, what)
}

/// Checks a static page belongs to the stage `gen`.
unsafe fn check_static(rel: pg_sys::Relation, blk: u32, p: pg_sys::Page, gen: u32, kinds: &[PageKind]) {
    let hdr = p as *const pg_sys::PageHeaderData;
    let ours = !pg_sys::PageIsNew(p)
        && (*hdr).pd_special as usize == page::BLCKSZ - page::SPECIAL_SIZE
        && page::opaque(p).magic == page::PAGE_MAGIC;
    if ours && page::opaque(p).generation != gen {
        stale_page(rel, blk, "static page of another generation");
    }
    if ours && !kinds.contains(&PageKind::from_u8(page::opaque(p).kind).unwrap_or(PageKind::Free)) {
        stale_page(rel, blk, "page is no longer part of the static stage");
    }
    page::check_page(rel, blk, p, kinds);
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
    let b = Buf::read(rel, blk, Lock::Share);
    let p = b.page();
    check_static(rel, blk, p, stage.generation, &[PageKind::StaticLeaf]);
    let op = *page::opaque(p);
    let raw = page::body(p);
    let bad = |e: ss::FormatError| -> ! { page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")) };
    let (lz4, nkeys) = if raw.first() == Some(&ss::FORMAT_LEAF_LZ4) {
        let key = crate::shmem::leaf_cache::key_of(rel, blk, p);
        let cached = key.as_ref().and_then(|k| {
            crate::shmem::leaf_cache::with_cached(k, |body| LeafView::parse(body).map(|v| v.nkeys()))
        });
        match cached {
            Some(n) => (Some(Lz4Body { key, local: Default::default() }), n.unwrap_or_else(|e| bad(e))),
            None => {
                let local = decompress(rel, blk, p, key.as_ref());
                let n = LeafView::parse(&local).unwrap_or_else(|e| bad(e)).nkeys();
                (Some(Lz4Body { key, local: local.into() }), n)
            }
        }
    } else {
        (None, LeafView::parse(raw).unwrap_or_else(|e| bad(e)).nkeys())
    };
    LeafData {
        blk,
        left: op.left,
        right: op.right,
        rel,
        pin: b.into_pin(),
        lz4,
        nkeys,
        win_start: 0,
        win: Vec::new(),
        win_size: 2,
    }
}

/// Descends to the leaf where a search for `cmp` (stored.cmp(bound)) starts:
/// `last_le` false finds the leaf holding the first entry >= bound, true the
/// leaf holding the last entry <= bound.
pub unsafe fn descend(
    rel: pg_sys::Relation,
    stage: &Stage,
    cmp: &mut dyn FnMut(&[u8]) -> Ordering,
    last_le: bool,
) -> u32 {
    let mut blk = stage.root;
    for _ in 0..64 {
        let b = Buf::read(rel, blk, Lock::Share);
        let p = b.page();
        check_static(rel, blk, p, stage.generation, &[PageKind::StaticLeaf, PageKind::StaticInner]);
        if page::opaque(p).kind == PageKind::StaticLeaf as u8 {
            return blk;
        }
        let view = InnerView::parse(page::body(p))
            .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")));
        if view.nchildren() == 0 {
            page::corrupted(&page::rel_name(rel), blk, "inner page without children");
        }
        let i = if last_le { view.find_child_le(&mut *cmp) } else { view.find_child(&mut *cmp) }
            .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")));
        blk = view.child(i);
    }
    page::corrupted(&page::rel_name(rel), blk, "static stage deeper than 64 levels")
}

/// Every block of a static stage (inner levels and leaves).
pub unsafe fn stage_blocks(rel: pg_sys::Relation, stage: &Stage) -> Vec<u32> {
    let mut out = Vec::new();
    if stage.root == NO_BLOCK {
        return out;
    }
    let mut level_start = stage.root;
    loop {
        let mut blk = level_start;
        let mut next_level = NO_BLOCK;
        let mut is_leaf = false;
        while blk != NO_BLOCK {
            let b = Buf::read(rel, blk, Lock::Share);
            let p = b.page();
            check_static(rel, blk, p, stage.generation, &[PageKind::StaticLeaf, PageKind::StaticInner]);
            out.push(blk);
            let op = *page::opaque(p);
            if op.kind == PageKind::StaticLeaf as u8 {
                is_leaf = true;
            } else if next_level == NO_BLOCK {
                let view = InnerView::parse(page::body(p))
                    .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, &format!("{e:?}")));
                next_level = view.child(0);
            }
            blk = op.right;
        }
        if is_leaf || next_level == NO_BLOCK {
            return out;
        }
        level_start = next_level;
    }
}

/// Streams the entries of a static stage in order, leaf by leaf.
pub struct StageIter {
    rel: pg_sys::Relation,
    stage: Stage,
    next_blk: u32,
    cur: std::vec::IntoIter<(Vec<u8>, Vec<Tid>)>,
    pub leaves: u64,
}

impl StageIter {
    pub unsafe fn new(rel: pg_sys::Relation, stage: &Stage) -> StageIter {
        StageIter { rel, stage: *stage, next_blk: stage.first_leaf, cur: Vec::new().into_iter(), leaves: 0 }
    }
}

impl Iterator for StageIter {
    type Item = (Vec<u8>, Vec<Tid>);
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.cur.next() {
                return Some(e);
            }
            if self.next_blk == NO_BLOCK {
                return None;
            }
            let leaf = unsafe { load_leaf(self.rel, self.next_blk, &self.stage) };
            self.leaves += 1;
            self.next_blk = leaf.right;
            self.cur = leaf.decode_all().into_iter();
        }
    }
}

/// Writes a new static stage of generation `gen` from sorted entries.
pub unsafe fn write_stage(
    rel: pg_sys::Relation,
    entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<Tid>)>,
    gen: u32,
    compress: bool,
    progress: &mut dyn FnMut(u64),
) -> ss::BuildResult {
    let pending: RefCell<HashMap<u32, Buf>> = RefCell::new(HashMap::new());
    let mut written = 0u64;
    let alloc = || {
        let b = alloc_page(rel);
        let blk = b.blkno();
        pending.borrow_mut().insert(blk, b);
        blk
    };
    let write = |out: PageOut| {
        let b = pending.borrow_mut().remove(&out.block).expect("static stage wrote a block it did not allocate");
        let mut w = WalRecord::start(rel);
        let p = w.register_new(&b);
        let kind = if out.level == 0 { PageKind::StaticLeaf } else { PageKind::StaticInner };
        page::init_page(p, kind, out.level as u8, gen);
        let op = page::opaque_mut(p);
        op.left = out.left.unwrap_or(NO_BLOCK);
        op.right = out.right.unwrap_or(NO_BLOCK);
        page::body_mut(p)[..out.body.len()].copy_from_slice(out.body);
        page::set_body_len(p, out.body.len());
        w.finish();
        written += 1;
        progress(written);
    };
    let mode = if compress { ss::Compression::Lz4 } else { ss::Compression::None };
    let res = ss::build_static(entries, BODY_CAP, mode, alloc, write);
    res.unwrap_or_else(|e| pgrx::error!("could not build hybrid_btree static stage: {e:?}"))
}
