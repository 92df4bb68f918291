//! The IndexAmRoutine every AM of the engine returns: the engine's
//! callbacks, with the AM's own reloption parser.

use pgrx::pg_sys;

use super::{build, cost, insert, scan, vacuum};

/// A palloc'd routine for an ordered, UNIQUE-capable AM whose reloptions
/// `amoptions` parses (an AM's handler returns it as its Datum).
pub unsafe fn ordered_routine(amoptions: pg_sys::amoptions_function) -> pg_sys::Datum {
    routine(amoptions, true)
}

/// The routine of an AM whose structure has no order
/// (`BaseStructure::ordered`): equality only, like PostgreSQL's hash index
/// (no ordered scans, no CLUSTER, a condition on the first key column
/// required), but UNIQUE-capable and multi-column. `IS NULL` and `= ANY`
/// are left to the executor (a filter, or a bitmap scan per element).
pub unsafe fn unordered_routine(amoptions: pg_sys::amoptions_function) -> pg_sys::Datum {
    routine(amoptions, false)
}

unsafe fn routine(amoptions: pg_sys::amoptions_function, ordered: bool) -> pg_sys::Datum {
    let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexAmRoutine>()) as *mut pg_sys::IndexAmRoutine;
    (*r).type_ = pg_sys::NodeTag::T_IndexAmRoutine;
    (*r).amstrategies = 5;
    (*r).amsupport = 1;
    (*r).amoptsprocnum = 0;
    (*r).amcanorder = ordered;
    (*r).amcanorderbyop = false;
    (*r).amcanbackward = true;
    (*r).amcanunique = true;
    (*r).amcanmulticol = true;
    (*r).amoptionalkey = ordered;
    (*r).amsearcharray = ordered;
    (*r).amsearchnulls = ordered;
    (*r).amstorage = false;
    (*r).amclusterable = ordered;
    (*r).ampredlocks = true;
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
    (*r).amoptions = amoptions;
    (*r).amproperty = None;
    (*r).ambuildphasename = Some(build::ambuildphasename);
    (*r).amvalidate = Some(if ordered { amvalidate_ordered } else { amvalidate_unordered });
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

/// `amvalidate(opclass)`: whether the class's family agrees with btree in
/// every operator and comparison function (keys::opfamily), and has `=`
/// for its own input type; each problem is an INFO, as btvalidate
/// reports them.
unsafe fn validate(opclassoid: pg_sys::Oid, ordered: bool) -> bool {
    let opfamily = pg_sys::get_opclass_family(opclassoid);
    let intype = pg_sys::get_opclass_input_type(opclassoid);
    let mut problems = crate::keys::opfamily::disagreements(opfamily, ordered);
    if pg_sys::get_opfamily_member(opfamily, intype, intype, pg_sys::BTEqualStrategyNumber as i16) == pg_sys::InvalidOid {
        let t = std::ffi::CStr::from_ptr(pg_sys::format_type_be(intype)).to_string_lossy().into_owned();
        problems.push(format!("it has no = operator for its input type {t}"));
    }
    let name = opclass_name(opclassoid);
    for p in &problems {
        pgrx::ereport!(pgrx::PgLogLevel::INFO, pgrx::PgSqlErrorCode::ERRCODE_INVALID_OBJECT_DEFINITION, format!("operator class \"{name}\": {p}"));
    }
    problems.is_empty()
}

unsafe fn opclass_name(opclassoid: pg_sys::Oid) -> String {
    let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::CLAOID as i32, pg_sys::Datum::from(opclassoid));
    if tup.is_null() {
        return opclassoid.to_u32().to_string();
    }
    let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_opclass>(tup);
    let name = std::ffi::CStr::from_ptr((*form).opcname.data.as_ptr()).to_string_lossy().into_owned();
    pg_sys::ReleaseSysCache(tup);
    name
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn amvalidate_ordered(opclassoid: pg_sys::Oid) -> bool {
    validate(opclassoid, true)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn amvalidate_unordered(opclassoid: pg_sys::Oid) -> bool {
    validate(opclassoid, false)
}
