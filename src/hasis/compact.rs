//! Major compaction on buffers: the core's `plan` with heap's vacuum rules
//! as the oracle, the core's `apply` on the extent's pages, one record of
//! hasis's rmgr (`wal.rs`, COMPACT) carrying the logical rows.
//!
//! It runs with the extent's header block exclusively locked for the whole
//! run (no reader, stamper or inserter is inside the extent), then every
//! other block of the extent exclusively, in block order. Triggered when an
//! insert needs a new delta block and the delta part has reached
//! `compact_trigger` blocks, and by VACUUM.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::compact::{self, Placement};
use pg_hybrid_core::hasis::delta;
use pg_hybrid_core::hasis::header::ExtentHeader;
use pg_hybrid_core::hasis::layout::{BLCKSZ, BODY_END, TRAILER_OFF};
use pg_hybrid_core::hasis::row::Mvcc;
use pg_hybrid_core::hasis::HybridPage;

use super::relation::{bytes, init_page, read_extending, Meta};
use super::tuple;
use super::visibility::*;
use crate::storage::buffer::Buf;

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Compacted {
    /// Versions removed (dead to every snapshot).
    pub removed: usize,
    /// Versions moved from the delta part into the column part.
    pub moved: usize,
    /// Delta blocks in use after it.
    pub delta_used: u16,
    /// Versions VACUUM froze.
    pub frozen: usize,
}

/// Whether every snapshot sees the version's insert, for a version whose
/// inserter HeapTupleSatisfiesVacuum found committed. The commit hint may
/// be missing (asynchronous commit: hints wait for the WAL flush), but
/// the compaction record follows the commit record in the WAL, so a
/// crash cannot keep the one without the other.
unsafe fn xmin_visible_to_all(m: &Mvcc, horizon: pg_sys::TransactionId) -> bool {
    m.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || pg_sys::TransactionIdPrecedes(pg_sys::TransactionId::from(m.xmin), horizon)
}

/// Whether the relation's file was made by the running transaction (no
/// other transaction can read it before commit; an abort drops it).
pub unsafe fn file_private_to_xact(rel: pg_sys::Relation) -> bool {
    (*rel).rd_createSubid != 0 || (*rel).rd_firstRelfilenodeSubid != 0
}

/// Writes a block the compaction produced into `page`: a zero block stays
/// all zero (`PageIsNew`), any other gets a standard page header and the
/// core's bytes.
pub unsafe fn write_block(page: pg_sys::Page, block: &[u8], delta_block: bool) {
    if block.iter().all(|&b| b == 0) {
        std::ptr::write_bytes(page as *mut u8, 0, BLCKSZ);
        return;
    }
    let lower = if delta_block { BODY_END - delta::free_space(block).unwrap_or(0) } else { TRAILER_OFF };
    init_page(page, lower);
    bytes(page)[24..].copy_from_slice(&block[24..]);
}

/// VACUUM's freezing: xids older than `limit` that every snapshot sees as
/// committed (or as aborted, for xmax) are replaced by "frozen" / "invalid",
/// so relfrozenxid can move up to `limit`.
#[derive(Clone, Copy, Debug)]
pub struct Freeze {
    pub limit: pg_sys::TransactionId,
}

/// Applies `freeze` to a version VACUUM keeps, whose inserter committed;
/// true if it changed.
unsafe fn freeze_version(m: &mut Mvcc, freeze: &Freeze) -> bool {
    let precedes = |x: u32| x != 0 && pg_sys::TransactionIdPrecedes(pg_sys::TransactionId::from(x), freeze.limit);
    let mut changed = false;
    if m.infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN && precedes(m.xmin) {
        m.infomask |= HEAP_XMIN_FROZEN;
        changed = true;
    }
    // An aborted deleter or a finished locker (HeapTupleSatisfiesVacuum has
    // set XMAX_INVALID for both) leaves nothing to remember.
    if m.infomask & HEAP_XMAX_INVALID != 0 && precedes(m.xmax) {
        m.xmax = 0;
        m.infomask &= !(HEAP_XMAX_BITS & !HEAP_XMAX_INVALID);
        m.infomask2 &= !HEAP_KEYS_UPDATED;
        changed = true;
    }
    changed
}

/// Compacts extent `k`, whose header block the caller holds exclusively in
/// `hbuf`; with `freeze` (VACUUM), also freezes old xids. Returns None when
/// there was nothing to gain (nothing removed, moved or frozen): nothing is
/// written then.
pub unsafe fn compact_extent(rel: pg_sys::Relation, meta: &Meta, k: u32, hbuf: &Buf, freeze: Option<Freeze>) -> Option<Compacted> {
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let h = ExtentHeader::read(bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e));
    if h.delta_used == 0 && (freeze.is_none() || h.column_rows == 0) {
        return None;
    }
    let schema = tuple::schema(rel);
    let dirs: Vec<Buf> = (0..g.directory_blocks as usize).map(|i| read_extending(rel, first + g.directory_block(i) as u32)).collect();
    let cols: Vec<Buf> = (0..g.params.column_blocks as usize).map(|i| read_extending(rel, first + g.column_block(i) as u32)).collect();
    let deltas: Vec<Buf> = (0..g.params.delta_blocks as usize).map(|i| read_extending(rel, first + g.delta_block(i) as u32)).collect();
    let page = {
        let mut blocks: Vec<&[u8]> = vec![&*bytes(hbuf.page())];
        blocks.extend(dirs.iter().map(|b| &*bytes(b.page())));
        blocks.extend(cols.iter().map(|b| &*bytes(b.page())));
        blocks.extend(deltas.iter().map(|b| &*bytes(b.page())));
        HybridPage::open(&g, &schema, &blocks).unwrap_or_else(|e| super::format_error(rel, first, e))
    };

    let horizon = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let private = file_private_to_xact(rel);
    let relid = (*rel).rd_id;
    let mut latest_removed = pg_sys::InvalidTransactionId;
    let mut frozen = 0usize;
    let mut oracle = |slot: u16, m: &mut Mvcc| -> Placement {
        let tid = g.tid(first, slot).unwrap_or_default();
        let (r, hint, mut ht) = vacuum_state(m, tid, relid, horizon, hbuf.buffer());
        if let Some(im) = hint {
            m.infomask = im;
        }
        use pg_sys::HTSV_Result::*;
        let committed = matches!(r, HEAPTUPLE_LIVE | HEAPTUPLE_RECENTLY_DEAD | HEAPTUPLE_DELETE_IN_PROGRESS);
        if let Some(f) = &freeze {
            if committed && freeze_version(m, f) {
                frozen += 1;
            }
        }
        match r {
            HEAPTUPLE_DEAD => {
                HeapTupleHeaderAdvanceLatestRemovedXid(ht.header(), &mut latest_removed);
                Placement::Remove
            }
            _ if committed && xmin_visible_to_all(m, horizon) => Placement::Column,
            // A bulk load into a file this transaction made (CREATE TABLE AS,
            // COPY after CREATE or TRUNCATE, ALTER TABLE rewrites, CLUSTER):
            // nobody else can see the file before commit, and an abort
            // discards it, so its own rows need not wait in the delta part.
            HEAPTUPLE_INSERT_IN_PROGRESS if private && m.xmax == 0 && pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmin)) => Placement::Column,
            _ => Placement::Stay,
        }
    };
    let rec = compact::plan(&page, &schema, &mut oracle).unwrap_or_else(|e| super::format_error(rel, first, e));
    let out = compact::apply(&g, &rec).unwrap_or_else(|e| super::format_error(rel, first, e));
    let moved = (out.column_rows as usize).saturating_sub(h.column_rows as usize);
    if rec.removed.is_empty() && moved == 0 && out.delta_used >= h.delta_used && frozen == 0 {
        return None;
    }
    let body = rec.encode(true).unwrap_or_else(|e| super::format_error(rel, first, e));
    let ncol = out.column_blocks_to_write(&h);
    let ndelta = out.delta_blocks_to_write(&h);
    super::wal::prepare_compact(g.extent_blocks());

    pg_sys::CritSectionCount += 1;
    for i in 0..ncol {
        write_block(cols[i].page(), &out.column_blocks[i], false);
    }
    for i in 0..ndelta {
        write_block(deltas[i].page(), &out.delta_blocks[i], true);
    }
    let patched = out.patch_header(bytes(hbuf.page()), &g).and_then(|_| {
        dirs.iter().enumerate().try_for_each(|(i, d)| out.patch_directory_block(bytes(d.page()), &g, i))
    });
    if let Err(e) = patched {
        super::format_error(rel, first, e);
    }
    let written: Vec<&Buf> = std::iter::once(hbuf).chain(dirs.iter()).chain(cols[..ncol].iter()).chain(deltas[..ndelta].iter()).collect();
    for b in &written {
        pg_sys::MarkBufferDirty(b.buffer());
    }
    super::wal::log_compact(rel, latest_removed, &written, dirs.len(), ncol, ndelta, &body);
    pg_sys::CritSectionCount -= 1;

    Some(Compacted { removed: rec.removed.len(), moved, delta_used: out.delta_used, frozen })
}
