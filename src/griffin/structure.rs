//! griffin's base structure for the engine: the static stage (the range
//! path) and the hash path (point operations) holding the same entries.
//! The tree's work is `StaticStage`'s, called on the tree's view of the
//! roots; the hash path follows every change of the tree (README.md).

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::CStr;
use std::rc::Rc;

use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::cursor::GriffinCursor;
use super::options;
use crate::hash_path::{self as hash, show, BucketLoader};
use crate::engine::base::{BaseCursor, BaseShape, BaseStats, BaseStructure, BuildResult, Dir, Entry, MergeResult, MergeStep, Prune, ScanRange, VacuumResult};
use crate::engine::meta::{BaseInfo, IndexMeta};
use crate::engine::stats::{fail, DeadToAll};
use crate::keys::IndexDesc;
use crate::static_stage::stage::{StageSettings, StaticStage};
use crate::storage::page::{self, PageKind, NO_BLOCK};

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

pub struct Griffin;

pub static GRIFFIN: Griffin = Griffin;

/// An iterator that shows each item to `on` as it passes.
struct Tee<'i, F: FnMut(&Entry)> {
    inner: &'i mut dyn Iterator<Item = Entry>,
    on: F,
}

impl<F: FnMut(&Entry)> Iterator for Tee<'_, F> {
    type Item = Entry;
    fn next(&mut self) -> Option<Entry> {
        let e = self.inner.next()?;
        (self.on)(&e);
        Some(e)
    }
}

impl BaseStructure for Griffin {
    fn am_name(&self) -> &'static CStr {
        c"griffin"
    }

    /// Hinted dead TIDs leave the tree's rewritten part and, by key, the
    /// buckets (`merge`): a hot key's dead versions do not pile up in its
    /// bucket until VACUUM.
    fn prunes_on_merge(&self) -> bool {
        true
    }

    fn hash_point_path(&self) -> bool {
        true
    }

    unsafe fn check_definition(&self, index: pg_sys::Relation, desc: &IndexDesc) {
        hash::check_definition(index, desc, "griffin's hash path needs a hash function that agrees with the type's equality. Use hybrid_btree for this column.");
    }

    unsafe fn check_key(&self, index: pg_sys::Relation, key: &[u8]) {
        hash::check_key(index, key);
    }

    unsafe fn merge_ratio(&self, index: pg_sys::Relation) -> i32 {
        options::sync_ratio(index)
    }

    /// A sync rewrites the buckets its batch falls into as well as the
    /// tree's leaves, and the buckets hold about a delta record per entry
    /// (key and TID, 1.3 records for an int8 key at the default fill): they
    /// count as the tree's entries once more. The tree alone is compact (a
    /// fifth of a bucket's bytes per entry), so counting only it synced
    /// every 2.5% of the entries, and a batch of random keys rewrote every
    /// leaf and bucket page each time: 15 µs of the worker's CPU per
    /// synced entry on a 300k-entry index.
    fn merge_basis(&self, info: &BaseInfo, delta_record: usize) -> u64 {
        TREE.merge_basis(&tree_info(info), delta_record) + info.entries
    }

    fn is_empty(&self, info: &BaseInfo) -> bool {
        TREE.is_empty(&tree_info(info))
    }

    unsafe fn build(
        &self,
        index: pg_sys::Relation,
        desc: &Rc<IndexDesc>,
        meta: &IndexMeta,
        entries: &mut dyn Iterator<Item = Entry>,
        count: usize,
        gen: u32,
        progress: &mut dyn FnMut(u64),
    ) -> BuildResult {
        // The buckets take the entries as the tree's build streams them.
        let mut loader = BucketLoader::new(index, options::bucket_fill(index) as u32, count);
        let res = {
            let mut tee = Tee { inner: entries, on: |e: &Entry| loader.push(desc, &e.key, e.tid) };
            TREE.build(index, desc, &tree_meta(meta), &mut tee, count, gen, progress)
        };
        let header = loader.finish();
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
        let (mut res, gone): (MergeResult, HashSet<Tid>) = match prune {
            // VACUUM's merge (after a bulk delete that could not remove
            // dead TIDs in place): both parts drop them, and so does the
            // batch on its way into the buckets, as on its way into the tree.
            Some(Prune { dead, everywhere: true }) => {
                let mut res = TREE.merge(index, desc, &tm, step, Some(Prune { dead: &mut *dead, everywhere: true }), gen);
                res.retired.extend(hash::remove_dead(index, header, &mut *dead).1);
                let gone = step.fresh[..res.consumed.min(step.fresh.len())].iter().map(|e| e.tid).filter(|&t| dead(t)).collect();
                (res, gone)
            }
            // Hinted TIDs (dead to all, `killed::droppable`): the tree drops
            // those of the leaves it rewrites and names them; the same
            // entries leave their buckets, before the batch goes in so the
            // room they free is used. The batch's own dead entries are
            // among them.
            hinted => {
                let mut res = TREE.merge(index, desc, &tm, step, hinted, gen);
                let dropped = std::mem::take(&mut res.dropped);
                res.retired.extend(hash::remove_entries(index, desc, header, dropped.iter().map(|e| (&e.key[..], e.tid))));
                (res, dropped.into_iter().map(|e| e.tid).collect())
            }
        };
        // What the tree's step took goes into the buckets: a step run again
        // after a crash finds its entries there and adds nothing twice.
        let took = &step.fresh[..res.consumed.min(step.fresh.len())];
        res.retired.extend(hash::insert_entries(index, desc, header, took.iter().filter(|e| !gone.contains(&e.tid)).map(|e| (&e.key[..], e.tid))));
        res.shape = with_header(res.shape, header);
        res
    }

    unsafe fn bulk_delete(&self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, meta: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> VacuumResult {
        let header = hash_header(&meta.base);
        let mut res = TREE.bulk_delete(index, desc, &tree_meta(meta), &mut *dead);
        if header != NO_BLOCK {
            res.retired.extend(hash::remove_dead(index, header, &mut *dead).1);
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
        let hashed = hash::entries_sorted(index, desc, header);
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
        hash::stats(index, header).1
    }

    /// Tree pages the current stage does not reach, and hash pages the
    /// header does not reach (a split that crashed before it linked them).
    unsafe fn orphan_test<'a>(&'a self, index: pg_sys::Relation, meta: &'a IndexMeta) -> Box<dyn FnMut(u32, pg_sys::Page, PageKind) -> bool + 'a> {
        // The static stage's test reads only the tree's four roots words.
        let mut tree_test = TREE.orphan_test(index, meta);
        let header = hash_header(&meta.base);
        let reachable = hash::reachable(index, header);
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
