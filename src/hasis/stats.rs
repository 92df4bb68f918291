//! `pg_hybrid.table_stats(regclass)`: what a hasis table's hybrid pages hold.

use pgrx::prelude::*;
use pgrx::pg_sys;

use pg_hybrid_core::hasis::header::{DirEntry, ExtentHeader};

use super::relation::{self, bytes};
use crate::storage::buffer::{Buf, Lock};

/// Opens `oid` and checks that it is a hasis table.
pub unsafe fn open_table(oid: pg_sys::Oid, lock: pg_sys::LOCKMODE) -> pg_sys::Relation {
    let rel = crate::open_relation(oid, lock);
    if !super::handler::is_hasis(rel) {
        let name = crate::storage::page::rel_name(rel);
        pg_sys::relation_close(rel, lock);
        crate::raise(PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE, format!("\"{name}\" is not a hasis table"), "Pass a table created with USING hasis.");
    }
    rel
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.table_stats(tbl regclass) RETURNS TABLE (
    extents bigint, page_versions bigint, column_rows bigint, column_units bigint,
    delta_versions bigint, delta_blocks bigint, dead_slots bigint, unused_slots bigint,
    redirect_slots bigint, relation_bytes bigint,
    compaction_written_bytes bigint, compaction_physical_bytes bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'table_stats_wrapper';
COMMENT ON FUNCTION pg_hybrid.table_stats(regclass) IS 'hybrid pages of a hasis table: extents, compactions (page versions past the first), rows in column parts and delta parts, slots waiting for VACUUM, HOT chain roots whose root version is gone (redirects); the bytes compactions of its current file wrote since the server started, and what they cost on a compressing drive (LZ4 per 4 KB block, the CSD meter; NULL unless pg_hybrid.hasis_meter_compactions was on for all of them)';
")]
fn table_stats(
    tbl: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(extents, i64),
        name!(page_versions, i64),
        name!(column_rows, i64),
        name!(column_units, i64),
        name!(delta_versions, i64),
        name!(delta_blocks, i64),
        name!(dead_slots, i64),
        name!(unused_slots, i64),
        name!(redirect_slots, i64),
        name!(relation_bytes, i64),
        name!(compaction_written_bytes, Option<i64>),
        name!(compaction_physical_bytes, Option<i64>),
    ),
> {
    /// The figures, by name, before they become the row.
    #[derive(Default)]
    struct Figures {
        extents: i64,
        page_versions: i64,
        column_rows: i64,
        column_units: i64,
        delta_versions: i64,
        delta_blocks: i64,
        dead_slots: i64,
        unused_slots: i64,
        redirect_slots: i64,
        relation_bytes: i64,
    }
    unsafe {
        let rel = open_table(tbl, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut f = Figures::default();
        if let Some(meta) = relation::refresh_meta(rel) {
            let g = meta.geometry;
            f.extents = meta.nextents as i64;
            for k in 0..meta.nextents {
                let first = meta.extent_first(k);
                let hbuf = Buf::read(rel, first, Lock::Share);
                let h = ExtentHeader::read(bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e));
                f.page_versions += h.version as i64;
                f.column_rows += h.column_rows as i64;
                f.column_units += h.column_units as i64;
                f.delta_blocks += h.delta_used as i64;
                let mut dir = relation::DirectoryReader::new(rel, &g, first, &hbuf, std::ptr::null_mut());
                for s in 0..h.slot_hwm {
                    match dir.entry(s) {
                        DirEntry::Delta { .. } => f.delta_versions += 1,
                        DirEntry::Dead => f.dead_slots += 1,
                        DirEntry::Unused => f.unused_slots += 1,
                        DirEntry::Redirect { .. } => f.redirect_slots += 1,
                        DirEntry::Column { .. } => {}
                    }
                }
            }
        }
        f.relation_bytes = (crate::storage::buffer::nblocks(rel) as i64) * pg_sys::BLCKSZ as i64;
        // Counted by the server since it started: NULL when its table of
        // counted relations filled before this file was first counted; a
        // standby counts nothing (replaying a compaction is not one). The
        // physical bytes are NULL unless every compaction was metered.
        let written = crate::shmem::rel_counters::get(crate::shmem::rel_counters::RelFile::of(rel));
        use super::compact::written::{BLOCKS, METERED_BLOCKS, PHYSICAL_BYTES};
        let written_bytes = written.map(|w| (w[BLOCKS] * pg_sys::BLCKSZ as u64) as i64);
        let physical_bytes = written.filter(|w| w[METERED_BLOCKS] == w[BLOCKS]).map(|w| w[PHYSICAL_BYTES] as i64);
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        TableIterator::once((
            f.extents,
            f.page_versions,
            f.column_rows,
            f.column_units,
            f.delta_versions,
            f.delta_blocks,
            f.dead_slots,
            f.unused_slots,
            f.redirect_slots,
            f.relation_bytes,
            written_bytes,
            physical_bytes,
        ))
    }
}

static ZERO: [u8; pg_sys::BLCKSZ as usize] = [0; pg_sys::BLCKSZ as usize];

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.verify_table(tbl regclass) RETURNS bigint
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'verify_table_wrapper';
COMMENT ON FUNCTION pg_hybrid.verify_table(regclass) IS 'check every hybrid page of a hasis table (block trailers, page versions, directory against versions, column part layout) and that every index entry points at a slot with a version; returns the number of versions checked';
")]
fn verify_table(tbl: pg_sys::Oid) -> i64 {
    unsafe {
        let rel = open_table(tbl, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut versions = 0i64;
        if let Some(meta) = relation::refresh_meta(rel) {
            let schema = super::tuple::schema(rel);
            let g = meta.geometry;
            let mut vmbuf = pg_sys::InvalidBuffer as pg_sys::Buffer;
            for k in 0..meta.nextents {
                let first = meta.extent_first(k);
                // The header block first, then every other block in order
                // (the readers' lock order); HybridPage::open checks every
                // trailer, the page version of every block in use, the
                // directory against the versions and the column layout.
                let hbuf = Buf::read(rel, first, Lock::Share);
                // Zero blocks a crash lost (never logged, never used) read as zero.
                let n = crate::storage::buffer::nblocks(rel);
                let others: Vec<Option<Buf>> = (1..g.extent_blocks() as u32).map(|i| (first + i < n).then(|| Buf::read(rel, first + i, Lock::Share))).collect();
                let mut blocks: Vec<&[u8]> = vec![&*bytes(hbuf.page())];
                blocks.extend(others.iter().map(|b| b.as_ref().map_or(&ZERO[..], |b| &*bytes(b.page()))));
                let page = pg_hybrid_core::hasis::HybridPage::open_at(&g, &schema, &blocks, Some(first)).unwrap_or_else(|e| super::format_error(rel, first + failing_block(&g, &blocks), e));
                versions += page.scan().unwrap_or_else(|e| super::format_error(rel, first, e)).len() as i64;
                if page.header().all_visible {
                    check_all_visible(rel, first, &page);
                }
                check_map(rel, first, &page, &mut vmbuf);
            }
            if vmbuf != pg_sys::InvalidBuffer as pg_sys::Buffer {
                pg_sys::ReleaseBuffer(vmbuf);
            }
            verify_indexes(rel, &meta);
        }
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        versions
    }
}

/// An extent flagged all-visible: no column row is deleted, updated or
/// aborted, and each stores every column of the part (what a column scan
/// that reads no row headers assumes).
unsafe fn check_all_visible(rel: pg_sys::Relation, first: u32, page: &pg_hybrid_core::hasis::HybridPage) {
    use super::visibility::*;
    let ncols = page.column_rows().iter().map(|r| r.row.values.len()).max().unwrap_or(0);
    for r in page.column_rows() {
        let m = &r.header.mvcc;
        // An updater that aborted may lack its hint (VACUUM sets the flag
        // without rewriting the rows).
        let xmax_hides = m.xmax != 0
            && m.infomask & HEAP_XMAX_INVALID == 0
            && m.infomask & HEAP_XMAX_LOCK_ONLY == 0
            && m.infomask & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) != HEAP_XMAX_EXCL_LOCK
            && !(m.infomask & HEAP_XMAX_IS_MULTI == 0 && pg_sys::TransactionIdDidAbort(pg_sys::TransactionId::from(m.xmax)));
        let aborted = m.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_INVALID;
        if xmax_hides || aborted || r.row.values.len() != ncols {
            super::format_error(rel, first, pg_hybrid_core::hasis::Error::Corrupt("extent flagged all-visible holds a column row that is deleted, updated, aborted or short"));
        }
    }
}

/// The visibility map against the extent (`vm.rs`): a TID block's bit is
/// set only while the header's map-visible flag is, and the flag only on
/// an extent whose slots hold no dead version (the header's own check
/// covers all-visible and no delta part). The flag without its bits is
/// fine: a crash may keep the one and lose the other's clearing.
unsafe fn check_map(rel: pg_sys::Relation, first: u32, page: &pg_hybrid_core::hasis::HybridPage, vmbuf: &mut pg_sys::Buffer) {
    let h = page.header();
    if h.map_visible {
        if (0..h.slot_hwm).any(|s| page.entry(s) == pg_hybrid_core::hasis::header::DirEntry::Dead) {
            super::format_error(rel, first, pg_hybrid_core::hasis::Error::Corrupt("extent flagged map-visible holds a dead slot"));
        }
        return;
    }
    for b in super::vm::tid_blocks(page.geometry(), first) {
        if super::vm::is_set(rel, b, vmbuf) {
            super::format_error(rel, b, pg_hybrid_core::hasis::Error::Corrupt("visibility-map bit set for a block of an extent not flagged map-visible"));
        }
    }
}

/// Every entry of every index names a slot that holds a version that is not
/// heap-only, a HOT chain's redirect, or a slot whose version compaction
/// removed (its entry waits for VACUUM); an entry naming an unused slot, a
/// heap-only version (reached only through its chain's root) or no slot at
/// all is corruption.
unsafe fn verify_indexes(rel: pg_sys::Relation, meta: &relation::Meta) {
    let mut nindexes = 0;
    let mut irel: *mut pg_sys::Relation = std::ptr::null_mut();
    pg_sys::vac_open_indexes(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE, &mut nindexes, &mut irel);
    for i in 0..nindexes as usize {
        let index = *irel.add(i);
        // Whole-index scans need amgettuple and optional keys (not hash).
        if (*(*index).rd_indam).amgettuple.is_none() || !(*(*index).rd_indam).amoptionalkey {
            continue;
        }
        let scan = pg_sys::index_beginscan(rel, index, &raw mut pg_sys::SnapshotAnyData, 0, 0);
        pg_sys::index_rescan(scan, std::ptr::null_mut(), 0, std::ptr::null_mut(), 0);
        loop {
            let ip = pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if ip.is_null() {
                break;
            }
            let tid = super::visibility::from_item_pointer(&*ip);
            let problem = match relation::ExtentRead::of(rel, meta, tid) {
                None => Some("names no version"),
                Some(ext) => match ext.slot(tid).map(|s| (s, ext.entry(s))) {
                    None | Some((_, DirEntry::Unused)) => Some("names no version"),
                    Some((_, DirEntry::Dead | DirEntry::Redirect { .. })) => None,
                    Some((s, e)) => match ext.version(s, e, Lock::Share) {
                        Some(loc) if super::visibility::is_heap_only(&loc.header.mvcc) => Some("names a heap-only version"),
                        _ => None,
                    },
                },
            };
            if let Some(what) = problem {
                crate::raise(
                    PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                    format!(
                        "index \"{}\" of hasis table \"{}\" has an entry for ({},{}), which {what}",
                        crate::storage::page::rel_name(index),
                        crate::storage::page::rel_name(rel),
                        tid.block,
                        tid.offset
                    ),
                    "REINDEX the index.",
                );
            }
        }
        pg_sys::index_endscan(scan);
    }
    pg_sys::vac_close_indexes(nindexes, irel, pg_sys::NoLock as pg_sys::LOCKMODE);
}

/// Which block of an extent a failed `HybridPage::open` is about, as far as
/// the block trailers tell (0, the header block, when they all check out:
/// the error is in what the header says).
fn failing_block(g: &pg_hybrid_core::hasis::layout::Geometry, blocks: &[&[u8]]) -> u32 {
    use pg_hybrid_core::hasis::header::ExtentHeader;
    use pg_hybrid_core::hasis::layout::{BlockKind, BlockTrailer};
    let Ok(h) = ExtentHeader::read(blocks[0], g) else { return 0 };
    let version = Some(h.version);
    let dirs = (0..g.directory_blocks as usize).map(|i| (g.directory_block(i), BlockKind::Directory));
    let column_blocks = (h.column_units as usize).div_ceil(2);
    let cols = (0..column_blocks).map(|i| (g.column_block(i), BlockKind::Column));
    let deltas = (0..h.delta_used as usize).map(|i| (g.delta_block(i), BlockKind::Delta));
    let bad_trailer = dirs.chain(cols).chain(deltas).find(|&(i, kind)| BlockTrailer::check(blocks[i], kind, i, version).is_err());
    if let Some((i, _)) = bad_trailer {
        return i as u32;
    }
    // Trailers fine: a delta block whose items do not parse.
    (0..h.delta_used as usize)
        .find(|&i| pg_hybrid_core::hasis::delta::DeltaView::parse(blocks[g.delta_block(i)], g, i, version).is_err())
        .map_or(0, |i| g.delta_block(i) as u32)
}
