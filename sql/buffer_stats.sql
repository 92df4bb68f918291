-- (and, at the end, the scans and rows of pg_stat_*_tables)
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

-- Scans and rows of a hasis table count in pg_stat_*_tables as heap's do:
-- seq_scan per sequential scan started (the column scan, which stands in
-- for it, too; rescans too), seq_tup_read per row a sequential, sample or
-- TID range scan returns, idx_tup_fetch per row a bitmap heap scan fetches.
CREATE TABLE sc_hasis (id int, v int) USING hasis;
CREATE TABLE sc_heap (id int, v int);
INSERT INTO sc_hasis SELECT g, g % 7 FROM generate_series(1, 3000) g;
INSERT INTO sc_heap SELECT * FROM sc_hasis;
CREATE INDEX ON sc_hasis (id);
CREATE INDEX ON sc_heap (id);
VACUUM ANALYZE sc_hasis, sc_heap;
CREATE FUNCTION sc_counts(tab text, OUT seq_scan bigint, OUT seq_tup_read bigint, OUT idx_tup_fetch bigint) LANGUAGE sql AS $$
    SELECT seq_scan, seq_tup_read, idx_tup_fetch FROM pg_stat_user_tables WHERE relname = tab
$$;
CREATE FUNCTION sc_queries(tab text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE x bigint;
BEGIN
    SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off;
    SET LOCAL pg_hybrid.enable_hasis_column_scan = off;
    EXECUTE format('SELECT count(*) FROM %I', tab) INTO x;
    SET LOCAL pg_hybrid.enable_hasis_column_scan = on;
    EXECUTE format('SELECT sum(v) FROM %I', tab) INTO x;
    -- a rescanned inner side: one scan per outer row
    EXECUTE format('SELECT count(*) FROM generate_series(1, 3) s, LATERAL (SELECT * FROM %I t WHERE t.v = s OFFSET 0) q', tab) INTO x;
    EXECUTE format('SELECT count(*) FROM %I TABLESAMPLE BERNOULLI (100)', tab) INTO x;
    EXECUTE format('SELECT count(*) FROM %I WHERE ctid >= ''(0,1)''', tab) INTO x;
    SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = on;
    EXECUTE format('SELECT count(v) FROM %I WHERE id <= 500', tab) INTO x;
END $$;
SELECT pg_stat_force_next_flush();
SELECT * FROM sc_counts('sc_hasis') \gset hasis_
SELECT * FROM sc_counts('sc_heap') \gset heap_
SELECT sc_queries('sc_hasis'), sc_queries('sc_heap');
SELECT pg_stat_force_next_flush();
SELECT 'hasis' AS tab, seq_scan - :hasis_seq_scan AS seq_scan, seq_tup_read - :hasis_seq_tup_read AS seq_tup_read,
       idx_tup_fetch - :hasis_idx_tup_fetch AS idx_tup_fetch FROM sc_counts('sc_hasis')
UNION ALL
SELECT 'heap', seq_scan - :heap_seq_scan, seq_tup_read - :heap_seq_tup_read,
       idx_tup_fetch - :heap_idx_tup_fetch FROM sc_counts('sc_heap');
DROP TABLE sc_hasis, sc_heap;
DROP FUNCTION sc_counts(text), sc_queries(text);
