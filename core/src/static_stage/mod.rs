//! The static stage of `hybrid_btree`: a read-only, 100%-full B+tree written
//! bottom-up at merge time (paper sections 4.2-4.4 and 5.1).
//!
//! Everything here works on a page *body*: a byte region the PostgreSQL glue
//! carves out of a page between its header and its special area. Used bytes
//! always start at offset 0 and are contiguous, so the glue can declare the
//! rest of the page a hole (and full-page images skip it).
//!
//! Keys are opaque bytes ordered by a caller-supplied comparator; nothing in
//! the search paths assumes memcmp order. Byte equality is only used to merge
//! posting lists, where it is always safe (equal bytes are equal keys).
//!
//! See `README.md` in this directory for the layouts, drawn.

pub mod build;
pub mod compress;
pub mod inner;
pub mod leaf;
pub mod merge;
pub mod segment;
pub mod spare;

pub use build::{
    build_inner, build_leaves, build_static, max_key_len, InnerLevels, LastLeaf, LeafLevel, BuildError, BuildResult, Compression, PageOut,
};
pub use compress::{decompress_leaf, leaf_body, leaf_used_len, rewrite_leaf_without, CompressedLeafBuilder};
pub use inner::{InnerBuilder, InnerView};
pub use segment::{fresh_in_segment, leaf_takes_fresh, plan_runs, plan_segment, Run, Segment, SegmentInput};
pub use leaf::{FlatLeaf, LeafBuilder, LeafCursor, LeafIter, LeafView, SuspendedCursor};
pub use merge::{Group, MergedGroups, OldRead};

use std::cmp::Ordering;
use std::fmt;

/// First byte of a plain leaf body.
pub const FORMAT_LEAF: u8 = 0x01;
/// First byte of an LZ4-compressed leaf body.
pub const FORMAT_LEAF_LZ4: u8 = 0x02;
/// First byte of an inner node body.
pub const FORMAT_INNER: u8 = 0x03;

/// Largest body any format can describe: offsets inside a body are u16.
pub const MAX_BODY: usize = u16::MAX as usize;
/// Smallest body a builder accepts; below this even one short key may not fit.
pub const MIN_BODY: usize = 64;
/// Entries per restart group unless a builder is told otherwise.
pub const DEFAULT_RESTART_INTERVAL: usize = 16;

/// Why a body could not be decoded or re-encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// The bytes are not a valid body of the expected format.
    Corrupt(&'static str),
    /// A re-encoding does not fit the output (only possible for compressed
    /// leaves, whose compressed size is not monotone in their content).
    NoSpace,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Corrupt(why) => write!(f, "corrupt static-stage page body: {why}"),
            FormatError::NoSpace => write!(f, "re-encoded static-stage page body does not fit"),
        }
    }
}

impl std::error::Error for FormatError {}

pub(crate) type Res<T> = Result<T, FormatError>;

#[inline]
pub(crate) fn corrupt<T>(why: &'static str) -> Res<T> {
    Err(FormatError::Corrupt(why))
}

/// The format byte of a body, if it is one of ours.
pub fn body_format(body: &[u8]) -> Option<u8> {
    match body.first() {
        Some(&f @ (FORMAT_LEAF | FORMAT_LEAF_LZ4 | FORMAT_INNER)) => Some(f),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Little helpers shared by the formats.

#[inline]
pub(crate) fn rd_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline]
pub(crate) fn wr_u16(b: &mut [u8], off: usize, v: usize) {
    debug_assert!(v <= u16::MAX as usize);
    b[off..off + 2].copy_from_slice(&(v as u16).to_le_bytes());
}

#[inline]
pub(crate) fn var_len(v: u64) -> usize {
    crate::varint::len_u64(v)
}

#[inline]
pub(crate) fn put_var(out: &mut [u8], pos: &mut usize, mut v: u64) {
    while v >= 0x80 {
        out[*pos] = (v as u8) | 0x80;
        *pos += 1;
        v >>= 7;
    }
    out[*pos] = v as u8;
    *pos += 1;
}

#[inline]
pub(crate) fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

pub(crate) fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A bounds-checked forward reader: every decode path goes through it, which
/// is what makes corrupt bodies an `Err` instead of a panic.
#[derive(Clone, Copy)]
pub(crate) struct Rd<'a> {
    pub b: &'a [u8],
    pub pos: usize,
}

impl<'a> Rd<'a> {
    #[inline]
    pub fn new(b: &'a [u8], pos: usize) -> Self {
        Rd { b, pos }
    }

    #[inline]
    pub fn u8(&mut self) -> Res<u8> {
        match self.b.get(self.pos) {
            Some(&x) => {
                self.pos += 1;
                Ok(x)
            }
            None => corrupt("truncated entry"),
        }
    }

    #[inline]
    pub fn var(&mut self) -> Res<u64> {
        // Most varints here are one byte; keep that path branch-light.
        if let Some(&x) = self.b.get(self.pos) {
            if x < 0x80 {
                self.pos += 1;
                return Ok(x as u64);
            }
        }
        match self.b.get(self.pos..).and_then(crate::varint::get_u64) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => corrupt("bad varint"),
        }
    }

    #[inline]
    pub fn bytes(&mut self, n: usize) -> Res<&'a [u8]> {
        match self.pos.checked_add(n).and_then(|e| self.b.get(self.pos..e)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => corrupt("entry runs past its area"),
        }
    }

    pub fn remaining(&self) -> usize {
        self.b.len().saturating_sub(self.pos)
    }
}

// ---------------------------------------------------------------------------
// Front-coded keys, shared by leaves and inner nodes.
//
// A restart entry stores its whole key; any other entry stores how many
// leading bytes it shares with the previous key and the rest. When every key
// of a node has the same length L <= 255 (fixed-width types: int8, uuid,
// timestamps), the node sets a FIXLEN flag: restart keys are L raw bytes, other
// entries a one-byte shared count and L - shared bytes.

/// Key-part sizes of a node under each coding, maintained incrementally.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyCosts {
    len: Option<usize>,
    mixed: bool,
    fix: usize,
    var: usize,
    /// Leaves only (`leaf_total`): keys of at most 16 bytes as varint gaps
    /// between neighbours read as big-endian numbers (KDELTA); impossible
    /// once a key is longer, below its predecessor bytewise, or a gap
    /// exceeds 64 bits.
    delta: usize,
    no_delta: bool,
}

/// Longest key KDELTA codes: a u128 (an encoded int8 or timestamp column
/// is 9 bytes, a marker and the value).
pub(crate) const KDELTA_MAX_LEN: usize = 16;

/// A key of at most 16 bytes as the big-endian number it spells.
///
/// Shifted in a byte at a time: copying the key into a 16-byte buffer and
/// loading that back as a number made the loads wait for the copy's
/// stores (a tenth of a merge's CPU, in the leaf builder's size
/// accounting, which asks this twice per entry).
#[inline]
pub(crate) fn key_number(key: &[u8]) -> u128 {
    debug_assert!(key.len() <= KDELTA_MAX_LEN);
    let mut n = 0u128;
    for &b in key {
        n = n << 8 | b as u128;
    }
    n
}

/// The KDELTA gap from `prev` to `key` (same length, at most 16 bytes), if
/// `key` is not below `prev` and the gap fits a u64.
#[inline]
pub(crate) fn key_gap(prev: &[u8], key: &[u8]) -> Option<u64> {
    key_number(key).checked_sub(key_number(prev)).and_then(|g| u64::try_from(g).ok())
}

impl KeyCosts {
    pub fn with(&self, prev: Option<&[u8]>, key: &[u8], restart: bool) -> KeyCosts {
        let mut k = *self;
        k.add(prev, key, restart);
        k
    }

    /// Counts `key` in place (`with` returns a copy; the leaf builder,
    /// which asks for every entry, updates its own tentative totals).
    pub fn add(&mut self, prev: Option<&[u8]>, key: &[u8], restart: bool) {
        let k = self;
        match k.len {
            None => k.len = Some(key.len()),
            Some(l) if l != key.len() => k.mixed = true,
            _ => {}
        }
        if key.len() > 255 {
            k.mixed = true;
        }
        let shared = match (restart, prev) {
            (false, Some(p)) => shared_prefix(p, key),
            _ => 0,
        };
        let suffix = key.len() - shared;
        if restart {
            k.fix += key.len();
            k.var += var_len(key.len() as u64) + key.len();
            k.delta += key.len();
        } else {
            k.fix += 1 + suffix;
            k.var += var_len(shared as u64) + var_len(suffix as u64) + suffix;
        }
        if key.len() > KDELTA_MAX_LEN {
            k.no_delta = true;
        } else if let (false, Some(p)) = (restart, prev) {
            match (p.len() == key.len()).then(|| key_gap(p, key)).flatten() {
                Some(g) => k.delta += var_len(g),
                None => k.no_delta = true,
            }
        }
    }

    /// Whether a leaf codes its keys as gaps (KDELTA): fixed-length keys of
    /// at most 16 bytes in ascending byte order, and fewer bytes than front
    /// coding.
    pub fn delta_coded(&self) -> bool {
        matches!(self.fixed(), Some(l) if l <= KDELTA_MAX_LEN) && !self.no_delta && self.delta < self.fix
    }

    /// Key bytes of a leaf under its smallest coding (inner nodes never use
    /// KDELTA: `total`).
    pub fn leaf_total(&self) -> usize {
        if self.delta_coded() {
            self.delta
        } else {
            self.total()
        }
    }

    /// The common key length, if FIXLEN coding applies. Not for empty keys:
    /// every entry must take at least one byte so restart offsets strictly
    /// increase (inner entries have no payload after the key).
    pub fn fixed(&self) -> Option<usize> {
        match self.len {
            Some(l) if !self.mixed && l > 0 => Some(l),
            _ => None,
        }
    }

    pub fn total(&self) -> usize {
        if self.fixed().is_some() {
            self.fix
        } else {
            self.var
        }
    }
}

pub(crate) fn put_key(
    out: &mut [u8],
    pos: &mut usize,
    prev: &[u8],
    key: &[u8],
    restart: bool,
    fixed: bool,
) {
    let shared = if restart { 0 } else { shared_prefix(prev, key) };
    let suffix = &key[shared..];
    if restart {
        if !fixed {
            put_var(out, pos, key.len() as u64);
        }
    } else if fixed {
        out[*pos] = shared as u8;
        *pos += 1;
    } else {
        put_var(out, pos, shared as u64);
        put_var(out, pos, suffix.len() as u64);
    }
    out[*pos..*pos + suffix.len()].copy_from_slice(suffix);
    *pos += suffix.len();
}

/// Key bytes kept inline when short (integers, uuids, timestamps, short
/// text), so searching a node does not allocate.
const KEY_INLINE: usize = 48;

#[derive(Clone)]
pub(crate) struct KeyBuf {
    len: usize,
    inline: [u8; KEY_INLINE],
    heap: Vec<u8>,
}

impl KeyBuf {
    pub fn new() -> Self {
        KeyBuf { len: 0, inline: [0; KEY_INLINE], heap: Vec::new() }
    }

    /// Keeps the first `shared` bytes (at most `len`) and appends `suffix`.
    #[inline]
    fn set(&mut self, shared: usize, suffix: &[u8]) {
        debug_assert!(shared <= self.len);
        let n = shared + suffix.len();
        if n <= KEY_INLINE {
            if self.len > KEY_INLINE {
                self.inline[..shared].copy_from_slice(&self.heap[..shared]);
            }
            self.inline[shared..n].copy_from_slice(suffix);
        } else {
            if self.len <= KEY_INLINE {
                self.heap.clear();
                self.heap.extend_from_slice(&self.inline[..shared]);
            } else {
                self.heap.truncate(shared);
            }
            self.heap.extend_from_slice(suffix);
        }
        self.len = n;
    }
}

impl std::ops::Deref for KeyBuf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        if self.len <= KEY_INLINE {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }
}

impl fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &self[..])
    }
}

/// Decodes one key into `buf`, which must hold the previous key of the run.
#[inline]
pub(crate) fn read_key(rd: &mut Rd<'_>, buf: &mut KeyBuf, restart: bool, fixed: Option<usize>) -> Res<()> {
    let (shared, suffix) = match (restart, fixed) {
        (true, Some(l)) => (0, l),
        (true, None) => (0, rd.var()? as usize),
        (false, Some(l)) => {
            let s = rd.u8()? as usize;
            if s > l {
                return corrupt("shared prefix longer than the fixed key length");
            }
            (s, l - s)
        }
        (false, None) => {
            let s = rd.var()?;
            let x = rd.var()?;
            (usize::try_from(s).unwrap_or(usize::MAX), usize::try_from(x).unwrap_or(usize::MAX))
        }
    };
    if shared > buf.len() {
        return corrupt("shared prefix longer than the previous key");
    }
    let bytes = rd.bytes(suffix)?;
    buf.set(shared, bytes);
    Ok(())
}

/// Decodes the key of a non-restart KDELTA entry into `buf`, which holds
/// the previous key (`len` bytes).
#[inline]
pub(crate) fn read_key_gap(rd: &mut Rd<'_>, buf: &mut KeyBuf, len: usize) -> Res<()> {
    if buf.len() != len || len > KDELTA_MAX_LEN {
        return corrupt("key gap without a previous key of the leaf's length");
    }
    let gap = rd.var()?;
    let next = match key_number(buf).checked_add(gap as u128) {
        Some(n) if len == KDELTA_MAX_LEN || n >> (8 * len) == 0 => n,
        _ => return corrupt("key gap past the key length"),
    };
    buf.set(0, &next.to_be_bytes()[KDELTA_MAX_LEN - len..]);
    Ok(())
}

/// The whole key of a restart entry, borrowed from the body.
#[inline]
pub(crate) fn restart_key(area: &[u8], off: usize, fixed: Option<usize>) -> Res<&[u8]> {
    let mut rd = Rd::new(area, off);
    let len = match fixed {
        Some(l) => l,
        None => usize::try_from(rd.var()?).unwrap_or(usize::MAX),
    };
    rd.bytes(len)
}

// ---------------------------------------------------------------------------
// Restart slots: after the entries, (u16 byte offset, u16 entry index) per
// restart entry. Storing the index (not deriving it from a fixed interval)
// lets an in-place VACUUM keep the surviving restart entries where they are,
// which is what guarantees the rewritten leaf is never larger.
//
// Fence slots (leaves with fixed-length keys): each slot also carries the
// restart entry's whole key, and the restart entry in the entry area carries
// none. The bytes are the same, only their place differs; but a search now
// binary searches one contiguous array instead of jumping to a restart entry
// somewhere in the page at every step, which halves the cache lines a probe
// touches (the restart key loads were 88% of the search's cycles).

pub(crate) const SLOT: usize = 4;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Slots<'a> {
    b: &'a [u8],
    pub n: usize,
    /// Key bytes per slot after (offset, index): the fixed key length for
    /// fence slots, else 0.
    fence: usize,
}

impl<'a> Slots<'a> {
    /// Bounds-checks the array at `b[at..at + n * stride]` and its ends:
    /// slot 0 is (first, 0), the last lies below `end` and `nkeys`. O(1),
    /// because this runs on every page visit; the slots in between are
    /// cross-checked by every cursor that passes them (and all of them by
    /// `check_all`). A bad middle slot can misdirect a search but never make
    /// it read outside the body.
    pub fn parse(b: &'a [u8], at: usize, n: usize, fence: usize, first: usize, end: usize, nkeys: usize) -> Res<Self> {
        let arr = match b.get(at..at + n * (SLOT + fence)) {
            Some(a) => a,
            None => return corrupt("restart array outside the body"),
        };
        let s = Slots { b: arr, n, fence };
        // A search over the slots is a chain of dependent loads, one cache
        // miss per step on a page not read lately; asking for all of the
        // array now overlaps those misses (the last slot is read just
        // below, so the array is wanted anyway).
        prefetch(&arr[..arr.len().min(PREFETCH_MAX)]);
        if (n == 0) != (nkeys == 0) || n > nkeys {
            return corrupt("restart count does not match key count");
        }
        if n > 0 && (s.off(0) != first || s.idx(0) != 0) {
            return corrupt("first restart is not the first entry");
        }
        if n > 0 && (s.off(n - 1) >= end || s.idx(n - 1) >= nkeys) {
            return corrupt("restart past the entries");
        }
        Ok(s)
    }

    /// Bytes one slot takes.
    #[inline]
    pub fn stride(&self) -> usize {
        SLOT + self.fence
    }

    /// Bytes of the whole array.
    #[inline]
    pub fn len_bytes(&self) -> usize {
        self.n * self.stride()
    }

    /// Whether restart keys live in the slots.
    #[inline]
    pub fn fenced(&self) -> bool {
        self.fence > 0
    }

    /// Offsets and indexes strictly increase.
    pub fn check_all(&self) -> Res<()> {
        for i in 1..self.n {
            if self.off(i) <= self.off(i - 1) || self.idx(i) <= self.idx(i - 1) {
                return corrupt("restart array not increasing");
            }
        }
        Ok(())
    }

    #[inline]
    pub fn off(&self, i: usize) -> usize {
        rd_u16(self.b, i * self.stride()) as usize
    }

    #[inline]
    pub fn idx(&self, i: usize) -> usize {
        rd_u16(self.b, i * self.stride() + 2) as usize
    }

    /// The key of fence slot `i` (bounds-checked by `parse`).
    #[inline]
    pub fn fence_key(&self, i: usize) -> &'a [u8] {
        let at = i * self.stride() + SLOT;
        &self.b[at..at + self.fence]
    }

    /// The whole key of restart `i`: in the slot, or at its entry.
    #[inline]
    pub fn restart_key(&self, area: &'a [u8], i: usize, fixed: Option<usize>) -> Res<&'a [u8]> {
        if self.fenced() {
            Ok(self.fence_key(i))
        } else {
            restart_key(area, self.off(i), fixed)
        }
    }

    /// First slot whose restart key is not `before` the bound.
    pub fn search(
        &self,
        area: &'a [u8],
        fixed: Option<usize>,
        before: &mut impl FnMut(&[u8]) -> bool,
    ) -> Res<usize> {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(self.restart_key(area, mid, fixed)?) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}

/// At most this many bytes of a restart array are prefetched (32 cache
/// lines; an int8 leaf's array is about 650 bytes).
const PREFETCH_MAX: usize = 2048;

/// Asks the CPU to bring `bytes` into its caches without waiting for them.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = bytes.as_ptr();
        let mut off = 0;
        while off < bytes.len() {
            // SAFETY: a prefetch never faults, and the address lies inside `bytes`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off) as *const i8) };
            off += 64;
        }
        if let Some(last) = bytes.len().checked_sub(1) {
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(last) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// A restart slot to write: the entry's byte offset and index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotOut {
    pub off: usize,
    pub idx: usize,
}

/// Writes the restart array; with `fence_key`, each slot is followed by the
/// key of its entry (fence slots).
pub(crate) fn write_slots<'k, F: Fn(usize) -> &'k [u8]>(out: &mut [u8], pos: &mut usize, slots: &[SlotOut], fence_key: Option<F>) {
    for s in slots {
        wr_u16(out, *pos, s.off);
        wr_u16(out, *pos + 2, s.idx);
        *pos += SLOT;
        if let Some(key) = &fence_key {
            let k = key(s.idx);
            out[*pos..*pos + k.len()].copy_from_slice(k);
            *pos += k.len();
        }
    }
}

/// `cmp(stored) == Less`: the predicate of "first entry >= bound".
#[inline]
pub(crate) fn lt(cmp: &mut impl FnMut(&[u8]) -> Ordering) -> impl FnMut(&[u8]) -> bool + '_ {
    move |k| cmp(k) == Ordering::Less
}

/// `cmp(stored) != Greater`: the predicate of "first entry > bound".
#[inline]
pub(crate) fn le(cmp: &mut impl FnMut(&[u8]) -> Ordering) -> impl FnMut(&[u8]) -> bool + '_ {
    move |k| cmp(k) != Ordering::Greater
}

#[cfg(test)]
mod key_number_tests {
    use super::{key_number, KDELTA_MAX_LEN};
    use proptest::prelude::*;

    proptest! {
        /// The number a key spells, as a 16-byte big-endian buffer with
        /// the key at its end reads it.
        #[test]
        fn spells_the_padded_big_endian_number(key in proptest::collection::vec(any::<u8>(), 0..=KDELTA_MAX_LEN)) {
            let mut be = [0u8; KDELTA_MAX_LEN];
            be[KDELTA_MAX_LEN - key.len()..].copy_from_slice(&key);
            prop_assert_eq!(key_number(&key), u128::from_be_bytes(be));
        }
    }
}
