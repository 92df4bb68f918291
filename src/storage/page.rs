//! The page format common to all pg_hybrid index pages: a standard PostgreSQL
//! page header, a body that starts right after it, and a fixed special area.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// "PGHY" — identifies pages written by pg_hybrid.
pub const PAGE_MAGIC: u32 = 0x5047_4859;
/// Bumped whenever the layout of any page kind changes incompatibly.
pub const PAGE_VERSION: u16 = 1;

pub const BLCKSZ: usize = pg_sys::BLCKSZ as usize;
/// SizeOfPageHeaderData: the body starts right after the header proper.
pub const PAGE_HEADER_SIZE: usize = std::mem::offset_of!(pg_sys::PageHeaderData, pd_linp);

/// What a page holds. Stored as u8 in [`PageOpaque::kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    Meta = 1,
    StaticLeaf = 2,
    StaticInner = 3,
    Delta = 4,
    Recycle = 5,
    Free = 6,
    /// elastic_btree tree page: metapage, inner node or leaf (the body's
    /// format byte says which; src/elastic/README.md).
    Elastic = 7,
    /// elastic_btree leaf merged away: body and links kept for readers that
    /// still hold a link to it, `first_pos` = the xid after which it may be
    /// recycled.
    ElasticDeleted = 8,
    /// The key-range partition map of predicate locking (engine/predlock.rs).
    LockMap = 9,
    /// A page of a hash path (griffin): header, directory or bucket (the
    /// body's own type byte says which; core/src/hash_path/README.md).
    Hash = 10,
}

impl PageKind {
    pub fn from_u8(v: u8) -> Option<PageKind> {
        Some(match v {
            1 => PageKind::Meta,
            2 => PageKind::StaticLeaf,
            3 => PageKind::StaticInner,
            4 => PageKind::Delta,
            5 => PageKind::Recycle,
            6 => PageKind::Free,
            7 => PageKind::Elastic,
            8 => PageKind::ElasticDeleted,
            9 => PageKind::LockMap,
            10 => PageKind::Hash,
            _ => return None,
        })
    }
}

pub const NO_BLOCK: u32 = pg_sys::InvalidBlockNumber;

/// Special area of every pg_hybrid page.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PageOpaque {
    pub magic: u32,
    pub version: u16,
    pub kind: u8,
    /// Tree level for static pages (0 = leaf).
    pub level: u8,
    /// Static stage generation the page belongs to; 0 for other kinds.
    pub generation: u32,
    pub left: u32,
    pub right: u32,
    /// Bytes of body in use (body starts at PAGE_HEADER_SIZE).
    pub body_len: u32,
    /// Delta pages: log position of the first record ever placed here.
    pub first_pos: u64,
}

pub const SPECIAL_SIZE: usize = std::mem::size_of::<PageOpaque>();
/// Usable body bytes of a page.
pub const BODY_CAP: usize = BLCKSZ - PAGE_HEADER_SIZE - SPECIAL_SIZE;

/// Initialises `page` as an empty pg_hybrid page of the given kind.
pub unsafe fn init_page(page: pg_sys::Page, kind: PageKind, level: u8, generation: u32) {
    pg_sys::PageInit(page, BLCKSZ, SPECIAL_SIZE);
    let op = opaque_mut(page);
    *op = PageOpaque {
        magic: PAGE_MAGIC,
        version: PAGE_VERSION,
        kind: kind as u8,
        level,
        generation,
        left: NO_BLOCK,
        right: NO_BLOCK,
        body_len: 0,
        first_pos: 0,
    };
}

pub unsafe fn opaque_mut<'a>(page: pg_sys::Page) -> &'a mut PageOpaque {
    &mut *(pg_sys::PageGetSpecialPointer(page) as *mut PageOpaque)
}

pub unsafe fn opaque<'a>(page: pg_sys::Page) -> &'a PageOpaque {
    &*(pg_sys::PageGetSpecialPointer(page) as *const PageOpaque)
}

/// The whole body region (capacity BODY_CAP).
pub unsafe fn body_mut<'a>(page: pg_sys::Page) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut((page as *mut u8).add(PAGE_HEADER_SIZE), BODY_CAP)
}

/// The used part of the body.
pub unsafe fn body<'a>(page: pg_sys::Page) -> &'a [u8] {
    let len = (opaque(page).body_len as usize).min(BODY_CAP);
    std::slice::from_raw_parts((page as *const u8).add(PAGE_HEADER_SIZE), len)
}

/// Records that the first `len` body bytes are in use, and keeps pd_lower in
/// step so PostgreSQL (and GenericXLog) treat only the rest as a hole.
pub unsafe fn set_body_len(page: pg_sys::Page, len: usize) {
    assert!(len <= BODY_CAP);
    opaque_mut(page).body_len = len as u32;
    let hdr = page as *mut pg_sys::PageHeaderData;
    (*hdr).pd_lower = (PAGE_HEADER_SIZE + len) as u16;
}

/// Validates a page read from `rel` block `blkno`. Raises ERRCODE_INDEX_CORRUPTED
/// on anything unexpected; `expect` lists the acceptable kinds (empty = any).
pub unsafe fn check_page(
    rel: pg_sys::Relation,
    blkno: u32,
    page: pg_sys::Page,
    expect: &[PageKind],
) -> PageKind {
    // The name only when there is something to report: this runs on every page read.
    let relname = || rel_name(rel);
    if pg_sys::PageIsNew(page) {
        corrupted(&relname(), blkno, "page is uninitialized");
    }
    let hdr = page as *const pg_sys::PageHeaderData;
    if (*hdr).pd_special as usize != BLCKSZ - SPECIAL_SIZE {
        corrupted(&relname(), blkno, "special area has the wrong size; not a pg_hybrid page");
    }
    let op = opaque(page);
    if op.magic != PAGE_MAGIC {
        corrupted(&relname(), blkno, &format!("bad magic {:#010x}", op.magic));
    }
    if op.version != PAGE_VERSION {
        crate::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!(
                "index \"{}\" block {blkno} has pg_hybrid page version {}, this build reads version {PAGE_VERSION}",
                relname(),
                op.version
            ), "REINDEX the index with this version of pg_hybrid.");
    }
    let Some(kind) = PageKind::from_u8(op.kind) else {
        corrupted(&relname(), blkno, &format!("unknown page kind {}", op.kind));
    };
    if op.body_len as usize > BODY_CAP {
        corrupted(&relname(), blkno, "body length exceeds page");
    }
    if !expect.is_empty() && !expect.contains(&kind) {
        corrupted(&relname(), blkno, &format!("unexpected page kind {kind:?}, wanted {expect:?}"));
    }
    kind
}

pub fn corrupted(relname: &str, blkno: u32, what: &str) -> ! {
    crate::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("index \"{relname}\" contains corrupted page at block {blkno}: {what}"), "Please REINDEX it.");
}

pub unsafe fn rel_name(rel: pg_sys::Relation) -> String {
    let name = &(*(*rel).rd_rel).relname;
    std::ffi::CStr::from_ptr(name.data.as_ptr()).to_string_lossy().into_owned()
}
