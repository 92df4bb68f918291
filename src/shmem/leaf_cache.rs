//! The shared CLOCK cache of decompressed leaves (`pg_hybrid.leaf_cache`),
//! partitioned by page hash, one LWLock per partition.
//!
//! Entries are keyed by the page's storage identity and its LSN: every
//! change to a WAL-logged page, on the primary or replayed on a standby,
//! gives it a new LSN, so an entry can never be served for content it was
//! not decompressed from. Pages without a meaningful LSN (relations that
//! skip WAL) are not cached. Nothing here is needed after a crash.

use std::sync::atomic::{AtomicU64, Ordering};

use pg_hybrid_core::clock_cache::{CacheKey, ClockCache};
use pgrx::pg_sys;

use super::arena::{lock, LwGuard, CACHE_LOCKS_START};
use crate::guc;

pub const PARTITIONS: usize = 16;

#[repr(C)]
pub struct CacheHeader {
    part_bytes: usize,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub inserts: AtomicU64,
    pub evictions: AtomicU64,
}

static mut CACHE: *mut CacheHeader = std::ptr::null_mut();

fn header_len() -> usize {
    std::mem::size_of::<CacheHeader>().div_ceil(64) * 64
}

fn part_bytes() -> usize {
    let total = guc::LEAF_CACHE_MB.get() as usize * 1024 * 1024;
    (total / PARTITIONS) / 64 * 64
}

pub fn request_size() -> usize {
    header_len() + PARTITIONS * part_bytes()
}

/// shmem_startup_hook part; caller holds AddinShmemInitLock.
pub unsafe fn startup() {
    let mut found = false;
    let h = pg_sys::ShmemInitStruct(c"pg_hybrid leaf cache".as_ptr(), request_size(), &mut found) as *mut CacheHeader;
    if !found {
        h.write(CacheHeader {
            part_bytes: part_bytes(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        });
        for p in 0..PARTITIONS {
            ClockCache::init(part_base(h, p), (*h).part_bytes);
        }
    }
    CACHE = h;
}

unsafe fn part_base(h: *mut CacheHeader, p: usize) -> *mut u8 {
    (h as *mut u8).add(header_len() + p * (*h).part_bytes)
}

fn enabled() -> Option<&'static CacheHeader> {
    unsafe {
        if CACHE.is_null() || (*CACHE).part_bytes < ClockCache::min_region() {
            None
        } else {
            Some(&*CACHE)
        }
    }
}

pub fn stats() -> Option<&'static CacheHeader> {
    unsafe { CACHE.as_ref() }
}

/// The cache key of block `blk` of `rel` as it is now (`page` is pinned
/// and locked), or None when the page must not be cached.
pub unsafe fn key_of(rel: pg_sys::Relation, blk: u32, page: pg_sys::Page) -> Option<CacheKey> {
    enabled()?;
    let lsn = crate::storage::wal::page_lsn(page);
    if lsn == 0 || !crate::storage::wal::relation_needs_wal(rel) {
        return None;
    }
    let node = (*rel).rd_node;
    Some(CacheKey { space: node.spcNode.into(), db: node.dbNode.into(), rel: node.relNode.into(), blk, lsn })
}

fn partition(key: &CacheKey) -> usize {
    (key.page_hash() >> 40) as usize % PARTITIONS
}

/// Runs `f` on the cached body of `key` in place, under the partition's
/// shared lock (so `f` must be short and must not wait on other locks).
pub fn with_cached<R>(key: &CacheKey, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let h = enabled()?;
    let p = partition(key);
    let r = {
        let _g = LwGuard::shared(lock(CACHE_LOCKS_START + p));
        unsafe { ClockCache::attach(part_base(CACHE, p)) }.with_value(key, f)
    };
    if r.is_some() { &h.hits } else { &h.misses }.fetch_add(1, Ordering::Relaxed);
    r
}

/// Caches `body` for `key`; skipped when the partition is busy, since the
/// caller already has the body and a reader should never wait to share it.
pub fn store(key: &CacheKey, body: &[u8]) {
    let Some(h) = enabled() else { return };
    let p = partition(key);
    let evicted = {
        let Some(_g) = LwGuard::try_exclusive(lock(CACHE_LOCKS_START + p)) else { return };
        unsafe { ClockCache::attach(part_base(CACHE, p)) }.insert(key, body)
    };
    if let Some(n) = evicted {
        h.inserts.fetch_add(1, Ordering::Relaxed);
        h.evictions.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// (capacity bytes, used bytes, entries) summed over the partitions.
pub fn usage() -> (u64, u64, u64) {
    let Some(_) = enabled() else { return (0, 0, 0) };
    let mut t = (0, 0, 0);
    for p in 0..PARTITIONS {
        let _g = LwGuard::shared(lock(CACHE_LOCKS_START + p));
        let c = unsafe { ClockCache::attach(part_base(CACHE, p)) };
        t.0 += c.capacity_bytes() as u64;
        t.1 += c.used_bytes() as u64;
        t.2 += c.entries() as u64;
    }
    t
}

#[pgrx::pg_extern(sql = "
CREATE FUNCTION pg_hybrid.leaf_cache_stats() RETURNS TABLE (
    capacity_bytes bigint, used_bytes bigint, entries bigint,
    hits bigint, misses bigint, inserts bigint, evictions bigint)
    LANGUAGE c STRICT VOLATILE AS 'MODULE_PATHNAME', 'leaf_cache_stats_wrapper';
COMMENT ON FUNCTION pg_hybrid.leaf_cache_stats() IS 'size and counters of the shared cache of decompressed LZ4 leaves (pg_hybrid.leaf_cache)';
")]
fn leaf_cache_stats() -> pgrx::iter::TableIterator<
    'static,
    (
        pgrx::name!(capacity_bytes, i64),
        pgrx::name!(used_bytes, i64),
        pgrx::name!(entries, i64),
        pgrx::name!(hits, i64),
        pgrx::name!(misses, i64),
        pgrx::name!(inserts, i64),
        pgrx::name!(evictions, i64),
    ),
> {
    crate::require_preload();
    let (cap, used, n) = usage();
    let c = |a: Option<&AtomicU64>| a.map_or(0, |a| a.load(Ordering::Relaxed)) as i64;
    let s = stats();
    pgrx::iter::TableIterator::once((
        cap as i64,
        used as i64,
        n as i64,
        c(s.map(|s| &s.hits)),
        c(s.map(|s| &s.misses)),
        c(s.map(|s| &s.inserts)),
        c(s.map(|s| &s.evictions)),
    ))
}
