//! Reloptions of tiered_btree and tiered_hash: `hot_size` (the hot tier's
//! bound, bytes with PostgreSQL's memory units; default
//! `pg_hybrid.hot_size_fraction` of shared_buffers) and `sample_rate` (the
//! paper's F: the chance that a point read of the cold tier copies the
//! key's record up, once the tier is full); tiered_hash also `bucket_fill` (how full the cold
//! tier's buckets get before one splits).

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut BTREE_KIND: pg_sys::relopt_kind::Type = 0;
static mut HASH_KIND: pg_sys::relopt_kind::Type = 0;

/// Both AMs' options (tiered_btree's parser leaves `bucket_fill` 0).
#[repr(C)]
pub struct TieredOptions {
    vl_len_: i32,
    /// Offset of the hot_size string within this struct (0 = default).
    hot_size_off: i32,
    pub sample_rate: f64,
    pub bucket_fill: i32,
}

pub const DEFAULT_SAMPLE_RATE: f64 = 0.3;
pub const DEFAULT_BUCKET_FILL: i32 = 75;
/// The smallest bound accepted: a few nodes of the shared tree.
const MIN_HOT_SIZE: u64 = 64 * 1024;

use pg_hybrid_core::units::parse_size;

/// The most a hot tier may take: half the arena every pg_hybrid index
/// shares (the rest is for the other indexes' dynamic stages).
pub fn max_hot_size() -> u64 {
    crate::guc::SHARED_MEMORY_MB.get() as u64 * (1 << 20) / 2
}

#[pg_guard]
unsafe extern "C-unwind" fn validate_hot_size(value: *const std::os::raw::c_char) {
    if value.is_null() {
        return;
    }
    let v = CStr::from_ptr(value).to_string_lossy();
    match parse_size(&v) {
        Err(e) => crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid value for option \"hot_size\": {e}"),
            "Give bytes with an optional unit, e.g. '64MB', '512kB'.",
        ),
        Ok(b) if b < MIN_HOT_SIZE => crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("option \"hot_size\" is too small: {b} bytes"),
            "The hot tier needs at least 64kB.",
        ),
        Ok(b) if b > max_hot_size() => crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("option \"hot_size\" ({v}) is larger than shared memory allows ({} MB)", max_hot_size() >> 20),
            "A hot tier may take at most half of pg_hybrid.shared_memory: lower hot_size, or raise pg_hybrid.shared_memory and restart the server.",
        ),
        Ok(_) => {}
    }
}

/// Registers the reloptions; called from _PG_init (every backend of a
/// preloaded server has them).
pub unsafe fn register() {
    BTREE_KIND = pg_sys::add_reloption_kind();
    HASH_KIND = pg_sys::add_reloption_kind();
    for kind in [BTREE_KIND, HASH_KIND] {
        pg_sys::add_string_reloption(
            kind,
            c"hot_size".as_ptr(),
            c"Bound on the hot tier (bytes, with units); default pg_hybrid.hot_size_fraction of shared_buffers".as_ptr(),
            std::ptr::null(),
            Some(validate_hot_size),
            pg_sys::ShareUpdateExclusiveLock as i32,
        );
        pg_sys::add_real_reloption(
            kind,
            c"sample_rate".as_ptr(),
            c"Chance that a point read of the cold tier copies the key's record into a full hot tier; one with room takes every such record (0 < rate <= 1)".as_ptr(),
            DEFAULT_SAMPLE_RATE,
            0.0001,
            1.0,
            pg_sys::ShareUpdateExclusiveLock as i32,
        );
    }
    pg_sys::add_int_reloption(
        HASH_KIND,
        c"bucket_fill".as_ptr(),
        c"Average fill (percent of a page) of the cold tier's hash buckets at which a bucket splits".as_ptr(),
        DEFAULT_BUCKET_FILL,
        10,
        100,
        pg_sys::ShareUpdateExclusiveLock as i32,
    );
}

const HOT_SIZE: pg_sys::relopt_parse_elt = pg_sys::relopt_parse_elt {
    optname: c"hot_size".as_ptr(),
    opttype: pg_sys::relopt_type::RELOPT_TYPE_STRING,
    offset: std::mem::offset_of!(TieredOptions, hot_size_off) as i32,
};
const SAMPLE_RATE: pg_sys::relopt_parse_elt = pg_sys::relopt_parse_elt {
    optname: c"sample_rate".as_ptr(),
    opttype: pg_sys::relopt_type::RELOPT_TYPE_REAL,
    offset: std::mem::offset_of!(TieredOptions, sample_rate) as i32,
};
const BUCKET_FILL: pg_sys::relopt_parse_elt = pg_sys::relopt_parse_elt {
    optname: c"bucket_fill".as_ptr(),
    opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
    offset: std::mem::offset_of!(TieredOptions, bucket_fill) as i32,
};

unsafe fn parse(reloptions: pg_sys::Datum, validate: bool, kind: pg_sys::relopt_kind::Type, tab: &[pg_sys::relopt_parse_elt]) -> *mut pg_sys::bytea {
    crate::require_preload();
    pg_sys::build_reloptions(reloptions, validate, kind, std::mem::size_of::<TieredOptions>(), tab.as_ptr(), tab.len() as i32) as *mut pg_sys::bytea
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    parse(reloptions, validate, BTREE_KIND, &[HOT_SIZE, SAMPLE_RATE])
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amoptions_hash(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    parse(reloptions, validate, HASH_KIND, &[HOT_SIZE, SAMPLE_RATE, BUCKET_FILL])
}

unsafe fn opts(rel: pg_sys::Relation) -> Option<&'static TieredOptions> {
    let o = (*rel).rd_options as *const TieredOptions;
    if o.is_null() {
        None
    } else {
        Some(&*o)
    }
}

/// The hot tier's bound in bytes: the reloption, or the GUC's fraction of
/// shared_buffers, never more than `max_hot_size`.
pub unsafe fn hot_size(rel: pg_sys::Relation) -> u64 {
    let explicit = opts(rel).and_then(|o| {
        if o.hot_size_off == 0 {
            return None;
        }
        let s = CStr::from_ptr((o as *const TieredOptions as *const std::os::raw::c_char).add(o.hot_size_off as usize));
        parse_size(&s.to_string_lossy()).ok()
    });
    let bytes = explicit.unwrap_or_else(|| {
        let shared_buffers = pg_sys::NBuffers as u64 * pg_sys::BLCKSZ as u64;
        (shared_buffers as f64 * crate::guc::HOT_SIZE_FRACTION.get()) as u64
    });
    bytes.clamp(MIN_HOT_SIZE, max_hot_size().max(MIN_HOT_SIZE))
}

pub unsafe fn sample_rate(rel: pg_sys::Relation) -> f64 {
    opts(rel).map(|o| o.sample_rate).unwrap_or(DEFAULT_SAMPLE_RATE)
}

/// tiered_hash's split trigger (percent of a page), fixed at build.
pub unsafe fn bucket_fill(rel: pg_sys::Relation) -> i32 {
    opts(rel).map(|o| o.bucket_fill).filter(|&f| f > 0).unwrap_or(DEFAULT_BUCKET_FILL)
}
