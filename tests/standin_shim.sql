-- tests/standin_shim.sql — stand-in for the pg_hybrid SQL API, used ONLY when the
-- harness runs with PH_AM=btree (extension not built yet).  It lets every test
-- script run end to end against PostgreSQL's btree:
--   pg_hybrid.merge(idx)             no-op
--   pg_hybrid.verify(idx, heapallindexed)  amcheck's bt_index_check
--   pg_hybrid.index_stats(idx)       sizes from the catalog, dynamic stage = 0
CREATE EXTENSION IF NOT EXISTS amcheck;
-- "pg_" schema names are reserved: CREATE SCHEMA pg_hybrid needs allow_system_table_mods.
SET allow_system_table_mods = on;
CREATE SCHEMA IF NOT EXISTS pg_hybrid;
RESET allow_system_table_mods;

CREATE OR REPLACE FUNCTION pg_hybrid.merge(idx regclass) RETURNS void
LANGUAGE sql AS $$ SELECT $$;

CREATE OR REPLACE FUNCTION pg_hybrid.verify(idx regclass, heapallindexed boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM bt_index_check(idx, heapallindexed);
END $$;

CREATE OR REPLACE FUNCTION pg_hybrid.index_stats(idx regclass)
RETURNS TABLE (dynamic_entries bigint, dynamic_bytes bigint, static_entries bigint,
               static_pages bigint, static_bytes bigint, merges bigint,
               last_merge_ms double precision, bloom_skips bigint,
               bytes_per_entry double precision)
LANGUAGE sql AS $$
    SELECT 0::bigint, 0::bigint, c.reltuples::bigint,
           pg_relation_size(idx) / current_setting('block_size')::bigint,
           pg_relation_size(idx), 0::bigint, 0::float8, 0::bigint,
           CASE WHEN c.reltuples > 0 THEN pg_relation_size(idx) / c.reltuples ELSE NULL END
    FROM pg_class c WHERE c.oid = idx
$$;
