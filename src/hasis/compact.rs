//! Major compaction on buffers: the core's `plan` with heap's vacuum rules
//! as the oracle, the core's `apply` on the extent's pages, one record of
//! hasis's rmgr (`wal.rs`, COMPACT) carrying the logical rows.
//!
//! It runs with the extent's header block exclusively locked for the whole
//! run (no reader, stamper or inserter is inside the extent), then every
//! other block of the extent exclusively, in block order. Triggered when an
//! insert needs a new delta block and the delta part has reached
//! `compact_trigger` blocks, and by VACUUM.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::compact::{self, AppendedRow, Placement};
use pg_hybrid_core::hasis::delta;
use pg_hybrid_core::hasis::header::ExtentHeader;
use pg_hybrid_core::hasis::layout::{BLCKSZ, BODY_END, TRAILER_OFF};
use pg_hybrid_core::hasis::row::Mvcc;
use pg_hybrid_core::hasis::HybridPage;

use super::relation::{bytes, init_page, read_extending, Meta};
use super::tuple;
use super::visibility::*;
use crate::storage::buffer::Buf;

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Compacted {
    /// Directory entries released: removed versions' slots, and HOT
    /// redirects that moved or died.
    pub removed: usize,
    /// Versions moved from the delta part into the column part.
    pub moved: usize,
    /// Delta blocks in use after it.
    pub delta_used: u16,
    /// Versions VACUUM froze.
    pub frozen: usize,
    /// The column part takes no more rows (`ExtentHeader::column_part_full`).
    pub column_full: bool,
}

/// What compactions wrote, per relation file since the server started
/// (`shmem::rel_counters`): `table_stats` reports it, so the drive's side
/// of the paper's claim (a compaction writes 23-41% of its logical bytes to
/// a compressing drive) is measured, not assumed.
pub mod written {
    pub const COMPACTIONS: usize = 0;
    pub const BLOCKS: usize = 1;
    /// Blocks of compactions that ran with `pg_hybrid.hasis_meter_compactions`.
    pub const METERED_BLOCKS: usize = 2;
    /// What the metered blocks cost on the drive, by the CSD meter (LZ4
    /// per 4 KB, a block of one repeated word free).
    pub const PHYSICAL_BYTES: usize = 3;
}

/// `pg_hybrid.hasis_meter_compactions`: LZ4-compressing every block a
/// compaction writes costs about 0.1 ms per compaction (a 300k-row INSERT
/// with 481 foreground compactions: 1.24 s against 1.20 s, 3 runs each),
/// on a path inserts take in the foreground, so it is asked for.
pub static METER: pgrx::GucSetting<bool> = pgrx::GucSetting::<bool>::new(false);

pub fn define_gucs() {
    pgrx::GucRegistry::define_bool_guc(
        c"pg_hybrid.hasis_meter_compactions",
        c"Meter the blocks hasis compactions write on the CSD meter (reported by pg_hybrid.table_stats).",
        c"Costs LZ4-compressing every block a compaction writes. Set it for the server (postgresql.conf): compactions of the background worker follow that value.",
        &METER,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::default(),
    );
}

/// Counts one compaction's blocks, and meters them when asked. The pages
/// are metered as they are in the buffers now, which is what a write of
/// them stores unless a later change comes first; still under the
/// exclusive locks, outside the critical section (LZ4 allocates).
unsafe fn count_written(rel: pg_sys::Relation, blocks: &[&Buf]) {
    let mut deltas = [0u64; crate::shmem::rel_counters::COUNTERS];
    deltas[written::COMPACTIONS] = 1;
    deltas[written::BLOCKS] = blocks.len() as u64;
    if METER.get() {
        let mut meter = pg_hybrid_core::csd_meter::Meter::new();
        for b in blocks {
            meter.add(&*bytes(b.page()));
        }
        deltas[written::METERED_BLOCKS] = blocks.len() as u64;
        deltas[written::PHYSICAL_BYTES] = meter.physical_bytes;
    }
    crate::shmem::rel_counters::add(crate::shmem::rel_counters::RelFile::of(rel), &deltas);
}

/// Whether every snapshot sees the version's insert, for a version whose
/// inserter HeapTupleSatisfiesVacuum found committed. The commit hint may
/// be missing (asynchronous commit: hints wait for the WAL flush), but
/// the compaction record follows the commit record in the WAL, so a
/// crash cannot keep the one without the other.
unsafe fn xmin_visible_to_all(m: &Mvcc, horizon: pg_sys::TransactionId) -> bool {
    m.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || pg_sys::TransactionIdPrecedes(pg_sys::TransactionId::from(m.xmin), horizon)
}

/// Whether the relation's file was made by the running transaction (no
/// other transaction can read it before commit; an abort drops it).
pub unsafe fn file_private_to_xact(rel: pg_sys::Relation) -> bool {
    (*rel).rd_createSubid != 0 || (*rel).rd_firstRelfilenodeSubid != 0
}

/// Writes a block the compaction produced into `page`: a zero block stays
/// all zero (`PageIsNew`), any other gets a standard page header and the
/// core's bytes.
pub unsafe fn write_block(page: pg_sys::Page, block: &[u8], delta_block: bool) {
    if block.iter().all(|&b| b == 0) {
        std::ptr::write_bytes(page as *mut u8, 0, BLCKSZ);
        return;
    }
    let lower = if delta_block { BODY_END - delta::free_space(block).unwrap_or(0) } else { TRAILER_OFF };
    init_page(page, lower);
    bytes(page)[24..].copy_from_slice(&block[24..]);
}

/// VACUUM's freezing: xids older than `limit` that every snapshot sees as
/// committed (or as aborted, for xmax) are replaced by "frozen" / "invalid",
/// so relfrozenxid can move up to `limit`.
#[derive(Clone, Copy, Debug)]
pub struct Freeze {
    pub limit: pg_sys::TransactionId,
}

/// Applies `freeze` to a version VACUUM keeps, whose inserter committed;
/// true if it changed.
unsafe fn freeze_version(m: &mut Mvcc, freeze: &Freeze) -> bool {
    let precedes = |x: u32| x != 0 && pg_sys::TransactionIdPrecedes(pg_sys::TransactionId::from(x), freeze.limit);
    let mut changed = false;
    if m.infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN && precedes(m.xmin) {
        m.infomask |= HEAP_XMIN_FROZEN;
        changed = true;
    }
    // A no-key update that shared the version with key-share lockers keeps
    // a MultiXact in xmax. Once the lockers have ended, the update alone, a
    // plain xid, says the same, and relminmxid may pass the MultiXact.
    if m.infomask & HEAP_XMAX_IS_MULTI != 0 && m.infomask & HEAP_XMAX_INVALID == 0 && !xmax_locked_only(m) && !pg_sys::MultiXactIdIsRunning(m.xmax.into(), false) {
        m.xmax = update_xid(m);
        m.infomask &= !HEAP_XMAX_BITS;
        changed = true;
    }
    // An aborted deleter or a finished locker (HeapTupleSatisfiesVacuum has
    // set XMAX_INVALID for both) leaves nothing to remember. A MultiXact is
    // never an xid to compare: XMAX_INVALID says every member has ended (a
    // lock-only one's lockers, or an aborted update's), so it goes
    // whatever its age (relminmxid then advances past it).
    let finished_multi = m.infomask & HEAP_XMAX_IS_MULTI != 0 && m.infomask & HEAP_XMAX_INVALID != 0;
    if finished_multi || (m.infomask & HEAP_XMAX_IS_MULTI == 0 && m.infomask & HEAP_XMAX_INVALID != 0 && precedes(m.xmax)) {
        m.xmax = 0;
        m.infomask &= !(HEAP_XMAX_BITS & !HEAP_XMAX_INVALID);
        m.infomask2 &= !HEAP_KEYS_UPDATED;
        changed = true;
    }
    changed
}

/// Why a compaction runs, which decides what counts as a gain.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    /// Room for inserts (an insert found the delta part full, or the
    /// worker found it at the trigger): worth it only if a delta block
    /// comes free. A delta part full of versions that must stay (still
    /// visible to someone) with a full column part would otherwise be
    /// rewritten, and logged, at every insert that meets it.
    Room,
    /// VACUUM: any removed version (its slot turns dead, so its index
    /// entries can go), any move, and freezing with `Freeze`.
    Vacuum(Freeze),
}

/// Whether compacting extent `first` (header block held by the caller) for
/// `Goal::Room` may free a delta block, judged from the delta items' MVCC
/// fields alone, without decoding the column part: a block's worth of
/// versions must be removable (dead to all) or movable (inserted and
/// visible to all, or this transaction's own new rows). A full column part
/// takes only movable versions that are heap-only: each is the newest
/// member of a HOT chain whose older member, in this extent, its committed
/// inserter made dead to all, so compaction drops that member and the row
/// keeps about its room. (Counting no movable version there left the
/// bulk-loaded extents of TPC-C's stock with a delta part full of new
/// versions that were never compacted in, and three of four updates of
/// stock then went to other extents as non-HOT updates.) Compaction decodes and re-encodes the whole extent, so the
/// worker asks this before trying an extent whose delta part holds
/// versions that must stay.
pub unsafe fn may_free_delta_block(rel: pg_sys::Relation, meta: &Meta, first: u32, h: &ExtentHeader) -> bool {
    let block_bytes = BODY_END - delta::ITEMS_START;
    delta_gain(rel, meta, first, h, &|gain, _| gain >= block_bytes)
}

/// Whether at least half of extent `first`'s delta part is versions dead
/// to everyone, which compaction removes (heap's page pruning would free
/// them in place): a HOT update compacts such an extent itself
/// (`relation::hot_compaction_pays`). Versions compaction would only move
/// into the column part do not count: rebuilding the extent for them in
/// the updating transaction cost TPC-C about a sixth of its tpmC (customer
/// and stock extents, whose new versions are live), against the worker.
pub unsafe fn delta_mostly_dead(rel: pg_sys::Relation, meta: &Meta, first: u32, h: &ExtentHeader) -> bool {
    let block_bytes = BODY_END - delta::ITEMS_START;
    let half = h.delta_used as usize * block_bytes / 2;
    delta_gain(rel, meta, first, h, &|_, dead| dead >= half)
}

/// Sums per delta block what compaction would free (bytes removed or
/// moved, and of those the bytes removed) until `enough` says so; true
/// also where a block does not parse (compaction then reports it).
unsafe fn delta_gain(rel: pg_sys::Relation, meta: &Meta, first: u32, h: &ExtentHeader, enough: &dyn Fn(usize, usize) -> bool) -> bool {
    // Asked at every insert that meets a full delta part and by the worker
    // at every pass over an extent that is due, which for an extent full of
    // versions that must stay (a bulk-loaded extent whose rows are updated
    // elsewhere) is often. So each delta block's share of the answer is remembered
    // (`BlockGain`) and only blocks that changed since, or whose versions
    // the moving removal horizon may have freed, are read item by item.
    let g = meta.geometry;
    let horizon = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let column_full = h.column_part_full(&g);
    // Page LSNs tell a changed block only where every change is logged.
    let memo = crate::storage::wal::relation_needs_wal(rel);
    let (mut gain, mut dead) = (0usize, 0usize);
    for i in 0..h.delta_used as usize {
        let blk = first + g.delta_block(i) as u32;
        let b = Buf::read(rel, blk, crate::storage::buffer::Lock::Share);
        let key = ((*rel).rd_node.relNode, blk);
        let lsn = crate::storage::wal::page_lsn(b.page());
        let memo = memo && lsn != 0;
        let known = memo
            .then(|| BLOCK_GAIN.with(|c| c.borrow().get(&key).copied()))
            .flatten()
            .filter(|m| m.lsn == lsn && m.version == h.version && m.column_full == column_full && m.still_valid(horizon));
        let block = match known {
            Some(m) => m,
            None => {
                let Some(m) = block_gain(rel, &g, first, i, &b, h.version, column_full, horizon) else { return true };
                let m = BlockGain { lsn, ..m };
                if memo {
                    BLOCK_GAIN.with(|c| {
                        let mut c = c.borrow_mut();
                        if c.len() >= 65536 {
                            c.clear();
                        }
                        c.insert(key, m);
                    });
                }
                m
            }
        };
        gain += block.bytes;
        dead += block.dead_bytes;
        if enough(gain, dead) {
            return true;
        }
    }
    false
}

/// What one delta block contributes to `may_free_delta_block`: the bytes
/// of its versions that compaction would remove or move, as of page LSN
/// `lsn` and page version `version`, and how long that holds.
#[derive(Clone, Copy)]
struct BlockGain {
    lsn: pg_sys::XLogRecPtr,
    version: u32,
    column_full: bool,
    bytes: usize,
    /// Of `bytes`, those of versions dead to everyone.
    dead_bytes: usize,
    /// The oldest transaction whose passing the removal horizon may free
    /// more (an updater still too recent, an inserter not yet visible to
    /// all); invalid when only a change to the block could.
    until: pg_sys::TransactionId,
}

impl BlockGain {
    /// Whether nothing more can be removable under removal horizon
    /// `horizon` than when the block was read: versions become removable
    /// only as the horizon passes `until`. An aborted inserter frees its
    /// version before that; such a version waits for the horizon, as a
    /// "no" waits for any other change.
    unsafe fn still_valid(&self, horizon: pg_sys::TransactionId) -> bool {
        self.until == pg_sys::InvalidTransactionId || !pg_sys::TransactionIdPrecedes(self.until, horizon)
    }
}

thread_local! {
    /// Delta blocks (relfilenode, block) read by `may_free_delta_block`.
    static BLOCK_GAIN: std::cell::RefCell<pg_hybrid_core::fast_hash::FastMap<(pg_sys::Oid, u32), BlockGain>> = std::cell::RefCell::new(Default::default());
}

/// Reads delta block `i` (share-locked in `b`) item by item. None when it
/// does not parse: compaction will report the corruption.
#[allow(clippy::too_many_arguments)]
unsafe fn block_gain(rel: pg_sys::Relation, g: &pg_hybrid_core::hasis::layout::Geometry, first: u32, i: usize, b: &Buf, version: u32, column_full: bool, horizon: pg_sys::TransactionId) -> Option<BlockGain> {
    let relid = (*rel).rd_id;
    let view = delta::DeltaView::open(bytes(b.page()), g, i, Some(version)).ok()?;
    let mut out = BlockGain { lsn: 0, version, column_full, bytes: 0, dead_bytes: 0, until: pg_sys::InvalidTransactionId };
    let mut wait_for = |xid: pg_sys::TransactionId| {
        if out.until == pg_sys::InvalidTransactionId || pg_sys::TransactionIdPrecedes(xid, out.until) {
            out.until = xid;
        }
    };
    for it in view.items() {
        let it = it.ok()?;
        let m = it.header.mvcc;
        let tid = g.tid(first, it.header.slot).unwrap_or_default();
        let (r, _, _) = vacuum_state(&m, tid, relid, horizon, b.buffer());
        // The transaction that decides when a version that stays now may
        // go: its updater (a multixact's is not read here: the horizon as
        // it is), or for a movable version its inserter.
        let updater = if m.infomask & HEAP_XMAX_IS_MULTI != 0 { horizon } else { pg_sys::TransactionId::from(m.xmax) };
        use pg_sys::HTSV_Result::*;
        let frees = match r {
            HEAPTUPLE_DEAD => true,
            HEAPTUPLE_LIVE if !column_full || is_heap_only(&m) => {
                let visible = xmin_visible_to_all(&m, horizon);
                if !visible {
                    wait_for(pg_sys::TransactionId::from(m.xmin));
                }
                visible
            }
            HEAPTUPLE_INSERT_IN_PROGRESS if !column_full => {
                wait_for(pg_sys::TransactionId::from(m.xmin));
                m.xmax == 0 && pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmin))
            }
            HEAPTUPLE_INSERT_IN_PROGRESS => {
                wait_for(pg_sys::TransactionId::from(m.xmin));
                false
            }
            HEAPTUPLE_RECENTLY_DEAD | HEAPTUPLE_DELETE_IN_PROGRESS => {
                wait_for(updater);
                false
            }
            _ => false,
        };
        if frees {
            out.bytes += it.bytes.len();
        }
        if r == HEAPTUPLE_DEAD {
            out.dead_bytes += it.bytes.len();
        }
    }
    Some(out)
}

/// The compaction oracle: heap's vacuum rules decide each version's fate,
/// and its HOT bits place it in a chain.
struct HeapRules<'a, F: FnMut(u16, &mut Mvcc) -> Placement> {
    decide: &'a mut F,
    g: &'a pg_hybrid_core::hasis::layout::Geometry,
    first: u32,
}

impl<F: FnMut(u16, &mut Mvcc) -> Placement> compact::Oracle for HeapRules<'_, F> {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement {
        (self.decide)(slot, mvcc)
    }
    fn link(&mut self, _slot: u16, mvcc: &Mvcc) -> pg_hybrid_core::hasis::hot::ChainLink {
        chain_link(self.g, self.first, mvcc)
    }
}

/// Keeps in `newest` the newest normal, unfrozen xmin among the versions
/// visible to all: the all-visible flag's standby conflict horizon.
unsafe fn note_visible_xmin(newest: &mut pg_sys::TransactionId, m: &Mvcc) {
    let xmin = pg_sys::TransactionId::from(m.xmin);
    if m.infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN
        && xmin.into_inner() >= pg_sys::FirstNormalTransactionId.into_inner()
        && (*newest == pg_sys::InvalidTransactionId || pg_sys::TransactionIdFollows(xmin, *newest))
    {
        *newest = xmin;
    }
}

/// VACUUM of an extent without a delta part whose column rows are all live,
/// visible to every snapshot and not due for freezing, with no directory
/// entry but column rows, dead and unused slots: compaction would leave
/// it as it is (`unchanged` in `compact_extent`), so only the row headers
/// are read, not the rows, and the part is marked all-visible if it is not.
/// That is every extent of a bulk load at its first VACUUM, which decoded
/// and re-planned every row to conclude as much (23x heap's VACUUM time
/// after a COPY). False when any of it does not hold: the caller compacts.
unsafe fn column_part_settled(rel: pg_sys::Relation, g: &pg_hybrid_core::hasis::layout::Geometry, first: u32, hbuf: &Buf, h: &ExtentHeader, freeze: &Freeze) -> bool {
    use pg_hybrid_core::hasis::header::DirEntry;
    if h.column_rows == 0 {
        return false;
    }
    let mut dir = super::relation::DirectoryReader::new(rel, g, first, hbuf, std::ptr::null_mut());
    let mut column_slots = 0usize;
    for s in 0..h.slot_hwm {
        match dir.entry(s) {
            DirEntry::Column { .. } => column_slots += 1,
            DirEntry::Unused | DirEntry::Dead => {}
            DirEntry::Delta { .. } | DirEntry::Redirect { .. } => return false,
        }
    }
    drop(dir);
    if column_slots != h.column_rows as usize {
        return false;
    }
    let cols = super::relation::ColumnBlocks::lock(rel, g, first, h, std::ptr::null_mut());
    let part = cols.part(rel, g, first, h);
    let horizon = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let relid = (*rel).rd_id;
    let mut newest_visible_xmin = pg_sys::InvalidTransactionId;
    let mut full_width = true;
    for r in 0..part.nrows() {
        let header = part.row_header(r).unwrap_or_else(|e| super::format_error(rel, first, e));
        let m = header.mvcc;
        let Ok(tid) = g.tid(first, header.slot) else { return false };
        let (state, _, _) = vacuum_state(&m, tid, relid, horizon, hbuf.buffer());
        if state != pg_sys::HTSV_Result::HEAPTUPLE_LIVE || !xmin_visible_to_all(&m, horizon) {
            return false;
        }
        if freeze_version(&mut m.clone(), freeze) {
            return false;
        }
        full_width &= header.natts as usize == part.ncols();
        note_visible_xmin(&mut newest_visible_xmin, &m);
    }
    drop(cols);
    // As in `compact_extent`: a part is all-visible only when each row
    // stores every column the part stores.
    if full_width && !h.all_visible {
        super::relation::set_all_visible(rel, g, first, hbuf, newest_visible_xmin);
    }
    true
}

/// Compacts extent `k`, whose header block the caller holds exclusively in
/// `hbuf`. Returns None when there was nothing to gain for `goal`: nothing
/// is written then.
pub unsafe fn compact_extent(rel: pg_sys::Relation, meta: &Meta, k: u32, hbuf: &Buf, goal: Goal) -> Option<Compacted> {
    compact_appending(rel, meta, k, hbuf, goal, Vec::new()).map(|(done, _)| done)
}

/// A bulk insert's batch (`relation::insert_batch`): compacts extent `k`
/// (header block held exclusively in `hbuf`) with `rows`, new versions of
/// this transaction in the fresh slots from the high-water mark up, added
/// to its column part. As many of them go in as the column part takes
/// (a prefix; the caller counted them with `bulk::fitting`, so usually
/// all). Returns the compaction and how many rows went in; None, writing
/// nothing, when none fits.
///
/// Why: a COPY's rows went through the delta part one by one (an INSERT
/// record each) and every time the delta blocks filled a compaction
/// rebuilt the column part with them, about three times per extent of
/// TPC-H's lineitem, 60% of the load's time. Here a batch costs one
/// compaction and its rows are logged once, in the COMPACT record.
pub unsafe fn append_rows(rel: pg_sys::Relation, meta: &Meta, k: u32, hbuf: &Buf, rows: Vec<AppendedRow>) -> Option<(Compacted, usize)> {
    if rows.is_empty() {
        return None;
    }
    compact_appending(rel, meta, k, hbuf, Goal::Room, rows)
}

/// What the oracle of one compaction plan learnt about the versions.
struct Verdicts {
    latest_removed: pg_sys::TransactionId,
    frozen: usize,
    /// Which slots hold a version visible to every snapshot for good
    /// (live and inserted before the horizon), and the newest such xmin:
    /// the all-visible flag's evidence and its standby conflict horizon.
    visible_to_all: Vec<bool>,
    newest_visible_xmin: pg_sys::TransactionId,
}

unsafe fn compact_appending(rel: pg_sys::Relation, meta: &Meta, k: u32, hbuf: &Buf, goal: Goal, mut appended: Vec<AppendedRow>) -> Option<(Compacted, usize)> {
    let freeze = match goal {
        Goal::Vacuum(f) => Some(f),
        Goal::Room => None,
    };
    let appending = !appended.is_empty();
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let h = ExtentHeader::read(bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e));
    if h.delta_used == 0 && (freeze.is_none() || h.column_rows == 0) && !appending {
        return None;
    }
    if let (Some(f), 0) = (&freeze, h.delta_used) {
        if column_part_settled(rel, &g, first, hbuf, &h, f) {
            return None;
        }
    }
    // The compaction record rewrites the header without the map-visible
    // flag: the bits go first (vm.rs); VACUUM sets them again after.
    let h = if h.map_visible {
        super::relation::clear_map_visible(rel, &g, first, hbuf);
        ExtentHeader::read(bytes(hbuf.page()), &g).unwrap_or_else(|e| super::format_error(rel, first, e))
    } else {
        h
    };
    let schema = tuple::schema(rel);
    let dirs: Vec<Buf> = (0..g.directory_blocks as usize).map(|i| read_extending(rel, first + g.directory_block(i) as u32)).collect();
    let cols: Vec<Buf> = (0..g.params.column_blocks as usize).map(|i| read_extending(rel, first + g.column_block(i) as u32)).collect();
    let deltas: Vec<Buf> = (0..g.params.delta_blocks as usize).map(|i| read_extending(rel, first + g.delta_block(i) as u32)).collect();
    let open_page = || {
        let mut blocks: Vec<&[u8]> = vec![&*bytes(hbuf.page())];
        blocks.extend(dirs.iter().map(|b| &*bytes(b.page())));
        blocks.extend(cols.iter().map(|b| &*bytes(b.page())));
        blocks.extend(deltas.iter().map(|b| &*bytes(b.page())));
        HybridPage::open_at(&g, &schema, &blocks, Some(first)).unwrap_or_else(|e| super::format_error(rel, first, e))
    };

    let horizon = pg_sys::GetOldestNonRemovableTransactionId(rel);
    let relid = (*rel).rd_id;
    // A bulk insert's rows the column part would turn back are not
    // appended at all (they would take the delta part): plan again with
    // the rows that fit, at most once more (fewer rows never need more
    // room).
    let (planned, verdicts) = loop {
        let mut v = Verdicts { latest_removed: pg_sys::InvalidTransactionId, frozen: 0, visible_to_all: vec![false; g.max_slots()], newest_visible_xmin: pg_sys::InvalidTransactionId };
        let Verdicts { latest_removed, frozen, visible_to_all, newest_visible_xmin } = &mut v;
        let mut oracle = |slot: u16, m: &mut Mvcc| -> Placement {
            let tid = g.tid(first, slot).unwrap_or_default();
            let (r, hint, mut ht) = vacuum_state(m, tid, relid, horizon, hbuf.buffer());
            if let Some(im) = hint {
                m.infomask = im;
            }
            use pg_sys::HTSV_Result::*;
            if r == HEAPTUPLE_LIVE && xmin_visible_to_all(m, horizon) {
                if let Some(v) = visible_to_all.get_mut(slot as usize) {
                    *v = true;
                }
                note_visible_xmin(newest_visible_xmin, m);
            }
            let committed = matches!(r, HEAPTUPLE_LIVE | HEAPTUPLE_RECENTLY_DEAD | HEAPTUPLE_DELETE_IN_PROGRESS);
            if let Some(f) = &freeze {
                if committed && freeze_version(m, f) {
                    *frozen += 1;
                }
            }
            match r {
                HEAPTUPLE_DEAD => {
                    HeapTupleHeaderAdvanceLatestRemovedXid(ht.header(), latest_removed);
                    Placement::Remove
                }
                _ if committed && xmin_visible_to_all(m, horizon) => Placement::Column,
                // This transaction's own new rows (a bulk load: COPY, INSERT ...
                // SELECT, and every load into a file it made, such as CREATE
                // TABLE AS, ALTER TABLE rewrites, CLUSTER) need not wait in the
                // delta part: column rows carry the same MVCC header, every
                // reader checks it, and an abort leaves them dead for the next
                // compaction. Left in the delta part, a load would fill each
                // extent's delta blocks only and leave its column part empty.
                HEAPTUPLE_INSERT_IN_PROGRESS if m.xmax == 0 && pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(m.xmin)) => Placement::Column,
                _ => Placement::Stay,
            }
        };
        let mut rules = HeapRules { decide: &mut oracle, g: &g, first };
        let planned = compact::plan_appending(open_page(), &schema, &mut rules, appended.clone()).unwrap_or_else(|e| super::format_error(rel, first, e));
        if planned.turned_back == 0 {
            break (planned, v);
        }
        appended.truncate(appended.len() - planned.turned_back);
        if appended.is_empty() {
            return None;
        }
    };
    let Verdicts { latest_removed, frozen, visible_to_all, newest_visible_xmin } = verdicts;
    let rec = &planned.record;
    // The new column part is all visible when each of its rows is, and
    // each stores every column the part stores (a scan without row
    // headers cannot tell a shorter row's missing columns).
    let all_visible = !rec.column_rows.is_empty()
        && rec.column_rows.iter().all(|r| visible_to_all.get(r.header.slot as usize) == Some(&true) && r.row.values.len() == rec.columns.len());
    // Nothing to remove, move or freeze, and no delta part: the page stays
    // as it is (VACUUM after a bulk load, every extent). Known before the
    // new part is built.
    // The column part stays as it is. VACUUM (or any compaction) that
    // finds it all visible now says so, without rewriting it: after a bulk
    // load, whose rows went in before they committed.
    let unchanged = || {
        if all_visible && !h.all_visible {
            super::relation::set_all_visible(rel, &g, first, hbuf, newest_visible_xmin);
        }
        None
    };
    if !appending && rec.entries_released() == 0 && rec.column_rows.len() == h.column_rows as usize && rec.delta_items.is_empty() && h.delta_used == 0 && frozen == 0 && planned.column_full.is_none() {
        return unchanged();
    }
    let mut out = compact::apply_at(&g, rec, Some(first)).unwrap_or_else(|e| super::format_error(rel, first, e));
    // Full if versions offered to the column part had to stay out; with
    // none offered, as it was unless the part shrank.
    out.column_full = planned.column_full.unwrap_or(h.column_full && out.column_units >= h.column_units);
    // Appended rows are new versions, not moved ones.
    let moved = (out.column_rows as usize).saturating_sub(h.column_rows as usize + appended.len());
    // Learning that the column part is full is worth a compaction of its
    // own (once): the extent then keeps its delta part for HOT updates.
    let flag_changed = out.column_full != h.column_full;
    if !appending && rec.entries_released() == 0 && moved == 0 && out.delta_used >= h.delta_used && frozen == 0 && !flag_changed {
        return unchanged();
    }
    if !appending && matches!(goal, Goal::Room) && out.delta_used >= h.delta_used && !flag_changed {
        return None;
    }
    let ncol = out.column_blocks_to_write(&h);
    let ndelta = out.delta_blocks_to_write(&h);
    let old_ncol = (h.column_units as usize).div_ceil(pg_hybrid_core::hasis::layout::UNITS_PER_BLOCK);
    // A record by reference (format 4) where redo is sure to find the
    // blocks as they are now; the whole record otherwise.
    let by_reference = !appending
        && ncol <= old_ncol
        && crate::storage::wal::relation_needs_wal(rel)
        && crate::storage::wal::logged_since_redo_point(std::iter::once(hbuf).chain(&dirs).chain(&cols[..old_ncol]).chain(&deltas[..h.delta_used as usize]));
    let body = match by_reference {
        true => rec.encode_by_reference(&planned.sources, &schema, true),
        false => rec.encode(true),
    }
    .unwrap_or_else(|e| super::format_error(rel, first, e));
    super::wal::prepare_compact(g.extent_blocks());

    pg_sys::CritSectionCount += 1;
    // By reference, a rewritten block keeps its LSN until the record is
    // inserted: the WAL takes its full-page image only if a checkpoint
    // began since the check above, and then of every such block.
    let rewrite = |b: &Buf, block: &[u8], delta_block: bool| {
        let lsn = crate::storage::wal::page_lsn(b.page());
        write_block(b.page(), block, delta_block);
        if by_reference && !pg_sys::PageIsNew(b.page()) {
            crate::storage::wal::set_page_lsn(b.page(), lsn);
        }
    };
    for i in 0..ncol {
        rewrite(&cols[i], &out.column_blocks[i], false);
    }
    for i in 0..ndelta {
        rewrite(&deltas[i], &out.delta_blocks[i], true);
    }
    let patched = out.patch_header(bytes(hbuf.page()), &g).and_then(|_| {
        dirs.iter().enumerate().try_for_each(|(i, d)| out.patch_directory_block(bytes(d.page()), &g, i))
    });
    if let Err(e) = patched {
        super::format_error(rel, first, e);
    }
    let written: Vec<&Buf> = std::iter::once(hbuf).chain(dirs.iter()).chain(cols[..ncol].iter()).chain(deltas[..ndelta].iter()).collect();
    for b in &written {
        pg_sys::MarkBufferDirty(b.buffer());
    }
    super::wal::log_compact(rel, latest_removed, &written, dirs.len(), ncol, ndelta, &body, by_reference, out.column_full);
    pg_sys::CritSectionCount -= 1;
    // The record left the flag clear (a new part); set it in a record of
    // its own, so a standby resolves its conflicts first.
    if all_visible {
        super::relation::set_all_visible(rel, &g, first, hbuf, newest_visible_xmin);
    }
    count_written(rel, &written);
    // As heap's pruning does: versions gone for good are no longer dead
    // tuples waiting for VACUUM. Without this, every removed version
    // counted until the next VACUUM, and autovacuum vacuumed a table under
    // updates every few seconds (pgbench_accounts: 24 times against
    // heap's once), each time compacting every extent and keeping the
    // compaction worker out (its lock conflicts with VACUUM's) while delta
    // parts filled and updates stopped being HOT. VACUUM counts for
    // itself (pgstat_report_vacuum).
    if matches!(goal, Goal::Room) && planned.reclaimed > 0 {
        pg_sys::pgstat_update_heap_dead_tuples(rel, i32::try_from(planned.reclaimed).unwrap_or(i32::MAX));
    }

    let done = Compacted { removed: rec.entries_released(), moved, delta_used: out.delta_used, frozen,
        column_full: ExtentHeader { column_units: out.column_units, column_full: out.column_full, ..h }.column_part_full(&g),
    };
    Some((done, appended.len()))
}
