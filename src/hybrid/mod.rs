//! hybrid_btree: the dual-stage hybrid index of Zhang et al. (SIGMOD'16) as a
//! PostgreSQL index access method: the staged-index engine (src/engine)
//! over the paper's compact static stage. Layout and protocols: README.md.
//!
//! - `stage.rs`: the `BaseStructure` (build, segmented merges, VACUUM, verify)
//! - `cursor.rs`: the `BaseCursor` over static leaves
//! - `static_io.rs`: static pages on PostgreSQL buffers (descent, leaves, writes)
//! - `options.rs`: reloptions `merge_ratio`, `compression`
//! - `handler.rs`: the AM handler and its SQL

pub mod cursor;
pub mod handler;
mod inner_cache;
pub mod options;
pub mod stage;
pub mod static_io;

/// Registers the AM with the engine and its reloptions; from `_PG_init`.
pub unsafe fn init() {
    options::register();
    crate::engine::ams::register(&stage::HYBRID);
}
