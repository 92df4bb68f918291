//! Storage-level callbacks: new storage, TRUNCATE, SET TABLESPACE,
//! CLUSTER / VACUUM FULL, VACUUM, size estimates and TOAST.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::delta::ITEM_HDR;
use pg_hybrid_core::hasis::row::{Mvcc, Row};
use pg_hybrid_core::tid::Tid;

use super::relation::{self, Lookup, Select};
use super::tuple;
use super::visibility::*;
use crate::storage::buffer::{nblocks, Lock};

extern "C-unwind" {
    fn log_smgrcreate(rnode: *const pg_sys::RelFileNode, fork: pg_sys::ForkNumber::Type);
}

/// RelationGetSmgr (an inline function in PostgreSQL's headers).
unsafe fn smgr(rel: pg_sys::Relation) -> pg_sys::SMgrRelation {
    if (*rel).rd_smgr.is_null() {
        pg_sys::smgrsetowner(&mut (*rel).rd_smgr, pg_sys::smgropen((*rel).rd_node, (*rel).rd_backend));
    }
    (*rel).rd_smgr
}

/// A new, empty relation file: no blocks (the first insert writes the
/// metapage), plus the init fork of an unlogged table (also empty: an
/// empty file is an empty hasis table).
pub unsafe fn set_new_filenode(rel: pg_sys::Relation, newrnode: *const pg_sys::RelFileNode, persistence: std::os::raw::c_char, freeze_xid: *mut pg_sys::TransactionId, minmulti: *mut pg_sys::MultiXactId) {
    *freeze_xid = pg_sys::RecentXmin;
    *minmulti = pg_sys::GetOldestMultiXactId();
    let srel = pg_sys::RelationCreateStorage(*newrnode, persistence, true);
    if persistence == pg_sys::RELPERSISTENCE_UNLOGGED as std::os::raw::c_char {
        pg_sys::smgrcreate(srel, pg_sys::ForkNumber::INIT_FORKNUM, false);
        log_smgrcreate(newrnode, pg_sys::ForkNumber::INIT_FORKNUM);
        pg_sys::smgrimmedsync(srel, pg_sys::ForkNumber::INIT_FORKNUM);
    }
    pg_sys::smgrclose(srel);
    let _ = rel;
}

pub unsafe fn nontransactional_truncate(rel: pg_sys::Relation) {
    relation::forget_meta(rel);
    pg_sys::RelationTruncate(rel, 0);
}

/// ALTER TABLE ... SET TABLESPACE: a block-for-block copy of every fork.
pub unsafe fn copy_data(rel: pg_sys::Relation, newrnode: *const pg_sys::RelFileNode) {
    pg_sys::FlushRelationBuffers(rel);
    let persistence = (*(*rel).rd_rel).relpersistence;
    let dst = pg_sys::smgropen(*newrnode, (*rel).rd_backend);
    pg_sys::RelationCreateStorage(*newrnode, persistence, true);
    pg_sys::RelationCopyStorage(smgr(rel), dst, pg_sys::ForkNumber::MAIN_FORKNUM, persistence);
    for fork in [pg_sys::ForkNumber::FSM_FORKNUM, pg_sys::ForkNumber::VISIBILITYMAP_FORKNUM, pg_sys::ForkNumber::INIT_FORKNUM] {
        if pg_sys::smgrexists(smgr(rel), fork) {
            pg_sys::smgrcreate(dst, fork, false);
            if persistence == pg_sys::RELPERSISTENCE_PERMANENT as std::os::raw::c_char
                || (persistence == pg_sys::RELPERSISTENCE_UNLOGGED as std::os::raw::c_char && fork == pg_sys::ForkNumber::INIT_FORKNUM)
            {
                log_smgrcreate(newrnode, fork);
            }
            pg_sys::RelationCopyStorage(smgr(rel), dst, fork, persistence);
        }
    }
    pg_sys::RelationDropStorage(rel);
    pg_sys::smgrclose(dst);
}

/// A version CLUSTER keeps.
struct Kept {
    tid: Tid,
    mvcc: Mvcc,
    row: Row,
}

/// What CLUSTER does with one version (heapam_relation_copy_for_cluster's
/// rules); `None` drops it.
unsafe fn classify(m: &Mvcc, r: pg_sys::HTSV_Result::Type, freeze_xid: pg_sys::TransactionId, counts: &mut ClusterCounts) -> Option<Mvcc> {
    use pg_sys::HTSV_Result::*;
    match r {
        HEAPTUPLE_DEAD => {
            counts.vacuumed += 1.0;
            return None;
        }
        HEAPTUPLE_RECENTLY_DEAD | HEAPTUPLE_DELETE_IN_PROGRESS => counts.recently_dead += 1.0,
        _ => {}
    }
    counts.tuples += 1.0;
    let mut m = *m;
    // Freeze what every snapshot sees as committed, so the new relation's
    // relfrozenxid can be the freeze limit.
    if m.infomask & HEAP_XMIN_COMMITTED != 0 && pg_sys::TransactionIdPrecedes(pg_sys::TransactionId::from(m.xmin), freeze_xid) {
        m.infomask |= HEAP_XMIN_FROZEN;
    }
    // Row locks and aborted deleters mean nothing in the new relation (the
    // table is locked exclusively).
    let lock_only = m.infomask & HEAP_XMAX_LOCK_ONLY != 0;
    let aborted = m.infomask & HEAP_XMAX_INVALID != 0 || (m.xmax != 0 && !pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from(m.xmax)) && !pg_sys::TransactionIdDidCommit(pg_sys::TransactionId::from(m.xmax)));
    if lock_only || aborted || m.xmax == 0 {
        m.xmax = 0;
        m.infomask &= !HEAP_XMAX_BITS;
        m.infomask |= HEAP_XMAX_INVALID;
        m.infomask2 &= !HEAP_KEYS_UPDATED;
    }
    Some(m)
}

#[derive(Default)]
struct ClusterCounts {
    tuples: f64,
    vacuumed: f64,
    recently_dead: f64,
}

unsafe fn copy_kept(new: pg_sys::Relation, old: pg_sys::Relation, k: &Kept) {
    // Dropped columns become NULL, and TOAST values are written again into
    // the new relation's TOAST table (as heap's rewrite does).
    let desc = (*old).rd_att;
    let mut row = k.row.clone();
    for (i, a) in (*desc).attrs.as_slice((*desc).natts as usize).iter().enumerate() {
        if a.attisdropped {
            if let Some(v) = row.values.get_mut(i) {
                *v = None;
            }
        }
    }
    let tup = tuple::form(old, &row, &k.mvcc, k.tid);
    let p = tuple::prepare_tuple(new, tup, std::ptr::null_mut(), 0);
    relation::insert(new, p.natts, k.mvcc, &p.payload);
}

#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_for_cluster(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
    old_index: pg_sys::Relation,
    oldest_xmin: pg_sys::TransactionId,
    xid_cutoff: *mut pg_sys::TransactionId,
    num_tuples: *mut f64,
    tups_vacuumed: *mut f64,
    tups_recently_dead: *mut f64,
) {
    let mut counts = ClusterCounts::default();
    let freeze_xid = *xid_cutoff;
    let relid = (*old).rd_id;
    if let Some(meta) = relation::read_meta(old) {
        let schema = tuple::schema(old);
        if !old_index.is_null() {
            // Index order: every version that is not dead to all has an
            // entry, and SnapshotAny returns them all.
            let iscan = pg_sys::index_beginscan(old, old_index, &raw mut pg_sys::SnapshotAnyData, 0, 0);
            pg_sys::index_rescan(iscan, std::ptr::null_mut(), 0, std::ptr::null_mut(), 0);
            loop {
                let ip = pg_sys::index_getnext_tid(iscan, pg_sys::ScanDirection::ForwardScanDirection);
                if ip.is_null() {
                    break;
                }
                let tid = from_item_pointer(&*ip);
                let kept = match relation::locate(old, &meta, tid, Lock::Share) {
                    Lookup::Found(loc) => {
                        let (r, hint, _) = vacuum_state(&loc.header.mvcc, tid, relid, oldest_xmin, loc.buf.buffer());
                        if let Some(h) = hint {
                            loc.set_hint(h);
                        }
                        classify(&loc.header.mvcc, r, freeze_xid, &mut counts)
                            .map(|m| Kept { tid, mvcc: m, row: tuple::decode(old, &schema, loc.header.natts, loc.payload(), tid.block) })
                    }
                    _ => None,
                };
                if let Some(k) = kept {
                    copy_kept(new, old, &k);
                }
            }
            pg_sys::index_endscan(iscan);
        } else {
            let mut batch: Vec<Kept> = Vec::new();
            for k in 0..meta.nextents {
                batch.clear();
                relation::visit_extent(old, &meta, k, Select::All, std::ptr::null_mut(), &mut |v| {
                    let (r, hint, _) = vacuum_state(&v.header.mvcc, v.tid, relid, oldest_xmin, v.buffer);
                    if let Some(h) = hint {
                        v.set_hint(h);
                    }
                    if let Some(m) = classify(&v.header.mvcc, r, freeze_xid, &mut counts) {
                        batch.push(Kept { tid: v.tid, mvcc: m, row: tuple::decode(old, &schema, v.header.natts, v.payload, v.tid.block) });
                    }
                });
                for kept in &batch {
                    copy_kept(new, old, kept);
                }
            }
        }
    }
    *num_tuples = counts.tuples;
    *tups_vacuumed = counts.vacuumed;
    *tups_recently_dead = counts.recently_dead;
}

/// VACUUM. This build counts live and dead versions and updates the
/// planner's statistics; reclaiming dead versions needs major compaction
/// (not built yet), and relfrozenxid is left as it is because nothing is
/// frozen (README.md "What does not work yet").
pub unsafe fn vacuum(rel: pg_sys::Relation, _params: *mut pg_sys::VacuumParams, strategy: pg_sys::BufferAccessStrategy) {
    use pg_sys::HTSV_Result::*;
    let oldest = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let relid = (*rel).rd_id;
    let (mut live, mut dead) = (0i64, 0i64);
    if let Some(meta) = relation::read_meta(rel) {
        for k in 0..meta.nextents {
            relation::visit_extent(rel, &meta, k, Select::All, strategy, &mut |v| {
                let (r, hint, _) = vacuum_state(&v.header.mvcc, v.tid, relid, oldest, v.buffer);
                if let Some(h) = hint {
                    v.set_hint(h);
                }
                match r {
                    HEAPTUPLE_DEAD | HEAPTUPLE_RECENTLY_DEAD => dead += 1,
                    _ => live += 1,
                }
            });
            pg_sys::vacuum_delay_point();
        }
    }
    let pages = nblocks(rel);
    pg_sys::vac_update_relstats(
        rel,
        pages,
        live as f64,
        0,
        (*(*rel).rd_rel).relhasindex,
        pg_sys::InvalidTransactionId,
        pg_sys::InvalidTransactionId,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        false,
    );
    pg_sys::pgstat_report_vacuum(relid, (*(*rel).rd_rel).relisshared, live, dead);
}

/// Average bytes of row data a block holds before compaction exists: the
/// delta part's bodies spread over the whole extent.
fn usable_bytes_per_block() -> usize {
    let g = relation::default_geometry();
    let body = pg_hybrid_core::hasis::layout::BODY_END - pg_hybrid_core::hasis::delta::ITEMS_START;
    g.params.delta_blocks as usize * body / g.extent_blocks()
}

pub unsafe fn estimate_size(rel: pg_sys::Relation, attr_widths: *mut i32, pages: *mut pg_sys::BlockNumber, tuples: *mut f64, allvisfrac: *mut f64) {
    pg_sys::table_block_relation_estimate_size(rel, attr_widths, pages, tuples, allvisfrac, ITEM_HDR, usable_bytes_per_block());
}

/// A TOAST table whenever a column could be toasted (heap's rule, without
/// its exact width arithmetic).
pub unsafe fn needs_toast_table(rel: pg_sys::Relation) -> bool {
    let desc = (*rel).rd_att;
    (*desc).attrs.as_slice((*desc).natts as usize).iter().any(|a| !a.attisdropped && a.attlen == -1 && a.attstorage != b'p' as std::os::raw::c_char)
}
