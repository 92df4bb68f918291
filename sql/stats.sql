-- pg_hybrid.index_stats, verify, arena_stats and leaf_cache_stats: what they
-- report, and the errors they give for the wrong kind of object.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;
CREATE TABLE st (k int8, grp int, pad text);
INSERT INTO st SELECT g, g % 7, repeat('x', 20) FROM generate_series(1, 20000) g;
CREATE UNIQUE INDEX st_k ON st USING hybrid_btree (k);
CREATE INDEX st_grp ON st USING hybrid_btree (grp) WITH (compression = 'lz4');
-- after CREATE INDEX everything is static, one key per row / one per group
SELECT dynamic_entries, static_entries, static_keys, static_pages > 0 AS has_pages,
       static_bytes = static_pages * 8192 AS static_bytes_in_pages,
       relation_bytes >= static_bytes AS relation_holds_stage, merges, generation
  FROM pg_hybrid.index_stats('st_k');
SELECT static_entries, static_keys FROM pg_hybrid.index_stats('st_grp');
-- inserts land in the dynamic stage; probes of absent keys skip it by Bloom
INSERT INTO st SELECT g, g % 7, 'new' FROM generate_series(20001, 20500) g;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM st WHERE k = 5;
SELECT count(*) FROM st WHERE k = 20400;
SELECT dynamic_entries, dynamic_bytes > 0 AS dynamic_bytes, bloom_checks >= 2 AS checked,
       bloom_skips >= 1 AS skipped, bytes_per_entry > 0 AS per_entry
  FROM pg_hybrid.index_stats('st_k');
-- a merge moves them and is counted
SELECT pg_hybrid.merge('st_k');
SELECT dynamic_entries, static_entries, merges, generation, last_merge_ms >= 0 AS timed
  FROM pg_hybrid.index_stats('st_k');
-- verify: structure and order, and with heapallindexed every live row
SELECT pg_hybrid.verify('st_k'), pg_hybrid.verify('st_k', true), pg_hybrid.verify('st_grp', heapallindexed => true);
DELETE FROM st WHERE k % 3 = 0;
SELECT pg_hybrid.verify('st_k', true);
VACUUM st;
SELECT static_entries FROM pg_hybrid.index_stats('st_k');
SELECT pg_hybrid.verify('st_k', true), pg_hybrid.verify('st_grp', true);
-- shared memory: the arena and the leaf cache
SELECT arena_bytes > 0 AS arena, free_bytes <= arena_bytes AS free_within, slots > 0 AS slots,
       slots_in_use >= 2 AS in_use
  FROM pg_hybrid.arena_stats();
SELECT capacity_bytes > 0 AS capacity, used_bytes <= capacity_bytes AS used_within, hits >= 0 AS hits
  FROM pg_hybrid.leaf_cache_stats();
-- wrong objects
CREATE INDEX st_btree ON st USING btree (k);
SELECT pg_hybrid.verify('st_btree');
SELECT * FROM pg_hybrid.index_stats('st_btree');
SELECT pg_hybrid.merge('st_btree');
SELECT pg_hybrid.verify('st');
SELECT pg_hybrid.verify(0);
DROP TABLE st;
