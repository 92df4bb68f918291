//! What an index or bitmap fetch from a hasis table costs, for the planner.
//!
//! PostgreSQL costs a heap fetch as one page: a heap tuple sits in one
//! block. A hasis version in a column part is spread over one mini-page per
//! column, so fetching it touches the extent's header block, the block of
//! its row header (and the meta mini-page's, unless this backend knows the
//! layout) and one block per column read (`fetch.rs` reads only the
//! columns the plan uses). Costed as heap fetches, nested loops of index
//! probes into a hasis table look as cheap as into heap and run several
//! times slower: TPC-H Q9's probes of lineitem (6 of 16 columns) took 17 µs
//! a row against heap's 3.3 µs, its probes of orders (2 of 9) 10 µs
//! against 4 µs, while a hash join over column scans would not have paid
//! that. So the hook here scales the block reads of an index or bitmap
//! heap path's cost (what is neither the index's own nor per-row CPU) by
//! `fetch_factor`, and lets `add_path` choose again.
//!
//! The factor was first calibrated on those two probes (2026-11-28). Since
//! then a fetch from an all-visible part reads no row header (index scans,
//! and bitmap heap scans' exact pages) and no column only an index qual
//! needs unless the row is to be rechecked (`xs_recheck`, a bitmap page's
//! `recheck`), and the factor
//! counts the row header only for the share of the table that is not
//! all-visible (the visibility map's, `allvisfrac`): TPC-H Q19's probes of
//! lineitem (5 columns, all-visible) ran at about 2.5× heap's time per
//! fetch (the old factor said 5.1 and the planner took a hash join over a
//! column scan that ran 4× slower than the probes), Q17's bitmap probes of
//! one column at about 1.6×.

use pgrx::pg_sys;
use pgrx::GucSetting;

/// `pg_hybrid.hasis_fetch_costing`: off costs fetches from hasis tables as
/// heap fetches (PostgreSQL's own model).
pub static ENABLE: GucSetting<bool> = GucSetting::<bool>::new(true);

/// What a column-part fetch costs relative to a heap fetch, when the plan
/// reads `columns` columns of a table whose share `all_visible` of blocks
/// is all-visible: the extent's header block (1), the row header's block
/// where the part is not all-visible, and about 0.45 a column (narrow
/// columns share blocks; a block of a column part costs what a heap block
/// does to pin and read, less to decode). Before header-free fetches this
/// gives 4.7 for Q9's 6 columns (measured 5.2) and 2.9 for 2 (2.5); for
/// all-visible tables 3.25 for Q19's 5 (about 2.5) and 1.45 for Q17's one
/// (1.6).
pub fn fetch_factor(columns: usize, all_visible: f64) -> f64 {
    1.0 + (1.0 - all_visible.clamp(0.0, 1.0)) + 0.45 * columns as f64
}

/// What of a path's cost is its index's (or bitmap's) own, and what
/// fraction of the table it fetches: None for paths that fetch nothing
/// from the table.
unsafe fn index_share(p: *mut pg_sys::Path) -> Option<(f64, f64)> {
    let of_qual = |q: *mut pg_sys::Path| match (*q).type_ {
        // cost_bitmap_tree_node's view of a bitmap: an index's own total
        // cost, or an AND/OR node's path cost.
        pg_sys::NodeTag::T_IndexPath => ((*(q as *mut pg_sys::IndexPath)).indextotalcost, (*(q as *mut pg_sys::IndexPath)).indexselectivity),
        pg_sys::NodeTag::T_BitmapAndPath => ((*q).total_cost, (*(q as *mut pg_sys::BitmapAndPath)).bitmapselectivity),
        pg_sys::NodeTag::T_BitmapOrPath => ((*q).total_cost, (*(q as *mut pg_sys::BitmapOrPath)).bitmapselectivity),
        _ => ((*q).total_cost, 1.0),
    };
    match (*p).type_ {
        pg_sys::NodeTag::T_IndexPath => Some(of_qual(p)),
        pg_sys::NodeTag::T_BitmapHeapPath => Some(of_qual((*(p as *mut pg_sys::BitmapHeapPath)).bitmapqual)),
        _ => None,
    }
}

/// The correlation ANALYZE found between the table order and the leading
/// column of `index` (what btcostestimate reads): 0 without statistics or
/// for an expression.
unsafe fn leading_correlation(index: *mut pg_sys::IndexOptInfo, relid: pg_sys::Oid, inh: bool) -> f64 {
    if index.is_null() || (*index).ncolumns < 1 || (*index).indexkeys.is_null() {
        return 0.0;
    }
    let attno = *(*index).indexkeys;
    if attno <= 0 {
        return 0.0;
    }
    let tuple = pg_sys::SearchSysCache3(
        pg_sys::SysCacheIdentifier::STATRELATTINH as i32,
        pg_sys::Datum::from(relid),
        pg_sys::Datum::from(attno as i16),
        pg_sys::Datum::from(inh),
    );
    if tuple.is_null() {
        return 0.0;
    }
    let mut slot = pg_sys::AttStatsSlot::default();
    let mut c = 0.0;
    if pg_sys::get_attstatsslot(&mut slot, tuple, pg_sys::STATISTIC_KIND_CORRELATION as i32, pg_sys::InvalidOid, pg_sys::ATTSTATSSLOT_NUMBERS as i32) {
        if slot.nnumbers == 1 && !slot.numbers.is_null() {
            c = *slot.numbers as f64;
        }
        pg_sys::free_attstatsslot(&mut slot);
    }
    pg_sys::ReleaseSysCache(tuple);
    c
}

/// Scales the block reads of every index and bitmap heap path of `rel` by
/// `factor` and offers every path to `add_path` (`add_partial_path`)
/// again, so the list keeps what is cheapest recosted. A path's block
/// reads are what its cost has beyond its index's own and the per-row CPU
/// (cost_index's and cost_bitmap_heap_scan's `cpu_tuple_cost` and
/// restriction quals per fetched row): scaling the CPU too would price a
/// well-correlated scan, whose rows share the few blocks they read (an
/// `EXISTS` probe of lineitem by order key), as if each row read its own.
///
/// An index scan's scaling fades with the square of its index's
/// correlation, as cost_index interpolates between its uncorrelated and
/// its perfectly correlated page counts: rows in table order share their
/// column blocks, and a probe of the next key finds them in the buffer
/// pool. A bitmap heap scan is scaled in full: it reads in block order
/// already, and PostgreSQL's cost of it counts pages, not rows.
pub unsafe fn recost_fetches(root: *mut pg_sys::PlannerInfo, rel: *mut pg_sys::RelOptInfo, relid: pg_sys::Oid, inh: bool, factor: f64) {
    if factor <= 1.0 {
        return;
    }
    let mut quals: pg_sys::QualCost = std::mem::zeroed();
    pg_sys::cost_qual_eval(&mut quals, (*rel).baserestrictinfo, root);
    let cpu_per_row = pg_sys::cpu_tuple_cost + quals.per_tuple;
    let tuples = (*rel).tuples.max(1.0);
    let scale = |paths: &[*mut pg_sys::Path]| {
        // Shares first: an index path may also be the bitmap's qual.
        let shares: Vec<Option<(f64, f64)>> = paths.iter().map(|&p| index_share(p)).collect();
        for (&p, share) in paths.iter().zip(shares) {
            if let Some((own, selectivity)) = share {
                let cpu = cpu_per_row * selectivity * tuples;
                let blocks = ((*p).total_cost - own - cpu).max(0.0);
                let spread = match (*p).type_ {
                    pg_sys::NodeTag::T_IndexPath => {
                        let c = leading_correlation((*(p as *mut pg_sys::IndexPath)).indexinfo, relid, inh);
                        1.0 - c * c
                    }
                    _ => 1.0,
                };
                (*p).total_cost += blocks * (factor - 1.0) * spread;
            }
        }
    };
    // The complete paths, then the partial ones (parallel plans).
    let lists: [(*mut *mut pg_sys::List, unsafe fn(*mut pg_sys::RelOptInfo, *mut pg_sys::Path)); 2] =
        [(&raw mut (*rel).pathlist, pg_sys::add_path), (&raw mut (*rel).partial_pathlist, pg_sys::add_partial_path)];
    for (list, add) in lists {
        let paths = super::list_nodes(*list).into_iter().map(|n| n as *mut pg_sys::Path).collect::<Vec<_>>();
        if paths.iter().any(|&p| index_share(p).is_some()) {
            scale(&paths);
            *list = std::ptr::null_mut();
            for p in paths {
                add(rel, p);
            }
        }
    }
}
