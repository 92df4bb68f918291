//! The metapage (block 0) of a hybrid_btree index.

use pgrx::pg_sys;

use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind, NO_BLOCK};
use crate::storage::wal::WalRecord;

pub const META_BLOCK: u32 = 0;
/// "HYBM"
pub const META_MAGIC: u32 = 0x4859_424d;
pub const META_VERSION: u32 = 1;

/// Where the static stage is and what it holds; mirrored in shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StaticInfo {
    pub generation: u32,
    /// hybrid_btree: the static stage's root. elastic_btree: the block of
    /// the tree's own metapage (src/elastic/README.md).
    pub root: u32,
    pub height: u32,
    /// hybrid_btree: the first static leaf. elastic_btree: the tree's root
    /// as of the last merge or VACUUM, where readers start (a root that has
    /// split since still works: descents move right from it).
    pub first_leaf: u32,
    pub last_leaf: u32,
    /// 1 when leaves are LZ4-compressed.
    pub compressed: u32,
    pub keys: u64,
    pub tids: u64,
    pub pages: u64,
    pub body_bytes: u64,
    /// Delta-log positions below this are in the static stage.
    pub merged_upto: u64,
    /// Bumped by every VACUUM that removed entries; standbys resync on change.
    pub vacuum_epoch: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HybridMeta {
    pub magic: u32,
    pub version: u32,
    pub stat: StaticInfo,
    pub next_generation: u32,
    pub delta_head: u32,
    pub delta_tail: u32,
    pub delta_pages: u32,
    pub recycle_head: u32,
    pub _pad: u32,
    pub recycle_safexid: u64,
    pub merges: u64,
    pub last_merge_us: u64,
}

impl HybridMeta {
    pub fn new() -> HybridMeta {
        HybridMeta {
            magic: META_MAGIC,
            version: META_VERSION,
            stat: StaticInfo { root: NO_BLOCK, first_leaf: NO_BLOCK, last_leaf: NO_BLOCK, ..Default::default() },
            next_generation: 1,
            delta_head: NO_BLOCK,
            delta_tail: NO_BLOCK,
            delta_pages: 0,
            recycle_head: NO_BLOCK,
            _pad: 0,
            recycle_safexid: 0,
            merges: 0,
            last_merge_us: 0,
        }
    }
}

/// Writes `meta` into a page image (initialising it).
pub unsafe fn write_meta_page(page: pg_sys::Page, meta: &HybridMeta) {
    page::init_page(page, PageKind::Meta, 0, 0);
    store(page, meta);
}

pub unsafe fn store(page: pg_sys::Page, meta: &HybridMeta) {
    let body = page::body_mut(page);
    let n = std::mem::size_of::<HybridMeta>();
    std::ptr::copy_nonoverlapping(meta as *const HybridMeta as *const u8, body.as_mut_ptr(), n);
    page::set_body_len(page, n);
}

/// Reads and validates the metapage from a locked buffer.
pub unsafe fn load(rel: pg_sys::Relation, buf: &Buf) -> HybridMeta {
    let p = buf.page();
    page::check_page(rel, META_BLOCK, p, &[PageKind::Meta]);
    let body = page::body(p);
    if body.len() < std::mem::size_of::<HybridMeta>() {
        page::corrupted(&page::rel_name(rel), META_BLOCK, "metapage too short");
    }
    let m = std::ptr::read_unaligned(body.as_ptr() as *const HybridMeta);
    if m.magic != META_MAGIC {
        page::corrupted(&page::rel_name(rel), META_BLOCK, "metapage magic is not hybrid_btree's; is this a hybrid_btree index?");
    }
    if m.version != META_VERSION {
        crate::raise(pgrx::PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("hybrid_btree index \"{}\" has metapage version {}, expected {META_VERSION}", page::rel_name(rel), m.version), "REINDEX the index.");
    }
    m
}

pub unsafe fn read(rel: pg_sys::Relation) -> HybridMeta {
    let b = Buf::read(rel, META_BLOCK, Lock::Share);
    load(rel, &b)
}

/// Applies `f` to the metapage under an exclusive lock, WAL-logged.
pub unsafe fn update(rel: pg_sys::Relation, f: impl FnOnce(&mut HybridMeta)) -> HybridMeta {
    let b = Buf::read(rel, META_BLOCK, Lock::Exclusive);
    let mut m = load(rel, &b);
    f(&mut m);
    let mut w = WalRecord::start(rel);
    let p = w.register(&b);
    store(p, &m);
    w.finish();
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
