//! Cost estimation: btree's own estimator, since the static stage is a
//! B+tree with the same descent and the same selectivity; being smaller,
//! it costs fewer pages, so the planner prefers it where it would use btree.

use pgrx::pg_sys;

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
    btcostestimate(root, path, loop_count, startup, total, selectivity, correlation, pages);
}
