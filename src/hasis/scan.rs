//! Reads of a hasis table: sequential (serial and parallel), bitmap, TID,
//! ANALYZE sampling, and the fetches index scans make.
//!
//! A scan reads one extent (or, for bitmap and ANALYZE scans, the versions
//! of one TID block) at a time under the extent's header share lock,
//! decides visibility for each version there (hint bits written back in
//! place), copies the visible rows out and releases the locks before
//! returning any of them, as heap's page-at-a-time mode does.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::row::Mvcc;
use pg_hybrid_core::tid::Tid;

use super::relation::{self, Lookup, Meta, Select};
use super::tuple;
use super::visibility::*;
use crate::storage::buffer::{nblocks, KeptPins, Lock};

/// A version a scan will return.
pub struct Pending {
    pub tid: Tid,
    pub mvcc: Mvcc,
    pub natts: u16,
    pub payload: Vec<u8>,
}

/// PostgreSQL's scan descriptor with hasis's state behind it.
#[repr(C)]
pub struct HasisScan {
    pub base: pg_sys::TableScanDescData,
    pub state: *mut ScanState,
}

pub struct ScanState {
    pub meta: Option<Meta>,
    /// Blocks when the scan started (TID scans' validity bound).
    pub nblocks: u32,
    next_extent: u32,
    pending: Vec<Pending>,
    pos: usize,
    strategy: pg_sys::BufferAccessStrategy,
    worker: Option<Box<pg_sys::ParallelBlockTableScanWorkerData>>,
    worker_started: bool,
    /// ANALYZE: the TID block chosen by scan_analyze_next_block, until its
    /// versions are loaded.
    analyze_block: Option<u32>,
    /// TABLESAMPLE: the TID block being sampled (None before the first).
    sample_block: Option<u32>,
    /// Serial sequential scans: the extent whose visible versions are in
    /// `pending` (None: not started, or run off either end), for scans that
    /// change direction (SCROLL cursors).
    cur_extent: Option<u32>,
    /// TID range scans: the inclusive bounds.
    tid_range: Option<(Tid, Tid)>,
    slot_schema: tuple::SlotSchema,
    /// Bitmap heap scans: the columns the plan uses (`colscan::fetch`);
    /// the others come back NULL. None: every column.
    pub wanted: Option<Vec<bool>>,
    /// Bitmap heap scans: `wanted` and the columns of the recheck quals,
    /// for pages whose rows must be rechecked (lossy pages, lossy index
    /// entries); `page_recheck` says which set the current page used.
    pub wanted_recheck: Option<Vec<bool>>,
    page_recheck: bool,
    /// Bitmap heap scans: whether the plan reads an MVCC system column
    /// (xmin, xmax, cmin, cmax) of the table; when not, rows of all-visible
    /// parts are fetched without their row headers (`frozen_column_row`).
    pub mvcc_needed: bool,
    /// Bitmap heap scans: pins kept on blocks of the extent read last
    /// (`kept_extent`), as index fetches keep them (`HasisFetch::kept`):
    /// the rows of a bitmap page read the same column blocks, and the
    /// pages of one extent its header block.
    kept: KeptPins,
    kept_extent: Option<u32>,
}

impl ScanState {
    fn reset(&mut self) {
        self.next_extent = 0;
        self.pending.clear();
        self.pos = 0;
        self.worker_started = false;
        self.analyze_block = None;
        self.sample_block = None;
        self.cur_extent = None;
        self.page_recheck = false;
    }
}

/// The columns a bitmap page's rows are read with: with the recheck
/// quals' columns when the page's rows are rechecked.
fn page_columns<'a>(wanted: &'a Option<Vec<bool>>, wanted_recheck: &'a Option<Vec<bool>>, page_recheck: bool) -> Option<&'a [bool]> {
    if page_recheck {
        wanted_recheck.as_deref()
    } else {
        wanted.as_deref()
    }
}

pub unsafe fn state<'a>(scan: pg_sys::TableScanDesc) -> &'a mut ScanState {
    &mut *(*(scan as *mut HasisScan)).state
}

pub unsafe fn begin(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
    key: pg_sys::ScanKey,
    parallel: pg_sys::ParallelTableScanDesc,
    flags: u32,
) -> pg_sys::TableScanDesc {
    crate::require_preload();
    let scan = pg_sys::palloc0(std::mem::size_of::<HasisScan>()) as *mut HasisScan;
    (*scan).base.rs_rd = rel;
    (*scan).base.rs_snapshot = snapshot;
    (*scan).base.rs_nkeys = nkeys;
    (*scan).base.rs_key = key;
    (*scan).base.rs_flags = flags;
    (*scan).base.rs_parallel = parallel;
    let blocks = nblocks(rel);
    let large = flags & pg_sys::ScanOptions::SO_ALLOW_STRAT != 0 && blocks as i32 > pg_sys::NBuffers / 4;
    let st = ScanState {
        meta: relation::read_meta_within(rel, blocks),
        nblocks: blocks,
        next_extent: 0,
        pending: Vec::new(),
        pos: 0,
        strategy: if large { pg_sys::GetAccessStrategy(pg_sys::BufferAccessStrategyType::BAS_BULKREAD) } else { std::ptr::null_mut() },
        worker: (!parallel.is_null()).then(|| Box::new(std::mem::zeroed())),
        worker_started: false,
        analyze_block: None,
        sample_block: None,
        cur_extent: None,
        tid_range: None,
        slot_schema: Default::default(),
        wanted: None,
        wanted_recheck: None,
        page_recheck: false,
        mvcc_needed: true,
        kept: KeptPins::new(rel, FETCH_KEPT_PINS),
        kept_extent: None,
    };
    (*scan).state = Box::into_raw(Box::new(st));
    // A sequential scan of a serializable transaction locks the relation
    // (heap_beginscan does the same: nothing finer exists to lock).
    if flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN != 0 {
        PredicateLockRelation(rel, snapshot);
    }
    scan as pg_sys::TableScanDesc
}

pub unsafe fn end(scan: pg_sys::TableScanDesc) {
    let hs = scan as *mut HasisScan;
    let st = Box::from_raw((*hs).state);
    if !st.strategy.is_null() {
        pg_sys::FreeAccessStrategy(st.strategy);
    }
    drop(st);
    if (*scan).rs_flags & pg_sys::ScanOptions::SO_TEMP_SNAPSHOT != 0 {
        pg_sys::UnregisterSnapshot((*scan).rs_snapshot);
    }
    pg_sys::pfree(scan as *mut std::ffi::c_void);
}

pub unsafe fn rescan(scan: pg_sys::TableScanDesc, key: pg_sys::ScanKey) {
    if !key.is_null() && (*scan).rs_nkeys > 0 {
        std::ptr::copy(key, (*scan).rs_key, (*scan).rs_nkeys as usize);
    }
    let rel = (*scan).rs_rd;
    let st = state(scan);
    st.reset();
    st.nblocks = nblocks(rel);
    st.meta = relation::read_meta_within(rel, st.nblocks);
}

/// The next extent this scan (or this parallel worker) reads.
pub unsafe fn next_extent(scan: pg_sys::TableScanDesc) -> Option<u32> {
    let rel = (*scan).rs_rd;
    let st = state(scan);
    let meta = st.meta?;
    let Some(worker) = st.worker.as_mut() else {
        let k = st.next_extent;
        st.next_extent += 1;
        return (k < meta.nextents).then_some(k);
    };
    // Parallel: blocks are handed out by PostgreSQL's block allocator; a
    // worker reads the extents whose header blocks it was given.
    let pbscan = (*scan).rs_parallel as pg_sys::ParallelBlockTableScanDesc;
    if !st.worker_started {
        pg_sys::table_block_parallelscan_startblock_init(rel, &mut **worker, pbscan);
        st.worker_started = true;
    }
    loop {
        let blk = pg_sys::table_block_parallelscan_nextpage(rel, &mut **worker, pbscan);
        if blk == pg_sys::InvalidBlockNumber {
            return None;
        }
        if let Some(k) = meta.extent_of(blk) {
            if meta.extent_first(k) == blk {
                return Some(k);
            }
        }
    }
}

/// Loads the versions of `select` in extent `k` visible to `snapshot`.
unsafe fn load_visible(rel: pg_sys::Relation, st: &mut ScanState, k: u32, select: Select, snapshot: pg_sys::Snapshot, lock_tids: bool) {
    st.pending.clear();
    st.pos = 0;
    let meta = st.meta.expect("scan of a non-empty table");
    let pending = &mut st.pending;
    relation::visit_extent(rel, &meta, k, select, st.strategy, &mut |v| {
        let (vis, hint) = visible(rel, snapshot, &v.header.mvcc, v.tid, v.buffer);
        if let Some(h) = hint {
            v.set_hint(h);
        }
        if vis {
            if lock_tids {
                let mut ip = to_item_pointer(v.tid);
                PredicateLockTID(rel, &mut ip, snapshot, pg_sys::TransactionId::from(v.header.mvcc.xmin));
            }
            pending.push(Pending { tid: v.tid, mvcc: v.header.mvcc, natts: v.header.natts, payload: v.payload.to_vec() });
        }
    });
}

unsafe fn emit(rel: pg_sys::Relation, st: &mut ScanState, slot: *mut pg_sys::TupleTableSlot) -> bool {
    if st.pos < st.pending.len() {
        let p = &st.pending[st.pos];
        st.pos += 1;
        let wanted = page_columns(&st.wanted, &st.wanted_recheck, st.page_recheck);
        tuple::store_columns(rel, slot, &mut st.slot_schema, p.natts, &p.payload, &p.mvcc, p.tid, wanted);
        true
    } else {
        false
    }
}

pub unsafe fn getnextslot(scan: pg_sys::TableScanDesc, dir: pg_sys::ScanDirection::Type, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let rel = (*scan).rs_rd;
    if (*scan).rs_parallel.is_null() {
        return serial_next(scan, dir == pg_sys::ScanDirection::BackwardScanDirection, slot);
    }
    loop {
        if emit(rel, state(scan), slot) {
            return true;
        }
        let Some(k) = next_extent(scan) else {
            pg_sys::ExecClearTuple(slot);
            return false;
        };
        load_visible(rel, state(scan), k, Select::All, (*scan).rs_snapshot, false);
    }
}

/// A serial sequential scan, either direction (heapgettup's rules): `pos`
/// is the index in `pending` of the next version forward, so the one
/// returned last is `pos - 1` and a backward step returns `pos - 2`. A scan
/// that ran off an end starts again from that end's far side: forward
/// from the first extent, backward from the last.
unsafe fn serial_next(scan: pg_sys::TableScanDesc, backward: bool, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let rel = (*scan).rs_rd;
    let snapshot = (*scan).rs_snapshot;
    let st = state(scan);
    let Some(meta) = st.meta else {
        pg_sys::ExecClearTuple(slot);
        return false;
    };
    // The extents to visit: all, or those a TID range touches.
    let (lo, hi) = match st.tid_range {
        None => (0, meta.nextents.checked_sub(1)),
        Some((min, max)) => (
            meta.extent_of(min.block).unwrap_or(0),
            if max.block >= meta.extent_first(meta.nextents) { meta.nextents.checked_sub(1) } else { meta.extent_of(max.block) },
        ),
    };
    let range = st.tid_range;
    let load = |st: &mut ScanState, k: u32| {
        load_visible(rel, st, k, Select::All, snapshot, false);
        if let Some((min, max)) = range {
            st.pending.retain(|p| p.tid >= min && p.tid <= max);
            st.pending.sort_by_key(|p| p.tid);
        }
    };
    loop {
        let Some(k) = st.cur_extent else {
            let Some(hi) = hi.filter(|&h| h >= lo && range.is_none_or(|(min, max)| min <= max)) else {
                pg_sys::ExecClearTuple(slot);
                return false;
            };
            let k = if backward { hi } else { lo };
            load(st, k);
            st.pos = if backward { st.pending.len() + 1 } else { 0 };
            st.cur_extent = Some(k);
            continue;
        };
        let idx = if backward { st.pos.checked_sub(2) } else { (st.pos < st.pending.len()).then_some(st.pos) };
        if let Some(i) = idx {
            st.pos = if backward { st.pos - 1 } else { st.pos + 1 };
            let p = &st.pending[i];
            tuple::store(rel, slot, &mut st.slot_schema, p.natts, &p.payload, &p.mvcc, p.tid);
            return true;
        }
        let next = if backward { k.checked_sub(1).filter(|&n| n >= lo) } else { (Some(k + 1) <= hi).then_some(k + 1) };
        match next {
            Some(n) => {
                load(st, n);
                st.pos = if backward { st.pending.len() + 1 } else { 0 };
                st.cur_extent = Some(n);
            }
            None => {
                st.cur_extent = None;
                pg_sys::ExecClearTuple(slot);
                return false;
            }
        }
    }
}

/// TID range scans (`WHERE ctid >= ... AND ctid < ...`): the serial scan
/// over the extents the inclusive range touches, each extent's versions in
/// TID order and filtered to the range.
pub unsafe fn set_tidrange(scan: pg_sys::TableScanDesc, min: pg_sys::ItemPointer, max: pg_sys::ItemPointer) {
    let st = state(scan);
    st.reset();
    st.tid_range = Some((from_item_pointer(&*min), from_item_pointer(&*max)));
}

pub unsafe fn getnextslot_tidrange(scan: pg_sys::TableScanDesc, dir: pg_sys::ScanDirection::Type, slot: *mut pg_sys::TupleTableSlot) -> bool {
    serial_next(scan, dir == pg_sys::ScanDirection::BackwardScanDirection, slot)
}

/// One TID block of a bitmap heap scan. Index entries name HOT chain roots,
/// so each TID is a chain walk (its visible member may lie in another TID
/// block of the extent); a lossy block means every chain rooted in it.
pub unsafe fn bitmap_next_block(scan: pg_sys::TableScanDesc, tbmres: *mut pg_sys::TBMIterateResult) -> bool {
    let rel = (*scan).rs_rd;
    let snapshot = (*scan).rs_snapshot;
    let st = state(scan);
    st.pending.clear();
    st.pos = 0;
    let blk = (*tbmres).blockno;
    let Some(meta) = st.meta else { return false };
    // Pins are kept for the rows of a page, and for the next page of the
    // same extent.
    let extent = meta.extent_of(blk);
    if extent != st.kept_extent {
        st.kept.release();
        st.kept_extent = extent;
    }
    let mut kept = std::mem::replace(&mut st.kept, KeptPins::new(rel, 0));
    let found = kept.scope(|| load_bitmap_block(rel, st, &meta, tbmres, snapshot));
    st.kept = kept;
    found
}

/// The visible versions of bitmap page `tbmres` into `st.pending`.
unsafe fn load_bitmap_block(rel: pg_sys::Relation, st: &mut ScanState, meta: &Meta, tbmres: *mut pg_sys::TBMIterateResult, snapshot: pg_sys::Snapshot) -> bool {
    let blk = (*tbmres).blockno;
    let Some(ext) = relation::ExtentRead::of(rel, meta, Tid::new(blk, 1)) else { return false };
    let offsets: Vec<u16> = if (*tbmres).ntuples >= 0 {
        (*tbmres).offsets.as_slice((*tbmres).ntuples as usize).to_vec()
    } else {
        (1..=pg_hybrid_core::hasis::layout::MAX_OFFSET as u16).collect()
    };
    // An exact page's offsets come from index entries, which name chain
    // roots: a column row of an all-visible part there is the visible
    // version (as in `hot_search`). A lossy page's offsets are every slot,
    // heap-only members too, so those walk their chains.
    let headers_free = (*tbmres).ntuples >= 0 && !st.mvcc_needed && ext.h.all_visible && is_mvcc_snapshot(snapshot);
    st.page_recheck = (*tbmres).recheck;
    let (pending, wanted) = (&mut st.pending, page_columns(&st.wanted, &st.wanted_recheck, st.page_recheck));
    for off in offsets {
        let Some(root) = ext.slot(Tid::new(blk, off)) else { continue };
        if root >= ext.h.slot_hwm {
            continue;
        }
        if headers_free {
            if let Some(p) = frozen_column_row(rel, &ext, root, wanted, snapshot) {
                pending.push(p);
                continue;
            }
        }
        walk_chain(&ext, root, true, true, &mut |loc| {
            if check_visible(rel, snapshot, loc) {
                let mut ip = to_item_pointer(loc.tid);
                PredicateLockTID(rel, &mut ip, snapshot, pg_sys::TransactionId::from(loc.header.mvcc.xmin));
                pending.push(Pending { tid: loc.tid, mvcc: loc.header.mvcc, natts: loc.header.natts, payload: loc.payload_of(wanted).into_owned() });
                return Walk::Stop;
            }
            Walk::Next
        });
    }
    !st.pending.is_empty()
}

pub unsafe fn bitmap_next_tuple(scan: pg_sys::TableScanDesc, _tbmres: *mut pg_sys::TBMIterateResult, slot: *mut pg_sys::TupleTableSlot) -> bool {
    emit((*scan).rs_rd, state(scan), slot)
}

pub unsafe fn analyze_next_block(scan: pg_sys::TableScanDesc, blockno: pg_sys::BlockNumber, _strategy: pg_sys::BufferAccessStrategy) -> bool {
    let st = state(scan);
    st.pending.clear();
    st.pos = 0;
    st.analyze_block = Some(blockno);
    true
}

/// ANALYZE's sample of one TID block, counted as heap counts: live rows
/// (and rows this transaction inserts) are sampled; dead and recently dead
/// ones counted as dead; rows another transaction is deleting are live.
pub unsafe fn analyze_next_tuple(
    scan: pg_sys::TableScanDesc,
    oldest_xmin: pg_sys::TransactionId,
    liverows: *mut f64,
    deadrows: *mut f64,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    use pg_sys::HTSV_Result::*;
    let rel = (*scan).rs_rd;
    let st = state(scan);
    if let Some(blk) = st.analyze_block.take() {
        if let Some(meta) = st.meta {
            if let Some(k) = meta.extent_of(blk) {
                let pending = &mut st.pending;
                relation::visit_extent(rel, &meta, k, Select::TidBlock(blk), st.strategy, &mut |v| {
                    let m = v.header.mvcc;
                    let (r, hint, _) = vacuum_state(&m, v.tid, (*rel).rd_id, oldest_xmin, v.buffer);
                    if let Some(h) = hint {
                        v.set_hint(h);
                    }
                    let sample = match r {
                        HEAPTUPLE_LIVE => true,
                        HEAPTUPLE_INSERT_IN_PROGRESS => pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmin)),
                        HEAPTUPLE_DELETE_IN_PROGRESS => !pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(update_xid(&m))),
                        _ => false,
                    };
                    if sample {
                        *liverows += 1.0;
                        pending.push(Pending { tid: v.tid, mvcc: m, natts: v.header.natts, payload: v.payload.to_vec() });
                    } else if r != HEAPTUPLE_INSERT_IN_PROGRESS {
                        *deadrows += 1.0;
                    }
                });
            }
        }
    }
    if emit(rel, st, slot) {
        true
    } else {
        pg_sys::ExecClearTuple(slot);
        false
    }
}

/// TABLESAMPLE's next block (heapam_scan_sample_next_block): the sampling
/// method's choice, or every block in order. The block's visible versions
/// (those whose TIDs lie in it) are loaded, in offset order.
pub unsafe fn sample_next_block(scan: pg_sys::TableScanDesc, sample: *mut pg_sys::SampleScanState) -> bool {
    let rel = (*scan).rs_rd;
    let st = state(scan);
    st.pending.clear();
    st.pos = 0;
    if st.nblocks == 0 || st.meta.is_none() {
        return false;
    }
    let tsm = (*sample).tsmroutine;
    let blockno = match (*tsm).NextSampleBlock {
        Some(next) => next(sample, st.nblocks),
        None => match st.sample_block {
            None => 0,
            Some(b) if b + 1 < st.nblocks => b + 1,
            Some(_) => pg_sys::InvalidBlockNumber,
        },
    };
    if blockno == pg_sys::InvalidBlockNumber {
        st.sample_block = None;
        return false;
    }
    st.sample_block = Some(blockno);
    let meta = st.meta.expect("checked above");
    if let Some(k) = meta.extent_of(blockno) {
        load_visible(rel, st, k, Select::TidBlock(blockno), (*scan).rs_snapshot, true);
    }
    true
}

/// TABLESAMPLE's next row of the block: the offsets the sampling method
/// asks for, up to the block's largest offset in use, that hold a visible
/// version.
pub unsafe fn sample_next_tuple(scan: pg_sys::TableScanDesc, sample: *mut pg_sys::SampleScanState, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let rel = (*scan).rs_rd;
    let st = state(scan);
    let tsm = (*sample).tsmroutine;
    let next = (*tsm).NextSampleTuple.expect("sampling methods have NextSampleTuple");
    let blockno = st.sample_block.unwrap_or(pg_sys::InvalidBlockNumber);
    let maxoffset = st.pending.last().map_or(0, |p| p.tid.offset);
    loop {
        let off = next(sample, blockno, maxoffset);
        if off == 0 || off > maxoffset {
            pg_sys::ExecClearTuple(slot);
            return false;
        }
        // Offsets come in increasing order; the pending versions are too.
        while st.pos < st.pending.len() && st.pending[st.pos].tid.offset < off {
            st.pos += 1;
        }
        if st.pos < st.pending.len() && st.pending[st.pos].tid.offset == off {
            let p = &st.pending[st.pos];
            st.pos += 1;
            tuple::store(rel, slot, &mut st.slot_schema, p.natts, &p.payload, &p.mvcc, p.tid);
            return true;
        }
    }
}

/// State of index scans' fetches.
#[repr(C)]
pub struct HasisFetch {
    pub base: pg_sys::IndexFetchTableData,
    pub meta: Option<Meta>,
    pub slot_schema: tuple::SlotSchema,
    /// The columns the index scan's plan uses (`colscan::fetch`); the
    /// others come back NULL. None: every column.
    pub wanted: Option<Vec<bool>>,
    /// `wanted` and the columns of the index quals, for a row the index
    /// asks the executor to recheck (`xs_recheck` of `index_scan`, set by
    /// the AM's `amgettuple` before the executor fetches the row).
    pub wanted_recheck: Option<Vec<bool>>,
    /// The index scan this fetch serves, where `colscan::fetch` narrowed
    /// its columns (null otherwise: then no row is taken as rechecked).
    pub index_scan: pg_sys::IndexScanDesc,
    /// Whether the plan reads a fetched version's MVCC system columns
    /// (xmin, xmax, cmin, cmax; `colscan::fetch` says when it does not).
    /// Without them, a row of an all-visible column part is fetched under
    /// an MVCC snapshot without reading its row header.
    pub mvcc_needed: bool,
    /// Pins on blocks of the extent fetched from last (`kept_extent`):
    /// consecutive index entries often name rows of one extent (a range,
    /// rows inserted together), whose header and column blocks are then
    /// pinned again without a buffer mapping lookup.
    kept: KeptPins,
    kept_extent: Option<u32>,
}

/// How many of an extent's blocks an index fetch keeps pinned: the header
/// block, a directory block and the column or delta blocks a row needs,
/// up to a block per mini-page for a row of many columns (a fetch holds
/// them all at once while it decodes the row anyway, so keeping them adds
/// no pins to what PostgreSQL's per-backend pin array must track).
const FETCH_KEPT_PINS: usize = crate::storage::buffer::KEPT_PINS_MAX;

/// hasis's column store (`colscan::ColumnStore`): index fetches and bitmap
/// heap scans read the columns `colscan::fetch` finds the plan uses.
pub struct HasisColumns;

pub static COLUMN_STORE: HasisColumns = HasisColumns;

impl super::colscan::ColumnStore for HasisColumns {
    unsafe fn narrow_index_fetch(&self, fetch: *mut pg_sys::IndexFetchTableData, rechecked: pg_sys::IndexScanDesc, cols: super::colscan::FetchColumns) {
        let f = &mut *(fetch as *mut HasisFetch);
        f.wanted = cols.wanted;
        f.wanted_recheck = cols.wanted_recheck;
        f.index_scan = rechecked;
        f.mvcc_needed = cols.mvcc_needed;
    }

    unsafe fn narrow_bitmap_scan(&self, scan: pg_sys::TableScanDesc, cols: super::colscan::FetchColumns) {
        let st = state(scan);
        st.wanted = cols.wanted;
        st.wanted_recheck = cols.wanted_recheck;
        st.mvcc_needed = cols.mvcc_needed;
    }
}

pub unsafe fn fetch_begin(rel: pg_sys::Relation) -> *mut pg_sys::IndexFetchTableData {
    crate::require_preload();
    let f = Box::new(HasisFetch {
        base: pg_sys::IndexFetchTableData { rel },
        meta: relation::cached_meta(rel),
        slot_schema: Default::default(),
        wanted: None,
        wanted_recheck: None,
        index_scan: std::ptr::null_mut(),
        mvcc_needed: true,
        kept: KeptPins::new(rel, FETCH_KEPT_PINS),
        kept_extent: None,
    });
    Box::into_raw(f) as *mut pg_sys::IndexFetchTableData
}

pub unsafe fn fetch_end(scan: *mut pg_sys::IndexFetchTableData) {
    drop(Box::from_raw(scan as *mut HasisFetch));
}

/// The metapage, re-read when a TID lies past the extents known so far
/// (the table grew since).
unsafe fn meta_covering(rel: pg_sys::Relation, meta: &mut Option<Meta>, tid: Tid) -> Option<Meta> {
    let stale = match meta {
        None => true,
        Some(m) => m.extent_of(tid.block).is_none(),
    };
    if stale {
        *meta = relation::meta_covering(rel, tid);
    }
    *meta
}

/// Fetches the version at exactly `tid` (no HOT chain walk) into `slot` if
/// `snapshot` sees it (`tuple_fetch_row_version`).
pub unsafe fn fetch_row_version(rel: pg_sys::Relation, tid: pg_sys::ItemPointer, snapshot: pg_sys::Snapshot, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let tid = from_item_pointer(&*tid);
    let Some(m) = relation::meta_covering(rel, tid) else { return false };
    let Lookup::Found(loc) = relation::locate(rel, &m, tid, Lock::Share) else { return false };
    let mv = loc.header.mvcc;
    let (vis, hint) = visible(rel, snapshot, &mv, tid, loc.buf.buffer());
    if let Some(h) = hint {
        loc.set_hint(h);
    }
    if vis {
        let mut ip = to_item_pointer(tid);
        PredicateLockTID(rel, &mut ip, snapshot, pg_sys::TransactionId::from(mv.xmin));
        tuple::store(rel, slot, &mut tuple::SlotSchema::default(), loc.header.natts, loc.payload(), &loc.header.mvcc, tid);
    }
    vis
}

/// What a HOT chain walk's visitor says next.
pub enum Walk {
    Stop,
    Next,
}

/// Walks the HOT chain at `slot` of `ext` with heap_hot_search_buffer's
/// rules, calling `visit` for each member (its block share-locked) until it
/// says `Stop`. From a chain start (`at_chain_start`), a redirect leads to
/// the chain's first live member and a heap-only version is no chain at
/// all (an index entry never names one). The walk ends where a version is
/// not HOT-updated, and where the next slot's version was not inserted by
/// its predecessor's updater (the slot was freed and reused). The header
/// lock `ext` holds keeps compaction out for the whole walk.
///
/// `skip_dead`: the walk may begin past the chain's members that are dead
/// to everyone (`ChainHint`), as it would after heap's pruning removed
/// them. Only for callers that want visible members: not for one that
/// must account for every member it passes (index_delete_tuples' removal
/// horizon for a standby). With `skip_dead` from a chain start, returns
/// whether every member (skipped or visited) was dead to everyone, for
/// killed-item hints; false otherwise.
pub unsafe fn walk_chain(ext: &relation::ExtentRead, slot: u16, at_chain_start: bool, skip_dead: bool, visit: &mut dyn FnMut(&mut relation::Located) -> Walk) -> bool {
    let hints = (skip_dead && at_chain_start).then(|| (relation::ExtentKey::of(ext.rel(), ext.first), slot));
    let hint = hints.and_then(|k| CHAIN_HINTS.with(|m| m.borrow().get(&k).copied())).filter(|h| h.version == ext.h.version);
    match walk_from(ext, slot, at_chain_start, hints, hint, visit) {
        Hinted::Walked { all_dead } => all_dead,
        Hinted::Stale => {
            // The hint's member is not there (it cannot change inside one
            // page version; this is a guard): forget it, walk from the root.
            CHAIN_HINTS.with(|m| m.borrow_mut().remove(&hints.unwrap()));
            matches!(walk_from(ext, slot, at_chain_start, hints, None, visit), Hinted::Walked { all_dead: true })
        }
    }
}

/// Where a HOT chain's members stop being dead to everyone, as one
/// backend last saw it: its first member that is not, by slot and xmin,
/// under a page version. Dead is for good, and inside one page version a
/// slot keeps its version (compaction, which removes versions and frees
/// slots, makes a new page version), so a walk may begin at `target`. The
/// members before it stay on the page until compaction removes them; the
/// hint spares a reader of a hot row the walk over its dead versions that
/// heap's page pruning spares heap's readers.
#[derive(Clone, Copy)]
struct ChainHint {
    version: u32,
    target: u16,
    target_xmin: u32,
}

const MAX_CHAIN_HINTS: usize = 16384;

thread_local! {
    static CHAIN_HINTS: std::cell::RefCell<pg_hybrid_core::fast_hash::FastMap<(relation::ExtentKey, u16), ChainHint>> = Default::default();
}

enum Hinted {
    /// `all_dead`: every member before the walk's end was dead to everyone
    /// (always false without hints).
    Walked { all_dead: bool },
    /// The hint named a member that is not there; nothing was visited.
    Stale,
}

unsafe fn walk_from(
    ext: &relation::ExtentRead,
    mut slot: u16,
    mut at_chain_start: bool,
    hints: Option<(relation::ExtentKey, u16)>,
    hint: Option<ChainHint>,
    visit: &mut dyn FnMut(&mut relation::Located) -> Walk,
) -> Hinted {
    let mut prev_xmax: Option<u32> = None;
    let mut expect_xmin = None;
    if let Some(h) = hint {
        slot = h.target;
        at_chain_start = false;
        expect_xmin = Some(h.target_xmin);
    }
    // The run of members dead to everyone from where the walk began, and
    // the member that ends it.
    let mut first_member: Option<u16> = None;
    let mut dead_run = hints.is_some();
    let mut first_alive: Option<(u16, u32)> = None;
    let mut vistest: *mut pg_sys::GlobalVisState = std::ptr::null_mut();
    let mut spare: Option<relation::SpareBlock> = None;
    for _ in 0..=ext.g.max_slots() {
        let entry = ext.entry(slot);
        if let pg_hybrid_core::hasis::header::DirEntry::Redirect { slot: target } = entry {
            if !at_chain_start {
                break;
            }
            slot = target;
            at_chain_start = false;
            continue;
        }
        let Some(mut loc) = ext.version_reusing(slot, entry, Lock::Share, &mut spare) else {
            if expect_xmin.is_some() {
                return Hinted::Stale;
            }
            break;
        };
        let m = loc.header.mvcc;
        if let Some(x) = expect_xmin.take() {
            // A hint names a later member of the chain: heap-only, with the
            // xmin it had.
            if m.xmin != x || !is_heap_only(&m) {
                return Hinted::Stale;
            }
        } else if (at_chain_start && is_heap_only(&m)) || prev_xmax.is_some_and(|x| x != m.xmin) {
            break;
        }
        first_member.get_or_insert(slot);
        let next = visit(&mut loc);
        // Hints the visitor set (an aborted updater) may end the chain.
        let m = loc.header.mvcc;
        if dead_run {
            if vistest.is_null() {
                vistest = pg_sys::GlobalVisTestFor(ext.rel());
            }
            if !dead_to_all(&m, vistest) {
                dead_run = false;
                first_alive = Some((slot, m.xmin));
            }
        }
        if let Walk::Stop = next {
            break;
        }
        spare = loc.into_spare(Lock::Share);
        match is_hot_updated(&m).then(|| ext.slot(m.ctid)).flatten() {
            Some(n) => {
                slot = n;
                prev_xmax = Some(update_xid(&m));
                at_chain_start = false;
            }
            None => break,
        }
    }
    if let (Some(key), Some((target, target_xmin))) = (hints, first_alive) {
        if first_member != Some(target) {
            CHAIN_HINTS.with(|m| {
                let mut m = m.borrow_mut();
                if m.len() >= MAX_CHAIN_HINTS {
                    m.clear();
                }
                m.insert(key, ChainHint { version: ext.h.version, target, target_xmin });
            });
        }
    }
    Hinted::Walked { all_dead: dead_run }
}

/// Checks a located version against `snapshot`, writing hint bits back
/// (into the page and into `loc`'s copy of the header).
unsafe fn check_visible(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot, loc: &mut relation::Located) -> bool {
    let (vis, hint) = visible(rel, snapshot, &loc.header.mvcc, loc.tid, loc.buf.buffer());
    if let Some(h) = hint {
        loc.set_hint(h);
        loc.header.mvcc.infomask = h;
    }
    vis
}

/// heap_hot_search_buffer: the member of the HOT chain `tid` names that
/// `snapshot` sees, stored into `slot`, its TID written back to `tid`.
/// `first_call` false continues after the member returned last (non-MVCC
/// snapshots may see several members). `all_dead` says whether every
/// member examined is dead to everyone (for killed-item hints).
unsafe fn hot_search(
    rel: pg_sys::Relation,
    ext: &relation::ExtentRead,
    slot_schema: &mut tuple::SlotSchema,
    wanted: Option<&[bool]>,
    mvcc_needed: bool,
    tid: &mut Tid,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    first_call: bool,
    all_dead: &mut bool,
) -> bool {
    *all_dead = first_call;
    let Some(start) = ext.slot(*tid) else { return false };
    if first_call && !mvcc_needed && ext.h.all_visible && is_mvcc_snapshot(snapshot) {
        if let Some(p) = frozen_column_row(rel, ext, start, wanted, snapshot) {
            tuple::store_columns(rel, slot, slot_schema, p.natts, &p.payload, &p.mvcc, p.tid, wanted);
            *tid = p.tid;
            *all_dead = false;
            return true;
        }
    }
    let mut skip = !first_call;
    let mut found: Option<Tid> = None;
    // From a chain start the walk itself tells whether every member is
    // dead to everyone (it checks them for its chain hints); a continued
    // call reports false, as heap's does.
    let dead = walk_chain(ext, start, first_call, true, &mut |loc| {
        if !skip && check_visible(rel, snapshot, loc) {
            let mut ip = to_item_pointer(loc.tid);
            PredicateLockTID(rel, &mut ip, snapshot, pg_sys::TransactionId::from(loc.header.mvcc.xmin));
            tuple::store_columns(rel, slot, slot_schema, loc.header.natts, &loc.payload_of(wanted), &loc.header.mvcc, loc.tid, wanted);
            found = Some(loc.tid);
            return Walk::Stop;
        }
        skip = false;
        Walk::Next
    });
    *all_dead = first_call && dead;
    match found {
        Some(t) => {
            *tid = t;
            *all_dead = false;
            true
        }
        None => false,
    }
}

/// The version at chain root `root` of an all-visible part
/// (`ext.h.all_visible`) when it is a column row, or when the root is a
/// redirect to one (a row HOT-updated before the compaction that moved its
/// live version into the column part): named by an index entry, it is the
/// visible member of its chain for every MVCC snapshot, since it is neither
/// updated nor deleted (so it ends its chain) and an index entry never
/// names a heap-only version (entries of a freed slot are gone before it
/// is reused); a redirect leads to the chain's next member. Its row
/// header, a block of its own, is not read: the version gets a frozen
/// header, which is what every snapshot makes of it, so only for plans
/// that read no MVCC column. Its TID is the column row's own (the
/// redirect's target, as heap's HOT search returns the member it found).
/// None for any other kind of slot (walk its chain instead).
unsafe fn frozen_column_row(rel: pg_sys::Relation, ext: &relation::ExtentRead, root: u16, wanted: Option<&[bool]>, snapshot: pg_sys::Snapshot) -> Option<Pending> {
    use pg_hybrid_core::hasis::header::DirEntry;
    let (at, row) = match ext.entry(root) {
        DirEntry::Column { row } => (root, row),
        DirEntry::Redirect { slot } => match ext.entry(slot) {
            DirEntry::Column { row } => (slot, row),
            _ => return None,
        },
        _ => return None,
    };
    let tid = ext.tid(at);
    let (natts, payload) = ext.all_visible_values(row, wanted);
    let mut ip = to_item_pointer(tid);
    // Not this transaction's write (committed before every snapshot).
    PredicateLockTID(rel, &mut ip, snapshot, pg_sys::InvalidTransactionId);
    let mvcc = Mvcc { xmin: pg_sys::FrozenTransactionId.into_inner(), xmax: 0, cid: 0, ctid: tid, infomask: HEAP_XMIN_FROZEN | HEAP_XMAX_INVALID, infomask2: 0 };
    Some(Pending { tid, mvcc, natts, payload })
}

fn is_mvcc_snapshot(snapshot: pg_sys::Snapshot) -> bool {
    unsafe { matches!((*snapshot).snapshot_type, pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC) }
}

/// An index scan's fetch: the visible member of the HOT chain whose root
/// the index entry names; with a non-MVCC snapshot, `call_again` asks for
/// the chain's next visible member (heapam_index_fetch_tuple).
pub unsafe fn index_fetch_tuple(
    scan: *mut pg_sys::IndexFetchTableData,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    call_again: *mut bool,
    all_dead: *mut bool,
) -> bool {
    let f = &mut *(scan as *mut HasisFetch);
    let rel = f.base.rel;
    let first_call = !*call_again;
    *call_again = false;
    let mut t = from_item_pointer(&*tid);
    let mut dead = true;
    let recheck = !f.index_scan.is_null() && (*f.index_scan).xs_recheck;
    let wanted = if recheck { f.wanted_recheck.as_deref() } else { f.wanted.as_deref() };
    let found = match meta_covering(rel, &mut f.meta, t) {
        Some(m) => {
            let extent = m.extent_of(t.block);
            let (slot_schema, mvcc_needed) = (&mut f.slot_schema, f.mvcc_needed);
            let search = || match relation::ExtentRead::of(rel, &m, t) {
                Some(ext) => hot_search(rel, &ext, slot_schema, wanted, mvcc_needed, &mut t, snapshot, slot, first_call, &mut dead),
                None => false,
            };
            if extent != f.kept_extent {
                f.kept.release();
                f.kept_extent = extent;
            }
            f.kept.scope(search)
        }
        None => false,
    };
    if found {
        *tid = to_item_pointer(t);
        *call_again = !is_mvcc_snapshot(snapshot);
    }
    if !all_dead.is_null() {
        *all_dead = dead;
    }
    found
}


pub unsafe fn tid_valid(scan: pg_sys::TableScanDesc, tid: pg_sys::ItemPointer) -> bool {
    let t = from_item_pointer(&*tid);
    t.offset != 0 && t.block < state(scan).nblocks
}

pub unsafe fn satisfies_snapshot(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, snapshot: pg_sys::Snapshot) -> bool {
    let tid = from_item_pointer(&(*slot).tts_tid);
    let Some(meta) = relation::meta_covering(rel, tid) else { return false };
    match relation::locate(rel, &meta, tid, Lock::Share) {
        Lookup::Found(loc) => {
            let (vis, hint) = visible(rel, snapshot, &loc.header.mvcc, tid, loc.buf.buffer());
            if let Some(h) = hint {
                loc.set_hint(h);
            }
            vis
        }
        _ => false,
    }
}

/// The newest version of the row at `tid` that the scan's snapshot sees
/// (heap_get_latest_tid): follows the update chain while each successor's
/// xmin is its predecessor's xmax.
pub unsafe fn get_latest_tid(scan: pg_sys::TableScanDesc, tid: pg_sys::ItemPointer) {
    let rel = (*scan).rs_rd;
    let mut t = from_item_pointer(&*tid);
    let Some(meta) = relation::meta_covering(rel, t) else { return };
    let mut prior_xmax: Option<u32> = None;
    loop {
        let loc = match relation::locate(rel, &meta, t, Lock::Share) {
            Lookup::Found(l) => l,
            _ => return,
        };
        let m = loc.header.mvcc;
        if prior_xmax.is_some_and(|x| x != m.xmin) {
            return;
        }
        let (vis, hint) = visible(rel, (*scan).rs_snapshot, &m, t, loc.buf.buffer());
        if let Some(h) = hint {
            loc.set_hint(h);
        }
        if vis {
            *tid = to_item_pointer(t);
        }
        if m.infomask & HEAP_XMAX_INVALID != 0 || m.infomask & HEAP_XMAX_LOCK_ONLY != 0 || m.ctid == t {
            return;
        }
        prior_xmax = Some(update_xid(&m));
        t = m.ctid;
    }
}

/// Which index entries may go (btree's simple and bottom-up deletion): a
/// TID whose slot is gone, or whose HOT chain holds only versions dead to
/// everyone. Returns the newest xid whose removal a hot standby must wait
/// out.
pub unsafe fn index_delete_tuples(rel: pg_sys::Relation, delstate: *mut pg_sys::TM_IndexDeleteOp) -> pg_sys::TransactionId {
    let mut latest: pg_sys::TransactionId = pg_sys::InvalidTransactionId;
    let oldest = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let n = (*delstate).ndeltids as usize;
    let deltids = std::slice::from_raw_parts((*delstate).deltids, n);
    let mut meta: Option<Meta> = None;
    for d in deltids {
        let status = &mut *(*delstate).status.add(d.id as usize);
        let tid = from_item_pointer(&d.tid);
        let Some(m) = meta_covering(rel, &mut meta, tid) else { continue };
        let Some(ext) = relation::ExtentRead::of(rel, &m, tid) else { continue };
        let Some(root) = ext.slot(tid) else { continue };
        let mut all_dead = true;
        let mut chain_latest = pg_sys::InvalidTransactionId;
        walk_chain(&ext, root, true, false, &mut |loc| {
            let (r, hint, mut ht) = vacuum_state(&loc.header.mvcc, loc.tid, (*rel).rd_id, oldest, loc.buf.buffer());
            if let Some(h) = hint {
                loc.set_hint(h);
                loc.header.mvcc.infomask = h;
            }
            if r != pg_sys::HTSV_Result::HEAPTUPLE_DEAD {
                all_dead = false;
                return Walk::Stop;
            }
            HeapTupleHeaderAdvanceLatestRemovedXid(ht.header(), &mut chain_latest);
            Walk::Next
        });
        if all_dead {
            status.knowndeletable = true;
            if chain_latest != pg_sys::InvalidTransactionId && (latest == pg_sys::InvalidTransactionId || pg_sys::TransactionIdFollows(chain_latest, latest)) {
                latest = chain_latest;
            }
        }
    }
    latest
}
