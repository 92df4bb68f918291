//! Backend-local copies of the static stage's inner pages.
//!
//! Every merge step writes all inner levels anew under its own generation,
//! and VACUUM rewrites leaves only (`stage.rs`), so the inner pages of a
//! stage of generation G never change while G is current; they retire with
//! it. A descent of a stage of generation G can therefore search a copy of
//! an inner page taken under G instead of looking up, pinning, locking and
//! checking the buffer: for a point probe of a 5M-entry index those were two
//! of its three page reads, a sixth of its time.
//!
//! The copies live in the relcache entry's `rd_amcache`, as nbtree keeps its
//! metapage copy there: a relcache flush frees it (RelationReloadIndexInfo),
//! so an index rebuilt under the same relfilenode (TRUNCATE in the
//! transaction that created the table starts generations over) never meets
//! old copies. A copy is valid for one stage, named by (relfilenode,
//! generation, root); a descent of another stage replaces the set. The
//! body was checked (magic, version, kind, generation) when it was copied.
//!
//! Only on a primary: during recovery, replay may reuse a stage's pages
//! under a standby query, and its descents must see that (`Stale`).
//!
//! Layout of the one palloc'd chunk (in `rd_indexcxt`):
//! ```text
//! CacheHeader { magic, relnode, generation, root, n, cap, blocks[64], lens[64] }
//! cap × BODY_CAP bytes: body of blocks[i] at i × BODY_CAP
//! ```
//! `cap` doubles from 2 up to `MAX_PAGES` (64 pages, 512 kB per index and
//! backend); inner pages past that are read from their buffers as before.

use pgrx::pg_sys;

use super::stage::Stage;
use crate::storage::page::BODY_CAP;

/// "HYIC": tells our chunk from anything else in `rd_amcache`.
const CACHE_MAGIC: u32 = 0x4859_4943;
const MAX_PAGES: usize = 64;
const FIRST_CAP: usize = 2;

#[repr(C)]
struct CacheHeader {
    magic: u32,
    relnode: u32,
    generation: u32,
    root: u32,
    n: u32,
    cap: u32,
    blocks: [u32; MAX_PAGES],
    lens: [u16; MAX_PAGES],
}

const HEADER: usize = std::mem::size_of::<CacheHeader>().next_multiple_of(16);

unsafe fn relnode(rel: pg_sys::Relation) -> u32 {
    (*rel).rd_node.relNode.to_u32()
}

/// Our chunk, when `rd_amcache` holds one for this stage.
unsafe fn current(rel: pg_sys::Relation, stage: &Stage) -> Option<*mut CacheHeader> {
    let h = (*rel).rd_amcache as *mut CacheHeader;
    if h.is_null() || (*h).magic != CACHE_MAGIC {
        return None;
    }
    let same = (*h).relnode == relnode(rel) && (*h).generation == stage.generation && (*h).root == stage.root;
    same.then_some(h)
}

unsafe fn body_slot(h: *mut CacheHeader, i: usize) -> *mut u8 {
    (h as *mut u8).add(HEADER + i * BODY_CAP)
}

/// Runs `f` on the cached body of inner page `blk` of `stage`, if there is one.
pub unsafe fn with_cached<R>(rel: pg_sys::Relation, stage: &Stage, blk: u32, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let h = current(rel, stage)?;
    let n = (*h).n as usize;
    let i = (&(*h).blocks)[..n].iter().position(|&b| b == blk)?;
    let body = std::slice::from_raw_parts(body_slot(h, i), (*h).lens[i] as usize);
    Some(f(body))
}

/// Keeps a copy of inner page `blk` of `stage` (its body, already checked
/// by the caller under the buffer lock). Does nothing during recovery or
/// once the cache is full.
pub unsafe fn store(rel: pg_sys::Relation, stage: &Stage, blk: u32, body: &[u8]) {
    if pg_sys::RecoveryInProgress() || (*rel).rd_indexcxt.is_null() || body.len() > BODY_CAP {
        return;
    }
    let mut h = match current(rel, stage) {
        Some(h) => h,
        None => {
            // Another stage (or nothing): start over in the chunk we have,
            // or a new one.
            let mut h = (*rel).rd_amcache as *mut CacheHeader;
            if h.is_null() || (*h).magic != CACHE_MAGIC {
                if !h.is_null() {
                    // Not ours: nothing else of this AM uses rd_amcache.
                    pg_sys::pfree(h.cast());
                    (*rel).rd_amcache = std::ptr::null_mut();
                }
                h = pg_sys::MemoryContextAlloc((*rel).rd_indexcxt, HEADER + FIRST_CAP * BODY_CAP) as *mut CacheHeader;
                (*h).magic = CACHE_MAGIC;
                (*h).cap = FIRST_CAP as u32;
                (*rel).rd_amcache = h.cast();
            }
            (*h).relnode = relnode(rel);
            (*h).generation = stage.generation;
            (*h).root = stage.root;
            (*h).n = 0;
            h
        }
    };
    let n = (*h).n as usize;
    if (&(*h).blocks)[..n].contains(&blk) || n >= MAX_PAGES {
        return;
    }
    if n == (*h).cap as usize {
        let cap = (n * 2).min(MAX_PAGES);
        let bigger = pg_sys::MemoryContextAlloc((*rel).rd_indexcxt, HEADER + cap * BODY_CAP) as *mut CacheHeader;
        std::ptr::copy_nonoverlapping(h as *const u8, bigger as *mut u8, HEADER + n * BODY_CAP);
        (*bigger).cap = cap as u32;
        pg_sys::pfree(h.cast());
        (*rel).rd_amcache = bigger.cast();
        h = bigger;
    }
    std::ptr::copy_nonoverlapping(body.as_ptr(), body_slot(h, n), body.len());
    (*h).blocks[n] = blk;
    (*h).lens[n] = body.len() as u16;
    (*h).n = n as u32 + 1;
}
