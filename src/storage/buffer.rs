//! RAII guards for buffer pins and content locks.

use pgrx::pg_sys;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lock {
    Share,
    Exclusive,
    /// Exclusive, and no other backend holds a pin (scans pin the static
    /// leaf they are positioned on; see static_stage/README.md).
    Cleanup,
}

/// A pin just taken, and the `KeptPins` it goes back to when its `Buf` is
/// done with it (null: none).
struct Pinned {
    buf: pg_sys::Buffer,
    home: *mut KeptPins,
    blkno: u32,
}

/// Pins block `blkno` of the main fork (no content lock): one the running
/// `KeptPins::scope` holds on the block if there is one (moved out of it,
/// and back when the `Buf` is dropped), else from the buffer manager.
unsafe fn pin(rel: pg_sys::Relation, blkno: u32, strategy: pg_sys::BufferAccessStrategy) -> Pinned {
    let kept = KEPT.with(|k| k.get());
    if let Some(k) = kept.as_mut().filter(|k| k.serves(rel)) {
        let buf = match k.take(blkno) {
            Some(buf) => buf,
            None => read_buffer(rel, blkno, strategy),
        };
        return Pinned { buf, home: kept, blkno };
    }
    Pinned { buf: read_buffer(rel, blkno, strategy), home: std::ptr::null_mut(), blkno }
}

/// Where this backend last found a block in the buffer pool: slot
/// `(relfilenode, block)` hashed, holding the block it is for and the
/// buffer it was in.
#[derive(Clone, Copy, Default)]
struct RecentSlot {
    relnode: u32,
    blkno: u32,
    buffer: pg_sys::Buffer,
}

/// Slots of `RECENT` (12 bytes each, 384 KB, allocated by the first read).
const RECENT_SLOTS: usize = 1 << 15;

thread_local! {
    /// This backend's guesses of where blocks are in the buffer pool.
    static RECENT: std::cell::RefCell<Box<[RecentSlot]>> = std::cell::RefCell::new(Box::new([]));
}

fn recent_slot(relnode: u32, blkno: u32) -> usize {
    let h = ((relnode as u64) << 32 | blkno as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - RECENT_SLOTS.trailing_zeros())) as usize
}


/// Pins block `blkno` of the main fork. A block this backend read before
/// is first tried in the buffer it was in (`ReadRecentBuffer`, which
/// checks the buffer's tag under its header lock), skipping the buffer
/// mapping table's partition lock and hash lookup: reads of a column row of
/// hasis pin its extent's header block and a block per column, and that
/// lookup was most of a pin's cost (TPC-H Q9's fetches from lineitem).
/// Reads with a buffer access strategy (bulk scans) go through
/// `ReadBufferExtended`, whose pin of a resident buffer in a ring counts
/// its usage differently. The relation's statistics count the block as
/// fetched and hit, as `ReadBufferExtended` would have.
unsafe fn read_buffer(rel: pg_sys::Relation, blkno: u32, strategy: pg_sys::BufferAccessStrategy) -> pg_sys::Buffer {
    let node = (*rel).rd_node;
    let relnode: u32 = node.relNode.into();
    let i = recent_slot(relnode, blkno);
    if strategy.is_null() {
        let guess = RECENT.with(|r| r.borrow().get(i).filter(|s| s.relnode == relnode && s.blkno == blkno && s.buffer != 0).map(|s| s.buffer));
        if let Some(buffer) = guess {
            if pg_sys::ReadRecentBuffer(node, pg_sys::ForkNumber::MAIN_FORKNUM, blkno, buffer) {
                super::pgstat::count_buffer_hit(rel);
                return buffer;
            }
        }
    }
    let buffer = pg_sys::ReadBufferExtended(rel, pg_sys::ForkNumber::MAIN_FORKNUM, blkno, pg_sys::ReadBufferMode::RBM_NORMAL, strategy);
    RECENT.with(|r| {
        let mut r = r.borrow_mut();
        if r.is_empty() {
            *r = vec![RecentSlot::default(); RECENT_SLOTS].into_boxed_slice();
        }
        r[i] = RecentSlot { relnode, blkno, buffer };
    });
    buffer
}

thread_local! {
    /// The `KeptPins` of the scope running now (null: none).
    static KEPT: std::cell::Cell<*mut KeptPins> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Pins a reader keeps between its calls, as heap's index fetch keeps the
/// buffer of the tuple it returned last (`xs_cbuf`). Inside `scope`, a
/// `Buf` of the relation gives its pin back here when dropped instead of
/// releasing it, and the next read of that block takes it from here
/// instead of looking the block up in the buffer mapping table: the same
/// pins and releases as without, only later. Only blocks of one relation,
/// only a few (`cap`): PostgreSQL tracks a backend's first 8 pinned
/// buffers in an array and the rest in a slower hash table.
///
/// A kept pin is an ordinary pin of the resource owner current when it was
/// taken; pins move in and out only while that owner is current (a
/// subtransaction's owner would release them at its end, or not know them
/// when they are released). They are released when the holder is done
/// (`release`, or on drop), or by the resource owner at abort (then the
/// holder is abandoned with the executor state that owns it).
pub struct KeptPins {
    rel: pg_sys::Relation,
    owner: pg_sys::ResourceOwner,
    /// pins[..len]: (block, buffer). Inline: a reader that fetches once
    /// per statement should not pay an allocation for it.
    pins: [(u32, pg_sys::Buffer); KEPT_PINS_MAX],
    len: usize,
    cap: usize,
}

/// The most pins a `KeptPins` keeps.
pub const KEPT_PINS_MAX: usize = 32;

impl KeptPins {
    pub fn new(rel: pg_sys::Relation, cap: usize) -> KeptPins {
        KeptPins { rel, owner: std::ptr::null_mut(), pins: [(0, 0); KEPT_PINS_MAX], len: 0, cap: cap.min(KEPT_PINS_MAX) }
    }

    fn kept(&self) -> &[(u32, pg_sys::Buffer)] {
        &self.pins[..self.len]
    }

    pub fn rel(&self) -> pg_sys::Relation {
        self.rel
    }

    /// Whether reads of `rel` go through these pins now.
    unsafe fn serves(&self, rel: pg_sys::Relation) -> bool {
        std::ptr::eq(rel, self.rel) && (self.len == 0 || self.owner == pg_sys::CurrentResourceOwner)
    }

    /// The pin on `blkno`, if this holds one (it leaves this).
    fn take(&mut self, blkno: u32) -> Option<pg_sys::Buffer> {
        let i = self.kept().iter().position(|&(b, _)| b == blkno)?;
        let buf = self.pins[i].1;
        self.len -= 1;
        self.pins[i] = self.pins[self.len];
        Some(buf)
    }

    /// Takes back the pin on `buf` (block `blkno`) if there is room and it
    /// holds none on the block yet; releases it otherwise.
    unsafe fn give_back(&mut self, blkno: u32, buf: pg_sys::Buffer) {
        if self.len == 0 {
            self.owner = pg_sys::CurrentResourceOwner;
        }
        if self.len < self.cap && self.owner == pg_sys::CurrentResourceOwner && !self.kept().iter().any(|&(b, _)| b == blkno) {
            self.pins[self.len] = (blkno, buf);
            self.len += 1;
        } else {
            pg_sys::ReleaseBuffer(buf);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub unsafe fn release(&mut self) {
        for &(_, buf) in self.kept() {
            pg_sys::ReleaseBuffer(buf);
        }
        self.len = 0;
    }

    /// Runs `f` with this backend's reads of this relation's blocks going
    /// through these pins (and keeping new ones while there is room).
    pub unsafe fn scope<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if KEPT.with(|k| k.get()) == self as *mut KeptPins {
            return f();
        }
        struct Restore(*mut KeptPins);
        impl Drop for Restore {
            fn drop(&mut self) {
                KEPT.with(|k| k.set(self.0));
            }
        }
        let _restore = Restore(KEPT.with(|k| k.replace(self as *mut KeptPins)));
        f()
    }
}

impl Drop for KeptPins {
    fn drop(&mut self) {
        // On ERROR the resource owner releases the pins.
        if !std::thread::panicking() {
            unsafe { self.release() };
        }
    }
}

/// A pinned and locked buffer; unlocked and unpinned on drop (also during
/// error unwinding, before PostgreSQL's own resource cleanup would do it).
pub struct Buf {
    buf: pg_sys::Buffer,
    locked: bool,
    /// Where the pin goes on drop: the `KeptPins` it came from or was
    /// read for (if its scope still runs), else released.
    home: *mut KeptPins,
    blkno: u32,
}

impl Buf {
    pub unsafe fn read(rel: pg_sys::Relation, blkno: u32, lock: Lock) -> Buf {
        Self::lock_pinned(pin(rel, blkno, std::ptr::null_mut()), lock)
    }

    /// `read`, exclusively locked, only if no other backend holds the
    /// buffer's content lock (ConditionalLockBuffer): for a caller that
    /// holds a heavyweight lock whose waiters may hold this buffer locked.
    pub unsafe fn try_read_exclusive(rel: pg_sys::Relation, blkno: u32) -> Option<Buf> {
        let p = pin(rel, blkno, std::ptr::null_mut());
        if pg_sys::ConditionalLockBuffer(p.buf) {
            Some(Buf { buf: p.buf, locked: true, home: p.home, blkno })
        } else {
            pg_sys::ReleaseBuffer(p.buf);
            None
        }
    }

    /// `read` through a buffer access strategy (a ring for large scans).
    pub unsafe fn read_with(rel: pg_sys::Relation, blkno: u32, lock: Lock, strategy: pg_sys::BufferAccessStrategy) -> Buf {
        Self::lock_pinned(pin(rel, blkno, strategy), lock)
    }

    unsafe fn lock_pinned(p: Pinned, lock: Lock) -> Buf {
        let mut b = Self::lock_new(p.buf, lock);
        b.home = p.home;
        b.blkno = p.blkno;
        b
    }

    pub unsafe fn lock_new(buf: pg_sys::Buffer, lock: Lock) -> Buf {
        match lock {
            Lock::Share => pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32),
            Lock::Exclusive => pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32),
            Lock::Cleanup => pg_sys::LockBufferForCleanup(buf),
        }
        Buf { buf, locked: true, home: std::ptr::null_mut(), blkno: 0 }
    }

    /// Releases the content lock but keeps the pin.
    pub unsafe fn into_pin(mut self) -> Pin {
        pg_sys::LockBuffer(self.buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
        self.locked = false;
        let buf = self.buf;
        std::mem::forget(self);
        Pin { buf }
    }

    /// Keeps the pin and the content lock, which the holder gives up with
    /// `Pin::unlock` (a scan that reads the page once more right after
    /// loading it, and so locks it once instead of twice).
    pub unsafe fn into_locked_pin(self) -> Pin {
        let buf = self.buf;
        std::mem::forget(self);
        Pin { buf }
    }

    /// Extends the relation by one block and returns it exclusively locked.
    pub unsafe fn extend(rel: pg_sys::Relation) -> Buf {
        let needs_lock = !relation_is_local(rel);
        if needs_lock {
            pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        }
        let buf = pg_sys::ReadBufferExtended(
            rel,
            pg_sys::ForkNumber::MAIN_FORKNUM,
            pg_sys::InvalidBlockNumber, // P_NEW
            pg_sys::ReadBufferMode::RBM_NORMAL,
            std::ptr::null_mut(),
        );
        let b = Self::lock_new(buf, Lock::Exclusive);
        if needs_lock {
            pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        }
        b
    }

    /// Wraps a buffer the caller pinned and exclusively locked.
    pub unsafe fn adopt_locked(buf: pg_sys::Buffer) -> Buf {
        Buf { buf, locked: true, home: std::ptr::null_mut(), blkno: 0 }
    }

    pub fn buffer(&self) -> pg_sys::Buffer {
        self.buf
    }

    pub unsafe fn page(&self) -> pg_sys::Page {
        pg_sys::BufferGetPage(self.buf)
    }

    pub unsafe fn blkno(&self) -> u32 {
        pg_sys::BufferGetBlockNumber(self.buf)
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        unsafe {
            // During ERROR cleanup PostgreSQL releases locks and pins itself
            // (LWLockReleaseAll, ResourceOwnerRelease); doing it twice would
            // trip assertions, so only release while no error is in flight.
            if std::thread::panicking() {
                return;
            }
            if self.locked {
                pg_sys::LockBuffer(self.buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
            }
            if !self.home.is_null() && KEPT.with(|k| k.get()) == self.home {
                (*self.home).give_back(self.blkno, self.buf);
            } else {
                pg_sys::ReleaseBuffer(self.buf);
            }
        }
    }
}

/// Reads blocks whose order is known before the first is read (a merge
/// step's leaves, VACUUM's walk of a stage) with the next few already
/// requested from the kernel, as ANALYZE does: their leaves lie anywhere in
/// the file, so without it each miss is a synchronous random read. The
/// distance is maintenance_io_concurrency (0 turns it off).
pub struct ReadAhead<'a> {
    rel: pg_sys::Relation,
    blocks: &'a [u32],
    /// blocks[..read] have been read (or are being read).
    read: usize,
    /// blocks[..requested] have been requested.
    requested: usize,
    distance: usize,
}

impl<'a> ReadAhead<'a> {
    pub unsafe fn new(rel: pg_sys::Relation, blocks: &'a [u32]) -> ReadAhead<'a> {
        ReadAhead { rel, blocks, read: 0, requested: 0, distance: pg_sys::maintenance_io_concurrency.max(0) as usize }
    }

    /// Call before reading the next of `blocks`, in their order: requests
    /// the `distance` blocks after it (the one read now is read by
    /// ReadBuffer anyway).
    pub unsafe fn next(&mut self) {
        let now = self.read;
        self.read += 1;
        if self.distance == 0 {
            return;
        }
        self.requested = self.requested.max(now + 1);
        let until = (now + 1 + self.distance).min(self.blocks.len());
        while self.requested < until {
            pg_sys::PrefetchBuffer(self.rel, pg_sys::ForkNumber::MAIN_FORKNUM, self.blocks[self.requested]);
            self.requested += 1;
        }
    }
}

pub unsafe fn relation_is_local(rel: pg_sys::Relation) -> bool {
    (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_TEMP as i8
}

/// The relation's storage manager handle, opened on first use and owned by the
/// relcache entry (PostgreSQL's static inline `RelationGetSmgr`).
pub unsafe fn smgr(rel: pg_sys::Relation) -> pg_sys::SMgrRelation {
    if (*rel).rd_smgr.is_null() {
        pg_sys::smgrsetowner(&mut (*rel).rd_smgr, pg_sys::smgropen((*rel).rd_node, (*rel).rd_backend));
    }
    (*rel).rd_smgr
}

pub unsafe fn nblocks(rel: pg_sys::Relation) -> u32 {
    pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM)
}

/// A pinned, unlocked buffer kept across calls (by a scan positioned on a
/// page). Lock it briefly with `share()` to read.
pub struct Pin {
    buf: pg_sys::Buffer,
}

impl Pin {
    /// The page, for a holder of the lock `Buf::into_locked_pin` kept.
    pub unsafe fn page(&self) -> pg_sys::Page {
        pg_sys::BufferGetPage(self.buf)
    }

    /// Gives up the lock `Buf::into_locked_pin` kept.
    pub unsafe fn unlock(&self) {
        pg_sys::LockBuffer(self.buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
    }

    pub unsafe fn share(&self) -> PinLock<'_> {
        pg_sys::LockBuffer(self.buf, pg_sys::BUFFER_LOCK_SHARE as i32);
        PinLock { pin: self }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // On ERROR the resource owner releases the pin.
        if !std::thread::panicking() {
            unsafe { pg_sys::ReleaseBuffer(self.buf) };
        }
    }
}

pub struct PinLock<'a> {
    pin: &'a Pin,
}

impl PinLock<'_> {
    pub unsafe fn page(&self) -> pg_sys::Page {
        pg_sys::BufferGetPage(self.pin.buf)
    }
}

impl Drop for PinLock<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            unsafe { pg_sys::LockBuffer(self.pin.buf, pg_sys::BUFFER_LOCK_UNLOCK as i32) };
        }
    }
}
