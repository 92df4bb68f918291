//! griffin: a hash path for point operations and a B+tree for ranges
//! (Nakazono et al., arXiv 2407.13294) as the base structure of the
//! staged-index engine (src/engine): the static stage (src/static_stage)
//! serves ranges, hash buckets (`crate::hash_path`) serve
//! equality on every key column, and the engine's merge worker is the
//! paper's sync manager. Layout and protocols: README.md.
//!
//! - `structure.rs`: the `BaseStructure` (tree and hash path together)
//! - `cursor.rs`: the `BaseCursor` (point ranges from a bucket)
//! - `options.rs`: reloptions; `handler.rs`: the AM handler

pub mod cursor;
pub mod handler;
pub mod options;
pub mod structure;

/// Registers the AM with the engine and its reloptions; from `_PG_init`.
pub unsafe fn init() {
    options::register();
    crate::engine::ams::register(&structure::GRIFFIN);
}
