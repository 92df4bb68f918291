-- Blocks pg_hybrid reads count in pg_statio_* as PostgreSQL's own reads do:
-- also when a backend finds a block in the buffer it last saw it in
-- (ReadRecentBuffer, src/storage/buffer.rs), and after a flush of the
-- pending statistics, which unlinks a relation from its entry.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.hasis_compaction_worker = off;
CREATE TABLE bs_hasis (id int PRIMARY KEY, v int) USING hasis;
INSERT INTO bs_hasis SELECT g, g FROM generate_series(1, 10000) g;
CREATE TABLE bs_heap (id int, v int);
INSERT INTO bs_heap SELECT g, g FROM generate_series(1, 10000) g;
CREATE INDEX bs_heap_id ON bs_heap USING hybrid_btree (id);
VACUUM ANALYZE bs_hasis, bs_heap;
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE FUNCTION bs_probe(tab regclass, n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE x int;
BEGIN
    FOR i IN 1..n LOOP
        EXECUTE format('SELECT v FROM %s WHERE id = $1', tab) INTO x USING 1 + (i * 37) % 10000;
    END LOOP;
END $$;
CREATE FUNCTION bs_blocks(OUT heap_blocks bigint, OUT index_blocks bigint) LANGUAGE sql AS $$
    SELECT (SELECT heap_blks_read + heap_blks_hit FROM pg_statio_user_tables WHERE relname = 'bs_hasis'),
           (SELECT idx_blks_read + idx_blks_hit FROM pg_statio_user_indexes WHERE indexrelname = 'bs_heap_id')
$$;
-- Three rounds, each flushed: the later ones find their blocks where the
-- first left them.
SELECT pg_stat_force_next_flush();
SELECT * FROM bs_blocks() \gset before_
SELECT bs_probe('bs_hasis', 500), bs_probe('bs_heap', 500);
SELECT pg_stat_force_next_flush();
SELECT heap_blocks - :before_heap_blocks >= 500 AS hasis_counted, index_blocks - :before_index_blocks >= 500 AS index_counted FROM bs_blocks();
SELECT * FROM bs_blocks() \gset before_
SELECT bs_probe('bs_hasis', 500), bs_probe('bs_heap', 500);
SELECT pg_stat_force_next_flush();
SELECT heap_blocks - :before_heap_blocks >= 500 AS hasis_counted, index_blocks - :before_index_blocks >= 500 AS index_counted FROM bs_blocks();
SELECT * FROM bs_blocks() \gset before_
SELECT bs_probe('bs_hasis', 500), bs_probe('bs_heap', 500);
SELECT pg_stat_force_next_flush();
SELECT heap_blocks - :before_heap_blocks >= 500 AS hasis_counted, index_blocks - :before_index_blocks >= 500 AS index_counted FROM bs_blocks();
DROP TABLE bs_hasis, bs_heap;
DROP FUNCTION bs_probe(regclass, int), bs_blocks();
