//! The header block (block 0 of an extent) and the slot directory.
//!
//! The header block holds the extent header (its parameters, the current
//! page version in its trailer, what is in use) followed by the first 2032
//! slot directory entries; further entries fill whole directory blocks.
//! A directory entry says where the version of a slot is: in the column
//! part (a row index) or in the delta part (a delta block and a byte
//! offset), or that the slot is unused or dead (removed, index entries not
//! yet gone), exactly like heap's line pointer states.

use super::layout::{rd16, wr16, BlockKind, BlockTrailer, Geometry, Params, BODY_START, FIRST_VERSION};
use super::{corrupt, Error, Result};

/// Where the directory starts in the header block.
pub const DIR_START: usize = 48;
/// Bytes per directory entry.
pub const DIR_ENTRY: usize = 4;

/// Where the version of a slot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DirEntry {
    /// Free for a new version (also every slot >= `slot_hwm`).
    Unused,
    /// The version was removed by compaction; index entries may still point
    /// here. Only VACUUM turns it `Unused` again (after `ambulkdelete`).
    Dead,
    /// Row `row` of the column part.
    Column { row: u16 },
    /// The item at byte `offset` of delta block `block` (0-based in the
    /// delta part).
    Delta { block: u8, offset: u16 },
    /// The root of a HOT chain whose root version compaction removed:
    /// index entries name this slot, and the chain goes on at `slot`
    /// (heap's LP_REDIRECT). See `hot.rs`.
    Redirect { slot: u16 },
}

impl DirEntry {
    /// The entry of `slot` as stored. A column row is written relative to
    /// the slot (tag 5, `slot - row`; format 2): rows are in slot order, so
    /// row r has a slot >= r, and a part that a bulk load filled has
    /// slot == row throughout, which makes the directory one repeated word
    /// that a compressing drive stores in a few bytes, where absolute row
    /// numbers (tag 2, format 1) cost it about 4 bytes a row.
    pub fn encode_for(&self, slot: u16) -> [u8; DIR_ENTRY] {
        let (tag, aux, v) = match *self {
            DirEntry::Unused => (0u8, 0u8, 0u16),
            DirEntry::Dead => (1, 0, 0),
            DirEntry::Column { row } if row <= slot => (5, 0, slot - row),
            DirEntry::Column { row } => (2, 0, row),
            DirEntry::Delta { block, offset } => (3, block, offset),
            DirEntry::Redirect { slot } => (4, 0, slot),
        };
        let v = v.to_le_bytes();
        [tag, aux, v[0], v[1]]
    }

    /// Decodes the stored entry of `slot` (either column form).
    pub fn decode_for(b: &[u8], slot: u16) -> Result<DirEntry> {
        let v = rd16(b, 2);
        match (b[0], b[1]) {
            (0, 0) if v == 0 => Ok(DirEntry::Unused),
            (1, 0) if v == 0 => Ok(DirEntry::Dead),
            (2, 0) => Ok(DirEntry::Column { row: v }),
            (5, 0) if v <= slot => Ok(DirEntry::Column { row: slot - v }),
            (3, block) => Ok(DirEntry::Delta { block, offset: v }),
            (4, 0) => Ok(DirEntry::Redirect { slot: v }),
            _ => corrupt("bad slot directory entry"),
        }
    }

    /// Whether the slot has a version.
    pub fn is_used(&self) -> bool {
        matches!(self, DirEntry::Column { .. } | DirEntry::Delta { .. })
    }
}

/// The extent header. The page version is the header block's trailer
/// version: major compaction advances it.
///
/// ```text
/// 24  2  column_blocks      \
/// 26  2  delta_blocks        |  the parameters the extent was made with;
/// 28  2  directory_blocks    |  a reader with other parameters gets an
/// 30  2  max_slots           |  error, not a misreading
/// 32  2  compact_trigger    /
/// 34  2  slot_hwm      slots >= this were never used (entries zero)
/// 36  2  column_rows   rows in the column part
/// 38  2  column_units  4 KB units the column part uses (0: no column part)
/// 40  2  delta_used    delta blocks in use; the last one takes appends
/// 42  2  free_hint     no unused slot lies below it (0 in extents written
///                      before the hint existed: search from slot 0)
/// 44  1  flags         0x01 column part full (`column_full`)
///                      0x02 column part all visible (`all_visible`)
///                      0x04 visibility-map bits set (`map_visible`)
/// 45  3  reserved, 0
/// 48 ..  directory entries for slots 0..2032
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentHeader {
    pub version: u32,
    pub slot_hwm: u16,
    pub column_rows: u16,
    pub column_units: u16,
    pub delta_used: u16,
    /// Every slot below it holds a version or is dead or a redirect, so a
    /// search for an unused slot starts here instead of at slot 0. A lower
    /// bound only: the slot at the hint need not be unused. Inserts that
    /// reuse a slot raise it past that slot (they take the lowest unused
    /// one); whatever makes a slot unused lowers it.
    pub free_hint: u16,
    /// The last compaction had to leave versions it offered to the column
    /// part in the delta part: the column part takes no more rows, though
    /// its units are not all used (each column's mini-page grows by whole
    /// 4 KB units, so a part of ten columns is full with units to spare).
    /// Set and cleared by compaction only (its WAL record carries it).
    pub column_full: bool,
    /// Every column row is visible to every snapshot, present and future:
    /// inserted by a transaction that committed before the oldest running
    /// snapshot, neither deleted nor updated (a lock-only xmax does not
    /// count), and storing every column the part stores. A column scan then
    /// reads no row headers (heap's PD_ALL_VISIBLE). Set after a compaction
    /// or by VACUUM, cleared before any row header of the part changes
    /// other than hints and freezing (the glue's protocol, its README).
    pub all_visible: bool,
    /// VACUUM set the visibility-map bits (all-visible) of the extent's TID
    /// blocks, so index-only scans skip their fetches. Only with
    /// `all_visible`, no delta part and no dead slot: then every version
    /// is a column row visible to every snapshot. Cleared, with the bits,
    /// before anything adds or changes a version of the extent (an insert,
    /// a stamp, a compaction); while it is clear, no bit of the extent is
    /// set (the glue's protocol, its README).
    pub map_visible: bool,
}

/// Header flag: `column_full`.
const FLAG_COLUMN_FULL: u8 = 0x01;
/// Header flag: `all_visible`.
const FLAG_ALL_VISIBLE: u8 = 0x02;
/// Header flag: `map_visible`.
const FLAG_MAP_VISIBLE: u8 = 0x04;

impl ExtentHeader {
    /// The header of a new, empty extent.
    pub fn empty() -> ExtentHeader {
        ExtentHeader { version: FIRST_VERSION, slot_hwm: 0, column_rows: 0, column_units: 0, delta_used: 0, free_hint: 0, column_full: false, all_visible: false, map_visible: false }
    }

    /// Writes a fresh header block (directory all unused).
    pub fn init_block(block: &mut [u8], g: &Geometry) {
        block[BODY_START..].fill(0);
        ExtentHeader::empty().write(block, g);
    }

    /// Writes the header fields and the trailer; leaves the directory alone.
    pub fn write(&self, block: &mut [u8], g: &Geometry) {
        let p = g.params;
        wr16(block, 24, p.column_blocks);
        wr16(block, 26, p.delta_blocks);
        wr16(block, 28, g.directory_blocks);
        wr16(block, 30, p.max_slots);
        wr16(block, 32, p.compact_trigger);
        wr16(block, 34, self.slot_hwm);
        wr16(block, 36, self.column_rows);
        wr16(block, 38, self.column_units);
        wr16(block, 40, self.delta_used);
        wr16(block, 42, self.free_hint);
        block[44] = if self.column_full { FLAG_COLUMN_FULL } else { 0 }
            | if self.all_visible { FLAG_ALL_VISIBLE } else { 0 }
            | if self.map_visible { FLAG_MAP_VISIBLE } else { 0 };
        block[45..DIR_START].fill(0);
        BlockTrailer { kind: BlockKind::Header, index: 0, version: self.version }.write(block);
    }

    /// Reads and checks the header block against the expected geometry.
    pub fn read(block: &[u8], g: &Geometry) -> Result<ExtentHeader> {
        let t = BlockTrailer::check(block, BlockKind::Header, 0, None)?;
        let stored = Params {
            column_blocks: rd16(block, 24),
            delta_blocks: rd16(block, 26),
            compact_trigger: rd16(block, 32),
            max_slots: rd16(block, 30),
        };
        if stored != g.params || rd16(block, 28) != g.directory_blocks {
            return Err(Error::BadParams("extent was made with other parameters"));
        }
        let h = ExtentHeader {
            version: t.version,
            slot_hwm: rd16(block, 34),
            column_rows: rd16(block, 36),
            column_units: rd16(block, 38),
            delta_used: rd16(block, 40),
            free_hint: rd16(block, 42),
            column_full: block[44] & FLAG_COLUMN_FULL != 0,
            all_visible: block[44] & FLAG_ALL_VISIBLE != 0,
            map_visible: block[44] & FLAG_MAP_VISIBLE != 0,
        };
        if block[44] & !(FLAG_COLUMN_FULL | FLAG_ALL_VISIBLE | FLAG_MAP_VISIBLE) != 0 {
            return corrupt("unknown extent header flags");
        }
        if h.slot_hwm as usize > g.max_slots() {
            return corrupt("slot high-water mark beyond max_slots");
        }
        if h.free_hint > h.slot_hwm {
            return corrupt("free-slot hint above the slot high-water mark");
        }
        if h.column_rows > h.slot_hwm {
            return corrupt("more column rows than slots ever used");
        }
        if h.column_units as usize > g.column_units() || (h.column_units == 0) != (h.column_rows == 0) {
            return corrupt("column part size out of range");
        }
        if h.delta_used > g.params.delta_blocks {
            return corrupt("more delta blocks in use than exist");
        }
        if h.all_visible && h.column_rows == 0 {
            return corrupt("all-visible flag on an extent without column rows");
        }
        if h.map_visible && (!h.all_visible || h.delta_used != 0) {
            return corrupt("visibility-map flag on an extent that is not all visible or has a delta part");
        }
        Ok(h)
    }

    /// The free-slot hint after slot `slot` was taken by an insert: a
    /// reused slot (below the high-water mark) is the lowest unused one,
    /// so every slot up to it is now in use.
    pub fn after_insert(&mut self, slot: u16) {
        if slot < self.slot_hwm {
            self.free_hint = slot + 1;
        }
        self.slot_hwm = self.slot_hwm.max(slot + 1);
    }

    /// The free-slot hint after `slot` became unused.
    pub fn after_unused(&mut self, slot: u16) {
        self.free_hint = self.free_hint.min(slot);
    }

    /// Lowers the high-water mark past trailing unused slots (`is_unused`
    /// reads the directory), as PostgreSQL 15 truncates line pointer
    /// arrays, keeping the hint at or below it.
    pub fn trim_hwm(&mut self, mut is_unused: impl FnMut(u16) -> Result<bool>) -> Result<()> {
        while self.slot_hwm > 0 && is_unused(self.slot_hwm - 1)? {
            self.slot_hwm -= 1;
        }
        self.free_hint = self.free_hint.min(self.slot_hwm);
        Ok(())
    }

    /// Whether the delta part has reached the compaction trigger. A full
    /// column part takes a compacted version only in place of one it drops,
    /// so compacting it gains little until the room new rows leave to HOT
    /// updates (`new_row_delta_blocks`) is nearly used: it is due with one
    /// delta block left (the paper's "when the delta page is completely
    /// filled up"). So is an extent that has handed out every slot new rows
    /// may take (`new_row_slots`): its delta part holds newer versions of
    /// its own rows, which compaction only moves into the column part in
    /// place of the versions they replace, rebuilding the whole part each
    /// time. Under pgbench's TPC-B the background worker compacted the
    /// accounts' extents, loaded to their new-row slots with half their
    /// column units free, every ~150 updates (14% of the server's CPU; with
    /// the worker off TPC-B ran 1.15x as fast, at this trigger 1.05-1.07x).
    pub fn compaction_due(&self, g: &Geometry) -> bool {
        if self.column_part_full(g) || self.slot_hwm >= Self::new_row_slots(g) {
            self.delta_used >= g.params.delta_blocks.saturating_sub(1).max(g.params.compact_trigger)
        } else {
            self.delta_used >= g.params.compact_trigger
        }
    }

    /// Whether the column part takes no more rows: all its units used, or
    /// the last compaction found it full (`column_full`).
    pub fn column_part_full(&self, g: &Geometry) -> bool {
        self.column_full || self.column_units as usize >= g.column_units()
    }

    /// The delta blocks new rows (inserts, non-HOT updates' new versions)
    /// may fill in an extent whose column part is full. Compaction cannot
    /// move such a row into the column part, so it stays in the delta part;
    /// the rest of the delta part is kept for HOT updates of the extent's
    /// rows, as heap's fillfactor keeps room in a page.
    pub fn new_row_delta_blocks(g: &Geometry) -> u16 {
        (g.params.delta_blocks / 4).max(1)
    }

    /// The slots new rows (inserts, non-HOT updates' new versions) may
    /// take: those below 2/5 of `max_slots`; the rest are kept for HOT
    /// updates. A row HOT-updated once holds two slots for good (its root,
    /// which compaction turns into a redirect, and its live version), and
    /// the versions a delta part collects between compactions hold one
    /// each, so an extent whose rows had taken every slot could never HOT
    /// update again: pgbench's accounts, ~3900 narrow rows in one column
    /// part, took all 4070 and went non-HOT (an insert elsewhere, an index
    /// entry and a stamp) at 9 updates of 10. Heap keeps the same margin
    /// implicitly: 291 line pointers for a page's ~60 such rows.
    pub fn new_row_slots(g: &Geometry) -> u16 {
        ((g.params.max_slots as u32 * 2 / 5) as u16).max(1)
    }
}

/// The geometry an extent was made with, from its header block alone
/// (WAL redo of records that leave the parameters out).
pub fn stored_geometry(block: &[u8]) -> Result<Geometry> {
    BlockTrailer::check(block, BlockKind::Header, 0, None)?;
    let g = Geometry::new(Params { column_blocks: rd16(block, 24), delta_blocks: rd16(block, 26), compact_trigger: rd16(block, 32), max_slots: rd16(block, 30) })?;
    ExtentHeader::read(block, &g)?;
    Ok(g)
}

/// Initializes directory block `i` (all entries unused).
pub fn init_directory_block(block: &mut [u8], g: &Geometry, i: usize, version: u32) {
    block[BODY_START..].fill(0);
    BlockTrailer { kind: BlockKind::Directory, index: g.directory_block(i) as u16, version }.write(block);
}

/// Reads the entry of `slot` from the block that holds it (the caller
/// fetched `g.directory_entry(slot).0` and checked its trailer).
pub fn read_entry(block: &[u8], g: &Geometry, slot: u16) -> Result<DirEntry> {
    if slot as usize >= g.max_slots() {
        return Err(Error::BadInput("slot beyond max_slots"));
    }
    let (_, off) = g.directory_entry(slot);
    DirEntry::decode_for(&block[off..off + DIR_ENTRY], slot)
}

/// Writes the entry of `slot` into the block that holds it.
pub fn write_entry(block: &mut [u8], g: &Geometry, slot: u16, e: DirEntry) -> Result<()> {
    if slot as usize >= g.max_slots() {
        return Err(Error::BadInput("slot beyond max_slots"));
    }
    let (_, off) = g.directory_entry(slot);
    block[off..off + DIR_ENTRY].copy_from_slice(&e.encode_for(slot));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hasis::layout::{BLCKSZ, DIR_IN_HEADER, TRAILER_OFF};

    #[test]
    fn entry_roundtrip_and_bad_entries() {
        for slot in [0u16, 1, 300, 4069] {
            for e in [
                DirEntry::Unused,
                DirEntry::Dead,
                DirEntry::Column { row: 0 },
                DirEntry::Column { row: slot },
                DirEntry::Column { row: slot / 2 },
                DirEntry::Column { row: 4069 },
                DirEntry::Delta { block: 7, offset: 8000 },
                DirEntry::Redirect { slot: 4069 },
            ] {
                assert_eq!(DirEntry::decode_for(&e.encode_for(slot), slot).unwrap(), e, "slot {slot}");
            }
        }
        assert_eq!(DirEntry::Unused.encode_for(9), [0; 4]);
        // A column row in its own slot's place is one word for every slot.
        assert_eq!(DirEntry::Column { row: 9 }.encode_for(9), [5, 0, 0, 0]);
        assert_eq!(DirEntry::Column { row: 7 }.encode_for(9), [5, 0, 2, 0]);
        // Format 1's absolute column entries still read.
        assert_eq!(DirEntry::decode_for(&[2, 0, 7, 0], 9).unwrap(), DirEntry::Column { row: 7 });
        for bad in [[0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 1], [2, 1, 0, 0], [4, 1, 0, 0], [5, 1, 0, 0], [5, 0, 10, 0], [6, 0, 0, 0], [0xff; 4]] {
            assert!(DirEntry::decode_for(&bad, 9).is_err(), "{bad:?}");
        }
    }


    #[test]
    fn header_roundtrip_and_checks() {
        let g = Geometry::new(Params::default()).unwrap();
        let mut b = vec![0u8; BLCKSZ];
        ExtentHeader::init_block(&mut b, &g);
        assert_eq!(ExtentHeader::read(&b, &g).unwrap(), ExtentHeader::empty());
        let h = ExtentHeader { version: 9, slot_hwm: 100, column_rows: 60, column_units: 5, delta_used: 2, free_hint: 17, column_full: false, all_visible: false, map_visible: false };
        h.write(&mut b, &g);
        assert_eq!(ExtentHeader::read(&b, &g).unwrap(), h);
        assert!(h.compaction_due(&g));
        assert!(!h.column_part_full(&g));
        // The flag survives a write and makes the part full with units left.
        let flagged = ExtentHeader { column_full: true, ..h };
        let mut f = b.clone();
        flagged.write(&mut f, &g);
        assert_eq!(ExtentHeader::read(&f, &g).unwrap(), flagged);
        assert!(flagged.column_part_full(&g));
        assert!(!ExtentHeader { delta_used: 6, ..flagged }.compaction_due(&g));
        assert!(ExtentHeader { delta_used: 7, ..flagged }.compaction_due(&g));
        // Every new-row slot handed out: due as late as a full part.
        let slots_out = ExtentHeader { slot_hwm: ExtentHeader::new_row_slots(&g), ..h };
        assert!(!slots_out.column_part_full(&g));
        assert!(!slots_out.compaction_due(&g));
        assert!(!ExtentHeader { delta_used: 6, ..slots_out }.compaction_due(&g));
        assert!(ExtentHeader { delta_used: 7, ..slots_out }.compaction_due(&g));
        assert!(ExtentHeader { slot_hwm: ExtentHeader::new_row_slots(&g) - 1, ..h }.compaction_due(&g));
        // So does the all-visible flag, beside column_full and alone.
        let visible = ExtentHeader { all_visible: true, ..flagged };
        visible.write(&mut f, &g);
        assert_eq!(f[44], 0x03);
        assert_eq!(ExtentHeader::read(&f, &g).unwrap(), visible);
        ExtentHeader { column_full: false, ..visible }.write(&mut f, &g);
        assert_eq!(ExtentHeader::read(&f, &g).unwrap(), ExtentHeader { column_full: false, ..visible });
        // Not on an extent without column rows; no unknown flags.
        ExtentHeader { column_rows: 0, column_units: 0, ..visible }.write(&mut f, &g);
        assert!(ExtentHeader::read(&f, &g).is_err());
        flagged.write(&mut f, &g);
        f[44] = 0x08;
        assert!(ExtentHeader::read(&f, &g).is_err());
        // The visibility-map flag: only on an all-visible extent without a
        // delta part.
        let mapped = ExtentHeader { delta_used: 0, map_visible: true, ..visible };
        mapped.write(&mut f, &g);
        assert_eq!(f[44], 0x07);
        assert_eq!(ExtentHeader::read(&f, &g).unwrap(), mapped);
        ExtentHeader { all_visible: false, ..mapped }.write(&mut f, &g);
        assert!(ExtentHeader::read(&f, &g).is_err());
        ExtentHeader { delta_used: 1, ..mapped }.write(&mut f, &g);
        assert!(ExtentHeader::read(&f, &g).is_err());
        // A full column part: due only with one delta block left, after the
        // room new rows leave to HOT updates is nearly used.
        let full = g.column_units() as u16;
        assert!(!ExtentHeader { column_units: full, delta_used: 2, ..h }.compaction_due(&g));
        assert!(!ExtentHeader { column_units: full, delta_used: 6, ..h }.compaction_due(&g));
        assert!(ExtentHeader { column_units: full, delta_used: 7, ..h }.compaction_due(&g));
        assert!(ExtentHeader::new_row_delta_blocks(&g) >= 1 && ExtentHeader::new_row_delta_blocks(&g) < g.params.delta_blocks - 1);
        let one = Geometry::new(Params { delta_blocks: 1, compact_trigger: 1, ..Params::default() }).unwrap();
        assert_eq!(ExtentHeader::new_row_delta_blocks(&one), 1);
        // New rows leave 3/5 of the slots to HOT updates: each row can be
        // updated once (redirect plus live version) with room to spare.
        assert_eq!(ExtentHeader::new_row_slots(&g), 1628);
        assert!(2 * ExtentHeader::new_row_slots(&g) < g.params.max_slots);
        let tiny = Geometry::new(Params { max_slots: 1, ..Params::default() }).unwrap();
        assert_eq!(ExtentHeader::new_row_slots(&tiny), 1);
        assert!(ExtentHeader { column_units: one.column_units() as u16, delta_used: 1, ..h }.compaction_due(&one));

        let other = Geometry::new(Params { delta_blocks: 9, ..Params::default() }).unwrap();
        assert!(matches!(ExtentHeader::read(&b, &other), Err(Error::BadParams(_))));
        for (off, v) in [(34, 5000u16), (36, 101), (38, 33), (38, 0), (40, 9)] {
            let mut m = b.clone();
            wr16(&mut m, off, v);
            assert!(ExtentHeader::read(&m, &g).is_err(), "offset {off} value {v}");
        }
        let mut m = b.clone();
        m[TRAILER_OFF..].fill(0);
        assert!(ExtentHeader::read(&m, &g).is_err());
    }

    #[test]
    fn directory_entries_land_in_header_then_directory_blocks() {
        let g = Geometry::new(Params::default()).unwrap();
        let last_in_header = (DIR_IN_HEADER - 1) as u16;
        assert_eq!(g.directory_entry(0), (0, DIR_START));
        assert_eq!(g.directory_entry(last_in_header).1 + DIR_ENTRY, TRAILER_OFF);
        assert_eq!(g.directory_entry(last_in_header + 1), (1, BODY_START));
        let (blk, off) = g.directory_entry(g.params.max_slots - 1);
        assert_eq!(blk, 1);
        assert_eq!(off + DIR_ENTRY, TRAILER_OFF);

        let mut d = vec![0u8; BLCKSZ];
        init_directory_block(&mut d, &g, 0, 3);
        let s = last_in_header + 5;
        write_entry(&mut d, &g, s, DirEntry::Delta { block: 1, offset: 40 }).unwrap();
        assert_eq!(read_entry(&d, &g, s).unwrap(), DirEntry::Delta { block: 1, offset: 40 });
        assert!(read_entry(&d, &g, g.params.max_slots).is_err());
        assert!(BlockTrailer::check(&d, BlockKind::Directory, 1, Some(3)).is_ok());
    }
}
