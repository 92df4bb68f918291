//! The metapage (block 0) of every index the engine runs: neutral fields
//! (generation, counts, merge position, delta log, recycle list) and the
//! base structure's roots, which only the access method interprets through
//! a typed view of its own (hybrid's `StageRoots`, elastic's `TreeRoots`).
//! The byte layout is that of metapage version 1 (README.md).

use pgrx::pg_sys;

use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind, NO_BLOCK};
use crate::storage::wal::WalRecord;

pub const META_BLOCK: u32 = 0;
/// "HYBM"
pub const META_MAGIC: u32 = 0x4859_424d;
pub const META_VERSION: u32 = 1;

/// Five words in which a base structure records where it is. The engine
/// never reads them; an AM converts them to and from its own named view.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseRoots {
    pub words: [u32; 5],
}

impl BaseRoots {
    /// No structure yet.
    pub const NONE: BaseRoots = BaseRoots { words: [NO_BLOCK, 0, NO_BLOCK, NO_BLOCK, 0] };
}

impl Default for BaseRoots {
    fn default() -> Self {
        BaseRoots::NONE
    }
}

/// Where the base structure is and what it holds; mirrored in shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BaseInfo {
    /// Bumped by every merge: readers register under it (readers.rs) and
    /// retired pages are freed by it.
    pub generation: u32,
    pub roots: BaseRoots,
    pub keys: u64,
    /// Entries (TIDs).
    pub entries: u64,
    pub pages: u64,
    /// Bytes of the structure's page bodies (0 when it does not count them).
    pub bytes: u64,
    /// Delta-log positions below this are in the base structure.
    pub merged_upto: u64,
    /// Bumped by every VACUUM that removed entries; standbys resync on change.
    pub vacuum_epoch: u64,
}

impl BaseInfo {
    /// The metapage fields a base structure reports after a write.
    pub fn set_shape(&mut self, shape: &super::base::BaseShape) {
        self.roots = shape.roots;
        self.keys = shape.keys;
        self.entries = shape.entries;
        self.pages = shape.pages;
        self.bytes = shape.bytes;
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IndexMeta {
    pub magic: u32,
    pub version: u32,
    pub base: BaseInfo,
    pub next_generation: u32,
    pub delta_head: u32,
    pub delta_tail: u32,
    pub delta_pages: u32,
    pub recycle_head: u32,
    /// Block of the key-range partition map of predicate locking
    /// (predlock.rs); 0 = none yet (block 0 is this page). Version-1
    /// metapages had a zero pad here.
    pub lockmap: u32,
    pub recycle_safexid: u64,
    pub merges: u64,
    pub last_merge_us: u64,
    /// Entries of the index when its partition map was chosen (0 = not
    /// recorded: metapages written before 2026-12-07 end above this
    /// field, and read as zeros here); a map is chosen again when the
    /// index has doubled (predlock.rs `remap_if_due`).
    pub map_entries: u64,
    /// Bumped by every remap; names the map's virtual lock blocks and its
    /// cache entries, since a freed map page may hold a later map.
    pub lockmap_epoch: u32,
    pub reserved: u32,
}

/// Bytes of the metapage before `map_entries` was added: such a page is
/// read with the later fields zero.
const SHORT_META_LEN: usize = std::mem::offset_of!(IndexMeta, map_entries);

impl IndexMeta {
    pub fn new() -> IndexMeta {
        IndexMeta {
            magic: META_MAGIC,
            version: META_VERSION,
            base: BaseInfo::default(),
            next_generation: 1,
            delta_head: NO_BLOCK,
            delta_tail: NO_BLOCK,
            delta_pages: 0,
            recycle_head: NO_BLOCK,
            lockmap: 0,
            recycle_safexid: 0,
            merges: 0,
            last_merge_us: 0,
            map_entries: 0,
            lockmap_epoch: 0,
            reserved: 0,
        }
    }

    /// The partition map, as scans and inserts name it.
    pub fn lock_map(&self) -> super::predlock::LockMapRef {
        super::predlock::LockMapRef { block: self.lockmap, epoch: self.lockmap_epoch }
    }
}

/// Writes `meta` into a page image (initialising it).
pub unsafe fn write_meta_page(page: pg_sys::Page, meta: &IndexMeta) {
    page::init_page(page, PageKind::Meta, 0, 0);
    store(page, meta);
}

pub unsafe fn store(page: pg_sys::Page, meta: &IndexMeta) {
    let body = page::body_mut(page);
    let n = std::mem::size_of::<IndexMeta>();
    std::ptr::copy_nonoverlapping(meta as *const IndexMeta as *const u8, body.as_mut_ptr(), n);
    page::set_body_len(page, n);
}

/// Reads and validates the metapage from a locked buffer.
pub unsafe fn load(rel: pg_sys::Relation, buf: &Buf) -> IndexMeta {
    let p = buf.page();
    page::check_page(rel, META_BLOCK, p, &[PageKind::Meta]);
    let body = page::body(p);
    if body.len() < SHORT_META_LEN {
        page::corrupted(&page::rel_name(rel), META_BLOCK, "metapage too short");
    }
    let mut m = IndexMeta::new();
    let n = body.len().min(std::mem::size_of::<IndexMeta>());
    std::ptr::copy_nonoverlapping(body.as_ptr(), &mut m as *mut IndexMeta as *mut u8, n);
    // A short page leaves the later fields as `new` sets them: zero.
    if m.magic != META_MAGIC {
        page::corrupted(&page::rel_name(rel), META_BLOCK, "metapage magic is not pg_hybrid's; is this an index of pg_hybrid?");
    }
    if m.version != META_VERSION {
        crate::raise(pgrx::PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("index \"{}\" has metapage version {}, expected {META_VERSION}", page::rel_name(rel), m.version), "REINDEX the index.");
    }
    m
}

pub unsafe fn read(rel: pg_sys::Relation) -> IndexMeta {
    let b = Buf::read(rel, META_BLOCK, Lock::Share);
    load(rel, &b)
}

/// Applies `f` to the metapage under an exclusive lock, WAL-logged.
pub unsafe fn update(rel: pg_sys::Relation, f: impl FnOnce(&mut IndexMeta)) -> IndexMeta {
    update_then(rel, f, |_| {})
}

/// `update`, then `after` while the metapage is still locked exclusively
/// (and after its WAL record): for shared state that must change at the
/// same instant for everyone who reads the metapage.
pub unsafe fn update_then(rel: pg_sys::Relation, f: impl FnOnce(&mut IndexMeta), after: impl FnOnce(&IndexMeta)) -> IndexMeta {
    let b = Buf::read(rel, META_BLOCK, Lock::Exclusive);
    let mut m = load(rel, &b);
    f(&mut m);
    let mut w = WalRecord::start(rel);
    let p = w.register(&b);
    store(p, &m);
    w.finish();
    after(&m);
    m
}

/// Heavyweight lock that serialises merges, VACUUM and dynamic-stage
/// rebuilds of one index (a page lock on the metapage, used for nothing else).
pub struct MaintenanceLock {
    rel: pg_sys::Relation,
    mode: i32,
}

impl MaintenanceLock {
    pub unsafe fn exclusive(rel: pg_sys::Relation) -> MaintenanceLock {
        pg_sys::LockPage(rel, META_BLOCK, pg_sys::ExclusiveLock as i32);
        MaintenanceLock { rel, mode: pg_sys::ExclusiveLock as i32 }
    }
    pub unsafe fn share(rel: pg_sys::Relation) -> MaintenanceLock {
        pg_sys::LockPage(rel, META_BLOCK, pg_sys::ShareLock as i32);
        MaintenanceLock { rel, mode: pg_sys::ShareLock as i32 }
    }
}

impl Drop for MaintenanceLock {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            unsafe { pg_sys::UnlockPage(self.rel, META_BLOCK, self.mode) };
        }
    }
}
