//! The column scan: a custom scan node that reads only the columns a query
//! needs from a hasis table.
//!
//! PostgreSQL 15's table AM scan API gets no column list, so a sequential
//! scan of a hasis table reads and decodes every column of every row. The
//! planner hook here offers, beside the sequential scan, a `CustomScan`
//! ("Hasis Column Scan") that knows the columns its target list and quals
//! use. It reads, per extent, the header block, the column part's meta
//! mini-page and row headers, the mini-pages of those columns only (one
//! pass each), and the delta part; rows go out as virtual tuples holding
//! those columns. Quals of the form `column op value` on a column with
//! min/max (integers, floats, dates, timestamps) skip a column part whose
//! range cannot match. A partial path of the same scan serves parallel
//! plans: processes take extents from PostgreSQL's block allocator. The
//! planner takes it by cost: it is offered only
//! when it reads fewer bytes than the sequential scan (a part of the
//! columns, or min/max quals), and never for a scan that locks rows, feeds
//! an UPDATE or DELETE, or needs xmin/xmax/cmin/cmax.
//!
//! | file | what |
//! |---|---|
//! | `path.rs` | the planner hook, the path and its cost, the plan |
//! | `exec.rs` | the executor node: extents in, virtual tuples out, parallel DSM, EXPLAIN |
//! | `minmax.rs` | the min/max quals: found at plan time, checked per column part |
//! | `fetch.rs` | column-aware index and bitmap heap fetches: an `ExecutorStart` hook tells them the columns the plan uses |
//! | `cost.rs` | index and bitmap heap paths recosted for the blocks a fetch touches |
//!
//! The hooks find a table's storage through `ColumnStore` (`of`), which
//! hasis's scan module implements, not by asking which AM the table is.
//!
//! `pg_hybrid.enable_hasis_column_scan` (on) turns the path off, as
//! `enable_seqscan` does for PostgreSQL's; `pg_hybrid.enable_hasis_column_fetch`
//! (on) makes fetches read every column again; `pg_hybrid.hasis_fetch_costing`
//! (on) off costs fetches as heap's.

pub mod cost;
pub mod exec;
pub mod fetch;
pub mod minmax;
pub mod path;

use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// The pointer elements of a PostgreSQL `List` (NIL: none), read from the
/// list's array in place: the executor hook (`fetch.rs`) runs for every
/// SELECT of a hasis table, and `list_length`/`list_nth` through the FFI
/// guard cost more than the rest of its walk of a one-table plan.
pub(crate) unsafe fn list_nodes(list: *mut pg_sys::List) -> Vec<*mut pg_sys::Node> {
    if list.is_null() {
        return Vec::new();
    }
    let cells = std::slice::from_raw_parts((*list).elements, (*list).length.max(0) as usize);
    cells.iter().map(|c| c.ptr_value as *mut pg_sys::Node).collect()
}

/// What a fetch of a scan node's plan reads of a version (`fetch.rs`
/// works it out).
pub struct FetchColumns {
    /// The table columns its targets and quals read: `None` for every one
    /// (nothing to gain).
    pub wanted: Option<Vec<bool>>,
    /// `wanted` and the columns of its recheck quals (the original index
    /// quals), which the executor evaluates only on rows the index or the
    /// bitmap marks as needing a recheck: the fetch of such a row reads
    /// these (`scan::index_fetch_tuple`, `scan::bitmap_next_block`).
    pub wanted_recheck: Option<Vec<bool>>,
    /// Whether its MVCC system columns (xmin, xmax, cmin, cmax) are read.
    pub mvcc_needed: bool,
}

/// What a table access method whose fetches can read some columns only
/// gives the fetch hook (`fetch.rs`) and the column scan's planner hook
/// (`path.rs`). They do not ask which AM a table is: `of` gives the
/// table's implementation, or None where its fetches read whole rows.
pub trait ColumnStore: Sync {
    /// Narrows the fetch descriptor the AM's `index_fetch_begin` made
    /// (an index scan's `xs_heapfetch`) to `cols`; `rechecked` is the index
    /// scan whose `xs_recheck` says when a row needs the recheck columns
    /// (null: none does).
    unsafe fn narrow_index_fetch(&self, fetch: *mut pg_sys::IndexFetchTableData, rechecked: pg_sys::IndexScanDesc, cols: FetchColumns);
    /// Narrows a bitmap heap scan the AM's `scan_begin` made to `cols`.
    unsafe fn narrow_bitmap_scan(&self, scan: pg_sys::TableScanDesc, cols: FetchColumns);
}

/// The table access methods with column stores: their routines and
/// implementations.
static STORES: [(&pg_sys::TableAmRoutine, &dyn ColumnStore); 1] = [(&super::handler::ROUTINE, &super::scan::COLUMN_STORE)];

/// The column store of `rel`'s table access method, if it has one.
pub unsafe fn of(rel: pg_sys::Relation) -> Option<&'static dyn ColumnStore> {
    STORES.iter().find(|(routine, _)| std::ptr::eq((*rel).rd_tableam, *routine)).map(|&(_, store)| store)
}

pub static ENABLE: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Called from hasis::init while shared_preload_libraries is processed.
pub unsafe fn init() {
    GucRegistry::define_bool_guc(
        c"pg_hybrid.enable_hasis_column_scan",
        c"Enables the planner's use of hasis column scans (reading only the columns a query needs).",
        c"",
        &ENABLE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_hybrid.hasis_fetch_costing",
        c"Costs index and bitmap heap fetches from hasis tables by the column blocks they touch.",
        c"Off costs them as heap fetches, one page each, as PostgreSQL does.",
        &cost::ENABLE,
        GucContext::Userset,
        GucFlags::default(),
    );
    path::install();
    exec::register();
    fetch::init();
}
