//! The hash path on PostgreSQL: the core's linear-hashing table
//! (`pg_hybrid_core::hash_path`, format and protocols in its README) as a
//! part of an engine base structure. griffin keeps one beside its tree as
//! the point path; tiered_hash's cold tier is one on its own. Everything
//! here is about the buckets alone and knows neither AM:
//!
//! - `io.rs`: pages on buffers, WAL body steps, backend routing copies
//! - [`key_hash`] and [`check_definition`]: the hash every part agrees on
//! - [`BucketLoader`]: CREATE INDEX's entries into a new table, a chunk at
//!   a time
//! - [`PointHits`]: one key's entries from its bucket, as a cursor position
//! - [`stats`], [`entries_sorted`], [`reachable`]: index_stats, verify,
//!   VACUUM's orphan sweep

pub mod io;

use std::cmp::Ordering;
use std::collections::HashSet;

use pg_hybrid_core::hash_path::{self as hp, Config, Entry as HashEntry, HashArea, Matches};
use pg_hybrid_core::keys::ColumnKind;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use crate::engine::base::{BaseStats, Dir};
use crate::keys::IndexDesc;
use crate::storage::page::{self, BODY_CAP, NO_BLOCK};
use io::HashBufs;

/// The hash of a key's columns (a stored key, or a point scan's bound
/// holding every key column): `IndexDesc::canonical_hash`, on which equal
/// keys agree whatever their bytes, folded to 32 bits.
pub fn key_hash(desc: &IndexDesc, key: &[u8]) -> u32 {
    let h = desc.canonical_hash(key).expect("check_definition admits only key types with hash support");
    (h ^ (h >> 32)) as u32
}

/// CREATE INDEX: an ERROR for key columns whose equal values may differ in
/// bytes and whose type has no hash function to agree with its equality.
pub unsafe fn check_definition(index: pg_sys::Relation, desc: &IndexDesc, hint: &str) {
    let hashless = desc.cols[..desc.nkeyatts].iter().position(|c| c.kind == ColumnKind::Opaque && c.hash_proc == pg_sys::InvalidOid);
    if let Some(c) = hashless {
        let typ = std::ffi::CStr::from_ptr(pg_sys::format_type_be(desc.cols[c].typid)).to_string_lossy().into_owned();
        crate::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{} cannot index column {} of type {typ} in index \"{}\": the type has no default hash operator class", crate::engine::ams::base(index).am_name().to_string_lossy(), c + 1, page::rel_name(index)),
            hint,
        );
    }
}

/// An ERROR for a key longer than a bucket page takes, raised by
/// `aminsert` before the entry reaches the delta log: a sync that met it
/// there failed on it every time (the buckets refuse it), and the index
/// synced nothing more until the entry died.
pub unsafe fn check_key(index: pg_sys::Relation, key: &[u8]) {
    let max = hp::max_key_len(page::BODY_CAP);
    if key.len() > max {
        io::fail(index, hp::Error::KeyTooLong { len: key.len(), max });
    }
}

/// Ends a failed hash-path operation with an ERROR naming the index.
pub fn ok<T>(index: pg_sys::Relation, r: hp::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => unsafe { io::fail(index, e) },
    }
}

/// Entries CREATE INDEX collects before it puts them into the buckets (so
/// each bucket page is written a few times, not once per entry).
fn build_chunk_bytes() -> usize {
    unsafe { (pg_sys::maintenance_work_mem as usize * 1024 / 2).max(4 << 20) }
}

/// Owned entries waiting for `insert_batch`.
#[derive(Default)]
struct Pending {
    keys: Vec<u8>,
    /// (hash, end of the key in `keys`, TID)
    items: Vec<(u32, usize, Tid)>,
}

impl Pending {
    fn push(&mut self, hash: u32, key: &[u8], tid: Tid) {
        self.keys.extend_from_slice(key);
        self.items.push((hash, self.keys.len(), tid));
    }
    fn bytes(&self) -> usize {
        self.keys.len() + self.items.len() * 16
    }
    fn entries(&self) -> Vec<HashEntry<'_>> {
        let mut start = 0;
        self.items
            .iter()
            .map(|&(hash, end, tid)| {
                let e = HashEntry::new(hash, &self.keys[start..end], tid);
                start = end;
                e
            })
            .collect()
    }
    fn clear(&mut self) {
        self.keys.clear();
        self.items.clear();
    }
}

/// CREATE INDEX's entries into a new hash table: the first chunk sizes the
/// table for the whole build (`count` entries like it), so the build
/// splits few buckets; later chunks are inserted as they fill.
pub struct BucketLoader {
    index: pg_sys::Relation,
    fill_pct: u32,
    count: usize,
    chunk: usize,
    area: Option<HashArea<HashBufs>>,
    pending: Pending,
}

impl BucketLoader {
    pub fn new(index: pg_sys::Relation, fill_pct: u32, count: usize) -> BucketLoader {
        BucketLoader { index, fill_pct, count, chunk: build_chunk_bytes(), area: None, pending: Pending::default() }
    }

    pub unsafe fn push(&mut self, desc: &IndexDesc, key: &[u8], tid: Tid) {
        self.pending.push(key_hash(desc, key), key, tid);
        if self.pending.bytes() >= self.chunk {
            self.flush();
        }
    }

    unsafe fn flush(&mut self) {
        let index = self.index;
        if self.area.is_none() {
            let pending = &self.pending;
            let per_entry = if pending.items.is_empty() { 32 } else { (pending.bytes() / pending.items.len()).max(1) };
            let cfg = Config { initial_buckets: 2, fill_pct: self.fill_pct };
            let want = (self.count.max(1) as u64 * per_entry as u64 / cfg.fill_bytes(BODY_CAP).max(1) as u64).max(2);
            // The largest power of two not above the need: linear hashing's
            // splits take the table the rest of the way, so it ends at its
            // fill target instead of up to half empty.
            let floor = if want.is_power_of_two() { want } else { want.next_power_of_two() / 2 };
            let buckets = floor.min(hp::page::max_buckets(BODY_CAP)) as u32;
            let mut pool = HashBufs::writer(index);
            // Nobody sees the index yet: split chains are reused at once.
            pool.reuse_at_once = true;
            self.area = Some(ok(index, HashArea::create(pool, Config { initial_buckets: buckets.max(2), ..cfg })));
        }
        let a = self.area.as_mut().expect("created above");
        ok(index, a.insert_batch(&self.pending.entries()));
        self.pending.clear();
    }

    /// Inserts what is left; returns the table's header block.
    pub unsafe fn finish(mut self) -> u32 {
        self.flush();
        self.area.take().expect("flushed").header_block()
    }
}

/// Inserts `entries` (key, TID) into the table at `header` (idempotent:
/// a step run again after a crash adds nothing twice); returns the blocks
/// its splits retired.
pub unsafe fn insert_entries<'e>(index: pg_sys::Relation, desc: &IndexDesc, header: u32, entries: impl Iterator<Item = (&'e [u8], Tid)>) -> Vec<u32> {
    let mut area = io::open_writer(index, header);
    let batch: Vec<HashEntry<'_>> = entries.map(|(k, t)| HashEntry::new(key_hash(desc, k), k, t)).collect();
    ok(index, area.insert_batch(&batch));
    area.into_pool().retired
}

/// Removes these exact (key, TID) entries where present, in place, reading
/// only their buckets; returns the blocks retired (overflow pages left
/// empty).
pub unsafe fn remove_entries<'e>(index: pg_sys::Relation, desc: &IndexDesc, header: u32, entries: impl Iterator<Item = (&'e [u8], Tid)>) -> Vec<u32> {
    let batch: Vec<HashEntry<'_>> = entries.map(|(k, t)| HashEntry::new(key_hash(desc, k), k, t)).collect();
    if batch.is_empty() {
        return Vec::new();
    }
    let mut area = io::open_writer(index, header);
    ok(index, area.remove_entries(&batch));
    area.into_pool().retired
}

/// Removes every entry whose TID `dead` accepts, in place; returns how
/// many went and the blocks retired.
pub unsafe fn remove_dead(index: pg_sys::Relation, header: u32, dead: &mut dyn FnMut(Tid) -> bool) -> (u64, Vec<u32>) {
    let mut area = io::open_writer(index, header);
    let n = ok(index, area.remove(dead));
    (n, area.into_pool().retired)
}

/// The table's index_stats columns (all zero without a table).
pub unsafe fn stats(index: pg_sys::Relation, header: u32) -> (hp::Stats, BaseStats) {
    let s = if header == NO_BLOCK { hp::Stats::default() } else { ok(index, io::open_reader(index, header).stats()) };
    let b = BaseStats {
        hash_buckets: Some(s.buckets as i64),
        hash_entries: Some(s.entries as i64),
        hash_pages: Some(s.pages as i64),
        overflow_pages: Some(s.overflow_pages as i64),
        ..BaseStats::default()
    };
    (s, b)
}

/// A key for a verification message: its first bytes in hex.
pub fn show(k: &[u8]) -> String {
    let hex: String = k.iter().take(24).map(|b| format!("{b:02x}")).collect();
    if k.len() > 24 {
        format!("{hex}...")
    } else {
        hex
    }
}

/// verify: the table's pages as the core checks them, then every entry,
/// each checked to be stored under its key's hash, in index order (key,
/// TID). A problem is verify's ERROR naming the index.
pub unsafe fn entries_sorted(index: pg_sys::Relation, desc: &IndexDesc, header: u32) -> Vec<(Vec<u8>, Tid)> {
    let name = page::rel_name(index);
    let fail = |m: String| -> ! { crate::engine::stats::fail(&name, m) };
    // Replay may change the pages under the walk on a standby.
    let checked = crate::engine::stats::check_under_replay(|| {
        let area = io::open_reader(index, header);
        let report = area.verify();
        match report.errors.first() {
            None => Ok((area, report)),
            Some(e) => Err(format!("hash path: {e}{}", if report.errors.len() > 1 { format!(" (and {} more)", report.errors.len() - 1) } else { String::new() })),
        }
    });
    let (area, report) = checked.unwrap_or_else(|what| fail(what));
    let mut hashed: Vec<(Vec<u8>, Tid)> = Vec::with_capacity(report.entries as usize);
    let mut misplaced: Option<String> = None;
    ok(
        index,
        area.for_each_entry(&mut |e| {
            if misplaced.is_none() && key_hash(desc, e.key) != e.hash {
                misplaced = Some(format!("hash path entry (TID {:?}) is stored under hash {:08x}, its key hashes to {:08x}", e.tid, e.hash, key_hash(desc, e.key)));
            }
            hashed.push((e.key.to_vec(), e.tid));
        }),
    );
    if let Some(m) = misplaced {
        fail(m);
    }
    hashed.sort_by(|a, b| desc.compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
    hashed
}

/// Every block the table's header reaches (VACUUM's orphan sweep frees
/// hash pages outside it: a split that crashed before it linked them).
pub unsafe fn reachable(index: pg_sys::Relation, header: u32) -> HashSet<u32> {
    if header == NO_BLOCK {
        return HashSet::new();
    }
    ok(index, io::open_reader(index, header).reachable_blocks()).into_iter().collect()
}

/// A cursor position over one key's entries, read from its bucket: the
/// entries are `hits`, in index order (key, TID) through `order`, and
/// `pos` is the position (-1 or `len` past either end).
pub struct PointHits {
    hits: Matches,
    order: Vec<usize>,
    pos: isize,
}

impl PointHits {
    pub fn new() -> PointHits {
        PointHits { hits: Matches::new(), order: Vec::new(), pos: 0 }
    }

    /// Reads the bucket of the key columns `keycols` in the table at
    /// `header` (engine generation `generation`): every entry whose key
    /// columns equal them, positioned before the first in `dir`. False,
    /// holding nothing, when the key has more than about `limit` entries
    /// (usize::MAX: no limit).
    pub unsafe fn load(&mut self, index: pg_sys::Relation, desc: &IndexDesc, header: u32, generation: u32, keycols: &[u8], dir: Dir, limit: usize) -> bool {
        let hash = key_hash(desc, keycols);
        let complete = if desc.hashable {
            // Equal keys have equal bytes.
            io::lookup(index, header, generation, hash, &mut |k| desc.keycols(k) == keycols, &mut self.hits, limit)
        } else {
            io::lookup(index, header, generation, hash, &mut |k| desc.compare_keycols(k, keycols) == Ordering::Equal, &mut self.hits, limit)
        };
        if !complete {
            self.clear();
            return false;
        }
        self.sort(desc, dir);
        true
    }

    /// Reads every bucket of the table at `header` and keeps the entries
    /// whose key `keep` accepts, sorted, positioned before the first in
    /// `dir`. Returns true, keeping nothing, when they take more than
    /// `limit` bytes.
    pub unsafe fn load_matching(&mut self, index: pg_sys::Relation, desc: &IndexDesc, header: u32, keep: &dyn Fn(&[u8]) -> bool, limit: usize, dir: Dir) -> bool {
        self.hits.clear();
        let area = io::open_reader(index, header);
        let mut bytes = 0usize;
        let mut over = false;
        let r = area.for_each_entry(&mut |e| {
            if over || !keep(e.key) {
                return;
            }
            bytes += e.key.len() + 16;
            if bytes > limit {
                over = true;
                return;
            }
            self.hits.push(e.key, e.tid);
        });
        if let Err(e) = r {
            io::fail_reader(index, e);
        }
        if over {
            self.clear();
            return true;
        }
        self.sort(desc, dir);
        false
    }

    /// Puts `hits` in index order (key, TID) and the position before the
    /// first in `dir`.
    fn sort(&mut self, desc: &IndexDesc, dir: Dir) {
        self.order.clear();
        self.order.extend(0..self.hits.len());
        let hits = &self.hits;
        self.order.sort_by(|&a, &b| desc.compare(hits.key(a), hits.key(b)).then(hits.tid(a).cmp(&hits.tid(b))));
        self.pos = match dir {
            Dir::Fwd => 0,
            Dir::Bwd => self.order.len() as isize - 1,
        };
    }

    fn cmp_entry(&self, desc: &IndexDesc, i: usize, key: &[u8], tid: Tid) -> Ordering {
        desc.compare(self.hits.key(i), key).then(self.hits.tid(i).cmp(&tid))
    }

    /// Positions at the entry after (key, tid) in `dir`, or at it when
    /// `inclusive`.
    pub fn seek_after(&mut self, desc: &IndexDesc, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        // `order` is sorted: binary searches (a multi-column scan's list
        // may be long).
        let before = |p: &usize, or_equal: bool| {
            let c = self.cmp_entry(desc, *p, key, tid);
            c == Ordering::Less || (or_equal && c == Ordering::Equal)
        };
        self.pos = match dir {
            // The first entry after (key, tid), or at it when inclusive.
            Dir::Fwd => self.order.partition_point(|p| before(p, !inclusive)) as isize,
            // The last entry before it, or at it when inclusive.
            Dir::Bwd => self.order.partition_point(|p| before(p, inclusive)) as isize - 1,
        };
    }

    /// The entry at the position.
    pub fn peek(&self) -> Option<(&[u8], Tid)> {
        if self.pos < 0 {
            return None;
        }
        let &i = self.order.get(self.pos as usize)?;
        Some((self.hits.key(i), self.hits.tid(i)))
    }

    pub fn advance(&mut self, dir: Dir) {
        self.pos += dir.step();
    }

    /// Past the end: nothing more until the next `load`.
    pub fn stop(&mut self) {
        self.pos = self.order.len() as isize;
        self.order.clear();
    }

    /// Drops the entries but keeps the allocations.
    pub fn clear(&mut self) {
        self.hits.clear();
        self.order.clear();
        self.pos = 0;
    }
}
