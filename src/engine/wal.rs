//! pg_hybrid's WAL resource manager, for changes too frequent for
//! GenericXLog, which diffs the whole used page byte by byte on each
//! change: appending a record to the delta log (every insert), whose
//! record carries just the appended bytes and redo repeats the append; and
//! body steps (a few pages whose new bodies are images without their zero
//! hole, or operations an access method registered, such as griffin's
//! "add these entries to a bucket page", replayed by the same function).
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

/// A step of whole-body changes to up to `MAX_STEP_BLOCKS` pages, applied
/// atomically (`log_body_step`): each page's new body is either an image
/// (its zero hole left out) or an operation an access method registered
/// (`register_body_op`) applied to its current body with logged
/// arguments, run alike on the primary and in redo.
const XLOG_BODY_STEP: u8 = 0x40;

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

/// Pages of one body step (`log_body_step`), as for GenericXLog.
pub const MAX_STEP_BLOCKS: usize = 4;

/// A page body operation, applied to the page in place: `check` says why
/// `arg` does not apply to `body`, if it does not; `apply` changes `body`
/// and cannot fail where `check` passed on the same body (it runs in the
/// critical section, after every page of the step passed its check).
#[derive(Clone, Copy)]
pub struct BodyOp {
    pub check: fn(body: &[u8], arg: &[u8]) -> Result<(), String>,
    pub apply: fn(body: &mut [u8], arg: &[u8]) -> Result<(), String>,
}

const MAX_BODY_OPS: usize = 8;
static mut BODY_OPS: [Option<BodyOp>; MAX_BODY_OPS] = [None; MAX_BODY_OPS];

/// Registers body operation `id` (from `_PG_init`, so redo in the startup
/// process finds it too). Ids are the on-disk names of operations: an
/// access method keeps its id forever.
pub unsafe fn register_body_op(id: u8, op: BodyOp) {
    let ops = &mut *(&raw mut BODY_OPS);
    let slot = ops.get_mut(id as usize).unwrap_or_else(|| panic!("body operation id {id} out of range"));
    assert!(slot.is_none(), "body operation id {id} registered twice");
    *slot = Some(op);
}

fn body_op(id: u8) -> Option<BodyOp> {
    unsafe { (*(&raw const BODY_OPS)).get(id as usize).copied().flatten() }
}

/// A change of one page of a body step.
pub enum BodyChange<'a> {
    /// The new body, `BODY_CAP` bytes.
    Image(&'a [u8]),
    /// Registered operation `op` on the current body with `arg`.
    Op { op: u8, arg: &'a [u8] },
}

const CHANGE_IMAGE: u8 = 1;
const CHANGE_OP: u8 = 2;
const CHANGE_RANGE: u8 = 3;

/// How a change is logged: `CHANGE_IMAGE | lead u16 | tail u16 | body[..lead]
/// | body[tail..]` (the bytes in between are zeros: the longest zero run,
/// a bucket page's free hole), or `CHANGE_OP | op u8 | arg`. An image of a
/// page whose whole body was logged before is logged as the one range of
/// bytes it changes, `CHANGE_RANGE | offset u16 | bytes` (`log_body_step`).
fn encode_change(c: &BodyChange<'_>, out: &mut Vec<u8>) {
    match c {
        BodyChange::Image(body) => {
            let (lead, tail) = longest_zero_run(body);
            out.push(CHANGE_IMAGE);
            out.extend_from_slice(&(lead as u16).to_le_bytes());
            out.extend_from_slice(&(tail as u16).to_le_bytes());
            out.extend_from_slice(&body[..lead]);
            out.extend_from_slice(&body[tail..]);
        }
        BodyChange::Op { op, arg } => {
            out.push(CHANGE_OP);
            out.push(*op);
            out.extend_from_slice(arg);
        }
    }
}

/// [start, end) of the longest run of zero 8-byte words (at offsets that
/// are multiples of 8; empty: (len, len)). Words, not bytes: every step
/// logs its hash header's image, and a byte loop over 8 KB per page is
/// what made GenericXLog slow here.
fn longest_zero_run(b: &[u8]) -> (usize, usize) {
    let mut best = (b.len(), b.len());
    let mut run_start = None;
    let words = b.len() / 8;
    for w in 0..=words {
        let zero = w < words && u64::from_ne_bytes(b[w * 8..w * 8 + 8].try_into().unwrap()) == 0;
        match (zero, run_start) {
            (true, None) => run_start = Some(w * 8),
            (false, Some(st)) => {
                if w * 8 - st > best.1 - best.0 {
                    best = (st, w * 8);
                }
                run_start = None;
            }
            _ => {}
        }
    }
    best
}

/// The bytes `[start, end)` outside which `old` and `new` (of one length)
/// are equal; `(len, len)` when they are equal throughout. Compared in
/// 64-byte blocks from both ends, so an unchanged body costs two fast
/// scans rather than a byte loop.
fn changed_range(old: &[u8], new: &[u8]) -> (usize, usize) {
    const BLOCK: usize = 64;
    let n = old.len().min(new.len());
    let mut start = 0;
    while start + BLOCK <= n && old[start..start + BLOCK] == new[start..start + BLOCK] {
        start += BLOCK;
    }
    while start < n && old[start] == new[start] {
        start += 1;
    }
    if start == n {
        return (n, n);
    }
    let mut end = n;
    while end >= start + BLOCK && old[end - BLOCK..end] == new[end - BLOCK..end] {
        end -= BLOCK;
    }
    while end > start && old[end - 1] == new[end - 1] {
        end -= 1;
    }
    (start, end)
}

/// Makes the logged change `data` to page `p` (redo): an image replaces
/// the body, an operation changes it in place (unchanged on error).
unsafe fn apply_change(data: &[u8], p: pg_sys::Page) -> Result<(), String> {
    match data.first() {
        Some(&CHANGE_IMAGE) if data.len() >= 5 => {
            let lead = u16::from_le_bytes([data[1], data[2]]) as usize;
            let tail = u16::from_le_bytes([data[3], data[4]]) as usize;
            let rest = &data[5..];
            if lead > tail || tail > page::BODY_CAP || rest.len() != lead + (page::BODY_CAP - tail) {
                return Err("malformed page image".into());
            }
            let body = page::body_mut(p);
            body[..lead].copy_from_slice(&rest[..lead]);
            body[lead..tail].fill(0);
            body[tail..].copy_from_slice(&rest[lead..]);
            Ok(())
        }
        Some(&CHANGE_RANGE) if data.len() >= 3 => {
            let off = u16::from_le_bytes([data[1], data[2]]) as usize;
            let bytes = &data[3..];
            if off + bytes.len() > page::BODY_CAP {
                return Err("page range past the body".into());
            }
            page::body_mut(p)[off..off + bytes.len()].copy_from_slice(bytes);
            Ok(())
        }
        Some(&CHANGE_OP) if data.len() >= 2 => match body_op(data[1]) {
            Some(op) => (op.apply)(page::body_mut(p), &data[2..]),
            None => Err(format!("body operation {} is not registered", data[1])),
        },
        _ => Err("malformed body change".into()),
    }
}

/// Applies `changes` to their pages, exclusively locked by the caller and
/// distinct, as one WAL record: every new body is computed first (an
/// operation that fails raises before anything changes), then all are
/// written in one critical section. Each page's body becomes fully used
/// (`BODY_CAP`). Redo locks every page of the record before changing any,
/// so a standby reader sees the step whole, as on the primary.
pub unsafe fn log_body_step(rel: pg_sys::Relation, changes: &[(&crate::storage::buffer::Buf, BodyChange<'_>)]) {
    assert!(changes.len() <= MAX_STEP_BLOCKS, "a body step changes at most {MAX_STEP_BLOCKS} pages");
    // Every change is checked before any page changes (an operation that
    // does not apply raises here); operations then change their pages in
    // place, so a page gaining a few entries is not copied whole.
    let mut logged = Vec::with_capacity(changes.len());
    // Per change, the body bytes an image changes (all of them where the
    // page's body was not fully logged before).
    let mut ranges = [(0, page::BODY_CAP); MAX_STEP_BLOCKS];
    for (i, (buf, c)) in changes.iter().enumerate() {
        let mut data = Vec::new();
        match c {
            BodyChange::Image(b) => {
                assert_eq!(b.len(), page::BODY_CAP, "a page image is BODY_CAP bytes");
                let p = buf.page();
                if page::opaque(p).body_len as usize == page::BODY_CAP {
                    // Every byte of this body is in the WAL already (an
                    // earlier step or build wrote it whole), so redo finds
                    // the same bytes and only the changed ones are logged:
                    // a sync's every step rewrites its hash header, whose
                    // image changed a few counters.
                    let (start, end) = changed_range(page::body(p), b);
                    ranges[i] = (start, end);
                    data.push(CHANGE_RANGE);
                    data.extend_from_slice(&(start as u16).to_le_bytes());
                    data.extend_from_slice(&b[start..end]);
                } else {
                    encode_change(c, &mut data);
                }
            }
            BodyChange::Op { op, arg } => {
                let f = body_op(*op).unwrap_or_else(|| panic!("body operation {op} is not registered"));
                (f.check)(page::body(buf.page()), arg).unwrap_or_else(|e| {
                    page::corrupted(&page::rel_name(rel), buf.blkno(), &format!("a page change does not apply: {e}"))
                });
                encode_change(c, &mut data);
            }
        }
        logged.push(data);
    }
    let wal = crate::storage::wal::relation_needs_wal(rel);
    pg_sys::CritSectionCount += 1;
    for (i, (buf, c)) in changes.iter().enumerate() {
        let p = buf.page();
        match c {
            BodyChange::Image(b) => {
                let (start, end) = ranges[i];
                page::body_mut(p)[start..end].copy_from_slice(&b[start..end]);
            }
            BodyChange::Op { op, arg } => {
                let f = body_op(*op).expect("checked above");
                (f.apply)(page::body_mut(p), arg).unwrap_or_else(|e| panic!("body operation {op} failed after its check passed: {e}"));
            }
        }
        page::set_body_len(p, page::BODY_CAP);
        pg_sys::MarkBufferDirty(buf.buffer());
    }
    if wal {
        pg_sys::XLogBeginInsert();
        for (i, ((buf, _), data)) in changes.iter().zip(&logged).enumerate() {
            pg_sys::XLogRegisterBuffer(i as u8, buf.buffer(), pg_sys::REGBUF_STANDARD as u8);
            pg_sys::XLogRegisterBufData(i as u8, data.as_ptr() as *mut std::os::raw::c_char, data.len() as i32);
        }
        let lsn = pg_sys::XLogInsert(RM_PG_HYBRID_ID, XLOG_BODY_STEP);
        for (buf, _) in changes {
            crate::storage::wal::set_page_lsn(buf.page(), lsn);
        }
    }
    pg_sys::CritSectionCount -= 1;
}

unsafe fn redo_body_step(record: *mut pg_sys::XLogReaderState) {
    let nblocks = ((*(*record).record).max_block_id + 1).max(0) as u8;
    let mut bufs: Vec<(u8, pg_sys::Buffer, bool)> = Vec::with_capacity(nblocks as usize);
    for id in 0..nblocks {
        let mut buf: pg_sys::Buffer = 0;
        let action = pg_sys::XLogReadBufferForRedo(record, id, &mut buf);
        bufs.push((id, buf, action == pg_sys::XLogRedoAction::BLK_NEEDS_REDO));
    }
    for &(id, buf, needs) in &bufs {
        if !needs {
            continue;
        }
        let p = pg_sys::BufferGetPage(buf);
        let mut len: usize = 0;
        let data = pg_sys::XLogRecGetBlockData(record, id, &mut len);
        let data = std::slice::from_raw_parts(data as *const u8, len);
        apply_change(data, p).unwrap_or_else(|e| pgrx::error!("pg_hybrid redo: body step: {e}"));
        page::set_body_len(p, page::BODY_CAP);
        crate::storage::wal::set_page_lsn(p, (*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
    }
    for &(_, buf, _) in &bufs {
        if buf != 0 {
            pg_sys::UnlockReleaseBuffer(buf);
        }
    }
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
    if crate::storage::wal::record_info(record) == XLOG_BODY_STEP {
        redo_body_step(record);
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
    } else if crate::storage::wal::record_info(record) == XLOG_BODY_STEP {
        let mut parts = Vec::new();
        for id in 0..((*(*record).record).max_block_id + 1).max(0) as u8 {
            let mut len: usize = 0;
            let data = pg_sys::XLogRecGetBlockData(record, id, &mut len);
            let kind = if data.is_null() || len == 0 { 0 } else { *(data as *const u8) };
            parts.push(match kind {
                CHANGE_IMAGE => format!("image of {len} bytes"),
                CHANGE_RANGE if len >= 3 => format!("{} changed bytes", len - 3),
                CHANGE_OP if len >= 2 => format!("operation {} of {} bytes", *(data as *const u8).add(1), len - 2),
                _ => "full-page image".to_string(),
            });
        }
        let s = std::ffi::CString::new(format!("body step: {}", parts.join(", "))).unwrap();
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
    } else if i == XLOG_BODY_STEP {
        c"BODY_STEP".as_ptr()
    } else {
        std::ptr::null()
    }
}
