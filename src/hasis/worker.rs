//! The background compaction worker (the paper's major compaction off the
//! insert path).
//!
//! An insert that leaves its extent's delta part at `compact_trigger`
//! blocks or more asks for a worker (`request`): at most once per
//! relation per `REQUEST_INTERVAL` per backend, and only when no worker
//! holds the table's worker lock (a session lock it keeps for its life, so
//! a table has one worker). The worker is a dynamic background worker
//! (workers/mod.rs) connected to the table's database. Each pass takes the
//! compaction lock (ShareUpdateExclusiveLock, conditionally: a running
//! VACUUM or DDL makes it leave; VACUUM compacts every extent itself) and
//! passes over the extent headers, compacting each
//! extent whose delta part has reached the trigger, each pass in a
//! transaction of its own. An extent is compacted at most once per
//! `EXTENT_INTERVAL`: a small, hot table (pgbench's branches) refills its
//! delta part faster than that, and each compaction logs the extent's
//! rows, so back-to-back compactions would cost more WAL than they save.
//! An extent whose compaction gains nothing yet (its delta versions are
//! still needed: a load in progress, old snapshots) is tried again after
//! `RETRY_AFTER`. The worker leaves after `IDLE_PASSES` passes with no
//! extent due, or after `LINGER` without progress while some are due
//! (a load that will not commit soon; VACUUM compacts what is left).
//!
//! Inserts still compact in the foreground when a delta part is entirely
//! full (relation.rs): the worker may be late, absent (no free worker
//! slot: max_worker_processes) or locked out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pgrx::bgworkers::*;
use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::header::ExtentHeader;

use super::relation::{self, bytes};
use crate::storage::buffer::{Buf, Lock};

/// How often one backend may ask for a worker for one relation.
const REQUEST_INTERVAL: Duration = Duration::from_millis(200);
/// Passes with no extent due before the worker leaves (3 s: long enough
/// that a steady workload keeps one worker instead of starting new ones,
/// short enough that DROP DATABASE, which waits 5 s for the database's
/// sessions to end, finds it gone), and the pause between passes.
const IDLE_PASSES: u32 = 30;
const PASS_PAUSE_MS: i64 = 100;
/// When an extent whose compaction gained nothing is tried again (doubling
/// at each further failure, up to the worker's life).
const RETRY_AFTER: Duration = Duration::from_millis(1000);
/// The least time between two compactions of one extent by a worker.
const EXTENT_INTERVAL: Duration = Duration::from_millis(1000);
/// How long a worker waits for due extents to become compactable.
const LINGER: Duration = Duration::from_secs(3);

/// What one pass did.
struct Pass {
    compacted: usize,
    /// Extents due but not compacted (too soon, or nothing to gain yet).
    waiting: usize,
}

/// The lock a worker's pass takes, which keeps workers out of VACUUM's and
/// DDL's way.
const COMPACTION_LOCK: pg_sys::LOCKMODE = pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE;

/// The lock a worker holds for its whole life, so one table has one
/// worker: an advisory lock tag of its own (field 4 tells it from the
/// advisory locks of pg_advisory_lock, which use 1 and 2), taken as a
/// session lock (the worker's passes commit in between).
fn worker_tag(relid: pg_sys::Oid) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: relid.to_u32(),
        locktag_field3: 0,
        locktag_field4: 0x4843, // "HC": hasis compaction
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    }
}

/// Takes (`keep`) or only tests the table's worker lock, without waiting.
unsafe fn worker_lock(relid: pg_sys::Oid, keep: bool) -> bool {
    let tag = worker_tag(relid);
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    if pg_sys::LockAcquire(&tag, mode, true, true) == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
        return false;
    }
    if !keep {
        pg_sys::LockRelease(&tag, mode, true);
    }
    true
}

static mut LAST_REQUEST: Option<HashMap<pg_sys::Oid, Instant>> = None;

/// Whether background compaction is on (GUC pg_hybrid.hasis_compaction_worker).
pub static COMPACTION_WORKER: pgrx::GucSetting<bool> = pgrx::GucSetting::<bool>::new(true);

pub fn define_gucs() {
    pgrx::GucRegistry::define_bool_guc(
        c"pg_hybrid.hasis_compaction_worker",
        c"Compact hasis hybrid pages in a background worker once their delta part reaches hasis_compact_trigger.",
        c"Off: inserts compact an extent only when its delta part is full, and VACUUM compacts every extent.",
        &COMPACTION_WORKER,
        pgrx::GucContext::Userset,
        pgrx::GucFlags::default(),
    );
}

/// Called after an insert left extent delta parts at the trigger: starts a
/// worker for the relation unless one ran recently or is running.
pub unsafe fn request(rel: pg_sys::Relation) {
    if !COMPACTION_WORKER.get() || crate::storage::buffer::relation_is_local(rel) || super::compact::file_private_to_xact(rel) || pg_sys::RecoveryInProgress() {
        return;
    }
    let relid = (*rel).rd_id;
    let now = Instant::now();
    let last = (*(&raw mut LAST_REQUEST)).get_or_insert_with(HashMap::new);
    if last.get(&relid).is_some_and(|t| now.duration_since(*t) < REQUEST_INTERVAL) {
        return;
    }
    last.insert(relid, now);
    // A running worker holds the table's worker lock for its whole life.
    if !worker_lock(relid, false) {
        return;
    }
    crate::workers::launch("pg_hybrid hasis compaction", "pg_hybrid_hasis_compaction_main", pg_sys::MyDatabaseId, relid);
}

/// One pass: compacts the extents that are due. None when the worker
/// should leave (relation gone, lock taken by someone else).
/// `not_before`: per extent, when it may be tried again.
unsafe fn pass(relid: pg_sys::Oid, not_before: &mut HashMap<u32, (Instant, Duration)>) -> Option<Pass> {
    let rel = pg_sys::try_relation_open(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    if rel.is_null() {
        return None;
    }
    if !super::handler::is_hasis(rel) || !pg_sys::ConditionalLockRelationOid(relid, COMPACTION_LOCK) {
        pg_sys::relation_close(rel, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        return None;
    }
    // No snapshot: compaction reads versions' MVCC fields, not data
    // visible to a snapshot, and one held here would hold back the horizon
    // that decides what compaction may remove.
    pg_sys::InvalidateCatalogSnapshot();
    let mut done = Pass { compacted: 0, waiting: 0 };
    if let Some(meta) = relation::refresh_meta(rel) {
        let g = meta.geometry;
        for k in 0..meta.nextents {
            pgrx::check_for_interrupts!();
            // SIGTERM (DROP DATABASE, which waits 5 s for the database's
            // processes; a fast shutdown) sets pgrx's flag, not
            // ProcDiePending: leave between two compactions, each of which
            // is atomic, rather than after a pass over every extent.
            if BackgroundWorker::sigterm_received() {
                break;
            }
            let first = meta.extent_first(k);
            let due = {
                let h = Buf::read(rel, first, Lock::Share);
                ExtentHeader::read(bytes(h.page()), &g).map(|h| h.compaction_due(&g)).unwrap_or(false)
            };
            if !due {
                continue;
            }
            if not_before.get(&k).is_some_and(|(t, _)| Instant::now() < *t) {
                done.waiting += 1;
                continue;
            }
            let hbuf = Buf::read(rel, first, Lock::Exclusive);
            let promising = match ExtentHeader::read(bytes(hbuf.page()), &g) {
                Ok(h) => super::compact::may_free_delta_block(rel, &meta, first, &h),
                Err(_) => true, // compaction reports the corruption
            };
            let compacted = if promising { super::compact::compact_extent(rel, &meta, k, &hbuf, super::compact::Goal::Room) } else { None };
            match compacted {
                Some(c) => {
                    relation::record_free_space(rel, &g, first, &c);
                    not_before.insert(k, (Instant::now() + EXTENT_INTERVAL, Duration::ZERO));
                    done.compacted += 1;
                }
                None => {
                    let delay = not_before.get(&k).map_or(RETRY_AFTER, |(_, d)| (*d * 2).max(RETRY_AFTER));
                    not_before.insert(k, (Instant::now() + delay, delay));
                    done.waiting += 1;
                }
            }
        }
    }
    pg_sys::relation_close(rel, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    Some(done)
}

extern "C" {
    fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
}

/// glibc's M_TRIM_THRESHOLD and M_MMAP_THRESHOLD.
const M_TRIM_THRESHOLD: std::ffi::c_int = -1;
const M_MMAP_THRESHOLD: std::ffi::c_int = -3;

/// Has this process's allocator keep what it frees. A compaction
/// allocates and frees a few hundred KB (the decoded rows, the new blocks,
/// the record) per extent; by default glibc maps the largest of these
/// afresh each time and hands the top of its heap back to the kernel, and
/// the pages fault in again at the next extent: 6% of a compaction's time
/// (core/examples/compact_bench). The worker is a process of its own, so
/// this changes nothing for backends.
fn keep_freed_memory() {
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 64 << 20);
    }
}

#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_hybrid_hasis_compaction_main(arg: pg_sys::Datum) {
    keep_freed_memory();
    let relid = crate::workers::attach(arg);
    // A second worker for the table leaves at once (requests race).
    if unsafe { !worker_lock(relid, true) } {
        return;
    }
    let mut not_before = HashMap::new();
    let mut idle = 0;
    let mut total = 0usize;
    let mut progress_at = Instant::now();
    while idle < IDLE_PASSES && progress_at.elapsed() < LINGER && !BackgroundWorker::sigterm_received() {
        let done = unsafe {
            pg_sys::SetCurrentStatementStartTimestamp();
            pg_sys::StartTransactionCommand();
            let d = pass(relid, &mut not_before);
            pg_sys::CommitTransactionCommand();
            d
        };
        let Some(done) = done else { break };
        if done.compacted > 0 {
            total += done.compacted;
            progress_at = Instant::now();
        }
        if done.compacted == 0 && done.waiting == 0 {
            idle += 1;
        } else {
            idle = 0;
        }
        BackgroundWorker::wait_latch(Some(Duration::from_millis(PASS_PAUSE_MS as u64)));
    }
    pgrx::debug1!("pg_hybrid: hasis compaction worker compacted {total} extents of relation {}", relid.to_u32());
}
