//! The column part of a hybrid page: PAX mini-pages in 4 KB units.
//!
//! The column area is `column_blocks` blocks = twice as many 4 KB units of
//! `UNIT_PAYLOAD` (4072) bytes each (see `layout`). Major compaction lays
//! out, in consecutive units:
//!
//! 1. the **meta mini-page**: row and column counts, and per column its
//!    description, unit range, byte length, null count and min/max. It is
//!    immutable for a page version, so the glue can cache it per
//!    (extent, version) the way the paper caches its metadata region;
//! 2. the **row header mini-page**: one 26-byte row header (slot, natts,
//!    MVCC fields) per row, 156 per unit, never straddling a unit, so an
//!    in-place MVCC change (delete, update, lock, freeze) touches exactly
//!    one block;
//! 3. one **data mini-page per column**, starting on a fresh unit, as many
//!    units as its values need. A value may continue from one unit into the
//!    next (the paper: "we move to the next mini-page and continue").
//!
//! Sizes come from the content, so any column mix fits as long as the total
//! fits the area; compaction (`compact`) moves fewer rows into the column
//! part when it would not. Unused units and blocks stay zero.

use super::layout::{
    rd16, rd32, wr16, wr32, BlockKind, BlockTrailer, Geometry, BLCKSZ, MAX_OFFSET, UNITS_PER_BLOCK, UNIT_PAYLOAD,
};
use crate::tid::Tid;
use super::decimal::{self, Decimal};
use super::row::{ColumnDesc, MinMaxOrder, Mvcc, Row, RowHeader, Schema, Width, DESC_LEN, MAX_COLUMNS, MINMAX_MAX, MVCC_OFF, ROW_HEADER};
use super::{corrupt, Error, Result};
use std::sync::Arc;

/// Row headers per unit (26 bytes each, none straddles a unit).
pub const HEADERS_PER_UNIT: usize = UNIT_PAYLOAD / ROW_HEADER;
/// Fixed bytes of the meta mini-page.
pub const META_FIXED: usize = 12;
/// Bytes per column in the meta mini-page.
pub const META_COL: usize = 48;

/// Byte of the meta mini-page with the part's own flags (format 1: zero).
const META_FLAGS: usize = 10;
/// Row headers are compact (format 2): the slot field holds `slot - r`
/// and a ctid of `SELF_CTID` stands for the version's own TID. A bulk-loaded
/// part's headers are then one repeated 26-byte pattern, which a
/// compressing drive stores almost for free; absolute slots and own TIDs
/// changed in every header and cost it about 9 bytes a row, as much as
/// several columns. In-place stamps write absolute ctids, which read the
/// same in both forms, so they need not know the form.
pub const MF_COMPACT_HEADERS: u16 = 0x0001;

/// The TID of `slot` in the extent starting at `extent_start` (what
/// `SELF_CTID` in a compact row header stands for).
fn own_tid(extent_start: u32, slot: u16) -> Tid {
    Tid::new(extent_start.wrapping_add((slot / MAX_OFFSET) as u32), slot % MAX_OFFSET + 1)
}

/// A compact header's stand-in for the version's own TID: no version has
/// it as its ctid (an invalid block number with an offset beyond every
/// marker PostgreSQL puts into ctids: speculative tokens 0xfffe, rows
/// moved to another partition 0xfffd).
const SELF_CTID: Tid = Tid { block: u32::MAX, offset: u16::MAX };

const F_NULLS: u8 = 0x01;
const F_MINMAX: u8 = 0x02;
const F_DICT: u8 = 0x04;
const F_PACKED: u8 = 0x08;
const F_SHORT_ENDS: u8 = 0x10;
const F_DECIMAL: u8 = 0x20;
/// With PACKED or DECIMAL: the values are `bits` bits a row, back to back
/// (byte 15 holds `bits`, not bytes; format 2).
const F_BITS: u8 = 0x40;

/// Most distinct values a dictionary mini-page holds (its codes are one
/// byte each).
pub const DICT_MAX: usize = 255;
/// Rows of up to this many columns have their value spans found before
/// `values_payload_of` writes them (on the stack), to size its output once.
const PRESIZED_COLUMNS: usize = 64;

/// A row headed for the column part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnRow {
    pub header: RowHeader,
    pub row: Row,
}

/// A column part's minimum and maximum of one column, in the column's
/// own bytes (at most `MINMAX_MAX` each). Held inline: a backend keeps
/// thousands of parsed layouts (`ColumnLayout`), and two small heap
/// allocations per column made parsing and dropping them cost more than
/// the values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinMax {
    len: u8,
    min: [u8; MINMAX_MAX],
    max: [u8; MINMAX_MAX],
}

impl MinMax {
    /// None where the two are not of one length of at most `MINMAX_MAX`.
    pub fn new(min: &[u8], max: &[u8]) -> Option<MinMax> {
        if min.len() != max.len() || min.len() > MINMAX_MAX {
            return None;
        }
        let mut m = MinMax { len: min.len() as u8, min: [0; MINMAX_MAX], max: [0; MINMAX_MAX] };
        m.min[..min.len()].copy_from_slice(min);
        m.max[..max.len()].copy_from_slice(max);
        Some(m)
    }

    pub fn min(&self) -> &[u8] {
        &self.min[..self.len as usize]
    }

    pub fn max(&self) -> &[u8] {
        &self.max[..self.len as usize]
    }

    /// (minimum, maximum).
    pub fn pair(&self) -> (&[u8], &[u8]) {
        (self.min(), self.max())
    }
}

/// Where one column's mini-page is and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnMeta {
    pub desc: ColumnDesc,
    pub first_unit: u16,
    pub units: u16,
    /// Bytes of the mini-page's content (the rest of its units is zero).
    pub len: u32,
    pub null_count: u16,
    /// Null bitmap present (some row is NULL or lacks the column).
    pub has_nulls: bool,
    /// (min, max) over the non-null values, for descriptions that have an
    /// order (`ColumnDesc::has_minmax`) and at least one non-null value.
    pub minmax: Option<MinMax>,
    /// Dictionary-encoded: each row holds a one-byte code into the part's
    /// distinct values (`encoded_len` says when).
    pub dict: bool,
    /// Frame of reference: each row holds `value - min` in this many bytes,
    /// fewer than the type's width (an integer-like column whose values
    /// span a short range, `packed_width`).
    pub packed: Option<u8>,
    /// A plain varlena column's end offsets are u16 (its values' bytes
    /// fit in 64 KB), not u32.
    pub short_ends: bool,
    /// A varlena column whose values are all numerics of one display
    /// scale (`decimal`): each row holds `scaled - lo` in a few bytes.
    pub decimal: Option<DecimalFrame>,
    /// A packed or decimal column's rows take this many bits each, back
    /// to back, instead of whole bytes (`frame_bits`): the bytes a row
    /// (`packed`, `DecimalFrame::width`) are what a row unpacks into.
    pub bits: Option<u8>,
}

/// How a decimal-encoded column part holds its values: each row's
/// `Decimal::scaled - lo` in `width` bytes, all at display scale `dscale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecimalFrame {
    pub dscale: u8,
    pub lo: i64,
    pub hi: i64,
    pub width: u8,
}

impl DecimalFrame {
    /// The numeric bytes of stored bytes `raw` (`width` of them) into `out`;
    /// their length.
    fn value(&self, raw: &[u8], out: &mut [u8; decimal::MAX_LEN]) -> Result<usize> {
        let mut d = [0u8; 8];
        d[..raw.len()].copy_from_slice(raw);
        self.value_at(u64::from_le_bytes(d), out)
    }

    /// The numeric bytes of the value `offset` above the frame's low end
    /// into `out`; their length.
    #[inline]
    fn value_at(&self, offset: u64, out: &mut [u8; decimal::MAX_LEN]) -> Result<usize> {
        if offset > self.hi.wrapping_sub(self.lo) as u64 {
            return corrupt("decimal value past its part's range");
        }
        let scaled = self.lo.wrapping_add(offset as i64);
        decimal::write(Decimal { dscale: self.dscale, scaled }, out).ok_or(Error::Corrupt("decimal value out of range"))
    }
}

/// The decimal shape of a varlena column's values, as rows are added:
/// nothing seen yet, every value a numeric of one scale within a range, or
/// not decimal (a value that is not, or two scales). Adding a value never
/// turns "not" back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DecimalRange {
    Empty,
    Within { dscale: u8, lo: i64, hi: i64 },
    Not,
}

impl DecimalRange {
    fn of(desc: &ColumnDesc) -> DecimalRange {
        match desc.width {
            Width::Varlena => DecimalRange::Empty,
            Width::Fixed(_) => DecimalRange::Not,
        }
    }

    fn add(&mut self, v: &[u8]) {
        let next = match (*self, decimal::parse(v)) {
            (DecimalRange::Not, _) | (_, None) => DecimalRange::Not,
            (DecimalRange::Empty, Some(d)) => DecimalRange::Within { dscale: d.dscale, lo: d.scaled, hi: d.scaled },
            (DecimalRange::Within { dscale, lo, hi }, Some(d)) if d.dscale == dscale => {
                DecimalRange::Within { dscale, lo: lo.min(d.scaled), hi: hi.max(d.scaled) }
            }
            (DecimalRange::Within { .. }, Some(_)) => DecimalRange::Not,
        };
        *self = next;
    }

    /// The frame the values would take: the fewest bytes that hold their
    /// span, at least one.
    fn frame(&self) -> Option<DecimalFrame> {
        match *self {
            DecimalRange::Within { dscale, lo, hi } => {
                let width = crate::varint::fixed_len(hi.wrapping_sub(lo) as u64 as u128) as u8;
                Some(DecimalFrame { dscale, lo, hi, width })
            }
            _ => None,
        }
    }
}

/// How a column's mini-page holds its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Plain,
    /// Plain varlena with u16 end offsets.
    ShortEnds,
    /// With `Some(bits)`, the codes bit by bit.
    Dict(Option<u8>),
    /// Frame of reference, this many bytes a row, or with `Some(bits)`
    /// that many bits.
    Packed(u8, Option<u8>),
    /// Numerics as scaled integers, frame of reference (bits as above).
    Decimal(DecimalFrame, Option<u8>),
}

/// End offset `i` of a table of `w`-byte (2 or 4) end offsets at `at` of `b`.
fn end_at(b: &[u8], at: usize, w: usize, i: usize) -> usize {
    if w == 2 {
        rd16(b, at + 2 * i) as usize
    } else {
        rd32(b, at + 4 * i) as usize
    }
}

/// Bytes of each end offset of a plain varlena column.
fn ends_width(m: &ColumnMeta) -> usize {
    if m.short_ends {
        2
    } else {
        4
    }
}

/// Whether a column may be packed: a fixed integer-like type of 2, 4 or 8
/// bytes (int2/4/8, date, time, timestamp[tz], oid, xid).
fn packable(desc: &ColumnDesc) -> bool {
    matches!(desc.width, Width::Fixed(2 | 4 | 8)) && matches!(desc.order, MinMaxOrder::SignedInt | MinMaxOrder::UnsignedInt)
}

/// Bytes a row takes when a packable column whose values lie in
/// `[lo, hi]` holds `value - lo`: the fewest that hold `hi - lo`, at least
/// one; None when that is not fewer than the type's width.
fn packed_width(desc: &ColumnDesc, range: Option<(i128, i128)>) -> Option<u8> {
    let (lo, hi) = range?;
    let Width::Fixed(n) = desc.width else { return None };
    if !packable(desc) || hi < lo {
        return None;
    }
    let w = crate::varint::fixed_len((hi - lo) as u128);
    (w < n as usize).then_some(w as u8)
}

/// Bits a row of a frame-of-reference column whose values lie `span`
/// apart takes when they are stored bit by bit, where that saves at least
/// two bits a row over whole bytes (`w` of them, `varint::fixed_len`): TPC-H's
/// dates span about 2,500 days (12 bits, not 16), its quantities 50 (6, not
/// 8), discounts 11 (4). A span that fills its bytes but a bit keeps them:
/// a drive compresses repeated whole-byte values (an ascending key's
/// runs), and values cut at bit boundaries hide the repeats from it.
fn frame_bits(span: u128, w: usize) -> Option<u8> {
    let bits = ((128 - span.leading_zeros()) as usize).max(1);
    // At most 56, so that a value and its shift lie within 8 bytes.
    (bits + 2 <= 8 * w && bits <= 56).then_some(bits as u8)
}

/// Bits a dictionary code takes for `n` entries, where bit by bit saves
/// two or more bits over a byte (up to 64 entries): lineitem's return flags
/// (3 values), line statuses (2), ship instructions (4) and modes (7) are
/// random among few values, which a drive's LZ4 barely shortens as bytes.
fn code_bits(n: usize) -> Option<u8> {
    let bits = (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1);
    (bits + 2 <= 8).then_some(bits as u8)
}

/// Content bytes of `nrows` frame-of-reference values of `w` bytes each,
/// or of `bits` bits each.
fn frame_len(nrows: usize, w: usize, bits: Option<u8>) -> usize {
    match bits {
        Some(b) => (nrows * b as usize).div_ceil(8),
        None => nrows * w,
    }
}

/// Appends `vals` (`w`-byte little-endian values, each below 2^bits) to
/// `out`, `bits` bits each, the first value in the lowest bits.
fn put_bits(vals: &[u8], w: usize, bits: usize, out: &mut Vec<u8>) {
    let start = out.len();
    let n = vals.len() / w;
    out.resize(start + (n * bits).div_ceil(8), 0);
    let dst = &mut out[start..];
    for (i, v) in vals.chunks_exact(w).enumerate() {
        let mut a = [0u8; 8];
        a[..w].copy_from_slice(v);
        let x = u64::from_le_bytes(a);
        let at = i * bits;
        let (byte, shift) = (at / 8, at % 8);
        // bits <= 56 and shift <= 7: the value lies within 8 bytes.
        let wide = (x as u128) << shift;
        for k in 0..(shift + bits).div_ceil(8) {
            dst[byte + k] |= (wide >> (8 * k)) as u8;
        }
    }
}

/// The value `bits` bits long that starts `shift` bits into `window`
/// (the bytes from its first one on; at most 8 are read).
fn bits_value(window: &[u8], shift: usize, bits: usize) -> u64 {
    let mut a = [0u8; 8];
    let n = window.len().min(8);
    a[..n].copy_from_slice(&window[..n]);
    (u64::from_le_bytes(a) >> shift) & (u64::MAX >> (64 - bits))
}

/// The `nrows` values of `packed` (`bits` bits each) as `w`-byte
/// little-endian values in `out` (`nrows * w` bytes). A scan spreads out
/// every value of the columns it reads (TPC-H Q6: three columns of 6M
/// rows), so the loop reads each row's 8-byte window in one load where
/// the window lies inside `packed`, with the width a constant.
fn expand_bits(packed: &[u8], w: usize, bits: usize, nrows: usize, out: &mut [u8]) {
    match w {
        1 => expand_bits_w::<1>(packed, bits, nrows, out),
        2 => expand_bits_w::<2>(packed, bits, nrows, out),
        3 => expand_bits_w::<3>(packed, bits, nrows, out),
        4 => expand_bits_w::<4>(packed, bits, nrows, out),
        5 => expand_bits_w::<5>(packed, bits, nrows, out),
        6 => expand_bits_w::<6>(packed, bits, nrows, out),
        _ => expand_bits_w::<7>(packed, bits, nrows, out),
    }
}

fn expand_bits_w<const W: usize>(packed: &[u8], bits: usize, nrows: usize, out: &mut [u8]) {
    let mask = u64::MAX >> (64 - bits);
    // Row r's window starts at byte r * bits / 8; it lies inside `packed`
    // while that byte is at most len - 8.
    let direct = if packed.len() >= 8 { (((packed.len() - 8) * 8 + 7) / bits + 1).min(nrows) } else { 0 };
    for (r, o) in out[..direct * W].chunks_exact_mut(W).enumerate() {
        let at = r * bits;
        let word: [u8; 8] = packed[at / 8..at / 8 + 8].try_into().unwrap_or([0; 8]);
        let x = (u64::from_le_bytes(word) >> (at % 8)) & mask;
        o.copy_from_slice(&x.to_le_bytes()[..W]);
    }
    for r in direct..nrows {
        let at = r * bits;
        let end = (at + bits).div_ceil(8).min(packed.len());
        let x = bits_value(&packed[(at / 8).min(end)..end], at % 8, bits);
        out[r * W..r * W + W].copy_from_slice(&x.to_le_bytes()[..W]);
    }
}

/// Row value `v` of a packed column with minimum `lo`, as its `w` stored bytes.
fn pack_value(order: MinMaxOrder, lo: i128, w: usize, v: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let x = order.integer(v).ok_or(Error::BadInput("packed column value not an integer"))?;
    let d = (x - lo) as u64;
    out.extend_from_slice(&d.to_le_bytes()[..w]);
    Ok(())
}

/// The `n`-byte value of stored bytes `raw` of a packed column with minimum
/// `min` (its `n` bytes): `min + raw`, wrapping in `n` bytes, which is the
/// value for either signedness.
fn unpack_value(min: &[u8], raw: &[u8], out: &mut [u8]) {
    let mut a = [0u8; 8];
    a[..min.len()].copy_from_slice(min);
    let mut d = [0u8; 8];
    d[..raw.len()].copy_from_slice(raw);
    let v = u64::from_le_bytes(a).wrapping_add(u64::from_le_bytes(d));
    out.copy_from_slice(&v.to_le_bytes()[..out.len()]);
}

/// Rows of a packed column, `w` stored bytes each at the front of `s`,
/// unpacked in place into `n`-byte values `min + stored` (wrapping in `n`
/// bytes: `unpack_value`), from the last row back; `s` holds `nrows * n`
/// bytes. Widths are constants in the common cases, so that a row is one
/// load and one store rather than two calls of memcpy.
fn unpack_rows(s: &mut [u8], nrows: usize, w: usize, n: usize, min: u64) {
    match (w, n) {
        (1, 2) => unpack_rows_wn::<1, 2>(s, nrows, min),
        (1, 4) => unpack_rows_wn::<1, 4>(s, nrows, min),
        (2, 4) => unpack_rows_wn::<2, 4>(s, nrows, min),
        (3, 4) => unpack_rows_wn::<3, 4>(s, nrows, min),
        (1, 8) => unpack_rows_wn::<1, 8>(s, nrows, min),
        (2, 8) => unpack_rows_wn::<2, 8>(s, nrows, min),
        (3, 8) => unpack_rows_wn::<3, 8>(s, nrows, min),
        (4, 8) => unpack_rows_wn::<4, 8>(s, nrows, min),
        (5, 8) => unpack_rows_wn::<5, 8>(s, nrows, min),
        (6, 8) => unpack_rows_wn::<6, 8>(s, nrows, min),
        (7, 8) => unpack_rows_wn::<7, 8>(s, nrows, min),
        _ => {
            let min = min.to_le_bytes();
            for r in (0..nrows).rev() {
                let mut raw = [0u8; 8];
                raw[..w].copy_from_slice(&s[r * w..r * w + w]);
                unpack_value(&min[..n], &raw[..w], &mut s[r * n..r * n + n]);
            }
        }
    }
}

fn unpack_rows_wn<const W: usize, const N: usize>(s: &mut [u8], nrows: usize, min: u64) {
    for r in (0..nrows).rev() {
        let mut raw = [0u8; 8];
        raw[..W].copy_from_slice(&s[r * W..r * W + W]);
        let v = min.wrapping_add(u64::from_le_bytes(raw));
        s[r * N..r * N + N].copy_from_slice(&v.to_le_bytes()[..N]);
    }
}

/// Writes a decimal column's rows (`W` stored bytes each in `raw`) as
/// numerics into `out`: row r's end offset (from `data`) at `base + 4 r`,
/// its bytes from `data` on, with a 4-byte varlena header at a multiple of
/// 4 where `aligned`, else as stored (a 1-byte header). `out` has room for
/// `decimal::MAX_LEN + 6` bytes a row past `data`. Returns where the
/// values end.
fn decimal_rows<const W: usize>(frame: &DecimalFrame, raw: &[u8], nulls: Option<&[u8]>, aligned: bool, out: &mut [u8], base: usize, data: usize) -> Result<usize> {
    let mut at = data;
    let mut v = [0u8; decimal::MAX_LEN];
    for (r, stored) in raw.chunks_exact(W).enumerate() {
        if !nulls.is_some_and(|b| b[r / 8] & (1 << (r % 8)) != 0) {
            // The stored bytes read at a constant width (`value` reads any).
            let mut d = [0u8; 8];
            d[..W].copy_from_slice(stored);
            let n = frame.value_at(u64::from_le_bytes(d), &mut v)?;
            if aligned {
                // A 4-byte varlena header in place of the 1-byte one (the
                // numeric's own bytes are the same): the executor's
                // numeric functions take such a value as it lies, where a
                // short one is copied out first (pg_detoast_datum).
                at = at.next_multiple_of(4);
                out[at..at + 4].copy_from_slice(&(((n - 1 + 4) as u32) << 2).to_le_bytes());
                // Whole arrays: a copy of constant size, not a call.
                let body: &mut [u8; decimal::MAX_LEN - 1] = (&mut out[at + 4..at + 3 + decimal::MAX_LEN]).try_into().map_err(|_| Error::Corrupt("decimal row past its room"))?;
                body.copy_from_slice(&v[1..]);
                at += 4 + n - 1;
            } else {
                let body: &mut [u8; decimal::MAX_LEN] = (&mut out[at..at + decimal::MAX_LEN]).try_into().map_err(|_| Error::Corrupt("decimal row past its room"))?;
                body.copy_from_slice(&v);
                at += n;
            }
        }
        out[base + 4 * r..base + 4 * r + 4].copy_from_slice(&((at - data) as u32).to_le_bytes());
    }
    Ok(at)
}

/// `f(i, value)` for each `(i, r)` of `rows` (each below `nrows`): None
/// where `null(r)`, else `value(r)` (`ColumnValues::each_of`).
fn each_row<'s>(rows: impl Iterator<Item = (usize, usize)>, nrows: usize, null: impl Fn(usize) -> bool, mut f: impl FnMut(usize, Option<&'s [u8]>), mut value: impl FnMut(usize) -> Result<&'s [u8]>) -> Result<()> {
    for (i, r) in rows {
        if r >= nrows {
            return Err(Error::BadInput("column row out of range"));
        }
        f(i, if null(r) { None } else { Some(value(r)?) });
    }
    Ok(())
}

/// Sizes of a column part, computed without building it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub ncols: usize,
    pub nrows: usize,
    pub meta_units: usize,
    pub header_units: usize,
    pub columns: Vec<ColumnMeta>,
    pub total_units: usize,
    /// Per column, the distinct values of a dictionary column (None for a
    /// plain one): `build` writes the dictionary from them instead of
    /// tallying the column again.
    dictionaries: Vec<Option<Distinct>>,
}

fn units_for(len: usize) -> usize {
    len.div_ceil(UNIT_PAYLOAD)
}

fn bitmap_len(nrows: usize) -> usize {
    nrows.div_ceil(8)
}

/// A column's distinct non-null values, as long as there are at most
/// `DICT_MAX` of them (then the column can be a dictionary). Counted per
/// value of every row a tally or a compaction sees, so it is a small
/// open-addressing table over one byte arena: no allocation per value, one
/// comparison per lookup as a rule.
#[derive(Clone, Debug)]
struct Distinct {
    /// More than `DICT_MAX`, or not known (a conservative tally).
    over: bool,
    /// The values, back to back, in the order they were first seen.
    arena: Vec<u8>,
    /// (start, len) in `arena` of each value.
    entries: Vec<(u32, u32)>,
    /// `DISTINCT_SLOTS` slots: 0 empty, else an index into `entries` + 1.
    table: Vec<u16>,
}

/// Slots of `Distinct::table`: a power of two above twice `DICT_MAX`.
const DISTINCT_SLOTS: usize = 512;

/// Two tallies are equal when they hold the same set of values.
impl PartialEq for Distinct {
    fn eq(&self, other: &Distinct) -> bool {
        self.over == other.over && self.sorted() == other.sorted()
    }
}
impl Eq for Distinct {}

fn distinct_hash(v: &[u8]) -> usize {
    use std::hash::Hasher;
    let mut h = crate::fast_hash::FastHasher::default();
    h.write(v);
    h.write_usize(v.len());
    // The top bits: the multiplicative hash mixes upwards.
    (h.finish() >> (64 - 9)) as usize
}

impl Distinct {
    fn new() -> Distinct {
        Distinct { over: false, arena: Vec::new(), entries: Vec::new(), table: Vec::new() }
    }

    fn unknown() -> Distinct {
        Distinct { over: true, ..Distinct::new() }
    }

    fn value(&self, i: usize) -> &[u8] {
        let (at, len) = self.entries[i];
        &self.arena[at as usize..(at + len) as usize]
    }

    /// The slot of `v` in the table: its own, or the empty one it would take.
    fn probe(&self, v: &[u8]) -> usize {
        let mut slot = distinct_hash(v);
        loop {
            match self.table[slot] {
                0 => return slot,
                e if self.value(e as usize - 1) == v => return slot,
                _ => slot = (slot + 1) & (DISTINCT_SLOTS - 1),
            }
        }
    }

    fn add(&mut self, v: &[u8]) {
        if self.over {
            return;
        }
        if self.table.is_empty() {
            self.table = vec![0; DISTINCT_SLOTS];
        }
        let slot = self.probe(v);
        if self.table[slot] != 0 {
            return;
        }
        if self.entries.len() == DICT_MAX {
            *self = Distinct::unknown();
            return;
        }
        self.entries.push((self.arena.len() as u32, v.len() as u32));
        self.arena.extend_from_slice(v);
        self.table[slot] = self.entries.len() as u16;
    }

    /// (count, bytes) when a dictionary could hold them.
    fn dictionary(&self) -> Option<(usize, usize)> {
        (!self.over && !self.entries.is_empty()).then(|| (self.entries.len(), self.arena.len()))
    }

    /// The values in byte order: the dictionary's order.
    fn sorted(&self) -> Vec<&[u8]> {
        let mut v: Vec<&[u8]> = (0..self.entries.len()).map(|i| self.value(i)).collect();
        v.sort_unstable();
        v
    }
}

/// Bytes of a column's mini-page content and whether it is a dictionary:
/// the dictionary when the column has at most `DICT_MAX` distinct values
/// (`dictionary`: their count and bytes) and that is shorter than the plain
/// layout (`mini_page_len`). Sizes never shrink as rows are added (both
/// layouts grow), so compaction may bisect on them.
///
/// A varlena column whose values' bytes fit in 64 KB takes u16 end
/// offsets instead of u32 (once they no longer fit, the size jumps up,
/// never down). A packable column whose values lie in `range` may instead be packed
/// (`packed_width`), when that is shorter still. A narrower range never
/// needs more bytes a row, so this size too never shrinks as rows are
/// added. A varlena column whose values are all numerics of one scale
/// (`decimal`) may store them as scaled integers, packed the same way.
fn encoded_len(desc: &ColumnDesc, nrows: usize, nulls: usize, bytes: usize, dictionary: Option<(usize, usize)>, range: Option<(i128, i128)>, decimal: Option<DecimalFrame>) -> (usize, Encoding) {
    let mut best = (mini_page_len(desc, nrows, nulls, bytes), Encoding::Plain);
    let bitmap = if nulls > 0 { bitmap_len(nrows) } else { 0 };
    if desc.width == Width::Varlena && bytes <= u16::MAX as usize {
        best = (bitmap + 2 * nrows + bytes, Encoding::ShortEnds);
    }
    if let Some((n, dict_bytes)) = dictionary.filter(|&(n, _)| n <= DICT_MAX) {
        let ends = match desc.width {
            Width::Fixed(_) => 0,
            Width::Varlena => 4 * n,
        };
        let bits = code_bits(n);
        let dict = bitmap + 2 + frame_len(nrows, 1, bits) + ends + dict_bytes;
        if dict < best.0 {
            best = (dict, Encoding::Dict(bits));
        }
    }
    if let (Some(w), Some((lo, hi))) = (packed_width(desc, range), range) {
        let bits = frame_bits((hi - lo) as u128, w as usize);
        let packed = bitmap + frame_len(nrows, w as usize, bits);
        if packed < best.0 {
            best = (packed, Encoding::Packed(w, bits));
        }
    }
    if let Some(frame) = decimal.filter(|_| desc.width == Width::Varlena) {
        let bits = frame_bits((frame.hi as i128 - frame.lo as i128) as u128, frame.width as usize);
        let scaled = bitmap + frame_len(nrows, frame.width as usize, bits);
        if scaled < best.0 {
            best = (scaled, Encoding::Decimal(frame, bits));
        }
    }
    best
}

fn value<'r>(r: &'r ColumnRow, c: usize) -> Option<&'r [u8]> {
    r.row.values.get(c).and_then(|v| v.as_deref())
}

/// The rows and 4 KB units a column part holding `rows` needs: `plan`
/// without the per-column min/max, which sizes do not depend on.
pub fn units_needed<'a>(schema: &Schema, rows: impl Iterator<Item = &'a ColumnRow>) -> Result<(usize, usize)> {
    let mut tally = SizeTally::new(schema);
    for r in rows {
        tally.add(schema, r)?;
    }
    tally.units(schema)
}

/// What a column part's size depends on, summed over its rows: their
/// count, the widest row, and per column the non-null values and their
/// bytes. Tallies add up, so compaction, which bisects how many offered
/// rows fit, sums the rows once into suffix tallies and sizes each guess
/// from them instead of walking every row and column again per guess.
/// `units` is `plan`'s arithmetic (`mini_page_len`, `units_for`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeTally {
    nrows: usize,
    ncols: usize,
    non_null: Vec<usize>,
    bytes: Vec<usize>,
    distinct: Vec<Distinct>,
    /// (min, max) of a packable column's non-null values.
    range: Vec<Option<(i128, i128)>>,
    /// Whether a varlena column's values are numerics of one scale.
    decimal: Vec<DecimalRange>,
}

/// Widens `range` to hold value `v` of a column described by `desc` (only
/// packable columns are tracked).
fn widen(range: &mut Option<(i128, i128)>, desc: &ColumnDesc, v: &[u8]) {
    if !packable(desc) {
        return;
    }
    if let Some(x) = desc.order.integer(v) {
        *range = Some(match *range {
            None => (x, x),
            Some((lo, hi)) => (lo.min(x), hi.max(x)),
        });
    }
}

impl SizeTally {
    pub fn new(schema: &Schema) -> SizeTally {
        let n = schema.len();
        SizeTally {
            nrows: 0,
            ncols: 0,
            non_null: vec![0; n],
            bytes: vec![0; n],
            distinct: vec![Distinct::new(); n],
            range: vec![None; n],
            decimal: schema.columns.iter().map(DecimalRange::of).collect(),
        }
    }

    /// Counts `r` in (checked against its header and the schema, as `plan`
    /// checks it).
    pub fn add(&mut self, schema: &Schema, r: &ColumnRow) -> Result<()> {
        check_row(schema, r)?;
        self.nrows += 1;
        self.ncols = self.ncols.max(r.row.values.len());
        for (c, v) in r.row.values.iter().enumerate() {
            if let Some(v) = v {
                self.non_null[c] += 1;
                self.bytes[c] += v.len();
                self.distinct[c].add(v);
                widen(&mut self.range[c], &schema.columns[c], v);
                self.decimal[c].add(v);
            }
        }
        Ok(())
    }

    /// The tally of column part `part`'s rows, from its meta (row and null
    /// counts, content lengths) and its dictionaries; no other value is
    /// read. A plain column's distinct values are not known, nor whether a
    /// plain varlena column is decimal: the tally counts it as staying
    /// plain, which may overstate its size, never understate it.
    pub fn of_part(schema: &Schema, part: &ColumnPart) -> Result<SizeTally> {
        let mut t = SizeTally::new(schema);
        t.nrows = part.nrows();
        t.ncols = part.ncols();
        if t.ncols > schema.len() {
            return corrupt("column part has more columns than the schema");
        }
        for c in 0..t.ncols {
            let m = part.column_meta(c).ok_or(Error::BadInput("column meta missing"))?;
            let non_null = t.nrows.checked_sub(m.null_count as usize).ok_or(Error::BadInput("more nulls than rows"))?;
            t.non_null[c] = non_null;
            // The meta's min/max are exactly the range of the part's values.
            if let Some((lo, hi)) = m.minmax.as_ref().map(MinMax::pair) {
                widen(&mut t.range[c], &schema.columns[c], lo);
                widen(&mut t.range[c], &schema.columns[c], hi);
            }
            if let Some(frame) = m.decimal {
                // The values' bytes as a plain column would hold them.
                let mut stream = Vec::new();
                let values = part.column_values(c, &mut stream)?;
                let mut bytes = 0usize;
                for r in 0..t.nrows {
                    if let Some(v) = values.get(r)? {
                        bytes += v.len();
                    }
                }
                t.bytes[c] = bytes;
                t.decimal[c] = DecimalRange::Within { dscale: frame.dscale, lo: frame.lo, hi: frame.hi };
                t.distinct[c] = Distinct::unknown();
                continue;
            }
            if m.dict {
                let mut stream = Vec::new();
                let values = part.column_values(c, &mut stream)?;
                let entries = values.dictionary_entries()?;
                let mut bytes = 0usize;
                for r in 0..t.nrows {
                    if let Some(v) = values.get(r)? {
                        bytes += v.len();
                    }
                }
                t.bytes[c] = bytes;
                let mut d = Distinct::new();
                let mut decimal = DecimalRange::of(&schema.columns[c]);
                for e in entries {
                    d.add(e);
                    decimal.add(e);
                }
                t.distinct[c] = d;
                t.decimal[c] = decimal;
                continue;
            }
            let bitmap = if m.has_nulls { bitmap_len(t.nrows) } else { 0 };
            t.bytes[c] = match m.desc.width {
                Width::Fixed(n) => non_null * n as usize,
                Width::Varlena => (m.len as usize).checked_sub(bitmap + ends_width(m) * t.nrows).ok_or(Error::BadInput("varlena mini-page shorter than its offsets"))?,
            };
            t.distinct[c] = Distinct::unknown();
            t.decimal[c] = DecimalRange::Not;
        }
        Ok(t)
    }

    /// Counts in a version stored as a payload of `natts` columns (the row
    /// format), without decoding it into values.
    pub fn add_payload(&mut self, schema: &Schema, natts: usize, payload: &[u8]) -> Result<()> {
        let mut non_null = std::mem::take(&mut self.non_null);
        let mut bytes = std::mem::take(&mut self.bytes);
        let mut distinct = std::mem::take(&mut self.distinct);
        let mut range = std::mem::take(&mut self.range);
        let mut decimal = std::mem::take(&mut self.decimal);
        let walked = super::row::payload_values(schema, natts, payload, |c, v| {
            if let Some(v) = v {
                non_null[c] += 1;
                bytes[c] += v.len();
                distinct[c].add(v);
                widen(&mut range[c], &schema.columns[c], v);
                decimal[c].add(v);
            }
        });
        self.non_null = non_null;
        self.bytes = bytes;
        self.distinct = distinct;
        self.range = range;
        self.decimal = decimal;
        walked?;
        self.nrows += 1;
        self.ncols = self.ncols.max(natts);
        Ok(())
    }

    /// Rows tallied.
    pub fn rows(&self) -> usize {
        self.nrows
    }

    /// (rows, 4 KB units) of a column part holding the tallied rows.
    pub fn units(&self, schema: &Schema) -> Result<(usize, usize)> {
        if self.nrows > u16::MAX as usize {
            return Err(Error::BadInput("too many rows for a column part"));
        }
        let mut next = units_for(META_FIXED + META_COL * self.ncols).max(1) + self.nrows.div_ceil(HEADERS_PER_UNIT);
        for (c, desc) in schema.columns[..self.ncols].iter().enumerate() {
            let (len, _) = encoded_len(desc, self.nrows, self.nrows - self.non_null[c], self.bytes[c], self.distinct[c].dictionary(), self.range[c], self.decimal[c].frame());
            next += units_for(len);
        }
        Ok((self.nrows, next))
    }
}

/// A column row matches its header and the schema, and its fixed-width
/// values have their width.
fn check_row(schema: &Schema, r: &ColumnRow) -> Result<()> {
    if r.header.natts as usize != r.row.values.len() || r.row.values.len() > schema.len() {
        return Err(Error::BadInput("column row does not match its header or the schema"));
    }
    for (desc, v) in schema.columns.iter().zip(&r.row.values) {
        if let (Width::Fixed(n), Some(v)) = (desc.width, v) {
            if v.len() != n as usize {
                return Err(Error::BadInput("fixed-length value of the wrong length"));
            }
        }
    }
    Ok(())
}

/// Bytes of a column's mini-page content: the null bitmap if any value is
/// null, then fixed-width values, or varlena end offsets and bytes.
fn mini_page_len(desc: &ColumnDesc, nrows: usize, nulls: usize, bytes: usize) -> usize {
    let body = match desc.width {
        Width::Fixed(n) => nrows * n as usize,
        Width::Varlena => 4 * nrows + bytes,
    };
    (if nulls > 0 { bitmap_len(nrows) } else { 0 }) + body
}

/// Computes the layout of a column part holding `rows` (any order here;
/// `build` wants them by slot). Errors only on rows that do not match the
/// schema.
pub fn plan<'a>(schema: &Schema, rows: impl Iterator<Item = &'a ColumnRow> + Clone) -> Result<Plan> {
    let mut nrows = 0usize;
    let mut ncols = 0usize;
    for r in rows.clone() {
        check_row(schema, r)?;
        nrows += 1;
        ncols = ncols.max(r.row.values.len());
    }
    if nrows > u16::MAX as usize {
        return Err(Error::BadInput("too many rows for a column part"));
    }
    let meta_units = units_for(META_FIXED + META_COL * ncols).max(1);
    let header_units = nrows.div_ceil(HEADERS_PER_UNIT);
    let mut next = meta_units + header_units;
    let mut columns = Vec::with_capacity(ncols);
    let mut dictionaries = Vec::with_capacity(ncols);
    for (c, desc) in schema.columns[..ncols].iter().enumerate() {
        let mut nulls = 0usize;
        let mut bytes = 0usize;
        let mut distinct = Distinct::new();
        let mut decimal = DecimalRange::of(desc);
        let mut minmax: Option<(&[u8], &[u8])> = None;
        for r in rows.clone() {
            match value(r, c) {
                None => nulls += 1,
                Some(v) => {
                    bytes += v.len();
                    distinct.add(v);
                    decimal.add(v);
                    if desc.has_minmax() {
                        // Below the minimum cannot be above the maximum.
                        minmax = Some(match minmax {
                            None => (v, v),
                            Some((lo, hi)) if desc.order.cmp(v, lo).is_lt() => (v, hi),
                            Some((lo, hi)) if desc.order.cmp(v, hi).is_gt() => (lo, v),
                            Some(both) => both,
                        });
                    }
                }
            }
        }
        let has_nulls = nulls > 0;
        let range = minmax.filter(|_| packable(desc)).and_then(|(lo, hi)| Some((desc.order.integer(lo)?, desc.order.integer(hi)?)));
        let (len, encoding) = encoded_len(desc, nrows, nulls, bytes, distinct.dictionary(), range, decimal.frame());
        let dict = matches!(encoding, Encoding::Dict(_));
        let units = units_for(len);
        columns.push(ColumnMeta {
            desc: *desc,
            first_unit: next as u16,
            units: units as u16,
            len: len as u32,
            null_count: nulls as u16,
            has_nulls,
            minmax: match minmax {
                Some((a, b)) => Some(MinMax::new(a, b).ok_or(Error::BadInput("min/max wider than a mini-page keeps"))?),
                None => None,
            },
            dict,
            packed: match encoding {
                Encoding::Packed(w, _) => Some(w),
                _ => None,
            },
            short_ends: encoding == Encoding::ShortEnds,
            decimal: match encoding {
                Encoding::Decimal(frame, _) => Some(frame),
                _ => None,
            },
            bits: match encoding {
                Encoding::Packed(_, bits) | Encoding::Decimal(_, bits) | Encoding::Dict(bits) => bits,
                _ => None,
            },
        });
        dictionaries.push(dict.then_some(distinct));
        next += units;
        if next > u16::MAX as usize {
            return Err(Error::NoSpace);
        }
    }
    Ok(Plan { ncols, nrows, meta_units, header_units, columns, total_units: next, dictionaries })
}

/// Column blocks a column part of `ncols` columns needs at the least (one
/// row, every column in one unit). Each column takes whole 4 KB units, so
/// the glue refuses a `column_blocks` reloption below this for the
/// relation's column count (and checks again at ADD COLUMN): with fewer,
/// no row could ever enter the column part and the table would work as a
/// pure delta (row) store.
pub fn min_column_blocks(ncols: usize) -> usize {
    (units_for(META_FIXED + META_COL * ncols).max(1) + 1 + ncols).div_ceil(UNITS_PER_BLOCK)
}

/// Writes `bytes` as the content of the mini-page starting at `first_unit`.
fn scatter(blocks: &mut [Vec<u8>], first_unit: usize, bytes: &[u8]) {
    for (i, chunk) in bytes.chunks(UNIT_PAYLOAD).enumerate() {
        let (blk, off) = Geometry::unit_location(first_unit + i);
        blocks[blk][off..off + chunk.len()].copy_from_slice(chunk);
    }
}

/// Builds the column blocks of version `version` for `rows`, which must be
/// in strictly ascending slot order. Returns all `column_blocks` blocks
/// (those past the used units all zero) and the plan, or `Error::NoSpace`
/// if the rows do not fit the area.
pub fn build(g: &Geometry, schema: &Schema, rows: &[ColumnRow], version: u32) -> Result<(Vec<Vec<u8>>, Plan)> {
    build_at(g, schema, rows, version, None)
}

/// `build` for the extent whose first block is `extent_start`: a row whose
/// ctid is its own TID stores `SELF_CTID` there (`MF_COMPACT_HEADERS`); without
/// it every ctid is stored as it is. Readers then need the extent's start
/// too (`ColumnPart::at_extent`).
pub fn build_at(g: &Geometry, schema: &Schema, rows: &[ColumnRow], version: u32, extent_start: Option<u32>) -> Result<(Vec<Vec<u8>>, Plan)> {
    if rows.windows(2).any(|w| w[0].header.slot >= w[1].header.slot) {
        return Err(Error::BadInput("column rows not in ascending slot order"));
    }
    let p = plan(schema, rows.iter())?;
    let mut blocks = vec![vec![0u8; BLCKSZ]; g.params.column_blocks as usize];
    if p.nrows == 0 {
        return Ok((blocks, p));
    }
    if p.total_units > g.column_units() {
        return Err(Error::NoSpace);
    }

    // Meta mini-page.
    let mut meta = vec![0u8; META_FIXED + META_COL * p.ncols];
    wr16(&mut meta, 0, p.ncols as u16);
    wr16(&mut meta, 2, p.nrows as u16);
    wr16(&mut meta, 4, p.meta_units as u16);
    wr16(&mut meta, 6, p.header_units as u16);
    wr16(&mut meta, 8, p.total_units as u16);
    wr16(&mut meta, META_FLAGS, MF_COMPACT_HEADERS);
    for (c, m) in p.columns.iter().enumerate() {
        let e = &mut meta[META_FIXED + META_COL * c..META_FIXED + META_COL * (c + 1)];
        m.desc.encode(&mut e[0..DESC_LEN]);
        wr16(e, 4, m.first_unit);
        wr16(e, 6, m.units);
        wr32(e, 8, m.len);
        wr16(e, 12, m.null_count);
        e[14] = if m.has_nulls { F_NULLS } else { 0 } | if m.minmax.is_some() { F_MINMAX } else { 0 } | if m.dict { F_DICT } else { 0 } | if m.packed.is_some() { F_PACKED } else { 0 }
            | if m.short_ends { F_SHORT_ENDS } else { 0 }
            | if m.decimal.is_some() { F_DECIMAL } else { 0 }
            | if m.bits.is_some() { F_BITS } else { 0 };
        e[15] = m.bits.or(m.packed).or(m.decimal.map(|f| f.width)).unwrap_or(0);
        if let Some((lo, hi)) = m.minmax.as_ref().map(MinMax::pair) {
            e[16..16 + lo.len()].copy_from_slice(lo);
            e[32..32 + hi.len()].copy_from_slice(hi);
        }
        if let Some(f) = &m.decimal {
            e[16..24].copy_from_slice(&f.lo.to_le_bytes());
            e[24..32].copy_from_slice(&f.hi.to_le_bytes());
            e[32] = f.dscale;
        }
    }
    scatter(&mut blocks, 0, &meta);

    // Row headers, compact.
    for (r, row) in rows.iter().enumerate() {
        let (blk, off) = header_location(p.meta_units, r);
        let h = &row.header;
        if h.mvcc.ctid == SELF_CTID {
            return Err(Error::BadInput("a column row's ctid is the own-TID marker"));
        }
        let ctid = match extent_start {
            Some(first) if h.mvcc.ctid == own_tid(first, h.slot) => SELF_CTID,
            _ => h.mvcc.ctid,
        };
        let stored = RowHeader { slot: h.slot.wrapping_sub(r as u16), natts: h.natts, mvcc: Mvcc { ctid, ..h.mvcc } };
        stored.encode(&mut blocks[blk][off..off + ROW_HEADER]);
    }

    // Data mini-pages.
    for (c, m) in p.columns.iter().enumerate() {
        let mut s = Vec::with_capacity(m.len as usize);
        if m.has_nulls {
            s.resize(bitmap_len(p.nrows), 0);
            for (r, row) in rows.iter().enumerate() {
                if value(row, c).is_none() {
                    s[r / 8] |= 1 << (r % 8);
                }
            }
        }
        match m.desc.width {
            _ if m.dict => {
                // u16 count, a code per row (0 for NULL), then the values
                // in byte order: fixed ones back to back, varlena ones as
                // end offsets and bytes.
                let Some(distinct) = &p.dictionaries[c] else {
                    return Err(Error::BadInput("dictionary column without its values"));
                };
                if distinct.dictionary().is_none() {
                    return Err(Error::BadInput("dictionary column with too many values"));
                }
                let entries = distinct.sorted();
                // Each first-seen index's code: its rank in byte order.
                let mut code = vec![0u8; entries.len()];
                for (rank, e) in entries.iter().enumerate() {
                    code[distinct.table[distinct.probe(e)] as usize - 1] = rank as u8;
                }
                s.extend_from_slice(&(entries.len() as u16).to_le_bytes());
                let codes: Vec<u8> = rows.iter().map(|row| value(row, c).map_or(0, |v| code[distinct.table[distinct.probe(v)] as usize - 1])).collect();
                match m.bits {
                    Some(bits) => put_bits(&codes, 1, bits as usize, &mut s),
                    None => s.extend_from_slice(&codes),
                }
                if m.desc.width == Width::Varlena {
                    let mut end = 0u32;
                    for e in &entries {
                        end += e.len() as u32;
                        s.extend_from_slice(&end.to_le_bytes());
                    }
                }
                for e in &entries {
                    s.extend_from_slice(e);
                }
            }
            Width::Fixed(_) if m.packed.is_some() => {
                // `value - min` in `w` bytes a row; NULL as zeros.
                let w = m.packed.unwrap_or(0) as usize;
                let lo = m.minmax.as_ref().and_then(|mm| m.desc.order.integer(mm.min())).ok_or(Error::BadInput("packed column without a minimum"))?;
                let mut vals = Vec::with_capacity(rows.len() * w);
                for row in rows {
                    match value(row, c) {
                        Some(v) => pack_value(m.desc.order, lo, w, v, &mut vals)?,
                        None => vals.resize(vals.len() + w, 0),
                    }
                }
                match m.bits {
                    Some(bits) => put_bits(&vals, w, bits as usize, &mut s),
                    None => s.extend_from_slice(&vals),
                }
            }
            Width::Fixed(n) => {
                for row in rows {
                    match value(row, c) {
                        Some(v) => s.extend_from_slice(v),
                        // NULL stays a zero-filled slot: O(1) access by row
                        // number, and zeros cost nothing on the drive.
                        None => s.resize(s.len() + n as usize, 0),
                    }
                }
            }
            Width::Varlena if m.decimal.is_some() => {
                // `scaled - lo` in `width` bytes a row; NULL as zeros.
                let f = m.decimal.ok_or(Error::BadInput("decimal column without its frame"))?;
                let mut vals = Vec::with_capacity(rows.len() * f.width as usize);
                for row in rows {
                    match value(row, c) {
                        Some(v) => {
                            let d = decimal::parse(v).filter(|d| d.dscale == f.dscale && (f.lo..=f.hi).contains(&d.scaled));
                            let d = d.ok_or(Error::BadInput("decimal column value outside its frame"))?;
                            let offset = d.scaled.wrapping_sub(f.lo) as u64;
                            vals.extend_from_slice(&offset.to_le_bytes()[..f.width as usize]);
                        }
                        None => vals.resize(vals.len() + f.width as usize, 0),
                    }
                }
                match m.bits {
                    Some(bits) => put_bits(&vals, f.width as usize, bits as usize, &mut s),
                    None => s.extend_from_slice(&vals),
                }
            }
            Width::Varlena => {
                let mut end = 0u32;
                for row in rows {
                    end += value(row, c).map_or(0, |v| v.len() as u32);
                    if m.short_ends {
                        s.extend_from_slice(&(end as u16).to_le_bytes());
                    } else {
                        s.extend_from_slice(&end.to_le_bytes());
                    }
                }
                for row in rows {
                    if let Some(v) = value(row, c) {
                        s.extend_from_slice(v);
                    }
                }
            }
        }
        debug_assert_eq!(s.len(), m.len as usize);
        scatter(&mut blocks, m.first_unit as usize, &s);
    }

    for (i, b) in blocks.iter_mut().enumerate().take(p.total_units.div_ceil(UNITS_PER_BLOCK)) {
        BlockTrailer { kind: BlockKind::Column, index: g.column_block(i) as u16, version }.write(b);
    }
    Ok((blocks, p))
}

/// (column block index, byte offset) of row `r`'s header, given where the
/// header mini-page starts (the meta unit count).
fn header_location(header_first_unit: usize, r: usize) -> (usize, usize) {
    let (blk, off) = Geometry::unit_location(header_first_unit + r / HEADERS_PER_UNIT);
    (blk, off + (r % HEADERS_PER_UNIT) * ROW_HEADER)
}

/// Overwrites the MVCC fields of the row header at `offset` of a column
/// block (from `ColumnPart::header_location`) in place.
pub fn set_row_mvcc(block: &mut [u8], offset: usize, mvcc: &Mvcc) -> Result<()> {
    if block.len() != BLCKSZ || offset + ROW_HEADER > super::layout::BODY_END {
        return Err(Error::BadInput("row header location out of range"));
    }
    let at = offset + MVCC_OFF;
    mvcc.encode(&mut block[at..at + super::row::MVCC_LEN]);
    Ok(())
}

/// Column blocks handed to a reader one at a time, on first use: a point
/// read of one row touches the meta block, the block of its row header and
/// the blocks of its values, not the whole column part. The source checks
/// each block's trailer (kind, index, page version) before returning it.
pub trait BlockSource {
    /// Column block `i` of the extent (0-based within the column part).
    fn block(&self, i: usize) -> Result<&[u8]>;
}

enum Blocks<'a> {
    All(Vec<&'a [u8]>),
    Lazy(&'a dyn BlockSource),
}

impl std::fmt::Debug for ColumnPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnPart").field("nrows", &self.nrows).field("columns", &self.layout.columns).finish()
    }
}

impl<'a> Blocks<'a> {
    fn get(&self, i: usize) -> Result<&'a [u8]> {
        match self {
            Blocks::All(v) => v.get(i).copied().ok_or(Error::Corrupt("mini-page runs past the column blocks")),
            Blocks::Lazy(s) => s.block(i),
        }
    }
}

/// A checked, read-only view of a column part.
pub struct ColumnPart<'a> {
    blocks: Blocks<'a>,
    nrows: usize,
    header_first_unit: usize,
    layout: Arc<ColumnLayout>,
    /// First block of the extent, for compact headers' own TIDs (`at_extent`).
    extent_start: Option<u32>,
}

/// What parsing a column part's meta mini-page yields. It is a pure
/// function of the meta bytes and the extent header's unit and row counts,
/// so a reader may keep it and reuse it for any column part whose counts
/// and meta bytes are equal (`ColumnPart::parse_lazy_reusing`): a point
/// read then compares the meta bytes in place instead of decoding them
/// into a column list again.
#[derive(Debug)]
pub struct ColumnLayout {
    units: usize,
    rows: usize,
    /// The meta bytes this layout was parsed from.
    meta: Vec<u8>,
    header_first_unit: usize,
    columns: Vec<ColumnMeta>,
    /// `MF_COMPACT_HEADERS` (parts built since format 2).
    compact_headers: bool,
}

impl ColumnLayout {
    /// About what this layout takes in memory, its allocations included
    /// (what a cache of layouts counts against its budget).
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<ColumnLayout>() + 2 * std::mem::size_of::<usize>() + self.meta.capacity() + self.columns.capacity() * std::mem::size_of::<ColumnMeta>()
    }

    /// Whether this layout is for a part of `units` units and `rows` rows
    /// (the extent header's counts).
    pub fn describes(&self, units: usize, rows: usize) -> bool {
        self.units == units && self.rows == rows
    }

    /// Row `r`'s header from its stored bytes `raw` (at least
    /// `ROW_HEADER`), for a part of the extent starting at `extent_start`:
    /// a compact header's slot and own-TID ctid made absolute again. A
    /// compact own-TID ctid read without the extent's start is an error
    /// rather than the marker handed on as a ctid.
    pub fn decode_header(&self, raw: &[u8], r: usize, extent_start: Option<u32>) -> Result<RowHeader> {
        let mut h = RowHeader::decode(raw);
        if self.compact_headers {
            h.slot = h.slot.wrapping_add(r as u16);
            if h.mvcc.ctid == SELF_CTID {
                h.mvcc.ctid = match extent_start {
                    Some(first) => own_tid(first, h.slot),
                    None => return Err(Error::BadInput("compact column row header read without its extent's first block")),
                };
            }
        }
        if h.natts as usize > self.columns.len() {
            return corrupt("column row has more columns than its part");
        }
        Ok(h)
    }
}

impl<'a> ColumnPart<'a> {
    /// Parses the column part the extent header describes (`units`, `rows`)
    /// from the column blocks, checking every used block's trailer (and
    /// `version` if given) and the whole meta mini-page against itself.
    pub fn parse(g: &Geometry, blocks: Vec<&'a [u8]>, units: usize, rows: usize, version: Option<u32>) -> Result<Self> {
        let nblocks = units.div_ceil(UNITS_PER_BLOCK);
        if units == 0 || units > g.column_units() || blocks.len() < nblocks {
            return corrupt("column part size out of range");
        }
        for (i, b) in blocks.iter().enumerate().take(nblocks) {
            BlockTrailer::check(b, BlockKind::Column, g.column_block(i), version)?;
        }
        Self::parse_meta(Blocks::All(blocks), g, units, rows)
    }

    /// `parse` over blocks fetched on first use (`BlockSource`, which checks
    /// each block's trailer); reads only the meta mini-page now.
    pub fn parse_lazy(g: &Geometry, source: &'a dyn BlockSource, units: usize, rows: usize) -> Result<Self> {
        Self::parse_lazy_reusing(g, source, units, rows, None)
    }

    /// `parse_lazy`, taking `known`'s column list instead of decoding the
    /// meta mini-page again when the part's counts and meta bytes equal
    /// the ones `known` was parsed from (compared in place).
    pub fn parse_lazy_reusing(g: &Geometry, source: &'a dyn BlockSource, units: usize, rows: usize, known: Option<&Arc<ColumnLayout>>) -> Result<Self> {
        if units == 0 || units > g.column_units() {
            return corrupt("column part size out of range");
        }
        if let Some(k) = known.filter(|k| k.units == units && k.rows == rows) {
            let part = ColumnPart { blocks: Blocks::Lazy(source), nrows: rows, header_first_unit: k.header_first_unit, layout: Arc::clone(k), extent_start: None };
            if part.bytes_equal(0, units, 0, &k.meta)? {
                return Ok(part);
            }
        }
        Self::parse_meta(Blocks::Lazy(source), g, units, rows)
    }

    /// The part `layout` was parsed from, read again through `source`
    /// without looking at its meta mini-page. Only for a layout that
    /// `parse*` returned for this very part, which the caller knows has not
    /// been rewritten since (the glue: the same page version of the same
    /// relation file), so that a point read pins only the blocks its row
    /// header and values are in.
    pub fn lazy_with_layout(source: &'a dyn BlockSource, layout: &Arc<ColumnLayout>) -> Self {
        ColumnPart { blocks: Blocks::Lazy(source), nrows: layout.rows, header_first_unit: layout.header_first_unit, layout: Arc::clone(layout), extent_start: None }
    }

    /// The part belongs to the extent whose first block is `first`: its
    /// compact row headers' own-TID ctids read as that TID.
    pub fn at_extent(mut self, first: u32) -> Self {
        self.extent_start = Some(first);
        self
    }

    /// The parsed meta, for `parse_lazy_reusing` on a later read.
    pub fn layout(&self) -> &Arc<ColumnLayout> {
        &self.layout
    }

    fn parse_meta(blocks: Blocks<'a>, _g: &Geometry, units: usize, rows: usize) -> Result<Self> {
        let mut part = ColumnPart { blocks, nrows: rows, header_first_unit: 0, layout: Arc::new(ColumnLayout { units, rows, meta: Vec::new(), header_first_unit: 0, columns: Vec::new(), compact_headers: false }), extent_start: None };
        let mut columns = Vec::new();
        let fixed = part.gather(0, units, 0, META_FIXED)?;
        let ncols = rd16(&fixed, 0) as usize;
        let meta_units = rd16(&fixed, 4) as usize;
        let header_units = rd16(&fixed, 6) as usize;
        if rd16(&fixed, 2) as usize != rows || rd16(&fixed, 8) as usize != units {
            return corrupt("column part meta disagrees with the extent header");
        }
        if ncols > MAX_COLUMNS || meta_units != units_for(META_FIXED + META_COL * ncols).max(1) {
            return corrupt("column part meta size inconsistent");
        }
        columns.reserve_exact(ncols);
        let part_flags = rd16(&fixed, META_FLAGS);
        if part_flags & !MF_COMPACT_HEADERS != 0 {
            return corrupt("unknown column part flags");
        }
        if header_units != rows.div_ceil(HEADERS_PER_UNIT) || rows == 0 || meta_units + header_units > units {
            return corrupt("column part header mini-page size inconsistent");
        }
        let meta = part.gather(0, meta_units, 0, META_FIXED + META_COL * ncols)?;
        let mut next = meta_units + header_units;
        for c in 0..ncols {
            let e = &meta[META_FIXED + META_COL * c..META_FIXED + META_COL * (c + 1)];
            let desc = ColumnDesc::decode(&e[0..DESC_LEN])?;
            let (first_unit, cunits, len, null_count, flags) = (rd16(e, 4), rd16(e, 6), rd32(e, 8), rd16(e, 12), e[14]);
            let has_nulls = flags & F_NULLS != 0;
            let dict = flags & F_DICT != 0;
            if flags & !(F_NULLS | F_MINMAX | F_DICT | F_PACKED | F_SHORT_ENDS | F_DECIMAL | F_BITS) != 0 {
                return corrupt("unknown column flags");
            }
            // Bit by bit: byte 15 is the bits a row, and a row unpacks
            // into the bytes that hold them.
            let bits = if flags & F_BITS != 0 {
                if flags & (F_PACKED | F_DECIMAL | F_DICT) == 0 || !(1..=56).contains(&e[15]) || (dict && e[15] > 6) {
                    return corrupt("bit-packed column description inconsistent");
                }
                Some(e[15])
            } else {
                None
            };
            let bytes_a_row = bits.map_or(e[15], |b| b.div_ceil(8));
            let packed = if flags & F_PACKED != 0 {
                let w = bytes_a_row;
                let ok = match desc.width {
                    Width::Fixed(n) => packable(&desc) && !dict && flags & F_MINMAX != 0 && w >= 1 && (w as u16) < n,
                    Width::Varlena => false,
                };
                if !ok {
                    return corrupt("packed column description inconsistent");
                }
                Some(w)
            } else if e[15] != 0 && flags & (F_DECIMAL | F_BITS) == 0 {
                return corrupt("unknown column flags");
            } else {
                None
            };
            let decimal = if flags & F_DECIMAL != 0 {
                let lo = i64::from_le_bytes(e[16..24].try_into().unwrap_or_default());
                let hi = i64::from_le_bytes(e[24..32].try_into().unwrap_or_default());
                let frame = DecimalFrame { dscale: e[32], lo, hi, width: bytes_a_row };
                let span = (hi as i128 - lo as i128).max(0) as u128;
                let fits = DecimalRange::Within { dscale: frame.dscale, lo, hi }.frame().is_some_and(|f| f.width <= frame.width);
                let ok = desc.width == Width::Varlena
                    && flags & (F_DICT | F_PACKED | F_SHORT_ENDS | F_MINMAX) == 0
                    && (1..=8).contains(&frame.width)
                    && lo <= hi
                    && fits
                    && bits.is_none_or(|b| b >= 64 || span >> b == 0)
                    && frame.dscale <= decimal::DSCALE_MAX;
                if !ok {
                    return corrupt("decimal column description inconsistent");
                }
                Some(frame)
            } else {
                None
            };
            let short_ends = flags & F_SHORT_ENDS != 0;
            if short_ends && (desc.width != Width::Varlena || dict) {
                return corrupt("short end offsets on a column without them");
            }
            let ends = if short_ends { 2 } else { 4 };
            if first_unit as usize != next || cunits as usize != units_for(len as usize) {
                return corrupt("column mini-page out of place");
            }
            next += cunits as usize;
            if null_count as usize > rows || has_nulls != (null_count > 0) {
                return corrupt("column null count inconsistent");
            }
            let bitmap = if has_nulls { bitmap_len(rows) } else { 0 };
            let ok_len = match desc.width {
                _ if dict => len as usize > bitmap + 2 + frame_len(rows, 1, bits) && null_count as usize != rows,
                Width::Fixed(_) if packed.is_some() => len as usize == bitmap + frame_len(rows, packed.unwrap_or(0) as usize, bits),
                Width::Fixed(n) => len as usize == bitmap + rows * n as usize,
                Width::Varlena if decimal.is_some() => len as usize == bitmap + frame_len(rows, decimal.map_or(0, |f| f.width as usize), bits),
                Width::Varlena => len as usize >= bitmap + ends * rows,
            };
            if !ok_len {
                return corrupt("column mini-page length inconsistent");
            }
            let minmax = if flags & F_MINMAX != 0 {
                let n = match (desc.has_minmax(), desc.width) {
                    (true, Width::Fixed(n)) => n as usize,
                    _ => return corrupt("min/max on a column without order"),
                };
                if null_count as usize == rows {
                    return corrupt("min/max on an all-null column");
                }
                if n > MINMAX_MAX {
                    return corrupt("min/max wider than a column description holds");
                }
                MinMax::new(&e[16..16 + n], &e[32..32 + n])
            } else {
                None
            };
            columns.push(ColumnMeta { desc, first_unit, units: cunits, len, null_count, has_nulls, minmax, dict, packed, short_ends, decimal, bits });
        }
        if next != units {
            return corrupt("column mini-pages do not end where the part ends");
        }
        part.header_first_unit = meta_units;
        part.layout = Arc::new(ColumnLayout { units, rows, meta, header_first_unit: meta_units, columns, compact_headers: part_flags & MF_COMPACT_HEADERS != 0 });
        Ok(part)
    }

    /// Whether the `expected.len()` bytes at `pos` of the mini-page at
    /// `first_unit` equal `expected` (`gather` without the copy).
    fn bytes_equal(&self, first_unit: usize, units: usize, pos: usize, expected: &[u8]) -> Result<bool> {
        if pos + expected.len() > units * UNIT_PAYLOAD {
            return Ok(false);
        }
        self.pieces(first_unit, pos, expected.len(), |at, piece| piece == &expected[at..at + piece.len()])
    }

    /// Copies `len` bytes at `pos` of the mini-page at `first_unit`
    /// (`units` long), across unit and block boundaries.
    fn gather(&self, first_unit: usize, units: usize, pos: usize, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.gather_into(first_unit, units, pos, &mut out)?;
        Ok(out)
    }

    /// `gather` into `out` (its length says how many bytes).
    fn gather_into(&self, first_unit: usize, units: usize, pos: usize, out: &mut [u8]) -> Result<()> {
        if pos + out.len() > units * UNIT_PAYLOAD {
            return corrupt("read past the end of a mini-page");
        }
        self.pieces(first_unit, pos, out.len(), |at, piece| {
            out[at..at + piece.len()].copy_from_slice(piece);
            true
        })?;
        Ok(())
    }

    /// Hands `f` the `len` bytes at `pos` of the mini-page at `first_unit`
    /// piece by piece (each inside one unit), with each piece's offset in
    /// the range; stops early, returning false, when `f` does.
    fn pieces(&self, first_unit: usize, pos: usize, len: usize, mut f: impl FnMut(usize, &[u8]) -> bool) -> Result<bool> {
        let mut p = pos;
        while p < pos + len {
            let u = first_unit + p / UNIT_PAYLOAD;
            let within = p % UNIT_PAYLOAD;
            let n = (UNIT_PAYLOAD - within).min(pos + len - p);
            let (blk, off) = Geometry::unit_location(u);
            let b = self.blocks.get(blk)?;
            if !f(p - pos, &b[off + within..off + within + n]) {
                return Ok(false);
            }
            p += n;
        }
        Ok(true)
    }

    fn read_stream(&self, c: usize, pos: usize, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.read_stream_into(c, pos, &mut out)?;
        Ok(out)
    }

    fn read_stream_into(&self, c: usize, pos: usize, out: &mut [u8]) -> Result<()> {
        let m = &self.layout.columns[c];
        if pos + out.len() > m.len as usize {
            return corrupt("read past a column's content");
        }
        self.gather_into(m.first_unit as usize, m.units as usize, pos, out)
    }

    /// Appends row `r`'s values to `out` in the row format of delta items
    /// (null bitmap, then the values), as `encode_payload` of `row(r)` would,
    /// without building the row; returns its header. What a scan uses.
    pub fn row_payload(&self, r: usize, out: &mut Vec<u8>) -> Result<RowHeader> {
        self.row_payload_of(r, None, out)
    }

    /// Row `r` in the row format with only the columns `wanted` names
    /// (`wanted[c]`; columns past its end are wanted): the others read as
    /// NULL and their mini-pages are not touched, so a reader that needs a
    /// few columns of a wide row reads a few blocks. `None`: every column.
    pub fn row_payload_of(&self, r: usize, wanted: Option<&[bool]>, out: &mut Vec<u8>) -> Result<RowHeader> {
        let header = self.row_header(r)?;
        self.values_payload_of(r, header.natts as usize, wanted, out)?;
        Ok(header)
    }

    /// `row_payload_of` for a row known to store `natts` columns, without
    /// reading its row header: a reader of an all-visible part, whose rows
    /// store every column of the part (`ncols`), needs no MVCC field.
    pub fn values_payload_of(&self, r: usize, natts: usize, wanted: Option<&[bool]>, out: &mut Vec<u8>) -> Result<()> {
        if r >= self.nrows || natts > self.ncols() {
            return Err(Error::BadInput("column row or column count out of range"));
        }
        let skipped = |c: usize| wanted.is_some_and(|w| !w.get(c).copied().unwrap_or(true));
        // The spans first, where there are few columns, so that `out` grows
        // once: a row of ten 100-byte values reallocated it at every column.
        let mut spans = [None; PRESIZED_COLUMNS];
        let presized = natts <= PRESIZED_COLUMNS;
        if presized {
            let mut need = natts.div_ceil(8);
            for c in (0..natts).filter(|&c| !skipped(c)) {
                spans[c] = self.value_span(r, c)?;
                if let Some((_, len)) = spans[c] {
                    let m = &self.layout.columns[c];
                    need += 2 + len + if m.decimal.is_some() { decimal::MAX_LEN } else { 0 } + if let Width::Fixed(n) = m.desc.width { n as usize } else { 0 };
                }
            }
            out.reserve(need);
        }
        let bitmap_at = out.len();
        out.resize(bitmap_at + natts.div_ceil(8), 0);
        for c in 0..natts {
            let m = &self.layout.columns[c];
            if skipped(c) {
                out[bitmap_at + c / 8] |= 1 << (c % 8);
                continue;
            }
            let span = if presized { spans[c] } else { self.value_span(r, c)? };
            let Some((pos, len)) = span else {
                out[bitmap_at + c / 8] |= 1 << (c % 8);
                continue;
            };
            let at = out.len();
            match m.desc.width {
                Width::Fixed(n) if m.packed.is_some() => {
                    out.resize(at + n as usize, 0);
                    self.read_packed(m, c, r, pos, len, &mut out[at..])?;
                }
                Width::Fixed(_) => {
                    out.resize(at + len, 0);
                    self.read_stream_into(c, pos, &mut out[at..])?;
                }
                Width::Varlena if m.decimal.is_some() => {
                    let mut v = [0u8; decimal::MAX_LEN];
                    let n = self.read_decimal(m, c, r, pos, len, &mut v)?;
                    out.extend_from_slice(&(n as u16).to_le_bytes());
                    out.extend_from_slice(&v[..n]);
                }
                Width::Varlena => {
                    if len > u16::MAX as usize {
                        return corrupt("varlena value too long for a row");
                    }
                    out.extend_from_slice(&(len as u16).to_le_bytes());
                    out.resize(at + 2 + len, 0);
                    self.read_stream_into(c, pos, &mut out[at + 2..])?;
                }
            }
        }
        Ok(())
    }

    /// Where row `r`'s value of column `c` lies in the column's mini-page
    /// content (position, length); None for NULL. Reads the null bit, the
    /// offsets or the dictionary code it needs, not the value.
    fn value_span(&self, r: usize, c: usize) -> Result<Option<(usize, usize)>> {
        let m = &self.layout.columns[c];
        let mut base = 0;
        if m.has_nulls {
            base = bitmap_len(self.nrows);
            let mut byte = [0u8; 1];
            self.read_stream_into(c, r / 8, &mut byte)?;
            if byte[0] & (1 << (r % 8)) != 0 {
                return Ok(None);
            }
        }
        // The (start, end) offsets of entry `i` in a table at `at` of
        // `w`-byte end offsets (4, or 2 for short ones).
        let ends = |at: usize, i: usize, w: usize| -> Result<(usize, usize)> {
            let mut b = [0u8; 8];
            if i == 0 {
                self.read_stream_into(c, at, &mut b[..w])?;
                Ok((0, end_at(&b, 0, w, 0)))
            } else {
                self.read_stream_into(c, at + w * (i - 1), &mut b[..2 * w])?;
                Ok((end_at(&b, 0, w, 0), end_at(&b, 0, w, 1)))
            }
        };
        let (index, table, count) = if m.dict {
            let mut head = [0u8; 2];
            self.read_stream_into(c, base, &mut head)?;
            let n = u16::from_le_bytes(head) as usize;
            let code = match m.bits {
                // Bit by bit: the one or two bytes the code lies in.
                Some(bits) => {
                    let (at, bits) = (r * bits as usize, bits as usize);
                    let len = (at % 8 + bits).div_ceil(8);
                    let mut b = [0u8; 2];
                    self.read_stream_into(c, base + 2 + at / 8, &mut b[..len])?;
                    bits_value(&b[..len], at % 8, bits) as usize
                }
                None => {
                    let mut b = [0u8; 1];
                    self.read_stream_into(c, base + 2 + r, &mut b)?;
                    b[0] as usize
                }
            };
            if n == 0 || n > DICT_MAX || code >= n {
                return corrupt("dictionary code out of range");
            }
            (code, base + 2 + frame_len(self.nrows, 1, m.bits), n)
        } else {
            (r, base, self.nrows)
        };
        let (pos, len) = match m.desc.width {
            // Bit by bit: the bytes the row's bits lie in (the readers
            // take the shift from the row number, `frame_raw`).
            _ if m.bits.is_some() && !m.dict => {
                let (at, bits) = (index * m.bits.unwrap_or(0) as usize, m.bits.unwrap_or(0) as usize);
                (table + at / 8, (at % 8 + bits).div_ceil(8))
            }
            Width::Fixed(_) if m.packed.is_some() => {
                let w = m.packed.unwrap_or(0) as usize;
                (table + index * w, w)
            }
            Width::Fixed(n) => (table + index * n as usize, n as usize),
            Width::Varlena if m.decimal.is_some() => {
                let w = m.decimal.map_or(0, |f| f.width as usize);
                (table + index * w, w)
            }
            Width::Varlena => {
                // A dictionary's own offsets are always u32.
                let w = if m.dict { 4 } else { ends_width(m) };
                let data = table + w * count;
                let (start, end) = ends(table, index, w)?;
                if start > end {
                    return corrupt("varlena offsets out of order or out of range");
                }
                (data + start, end - start)
            }
        };
        if pos + len > m.len as usize {
            return corrupt("value past its mini-page");
        }
        Ok(Some((pos, len)))
    }

    pub fn nrows(&self) -> usize {
        self.nrows
    }
    pub fn ncols(&self) -> usize {
        self.layout.columns.len()
    }
    pub fn column_meta(&self, c: usize) -> Option<&ColumnMeta> {
        self.layout.columns.get(c)
    }

    /// (column block index, byte offset) of row `r`'s header: the one place
    /// a delete/update/lock of a column-resident version writes.
    pub fn header_location(&self, r: usize) -> Result<(usize, usize)> {
        if r >= self.nrows {
            return Err(Error::BadInput("column row out of range"));
        }
        Ok(header_location(self.header_first_unit, r))
    }

    pub fn row_header(&self, r: usize) -> Result<RowHeader> {
        let (blk, off) = self.header_location(r)?;
        let b = self.blocks.get(blk)?;
        self.layout.decode_header(&b[off..off + ROW_HEADER], r, self.extent_start)
    }

    /// Value of column `c` in row `r`; `None` for NULL (and for a column
    /// the row lacks: check `natts`).
    pub fn value(&self, r: usize, c: usize) -> Result<Option<Vec<u8>>> {
        if r >= self.nrows || c >= self.layout.columns.len() {
            return Err(Error::BadInput("column value out of range"));
        }
        let m = &self.layout.columns[c];
        match (self.value_span(r, c)?, m.desc.width) {
            (None, _) => Ok(None),
            (Some((pos, len)), Width::Fixed(n)) if m.packed.is_some() => {
                let mut v = vec![0u8; n as usize];
                self.read_packed(m, c, r, pos, len, &mut v)?;
                Ok(Some(v))
            }
            (Some((pos, len)), Width::Varlena) if m.decimal.is_some() => {
                let mut v = [0u8; decimal::MAX_LEN];
                let n = self.read_decimal(m, c, r, pos, len, &mut v)?;
                Ok(Some(v[..n].to_vec()))
            }
            (Some((pos, len)), _) => Ok(Some(self.read_stream(c, pos, len)?)),
        }
    }

    /// The numeric whose `len` stored bytes are at `pos` of decimal column
    /// `c` (`m`), written into `out`; its length.
    fn read_decimal(&self, m: &ColumnMeta, c: usize, r: usize, pos: usize, len: usize, out: &mut [u8; decimal::MAX_LEN]) -> Result<usize> {
        let Some(frame) = &m.decimal else { return corrupt("decimal column without its frame") };
        let (raw, w) = self.frame_raw(m, c, r, pos, len, frame.width as usize)?;
        frame.value(&raw[..w], out)
    }

    /// Row `r`'s stored frame-of-reference value, whose `len` bytes are at
    /// `pos` (`value_span`), as `w` little-endian bytes: read as they are,
    /// or cut out of its bytes when the column is bit by bit.
    fn frame_raw(&self, m: &ColumnMeta, c: usize, r: usize, pos: usize, len: usize, w: usize) -> Result<([u8; 8], usize)> {
        let mut raw = [0u8; 8];
        if len > 8 || w > 8 {
            return corrupt("frame-of-reference value too wide");
        }
        self.read_stream_into(c, pos, &mut raw[..len])?;
        match m.bits {
            Some(bits) => {
                let x = bits_value(&raw[..len], (r * bits as usize) % 8, bits as usize);
                Ok((x.to_le_bytes(), w))
            }
            None if len == w => Ok((raw, w)),
            None => corrupt("frame-of-reference value of the wrong width"),
        }
    }

    /// The value whose `len` stored bytes are at `pos` of packed column
    /// `c` (`m`), unpacked into `out` (the type's width).
    fn read_packed(&self, m: &ColumnMeta, c: usize, r: usize, pos: usize, len: usize, out: &mut [u8]) -> Result<()> {
        let Some(min) = m.minmax.as_ref().map(MinMax::min) else { return corrupt("packed column without a minimum") };
        let (raw, w) = self.frame_raw(m, c, r, pos, len, m.packed.unwrap_or(0) as usize)?;
        unpack_value(min, &raw[..w], out);
        Ok(())
    }

    /// Copies column `c`'s whole content (null bitmap, then the fixed
    /// values or the end offsets and value bytes) into `stream`, replacing
    /// what it held, and returns a view that hands out each row's value:
    /// what a scan that needs a few columns of every row reads, one pass
    /// per column instead of one lookup per value.
    pub fn column_values<'s>(&self, c: usize, stream: &'s mut Vec<u8>) -> Result<ColumnValues<'s>> {
        self.column_values_as(c, stream, ValueForm::Stored)
    }

    /// Column `c`'s values as `column_values` gives them, with decimal
    /// columns in `form`.
    pub fn column_values_as<'s>(&self, c: usize, stream: &'s mut Vec<u8>, form: ValueForm) -> Result<ColumnValues<'s>> {
        let m = self.layout.columns.get(c).ok_or(Error::BadInput("column out of range"))?;
        stream.clear();
        stream.resize(m.len as usize, 0);
        self.read_stream_into(c, 0, stream)?;
        let base = if m.has_nulls { bitmap_len(self.nrows) } else { 0 };
        if let (Some(bits), true) = (m.bits, m.dict) {
            // Codes bit by bit: spread out into a byte each first, which is
            // what `ColumnValues` reads.
            let (codes_at, stored) = (base + 2, frame_len(self.nrows, 1, Some(bits)));
            if stream.len() < codes_at + stored {
                return corrupt("dictionary codes past their mini-page");
            }
            let tail = stream[codes_at + stored..].to_vec();
            let packed = stream[codes_at..codes_at + stored].to_vec();
            stream.truncate(codes_at);
            stream.resize(codes_at + self.nrows, 0);
            expand_bits(&packed, 1, bits as usize, self.nrows, &mut stream[codes_at..]);
            stream.extend_from_slice(&tail);
        } else if let Some(bits) = m.bits {
            // Bit by bit: first into whole bytes a row, which is what the
            // packed and decimal readers below take.
            let w = m.packed.or(m.decimal.map(|f| f.width)).unwrap_or(0) as usize;
            let stored = stream.get(base..base + frame_len(self.nrows, w, Some(bits))).ok_or(Error::Corrupt("bit-packed values past their mini-page"))?.to_vec();
            stream.truncate(base);
            stream.resize(base + self.nrows * w, 0);
            expand_bits(&stored, w, bits as usize, self.nrows, &mut stream[base..]);
        }
        if let (Some(w), Width::Fixed(n), Some(min)) = (m.packed, m.desc.width, m.minmax.as_ref().map(MinMax::min)) {
            // Unpacked in place, from the last row back: row r's n bytes
            // land at base + r * n, at or past base + r * w, where the
            // stored bytes of the rows before it (still unread) end.
            let (w, n) = (w as usize, n as usize);
            if w >= n || n > 8 || min.len() != n {
                return corrupt("packed column description inconsistent");
            }
            stream.resize(base + self.nrows * n, 0);
            let mut lo = [0u8; 8];
            lo[..n].copy_from_slice(min);
            unpack_rows(&mut stream[base..], self.nrows, w, n, u64::from_le_bytes(lo));
        }
        if let Some(frame) = &m.decimal {
            let w = frame.width as usize;
            let span = frame.hi.wrapping_sub(frame.lo) as u64;
            if form == ValueForm::AlignedDatum && w == 1 && span < DICT_MAX as u64 {
                return self.decimal_table(m, frame, stream, base);
            }
            // Rewritten as a plain varlena column (u32 end offsets, then
            // the values' bytes), which is what `ColumnValues` reads.
            let raw = stream.get(base..base + self.nrows * w).ok_or(Error::Corrupt("decimal values past their mini-page"))?.to_vec();
            let nulls = stream[..base].to_vec();
            let aligned = form == ValueForm::AlignedDatum;
            // Aligned: the end offsets, and with them the values, begin
            // at a multiple of 4 from the stream's start.
            let base = if aligned { base.next_multiple_of(4) } else { base };
            stream.clear();
            stream.extend_from_slice(&nulls);
            stream.resize(base + 4 * self.nrows, 0);
            let data = stream.len();
            // Room for the longest numeric of every row, padding and a
            // 4-byte header included; cut to what was written at the end.
            stream.resize(data + self.nrows * (decimal::MAX_LEN + 6), 0);
            let nulls = if m.has_nulls { Some(&nulls[..]) } else { None };
            let end = match w {
                1 => decimal_rows::<1>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                2 => decimal_rows::<2>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                3 => decimal_rows::<3>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                4 => decimal_rows::<4>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                5 => decimal_rows::<5>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                6 => decimal_rows::<6>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                7 => decimal_rows::<7>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
                _ => decimal_rows::<8>(frame, &raw, nulls, aligned, &mut stream[..], base, data)?,
            };
            stream.truncate(end);
            return Ok(ColumnValues { stream, nrows: self.nrows, width: m.desc.width, has_nulls: m.has_nulls, base, dict: None, ends: 4, aligned });
        }
        let dict = if m.dict {
            let n = rd16(stream, base) as usize;
            let entries = base + 2 + self.nrows;
            let ok = (1..=DICT_MAX).contains(&n)
                && match m.desc.width {
                    Width::Fixed(w) => stream.len() == entries + n * w as usize,
                    Width::Varlena => stream.len() >= entries + 4 * n,
                };
            if !ok {
                return corrupt("dictionary mini-page length inconsistent");
            }
            Some((entries, n))
        } else {
            None
        };
        Ok(ColumnValues { stream, nrows: self.nrows, width: m.desc.width, has_nulls: m.has_nulls, base, dict, ends: ends_width(m), aligned: false })
    }

    /// A decimal column of one stored byte a row (a span below
    /// `DICT_MAX`: TPC-H's quantities, discounts and taxes), as a
    /// dictionary of every numeric of its range, each with a 4-byte
    /// varlena header at a multiple of 4 from the stream's start: a row's
    /// stored byte is its code as it is, and a reader hands out a pointer
    /// to its entry instead of writing a numeric for every row.
    ///
    /// ```text
    /// stream: | nulls | n u16 | codes, a byte a row | pad | ends u32 x n | entries, each 4-aligned |
    ///                 ^ base                               ^ entries
    /// ```
    fn decimal_table<'s>(&self, m: &ColumnMeta, frame: &DecimalFrame, stream: &'s mut Vec<u8>, base: usize) -> Result<ColumnValues<'s>> {
        let n = (frame.hi.wrapping_sub(frame.lo) as u64 + 1) as usize;
        if stream.len() < base + self.nrows {
            return corrupt("decimal values past their mini-page");
        }
        stream.truncate(base + self.nrows);
        stream.resize(base + 2 + self.nrows, 0);
        stream.copy_within(base..base + self.nrows, base + 2);
        stream[base..base + 2].copy_from_slice(&(n as u16).to_le_bytes());
        let entries = stream.len().next_multiple_of(4);
        stream.resize(entries + 4 * n, 0);
        let data = stream.len();
        let mut v = [0u8; decimal::MAX_LEN];
        for code in 0..n {
            let len = frame.value(&[code as u8], &mut v)?;
            stream.resize(stream.len().next_multiple_of(4), 0);
            stream.extend_from_slice(&(((len - 1 + 4) as u32) << 2).to_le_bytes());
            stream.extend_from_slice(&v[1..len]);
            let end = (stream.len() - data) as u32;
            stream[entries + 4 * code..entries + 4 * code + 4].copy_from_slice(&end.to_le_bytes());
        }
        Ok(ColumnValues { stream, nrows: self.nrows, width: m.desc.width, has_nulls: m.has_nulls, base, dict: Some((entries, n)), ends: 4, aligned: true })
    }

    /// Every row, as `row` gives each, decoded a column at a time: a
    /// compaction opens the whole part, and reading it value by value
    /// looked up each value's null bit, place and packed bytes on its own.
    pub fn rows(&self) -> Result<Vec<ColumnRow>> {
        let mut rows = Vec::with_capacity(self.nrows);
        for r in 0..self.nrows {
            let header = self.row_header(r)?;
            rows.push(ColumnRow { header, row: Row { values: Vec::with_capacity(header.natts as usize) } });
        }
        let widest = rows.iter().map(|r| r.header.natts as usize).max().unwrap_or(0);
        let mut stream = Vec::new();
        for c in 0..widest {
            let values = self.column_values(c, &mut stream)?;
            for (r, row) in rows.iter_mut().enumerate() {
                if c < row.header.natts as usize {
                    row.row.values.push(values.get(r)?.map(<[u8]>::to_vec));
                }
            }
        }
        Ok(rows)
    }

    /// Header and values of row `r` (`natts` values).
    pub fn row(&self, r: usize) -> Result<ColumnRow> {
        let header = self.row_header(r)?;
        let mut values = Vec::with_capacity(header.natts as usize);
        for c in 0..header.natts as usize {
            values.push(self.value(r, c)?);
        }
        Ok(ColumnRow { header, row: Row { values } })
    }
}

/// One column's values, over its content gathered by
/// `ColumnPart::column_values`.
pub struct ColumnValues<'s> {
    stream: &'s [u8],
    nrows: usize,
    width: Width,
    has_nulls: bool,
    /// Where the values (fixed) or the end offsets (varlena) begin; a
    /// dictionary's count.
    base: usize,
    /// A dictionary's entries (where they begin, how many): the codes are
    /// at `base + 2`.
    dict: Option<(usize, usize)>,
    /// Bytes of each end offset of a plain varlena column (2 or 4).
    ends: usize,
    /// Each varlena value begins at a multiple of 4 (padding between).
    aligned: bool,
}

/// How `ColumnPart::column_values_as` hands out decimal columns' values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ValueForm {
    /// As stored in row format: a 1-byte varlena header, unaligned.
    Stored,
    /// With a 4-byte varlena header at a multiple of 4 from the stream's
    /// start, ready to be a Datum that needs no copy.
    AlignedDatum,
}

impl<'s> ColumnValues<'s> {
    /// Row `r`'s value; `None` for NULL (and for a row that lacks the
    /// column: check the row header's `natts` first).
    pub fn get(&self, r: usize) -> Result<Option<&'s [u8]>> {
        if r >= self.nrows {
            return Err(Error::BadInput("column row out of range"));
        }
        if self.has_nulls && self.stream[r / 8] & (1 << (r % 8)) != 0 {
            return Ok(None);
        }
        if let Some((entries, n)) = self.dict {
            let code = self.stream[self.base + 2 + r] as usize;
            if code >= n {
                return corrupt("dictionary code out of range");
            }
            return self.entry(entries, n, code).map(Some);
        }
        match self.width {
            Width::Fixed(n) => {
                let at = self.base + r * n as usize;
                self.stream.get(at..at + n as usize).map(Some).ok_or(Error::Corrupt("fixed value past its mini-page"))
            }
            Width::Varlena => {
                let w = self.ends;
                let data = self.base + w * self.nrows;
                if data > self.stream.len() {
                    return corrupt("varlena offsets past their mini-page");
                }
                let end = end_at(self.stream, self.base, w, r);
                let mut start = if r == 0 { 0 } else { end_at(self.stream, self.base, w, r - 1) };
                if self.aligned && start < end {
                    start = start.next_multiple_of(4);
                }
                if start > end || data + end > self.stream.len() {
                    return corrupt("varlena offsets out of order or out of range");
                }
                Ok(Some(&self.stream[data + start..data + end]))
            }
        }
    }

    /// `f(i, value)` for each `(i, r)` of `rows`: row r's value as `get`
    /// gives it, with the column's shape (dictionary, width, offsets)
    /// looked at once instead of for every row, for a scan that reads
    /// every row of a part.
    pub fn each_of(&self, rows: impl Iterator<Item = (usize, usize)>, f: impl FnMut(usize, Option<&'s [u8]>)) -> Result<()> {
        let stream = self.stream;
        let nrows = self.nrows;
        if self.has_nulls && stream.len() < bitmap_len(nrows) {
            return corrupt("null bitmap past its mini-page");
        }
        let null = |r: usize| self.has_nulls && stream[r / 8] & (1 << (r % 8)) != 0;
        if let Some((entries, n)) = self.dict {
            let mut table: [&'s [u8]; DICT_MAX] = [&[]; DICT_MAX];
            if n > DICT_MAX {
                return corrupt("dictionary larger than a dictionary may be");
            }
            for (code, slot) in table[..n].iter_mut().enumerate() {
                *slot = self.entry(entries, n, code)?;
            }
            let codes = stream.get(self.base + 2..self.base + 2 + nrows).ok_or(Error::Corrupt("dictionary codes past their mini-page"))?;
            return each_row(rows, nrows, null, f, |r| {
                let code = codes[r] as usize;
                if code >= n {
                    return corrupt("dictionary code out of range");
                }
                Ok(table[code])
            });
        }
        match self.width {
            Width::Fixed(w) => {
                let w = w as usize;
                let values = stream.get(self.base..self.base + nrows * w).ok_or(Error::Corrupt("fixed value past its mini-page"))?;
                each_row(rows, nrows, null, f, |r| Ok(&values[r * w..r * w + w]))
            }
            Width::Varlena => {
                let w = self.ends;
                let data = self.base + w * nrows;
                if data > stream.len() {
                    return corrupt("varlena offsets past their mini-page");
                }
                let body = &stream[data..];
                each_row(rows, nrows, null, f, |r| {
                    let end = end_at(stream, self.base, w, r);
                    let mut start = if r == 0 { 0 } else { end_at(stream, self.base, w, r - 1) };
                    if self.aligned && start < end {
                        start = start.next_multiple_of(4);
                    }
                    if start > end || end > body.len() {
                        return corrupt("varlena offsets out of order or out of range");
                    }
                    Ok(&body[start..end])
                })
            }
        }
    }

    /// Entry `i` of a dictionary of `n` entries beginning at `entries`.
    fn entry(&self, entries: usize, n: usize, i: usize) -> Result<&'s [u8]> {
        match self.width {
            Width::Fixed(w) => {
                let at = entries + i * w as usize;
                self.stream.get(at..at + w as usize).ok_or(Error::Corrupt("dictionary entry past its mini-page"))
            }
            Width::Varlena => {
                let data = entries + 4 * n;
                let end = rd32(self.stream, entries + 4 * i) as usize;
                let mut start = if i == 0 { 0 } else { rd32(self.stream, entries + 4 * (i - 1)) as usize };
                if self.aligned && start < end {
                    start = start.next_multiple_of(4);
                }
                if start > end || data + end > self.stream.len() {
                    return corrupt("dictionary offsets out of order or out of range");
                }
                Ok(&self.stream[data + start..data + end])
            }
        }
    }

    /// A dictionary column's distinct values (empty for a plain column).
    pub fn dictionary_entries(&self) -> Result<Vec<&'s [u8]>> {
        match self.dict {
            Some((entries, n)) => (0..n).map(|i| self.entry(entries, n, i)).collect(),
            None => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hasis::layout::{Params, BODY_END, TRAILER_OFF};
    use crate::hasis::row::MinMaxOrder;

    fn geo(column_blocks: u16) -> Geometry {
        Geometry::new(Params { column_blocks, max_slots: 1000, ..Params::default() }).unwrap()
    }

    fn schema() -> Schema {
        Schema::new(vec![
            ColumnDesc::fixed(4, MinMaxOrder::SignedInt),
            ColumnDesc::varlena(),
            ColumnDesc::fixed(8, MinMaxOrder::Float),
            ColumnDesc::fixed(3, MinMaxOrder::None),
        ])
        .unwrap()
    }

    fn rows(n: usize, wide: usize) -> Vec<ColumnRow> {
        (0..n)
            .map(|i| {
                let natts = if i % 7 == 3 { 2 } else { 4 };
                let mut values = vec![
                    Some(((i as i32) - 50).to_le_bytes().to_vec()),
                    if i % 5 == 0 { None } else { Some(vec![b'a' + (i % 26) as u8; (i * 37) % (wide + 1)]) },
                    Some((i as f64 / 3.0).to_le_bytes().to_vec()),
                    if i % 2 == 0 { None } else { Some(vec![i as u8; 3]) },
                ];
                values.truncate(natts);
                ColumnRow {
                    header: RowHeader { slot: (2 * i) as u16, natts: natts as u16, mvcc: Mvcc { xmin: i as u32 + 3, ..Mvcc::default() } },
                    row: Row { values },
                }
            })
            .collect()
    }

    fn views(blocks: &[Vec<u8>]) -> Vec<&[u8]> {
        blocks.iter().map(|b| &b[..]).collect()
    }

    /// Every reader of `part` returns `rs` as they went in: each column's
    /// values through `column_values`, each row through `row` and in the
    /// row format through `row_payload`.
    fn assert_reads_back(part: &ColumnPart, schema: &Schema, rs: &[ColumnRow]) {
        for c in 0..part.ncols() {
            let mut stream = vec![7u8; 3];
            let values = part.column_values(c, &mut stream).unwrap();
            for (r, want) in rs.iter().enumerate() {
                assert_eq!(values.get(r).unwrap(), want.row.values[c].as_deref(), "column {c} row {r}");
            }
            let mut bulk = Vec::new();
            values.each_of((0..rs.len()).map(|r| (r, r)), |_, v| bulk.push(v)).unwrap();
            assert_eq!(bulk, rs.iter().map(|want| want.row.values[c].as_deref()).collect::<Vec<_>>(), "column {c} read in bulk");
        }
        assert_eq!(part.rows().unwrap(), rs);
        for (r, want) in rs.iter().enumerate() {
            assert_eq!(&part.row(r).unwrap(), want);
            let mut out = Vec::new();
            part.row_payload(r, &mut out).unwrap();
            assert_eq!(out, super::super::row::encode_payload(schema, &want.row).unwrap());
        }
    }

    fn check_roundtrip(g: &Geometry, rs: &[ColumnRow]) -> Plan {
        let (blocks, p) = build(g, &schema(), rs, 5).unwrap();
        let part = ColumnPart::parse(g, views(&blocks), p.total_units, rs.len(), Some(5)).unwrap();
        assert_eq!(part.nrows(), rs.len());
        for (r, want) in rs.iter().enumerate() {
            assert_eq!(&part.row(r).unwrap(), want);
        }
        assert_eq!(part.rows().unwrap(), rs);
        // Blocks past the used units are all zero (free on the drive).
        for b in &blocks[p.total_units.div_ceil(2)..] {
            assert!(b.iter().all(|&x| x == 0));
        }
        p
    }

    /// A source that hands out blocks on demand and counts them.
    struct Counting<'b> {
        blocks: &'b [Vec<u8>],
        touched: std::cell::RefCell<std::collections::BTreeSet<usize>>,
    }

    impl BlockSource for Counting<'_> {
        fn block(&self, i: usize) -> Result<&[u8]> {
            self.touched.borrow_mut().insert(i);
            self.blocks.get(i).map(|b| &b[..]).ok_or(Error::Corrupt("past the column blocks"))
        }
    }

    #[test]
    fn row_payload_is_the_encoded_row() {
        let g = geo(16);
        let rs = rows(500, 60);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), Some(5)).unwrap();
        let mut out = vec![9u8];
        for (r, want) in rs.iter().enumerate() {
            out.truncate(1);
            let h = part.row_payload(r, &mut out).unwrap();
            assert_eq!(h, want.header);
            assert_eq!(out[1..], crate::hasis::row::encode_payload(&schema(), &want.row).unwrap()[..], "row {r}");
        }
    }

    #[test]
    fn row_payload_of_some_columns_reads_only_theirs() {
        let g = geo(16);
        let rs = rows(600, 60);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let wanted_sets: [&[bool]; 4] = [&[true, false, false, false], &[false, false, true], &[false, true, true, false], &[false; 4]];
        for wanted in wanted_sets {
            for r in (0..rs.len()).step_by(7) {
                let src = Counting { blocks: &blocks, touched: Default::default() };
                let part = ColumnPart::parse_lazy(&g, &src, p.total_units, rs.len()).unwrap();
                let header_blocks = {
                    part.row_header(r).unwrap();
                    src.touched.borrow().clone()
                };
                let mut out = Vec::new();
                let h = part.row_payload_of(r, Some(wanted), &mut out).unwrap();
                assert_eq!(h, rs[r].header);
                // The wanted columns as stored; the others NULL; a column
                // past `wanted` counts as wanted.
                let mut expect = rs[r].row.clone();
                for (c, v) in expect.values.iter_mut().enumerate() {
                    if !wanted.get(c).copied().unwrap_or(true) {
                        *v = None;
                    }
                }
                assert_eq!(out, crate::hasis::row::encode_payload(&schema(), &expect).unwrap(), "row {r} wanted {wanted:?}");
                // Blocks read: the header's, and the wanted columns' own.
                let mut own = header_blocks;
                for c in 0..4 {
                    if wanted.get(c).copied().unwrap_or(true) {
                        let m = part.column_meta(c).unwrap();
                        own.extend((m.first_unit as usize..(m.first_unit + m.units) as usize).map(|u| u / 2));
                    }
                }
                for b in src.touched.borrow().iter() {
                    assert!(own.contains(b), "row {r} wanted {wanted:?} read block {b}");
                }
            }
        }
    }

    #[test]
    fn values_payload_of_skips_the_row_headers() {
        let g = geo(16);
        let rs = rows(600, 60);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let wanted: &[bool] = &[false, true, false, true];
        for r in (0..rs.len()).step_by(11) {
            let natts = rs[r].header.natts as usize;
            let src = Counting { blocks: &blocks, touched: Default::default() };
            let part = ColumnPart::parse_lazy(&g, &src, p.total_units, rs.len()).unwrap();
            let mut out = Vec::new();
            part.values_payload_of(r, natts, Some(wanted), &mut out).unwrap();
            let mut with_header = Vec::new();
            part.row_payload_of(r, Some(wanted), &mut with_header).unwrap();
            assert_eq!(out, with_header, "row {r}");
            // Only the meta (read by the parse) and the wanted columns' blocks.
            let src2 = Counting { blocks: &blocks, touched: Default::default() };
            let part2 = ColumnPart::parse_lazy(&g, &src2, p.total_units, rs.len()).unwrap();
            let src3 = Counting { blocks: &blocks, touched: Default::default() };
            let part3 = ColumnPart::parse_lazy(&g, &src3, p.total_units, rs.len()).unwrap();
            let mut own = src3.touched.borrow().clone();
            for c in 0..4 {
                if wanted[c] {
                    let m = part2.column_meta(c).unwrap();
                    own.extend((m.first_unit as usize..(m.first_unit + m.units) as usize).map(|u| u / 2));
                }
            }
            let mut out3 = Vec::new();
            part3.values_payload_of(r, natts, Some(wanted), &mut out3).unwrap();
            for b in src3.touched.borrow().iter() {
                assert!(own.contains(b), "row {r} read block {b}");
            }
        }
        let src = Counting { blocks: &blocks, touched: Default::default() };
        let part = ColumnPart::parse_lazy(&g, &src, p.total_units, rs.len()).unwrap();
        assert!(part.values_payload_of(rs.len(), 4, None, &mut Vec::new()).is_err());
        assert!(part.values_payload_of(0, 5, None, &mut Vec::new()).is_err());
    }

    #[test]
    fn column_values_match_rows_and_read_only_their_column() {
        let g = geo(16);
        let rs = rows(700, 50);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let mut stream = Vec::new();
        for c in 0..4 {
            let src = Counting { blocks: &blocks, touched: Default::default() };
            let part = ColumnPart::parse_lazy(&g, &src, p.total_units, rs.len()).unwrap();
            let meta_blocks = src.touched.borrow().clone();
            let values = part.column_values(c, &mut stream).unwrap();
            for (r, want) in rs.iter().enumerate() {
                let got = values.get(r).unwrap();
                let expect = want.row.values.get(c).cloned().flatten();
                assert_eq!(got.map(|v| v.to_vec()), expect, "row {r} column {c}");
            }
            assert!(values.get(rs.len()).is_err());
            // Only the meta block(s) and the column's own mini-page blocks.
            let m = part.column_meta(c).unwrap();
            let own: std::collections::BTreeSet<usize> =
                (m.first_unit as usize..(m.first_unit + m.units) as usize).map(|u| u / 2).collect();
            for b in src.touched.borrow().iter() {
                assert!(meta_blocks.contains(b) || own.contains(b), "column {c} read block {b}");
            }
        }
    }

    #[test]
    fn lazy_reads_match_and_touch_few_blocks() {
        let g = geo(16);
        let rs = rows(600, 40);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        assert!(p.total_units > 8, "the part must span several blocks");
        for (r, want) in rs.iter().enumerate() {
            let src = Counting { blocks: &blocks, touched: Default::default() };
            let part = ColumnPart::parse_lazy(&g, &src, p.total_units, rs.len()).unwrap();
            assert_eq!(&part.row(r).unwrap(), want);
            // meta, header, and at most two blocks per column value
            assert!(src.touched.borrow().len() <= 2 + 2 * 4, "row {r} touched {:?}", src.touched.borrow());
        }
        // A source that fails (a block of another version) fails the read.
        struct Failing;
        impl BlockSource for Failing {
            fn block(&self, _: usize) -> Result<&[u8]> {
                Err(Error::VersionMismatch { expected: 5, found: 6 })
            }
        }
        assert!(ColumnPart::parse_lazy(&g, &Failing, p.total_units, rs.len()).is_err());
    }

    #[test]
    fn size_tally_agrees_with_plan_on_every_prefix() {
        // Rows of several widths, with NULLs and rows lacking columns
        // (natts below the schema's): every prefix sizes as `plan` does.
        for (n, width) in [(1, 10), (300, 60), (700, 5), (90, 900)] {
            let rs = rows(n, width);
            let mut tally = SizeTally::new(&schema());
            for k in 0..rs.len() {
                tally.add(&schema(), &rs[k]).unwrap();
                if k % 37 == 0 || k + 1 == rs.len() {
                    let p = plan(&schema(), rs[..=k].iter()).unwrap();
                    assert_eq!(tally.units(&schema()).unwrap(), (p.nrows, p.total_units), "{n} rows of {width}, prefix {k}");
                }
            }
        }
        // A row that does not match the schema is refused, as by `plan`.
        let mut bad = rows(1, 10).remove(0);
        bad.header.natts += 1;
        bad.row.values.push(None);
        assert!(SizeTally::new(&schema()).add(&schema(), &bad).is_err() && plan(&schema(), std::iter::once(&bad)).is_err());
        let mut short = rows(1, 10).remove(0);
        short.row.values[0] = Some(vec![1, 2]);
        assert!(SizeTally::new(&schema()).add(&schema(), &short).is_err() && plan(&schema(), std::iter::once(&short)).is_err());
    }

    #[test]
    fn few_distinct_values_make_a_dictionary() {
        // Low-cardinality fixed and varlena columns (with NULLs) become
        // dictionaries, a column of 300 distinct values stays plain; every
        // reader returns the rows as they went in.
        let schema = Schema::new(vec![
            ColumnDesc::fixed(4, MinMaxOrder::SignedInt),
            ColumnDesc::varlena(),
            ColumnDesc::varlena(),
            ColumnDesc::fixed(8, MinMaxOrder::Float),
        ])
        .unwrap();
        let rs: Vec<ColumnRow> = (0..600usize)
            .map(|i| ColumnRow {
                header: RowHeader { slot: i as u16, natts: 4, mvcc: Mvcc::default() },
                row: Row {
                    values: vec![
                        // (values far apart, so packing them would not be shorter)
                        Some(((i % 7) as i32 * 300_000_000 + 1).to_le_bytes().to_vec()),
                        if i % 10 == 0 { None } else { Some(format!("\x0bMODE{}", i % 5).into_bytes()) },
                        Some(format!("comment {}", i % 300).into_bytes()),
                        Some(((i % 3) as f64 * 0.01).to_le_bytes().to_vec()),
                    ],
                },
            })
            .collect();
        let g = geo(16);
        let (blocks, p) = build(&g, &schema, &rs, 5).unwrap();
        assert_eq!(p.columns.iter().map(|m| m.dict).collect::<Vec<_>>(), vec![true, true, false, true]);
        let plain = mini_page_len(&schema.columns[0], 600, 0, 600 * 4);
        assert!((p.columns[0].len as usize) < plain / 3, "codes take a byte a row");
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), Some(5)).unwrap();
        let mut streams = vec![Vec::new(); 4];
        for (c, stream) in streams.iter_mut().enumerate() {
            let values = part.column_values(c, stream).unwrap();
            let entries = values.dictionary_entries().unwrap();
            let mut sorted = entries.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(entries, sorted, "column {c}: entries in byte order, distinct");
        }
        assert_reads_back(&part, &schema, &rs);
        // The tally of the built part, plus more rows, sizes as the rows do.
        let mut of_part = SizeTally::of_part(&schema, &part).unwrap();
        let mut want = SizeTally::new(&schema);
        for r in &rs {
            want.add(&schema, r).unwrap();
        }
        assert_eq!(of_part.units(&schema).unwrap(), want.units(&schema).unwrap());
        for r in rs.iter().take(50) {
            of_part.add(&schema, r).unwrap();
            want.add(&schema, r).unwrap();
        }
        assert_eq!(of_part.units(&schema).unwrap(), want.units(&schema).unwrap());
        // A code past the dictionary is corruption, never a panic.
        let mut bad = blocks.clone();
        let m = &p.columns[0];
        let (blk, off) = Geometry::unit_location(m.first_unit as usize);
        match m.bits {
            // Seven values in 3-bit codes: all ones is code 7, past them.
            Some(bits) => {
                let at = 5 * bits as usize;
                for k in at / 8..=(at + bits as usize - 1) / 8 {
                    bad[blk][off + 2 + k] = 0xff;
                }
            }
            None => bad[blk][off + 2 + 5] = 200,
        }
        let part = ColumnPart::parse(&g, views(&bad), p.total_units, rs.len(), Some(5)).unwrap();
        assert!(part.value(5, 0).is_err());
        assert!(part.row(5).is_err());
        let mut stream = Vec::new();
        assert!(part.column_values(0, &mut stream).unwrap().get(5).is_err());
        // So is a dictionary count of zero or past DICT_MAX.
        for n in [0u16, 300] {
            let mut bad = blocks.clone();
            bad[blk][off..off + 2].copy_from_slice(&n.to_le_bytes());
            let part = ColumnPart::parse(&g, views(&bad), p.total_units, rs.len(), Some(5)).unwrap();
            assert!(part.value(5, 0).is_err());
            assert!(part.column_values(0, &mut stream).is_err());
        }
    }

    #[test]
    fn size_tally_of_a_part_and_of_payloads_equals_the_rows_tally() {
        // A bulk insert sizes an extent's column part from its meta and the
        // payloads it appends: both must count as `add` counts the rows.
        for (n, width) in [(1, 10), (300, 60), (700, 5), (90, 900)] {
            let g = geo(16);
            let rs = rows(n, width);
            let mut want = SizeTally::new(&schema());
            let mut from_payloads = SizeTally::new(&schema());
            for r in &rs {
                want.add(&schema(), r).unwrap();
                let payload = super::super::row::encode_payload(&schema(), &r.row).unwrap();
                from_payloads.add_payload(&schema(), r.row.values.len(), &payload).unwrap();
            }
            assert_eq!(from_payloads, want, "{n} rows of {width}: payloads");
            let Ok((blocks, p)) = build(&g, &schema(), &rs, 5) else { continue };
            let refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
            let part = ColumnPart::parse(&g, refs, p.total_units, rs.len(), Some(5)).unwrap();
            let of_part = SizeTally::of_part(&schema(), &part).unwrap();
            assert_eq!(of_part.units(&schema()).unwrap(), want.units(&schema()).unwrap(), "{n} rows of {width}: part");
            assert_eq!(of_part.rows(), n);
        }
        let mut t = SizeTally::new(&schema());
        assert!(t.add_payload(&schema(), 2, &[0, 1]).is_err(), "a truncated payload is an error");
    }

    #[test]
    fn part_from_a_known_layout_reads_the_same_rows_without_the_meta() {
        let g = geo(16);
        let rs = rows(600, 40);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let src = Counting { blocks: &blocks, touched: Default::default() };
        let layout = ColumnPart::parse_lazy(&g, &src, p.total_units, rs.len()).unwrap().layout().clone();
        for (r, want) in rs.iter().enumerate().step_by(13) {
            let src = Counting { blocks: &blocks, touched: Default::default() };
            let part = ColumnPart::lazy_with_layout(&src, &layout);
            assert_eq!(&part.row(r).unwrap(), want);
            let (hb, _) = part.header_location(r).unwrap();
            // The header's block and the values' blocks; block 0 (the meta)
            // only where a header or a value lies in it.
            let touched = src.touched.borrow();
            assert!(touched.contains(&hb));
            let values_in_block_0 = (0..4).any(|c| part.column_meta(c).is_some_and(|m| (m.first_unit as usize) < UNITS_PER_BLOCK));
            assert!(hb == 0 || values_in_block_0 || !touched.contains(&0), "row {r} touched {touched:?}");
        }
    }

    #[test]
    fn reused_layout_only_where_the_meta_is_equal() {
        let g = geo(16);
        let a = rows(600, 40);
        let b = rows(300, 90);
        let (blocks_a, pa) = build(&g, &schema(), &a, 5).unwrap();
        let (blocks_b, pb) = build(&g, &schema(), &b, 6).unwrap();
        let src_a = Counting { blocks: &blocks_a, touched: Default::default() };
        let known = ColumnPart::parse_lazy(&g, &src_a, pa.total_units, a.len()).unwrap().layout().clone();
        // Same part: the layout is taken, not rebuilt, and reads agree.
        let again = ColumnPart::parse_lazy_reusing(&g, &src_a, pa.total_units, a.len(), Some(&known)).unwrap();
        assert!(Arc::ptr_eq(again.layout(), &known));
        for (r, want) in a.iter().enumerate().step_by(37) {
            assert_eq!(&again.row(r).unwrap(), want);
        }
        // Another part (other counts, other meta): parsed afresh.
        let src_b = Counting { blocks: &blocks_b, touched: Default::default() };
        let other = ColumnPart::parse_lazy_reusing(&g, &src_b, pb.total_units, b.len(), Some(&known)).unwrap();
        assert!(!Arc::ptr_eq(other.layout(), &known));
        for (r, want) in b.iter().enumerate().step_by(29) {
            assert_eq!(&other.row(r).unwrap(), want);
        }
        // Same counts but one meta byte differs (a min/max): parsed afresh,
        // and a corrupt meta is still refused.
        let mut changed = blocks_a.clone();
        let (blk, off) = Geometry::unit_location(0);
        changed[blk][off + META_FIXED + 16] ^= 1;
        let src_c = Counting { blocks: &changed, touched: Default::default() };
        if let Ok(part) = ColumnPart::parse_lazy_reusing(&g, &src_c, pa.total_units, a.len(), Some(&known)) {
            assert!(!Arc::ptr_eq(part.layout(), &known));
        }
        drop(src_c);
        changed[blk][off] ^= 0x40;
        let src_d = Counting { blocks: &changed, touched: Default::default() };
        assert!(ColumnPart::parse_lazy_reusing(&g, &src_d, pa.total_units, a.len(), Some(&known)).is_err());
    }

    #[test]
    fn roundtrip_small_and_minmax() {
        let g = geo(16);
        let rs = rows(40, 30);
        let p = check_roundtrip(&g, &rs);
        assert_eq!(p.meta_units, 1);
        assert_eq!(p.header_units, 1);
        let (blocks, _) = build(&g, &schema(), &rs, 5).unwrap();
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), None).unwrap();
        let m0 = part.column_meta(0).unwrap();
        assert_eq!(m0.minmax.as_ref().map(MinMax::pair), Some((&(-50i32).to_le_bytes()[..], &(-11i32).to_le_bytes()[..])));
        assert!(!m0.has_nulls);
        let m2 = part.column_meta(2).unwrap();
        assert!(m2.has_nulls); // rows with natts 2 lack it
        assert_eq!(m2.minmax.as_ref().unwrap().min(), 0.0f64.to_le_bytes());
        assert_eq!(part.column_meta(3).unwrap().minmax, None);
        assert!(part.column_meta(1).unwrap().minmax.is_none());
    }

    #[test]
    fn header_mini_page_boundaries() {
        let g = geo(16);
        for n in [1, HEADERS_PER_UNIT - 1, HEADERS_PER_UNIT, HEADERS_PER_UNIT + 1, 3 * HEADERS_PER_UNIT + 1] {
            let rs = rows(n, 4);
            let p = check_roundtrip(&g, &rs);
            assert_eq!(p.header_units, n.div_ceil(HEADERS_PER_UNIT));
        }
    }

    #[test]
    fn wide_varlena_columns_span_units_and_blocks() {
        let g = geo(16);
        // Values up to 3000 bytes: the varlena mini-page spans many units
        // and values straddle unit and block boundaries.
        let rs = rows(60, 3000);
        let p = check_roundtrip(&g, &rs);
        assert!(p.columns[1].units > 10, "{:?}", p.columns[1]);
        // The same rows do not fit a 2-block column area.
        assert_eq!(build(&geo(2), &schema(), &rs, 5).unwrap_err(), Error::NoSpace);
    }

    #[test]
    fn compact_headers_store_slots_and_own_tids_as_one_pattern() {
        let g = geo(16);
        let first = 7001u32;
        let m = Mvcc { xmin: 2, infomask: 0x0b00, ..Mvcc::default() };
        // A dense part (slot = row), every ctid its own TID, but row 5,
        // which was updated (ctid elsewhere), and a gap of slots after row 9.
        let mut rs: Vec<ColumnRow> = (0..600u16)
            .map(|r| {
                let slot = if r < 10 { r } else { r + 3 };
                ColumnRow { header: RowHeader { slot, natts: 1, mvcc: Mvcc { ctid: own_tid(first, slot), ..m } }, row: Row { values: vec![Some(vec![1, 2, 3, 4])] } }
            })
            .collect();
        rs[5].header.mvcc.ctid = Tid::new(first + 40, 2);
        rs[5].header.mvcc.xmax = 77;
        let s = Schema::new(vec![ColumnDesc::fixed(4, MinMaxOrder::SignedInt)]).unwrap();
        let (blocks, p) = build_at(&g, &s, &rs, 1, Some(first)).unwrap();
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), Some(1)).unwrap();
        // Without the extent's start an own-TID ctid cannot be read.
        assert!(part.row_header(0).is_err());
        let part = part.at_extent(first);
        for (r, want) in rs.iter().enumerate() {
            assert_eq!(part.row_header(r).unwrap(), want.header, "row {r}");
        }
        assert_eq!(part.rows().unwrap().iter().map(|c| c.header).collect::<Vec<_>>(), rs.iter().map(|c| c.header).collect::<Vec<_>>());
        // Rows 0..10 and 11..600 are stored as the same 26 bytes (row 10 and
        // on differ from the first ones only in the slot gap of 3).
        let stored = |r: usize| {
            let (b, off) = part.header_location(r).unwrap();
            blocks[b][off..off + ROW_HEADER].to_vec()
        };
        assert_eq!(stored(0), stored(9));
        assert_eq!(stored(11), stored(599));
        assert_ne!(stored(5), stored(4));
        // An in-place stamp writes an absolute ctid, which reads the same.
        let mut stamped = blocks.clone();
        let (b, off) = part.header_location(7).unwrap();
        let own7 = own_tid(first, 7);
        set_row_mvcc(&mut stamped[b], off, &Mvcc { xmax: 90, ctid: own7, ..m }).unwrap();
        let part2 = ColumnPart::parse(&g, views(&stamped), p.total_units, rs.len(), Some(1)).unwrap().at_extent(first);
        assert_eq!(part2.row_header(7).unwrap(), RowHeader { slot: 7, natts: 1, mvcc: Mvcc { xmax: 90, ctid: own7, ..m } });
        // Without a start every ctid is stored as it is, and reads back
        // without one.
        let (plain, p3) = build(&g, &s, &rs, 1).unwrap();
        let part3 = ColumnPart::parse(&g, views(&plain), p3.total_units, rs.len(), Some(1)).unwrap();
        assert_eq!(part3.row_header(3).unwrap(), rs[3].header);
        // The marker itself is no ctid a row may have.
        let mut bad = rs.clone();
        bad[2].header.mvcc.ctid = SELF_CTID;
        assert!(build_at(&g, &s, &bad, 1, Some(first)).is_err());
        // Format 1 parts (no flag: absolute slots and ctids) still read.
        let mut old = plain.clone();
        old[0][24 + META_FLAGS..24 + META_FLAGS + 2].fill(0);
        for (r, row) in rs.iter().enumerate() {
            let (b, off) = part3.header_location(r).unwrap();
            row.header.encode(&mut old[b][off..off + ROW_HEADER]);
        }
        let part4 = ColumnPart::parse(&g, views(&old), p3.total_units, rs.len(), Some(1)).unwrap();
        for (r, want) in rs.iter().enumerate() {
            assert_eq!(part4.row_header(r).unwrap(), want.header, "format 1 row {r}");
        }
        // Unknown part flags are corruption.
        let mut unknown = plain.clone();
        unknown[0][24 + META_FLAGS] |= 0x02;
        assert!(ColumnPart::parse(&g, views(&unknown), p3.total_units, rs.len(), Some(1)).is_err());
    }

    #[test]
    fn min_column_blocks_is_tight() {
        for ncols in [1usize, 2, 3, 30, 84, 85, 200] {
            let s = Schema::new(vec![ColumnDesc::fixed(4, MinMaxOrder::None); ncols]).unwrap();
            let row = ColumnRow {
                header: RowHeader { slot: 0, natts: ncols as u16, mvcc: Mvcc::default() },
                row: Row { values: vec![Some(vec![1; 4]); ncols] },
            };
            let need = min_column_blocks(ncols) as u16;
            let fits = |cb: u16| {
                let g = Geometry::new(Params { column_blocks: cb, max_slots: 100, ..Params::default() }).unwrap();
                build(&g, &s, std::slice::from_ref(&row), 1).is_ok()
            };
            assert!(fits(need), "{ncols}");
            assert!(need == 1 || !fits(need - 1), "{ncols}");
        }
        // The defaults (16 blocks, 32 units) take up to 30 columns.
        assert_eq!(min_column_blocks(30), 16);
        assert_eq!(min_column_blocks(31), 17);
    }

    #[test]
    fn exact_unit_fill() {
        let s = Schema::new(vec![ColumnDesc::fixed(UNIT_PAYLOAD as u16 / 8, MinMaxOrder::None)]).unwrap();
        let g = geo(2);
        let rs: Vec<ColumnRow> = (0..8)
            .map(|i| ColumnRow {
                header: RowHeader { slot: i, natts: 1, mvcc: Mvcc::default() },
                row: Row { values: vec![Some(vec![i as u8 + 1; UNIT_PAYLOAD / 8])] },
            })
            .collect();
        let (blocks, p) = build(&g, &s, &rs, 1).unwrap();
        assert_eq!(p.columns[0].units, 1); // 8 values fill one unit exactly
        assert_eq!(p.total_units, 3);
        let part = ColumnPart::parse(&g, views(&blocks), 3, 8, None).unwrap();
        assert_eq!(part.value(7, 0).unwrap().unwrap(), vec![8; UNIT_PAYLOAD / 8]);
    }

    #[test]
    fn columns_start_on_4k_boundaries() {
        let g = geo(16);
        let rs = rows(200, 100);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        for m in &p.columns {
            let (blk, off) = Geometry::unit_location(m.first_unit as usize);
            // A mini-page's first byte is the first payload byte of a 4 KB unit.
            assert!(off == 24 || off == 4096);
            assert!(blk < blocks.len());
        }
    }

    #[test]
    fn in_place_mvcc_stamp() {
        let g = geo(16);
        let rs = rows(400, 10);
        let (mut blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let (blk, off) = ColumnPart::parse(&g, views(&blocks), p.total_units, 400, None).unwrap().header_location(321).unwrap();
        let m = Mvcc { xmin: 1, xmax: 99, cid: 3, ctid: crate::tid::Tid::new(8, 9), infomask: 7, infomask2: 1 };
        set_row_mvcc(&mut blocks[blk], off, &m).unwrap();
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, 400, None).unwrap();
        let h = part.row_header(321).unwrap();
        assert_eq!(h.mvcc, m);
        assert_eq!(h.slot, rs[321].header.slot);
        assert_eq!(part.row(320).unwrap(), rs[320]);
        assert!(set_row_mvcc(&mut blocks[0], BODY_END, &m).is_err());
    }

    #[test]
    fn rejects_bad_input_and_corrupt_parts() {
        let g = geo(16);
        let mut rs = rows(30, 20);
        rs.swap(3, 4);
        assert!(build(&g, &schema(), &rs, 1).is_err());
        let rs = rows(30, 20);
        let (blocks, p) = build(&g, &schema(), &rs, 5).unwrap();
        let u = p.total_units;
        assert!(ColumnPart::parse(&g, views(&blocks), u, 31, None).is_err());
        assert!(ColumnPart::parse(&g, views(&blocks), u + 1, 30, None).is_err());
        assert!(matches!(ColumnPart::parse(&g, views(&blocks), u, 30, Some(6)), Err(Error::VersionMismatch { .. })));
        let mut m = blocks.clone();
        m[0][TRAILER_OFF] = 0;
        assert_eq!(ColumnPart::parse(&g, views(&m), u, 30, None).unwrap_err(), Error::BadMagic);
        // Flip every byte of the meta mini-page and the row headers: parse
        // and reads return errors or values, never panic.
        for pos in 24..24 + META_FIXED + META_COL * 4 + 30 * ROW_HEADER {
            for x in [0x01u8, 0x80, 0xff] {
                let mut m = blocks.clone();
                m[0][pos] ^= x;
                if let Ok(part) = ColumnPart::parse(&g, views(&m), u, 30, None) {
                    for r in 0..30 {
                        let _ = part.row(r);
                    }
                    let _ = part.rows();
                }
            }
        }
        // Corrupt varlena offsets.
        let part = ColumnPart::parse(&g, views(&blocks), u, 30, None).unwrap();
        let c1 = part.column_meta(1).unwrap().clone();
        let (blk, off) = Geometry::unit_location(c1.first_unit as usize);
        let mut m = blocks.clone();
        // (short u16 end offsets: the values take far less than 64 KB)
        assert!(c1.short_ends);
        let at = off + bitmap_len(30) + 2 * 11;
        m[blk][at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        let part = ColumnPart::parse(&g, views(&m), u, 30, None).unwrap();
        assert!(part.value(11, 1).is_err());
        assert!(part.value(12, 1).is_err());
        assert!(part.value(30, 0).is_err());
    }

    /// Each row read in the row format with only the columns `wanted`
    /// names is the row with the others NULL.
    fn assert_partial_payloads(part: &ColumnPart, schema: &Schema, rs: &[ColumnRow], wanted: &[bool]) {
        for (r, want) in rs.iter().enumerate() {
            let mut some = Vec::new();
            part.values_payload_of(r, wanted.len(), Some(wanted), &mut some).unwrap();
            let mut masked = want.row.clone();
            for (c, &w) in wanted.iter().enumerate() {
                if !w {
                    masked.values[c] = None;
                }
            }
            assert_eq!(some, super::super::row::encode_payload(schema, &masked).unwrap());
        }
    }

    /// A tally of `rs` sizes exactly what plan built (`p`, `part`), and so
    /// does the tally of the built part; after 40 more rows whose column
    /// `c` holds `value(i)`, both still agree and size the part of all the
    /// rows, whose plan is returned.
    fn assert_tallies_agree(schema: &Schema, part: &ColumnPart, p: &Plan, rs: &[ColumnRow], c: usize, value: impl Fn(usize) -> Vec<u8>) -> Plan {
        let n = rs.len();
        let mut want = SizeTally::new(schema);
        for r in rs {
            want.add(schema, r).unwrap();
        }
        assert_eq!(want.units(schema).unwrap(), (n, p.total_units));
        let mut of_part = SizeTally::of_part(schema, part).unwrap();
        assert_eq!(of_part.units(schema).unwrap(), want.units(schema).unwrap());
        let mut more = rs[..40].to_vec();
        for (i, r) in more.iter_mut().enumerate() {
            r.header.slot = (n + i) as u16;
            r.row.values[c] = Some(value(i));
        }
        for r in &more {
            of_part.add(schema, r).unwrap();
            want.add(schema, r).unwrap();
        }
        assert_eq!(of_part.units(schema).unwrap(), want.units(schema).unwrap());
        let all: Vec<ColumnRow> = rs.iter().chain(&more).cloned().collect();
        let (_, p2) = build(&geo(16), schema, &all, 4).unwrap();
        assert_eq!(want.units(schema).unwrap(), (all.len(), p2.total_units));
        p2
    }

    #[test]
    fn short_ranges_of_integers_are_packed() {
        // int2/int4/int8 (signed, with negatives and NULLs), an unsigned
        // int4 and a date-like int4: each column whose values span a short
        // range stores value - min in fewer bytes, and every reader gets
        // the values back as they went in.
        let schema = Schema::new(vec![
            ColumnDesc::fixed(8, MinMaxOrder::SignedInt),
            ColumnDesc::fixed(4, MinMaxOrder::SignedInt),
            ColumnDesc::fixed(2, MinMaxOrder::SignedInt),
            ColumnDesc::fixed(4, MinMaxOrder::UnsignedInt),
            ColumnDesc::fixed(8, MinMaxOrder::SignedInt),
            ColumnDesc::fixed(8, MinMaxOrder::Float),
        ])
        .unwrap();
        let n = 700usize;
        let rs: Vec<ColumnRow> = (0..n)
            .map(|i| ColumnRow {
                header: RowHeader { slot: i as u16, natts: 6, mvcc: Mvcc::default() },
                row: Row {
                    values: vec![
                        // 8 bytes spanning about 2^17 around a negative base: 3 bytes
                        Some((-5_000_000_000i64 + ((i * 7919) % 131_000) as i64).to_le_bytes().to_vec()),
                        // 4 bytes, 9000..10500 with NULLs: 2 bytes
                        if i % 9 == 4 { None } else { Some((9000 + ((i * 31) % 1500) as i32).to_le_bytes().to_vec()) },
                        // 2 bytes, -100..100: 1 byte (shorter than its dictionary of 201 values)
                        Some((((i * 13) % 201) as i16 - 100).to_le_bytes().to_vec()),
                        // unsigned 4 bytes near the top of the range: 2 bytes
                        Some((u32::MAX - ((i * 17) % 60_000) as u32).to_le_bytes().to_vec()),
                        // the full int8 range: stays plain
                        Some(if i % 2 == 0 { i64::MIN + i as i64 } else { i64::MAX - i as i64 }.to_le_bytes().to_vec()),
                        // floats are never packed
                        Some((i as f64 * 0.5).to_le_bytes().to_vec()),
                    ],
                },
            })
            .collect();
        let g = geo(16);
        let (blocks, p) = build(&g, &schema, &rs, 3).unwrap();
        let packed: Vec<Option<u8>> = p.columns.iter().map(|m| m.packed).collect();
        assert_eq!(packed, vec![Some(3), Some(2), Some(1), Some(2), None, None]);
        // Spans of 17, 11 and 14 bits go bit by bit; 8 bits in one byte
        // stay a whole byte.
        let bits: Vec<Option<u8>> = p.columns.iter().map(|m| m.bits).collect();
        assert_eq!(bits, vec![Some(17), Some(11), None, Some(14), None, None]);
        assert_eq!(p.columns[1].len as usize, bitmap_len(n) + (11 * n).div_ceil(8));
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, n, Some(3)).unwrap();
        for c in 0..6 {
            assert_eq!(part.column_meta(c).unwrap().packed, packed[c], "parsed meta of column {c}");
        }
        assert_reads_back(&part, &schema, &rs);
        assert_partial_payloads(&part, &schema, &rs, &[false, true, false, true, false, false]);
        // Tallies size what plan builds, also after rows that widen the ranges.
        let p2 = assert_tallies_agree(&schema, &part, &p, &rs, 1, |i| (-70_000 + i as i32).to_le_bytes().to_vec());
        assert_eq!(p2.columns[1].packed, Some(3), "a wider range takes more bytes a row");
        // A packed width that is not narrower than the type, or on a
        // column that cannot be packed, is corruption.
        let (blk, off) = Geometry::unit_location(0);
        for (col, w) in [(1usize, 4u8), (1, 0), (5, 2)] {
            let mut bad = blocks.clone();
            let at = off + META_FIXED + META_COL * col;
            bad[blk][at + 14] |= F_PACKED;
            bad[blk][at + 15] = w;
            assert!(ColumnPart::parse(&g, views(&bad), p.total_units, n, Some(3)).is_err(), "column {col} width {w}");
        }
    }

    #[test]
    fn frame_values_go_bit_by_bit() {
        // Every width of span from 1 to 56 bits, for packed integers
        // (int8) and decimals, with and without NULLs, at row counts that
        // end inside a byte: every reader gets the values back, and a
        // column stores ceil(rows * bits / 8) bytes where bits save two or
        // more over whole bytes.
        use crate::test_rng::Rng;
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for bits in 1..=56u32 {
            let n = 300 + (bits as usize * 7) % 13;
            let span: u64 = (1u64 << bits) - 1;
            let schema = Schema::new(vec![ColumnDesc::fixed(8, MinMaxOrder::SignedInt), ColumnDesc::varlena()]).unwrap();
            let base = -(1i64 << 40);
            let rs: Vec<ColumnRow> = (0..n)
                .map(|i| {
                    // the range's ends, then random values within it
                    let off = match i {
                        0 => 0,
                        1 => span,
                        _ => rng.next() % (span + 1),
                    };
                    let null = bits % 3 == 0 && i % 11 == 5;
                    let dec = (off % (1u64 << bits.min(40))) as i64;
                    ColumnRow {
                        header: RowHeader { slot: i as u16, natts: 2, mvcc: Mvcc::default() },
                        row: Row {
                            values: vec![
                                (!null).then(|| (base.wrapping_add(off as i64)).to_le_bytes().to_vec()),
                                (!null).then(|| numeric(2, dec - 7)),
                            ],
                        },
                    }
                })
                .collect();
            let g = geo(64);
            let (blocks, p) = build(&g, &schema, &rs, 3).unwrap();
            let w = crate::varint::fixed_len(span as u128);
            let want_bits = (bits as usize + 2 <= 8 * w).then_some(bits as u8);
            if w < 8 {
                assert_eq!(p.columns[0].packed, Some(w as u8), "bits {bits}");
                assert_eq!(p.columns[0].bits, want_bits, "bits {bits}");
                let nulls = if p.columns[0].has_nulls { bitmap_len(n) } else { 0 };
                assert_eq!(p.columns[0].len as usize, nulls + frame_len(n, w, want_bits), "bits {bits}");
            }
            let part = ColumnPart::parse(&g, views(&blocks), p.total_units, n, Some(3)).unwrap();
            assert_eq!(part.column_meta(0).unwrap().bits, p.columns[0].bits);
            assert_eq!(part.column_meta(1).unwrap().bits, p.columns[1].bits);
            assert_reads_back(&part, &schema, &rs);
            assert_partial_payloads(&part, &schema, &rs, &[true, false]);
            assert_partial_payloads(&part, &schema, &rs, &[false, true]);
        }
        // The bits helpers on their own: every value survives a round trip
        // at every shift.
        for bits in [1usize, 3, 7, 8, 9, 13, 31, 33, 56] {
            let w = bits.div_ceil(8);
            let vals: Vec<u8> = (0..77u64).flat_map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & (u64::MAX >> (64 - bits))).to_le_bytes()[..w].to_vec()).collect();
            let mut packed = vec![0xaa];
            put_bits(&vals, w, bits, &mut packed);
            assert_eq!(packed.len(), 1 + (77 * bits).div_ceil(8));
            assert_eq!(packed[0], 0xaa);
            let mut back = vec![0u8; 77 * w];
            expand_bits(&packed[1..], w, bits, 77, &mut back);
            assert_eq!(back, vals, "bits {bits}");
        }
        // Dictionary codes: 1 to 64 entries bit by bit (1 to 6 bits), more
        // a byte each; varlena and fixed values, NULLs in some.
        for n_values in [1usize, 2, 3, 5, 8, 9, 33, 64, 65, 200] {
            let schema = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::fixed(3, MinMaxOrder::None)]).unwrap();
            let rows = 500 + n_values % 7;
            let rs: Vec<ColumnRow> = (0..rows)
                .map(|i| {
                    let v = (i * 7 + i / 3) % n_values;
                    let null = n_values % 2 == 1 && i % 13 == 6;
                    ColumnRow {
                        header: RowHeader { slot: i as u16, natts: 2, mvcc: Mvcc::default() },
                        row: Row { values: vec![(!null).then(|| format!("mode-{v:03}-padding-to-make-a-dictionary-pay").into_bytes()), Some(vec![v as u8, 1, 2])] },
                    }
                })
                .collect();
            let g = geo(64);
            let (blocks, p) = build(&g, &schema, &rs, 3).unwrap();
            assert!(p.columns[0].dict, "{n_values} values");
            let distinct = rs.iter().filter_map(|r| r.row.values[0].clone()).collect::<std::collections::HashSet<_>>().len();
            assert_eq!(p.columns[0].bits, code_bits(distinct), "{n_values} values, {distinct} distinct");
            assert_eq!(p.columns[0].bits.is_some(), n_values <= 64);
            let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rows, Some(3)).unwrap();
            assert_eq!(part.column_meta(0).unwrap().bits, p.columns[0].bits);
            assert_reads_back(&part, &schema, &rs);
            assert_partial_payloads(&part, &schema, &rs, &[true, false]);
            let p2 = assert_tallies_agree(&schema, &part, &p, &rs, 0, |i| format!("other-{i}").into_bytes());
            assert!(p2.total_units >= p.total_units);
        }
        assert_eq!(code_bits(1), Some(1));
        assert_eq!(code_bits(2), Some(1));
        assert_eq!(code_bits(3), Some(2));
        assert_eq!(code_bits(64), Some(6));
        assert_eq!(code_bits(65), None);
        assert_eq!(frame_bits(0, 1), Some(1));
        assert_eq!(frame_bits(63, 1), Some(6));
        assert_eq!(frame_bits(64, 1), None);
        assert_eq!(frame_bits(4095, 2), Some(12));
        assert_eq!(frame_bits(16383, 2), Some(14));
        assert_eq!(frame_bits(16384, 2), None);
    }

    /// The numeric bytes of `scaled / 10^dscale`.
    fn numeric(dscale: u8, scaled: i64) -> Vec<u8> {
        let mut out = [0u8; decimal::MAX_LEN];
        let n = decimal::write(Decimal { dscale, scaled }, &mut out).unwrap();
        out[..n].to_vec()
    }

    #[test]
    fn numeric_columns_are_scaled_integers() {
        // Prices at scale 2 with negatives and NULLs (decimal, 3 bytes a
        // row), numerics of two scales (plain), text (plain), and numerics
        // of few values far apart (a dictionary is shorter).
        let schema = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::varlena(), ColumnDesc::varlena(), ColumnDesc::varlena()]).unwrap();
        let n = 700usize;
        let rs: Vec<ColumnRow> = (0..n)
            .map(|i| ColumnRow {
                header: RowHeader { slot: i as u16, natts: 4, mvcc: Mvcc::default() },
                row: Row {
                    values: vec![
                        if i % 10 == 7 { None } else { Some(numeric(2, ((i * 7919) % 2_000_000) as i64 - 1000)) },
                        Some(numeric((i % 2) as u8, i as i64)),
                        Some(format!("{i}").into_bytes()),
                        Some(numeric(2, (i % 11) as i64 * 1_000_000_000_000)),
                    ],
                },
            })
            .collect();
        let g = geo(16);
        let (blocks, p) = build(&g, &schema, &rs, 3).unwrap();
        let frames: Vec<Option<DecimalFrame>> = p.columns.iter().map(|m| m.decimal).collect();
        assert_eq!(frames[0].map(|f| (f.dscale, f.width)), Some((2, 3)));
        assert_eq!(&frames[1..], &[None, None, None]);
        assert!(p.columns[3].dict);
        // About 2,000,000 apart: 21 bits a row, not 3 bytes.
        assert_eq!(p.columns[0].bits, Some(21));
        assert_eq!(p.columns[0].len as usize, bitmap_len(n) + (21 * n).div_ceil(8));
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, n, Some(3)).unwrap();
        assert_eq!(part.column_meta(0).unwrap().decimal, frames[0]);
        assert_eq!(part.column_meta(0).unwrap().bits, Some(21));
        assert_reads_back(&part, &schema, &rs);
        assert_partial_payloads(&part, &schema, &rs, &[true, false, false, true]);
        // Tallies size what plan builds, from the rows or from the part,
        // and after rows that widen the range or are not decimal.
        let p2 = assert_tallies_agree(&schema, &part, &p, &rs, 0, |i| numeric(2, 40_000_000 + i as i64));
        assert_eq!(p2.columns[0].decimal.map(|f| f.width), Some(4), "a wider range takes more bytes a row");
        let mut all = rs.clone();
        all.push(ColumnRow { header: RowHeader { slot: n as u16, ..rs[0].header }, row: rs[0].row.clone() });
        all[n].row.values[0] = Some(numeric(3, 5));
        let (_, p3) = build(&g, &schema, &all, 4).unwrap();
        assert_eq!(p3.columns[0].decimal, None, "a second scale makes the column plain");
        // A frame narrower than its range, on a column of another kind or
        // next to another encoding, is corruption; so is a stored offset
        // past the range.
        let (blk, off) = Geometry::unit_location(0);
        let at = off + META_FIXED;
        for (col, flags, w) in [(0usize, F_DECIMAL | F_NULLS, 2u8), (0, F_DECIMAL | F_NULLS | F_SHORT_ENDS, 3), (2, F_DECIMAL | F_SHORT_ENDS, 3), (0, F_DECIMAL | F_NULLS, 9)] {
            let mut bad = blocks.clone();
            bad[blk][at + META_COL * col + 14] = flags;
            bad[blk][at + META_COL * col + 15] = w;
            assert!(ColumnPart::parse(&g, views(&bad), p.total_units, n, Some(3)).is_err(), "column {col} flags {flags:#x} width {w}");
        }
        let mut bad = blocks.clone();
        let (dblk, doff) = Geometry::unit_location(p.columns[0].first_unit as usize);
        let first = doff + bitmap_len(n);
        bad[dblk][first..first + 3].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
        let part = ColumnPart::parse(&g, views(&bad), p.total_units, n, Some(3)).unwrap();
        assert!(part.value(0, 0).is_err());
        let mut stream = Vec::new();
        assert!(part.column_values(0, &mut stream).is_err());
    }

    #[test]
    fn varlena_end_offsets_are_u16_below_64kb() {
        // 300 values of 200 bytes (60,000 bytes) take u16 end offsets, 400
        // (80,000) u32 ones; both read back, and tallies size them as
        // plan does.
        let schema = Schema::new(vec![ColumnDesc::fixed(4, MinMaxOrder::None), ColumnDesc::varlena()]).unwrap();
        let g = geo(16);
        for (n, short) in [(300usize, true), (400, false)] {
            let rs: Vec<ColumnRow> = (0..n)
                .map(|i| ColumnRow {
                    header: RowHeader { slot: i as u16, natts: 2, mvcc: Mvcc::default() },
                    row: Row { values: vec![Some((i as u32).to_le_bytes().to_vec()), if i % 11 == 5 { None } else { Some(vec![(i % 251) as u8; 200 + i % 3]) }] },
                })
                .collect();
            let (blocks, p) = build(&g, &schema, &rs, 2).unwrap();
            assert_eq!(p.columns[1].short_ends, short, "{n} rows");
            let part = ColumnPart::parse(&g, views(&blocks), p.total_units, n, Some(2)).unwrap();
            assert_eq!(part.column_meta(1).unwrap().short_ends, short);
            assert_reads_back(&part, &schema, &rs);
            let mut want = SizeTally::new(&schema);
            for r in &rs {
                want.add(&schema, r).unwrap();
            }
            assert_eq!(want.units(&schema).unwrap(), (n, p.total_units));
            assert_eq!(SizeTally::of_part(&schema, &part).unwrap().units(&schema).unwrap(), (n, p.total_units));
        }
        // Short offsets on a fixed column are corruption.
        let rs: Vec<ColumnRow> = (0..10usize)
            .map(|i| ColumnRow { header: RowHeader { slot: i as u16, natts: 2, mvcc: Mvcc::default() }, row: Row { values: vec![Some(vec![1, 2, 3, 4]), Some(vec![7; 3])] } })
            .collect();
        let (mut blocks, p) = build(&g, &schema, &rs, 2).unwrap();
        let (blk, off) = Geometry::unit_location(0);
        blocks[blk][off + META_FIXED + 14] |= F_SHORT_ENDS;
        assert!(ColumnPart::parse(&g, views(&blocks), p.total_units, 10, Some(2)).is_err());
    }

    /// `n` one-column rows, row i holding `value(i, x)` for the next `x`
    /// of a xorshift stream seeded by `seed`, or NULL where the stream says.
    fn xorshift_rows(n: usize, seed: u64, mut value: impl FnMut(usize, u64) -> Vec<u8>) -> Vec<ColumnRow> {
        let mut x = seed | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = value(i, x);
                ColumnRow { header: RowHeader { slot: i as u16, natts: 1, mvcc: Mvcc::default() }, row: Row { values: vec![(x % 13 != 3).then_some(v)] } }
            })
            .collect()
    }

    /// Column 0 in `ValueForm::AlignedDatum`: every value is the stored
    /// one with a 4-byte varlena header in place of the 1-byte one,
    /// beginning at a multiple of 4 from the stream's start, where the
    /// column is decimal; as stored where it is not.
    fn assert_aligned_form(schema: &Schema, rs: &[ColumnRow]) {
        let g = geo(16);
        let (blocks, p) = build(&g, schema, rs, 1).unwrap();
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), Some(1)).unwrap();
        let mut stream = Vec::new();
        let values = part.column_values_as(0, &mut stream, ValueForm::AlignedDatum).unwrap();
        let start = values.stream.as_ptr() as usize;
        // The bulk reader agrees with `get`, over every row and over a
        // subset (the visible rows of a part).
        let mut seen = Vec::new();
        values.each_of((0..rs.len()).map(|r| (r, r)), |i, v| seen.push((i, v))).unwrap();
        assert_eq!(seen, (0..rs.len()).map(|r| (r, values.get(r).unwrap())).collect::<Vec<_>>());
        let some: Vec<usize> = (0..rs.len()).filter(|r| r % 3 != 1).collect();
        let mut seen = Vec::new();
        values.each_of(some.iter().copied().enumerate(), |i, v| seen.push((i, v))).unwrap();
        assert_eq!(seen, some.iter().enumerate().map(|(i, &r)| (i, values.get(r).unwrap())).collect::<Vec<_>>());
        assert!(values.each_of(std::iter::once((0, rs.len())), |_, _| {}).is_err(), "a row past the part is an error");
        for (r, row) in rs.iter().enumerate() {
            let got = values.get(r).unwrap();
            let want = row.row.values[0].as_deref();
            match (p.columns[0].decimal.is_some(), got, want) {
                (true, Some(got), Some(want)) => {
                    assert_eq!((got.as_ptr() as usize - start) % 4, 0, "row {r} aligned");
                    assert_eq!(u32::from_le_bytes(got[..4].try_into().unwrap()) as usize, got.len() << 2, "row {r} header");
                    assert_eq!(&got[4..], &want[1..], "row {r} bytes");
                }
                (_, got, want) => assert_eq!(got, want, "row {r}"),
            }
        }
    }

    /// Decimals of one stored byte a row (spans up to 254, TPC-H's
    /// quantities and discounts) come out of `ValueForm::AlignedDatum` as
    /// a table of their range's numerics; a span of 255 or more, or
    /// two-byte rows, as a numeric written per row. Either way each row
    /// reads back as stored, NULLs included.
    #[test]
    fn small_decimal_spans_read_as_a_table() {
        let schema = Schema::new(vec![ColumnDesc::varlena()]).unwrap();
        for (dscale, base, span) in [(2u8, 0i64, 10u64), (0, 1, 49), (2, -500, 254), (2, 7, 255), (4, 123_456, 1000), (0, 5, 0)] {
            let rs = xorshift_rows(900, span ^ 77, |_, x| numeric(dscale, base + (x % (span + 1)) as i64));
            let g = geo(16);
            let (blocks, p) = build(&g, &schema, &rs, 1).unwrap();
            let frame = p.columns[0].decimal.expect("a decimal column");
            let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), Some(1)).unwrap();
            let mut stream = Vec::new();
            let values = part.column_values_as(0, &mut stream, ValueForm::AlignedDatum).unwrap();
            assert_eq!(values.dict.is_some(), frame.width == 1 && span < 255, "span {span}: table or not");
            drop(values);
            assert_aligned_form(&schema, &rs);
        }
    }

    /// Builds the part of `rs`, checks that every reader gets them back
    /// and that a tally of the rows sizes the part as plan does; returns
    /// the plan and the (rows, units) the tally of the built part says.
    fn check_one_column(schema: &Schema, rs: &[ColumnRow]) -> (Plan, (usize, usize)) {
        let g = geo(16);
        let (blocks, p) = build(&g, schema, rs, 1).unwrap();
        let part = ColumnPart::parse(&g, views(&blocks), p.total_units, rs.len(), Some(1)).unwrap();
        assert_reads_back(&part, schema, rs);
        let mut t = SizeTally::new(schema);
        for r in rs {
            t.add(schema, r).unwrap();
        }
        assert_eq!(t.units(schema).unwrap(), (rs.len(), p.total_units));
        let of_part = SizeTally::of_part(schema, &part).unwrap().units(schema).unwrap();
        (p, of_part)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Any integer column (2, 4 or 8 bytes, either signedness), any base
        /// and span, with NULLs: the part reads back what went in, whether
        /// or not it was packed, and tallies size it as plan does.
        #[test]
        fn integer_columns_round_trip(width in proptest::sample::select(vec![2u16, 4, 8]), signed in proptest::bool::ANY,
                                      base in proptest::num::i64::ANY, span_bits in 0u32..64, seed in proptest::num::u64::ANY,
                                      n in 1usize..600) {
            let order = if signed { MinMaxOrder::SignedInt } else { MinMaxOrder::UnsignedInt };
            let schema = Schema::new(vec![ColumnDesc::fixed(width, order)]).unwrap();
            let rs = xorshift_rows(n, seed, |_, x| {
                let off = if span_bits == 0 { 0 } else { x & (u64::MAX >> (64 - span_bits)) };
                (base as u64).wrapping_add(off).to_le_bytes()[..width as usize].to_vec()
            });
            let (p, of_part) = check_one_column(&schema, &rs);
            proptest::prop_assert_eq!(of_part, (n, p.total_units));
        }

        /// Numerics of any scale, base and span, with NULLs and sometimes
        /// a value of another scale or not a numeric: the part reads back
        /// what went in, decimal or not, and tallies size it as plan does.
        #[test]
        fn decimal_columns_round_trip(dscale in 0u8..=63, base in (i64::MIN / 2)..(i64::MAX / 2), span_bits in 0u32..62,
                                      seed in proptest::num::u64::ANY, n in 1usize..600, odd in 0usize..3) {
            let schema = Schema::new(vec![ColumnDesc::varlena()]).unwrap();
            let rs = xorshift_rows(n, seed, |i, x| {
                let off = if span_bits == 0 { 0 } else { x & (u64::MAX >> (64 - span_bits)) };
                match (odd, i == n / 2) {
                    (1, true) => numeric(dscale ^ 1, 1),
                    (2, true) => b"\x0bhello".to_vec(),
                    _ => numeric(dscale, base.wrapping_add(off as i64)),
                }
            });
            let (p, of_part) = check_one_column(&schema, &rs);
            // A plain part's tally counts it as plain (it may overstate).
            if p.columns[0].decimal.is_some() || p.columns[0].dict {
                proptest::prop_assert_eq!(of_part, (n, p.total_units));
            }
            assert_aligned_form(&schema, &rs);
        }
    }
}
