//! The linear-hashing table over a [`HashPages`] pool.
//!
//! Every modification is a sequence of *steps* of at most
//! [`MAX_STEP_PAGES`] blocks, each applied atomically (one GenericXLog
//! record on PostgreSQL). The table is valid after every step: pages are
//! written before the step that links them in, and the header's counters
//! change in the same step as the entries they count. Inserts and deletes
//! rewrite a page in place and never move an entry to another page; a split
//! writes two fresh chains and switches the directory and the header to
//! them in one step. README.md gives the step order of each operation.
//!
//! The table assumes one writer at a time (the glue serialises writers);
//! readers run concurrently, one page at a time, through [`Probe`].

use std::collections::HashSet;

use super::page::*;
use super::pool::{Change, HashPages};
use super::*;

// ---------------------------------------------------------------------------
// Configuration, reports

/// Options of a new table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Buckets of the empty table, a power of two.
    pub initial_buckets: u32,
    /// Split trigger: split while the entry bytes exceed this percentage of
    /// `body_cap` per bucket. 10..=1000 (above 100 a bucket is expected to
    /// have overflow pages).
    pub fill_pct: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config { initial_buckets: 2, fill_pct: DEFAULT_FILL_PCT }
    }
}

impl Config {
    /// Rejects settings the table cannot honour (reloption validation).
    pub fn validate(&self, cap: usize) -> Result<()> {
        if !(MIN_BODY..=MAX_BODY).contains(&cap) {
            return Err(Error::BadInput("body size out of range"));
        }
        if !self.initial_buckets.is_power_of_two() {
            return Err(Error::BadInput("initial_buckets must be a power of two"));
        }
        if self.initial_buckets as u64 > max_buckets(cap) {
            return Err(Error::BadInput("initial_buckets exceeds what the directory can hold"));
        }
        if !(10..=1000).contains(&self.fill_pct) {
            return Err(Error::BadInput("fill_pct must be within 10..=1000"));
        }
        Ok(())
    }

    /// The fill target in bytes per bucket, as stored in the header.
    pub fn fill_bytes(&self, cap: usize) -> u32 {
        (cap as u64 * self.fill_pct as u64 / 100).max(1) as u32
    }
}

/// What `insert_batch` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsertReport {
    pub inserted: u64,
    /// Entries already in the table, or repeated within the batch.
    pub present: u64,
    pub splits: u64,
    pub overflow_pages_added: u64,
}

/// Counters for `index_stats`, from the header alone.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub buckets: u64,
    pub entries: u64,
    /// Header + directory + primary + overflow pages.
    pub pages: u64,
    pub directory_pages: u64,
    pub overflow_pages: u64,
    pub entry_bytes: u64,
    /// Split trigger, bytes per bucket.
    pub fill_target: u32,
    /// Entry bytes over the usable bytes of all bucket pages (0..=1).
    pub avg_fill: f64,
    /// Buckets the directory can address.
    pub max_buckets: u64,
}

/// What `verify` saw. `errors` is empty for a valid table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub entries: u64,
    pub buckets: u64,
    pub directory_pages: u64,
    pub overflow_pages: u64,
    /// Overflow pages without entries (VACUUM unlinks them).
    pub empty_overflow_pages: u64,
    /// Pages reachable from the header, the header included.
    pub pages: u64,
    pub bytes: u64,
    /// Pages in the longest chain (1: no overflow anywhere).
    pub max_chain: u64,
    pub errors: Vec<String>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
    fn err(&mut self, msg: String) {
        const MAX: usize = 100;
        if self.errors.len() < MAX {
            self.errors.push(msg);
        } else if self.errors.len() == MAX {
            self.errors.push("(more errors not listed)".into());
        }
    }
}

/// Lookup results with their keys, reusable without reallocating: keys
/// are copied into one byte arena.
#[derive(Clone, Debug, Default)]
pub struct Matches {
    tids: Vec<Tid>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl Matches {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn clear(&mut self) {
        self.tids.clear();
        self.ends.clear();
        self.bytes.clear();
    }
    pub fn push(&mut self, key: &[u8], tid: Tid) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
        self.tids.push(tid);
    }
    pub fn len(&self) -> usize {
        self.tids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }
    pub fn tids(&self) -> &[Tid] {
        &self.tids
    }
    pub fn tid(&self, i: usize) -> Tid {
        self.tids[i]
    }
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Tid)> + '_ {
        (0..self.len()).map(move |i| (self.key(i), self.tids[i]))
    }
}

// ---------------------------------------------------------------------------
// Probe: a lookup one page at a time

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    Header,
    Dir { blk: u32, index: u32, slot: usize },
    Chain { blk: u32, primary: bool },
    Done,
}

/// A lookup as a state machine over page bodies, for the glue, which must
/// hold one buffer lock at a time:
///
/// ```text
/// let mut p = Probe::new(header_blk, hash);
/// while let Some(blk) = p.next_block() {
///     let page = lock_shared(blk);          // one page locked at a time
///     p.feed(&page, &mut eq, &mut |key, tid| ...)?;
/// }                                         // unlock before the next read
/// ```
///
/// The probe reads the header (or starts from a cached one), one directory
/// page, then the chain. If the primary page was written by a split the
/// header it routed with did not know about (its stamp is above that
/// maxbucket), the bucket may have lost entries to a newer bucket: the
/// probe goes back to the header and routes again. This happens before any
/// entry of the page is reported, so no duplicates are produced.
#[derive(Clone, Debug)]
pub struct Probe {
    hash: u32,
    header_blk: u32,
    next: Next,
    cap: usize,
    maxbucket: u32,
    bucket: u32,
    stamp: u32,
    /// maxbucket of the header whose route led to a newer chain.
    stale_at: Option<u32>,
    hops: u64,
    max_hops: u64,
    pages: u32,
    restarts: u32,
}

impl Probe {
    /// A probe starting at the header page.
    pub fn new(header_blk: u32, hash: u32) -> Probe {
        Probe {
            hash,
            header_blk,
            next: Next::Header,
            cap: 0,
            maxbucket: 0,
            bucket: 0,
            stamp: 0,
            stale_at: None,
            hops: 0,
            max_hops: 0,
            pages: 0,
            restarts: 0,
        }
    }

    /// A probe routed with a header the caller cached (PostgreSQL's hash
    /// keeps its metapage in rd_amcache the same way): it starts at the
    /// directory page and falls back to reading the header only if the
    /// cache is too old for this bucket. Directory blocks never move, so
    /// any old header routes to a valid directory page.
    pub fn with_header(header_blk: u32, hdr: &Header, hash: u32) -> Probe {
        let mut p = Probe::new(header_blk, hash);
        if p.route(hdr.lowmask, hdr.highmask, hdr.maxbucket, hdr.npages, hdr.cap as usize, |i| hdr.dirs.get(i).copied()).is_err() {
            p.next = Next::Header;
        }
        p
    }

    /// A probe routed with a cached header and a cached copy of the
    /// directory (`primary` gives a bucket's primary block): it starts at
    /// the bucket's primary page, so a bucket without overflow pages costs
    /// one page read. The cache must be no older than the chains it
    /// names can be kept (the glue keys it by the generation that keeps
    /// retired blocks from reuse); a chain split after the cache was taken
    /// carries a newer stamp, and the probe routes again from the header.
    pub fn with_directory(header_blk: u32, hdr: &Header, hash: u32, primary: impl Fn(u32) -> Option<u32>) -> Probe {
        let mut p = Probe::with_header(header_blk, hdr, hash);
        if let Next::Dir { .. } = p.next {
            if let Some(blk) = primary(p.bucket).filter(|&b| b != NO_BLOCK) {
                p.next = Next::Chain { blk, primary: true };
            }
        }
        p
    }

    /// The block whose body `feed` wants next; `None` when done.
    pub fn next_block(&self) -> Option<u32> {
        match self.next {
            Next::Header => Some(self.header_blk),
            Next::Dir { blk, .. } | Next::Chain { blk, .. } => Some(blk),
            Next::Done => None,
        }
    }

    /// The bucket routed to (valid once the directory page was fed).
    pub fn bucket(&self) -> u32 {
        self.bucket
    }
    /// Pages fed so far.
    pub fn pages_read(&self) -> u32 {
        self.pages
    }
    /// Times the probe went back to the header (a concurrent split).
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    fn route(&mut self, lowmask: u32, highmask: u32, maxbucket: u32, npages: u64, cap: usize, dir: impl Fn(usize) -> Option<u32>) -> Result<()> {
        let per = dir_per_page(cap);
        let bucket = bucket_for(self.hash, lowmask, highmask, maxbucket);
        let index = bucket as usize / per;
        let Some(blk) = dir(index) else {
            return corrupt(PageKind::Header, "directory page of a bucket not listed");
        };
        self.cap = cap;
        self.maxbucket = maxbucket;
        self.bucket = bucket;
        self.max_hops = npages.saturating_mul(2).saturating_add(64);
        self.hops = 0;
        self.next = Next::Dir { blk, index: index as u32, slot: bucket as usize % per };
        Ok(())
    }

    /// Consumes the body of `next_block()`: `eq` is asked about each key
    /// stored with the probe's hash (once per run of byte-equal keys on a
    /// page), and `hit` receives every entry `eq` accepts.
    pub fn feed(&mut self, body: &[u8], eq: &mut dyn FnMut(&[u8]) -> bool, hit: &mut dyn FnMut(&[u8], Tid)) -> Result<()> {
        let Some(blk) = self.next_block() else {
            return Err(Error::BadInput("probe fed after it finished"));
        };
        self.pages = self.pages.saturating_add(1);
        self.step(body, eq, hit).map_err(|e| e.at(blk))
    }

    fn step(&mut self, body: &[u8], eq: &mut dyn FnMut(&[u8]) -> bool, hit: &mut dyn FnMut(&[u8], Tid)) -> Result<()> {
        match self.next {
            Next::Done => Err(Error::BadInput("probe fed after it finished")),
            Next::Header => {
                let h = HeaderView::parse(body)?;
                if self.stale_at.is_some_and(|s| h.maxbucket <= s) {
                    return corrupt(PageKind::Bucket, "bucket chain is newer than the header");
                }
                self.route(h.lowmask, h.highmask, h.maxbucket, h.npages, h.cap(), |i| h.dir_block(i))
            }
            Next::Dir { index, slot, .. } => {
                if body.len() != self.cap {
                    return corrupt(PageKind::Directory, "body size differs from the header's");
                }
                let d = DirView::parse(body)?;
                if d.index != index {
                    return corrupt(PageKind::Directory, "directory page index does not match its place");
                }
                match d.slot(slot) {
                    Some(p) if p != NO_BLOCK => {
                        self.next = Next::Chain { blk: p, primary: true };
                        Ok(())
                    }
                    _ => corrupt(PageKind::Directory, "bucket without a primary page"),
                }
            }
            Next::Chain { primary, .. } => {
                if body.len() != self.cap {
                    return corrupt(PageKind::Bucket, "body size differs from the header's");
                }
                let v = BucketView::parse(body)?;
                if v.bucket != self.bucket {
                    return corrupt(PageKind::Bucket, "page belongs to another bucket");
                }
                if v.primary != primary {
                    return corrupt(PageKind::Bucket, "primary flag does not match the page's place in its chain");
                }
                if primary {
                    if v.stamp > self.maxbucket {
                        // Split after our header was read: route again.
                        self.stale_at = Some(self.maxbucket);
                        self.restarts += 1;
                        self.next = Next::Header;
                        return Ok(());
                    }
                    if v.stamp < self.bucket {
                        return corrupt(PageKind::Bucket, "chain older than its bucket");
                    }
                    self.stamp = v.stamp;
                } else if v.stamp != self.stamp {
                    return corrupt(PageKind::Bucket, "overflow page from another chain");
                }
                let mut i = v.lower_bound(self.hash);
                let mut last: Option<(&[u8], bool)> = None;
                while v.hash(i) == Some(self.hash) {
                    let e = v.entry(i)?;
                    let ok = match last {
                        Some((k, r)) if k == e.key => r,
                        _ => eq(e.key),
                    };
                    last = Some((e.key, ok));
                    if ok {
                        hit(e.key, e.tid);
                    }
                    i += 1;
                }
                self.hops += 1;
                if v.next == NO_BLOCK {
                    self.next = Next::Done;
                } else if self.hops > self.max_hops {
                    return corrupt(PageKind::Bucket, "overflow chain does not end");
                } else {
                    self.next = Next::Chain { blk: v.next, primary: false };
                }
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The table

/// The hash path of one index: the pool and the header block.
pub struct HashArea<P: HashPages> {
    pub pool: P,
    header_blk: u32,
}

fn write(blk: u32, body: Vec<u8>) -> Change {
    Change::Write { blk, body }
}

/// Sorted entries cut into runs that each fill one bucket page.
fn pack(ents: &[Entry], usable: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, e) in ents.iter().enumerate() {
        let c = e.cost();
        if used + c > usable && i > start {
            out.push((start, i));
            start = i;
            used = 0;
        }
        used += c;
    }
    out.push((start, ents.len()));
    out
}

/// Marks the entries of `new` that `v` holds.
fn mark_present(v: &BucketView, new: &[Entry], present: &mut [bool]) -> Result<()> {
    if v.is_empty() || new.is_empty() {
        return Ok(());
    }
    // A sync adds a few entries to a page of hundreds: each is looked up
    // (`BucketView::position`), not walked to: one key with many TIDs
    // fills whole chains with a single hash, and a walk read every entry
    // of every page of the chain for each new entry. Only the new entries
    // between the page's first and last can be on it (`new` is sorted, and
    // so is a page): a key whose TIDs only grow (an index on a column with
    // one value, as TPC-C's history has) puts every new entry past the
    // last of each full page of its long chain, and looking each up on
    // every page was most of a sync of such an index.
    let first = v.entry(0)?;
    let last = v.entry(v.len() - 1)?;
    let from = new.partition_point(|e| *e < first);
    let to = from + new[from..].partition_point(|e| *e <= last);
    for (j, e) in new.iter().enumerate().take(to).skip(from) {
        if v.position(e)?.1 {
            present[j] = true;
        }
    }
    Ok(())
}

fn sum_cost(ents: &[Entry]) -> u64 {
    ents.iter().map(|e| e.cost() as u64).sum()
}

fn sub_counts(hdr: &mut Header, n: u64, bytes: u64) -> Result<()> {
    match (hdr.nentries.checked_sub(n), hdr.entry_bytes.checked_sub(bytes)) {
        (Some(a), Some(b)) => {
            hdr.nentries = a;
            hdr.entry_bytes = b;
            Ok(())
        }
        _ => corrupt(PageKind::Header, "header counts below the entries found"),
    }
}

/// Checks a chain page's identity: bucket, place, stamp.
fn check_chain_page(v: &BucketView, hdr: &Header, bucket: u32, first: bool, stamp: u32) -> Result<()> {
    const K: PageKind = PageKind::Bucket;
    if v.bucket != bucket {
        return corrupt(K, "page belongs to another bucket");
    }
    if v.primary != first {
        return corrupt(K, "primary flag does not match the page's place in its chain");
    }
    if first {
        if v.stamp > hdr.maxbucket {
            return corrupt(K, "chain newer than the header");
        }
        if v.stamp < bucket {
            return corrupt(K, "chain older than its bucket");
        }
    } else if v.stamp != stamp {
        return corrupt(K, "overflow page from another chain");
    }
    Ok(())
}

impl<P: HashPages> HashArea<P> {
    /// A new empty table of `cfg.initial_buckets` buckets. The header is the
    /// first block allocated (block 0 of a fresh relation) and written last.
    pub fn create(mut pool: P, cfg: Config) -> Result<Self> {
        let cap = pool.body_cap();
        cfg.validate(cap)?;
        let n = cfg.initial_buckets;
        let per = dir_per_page(cap);
        let ndir = (n as usize - 1) / per + 1;
        let header_blk = pool.alloc()?;
        let dirs = (0..ndir).map(|_| pool.alloc()).collect::<Result<Vec<u32>>>()?;
        let prim = (0..n).map(|_| pool.alloc()).collect::<Result<Vec<u32>>>()?;
        let mut changes = Vec::with_capacity(ndir + n as usize);
        for (b, &blk) in prim.iter().enumerate() {
            changes.push(write(blk, build_bucket(cap, b as u32, NO_BLOCK, n - 1, true, &[])?));
        }
        for (i, &d) in dirs.iter().enumerate() {
            let hi = ((i + 1) * per).min(n as usize);
            changes.push(write(d, build_directory(cap, i as u32, &prim[i * per..hi])));
        }
        let hdr = Header {
            cap: cap as u32,
            lowmask: n - 1,
            highmask: 2 * n - 1,
            maxbucket: n - 1,
            fill: cfg.fill_bytes(cap),
            nentries: 0,
            npages: 1 + ndir as u64 + n as u64,
            entry_bytes: 0,
            dirs,
        };
        let mut a = HashArea { pool, header_blk };
        a.apply_all(changes)?;
        a.pool.apply(vec![write(header_blk, hdr.to_body())])?;
        Ok(a)
    }

    /// Opens an existing table (checks the header).
    pub fn open(pool: P, header_blk: u32) -> Result<Self> {
        let a = HashArea { pool, header_blk };
        a.header()?;
        Ok(a)
    }

    /// A handle without reading anything (every operation reads and checks
    /// the header itself; the handle caches nothing).
    pub fn attach(pool: P, header_blk: u32) -> Self {
        HashArea { pool, header_blk }
    }

    pub fn header_block(&self) -> u32 {
        self.header_blk
    }

    pub fn into_pool(self) -> P {
        self.pool
    }

    fn cap(&self) -> usize {
        self.pool.body_cap()
    }

    fn apply_all(&mut self, changes: Vec<Change>) -> Result<()> {
        let mut it = changes.into_iter().peekable();
        while it.peek().is_some() {
            let step: Vec<Change> = it.by_ref().take(MAX_STEP_PAGES).collect();
            self.pool.apply(step)?;
        }
        Ok(())
    }

    fn hdr_change(&self, hdr: &Header) -> Change {
        write(self.header_blk, hdr.to_body())
    }

    fn read_body(&self, blk: u32) -> Result<Vec<u8>> {
        let p = self.pool.read(blk)?;
        if p.len() != self.cap() {
            return Err(Error::Corrupt { blk, kind: PageKind::Block, why: "page body of the wrong size" });
        }
        Ok(p.to_vec())
    }

    /// The header, validated.
    pub fn header(&self) -> Result<Header> {
        let p = self.pool.read(self.header_blk)?;
        if p.len() != self.cap() {
            return Err(Error::Corrupt { blk: self.header_blk, kind: PageKind::Header, why: "page body of the wrong size" });
        }
        Header::parse(&p).map_err(|e| e.at(self.header_blk))
    }

    /// The bucket `hash` maps to now.
    pub fn bucket_of(&self, hash: u32) -> Result<u32> {
        Ok(self.header()?.bucket_of(hash))
    }

    fn read_dir_body(&self, hdr: &Header, index: usize) -> Result<Vec<u8>> {
        let Some(&blk) = hdr.dirs.get(index) else {
            return Err(Error::Corrupt { blk: self.header_blk, kind: PageKind::Header, why: "directory page not listed" });
        };
        let body = self.read_body(blk)?;
        let d = DirView::parse(&body).map_err(|e| e.at(blk))?;
        if d.index as usize != index {
            return Err(Error::Corrupt { blk, kind: PageKind::Directory, why: "directory page index does not match its place" });
        }
        Ok(body)
    }

    fn primary_of(&self, hdr: &Header, bucket: u32) -> Result<u32> {
        let per = hdr.per_page();
        let index = bucket as usize / per;
        let Some(&blk) = hdr.dirs.get(index) else {
            return Err(Error::Corrupt { blk: self.header_blk, kind: PageKind::Header, why: "directory page not listed" });
        };
        let p = self.pool.read(blk)?;
        let d = DirView::parse(&p).map_err(|e| e.at(blk))?;
        if d.index as usize != index || p.len() != self.cap() {
            return Err(Error::Corrupt { blk, kind: PageKind::Directory, why: "directory page index does not match its place" });
        }
        match d.slot(bucket as usize % per) {
            Some(b) if b != NO_BLOCK => Ok(b),
            _ => Err(Error::Corrupt { blk, kind: PageKind::Directory, why: "bucket without a primary page" }),
        }
    }

    /// The primary block of every bucket of `hdr` (bucket i at index i),
    /// read from the directory pages one at a time: with `hdr`, what a
    /// reader caches to probe through [`Probe::with_directory`].
    pub fn primaries(&self, hdr: &Header) -> Result<Vec<u32>> {
        let per = hdr.per_page();
        let n = hdr.maxbucket as usize + 1;
        let mut out = Vec::with_capacity(n);
        for index in 0..n.div_ceil(per) {
            let body = self.read_dir_body(hdr, index)?;
            let d = DirView::parse(&body)?;
            for slot in 0..per.min(n - out.len()) {
                match d.slot(slot) {
                    Some(b) if b != NO_BLOCK => out.push(b),
                    _ => return Err(Error::Corrupt { blk: hdr.dirs[index], kind: PageKind::Directory, why: "bucket without a primary page" }),
                }
            }
        }
        Ok(out)
    }

    /// Calls `f` on every page of `bucket`'s chain, checked, in order.
    fn walk_chain(&self, hdr: &Header, bucket: u32, f: &mut dyn FnMut(u32, &BucketView) -> Result<()>) -> Result<()> {
        let mut blk = self.primary_of(hdr, bucket)?;
        let (mut first, mut stamp, mut hops) = (true, 0, 0u64);
        loop {
            hops += 1;
            if hops > hdr.npages {
                return Err(Error::Corrupt { blk, kind: PageKind::Bucket, why: "overflow chain longer than the table" });
            }
            let p = self.pool.read(blk)?;
            if p.len() != self.cap() {
                return Err(Error::Corrupt { blk, kind: PageKind::Block, why: "page body of the wrong size" });
            }
            let v = BucketView::parse(&p).map_err(|e| e.at(blk))?;
            check_chain_page(&v, hdr, bucket, first, stamp).map_err(|e| e.at(blk))?;
            if first {
                stamp = v.stamp;
            }
            f(blk, &v).map_err(|e| e.at(blk))?;
            if v.next == NO_BLOCK {
                return Ok(());
            }
            blk = v.next;
            first = false;
        }
    }

    /// Copies of the chain's pages (writers prepare new images from them).
    fn read_chain(&self, hdr: &Header, bucket: u32) -> Result<Vec<(u32, Vec<u8>)>> {
        let mut out = Vec::new();
        self.walk_chain(hdr, bucket, &mut |blk, v| {
            out.push((blk, v.body().to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    // ------------------------------------------------------------ reads

    /// A probe for `hash` starting at the header (see [`Probe`]).
    pub fn probe(&self, hash: u32) -> Probe {
        Probe::new(self.header_blk, hash)
    }

    /// Drives a probe to the end over this pool.
    pub fn run_probe(&self, p: &mut Probe, eq: &mut dyn FnMut(&[u8]) -> bool, hit: &mut dyn FnMut(&[u8], Tid)) -> Result<()> {
        self.run_probe_upto(p, eq, hit, usize::MAX).map(|_| ())
    }

    /// As [`run_probe`](Self::run_probe), but stops before reading another
    /// page once more than `limit` entries were hits; false when it stopped
    /// there (the hits are then a prefix of the chain's, in no useful
    /// order). A caller with another path to the key (griffin's tree) takes
    /// it for a key with that many entries rather than read its whole chain.
    pub fn run_probe_upto(&self, p: &mut Probe, eq: &mut dyn FnMut(&[u8]) -> bool, hit: &mut dyn FnMut(&[u8], Tid), limit: usize) -> Result<bool> {
        let mut hits = 0usize;
        while let Some(blk) = p.next_block() {
            if hits > limit {
                return Ok(false);
            }
            let page = self.pool.read(blk)?;
            p.feed(&page, eq, &mut |k, t| {
                hits += 1;
                hit(k, t)
            })?;
        }
        Ok(true)
    }

    /// TIDs of every entry with hash `hash` whose key `eq` accepts. `out` is
    /// cleared first; nothing else is allocated.
    pub fn lookup(&self, hash: u32, eq: &mut dyn FnMut(&[u8]) -> bool, out: &mut Vec<Tid>) -> Result<()> {
        out.clear();
        let mut p = self.probe(hash);
        self.run_probe(&mut p, eq, &mut |_, t| out.push(t))
    }

    /// As [`lookup`](Self::lookup), with the stored keys, stopping after
    /// more than `limit` hits: false then (see `run_probe_upto`).
    pub fn lookup_matches(&self, hash: u32, eq: &mut dyn FnMut(&[u8]) -> bool, out: &mut Matches, limit: usize) -> Result<bool> {
        out.clear();
        let mut p = self.probe(hash);
        self.run_probe_upto(&mut p, eq, &mut |k, t| out.push(k, t), limit)
    }

    /// Every entry, bucket by bucket, chain order.
    pub fn for_each_entry(&self, f: &mut dyn FnMut(&Entry)) -> Result<()> {
        let hdr = self.header()?;
        for b in 0..=hdr.maxbucket {
            self.walk_chain(&hdr, b, &mut |_, v| {
                for e in v.entries() {
                    f(&e?);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Every block reachable from the header (header, directory, chains),
    /// sorted. The glue's orphan sweep frees the blocks of the relation that
    /// are neither in this list nor retired and waiting.
    pub fn reachable_blocks(&self) -> Result<Vec<u32>> {
        let hdr = self.header()?;
        let mut out = vec![self.header_blk];
        out.extend_from_slice(&hdr.dirs);
        for b in 0..=hdr.maxbucket {
            self.walk_chain(&hdr, b, &mut |blk, _| {
                out.push(blk);
                Ok(())
            })?;
        }
        out.sort_unstable();
        Ok(out)
    }

    pub fn stats(&self) -> Result<Stats> {
        let h = self.header()?;
        let bucket_pages = h.nbuckets() + h.overflow_pages();
        let usable = (self.cap() - BUCKET_HDR) as f64;
        Ok(Stats {
            buckets: h.nbuckets(),
            entries: h.nentries,
            pages: h.npages,
            directory_pages: h.dirs.len() as u64,
            overflow_pages: h.overflow_pages(),
            entry_bytes: h.entry_bytes,
            fill_target: h.fill,
            avg_fill: h.entry_bytes as f64 / (bucket_pages as f64 * usable),
            max_buckets: max_buckets(self.cap()),
        })
    }

    // ------------------------------------------------------------ inserts

    /// Adds every entry that is not there yet (idempotent: re-running a batch
    /// after a crash completes it), then splits buckets while the entry
    /// bytes exceed the fill target. Entries may come in any order. The
    /// batch is applied in chunks of about half the table's target size
    /// (at least four pages), splitting after each chunk, so a large batch
    /// into a small table does not first build long chains.
    pub fn insert_batch(&mut self, entries: &[Entry<'_>]) -> Result<InsertReport> {
        let cap = self.cap();
        let maxk = max_key_len(cap);
        for e in entries {
            if e.key.is_empty() {
                return Err(Error::BadInput("empty key"));
            }
            if e.key.len() > maxk {
                return Err(Error::KeyTooLong { len: e.key.len(), max: maxk });
            }
        }
        let mut rep = InsertReport::default();
        let mut hdr = self.header()?;
        let mut i = 0;
        loop {
            let budget = (hdr.fill as u64 * hdr.nbuckets() / 2).max(4 * cap as u64);
            let (mut j, mut bytes) = (i, 0u64);
            while j < entries.len() && bytes < budget {
                bytes += entries[j].cost() as u64;
                j += 1;
            }
            self.insert_chunk(&mut hdr, &entries[i..j], &mut rep)?;
            rep.splits += self.split_while_over_inner(&mut hdr)? as u64;
            i = j;
            if i >= entries.len() {
                return Ok(rep);
            }
        }
    }

    fn insert_chunk(&mut self, hdr: &mut Header, chunk: &[Entry], rep: &mut InsertReport) -> Result<()> {
        let mut v: Vec<(u32, Entry)> = chunk.iter().map(|e| (hdr.bucket_of(e.hash), *e)).collect();
        v.sort_unstable();
        v.dedup();
        rep.present += (chunk.len() - v.len()) as u64;
        let mut group = Vec::new();
        let mut s = 0;
        while s < v.len() {
            let b = v[s].0;
            let e = s + v[s..].partition_point(|x| x.0 == b);
            group.clear();
            group.extend(v[s..e].iter().map(|x| x.1));
            let n = self.insert_bucket(hdr, b, &group, rep)?;
            rep.inserted += n;
            rep.present += (e - s) as u64 - n;
            s = e;
        }
        Ok(())
    }

    /// Inserts `new` (sorted, distinct, all mapping to `bucket`) into the
    /// bucket's chain: first fit in chain order, then new overflow pages
    /// linked after the tail. Returns the number inserted.
    fn insert_bucket(&mut self, hdr: &mut Header, bucket: u32, new: &[Entry], rep: &mut InsertReport) -> Result<u64> {
        let cap = self.cap();
        // One pass over the chain in place: which new entries it holds
        // already, and each page's free bytes. No page is copied: a sync
        // adds a few entries to each of thousands of buckets, and copying
        // every chain page cost as much as adding to it. Only the tail is
        // read again, when new overflow pages are linked to it (this is
        // the only writer of the buckets, `HashArea`'s contract).
        let mut chain: Vec<u32> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut stamp = 0;
        let mut present = vec![false; new.len()];
        self.walk_chain(hdr, bucket, &mut |blk, v| {
            if chain.is_empty() {
                stamp = v.stamp;
            }
            chain.push(blk);
            free.push(v.free());
            mark_present(v, new, &mut present)
        })?;
        let mut placed: Vec<Vec<Entry>> = vec![Vec::new(); chain.len()];
        let mut fresh: Vec<(usize, Vec<Entry>)> = Vec::new();
        let usable = cap - BUCKET_HDR;
        let mut n = 0u64;
        for (e, _) in new.iter().zip(&present).filter(|(_, p)| !**p) {
            n += 1;
            let c = e.cost();
            if let Some(p) = free.iter().position(|&f| f >= c) {
                free[p] -= c;
                placed[p].push(*e);
            } else if let Some(f) = fresh.iter_mut().find(|f| f.0 >= c) {
                f.0 -= c;
                f.1.push(*e);
            } else {
                fresh.push((usable - c, vec![*e]));
            }
        }
        if n == 0 {
            return Ok(0);
        }
        let tail = chain.len() - 1;
        let fresh_blks = (0..fresh.len()).map(|_| self.pool.alloc()).collect::<Result<Vec<u32>>>()?;

        // The changes of the existing pages: (change, entries, bytes). A
        // page that only gains entries is an `Add` (its entries, not its
        // image); the tail that links new overflow pages is rewritten.
        let mut writes = Vec::new();
        let mut tail_write = None;
        for (p, &blk) in chain.iter().enumerate() {
            let link = p == tail && !fresh.is_empty();
            if placed[p].is_empty() && !link {
                continue;
            }
            let (cnt, bytes) = (placed[p].len() as u64, sum_cost(&placed[p]));
            if link {
                let mut body = {
                    let page = self.pool.read(blk)?;
                    add_to_bucket(&page, &placed[p]).map_err(|x| x.at(blk))?
                };
                set_next(&mut body, fresh_blks[0])?;
                tail_write = Some((blk, body, cnt, bytes));
            } else {
                writes.push((Change::Add { blk, adds: encode_adds(&placed[p]) }, cnt, bytes));
            }
        }

        // Steps 1..: pages with room, three per step with the header.
        let mut it = writes.into_iter().peekable();
        while it.peek().is_some() {
            let mut step = Vec::with_capacity(MAX_STEP_PAGES);
            for (change, cnt, bytes) in it.by_ref().take(MAX_STEP_PAGES - 1) {
                hdr.nentries = hdr.nentries.saturating_add(cnt);
                hdr.entry_bytes = hdr.entry_bytes.saturating_add(bytes);
                step.push(change);
            }
            step.push(self.hdr_change(hdr));
            self.pool.apply(step)?;
        }

        // New overflow pages: written before (or in) the step that links
        // them to the tail and counts their entries in the header.
        if let Some((tblk, tbody, tcnt, tbytes)) = tail_write {
            let k = fresh.len();
            let mut pages = Vec::with_capacity(k);
            let (mut fcnt, mut fbytes) = (tcnt, tbytes);
            for (j, (_, ents)) in fresh.iter().enumerate() {
                let next = fresh_blks.get(j + 1).copied().unwrap_or(NO_BLOCK);
                pages.push(write(fresh_blks[j], build_bucket(cap, bucket, next, stamp, false, ents)?));
                fcnt += ents.len() as u64;
                fbytes += sum_cost(ents);
            }
            let mut link = if k <= MAX_STEP_PAGES - 2 { pages } else {
                self.apply_all(pages)?;
                Vec::new()
            };
            hdr.nentries = hdr.nentries.saturating_add(fcnt);
            hdr.entry_bytes = hdr.entry_bytes.saturating_add(fbytes);
            hdr.npages = hdr.npages.saturating_add(k as u64);
            link.push(write(tblk, tbody));
            link.push(self.hdr_change(hdr));
            self.pool.apply(link)?;
            rep.overflow_pages_added += k as u64;
        }
        Ok(n)
    }

    // ------------------------------------------------------------ splits

    /// Splits the next bucket (linear hashing order) whether or not the
    /// table is over its fill target. False if the directory is full.
    pub fn split_one(&mut self) -> Result<bool> {
        let mut hdr = self.header()?;
        self.split_inner(&mut hdr)
    }

    /// Splits while the entry bytes exceed the fill target; returns the
    /// number of splits. `insert_batch` calls this itself.
    pub fn split_while_over(&mut self) -> Result<u32> {
        let mut hdr = self.header()?;
        self.split_while_over_inner(&mut hdr)
    }

    fn split_while_over_inner(&mut self, hdr: &mut Header) -> Result<u32> {
        let mut n = 0;
        while hdr.over_fill() && self.split_inner(hdr)? {
            n += 1;
        }
        Ok(n)
    }

    /// One copy-on-write split: bucket `old = new & lowmask` is rewritten as
    /// two fresh chains (old, new), unreferenced until the final step
    /// switches the directory slot(s) and the header to them; then the old
    /// chain is retired.
    fn split_inner(&mut self, hdr: &mut Header) -> Result<bool> {
        let cap = self.cap();
        let new_b = hdr.maxbucket + 1;
        if new_b as u64 >= max_buckets(cap) {
            return Ok(false);
        }
        let old_b = new_b & hdr.lowmask;
        let mut nh = hdr.clone();
        nh.maxbucket = new_b;
        if new_b > hdr.highmask {
            nh.lowmask = hdr.highmask;
            nh.highmask = new_b | nh.lowmask;
        }
        let chain = self.read_chain(hdr, old_b)?;
        let mut ents = Vec::new();
        for (blk, body) in &chain {
            let v = BucketView::parse(body).map_err(|e| e.at(*blk))?;
            for e in v.entries() {
                ents.push(e.map_err(|x| x.at(*blk))?);
            }
        }
        ents.sort_unstable();
        if ents.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::Corrupt { blk: chain[0].0, kind: PageKind::Bucket, why: "entry twice in one chain" });
        }
        let (mut stay, mut go) = (Vec::new(), Vec::new());
        for e in ents {
            match nh.bucket_of(e.hash) {
                b if b == old_b => stay.push(e),
                b if b == new_b => go.push(e),
                _ => return Err(Error::Corrupt { blk: chain[0].0, kind: PageKind::Bucket, why: "entry in a bucket its hash does not map to" }),
            }
        }
        let usable = cap - BUCKET_HDR;
        let mut changes = Vec::new();
        let mut heads = [NO_BLOCK; 2];
        let mut fresh_pages = 0u64;
        for (side, (b, ents)) in [(old_b, &stay), (new_b, &go)].into_iter().enumerate() {
            let runs = pack(ents, usable);
            let blks = (0..runs.len()).map(|_| self.pool.alloc()).collect::<Result<Vec<u32>>>()?;
            for (j, &(s, e)) in runs.iter().enumerate() {
                let next = blks.get(j + 1).copied().unwrap_or(NO_BLOCK);
                changes.push(write(blks[j], build_bucket(cap, b, next, new_b, j == 0, &ents[s..e])?));
            }
            heads[side] = blks[0];
            fresh_pages += blks.len() as u64;
        }
        // Steps 1..: the fresh chains, not yet reachable.
        self.apply_all(changes)?;

        // Final step: directory slot(s) and header together.
        let per = hdr.per_page();
        let (oi, os) = (old_b as usize / per, old_b as usize % per);
        let (ni, ns) = (new_b as usize / per, new_b as usize % per);
        let mut fin = Vec::with_capacity(MAX_STEP_PAGES);
        let mut od = self.read_dir_body(hdr, oi)?;
        set_dir_slot(&mut od, os, heads[0])?;
        if ni == oi {
            set_dir_slot(&mut od, ns, heads[1])?;
            fin.push(write(hdr.dirs[oi], od));
        } else {
            fin.push(write(hdr.dirs[oi], od));
            if ni < hdr.dirs.len() {
                let mut nd = self.read_dir_body(hdr, ni)?;
                set_dir_slot(&mut nd, ns, heads[1])?;
                fin.push(write(hdr.dirs[ni], nd));
            } else {
                // A new directory page, written in the same step that lists it.
                let blk = self.pool.alloc()?;
                fin.push(write(blk, build_directory(cap, ni as u32, &[heads[1]])));
                nh.dirs.push(blk);
                fresh_pages += 1;
            }
        }
        nh.npages = (hdr.npages - chain.len() as u64).saturating_add(fresh_pages);
        fin.push(self.hdr_change(&nh));
        let mut retire = chain.iter().map(|(blk, _)| Change::Retire(*blk));
        while fin.len() < MAX_STEP_PAGES {
            match retire.next() {
                Some(c) => fin.push(c),
                None => break,
            }
        }
        self.pool.apply(fin)?;
        *hdr = nh;
        // Retirements that did not fit: a crash before them leaves the old
        // pages unreachable and unretired, for the orphan sweep.
        self.apply_all(retire.collect())?;
        Ok(true)
    }

    // ------------------------------------------------------------ deletes

    /// VACUUM: removes every entry whose TID `dead` reports, in place (each
    /// page is rewritten without them; survivors stay on their page), and
    /// unlinks overflow pages that are (or become) empty. Returns the number
    /// of entries removed. Re-running after a crash completes it.
    pub fn remove(&mut self, dead: &mut dyn FnMut(Tid) -> bool) -> Result<u64> {
        let mut hdr = self.header()?;
        let mut n = 0;
        for b in 0..=hdr.maxbucket {
            n += self.vacuum_chain(&mut hdr, b, &mut |e| dead(e.tid))?;
        }
        Ok(n)
    }

    /// Removes these exact (hash, key bytes, TID) entries where present, in
    /// place; returns how many were found. Only their buckets are read.
    pub fn remove_entries(&mut self, entries: &[Entry<'_>]) -> Result<u64> {
        let mut hdr = self.header()?;
        let mut v: Vec<(u32, Entry)> = entries.iter().filter(|e| !e.key.is_empty() && e.key.len() <= MAX_KEY).map(|e| (hdr.bucket_of(e.hash), *e)).collect();
        v.sort_unstable();
        v.dedup();
        let mut n = 0;
        let mut group = Vec::new();
        let mut s = 0;
        while s < v.len() {
            let b = v[s].0;
            let e = s + v[s..].partition_point(|x| x.0 == b);
            group.clear();
            group.extend(v[s..e].iter().map(|x| x.1));
            n += self.vacuum_chain(&mut hdr, b, &mut |x| group.binary_search(x).is_ok())?;
            s = e;
        }
        Ok(n)
    }

    /// Rewrites each page of the chain without the entries `pred` selects
    /// (one step: the page and the header); an overflow page left empty is
    /// unlinked (one step: its predecessor with the new link, the header,
    /// and the page retired).
    fn vacuum_chain(&mut self, hdr: &mut Header, bucket: u32, pred: &mut dyn FnMut(&Entry) -> bool) -> Result<u64> {
        enum Action {
            Keep,
            Rewrite(Vec<u8>),
            Unlink,
        }
        let cap = self.cap();
        let mut blk = self.primary_of(hdr, bucket)?;
        let mut prev: Option<(u32, Vec<u8>)> = None;
        let (mut stamp, mut removed, mut hops) = (0, 0u64, 0u64);
        loop {
            hops += 1;
            if hops > hdr.npages {
                return Err(Error::Corrupt { blk, kind: PageKind::Bucket, why: "overflow chain longer than the table" });
            }
            let first = prev.is_none();
            let body = self.read_body(blk)?;
            let (action, next, rm, rm_bytes) = {
                let v = BucketView::parse(&body).map_err(|e| e.at(blk))?;
                check_chain_page(&v, hdr, bucket, first, stamp).map_err(|e| e.at(blk))?;
                if first {
                    stamp = v.stamp;
                }
                let mut keep = Vec::with_capacity(v.len());
                let (mut rm, mut rm_bytes) = (0u64, 0u64);
                for e in v.entries() {
                    let e = e.map_err(|x| x.at(blk))?;
                    if pred(&e) {
                        rm += 1;
                        rm_bytes += e.cost() as u64;
                    } else {
                        keep.push(e);
                    }
                }
                let action = if !first && keep.is_empty() {
                    Action::Unlink
                } else if rm > 0 {
                    Action::Rewrite(build_bucket(cap, bucket, v.next, stamp, first, &keep)?)
                } else {
                    Action::Keep
                };
                (action, v.next, rm, rm_bytes)
            };
            match action {
                Action::Keep => prev = Some((blk, body)),
                Action::Rewrite(nb) => {
                    sub_counts(hdr, rm, rm_bytes).map_err(|e| e.at(self.header_blk))?;
                    self.pool.apply(vec![write(blk, nb.clone()), self.hdr_change(hdr)])?;
                    prev = Some((blk, nb));
                }
                Action::Unlink => {
                    let Some((pblk, mut pbody)) = prev.take() else {
                        return Err(Error::BadInput("unlink without a predecessor"));
                    };
                    set_next(&mut pbody, next).map_err(|e| e.at(pblk))?;
                    sub_counts(hdr, rm, rm_bytes).map_err(|e| e.at(self.header_blk))?;
                    hdr.npages = hdr.npages.saturating_sub(1);
                    self.pool.apply(vec![write(pblk, pbody.clone()), self.hdr_change(hdr), Change::Retire(blk)])?;
                    prev = Some((pblk, pbody));
                }
            }
            removed += rm;
            if next == NO_BLOCK {
                return Ok(removed);
            }
            blk = next;
        }
    }

    // ------------------------------------------------------------ verify

    /// Checks everything: every reachable page valid and reachable once,
    /// directory slots set exactly for buckets 0..=maxbucket, chain pages
    /// of the right bucket and generation, slots sorted, entries packed and
    /// in the bucket their hash maps to, no (key, TID) twice in a bucket,
    /// and the header's entry, byte and page counts. Never fails: problems
    /// are listed in `errors`.
    pub fn verify(&self) -> VerifyReport {
        let mut r = VerifyReport::default();
        let hdr = match self.header() {
            Ok(h) => h,
            Err(e) => {
                r.err(format!("header: {e}"));
                return r;
            }
        };
        let cap = self.cap();
        let per = hdr.per_page();
        let nb = hdr.nbuckets() as usize;
        let mut seen = HashSet::new();
        seen.insert(self.header_blk);
        r.pages = 1;
        let mut primaries = vec![NO_BLOCK; nb];
        for (i, &d) in hdr.dirs.iter().enumerate() {
            if !seen.insert(d) {
                r.err(format!("directory page {i} at block {d} is reachable twice"));
                continue;
            }
            r.pages += 1;
            r.directory_pages += 1;
            let body = match self.read_body(d) {
                Ok(b) => b,
                Err(e) => {
                    r.err(format!("directory page {i}: {e}"));
                    continue;
                }
            };
            let dv = match DirView::parse(&body) {
                Ok(v) => v,
                Err(e) => {
                    r.err(format!("directory page {i}: {}", e.at(d)));
                    continue;
                }
            };
            if dv.index as usize != i {
                r.err(format!("directory page {i} at block {d} says it is page {}", dv.index));
            }
            for s in 0..per {
                let b = i * per + s;
                let p = dv.slot(s).unwrap_or(NO_BLOCK);
                if b < nb {
                    if p == NO_BLOCK {
                        r.err(format!("bucket {b} has no primary page"));
                    } else {
                        primaries[b] = p;
                    }
                } else if p != NO_BLOCK {
                    r.err(format!("directory slot {b} past maxbucket points at block {p}"));
                }
            }
        }
        for (b, &p) in primaries.iter().enumerate() {
            r.buckets += 1;
            if p != NO_BLOCK {
                self.verify_chain(&hdr, b as u32, p, cap, &mut seen, &mut r);
            }
        }
        if r.entries != hdr.nentries {
            r.err(format!("header counts {} entries, the chains hold {}", hdr.nentries, r.entries));
        }
        if r.bytes != hdr.entry_bytes {
            r.err(format!("header counts {} entry bytes, the chains hold {}", hdr.entry_bytes, r.bytes));
        }
        if r.pages != hdr.npages {
            r.err(format!("header counts {} pages, {} are reachable", hdr.npages, r.pages));
        }
        r
    }

    fn verify_chain(&self, hdr: &Header, b: u32, primary: u32, cap: usize, seen: &mut HashSet<u32>, r: &mut VerifyReport) {
        let mut keys: HashSet<(Vec<u8>, Tid)> = HashSet::new();
        let (mut blk, mut first, mut stamp, mut len) = (primary, true, 0, 0u64);
        loop {
            if !seen.insert(blk) {
                r.err(format!("bucket {b}: block {blk} is reachable twice"));
                break;
            }
            r.pages += 1;
            len += 1;
            if !first {
                r.overflow_pages += 1;
            }
            let body = match self.read_body(blk) {
                Ok(x) => x,
                Err(e) => {
                    r.err(format!("bucket {b}: {e}"));
                    break;
                }
            };
            let v = match BucketView::parse(&body) {
                Ok(v) => v,
                Err(e) => {
                    r.err(format!("bucket {b}: {}", e.at(blk)));
                    break;
                }
            };
            if let Err(e) = check_chain_page(&v, hdr, b, first, stamp) {
                r.err(format!("bucket {b}: {}", e.at(blk)));
                break;
            }
            if first {
                stamp = v.stamp;
            } else if v.is_empty() {
                r.empty_overflow_pages += 1;
            }
            let mut spans = Vec::with_capacity(v.len());
            let mut prev: Option<Entry> = None;
            let mut readable = true;
            for i in 0..v.len() {
                let (e, span) = match (v.entry(i), v.entry_span(i)) {
                    (Ok(e), Ok(s)) => (e, s),
                    (Err(x), _) | (_, Err(x)) => {
                        r.err(format!("bucket {b}: {}", x.at(blk)));
                        readable = false;
                        break;
                    }
                };
                spans.push(span);
                if prev.is_some_and(|p| p >= e) {
                    r.err(format!("bucket {b}, block {blk}: slots {} and {i} not in (hash, key, TID) order", i - 1));
                }
                let want = hdr.bucket_of(e.hash);
                if want != b {
                    r.err(format!("bucket {b}, block {blk}: entry {i} (hash {:#010x}, TID {:?}) belongs in bucket {want}", e.hash, e.tid));
                }
                if !keys.insert((e.key.to_vec(), e.tid)) {
                    r.err(format!("bucket {b}, block {blk}: entry {i} (TID {:?}) is a duplicate (key, TID)", e.tid));
                }
                r.entries += 1;
                r.bytes += e.cost() as u64;
                prev = Some(e);
            }
            if readable {
                spans.sort_unstable();
                let mut at = v.upper();
                for (off, l) in spans {
                    if off != at {
                        r.err(format!("bucket {b}, block {blk}: entries overlap or leave gaps at {off}"));
                        break;
                    }
                    at = off + l;
                }
                if at != cap {
                    r.err(format!("bucket {b}, block {blk}: entry area does not end at the body end"));
                }
            }
            if v.next == NO_BLOCK {
                break;
            }
            blk = v.next;
            first = false;
        }
        r.max_chain = r.max_chain.max(len);
    }
}
