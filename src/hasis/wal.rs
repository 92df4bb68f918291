//! hasis's WAL resource manager (custom rmgr id 197): one small record per
//! insert and per stamp instead of GenericXLog's page comparisons, which
//! cost a copy and a diff of every registered 8 kB page per row.
//!
//! | record | blocks | main data | redo |
//! |---|---|---|---|
//! | INSERT | 0 header, 1 delta block (`WILL_INIT` when its first item), 2 directory block if the slot is not in the header | the insert (`wire::encode_insert`: slot, delta block index, flags, offset, page version of a new block, the item with its MVCC fields implied, payload LZ4-packed when that saves bytes) | directory entry, header sizes, `delta::init_block` if new, `delta::append_at(offset)` |
//! | COMPACT | 0 header, then the directory blocks, then the column and delta blocks written (`WILL_INIT`) | newest removed xid, block counts, the core's compaction record | standby conflict, the core's `apply`, header and directory patches, blocks copied |
//! | STAMP | 0 the block with the version's MVCC fields (delta item or column row header) | `wire::Stamp` with the ctid: byte offset, xmax, infomask words, ctid | the stamp over the version's xmin |
//! | VISIBLE | 0 header; for a map set, 1 (and 2) the visibility-map pages | `VisibleOp` (u8), newest xmin of the rows made all-visible (u32), for the map ops the extent's TID block count (u16) | standby conflict (set), the header's `all_visible` and `map_visible` flags, the map bits (`vm.rs`; cleared whatever the LSNs) |
//! | LOGICAL | none | `logical.rs`: the row change for logical decoding (op, relfilenode, old and new heap tuples), only with wal_level = logical | nothing (the rmgr's decode callback reads it) |
//! | UPDATE (HOT) | INSERT's blocks, 3 the old version's block unless it is block 1 | `wire::Stamp` (ctid: the new version), then INSERT's data, whose payload may be a diff against the old version's (a delta item in block 1, or in block 3 when full-page writes are on and block 3 was logged since the redo point) | INSERT's redo (a diff rebuilt from the old payload, read before the append), then the stamp |
//!
//! These are format 2 (`core/src/hasis/wire.rs` says what it leaves out
//! and why); format 1 records (22 MVCC bytes per stamp, every item whole
//! with the extent's parameters) are no longer written but still replay.
//! The primary applies the same functions to the pages inside a critical
//! section as redo does, so primary and standby produce the same bytes,
//! command ids aside (redo writes
//! `FirstCommandId`, as heap's does).

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::compact::{CompactionRecord, DecodedRecord};
use pg_hybrid_core::hasis::delta;
use pg_hybrid_core::hasis::header::{self, DirEntry, ExtentHeader};
use pg_hybrid_core::hasis::layout::{Geometry, Params};
use pg_hybrid_core::hasis::row::{Mvcc, MVCC_LEN};
use pg_hybrid_core::hasis::wire::{self, Implied, InsertPlace, Stamp};
use pg_hybrid_core::tid::Tid;

use super::relation::{bytes, init_page, set_lower};

/// Custom resource manager id (128..255 are for extensions; pg_hybrid's
/// index engine has 196).
pub const RM_HASIS_ID: u8 = 197;
const XLOG_HASIS_INSERT: u8 = 0x10;
const XLOG_HASIS_STAMP: u8 = 0x20;
const XLOG_HASIS_COMPACT: u8 = 0x30;
const XLOG_HASIS_UPDATE: u8 = 0x40;
/// Format 2 of INSERT, STAMP and UPDATE (`wire`).
const XLOG_HASIS_INSERT2: u8 = 0x50;
const XLOG_HASIS_STAMP2: u8 = 0x60;
const XLOG_HASIS_UPDATE2: u8 = 0x70;
/// The extent header's all-visible and map-visible flags (and the map bits), set or cleared.
const XLOG_HASIS_VISIBLE: u8 = 0x80;
/// A row change for logical decoding (logical.rs); redo ignores it.
pub(super) const XLOG_HASIS_LOGICAL: u8 = 0x90;

static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"pg_hybrid_hasis".as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: Some(super::logical::decode),
};

/// Called from _PG_init while shared_preload_libraries is processed.
pub unsafe fn register() {
    pg_sys::RegisterCustomRmgr(RM_HASIS_ID, &raw mut RMGR);
}

const INSERT_V1_FIXED: usize = 8 + 2 + 1 + 1 + 2 + 4;
/// Format 1 INSERT flags byte: the delta block is new (its first item).
const INSERT_V1_FRESH: u8 = 0x01;
/// Format 1 INSERT flags byte: the item's payload is LZ4-compressed.
const INSERT_V1_PACKED: u8 = 0x02;

/// A format 1 INSERT record's insert: the extent's parameters, the place
/// and the item, unpacked (None: a short or malformed record). Only
/// replayed: the primary writes format 2.
fn decode_insert_v1(b: &[u8]) -> Option<(Params, InsertPlace, Vec<u8>)> {
    if b.len() < INSERT_V1_FIXED {
        return None;
    }
    let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let params = Params { column_blocks: u(0), delta_blocks: u(2), compact_trigger: u(4), max_slots: u(6) };
    if b[11] & !(INSERT_V1_FRESH | INSERT_V1_PACKED) != 0 {
        return None;
    }
    let place = InsertPlace {
        slot: u(8),
        delta_index: b[10],
        fresh: b[11] & INSERT_V1_FRESH != 0,
        offset: u(12),
        version: u32::from_le_bytes(b[14..18].try_into().unwrap()),
    };
    let item = delta::unpack_item(b[11] & INSERT_V1_PACKED != 0, &b[INSERT_V1_FIXED..]).ok()?;
    Some((params, place, item))
}

/// Writes an insert's directory entry into the page holding it (the
/// header block, or a directory block). Shared by the primary and redo.
pub unsafe fn apply_insert_entry(g: &Geometry, page: pg_sys::Page, r: &InsertPlace) -> Result<(), pg_hybrid_core::hasis::Error> {
    header::write_entry(bytes(page), g, r.slot, DirEntry::Delta { block: r.delta_index, offset: r.offset })
}

/// Applies an insert to the header's sizes.
pub unsafe fn apply_insert_sizes(g: &Geometry, hpage: pg_sys::Page, r: &InsertPlace) -> Result<(), pg_hybrid_core::hasis::Error> {
    let mut h = ExtentHeader::read(bytes(hpage), g)?;
    h.after_insert(r.slot);
    h.delta_used = h.delta_used.max(r.delta_index as u16 + 1);
    h.write(bytes(hpage), g);
    Ok(())
}

/// Applies an insert to its delta page.
pub unsafe fn apply_insert_delta(g: &Geometry, dpage: pg_sys::Page, r: &InsertPlace, item: &[u8]) -> Result<(), pg_hybrid_core::hasis::Error> {
    if r.fresh {
        init_page(dpage, 0);
        delta::init_block(bytes(dpage), g, r.delta_index as usize, r.version);
    }
    delta::append_at(bytes(dpage), r.offset, item)?;
    set_lower(dpage, r.offset as usize + item.len());
    Ok(())
}

/// The old version's half of a HOT update's UPDATE record: its new MVCC
/// fields at byte `at` of its block (`buffer`; None: the delta block the
/// new version went into).
pub struct StampPart<'a> {
    pub buffer: Option<pg_sys::Buffer>,
    pub at: u16,
    pub mvcc: Mvcc,
    /// The old version's payload, when the record may log the new one as
    /// a diff against it (`insert_and_stamp` says when).
    pub old_payload: Option<&'a [u8]>,
}

const STAMP_PART: usize = 2 + MVCC_LEN;

/// Logs an insert whose pages the caller already changed inside its
/// critical section, and with `stamp` the old version's stamp of a HOT
/// update (one UPDATE record instead of INSERT + STAMP: a record header and
/// a block reference less per update); sets their LSNs.
pub unsafe fn log_insert(rel: pg_sys::Relation, hbuf: pg_sys::Buffer, dbuf: pg_sys::Buffer, dirbuf: Option<pg_sys::Buffer>, r: &InsertPlace, own: Tid, item: &[u8], stamp: Option<&StampPart>) {
    if !crate::storage::wal::relation_needs_wal(rel) {
        return;
    }
    let implied = Implied { xid: pg_sys::GetCurrentTransactionIdIfAny().into_inner(), own };
    let mut data = Vec::with_capacity(32 + item.len());
    if let Some(st) = stamp {
        // An UPDATE's stamp takes the new version's TID as ctid in redo.
        if st.mvcc.ctid != own {
            pgrx::error!("hasis: a HOT update's stamp does not name the new version");
        }
        Stamp::of(st.at, &st.mvcc).encode(None, &mut data);
    }
    wire::encode_insert(r, item, &implied, stamp.and_then(|s| s.old_payload), &mut data);
    pg_sys::XLogBeginInsert();
    pg_sys::XLogRegisterData(data.as_mut_ptr() as *mut std::os::raw::c_char, data.len() as i32);
    pg_sys::XLogRegisterBuffer(0, hbuf, pg_sys::REGBUF_STANDARD as u8);
    let dflags = pg_sys::REGBUF_STANDARD | if r.fresh { pg_sys::REGBUF_WILL_INIT } else { 0 };
    pg_sys::XLogRegisterBuffer(1, dbuf, dflags as u8);
    if let Some(d) = dirbuf {
        pg_sys::XLogRegisterBuffer(2, d, pg_sys::REGBUF_STANDARD as u8);
    }
    let old_buf = stamp.and_then(|s| s.buffer);
    if let Some(b) = old_buf {
        pg_sys::XLogRegisterBuffer(3, b, pg_sys::REGBUF_STANDARD as u8);
    }
    let lsn = pg_sys::XLogInsert(RM_HASIS_ID, if stamp.is_some() { XLOG_HASIS_UPDATE2 } else { XLOG_HASIS_INSERT2 });
    for b in [Some(hbuf), Some(dbuf), dirbuf, old_buf].into_iter().flatten() {
        crate::storage::wal::set_page_lsn(pg_sys::BufferGetPage(b), lsn);
    }
}

/// The first block of the extent a COMPACT record rebuilds: its block
/// reference 0 is the extent's header block. The primary built the column
/// part with the same start (`compact::apply_at`), so redo builds the
/// same bytes.
unsafe fn extent_start_of(record: *mut pg_sys::XLogReaderState) -> u32 {
    let mut blk: pg_sys::BlockNumber = 0;
    pg_sys::XLogRecGetBlockTag(record, 0, std::ptr::null_mut(), std::ptr::null_mut(), &mut blk);
    blk
}

/// Writes the 22 MVCC bytes at `at` (a delta item's or a column row
/// header's MVCC fields). Shared by the primary and redo.
pub unsafe fn apply_stamp(page: pg_sys::Page, at: usize, m: &Mvcc) {
    m.encode(mvcc_bytes(page, at));
}

/// The 22 MVCC bytes at byte `at` of `page`, checked inside the body.
unsafe fn mvcc_bytes<'a>(page: pg_sys::Page, at: usize) -> &'a mut [u8] {
    if at < pg_hybrid_core::hasis::layout::BODY_START || at + MVCC_LEN > pg_hybrid_core::hasis::layout::BODY_END {
        pgrx::error!("hasis stamp at byte {at} is outside the page body");
    }
    &mut bytes(page)[at..at + MVCC_LEN]
}

/// Logs a stamp of the MVCC fields at byte `at` of the page in `buf`.
pub unsafe fn log_stamp(rel: pg_sys::Relation, buf: pg_sys::Buffer, at: u16, m: &Mvcc) {
    if !crate::storage::wal::relation_needs_wal(rel) {
        return;
    }
    let mut data = Vec::with_capacity(wire::STAMP_WITH_CTID_LEN);
    Stamp::of(at, m).encode(Some(m.ctid), &mut data);
    pg_sys::XLogBeginInsert();
    pg_sys::XLogRegisterData(data.as_mut_ptr() as *mut std::os::raw::c_char, data.len() as i32);
    pg_sys::XLogRegisterBuffer(0, buf, pg_sys::REGBUF_STANDARD as u8);
    let lsn = pg_sys::XLogInsert(RM_HASIS_ID, XLOG_HASIS_STAMP2);
    crate::storage::wal::set_page_lsn(pg_sys::BufferGetPage(buf), lsn);
}

/// A stamp as redo applies it: format 1's whole MVCC fields, or format
/// 2's over the version's own xmin.
enum StampRedo {
    Whole(Mvcc),
    Compact(Stamp, Tid),
}

impl StampRedo {
    fn at(&self, at1: usize) -> usize {
        match self {
            StampRedo::Whole(_) => at1,
            StampRedo::Compact(s, _) => s.at as usize,
        }
    }

    unsafe fn apply(&self, page: pg_sys::Page, at: usize) {
        match self {
            StampRedo::Whole(m) => apply_stamp(page, at, m),
            StampRedo::Compact(s, ctid) => {
                let b = mvcc_bytes(page, at);
                s.apply(&Mvcc::decode(b), *ctid).encode(b);
            }
        }
    }
}

/// What a VISIBLE record does (its main data's first byte). Records of
/// the first two kinds are 5 bytes (op, cutoff); the others add the
/// extent's TID block count (u16), the blocks whose map bits they touch
/// (`vm.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisibleOp {
    /// The all-visible flag cleared (an extent without map bits).
    ClearAll = 0,
    /// The all-visible flag set.
    SetAll = 1,
    /// The all-visible and map-visible flags and the map bits cleared.
    ClearAllAndMap = 2,
    /// The map-visible flag and the map bits set (the extent is all
    /// visible already); the map pages are blocks 1 and 2.
    SetMap = 3,
    /// The map-visible flag and the map bits cleared.
    ClearMap = 4,
}

impl VisibleOp {
    fn decode(b: u8) -> Option<VisibleOp> {
        Some(match b {
            0 => VisibleOp::ClearAll,
            1 => VisibleOp::SetAll,
            2 => VisibleOp::ClearAllAndMap,
            3 => VisibleOp::SetMap,
            4 => VisibleOp::ClearMap,
            _ => return None,
        })
    }
    fn touches_map(self) -> bool {
        matches!(self, VisibleOp::ClearAllAndMap | VisibleOp::SetMap | VisibleOp::ClearMap)
    }
}

/// Applies `op`'s flag changes to the header block `page`. Shared by the
/// primary and redo.
pub unsafe fn apply_visible(g: &Geometry, page: pg_sys::Page, op: VisibleOp) -> Result<(), pg_hybrid_core::hasis::Error> {
    let mut h = ExtentHeader::read(bytes(page), g)?;
    match op {
        VisibleOp::ClearAll | VisibleOp::ClearAllAndMap => {
            h.all_visible = false;
            h.map_visible = false;
        }
        VisibleOp::SetAll => h.all_visible = true,
        VisibleOp::SetMap => {
            h.all_visible = true;
            h.map_visible = true;
        }
        VisibleOp::ClearMap => h.map_visible = false,
    }
    h.write(bytes(page), g);
    Ok(())
}

/// Logs a VISIBLE record for the header block `hbuf` (changed by the
/// caller inside its critical section, with the map pages of `SetMap`,
/// which are registered). `cutoff` is the newest xmin of the column rows
/// made all-visible (`SetAll`): a hot standby cancels the queries whose
/// snapshots may not see it, as for heap's visibility-map records.
/// `tid_blocks`: the extent's TID block count, for the ops that touch the
/// map.
pub unsafe fn log_visible(rel: pg_sys::Relation, hbuf: pg_sys::Buffer, op: VisibleOp, cutoff: pg_sys::TransactionId, tid_blocks: u16, maps: Option<&super::vm::MapPins>) {
    if !crate::storage::wal::relation_needs_wal(rel) {
        return;
    }
    let mut data = Vec::with_capacity(7);
    data.push(op as u8);
    data.extend_from_slice(&cutoff.into_inner().to_le_bytes());
    if op.touches_map() {
        data.extend_from_slice(&tid_blocks.to_le_bytes());
    }
    pg_sys::XLogBeginInsert();
    pg_sys::XLogRegisterData(data.as_mut_ptr() as *mut std::os::raw::c_char, data.len() as i32);
    pg_sys::XLogRegisterBuffer(0, hbuf, pg_sys::REGBUF_STANDARD as u8);
    // Map pages keep their bits between pd_lower and pd_upper: never
    // REGBUF_STANDARD, or a full-page image would leave them out.
    let map_bufs: Vec<pg_sys::Buffer> = maps.map(|m| m.buffers().collect()).unwrap_or_default();
    for (i, &b) in map_bufs.iter().enumerate() {
        pg_sys::XLogRegisterBuffer(1 + i as u8, b, 0);
    }
    let lsn = pg_sys::XLogInsert(RM_HASIS_ID, XLOG_HASIS_VISIBLE);
    crate::storage::wal::set_page_lsn(pg_sys::BufferGetPage(hbuf), lsn);
    for &b in &map_bufs {
        crate::storage::wal::set_page_lsn(pg_sys::BufferGetPage(b), lsn);
    }
}

unsafe fn redo_visible(record: *mut pg_sys::XLogReaderState) {
    let d = main_data(record);
    let op = d.first().copied().and_then(VisibleOp::decode).unwrap_or_else(|| redo_failed("malformed VISIBLE record"));
    let want = if op.touches_map() { 7 } else { 5 };
    if d.len() != want {
        redo_failed("malformed VISIBLE record");
    }
    let cutoff = pg_sys::TransactionId::from(u32::from_le_bytes(d[1..5].try_into().unwrap()));
    let mut node: pg_sys::RelFileNode = std::mem::zeroed();
    let mut first: pg_sys::BlockNumber = 0;
    pg_sys::XLogRecGetBlockTag(record, 0, &mut node, std::ptr::null_mut(), &mut first);
    if op == VisibleOp::SetAll && cutoff != pg_sys::InvalidTransactionId && pg_sys::standbyState >= pg_sys::HotStandbyState::STANDBY_SNAPSHOT_PENDING {
        pg_sys::ResolveRecoveryConflictWithSnapshot(cutoff, node);
    }
    let tid_blocks = if op.touches_map() { first..first + u16::from_le_bytes(d[5..7].try_into().unwrap()) as u32 } else { first..first };
    // Cleared bits are cleared whatever the pages' LSNs say.
    if matches!(op, VisibleOp::ClearAllAndMap | VisibleOp::ClearMap) {
        super::vm::redo_clear(node, &tid_blocks);
    }
    let mut buf: pg_sys::Buffer = 0;
    if pg_sys::XLogReadBufferForRedo(record, 0, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(buf);
        let g = geometry_of_header(p);
        apply_visible(&g, p, op).unwrap_or_else(|e| redo_failed(&e.to_string()));
        crate::storage::wal::set_page_lsn(p, (*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
    }
    if buf != 0 {
        pg_sys::UnlockReleaseBuffer(buf);
    }
    if op == VisibleOp::SetMap {
        for id in 1..=2u8 {
            if !has_block_ref(record, id) {
                continue;
            }
            let mut vmbuf: pg_sys::Buffer = 0;
            if pg_sys::XLogReadBufferForRedoExtended(record, id, pg_sys::ReadBufferMode::RBM_ZERO_ON_ERROR, false, &mut vmbuf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
                let page = pg_sys::BufferGetPage(vmbuf);
                if pg_sys::PageIsNew(page) {
                    pg_sys::PageInit(page, pg_sys::BLCKSZ as usize, 0);
                }
                let mut map_block: pg_sys::BlockNumber = 0;
                pg_sys::XLogRecGetBlockTag(record, id, std::ptr::null_mut(), std::ptr::null_mut(), &mut map_block);
                super::vm::set_bits(page, map_block, &tid_blocks);
                crate::storage::wal::set_page_lsn(page, (*record).EndRecPtr);
                pg_sys::MarkBufferDirty(vmbuf);
            }
            if vmbuf != 0 {
                pg_sys::UnlockReleaseBuffer(vmbuf);
            }
        }
    }
}

/// Makes room for a compaction's block references (outside the critical
/// section: it may allocate).
pub unsafe fn prepare_compact(blocks: usize) {
    pg_sys::XLogEnsureRecordSpace(blocks as i32 - 1, 0);
}

/// COMPACT's own header before the core's record: newest removed xid (u32),
/// directory, column and delta blocks registered (u8 each), flags (u8:
/// `COMPACT_COLUMN_FULL`; records written before the flag existed have 0).
const COMPACT_HDR: usize = 8;
/// COMPACT flag: the header's `column_full` after the compaction.
const COMPACT_COLUMN_FULL: u8 = 0x01;

/// Logs a compaction whose pages the caller changed inside its critical
/// section; `written` is the header, the directory blocks, then `ncol`
/// column and `ndelta` delta blocks. Sets their LSNs (zero pages keep none:
/// a new page must stay all zero).
///
/// A whole record (formats 1-3) rebuilds the column and delta blocks from
/// its own bytes: they are registered `WILL_INIT` (never an image). A record
/// by reference (format 4, `by_reference`) needs the blocks' old contents at
/// redo, so every block that stays in use is registered as a normal block
/// (an image if a checkpoint began since the caller's check, then of all
/// of them); blocks that become zero are `WILL_INIT` still.
#[allow(clippy::too_many_arguments)]
pub unsafe fn log_compact(
    rel: pg_sys::Relation,
    latest_removed: pg_sys::TransactionId,
    written: &[&crate::storage::buffer::Buf],
    ndir: usize,
    ncol: usize,
    ndelta: usize,
    body: &[u8],
    by_reference: bool,
    column_full: bool,
) {
    if !crate::storage::wal::relation_needs_wal(rel) {
        return;
    }
    let mut data = Vec::with_capacity(COMPACT_HDR + body.len());
    data.extend_from_slice(&latest_removed.into_inner().to_le_bytes());
    data.extend_from_slice(&[ndir as u8, ncol as u8, ndelta as u8, if column_full { COMPACT_COLUMN_FULL } else { 0 }]);
    data.extend_from_slice(body);
    pg_sys::XLogBeginInsert();
    pg_sys::XLogRegisterData(data.as_mut_ptr() as *mut std::os::raw::c_char, data.len() as i32);
    for (id, b) in written.iter().enumerate() {
        let standard = id <= ndir || (by_reference && !pg_sys::PageIsNew(b.page()));
        let flags = if standard { pg_sys::REGBUF_STANDARD } else { pg_sys::REGBUF_WILL_INIT };
        pg_sys::XLogRegisterBuffer(id as u8, b.buffer(), flags as u8);
    }
    let lsn = pg_sys::XLogInsert(RM_HASIS_ID, XLOG_HASIS_COMPACT);
    for b in written {
        if !pg_sys::PageIsNew(b.page()) {
            crate::storage::wal::set_page_lsn(b.page(), lsn);
        }
    }
}

unsafe fn redo_compact(record: *mut pg_sys::XLogReaderState) {
    let d = main_data(record);
    if d.len() < COMPACT_HDR {
        redo_failed("short COMPACT record");
    }
    let latest = pg_sys::TransactionId::from(u32::from_le_bytes(d[0..4].try_into().unwrap()));
    let (ndir, ncol, ndelta) = (d[4] as usize, d[5] as usize, d[6] as usize);
    if d[7] & !COMPACT_COLUMN_FULL != 0 {
        redo_failed("unknown COMPACT record flags");
    }
    let column_full = d[7] & COMPACT_COLUMN_FULL != 0;
    let decoded = CompactionRecord::decode_any(&d[COMPACT_HDR..]).unwrap_or_else(|e| redo_failed(&e.to_string()));
    // Queries on a hot standby that could still see the removed versions
    // are cancelled first, as for heap's pruning records.
    if latest != pg_sys::InvalidTransactionId && pg_sys::standbyState >= pg_sys::HotStandbyState::STANDBY_SNAPSHOT_PENDING {
        let mut node: pg_sys::RelFileNode = std::mem::zeroed();
        pg_sys::XLogRecGetBlockTag(record, 0, &mut node, std::ptr::null_mut(), std::ptr::null_mut());
        pg_sys::ResolveRecoveryConflictWithSnapshot(latest, node);
    }
    let rec = match decoded {
        DecodedRecord::Full(rec) => rec,
        DecodedRecord::ByReference(r) => return redo_compact_by_reference(record, ndir, ncol, ndelta, &r, column_full),
    };
    let g = Geometry::new(rec.params).unwrap_or_else(|e| redo_failed(&e.to_string()));
    let first = extent_start_of(record);
    let mut out = pg_hybrid_core::hasis::compact::apply_at(&g, &rec, Some(first)).unwrap_or_else(|e| redo_failed(&e.to_string()));
    out.column_full = column_full;
    let lsn = (*record).EndRecPtr;
    // Header first and every lock held to the end, as on the primary: a
    // hot-standby reader never sees the new header with old blocks.
    let mut held: Vec<pg_sys::Buffer> = Vec::with_capacity(1 + ndir + ncol + ndelta);
    let mut id: u8 = 0;
    let mut buf: pg_sys::Buffer = 0;
    if pg_sys::XLogReadBufferForRedo(record, id, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(buf);
        out.patch_header(bytes(p), &g).unwrap_or_else(|e| redo_failed(&e.to_string()));
        crate::storage::wal::set_page_lsn(p, lsn);
        pg_sys::MarkBufferDirty(buf);
    }
    held.push(buf);
    for i in 0..ndir {
        id += 1;
        let mut buf: pg_sys::Buffer = 0;
        if pg_sys::XLogReadBufferForRedo(record, id, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
            let p = pg_sys::BufferGetPage(buf);
            out.patch_directory_block(bytes(p), &g, i).unwrap_or_else(|e| redo_failed(&e.to_string()));
            crate::storage::wal::set_page_lsn(p, lsn);
            pg_sys::MarkBufferDirty(buf);
        }
        held.push(buf);
    }
    let blocks = out.column_blocks[..ncol].iter().map(|b| (b, false)).chain(out.delta_blocks[..ndelta].iter().map(|b| (b, true)));
    for (block, is_delta) in blocks {
        id += 1;
        let buf = pg_sys::XLogInitBufferForRedo(record, id);
        let p = pg_sys::BufferGetPage(buf);
        super::compact::write_block(p, block, is_delta);
        if !pg_sys::PageIsNew(p) {
            crate::storage::wal::set_page_lsn(p, lsn);
        }
        pg_sys::MarkBufferDirty(buf);
        held.push(buf);
    }
    for b in held.into_iter().rev() {
        if b != 0 {
            pg_sys::UnlockReleaseBuffer(b);
        }
    }
}

/// One block of a COMPACT record by reference during redo.
struct RedoBlock {
    buf: pg_sys::Buffer,
    /// What XLogReadBufferForRedo said; None for a block registered
    /// `WILL_INIT` (it becomes zero), read as it is instead.
    action: Option<pg_sys::XLogRedoAction::Type>,
}

/// Redo of a COMPACT record by reference: the blocks are read as they are
/// (the primary logged this format only when each of them had been logged
/// since the redo point, so replay has brought them to the primary's
/// state), the record resolved against them, and the result written as
/// for a whole record. If a checkpoint began between the primary's check
/// and its insert, every block still in use came as a full-page image of
/// its new contents: then only the blocks that become zero are written.
unsafe fn redo_compact_by_reference(record: *mut pg_sys::XLogReaderState, ndir: usize, ncol: usize, ndelta: usize, r: &pg_hybrid_core::hasis::compact::ReferenceRecord, column_full: bool) {
    use pg_sys::XLogRedoAction::*;
    let g = Geometry::new(r.params).unwrap_or_else(|e| redo_failed(&e.to_string()));
    let lsn = (*record).EndRecPtr;
    let n = 1 + ndir + ncol + ndelta;
    // Header first, then block order, every lock held to the end.
    let mut held: Vec<RedoBlock> = Vec::with_capacity(n);
    for id in 0..n as u8 {
        if block_will_init(record, id) {
            let mut node: pg_sys::RelFileNode = std::mem::zeroed();
            let mut fork: pg_sys::ForkNumber::Type = 0;
            let mut blk: pg_sys::BlockNumber = 0;
            pg_sys::XLogRecGetBlockTag(record, id, &mut node, &mut fork, &mut blk);
            let buf = pg_sys::XLogReadBufferExtended(node, fork, blk, pg_sys::ReadBufferMode::RBM_NORMAL, 0);
            if buf != 0 {
                pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            }
            held.push(RedoBlock { buf, action: if buf == 0 { Some(BLK_NOTFOUND) } else { None } });
        } else {
            let mut buf: pg_sys::Buffer = 0;
            let action = pg_sys::XLogReadBufferForRedo(record, id, &mut buf);
            held.push(RedoBlock { buf, action: Some(action) });
        }
    }
    let release = |held: Vec<RedoBlock>| {
        for b in held.into_iter().rev() {
            if b.buf != 0 {
                pg_sys::UnlockReleaseBuffer(b.buf);
            }
        }
    };
    let actions: Vec<pg_sys::XLogRedoAction::Type> = held.iter().filter_map(|b| b.action).collect();
    // A relation dropped or truncated later in the WAL: nothing to do.
    if actions.contains(&BLK_NOTFOUND) {
        return release(held);
    }
    let page = |i: usize| pg_sys::BufferGetPage(held[i].buf);
    if actions.iter().all(|&a| a == BLK_NEEDS_REDO) {
        for b in held.iter().filter(|b| b.action.is_none()) {
            if crate::storage::wal::page_lsn(pg_sys::BufferGetPage(b.buf)) >= lsn {
                redo_failed("COMPACT record by reference found a block newer than the record (was full_page_writes off?)");
            }
        }
        let zero = [0u8; pg_hybrid_core::hasis::layout::BLCKSZ];
        let mut blocks: Vec<&[u8]> = vec![&zero; g.extent_blocks()];
        blocks[0] = bytes(page(0));
        for i in 0..ndir {
            blocks[g.directory_block(i)] = bytes(page(1 + i));
        }
        for i in 0..ncol {
            blocks[g.column_block(i)] = bytes(page(1 + ndir + i));
        }
        for i in 0..ndelta {
            blocks[g.delta_block(i)] = bytes(page(1 + ndir + ncol + i));
        }
        let first = extent_start_of(record);
        let old = pg_hybrid_core::hasis::HybridPage::open_at(&g, &r.schema, &blocks, Some(first)).unwrap_or_else(|e| redo_failed(&e.to_string()));
        let rec = r.resolve(&old).unwrap_or_else(|e| redo_failed(&e.to_string()));
        drop(old);
        drop(blocks);
        let mut out = pg_hybrid_core::hasis::compact::apply_at(&g, &rec, Some(first)).unwrap_or_else(|e| redo_failed(&e.to_string()));
        out.column_full = column_full;
        out.patch_header(bytes(page(0)), &g).unwrap_or_else(|e| redo_failed(&e.to_string()));
        for i in 0..ndir {
            out.patch_directory_block(bytes(page(1 + i)), &g, i).unwrap_or_else(|e| redo_failed(&e.to_string()));
        }
        for i in 0..ncol {
            super::compact::write_block(page(1 + ndir + i), &out.column_blocks[i], false);
        }
        for i in 0..ndelta {
            super::compact::write_block(page(1 + ndir + ncol + i), &out.delta_blocks[i], true);
        }
        for b in &held {
            let p = pg_sys::BufferGetPage(b.buf);
            if !pg_sys::PageIsNew(p) {
                crate::storage::wal::set_page_lsn(p, lsn);
            }
            pg_sys::MarkBufferDirty(b.buf);
        }
    } else if actions.iter().all(|&a| a == BLK_RESTORED || a == BLK_DONE) {
        // The blocks in use are already the new ones; those that became
        // zero never have an image, and the next use of each initializes
        // it again, so zeroing is right whatever they hold now.
        for b in held.iter().filter(|b| b.action.is_none()) {
            std::ptr::write_bytes(pg_sys::BufferGetPage(b.buf) as *mut u8, 0, pg_hybrid_core::hasis::layout::BLCKSZ);
            pg_sys::MarkBufferDirty(b.buf);
        }
    } else {
        redo_failed("COMPACT record by reference found its blocks in different states (was full_page_writes off?)");
    }
    release(held);
}

/// Whether block reference `id` of `record` was registered `WILL_INIT`.
unsafe fn block_will_init(record: *mut pg_sys::XLogReaderState, id: u8) -> bool {
    let r = &*(*record).record;
    has_block_ref(record, id) && r.blocks.as_slice(r.max_block_id as usize + 1)[id as usize].flags as u32 & pg_sys::BKPBLOCK_WILL_INIT != 0
}

unsafe fn main_data<'a>(record: *mut pg_sys::XLogReaderState) -> &'a [u8] {
    let r = &*(*record).record;
    std::slice::from_raw_parts(r.main_data as *const u8, r.main_data_len as usize)
}

/// XLogRecHasBlockRef (a macro in PostgreSQL's headers).
unsafe fn has_block_ref(record: *mut pg_sys::XLogReaderState, id: u8) -> bool {
    let r = &*(*record).record;
    r.max_block_id >= id as i32 && r.blocks.as_slice(r.max_block_id as usize + 1)[id as usize].in_use
}

fn redo_failed(what: &str) -> ! {
    pgrx::error!("hasis redo: {what}")
}

/// The parameters of the extent whose header block is `page` (format 2
/// records leave them out: they never change in an extent's life).
unsafe fn geometry_of_header(page: pg_sys::Page) -> Geometry {
    header::stored_geometry(bytes(page)).unwrap_or_else(|e| redo_failed(&e.to_string()))
}

/// INSERT, and UPDATE (an INSERT whose main data starts with the old
/// version's stamp; the old version's block is block 3, or the delta block
/// 1 when it is the same), in either format.
unsafe fn redo_insert(record: *mut pg_sys::XLogReaderState, update: bool, format2: bool) {
    let d = main_data(record);
    // The stamp's byte offset and fields; the rest of the main data.
    let (stamp, d): (Option<(usize, StampRedo)>, &[u8]) = match (update, format2) {
        (false, _) => (None, d),
        (true, false) => {
            if d.len() < STAMP_PART {
                redo_failed("short UPDATE record");
            }
            let at = u16::from_le_bytes([d[0], d[1]]) as usize;
            (Some((at, StampRedo::Whole(Mvcc::decode(&d[2..STAMP_PART])))), &d[STAMP_PART..])
        }
        (true, true) => {
            // The ctid is the new version's TID, known below.
            let (s, _) = Stamp::decode(d, false).unwrap_or_else(|e| redo_failed(&e.to_string()));
            (Some((s.at as usize, StampRedo::Compact(s, Tid::default()))), &d[wire::STAMP_LEN..])
        }
    };
    let has_dir = has_block_ref(record, 2);
    let has_old_block = stamp.is_some() && has_block_ref(record, 3);
    let lsn = (*record).EndRecPtr;
    // The primary's lock order (header, directory block, delta block), and
    // every lock held to the end: a hot-standby reader holding the header's
    // share lock sees the insert whole or not at all.
    let mut hbuf: pg_sys::Buffer = 0;
    let header_action = pg_sys::XLogReadBufferForRedo(record, 0, &mut hbuf);
    // The item, or (a diff, format 2) what rebuilds it once the old
    // version's payload is at hand.
    let (g, r, item, stamp) = if format2 {
        if hbuf == 0 {
            // The extent is gone: a later truncation or drop of the
            // relation follows in the WAL (PostgreSQL checks that).
            return;
        }
        let g = geometry_of_header(pg_sys::BufferGetPage(hbuf));
        let (place, _) = wire::decode_place(d).unwrap_or_else(|e| redo_failed(&e.to_string()));
        let mut first: pg_sys::BlockNumber = 0;
        pg_sys::XLogRecGetBlockTag(record, 0, std::ptr::null_mut(), std::ptr::null_mut(), &mut first);
        let own = g.tid(first, place.slot).unwrap_or_else(|e| redo_failed(&e.to_string()));
        let implied = Implied { xid: (*(*record).record).header.xl_xid.into_inner(), own };
        let item = match wire::is_diff(d) {
            true => RedoItem::Diff { wire: d, implied },
            false => RedoItem::Whole(wire::decode_item(d, &place, &implied, None).unwrap_or_else(|e| redo_failed(&e.to_string()))),
        };
        let stamp = stamp.map(|(at, s)| match s {
            StampRedo::Compact(s, _) => (at, StampRedo::Compact(s, own)),
            whole => (at, whole),
        });
        (g, place, item, stamp)
    } else {
        let Some((params, place, item)) = decode_insert_v1(d) else { redo_failed("short INSERT record") };
        (Geometry::new(params).unwrap_or_else(|e| redo_failed(&e.to_string())), place, RedoItem::Whole(item), stamp)
    };
    let mut dirbuf: pg_sys::Buffer = 0;
    if has_dir && pg_sys::XLogReadBufferForRedo(record, 2, &mut dirbuf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(dirbuf);
        apply_insert_entry(&g, p, &r).unwrap_or_else(|e| redo_failed(&e.to_string()));
        crate::storage::wal::set_page_lsn(p, lsn);
        pg_sys::MarkBufferDirty(dirbuf);
    }
    if header_action == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(hbuf);
        if !has_dir {
            apply_insert_entry(&g, p, &r).unwrap_or_else(|e| redo_failed(&e.to_string()));
        }
        apply_insert_sizes(&g, p, &r).unwrap_or_else(|e| redo_failed(&e.to_string()));
        crate::storage::wal::set_page_lsn(p, lsn);
        pg_sys::MarkBufferDirty(hbuf);
    }
    // The old version's own block before the delta block: a diff is
    // rebuilt from its payload. (Any order is safe under the header's
    // exclusive lock, which every reader of the extent waits for.)
    let mut obuf: pg_sys::Buffer = 0;
    let old_action = has_old_block.then(|| pg_sys::XLogReadBufferForRedo(record, 3, &mut obuf));
    let mut dbuf: pg_sys::Buffer = 0;
    let action = if r.fresh {
        dbuf = pg_sys::XLogInitBufferForRedo(record, 1);
        pg_sys::XLogRedoAction::BLK_NEEDS_REDO
    } else {
        pg_sys::XLogReadBufferForRedo(record, 1, &mut dbuf)
    };
    if action == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(dbuf);
        let item = match item {
            RedoItem::Whole(item) => item,
            RedoItem::Diff { wire, implied } => {
                use pg_sys::XLogRedoAction::{BLK_NEEDS_REDO, BLK_RESTORED};
                // The old version is in block 3 as the primary had it (or
                // its image after the record: the payload is the same), or
                // in this block before the append.
                let old_page = match old_action {
                    None => p,
                    Some(BLK_NEEDS_REDO | BLK_RESTORED) => pg_sys::BufferGetPage(obuf),
                    Some(_) => redo_failed("UPDATE record's diff: the old version's block is newer than the record (was full_page_writes turned off?)"),
                };
                let Some((at, _)) = &stamp else { redo_failed("INSERT record with a diff") };
                let Some(offset) = pg_hybrid_core::hasis::delta::item_offset_of_mvcc(*at) else { redo_failed("UPDATE record's old version offset out of range") };
                let old = pg_hybrid_core::hasis::delta::payload_at(bytes(old_page), offset).unwrap_or_else(|e| redo_failed(&e.to_string()));
                wire::decode_item(wire, &r, &implied, Some(old)).unwrap_or_else(|e| redo_failed(&e.to_string()))
            }
        };
        apply_insert_delta(&g, p, &r, &item).unwrap_or_else(|e| redo_failed(&e.to_string()));
        if let (Some((at, s)), false) = (&stamp, has_old_block) {
            s.apply(p, s.at(*at));
        }
        crate::storage::wal::set_page_lsn(p, lsn);
        pg_sys::MarkBufferDirty(dbuf);
    }
    if let (Some((at, s)), Some(pg_sys::XLogRedoAction::BLK_NEEDS_REDO)) = (&stamp, old_action) {
        let p = pg_sys::BufferGetPage(obuf);
        s.apply(p, s.at(*at));
        crate::storage::wal::set_page_lsn(p, lsn);
        pg_sys::MarkBufferDirty(obuf);
    }
    for b in [obuf, dbuf, dirbuf, hbuf] {
        if b != 0 {
            pg_sys::UnlockReleaseBuffer(b);
        }
    }
}

/// An INSERT or UPDATE record's item in redo: whole, or a diff against
/// the old version's payload (`wire::is_diff`).
enum RedoItem<'a> {
    Whole(Vec<u8>),
    Diff { wire: &'a [u8], implied: Implied },
}

unsafe fn redo_stamp(record: *mut pg_sys::XLogReaderState, format2: bool) {
    let d = main_data(record);
    let (at, s) = if format2 {
        let (s, ctid) = Stamp::decode(d, true).unwrap_or_else(|e| redo_failed(&e.to_string()));
        (s.at as usize, StampRedo::Compact(s, ctid.unwrap_or_default()))
    } else {
        if d.len() < 2 + MVCC_LEN {
            redo_failed("short STAMP record");
        }
        (u16::from_le_bytes([d[0], d[1]]) as usize, StampRedo::Whole(Mvcc::decode(&d[2..])))
    };
    let mut buf: pg_sys::Buffer = 0;
    if pg_sys::XLogReadBufferForRedo(record, 0, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let p = pg_sys::BufferGetPage(buf);
        s.apply(p, at);
        crate::storage::wal::set_page_lsn(p, (*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
    }
    if buf != 0 {
        pg_sys::UnlockReleaseBuffer(buf);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    match crate::storage::wal::record_info(record) {
        XLOG_HASIS_INSERT => redo_insert(record, false, false),
        XLOG_HASIS_UPDATE => redo_insert(record, true, false),
        XLOG_HASIS_STAMP => redo_stamp(record, false),
        XLOG_HASIS_INSERT2 => redo_insert(record, false, true),
        XLOG_HASIS_UPDATE2 => redo_insert(record, true, true),
        XLOG_HASIS_STAMP2 => redo_stamp(record, true),
        XLOG_HASIS_COMPACT => redo_compact(record),
        XLOG_HASIS_VISIBLE => redo_visible(record),
        XLOG_HASIS_LOGICAL => {}
        other => redo_failed(&format!("unknown WAL record type {other:#x}")),
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(out: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    let text = match crate::storage::wal::record_info(record) {
        XLOG_HASIS_INSERT => match decode_insert_v1(main_data(record)) {
            Some((_, r, item)) => format!("slot {} delta block {} offset {} item {} bytes{}", r.slot, r.delta_index, r.offset, item.len(), if r.fresh { " (new block)" } else { "" }),
            None => "short record".into(),
        },
        XLOG_HASIS_UPDATE => match main_data(record).get(STAMP_PART..).and_then(decode_insert_v1) {
            Some((_, r, item)) => format!("HOT update: new version slot {} delta block {} offset {} item {} bytes{}; old version stamped", r.slot, r.delta_index, r.offset, item.len(), if r.fresh { " (new block)" } else { "" }),
            None => "short record".into(),
        },
        XLOG_HASIS_STAMP | XLOG_HASIS_STAMP2 => "mvcc stamp".into(),
        XLOG_HASIS_INSERT2 => match wire::decode_place(main_data(record)) {
            Ok((p, _)) => format!("slot {} delta block {} offset {}{}", p.slot, p.delta_index, p.offset, if p.fresh { " (new block)" } else { "" }),
            Err(_) => "short record".into(),
        },
        XLOG_HASIS_UPDATE2 => match main_data(record).get(wire::STAMP_LEN..).map(|d| (wire::decode_place(d), wire::is_diff(d))) {
            Some((Ok((p, _)), diff)) => format!(
                "HOT update: new version slot {} delta block {} offset {}{}{}; old version stamped",
                p.slot,
                p.delta_index,
                p.offset,
                if p.fresh { " (new block)" } else { "" },
                if diff { ", payload as a diff against the old version" } else { "" }
            ),
            _ => "short record".into(),
        },
        XLOG_HASIS_COMPACT => format!("compaction record of {} bytes", main_data(record).len()),
        XLOG_HASIS_LOGICAL => match super::logical::LogicalRecord::decode(main_data(record)) {
            Some(r) => format!(
                "{:?} of relfilenode {}/{}/{} for logical decoding{}{}",
                r.op,
                r.node.spcNode.to_u32(),
                r.node.dbNode.to_u32(),
                r.node.relNode.to_u32(),
                r.old.map_or(String::new(), |t| format!(", old tuple {} bytes", t.len())),
                r.new.map_or(String::new(), |t| format!(", new tuple {} bytes", t.len()))
            ),
            None => "malformed record".into(),
        },
        XLOG_HASIS_VISIBLE => match main_data(record) {
            [1, x @ ..] if x.len() == 4 => format!("column part all visible, cutoff xid {}", u32::from_le_bytes(x.try_into().unwrap())),
            [0, ..] => "column part no longer all visible".into(),
            [op @ 2..=4, _, _, _, _, n0, n1] => format!(
                "{} for {} TID blocks",
                match op {
                    2 => "column part no longer all visible, visibility-map bits cleared",
                    3 => "visibility-map bits set",
                    _ => "visibility-map bits cleared",
                },
                u16::from_le_bytes([*n0, *n1])
            ),
            _ => "malformed record".into(),
        },
        _ => return,
    };
    let s = std::ffi::CString::new(text).unwrap();
    pg_sys::appendStringInfoString(out, s.as_ptr());
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::os::raw::c_char {
    match info & !(pg_sys::XLR_INFO_MASK as u8) {
        XLOG_HASIS_INSERT => c"INSERT_V1".as_ptr(),
        XLOG_HASIS_STAMP => c"STAMP_V1".as_ptr(),
        XLOG_HASIS_UPDATE => c"UPDATE_V1".as_ptr(),
        XLOG_HASIS_INSERT2 => c"INSERT".as_ptr(),
        XLOG_HASIS_STAMP2 => c"STAMP".as_ptr(),
        XLOG_HASIS_UPDATE2 => c"UPDATE".as_ptr(),
        XLOG_HASIS_COMPACT => c"COMPACT".as_ptr(),
        XLOG_HASIS_VISIBLE => c"VISIBLE".as_ptr(),
        XLOG_HASIS_LOGICAL => c"LOGICAL".as_ptr(),
        _ => std::ptr::null(),
    }
}
