//! The staged-index engine: everything the dual-stage AMs share, generic
//! over the trait of their *base structure* (base.rs). An AM folder
//! implements `BaseStructure`, registers it (ams.rs) and returns
//! `handler::ordered_routine` from its handler. README.md draws the parts.
//!
//! Dependency rule: AM folders -> engine -> storage, shmem, keys, workers.

pub mod ams;
pub mod base;
pub mod build;
pub mod conflict;
pub mod cost;
pub mod delta;
pub mod dynscan;
pub mod handler;
pub mod hot;
pub mod insert;
pub mod killed;
pub mod merge;
pub mod meta;
pub mod predlock;
pub mod readers;
pub mod scan;
pub mod state;
pub mod stats;
pub mod vacuum;
pub mod wal;
pub mod worker;

/// Registers the engine's shared-memory payload, WAL resource manager and
/// executor hooks; called from `_PG_init`.
pub unsafe fn init() {
    crate::shmem::set_payload(&state::PAYLOAD);
    conflict::install();
    wal::register();
}
