//! `pg_hybrid.table_stats(regclass)`: what a hasis table's hybrid pages hold.

use pgrx::prelude::*;
use pgrx::pg_sys;

use pg_hybrid_core::hasis::header::{self, DirEntry, ExtentHeader};

use super::relation::{self, bytes};
use crate::storage::buffer::{Buf, Lock};

/// Opens `oid` and checks that it is a hasis table.
pub unsafe fn open_table(oid: pg_sys::Oid, lock: pg_sys::LOCKMODE) -> pg_sys::Relation {
    let rel = pg_sys::relation_open(oid, lock);
    if (*rel).rd_tableam != &raw const super::handler::ROUTINE {
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
    relation_bytes bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'table_stats_wrapper';
COMMENT ON FUNCTION pg_hybrid.table_stats(regclass) IS 'hybrid pages of a hasis table: extents, compactions (page versions past the first), rows in column parts and delta parts, slots waiting for VACUUM';
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
        name!(relation_bytes, i64),
    ),
> {
    unsafe {
        let rel = open_table(tbl, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut t = (0i64, 0i64, 0i64, 0i64, 0i64, 0i64, 0i64, 0i64, 0i64);
        if let Some(meta) = relation::refresh_meta(rel) {
            let g = meta.geometry;
            t.0 = meta.nextents as i64;
            for k in 0..meta.nextents {
                let first = meta.extent_first(k);
                let hbuf = Buf::read(rel, first, Lock::Share);
                let h = ExtentHeader::read(bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e));
                t.1 += h.version as i64;
                t.2 += h.column_rows as i64;
                t.3 += h.column_units as i64;
                t.5 += h.delta_used as i64;
                let mut dir: Option<(usize, Buf)> = None;
                for s in 0..h.slot_hwm {
                    let (bi, _) = g.directory_entry(s);
                    let page = if bi == 0 {
                        hbuf.page()
                    } else {
                        if dir.as_ref().map(|d| d.0) != Some(bi) {
                            dir = Some((bi, Buf::read(rel, first + bi as u32, Lock::Share)));
                        }
                        dir.as_ref().unwrap().1.page()
                    };
                    match header::read_entry(bytes(page), &g, s).unwrap_or_else(|e| super::format_error(rel, first, e)) {
                        DirEntry::Delta { .. } => t.4 += 1,
                        DirEntry::Dead => t.6 += 1,
                        DirEntry::Unused => t.7 += 1,
                        DirEntry::Column { .. } => {}
                    }
                }
            }
        }
        t.8 = (crate::storage::buffer::nblocks(rel) as i64) * pg_sys::BLCKSZ as i64;
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        TableIterator::once(t)
    }
}
