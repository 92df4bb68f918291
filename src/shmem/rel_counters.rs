//! Cumulative per-relation counters in shared memory, since the server
//! started: a fixed open-addressing table keyed by (database, relfilenode),
//! so a TRUNCATE, CLUSTER or rewrite (a new file) starts from zero, as the
//! relation's other statistics do.
//!
//! The owner of a counter set decides what each of its `COUNTERS` slots
//! means; nothing here knows. Entries are claimed with a compare-and-swap on
//! the key and never released (a dropped relation's entry stays until the
//! server restarts); when every slot is taken, new relations are simply not
//! counted and `get` says so with `None`. Statistics only: nothing here is
//! needed after a crash.

use std::sync::atomic::{AtomicU64, Ordering};

use pgrx::pg_sys;

/// Counters per relation.
pub const COUNTERS: usize = 4;
/// Relations counted at once.
const SLOTS: usize = 4096;

#[repr(C)]
struct Entry {
    /// `database << 32 | relfilenode`; 0 while the slot is free
    /// (relfilenode 0 is never a relation's file).
    key: AtomicU64,
    counts: [AtomicU64; COUNTERS],
}

static mut TABLE: *mut Entry = std::ptr::null_mut();

pub fn request_size() -> usize {
    SLOTS * std::mem::size_of::<Entry>()
}

/// shmem_startup_hook part; caller holds AddinShmemInitLock.
pub unsafe fn startup() {
    let mut found = false;
    let t = pg_sys::ShmemInitStruct(c"pg_hybrid relation counters".as_ptr(), request_size(), &mut found) as *mut Entry;
    if !found {
        // All-zero atomics are valid: every slot starts free.
        std::ptr::write_bytes(t as *mut u8, 0, request_size());
    }
    TABLE = t;
}

/// The storage a relation's counters belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelFile {
    pub database: u32,
    pub relfilenode: u32,
}

impl RelFile {
    pub unsafe fn of(rel: pg_sys::Relation) -> RelFile {
        RelFile { database: u32::from((*rel).rd_node.dbNode), relfilenode: u32::from((*rel).rd_node.relNode) }
    }

    fn key(self) -> u64 {
        (self.database as u64) << 32 | self.relfilenode as u64
    }
}

fn home(key: u64) -> usize {
    // Fibonacci hashing spreads consecutive relfilenodes over the table.
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SLOTS
}

/// The entry of `file`, claiming a free slot for it when `claim`.
unsafe fn entry(file: RelFile, claim: bool) -> Option<&'static Entry> {
    if TABLE.is_null() || file.relfilenode == 0 {
        return None;
    }
    let key = file.key();
    let start = home(key);
    for i in 0..SLOTS {
        let e = &*TABLE.add((start + i) % SLOTS);
        match e.key.load(Ordering::Acquire) {
            k if k == key => return Some(e),
            0 if claim => match e.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(e),
                Err(k) if k == key => return Some(e),
                Err(_) => continue,
            },
            // Slots are never freed, so a free slot ends the probe.
            0 => return None,
            _ => continue,
        }
    }
    None
}

/// Adds `deltas` to `file`'s counters (nothing when the table is full or
/// the library was not preloaded).
pub fn add(file: RelFile, deltas: &[u64; COUNTERS]) {
    unsafe {
        if let Some(e) = entry(file, true) {
            for (c, d) in e.counts.iter().zip(deltas) {
                if *d != 0 {
                    c.fetch_add(*d, Ordering::Relaxed);
                }
            }
        }
    }
}

/// `file`'s counters: zeros for a file never counted, `None` when the
/// table has no room to tell (it filled before the file was first counted).
pub fn get(file: RelFile) -> Option<[u64; COUNTERS]> {
    unsafe {
        if TABLE.is_null() {
            return None;
        }
        match entry(file, false) {
            Some(e) => Some(std::array::from_fn(|i| e.counts[i].load(Ordering::Relaxed))),
            None if table_full() => None,
            None => Some([0; COUNTERS]),
        }
    }
}

unsafe fn table_full() -> bool {
    (0..SLOTS).all(|i| (*TABLE.add(i)).key.load(Ordering::Relaxed) != 0)
}
