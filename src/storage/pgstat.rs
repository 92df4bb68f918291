//! PostgreSQL's `pgstat_count_*` macros, for relations our code reads.
//!
//! The macros are C; what they do is one test and an increment: a
//! relation counts while it has a statistics entry, linked again when a
//! flush of the pending statistics unlinked it (`pgstat_should_count_relation`).
//! These feed `pg_stat_*_tables` and `pg_stat_*_indexes`, so a hasis table
//! and our indexes show the scans and rows a heap and a btree would.

use pgrx::pg_sys;

/// The relation's pending counts, if it counts at all (track_counts on).
unsafe fn counts<'a>(rel: pg_sys::Relation) -> Option<&'a mut pg_sys::PgStat_TableCounts> {
    if (*rel).pgstat_info.is_null() {
        if !(*rel).pgstat_enabled {
            return None;
        }
        pg_sys::pgstat_assoc_relation(rel);
    }
    let info = (*rel).pgstat_info;
    (!info.is_null()).then(|| &mut (*info).t_counts)
}

/// pgstat_count_heap_scan and pgstat_count_index_scan: `seq_scan`, `idx_scan`.
pub unsafe fn count_scan(rel: pg_sys::Relation) {
    if let Some(c) = counts(rel) {
        c.t_numscans += 1;
    }
}

/// pgstat_count_heap_getnext: a row a sequential (or sample, or TID
/// range) scan returned, `seq_tup_read`.
pub unsafe fn count_returned(rel: pg_sys::Relation) {
    if let Some(c) = counts(rel) {
        c.t_tuples_returned += 1;
    }
}

/// pgstat_count_heap_fetch: a row a bitmap heap scan fetched, counted in
/// `idx_tup_fetch` as heap's are.
pub unsafe fn count_fetched(rel: pg_sys::Relation) {
    if let Some(c) = counts(rel) {
        c.t_tuples_fetched += 1;
    }
}

/// pgstat_count_buffer_read and _hit of a block found in the buffer pool.
pub unsafe fn count_buffer_hit(rel: pg_sys::Relation) {
    if let Some(c) = counts(rel) {
        c.t_blocks_fetched += 1;
        c.t_blocks_hit += 1;
    }
}
