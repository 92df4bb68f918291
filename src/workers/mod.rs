//! Background workers. A merge worker is a dynamic background worker started
//! by the backend whose insert tripped the merge trigger; it connects to the
//! index's database, merges, and exits.

use pgrx::bgworkers::*;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Starts a merge worker for `index_oid` in database `db`. Returns false
/// when no worker slot is free (max_worker_processes).
pub unsafe fn launch_merge_worker(db: pg_sys::Oid, index_oid: pg_sys::Oid) -> bool {
    let db = db.to_u32();
    let r = BackgroundWorkerBuilder::new("pg_hybrid merge")
        .set_type("pg_hybrid merge")
        .set_library("pg_hybrid")
        .set_function("pg_hybrid_merge_worker_main")
        .set_argument(Some(pg_sys::Datum::from(index_oid.to_u32() as i64)))
        .set_extra(&db.to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic();
    r.is_ok()
}

#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_hybrid_merge_worker_main(arg: pg_sys::Datum) {
    let index_oid = pg_sys::Oid::from(arg.value() as u32);
    let db: u32 = BackgroundWorker::get_extra().parse().unwrap_or(0);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
    BackgroundWorker::transaction(|| unsafe {
        // The index may be gone by now; then there is nothing to do.
        let rel = pg_sys::try_relation_open(index_oid, pg_sys::RowExclusiveLock as i32);
        if rel.is_null() {
            return;
        }
        if (*(*rel).rd_rel).relkind as u8 == pg_sys::RELKIND_INDEX
            && crate::hybrid::stats::is_hybrid_index(rel)
        {
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            let out = crate::hybrid::merge::merge_index(rel, crate::hybrid::merge::Reason::Ratio);
            pg_sys::PopActiveSnapshot();
            pgrx::debug1!(
                "pg_hybrid: merged {} entries into index {} in {:.1} ms",
                out.merged_entries,
                index_oid.to_u32(),
                out.millis
            );
        }
        pg_sys::relation_close(rel, pg_sys::RowExclusiveLock as i32);
    });
}
