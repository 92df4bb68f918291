//! griffin's base structure for the engine: the static stage (the range
//! path) and the hash path (point operations) holding the same entries.
//! The tree's work is `StaticStage`'s, called on the tree's view of the
//! roots; the hash path follows every change of the tree (README.md).

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::hash_path::{self as hp, Config, Entry as HashEntry, HashArea};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::cursor::GriffinCursor;
use super::hash_io::{self, HashBufs};
use super::options;
use crate::engine::base::{BaseCursor, BaseShape, BaseStats, BaseStructure, BuildResult, Dir, EntryRef, MergeResult, MergeStep, Prune, ScanRange, VacuumResult};
use crate::engine::meta::{BaseInfo, IndexMeta};
use crate::engine::stats::{fail, DeadToAll};
use crate::keys::IndexDesc;
use crate::static_stage::stage::{StageSettings, StaticStage};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};

/// The range path: the static stage, synced at `sync_ratio`, never LZ4.
static TREE: StaticStage = StaticStage { am: c"griffin", settings: tree_settings, hot_tier: None };

unsafe fn tree_settings(index: pg_sys::Relation) -> StageSettings {
    StageSettings { merge_ratio: options::sync_ratio(index), compress: false }
}

/// Word of the base roots that holds the hash path's header block; the
/// first four are the tree's. The static stage's fifth, `compressed`, is
/// always 0 for griffin's tree and is not stored: the stage plans merges
/// by it, and griffin hands it `tree_meta` (a standby cursor that rereads
/// the metapage sees the header block there, which reads ignore).
const HASH_HEADER_WORD: usize = 4;

/// The hash path's header block of a structure (NO_BLOCK: none yet; block
/// 0 is the metapage, so 0 never names a header).
pub fn hash_header(info: &BaseInfo) -> u32 {
    match info.roots.words[HASH_HEADER_WORD] {
        0 => NO_BLOCK,
        blk => blk,
    }
}

/// The tree's view of `info`: the static stage's roots, uncompressed.
pub fn tree_info(info: &BaseInfo) -> BaseInfo {
    let mut t = *info;
    t.roots.words[HASH_HEADER_WORD] = 0;
    t
}

/// The tree's cursor over the generation `info` (griffin's roots).
pub unsafe fn tree_cursor(index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor> {
    TREE.cursor(index, desc, &tree_info(info))
}

fn tree_meta(meta: &IndexMeta) -> IndexMeta {
    let mut m = *meta;
    m.base = tree_info(&meta.base);
    m
}

/// A shape of the tree with the hash path's header put back.
fn with_header(mut shape: BaseShape, header: u32) -> BaseShape {
    shape.roots.words[HASH_HEADER_WORD] = header;
    shape
}

/// The hash path's hash of a key's columns (a stored key, or a point
/// scan's bound holding every key column): `IndexDesc::canonical_hash`,
/// on which equal keys agree whatever their bytes, folded to 32 bits.
pub fn key_hash(desc: &IndexDesc, key: &[u8]) -> u32 {
    let h = desc.canonical_hash(key).expect("check_definition admits only key types with hash support");
    (h ^ (h >> 32)) as u32
}

unsafe fn area_config(index: pg_sys::Relation, initial_buckets: u32) -> Config {
    Config { initial_buckets, fill_pct: options::bucket_fill(index) as u32 }
}

/// Ends a failed hash-path operation with an ERROR naming the index.
fn ok<T>(index: pg_sys::Relation, r: hp::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => unsafe { hash_io::fail(index, e) },
    }
}

/// A key for a verification message: its first bytes in hex.
fn show(k: &[u8]) -> String {
    let hex: String = k.iter().take(24).map(|b| format!("{b:02x}")).collect();
    if k.len() > 24 {
        format!("{hex}...")
    } else {
        hex
    }
}

pub struct Griffin;

pub static GRIFFIN: Griffin = Griffin;

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

/// An iterator that shows each item to `on` as it passes.
struct Tee<'i, 'e, F: FnMut(&EntryRef<'e>)> {
    inner: &'i mut dyn Iterator<Item = EntryRef<'e>>,
    on: F,
}

impl<'e, F: FnMut(&EntryRef<'e>)> Iterator for Tee<'_, 'e, F> {
    type Item = EntryRef<'e>;
    fn next(&mut self) -> Option<EntryRef<'e>> {
        let e = self.inner.next()?;
        (self.on)(&e);
        Some(e)
    }
}

impl BaseStructure for Griffin {
    fn am_name(&self) -> &'static CStr {
        c"griffin"
    }

    /// Hinted dead TIDs would have to leave both parts alike; VACUUM
    /// removes them from both instead.
    fn prunes_on_merge(&self) -> bool {
        false
    }

    fn hash_point_path(&self) -> bool {
        true
    }

    unsafe fn check_definition(&self, index: pg_sys::Relation, desc: &IndexDesc) {
        let hashless = desc.cols[..desc.nkeyatts].iter().position(|c| c.kind == pg_hybrid_core::keys::ColumnKind::Opaque && c.hash_proc == pg_sys::InvalidOid);
        if let Some(c) = hashless {
            let typ = std::ffi::CStr::from_ptr(pg_sys::format_type_be(desc.cols[c].typid)).to_string_lossy().into_owned();
            crate::raise(
                pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("griffin cannot index column {} of type {typ} in index \"{}\": the type has no default hash operator class", c + 1, page::rel_name(index)),
                "griffin's hash path needs a hash function that agrees with the type's equality. Use hybrid_btree for this column.",
            );
        }
    }

    unsafe fn merge_ratio(&self, index: pg_sys::Relation) -> i32 {
        options::sync_ratio(index)
    }

    fn is_empty(&self, info: &BaseInfo) -> bool {
        TREE.is_empty(&tree_info(info))
    }

    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = EntryRef<'_>>,
        count: usize,
        gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult {
        let mut area: Option<HashArea<HashBufs>> = None;
        let mut pending = Pending::default();
        let chunk = build_chunk_bytes();
        // The buckets take the entries as the tree's build streams them, a
        // chunk at a time; the first chunk sizes the table for `count`
        // entries like it, so the build splits few buckets.
        let mut flush = |pending: &mut Pending| {
            if area.is_none() {
                let per_entry = if pending.items.is_empty() { 32 } else { (pending.bytes() / pending.items.len()).max(1) };
                let cfg = area_config(index, 2);
                let want = (count.max(1) as u64 * per_entry as u64 / cfg.fill_bytes(BODY_CAP).max(1) as u64).max(2);
                // The largest power of two not above the need: linear
                // hashing's splits take the table the rest of the way, so
                // it ends at its fill target instead of up to half empty.
                let floor = if want.is_power_of_two() { want } else { want.next_power_of_two() / 2 };
                let buckets = floor.min(hp::page::max_buckets(BODY_CAP)) as u32;
                let mut pool = HashBufs::writer(index);
                pool.reuse_at_once = true;
                area = Some(ok(index, HashArea::create(pool, Config { initial_buckets: buckets.max(2), ..cfg })));
            }
            let a = area.as_mut().expect("created above");
            ok(index, a.insert_batch(&pending.entries()));
            pending.clear();
        };
        let res = {
            let mut tee = Tee {
                inner: entries,
                on: |e: &EntryRef<'_>| {
                    pending.push(key_hash(desc, e.key), e.key, e.tid);
                    if pending.bytes() >= chunk {
                        flush(&mut pending);
                    }
                },
            };
            TREE.build(index, desc, &tree_meta(meta), &mut tee, count, gen, progress)
        };
        flush(&mut pending);
        let header = area.as_ref().expect("flushed").header_block();
        BuildResult { shape: with_header(res.shape, header), freed: res.freed }
    }

    unsafe fn merge(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        step: MergeStep<'_>,
        prune: Option<Prune<'_>>,
        gen: u32,
    ) -> MergeResult {
        let header = hash_header(&meta.base);
        let tm = tree_meta(meta);
        let mut area = hash_io::open_writer(index, header);
        let mut res = match prune {
            // VACUUM's merge (after a bulk delete that could not remove
            // dead TIDs in place): both parts drop them.
            Some(Prune { dead, everywhere: true }) => {
                let res = TREE.merge(index, desc, &tm, step, Some(Prune { dead: &mut *dead, everywhere: true }), gen);
                ok(index, area.remove(&mut *dead));
                res
            }
            // Hinted TIDs are left for VACUUM (`prunes_on_merge`).
            _ => TREE.merge(index, desc, &tm, step, None, gen),
        };
        // What the tree's step took goes into the buckets: a step run again
        // after a crash finds its entries there and adds nothing twice.
        let batch: Vec<HashEntry<'_>> = step.fresh[..res.consumed].iter().map(|e| HashEntry::new(key_hash(desc, &e.key), &e.key, e.tid)).collect();
        ok(index, area.insert_batch(&batch));
        res.retired.extend(area.into_pool().retired);
        res.shape = with_header(res.shape, header);
        res
    }

    unsafe fn bulk_delete(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> VacuumResult {
        let header = hash_header(&meta.base);
        let mut res = TREE.bulk_delete(index, desc, &tree_meta(meta), &mut *dead);
        if header != NO_BLOCK {
            let mut area = hash_io::open_writer(index, header);
            ok(index, area.remove(&mut *dead));
            res.retired.extend(area.into_pool().retired);
        }
        res.shape = res.shape.map(|s| with_header(s, header));
        res
    }

    unsafe fn vacuum_cleanup(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta) -> Option<VacuumResult> {
        let header = hash_header(&meta.base);
        TREE.vacuum_cleanup(index, desc, &tree_meta(meta)).map(|mut r| {
            r.shape = r.shape.map(|s| with_header(s, header));
            r
        })
    }

    unsafe fn cursor(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, info: &BaseInfo) -> Box<dyn BaseCursor> {
        Box::new(GriffinCursor::new(index, desc.clone(), info))
    }

    unsafe fn can_return(&self, index: pg_sys::Relation, desc: &IndexDesc, attno: i32) -> bool {
        TREE.can_return(index, desc, attno)
    }

    /// The tree as the static stage checks it, the hash path's pages, and
    /// that both hold the same entries, each in the bucket of its key.
    unsafe fn verify(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, all: Option<&mut HashSet<(Vec<u8>, Tid)>>) -> u64 {
        let name = page::rel_name(index);
        let tm = tree_meta(meta);
        let n = TREE.verify(index, desc, &tm, all);
        let header = hash_header(&meta.base);
        if header == NO_BLOCK {
            if n != 0 {
                fail(&name, format!("the tree holds {n} entries and there is no hash path"));
            }
            return n;
        }
        let area = hash_io::open_reader(index, header);
        let report = area.verify();
        if let Some(e) = report.errors.first() {
            fail(&name, format!("hash path: {e}{}", if report.errors.len() > 1 { format!(" (and {} more)", report.errors.len() - 1) } else { String::new() }));
        }
        // Both parts, in index order.
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
            fail(&name, m);
        }
        hashed.sort_by(|a, b| desc.compare(&a.0, &b.0).then(a.1.cmp(&b.1)));
        // The hash path may be ahead of the tree: a sync step cut short by
        // a crash (or one running on the primary while a standby verifies)
        // put entries into the buckets whose tree step never switched in.
        // They are unsynced entries, still in the delta log, which the
        // next sync merges into the tree (finding them in the buckets).
        // A VACUUM cut short removes dead TIDs from one part and not yet
        // the other: the heap says whether an entry is such a TID (the
        // heap keeps its line pointer dead until a VACUUM completes the
        // index phase). Anything else in only one of the two is corruption.
        let (unsynced, _, _) = crate::engine::delta::read_from(index, meta.delta_head, meta.base.merged_upto, u64::MAX);
        let unsynced: HashSet<(Vec<u8>, Tid)> = unsynced.into_iter().map(|r| (r.key, r.tid)).collect();
        let heap = pg_sys::table_open((*(*index).rd_index).indrelid, pg_sys::AccessShareLock as i32);
        let dead = DeadToAll::new(heap);
        let ahead = |hk: &Vec<u8>, ht: Tid| {
            if !unsynced.contains(&(hk.clone(), ht)) && !dead.check(ht) {
                fail(&name, format!("the hash path's entry {} (TID {ht:?}) is in neither the tree nor the delta log", show(hk)));
            }
        };
        let behind = |k: &[u8], t: Tid| {
            if !dead.check(t) {
                fail(&name, format!("the tree's entry {} (TID {t:?}) is not in the hash path", show(k)));
            }
        };
        let mut c = TREE.cursor(index, desc, &tm.base);
        c.start(Dir::Fwd, &ScanRange { lower: &[], upper: None, whole_key: false, strict: (false, false), point: false });
        let mut i = 0usize;
        while let Some((k, t)) = c.peek(Dir::Fwd) {
            // Hash entries before this tree entry are ahead of the tree;
            // a hash entry after it means the tree's entry is not hashed.
            loop {
                match hashed.get(i) {
                    Some((hk, ht)) => match desc.compare(hk, k).then(ht.cmp(&t)) {
                        Ordering::Equal => {
                            i += 1;
                            break;
                        }
                        Ordering::Less => {
                            ahead(hk, *ht);
                            i += 1;
                        }
                        Ordering::Greater => {
                            behind(k, t);
                            break;
                        }
                    },
                    None => {
                        behind(k, t);
                        break;
                    }
                }
            }
            c.advance(Dir::Fwd);
        }
        c.park();
        for (hk, ht) in &hashed[i.min(hashed.len())..] {
            ahead(hk, *ht);
        }
        drop(dead);
        pg_sys::table_close(heap, pg_sys::AccessShareLock as i32);
        n
    }

    unsafe fn stats(&self, index: pg_sys::Relation, meta: &IndexMeta) -> BaseStats {
        let header = hash_header(&meta.base);
        let s = if header == NO_BLOCK { hp::Stats::default() } else { ok(index, hash_io::open_reader(index, header).stats()) };
        BaseStats {
            hash_buckets: Some(s.buckets as i64),
            hash_entries: Some(s.entries as i64),
            hash_pages: Some(s.pages as i64),
            overflow_pages: Some(s.overflow_pages as i64),
            ..BaseStats::default()
        }
    }

    /// Tree pages the current stage does not reach, and hash pages the
    /// header does not reach (a split that crashed before it linked them).
    unsafe fn orphan_test<'a>(&'a self, index: pg_sys::Relation, meta: &'a IndexMeta) -> Box<dyn FnMut(u32, pg_sys::Page, PageKind) -> bool + 'a> {
        // The static stage's test reads only the tree's four roots words.
        let mut tree_test = TREE.orphan_test(index, meta);
        let header = hash_header(&meta.base);
        let reachable: HashSet<u32> = if header == NO_BLOCK { HashSet::new() } else { ok(index, hash_io::open_reader(index, header).reachable_blocks()).into_iter().collect() };
        Box::new(move |blk, p, kind| match kind {
            PageKind::Hash => !reachable.contains(&blk),
            _ => tree_test(blk, p, kind),
        })
    }

    /// A standby query that routed through the hash path before a split
    /// may still read the split bucket's old chain.
    fn retired_pages_linked(&self) -> bool {
        true
    }
}
