//! griffin: a hash path for point operations and a B+tree for ranges
//! (Nakazono et al., arXiv 2407.13294) as the base structure of the
//! staged-index engine (src/engine): the static stage (src/static_stage)
//! serves ranges, hash buckets (`pg_hybrid_core::hash_path`) serve
//! equality on every key column, and the engine's merge worker is the
//! paper's sync manager. Layout and protocols: README.md.
//!
//! - `structure.rs`: the `BaseStructure` (tree and hash path together)
//! - `cursor.rs`: the `BaseCursor` (point ranges from a bucket)
//! - `hash_io.rs`: the hash path's pages on buffers and WAL body steps
//! - `options.rs`: reloptions; `handler.rs`: the AM handler

pub mod cursor;
pub mod handler;
pub mod hash_io;
pub mod options;
pub mod structure;

/// Registers the AM with the engine and its reloptions; from `_PG_init`.
pub unsafe fn init() {
    options::register();
    hash_io::register_wal();
    crate::engine::ams::register(&structure::GRIFFIN);
}
