//! `elastic_btree`: a B+tree whose leaves come in two forms, a standard
//! sorted (key, TID) leaf and a compact SeqTree leaf that stores no keys
//! (Hershcovitch et al., "Elastic indexes", EDBT 2022), and which converts
//! leaves between the forms to stay under a size bound.
//!
//! Layers, bottom up:
//!
//! * [`slotted`]: the standard leaf and the inner node, slotted page bodies
//!   searched in place.
//! * [`compact`]: the SeqTree leaf (BlindiBits, BlindiTree, TIDs with
//!   breathing), searched blind and confirmed with one key fetch.
//! * [`tree`]: the elastic tree over a [`tree::PagePool`], with the
//!   normal / shrinking / expanding state machine, batch inserts, vacuum,
//!   scans, stats and `verify`.
//!
//! Nothing here knows PostgreSQL. See `README.md` in this directory for the
//! page layouts, the state machine, the pruned-key rule and the WAL rule
//! (at most four pages per step).

pub mod compact;
pub mod slotted;
pub mod tree;

#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::fmt;

use crate::keys::bytes_cmp;
use crate::tid::Tid;

/// Format byte of a standard leaf body.
pub const FORMAT_STD_LEAF: u8 = 0x11;
/// Format byte of a compact (SeqTree) leaf body.
pub const FORMAT_COMPACT_LEAF: u8 = 0x12;
/// Format byte of an inner node body.
pub const FORMAT_INNER: u8 = 0x13;
/// Format byte of the metapage body.
pub const FORMAT_META: u8 = 0x14;

/// Body bytes of an 8 KB PostgreSQL page after the 24-byte page header and
/// pg_hybrid's 32-byte special area.
pub const BODY_CAP: usize = 8136;
/// Offsets inside a body are u16.
pub const MAX_BODY: usize = u16::MAX as usize;
/// Smallest body the formats accept; tests go down to this to force splits.
pub const MIN_BODY: usize = 128;

/// Longest key the tree accepts for a body of `cap` bytes: three keys with
/// their tuple overheads (two entries and a high key) must fit one page so a
/// split always produces two valid pages. For 8136 bytes that is 2692, about
/// nbtree's limit (2704).
pub const fn max_key_len(cap: usize) -> usize {
    let k = (cap - slotted::HDR) / 3 - slotted::TUPLE_HDR - slotted::INNER_EXTRA - 2;
    if k > compact::MAX_COMPACT_KEY {
        compact::MAX_COMPACT_KEY
    } else {
        k
    }
}

/// Why an operation on a body failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The bytes are not a valid body of the expected format.
    Corrupt(&'static str),
    /// The content does not fit the body.
    NoSpace,
    /// A key longer than the page size allows.
    KeyTooLong(usize),
    /// A batch not sorted by (key, TID), or a caller-side contract broken.
    BadInput(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt(why) => write!(f, "corrupt elastic_btree page body: {why}"),
            Error::NoSpace => write!(f, "elastic_btree page body full"),
            Error::KeyTooLong(n) => write!(f, "elastic_btree key of {n} bytes is too long"),
            Error::BadInput(why) => write!(f, "elastic_btree: {why}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[inline]
pub(crate) fn corrupt<T>(why: &'static str) -> Result<T> {
    Err(Error::Corrupt(why))
}

// ---------------------------------------------------------------------------
// Keys and search targets

/// Reads the key of a heap tuple for a compact leaf, which stores no keys.
///
/// `fetch` writes the encoded key (the same bytes the index was given) into
/// `out` (cleared first by the callee) and returns true, or returns false if
/// no tuple version is left at `tid` (pruned before VACUUM removed the
/// index entry). It must ignore visibility: every version reachable from the
/// TID carries the same indexed key, and a dead-but-present version still
/// tells the key. A false answer makes the entry dead for everyone; see the
/// pruned-key rule in README.md.
pub trait KeyFetcher {
    fn fetch(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool;
}

impl<F: FnMut(Tid, &mut Vec<u8>) -> bool> KeyFetcher for F {
    fn fetch(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool {
        self(tid, out)
    }
}

/// Counts calls through to another fetcher (the `key_fetches` statistic).
pub struct CountingFetcher<'a, F: KeyFetcher + ?Sized> {
    pub inner: &'a mut F,
    pub count: u64,
}

impl<'a, F: KeyFetcher + ?Sized> CountingFetcher<'a, F> {
    pub fn new(inner: &'a mut F) -> Self {
        CountingFetcher { inner, count: 0 }
    }
}

impl<F: KeyFetcher + ?Sized> KeyFetcher for CountingFetcher<'_, F> {
    fn fetch(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool {
        self.count += 1;
        out.clear();
        self.inner.fetch(tid, out)
    }
}

/// Where a search target sits among the entries that have its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TidPos {
    /// Before every entry with the key: a lower bound on the key.
    First,
    /// At this exact (key, TID).
    At(Tid),
    /// After every entry with the key: an upper bound on the key.
    Last,
}

/// A position in (key, TID) order. Entries are totally ordered by
/// (key bytes, TID); a search finds the first entry >= the target.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub key: &'a [u8],
    pub tid: TidPos,
}

impl<'a> Target<'a> {
    pub fn first(key: &'a [u8]) -> Self {
        Target { key, tid: TidPos::First }
    }
    pub fn at(key: &'a [u8], tid: Tid) -> Self {
        Target { key, tid: TidPos::At(tid) }
    }
    pub fn last(key: &'a [u8]) -> Self {
        Target { key, tid: TidPos::Last }
    }
}

/// Order of the entry (key, tid) relative to `t`.
#[inline]
pub fn cmp_entry(key: &[u8], tid: Tid, t: &Target) -> Ordering {
    match bytes_cmp(key, t.key) {
        Ordering::Equal => match t.tid {
            TidPos::First => Ordering::Greater,
            TidPos::Last => Ordering::Less,
            TidPos::At(x) => tid.cmp(&x),
        },
        o => o,
    }
}

/// (key, TID) order of two entries.
#[inline]
pub fn cmp_pair(ak: &[u8], at: Tid, bk: &[u8], bt: Tid) -> Ordering {
    bytes_cmp(ak, bk).then(at.cmp(&bt))
}

// ---------------------------------------------------------------------------
// Key bits
//
// A compact leaf indexes keys by bit positions. A key is read as the bit
// string in which every byte becomes nine bits, a 1 ("a byte follows") and
// the byte's eight bits from the most significant, and the key's end is a 0
// followed by zeros forever. Comparing two such strings bitwise from the
// left gives exactly memcmp order including prefixes (a proper prefix has a
// 0 where the longer key has its next byte's 1), so a blind trie over them
// agrees with `bytes_cmp`. The price of the ninth bit is a division by 9.

/// The "discriminating bit" of two equal keys: above every real bit, so a
/// blind search never branches on it, and duplicates stay in TID order.
pub const DUP: u16 = u16::MAX;

/// Bit `p` of `key` in the nine-bits-per-byte reading.
#[inline]
pub fn key_bit(key: &[u8], p: u16) -> u8 {
    let byte = (p / 9) as usize;
    let r = p % 9;
    match key.get(byte) {
        None => 0,
        Some(_) if r == 0 => 1,
        Some(&b) => (b >> (8 - r)) & 1,
    }
}

/// Index of the first bit in which `a` and `b` differ, or [`DUP`] if equal.
/// Keys must be at most `compact::MAX_COMPACT_KEY` bytes so this fits u16.
#[inline]
pub fn disc_bit(a: &[u8], b: &[u8]) -> u16 {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_be_bytes(a[i..i + 8].try_into().unwrap());
        let y = u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
        if x != y {
            let lz = (x ^ y).leading_zeros() as usize;
            let byte = i + lz / 8;
            return (9 * byte + 1 + lz % 8) as u16;
        }
        i += 8;
    }
    while i < n {
        let x = a[i] ^ b[i];
        if x != 0 {
            return (9 * i + 1 + x.leading_zeros() as usize) as u16;
        }
        i += 1;
    }
    if a.len() == b.len() {
        DUP
    } else {
        (9 * n) as u16
    }
}
