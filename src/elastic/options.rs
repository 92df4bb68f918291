//! Reloptions of elastic_btree: size_bound, shrink/expand thresholds, the
//! SeqTree shape (tree_level, slack) and merge_ratio.

use std::ffi::CStr;

use pg_hybrid_core::elastic::tree::Config;
use pgrx::pg_sys;
use pgrx::prelude::*;

static mut RELOPT_KIND: pg_sys::relopt_kind::Type = 0;

#[repr(C)]
pub struct ElasticOptions {
    vl_len_: i32,
    pub merge_ratio: i32,
    pub shrink_threshold: i32,
    pub expand_threshold: i32,
    pub tree_level: i32,
    pub slack: i32,
    /// Offset of the size_bound string within this struct (0 = none).
    size_bound_off: i32,
}

/// Smallest bound: four pages (a metapage, a root and two leaves).
const MIN_BOUND: u64 = 4 * pg_sys::BLCKSZ as u64;

use pg_hybrid_core::units::parse_size;

#[pg_guard]
unsafe extern "C-unwind" fn validate_size_bound(value: *const std::os::raw::c_char) {
    if value.is_null() {
        return;
    }
    let v = CStr::from_ptr(value).to_string_lossy();
    if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("none") {
        return;
    }
    match parse_size(&v) {
        Ok(b) if b < MIN_BOUND => crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("elastic_btree option \"size_bound\" = '{v}' is smaller than four pages ({MIN_BOUND} bytes)"),
            "Give a bound of at least 32kB, or 'none' for no bound.",
        ),
        Ok(_) => {}
        Err(e) => crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid value for elastic_btree option \"size_bound\": {e}"),
            "Give bytes with an optional unit, e.g. '256MB', '2GB', '500kB', or 'none'.",
        ),
    }
}

pub unsafe fn register() {
    RELOPT_KIND = pg_sys::add_reloption_kind();
    let lock = pg_sys::ShareUpdateExclusiveLock as i32;
    pg_sys::add_int_reloption(RELOPT_KIND, c"merge_ratio".as_ptr(), c"Merge when the dynamic stage reaches tree entries / merge_ratio".as_ptr(), super::DEFAULT_MERGE_RATIO, 1, 10_000, lock);
    pg_sys::add_int_reloption(RELOPT_KIND, c"shrink_threshold".as_ptr(), c"Percent of size_bound at which leaves start turning compact".as_ptr(), 90, 1, 100, lock);
    pg_sys::add_int_reloption(RELOPT_KIND, c"expand_threshold".as_ptr(), c"Percent of size_bound under which compact leaves revert".as_ptr(), 75, 0, 99, lock);
    pg_sys::add_int_reloption(RELOPT_KIND, c"tree_level".as_ptr(), c"Depth of the BlindiTree of compact leaves".as_ptr(), pg_hybrid_core::elastic::compact::DEFAULT_LEVEL as i32, 0, pg_hybrid_core::elastic::compact::MAX_LEVEL as i32, lock);
    pg_sys::add_int_reloption(RELOPT_KIND, c"slack".as_ptr(), c"Entries a compact leaf's arrays grow by (breathing)".as_ptr(), pg_hybrid_core::elastic::compact::DEFAULT_SLACK as i32, 1, 64, lock);
    pg_sys::add_string_reloption(RELOPT_KIND, c"size_bound".as_ptr(), c"Soft bound on the index size, e.g. '256MB'; none = unbounded".as_ptr(), std::ptr::null(), Some(validate_size_bound), lock);
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    crate::require_preload();
    use pg_sys::relopt_type::{RELOPT_TYPE_INT as INT, RELOPT_TYPE_STRING as STR};
    let elt = |name: &'static CStr, t, off: usize| pg_sys::relopt_parse_elt { optname: name.as_ptr(), opttype: t, offset: off as i32 };
    let tab = [
        elt(c"merge_ratio", INT, std::mem::offset_of!(ElasticOptions, merge_ratio)),
        elt(c"shrink_threshold", INT, std::mem::offset_of!(ElasticOptions, shrink_threshold)),
        elt(c"expand_threshold", INT, std::mem::offset_of!(ElasticOptions, expand_threshold)),
        elt(c"tree_level", INT, std::mem::offset_of!(ElasticOptions, tree_level)),
        elt(c"slack", INT, std::mem::offset_of!(ElasticOptions, slack)),
        elt(c"size_bound", STR, std::mem::offset_of!(ElasticOptions, size_bound_off)),
    ];
    let r = pg_sys::build_reloptions(reloptions, validate, RELOPT_KIND, std::mem::size_of::<ElasticOptions>(), tab.as_ptr(), tab.len() as i32) as *mut pg_sys::bytea;
    if validate && !r.is_null() {
        let o = &*(r as *const ElasticOptions);
        if o.expand_threshold >= o.shrink_threshold {
            crate::raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("elastic_btree option expand_threshold ({}) must be below shrink_threshold ({})", o.expand_threshold, o.shrink_threshold),
                "The gap between them keeps the index from flipping between shrinking and expanding; the defaults are 75 and 90.",
            );
        }
    }
    r
}

unsafe fn opts(rel: pg_sys::Relation) -> Option<&'static ElasticOptions> {
    let o = (*rel).rd_options as *const ElasticOptions;
    if o.is_null() {
        None
    } else {
        Some(&*o)
    }
}

pub unsafe fn merge_ratio(rel: pg_sys::Relation) -> i32 {
    opts(rel).map(|o| o.merge_ratio).unwrap_or(super::DEFAULT_MERGE_RATIO)
}

pub unsafe fn size_bound(rel: pg_sys::Relation) -> Option<u64> {
    let o = opts(rel)?;
    if o.size_bound_off == 0 {
        return None;
    }
    let s = CStr::from_ptr((o as *const ElasticOptions as *const std::os::raw::c_char).add(o.size_bound_off as usize)).to_string_lossy();
    if s.trim().is_empty() || s.trim().eq_ignore_ascii_case("none") {
        return None;
    }
    parse_size(&s).ok()
}

/// The tree configuration the reloptions describe.
pub unsafe fn config(rel: pg_sys::Relation) -> Config {
    let mut c = Config { size_bound: size_bound(rel), ..Config::default() };
    if let Some(o) = opts(rel) {
        c.shrink_pct = o.shrink_threshold as u32;
        c.expand_pct = o.expand_threshold as u32;
        c.tree_level = o.tree_level as u8;
        c.slack = o.slack as u8;
    }
    c
}
