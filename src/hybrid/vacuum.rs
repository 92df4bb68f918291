//! VACUUM: dead TIDs leave both stages in place; pages of retired stages are
//! recycled; orphans of a merge that crashed are swept.

use std::collections::HashSet;

use pg_hybrid_core::static_stage::FormatError;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::build::tid_to_item;
use super::meta::{self, MaintenanceLock};
use super::{delta, merge, static_io};
use crate::shmem::{self, ArenaPool};
use crate::storage::alloc::free_pages;
use crate::storage::buffer::{nblocks, Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

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

    // Static leaves, rewritten in place without their dead TIDs. An LZ4
    // leaf can fail to recompress into its page; then a merge that filters
    // dead TIDs rewrites the static stage instead.
    let mut removed_static = 0u64;
    let mut kept_static = 0u64;
    let mut need_merge = false;
    let elastic = crate::elastic::is_elastic(index);
    if elastic {
        // The tree: dead TIDs out, underfull leaves merged, compact leaves
        // reverted while the index is under its expand threshold.
        let desc = crate::keys::index_desc(index);
        let (removed, out) = crate::elastic::tree::bulk_delete(index, &desc, &m, &mut dead);
        removed_static = removed.max(m.stat.tids.saturating_sub(out.entries));
        kept_static = out.entries;
        record_elastic_outcome(index, &out);
    }
    let mut blk = if m.stat.root == NO_BLOCK || elastic { NO_BLOCK } else { m.stat.first_leaf };
    while blk != NO_BLOCK {
        pg_sys::vacuum_delay_point();
        let b = Buf::read(index, blk, Lock::Cleanup);
        page::check_page(index, blk, b.page(), &[PageKind::StaticLeaf]);
        let body = page::body(b.page());
        let ntids = static_io::leaf_ntids(index, blk, body);
        let mut out = vec![0u8; BODY_CAP];
        match pg_hybrid_core::static_stage::rewrite_leaf_without(body, &mut dead, &mut out) {
            Ok((used, removed)) => {
                kept_static += ntids as u64 - removed as u64;
                if removed > 0 {
                    removed_static += removed as u64;
                    let mut w = WalRecord::start(index);
                    let p = w.register(&b);
                    page::body_mut(p)[..used].copy_from_slice(&out[..used]);
                    page::set_body_len(p, used);
                    w.finish();
                }
            }
            Err(FormatError::NoSpace) => {
                need_merge = true;
                break;
            }
            Err(e) => page::corrupted(&page::rel_name(index), blk, &format!("{e:?}")),
        }
        blk = page::opaque(b.page()).right;
    }

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
        let (removed, kept, next) = delta::vacuum_page(index, blk, m.stat.merged_upto, &mut record_dead);
        removed_delta += removed;
        kept_delta += kept;
        blk = next;
    }

    if need_merge {
        // Dead delta records are gone already; the merge drops dead static TIDs.
        let out = merge::merge_locked(index, merge::Reason::Vacuum, Some(&mut dead));
        // The metapage count at the start predates any in-place removal.
        removed_static = (m.stat.tids + out.merged_entries).saturating_sub(out.static_entries);
        kept_static = out.static_entries;
        kept_delta = 0;
    }
    if removed_static + removed_delta > 0 {
        let mm = meta::update(index, |mm| {
            mm.stat.vacuum_epoch += 1;
            mm.stat.tids = kept_static;
        });
        if let Some(slot) = shmem::existing_slot(index) {
            let _g = slot.exclusive();
            let st = &mut slot.get().dual;
            if !dead_delta.is_empty() {
                st.tree.retain(&mut ArenaPool, |_k: &[u8], t: Tid, _p: u64| !dead_delta.contains(&t));
            }
            if st.stat.generation == mm.stat.generation {
                st.stat.vacuum_epoch = mm.stat.vacuum_epoch;
                st.stat.tids = mm.stat.tids;
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
    if crate::elastic::is_elastic(index) && !pg_sys::RecoveryInProgress() {
        // PostgreSQL skips ambulkdelete when the heap had nothing to
        // remove; a bound changed by ALTER INDEX (or a size that fell)
        // still takes effect here: state re-evaluated, leaves reverted.
        let m = meta::read(index);
        if m.stat.root != NO_BLOCK {
            let desc = crate::keys::index_desc(index);
            let out = crate::elastic::tree::settle(index, &desc, &m);
            record_elastic_outcome(index, &out);
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
        let dynamic = shmem::existing_slot(index).map(|s| s.get().dual.tree.nentries).unwrap_or(0);
        (*stats).num_index_tuples = (m.stat.tids + dynamic) as f64;
        (*stats).estimated_count = dynamic > 0;
    }
    (*stats).num_pages = nblocks(index);
    (*stats).pages_free = (free.len() + orphans.len()) as u32;
    stats
}

/// After a change to an elastic tree by VACUUM: deleted leaves listed for
/// recycling, the tree's root, size and count in the metapage and the slot.
unsafe fn record_elastic_outcome(index: pg_sys::Relation, out: &crate::elastic::tree::WriteOutcome) {
    merge::list_for_recycling(index, &out.deleted);
    if let Some(slot) = shmem::existing_slot(index) {
        merge::add_key_fetches(slot, out.key_fetches);
    }
    let mm = meta::update(index, |mm| {
        mm.stat.root = out.meta_blk;
        mm.stat.pages = out.tree_pages;
        mm.stat.first_leaf = out.root;
        mm.stat.height = out.stats.height as u32;
        mm.stat.tids = out.entries;
        mm.stat.keys = out.entries;
    });
    if let Some(slot) = shmem::existing_slot(index) {
        let _g = slot.exclusive();
        let st = &mut slot.get().dual;
        if st.stat.generation == mm.stat.generation {
            st.stat.root = mm.stat.root;
            st.stat.pages = mm.stat.pages;
            st.stat.first_leaf = mm.stat.first_leaf;
            st.stat.height = mm.stat.height;
            st.stat.tids = mm.stat.tids;
            st.stat.keys = mm.stat.keys;
        }
    }
}

/// Reads every page: returns free pages, and static or recycle pages that no
/// stage and no recycle list references (left by a merge that crashed).
unsafe fn sweep(index: pg_sys::Relation) -> (Vec<u32>, Vec<u32>) {
    let m = meta::read(index);
    let mut listed: HashSet<u32> = HashSet::new();
    for (_, _, pages, blocks) in merge::recycle_segments(index, m.recycle_head, m.recycle_safexid) {
        listed.extend(pages);
        listed.extend(blocks);
    }
    let mut free = Vec::new();
    let mut orphans = Vec::new();
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
            PageKind::StaticLeaf | PageKind::StaticInner => {
                if page::opaque(p).generation != m.stat.generation && !listed.contains(&blk) {
                    orphans.push(blk);
                }
            }
            PageKind::Recycle => {
                if !listed.contains(&blk) {
                    orphans.push(blk);
                }
            }
            // A leaf deleted by an operation that failed before listing it.
            PageKind::ElasticDeleted => {
                let x = page::opaque(p).first_pos;
                if !listed.contains(&blk) && pg_sys::GlobalVisCheckRemovableFullXid(std::ptr::null_mut(), pg_sys::FullTransactionId { value: x }) {
                    orphans.push(blk);
                }
            }
            _ => {}
        }
    }
    (free, orphans)
}
