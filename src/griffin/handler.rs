//! The handler of griffin (the engine's callbacks, griffin's reloptions)
//! and its SQL declarations.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[no_mangle]
pub extern "C" fn pg_finfo_griffin_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn griffin_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    crate::engine::handler::ordered_routine(Some(super::options::amoptions))
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION griffin_handler(internal) RETURNS index_am_handler
    LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'griffin_handler';
CREATE ACCESS METHOD griffin TYPE INDEX HANDLER griffin_handler;
COMMENT ON ACCESS METHOD griffin IS 'hash path for full-key equality plus a compact B+tree for ranges, behind a dynamic stage in shared memory that a sync worker moves into both';
"#,
    name = "griffin_am",
    requires = ["preload_check"]
);

pgrx::extension_sql_file!("opclasses.sql", name = "griffin_opclasses", requires = ["griffin_am"]);
