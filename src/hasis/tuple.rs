//! Rows between PostgreSQL's tuple slots and the core's row format.
//!
//! Writing: the slot's values become a heap tuple (`heap_form_tuple`
//! flattens expanded values), which heap's toaster shrinks below
//! `TOAST_TUPLE_THRESHOLD` exactly as for a heap table (the TOAST table is
//! a heap table); its deformed values are stored as raw bytes: by-value
//! and fixed-length values as their bytes, varlena values with their
//! header as they sit in a heap tuple (inline, compressed or a TOAST
//! pointer), cstrings with their terminator.
//!
//! Reading: the bytes become a heap tuple again, with the version's MVCC
//! fields in its header, so system columns (xmin, xmax, cmin, ctid) read
//! as on heap. Columns added after the row was written (natts below the
//! descriptor's) take their missing value (ADD COLUMN ... DEFAULT).

use pgrx::pg_sys;

use pg_hybrid_core::hasis::row::{decode_payload, payload_values, ColumnDesc, MinMaxOrder, Mvcc, PayloadWriter, Row, Schema};
use pg_hybrid_core::tid::Tid;

use super::visibility::{to_item_pointer, write_header, HEAP_HASEXTERNAL};

/// TOAST_TUPLE_THRESHOLD for 8 kB blocks.
const TOAST_TUPLE_THRESHOLD: u32 = 2032;

extern "C-unwind" {
    fn heap_toast_insert_or_update(rel: pg_sys::Relation, newtup: pg_sys::HeapTuple, oldtup: pg_sys::HeapTuple, options: i32) -> pg_sys::HeapTuple;
    fn heap_toast_delete(rel: pg_sys::Relation, oldtup: pg_sys::HeapTuple, is_speculative: bool);
    fn toast_delete_datum(rel: pg_sys::Relation, value: pg_sys::Datum, is_speculative: bool);
    pub(super) fn toast_flatten_tuple(tup: pg_sys::HeapTuple, desc: pg_sys::TupleDesc) -> pg_sys::HeapTuple;
    fn datumIsEqual(value1: pg_sys::Datum, value2: pg_sys::Datum, typbyval: bool, typlen: i32) -> bool;
}

/// Whether a column of `cols` (a `RelationGetIndexAttrBitmap` set: attribute
/// numbers less FirstLowInvalidHeapAttributeNumber) differs between two
/// versions of a row, compared as heap_update compares them (the same
/// datum, TOAST pointers included). A system column in the set counts as
/// changed.
pub unsafe fn columns_differ(rel: pg_sys::Relation, cols: *const pg_sys::Bitmapset, old: pg_sys::HeapTuple, new: pg_sys::HeapTuple) -> bool {
    let desc = (*rel).rd_att;
    let n = (*desc).natts;
    let mut x = -1;
    loop {
        x = pg_sys::bms_next_member(cols, x);
        if x < 0 {
            return false;
        }
        let attno = x + pg_sys::FirstLowInvalidHeapAttributeNumber;
        if attno <= 0 || attno > n {
            return true;
        }
        let a = &attrs(desc)[attno as usize - 1];
        let (mut old_null, mut new_null) = (false, false);
        let ov = pg_sys::heap_getattr(old, attno, desc, &mut old_null);
        let nv = pg_sys::heap_getattr(new, attno, desc, &mut new_null);
        if old_null != new_null || (!old_null && !datumIsEqual(ov, nv, a.attbyval, a.attlen as i32)) {
            return true;
        }
    }
}

unsafe fn attrs<'a>(desc: pg_sys::TupleDesc) -> &'a [pg_sys::FormData_pg_attribute] {
    (*desc).attrs.as_slice((*desc).natts as usize)
}

/// The core's view of the relation's columns.
pub unsafe fn schema(rel: pg_sys::Relation) -> Schema {
    schema_of((*rel).rd_att)
}

/// The core's view of a tuple descriptor's columns.
pub unsafe fn schema_of(desc: pg_sys::TupleDesc) -> Schema {
    let cols = attrs(desc)
        .iter()
        .map(|a| {
            if a.attlen > 0 {
                ColumnDesc::fixed(a.attlen as u16, minmax_order(a.atttypid, a.attlen))
            } else {
                ColumnDesc::varlena()
            }
        })
        .collect();
    Schema::new(cols).expect("a relation's columns make a valid hasis schema")
}

/// How the column part orders a type's raw bytes for min/max.
pub(crate) fn minmax_order(typid: pg_sys::Oid, len: i16) -> MinMaxOrder {
    use pg_sys::BuiltinOid as B;
    let Ok(b) = B::try_from(typid) else { return MinMaxOrder::None };
    match b {
        B::INT2OID | B::INT4OID | B::INT8OID | B::DATEOID | B::TIMEOID | B::TIMESTAMPOID | B::TIMESTAMPTZOID => MinMaxOrder::SignedInt,
        B::OIDOID | B::XIDOID => MinMaxOrder::UnsignedInt,
        B::FLOAT4OID | B::FLOAT8OID if len == 4 || len == 8 => MinMaxOrder::Float,
        B::UUIDOID | B::BOOLOID | B::CHAROID => MinMaxOrder::Bytes,
        _ => MinMaxOrder::None,
    }
}

/// A row ready to store: its payload in the core's row format, and the
/// (toasted) heap tuple it came from, which update and delete hand to the
/// toaster.
pub struct Prepared {
    pub natts: u16,
    pub payload: Vec<u8>,
    pub tuple: pg_sys::HeapTuple,
}

/// Encodes the slot's row; `old` is the previous version for an UPDATE,
/// so the toaster can keep unchanged TOAST values and drop replaced ones.
pub unsafe fn prepare(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, old: pg_sys::HeapTuple, options: i32) -> Prepared {
    // The slot's own heap tuple (formed now if the slot holds values):
    // `stamp_slot` later gives it the new version's MVCC fields.
    let mut should_free = false;
    let tup = pg_sys::ExecFetchSlotHeapTuple(slot, true, &mut should_free);
    prepare_tuple(rel, tup, old, options)
}

/// Gives the slot's tuple the MVCC fields and TID of the version just
/// stored from it, as heap_insert does to the tuple it inserts: RETURNING
/// xmin / xmax / cmin and triggers read them from the slot.
pub unsafe fn stamp_slot(slot: *mut pg_sys::TupleTableSlot, m: &Mvcc, tid: Tid) {
    let mut should_free = false;
    let tup = pg_sys::ExecFetchSlotHeapTuple(slot, true, &mut should_free);
    if should_free {
        // A copy: the slot keeps no heap tuple to stamp.
        pg_sys::heap_freetuple(tup);
        return;
    }
    write_header((*tup).t_data as *mut u8, m);
    (*tup).t_self = to_item_pointer(tid);
    (*tup).t_tableOid = (*slot).tts_tableOid;
}

/// `prepare` for a formed heap tuple (CLUSTER's copies: external values are
/// toasted again into the new relation's TOAST table).
pub unsafe fn prepare_tuple(rel: pg_sys::Relation, mut tup: pg_sys::HeapTuple, old: pg_sys::HeapTuple, options: i32) -> Prepared {
    let desc = (*rel).rd_att;
    let has_external = (*(*tup).t_data).t_infomask & HEAP_HASEXTERNAL != 0;
    if (*(*rel).rd_rel).reltoastrelid != pg_sys::InvalidOid && (has_external || (*tup).t_len > TOAST_TUPLE_THRESHOLD) {
        tup = heap_toast_insert_or_update(rel, tup, old, options);
    } else if has_external {
        tup = toast_flatten_tuple(tup, desc);
    }
    let (natts, payload) = encode_tuple(rel, desc, tup);
    Prepared { natts, payload, tuple: tup }
}

/// The row-format payload of a heap tuple's values, written from its
/// deformed datums in place.
unsafe fn encode_tuple(rel: pg_sys::Relation, desc: pg_sys::TupleDesc, tup: pg_sys::HeapTuple) -> (u16, Vec<u8>) {
    let n = (*desc).natts as usize;
    let mut values = vec![pg_sys::Datum::from(0usize); n];
    let mut nulls = vec![false; n];
    pg_sys::heap_deform_tuple(tup, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
    let schema = schema(rel);
    let encoded = PayloadWriter::new(&schema, n).and_then(|mut w| {
        for (i, a) in attrs(desc).iter().enumerate() {
            if nulls[i] {
                w.push(None)?;
            } else if a.attbyval {
                w.push(Some(&(values[i].value() as u64).to_le_bytes()[..a.attlen as usize]))?;
            } else {
                let p = values[i].cast_mut_ptr::<u8>();
                let len = match a.attlen {
                    -1 => pgrx::varsize_any(p as *const pg_sys::varlena),
                    -2 => std::ffi::CStr::from_ptr(p as *const std::os::raw::c_char).to_bytes_with_nul().len(),
                    n => n as usize,
                };
                w.push(Some(std::slice::from_raw_parts(p, len)))?;
            }
        }
        w.finish()
    });
    (n as u16, encoded.unwrap_or_else(|e| super::format_error(rel, 0, e)))
}

pub(crate) unsafe fn bytes_datum(a: &pg_sys::FormData_pg_attribute, b: &[u8]) -> pg_sys::Datum {
    if a.attbyval {
        byval_datum(a.attlen, b)
    } else {
        pg_sys::Datum::from(b.as_ptr())
    }
}

/// The datum of a by-value type of length `attlen` stored as its bytes,
/// sign-extended as the type's DatumGet* would see it.
/// Bytes of exactly the type's length are read at that width (a column
/// scan converts every value of a part through here with `attlen` fixed).
#[inline]
pub(crate) fn byval_datum(attlen: i16, b: &[u8]) -> pg_sys::Datum {
    let raw = match (attlen, b) {
        (1, &[x]) => x as i8 as i64 as u64,
        (2, &[x0, x1]) => i16::from_le_bytes([x0, x1]) as i64 as u64,
        (4, &[x0, x1, x2, x3]) => i32::from_le_bytes([x0, x1, x2, x3]) as i64 as u64,
        (8, &[x0, x1, x2, x3, x4, x5, x6, x7]) => u64::from_le_bytes([x0, x1, x2, x3, x4, x5, x6, x7]),
        _ => {
            let mut v = [0u8; 8];
            v[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
            match attlen {
                1 => v[0] as i8 as i64 as u64,
                2 => i16::from_le_bytes([v[0], v[1]]) as i64 as u64,
                4 => i32::from_le_bytes([v[0], v[1], v[2], v[3]]) as i64 as u64,
                _ => u64::from_le_bytes(v),
            }
        }
    };
    pg_sys::Datum::from(raw as usize)
}

/// Decodes a stored payload into a row.
pub unsafe fn decode(rel: pg_sys::Relation, schema: &Schema, natts: u16, payload: &[u8], blk: u32) -> Row {
    decode_payload(schema, natts as usize, payload).unwrap_or_else(|e| super::format_error(rel, blk, e))
}

/// A heap tuple (palloc'd in the current memory context) of `row` with the
/// version's MVCC fields and TID.
pub unsafe fn form(rel: pg_sys::Relation, row: &Row, m: &Mvcc, tid: Tid) -> pg_sys::HeapTuple {
    let desc = (*rel).rd_att;
    let n = (*desc).natts as usize;
    let mut values = vec![pg_sys::Datum::from(0usize); n];
    let mut nulls = vec![true; n];
    for ((i, a), v) in attrs(desc).iter().enumerate().zip(&row.values) {
        if let Some(b) = v {
            values[i] = bytes_datum(a, b);
            nulls[i] = false;
        }
    }
    fill_missing(desc, &mut values, &mut nulls, row.values.len());
    stamped(rel, pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr()), m, tid)
}

/// `form` of a stored payload (`natts` values), read in place: no `Row`
/// of copied values in between. `blk` names the block in a format error.
pub unsafe fn form_payload(rel: pg_sys::Relation, schema: &Schema, natts: u16, payload: &[u8], m: &Mvcc, tid: Tid, blk: u32) -> pg_sys::HeapTuple {
    let desc = (*rel).rd_att;
    let (mut values, mut nulls) = payload_datums(rel, desc, schema, natts, payload, blk);
    stamped(rel, pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr()), m, tid)
}

/// The datums of a stored payload's `natts` values under `desc` (pointing
/// into `payload`), the later columns (added after the row was written)
/// taking their missing values. `blk` names the block in a format error.
unsafe fn payload_datums(rel: pg_sys::Relation, desc: pg_sys::TupleDesc, schema: &Schema, natts: u16, payload: &[u8], blk: u32) -> (Vec<pg_sys::Datum>, Vec<bool>) {
    let n = (*desc).natts as usize;
    let atts = attrs(desc);
    let mut values = vec![pg_sys::Datum::from(0usize); n];
    let mut nulls = vec![true; n];
    let decoded = payload_values(schema, natts as usize, payload, |i, v| {
        if let Some(b) = v {
            values[i] = bytes_datum(&atts[i], b);
            nulls[i] = false;
        }
    });
    if let Err(e) = decoded {
        super::format_error(rel, blk, e);
    }
    fill_missing(desc, &mut values, &mut nulls, natts as usize);
    (values, nulls)
}

/// Columns from `stored` on (added after the row was written) take their
/// missing values (ADD COLUMN ... DEFAULT).
unsafe fn fill_missing(desc: pg_sys::TupleDesc, values: &mut [pg_sys::Datum], nulls: &mut [bool], stored: usize) {
    for i in stored..values.len() {
        let mut isnull = true;
        values[i] = pg_sys::getmissingattr(desc, i as i32 + 1, &mut isnull);
        nulls[i] = isnull;
    }
}

/// `tup` with the version's MVCC fields, TID and table.
unsafe fn stamped(rel: pg_sys::Relation, tup: pg_sys::HeapTuple, m: &Mvcc, tid: Tid) -> pg_sys::HeapTuple {
    write_header((*tup).t_data as *mut u8, m);
    (*tup).t_self = to_item_pointer(tid);
    (*tup).t_tableOid = (*rel).rd_id;
    tup
}

/// The core schema of a slot's tuple descriptor, kept across the rows of a
/// scan (recomputed when the slot's descriptor changes).
#[derive(Default)]
pub struct SlotSchema {
    desc: Option<(pg_sys::TupleDesc, i32)>,
    schema: Option<Schema>,
}

impl SlotSchema {
    pub unsafe fn of(&mut self, desc: pg_sys::TupleDesc) -> &Schema {
        let key = (desc, (*desc).natts);
        if self.desc != Some(key) || self.schema.is_none() {
            self.schema = Some(schema_of(desc));
            self.desc = Some(key);
        }
        self.schema.as_ref().unwrap()
    }
}

/// Stores a stored version (`natts` values of `payload`) into a slot of
/// `TTSOpsHeapTuple` (hasis's slot type), decoded with the slot's tuple
/// descriptor: during ALTER TABLE's rewrite the relation's descriptor is
/// already the new one, and the slot has the descriptor the rows were
/// written with. The values are read in place (no copy before
/// `heap_form_tuple`'s).
pub unsafe fn store(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cache: &mut SlotSchema, natts: u16, payload: &[u8], m: &Mvcc, tid: Tid) {
    store_columns(rel, slot, cache, natts, payload, m, tid, None)
}

/// An empty 4-byte-header varlena (VARSIZE 4, little-endian), and an empty
/// cstring: stand-ins for NOT NULL columns a partial fetch did not read.
static EMPTY_VARLENA_BYTES: [u32; 1] = [4 << 2];
static EMPTY_CSTRING: [u8; 1] = [0];

/// `store` for a payload of a partial fetch (`colscan::fetch`), whose
/// columns not in `wanted` read as NULL. A NOT NULL column must not: JIT
/// tuple deforming takes a NOT NULL column to be present without looking
/// at the null bitmap, and would read the columns after it at the wrong
/// offsets. Such a column gets a stand-in of its length (zeros, an empty
/// varlena, an empty cstring) that nothing in the plan reads.
pub unsafe fn store_columns(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cache: &mut SlotSchema, natts: u16, payload: &[u8], m: &Mvcc, tid: Tid, wanted: Option<&[bool]>) {
    let desc = (*slot).tts_tupleDescriptor;
    let n = (*desc).natts as usize;
    let atts = attrs(desc);
    let (mut values, mut nulls) = payload_datums(rel, desc, cache.of(desc), natts, payload, tid.block);
    let mut stand_ins: Vec<Vec<u64>> = Vec::new();
    if let Some(w) = wanted {
        for i in 0..n.min(natts as usize) {
            let a = &atts[i];
            if !nulls[i] || !a.attnotnull || a.attisdropped || w.get(i).copied().unwrap_or(true) {
                continue;
            }
            values[i] = if a.attbyval {
                pg_sys::Datum::from(0usize)
            } else if a.attlen > 0 {
                stand_ins.push(vec![0u64; (a.attlen as usize).div_ceil(8)]);
                pg_sys::Datum::from(stand_ins.last().unwrap().as_ptr())
            } else if a.attlen == -1 {
                pg_sys::Datum::from(EMPTY_VARLENA_BYTES.as_ptr())
            } else {
                pg_sys::Datum::from(EMPTY_CSTRING.as_ptr())
            };
            nulls[i] = false;
        }
    }
    // The slot frees the tuple when it is cleared, which may be after the
    // caller's memory context was reset: allocate it in the slot's.
    let old = pg_sys::CurrentMemoryContext;
    pg_sys::CurrentMemoryContext = (*slot).tts_mcxt;
    let tup = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
    pg_sys::CurrentMemoryContext = old;
    pg_sys::ExecStoreHeapTuple(stamped(rel, tup, m, tid), slot, true);
    (*slot).tts_tableOid = (*rel).rd_id;
}

/// Deletes the TOAST values of a deleted version, as heap_delete does.
/// `speculative`: the values were stored by this very command (a killed
/// speculative insertion), so their TOAST chunks are deleted as heap's
/// heap_abort_speculative does.
pub unsafe fn toast_delete(rel: pg_sys::Relation, old: pg_sys::HeapTuple, speculative: bool) {
    if (*(*old).t_data).t_infomask & HEAP_HASEXTERNAL != 0 && (*(*rel).rd_rel).reltoastrelid != pg_sys::InvalidOid {
        heap_toast_delete(rel, old, speculative);
    }
}

/// The on-disk TOAST pointer of a varlena datum (VARATT_IS_EXTERNAL_ONDISK:
/// a 1-byte external header, tag VARTAG_ONDISK, a 16-byte varatt_external).
unsafe fn ondisk_toast_pointer<'a>(d: pg_sys::Datum) -> Option<&'a [u8]> {
    const VARTAG_ONDISK: u8 = 18;
    let p = d.cast_mut_ptr::<u8>() as *const u8;
    (*p == 0x01 && *p.add(1) == VARTAG_ONDISK).then(|| std::slice::from_raw_parts(p, 18))
}

/// Deletes the TOAST values `new` stored that `old` does not share (an
/// UPDATE's new version that lost a race and is killed: unchanged values
/// still belong to the old version).
pub unsafe fn toast_delete_unshared(rel: pg_sys::Relation, new: pg_sys::HeapTuple, old: pg_sys::HeapTuple) {
    if (*(*new).t_data).t_infomask & HEAP_HASEXTERNAL == 0 || (*(*rel).rd_rel).reltoastrelid == pg_sys::InvalidOid {
        return;
    }
    let desc = (*rel).rd_att;
    let n = (*desc).natts as usize;
    let (mut nv, mut nn) = (vec![pg_sys::Datum::from(0usize); n], vec![false; n]);
    let (mut ov, mut on) = (vec![pg_sys::Datum::from(0usize); n], vec![false; n]);
    pg_sys::heap_deform_tuple(new, desc, nv.as_mut_ptr(), nn.as_mut_ptr());
    pg_sys::heap_deform_tuple(old, desc, ov.as_mut_ptr(), on.as_mut_ptr());
    for (i, a) in attrs(desc).iter().enumerate() {
        if a.attlen != -1 || nn[i] {
            continue;
        }
        let Some(ptr) = ondisk_toast_pointer(nv[i]) else { continue };
        let shared = !on[i] && ondisk_toast_pointer(ov[i]).is_some_and(|o| o == ptr);
        if !shared {
            toast_delete_datum(rel, nv[i], true);
        }
    }
}
