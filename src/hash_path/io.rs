//! The hash path on PostgreSQL pages (griffin's point path, tiered_hash's
//! cold tier): the core's `HashPages` over
//! buffers (a read holds one share lock until its guard drops; each step of
//! at most four page changes is one WAL body step, engine/wal.rs: entries
//! added to a page are logged as entries, a rebuilt page as its image
//! without the free hole), and errors of the core turned into PostgreSQL
//! ERRORs naming the index and block.

use std::collections::HashSet;

use pg_hybrid_core::hash_path::{self as hp, Change, HashArea, HashPages};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::storage::alloc::alloc_page;
use crate::storage::buffer::{nblocks, Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::engine::wal::{log_body_step, register_body_op, BodyChange, BodyOp};
use crate::storage::wal::WalRecord;

/// A hash page being read: pinned and share-locked until dropped.
pub struct HashPage {
    buf: Buf,
}

impl std::ops::Deref for HashPage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts((self.buf.page() as *const u8).add(page::PAGE_HEADER_SIZE), BODY_CAP) }
    }
}

/// The hash path's pages of one index.
pub struct HashBufs {
    rel: pg_sys::Relation,
    writable: bool,
    /// Blocks handed out by `alloc` that no step wrote yet. They are not
    /// kept locked (a table's creation or a long chain's split allocates
    /// hundreds, more than a backend may hold LWLocks). The free space map
    /// can hand one free page to two backends at once; what settles it in
    /// `alloc_page` is the page itself: the first to lock it changes its
    /// kind, the second then finds it taken. So `alloc` claims each page
    /// before it lets go of the lock: an empty hash page, WAL-logged (a
    /// few bytes: the body is a hole). One a crash leaves unlinked is an
    /// orphan VACUUM's sweep frees.
    pending: HashSet<u32>,
    /// Blocks the steps retired: the caller lists them for recycling
    /// (readers that routed before a split may still be on them).
    pub retired: Vec<u32>,
    /// CREATE INDEX: nobody can see the index, so retired blocks are
    /// freed at once (and reused through the free space map).
    pub reuse_at_once: bool,
    /// The relation's length as last asked (a relation only grows while a
    /// writer works): the bounds check of a step's blocks asks the kernel
    /// again only for a block past it, not once per page of a sync.
    known_nblocks: std::cell::Cell<u32>,
}

impl HashBufs {
    pub unsafe fn reader(rel: pg_sys::Relation) -> HashBufs {
        HashBufs { rel, writable: false, pending: HashSet::new(), retired: Vec::new(), reuse_at_once: false, known_nblocks: Default::default() }
    }

    /// Pages for the single writer (the caller holds the maintenance lock,
    /// or builds the index).
    pub unsafe fn writer(rel: pg_sys::Relation) -> HashBufs {
        HashBufs { rel, writable: true, pending: HashSet::new(), retired: Vec::new(), reuse_at_once: false, known_nblocks: Default::default() }
    }

    pub fn rel(&self) -> pg_sys::Relation {
        self.rel
    }
}

impl HashPages for HashBufs {
    fn body_cap(&self) -> usize {
        BODY_CAP
    }

    fn alloc(&mut self) -> hp::Result<u32> {
        if !self.writable {
            return Err(hp::Error::BadInput("allocation through a read-only pool"));
        }
        let blk = unsafe {
            let b = alloc_page(self.rel);
            let mut w = WalRecord::start(self.rel);
            let p = w.register_new(&b);
            page::init_page(p, PageKind::Hash, 0, 0);
            w.finish();
            b.blkno()
        };
        self.pending.insert(blk);
        Ok(blk)
    }

    type Page<'a> = HashPage;

    fn read(&self, blk: u32) -> hp::Result<HashPage> {
        unsafe {
            // A link past the end fails in ReadBuffer with a clear ERROR.
            if blk == 0 || blk == NO_BLOCK || self.pending.contains(&blk) {
                return Err(hp::Error::Corrupt { blk, kind: hp::PageKind::Block, why: "link to a block outside the hash path" });
            }
            let buf = Buf::read(self.rel, blk, Lock::Share);
            // The special area's check would wait for the header's cache
            // miss: ask for both at once.
            let p = buf.page() as *const u8;
            pg_hybrid_core::static_stage::prefetch(std::slice::from_raw_parts(p.add(page::BLCKSZ - page::SPECIAL_SIZE), page::SPECIAL_SIZE));
            if pg_sys::RecoveryInProgress() && !is_hash_page(buf.page()) {
                // Replay reused a retired chain under a standby query:
                // `fail_reader` makes it a recovery conflict.
                return Err(hp::Error::Corrupt { blk, kind: hp::PageKind::Block, why: "page is no longer part of the hash path" });
            }
            page::check_page(self.rel, blk, buf.page(), &[PageKind::Hash]);
            Ok(HashPage { buf })
        }
    }

    fn apply(&mut self, step: Vec<Change>) -> hp::Result<()> {
        if !self.writable {
            return Err(hp::Error::BadInput("write through a read-only pool"));
        }
        if step.len() > crate::storage::wal::MAX_PAGES {
            return Err(hp::Error::BadInput("step changes more than four pages"));
        }
        unsafe {
            // Lock in block order; new pages are locked already.
            let mut order: Vec<usize> = (0..step.len()).collect();
            order.sort_by_key(|&i| step[i].blk());
            let mut bufs: Vec<(usize, Buf)> = Vec::with_capacity(step.len());
            for &i in &order {
                let (Change::Write { blk, .. } | Change::Add { blk, .. }) = step[i] else { continue };
                if self.pending.remove(&blk) {
                    // Claimed by `alloc` as an empty hash page.
                    bufs.push((i, Buf::read(self.rel, blk, Lock::Exclusive)));
                } else {
                    {
                        if blk >= self.known_nblocks.get() {
                            self.known_nblocks.set(nblocks(self.rel));
                        }
                        if blk == 0 || blk >= self.known_nblocks.get() {
                            return Err(hp::Error::BadInput("write to a block outside the relation"));
                        }
                        let b = Buf::read(self.rel, blk, Lock::Exclusive);
                        page::check_page(self.rel, blk, b.page(), &[PageKind::Hash]);
                        bufs.push((i, b));
                    }
                }
            }
            if !bufs.is_empty() {
                // One body step: pages that gain entries log the entries
                // (ADD_ENTRIES), rebuilt pages their image.
                let changes: Vec<(&Buf, BodyChange<'_>)> = bufs
                    .iter()
                    .map(|(i, b)| match &step[*i] {
                        Change::Write { body, .. } => (b, BodyChange::Image(body)),
                        Change::Add { adds, .. } => (b, BodyChange::Op { op: ADD_ENTRIES, arg: adds }),
                        Change::Retire(_) => unreachable!("not locked above"),
                    })
                    .collect();
                for (b, c) in &changes {
                    if let BodyChange::Image(body) = c {
                        if body.len() != BODY_CAP {
                            return Err(hp::Error::BadInput("page body of the wrong size"));
                        }
                    }
                    if matches!(c, BodyChange::Op { .. }) && page::opaque(b.page()).body_len as usize != BODY_CAP {
                        return Err(hp::Error::BadInput("entries added to a page never written"));
                    }
                }
                log_body_step(self.rel, &changes);
            }
            drop(bufs);
            for c in &step {
                if let Change::Retire(blk) = c {
                    if self.reuse_at_once {
                        crate::storage::alloc::free_pages(self.rel, &[*blk]);
                    } else {
                        self.retired.push(*blk);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The body operation of the WAL's body steps that adds entries to a
/// bucket page (`hash_path::page::apply_adds`); its id is on disk.
pub const ADD_ENTRIES: u8 = 1;

fn check_add_entries(body: &[u8], arg: &[u8]) -> Result<(), String> {
    hp::page::check_adds(body, arg).map_err(|e| e.to_string())
}

fn add_entries(body: &mut [u8], arg: &[u8]) -> Result<(), String> {
    hp::page::apply_adds_in_place(body, arg).map_err(|e| e.to_string())
}

/// Registers the hash path's body operations with the WAL (from `_PG_init`).
pub unsafe fn register_wal() {
    register_body_op(ADD_ENTRIES, BodyOp { check: check_add_entries, apply: add_entries });
}

/// Whether `p` is an initialised pg_hybrid page of the hash path.
unsafe fn is_hash_page(p: pg_sys::Page) -> bool {
    let hdr = p as *const pg_sys::PageHeaderData;
    !pg_sys::PageIsNew(p)
        && (*hdr).pd_special as usize == page::BLCKSZ - page::SPECIAL_SIZE
        && page::opaque(p).magic == page::PAGE_MAGIC
        && page::opaque(p).kind == PageKind::Hash as u8
}

/// Raises the PostgreSQL ERROR for a failure of the hash path.
pub unsafe fn fail(rel: pg_sys::Relation, e: hp::Error) -> ! {
    match e {
        hp::Error::Corrupt { blk, .. } => page::corrupted(&page::rel_name(rel), blk, &e.to_string()),
        hp::Error::KeyTooLong { len, max } => crate::raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("index row of {len} key bytes exceeds {}'s maximum of {max} for index \"{}\"", crate::engine::ams::base(rel).am_name().to_string_lossy(), page::rel_name(rel)),
            "Values larger than about 2 kB cannot be indexed by a hash path; index a hash or a prefix of the value (an expression index) instead.",
        ),
        e => pgrx::error!("{} hash path of index \"{}\": {e}", crate::engine::ams::base(rel).am_name().to_string_lossy(), page::rel_name(rel)),
    }
}

/// Opens the hash path whose header is `header_blk` for reading.
pub unsafe fn open_reader(rel: pg_sys::Relation, header_blk: u32) -> HashArea<HashBufs> {
    HashArea::attach(HashBufs::reader(rel), header_blk)
}

/// Opens the hash path for the single writer.
pub unsafe fn open_writer(rel: pg_sys::Relation, header_blk: u32) -> HashArea<HashBufs> {
    match HashArea::open(HashBufs::writer(rel), header_blk) {
        Ok(a) => a,
        Err(e) => fail(rel, e),
    }
}

// ---------------------------------------------------------------------------
// Routing copies

/// A backend's copy of a hash path's routing: the header (masks, maxbucket)
/// and every bucket's primary block. With it a probe reads one page, the
/// bucket's primary (plus its overflow pages), instead of the header, a
/// directory page and then the chain; PostgreSQL's hash index keeps its
/// metapage in `rd_amcache` for the same reason.
///
/// A copy is valid for one generation of the index (the engine's,
/// bumped by every merge step): only a sync step splits buckets, and the
/// chains a split retires are kept from reuse until no reader registered
/// under an older generation is left (engine readers), so a probe of
/// generation G may follow any copy taken under G, even one a split of the
/// step that makes G+1 has overtaken: the old chain still holds every entry
/// that was synced before the split, and what the split's step synced is
/// still in the dynamic stage, which the scan reads too. A chain written by
/// a split after the copy was taken carries a newer stamp, and the probe
/// routes again from the header (the copy is then dropped). Copies are
/// dropped with the relcache entry (any invalidation of the index: a
/// TRUNCATE in the creating transaction starts generations over under the
/// same relfilenode) and never used during recovery, where replay may reuse
/// a retired chain under a standby query.
struct Route {
    rel: pg_sys::Oid,
    relnode: u32,
    generation: u32,
    header_blk: u32,
    header: hp::Header,
    primaries: Vec<u32>,
}

/// Routes this backend keeps; the oldest goes first.
const MAX_ROUTES: usize = 32;

thread_local! {
    static ROUTES: std::cell::RefCell<Vec<Route>> = const { std::cell::RefCell::new(Vec::new()) };
    static CALLBACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_routes(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    ROUTES.with(|r| r.borrow_mut().retain(|x| relid != pg_sys::InvalidOid && x.rel != relid));
}

unsafe fn ensure_callback() {
    if !CALLBACK_SET.with(|c| c.replace(true)) {
        pg_sys::CacheRegisterRelcacheCallback(Some(forget_routes), pg_sys::Datum::from(0usize));
    }
}

/// Every entry of the hash path at `header_blk` stored under `hash` whose
/// key `eq` accepts, into `out` (cleared first). `generation` is the
/// engine generation the caller reads under (a registered reader or the
/// maintenance lock keeps its retired chains). False when it stopped
/// after more than `limit` hits (`run_probe_upto`).
pub unsafe fn lookup(rel: pg_sys::Relation, header_blk: u32, generation: u32, hash: u32, eq: &mut dyn FnMut(&[u8]) -> bool, out: &mut hp::Matches, limit: usize) -> bool {
    out.clear();
    let area = open_reader(rel, header_blk);
    if pg_sys::RecoveryInProgress() {
        return area.lookup_matches(hash, eq, out, limit).unwrap_or_else(|e| fail_reader(rel, e));
    }
    ensure_callback();
    let relid = (*rel).rd_id;
    let relnode = (*rel).rd_node.relNode.to_u32();
    let cached = ROUTES.with(|r| r.borrow().iter().any(|x| x.rel == relid && x.relnode == relnode && x.generation == generation && x.header_blk == header_blk));
    if !cached {
        let header = area.header().unwrap_or_else(|e| fail(rel, e));
        let primaries = area.primaries(&header).unwrap_or_else(|e| fail(rel, e));
        ROUTES.with(|r| {
            let mut r = r.borrow_mut();
            r.retain(|x| x.rel != relid);
            if r.len() >= MAX_ROUTES {
                r.remove(0);
            }
            r.push(Route { rel: relid, relnode, generation, header_blk, header, primaries });
        });
    }
    let mut probe = ROUTES.with(|r| {
        let r = r.borrow();
        let x = r.iter().find(|x| x.rel == relid).expect("kept above");
        hp::Probe::with_directory(header_blk, &x.header, hash, |b| x.primaries.get(b as usize).copied())
    });
    let complete = area.run_probe_upto(&mut probe, eq, &mut |k, t| out.push(k, t), limit).unwrap_or_else(|e| fail(rel, e));
    if probe.restarts() > 0 {
        // A split overtook the copy: the next probe takes a fresh one.
        ROUTES.with(|r| r.borrow_mut().retain(|x| x.rel != relid));
    }
    complete
}

/// A failure of a read: during recovery, replay may have reused a retired
/// chain a standby query was reading (a recovery conflict, retried); on a
/// primary it is corruption.
pub unsafe fn fail_reader(rel: pg_sys::Relation, e: hp::Error) -> ! {
    if e.is_corrupt() && pg_sys::RecoveryInProgress() {
        crate::raise(
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            "canceling statement due to conflict with recovery",
            "A sync replayed from the primary recycled hash pages this query was reading; retry the query.",
        );
    }
    fail(rel, e)
}
