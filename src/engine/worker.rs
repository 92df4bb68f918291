//! The body of the merge worker that `workers::launch_merge_worker` starts.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_hybrid_merge_worker_main(arg: pg_sys::Datum) {
    let index_oid = crate::workers::attach(arg);
    // A transaction of our own rather than BackgroundWorker::transaction,
    // which pushes a snapshot for the whole body (why none, below). An
    // ERROR ends the worker, and process exit aborts the transaction.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
    }
    unsafe {
        // The index may be gone by now; then there is nothing to do.
        let rel = pg_sys::try_relation_open(index_oid, pg_sys::RowExclusiveLock as i32);
        if rel.is_null() {
            pg_sys::CommitTransactionCommand();
            return;
        }
        if super::ams::base_of(rel).is_some() {
            // No snapshot for the merge: it reads index pages, not rows, and
            // a snapshot held for its length (hundreds of ms, back to back
            // under heavy writes) would hold back the xmin horizon, so the
            // versions that hot keys leave behind meanwhile could not be
            // found dead to all, and unique checks and scans would walk ever
            // more of them (killed.rs). The catalog snapshot the open took
            // goes too (and again at each merge step). What needs a snapshot
            // (a key fetch that detoasts) takes its own for that moment.
            pg_sys::InvalidateCatalogSnapshot();
            let out = super::merge::merge_index(rel, super::merge::Reason::Ratio);
            pgrx::debug1!(
                "pg_hybrid: merged {} entries into index {} in {:.1} ms",
                out.merged_entries,
                index_oid.to_u32(),
                out.millis
            );
        }
        pg_sys::relation_close(rel, pg_sys::RowExclusiveLock as i32);
        pg_sys::CommitTransactionCommand();
    }
}
