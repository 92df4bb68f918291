//! CREATE INDEX: scan the heap, sort, write the static stage bottom-up.

use std::cmp::Ordering;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::meta::{self, HybridMeta, META_BLOCK};
use super::{delta, options, static_io};
use crate::keys::{index_desc, IndexDesc};
use crate::storage::buffer::{nblocks, Buf};
use crate::storage::page::{self, PageKind};
use crate::storage::wal::WalRecord;

const PHASE_SORT: i64 = 2;
const PHASE_WRITE: i64 = 3;

/// Keys of all heap tuples, stored back to back to keep memory at about
/// key bytes + 24 bytes per tuple.
struct Spool {
    desc: std::rc::Rc<IndexDesc>,
    bytes: Vec<u8>,
    entries: Vec<(u64, u32, Tid, bool)>,
    scratch: Vec<u8>,
}

impl Spool {
    fn key(&self, e: &(u64, u32, Tid, bool)) -> &[u8] {
        &self.bytes[e.0 as usize..e.0 as usize + e.1 as usize]
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
    spool.entries.push((off, scratch.len() as u32, item_to_tid(tid), alive));
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
    let elastic = crate::elastic::is_elastic(index);
    if elastic {
        crate::elastic::check_keys(index, &desc);
    }
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
    entries.sort_unstable_by(|a, b| desc.compare(spool.key(a), spool.key(b)).then(a.2.cmp(&b.2)));
    // Uniqueness comes from the IndexInfo PostgreSQL passes, not the
    // catalog: VACUUM FULL and CLUSTER rebuild an invalid unique index (a
    // failed CREATE UNIQUE INDEX CONCURRENTLY) with ii_Unique = false.
    let unique = (*index_info).ii_Unique;
    if unique {
        check_unique_build(index, &desc, (*index_info).ii_NullsNotDistinct, &spool, &entries);
    }
    let ntuples = entries.len() as f64;

    pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_SUBPHASE as i32, PHASE_WRITE);
    if elastic {
        let m = init_empty(index);
        let batch: Vec<(Vec<u8>, Tid)> = entries.iter().map(|e| (spool.key(e).to_vec(), e.2)).collect();
        drop(entries);
        drop(spool);
        let out = crate::elastic::tree::apply_batch(index, &desc, &m, &batch, true, &mut |n| {
            pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE as i32, n.min(batch.len()) as i64)
        });
        super::merge::list_for_recycling(index, &out.deleted);
        meta::update(index, |m| {
            m.next_generation = 2;
            m.stat.generation = 1;
            m.stat.root = out.meta_blk;
            m.stat.first_leaf = out.root;
            m.stat.height = out.stats.height as u32;
            m.stat.keys = out.entries;
            m.stat.tids = out.entries;
            m.stat.pages = out.tree_pages;
        });
        if crate::shmem::available() {
            crate::shmem::forget_index(pg_sys::MyDatabaseId, (*index).rd_id, Some(crate::shmem::slot_key(index)));
        }
        let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBuildResult>()) as *mut pg_sys::IndexBuildResult;
        (*r).heap_tuples = reltuples;
        (*r).index_tuples = ntuples;
        return r;
    }
    let mut m = init_empty(index);
    let gen = m.next_generation;
    let mut grouped = Grouped { spool: &spool, entries: &entries, i: 0 };
    let res = static_io::write_stage(
        index,
        &mut grouped,
        gen,
        options::compression_lz4(index),
        &mut |n| pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE as i32, n as i64),
    );
    m = meta::update(index, |m| {
        m.next_generation = gen + 1;
        m.stat.generation = gen;
        m.stat.root = res.root;
        m.stat.height = res.height;
        m.stat.first_leaf = res.first_leaf;
        m.stat.last_leaf = res.last_leaf;
        m.stat.compressed = options::compression_lz4(index) as u32;
        m.stat.keys = res.nkeys;
        m.stat.tids = res.ntids;
        m.stat.pages = (res.nleaves + res.ninner) as u64;
        m.stat.body_bytes = res.body_bytes;
    });
    let _ = m;
    // The index's previous storage (REINDEX, TRUNCATE) is gone, and a
    // relfilenode reused by the system must not inherit a stale slot.
    if crate::shmem::available() {
        crate::shmem::forget_index(pg_sys::MyDatabaseId, (*index).rd_id, Some(crate::shmem::slot_key(index)));
        // A unique index starts with a filter over its keys (state.rs,
        // KeyFilter) so the first inserts skip the static descent.
        if unique && desc.hashable && !entries.is_empty() {
            let hashes: Vec<u64> = entries.iter().filter_map(|e| desc.key_hash(spool.key(e))).collect();
            if let Some(f) = super::state::KeyFilter::build(gen, &hashes) {
                let slot = crate::shmem::slot_for(index);
                let _g = slot.exclusive();
                slot.get().dual.install_key_filter(Some(f));
            }
        }
    }
    let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBuildResult>()) as *mut pg_sys::IndexBuildResult;
    (*r).heap_tuples = reltuples;
    (*r).index_tuples = ntuples;
    r
}

/// Groups equal keys into (key, tids) for the static stage builder.
struct Grouped<'a> {
    spool: &'a Spool,
    entries: &'a [(u64, u32, Tid, bool)],
    i: usize,
}

impl Iterator for Grouped<'_> {
    type Item = (Vec<u8>, Vec<Tid>);
    fn next(&mut self) -> Option<Self::Item> {
        let first = self.entries.get(self.i)?;
        let key = self.spool.key(first);
        let mut tids = vec![first.2];
        self.i += 1;
        while let Some(e) = self.entries.get(self.i) {
            if self.spool.key(e) != key {
                break;
            }
            tids.push(e.2);
            self.i += 1;
        }
        Some((key.to_vec(), tids))
    }
}

unsafe fn check_unique_build(index: pg_sys::Relation, desc: &IndexDesc, nulls_not_distinct: bool, spool: &Spool, entries: &[(u64, u32, Tid, bool)]) {
    let mut prev: Option<&(u64, u32, Tid, bool)> = None;
    for e in entries.iter().filter(|e| e.3) {
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
unsafe fn init_empty(index: pg_sys::Relation) -> HybridMeta {
    let metab = Buf::extend(index);
    assert_eq!(metab.blkno(), META_BLOCK);
    let mut m = HybridMeta::new();
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
    let mut m = HybridMeta::new();
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
        PHASE_WRITE => c"writing static stage".as_ptr() as *mut _,
        _ => std::ptr::null_mut(),
    }
}
