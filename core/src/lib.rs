//! pg_hybrid_core: the algorithms of pg_hybrid's access methods over plain byte
//! pages and memory regions. Nothing here knows PostgreSQL; the extension crate
//! wraps these structures in buffers, WAL records and shared memory.

pub mod tid;
pub mod units;
pub mod keys;
pub mod varint;
pub mod bloom;
pub mod dynamic;
pub mod hot_tier;
pub mod static_stage;
pub mod clock_cache;
pub mod elastic;
pub mod partition;
pub mod external_sort;
pub mod killed;
pub mod fast_hash;
pub mod hasis;
pub mod hash_path;
pub mod csd_meter;
pub mod append_clock;
#[cfg(test)]
mod test_rng;
