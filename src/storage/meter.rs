//! `pg_hybrid.storage_stats(regclass, boolean)`: what a drive with transparent
//! compression would store for a relation (design.md §6).
//!
//! Reads each fork's blocks through the storage manager (never through
//! shared buffers, so a large relation does not evict anything) after
//! writing the relation's dirty buffers out, and charges every 4 KB block
//! as zram does (`pg_hybrid_core::csd_meter`). Works for any relation with
//! storage, of any access method: heap and hasis tables, indexes, TOAST
//! tables, materialized views, sequences.

use pgrx::prelude::*;
use pgrx::pg_sys;

use pg_hybrid_core::csd_meter::Meter;

const FORKS: [(pg_sys::ForkNumber::Type, &str); 4] = [
    (pg_sys::ForkNumber::MAIN_FORKNUM, "main"),
    (pg_sys::ForkNumber::FSM_FORKNUM, "fsm"),
    (pg_sys::ForkNumber::VISIBILITYMAP_FORKNUM, "vm"),
    (pg_sys::ForkNumber::INIT_FORKNUM, "init"),
];

/// One output row: a fork of one relation.
struct ForkFigures {
    relation: pg_sys::Oid,
    fork: &'static str,
    meter: Meter,
}

unsafe fn has_storage(rel: pg_sys::Relation) -> bool {
    let kind = (*(*rel).rd_rel).relkind as u8;
    [pg_sys::RELKIND_RELATION, pg_sys::RELKIND_INDEX, pg_sys::RELKIND_SEQUENCE, pg_sys::RELKIND_TOASTVALUE, pg_sys::RELKIND_MATVIEW]
        .iter()
        .any(|&k| k as u8 == kind)
}

/// Meters every fork of the relation `oid` (which the caller has not
/// locked) and appends a row per existing fork.
unsafe fn meter_relation(oid: pg_sys::Oid, out: &mut Vec<ForkFigures>) {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let rel = crate::open_relation(oid, lock);
    if (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_TEMP as i8 && !(*rel).rd_islocaltemp {
        let name = super::page::rel_name(rel);
        pg_sys::relation_close(rel, lock);
        crate::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("cannot meter temporary relation \"{name}\" of another session"),
            "Run pg_hybrid.storage_stats in the session that created the temporary table.",
        );
    }
    if has_storage(rel) {
        // The figure is of the current content: what the drive holds once
        // the dirty buffers reach it (the next checkpoint writes the same).
        pg_sys::FlushRelationBuffers(rel);
        let smgr = super::buffer::smgr(rel);
        let mut block = vec![0u8; pg_sys::BLCKSZ as usize];
        for (fork, name) in FORKS {
            if !pg_sys::smgrexists(smgr, fork) {
                continue;
            }
            let mut meter = Meter::new();
            let nblocks = pg_sys::smgrnblocks(smgr, fork);
            for blk in 0..nblocks {
                pgrx::check_for_interrupts!();
                pg_sys::smgrread(smgr, fork, blk, block.as_mut_ptr() as *mut std::os::raw::c_char);
                meter.add(&block);
            }
            out.push(ForkFigures { relation: oid, fork: name, meter });
        }
    }
    pg_sys::relation_close(rel, lock);
}

/// The relation itself, then (with `with_dependents`) its TOAST table, the
/// TOAST table's index and the relation's indexes, as
/// `pg_total_relation_size` counts them.
unsafe fn relations_to_meter(oid: pg_sys::Oid, with_dependents: bool) -> Vec<pg_sys::Oid> {
    let mut oids = vec![oid];
    if !with_dependents {
        return oids;
    }
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let rel = crate::open_relation(oid, lock);
    let index_oids = |r: pg_sys::Relation, into: &mut Vec<pg_sys::Oid>| {
        let list = pg_sys::RelationGetIndexList(r);
        for i in 0..pg_sys::list_length(list) {
            into.push(pg_sys::list_nth_oid(list, i));
        }
        pg_sys::list_free(list);
    };
    let toast = (*(*rel).rd_rel).reltoastrelid;
    if toast != pg_sys::InvalidOid {
        oids.push(toast);
        let trel = pg_sys::relation_open(toast, lock);
        index_oids(trel, &mut oids);
        pg_sys::relation_close(trel, lock);
    }
    if (*(*rel).rd_rel).relhasindex {
        index_oids(rel, &mut oids);
    }
    pg_sys::relation_close(rel, lock);
    oids
}

#[pg_extern(sql = "
CREATE FUNCTION pg_hybrid.storage_stats(rel regclass, with_dependents boolean DEFAULT false) RETURNS TABLE (
    relation regclass, fork text, logical_bytes bigint, physical_bytes bigint,
    blocks_4k bigint, free_blocks_4k bigint, raw_blocks_4k bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'storage_stats_wrapper';
REVOKE ALL ON FUNCTION pg_hybrid.storage_stats(regclass, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pg_hybrid.storage_stats(regclass, boolean) TO pg_stat_scan_tables;
COMMENT ON FUNCTION pg_hybrid.storage_stats(regclass, boolean) IS 'bytes a drive with transparent compression (LZ4 per 4 KB block, repeated-word blocks free, as zram) stores for each fork of a relation, beside its logical bytes; with_dependents adds its TOAST table and indexes';
")]
fn storage_stats(
    rel: pg_sys::Oid,
    with_dependents: bool,
) -> TableIterator<
    'static,
    (
        name!(relation, pg_sys::Oid),
        name!(fork, String),
        name!(logical_bytes, i64),
        name!(physical_bytes, i64),
        name!(blocks_4k, i64),
        name!(free_blocks_4k, i64),
        name!(raw_blocks_4k, i64),
    ),
> {
    unsafe {
        // The meter reads every block of the relation, as pgstattuple does,
        // and compressed sizes say something about the content: the same
        // gate as pgstattuple's.
        if !pg_sys::has_privs_of_role(pg_sys::GetUserId(), pg_sys::Oid::from(pg_sys::ROLE_PG_STAT_SCAN_TABLES)) {
            crate::raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                "permission denied for function storage_stats",
                "Run it as a superuser or as a member of pg_stat_scan_tables.",
            );
        }
        let mut rows = Vec::new();
        for oid in relations_to_meter(rel, with_dependents) {
            meter_relation(oid, &mut rows);
        }
        TableIterator::new(rows.into_iter().map(|f| {
            (
                f.relation,
                f.fork.to_string(),
                f.meter.logical_bytes() as i64,
                f.meter.physical_bytes as i64,
                f.meter.units as i64,
                f.meter.free_units as i64,
                f.meter.raw_units as i64,
            )
        }))
    }
}
