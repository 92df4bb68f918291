//! From PostgreSQL datums to pg_hybrid's order-preserving key bytes and back.
//!
//! Each index gets an [`IndexDesc`]: per column, how its values are encoded
//! (see `pg_hybrid_core::keys`) and, for columns compared by callback
//! (numeric, collated text, bpchar), the opfamily's comparison proc. The desc
//! depends only on the index definition, which never changes for a given
//! (oid, relfilenode), so backends cache it by that pair.

pub mod opfamily;

use std::cell::RefCell;
use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::fast_hash::FastMap;
use pg_hybrid_core::keys::{self as ck, ColumnKind, ColumnOrder, KeySchema};
use pgrx::pg_sys;
use pgrx::prelude::*;

extern "C-unwind" {
    fn lc_collate_is_c(collation: pg_sys::Oid) -> bool;
}

/// How one column's datums are turned into key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enc {
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Bool,
    /// text/varchar under the C collation, and bytea.
    Bytes,
    Uuid,
    Date,
    Time,
    Timestamp,
    Interval,
    /// Raw varlena contents, ordered by the opfamily's comparison proc.
    OpaqueVarlena,
    /// INCLUDE column of any type: raw bytes, never compared for order.
    IncludedRaw,
}

pub struct ColDesc {
    pub typid: pg_sys::Oid,
    pub enc: Enc,
    pub kind: ColumnKind,
    pub order: ColumnOrder,
    pub collation: pg_sys::Oid,
    pub typlen: i16,
    pub typbyval: bool,
    /// Whether the original datum can be rebuilt from the key (index-only scans).
    pub returnable: bool,
    /// Comparison proc for OpaqueVarlena key columns.
    pub cmp_proc: pg_sys::Oid,
    cmp_finfo: RefCell<Option<Box<pg_sys::FmgrInfo>>>,
    /// The standard hash proc of the type's default hash opclass, for
    /// OpaqueVarlena key columns (InvalidOid when the type has none):
    /// equal values hash alike whatever their bytes (numeric 1.0 and
    /// 1.00, bpchar's trailing blanks, nondeterministic collations).
    pub hash_proc: pg_sys::Oid,
    hash_finfo: RefCell<Option<Box<pg_sys::FmgrInfo>>>,
}

pub struct IndexDesc {
    pub natts: usize,
    pub nkeyatts: usize,
    pub cols: Vec<ColDesc>,
    pub schema: KeySchema,
    /// Whole-key memcmp is the index order (no opaque column at all).
    pub memcmp: bool,
    /// Equal key-column values have equal bytes, so key bytes can be hashed
    /// (Bloom filter, unique-check stripes).
    pub hashable: bool,
    pub unique: bool,
    pub nulls_not_distinct: bool,
    pub index_oid: pg_sys::Oid,
}

/// Longest key accepted; a static leaf must hold at least three.
pub const MAX_KEY_BYTES: usize = (crate::storage::page::BODY_CAP - 64) / 3;

thread_local! {
    static DESCS: RefCell<FastMap<(u32, u32), Rc<IndexDesc>>> = RefCell::new(FastMap::default());
}

pub unsafe fn index_desc(index: pg_sys::Relation) -> Rc<IndexDesc> {
    let key = ((*index).rd_id.to_u32(), (*index).rd_node.relNode.to_u32());
    if let Some(d) = DESCS.with(|m| m.borrow().get(&key).cloned()) {
        return d;
    }
    let d = Rc::new(build_desc(index));
    DESCS.with(|m| m.borrow_mut().insert(key, d.clone()));
    d
}

unsafe fn build_desc(index: pg_sys::Relation) -> IndexDesc {
    let tupdesc = (*index).rd_att;
    let natts = (*tupdesc).natts as usize;
    let idx = (*index).rd_index;
    let nkeyatts = (*idx).indnkeyatts as usize;
    let mut cols = Vec::with_capacity(natts);
    for i in 0..natts {
        let attr = &*(*tupdesc).attrs.as_ptr().add(i);
        let typid = attr.atttypid;
        let (enc, order, collation, cmp_proc, hash_proc) = if i < nkeyatts {
            let opcintype = *(*index).rd_opcintype.add(i);
            let collation = *(*index).rd_indcollation.add(i);
            let order = ColumnOrder::from_indoption(*(*index).rd_indoption.add(i));
            let enc = enc_for_type(index, opcintype, collation, i);
            let (cmp_proc, hash_proc) = if enc == Enc::OpaqueVarlena {
                let opfamily = *(*index).rd_opfamily.add(i);
                (pg_sys::get_opfamily_proc(opfamily, opcintype, opcintype, 1), default_hash_proc(opcintype))
            } else {
                (pg_sys::InvalidOid, pg_sys::InvalidOid)
            };
            (enc, order, collation, cmp_proc, hash_proc)
        } else {
            (Enc::IncludedRaw, ColumnOrder::ASC, pg_sys::InvalidOid, pg_sys::InvalidOid, pg_sys::InvalidOid)
        };
        let kind = match enc {
            Enc::Int2 | Enc::Int4 | Enc::Int8 | Enc::Date | Enc::Time | Enc::Timestamp => ColumnKind::Int64,
            Enc::Float4 | Enc::Float8 => ColumnKind::Float64,
            Enc::Bool => ColumnKind::Bool,
            Enc::Bytes => ColumnKind::Bytes,
            Enc::Uuid => ColumnKind::Fixed(16),
            Enc::Interval => ColumnKind::Int128,
            Enc::OpaqueVarlena | Enc::IncludedRaw => ColumnKind::Opaque,
        };
        // Floats canonicalise -0 and NaN; interval keeps only its span.
        let returnable = !matches!(enc, Enc::Float4 | Enc::Float8 | Enc::Interval);
        cols.push(ColDesc {
            typid,
            enc,
            kind,
            order,
            collation,
            typlen: attr.attlen,
            typbyval: attr.attbyval,
            returnable,
            cmp_proc,
            cmp_finfo: RefCell::new(None),
            hash_proc,
            hash_finfo: RefCell::new(None),
        });
    }
    let schema = KeySchema::new(cols.iter().map(|c| (c.kind, c.order)).collect());
    let memcmp = schema.is_memcmp();
    let hashable = cols[..nkeyatts].iter().all(|c| c.kind != ColumnKind::Opaque);
    IndexDesc {
        natts,
        nkeyatts,
        cols,
        schema,
        memcmp,
        hashable,
        unique: (*idx).indisunique,
        nulls_not_distinct: (*idx).indnullsnotdistinct,
        index_oid: (*index).rd_id,
    }
}

/// Support function 1 of a hash opclass (access/hash.h).
const HASHSTANDARD_PROC: i16 = 1;

/// The standard hash support proc of `typid`'s default hash opclass.
unsafe fn default_hash_proc(typid: pg_sys::Oid) -> pg_sys::Oid {
    let opclass = pg_sys::GetDefaultOpClass(typid, pg_sys::HASH_AM_OID);
    if opclass == pg_sys::InvalidOid {
        return pg_sys::InvalidOid;
    }
    let intype = pg_sys::get_opclass_input_type(opclass);
    pg_sys::get_opfamily_proc(pg_sys::get_opclass_family(opclass), intype, intype, HASHSTANDARD_PROC)
}

unsafe fn enc_for_type(index: pg_sys::Relation, typid: pg_sys::Oid, collation: pg_sys::Oid, col: usize) -> Enc {
    use pg_sys::BuiltinOid as B;
    let Ok(b) = B::try_from(typid) else {
        unsupported_type(index, typid, col);
    };
    match b {
        B::INT2OID => Enc::Int2,
        B::INT4OID => Enc::Int4,
        B::INT8OID => Enc::Int8,
        B::FLOAT4OID => Enc::Float4,
        B::FLOAT8OID => Enc::Float8,
        B::BOOLOID => Enc::Bool,
        B::BYTEAOID => Enc::Bytes,
        B::TEXTOID | B::VARCHAROID => {
            if collation != pg_sys::InvalidOid && lc_collate_is_c(collation) {
                Enc::Bytes
            } else {
                Enc::OpaqueVarlena
            }
        }
        B::BPCHAROID | B::NUMERICOID => Enc::OpaqueVarlena,
        B::UUIDOID => Enc::Uuid,
        B::DATEOID => Enc::Date,
        B::TIMEOID => Enc::Time,
        B::TIMESTAMPOID | B::TIMESTAMPTZOID => Enc::Timestamp,
        B::INTERVALOID => Enc::Interval,
        _ => unsupported_type(index, typid, col),
    }
}

unsafe fn unsupported_type(index: pg_sys::Relation, typid: pg_sys::Oid, col: usize) -> ! {
    let tname = std::ffi::CStr::from_ptr(pg_sys::format_type_be(typid)).to_string_lossy().into_owned();
    crate::raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!(
            "pg_hybrid cannot index column {} of type {tname} in index \"{}\"",
            col + 1,
            crate::storage::page::rel_name(index)
        ), "Supported key types: int2, int4, int8, float4, float8, numeric, text, varchar, bpchar, bytea, uuid, bool, date, time, timestamp, timestamptz, interval. Other types may be INCLUDE columns.");
}

/// Byte contents of a (possibly toasted or short-header) varlena datum.
pub unsafe fn varlena_bytes<'a>(d: pg_sys::Datum) -> &'a [u8] {
    let v = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
    let len = pgrx::varlena::varsize_any_exhdr(v);
    std::slice::from_raw_parts(pgrx::varlena::vardata_any(v) as *const u8, len)
}

/// A palloc'd varlena with a 4-byte header holding `bytes`.
/// The function manager's data for `proc`, looked up on first use and
/// kept for the life of the backend (in TopMemoryContext).
unsafe fn lookup_once(cell: &mut Option<Box<pg_sys::FmgrInfo>>, proc: pg_sys::Oid) -> &mut Box<pg_sys::FmgrInfo> {
    cell.get_or_insert_with(|| {
        let mut fi: Box<pg_sys::FmgrInfo> = Box::new(std::mem::zeroed());
        pg_sys::fmgr_info_cxt(proc, &mut *fi, pg_sys::TopMemoryContext);
        fi
    })
}

/// The finaliser of SplitMix64: spreads every input bit over the output.
fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub unsafe fn make_varlena(bytes: &[u8]) -> pg_sys::Datum {
    let total = bytes.len() + pg_sys::VARHDRSZ;
    let p = pg_sys::palloc(total) as *mut pg_sys::varlena;
    pgrx::varlena::set_varsize_4b(p, total as i32);
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), (p as *mut u8).add(pg_sys::VARHDRSZ), bytes.len());
    pg_sys::Datum::from(p)
}

const USECS_PER_DAY: i128 = 86_400_000_000;

impl IndexDesc {
    /// Appends the encoding of one column value, as stored in the index.
    pub unsafe fn encode_col(&self, col: usize, d: pg_sys::Datum, isnull: bool, out: &mut Vec<u8>) {
        let c = &self.cols[col];
        if isnull {
            ck::enc_null(out, c.order);
            return;
        }
        self.encode_value(col, c.typid, d, out)
    }

    /// Appends the encoding of a value of type `typid` (the column's type or,
    /// for cross-type scan keys, a type of the same family) for column `col`.
    pub unsafe fn encode_value(&self, col: usize, typid: pg_sys::Oid, d: pg_sys::Datum, out: &mut Vec<u8>) {
        let c = &self.cols[col];
        let o = c.order;
        match c.enc {
            Enc::Int2 | Enc::Int4 | Enc::Int8 => {
                let v = match typid {
                    t if t == pg_sys::INT2OID => d.value() as i16 as i64,
                    t if t == pg_sys::INT4OID => d.value() as i32 as i64,
                    _ => d.value() as i64,
                };
                ck::enc_i64(out, v, o)
            }
            Enc::Float4 | Enc::Float8 => {
                let v = if typid == pg_sys::FLOAT4OID {
                    f32::from_bits(d.value() as u32) as f64
                } else {
                    f64::from_bits(d.value() as u64)
                };
                ck::enc_f64(out, v, o)
            }
            Enc::Bool => ck::enc_bool(out, d.value() != 0, o),
            Enc::Bytes => ck::enc_bytes(out, varlena_bytes(d), o),
            Enc::Uuid => ck::enc_fixed(out, std::slice::from_raw_parts(d.cast_mut_ptr::<u8>(), 16), o),
            Enc::Date => ck::enc_i64(out, d.value() as i32 as i64, o),
            Enc::Time | Enc::Timestamp => ck::enc_i64(out, d.value() as i64, o),
            Enc::Interval => {
                let iv = &*(d.cast_mut_ptr::<pg_sys::Interval>());
                let days = iv.month as i128 * 30 + iv.day as i128;
                ck::enc_i128(out, days * USECS_PER_DAY + iv.time as i128, o)
            }
            Enc::OpaqueVarlena => ck::enc_opaque(out, varlena_bytes(d), o),
            Enc::IncludedRaw => {
                if c.typbyval {
                    let v = d.value().to_ne_bytes();
                    ck::enc_opaque(out, &v[..c.typlen as usize], o)
                } else if c.typlen > 0 {
                    ck::enc_opaque(out, std::slice::from_raw_parts(d.cast_mut_ptr::<u8>(), c.typlen as usize), o)
                } else if c.typlen == -1 {
                    ck::enc_opaque(out, varlena_bytes(d), o)
                } else {
                    let s = std::ffi::CStr::from_ptr(d.cast_mut_ptr());
                    ck::enc_opaque(out, s.to_bytes(), o)
                }
            }
        }
    }

    /// Encodes a full index tuple (key and INCLUDE columns).
    pub unsafe fn encode_tuple(&self, values: *const pg_sys::Datum, isnull: *const bool, out: &mut Vec<u8>) {
        out.clear();
        for i in 0..self.natts {
            self.encode_col(i, *values.add(i), *isnull.add(i), out);
        }
        if out.len() > MAX_KEY_BYTES {
            crate::raise(PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED, format!("index row size {} exceeds pg_hybrid maximum {MAX_KEY_BYTES}", out.len()), "Values larger than a third of a page cannot be indexed. Consider an index of an MD5 hash of the value.");
        }
    }

    /// Calls the opfamily comparison proc on two raw opaque values.
    pub fn opaque_cmp(&self, col: usize, a: &[u8], b: &[u8]) -> Ordering {
        let c = &self.cols[col];
        if c.enc != Enc::OpaqueVarlena {
            return a.cmp(b);
        }
        unsafe {
            let mut f = c.cmp_finfo.borrow_mut();
            let finfo = lookup_once(&mut f, c.cmp_proc);
            let da = make_varlena(a);
            let db = make_varlena(b);
            let r = pg_sys::FunctionCall2Coll(&mut **finfo, c.collation, da, db);
            pg_sys::pfree(da.cast_mut_ptr());
            pg_sys::pfree(db.cast_mut_ptr());
            (r.value() as i32).cmp(&0)
        }
    }

    /// Index order of two stored keys.
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        if self.memcmp {
            return ck::bytes_cmp(a, b);
        }
        self.schema.compare(a, b, &mut |col, x, y| self.opaque_cmp(col, x, y))
    }

    /// A stored key against a bound holding its first k columns.
    pub fn compare_prefix(&self, key: &[u8], bound: &[u8]) -> Ordering {
        self.schema.compare_prefix(key, bound, &mut |col, x, y| self.opaque_cmp(col, x, y))
    }

    /// Orders two keys on their key columns only (ignores INCLUDE columns).
    pub fn compare_keycols(&self, a: &[u8], b: &[u8]) -> Ordering {
        if self.memcmp && self.nkeyatts == self.natts {
            // Every column is a key column, in byte order: as `compare`.
            return ck::bytes_cmp(a, b);
        }
        self.schema.compare_first(a, b, self.nkeyatts, &mut |col, x, y| self.opaque_cmp(col, x, y))
    }

    /// The key-column part of a stored key.
    pub fn keycols<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        if self.nkeyatts == self.natts {
            return key;
        }
        self.schema.truncate(key, self.nkeyatts).unwrap_or(key)
    }

    /// Hash of the key columns used for the Bloom filter and unique stripes;
    /// None when equal values may have different bytes.
    pub fn key_hash(&self, key: &[u8]) -> Option<u64> {
        if !self.hashable {
            return None;
        }
        Some(pg_hybrid_core::bloom::key_hash(self.keycols(key)))
    }

    /// A hash of the key columns of `key` (a stored key, or a bound holding
    /// every key column) on which equal keys agree even where their bytes
    /// differ: `key_hash` when the bytes are canonical; otherwise each
    /// opaque column hashed by its type's hash proc under its collation,
    /// the others by their bytes, mixed in column order. None when a
    /// column's type has no hash support.
    pub fn canonical_hash(&self, key: &[u8]) -> Option<u64> {
        if self.hashable {
            return self.key_hash(key);
        }
        let mut h: u64 = 0x243f_6a88_85a3_08d3;
        for (i, c) in self.schema.columns(key).take(self.nkeyatts).enumerate() {
            let c = c.ok()?;
            let col = &self.cols[i];
            let part = if c.null || col.enc != Enc::OpaqueVarlena {
                pg_hybrid_core::bloom::key_hash(c.encoded)
            } else {
                self.type_hash(i, c.payload)? as u64
            };
            h = splitmix(h ^ part);
        }
        Some(h)
    }

    /// The type's hash of a raw opaque value of key column `col`.
    fn type_hash(&self, col: usize, raw: &[u8]) -> Option<u32> {
        let c = &self.cols[col];
        if c.hash_proc == pg_sys::InvalidOid {
            return None;
        }
        unsafe {
            let mut f = c.hash_finfo.borrow_mut();
            let finfo = lookup_once(&mut f, c.hash_proc);
            let d = make_varlena(raw);
            let r = pg_sys::FunctionCall1Coll(&mut **finfo, c.collation, d);
            pg_sys::pfree(d.cast_mut_ptr());
            Some(r.value() as u32)
        }
    }

    /// Whether any key column of `key` is NULL.
    pub fn has_null_keycol(&self, key: &[u8]) -> bool {
        self.schema.columns(key).take(self.nkeyatts).any(|c| c.map(|c| c.null).unwrap_or(false))
    }

    /// Rebuilds datums from a stored key for index-only scans. Non-returnable
    /// columns come back NULL; the planner never asks for them.
    pub unsafe fn decode(&self, key: &[u8], values: &mut [pg_sys::Datum], isnull: &mut [bool]) {
        for (i, col) in self.schema.columns(key).enumerate().take(self.natts) {
            let Ok(col) = col else {
                pgrx::ereport!(ERROR, PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, "malformed key in pg_hybrid index");
            };
            let c = &self.cols[i];
            if col.null || !c.returnable {
                values[i] = pg_sys::Datum::from(0usize);
                isnull[i] = true;
                continue;
            }
            isnull[i] = false;
            let enc = col.encoded;
            let bad = || -> ! {
                pgrx::ereport!(ERROR, PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, "malformed key column in pg_hybrid index");
            };
            values[i] = match c.enc {
                Enc::Int2 | Enc::Int4 | Enc::Int8 | Enc::Date | Enc::Time | Enc::Timestamp => {
                    let v = ck::dec_i64(enc, c.order).ok().and_then(|x| x.0).unwrap_or_else(|| bad());
                    match c.enc {
                        Enc::Int2 => pg_sys::Datum::from(v as i16),
                        Enc::Int4 | Enc::Date => pg_sys::Datum::from(v as i32),
                        _ => pg_sys::Datum::from(v),
                    }
                }
                Enc::Bool => {
                    let v = ck::dec_bool(enc, c.order).ok().and_then(|x| x.0).unwrap_or_else(|| bad());
                    pg_sys::Datum::from(v)
                }
                Enc::Bytes => {
                    let v = ck::dec_bytes(enc, c.order).ok().and_then(|x| x.0).unwrap_or_else(|| bad());
                    make_varlena(&v)
                }
                Enc::Uuid => {
                    let v = ck::dec_fixed(enc, 16, c.order).ok().and_then(|x| x.0).unwrap_or_else(|| bad());
                    let p = pg_sys::palloc(16) as *mut u8;
                    std::ptr::copy_nonoverlapping(v.as_ptr(), p, 16);
                    pg_sys::Datum::from(p)
                }
                Enc::OpaqueVarlena => make_varlena(col.payload),
                Enc::IncludedRaw => {
                    let raw = col.payload;
                    if c.typbyval {
                        let mut b = [0u8; 8];
                        b[..raw.len().min(8)].copy_from_slice(&raw[..raw.len().min(8)]);
                        pg_sys::Datum::from(usize::from_ne_bytes(b))
                    } else if c.typlen == -1 {
                        make_varlena(raw)
                    } else {
                        let extra = if c.typlen == -2 { 1 } else { 0 };
                        let p = pg_sys::palloc0(raw.len() + extra) as *mut u8;
                        std::ptr::copy_nonoverlapping(raw.as_ptr(), p, raw.len());
                        pg_sys::Datum::from(p)
                    }
                }
                Enc::Float4 | Enc::Float8 | Enc::Interval => unreachable!(),
            };
        }
    }
}
