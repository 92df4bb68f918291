//! Logical decoding of hasis tables: the LOGICAL record and the rmgr's
//! decode callback.
//!
//! hasis's data records (INSERT, UPDATE, STAMP, COMPACT) describe hybrid
//! pages: a delta item packed against its neighbours, a stamp at a byte
//! offset, a whole column part. None of them is a row as logical decoding
//! hands rows to output plugins (a heap tuple per change). So where the
//! server runs with `wal_level = logical` and the table is logically logged
//! (heap's `RelationIsLogicallyLogged`), each INSERT, UPDATE and DELETE of a
//! row also writes one LOGICAL record, after the page records of the change
//! and in the same (sub)transaction:
//!
//! ```text
//!  0  1  op      1 insert, 2 update, 3 delete
//!  1  1  flags   0x01 an old tuple follows, 0x02 a new tuple follows
//!  2  2  reserved, 0
//!  4 12  RelFileNode of the table: tablespace, database, relfilenode (u32 each)
//! 16  ..  old tuple: u32 length, then that many bytes of the heap tuple
//!         (HeapTupleHeaderData and data, as heap forms it)
//!  ..  ..  new tuple: the same
//! ```
//!
//! The new tuple is the row as heap would log it: after TOAST, so a wide
//! value is a TOAST pointer whose chunks heap's own records of the TOAST
//! table (a heap table) carry, and the reorder buffer puts the value back
//! together as it does for heap. The old tuple is what heap's
//! `ExtractReplicaIdentity` logs: under REPLICA IDENTITY DEFAULT or USING
//! INDEX the identity columns (others NULL) for a DELETE, and for an UPDATE
//! only when one of them changed or is stored out of line; under FULL the
//! whole old row with its TOAST values inline; under NOTHING nothing.
//!
//! A speculative insertion (INSERT ... ON CONFLICT) logs nothing when it
//! goes in: its INSERT is logged when it is confirmed, and nothing when it
//! is killed, so the decoder never sees heap's SPEC_INSERT / SPEC_CONFIRM
//! pair.
//!
//! Redo ignores LOGICAL records. The decode callback (`decode`) does what
//! PostgreSQL's decode.c does with heap's records: it tells the reorder
//! buffer about the xid, and once the snapshot builder has a full snapshot
//! queues an INSERT, UPDATE or DELETE change for the record's transaction,
//! skipping other databases and origins the plugin filters out. Everything
//! after that (transaction reassembly, TOAST, subtransaction aborts, the
//! plugin) is PostgreSQL's own.

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::wal::{RM_HASIS_ID, XLOG_HASIS_LOGICAL};

/// The change a LOGICAL record carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    Insert = 1,
    Update = 2,
    Delete = 3,
}

const HAS_OLD: u8 = 0x01;
const HAS_NEW: u8 = 0x02;
const FIXED_LEN: usize = 16;

/// heap's SizeofHeapTupleHeader: where a tuple's null bitmap starts.
const SIZEOF_HEAP_TUPLE_HEADER: usize = 23;

/// A LOGICAL record's contents, decoded (tuples borrowed from the record).
pub struct LogicalRecord<'a> {
    pub op: Op,
    pub node: pg_sys::RelFileNode,
    pub old: Option<&'a [u8]>,
    pub new: Option<&'a [u8]>,
}

impl<'a> LogicalRecord<'a> {
    fn encode(&self) -> Vec<u8> {
        let flags = if self.old.is_some() { HAS_OLD } else { 0 } | if self.new.is_some() { HAS_NEW } else { 0 };
        let mut out = Vec::with_capacity(FIXED_LEN + 8 + self.old.map_or(0, |t| t.len()) + self.new.map_or(0, |t| t.len()));
        out.extend_from_slice(&[self.op as u8, flags, 0, 0]);
        for v in [self.node.spcNode, self.node.dbNode, self.node.relNode] {
            out.extend_from_slice(&v.to_u32().to_le_bytes());
        }
        for t in [self.old, self.new].into_iter().flatten() {
            out.extend_from_slice(&(t.len() as u32).to_le_bytes());
            out.extend_from_slice(t);
        }
        out
    }

    /// None for a malformed record (short, unknown op or flags, a tuple
    /// shorter than a tuple header, bytes left over).
    pub fn decode(b: &'a [u8]) -> Option<LogicalRecord<'a>> {
        let fixed = b.get(..FIXED_LEN)?;
        let op = match fixed[0] {
            1 => Op::Insert,
            2 => Op::Update,
            3 => Op::Delete,
            _ => return None,
        };
        let flags = fixed[1];
        if flags & !(HAS_OLD | HAS_NEW) != 0 || fixed[2] != 0 || fixed[3] != 0 {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes(fixed[4 + 4 * i..8 + 4 * i].try_into().unwrap());
        let node = pg_sys::RelFileNode { spcNode: word(0).into(), dbNode: word(1).into(), relNode: word(2).into() };
        let mut rest = &b[FIXED_LEN..];
        let mut take = |present: bool| -> Option<Option<&'a [u8]>> {
            if !present {
                return Some(None);
            }
            let len = u32::from_le_bytes(rest.get(..4)?.try_into().unwrap()) as usize;
            let t = rest.get(4..4 + len)?;
            if len < SIZEOF_HEAP_TUPLE_HEADER {
                return None;
            }
            rest = &rest[4 + len..];
            Some(Some(t))
        };
        let old = take(flags & HAS_OLD != 0)?;
        let new = take(flags & HAS_NEW != 0)?;
        if !rest.is_empty() {
            return None;
        }
        Some(LogicalRecord { op, node, old, new })
    }
}

/// Whether changes of `rel` are decoded logically (heap's
/// RelationIsLogicallyLogged: wal_level = logical and a WAL-logged table;
/// a hasis table is never a catalog).
pub unsafe fn wanted(rel: pg_sys::Relation) -> bool {
    pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_LOGICAL as i32 && crate::storage::wal::relation_needs_wal(rel)
}

unsafe fn tuple_bytes<'t>(t: pg_sys::HeapTuple) -> &'t [u8] {
    std::slice::from_raw_parts((*t).t_data as *const u8, (*t).t_len as usize)
}

unsafe fn log(rel: pg_sys::Relation, op: Op, old: Option<pg_sys::HeapTuple>, new: Option<pg_sys::HeapTuple>) {
    let rec = LogicalRecord { op, node: (*rel).rd_node, old: old.map(|t| tuple_bytes(t)), new: new.map(|t| tuple_bytes(t)) };
    let mut data = rec.encode();
    pg_sys::XLogBeginInsert();
    // As heap's records of logically logged tables: replication origins
    // (filter_by_origin) need the origin of the change.
    pg_sys::XLogSetRecordFlags(pg_sys::XLOG_INCLUDE_ORIGIN as u8);
    pg_sys::XLogRegisterData(data.as_mut_ptr() as *mut std::os::raw::c_char, data.len() as i32);
    pg_sys::XLogInsert(RM_HASIS_ID, XLOG_HASIS_LOGICAL);
}

/// Logs an inserted row (`tuple`: the stored, toasted tuple).
pub unsafe fn log_insert(rel: pg_sys::Relation, tuple: pg_sys::HeapTuple) {
    if wanted(rel) {
        log(rel, Op::Insert, None, Some(tuple));
    }
}

/// Logs an UPDATE from `old` (the old version as a heap tuple) to `new`
/// (the stored, toasted new version).
pub unsafe fn log_update(rel: pg_sys::Relation, old: pg_sys::HeapTuple, new: pg_sys::HeapTuple) {
    if !wanted(rel) {
        return;
    }
    let key = replica_identity(rel, old, Some(new));
    log(rel, Op::Update, key.as_ref().map(|k| k.tuple), Some(new));
}

/// Logs a DELETE of `old` (the deleted version as a heap tuple). Call it
/// before the row's TOAST values are deleted.
pub unsafe fn log_delete(rel: pg_sys::Relation, old: pg_sys::HeapTuple) {
    if !wanted(rel) {
        return;
    }
    let key = replica_identity(rel, old, None);
    log(rel, Op::Delete, key.as_ref().map(|k| k.tuple), None);
}

/// A tuple this module formed, freed on drop.
struct Formed {
    tuple: pg_sys::HeapTuple,
    owned: bool,
}

impl Drop for Formed {
    fn drop(&mut self) {
        if self.owned && !std::thread::panicking() {
            unsafe { pg_sys::heap_freetuple(self.tuple) };
        }
    }
}

use super::tuple::toast_flatten_tuple;

/// HeapTupleHasExternal.
unsafe fn has_external(t: pg_sys::HeapTuple) -> bool {
    (*(*t).t_data).t_infomask & super::visibility::HEAP_HASEXTERNAL != 0
}

/// VARATT_IS_EXTERNAL of a varlena datum.
unsafe fn is_external(d: pg_sys::Datum) -> bool {
    *(d.cast_mut_ptr::<u8>()) == 0x01
}

/// What heap's ExtractReplicaIdentity logs of the old row: for an update
/// (`new` given) only when an identity column changed or is stored out of
/// line, for a delete always; FULL: the whole row with TOAST values inline.
unsafe fn replica_identity(rel: pg_sys::Relation, old: pg_sys::HeapTuple, new: Option<pg_sys::HeapTuple>) -> Option<Formed> {
    let desc = (*rel).rd_att;
    let ident = (*(*rel).rd_rel).relreplident as u8;
    if ident == pg_sys::REPLICA_IDENTITY_NOTHING as u8 {
        return None;
    }
    if ident == pg_sys::REPLICA_IDENTITY_FULL as u8 {
        return Some(if has_external(old) {
            Formed { tuple: toast_flatten_tuple(old, desc), owned: true }
        } else {
            Formed { tuple: old, owned: false }
        });
    }
    let idattrs = pg_sys::RelationGetIndexAttrBitmap(rel, pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_IDENTITY_KEY);
    if pg_sys::bms_is_empty(idattrs) {
        return None;
    }
    let n = (*desc).natts as usize;
    let attrs = (*desc).attrs.as_slice(n);
    let mut values = vec![pg_sys::Datum::from(0usize); n];
    let mut nulls = vec![false; n];
    pg_sys::heap_deform_tuple(old, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
    let is_identity = |i: usize| pg_sys::bms_is_member(i as i32 + 1 - pg_sys::FirstLowInvalidHeapAttributeNumber, idattrs);
    if let Some(new) = new {
        let external = (0..n).filter(|&i| is_identity(i)).any(|i| !nulls[i] && attrs[i].attlen == -1 && is_external(values[i]));
        if !external && !super::tuple::columns_differ(rel, idattrs, old, new) {
            return None;
        }
    }
    for i in 0..n {
        if !is_identity(i) {
            nulls[i] = true;
        }
    }
    let key = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
    if has_external(key) {
        let flat = toast_flatten_tuple(key, desc);
        pg_sys::heap_freetuple(key);
        return Some(Formed { tuple: flat, owned: true });
    }
    Some(Formed { tuple: key, owned: true })
}

/// decode.h's XLogRecordBuffer (opaque in the bindings).
#[repr(C)]
struct RecordBuffer {
    origptr: pg_sys::XLogRecPtr,
    endptr: pg_sys::XLogRecPtr,
    record: *mut pg_sys::XLogReaderState,
}

extern "C-unwind" {
    fn SnapBuildCurrentState(builder: *mut pg_sys::SnapBuild) -> i32;
    fn SnapBuildProcessChange(builder: *mut pg_sys::SnapBuild, xid: pg_sys::TransactionId, lsn: pg_sys::XLogRecPtr) -> bool;
}

/// snapbuild.h's SNAPBUILD_FULL_SNAPSHOT.
const SNAPBUILD_FULL_SNAPSHOT: i32 = 1;

/// The rmgr's decode callback (RmgrData.rm_decode).
#[pg_guard]
pub unsafe extern "C-unwind" fn decode(ctx: *mut pg_sys::LogicalDecodingContext, buf: *mut pg_sys::XLogRecordBuffer) {
    let buf = &*(buf as *const RecordBuffer);
    let record = buf.record;
    let decoded = &*(*record).record;
    let xid = decoded.header.xl_xid;
    pg_sys::ReorderBufferProcessXid((*ctx).reorder, xid, buf.origptr);
    // As heap_decode: no changes before a full snapshot or when only
    // fast-forwarding.
    if SnapBuildCurrentState((*ctx).snapshot_builder) < SNAPBUILD_FULL_SNAPSHOT || (*ctx).fast_forward {
        return;
    }
    if crate::storage::wal::record_info(record) != XLOG_HASIS_LOGICAL {
        return;
    }
    if !SnapBuildProcessChange((*ctx).snapshot_builder, xid, buf.origptr) {
        return;
    }
    let data = std::slice::from_raw_parts(decoded.main_data as *const u8, decoded.main_data_len as usize);
    let Some(rec) = LogicalRecord::decode(data) else {
        crate::raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("malformed hasis LOGICAL record at {:X}/{:X}", buf.origptr >> 32, buf.origptr as u32),
            "The WAL is damaged; the replication slot cannot decode past this record.",
        );
    };
    if rec.node.dbNode != (*(*ctx).slot).data.database {
        return;
    }
    let origin = decoded.record_origin;
    if (*ctx).callbacks.filter_by_origin_cb.is_some() && pg_sys::filter_by_origin_cb_wrapper(ctx, origin) {
        return;
    }
    let rb = (*ctx).reorder;
    let change = pg_sys::ReorderBufferGetChange(rb);
    (*change).action = match rec.op {
        Op::Insert => pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INSERT,
        Op::Update => pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_UPDATE,
        Op::Delete => pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_DELETE,
    };
    (*change).origin_id = origin;
    let tp = &mut (*change).data.tp;
    tp.relnode = rec.node;
    tp.oldtuple = rec.old.map_or(std::ptr::null_mut(), |t| tuple_buf(rb, t));
    tp.newtuple = rec.new.map_or(std::ptr::null_mut(), |t| tuple_buf(rb, t));
    tp.clear_toast_afterwards = true;
    pg_sys::ReorderBufferQueueChange(rb, xid, buf.origptr, change, false);
}

/// A reorder-buffer tuple holding the logged tuple `t` (decode.c's
/// DecodeXLogTuple: not a tuple on disk, no MVCC fields).
unsafe fn tuple_buf(rb: *mut pg_sys::ReorderBuffer, t: &[u8]) -> *mut pg_sys::ReorderBufferTupleBuf {
    let tb = pg_sys::ReorderBufferGetTupleBuf(rb, t.len() - SIZEOF_HEAP_TUPLE_HEADER);
    let header = (*tb).tuple.t_data as *mut u8;
    std::ptr::copy_nonoverlapping(t.as_ptr(), header, t.len());
    // t_choice (xmin, xmax, cid) and t_ctid: 18 bytes the plugin never reads.
    std::ptr::write_bytes(header, 0, 18);
    (*tb).tuple.t_len = t.len() as u32;
    (*tb).tuple.t_self = pg_sys::ItemPointerData { ip_blkid: pg_sys::BlockIdData { bi_hi: 0xFFFF, bi_lo: 0xFFFF }, ip_posid: 0 };
    (*tb).tuple.t_tableOid = pg_sys::InvalidOid;
    tb
}
