//! Cost estimation: btree's own estimator, since the static stage is a
//! B+tree with the same descent and the same selectivity; being smaller,
//! it costs fewer pages, so the planner prefers it where it would use btree.
//! A structure with a hash path (`BaseStructure::hash_point_path`) answers
//! equality on every key column from one bucket, as PostgreSQL's hash index
//! does, and is costed as one: no descent. A structure without order
//! answers anything else by reading every bucket (`BaseStructure::ordered`)
//! and is costed so.

use pgrx::pg_sys;

use super::ams;

extern "C-unwind" {
    fn btcostestimate(
        root: *mut pg_sys::PlannerInfo,
        path: *mut pg_sys::IndexPath,
        loop_count: f64,
        startup: *mut pg_sys::Cost,
        total: *mut pg_sys::Cost,
        selectivity: *mut pg_sys::Selectivity,
        correlation: *mut f64,
        pages: *mut f64,
    );
    fn hashcostestimate(
        root: *mut pg_sys::PlannerInfo,
        path: *mut pg_sys::IndexPath,
        loop_count: f64,
        startup: *mut pg_sys::Cost,
        total: *mut pg_sys::Cost,
        selectivity: *mut pg_sys::Selectivity,
        correlation: *mut f64,
        pages: *mut f64,
    );
}

/// Whether the path's conditions are `=` (btree strategy 3, no arrays) on
/// every key column, so the scan is a point lookup.
unsafe fn equality_on_every_key_column(path: *mut pg_sys::IndexPath) -> bool {
    let info = (*path).indexinfo;
    let ncols = (*info).nkeycolumns as usize;
    let mut covered = vec![false; ncols];
    let clauses = pgrx::PgList::<pg_sys::IndexClause>::from_pg((*path).indexclauses);
    for ic in clauses.iter_ptr() {
        let col = (*ic).indexcol as usize;
        if col >= ncols {
            continue;
        }
        let quals = pgrx::PgList::<pg_sys::Node>::from_pg((*ic).indexquals);
        for q in quals.iter_ptr() {
            if (*q).type_ != pg_sys::NodeTag::T_OpExpr {
                continue;
            }
            let opno = (*(q as *mut pg_sys::OpExpr)).opno;
            if pg_sys::get_op_opfamily_strategy(opno, *(*info).opfamily.add(col)) == pg_sys::BTEqualStrategyNumber as i32 {
                covered[col] = true;
            }
        }
    }
    ncols > 0 && covered.iter().all(|&c| c)
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amcostestimate(
    root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    loop_count: f64,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) {
    let base = ams::base_for_am((*(*path).indexinfo).relam);
    let hash_path = base.is_some_and(|b| b.hash_point_path());
    let ordered = base.is_none_or(|b| b.ordered());
    let point = equality_on_every_key_column(path);
    if hash_path && point {
        hashcostestimate(root, path, loop_count, startup, total, selectivity, correlation, pages);
    } else if ordered {
        btcostestimate(root, path, loop_count, startup, total, selectivity, correlation, pages);
    } else {
        // No order and not every key column bound: the scan reads every
        // bucket and sorts what matches before it returns a row.
        hashcostestimate(root, path, loop_count, startup, total, selectivity, correlation, pages);
        let info = (*path).indexinfo;
        let walk = (*info).pages as f64 * pg_sys::seq_page_cost + (*info).tuples * pg_sys::cpu_index_tuple_cost;
        let matched = ((*info).tuples * *selectivity).max(1.0);
        let sort = 2.0 * pg_sys::cpu_operator_cost * matched * matched.log2().max(1.0);
        *startup = walk + sort;
        *total = *startup + matched * pg_sys::cpu_index_tuple_cost;
        *pages = (*info).pages as f64;
    }
}
