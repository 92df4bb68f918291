//! Reloptions of hybrid_btree: merge_ratio and compression.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut RELOPT_KIND: pg_sys::relopt_kind::Type = 0;

#[repr(C)]
pub struct HybridOptions {
    vl_len_: i32,
    pub merge_ratio: i32,
    /// Offset of the compression string within this struct (0 = default).
    compression_off: i32,
}

pub const DEFAULT_MERGE_RATIO: i32 = 10;

#[pg_guard]
unsafe extern "C-unwind" fn validate_compression(value: *const std::os::raw::c_char) {
    if value.is_null() {
        return;
    }
    let v = CStr::from_ptr(value).to_string_lossy();
    if v != "none" && v != "lz4" {
        crate::raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("invalid value for hybrid_btree option \"compression\": \"{v}\""), "Valid values are \"none\" and \"lz4\".");
    }
}

/// Registers the reloptions; called from _PG_init (every backend of a
/// preloaded server has them).
pub unsafe fn register() {
    RELOPT_KIND = pg_sys::add_reloption_kind();
    pg_sys::add_int_reloption(
        RELOPT_KIND,
        c"merge_ratio".as_ptr(),
        c"Merge when the delta log reaches the static stage bytes / merge_ratio".as_ptr(),
        DEFAULT_MERGE_RATIO,
        1,
        10_000,
        pg_sys::ShareUpdateExclusiveLock as i32,
    );
    pg_sys::add_string_reloption(
        RELOPT_KIND,
        c"compression".as_ptr(),
        c"Compression of static-stage leaves: none or lz4".as_ptr(),
        c"none".as_ptr(),
        Some(validate_compression),
        pg_sys::ShareUpdateExclusiveLock as i32,
    );
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    crate::require_preload();
    let tab = [
        pg_sys::relopt_parse_elt {
            optname: c"merge_ratio".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
            offset: std::mem::offset_of!(HybridOptions, merge_ratio) as i32,
        },
        pg_sys::relopt_parse_elt {
            optname: c"compression".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_STRING,
            offset: std::mem::offset_of!(HybridOptions, compression_off) as i32,
        },
    ];
    pg_sys::build_reloptions(
        reloptions,
        validate,
        RELOPT_KIND,
        std::mem::size_of::<HybridOptions>(),
        tab.as_ptr(),
        tab.len() as i32,
    ) as *mut pg_sys::bytea
}

unsafe fn opts(rel: pg_sys::Relation) -> Option<&'static HybridOptions> {
    let o = (*rel).rd_options as *const HybridOptions;
    if o.is_null() {
        None
    } else {
        Some(&*o)
    }
}

pub unsafe fn merge_ratio(rel: pg_sys::Relation) -> i32 {
    opts(rel).map(|o| o.merge_ratio).unwrap_or(DEFAULT_MERGE_RATIO)
}

pub unsafe fn compression_lz4(rel: pg_sys::Relation) -> bool {
    match opts(rel) {
        Some(o) if o.compression_off != 0 => {
            let s = CStr::from_ptr((o as *const HybridOptions as *const std::os::raw::c_char).add(o.compression_off as usize));
            s.to_bytes() == b"lz4"
        }
        _ => false,
    }
}
