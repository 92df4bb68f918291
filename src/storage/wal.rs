//! GenericXLog in RAII form: every page change of pg_hybrid goes through it,
//! at most four pages per record, so the change is crash safe and replayed
//! on standbys without a custom resource manager.

use pgrx::pg_sys;

use super::buffer::Buf;

pub const MAX_PAGES: usize = 4;

/// RelationNeedsWAL(), a C macro.
pub unsafe fn relation_needs_wal(rel: pg_sys::Relation) -> bool {
    (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::os::raw::c_char
        && (pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32
            || ((*rel).rd_createSubid == 0
                && (*rel).rd_firstRelfilenodeSubid == 0))
}

/// An open generic WAL record. Register buffers, modify the returned page
/// images (never the buffer pages themselves), then `finish`. Dropped
/// without `finish`, the record is aborted and the buffers stay unchanged.
pub struct WalRecord {
    state: *mut pg_sys::GenericXLogState,
    npages: usize,
}

impl WalRecord {
    pub unsafe fn start(rel: pg_sys::Relation) -> WalRecord {
        WalRecord { state: pg_sys::GenericXLogStart(rel), npages: 0 }
    }

    /// Registers a locked buffer; returns the page image to modify.
    pub unsafe fn register(&mut self, buf: &Buf) -> pg_sys::Page {
        self.register_flags(buf, 0)
    }

    /// Registers a buffer whose whole content is replaced (a new page).
    pub unsafe fn register_new(&mut self, buf: &Buf) -> pg_sys::Page {
        self.register_flags(buf, pg_sys::GENERIC_XLOG_FULL_IMAGE as i32)
    }

    unsafe fn register_flags(&mut self, buf: &Buf, flags: i32) -> pg_sys::Page {
        assert!(self.npages < MAX_PAGES, "GenericXLog record holds at most 4 pages");
        self.npages += 1;
        pg_sys::GenericXLogRegisterBuffer(self.state, buf.buffer(), flags)
    }

    pub unsafe fn finish(mut self) {
        let state = std::mem::replace(&mut self.state, std::ptr::null_mut());
        pg_sys::GenericXLogFinish(state);
    }
}

impl Drop for WalRecord {
    fn drop(&mut self) {
        if !self.state.is_null() && !std::thread::panicking() {
            unsafe { pg_sys::GenericXLogAbort(self.state) };
        }
    }
}

/// PageSetLSN (a macro in PostgreSQL's headers).
pub unsafe fn set_page_lsn(page: pg_sys::Page, lsn: pg_sys::XLogRecPtr) {
    let hdr = page as *mut pg_sys::PageHeaderData;
    (*hdr).pd_lsn.xlogid = (lsn >> 32) as u32;
    (*hdr).pd_lsn.xrecoff = lsn as u32;
}

/// PageGetLSN (a macro in PostgreSQL's headers).
pub unsafe fn page_lsn(page: pg_sys::Page) -> pg_sys::XLogRecPtr {
    let hdr = page as *const pg_sys::PageHeaderData;
    ((*hdr).pd_lsn.xlogid as u64) << 32 | (*hdr).pd_lsn.xrecoff as u64
}

/// XLogRecGetInfo without the bits PostgreSQL reserves: a resource
/// manager's own record type.
pub unsafe fn record_info(record: *mut pg_sys::XLogReaderState) -> u8 {
    (*(*record).record).header.xl_info & !(pg_sys::XLR_INFO_MASK as u8)
}

/// Whether the WAL already holds, since the current redo point, a change
/// (and so a full-page image or a later change) of each of `blocks`, with
/// full-page writes on: then crash recovery and a standby reach each of
/// them exactly as it is now before they replay the next record, which
/// may therefore refer to their contents (hasis's COMPACT records by
/// reference, and its UPDATE records' diffs against an old version in
/// another block).
/// A block last changed before the redo point would be logged as a
/// full-page image of its *new* contents, and the old ones would be gone.
pub unsafe fn logged_since_redo_point<'a>(blocks: impl IntoIterator<Item = &'a Buf>) -> bool {
    let mut redo: pg_sys::XLogRecPtr = 0;
    let mut page_writes = false;
    pg_sys::GetFullPageWriteInfo(&mut redo, &mut page_writes);
    page_writes && pg_sys::fullPageWrites && blocks.into_iter().all(|b| page_lsn(b.page()) > redo)
}
