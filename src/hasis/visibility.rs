//! Heap's visibility rules applied to a hasis row header.
//!
//! A hasis version carries exactly the MVCC fields of a heap tuple header
//! (xmin, xmax, t_cid, t_ctid, infomask bits), so PostgreSQL's own
//! `HeapTupleSatisfies*` functions decide visibility: each call gets a
//! 24-byte heap tuple header built from those fields. Hint bits the call
//! sets land in that copy and are written back into the page by the
//! caller (`Located::set_hint`), under the share lock heap also uses; the
//! call itself already marked the real buffer dirty as a hint.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::row::Mvcc;
use pg_hybrid_core::tid::Tid;

// Heap tuple header bits (access/htup_details.h).
pub const HEAP_HASNULL: u16 = 0x0001;
pub const HEAP_HASEXTERNAL: u16 = 0x0004;
/// HASNULL | HASVARWIDTH | HASEXTERNAL | HASOID_OLD: describe the data, not
/// MVCC; hasis keeps them out of its row header.
pub const HEAP_DATA_BITS: u16 = 0x000F;
pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
pub const HEAP_COMBOCID: u16 = 0x0020;
pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
pub const HEAP_XMAX_SHR_LOCK: u16 = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
pub const HEAP_LOCK_MASK: u16 = HEAP_XMAX_SHR_LOCK | HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
pub const HEAP_XMIN_INVALID: u16 = 0x0200;
pub const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
pub const HEAP_XMAX_INVALID: u16 = 0x0800;
pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
pub const HEAP_UPDATED: u16 = 0x2000;
pub const HEAP_XMAX_BITS: u16 = HEAP_XMAX_COMMITTED | HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK | HEAP_XMAX_LOCK_ONLY;
pub const HEAP_NATTS_MASK: u16 = 0x07FF;
pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
/// infomask2: the version was updated in place of a HOT chain (its
/// successor is heap-only, in the same extent).
pub const HEAP_HOT_UPDATED: u16 = 0x4000;
/// infomask2: a heap-only version, reached through its chain's root.
pub const HEAP_ONLY_TUPLE: u16 = 0x8000;

/// HeapTupleHeaderIsHotUpdated: the HOT link counts only while the
/// updater may have committed and the version itself was ever valid.
pub fn is_hot_updated(m: &Mvcc) -> bool {
    m.infomask2 & HEAP_HOT_UPDATED != 0 && m.infomask & HEAP_XMAX_INVALID == 0 && m.infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_INVALID
}

pub fn is_heap_only(m: &Mvcc) -> bool {
    m.infomask2 & HEAP_ONLY_TUPLE != 0
}

/// A version's place in a HOT chain for the core's chain algebra
/// (`pg_hybrid_core::hasis::hot`): the next member is the ctid's slot when
/// the version is HOT-updated and the ctid lies in the same extent.
pub fn chain_link(g: &pg_hybrid_core::hasis::layout::Geometry, first: u32, m: &Mvcc) -> pg_hybrid_core::hasis::hot::ChainLink {
    let next = if is_hot_updated(m) { g.slot(first, m.ctid).ok() } else { None };
    pg_hybrid_core::hasis::hot::ChainLink { heap_only: is_heap_only(m), next, xmin: m.xmin, updater: unsafe { update_xid(m) } }
}

/// heap's HEAP_XMAX_IS_LOCKED_ONLY: the xmax only locks the version.
pub fn xmax_locked_only(m: &Mvcc) -> bool {
    m.infomask & HEAP_XMAX_LOCK_ONLY != 0 || m.infomask & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) == HEAP_XMAX_EXCL_LOCK
}

/// heap's HeapTupleHeaderGetUpdateXid: the transaction that updated or
/// deleted the version. That is its xmax, except where a no-key update
/// shares the version with key-share lockers (a foreign key check's lock):
/// then the xmax is a MultiXact, and the update is one of its members.
/// For a lock-only or invalid xmax, the raw xmax, as heap's macro.
pub unsafe fn update_xid(m: &Mvcc) -> u32 {
    if m.infomask & HEAP_XMAX_INVALID == 0 && m.infomask & HEAP_XMAX_IS_MULTI != 0 && m.infomask & HEAP_XMAX_LOCK_ONLY == 0 {
        let mut ht = HeaderTuple::new(m, Tid::default(), pg_sys::InvalidOid);
        pg_sys::HeapTupleGetUpdateXid(ht.header()).into_inner()
    } else {
        m.xmax
    }
}

/// The MVCC fields of a new version this transaction inserts (`updated`:
/// as the new half of an UPDATE, heap's HEAP_UPDATED). ctid is set to the
/// version's own TID when its slot is known.
pub fn new_version(xid: u32, cid: pg_sys::CommandId, updated: bool) -> Mvcc {
    Mvcc { xmin: xid, xmax: 0, cid, ctid: Tid::default(), infomask: HEAP_XMAX_INVALID | if updated { HEAP_UPDATED } else { 0 }, infomask2: 0 }
}

/// Byte offsets in a heap tuple header.
const T_XMIN: usize = 0;
const T_XMAX: usize = 4;
const T_CID: usize = 8;
const T_CTID: usize = 12;
const T_INFOMASK2: usize = 18;
const T_INFOMASK: usize = 20;
const T_HOFF: usize = 22;
pub const HEADER_LEN: usize = 24;

/// Writes the MVCC fields into a heap tuple header (data bits kept).
pub unsafe fn write_header(hdr: *mut u8, m: &Mvcc) {
    let b = std::slice::from_raw_parts_mut(hdr, HEADER_LEN);
    b[T_XMIN..T_XMIN + 4].copy_from_slice(&m.xmin.to_ne_bytes());
    b[T_XMAX..T_XMAX + 4].copy_from_slice(&m.xmax.to_ne_bytes());
    b[T_CID..T_CID + 4].copy_from_slice(&m.cid.to_ne_bytes());
    b[T_CTID..T_CTID + 2].copy_from_slice(&((m.ctid.block >> 16) as u16).to_ne_bytes());
    b[T_CTID + 2..T_CTID + 4].copy_from_slice(&(m.ctid.block as u16).to_ne_bytes());
    b[T_CTID + 4..T_CTID + 6].copy_from_slice(&m.ctid.offset.to_ne_bytes());
    let im2 = u16::from_ne_bytes([b[T_INFOMASK2], b[T_INFOMASK2 + 1]]);
    let im = u16::from_ne_bytes([b[T_INFOMASK], b[T_INFOMASK + 1]]);
    let im2 = (im2 & HEAP_NATTS_MASK) | (m.infomask2 & !HEAP_NATTS_MASK);
    let im = (im & HEAP_DATA_BITS) | (m.infomask & !HEAP_DATA_BITS);
    b[T_INFOMASK2..T_INFOMASK2 + 2].copy_from_slice(&im2.to_ne_bytes());
    b[T_INFOMASK..T_INFOMASK + 2].copy_from_slice(&im.to_ne_bytes());
}

pub unsafe fn read_infomask(hdr: *const u8) -> u16 {
    u16::from_ne_bytes([*hdr.add(T_INFOMASK), *hdr.add(T_INFOMASK + 1)])
}

pub unsafe fn read_cid(hdr: *const u8) -> u32 {
    u32::from_ne_bytes(std::slice::from_raw_parts(hdr.add(T_CID), 4).try_into().unwrap())
}

pub fn to_item_pointer(t: Tid) -> pg_sys::ItemPointerData {
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData { bi_hi: (t.block >> 16) as u16, bi_lo: t.block as u16 },
        ip_posid: t.offset,
    }
}

pub fn from_item_pointer(p: &pg_sys::ItemPointerData) -> Tid {
    Tid::new(((p.ip_blkid.bi_hi as u32) << 16) | p.ip_blkid.bi_lo as u32, p.ip_posid)
}

/// A heap tuple with only a header: what the `HeapTupleSatisfies*`
/// functions read.
#[repr(C, align(8))]
pub struct HeaderTuple {
    hdr: [u8; HEADER_LEN],
    pub tuple: pg_sys::HeapTupleData,
}

impl HeaderTuple {
    /// Boxed so `tuple.t_data` may point into it.
    pub unsafe fn new(m: &Mvcc, tid: Tid, relid: pg_sys::Oid) -> Box<HeaderTuple> {
        let mut b = Box::new(HeaderTuple { hdr: [0; HEADER_LEN], tuple: std::mem::zeroed() });
        b.hdr[T_HOFF] = HEADER_LEN as u8;
        write_header(b.hdr.as_mut_ptr(), m);
        b.tuple.t_len = HEADER_LEN as u32;
        b.tuple.t_self = to_item_pointer(tid);
        b.tuple.t_tableOid = relid;
        b.tuple.t_data = b.hdr.as_mut_ptr() as pg_sys::HeapTupleHeader;
        b
    }
    pub fn ptr(&mut self) -> pg_sys::HeapTuple {
        &mut self.tuple
    }
    pub fn header(&mut self) -> pg_sys::HeapTupleHeader {
        self.hdr.as_mut_ptr() as pg_sys::HeapTupleHeader
    }
    pub unsafe fn infomask(&self) -> u16 {
        read_infomask(self.hdr.as_ptr())
    }
}

/// A 24-byte heap tuple header, aligned as PostgreSQL's.
#[repr(C, align(8))]
struct RawHeader([u8; HEADER_LEN]);

/// Whether `m` (the version at `tid`, in `buffer`) is visible to
/// `snapshot`; also returns the infomask with any hint bits the check set,
/// when it changed. Allocation-free: this runs for every version a scan
/// meets.
pub unsafe fn visible(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot, m: &Mvcc, tid: Tid, buffer: pg_sys::Buffer) -> (bool, Option<u16>) {
    let mut hdr = RawHeader([0; HEADER_LEN]);
    hdr.0[T_HOFF] = HEADER_LEN as u8;
    write_header(hdr.0.as_mut_ptr(), m);
    let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
    tuple.t_len = HEADER_LEN as u32;
    tuple.t_self = to_item_pointer(tid);
    tuple.t_tableOid = (*rel).rd_id;
    tuple.t_data = hdr.0.as_mut_ptr() as pg_sys::HeapTupleHeader;
    let before = read_infomask(hdr.0.as_ptr());
    let vis = pg_sys::HeapTupleSatisfiesVisibility(&mut tuple, snapshot, buffer);
    // Returns at once unless this is a serializable transaction.
    pg_sys::HeapCheckForSerializableConflictOut(vis, rel, &mut tuple, buffer, snapshot);
    let after = read_infomask(hdr.0.as_ptr());
    (vis, (after != before).then_some(after))
}

/// Whether the version is dead to every snapshot, now and for good:
/// `HeapTupleIsSurelyDead`'s rule (inserter committed, updater or deleter
/// committed before the removal horizon `vistest`), except that a commit
/// whose hint bit is missing is looked up in the commit log, where heap's
/// function takes the version for alive. Under asynchronous commit a hint
/// bit waits for the commit's WAL flush unless the page's LSN has passed
/// the commit, and a filled delta block is not written again: its last
/// versions stayed unhinted, and every chain walk that met one started
/// there and walked the whole chain after it (pgbench's branches: ~280
/// versions per fetch, a quarter of an update's time). Like heap's
/// pruning (HeapTupleSatisfiesVacuum), this asks the commit log rather
/// than waiting for hints. The commit log alone is safe here: a committed
/// answer is final, and the removal horizon keeps out any transaction
/// still shown as running. A lock-only or MultiXact xmax says alive, as
/// heap's rule does.
pub unsafe fn dead_to_all(m: &Mvcc, vistest: *mut pg_sys::GlobalVisState) -> bool {
    if m.infomask & HEAP_XMIN_COMMITTED == 0 {
        if m.infomask & HEAP_XMIN_INVALID != 0 {
            // The inserter aborted.
            return true;
        }
        if !pg_sys::TransactionIdDidCommit(pg_sys::TransactionId::from(m.xmin)) {
            return false;
        }
    }
    if m.infomask & (HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI) != 0 || xmax_locked_only(m) {
        return false;
    }
    let xmax = pg_sys::TransactionId::from(m.xmax);
    if m.infomask & HEAP_XMAX_COMMITTED == 0 && !pg_sys::TransactionIdDidCommit(xmax) {
        return false;
    }
    pg_sys::GlobalVisTestIsRemovableXid(vistest, xmax)
}

/// Whether this transaction runs SERIALIZABLE (predicate locks and
/// rw-conflict checks are taken only then, as heap does).
pub unsafe fn serializable_reads() -> bool {
    pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32
}

/// HeapTupleSatisfiesVacuum for the version: what VACUUM, ANALYZE, index
/// builds and CLUSTER go by.
pub unsafe fn vacuum_state(m: &Mvcc, tid: Tid, relid: pg_sys::Oid, oldest_xmin: pg_sys::TransactionId, buffer: pg_sys::Buffer) -> (pg_sys::HTSV_Result::Type, Option<u16>, Box<HeaderTuple>) {
    let mut t = HeaderTuple::new(m, tid, relid);
    let before = t.infomask();
    let r = pg_sys::HeapTupleSatisfiesVacuum(t.ptr(), oldest_xmin, buffer);
    let after = t.infomask();
    (r, (after != before).then_some(after), t)
}

extern "C-unwind" {
    pub fn PredicateLockTID(relation: pg_sys::Relation, tid: pg_sys::ItemPointer, snapshot: pg_sys::Snapshot, insert_xid: pg_sys::TransactionId);
    pub fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot);
    pub fn CheckForSerializableConflictIn(relation: pg_sys::Relation, tid: pg_sys::ItemPointer, blkno: pg_sys::BlockNumber);
    pub fn HeapTupleHeaderAdvanceLatestRemovedXid(tuple: pg_sys::HeapTupleHeader, latest: *mut pg_sys::TransactionId);
}
