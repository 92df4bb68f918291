//! pg_hybrid.* settings.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

pub static SHARED_MEMORY_MB: GucSetting<i32> = GucSetting::<i32>::new(128);
pub static MAX_INDEXES: GucSetting<i32> = GucSetting::<i32>::new(256);
pub static BACKGROUND_MERGE: GucSetting<bool> = GucSetting::<bool>::new(true);
/// The floor under the size-based merge trigger. It only decides for small
/// stages (under ~1000 × merge_ratio delta records' worth of static bytes),
/// whose merges are cheap; 10000 let TPC-C's new_order (12k entries) go
/// 30 s between merges, and its Delivery scans walk every order deleted
/// since (0.18 ms a scan against 0.07 ms at 1000; tpmC 20.9k against 23.4k).
pub static MERGE_MIN_ENTRIES: GucSetting<i32> = GucSetting::<i32>::new(1_000);
pub static LEAF_CACHE_MB: GucSetting<i32> = GucSetting::<i32>::new(32);
/// Default bound of a tiered index's hot tier, as a fraction of
/// shared_buffers (reloption `hot_size` overrides it).
pub static HOT_SIZE_FRACTION: GucSetting<f64> = GucSetting::<f64>::new(0.25);

pub fn define() {
    GucRegistry::define_int_guc(
        c"pg_hybrid.shared_memory",
        c"Size of the shared-memory arena holding dynamic stages and Bloom filters.",
        c"Indexes merge early when the arena runs short; a dynamic stage that cannot fit even then is an ERROR.",
        &SHARED_MEMORY_MB,
        8,
        1024 * 1024,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pg_hybrid.max_indexes",
        c"Number of pg_hybrid indexes that can hold a dynamic stage at the same time.",
        c"",
        &MAX_INDEXES,
        1,
        65536,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_hybrid.leaf_cache",
        c"Size of the shared CLOCK cache of decompressed LZ4 leaves (0 disables it).",
        c"Leaves of indexes built WITH (compression = lz4) are decompressed once and served from here until evicted.",
        &LEAF_CACHE_MB,
        0,
        16 * 1024,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_float_guc(
        c"pg_hybrid.hot_size_fraction",
        c"Default bound of a tiered index's hot tier, as a fraction of shared_buffers.",
        c"Applies to tiered indexes without the hot_size reloption; at most half of pg_hybrid.shared_memory is used whatever it says.",
        &HOT_SIZE_FRACTION,
        0.001,
        1.0,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_hybrid.background_merge",
        c"Run ratio-triggered merges in background workers.",
        c"When off, the inserting backend merges in the foreground.",
        &BACKGROUND_MERGE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_hybrid.merge_min_entries",
        c"Dynamic-stage entries below which no ratio-triggered merge starts.",
        c"Keeps tiny indexes from merging on every insert.",
        &MERGE_MIN_ENTRIES,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
}
