-- Logical decoding of hasis tables (src/hasis/logical.rs): every change
-- made to a hasis table (lg_h) is made to a heap twin (lg_x) too, and
-- test_decoding must describe both alike: inserts (one by one, COPY's
-- multi-insert, ON CONFLICT), HOT and non-HOT updates, updates of rows
-- with TOAST values, deletes, each replica identity, savepoints rolled
-- back, a rolled-back transaction, a transaction spilled to disk, and
-- TRUNCATE. Needs wal_level = logical (scripts/test.sh's main cluster).
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.hasis_compaction_worker = off;
CREATE TABLE lg_h (id int PRIMARY KEY, v text, n numeric, big text) USING hasis;
CREATE TABLE lg_x (id int PRIMARY KEY, v text, n numeric, big text) USING heap;
CREATE INDEX ON lg_h (n);
CREATE INDEX ON lg_x (n);
SELECT 'slot' FROM pg_create_logical_replication_slot('hasis_logical', 'test_decoding');
-- inserts
INSERT INTO lg_h VALUES (1, 'a', 1.5, NULL), (2, 'b', NULL, repeat('x', 10));
INSERT INTO lg_x VALUES (1, 'a', 1.5, NULL), (2, 'b', NULL, repeat('x', 10));
COPY lg_h FROM STDIN;
20	copied	20.25	\N
21	\N	\N	tail
\.
COPY lg_x FROM STDIN;
20	copied	20.25	\N
21	\N	\N	tail
\.
-- a HOT update, a non-HOT update (indexed n), a key update, a delete
UPDATE lg_h SET v = 'aa' WHERE id = 1;
UPDATE lg_x SET v = 'aa' WHERE id = 1;
UPDATE lg_h SET n = 2.5 WHERE id = 1;
UPDATE lg_x SET n = 2.5 WHERE id = 1;
UPDATE lg_h SET id = 10 WHERE id = 2;
UPDATE lg_x SET id = 10 WHERE id = 2;
DELETE FROM lg_h WHERE id = 1;
DELETE FROM lg_x WHERE id = 1;
-- a TOASTed value, then updates that keep it (unchanged-toast-datum)
INSERT INTO lg_h VALUES (3, 'c', 3, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 3000) i));
INSERT INTO lg_x VALUES (3, 'c', 3, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 3000) i));
UPDATE lg_h SET v = 'cc' WHERE id = 3;
UPDATE lg_x SET v = 'cc' WHERE id = 3;
UPDATE lg_h SET n = 33 WHERE id = 3;
UPDATE lg_x SET n = 33 WHERE id = 3;
-- savepoints: what is rolled back is not decoded
BEGIN;
INSERT INTO lg_h VALUES (4, 'd');
INSERT INTO lg_x VALUES (4, 'd');
SAVEPOINT s;
INSERT INTO lg_h VALUES (5, 'e');
INSERT INTO lg_x VALUES (5, 'e');
UPDATE lg_h SET v = 'gone' WHERE id = 4;
UPDATE lg_x SET v = 'gone' WHERE id = 4;
ROLLBACK TO s;
INSERT INTO lg_h VALUES (6, 'f');
INSERT INTO lg_x VALUES (6, 'f');
COMMIT;
BEGIN;
INSERT INTO lg_h VALUES (7, 'never');
INSERT INTO lg_x VALUES (7, 'never');
ROLLBACK;
-- ON CONFLICT: an update, nothing, and a confirmed insertion
INSERT INTO lg_h VALUES (6, 'g') ON CONFLICT (id) DO UPDATE SET v = excluded.v;
INSERT INTO lg_x VALUES (6, 'g') ON CONFLICT (id) DO UPDATE SET v = excluded.v;
INSERT INTO lg_h VALUES (6, 'h') ON CONFLICT (id) DO NOTHING;
INSERT INTO lg_x VALUES (6, 'h') ON CONFLICT (id) DO NOTHING;
INSERT INTO lg_h VALUES (8, 'i') ON CONFLICT (id) DO NOTHING;
INSERT INTO lg_x VALUES (8, 'i') ON CONFLICT (id) DO NOTHING;
-- replica identities
ALTER TABLE lg_h REPLICA IDENTITY FULL;
ALTER TABLE lg_x REPLICA IDENTITY FULL;
UPDATE lg_h SET v = 'full' WHERE id = 3;
UPDATE lg_x SET v = 'full' WHERE id = 3;
DELETE FROM lg_h WHERE id = 3;
DELETE FROM lg_x WHERE id = 3;
CREATE UNIQUE INDEX lg_h_v ON lg_h (v);
CREATE UNIQUE INDEX lg_x_v ON lg_x (v);
DELETE FROM lg_h WHERE v IS NULL;
DELETE FROM lg_x WHERE v IS NULL;
ALTER TABLE lg_h ALTER v SET NOT NULL, REPLICA IDENTITY USING INDEX lg_h_v;
ALTER TABLE lg_x ALTER v SET NOT NULL, REPLICA IDENTITY USING INDEX lg_x_v;
UPDATE lg_h SET n = 6 WHERE id = 6;
UPDATE lg_x SET n = 6 WHERE id = 6;
UPDATE lg_h SET v = 'ff' WHERE id = 6;
UPDATE lg_x SET v = 'ff' WHERE id = 6;
DELETE FROM lg_h WHERE id = 6;
DELETE FROM lg_x WHERE id = 6;
ALTER TABLE lg_h REPLICA IDENTITY NOTHING;
ALTER TABLE lg_x REPLICA IDENTITY NOTHING;
UPDATE lg_h SET v = 'nothing' WHERE id = 8;
UPDATE lg_x SET v = 'nothing' WHERE id = 8;
ALTER TABLE lg_h REPLICA IDENTITY DEFAULT;
ALTER TABLE lg_x REPLICA IDENTITY DEFAULT;
-- a transaction bigger than logical_decoding_work_mem (spilled to disk):
-- compared below, counted here
BEGIN;
INSERT INTO lg_h SELECT i, 'bulk' || i, i FROM generate_series(100, 3099) i;
INSERT INTO lg_x SELECT i, 'bulk' || i, i FROM generate_series(100, 3099) i;
-- row by row in key order: a scan's order is the table's physical order,
-- which differs between the twins
DO $$
BEGIN
  FOR i IN 100..3099 LOOP
    IF i % 3 = 0 THEN
      UPDATE lg_h SET n = n + 1 WHERE id = i;
      UPDATE lg_x SET n = n + 1 WHERE id = i;
    END IF;
    IF i % 7 = 0 THEN
      DELETE FROM lg_h WHERE id = i;
      DELETE FROM lg_x WHERE id = i;
    END IF;
  END LOOP;
END $$;
COMMIT;
TRUNCATE lg_h;
TRUNCATE lg_x;
SET logical_decoding_work_mem = '64kB';
CREATE TEMP TABLE lg_changes AS
  SELECT row_number() OVER () AS i, data
  FROM pg_logical_slot_get_changes('hasis_logical', NULL, NULL, 'include-xids', '0', 'skip-empty-xacts', '1');
RESET logical_decoding_work_mem;
SELECT pg_drop_replication_slot('hasis_logical');
-- Each table's changes in order, with the table's name taken out, and the
-- transaction they came in (the number of COMMITs before them).
CREATE TEMP TABLE lg_stream AS
  SELECT substring(data from 'lg_[hx]') AS t,
         row_number() OVER (PARTITION BY substring(data from 'lg_[hx]') ORDER BY i) AS k,
         xact,
         regexp_replace(data, '^table public\.lg_[hx]', 'table T') AS change
  FROM (SELECT i, data, count(*) FILTER (WHERE data = 'COMMIT') OVER (ORDER BY i) AS xact FROM lg_changes) l
  WHERE data LIKE 'table public.lg\__%';
-- hasis's changes are heap's: no difference in change or order
SELECT count(*) AS differences FROM (
  (SELECT k, change FROM lg_stream WHERE t = 'lg_h' EXCEPT ALL SELECT k, change FROM lg_stream WHERE t = 'lg_x')
  UNION ALL
  (SELECT k, change FROM lg_stream WHERE t = 'lg_x' EXCEPT ALL SELECT k, change FROM lg_stream WHERE t = 'lg_h')) d;
-- and each change of the hasis table comes in the transaction of its twin
-- or the one before it (the hasis table was changed first, mostly in a
-- statement of its own)
SELECT count(*) AS misplaced FROM lg_stream h JOIN lg_stream x USING (k)
  WHERE h.t = 'lg_h' AND x.t = 'lg_x' AND h.xact NOT IN (x.xact, x.xact - 1);
SELECT t, count(*) AS changes FROM lg_stream GROUP BY t ORDER BY t;
-- what was decoded for the hasis table, the bulk transaction's rows (ids
-- from 100) counted, not shown
SELECT k, left(change, 110) AS change FROM lg_stream
  WHERE t = 'lg_h' AND change !~ 'id\[integer\]:[1-9][0-9][0-9]' ORDER BY k;
SELECT count(*) FILTER (WHERE change LIKE '%: INSERT: %') AS inserts,
       count(*) FILTER (WHERE change LIKE '%: UPDATE: %') AS updates,
       count(*) FILTER (WHERE change LIKE '%: DELETE: %') AS deletes
  FROM lg_stream WHERE t = 'lg_h' AND change ~ 'id\[integer\]:[1-9][0-9][0-9]';
DROP TABLE lg_h, lg_x;
