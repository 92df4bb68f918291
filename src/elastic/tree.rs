//! The elastic tree as the engine drives it (structure.rs): merges apply
//! the sorted dynamic stage into the leaves, VACUUM removes dead TIDs and
//! reverts or merges leaves, and `pg_hybrid.index_stats` / `verify` read it.
//! Writers hold the engine's maintenance lock, so the tree has one writer.

use std::rc::Rc;

use pg_hybrid_core::elastic::tree::{Config, ElasticTree, State, Stats};
use pg_hybrid_core::elastic::Error;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::fetch::HeapFetcher;
use super::pool::BufPool;
use super::structure::TreeRoots;
use crate::engine::meta::IndexMeta;
use crate::keys::IndexDesc;
use crate::storage::page::{self, NO_BLOCK};

/// Turns a core error into the PostgreSQL ERROR it stands for.
pub unsafe fn core_error(index: pg_sys::Relation, e: Error) -> ! {
    let name = page::rel_name(index);
    match e {
        Error::Corrupt(why) => crate::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("elastic_btree index \"{name}\" is corrupted: {why}"), "REINDEX the index."),
        Error::KeyTooLong(n) => crate::raise(PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED, format!("index row of {n} bytes is too long for elastic_btree index \"{name}\""), "Values larger than a third of a page cannot be indexed. Consider an index of an MD5 hash of the value."),
        Error::NoSpace => crate::raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("elastic_btree index \"{name}\": page body full"), "This is a bug; please report it with the index definition."),
        Error::BadInput(why) => crate::raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("elastic_btree index \"{name}\": {why}"), "This is a bug; please report it with the index definition."),
    }
}

/// Pages other than the tree's that count against the bound: the engine's
/// metapage and the delta log.
fn other_pages(m: &IndexMeta) -> u64 {
    1 + m.delta_pages as u64
}

/// Opens the tree for writing (creating it when the index has none yet).
pub unsafe fn open_writer(index: pg_sys::Relation, m: &IndexMeta) -> ElasticTree<BufPool> {
    let cfg = super::options::config(index);
    let tree_meta = TreeRoots::of(&m.base).tree_meta;
    let pool = BufPool::writer(index, m.base.pages, other_pages(m));
    let mut tree = if tree_meta == NO_BLOCK {
        ElasticTree::create(pool, cfg)
    } else {
        ElasticTree::open(pool, tree_meta, cfg)
    }
    .unwrap_or_else(|e| core_error(index, e));
    // The walk `open` made is the truth about the page count.
    let s = tree.stats();
    tree.pool.tree_pages = 1 + s.standard_leaves + s.compact_leaves + s.inner_pages;
    tree
}

/// What a writer leaves for the metapage and the recycle list.
pub struct WriteOutcome {
    pub meta_blk: u32,
    /// Root block, for readers that skip the tree's metapage.
    pub root: u32,
    /// Entries in the leaves (dead ones not yet removed included).
    pub entries: u64,
    pub tree_pages: u64,
    pub deleted: Vec<u32>,
    pub stats: Stats,
    pub state: State,
    pub key_fetches: u64,
}

fn outcome(index: pg_sys::Relation, tree: ElasticTree<BufPool>, fetches: u64) -> WriteOutcome {
    let stats = tree.stats();
    let entries = tree.count_entries().unwrap_or_else(|e| unsafe { core_error(index, e) });
    WriteOutcome {
        entries,
        root: tree.root(),
        meta_blk: tree.meta_block(),
        tree_pages: tree.pool.tree_pages,
        state: tree.state(),
        stats,
        key_fetches: fetches,
        deleted: tree.pool.deleted,
    }
}

/// Leaves the index under its bound converts (or reverts) per pass.
const EXPAND_STEPS: usize = 64;

/// Entries the tree takes per insert pass: a state change is seen between
/// passes, and a build holds no more than this many entries in memory.
const BATCH_ENTRIES: usize = 4096;

/// Applies entries sorted by (key, TID) to the leaves: the merge of the
/// dynamic stage, and CREATE INDEX (whose entries stream from the build's
/// sort, so only one pass's worth is held at a time).
pub unsafe fn apply_batch(index: pg_sys::Relation, desc: &Rc<IndexDesc>, m: &IndexMeta, entries: &mut dyn Iterator<Item = (Vec<u8>, Tid)>, building: bool, progress: &mut dyn FnMut(usize)) -> WriteOutcome {
    let mut tree = open_writer(index, m);
    tree.pool.reuse_at_once = building;
    let mut f = HeapFetcher::open(index, desc.clone());
    tree.update_state().unwrap_or_else(|e| core_error(index, e));
    let mut pass: Vec<(Vec<u8>, Tid)> = Vec::with_capacity(BATCH_ENTRIES);
    let mut applied = 0usize;
    loop {
        pass.clear();
        pass.extend((&mut *entries).take(BATCH_ENTRIES));
        if pass.is_empty() {
            break;
        }
        pg_sys::check_for_interrupts!();
        tree.insert_batch(&pass, &mut f).unwrap_or_else(|e| core_error(index, e));
        tree.update_state().unwrap_or_else(|e| core_error(index, e));
        applied += pass.len();
        progress(applied);
    }
    settle_state(index, &mut tree, &mut f);
    let fetches = f.fetches;
    drop(f);
    outcome(index, tree, fetches)
}

/// Re-evaluates the state and, while expanding, reverts some compact leaves.
unsafe fn settle_state(index: pg_sys::Relation, tree: &mut ElasticTree<BufPool>, f: &mut HeapFetcher) {
    let s = tree.update_state().unwrap_or_else(|e| core_error(index, e));
    if s == State::Expanding {
        tree.expand_some(EXPAND_STEPS, f).unwrap_or_else(|e| core_error(index, e));
        tree.update_state().unwrap_or_else(|e| core_error(index, e));
    }
}

/// Re-evaluates the state and, while expanding, reverts every compact leaf,
/// not just a pass's worth: VACUUM visits them all anyway (the paper
/// reverts leaves it visits).
unsafe fn expand_all(index: pg_sys::Relation, tree: &mut ElasticTree<BufPool>, f: &mut HeapFetcher) {
    settle_state(index, tree, f);
    while tree.state() == State::Expanding && tree.stats().compact_leaves > 0 {
        pg_sys::vacuum_delay_point();
        let n = tree.expand_some(EXPAND_STEPS, f).unwrap_or_else(|e| core_error(index, e));
        tree.update_state().unwrap_or_else(|e| core_error(index, e));
        if n == 0 {
            break;
        }
    }
}

/// VACUUM: removes dead TIDs (and entries whose tuples were pruned), merges
/// underfull leaves, and reverts compact leaves while expanding.
pub unsafe fn bulk_delete(index: pg_sys::Relation, desc: &Rc<IndexDesc>, m: &IndexMeta, dead: &mut dyn FnMut(Tid) -> bool) -> (u64, WriteOutcome) {
    vacuum_pass(index, desc, m, Some(dead))
}

/// Re-evaluates the state under the current reloptions and, while
/// expanding, reverts compact leaves (VACUUM's cleanup pass).
pub unsafe fn settle(index: pg_sys::Relation, desc: &Rc<IndexDesc>, m: &IndexMeta) -> WriteOutcome {
    vacuum_pass(index, desc, m, None).1
}

unsafe fn vacuum_pass(index: pg_sys::Relation, desc: &Rc<IndexDesc>, m: &IndexMeta, dead: Option<&mut dyn FnMut(Tid) -> bool>) -> (u64, WriteOutcome) {
    let mut tree = open_writer(index, m);
    let mut f = HeapFetcher::open(index, desc.clone());
    let mut removed = 0;
    if let Some(dead) = dead {
        removed = tree.bulk_delete(dead, &mut f).unwrap_or_else(|e| core_error(index, e));
        // The expand rule needs the counts after the removal.
        tree.refresh_counts().unwrap_or_else(|e| core_error(index, e));
    }
    expand_all(index, &mut tree, &mut f);
    let fetches = f.fetches;
    drop(f);
    (removed, outcome(index, tree, fetches))
}

/// The tree's counters for index_stats (walks the tree).
pub unsafe fn stats(index: pg_sys::Relation, m: &IndexMeta) -> Option<(Stats, State, u64)> {
    let tree_meta = TreeRoots::of(&m.base).tree_meta;
    if tree_meta == NO_BLOCK {
        return None;
    }
    let tree = ElasticTree::open(BufPool::reader(index), tree_meta, Config::default()).unwrap_or_else(|e| core_error(index, e));
    Some((tree.stats(), tree.state(), tree.walked_entries()))
}

/// amcheck-like check of the whole tree, keys of compact leaves included.
pub unsafe fn verify(index: pg_sys::Relation, desc: &Rc<IndexDesc>, m: &IndexMeta) -> u64 {
    let tree_meta = TreeRoots::of(&m.base).tree_meta;
    if tree_meta == NO_BLOCK {
        return 0;
    }
    let tree = ElasticTree::open(BufPool::reader(index), tree_meta, Config::default()).unwrap_or_else(|e| core_error(index, e));
    let mut f = HeapFetcher::open(index, desc.clone());
    tree.verify(&mut f).unwrap_or_else(|e| core_error(index, e)).entries
}

