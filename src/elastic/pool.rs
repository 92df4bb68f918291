//! The elastic tree's `PagePool` over PostgreSQL buffers: reads take a share
//! lock for as long as the tree holds the page; each step of at most four
//! page changes is one GenericXLog record; a freed leaf becomes an
//! `ElasticDeleted` page that keeps its body and links (README.md,
//! "Deleted leaves") until the recycle horizon passes.

use std::collections::HashMap;

use pg_hybrid_core::elastic::tree::{Change, PageMeta, PagePool, NO_BLOCK};
use pg_hybrid_core::elastic::{Error, Result};
use pgrx::pg_sys;

use crate::storage::alloc::alloc_page;
use crate::storage::buffer::{nblocks, Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP};
use crate::storage::wal::WalRecord;

/// A page the tree is reading: pinned and share-locked until dropped.
pub struct PageGuard {
    buf: Buf,
}

impl std::ops::Deref for PageGuard {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts((self.buf.page() as *const u8).add(page::PAGE_HEADER_SIZE), BODY_CAP) }
    }
}

pub struct BufPool {
    rel: pg_sys::Relation,
    writable: bool,
    /// Blocks handed out by `alloc`, exclusively locked until a step writes them.
    pending: HashMap<u32, Buf>,
    /// Tree pages in use (metapage, inner nodes, leaves).
    pub tree_pages: u64,
    /// Other pages of the index that count against the bound (hybrid
    /// metapage, delta log).
    pub other_pages: u64,
    /// Leaves this pool marked deleted, to be listed for recycling.
    pub deleted: Vec<u32>,
    /// CREATE INDEX: nobody else can see the index, so a freed leaf is
    /// reused at once instead of waiting for the recycle horizon.
    pub reuse_at_once: bool,
    reusable: Vec<u32>,
}

impl BufPool {
    pub unsafe fn reader(rel: pg_sys::Relation) -> BufPool {
        BufPool { rel, writable: false, pending: HashMap::new(), tree_pages: 0, other_pages: 0, deleted: Vec::new(), reuse_at_once: false, reusable: Vec::new() }
    }

    /// A pool for the single writer (the caller holds the maintenance lock).
    pub unsafe fn writer(rel: pg_sys::Relation, tree_pages: u64, other_pages: u64) -> BufPool {
        BufPool { rel, writable: true, pending: HashMap::new(), tree_pages, other_pages, deleted: Vec::new(), reuse_at_once: false, reusable: Vec::new() }
    }
}

/// Checks that `blk` is a tree page (live or deleted) and returns its kind.
pub unsafe fn check_tree_page(rel: pg_sys::Relation, blk: u32, p: pg_sys::Page) -> PageKind {
    page::check_page(rel, blk, p, &[PageKind::Elastic, PageKind::ElasticDeleted])
}

impl PagePool for BufPool {
    fn body_cap(&self) -> usize {
        BODY_CAP
    }

    fn alloc(&mut self) -> Result<u32> {
        if !self.writable {
            return Err(Error::BadInput("allocation through a read-only pool"));
        }
        let b = match self.reusable.pop() {
            Some(blk) => unsafe { Buf::read(self.rel, blk, Lock::Exclusive) },
            None => unsafe { alloc_page(self.rel) },
        };
        let blk = unsafe { b.blkno() };
        self.pending.insert(blk, b);
        Ok(blk)
    }

    type Page<'a> = PageGuard;

    fn read(&self, blk: u32) -> Result<(PageMeta, PageGuard)> {
        unsafe {
            // A link past the end fails in ReadBuffer with a clear ERROR; no
            // size check here (smgrnblocks is a system call per read).
            if blk == 0 || blk == NO_BLOCK || self.pending.contains_key(&blk) {
                return Err(Error::Corrupt("link to a block outside the tree"));
            }
            let buf = Buf::read(self.rel, blk, Lock::Share);
            check_tree_page(self.rel, blk, buf.page());
            let op = page::opaque(buf.page());
            let m = PageMeta { level: op.level, left: op.left, right: op.right };
            Ok((m, PageGuard { buf }))
        }
    }

    fn apply(&mut self, step: Vec<Change>) -> Result<()> {
        if !self.writable {
            return Err(Error::BadInput("write through a read-only pool"));
        }
        if step.len() > crate::storage::wal::MAX_PAGES {
            return Err(Error::BadInput("step changes more than four pages"));
        }
        unsafe {
            // Lock in block order; new pages are locked already.
            let mut order: Vec<usize> = (0..step.len()).collect();
            order.sort_by_key(|&i| change_blk(&step[i]));
            let mut bufs: Vec<(usize, Buf, bool)> = Vec::with_capacity(step.len());
            for &i in &order {
                let blk = change_blk(&step[i]);
                match self.pending.remove(&blk) {
                    Some(b) => bufs.push((i, b, true)),
                    None => {
                        if blk == 0 || blk >= nblocks(self.rel) {
                            return Err(Error::BadInput("write to a block outside the relation"));
                        }
                        let b = Buf::read(self.rel, blk, Lock::Exclusive);
                        check_tree_page(self.rel, blk, b.page());
                        bufs.push((i, b, false));
                    }
                }
            }
            let mut w = WalRecord::start(self.rel);
            let mut added = 0i64;
            for (i, b, new) in &bufs {
                match &step[*i] {
                    Change::Write { meta, body, .. } => {
                        if body.len() != BODY_CAP {
                            return Err(Error::BadInput("page body of the wrong size"));
                        }
                        let p = if *new { w.register_new(b) } else { w.register(b) };
                        page::init_page(p, PageKind::Elastic, meta.level, 0);
                        let op = page::opaque_mut(p);
                        op.left = meta.left;
                        op.right = meta.right;
                        page::body_mut(p).copy_from_slice(body);
                        page::set_body_len(p, BODY_CAP);
                        if *new {
                            added += 1;
                        }
                    }
                    Change::Free(blk) => {
                        if *new {
                            return Err(Error::BadInput("free of a page never written"));
                        }
                        let p = w.register(b);
                        if self.reuse_at_once {
                            page::init_page(p, PageKind::Free, 0, 0);
                            self.reusable.push(*blk);
                        } else {
                            let op = page::opaque_mut(p);
                            op.kind = PageKind::ElasticDeleted as u8;
                            op.first_pos = pg_sys::ReadNextFullTransactionId().value;
                            self.deleted.push(*blk);
                        }
                        added -= 1;
                    }
                }
            }
            w.finish();
            self.tree_pages = (self.tree_pages as i64 + added).max(0) as u64;
        }
        Ok(())
    }

    fn pages_in_use(&self) -> u64 {
        if self.writable {
            self.tree_pages + self.other_pages
        } else {
            // Readers only use it to bound sibling walks.
            unsafe { nblocks(self.rel) as u64 }
        }
    }
}

fn change_blk(c: &Change) -> u32 {
    match c {
        Change::Write { blk, .. } | Change::Free(blk) => *blk,
    }
}
