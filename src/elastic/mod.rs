//! elastic_btree: a B+tree whose leaves turn into compact SeqTree leaves
//! under a size bound (Hershcovitch et al., EDBT 2022), as the base
//! structure of the staged-index engine (src/engine). The algorithm is
//! `pg_hybrid_core::elastic`; this folder is the PostgreSQL side:
//!
//! - `structure.rs`: the `BaseStructure` (build, merge in place, VACUUM, verify, stats)
//! - `scan.rs`: the `BaseCursor` over both leaf forms
//! - `tree.rs`: opening and driving the core tree over buffers
//! - `pool.rs`: the core's PagePool over PostgreSQL buffers and GenericXLog
//! - `fetch.rs`: heap key fetches for compact leaves
//! - `options.rs`: reloptions; `handler.rs`: the AM handler
//!
//! Layout and protocols: README.md.

pub mod fetch;
pub mod handler;
pub mod options;
pub mod pool;
pub mod scan;
pub mod structure;
pub mod tree;

use pgrx::pg_sys;

pub const DEFAULT_MERGE_RATIO: i32 = 10;

/// Registers the AM with the engine and its reloptions; from `_PG_init`.
pub unsafe fn init() {
    options::register();
    crate::engine::ams::register(&structure::ELASTIC);
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
