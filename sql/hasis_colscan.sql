-- The hasis column scan (src/hasis/colscan): a custom scan that reads only
-- the columns a query needs. Every hasis table *_h has a heap twin *_x;
-- twin_diff(q) runs q on both (@ -> h, x) and returns the size of the
-- symmetric difference (must be 0) and the hasis side's row count.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.hasis_compaction_worker = off;
SET max_parallel_workers_per_gather = 0;
CREATE FUNCTION cs_twin_diff(q text, OUT diff bigint, OUT n bigint)
LANGUAGE plpgsql AS $$
DECLARE qh text := replace(q, '@', 'h'); qx text := replace(q, '@', 'x');
BEGIN
  EXECUTE format('SELECT count(*) FROM (((%s) EXCEPT ALL (%s)) UNION ALL ((%s) EXCEPT ALL (%s))) d',
                 qh, qx, qx, qh) INTO diff;
  EXECUTE format('SELECT count(*) FROM (%s) q', qh) INTO n;
END $$;
-- snapshots_gone(): sql/include/snapshots_gone.sql
\getenv abs_srcdir PG_ABS_SRCDIR
\set include_file :abs_srcdir '/sql/include/snapshots_gone.sql'
\i :include_file
-- What EXPLAIN ANALYZE says about the (first) column scan of q.
CREATE FUNCTION cs_explain(q text, OUT node text, OUT columns text, OUT parts_read bigint,
                           OUT parts_skipped bigint, OUT column_blocks bigint, OUT extents bigint,
                           OUT all_visible bigint)
LANGUAGE plpgsql AS $$
DECLARE j json; p json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) ' || q INTO j;
  p := j->0->'Plan';
  WHILE p->>'Node Type' <> 'Custom Scan' AND p->'Plans' IS NOT NULL LOOP
    p := p->'Plans'->0;
  END LOOP;
  node := coalesce(p->>'Custom Plan Provider', p->>'Node Type');
  columns := p->>'Columns';
  parts_read := (p->>'Column Parts Read')::bigint;
  parts_skipped := (p->>'Column Parts Skipped')::bigint;
  column_blocks := (p->>'Column Blocks Read')::bigint;
  extents := (p->>'Extents')::bigint;
  all_visible := (p->>'Column Parts All Visible')::bigint;
END $$;

-- 16 columns, like lineitem: keys, small ints, numerics, dates, flags, text.
CREATE TABLE wide_h (id int8, k2 int4, k3 int4, ln int2, qty numeric(15,2), price numeric(15,2),
    disc float8, tax float8, flag text, status "char", ship date, commit date, recv timestamptz,
    instr text, mode text, note text) USING hasis;
CREATE TABLE wide_x (LIKE wide_h) USING heap;
INSERT INTO wide_h SELECT g, g % 2000, g % 100, (g % 7)::int2, (g % 50) + 1, ((g * 37) % 100000) / 100.0,
    (g % 11) / 100.0, (g % 9) / 100.0, CASE g % 3 WHEN 0 THEN 'A' WHEN 1 THEN 'N' ELSE 'R' END,
    CASE WHEN g % 2 = 0 THEN 'O' ELSE 'F' END, '1995-01-01'::date + (g / 100)::int,
    '1995-02-01'::date + (g % 400), '1995-01-01 00:00+00'::timestamptz + g * interval '1 minute',
    CASE WHEN g % 10 = 0 THEN NULL ELSE 'DELIVER IN PERSON' END, 'MAIL', repeat('note ', g % 7) || g
  FROM generate_series(1, 60000) g;
INSERT INTO wide_x SELECT * FROM wide_h;
VACUUM ANALYZE wide_h;
VACUUM ANALYZE wide_x;

-- 1. Projection: the plan names the columns it reads; answers equal heap's.
EXPLAIN (COSTS OFF) SELECT sum(qty), avg(price) FROM wide_h WHERE ship < '1995-03-01';
SELECT * FROM cs_twin_diff('SELECT flag, status, sum(qty) AS q, sum(price * (1 - disc)) AS p, count(*) FROM wide_@ WHERE ship <= ''1996-06-01'' GROUP BY flag, status');
SELECT * FROM cs_twin_diff('SELECT sum(price * disc) FROM wide_@ WHERE ship >= ''1995-06-01'' AND ship < ''1996-06-01'' AND disc BETWEEN 0.04 AND 0.06 AND qty < 24');
SELECT * FROM cs_twin_diff('SELECT id, note FROM wide_@ WHERE instr IS NULL AND id % 7 = 3');
SELECT * FROM cs_twin_diff('SELECT mode, count(*), count(instr), max(note), min(recv) FROM wide_@ GROUP BY mode');
SELECT * FROM cs_twin_diff('SELECT count(*) FROM wide_@');
SELECT * FROM cs_twin_diff('SELECT w::text FROM wide_@ w WHERE id < 50');
-- One column of 16 reads a small share of the column blocks; all of them read every one.
SELECT node, columns, parts_skipped FROM cs_explain('SELECT sum(disc) FROM wide_h');
SELECT (SELECT column_blocks FROM cs_explain('SELECT sum(disc) FROM wide_h'))::float
     / (SELECT column_blocks FROM cs_explain('SELECT sum(disc), max(note), max(instr), max(price), max(qty) FROM wide_h')) < 0.5 AS fewer_blocks;
-- Buffers: the hasis column scan touches fewer blocks than heap's seq scan for 2 of 16 columns.
CREATE FUNCTION cs_buffers(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE j json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) ' || q INTO j;
  RETURN (j->0->'Plan'->>'Shared Hit Blocks')::bigint + (j->0->'Plan'->>'Shared Read Blocks')::bigint;
END $$;
SELECT cs_buffers('SELECT sum(disc), min(ship) FROM wide_h') < cs_buffers('SELECT sum(disc), min(ship) FROM wide_x') AS fewer_than_heap;

-- 2. Min/max skipping: ship grows with id, so a date range skips most column parts.
EXPLAIN (COSTS OFF) SELECT count(*) FROM wide_h WHERE ship BETWEEN '1995-03-01' AND '1995-03-10';
SELECT node, columns, parts_read < parts_skipped AS mostly_skipped, parts_skipped > 0 AS skipped
  FROM cs_explain('SELECT count(*) FROM wide_h WHERE ship BETWEEN ''1995-03-01'' AND ''1995-03-10''');
SELECT * FROM cs_twin_diff('SELECT id, ship FROM wide_@ WHERE ship BETWEEN ''1995-03-01'' AND ''1995-03-10''');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE id = 31234');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE 40000 < id AND ln = 3');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE disc > 0.095');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE id >= 59990 AND recv > ''1995-02-01''');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE id > 100000');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE k2::int8 < 3');
-- cross-type comparisons (int4 column, int8 value; date column, timestamp value)
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE k3 < 2::int8 AND ship < ''1995-01-05 12:00''::timestamp');
-- a parameter: a generic plan evaluates it at execution
PREPARE cs_p(int8, int8) AS SELECT count(*), sum(qty) FROM wide_h WHERE id BETWEEN $1 AND $2;
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE cs_p(100, 200);
EXECUTE cs_p(100, 200);
EXECUTE cs_p(59000, 70000);
EXECUTE cs_p(NULL, 10);
SELECT count(*), sum(qty) FROM wide_x WHERE id BETWEEN 100 AND 200;
SELECT count(*), sum(qty) FROM wide_x WHERE id BETWEEN 59000 AND 70000;
RESET plan_cache_mode;
DEALLOCATE cs_p;

-- 3. Rescans: the inner side of a nested loop, parameterized by the outer row.
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_material = off;
EXPLAIN (COSTS OFF) SELECT v.a, (SELECT count(*) FROM wide_h WHERE id BETWEEN v.a AND v.a + 25 AND ln > 2) FROM (VALUES (1::int8), (30000), (59990), (70000)) v(a);
SELECT * FROM cs_twin_diff('SELECT v.a, (SELECT count(*) FROM wide_@ WHERE id BETWEEN v.a AND v.a + 25 AND ln > 2) FROM (VALUES (1::int8), (30000), (59990), (70000)) v(a)');
SELECT * FROM cs_twin_diff('SELECT a.id, b.id FROM wide_@ a JOIN wide_@ b ON b.id = a.id + 1 WHERE a.id < 30 AND b.k3 < 20');
RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_material;
-- A SCROLL cursor gets a Material on top (the custom scan only goes forward).
BEGIN;
DECLARE cs_c SCROLL CURSOR FOR SELECT id FROM wide_h WHERE ln = 5 AND id < 200;
FETCH 2 FROM cs_c; FETCH BACKWARD 1 FROM cs_c; FETCH LAST FROM cs_c; FETCH PRIOR FROM cs_c;
COMMIT;

-- 4. Fresh rows through the delta part, MVCC and every isolation level.
INSERT INTO wide_h (id, qty, ship) VALUES (-1, 1, '2030-01-01'); INSERT INTO wide_x (id, qty, ship) VALUES (-1, 1, '2030-01-01');
SELECT id, qty, ship FROM wide_h WHERE ship > '2029-01-01';
UPDATE wide_h SET qty = qty + 1 WHERE id % 1000 = 0; UPDATE wide_x SET qty = qty + 1 WHERE id % 1000 = 0;
DELETE FROM wide_h WHERE id % 997 = 0; DELETE FROM wide_x WHERE id % 997 = 0;
SELECT * FROM cs_twin_diff('SELECT id, qty FROM wide_@ WHERE qty > 40');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*), sum(qty) FROM wide_h WHERE ln = 1;
SAVEPOINT s; INSERT INTO wide_h (id, ln, qty) VALUES (-2, 1, 5);
SELECT count(*), sum(qty) FROM wide_h WHERE ln = 1;
ROLLBACK TO s;
SELECT count(*), sum(qty) FROM wide_h WHERE ln = 1;
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM wide_h WHERE ln = 1 AND ship > '1995-06-01';
EXPLAIN (COSTS OFF) SELECT count(*) FROM wide_h WHERE ln = 1 AND ship > '1995-06-01';
COMMIT;
BEGIN ISOLATION LEVEL READ COMMITTED;
DELETE FROM wide_h WHERE id = -1;
SELECT count(*) FROM wide_h WHERE ship > '2029-01-01';
ROLLBACK;
SELECT count(*) FROM wide_h WHERE ship > '2029-01-01';
-- compaction moves delta rows into the column parts; answers stay equal
VACUUM wide_h;
SELECT * FROM cs_twin_diff('SELECT flag, status, sum(qty), count(*) FROM wide_@ GROUP BY flag, status');

-- 5. Columns added with a default, dropped columns, TOASTed values.
ALTER TABLE wide_h ADD COLUMN extra int DEFAULT 42; ALTER TABLE wide_x ADD COLUMN extra int DEFAULT 42;
ALTER TABLE wide_h DROP COLUMN mode; ALTER TABLE wide_x DROP COLUMN mode;
INSERT INTO wide_h (id, extra, note) VALUES (-5, 7, repeat(md5('x'), 500)); INSERT INTO wide_x (id, extra, note) VALUES (-5, 7, repeat(md5('x'), 500));
EXPLAIN (COSTS OFF) SELECT extra, count(*) FROM wide_h GROUP BY extra;
SELECT * FROM cs_twin_diff('SELECT extra, count(*) FROM wide_@ GROUP BY extra');
SELECT * FROM cs_twin_diff('SELECT id FROM wide_@ WHERE extra = 42 AND id < 10');
SELECT * FROM cs_twin_diff('SELECT id, length(note), md5(note) FROM wide_@ WHERE id < 0');

-- 6. Where the column scan is not used.
-- xmin/xmax need the tuple header: the sequential scan serves them.
EXPLAIN (COSTS OFF) SELECT xmin, id FROM wide_h WHERE id < 3;
-- ctid and tableoid come from the column scan's virtual tuples.
SELECT ctid = '(1,1)' AS first_slot, tableoid::regclass FROM wide_h WHERE id = 1;
-- row locks and UPDATE/DELETE targets
EXPLAIN (COSTS OFF) SELECT id FROM wide_h WHERE ln = 3 FOR UPDATE;
EXPLAIN (COSTS OFF) DELETE FROM wide_h WHERE ln = 99;
-- TABLESAMPLE keeps its sample scan
EXPLAIN (COSTS OFF) SELECT count(*) FROM wide_h TABLESAMPLE BERNOULLI (0);
SELECT count(*) FROM wide_h TABLESAMPLE BERNOULLI (0);
-- every column and no min/max qual: it would only tie, so it is not offered
EXPLAIN (COSTS OFF) SELECT * FROM wide_h WHERE note LIKE 'x%';
-- turned off
SET pg_hybrid.enable_hasis_column_scan = off;
EXPLAIN (COSTS OFF) SELECT sum(disc) FROM wide_h;
RESET pg_hybrid.enable_hasis_column_scan;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT sum(disc) FROM wide_h;
RESET enable_seqscan;
-- partitions of hasis tables get it per partition
CREATE TABLE part_h (id int8, d date, v float8) PARTITION BY RANGE (id);
CREATE TABLE part_h1 PARTITION OF part_h FOR VALUES FROM (0) TO (1000) USING hasis;
CREATE TABLE part_h2 PARTITION OF part_h FOR VALUES FROM (1000) TO (2000) USING hasis;
INSERT INTO part_h SELECT g, '2000-01-01'::date + g, g / 3.0 FROM generate_series(0, 1999) g;
EXPLAIN (COSTS OFF) SELECT sum(v) FROM part_h WHERE d > '2002-01-01';
SELECT sum(v), count(*) FROM part_h WHERE d > '2002-01-01';
SELECT sum(g / 3.0), count(*) FROM generate_series(0, 1999) g WHERE '2000-01-01'::date + g > '2002-01-01';


-- 7. Parallel plans: a partial path, the workers and the leader take extents
-- from PostgreSQL's block allocator.
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2; SET parallel_leader_participation = off;
EXPLAIN (COSTS OFF) SELECT flag, sum(qty), count(*) FROM wide_h WHERE ship < '1996-01-01' GROUP BY flag;
SELECT flag, sum(qty), count(*) FROM wide_h WHERE ship < '1996-01-01' GROUP BY flag ORDER BY flag;
SELECT flag, sum(qty), count(*) FROM wide_x WHERE ship < '1996-01-01' GROUP BY flag ORDER BY flag;
SELECT count(*), sum(id), min(recv), max(extra) FROM wide_h WHERE ln = 3 OR id < 0;
SELECT count(*), sum(id), min(recv), max(extra) FROM wide_x WHERE ln = 3 OR id < 0;
RESET parallel_leader_participation;
SELECT count(*), sum(k2) FROM wide_h WHERE disc < 0.05;
SELECT count(*), sum(k2) FROM wide_x WHERE disc < 0.05;
EXPLAIN (COSTS OFF) SELECT sum(v) FROM part_h WHERE d > '2002-01-01';
-- (workers add the floats in any order: rounded)
SELECT round(sum(v)::numeric, 4), count(*) FROM part_h WHERE d > '2002-01-01';
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
SET max_parallel_workers_per_gather = 0;

-- 8. Row-level security: the policy's quals run first; min/max skipping
-- only through leakproof comparisons.
CREATE ROLE regress_cs_reader;
CREATE TABLE rls_h (id int8, secret int4, d date, note text) USING hasis;
INSERT INTO rls_h SELECT g, g % 10, '2000-01-01'::date + g, repeat('n', 200) FROM generate_series(1, 5000) g;
ANALYZE rls_h;
ALTER TABLE rls_h ENABLE ROW LEVEL SECURITY;
CREATE POLICY rls_h_p ON rls_h USING (secret <> 3);
GRANT SELECT ON rls_h TO regress_cs_reader;
SET ROLE regress_cs_reader;
EXPLAIN (COSTS OFF) SELECT count(*), sum(id) FROM rls_h WHERE d < '2000-03-01';
SELECT count(*), sum(id) FROM rls_h WHERE d < '2000-03-01';
RESET ROLE;
SELECT count(*), sum(id) FROM rls_h WHERE d < '2000-03-01' AND secret <> 3;
DROP TABLE rls_h;
DROP ROLE regress_cs_reader;

-- 9. All-visible column parts: VACUUM marks a column part whose rows every
-- snapshot sees, and the scan reads none of its row headers. Any change to
-- one of its rows (delete, update, row lock) clears the mark first.
CREATE TABLE av_h (id int8, v int4, d date, note text) USING hasis;
CREATE TABLE av_x (LIKE av_h) USING heap;
INSERT INTO av_h SELECT g, g % 100, '2000-01-01'::date + g % 1000, 'n' || g FROM generate_series(1, 20000) g;
INSERT INTO av_x SELECT * FROM av_h;
CREATE INDEX av_h_id ON av_h (id);
CREATE INDEX av_x_id ON av_x (id);
-- Loaded by this transaction's inserts: not marked yet.
SELECT parts_read > 0 AS read, all_visible FROM cs_explain('SELECT sum(v) FROM av_h');
SELECT snapshots_gone();
VACUUM av_h;
SELECT all_visible = parts_read AS all_marked FROM cs_explain('SELECT sum(v) FROM av_h');
SELECT * FROM cs_twin_diff('SELECT id, v, d, note, ctid IS NOT NULL AS has_tid FROM av_@');
-- A rolled-back delete clears the mark of its part; the row stays.
BEGIN;
DELETE FROM av_h WHERE id = 5;
ROLLBACK;
SELECT parts_read - all_visible AS unmarked FROM cs_explain('SELECT sum(v) FROM av_h');
SELECT * FROM cs_twin_diff('SELECT id, v FROM av_@ WHERE v = 5');
-- Deletes, HOT updates, key updates and row locks on marked parts.
SELECT snapshots_gone();
VACUUM av_h;
DELETE FROM av_h WHERE id % 1000 = 7;
DELETE FROM av_x WHERE id % 1000 = 7;
UPDATE av_h SET v = v + 1 WHERE id % 997 = 1;
UPDATE av_x SET v = v + 1 WHERE id % 997 = 1;
UPDATE av_h SET id = -id WHERE id % 1999 = 3;
UPDATE av_x SET id = -id WHERE id % 1999 = 3;
SELECT count(*) FROM (SELECT id FROM av_h WHERE id BETWEEN 12000 AND 12010 FOR UPDATE) l;
SELECT all_visible < parts_read AS some_unmarked FROM cs_explain('SELECT sum(v) FROM av_h');
SELECT * FROM cs_twin_diff('SELECT id, v, d, note FROM av_@');
SELECT * FROM cs_twin_diff('SELECT v, count(*), sum(id) FROM av_@ GROUP BY v');
SELECT pg_hybrid.verify_table('av_h') > 0 AS verified;
-- VACUUM removes the dead versions and marks the parts again.
SELECT snapshots_gone();
VACUUM av_h;
SELECT all_visible = parts_read AS all_marked FROM cs_explain('SELECT sum(v) FROM av_h');
SELECT * FROM cs_twin_diff('SELECT id, v, d, note FROM av_@');
-- ADD COLUMN with a default: rows stored before it read the default; a
-- part mixing rows stored before and after is never marked.
ALTER TABLE av_h ADD COLUMN extra int DEFAULT 7;
ALTER TABLE av_x ADD COLUMN extra int DEFAULT 7;
INSERT INTO av_h SELECT g, g % 100, '2001-01-01', 'new' || g, g % 3 FROM generate_series(20001, 20300) g;
INSERT INTO av_x SELECT g, g % 100, '2001-01-01', 'new' || g, g % 3 FROM generate_series(20001, 20300) g;
UPDATE av_h SET v = v + 1 WHERE id % 500 = 11;
UPDATE av_x SET v = v + 1 WHERE id % 500 = 11;
VACUUM av_h;
SELECT * FROM cs_twin_diff('SELECT id, v, extra FROM av_@');
SELECT * FROM cs_twin_diff('SELECT extra, count(*), sum(v) FROM av_@ GROUP BY extra');
SELECT pg_hybrid.verify_table('av_h') > 0 AS verified;
DROP TABLE av_h, av_x;

-- A bulk load's extents hold column rows only, but for the last one's
-- delta part: the first VACUUM compacts that one and, of the others, reads
-- only the row headers, finds nothing to remove, move or freeze, and marks
-- them without rewriting them; VACUUM FREEZE still freezes them.
CREATE TABLE bl_h USING hasis AS
  SELECT g AS id, g % 100 AS v, 'row ' || g AS note FROM generate_series(1, 30000) g;
CREATE TABLE bl_x USING heap AS SELECT * FROM bl_h;
SELECT extents > 2 AS several_extents, delta_versions > 0 AS last_in_delta FROM pg_hybrid.table_stats('bl_h');
SELECT page_versions AS versions_loaded FROM pg_hybrid.table_stats('bl_h') \gset
SELECT all_visible FROM cs_explain('SELECT sum(v) FROM bl_h');
SELECT snapshots_gone();
VACUUM bl_h;
SELECT all_visible = parts_read AS all_marked FROM cs_explain('SELECT sum(v) FROM bl_h');
SELECT page_versions - :versions_loaded AS extents_rewritten, delta_versions FROM pg_hybrid.table_stats('bl_h');
SELECT * FROM cs_twin_diff('SELECT id, v, note FROM bl_@');
-- a row deleted since: that extent is compacted, the others stay marked
DELETE FROM bl_h WHERE id = 7;
DELETE FROM bl_x WHERE id = 7;
SELECT snapshots_gone();
VACUUM bl_h;
SELECT all_visible = parts_read AS all_marked FROM cs_explain('SELECT sum(v) FROM bl_h');
SELECT page_versions - :versions_loaded AS extents_rewritten FROM pg_hybrid.table_stats('bl_h');
SELECT * FROM cs_twin_diff('SELECT id, v, note FROM bl_@');
SELECT snapshots_gone();
VACUUM FREEZE bl_h;
SELECT age(relfrozenxid) < 5 AS frozen FROM pg_class WHERE relname = 'bl_h';
SELECT * FROM cs_twin_diff('SELECT id, v, note FROM bl_@');
SELECT pg_hybrid.verify_table('bl_h') > 0 AS verified;
DROP TABLE bl_h, bl_x;

-- Planning a query with quals on a hasis table takes the min/max quals'
-- btree families from the type cache: it scans no catalog once the caches
-- are warm (GetDefaultOpClass scanned pg_opclass at every planning).
CREATE FUNCTION cs_plan_times(n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    EXECUTE 'EXPLAIN SELECT id FROM wide_h WHERE id = 5 AND k2 < 3 AND ship > ''1995-01-01'' AND qty >= 1.5';
  END LOOP;
END $$;
BEGIN;
SELECT cs_plan_times(2);
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS opclass_scans_before FROM pg_stat_xact_sys_tables WHERE relname = 'pg_opclass' \gset
SELECT cs_plan_times(20);
-- 80 before (one scan per qual and planning); a cache reset from another
-- session's DDL may cost a few.
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) - :opclass_scans_before < 20 AS no_opclass_scan_per_planning FROM pg_stat_xact_sys_tables WHERE relname = 'pg_opclass';
COMMIT;
DROP FUNCTION cs_plan_times(int);

DROP TABLE wide_h, wide_x, part_h;
DROP FUNCTION cs_twin_diff(text), cs_explain(text), cs_buffers(text), snapshots_gone();
