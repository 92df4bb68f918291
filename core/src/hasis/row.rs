//! Row versions: the 26-byte row header (slot + MVCC fields) shared by the
//! delta part and the column part, the column descriptions, and the
//! row-format payload (null bitmap + values) of delta items and of the
//! compaction record.
//!
//! Values are opaque bytes. A column is fixed-length (exactly `len` bytes
//! per value) or varlena (any length, stored with a u16 length here, since
//! a row must fit a delta block). Alignment does not exist in these
//! formats: the glue copies values into aligned datums when it forms
//! tuples.

use std::cmp::Ordering;

use super::layout::{rd16, rd32, wr16, wr32};
use super::{corrupt, Error, Result};
use crate::tid::Tid;

/// MVCC fields of one row version, as heap's tuple header has them. The
/// core stores and moves them; only the glue interprets them (infomask bits,
/// combo command ids, multixacts in xmax). `ctid` is the successor's TID
/// after an UPDATE (TM_Updated returns it) and the version's own TID
/// otherwise, as in heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mvcc {
    pub xmin: u32,
    pub xmax: u32,
    pub cid: u32,
    pub ctid: Tid,
    pub infomask: u16,
    pub infomask2: u16,
}

/// Bytes of an encoded `Mvcc`.
pub const MVCC_LEN: usize = 22;

impl Mvcc {
    pub fn encode(&self, out: &mut [u8]) {
        wr32(out, 0, self.xmin);
        wr32(out, 4, self.xmax);
        wr32(out, 8, self.cid);
        wr32(out, 12, self.ctid.block);
        wr16(out, 16, self.ctid.offset);
        wr16(out, 18, self.infomask);
        wr16(out, 20, self.infomask2);
    }
    pub fn decode(b: &[u8]) -> Mvcc {
        Mvcc {
            xmin: rd32(b, 0),
            xmax: rd32(b, 4),
            cid: rd32(b, 8),
            ctid: Tid::new(rd32(b, 12), rd16(b, 16)),
            infomask: rd16(b, 18),
            infomask2: rd16(b, 20),
        }
    }
}

/// The header of a row version, wherever it lives.
///
/// ```text
///  0  2  slot       the version's slot (its TID) in the hybrid page
///  2  2  natts      columns stored; later columns are "missing" (ADD COLUMN)
///  4  4  xmin
///  8  4  xmax
/// 12  4  cid
/// 16  4  ctid block
/// 20  2  ctid offset
/// 22  2  infomask
/// 24  2  infomask2
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RowHeader {
    pub slot: u16,
    pub natts: u16,
    pub mvcc: Mvcc,
}

pub const ROW_HEADER: usize = 4 + MVCC_LEN;
/// Offset of the MVCC fields inside a row header (what in-place stamps write).
pub const MVCC_OFF: usize = 4;

impl RowHeader {
    pub fn encode(&self, out: &mut [u8]) {
        wr16(out, 0, self.slot);
        wr16(out, 2, self.natts);
        self.mvcc.encode(&mut out[MVCC_OFF..ROW_HEADER]);
    }
    /// `b` must hold at least `ROW_HEADER` bytes (callers bounds-check).
    pub fn decode(b: &[u8]) -> RowHeader {
        RowHeader { slot: rd16(b, 0), natts: rd16(b, 2), mvcc: Mvcc::decode(&b[MVCC_OFF..ROW_HEADER]) }
    }
}

/// Storage width of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    Fixed(u16),
    Varlena,
}

/// How min/max of a column are computed, from its raw value bytes.
///
/// A kind rather than a comparator callback: compaction redo must recompute
/// min/max without the catalog (no type lookups in the startup process), so
/// the order has to follow from what the WAL record carries. The glue maps
/// types to kinds (int2/4/8, date, timestamp[tz], time -> `SignedInt`; oid,
/// xid -> `UnsignedInt`; float4/8 -> `Float`; uuid, bool, "char" ->
/// `Bytes`); anything else gets `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinMaxOrder {
    None,
    /// Little-endian two's complement, 1/2/4/8 bytes.
    SignedInt,
    /// Little-endian unsigned, 1/2/4/8 bytes.
    UnsignedInt,
    /// Little-endian IEEE 754, 4 or 8 bytes, in PostgreSQL's order: NaN
    /// above everything and equal to itself, -0 equal to +0.
    Float,
    /// memcmp.
    Bytes,
}

/// Longest fixed value that gets min/max.
pub const MINMAX_MAX: usize = 16;

impl MinMaxOrder {
    fn code(self) -> u8 {
        match self {
            MinMaxOrder::None => 0,
            MinMaxOrder::SignedInt => 1,
            MinMaxOrder::UnsignedInt => 2,
            MinMaxOrder::Float => 3,
            MinMaxOrder::Bytes => 4,
        }
    }
    fn from_code(c: u8) -> Option<MinMaxOrder> {
        Some(match c {
            0 => MinMaxOrder::None,
            1 => MinMaxOrder::SignedInt,
            2 => MinMaxOrder::UnsignedInt,
            3 => MinMaxOrder::Float,
            4 => MinMaxOrder::Bytes,
            _ => return None,
        })
    }

    /// A value of an integer order (1 to 8 bytes) as a number; None for
    /// the other orders.
    pub fn integer(self, v: &[u8]) -> Option<i128> {
        if v.is_empty() || v.len() > 8 {
            return None;
        }
        match self {
            MinMaxOrder::SignedInt => Some(le_i64(v) as i128),
            MinMaxOrder::UnsignedInt => Some(le_u64(v) as i128),
            _ => None,
        }
    }

    /// Order of two values of the same valid length.
    pub fn cmp(self, a: &[u8], b: &[u8]) -> Ordering {
        fn float(x: &[u8]) -> f64 {
            match x.len() {
                4 => f32::from_le_bytes([x[0], x[1], x[2], x[3]]) as f64,
                _ => f64::from_le_bytes(x.try_into().unwrap_or([0; 8])),
            }
        }
        match self {
            MinMaxOrder::None | MinMaxOrder::Bytes => a.cmp(b),
            MinMaxOrder::SignedInt => le_i64(a).cmp(&le_i64(b)),
            MinMaxOrder::UnsignedInt => le_u64(a).cmp(&le_u64(b)),
            MinMaxOrder::Float => {
                let (x, y) = (float(a), float(b));
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
                }
            }
        }
    }
}

/// Little-endian unsigned integer of 1 to 8 bytes.
fn le_u64(x: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    buf[..x.len()].copy_from_slice(x);
    u64::from_le_bytes(buf)
}

/// Little-endian two's complement integer of 1 to 8 bytes.
fn le_i64(x: &[u8]) -> i64 {
    let shift = 64 - 8 * x.len() as u32;
    ((le_u64(x) << shift) as i64) >> shift
}

/// One column of the relation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnDesc {
    pub width: Width,
    pub order: MinMaxOrder,
}

/// Bytes of an encoded `ColumnDesc`: kind u8 (1 fixed, 2 varlena), len u16,
/// order u8.
pub const DESC_LEN: usize = 4;

impl ColumnDesc {
    pub const fn fixed(len: u16, order: MinMaxOrder) -> Self {
        ColumnDesc { width: Width::Fixed(len), order }
    }
    pub const fn varlena() -> Self {
        ColumnDesc { width: Width::Varlena, order: MinMaxOrder::None }
    }

    /// Whether the column part keeps min/max for this column.
    pub fn has_minmax(&self) -> bool {
        matches!(self.width, Width::Fixed(n) if (n as usize) <= MINMAX_MAX) && self.order != MinMaxOrder::None
    }

    fn validate(&self) -> Result<()> {
        match (self.width, self.order) {
            (Width::Fixed(0), _) => Err(Error::BadInput("fixed-length column of length 0")),
            (Width::Fixed(n), _) if n as usize > super::delta::MAX_PAYLOAD => {
                Err(Error::BadInput("fixed-length column longer than a delta block"))
            }
            (Width::Fixed(n), MinMaxOrder::SignedInt | MinMaxOrder::UnsignedInt) if ![1, 2, 4, 8].contains(&n) => {
                Err(Error::BadInput("integer order needs 1, 2, 4 or 8 bytes"))
            }
            (Width::Fixed(n), MinMaxOrder::Float) if n != 4 && n != 8 => {
                Err(Error::BadInput("float order needs 4 or 8 bytes"))
            }
            (Width::Varlena, o) if o != MinMaxOrder::None => Err(Error::BadInput("min/max only for fixed-length columns")),
            _ => Ok(()),
        }
    }

    pub fn encode(&self, out: &mut [u8]) {
        let (kind, len) = match self.width {
            Width::Fixed(n) => (1u8, n),
            Width::Varlena => (2u8, 0),
        };
        out[0] = kind;
        wr16(out, 1, len);
        out[3] = self.order.code();
    }

    pub fn decode(b: &[u8]) -> Result<ColumnDesc> {
        let width = match (b[0], rd16(b, 1)) {
            (1, n) => Width::Fixed(n),
            (2, 0) => Width::Varlena,
            _ => return corrupt("bad column description"),
        };
        let order = match MinMaxOrder::from_code(b[3]) {
            Some(o) => o,
            None => return corrupt("bad min/max order in column description"),
        };
        let d = ColumnDesc { width, order };
        d.validate().map_err(|_| Error::Corrupt("bad column description"))?;
        Ok(d)
    }
}

/// The relation's columns, in attribute order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    pub columns: Vec<ColumnDesc>,
}

/// PostgreSQL's MaxHeapAttributeNumber.
pub const MAX_COLUMNS: usize = 1600;

impl Schema {
    pub fn new(columns: Vec<ColumnDesc>) -> Result<Schema> {
        if columns.len() > MAX_COLUMNS {
            return Err(Error::BadInput("more than 1600 columns"));
        }
        for c in &columns {
            c.validate()?;
        }
        Ok(Schema { columns })
    }
    pub fn len(&self) -> usize {
        self.columns.len()
    }
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

/// The values of one row version: `values.len()` is its natts; `None` is
/// NULL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Row {
    pub values: Vec<Option<Vec<u8>>>,
}

impl Row {
    pub fn new(values: Vec<Option<Vec<u8>>>) -> Row {
        Row { values }
    }
}

/// Row-format payload: `ceil(natts/8)` bytes of null bitmap (bit set =
/// NULL, bit i of byte i/8 for column i), then each non-null value in
/// column order: fixed ones as their `len` bytes, varlena ones as a u16
/// length and the bytes.
pub fn encode_payload(schema: &Schema, row: &Row) -> Result<Vec<u8>> {
    let mut w = PayloadWriter::new(schema, row.values.len())?;
    for v in &row.values {
        w.push(v.as_deref())?;
    }
    w.finish()
}

/// Writes a payload value by value (`encode_payload` without a `Row` of
/// owned values: an UPDATE encodes its new version straight from the
/// tuple's datums).
pub struct PayloadWriter<'s> {
    schema: &'s Schema,
    natts: usize,
    /// The column the next `push` is for.
    next: usize,
    out: Vec<u8>,
}

impl<'s> PayloadWriter<'s> {
    pub fn new(schema: &'s Schema, natts: usize) -> Result<PayloadWriter<'s>> {
        if natts > schema.len() {
            return Err(Error::BadInput("row has more values than the schema has columns"));
        }
        Ok(PayloadWriter { schema, natts, next: 0, out: vec![0u8; natts.div_ceil(8)] })
    }

    /// The next column's value, `None` for NULL.
    pub fn push(&mut self, v: Option<&[u8]>) -> Result<()> {
        let i = self.next;
        if i >= self.natts {
            return Err(Error::BadInput("more values than the payload's columns"));
        }
        match v {
            None => self.out[i / 8] |= 1 << (i % 8),
            Some(bytes) => match self.schema.columns[i].width {
                Width::Fixed(n) => {
                    if bytes.len() != n as usize {
                        return Err(Error::BadInput("fixed-length value of the wrong length"));
                    }
                    self.out.extend_from_slice(bytes);
                }
                Width::Varlena => {
                    if bytes.len() > super::delta::MAX_PAYLOAD {
                        return Err(Error::RowTooWide { len: bytes.len(), max: super::delta::MAX_PAYLOAD });
                    }
                    self.out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
                    self.out.extend_from_slice(bytes);
                }
            },
        }
        self.next += 1;
        Ok(())
    }

    pub fn finish(self) -> Result<Vec<u8>> {
        if self.next != self.natts {
            return Err(Error::BadInput("fewer values than the payload's columns"));
        }
        Ok(self.out)
    }
}

/// Decodes a payload of `natts` columns; the bytes must be used exactly.
pub fn decode_payload(schema: &Schema, natts: usize, b: &[u8]) -> Result<Row> {
    let mut values = Vec::with_capacity(natts);
    payload_values(schema, natts, b, |_, v| values.push(v.map(<[u8]>::to_vec)))?;
    Ok(Row { values })
}

/// Walks a payload of `natts` columns without copying: `f(column, value)`
/// for each column in order (`None` for NULL), borrowing the payload's
/// bytes. The bytes must be used exactly.
pub fn payload_values<'b>(schema: &Schema, natts: usize, b: &'b [u8], mut f: impl FnMut(usize, Option<&'b [u8]>)) -> Result<()> {
    if natts > schema.len() {
        return corrupt("row version has more columns than the schema");
    }
    let nb = natts.div_ceil(8);
    if b.len() < nb {
        return corrupt("row payload shorter than its null bitmap");
    }
    if natts % 8 != 0 && nb > 0 && b[nb - 1] >> (natts % 8) != 0 {
        return corrupt("null bitmap has bits past natts");
    }
    let mut pos = nb;
    for (i, d) in schema.columns[..natts].iter().enumerate() {
        if b[i / 8] & (1 << (i % 8)) != 0 {
            f(i, None);
            continue;
        }
        let len = match d.width {
            Width::Fixed(n) => n as usize,
            Width::Varlena => {
                if pos + 2 > b.len() {
                    return corrupt("row payload truncated in a varlena length");
                }
                let n = rd16(b, pos) as usize;
                pos += 2;
                n
            }
        };
        if pos + len > b.len() {
            return corrupt("row payload truncated in a value");
        }
        f(i, Some(&b[pos..pos + len]));
        pos += len;
    }
    if pos != b.len() {
        return corrupt("row payload has trailing bytes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new(vec![
            ColumnDesc::fixed(4, MinMaxOrder::SignedInt),
            ColumnDesc::varlena(),
            ColumnDesc::fixed(8, MinMaxOrder::Float),
            ColumnDesc::fixed(16, MinMaxOrder::Bytes),
        ])
        .unwrap()
    }

    #[test]
    fn header_roundtrip() {
        let h = RowHeader {
            slot: 4069,
            natts: 3,
            mvcc: Mvcc { xmin: 7, xmax: 9, cid: 2, ctid: Tid::new(1 << 31, 291), infomask: 0x0902, infomask2: 3 },
        };
        let mut b = [0u8; ROW_HEADER];
        h.encode(&mut b);
        assert_eq!(RowHeader::decode(&b), h);
        assert_eq!(ROW_HEADER, 26);
    }

    #[test]
    fn payload_roundtrip_nulls_and_natts() {
        let s = schema();
        for row in [
            Row::new(vec![]),
            Row::new(vec![Some(vec![1, 2, 3, 4])]),
            Row::new(vec![None, Some(b"hello".to_vec()), None, Some(vec![9; 16])]),
            Row::new(vec![Some(vec![0; 4]), Some(vec![]), Some(1.5f64.to_le_bytes().to_vec())]),
        ] {
            let p = encode_payload(&s, &row).unwrap();
            assert_eq!(decode_payload(&s, row.values.len(), &p).unwrap(), row);
        }
    }

    #[test]
    fn payload_rejects_bad_rows_and_corrupt_bytes() {
        let s = schema();
        assert!(encode_payload(&s, &Row::new(vec![Some(vec![1, 2, 3])])).is_err());
        assert!(encode_payload(&s, &Row::new(vec![None; 5])).is_err());
        let p = encode_payload(&s, &Row::new(vec![Some(vec![1; 4]), Some(b"xy".to_vec())])).unwrap();
        for cut in 0..p.len() {
            assert!(decode_payload(&s, 2, &p[..cut]).is_err());
        }
        let mut long = p.clone();
        long.push(0);
        assert!(decode_payload(&s, 2, &long).is_err());
        let mut stray = p.clone();
        stray[0] |= 0x80;
        assert!(decode_payload(&s, 2, &stray).is_err());
        assert!(decode_payload(&s, 9, &p).is_err());
    }

    #[test]
    fn payload_writer_counts_its_values() {
        let s = schema();
        let mut w = PayloadWriter::new(&s, 2).unwrap();
        w.push(Some(&[1; 4])).unwrap();
        assert!(PayloadWriter::new(&s, 2).unwrap().finish().is_err(), "too few values");
        w.push(None).unwrap();
        assert!(w.push(None).is_err(), "a value past natts");
        assert_eq!(w.finish().unwrap(), encode_payload(&s, &Row::new(vec![Some(vec![1; 4]), None])).unwrap());
        assert!(PayloadWriter::new(&s, 5).is_err());
    }

    #[test]
    fn desc_validation_and_codec() {
        assert!(Schema::new(vec![ColumnDesc::fixed(0, MinMaxOrder::None)]).is_err());
        assert!(Schema::new(vec![ColumnDesc::fixed(3, MinMaxOrder::SignedInt)]).is_err());
        assert!(Schema::new(vec![ColumnDesc::fixed(2, MinMaxOrder::Float)]).is_err());
        assert!(Schema::new(vec![ColumnDesc { width: Width::Varlena, order: MinMaxOrder::Bytes }]).is_err());
        for d in schema().columns {
            let mut b = [0u8; DESC_LEN];
            d.encode(&mut b);
            assert_eq!(ColumnDesc::decode(&b).unwrap(), d);
        }
        assert!(ColumnDesc::decode(&[3, 0, 0, 0]).is_err());
        assert!(ColumnDesc::decode(&[2, 1, 0, 0]).is_err());
        assert!(ColumnDesc::decode(&[1, 4, 0, 9]).is_err());
    }

    #[test]
    fn minmax_orders() {
        use MinMaxOrder::*;
        assert_eq!(SignedInt.cmp(&(-1i32).to_le_bytes(), &1i32.to_le_bytes()), Ordering::Less);
        assert_eq!(SignedInt.cmp(&[0x80], &[0x7f]), Ordering::Less);
        assert_eq!(UnsignedInt.cmp(&[0x80], &[0x7f]), Ordering::Greater);
        assert_eq!(UnsignedInt.cmp(&256u16.to_le_bytes(), &255u16.to_le_bytes()), Ordering::Greater);
        let nan = f64::NAN.to_le_bytes();
        assert_eq!(Float.cmp(&nan, &f64::INFINITY.to_le_bytes()), Ordering::Greater);
        assert_eq!(Float.cmp(&nan, &nan), Ordering::Equal);
        assert_eq!(Float.cmp(&(-0.0f32).to_le_bytes(), &0.0f32.to_le_bytes()), Ordering::Equal);
        assert_eq!(Float.cmp(&(-2.0f32).to_le_bytes(), &1.0f32.to_le_bytes()), Ordering::Less);
        assert_eq!(Bytes.cmp(&[1, 0], &[0, 9]), Ordering::Greater);
    }
}
