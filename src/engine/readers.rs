//! Who is still reading a retired base structure.
//!
//! A merge retires the old stage's pages to a recycle segment. They may be
//! reused once no scan or unique check can still be on them. The xid
//! horizon (nbtree's rule for deleted pages) answers that conservatively:
//! any transaction older than the switch might be reading. Under a steady
//! insert load some inserting statement always is older, so segments piled
//! up and the relation grew to three or four stages. Instead, every reader
//! registers with the slot for the generation it read, under the slot lock
//! it takes its snapshot with, and deregisters when done; a segment is free
//! once no reader of its generation or an older one is left (or, as before,
//! once the horizon has passed it).
//!
//! A reader that errors out never deregisters itself: the backend keeps its
//! registrations in a local table, and a transaction callback releases what
//! is left at commit or abort. A scan that ends keeps its registration with
//! its cursor for the backend's next scan of the index (scan.rs, warm
//! scans) until its transaction ends; the callback releases it then, and a
//! token of an ended transaction no longer `covers` anything. A slot that
//! is reset (eviction, DROP) starts a new epoch, and registrations of an
//! older epoch are ignored.
//!
//! Standbys do not register with the primary: a standby query that meets a
//! recycled page is cancelled as a recovery conflict (static_io.rs), which
//! is also what it was with the horizon rule without hot_standby_feedback.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

use pg_hybrid_core::fast_hash::FastMap;
use pgrx::pg_sys;

use super::state::DualStageState;
use crate::shmem::{self, SlotKey, SlotRef};

const OLD_SLOTS: usize = 4;

#[repr(C)]
pub struct OldReaders {
    pub generation: u32,
    pub count: AtomicU32,
}

/// Counts in the slot. Registration and deregistration hold the slot lock
/// shared (so the current generation cannot change under them); moving the
/// current count to the old ones holds it exclusively.
#[repr(C)]
pub struct ReaderCounts {
    pub current: AtomicU32,
    pub old: [OldReaders; OLD_SLOTS],
    /// Readers of generations folded together when `old` was full; they
    /// block every segment until they are gone.
    pub overflow: AtomicU32,
    pub epoch: u32,
}

fn dec(c: &AtomicU32) {
    let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
}

impl ReaderCounts {
    pub fn clear(&mut self) {
        self.current.store(0, Ordering::Relaxed);
        for o in &mut self.old {
            o.generation = 0;
            o.count.store(0, Ordering::Relaxed);
        }
        self.overflow.store(0, Ordering::Relaxed);
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// The current stage (generation `gen`) is being replaced: its readers
    /// become readers of an old generation. Caller holds the lock exclusively.
    pub fn retire_current(&mut self, gen: u32) {
        let n = self.current.swap(0, Ordering::Relaxed);
        if n == 0 {
            return;
        }
        let free = self.old.iter().position(|o| o.count.load(Ordering::Relaxed) == 0);
        let i = free.unwrap_or_else(|| {
            // Fold the oldest into the overflow bucket.
            let i = (0..OLD_SLOTS).min_by_key(|&i| self.old[i].generation).unwrap();
            let c = self.old[i].count.swap(0, Ordering::Relaxed);
            self.overflow.fetch_add(c, Ordering::Relaxed);
            i
        });
        self.old[i].generation = gen;
        self.old[i].count.store(n, Ordering::Relaxed);
    }

    /// Whether anyone is registered at all (such a slot must not be evicted:
    /// its counts are what keeps pages from being recycled under readers).
    pub fn any(&self) -> bool {
        self.current.load(Ordering::Relaxed) > 0
            || self.overflow.load(Ordering::Relaxed) > 0
            || self.old.iter().any(|o| o.count.load(Ordering::Relaxed) > 0)
    }

    /// Whether the pages of generation `gen` (retired) may be reused: no
    /// reader of it or of an older generation is registered.
    pub fn generation_free(&self, gen: u32) -> bool {
        // Folded readers are of generations not known one by one: they
        // block everything.
        if self.overflow.load(Ordering::Relaxed) > 0 {
            return false;
        }
        !self.old.iter().any(|o| o.count.load(Ordering::Relaxed) > 0 && o.generation <= gen)
    }
}

struct Registration {
    slot_index: usize,
    key: SlotKey,
    epoch: u32,
    generation: u32,
}

thread_local! {
    static ACTIVE: RefCell<(u64, FastMap<u64, Registration>)> = RefCell::new((0, FastMap::default()));
    static CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Transactions ended since the backend started: a token registered in
    /// an earlier one was released by `at_xact_end`.
    static XACTS_ENDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A registered reader of one static generation; deregisters when dropped.
pub struct ReaderToken {
    id: u64,
    slot_index: usize,
    epoch: u32,
    generation: u32,
    /// `XACTS_ENDED` when it registered.
    xact: u64,
}

impl ReaderToken {
    /// Registers a reader of `st.base.generation`; the caller holds `slot`'s
    /// lock (shared is enough).
    pub fn register(slot: SlotRef, st: &DualStageState) -> ReaderToken {
        ensure_callback();
        st.readers.current.fetch_add(1, Ordering::Relaxed);
        let reg = Registration { slot_index: slot.index, key: slot.key, epoch: st.readers.epoch, generation: st.base.generation };
        let id = ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            a.0 += 1;
            let id = a.0;
            a.1.insert(id, reg);
            id
        });
        ReaderToken { id, slot_index: slot.index, epoch: st.readers.epoch, generation: st.base.generation, xact: XACTS_ENDED.get() }
    }

    /// Whether this token already registers a reader of the generation
    /// current in `st` (same slot, same epoch, same transaction): a rescan
    /// keeps it instead of deregistering and registering again, two trips
    /// through the slot lock per nested-loop probe. Caller holds the slot
    /// lock.
    pub fn covers(&self, slot: SlotRef, st: &DualStageState) -> bool {
        self.slot_index == slot.index && self.epoch == st.readers.epoch && self.generation == st.base.generation && self.xact == XACTS_ENDED.get()
    }
}

impl Drop for ReaderToken {
    fn drop(&mut self) {
        // While an ERROR unwinds, leave it to the transaction callback.
        if std::thread::panicking() {
            return;
        }
        if let Some(reg) = ACTIVE.with(|a| a.borrow_mut().1.remove(&self.id)) {
            deregister(&reg);
        }
    }
}

fn deregister(reg: &Registration) {
    let h = shmem::header();
    let _g = shmem::LwGuard::shared(shmem::slot_lock(reg.slot_index));
    let s = unsafe { &*h.slot(reg.slot_index) };
    let st = unsafe { &*(s.payload() as *const DualStageState) };
    let r = &st.readers;
    if !s.in_use || s.db != reg.key.db || s.relnode != reg.key.relnode || r.epoch != reg.epoch {
        return;
    }
    if reg.generation == st.base.generation {
        dec(&r.current);
    } else if let Some(o) = r.old.iter().find(|o| o.generation == reg.generation && o.count.load(Ordering::Relaxed) > 0) {
        dec(&o.count);
    } else {
        dec(&r.overflow);
    }
}

fn ensure_callback() {
    if !CALLBACK.with(|c| c.replace(true)) {
        unsafe { pg_sys::RegisterXactCallback(Some(at_xact_end), std::ptr::null_mut()) };
    }
}

/// Scans and checks end with their statement; whatever is still registered
/// when the transaction ends belongs to one that errored out.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn at_xact_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    if !matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PARALLEL_ABORT) {
        return;
    }
    XACTS_ENDED.set(XACTS_ENDED.get() + 1);
    // Read in place: a transaction's scans leave their registrations to
    // this (warm scans), and deregistering touches nothing but the slot.
    ACTIVE.with(|a| {
        for (_, reg) in a.borrow_mut().1.drain() {
            deregister(&reg);
        }
    });
}
