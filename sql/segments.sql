-- Segmented merges: a merge rewrites the static stage one key-range segment
-- at a time, switching to each step, so the file grows by about one segment,
-- not by a second stage; leaves no fresh key falls into are kept as they are.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
-- no merge but the ones this test runs
SET pg_hybrid.merge_min_entries = 1000000;
SET enable_seqscan = off; SET enable_bitmapscan = off;
CREATE TABLE sg (k int8 NOT NULL, v int);
-- 400k keys: about 190 compact leaves, merged in steps of 64 leaves
INSERT INTO sg SELECT g * 4, 0 FROM generate_series(1, 400000) g;
CREATE UNIQUE INDEX sg_h ON sg USING hybrid_btree (k);
CREATE UNIQUE INDEX sg_b ON sg USING btree (k);
CREATE TEMP TABLE sizes AS
  SELECT pg_relation_size('sg_h') AS built, static_pages AS pages, generation AS gen0
  FROM pg_hybrid.index_stats('sg_h');
-- random keys everywhere: every segment is rewritten, one step each
INSERT INTO sg SELECT g * 4 + 1 + (g % 3), 1 FROM generate_series(1, 400000, 7) g;
UPDATE sizes SET built = pg_relation_size('sg_h');  -- stage + delta log
SELECT pg_hybrid.merge('sg_h');
SELECT generation - gen0 AS steps, dynamic_entries, static_entries
  FROM pg_hybrid.index_stats('sg_h'), sizes;
-- the merge grew the file by the stage's growth (14%) and about one segment
-- (64 of ~190 leaves), where writing a second stage would add the whole
-- grown stage (1.14 x pages) again
SELECT pg_relation_size('sg_h') - built < pages * 8192 * 0.8 AS no_second_stage FROM sizes;
SELECT pg_hybrid.verify('sg_h', true);
-- same rows as btree, in both directions
SELECT count(*), sum(k) FROM sg WHERE k BETWEEN 1000 AND 900000;
SELECT sum(k) FROM (SELECT k FROM sg WHERE k BETWEEN 1000 AND 900000 ORDER BY k DESC LIMIT 100000) s;
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on;
SELECT count(*), sum(k) FROM sg WHERE k BETWEEN 1000 AND 900000;
RESET enable_indexscan; RESET enable_indexonlyscan; SET enable_bitmapscan = off;
-- keys at the end only: one step, the leaves before it are kept
CREATE TEMP TABLE before_tail AS SELECT generation AS g FROM pg_hybrid.index_stats('sg_h');
INSERT INTO sg SELECT 2000000 + g, 2 FROM generate_series(1, 5000) g;
SELECT pg_hybrid.merge('sg_h');
SELECT generation - g AS steps FROM pg_hybrid.index_stats('sg_h'), before_tail;
SELECT pg_hybrid.verify('sg_h', true);
SELECT count(*), min(k), max(k) FROM sg WHERE k > 1999990;
-- VACUUM's merge (dead TIDs) walks every segment
DELETE FROM sg WHERE v = 1 AND k % 2 = 0;
VACUUM sg;
SELECT pg_hybrid.verify('sg_h', true);
SELECT count(*), sum(k) FROM sg WHERE k BETWEEN 1000 AND 900000;
DROP INDEX sg_h;
SELECT count(*), sum(k) FROM sg WHERE k BETWEEN 1000 AND 900000;
SELECT count(*), min(k), max(k) FROM sg WHERE k > 1999990;
-- a few keys spread over a freshly built (full) stage: one step rewrites
-- only the leaves they fall into (runs) and keeps every other; a full leaf
-- that takes a key splits into two, so the stage grows by a page per key,
-- and the file by the new leaves and inner pages, not by the stage
CREATE UNIQUE INDEX sg_r ON sg USING hybrid_btree (k);
CREATE TEMP TABLE before_sparse AS
  SELECT generation AS g, static_pages AS pages FROM pg_hybrid.index_stats('sg_r');
INSERT INTO sg SELECT g * 4 + 3, 3 FROM generate_series(9, 400000, 20013) g;  -- g % 7 = 2: free keys
ALTER TABLE before_sparse ADD COLUMN bytes int8;
UPDATE before_sparse SET bytes = pg_relation_size('sg_r');  -- the stage and the delta log
SELECT pg_hybrid.merge('sg_r');
SELECT generation - g AS steps, static_pages - pages BETWEEN 10 AND 20 AS grew_by_splits,
       (pg_relation_size('sg_r') - bytes) / 8192 < pages / 3 AS kept_the_rest
  FROM pg_hybrid.index_stats('sg_r'), before_sparse;
SELECT pg_hybrid.verify('sg_r', true);
-- the same rows as btree above, and the new keys
DROP INDEX sg_b;
SELECT count(*), sum(k) FROM sg WHERE k BETWEEN 1000 AND 900000;
SELECT count(*), min(k), max(k) FROM sg WHERE k > 1999990;
SELECT k FROM sg WHERE v = 3 ORDER BY k;
SELECT k FROM sg WHERE v = 3 ORDER BY k DESC LIMIT 3;
DROP TABLE sg;
