//! hybrid_btree: the dual-stage hybrid index of Zhang et al. (SIGMOD'16) as a
//! PostgreSQL index access method. Layout and protocols: README.md.

pub mod build;
pub mod conflict;
pub mod cost;
pub mod delta;
pub mod handler;
pub mod insert;
pub mod merge;
pub mod meta;
pub mod options;
pub mod readers;
pub mod scan;
pub mod state;
pub mod static_io;
pub mod stats;
pub mod vacuum;
pub mod wal;
