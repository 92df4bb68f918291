//! The visibility map of a hasis table: PostgreSQL's own fork
//! (`visibilitymap.c`), so index-only scans skip the fetch of a TID whose
//! block's bit says every version there is visible to every snapshot, as
//! they do for heap (`nodeIndexonlyscan.c` reads the map itself, by TID
//! block, whatever the table AM).
//!
//! A TID names a slot of an extent (`slot <-> (first + s / 291, s % 291 + 1)`),
//! so the map's bit of block `first + i` speaks for slots `291 i .. 291 i + 290`.
//! The bits go per extent: VACUUM sets the bits of all of an extent's TID
//! blocks (`Geometry::tid_blocks`, 14 by default) when the extent is
//! all-visible, has no delta part and no dead slot: then every version is
//! a column row visible to every snapshot, and every slot above them was
//! never used or is unused (no index entry names it). The extent header's
//! `map_visible` flag says they are set.
//!
//! Protocol (header block exclusively locked throughout):
//! - set: VACUUM, with the map pages locked exclusively, sets the flag and
//!   the bits and logs both in one VISIBLE record that registers the map
//!   pages (redo sets the bits again, page LSN checked, as heap's
//!   `heap_xlog_visible`). Its conflict horizon for a hot standby was the
//!   all-visible flag's record: a snapshot that could not see a column row
//!   was cancelled when the flag was replayed.
//! - clear: before anything adds or changes a version of a flagged extent
//!   (an insert, a stamp: `relation::clear_all_visible` clears both, a
//!   compaction), the flag and the bits are cleared and logged in a VISIBLE
//!   record of their own, ahead of the change, whose redo clears the bits
//!   whatever the header's LSN (as heap's redo of a delete clears the bit).
//!   A crash between the two leaves the bits clear, which is always safe.
//!   The map pages are not registered for a clear: clearing is idempotent
//!   and redo does it unconditionally (heap's `visibilitymap_clear` rule).
//!
//! So while the flag is clear no bit of the extent is set, and an extent
//! whose versions change always goes through a clear first.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::layout::{Geometry, BLCKSZ};

/// visibilitymap.c's layout: two bits per table block, after a standard
/// page header (MAXALIGN(SizeOfPageHeaderData) = 24 bytes).
const MAP_CONTENT: usize = 24;
const MAP_BYTES: usize = BLCKSZ - MAP_CONTENT;
const BLOCKS_PER_MAP_PAGE: u32 = (MAP_BYTES * 4) as u32;

/// The TID blocks of the extent at `first`.
pub fn tid_blocks(g: &Geometry, first: u32) -> std::ops::Range<u32> {
    first..first + g.tid_blocks() as u32
}

fn map_page_of(block: u32) -> u32 {
    block / BLOCKS_PER_MAP_PAGE
}

/// The map pages that hold the bits of `blocks` (one, or two where the
/// extent straddles a map page), pinned, extending the map fork as needed.
/// Outside a critical section: it may read and extend.
pub struct MapPins {
    /// (first table block the page covers, buffer)
    pages: Vec<(u32, pg_sys::Buffer)>,
}

impl MapPins {
    pub unsafe fn pin(rel: pg_sys::Relation, blocks: &std::ops::Range<u32>) -> MapPins {
        let mut pages = Vec::with_capacity(2);
        for b in [blocks.start, blocks.end - 1] {
            if pages.iter().any(|&(start, _)| map_page_of(start) == map_page_of(b)) {
                continue;
            }
            let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
            pg_sys::visibilitymap_pin(rel, b, &mut buf);
            pages.push((b, buf));
        }
        MapPins { pages }
    }

    /// The pinned buffer holding `block`'s bits.
    fn buffer_of(&self, block: u32) -> pg_sys::Buffer {
        self.pages.iter().find(|&&(start, _)| map_page_of(start) == map_page_of(block)).map(|&(_, b)| b).expect("map page pinned")
    }

    pub fn buffers(&self) -> impl Iterator<Item = pg_sys::Buffer> + '_ {
        self.pages.iter().map(|&(_, b)| b)
    }
}

impl Drop for MapPins {
    fn drop(&mut self) {
        for &(_, b) in &self.pages {
            unsafe { pg_sys::ReleaseBuffer(b) };
        }
    }
}

/// Sets the all-visible bits of the `blocks` that map page `map_page`
/// covers, in its (exclusively locked) `page`; true if one changed. Shared
/// by the primary and redo.
pub unsafe fn set_bits(page: pg_sys::Page, map_page: u32, blocks: &std::ops::Range<u32>) -> bool {
    let map = std::slice::from_raw_parts_mut((page as *mut u8).add(MAP_CONTENT), MAP_BYTES);
    let mut changed = false;
    for b in blocks.clone().filter(|&b| map_page_of(b) == map_page) {
        let at = (b % BLOCKS_PER_MAP_PAGE) as usize;
        let (byte, shift) = (at / 4, (at % 4) * 2);
        let bit = (pg_sys::VISIBILITYMAP_ALL_VISIBLE as u8) << shift;
        if map[byte] & bit == 0 {
            map[byte] |= bit;
            changed = true;
        }
    }
    changed
}

/// Clears every bit of `blocks` (inside the caller's critical section;
/// `visibilitymap_clear` locks each map page itself).
pub unsafe fn clear_bits(rel: pg_sys::Relation, pins: &MapPins, blocks: &std::ops::Range<u32>) {
    for b in blocks.clone() {
        pg_sys::visibilitymap_clear(rel, b, pins.buffer_of(b), pg_sys::VISIBILITYMAP_VALID_BITS as u8);
    }
}

/// Redo of a clear: the bits of `blocks` of relation `node`, cleared
/// whatever state the pages are in (heap's redo of a delete does the same).
pub unsafe fn redo_clear(node: pg_sys::RelFileNode, blocks: &std::ops::Range<u32>) {
    let rel = pg_sys::CreateFakeRelcacheEntry(node);
    {
        let pins = MapPins::pin(rel, blocks);
        clear_bits(rel, &pins, blocks);
    }
    pg_sys::FreeFakeRelcacheEntry(rel);
}

/// Whether the map says `block` is all visible (for `verify_table`).
pub unsafe fn is_set(rel: pg_sys::Relation, block: u32, buf: &mut pg_sys::Buffer) -> bool {
    pg_sys::visibilitymap_get_status(rel, block, buf) & pg_sys::VISIBILITYMAP_ALL_VISIBLE as u8 != 0
}
