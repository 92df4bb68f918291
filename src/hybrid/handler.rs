//! The IndexAmRoutine of hybrid_btree and its SQL declarations.

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::{build, cost, insert, options, scan, vacuum};

#[no_mangle]
pub extern "C" fn pg_finfo_hybrid_btree_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn hybrid_btree_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexAmRoutine>()) as *mut pg_sys::IndexAmRoutine;
    (*r).type_ = pg_sys::NodeTag::T_IndexAmRoutine;
    (*r).amstrategies = 5;
    (*r).amsupport = 1;
    (*r).amoptsprocnum = 0;
    (*r).amcanorder = true;
    (*r).amcanorderbyop = false;
    (*r).amcanbackward = true;
    (*r).amcanunique = true;
    (*r).amcanmulticol = true;
    (*r).amoptionalkey = true;
    (*r).amsearcharray = true;
    (*r).amsearchnulls = true;
    (*r).amstorage = false;
    (*r).amclusterable = true;
    (*r).ampredlocks = false;
    (*r).amcanparallel = false;
    (*r).amcaninclude = true;
    (*r).amusemaintenanceworkmem = true;
    (*r).amparallelvacuumoptions = pg_sys::VACUUM_OPTION_NO_PARALLEL as u8;
    (*r).amkeytype = pg_sys::InvalidOid;

    (*r).ambuild = Some(build::ambuild);
    (*r).ambuildempty = Some(build::ambuildempty);
    (*r).aminsert = Some(insert::aminsert);
    (*r).ambulkdelete = Some(vacuum::ambulkdelete);
    (*r).amvacuumcleanup = Some(vacuum::amvacuumcleanup);
    (*r).amcanreturn = Some(scan::amcanreturn);
    (*r).amcostestimate = Some(cost::amcostestimate);
    (*r).amoptions = Some(options::amoptions);
    (*r).amproperty = None;
    (*r).ambuildphasename = Some(build::ambuildphasename);
    (*r).amvalidate = Some(amvalidate);
    (*r).amadjustmembers = None;
    (*r).ambeginscan = Some(scan::ambeginscan);
    (*r).amrescan = Some(scan::amrescan);
    (*r).amgettuple = Some(scan::amgettuple);
    (*r).amgetbitmap = Some(scan::amgetbitmap);
    (*r).amendscan = Some(scan::amendscan);
    (*r).ammarkpos = Some(scan::ammarkpos);
    (*r).amrestrpos = Some(scan::amrestrpos);
    (*r).amestimateparallelscan = None;
    (*r).aminitparallelscan = None;
    (*r).amparallelrescan = None;
    pg_sys::Datum::from(r)
}

/// Operator classes come only from our generated script; accept them.
#[pg_guard]
unsafe extern "C-unwind" fn amvalidate(_opclassoid: pg_sys::Oid) -> bool {
    true
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
