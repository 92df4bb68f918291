//! Shared memory request, initialisation and the block pool.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering as AtomicOrdering};

use pg_hybrid_core::dynamic::{BlockPool, DYN_BLOCK_SIZE};
use pgrx::pg_sys;


use super::registry::{payload_ops, slot_stride, IndexSlot};
use crate::guc;

pub const TRANCHE_NAME: &std::ffi::CStr = c"pg_hybrid";
/// Fixed locks at the start of the tranche.
pub const LOCK_REGISTRY: usize = 0;
pub const LOCK_POOL: usize = 1;
/// One lock per partition of the leaf cache.
pub const CACHE_LOCKS_START: usize = 2;
pub const FIXED_LOCKS: usize = CACHE_LOCKS_START + super::leaf_cache::PARTITIONS;
/// Locks that serialise unique checks of equal keys, by key hash.
pub const UNIQUE_STRIPES: usize = 1024;

const SHMEM_MAGIC: u32 = 0x5048_534d; // "PHSM"
const NO_FREE: u32 = u32::MAX;

#[repr(C)]
pub struct ShmemHeader {
    magic: u32,
    pub max_indexes: u32,
    pub nblocks: u32,
    free_head: AtomicU32,
    pub free_blocks: AtomicU32,
    /// When (ms since the epoch) a backend last asked another index to merge
    /// because the arena ran short; rate-limits those requests.
    pub pressure_ms: AtomicU64,
    /// Blocks slots keep for good once taken (caches whose lock-free
    /// readers must never meet a reused block); `take_kept` holds them to
    /// 1/8 of the arena.
    pub kept_blocks: AtomicU32,
    slots_off: usize,
    blocks_off: usize,
}

static mut SHMEM: *mut ShmemHeader = std::ptr::null_mut();
static mut LOCKS: *mut pg_sys::LWLockPadded = std::ptr::null_mut();

fn layout(max_indexes: usize, nblocks: usize) -> (usize, usize, usize) {
    let align = |x: usize, a: usize| x.div_ceil(a) * a;
    let slots_off = align(std::mem::size_of::<ShmemHeader>(), 64);
    let blocks_off = align(slots_off + max_indexes * slot_stride(), 4096);
    let total = blocks_off + nblocks * DYN_BLOCK_SIZE;
    (slots_off, blocks_off, total)
}

fn sizes() -> (usize, usize) {
    let max_indexes = guc::MAX_INDEXES.get().max(1) as usize;
    let bytes = guc::SHARED_MEMORY_MB.get() as usize * 1024 * 1024;
    let (_, blocks_off, _) = layout(max_indexes, 0);
    let nblocks = bytes.saturating_sub(blocks_off) / DYN_BLOCK_SIZE;
    (max_indexes, nblocks.max(16))
}

pub fn nlocks() -> usize {
    FIXED_LOCKS + guc::MAX_INDEXES.get().max(1) as usize + UNIQUE_STRIPES
}

/// shmem_request_hook body.
pub unsafe fn request() {
    let (mi, nb) = sizes();
    let (_, _, total) = layout(mi, nb);
    pg_sys::RequestAddinShmemSpace(total);
    pg_sys::RequestAddinShmemSpace(super::leaf_cache::request_size());
    pg_sys::RequestAddinShmemSpace(super::rel_counters::request_size());
    pg_sys::RequestNamedLWLockTranche(TRANCHE_NAME.as_ptr(), nlocks() as i32);
}

/// shmem_startup_hook body.
pub unsafe fn startup() {
    let (mi, nb) = sizes();
    let (slots_off, blocks_off, total) = layout(mi, nb);
    pg_sys::LWLockAcquire(addin_shmem_init_lock(), pg_sys::LWLockMode::LW_EXCLUSIVE);
    let mut found = false;
    let hdr = pg_sys::ShmemInitStruct(c"pg_hybrid arena".as_ptr(), total, &mut found) as *mut ShmemHeader;
    if !found {
        std::ptr::write_bytes(hdr as *mut u8, 0, blocks_off);
        (*hdr).magic = SHMEM_MAGIC;
        (*hdr).max_indexes = mi as u32;
        (*hdr).nblocks = nb as u32;
        (*hdr).slots_off = slots_off;
        (*hdr).blocks_off = blocks_off;
        // Thread the free list through the first word of each block.
        for b in 0..nb {
            let p = (hdr as *mut u8).add(blocks_off + b * DYN_BLOCK_SIZE) as *mut u32;
            *p = if b + 1 < nb { (b + 1) as u32 } else { NO_FREE };
        }
        (*hdr).free_head = AtomicU32::new(0);
        (*hdr).free_blocks = AtomicU32::new(nb as u32);
        (*hdr).pressure_ms = AtomicU64::new(0);
        (*hdr).kept_blocks = AtomicU32::new(0);
        for i in 0..mi {
            payload_ops().init((*(*hdr).slot(i)).payload());
        }
    }
    SHMEM = hdr;
    super::leaf_cache::startup();
    super::rel_counters::startup();
    pg_sys::LWLockRelease(addin_shmem_init_lock());
}

/// Whether this process has the arena (true in every backend of a server
/// that preloaded pg_hybrid).
pub fn available() -> bool {
    unsafe { !SHMEM.is_null() }
}

pub fn header() -> &'static ShmemHeader {
    unsafe {
        if SHMEM.is_null() {
            crate::require_preload();
            pgrx::error!("pg_hybrid shared memory is not initialised");
        }
        &*SHMEM
    }
}

pub fn lock(i: usize) -> *mut pg_sys::LWLock {
    unsafe {
        if LOCKS.is_null() {
            header();
            LOCKS = pg_sys::GetNamedLWLockTranche(TRANCHE_NAME.as_ptr());
        }
        &mut (*LOCKS.add(i)).lock
    }
}

pub fn slot_lock(slot: usize) -> *mut pg_sys::LWLock {
    lock(FIXED_LOCKS + slot)
}

pub fn stripe_lock(hash: u64) -> *mut pg_sys::LWLock {
    let mi = header().max_indexes as usize;
    lock(FIXED_LOCKS + mi + (hash % UNIQUE_STRIPES as u64) as usize)
}

impl ShmemHeader {
    pub fn slot(&self, i: usize) -> *mut IndexSlot {
        assert!(i < self.max_indexes as usize);
        unsafe {
            (self as *const Self as *mut u8).add(self.slots_off + i * slot_stride()) as *mut IndexSlot
        }
    }

    pub fn block_ptr(&self, id: u32) -> *mut u8 {
        assert!(id < self.nblocks, "arena block id out of range");
        unsafe {
            (self as *const Self as *mut u8).add(self.blocks_off + id as usize * DYN_BLOCK_SIZE)
        }
    }

    pub fn free_fraction(&self) -> f64 {
        self.free_blocks.load(AtomicOrdering::Relaxed) as f64 / self.nblocks as f64
    }
}

/// RAII holder of an LWLock.
pub struct LwGuard(*mut pg_sys::LWLock);

impl LwGuard {
    pub fn exclusive(l: *mut pg_sys::LWLock) -> LwGuard {
        unsafe { pg_sys::LWLockAcquire(l, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        LwGuard(l)
    }
    pub fn shared(l: *mut pg_sys::LWLock) -> LwGuard {
        unsafe { pg_sys::LWLockAcquire(l, pg_sys::LWLockMode::LW_SHARED) };
        LwGuard(l)
    }
    /// The lock exclusively if it is free at once, else None.
    pub fn try_exclusive(l: *mut pg_sys::LWLock) -> Option<LwGuard> {
        // Not `then_some(LwGuard(l))`: its argument is built (and dropped,
        // releasing a lock not held) even when the acquire fails.
        if unsafe { pg_sys::LWLockConditionalAcquire(l, pg_sys::LWLockMode::LW_EXCLUSIVE) } {
            Some(LwGuard(l))
        } else {
            None
        }
    }
}

impl Drop for LwGuard {
    fn drop(&mut self) {
        // Released while an ERROR unwinds too, when still held (an ERROR
        // raised in PostgreSQL code may have released it already; then
        // AbortTransaction's LWLockReleaseAll has nothing left to do):
        // LWLocks are not reentrant, and a value dropped on the way out
        // may take the same lock again (a key filter built during CREATE
        // INDEX gives its arena blocks back, one acquisition per block).
        unsafe {
            if !std::thread::panicking() || pg_sys::LWLockHeldByMe(self.0) {
                pg_sys::LWLockRelease(self.0);
            }
        }
    }
}

/// The block pool as seen by the core dynamic stage. Allocation takes the pool
/// lock briefly; callers hold their index slot's lock around tree operations.
pub struct ArenaPool;

// SAFETY: block ids index the arena, allocated once at startup and never
// moved; the free list hands each block to one owner at a time.
unsafe impl BlockPool for ArenaPool {
    fn alloc(&mut self) -> Option<u32> {
        let h = header();
        let _g = LwGuard::exclusive(lock(LOCK_POOL));
        let head = h.free_head.load(AtomicOrdering::Relaxed);
        if head == NO_FREE {
            return None;
        }
        let next = unsafe { *(h.block_ptr(head) as *const u32) };
        h.free_head.store(next, AtomicOrdering::Relaxed);
        h.free_blocks.fetch_sub(1, AtomicOrdering::Relaxed);
        Some(head)
    }

    fn free(&mut self, id: u32) {
        let h = header();
        let _g = LwGuard::exclusive(lock(LOCK_POOL));
        unsafe { *(h.block_ptr(id) as *mut u32) = h.free_head.load(AtomicOrdering::Relaxed) };
        h.free_head.store(id, AtomicOrdering::Relaxed);
        h.free_blocks.fetch_add(1, AtomicOrdering::Relaxed);
    }

    fn block(&self, id: u32) -> *mut u8 {
        header().block_ptr(id)
    }
}

/// Takes up to `want` blocks that the caller keeps for good (never frees),
/// zeroed, within the arena's budget for such blocks (1/8 of it); returns
/// how many it put in `out`.
pub fn take_kept(want: usize, out: &mut [u32]) -> usize {
    let h = header();
    let budget = (h.nblocks / 8) as usize;
    let mut pool = ArenaPool;
    let mut n = 0;
    while n < want.min(out.len()) {
        let taken = h.kept_blocks.fetch_add(1, AtomicOrdering::Relaxed) as usize;
        if taken >= budget {
            h.kept_blocks.fetch_sub(1, AtomicOrdering::Relaxed);
            break;
        }
        match pool.alloc() {
            Some(b) => {
                unsafe { std::ptr::write_bytes(pool.block(b), 0, DYN_BLOCK_SIZE) };
                out[n] = b;
                n += 1;
            }
            None => {
                h.kept_blocks.fetch_sub(1, AtomicOrdering::Relaxed);
                break;
            }
        }
    }
    n
}

/// AddinShmemInitLock is a C macro over MainLWLockArray.
unsafe fn addin_shmem_init_lock() -> *mut pg_sys::LWLock {
    const ADDIN_SHMEM_INIT_LOCK: usize = 21; // storage/lwlocknames.h, PostgreSQL 15
    &mut (*pg_sys::MainLWLockArray.add(ADDIN_SHMEM_INIT_LOCK)).lock
}
