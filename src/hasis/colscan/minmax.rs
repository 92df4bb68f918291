//! Min/max quals: `column op value` quals a column part's min/max can
//! answer for the whole part.
//!
//! At plan time a qual qualifies when one side is a column of the scanned
//! table whose values carry min/max in the column part (by-value integers,
//! floats, dates, times, timestamps, oids, bools: the core's orderable
//! fixed-width kinds), the other side has no Vars and nothing volatile (a
//! constant, an external or executor parameter, a stable expression), and
//! the operator is a `<`, `<=`, `=`, `>=` or `>` of the column type's
//! default btree operator family. At execution the value side is evaluated
//! at the start of every (re)scan, and a column part is skipped when its
//! min (for `<`, `<=`, `=`) or max (for `>`, `>=`, `=`) fails the
//! comparison, or when every value is NULL (the operators are strict).
//! The quals themselves still run on every row returned, so skipping is
//! only ever an optimization.
//!
//! Only leakproof comparison functions are used: they see the min and max
//! of rows that row-level security may hide from the query.
//!
//! A column added with a default (`atthasmissing`) is never used: rows
//! written before it lack the column and take the default, which min/max
//! do not cover.

use pgrx::pg_sys;

use pg_hybrid_core::hasis::column::ColumnPart;
use pg_hybrid_core::hasis::row::MinMaxOrder;

/// Btree strategy numbers (access/stratnum.h).
const BT_LT: i32 = 1;
const BT_LE: i32 = 2;
const BT_EQ: i32 = 3;
const BT_GE: i32 = 4;
const BT_GT: i32 = 5;

/// Ints per qual in the plan's custom_private list.
pub const ENCODED_INTS: usize = 5;

/// One min/max qual, as the plan carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinMaxQual {
    pub attno: i16,
    /// The btree strategy of the operator with the column on its left.
    pub strategy: i32,
    /// LT/LE: the operator's function, applied to (min, value); GT/GE: to
    /// (max, value); EQ: the family's `<=`, applied to (min, value).
    pub first_fn: pg_sys::Oid,
    /// EQ only: the family's `>=`, applied to (max, value).
    pub second_fn: pg_sys::Oid,
    pub collation: pg_sys::Oid,
}

impl MinMaxQual {
    pub fn encode(&self, out: &mut Vec<i32>) {
        out.extend([self.attno as i32, self.strategy, u32::from(self.first_fn) as i32, u32::from(self.second_fn) as i32, u32::from(self.collation) as i32]);
    }

    pub fn decode(ints: &[i32]) -> MinMaxQual {
        MinMaxQual {
            attno: ints[0] as i16,
            strategy: ints[1],
            first_fn: pg_sys::Oid::from(ints[2] as u32),
            second_fn: pg_sys::Oid::from(ints[3] as u32),
            collation: pg_sys::Oid::from(ints[4] as u32),
        }
    }

    pub fn operator_name(&self) -> &'static str {
        match self.strategy {
            BT_LT => "<",
            BT_LE => "<=",
            BT_EQ => "=",
            BT_GE => ">=",
            _ => ">",
        }
    }
}

/// Whether column `attno` of `desc` keeps min/max in a column part and its
/// values are by-value datums this module can compare.
unsafe fn has_usable_minmax(desc: pg_sys::TupleDesc, attno: i16) -> bool {
    if attno < 1 || attno as i32 > (*desc).natts {
        return false;
    }
    let att = &(*desc).attrs.as_slice((*desc).natts as usize)[attno as usize - 1];
    if att.attisdropped || att.atthasmissing || !att.attbyval || ![1, 2, 4, 8].contains(&att.attlen) {
        return false;
    }
    super::super::tuple::minmax_order(att.atttypid, att.attlen) != MinMaxOrder::None
}

/// The min/max qual of one restriction clause of the scanned relation
/// `relid` (range table index), and the expression on its value side.
pub unsafe fn from_clause(clause: *mut pg_sys::Node, relid: u32, desc: pg_sys::TupleDesc) -> Option<(MinMaxQual, *mut pg_sys::Node)> {
    if (*clause).type_ != pg_sys::NodeTag::T_OpExpr {
        return None;
    }
    let op = clause as *mut pg_sys::OpExpr;
    if pg_sys::list_length((*op).args) != 2 {
        return None;
    }
    let left = pg_sys::list_nth((*op).args, 0) as *mut pg_sys::Node;
    let right = pg_sys::list_nth((*op).args, 1) as *mut pg_sys::Node;
    let is_our_var = |n: *mut pg_sys::Node| {
        (*n).type_ == pg_sys::NodeTag::T_Var && {
            let v = n as *mut pg_sys::Var;
            (*v).varno as u32 == relid && (*v).varlevelsup == 0 && (*v).varattno > 0
        }
    };
    let is_value = |n: *mut pg_sys::Node| !pg_sys::contain_var_clause(n) && !pg_sys::contain_volatile_functions(n);
    let (var, value, opno) = if is_our_var(left) && is_value(right) {
        (left as *mut pg_sys::Var, right, (*op).opno)
    } else if is_our_var(right) && is_value(left) {
        let commuted = pg_sys::get_commutator((*op).opno);
        if commuted == pg_sys::InvalidOid {
            return None;
        }
        (right as *mut pg_sys::Var, left, commuted)
    } else {
        return None;
    };
    let attno = (*var).varattno;
    if !has_usable_minmax(desc, attno) {
        return None;
    }
    let coltype = (*var).vartype;
    // The type cache keeps the default btree family: GetDefaultOpClass
    // scans pg_opclass on every call, which cost a point query's planning
    // more than the rest of this hook.
    let family = (*pg_sys::lookup_type_cache(coltype, pg_sys::TYPECACHE_BTREE_OPFAMILY as i32)).btree_opf;
    if family == pg_sys::InvalidOid {
        return None;
    }
    let strategy = pg_sys::get_op_opfamily_strategy(opno, family);
    let valtype = pg_sys::exprType(value);
    let member_fn = |s: i32| {
        let o = pg_sys::get_opfamily_member(family, coltype, valtype, s as i16);
        if o == pg_sys::InvalidOid {
            pg_sys::InvalidOid
        } else {
            pg_sys::get_opcode(o)
        }
    };
    let (first_fn, second_fn) = match strategy {
        BT_LT | BT_LE | BT_GE | BT_GT => (pg_sys::get_opcode(opno), pg_sys::InvalidOid),
        BT_EQ => (member_fn(BT_LE), member_fn(BT_GE)),
        _ => return None,
    };
    if first_fn == pg_sys::InvalidOid || (strategy == BT_EQ && second_fn == pg_sys::InvalidOid) {
        return None;
    }
    // The functions see min/max of rows the query may not be allowed to see
    // (row-level security runs on rows): only leakproof ones.
    if !pg_sys::get_func_leakproof(first_fn) || (second_fn != pg_sys::InvalidOid && !pg_sys::get_func_leakproof(second_fn)) {
        return None;
    }
    Some((MinMaxQual { attno, strategy, first_fn, second_fn, collation: (*op).inputcollid }, value))
}

/// A min/max qual at execution: the value side's expression and its value
/// at the current (re)scan.
pub struct Prepared {
    pub qual: MinMaxQual,
    pub state: *mut pg_sys::ExprState,
    /// None: not evaluated yet, or NULL (then the qual skips nothing).
    pub value: Option<pg_sys::Datum>,
}

impl Prepared {
    /// Evaluates the value side (at the start of a scan and of every
    /// rescan: executor parameters may have changed).
    pub unsafe fn evaluate(&mut self, econtext: *mut pg_sys::ExprContext) {
        let mut isnull = false;
        let v = pg_sys::ExecEvalExpr(self.state, econtext, &mut isnull);
        self.value = (!isnull).then_some(v);
    }
}

/// Whether some row of `part` may satisfy every qual (false: skip the part).
pub unsafe fn part_may_match(quals: &[Prepared], desc: pg_sys::TupleDesc, part: &ColumnPart) -> bool {
    let atts = (*desc).attrs.as_slice((*desc).natts as usize);
    for p in quals {
        let Some(value) = p.value else { continue };
        let c = p.qual.attno as usize - 1;
        let Some(m) = part.column_meta(c) else { continue };
        if m.null_count as usize == part.nrows() {
            return false;
        }
        let Some((min, max)) = m.minmax.as_ref().map(|mm| mm.pair()) else { continue };
        let datum = |b: &[u8]| super::super::tuple::bytes_datum(&atts[c], b);
        let holds = |f: pg_sys::Oid, bound: pg_sys::Datum| pg_sys::OidFunctionCall2Coll(f, p.qual.collation, bound, value).value() != 0;
        let ok = match p.qual.strategy {
            BT_LT | BT_LE => holds(p.qual.first_fn, datum(min)),
            BT_GT | BT_GE => holds(p.qual.first_fn, datum(max)),
            _ => holds(p.qual.first_fn, datum(min)) && holds(p.qual.second_fn, datum(max)),
        };
        if !ok {
            return false;
        }
    }
    true
}
