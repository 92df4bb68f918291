-- The visibility map of a hasis table (src/hasis/vm.rs): VACUUM sets the
-- bits of the TID blocks of every extent whose versions are all visible to
-- every snapshot, index-only scans then skip those fetches as they do on
-- heap, and any change to such an extent clears its bits first. Every
-- answer is checked against a heap twin (vm_x).
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
CREATE EXTENSION IF NOT EXISTS pg_visibility;
SET pg_hybrid.hasis_compaction_worker = off;
SET max_parallel_workers_per_gather = 0;
-- snapshots_gone(): sql/include/snapshots_gone.sql
\getenv abs_srcdir PG_ABS_SRCDIR
\set include_file :abs_srcdir '/sql/include/snapshots_gone.sql'
\i :include_file
CREATE FUNCTION vm_twin_diff(q text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE qh text := replace(q, '@', 'h'); qx text := replace(q, '@', 'x'); d bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM (((%s) EXCEPT ALL (%s)) UNION ALL ((%s) EXCEPT ALL (%s))) d',
                 qh, qx, qx, qh) INTO d;
  RETURN d;
END $$;
-- The index-only scan of the plan and its heap fetches.
CREATE FUNCTION vm_fetches(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE j json; out text;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) ' || q INTO j;
  WITH RECURSIVE n(p) AS (SELECT j->0->'Plan' UNION ALL SELECT c FROM n, json_array_elements(n.p->'Plans') c)
  SELECT string_agg((p->>'Node Type') || ' on ' || (p->>'Relation Name') || ': ' || (p->>'Actual Rows') || ' rows, '
                    || (p->>'Heap Fetches') || ' heap fetches', '; ') INTO out
  FROM n WHERE p->>'Node Type' = 'Index Only Scan';
  RETURN out;
END $$;
CREATE FUNCTION vm_bits(tbl regclass) RETURNS bigint LANGUAGE sql AS
  $$ SELECT count(*) FROM pg_visibility_map(tbl) WHERE all_visible $$;

-- Loaded in bulk: each extent is closed when its column part is full, so
-- VACUUM leaves no delta part behind.
CREATE TABLE vm_h USING hasis WITH (autovacuum_enabled = off) AS
  SELECT g AS k, g % 100 AS a, 't' || g AS t FROM generate_series(1, 20000) g;
CREATE TABLE vm_x USING heap WITH (autovacuum_enabled = off) AS SELECT * FROM vm_h;
CREATE INDEX vm_h_ka ON vm_h (k, a);
CREATE INDEX vm_x_ka ON vm_x (k, a);
ANALYZE vm_h;
ANALYZE vm_x;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexscan = off;
SET pg_hybrid.enable_hasis_column_scan = off;

-- 1. Before any VACUUM no bit is set.
SELECT vm_bits('vm_h');
SELECT vm_twin_diff('SELECT k, a FROM vm_@ WHERE k BETWEEN 1000 AND 3000');

-- 2. VACUUM moves every row into column parts, marks them all visible and
-- sets the map bits of every extent (14 TID blocks each); relallvisible
-- counts them. The index-only scan fetches nothing now.
SELECT snapshots_gone();
VACUUM vm_h;
SELECT extents, delta_versions FROM pg_hybrid.table_stats('vm_h');
SELECT vm_bits('vm_h') = 14 * (SELECT extents FROM pg_hybrid.table_stats('vm_h')) AS every_extent_mapped;
SELECT relallvisible = vm_bits('vm_h') AS relallvisible_counts_bits FROM pg_class WHERE relname = 'vm_h';
SELECT vm_fetches('SELECT k, a FROM vm_h WHERE k BETWEEN 1000 AND 3000');
SELECT vm_twin_diff('SELECT k, a FROM vm_@ WHERE k BETWEEN 1000 AND 3000');
SELECT pg_hybrid.verify_table('vm_h');

-- 3. A delete clears the bits of its extent only, before it changes the
-- row: the deleted key's neighbours are fetched (and the deleted one is
-- not returned), rows of other extents are still not.
DELETE FROM vm_h WHERE k = 5;
DELETE FROM vm_x WHERE k = 5;
SELECT vm_bits('vm_h') = 14 * (SELECT extents - 1 FROM pg_hybrid.table_stats('vm_h')) AS one_extent_cleared;
SELECT vm_fetches('SELECT k, a FROM vm_h WHERE k BETWEEN 1 AND 10');
SELECT vm_fetches('SELECT k, a FROM vm_h WHERE k BETWEEN 19990 AND 20000');
SELECT vm_twin_diff('SELECT k, a FROM vm_@ WHERE k BETWEEN 1 AND 10');

-- 4. Updates (HOT and not), inserts and a rolled-back delete in mapped
-- extents: every answer stays the heap twin's.
UPDATE vm_h SET t = 'hot' WHERE k = 19995;
UPDATE vm_x SET t = 'hot' WHERE k = 19995;
UPDATE vm_h SET a = -a WHERE k BETWEEN 9000 AND 9010;
UPDATE vm_x SET a = -a WHERE k BETWEEN 9000 AND 9010;
INSERT INTO vm_h SELECT g, 7, 'new' FROM generate_series(20001, 20100) g;
INSERT INTO vm_x SELECT g, 7, 'new' FROM generate_series(20001, 20100) g;
BEGIN;
DELETE FROM vm_h WHERE k BETWEEN 12000 AND 12010;
ROLLBACK;
SELECT vm_twin_diff('SELECT k, a FROM vm_@ WHERE k > 0');
SELECT vm_twin_diff('SELECT k, a FROM vm_@ WHERE k BETWEEN 8990 AND 9020');
SELECT vm_twin_diff('SELECT count(*) FROM vm_@ WHERE k > 0');
SELECT pg_hybrid.verify_table('vm_h');

-- 5. One VACUUM sets the bits again, including those of the extent whose
-- dead slot it emptied (after its index entries went, as heap's second
-- pass does). The new rows sit in delta parts of full extents, which stay
-- unmapped.
SELECT snapshots_gone();
VACUUM vm_h;
SELECT vm_fetches('SELECT k, a FROM vm_h WHERE k BETWEEN 1 AND 10');
SELECT vm_fetches('SELECT k, a FROM vm_h WHERE k BETWEEN 8990 AND 9020');
SELECT vm_fetches('SELECT k, a FROM vm_h WHERE k BETWEEN 19990 AND 20100');
SELECT vm_twin_diff('SELECT k, a FROM vm_@ WHERE k > 0');
SELECT pg_hybrid.verify_table('vm_h');

-- 6. TRUNCATE drops the map with the data; the table works as new.
TRUNCATE vm_h;
SELECT vm_bits('vm_h');
INSERT INTO vm_h SELECT g, 1, 'again' FROM generate_series(1, 100) g;
SELECT pg_hybrid.verify_table('vm_h');

RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;
RESET pg_hybrid.enable_hasis_column_scan;
DROP TABLE vm_h, vm_x;
DROP FUNCTION vm_twin_diff(text), vm_fetches(text), vm_bits(regclass), snapshots_gone();
