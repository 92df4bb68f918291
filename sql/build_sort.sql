-- CREATE INDEX within maintenance_work_mem: past it the build's sort writes
-- sorted runs to a temporary file and merges them (core::external_sort).
-- Each engine AM is built from 1MB of memory over several MB of keys, on
-- a twin of a btree-indexed table, and must answer as btree does, pass
-- verify with heapallindexed, and find a duplicate that only the merge of
-- two runs brings together; the data has NULLs, dead tuples, repeated keys
-- and equal numerics with different bytes (1 vs 1.0).
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET enable_seqscan = off; SET enable_bitmapscan = off;
CREATE FUNCTION bs_table(name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('CREATE TABLE %I (k int8, t text COLLATE "C", n numeric)', name);
  -- keys in no order
  EXECUTE format($q$INSERT INTO %I SELECT (g::int8 * 7919) %% 150001, 'key-' || ((g::int8 * 104729) %% 60000) || repeat('x', g %% 13),
         CASE WHEN g %% 11 = 0 THEN NULL WHEN g %% 2 = 0 THEN ((g %% 500) / 10)::numeric ELSE ((g %% 500) / 10)::numeric(10,2) END
    FROM generate_series(1, 150000) g$q$, name);
  -- dead tuples: a build indexes them, and a unique build does not count them
  EXECUTE format('DELETE FROM %I WHERE k %% 97 = 0', name);
END $$;
SELECT bs_table(t) FROM unnest(ARRAY['bs_b', 'bs_h', 'bs_e', 'bs_g', 'bs_tb', 'bs_th']) t;
CREATE INDEX ON bs_b (t, k);
-- (an index on n on every twin that can have one: which of 1 and 1.0
-- stands for a group follows the scan order; elastic_btree refuses numeric)
CREATE INDEX ON bs_b (n);
CREATE UNIQUE INDEX ON bs_b (k);
SELECT pg_stat_force_next_flush();
SELECT temp_files AS temp_before FROM pg_stat_database WHERE datname = current_database() \gset
SET maintenance_work_mem = '1MB';
CREATE INDEX bs_h_t ON bs_h USING hybrid_btree (t, k);
CREATE INDEX bs_h_n ON bs_h USING hybrid_btree (n);
CREATE UNIQUE INDEX bs_h_k ON bs_h USING hybrid_btree (k);
CREATE INDEX bs_e_t ON bs_e USING elastic_btree (t, k);
CREATE INDEX bs_g_t ON bs_g USING griffin (t, k);
CREATE UNIQUE INDEX bs_g_k ON bs_g USING griffin (k);
CREATE INDEX bs_g_n ON bs_g USING griffin (n);
CREATE INDEX bs_tb_t ON bs_tb USING tiered_btree (t, k);
CREATE UNIQUE INDEX bs_tb_k ON bs_tb USING tiered_btree (k) INCLUDE (t);
CREATE INDEX bs_tb_n ON bs_tb USING tiered_btree (n);
CREATE INDEX bs_th_t ON bs_th USING tiered_hash (t);
CREATE UNIQUE INDEX bs_th_k ON bs_th USING tiered_hash (k);
SELECT pg_stat_force_next_flush();
-- the builds spilled (btree's ran before the counter was read)
SELECT temp_files > :temp_before AS builds_spilled FROM pg_stat_database WHERE datname = current_database();
-- a duplicate two runs bring together: one copy among the first rows
-- scanned, the other among the last
INSERT INTO bs_e (k, t) VALUES (7919, 'dup');
CREATE UNIQUE INDEX bs_e_dup ON bs_e USING hybrid_btree (k);
CREATE UNIQUE INDEX bs_e_dup ON bs_e USING tiered_hash (k);
CREATE UNIQUE INDEX bs_e_dup ON bs_e USING btree (k);
DELETE FROM bs_e WHERE t = 'dup';
RESET maintenance_work_mem;
SELECT i AS index, pg_hybrid.verify(i, heapallindexed => true)
  FROM unnest(ARRAY['bs_h_t', 'bs_h_n', 'bs_h_k', 'bs_e_t', 'bs_g_t', 'bs_g_k', 'bs_g_n', 'bs_tb_t', 'bs_tb_k', 'bs_tb_n', 'bs_th_t', 'bs_th_k']::regclass[]) i;
-- every twin answers as btree does: a digest of the rows in scan order
CREATE FUNCTION bs_digest(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
  EXECUTE format('SELECT md5(coalesce(string_agg(x::text, %L), %L)) FROM (%s) x', ',', '', q) INTO r;
  RETURN r;
END $$;
CREATE TEMP TABLE bs_q (q text, skip text[]);
INSERT INTO bs_q VALUES
  ('SELECT t, k FROM %I ORDER BY t, k', '{bs_th}'),
  ('SELECT t, k FROM %I WHERE t >= ''key-3'' AND t < ''key-4'' ORDER BY t DESC, k DESC', '{bs_th}'),
  ('SELECT n, count(*) FROM %I WHERE n BETWEEN 10 AND 20 GROUP BY n ORDER BY n', '{bs_th, bs_e}'),
  ('SELECT k FROM %I WHERE k > 149000 ORDER BY k', '{bs_th}'),
  ('SELECT k, t FROM %I WHERE t = ''key-777xxxxx'' ORDER BY k', '{}'),
  ('SELECT t FROM %I WHERE k = 7919 * 3', '{}'),
  ('SELECT count(*) FROM %I WHERE k = 97', '{}');
SELECT left(q, 60) AS query,
       count(DISTINCT bs_digest(format(q, tbl))) AS answers, count(*) AS tables
  FROM bs_q, unnest(ARRAY['bs_b', 'bs_h', 'bs_e', 'bs_g', 'bs_tb', 'bs_th']) tbl
 WHERE tbl <> ALL (skip)
 GROUP BY q ORDER BY q;
