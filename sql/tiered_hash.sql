-- tiered_hash: reloptions and definitions it refuses (clear ERRORs); what
-- the planner is offered (equality only, like hash: no ranges, no ORDER BY,
-- no CLUSTER, no ASC/DESC); point reads through one bucket and through the
-- hot tier once a key's record was promoted; a hot tier far smaller than
-- the index, so the CLOCK sweep evicts all the time; multi-column indexes
-- probed on every key column and on leading ones; keys whose equal values
-- differ in bytes; every query checked against a btree twin table before
-- and after merges, sweeps, UNIQUE checks, ON CONFLICT and VACUUM.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;

-- ------------------------------------------------------------ reloptions --
CREATE TABLE hw (k int8, v int8, t text COLLATE "C", n numeric);
INSERT INTO hw SELECT g, g * 10, 't' || (g % 97), (g % 50)::numeric / 4 FROM generate_series(1, 3000) g;
CREATE INDEX hw_bad ON hw USING tiered_hash (k) WITH (hot_size = 'lots');
CREATE INDEX hw_bad ON hw USING tiered_hash (k) WITH (hot_size = '1kB');
CREATE INDEX hw_bad ON hw USING tiered_hash (k) WITH (sample_rate = 0);
CREATE INDEX hw_bad ON hw USING tiered_hash (k) WITH (bucket_fill = 5);
CREATE INDEX hw_bad ON hw USING tiered_hash (k) WITH (bucket_fill = 101);
CREATE INDEX hw_bad ON hw USING tiered_hash (k) WITH (sync_ratio = 10);
-- tiered_btree has no buckets
CREATE INDEX hw_bad ON hw USING tiered_btree (k) WITH (bucket_fill = 50);
CREATE INDEX hw_bad ON hw USING tiered_hash (k DESC);
CREATE INDEX hw_bad ON hw USING tiered_hash (point(k, k));
SELECT count(*) AS no_bad_index FROM pg_class WHERE relname = 'hw_bad';
CREATE UNIQUE INDEX hw_k ON hw USING tiered_hash (k) INCLUDE (v) WITH (hot_size = '64kB', sample_rate = 1, bucket_fill = 50);
CREATE INDEX hw_tk ON hw USING tiered_hash (t, k);
CREATE INDEX hw_n ON hw USING tiered_hash (n);
SELECT reloptions FROM pg_class WHERE relname = 'hw_k';
ALTER INDEX hw_tk SET (hot_size = '1MB', sample_rate = 0.5, bucket_fill = 90);
SELECT reloptions FROM pg_class WHERE relname = 'hw_tk';
SELECT amname, pg_indexam_has_property(a.oid, 'can_order') AS can_order,
       pg_indexam_has_property(a.oid, 'can_unique') AS can_unique,
       pg_indexam_has_property(a.oid, 'can_multi_col') AS can_multi_col,
       pg_indexam_has_property(a.oid, 'can_include') AS can_include
FROM pg_am a WHERE amname = 'tiered_hash';
-- the btree twin: the oracle
CREATE TABLE hwb AS SELECT * FROM hw;
CREATE UNIQUE INDEX hwb_k ON hwb (k) INCLUDE (v);
CREATE INDEX hwb_tk ON hwb (t, k);
CREATE INDEX hwb_n ON hwb (n);
VACUUM ANALYZE hw;
VACUUM ANALYZE hwb;
CLUSTER hw USING hw_k;

-- ----------------------------------------------------- what is offered --
-- equality: a hash probe; ranges, ORDER BY and IS NULL: never the index
EXPLAIN (COSTS OFF) SELECT v FROM hw WHERE k = 42;
EXPLAIN (COSTS OFF) SELECT v FROM hw WHERE k < 42;
EXPLAIN (COSTS OFF) SELECT k FROM hw ORDER BY k LIMIT 3;
EXPLAIN (COSTS OFF) SELECT k FROM hw WHERE k IS NULL;
-- cross-type equality (int4 and int2 constants against an int8 key)
SELECT v FROM hw WHERE k = 42::int4;
SELECT v FROM hw WHERE k = 43::int2;
-- = ANY and IN: bitmap scans, one probe per element
EXPLAIN (COSTS OFF) SELECT v FROM hw WHERE k IN (1, 2, 3);
SELECT sum(v) FROM hw WHERE k IN (1, 2, 3, 5000);

-- ------------------------------------------------------------ point reads --
SET enable_seqscan = off;
SET enable_bitmapscan = off;
-- sample_rate = 1: the first read of a key reads its bucket and promotes
-- the key's record, every later read is answered by the hot tier
SELECT sum(v) FROM (SELECT (SELECT v FROM hw WHERE k = g % 50 + 1) AS v FROM generate_series(1, 1000) g) s;
SELECT hot_records, promotions, hot_hit_ratio > 0.9 AS mostly_hot, evictions FROM pg_hybrid.index_stats('hw_k');
SELECT pg_hybrid.verify('hw_k', heapallindexed => true);
-- reads of every key: 3000 records do not fit in 64kB, the sweep evicts
SELECT count(*) FROM generate_series(1, 3000) g WHERE (SELECT v FROM hw WHERE k = g) = g * 10;
SELECT hot_bytes <= 64 * 1024 AS within_bound, evictions > 0 AS evicted, sweeps > 0 AS swept,
       hot_records < 3000 AS some_left, hash_entries, hash_buckets > 1 AS buckets
FROM pg_hybrid.index_stats('hw_k');
SELECT pg_hybrid.verify('hw_k', heapallindexed => true);
-- an index-only scan returns the INCLUDE column from either tier
EXPLAIN (COSTS OFF) SELECT v FROM hw WHERE k = 7;
SELECT v FROM hw WHERE k = 7;

-- ------------------------------------------ multi-column and odd keys --
-- every key column: one bucket; leading ones: every bucket, sorted
EXPLAIN (COSTS OFF) SELECT k FROM hw WHERE t = 't5' AND k = 5;
SELECT k FROM hw WHERE t = 't5' AND k = 5;
EXPLAIN (COSTS OFF) SELECT count(*) FROM hw WHERE t = 't5';
SELECT count(*), sum(k) FROM hw WHERE t = 't5';
SELECT count(*), sum(k) FROM hwb WHERE t = 't5';
-- more matches than work_mem holds: a clear ERROR with a hint
SET work_mem = '64kB';
SELECT count(*) FROM hw WHERE t >= 't' AND t = 't5';
INSERT INTO hw SELECT g, g, 't5', 0 FROM generate_series(100001, 104000) g;
SELECT count(*) FROM hw WHERE t = 't5';
RESET work_mem;
DELETE FROM hw WHERE k > 100000;
-- numeric: 1.0 = 1.00 = 1 hash alike (the type's hash function)
SELECT count(*) FROM hw WHERE n = 1.00;
SELECT count(*) FROM hwb WHERE n = 1;
SELECT count(*) FROM hw WHERE n = 2.5000;
SELECT count(*) FROM hwb WHERE n = 2.5;
RESET enable_seqscan;
RESET enable_bitmapscan;

-- ------------------------------------------------------ writes and scans --
INSERT INTO hw SELECT g, g * 10, 't' || (g % 97), (g % 50)::numeric / 4 FROM generate_series(3001, 6000) g;
INSERT INTO hwb SELECT g, g * 10, 't' || (g % 97), (g % 50)::numeric / 4 FROM generate_series(3001, 6000) g;
UPDATE hw SET v = v + 1 WHERE k % 7 = 0;
UPDATE hwb SET v = v + 1 WHERE k % 7 = 0;
-- UNIQUE through the buckets and the hot tier; ON CONFLICT arbitration
INSERT INTO hw VALUES (42, 0, 'x', 0);
INSERT INTO hw VALUES (42, 0, 'x', 0) ON CONFLICT (k) DO UPDATE SET v = hw.v + 1000;
INSERT INTO hwb VALUES (42, 0, 'x', 0) ON CONFLICT (k) DO UPDATE SET v = hwb.v + 1000;
INSERT INTO hw VALUES (6001, 1, 'y', 1) ON CONFLICT (k) DO NOTHING;
INSERT INTO hwb VALUES (6001, 1, 'y', 1) ON CONFLICT (k) DO NOTHING;
SELECT pg_hybrid.merge('hw_k');
SET enable_seqscan = off;
-- the same answers as btree, by every scan kind
CREATE FUNCTION hw_probe(tab regclass, mode text) RETURNS TABLE (n bigint, s numeric) LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('SET LOCAL enable_indexscan = %s', mode <> 'bitmap');
  EXECUTE format('SET LOCAL enable_bitmapscan = %s', mode = 'bitmap');
  RETURN QUERY EXECUTE format(
    'SELECT count(*), sum(x.v) FROM generate_series(1, 6100, 3) g, LATERAL (SELECT v FROM %s WHERE k = g) x', tab);
END $$;
SELECT m, (SELECT row(n, s) FROM hw_probe('hw', m)) = (SELECT row(n, s) FROM hw_probe('hwb', 'index')) AS same
FROM unnest(ARRAY['index', 'bitmap']) m;
SELECT (SELECT count(*) FROM hw WHERE t = 't3') = (SELECT count(*) FROM hwb WHERE t = 't3') AS prefix_same;
RESET enable_seqscan;

-- ------------------------------------------------------------------ VACUUM --
DELETE FROM hw WHERE k % 3 = 0;
DELETE FROM hwb WHERE k % 3 = 0;
VACUUM hw;
VACUUM hwb;
SET enable_seqscan = off;
SELECT m, (SELECT row(n, s) FROM hw_probe('hw', m)) = (SELECT row(n, s) FROM hw_probe('hwb', 'index')) AS same
FROM unnest(ARRAY['index', 'bitmap']) m;
RESET enable_seqscan;
SELECT hash_entries = (SELECT count(*) FROM hw) AS cold_complete FROM pg_hybrid.index_stats('hw_k');
SELECT pg_hybrid.verify('hw_k', heapallindexed => true);
SELECT pg_hybrid.verify('hw_tk', heapallindexed => true);
SELECT pg_hybrid.verify('hw_n', heapallindexed => true);
-- REINDEX and an unlogged table (no buckets until the first merge)
REINDEX INDEX hw_tk;
SELECT pg_hybrid.verify('hw_tk', heapallindexed => true);
CREATE UNLOGGED TABLE hu (k int4);
CREATE INDEX hu_k ON hu USING tiered_hash (k);
INSERT INTO hu SELECT generate_series(1, 500);
SELECT pg_hybrid.merge('hu_k');
SET enable_seqscan = off;
SELECT count(*) FROM hu WHERE k = 250;
RESET enable_seqscan;
SELECT hash_entries FROM pg_hybrid.index_stats('hu_k');
DROP TABLE hw, hwb, hu;
DROP FUNCTION hw_probe;
