//! Major compaction: merge the delta part into a new column part.
//!
//! Two steps, split so that WAL redo runs the second one only:
//!
//! * [`plan`] (primary only) asks a visibility oracle about every version
//!   of the page and returns a [`CompactionRecord`]: the new version
//!   number, the rows of the new column part (headers and values, in slot
//!   order), the delta items that stay (verbatim, in their old order), and
//!   the slots whose versions were removed. This is the custom WAL record.
//! * [`apply`] turns a record into the new blocks: column blocks, delta
//!   blocks, and patches for the header and directory blocks. It reads no
//!   block of the page, so redo does not depend on what is on disk, and it
//!   is a pure function of the record, so primary and standby produce the
//!   same bytes.
//!
//! Placement rules (see README "Compaction"): a delta version the oracle
//! sends to the column part goes there unless the column area is full, in
//! which case the highest slots stay in the delta part; a column version
//! never moves back to the delta part. Both parts are monotone in their
//! content, so the old column rows always fit again and the kept delta
//! items always fit the delta blocks they came from: compaction cannot
//! fail for lack of space.

use super::column::{self, ColumnRow};
use super::delta::{self, DeltaView, ITEM_HDR};
use super::header::{DirEntry, ExtentHeader, DIR_ENTRY};
use super::hot::{ChainLink, Chains, SlotSet};
use super::layout::{rd16, rd32, wr16, wr32, BlockKind, BlockTrailer, Geometry, Params, BLCKSZ, MAX_OFFSET, UNITS_PER_BLOCK};
use super::row::{decode_payload, ColumnDesc, Mvcc, Row, RowHeader, Schema, Width, DESC_LEN, MAX_COLUMNS, MVCC_OFF, ROW_HEADER};
use super::{corrupt, DeltaItemRef, Error, HybridPage, Result};
use crate::tid::Tid;

/// What the oracle decides for one version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Dead to every snapshot (heap's HEAPTUPLE_DEAD after pruning): drop
    /// the version. Its slot becomes `Dead` until VACUUM frees it, or, in
    /// a HOT chain, a redirect or `Unused` (see `hot.rs`).
    Remove,
    /// Keep it where it is (a delta version some snapshot may still need to
    /// see change: inserted or deleted by a transaction that is in progress
    /// or not yet visible to everyone).
    Stay,
    /// Move it into the column part (for a column version: keep it there).
    Column,
}

/// A version that is in no HOT chain.
pub const NO_CHAIN: ChainLink = ChainLink { heap_only: false, next: None, xmin: 0, updater: 0 };

/// The visibility oracle: called once per version, column rows first (in
/// row order), then delta items (block by block, in append order). It may
/// rewrite the MVCC fields (set hint bits, freeze), and the record carries
/// the rewritten fields.
pub trait Oracle {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement;
    /// The version's place in a HOT chain, read from its (rewritten) MVCC
    /// fields; called right after `decide`.
    fn link(&mut self, _slot: u16, _mvcc: &Mvcc) -> ChainLink {
        NO_CHAIN
    }
}

impl<F: FnMut(u16, &mut Mvcc) -> Placement> Oracle for F {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement {
        self(slot, mvcc)
    }
}

/// The compaction WAL record, decoded. See README "The compaction WAL record"
/// for its byte layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionRecord {
    pub params: Params,
    pub old_version: u32,
    pub new_version: u32,
    /// Descriptions of the columns the column rows use (a prefix of the
    /// relation's columns): redo cannot read the catalog.
    pub columns: Vec<ColumnDesc>,
    /// Rows of the new column part, ascending slot.
    pub column_rows: Vec<ColumnRow>,
    /// Delta items that stay, as encoded items, in their old order.
    pub delta_items: Vec<Vec<u8>>,
    /// Slots that become `Dead` (removed versions index entries may name),
    /// ascending.
    pub dead: Vec<u16>,
    /// Slots that become `Unused` (removed heap-only versions), ascending.
    pub unused: Vec<u16>,
    /// HOT chain roots that become (or stay, with a new target) redirects,
    /// ascending by root slot.
    pub redirects: Vec<(u16, u16)>,
    /// The slot high-water mark after the compaction, where it appended
    /// new rows above the old one (`plan_appending`, a bulk insert); 0
    /// where it allocated no slot and the mark stays as it is.
    pub slot_hwm: u16,
}

impl CompactionRecord {
    /// Directory entries the compaction changed to `Dead`, `Unused` or a
    /// redirect: every removed version's slot, plus redirects that moved
    /// or died (so an upper bound on the versions removed; zero exactly
    /// when nothing was removed).
    pub fn entries_released(&self) -> usize {
        self.dead.len() + self.unused.len() + self.redirects.len()
    }
}

/// Runs the oracle over `page` and chooses the new layout. `schema` is the
/// relation's current description.
pub fn plan(page: HybridPage, schema: &Schema, oracle: &mut dyn Oracle) -> Result<CompactionRecord> {
    plan_with_sources(page, schema, oracle).map(|p| p.record)
}

/// Where the versions of a planned compaction come from: for each row of
/// the new column part and each delta item that stays, its ordinal among
/// the old page's versions in the oracle's order (the old column rows in
/// row order, then the old delta items in append order). A record by
/// reference (format 4) logs these instead of the rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowSources {
    pub column_rows: Vec<u16>,
    pub delta_items: Vec<u16>,
}

/// A compaction's record and where its versions come from.
#[derive(Clone, Debug)]
pub struct Planned {
    pub record: CompactionRecord,
    pub sources: RowSources,
    /// Whether the column part is full (`ExtentHeader::column_full`): some
    /// versions offered to it had to stay in the delta part. None when
    /// none was offered (the plan learnt nothing about it).
    pub column_full: Option<bool>,
    /// Removed versions that leave no `Dead` slot (`Resolution::reclaimed`).
    pub reclaimed: usize,
    /// Appended rows (`plan_appending`) left in the delta part because the
    /// column part could not take them.
    pub turned_back: usize,
}

/// `plan`, also telling where each version of the result comes from.
pub fn plan_with_sources(page: HybridPage, schema: &Schema, oracle: &mut dyn Oracle) -> Result<Planned> {
    plan_appending(page, schema, oracle, Vec::new())
}

/// A new row a bulk insert hands to `plan_appending`: its header (its slot
/// one of the fresh slots above the page's high-water mark) and its delta
/// item encoding (`delta::encode_item`).
#[derive(Clone, Debug)]
pub struct AppendedRow {
    pub header: RowHeader,
    pub item: Vec<u8>,
}

/// `plan_with_sources` of `page` with `appended` rows added as if they were
/// delta items after the page's own (a bulk insert: the oracle offers them
/// to the column part, where they go unless it is full). Their slots must
/// be the fresh ones from the page's high-water mark up, in order; the
/// record raises the mark past them. Rows the column part turns back stay
/// as delta items, like any other: `Planned::turned_back` counts them, and
/// a caller that wants none there plans again with fewer. They have no
/// source in the old page, so such a record is never encoded by reference.
pub fn plan_appending(page: HybridPage, schema: &Schema, oracle: &mut dyn Oracle, appended: Vec<AppendedRow>) -> Result<Planned> {
    let g = &page.geometry;
    let old_version = page.header().version;
    let old_hwm = page.header().slot_hwm;
    for (j, a) in appended.iter().enumerate() {
        if a.header.slot as usize != old_hwm as usize + j || a.header.slot as usize >= g.max_slots() {
            return Err(Error::BadInput("appended rows must take the fresh slots from the high-water mark up"));
        }
        if a.item.len() < ITEM_HDR || rd16(&a.item, 0) as usize != a.item.len() || RowHeader::decode(&a.item[2..ITEM_HDR]) != a.header {
            return Err(Error::BadInput("appended row's item does not match its header"));
        }
    }
    let slot_hwm = if appended.is_empty() { 0 } else { old_hwm + appended.len() as u16 };
    let new_version = old_version.checked_add(1).ok_or(Error::BadInput("page version wrapped"))?;

    // Every version's decision and chain link first: which slots go
    // depends on whole HOT chains (hot.rs).
    let mut chains = Chains::new();
    for s in 0..page.header().slot_hwm {
        if let DirEntry::Redirect { slot } = page.entry(s) {
            chains.add_redirect(s, slot);
        }
    }
    let mut removed_set = SlotSet::new();
    // The page's versions are taken, not copied: a compaction of a full
    // column part would otherwise allocate every value of it twice.
    let HybridPage { column_rows, mut delta_items, .. } = page;
    delta_items.extend(appended.into_iter().map(|a| DeltaItemRef { block: u8::MAX, offset: 0, header: a.header, bytes: a.item }));
    let mut column_decided: Vec<(ColumnRow, Placement)> = Vec::with_capacity(column_rows.len());
    for mut cr in column_rows {
        let p = oracle.decide(cr.header.slot, &mut cr.header.mvcc);
        chains.add_version(cr.header.slot, oracle.link(cr.header.slot, &cr.header.mvcc));
        if p == Placement::Remove {
            removed_set.insert(cr.header.slot);
        }
        column_decided.push((cr, p));
    }
    let mut delta_decided: Vec<(RowHeader, Vec<u8>, Placement)> = Vec::with_capacity(delta_items.len());
    for item in delta_items {
        let mut header = item.header;
        let p = oracle.decide(header.slot, &mut header.mvcc);
        chains.add_version(header.slot, oracle.link(header.slot, &header.mvcc));
        let mut bytes = item.bytes;
        header.mvcc.encode(&mut bytes[2 + MVCC_OFF..ITEM_HDR]);
        if p == Placement::Remove {
            removed_set.insert(header.slot);
        }
        delta_decided.push((header, bytes, p));
    }
    let resolution = chains.resolve(&removed_set);
    let goes = |slot: u16, p: Placement| p == Placement::Remove && resolution.kept.binary_search(&slot).is_err();

    // Column part rows that stay, and delta versions offered to it.
    // Each with its ordinal in the oracle's order (`RowSources`).
    let mut kept_column: Vec<(ColumnRow, u16)> = Vec::new();
    struct DeltaVersion {
        bytes: Vec<u8>,
        to_column: Option<ColumnRow>,
        source: u16,
    }
    let ordinal = |i: usize| u16::try_from(i).map_err(|_| Error::Corrupt("more versions than slots"));
    let nold_column = column_decided.len();
    let mut deltas: Vec<DeltaVersion> = Vec::new();
    for (i, (cr, p)) in column_decided.into_iter().enumerate() {
        if !goes(cr.header.slot, p) {
            kept_column.push((cr, ordinal(i)?));
        }
    }
    for (j, (header, bytes, p)) in delta_decided.into_iter().enumerate() {
        let source = ordinal(nold_column + j)?;
        match p {
            _ if goes(header.slot, p) => {}
            Placement::Remove | Placement::Stay => deltas.push(DeltaVersion { bytes, to_column: None, source }),
            Placement::Column => {
                let row = decode_payload(schema, header.natts as usize, &bytes[ITEM_HDR..])?;
                deltas.push(DeltaVersion { bytes, to_column: Some(ColumnRow { header, row }), source });
            }
        }
    }

    // Offered delta versions by descending slot: the first `k` of them are
    // turned back if the column part would not fit. Fewer rows never need
    // more units (`column::encoded_len`), so the smallest working k is
    // found in one pass: the kept column rows' tally, then the offered
    // versions added from the last one back, until one no longer fits.
    let mut offered: Vec<usize> = (0..deltas.len()).filter(|&i| deltas[i].to_column.is_some()).collect();
    offered.sort_by_key(|&i| std::cmp::Reverse(deltas[i].to_column.as_ref().map_or(0, |r| r.header.slot)));
    let mut tally = column::SizeTally::new(schema);
    for (cr, _) in &kept_column {
        tally.add(schema, cr)?;
    }
    let fits = |t: &column::SizeTally| -> Result<bool> {
        let (nrows, units) = t.units(schema)?;
        Ok(nrows == 0 || units <= g.column_units())
    };
    if !fits(&tally)? {
        return corrupt("column part no longer fits with its own rows");
    }
    let mut hi = 0;
    for k in (0..offered.len()).rev() {
        if let Some(cr) = &deltas[offered[k]].to_column {
            tally.add(schema, cr)?;
        }
        if !fits(&tally)? {
            hi = k + 1;
            break;
        }
    }
    for &i in &offered[..hi] {
        deltas[i].to_column = None;
    }

    let mut column_rows = kept_column;
    let mut delta_items = Vec::new();
    let mut sources = RowSources::default();
    for d in deltas {
        match d.to_column {
            Some(cr) => column_rows.push((cr, d.source)),
            None => {
                delta_items.push(d.bytes);
                sources.delta_items.push(d.source);
            }
        }
    }
    column_rows.sort_by_key(|(r, _)| r.header.slot);
    sources.column_rows = column_rows.iter().map(|&(_, o)| o).collect();
    let column_rows: Vec<ColumnRow> = column_rows.into_iter().map(|(r, _)| r).collect();
    let ncols = column_rows.iter().map(|r| r.row.values.len()).max().unwrap_or(0);
    let record = CompactionRecord {
        params: g.params,
        old_version,
        new_version,
        columns: schema.columns[..ncols].to_vec(),
        column_rows,
        delta_items,
        dead: resolution.dead,
        unused: resolution.unused,
        redirects: resolution.redirects,
        slot_hwm,
    };
    let column_full = (!offered.is_empty()).then_some(hi > 0);
    // Appended rows are the only versions in slots at or above the old mark.
    let turned_back = if record.slot_hwm == 0 { 0 } else { record.delta_items.iter().filter(|it| rd16(it, 2) >= old_hwm).count() };
    Ok(Planned { record, sources, column_full, reclaimed: resolution.reclaimed, turned_back })
}

/// The blocks a compaction writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionOutput {
    pub version: u32,
    pub column_rows: u16,
    pub column_units: u16,
    pub delta_used: u16,
    /// All column blocks; those past `column_units` are zero.
    pub column_blocks: Vec<Vec<u8>>,
    /// All delta blocks; those past `delta_used` are zero.
    pub delta_blocks: Vec<Vec<u8>>,
    /// The header's `column_full` after the compaction: `apply` leaves it
    /// false, the primary sets it from its plan, and redo from the record.
    pub column_full: bool,
    /// New directory entries, ascending slot: every version's new place, and
    /// `Dead`, `Unused` or a redirect for every removed one and every
    /// redirect that changed. Other slots keep their entries.
    pub directory: Vec<(u16, DirEntry)>,
    /// The record's `slot_hwm` (0: the header keeps its mark).
    pub slot_hwm: u16,
}

/// Builds the new blocks from a record (primary and redo alike).
pub fn apply(g: &Geometry, rec: &CompactionRecord) -> Result<CompactionOutput> {
    apply_at(g, rec, None)
}

/// `apply` for the extent whose first block is `extent_start`, which lets
/// the column part store own-TID ctids compactly (`column::build_at`).
/// Primary and redo pass the same start, so they build the same bytes.
pub fn apply_at(g: &Geometry, rec: &CompactionRecord, extent_start: Option<u32>) -> Result<CompactionOutput> {
    if rec.params != g.params {
        return Err(Error::BadParams("compaction record made with other parameters"));
    }
    if rec.old_version.checked_add(1) != Some(rec.new_version) {
        return corrupt("compaction record versions not consecutive");
    }
    let schema = Schema::new(rec.columns.clone()).map_err(|_| Error::Corrupt("bad columns in compaction record"))?;
    let mut directory: Vec<(u16, DirEntry)> = Vec::new();

    let (column_blocks, p) = column::build_at(g, &schema, &rec.column_rows, rec.new_version, extent_start).map_err(|e| match e {
        Error::NoSpace | Error::BadInput(_) => Error::Corrupt("compaction record column rows do not build"),
        e => e,
    })?;
    for (r, cr) in rec.column_rows.iter().enumerate() {
        directory.push((cr.header.slot, DirEntry::Column { row: r as u16 }));
    }

    // Next-fit repack of the kept items, as appends would have placed them.
    let mut delta_blocks = vec![vec![0u8; BLCKSZ]; g.params.delta_blocks as usize];
    let mut used = 0usize;
    for item in &rec.delta_items {
        if item.len() < ITEM_HDR || rd16(item, 0) as usize != item.len() {
            return corrupt("bad delta item in compaction record");
        }
        let slot = rd16(item, 2);
        let offset = loop {
            if used > 0 {
                match delta::append(&mut delta_blocks[used - 1], item) {
                    Ok(off) => break off,
                    Err(Error::NoSpace) => {}
                    Err(_) => return corrupt("bad delta item in compaction record"),
                }
            }
            if used == delta_blocks.len() {
                return corrupt("compaction record's delta items exceed the delta part");
            }
            delta::init_block(&mut delta_blocks[used], g, used, rec.new_version);
            used += 1;
        };
        directory.push((slot, DirEntry::Delta { block: (used - 1) as u8, offset }));
    }
    for &s in &rec.dead {
        directory.push((s, DirEntry::Dead));
    }
    for &s in &rec.unused {
        directory.push((s, DirEntry::Unused));
    }
    for &(s, t) in &rec.redirects {
        if t as usize >= g.max_slots() {
            return corrupt("redirect beyond max_slots in a compaction record");
        }
        directory.push((s, DirEntry::Redirect { slot: t }));
    }
    directory.sort_by_key(|&(s, _)| s);
    if directory.windows(2).any(|w| w[0].0 == w[1].0) {
        return corrupt("a slot appears twice in a compaction record");
    }
    if directory.last().is_some_and(|&(s, _)| s as usize >= g.max_slots()) || rec.slot_hwm as usize > g.max_slots() {
        return corrupt("slot beyond max_slots in a compaction record");
    }
    Ok(CompactionOutput {
        version: rec.new_version,
        column_rows: p.nrows as u16,
        column_units: if p.nrows == 0 { 0 } else { p.total_units as u16 },
        delta_used: used as u16,
        column_blocks,
        delta_blocks,
        directory,
        column_full: false,
        slot_hwm: rec.slot_hwm,
    })
}

impl CompactionOutput {
    /// Column blocks to write: the used ones and any the old part used.
    pub fn column_blocks_to_write(&self, old: &ExtentHeader) -> usize {
        (self.column_units.max(old.column_units) as usize).div_ceil(UNITS_PER_BLOCK)
    }
    /// Delta blocks to write: the used ones and any the old part used.
    pub fn delta_blocks_to_write(&self, old: &ExtentHeader) -> usize {
        self.delta_used.max(old.delta_used) as usize
    }

    /// Applies the new version, sizes and directory entries to the header
    /// block (which holds the first directory entries). The slot
    /// high-water mark stays, unless the compaction appended rows in fresh
    /// slots above it (a bulk insert), which it raises past them.
    pub fn patch_header(&self, block: &mut [u8], g: &Geometry) -> Result<()> {
        let old = ExtentHeader::read(block, g)?;
        if self.slot_hwm != 0 && self.slot_hwm <= old.slot_hwm {
            return corrupt("compaction record lowers the slot high-water mark");
        }
        let slot_hwm = old.slot_hwm.max(self.slot_hwm);
        if self.directory.last().is_some_and(|&(s, _)| s >= slot_hwm) {
            return corrupt("compaction names a slot above the high-water mark");
        }
        let h = ExtentHeader {
            version: self.version,
            slot_hwm,
            column_rows: self.column_rows,
            column_units: self.column_units,
            delta_used: self.delta_used,
            free_hint: self.directory.iter().filter(|(_, e)| *e == DirEntry::Unused).map(|&(s, _)| s).fold(old.free_hint, u16::min),
            column_full: self.column_full,
            // A new column part: whether all of it is visible is the
            // glue's call, made after the compaction (it logs it apart).
            all_visible: false,
            // The glue cleared it (and the map bits) before the compaction.
            map_visible: false,
        };
        h.write(block, g);
        self.patch_entries(block, g, 0);
        Ok(())
    }

    /// Applies the directory entries that live in directory block `i` and
    /// stamps it with the new version (every directory block is, so a
    /// reader can check any of them against the header's version).
    pub fn patch_directory_block(&self, block: &mut [u8], g: &Geometry, i: usize) -> Result<()> {
        let index = g.directory_block(i);
        BlockTrailer::check(block, BlockKind::Directory, index, None)?;
        self.patch_entries(block, g, index);
        BlockTrailer { kind: BlockKind::Directory, index: index as u16, version: self.version }.write(block);
        Ok(())
    }

    fn patch_entries(&self, block: &mut [u8], g: &Geometry, index: usize) {
        for &(slot, e) in &self.directory {
            let (b, off) = g.directory_entry(slot);
            if b == index {
                block[off..off + DIR_ENTRY].copy_from_slice(&e.encode_for(slot));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Record encoding

/// "HSCR", first bytes of a compaction record.
pub const RECORD_MAGIC: u32 = 0x5243_5348;
const RF_LZ4: u8 = 0x01;
/// The format `encode` writes. Format 3 carries what format 2 does, laid
/// out column-wise: one array per row-header field and per table column,
/// each made of like values (see README "The compaction WAL record"). Row by
/// row, the values that repeat on a page (equal xmins and infomask words,
/// slots and keys that count up, blank padding) are a row's width apart,
/// where LZ4 finds little; side by side they become runs.
pub const RECORD_FORMAT: u8 = 3;
/// Format 4, a record *by reference*: format 3's row headers and slot
/// lists, but instead of values and payloads each version's ordinal among
/// the old page's versions (`RowSources`); redo reads the values from the
/// blocks as they were before the compaction (`ReferenceRecord::resolve`).
/// Only valid where redo is sure to find those blocks as the primary had
/// them: the glue's rules (src/hasis/README.md, "WAL").
pub const RECORD_FORMAT_BY_REFERENCE: u8 = 4;
/// Format 2: the body row by row (row header, payload, next row), with the
/// HOT lists. Still replays.
pub const RECORD_FORMAT_ROWS: u8 = 2;
/// Format 1: format 2 without the HOT lists (only the dead slots), from
/// before HOT. Still replays.
pub const RECORD_FORMAT_NO_HOT: u8 = 1;
const RECORD_HDR: usize = 32;
/// Fixed-length values up to this width (integers, floats, timestamps,
/// uuids) are stored as byte planes; wider ones (char(n) and the like)
/// back to back, where LZ4 finds their repeated substrings whole.
const PLANES_MAX_WIDTH: usize = 16;

/// The body of a record, whatever its format: the record without the
/// parameters and versions its fixed header carries.
struct RecordBody {
    columns: Vec<ColumnDesc>,
    column_rows: Vec<ColumnRow>,
    delta_items: Vec<Vec<u8>>,
    dead: Vec<u16>,
    unused: Vec<u16>,
    redirects: Vec<(u16, u16)>,
}

/// A record count or length as its u16.
fn count(n: usize) -> Result<[u8; 2]> {
    u16::try_from(n).map(|v| v.to_le_bytes()).map_err(|_| Error::BadInput("too many entries for a record"))
}

impl CompactionRecord {
    /// Encodes the record (format 3); with `compress` the body is
    /// LZ4-compressed when that makes it smaller (column data usually
    /// compresses; the WAL has no compression for non-image data of its
    /// own).
    pub fn encode(&self, compress: bool) -> Result<Vec<u8>> {
        self.frame(RECORD_FORMAT, self.columnar_body()?, compress)
    }

    /// Encodes the record by reference (format 4): `sources` from
    /// `plan_with_sources`, `schema` the relation's description the plan
    /// was made with (redo opens the old page with it).
    pub fn encode_by_reference(&self, sources: &RowSources, schema: &Schema, compress: bool) -> Result<Vec<u8>> {
        if self.slot_hwm != 0 {
            return Err(Error::BadInput("a record that appends rows has no sources for them"));
        }
        if sources.column_rows.len() != self.column_rows.len() || sources.delta_items.len() != self.delta_items.len() {
            return Err(Error::BadInput("row sources do not match the record"));
        }
        let ncols = self.columns.len();
        if schema.columns.get(..ncols) != Some(&self.columns[..]) {
            return Err(Error::BadInput("record columns are not a prefix of the schema"));
        }
        let mut body = Vec::new();
        put_columns(&mut body, &schema.columns)?;
        body.extend_from_slice(&count(ncols)?);
        body.extend_from_slice(&count(self.column_rows.len())?);
        let headers: Vec<RowHeader> = self.column_rows.iter().map(|cr| cr.header).collect();
        put_headers(&mut body, &headers);
        put_u16s(&mut body, sources.column_rows.iter().copied());
        body.extend_from_slice(&count(self.delta_items.len())?);
        put_headers(&mut body, &self.item_headers()?);
        put_u16s(&mut body, sources.delta_items.iter().copied());
        self.put_slot_lists(&mut body)?;
        self.frame(RECORD_FORMAT_BY_REFERENCE, body, compress)
    }

    /// The row headers of the delta items that stay, each item checked to
    /// be well-formed.
    fn item_headers(&self) -> Result<Vec<RowHeader>> {
        self.delta_items
            .iter()
            .map(|it| match it.len() >= ITEM_HDR && rd16(it, 0) as usize == it.len() {
                true => Ok(RowHeader::decode(&it[2..ITEM_HDR])),
                false => Err(Error::BadInput("malformed delta item in a compaction record")),
            })
            .collect()
    }

    /// Encodes the record in format 2, as `encode` did before format 3: for
    /// tests that check old records still replay, and to compare sizes.
    #[cfg(test)]
    pub(crate) fn encode_format_2(&self, compress: bool) -> Result<Vec<u8>> {
        self.frame(RECORD_FORMAT_ROWS, self.row_body()?, compress)
    }

    /// The fixed header and the (possibly compressed) body.
    fn frame(&self, format: u8, body: Vec<u8>, compress: bool) -> Result<Vec<u8>> {
        let body_len = u32::try_from(body.len()).map_err(|_| Error::BadInput("record too large"))?;
        let (flags, stored) = match compress {
            true => {
                let c = lz4_flex::block::compress(&body);
                if c.len() < body.len() {
                    (RF_LZ4, c)
                } else {
                    (0, body)
                }
            }
            false => (0, body),
        };
        let mut out = vec![0u8; RECORD_HDR];
        wr32(&mut out, 0, RECORD_MAGIC);
        out[4] = format;
        out[5] = flags;
        wr16(&mut out, 6, self.slot_hwm);
        wr32(&mut out, 8, self.old_version);
        wr32(&mut out, 12, self.new_version);
        wr16(&mut out, 16, self.params.column_blocks);
        wr16(&mut out, 18, self.params.delta_blocks);
        wr16(&mut out, 20, self.params.compact_trigger);
        wr16(&mut out, 22, self.params.max_slots);
        wr32(&mut out, 24, body_len);
        wr32(&mut out, 28, stored.len() as u32);
        out.extend_from_slice(&stored);
        Ok(out)
    }

    /// Format 3's body: the column descriptions, the column rows' headers
    /// (`put_headers`) and values (`put_column_values`, column by column),
    /// the delta items' headers, payload lengths and payloads, the slot
    /// lists.
    fn columnar_body(&self) -> Result<Vec<u8>> {
        Schema::new(self.columns.clone())?;
        let mut body = Vec::new();
        put_columns(&mut body, &self.columns)?;
        body.extend_from_slice(&count(self.column_rows.len())?);
        for cr in &self.column_rows {
            // The header's natts is what decoding rebuilds the values from.
            if cr.row.values.len() != cr.header.natts as usize {
                return Err(Error::BadInput("column row's natts differs from its number of values"));
            }
            if cr.row.values.len() > self.columns.len() {
                return Err(Error::BadInput("row has more values than the schema has columns"));
            }
        }
        let headers: Vec<RowHeader> = self.column_rows.iter().map(|cr| cr.header).collect();
        put_headers(&mut body, &headers);
        for (c, d) in self.columns.iter().enumerate() {
            put_column_values(&mut body, c, d, &self.column_rows)?;
        }

        // Delta items stay opaque payloads: they may have more columns
        // than `columns` describes (those cover the column rows only).
        body.extend_from_slice(&count(self.delta_items.len())?);
        put_headers(&mut body, &self.item_headers()?);
        let payloads: Vec<&[u8]> = self.delta_items.iter().map(|it| &it[ITEM_HDR..]).collect();
        put_u16s(&mut body, payloads.iter().map(|p| p.len() as u16));
        let layout = PayloadLayout::choose(&payloads);
        body.push(layout as u8);
        let flat: Vec<u8> = payloads.concat();
        match layout {
            PayloadLayout::BackToBack => body.extend_from_slice(&flat),
            PayloadLayout::Planes => put_planes(&mut body, &flat, payloads[0].len()),
        }
        self.put_slot_lists(&mut body)?;
        Ok(body)
    }

    /// Format 2's body: per column row its header, payload length and
    /// row-format payload; the delta items verbatim; the slot lists.
    #[cfg(test)]
    fn row_body(&self) -> Result<Vec<u8>> {
        let schema = Schema::new(self.columns.clone())?;
        let mut body = Vec::new();
        put_columns(&mut body, &self.columns)?;
        body.extend_from_slice(&count(self.column_rows.len())?);
        for cr in &self.column_rows {
            let mut h = [0u8; ROW_HEADER];
            cr.header.encode(&mut h);
            body.extend_from_slice(&h);
            let payload = super::row::encode_payload(&schema, &cr.row)?;
            body.extend_from_slice(&count(payload.len())?);
            body.extend_from_slice(&payload);
        }
        body.extend_from_slice(&count(self.delta_items.len())?);
        for it in &self.delta_items {
            body.extend_from_slice(it);
        }
        self.put_slot_lists(&mut body)?;
        Ok(body)
    }

    /// Dead and unused slots, then the redirects (formats 2 and 3).
    fn put_slot_lists(&self, body: &mut Vec<u8>) -> Result<()> {
        for list in [&self.dead, &self.unused] {
            body.extend_from_slice(&count(list.len())?);
            for s in list.iter() {
                body.extend_from_slice(&s.to_le_bytes());
            }
        }
        body.extend_from_slice(&count(self.redirects.len())?);
        for (s, t) in &self.redirects {
            body.extend_from_slice(&s.to_le_bytes());
            body.extend_from_slice(&t.to_le_bytes());
        }
        Ok(())
    }

    /// Decodes a record of format 1, 2 or 3; anything malformed is
    /// `Error::Corrupt`. A record by reference (format 4) needs the old
    /// page: `decode_any`.
    pub fn decode(b: &[u8]) -> Result<CompactionRecord> {
        match CompactionRecord::decode_any(b)? {
            DecodedRecord::Full(rec) => Ok(rec),
            DecodedRecord::ByReference(_) => Err(Error::BadInput("compaction record by reference needs the old page")),
        }
    }

    /// Decodes a record of any format.
    pub fn decode_any(b: &[u8]) -> Result<DecodedRecord> {
        if b.len() < RECORD_HDR {
            return corrupt("compaction record too short");
        }
        if rd32(b, 0) != RECORD_MAGIC {
            return Err(Error::BadMagic);
        }
        let format = b[4];
        if ![RECORD_FORMAT, RECORD_FORMAT_ROWS, RECORD_FORMAT_NO_HOT, RECORD_FORMAT_BY_REFERENCE].contains(&format) {
            return Err(Error::BadFormatVersion(format));
        }
        let flags = b[5];
        if flags & !RF_LZ4 != 0 {
            return corrupt("unknown compaction record flags");
        }
        // Zero in every record before bulk inserts appended rows.
        let slot_hwm = rd16(b, 6);
        let body_len = rd32(b, 24) as usize;
        let stored_len = rd32(b, 28) as usize;
        if RECORD_HDR + stored_len != b.len() {
            return corrupt("compaction record length mismatch");
        }
        let stored = &b[RECORD_HDR..];
        let body = if flags & RF_LZ4 != 0 {
            // A corrupt length must not make us allocate gigabytes.
            if body_len > 255 * stored_len + 16 {
                return corrupt("compaction record claims an impossible size");
            }
            lz4_flex::block::decompress(stored, body_len).map_err(|_| Error::Corrupt("compaction record does not decompress"))?
        } else {
            stored.to_vec()
        };
        if body.len() != body_len {
            return corrupt("compaction record body length mismatch");
        }
        let params = Params { column_blocks: rd16(b, 16), delta_blocks: rd16(b, 18), compact_trigger: rd16(b, 20), max_slots: rd16(b, 22) };
        let (old_version, new_version) = (rd32(b, 8), rd32(b, 12));
        let mut r = Reader { b: &body, pos: 0 };
        let out = match format {
            // Appended rows have no source in the old page.
            RECORD_FORMAT_BY_REFERENCE if slot_hwm != 0 => return corrupt("compaction record by reference raises the slot high-water mark"),
            RECORD_FORMAT_BY_REFERENCE => DecodedRecord::ByReference(take_reference_body(&mut r, params, old_version, new_version)?),
            _ => {
                let parts = match format {
                    RECORD_FORMAT => take_columnar_body(&mut r)?,
                    _ => take_row_body(&mut r, format)?,
                };
                DecodedRecord::Full(CompactionRecord {
                    params,
                    old_version,
                    new_version,
                    columns: parts.columns,
                    column_rows: parts.column_rows,
                    delta_items: parts.delta_items,
                    dead: parts.dead,
                    unused: parts.unused,
                    redirects: parts.redirects,
                    slot_hwm,
                })
            }
        };
        if r.pos != body.len() {
            return corrupt("trailing bytes in compaction record");
        }
        Ok(out)
    }
}

/// A decoded compaction record.
#[derive(Clone, Debug)]
pub enum DecodedRecord {
    /// Formats 1 to 3: everything redo needs.
    Full(CompactionRecord),
    /// Format 4: row headers and where the values are in the old page.
    ByReference(ReferenceRecord),
}

/// A compaction record by reference (format 4), decoded: what it lacks of
/// a `CompactionRecord` (values and payloads) is in the page the
/// compaction started from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceRecord {
    pub params: Params,
    pub old_version: u32,
    pub new_version: u32,
    /// The relation's description the plan was made with: the old page
    /// opens with it, and the new column part uses its first `ncols`.
    pub schema: Schema,
    ncols: usize,
    column_headers: Vec<RowHeader>,
    column_sources: Vec<u16>,
    item_headers: Vec<RowHeader>,
    item_sources: Vec<u16>,
    dead: Vec<u16>,
    unused: Vec<u16>,
    redirects: Vec<(u16, u16)>,
}

impl ReferenceRecord {
    /// The full record, with values and payloads taken from `old`, the page
    /// the compaction started from (opened with `self.schema`). Every
    /// reference must name a version of the same slot and column count
    /// (a new column row an old column row or delta item, a kept delta
    /// item an old delta item), so a record replayed against other blocks
    /// is `Error::Corrupt`, not a wrong page.
    pub fn resolve(&self, old: &HybridPage) -> Result<CompactionRecord> {
        if old.version() != self.old_version {
            return corrupt("compaction record by reference is for another page version");
        }
        let ncr = old.column_rows().len();
        let items = old.delta_items();
        let mut column_rows = Vec::with_capacity(self.column_headers.len());
        for (h, &o) in self.column_headers.iter().zip(&self.column_sources) {
            let o = o as usize;
            let row = if o < ncr {
                let src = &old.column_rows()[o];
                if src.header.slot != h.slot || src.header.natts != h.natts {
                    return corrupt("compaction record names another column row");
                }
                src.row.clone()
            } else {
                let it = items.get(o - ncr).ok_or(Error::Corrupt("compaction record names a version the page lacks"))?;
                if it.header.slot != h.slot || it.header.natts != h.natts {
                    return corrupt("compaction record names another delta item");
                }
                decode_payload(&self.schema, h.natts as usize, &it.bytes[ITEM_HDR..])?
            };
            column_rows.push(ColumnRow { header: *h, row });
        }
        let mut delta_items = Vec::with_capacity(self.item_headers.len());
        for (h, &o) in self.item_headers.iter().zip(&self.item_sources) {
            let it = (o as usize).checked_sub(ncr).and_then(|j| items.get(j)).ok_or(Error::Corrupt("compaction record names a delta item the page lacks"))?;
            if it.header.slot != h.slot || it.header.natts != h.natts {
                return corrupt("compaction record names another delta item");
            }
            let mut bytes = it.bytes.clone();
            h.encode(&mut bytes[2..ITEM_HDR]);
            delta_items.push(bytes);
        }
        Ok(CompactionRecord {
            params: self.params,
            old_version: self.old_version,
            new_version: self.new_version,
            columns: self.schema.columns[..self.ncols].to_vec(),
            column_rows,
            delta_items,
            dead: self.dead.clone(),
            unused: self.unused.clone(),
            redirects: self.redirects.clone(),
            slot_hwm: 0,
        })
    }
}

/// The body of format 4 (`CompactionRecord::encode_by_reference`).
fn take_reference_body(r: &mut Reader, params: Params, old_version: u32, new_version: u32) -> Result<ReferenceRecord> {
    let schema = Schema { columns: take_columns(r)? };
    let ncols = r.u16()? as usize;
    if ncols > schema.len() {
        return corrupt("compaction record uses more columns than it describes");
    }
    let nrows = r.u16()? as usize;
    let column_headers = take_headers(r, nrows)?;
    if column_headers.iter().any(|h| h.natts as usize > ncols) {
        return corrupt("row version has more columns than the compaction record describes");
    }
    let column_sources = take_u16s(r, nrows)?;
    let nitems = r.u16()? as usize;
    let item_headers = take_headers(r, nitems)?;
    let item_sources = take_u16s(r, nitems)?;
    let dead = take_slot_list(r)?;
    let unused = take_slot_list(r)?;
    let redirects = take_redirects(r)?;
    Ok(ReferenceRecord { params, old_version, new_version, schema, ncols, column_headers, column_sources, item_headers, item_sources, dead, unused, redirects })
}

fn put_columns(body: &mut Vec<u8>, columns: &[ColumnDesc]) -> Result<()> {
    body.extend_from_slice(&count(columns.len())?);
    for d in columns {
        let mut b = [0u8; DESC_LEN];
        d.encode(&mut b);
        body.extend_from_slice(&b);
    }
    Ok(())
}

fn take_columns(r: &mut Reader) -> Result<Vec<ColumnDesc>> {
    let ncols = r.u16()? as usize;
    let mut columns = Vec::with_capacity(ncols.min(MAX_COLUMNS));
    for _ in 0..ncols {
        columns.push(ColumnDesc::decode(r.take(DESC_LEN)?)?);
    }
    Schema::new(columns).map(|s| s.columns).map_err(|_| Error::Corrupt("bad columns in compaction record"))
}

fn take_slot_list(r: &mut Reader) -> Result<Vec<u16>> {
    let n = r.u16()? as usize;
    (0..n).map(|_| r.u16()).collect()
}

fn take_redirects(r: &mut Reader) -> Result<Vec<(u16, u16)>> {
    let n = r.u16()? as usize;
    (0..n).map(|_| Ok((r.u16()?, r.u16()?))).collect()
}

/// The body of formats 1 and 2: rows one after another.
fn take_row_body(r: &mut Reader, format: u8) -> Result<RecordBody> {
    let columns = take_columns(r)?;
    let schema = Schema { columns };
    let nrows = r.u16()? as usize;
    let mut column_rows = Vec::with_capacity(nrows);
    for _ in 0..nrows {
        let header = RowHeader::decode(r.take(ROW_HEADER)?);
        let plen = r.u16()? as usize;
        let row = decode_payload(&schema, header.natts as usize, r.take(plen)?)?;
        column_rows.push(ColumnRow { header, row });
    }
    let nitems = r.u16()? as usize;
    let mut delta_items = Vec::with_capacity(nitems);
    for _ in 0..nitems {
        let len = rd16(r.peek(2)?, 0) as usize;
        if len < ITEM_HDR {
            return corrupt("bad delta item in compaction record");
        }
        delta_items.push(r.take(len)?.to_vec());
    }
    let dead = take_slot_list(r)?;
    let (unused, redirects) = match format {
        RECORD_FORMAT_NO_HOT => (Vec::new(), Vec::new()),
        _ => (take_slot_list(r)?, take_redirects(r)?),
    };
    Ok(RecordBody { columns: schema.columns, column_rows, delta_items, dead, unused, redirects })
}

/// The body of format 3 (`CompactionRecord::columnar_body`).
fn take_columnar_body(r: &mut Reader) -> Result<RecordBody> {
    let columns = take_columns(r)?;
    let nrows = r.u16()? as usize;
    let mut column_rows = Vec::with_capacity(nrows);
    for header in take_headers(r, nrows)? {
        if header.natts as usize > columns.len() {
            return corrupt("row version has more columns than the compaction record describes");
        }
        column_rows.push(ColumnRow { header, row: Row { values: Vec::with_capacity(header.natts as usize) } });
    }
    // Rows that have column c (natts > c): fewer with every column.
    let mut having: Vec<usize> = (0..nrows).collect();
    for (c, d) in columns.iter().enumerate() {
        having.retain(|&i| column_rows[i].header.natts as usize > c);
        take_column_values(r, d, &having, &mut column_rows)?;
    }

    let nitems = r.u16()? as usize;
    let item_headers = take_headers(r, nitems)?;
    let payload_lens = take_u16s(r, nitems)?;
    let planes = match r.take(1)?[0] {
        0 => None,
        1 => match payload_lens.first() {
            Some(&len) if len > 0 && payload_lens.iter().all(|&l| l == len) => Some(take_planes(r, nitems, len as usize)?),
            _ => return corrupt("delta payloads as planes without one length in a compaction record"),
        },
        _ => return corrupt("unknown delta payload layout in a compaction record"),
    };
    let mut delta_items = Vec::with_capacity(nitems);
    let mut at = 0usize;
    for (header, plen) in item_headers.iter().zip(payload_lens) {
        let len = ITEM_HDR + plen as usize;
        if len > u16::MAX as usize {
            return corrupt("delta item in compaction record too long");
        }
        let payload = match &planes {
            Some(flat) => {
                let p = flat.get(at..at + plen as usize).ok_or(Error::Corrupt("delta payloads truncated"))?;
                at += plen as usize;
                p
            }
            None => r.take(plen as usize)?,
        };
        let mut item = vec![0u8; len];
        wr16(&mut item, 0, len as u16);
        header.encode(&mut item[2..ITEM_HDR]);
        item[ITEM_HDR..].copy_from_slice(payload);
        delta_items.push(item);
    }
    let dead = take_slot_list(r)?;
    let unused = take_slot_list(r)?;
    let redirects = take_redirects(r)?;
    Ok(RecordBody { columns, column_rows, delta_items, dead, unused, redirects })
}

// Format 3's arrays.

/// How format 3 stores the delta items' payloads (row format, opaque to
/// the record: they may have more columns than `columns` describes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PayloadLayout {
    /// One after another.
    BackToBack = 0,
    /// All of one length (a table of fixed-length columns and equal
    /// varlenas, like pgbench_accounts): byte planes of that width, so
    /// each byte position of the rows (a key's low byte, padding) is its
    /// own run instead of a few bytes between two long matches.
    Planes = 1,
}

impl PayloadLayout {
    fn choose(payloads: &[&[u8]]) -> PayloadLayout {
        match payloads.first() {
            Some(p) if payloads.len() > 1 && !p.is_empty() && payloads.iter().all(|q| q.len() == p.len()) => PayloadLayout::Planes,
            _ => PayloadLayout::BackToBack,
        }
    }
}

/// Appends `flat`, a sequence of `width`-byte words, as byte planes: the
/// first byte of every word, then the second byte of every word, and so
/// on. The high bytes of small or equal numbers, and the bytes at one
/// position of similar values, then form runs, which LZ4 needs (it
/// matches 4 bytes or more).
fn put_planes(out: &mut Vec<u8>, flat: &[u8], width: usize) {
    if width == 0 {
        return;
    }
    let n = flat.len() / width;
    out.reserve(flat.len());
    for k in 0..width {
        out.extend((0..n).map(|i| flat[i * width + k]));
    }
}

/// Reads `n` words of `width` bytes that `put_planes` wrote; returns them
/// back to back.
fn take_planes(r: &mut Reader, n: usize, width: usize) -> Result<Vec<u8>> {
    let len = n.checked_mul(width).ok_or(Error::Corrupt("compaction record array too long"))?;
    let planes = r.take(len)?;
    let mut flat = vec![0u8; len];
    for k in 0..width {
        for i in 0..n {
            flat[i * width + k] = planes[k * n + i];
        }
    }
    Ok(flat)
}

/// How a word array is stored: its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WordCoding {
    /// The words themselves: best for values that are mostly equal with
    /// exceptions (xmin of a loaded table, a balance, infomask words).
    Plain = 0,
    /// Each word minus the one before (the first minus 0), wrapping in
    /// the word's width: best for values that count up (slots, keys, the
    /// xids of successive updates), which become a run of small numbers.
    Differences = 1,
}

/// Mask of a `width`-byte word (1 to 8 bytes) in a u64.
fn word_mask(width: usize) -> u64 {
    u64::MAX >> (64 - 8 * width)
}

/// How many words differ from the word before: what LZ4 pays for, about.
fn changes(words: impl Iterator<Item = u64>) -> usize {
    let mut prev = None;
    words.filter(|&w| prev.replace(w).is_some_and(|p| p != w)).count()
}

/// Appends `words` (each `width` bytes, 1 to 8) as their coding byte and
/// byte planes, in the coding with fewer changes between neighbours
/// (plain on a tie).
fn put_words(out: &mut Vec<u8>, words: &[u64], width: usize) {
    let mask = word_mask(width);
    let differences = |ws: &[u64]| -> Vec<u64> {
        let mut prev = 0u64;
        ws.iter()
            .map(|&w| {
                let d = w.wrapping_sub(prev) & mask;
                prev = w;
                d
            })
            .collect()
    };
    let diffs = differences(words);
    let (coding, stored) = match changes(diffs.iter().copied()) < changes(words.iter().copied()) {
        true => (WordCoding::Differences, diffs),
        false => (WordCoding::Plain, words.to_vec()),
    };
    out.push(coding as u8);
    let flat: Vec<u8> = stored.iter().flat_map(|w| w.to_le_bytes()[..width].to_vec()).collect();
    put_planes(out, &flat, width);
}

/// Reads `n` words of `width` bytes that `put_words` wrote.
fn take_words(r: &mut Reader, n: usize, width: usize) -> Result<Vec<u64>> {
    let coding = match r.take(1)?[0] {
        0 => WordCoding::Plain,
        1 => WordCoding::Differences,
        _ => return corrupt("unknown array coding in a compaction record"),
    };
    let flat = take_planes(r, n, width)?;
    let mut words: Vec<u64> = flat
        .chunks_exact(width)
        .map(|w| {
            let mut buf = [0u8; 8];
            buf[..width].copy_from_slice(w);
            u64::from_le_bytes(buf)
        })
        .collect();
    if coding == WordCoding::Differences {
        let mut prev = 0u64;
        for w in &mut words {
            prev = prev.wrapping_add(*w) & word_mask(width);
            *w = prev;
        }
    }
    Ok(words)
}

fn put_u16s(out: &mut Vec<u8>, words: impl Iterator<Item = u16>) {
    put_words(out, &words.map(u64::from).collect::<Vec<_>>(), 2);
}

fn put_u32s(out: &mut Vec<u8>, words: impl Iterator<Item = u32>) {
    put_words(out, &words.map(u64::from).collect::<Vec<_>>(), 4);
}

fn take_u16s(r: &mut Reader, n: usize) -> Result<Vec<u16>> {
    Ok(take_words(r, n, 2)?.into_iter().map(|w| w as u16).collect())
}

fn take_u32s(r: &mut Reader, n: usize) -> Result<Vec<u32>> {
    Ok(take_words(r, n, 4)?.into_iter().map(|w| w as u32).collect())
}

/// A ctid relative to the version's own TID, as far as the record can
/// know that TID: block minus `slot / 291`, offset minus `slot % 291 + 1`
/// (wrapping, so any ctid survives). The record does not know the extent's
/// first block, but for a version whose ctid is its own TID (every version
/// not updated) this makes the block that first block on every row and
/// the offset 0: two runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RelativeCtid {
    block: u32,
    offset: u16,
}

impl RelativeCtid {
    fn of(h: &RowHeader) -> RelativeCtid {
        RelativeCtid {
            block: h.mvcc.ctid.block.wrapping_sub((h.slot / MAX_OFFSET) as u32),
            offset: h.mvcc.ctid.offset.wrapping_sub(h.slot % MAX_OFFSET + 1),
        }
    }
    fn resolve(self, slot: u16) -> Tid {
        Tid::new(self.block.wrapping_add((slot / MAX_OFFSET) as u32), self.offset.wrapping_add(slot % MAX_OFFSET + 1))
    }
}

/// Row headers, one word array per field: slot, natts, xmin, xmax, cid,
/// ctid block and offset (`RelativeCtid`), infomask, infomask2.
fn put_headers(out: &mut Vec<u8>, headers: &[RowHeader]) {
    put_u16s(out, headers.iter().map(|h| h.slot));
    put_u16s(out, headers.iter().map(|h| h.natts));
    put_u32s(out, headers.iter().map(|h| h.mvcc.xmin));
    put_u32s(out, headers.iter().map(|h| h.mvcc.xmax));
    put_u32s(out, headers.iter().map(|h| h.mvcc.cid));
    put_u32s(out, headers.iter().map(|h| RelativeCtid::of(h).block));
    put_u16s(out, headers.iter().map(|h| RelativeCtid::of(h).offset));
    put_u16s(out, headers.iter().map(|h| h.mvcc.infomask));
    put_u16s(out, headers.iter().map(|h| h.mvcc.infomask2));
}

fn take_headers(r: &mut Reader, n: usize) -> Result<Vec<RowHeader>> {
    let slots = take_u16s(r, n)?;
    let natts = take_u16s(r, n)?;
    let xmins = take_u32s(r, n)?;
    let xmaxs = take_u32s(r, n)?;
    let cids = take_u32s(r, n)?;
    let ctid_blocks = take_u32s(r, n)?;
    let ctid_offsets = take_u16s(r, n)?;
    let infomasks = take_u16s(r, n)?;
    let infomasks2 = take_u16s(r, n)?;
    let mut headers = Vec::with_capacity(n);
    for i in 0..n {
        let slot = slots[i];
        let ctid = RelativeCtid { block: ctid_blocks[i], offset: ctid_offsets[i] }.resolve(slot);
        headers.push(RowHeader {
            slot,
            natts: natts[i],
            mvcc: Mvcc { xmin: xmins[i], xmax: xmaxs[i], cid: cids[i], ctid, infomask: infomasks[i], infomask2: infomasks2[i] },
        });
    }
    Ok(headers)
}

/// How a fixed-length column's values are stored, by width: up to 8
/// bytes (integers, floats, timestamps) as words (`put_words`: plain or
/// differences, in byte planes); up to `PLANES_MAX_WIDTH` (uuids) as byte
/// planes; wider ones (char(n) and the like) back to back, where LZ4 finds
/// their repeated substrings whole. Widths are at least 1: `Schema::new`
/// (encode) and `ColumnDesc::decode` (decode) refuse `Fixed(0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FixedLayout {
    Words,
    Planes,
    BackToBack,
}

impl FixedLayout {
    fn of(width: usize) -> FixedLayout {
        match width {
            ..=8 => FixedLayout::Words,
            _ if width <= PLANES_MAX_WIDTH => FixedLayout::Planes,
            _ => FixedLayout::BackToBack,
        }
    }
}

/// Column `c` of every row that has it (natts > c), in row order: a null
/// bitmap over those rows (bit set = NULL), then the non-null values:
/// fixed-length ones as one array (`FixedLayout`), varlena ones as a
/// length array (u16 words), then the bytes back to back.
fn put_column_values(out: &mut Vec<u8>, c: usize, d: &ColumnDesc, rows: &[ColumnRow]) -> Result<()> {
    let values: Vec<Option<&[u8]>> = rows.iter().filter_map(|r| r.row.values.get(c)).map(|v| v.as_deref()).collect();
    let mut bitmap = vec![0u8; values.len().div_ceil(8)];
    for (i, v) in values.iter().enumerate() {
        if v.is_none() {
            bitmap[i / 8] |= 1 << (i % 8);
        }
    }
    out.extend_from_slice(&bitmap);
    let present = values.iter().flatten();
    match d.width {
        Width::Fixed(n) => {
            let n = n as usize;
            if present.clone().any(|v| v.len() != n) {
                return Err(Error::BadInput("fixed-length value of the wrong length"));
            }
            match FixedLayout::of(n) {
                FixedLayout::Words => {
                    let words: Vec<u64> = present
                        .map(|v| {
                            let mut buf = [0u8; 8];
                            buf[..n].copy_from_slice(v);
                            u64::from_le_bytes(buf)
                        })
                        .collect();
                    put_words(out, &words, n);
                }
                FixedLayout::Planes => put_planes(out, &present.flat_map(|v| v.iter().copied()).collect::<Vec<_>>(), n),
                FixedLayout::BackToBack => present.for_each(|v| out.extend_from_slice(v)),
            }
        }
        Width::Varlena => {
            if let Some(v) = present.clone().find(|v| v.len() > delta::MAX_PAYLOAD) {
                return Err(Error::RowTooWide { len: v.len(), max: delta::MAX_PAYLOAD });
            }
            put_u16s(out, present.clone().map(|v| v.len() as u16));
            present.for_each(|v| out.extend_from_slice(v));
        }
    }
    Ok(())
}

/// Reads what `put_column_values` wrote for a column and appends its
/// value to each row of `having`, the rows that have the column (they
/// have all earlier columns already).
fn take_column_values(r: &mut Reader, d: &ColumnDesc, having: &[usize], rows: &mut [ColumnRow]) -> Result<()> {
    let bitmap = r.take(having.len().div_ceil(8))?;
    if !having.len().is_multiple_of(8) && bitmap.last().is_some_and(|&b| b >> (having.len() % 8) != 0) {
        return corrupt("null bitmap has bits past its rows in a compaction record");
    }
    let nulls: Vec<bool> = (0..having.len()).map(|k| bitmap[k / 8] & (1 << (k % 8)) != 0).collect();
    let nonnull = nulls.iter().filter(|&&null| !null).count();
    let values: Vec<Vec<u8>> = match d.width {
        Width::Fixed(n) => {
            let n = n as usize;
            match FixedLayout::of(n) {
                FixedLayout::Words => take_words(r, nonnull, n)?.iter().map(|w| w.to_le_bytes()[..n].to_vec()).collect(),
                FixedLayout::Planes => take_planes(r, nonnull, n)?.chunks_exact(n).map(<[u8]>::to_vec).collect(),
                FixedLayout::BackToBack => {
                    let len = nonnull.checked_mul(n).ok_or(Error::Corrupt("compaction record array too long"))?;
                    r.take(len)?.chunks_exact(n).map(<[u8]>::to_vec).collect()
                }
            }
        }
        Width::Varlena => {
            let lens = take_u16s(r, nonnull)?;
            lens.iter().map(|&len| r.take(len as usize).map(<[u8]>::to_vec)).collect::<Result<_>>()?
        }
    };
    let mut values = values.into_iter();
    for (&i, &null) in having.iter().zip(&nulls) {
        let v = match null {
            true => None,
            false => Some(values.next().ok_or(Error::Corrupt("compaction record column short of values"))?),
        };
        rows[i].row.values.push(v);
    }
    Ok(())
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Error::Corrupt("compaction record truncated"))?;
        self.b.get(self.pos..end).ok_or(Error::Corrupt("compaction record truncated"))
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.peek(n)?;
        self.pos += n;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(rd16(self.take(2)?, 0))
    }
}

/// Checks that the delta blocks of an output parse (used by tests and
/// `verify`-style callers).
pub fn check_output(g: &Geometry, out: &CompactionOutput) -> Result<()> {
    for i in 0..out.delta_used as usize {
        DeltaView::parse(&out.delta_blocks[i], g, i, Some(out.version))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_words(words: &[u64], width: usize) -> WordCoding {
        let mut out = Vec::new();
        put_words(&mut out, words, width);
        assert_eq!(out.len(), 1 + words.len() * width);
        let mut r = Reader { b: &out, pos: 0 };
        assert_eq!(take_words(&mut r, words.len(), width).unwrap(), words);
        assert_eq!(r.pos, out.len());
        if out[0] == WordCoding::Plain as u8 {
            WordCoding::Plain
        } else {
            WordCoding::Differences
        }
    }

    /// Both codings in every width, with values at the ends of the range
    /// (differences wrap), and the choice between them.
    #[test]
    fn word_arrays_roundtrip_and_choose_their_coding() {
        for width in 1..=8usize {
            let max = word_mask(width);
            let counting: Vec<u64> = (0..300u64).map(|i| (max - 100).wrapping_add(i) & max).collect();
            assert_eq!(roundtrip_words(&counting, width), WordCoding::Differences, "width {width}");
            let mostly_equal: Vec<u64> = (0..300u64).map(|i| if i % 7 == 0 { max } else { 5 }).collect();
            assert_eq!(roundtrip_words(&mostly_equal, width), WordCoding::Plain, "width {width}");
            let mixed: Vec<u64> = (0..300u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & max).collect();
            roundtrip_words(&mixed, width);
            for edge in [vec![], vec![0], vec![max], vec![max, 0, max]] {
                roundtrip_words(&edge, width);
            }
        }
        // An unknown coding, and a truncated array.
        let mut out = Vec::new();
        put_words(&mut out, &[1, 2, 3], 4);
        assert!(take_words(&mut Reader { b: &out[..out.len() - 1], pos: 0 }, 3, 4).is_err());
        out[0] = 2;
        assert!(matches!(take_words(&mut Reader { b: &out, pos: 0 }, 3, 4), Err(Error::Corrupt(_))));
    }

    /// Any ctid survives, and a version's own TID becomes (extent start, 0)
    /// whatever its slot.
    #[test]
    fn relative_ctid() {
        let start = 5000u32;
        for slot in (0..=u16::MAX).step_by(7).chain([u16::MAX]) {
            let own = Tid::new(start + (slot / MAX_OFFSET) as u32, slot % MAX_OFFSET + 1);
            for ctid in [own, Tid::new(0, 0), Tid::new(u32::MAX, u16::MAX), Tid::new(start, 1)] {
                let h = RowHeader { slot, natts: 0, mvcc: Mvcc { ctid, ..Mvcc::default() } };
                assert_eq!(RelativeCtid::of(&h).resolve(slot), ctid);
            }
            let h = RowHeader { slot, natts: 0, mvcc: Mvcc { ctid: own, ..Mvcc::default() } };
            assert_eq!(RelativeCtid::of(&h), RelativeCtid { block: start, offset: 0 });
        }
    }

    #[test]
    fn byte_planes_transpose() {
        let flat: Vec<u8> = (0..12).collect();
        let mut out = Vec::new();
        put_planes(&mut out, &flat, 3);
        assert_eq!(out, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
        assert_eq!(take_planes(&mut Reader { b: &out, pos: 0 }, 4, 3).unwrap(), flat);
        assert!(take_planes(&mut Reader { b: &out, pos: 1 }, 4, 3).is_err());
        assert!(take_planes(&mut Reader { b: &out, pos: 0 }, usize::MAX, 3).is_err());
    }
}
