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
use super::hot::{ChainLink, Chains};
use super::layout::{rd16, rd32, wr16, wr32, BlockKind, BlockTrailer, Geometry, Params, BLCKSZ, UNITS_PER_BLOCK};
use super::row::{decode_payload, encode_payload, ColumnDesc, Mvcc, RowHeader, Schema, DESC_LEN, MVCC_OFF, ROW_HEADER};
use super::{corrupt, Error, HybridPage, Result};
use std::collections::BTreeSet;

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
    /// Slots that become `Dead` (removed versions index entries may name),
    /// ascending.
    pub dead: Vec<u16>,
    /// Slots that become `Unused` (removed heap-only versions), ascending.
    pub unused: Vec<u16>,
    /// HOT chain roots that become (or stay, with a new target) redirects,
    /// ascending by root slot.
    pub redirects: Vec<(u16, u16)>,
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
pub fn plan(page: &HybridPage, schema: &Schema, oracle: &mut dyn Oracle) -> Result<CompactionRecord> {
    let g = page.geometry();
    let old_version = page.header().version;
    let new_version = old_version.checked_add(1).ok_or(Error::BadInput("page version wrapped"))?;

    // Every version's decision and chain link first: which slots go
    // depends on whole HOT chains (hot.rs).
    let mut chains = Chains::new();
    for s in 0..page.header().slot_hwm {
        if let DirEntry::Redirect { slot } = page.entry(s) {
            chains.add_redirect(s, slot);
        }
    }
    let mut removed_set = BTreeSet::new();
    let mut column_decided: Vec<(ColumnRow, Placement)> = Vec::new();
    for cr in page.column_rows() {
        let mut cr = cr.clone();
        let p = oracle.decide(cr.header.slot, &mut cr.header.mvcc);
        chains.add_version(cr.header.slot, oracle.link(cr.header.slot, &cr.header.mvcc));
        if p == Placement::Remove {
            removed_set.insert(cr.header.slot);
        }
        column_decided.push((cr, p));
    }
    let mut delta_decided: Vec<(RowHeader, Vec<u8>, Placement)> = Vec::new();
    for item in page.delta_items() {
        let mut header = item.header;
        let p = oracle.decide(header.slot, &mut header.mvcc);
        chains.add_version(header.slot, oracle.link(header.slot, &header.mvcc));
        let mut bytes = item.bytes.clone();
        header.mvcc.encode(&mut bytes[2 + MVCC_OFF..ITEM_HDR]);
        if p == Placement::Remove {
            removed_set.insert(header.slot);
        }
        delta_decided.push((header, bytes, p));
    }
    let resolution = chains.resolve(&removed_set);
    let goes = |slot: u16, p: Placement| p == Placement::Remove && resolution.kept.binary_search(&slot).is_err();

    // Column part rows that stay, and delta versions offered to it.
    let mut kept_column: Vec<ColumnRow> = Vec::new();
    struct DeltaVersion {
        bytes: Vec<u8>,
        to_column: Option<ColumnRow>,
    }
    let mut deltas: Vec<DeltaVersion> = Vec::new();
    for (cr, p) in column_decided {
        if !goes(cr.header.slot, p) {
            kept_column.push(cr);
        }
    }
    for (header, bytes, p) in delta_decided {
        match p {
            _ if goes(header.slot, p) => {}
            Placement::Remove | Placement::Stay => deltas.push(DeltaVersion { bytes, to_column: None }),
            Placement::Column => {
                let row = decode_payload(schema, header.natts as usize, &bytes[ITEM_HDR..])?;
                deltas.push(DeltaVersion { bytes, to_column: Some(ColumnRow { header, row }) });
            }
        }
    }

    // Offered delta versions by descending slot: the first `k` of them are
    // turned back if the column part would not fit. Fewer rows never need
    // more units, so the smallest working k is found by bisection.
    let mut offered: Vec<usize> = (0..deltas.len()).filter(|&i| deltas[i].to_column.is_some()).collect();
    offered.sort_by_key(|&i| std::cmp::Reverse(deltas[i].to_column.as_ref().map_or(0, |r| r.header.slot)));
    let fits = |k: usize| -> Result<bool> {
        let rows = kept_column.iter().chain(offered[k..].iter().filter_map(|&i| deltas[i].to_column.as_ref()));
        let (nrows, units) = column::units_needed(schema, rows)?;
        Ok(nrows == 0 || units <= g.column_units())
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
        dead: resolution.dead,
        unused: resolution.unused,
        redirects: resolution.redirects,
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
    /// New directory entries, ascending slot: every version's new place, and
    /// `Dead`, `Unused` or a redirect for every removed one and every
    /// redirect that changed. Other slots keep their entries.
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
            free_hint: self.directory.iter().filter(|(_, e)| *e == DirEntry::Unused).map(|&(s, _)| s).fold(old.free_hint, u16::min),
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
/// Record format 2 adds the HOT lists (unused slots, redirects); format 1
/// records (only the removed = dead slots) still replay.
pub const RECORD_FORMAT: u8 = 2;
const RECORD_FORMAT_NO_HOT: u8 = 1;
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
        out[4] = RECORD_FORMAT;
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
        let format = b[4];
        if format != RECORD_FORMAT && format != RECORD_FORMAT_NO_HOT {
            return Err(Error::BadFormatVersion(format));
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
        let slot_list = |r: &mut Reader| -> Result<Vec<u16>> {
            let n = r.u16()? as usize;
            (0..n).map(|_| r.u16()).collect()
        };
        let dead = slot_list(&mut r)?;
        let (unused, redirects) = if format == RECORD_FORMAT_NO_HOT {
            (Vec::new(), Vec::new())
        } else {
            let unused = slot_list(&mut r)?;
            let n = r.u16()? as usize;
            let redirects = (0..n).map(|_| Ok((r.u16()?, r.u16()?))).collect::<Result<Vec<_>>>()?;
            (unused, redirects)
        };
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
            dead,
            unused,
            redirects,
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
