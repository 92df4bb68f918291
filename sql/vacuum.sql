-- VACUUM removes dead TIDs from both stages and pages get reused.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;
CREATE TABLE va (k int, v int) WITH (autovacuum_enabled = off);
INSERT INTO va SELECT g, g FROM generate_series(1, 20000) g;
CREATE INDEX va_k ON va USING hybrid_btree (k);
INSERT INTO va SELECT g, g FROM generate_series(20001, 25000) g;
SELECT dynamic_entries, static_entries FROM pg_hybrid.index_stats('va_k');
DELETE FROM va WHERE k % 2 = 0;
VACUUM va;
SELECT dynamic_entries, static_entries FROM pg_hybrid.index_stats('va_k');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*), sum(k) FROM va WHERE k BETWEEN 100 AND 24000;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT count(*), sum(k) FROM va WHERE k BETWEEN 100 AND 24000;
SELECT pg_hybrid.verify('va_k', true);
-- merges retire old stages; once no snapshot can read them they are reused,
-- so repeated insert/merge cycles stop growing the relation
INSERT INTO va SELECT g, g FROM generate_series(30001, 31000) g;
SELECT pg_hybrid.merge('va_k') > 0 AS merged;
INSERT INTO va SELECT g, g FROM generate_series(31001, 32000) g;
SELECT pg_hybrid.merge('va_k') > 0 AS merged;
SELECT pg_relation_size('va_k') AS size_steady \gset
INSERT INTO va SELECT g, g FROM generate_series(32001, 33000) g;
SELECT pg_hybrid.merge('va_k') > 0 AS merged;
DELETE FROM va WHERE k BETWEEN 32001 AND 33000;
VACUUM va;
INSERT INTO va SELECT g, g FROM generate_series(33001, 34000) g;
SELECT pg_hybrid.merge('va_k') > 0 AS merged;
SELECT pg_relation_size('va_k') <= :size_steady AS space_reused;
SELECT static_entries FROM pg_hybrid.index_stats('va_k');
DELETE FROM va;
VACUUM va;
SELECT dynamic_entries, static_entries FROM pg_hybrid.index_stats('va_k');
SELECT count(*) FROM va WHERE k > 0;
SELECT pg_hybrid.verify('va_k', true);
DROP TABLE va;
