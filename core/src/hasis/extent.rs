//! An extent image in memory with the operations the PostgreSQL glue
//! performs on shared buffers: create, insert, in-place MVCC stamps,
//! major compaction, and VACUUM's dead -> unused step. Each method says
//! which blocks it touches; those are the blocks the glue locks and
//! registers in the operation's WAL record (README "Locking and WAL").

use super::column::{set_row_mvcc, ColumnPart};
use super::compact::{apply_at, plan_appending, plan_with_sources, AppendedRow, CompactionOutput, CompactionRecord, Oracle, Planned};
use super::delta::{self, DeltaView};
use super::header::{self, init_directory_block, DirEntry, ExtentHeader};
use super::layout::{BlockKind, BlockTrailer, Geometry, BLCKSZ};
use super::row::{encode_payload, Mvcc, Row, RowHeader, Schema};
use super::{corrupt, Error, HybridPage, Result};

/// All blocks of one extent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    pub geometry: Geometry,
    pub blocks: Vec<Vec<u8>>,
    /// The extent's first block, as the glue knows it (`new_at`): column
    /// parts then store own-TID ctids compactly (`column::build_at`).
    pub start: Option<u32>,
}

impl Extent {
    /// A new, empty extent: header and directory blocks initialized,
    /// column and delta blocks all zero (free on the drive, and
    /// `PageIsNew` to PostgreSQL). WAL: log the header and directory
    /// blocks as new pages.
    pub fn new(g: &Geometry) -> Extent {
        Self::new_at(g, None)
    }

    /// `new` for an extent whose first block is `start` (None: unknown).
    pub fn new_at(g: &Geometry, start: Option<u32>) -> Extent {
        let mut blocks = vec![vec![0u8; BLCKSZ]; g.extent_blocks()];
        ExtentHeader::init_block(&mut blocks[0], g);
        for i in 0..g.directory_blocks as usize {
            init_directory_block(&mut blocks[g.directory_block(i)], g, i, ExtentHeader::empty().version);
        }
        Extent { geometry: *g, blocks, start }
    }

    pub fn header(&self) -> Result<ExtentHeader> {
        ExtentHeader::read(&self.blocks[0], &self.geometry)
    }

    pub fn open(&self, schema: &Schema) -> Result<HybridPage> {
        HybridPage::open_at(&self.geometry, schema, &self.blocks, self.start)
    }

    fn entry(&self, slot: u16) -> Result<DirEntry> {
        let (b, _) = self.geometry.directory_entry(slot);
        header::read_entry(&self.blocks[b], &self.geometry, slot)
    }

    fn set_entry(&mut self, slot: u16, e: DirEntry) -> Result<()> {
        let (b, _) = self.geometry.directory_entry(slot);
        header::write_entry(&mut self.blocks[b], &self.geometry, slot, e)
    }

    /// Inserts a new row version and returns its slot.
    ///
    /// Touches: the header block (exclusive: slot allocation and
    /// `delta_used` are serialised by it), the directory block of the slot
    /// if it is not the header, and the delta block appended to. WAL: one
    /// record with the slot, the delta block and offset, and the item.
    pub fn insert(&mut self, schema: &Schema, mvcc: Mvcc, row: &Row) -> Result<u16> {
        let g = self.geometry;
        let mut h = self.header()?;
        let payload = encode_payload(schema, row)?;
        // Lowest unused slot, as heap reuses line pointers; else a new one.
        let mut slot = None;
        for s in h.free_hint..h.slot_hwm {
            if self.entry(s)? == DirEntry::Unused {
                slot = Some(s);
                break;
            }
        }
        let slot = match slot {
            Some(s) => s,
            None if (h.slot_hwm as usize) < g.max_slots() => h.slot_hwm,
            None => return Err(Error::NoSpace),
        };
        let header = RowHeader { slot, natts: row.values.len() as u16, mvcc };
        let item = delta::encode_item(&header, &payload)?;

        let mut placed = None;
        if h.delta_used > 0 {
            let i = h.delta_used as usize - 1;
            let b = &mut self.blocks[g.delta_block(i)];
            BlockTrailer::check(b, BlockKind::Delta, g.delta_block(i), None)?;
            match delta::append(b, &item) {
                Ok(off) => placed = Some((i, off)),
                Err(Error::NoSpace) => {}
                Err(e) => return Err(e),
            }
        }
        if placed.is_none() {
            if h.delta_used >= g.params.delta_blocks {
                return Err(Error::NoSpace);
            }
            let i = h.delta_used as usize;
            let b = &mut self.blocks[g.delta_block(i)];
            if BlockTrailer::read(b)?.is_some() {
                return corrupt("delta block past delta_used is initialized");
            }
            delta::init_block(b, &g, i, h.version);
            placed = Some((i, delta::append(b, &item)?));
            h.delta_used += 1;
        }
        let (i, offset) = placed.unwrap_or_default();
        self.set_entry(slot, DirEntry::Delta { block: i as u8, offset })?;
        h.after_insert(slot);
        h.write(&mut self.blocks[0], &g);
        Ok(slot)
    }

    /// Overwrites the MVCC fields of `slot`'s version in place (delete,
    /// update of the old version, lock, freeze, hint bits).
    ///
    /// Touches: the header block (share: excludes a concurrent compaction),
    /// the slot's directory block (share) and the one block holding the
    /// version's header (exclusive). WAL: like heap's delete/lock records.
    pub fn set_mvcc(&mut self, slot: u16, mvcc: &Mvcc) -> Result<()> {
        let g = self.geometry;
        let h = self.header()?;
        match self.entry(slot)? {
            DirEntry::Unused | DirEntry::Dead | DirEntry::Redirect { .. } => Err(Error::BadInput("slot has no version")),
            DirEntry::Delta { block, offset } => {
                let b = &mut self.blocks[g.delta_block(block as usize)];
                let view = DeltaView::open(b, &g, block as usize, Some(h.version))?;
                if view.item(offset)?.header.slot != slot {
                    return corrupt("delta item does not carry its slot");
                }
                delta::set_mvcc(b, offset, mvcc)
            }
            DirEntry::Column { row } => {
                let col: Vec<&[u8]> = (0..g.params.column_blocks as usize).map(|i| &self.blocks[g.column_block(i)][..]).collect();
                let mut part = ColumnPart::parse(&g, col, h.column_units as usize, h.column_rows as usize, Some(h.version))?;
                if let Some(first) = self.start {
                    part = part.at_extent(first);
                }
                let (blk, off) = part.header_location(row as usize)?;
                if part.row_header(row as usize)?.slot != slot {
                    return corrupt("column row does not carry its slot");
                }
                set_row_mvcc(&mut self.blocks[g.column_block(blk)], off, mvcc)
            }
        }
    }

    /// Plans a major compaction with `oracle` and applies it; returns the
    /// WAL record. Touches every block of the extent but nothing outside
    /// it: header exclusive for the whole run (no insert, stamp or reader
    /// header read in between), then directory, column and delta blocks.
    pub fn compact(&mut self, schema: &Schema, oracle: &mut dyn Oracle) -> Result<CompactionRecord> {
        self.compact_planned(schema, oracle).map(|p| p.record)
    }

    /// `compact`, also returning where each version of the result came
    /// from (for a record by reference).
    pub fn compact_planned(&mut self, schema: &Schema, oracle: &mut dyn Oracle) -> Result<Planned> {
        let page = self.open(schema)?;
        let planned = plan_with_sources(page, schema, oracle)?;
        self.apply(&planned.record)?;
        Ok(planned)
    }

    /// A bulk insert's batch: a compaction that also takes `rows` (MVCC
    /// fields and values) into fresh slots from the high-water mark up,
    /// each version's ctid its own TID in the extent starting at block
    /// `first`. Nothing changes when the column part would turn any of
    /// them back (`Planned::turned_back` > 0): the caller tries fewer.
    /// Touches what `compact` touches; the record carries the new rows
    /// whole and the new high-water mark.
    pub fn append_planned(&mut self, schema: &Schema, oracle: &mut dyn Oracle, first: u32, rows: &[(Mvcc, Row)]) -> Result<Planned> {
        let g = self.geometry;
        let page = self.open(schema)?;
        let hwm = page.header().slot_hwm;
        let mut appended = Vec::with_capacity(rows.len());
        for (j, (m, row)) in rows.iter().enumerate() {
            let slot = u16::try_from(hwm as usize + j).map_err(|_| Error::BadInput("slot beyond max_slots"))?;
            let mvcc = Mvcc { ctid: g.tid(first, slot)?, ..*m };
            let header = RowHeader { slot, natts: row.values.len() as u16, mvcc };
            let item = delta::encode_item(&header, &encode_payload(schema, row)?)?;
            appended.push(AppendedRow { header, item });
        }
        let planned = plan_appending(page, schema, oracle, appended)?;
        if planned.turned_back == 0 {
            self.apply(&planned.record)?;
        }
        Ok(planned)
    }

    /// Applies a compaction record: the primary after `plan`, and redo.
    pub fn apply(&mut self, rec: &CompactionRecord) -> Result<CompactionOutput> {
        let g = self.geometry;
        let old = self.header()?;
        if rec.old_version != old.version {
            return corrupt("compaction record is for another page version");
        }
        let out = apply_at(&g, rec, self.start)?;
        out.patch_header(&mut self.blocks[0], &g)?;
        for i in 0..g.directory_blocks as usize {
            out.patch_directory_block(&mut self.blocks[g.directory_block(i)], &g, i)?;
        }
        for i in 0..out.column_blocks_to_write(&old) {
            self.blocks[g.column_block(i)].copy_from_slice(&out.column_blocks[i]);
        }
        for i in 0..out.delta_blocks_to_write(&old) {
            self.blocks[g.delta_block(i)].copy_from_slice(&out.delta_blocks[i]);
        }
        Ok(out)
    }

    /// VACUUM's second heap pass: `Dead` slots whose index entries are gone
    /// become `Unused`; trailing unused slots lower the high-water mark (as
    /// PostgreSQL 15 truncates the line pointer array). Touches the header
    /// (exclusive) and the directory blocks of the slots.
    pub fn set_unused(&mut self, slots: &[u16]) -> Result<()> {
        let g = self.geometry;
        let mut h = self.header()?;
        for &s in slots {
            if s >= h.slot_hwm || self.entry(s)? != DirEntry::Dead {
                return Err(Error::BadInput("only dead slots can become unused"));
            }
        }
        for &s in slots {
            self.set_entry(s, DirEntry::Unused)?;
            h.after_unused(s);
        }
        h.trim_hwm(|s| Ok(self.entry(s)? == DirEntry::Unused))?;
        h.write(&mut self.blocks[0], &g);
        Ok(())
    }
}
