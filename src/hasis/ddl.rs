//! Storage-level callbacks: new storage, TRUNCATE, SET TABLESPACE,
//! CLUSTER / VACUUM FULL, VACUUM, size estimates and TOAST.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::delta::ITEM_HDR;
use pg_hybrid_core::hasis::header::ExtentHeader;
use pg_hybrid_core::hasis::row::{Mvcc, Row};
use pg_hybrid_core::tid::{Tid, TidSet};

use super::relation::{self, Select};
use super::tuple;
use super::visibility::*;
use crate::storage::buffer::{nblocks, Lock};

extern "C-unwind" {
    fn log_smgrcreate(rnode: *const pg_sys::RelFileNode, fork: pg_sys::ForkNumber::Type);
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
    pg_sys::RelationCopyStorage(crate::storage::buffer::smgr(rel), dst, pg_sys::ForkNumber::MAIN_FORKNUM, persistence);
    for fork in [pg_sys::ForkNumber::FSM_FORKNUM, pg_sys::ForkNumber::VISIBILITYMAP_FORKNUM, pg_sys::ForkNumber::INIT_FORKNUM] {
        if pg_sys::smgrexists(crate::storage::buffer::smgr(rel), fork) {
            pg_sys::smgrcreate(dst, fork, false);
            if persistence == pg_sys::RELPERSISTENCE_PERMANENT as std::os::raw::c_char
                || (persistence == pg_sys::RELPERSISTENCE_UNLOGGED as std::os::raw::c_char && fork == pg_sys::ForkNumber::INIT_FORKNUM)
            {
                log_smgrcreate(newrnode, fork);
            }
            pg_sys::RelationCopyStorage(crate::storage::buffer::smgr(rel), dst, fork, persistence);
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
    let lock_only = xmax_locked_only(&m);
    if !lock_only && m.infomask & HEAP_XMAX_IS_MULTI != 0 && m.infomask & HEAP_XMAX_INVALID == 0 {
        // A no-key update that shared the version with key-share lockers
        // (a MultiXact): the lockers have ended (the table is locked
        // exclusively), the update stays, as a plain xid.
        m.xmax = update_xid(&m);
        m.infomask &= !HEAP_XMAX_BITS;
    }
    let aborted = m.infomask & HEAP_XMAX_INVALID != 0 || (m.xmax != 0 && !pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from(m.xmax)) && !pg_sys::TransactionIdDidCommit(pg_sys::TransactionId::from(m.xmax)));
    if lock_only || aborted || m.xmax == 0 {
        m.xmax = 0;
        m.infomask &= !HEAP_XMAX_BITS;
        m.infomask |= HEAP_XMAX_INVALID;
        m.infomask2 &= !HEAP_KEYS_UPDATED;
    }
    // Every version the copy keeps gets its own slot and index entries in
    // the new relation: no HOT chains there.
    m.infomask2 &= !(HEAP_HOT_UPDATED | HEAP_ONLY_TUPLE);
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
    relation::insert(new, p.natts, k.mvcc, &p.payload, true);
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
                // The entry names a HOT chain's root: every member of the
                // chain is a version to copy (SnapshotAny's call_again).
                let tid = from_item_pointer(&*ip);
                let Some(ext) = relation::ExtentRead::of(old, &meta, tid) else { continue };
                let Some(root) = ext.slot(tid) else { continue };
                let mut chain: Vec<Kept> = Vec::new();
                super::scan::walk_chain(&ext, root, true, false, &mut |loc| {
                    let (r, hint, _) = vacuum_state(&loc.header.mvcc, loc.tid, relid, oldest_xmin, loc.buf.buffer());
                    if let Some(h) = hint {
                        loc.set_hint(h);
                        loc.header.mvcc.infomask = h;
                    }
                    if let Some(m) = classify(&loc.header.mvcc, r, freeze_xid, &mut counts) {
                        chain.push(Kept { tid: loc.tid, mvcc: m, row: tuple::decode(old, &schema, loc.header.natts, loc.payload(), loc.tid.block) });
                    }
                    super::scan::Walk::Next
                });
                drop(ext);
                for k in &chain {
                    copy_kept(new, old, k);
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

/// VACUUM: every extent is compacted with freezing (dead versions leave,
/// committed ones move into the column part, old xids are frozen), except,
/// unless the VACUUM is aggressive, all-visible extents without a delta
/// part; then the index entries of the slots compaction emptied are
/// bulk-deleted from every index, and those slots become unused (reusable
/// TIDs). When every extent went through the freezing oracle, relfrozenxid
/// advances to the freeze limit; after a skip it stays.
pub unsafe fn vacuum(rel: pg_sys::Relation, params: *mut pg_sys::VacuumParams, strategy: pg_sys::BufferAccessStrategy) {
    let p = &*params;
    let mut oldest_xmin = pg_sys::InvalidTransactionId;
    let mut oldest_mxact = pg_sys::InvalidTransactionId;
    let mut freeze_limit = pg_sys::InvalidTransactionId;
    let mut multi_cutoff = pg_sys::InvalidTransactionId;
    // Aggressive (relfrozenxid old enough, VACUUM FREEZE, DISABLE_PAGE_SKIPPING):
    // every extent is compacted and frozen. Otherwise an all-visible extent
    // without a delta part is skipped, as heap skips all-visible pages: it
    // has nothing to remove or move, only rows it would freeze early.
    let aggressive = pg_sys::vacuum_set_xid_limits(
        rel,
        p.freeze_min_age,
        p.freeze_table_age,
        p.multixact_freeze_min_age,
        p.multixact_freeze_table_age,
        &mut oldest_xmin,
        &mut oldest_mxact,
        &mut freeze_limit,
        &mut multi_cutoff,
    ) || p.options & pg_sys::VACOPT_DISABLE_PAGE_SKIPPING != 0;
    let mut skipped = false;
    let freeze = super::compact::Freeze { limit: freeze_limit };
    let relid = (*rel).rd_id;
    let mut dead_slots: Vec<(u32, Vec<u16>)> = Vec::new();
    let (mut live, mut dead) = (0i64, 0i64);
    // TID blocks whose visibility-map bits are set (pg_class.relallvisible).
    let mut map_visible_blocks: u32 = 0;
    if let Some(meta) = relation::refresh_meta(rel) {
        let g = meta.geometry;
        for k in 0..meta.nextents {
            let first = meta.extent_first(k);
            let hbuf = crate::storage::buffer::Buf::read_with(rel, first, Lock::Exclusive, strategy);
            let before = ExtentHeader::read(relation::bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e));
            if !aggressive && before.all_visible && before.delta_used == 0 {
                skipped = true;
            } else if let Some(done) = super::compact::compact_extent(rel, &meta, k, &hbuf, super::compact::Goal::Vacuum(freeze)) {
                relation::record_free_space(rel, &g, first, &done);
            }
            let slots = relation::dead_slots(rel, &meta, k, &hbuf);
            // Index-only scans skip the fetches of an extent whose every
            // version is visible to all (vm.rs).
            if relation::set_map_visible(rel, &g, first, &hbuf, slots.is_empty()) {
                map_visible_blocks += g.tid_blocks() as u32;
            }
            if !slots.is_empty() {
                dead_slots.push((k, slots));
            }
            let h = ExtentHeader::read(relation::bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e));
            drop(hbuf);
            // What is left, for the statistics: an all-visible extent
            // without a delta part holds its column rows, all live.
            if h.all_visible && h.delta_used == 0 {
                live += h.column_rows as i64;
                pg_sys::vacuum_delay_point();
                continue;
            }
            relation::visit_extent(rel, &meta, k, Select::All, strategy, &mut |v| {
                let (r, hint, _) = vacuum_state(&v.header.mvcc, v.tid, relid, oldest_xmin, v.buffer);
                if let Some(h) = hint {
                    v.set_hint(h);
                }
                match r {
                    pg_sys::HTSV_Result::HEAPTUPLE_DEAD | pg_sys::HTSV_Result::HEAPTUPLE_RECENTLY_DEAD => dead += 1,
                    _ => live += 1,
                }
            });
            pg_sys::vacuum_delay_point();
        }
        vacuum_indexes(rel, &meta, &dead_slots, live as f64, strategy);
        for (k, slots) in &dead_slots {
            relation::set_unused(rel, &meta, *k, slots);
            // With its dead slots unused, the extent may be all visible now
            // (as heap's second pass sets the bit of a page it emptied of
            // dead line pointers). Dead slots are counted again under the
            // header lock: a compaction since may have made new ones.
            let first = meta.extent_first(*k);
            let hbuf = crate::storage::buffer::Buf::read_with(rel, first, Lock::Exclusive, strategy);
            let no_dead = relation::dead_slots(rel, &meta, *k, &hbuf).is_empty();
            if relation::set_map_visible(rel, &meta.geometry, first, &hbuf, no_dead) {
                map_visible_blocks += meta.geometry.tid_blocks() as u32;
            }
        }
    }
    let mut frozen_updated = false;
    let mut minmulti_updated = false;
    pg_sys::vac_update_relstats(
        rel,
        nblocks(rel),
        live as f64,
        map_visible_blocks,
        (*(*rel).rd_rel).relhasindex,
        // A skipped extent was not frozen: relfrozenxid and relminmxid
        // stay (invalid values leave them), as after heap's skipping.
        if skipped { pg_sys::InvalidTransactionId } else { freeze_limit },
        if skipped { pg_sys::InvalidTransactionId } else { multi_cutoff },
        &mut frozen_updated,
        &mut minmulti_updated,
        false,
    );
    pg_sys::pgstat_report_vacuum(relid, (*(*rel).rd_rel).relisshared, live, dead);
}

/// `index_bulk_delete`'s callback, asked for every entry of every index
/// of the table: whether VACUUM removes the entry's TID (`state` is a
/// `TidSet` of them).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn tid_is_dead(itemptr: pg_sys::ItemPointer, state: *mut std::ffi::c_void) -> bool {
    (*(state as *const TidSet)).contains(from_item_pointer(&*itemptr))
}

/// Bulk-deletes the entries of `dead` slots from every index of `rel`, then
/// runs each index's VACUUM cleanup (also when nothing was deleted, as heap
/// does, so index AMs keep their statistics and free pages current).
unsafe fn vacuum_indexes(rel: pg_sys::Relation, meta: &relation::Meta, dead: &[(u32, Vec<u16>)], live: f64, strategy: pg_sys::BufferAccessStrategy) {
    let mut tids = Vec::new();
    for (k, slots) in dead {
        let first = meta.extent_first(*k);
        tids.extend(slots.iter().filter_map(|&s| meta.geometry.tid(first, s).ok()));
    }
    let state = TidSet::new(tids);
    let mut nindexes = 0;
    let mut irel: *mut pg_sys::Relation = std::ptr::null_mut();
    pg_sys::vac_open_indexes(rel, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE, &mut nindexes, &mut irel);
    for i in 0..nindexes as usize {
        let mut info = pg_sys::IndexVacuumInfo {
            index: *irel.add(i),
            analyze_only: false,
            report_progress: false,
            estimated_count: false,
            message_level: pg_sys::DEBUG2 as i32,
            num_heap_tuples: live,
            strategy,
        };
        let mut stats: *mut pg_sys::IndexBulkDeleteResult = std::ptr::null_mut();
        if !state.is_empty() {
            stats = pg_sys::index_bulk_delete(&mut info, stats, Some(tid_is_dead), &state as *const TidSet as *mut std::ffi::c_void);
        }
        let stats = pg_sys::index_vacuum_cleanup(&mut info, stats);
        if !stats.is_null() {
            pg_sys::pfree(stats as *mut std::ffi::c_void);
        }
    }
    pg_sys::vac_close_indexes(nindexes, irel, pg_sys::NoLock as pg_sys::LOCKMODE);
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
    // relallvisible counts TID blocks (vm.rs), which are only some of an
    // extent's blocks: the fraction index-only scans find visible is of
    // the TID blocks.
    if let Some(meta) = relation::cached_meta(rel) {
        let g = meta.geometry;
        let share = g.tid_blocks() as f64 / g.extent_blocks() as f64;
        if share > 0.0 {
            *allvisfrac = (*allvisfrac / share).min(1.0);
        }
    }
}

/// A TOAST table whenever a column could be toasted (heap's rule, without
/// its exact width arithmetic).
pub unsafe fn needs_toast_table(rel: pg_sys::Relation) -> bool {
    let desc = (*rel).rd_att;
    (*desc).attrs.as_slice((*desc).natts as usize).iter().any(|a| !a.attisdropped && a.attlen == -1 && a.attstorage != b'p' as std::os::raw::c_char)
}
