-- hasis major compaction and VACUUM: rows move from delta parts into column
-- parts, every read path (seq, index, bitmap, TID, parallel) and every
-- change (UPDATE, DELETE, row locks, EvalPlanQual-free stamps) works on
-- rows in column parts, dead versions leave, their slots are reused, and
-- freezing advances relfrozenxid. Each hasis table has a heap twin.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
-- compaction only where the statements ask for it: no background worker
-- moving rows between the counts below
SET pg_hybrid.hasis_compaction_worker = off;
SET pg_hybrid.hasis_meter_compactions = on;
CREATE FUNCTION cmp_twins(h regclass, x regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE d bigint;
BEGIN
  EXECUTE format('SELECT count(*) FROM ((TABLE %s EXCEPT ALL TABLE %s) UNION ALL (TABLE %s EXCEPT ALL TABLE %s)) d', h, x, x, h) INTO d;
  RETURN d;
END $$;

-- snapshots_gone(): sql/include/snapshots_gone.sql
\getenv abs_srcdir PG_ABS_SRCDIR
\set include_file :abs_srcdir '/sql/include/snapshots_gone.sql'
\i :include_file

CREATE TABLE c_h (k int, v text, n float8, f bool) USING hasis WITH (autovacuum_enabled = off);
CREATE TABLE c_x (k int, v text, n float8, f bool) USING heap WITH (autovacuum_enabled = off);
INSERT INTO c_h SELECT g, 'value ' || g, g * 1.5, g % 3 = 0 FROM generate_series(1, 5000) g;
INSERT INTO c_x SELECT g, 'value ' || g, g * 1.5, g % 3 = 0 FROM generate_series(1, 5000) g;
CREATE UNIQUE INDEX c_h_k ON c_h (k); CREATE UNIQUE INDEX c_x_k ON c_x (k);
CREATE INDEX c_h_n ON c_h USING hash (n);
-- a bulk load: when a delta part fills, the load's own rows move into the
-- column part (the last extent's stay in the delta part until VACUUM)
SELECT extents, column_rows, delta_versions FROM pg_hybrid.table_stats('c_h');
SELECT snapshots_gone();
VACUUM c_h;
-- now every row is in a column part: a load stops at an extent's new-row
-- slots (2/5 of hasis_max_slots, 1628) before these narrow rows fill it
SELECT extents, column_rows, delta_versions, dead_slots FROM pg_hybrid.table_stats('c_h');
SELECT cmp_twins('c_h', 'c_x');
SELECT count(*), sum(k), sum(n), count(*) FILTER (WHERE f) FROM c_h;
-- reads of column rows through every path
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM c_h WHERE k IN (1, 2500, 5000) ORDER BY k;
SELECT count(*), sum(n) FROM c_h WHERE k BETWEEN 100 AND 4000;
SELECT * FROM c_h WHERE n = 3.0;
RESET enable_bitmapscan; SET enable_indexscan = off;
SELECT count(*), sum(n) FROM c_h WHERE k BETWEEN 100 AND 4000;
RESET enable_seqscan; RESET enable_indexscan;
SELECT k, v FROM c_h WHERE ctid = (SELECT ctid FROM c_h WHERE k = 4321);
SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SELECT count(*), sum(k) FROM c_h WHERE v LIKE 'value 4%';
RESET max_parallel_workers_per_gather; RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
-- changes of column rows: stamps in the column part, new versions in the delta part
UPDATE c_h SET n = n + 1 WHERE k % 10 = 0; UPDATE c_x SET n = n + 1 WHERE k % 10 = 0;
DELETE FROM c_h WHERE k % 7 = 0; DELETE FROM c_x WHERE k % 7 = 0;
BEGIN;
SELECT k FROM c_h WHERE k BETWEEN 11 AND 13 ORDER BY k FOR UPDATE;
UPDATE c_h SET v = 'locked then updated' WHERE k = 12; UPDATE c_x SET v = 'locked then updated' WHERE k = 12;
COMMIT;
SELECT cmp_twins('c_h', 'c_x');
SELECT column_rows, delta_versions FROM pg_hybrid.table_stats('c_h');
-- a rolled back update leaves the column row as it was
BEGIN; UPDATE c_h SET v = 'rolled back' WHERE k < 50; ROLLBACK;
SELECT count(*) FROM c_h WHERE v = 'rolled back';
-- VACUUM removes the dead versions, their index entries, and frees the slots
SELECT snapshots_gone();
VACUUM c_h;
SELECT column_rows, delta_versions, dead_slots, unused_slots > 0 AS slots_freed FROM pg_hybrid.table_stats('c_h');
SELECT cmp_twins('c_h', 'c_x');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*), sum(n) FROM c_h WHERE k BETWEEN 1 AND 5000;
SELECT count(*), sum(n) FROM c_x WHERE k BETWEEN 1 AND 5000;
RESET enable_seqscan; RESET enable_bitmapscan;
-- freed slots take new rows: the file does not grow
SELECT pg_relation_size('c_h') AS size_before \gset
INSERT INTO c_h SELECT g, 'again ' || g, g, false FROM generate_series(5001, 5700) g;
INSERT INTO c_x SELECT g, 'again ' || g, g, false FROM generate_series(5001, 5700) g;
SELECT pg_relation_size('c_h') = :size_before AS same_size;
SELECT cmp_twins('c_h', 'c_x');
-- compaction by inserts: rows of committed transactions move once the delta part fills
INSERT INTO c_h SELECT g, repeat('w', 200), g, true FROM generate_series(6001, 9000) g;
INSERT INTO c_x SELECT g, repeat('w', 200), g, true FROM generate_series(6001, 9000) g;
SELECT page_versions > extents AS compacted_by_inserts FROM pg_hybrid.table_stats('c_h');
-- what compactions wrote: whole blocks, and less than that on a compressing
-- drive (zero padding and unused delta blocks are free, the rest is LZ4)
SELECT compaction_written_bytes > 0 AS counted, compaction_written_bytes % 8192 = 0 AS whole_blocks,
       compaction_physical_bytes BETWEEN 1 AND compaction_written_bytes / 2 AS compressed
FROM pg_hybrid.table_stats('c_h');
SELECT cmp_twins('c_h', 'c_x');
-- VACUUM FREEZE freezes every row and advances relfrozenxid
SELECT snapshots_gone();
VACUUM FREEZE c_h;
SELECT age(relfrozenxid) < 5 AS frozen FROM pg_class WHERE relname = 'c_h';
SELECT cmp_twins('c_h', 'c_x');
-- after CLUSTER and TRUNCATE the stats start over
CLUSTER c_h USING c_h_k;
SELECT cmp_twins('c_h', 'c_x');
TRUNCATE c_h;
SELECT * FROM pg_hybrid.table_stats('c_h');
SELECT pg_hybrid.table_stats('c_x');
DROP TABLE c_h, c_x;
DROP FUNCTION cmp_twins(regclass, regclass);
-- verify_table: every hybrid page and every index entry
CREATE TABLE vt_h (k int PRIMARY KEY, v text) USING hasis WITH (autovacuum_enabled = off);
CREATE INDEX vt_h_v ON vt_h USING hybrid_btree (v);
INSERT INTO vt_h SELECT g, 'v' || g FROM generate_series(1, 3000) g;
UPDATE vt_h SET v = v || '!' WHERE k % 4 = 0;
SELECT pg_hybrid.verify_table('vt_h');
VACUUM vt_h;
DELETE FROM vt_h WHERE k % 3 = 0;
VACUUM vt_h;
SELECT pg_hybrid.verify_table('vt_h');
SELECT pg_hybrid.verify_table('pg_class');
DROP TABLE vt_h;
-- elastic_btree reads keys from heap pages: refused on hasis tables
CREATE TABLE el_h (k int8) USING hasis;
CREATE INDEX ON el_h USING elastic_btree (k);
DROP TABLE el_h;
-- A file truncated in place (the table was made in this transaction) gets
-- its extents again, at the same block numbers and page versions, with
-- other column layouts (here v and w trade widths): a point read must not
-- take a layout kept from before the truncation.
BEGIN;
CREATE TABLE tl_h (k int, v text, w text) USING hasis;
CREATE INDEX tl_h_k ON tl_h (k);
INSERT INTO tl_h SELECT g, repeat('v', 200), 'w' FROM generate_series(1, 3000) g;
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
SELECT k, length(v), length(w), left(v, 1), left(w, 1) FROM tl_h WHERE k IN (1, 150, 600, 1200) ORDER BY k;
TRUNCATE tl_h;
INSERT INTO tl_h SELECT g, 'v', repeat('w', 200) FROM generate_series(1, 3000) g;
SELECT k, length(v), length(w), left(v, 1), left(w, 1) FROM tl_h WHERE k IN (1, 150, 600, 1200) ORDER BY k;
SELECT count(*) FROM tl_h WHERE length(v) <> 1 OR length(w) <> 200;
COMMIT;
DROP TABLE tl_h;
-- Bulk fill: a bulk insert (CREATE TABLE AS, ALTER TABLE ... SET ACCESS
-- METHOD, COPY) stops filling an extent when its column part could not
-- take the next row, so after VACUUM no row is left in a delta part. A
-- 16-column table is the case: its column parts fill before the delta
-- parts do. A row-by-row INSERT ... SELECT leaves some there.
CREATE TABLE bf_src AS
  SELECT g AS a, g * 7 AS b, g % 13 AS c, g % 5 AS d, (g % 97)::numeric / 7 AS e, (g % 89)::numeric / 3 AS f,
         (g % 11)::numeric AS h, (g % 3)::numeric AS i, chr(65 + g % 3) AS j, chr(70 + g % 2) AS k,
         date '1992-01-01' + g % 2500 AS l, date '1992-01-01' + g % 2400 AS m, date '1992-01-01' + g % 2600 AS n,
         'DELIVER IN PERSON' AS o, 'TRUCK' AS p, md5(g::text) || ' comment' AS q
  FROM generate_series(1, 20000) g;
CREATE TABLE bf_ctas USING hasis AS SELECT * FROM bf_src;
CREATE TABLE bf_alter AS SELECT * FROM bf_src;
ALTER TABLE bf_alter SET ACCESS METHOD hasis;
CREATE TABLE bf_copy (LIKE bf_src) USING hasis;
-- (the file is the server's, in its data directory: psql runs as another user)
COPY bf_src TO PROGRAM 'cat > pg_hybrid_bf_src.csv' csv;
COPY bf_copy FROM 'pg_hybrid_bf_src.csv' csv;
COPY (SELECT) TO PROGRAM 'rm -f pg_hybrid_bf_src.csv';
-- COPY writes each batch straight into a column part (compactions that
-- append it): no delta version even before VACUUM.
SELECT column_rows, delta_versions FROM pg_hybrid.table_stats('bf_copy');
CREATE TABLE bf_rows (LIKE bf_src) USING hasis;
INSERT INTO bf_rows SELECT * FROM bf_src;
SELECT snapshots_gone();
VACUUM bf_ctas, bf_alter, bf_copy, bf_rows;
SELECT t, column_rows, delta_versions, extents > 1 AS several_extents
  FROM unnest(ARRAY['bf_ctas', 'bf_alter', 'bf_copy']) t, pg_hybrid.table_stats(t::regclass) ORDER BY t;
SELECT delta_versions > 0 AS row_by_row_leaves_delta_rows FROM pg_hybrid.table_stats('bf_rows');
SELECT t, (SELECT count(*) FROM (SELECT * FROM bf_src EXCEPT ALL SELECT * FROM bf_ctas) x) AS missing_ctas,
       (SELECT count(*) FROM (SELECT * FROM bf_copy EXCEPT ALL SELECT * FROM bf_src) x) AS extra_copy,
       (SELECT count(*) FROM (SELECT * FROM bf_src EXCEPT ALL SELECT * FROM bf_alter) x) AS missing_alter
  FROM (VALUES ('bf')) v(t);
SELECT pg_hybrid.verify_table('bf_copy');
DROP TABLE bf_src, bf_ctas, bf_alter, bf_copy, bf_rows;
-- A COPY that fails half-way (a unique violation) leaves its batches dead
-- in column parts; the index and the table agree, VACUUM frees them, and
-- the next COPY fills the table.
CREATE TABLE cu_h (k int PRIMARY KEY, v text) USING hasis;
INSERT INTO cu_h VALUES (15000, 'first');
COPY cu_h FROM PROGRAM 'seq 1 20000 | sed ''s/$/,v/''' csv;
SELECT count(*), min(k), max(k), min(v) FROM cu_h;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM cu_h WHERE k BETWEEN 1 AND 20000;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT pg_hybrid.verify_table('cu_h');
SELECT snapshots_gone();
VACUUM cu_h;
SELECT column_rows, delta_versions FROM pg_hybrid.table_stats('cu_h');
DELETE FROM cu_h;
COPY cu_h FROM PROGRAM 'seq 1 20000 | sed ''s/$/,w/''' csv;
SELECT count(*), sum(k), count(DISTINCT v) FROM cu_h;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*), sum(k) FROM cu_h WHERE k > 10000;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT pg_hybrid.verify_table('cu_h');
DROP TABLE cu_h;
DROP FUNCTION snapshots_gone();
