//! The handler of elastic_btree (the engine's callbacks, elastic's
//! reloptions) and its SQL declarations.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[no_mangle]
pub extern "C" fn pg_finfo_elastic_btree_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn elastic_btree_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    crate::engine::handler::ordered_routine(Some(super::options::amoptions))
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION elastic_btree_handler(internal) RETURNS index_am_handler
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'elastic_btree_handler';
CREATE ACCESS METHOD elastic_btree TYPE INDEX HANDLER elastic_btree_handler;
COMMENT ON ACCESS METHOD elastic_btree IS 'B+tree whose leaves turn into compact SeqTree leaves under a size bound, behind a dynamic stage in shared memory';
"#,
    name = "elastic_btree_am",
    requires = ["preload_check"]
);

pgrx::extension_sql_file!("opclasses.sql", name = "elastic_btree_opclasses", requires = ["elastic_btree_am"]);
