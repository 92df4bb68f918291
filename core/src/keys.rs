//! Order-preserving ("normalized") index keys.
//!
//! A key is the concatenation of its columns; each column is one marker byte
//! followed by a payload. For every type except `Opaque`, the bytes are chosen
//! so that `memcmp` of two encoded keys gives PostgreSQL's btree order,
//! including ASC/DESC and NULLS FIRST/LAST. That lets the hot paths (node
//! binary search, merges, Bloom hashing) work on plain bytes without calling
//! back into PostgreSQL.
//!
//! Every column encoding is prefix-free: no encoded value is a proper prefix
//! of another. Two things depend on it: a DESC column is encoded by inverting
//! the payload bytes, which reverses memcmp only when the first difference
//! falls inside both strings; and concatenated columns stay comparable, because
//! the first differing byte of two keys always lies in their first differing
//! column.
//!
//! `Opaque` columns (numeric, text under a non-C collation) keep their raw
//! bytes behind a length prefix and are ordered by a caller-supplied callback;
//! a schema containing one is not memcmp-able and `KeySchema::compare` walks it
//! column by column.

use std::cmp::Ordering;
use std::fmt;

use crate::varint::{get_u64, len_u64, put_u64};

/// Marker of a NULL under NULLS FIRST: below the value marker.
pub const MARK_NULL_FIRST: u8 = 0x00;
/// Marker of a non-NULL value.
pub const MARK_VALUE: u8 = 0x01;
/// Marker of a NULL under NULLS LAST: above the value marker.
pub const MARK_NULL_LAST: u8 = 0x02;

/// PostgreSQL's `INDOPTION_DESC` bit of `pg_index.indoption`.
pub const INDOPTION_DESC: i16 = 0x0001;
/// PostgreSQL's `INDOPTION_NULLS_FIRST` bit of `pg_index.indoption`.
pub const INDOPTION_NULLS_FIRST: i16 = 0x0002;

/// How one index column is physically ordered, as PostgreSQL's indoption.
/// Markers are not inverted for DESC: NULL placement is its own choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ColumnOrder {
    pub desc: bool,
    pub nulls_first: bool,
}

impl ColumnOrder {
    /// PostgreSQL's default for ASC.
    pub const ASC: ColumnOrder = ColumnOrder {
        desc: false,
        nulls_first: false,
    };
    /// PostgreSQL's default for DESC.
    pub const DESC: ColumnOrder = ColumnOrder {
        desc: true,
        nulls_first: true,
    };

    pub const fn from_indoption(opt: i16) -> Self {
        ColumnOrder {
            desc: opt & INDOPTION_DESC != 0,
            nulls_first: opt & INDOPTION_NULLS_FIRST != 0,
        }
    }

    pub const fn null_marker(self) -> u8 {
        if self.nulls_first {
            MARK_NULL_FIRST
        } else {
            MARK_NULL_LAST
        }
    }

    #[inline]
    const fn mask(self) -> u8 {
        if self.desc {
            0xFF
        } else {
            0x00
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The key ends inside a column.
    Truncated,
    /// A marker byte that is neither the value marker nor this column's NULL marker.
    BadMarker(u8),
    /// A byte-string escape other than 00 FF / 00 01.
    BadEscape,
    /// An opaque length that does not fit in memory.
    BadLength,
    /// More columns than the schema has.
    TooManyColumns,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Truncated => write!(f, "index key truncated"),
            KeyError::BadMarker(m) => write!(f, "invalid column marker 0x{m:02x} in index key"),
            KeyError::BadEscape => write!(f, "invalid escape in byte-string index key column"),
            KeyError::BadLength => write!(f, "invalid opaque column length in index key"),
            KeyError::TooManyColumns => write!(f, "index key has more columns than the index"),
        }
    }
}

impl std::error::Error for KeyError {}

pub type KeyResult<T> = Result<T, KeyError>;

// ---------------------------------------------------------------- encoders

#[inline]
fn push_masked(out: &mut Vec<u8>, bytes: &[u8], mask: u8) {
    if mask == 0 {
        out.extend_from_slice(bytes);
    } else {
        out.extend(bytes.iter().map(|b| b ^ mask));
    }
}

pub fn enc_null(out: &mut Vec<u8>, order: ColumnOrder) {
    out.push(order.null_marker());
}

/// Sign flip turns two's complement into offset binary, whose big-endian
/// bytes memcmp in numeric order.
pub fn enc_i64(out: &mut Vec<u8>, v: i64, order: ColumnOrder) {
    out.push(MARK_VALUE);
    let b = ((v as u64) ^ (1 << 63)).to_be_bytes();
    push_masked(out, &b, order.mask());
}

/// PostgreSQL treats -0.0 = 0.0 and all NaNs equal and above +Infinity;
/// canonicalizing first keeps "equal values have equal bytes", which the
/// Bloom filter and memcmp equality rely on.
pub fn canonical_f64(v: f64) -> f64 {
    if v.is_nan() {
        f64::NAN
    } else if v == 0.0 {
        0.0
    } else {
        v
    }
}

#[inline]
fn f64_sortable(v: f64) -> u64 {
    let bits = canonical_f64(v).to_bits();
    // Negative floats order backwards in their magnitude bits, so invert them
    // all; positives only need the sign bit set to land above negatives.
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

#[inline]
fn f64_from_sortable(u: u64) -> f64 {
    let bits = if u >> 63 == 1 { u & !(1 << 63) } else { !u };
    f64::from_bits(bits)
}

pub fn enc_f64(out: &mut Vec<u8>, v: f64, order: ColumnOrder) {
    out.push(MARK_VALUE);
    push_masked(out, &f64_sortable(v).to_be_bytes(), order.mask());
}

pub fn enc_bool(out: &mut Vec<u8>, v: bool, order: ColumnOrder) {
    out.push(MARK_VALUE);
    out.push((v as u8) ^ order.mask());
}

/// 0x00 becomes 00 FF and the string ends with 00 01: the terminator sorts
/// below every continuation, so a string sorts before its extensions, and it
/// cannot occur inside the body, so the encoding is prefix-free.
pub fn enc_bytes(out: &mut Vec<u8>, v: &[u8], order: ColumnOrder) {
    out.push(MARK_VALUE);
    let mask = order.mask();
    out.reserve(v.len() + 2);
    let mut rest = v;
    while let Some(z) = rest.iter().position(|&b| b == 0) {
        push_masked(out, &rest[..z], mask);
        out.push(mask);
        out.push(0xFF ^ mask);
        rest = &rest[z + 1..];
    }
    push_masked(out, rest, mask);
    out.push(mask);
    out.push(0x01 ^ mask);
}

/// Fixed-width values that already memcmp in order (uuid).
pub fn enc_fixed(out: &mut Vec<u8>, v: &[u8], order: ColumnOrder) {
    out.push(MARK_VALUE);
    push_masked(out, v, order.mask());
}

/// For interval, whose order is that of its 128-bit span.
pub fn enc_i128(out: &mut Vec<u8>, v: i128, order: ColumnOrder) {
    out.push(MARK_VALUE);
    let b = ((v as u128) ^ (1 << 127)).to_be_bytes();
    push_masked(out, &b, order.mask());
}

/// Raw bytes of a type ordered by a callback. Not inverted for DESC: the
/// callback needs the original bytes and `KeySchema::compare` negates its
/// result instead.
pub fn enc_opaque(out: &mut Vec<u8>, raw: &[u8], _order: ColumnOrder) {
    out.push(MARK_VALUE);
    put_u64(out, raw.len() as u64);
    out.extend_from_slice(raw);
}

/// Bytes `enc_opaque` appends for `raw_len` raw bytes.
pub fn opaque_encoded_len(raw_len: usize) -> usize {
    1 + len_u64(raw_len as u64) + raw_len
}

// ---------------------------------------------------------------- decoders

/// Reads the marker: Ok(true) for a value, Ok(false) for this column's NULL.
#[inline]
fn marker(buf: &[u8], order: ColumnOrder) -> KeyResult<bool> {
    match buf.first() {
        None => Err(KeyError::Truncated),
        Some(&MARK_VALUE) => Ok(true),
        Some(&m) if m == order.null_marker() => Ok(false),
        Some(&m) => Err(KeyError::BadMarker(m)),
    }
}

#[inline]
fn fixed_payload<const N: usize>(buf: &[u8], order: ColumnOrder) -> KeyResult<[u8; N]> {
    let src = buf.get(1..1 + N).ok_or(KeyError::Truncated)?;
    let mut b = [0u8; N];
    let mask = order.mask();
    for (d, s) in b.iter_mut().zip(src) {
        *d = s ^ mask;
    }
    Ok(b)
}

pub fn dec_i64(buf: &[u8], order: ColumnOrder) -> KeyResult<(Option<i64>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let b = fixed_payload::<8>(buf, order)?;
    Ok((Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64), 9))
}

pub fn dec_f64(buf: &[u8], order: ColumnOrder) -> KeyResult<(Option<f64>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let b = fixed_payload::<8>(buf, order)?;
    Ok((Some(f64_from_sortable(u64::from_be_bytes(b))), 9))
}

pub fn dec_bool(buf: &[u8], order: ColumnOrder) -> KeyResult<(Option<bool>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let b = fixed_payload::<1>(buf, order)?;
    match b[0] {
        0 => Ok((Some(false), 2)),
        1 => Ok((Some(true), 2)),
        _ => Err(KeyError::BadEscape),
    }
}

pub fn dec_i128(buf: &[u8], order: ColumnOrder) -> KeyResult<(Option<i128>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let b = fixed_payload::<16>(buf, order)?;
    Ok((Some((u128::from_be_bytes(b) ^ (1 << 127)) as i128), 17))
}

pub fn dec_fixed(
    buf: &[u8],
    len: usize,
    order: ColumnOrder,
) -> KeyResult<(Option<Vec<u8>>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let end = len.checked_add(1).ok_or(KeyError::BadLength)?;
    let src = buf.get(1..end).ok_or(KeyError::Truncated)?;
    let mask = order.mask();
    Ok((Some(src.iter().map(|b| b ^ mask).collect()), end))
}

/// Length of a byte-string payload (escapes and terminator included),
/// starting after the marker.
fn bytes_payload_len(p: &[u8], mask: u8) -> KeyResult<usize> {
    let mut i = 0;
    loop {
        // The only byte that can end or escape is the (masked) zero.
        let z = p[i..]
            .iter()
            .position(|&b| b == mask)
            .ok_or(KeyError::Truncated)?;
        i += z;
        match p.get(i + 1).map(|b| b ^ mask) {
            None => return Err(KeyError::Truncated),
            Some(0x01) => return Ok(i + 2),
            Some(0xFF) => i += 2,
            Some(_) => return Err(KeyError::BadEscape),
        }
    }
}

pub fn dec_bytes(buf: &[u8], order: ColumnOrder) -> KeyResult<(Option<Vec<u8>>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let mask = order.mask();
    let p = &buf[1..];
    let n = bytes_payload_len(p, mask)?;
    let mut v = Vec::with_capacity(n - 2);
    let mut i = 0;
    while i < n - 2 {
        let b = p[i] ^ mask;
        v.push(b);
        // Validated above: a zero here is always the 00 FF escape.
        i += if b == 0 { 2 } else { 1 };
    }
    Ok((Some(v), 1 + n))
}

/// Borrowed raw bytes of an opaque column.
pub fn dec_opaque(buf: &[u8], order: ColumnOrder) -> KeyResult<(Option<&[u8]>, usize)> {
    if !marker(buf, order)? {
        return Ok((None, 1));
    }
    let (len, n) = get_u64(&buf[1..]).ok_or(KeyError::Truncated)?;
    let len = usize::try_from(len).map_err(|_| KeyError::BadLength)?;
    let start = 1 + n;
    let end = start.checked_add(len).ok_or(KeyError::BadLength)?;
    let raw = buf.get(start..end).ok_or(KeyError::Truncated)?;
    Ok((Some(raw), end))
}

// ---------------------------------------------------------------- schema

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnKind {
    /// int2/int4/int8, date, time, timestamp, timestamptz (`enc_i64`).
    Int64,
    /// float4/float8 (`enc_f64`).
    Float64,
    Bool,
    /// bytea, text/varchar under C collation (`enc_bytes`).
    Bytes,
    /// Fixed-width memcmp-ordered bytes, e.g. uuid = Fixed(16) (`enc_fixed`).
    Fixed(usize),
    /// interval span (`enc_i128`).
    Int128,
    /// Callback-ordered raw bytes (`enc_opaque`).
    Opaque,
}

/// One column of an encoded key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnSlice<'a> {
    pub null: bool,
    /// Bytes after the marker: for `Opaque` the raw bytes without the length
    /// prefix; for other kinds the encoded payload as stored (inverted when
    /// DESC). Empty for NULL.
    pub payload: &'a [u8],
    /// The whole column encoding, marker included.
    pub encoded: &'a [u8],
}

/// Length of the column starting at `buf[0]`.
fn column_len(kind: ColumnKind, order: ColumnOrder, buf: &[u8]) -> KeyResult<usize> {
    if !marker(buf, order)? {
        return Ok(1);
    }
    let n = match kind {
        ColumnKind::Int64 | ColumnKind::Float64 => 9,
        ColumnKind::Bool => 2,
        ColumnKind::Int128 => 17,
        ColumnKind::Fixed(w) => w.checked_add(1).ok_or(KeyError::BadLength)?,
        ColumnKind::Bytes => 1 + bytes_payload_len(&buf[1..], order.mask())?,
        ColumnKind::Opaque => return dec_opaque(buf, order).map(|(_, n)| n),
    };
    if buf.len() < n {
        return Err(KeyError::Truncated);
    }
    Ok(n)
}

/// Orders the raw bytes of two non-NULL values of Opaque column `col`,
/// ascending (the type's btree comparison support function).
pub type OpaqueCmp<'a> = dyn FnMut(usize, &[u8], &[u8]) -> Ordering + 'a;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KeySchema {
    pub cols: Vec<(ColumnKind, ColumnOrder)>,
}

/// Walks the columns of a key (or of a bound with fewer columns) without
/// allocating.
pub struct Columns<'s, 'k> {
    schema: &'s KeySchema,
    key: &'k [u8],
    pos: usize,
    col: usize,
}

impl<'s, 'k> Iterator for Columns<'s, 'k> {
    type Item = KeyResult<ColumnSlice<'k>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.key.len() {
            return None;
        }
        let Some(&(kind, order)) = self.schema.cols.get(self.col) else {
            self.pos = self.key.len();
            return Some(Err(KeyError::TooManyColumns));
        };
        let rest = &self.key[self.pos..];
        let n = match column_len(kind, order, rest) {
            Ok(n) => n,
            Err(e) => {
                self.pos = self.key.len();
                return Some(Err(e));
            }
        };
        let encoded = &rest[..n];
        let null = encoded[0] != MARK_VALUE;
        let payload = if null {
            &encoded[..0]
        } else if kind == ColumnKind::Opaque {
            match dec_opaque(encoded, order) {
                Ok((Some(raw), _)) => raw,
                _ => unreachable!("column_len validated the opaque column"),
            }
        } else {
            &encoded[1..]
        };
        self.pos += n;
        self.col += 1;
        Some(Ok(ColumnSlice {
            null,
            payload,
            encoded,
        }))
    }
}

impl KeySchema {
    pub fn new(cols: Vec<(ColumnKind, ColumnOrder)>) -> Self {
        KeySchema { cols }
    }

    pub fn ncols(&self) -> usize {
        self.cols.len()
    }

    /// True when whole-key memcmp is the index order.
    pub fn is_memcmp(&self) -> bool {
        self.cols.iter().all(|(k, _)| *k != ColumnKind::Opaque)
    }

    pub fn columns<'s, 'k>(&'s self, key: &'k [u8]) -> Columns<'s, 'k> {
        Columns {
            schema: self,
            key,
            pos: 0,
            col: 0,
        }
    }

    /// The columns present in `key` (all of them for a full key, the first k
    /// for a prefix bound).
    pub fn split<'k>(&self, key: &'k [u8]) -> KeyResult<Vec<ColumnSlice<'k>>> {
        self.columns(key).collect()
    }

    /// Byte length of the first `k` columns of `key`.
    pub fn prefix_len(&self, key: &[u8], k: usize) -> KeyResult<usize> {
        let mut pos = 0;
        for col in 0..k {
            if pos == key.len() {
                return Err(KeyError::Truncated);
            }
            let (kind, order) = *self.cols.get(col).ok_or(KeyError::TooManyColumns)?;
            pos += column_len(kind, order, &key[pos..])?;
        }
        Ok(pos)
    }

    /// The first `k` columns of `key`, itself a valid key prefix / bound.
    pub fn truncate<'k>(&self, key: &'k [u8], k: usize) -> KeyResult<&'k [u8]> {
        Ok(&key[..self.prefix_len(key, k)?])
    }

    /// Index order of two full keys. `opaque_cmp(col, a_raw, b_raw)` orders
    /// the raw bytes of non-NULL Opaque columns ascending; DESC and NULL
    /// placement are applied here. Malformed keys never panic: from the first
    /// column that fails to parse, the remaining bytes are memcmp'd, which is
    /// at least a consistent total order.
    pub fn compare(&self, a: &[u8], b: &[u8], opaque_cmp: &mut OpaqueCmp) -> Ordering {
        if self.is_memcmp() {
            return bytes_cmp(a, b);
        }
        self.compare_cols(a, b, usize::MAX, false, opaque_cmp)
    }

    /// Orders a stored key against a search bound holding its first k columns
    /// (k may be 0 or all): Equal when the key starts with a value equal to
    /// the bound.
    pub fn compare_prefix(&self, key: &[u8], bound: &[u8], opaque_cmp: &mut OpaqueCmp) -> Ordering {
        if self.is_memcmp() {
            // Prefix-free columns: a full key can differ from a bound only
            // inside the bound's columns, so the bound's length is enough.
            let m = bound.len().min(key.len());
            return bytes_cmp(&key[..m], &bound[..m]).then(if key.len() < bound.len() {
                Ordering::Less
            } else {
                Ordering::Equal
            });
        }
        self.compare_cols(key, bound, usize::MAX, true, opaque_cmp)
    }

    /// Orders two keys on their first `k` columns only.
    pub fn compare_first(
        &self,
        a: &[u8],
        b: &[u8],
        k: usize,
        opaque_cmp: &mut OpaqueCmp,
    ) -> Ordering {
        self.compare_cols(a, b, k, false, opaque_cmp)
    }

    fn compare_cols(
        &self,
        a: &[u8],
        b: &[u8],
        max_cols: usize,
        b_is_bound: bool,
        opaque_cmp: &mut OpaqueCmp,
    ) -> Ordering {
        let (mut pa, mut pb) = (0usize, 0usize);
        for (col, &(kind, order)) in self.cols.iter().enumerate().take(max_cols) {
            match (pa == a.len(), pb == b.len()) {
                (_, true) if b_is_bound => return Ordering::Equal,
                (true, true) => return Ordering::Equal,
                (true, false) => return Ordering::Less,
                (false, true) => return Ordering::Greater,
                (false, false) => {}
            }
            let (ra, rb) = (&a[pa..], &b[pb..]);
            let (la, lb) = match (column_len(kind, order, ra), column_len(kind, order, rb)) {
                (Ok(la), Ok(lb)) => (la, lb),
                _ => return ra.cmp(rb),
            };
            let c = if kind != ColumnKind::Opaque {
                ra[..la].cmp(&rb[..lb])
            } else if ra[0] != rb[0] || ra[0] != MARK_VALUE {
                ra[0].cmp(&rb[0])
            } else {
                let xa = dec_opaque(ra, order).ok().and_then(|x| x.0).unwrap_or(&[]);
                let xb = dec_opaque(rb, order).ok().and_then(|x| x.0).unwrap_or(&[]);
                let c = opaque_cmp(col, xa, xb);
                if order.desc {
                    c.reverse()
                } else {
                    c
                }
            };
            if c != Ordering::Equal {
                return c;
            }
            pa += la;
            pb += lb;
        }
        if max_cols < self.cols.len() || b_is_bound {
            return Ordering::Equal;
        }
        // Past the schema's columns only garbage can remain; order it bytewise.
        a[pa..].cmp(&b[pb..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Val {
        Null,
        I(i64),
        F(f64),
        B(bool),
        S(Vec<u8>),
        U([u8; 16]),
        W(i128),
        /// Ordered by the test's callback: length first, then bytes reversed,
        /// deliberately unlike memcmp.
        O(Vec<u8>),
    }

    fn opaque_order(a: &[u8], b: &[u8]) -> Ordering {
        a.len()
            .cmp(&b.len())
            .then_with(|| a.iter().rev().cmp(b.iter().rev()))
    }

    fn f64_order(a: f64, b: f64) -> Ordering {
        // PostgreSQL float8_cmp: NaN equals NaN and is above everything.
        match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => a.partial_cmp(&b).unwrap(),
        }
    }

    /// The order PostgreSQL gives two values of the same kind.
    fn natural(a: &Val, b: &Val, o: ColumnOrder) -> Ordering {
        let c = match (a, b) {
            (Val::Null, Val::Null) => return Ordering::Equal,
            (Val::Null, _) => {
                return if o.nulls_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (_, Val::Null) => {
                return if o.nulls_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            (Val::I(x), Val::I(y)) => x.cmp(y),
            (Val::F(x), Val::F(y)) => f64_order(*x, *y),
            (Val::B(x), Val::B(y)) => x.cmp(y),
            (Val::S(x), Val::S(y)) => x.cmp(y),
            (Val::U(x), Val::U(y)) => x.cmp(y),
            (Val::W(x), Val::W(y)) => x.cmp(y),
            (Val::O(x), Val::O(y)) => opaque_order(x, y),
            _ => panic!("kind mismatch"),
        };
        if o.desc {
            c.reverse()
        } else {
            c
        }
    }

    fn enc(out: &mut Vec<u8>, v: &Val, o: ColumnOrder) {
        match v {
            Val::Null => enc_null(out, o),
            Val::I(x) => enc_i64(out, *x, o),
            Val::F(x) => enc_f64(out, *x, o),
            Val::B(x) => enc_bool(out, *x, o),
            Val::S(x) => enc_bytes(out, x, o),
            Val::U(x) => enc_fixed(out, x, o),
            Val::W(x) => enc_i128(out, *x, o),
            Val::O(x) => enc_opaque(out, x, o),
        }
    }

    /// Decodes one column and checks it round-trips to `v`.
    fn dec_check(buf: &[u8], kind: ColumnKind, v: &Val, o: ColumnOrder) -> usize {
        let (same, n) = match (kind, v) {
            (ColumnKind::Int64, Val::I(x)) => {
                dec_i64(buf, o).map(|(d, n)| (d == Some(*x), n)).unwrap()
            }
            (ColumnKind::Float64, Val::F(x)) => dec_f64(buf, o)
                .map(|(d, n)| (d.map(f64::to_bits) == Some(canonical_f64(*x).to_bits()), n))
                .unwrap(),
            (ColumnKind::Bool, Val::B(x)) => {
                dec_bool(buf, o).map(|(d, n)| (d == Some(*x), n)).unwrap()
            }
            (ColumnKind::Bytes, Val::S(x)) => dec_bytes(buf, o)
                .map(|(d, n)| (d.as_deref() == Some(&x[..]), n))
                .unwrap(),
            (ColumnKind::Fixed(w), Val::U(x)) => dec_fixed(buf, w, o)
                .map(|(d, n)| (d.as_deref() == Some(&x[..]), n))
                .unwrap(),
            (ColumnKind::Int128, Val::W(x)) => {
                dec_i128(buf, o).map(|(d, n)| (d == Some(*x), n)).unwrap()
            }
            (ColumnKind::Opaque, Val::O(x)) => dec_opaque(buf, o)
                .map(|(d, n)| (d == Some(&x[..]), n))
                .unwrap(),
            (k, Val::Null) => {
                let (isnull, n) = match k {
                    ColumnKind::Int64 => dec_i64(buf, o).map(|(d, n)| (d.is_none(), n)),
                    ColumnKind::Float64 => dec_f64(buf, o).map(|(d, n)| (d.is_none(), n)),
                    ColumnKind::Bool => dec_bool(buf, o).map(|(d, n)| (d.is_none(), n)),
                    ColumnKind::Bytes => dec_bytes(buf, o).map(|(d, n)| (d.is_none(), n)),
                    ColumnKind::Fixed(w) => dec_fixed(buf, w, o).map(|(d, n)| (d.is_none(), n)),
                    ColumnKind::Int128 => dec_i128(buf, o).map(|(d, n)| (d.is_none(), n)),
                    ColumnKind::Opaque => dec_opaque(buf, o).map(|(d, n)| (d.is_none(), n)),
                }
                .unwrap();
                (isnull, n)
            }
            _ => panic!("kind mismatch"),
        };
        assert!(same, "round trip of {v:?} under {o:?}");
        n
    }

    fn arb_order() -> impl Strategy<Value = ColumnOrder> {
        (any::<bool>(), any::<bool>())
            .prop_map(|(desc, nulls_first)| ColumnOrder { desc, nulls_first })
    }

    fn arb_f64() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            Just(0.0),
            Just(-0.0),
            Just(f64::NAN),
            Just(-f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MIN_POSITIVE),
            Just(-f64::MIN_POSITIVE),
            (-3i32..3).prop_map(|x| x as f64),
        ]
    }

    fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
        // Small alphabet heavy in 0x00/0x01/0xFF so escapes and prefixes occur.
        prop::collection::vec(
            prop_oneof![
                Just(0u8),
                Just(1u8),
                Just(0xFFu8),
                Just(0xFEu8),
                any::<u8>()
            ],
            0..12,
        )
    }

    /// A value of kind `k`, NULL sometimes.
    fn arb_val(k: u8) -> BoxedStrategy<Val> {
        let v: BoxedStrategy<Val> = match k {
            0 => prop_oneof![any::<i64>(), -3i64..3].prop_map(Val::I).boxed(),
            1 => arb_f64().prop_map(Val::F).boxed(),
            2 => any::<bool>().prop_map(Val::B).boxed(),
            3 => arb_bytes().prop_map(Val::S).boxed(),
            4 => prop_oneof![any::<[u8; 16]>(), Just([0u8; 16]), Just([0xFF; 16])]
                .prop_map(Val::U)
                .boxed(),
            5 => prop_oneof![any::<i128>(), -3i128..3]
                .prop_map(Val::W)
                .boxed(),
            _ => arb_bytes().prop_map(Val::O).boxed(),
        };
        prop_oneof![1 => Just(Val::Null), 6 => v].boxed()
    }

    fn code_kind(c: u8) -> ColumnKind {
        [
            ColumnKind::Int64,
            ColumnKind::Float64,
            ColumnKind::Bool,
            ColumnKind::Bytes,
            ColumnKind::Fixed(16),
            ColumnKind::Int128,
            ColumnKind::Opaque,
        ][c as usize]
    }

    /// Two rows of a random schema. `opaque` allows Opaque columns.
    fn arb_rows(opaque: bool) -> impl Strategy<Value = (KeySchema, Vec<Val>, Vec<Val>)> {
        let nkinds = if opaque { 7u8 } else { 6u8 };
        prop::collection::vec((0..nkinds, arb_order()), 1..5).prop_flat_map(|cols| {
            let schema = KeySchema::new(cols.iter().map(|&(k, o)| (code_kind(k), o)).collect());
            let row = |cols: &Vec<(u8, ColumnOrder)>| {
                cols.iter().map(|&(k, _)| arb_val(k)).collect::<Vec<_>>()
            };
            (Just(schema), row(&cols), row(&cols))
        })
    }

    fn encode_row(schema: &KeySchema, row: &[Val]) -> Vec<u8> {
        let mut out = Vec::new();
        for (v, &(_, o)) in row.iter().zip(&schema.cols) {
            enc(&mut out, v, o);
        }
        out
    }

    fn natural_row(schema: &KeySchema, a: &[Val], b: &[Val]) -> Ordering {
        for ((x, y), &(_, o)) in a.iter().zip(b).zip(&schema.cols) {
            let c = natural(x, y, o);
            if c != Ordering::Equal {
                return c;
            }
        }
        Ordering::Equal
    }

    fn opaque_cb() -> impl FnMut(usize, &[u8], &[u8]) -> Ordering {
        |_, a, b| opaque_order(a, b)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn i64_order(a in prop_oneof![any::<i64>(), -3i64..3], b in prop_oneof![any::<i64>(), -3i64..3],
                     na in any::<bool>(), nb in any::<bool>(), o in arb_order()) {
            let va = if na { Val::Null } else { Val::I(a) };
            let vb = if nb { Val::Null } else { Val::I(b) };
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            enc(&mut ea, &va, o);
            enc(&mut eb, &vb, o);
            prop_assert_eq!(ea.cmp(&eb), natural(&va, &vb, o));
            prop_assert_eq!(dec_check(&ea, ColumnKind::Int64, &va, o), ea.len());
        }

        #[test]
        fn f64_order_and_roundtrip(a in arb_f64(), b in arb_f64(), o in arb_order()) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            enc_f64(&mut ea, a, o);
            enc_f64(&mut eb, b, o);
            prop_assert_eq!(ea.cmp(&eb), natural(&Val::F(a), &Val::F(b), o));
            prop_assert_eq!(dec_check(&ea, ColumnKind::Float64, &Val::F(a), o), 9);
        }

        #[test]
        fn bytes_order_and_roundtrip(a in arb_bytes(), b in arb_bytes(), o in arb_order()) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            enc_bytes(&mut ea, &a, o);
            enc_bytes(&mut eb, &b, o);
            prop_assert_eq!(ea.cmp(&eb), natural(&Val::S(a.clone()), &Val::S(b.clone()), o));
            // Prefix-free: a distinct encoding is never a prefix of another.
            if a != b {
                prop_assert!(!eb.starts_with(&ea) && !ea.starts_with(&eb));
            }
            prop_assert_eq!(dec_check(&ea, ColumnKind::Bytes, &Val::S(a), o), ea.len());
        }

        #[test]
        fn bool_i128_fixed(a in any::<bool>(), b in any::<bool>(), x in any::<i128>(), y in any::<i128>(),
                           u in any::<[u8; 16]>(), w in any::<[u8; 16]>(), o in arb_order()) {
            for (va, vb, k) in [(Val::B(a), Val::B(b), ColumnKind::Bool),
                                (Val::W(x), Val::W(y), ColumnKind::Int128),
                                (Val::U(u), Val::U(w), ColumnKind::Fixed(16))] {
                let (mut ea, mut eb) = (Vec::new(), Vec::new());
                enc(&mut ea, &va, o);
                enc(&mut eb, &vb, o);
                prop_assert_eq!(ea.cmp(&eb), natural(&va, &vb, o));
                prop_assert_eq!(dec_check(&ea, k, &va, o), ea.len());
            }
        }

        #[test]
        fn multi_column_memcmp((schema, a, b) in arb_rows(false)) {
            prop_assert!(schema.is_memcmp());
            let (ea, eb) = (encode_row(&schema, &a), encode_row(&schema, &b));
            let want = natural_row(&schema, &a, &b);
            prop_assert_eq!(ea.cmp(&eb), want);
            prop_assert_eq!(schema.compare(&ea, &eb, &mut opaque_cb()), want);
        }

        #[test]
        fn multi_column_callback((schema, a, b) in arb_rows(true)) {
            let (ea, eb) = (encode_row(&schema, &a), encode_row(&schema, &b));
            prop_assert_eq!(schema.compare(&ea, &eb, &mut opaque_cb()), natural_row(&schema, &a, &b));
            // Round trip and split agree with the encoders, column by column.
            let cols = schema.split(&ea).unwrap();
            prop_assert_eq!(cols.len(), schema.ncols());
            let mut pos = 0;
            for (i, (v, &(k, o))) in a.iter().zip(&schema.cols).enumerate() {
                let n = dec_check(&ea[pos..], k, v, o);
                prop_assert_eq!(cols[i].encoded, &ea[pos..pos + n]);
                prop_assert_eq!(cols[i].null, matches!(v, Val::Null));
                if let Val::O(raw) = v { prop_assert_eq!(cols[i].payload, &raw[..]); }
                pos += n;
            }
            prop_assert_eq!(pos, ea.len());
        }

        #[test]
        fn prefix_compare((schema, a, b) in arb_rows(true), k in 0usize..5) {
            let k = k.min(schema.ncols());
            let (ea, eb) = (encode_row(&schema, &a), encode_row(&schema, &b));
            let bound = schema.truncate(&eb, k).unwrap();
            prop_assert_eq!(bound, &encode_row(&schema, &b[..k])[..]);
            let mut sub = schema.clone();
            sub.cols.truncate(k);
            let want = natural_row(&sub, &a[..k], &b[..k]);
            prop_assert_eq!(schema.compare_prefix(&ea, bound, &mut opaque_cb()), want);
            prop_assert_eq!(schema.compare_first(&ea, &eb, k, &mut opaque_cb()), want);
        }

        #[test]
        fn malformed_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40), (schema, a, _b) in arb_rows(true)) {
            let ea = encode_row(&schema, &a);
            let _ = schema.split(&bytes);
            let _ = schema.prefix_len(&bytes, schema.ncols());
            let _ = schema.compare(&bytes, &ea, &mut opaque_cb());
            let _ = schema.compare_prefix(&ea, &bytes, &mut opaque_cb());
            for o in [ColumnOrder::ASC, ColumnOrder::DESC] {
                let _ = dec_i64(&bytes, o);
                let _ = dec_f64(&bytes, o);
                let _ = dec_bool(&bytes, o);
                let _ = dec_bytes(&bytes, o);
                let _ = dec_fixed(&bytes, 16, o);
                let _ = dec_i128(&bytes, o);
                let _ = dec_opaque(&bytes, o);
            }
            // Every strict prefix of a valid key fails to split as a full key
            // or yields fewer columns.
            for cut in 0..ea.len() {
                if let Ok(cols) = schema.split(&ea[..cut]) {
                    prop_assert!(cols.len() < schema.ncols());
                }
            }
        }
    }

    #[test]
    fn markers_and_canonical_floats() {
        let mut a = Vec::new();
        enc_f64(&mut a, -0.0, ColumnOrder::ASC);
        let mut b = Vec::new();
        enc_f64(&mut b, 0.0, ColumnOrder::ASC);
        assert_eq!(a, b);
        let (mut n1, mut n2) = (Vec::new(), Vec::new());
        enc_f64(&mut n1, f64::NAN, ColumnOrder::ASC);
        enc_f64(&mut n2, -f64::NAN, ColumnOrder::ASC);
        assert_eq!(n1, n2);
        let mut inf = Vec::new();
        enc_f64(&mut inf, f64::INFINITY, ColumnOrder::ASC);
        assert!(n1 > inf);
        assert_eq!(ColumnOrder::from_indoption(3), ColumnOrder::DESC);
        assert_eq!(ColumnOrder::from_indoption(0), ColumnOrder::ASC);
        let mut e = Vec::new();
        enc_bytes(&mut e, b"a\0b", ColumnOrder::ASC);
        assert_eq!(e, [MARK_VALUE, b'a', 0, 0xFF, b'b', 0, 1]);
        assert_eq!(opaque_encoded_len(3), 5);
        assert_eq!(
            dec_bool(&[MARK_VALUE, 7], ColumnOrder::ASC),
            Err(KeyError::BadEscape)
        );
        assert_eq!(
            dec_i64(&[MARK_NULL_FIRST], ColumnOrder::ASC),
            Err(KeyError::BadMarker(0))
        );
        assert_eq!(
            dec_bytes(&[MARK_VALUE, 0, 7], ColumnOrder::ASC),
            Err(KeyError::BadEscape)
        );
        assert_eq!(
            dec_bytes(&[MARK_VALUE, 5], ColumnOrder::ASC),
            Err(KeyError::Truncated)
        );
        let schema = KeySchema::new(vec![(ColumnKind::Int64, ColumnOrder::ASC)]);
        let mut k = Vec::new();
        enc_i64(&mut k, 1, ColumnOrder::ASC);
        enc_i64(&mut k, 2, ColumnOrder::ASC);
        assert_eq!(schema.split(&k), Err(KeyError::TooManyColumns));
    }
}

/// Lexicographic byte order, eight bytes at a time. Keys are short (an
/// encoded int8 is 9 bytes), where a libc memcmp call costs more than the
/// comparison itself; this is the hottest function of every index search.
#[inline]
pub fn bytes_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_be_bytes(a[i..i + 8].try_into().unwrap());
        let y = u64::from_be_bytes(b[i..i + 8].try_into().unwrap());
        if x != y {
            return x.cmp(&y);
        }
        i += 8;
    }
    while i < n {
        if a[i] != b[i] {
            return a[i].cmp(&b[i]);
        }
        i += 1;
    }
    a.len().cmp(&b.len())
}

/// Byte equality of two keys, as `bytes_cmp` (a libc `bcmp` call for a
/// 9-byte key costs more than the comparison).
#[inline]
pub fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bytes_cmp(a, b) == Ordering::Equal
}

/// A key's first eight bytes as one big-endian number, zero-padded when
/// the key is shorter: an abbreviated key for sorts in byte order. Where
/// two heads differ they order their keys as `bytes_cmp` does: the first
/// differing byte is a byte of both keys, or the padding of a key that is
/// a prefix of the other. Equal heads say nothing ("ab" and "ab\0" have
/// the same head), and the sort compares the keys. Comparing two numbers
/// in place saves following each entry to its key's bytes.
#[inline]
pub fn key_head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

#[cfg(test)]
mod bytes_cmp_tests {
    use super::{bytes_cmp, bytes_eq};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn same_as_slice_cmp(a in proptest::collection::vec(any::<u8>(), 0..40), b in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(bytes_cmp(&a, &b), a.cmp(&b));
            prop_assert_eq!(bytes_eq(&a, &b), a == b);
            prop_assert!(bytes_eq(&a, &a.clone()));
            let mut c = a.clone();
            c.extend_from_slice(&b);
            prop_assert_eq!(bytes_cmp(&a, &c), a.as_slice().cmp(c.as_slice()));
        }

        /// Heads that differ order their keys; short keys with zero bytes
        /// and prefixes are the cases to try.
        #[test]
        fn differing_heads_order_their_keys(a in proptest::collection::vec(0u8..3, 0..12), b in proptest::collection::vec(0u8..3, 0..12)) {
            let (ha, hb) = (super::key_head(&a), super::key_head(&b));
            if ha != hb {
                prop_assert_eq!(ha.cmp(&hb), a.cmp(&b));
            }
        }
    }
}
