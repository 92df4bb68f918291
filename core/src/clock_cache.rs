//! A CLOCK cache of variable-length byte strings laid out in one fixed memory
//! region, for shared memory: no pointers inside (only offsets and indexes),
//! no allocation after `init`. Used for decompressed LZ4 leaves, keyed by the
//! page's identity and LSN, so a changed page never matches a stale entry.
//!
//! Values live contiguously in a ring of bytes, so a reader works on a value
//! in place (`with_value`) instead of copying it out. The ring is the clock:
//! space is taken at the head; when it runs out, the entry at the tail is
//! evicted if it was not used since it was last passed, and moved to the head
//! (its usage bit cleared) if it was — the second chance of CLOCK, with the
//! move keeping the ring free of holes.
//!
//! Locking is the caller's: `with_value` under a shared lock (it sets only the
//! entry's usage bit, which is atomic), `insert`, `invalidate` and `retain`
//! under an exclusive one. A region is one partition; callers hash keys over
//! several regions, each with its own lock. Nothing in a region is referenced
//! after the lock is released, so an ERROR never leaves an entry pinned.
//!
//! ```text
//! region: | Header | buckets[nbuckets] u32 | slots[nslots] Slot | queue[nslots] u32 | ring[ring_len] |
//! queue:  slot numbers in ring order, oldest (tail) first; dead slots stay
//!         queued until the tail passes them
//! ```

use std::sync::atomic::{AtomicU8, Ordering};

const NONE: u32 = u32::MAX;
const MAGIC: u32 = 0x434c_4b52; // "CLKR"
/// Expected smallest value; sizes the slot table.
const TYPICAL_VALUE: usize = 2048;
const ALIGN: usize = 8;

/// What a cached value is the value of. `lsn` versions it: a lookup with a
/// different lsn misses, and the insert that follows replaces the old entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CacheKey {
    pub space: u32,
    pub db: u32,
    pub rel: u32,
    pub blk: u32,
    pub lsn: u64,
}

impl CacheKey {
    fn same_page(&self, o: &CacheKey) -> bool {
        self.space == o.space && self.db == o.db && self.rel == o.rel && self.blk == o.blk
    }

    /// Hash of the page identity, not the lsn: versions of a page share a
    /// bucket, so an insert finds the one it replaces.
    pub fn page_hash(&self) -> u64 {
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
        for v in [self.space, self.db, self.rel, self.blk] {
            h = (h ^ v as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
        }
        h
    }
}

#[repr(C)]
struct Header {
    magic: u32,
    nbuckets: u32,
    nslots: u32,
    ring_len: u32,
    /// Next ring offset to write at.
    head: u32,
    free_slot: u32,
    q_first: u32,
    q_count: u32,
    live: u32,
    live_bytes: u32,
}

#[repr(C)]
struct Slot {
    key: CacheKey,
    off: u32,
    len: u32,
    next_in_bucket: u32,
    /// Next free slot while on the free list.
    next_free: u32,
    usage: AtomicU8,
    live: u8,
    _pad: [u8; 6],
}

struct Layout {
    buckets: usize,
    slots: usize,
    queue: usize,
    ring: usize,
    end: usize,
}

fn layout(nbuckets: u32, nslots: u32, ring_len: u32) -> Layout {
    let a = |x: usize| x.div_ceil(ALIGN) * ALIGN;
    let buckets = a(std::mem::size_of::<Header>());
    let slots = a(buckets + nbuckets as usize * 4);
    let queue = a(slots + nslots as usize * std::mem::size_of::<Slot>());
    let ring = a(queue + nslots as usize * 4);
    Layout { buckets, slots, queue, ring, end: ring + ring_len as usize }
}

/// Region bytes per TYPICAL_VALUE of ring: the value, its slot, queue entry
/// and bucket.
const PER_VALUE: usize = TYPICAL_VALUE + std::mem::size_of::<Slot>() + 8;
/// Header plus room for the alignment padding of `layout`.
const FIXED: usize = std::mem::size_of::<Header>() + 64;

fn shape(bytes: usize) -> (u32, u32, u32) {
    let nslots = (bytes.saturating_sub(FIXED) / PER_VALUE).min(u32::MAX as usize / 2);
    let ring = (nslots * TYPICAL_VALUE).min(u32::MAX as usize / 2) / ALIGN * ALIGN;
    (nslots as u32, nslots as u32, ring as u32)
}

/// A view of a cache region. Copyable; all state lives in the region.
#[derive(Clone, Copy)]
pub struct ClockCache {
    base: *mut u8,
}

impl ClockCache {
    /// Initialises `len` bytes at `base` (8-byte aligned) as an empty cache.
    /// A region too small for any value refuses every insert.
    ///
    /// # Safety
    /// `base..base+len` is writable memory, 8-byte aligned, at least
    /// `size_of::<Header>()` long, that outlives every view and is used for
    /// nothing else.
    pub unsafe fn init(base: *mut u8, len: usize) -> ClockCache {
        assert_eq!(base as usize % ALIGN, 0, "cache region must be 8-byte aligned");
        assert!(len >= std::mem::size_of::<Header>(), "cache region too small for its header");
        let (nb, ns, rl) = shape(len);
        let l = layout(nb, ns, rl);
        assert!(l.end <= len.max(FIXED), "cache shape exceeds its region");
        (base as *mut Header).write(Header {
            magic: MAGIC,
            nbuckets: nb,
            nslots: ns,
            ring_len: rl,
            head: 0,
            free_slot: if ns > 0 { 0 } else { NONE },
            q_first: 0,
            q_count: 0,
            live: 0,
            live_bytes: 0,
        });
        let buckets = base.add(l.buckets) as *mut u32;
        for i in 0..nb as usize {
            buckets.add(i).write(NONE);
        }
        let slots = base.add(l.slots) as *mut Slot;
        for i in 0..ns {
            slots.add(i as usize).write(Slot {
                key: CacheKey::default(),
                off: 0,
                len: 0,
                next_in_bucket: NONE,
                next_free: if i + 1 < ns { i + 1 } else { NONE },
                usage: AtomicU8::new(0),
                live: 0,
                _pad: [0; 6],
            });
        }
        ClockCache { base }
    }

    /// A view of a region `init` set up (possibly in another process).
    ///
    /// # Safety
    /// `base` was passed to `init` and the region is still alive.
    pub unsafe fn attach(base: *mut u8) -> ClockCache {
        assert_eq!((*(base as *const Header)).magic, MAGIC, "not a clock cache region");
        ClockCache { base }
    }

    /// Smallest region that can hold a value.
    pub fn min_region() -> usize {
        FIXED + PER_VALUE
    }

    #[allow(clippy::mut_from_ref)]
    fn hdr(&self) -> &mut Header {
        unsafe { &mut *(self.base as *mut Header) }
    }

    fn lay(&self) -> Layout {
        let h = self.hdr();
        layout(h.nbuckets, h.nslots, h.ring_len)
    }

    fn bucket(&self, hash: u64) -> *mut u32 {
        let n = self.hdr().nbuckets as u64;
        unsafe { (self.base.add(self.lay().buckets) as *mut u32).add((hash % n) as usize) }
    }

    #[allow(clippy::mut_from_ref)]
    fn slot(&self, i: u32) -> &mut Slot {
        assert!(i < self.hdr().nslots, "cache slot out of range");
        unsafe { &mut *(self.base.add(self.lay().slots) as *mut Slot).add(i as usize) }
    }

    fn queue(&self, pos: u32) -> *mut u32 {
        let n = self.hdr().nslots;
        unsafe { (self.base.add(self.lay().queue) as *mut u32).add((pos % n) as usize) }
    }

    fn ring(&self) -> *mut u8 {
        unsafe { self.base.add(self.lay().ring) }
    }

    pub fn capacity_bytes(&self) -> usize {
        self.hdr().ring_len as usize
    }

    pub fn used_bytes(&self) -> usize {
        self.hdr().live_bytes as usize
    }

    pub fn entries(&self) -> usize {
        self.hdr().live as usize
    }

    fn find(&self, key: &CacheKey) -> Option<u32> {
        let mut s = unsafe { *self.bucket(key.page_hash()) };
        while s != NONE {
            let sl = self.slot(s);
            if sl.key.same_page(key) {
                return Some(s);
            }
            s = sl.next_in_bucket;
        }
        None
    }

    /// Runs `f` on the value cached for `key` (same page and lsn), in place.
    /// Caller holds at least a shared lock, across `f`.
    pub fn with_value<R>(&self, key: &CacheKey, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let s = self.find(key)?;
        let sl = self.slot(s);
        if sl.key.lsn != key.lsn {
            return None;
        }
        sl.usage.store(1, Ordering::Relaxed);
        let v = unsafe { std::slice::from_raw_parts(self.ring().add(sl.off as usize), sl.len as usize) };
        Some(f(v))
    }

    /// Copies the value cached for `key` into `out`.
    pub fn lookup(&self, key: &CacheKey, out: &mut Vec<u8>) -> bool {
        self.with_value(key, |v| {
            out.clear();
            out.extend_from_slice(v);
        })
        .is_some()
    }

    /// Where `len` bytes fit in the free part of the ring, if they do.
    fn fit(&self, len: u32) -> Option<u32> {
        let h = self.hdr();
        if h.q_count == 0 {
            return (len <= h.ring_len).then_some(0);
        }
        let tail = self.slot(unsafe { *self.queue(h.q_first) }).off;
        if h.head > tail {
            if h.head as u64 + len as u64 <= h.ring_len as u64 {
                Some(h.head)
            } else {
                (len <= tail).then_some(0)
            }
        } else if h.head < tail {
            (h.head + len <= tail).then_some(h.head)
        } else {
            None
        }
    }

    fn push(&mut self, s: u32, off: u32) {
        let h = self.hdr();
        let len = self.slot(s).len;
        let end = off + len.div_ceil(ALIGN as u32) * ALIGN as u32;
        h.head = if end >= h.ring_len { 0 } else { end };
        unsafe { *self.queue(h.q_first + h.q_count) = s };
        h.q_count += 1;
        self.slot(s).off = off;
    }

    /// Moves the clock hand one entry: the tail entry is dropped, or, if used
    /// since the hand last passed it, moved to the head with its bit cleared.
    /// Returns true when an entry was evicted.
    fn advance(&mut self) -> bool {
        let h = self.hdr();
        let s = unsafe { *self.queue(h.q_first) };
        h.q_first = (h.q_first + 1) % h.nslots;
        h.q_count -= 1;
        if h.q_count == 0 {
            h.head = 0;
        }
        let sl = self.slot(s);
        if sl.live == 0 {
            self.free_slot(s);
            return false;
        }
        if sl.usage.load(Ordering::Relaxed) != 0 {
            sl.usage.store(0, Ordering::Relaxed);
            let (from, len) = (sl.off, sl.len);
            if let Some(to) = self.fit(len.div_ceil(ALIGN as u32) * ALIGN as u32) {
                unsafe { std::ptr::copy(self.ring().add(from as usize), self.ring().add(to as usize), len as usize) };
                self.push(s, to);
                return false;
            }
        }
        self.unlink(s);
        self.free_slot(s);
        true
    }

    /// Caches `value` for `key`, replacing any version of the same page.
    /// Returns the number of entries evicted for room, or None when the value
    /// can never fit. Caller holds an exclusive lock.
    pub fn insert(&mut self, key: &CacheKey, value: &[u8]) -> Option<usize> {
        let need = value.len().div_ceil(ALIGN) * ALIGN;
        if need > self.hdr().ring_len as usize || self.hdr().nslots == 0 {
            return None;
        }
        self.invalidate(key);
        let need = need as u32;
        let mut evicted = 0;
        // Each step evicts, frees a dead slot, or clears a usage bit, so two
        // rounds of the queue always make room; the bound guards a damaged region.
        let mut steps = 2 * self.hdr().nslots as usize + 2;
        let off = loop {
            if self.hdr().free_slot != NONE {
                if let Some(off) = self.fit(need) {
                    break off;
                }
            }
            if steps == 0 || self.hdr().q_count == 0 {
                return None;
            }
            steps -= 1;
            evicted += self.advance() as usize;
        };
        let h = self.hdr();
        let s = h.free_slot;
        h.free_slot = self.slot(s).next_free;
        h.live += 1;
        h.live_bytes += value.len() as u32;
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), self.ring().add(off as usize), value.len()) };
        let b = self.bucket(key.page_hash());
        let sl = self.slot(s);
        sl.key = *key;
        sl.len = value.len() as u32;
        sl.next_free = NONE;
        sl.next_in_bucket = unsafe { *b };
        // New entries start cold: one hit before the hand comes round keeps them.
        sl.usage.store(0, Ordering::Relaxed);
        sl.live = 1;
        unsafe { *b = s };
        self.push(s, off);
        Some(evicted)
    }

    /// Drops every version of `key`'s page. Caller holds an exclusive lock.
    pub fn invalidate(&mut self, key: &CacheKey) {
        if let Some(s) = self.find(key) {
            self.unlink(s);
        }
    }

    /// Drops every entry with `drop_if(key)` (e.g. a dropped relation's
    /// pages). Caller holds an exclusive lock.
    pub fn retain(&mut self, mut drop_if: impl FnMut(&CacheKey) -> bool) -> usize {
        let mut n = 0;
        for s in 0..self.hdr().nslots {
            let sl = self.slot(s);
            if sl.live != 0 && drop_if(&sl.key) {
                self.unlink(s);
                n += 1;
            }
        }
        n
    }

    /// Takes a live slot out of its bucket; it stays queued, dead, until the
    /// hand reaches it.
    fn unlink(&mut self, s: u32) {
        let key = self.slot(s).key;
        let b = self.bucket(key.page_hash());
        unsafe {
            if *b == s {
                *b = self.slot(s).next_in_bucket;
            } else {
                let mut p = *b;
                while p != NONE {
                    let nx = self.slot(p).next_in_bucket;
                    if nx == s {
                        self.slot(p).next_in_bucket = self.slot(s).next_in_bucket;
                        break;
                    }
                    p = nx;
                }
            }
        }
        let h = self.hdr();
        h.live -= 1;
        h.live_bytes -= self.slot(s).len;
        let sl = self.slot(s);
        sl.live = 0;
        sl.next_in_bucket = NONE;
    }

    fn free_slot(&mut self, s: u32) {
        let h = self.hdr();
        let head = h.free_slot;
        self.slot(s).next_free = head;
        self.hdr().free_slot = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn region(bytes: usize) -> (Vec<u64>, ClockCache) {
        let mut mem = vec![0u64; bytes.div_ceil(8)];
        let c = unsafe { ClockCache::init(mem.as_mut_ptr() as *mut u8, bytes) };
        (mem, c)
    }

    fn key(blk: u32, lsn: u64) -> CacheKey {
        CacheKey { space: 1663, db: 5, rel: 16384, blk, lsn }
    }

    #[test]
    fn hit_miss_and_versions() {
        let (_m, mut c) = region(256 * 1024);
        let v: Vec<u8> = (0..10_000).map(|i| i as u8).collect();
        let mut out = Vec::new();
        assert!(!c.lookup(&key(1, 10), &mut out));
        assert_eq!(c.insert(&key(1, 10), &v), Some(0));
        assert!(c.lookup(&key(1, 10), &mut out));
        assert_eq!(out, v);
        assert_eq!(c.with_value(&key(1, 10), |b| b.len()), Some(10_000));
        // A newer LSN of the same page misses, and replaces the old version.
        assert!(!c.lookup(&key(1, 11), &mut out));
        c.insert(&key(1, 11), &v[..5]).unwrap();
        assert!(!c.lookup(&key(1, 10), &mut out));
        assert!(c.lookup(&key(1, 11), &mut out));
        assert_eq!(out, &v[..5]);
        assert_eq!(c.entries(), 1);
        c.invalidate(&key(1, 0));
        assert_eq!(c.entries(), 0);
        assert_eq!(c.used_bytes(), 0);
    }

    #[test]
    fn too_small_or_too_big() {
        let (_m, mut c) = region(100);
        assert_eq!(c.insert(&key(1, 1), b"x"), None);
        let (_m2, mut c2) = region(ClockCache::min_region());
        assert_eq!(c2.insert(&key(1, 1), &[0; TYPICAL_VALUE]), Some(0));
        assert_eq!(c2.insert(&key(2, 1), &[0; TYPICAL_VALUE + 1]), None);
        assert_eq!(c2.insert(&key(2, 1), &[1; 10]), Some(1));
    }

    #[test]
    fn clock_keeps_the_hot_entry() {
        let (_m, mut c) = region(16 * PER_VALUE + FIXED);
        let hot = key(0, 1);
        c.insert(&hot, &[7; 3000]).unwrap();
        let mut out = Vec::new();
        for b in 1..200 {
            assert!(c.lookup(&hot, &mut out), "hot entry evicted at {b}");
            c.insert(&key(b, 1), &vec![b as u8; 1000 + (b as usize * 37) % 4000]).unwrap();
        }
        assert_eq!(out, vec![7; 3000]);
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((0u32..40, 0u64..3, 0usize..9000, 0u8..3), 1..400)) {
            let (_m, mut c) = region(16 * PER_VALUE + FIXED);
            let mut model: HashMap<u32, (u64, Vec<u8>)> = HashMap::new();
            let mut out = Vec::new();
            for (blk, lsn, len, op) in ops {
                let k = key(blk, lsn);
                match op {
                    0 => {
                        let v: Vec<u8> = (0..len).map(|i| (i as u32 ^ blk ^ lsn as u32) as u8).collect();
                        prop_assert!(c.insert(&k, &v).is_some());
                        model.insert(blk, (lsn, v));
                        // The value just inserted is always there.
                        prop_assert!(c.lookup(&k, &mut out));
                    }
                    1 => {
                        c.invalidate(&k);
                        model.remove(&blk);
                    }
                    _ => {}
                }
                if c.lookup(&k, &mut out) {
                    // Whatever is found is the latest version inserted, byte for byte.
                    let (l, v) = model.get(&blk).expect("found a value never inserted or invalidated");
                    prop_assert_eq!(*l, lsn);
                    prop_assert_eq!(&out, v);
                }
                prop_assert!(c.used_bytes() <= c.capacity_bytes());
            }
            let total: usize = (0..40).filter_map(|b| {
                let (l, v) = model.get(&b)?;
                c.with_value(&key(b, *l), |x| { assert_eq!(x, &v[..]); x.len() })
            }).sum();
            prop_assert_eq!(total, c.used_bytes());
            c.retain(|_| true);
            prop_assert_eq!(c.used_bytes(), 0);
            prop_assert_eq!(c.entries(), 0);
        }
    }
}
