//! The shared-memory arena of pg_hybrid: a pool of 8KB blocks that the dynamic
//! stages and Bloom filters of all indexes draw from, a registry of per-index
//! slots keyed by (database, relfilenode), and the LWLocks guarding them.
//!
//! Nothing here is needed after a crash: every slot is a cache rebuilt from
//! WAL-logged index pages (see engine/README.md). `leaf_cache` holds
//! decompressed LZ4 leaves, versioned by page LSN. `rel_counters` keeps
//! cumulative per-relation statistics since the server started.

pub mod arena;
pub mod leaf_cache;
pub mod registry;
pub mod rel_counters;

pub use arena::*;
pub use registry::*;
