//! Reloptions of griffin: sync_ratio (when the sync worker moves the
//! not-yet-synced entries into the tree and the hash buckets) and
//! bucket_fill (how full the hash buckets get before one splits).

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut RELOPT_KIND: pg_sys::relopt_kind::Type = 0;

#[repr(C)]
pub struct GriffinOptions {
    vl_len_: i32,
    pub sync_ratio: i32,
    pub bucket_fill: i32,
}

pub const DEFAULT_SYNC_RATIO: i32 = 10;
pub const DEFAULT_BUCKET_FILL: i32 = 75;

/// Registers the reloptions; called from _PG_init (every backend of a
/// preloaded server has them).
pub unsafe fn register() {
    RELOPT_KIND = pg_sys::add_reloption_kind();
    pg_sys::add_int_reloption(
        RELOPT_KIND,
        c"sync_ratio".as_ptr(),
        c"Sync the unsynced entries into the tree and the hash buckets when they reach the bytes of both / sync_ratio".as_ptr(),
        DEFAULT_SYNC_RATIO,
        1,
        10_000,
        pg_sys::ShareUpdateExclusiveLock as i32,
    );
    pg_sys::add_int_reloption(
        RELOPT_KIND,
        c"bucket_fill".as_ptr(),
        c"Average fill (percent of a page) of the hash buckets at which a bucket splits".as_ptr(),
        DEFAULT_BUCKET_FILL,
        10,
        100,
        pg_sys::ShareUpdateExclusiveLock as i32,
    );
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    crate::require_preload();
    let tab = [
        pg_sys::relopt_parse_elt {
            optname: c"sync_ratio".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
            offset: std::mem::offset_of!(GriffinOptions, sync_ratio) as i32,
        },
        pg_sys::relopt_parse_elt {
            optname: c"bucket_fill".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
            offset: std::mem::offset_of!(GriffinOptions, bucket_fill) as i32,
        },
    ];
    pg_sys::build_reloptions(reloptions, validate, RELOPT_KIND, std::mem::size_of::<GriffinOptions>(), tab.as_ptr(), tab.len() as i32) as *mut pg_sys::bytea
}

unsafe fn opts(rel: pg_sys::Relation) -> Option<&'static GriffinOptions> {
    let o = (*rel).rd_options as *const GriffinOptions;
    if o.is_null() {
        None
    } else {
        Some(&*o)
    }
}

pub unsafe fn sync_ratio(rel: pg_sys::Relation) -> i32 {
    opts(rel).map(|o| o.sync_ratio).unwrap_or(DEFAULT_SYNC_RATIO)
}

pub unsafe fn bucket_fill(rel: pg_sys::Relation) -> i32 {
    opts(rel).map(|o| o.bucket_fill).unwrap_or(DEFAULT_BUCKET_FILL)
}
