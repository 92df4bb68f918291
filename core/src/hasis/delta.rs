//! Delta blocks: the row-format part of a hybrid page.
//!
//! Items (row versions) are appended back to back after an 8-byte header;
//! everything after `used_end` is zero. That is the paper's delta page
//! ("tuples stored one after another ... the reserved space is filled by
//! all zeros") and it suits PostgreSQL too: the glue sets
//! `pd_lower = used_end`, `pd_upper = pd_special`, so a full-page image
//! skips the zero tail, and the drive stores an untouched 4 KB half for
//! free. Items never move inside a version of the page, so the slot
//! directory addresses them by byte offset; only their MVCC fields change
//! in place (delete, update, lock, freeze, hint bits).
//!
//! ```text
//! 24  2  nitems
//! 26  2  used_end   first free byte; items tile [32, used_end)
//! 28  4  reserved, 0
//! 32 ..  items: item_len u16 | row header (26) | row-format payload
//! ```

use super::layout::{rd16, wr16, BlockKind, BlockTrailer, Geometry, BODY_END, BODY_START};
use super::row::{Mvcc, RowHeader, MVCC_OFF, ROW_HEADER};
use super::{corrupt, Error, Result};

/// First item byte.
pub const ITEMS_START: usize = BODY_START + 8;
/// Item length prefix plus row header.
pub const ITEM_HDR: usize = 2 + ROW_HEADER;
/// Largest item.
pub const MAX_ITEM: usize = BODY_END - ITEMS_START;
/// Largest row-format payload (null bitmap + values) a row may have: rows
/// wider than this are `Error::RowTooWide`, which the glue reports as an
/// ERROR (TOAST runs before the table AM sees a row, so this is a schema
/// with too many wide non-toastable columns).
pub const MAX_PAYLOAD: usize = MAX_ITEM - ITEM_HDR;

/// Encodes one item.
pub fn encode_item(header: &RowHeader, payload: &[u8]) -> Result<Vec<u8>> {
    if payload.len() > MAX_PAYLOAD {
        return Err(Error::RowTooWide { len: payload.len(), max: MAX_PAYLOAD });
    }
    let len = ITEM_HDR + payload.len();
    let mut out = vec![0u8; len];
    wr16(&mut out, 0, len as u16);
    header.encode(&mut out[2..ITEM_HDR]);
    out[ITEM_HDR..].copy_from_slice(payload);
    Ok(out)
}

/// Payloads shorter than this go into WAL records as they are.
const PACK_MIN_PAYLOAD: usize = 48;

/// A payload as WAL records carry it: LZ4-compressed when that saves at
/// least 8 bytes (a blank-padded `char(n)`, repeated values), else None
/// (logged as it is). PostgreSQL's `wal_compression` only compresses page
/// images, and a row's own bytes are most of an insert's record.
pub fn pack_payload(payload: &[u8]) -> Option<Vec<u8>> {
    (payload.len() >= PACK_MIN_PAYLOAD).then(|| lz4_flex::block::compress(payload)).filter(|c| c.len() + 8 <= payload.len())
}

/// The payload of `plain` bytes that `pack_payload` compressed into `c`;
/// anything malformed is `Error::Corrupt`.
pub fn unpack_payload(c: &[u8], plain: usize) -> Result<Vec<u8>> {
    let payload = lz4_flex::block::decompress(c, plain).map_err(|_| Error::Corrupt("packed payload does not decompress"))?;
    if payload.len() != plain {
        return corrupt("packed payload decompresses to another length");
    }
    Ok(payload)
}

/// An item as a format 1 INSERT record carried it: the item header
/// (length and row header) verbatim, then the payload, packed when
/// `pack_payload` says so. Returns whether it compressed.
#[cfg(test)]
pub fn pack_item(item: &[u8]) -> (bool, Vec<u8>) {
    match pack_payload(&item[ITEM_HDR..]) {
        Some(c) => (true, [&item[..ITEM_HDR], &c[..]].concat()),
        None => (false, item.to_vec()),
    }
}

/// The item of a format 1 INSERT record; anything malformed is
/// `Error::Corrupt`.
pub fn unpack_item(compressed: bool, packed: &[u8]) -> Result<Vec<u8>> {
    if packed.len() < ITEM_HDR {
        return corrupt("packed delta item too short");
    }
    let len = rd16(packed, 0) as usize;
    if !(ITEM_HDR..=ITEM_HDR + MAX_PAYLOAD).contains(&len) {
        return corrupt("packed delta item has a bad length");
    }
    if !compressed {
        if packed.len() != len {
            return corrupt("packed delta item length mismatch");
        }
        return Ok(packed.to_vec());
    }
    let payload = unpack_payload(&packed[ITEM_HDR..], len - ITEM_HDR)?;
    Ok([&packed[..ITEM_HDR], &payload[..]].concat())
}

/// Makes block `i` of the delta part an empty delta block of `version`.
pub fn init_block(block: &mut [u8], g: &Geometry, i: usize, version: u32) {
    block[BODY_START..].fill(0);
    wr16(block, BODY_START + 2, ITEMS_START as u16);
    BlockTrailer { kind: BlockKind::Delta, index: g.delta_block(i) as u16, version }.write(block);
}

/// One item, borrowed from its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaItem<'a> {
    pub offset: u16,
    pub header: RowHeader,
    pub payload: &'a [u8],
    /// The whole item, as `encode_item` made it.
    pub bytes: &'a [u8],
}

/// A checked view of a delta block.
#[derive(Clone, Copy, Debug)]
pub struct DeltaView<'a> {
    b: &'a [u8],
    nitems: usize,
    used_end: usize,
}

fn counters(b: &[u8]) -> Result<(usize, usize)> {
    let nitems = rd16(b, BODY_START) as usize;
    let used_end = rd16(b, BODY_START + 2) as usize;
    if !(ITEMS_START..=BODY_END).contains(&used_end) {
        return corrupt("delta block used_end out of range");
    }
    Ok((nitems, used_end))
}

fn item_at(b: &[u8], off: usize, used_end: usize) -> Result<DeltaItem<'_>> {
    if off < ITEMS_START || off + ITEM_HDR > used_end {
        return corrupt("delta item offset out of range");
    }
    let len = rd16(b, off) as usize;
    if len < ITEM_HDR || off + len > used_end {
        return corrupt("delta item length out of range");
    }
    Ok(DeltaItem {
        offset: off as u16,
        header: RowHeader::decode(&b[off + 2..off + ITEM_HDR]),
        payload: &b[off + ITEM_HDR..off + len],
        bytes: &b[off..off + len],
    })
}

impl<'a> DeltaView<'a> {
    /// Checks the trailer (kind, place, and `version` if given) and that
    /// the items tile the used area exactly.
    pub fn parse(b: &'a [u8], g: &Geometry, i: usize, version: Option<u32>) -> Result<DeltaView<'a>> {
        BlockTrailer::check(b, BlockKind::Delta, g.delta_block(i), version)?;
        let (nitems, used_end) = counters(b)?;
        let v = DeltaView { b, nitems, used_end };
        let mut off = ITEMS_START;
        let mut n = 0;
        while off < used_end {
            off += item_at(b, off, used_end)?.bytes.len();
            n += 1;
        }
        if n != nitems {
            return corrupt("delta block item count does not match its items");
        }
        if b[used_end..BODY_END].iter().any(|&x| x != 0) {
            return corrupt("delta block has bytes past used_end");
        }
        Ok(v)
    }

    /// Checks only the trailer and the counters, for readers that go to
    /// one item (`item`: bounds-checked, and callers cross-check the slot
    /// it carries) or walk the items (`items`: each one bounds-checked as
    /// it is met). Walking every item and the zero tail on each point read
    /// cost a fifth of an update-heavy workload's CPU; `parse` keeps the
    /// full check for verification and compaction.
    pub fn open(b: &'a [u8], g: &Geometry, i: usize, version: Option<u32>) -> Result<DeltaView<'a>> {
        BlockTrailer::check(b, BlockKind::Delta, g.delta_block(i), version)?;
        let (nitems, used_end) = counters(b)?;
        Ok(DeltaView { b, nitems, used_end })
    }

    pub fn len(&self) -> usize {
        self.nitems
    }
    pub fn is_empty(&self) -> bool {
        self.nitems == 0
    }
    pub fn used_end(&self) -> usize {
        self.used_end
    }
    /// Bytes still free for appends.
    pub fn free(&self) -> usize {
        BODY_END - self.used_end
    }

    /// The item starting at byte `offset` (from a directory entry).
    pub fn item(&self, offset: u16) -> Result<DeltaItem<'a>> {
        item_at(self.b, offset as usize, self.used_end)
    }

    /// Items in append order.
    pub fn items(&self) -> DeltaIter<'a> {
        DeltaIter { b: self.b, off: ITEMS_START, used_end: self.used_end }
    }
}

pub struct DeltaIter<'a> {
    b: &'a [u8],
    off: usize,
    used_end: usize,
}

impl<'a> Iterator for DeltaIter<'a> {
    type Item = Result<DeltaItem<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.off >= self.used_end {
            return None;
        }
        let r = item_at(self.b, self.off, self.used_end);
        match &r {
            Ok(it) => self.off += it.bytes.len(),
            Err(_) => self.off = self.used_end,
        }
        Some(r)
    }
}

/// Bytes free in an initialized delta block.
pub fn free_space(block: &[u8]) -> Result<usize> {
    let (_, used_end) = counters(block)?;
    Ok(BODY_END - used_end)
}

/// Appends `item` (from `encode_item`) and returns its offset, or
/// `Error::NoSpace`. The block must be initialized (the caller checked its
/// trailer).
pub fn append(block: &mut [u8], item: &[u8]) -> Result<u16> {
    let (nitems, used_end) = counters(block)?;
    check_item(item)?;
    if item.len() > BODY_END - used_end {
        return Err(Error::NoSpace);
    }
    block[used_end..used_end + item.len()].copy_from_slice(item);
    wr16(block, BODY_START, (nitems + 1) as u16);
    wr16(block, BODY_START + 2, (used_end + item.len()) as u16);
    Ok(used_end as u16)
}

/// Redo of an append: the item must land at `offset`, where the primary
/// put it, so the directory entry in the same WAL record stays right.
pub fn append_at(block: &mut [u8], offset: u16, item: &[u8]) -> Result<()> {
    let (_, used_end) = counters(block)?;
    if used_end != offset as usize {
        return corrupt("delta append redo: block is not where the record expects");
    }
    append(block, item).map(|_| ())
}

fn check_item(item: &[u8]) -> Result<()> {
    if item.len() < ITEM_HDR || item.len() > MAX_ITEM || rd16(item, 0) as usize != item.len() {
        return Err(Error::BadInput("not an encoded delta item"));
    }
    Ok(())
}

/// The byte offset of the item whose MVCC fields are at byte `mvcc_at`
/// (where a stamp writes them).
pub fn item_offset_of_mvcc(mvcc_at: usize) -> Option<u16> {
    mvcc_at.checked_sub(2 + MVCC_OFF).and_then(|o| u16::try_from(o).ok())
}

/// The payload of the item at `offset` of an initialized delta block,
/// bounds-checked (a HOT update's old version, which its UPDATE record
/// logs a diff against).
pub fn payload_at(block: &[u8], offset: u16) -> Result<&[u8]> {
    let (_, used_end) = counters(block)?;
    Ok(item_at(block, offset as usize, used_end)?.payload)
}

/// Overwrites the MVCC fields of the item at `offset` in place (delete,
/// update, lock, freeze: heap's in-place tuple header changes).
pub fn set_mvcc(block: &mut [u8], offset: u16, mvcc: &Mvcc) -> Result<()> {
    let (_, used_end) = counters(block)?;
    item_at(block, offset as usize, used_end)?;
    let at = offset as usize + 2 + MVCC_OFF;
    mvcc.encode(&mut block[at..at + super::row::MVCC_LEN]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hasis::layout::{Params, BLCKSZ};
    use crate::tid::Tid;

    fn geo() -> Geometry {
        Geometry::new(Params::default()).unwrap()
    }

    fn hdr(slot: u16) -> RowHeader {
        RowHeader { slot, natts: 1, mvcc: Mvcc { xmin: 5, ctid: Tid::new(1, 1), ..Mvcc::default() } }
    }

    #[test]
    fn append_read_stamp_roundtrip() {
        let g = geo();
        let mut b = vec![0u8; BLCKSZ];
        init_block(&mut b, &g, 1, 4);
        let mut offs = vec![];
        for s in 0..10u16 {
            let item = encode_item(&hdr(s), &vec![s as u8; s as usize]).unwrap();
            offs.push(append(&mut b, &item).unwrap());
        }
        let m = Mvcc { xmin: 5, xmax: 77, cid: 1, ctid: Tid::new(3, 4), infomask: 0x100, infomask2: 2 };
        set_mvcc(&mut b, offs[3], &m).unwrap();
        let v = DeltaView::parse(&b, &g, 1, Some(4)).unwrap();
        assert_eq!(v.len(), 10);
        for (s, (it, off)) in v.items().zip(&offs).enumerate() {
            let it = it.unwrap();
            assert_eq!(it.offset, *off);
            assert_eq!(it.header.slot, s as u16);
            assert_eq!(it.payload, &vec![s as u8; s][..]);
            assert_eq!(v.item(*off).unwrap(), it);
        }
        assert_eq!(v.item(offs[3]).unwrap().header.mvcc, m);
        assert!(matches!(DeltaView::parse(&b, &g, 1, Some(5)), Err(Error::VersionMismatch { .. })));
        assert!(DeltaView::parse(&b, &g, 0, None).is_err());
    }

    /// The example in README.md, byte for byte.
    #[test]
    fn readme_item_example() {
        use crate::hasis::row::{encode_payload, ColumnDesc, MinMaxOrder, Row, Schema};
        let s = Schema::new(vec![ColumnDesc::fixed(4, MinMaxOrder::SignedInt), ColumnDesc::varlena()]).unwrap();
        let row = Row::new(vec![Some(42i32.to_le_bytes().to_vec()), Some(b"hi".to_vec())]);
        let h = RowHeader { slot: 3, natts: 2, mvcc: Mvcc { xmin: 700, ctid: Tid::new(9, 4), ..Mvcc::default() } };
        let item = encode_item(&h, &encode_payload(&s, &row).unwrap()).unwrap();
        #[rustfmt::skip]
        let want = [
            0x25, 0x00,  0x03, 0x00,  0x02, 0x00,
            0xbc, 0x02, 0x00, 0x00,  0, 0, 0, 0,  0, 0, 0, 0,
            0x09, 0x00, 0x00, 0x00,  0x04, 0x00,  0x00, 0x00,  0x00, 0x00,
            0x00,  0x2a, 0x00, 0x00, 0x00,  0x02, 0x00, b'h', b'i',
        ];
        assert_eq!(item, want);
    }

    #[test]
    fn fills_to_the_byte_and_rejects_wide_rows() {
        let g = geo();
        let mut b = vec![0u8; BLCKSZ];
        init_block(&mut b, &g, 0, 1);
        let widest = encode_item(&hdr(0), &vec![1; MAX_PAYLOAD]).unwrap();
        assert_eq!(widest.len(), MAX_ITEM);
        assert!(matches!(encode_item(&hdr(0), &vec![1; MAX_PAYLOAD + 1]), Err(Error::RowTooWide { .. })));
        assert_eq!(append(&mut b, &widest).unwrap() as usize, ITEMS_START);
        assert_eq!(free_space(&b).unwrap(), 0);
        let small = encode_item(&hdr(1), &[]).unwrap();
        assert_eq!(append(&mut b, &small), Err(Error::NoSpace));
        assert_eq!(DeltaView::parse(&b, &g, 0, None).unwrap().len(), 1);
    }

    #[test]
    fn redo_append_checks_position() {
        let g = geo();
        let mut b = vec![0u8; BLCKSZ];
        init_block(&mut b, &g, 0, 1);
        let item = encode_item(&hdr(0), b"abc").unwrap();
        assert!(append_at(&mut b, 40, &item).is_err());
        append_at(&mut b, ITEMS_START as u16, &item).unwrap();
        assert!(append(&mut b, &item[1..]).is_err());
    }

    #[test]
    fn packed_items_roundtrip() {
        let h = RowHeader { slot: 3, natts: 4, mvcc: Mvcc { xmin: 9, ..Mvcc::default() } };
        let blank = [vec![0u8, 1, 0, 0, 0], vec![b' '; 84]].concat();
        let random: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for payload in [&b"short"[..], &blank[..], &random[..], &[7u8; MAX_PAYLOAD][..]] {
            let item = encode_item(&h, payload).unwrap();
            let (c, packed) = pack_item(&item);
            assert_eq!(c, payload.len() >= 48 && payload != &random[..], "{}", payload.len());
            assert!(packed.len() <= item.len());
            assert_eq!(unpack_item(c, &packed).unwrap(), item);
            // Truncated or bit-flipped packed items are errors, not panics.
            for cut in [0, 1, ITEM_HDR - 1, packed.len().saturating_sub(1)] {
                let _ = unpack_item(c, &packed[..cut]);
            }
            for i in 0..packed.len().min(64) {
                let mut m = packed.clone();
                m[i] ^= 0x5a;
                if let Ok(u) = unpack_item(c, &m) {
                    assert_eq!(u.len(), rd16(&u, 0) as usize);
                }
            }
        }
    }

    #[test]
    fn open_checks_trailer_and_bounds_only() {
        let g = Geometry::new(Params::default()).unwrap();
        let mut b = vec![0u8; BLCKSZ];
        init_block(&mut b, &g, 0, 3);
        let h = RowHeader { slot: 9, natts: 1, mvcc: Mvcc::default() };
        let item = encode_item(&h, &[0, 1, 2, 3, 4]).unwrap();
        let off = append(&mut b, &item).unwrap();
        let v = DeltaView::open(&b, &g, 0, Some(3)).unwrap();
        assert_eq!(v.item(off).unwrap().header.slot, 9);
        assert!(v.item(off + 1).is_err() || v.item(off + 1).unwrap().header.slot != 9);
        assert!(v.item(8000).is_err());
        assert!(matches!(DeltaView::open(&b, &g, 0, Some(4)), Err(Error::VersionMismatch { .. })));
        assert!(DeltaView::open(&b, &g, 1, None).is_err());
    }

    #[test]
    fn corrupt_blocks_give_errors() {
        let g = geo();
        let mut b = vec![0u8; BLCKSZ];
        init_block(&mut b, &g, 0, 1);
        for s in 0..3 {
            append(&mut b, &encode_item(&hdr(s), b"xyz").unwrap()).unwrap();
        }
        let mut cases = vec![];
        let mut m = b.clone();
        wr16(&mut m, BODY_START, 2);
        cases.push(m); // wrong count
        let mut m = b.clone();
        wr16(&mut m, BODY_START + 2, 8000);
        cases.push(m); // used_end past the items
        let mut m = b.clone();
        wr16(&mut m, BODY_START + 2, 9000);
        cases.push(m); // used_end past the body
        let mut m = b.clone();
        wr16(&mut m, ITEMS_START, 5);
        cases.push(m); // item shorter than its header
        let mut m = b.clone();
        wr16(&mut m, ITEMS_START, 7000);
        cases.push(m); // item past used_end
        let mut m = b.clone();
        m[BODY_END - 1] = 1;
        cases.push(m); // garbage in the zero tail
        for (i, m) in cases.iter().enumerate() {
            assert!(DeltaView::parse(m, &g, 0, None).is_err(), "case {i}");
        }
        let v = DeltaView::parse(&b, &g, 0, None).unwrap();
        assert!(v.item(0).is_err());
        assert!(v.item(v.used_end() as u16).is_err());
        let used_end = v.used_end();
        assert!(set_mvcc(&mut b, 8100, &Mvcc::default()).is_err());
        // Every single-byte corruption of the used area is an error or a
        // clean parse, never a panic.
        for pos in BODY_START..used_end {
            let mut m = b.clone();
            m[pos] ^= 0xa5;
            if let Ok(v) = DeltaView::parse(&m, &g, 0, None) {
                for it in v.items() {
                    let _ = it;
                }
            }
        }
    }
}
