//! Reloptions of hasis tables: the hybrid-page parameters.
//!
//! PostgreSQL 15's table AM API has no `amoptions`: CREATE TABLE and ALTER
//! TABLE ... SET validate every table's reloptions as heap's, and heap's
//! parser rejects names it does not know (even ones registered for its
//! kind, which its parse table lacks). So the `hasis_*` options take a
//! detour through a ProcessUtility hook: CREATE TABLE [AS], CREATE
//! MATERIALIZED VIEW and ALTER TABLE / MATERIALIZED VIEW ... SET / RESET
//! have their `hasis_*` entries taken out before PostgreSQL sees the
//! statement, checked here (names, ranges, and that the parameters make a
//! valid hybrid page), and written into `pg_class.reloptions` afterwards,
//! where `\d+` and pg_dump find them like any reloption (pg_dump's
//! `WITH (...)` comes back through the same hook on restore). For ALTER
//! TABLE ... SET of other options, the stored `hasis_*` entries are taken
//! out of the catalog around PostgreSQL's own validation and put back.
//!
//! The parameters are read when a storage file gets its metapage (the
//! first insert after CREATE TABLE, TRUNCATE, VACUUM FULL, CLUSTER or a
//! rewriting ALTER TABLE): changing them on a table with rows takes effect
//! at its next rewrite, e.g. VACUUM FULL.

use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use pgrx::prelude::*;

use pg_hybrid_core::hasis::layout::{Geometry, Params, MAX_RECORD_BLOCKS};

/// One `hasis_*` option.
struct OptionSpec {
    name: &'static str,
    min: u16,
    max: u16,
    set: fn(&mut Params, u16),
}

const SPECS: [OptionSpec; 4] = [
    OptionSpec { name: "hasis_column_blocks", min: 1, max: MAX_RECORD_BLOCKS as u16 - 2, set: |p, v| p.column_blocks = v },
    OptionSpec { name: "hasis_delta_blocks", min: 1, max: MAX_RECORD_BLOCKS as u16 - 2, set: |p, v| p.delta_blocks = v },
    OptionSpec { name: "hasis_compact_trigger", min: 1, max: MAX_RECORD_BLOCKS as u16 - 2, set: |p, v| p.compact_trigger = v },
    OptionSpec { name: "hasis_max_slots", min: 1, max: u16::MAX - 1, set: |p, v| p.max_slots = v },
];

/// The `hasis_*` options a table has: a value per `SPECS` entry, None
/// where the default applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Settings([Option<u16>; 4]);

impl Settings {
    fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        for (spec, v) in SPECS.iter().zip(self.0) {
            if let Some(v) = v {
                (spec.set)(&mut p, v);
            }
        }
        p
    }
    /// `name=value` entries, as pg_class.reloptions holds them.
    fn entries(&self) -> Vec<String> {
        SPECS.iter().zip(self.0).filter_map(|(s, v)| v.map(|v| format!("{}={v}", s.name))).collect()
    }
}

/// A change one statement makes to the settings.
#[derive(Clone, Copy)]
enum Change {
    Set(usize, u16),
    Reset(usize),
}

impl Settings {
    fn apply(mut self, changes: &[Change]) -> Settings {
        for c in changes {
            match *c {
                Change::Set(i, v) => self.0[i] = Some(v),
                Change::Reset(i) => self.0[i] = None,
            }
        }
        self
    }
}

fn spec_index(name: &str) -> usize {
    SPECS.iter().position(|s| s.name == name).unwrap_or_else(|| {
        crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unrecognized parameter \"{name}\""),
            "hasis tables take hasis_column_blocks, hasis_delta_blocks, hasis_compact_trigger and hasis_max_slots.",
        )
    })
}

fn parse_value(i: usize, value: &str) -> u16 {
    let s = &SPECS[i];
    let v: i64 = value.trim().parse().unwrap_or_else(|_| {
        crate::raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("invalid value for integer option \"{}\": {value}", s.name), "Give a whole number.")
    });
    if v < s.min as i64 || v > s.max as i64 {
        crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("value {v} out of bounds for option \"{}\"", s.name),
            format!("Valid values are between \"{}\" and \"{}\".", s.min, s.max),
        );
    }
    v as u16
}

fn is_hasis_name(name: &str) -> bool {
    name.starts_with("hasis_")
}

/// Checks a parameter set and returns its geometry, or raises the ERROR a
/// user sees for an impossible combination.
fn checked_geometry(p: Params) -> Geometry {
    let g = Geometry::new(p).unwrap_or_else(|e| {
        crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid hasis reloptions: {e}"),
            "hasis_compact_trigger must not exceed hasis_delta_blocks, and hasis_max_slots 291 per block of the hybrid page (src/hasis/README.md, \"Reloptions\").",
        )
    });
    if !g.fits_one_wal_record() {
        crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid hasis reloptions: a hybrid page of {} blocks is larger than one compaction WAL record allows ({MAX_RECORD_BLOCKS})", g.extent_blocks()),
            "Lower hasis_column_blocks or hasis_delta_blocks (a hybrid page is 1 header + directory blocks + column blocks + delta blocks).",
        );
    }
    g
}

// ---------------------------------------------------------------- catalog

/// A relation's pg_class facts and reloptions split into the `hasis_*`
/// settings and the rest (kept verbatim).
struct ClassOptions {
    relam: pg_sys::Oid,
    relkind: u8,
    others: Vec<String>,
    hasis: Settings,
}

unsafe fn text_array_strings(d: pg_sys::Datum) -> Vec<String> {
    let mut elems: *mut pg_sys::Datum = std::ptr::null_mut();
    let mut n = 0;
    let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
    pg_sys::deconstruct_array(arr, pg_sys::TEXTOID, -1, false, pg_sys::TYPALIGN_INT as std::os::raw::c_char, &mut elems, std::ptr::null_mut(), &mut n);
    (0..n as usize)
        .map(|i| {
            let c = pg_sys::text_to_cstring((*elems.add(i)).cast_mut_ptr::<pg_sys::text>());
            let s = CStr::from_ptr(c).to_string_lossy().into_owned();
            pg_sys::pfree(c as *mut std::ffi::c_void);
            s
        })
        .collect()
}

/// Reads the relation's pg_class row with SnapshotSelf (it may have been
/// written by this very command). None: no such relation.
unsafe fn read_class(relid: pg_sys::Oid) -> Option<ClassOptions> {
    let class = pg_sys::table_open(pg_sys::RelationRelationId, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
    pg_sys::ScanKeyInit(&mut key, pg_sys::Anum_pg_class_oid as i16, pg_sys::BTEqualStrategyNumber as u16, pg_sys::F_OIDEQ.into(), pg_sys::Datum::from(relid));
    let scan = pg_sys::systable_beginscan(class, pg_sys::ClassOidIndexId.into(), true, &raw mut pg_sys::SnapshotSelfData, 1, &mut key);
    let tuple = pg_sys::systable_getnext(scan);
    let out = (!tuple.is_null()).then(|| {
        let form = pg_sys::GETSTRUCT(tuple) as *const pg_sys::FormData_pg_class;
        let mut isnull = false;
        let d = pg_sys::heap_getattr(tuple, pg_sys::Anum_pg_class_reloptions as i32, (*class).rd_att, &mut isnull);
        let mut others = Vec::new();
        let mut hasis = Settings::default();
        if !isnull {
            for e in text_array_strings(d) {
                let (name, value) = e.split_once('=').unwrap_or((&e, ""));
                match SPECS.iter().position(|s| s.name == name) {
                    // Stored values were checked when written; a hand-edited
                    // catalog still gets the range check.
                    Some(i) => hasis.0[i] = Some(parse_value(i, value)),
                    None => others.push(e),
                }
            }
        }
        ClassOptions { relam: (*form).relam, relkind: (*form).relkind as u8, others, hasis }
    });
    pg_sys::systable_endscan(scan);
    pg_sys::table_close(class, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    out
}

/// Replaces the relation's reloptions by `others` plus `hasis`, and makes
/// the change visible to the rest of the command.
unsafe fn write_class_options(relid: pg_sys::Oid, others: &[String], hasis: &Settings) {
    let all: Vec<String> = others.iter().cloned().chain(hasis.entries()).collect();
    let class = pg_sys::table_open(pg_sys::RelationRelationId, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    let tuple = pg_sys::SearchSysCacheCopy(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid), 0.into(), 0.into(), 0.into());
    if tuple.is_null() {
        pgrx::error!("cache lookup failed for relation {}", relid.to_u32());
    }
    let natts = pg_sys::Natts_pg_class as usize;
    let mut values = vec![pg_sys::Datum::from(0usize); natts];
    let mut nulls = vec![false; natts];
    let mut replace = vec![false; natts];
    let at = pg_sys::Anum_pg_class_reloptions as usize - 1;
    replace[at] = true;
    if all.is_empty() {
        nulls[at] = true;
    } else {
        let texts: Vec<pg_sys::Datum> = all
            .iter()
            .map(|s| {
                let c = CString::new(s.as_str()).expect("no NUL in a reloption");
                pg_sys::Datum::from(pg_sys::cstring_to_text(c.as_ptr()))
            })
            .collect();
        let arr = pg_sys::construct_array(texts.as_ptr() as *mut pg_sys::Datum, texts.len() as i32, pg_sys::TEXTOID, -1, false, pg_sys::TYPALIGN_INT as std::os::raw::c_char);
        values[at] = pg_sys::Datum::from(arr);
    }
    let newtuple = pg_sys::heap_modify_tuple(tuple, (*class).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr(), replace.as_mut_ptr());
    pg_sys::CatalogTupleUpdate(class, &mut (*newtuple).t_self, newtuple);
    pg_sys::table_close(class, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    pg_sys::CommandCounterIncrement();
}

unsafe fn is_hasis_am(amoid: pg_sys::Oid) -> bool {
    amoid != pg_sys::InvalidOid && amoid == pg_sys::get_am_oid(c"hasis".as_ptr(), true)
}

/// Writes a statement's settings into the catalog and checks they belong
/// to a hasis table and make a valid hybrid page.
unsafe fn store(relid: pg_sys::Oid, hasis: Settings) {
    let Some(c) = read_class(relid) else { return };
    write_class_options(relid, &c.others, &hasis);
    if hasis.is_empty() {
        return;
    }
    if !is_hasis_am(c.relam) {
        let name = SPECS.iter().zip(hasis.0).find(|(_, v)| v.is_some()).map_or("hasis_*", |(s, _)| s.name);
        crate::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("reloption \"{name}\" applies only to tables using the hasis access method"),
            "Add USING hasis (or set default_table_access_method = hasis), or RESET the hasis_* options before changing the access method.",
        );
    }
    checked_geometry(hasis.params());
}

// --------------------------------------------------------- new storage

/// Parameters of the statement running now, for storage files it creates
/// before its options reach the catalog (CREATE TABLE AS fills the table
/// inside the statement; a rewriting ALTER TABLE builds a transient one).
static mut PENDING: Option<Params> = None;

struct PendingGuard(Option<Params>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        unsafe { PENDING = self.0 };
    }
}

fn pending_for_statement(p: Option<Params>) -> PendingGuard {
    unsafe {
        let g = PendingGuard(PENDING);
        PENDING = p;
        g
    }
}

/// The geometry a new storage file of `rel` gets: its `hasis_*` options,
/// else those of the statement creating it, else the defaults.
pub unsafe fn geometry_for_new_file(rel: pg_sys::Relation) -> Geometry {
    let own = read_class((*rel).rd_id).map(|c| c.hasis).unwrap_or_default();
    let params = if !own.is_empty() { own.params() } else { PENDING.unwrap_or_default() };
    checked_geometry(params)
}

// ------------------------------------------------------------ the hook

static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook; called from _PG_init.
pub unsafe fn register() {
    PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
    pg_sys::ProcessUtility_hook = Some(process_utility);
}

unsafe fn list_cells(list: *mut pg_sys::List) -> Vec<*mut std::ffi::c_void> {
    if list.is_null() {
        return Vec::new();
    }
    (0..(*list).length as usize).map(|i| (*(*list).elements.add(i)).ptr_value).collect()
}

unsafe fn list_of(items: &[*mut std::ffi::c_void]) -> *mut pg_sys::List {
    items.iter().fold(std::ptr::null_mut(), |l, &p| pg_sys::lappend(l, p))
}

unsafe fn def_name(def: *mut pg_sys::DefElem) -> Option<String> {
    if !(*def).defnamespace.is_null() || (*def).defname.is_null() {
        return None;
    }
    Some(CStr::from_ptr((*def).defname).to_string_lossy().into_owned())
}

/// Whether a DefElem list names a hasis option.
unsafe fn names_hasis(list: *mut pg_sys::List) -> bool {
    list_cells(list).into_iter().any(|p| def_name(p as *mut pg_sys::DefElem).is_some_and(|n| is_hasis_name(&n)))
}

/// Takes the hasis options out of a DefElem list (`reset`: names only).
unsafe fn take_hasis(list: &mut *mut pg_sys::List, reset: bool) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut kept = Vec::new();
    for p in list_cells(*list) {
        let def = p as *mut pg_sys::DefElem;
        match def_name(def).filter(|n| is_hasis_name(n)) {
            Some(name) => {
                let i = spec_index(&name);
                if reset {
                    changes.push(Change::Reset(i));
                } else {
                    if (*def).arg.is_null() {
                        crate::raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("option \"{name}\" needs a value"), "Write hasis_delta_blocks = 8, for example.");
                    }
                    let value = CStr::from_ptr(pg_sys::defGetString(def)).to_string_lossy().into_owned();
                    changes.push(Change::Set(i, parse_value(i, &value)));
                }
            }
            None => kept.push(p),
        }
    }
    *list = list_of(&kept);
    changes
}

#[allow(clippy::too_many_arguments)]
unsafe fn call_next(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::os::raw::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    match PREV_PROCESS_UTILITY {
        Some(prev) => prev(pstmt, query, read_only_tree, context, params, env, dest, qc),
        None => pg_sys::standard_ProcessUtility(pstmt, query, read_only_tree, context, params, env, dest, qc),
    }
}

/// What the hook does with one statement.
enum Plan {
    /// Not ours: pass it on untouched.
    PassOn,
    /// CREATE TABLE / CREATE TABLE AS / CREATE MATERIALIZED VIEW with
    /// hasis options.
    Create,
    /// ALTER TABLE / MATERIALIZED VIEW with SET / RESET of reloptions on a
    /// table or matview.
    Alter(pg_sys::Oid),
}

unsafe fn plan(node: *mut pg_sys::Node) -> Plan {
    match (*node).type_ {
        pg_sys::NodeTag::T_CreateStmt if names_hasis((*(node as *mut pg_sys::CreateStmt)).options) => Plan::Create,
        pg_sys::NodeTag::T_CreateTableAsStmt => {
            let into = (*(node as *mut pg_sys::CreateTableAsStmt)).into;
            if !into.is_null() && names_hasis((*into).options) {
                Plan::Create
            } else {
                Plan::PassOn
            }
        }
        pg_sys::NodeTag::T_AlterTableStmt => {
            let stmt = node as *mut pg_sys::AlterTableStmt;
            let touches = list_cells((*stmt).cmds).into_iter().any(|p| {
                let cmd = p as *mut pg_sys::AlterTableCmd;
                matches!((*cmd).subtype, pg_sys::AlterTableType::AT_SetRelOptions | pg_sys::AlterTableType::AT_ResetRelOptions)
            });
            if !touches || !matches!((*stmt).objtype, pg_sys::ObjectType::OBJECT_TABLE | pg_sys::ObjectType::OBJECT_MATVIEW) {
                return Plan::PassOn;
            }
            let relid = pg_sys::RangeVarGetRelidExtended((*stmt).relation, pg_sys::NoLock as pg_sys::LOCKMODE, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
            if relid == pg_sys::InvalidOid {
                return Plan::PassOn;
            }
            match read_class(relid) {
                Some(c) if (c.relkind == pg_sys::RELKIND_RELATION || c.relkind == pg_sys::RELKIND_MATVIEW) && (!c.hasis.is_empty() || names_hasis_in_cmds(stmt)) => Plan::Alter(relid),
                _ => Plan::PassOn,
            }
        }
        _ => Plan::PassOn,
    }
}

unsafe fn names_hasis_in_cmds(stmt: *mut pg_sys::AlterTableStmt) -> bool {
    list_cells((*stmt).cmds).into_iter().any(|p| {
        let cmd = p as *mut pg_sys::AlterTableCmd;
        matches!((*cmd).subtype, pg_sys::AlterTableType::AT_SetRelOptions | pg_sys::AlterTableType::AT_ResetRelOptions) && names_hasis((*cmd).def as *mut pg_sys::List)
    })
}

#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::os::raw::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    let what = plan((*pstmt).utilityStmt);
    if matches!(what, Plan::PassOn) {
        return call_next(pstmt, query, read_only_tree, context, params, env, dest, qc);
    }
    // The statement is edited below: never the caller's copy.
    let pstmt = pg_sys::copyObjectImpl(pstmt as *const std::ffi::c_void) as *mut pg_sys::PlannedStmt;
    let node = (*pstmt).utilityStmt;
    match what {
        Plan::PassOn => unreachable!(),
        Plan::Create => {
            let (options, relation, if_not_exists) = if (*node).type_ == pg_sys::NodeTag::T_CreateStmt {
                let s = node as *mut pg_sys::CreateStmt;
                (&mut (*s).options, (*s).relation, (*s).if_not_exists)
            } else {
                let s = node as *mut pg_sys::CreateTableAsStmt;
                (&mut (*(*s).into).options, (*(*s).into).rel, (*s).if_not_exists)
            };
            let settings = Settings::default().apply(&take_hasis(options, false));
            checked_geometry(settings.params());
            let existed = pg_sys::RangeVarGetRelidExtended(relation, pg_sys::NoLock as pg_sys::LOCKMODE, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut()) != pg_sys::InvalidOid;
            {
                let _pending = pending_for_statement(Some(settings.params()));
                call_next(pstmt, query, false, context, params, env, dest, qc);
            }
            if existed && if_not_exists {
                return;
            }
            let relid = pg_sys::RangeVarGetRelidExtended(relation, pg_sys::NoLock as pg_sys::LOCKMODE, 0, None, std::ptr::null_mut());
            store(relid, settings);
        }
        Plan::Alter(relid) => {
            let stmt = node as *mut pg_sys::AlterTableStmt;
            pg_sys::LockRelationOid(relid, pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE);
            let Some(before) = read_class(relid) else { return call_next(pstmt, query, false, context, params, env, dest, qc) };
            if !pg_sys::pg_class_ownercheck(relid, pg_sys::GetUserId()) {
                let objtype = pg_sys::get_relkind_objtype(before.relkind as std::os::raw::c_char);
                pg_sys::aclcheck_error(pg_sys::AclResult::ACLCHECK_NOT_OWNER, objtype, pg_sys::get_rel_name(relid));
            }
            let mut changes = Vec::new();
            let mut cmds = Vec::new();
            for p in list_cells((*stmt).cmds) {
                let cmd = p as *mut pg_sys::AlterTableCmd;
                let reset = (*cmd).subtype == pg_sys::AlterTableType::AT_ResetRelOptions;
                if reset || (*cmd).subtype == pg_sys::AlterTableType::AT_SetRelOptions {
                    let mut defs = (*cmd).def as *mut pg_sys::List;
                    changes.extend(take_hasis(&mut defs, reset));
                    (*cmd).def = defs as *mut pg_sys::Node;
                    if defs.is_null() {
                        continue;
                    }
                }
                cmds.push(p);
            }
            let after = before.hasis.apply(&changes);
            checked_geometry(after.params());
            // PostgreSQL validates the table's other options together with
            // what is stored: the hasis entries are out of the catalog
            // while it does.
            if !before.hasis.is_empty() {
                write_class_options(relid, &before.others, &Settings::default());
            }
            if !cmds.is_empty() {
                (*stmt).cmds = list_of(&cmds);
                let _pending = pending_for_statement(Some(after.params()));
                call_next(pstmt, query, false, context, params, env, dest, qc);
            }
            store(relid, after);
        }
    }
}
