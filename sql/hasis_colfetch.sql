-- Column-aware fetches (src/hasis/colscan/fetch.rs): index scans and bitmap
-- heap scans of a hasis table read only the columns the plan uses, the
-- others come back NULL where nothing looks. Every query here runs on the
-- hasis table (cf_h) and its heap twin (cf_x) with the same plan shape;
-- the answers must be equal, with the feature on and off.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.hasis_compaction_worker = off;
SET max_parallel_workers_per_gather = 0;
CREATE FUNCTION cf_twin_diff(q text, OUT diff bigint, OUT n bigint)
LANGUAGE plpgsql AS $$
DECLARE qh text := replace(q, '@', 'h'); qx text := replace(q, '@', 'x');
BEGIN
  EXECUTE format('SELECT count(*) FROM (((%s) EXCEPT ALL (%s)) UNION ALL ((%s) EXCEPT ALL (%s))) d',
                 qh, qx, qx, qh) INTO diff;
  EXECUTE format('SELECT count(*) FROM (%s) q', qh) INTO n;
END $$;
-- The plan's node types, outermost first (to show which scan ran).
CREATE FUNCTION cf_nodes(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE j json; out text := '';
BEGIN
  EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || q INTO j;
  SELECT string_agg(t, ' > ') INTO out FROM (
    WITH RECURSIVE n(p, d) AS (SELECT j->0->'Plan', 0 UNION ALL
      SELECT c, d + 1 FROM n, json_array_elements(n.p->'Plans') c)
    SELECT (p->>'Node Type') || coalesce(' ' || (p->>'Relation Name'), '') AS t FROM n ORDER BY d) s;
  RETURN out;
END $$;
-- Shared buffers the whole plan touched (hit or read).
CREATE FUNCTION cf_buffers(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE j json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) ' || q INTO j;
  RETURN (j->0->'Plan'->>'Shared Hit Blocks')::bigint + (j->0->'Plan'->>'Shared Read Blocks')::bigint;
END $$;

-- snapshots_gone(): sql/include/snapshots_gone.sql
\getenv abs_srcdir PG_ABS_SRCDIR
\set include_file :abs_srcdir '/sql/include/snapshots_gone.sql'
\i :include_file

CREATE TABLE cf_h (k int8, g int4, c3 int4, c4 numeric(12,2), c5 float8, c6 date, c7 text, c8 text,
    c9 int4, c10 timestamptz, c11 text, c12 int2, c13 text, c14 float8, c15 text, c16 text) USING hasis;
CREATE TABLE cf_x (LIKE cf_h) USING heap;
INSERT INTO cf_h SELECT g, g % 100, g % 7, (g % 500) / 4.0, g / 3.0, '2000-01-01'::date + g % 900,
    'seven ' || g % 13, CASE WHEN g % 9 = 0 THEN NULL ELSE repeat('x', g % 40) END, (g * 7) % 5000 + 1,
    '2020-01-01 00:00+00'::timestamptz + g * interval '1 second', md5(g::text), (g % 300)::int2,
    'thirteen', g * 1.5, repeat('p', g % 17), 'last ' || g
  FROM generate_series(1, 20000) g;
INSERT INTO cf_x SELECT * FROM cf_h;
CREATE INDEX cf_h_k ON cf_h (k);
CREATE INDEX cf_x_k ON cf_x (k);
CREATE INDEX cf_h_g ON cf_h (g);
CREATE INDEX cf_x_g ON cf_x (g);
VACUUM ANALYZE cf_h;
VACUUM ANALYZE cf_x;
SELECT column_rows, delta_versions FROM pg_hybrid.table_stats('cf_h');
CREATE TABLE cf_probe AS SELECT (g * 37) % 20000 + 1 AS k, g AS n, g % 5 + 1 AS m FROM generate_series(1, 300) g;
ANALYZE cf_probe;

SET enable_seqscan = off;
SET enable_bitmapscan = off;
-- 1. A plain index scan with a projection and a qual on another column.
SELECT cf_nodes('SELECT k, c5 FROM cf_h WHERE k BETWEEN 100 AND 400 AND c3 = 2');
SELECT * FROM cf_twin_diff('SELECT k, c5 FROM cf_@ WHERE k BETWEEN 100 AND 400 AND c3 = 2');
-- 2. Nested loop, inner index scan (its target list is every column: a
-- "physical" one; the join uses three).
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_memoize = off; SET enable_material = off;
SELECT cf_nodes('SELECT p.n, i.c7, i.c12 FROM cf_probe p JOIN cf_h i ON i.k = p.k');
SELECT * FROM cf_twin_diff('SELECT p.n, i.c7, i.c12 FROM cf_probe p JOIN cf_@ i ON i.k = p.k');
-- the join qual and the outer side's columns too
SELECT * FROM cf_twin_diff('SELECT p.n, i.c16 FROM cf_probe p JOIN cf_@ i ON i.k = p.k AND i.c9 > p.n * 10');
SELECT * FROM cf_twin_diff('SELECT p.n, i.k FROM cf_probe p LEFT JOIN cf_@ i ON i.k = p.k + 1 AND i.c3 < 3 WHERE p.n < 50');
-- the index scan as the outer side, its columns feeding the inner's parameter
SELECT * FROM cf_twin_diff('SELECT o.k, o.c11, i.c13 FROM cf_@ o JOIN cf_@ i ON i.k = o.c9 WHERE o.k < 300');
-- 3. Memoize and Material between the join and the scan.
SET enable_memoize = on;
SELECT cf_nodes('SELECT p.n, i.c4 FROM cf_probe p JOIN cf_h i ON i.k = p.m');
SELECT * FROM cf_twin_diff('SELECT p.n, i.c4, i.k FROM cf_probe p JOIN cf_@ i ON i.k = p.m');
SELECT * FROM cf_twin_diff('SELECT p.n, i.c4, i.k FROM cf_probe p JOIN cf_@ i ON i.g = p.n % 100 WHERE p.n < 40');
SET enable_memoize = off; SET enable_material = on;
SELECT cf_nodes('SELECT p.n, i.c15 FROM cf_probe p JOIN cf_h i ON i.k < 30 AND i.c3 = p.n % 7 WHERE p.n < 20');
SELECT * FROM cf_twin_diff('SELECT p.n, i.c15 FROM cf_probe p JOIN cf_@ i ON i.k < 30 AND i.c3 = p.n % 7 WHERE p.n < 20');
RESET enable_material;
-- 4. Hash and merge joins over index scans; a sort and an aggregate above one.
SET enable_hashjoin = on; SET enable_nestloop = off;
SELECT * FROM cf_twin_diff('SELECT p.n, i.c6 FROM cf_probe p JOIN cf_@ i ON i.k = p.k WHERE i.k < 10000');
SET enable_hashjoin = off; SET enable_mergejoin = on;
SELECT * FROM cf_twin_diff('SELECT p.n, i.c10 FROM cf_probe p JOIN cf_@ i ON i.k = p.k');
RESET enable_nestloop; RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_memoize;
SELECT * FROM cf_twin_diff('SELECT k, c8 FROM cf_@ WHERE k < 2000 ORDER BY c14 DESC LIMIT 25');
SELECT * FROM cf_twin_diff('SELECT c3, sum(c4), max(c11), count(c8) FROM cf_@ WHERE k < 5000 GROUP BY c3');
SELECT * FROM cf_twin_diff('SELECT DISTINCT c7 FROM cf_@ WHERE g = 5');
SELECT * FROM cf_twin_diff('(SELECT k, c12 FROM cf_@ WHERE k < 100 ORDER BY c12, k FETCH FIRST 5 ROWS WITH TIES)');
-- 5. Whole-row references, subplans, CTEs and subqueries.
SELECT * FROM cf_twin_diff('SELECT i::text FROM cf_@ i WHERE k < 20');
SELECT * FROM cf_twin_diff('SELECT k, (SELECT max(c11) FROM cf_@ x WHERE x.k = i.c9) FROM cf_@ i WHERE k < 50');
SELECT * FROM cf_twin_diff('SELECT k FROM cf_@ i WHERE k < 500 AND EXISTS (SELECT 1 FROM cf_probe p WHERE p.k = i.c9)');
SELECT * FROM cf_twin_diff('WITH w AS MATERIALIZED (SELECT * FROM cf_@ WHERE k < 300) SELECT c3, count(c16) FROM w GROUP BY c3');
SELECT * FROM cf_twin_diff('SELECT s.k, s.c13 FROM (SELECT * FROM cf_@ WHERE k < 300 OFFSET 0) s WHERE s.c3 = 1');
SELECT * FROM cf_twin_diff('SELECT k, c5 FROM cf_@ WHERE k < 100 UNION ALL SELECT k, c5 FROM cf_@ WHERE g = 3');
-- 6. Bitmap heap scans (recheck quals on columns the target list does not name).
SET enable_bitmapscan = on; SET enable_indexscan = off;
SELECT cf_nodes('SELECT k, c11 FROM cf_h WHERE g = 7 OR k < 40');
SELECT * FROM cf_twin_diff('SELECT k, c11 FROM cf_@ WHERE g = 7 OR k < 40');
SELECT * FROM cf_twin_diff('SELECT count(*) FROM cf_@ WHERE g IN (1, 2, 3) AND c8 IS NULL');
-- 6b. Exact pages from a btree are read without the index quals' columns
-- (no recheck; g here). Lossy pages, and the pages of a bitmap from an AM
-- that asks for rechecks (6c), are read with them; a lossy bitmap needs
-- more TID blocks than a test table has even at the smallest work_mem.
SELECT * FROM cf_twin_diff('SELECT k, c11 FROM cf_@ WHERE g < 60');
SELECT * FROM cf_twin_diff('SELECT k FROM cf_@ WHERE g < 60 AND c3 = 2');
-- 6c. A hash index asks for a recheck of every row it returns (it compares
-- hash codes): its scans read the key column even where nothing else does.
CREATE INDEX cf_h_c9 ON cf_h USING hash (c9);
CREATE INDEX cf_x_c9 ON cf_x USING hash (c9);
SELECT cf_nodes('SELECT k, c5 FROM cf_h WHERE c9 = 78');
SELECT * FROM cf_twin_diff('SELECT k, c5 FROM cf_@ WHERE c9 = 78');
SELECT * FROM cf_twin_diff('SELECT p.n, i.c7 FROM cf_probe p JOIN cf_@ i ON i.c9 = p.k WHERE p.n < 40');
SET enable_bitmapscan = off; RESET enable_indexscan;
SELECT cf_nodes('SELECT k, c5 FROM cf_h WHERE c9 = 78');
SELECT * FROM cf_twin_diff('SELECT k, c5 FROM cf_@ WHERE c9 = 78');
SET enable_bitmapscan = on;
DROP INDEX cf_h_c9, cf_x_c9;
RESET enable_indexscan;
-- 7. A cursor: rows fetched forwards and backwards, then its current row updated.
BEGIN;
DECLARE cf_cur SCROLL CURSOR FOR SELECT k, c7 FROM cf_h WHERE k BETWEEN 10 AND 20;
FETCH 3 FROM cf_cur;
FETCH BACKWARD 1 FROM cf_cur;
UPDATE cf_h SET c16 = 'updated through the cursor' WHERE CURRENT OF cf_cur;
SELECT k, c7, c16 FROM cf_h WHERE k = 11;
SELECT count(*) = 20000 AS all_columns_kept FROM cf_h WHERE c11 IS NOT NULL AND c13 = 'thirteen';
ROLLBACK;
-- 7b. NOT NULL columns the plan does not read, before one it does, under
-- JIT-compiled deforming (which takes NOT NULL columns to be present).
CREATE TABLE cf_nn_h (id int NOT NULL, d date NOT NULL, u uuid NOT NULL, name text NOT NULL, t text, n numeric NOT NULL) USING hasis;
CREATE TABLE cf_nn_x (LIKE cf_nn_h) USING heap;
INSERT INTO cf_nn_h SELECT g, '2001-01-01'::date + g, md5(g::text)::uuid, 'n' || g, 't' || g % 50, g / 7.0
  FROM generate_series(1, 5000) g;
INSERT INTO cf_nn_x SELECT * FROM cf_nn_h;
CREATE INDEX ON cf_nn_h USING hash (t);
CREATE INDEX ON cf_nn_x USING hash (t);
VACUUM ANALYZE cf_nn_h;
VACUUM ANALYZE cf_nn_x;
CREATE TEMP TABLE cf_nn_v AS SELECT t AS v, count(*) AS n FROM cf_nn_x GROUP BY 1;
SET jit = on; SET jit_above_cost = 0; SET jit_inline_above_cost = 0; SET jit_optimize_above_cost = 0;
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
SELECT count(*) AS wrong_counts FROM cf_nn_v WHERE n <> (SELECT count(*) FROM cf_nn_h WHERE t = cf_nn_v.v);
SELECT * FROM cf_twin_diff('SELECT v.v, (SELECT max(n) FROM cf_nn_@ WHERE t = v.v) FROM cf_nn_v v');
SELECT * FROM cf_twin_diff('SELECT p.n, i.t, i.n FROM cf_probe p JOIN cf_nn_@ i ON i.t = ''t'' || p.n % 50 WHERE p.n < 10');
RESET jit; RESET jit_above_cost; RESET jit_inline_above_cost; RESET jit_optimize_above_cost;
RESET enable_seqscan; RESET enable_bitmapscan; RESET enable_hashjoin; RESET enable_mergejoin;
DROP TABLE cf_nn_h, cf_nn_x, cf_nn_v;
-- 8. Fewer blocks: the nested loop's inner fetches read 3 of 16 columns.
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_memoize = off; SET enable_material = off;
SET pg_hybrid.enable_hasis_column_fetch = off;
SELECT cf_buffers('SELECT p.n, i.c7, i.c12 FROM cf_probe p JOIN cf_h i ON i.k = p.k') AS all_columns \gset
SELECT * FROM cf_twin_diff('SELECT p.n, i.c7, i.c12 FROM cf_probe p JOIN cf_@ i ON i.k = p.k');
SELECT * FROM cf_twin_diff('SELECT k, c11 FROM cf_@ WHERE g = 7 OR k < 40');
RESET pg_hybrid.enable_hasis_column_fetch;
SELECT cf_buffers('SELECT p.n, i.c7, i.c12 FROM cf_probe p JOIN cf_h i ON i.k = p.k') AS used_columns \gset
-- Against fetches of no column (the index descents, extent headers and
-- row headers all three share): fetches keep an extent's blocks pinned
-- from one probe to the next, so totals alone mostly count the index.
SELECT cf_buffers('SELECT p.n FROM cf_probe p JOIN cf_h i ON i.k = p.k') AS no_columns \gset
SELECT :used_columns - :no_columns < (:all_columns - :no_columns) / 2 AS fewer_blocks;
RESET ALL;
-- 8b. A fetch of a row in an all-visible column part reads no row header
-- unless the plan reads xmin (or xmax, cmin, cmax); then it gets the real
-- one, the sequential scan's.
SET enable_bitmapscan = off; SET enable_indexscan = off;
CREATE TEMP TABLE cf_xmin AS SELECT k, xmin::text AS x FROM cf_h;
RESET enable_bitmapscan; RESET enable_indexscan;
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_memoize = off; SET enable_material = off;
SELECT cf_nodes('SELECT p.n, i.c7, i.xmin FROM cf_probe p JOIN cf_h i ON i.k = p.k') AS plan;
SELECT cf_buffers('SELECT p.n, i.c7 FROM cf_probe p JOIN cf_h i ON i.k = p.k') AS no_xmin \gset
SELECT cf_buffers('SELECT p.n, i.c7, i.xmin FROM cf_probe p JOIN cf_h i ON i.k = p.k') AS with_xmin \gset
SELECT :no_xmin < :with_xmin AS fewer_blocks_without_xmin;
CREATE TEMP TABLE cf_probed AS SELECT i.k, i.xmin::text AS x FROM cf_probe p JOIN cf_h i ON i.k = p.k;
SELECT * FROM cf_twin_diff('SELECT p.n, i.c7, i.c12 FROM cf_probe p JOIN cf_@ i ON i.k = p.k');
RESET ALL;
SELECT count(*) AS probes, count(*) FILTER (WHERE p.x <> x.x) AS xmin_differs FROM cf_probed p JOIN cf_xmin x USING (k);
DROP TABLE cf_xmin, cf_probed;
-- 8c. The same for a row HOT-updated before a VACUUM moved its new
-- version into the column part: its index entry names a redirect, whose
-- target is an all-visible column row. The fetch returns that row with the
-- target's TID (the sequential scan's), and UPDATE and DELETE through the
-- index find it there.
CREATE TABLE cf_rh (k int8 PRIMARY KEY, v int4, pad text) USING hasis WITH (autovacuum_enabled = off);
CREATE TABLE cf_rx (LIKE cf_rh INCLUDING INDEXES) USING heap;
INSERT INTO cf_rh SELECT g, g, repeat('p', g % 30) FROM generate_series(1, 3000) g;
INSERT INTO cf_rx SELECT * FROM cf_rh;
UPDATE cf_rh SET v = v + 1000000 WHERE k % 3 = 0;
UPDATE cf_rx SET v = v + 1000000 WHERE k % 3 = 0;
-- VACUUM compacts only what no snapshot sees: so the counts below do not
-- depend on timing, wait until no other session holds one.
SELECT snapshots_gone();
VACUUM cf_rh; VACUUM cf_rx;
SELECT redirect_slots > 0 AS redirects, delta_versions = 0 AS no_delta FROM pg_hybrid.table_stats('cf_rh');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT cf_nodes('SELECT v FROM cf_rh WHERE k = 300') AS plan;
SELECT * FROM cf_twin_diff('SELECT k, v FROM cf_r@ WHERE k IN (3, 4, 300, 301, 2999, 3000)');
SELECT cf_buffers('SELECT v FROM cf_rh WHERE k = 300') AS redirect_no_xmin \gset
SELECT cf_buffers('SELECT v, xmin FROM cf_rh WHERE k = 300') AS redirect_with_xmin \gset
SELECT :redirect_no_xmin < :redirect_with_xmin AS fewer_blocks_without_xmin;
CREATE TEMP TABLE cf_rctid AS SELECT k, ctid AS c FROM cf_rh WHERE k BETWEEN 290 AND 310;
RESET enable_seqscan; SET enable_indexscan = off;
CREATE TEMP TABLE cf_rseq AS SELECT k, ctid AS c FROM cf_rh WHERE k BETWEEN 290 AND 310;
RESET enable_indexscan;
SELECT count(*) AS rows, count(*) FILTER (WHERE i.c <> s.c) AS ctid_differs FROM cf_rctid i JOIN cf_rseq s USING (k);
SET enable_seqscan = off; SET enable_indexscan = off; SET pg_hybrid.enable_hasis_column_scan = off;
SELECT cf_nodes('SELECT v FROM cf_rh WHERE k IN (300, 303)') AS plan;
SELECT * FROM cf_twin_diff('SELECT k, v FROM cf_r@ WHERE k IN (3, 4, 300, 301, 2999, 3000)');
RESET ALL;
SET enable_seqscan = off; SET enable_bitmapscan = off;
UPDATE cf_rh SET v = -v WHERE k = 300; UPDATE cf_rx SET v = -v WHERE k = 300;
DELETE FROM cf_rh WHERE k = 303; DELETE FROM cf_rx WHERE k = 303;
SELECT * FROM cf_twin_diff('SELECT k, v FROM cf_r@ WHERE k BETWEEN 290 AND 310');
RESET ALL;
SELECT * FROM cf_twin_diff('SELECT k, v, pad FROM cf_r@');
SELECT pg_hybrid.verify_table('cf_rh');
DROP TABLE cf_rh, cf_rx, cf_rctid, cf_rseq;
-- 9. Fetch costing (cost.rs): an index scan of the hasis table by an
-- uncorrelated column costs more with fetch costing on than off, and more
-- the more columns it reads; by its correlated key (rows in index order
-- share their blocks), about as off.
CREATE FUNCTION cf_cost(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE j json;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO j;
  RETURN (j->0->'Plan'->>'Total Cost')::float8;
END $$;
SET enable_seqscan = off; SET enable_bitmapscan = off;
ANALYZE cf_h;
SELECT cf_nodes('SELECT c7 FROM cf_h WHERE g = 5') AS plan;
SELECT cf_cost('SELECT c7 FROM cf_h WHERE g = 5') AS one_column, cf_cost('SELECT * FROM cf_h WHERE g = 5') AS all_columns,
       cf_cost('SELECT * FROM cf_h WHERE k < 300') AS by_key \gset
SET pg_hybrid.hasis_fetch_costing = off;
SELECT cf_cost('SELECT c7 FROM cf_h WHERE g = 5') AS one_column_off, cf_cost('SELECT * FROM cf_h WHERE g = 5') AS all_columns_off,
       cf_cost('SELECT * FROM cf_h WHERE k < 300') AS by_key_off \gset
SELECT :one_column > 1.5 * :one_column_off AS fetches_cost_more, :all_columns > :one_column AS more_columns_cost_more,
       :all_columns_off = :one_column_off AS off_as_heap, :by_key < 1.2 * :by_key_off AS correlated_about_as_heap;
RESET ALL;
DROP TABLE cf_h, cf_x, cf_probe;
DROP FUNCTION cf_twin_diff(text), cf_nodes(text), cf_buffers(text), cf_cost(text), snapshots_gone();
