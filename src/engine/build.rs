//! CREATE INDEX: scan the heap, sort, check uniqueness, and hand the sorted
//! entries to the base structure; the metapage and an empty delta log are
//! the engine's.

use std::cmp::Ordering;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::base::EntryRef;
use super::meta::{self, IndexMeta, META_BLOCK};
use super::predlock;
use super::state::SlotState;
use pg_hybrid_core::partition::choose_boundaries;
use super::{delta, merge};
use crate::keys::{index_desc, IndexDesc};
use crate::storage::buffer::{nblocks, Buf};
use crate::storage::page::{self, PageKind};
use crate::storage::wal::WalRecord;

const PHASE_SORT: i64 = 2;
const PHASE_WRITE: i64 = 3;

/// One heap tuple of the build: where its key is in the spool's bytes.
struct SpoolItem {
    key_off: u64,
    key_len: u32,
    tid: Tid,
    /// Live (not just recently dead): only live tuples conflict in a
    /// unique build.
    alive: bool,
}

/// Keys of all heap tuples, stored back to back to keep memory at about
/// key bytes + 24 bytes per tuple.
struct Spool {
    desc: std::rc::Rc<IndexDesc>,
    bytes: Vec<u8>,
    entries: Vec<SpoolItem>,
    scratch: Vec<u8>,
}

impl Spool {
    fn key(&self, e: &SpoolItem) -> &[u8] {
        &self.bytes[e.key_off as usize..e.key_off as usize + e.key_len as usize]
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn build_callback(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    alive: bool,
    state: *mut std::ffi::c_void,
) {
    let spool = &mut *(state as *mut Spool);
    let mut scratch = std::mem::take(&mut spool.scratch);
    spool.desc.encode_tuple(values, isnull, &mut scratch);
    let off = spool.bytes.len() as u64;
    spool.bytes.extend_from_slice(&scratch);
    spool.entries.push(SpoolItem { key_off: off, key_len: scratch.len() as u32, tid: item_to_tid(tid), alive });
    spool.scratch = scratch;
}

pub unsafe fn item_to_tid(t: pg_sys::ItemPointer) -> Tid {
    let t = &*t;
    Tid::new(((t.ip_blkid.bi_hi as u32) << 16) | t.ip_blkid.bi_lo as u32, t.ip_posid)
}

pub fn tid_to_item(t: Tid) -> pg_sys::ItemPointerData {
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData { bi_hi: (t.block >> 16) as u16, bi_lo: (t.block & 0xffff) as u16 },
        ip_posid: t.offset,
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    crate::require_preload();
    if nblocks(index) != 0 {
        pgrx::error!("index \"{}\" already contains data", page::rel_name(index));
    }
    let desc = index_desc(index);
    let base = ams::base(index);
    base.check_definition(index, &desc);
    let mut spool = Spool { desc: desc.clone(), bytes: Vec::new(), entries: Vec::new(), scratch: Vec::new() };
    let reltuples = pg_sys::table_index_build_scan(
        heap,
        index,
        index_info,
        true,
        true,
        Some(build_callback),
        &mut spool as *mut Spool as *mut std::ffi::c_void,
        std::ptr::null_mut(),
    );
    pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_SUBPHASE as i32, PHASE_SORT);
    let mut entries = std::mem::take(&mut spool.entries);
    entries.sort_unstable_by(|a, b| desc.compare(spool.key(a), spool.key(b)).then(a.tid.cmp(&b.tid)));
    // Uniqueness comes from the IndexInfo PostgreSQL passes, not the
    // catalog: VACUUM FULL and CLUSTER rebuild an invalid unique index (a
    // failed CREATE UNIQUE INDEX CONCURRENTLY) with ii_Unique = false.
    let unique = (*index_info).ii_Unique;
    if unique {
        check_unique_build(index, &desc, (*index_info).ii_NullsNotDistinct, &spool, &entries);
    }
    let ntuples = entries.len() as f64;

    pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_SUBPHASE as i32, PHASE_WRITE);
    let m = init_empty(index);
    let gen = m.next_generation;
    let mut items = entries.iter().map(|e| EntryRef { key: spool.key(e), tid: e.tid });
    let res = base.build(index, &desc, &m, &mut items, entries.len(), gen, &mut |n| {
        pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE as i32, n as i64)
    });
    merge::list_for_recycling(index, &res.freed);
    // The key-range partitions of predicate locking, from the keys at hand.
    let lockmap = if predlock::mappable(&desc) && !entries.is_empty() {
        let bounds = choose_boundaries(entries.iter().map(|e| desc.keycols(spool.key(e))), page::BODY_CAP);
        predlock::write_map(index, &bounds)
    } else {
        0
    };
    meta::update(index, |m| {
        m.lockmap = lockmap;
        m.next_generation = gen + 1;
        m.base.generation = gen;
        m.base.set_shape(&res.shape);
    });
    // The index's previous storage (REINDEX, TRUNCATE) is gone, and a
    // relfilenode reused by the system must not inherit a stale slot.
    if crate::shmem::available() {
        crate::shmem::forget_index(pg_sys::MyDatabaseId, (*index).rd_id, Some(crate::shmem::slot_key(index)));
        // A unique index starts with a filter over its keys (state.rs,
        // KeyFilter) so the first inserts skip the base structure.
        if unique && desc.hashable && !entries.is_empty() {
            let hashes: Vec<u64> = entries.iter().filter_map(|e| desc.key_hash(spool.key(e))).collect();
            if let Some(f) = super::state::KeyFilter::build(gen, &hashes) {
                let slot = crate::shmem::slot_for(index);
                let _g = slot.exclusive();
                slot.state().install_key_filter(Some(f));
            }
        }
    }
    let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBuildResult>()) as *mut pg_sys::IndexBuildResult;
    (*r).heap_tuples = reltuples;
    (*r).index_tuples = ntuples;
    r
}

unsafe fn check_unique_build(index: pg_sys::Relation, desc: &IndexDesc, nulls_not_distinct: bool, spool: &Spool, entries: &[SpoolItem]) {
    let mut prev: Option<&SpoolItem> = None;
    for e in entries.iter().filter(|e| e.alive) {
        let k = spool.key(e);
        if let Some(p) = prev {
            let pk = spool.key(p);
            if desc.compare_keycols(pk, k) == Ordering::Equal && (nulls_not_distinct || !desc.has_null_keycol(k)) {
                super::insert::report_duplicate(index, desc, k, true);
            }
        }
        prev = Some(e);
    }
}

/// Writes the metapage and the first delta page of an empty index.
unsafe fn init_empty(index: pg_sys::Relation) -> IndexMeta {
    let metab = Buf::extend(index);
    assert_eq!(metab.blkno(), META_BLOCK);
    let mut m = IndexMeta::new();
    {
        let mut w = WalRecord::start(index);
        meta::write_meta_page(w.register_new(&metab), &m);
        w.finish();
    }
    drop(metab);
    let head = delta::create_log(index, 0);
    m = meta::update(index, |m| {
        m.delta_head = head;
        m.delta_tail = head;
        m.delta_pages = 1;
    });
    m
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    crate::require_preload();
    // The init fork: metapage and one empty delta page, written directly
    // and WAL-logged as full pages, as unlogged indexes require.
    let smgr = pg_sys::RelationGetSmgr(index);
    let mut m = IndexMeta::new();
    m.delta_head = 1;
    m.delta_tail = 1;
    m.delta_pages = 1;
    let buf = pg_sys::palloc0(page::BLCKSZ) as pg_sys::Page;
    for blk in 0..2u32 {
        if blk == 0 {
            meta::write_meta_page(buf, &m);
        } else {
            page::init_page(buf, PageKind::Delta, 0, 0);
            page::body_mut(buf)[..8].copy_from_slice(&0u64.to_le_bytes());
            page::set_body_len(buf, 8);
        }
        pg_sys::PageSetChecksumInplace(buf, blk);
        pg_sys::smgrextend(smgr, pg_sys::ForkNumber::INIT_FORKNUM, blk, buf as *mut std::os::raw::c_char, true);
        pg_sys::log_newpage(&mut (*smgr).smgr_rnode.node, pg_sys::ForkNumber::INIT_FORKNUM, blk, buf, true);
    }
    pg_sys::smgrimmedsync(smgr, pg_sys::ForkNumber::INIT_FORKNUM);
    pg_sys::pfree(buf as *mut std::ffi::c_void);
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildphasename(phase: i64) -> *mut std::os::raw::c_char {
    match phase {
        PHASE_SORT => c"sorting keys".as_ptr() as *mut _,
        PHASE_WRITE => c"writing the base structure".as_ptr() as *mut _,
        _ => std::ptr::null_mut(),
    }
}
