//! The planner side of the column scan: a `set_rel_pathlist_hook` that
//! offers a `CustomPath` for a hasis table, its cost, and the
//! `CustomScan` plan made from it.
//!
//! The plan's `custom_private` is a list of two integer lists: the
//! attribute numbers the scan must produce (target list and quals; every
//! column for a whole-row reference), and the min/max quals
//! (`minmax::ENCODED_INTS` integers each). `custom_exprs` holds the value
//! side of each min/max qual, so set_plan_references fixes up its params.

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::minmax::{self, MinMaxQual};

static mut PREV_HOOK: pg_sys::set_rel_pathlist_hook_type = None;

pub static mut PATH_METHODS: pg_sys::CustomPathMethods = pg_sys::CustomPathMethods {
    CustomName: c"HasisColumnScan".as_ptr(),
    PlanCustomPath: Some(plan_path),
    ReparameterizeCustomPathByChild: None,
};

pub unsafe fn install() {
    PREV_HOOK = pg_sys::set_rel_pathlist_hook;
    pg_sys::set_rel_pathlist_hook = Some(set_rel_pathlist);
}

/// `pull_varattnos` offsets attribute numbers by this (access/sysattr.h).
const FIRST_LOW_INVALID: i32 = -7;
/// System columns a virtual tuple carries (slot_getsysattr answers them
/// from the slot): ctid and tableoid.
const CTID: i32 = -1;
const TABLEOID: i32 = -6;

/// The columns a scan must produce, from the Vars of `rti` in `nodes`:
/// None when it needs a system column a virtual tuple cannot carry
/// (xmin, xmax, cmin, cmax), else attribute numbers (all of them for a
/// whole-row reference).
unsafe fn needed_columns(nodes: &[*mut pg_sys::Node], rti: u32, natts: i32) -> Option<Vec<i16>> {
    let mut set: *mut pg_sys::Bitmapset = std::ptr::null_mut();
    for &n in nodes {
        pg_sys::pull_varattnos(n, rti, &mut set);
    }
    let mut cols = Vec::new();
    let mut x = -1;
    loop {
        x = pg_sys::bms_next_member(set, x);
        if x < 0 {
            break;
        }
        let attno = x + FIRST_LOW_INVALID;
        match attno {
            0 => return Some((1..=natts as i16).collect()),
            CTID | TABLEOID => {}
            a if a < 0 => return None,
            a => cols.push(a as i16),
        }
    }
    Some(cols)
}

/// The restriction clauses of a RestrictInfo list, pseudoconstants aside.
unsafe fn clauses_of(rinfos: *mut pg_sys::List) -> Vec<*mut pg_sys::Node> {
    super::list_nodes(rinfos)
        .into_iter()
        .filter_map(|n| {
            let ri = n as *mut pg_sys::RestrictInfo;
            (!(*ri).pseudoconstant).then(|| (*ri).clause as *mut pg_sys::Node)
        })
        .collect()
}

/// Whether `rti` is locked by a row mark (FOR UPDATE/SHARE, or the copy
/// marks of an UPDATE's other relations).
unsafe fn has_row_mark(root: *mut pg_sys::PlannerInfo, rti: u32) -> bool {
    super::list_nodes((*root).rowMarks).into_iter().any(|n| (*(n as *mut pg_sys::PlanRowMark)).rti == rti)
}

/// Bytes per row of the columns `cols`, from ANALYZE's widths (the type's
/// typical width without statistics).
unsafe fn width_of(relid: pg_sys::Oid, desc: pg_sys::TupleDesc, cols: impl Iterator<Item = i16>) -> f64 {
    let atts = (*desc).attrs.as_slice((*desc).natts as usize);
    cols.map(|a| {
        let att = &atts[a as usize - 1];
        if att.attisdropped {
            return 0.0;
        }
        let w = pg_sys::get_attavgwidth(relid, a);
        (if w > 0 { w } else { pg_sys::get_typavgwidth(att.atttypid, att.atttypmod) }) as f64
    })
    .sum()
}

/// Row header bytes per row in a column part (core/src/hasis/README.md).
const ROW_HEADER_BYTES: f64 = 26.0;
/// Share of a hasis relation's blocks a column scan reads whatever its
/// columns (the extent's header block, the meta mini-page, delta blocks in
/// use): a rough floor so a one-column scan is not costed near zero.
const FIXED_SHARE: f64 = 0.10;

#[pg_guard]
unsafe extern "C-unwind" fn set_rel_pathlist(root: *mut pg_sys::PlannerInfo, rel: *mut pg_sys::RelOptInfo, rti: pg_sys::Index, rte: *mut pg_sys::RangeTblEntry) {
    if let Some(prev) = PREV_HOOK {
        prev(root, rel, rti, rte);
    }
    // TABLESAMPLE scans keep their sample scan: this path would read every row.
    if !(super::ENABLE.get() || super::cost::ENABLE.get()) || (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION || (*rte).inh || !(*rte).tablesample.is_null() {
        return;
    }
    if !matches!((*rel).reloptkind, pg_sys::RelOptKind::RELOPT_BASEREL | pg_sys::RelOptKind::RELOPT_OTHER_MEMBER_REL) {
        return;
    }
    let relation = pg_sys::RelationIdGetRelation((*rte).relid);
    if relation.is_null() {
        return;
    }
    let desc = (*relation).rd_att;
    let natts = (*desc).natts;
    let consider = super::of(relation).is_some()
        && !pg_sys::bms_is_member(rti as i32, (*root).all_result_relids)
        && (*(*root).parse).resultRelation as u32 != rti
        && !has_row_mark(root, rti);
    if !consider {
        pg_sys::RelationClose(relation);
        return;
    }
    let mut nodes = super::list_nodes((*(*rel).reltarget).exprs);
    let quals = clauses_of((*rel).baserestrictinfo);
    nodes.extend(quals.iter().copied());
    let Some(cols) = needed_columns(&nodes, rti, natts) else {
        pg_sys::RelationClose(relation);
        return;
    };
    // Fetches touch a block per column read (cost.rs): index and bitmap
    // paths are recosted before the column scan joins them.
    if super::cost::ENABLE.get() {
        let read = if super::fetch::ENABLE.get() { cols.len() } else { natts as usize };
        super::cost::recost_fetches(root, rel, (*rte).relid, (*rte).inh, super::cost::fetch_factor(read.max(1), (*rel).allvisfrac));
    }
    if !super::ENABLE.get() {
        pg_sys::RelationClose(relation);
        return;
    }
    let has_minmax = quals.iter().any(|&q| minmax::from_clause(q, rti, desc).is_some());
    let all: Vec<i16> = (1..=natts as i16).collect();
    let width_all = width_of((*rte).relid, desc, all.iter().copied()) + ROW_HEADER_BYTES;
    let width_needed = width_of((*rte).relid, desc, cols.iter().copied()) + ROW_HEADER_BYTES;
    pg_sys::RelationClose(relation);
    let byte_share = (width_needed / width_all.max(1.0)).min(1.0);
    // Offered only when it reads less than the sequential scan; with every
    // column and no min/max qual it would only tie.
    if byte_share > 0.9 && !has_minmax {
        return;
    }
    let block_share = FIXED_SHARE + (1.0 - FIXED_SHARE) * byte_share;

    pg_sys::add_path(rel, make_path(root, rel, block_share, 0) as *mut pg_sys::Path);
    // A partial path for parallel plans, when the relation may be scanned in
    // parallel: workers take extents from PostgreSQL's block allocator.
    if (*rel).consider_parallel {
        let workers = pg_sys::compute_parallel_worker(rel, (*rel).pages as f64, -1.0, pg_sys::max_parallel_workers_per_gather);
        if workers > 0 {
            pg_sys::add_partial_path(rel, make_path(root, rel, block_share, workers) as *mut pg_sys::Path);
        }
    }
}

/// What cost_seqscan's get_parallel_divisor makes of `workers`.
fn parallel_divisor(workers: i32) -> f64 {
    let mut d = workers as f64;
    if unsafe { pg_sys::parallel_leader_participation } {
        let leader = 1.0 - 0.3 * workers as f64;
        if leader > 0.0 {
            d += leader;
        }
    }
    d
}

/// A column scan path reading `block_share` of the relation's blocks;
/// parallel-aware with `workers` > 0 (then its rows and CPU are per
/// process, as cost_seqscan's partial paths).
unsafe fn make_path(root: *mut pg_sys::PlannerInfo, rel: *mut pg_sys::RelOptInfo, block_share: f64, workers: i32) -> *mut pg_sys::CustomPath {
    let path = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomPath>()) as *mut pg_sys::CustomPath;
    (*path).path.type_ = pg_sys::NodeTag::T_CustomPath;
    (*path).path.pathtype = pg_sys::NodeTag::T_CustomScan;
    (*path).path.parent = rel;
    (*path).path.pathtarget = (*rel).reltarget;
    (*path).path.param_info = std::ptr::null_mut();
    (*path).path.parallel_aware = workers > 0;
    (*path).path.parallel_safe = (*rel).consider_parallel;
    (*path).path.parallel_workers = workers;
    (*path).path.pathkeys = std::ptr::null_mut();
    (*path).flags = 0;
    (*path).custom_paths = std::ptr::null_mut();
    (*path).custom_private = std::ptr::null_mut();
    (*path).methods = &raw const PATH_METHODS;
    // cost_seqscan's formula, with the blocks a column scan reads.
    let mut qual_cost: pg_sys::QualCost = std::mem::zeroed();
    pg_sys::cost_qual_eval(&mut qual_cost, (*rel).baserestrictinfo, root);
    let target = &(*(*rel).reltarget).cost;
    let disk = pg_sys::seq_page_cost * (*rel).pages as f64 * block_share;
    let cpu_per_tuple = pg_sys::cpu_tuple_cost + qual_cost.per_tuple;
    let mut cpu = cpu_per_tuple * (*rel).tuples;
    let mut rows = (*rel).rows;
    if workers > 0 {
        // The CPU is shared among the processes; the reads are not.
        let d = parallel_divisor(workers);
        cpu /= d;
        rows = pg_sys::clamp_row_est(rows / d);
    }
    (*path).path.rows = rows;
    (*path).path.startup_cost = qual_cost.startup + target.startup;
    // It is a sequential scan: enable_seqscan = off discourages it too.
    if !pg_sys::enable_seqscan {
        (*path).path.startup_cost += pg_sys::disable_cost;
    }
    (*path).path.total_cost = (*path).path.startup_cost + disk + cpu + target.per_tuple * rows;
    path
}

#[pg_guard]
unsafe extern "C-unwind" fn plan_path(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    best_path: *mut pg_sys::CustomPath,
    tlist: *mut pg_sys::List,
    clauses: *mut pg_sys::List,
    _custom_plans: *mut pg_sys::List,
) -> *mut pg_sys::Plan {
    let rti = (*rel).relid;
    let quals = clauses_of(clauses);
    let relid = (**(*root).simple_rte_array.add(rti as usize)).relid;
    let relation = pg_sys::RelationIdGetRelation(relid);
    let desc = (*relation).rd_att;
    let mut nodes = super::list_nodes(tlist);
    nodes.extend(quals.iter().copied());
    let cols = needed_columns(&nodes, rti, (*desc).natts).unwrap_or_else(|| (1..=(*desc).natts as i16).collect());
    let mut minmax_ints = Vec::new();
    let mut exprs: *mut pg_sys::List = std::ptr::null_mut();
    for &q in &quals {
        if let Some((mq, value)) = minmax::from_clause(q, rti, desc) {
            mq.encode(&mut minmax_ints);
            exprs = pg_sys::lappend(exprs, pg_sys::copyObjectImpl(value as *const _));
        }
    }
    pg_sys::RelationClose(relation);
    let mut col_list: *mut pg_sys::List = std::ptr::null_mut();
    for c in cols {
        col_list = pg_sys::lappend_int(col_list, c as i32);
    }
    let mut mm_list: *mut pg_sys::List = std::ptr::null_mut();
    for i in minmax_ints {
        mm_list = pg_sys::lappend_int(mm_list, i);
    }
    let cscan = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomScan>()) as *mut pg_sys::CustomScan;
    (*cscan).scan.plan.type_ = pg_sys::NodeTag::T_CustomScan;
    (*cscan).scan.plan.targetlist = tlist;
    (*cscan).scan.plan.qual = pg_sys::extract_actual_clauses(clauses, false);
    (*cscan).scan.scanrelid = rti;
    (*cscan).flags = (*best_path).flags;
    (*cscan).custom_plans = std::ptr::null_mut();
    (*cscan).custom_exprs = exprs;
    (*cscan).custom_private = pg_sys::lappend(pg_sys::lappend(std::ptr::null_mut(), col_list as *mut _), mm_list as *mut _);
    (*cscan).custom_scan_tlist = std::ptr::null_mut();
    (*cscan).methods = &raw const super::exec::SCAN_METHODS;
    cscan as *mut pg_sys::Plan
}

/// The plan's columns and min/max quals (`custom_private`).
pub unsafe fn decode_private(cscan: *const pg_sys::CustomScan) -> (Vec<i16>, Vec<MinMaxQual>) {
    let private = (*cscan).custom_private;
    let ints = |l: *mut pg_sys::List| -> Vec<i32> { (0..pg_sys::list_length(l)).map(|i| pg_sys::list_nth_int(l, i)).collect() };
    let cols = ints(pg_sys::list_nth(private, 0) as *mut pg_sys::List).into_iter().map(|c| c as i16).collect();
    let mm = ints(pg_sys::list_nth(private, 1) as *mut pg_sys::List);
    (cols, mm.chunks_exact(minmax::ENCODED_INTS).map(MinMaxQual::decode).collect())
}
