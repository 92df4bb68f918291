-- tests/sqlsmith/schema.sql: the database sqlsmith explores (tests/sqlsmith.sh).
-- One table per index AM with indexes of every shape that AM accepts
-- (unique, multi-column, INCLUDE, partial, expression, collated, DESC,
-- reloptions), three of them heap and two (tiered_btree's, tiered_hash's)
-- hasis, a hasis table with indexes of ours and PostgreSQL's, and a heap
-- table with a btree as the odd one out. A wide column has TOASTed
-- values. Data have NULLs, duplicates and every
-- opclass type pg_hybrid supports. An index an AM refuses is reported as a
-- NOTICE (the refusals are the AM's documented limits: elastic_btree has
-- neither INCLUDE nor expressions, and needs byte-ordered keys).
CREATE TABLE src AS
  SELECT g AS i4, (g * 7919 % 100003)::int8 AS i8, (g % 300)::int2 AS i2,
         (g * 1.5)::float8 AS f8, (g % 97)::float4 AS f4, (g / 7.0)::numeric(12,3) AS n,
         md5(g::text) AS tx, (md5(g::text))::varchar(12) AS v, ('x' || g % 50)::char(6) AS c,
         date '2020-01-01' + g % 1000 AS d, timestamp '2020-01-01' + g * interval '37 minutes' AS ts,
         timestamptz '2020-01-01' + g * interval '41 minutes' AS tz, (g % 2 = 0) AS b,
         ('00000000-0000-0000-0000-' || lpad(to_hex(g), 12, '0'))::uuid AS u,
         decode(to_hex(g * 31), 'escape') AS by, g * interval '1 second' AS iv,
         time '00:00' + g * interval '3 seconds' AS tm,
         CASE WHEN g % 50 = 0 THEN (SELECT string_agg(md5((g * k)::text), '') FROM generate_series(1, 80) k) END AS w
  FROM generate_series(1, :rows) g;
UPDATE src SET tx = NULL WHERE i4 % 101 = 0;
UPDATE src SET i8 = NULL WHERE i4 % 103 = 0;
UPDATE src SET f8 = 'NaN' WHERE i4 % 211 = 0;
UPDATE src SET f8 = '-0' WHERE i4 % 223 = 0;
UPDATE src SET ts = 'infinity' WHERE i4 % 227 = 0;

DO $$
DECLARE
  am text;
  ddl text;
BEGIN
  FOREACH am IN ARRAY ARRAY['hybrid_btree', 'elastic_btree', 'griffin', 'tiered_btree'] LOOP
    -- tiered_btree's table is a hasis table: hasis under every scan kind
    -- (elastic_btree reads keys back from heap pages and needs heap)
    EXECUTE format('CREATE TABLE t_%s %s AS SELECT * FROM src', am, CASE WHEN am = 'tiered_btree' THEN 'USING hasis' ELSE '' END);
    FOREACH ddl IN ARRAY ARRAY[
        'CREATE UNIQUE INDEX t_%1$s_i4 ON t_%1$s USING %1$s (i4)',
        'CREATE INDEX t_%1$s_i8 ON t_%1$s USING %1$s (i8, tx)',
        'CREATE INDEX t_%1$s_i8c ON t_%1$s USING %1$s (i8, tx COLLATE "C")',
        'CREATE INDEX t_%1$s_f8 ON t_%1$s USING %1$s (f8) INCLUDE (b)',
        'CREATE INDEX t_%1$s_f8b ON t_%1$s USING %1$s (f8)',
        'CREATE INDEX t_%1$s_n ON t_%1$s USING %1$s (n)',
        'CREATE INDEX t_%1$s_ts ON t_%1$s USING %1$s (ts, d)',
        'CREATE INDEX t_%1$s_u ON t_%1$s USING %1$s (u)',
        'CREATE INDEX t_%1$s_c ON t_%1$s USING %1$s (c, v)',
        'CREATE INDEX t_%1$s_tz ON t_%1$s USING %1$s (tz) WHERE i2 < 100',
        'CREATE INDEX t_%1$s_lower ON t_%1$s USING %1$s (lower(tx))',
        'CREATE INDEX t_%1$s_tc ON t_%1$s USING %1$s (tx COLLATE "C", i2)',
        'CREATE INDEX t_%1$s_by ON t_%1$s USING %1$s (by, iv, tm)',
        'CREATE INDEX t_%1$s_f4 ON t_%1$s USING %1$s (f4 DESC NULLS LAST, b)'] LOOP
      BEGIN
        EXECUTE format(ddl, am);
      EXCEPTION WHEN feature_not_supported OR invalid_parameter_value OR datatype_mismatch OR invalid_object_definition OR undefined_object THEN
        RAISE NOTICE 'refused by %: %', am, SQLERRM;
      END;
    END LOOP;
  END LOOP;
END $$;

CREATE TABLE t_tiered_hash USING hasis AS SELECT * FROM src;
CREATE UNIQUE INDEX t_tiered_hash_i4 ON t_tiered_hash USING tiered_hash (i4);
CREATE INDEX t_tiered_hash_i8 ON t_tiered_hash USING tiered_hash (i8, tx);
CREATE INDEX t_tiered_hash_u ON t_tiered_hash USING tiered_hash (u);
CREATE INDEX t_tiered_hash_n ON t_tiered_hash USING tiered_hash (n);

CREATE TABLE t_hasis (LIKE src) USING hasis;
INSERT INTO t_hasis SELECT * FROM src;
CREATE UNIQUE INDEX t_hasis_i4 ON t_hasis (i4);
CREATE INDEX t_hasis_i8 ON t_hasis USING griffin (i8);
CREATE INDEX t_hasis_ts ON t_hasis USING hybrid_btree (ts);
CREATE INDEX t_hasis_u ON t_hasis USING hash (u);

-- reloptions, which a dump must carry
CREATE INDEX t_hybrid_btree_opt ON t_hybrid_btree USING hybrid_btree (i2, i4) WITH (merge_ratio = 20, compression = lz4);
CREATE INDEX t_elastic_btree_opt ON t_elastic_btree USING elastic_btree (i2, i4) WITH (size_bound = '512kB');
CREATE INDEX t_griffin_opt ON t_griffin USING griffin (i2, i4) WITH (sync_ratio = 20, bucket_fill = 60);
CREATE INDEX t_tiered_btree_opt ON t_tiered_btree USING tiered_btree (i2, i4) WITH (hot_size = '256kB', sample_rate = 0.5);
CREATE INDEX t_tiered_hash_opt ON t_tiered_hash USING tiered_hash (i2) WITH (hot_size = '256kB');

CREATE TABLE t_heap AS SELECT * FROM src;
CREATE INDEX t_heap_i4 ON t_heap (i4);
DROP TABLE src;

-- sqlsmith's roles: not superusers (sqlsmith calls every function it can),
-- one with the planner's defaults, one that is steered to index paths.
CREATE ROLE smith LOGIN;
CREATE ROLE smith_idx LOGIN IN ROLE smith;
ALTER ROLE smith SET statement_timeout = '3s';
ALTER ROLE smith_idx SET statement_timeout = '3s';
ALTER ROLE smith_idx SET enable_seqscan = off;
ALTER ROLE smith_idx SET enable_sort = off;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO smith;
-- PostgreSQL's own WAL-writing function that any role may call: on the
-- standby it fails inside XLogBeginInsert with an internal error, which
-- the test would otherwise have to tell from one of ours.
REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, bytea) FROM PUBLIC;
GRANT USAGE ON SCHEMA pg_hybrid TO smith;
VACUUM ANALYZE;
