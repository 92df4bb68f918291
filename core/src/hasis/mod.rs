//! `hasis`: the on-disk formats of the hybrid-page table access method
//! (Huang et al., "HaSiS", FAST 2025; `/work/shared/papers/hasis-fast25.txt`)
//! and its major compaction, as plain Rust over 8 KB byte blocks.
//!
//! A **hybrid page** is an extent of consecutive PostgreSQL blocks: a
//! header block with the slot directory, a column part in PAX layout (one
//! mini-page per column, aligned to 4 KB units and zero-padded) and a
//! row-format delta part of preallocated, zero-filled blocks. A row
//! version's TID is a *slot* of the hybrid page that never changes while
//! the version exists; the directory maps it to the version's current
//! place. Major compaction moves delta versions into a new column part and
//! advances the page version; readers check that version on every block.
//!
//! Layers:
//!
//! * [`layout`]: geometry, parameters, block trailers, TID <-> slot.
//! * [`row`]: the row header (slot + MVCC fields), columns, row payloads.
//! * [`header`]: the extent header and slot directory entries.
//! * [`delta`]: delta blocks (append-only items, in-place MVCC stamps).
//! * [`column`]: the column part (meta, row headers, data mini-pages).
//! * [`compact`]: the oracle, the compaction record (the WAL record) and
//!   the deterministic rebuild from it.
//! * [`extent`]: an extent image with the glue's operations (insert,
//!   stamp, compact, vacuum) on bytes: the reference the PostgreSQL glue
//!   follows and what the property tests drive.
//! * [`HybridPage`] (here): a read-only decoded view of one version.
//!
//! Nothing here knows PostgreSQL. See `README.md` for the block layouts,
//! the versioning protocol, the WAL records and the locking rules.

pub mod column;
pub mod compact;
pub mod decimal;
pub mod delta;
pub mod extent;
pub mod header;
pub mod hot;
pub mod layout;
pub mod row;
pub mod wire;

#[cfg(test)]
mod tests;

use std::fmt;

use column::{ColumnPart, ColumnRow};
use delta::DeltaView;
use header::{DirEntry, ExtentHeader};
use layout::{BlockKind, BlockTrailer, Geometry};
use row::{decode_payload, Row, RowHeader, Schema};

/// Why reading or changing a hybrid page failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The bytes are not a valid block, item or record.
    Corrupt(&'static str),
    /// A block trailer without pg_hybrid's magic number.
    BadMagic,
    /// A block or record of a format version this code does not read.
    BadFormatVersion(u8),
    /// A block belongs to another page version than the header said: a
    /// compaction ran meanwhile. The reader restarts from the header block
    /// (resuming after the last slot it returned; slots are stable).
    VersionMismatch { expected: u32, found: u32 },
    /// A row too wide for a delta block (the glue's ERROR).
    RowTooWide { len: usize, max: usize },
    /// No free slot or delta space left in this hybrid page.
    NoSpace,
    /// Parameters that cannot describe an extent, or differ from the ones
    /// the extent was made with.
    BadParams(&'static str),
    /// A caller-side contract broken (values that do not match the schema,
    /// a slot out of range, an operation on a slot in the wrong state).
    BadInput(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt(why) => write!(f, "corrupt hasis page: {why}"),
            Error::BadMagic => write!(f, "hasis block has a bad magic number"),
            Error::BadFormatVersion(v) => write!(f, "hasis block has unknown format version {v}"),
            Error::VersionMismatch { expected, found } => {
                write!(f, "hasis page version changed during read (expected {expected}, found {found})")
            }
            Error::RowTooWide { len, max } => write!(f, "hasis row of {len} bytes exceeds the maximum of {max}"),
            Error::NoSpace => write!(f, "hasis hybrid page full"),
            Error::BadParams(why) => write!(f, "hasis parameters: {why}"),
            Error::BadInput(why) => write!(f, "hasis: {why}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[inline]
pub(crate) fn corrupt<T>(why: &'static str) -> Result<T> {
    Err(Error::Corrupt(why))
}

/// A delta item with its place, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaItemRef {
    pub block: u8,
    pub offset: u16,
    pub header: RowHeader,
    /// The encoded item.
    pub bytes: Vec<u8>,
}

/// One row version as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowVersion {
    pub slot: u16,
    pub location: DirEntry,
    pub header: RowHeader,
    pub row: Row,
}

/// What a slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotContent {
    Unused,
    Dead,
    /// A HOT chain's root whose version is gone; the chain goes on here.
    Redirect(u16),
    Version(RowVersion),
}

/// A decoded, fully checked view of one version of a hybrid page.
///
/// `open` reads every block the header says is in use, checks every
/// trailer against the header's page version (`Error::VersionMismatch`
/// if a compaction interleaved) and the directory against the versions
/// (each used slot names exactly one version, which carries that slot).
#[derive(Clone, Debug)]
pub struct HybridPage {
    geometry: Geometry,
    schema: Schema,
    header: ExtentHeader,
    directory: Vec<DirEntry>,
    column_rows: Vec<ColumnRow>,
    delta_items: Vec<DeltaItemRef>,
}

impl HybridPage {
    /// Opens the extent `blocks` (all its blocks, in extent order).
    pub fn open<B: AsRef<[u8]>>(g: &Geometry, schema: &Schema, blocks: &[B]) -> Result<HybridPage> {
        Self::open_at(g, schema, blocks, None)
    }

    /// `open` for the extent whose first block is `extent_start`, which a
    /// column part built with it (`compact::apply_at`) needs.
    pub fn open_at<B: AsRef<[u8]>>(g: &Geometry, schema: &Schema, blocks: &[B], extent_start: Option<u32>) -> Result<HybridPage> {
        if blocks.len() != g.extent_blocks() {
            return Err(Error::BadInput("wrong number of blocks for the extent"));
        }
        let header = ExtentHeader::read(blocks[0].as_ref(), g)?;
        let v = header.version;
        for i in 0..g.directory_blocks as usize {
            BlockTrailer::check(blocks[g.directory_block(i)].as_ref(), BlockKind::Directory, g.directory_block(i), Some(v))?;
        }
        let mut directory = Vec::with_capacity(header.slot_hwm as usize);
        for s in 0..g.params.max_slots {
            let (b, _) = g.directory_entry(s);
            let e = header::read_entry(blocks[b].as_ref(), g, s)?;
            if s >= header.slot_hwm {
                if e != DirEntry::Unused {
                    return corrupt("directory entry above the slot high-water mark");
                }
            } else {
                if e == DirEntry::Unused && s < header.free_hint {
                    return corrupt("unused slot below the free-slot hint");
                }
                directory.push(e);
            }
        }

        let mut column_rows = Vec::with_capacity(header.column_rows as usize);
        if header.column_rows > 0 {
            let col_blocks: Vec<&[u8]> = (0..g.params.column_blocks as usize).map(|i| blocks[g.column_block(i)].as_ref()).collect();
            let mut part = ColumnPart::parse(g, col_blocks, header.column_units as usize, header.column_rows as usize, Some(v))?;
            if let Some(first) = extent_start {
                part = part.at_extent(first);
            }
            for (c, d) in schema.columns.iter().enumerate().take(part.ncols()) {
                if part.column_meta(c).map(|m| &m.desc) != Some(d) {
                    return Err(Error::BadInput("column part was built for other column types"));
                }
            }
            if part.ncols() > schema.len() {
                return Err(Error::BadInput("column part has more columns than the schema"));
            }
            column_rows = part.rows()?;
        }

        let mut delta_items = Vec::new();
        for i in 0..header.delta_used as usize {
            let view = DeltaView::parse(blocks[g.delta_block(i)].as_ref(), g, i, Some(v))?;
            for it in view.items() {
                let it = it?;
                delta_items.push(DeltaItemRef { block: i as u8, offset: it.offset, header: it.header, bytes: it.bytes.to_vec() });
            }
        }

        let page = HybridPage { geometry: *g, schema: schema.clone(), header, directory, column_rows, delta_items };
        page.check_directory()?;
        Ok(page)
    }

    /// Every used slot names a version carrying that slot, and every
    /// version is named by its slot.
    fn check_directory(&self) -> Result<()> {
        let mut named = 0usize;
        for (s, e) in self.directory.iter().enumerate() {
            let slot = match e {
                DirEntry::Column { row } => self.column_rows.get(*row as usize).map(|r| r.header.slot),
                DirEntry::Delta { block, offset } => self.find_delta(*block, *offset).map(|i| self.delta_items[i].header.slot),
                DirEntry::Redirect { slot } => {
                    if *slot as usize >= self.directory.len() || !self.directory[*slot as usize].is_used() {
                        return corrupt("redirect to a slot without a version");
                    }
                    continue;
                }
                DirEntry::Unused | DirEntry::Dead => continue,
            };
            if slot != Some(s as u16) {
                return corrupt("directory entry does not point at its slot's version");
            }
            named += 1;
        }
        if named != self.column_rows.len() + self.delta_items.len() {
            return corrupt("a version is not named by the directory");
        }
        if self.column_rows.windows(2).any(|w| w[0].header.slot >= w[1].header.slot) {
            return corrupt("column rows not in slot order");
        }
        Ok(())
    }

    fn find_delta(&self, block: u8, offset: u16) -> Option<usize> {
        self.delta_items.binary_search_by_key(&(block, offset), |d| (d.block, d.offset)).ok()
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    pub fn header(&self) -> &ExtentHeader {
        &self.header
    }
    pub fn version(&self) -> u32 {
        self.header.version
    }
    pub fn column_rows(&self) -> &[ColumnRow] {
        &self.column_rows
    }
    pub fn delta_items(&self) -> &[DeltaItemRef] {
        &self.delta_items
    }
    /// Directory entry of `slot` (Unused above the high-water mark).
    pub fn entry(&self, slot: u16) -> DirEntry {
        self.directory.get(slot as usize).copied().unwrap_or(DirEntry::Unused)
    }

    /// The version at `slot` (a TID lookup: `Geometry::slot` first).
    pub fn get(&self, slot: u16) -> Result<SlotContent> {
        if slot as usize >= self.geometry.max_slots() {
            return Err(Error::BadInput("slot beyond max_slots"));
        }
        let e = self.entry(slot);
        let (header, row) = match e {
            DirEntry::Unused => return Ok(SlotContent::Unused),
            DirEntry::Dead => return Ok(SlotContent::Dead),
            DirEntry::Redirect { slot } => return Ok(SlotContent::Redirect(slot)),
            DirEntry::Column { row } => {
                let cr = &self.column_rows[row as usize];
                (cr.header, cr.row.clone())
            }
            DirEntry::Delta { block, offset } => {
                let it = &self.delta_items[self.find_delta(block, offset).ok_or(Error::Corrupt("dangling directory entry"))?];
                let row = decode_payload(&self.schema, it.header.natts as usize, &it.bytes[delta::ITEM_HDR..])?;
                (it.header, row)
            }
        };
        Ok(SlotContent::Version(RowVersion { slot, location: e, header, row }))
    }

    /// Every version, in slot order (the order a sequential scan returns
    /// and resumes in after a `VersionMismatch`).
    pub fn scan(&self) -> Result<Vec<RowVersion>> {
        let mut out = Vec::new();
        for s in 0..self.directory.len() as u16 {
            if let SlotContent::Version(v) = self.get(s)? {
                out.push(v);
            }
        }
        Ok(out)
    }
}
