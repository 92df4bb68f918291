//! Whether an operator family of ours means what btree means.
//!
//! Every AM of pg_hybrid compares keys through their order-preserving
//! encoding (or, for numeric, bpchar and collated text, through the
//! family's comparison function), reads a scan key's strategy number as
//! btree's (1 `<`, 2 `<=`, 3 `=`, 4 `>=`, 5 `>`) in that order, and hashes
//! keys with the type's default hash function. So an operator class is
//! only correct for us if each of its operators has, in the type's btree
//! family, the strategy it has in ours, and its comparison function is
//! btree's. The extension's own operator classes are built that way
//! (scripts/gen_opclasses.py); a user may create others with CREATE
//! OPERATOR CLASS ... USING, and one that orders differently (a reverse
//! order, a case-insensitive comparison) would answer queries wrongly
//! without a word. CREATE INDEX refuses such a class (`check_index`), and
//! `amvalidate()` reports what is wrong with it (`disagreements`).

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

/// Support function 1 of btree and of ours: the three-way comparison.
const BTORDER_PROC: i16 = 1;

unsafe fn cstr(p: *mut std::os::raw::c_char) -> String {
    std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
}

unsafe fn type_name(t: pg_sys::Oid) -> String {
    cstr(pg_sys::format_type_be(t))
}

/// The family of `typid`'s default btree operator class, if it has one.
unsafe fn btree_family(typid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    let opclass = pg_sys::GetDefaultOpClass(typid, pg_sys::BTREE_AM_OID);
    (opclass != pg_sys::InvalidOid).then(|| pg_sys::get_opclass_family(opclass))
}

/// The fixed part of each catalog row of `opfamily` in a syscache list
/// (pg_amop by AMOPSTRATEGY, pg_amproc by AMPROCNUM).
unsafe fn each_member<T: Copy>(cache: pg_sys::SysCacheIdentifier::Type, opfamily: pg_sys::Oid) -> Vec<T> {
    let list = pg_sys::SearchSysCacheList(cache as i32, 1, pg_sys::Datum::from(opfamily), pg_sys::Datum::from(0), pg_sys::Datum::from(0));
    let n = (*list).n_members as usize;
    let members = (*list).members.as_slice(n);
    let rows = members.iter().map(|&ct| *pg_sys::heap_tuple_get_struct::<T>(&mut (*ct).tuple)).collect();
    pg_sys::ReleaseCatCacheList(list);
    rows
}

/// The members of a family for one (left type, right type) pair: which
/// strategies have an operator, and whether the comparison function is
/// there.
struct TypePair {
    left: pg_sys::Oid,
    right: pg_sys::Oid,
    strategies: [bool; 5],
    has_comparison: bool,
}

/// What makes `opfamily` (of one of our AMs) disagree with btree, one
/// sentence each; empty when it agrees. An `ordered` AM needs all five
/// strategies for each pair of types it has operators for; one without
/// order (equality only, as PostgreSQL's hash) needs only `=`.
pub unsafe fn disagreements(opfamily: pg_sys::Oid, ordered: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let ops: Vec<pg_sys::FormData_pg_amop> = each_member(pg_sys::SysCacheIdentifier::AMOPSTRATEGY, opfamily);
    let procs: Vec<pg_sys::FormData_pg_amproc> = each_member(pg_sys::SysCacheIdentifier::AMPROCNUM, opfamily);
    let mut pairs: Vec<TypePair> = Vec::new();
    fn pair_of(pairs: &mut Vec<TypePair>, left: pg_sys::Oid, right: pg_sys::Oid) -> usize {
        match pairs.iter().position(|p| p.left == left && p.right == right) {
            Some(i) => i,
            None => {
                pairs.push(TypePair { left, right, strategies: [false; 5], has_comparison: false });
                pairs.len() - 1
            }
        }
    }
    for op in &ops {
        let name = cstr(pg_sys::format_operator(op.amopopr));
        if op.amoppurpose != pg_sys::AMOP_SEARCH as std::os::raw::c_char {
            problems.push(format!("operator {name} is an ordering operator (FOR ORDER BY); pg_hybrid's access methods have none"));
            continue;
        }
        let strategy = op.amopstrategy;
        if !(1..=5).contains(&strategy) {
            problems.push(format!("operator {name} has strategy {strategy}; only 1 to 5 (<, <=, =, >=, >) exist"));
            continue;
        }
        let i = pair_of(&mut pairs, op.amoplefttype, op.amoprighttype);
        pairs[i].strategies[strategy as usize - 1] = true;
        match btree_family(op.amoplefttype) {
            None => problems.push(format!("type {} has no default btree operator class to agree with", type_name(op.amoplefttype))),
            Some(bt) => {
                let theirs = pg_sys::get_op_opfamily_strategy(op.amopopr, bt);
                if theirs != strategy as i32 {
                    problems.push(if theirs == 0 {
                        format!("operator {name} (strategy {strategy}) is not in btree's operator family for {}", type_name(op.amoplefttype))
                    } else {
                        format!("operator {name} has strategy {strategy}, but btree's operator family for {} gives it strategy {theirs}", type_name(op.amoplefttype))
                    });
                }
            }
        }
    }
    for p in &procs {
        let name = cstr(pg_sys::format_procedure(p.amproc));
        if p.amprocnum != BTORDER_PROC {
            problems.push(format!("function {name} has support number {}; only 1 (the comparison) exists", p.amprocnum));
            continue;
        }
        let i = pair_of(&mut pairs, p.amproclefttype, p.amprocrighttype);
        pairs[i].has_comparison = true;
        let theirs = btree_family(p.amproclefttype)
            .map(|bt| pg_sys::get_opfamily_proc(bt, p.amproclefttype, p.amprocrighttype, BTORDER_PROC))
            .unwrap_or(pg_sys::InvalidOid);
        if theirs != p.amproc {
            problems.push(format!(
                "comparison function {name} for ({}, {}) is not btree's{}",
                type_name(p.amproclefttype),
                type_name(p.amprocrighttype),
                if theirs == pg_sys::InvalidOid { String::new() } else { format!(" ({})", cstr(pg_sys::format_procedure(theirs))) }
            ));
        }
    }
    for TypePair { left, right, strategies, has_comparison } in &pairs {
        let types = format!("({}, {})", type_name(*left), type_name(*right));
        let required: &[usize] = if ordered { &[1, 2, 3, 4, 5] } else { &[3] };
        let missing: Vec<String> = required.iter().filter(|&&s| !strategies[s - 1]).map(|s| s.to_string()).collect();
        if !missing.is_empty() {
            problems.push(format!("operators for {types} lack strateg{} {}", if missing.len() == 1 { "y" } else { "ies" }, missing.join(", ")));
        }
        if !has_comparison {
            problems.push(format!("operators for {types} have no comparison function (support function 1)"));
        }
    }
    problems
}

/// Refuses, at CREATE INDEX, a key column whose operator family
/// disagrees with btree (see the module comment).
pub unsafe fn check_index(index: pg_sys::Relation, ordered: bool) {
    let nkeyatts = (*(*index).rd_index).indnkeyatts as usize;
    for col in 0..nkeyatts {
        let opfamily = *(*index).rd_opfamily.add(col);
        let problems = disagreements(opfamily, ordered);
        if let Some(first) = problems.first() {
            let am = cstr(pg_sys::get_am_name((*index).rd_rel.as_ref().unwrap().relam));
            crate::raise(
                PgSqlErrorCode::ERRCODE_INVALID_OBJECT_DEFINITION,
                format!(
                    "the operator class of column {} of index \"{}\" does not compare like btree: {first}{}",
                    col + 1,
                    crate::storage::page::rel_name(index),
                    if problems.len() > 1 { format!(" (and {} more; SELECT amvalidate(...) lists them)", problems.len() - 1) } else { String::new() }
                ),
                format!("{am} compares keys as the type's default btree operator class does and reads strategy numbers as btree does. Use the operator class {am} provides for the type (its default), or a btree index for a custom ordering."),
            );
        }
    }
}
