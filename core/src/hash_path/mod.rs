//! The hash path: a linear-hashing table of (hash, key, TID) entries over
//! plain page bodies. griffin's point path (Griffin, section III: the hash
//! table that serves point operations; the B+tree side and precision
//! locking live elsewhere) and tiered_hash's cold tier (2-Hash).
//!
//! Layers, bottom up:
//!
//! * [`page`]: the three body formats (header, directory, bucket), their
//!   bounds-checked views and their builders.
//! * [`pool`]: the [`pool::HashPages`] trait the glue implements (whole-body
//!   writes in steps of at most [`MAX_STEP_PAGES`] blocks, retired blocks),
//!   and [`pool::MemPool`] for tests, which can simulate a crash.
//! * [`area`]: [`area::HashArea`], the table: create, lookup (also as a
//!   page-at-a-time [`area::Probe`]), idempotent batch insert with linear
//!   hashing splits done copy-on-write, VACUUM, verify, stats.
//!
//! The hash of a key is computed by the caller; keys are opaque byte strings
//! that the caller compares with its own equality callback (byte-different
//! keys may be equal, and then they must have equal hashes). Nothing here
//! knows PostgreSQL. See `README.md` in this directory for the layouts, the
//! step ordering and what the glue must do.

pub mod area;
pub mod page;
pub mod pool;

#[cfg(test)]
mod tests;

use std::fmt;

use crate::tid::Tid;

pub use area::{Config, HashArea, InsertReport, Matches, Probe, Stats, VerifyReport};
pub use page::Header;
pub use pool::{Change, HashPages, MemPool};

/// No block (PostgreSQL's InvalidBlockNumber); ends an overflow chain.
pub const NO_BLOCK: u32 = u32::MAX;
/// Most distinct blocks one step may change: GenericXLog's
/// MAX_GENERIC_XLOG_PAGES.
pub const MAX_STEP_PAGES: usize = 4;
/// Body bytes of an 8 KB PostgreSQL page after the 24-byte page header and
/// pg_hybrid's 32-byte special area.
pub const BODY_CAP: usize = 8136;
/// Offsets inside a body are u16.
pub const MAX_BODY: usize = u16::MAX as usize;
/// Smallest body the formats accept; tests go down to 256 to force
/// overflow pages and splits.
pub const MIN_BODY: usize = 128;
/// Longest key accepted on any page size (bodies too small for it accept
/// less: [`max_key_len`]).
pub const MAX_KEY: usize = 2000;
/// Default split trigger: entry bytes per bucket, in percent of `body_cap`.
pub const DEFAULT_FILL_PCT: u32 = 75;

/// Longest key a body of `cap` bytes accepts: one entry must fit an empty
/// bucket page. 2000 for any cap >= 2038.
pub const fn max_key_len(cap: usize) -> usize {
    // header, slot, TID, a two-byte varint length
    let room = cap.saturating_sub(page::BUCKET_HDR + page::SLOT + page::TID_BYTES + 2);
    if room > MAX_KEY {
        MAX_KEY
    } else {
        room
    }
}

/// Which page format an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    Header,
    Directory,
    Bucket,
    /// A block that could not be read at all (not in use, wrong size).
    Block,
}

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A page is not a valid body of the format it should have, or the
    /// pages disagree with each other. `blk` is [`NO_BLOCK`] when a body was
    /// parsed without knowing its block.
    Corrupt { blk: u32, kind: PageKind, why: &'static str },
    /// A key longer than the page size allows.
    KeyTooLong { len: usize, max: usize },
    /// A caller-side contract broken (empty key, bad configuration, a step
    /// over four pages).
    BadInput(&'static str),
    /// [`MemPool`]'s simulated crash: this step and every later one are
    /// dropped.
    Crashed,
    /// The glue's page layer failed.
    Pool(String),
}

impl Error {
    /// The same error with the block filled in (for corruption found by a
    /// body parser that does not know its block).
    pub fn at(self, b: u32) -> Error {
        match self {
            Error::Corrupt { blk, kind, why } if blk == NO_BLOCK => Error::Corrupt { blk: b, kind, why },
            e => e,
        }
    }
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Error::Corrupt { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt { blk, kind, why } if *blk == NO_BLOCK => write!(f, "corrupt hash path {kind:?} page: {why}"),
            Error::Corrupt { blk, kind, why } => write!(f, "corrupt hash path {kind:?} page at block {blk}: {why}"),
            Error::KeyTooLong { len, max } => write!(f, "hash path key of {len} bytes is longer than {max}"),
            Error::BadInput(why) => write!(f, "hash path: {why}"),
            Error::Crashed => write!(f, "hash path: simulated crash"),
            Error::Pool(why) => write!(f, "hash path page layer: {why}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[inline]
pub(crate) fn corrupt<T>(kind: PageKind, why: &'static str) -> Result<T> {
    Err(Error::Corrupt { blk: NO_BLOCK, kind, why })
}

/// One entry: the caller's hash of the key, the key bytes, the heap TID.
/// Ordered by (hash, key bytes, TID), the order of a bucket page's slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry<'a> {
    pub hash: u32,
    pub key: &'a [u8],
    pub tid: Tid,
}

impl<'a> Entry<'a> {
    pub const fn new(hash: u32, key: &'a [u8], tid: Tid) -> Self {
        Entry { hash, key, tid }
    }
    /// Bytes the entry takes on a bucket page, slot included; the unit of
    /// the header's `entry_bytes` and of the fill target.
    pub fn cost(&self) -> usize {
        page::entry_cost(self.key.len())
    }
}

/// Linear hashing (as PostgreSQL's hash index): `hash & highmask`, or
/// `hash & lowmask` if that bucket does not exist yet.
#[inline]
pub const fn bucket_for(hash: u32, lowmask: u32, highmask: u32, maxbucket: u32) -> u32 {
    let b = hash & highmask;
    if b > maxbucket {
        hash & lowmask
    } else {
        b
    }
}
