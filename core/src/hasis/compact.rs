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
use super::layout::{rd16, rd32, wr16, wr32, BlockKind, BlockTrailer, Geometry, Params, BLCKSZ, UNITS_PER_BLOCK};
use super::row::{decode_payload, encode_payload, ColumnDesc, Mvcc, RowHeader, Schema, DESC_LEN, MVCC_OFF, ROW_HEADER};
use super::{corrupt, Error, HybridPage, Result};

/// What the oracle decides for one version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Dead to every snapshot (heap's HEAPTUPLE_DEAD after pruning): drop
    /// the version; its slot becomes `Dead` until VACUUM frees it.
    Remove,
    /// Keep it where it is (a delta version some snapshot may still need to
    /// see change: inserted or deleted by a transaction that is in progress
    /// or not yet visible to everyone).
    Stay,
    /// Move it into the column part (for a column version: keep it there).
    Column,
}

/// The visibility oracle: called once per version, column rows first (in
/// row order), then delta items (block by block, in append order). It may
/// rewrite the MVCC fields (set hint bits, freeze), and the record carries
/// the rewritten fields.
pub trait Oracle {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement;
}

impl<F: FnMut(u16, &mut Mvcc) -> Placement> Oracle for F {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement {
        self(slot, mvcc)
    }
}

/// The compaction WAL record, decoded. See README "The compaction record"
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
    /// Slots whose versions were removed, ascending.
    pub removed: Vec<u16>,
}

/// Runs the oracle over `page` and chooses the new layout. `schema` is the
/// relation's current description.
pub fn plan(page: &HybridPage, schema: &Schema, oracle: &mut dyn Oracle) -> Result<CompactionRecord> {
    let g = page.geometry();
    let old_version = page.header().version;
    let new_version = old_version.checked_add(1).ok_or(Error::BadInput("page version wrapped"))?;

    let mut removed = Vec::new();
    // Column part rows that stay, and delta versions offered to it.
    let mut kept_column: Vec<ColumnRow> = Vec::new();
    struct DeltaVersion {
        bytes: Vec<u8>,
        to_column: Option<ColumnRow>,
    }
    let mut deltas: Vec<DeltaVersion> = Vec::new();

    for cr in page.column_rows() {
        let mut cr = cr.clone();
        match oracle.decide(cr.header.slot, &mut cr.header.mvcc) {
            Placement::Remove => removed.push(cr.header.slot),
            Placement::Stay | Placement::Column => kept_column.push(cr),
        }
    }
    for item in page.delta_items() {
        let mut header = item.header;
        let placement = oracle.decide(header.slot, &mut header.mvcc);
        let mut bytes = item.bytes.clone();
        header.mvcc.encode(&mut bytes[2 + MVCC_OFF..ITEM_HDR]);
        match placement {
            Placement::Remove => removed.push(header.slot),
            Placement::Stay => deltas.push(DeltaVersion { bytes, to_column: None }),
            Placement::Column => {
                let row = decode_payload(schema, header.natts as usize, &bytes[ITEM_HDR..])?;
                deltas.push(DeltaVersion { bytes, to_column: Some(ColumnRow { header, row }) });
            }
        }
    }
    removed.sort_unstable();

    // Offered delta versions by descending slot: the first `k` of them are
    // turned back if the column part would not fit. Fewer rows never need
    // more units, so the smallest working k is found by bisection.
    let mut offered: Vec<usize> = (0..deltas.len()).filter(|&i| deltas[i].to_column.is_some()).collect();
    offered.sort_by_key(|&i| std::cmp::Reverse(deltas[i].to_column.as_ref().map_or(0, |r| r.header.slot)));
    let fits = |k: usize| -> Result<bool> {
        let rows = kept_column.iter().chain(offered[k..].iter().filter_map(|&i| deltas[i].to_column.as_ref()));
        let p = column::plan(schema, rows)?;
        Ok(p.nrows == 0 || p.total_units <= g.column_units())
    };
    let (mut lo, mut hi) = (0usize, offered.len());
    if !fits(hi)? {
        return corrupt("column part no longer fits with its own rows");
    }
    if !fits(0)? {
        // Invariant: fits(hi) and !fits(lo).
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if fits(mid)? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
    } else {
        hi = 0;
    }
    for &i in &offered[..hi] {
        deltas[i].to_column = None;
    }

    let mut column_rows = kept_column;
    let mut delta_items = Vec::new();
    for d in deltas {
        match d.to_column {
            Some(cr) => column_rows.push(cr),
            None => delta_items.push(d.bytes),
        }
    }
    column_rows.sort_by_key(|r| r.header.slot);
    let ncols = column_rows.iter().map(|r| r.row.values.len()).max().unwrap_or(0);
    Ok(CompactionRecord {
        params: g.params,
        old_version,
        new_version,
        columns: schema.columns[..ncols].to_vec(),
        column_rows,
        delta_items,
        removed,
    })
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
    /// New directory entries, ascending slot: every version's new place and
    /// `Dead` for every removed one. Other slots keep their entries.
    pub directory: Vec<(u16, DirEntry)>,
}

/// Builds the new blocks from a record (primary and redo alike).
pub fn apply(g: &Geometry, rec: &CompactionRecord) -> Result<CompactionOutput> {
    if rec.params != g.params {
        return Err(Error::BadParams("compaction record made with other parameters"));
    }
    if rec.old_version.checked_add(1) != Some(rec.new_version) {
        return corrupt("compaction record versions not consecutive");
    }
    let schema = Schema::new(rec.columns.clone()).map_err(|_| Error::Corrupt("bad columns in compaction record"))?;
    let mut directory: Vec<(u16, DirEntry)> = Vec::new();

    let (column_blocks, p) = column::build(g, &schema, &rec.column_rows, rec.new_version).map_err(|e| match e {
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
    for &s in &rec.removed {
        directory.push((s, DirEntry::Dead));
    }
    directory.sort_by_key(|&(s, _)| s);
    if directory.windows(2).any(|w| w[0].0 == w[1].0) {
        return corrupt("a slot appears twice in a compaction record");
    }
    if directory.last().is_some_and(|&(s, _)| s as usize >= g.max_slots()) {
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
    /// high-water mark is untouched: compaction allocates no slot.
    pub fn patch_header(&self, block: &mut [u8], g: &Geometry) -> Result<()> {
        let old = ExtentHeader::read(block, g)?;
        if self.directory.last().is_some_and(|&(s, _)| s >= old.slot_hwm) {
            return corrupt("compaction names a slot above the high-water mark");
        }
        let h = ExtentHeader {
            version: self.version,
            slot_hwm: old.slot_hwm,
            column_rows: self.column_rows,
            column_units: self.column_units,
            delta_used: self.delta_used,
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
                block[off..off + DIR_ENTRY].copy_from_slice(&e.encode());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Record encoding

/// "HSCR", first bytes of a compaction record.
pub const RECORD_MAGIC: u32 = 0x5243_5348;
const RF_LZ4: u8 = 0x01;
const RECORD_HDR: usize = 32;

impl CompactionRecord {
    /// Encodes the record; with `compress` the body is LZ4-compressed when
    /// that makes it smaller (column data usually compresses; the WAL has
    /// no compression for non-image data of its own).
    pub fn encode(&self, compress: bool) -> Result<Vec<u8>> {
        let schema = Schema::new(self.columns.clone())?;
        let mut body = Vec::new();
        let count = |n: usize| -> Result<[u8; 2]> {
            u16::try_from(n).map(|v| v.to_le_bytes()).map_err(|_| Error::BadInput("too many entries for a record"))
        };
        body.extend_from_slice(&count(self.columns.len())?);
        for d in &self.columns {
            let mut b = [0u8; DESC_LEN];
            d.encode(&mut b);
            body.extend_from_slice(&b);
        }
        body.extend_from_slice(&count(self.column_rows.len())?);
        for cr in &self.column_rows {
            let mut h = [0u8; ROW_HEADER];
            cr.header.encode(&mut h);
            body.extend_from_slice(&h);
            let payload = encode_payload(&schema, &cr.row)?;
            body.extend_from_slice(&count(payload.len())?);
            body.extend_from_slice(&payload);
        }
        body.extend_from_slice(&count(self.delta_items.len())?);
        for it in &self.delta_items {
            body.extend_from_slice(it);
        }
        body.extend_from_slice(&count(self.removed.len())?);
        for s in &self.removed {
            body.extend_from_slice(&s.to_le_bytes());
        }
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
        out[4] = super::layout::FORMAT_VERSION;
        out[5] = flags;
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

    /// Decodes a record; anything malformed is `Error::Corrupt`.
    pub fn decode(b: &[u8]) -> Result<CompactionRecord> {
        if b.len() < RECORD_HDR {
            return corrupt("compaction record too short");
        }
        if rd32(b, 0) != RECORD_MAGIC {
            return Err(Error::BadMagic);
        }
        if b[4] != super::layout::FORMAT_VERSION {
            return Err(Error::BadFormatVersion(b[4]));
        }
        let flags = b[5];
        if flags & !RF_LZ4 != 0 || rd16(b, 6) != 0 {
            return corrupt("unknown compaction record flags");
        }
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
        let mut r = Reader { b: &body, pos: 0 };
        let ncols = r.u16()? as usize;
        let mut columns = Vec::with_capacity(ncols.min(1600));
        for _ in 0..ncols {
            columns.push(ColumnDesc::decode(r.take(DESC_LEN)?)?);
        }
        let schema = Schema::new(columns.clone()).map_err(|_| Error::Corrupt("bad columns in compaction record"))?;
        let nrows = r.u16()? as usize;
        let mut column_rows = Vec::with_capacity(nrows);
        for _ in 0..nrows {
            let header = RowHeader::decode(r.take(ROW_HEADER)?);
            let plen = r.u16()? as usize;
            let row = decode_payload(&schema, header.natts as usize, r.take(plen)?)?;
            column_rows.push(ColumnRow { header, row });
        }
        let nitems = r.u16()? as usize;
        let mut delta_items = Vec::with_capacity(nitems.min(4096));
        for _ in 0..nitems {
            let len = rd16(r.peek(2)?, 0) as usize;
            if len < ITEM_HDR {
                return corrupt("bad delta item in compaction record");
            }
            delta_items.push(r.take(len)?.to_vec());
        }
        let nremoved = r.u16()? as usize;
        let mut removed = Vec::with_capacity(nremoved);
        for _ in 0..nremoved {
            removed.push(r.u16()?);
        }
        if r.pos != body.len() {
            return corrupt("trailing bytes in compaction record");
        }
        Ok(CompactionRecord {
            params: Params {
                column_blocks: rd16(b, 16),
                delta_blocks: rd16(b, 18),
                compact_trigger: rd16(b, 20),
                max_slots: rd16(b, 22),
            },
            old_version: rd32(b, 8),
            new_version: rd32(b, 12),
            columns,
            column_rows,
            delta_items,
            removed,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self, n: usize) -> Result<&'a [u8]> {
        self.b.get(self.pos..self.pos + n).ok_or(Error::Corrupt("compaction record truncated"))
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
