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

/// Operator classes come only from our generated scripts; accept them.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn amvalidate(_opclassoid: pg_sys::Oid) -> bool {
    true
}
