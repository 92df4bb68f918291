//! The handler of hybrid_btree (the engine's callbacks, hybrid's reloptions)
//! and its SQL declarations.

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::options;

#[no_mangle]
pub extern "C" fn pg_finfo_hybrid_btree_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn hybrid_btree_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    crate::engine::handler::ordered_routine(Some(options::amoptions))
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION hybrid_btree_handler(internal) RETURNS index_am_handler
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'hybrid_btree_handler';
CREATE ACCESS METHOD hybrid_btree TYPE INDEX HANDLER hybrid_btree_handler;
COMMENT ON ACCESS METHOD hybrid_btree IS 'dual-stage hybrid B+tree (dynamic stage in shared memory, compact static stage)';
"#,
    name = "hybrid_btree_am",
    requires = ["preload_check"]
);

pgrx::extension_sql_file!("opclasses.sql", name = "hybrid_btree_opclasses", requires = ["hybrid_btree_am"]);
