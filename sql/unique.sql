-- UNIQUE hybrid_btree indexes: violations found in either stage, NULL rules,
-- build-time duplicates, and the ON CONFLICT limitation of PostgreSQL 15.
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
-- foreign keys can reference a column with a unique hybrid_btree index
CREATE TABLE child (k int REFERENCES un (k));
-- PostgreSQL 15 speculative insertion is btree-only
INSERT INTO un VALUES (1, 'x') ON CONFLICT (k) DO NOTHING;
INSERT INTO un VALUES (1, 'x') ON CONFLICT DO NOTHING;
SELECT pg_hybrid.verify('un_k', true);
DROP TABLE un, unn, um, ud;
