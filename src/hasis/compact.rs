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
    /// Directory entries released: removed versions' slots, and HOT
    /// redirects that moved or died.
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
    // set XMAX_INVALID for both) leaves nothing to remember. A MultiXact is
    // never an xid to compare: hasis writes only lock-only ones, and
    // XMAX_INVALID says every member has ended, so it goes whatever its
    // age (relminmxid then advances past it).
    let finished_multi = m.infomask & HEAP_XMAX_IS_MULTI != 0 && m.infomask & HEAP_XMAX_INVALID != 0;
    if finished_multi || (m.infomask & HEAP_XMAX_IS_MULTI == 0 && m.infomask & HEAP_XMAX_INVALID != 0 && precedes(m.xmax)) {
        m.xmax = 0;
        m.infomask &= !(HEAP_XMAX_BITS & !HEAP_XMAX_INVALID);
        m.infomask2 &= !HEAP_KEYS_UPDATED;
        changed = true;
    }
    changed
}

/// Why a compaction runs, which decides what counts as a gain.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    /// Room for inserts (an insert found the delta part full, or the
    /// worker found it at the trigger): worth it only if a delta block
    /// comes free. A delta part full of versions that must stay (still
    /// visible to someone) with a full column part would otherwise be
    /// rewritten, and logged, at every insert that meets it.
    Room,
    /// VACUUM: any removed version (its slot turns dead, so its index
    /// entries can go), any move, and freezing with `Freeze`.
    Vacuum(Freeze),
}

/// Whether compacting extent `first` (header block held by the caller) for
/// `Goal::Room` may free a delta block, judged from the delta items' MVCC
/// fields alone, without decoding the column part: a block's worth of
/// versions must be removable (dead to all) or, while the column part has
/// room, movable (inserted and visible to all, or this transaction's own
/// new rows). Compaction decodes and re-encodes the whole extent, so the
/// worker asks this before trying an extent whose delta part holds
/// versions that must stay.
pub unsafe fn may_free_delta_block(rel: pg_sys::Relation, meta: &Meta, first: u32, h: &ExtentHeader) -> bool {
    // Asked at every insert that meets a full delta part, which for an
    // extent full of versions that must stay (a bulk-loaded extent whose
    // rows are updated elsewhere) is every update of one of its rows that
    // tries HOT. The answer depends only on the page version, the delta
    // part's items (appends go to the last block in use) and the removal
    // horizon, so a "no" is remembered for them.
    let g = meta.geometry;
    let horizon_xid = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let horizon = horizon_xid.into_inner();
    let last_items = match h.delta_used.checked_sub(1) {
        None => 0,
        Some(i) => {
            let blk = first + g.delta_block(i as usize) as u32;
            let b = Buf::read(rel, blk, crate::storage::buffer::Lock::Share);
            match delta::DeltaView::open(bytes(b.page()), &g, i as usize, Some(h.version)) {
                Ok(v) => v.len(),
                Err(_) => return true,
            }
        }
    };
    let key = ((*rel).rd_node.relNode, first);
    let state = NoGain { version: h.version, delta_used: h.delta_used, last_items, horizon };
    if NO_GAIN.with(|c| c.borrow().get(&key) == Some(&state)) {
        return false;
    }
    let gain = scan_for_gain(rel, meta, first, h, horizon_xid);
    NO_GAIN.with(|c| {
        let mut c = c.borrow_mut();
        if gain {
            c.remove(&key);
        } else {
            if c.len() >= 65536 {
                c.clear();
            }
            c.insert(key, state);
        }
    });
    gain
}

/// What `may_free_delta_block`'s answer depends on.
#[derive(Clone, Copy, PartialEq, Eq)]
struct NoGain {
    version: u32,
    delta_used: u16,
    last_items: usize,
    horizon: u32,
}

thread_local! {
    /// Extents (relfilenode, first block) found unable to free a delta
    /// block, and in what state.
    static NO_GAIN: std::cell::RefCell<std::collections::HashMap<(pg_sys::Oid, u32), NoGain>> = std::cell::RefCell::new(std::collections::HashMap::new());
}

unsafe fn scan_for_gain(rel: pg_sys::Relation, meta: &Meta, first: u32, h: &ExtentHeader, horizon: pg_sys::TransactionId) -> bool {
    let g = meta.geometry;
    let column_full = h.column_units as usize >= g.column_units();
    let relid = (*rel).rd_id;
    let block_bytes = BODY_END - delta::ITEMS_START;
    let mut gain = 0usize;
    for i in 0..h.delta_used as usize {
        let blk = first + g.delta_block(i) as u32;
        let b = Buf::read(rel, blk, crate::storage::buffer::Lock::Share);
        let Ok(view) = delta::DeltaView::open(bytes(b.page()), &g, i, Some(h.version)) else { return true };
        for it in view.items() {
            let Ok(it) = it else { return true };
            let m = it.header.mvcc;
            let tid = g.tid(first, it.header.slot).unwrap_or_default();
            let (r, _, _) = vacuum_state(&m, tid, relid, horizon, b.buffer());
            use pg_sys::HTSV_Result::*;
            let frees = match r {
                HEAPTUPLE_DEAD => true,
                HEAPTUPLE_LIVE if !column_full => xmin_visible_to_all(&m, horizon),
                HEAPTUPLE_INSERT_IN_PROGRESS if !column_full => m.xmax == 0 && pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmin)),
                _ => false,
            };
            if frees {
                gain += it.bytes.len();
                if gain >= block_bytes {
                    return true;
                }
            }
        }
    }
    false
}

/// The compaction oracle: heap's vacuum rules decide each version's fate,
/// and its HOT bits place it in a chain.
struct HeapRules<'a, F: FnMut(u16, &mut Mvcc) -> Placement> {
    decide: &'a mut F,
    g: &'a pg_hybrid_core::hasis::layout::Geometry,
    first: u32,
}

impl<F: FnMut(u16, &mut Mvcc) -> Placement> compact::Oracle for HeapRules<'_, F> {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement {
        (self.decide)(slot, mvcc)
    }
    fn link(&mut self, _slot: u16, mvcc: &Mvcc) -> pg_hybrid_core::hasis::hot::ChainLink {
        chain_link(self.g, self.first, mvcc)
    }
}

/// Compacts extent `k`, whose header block the caller holds exclusively in
/// `hbuf`. Returns None when there was nothing to gain for `goal`: nothing
/// is written then.
pub unsafe fn compact_extent(rel: pg_sys::Relation, meta: &Meta, k: u32, hbuf: &Buf, goal: Goal) -> Option<Compacted> {
    let freeze = match goal {
        Goal::Vacuum(f) => Some(f),
        Goal::Room => None,
    };
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
            // This transaction's own new rows (a bulk load: COPY, INSERT ...
            // SELECT, and every load into a file it made, such as CREATE
            // TABLE AS, ALTER TABLE rewrites, CLUSTER) need not wait in the
            // delta part: column rows carry the same MVCC header, every
            // reader checks it, and an abort leaves them dead for the next
            // compaction. Left in the delta part, a load would fill each
            // extent's delta blocks only and leave its column part empty.
            HEAPTUPLE_INSERT_IN_PROGRESS if m.xmax == 0 && pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmin)) => Placement::Column,
            _ => Placement::Stay,
        }
    };
    let mut rules = HeapRules { decide: &mut oracle, g: &g, first };
    let rec = compact::plan(&page, &schema, &mut rules).unwrap_or_else(|e| super::format_error(rel, first, e));
    let out = compact::apply(&g, &rec).unwrap_or_else(|e| super::format_error(rel, first, e));
    let moved = (out.column_rows as usize).saturating_sub(h.column_rows as usize);
    if rec.entries_released() == 0 && moved == 0 && out.delta_used >= h.delta_used && frozen == 0 {
        return None;
    }
    if matches!(goal, Goal::Room) && out.delta_used >= h.delta_used {
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

    Some(Compacted { removed: rec.entries_released(), moved, delta_used: out.delta_used, frozen })
}
