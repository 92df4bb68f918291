//! The dynamic stage of `hybrid_btree`: a sorted B+tree of (key, TID, pos)
//! entries kept in a shared-memory block pool.
//!
//! Every backend maps the arena, possibly at a different address, so nothing
//! inside a block is a pointer: nodes name each other by u32 block id and the
//! pool turns an id into an address in the current process. `DynTree` is the
//! plain-old-data header the caller stores in shared memory; all operations
//! take it together with the pool and a key comparator. Locking is the
//! caller's business (an LWLock per index). See DYNAMIC.md for the layout.
//!
//! Entries are ordered by (key under the caller's comparator, TID), so equal
//! keys from different heap tuples coexist and every entry has a unique place.
//! `pos` is opaque here; the index stores the delta-log position in it so a
//! merge can drop exactly what it moved.

use std::cell::UnsafeCell;
use std::cmp::Ordering;
use std::fmt;

use crate::tid::Tid;

/// Bytes per pool block.
pub const DYN_BLOCK_SIZE: usize = 8192;
/// "No block": empty tree root, end of a sibling chain.
pub const NONE: u32 = u32::MAX;
/// Smallest node size `DynTree::with_node_size` accepts.
pub const MIN_NODE_SIZE: usize = 256;
/// Deepest tree the fixed-size descent path can hold. Every node but the
/// last of its level has two or more entries (see `choose_split` and
/// `max_key_len`), so 2^32 blocks cannot build a tree this deep.
pub const MAX_HEIGHT: usize = 40;

const HDR: usize = 24;
/// A slot: the entry's offset (u16) and, in a leaf, its key hint (u16).
const SLOT: usize = 4;
const LEAF_FIXED: usize = 16;
const INNER_FIXED: usize = 12;
const NODE_MAGIC: usize = 0x4459; // "DY"
/// Header byte holding a node's hint prefix length; `NO_HINTS` in inner nodes.
const HINT_LEN_AT: usize = 12;
/// Header bytes holding the prefix every key of a leaf starts with.
const PREFIX_AT: usize = 16;
/// Longest hint prefix (the header's room for it).
const MAX_PREFIX: usize = 8;
const NO_HINTS: usize = 0xFF;

/// A source of fixed-size blocks, in PostgreSQL a shared-memory arena.
///
/// # Safety
/// For an id returned by `alloc` and not yet passed to `free`, `block(id)`
/// must return a pointer valid for reads and writes of `DYN_BLOCK_SIZE`
/// bytes, 8-aligned, not aliased by any other live block, and stable until
/// `free(id)`. The tree dereferences it without further checks, so `block`
/// should reject (panic on) ids outside the arena: a corrupt node can hold
/// any id.
pub unsafe trait BlockPool {
    fn alloc(&mut self) -> Option<u32>;
    fn free(&mut self, id: u32);
    fn block(&self, id: u32) -> *mut u8;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DynError {
    /// The pool could not supply the blocks this insert needs; the tree is
    /// unchanged.
    OutOfMemory,
    /// Key longer than `DynTree::max_key_len`.
    KeyTooLong,
}

impl fmt::Display for DynError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DynError::OutOfMemory => write!(f, "dynamic stage out of shared memory"),
            DynError::KeyTooLong => write!(f, "index key too long for the dynamic stage"),
        }
    }
}

impl std::error::Error for DynError {}

/// Most entries a leaf can hold (entries with empty keys).
const MAX_LEAF_ENTRIES: usize = (DYN_BLOCK_SIZE - HDR) / (LEAF_FIXED + SLOT) + 1;

/// A pruning walk's action for an entry: stop past the run, drop the dead.
fn prune_step(in_run: bool, tid: Tid, dead: &mut dyn FnMut(Tid) -> bool) -> Rewrite {
    if !in_run {
        Rewrite::Stop
    } else if dead(tid) {
        Rewrite::Drop
    } else {
        Rewrite::Keep
    }
}

/// What `DynTree::rewrite_from` does with one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewrite {
    Keep,
    /// Keep it with this value.
    Set(u64),
    Drop,
    /// End the walk before this entry (it is kept).
    Stop,
}

/// How a `rewrite_from` walk ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RewriteEnd {
    pub visited: usize,
    pub removed: usize,
    pub changed: usize,
    /// The entry the walk stopped before (by `Stop` or the budget); None
    /// when it ran off the end of the tree.
    pub stopped_at: Option<(Vec<u8>, Tid)>,
}

/// Header of one dynamic stage, stored by value in shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynTree {
    /// Root block, or NONE when empty.
    pub root: u32,
    /// Levels including the leaf level; 0 when empty.
    pub height: u32,
    pub nentries: u64,
    /// Blocks this tree holds from the pool.
    pub nblocks: u32,
    /// Bytes of each block used as a node (DYN_BLOCK_SIZE except in tests,
    /// where small nodes give deep trees with few entries).
    pub node_size: u32,
    /// Sum of the key lengths of all entries.
    pub key_bytes: u64,
}

impl Default for DynTree {
    fn default() -> Self {
        Self::new()
    }
}

// ------------------------------------------------------------ node layout

#[inline(always)]
fn rd16(b: &[u8], o: usize) -> usize {
    u16::from_le_bytes([b[o], b[o + 1]]) as usize
}
#[inline(always)]
fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
#[inline(always)]
fn rd64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
#[inline(always)]
fn wr16(b: &mut [u8], o: usize, v: usize) {
    b[o..o + 2].copy_from_slice(&(v as u16).to_le_bytes());
}
#[inline(always)]
fn wr32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline(always)]
fn level(b: &[u8]) -> usize {
    rd16(b, 0)
}
#[inline(always)]
fn nkeys(b: &[u8]) -> usize {
    rd16(b, 2)
}
#[inline(always)]
fn data_start(b: &[u8]) -> usize {
    rd16(b, 4)
}
#[inline(always)]
fn next(b: &[u8]) -> u32 {
    rd32(b, 8)
}
#[inline(always)]
fn set_next(b: &mut [u8], id: u32) {
    wr32(b, 8, id)
}
#[inline(always)]
fn fixed(level: usize) -> usize {
    if level == 0 {
        LEAF_FIXED
    } else {
        INNER_FIXED
    }
}
#[inline(always)]
fn free_space(b: &[u8]) -> usize {
    data_start(b).saturating_sub(HDR + SLOT * nkeys(b))
}
#[inline(always)]
fn off(b: &[u8], i: usize) -> usize {
    rd16(b, HDR + SLOT * i)
}
#[inline(always)]
fn slot_hint(b: &[u8], i: usize) -> u16 {
    rd16(b, HDR + SLOT * i + 2) as u16
}
#[inline(always)]
fn hint_len(b: &[u8]) -> usize {
    b[HINT_LEN_AT] as usize
}

/// The key hint of `key` in a leaf whose keys all start with the same
/// `len` bytes: the two bytes after them, zero where the key ends. For
/// keys sharing that prefix, byte order of keys implies the order of
/// their hints (a shorter key pads with zeros, which sort first), so a
/// bytewise search can compare the u16s in the slot array and read an
/// entry only where hints are equal.
#[inline(always)]
fn hint_of(key: &[u8], len: usize) -> u16 {
    let hi = key.get(len).copied().unwrap_or(0) as u16;
    let lo = key.get(len + 1).copied().unwrap_or(0) as u16;
    (hi << 8) | lo
}

/// Makes leaf `b` ready to take `key`: when the key does not start with
/// the leaf's hint prefix, the prefix shrinks to what they share and every
/// hint is computed again (rare: a key beyond the leaf's first or last
/// within the range its parent routes to it). Returns the key's hint.
/// Inner nodes keep no hints (their searches hit nodes in cache).
fn adopt_key(b: &mut [u8], key: &[u8]) -> u16 {
    let len = hint_len(b);
    if len == NO_HINTS {
        return 0;
    }
    if nkeys(b) == 0 {
        let l = key.len().min(MAX_PREFIX);
        b[PREFIX_AT..PREFIX_AT + MAX_PREFIX].fill(0);
        b[PREFIX_AT..PREFIX_AT + l].copy_from_slice(&key[..l]);
        b[HINT_LEN_AT] = l as u8;
        return hint_of(key, l);
    }
    let shared = key
        .iter()
        .zip(&b[PREFIX_AT..PREFIX_AT + len])
        .take_while(|(x, y)| x == y)
        .count();
    if shared < len {
        b[PREFIX_AT + shared..PREFIX_AT + MAX_PREFIX].fill(0);
        b[HINT_LEN_AT] = shared as u8;
        for i in 0..nkeys(b) {
            let h = hint_of(key_at(b, 0, off(b, i)), shared);
            wr16(b, HDR + SLOT * i + 2, h as usize);
        }
        return hint_of(key, shared);
    }
    hint_of(key, len)
}
#[inline(always)]
fn key_at(b: &[u8], lvl: usize, o: usize) -> &[u8] {
    let k = rd16(b, o + 6);
    let s = o + fixed(lvl);
    &b[s..s + k]
}
#[inline(always)]
fn tid_at(b: &[u8], o: usize) -> Tid {
    Tid::new(rd32(b, o), rd16(b, o + 4) as u16)
}
#[inline(always)]
fn val_at(b: &[u8], lvl: usize, o: usize) -> u64 {
    if lvl == 0 {
        rd64(b, o + 8)
    } else {
        rd32(b, o + 8) as u64
    }
}
/// Bytes of entry `i`, slot included (what it costs in a node).
#[inline(always)]
fn cost_at(b: &[u8], lvl: usize, i: usize) -> usize {
    fixed(lvl) + rd16(b, off(b, i) + 6) + SLOT
}
#[inline(always)]
fn raw_at(b: &[u8], lvl: usize, i: usize) -> &[u8] {
    let o = off(b, i);
    &b[o..o + fixed(lvl) + rd16(b, o + 6)]
}

fn node_init(b: &mut [u8], lvl: usize) {
    wr16(b, 0, lvl);
    wr16(b, 2, 0);
    wr16(b, 4, b.len());
    wr16(b, 6, NODE_MAGIC);
    set_next(b, NONE);
    wr32(b, 12, 0);
    b[HINT_LEN_AT] = if lvl == 0 { 0 } else { NO_HINTS as u8 };
    b[PREFIX_AT..PREFIX_AT + MAX_PREFIX].fill(0);
}

/// An entry not yet in a node. `val` is pos in a leaf, the child id inside.
#[derive(Clone, Copy)]
struct Ent<'a> {
    key: &'a [u8],
    tid: Tid,
    val: u64,
}

impl Ent<'_> {
    fn cost(&self, lvl: usize) -> usize {
        fixed(lvl) + self.key.len() + SLOT
    }
}

/// Reserves room for an entry of `len` bytes at slot `idx`, whose key
/// hint is `hint`; returns its offset. Callers have checked that it fits.
fn make_room(b: &mut [u8], idx: usize, len: usize, hint: u16) -> usize {
    let n = nkeys(b);
    let o = data_start(b) - len;
    let s = HDR + SLOT * idx;
    b.copy_within(s..HDR + SLOT * n, s + SLOT);
    wr16(b, s, o);
    wr16(b, s + 2, hint as usize);
    wr16(b, 2, n + 1);
    wr16(b, 4, o);
    o
}

fn node_insert(b: &mut [u8], lvl: usize, idx: usize, e: &Ent) {
    let f = fixed(lvl);
    let hint = adopt_key(b, e.key);
    let o = make_room(b, idx, f + e.key.len(), hint);
    wr32(b, o, e.tid.block);
    wr16(b, o + 4, e.tid.offset as usize);
    wr16(b, o + 6, e.key.len());
    if lvl == 0 {
        b[o + 8..o + 16].copy_from_slice(&e.val.to_le_bytes());
    } else {
        wr32(b, o + 8, e.val as u32);
    }
    b[o + f..o + f + e.key.len()].copy_from_slice(e.key);
}

/// Appends an entry copied from another node; returns its offset.
fn node_append_raw(b: &mut [u8], raw: &[u8]) -> usize {
    let n = nkeys(b);
    let hint = adopt_key(b, &raw[fixed(level(b))..]);
    let o = make_room(b, n, raw.len(), hint);
    b[o..o + raw.len()].copy_from_slice(raw);
    o
}

/// Asks the CPU to load the cache line of slot `i`'s entry (its TID, key
/// length and the first bytes of its key), if `i` is a slot of `b`.
///
/// Why: a node is 8 kB and its entries are reached through the slot
/// array, so each step of a binary search over a node that is not in
/// cache waits for one memory load before it can compare. Loading both
/// entries the next step may compare while this step's comparison waits
/// overlaps those loads: in a profile of random inserts into a griffin
/// index the leaf search of the shared-memory stage was 29% of the
/// insert's CPU, almost all of it waiting for entries.
#[inline(always)]
fn prefetch_entry(b: &[u8], i: usize) {
    if i < nkeys(b) {
        let o = off(b, i);
        if o < b.len() {
            prefetch(&b[o]);
        }
    }
}

/// Prefetches the two entries the search step after the one comparing
/// slot `mid` of `lo..hi` may compare, whichever way this step goes.
#[inline(always)]
fn prefetch_next_step(b: &[u8], lo: usize, mid: usize, hi: usize) {
    prefetch_entry(b, (lo + mid) / 2);
    prefetch_entry(b, (mid + 1 + hi) / 2);
}

#[inline(always)]
fn prefetch(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory,
    // and the address is one of `b`'s bytes.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(byte as *const u8 as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = byte;
}

/// Where the entry (key, tid) belongs in a leaf: (index, already present).
#[inline]
fn leaf_lower_bound(
    b: &[u8],
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
    key: &[u8],
    tid: Tid,
) -> (usize, bool) {
    lower_bound_between(b, cmp, key, tid, 0, nkeys(b))
}

/// Bytes at the start of a leaf asked for as soon as a descent knows it
/// will read the leaf: the header and the slots of about 200 entries
/// (int8 keys), all loaded at once instead of the header first and the
/// slots after it.
const HEAD_PREFETCH: usize = 1024;

#[inline(always)]
fn prefetch_leaf_head(b: &[u8]) {
    for at in (0..HEAD_PREFETCH.min(b.len())).step_by(64) {
        prefetch(&b[at]);
    }
}

/// `leaf_lower_bound` for a tree whose comparator is byte order, through
/// the slot array's key hints: a binary search over u16s that sit
/// together (all of them asked for at once) narrows the leaf to the
/// entries whose hint equals the key's, usually none or one, and only
/// those are read. With random keys in a stage larger than the CPU's
/// caches each entry a plain search reads is a memory load that the next
/// step waits for; that search was a quarter of a griffin insert's CPU.
#[inline]
fn leaf_lower_bound_bytewise(b: &[u8], key: &[u8], tid: Tid) -> (usize, bool) {
    let n = nkeys(b);
    let len = hint_len(b);
    let bytes = &mut |x: &[u8], y: &[u8]| x.cmp(y);
    if n == 0 || len > MAX_PREFIX {
        return lower_bound_between(b, bytes, key, tid, 0, n);
    }
    // Every key of the leaf starts with the prefix: a key that does not
    // sorts before or after all of them.
    let m = len.min(key.len());
    match key[..m].cmp(&b[PREFIX_AT..PREFIX_AT + m]) {
        Ordering::Less => return (0, false),
        Ordering::Greater => return (n, false),
        Ordering::Equal if key.len() < len => return (0, false),
        Ordering::Equal => {}
    }
    let h = hint_of(key, len);
    if slot_hint(b, 0) == slot_hint(b, n - 1) {
        // One hint for the whole leaf (keys alike past the prefix): the
        // hints tell nothing.
        return lower_bound_between(b, bytes, key, tid, 0, n);
    }
    for at in (HEAD_PREFETCH..HDR + SLOT * n).step_by(64) {
        prefetch(&b[at]);
    }
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if slot_hint(b, mid) < h {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let first = lo;
    hi = n;
    while lo < hi {
        let mid = (lo + hi) / 2;
        if slot_hint(b, mid) <= h {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lower_bound_between(b, bytes, key, tid, first, lo)
}

/// First index in [lo, hi) whose entry is not below (key, tid), and
/// whether one equals it; the caller knows every entry before `lo` is
/// below and every entry from `hi` on above.
#[inline]
fn lower_bound_between(
    b: &[u8],
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
    key: &[u8],
    tid: Tid,
    mut lo: usize,
    mut hi: usize,
) -> (usize, bool) {
    let mut found = false;
    while lo < hi {
        let mid = (lo + hi) / 2;
        prefetch_next_step(b, lo, mid, hi);
        let o = off(b, mid);
        match cmp(key_at(b, 0, o), key).then_with(|| tid_at(b, o).cmp(&tid)) {
            Ordering::Less => lo = mid + 1,
            c => {
                found |= c == Ordering::Equal;
                hi = mid;
            }
        }
    }
    (lo, found)
}

/// Child of an inner node whose range holds (key, tid): the last separator
/// <= the probe. Separator 0 is never compared; it stands for -infinity.
#[inline]
fn inner_child(
    b: &[u8],
    lvl: usize,
    cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
    key: &[u8],
    tid: Tid,
) -> usize {
    let (mut lo, mut hi) = (1, nkeys(b));
    while lo < hi {
        let mid = (lo + hi) / 2;
        prefetch_next_step(b, lo, mid, hi);
        let o = off(b, mid);
        if cmp(key_at(b, lvl, o), key).then_with(|| tid_at(b, o).cmp(&tid)) == Ordering::Greater {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo - 1
}

/// First index in [from, n) whose key is not below the bound.
#[inline]
fn first_not_below(
    b: &[u8],
    lvl: usize,
    from: usize,
    cmp_bound: &mut dyn FnMut(&[u8]) -> Ordering,
) -> usize {
    let (mut lo, mut hi) = (from, nkeys(b));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if cmp_bound(key_at(b, lvl, off(b, mid))) == Ordering::Less {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Split point for a full node receiving an entry of `ins_cost` at `ins`:
/// the first `s` of the n+1 entries stay, the rest move right.
fn choose_split(b: &[u8], lvl: usize, ins: usize, ins_cost: usize) -> usize {
    let n = nkeys(b);
    // Appending at the right edge of a level is the ascending-key pattern
    // (serials, timestamps): leave the old node full instead of half empty.
    if ins == n && next(b) == NONE {
        return n;
    }
    let cap = b.len() - HDR;
    let cost = |v: usize| match v.cmp(&ins) {
        Ordering::Less => cost_at(b, lvl, v),
        Ordering::Equal => ins_cost,
        Ordering::Greater => cost_at(b, lvl, v - 1),
    };
    let total: usize = (0..=n).map(cost).sum();
    let (mut best, mut best_max, mut left) = (1, usize::MAX, 0);
    for s in 1..=n {
        left += cost(s - 1);
        let m = left.max(total - left);
        if m <= cap && m < best_max {
            best = s;
            best_max = m;
        }
    }
    best
}

/// Key length of virtual entry `v` of a node receiving `ins_len` at `ins`.
fn virtual_key_len(b: &[u8], ins: usize, ins_len: usize, v: usize) -> usize {
    match v.cmp(&ins) {
        Ordering::Less => rd16(b, off(b, v) + 6),
        Ordering::Equal => ins_len,
        Ordering::Greater => rd16(b, off(b, v - 1) + 6),
    }
}

/// Cost-only greedy packing, mirroring what the rebuild writes, to learn how
/// many blocks a rebuild needs before committing to it.
#[derive(Clone, Copy)]
struct Packer {
    used: usize,
    nodes: u32,
    first_cost: usize,
}

/// The bytes a rebuilt leaf may take before the next entry opens a new
/// one, with `spare` blocks on the rebuild's free chain: `leaf_limit` (a
/// fill below 100%) only while a block is left over after the next one is
/// taken, else the whole node. That keeps the chain from running dry: a
/// leaf filled to the whole node always reached into an old leaf that was
/// put on the chain after the previous new leaf was taken (one old leaf's
/// entries fit in one node), so the chain holds a block whenever one is
/// needed. `rebuild_blocks` and `rebuild` decide alike, so the dry run
/// counts the blocks the rebuild takes.
fn leaf_limit_now(ns: usize, leaf_limit: usize, spare: usize) -> usize {
    if spare >= 2 {
        leaf_limit
    } else {
        ns
    }
}

// ------------------------------------------------------------ tree ops

impl DynTree {
    pub const fn new() -> Self {
        DynTree {
            root: NONE,
            height: 0,
            nentries: 0,
            nblocks: 0,
            node_size: DYN_BLOCK_SIZE as u32,
            key_bytes: 0,
        }
    }

    /// A tree using only the first `node_size` bytes of each block.
    /// Panics unless MIN_NODE_SIZE <= node_size <= DYN_BLOCK_SIZE.
    pub fn with_node_size(node_size: usize) -> Self {
        assert!(
            (MIN_NODE_SIZE..=DYN_BLOCK_SIZE).contains(&node_size),
            "bad dynamic node size {node_size}"
        );
        DynTree {
            node_size: node_size as u32,
            ..Self::new()
        }
    }

    /// Longest key accepted: three leaf entries must fit in a node, which
    /// guarantees every split finds a point where both halves fit.
    pub fn max_key_len(&self) -> usize {
        (self.ns() - HDR) / 3 - LEAF_FIXED - SLOT
    }

    pub fn is_empty(&self) -> bool {
        self.nentries == 0
    }

    /// Shared memory held, in bytes.
    pub fn bytes_used(&self) -> u64 {
        self.nblocks as u64 * DYN_BLOCK_SIZE as u64
    }

    /// Node size, clamped so that a corrupt header in shared memory can at
    /// worst make us panic on a bounds check, never reach past a block.
    #[inline(always)]
    fn ns(&self) -> usize {
        (self.node_size as usize).clamp(MIN_NODE_SIZE, DYN_BLOCK_SIZE)
    }

    /// # Safety
    /// `id` is a live block of this tree and no `&mut` to it is alive.
    #[inline(always)]
    unsafe fn node<'a, P: BlockPool + ?Sized>(&self, pool: &P, id: u32) -> &'a [u8] {
        std::slice::from_raw_parts(pool.block(id), self.ns())
    }

    /// # Safety
    /// `id` is a live block of this tree and no other reference to it is alive.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    unsafe fn node_mut<'a, P: BlockPool + ?Sized>(&self, pool: &P, id: u32) -> &'a mut [u8] {
        std::slice::from_raw_parts_mut(pool.block(id), self.ns())
    }

    /// Adds (key, tid, pos). Inserting a (key, tid) already present keeps the
    /// existing entry and its pos: a merge that covers the older pos has
    /// already copied the entry to the static stage and must drop it here;
    /// raising pos would keep it in both stages and return the row twice.
    pub fn insert<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        key: &[u8],
        tid: Tid,
        pos: u64,
    ) -> Result<(), DynError> {
        self.insert_with(pool, cmp, false, key, tid, pos)
    }

    /// `insert` for a tree whose keys are ordered by their bytes (the
    /// caller's comparator is byte order for every key it ever inserts
    /// or searches): the leaf search uses the slot array's key hints.
    pub fn insert_bytewise<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        key: &[u8],
        tid: Tid,
        pos: u64,
    ) -> Result<(), DynError> {
        self.insert_with(pool, &mut |a: &[u8], b: &[u8]| a.cmp(b), true, key, tid, pos)
    }

    fn insert_with<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        bytewise: bool,
        key: &[u8],
        tid: Tid,
        pos: u64,
    ) -> Result<(), DynError> {
        if key.len() > self.max_key_len() {
            return Err(DynError::KeyTooLong);
        }
        let ent = Ent { key, tid, val: pos };
        if self.root == NONE {
            let id = pool.alloc().ok_or(DynError::OutOfMemory)?;
            // SAFETY: freshly allocated block, nothing else refers to it.
            let b = unsafe { self.node_mut(pool, id) };
            node_init(b, 0);
            node_insert(b, 0, 0, &ent);
            self.root = id;
            self.height = 1;
            self.nblocks += 1;
            self.nentries = 1;
            self.key_bytes = key.len() as u64;
            return Ok(());
        }

        // Descend, remembering (node, child index) per inner level.
        let height = self.height as usize;
        let mut path = [(NONE, 0usize); MAX_HEIGHT];
        let mut id = self.root;
        for lvl in (1..height).rev() {
            // SAFETY: read-only view of a live block of this tree.
            let b = unsafe { self.node(pool, id) };
            let i = inner_child(b, lvl, cmp, key, tid);
            path[lvl] = (id, i);
            id = val_at(b, lvl, off(b, i)) as u32;
            if lvl == 1 && bytewise {
                // SAFETY: the child is a live block of this tree.
                prefetch_leaf_head(unsafe { self.node(pool, id) });
            }
        }
        let leaf = id;
        // SAFETY: as above.
        let lb = unsafe { self.node(pool, leaf) };
        let (idx, exists) = if bytewise {
            leaf_lower_bound_bytewise(lb, key, tid)
        } else {
            leaf_lower_bound(lb, cmp, key, tid)
        };
        if exists {
            return Ok(());
        }
        if free_space(lb) >= ent.cost(0) {
            // SAFETY: the shared view `lb` is not used past this point.
            node_insert(unsafe { self.node_mut(pool, leaf) }, 0, idx, &ent);
            self.nentries += 1;
            self.key_bytes += key.len() as u64;
            return Ok(());
        }

        // Plan every split before touching anything, so running out of
        // blocks leaves the tree as it was.
        let mut plan = [0usize; MAX_HEIGHT];
        plan[0] = choose_split(lb, 0, idx, ent.cost(0));
        let mut sep_len = virtual_key_len(lb, idx, key.len(), plan[0]);
        let mut need = 1;
        let mut lvl = 1;
        loop {
            if lvl == height {
                if height >= MAX_HEIGHT {
                    return Err(DynError::OutOfMemory);
                }
                need += 1; // new root
                break;
            }
            let (pid, ci) = path[lvl];
            // SAFETY: read-only view of a live block.
            let pb = unsafe { self.node(pool, pid) };
            let cost = INNER_FIXED + sep_len + SLOT;
            if free_space(pb) >= cost {
                break;
            }
            plan[lvl] = choose_split(pb, lvl, ci + 1, cost);
            sep_len = virtual_key_len(pb, ci + 1, sep_len, plan[lvl]);
            need += 1;
            lvl += 1;
        }
        let mut fresh = [NONE; MAX_HEIGHT + 1];
        for j in 0..need {
            match pool.alloc() {
                Some(b) => fresh[j] = b,
                None => {
                    for &b in &fresh[..j] {
                        pool.free(b);
                    }
                    return Err(DynError::OutOfMemory);
                }
            }
        }

        // Execute the plan bottom-up.
        let mut right = fresh[0];
        self.split(pool, leaf, right, 0, idx, &ent, plan[0]);
        let mut used = 1;
        let mut lvl = 1;
        loop {
            // SAFETY: `right` was just written; only read from here on, and
            // the blocks written below are other nodes.
            let rb = unsafe { self.node(pool, right) };
            let o = off(rb, 0);
            let carry = Ent {
                key: key_at(rb, lvl - 1, o),
                tid: tid_at(rb, o),
                val: right as u64,
            };
            if lvl == height {
                let new_root = fresh[used];
                // SAFETY: freshly allocated block.
                let b = unsafe { self.node_mut(pool, new_root) };
                node_init(b, lvl);
                node_insert(
                    b,
                    lvl,
                    0,
                    &Ent {
                        key: &[],
                        tid: Tid::default(),
                        val: self.root as u64,
                    },
                );
                node_insert(b, lvl, 1, &carry);
                self.root = new_root;
                self.height += 1;
                used += 1;
                break;
            }
            let (pid, ci) = path[lvl];
            // SAFETY: parent block, distinct from `right`.
            let pb = unsafe { self.node_mut(pool, pid) };
            if free_space(pb) >= carry.cost(lvl) {
                node_insert(pb, lvl, ci + 1, &carry);
                break;
            }
            right = fresh[used];
            used += 1;
            self.split(pool, pid, right, lvl, ci + 1, &carry, plan[lvl]);
            lvl += 1;
        }
        debug_assert_eq!(used, need);
        self.nblocks += need as u32;
        self.nentries += 1;
        self.key_bytes += key.len() as u64;
        Ok(())
    }

    /// Rewrites node `id` plus `ent` at `ins` as `id` (first `s` entries)
    /// and the fresh block `new_id` (the rest), linked as siblings.
    #[allow(clippy::too_many_arguments)]
    fn split<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        id: u32,
        new_id: u32,
        lvl: usize,
        ins: usize,
        ent: &Ent,
        s: usize,
    ) {
        let ns = self.ns();
        let mut scratch = [0u8; DYN_BLOCK_SIZE];
        // SAFETY: `id` and `new_id` are distinct live blocks; `ent.key` points
        // into neither (it is the caller's key or a child's first key).
        let (b, nb) = unsafe { (self.node_mut(pool, id), self.node_mut(pool, new_id)) };
        scratch[..ns].copy_from_slice(b);
        let old = &scratch[..ns];
        let n = nkeys(old);
        node_init(b, lvl);
        node_init(nb, lvl);
        set_next(nb, next(old));
        set_next(b, new_id);
        for v in 0..=n {
            let dst = if v < s { &mut *b } else { &mut *nb };
            match v.cmp(&ins) {
                Ordering::Equal => node_insert(dst, lvl, nkeys(dst), ent),
                Ordering::Less => {
                    node_append_raw(dst, raw_at(old, lvl, v));
                }
                Ordering::Greater => {
                    node_append_raw(dst, raw_at(old, lvl, v - 1));
                }
            }
        }
    }

    /// Leftmost block of every level, leaves first.
    fn leftmost<P: BlockPool + ?Sized>(&self, pool: &P) -> [u32; MAX_HEIGHT] {
        let mut lm = [NONE; MAX_HEIGHT];
        let mut id = self.root;
        for lvl in (0..self.height as usize).rev() {
            lm[lvl] = id;
            if lvl > 0 {
                // SAFETY: read-only view of a live block.
                let b = unsafe { self.node(pool, id) };
                id = val_at(b, lvl, off(b, 0)) as u32;
            }
        }
        lm
    }

    /// Visits entries in order from leaf `leaf`, index `idx`, until `visit`
    /// returns false or the entries run out.
    fn walk<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        mut leaf: u32,
        mut idx: usize,
        visit: &mut dyn FnMut(&[u8], Tid, u64) -> bool,
    ) {
        while leaf != NONE {
            // SAFETY: read-only view of a live block.
            let b = unsafe { self.node(pool, leaf) };
            for i in idx..nkeys(b) {
                let o = off(b, i);
                if !visit(key_at(b, 0, o), tid_at(b, o), val_at(b, 0, o)) {
                    return;
                }
            }
            leaf = next(b);
            idx = 0;
        }
    }

    /// Leaf and index of the first entry whose key is not below the bound
    /// (`cmp_bound(stored)` = stored.cmp(bound)).
    fn seek<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp_bound: &mut dyn FnMut(&[u8]) -> Ordering,
    ) -> (u32, usize) {
        let mut id = self.root;
        if id == NONE {
            return (NONE, 0);
        }
        for lvl in (1..self.height as usize).rev() {
            // SAFETY: read-only view of a live block.
            let b = unsafe { self.node(pool, id) };
            // Children before the first separator >= bound hold only smaller
            // keys; equal keys may also sit at the end of the child before it.
            let i = first_not_below(b, lvl, 1, cmp_bound) - 1;
            id = val_at(b, lvl, off(b, i)) as u32;
        }
        // SAFETY: as above.
        let b = unsafe { self.node(pool, id) };
        (id, first_not_below(b, 0, 0, cmp_bound))
    }

    /// Forward scan from the first entry with key >= bound.
    pub fn scan<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp_bound: &mut dyn FnMut(&[u8]) -> Ordering,
        mut visit: impl FnMut(&[u8], Tid, u64) -> bool,
    ) {
        let (leaf, idx) = self.seek(pool, cmp_bound);
        self.walk(pool, leaf, idx, &mut visit);
    }

    /// `scan` for a byte-ordered tree (see `insert_bytewise`): forward from
    /// the first entry whose key is >= `bound` in byte order, which for
    /// keys whose columns are prefix-free is the first entry a bound on
    /// their leading columns does not place below it.
    pub fn scan_bytewise<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        bound: &[u8],
        mut visit: impl FnMut(&[u8], Tid, u64) -> bool,
    ) {
        let (leaf, idx, _) = self.locate_bytewise(pool, bound, Tid::new(0, 0));
        self.walk(pool, leaf, idx, &mut visit);
    }

    /// `scan_after` for a byte-ordered tree.
    pub fn scan_after_bytewise<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        key: &[u8],
        tid: Tid,
        mut visit: impl FnMut(&[u8], Tid, u64) -> bool,
    ) {
        let (leaf, idx, exists) = self.locate_bytewise(pool, key, tid);
        self.walk(pool, leaf, idx + exists as usize, &mut visit);
    }

    /// Leaf and index of the first entry not below (key, tid) in byte
    /// order, and whether it equals it; the leaf search reads key hints.
    fn locate_bytewise<P: BlockPool + ?Sized>(&self, pool: &P, key: &[u8], tid: Tid) -> (u32, usize, bool) {
        let mut id = self.root;
        if id == NONE {
            return (NONE, 0, false);
        }
        let bytes = &mut |x: &[u8], y: &[u8]| x.cmp(y);
        for lvl in (1..self.height as usize).rev() {
            // SAFETY: read-only view of a live block.
            let b = unsafe { self.node(pool, id) };
            id = val_at(b, lvl, off(b, inner_child(b, lvl, bytes, key, tid))) as u32;
            if lvl == 1 {
                // SAFETY: the child is a live block of this tree.
                prefetch_leaf_head(unsafe { self.node(pool, id) });
            }
        }
        // SAFETY: as above.
        let b = unsafe { self.node(pool, id) };
        let (idx, exists) = leaf_lower_bound_bytewise(b, key, tid);
        (id, idx, exists)
    }

    /// Forward scan of every entry.
    pub fn scan_all<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        mut visit: impl FnMut(&[u8], Tid, u64) -> bool,
    ) {
        if self.root == NONE {
            return;
        }
        self.walk(pool, self.leftmost(pool)[0], 0, &mut visit);
    }

    /// Forward scan from the first entry strictly after (key, tid), which
    /// need not be present: resumes a scan after the caller dropped its lock.
    pub fn scan_after<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        key: &[u8],
        tid: Tid,
        mut visit: impl FnMut(&[u8], Tid, u64) -> bool,
    ) {
        let mut id = self.root;
        if id == NONE {
            return;
        }
        for lvl in (1..self.height as usize).rev() {
            // SAFETY: read-only view of a live block.
            let b = unsafe { self.node(pool, id) };
            id = val_at(b, lvl, off(b, inner_child(b, lvl, cmp, key, tid))) as u32;
        }
        // SAFETY: as above.
        let b = unsafe { self.node(pool, id) };
        let (idx, exists) = leaf_lower_bound(b, cmp, key, tid);
        self.walk(pool, id, idx + exists as usize, &mut visit);
    }

    /// Reverse scan, in descending order, of the entries for which
    /// `before(key, tid)` holds, until `visit` returns false. `before` must
    /// be monotone in entry order (true up to some entry, false after it):
    /// "strictly before (k, t)", "key prefix <= u", or always true for a
    /// scan from the end. Leaves have no left links, so after each leaf the
    /// walk descends again for the entries below that leaf's lower
    /// separator: inner entry i routes [separator i, separator i+1), and
    /// separators stay valid bounds when leaves shrink.
    pub fn scan_before<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        before: &mut dyn FnMut(&[u8], Tid) -> bool,
        mut visit: impl FnMut(&[u8], Tid, u64) -> bool,
    ) {
        if self.root == NONE {
            return;
        }
        // Entries at or above `floor` (the lower separator of the last leaf
        // walked) are done.
        let mut floor: Option<(Vec<u8>, Tid)> = None;
        loop {
            let mut below = |k: &[u8], t: Tid| -> bool {
                let under_floor = match &floor {
                    None => true,
                    Some((fk, ft)) => cmp(k, fk).then_with(|| t.cmp(ft)) == Ordering::Less,
                };
                under_floor && before(k, t)
            };
            let mut id = self.root;
            // The lower separator of the leaf reached (None: leftmost path).
            let mut lower: Option<(Vec<u8>, Tid)> = None;
            for lvl in (1..self.height as usize).rev() {
                // SAFETY: read-only view of a live block.
                let b = unsafe { self.node(pool, id) };
                let n = nkeys(b);
                // The last child whose separator is below the bound
                // (separator 0 stands for -infinity).
                let (mut lo, mut hi) = (1, n);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    let o = off(b, mid);
                    if below(key_at(b, lvl, o), tid_at(b, o)) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                let i = lo - 1;
                if i > 0 {
                    let o = off(b, i);
                    lower = Some((key_at(b, lvl, o).to_vec(), tid_at(b, o)));
                }
                id = val_at(b, lvl, off(b, i)) as u32;
            }
            // SAFETY: as above.
            let b = unsafe { self.node(pool, id) };
            let (mut lo, mut hi) = (0, nkeys(b));
            while lo < hi {
                let mid = (lo + hi) / 2;
                let o = off(b, mid);
                if below(key_at(b, 0, o), tid_at(b, o)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            for i in (0..lo).rev() {
                let o = off(b, i);
                if !visit(key_at(b, 0, o), tid_at(b, o), val_at(b, 0, o)) {
                    return;
                }
            }
            match lower {
                None => return,
                Some(l) => floor = Some(l),
            }
        }
    }

    /// Whether some entry's key equals the bound.
    pub fn contains_key<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp_bound: &mut dyn FnMut(&[u8]) -> Ordering,
    ) -> bool {
        let mut first = None;
        let (leaf, idx) = self.seek(pool, cmp_bound);
        self.walk(pool, leaf, idx, &mut |k, _, _| {
            first = Some(cmp_bound(k));
            false
        });
        first == Some(Ordering::Equal)
    }

    /// Atomically ORs `mask` into the value of the leaf entry (key, tid),
    /// if present, and returns its value from before. Callers may hold only
    /// a shared lock: the bytes `mask` touches must be bits that nothing
    /// reading under that lock depends on (a hint such as the hot tier's
    /// reference bit, `hot_tier.rs`), and whoever clears them holds the
    /// lock exclusively. Each byte of the value is written with one atomic
    /// byte operation, so concurrent setters never lose each other's bits.
    pub fn or_value_bits<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        key: &[u8],
        tid: Tid,
        mask: u64,
    ) -> Option<u64> {
        let mut id = self.root;
        if id == NONE {
            return None;
        }
        for lvl in (1..self.height as usize).rev() {
            // SAFETY: read-only view of a live block.
            let b = unsafe { self.node(pool, id) };
            id = val_at(b, lvl, off(b, inner_child(b, lvl, cmp, key, tid))) as u32;
        }
        // SAFETY: as above.
        let b = unsafe { self.node(pool, id) };
        let (idx, exists) = leaf_lower_bound(b, cmp, key, tid);
        if !exists {
            return None;
        }
        let o = off(b, idx);
        let old = val_at(b, 0, o);
        if old & mask == mask {
            return Some(old);
        }
        let base = pool.block(id);
        for (i, m) in mask.to_le_bytes().into_iter().enumerate() {
            if m != 0 {
                // SAFETY: `o + 8 + i` lies inside the live block (a leaf
                // entry's value is bytes 8..16 of the entry); the byte is
                // only ever written atomically while readers share the tree.
                let cell = unsafe { std::sync::atomic::AtomicU8::from_ptr(base.add(o + 8 + i)) };
                cell.fetch_or(m, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Some(old)
    }

    /// Walks the entries in order from the first whose key is not below the
    /// bound (from the first entry when `cmp_bound` is None) and applies
    /// what `step` says to each, until it says `Stop` or `max_visit`
    /// entries were seen. Only leaves that change are rewritten and no
    /// block is taken or given back (leaves may be left sparse, separators
    /// staying valid bounds as in `retain`; `retain` or `repack` packs
    /// them), so it cannot fail and never changes the tree's shape.
    pub fn rewrite_from<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        cmp_bound: Option<&mut dyn FnMut(&[u8]) -> Ordering>,
        max_visit: usize,
        step: &mut dyn FnMut(&[u8], Tid, u64) -> Rewrite,
    ) -> RewriteEnd {
        if self.root == NONE {
            return RewriteEnd::default();
        }
        let (leaf, idx) = match cmp_bound {
            Some(c) => self.seek(pool, c),
            None => (self.leftmost(pool)[0], 0),
        };
        self.rewrite_at(pool, leaf, idx, max_visit, step)
    }

    /// `rewrite_from` from leaf `leaf`, index `idx`. Each leaf's actions
    /// are kept on the stack (a leaf holds at most `MAX_LEAF_ENTRIES`), so
    /// the insert path's pruning allocates nothing.
    fn rewrite_at<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        mut leaf: u32,
        mut idx: usize,
        max_visit: usize,
        step: &mut dyn FnMut(&[u8], Tid, u64) -> Rewrite,
    ) -> RewriteEnd {
        let mut end = RewriteEnd::default();
        let ns = self.ns();
        let mut scratch = [0u8; DYN_BLOCK_SIZE];
        let mut acts = [Rewrite::Keep; MAX_LEAF_ENTRIES];
        let mut budget = max_visit;
        while leaf != NONE {
            // SAFETY: one leaf borrowed at a time; `step` sees its bytes
            // before the leaf is rewritten.
            let b = unsafe { self.node_mut(pool, leaf) };
            let n = nkeys(b);
            let mut nacts = 0;
            let mut any = false;
            let mut stopped = false;
            for i in idx..n {
                if budget == 0 {
                    stopped = true;
                    break;
                }
                let o = off(b, i);
                let a = step(key_at(b, 0, o), tid_at(b, o), val_at(b, 0, o));
                if a == Rewrite::Stop {
                    stopped = true;
                    break;
                }
                budget -= 1;
                end.visited += 1;
                any |= a != Rewrite::Keep;
                acts[nacts] = a;
                nacts += 1;
            }
            if stopped {
                let i = idx + nacts;
                if i < n {
                    let o = off(b, i);
                    end.stopped_at = Some((key_at(b, 0, o).to_vec(), tid_at(b, o)));
                }
            }
            if any {
                scratch[..ns].copy_from_slice(b);
                let old = &scratch[..ns];
                node_init(b, 0);
                set_next(b, next(old));
                for i in 0..n {
                    let act = if i >= idx && i - idx < nacts { acts[i - idx] } else { Rewrite::Keep };
                    match act {
                        Rewrite::Drop => {
                            end.removed += 1;
                            self.key_bytes -= rd16(old, off(old, i) + 6) as u64;
                        }
                        Rewrite::Set(v) => {
                            let at = node_append_raw(b, raw_at(old, 0, i));
                            b[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
                            end.changed += 1;
                        }
                        Rewrite::Keep | Rewrite::Stop => {
                            node_append_raw(b, raw_at(old, 0, i));
                        }
                    }
                }
            }
            if stopped {
                break;
            }
            leaf = next(b);
            idx = 0;
        }
        self.nentries -= end.removed as u64;
        end
    }

    /// Packs the tree into fewer blocks when leaves were left sparse (by
    /// `rewrite_from`, `prune_key`, `prune_range`); see `retain`.
    pub fn repack<P: BlockPool + ?Sized>(&mut self, pool: &mut P) {
        self.repack_to(pool, 100);
    }

    /// `repack` that fills leaves to about `fill_pct` percent, so that
    /// inserts spread over the key range (random keys) find room before
    /// they split: a leaf packed full splits at its first insert, into two
    /// half-empty ones. A leaf is closed at the fill only while the
    /// rebuild's free chain holds a block to spare (see `rebuild`), and
    /// nothing changes unless the result takes fewer blocks than the tree
    /// holds.
    pub fn repack_to<P: BlockPool + ?Sized>(&mut self, pool: &mut P, fill_pct: usize) {
        if self.root == NONE {
            return;
        }
        if self.nentries == 0 {
            self.clear(pool);
            return;
        }
        let limit = self.leaf_limit(fill_pct);
        if let Some(total) = self.rebuild_blocks(pool, limit) {
            if total < self.nblocks as usize {
                self.rebuild(pool, total, limit);
            }
        }
    }

    /// Blocks the leaves would take packed full: the entries' bytes over a
    /// leaf's room. `nblocks` against it says how sparse the tree is.
    pub fn packed_leaf_blocks(&self) -> u64 {
        let bytes = self.key_bytes + self.nentries * (LEAF_FIXED + SLOT) as u64;
        bytes.div_ceil((self.ns() - HDR) as u64)
    }

    /// Bytes a rebuilt leaf may use at `fill_pct` percent.
    fn leaf_limit(&self, fill_pct: usize) -> usize {
        let ns = self.ns();
        (HDR + (ns - HDR) * fill_pct.min(100) / 100).min(ns)
    }

    /// Inner nodes of the tree (every level above the leaves).
    fn inner_nodes<P: BlockPool + ?Sized>(&self, pool: &P, lm: &[u32; MAX_HEIGHT]) -> usize {
        let mut n = 0;
        for &first in lm.iter().take(self.height as usize).skip(1) {
            let mut id = first;
            while id != NONE {
                n += 1;
                // SAFETY: read-only view of a live block.
                id = next(unsafe { self.node(pool, id) });
            }
        }
        n
    }

    /// Removes the entries whose key equals the bound (`cmp_bound(stored)` =
    /// stored.cmp(bound)) and whose TID `dead` accepts, among the first
    /// `max_visit` entries of the key; returns how many. This is the insert
    /// path's counterpart of nbtree's simple deletion: versions of one key
    /// found dead pile up under a hot key, and every probe of that key
    /// would walk them. Leaves shrink in place (`rewrite_from`). The budget
    /// bounds what one insert pays, as nbtree's deletion is bounded by one
    /// page: a key with many live entries (a low-cardinality column) would
    /// otherwise be walked whole by every insert of it.
    pub fn prune_key<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        cmp_bound: &mut dyn FnMut(&[u8]) -> Ordering,
        max_visit: usize,
        dead: &mut dyn FnMut(Tid) -> bool,
    ) -> usize {
        let (leaf, idx) = self.seek(pool, cmp_bound);
        let mut step = |k: &[u8], t: Tid, _v: u64| prune_step(cmp_bound(k) == Ordering::Equal, t, dead);
        self.rewrite_at(pool, leaf, idx, max_visit, &mut step).removed
    }

    /// Removes the entries with `lower <= key <= upper` (by `cmp`) whose
    /// TID `dead` accepts, looking at `max_visit` entries at most; returns
    /// how many. A scan that stepped over dead entries (a range whose low
    /// end is all deleted rows) clears them for the scans after it; the
    /// budget keeps a range with a few dead entries far apart from being
    /// walked whole under the caller's exclusive lock.
    pub fn prune_range<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        lower: &[u8],
        upper: &[u8],
        max_visit: usize,
        dead: &mut dyn FnMut(Tid) -> bool,
    ) -> usize {
        let (leaf, idx) = self.seek(pool, &mut |k| cmp(k, lower));
        let mut step = |k: &[u8], t: Tid, _v: u64| prune_step(cmp(k, upper) != Ordering::Greater, t, dead);
        self.rewrite_at(pool, leaf, idx, max_visit, &mut step).removed
    }

    /// Removes the entries of `batch` whose pos is below `below`; returns
    /// how many. `batch` is sorted by `cmp`, then TID, without duplicates:
    /// the part of a merge's batch that one merge step moved into the
    /// static stage. Only the key range from its first to its last entry is
    /// walked, alongside the batch; an entry of the same key and TID that
    /// came in at or after `below` stays (it is not in the static stage).
    /// Leaves shrink in place as in `rewrite_from`: no block is taken or
    /// given back, so it cannot fail; inserts fill the room again, and the
    /// `retain` at the merge's end packs what is left.
    pub fn remove_batch<P: BlockPool + ?Sized, E>(
        &mut self,
        pool: &mut P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        batch: &[E],
        key_of: fn(&E) -> &[u8],
        tid_of: fn(&E) -> Tid,
        below: u64,
    ) -> usize {
        let Some(first) = batch.first() else {
            return 0;
        };
        if self.root == NONE {
            return 0;
        }
        let (leaf, idx) = self.seek(pool, &mut |k| cmp(k, key_of(first)));
        let mut j = 0;
        let mut step = |k: &[u8], t: Tid, p: u64| {
            while j < batch.len() && cmp(key_of(&batch[j]), k).then_with(|| tid_of(&batch[j]).cmp(&t)) == Ordering::Less {
                j += 1;
                // The batch's keys are allocations of their own, anywhere
                // in memory: ask for one a few entries on (this runs under
                // the caller's exclusive lock).
                if let Some(ahead) = batch.get(j + 4) {
                    crate::static_stage::prefetch(key_of(ahead));
                }
            }
            let Some(e) = batch.get(j) else {
                return Rewrite::Stop;
            };
            if p < below && tid_of(e) == t && crate::keys::bytes_eq(key_of(e), k) {
                Rewrite::Drop
            } else {
                Rewrite::Keep
            }
        };
        self.rewrite_at(pool, leaf, idx, usize::MAX, &mut step).removed
    }

    /// Removes every entry for which `keep` returns false; returns how many.
    /// `keep` sees each entry exactly once, in order.
    ///
    /// Two phases, so that no step can run out of blocks:
    /// 1. Each leaf is compacted in place. Separators in inner nodes stay
    ///    valid bounds even when their leaves shrink or empty, so the tree is
    ///    already correct here, just possibly sparse.
    /// 2. If a dry run shows that repacking needs fewer blocks than the tree
    ///    holds, the tree is rebuilt bottom-up into its own old blocks: inner
    ///    nodes and each leaf, once copied, go on a private free chain that
    ///    the rebuild draws from. Greedy packing of the leaves never needs
    ///    more blocks than the leaves consumed so far (greedy is the minimum
    ///    for an ordered partition, and the old leaves are one such
    ///    partition), so the leaf pass never starves, and the dry run proves
    ///    the inner levels fit in what remains. Blocks are not handed back to
    ///    the pool until the end, because the arena is shared and a block
    ///    given back midway could be taken by another index.
    pub fn retain<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        mut keep: impl FnMut(&[u8], Tid, u64) -> bool,
    ) -> usize {
        self.retain_map(pool, |k, t, v| keep(k, t, v).then_some(v))
    }

    /// `retain` whose test also gives each kept entry its new value: None
    /// removes the entry, Some(v) keeps it with value v.
    pub fn retain_map<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        keep: impl FnMut(&[u8], Tid, u64) -> Option<u64>,
    ) -> usize {
        self.retain_map_to(pool, keep, 100)
    }

    /// `retain` that repacks leaves to about `fill_pct` percent
    /// (`repack_to`): a merge's cleanup leaves room for the inserts that
    /// come while the next merge runs.
    pub fn retain_to<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        mut keep: impl FnMut(&[u8], Tid, u64) -> bool,
        fill_pct: usize,
    ) -> usize {
        self.retain_map_to(pool, |k, t, v| keep(k, t, v).then_some(v), fill_pct)
    }

    fn retain_map_to<P: BlockPool + ?Sized>(
        &mut self,
        pool: &mut P,
        mut keep: impl FnMut(&[u8], Tid, u64) -> Option<u64>,
        fill_pct: usize,
    ) -> usize {
        if self.root == NONE {
            return 0;
        }
        let ns = self.ns();
        let mut scratch = [0u8; DYN_BLOCK_SIZE];
        let mut removed = 0usize;
        let mut leaf = self.leftmost(pool)[0];
        while leaf != NONE {
            // SAFETY: each leaf is borrowed alone; `keep` sees scratch copies.
            let b = unsafe { self.node_mut(pool, leaf) };
            scratch[..ns].copy_from_slice(b);
            let old = &scratch[..ns];
            node_init(b, 0);
            set_next(b, next(old));
            for i in 0..nkeys(old) {
                let o = off(old, i);
                let k = key_at(old, 0, o);
                let val = val_at(old, 0, o);
                if let Some(new_val) = keep(k, tid_at(old, o), val) {
                    let at = node_append_raw(b, raw_at(old, 0, i));
                    if new_val != val {
                        b[at + 8..at + 16].copy_from_slice(&new_val.to_le_bytes());
                    }
                } else {
                    removed += 1;
                    self.key_bytes -= k.len() as u64;
                }
            }
            leaf = next(b);
        }
        self.nentries -= removed as u64;
        if removed == 0 {
            return 0;
        }
        // Emptied, or packed again if that takes fewer blocks.
        self.repack_to(pool, fill_pct);
        removed
    }

    /// Blocks a greedy bottom-up rebuild would use, or None if it would be
    /// deeper than MAX_HEIGHT.
    fn rebuild_blocks<P: BlockPool + ?Sized>(&self, pool: &P, leaf_limit: usize) -> Option<usize> {
        let ns = self.ns();
        let mut pk = [Packer {
            used: 0,
            nodes: 0,
            first_cost: 0,
        }; MAX_HEIGHT];
        // Adds an entry at `lvl`; when it opens a node, that node's first key
        // goes one level up. A level gets a parent only once it has a second
        // node, so the first node's separator is replayed at that moment.
        fn push(
            pk: &mut [Packer; MAX_HEIGHT],
            ns: usize,
            leaf_limit: usize,
            mut lvl: usize,
            cost: usize,
            up_cost: usize,
        ) -> bool {
            let mut cost = cost;
            loop {
                let p = &mut pk[lvl];
                let limit = if lvl == 0 { leaf_limit } else { ns };
                if p.nodes != 0 && p.used + cost <= limit {
                    p.used += cost;
                    return true;
                }
                p.nodes += 1;
                p.used = HDR + cost;
                if p.nodes == 1 {
                    p.first_cost = up_cost;
                    return true;
                }
                if lvl + 1 >= MAX_HEIGHT {
                    return false;
                }
                if p.nodes == 2 {
                    let first = p.first_cost;
                    if !push(pk, ns, ns, lvl + 1, first, first) {
                        return false;
                    }
                }
                lvl += 1;
                cost = up_cost;
            }
        }
        // The rebuild's free chain, as `rebuild` keeps it: the inner nodes,
        // then each old leaf as its entries are reached, less the new
        // leaves taken so far.
        let lm = self.leftmost(pool);
        let mut chain = self.inner_nodes(pool, &lm);
        let mut leaf = lm[0];
        while leaf != NONE {
            // SAFETY: read-only view of a live block.
            let b = unsafe { self.node(pool, leaf) };
            chain += 1;
            for i in 0..nkeys(b) {
                let klen = rd16(b, off(b, i) + 6);
                let limit = leaf_limit_now(ns, leaf_limit, chain - pk[0].nodes as usize);
                if !push(
                    &mut pk,
                    ns,
                    limit,
                    0,
                    LEAF_FIXED + klen + SLOT,
                    INNER_FIXED + klen + SLOT,
                ) {
                    return None;
                }
            }
            leaf = next(b);
        }
        let mut total = 0;
        for p in &pk {
            total += p.nodes as usize;
            if p.nodes <= 1 {
                break;
            }
        }
        Some(total)
    }

    /// Repacks the tree into its own blocks (see `retain`); `total` is the
    /// block count `rebuild_blocks` computed.
    fn rebuild<P: BlockPool + ?Sized>(&mut self, pool: &mut P, total: usize, leaf_limit: usize) {
        let ns = self.ns();
        let lm = self.leftmost(pool);
        let mut chain = NONE;
        // Blocks on the chain (`rebuild_blocks` follows the same count).
        let mut spare = 0usize;
        for &first in lm.iter().take(self.height as usize).skip(1) {
            let mut id = first;
            while id != NONE {
                // SAFETY: read-only view of a live block.
                let nx = next(unsafe { self.node(pool, id) });
                self.push_chain(&*pool, &mut chain, id);
                spare += 1;
                id = nx;
            }
        }

        // Leaves.
        let mut scratch = [0u8; DYN_BLOCK_SIZE];
        let (mut first_out, mut out, mut count, mut used) = (NONE, NONE, 0usize, 0usize);
        let mut leaf = lm[0];
        while leaf != NONE {
            // SAFETY: copied, then never read again through `leaf`.
            scratch[..ns].copy_from_slice(unsafe { self.node(pool, leaf) });
            let old = &scratch[..ns];
            let nx = next(old);
            self.push_chain(&*pool, &mut chain, leaf);
            spare += 1;
            for i in 0..nkeys(old) {
                let raw = raw_at(old, 0, i);
                let limit = leaf_limit_now(ns, leaf_limit, spare);
                // SAFETY: `out` is a rebuilt leaf, borrowed alone.
                let fits = out != NONE
                    && ns - free_space(unsafe { self.node(pool, out) }) + raw.len() + SLOT <= limit;
                if !fits {
                    let id = self.pop_chain(&*pool, &mut chain);
                    spare -= 1;
                    // SAFETY: taken from the dead chain.
                    node_init(unsafe { self.node_mut(pool, id) }, 0);
                    if out == NONE {
                        first_out = id;
                    } else {
                        // SAFETY: the previous output leaf, borrowed alone.
                        set_next(unsafe { self.node_mut(pool, out) }, id);
                    }
                    out = id;
                    count += 1;
                    used += 1;
                }
                // SAFETY: as above.
                node_append_raw(unsafe { self.node_mut(pool, out) }, raw);
            }
            leaf = nx;
        }

        // Inner levels: one entry per child, keyed by the child's first key.
        let mut lvl = 1;
        let mut first = first_out;
        while count > 1 {
            let (mut child, mut lfirst, mut lout, mut lcount) = (first, NONE, NONE, 0usize);
            while child != NONE {
                // SAFETY: child level is complete; read-only.
                let cb = unsafe { self.node(pool, child) };
                let o = off(cb, 0);
                let e = Ent {
                    key: key_at(cb, lvl - 1, o),
                    tid: tid_at(cb, o),
                    val: child as u64,
                };
                // SAFETY: `lout` is on this level, distinct from `child`.
                let fits =
                    lout != NONE && free_space(unsafe { self.node(pool, lout) }) >= e.cost(lvl);
                if !fits {
                    let id = self.pop_chain(&*pool, &mut chain);
                    // SAFETY: taken from the dead chain.
                    node_init(unsafe { self.node_mut(pool, id) }, lvl);
                    if lout == NONE {
                        lfirst = id;
                    } else {
                        // SAFETY: previous node of this level, borrowed alone.
                        set_next(unsafe { self.node_mut(pool, lout) }, id);
                    }
                    lout = id;
                    lcount += 1;
                    used += 1;
                }
                // SAFETY: as above.
                let b = unsafe { self.node_mut(pool, lout) };
                node_insert(b, lvl, nkeys(b), &e);
                child = next(cb);
            }
            first = lfirst;
            count = lcount;
            lvl += 1;
        }
        debug_assert_eq!(used, total);
        while chain != NONE {
            let id = self.pop_chain(&*pool, &mut chain);
            pool.free(id);
        }
        self.root = first;
        self.height = lvl as u32;
        self.nblocks = used as u32;
    }

    /// The rebuild's private free chain links dead blocks through their
    /// first 4 bytes.
    fn push_chain<P: BlockPool + ?Sized>(&self, pool: &P, chain: &mut u32, id: u32) {
        // SAFETY: `id` is dead: its contents were read or copied already.
        let b = unsafe { self.node_mut(pool, id) };
        wr32(b, 0, *chain);
        *chain = id;
    }

    fn pop_chain<P: BlockPool + ?Sized>(&self, pool: &P, chain: &mut u32) -> u32 {
        let id = *chain;
        // `retain` proves the chain suffices before rebuilding.
        assert!(
            id != NONE,
            "dynamic stage rebuild ran out of its own blocks"
        );
        // SAFETY: a dead block on the chain.
        *chain = rd32(unsafe { self.node(pool, id) }, 0);
        id
    }

    /// Returns every block to the pool.
    pub fn clear<P: BlockPool + ?Sized>(&mut self, pool: &mut P) {
        if self.root != NONE {
            let lm = self.leftmost(pool);
            for &first in lm.iter().take(self.height as usize) {
                let mut id = first;
                while id != NONE {
                    // SAFETY: read before the block is freed.
                    let nx = next(unsafe { self.node(pool, id) });
                    pool.free(id);
                    id = nx;
                }
            }
        }
        *self = DynTree {
            node_size: self.node_size,
            ..DynTree::new()
        };
    }

    /// Structural check for `pg_hybrid.verify` and tests: node headers and
    /// slots in bounds, entries strictly ordered within and across nodes,
    /// separators bounding their subtrees, sibling chains matching the tree
    /// order, and the header counters. Never panics on a corrupt tree
    /// unless the pool itself rejects a block id.
    pub fn verify<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
    ) -> Result<(), String> {
        if self.root == NONE {
            if self.height != 0 || self.nentries != 0 || self.nblocks != 0 || self.key_bytes != 0 {
                return Err(format!("empty tree with nonzero header {self:?}"));
            }
            return Ok(());
        }
        if self.height == 0 || self.height as usize > MAX_HEIGHT {
            return Err(format!("bad height {}", self.height));
        }
        let mut st = VerifyState {
            chain_next: vec![NONE; self.height as usize],
            seen_first: vec![false; self.height as usize],
            blocks: 0,
            entries: 0,
            key_bytes: 0,
            last: None,
        };
        self.verify_node(
            pool,
            cmp,
            self.root,
            self.height as usize - 1,
            None,
            None,
            &mut st,
        )?;
        if st.chain_next.iter().any(|&n| n != NONE) {
            return Err("sibling chain continues past the last node of a level".into());
        }
        if st.blocks != self.nblocks as u64
            || st.entries != self.nentries
            || st.key_bytes != self.key_bytes
        {
            return Err(format!(
                "header says {} blocks {} entries {} key bytes, tree has {} {} {}",
                self.nblocks, self.nentries, self.key_bytes, st.blocks, st.entries, st.key_bytes
            ));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn verify_node<P: BlockPool + ?Sized>(
        &self,
        pool: &P,
        cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering,
        id: u32,
        lvl: usize,
        lo: Option<(&[u8], Tid)>,
        hi: Option<(&[u8], Tid)>,
        st: &mut VerifyState,
    ) -> Result<(), String> {
        // SAFETY: read-only view; ids come from the tree and the pool vouches
        // for them.
        let b = unsafe { self.node(pool, id) };
        let ns = b.len();
        if rd16(b, 6) != NODE_MAGIC || level(b) != lvl {
            return Err(format!(
                "block {id}: bad magic or level {} (expected {lvl})",
                level(b)
            ));
        }
        let n = nkeys(b);
        let ds = data_start(b);
        if HDR + SLOT * n > ds || ds > ns {
            return Err(format!(
                "block {id}: slots overlap data ({n} slots, data at {ds})"
            ));
        }
        if st.seen_first[lvl] && st.chain_next[lvl] != id {
            return Err(format!(
                "block {id}: level {lvl} sibling chain out of order"
            ));
        }
        st.seen_first[lvl] = true;
        st.chain_next[lvl] = next(b);
        st.blocks += 1;
        if lvl > 0 && n == 0 {
            return Err(format!("block {id}: empty inner node"));
        }
        let f = fixed(lvl);
        let mut used = 0;
        for i in 0..n {
            let o = off(b, i);
            if o < ds || o + f > ns || o + f + rd16(b, o + 6) > ns {
                return Err(format!("block {id}: entry {i} out of bounds"));
            }
            used += f + rd16(b, o + 6);
        }
        if used != ns - ds {
            return Err(format!(
                "block {id}: data area holds {} bytes, entries {used}",
                ns - ds
            ));
        }
        let hl = hint_len(b);
        if lvl > 0 && hl != NO_HINTS || lvl == 0 && hl > MAX_PREFIX {
            return Err(format!("block {id}: bad hint prefix length {hl}"));
        }
        if lvl == 0 {
            let prefix = &b[PREFIX_AT..PREFIX_AT + hl];
            for i in 0..n {
                let k = key_at(b, 0, off(b, i));
                if !k.starts_with(prefix) || slot_hint(b, i) != hint_of(k, hl) {
                    return Err(format!("block {id}: entry {i} does not match its key hint"));
                }
            }
        }
        let below =
            |cmp: &mut dyn FnMut(&[u8], &[u8]) -> Ordering, a: (&[u8], Tid), b: (&[u8], Tid)| {
                cmp(a.0, b.0).then(a.1.cmp(&b.1)) == Ordering::Less
            };
        let entry = |i: usize| {
            let o = off(b, i);
            (key_at(b, lvl, o), tid_at(b, o))
        };
        for i in 0..n {
            let e = entry(i);
            // Separator 0 of an inner node stands for -infinity; not checked.
            if lvl > 0 && i == 0 {
                continue;
            }
            if let Some(l) = lo {
                if below(cmp, e, l) {
                    return Err(format!("block {id}: entry {i} below its lower bound"));
                }
            }
            if let Some(h) = hi {
                if !below(cmp, e, h) {
                    return Err(format!("block {id}: entry {i} not below its upper bound"));
                }
            }
            if i > usize::from(lvl > 0) && !below(cmp, entry(i - 1), e) {
                return Err(format!(
                    "block {id}: entries {} and {i} out of order",
                    i - 1
                ));
            }
        }
        if lvl == 0 {
            for i in 0..n {
                let e = entry(i);
                if let Some((lk, lt)) = &st.last {
                    if !below(cmp, (lk.as_slice(), *lt), e) {
                        return Err(format!(
                            "block {id}: entry {i} not after the previous leaf's last"
                        ));
                    }
                }
                st.last = Some((e.0.to_vec(), e.1));
                st.key_bytes += e.0.len() as u64;
            }
            st.entries += n as u64;
            return Ok(());
        }
        for i in 0..n {
            let child = val_at(b, lvl, off(b, i)) as u32;
            let clo = if i == 0 { lo } else { Some(entry(i)) };
            let chi = if i + 1 < n { Some(entry(i + 1)) } else { hi };
            self.verify_node(pool, cmp, child, lvl - 1, clo, chi, st)?;
        }
        Ok(())
    }
}

struct VerifyState {
    chain_next: Vec<u32>,
    seen_first: Vec<bool>,
    blocks: u64,
    entries: u64,
    key_bytes: u64,
    last: Option<(Vec<u8>, Tid)>,
}

// ------------------------------------------------------------ test pool

/// Heap-backed `BlockPool` with a block limit, for tests. Freed blocks are
/// poisoned and any access to them panics, to catch use-after-free.
pub struct VecPool {
    blocks: Vec<Box<[UnsafeCell<u64>]>>,
    live: Vec<bool>,
    free_ids: Vec<u32>,
    nlive: usize,
    limit: usize,
}

impl VecPool {
    pub fn new(limit_blocks: usize) -> Self {
        VecPool {
            blocks: Vec::new(),
            live: Vec::new(),
            free_ids: Vec::new(),
            nlive: 0,
            limit: limit_blocks,
        }
    }
    /// Blocks currently handed out.
    pub fn allocated(&self) -> usize {
        self.nlive
    }
    pub fn set_limit(&mut self, limit_blocks: usize) {
        self.limit = limit_blocks;
    }
}

// SAFETY: each block is its own boxed slice of DYN_BLOCK_SIZE bytes, u64 so
// 8-aligned, never moved or freed while the pool lives; `block` refuses ids
// that are not live.
unsafe impl BlockPool for VecPool {
    fn alloc(&mut self) -> Option<u32> {
        if self.nlive >= self.limit {
            return None;
        }
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None => {
                self.blocks.push(
                    (0..DYN_BLOCK_SIZE / 8)
                        .map(|_| UnsafeCell::new(0))
                        .collect(),
                );
                self.live.push(false);
                (self.blocks.len() - 1) as u32
            }
        };
        self.live[id as usize] = true;
        self.nlive += 1;
        Some(id)
    }

    fn free(&mut self, id: u32) {
        assert!(self.live[id as usize], "double free of block {id}");
        self.live[id as usize] = false;
        self.nlive -= 1;
        for w in self.blocks[id as usize].iter() {
            // SAFETY: no references into a block outlive its free.
            unsafe { *w.get() = 0xA5A5_A5A5_A5A5_A5A5 };
        }
        self.free_ids.push(id);
    }

    fn block(&self, id: u32) -> *mut u8 {
        assert!(
            self.live.get(id as usize) == Some(&true),
            "access to block {id}, which is not allocated"
        );
        UnsafeCell::raw_get(self.blocks[id as usize].as_ptr()) as *mut u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::ops::Bound::{Excluded, Included, Unbounded};

    /// Keys ordered by length, then bytes: unlike memcmp, so the tests fail
    /// if the tree ever compares keys without the caller's comparator.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct K(Vec<u8>);
    impl Ord for K {
        fn cmp(&self, o: &Self) -> Ordering {
            kcmp(&self.0, &o.0)
        }
    }
    impl PartialOrd for K {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    fn kcmp(a: &[u8], b: &[u8]) -> Ordering {
        if BYTEWISE.with(|w| w.get()) {
            return a.cmp(b);
        }
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }

    thread_local! {
        /// The run in this thread inserts with `insert_bytewise`, so the
        /// comparator (tree and oracle) is byte order.
        static BYTEWISE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    type Oracle = BTreeMap<(K, Tid), u64>;

    fn contents(t: &DynTree, pool: &VecPool) -> Vec<(Vec<u8>, Tid, u64)> {
        let mut v = Vec::new();
        t.scan_all(pool, |k, tid, p| {
            v.push((k.to_vec(), tid, p));
            true
        });
        v
    }

    fn oracle_contents(o: &Oracle) -> Vec<(Vec<u8>, Tid, u64)> {
        o.iter().map(|((k, t), p)| (k.0.clone(), *t, *p)).collect()
    }

    fn check(t: &DynTree, pool: &VecPool, o: &Oracle) {
        t.verify(pool, &mut kcmp).unwrap();
        assert_eq!(pool.allocated(), t.nblocks as usize);
        assert_eq!(t.nentries as usize, o.len());
        assert_eq!(contents(t, pool), oracle_contents(o));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Ins(Vec<u8>, u32, u16),
        /// Drop entries with pos below a fraction (/256) of the inserts so far.
        Merge(u8),
        /// Drop entries whose TID block is in a set (VACUUM of dead tuples).
        Vacuum(u8),
        Scan(Vec<u8>, usize),
        After(Vec<u8>, u32, u16),
        /// Reverse scan before (key, tid); an empty key means from the end.
        Before(Vec<u8>, u32, u16),
        Contains(Vec<u8>),
        /// Drop the entries of one key whose TID block/offset hits a mask.
        Prune(Vec<u8>, u8),
        /// The same over a key range (bounds in either order: empty range).
        PruneRange(Vec<u8>, Vec<u8>, u8),
        /// One step of a merge: of the entries with pos below a fraction
        /// (/256) of the inserts so far, a slice (from/len in /256 of them)
        /// moved to the static stage.
        MergeStep(u8, u8, u8),
        /// Repack leaves to a fill of 30..=100 percent.
        Repack(u8),
        Limit(usize),
    }

    fn arb_key(max_len: usize, big: bool) -> BoxedStrategy<Vec<u8>> {
        let small = (0u8..4, 0usize..6).prop_map(|(b, n)| vec![b; n]);
        let long =
            (any::<u8>(), prop::collection::vec(0u8..3, 0..max_len)).prop_map(move |(b, mut v)| {
                v.insert(0, b % 4);
                v.truncate(max_len);
                v
            });
        if big {
            let huge = (0u8..3, 2690usize..=2700).prop_map(|(b, n)| vec![b; n]);
            prop_oneof![3 => small, 3 => long, 1 => huge].boxed()
        } else {
            prop_oneof![small, long].boxed()
        }
    }

    fn arb_op(max_len: usize, big: bool) -> impl Strategy<Value = Op> {
        let k = || arb_key(max_len, big);
        prop_oneof![
            80 => (k(), 0u32..3, 0u16..4).prop_map(|(k, b, o)| Op::Ins(k, b, o)),
            1 => any::<u8>().prop_map(Op::Merge),
            1 => any::<u8>().prop_map(Op::Vacuum),
            3 => (k(), 0usize..40).prop_map(|(k, n)| Op::Scan(k, n)),
            2 => (k(), 0u32..3, 0u16..4).prop_map(|(k, b, o)| Op::After(k, b, o)),
            3 => (k(), 0u32..3, 0u16..4).prop_map(|(k, b, o)| Op::Before(k, b, o)),
            2 => k().prop_map(Op::Contains),
            6 => (k(), any::<u8>()).prop_map(|(k, m)| Op::Prune(k, m)),
            3 => (k(), k(), any::<u8>()).prop_map(|(a, b, m)| Op::PruneRange(a, b, m)),
            2 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(c, f, n)| Op::MergeStep(c, f, n)),
            1 => (30u8..=100).prop_map(Op::Repack),
            1 => (1usize..60).prop_map(Op::Limit),
        ]
    }

    fn run(node_size: usize, ops: Vec<Op>) {
        run_with(node_size, ops, false);
    }

    fn run_with(node_size: usize, ops: Vec<Op>, bytewise: bool) {
        BYTEWISE.with(|w| w.set(bytewise));
        let mut pool = VecPool::new(usize::MAX);
        let mut t = DynTree::with_node_size(node_size);
        let mut o = Oracle::new();
        let mut inserted = 0u64;
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Ins(k, b, off) => {
                    let tid = Tid::new(b, off);
                    let before = t;
                    inserted += 1;
                    let done = if bytewise {
                        t.insert_bytewise(&mut pool, &k, tid, inserted)
                    } else {
                        t.insert(&mut pool, &mut kcmp, &k, tid, inserted)
                    };
                    match done {
                        Ok(()) => {
                            o.entry((K(k), tid)).or_insert(inserted);
                        }
                        Err(DynError::OutOfMemory) => {
                            assert_eq!(t, before, "header changed by a failed insert");
                            check(&t, &pool, &o);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Merge(frac) => {
                    let upto = inserted * frac as u64 / 256;
                    let n = if frac % 2 == 0 { t.retain(&mut pool, |_, _, p| p > upto) } else { t.retain_to(&mut pool, |_, _, p| p > upto, 30 + frac as usize % 71) };
                    let before = o.len();
                    o.retain(|_, p| *p > upto);
                    assert_eq!(n, before - o.len());
                    check(&t, &pool, &o);
                }
                Op::MergeStep(frac, from, len) => {
                    let below = inserted * frac as u64 / 256 + 1;
                    let batch: Vec<(K, Tid)> = o.iter().filter(|(_, p)| **p < below).map(|(e, _)| e.clone()).collect();
                    let a = batch.len() * from as usize / 256;
                    let b = (a + batch.len() * len as usize / 256 + 1).min(batch.len());
                    let slice = &batch[a..b];
                    fn key_of(e: &(K, Tid)) -> &[u8] {
                        &e.0 .0
                    }
                    fn tid_of(e: &(K, Tid)) -> Tid {
                        e.1
                    }
                    let n = t.remove_batch(&mut pool, &mut kcmp, slice, key_of, tid_of, below);
                    for e in slice {
                        o.remove(e);
                    }
                    assert_eq!(n, slice.len());
                    check(&t, &pool, &o);
                }
                Op::Repack(fill) => {
                    let before = t.nblocks;
                    t.repack_to(&mut pool, fill as usize);
                    assert!(t.nblocks <= before);
                    check(&t, &pool, &o);
                }
                Op::Vacuum(mask) => {
                    let dead =
                        |tid: Tid| mask & (1 << ((tid.block * 4 + tid.offset as u32) % 8)) != 0;
                    let n = t.retain(&mut pool, |_, tid, _| !dead(tid));
                    let before = o.len();
                    o.retain(|(_, tid), _| !dead(*tid));
                    assert_eq!(n, before - o.len());
                    check(&t, &pool, &o);
                }
                Op::Scan(k, limit) => {
                    let mut got = Vec::new();
                    let visit = |key: &[u8], tid, p| {
                        got.push((key.to_vec(), tid, p));
                        got.len() < limit
                    };
                    if bytewise {
                        t.scan_bytewise(&pool, &k, visit);
                    } else {
                        t.scan(&pool, &mut |s| kcmp(s, &k), visit);
                    }
                    let want: Vec<_> = o
                        .range((Included((K(k.clone()), Tid::new(0, 0))), Unbounded))
                        .take(limit.max(1))
                        .map(|((k, t), p)| (k.0.clone(), *t, *p))
                        .collect();
                    assert_eq!(got, want, "scan from {k:?}");
                }
                Op::After(k, b, off) => {
                    let tid = Tid::new(b, off);
                    let mut got = Vec::new();
                    let visit = |key: &[u8], tid, p| {
                        got.push((key.to_vec(), tid, p));
                        got.len() < 10
                    };
                    if bytewise {
                        t.scan_after_bytewise(&pool, &k, tid, visit);
                    } else {
                        t.scan_after(&pool, &mut kcmp, &k, tid, visit);
                    }
                    let want: Vec<_> = o
                        .range((Excluded((K(k.clone()), tid)), Unbounded))
                        .take(10)
                        .map(|((k, t), p)| (k.0.clone(), *t, *p))
                        .collect();
                    assert_eq!(got, want);
                }
                Op::Before(k, b, off) => {
                    let tid = Tid::new(b, off);
                    let from = (!k.is_empty()).then_some((&k[..], tid));
                    let mut got = Vec::new();
                    // off 3: "key <= k" (a bound on keys alone, as a
                    // backward scan's upper bound is).
                    let keys_only = off == 3;
                    let mut before = |key: &[u8], t: Tid| match from {
                        None => true,
                        Some((fk, _)) if keys_only => kcmp(key, fk) != Ordering::Greater,
                        Some((fk, ft)) => kcmp(key, fk).then(t.cmp(&ft)) == Ordering::Less,
                    };
                    t.scan_before(&pool, &mut kcmp, &mut before, |key, tid, p| {
                        got.push((key.to_vec(), tid, p));
                        got.len() < 25
                    });
                    let upper = match from {
                        Some(_) if keys_only => Included((K(k.clone()), Tid::new(u32::MAX, u16::MAX))),
                        Some(_) => Excluded((K(k.clone()), tid)),
                        None => Unbounded,
                    };
                    let want: Vec<_> = o
                        .range((Unbounded, upper))
                        .rev()
                        .take(25)
                        .map(|((k, t), p)| (k.0.clone(), *t, *p))
                        .collect();
                    assert_eq!(got, want, "scan before {k:?}");
                }
                Op::Contains(k) => {
                    let want = o
                        .range((Included((K(k.clone()), Tid::new(0, 0))), Unbounded))
                        .next()
                        .is_some_and(|((x, _), _)| x.0 == k);
                    assert_eq!(t.contains_key(&pool, &mut |s| kcmp(s, &k)), want);
                }
                Op::Prune(k, mask) => {
                    let dead =
                        |tid: Tid| mask & (1 << ((tid.block * 4 + tid.offset as u32) % 8)) != 0;
                    let blocks = t.nblocks;
                    let n = t.prune_key(&mut pool, &mut |s| kcmp(s, &k), usize::MAX, &mut |tid| dead(tid));
                    let before = o.len();
                    o.retain(|(key, tid), _| key.0 != k || !dead(*tid));
                    assert_eq!(n, before - o.len(), "prune of {k:?}");
                    assert_eq!(t.nblocks, blocks, "prune changed the tree's blocks");
                    check(&t, &pool, &o);
                }
                Op::PruneRange(lo, hi, mask) if mask % 5 == 0 => {
                    // A budget of a few entries: a prefix of the range.
                    let budget = (mask / 5) as usize % 7;
                    let dead = |tid: Tid| mask & (1 << ((tid.block * 4 + tid.offset as u32) % 8)) != 0 || mask == 0;
                    let inside = |k: &[u8]| kcmp(k, &lo) != Ordering::Less && kcmp(k, &hi) != Ordering::Greater;
                    let victims: Vec<(K, Tid)> = o
                        .keys()
                        .filter(|(k, _)| inside(&k.0))
                        .take(budget)
                        .filter(|(_, t)| dead(*t))
                        .cloned()
                        .collect();
                    let n = t.prune_range(&mut pool, &mut kcmp, &lo, &hi, budget, &mut |tid| dead(tid));
                    for v in &victims {
                        o.remove(v);
                    }
                    assert_eq!(n, victims.len(), "budgeted prune of {lo:?}..={hi:?}");
                    check(&t, &pool, &o);
                }
                Op::PruneRange(lo, hi, mask) => {
                    let dead =
                        |tid: Tid| mask & (1 << ((tid.block * 4 + tid.offset as u32) % 8)) != 0;
                    let blocks = t.nblocks;
                    let n = t.prune_range(&mut pool, &mut kcmp, &lo, &hi, usize::MAX, &mut |tid| dead(tid));
                    let before = o.len();
                    let inside = |k: &[u8]| kcmp(k, &lo) != Ordering::Less && kcmp(k, &hi) != Ordering::Greater;
                    o.retain(|(key, tid), _| !inside(&key.0) || !dead(*tid));
                    assert_eq!(n, before - o.len(), "prune of {lo:?}..={hi:?}");
                    assert_eq!(t.nblocks, blocks, "prune changed the tree's blocks");
                    check(&t, &pool, &o);
                }
                Op::Limit(n) => pool.set_limit(pool.allocated() + n),
            }
            if step % 32 == 0 {
                check(&t, &pool, &o);
            }
        }
        check(&t, &pool, &o);
        t.clear(&mut pool);
        assert_eq!(pool.allocated(), 0);
        assert_eq!(t, DynTree::with_node_size(node_size));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Small nodes: deep trees, many splits, keys of 0..300 bytes.
        #[test]
        fn oracle_small_nodes(ops in prop::collection::vec(arb_op(300, false), 1..1500)) {
            run(1024, ops);
        }

        /// Real block size with some 2700-byte keys (three to a node).
        #[test]
        fn oracle_full_nodes(ops in prop::collection::vec(arb_op(300, true), 1..800)) {
            run(DYN_BLOCK_SIZE, ops);
        }

        /// The smallest nodes and tiny keys.
        #[test]
        fn oracle_tiny_nodes(ops in prop::collection::vec(arb_op(40, false), 1..1500)) {
            run(MIN_NODE_SIZE, ops);
        }

        /// Byte order through the leaves' key hints: keys of a small
        /// alphabet share prefixes and hints, so prefixes shrink and
        /// searches meet runs of equal hints.
        #[test]
        fn oracle_bytewise_small_nodes(ops in prop::collection::vec(arb_op(300, false), 1..1500)) {
            run_with(1024, ops, true);
        }

        #[test]
        fn oracle_bytewise_full_nodes(ops in prop::collection::vec(arb_op(300, true), 1..800)) {
            run_with(DYN_BLOCK_SIZE, ops, true);
        }

        #[test]
        fn oracle_bytewise_tiny_nodes(ops in prop::collection::vec(arb_op(40, false), 1..1500)) {
            run_with(MIN_NODE_SIZE, ops, true);
        }
    }

    /// Random 8-byte keys (an int8 column's encoding) inserted bytewise and
    /// plainly give the same tree contents, and searches find each one.
    #[test]
    fn bytewise_random_int8_keys() {
        let mut rng = crate::test_rng::Rng(0x9E37_79B9_7F4A_7C15);
        let (mut a, mut b) = (DynTree::new(), DynTree::new());
        let (mut pa, mut pb) = (VecPool::new(usize::MAX), VecPool::new(usize::MAX));
        let mut keys = Vec::new();
        for i in 0..60_000u32 {
            // Keys spread like the probe suite's (about 2^52 apart), some
            // repeated with another TID.
            let k = if i % 7 == 0 && !keys.is_empty() {
                keys[rng.below(keys.len() as u64) as usize]
            } else {
                (rng.next() >> 12).to_be_bytes()
            };
            keys.push(k);
            let tid = Tid::new(i / 100, (i % 100) as u16 + 1);
            a.insert_bytewise(&mut pa, &k, tid, i as u64).unwrap();
            b.insert(&mut pb, &mut |x: &[u8], y: &[u8]| x.cmp(y), &k, tid, i as u64).unwrap();
        }
        a.verify(&pa, &mut |x: &[u8], y: &[u8]| x.cmp(y)).unwrap();
        let all = |t: &DynTree, p: &VecPool| {
            let mut v = Vec::new();
            t.scan_all(p, |k, tid, pos| {
                v.push((k.to_vec(), tid, pos));
                true
            });
            v
        };
        assert_eq!(all(&a, &pa), all(&b, &pb));
        // Inserting an entry again keeps it once.
        let n = a.nentries;
        a.insert_bytewise(&mut pa, &keys[0], Tid::new(0, 1), 99).unwrap();
        assert_eq!(a.nentries, n);
    }

    #[test]
    fn key_limits() {
        let mut pool = VecPool::new(100);
        let mut t = DynTree::new();
        assert!(t.max_key_len() >= 2700);
        let k = vec![7u8; t.max_key_len()];
        for i in 0..50 {
            t.insert(
                &mut pool,
                &mut |a: &[u8], b: &[u8]| a.cmp(b),
                &k,
                Tid::new(i, 1),
                0,
            )
            .unwrap();
        }
        t.verify(&pool, &mut |a: &[u8], b: &[u8]| a.cmp(b)).unwrap();
        let long = vec![0u8; t.max_key_len() + 1];
        assert_eq!(
            t.insert(
                &mut pool,
                &mut |a: &[u8], b: &[u8]| a.cmp(b),
                &long,
                Tid::new(0, 1),
                0
            ),
            Err(DynError::KeyTooLong)
        );
        assert_eq!(std::mem::size_of::<DynTree>(), 32);
    }

    fn fill(order: impl Iterator<Item = u64>) -> (DynTree, VecPool) {
        let mut pool = VecPool::new(usize::MAX);
        let mut t = DynTree::new();
        for i in order {
            let k = i.to_be_bytes();
            t.insert(
                &mut pool,
                &mut |a: &[u8], b: &[u8]| a.cmp(b),
                &k,
                Tid::new(i as u32, 1),
                i,
            )
            .unwrap();
        }
        (t, pool)
    }

    #[test]
    fn ascending_fills_leaves() {
        let n = 100_000u64;
        let (t, pool) = fill(0..n);
        t.verify(&pool, &mut |a: &[u8], b: &[u8]| a.cmp(b)).unwrap();
        // 8-byte keys cost 26 bytes: 314 per full leaf.
        let per_leaf = (DYN_BLOCK_SIZE - HDR) / (LEAF_FIXED + 8 + SLOT);
        let min_leaves = n.div_ceil(per_leaf as u64);
        assert!(
            (t.nblocks as u64) < min_leaves * 102 / 100,
            "{} blocks for {min_leaves} leaves",
            t.nblocks
        );
        let mut prev = None;
        let mut count = 0;
        t.scan_all(&pool, |k, _, p| {
            assert!(prev < Some(p));
            assert_eq!(k, p.to_be_bytes());
            prev = Some(p);
            count += 1;
            true
        });
        assert_eq!(count, n);
    }

    #[test]
    fn descending_and_random() {
        let (t, pool) = fill((0..20_000u64).rev());
        t.verify(&pool, &mut |a: &[u8], b: &[u8]| a.cmp(b)).unwrap();
        assert_eq!(t.nentries, 20_000);
        let (t, pool) = fill((0..20_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40));
        t.verify(&pool, &mut |a: &[u8], b: &[u8]| a.cmp(b)).unwrap();
    }

    #[test]
    fn duplicate_keys_many_tids() {
        let mut pool = VecPool::new(usize::MAX);
        let mut t = DynTree::with_node_size(512);
        let mut c = |a: &[u8], b: &[u8]| a.cmp(b);
        for i in (0..3000u32).rev() {
            t.insert(
                &mut pool,
                &mut c,
                b"same",
                Tid::new(i / 7, (i % 7) as u16 + 1),
                i as u64,
            )
            .unwrap();
            t.insert(
                &mut pool,
                &mut c,
                b"same",
                Tid::new(i / 7, (i % 7) as u16 + 1),
                99_999,
            )
            .unwrap();
        }
        t.verify(&pool, &mut c).unwrap();
        assert_eq!(t.nentries, 3000);
        let mut tids = Vec::new();
        t.scan(&pool, &mut |k| k.cmp(b"same"), |_, tid, p| {
            assert_ne!(p, 99_999, "duplicate insert must keep the first pos");
            tids.push(tid);
            true
        });
        assert_eq!(tids.len(), 3000);
        assert!(tids.windows(2).all(|w| w[0] < w[1]));
        assert!(t.contains_key(&pool, &mut |k| k.cmp(b"same")));
        assert!(!t.contains_key(&pool, &mut |k| k.cmp(b"sam")));
        assert!(!t.contains_key(&pool, &mut |k| k.cmp(b"samf")));
    }

    /// A hot key's run spans many leaves between other keys: pruning it
    /// removes exactly its dead TIDs, leaves the neighbours alone, may
    /// empty whole leaves, and the tree stays searchable and insertable.
    #[test]
    fn prune_key_across_leaves() {
        let mut pool = VecPool::new(usize::MAX);
        let mut t = DynTree::with_node_size(512);
        let mut c = |a: &[u8], b: &[u8]| a.cmp(b);
        for i in 0..3000u32 {
            let tid = Tid::new(i, 1);
            t.insert(&mut pool, &mut c, b"hot", tid, i as u64).unwrap();
            t.insert(&mut pool, &mut c, b"aaa", tid, i as u64).unwrap();
            t.insert(&mut pool, &mut c, b"zzz", tid, i as u64).unwrap();
        }
        let blocks = t.nblocks;
        // Everything below 2900 is dead: whole leaves of the run empty.
        // A budget stops the walk: 100 entries looked at, none dead among them.
        let mut looked = 0;
        let n = t.prune_key(&mut pool, &mut |k| k.cmp(b"hot"), 100, &mut |tid| {
            looked += 1;
            tid.block >= 2900
        });
        assert_eq!((n, looked), (0, 100));
        let n = t.prune_key(&mut pool, &mut |k| k.cmp(b"hot"), usize::MAX, &mut |tid| tid.block < 2900);
        assert_eq!(n, 2900);
        assert_eq!(t.nblocks, blocks);
        t.verify(&pool, &mut c).unwrap();
        assert_eq!(t.nentries, 3100 + 6000 - 2900 - 100);
        let mut hot = Vec::new();
        t.scan(&pool, &mut |k| k.cmp(b"hot"), |k, tid, _| {
            if k != b"hot" {
                return false;
            }
            hot.push(tid.block);
            true
        });
        assert_eq!(hot, (2900..3000).collect::<Vec<_>>());
        // A key that is absent, and a run with nothing dead: no change.
        assert_eq!(t.prune_key(&mut pool, &mut |k| k.cmp(b"mmm"), usize::MAX, &mut |_| true), 0);
        assert_eq!(t.prune_key(&mut pool, &mut |k| k.cmp(b"zzz"), usize::MAX, &mut |_| false), 0);
        // Inserts land in the emptied leaves again.
        for i in 0..3000u32 {
            t.insert(&mut pool, &mut c, b"hot", Tid::new(i, 2), 0).unwrap();
        }
        t.verify(&pool, &mut c).unwrap();
        assert_eq!(t.nentries, 6000 + 100 + 3000);
        // Emptying the whole tree keeps a valid (empty-leaved) tree.
        for k in [&b"aaa"[..], b"hot", b"zzz"] {
            t.prune_key(&mut pool, &mut |s| s.cmp(k), usize::MAX, &mut |_| true);
        }
        assert_eq!(t.nentries, 0);
        t.verify(&pool, &mut c).unwrap();
        t.insert(&mut pool, &mut c, b"new", Tid::new(1, 1), 0).unwrap();
        t.verify(&pool, &mut c).unwrap();
        t.clear(&mut pool);
        assert_eq!(pool.allocated(), 0);
    }

    /// Every insert that fails for lack of blocks leaves the tree intact,
    /// and succeeds once one more block is available.
    #[test]
    fn out_of_memory_at_every_boundary() {
        let mut pool = VecPool::new(0);
        let mut t = DynTree::with_node_size(MIN_NODE_SIZE);
        let mut c = |a: &[u8], b: &[u8]| a.cmp(b);
        let (mut failures, mut limit) = (0, 0);
        for i in 0..3000u64 {
            let k = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).to_be_bytes();
            loop {
                let before = t;
                match t.insert(&mut pool, &mut c, &k, Tid::new(1, 1), i) {
                    Ok(()) => break,
                    Err(DynError::OutOfMemory) => {
                        assert_eq!(t, before);
                        assert_eq!(pool.allocated(), t.nblocks as usize);
                        failures += 1;
                        limit += 1;
                        pool.set_limit(limit);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        t.verify(&pool, &mut c).unwrap();
        assert!(
            t.height >= 4 && failures > 100,
            "height {} failures {failures}",
            t.height
        );
    }

    #[test]
    fn retain_rebuild_frees_blocks_and_clears() {
        let (mut t, mut pool) = fill(0..50_000u64);
        let mut c = |a: &[u8], b: &[u8]| a.cmp(b);
        let before = t.nblocks;
        // Random-looking removal leaves every leaf sparse.
        let removed = t.retain(&mut pool, |_, _, p| p % 10 == 0);
        assert_eq!(removed, 45_000);
        t.verify(&pool, &mut c).unwrap();
        assert!(
            t.nblocks < before / 5,
            "{} of {before} blocks left",
            t.nblocks
        );
        assert_eq!(pool.allocated(), t.nblocks as usize);
        // The rebuilt tree takes inserts again.
        for i in 0..1000u64 {
            t.insert(
                &mut pool,
                &mut c,
                &(i * 10 + 5).to_be_bytes(),
                Tid::new(0, 1),
                i,
            )
            .unwrap();
        }
        t.verify(&pool, &mut c).unwrap();
        assert_eq!(t.retain(&mut pool, |_, _, _| false), 6000);
        assert!(t.is_empty() && t.root == NONE);
        assert_eq!(pool.allocated(), 0);
        assert_eq!(t.bytes_used(), 0);
        assert_eq!(t.retain(&mut pool, |_, _, _| false), 0);
    }

    #[test]
    fn repack_to_a_fill_needs_no_free_blocks() {
        // Entries removed in stretches (a merge step's release): the tree
        // is sparse in some places and full in others; a repack to 60%
        // must not run out of its own blocks with none free in the pool.
        for pct in [30, 60, 75, 90, 100] {
            let (mut t, mut pool) = fill((0..20_000u64).map(|i| i.wrapping_mul(2654435761) % 1_000_003));
            let mut c = |a: &[u8], b: &[u8]| a.cmp(b);
            t.rewrite_from(&mut pool, None, usize::MAX, &mut |k, _, _| {
                let v = u64::from_be_bytes(k.try_into().unwrap());
                if (v / 50_000) % 2 == 0 { Rewrite::Drop } else { Rewrite::Keep }
            });
            pool.set_limit(pool.allocated());
            let (entries, blocks) = (t.nentries, t.nblocks);
            t.repack_to(&mut pool, pct);
            t.verify(&pool, &mut c).unwrap();
            assert_eq!(t.nentries, entries);
            assert!(t.nblocks < blocks, "fill {pct}: {} blocks from {blocks}", t.nblocks);
            // About the fill asked for: the leaves use entries / fill.
            let leaves = t.packed_leaf_blocks() as f64 * 100.0 / pct as f64;
            assert!((t.nblocks as f64) < leaves * 1.1 + 3.0, "fill {pct}: {} blocks for {leaves:.0} leaves", t.nblocks);
            assert!((t.nblocks as f64) > leaves * 0.9, "fill {pct}: {} blocks for {leaves:.0} leaves", t.nblocks);
        }
    }

    /// A retain with no blocks to spare must still work: the rebuild only
    /// reuses the tree's own blocks.
    #[test]
    fn retain_needs_no_free_blocks() {
        let (mut t, mut pool) = fill(0..20_000u64);
        pool.set_limit(pool.allocated());
        let mut c = |a: &[u8], b: &[u8]| a.cmp(b);
        t.retain(&mut pool, |_, _, p| p % 3 != 0);
        t.verify(&pool, &mut c).unwrap();
        assert_eq!(t.nentries, 20_000 - 6667);
    }
}
