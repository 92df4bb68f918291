//! CREATE INDEX: scan the heap, sort, check uniqueness, and hand the sorted
//! entries to the base structure; the metapage and an empty delta log are
//! the engine's.

use std::cmp::Ordering;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::base::Entry;
use super::meta::{self, IndexMeta, META_BLOCK};
use super::predlock;
use super::state::SlotState;
use pg_hybrid_core::external_sort::{BuildSorter, SpillFile};
use pg_hybrid_core::partition::{map_capacity, BoundaryChooser};
use super::{delta, merge};
use crate::keys::{index_desc, IndexDesc};
use crate::storage::buffer::{nblocks, Buf};
use crate::storage::page::{self, PageKind};
use crate::storage::wal::WalRecord;

const PHASE_SORT: i64 = 2;
const PHASE_WRITE: i64 = 3;

/// The index's order, for the build's sort.
type KeyOrder = Box<dyn FnMut(&[u8], &[u8]) -> Ordering>;

/// The build's entries: their keys, sorted within maintenance_work_mem
/// (`core::external_sort`; beyond it, sorted runs in a temporary file).
struct Spool {
    desc: std::rc::Rc<IndexDesc>,
    sorter: BuildSorter<TempFile, KeyOrder>,
    scratch: Vec<u8>,
}

/// The sort's spill file: a BufFile, so it lives under temp_tablespaces,
/// counts against temp_file_limit and is removed at the end of the
/// transaction, also one that fails.
struct TempFile(*mut pg_sys::BufFile);

impl TempFile {
    unsafe fn create() -> TempFile {
        TempFile(pg_sys::BufFileCreateTemp(false))
    }
}

impl SpillFile for TempFile {
    type Pos = (i32, pg_sys::off_t);

    fn tell(&mut self) -> Self::Pos {
        let (mut fileno, mut offset) = (0, 0 as pg_sys::off_t);
        unsafe { pg_sys::BufFileTell(self.0, &mut fileno, &mut offset) };
        (fileno, offset)
    }

    fn append(&mut self, bytes: &[u8]) {
        unsafe { pg_sys::BufFileWrite(self.0, bytes.as_ptr() as *mut std::ffi::c_void, bytes.len()) }
    }

    fn read_at(&mut self, pos: Self::Pos, buf: &mut [u8]) -> (usize, Self::Pos) {
        unsafe {
            if pg_sys::BufFileSeek(self.0, pos.0, pos.1, SEEK_SET) != 0 {
                pgrx::error!("could not seek in the temporary file of an index build");
            }
            let n = pg_sys::BufFileRead(self.0, buf.as_mut_ptr() as *mut std::ffi::c_void, buf.len());
            (n, self.tell())
        }
    }
}

/// <stdio.h>'s SEEK_SET, which pg_sys does not bind (0 on every platform
/// PostgreSQL runs on).
const SEEK_SET: i32 = 0;

impl Drop for TempFile {
    fn drop(&mut self) {
        // During ERROR cleanup the resource owner closes the file.
        if !std::thread::panicking() {
            unsafe { pg_sys::BufFileClose(self.0) }
        }
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
    spool.sorter.push(&scratch, item_to_tid(tid), alive, || TempFile::create());
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
    let base = ams::base(index);
    crate::keys::opfamily::check_index(index, base.ordered());
    let desc = index_desc(index);
    base.check_definition(index, &desc);
    let order: KeyOrder = {
        let desc = desc.clone();
        Box::new(move |a: &[u8], b: &[u8]| desc.compare(a, b))
    };
    let mem_limit = (pg_sys::maintenance_work_mem.max(64) as usize).saturating_mul(1024);
    let mut sorter = BuildSorter::new(mem_limit, order);
    if desc.memcmp {
        sorter = sorter.byte_ordered();
    }
    let mut spool = Spool { desc: desc.clone(), sorter, scratch: Vec::new() };
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
    let count = spool.sorter.len() as usize;
    let sorted = spool.sorter.finish();
    // Uniqueness comes from the IndexInfo PostgreSQL passes, not the
    // catalog: VACUUM FULL and CLUSTER rebuild an invalid unique index (a
    // failed CREATE UNIQUE INDEX CONCURRENTLY) with ii_Unique = false.
    let unique = (*index_info).ii_Unique;
    let nulls_not_distinct = (*index_info).ii_NullsNotDistinct;

    pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_SUBPHASE as i32, PHASE_WRITE);
    let m = init_empty(index);
    let gen = m.next_generation;
    // What else the build needs of every key, taken as the sorted entries
    // stream into the base structure: a duplicate check against the
    // previous live key, the key hashes of a unique index's filter, and
    // the key-range partitions of predicate locking.
    let mut key_filter = if unique && desc.hashable && count > 0 && crate::shmem::available() {
        super::state::KeyFilter::start(gen, count as u64)
    } else {
        None
    };
    let mut bounds = BoundaryChooser::new(count, map_capacity(page::BODY_CAP)).in_order(predlock::key_order(&desc));
    let mut prev_live: Option<Vec<u8>> = None;
    let mut items = sorted.map(|e| {
        if unique && e.alive {
            if let Some(p) = &prev_live {
                if desc.compare_keycols(p, &e.key) == Ordering::Equal && (nulls_not_distinct || !desc.has_null_keycol(&e.key)) {
                    super::insert::report_duplicate(index, &desc, &e.key, true);
                }
            }
            let p = prev_live.get_or_insert_with(Vec::new);
            p.clear();
            p.extend_from_slice(&e.key);
        }
        if let (Some(f), Some(h)) = (key_filter.as_mut(), desc.key_hash(&e.key)) {
            f.add(h);
        }
        bounds.offer(desc.keycols(&e.key));
        Entry { key: e.key, tid: e.tid }
    });
    let res = base.build(index, &desc, &m, &mut items, count, gen, &mut |n| {
        pg_sys::pgstat_progress_update_param(pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE as i32, n as i64)
    });
    // A structure may stop reading before the end only by raising an
    // error; drain whatever it left so every check above saw every key.
    items.for_each(drop);
    merge::list_for_recycling(index, &res.freed);
    let lockmap = if count > 0 { predlock::write_map(index, &bounds.finish()) } else { 0 };
    meta::update(index, |m| {
        m.lockmap = lockmap;
        m.map_entries = if lockmap != 0 { count as u64 } else { 0 };
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
        if let Some(f) = key_filter {
            let slot = crate::shmem::slot_for(index);
            let _g = slot.exclusive();
            slot.state().install_key_filter(Some(f));
        }
    }
    let ntuples = count as f64;
    let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBuildResult>()) as *mut pg_sys::IndexBuildResult;
    (*r).heap_tuples = reltuples;
    (*r).index_tuples = ntuples;
    r
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
