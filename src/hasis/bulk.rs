//! Bulk fill: a bulk insert (COPY, CREATE TABLE AS, a table rewrite) stops
//! adding rows to an extent once its column part could not take them all.
//!
//! Why: a bulk load's own rows enter the column part at the next
//! compaction (compact.rs's oracle), but only as many as the column part
//! holds. Rows the load appended beyond that stay in the delta part for
//! good, in row format, which a column scan reads whole: TPC-H's lineitem
//! (16 columns) kept a third of its rows there. Here the inserting backend
//! keeps a running size tally of the extent it fills (its column part, from
//! the meta, plus every delta version, from the payloads: the arithmetic of
//! `column::plan`), and when the next row would not fit it compacts the
//! extent (everything moves in) and sends the row to another extent.
//!
//! The tally is a hint, never a promise: rows of other backends, dead
//! versions and a concurrent compaction make it stale. A new page version
//! or another extent (the key: relation file, extent, page version) means
//! a rebuild from the pages; rows other backends appended are not counted.
//! A wrong tally costs rows left in the delta part or an extent closed
//! early, never a wrong answer: compaction still turns back what does not
//! fit.
//!
//! COPY (`multi_insert`) does not put rows in the delta part at all: each
//! batch goes straight into the column part of the extent it fills, in a
//! compaction that appends it (`compact::append_rows`), as many rows as
//! the tally says fit (`fitting`).

use super::relation::bytes;
use crate::storage::buffer::{Buf, Lock};
use crate::shmem::rel_counters::RelFile;
use pg_hybrid_core::hasis::column::SizeTally;
use pg_hybrid_core::hasis::delta::DeltaView;
use pg_hybrid_core::hasis::header::ExtentHeader;
use pg_hybrid_core::hasis::layout::Geometry;
use pg_hybrid_core::hasis::row::Schema;
use pgrx::pg_sys;
use std::cell::RefCell;

/// The extent this backend's bulk insert fills, and what it holds.
struct Fill {
    key: FillKey,
    schema: Schema,
    tally: SizeTally,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct FillKey {
    file: RelFile,
    first: u32,
    version: u32,
}

thread_local! {
    static FILL: RefCell<Option<Fill>> = const { RefCell::new(None) };
}

/// A bulk insert's verdict on a new row for an extent.
pub enum Admit {
    /// It fits the column part with everything already there: insert it,
    /// then `keep` the tally.
    Yes(Pending),
    /// It does not: compact the extent and put the row elsewhere.
    Closed,
}

/// The tally with the admitted row, kept once the row is in (None: the
/// extent's pages gave no tally).
pub struct Pending(Option<Fill>);

/// Whether a row of `natts` columns (`payload`, the row format) fits the
/// column part of extent `first` beside the versions it already holds.
/// The caller holds the extent's header block exclusively (`h` read from
/// it), so the extent does not change meanwhile.
pub unsafe fn admit(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, natts: u16, payload: &[u8]) -> Admit {
    let key = FillKey { file: RelFile::of(rel), first, version: h.version };
    // Rows another backend added meanwhile (same page version) are not
    // read back: under two COPYs into one extent that would mean reading
    // the extent at every row. The tally then misses them, and compaction
    // turns back what does not fit.
    let (schema, mut tally) = match fill_of(rel, g, first, h) {
        Some(f) => (f.schema, f.tally),
        // Unreadable as a tally (the insert path reports real damage): no
        // opinion.
        None => return Admit::Yes(Pending(None)),
    };
    if tally.rows() == 0 {
        // An empty extent takes any row: a row too wide for any column
        // part must still go somewhere.
        let added = tally.add_payload(&schema, natts as usize, payload).is_ok();
        return Admit::Yes(Pending(added.then_some(Fill { key, schema, tally })));
    }
    if tally.add_payload(&schema, natts as usize, payload).is_err() {
        return Admit::Yes(Pending(None));
    }
    match tally.units(&schema) {
        Ok((_, units)) if units <= g.column_units() => Admit::Yes(Pending(Some(Fill { key, schema, tally }))),
        _ => Admit::Closed,
    }
}

/// How many of a bulk batch's `rows` (natts and payload each) the column
/// part of extent `first` takes beside what it holds, from the tally this
/// backend kept for it or one read from its pages; the caller holds the
/// header block exclusively (`h` read from it). `empty`: the extent holds
/// no version, so a first row that does not fit fits no column part.
pub struct Fitting {
    pub rows: usize,
    pub empty: bool,
    base: Option<Fill>,
}

pub unsafe fn fitting(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, rows: &[(u16, &[u8])]) -> Fitting {
    let Some(base) = fill_of(rel, g, first, h) else {
        // Unreadable as a tally: one row, so that the compaction that
        // appends it reads the extent and reports the damage.
        return Fitting { rows: rows.len().min(1), empty: false, base: None };
    };
    let mut tally = base.tally.clone();
    let mut n = 0;
    for (natts, payload) in rows {
        if tally.add_payload(&base.schema, *natts as usize, payload).is_err() {
            break;
        }
        match tally.units(&base.schema) {
            Ok((_, units)) if units <= g.column_units() => n += 1,
            _ => break,
        }
    }
    Fitting { rows: n, empty: base.tally.rows() == 0, base: Some(base) }
}

/// Keeps the tally of extent `first` after `rows` went into its column
/// part, which made its page version `version`.
pub fn keep_appended(f: Fitting, version: u32, rows: &[(u16, &[u8])]) {
    let Some(mut fill) = f.base else { return };
    for (natts, payload) in rows {
        if fill.tally.add_payload(&fill.schema, *natts as usize, payload).is_err() {
            return;
        }
    }
    fill.key.version = version;
    FILL.with(|f| *f.borrow_mut() = Some(fill));
}

/// Keeps the tally of an admitted row once it is in.
pub fn keep(p: Pending) {
    if let Some(fill) = p.0 {
        FILL.with(|f| *f.borrow_mut() = Some(fill));
    }
}

/// The tally of extent `first` (header `h`, held exclusively by the
/// caller): the one this backend kept, if it is for this file, extent and
/// page version, else one read from the pages (None if they do not parse).
/// Taken out of the keeper: the caller keeps it again once its rows are in.
unsafe fn fill_of(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader) -> Option<Fill> {
    let key = FillKey { file: RelFile::of(rel), first, version: h.version };
    if let Some(f) = FILL.with(|f| f.borrow_mut().take()).filter(|f| f.key == key) {
        return Some(f);
    }
    let schema = super::tuple::schema(rel);
    let tally = tally_extent(rel, g, first, h, &schema)?;
    Some(Fill { key, schema, tally })
}

/// The tally of extent `first` from its pages: the column part's meta and
/// every delta version's payload. None if a block does not parse.
unsafe fn tally_extent(rel: pg_sys::Relation, g: &Geometry, first: u32, h: &ExtentHeader, schema: &Schema) -> Option<SizeTally> {
    let mut tally = if h.column_units > 0 {
        let cols = super::relation::ColumnBlocks::lock(rel, g, first, h, std::ptr::null_mut());
        let part = cols.part(rel, g, first, h);
        SizeTally::of_part(schema, &part).ok()?
    } else {
        SizeTally::new(schema)
    };
    for i in 0..h.delta_used as usize {
        let b = Buf::read(rel, first + g.delta_block(i) as u32, Lock::Share);
        let view = DeltaView::open(bytes(b.page()), g, i, Some(h.version)).ok()?;
        for item in view.items() {
            let item = item.ok()?;
            tally.add_payload(schema, item.header.natts as usize, item.payload).ok()?;
        }
    }
    Some(tally)
}
