-- hasis table access method. Every hasis table *_h has a heap twin *_x that
-- gets the same statements. twin_diff(q) runs q with @ replaced by h and by x
-- and returns the size of the symmetric difference (must be 0) and the row
-- count of the hasis side.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.hasis_compaction_worker = off;
CREATE FUNCTION twin_diff(q text, h text DEFAULT 'h', x text DEFAULT 'x', OUT diff bigint, OUT n bigint)
LANGUAGE plpgsql AS $$
DECLARE qh text := replace(q, '@', h); qx text := replace(q, '@', x);
BEGIN
  EXECUTE format('SELECT count(*) FROM (((%s) EXCEPT ALL (%s)) UNION ALL ((%s) EXCEPT ALL (%s))) d',
                 qh, qx, qx, qh) INTO diff;
  EXECUTE format('SELECT count(*) FROM (%s) q', qh) INTO n;
END $$;
-- the row estimate of the top plan node
CREATE FUNCTION explain_rows(q text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE l text;
BEGIN
  FOR l IN EXECUTE 'EXPLAIN ' || q LOOP
    RETURN (regexp_match(l, 'rows=(\d+)'))[1]::int;
  END LOOP;
END $$;
CREATE FUNCTION am_of(r regclass) RETURNS name LANGUAGE sql AS
  $$ SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.oid = r $$;

-- 1. creating hasis tables: USING, default_table_access_method, SET ACCESS METHOD, CTAS
CREATE TABLE am_h (k int, v text) USING hasis; CREATE TABLE am_x (k int, v text) USING heap;
SET default_table_access_method = hasis;
CREATE TABLE am_d (k int, v text);
RESET default_table_access_method;
CREATE TABLE am_m (k int, v text) USING heap;
SELECT count(*) FROM am_h;
INSERT INTO am_h VALUES (0, 'zero'); INSERT INTO am_x VALUES (0, 'zero');
INSERT INTO am_d VALUES (0, 'zero');
INSERT INTO am_m VALUES (0, 'zero');
INSERT INTO am_h SELECT g, 'v' || g FROM generate_series(1, 100) g;
INSERT INTO am_x SELECT g, 'v' || g FROM generate_series(1, 100) g;
INSERT INTO am_d SELECT g, 'v' || g FROM generate_series(1, 100) g;
INSERT INTO am_m SELECT g, 'v' || g FROM generate_series(1, 100) g;
CREATE TABLE am_c USING hasis AS SELECT * FROM am_x;
ALTER TABLE am_m SET ACCESS METHOD hasis;
SELECT relname, am_of(oid) FROM pg_class WHERE relname IN ('am_h', 'am_x', 'am_d', 'am_m', 'am_c') ORDER BY 1;
SELECT * FROM am_h WHERE k < 3 ORDER BY k;
SELECT * FROM twin_diff('TABLE am_@');
SELECT * FROM twin_diff('TABLE am_@', 'd', 'x');
SELECT * FROM twin_diff('TABLE am_@', 'c', 'x');
SELECT * FROM twin_diff('TABLE am_@', 'm', 'x');
UPDATE am_m SET v = v || '!' WHERE k % 2 = 0;
UPDATE am_x SET v = v || '!' WHERE k % 2 = 0;
ALTER TABLE am_m SET ACCESS METHOD heap;
SELECT am_of('am_m');
SELECT * FROM twin_diff('TABLE am_@', 'm', 'x');

-- 2. column types, NULLs, special float values
CREATE TYPE hasis_pair AS (a int, b text);
CREATE VIEW ty_src AS VALUES
  (1, 1::int2, 1::int4, 1::int8, 1.5::float4, 2.25::float8, 123.4560::numeric, 'text'::text,
   'varchar'::varchar(20), 'ab'::char(5), true, '2024-02-29'::date, '2024-02-29 12:34:56.789'::timestamp,
   '2024-02-29 12:34:56.789+02'::timestamptz, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid,
   '\xdeadbeef'::bytea, '{"a": [1, 2, {"b": null}], "c": "d"}'::jsonb, '{1,2,3}'::int[],
   ROW(1, 'one')::hasis_pair),
  (2, -32768, -2147483648, -9223372036854775808, 'NaN', 'NaN', 'NaN', '', '', '', false,
   '-infinity', '-infinity', '-infinity', '00000000-0000-0000-0000-000000000000', '\x', '[]',
   '{}', ROW(NULL, NULL)::hasis_pair),
  (3, 32767, 2147483647, 9223372036854775807, '-0', '-0', '-0.000', 'ünïcødé ☃', 'x', 'abcde', NULL,
   '4713-01-01 BC', 'infinity', 'infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\x00ff00',
   '{"k": 1.50}', '{NULL,2,NULL}', ROW(NULL, '')::hasis_pair),
  (4, 0, 0, 0, 'Infinity', '-Infinity', 'Infinity', NULL, NULL, NULL, true, NULL, NULL, NULL, NULL,
   NULL, 'null', NULL, NULL),
  (5, NULL, NULL, NULL, NULL, NULL, '-1.000000000000000000000000000001', 'x', 'y', 'z  ', NULL,
   '2000-01-01', '1999-12-31 23:59:59.999999', '2000-01-01 00:00:00+00', NULL, NULL, NULL,
   '{{1,2},{3,4}}', ROW(-5, 'five')::hasis_pair),
  (6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL);
CREATE TABLE ty_h (id int, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, n numeric, t text,
  vc varchar(20), bc char(5), b bool, d date, ts timestamp, tz timestamptz, u uuid, by bytea,
  j jsonb, ia int[], c hasis_pair) USING hasis;
CREATE TABLE ty_x (LIKE ty_h) USING heap;
INSERT INTO ty_h SELECT * FROM ty_src; INSERT INTO ty_x SELECT * FROM ty_src;
SELECT * FROM ty_h ORDER BY id;
SELECT id, f4::text, f8::text, n::text, length(bc) AS bc_len, octet_length(by) AS by_len FROM ty_h ORDER BY id;
SELECT * FROM twin_diff('TABLE ty_@');
SELECT * FROM twin_diff('SELECT t::text FROM ty_@ t');
SELECT id FROM ty_h WHERE f8 = 'NaN' OR f4 = '-Infinity' OR n = 'Infinity' ORDER BY id;
UPDATE ty_h SET ia = ia || 4, j = j || '{"u": true}', c.b = 'upd' WHERE id IN (1, 3);
UPDATE ty_x SET ia = ia || 4, j = j || '{"u": true}', c.b = 'upd' WHERE id IN (1, 3);
SELECT id, ia, j, c FROM ty_h WHERE id IN (1, 3) ORDER BY id;
SELECT * FROM twin_diff('SELECT t::text FROM ty_@ t');

-- 3. a 20k row table with indexes (btree before the load, the others after)
CREATE TABLE big_h (k int, g int, h int, v text) USING hasis;
CREATE TABLE big_x (k int, g int, h int, v text) USING heap;
CREATE INDEX big_h_k ON big_h (k); CREATE INDEX big_x_k ON big_x (k);
INSERT INTO big_h SELECT g, g % 100, (g * 37) % 1000, md5(g::text) FROM generate_series(1, 20000) g;
INSERT INTO big_x SELECT g, g % 100, (g * 37) % 1000, md5(g::text) FROM generate_series(1, 20000) g;
CREATE INDEX big_h_gh ON big_h (g, h); CREATE INDEX big_x_gh ON big_x (g, h);
CREATE INDEX big_h_v ON big_h USING hash (v); CREATE INDEX big_x_v ON big_x USING hash (v);
CREATE INDEX big_h_hb ON big_h USING hybrid_btree (h);
CREATE INDEX big_x_hb ON big_x USING hybrid_btree (h);
SELECT * FROM twin_diff('TABLE big_@');
SELECT count(*), sum(k), sum(g), sum(h), count(DISTINCT v) FROM big_h;

-- 4. COPY and RETURNING
CREATE TABLE cp_h (k int, v text, n numeric) USING hasis;
CREATE TABLE cp_x (k int, v text, n numeric) USING heap;
COPY cp_h FROM stdin;
1	one	1.5
2	\N	2
3	tab\there	-3
\.
COPY cp_x FROM stdin;
1	one	1.5
2	\N	2
3	tab\there	-3
\.
COPY (SELECT * FROM cp_h ORDER BY k) TO stdout;
INSERT INTO cp_h VALUES (4, 'four', 4) RETURNING *; INSERT INTO cp_x VALUES (4, 'four', 4) RETURNING *;
INSERT INTO cp_h VALUES (5, 'five', 5), (6, NULL, NULL) RETURNING k, v;
INSERT INTO cp_x VALUES (5, 'five', 5), (6, NULL, NULL) RETURNING k, v;
INSERT INTO cp_h SELECT g, 'g' || g, g / 3.0 FROM generate_series(7, 9) g RETURNING k, n;
INSERT INTO cp_x SELECT g, 'g' || g, g / 3.0 FROM generate_series(7, 9) g RETURNING k, n;
UPDATE cp_h SET n = -n WHERE k = 4 RETURNING *; UPDATE cp_x SET n = -n WHERE k = 4 RETURNING *;
WITH u AS (UPDATE cp_h SET v = upper(v) WHERE k >= 7 RETURNING k, v) SELECT * FROM u ORDER BY k;
WITH u AS (UPDATE cp_x SET v = upper(v) WHERE k >= 7 RETURNING k, v) SELECT * FROM u ORDER BY k;
DELETE FROM cp_h WHERE k = 2 RETURNING *; DELETE FROM cp_x WHERE k = 2 RETURNING *;
WITH d AS (DELETE FROM cp_h WHERE k IN (5, 6) RETURNING *) SELECT * FROM d ORDER BY k;
WITH d AS (DELETE FROM cp_x WHERE k IN (5, 6) RETURNING *) SELECT * FROM d ORDER BY k;
COPY (SELECT * FROM cp_h ORDER BY k) TO stdout;
SELECT * FROM twin_diff('TABLE cp_@');

-- 5. TOAST: 1 MB compressible and ~1.3 MB incompressible values
CREATE TABLE toast_h (k int, v text) USING hasis; CREATE TABLE toast_x (k int, v text) USING heap;
INSERT INTO toast_h VALUES (1, repeat('x', 1000000)),
  (2, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 40000) g)), (3, 'short');
INSERT INTO toast_x VALUES (1, repeat('x', 1000000)),
  (2, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 40000) g)), (3, 'short');
SELECT h.k, length(h.v), md5(h.v) = md5(x.v) AS same_md5 FROM toast_h h JOIN toast_x x USING (k) ORDER BY k;
UPDATE toast_h SET k = k + 10; UPDATE toast_x SET k = k + 10;
UPDATE toast_h SET v = v || 'y' WHERE k = 13; UPDATE toast_x SET v = v || 'y' WHERE k = 13;
DELETE FROM toast_h WHERE k = 11; DELETE FROM toast_x WHERE k = 11;
VACUUM toast_h; VACUUM toast_x;
SELECT h.k, length(h.v), md5(h.v) = md5(x.v) AS same_md5 FROM toast_h h JOIN toast_x x USING (k) ORDER BY k;
SELECT * FROM twin_diff('SELECT k, md5(v) FROM toast_@');

-- 6. ADD COLUMN (fast default and plain), DROP COLUMN, ALTER COLUMN TYPE
CREATE TABLE alt_h (k int, a text) USING hasis; CREATE TABLE alt_x (k int, a text) USING heap;
INSERT INTO alt_h SELECT g, 'a' || g FROM generate_series(1, 1000) g;
INSERT INTO alt_x SELECT g, 'a' || g FROM generate_series(1, 1000) g;
ALTER TABLE alt_h ADD COLUMN b int DEFAULT 42; ALTER TABLE alt_x ADD COLUMN b int DEFAULT 42;
ALTER TABLE alt_h ADD COLUMN c text; ALTER TABLE alt_x ADD COLUMN c text;
SELECT * FROM alt_h WHERE k <= 3 ORDER BY k;
SELECT count(*) FILTER (WHERE b = 42) AS b42, count(*) FILTER (WHERE c IS NULL) AS cnull FROM alt_h;
SELECT * FROM twin_diff('TABLE alt_@');
INSERT INTO alt_h VALUES (1001, 'new', 7, 'c'); INSERT INTO alt_x VALUES (1001, 'new', 7, 'c');
INSERT INTO alt_h (k) VALUES (1002); INSERT INTO alt_x (k) VALUES (1002);
UPDATE alt_h SET c = 'u' WHERE k % 10 = 0; UPDATE alt_x SET c = 'u' WHERE k % 10 = 0;
ALTER TABLE alt_h DROP COLUMN a; ALTER TABLE alt_x DROP COLUMN a;
SELECT * FROM alt_h WHERE k IN (1, 10, 1001, 1002) ORDER BY k;
INSERT INTO alt_h VALUES (1003, 3, 'after drop'); INSERT INTO alt_x VALUES (1003, 3, 'after drop');
SELECT * FROM twin_diff('TABLE alt_@');
ALTER TABLE alt_h ALTER COLUMN b TYPE bigint, ALTER COLUMN k TYPE text USING 'k' || k;
ALTER TABLE alt_x ALTER COLUMN b TYPE bigint, ALTER COLUMN k TYPE text USING 'k' || k;
SELECT am_of('alt_h');
SELECT * FROM alt_h WHERE k IN ('k1', 'k10', 'k1001', 'k1002', 'k1003') ORDER BY k;
SELECT * FROM twin_diff('TABLE alt_@');

-- 7. UPDATE and DELETE on the big table
UPDATE big_h SET v = v || '~' WHERE k % 3 = 0; UPDATE big_x SET v = v || '~' WHERE k % 3 = 0;
UPDATE big_h SET k = k + 100000 WHERE k % 7 = 0; UPDATE big_x SET k = k + 100000 WHERE k % 7 = 0;
BEGIN;
UPDATE big_h SET g = g + 1000 WHERE k = 1;
UPDATE big_h SET g = g + 1000 WHERE k = 1;
UPDATE big_h SET g = g + 1000, h = -1 WHERE k = 1;
UPDATE big_x SET g = g + 1000 WHERE k = 1;
UPDATE big_x SET g = g + 1000 WHERE k = 1;
UPDATE big_x SET g = g + 1000, h = -1 WHERE k = 1;
SELECT * FROM big_h WHERE k = 1;
SELECT * FROM twin_diff('TABLE big_@');
COMMIT;
DELETE FROM big_h WHERE k % 5 = 0; DELETE FROM big_x WHERE k % 5 = 0;
DELETE FROM big_h WHERE k = 11 RETURNING *; DELETE FROM big_x WHERE k = 11 RETURNING *;
WITH u AS (UPDATE big_h SET v = 'ret' WHERE k BETWEEN 21 AND 24 RETURNING k, v) SELECT * FROM u ORDER BY k;
WITH u AS (UPDATE big_x SET v = 'ret' WHERE k BETWEEN 21 AND 24 RETURNING k, v) SELECT * FROM u ORDER BY k;
SELECT * FROM twin_diff('TABLE big_@');
SELECT * FROM big_h WHERE k < 10 OR k BETWEEN 100000 AND 100030 ORDER BY k;

-- 8. index scans, bitmap scans and index-only scans against the heap twin
CREATE FUNCTION idx_checks(OUT q text, OUT diff bigint, OUT n bigint) RETURNS SETOF record
LANGUAGE plpgsql AS $$
BEGIN
  FOREACH q IN ARRAY ARRAY[
    'SELECT * FROM big_@ WHERE k BETWEEN 100 AND 5000',
    'SELECT * FROM big_@ WHERE k = 76',
    'SELECT * FROM big_@ WHERE k > 100000',
    'SELECT * FROM big_@ WHERE g = 3 AND h < 500',
    'SELECT * FROM big_@ WHERE v = md5(''77'')',
    'SELECT * FROM big_@ WHERE h BETWEEN 10 AND 20',
    'SELECT * FROM big_@ WHERE k < 50 OR h = 999',
    'SELECT k FROM big_@ WHERE k < 1000',
    'SELECT h FROM big_@ WHERE h = 7'] LOOP
    SELECT t.diff, t.n INTO diff, n FROM twin_diff(q) t;
    RETURN NEXT;
  END LOOP;
END $$;
SELECT * FROM idx_checks();
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM big_h WHERE k = 76;
EXPLAIN (COSTS OFF) SELECT * FROM big_h WHERE v = md5('77');
EXPLAIN (COSTS OFF) SELECT * FROM big_h WHERE h BETWEEN 10 AND 20;
EXPLAIN (COSTS OFF) SELECT k FROM big_h WHERE k < 1000;
SELECT * FROM big_h WHERE k BETWEEN 1 AND 9 ORDER BY k;
SELECT k, g, h FROM big_h WHERE h BETWEEN 10 AND 11 ORDER BY k LIMIT 5;
SELECT * FROM idx_checks();
SET enable_indexscan = off; SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT * FROM big_h WHERE g = 3 AND h < 500;
EXPLAIN (COSTS OFF) SELECT * FROM big_h WHERE k < 50 OR h = 999;
SELECT * FROM big_h WHERE k < 50 OR h = 999 ORDER BY k LIMIT 5;
SELECT * FROM idx_checks();
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;
-- an update rolled back: the index entries of the aborted versions must not show
BEGIN;
UPDATE big_h SET h = h + 1, k = -k WHERE k % 11 = 0; UPDATE big_x SET h = h + 1, k = -k WHERE k % 11 = 0;
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
SELECT * FROM idx_checks();
ROLLBACK;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM idx_checks();
SELECT count(*) FROM big_h WHERE k < 0;
RESET enable_seqscan; RESET enable_bitmapscan;

-- 9. unique indexes (btree and hybrid_btree)
CREATE TABLE u_h (k int, w int, v text) USING hasis; CREATE TABLE u_x (k int, w int, v text) USING heap;
CREATE UNIQUE INDEX u_h_k ON u_h (k); CREATE UNIQUE INDEX u_x_k ON u_x (k);
CREATE UNIQUE INDEX u_h_w ON u_h USING hybrid_btree (w);
CREATE UNIQUE INDEX u_x_w ON u_x USING hybrid_btree (w);
INSERT INTO u_h SELECT g, -g, 'u' FROM generate_series(1, 1000) g;
INSERT INTO u_x SELECT g, -g, 'u' FROM generate_series(1, 1000) g;
INSERT INTO u_h VALUES (5, 5000, 'dup');
INSERT INTO u_h VALUES (5000, -5, 'dup');
UPDATE u_h SET k = 5 WHERE k = 6;
BEGIN;
UPDATE u_h SET v = 'a' WHERE k = 7;
UPDATE u_h SET v = 'b' WHERE k = 7;
DELETE FROM u_h WHERE k = 8;
INSERT INTO u_h VALUES (8, -8, 'again');
UPDATE u_x SET v = 'a' WHERE k = 7;
UPDATE u_x SET v = 'b' WHERE k = 7;
DELETE FROM u_x WHERE k = 8;
INSERT INTO u_x VALUES (8, -8, 'again');
COMMIT;
DELETE FROM u_h WHERE k = 9; DELETE FROM u_x WHERE k = 9;
INSERT INTO u_h VALUES (9, -9, 'again'); INSERT INTO u_x VALUES (9, -9, 'again');
UPDATE u_h SET k = k + 100000, w = w - 100000 WHERE k % 10 = 0;
UPDATE u_x SET k = k + 100000, w = w - 100000 WHERE k % 10 = 0;
BEGIN;
UPDATE u_h SET v = 'c' WHERE k = 12;
INSERT INTO u_h VALUES (12, 12, 'dup');
ROLLBACK;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM u_h WHERE k IN (5, 6, 7, 8, 9, 12, 100010) ORDER BY k;
SELECT * FROM u_h WHERE w IN (-7, -8, -100010) ORDER BY w;
SELECT * FROM twin_diff('SELECT * FROM u_@ WHERE k < 500 OR k > 100000');
SELECT * FROM twin_diff('SELECT * FROM u_@ WHERE w < -500');
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT * FROM twin_diff('TABLE u_@');

-- 10. savepoints and rollback
CREATE TABLE sp_h (k int, v text) USING hasis; CREATE TABLE sp_x (k int, v text) USING heap;
CREATE INDEX sp_h_k ON sp_h (k); CREATE INDEX sp_x_k ON sp_x (k);
BEGIN;
INSERT INTO sp_h SELECT g, 'base' FROM generate_series(1, 100) g;
INSERT INTO sp_x SELECT g, 'base' FROM generate_series(1, 100) g;
SAVEPOINT a;
INSERT INTO sp_h SELECT g, 'sp' FROM generate_series(101, 200) g;
INSERT INTO sp_x SELECT g, 'sp' FROM generate_series(101, 200) g;
UPDATE sp_h SET v = 'upd-a' WHERE k <= 50; UPDATE sp_x SET v = 'upd-a' WHERE k <= 50;
DELETE FROM sp_h WHERE k > 180 OR k % 9 = 0; DELETE FROM sp_x WHERE k > 180 OR k % 9 = 0;
SELECT * FROM twin_diff('TABLE sp_@');
ROLLBACK TO SAVEPOINT a;
SELECT v, count(*) FROM sp_h GROUP BY v ORDER BY v;
SELECT * FROM twin_diff('TABLE sp_@');
SAVEPOINT b;
UPDATE sp_h SET v = 'upd-b' WHERE k % 2 = 0; UPDATE sp_x SET v = 'upd-b' WHERE k % 2 = 0;
DELETE FROM sp_h WHERE k % 10 = 0; DELETE FROM sp_x WHERE k % 10 = 0;
RELEASE SAVEPOINT b;
SAVEPOINT c;
UPDATE sp_h SET v = v || '-c'; UPDATE sp_x SET v = v || '-c';
SAVEPOINT d;
DELETE FROM sp_h; DELETE FROM sp_x;
SELECT count(*) FROM sp_h;
ROLLBACK TO SAVEPOINT d;
INSERT INTO sp_h VALUES (1000, 'in-c'); INSERT INTO sp_x VALUES (1000, 'in-c');
RELEASE SAVEPOINT c;
SELECT * FROM twin_diff('TABLE sp_@');
COMMIT;
SELECT v, count(*) FROM sp_h GROUP BY v ORDER BY v;
SELECT * FROM twin_diff('TABLE sp_@');
BEGIN;
INSERT INTO sp_h VALUES (2000, 'gone'); INSERT INTO sp_x VALUES (2000, 'gone');
UPDATE sp_h SET v = 'gone' WHERE k < 20; UPDATE sp_x SET v = 'gone' WHERE k < 20;
DELETE FROM sp_h WHERE k > 50; DELETE FROM sp_x WHERE k > 50;
ROLLBACK;
SELECT * FROM twin_diff('TABLE sp_@');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM twin_diff('SELECT * FROM sp_@ WHERE k BETWEEN 1 AND 2000');
RESET enable_seqscan; RESET enable_bitmapscan;

-- 11. row locks in one session, WHERE CURRENT OF
CREATE TABLE lk_h (k int, v text) USING hasis; CREATE TABLE lk_x (k int, v text) USING heap;
INSERT INTO lk_h SELECT g, 'l' || g FROM generate_series(1, 10) g;
INSERT INTO lk_x SELECT g, 'l' || g FROM generate_series(1, 10) g;
BEGIN;
SELECT * FROM lk_h WHERE k <= 2 ORDER BY k FOR UPDATE;
SELECT * FROM lk_h WHERE k BETWEEN 3 AND 4 ORDER BY k FOR NO KEY UPDATE;
SELECT * FROM lk_h WHERE k BETWEEN 5 AND 6 ORDER BY k FOR SHARE;
SELECT * FROM lk_h WHERE k BETWEEN 7 AND 8 ORDER BY k FOR KEY SHARE;
SELECT k FROM lk_h ORDER BY k FOR UPDATE SKIP LOCKED;
SELECT * FROM lk_h WHERE k = 1 FOR UPDATE NOWAIT;
SELECT * FROM lk_h WHERE k = 5 FOR UPDATE;
UPDATE lk_h SET v = v || '!' WHERE k <= 5; UPDATE lk_x SET v = v || '!' WHERE k <= 5;
SELECT * FROM lk_h WHERE k <= 5 ORDER BY k FOR SHARE;
DELETE FROM lk_h WHERE k = 8; DELETE FROM lk_x WHERE k = 8;
SELECT * FROM twin_diff('TABLE lk_@');
COMMIT;
BEGIN;
SELECT k FROM lk_h WHERE k = 9 FOR SHARE;
SAVEPOINT s;
SELECT k FROM lk_h WHERE k = 9 FOR UPDATE;
ROLLBACK TO SAVEPOINT s;
UPDATE lk_h SET v = 'nine' WHERE k = 9; UPDATE lk_x SET v = 'nine' WHERE k = 9;
SAVEPOINT t;
SELECT k, v FROM lk_h WHERE k = 9 FOR KEY SHARE;
RELEASE SAVEPOINT t;
DECLARE cur CURSOR FOR SELECT k FROM lk_h WHERE k = 3 FOR UPDATE;
FETCH cur;
UPDATE lk_h SET v = 'current' WHERE CURRENT OF cur;
CLOSE cur;
UPDATE lk_x SET v = 'current' WHERE k = 3;
COMMIT;
SELECT * FROM lk_h ORDER BY k;
SELECT * FROM lk_h ORDER BY k FOR UPDATE;
SELECT * FROM twin_diff('TABLE lk_@');

-- 12. 500 updates of one row in one transaction; a cursor keeps its snapshot
CREATE TABLE cid_h (k int, n int) USING hasis; CREATE TABLE cid_x (k int, n int) USING heap;
INSERT INTO cid_h VALUES (1, 0), (2, 0); INSERT INTO cid_x VALUES (1, 0), (2, 0);
BEGIN;
INSERT INTO cid_h VALUES (3, 0); INSERT INTO cid_x VALUES (3, 0);
DECLARE cur_h CURSOR FOR SELECT k, n FROM cid_h ORDER BY k;
DO $$
BEGIN
  FOR i IN 1..500 LOOP
    UPDATE cid_h SET n = n + 1 WHERE k = 1;     UPDATE cid_x SET n = n + 1 WHERE k = 1;
  END LOOP;
  FOR i IN 1..50 LOOP
    UPDATE cid_h SET n = n + 1 WHERE k = 3;     UPDATE cid_x SET n = n + 1 WHERE k = 3;
  END LOOP;
END $$;
FETCH ALL FROM cur_h;
CLOSE cur_h;
SELECT * FROM cid_h ORDER BY k;
SELECT * FROM twin_diff('TABLE cid_@');
DELETE FROM cid_h WHERE k = 3; DELETE FROM cid_x WHERE k = 3;
COMMIT;
SELECT * FROM cid_h ORDER BY k;
SELECT * FROM twin_diff('TABLE cid_@');

-- 13. many subtransactions: blocks that raise leave nothing behind
CREATE TABLE sx_h (k int, n int) USING hasis; CREATE TABLE sx_x (k int, n int) USING heap;
INSERT INTO sx_h VALUES (0, 0); INSERT INTO sx_x VALUES (0, 0);
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    BEGIN
      INSERT INTO sx_h VALUES (i, 0);       INSERT INTO sx_x VALUES (i, 0);
      IF i % 2 = 1 THEN
        UPDATE sx_h SET n = n + 1 WHERE k = 0;         UPDATE sx_x SET n = n + 1 WHERE k = 0;
        RAISE EXCEPTION 'boom %', i;
      END IF;
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
  END LOOP;
END $$;
SELECT count(*), count(*) FILTER (WHERE k % 2 = 1) AS odd, max(n) FROM sx_h;
SELECT * FROM twin_diff('TABLE sx_@');

-- 14. system columns and TID scans
SELECT k, xmin = xmin AS xmin, xmax = xmax AS xmax, cmin = cmin AS cmin, cmax = cmax AS cmax,
       ctid IS NOT NULL AS ctid, tableoid = 'cid_h'::regclass AS tableoid FROM cid_h ORDER BY k;
BEGIN;
INSERT INTO cid_h VALUES (4, 0);
SELECT k, xmin = pg_current_xact_id()::xid AS own_xmin FROM cid_h ORDER BY k;
ROLLBACK;
SELECT count(DISTINCT ctid) = count(*) AS ctids_unique FROM big_h;
SELECT k, g, h, v FROM big_h WHERE ctid = (SELECT ctid FROM big_h WHERE k = 8);
SELECT k, v FROM big_h WHERE ctid = ANY (ARRAY(SELECT ctid FROM big_h WHERE k IN (3, 8, 100007))) ORDER BY k;
EXPLAIN (COSTS OFF) SELECT k FROM big_h WHERE ctid = '(0,1)';
CREATE TABLE empty_h (k int) USING hasis;
SELECT * FROM empty_h WHERE ctid = '(0,1)';
SELECT * FROM big_h WHERE ctid = '(9999999,1)';
SELECT * FROM big_h WHERE ctid = '(0,292)';
SELECT * FROM big_h WHERE ctid = '(0,0)';

-- 15. triggers and a foreign key
CREATE TABLE tg_log (tab text, op text, o text, n text) USING hasis;
CREATE FUNCTION tg_before() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.v := upper(NEW.v); NEW.n := coalesce(NEW.n, 0) + 100; RETURN NEW; END $$;
CREATE FUNCTION tg_after() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO tg_log VALUES (TG_TABLE_NAME, TG_OP, OLD::text, NEW::text); RETURN NULL; END $$;
CREATE TABLE tg_h (k int, v text, n int) USING hasis; CREATE TABLE tg_x (k int, v text, n int) USING heap;
CREATE TRIGGER tg_h_b BEFORE INSERT ON tg_h FOR EACH ROW EXECUTE FUNCTION tg_before();
CREATE TRIGGER tg_x_b BEFORE INSERT ON tg_x FOR EACH ROW EXECUTE FUNCTION tg_before();
CREATE TRIGGER tg_h_a AFTER UPDATE ON tg_h FOR EACH ROW EXECUTE FUNCTION tg_after();
CREATE TRIGGER tg_x_a AFTER UPDATE ON tg_x FOR EACH ROW EXECUTE FUNCTION tg_after();
INSERT INTO tg_h VALUES (1, 'a', NULL), (2, 'b', 5), (3, 'c', 7);
INSERT INTO tg_x VALUES (1, 'a', NULL), (2, 'b', 5), (3, 'c', 7);
UPDATE tg_h SET n = n + 1 WHERE k >= 2; UPDATE tg_x SET n = n + 1 WHERE k >= 2;
BEGIN;
UPDATE tg_h SET v = 'z' WHERE k = 1;
UPDATE tg_h SET v = 'y' WHERE k = 1;
UPDATE tg_x SET v = 'z' WHERE k = 1;
UPDATE tg_x SET v = 'y' WHERE k = 1;
COMMIT;
SELECT * FROM tg_h ORDER BY k;
SELECT op, o, n FROM tg_log WHERE tab = 'tg_h' ORDER BY o, n;
SELECT * FROM twin_diff('TABLE tg_@');
SELECT * FROM twin_diff('SELECT op, o, n FROM tg_log WHERE tab = ''tg_@''');
CREATE TABLE fkp_h (k int PRIMARY KEY, v text) USING hasis;
CREATE TABLE fkc_h (k int, p int REFERENCES fkp_h ON DELETE CASCADE) USING hasis;
CREATE TABLE fkp_x (k int PRIMARY KEY, v text) USING heap;
CREATE TABLE fkc_x (k int, p int REFERENCES fkp_x ON DELETE CASCADE) USING heap;
INSERT INTO fkp_h SELECT g, 'p' || g FROM generate_series(1, 10) g;
INSERT INTO fkp_x SELECT g, 'p' || g FROM generate_series(1, 10) g;
INSERT INTO fkc_h SELECT g, g % 10 + 1 FROM generate_series(1, 50) g;
INSERT INTO fkc_x SELECT g, g % 10 + 1 FROM generate_series(1, 50) g;
INSERT INTO fkc_h VALUES (51, 11);
UPDATE fkp_h SET k = 100 WHERE k = 4;
UPDATE fkp_h SET v = 'upd' WHERE k = 5; UPDATE fkp_x SET v = 'upd' WHERE k = 5;
DELETE FROM fkp_h WHERE k <= 3; DELETE FROM fkp_x WHERE k <= 3;
BEGIN;
UPDATE fkp_h SET v = 'again' WHERE k = 6; UPDATE fkp_x SET v = 'again' WHERE k = 6;
INSERT INTO fkc_h VALUES (60, 6); INSERT INTO fkc_x VALUES (60, 6);
COMMIT;
SELECT p, count(*) FROM fkc_h GROUP BY p ORDER BY p;
SELECT * FROM twin_diff('TABLE fkp_@');
SELECT * FROM twin_diff('TABLE fkc_@');

-- 16. TRUNCATE
CREATE TABLE tr_h (k int, v text) USING hasis; CREATE TABLE tr_x (k int, v text) USING heap;
CREATE INDEX tr_h_k ON tr_h (k); CREATE INDEX tr_x_k ON tr_x (k);
INSERT INTO tr_h SELECT g, 't' FROM generate_series(1, 1000) g;
INSERT INTO tr_x SELECT g, 't' FROM generate_series(1, 1000) g;
BEGIN;
TRUNCATE tr_h; TRUNCATE tr_x;
INSERT INTO tr_h VALUES (1, 'in'); INSERT INTO tr_x VALUES (1, 'in');
SELECT * FROM tr_h;
ROLLBACK;
SELECT * FROM twin_diff('TABLE tr_@');
TRUNCATE tr_h; TRUNCATE tr_x;
SELECT count(*) FROM tr_h;
INSERT INTO tr_h SELECT g, 'again' FROM generate_series(1, 100) g;
INSERT INTO tr_x SELECT g, 'again' FROM generate_series(1, 100) g;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM twin_diff('SELECT * FROM tr_@ WHERE k > 50');
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT * FROM twin_diff('TABLE tr_@');

-- 17. VACUUM, ANALYZE and the planner's estimates
VACUUM big_h; VACUUM big_x;
SELECT * FROM twin_diff('TABLE big_@');
INSERT INTO big_h SELECT g, g % 100, (g * 37) % 1000, md5(g::text) FROM generate_series(20001, 23000) g;
INSERT INTO big_x SELECT g, g % 100, (g * 37) % 1000, md5(g::text) FROM generate_series(20001, 23000) g;
VACUUM (ANALYZE) big_h; VACUUM (ANALYZE) big_x;
SELECT * FROM twin_diff('TABLE big_@');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM idx_checks();
RESET enable_seqscan; RESET enable_bitmapscan;
ANALYZE big_h; ANALYZE big_x;
SELECT relname, reltuples > 0 AS has_tuples,
       reltuples BETWEEN 0.9 * (SELECT count(*) FROM big_h) AND 1.1 * (SELECT count(*) FROM big_h) AS close
  FROM pg_class WHERE relname IN ('big_h', 'big_x') ORDER BY 1;
SELECT explain_rows('SELECT * FROM big_h') BETWEEN 5000 AND 50000 AS estimate_ok;
SELECT explain_rows('SELECT * FROM big_h WHERE g = 3') BETWEEN 20 AND 2000 AS selective_ok;
-- g = 3 is 1% of the rows, in every extent: fetching them costs more
-- blocks a row than reading the table's columns (fetch costing), so the
-- column scan wins where heap's plan is a bitmap scan.
EXPLAIN (COSTS OFF) SELECT * FROM big_h WHERE g = 3;

-- 18. CLUSTER and VACUUM FULL
CREATE TABLE cl_h (k int, v text) USING hasis; CREATE TABLE cl_x (k int, v text) USING heap;
INSERT INTO cl_h SELECT (g * 7919) % 5000, md5(g::text) FROM generate_series(1, 5000) g;
INSERT INTO cl_x SELECT (g * 7919) % 5000, md5(g::text) FROM generate_series(1, 5000) g;
CREATE INDEX cl_h_k ON cl_h (k); CREATE INDEX cl_x_k ON cl_x (k);
DELETE FROM cl_h WHERE k % 4 = 0; DELETE FROM cl_x WHERE k % 4 = 0;
UPDATE cl_h SET v = 'u' WHERE k % 4 = 1; UPDATE cl_x SET v = 'u' WHERE k % 4 = 1;
CLUSTER cl_h USING cl_h_k; CLUSTER cl_x USING cl_x_k;
SELECT am_of('cl_h');
SELECT * FROM twin_diff('TABLE cl_@');
-- CLUSTER writes the rows in index order; a seq scan returns them so
SELECT (SELECT array_agg(k) FROM cl_h) = (SELECT array_agg(k ORDER BY k) FROM cl_h) AS clustered;
VACUUM FULL cl_h; VACUUM FULL cl_x;
SELECT am_of('cl_h');
SELECT * FROM twin_diff('TABLE cl_@');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM twin_diff('SELECT * FROM cl_@ WHERE k BETWEEN 100 AND 200');
SELECT * FROM cl_h WHERE k BETWEEN 100 AND 103 ORDER BY k;
RESET enable_seqscan; RESET enable_bitmapscan;
VACUUM FULL big_h; VACUUM FULL big_x;
SELECT * FROM twin_diff('TABLE big_@');

-- 19. INSERT ... ON CONFLICT (speculative insertion), CREATE INDEX
-- CONCURRENTLY and REINDEX CONCURRENTLY, checked by amcheck's
-- heapallindexed (every visible version has its index entry)
CREATE TABLE oc_h (k int PRIMARY KEY, v text, n int DEFAULT 0, u int) USING hasis;
CREATE TABLE oc_x (k int PRIMARY KEY, v text, n int DEFAULT 0, u int) USING heap;
CREATE UNIQUE INDEX oc_h_u ON oc_h (u) WHERE u > 0; CREATE UNIQUE INDEX oc_x_u ON oc_x (u) WHERE u > 0;
INSERT INTO oc_h SELECT g, 'v' || g, 0, g FROM generate_series(1, 50) g;
INSERT INTO oc_x SELECT g, 'v' || g, 0, g FROM generate_series(1, 50) g;
INSERT INTO oc_h VALUES (2, 'two') ON CONFLICT (k) DO NOTHING;
INSERT INTO oc_x VALUES (2, 'two') ON CONFLICT (k) DO NOTHING;
INSERT INTO oc_h SELECT g, 'w', 0, g + 1000 FROM generate_series(45, 55) g
  ON CONFLICT (k) DO UPDATE SET n = oc_h.n + 1, v = excluded.v WHERE oc_h.k % 2 = 0 RETURNING k, v, n;
INSERT INTO oc_x SELECT g, 'w', 0, g + 1000 FROM generate_series(45, 55) g
  ON CONFLICT (k) DO UPDATE SET n = oc_x.n + 1, v = excluded.v WHERE oc_x.k % 2 = 0 RETURNING k, v, n;
INSERT INTO oc_h VALUES (60, 'x', 0, 3) ON CONFLICT (u) WHERE u > 0 DO UPDATE SET n = oc_h.n + 100 RETURNING k, n;
INSERT INTO oc_x VALUES (60, 'x', 0, 3) ON CONFLICT (u) WHERE u > 0 DO UPDATE SET n = oc_x.n + 100 RETURNING k, n;
INSERT INTO oc_h VALUES (7, 'c') ON CONFLICT ON CONSTRAINT oc_h_pkey DO UPDATE SET v = 'c' || oc_h.v;
INSERT INTO oc_x VALUES (7, 'c') ON CONFLICT ON CONSTRAINT oc_x_pkey DO UPDATE SET v = 'c' || oc_x.v;
INSERT INTO oc_h VALUES (70, repeat('t', 100000)) ON CONFLICT DO NOTHING;
INSERT INTO oc_x VALUES (70, repeat('t', 100000)) ON CONFLICT DO NOTHING;
INSERT INTO oc_h VALUES (70, 'short') ON CONFLICT (k) DO UPDATE SET v = excluded.v || length(oc_h.v);
INSERT INTO oc_x VALUES (70, 'short') ON CONFLICT (k) DO UPDATE SET v = excluded.v || length(oc_x.v);
-- the same key twice in one command is an error, as on heap
INSERT INTO oc_h VALUES (80, 'a'), (80, 'b') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
BEGIN;
INSERT INTO oc_h VALUES (90, 'sp') ON CONFLICT DO NOTHING; INSERT INTO oc_x VALUES (90, 'sp') ON CONFLICT DO NOTHING;
SAVEPOINT s;
INSERT INTO oc_h VALUES (90, 'sp2') ON CONFLICT (k) DO UPDATE SET v = 'rolled back';
ROLLBACK TO s;
INSERT INTO oc_h VALUES (91, 'sp3') ON CONFLICT (k) DO UPDATE SET v = 'never';
INSERT INTO oc_x VALUES (91, 'sp3') ON CONFLICT (k) DO UPDATE SET v = 'never';
COMMIT;
SELECT * FROM twin_diff('TABLE oc_@');
SELECT k, v, n FROM oc_h WHERE k IN (2, 7, 46, 47, 90, 91) ORDER BY k;
SELECT pg_hybrid.verify_table('oc_h') > 0 AS verified;
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE INDEX CONCURRENTLY big_h_cic ON big_h (g);
CREATE UNIQUE INDEX CONCURRENTLY oc_h_cic ON oc_h (k, n) WHERE n >= 0;
REINDEX INDEX CONCURRENTLY oc_h_pkey;
SELECT c.relname, i.indisvalid, (SELECT true FROM (SELECT bt_index_check(c.oid, true)) ok) AS heapallindexed
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid IN ('big_h'::regclass, 'oc_h'::regclass) AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'btree')
 ORDER BY 1;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM twin_diff('SELECT g, count(*) FROM big_@ WHERE g < 20 GROUP BY g');
RESET enable_seqscan; RESET enable_bitmapscan;
DROP INDEX big_h_cic;
-- TABLESAMPLE: every row at 100 %, none at 0 %, the same sample when repeated
SELECT (SELECT count(*) FROM big_h TABLESAMPLE SYSTEM (100)) = (SELECT count(*) FROM big_h) AS system_all,
       (SELECT count(*) FROM big_h TABLESAMPLE BERNOULLI (100)) = (SELECT count(*) FROM big_h) AS bernoulli_all,
       (SELECT count(*) FROM big_h TABLESAMPLE BERNOULLI (0)) AS bernoulli_none,
       (SELECT count(*) FROM big_h TABLESAMPLE SYSTEM (30) REPEATABLE (7)) = (SELECT count(*) FROM big_h TABLESAMPLE SYSTEM (30) REPEATABLE (7)) AS repeatable,
       (SELECT count(*) FROM big_h TABLESAMPLE BERNOULLI (30) REPEATABLE (7)) BETWEEN 0.2 * (SELECT count(*) FROM big_h) AND 0.4 * (SELECT count(*) FROM big_h) AS about_30_percent;
-- SCROLL cursors move a sequential scan both ways, as on heap
CREATE TABLE sc_h (k int) USING hasis; CREATE TABLE sc_x (k int) USING heap;
INSERT INTO sc_h SELECT generate_series(1, 5000); INSERT INTO sc_x SELECT generate_series(1, 5000);
DELETE FROM sc_h WHERE k % 3 = 0; DELETE FROM sc_x WHERE k % 3 = 0;
BEGIN;
DECLARE ch SCROLL CURSOR FOR SELECT k FROM sc_h;
DECLARE cx SCROLL CURSOR FOR SELECT k FROM sc_x;
FETCH 4 FROM ch; FETCH 4 FROM cx;
FETCH BACKWARD 2 FROM ch; FETCH BACKWARD 2 FROM cx;
FETCH LAST FROM ch; FETCH LAST FROM cx;
FETCH PRIOR FROM ch; FETCH PRIOR FROM cx;
FETCH ABSOLUTE 1500 FROM ch; FETCH ABSOLUTE 1500 FROM cx;
FETCH RELATIVE -700 FROM ch; FETCH RELATIVE -700 FROM cx;
MOVE BACKWARD ALL IN ch; MOVE BACKWARD ALL IN cx;
FETCH NEXT FROM ch; FETCH NEXT FROM cx;
COMMIT;

-- 20. beyond the list: parallel scans, partitions, matviews, temp and unlogged
-- tables, COPY FREEZE, VACUUM FREEZE, TID range scans
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2;
SET pg_hybrid.enable_hasis_column_scan = off;  -- the table AM's parallel scan (hasis_colscan tests the column scan's)
EXPLAIN (COSTS OFF) SELECT count(*), sum(h) FROM big_h WHERE g < 50;
SELECT count(*) AS pc, sum(h) AS ps FROM big_h WHERE g < 50 \gset
SELECT count(*) = :pc AND sum(h) = :ps AS parallel_same FROM big_x WHERE g < 50;
RESET pg_hybrid.enable_hasis_column_scan;
RESET parallel_setup_cost; RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size; RESET max_parallel_workers_per_gather;
CREATE TABLE pt_h (k int, v text) PARTITION BY RANGE (k);
CREATE TABLE pt_h1 PARTITION OF pt_h FOR VALUES FROM (0) TO (100) USING hasis;
CREATE TABLE pt_h2 PARTITION OF pt_h FOR VALUES FROM (100) TO (200) USING heap;
CREATE TABLE pt_x (k int, v text) PARTITION BY RANGE (k);
CREATE TABLE pt_x1 PARTITION OF pt_x FOR VALUES FROM (0) TO (100) USING heap;
CREATE TABLE pt_x2 PARTITION OF pt_x FOR VALUES FROM (100) TO (200) USING heap;
INSERT INTO pt_h SELECT g, 'p' || g FROM generate_series(0, 199) g;
INSERT INTO pt_x SELECT g, 'p' || g FROM generate_series(0, 199) g;
UPDATE pt_h SET k = k + 100 WHERE k < 10; UPDATE pt_x SET k = k + 100 WHERE k < 10;
DELETE FROM pt_h WHERE k BETWEEN 100 AND 104; DELETE FROM pt_x WHERE k BETWEEN 100 AND 104;
UPDATE pt_h SET k = k - 100 WHERE k >= 190; UPDATE pt_x SET k = k - 100 WHERE k >= 190;
SELECT tableoid::regclass, count(*), sum(k) FROM pt_h GROUP BY 1 ORDER BY 1;
SELECT * FROM twin_diff('TABLE pt_@');
CREATE MATERIALIZED VIEW mv_h USING hasis AS SELECT k % 10 AS d, count(*) AS c FROM am_x GROUP BY 1;
CREATE MATERIALIZED VIEW mv_x USING heap AS SELECT k % 10 AS d, count(*) AS c FROM am_x GROUP BY 1;
REFRESH MATERIALIZED VIEW mv_h; REFRESH MATERIALIZED VIEW mv_x;
SELECT am_of('mv_h');
SELECT * FROM twin_diff('TABLE mv_@');
CREATE TEMP TABLE tmp_h (k int, v text) USING hasis; CREATE TEMP TABLE tmp_x (k int, v text) USING heap;
CREATE UNLOGGED TABLE unl_h (k int, v text) USING hasis; CREATE UNLOGGED TABLE unl_x (k int, v text) USING heap;
CREATE INDEX tmp_h_k ON tmp_h (k); CREATE INDEX tmp_x_k ON tmp_x (k);
INSERT INTO tmp_h SELECT g, md5(g::text) FROM generate_series(1, 5000) g;
INSERT INTO tmp_x SELECT g, md5(g::text) FROM generate_series(1, 5000) g;
INSERT INTO unl_h SELECT g, md5(g::text) FROM generate_series(1, 5000) g;
INSERT INTO unl_x SELECT g, md5(g::text) FROM generate_series(1, 5000) g;
UPDATE tmp_h SET v = 'u' WHERE k % 3 = 0; UPDATE tmp_x SET v = 'u' WHERE k % 3 = 0;
DELETE FROM unl_h WHERE k % 3 = 1; DELETE FROM unl_x WHERE k % 3 = 1;
VACUUM tmp_h; VACUUM tmp_x;
SELECT * FROM twin_diff('TABLE tmp_@');
SELECT * FROM twin_diff('TABLE unl_@');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM twin_diff('SELECT * FROM tmp_@ WHERE k < 100');
RESET enable_seqscan; RESET enable_bitmapscan;
BEGIN;
CREATE TABLE fz_h (k int, v text) USING hasis;
COPY fz_h FROM stdin (FREEZE);
1	frozen
2	too
\.
COMMIT;
SELECT * FROM fz_h ORDER BY k;
VACUUM (FREEZE) sp_h; VACUUM (FREEZE) sp_x;
SELECT * FROM twin_diff('TABLE sp_@');
EXPLAIN (COSTS OFF) SELECT count(*) FROM big_h WHERE ctid >= '(1,0)' AND ctid < '(5,0)';
SELECT (SELECT count(*) FROM big_h WHERE ctid >= '(1,0)' AND ctid < '(5,0)') =
       (SELECT count(*) FROM (SELECT ctid AS c FROM big_h OFFSET 0) s WHERE c >= '(1,0)' AND c < '(5,0)')
  AS tid_range_consistent,
       (SELECT count(*) FROM big_h WHERE ctid > '(3,100)') =
       (SELECT count(*) FROM (SELECT ctid AS c FROM big_h OFFSET 0) s WHERE c > '(3,100)')
  AS tid_range_open_end,
       (SELECT count(*) FROM big_h WHERE ctid < '(0,1)') AS before_first;
BEGIN;
CREATE TABLE tn_h (k int) USING hasis;
INSERT INTO tn_h VALUES (1), (2);
TRUNCATE tn_h;
INSERT INTO tn_h VALUES (3);
COMMIT;
SELECT * FROM tn_h;

-- 21. reloptions: the hybrid-page parameters (hasis_*), checked at CREATE
-- and ALTER; a table with small hybrid pages against its heap twin
CREATE TABLE ro_h (k int PRIMARY KEY, v text) USING hasis
  WITH (hasis_column_blocks = 2, hasis_delta_blocks = 3, hasis_compact_trigger = 1, hasis_max_slots = 300, fillfactor = 90);
CREATE TABLE ro_x (k int PRIMARY KEY, v text) USING heap WITH (fillfactor = 90);
SELECT reloptions FROM pg_class WHERE relname = 'ro_h';
INSERT INTO ro_h SELECT g, md5(g::text) FROM generate_series(1, 3000) g;
INSERT INTO ro_x SELECT g, md5(g::text) FROM generate_series(1, 3000) g;
UPDATE ro_h SET v = v || 'u' WHERE k % 3 = 0; UPDATE ro_x SET v = v || 'u' WHERE k % 3 = 0;
DELETE FROM ro_h WHERE k % 7 = 0; DELETE FROM ro_x WHERE k % 7 = 0;
-- VACUUM removes only what no snapshot sees: wait (up to 30 s) until no
-- other session holds one (an autovacuum ANALYZE, a worker of an earlier
-- suite), so the count below does not depend on timing.
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL));
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
VACUUM ro_h;
SELECT extents >= 10 AS small_pages, pg_hybrid.verify_table('ro_h') AS verified FROM pg_hybrid.table_stats('ro_h');
SELECT * FROM twin_diff('TABLE ro_@');
ALTER TABLE ro_h SET (autovacuum_enabled = off), RESET (fillfactor);
ALTER TABLE ro_h SET (hasis_delta_blocks = 6);
ALTER TABLE ro_h RESET (hasis_compact_trigger);
ALTER TABLE ro_h RESET (hasis_max_slots);
SELECT reloptions FROM pg_class WHERE relname = 'ro_h';
VACUUM FULL ro_h;
SELECT * FROM twin_diff('TABLE ro_@');
CREATE TABLE ro_as USING hasis WITH (hasis_delta_blocks = 2, hasis_compact_trigger = 2) AS SELECT * FROM ro_x;
SELECT reloptions, (SELECT count(*) FROM ro_as) AS n FROM pg_class WHERE relname = 'ro_as';
SET default_table_access_method = hasis;
CREATE TABLE ro_d (k int) WITH (hasis_delta_blocks = 4);
RESET default_table_access_method;
SELECT am_of('ro_d');
-- bad input
CREATE TABLE ro_bad (k int) USING hasis WITH (hasis_delta_blocks = 0);
CREATE TABLE ro_bad (k int) USING hasis WITH (hasis_delta_blocks = 'many');
CREATE TABLE ro_bad (k int) USING hasis WITH (hasis_delta_blocks = 2, hasis_compact_trigger = 3);
CREATE TABLE ro_bad (k int) USING hasis WITH (hasis_column_blocks = 20, hasis_delta_blocks = 20);
CREATE TABLE ro_bad (k int) USING hasis WITH (hasis_column_blocks = 1, hasis_delta_blocks = 1, hasis_compact_trigger = 1, hasis_max_slots = 60000);
CREATE TABLE ro_bad (k int) USING hasis WITH (hasis_extent = 1);
CREATE TABLE ro_bad (k int) USING hasis WITH (no_such_option = 1);
CREATE TABLE ro_bad (k int) USING heap WITH (hasis_delta_blocks = 4);
ALTER TABLE ro_x SET (hasis_delta_blocks = 4);
ALTER TABLE ro_h SET (hasis_compact_trigger = 9);
SELECT reloptions FROM pg_class WHERE relname = 'ro_h';
DROP TABLE ro_h, ro_x, ro_as, ro_d;

-- 22. HOT: updates that change no indexed column make heap-only versions
-- (no index entries); index, bitmap (exact and lossy) and seq scans agree
-- with heap before and after compaction turns dead chain roots into
-- redirects; index builds use the chains' root TIDs
CREATE TABLE hot_h (k int PRIMARY KEY, g int, v text, n int) USING hasis;
CREATE TABLE hot_x (k int PRIMARY KEY, g int, v text, n int) USING heap;
CREATE INDEX hot_h_g ON hot_h (g); CREATE INDEX hot_x_g ON hot_x (g);
INSERT INTO hot_h SELECT i, i % 50, 'v' || i, 0 FROM generate_series(1, 3000) i;
INSERT INTO hot_x SELECT i, i % 50, 'v' || i, 0 FROM generate_series(1, 3000) i;
BEGIN;
UPDATE hot_h SET n = n + 1, v = v || '+' WHERE k % 3 = 0;
UPDATE hot_x SET n = n + 1, v = v || '+' WHERE k % 3 = 0;
SELECT pg_stat_get_xact_tuples_hot_updated('hot_h'::regclass) > 0 AS hot_updates,
       pg_stat_get_xact_tuples_updated('hot_h'::regclass) AS updates;
COMMIT;
-- long chains on a few rows, and key updates (not HOT) in between
DO $$ BEGIN FOR i IN 1..40 LOOP
  UPDATE hot_h SET n = n + 1 WHERE k IN (5, 6, 7);
  UPDATE hot_x SET n = n + 1 WHERE k IN (5, 6, 7);
  IF i % 10 = 0 THEN
    UPDATE hot_h SET g = g + 1 WHERE k = 6;
    UPDATE hot_x SET g = g + 1 WHERE k = 6;
  END IF;
END LOOP; END $$;
CREATE FUNCTION hot_checks(OUT q text, OUT diff bigint, OUT n bigint) RETURNS SETOF record
LANGUAGE plpgsql AS $$
BEGIN
  FOREACH q IN ARRAY ARRAY[
    'SELECT * FROM hot_@ WHERE k BETWEEN 1 AND 400',
    'SELECT * FROM hot_@ WHERE k IN (5, 6, 7, 2999)',
    'SELECT * FROM hot_@ WHERE g = 7',
    'SELECT * FROM hot_@ WHERE g IN (1, 2, 9) AND n > 0',
    'SELECT k, n FROM hot_@ WHERE k = 6 OR g = 49',
    'TABLE hot_@'] LOOP
    SELECT t.diff, t.n INTO diff, n FROM twin_diff(q) t;
    RETURN NEXT;
  END LOOP;
END $$;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM hot_checks();
SET enable_indexscan = off; SET enable_bitmapscan = on;
SELECT * FROM hot_checks();
SET work_mem = '64kB';
SELECT * FROM twin_diff('SELECT * FROM hot_@ WHERE k > 10 AND n >= 0');
RESET work_mem; RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;
-- compaction removes dead chain prefixes: redirects, heap-only slots freed
VACUUM hot_h;
SELECT redirect_slots > 0 AS redirects, dead_slots FROM pg_hybrid.table_stats('hot_h');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT * FROM hot_checks();
SET enable_indexscan = off; SET enable_bitmapscan = on;
SELECT * FROM hot_checks();
RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan;
-- more HOT updates after the redirects, then new indexes over the chains
UPDATE hot_h SET n = n + 10 WHERE k % 7 = 0; UPDATE hot_x SET n = n + 10 WHERE k % 7 = 0;
CREATE INDEX hot_h_n ON hot_h (n); CREATE INDEX hot_x_n ON hot_x (n);
CREATE INDEX CONCURRENTLY hot_h_v ON hot_h (v); CREATE INDEX CONCURRENTLY hot_x_v ON hot_x (v);
SELECT c.relname, (SELECT true FROM (SELECT bt_index_check(c.oid, true)) ok) AS heapallindexed
  FROM pg_class c WHERE c.relname IN ('hot_h_pkey', 'hot_h_g', 'hot_h_n', 'hot_h_v') ORDER BY 1;
SET enable_seqscan = off;
SELECT * FROM twin_diff('SELECT * FROM hot_@ WHERE n BETWEEN 1 AND 50');
SELECT * FROM twin_diff('SELECT * FROM hot_@ WHERE v LIKE ''v1%+''');
RESET enable_seqscan;
-- CLUSTER by an index copies every chain member; the copy has no chains
CLUSTER hot_h USING hot_h_g; CLUSTER hot_x USING hot_x_g;
SELECT * FROM twin_diff('TABLE hot_@');
SELECT pg_hybrid.verify_table('hot_h') > 0 AS verified, redirect_slots FROM pg_hybrid.table_stats('hot_h');
DROP TABLE hot_h, hot_x;
DROP FUNCTION hot_checks;

-- cleanup
DROP MATERIALIZED VIEW mv_h, mv_x;
DROP TABLE am_h, am_x, am_d, am_m, am_c, ty_h, ty_x, big_h, big_x, cp_h, cp_x, toast_h, toast_x,
  alt_h, alt_x, u_h, u_x, sp_h, sp_x, lk_h, lk_x, cid_h, cid_x, sx_h, sx_x, empty_h, tg_log,
  tg_h, tg_x, fkc_h, fkp_h, fkc_x, fkp_x, tr_h, tr_x, cl_h, cl_x, oc_h, pt_h, pt_x, tmp_h, tmp_x,
  unl_h, unl_x, fz_h, tn_h, sc_h, sc_x;
DROP VIEW ty_src;
DROP TYPE hasis_pair;
DROP FUNCTION twin_diff, explain_rows, am_of, idx_checks, tg_before, tg_after;
SELECT count(*) AS hasis_relations_left FROM pg_class
  WHERE relam = (SELECT oid FROM pg_am WHERE amname = 'hasis');
