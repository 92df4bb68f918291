-- UNIQUE hybrid_btree indexes: violations found in either stage, NULL rules,
-- build-time duplicates, INSERT ... ON CONFLICT, and PostgreSQL 15's btree-only
-- foreign keys.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;
CREATE TABLE un (k int, v text);
INSERT INTO un SELECT g, 'static' FROM generate_series(1, 1000) g;
CREATE UNIQUE INDEX un_k ON un USING hybrid_btree (k);
-- conflict with the static stage
INSERT INTO un VALUES (500, 'dup');
-- conflict with the dynamic stage
INSERT INTO un VALUES (2000, 'dynamic');
INSERT INTO un VALUES (2000, 'dup');
-- within one statement
INSERT INTO un VALUES (3000, 'a'), (3000, 'b');
-- deleted (committed) rows do not conflict
DELETE FROM un WHERE k = 10;
INSERT INTO un VALUES (10, 'again');
-- an aborted insert leaves no conflict behind
BEGIN; INSERT INTO un VALUES (4000, 'rolled back'); ROLLBACK;
INSERT INTO un VALUES (4000, 'kept');
-- updates that keep or change the key
UPDATE un SET v = 'touched' WHERE k = 11;
UPDATE un SET k = 12 WHERE k = 13;
UPDATE un SET k = 5000 WHERE k = 13;
SELECT k, v FROM un WHERE k IN (10, 11, 12, 13, 2000, 3000, 4000, 5000) ORDER BY k;
-- NULLs never conflict, unless NULLS NOT DISTINCT
INSERT INTO un VALUES (NULL, 'n1'), (NULL, 'n2');
SELECT count(*) FROM un WHERE k IS NULL;
CREATE TABLE unn (k int);
CREATE UNIQUE INDEX unn_k ON unn USING hybrid_btree (k) NULLS NOT DISTINCT;
INSERT INTO unn VALUES (NULL);
INSERT INTO unn VALUES (NULL);
-- the same after a merge moved everything into the static stage
SELECT pg_hybrid.merge('un_k') > 0 AS merged;
INSERT INTO un VALUES (2000, 'dup after merge');
-- multi-column uniqueness
CREATE TABLE um (a int, b text);
CREATE UNIQUE INDEX um_ab ON um USING hybrid_btree (a, b);
INSERT INTO um VALUES (1, 'x'), (1, 'y'), (2, 'x');
INSERT INTO um VALUES (1, 'x');
-- duplicates present at CREATE UNIQUE INDEX
CREATE TABLE ud (k int);
INSERT INTO ud VALUES (1), (2), (2);
CREATE UNIQUE INDEX ud_k ON ud USING hybrid_btree (k);
-- PostgreSQL 15 lets foreign keys reference btree indexes only
CREATE TABLE child (k int REFERENCES un (k));
-- INSERT ... ON CONFLICT arbitrates through the unique hybrid_btree index,
-- against both stages
INSERT INTO un VALUES (1, 'x') ON CONFLICT (k) DO NOTHING;
INSERT INTO un VALUES (1, 'x') ON CONFLICT DO NOTHING;
INSERT INTO un VALUES (2000, 'x') ON CONFLICT DO NOTHING;
INSERT INTO un VALUES (1, 'upd'), (3000, 'new') ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING *;
INSERT INTO un VALUES (3000, 'again') ON CONFLICT (k) DO UPDATE SET v = un.v || '+' || excluded.v RETURNING *;
SELECT pg_hybrid.merge('un_k') > 0 AS merged;
INSERT INTO un VALUES (3000, 'merged') ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE un.v <> 'x' RETURNING *;
WITH w AS (INSERT INTO un VALUES (3000, 'cte'), (3001, 'cte') ON CONFLICT (k) DO NOTHING RETURNING k) SELECT * FROM w;
-- a row cannot be affected twice in one command, as with btree
INSERT INTO un VALUES (2, 'a'), (2, 'b') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
SELECT k, v FROM un WHERE k IN (1, 2, 2000, 3000, 3001) ORDER BY k;
-- unique checks of new keys skip the static stage through a filter over its
-- keys; keys that came from the build or from a merge are still found
SELECT pg_hybrid.merge('un_k') > 0 AS merged;
INSERT INTO un VALUES (999, 'dup of a built key');
INSERT INTO un VALUES (3001, 'dup of a merged key');
INSERT INTO un VALUES (3002, 'new key');
-- partitioned targets: the partitions' indexes are opened mid-statement,
-- beyond what pg_hybrid can arbitrate; refused with a hint, the partition works
CREATE TABLE pt (k int, v text) PARTITION BY RANGE (k);
CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
CREATE UNIQUE INDEX pt1_k ON pt1 USING hybrid_btree (k);
INSERT INTO pt VALUES (1, 'a') ON CONFLICT DO NOTHING;
INSERT INTO pt1 VALUES (1, 'a') ON CONFLICT DO NOTHING;
INSERT INTO pt1 VALUES (1, 'b') ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING *;
DROP TABLE pt;
SELECT pg_hybrid.verify('un_k', true);
DROP TABLE un, unn, um, ud;
-- A failed CREATE UNIQUE INDEX CONCURRENTLY leaves an invalid index, as
-- btree's does; VACUUM FULL and CLUSTER rebuild it without uniqueness
-- (PostgreSQL passes ii_Unique = false), as they rebuild btree's.
CREATE TABLE uinv (k int8, v int);
INSERT INTO uinv VALUES (1, 1), (1, 2), (2, 3);
CREATE INDEX uinv_v ON uinv USING hybrid_btree (v);
CREATE UNIQUE INDEX CONCURRENTLY uinv_k ON uinv USING hybrid_btree (k);
CREATE UNIQUE INDEX CONCURRENTLY uinv_k_bt ON uinv USING btree (k);
SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'uinv'::regclass ORDER BY 1;
VACUUM FULL uinv;
CLUSTER uinv USING uinv_v;
SELECT k, v FROM uinv ORDER BY v;
SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'uinv'::regclass ORDER BY 1;
DROP TABLE uinv;
