-- tiered_btree: reloptions (bad input gives clear ERRORs); point reads
-- served by the hot tier once a key's record was promoted; a hot tier
-- far smaller than the index, so the CLOCK sweep evicts all the time;
-- every scan kind checked against a btree twin table before and after
-- merges, sweeps, UNIQUE checks, ON CONFLICT and VACUUM; verify checks
-- that every hot record holds its key's entries.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;

-- ------------------------------------------------------------ reloptions --
CREATE TABLE tw (k int8, v int8, t text COLLATE "C");
INSERT INTO tw SELECT g, g * 10, 't' || (g % 97) FROM generate_series(1, 3000) g;
CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (hot_size = 'lots');
CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (hot_size = '1kB');
-- (the limit in the message follows pg_hybrid.shared_memory)
DO $$ BEGIN
  CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (hot_size = '100TB');
EXCEPTION WHEN invalid_parameter_value THEN
  RAISE NOTICE 'refused: %', SQLERRM LIKE '%is larger than shared memory allows%';
END $$;
CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (hot_size = '64 parsecs');
CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (sample_rate = 0);
CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (sample_rate = 1.5);
CREATE INDEX tw_bad ON tw USING tiered_btree (k) WITH (merge_ratio = 10);
CREATE INDEX tw_bad ON tw USING tiered_btree (point(k, k));
SELECT count(*) AS no_bad_index FROM pg_class WHERE relname = 'tw_bad';
CREATE UNIQUE INDEX tw_k ON tw USING tiered_btree (k) INCLUDE (v) WITH (hot_size = '64kB', sample_rate = 1);
CREATE INDEX tw_t ON tw USING tiered_btree (t, k);
SELECT reloptions FROM pg_class WHERE relname = 'tw_k';
ALTER INDEX tw_t SET (hot_size = '1MB', sample_rate = 0.5);
ALTER INDEX tw_t SET (hot_size = 'x');
SELECT reloptions FROM pg_class WHERE relname = 'tw_t';
-- the btree twin: the oracle
CREATE TABLE twb AS SELECT * FROM tw;
CREATE UNIQUE INDEX twb_k ON twb (k) INCLUDE (v);
CREATE INDEX twb_t ON twb (t, k);
VACUUM ANALYZE tw;
VACUUM ANALYZE twb;

-- ------------------------------------------------------------ point reads --
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT v FROM tw WHERE k = 42;
SELECT v FROM tw WHERE k = 42;
-- sample_rate = 1: the first read of a key reads the cold tier and
-- promotes the key's record, every later read is answered by the hot tier
SELECT hot_records, promotions FROM pg_hybrid.index_stats('tw_k');
SELECT sum(v) FROM (SELECT (SELECT v FROM tw WHERE k = g % 50 + 1) AS v FROM generate_series(1, 1000) g) s;
SELECT hot_records, promotions, hot_hit_ratio > 0.9 AS mostly_hot, evictions FROM pg_hybrid.index_stats('tw_k');
SELECT pg_hybrid.verify('tw_k', heapallindexed => true);
-- reads of every key: 3000 records do not fit in 64kB, the sweep evicts
SELECT count(*) FROM generate_series(1, 3000) g WHERE (SELECT v FROM tw WHERE k = g) = g * 10;
SELECT hot_bytes <= 64 * 1024 AS within_bound, evictions > 0 AS evicted, sweeps > 0 AS swept,
       hot_records < 3000 AS some_left
FROM pg_hybrid.index_stats('tw_k');
SELECT pg_hybrid.verify('tw_k', heapallindexed => true);
-- a small sample_rate applies once the tier is full: while it fills, every
-- read that had to read the cold tier promotes
CREATE TABLE ts AS SELECT k, v FROM tw;
CREATE INDEX ts_k ON ts USING tiered_btree (k) INCLUDE (v) WITH (hot_size = '64kB', sample_rate = 0.01);
VACUUM ANALYZE ts;
SELECT count(*) FROM generate_series(1, 50) g WHERE (SELECT v FROM ts WHERE k = g) = g * 10;
SELECT hot_records, promotions FROM pg_hybrid.index_stats('ts_k');
SELECT count(*) FROM generate_series(1, 3000) g WHERE (SELECT v FROM ts WHERE k = g) = g * 10;
SELECT promotions < 2000 AS sampled_once_full, hot_bytes <= 64 * 1024 AS within_bound
FROM pg_hybrid.index_stats('ts_k');
SELECT pg_hybrid.verify('ts_k', heapallindexed => true);
DROP TABLE ts;

-- ------------------------------------------------------ writes and scans --
-- new rows land in the dynamic stage as dirty entries; a marked key stays
-- complete when a new version of it arrives
UPDATE tw SET v = v + 1 WHERE k BETWEEN 40 AND 60;
UPDATE twb SET v = v + 1 WHERE k BETWEEN 40 AND 60;
INSERT INTO tw SELECT g, g * 10, 't' || (g % 97) FROM generate_series(3001, 3500) g;
INSERT INTO twb SELECT g, g * 10, 't' || (g % 97) FROM generate_series(3001, 3500) g;
SELECT v FROM tw WHERE k = 45;
SELECT v FROM tw WHERE k = 3333;
SELECT dynamic_entries > 0 AS unmerged FROM pg_hybrid.index_stats('tw_k');
-- UNIQUE and ON CONFLICT through either tier
INSERT INTO tw VALUES (45, 0, 'dup');
INSERT INTO tw VALUES (3333, 0, 'dup');
INSERT INTO tw VALUES (45, 0, 'x'), (9999, 99990, 'x') ON CONFLICT (k) DO UPDATE SET v = tw.v + 1000;
INSERT INTO twb VALUES (45, 0, 'x'), (9999, 99990, 'x') ON CONFLICT (k) DO UPDATE SET v = twb.v + 1000;
SELECT v FROM tw WHERE k = 45;
-- every scan kind, tiered against btree
CREATE FUNCTION tw_diff(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE a bigint; b bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM ((%s) EXCEPT ALL (%s)) x', q, replace(q, 'FROM tw ', 'FROM twb ')) INTO a;
  EXECUTE format('SELECT count(*) FROM ((%s) EXCEPT ALL (%s)) x', replace(q, 'FROM tw ', 'FROM twb '), q) INTO b;
  RETURN a + b;
END $$;
SELECT tw_diff('SELECT k, v FROM tw WHERE k BETWEEN 30 AND 3100');
SELECT tw_diff('SELECT k, v FROM tw WHERE k = ANY (ARRAY[1, 45, 3333, 9999, 77777])');
SELECT tw_diff('SELECT k, t FROM tw WHERE t = ''t7''');
SELECT tw_diff('SELECT k FROM tw WHERE t > ''t90'' AND k < 500');
SELECT array_agg(k) FROM (SELECT k FROM tw WHERE k < 50 ORDER BY k DESC LIMIT 5) s;
SELECT pg_hybrid.merge('tw_k') > 0 AS merged;
SELECT dynamic_entries FROM pg_hybrid.index_stats('tw_k');
SELECT tw_diff('SELECT k, v FROM tw WHERE k BETWEEN 30 AND 3100');
SELECT count(*) FROM generate_series(1, 3600) g WHERE (SELECT v FROM tw WHERE k = g) IS DISTINCT FROM (SELECT v FROM twb WHERE k = g);
SELECT pg_hybrid.verify('tw_k', heapallindexed => true);
SELECT pg_hybrid.verify('tw_t', heapallindexed => true);

-- ---------------------------------------------------------------- VACUUM --
DELETE FROM tw WHERE k % 3 = 0;
DELETE FROM twb WHERE k % 3 = 0;
VACUUM tw;
SELECT count(*) FROM generate_series(1, 3600) g WHERE (SELECT v FROM tw WHERE k = g) IS DISTINCT FROM (SELECT v FROM twb WHERE k = g);
SELECT tw_diff('SELECT k, v FROM tw WHERE k BETWEEN 1 AND 4000');
SELECT pg_hybrid.verify('tw_k', heapallindexed => true);
-- the deleted keys' TIDs are reused by new rows: no hot record brings an
-- old one back
INSERT INTO tw SELECT g, -g, 'r' FROM generate_series(1, 3600) g WHERE g % 3 = 0;
INSERT INTO twb SELECT g, -g, 'r' FROM generate_series(1, 3600) g WHERE g % 3 = 0;
SELECT count(*) FROM generate_series(1, 3600) g WHERE (SELECT v FROM tw WHERE k = g) IS DISTINCT FROM (SELECT v FROM twb WHERE k = g);
SELECT pg_hybrid.verify('tw_k', heapallindexed => true);

-- ----------------------------------------------------------------- stats --
SELECT hot_records IS NOT NULL AS tiered_columns, hash_buckets IS NULL AS no_hash FROM pg_hybrid.index_stats('tw_k');
CREATE INDEX tw_h ON tw USING hybrid_btree (k);
SELECT hot_records IS NULL AND promotions IS NULL AS not_tiered FROM pg_hybrid.index_stats('tw_h');
DROP TABLE tw, twb;
DROP FUNCTION tw_diff(text);
