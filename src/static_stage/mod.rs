//! The static stage: the compact, read-only B+tree of the hybrid-index
//! paper (Zhang et al., SIGMOD'16) as a base structure of the staged-index
//! engine. Shared by the access methods whose base is (or contains) a
//! static stage; it imports the engine and the storage layers, never an
//! access method. Layout and protocols: README.md.
//!
//! - `stage.rs`: `StaticStage`, the `BaseStructure` (build, segmented merge
//!   steps, VACUUM, verify, orphans) and `Stage`, its view of the metapage's
//!   base roots
//! - `cursor.rs`: the `BaseCursor` over static leaves
//! - `static_io.rs`: static pages on PostgreSQL buffers (descent, leaves, writes)
//! - `inner_cache.rs`: backend-local copies of the current stage's inner pages

pub mod cursor;
mod inner_cache;
pub mod stage;
pub mod static_io;
