//! pg_hybrid's WAL resource manager, for the one change too frequent for
//! GenericXLog: appending a record to the delta log (every insert).
//! GenericXLog diffs the whole used page byte by byte on each change; this
//! record carries just the appended bytes and redo repeats the append.
//! Everything else (merges, VACUUM, new pages) still uses GenericXLog.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::storage::page;

/// Custom resource manager id (PostgreSQL reserves 128..255 for extensions;
/// see https://wiki.postgresql.org/wiki/CustomWALResourceManagers).
pub const RM_PG_HYBRID_ID: u8 = 196;
const XLOG_DELTA_APPEND: u8 = 0x10;

static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"pg_hybrid".as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: None,
};

/// Called from _PG_init while shared_preload_libraries is processed.
pub unsafe fn register() {
    pg_sys::RegisterCustomRmgr(RM_PG_HYBRID_ID, &raw mut RMGR);
}

/// Applies an append of `rec` (one encoded delta record) to a delta page:
/// the same code runs on the primary and in redo, so both produce the same
/// bytes.
pub unsafe fn apply_append(p: pg_sys::Page, rec: &[u8]) {
    let len = page::opaque(p).body_len as usize;
    let body = page::body_mut(p);
    let next = u64::from_le_bytes(body[..8].try_into().unwrap());
    body[len..len + rec.len()].copy_from_slice(rec);
    body[..8].copy_from_slice(&(next + 1).to_le_bytes());
    page::set_body_len(p, len + rec.len());
}

unsafe fn set_lsn(p: pg_sys::Page, lsn: pg_sys::XLogRecPtr) {
    let hdr = p as *mut pg_sys::PageHeaderData;
    (*hdr).pd_lsn.xlogid = (lsn >> 32) as u32;
    (*hdr).pd_lsn.xrecoff = lsn as u32;
}

/// Appends `rec` to the exclusively locked delta page in `buf`, WAL-logged.
pub unsafe fn log_append(rel: pg_sys::Relation, buf: pg_sys::Buffer, rec: &[u8]) {
    let p = pg_sys::BufferGetPage(buf);
    assert!(page::opaque(p).body_len as usize + rec.len() <= page::BODY_CAP);
    pg_sys::CritSectionCount += 1;
    apply_append(p, rec);
    pg_sys::MarkBufferDirty(buf);
    if crate::storage::wal::relation_needs_wal(rel) {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterBuffer(0, buf, pg_sys::REGBUF_STANDARD as u8);
        pg_sys::XLogRegisterBufData(0, rec.as_ptr() as *mut std::os::raw::c_char, rec.len() as i32);
        let lsn = pg_sys::XLogInsert(RM_PG_HYBRID_ID, XLOG_DELTA_APPEND);
        set_lsn(p, lsn);
    }
    pg_sys::CritSectionCount -= 1;
}

unsafe fn info(record: *mut pg_sys::XLogReaderState) -> u8 {
    (*(*record).record).header.xl_info & !(pg_sys::XLR_INFO_MASK as u8)
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    if info(record) != XLOG_DELTA_APPEND {
        pgrx::error!("pg_hybrid redo: unknown WAL record type {:#x}", info(record));
    }
    let mut buf: pg_sys::Buffer = 0;
    if pg_sys::XLogReadBufferForRedo(record, 0, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(buf);
        let mut len: usize = 0;
        let data = pg_sys::XLogRecGetBlockData(record, 0, &mut len);
        let rec = std::slice::from_raw_parts(data as *const u8, len);
        if page::opaque(p).kind != page::PageKind::Delta as u8
            || page::opaque(p).body_len as usize + len > page::BODY_CAP
        {
            pgrx::error!("pg_hybrid redo: delta append does not fit its page");
        }
        apply_append(p, rec);
        set_lsn(p, (*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
    }
    if buf != 0 {
        pg_sys::UnlockReleaseBuffer(buf);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(out: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    if info(record) == XLOG_DELTA_APPEND {
        let mut len: usize = 0;
        pg_sys::XLogRecGetBlockData(record, 0, &mut len);
        let s = std::ffi::CString::new(format!("delta append of {len} bytes")).unwrap();
        pg_sys::appendStringInfoString(out, s.as_ptr());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::os::raw::c_char {
    if info & !(pg_sys::XLR_INFO_MASK as u8) == XLOG_DELTA_APPEND {
        c"DELTA_APPEND".as_ptr()
    } else {
        std::ptr::null()
    }
}
