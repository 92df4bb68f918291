//! The executor side of the column scan.
//!
//! Extents are read one at a time (`relation::visit_extent_columns`, the
//! header block share-locked throughout): the column part's row headers
//! decide visibility exactly as the sequential scan does (heap's rules,
//! hints written back), unless the extent's header says the whole part is
//! visible to every snapshot (then no row header is read), then each needed column's mini-page is read once
//! and the visible rows' values copied into an aligned arena; the delta
//! part's visible versions add theirs. The rows then go out one by one as
//! virtual tuples whose by-reference datums point into the arena, which
//! stays put until the next extent is loaded (a scan slot's contents are
//! only valid until the next fetch). Columns the plan does not need are
//! NULL in the slot: no expression above the scan reads them.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::column::{ColumnPart, ValueForm};
use pg_hybrid_core::hasis::row::{payload_values, Schema};
use pg_hybrid_core::tid::Tid;

use super::minmax::{self, Prepared};
use super::path;
use crate::hasis::relation::{self, ColumnVisitor, Meta, Visited};
use crate::hasis::tuple;
use crate::hasis::visibility::*;

pub static mut SCAN_METHODS: pg_sys::CustomScanMethods = pg_sys::CustomScanMethods {
    CustomName: c"HasisColumnScan".as_ptr(),
    CreateCustomScanState: Some(create_state),
};

static mut EXEC_METHODS: pg_sys::CustomExecMethods = pg_sys::CustomExecMethods {
    CustomName: c"HasisColumnScan".as_ptr(),
    BeginCustomScan: Some(begin),
    ExecCustomScan: Some(exec),
    EndCustomScan: Some(end),
    ReScanCustomScan: Some(rescan),
    MarkPosCustomScan: None,
    RestrPosCustomScan: None,
    EstimateDSMCustomScan: Some(estimate_dsm),
    InitializeDSMCustomScan: Some(initialize_dsm),
    ReInitializeDSMCustomScan: Some(reinitialize_dsm),
    InitializeWorkerCustomScan: Some(initialize_worker),
    ShutdownCustomScan: None,
    ExplainCustomScan: Some(explain),
};

pub unsafe fn register() {
    pg_sys::RegisterCustomScanMethods(&raw const SCAN_METHODS);
}

/// The node: PostgreSQL's state first, ours behind a pointer.
#[repr(C)]
struct ColumnScanNode {
    css: pg_sys::CustomScanState,
    scan: *mut ColumnScan,
}

/// A column the plan needs.
struct Needed {
    attno: i16,
    byval: bool,
    attlen: i16,
    align: usize,
}

/// Where a row's value of a needed column is.
#[derive(Clone, Copy)]
enum Value {
    Null,
    /// The version was written before the column was added: its default.
    Missing,
    /// In the arena (a delta row's value, or one that needs aligning).
    At { off: u32, len: u32 },
    /// A by-value datum, or a pointer into the column's gathered stream
    /// (`ColumnScan::streams`), which stays put until the next extent.
    Datum(pg_sys::Datum),
}

/// Whether a by-reference value may be handed out where it lies: a
/// varlena with a one-byte header needs no alignment, anything else its
/// type's.
fn usable_in_place(attlen: i16, align: usize, b: &[u8]) -> bool {
    (attlen == -1 && b.first().is_some_and(|h| h & 0x01 == 0x01)) || (b.as_ptr() as usize).is_multiple_of(align)
}

/// A by-value column's value as its datum (`tuple::byval_datum`), the
/// row's default where it lacks the column.
#[inline(always)]
fn byval_value(missing: bool, v: Option<&[u8]>, attlen: i16) -> Value {
    match v {
        _ if missing => Value::Missing,
        None => Value::Null,
        Some(b) => Value::Datum(tuple::byval_datum(attlen, b)),
    }
}

/// A row ready to go out.
struct RowOut {
    tid: Tid,
}

/// Bytes with 8-byte alignment at offset 0, so a value copied in at its
/// type's alignment is aligned in memory too.
#[derive(Default)]
struct Arena {
    words: Vec<u64>,
    len: usize,
}

impl Arena {
    fn clear(&mut self) {
        self.len = 0;
    }
    fn push(&mut self, bytes: &[u8], align: usize) -> u32 {
        let at = self.len.next_multiple_of(align);
        let end = at + bytes.len();
        if end > self.words.len() * 8 {
            self.words.resize(end.div_ceil(8).max(self.words.len() * 2), 0);
        }
        // SAFETY: `words` holds at least `end` bytes.
        let base = self.words.as_mut_ptr() as *mut u8;
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(at), bytes.len()) };
        self.len = end;
        at as u32
    }
    fn bytes(&self, off: u32, len: u32) -> &[u8] {
        // SAFETY: (off, len) came from `push` since the last `clear`.
        unsafe { std::slice::from_raw_parts((self.words.as_ptr() as *const u8).add(off as usize), len as usize) }
    }
}

/// What EXPLAIN ANALYZE reports.
#[derive(Default)]
struct Counters {
    extents: i64,
    parts_read: i64,
    parts_skipped: i64,
    /// Parts read without their row headers (all visible).
    parts_all_visible: i64,
    column_blocks_read: i64,
    delta_rows: i64,
}

struct ColumnScan {
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    schema: Schema,
    needed: Vec<Needed>,
    /// For attribute number a, the index in `needed` of column a (None: not needed).
    needed_at: Vec<Option<usize>>,
    minmax: Vec<Prepared>,
    meta: Option<Meta>,
    started: bool,
    next_extent: u32,
    /// A parallel scan's shared state (PostgreSQL's block allocator in
    /// dynamic shared memory); null: this process reads every extent.
    pscan: pg_sys::ParallelBlockTableScanDesc,
    /// This process's place in the parallel scan.
    worker: Box<pg_sys::ParallelBlockTableScanWorkerData>,
    worker_started: bool,
    strategy: pg_sys::BufferAccessStrategy,
    rows: Vec<RowOut>,
    /// rows.len() x needed.len(), row-major.
    values: Vec<Value>,
    arena: Arena,
    pos: usize,
    /// The current column part's visible rows: (row in the part, natts).
    part_rows: Vec<(usize, u16)>,
    /// Per needed column, its mini-page's content in the current extent:
    /// `Value::Datum` pointers point in here.
    streams: Vec<Vec<u8>>,
    counters: Counters,
}

#[pg_guard]
unsafe extern "C-unwind" fn create_state(cscan: *mut pg_sys::CustomScan) -> *mut pg_sys::Node {
    let node = pg_sys::palloc0(std::mem::size_of::<ColumnScanNode>()) as *mut ColumnScanNode;
    (*node).css.ss.ps.type_ = pg_sys::NodeTag::T_CustomScanState;
    (*node).css.flags = (*cscan).flags;
    (*node).css.methods = &raw const EXEC_METHODS;
    node as *mut pg_sys::Node
}

/// Frees the scan's Rust state if the query ends without EndCustomScan
/// (an error): the executor's memory goes, and this with it.
#[pg_guard]
unsafe extern "C-unwind" fn free_on_reset(arg: *mut std::ffi::c_void) {
    let node = arg as *mut ColumnScanNode;
    if !(*node).scan.is_null() {
        drop(Box::from_raw((*node).scan));
        (*node).scan = std::ptr::null_mut();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn begin(css: *mut pg_sys::CustomScanState, estate: *mut pg_sys::EState, eflags: i32) {
    crate::require_preload();
    let node = css as *mut ColumnScanNode;
    let cscan = (*css).ss.ps.plan as *const pg_sys::CustomScan;
    let rel = (*css).ss.ss_currentRelation;
    let desc = (*rel).rd_att;
    let atts = (*desc).attrs.as_slice((*desc).natts as usize);
    let (cols, quals) = path::decode_private(cscan);
    let mut needed_at = vec![None; (*desc).natts as usize + 1];
    let needed: Vec<Needed> = cols
        .iter()
        .enumerate()
        .map(|(j, &a)| {
            needed_at[a as usize] = Some(j);
            let att = &atts[a as usize - 1];
            let align = match att.attalign as u8 {
                b'd' => 8,
                b'i' => 4,
                b's' => 2,
                _ => 1,
            };
            Needed { attno: a, byval: att.attbyval, attlen: att.attlen, align }
        })
        .collect();
    let minmax = quals
        .into_iter()
        .enumerate()
        .map(|(i, qual)| {
            let expr = pg_sys::list_nth((*cscan).custom_exprs, i as i32) as *mut pg_sys::Expr;
            Prepared { qual, state: pg_sys::ExecInitExpr(expr, &mut (*css).ss.ps), value: None }
        })
        .collect();
    let scan = ColumnScan {
        rel,
        snapshot: (*estate).es_snapshot,
        schema: tuple::schema_of(desc),
        needed,
        needed_at,
        minmax,
        meta: None,
        started: false,
        next_extent: 0,
        pscan: std::ptr::null_mut(),
        worker: Box::new(std::mem::zeroed()),
        worker_started: false,
        strategy: std::ptr::null_mut(),
        rows: Vec::new(),
        values: Vec::new(),
        arena: Arena::default(),
        pos: 0,
        part_rows: Vec::new(),
        streams: Vec::new(),
        counters: Counters::default(),
    };
    (*node).scan = Box::into_raw(Box::new(scan));
    let cb = pg_sys::MemoryContextAllocZero((*estate).es_query_cxt, std::mem::size_of::<pg_sys::MemoryContextCallback>()) as *mut pg_sys::MemoryContextCallback;
    (*cb).func = Some(free_on_reset);
    (*cb).arg = node as *mut std::ffi::c_void;
    pg_sys::MemoryContextRegisterResetCallback((*estate).es_query_cxt, cb);
    if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 == 0 {
        // As heap's sequential scan: nothing finer than the relation to lock.
        PredicateLockRelation(rel, (*estate).es_snapshot);
    }
}

impl ColumnScan {
    /// Reads the next extent's visible rows; false at the end.
    unsafe fn load_next(&mut self, econtext: *mut pg_sys::ExprContext) -> bool {
        if !self.started {
            self.started = true;
            // seq_scan of pg_stat_*_tables, as the sequential scan this
            // replaces counts each start
            crate::storage::pgstat::count_scan(self.rel);
            self.meta = relation::read_meta(self.rel);
            let blocks = crate::storage::buffer::nblocks(self.rel);
            if self.strategy.is_null() && blocks as i32 > pg_sys::NBuffers / 4 {
                self.strategy = pg_sys::GetAccessStrategy(pg_sys::BufferAccessStrategyType::BAS_BULKREAD);
            }
            for p in &mut self.minmax {
                p.evaluate(econtext);
            }
        }
        self.rows.clear();
        self.values.clear();
        self.arena.clear();
        self.pos = 0;
        loop {
            let Some(meta) = self.meta else { return false };
            let Some(k) = self.next_extent(&meta) else { return false };
            let strategy = self.strategy;
            let rel = self.rel;
            let visit = relation::visit_extent_columns(rel, &meta, k, strategy, self);
            self.counters.extents += 1;
            self.counters.column_blocks_read += visit.column_blocks_read as i64;
            if visit.part_skipped {
                self.counters.parts_skipped += 1;
            }
            if visit.all_visible {
                self.counters.parts_all_visible += 1;
            }
            if !self.rows.is_empty() {
                return true;
            }
        }
    }

    /// The next extent this process reads: in order when serial; in a
    /// parallel scan, the extents whose header blocks PostgreSQL's block
    /// allocator hands this process (as the hasis sequential scan does).
    unsafe fn next_extent(&mut self, meta: &Meta) -> Option<u32> {
        if self.pscan.is_null() {
            let k = self.next_extent;
            self.next_extent += 1;
            return (k < meta.nextents).then_some(k);
        }
        let pbscan = self.pscan;
        if !self.worker_started {
            pg_sys::table_block_parallelscan_startblock_init(self.rel, &mut *self.worker, pbscan);
            self.worker_started = true;
        }
        loop {
            let blk = pg_sys::table_block_parallelscan_nextpage(self.rel, &mut *self.worker, pbscan);
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

    /// Whether the version is visible to the scan's snapshot (hints set).
    unsafe fn visible(&self, v: &Visited) -> bool {
        let (vis, hint) = visible(self.rel, self.snapshot, &v.header.mvcc, v.tid, v.buffer);
        if let Some(h) = hint {
            v.set_hint(h);
        }
        vis
    }

    unsafe fn emit(&mut self, slot: *mut pg_sys::TupleTableSlot) -> bool {
        if self.pos >= self.rows.len() {
            return false;
        }
        let i = self.pos;
        self.pos += 1;
        // A virtual slot that owns no memory is cleared and stored by its
        // flags (what ExecClearTuple and ExecStoreVirtualTuple do for it)
        // rather than by two calls per row.
        let plain = std::ptr::eq((*slot).tts_ops, &raw const pg_sys::TTSOpsVirtual) && (*slot).tts_flags as u32 & pg_sys::TTS_FLAG_SHOULDFREE == 0;
        if !plain {
            pg_sys::ExecClearTuple(slot);
        }
        let desc = (*slot).tts_tupleDescriptor;
        let natts = (*desc).natts as usize;
        let atts = (*desc).attrs.as_slice(natts);
        let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts);
        let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts);
        nulls.fill(true);
        let nw = self.needed.len();
        for (j, col) in self.needed.iter().enumerate() {
            let a = col.attno as usize - 1;
            match self.values[i * nw + j] {
                Value::Null => {}
                Value::Missing => {
                    let mut isnull = true;
                    values[a] = pg_sys::getmissingattr(desc, col.attno as i32, &mut isnull);
                    nulls[a] = isnull;
                }
                Value::At { off, len } => {
                    let b = self.arena.bytes(off, len);
                    values[a] = if col.byval { tuple::bytes_datum(&atts[a], b) } else { pg_sys::Datum::from(b.as_ptr()) };
                    nulls[a] = false;
                }
                Value::Datum(d) => {
                    values[a] = d;
                    nulls[a] = false;
                }
            }
        }
        (*slot).tts_tid = to_item_pointer(self.rows[i].tid);
        (*slot).tts_tableOid = (*self.rel).rd_id;
        if plain {
            (*slot).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
            (*slot).tts_nvalid = natts as i16;
        } else {
            pg_sys::ExecStoreVirtualTuple(slot);
        }
        true
    }
}

impl ColumnVisitor for ColumnScan {
    fn keep_part(&mut self, part: &ColumnPart) -> bool {
        self.part_rows.clear();
        let keep = unsafe { minmax::part_may_match(&self.minmax, (*self.rel).rd_att, part) };
        if keep {
            self.counters.parts_read += 1;
        }
        keep
    }

    fn column_row(&mut self, row: usize, v: &Visited) {
        if unsafe { self.visible(v) } {
            self.part_rows.push((row, v.header.natts));
            self.rows.push(RowOut { tid: v.tid });
        }
    }

    fn column_values(&mut self, part: &ColumnPart) {
        let nw = self.needed.len();
        let first_row = self.rows.len() - self.part_rows.len();
        self.values.resize(self.rows.len() * nw, Value::Null);
        self.streams.resize_with(nw, Vec::new);
        for (j, col) in self.needed.iter().enumerate() {
            let c = col.attno as usize - 1;
            if c >= part.ncols() {
                for (i, _) in self.part_rows.iter().enumerate() {
                    self.values[(first_row + i) * nw + j] = Value::Missing;
                }
                continue;
            }
            let column = match part.column_values_as(c, &mut self.streams[j], ValueForm::AlignedDatum) {
                Ok(v) => v,
                Err(e) => unsafe { crate::hasis::format_error(self.rel, self.rows[first_row].tid.block, e) },
            };
            // Every row's value in one pass per column, converted by a
            // function made for the column's type outside the loop.
            let (part_rows, values, arena) = (&self.part_rows, &mut self.values, &mut self.arena);
            let rows = part_rows.iter().enumerate().map(|(i, &(r, _))| (i, r));
            let mut put = |i: usize, v: Value| values[(first_row + i) * nw + j] = v;
            let attno = col.attno as u16;
            let missing = |i: usize| attno > part_rows[i].1;
            let (align, attlen) = (col.align, col.attlen);
            let done = match (col.byval, col.attlen) {
                // Each common length a loop of its own, the conversion's
                // length a constant in it.
                (true, 8) => column.each_of(rows, |i, v| put(i, byval_value(missing(i), v, 8))),
                (true, 4) => column.each_of(rows, |i, v| put(i, byval_value(missing(i), v, 4))),
                (true, 2) => column.each_of(rows, |i, v| put(i, byval_value(missing(i), v, 2))),
                (true, 1) => column.each_of(rows, |i, v| put(i, byval_value(missing(i), v, 1))),
                (true, _) => column.each_of(rows, |i, v| put(i, byval_value(missing(i), v, attlen))),
                (false, _) => column.each_of(rows, |i, v| {
                    put(
                        i,
                        match v {
                            _ if missing(i) => Value::Missing,
                            None => Value::Null,
                            Some(b) if usable_in_place(attlen, align, b) => Value::Datum(pg_sys::Datum::from(b.as_ptr())),
                            Some(b) => Value::At { off: arena.push(b, align), len: b.len() as u32 },
                        },
                    )
                }),
            };
            if let Err(e) = done {
                unsafe { crate::hasis::format_error(self.rel, self.rows[first_row].tid.block, e) };
            }
        }
    }

    fn visible_column_row(&mut self, row: usize, tid: Tid, natts: u16) {
        self.part_rows.push((row, natts));
        self.rows.push(RowOut { tid });
    }

    fn delta_row(&mut self, v: &Visited) {
        if !unsafe { self.visible(v) } {
            return;
        }
        self.counters.delta_rows += 1;
        let nw = self.needed.len();
        let at = self.values.len();
        self.values.resize(at + nw, Value::Null);
        let natts = v.header.natts;
        for (j, col) in self.needed.iter().enumerate() {
            if col.attno as u16 > natts {
                self.values[at + j] = Value::Missing;
            }
        }
        let (needed, needed_at, arena, values) = (&self.needed, &self.needed_at, &mut self.arena, &mut self.values);
        let decoded = payload_values(&self.schema, natts as usize, v.payload, |i, val| {
            if let (Some(Some(j)), Some(b)) = (needed_at.get(i + 1), val) {
                values[at + j] = Value::At { off: arena.push(b, needed[*j].align), len: b.len() as u32 };
            }
        });
        if let Err(e) = decoded {
            unsafe { crate::hasis::format_error(self.rel, v.tid.block, e) };
        }
        self.rows.push(RowOut { tid: v.tid });
    }
}

unsafe fn scan_of<'a>(css: *mut pg_sys::CustomScanState) -> &'a mut ColumnScan {
    &mut *(*(css as *mut ColumnScanNode)).scan
}

#[pg_guard]
unsafe extern "C-unwind" fn next(ss: *mut pg_sys::ScanState) -> *mut pg_sys::TupleTableSlot {
    let css = ss as *mut pg_sys::CustomScanState;
    let scan = scan_of(css);
    let slot = (*ss).ss_ScanTupleSlot;
    loop {
        if scan.emit(slot) {
            crate::storage::pgstat::count_returned(scan.rel);
            return slot;
        }
        if !scan.load_next((*ss).ps.ps_ExprContext) {
            return pg_sys::ExecClearTuple(slot);
        }
    }
}

/// EvalPlanQual's recheck: the scan has no conditions of its own beyond
/// the plan's quals, which ExecScan evaluates.
#[pg_guard]
unsafe extern "C-unwind" fn recheck(_ss: *mut pg_sys::ScanState, _slot: *mut pg_sys::TupleTableSlot) -> bool {
    true
}

#[pg_guard]
unsafe extern "C-unwind" fn exec(css: *mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot {
    pg_sys::ExecScan(&mut (*css).ss, Some(next), Some(recheck))
}

#[pg_guard]
unsafe extern "C-unwind" fn end(css: *mut pg_sys::CustomScanState) {
    let node = css as *mut ColumnScanNode;
    if !(*node).scan.is_null() {
        let scan = Box::from_raw((*node).scan);
        (*node).scan = std::ptr::null_mut();
        if !scan.strategy.is_null() {
            pg_sys::FreeAccessStrategy(scan.strategy);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn rescan(css: *mut pg_sys::CustomScanState) {
    let scan = scan_of(css);
    scan.started = false;
    scan.next_extent = 0;
    scan.worker_started = false;
    scan.rows.clear();
    scan.values.clear();
    scan.arena.clear();
    scan.pos = 0;
    pg_sys::ExecScanReScan(&mut (*css).ss);
}

// Parallel scans: the shared state is PostgreSQL's block-based parallel
// table scan descriptor (what heap and the hasis sequential scan use), made
// by the leader in the DSM segment and found there by each worker.

#[pg_guard]
unsafe extern "C-unwind" fn estimate_dsm(css: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext) -> pg_sys::Size {
    pg_sys::table_block_parallelscan_estimate((*css).ss.ss_currentRelation)
}

#[pg_guard]
unsafe extern "C-unwind" fn initialize_dsm(css: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext, coordinate: *mut std::ffi::c_void) {
    let pscan = coordinate as pg_sys::ParallelTableScanDesc;
    pg_sys::table_block_parallelscan_initialize((*css).ss.ss_currentRelation, pscan);
    scan_of(css).pscan = pscan as pg_sys::ParallelBlockTableScanDesc;
}

#[pg_guard]
unsafe extern "C-unwind" fn reinitialize_dsm(css: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext, coordinate: *mut std::ffi::c_void) {
    pg_sys::table_block_parallelscan_reinitialize((*css).ss.ss_currentRelation, coordinate as pg_sys::ParallelTableScanDesc);
}

#[pg_guard]
unsafe extern "C-unwind" fn initialize_worker(css: *mut pg_sys::CustomScanState, _toc: *mut pg_sys::shm_toc, coordinate: *mut std::ffi::c_void) {
    scan_of(css).pscan = coordinate as pg_sys::ParallelBlockTableScanDesc;
}

#[pg_guard]
unsafe extern "C-unwind" fn explain(css: *mut pg_sys::CustomScanState, _ancestors: *mut pg_sys::List, es: *mut pg_sys::ExplainState) {
    let scan = scan_of(css);
    let desc = (*scan.rel).rd_att;
    let atts = (*desc).attrs.as_slice((*desc).natts as usize);
    let name = |a: i16| std::ffi::CStr::from_ptr(atts[a as usize - 1].attname.data.as_ptr()).to_string_lossy().into_owned();
    let cols: Vec<String> = scan.needed.iter().map(|c| name(c.attno)).collect();
    let text = |label: &std::ffi::CStr, v: String| {
        let v = std::ffi::CString::new(v).unwrap_or_default();
        pg_sys::ExplainPropertyText(label.as_ptr(), v.as_ptr(), es);
    };
    text(c"Columns", format!("{} of {}", if cols.is_empty() { "none".to_string() } else { cols.join(", ") }, atts.iter().filter(|a| !a.attisdropped).count()));
    if !scan.minmax.is_empty() {
        let quals: Vec<String> = scan.minmax.iter().map(|p| format!("{} {}", name(p.qual.attno), p.qual.operator_name())).collect();
        text(c"Min/Max Skipping", quals.join(", "));
    }
    if (*es).analyze {
        let c = &scan.counters;
        for (label, v) in [
            (c"Extents", c.extents),
            (c"Column Parts Read", c.parts_read),
            (c"Column Parts Skipped", c.parts_skipped),
            (c"Column Parts All Visible", c.parts_all_visible),
            (c"Column Blocks Read", c.column_blocks_read),
            (c"Delta Rows", c.delta_rows),
        ] {
            pg_sys::ExplainPropertyInteger(label.as_ptr(), std::ptr::null(), v, es);
        }
    }
}
