-- Reloptions, GUCs and bad input: each gives a clear ERROR.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
CREATE TABLE op (k int, p point, t text);
INSERT INTO op SELECT g, point(g, g), repeat('x', g % 10) FROM generate_series(1, 100) g;
CREATE INDEX op_bad ON op USING hybrid_btree (k) WITH (merge_ratio = 0);
CREATE INDEX op_bad ON op USING hybrid_btree (k) WITH (merge_ratio = 100000);
CREATE INDEX op_bad ON op USING hybrid_btree (k) WITH (merge_ratio = 'often');
CREATE INDEX op_bad ON op USING hybrid_btree (k) WITH (compression = 'zstd');
CREATE INDEX op_bad ON op USING hybrid_btree (k) WITH (fillfactor = 50);
CREATE INDEX op_bad ON op USING hybrid_btree (p);
CREATE INDEX op_ok ON op USING hybrid_btree (k) WITH (merge_ratio = 4, compression = 'lz4');
SELECT reloptions FROM pg_class WHERE relname = 'op_ok';
ALTER INDEX op_ok SET (merge_ratio = 20);
ALTER INDEX op_ok SET (compression = 'snappy');
ALTER INDEX op_ok RESET (compression);
SELECT reloptions FROM pg_class WHERE relname = 'op_ok';
-- an unsupported type may still be an INCLUDE column
CREATE INDEX op_inc ON op USING hybrid_btree (k) INCLUDE (p);
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT k, p FROM op WHERE k = 42;
RESET enable_seqscan; RESET enable_bitmapscan;
-- keys longer than a third of a page
CREATE INDEX op_t ON op USING hybrid_btree (t);
INSERT INTO op (k, t) VALUES (0, repeat('y', 3000));
-- functions on something that is not a hybrid_btree index
CREATE INDEX op_btree ON op (k);
SELECT pg_hybrid.verify('op_btree');
SELECT * FROM pg_hybrid.index_stats('op');
SELECT pg_hybrid.merge('op_btree');
-- postmaster-only and range-checked settings
SET pg_hybrid.shared_memory = '1GB';
SET pg_hybrid.merge_min_entries = 0;
SET pg_hybrid.nonexistent = 1;
SHOW pg_hybrid.background_merge;
DROP TABLE op;
