//! Background workers. A merge worker is a dynamic background worker started
//! by the backend whose insert tripped the merge trigger; it connects to the
//! index's database, merges, and exits. Its body is the engine's
//! (`engine::worker`); this module only starts it. `launch` starts any
//! other per-relation worker (hasis's compaction worker).

use pgrx::bgworkers::*;
use pgrx::pg_sys;

/// Starts a merge worker for `index_oid` in database `db`. Returns false
/// when no worker slot is free (max_worker_processes).
pub unsafe fn launch_merge_worker(db: pg_sys::Oid, index_oid: pg_sys::Oid) -> bool {
    launch("pg_hybrid merge", "pg_hybrid_merge_worker_main", db, index_oid)
}

/// Starts the dynamic background worker `function` (an exported symbol of
/// this library) for relation `relid` of database `db`. Returns false
/// when no worker slot is free (max_worker_processes).
pub unsafe fn launch(name: &str, function: &str, db: pg_sys::Oid, relid: pg_sys::Oid) -> bool {
    BackgroundWorkerBuilder::new(name)
        .set_type(name)
        .set_library("pg_hybrid")
        .set_function(function)
        .set_argument(Some(pg_sys::Datum::from(relid.to_u32() as i64)))
        .set_extra(&db.to_u32().to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic()
        .is_ok()
}

/// The start of a worker `launch` started: signal handlers, the connection
/// to its database; returns the relation it is for.
pub fn attach(arg: pg_sys::Datum) -> pg_sys::Oid {
    let relid = pg_sys::Oid::from(arg.value() as u32);
    let db: u32 = BackgroundWorker::get_extra().parse().unwrap_or(0);
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
    relid
}
