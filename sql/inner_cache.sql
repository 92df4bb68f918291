-- Backend-local copies of static inner pages (src/hybrid/inner_cache.rs): a
-- backend keeps the inner pages of the stage it descended, keyed by
-- (relfilenode, generation, root). Merges move to a new generation; an index
-- rebuilt under the same relfilenode (TRUNCATE in the transaction that
-- created the table) starts its generations over, and the relcache flush
-- must drop the copies: the rebuilt stage has other separators.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET enable_seqscan = off; SET enable_bitmapscan = off;
CREATE TABLE ic (k int8, v int8) WITH (autovacuum_enabled = off);
CREATE TABLE ic_twin (k int8, v int8) WITH (autovacuum_enabled = off);
INSERT INTO ic SELECT g * 3, g FROM generate_series(1, 150000) g;
INSERT INTO ic_twin SELECT * FROM ic;
CREATE INDEX ic_k ON ic USING hybrid_btree (k);
CREATE INDEX ic_twin_k ON ic_twin USING btree (k);
SELECT static_pages > 1 AS has_inner_levels FROM pg_hybrid.index_stats('ic_k');
-- probes and a range over many leaves (neighbour leaves through the copies)
SELECT v FROM ic WHERE k = 3 * 77777;
SELECT count(*), sum(v) FROM ic WHERE k BETWEEN 30000 AND 300000;
-- a merge: the next descent reads the new generation's inner pages (150k
-- inserts into a 150k index merge on their own too, maybe all of them by
-- the time merge() runs: the generation tells)
CREATE TEMP TABLE ic_gen AS SELECT generation FROM pg_hybrid.index_stats('ic_k');
INSERT INTO ic SELECT g * 3 + 1, -g FROM generate_series(1, 150000) g;
INSERT INTO ic_twin SELECT g * 3 + 1, -g FROM generate_series(1, 150000) g;
SELECT pg_hybrid.merge('ic_k') >= 0 AS merged;
SELECT s.generation > g.generation AS new_generation FROM pg_hybrid.index_stats('ic_k') s, ic_gen g;
SELECT v FROM ic WHERE k = 3 * 77777;
SELECT v FROM ic WHERE k = 3 * 77777 + 1;
SELECT count(*) FROM (
  (SELECT k, v FROM ic WHERE k BETWEEN 30000 AND 300000 EXCEPT ALL SELECT k, v FROM ic_twin WHERE k BETWEEN 30000 AND 300000)
  UNION ALL
  (SELECT k, v FROM ic_twin WHERE k BETWEEN 30000 AND 300000 EXCEPT ALL SELECT k, v FROM ic WHERE k BETWEEN 30000 AND 300000)) d;
SELECT k, v FROM ic WHERE k > 449990 ORDER BY k DESC LIMIT 3;
DROP TABLE ic, ic_twin;
-- Same relfilenode, same generation after TRUNCATE: the old copies must not serve
BEGIN;
CREATE TABLE pc (k int8, v int8);
CREATE INDEX pc_k ON pc USING hybrid_btree (k);
INSERT INTO pc SELECT g, g FROM generate_series(1, 200000) g;
SELECT pg_hybrid.merge('pc_k') > 0 AS merged;
CREATE TEMP TABLE pc_before AS SELECT generation, pg_relation_filenode('pc_k') AS node FROM pg_hybrid.index_stats('pc_k');
SELECT v FROM pc WHERE k = 123456;
TRUNCATE pc;
INSERT INTO pc SELECT g * 2, -g FROM generate_series(1, 200000) g;
SELECT pg_hybrid.merge('pc_k') > 0 AS merged;
SELECT s.generation = b.generation AS same_generation, pg_relation_filenode('pc_k') = b.node AS same_relfilenode
  FROM pg_hybrid.index_stats('pc_k') s, pc_before b;
SELECT v FROM pc WHERE k = 246912;
SELECT v FROM pc WHERE k = 123456;
SELECT count(*) FROM pc WHERE k BETWEEN 1000 AND 150000;
COMMIT;
DROP TABLE pc;
