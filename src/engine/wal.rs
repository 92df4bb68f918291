//! pg_hybrid's WAL resource manager, for the one change too frequent for
//! GenericXLog: appending a record to the delta log (every insert).
//! GenericXLog diffs the whole used page byte by byte on each change; this
//! record carries just the appended bytes and redo repeats the append.
//! Everything else (merges, VACUUM, new pages) still uses GenericXLog;
//! two more records here carry no page, only a standby conflict (pages
//! about to be recycled, entries a merge drops on killed-tuple hints).

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::storage::page;

/// Custom resource manager id (PostgreSQL reserves 128..255 for extensions;
/// see https://wiki.postgresql.org/wiki/CustomWALResourceManagers).
pub const RM_PG_HYBRID_ID: u8 = 196;
const XLOG_DELTA_APPEND: u8 = 0x10;
/// Pages of an elastic_btree index are about to be reused: standby queries
/// whose snapshots are older than the pages' horizon may still be on them
/// and are cancelled, as nbtree's REUSE_PAGE record does.
const XLOG_RECYCLE_CONFLICT: u8 = 0x20;
/// A merge is about to drop entries whose heap tuples scans found dead to
/// all (killed-tuple hints): standby queries whose snapshots may still see
/// tuples removed by xids up to the record's horizon are cancelled first,
/// as nbtree's DELETE record does for LP_DEAD items.
const XLOG_SNAPSHOT_CONFLICT: u8 = 0x30;

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
        crate::storage::wal::set_page_lsn(p, lsn);
    }
    pg_sys::CritSectionCount -= 1;
}

/// Logs that pages deleted before `safexid` are being recycled.
pub unsafe fn log_recycle_conflict(rel: pg_sys::Relation, safexid: u64) {
    log_conflict(rel, safexid, XLOG_RECYCLE_CONFLICT);
}

/// Logs that entries of `rel` whose tuples were removed by xids up to
/// `horizon` are about to be dropped.
pub unsafe fn log_snapshot_conflict(rel: pg_sys::Relation, horizon: pg_sys::TransactionId) {
    if horizon != pg_sys::InvalidTransactionId {
        log_conflict(rel, horizon.into_inner() as u64, XLOG_SNAPSHOT_CONFLICT);
    }
}

/// Both conflict records: `spcNode u32 | dbNode u32 | relNode u32 |
/// horizon u64` (a full xid for recycling, a 32-bit one for dropped
/// entries), no page. Only standbys need them.
const CONFLICT_LEN: usize = 20;

unsafe fn log_conflict(rel: pg_sys::Relation, horizon: u64, info: u8) {
    if !crate::storage::wal::relation_needs_wal(rel) || pg_sys::wal_level < pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32 {
        return;
    }
    let mut data = [0u8; CONFLICT_LEN];
    let node = (*rel).rd_node;
    data[0..4].copy_from_slice(&node.spcNode.to_u32().to_le_bytes());
    data[4..8].copy_from_slice(&node.dbNode.to_u32().to_le_bytes());
    data[8..12].copy_from_slice(&node.relNode.to_u32().to_le_bytes());
    data[12..20].copy_from_slice(&horizon.to_le_bytes());
    pg_sys::XLogBeginInsert();
    pg_sys::XLogRegisterData(data.as_mut_ptr() as *mut std::os::raw::c_char, data.len() as i32);
    pg_sys::XLogInsert(RM_PG_HYBRID_ID, info);
}

/// The file node and horizon of a conflict record; None when replay runs
/// without hot standby (nobody to cancel).
unsafe fn read_conflict(record: *mut pg_sys::XLogReaderState) -> Option<(pg_sys::RelFileNode, u64)> {
    let r = &*(*record).record;
    if (r.main_data_len as usize) < CONFLICT_LEN {
        pgrx::error!("pg_hybrid redo: conflict record too short");
    }
    if pg_sys::standbyState < pg_sys::HotStandbyState::STANDBY_SNAPSHOT_PENDING {
        return None;
    }
    let d = std::slice::from_raw_parts(r.main_data as *const u8, CONFLICT_LEN);
    let u = |i: usize| pg_sys::Oid::from(u32::from_le_bytes(d[i..i + 4].try_into().unwrap()));
    let node = pg_sys::RelFileNode { spcNode: u(0), dbNode: u(4), relNode: u(8) };
    Some((node, u64::from_le_bytes(d[12..20].try_into().unwrap())))
}

unsafe fn redo_snapshot_conflict(record: *mut pg_sys::XLogReaderState) {
    if let Some((node, horizon)) = read_conflict(record) {
        pg_sys::ResolveRecoveryConflictWithSnapshot(pg_sys::TransactionId::from(horizon as u32), node);
    }
}

unsafe fn redo_recycle_conflict(record: *mut pg_sys::XLogReaderState) {
    if let Some((node, safexid)) = read_conflict(record) {
        pg_sys::ResolveRecoveryConflictWithSnapshotFullXid(pg_sys::FullTransactionId { value: safexid }, node);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    if crate::storage::wal::record_info(record) == XLOG_RECYCLE_CONFLICT {
        redo_recycle_conflict(record);
        return;
    }
    if crate::storage::wal::record_info(record) == XLOG_SNAPSHOT_CONFLICT {
        redo_snapshot_conflict(record);
        return;
    }
    if crate::storage::wal::record_info(record) != XLOG_DELTA_APPEND {
        pgrx::error!("pg_hybrid redo: unknown WAL record type {:#x}", crate::storage::wal::record_info(record));
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
        crate::storage::wal::set_page_lsn(p, (*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
    }
    if buf != 0 {
        pg_sys::UnlockReleaseBuffer(buf);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(out: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    if crate::storage::wal::record_info(record) == XLOG_DELTA_APPEND {
        let mut len: usize = 0;
        pg_sys::XLogRecGetBlockData(record, 0, &mut len);
        let s = std::ffi::CString::new(format!("delta append of {len} bytes")).unwrap();
        pg_sys::appendStringInfoString(out, s.as_ptr());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::os::raw::c_char {
    let i = info & !(pg_sys::XLR_INFO_MASK as u8);
    if i == XLOG_DELTA_APPEND {
        c"DELTA_APPEND".as_ptr()
    } else if i == XLOG_RECYCLE_CONFLICT {
        c"RECYCLE_CONFLICT".as_ptr()
    } else if i == XLOG_SNAPSHOT_CONFLICT {
        c"SNAPSHOT_CONFLICT".as_ptr()
    } else {
        std::ptr::null()
    }
}
