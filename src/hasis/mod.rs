//! hasis: the table access method of hybrid pages (HaSiS, FAST'25).
//!
//! The page formats, slot/TID mapping and compaction live in
//! `pg_hybrid_core::hasis` (plain Rust, README there). This folder is the
//! PostgreSQL glue, one file per callback family:
//!
//! | file | what |
//! |---|---|
//! | `handler.rs` | the `TableAmRoutine` and the SQL declaration |
//! | `relation.rs` | metapage, extents on buffers, insert, point reads, stamps (WAL: GenericXLog) |
//! | `tuple.rs` | slot <-> core row (TOAST, missing attributes, system columns) |
//! | `visibility.rs` | heap's visibility rules applied to a row header |
//! | `dml.rs` | delete, update, row locks, EvalPlanQual's chain walk |
//! | `scan.rs` | sequential, parallel, bitmap, TID and ANALYZE scans, index fetches |
//! | `colscan/` | the column scan: a custom scan that reads only the columns a query needs |
//! | `compact.rs` | major compaction: heap's vacuum rules as the core's oracle, the pages, the COMPACT record |
//! | `build.rs` | CREATE INDEX's table scan |
//! | `bulk.rs` | bulk inserts fill an extent only as far as its column part takes the rows |
//! | `worker.rs` | the background compaction worker |
//! | `wal.rs` | hasis's WAL resource manager: insert and stamp records |
//! | `logical.rs` | logical decoding: the LOGICAL record beside each row change, the rmgr's decode callback |
//! | `options.rs` | the `hasis_*` reloptions and their DDL check |
//! | `ddl.rs` | new storage, TRUNCATE, SET TABLESPACE, CLUSTER / VACUUM FULL, VACUUM, size estimates |
//!
//! README.md beside this file states the locking protocol and what does not
//! work yet.

pub mod build;
pub mod bulk;
pub mod colscan;
pub mod compact;
pub mod ddl;
pub mod dml;
pub mod handler;
pub mod logical;
pub mod options;
pub mod relation;
pub mod scan;
pub mod stats;
pub mod tuple;
pub mod visibility;
pub mod vm;
pub mod wal;
pub mod worker;

/// Called from _PG_init while shared_preload_libraries is processed.
pub unsafe fn init() {
    wal::register();
    options::register();
    worker::define_gucs();
    compact::define_gucs();
    relation::define_gucs();
    colscan::init();
}

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::Error as FormatError;

/// Raises a hasis format error as an ERROR naming the relation and block.
pub unsafe fn format_error(rel: pg_sys::Relation, blkno: u32, e: FormatError) -> ! {
    let name = crate::storage::page::rel_name(rel);
    match e {
        FormatError::RowTooWide { len, max } => crate::raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("row of {len} bytes is too wide for a hasis table (at most {max} bytes after TOAST)"),
            format!("Store the wide columns of \"{name}\" with a toastable type (text, bytea, jsonb), or use a heap table."),
        ),
        other => crate::raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("corrupt hasis page in table \"{name}\" at block {blkno}: {other}"),
            "Restore the table from a backup; pg_hybrid.verify_table() lists what is damaged.",
        ),
    }
}
