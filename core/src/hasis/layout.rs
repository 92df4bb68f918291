//! Extent geometry: block sizes, the 16-byte block trailer every block
//! carries (magic, format, kind, index, page version), the 4 KB units of the
//! column part, the size parameters, and the slot <-> TID mapping.
//!
//! Every block is an 8 KB PostgreSQL page. Bytes `[0, 24)` are the standard
//! page header and belong to the glue (LSN, checksum, pd_lower/pd_upper);
//! nothing here reads or writes them. The trailer sits in the page's special
//! area, `[8176, 8192)`, as index AMs keep their opaque data, so
//! `pd_special = 8176` on every initialized block.

use super::{corrupt, Error, Result};
use crate::tid::Tid;

/// PostgreSQL block size.
pub const BLCKSZ: usize = 8192;
/// PostgreSQL's page header (`SizeOfPageHeaderData`), owned by the glue.
pub const PAGE_HEADER: usize = 24;
/// Bytes of the block trailer in the special area.
pub const TRAILER: usize = 16;
/// Where the trailer starts (`pd_special`).
pub const TRAILER_OFF: usize = BLCKSZ - TRAILER;
/// First byte a block format may use.
pub const BODY_START: usize = PAGE_HEADER;
/// One past the last byte a block format may use.
pub const BODY_END: usize = TRAILER_OFF;

/// The compressing drive's block: the column part is allocated in these.
pub const UNIT: usize = 4096;
/// Units per PostgreSQL block.
pub const UNITS_PER_BLOCK: usize = BLCKSZ / UNIT;
/// Payload bytes of every unit. The first unit of a block loses the page
/// header, the second the trailer (and 8 pad bytes), so both carry the same
/// 4072 bytes: unit capacity is then one number and a column's unit count
/// does not depend on which half of a block it starts in.
pub const UNIT_PAYLOAD: usize = UNIT - PAGE_HEADER;

/// PostgreSQL's MaxHeapTuplesPerPage for 8 KB blocks: bitmap scans keep at
/// most this many offsets per block, so no TID offset may exceed it.
pub const MAX_OFFSET: u16 = 291;

/// "HSIS", little-endian, first four bytes of every trailer.
pub const MAGIC: u32 = 0x5349_5348;
/// Format version written into every block's trailer. Format 2 added the
/// relative column directory entry (tag 5, header.rs) and compact row
/// headers in column parts (column.rs, `MF_COMPACT_HEADERS`); a block of
/// format 1 holds neither, and readers take both formats. A reader of
/// format 1 alone refuses the blocks written since, instead of misreading
/// them.
pub const FORMAT_VERSION: u8 = 2;
/// The oldest block format readers take.
pub const FORMAT_OLDEST: u8 = 1;

/// Page versions start here; 0 in a trailer never occurs in a valid block.
pub const FIRST_VERSION: u32 = 1;

/// Byte offset inside its block of the payload of the block's unit `half`
/// (0: the first 4 KB, 1: the second).
#[inline]
pub const fn unit_start(half: usize) -> usize {
    if half == 0 {
        PAGE_HEADER
    } else {
        UNIT
    }
}

/// What a block of an extent is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlockKind {
    Header = 1,
    Directory = 2,
    Column = 3,
    Delta = 4,
}

impl BlockKind {
    fn from_u8(b: u8) -> Option<BlockKind> {
        match b {
            1 => Some(BlockKind::Header),
            2 => Some(BlockKind::Directory),
            3 => Some(BlockKind::Column),
            4 => Some(BlockKind::Delta),
            _ => None,
        }
    }
}

/// The trailer of one block.
///
/// ```text
/// 8176  4  magic    "HSIS"
/// 8180  1  format   FORMAT_VERSION
/// 8181  1  kind     BlockKind
/// 8182  2  index    block index inside the extent
/// 8184  4  version  page version the block belongs to
/// 8188  4  reserved, 0
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTrailer {
    pub kind: BlockKind,
    pub index: u16,
    pub version: u32,
}

impl BlockTrailer {
    pub fn write(&self, block: &mut [u8]) {
        let t = &mut block[TRAILER_OFF..BLCKSZ];
        t[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        t[4] = FORMAT_VERSION;
        t[5] = self.kind as u8;
        t[6..8].copy_from_slice(&self.index.to_le_bytes());
        t[8..12].copy_from_slice(&self.version.to_le_bytes());
        t[12..16].fill(0);
    }

    /// Reads a trailer: `Ok(None)` for a never-initialized (all-zero
    /// trailer) block, an error for anything else that is not a trailer.
    pub fn read(block: &[u8]) -> Result<Option<BlockTrailer>> {
        if block.len() != BLCKSZ {
            return corrupt("block is not 8192 bytes");
        }
        let t = &block[TRAILER_OFF..BLCKSZ];
        if t.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if rd32(t, 0) != MAGIC {
            return Err(Error::BadMagic);
        }
        if !(FORMAT_OLDEST..=FORMAT_VERSION).contains(&t[4]) {
            return Err(Error::BadFormatVersion(t[4]));
        }
        let kind = match BlockKind::from_u8(t[5]) {
            Some(k) => k,
            None => return corrupt("unknown block kind"),
        };
        let version = rd32(t, 8);
        if version < FIRST_VERSION {
            return corrupt("page version 0 in a block trailer");
        }
        Ok(Some(BlockTrailer { kind, index: rd16(t, 6), version }))
    }

    /// Reads and checks a trailer that must exist and be of `kind` at
    /// `index`. With `version`, a block of another page version gives
    /// `Error::VersionMismatch`: the reader must restart from the header.
    /// A zero block counts as version 0 then: compaction zeroes the column
    /// and delta blocks the new version no longer uses, so a reader of the
    /// old version can meet one. (If the header still has the version the
    /// reader expected, the glue reports corruption instead of restarting.)
    pub fn check(block: &[u8], kind: BlockKind, index: usize, version: Option<u32>) -> Result<BlockTrailer> {
        let t = match (Self::read(block)?, version) {
            (Some(t), _) => t,
            (None, Some(v)) => return Err(Error::VersionMismatch { expected: v, found: 0 }),
            (None, None) => return corrupt("expected block is not initialized"),
        };
        if t.kind != kind {
            return corrupt("block of the wrong kind");
        }
        if t.index as usize != index {
            return corrupt("block index in trailer does not match its place");
        }
        if let Some(v) = version {
            if t.version != v {
                return Err(Error::VersionMismatch { expected: v, found: t.version });
            }
        }
        Ok(t)
    }
}

#[inline]
pub(crate) fn rd16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub(crate) fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
#[inline]
pub(crate) fn wr16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The size parameters of a hybrid page (future reloptions). See README.md
/// "Defaults" for why these numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Blocks of the column part (two 4 KB units each). Default 16 = the
    /// paper's 128 KB data page.
    pub column_blocks: u16,
    /// Delta blocks, all preallocated, zero until used. Default 8 = 64 KB.
    pub delta_blocks: u16,
    /// Major compaction is due once this many delta blocks are in use.
    /// Default 2 = the paper's 16 KB delta page; the rest is the
    /// over-provisioned reserve for versions old snapshots still need.
    pub compact_trigger: u16,
    /// Slots (TIDs, row versions) per hybrid page.
    pub max_slots: u16,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            column_blocks: 16,
            delta_blocks: 8,
            compact_trigger: 2,
            max_slots: DEFAULT_MAX_SLOTS,
        }
    }
}

/// Slot directory entries in the header block.
pub const DIR_IN_HEADER: usize = (BODY_END - super::header::DIR_START) / super::header::DIR_ENTRY;
/// Slot directory entries in one directory block.
pub const DIR_PER_BLOCK: usize = (BODY_END - BODY_START) / super::header::DIR_ENTRY;
/// Default slots: exactly what the header block plus one directory block
/// hold (2032 + 2038).
pub const DEFAULT_MAX_SLOTS: u16 = (DIR_IN_HEADER + DIR_PER_BLOCK) as u16;
/// Blocks one WAL record may reference (`XLR_MAX_BLOCK_ID` + 1).
pub const MAX_RECORD_BLOCKS: usize = 33;
/// Delta blocks are named by one byte in a directory entry.
pub const MAX_DELTA_BLOCKS: u16 = 255;

/// Validated parameters plus what follows from them.
///
/// Extent block order: header (index 0), directory blocks, column blocks,
/// delta blocks. The delta part follows the column part as in the paper, so
/// a scan reads the extent front to back in one sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub params: Params,
    pub directory_blocks: u16,
}

impl Geometry {
    pub fn new(params: Params) -> Result<Geometry> {
        let p = params;
        if p.column_blocks == 0 {
            return Err(Error::BadParams("column_blocks must be at least 1"));
        }
        // Units are numbered by u16 in the column part header.
        if p.column_blocks as usize * UNITS_PER_BLOCK > u16::MAX as usize {
            return Err(Error::BadParams("column_blocks too large"));
        }
        if p.delta_blocks == 0 || p.delta_blocks > MAX_DELTA_BLOCKS {
            return Err(Error::BadParams("delta_blocks must be 1..=255"));
        }
        if p.compact_trigger == 0 || p.compact_trigger > p.delta_blocks {
            return Err(Error::BadParams("compact_trigger must be 1..=delta_blocks"));
        }
        // Slot u16::MAX is never used, so slot + 1 always fits u16.
        if p.max_slots == 0 || p.max_slots == u16::MAX {
            return Err(Error::BadParams("max_slots must be 1..=65534"));
        }
        let extra = (p.max_slots as usize).saturating_sub(DIR_IN_HEADER);
        let directory_blocks = extra.div_ceil(DIR_PER_BLOCK);
        let g = Geometry { params: p, directory_blocks: directory_blocks as u16 };
        if g.extent_blocks() > u16::MAX as usize {
            return Err(Error::BadParams("extent has too many blocks"));
        }
        // Each block of the extent lends its number to 291 slots.
        if p.max_slots as usize > g.extent_blocks() * MAX_OFFSET as usize {
            return Err(Error::BadParams("max_slots exceeds 291 per block of the extent"));
        }
        Ok(g)
    }

    pub fn extent_blocks(&self) -> usize {
        1 + self.directory_blocks as usize + self.params.column_blocks as usize + self.params.delta_blocks as usize
    }
    pub const fn header_block(&self) -> usize {
        0
    }
    pub fn directory_block(&self, i: usize) -> usize {
        1 + i
    }
    pub fn column_block(&self, i: usize) -> usize {
        1 + self.directory_blocks as usize + i
    }
    pub fn delta_block(&self, i: usize) -> usize {
        self.column_block(self.params.column_blocks as usize) + i
    }
    pub fn column_units(&self) -> usize {
        self.params.column_blocks as usize * UNITS_PER_BLOCK
    }
    pub fn max_slots(&self) -> usize {
        self.params.max_slots as usize
    }

    /// Whether a compaction's WAL record can reference every block of the
    /// extent: PostgreSQL allows block ids 0..=32 (`XLR_MAX_BLOCK_ID`, after
    /// `XLogEnsureRecordSpace`). The glue refuses reloptions for which this
    /// is false.
    pub fn fits_one_wal_record(&self) -> bool {
        self.extent_blocks() <= MAX_RECORD_BLOCKS
    }

    /// How many of the extent's blocks lend their numbers to slots (the
    /// first ones): the blocks a TID of the extent can name, and so the
    /// blocks whose visibility-map bits speak for its versions.
    pub fn tid_blocks(&self) -> usize {
        self.max_slots().div_ceil(MAX_OFFSET as usize)
    }

    /// The TID of `slot` in the extent whose first block is `extent_start`:
    /// slot s lives at block `extent_start + s / 291`, offset `s % 291 + 1`.
    pub fn tid(&self, extent_start: u32, slot: u16) -> Result<Tid> {
        if slot as usize >= self.max_slots() {
            return Err(Error::BadInput("slot beyond max_slots"));
        }
        let block = extent_start as u64 + (slot / MAX_OFFSET) as u64;
        if block > u32::MAX as u64 {
            return Err(Error::BadInput("extent does not fit the relation's block numbers"));
        }
        Ok(Tid::new(block as u32, slot % MAX_OFFSET + 1))
    }

    /// The slot a TID names, if it is one this extent can have.
    pub fn slot(&self, extent_start: u32, tid: Tid) -> Result<u16> {
        if tid.block < extent_start || tid.offset == 0 || tid.offset > MAX_OFFSET {
            return Err(Error::BadInput("TID outside the extent's slots"));
        }
        let bi = (tid.block - extent_start) as usize;
        let slot = bi * MAX_OFFSET as usize + tid.offset as usize - 1;
        if bi >= self.extent_blocks() || slot >= self.max_slots() {
            return Err(Error::BadInput("TID outside the extent's slots"));
        }
        Ok(slot as u16)
    }

    /// (block index in the extent, byte offset) of `slot`'s directory entry.
    pub fn directory_entry(&self, slot: u16) -> (usize, usize) {
        use super::header::{DIR_ENTRY, DIR_START};
        let s = slot as usize;
        if s < DIR_IN_HEADER {
            (0, DIR_START + s * DIR_ENTRY)
        } else {
            let r = s - DIR_IN_HEADER;
            (self.directory_block(r / DIR_PER_BLOCK), BODY_START + (r % DIR_PER_BLOCK) * DIR_ENTRY)
        }
    }

    /// (block index of the column area, byte offset) of column unit `u`'s payload.
    pub fn unit_location(u: usize) -> (usize, usize) {
        (u / UNITS_PER_BLOCK, unit_start(u % UNITS_PER_BLOCK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_payloads_are_uniform_and_inside_the_body() {
        assert_eq!(unit_start(0) + UNIT_PAYLOAD, UNIT);
        assert!(unit_start(1) + UNIT_PAYLOAD <= BODY_END);
        assert_eq!(BODY_END, 8176);
    }

    #[test]
    fn default_geometry() {
        let g = Geometry::new(Params::default()).unwrap();
        assert_eq!(DIR_IN_HEADER, 2032);
        assert_eq!(DIR_PER_BLOCK, 2038);
        assert_eq!(g.directory_blocks, 1);
        assert_eq!(g.extent_blocks(), 1 + 1 + 16 + 8);
        assert_eq!(g.max_slots(), 4070);
        assert_eq!(g.column_block(0), 2);
        assert_eq!(g.delta_block(0), 18);
        assert!(g.fits_one_wal_record());
        let big = Geometry::new(Params { column_blocks: 32, ..Params::default() }).unwrap();
        assert!(!big.fits_one_wal_record());
    }

    #[test]
    fn tid_mapping_roundtrips_and_stays_within_291() {
        assert_eq!(Geometry::new(Params::default()).unwrap().tid_blocks(), 14);
        let g = Geometry::new(Params::default()).unwrap();
        for s in 0..g.params.max_slots {
            let t = g.tid(1000, s).unwrap();
            assert!(t.offset >= 1 && t.offset <= MAX_OFFSET);
            assert!(t.block >= 1000 && ((t.block - 1000) as usize) < g.extent_blocks());
            assert_eq!(g.slot(1000, t).unwrap(), s);
        }
        assert!(g.tid(0, g.params.max_slots).is_err());
        assert!(g.slot(1000, Tid::new(1000, 0)).is_err());
        assert!(g.slot(1000, Tid::new(1000, 292)).is_err());
        assert!(g.slot(1000, Tid::new(999, 1)).is_err());
        assert!(g.slot(1000, Tid::new(1013, 291)).is_err()); // slot 4073 >= 4070
    }

    #[test]
    fn params_are_validated() {
        let d = Params::default();
        for bad in [
            Params { column_blocks: 0, ..d },
            Params { delta_blocks: 0, ..d },
            Params { delta_blocks: 256, compact_trigger: 2, ..d },
            Params { compact_trigger: 0, ..d },
            Params { compact_trigger: 9, ..d },
            Params { max_slots: 0, ..d },
            Params { max_slots: u16::MAX, ..d },
            // 3 blocks lend 873 slot numbers.
            Params { column_blocks: 1, delta_blocks: 1, compact_trigger: 1, max_slots: 874 },
        ] {
            assert!(matches!(Geometry::new(bad), Err(Error::BadParams(_))), "{bad:?}");
        }
        let small = Geometry::new(Params { column_blocks: 1, delta_blocks: 1, compact_trigger: 1, max_slots: 873 }).unwrap();
        assert_eq!(small.directory_blocks, 0);
        let big = Geometry::new(Params { max_slots: 20000, column_blocks: 64, ..d }).unwrap();
        assert_eq!(big.directory_blocks as usize, (20000 - 2032usize).div_ceil(2038));
    }

    #[test]
    fn trailer_roundtrip_and_corruption() {
        let mut b = vec![0u8; BLCKSZ];
        assert_eq!(BlockTrailer::read(&b).unwrap(), None);
        let t = BlockTrailer { kind: BlockKind::Delta, index: 7, version: 3 };
        t.write(&mut b);
        assert_eq!(BlockTrailer::read(&b).unwrap(), Some(t));
        assert!(BlockTrailer::check(&b, BlockKind::Delta, 7, Some(3)).is_ok());
        assert_eq!(
            BlockTrailer::check(&b, BlockKind::Delta, 7, Some(4)),
            Err(Error::VersionMismatch { expected: 4, found: 3 })
        );
        assert!(BlockTrailer::check(&b, BlockKind::Column, 7, None).is_err());
        let zero = vec![0u8; BLCKSZ];
        assert!(matches!(BlockTrailer::check(&zero, BlockKind::Delta, 7, None), Err(Error::Corrupt(_))));
        assert_eq!(
            BlockTrailer::check(&zero, BlockKind::Delta, 7, Some(3)),
            Err(Error::VersionMismatch { expected: 3, found: 0 })
        );
        assert!(BlockTrailer::check(&b, BlockKind::Delta, 6, None).is_err());
        let mut m = b.clone();
        m[TRAILER_OFF] ^= 1;
        assert_eq!(BlockTrailer::read(&m), Err(Error::BadMagic));
        let mut m = b.clone();
        m[TRAILER_OFF + 4] = FORMAT_VERSION + 1;
        assert_eq!(BlockTrailer::read(&m), Err(Error::BadFormatVersion(FORMAT_VERSION + 1)));
        m[TRAILER_OFF + 4] = 0;
        assert_eq!(BlockTrailer::read(&m), Err(Error::BadFormatVersion(0)));
        // Blocks written before format 2 stay readable.
        m[TRAILER_OFF + 4] = FORMAT_OLDEST;
        assert!(BlockTrailer::read(&m).unwrap().is_some());
        let mut m = b.clone();
        m[TRAILER_OFF + 5] = 9;
        assert!(BlockTrailer::read(&m).is_err());
        let mut m = b.clone();
        m[TRAILER_OFF + 8..TRAILER_OFF + 12].fill(0);
        assert!(BlockTrailer::read(&m).is_err());
        assert!(BlockTrailer::read(&b[..100]).is_err());
    }
}
