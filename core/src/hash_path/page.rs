//! Body formats of the hash path (layouts with byte offsets in README.md).
//!
//! Every body starts with the same eight bytes: a per-format magic (u32),
//! the format version, the page type and two format-specific bytes. All
//! integers are little-endian and read bytewise, so a body needs no
//! alignment. Every view checks magic, version, type and every offset and
//! length it will use before using it; no input makes these panic or read
//! outside the body.

use super::*;
use crate::varint;

/// Magic of the header page: the bytes "GRFH".
pub const MAGIC_HEADER: u32 = u32::from_le_bytes(*b"GRFH");
/// Magic of a directory page: "GRFD".
pub const MAGIC_DIRECTORY: u32 = u32::from_le_bytes(*b"GRFD");
/// Magic of a bucket page (primary or overflow): "GRFB".
pub const MAGIC_BUCKET: u32 = u32::from_le_bytes(*b"GRFB");
/// Format version of all three page types.
pub const VERSION: u8 = 1;

pub const TYPE_HEADER: u8 = 0x01;
pub const TYPE_DIRECTORY: u8 = 0x02;
pub const TYPE_BUCKET: u8 = 0x03;

/// Bucket page flag: first page of its chain (the directory points at it).
pub const FLAG_PRIMARY: u8 = 0x01;

/// Fixed part of the header page; the directory block list follows.
pub const HEADER_FIXED: usize = 56;
/// Fixed part of a directory page; the slots follow.
pub const DIR_HDR: usize = 16;
/// Fixed part of a bucket page; the slot array follows.
pub const BUCKET_HDR: usize = 24;
/// One bucket slot: hash u32, entry offset u16.
pub const SLOT: usize = 6;
/// A TID on a page: block u32, offset u16.
pub const TID_BYTES: usize = 6;

// ---------------------------------------------------------------------------
// Little-endian bytewise access. Callers check bounds first.

#[inline]
fn rd_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
fn rd_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
fn rd_u64(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(x)
}
#[inline]
fn wr_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn wr_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn wr_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn check_prefix(b: &[u8], magic: u32, ty: u8, kind: PageKind, min: usize) -> Result<()> {
    if b.len() < min.max(8) {
        return corrupt(kind, "body too short");
    }
    if b.len() > MAX_BODY {
        return corrupt(kind, "body longer than 65535 bytes");
    }
    if rd_u32(b, 0) != magic {
        return corrupt(kind, "bad magic");
    }
    if b[4] != VERSION {
        return corrupt(kind, "unsupported format version");
    }
    if b[5] != ty {
        return corrupt(kind, "wrong page type");
    }
    Ok(())
}

fn write_prefix(b: &mut [u8], magic: u32, ty: u8, flags: u8) {
    wr_u32(b, 0, magic);
    b[4] = VERSION;
    b[5] = ty;
    b[6] = flags;
    b[7] = 0;
}

// ---------------------------------------------------------------------------
// Geometry

/// Directory slots (buckets) per directory page.
pub const fn dir_per_page(cap: usize) -> usize {
    (cap - DIR_HDR) / 4
}

/// Directory pages the header can list.
pub const fn max_dir_pages(cap: usize) -> usize {
    (cap - HEADER_FIXED) / 4
}

/// Most buckets a table on bodies of `cap` bytes can have (about 4.1
/// million for 8136).
pub const fn max_buckets(cap: usize) -> u64 {
    (max_dir_pages(cap) * dir_per_page(cap)) as u64
}

/// Bytes of an entry body: TID, varint key length, key.
#[inline]
pub fn entry_len(klen: usize) -> usize {
    TID_BYTES + varint::len_u64(klen as u64) + klen
}

/// Bytes an entry takes on a bucket page including its slot.
#[inline]
pub fn entry_cost(klen: usize) -> usize {
    SLOT + entry_len(klen)
}

// ---------------------------------------------------------------------------
// Header page

/// The header page, owned (the directory block list is copied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Body size the table was built for.
    pub cap: u32,
    pub lowmask: u32,
    pub highmask: u32,
    pub maxbucket: u32,
    /// Split while `entry_bytes > fill * (maxbucket + 1)`.
    pub fill: u32,
    pub nentries: u64,
    /// Header + directory + primary + overflow pages reachable.
    pub npages: u64,
    /// Sum of [`entry_cost`] over all entries.
    pub entry_bytes: u64,
    /// Directory page blocks; page i holds buckets `i * per .. (i+1) * per`.
    pub dirs: Vec<u32>,
}

/// A validated header body, read in place (no allocation).
#[derive(Clone, Copy, Debug)]
pub struct HeaderView<'a> {
    b: &'a [u8],
    pub lowmask: u32,
    pub highmask: u32,
    pub maxbucket: u32,
    pub fill: u32,
    pub nentries: u64,
    pub npages: u64,
    pub entry_bytes: u64,
    pub ndir: usize,
}

impl<'a> HeaderView<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        const K: PageKind = PageKind::Header;
        check_prefix(b, MAGIC_HEADER, TYPE_HEADER, K, MIN_BODY)?;
        if b[6] != 0 || b[7] != 0 {
            return corrupt(K, "reserved bytes not zero");
        }
        if rd_u32(b, 8) as usize != b.len() {
            return corrupt(K, "body size differs from the one the table was built for");
        }
        let lowmask = rd_u32(b, 12);
        let highmask = rd_u32(b, 16);
        let maxbucket = rd_u32(b, 20);
        let fill = rd_u32(b, 24);
        let ndir = rd_u32(b, 28) as usize;
        let nentries = rd_u64(b, 32);
        let npages = rd_u64(b, 40);
        let entry_bytes = rd_u64(b, 48);
        if lowmask >= 1 << 30 || !(lowmask + 1).is_power_of_two() || highmask != lowmask * 2 + 1 {
            return corrupt(K, "lowmask and highmask are not 2^k - 1 and 2^(k+1) - 1");
        }
        if maxbucket < lowmask || maxbucket > highmask {
            return corrupt(K, "maxbucket outside [lowmask, highmask]");
        }
        let per = dir_per_page(b.len());
        if ndir > max_dir_pages(b.len()) || ndir != (maxbucket as usize) / per + 1 {
            return corrupt(K, "directory page count does not match maxbucket");
        }
        if fill == 0 {
            return corrupt(K, "fill target is zero");
        }
        if npages < 1 + ndir as u64 + maxbucket as u64 + 1 {
            return corrupt(K, "page count below header + directory + buckets");
        }
        if entry_bytes < nentries.saturating_mul(entry_cost(1) as u64) {
            return corrupt(K, "entry bytes below the smallest possible entries");
        }
        Ok(HeaderView { b, lowmask, highmask, maxbucket, fill, nentries, npages, entry_bytes, ndir })
    }

    /// Block of directory page `i`, if listed.
    pub fn dir_block(&self, i: usize) -> Option<u32> {
        (i < self.ndir).then(|| rd_u32(self.b, HEADER_FIXED + 4 * i))
    }

    pub fn bucket_of(&self, hash: u32) -> u32 {
        bucket_for(hash, self.lowmask, self.highmask, self.maxbucket)
    }

    pub fn cap(&self) -> usize {
        self.b.len()
    }

    pub fn to_owned(&self) -> Header {
        Header {
            cap: self.b.len() as u32,
            lowmask: self.lowmask,
            highmask: self.highmask,
            maxbucket: self.maxbucket,
            fill: self.fill,
            nentries: self.nentries,
            npages: self.npages,
            entry_bytes: self.entry_bytes,
            dirs: (0..self.ndir).map(|i| rd_u32(self.b, HEADER_FIXED + 4 * i)).collect(),
        }
    }
}

impl Header {
    pub fn parse(b: &[u8]) -> Result<Header> {
        Ok(HeaderView::parse(b)?.to_owned())
    }

    /// The header body (`cap` bytes).
    pub fn to_body(&self) -> Vec<u8> {
        let cap = self.cap as usize;
        let mut b = vec![0u8; cap];
        write_prefix(&mut b, MAGIC_HEADER, TYPE_HEADER, 0);
        wr_u32(&mut b, 8, self.cap);
        wr_u32(&mut b, 12, self.lowmask);
        wr_u32(&mut b, 16, self.highmask);
        wr_u32(&mut b, 20, self.maxbucket);
        wr_u32(&mut b, 24, self.fill);
        wr_u32(&mut b, 28, self.dirs.len() as u32);
        wr_u64(&mut b, 32, self.nentries);
        wr_u64(&mut b, 40, self.npages);
        wr_u64(&mut b, 48, self.entry_bytes);
        for (i, d) in self.dirs.iter().enumerate() {
            wr_u32(&mut b, HEADER_FIXED + 4 * i, *d);
        }
        b
    }

    pub fn bucket_of(&self, hash: u32) -> u32 {
        bucket_for(hash, self.lowmask, self.highmask, self.maxbucket)
    }

    pub fn nbuckets(&self) -> u64 {
        self.maxbucket as u64 + 1
    }

    pub fn per_page(&self) -> usize {
        dir_per_page(self.cap as usize)
    }

    /// Overflow pages: everything that is not header, directory or primary.
    pub fn overflow_pages(&self) -> u64 {
        self.npages.saturating_sub(1 + self.dirs.len() as u64 + self.nbuckets())
    }

    /// Over the split trigger.
    pub fn over_fill(&self) -> bool {
        self.entry_bytes > self.fill as u64 * self.nbuckets()
    }
}

// ---------------------------------------------------------------------------
// Directory page

/// A validated directory body.
#[derive(Clone, Copy, Debug)]
pub struct DirView<'a> {
    b: &'a [u8],
    /// Which directory page this is (first bucket = index * per_page).
    pub index: u32,
}

impl<'a> DirView<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        const K: PageKind = PageKind::Directory;
        check_prefix(b, MAGIC_DIRECTORY, TYPE_DIRECTORY, K, MIN_BODY)?;
        if b[6] != 0 || b[7] != 0 || rd_u32(b, 12) != 0 {
            return corrupt(K, "reserved bytes not zero");
        }
        let index = rd_u32(b, 8);
        if index as usize >= max_dir_pages(b.len()) {
            return corrupt(K, "directory page index beyond what the header can list");
        }
        Ok(DirView { b, index })
    }

    pub fn per_page(&self) -> usize {
        dir_per_page(self.b.len())
    }

    /// Primary block of the bucket in slot `i` ([`NO_BLOCK`]: no bucket).
    pub fn slot(&self, i: usize) -> Option<u32> {
        (i < self.per_page()).then(|| rd_u32(self.b, DIR_HDR + 4 * i))
    }
}

/// A directory body: page `index` with the given leading slots, the rest
/// [`NO_BLOCK`].
pub fn build_directory(cap: usize, index: u32, slots: &[u32]) -> Vec<u8> {
    let mut b = vec![0u8; cap];
    write_prefix(&mut b, MAGIC_DIRECTORY, TYPE_DIRECTORY, 0);
    wr_u32(&mut b, 8, index);
    for i in 0..dir_per_page(cap) {
        wr_u32(&mut b, DIR_HDR + 4 * i, slots.get(i).copied().unwrap_or(NO_BLOCK));
    }
    b
}

/// Sets slot `i` of a directory body (already validated).
pub fn set_dir_slot(b: &mut [u8], i: usize, blk: u32) -> Result<()> {
    if i >= dir_per_page(b.len()) {
        return Err(Error::BadInput("directory slot out of range"));
    }
    wr_u32(b, DIR_HDR + 4 * i, blk);
    Ok(())
}

// ---------------------------------------------------------------------------
// Bucket page

/// A validated bucket body (primary or overflow), searched in place.
#[derive(Clone, Copy, Debug)]
pub struct BucketView<'a> {
    b: &'a [u8],
    pub bucket: u32,
    /// Next overflow block, [`NO_BLOCK`] at the end of the chain.
    pub next: u32,
    /// The table's maxbucket when this chain was written by create or a
    /// split (readers compare it with the maxbucket they routed with).
    pub stamp: u32,
    pub primary: bool,
    n: usize,
    upper: usize,
}

impl<'a> BucketView<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        const K: PageKind = PageKind::Bucket;
        check_prefix(b, MAGIC_BUCKET, TYPE_BUCKET, K, BUCKET_HDR)?;
        if b[6] & !FLAG_PRIMARY != 0 || b[7] != 0 {
            return corrupt(K, "unknown flags");
        }
        let n = rd_u16(b, 20) as usize;
        let upper = rd_u16(b, 22) as usize;
        if BUCKET_HDR + n * SLOT > upper || upper > b.len() {
            return corrupt(K, "slot array and entry area overlap or leave the body");
        }
        Ok(BucketView {
            b,
            bucket: rd_u32(b, 8),
            next: rd_u32(b, 12),
            stamp: rd_u32(b, 16),
            primary: b[6] & FLAG_PRIMARY != 0,
            n,
            upper,
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// The whole body.
    pub fn body(&self) -> &'a [u8] {
        self.b
    }
    /// Start of the entry area; entries live in `[upper, cap)`.
    pub fn upper(&self) -> usize {
        self.upper
    }
    /// Bytes in use (header, slots, entries), as written (packed).
    pub fn used(&self) -> usize {
        BUCKET_HDR + self.n * SLOT + (self.b.len() - self.upper)
    }
    /// Bytes free for new entries (slot included in [`entry_cost`]).
    pub fn free(&self) -> usize {
        self.b.len() - self.used()
    }

    /// Hash in slot `i < len()` (in bounds by `parse`).
    #[inline]
    pub(crate) fn slot_hash(&self, i: usize) -> u32 {
        rd_u32(self.b, BUCKET_HDR + SLOT * i)
    }

    pub fn hash(&self, i: usize) -> Option<u32> {
        (i < self.n).then(|| self.slot_hash(i))
    }

    /// First slot whose hash is >= `hash`. Hashes are spread evenly over
    /// the u32 range (a bucket fixes only their low bits), so the search
    /// starts where `hash` would sit in an even spread and widens from
    /// there: on a page read cold, that is one or two cache lines of slots
    /// instead of a binary search's chain of eight dependent misses.
    pub fn lower_bound(&self, hash: u32) -> usize {
        let n = self.n;
        if n == 0 {
            return 0;
        }
        let guess = ((hash as u64 * n as u64) >> 32) as usize;
        let (mut lo, mut hi);
        if self.slot_hash(guess) < hash {
            // The answer is in (guess, n].
            lo = guess + 1;
            hi = n;
            let mut step = 1;
            while guess + step < n {
                let p = guess + step;
                if self.slot_hash(p) >= hash {
                    hi = p;
                    break;
                }
                lo = p + 1;
                step *= 2;
            }
        } else {
            // The answer is in [0, guess].
            lo = 0;
            hi = guess;
            let mut step = 1;
            while step <= guess {
                let p = guess - step;
                if self.slot_hash(p) < hash {
                    lo = p + 1;
                    break;
                }
                hi = p;
                step *= 2;
            }
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.slot_hash(mid) < hash {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Slot hashes from `lower_bound`'s binary search, for the tests.
    #[cfg(test)]
    pub fn lower_bound_binary(&self, hash: u32) -> usize {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.slot_hash(mid) < hash {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Where `e` belongs among the slots (slots are sorted by hash, then
    /// entry): the index of the first slot not below it, and whether that
    /// slot holds `e` itself. A binary search by hash, then by (key, TID)
    /// among the entries of that hash, which reads entry bodies only there:
    /// one key with many TIDs (a low-cardinality column) fills whole pages
    /// with a single hash.
    pub fn position(&self, e: &Entry) -> Result<(usize, bool)> {
        let n = self.len();
        let (mut lo, mut hi) = (self.lower_bound(e.hash), n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let below = match self.slot_hash(mid).cmp(&e.hash) {
                std::cmp::Ordering::Equal => self.entry(mid)? < *e,
                o => o == std::cmp::Ordering::Less,
            };
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let present = lo < n && self.slot_hash(lo) == e.hash && self.entry(lo)? == *e;
        Ok((lo, present))
    }

    /// Entry `i`, every offset and length checked.
    pub fn entry(&self, i: usize) -> Result<Entry<'a>> {
        const K: PageKind = PageKind::Bucket;
        if i >= self.n {
            return corrupt(K, "slot index out of range");
        }
        let s = BUCKET_HDR + SLOT * i;
        let off = rd_u16(self.b, s + 4) as usize;
        let len = self.b.len();
        if off < self.upper || off + TID_BYTES + 1 > len {
            return corrupt(K, "entry offset outside the entry area");
        }
        let tid = Tid::new(rd_u32(self.b, off), rd_u16(self.b, off + 4));
        let Some((klen, vl)) = varint::get_u64(&self.b[off + TID_BYTES..]) else {
            return corrupt(K, "key length runs off the body");
        };
        if klen == 0 || klen > MAX_KEY as u64 {
            return corrupt(K, "key length out of range");
        }
        let kstart = off + TID_BYTES + vl;
        let kend = kstart + klen as usize;
        if kend > len {
            return corrupt(K, "key runs off the body");
        }
        Ok(Entry { hash: self.slot_hash(i), key: &self.b[kstart..kend], tid })
    }

    /// Byte range of entry `i`'s body (for `verify`'s packing check).
    pub fn entry_span(&self, i: usize) -> Result<(usize, usize)> {
        let e = self.entry(i)?;
        let off = rd_u16(self.b, BUCKET_HDR + SLOT * i + 4) as usize;
        Ok((off, entry_len(e.key.len())))
    }

    pub fn entries(&self) -> impl Iterator<Item = Result<Entry<'a>>> + '_ {
        (0..self.n).map(move |i| self.entry(i))
    }
}

/// A bucket body of `cap` bytes holding `entries`, which must be sorted by
/// (hash, key, TID) and fit.
pub fn build_bucket(cap: usize, bucket: u32, next: u32, stamp: u32, primary: bool, entries: &[Entry]) -> Result<Vec<u8>> {
    if !(MIN_BODY..=MAX_BODY).contains(&cap) {
        return Err(Error::BadInput("body size out of range"));
    }
    let need: usize = BUCKET_HDR + entries.iter().map(|e| entry_cost(e.key.len())).sum::<usize>();
    if need > cap || entries.len() > u16::MAX as usize {
        return Err(Error::BadInput("entries do not fit a bucket page"));
    }
    if entries.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::BadInput("bucket entries not strictly sorted"));
    }
    let mut b = vec![0u8; cap];
    write_prefix(&mut b, MAGIC_BUCKET, TYPE_BUCKET, if primary { FLAG_PRIMARY } else { 0 });
    wr_u32(&mut b, 8, bucket);
    wr_u32(&mut b, 12, next);
    wr_u32(&mut b, 16, stamp);
    wr_u16(&mut b, 20, entries.len() as u16);
    let mut upper = cap;
    let mut tmp = Vec::with_capacity(3);
    for (i, e) in entries.iter().enumerate() {
        if e.key.is_empty() || e.key.len() > MAX_KEY {
            return Err(Error::BadInput("key length out of range"));
        }
        upper -= entry_len(e.key.len());
        wr_u32(&mut b, upper, e.tid.block);
        wr_u16(&mut b, upper + 4, e.tid.offset);
        tmp.clear();
        varint::put_u64(&mut tmp, e.key.len() as u64);
        b[upper + TID_BYTES..upper + TID_BYTES + tmp.len()].copy_from_slice(&tmp);
        let k = upper + TID_BYTES + tmp.len();
        b[k..k + e.key.len()].copy_from_slice(e.key);
        let s = BUCKET_HDR + SLOT * i;
        wr_u32(&mut b, s, e.hash);
        wr_u16(&mut b, s + 4, upper as u16);
    }
    wr_u16(&mut b, 22, upper as u16);
    Ok(b)
}

/// `body` (a bucket page) with `new` added; `new` sorted, none of them on
/// the page yet, all fitting. The existing entry bodies keep their offsets,
/// the new ones are written just below `upper`, and the slot array is
/// merged. Only the slot array from the first insertion point on, the
/// counts and the new entry bytes change, so the glue's GenericXLog delta
/// stays small. The entry area stays packed (`[upper, cap)` is tiled).
pub fn add_to_bucket(body: &[u8], new: &[Entry]) -> Result<Vec<u8>> {
    let mut b = body.to_vec();
    add_to_bucket_in_place(&mut b, new)?;
    Ok(b)
}

/// [`add_to_bucket`] on the page itself: the new entries are written below
/// `upper` and the slot array is shifted open from the first insertion
/// point, so a page gaining a few entries is touched where it changes
/// rather than copied whole (a sync adds a few entries to each of
/// thousands of bucket pages). Every check is made before the first byte
/// changes: on error `b` is as it was.
pub fn add_to_bucket_in_place(b: &mut [u8], new: &[Entry]) -> Result<()> {
    let plan = plan_add(b, new)?;
    write_add(b, new, &plan);
    Ok(())
}

/// Where [`add_to_bucket_in_place`] puts new entries, found by every check
/// it makes.
struct AddPlan {
    /// Old entries on the page.
    n: usize,
    upper: usize,
    /// For new entry j, how many old slots sort before it.
    at: Vec<usize>,
}

fn plan_add(b: &[u8], new: &[Entry]) -> Result<AddPlan> {
    let v = BucketView::parse(b)?;
    let (n, m) = (v.len(), new.len());
    let add: usize = new.iter().map(|e| entry_cost(e.key.len())).sum();
    if v.used() + add > b.len() || n + m > u16::MAX as usize {
        return Err(Error::BadInput("entries do not fit a bucket page"));
    }
    if new.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::BadInput("bucket entries not strictly sorted"));
    }
    // Where each new entry goes among the old slots: before the first old
    // entry above it (slots are sorted by hash, then entry).
    let mut at = Vec::with_capacity(m);
    for e in new {
        if e.key.is_empty() || e.key.len() > MAX_KEY {
            return Err(Error::BadInput("key length out of range"));
        }
        let (place, present) = v.position(e)?;
        if present {
            return Err(Error::BadInput("entry already on the page"));
        }
        at.push(place);
    }
    Ok(AddPlan { n, upper: v.upper(), at })
}

/// Writes what `plan` (made on this very body) says; cannot fail.
fn write_add(b: &mut [u8], new: &[Entry], plan: &AddPlan) {
    let (n, m) = (plan.n, new.len());
    let at = &plan.at;
    let mut upper = plan.upper;
    let mut offs = Vec::with_capacity(m);
    let mut len_bytes = Vec::with_capacity(3);
    for e in new {
        upper -= entry_len(e.key.len());
        wr_u32(b, upper, e.tid.block);
        wr_u16(b, upper + 4, e.tid.offset);
        len_bytes.clear();
        varint::put_u64(&mut len_bytes, e.key.len() as u64);
        b[upper + TID_BYTES..upper + TID_BYTES + len_bytes.len()].copy_from_slice(&len_bytes);
        let k = upper + TID_BYTES + len_bytes.len();
        b[k..k + e.key.len()].copy_from_slice(e.key);
        offs.push(upper as u16);
    }
    // From the back: the old slots at or above new entry j's place move up
    // by j + 1, and entry j lands at its place + j.
    let mut end = n;
    for j in (0..m).rev() {
        let p = at[j];
        b.copy_within(BUCKET_HDR + SLOT * p..BUCKET_HDR + SLOT * end, BUCKET_HDR + SLOT * (p + j + 1));
        let s = BUCKET_HDR + SLOT * (p + j);
        wr_u32(b, s, new[j].hash);
        wr_u16(b, s + 4, offs[j]);
        end = p;
    }
    wr_u16(b, 20, (n + m) as u16);
    wr_u16(b, 22, upper as u16);
}

/// Whether [`apply_adds_in_place`] would apply `adds` to `body`: the same
/// checks, nothing changed (the WAL checks every page of a step before it
/// changes any).
pub fn check_adds(body: &[u8], adds: &[u8]) -> Result<()> {
    plan_add(body, &decode_adds(adds)?).map(|_| ())
}

/// [`apply_adds`] on the page itself ([`add_to_bucket_in_place`]); on
/// error the body is unchanged.
pub fn apply_adds_in_place(body: &mut [u8], adds: &[u8]) -> Result<()> {
    add_to_bucket_in_place(body, &decode_adds(adds)?)
}

/// Entries to add to a bucket page, as [`Change::Add`] carries them and
/// the glue logs them: per entry `hash u32 | TID block u32 | TID offset u16
/// | key length varint | key`, in the order given (sorted, as
/// [`add_to_bucket`] wants them).
pub fn encode_adds(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.iter().map(|e| 4 + entry_len(e.key.len())).sum());
    for e in entries {
        out.extend_from_slice(&e.hash.to_le_bytes());
        out.extend_from_slice(&e.tid.block.to_le_bytes());
        out.extend_from_slice(&e.tid.offset.to_le_bytes());
        varint::put_u64(&mut out, e.key.len() as u64);
        out.extend_from_slice(e.key);
    }
    out
}

/// The entries [`encode_adds`] encoded.
pub fn decode_adds(mut b: &[u8]) -> Result<Vec<Entry<'_>>> {
    let bad = || Error::BadInput("malformed bucket additions");
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 4 + TID_BYTES {
            return Err(bad());
        }
        let hash = rd_u32(b, 0);
        let tid = Tid::new(rd_u32(b, 4), rd_u16(b, 8));
        let (len, n) = varint::get_u64(&b[4 + TID_BYTES..]).ok_or_else(bad)?;
        let k = 4 + TID_BYTES + n;
        if len == 0 || len > MAX_KEY as u64 || b.len() < k + len as usize {
            return Err(bad());
        }
        out.push(Entry { hash, key: &b[k..k + len as usize], tid });
        b = &b[k + len as usize..];
    }
    Ok(out)
}

/// The body [`add_to_bucket`] makes of `body` and the entries `adds`
/// encodes: the same function on the primary and in WAL redo.
pub fn apply_adds(body: &[u8], adds: &[u8]) -> Result<Vec<u8>> {
    add_to_bucket(body, &decode_adds(adds)?)
}


/// Rewrites the next-overflow link of a bucket body.
pub fn set_next(b: &mut [u8], next: u32) -> Result<()> {
    BucketView::parse(b)?;
    wr_u32(b, 12, next);
    Ok(())
}
