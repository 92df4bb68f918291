//! A hasis relation on shared buffers: the metapage, extents, inserts into
//! the delta part, point reads of one version, in-place MVCC stamps, and
//! the per-extent visit scans build on. Every page change is one
//! GenericXLog record (at most four pages; README.md "WAL").
//!
//! Lock order inside an extent (core README "Locking"): header block
//! first, then the other blocks in block order. Readers here hold the
//! header block's share lock for as long as they read the extent's other
//! blocks; every change of the extent takes the header block (exclusive
//! for inserts, share for stamps), so a reader never sees a slot
//! allocated but not yet written.

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::delta::{self, DeltaView, ITEM_HDR};
use pg_hybrid_core::hasis::header::{self, init_directory_block, DirEntry, ExtentHeader};
use pg_hybrid_core::hasis::column::{ColumnLayout, ColumnPart};
use pg_hybrid_core::hasis::layout::{Geometry, Params, BLCKSZ, TRAILER_OFF, UNITS_PER_BLOCK};
use pg_hybrid_core::hasis::row::{Mvcc, RowHeader, MVCC_OFF, ROW_HEADER};
use pg_hybrid_core::hasis::Error as FormatError;
use pg_hybrid_core::tid::Tid;

use super::format_error;
use crate::storage::buffer::{nblocks, Buf, Lock};
use crate::storage::wal::WalRecord;

/// Block 0 of every non-empty hasis relation.
pub const META_BLOCK: u32 = 0;
const META_MAGIC: u32 = 0x544D_5348; // "HSMT" in file order
const META_FORMAT: u32 = 1;
/// Byte offsets in the metapage body.
const M_MAGIC: usize = 24;
const M_FORMAT: usize = 28;
const M_PARAMS: usize = 32; // column_blocks, delta_blocks, compact_trigger, max_slots: u16 each
const M_NEXTENTS: usize = 40;
const M_END: usize = 44;

/// Offset of the infomask inside the encoded MVCC fields.
const INFOMASK_IN_MVCC: usize = 18;

/// What the metapage says.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub geometry: Geometry,
    /// Extents made so far; extent k starts at block `1 + k * extent_blocks`.
    pub nextents: u32,
}

impl Meta {
    pub fn extent_first(&self, k: u32) -> u32 {
        1 + k * self.geometry.extent_blocks() as u32
    }
    /// The extent a block belongs to, if it is inside one that exists.
    pub fn extent_of(&self, blkno: u32) -> Option<u32> {
        if blkno == META_BLOCK {
            return None;
        }
        let k = (blkno - 1) / self.geometry.extent_blocks() as u32;
        (k < self.nextents).then_some(k)
    }
}

pub fn default_geometry() -> Geometry {
    Geometry::new(Params::default()).expect("default hasis parameters are valid")
}

pub unsafe fn bytes<'a>(page: pg_sys::Page) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut(page as *mut u8, BLCKSZ)
}

/// Initializes a page for a hasis block: standard header, 16-byte special
/// space for the format's trailer, `pd_lower` as given.
pub unsafe fn init_page(page: pg_sys::Page, lower: usize) {
    pg_sys::PageInit(page, BLCKSZ, BLCKSZ - TRAILER_OFF);
    set_lower(page, lower);
}

pub unsafe fn set_lower(page: pg_sys::Page, lower: usize) {
    (*(page as *mut pg_sys::PageHeaderData)).pd_lower = lower as u16;
}

unsafe fn rd16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
unsafe fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// Reads the metapage; `None` for an empty relation (no blocks: a new or
/// truncated table, whose metapage is written by the first insert).
pub unsafe fn read_meta(rel: pg_sys::Relation) -> Option<Meta> {
    read_meta_within(rel, nblocks(rel))
}

/// `read_meta` for a caller that has just read the relation's length
/// (`blocks`), as a scan does at its start: the length is a system call
/// (smgrnblocks' lseek) that a scan of a small table would otherwise
/// make twice.
pub unsafe fn read_meta_within(rel: pg_sys::Relation, blocks: u32) -> Option<Meta> {
    if blocks == 0 {
        return None;
    }
    let buf = Buf::read(rel, META_BLOCK, Lock::Share);
    if !pg_sys::PageIsNew(buf.page()) {
        return Some(parse_meta(rel, buf.page()));
    }
    // A zero block 0: the first insert's backend has extended the file
    // and not yet locked the new block to write the metapage (PostgreSQL
    // makes a new block visible before its extender locks it; four pgbench
    // clients starting on an empty pgbench_history met it), or a crash
    // came between the extension and the metapage's WAL record. The
    // extender holds the extension lock until the metapage is written:
    // wait for it and look again. Still zero: the relation has no
    // metapage yet (nor extents, which come after it), and the next
    // insert writes it (`ensure_meta`).
    drop(buf);
    wait_for_extender(rel);
    let buf = Buf::read(rel, META_BLOCK, Lock::Share);
    (!pg_sys::PageIsNew(buf.page())).then(|| parse_meta(rel, buf.page()))
}

/// Waits until no backend extends `rel` (a temporary table has no
/// concurrent extender).
unsafe fn wait_for_extender(rel: pg_sys::Relation) {
    if !crate::storage::buffer::relation_is_local(rel) {
        pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
    }
}

unsafe fn parse_meta(rel: pg_sys::Relation, page: pg_sys::Page) -> Meta {
    let b = bytes(page);
    if pg_sys::PageIsNew(page) || rd32(b, M_MAGIC) != META_MAGIC {
        format_error(rel, META_BLOCK, FormatError::Corrupt("block 0 is not a hasis metapage"));
    }
    if rd32(b, M_FORMAT) != META_FORMAT {
        crate::raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("hasis table \"{}\" has metapage format {}, this build reads format {META_FORMAT}", crate::storage::page::rel_name(rel), rd32(b, M_FORMAT)),
            "Install the pg_hybrid version that wrote the table, or restore it from a dump.",
        );
    }
    let params = Params {
        column_blocks: rd16(b, M_PARAMS),
        delta_blocks: rd16(b, M_PARAMS + 2),
        compact_trigger: rd16(b, M_PARAMS + 4),
        max_slots: rd16(b, M_PARAMS + 6),
    };
    let geometry = Geometry::new(params).unwrap_or_else(|e| format_error(rel, META_BLOCK, e));
    Meta { geometry, nextents: rd32(b, M_NEXTENTS) }
}

unsafe fn write_meta(page: pg_sys::Page, m: &Meta) {
    let b = bytes(page);
    b[M_MAGIC..M_MAGIC + 4].copy_from_slice(&META_MAGIC.to_le_bytes());
    b[M_FORMAT..M_FORMAT + 4].copy_from_slice(&META_FORMAT.to_le_bytes());
    let p = m.geometry.params;
    for (i, v) in [p.column_blocks, p.delta_blocks, p.compact_trigger, p.max_slots].into_iter().enumerate() {
        b[M_PARAMS + 2 * i..M_PARAMS + 2 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
    b[M_NEXTENTS..M_NEXTENTS + 4].copy_from_slice(&m.nextents.to_le_bytes());
}

/// The metapage as this backend last read it, kept in the relcache entry
/// (`rd_amcache`, freed by any relcache rebuild) for the relation file it
/// was read from. Extents only get added while a file exists, so a cached
/// copy is right except for extents made since: callers that meet a TID or
/// need an extent past `nextents` call `refresh_meta`.
#[repr(C)]
struct CachedMeta {
    relfilenode: pg_sys::Oid,
    meta: Meta,
    /// Names this backend's view of one incarnation of the relation file:
    /// new whenever the cache is made afresh (after a relcache rebuild,
    /// which every DROP, TRUNCATE and rewrite of the relation sends to
    /// every backend, and after this backend truncates the file in place),
    /// kept while it is only refreshed for new extents. See `LAYOUTS`.
    epoch: u64,
}

/// The last `CachedMeta::epoch` handed out by this backend.
static mut LAST_META_EPOCH: u64 = 0;

/// The epoch of `rel`'s cached metapage, if it is cached for its file.
unsafe fn meta_epoch(rel: pg_sys::Relation) -> Option<u64> {
    let c = (*rel).rd_amcache as *const CachedMeta;
    (!c.is_null() && (*c).relfilenode == (*rel).rd_node.relNode).then(|| (*c).epoch)
}

pub unsafe fn cached_meta(rel: pg_sys::Relation) -> Option<Meta> {
    let c = (*rel).rd_amcache as *const CachedMeta;
    if !c.is_null() && (*c).relfilenode == (*rel).rd_node.relNode {
        return Some((*c).meta);
    }
    refresh_meta(rel)
}

/// Reads the metapage and caches it.
pub unsafe fn refresh_meta(rel: pg_sys::Relation) -> Option<Meta> {
    let m = read_meta(rel)?;
    let epoch = match meta_epoch(rel) {
        Some(e) => e,
        None => {
            LAST_META_EPOCH += 1;
            LAST_META_EPOCH
        }
    };
    if (*rel).rd_amcache.is_null() {
        (*rel).rd_amcache = pg_sys::MemoryContextAlloc(pg_sys::CacheMemoryContext, std::mem::size_of::<CachedMeta>());
    }
    *((*rel).rd_amcache as *mut CachedMeta) = CachedMeta { relfilenode: (*rel).rd_node.relNode, meta: m, epoch };
    Some(m)
}

/// Forgets the cached metapage (the file was truncated in place).
pub unsafe fn forget_meta(rel: pg_sys::Relation) {
    if !(*rel).rd_amcache.is_null() {
        pg_sys::pfree((*rel).rd_amcache);
        (*rel).rd_amcache = std::ptr::null_mut();
    }
}

/// The metapage, fresh enough to contain the extent of `tid` if it exists.
pub unsafe fn meta_covering(rel: pg_sys::Relation, tid: Tid) -> Option<Meta> {
    match cached_meta(rel) {
        Some(m) if m.extent_of(tid.block).is_some() => Some(m),
        _ => refresh_meta(rel),
    }
}

/// The metapage, written first if the relation is empty.
///
/// Lock order: `add_extent` holds the metapage's buffer exclusively while
/// it waits for the relation extension lock, so this function, which
/// takes the extension lock to write the metapage, never waits for that
/// buffer while holding it: it only tries to lock it, and if somebody holds
/// it (the metapage exists then), lets go and reads it as any reader does.
/// Waiting for it deadlocked eight pgbench clients that started on the
/// `pgbench_history` pgbench had just truncated: one backend wrote the
/// metapage, a second began an extent, a third, which had found the file
/// empty, took the extension lock and waited for the metapage.
pub unsafe fn ensure_meta(rel: pg_sys::Relation) -> Meta {
    let local = crate::storage::buffer::relation_is_local(rel);
    loop {
        if let Some(m) = cached_meta(rel) {
            return m;
        }
        if !local {
            pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        }
        // Block 0 may exist as a zero page after a crash (see `read_meta`).
        let block0 = if nblocks(rel) == 0 {
            Block0::Absent
        } else {
            let b = if local { Some(Buf::read(rel, META_BLOCK, Lock::Exclusive)) } else { Buf::try_read_exclusive(rel, META_BLOCK) };
            match b {
                Some(b) if pg_sys::PageIsNew(b.page()) => Block0::Zero(b),
                Some(_) => Block0::Written,
                None => Block0::Busy,
            }
        };
        let busy = matches!(block0, Block0::Busy);
        if let Block0::Absent | Block0::Zero(_) = block0 {
            // Before the block exists: bad reloptions raise an ERROR here.
            let geometry = super::options::geometry_for_new_file(rel);
            let buf = match block0 {
                Block0::Zero(b) => b,
                _ => Buf::extend(rel),
            };
            let mut rec = WalRecord::start(rel);
            let page = rec.register_new(&buf);
            init_page(page, M_END);
            write_meta(page, &Meta { geometry, nextents: 0 });
            rec.finish();
        }
        if !local {
            pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        }
        if !busy {
            return refresh_meta(rel).expect("metapage just written");
        }
    }
}

/// Block 0 as the first insert finds it under the extension lock.
enum Block0 {
    /// The file has no block: the metapage goes into a new one.
    Absent,
    /// A zero page (a crash between the extension and the metapage's
    /// record), locked: the metapage goes into it.
    Zero(Buf),
    /// A metapage.
    Written,
    /// Somebody holds its buffer, so a metapage is there: read it without
    /// the extension lock.
    Busy,
}

/// A block of the relation for initialization: read if it exists, else
/// the relation is extended up to it (blocks in between stay zero pages,
/// `PageIsNew`: free on a compressing drive). Exclusively locked.
unsafe fn block_for_init(rel: pg_sys::Relation, blkno: u32) -> Buf {
    if blkno < nblocks(rel) {
        return Buf::read(rel, blkno, Lock::Exclusive);
    }
    loop {
        let b = Buf::extend(rel);
        if b.blkno() >= blkno {
            return b;
        }
    }
}

/// A block inside an existing extent, exclusively locked; extends the file
/// if a crash lost the zero blocks the extent was made with (only its
/// header, directory and used blocks are in the WAL).
pub unsafe fn read_extending(rel: pg_sys::Relation, blkno: u32) -> Buf {
    if blkno < nblocks(rel) {
        return Buf::read(rel, blkno, Lock::Exclusive);
    }
    let local = crate::storage::buffer::relation_is_local(rel);
    if !local {
        pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
    }
    let b = block_for_init(rel, blkno);
    if !local {
        pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
    }
    b
}

/// Makes extent `seen` (the number of extents the caller saw) and returns
/// the metapage after it; if another backend made one meanwhile, returns
/// that state instead. Header and directory blocks are initialized and
/// logged with the metapage in one record; the column and delta blocks
/// exist as zero pages and are initialized when first used.
pub unsafe fn add_extent(rel: pg_sys::Relation, seen: u32) -> Meta {
    let meta_buf = Buf::read(rel, META_BLOCK, Lock::Exclusive);
    let mut meta = parse_meta(rel, meta_buf.page());
    if meta.nextents != seen {
        drop(meta_buf);
        return refresh_meta(rel).unwrap_or(meta);
    }
    let g = meta.geometry;
    assert!(g.directory_blocks as usize + 2 <= crate::storage::wal::MAX_PAGES);
    let first = meta.extent_first(meta.nextents);
    let last = first + g.extent_blocks() as u32 - 1;
    let local = crate::storage::buffer::relation_is_local(rel);
    if !local {
        pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
    }
    let header = block_for_init(rel, first);
    let dirs: Vec<Buf> = (0..g.directory_blocks as usize).map(|i| block_for_init(rel, first + g.directory_block(i) as u32)).collect();
    // The rest of the extent exists before the metapage says the extent
    // does, so a later reader never reads past the end of the file.
    if nblocks(rel) <= last {
        loop {
            let b = Buf::extend(rel);
            if b.blkno() >= last {
                break;
            }
        }
    }
    if !local {
        pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
    }
    let mut rec = WalRecord::start(rel);
    let hp = rec.register_new(&header);
    init_page(hp, TRAILER_OFF);
    ExtentHeader::init_block(bytes(hp), &g);
    for (i, d) in dirs.iter().enumerate() {
        let dp = rec.register_new(d);
        init_page(dp, TRAILER_OFF);
        init_directory_block(bytes(dp), &g, i, ExtentHeader::empty().version);
    }
    let mp = rec.register(&meta_buf);
    meta.nextents += 1;
    write_meta(mp, &meta);
    rec.finish();
    drop(meta_buf);
    refresh_meta(rel).unwrap_or(meta)
}

fn check<T>(rel: pg_sys::Relation, blkno: u32, r: Result<T, FormatError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => unsafe { format_error(rel, blkno, e) },
    }
}

/// Outcome of one insert attempt into one extent.
pub enum Placed {
    /// Placed at this TID; `compaction_due`: the extent's delta part is now
    /// at the compaction trigger.
    At { tid: Tid, compaction_due: bool },
    /// No free slot or delta space here.
    Full,
    /// A HOT update's old version changed before it could be stamped
    /// (`StampOld`): nothing was done.
    Changed,
}

/// Inserts one encoded row version (payload in the core's row format) into
/// extent `k`: a slot, a delta item, the directory entry. `mvcc.ctid` is
/// set to the new version's own TID, unless it carries a speculative
/// insertion token (heap's convention: offset `SpecTokenOffsetNumber`),
/// which stays until the insertion is completed or aborted.
/// With `bulk` (COPY, CREATE TABLE AS, a rewrite), an extent whose column
/// part could not take the row beside what it holds is compacted and the
/// row refused (`bulk.rs`).
pub unsafe fn insert_into_extent(rel: pg_sys::Relation, meta: &Meta, k: u32, natts: u16, mvcc: Mvcc, payload: &[u8], bulk: bool) -> Placed {
    insert_and_stamp(rel, meta, k, natts, mvcc, payload, None, bulk)
}

/// The old version of a HOT update, stamped in the same critical section
/// and WAL record (UPDATE) as its new version's insert.
pub struct StampOld<'a> {
    pub slot: u16,
    /// Its MVCC fields as the updater checked them. If they changed since
    /// (the updater released the version to prepare the new one, and
    /// somebody locked or changed it meanwhile), nothing is done:
    /// `Placed::Changed`.
    pub expect: Mvcc,
    /// Its new MVCC fields, given its current ones and the new version's
    /// TID.
    pub stamp: &'a dyn Fn(&Mvcc, Tid) -> Mvcc,
}

/// Hint bits: set by any reader, they say nothing about whether somebody
/// locked or changed a version.
const HINT_BITS: u16 = 0x0100 | 0x0200 | 0x0400 | 0x0800;

/// Whether a version's MVCC fields are what an updater checked, hint bits
/// aside.
fn unchanged(now: &Mvcc, expect: &Mvcc) -> bool {
    Mvcc { infomask: now.infomask & !HINT_BITS, ..*now } == Mvcc { infomask: expect.infomask & !HINT_BITS, ..*expect }
}

/// Whether somebody changed a version's MVCC fields since they read
/// `seen` (hint bits aside).
pub fn mvcc_changed(now: &Mvcc, seen: &Mvcc) -> bool {
    !unchanged(now, seen)
}

/// Where the old version of a HOT update is: in the last delta block (the
/// one appends go to, locked once for both) or in a block of its own; the
/// byte offset of its MVCC fields, and those fields.
enum OldAt {
    InLast { at: usize, mvcc: Mvcc },
    Own { buf: Buf, at: usize, mvcc: Mvcc, in_delta: bool },
}

/// `insert_into_extent`, and with `old` also the HOT update's stamp of the
/// old version, under the same header lock: the old version is found and
/// checked after the header block is held exclusively, so nobody else is
/// inside the extent and the other blocks may be locked in any order.
#[allow(clippy::too_many_arguments)]
unsafe fn insert_and_stamp(rel: pg_sys::Relation, meta: &Meta, k: u32, natts: u16, mut mvcc: Mvcc, payload: &[u8], old: Option<&StampOld>, bulk: bool) -> Placed {
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let hbuf = Buf::read(rel, first, Lock::Exclusive);
    let mut h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
    // Major compaction when the delta part has reached its trigger and the
    // row needs a new delta block (the paper's full delta page). For a HOT
    // update only where that is cheap (`hot_compaction_pays`): it rebuilds
    // the whole extent to make room for one version of a row the extent
    // already holds (heap's counterpart prunes one 8 KB page). Under
    // TPC-C, stock's bulk-loaded extents, full from the start, were
    // compacted about every 40 updates, and tpmC was a third of what it is
    // when such an update goes to another extent as a normal update (as
    // heap's does when the page is full) and the background worker
    // compacts the extent.
    if h.delta_used >= foreground_trigger(&g)
        && !fits_last_delta_block(rel, &g, first, &h, ITEM_HDR + payload.len())
        && (old.is_none() || hot_compaction_pays(rel, meta, first, &h))
        && super::compact::may_free_delta_block(rel, meta, first, &h)
    {
        if let Some(done) = super::compact::compact_extent(rel, meta, k, &hbuf, super::compact::Goal::Room) {
            h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
            record_free_space(rel, &g, first, &done);
        }
    }
    // A slot: a fresh one above the high-water mark, else the lowest one
    // VACUUM or compaction made unused (as heap reuses line pointers). New
    // rows take only the slots below `new_row_slots`: the rest are the HOT
    // updates' (ExtentHeader::new_row_slots).
    let slot_limit = if old.is_none() { ExtentHeader::new_row_slots(&g) as usize } else { g.max_slots() };
    let slot = if (h.slot_hwm as usize) < slot_limit { Some(h.slot_hwm) } else { lowest_unused_slot(rel, &g, first, &hbuf, &h, slot_limit) };
    // A bulk insert fills the extent only as far as its column part will
    // take the rows at the next compaction (bulk.rs) and its new-row slots
    // go; then it compacts the extent (everything moves in) and goes
    // elsewhere.
    let bulk_closed = |hbuf: &Buf| {
        if let Some(done) = super::compact::compact_extent(rel, meta, k, hbuf, super::compact::Goal::Room) {
            record_free_space(rel, &g, first, &done);
        }
        Placed::Full
    };
    let Some(slot) = slot else {
        return if bulk && old.is_none() { bulk_closed(&hbuf) } else { Placed::Full };
    };
    let admitted = match (bulk && old.is_none()).then(|| super::bulk::admit(rel, &g, first, &h, natts, payload)) {
        None => None,
        Some(super::bulk::Admit::Yes(p)) => Some(p),
        Some(super::bulk::Admit::Closed) => return bulk_closed(&hbuf),
    };
    let tid = check(rel, first, g.tid(first, slot));
    if mvcc.ctid.offset != SPEC_TOKEN_OFFSET {
        mvcc.ctid = tid;
    }
    let item = check(rel, first, delta::encode_item(&RowHeader { slot, natts, mvcc }, payload));
    // The versions change: the visibility-map bits go first (vm.rs).
    if h.map_visible {
        clear_map_visible(rel, &g, first, &hbuf);
        h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
    }

    let (dir_index, _) = g.directory_entry(slot);
    let dir_buf = (dir_index != 0).then(|| Buf::read(rel, first + dir_index as u32, Lock::Exclusive));
    let last = (h.delta_used as usize).checked_sub(1);
    let mut last_buf = last.map(|i| Buf::read(rel, first + g.delta_block(i) as u32, Lock::Exclusive));

    // The old version of a HOT update, checked unchanged.
    let old_at = match old {
        None => None,
        Some(o) => match locate_for_stamp(rel, &g, first, &h, &hbuf, dir_buf.as_ref().filter(|_| g.directory_entry(o.slot).0 == dir_index), last.zip(last_buf.as_ref()), o) {
            Some(at) => Some(at),
            None => return Placed::Changed,
        },
    };

    // The delta block: the last one in use if the item fits, else the next.
    let mut target: Option<(usize, Buf, bool)> = None;
    if let (Some(i), Some(b)) = (last, last_buf.as_ref()) {
        let blk = first + g.delta_block(i) as u32;
        if check(rel, blk, delta::free_space(bytes(b.page()))) >= item.len() {
            target = Some((i, last_buf.take().unwrap(), false));
        }
    }
    if target.is_none() {
        if h.delta_used >= g.params.delta_blocks {
            return Placed::Full;
        }
        // A new row (an insert, or a non-HOT update's new version) takes a
        // few delta blocks only of an extent whose column part is full
        // (ExtentHeader::new_row_delta_blocks). A delta part full of rows
        // that compaction cannot move leaves no room for HOT updates of the
        // extent's rows ever again: under TPC-C, stock and customer came
        // out of their load like that, and most of their updates went to
        // other extents as non-HOT updates.
        if old.is_none() && h.column_part_full(&g) && h.delta_used >= ExtentHeader::new_row_delta_blocks(&g) {
            return Placed::Full;
        }
        let i = h.delta_used as usize;
        let blk = first + g.delta_block(i) as u32;
        let b = read_extending(rel, blk);
        if !pg_sys::PageIsNew(b.page()) && check(rel, blk, pg_hybrid_core::hasis::layout::BlockTrailer::read(bytes(b.page()))).is_some() {
            format_error(rel, blk, FormatError::Corrupt("delta block past delta_used is initialized"));
        }
        target = Some((i, b, true));
    }
    let (i, dbuf, fresh) = target.unwrap();
    let dblk = first + g.delta_block(i) as u32;
    // The old version's block and MVCC offset; None when it is the target.
    let old_page: Option<(Option<&Buf>, usize)> = match &old_at {
        None => None,
        Some(OldAt::InLast { at, .. }) => Some((last_buf.as_ref(), *at)),
        Some(OldAt::Own { buf, at, .. }) => Some((Some(buf), *at)),
    };
    // Outside the critical section: a combo command id may be allocated.
    let stamped = match (old, &old_at) {
        (Some(o), Some(OldAt::InLast { mvcc: now, .. } | OldAt::Own { mvcc: now, .. })) => Some((o.stamp)(now, tid)),
        _ => None,
    };
    // Where the old version's payload is, when it is a delta item that
    // redo will find as it is now, so the record logs the new one as a
    // diff against it (wire.rs). In the block the new version goes to,
    // always (heap's rule for its own prefix/suffix compression); in
    // another block, with full-page writes and that block logged since the
    // redo point (redo then reads it as the primary has it, or restores
    // its image, whose payload bytes the update does not change). Read in
    // place when the record is made: neither the append nor the stamp
    // touches those bytes.
    let old_item: Option<(pg_sys::Page, u16)> = match (&old_at, old_page) {
        _ if !crate::storage::wal::relation_needs_wal(rel) => None,
        (Some(OldAt::InLast { at, .. }), Some((None, _))) => Some((dbuf.page(), *at)),
        (Some(OldAt::InLast { at, .. }), Some((Some(b), _))) | (Some(OldAt::Own { at, in_delta: true, .. }), Some((Some(b), _))) => {
            crate::storage::wal::logged_since_redo_point([b]).then(|| (b.page(), *at))
        }
        _ => None,
    }
    .and_then(|(page, at)| Some((page, delta::item_offset_of_mvcc(at)?)));

    // Everything that could fail was checked above: the item fits the
    // block, the slot is in range, the old version is as expected. The
    // pages change in a critical section and one record of hasis's rmgr
    // logs it (wal.rs).
    let offset = if fresh {
        delta::ITEMS_START as u16
    } else {
        (pg_hybrid_core::hasis::layout::BODY_END - check(rel, dblk, delta::free_space(bytes(dbuf.page())))) as u16
    };
    let r = pg_hybrid_core::hasis::wire::InsertPlace { slot, delta_index: i as u8, fresh, offset, version: h.version };
    pg_sys::CritSectionCount += 1;
    let applied = super::wal::apply_insert_delta(&g, dbuf.page(), &r, &item)
        .and_then(|_| super::wal::apply_insert_entry(&g, dir_buf.as_ref().map_or(hbuf.page(), |b| b.page()), &r))
        .and_then(|_| super::wal::apply_insert_sizes(&g, hbuf.page(), &r));
    if let Err(e) = applied {
        // PANIC (we are in a critical section): the checks above make this
        // unreachable short of memory corruption.
        format_error(rel, dblk, e);
    }
    pg_sys::MarkBufferDirty(hbuf.buffer());
    pg_sys::MarkBufferDirty(dbuf.buffer());
    if let Some(d) = &dir_buf {
        pg_sys::MarkBufferDirty(d.buffer());
    }
    match (old_page, &stamped) {
        (Some((ob, at)), Some(m)) => {
            let obuf = ob.map_or(dbuf.buffer(), |b| b.buffer());
            super::wal::apply_stamp(pg_sys::BufferGetPage(obuf), at, m);
            pg_sys::MarkBufferDirty(obuf);
            let old_payload = old_item.and_then(|(page, offset)| delta::payload_at(bytes(page), offset).ok());
            let stamp = super::wal::StampPart { buffer: ob.map(|b| b.buffer()), at: at as u16, mvcc: *m, old_payload };
            super::wal::log_insert(rel, hbuf.buffer(), dbuf.buffer(), dir_buf.as_ref().map(|b| b.buffer()), &r, tid, &item, Some(&stamp));
        }
        _ => super::wal::log_insert(rel, hbuf.buffer(), dbuf.buffer(), dir_buf.as_ref().map(|b| b.buffer()), &r, tid, &item, None),
    }
    pg_sys::CritSectionCount -= 1;
    if let Some(p) = admitted {
        super::bulk::keep(p);
    }
    let delta_used = if fresh { i as u16 + 1 } else { h.delta_used };
    Placed::At { tid, compaction_due: ExtentHeader { delta_used, ..h }.compaction_due(&g) }
}

/// Finds a HOT update's old version under the header block held
/// exclusively, locks its block exclusively (the last delta block is
/// already locked: `last`), and checks that it still carries its slot and
/// the MVCC fields the updater saw. None if anything changed.
#[allow(clippy::too_many_arguments)]
unsafe fn locate_for_stamp(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, hbuf: &Buf, locked_dir: Option<&Buf>, last: Option<(usize, &Buf)>, o: &StampOld) -> Option<OldAt> {
    if o.slot >= h.slot_hwm {
        return None;
    }
    let (bi, _) = g.directory_entry(o.slot);
    let entry = if bi == 0 {
        check(rel, first, header::read_entry(bytes(hbuf.page()), g, o.slot))
    } else if let Some(d) = locked_dir {
        check(rel, first + bi as u32, header::read_entry(bytes(d.page()), g, o.slot))
    } else {
        let d = Buf::read(rel, first + bi as u32, Lock::Share);
        check(rel, first + bi as u32, header::read_entry(bytes(d.page()), g, o.slot))
    };
    let (at_block, at, own, column) = match entry {
        DirEntry::Delta { block, offset } => {
            let at = offset as usize + 2;
            match last {
                Some((i, b)) if i == block as usize => (b.page(), at, None, None),
                _ => {
                    let blk = first + g.delta_block(block as usize) as u32;
                    let b = Buf::read(rel, blk, Lock::Exclusive);
                    let view = check(rel, blk, DeltaView::open(bytes(b.page()), g, block as usize, Some(h.version)));
                    check(rel, blk, view.item(offset));
                    (b.page(), at, Some(b), None)
                }
            }
        }
        DirEntry::Column { row } => {
            // The header is held exclusively: nobody is inside the extent.
            clear_all_visible(rel, g, first, hbuf);
            let cblk = first + g.column_block(0) as u32;
            let (hb, off, column) = {
                let cols = LazyColumns::new(rel, g, first, h, std::ptr::null_mut());
                let part = parse_columns(rel, g, first, h, &cols);
                let (hb, off) = check(rel, cblk, part.header_location(row as usize));
                (hb, off, Some((part.layout().clone(), row)))
            };
            let b = Buf::read(rel, first + g.column_block(hb) as u32, Lock::Exclusive);
            (b.page(), off, Some(b), column)
        }
        DirEntry::Unused | DirEntry::Dead | DirEntry::Redirect { .. } => return None,
    };
    let raw = &bytes(at_block)[at..at + ROW_HEADER];
    let header = match &column {
        // A column row's header may be compact (slot and own TID relative).
        Some((layout, row)) => check(rel, first + g.column_block(0) as u32, layout.decode_header(raw, *row as usize, Some(first))),
        None => RowHeader::decode(raw),
    };
    if header.slot != o.slot || !unchanged(&header.mvcc, &o.expect) {
        return None;
    }
    let in_delta = matches!(entry, DirEntry::Delta { .. });
    let at = at + MVCC_OFF;
    Some(match own {
        Some(buf) => OldAt::Own { buf, at, mvcc: header.mvcc, in_delta },
        None => OldAt::InLast { at, mvcc: header.mvcc },
    })
}

/// heap's SpecTokenOffsetNumber: a ctid with this offset holds a
/// speculative insertion token in its block number.
pub const SPEC_TOKEN_OFFSET: u16 = 0xfffe;

/// Delta blocks in use before an insert compacts the extent itself. With
/// no background compaction yet, the foreground waits for the whole delta
/// part (its over-provisioned reserve included) rather than the paper's
/// `compact_trigger`: each compaction rebuilds the column part, so moving
/// 64 KB of versions at a time instead of 16 KB cuts its write
/// amplification four times. VACUUM compacts at any fill.
fn foreground_trigger(g: &Geometry) -> u16 {
    g.params.delta_blocks.max(g.params.compact_trigger)
}

/// Reads the directory entries of one extent under the header block the
/// caller holds, share-locking each directory block when first needed.
pub struct DirectoryReader<'h> {
    rel: pg_sys::Relation,
    g: Geometry,
    first: u32,
    header: &'h Buf,
    strategy: pg_sys::BufferAccessStrategy,
    dir: Option<(usize, Buf)>,
}

impl<'h> DirectoryReader<'h> {
    pub fn new(rel: pg_sys::Relation, g: &Geometry, first: u32, header: &'h Buf, strategy: pg_sys::BufferAccessStrategy) -> Self {
        DirectoryReader { rel, g: *g, first, header, strategy, dir: None }
    }

    pub unsafe fn entry(&mut self, slot: u16) -> DirEntry {
        let (bi, _) = self.g.directory_entry(slot);
        let page = if bi == 0 {
            self.header.page()
        } else {
            if self.dir.as_ref().map(|d| d.0) != Some(bi) {
                self.dir = Some((bi, Buf::read_with(self.rel, self.first + bi as u32, Lock::Share, self.strategy)));
            }
            self.dir.as_ref().unwrap().1.page()
        };
        check(self.rel, self.first + bi as u32, header::read_entry(bytes(page), &self.g, slot))
    }
}

/// Whether a HOT update that finds the delta part full compacts the
/// extent itself instead of going to another extent as a non-HOT update:
/// where the delta part holds at least as many versions as the column part
/// holds rows, and at least half of it is versions dead to everyone
/// (`compact::delta_mostly_dead`). Compaction decodes and rebuilds both, so
/// it then costs about two rows per version it removes, less than a
/// non-HOT update's insert, index entries and stamp. That is a small
/// table's hot rows (pgbench's branches and tellers, TPC-C's district and
/// warehouse): without it, their updates spilled into new extents whenever
/// the worker fell behind, and pgbench_branches' 10 rows grew to 50 extents
/// and 86,000 versions in 20 s, each non-HOT version with an index entry
/// that every bitmap scan of its key walked.
unsafe fn hot_compaction_pays(rel: pg_sys::Relation, meta: &Meta, first: u32, h: &ExtentHeader) -> bool {
    let g = meta.geometry;
    let mut versions = 0usize;
    for i in 0..h.delta_used as usize {
        let blk = first + g.delta_block(i) as u32;
        let b = Buf::read(rel, blk, Lock::Share);
        versions += check(rel, blk, delta::DeltaView::open(bytes(b.page()), &g, i, Some(h.version))).len();
        if versions >= h.column_rows as usize {
            drop(b);
            return super::compact::delta_mostly_dead(rel, meta, first, h);
        }
    }
    false
}

/// Whether an item of `len` bytes fits the last delta block in use.
unsafe fn fits_last_delta_block(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, len: usize) -> bool {
    if h.delta_used == 0 {
        return false;
    }
    let blk = first + g.delta_block(h.delta_used as usize - 1) as u32;
    let b = Buf::read(rel, blk, Lock::Share);
    check(rel, blk, delta::free_space(bytes(b.page()))) >= len
}

/// Bytes of delta space an extent offers to inserts, for the free space
/// map (whose values stop at a block's size): none past the blocks new rows
/// may take where the column part is full (`insert_and_stamp`), or the
/// map would offer extents that turn every insert away.
fn delta_free(g: &Geometry, delta_used: u16, column_full: bool) -> usize {
    let limit = if column_full { ExtentHeader::new_row_delta_blocks(g) } else { g.params.delta_blocks };
    limit.saturating_sub(delta_used) as usize * (pg_hybrid_core::hasis::layout::BODY_END - delta::ITEMS_START)
}

/// Tells the free space map how much room extent `first` has for new rows
/// after a compaction left it so (its header block stands for it), and
/// makes the change visible to searches.
pub unsafe fn record_free_space(rel: pg_sys::Relation, g: &Geometry, first: u32, done: &super::compact::Compacted) {
    let free = delta_free(g, done.delta_used, done.column_full).min(BLCKSZ - 64);
    pg_sys::RecordPageWithFreeSpace(rel, first, free);
    pg_sys::FreeSpaceMapVacuumRange(rel, first, first + 1);
}

/// The lowest unused slot below `limit` of the extent whose header `h` the
/// caller holds exclusively; the header's free-slot hint says where to
/// start looking.
unsafe fn lowest_unused_slot(rel: pg_sys::Relation, g: &Geometry, first: u32, hbuf: &Buf, h: &ExtentHeader, limit: usize) -> Option<u16> {
    let mut dir = DirectoryReader::new(rel, g, first, hbuf, std::ptr::null_mut());
    let end = (h.slot_hwm as usize).min(limit) as u16;
    (h.free_hint..end).find(|&s| dir.entry(s) == DirEntry::Unused)
}

/// The extent an insert tries first: the one this backend inserted into
/// last (the relation's target block is its header), else the last one.
unsafe fn start_extent(rel: pg_sys::Relation, meta: &Meta) -> u32 {
    let target = (*crate::storage::buffer::smgr(rel)).smgr_targblock;
    meta.extent_of(target).filter(|&k| meta.extent_first(k) == target).unwrap_or(meta.nextents.saturating_sub(1))
}

/// Inserts a row version somewhere in the relation and returns its TID:
/// the extent this backend inserted into last, else one the free space
/// map offers, else the last extent, else a new one.
/// `bulk`: part of a bulk insert (see `insert_into_extent`).
pub unsafe fn insert(rel: pg_sys::Relation, natts: u16, mvcc: Mvcc, payload: &[u8], bulk: bool) -> Tid {
    let mut meta = ensure_meta(rel);
    let header_of = |m: &Meta, blk: u32| m.extent_of(blk).filter(|&k| m.extent_first(k) == blk);
    let mut k = start_extent(rel, &meta);
    let mut tried: Vec<u32> = Vec::new();
    let needed = ITEM_HDR + payload.len();
    loop {
        if k >= meta.nextents {
            meta = add_extent(rel, meta.nextents);
            k = meta.nextents - 1;
        }
        match insert_into_extent(rel, &meta, k, natts, mvcc, payload, bulk) {
            Placed::At { tid, compaction_due } => {
                (*crate::storage::buffer::smgr(rel)).smgr_targblock = meta.extent_first(k);
                if compaction_due {
                    super::worker::request(rel);
                }
                return tid;
            }
            Placed::Full | Placed::Changed => {
                tried.push(k);
                let first = meta.extent_first(k);
                let offered = pg_sys::RecordAndGetPageWithFreeSpace(rel, first, 0, needed);
                if let Some(k2) = header_of(&meta, offered).filter(|k2| !tried.contains(k2)) {
                    k = k2;
                    continue;
                }
                meta = refresh_meta(rel).expect("metapage exists");
                let last = meta.nextents - 1;
                k = if tried.contains(&last) { meta.nextents } else { last };
            }
        }
    }
}

/// A bulk insert's batch (COPY's `multi_insert`): rows (natts and payload
/// each) of one transaction and command, MVCC fields `mvcc` (each row's
/// ctid becomes its own TID), written straight into column parts: the
/// extent this backend filled last (or the last one) takes as many as its
/// column part holds and its new-row slots allow, in one compaction that
/// appends them (`compact::append_rows`), then the next extent, a new one
/// at the end, takes the rest. Returns their TIDs, in order.
///
/// A row no column part could hold (an empty extent turns it back) goes
/// through the delta part as a single insert does.
pub unsafe fn insert_batch(rel: pg_sys::Relation, mvcc: Mvcc, rows: &[(u16, &[u8])]) -> Vec<Tid> {
    use pg_hybrid_core::hasis::compact::AppendedRow;
    let mut tids = Vec::with_capacity(rows.len());
    let mut meta = ensure_meta(rel);
    let mut k = start_extent(rel, &meta);
    let mut next = 0usize;
    while next < rows.len() {
        if k >= meta.nextents {
            meta = add_extent(rel, meta.nextents);
            k = meta.nextents - 1;
        }
        let g = meta.geometry;
        let first = meta.extent_first(k);
        let hbuf = Buf::read(rel, first, Lock::Exclusive);
        let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
        // Fresh slots only (a slot VACUUM freed may lie anywhere below the
        // high-water mark, and appended rows take consecutive ones), and
        // only the new rows' share of them (ExtentHeader::new_row_slots).
        let free_slots = (ExtentHeader::new_row_slots(&g) as usize).saturating_sub(h.slot_hwm as usize);
        let batch = &rows[next..(next + free_slots).min(rows.len())];
        let fit = super::bulk::fitting(rel, &g, first, &h, batch);
        if fit.rows > 0 {
            let mut appended = Vec::with_capacity(fit.rows);
            for (j, &(natts, payload)) in batch[..fit.rows].iter().enumerate() {
                let slot = h.slot_hwm + j as u16;
                let header = RowHeader { slot, natts, mvcc: Mvcc { ctid: check(rel, first, g.tid(first, slot)), ..mvcc } };
                appended.push(AppendedRow { header, item: check(rel, first, delta::encode_item(&header, payload)) });
            }
            if let Some((done, n)) = super::compact::append_rows(rel, &meta, k, &hbuf, appended) {
                for j in 0..n {
                    tids.push(check(rel, first, g.tid(first, h.slot_hwm + j as u16)));
                }
                super::bulk::keep_appended(fit, h.version + 1, &batch[..n]);
                record_free_space(rel, &g, first, &done);
                (*crate::storage::buffer::smgr(rel)).smgr_targblock = first;
                next += n;
                continue;
            }
        }
        drop(hbuf);
        if fit.empty && free_slots > 0 {
            // Too wide for any column part: the delta part takes it.
            let (natts, payload) = rows[next];
            tids.push(insert(rel, natts, mvcc, payload, true));
            next += 1;
            meta = refresh_meta(rel).expect("metapage exists");
            continue;
        }
        // This extent is done for the load: the last one, or a new one
        // after it (as heap's bulk inserts extend the relation).
        meta = refresh_meta(rel).expect("metapage exists");
        k = if k + 1 < meta.nextents { meta.nextents - 1 } else { meta.nextents };
    }
    tids
}

/// A HOT update's writes: the new version into the extent that holds the
/// old one at `old_tid`, and the old version's stamp, in one critical
/// section and one WAL record. `Placed::Full`: no room without a
/// compaction (a HOT update compacts only where that is cheap:
/// `hot_compaction_pays`);
/// `Placed::Changed`: the old version changed since
/// the updater checked it. Either way nothing was written.
pub unsafe fn hot_update(rel: pg_sys::Relation, old_tid: Tid, old: &StampOld, natts: u16, mvcc: Mvcc, payload: &[u8]) -> Placed {
    let Some(meta) = meta_covering(rel, old_tid) else { return Placed::Full };
    let Some(k) = meta.extent_of(old_tid.block) else { return Placed::Full };
    let placed = insert_and_stamp(rel, &meta, k, natts, mvcc, payload, Some(old), false);
    if let Placed::At { compaction_due: true, .. } = placed {
        super::worker::request(rel);
    }
    placed
}

/// The HOT redirects of the extent starting at block `first` (root slot,
/// target slot), read under the header block's share lock.
pub unsafe fn redirects(rel: pg_sys::Relation, meta: &Meta, first: u32) -> Vec<(u16, u16)> {
    let g = meta.geometry;
    let hbuf = Buf::read(rel, first, Lock::Share);
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
    let mut dir = DirectoryReader::new(rel, &g, first, &hbuf, std::ptr::null_mut());
    (0..h.slot_hwm)
        .filter_map(|s| match dir.entry(s) {
            DirEntry::Redirect { slot } => Some((s, slot)),
            _ => None,
        })
        .collect()
}

/// The slots of extent `k` whose versions compaction removed (`Dead`),
/// read under the header block the caller holds.
pub unsafe fn dead_slots(rel: pg_sys::Relation, meta: &Meta, k: u32, hbuf: &Buf) -> Vec<u16> {
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
    let mut dir = DirectoryReader::new(rel, &g, first, hbuf, std::ptr::null_mut());
    (0..h.slot_hwm).filter(|&s| dir.entry(s) == DirEntry::Dead).collect()
}

/// VACUUM's last step for extent `k`: `Dead` slots whose index entries are
/// gone become `Unused` (free for new versions), and trailing unused slots
/// lower the high-water mark, as PostgreSQL 15 truncates line pointer
/// arrays. One GenericXLog record (header and directory blocks).
pub unsafe fn set_unused(rel: pg_sys::Relation, meta: &Meta, k: u32, slots: &[u16]) {
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let hbuf = Buf::read(rel, first, Lock::Exclusive);
    let dirs: Vec<Buf> = (0..g.directory_blocks as usize).map(|i| Buf::read(rel, first + g.directory_block(i) as u32, Lock::Exclusive)).collect();
    let mut rec = WalRecord::start(rel);
    let hp = rec.register(&hbuf);
    let dps: Vec<pg_sys::Page> = dirs.iter().map(|d| rec.register(d)).collect();
    let page_of = |s: u16| {
        let (bi, _) = g.directory_entry(s);
        if bi == 0 { hp } else { dps[bi - 1] }
    };
    let mut h = check(rel, first, ExtentHeader::read(bytes(hp), &g));
    for &s in slots {
        if s < h.slot_hwm && check(rel, first, header::read_entry(bytes(page_of(s)), &g, s)) == DirEntry::Dead {
            check(rel, first, header::write_entry(bytes(page_of(s)), &g, s, DirEntry::Unused));
            h.after_unused(s);
        }
    }
    check(rel, first, h.trim_hwm(|s| Ok(header::read_entry(bytes(page_of(s)), &g, s)? == DirEntry::Unused)));
    h.write(bytes(hp), &g);
    rec.finish();
}

/// The column part of an extent, its blocks share-locked.
pub struct ColumnBlocks {
    bufs: Vec<Buf>,
}

impl ColumnBlocks {
    /// Share-locks the column blocks in use (after the header block, in
    /// block order).
    pub unsafe fn lock(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, strategy: pg_sys::BufferAccessStrategy) -> ColumnBlocks {
        let n = (h.column_units as usize).div_ceil(UNITS_PER_BLOCK);
        let bufs = (0..n).map(|i| Buf::read_with(rel, first + g.column_block(i) as u32, Lock::Share, strategy)).collect();
        ColumnBlocks { bufs }
    }

    /// The parsed part (checked against the header's version).
    pub unsafe fn part(&self, rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader) -> ColumnPart<'_> {
        let mut blocks: Vec<&[u8]> = self.bufs.iter().map(|b| &*bytes(b.page())).collect();
        // Each block's trailer first, so an error names the damaged block.
        for (i, b) in blocks.iter().enumerate() {
            let trailer = pg_hybrid_core::hasis::layout::BlockTrailer::check(b, pg_hybrid_core::hasis::layout::BlockKind::Column, g.column_block(i), Some(h.version));
            check(rel, first + g.column_block(i) as u32, trailer);
        }
        blocks.resize(g.params.column_blocks as usize, &ZERO_BLOCK);
        check(rel, first + g.column_block(0) as u32, ColumnPart::parse(g, blocks, h.column_units as usize, h.column_rows as usize, Some(h.version))).at_extent(first)
    }

    fn buffer(&self, i: usize) -> (pg_sys::Buffer, pg_sys::Page) {
        unsafe { (self.bufs[i].buffer(), self.bufs[i].page()) }
    }
}

static ZERO_BLOCK: [u8; BLCKSZ] = [0; BLCKSZ];

/// An extent of one relation file (for per-backend hints about it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtentKey {
    tablespace: u32,
    database: u32,
    relfilenode: u32,
    first: u32,
}

impl ExtentKey {
    pub fn of(rel: pg_sys::Relation, first: u32) -> ExtentKey {
        let node = unsafe { (*rel).rd_node };
        ExtentKey { tablespace: node.spcNode.into(), database: node.dbNode.into(), relfilenode: node.relNode.into(), first }
    }
}

/// Column layouts this backend parsed (ColumnLayout), each with the page
/// version and the metapage epoch (`CachedMeta::epoch`) it was read under.
/// A read of the same extent under the same page version and epoch takes
/// it without looking at the meta mini-page (a point read then pins only
/// the blocks its row header and values are in): only compaction writes a
/// column part, and every compaction advances the page version, which never
/// goes back while a relation file lives; an extent is made once per file
/// (the file grows, and is only ever truncated to nothing); and the epoch
/// changes whenever the file may have: a relcache rebuild (a new file,
/// a dropped relation whose file number may come back) or an in-place
/// truncation (`forget_meta`). Without an epoch (the metapage read
/// directly) or under another version, the meta bytes are compared with
/// the kept layout's (`parse_lazy_reusing`) and the layout parsed afresh
/// where they differ.
///
/// The layouts take memory in every backend that reads the table (about
/// 2.4 KB for a 16-column part), so they are kept up to
/// `pg_hybrid.hasis_layout_cache` bytes; past it a quarter of them is
/// dropped, in the map's (hash) order, which is as good as at random. A
/// budget below a query's working set of extents costs the reads it misses
/// a parse of the meta mini-page and a pin of its block: TPC-H Q9 at SF 1
/// fetches from about 7000 extents of lineitem and orders, and took 7.8 s
/// with room for 4096 of them (the whole map was cleared when it filled)
/// against 4.8–5.5 s with room for all.
pub static LAYOUT_CACHE_KB: pgrx::GucSetting<i32> = pgrx::GucSetting::<i32>::new(32 * 1024);

pub fn define_gucs() {
    pgrx::GucRegistry::define_int_guc(
        c"pg_hybrid.hasis_layout_cache",
        c"Memory each backend keeps for the column-part layouts of hasis tables it has read.",
        c"A point read of a column row whose layout is kept skips reading and parsing its column part's meta mini-page; 0 keeps none.",
        &LAYOUT_CACHE_KB,
        0,
        i32::MAX / 1024,
        pgrx::GucContext::Userset,
        pgrx::GucFlags::UNIT_KB,
    );
}

/// One column part as this backend may know it: an extent under a page
/// version, read under a metapage epoch. What was read of the part under
/// one `PartKey` (its layout, a row's values) holds for as long as the key
/// does (see `LAYOUT_CACHE_KB`).
#[derive(Clone, Copy, PartialEq, Eq)]
struct PartKey {
    extent: ExtentKey,
    epoch: u64,
    version: u32,
}

impl PartKey {
    /// None without an epoch (the metapage was read directly): then
    /// nothing read may be kept.
    fn of(rel: pg_sys::Relation, first: u32, version: u32) -> Option<PartKey> {
        let epoch = unsafe { meta_epoch(rel) }?;
        Some(PartKey { extent: ExtentKey::of(rel, first), epoch, version })
    }
}

struct KnownLayout {
    part: PartKey,
    layout: std::sync::Arc<ColumnLayout>,
}

thread_local! {
    static LAYOUTS: std::cell::RefCell<pg_hybrid_core::fast_hash::BudgetMap<ExtentKey, KnownLayout>> = Default::default();
}

/// The column part of extent `first`, its blocks read through `cols`.
pub(super) fn parse_columns<'a>(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, cols: &'a LazyColumns) -> ColumnPart<'a> {
    let part_key = PartKey::of(rel, first, h.version);
    let known = LAYOUTS.with(|m| m.borrow().get(&ExtentKey::of(rel, first)).map(|k| (k.part, k.layout.clone())));
    let cblk = first + g.column_block(0) as u32;
    if let Some((kp, layout)) = &known {
        if part_key == Some(*kp) && layout.describes(h.column_units as usize, h.column_rows as usize) {
            return ColumnPart::lazy_with_layout(cols, layout).at_extent(first);
        }
    }
    let part = check(rel, cblk, ColumnPart::parse_lazy_reusing(g, cols, h.column_units as usize, h.column_rows as usize, known.as_ref().map(|k| &k.1))).at_extent(first);
    if let Some(part_key) = part_key {
        let budget = LAYOUT_CACHE_KB.get().max(0) as usize * 1024;
        if budget > 0 {
            let layout = part.layout().clone();
            let bytes = layout.approx_bytes();
            LAYOUTS.with(|m| m.borrow_mut().insert(part_key.extent, KnownLayout { part: part_key, layout }, bytes, budget));
        }
    }
    part
}

/// Column blocks share-locked on first use (a point read touches the meta
/// block, its row header's block and its values' blocks), each checked
/// against the page version the caller read under the header block's
/// share lock. Share locks taken out of block order are safe here: the
/// only other lockers of column blocks inside the header's share lock are
/// readers and stampers, which never wait for a second column block.
pub struct LazyColumns {
    rel: pg_sys::Relation,
    g: Geometry,
    first: u32,
    version: u32,
    strategy: pg_sys::BufferAccessStrategy,
    bufs: std::cell::RefCell<Vec<Option<Buf>>>,
    /// A block handed to a holder that keeps it locked for as long as this
    /// source lives (`lend`), and its page.
    lent: std::cell::Cell<Option<(usize, pg_sys::Page)>>,
}

impl LazyColumns {
    pub fn new(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, strategy: pg_sys::BufferAccessStrategy) -> LazyColumns {
        let n = g.params.column_blocks as usize;
        LazyColumns { rel, g: *g, first, version: h.version, strategy, bufs: std::cell::RefCell::new((0..n).map(|_| None).collect()), lent: std::cell::Cell::new(None) }
    }

    /// Column block `i` if it was read, share-locked, handed over to a
    /// holder that must keep it until this source is dropped: the source
    /// reads the block through it from then on instead of locking it again.
    fn lend(&self, i: usize) -> Option<Buf> {
        let buf = self.bufs.borrow_mut().get_mut(i).and_then(Option::take)?;
        self.lent.set(Some((i, unsafe { buf.page() })));
        Some(buf)
    }

    /// Column blocks this source has read.
    fn blocks_read(&self) -> u32 {
        self.bufs.borrow().iter().filter(|b| b.is_some()).count() as u32 + self.lent.get().is_some() as u32
    }

    fn buffer(&self, i: usize) -> (pg_sys::Buffer, pg_sys::Page) {
        let b = self.bufs.borrow();
        let buf = b[i].as_ref().expect("block read before");
        unsafe { (buf.buffer(), buf.page()) }
    }
}

impl pg_hybrid_core::hasis::column::BlockSource for LazyColumns {
    fn block(&self, i: usize) -> Result<&[u8], FormatError> {
        if let Some((_, page)) = self.lent.get().filter(|&(l, _)| l == i) {
            return Ok(unsafe { std::slice::from_raw_parts(page as *const u8, BLCKSZ) });
        }
        let mut b = self.bufs.borrow_mut();
        if i >= b.len() {
            return Err(FormatError::Corrupt("column block past the column part"));
        }
        if b[i].is_none() {
            let blk = self.first + self.g.column_block(i) as u32;
            let buf = unsafe { Buf::read_with(self.rel, blk, Lock::Share, self.strategy) };
            // Raised here, naming this block (the caller knows only the part).
            let checked = pg_hybrid_core::hasis::layout::BlockTrailer::check(unsafe { bytes(buf.page()) }, pg_hybrid_core::hasis::layout::BlockKind::Column, self.g.column_block(i), Some(self.version));
            check(self.rel, blk, checked);
            b[i] = Some(buf);
        }
        // The buffer stays pinned and locked until `self` is dropped, and
        // an entry is never replaced, so the page outlives the borrow.
        let page = unsafe { b[i].as_ref().unwrap().page() };
        Ok(unsafe { std::slice::from_raw_parts(page as *const u8, BLCKSZ) })
    }
}

/// Column rows' values this backend decoded lately (every column the row
/// stores, in the row format), under the `PartKey` they were read under.
/// An UPDATE reads its row three times (the index fetch, the executor's
/// `tuple_fetch_row_version`, the update's own look), and a column row's
/// values cost a block per column's mini-page each time. The values of a
/// column row never change while its part's key holds (only compaction
/// writes a column part; stamps change row headers only, and the row
/// header, with the MVCC fields, is always read afresh).
const RECENT_ROWS: usize = 8;

/// A column row of one part, storing `natts` columns.
#[derive(Clone, Copy, PartialEq, Eq)]
struct RowKey {
    part: PartKey,
    row: u16,
    natts: u16,
}

impl RowKey {
    fn of(cols: &LazyColumns, row: u16, natts: u16) -> Option<RowKey> {
        Some(RowKey { part: PartKey::of(cols.rel, cols.first, cols.version)?, row, natts })
    }
}

thread_local! {
    static RECENT: std::cell::RefCell<std::collections::VecDeque<(RowKey, Vec<u8>)>> = Default::default();
}

/// The kept values of the row `key` names, if this backend decoded them.
fn recent_values(key: Option<RowKey>) -> Option<Vec<u8>> {
    let key = key?;
    RECENT.with(|r| r.borrow().iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()))
}

/// Every value of column row `row`, which stores `natts` columns, from
/// this backend's recent rows or decoded (and kept).
fn full_values(rel: pg_sys::Relation, blk: u32, cols: &LazyColumns, part: &ColumnPart, row: u16, natts: u16) -> Vec<u8> {
    let key = RowKey::of(cols, row, natts);
    if let Some(v) = recent_values(key) {
        return v;
    }
    let mut out = Vec::new();
    check(rel, blk, part.values_payload_of(row as usize, natts as usize, None, &mut out));
    if let Some(key) = key {
        RECENT.with(|r| {
            let mut r = r.borrow_mut();
            if r.len() >= RECENT_ROWS {
                r.pop_back();
            }
            r.push_front((key, out.clone()));
        });
    }
    out
}

/// A column row's payload in the row format (what delta items hold), so
/// every reader handles one representation.
fn column_payload(rel: pg_sys::Relation, blk: u32, part: &ColumnPart, r: usize) -> (RowHeader, Vec<u8>) {
    let mut out = Vec::new();
    let header = check(rel, blk, part.row_payload(r, &mut out));
    (header, out)
}

/// Where a located version's payload is.
enum Payload {
    /// Bytes `start..end` of the locked delta block.
    InPage { start: usize, end: usize },
    /// Decoded from the column part.
    Owned(Vec<u8>),
    /// A column row's values, decoded on first use. A HOT chain walk checks
    /// every member's visibility but needs the values of one member only;
    /// reading a column row's values pins one block per column's
    /// mini-page, its header needs the meta block and one more.
    Column(LazyRow),
}

/// What decoding a column row later needs: the blocks its header's read
/// left locked (the header's own block, lent to the `Located`, and the
/// meta block where the layout had to be read) and the layout. Valid while the extent's
/// header block stays share-locked (the `Located` or the `ExtentRead`
/// holding it): no compaction can rewrite the column part meanwhile, and
/// values never change in place, so the layout need not be checked again.
struct LazyRow {
    rel: pg_sys::Relation,
    /// The column part's first block (names the part in errors).
    cblk: u32,
    cols: LazyColumns,
    layout: std::sync::Arc<ColumnLayout>,
    row: u16,
    /// How many columns the row stores (its header's natts).
    natts: u16,
    decoded: std::cell::OnceCell<Vec<u8>>,
}

impl LazyRow {
    fn values(&self) -> &[u8] {
        self.decoded.get_or_init(|| {
            let part = ColumnPart::lazy_with_layout(&self.cols, &self.layout);
            full_values(self.rel, self.cblk, &self.cols, &part, self.row, self.natts)
        })
    }
    /// The wanted columns' values, the others NULL, or every value where
    /// this backend has just decoded the row (not cached: a fetch decodes
    /// its row once).
    fn values_of(&self, wanted: &[bool]) -> Vec<u8> {
        if let Some(v) = recent_values(RowKey::of(&self.cols, self.row, self.natts)) {
            return v;
        }
        let part = ColumnPart::lazy_with_layout(&self.cols, &self.layout);
        let mut out = Vec::new();
        check(self.rel, self.cblk, part.values_payload_of(self.row as usize, self.natts as usize, Some(wanted), &mut out));
        out
    }
}

/// One row version found by TID, its blocks locked.
pub struct Located {
    /// The extent's header block, share-locked: no compaction can move the
    /// version while this is held. None when an `ExtentRead` holds it.
    _header: Option<Buf>,
    /// The block holding the version's MVCC fields (share or exclusive):
    /// a delta block, or the column block with its row header.
    pub buf: Buf,
    /// `buf`'s block number.
    block: u32,
    pub tid: Tid,
    /// Byte offset of the 22 MVCC bytes in `buf`'s page.
    mvcc_at: usize,
    payload: Payload,
    pub header: RowHeader,
}

/// A locked delta block a chain walk keeps for its next member
/// (`ExtentRead::version_reusing`).
pub struct SpareBlock {
    block: u32,
    lock: Lock,
    buf: Buf,
}

/// What a TID names.
pub enum Lookup {
    /// Nothing: no such extent or slot, a slot never used or made unused
    /// by VACUUM, or a HOT chain's redirect (no version of its own).
    Missing,
    /// A slot whose version compaction removed (dead to every snapshot).
    Dead,
    Found(Located),
}

impl Located {
    /// The locked delta block of a delta version, for the next member of
    /// its chain (`ExtentRead::version_reusing`); None for a column row
    /// (whose blocks go) and where `Located` holds the header block.
    pub fn into_spare(self, lock: Lock) -> Option<SpareBlock> {
        match (&self.payload, &self._header) {
            (Payload::InPage { .. }, None) => Some(SpareBlock { block: self.block, lock, buf: self.buf }),
            _ => None,
        }
    }

    pub unsafe fn payload(&self) -> &[u8] {
        match &self.payload {
            Payload::InPage { start, end } => &bytes(self.buf.page())[*start..*end],
            Payload::Owned(v) => v,
            Payload::Column(lazy) => lazy.values(),
        }
    }
    /// The payload with at least the columns `wanted` names (see
    /// `ColumnPart::row_payload_of`): a column row not yet decoded reads
    /// only their mini-pages and leaves the others NULL; a delta version
    /// (one block either way) comes whole. `None`: every column.
    pub unsafe fn payload_of(&self, wanted: Option<&[bool]>) -> std::borrow::Cow<'_, [u8]> {
        match (&self.payload, wanted) {
            (Payload::Column(lazy), Some(w)) if lazy.decoded.get().is_none() => std::borrow::Cow::Owned(lazy.values_of(w)),
            _ => std::borrow::Cow::Borrowed(self.payload()),
        }
    }
    /// Writes hint bits found by a visibility check back into the page
    /// (no WAL, as heap's hint bits; the check already marked the buffer
    /// dirty as a hint).
    pub unsafe fn set_hint(&self, infomask: u16) {
        set_hint(self.buf.page(), self.mvcc_at, infomask);
    }
    /// Overwrites the version's MVCC fields, WAL-logged. The buffer must be
    /// exclusively locked.
    pub unsafe fn stamp(&mut self, rel: pg_sys::Relation, m: &Mvcc) {
        // `locate` cleared the all-visible flag before it locked a column
        // row exclusively, and the header share lock held since keeps
        // compaction and VACUUM from setting it again.
        if let (Some(hb), Payload::Column(_) | Payload::Owned(_)) = (&self._header, &self.payload) {
            if header::stored_geometry(bytes(hb.page())).and_then(|g| ExtentHeader::read(bytes(hb.page()), &g)).is_ok_and(|h| h.all_visible) {
                pgrx::error!("hasis: a column row of an all-visible column part was about to change (block {})", self.tid.block);
            }
        }
        pg_sys::CritSectionCount += 1;
        super::wal::apply_stamp(self.buf.page(), self.mvcc_at, m);
        pg_sys::MarkBufferDirty(self.buf.buffer());
        super::wal::log_stamp(rel, self.buf.buffer(), self.mvcc_at as u16, m);
        pg_sys::CritSectionCount -= 1;
        self.header.mvcc = *m;
    }
}

/// Clears the all-visible flag of the extent at `first`, whose header block
/// the caller holds exclusively in `hbuf`, before a column row's MVCC
/// fields change (a no-op when it is clear), with the map-visible flag and
/// the visibility-map bits when they are set (`vm.rs`). Logged on its own,
/// ahead of the change: a crash between the two leaves the flag clear,
/// which is always safe.
pub unsafe fn clear_all_visible(rel: pg_sys::Relation, g: &Geometry, first: u32, hbuf: &Buf) {
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), g));
    if !h.all_visible {
        return;
    }
    if h.map_visible {
        clear_map(rel, g, first, hbuf, super::wal::VisibleOp::ClearAllAndMap);
        return;
    }
    pg_sys::CritSectionCount += 1;
    check(rel, first, super::wal::apply_visible(g, hbuf.page(), super::wal::VisibleOp::ClearAll));
    pg_sys::MarkBufferDirty(hbuf.buffer());
    super::wal::log_visible(rel, hbuf.buffer(), super::wal::VisibleOp::ClearAll, pg_sys::InvalidTransactionId, 0, None);
    pg_sys::CritSectionCount -= 1;
}

/// Clears the map-visible flag and the visibility-map bits of the extent
/// at `first` (header block held exclusively in `hbuf`) before a version is
/// added to it or changed, or it is compacted; a no-op when the flag is
/// clear. The all-visible flag stays.
pub unsafe fn clear_map_visible(rel: pg_sys::Relation, g: &Geometry, first: u32, hbuf: &Buf) {
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), g));
    if h.map_visible {
        clear_map(rel, g, first, hbuf, super::wal::VisibleOp::ClearMap);
    }
}

unsafe fn clear_map(rel: pg_sys::Relation, g: &Geometry, first: u32, hbuf: &Buf, op: super::wal::VisibleOp) {
    let blocks = super::vm::tid_blocks(g, first);
    let pins = super::vm::MapPins::pin(rel, &blocks);
    pg_sys::CritSectionCount += 1;
    check(rel, first, super::wal::apply_visible(g, hbuf.page(), op));
    pg_sys::MarkBufferDirty(hbuf.buffer());
    super::vm::clear_bits(rel, &pins, &blocks);
    super::wal::log_visible(rel, hbuf.buffer(), op, pg_sys::InvalidTransactionId, g.tid_blocks() as u16, None);
    pg_sys::CritSectionCount -= 1;
}

/// Sets the all-visible flag of the extent at `first` (header block held
/// exclusively in `hbuf`); `cutoff` is the newest xmin among its column
/// rows (a hot standby's conflict horizon).
pub unsafe fn set_all_visible(rel: pg_sys::Relation, g: &Geometry, first: u32, hbuf: &Buf, cutoff: pg_sys::TransactionId) {
    pg_sys::CritSectionCount += 1;
    check(rel, first, super::wal::apply_visible(g, hbuf.page(), super::wal::VisibleOp::SetAll));
    pg_sys::MarkBufferDirty(hbuf.buffer());
    super::wal::log_visible(rel, hbuf.buffer(), super::wal::VisibleOp::SetAll, cutoff, 0, None);
    pg_sys::CritSectionCount -= 1;
}

/// VACUUM: sets the map-visible flag and the visibility-map bits of the
/// extent at `first` (header block held exclusively in `hbuf`) if every
/// version in it is a column row visible to every snapshot: all-visible,
/// no delta part, no dead slot (`dead_slots` empty: their index entries
/// are still there). Returns whether the bits are set now.
pub unsafe fn set_map_visible(rel: pg_sys::Relation, g: &Geometry, first: u32, hbuf: &Buf, no_dead_slots: bool) -> bool {
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), g));
    if h.map_visible {
        return true;
    }
    if !h.all_visible || h.delta_used != 0 || !no_dead_slots {
        return false;
    }
    let blocks = super::vm::tid_blocks(g, first);
    let pins = super::vm::MapPins::pin(rel, &blocks);
    for b in pins.buffers() {
        pg_sys::LockBuffer(b, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
    }
    pg_sys::CritSectionCount += 1;
    check(rel, first, super::wal::apply_visible(g, hbuf.page(), super::wal::VisibleOp::SetMap));
    pg_sys::MarkBufferDirty(hbuf.buffer());
    for b in pins.buffers() {
        let page = pg_sys::BufferGetPage(b);
        super::vm::set_bits(page, pg_sys::BufferGetBlockNumber(b), &blocks);
        pg_sys::MarkBufferDirty(b);
    }
    // The conflict horizon was the all-visible flag's record (vm.rs).
    super::wal::log_visible(rel, hbuf.buffer(), super::wal::VisibleOp::SetMap, pg_sys::InvalidTransactionId, g.tid_blocks() as u16, Some(&pins));
    pg_sys::CritSectionCount -= 1;
    for b in pins.buffers() {
        pg_sys::LockBuffer(b, pg_sys::BUFFER_LOCK_UNLOCK as i32);
    }
    true
}

/// The slot of each column row, in row order, from the directory (the
/// header block, held by the caller, and the directory blocks): an
/// all-visible part's rows are scanned without their row headers.
pub unsafe fn column_slots(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, hpage: pg_sys::Page, strategy: pg_sys::BufferAccessStrategy) -> Vec<u16> {
    let mut slots = vec![u16::MAX; h.column_rows as usize];
    let mut found = 0;
    let mut dir: Option<(usize, Buf)> = None;
    // Column rows are in slot order, so the last one's entry ends the
    // search: the slots above it (the rest of the high-water mark that
    // HOT updates raised) hold no column row. A part of 100 rows updated
    // under TPC-B had 4000 slots below its mark, and a column scan spent
    // most of its time reading their entries.
    for slot in 0..h.slot_hwm {
        if found == slots.len() {
            break;
        }
        let (bi, _) = g.directory_entry(slot);
        let entry = if bi == 0 {
            check(rel, first, header::read_entry(bytes(hpage), g, slot))
        } else {
            if dir.as_ref().is_none_or(|(i, _)| *i != bi) {
                drop(dir.take());
                dir = Some((bi, Buf::read_with(rel, first + bi as u32, Lock::Share, strategy)));
            }
            let d = &dir.as_ref().unwrap().1;
            check(rel, first + bi as u32, header::read_entry(bytes(d.page()), g, slot))
        };
        if let DirEntry::Column { row } = entry {
            match slots.get_mut(row as usize) {
                Some(s) if *s == u16::MAX => {
                    *s = slot;
                    found += 1;
                }
                _ => format_error(rel, first, FormatError::Corrupt("directory names a column row twice or beyond the part")),
            }
        }
    }
    if slots.contains(&u16::MAX) || !slots.is_sorted() {
        format_error(rel, first, FormatError::Corrupt("column rows are not the directory's column entries in slot order"));
    }
    slots
}

pub unsafe fn set_hint(page: pg_sys::Page, mvcc_at: usize, infomask: u16) {
    let at = mvcc_at + INFOMASK_IN_MVCC;
    bytes(page)[at..at + 2].copy_from_slice(&infomask.to_le_bytes());
}

/// An extent whose header block is share-locked for several lookups: no
/// compaction can run until it is dropped, so a HOT chain walk sees one
/// page version from its root to its end (heap holds the buffer lock for
/// the same reason).
pub struct ExtentRead {
    rel: pg_sys::Relation,
    pub g: Geometry,
    pub first: u32,
    hbuf: Buf,
    pub h: ExtentHeader,
}

impl ExtentRead {
    /// The extent holding `tid`'s block, if the metapage knows it.
    pub unsafe fn of(rel: pg_sys::Relation, meta: &Meta, tid: Tid) -> Option<ExtentRead> {
        let k = meta.extent_of(tid.block)?;
        let g = meta.geometry;
        let first = meta.extent_first(k);
        let hbuf = Buf::read(rel, first, Lock::Share);
        let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
        Some(ExtentRead { rel, g, first, hbuf, h })
    }

    pub fn rel(&self) -> pg_sys::Relation {
        self.rel
    }

    /// The slot a TID names in this extent (None: not a valid slot).
    pub fn slot(&self, tid: Tid) -> Option<u16> {
        self.g.slot(self.first, tid).ok()
    }

    /// The TID of a slot of this extent.
    pub fn tid(&self, slot: u16) -> Tid {
        check(self.rel, self.first, self.g.tid(self.first, slot))
    }

    /// The directory entry of `slot` (Unused above the high-water mark).
    pub unsafe fn entry(&self, slot: u16) -> DirEntry {
        if slot >= self.h.slot_hwm {
            return DirEntry::Unused;
        }
        let (bi, _) = self.g.directory_entry(slot);
        if bi == 0 {
            check(self.rel, self.first, header::read_entry(bytes(self.hbuf.page()), &self.g, slot))
        } else {
            let d = Buf::read(self.rel, self.first + bi as u32, Lock::Share);
            check(self.rel, self.first + bi as u32, header::read_entry(bytes(d.page()), &self.g, slot))
        }
    }

    /// The values of column row `row` of this all-visible part in the row
    /// format, only the columns `wanted` names (None: all), read without
    /// its row header: the part's flag says the row is visible to every
    /// snapshot and stores every column of the part. Returns (natts,
    /// payload). The header share lock held keeps the part as it is.
    pub unsafe fn all_visible_values(&self, row: u16, wanted: Option<&[bool]>) -> (u16, Vec<u8>) {
        let (rel, g, first, h) = (self.rel, self.g, self.first, &self.h);
        debug_assert!(h.all_visible);
        let cblk = first + g.column_block(0) as u32;
        let cols = LazyColumns::new(rel, &g, first, h, std::ptr::null_mut());
        let part = parse_columns(rel, &g, first, h, &cols);
        let natts = part.ncols() as u16;
        if let Some(v) = recent_values(RowKey::of(&cols, row, natts)) {
            return (natts, v);
        }
        let mut out = Vec::new();
        check(rel, cblk, part.values_payload_of(row as usize, natts as usize, wanted, &mut out));
        (natts, out)
    }

    /// The version at `slot` (whose entry is `entry`), its block locked
    /// with `lock`; None for a slot without a version.
    pub unsafe fn version(&self, slot: u16, entry: DirEntry, lock: Lock) -> Option<Located> {
        self.version_reusing(slot, entry, lock, &mut None)
    }

    /// `version`, taking a delta version's block from `spare` when that is
    /// the block already locked in the mode asked for (`Located::into_spare`
    /// of the member visited before): a HOT chain's members were appended
    /// one after another, mostly into the same delta block, and pinning
    /// and locking it again for each cost a chain walk half its time.
    pub unsafe fn version_reusing(&self, slot: u16, entry: DirEntry, lock: Lock, spare: &mut Option<SpareBlock>) -> Option<Located> {
        let (rel, g, first, h) = (self.rel, self.g, self.first, &self.h);
        let tid = self.tid(slot);
        match entry {
            DirEntry::Unused | DirEntry::Dead | DirEntry::Redirect { .. } => None,
            DirEntry::Column { row } => {
                let cblk = first + g.column_block(0) as u32;
                let cols = LazyColumns::new(rel, &g, first, h, std::ptr::null_mut());
                let (layout, hb, off, header, values) = {
                    let part = parse_columns(rel, &g, first, h, &cols);
                    let (hb, off) = check(rel, cblk, part.header_location(row as usize));
                    // A share-locked result decodes its values when asked,
                    // with the blocks read so far; an exclusive one now,
                    // before its header's block is locked exclusively (a
                    // later share lock would wait on it).
                    let (header, values) = if lock == Lock::Share {
                        (check(rel, cblk, part.row_header(row as usize)), None)
                    } else {
                        let header = check(rel, cblk, part.row_header(row as usize));
                        let values = full_values(rel, cblk, &cols, &part, row, header.natts);
                        (header, Some(values))
                    };
                    (part.layout().clone(), hb, off, header, values)
                };
                if header.slot != slot {
                    format_error(rel, cblk, FormatError::Corrupt("column row does not carry its slot"));
                }
                // The header is read again under the lock the result keeps,
                // before the layout moves into the lazy row.
                let reread = |buf: &Buf| check(rel, cblk, layout.decode_header(&bytes(buf.page())[off..off + ROW_HEADER], row as usize, Some(first)));
                let (buf, header, payload) = match values {
                    // Reading the row header share-locked its block: the
                    // result holds that lock, the other blocks read stay
                    // with the lazy row.
                    None => {
                        let buf = cols.lend(hb).unwrap_or_else(|| Buf::read(rel, first + g.column_block(hb) as u32, lock));
                        let header = reread(&buf);
                        (buf, header, Payload::Column(LazyRow { rel, cblk, cols, layout, row, natts: header.natts, decoded: std::cell::OnceCell::new() }))
                    }
                    // The header share lock keeps the layout; the row
                    // header's own block is locked again in the mode asked for.
                    Some(values) => {
                        drop(cols);
                        let buf = Buf::read(rel, first + g.column_block(hb) as u32, lock);
                        let header = reread(&buf);
                        (buf, header, Payload::Owned(values))
                    }
                };
                Some(Located { _header: None, buf, block: first + g.column_block(hb) as u32, tid, mvcc_at: off + MVCC_OFF, payload, header })
            }
            DirEntry::Delta { block, offset } => {
                let blk = first + g.delta_block(block as usize) as u32;
                let buf = match spare.take() {
                    Some(b) if b.block == blk && b.lock == lock => b.buf,
                    other => {
                        drop(other);
                        Buf::read(rel, blk, lock)
                    }
                };
                let view = check(rel, blk, DeltaView::open(bytes(buf.page()), &g, block as usize, Some(h.version)));
                let it = check(rel, blk, view.item(offset));
                if it.header.slot != slot {
                    format_error(rel, blk, FormatError::Corrupt("delta item does not carry its slot"));
                }
                let (header, len) = (it.header, it.bytes.len());
                let start = offset as usize + ITEM_HDR;
                let payload = Payload::InPage { start, end: offset as usize + len };
                Some(Located { _header: None, buf, block: blk, tid, mvcc_at: offset as usize + 2 + MVCC_OFF, payload, header })
            }
        }
    }
}

/// Finds the version a TID names and locks its block with `lock`. The
/// TID's own slot only: HOT chains are walked by index fetches.
///
/// An exclusive lock is taken to change the version's MVCC fields: a
/// column row's extent first loses its all-visible flag (the header
/// block is locked exclusively for that, so this starts over).
pub unsafe fn locate(rel: pg_sys::Relation, meta: &Meta, tid: Tid, lock: Lock) -> Lookup {
    let (ext, slot, entry) = loop {
        let Some(ext) = ExtentRead::of(rel, meta, tid) else { return Lookup::Missing };
        let Some(slot) = ext.slot(tid) else { return Lookup::Missing };
        let entry = ext.entry(slot);
        if lock == Lock::Exclusive && ext.h.all_visible && matches!(entry, DirEntry::Column { .. }) {
            let (g, first) = (ext.g, ext.first);
            drop(ext);
            let hbuf = Buf::read(rel, first, Lock::Exclusive);
            clear_all_visible(rel, &g, first, &hbuf);
            continue;
        }
        break (ext, slot, entry);
    };
    match entry {
        DirEntry::Unused | DirEntry::Redirect { .. } => Lookup::Missing,
        DirEntry::Dead => Lookup::Dead,
        _ => match ext.version(slot, entry, lock) {
            Some(mut loc) => {
                loc._header = Some(ext.hbuf);
                Lookup::Found(loc)
            }
            None => Lookup::Missing,
        },
    }
}

/// One version met by `visit_extent`.
pub struct Visited<'a> {
    pub tid: Tid,
    pub header: RowHeader,
    pub payload: &'a [u8],
    /// The share-locked buffer holding the version's MVCC fields (for
    /// visibility hints).
    pub buffer: pg_sys::Buffer,
    page: pg_sys::Page,
    mvcc_at: usize,
}

impl Visited<'_> {
    pub unsafe fn set_hint(&self, infomask: u16) {
        set_hint(self.page, self.mvcc_at, infomask);
    }
}

/// Which versions of an extent a visit reads.
#[derive(Clone, Copy, Debug)]
pub enum Select {
    /// Every version (sequential scans).
    All,
    /// The versions whose TIDs lie in one block (bitmap and ANALYZE
    /// scans): found through the directory, so only the blocks that hold
    /// them are read.
    TidBlock(u32),
}

/// Calls `f` for the selected versions of extent `k`, holding the header
/// block's share lock throughout, the column blocks' share locks while the
/// column rows are visited, and each delta block's share lock while its
/// versions are visited. Column rows come first (in slot order), then the
/// delta part (`All`: in append order; `TidBlock`: in slot order per block).
pub unsafe fn visit_extent(rel: pg_sys::Relation, meta: &Meta, k: u32, select: Select, strategy: pg_sys::BufferAccessStrategy, f: &mut dyn FnMut(&Visited)) {
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let hbuf = Buf::read_with(rel, first, Lock::Share, strategy);
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
    // Per delta block, the item offsets to visit (None: all of them); the
    // column rows to visit (None: all of them).
    let mut wanted: Vec<Option<Vec<u16>>> = vec![None; h.delta_used as usize];
    let mut wanted_rows: Option<Vec<u16>> = None;
    if let Select::TidBlock(blk) = select {
        wanted = vec![Some(Vec::new()); h.delta_used as usize];
        let mut rows = Vec::new();
        let per = pg_hybrid_core::hasis::layout::MAX_OFFSET as u32;
        let lo = (blk.saturating_sub(first) * per).min(h.slot_hwm as u32) as u16;
        let hi = ((blk + 1).saturating_sub(first) * per).min(h.slot_hwm as u32) as u16;
        let mut dir = DirectoryReader::new(rel, &g, first, &hbuf, strategy);
        for s in lo..hi {
            match dir.entry(s) {
                DirEntry::Delta { block, offset } if (block as u16) < h.delta_used => {
                    wanted[block as usize].as_mut().unwrap().push(offset);
                }
                DirEntry::Delta { .. } => format_error(rel, first, FormatError::Corrupt("directory entry names a delta block not in use")),
                DirEntry::Column { row } => rows.push(row),
                DirEntry::Unused | DirEntry::Dead | DirEntry::Redirect { .. } => {}
            }
        }
        wanted_rows = Some(rows);
    }
    if h.column_rows > 0 && wanted_rows.as_ref().is_none_or(|r| !r.is_empty()) {
        let cblk = first + g.column_block(0) as u32;
        match &wanted_rows {
            // Every row: lock the whole column part at once, in order.
            None => {
                let cols = ColumnBlocks::lock(rel, &g, first, &h, strategy);
                let part = cols.part(rel, &g, first, &h);
                let mut payload = Vec::new();
                for r in 0..h.column_rows as usize {
                    payload.clear();
                    let header = check(rel, cblk, part.row_payload(r, &mut payload));
                    let (hb, off) = check(rel, cblk, part.header_location(r));
                    let (buffer, page) = cols.buffer(hb);
                    let tid = check(rel, cblk, g.tid(first, header.slot));
                    f(&Visited { tid, header, payload: &payload, buffer, page, mvcc_at: off + MVCC_OFF });
                }
            }
            // Some rows: only the blocks they need.
            Some(rows) => {
                let cols = LazyColumns::new(rel, &g, first, &h, strategy);
                let part = parse_columns(rel, &g, first, &h, &cols);
                for &r in rows {
                    let (header, payload) = column_payload(rel, cblk, &part, r as usize);
                    let (hb, off) = check(rel, cblk, part.header_location(r as usize));
                    check(rel, cblk, pg_hybrid_core::hasis::column::BlockSource::block(&cols, hb));
                    let (buffer, page) = cols.buffer(hb);
                    let tid = check(rel, cblk, g.tid(first, header.slot));
                    f(&Visited { tid, header, payload: &payload, buffer, page, mvcc_at: off + MVCC_OFF });
                }
            }
        }
    }
    visit_delta(rel, &g, first, &h, &wanted, strategy, f);
}

/// Calls `f` for the versions of extent `first`'s delta part, each delta
/// block share-locked while its versions are visited: per block in use,
/// `wanted` lists the item offsets to visit (None: all, in append order).
/// The caller holds the header block (whose header is `h`) share-locked.
unsafe fn visit_delta(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, wanted: &[Option<Vec<u16>>], strategy: pg_sys::BufferAccessStrategy, f: &mut dyn FnMut(&Visited)) {
    for (i, want) in wanted.iter().enumerate() {
        if matches!(want, Some(v) if v.is_empty()) {
            continue;
        }
        let blk = first + g.delta_block(i) as u32;
        let buf = Buf::read_with(rel, blk, Lock::Share, strategy);
        let page = buf.page();
        let view = check(rel, blk, DeltaView::open(bytes(page), &g, i, Some(h.version)));
        let mut visit = |it: pg_hybrid_core::hasis::delta::DeltaItem| {
            let tid = check(rel, blk, g.tid(first, it.header.slot));
            let v = Visited { tid, header: it.header, payload: &it.bytes[ITEM_HDR..], buffer: buf.buffer(), page, mvcc_at: it.offset as usize + 2 + MVCC_OFF };
            f(&v);
        };
        match want {
            None => {
                for it in view.items() {
                    visit(check(rel, blk, it));
                }
            }
            Some(offsets) => {
                for &o in offsets {
                    visit(check(rel, blk, view.item(o)));
                }
            }
        }
    }
}

/// A scan that needs only some columns (the column scan, src/hasis/colscan)
/// reads an extent through this.
pub trait ColumnVisitor {
    /// Whether to read the column part's rows at all (its min/max may show
    /// that none can match the scan's quals).
    fn keep_part(&mut self, part: &ColumnPart) -> bool;
    /// Each column row's header, in row order (the visitor decides
    /// visibility; the row header's buffer is share-locked for hints).
    fn column_row(&mut self, row: usize, v: &Visited);
    /// Instead of `column_row` for every row of an all-visible part: the
    /// row is visible to the visitor's snapshot, whatever it is.
    fn visible_column_row(&mut self, row: usize, tid: Tid, natts: u16);
    /// Once per kept part, after `column_row` saw every row: read the
    /// columns needed of the rows it returned.
    fn column_values(&mut self, part: &ColumnPart);
    /// Each version of the delta part, in append order.
    fn delta_row(&mut self, v: &Visited);
}

/// What a column visit of one extent read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ColumnVisit {
    /// Column blocks read (of the part's blocks in use).
    pub column_blocks_read: u32,
    /// The part had rows and `keep_part` turned it down.
    pub part_skipped: bool,
    /// The part was read without its row headers (all visible).
    pub all_visible: bool,
}

/// Visits extent `k` for `visitor`: the column part through blocks read on
/// first use (the meta mini-page, the row headers, then what
/// `column_values` asks for, each block share-locked until the part is
/// done), then the delta part as `visit_extent` does; the header block is
/// share-locked throughout, so no compaction runs meanwhile.
pub unsafe fn visit_extent_columns(rel: pg_sys::Relation, meta: &Meta, k: u32, strategy: pg_sys::BufferAccessStrategy, visitor: &mut dyn ColumnVisitor) -> ColumnVisit {
    let g = meta.geometry;
    let first = meta.extent_first(k);
    let hbuf = Buf::read_with(rel, first, Lock::Share, strategy);
    let h = check(rel, first, ExtentHeader::read(bytes(hbuf.page()), &g));
    let mut out = ColumnVisit::default();
    if h.column_rows > 0 {
        let cblk = first + g.column_block(0) as u32;
        let cols = LazyColumns::new(rel, &g, first, &h, strategy);
        let part = parse_columns(rel, &g, first, &h, &cols);
        if visitor.keep_part(&part) {
            if h.all_visible {
                // Every row is visible to every snapshot and stores every
                // column of the part: no row header is read (the header
                // units' blocks are not even touched).
                let slots = column_slots(rel, &g, first, &h, hbuf.page(), strategy);
                let natts = part.ncols() as u16;
                for (r, &slot) in slots.iter().enumerate() {
                    visitor.visible_column_row(r, check(rel, cblk, g.tid(first, slot)), natts);
                }
                out.all_visible = true;
            } else {
                for r in 0..h.column_rows as usize {
                    let header = check(rel, cblk, part.row_header(r));
                    let (hb, off) = check(rel, cblk, part.header_location(r));
                    let (buffer, page) = cols.buffer(hb);
                    let tid = check(rel, cblk, g.tid(first, header.slot));
                    visitor.column_row(r, &Visited { tid, header, payload: &[], buffer, page, mvcc_at: off + MVCC_OFF });
                }
            }
            visitor.column_values(&part);
        } else {
            out.part_skipped = true;
        }
        out.column_blocks_read = cols.blocks_read();
    }
    let all = vec![None; h.delta_used as usize];
    visit_delta(rel, &g, first, &h, &all, strategy, &mut |v| visitor.delta_row(v));
    out
}
