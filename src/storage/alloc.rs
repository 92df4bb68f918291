//! Page allocation with reuse through the free space map.
//!
//! Only pages explicitly marked `PageKind::Free` (or never initialised) are
//! handed out: the FSM is not crash safe, so it is a hint and the page itself
//! is the truth.

use pgrx::pg_sys;

use super::buffer::{Buf, Lock};
use super::page::{self, PageKind, PAGE_MAGIC};
use super::wal::{WalRecord, MAX_PAGES};

/// Returns an exclusively locked page that the caller must initialise (with
/// `WalRecord::register_new`).
pub unsafe fn alloc_page(rel: pg_sys::Relation) -> Buf {
    loop {
        let blk = pg_sys::GetFreeIndexPage(rel);
        if blk == pg_sys::InvalidBlockNumber {
            break;
        }
        // Conditional: a page somebody holds is not free.
        if let Some(b) = Buf::try_read_exclusive(rel, blk) {
            let p = b.page();
            let reusable = pg_sys::PageIsNew(p) || {
                let hdr = p as *const pg_sys::PageHeaderData;
                (*hdr).pd_special as usize == page::BLCKSZ - page::SPECIAL_SIZE
                    && page::opaque(p).magic == PAGE_MAGIC
                    && page::opaque(p).kind == PageKind::Free as u8
            };
            if reusable {
                return b;
            }
        }
    }
    Buf::extend(rel)
}

/// Marks pages free (WAL-logged, four per record) and records them in the FSM.
pub unsafe fn free_pages(rel: pg_sys::Relation, blocks: &[u32]) {
    for chunk in blocks.chunks(MAX_PAGES) {
        let bufs: Vec<Buf> = chunk.iter().map(|&b| Buf::read(rel, b, Lock::Cleanup)).collect();
        let mut w = WalRecord::start(rel);
        for b in &bufs {
            let p = w.register_new(b);
            page::init_page(p, PageKind::Free, 0, 0);
        }
        w.finish();
        drop(bufs);
        for &b in chunk {
            pg_sys::RecordFreeIndexPage(rel, b);
        }
    }
}
