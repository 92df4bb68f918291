//! The handlers of tiered_btree and tiered_hash (the engine's callbacks,
//! tiered's reloptions) and their SQL declarations.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[no_mangle]
pub extern "C" fn pg_finfo_tiered_btree_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn tiered_btree_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    crate::engine::handler::ordered_routine(Some(super::options::amoptions))
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION tiered_btree_handler(internal) RETURNS index_am_handler
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'tiered_btree_handler';
CREATE ACCESS METHOD tiered_btree TYPE INDEX HANDLER tiered_btree_handler;
COMMENT ON ACCESS METHOD tiered_btree IS 'two-tier B+tree: complete records of hot keys in shared memory (record-level CLOCK, sampled promotion) in front of a compact B+tree of every key';
"#,
    name = "tiered_btree_am",
    requires = ["preload_check"]
);

pgrx::extension_sql_file!("opclasses.sql", name = "tiered_btree_opclasses", requires = ["tiered_btree_am"]);

#[no_mangle]
pub extern "C" fn pg_finfo_tiered_hash_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn tiered_hash_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    crate::engine::handler::unordered_routine(Some(super::options::amoptions_hash))
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION tiered_hash_handler(internal) RETURNS index_am_handler
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'tiered_hash_handler';
CREATE ACCESS METHOD tiered_hash TYPE INDEX HANDLER tiered_hash_handler;
COMMENT ON ACCESS METHOD tiered_hash IS 'two-tier hash index: complete records of hot keys in shared memory (record-level CLOCK, sampled promotion) in front of linear-hashing buckets of every key; equality only, UNIQUE and multi-column';
"#,
    name = "tiered_hash_am",
    requires = ["preload_check"]
);

pgrx::extension_sql_file!("opclasses_hash.sql", name = "tiered_hash_opclasses", requires = ["tiered_hash_am"]);
