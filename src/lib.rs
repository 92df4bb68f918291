//! pg_hybrid: research index designs as PostgreSQL access methods.
//!
//! Layers (see ../shared/design.md): `keys` (order-preserving key encoding),
//! `storage` (pages, buffers, WAL), `shmem` (arena and per-index registry),
//! `workers` (background workers), `engine` (the staged-index engine every
//! dual-stage AM runs on), `static_stage` (the compact B+tree base structure
//! more than one AM builds on), and one folder per access method.

use pgrx::prelude::*;

pub mod elastic;
pub mod engine;
pub mod griffin;
pub mod guc;
pub mod hash_path;
pub mod hasis;
pub mod hybrid;
pub mod tiered;
pub mod keys;
pub mod shmem;
pub mod static_stage;
pub mod storage;
pub mod workers;

::pgrx::pg_module_magic!(name, version);

/// True in processes of a server that loaded pg_hybrid through
/// shared_preload_libraries (inherited by every backend through fork).
pub static mut PRELOADED: bool = false;

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    unsafe {
        // Errors must read the same whatever the server's environment
        // (also when the library is loaded without the preload, to say so):
        // backtraces in DETAIL only when explicitly asked for.
        if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
            std::env::set_var("RUST_LIB_BACKTRACE", "0");
        }
        if !pgrx::pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        guc::define();
        engine::init();
        hash_path::io::register_wal();
        hybrid::init();
        griffin::init();
        tiered::init();
        elastic::init();
        hasis::init();
        // After every init has defined its settings: reserving the prefix
        // removes the postgresql.conf values of pg_hybrid.* settings not
        // defined yet (with a WARNING), and the hasis settings used to be
        // defined after it, so postgresql.conf could not set them.
        pgrx::pg_sys::MarkGUCPrefixReserved(c"pg_hybrid".as_ptr());
        install_shmem_hooks();
        shmem::install_drop_hook();
        PRELOADED = true;
    }
}

static mut PREV_SHMEM_REQUEST: pgrx::pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP: pgrx::pg_sys::shmem_startup_hook_type = None;

unsafe fn install_shmem_hooks() {
    PREV_SHMEM_REQUEST = pgrx::pg_sys::shmem_request_hook;
    pgrx::pg_sys::shmem_request_hook = Some(shmem_request);
    PREV_SHMEM_STARTUP = pgrx::pg_sys::shmem_startup_hook;
    pgrx::pg_sys::shmem_startup_hook = Some(shmem_startup);
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    if let Some(prev) = PREV_SHMEM_REQUEST {
        prev();
    }
    shmem::request();
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    if let Some(prev) = PREV_SHMEM_STARTUP {
        prev();
    }
    shmem::startup();
}

/// Raises the ERROR every entry point gives when the library was not preloaded.
pub fn require_preload() {
    if unsafe { !PRELOADED } {
        crate::raise(PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "pg_hybrid must be loaded via shared_preload_libraries", "Add pg_hybrid to shared_preload_libraries in postgresql.conf (e.g. shared_preload_libraries = 'pg_hybrid') and restart the server.");
    }
}

// The design names the SQL API pg_hybrid.*; CREATE SCHEMA rejects the "pg_"
// prefix unless allow_system_table_mods is on, so the script raises it for
// that one statement (the extension is superuser-only).
pgrx::extension_sql!(
    r#"
SET LOCAL allow_system_table_mods = on;
CREATE SCHEMA pg_hybrid;
SET LOCAL allow_system_table_mods = off;
COMMENT ON SCHEMA pg_hybrid IS 'pg_hybrid functions: index_stats, verify, merge';
"#,
    name = "pg_hybrid_schema",
    bootstrap
);

/// Called by the extension script so CREATE EXTENSION fails early and clearly.
#[pg_extern(sql = "CREATE FUNCTION pg_hybrid.check_preloaded() RETURNS void LANGUAGE c STRICT AS 'MODULE_PATHNAME', 'check_preloaded_wrapper';", requires = ["pg_hybrid_schema"])]
fn check_preloaded() {
    require_preload();
}

pgrx::extension_sql!(
    "SELECT pg_hybrid.check_preloaded();",
    name = "preload_check",
    requires = [check_preloaded]
);

#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_hybrid'"]
    }
}

/// Opens the relation a caller of our SQL functions named by OID, or raises
/// a clear ERROR when none has it (a regclass argument can carry any
/// number, and `relation_open` reports a missing one as an internal error).
pub unsafe fn open_relation(oid: pgrx::pg_sys::Oid, lock: pgrx::pg_sys::LOCKMODE) -> pgrx::pg_sys::Relation {
    let rel = pgrx::pg_sys::try_relation_open(oid, lock);
    if rel.is_null() {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", oid.to_u32()),
            "Pass the name of an existing relation (a regclass such as 'orders'::regclass).",
        );
    }
    rel
}

/// Raises an ERROR with a HINT (pgrx's ereport! puts a fourth argument in DETAIL).
pub fn raise(code: PgSqlErrorCode, msg: impl Into<String>, hint: impl Into<String>) -> ! {
    let msg: String = msg.into();
    pgrx::pg_sys::panic::ErrorReport::new(code, msg, "pg_hybrid").set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!()
}
