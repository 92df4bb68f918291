//! VACUUM: dead TIDs leave the base structure (through its trait) and the
//! delta log with the dynamic stage in place; retired pages are recycled;
//! orphans of a merge that crashed are swept.

use std::collections::HashSet;

use pg_hybrid_core::hot_tier;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::base::VacuumResult;
use super::build::tid_to_item;
use super::meta::{self, MaintenanceLock};
use super::state::{add_key_fetches, SlotState};
use super::{delta, merge};
use crate::shmem::{self, ArenaPool};
use crate::storage::alloc::free_pages;
use crate::storage::buffer::{nblocks, Buf, Lock};
use crate::storage::page::{self, PageKind, NO_BLOCK};

unsafe fn new_stats(stats: *mut pg_sys::IndexBulkDeleteResult) -> *mut pg_sys::IndexBulkDeleteResult {
    if stats.is_null() {
        pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBulkDeleteResult>()) as *mut pg_sys::IndexBulkDeleteResult
    } else {
        stats
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambulkdelete(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    crate::require_preload();
    let stats = new_stats(stats);
    let index = (*info).index;
    let cb = callback.expect("ambulkdelete without callback");
    let mut dead = |t: Tid| {
        let mut item = tid_to_item(t);
        cb(&mut item, callback_state)
    };
    let _ml = MaintenanceLock::exclusive(index);
    let m = meta::read(index);

    // The base structure first: it drops dead TIDs in place, or asks for a
    // merge that drops them.
    let desc = crate::keys::index_desc(index);
    let hot = ams::base(index).hot_tier(index).is_some();
    let res = ams::base(index).bulk_delete(index, &desc, &m, &mut dead);
    let mut removed_static = res.removed;
    let mut kept_static = res.kept;
    let need_merge = res.need_merge;
    record_base_outcome(index, &res);

    // Delta log pages, collecting what died so the shared stage can follow.
    let mut dead_delta: HashSet<Tid> = HashSet::new();
    let mut removed_delta = 0u64;
    let mut kept_delta = 0u64;
    let mut blk = m.delta_head;
    while blk != NO_BLOCK {
        pg_sys::vacuum_delay_point();
        let mut record_dead = |t: Tid| {
            let d = dead(t);
            if d {
                dead_delta.insert(t);
            }
            d
        };
        let (removed, kept, next) = delta::vacuum_page(index, blk, m.base.merged_upto, &mut record_dead);
        removed_delta += removed;
        kept_delta += kept;
        blk = next;
    }

    if need_merge {
        // Dead delta records are gone already; the merge drops dead static TIDs.
        let out = merge::merge_locked(index, merge::Reason::Vacuum, Some(&mut dead));
        // The metapage count at the start predates any in-place removal.
        removed_static = (m.base.entries + out.merged_entries).saturating_sub(out.static_entries);
        kept_static = out.static_entries;
        kept_delta = 0;
    }
    // The epoch moves on every bulk delete, even one that found nothing to
    // remove here: VACUUM makes the heap's dead TIDs reusable next, and a
    // merge may have dropped their entries already (killed-tuple hints), so
    // hints made before must not match what comes after.
    {
        let mm = meta::update(index, |mm| {
            mm.base.vacuum_epoch += 1;
            mm.base.entries = kept_static;
        });
        if let Some(slot) = shmem::existing_slot(index) {
            let _g = slot.exclusive();
            let st = slot.state();
            // Hints of the old epoch would no longer match; dropping them
            // frees the cells (and keeps an epoch tag from ever coming round
            // again to a hint that old).
            st.hints.clear(super::killed::owner_of(slot.key));
            if hot {
                // A tiered index's clean copies leave with the cold
                // entries they copy, so a hot record stays complete; a
                // promotion that read the cold tier before the bulk delete
                // added its copies before this (it checks the epoch, which
                // moves here), so none survives.
                st.tree.retain(&mut ArenaPool, |_k: &[u8], t: Tid, p: u64| match hot_tier::classify(t, p) {
                    hot_tier::HotKind::Marker { .. } => true,
                    hot_tier::HotKind::Clean => !dead(t),
                    hot_tier::HotKind::Dirty { .. } => !dead_delta.contains(&t),
                });
            } else if !dead_delta.is_empty() {
                st.tree.retain(&mut ArenaPool, |_k: &[u8], t: Tid, _p: u64| !dead_delta.contains(&t));
            }
            if st.base.generation == mm.base.generation {
                st.base.vacuum_epoch = mm.base.vacuum_epoch;
                st.base.entries = mm.base.entries;
            }
        }
    }
    (*stats).tuples_removed += (removed_static + removed_delta) as f64;
    (*stats).num_index_tuples = (kept_static + kept_delta) as f64;
    (*stats).num_pages = nblocks(index);
    stats
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amvacuumcleanup(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    crate::require_preload();
    if (*info).analyze_only {
        return stats;
    }
    let index = (*info).index;
    let stats_was_null = stats.is_null();
    let stats = new_stats(stats);
    let _ml = MaintenanceLock::exclusive(index);
    merge::recycle_if_safe(index);
    if !pg_sys::RecoveryInProgress() {
        // PostgreSQL skips ambulkdelete when the heap had nothing to
        // remove; the structure may still have work that reloptions changed
        // by ALTER INDEX ask for.
        let m = meta::read(index);
        let desc = crate::keys::index_desc(index);
        if let Some(res) = ams::base(index).vacuum_cleanup(index, &desc, &m) {
            record_base_outcome(index, &res);
        }
    }
    let (free, orphans) = sweep(index);
    if !orphans.is_empty() {
        free_pages(index, &orphans);
    }
    for &b in &free {
        pg_sys::RecordFreeIndexPage(index, b);
    }
    pg_sys::IndexFreeSpaceMapVacuum(index);
    let m = meta::read(index);
    if stats_was_null {
        let dynamic = shmem::existing_slot(index).map(|s| s.state().tree.nentries).unwrap_or(0);
        (*stats).num_index_tuples = (m.base.entries + dynamic) as f64;
        (*stats).estimated_count = dynamic > 0;
    }
    (*stats).num_pages = nblocks(index);
    (*stats).pages_free = (free.len() + orphans.len()) as u32;
    stats
}

/// After VACUUM changed the base structure: pages it deleted are listed for
/// recycling, and its new shape goes to the metapage and the slot.
unsafe fn record_base_outcome(index: pg_sys::Relation, res: &VacuumResult) {
    merge::list_for_recycling(index, &res.retired);
    if let Some(slot) = shmem::existing_slot(index) {
        add_key_fetches(slot, res.key_fetches);
    }
    let Some(shape) = res.shape else { return };
    let mm = meta::update(index, |mm| mm.base.set_shape(&shape));
    if let Some(slot) = shmem::existing_slot(index) {
        let _g = slot.exclusive();
        let st = slot.state();
        if st.base.generation == mm.base.generation {
            st.base.set_shape(&shape);
        }
    }
}

/// Reads every page: returns free pages, and recycle pages or pages of the
/// base structure that nothing references (left by a merge that crashed).
unsafe fn sweep(index: pg_sys::Relation) -> (Vec<u32>, Vec<u32>) {
    let m = meta::read(index);
    let base = ams::base(index);
    let mut listed: HashSet<u32> = HashSet::new();
    for (_, _, pages, blocks) in merge::recycle_segments(index, m.recycle_head, m.recycle_safexid) {
        listed.extend(pages);
        listed.extend(blocks);
    }
    let mut free = Vec::new();
    let mut orphans = Vec::new();
    let mut is_orphan = base.orphan_test(index, &m);
    let map_pages: Vec<u32> = if m.lockmap == 0 { Vec::new() } else { super::predlock::map_blocks(index, m.lockmap, None) };
    let n = nblocks(index);
    for blk in 1..n {
        pg_sys::vacuum_delay_point();
        let b = Buf::read(index, blk, Lock::Share);
        let p = b.page();
        if pg_sys::PageIsNew(p) {
            free.push(blk);
            continue;
        }
        let kind = page::check_page(index, blk, p, &[]);
        match kind {
            PageKind::Free => free.push(blk),
            PageKind::Recycle => {
                if !listed.contains(&blk) {
                    orphans.push(blk);
                }
            }
            PageKind::Meta | PageKind::Delta => {}
            // A map (or part of one) a crashed build or merge wrote but
            // never linked; a replaced one waits on the recycle list.
            PageKind::LockMap => {
                if !map_pages.contains(&blk) && !listed.contains(&blk) {
                    orphans.push(blk);
                }
            }
            kind => {
                if !listed.contains(&blk) && is_orphan(blk, p, kind) {
                    orphans.push(blk);
                }
            }
        }
    }
    (free, orphans)
}
