//! tiered_btree and tiered_hash: the 2B+tree and 2-Hash of Zhou et al.
//! (tiered indexing, VLDBJ 2025) on the staged-index engine (src/engine).
//! The hot tier is complete records of hot keys kept in the engine's
//! shared-memory tree beside the unmerged entries
//! (`pg_hybrid_core::hot_tier`, engine `hot.rs`). tiered_btree's cold tier
//! is the compact static stage (src/static_stage), tiered_hash's a hash
//! table on pages (src/hash_path). Layout, protocol and what the paper's
//! parts became: README.md.
//!
//! - `options.rs`: reloptions `hot_size`, `sample_rate`, `bucket_fill`
//! - `hash.rs`: tiered_hash's base structure and cursor
//! - `handler.rs`: the AM handlers and their SQL

pub mod handler;
pub mod hash;
pub mod options;

use crate::engine::base::HotTierSettings;
use crate::static_stage::stage::{StageSettings, StaticStage};

/// tiered_btree's base structure: the static stage as the cold tier, with
/// the hot tier its reloptions size.
pub static TIERED_BTREE: StaticStage = StaticStage { am: c"tiered_btree", settings, hot_tier: Some(hot_tier) };

/// Dirty entries are written down by the hot tier's bound (`delta_cap`,
/// both tiered AMs), not by a ratio to the cold tier: a ratio of 1 only
/// adds a merge when the unmerged entries outgrow a small cold tier.
const MERGE_RATIO: i32 = 1;

unsafe fn settings(_index: pgrx::pg_sys::Relation) -> StageSettings {
    StageSettings { merge_ratio: MERGE_RATIO, compress: false }
}

/// Both tiered AMs' hot tier, from their reloptions.
unsafe fn hot_tier(index: pgrx::pg_sys::Relation) -> HotTierSettings {
    HotTierSettings { hot_bytes: options::hot_size(index), sample_rate: options::sample_rate(index) }
}

/// Registers the AM with the engine and its reloptions; from `_PG_init`.
pub unsafe fn init() {
    options::register();
    crate::engine::ams::register(&TIERED_BTREE);
    crate::engine::ams::register(&hash::TIERED_HASH);
}
