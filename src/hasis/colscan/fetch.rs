//! Column-aware fetches: index scans and bitmap heap scans of a hasis table
//! read only the columns their plan uses.
//!
//! An index fetch of a row in a column part reads one mini-page per column
//! (a block each in a wide table) where heap reads one block. The table AM
//! API gives a fetch no column list, so an `ExecutorStart` hook hands one
//! over: after PostgreSQL has built the plan's state, it walks the plan
//! from the top, working out for each node which of its output columns
//! the nodes above use, and for each `IndexScan` and `BitmapHeapScan` of
//! a hasis table the table columns that node reads: the target entries
//! used above it (a scan below a join usually returns every column, a
//! "physical target list", and the join uses a few), its quals, and the
//! original index quals and ORDER BY expressions it rechecks. The scan's
//! descriptor (created here for an index scan, as `IndexNext` would create
//! it on its first call) then fetches those columns; the others read as
//! NULL, which nothing in the plan looks at; a NOT NULL column instead
//! gets a stand-in value of its length (`tuple::store_columns`), because
//! JIT-compiled tuple deforming assumes NOT NULL columns are present.
//! When the plan reads no MVCC system column of the scan's table (xmin,
//! xmax, cmin, cmax), a fetch of a row in an all-visible column part
//! under an MVCC snapshot skips its row header too (`scan::hot_search`,
//! and `scan::bitmap_next_block` for the exact pages of a bitmap): one
//! block less per row.
//!
//! Conservative by construction: a node type whose expressions are not
//! known here passes "every column" to its children; a whole-row
//! reference means every column; statements other than plain SELECTs
//! (no row marks, no data-modifying WITH) are left alone, so EvalPlanQual,
//! triggers and RETURNING never meet a partial row. Parallel-aware scans
//! are left alone (their descriptors are made later, in the DSM).
//! `pg_hybrid.enable_hasis_column_fetch = off` turns it off.

use std::collections::BTreeSet;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

pub static ENABLE: GucSetting<bool> = GucSetting::<bool>::new(true);

static mut PREV_EXECUTOR_START: pg_sys::ExecutorStart_hook_type = None;

pub unsafe fn init() {
    GucRegistry::define_bool_guc(
        c"pg_hybrid.enable_hasis_column_fetch",
        c"Lets index and bitmap heap scans of hasis tables read only the columns the plan uses.",
        c"",
        &ENABLE,
        GucContext::Userset,
        GucFlags::default(),
    );
    PREV_EXECUTOR_START = pg_sys::ExecutorStart_hook;
    pg_sys::ExecutorStart_hook = Some(executor_start);
}

/// Executor Var numbers of a join's or upper node's children (nodes/primnodes.h).
const INNER_VAR: i32 = -1;
const OUTER_VAR: i32 = -2;
/// `pull_varattnos` offsets attribute numbers by this (access/sysattr.h).
const FIRST_LOW_INVALID: i32 = -7;

/// Output columns (target entry numbers) of a plan node that the nodes
/// above it use; `None`: every one (unknown, or really all).
type Used = Option<BTreeSet<i32>>;

#[pg_guard]
unsafe extern "C-unwind" fn executor_start(qd: *mut pg_sys::QueryDesc, eflags: i32) {
    match PREV_EXECUTOR_START {
        Some(prev) => prev(qd, eflags),
        None => pg_sys::standard_ExecutorStart(qd, eflags),
    }
    if !ENABLE.get() || eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 != 0 {
        return;
    }
    let stmt = (*qd).plannedstmt;
    if (*stmt).commandType != pg_sys::CmdType::CMD_SELECT || !(*stmt).rowMarks.is_null() || (*stmt).hasModifyingCTE {
        return;
    }
    let estate = (*qd).estate;
    // Every SELECT comes here: leave at once unless a scan node opened a
    // hasis table (es_relations holds the tables the plan's nodes opened).
    let rels = (*estate).es_relations;
    let opened = |i: usize| *rels.add(i);
    if rels.is_null() || !(0..(*estate).es_range_table_size as usize).any(|i| !opened(i).is_null() && super::of(opened(i)).is_some()) {
        return;
    }
    let old = pg_sys::MemoryContextSwitchTo((*estate).es_query_cxt);
    walk((*qd).planstate, None, estate);
    // InitPlans and SubPlans: every output column is used (their parents'
    // expressions are not walked back to them here).
    for sub in list_nodes((*estate).es_subplanstates) {
        walk(sub as *mut pg_sys::PlanState, None, estate);
    }
    pg_sys::MemoryContextSwitchTo(old);
}

use super::{list_nodes, FetchColumns};

/// The expressions of `plan`'s target entries that `used` names.
unsafe fn used_targets(plan: *mut pg_sys::Plan, used: &Used) -> Vec<*mut pg_sys::Node> {
    list_nodes((*plan).targetlist)
        .into_iter()
        .filter_map(|n| {
            let te = n as *mut pg_sys::TargetEntry;
            let wanted = used.as_ref().is_none_or(|u| u.contains(&((*te).resno as i32)));
            wanted.then(|| (*te).expr as *mut pg_sys::Node)
        })
        .collect()
}

/// Adds the Vars of `varno` in `nodes` to `set`, as `pull_varattnos`
/// numbers them (attribute number - FirstLowInvalidHeapAttributeNumber).
unsafe fn pull_attnos(nodes: &[*mut pg_sys::Node], varno: i32, set: &mut *mut pg_sys::Bitmapset) {
    for &n in nodes {
        // pull_varattnos compares as an unsigned Index, as Var.varno is
        // compared with it in C: the negative executor varnos match.
        pg_sys::pull_varattnos(n, varno as pg_sys::Index, set);
    }
}

/// The attribute numbers in a set `pull_attnos` made, read from its words
/// in place (a `bms_next_member` call through the FFI guard per member
/// cost more than the walk's other work).
unsafe fn attnos_in(set: *const pg_sys::Bitmapset) -> Vec<i32> {
    let mut out = Vec::new();
    if set.is_null() {
        return out;
    }
    let words = std::slice::from_raw_parts((*set).words.as_ptr(), (*set).nwords.max(0) as usize);
    for (w, &word) in words.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let b = bits.trailing_zeros() as i32;
            out.push(w as i32 * 64 + b + FIRST_LOW_INVALID);
            bits &= bits - 1;
        }
    }
    out
}

/// The user columns among `attnos` (system columns left out:
/// `reads_mvcc_columns` looks at those); `None` for a whole-row Var.
fn user_columns(attnos: &[i32]) -> Used {
    let mut out = BTreeSet::new();
    for &a in attnos {
        match a {
            0 => return None,
            a if a > 0 => {
                out.insert(a);
            }
            _ => {}
        }
    }
    Some(out)
}

/// Attribute numbers of the Vars of `varno` in `nodes` (system columns
/// left out); `None` for a whole-row Var.
unsafe fn attnos(nodes: &[*mut pg_sys::Node], varno: i32) -> Used {
    let mut set: *mut pg_sys::Bitmapset = std::ptr::null_mut();
    pull_attnos(nodes, varno, &mut set);
    user_columns(&attnos_in(set))
}

/// Adds column numbers of the child (`AttrNumber` arrays: sort, group,
/// unique keys) to what it must return.
unsafe fn with_columns(used: Used, cols: *const pg_sys::AttrNumber, n: i32) -> Used {
    let mut used = used?;
    for i in 0..n.max(0) as usize {
        used.insert(*cols.add(i) as i32);
    }
    Some(used)
}

/// What `plan`'s outer (left) and inner (right) children must return,
/// given what the nodes above use of `plan`'s output. Node types not
/// listed: everything.
unsafe fn children_used(plan: *mut pg_sys::Plan, used: &Used) -> (Used, Used) {
    use pg_sys::NodeTag::*;
    let tag = (*plan).type_;
    let listed = matches!(tag, T_NestLoop | T_HashJoin | T_MergeJoin | T_Hash | T_Memoize | T_Material | T_Result | T_Sort | T_IncrementalSort | T_Unique | T_Limit | T_Agg);
    if !listed || ((*plan).lefttree.is_null() && (*plan).righttree.is_null()) {
        return (None, None);
    }
    let mut exprs = used_targets(plan, used);
    exprs.extend(list_nodes((*plan).qual));
    let mut cols: Option<(*const pg_sys::AttrNumber, i32)> = None;
    match tag {
        T_NestLoop => {
            let nl = plan as *mut pg_sys::NestLoop;
            exprs.extend(list_nodes((*nl).join.joinqual));
            for p in list_nodes((*nl).nestParams) {
                exprs.push((*(p as *mut pg_sys::NestLoopParam)).paramval as *mut pg_sys::Node);
            }
        }
        T_HashJoin => {
            let hj = plan as *mut pg_sys::HashJoin;
            exprs.extend(list_nodes((*hj).join.joinqual));
            exprs.extend(list_nodes((*hj).hashclauses));
            exprs.extend(list_nodes((*hj).hashkeys));
        }
        T_MergeJoin => {
            let mj = plan as *mut pg_sys::MergeJoin;
            exprs.extend(list_nodes((*mj).join.joinqual));
            exprs.extend(list_nodes((*mj).mergeclauses));
        }
        T_Hash => exprs.extend(list_nodes((*(plan as *mut pg_sys::Hash)).hashkeys)),
        T_Memoize => exprs.extend(list_nodes((*(plan as *mut pg_sys::Memoize)).param_exprs)),
        T_Material | T_Result => {}
        T_Sort | T_IncrementalSort => {
            let s = plan as *mut pg_sys::Sort;
            cols = Some(((*s).sortColIdx, (*s).numCols));
        }
        T_Unique => {
            let u = plan as *mut pg_sys::Unique;
            cols = Some(((*u).uniqColIdx, (*u).numCols));
        }
        T_Limit => {
            let l = plan as *mut pg_sys::Limit;
            cols = Some(((*l).uniqColIdx, (*l).uniqNumCols));
        }
        T_Agg => {
            let a = plan as *mut pg_sys::Agg;
            if !(*a).groupingSets.is_null() || !(*a).chain.is_null() {
                return (None, None);
            }
            cols = Some(((*a).grpColIdx, (*a).numCols));
        }
        _ => return (None, None),
    }
    let mut outer = attnos(&exprs, OUTER_VAR);
    if let Some((c, n)) = cols {
        outer = with_columns(outer, c, n);
    }
    (outer, attnos(&exprs, INNER_VAR))
}

unsafe fn walk(ps: *mut pg_sys::PlanState, used: Used, estate: *mut pg_sys::EState) {
    if ps.is_null() {
        return;
    }
    let plan = (*ps).plan;
    match (*plan).type_ {
        pg_sys::NodeTag::T_IndexScan => index_scan(ps as *mut pg_sys::IndexScanState, &used, estate),
        pg_sys::NodeTag::T_IndexOnlyScan => index_only_scan(ps as *mut pg_sys::IndexOnlyScanState, estate),
        pg_sys::NodeTag::T_BitmapHeapScan => bitmap_heap_scan(ps as *mut pg_sys::BitmapHeapScanState, &used),
        _ => {}
    }
    let (outer, inner) = children_used(plan, &used);
    walk((*ps).lefttree, outer, estate);
    walk((*ps).righttree, inner, estate);
    // Children that are not lefttree/righttree: every column.
    match (*plan).type_ {
        pg_sys::NodeTag::T_Append => {
            let a = ps as *mut pg_sys::AppendState;
            for i in 0..(*a).as_nplans.max(0) as usize {
                walk(*(*a).appendplans.add(i), None, estate);
            }
        }
        pg_sys::NodeTag::T_MergeAppend => {
            let m = ps as *mut pg_sys::MergeAppendState;
            for i in 0..(*m).ms_nplans.max(0) as usize {
                walk(*(*m).mergeplans.add(i), None, estate);
            }
        }
        pg_sys::NodeTag::T_SubqueryScan => walk((*(ps as *mut pg_sys::SubqueryScanState)).subplan, None, estate),
        pg_sys::NodeTag::T_CustomScan => {
            for n in list_nodes((*(ps as *mut pg_sys::CustomScanState)).custom_ps) {
                walk(n as *mut pg_sys::PlanState, None, estate);
            }
        }
        _ => {}
    }
}

/// The column store of a scan node's table and the table columns the
/// node reads: Vars of its range table entry in the target entries used
/// above it, in its quals, and in `rechecks`. None for a table without a
/// column store.
unsafe fn scan_columns(ps: *mut pg_sys::ScanState, used: &Used, rechecks: &[*mut pg_sys::List]) -> Option<(&'static dyn super::ColumnStore, FetchColumns)> {
    let rel = (*ps).ss_currentRelation;
    let store = if rel.is_null() { None } else { super::of(rel) }?;
    let plan = (*ps).ps.plan;
    let scanrelid = (*(plan as *mut pg_sys::Scan)).scanrelid as i32;
    let natts = (*(*rel).rd_att).natts as usize;
    // The table's columns named in `attnos`: None for a whole-row Var or
    // when that is every column.
    let columns = |attnos: &[i32]| {
        let mut wanted = vec![false; natts];
        for &a in attnos {
            match a {
                0 => return None,
                a if a > 0 && a as usize <= natts => wanted[a as usize - 1] = true,
                _ => {}
            }
        }
        Some(wanted).filter(|w| !w.iter().all(|&x| x))
    };
    // One pass over the expressions: the targets and quals first, then
    // the rechecks added to the same set.
    let mut set: *mut pg_sys::Bitmapset = std::ptr::null_mut();
    let mut exprs = used_targets(plan, used);
    exprs.extend(list_nodes((*plan).qual));
    pull_attnos(&exprs, scanrelid, &mut set);
    let wanted = columns(&attnos_in(set));
    let rechecks: Vec<*mut pg_sys::Node> = rechecks.iter().flat_map(|&l| list_nodes(l)).collect();
    pull_attnos(&rechecks, scanrelid, &mut set);
    let all = attnos_in(set);
    let wanted_recheck = columns(&all);
    let mvcc_needed = reads_mvcc_columns(&all);
    Some((store, FetchColumns { wanted, wanted_recheck, mvcc_needed }))
}

/// Whether `attnos` name xmin, xmax, cmin or cmax (ctid and tableoid come
/// from the TID and the relation).
fn reads_mvcc_columns(attnos: &[i32]) -> bool {
    [
        pg_sys::MinTransactionIdAttributeNumber,
        pg_sys::MinCommandIdAttributeNumber,
        pg_sys::MaxTransactionIdAttributeNumber,
        pg_sys::MaxCommandIdAttributeNumber,
    ]
    .iter()
    .any(|&a| attnos.contains(&(a as i32)))
}

unsafe fn index_scan(node: *mut pg_sys::IndexScanState, used: &Used, estate: *mut pg_sys::EState) {
    let plan = (*node).ss.ps.plan;
    if (*plan).parallel_aware || !(*node).iss_ScanDesc.is_null() || (*node).iss_RelationDesc.is_null() {
        return;
    }
    let is = plan as *mut pg_sys::IndexScan;
    let Some((store, cols)) = scan_columns(&mut (*node).ss, used, &[(*is).indexqualorig, (*is).indexorderbyorig]) else { return };
    if cols.wanted.is_none() && cols.mvcc_needed {
        return;
    }
    // What IndexNext does on its first call (nodeIndexscan.c); with
    // run-time keys still to compute, the first call's rescan passes them.
    let scan = pg_sys::index_beginscan((*node).ss.ss_currentRelation, (*node).iss_RelationDesc, (*estate).es_snapshot, (*node).iss_NumScanKeys, (*node).iss_NumOrderByKeys);
    (*node).iss_ScanDesc = scan;
    if (*node).iss_NumRuntimeKeys == 0 || (*node).iss_RuntimeKeysReady {
        pg_sys::index_rescan(scan, (*node).iss_ScanKeys, (*node).iss_NumScanKeys, (*node).iss_OrderByKeys, (*node).iss_NumOrderByKeys);
    }
    store.narrow_index_fetch((*scan).xs_heapfetch, scan, cols);
}

/// An index-only scan fetches from the table only to check visibility
/// (where the visibility map's bit is clear) and returns the index's
/// values: it reads no column, and no row header in an all-visible part.
unsafe fn index_only_scan(node: *mut pg_sys::IndexOnlyScanState, estate: *mut pg_sys::EState) {
    let plan = (*node).ss.ps.plan;
    let rel = (*node).ss.ss_currentRelation;
    if (*plan).parallel_aware || !(*node).ioss_ScanDesc.is_null() || (*node).ioss_RelationDesc.is_null() || rel.is_null() {
        return;
    }
    let Some(store) = super::of(rel) else { return };
    // What IndexOnlyNext does on its first call (nodeIndexonlyscan.c).
    let scan = pg_sys::index_beginscan(rel, (*node).ioss_RelationDesc, (*estate).es_snapshot, (*node).ioss_NumScanKeys, (*node).ioss_NumOrderByKeys);
    (*node).ioss_ScanDesc = scan;
    (*scan).xs_want_itup = true;
    (*node).ioss_VMBuffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    if (*node).ioss_NumRuntimeKeys == 0 || (*node).ioss_RuntimeKeysReady {
        pg_sys::index_rescan(scan, (*node).ioss_ScanKeys, (*node).ioss_NumScanKeys, (*node).ioss_OrderByKeys, (*node).ioss_NumOrderByKeys);
    }
    let natts = (*(*rel).rd_att).natts as usize;
    let cols = super::FetchColumns { wanted: Some(vec![false; natts]), wanted_recheck: None, mvcc_needed: false };
    store.narrow_index_fetch((*scan).xs_heapfetch, std::ptr::null_mut(), cols);
}

unsafe fn bitmap_heap_scan(node: *mut pg_sys::BitmapHeapScanState, used: &Used) {
    let plan = (*node).ss.ps.plan;
    let desc = (*node).ss.ss_currentScanDesc;
    if (*plan).parallel_aware || desc.is_null() {
        return;
    }
    let bh = plan as *mut pg_sys::BitmapHeapScan;
    let Some((store, cols)) = scan_columns(&mut (*node).ss, used, &[(*bh).bitmapqualorig]) else { return };
    store.narrow_bitmap_scan(desc, cols);
}
