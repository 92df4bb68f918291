-- Merge behaviour: what moves, when the ratio triggers, what readers see,
-- and the counters of pg_hybrid.index_stats.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 100;
CREATE TABLE mg (k int8, grp int);
INSERT INTO mg SELECT g, g % 10 FROM generate_series(1, 10000) g;
CREATE INDEX mg_k ON mg USING hybrid_btree (k) WITH (merge_ratio = 10);
CREATE INDEX mg_grp ON mg USING hybrid_btree (grp);
SELECT dynamic_entries, static_entries, static_keys, merges, generation FROM pg_hybrid.index_stats('mg_k');
-- secondary index: one key, many TIDs (Compaction rule)
SELECT static_entries, static_keys FROM pg_hybrid.index_stats('mg_grp');
-- the ratio trigger compares sizes: a merge starts when the delta log
-- (about 18 bytes per int8 entry) reaches the static stage's body bytes /
-- merge_ratio. The 10000 keys take about 28 kB (serial keys: a one-byte
-- key gap and a one-byte TID gap each), so below 156 dynamic entries
-- nothing merges
INSERT INTO mg SELECT g, g % 10 FROM generate_series(10001, 10155) g;
SELECT dynamic_entries, static_entries, merges FROM pg_hybrid.index_stats('mg_k');
-- the 156th dynamic entry triggers a merge in the inserting backend
INSERT INTO mg VALUES (10156, 0);
SELECT dynamic_entries, static_entries, merges FROM pg_hybrid.index_stats('mg_k');
-- a smaller ratio lets the dynamic stage grow larger before a merge
ALTER INDEX mg_k SET (merge_ratio = 1);
INSERT INTO mg SELECT g, g % 10 FROM generate_series(10157, 11000) g;
SELECT dynamic_entries, static_entries, merges FROM pg_hybrid.index_stats('mg_k');
-- readers see the same rows before and after a manual merge
INSERT INTO mg SELECT g, g % 10 FROM generate_series(20001, 20500) g;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*), min(k), max(k) FROM mg WHERE k BETWEEN 10990 AND 20010;
SELECT pg_hybrid.merge('mg_k');
-- a merge with nothing to merge writes nothing (and is not counted)
CREATE TEMP TABLE mg_size AS SELECT pg_relation_size('mg_k') AS before;
SELECT pg_hybrid.merge('mg_k');
SELECT pg_relation_size('mg_k') = before AS same_size FROM mg_size;
SELECT count(*), min(k), max(k) FROM mg WHERE k BETWEEN 10990 AND 20010;
SELECT dynamic_entries, static_entries, merges FROM pg_hybrid.index_stats('mg_k');
-- point probes for keys not in the dynamic stage are answered by the Bloom filter
INSERT INTO mg VALUES (30001, 1);
SELECT k FROM mg WHERE k = 5;
SELECT k FROM mg WHERE k = 30001;
SELECT bloom_checks >= 2 AND bloom_skips >= 1 AS bloom_used FROM pg_hybrid.index_stats('mg_k');
-- LZ4 leaves give the same answers
CREATE INDEX mg_k_lz4 ON mg USING hybrid_btree (k) WITH (compression = 'lz4');
SELECT count(*), sum(k) FROM mg WHERE k BETWEEN 100 AND 20100;
DROP INDEX mg_k;
-- the second read of a compressed leaf comes from the shared leaf cache
CREATE TEMP TABLE lc0 AS SELECT hits, inserts FROM pg_hybrid.leaf_cache_stats();
SELECT count(*), sum(k) FROM mg WHERE k BETWEEN 100 AND 20100;
SELECT count(*), sum(k) FROM mg WHERE k BETWEEN 100 AND 20100;
SELECT s.hits > lc0.hits AS cache_hits, s.inserts >= lc0.inserts AS cache_inserts, s.entries > 0 AS cached,
       s.used_bytes <= s.capacity_bytes AS within_capacity
  FROM pg_hybrid.leaf_cache_stats() s, lc0;
-- VACUUM rewrites leaves in place (new LSN): the cache never serves the old body
DELETE FROM mg WHERE k BETWEEN 150 AND 250;
VACUUM mg;
SELECT count(*), sum(k) FROM mg WHERE k BETWEEN 100 AND 20100;
-- (a floor on the trigger keeps these in the dynamic stage until the manual merge)
SET pg_hybrid.merge_min_entries = 5000;
INSERT INTO mg SELECT g, g % 10 FROM generate_series(150, 250) g;
INSERT INTO mg SELECT g, 1 FROM generate_series(40001, 41000) g;
SELECT pg_hybrid.merge('mg_k_lz4');
SET pg_hybrid.merge_min_entries = 100;
SELECT count(*), sum(k) FROM mg WHERE k BETWEEN 100 AND 41000;
SELECT pg_hybrid.verify('mg_k_lz4', true), pg_hybrid.verify('mg_grp', true);
-- TRUNCATE gives the index new storage; REINDEX rebuilds it
TRUNCATE mg;
INSERT INTO mg VALUES (1, 1), (2, 2);
SELECT k FROM mg WHERE k > 0 ORDER BY k;
REINDEX INDEX mg_grp;
REINDEX INDEX CONCURRENTLY mg_k_lz4;
SELECT k FROM mg WHERE k > 0 ORDER BY k;
SELECT dynamic_entries, static_entries FROM pg_hybrid.index_stats('mg_k_lz4');
-- an open cursor keeps the pages of its static stage from being recycled
-- and reused by later merges (its own transaction holds back the xid
-- horizon, so only the reader registry protects it here)
CREATE TABLE cur (k int8);
INSERT INTO cur SELECT g FROM generate_series(1, 50000) g;
CREATE UNIQUE INDEX cur_k ON cur USING hybrid_btree (k);
BEGIN;
DECLARE c CURSOR FOR SELECT k FROM cur WHERE k > 0 ORDER BY k;
FETCH 2 FROM c;
INSERT INTO cur SELECT g FROM generate_series(100001, 130000) g;
SELECT pg_hybrid.merge('cur_k') >= 0 AS merged;
INSERT INTO cur SELECT g FROM generate_series(200001, 230000) g;
SELECT pg_hybrid.merge('cur_k') >= 0 AS merged;
INSERT INTO cur SELECT g FROM generate_series(300001, 330000) g;
SELECT pg_hybrid.merge('cur_k') >= 0 AS merged;
MOVE FORWARD ALL IN c;
FETCH BACKWARD 1 FROM c;
COMMIT;
SELECT count(*), max(k) FROM cur WHERE k > 0;
SELECT pg_hybrid.verify('cur_k', true);
DROP TABLE cur;
-- REINDEX and DROP free the shared state of the storage they retire at once
INSERT INTO mg SELECT g, g % 10 FROM generate_series(100, 300) g;
CREATE TEMP TABLE ar0 AS SELECT free_bytes, slots_in_use FROM pg_hybrid.arena_stats();
SELECT slots_in_use >= 2 AS slots_used FROM ar0;
REINDEX INDEX mg_grp;
INSERT INTO mg VALUES (301, 1);
SELECT a.slots_in_use = ar0.slots_in_use AS reindex_reused_slot FROM pg_hybrid.arena_stats() a, ar0;
DROP TABLE mg;
SELECT a.slots_in_use = ar0.slots_in_use - 2 AS slots_freed, a.free_bytes > ar0.free_bytes AS blocks_freed
  FROM pg_hybrid.arena_stats() a, ar0;
-- A SERIALIZABLE transaction never merges in its own backend (a merge of
-- seconds inside it would hold back SSI's cleanup of every other
-- serializable transaction's predicate locks); the next insert outside one
-- does (background merges are off in this file).
CREATE TABLE ser (k int8);
CREATE INDEX ser_k ON ser USING hybrid_btree (k);
BEGIN ISOLATION LEVEL SERIALIZABLE;
INSERT INTO ser SELECT g FROM generate_series(1, 500) g;
SELECT merges, dynamic_entries FROM pg_hybrid.index_stats('ser_k');
COMMIT;
INSERT INTO ser VALUES (501);
SELECT merges, dynamic_entries, static_entries FROM pg_hybrid.index_stats('ser_k');
DROP TABLE ser;
