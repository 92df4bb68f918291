//! elastic_btree: a B+tree whose leaves turn into compact SeqTree leaves
//! under a size bound (Hershcovitch et al., EDBT 2022), behind hybrid_btree's
//! dynamic stage. The algorithm is `pg_hybrid_core::elastic`; this module is
//! the PostgreSQL side: the page pool, heap key fetches, reloptions, the
//! cursor hybrid's scans use, and the handler. Everything else (delta log,
//! shared-memory stage, merges, VACUUM, unique checks, ON CONFLICT) is
//! hybrid_btree's code, which asks `is_elastic` where the two differ.
//! Layout and protocols: README.md.

pub mod fetch;
pub mod handler;
pub mod options;
pub mod pool;
pub mod scan;
pub mod tree;

use pgrx::pg_sys;

pub const DEFAULT_MERGE_RATIO: i32 = 10;

thread_local! {
    /// (hybrid_btree, elastic_btree) pg_am OIDs in this backend's database.
    static AM_OIDS: std::cell::Cell<(pg_sys::Oid, pg_sys::Oid)> = const { std::cell::Cell::new((pg_sys::InvalidOid, pg_sys::InvalidOid)) };
}

/// Whether `rel` (one of our indexes) is an elastic_btree index. The OIDs
/// are looked up again when `relam` matches neither, so a re-created
/// extension is seen.
pub unsafe fn is_elastic(rel: pg_sys::Relation) -> bool {
    let relam = (*(*rel).rd_rel).relam;
    let (h, e) = AM_OIDS.with(|c| c.get());
    if relam == e && e != pg_sys::InvalidOid {
        return true;
    }
    if relam == h && h != pg_sys::InvalidOid {
        return false;
    }
    let h = pg_sys::get_index_am_oid(c"hybrid_btree".as_ptr(), true);
    let e = pg_sys::get_index_am_oid(c"elastic_btree".as_ptr(), true);
    AM_OIDS.with(|c| c.set((h, e)));
    relam == e && e != pg_sys::InvalidOid
}

/// Raises the ERROR for key columns elastic_btree cannot order by bytes.
pub unsafe fn check_keys(index: pg_sys::Relation, desc: &crate::keys::IndexDesc) {
    fetch::check_fetchable(index);
    if desc.natts > desc.nkeyatts {
        crate::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("elastic_btree index \"{}\" cannot have INCLUDE columns", crate::storage::page::rel_name(index)),
            "Entries of compact leaves are ordered by all their bytes, which INCLUDE payloads would take part in. Make the columns key columns, or use hybrid_btree for covering indexes.",
        );
    }
    if let Some(c) = desc.cols.iter().position(|c| c.kind == pg_hybrid_core::keys::ColumnKind::Opaque) {
        let typ = std::ffi::CStr::from_ptr(pg_sys::format_type_be(desc.cols[c].typid)).to_string_lossy().into_owned();
        crate::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("elastic_btree cannot index column {} of type {typ} in index \"{}\": its order is not the order of its bytes", c + 1, crate::storage::page::rel_name(index)),
            "Compact leaves need keys whose byte order is the index order: int2/4/8, float4/8, bool, bytea, uuid, date, time, timestamp(tz), interval, and text/varchar with COLLATE \"C\" (e.g. CREATE INDEX ... USING elastic_btree (name COLLATE \"C\")). numeric, bpchar and text under other collations need hybrid_btree.",
        );
    }
}
