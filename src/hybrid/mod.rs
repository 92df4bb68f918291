//! hybrid_btree: the dual-stage hybrid index of Zhang et al. (SIGMOD'16) as a
//! PostgreSQL index access method: the staged-index engine (src/engine)
//! over the paper's compact static stage (src/static_stage). Layout and
//! protocols: README.md.
//!
//! - `options.rs`: reloptions `merge_ratio`, `compression`
//! - `handler.rs`: the AM handler and its SQL

pub mod handler;
pub mod options;

use crate::static_stage::stage::{StageSettings, StaticStage};

/// hybrid_btree's base structure: the static stage, under its reloptions.
pub static HYBRID: StaticStage = StaticStage { am: c"hybrid_btree", settings: settings, hot_tier: None };

unsafe fn settings(index: pgrx::pg_sys::Relation) -> StageSettings {
    StageSettings { merge_ratio: options::merge_ratio(index), compress: options::compression_lz4(index) }
}

/// Registers the AM with the engine and its reloptions; from `_PG_init`.
pub unsafe fn init() {
    options::register();
    crate::engine::ams::register(&HYBRID);
}
