-- tests/sqlsmith/api.sql: every pg_hybrid SQL function on every relation of
-- the database (tables and indexes of every AM, views, sequences, a
-- materialized view, partitioned tables and indexes, a foreign table,
-- temporary and unlogged relations, system catalogs and TOAST tables),
-- on NULL and on OIDs that name nothing. Each call may fail with a clear
-- ERROR; none may fail with an internal error (SQLSTATE class XX) or crash.
-- Run once as the superuser and once as the unprivileged role smith
-- (tests/sqlsmith.sh): the warnings marked API-INTERNAL are counted there.
\set ON_ERROR_STOP 1
CREATE TEMP TABLE api_tmp (a int);
CREATE INDEX ON api_tmp USING griffin (a);
CREATE INDEX ON api_tmp USING hybrid_btree (a);
INSERT INTO api_tmp SELECT generate_series(1, 500);
DO $$
DECLARE
  r record;
  f text;
  calls int := 0;
  errors int := 0;
  bad int := 0;
  arg text;
BEGIN
  FOR r IN
      SELECT c.oid::text AS arg, c.relname AS name, c.relkind AS kind FROM pg_class c
      WHERE c.relnamespace <> 'pg_toast'::regnamespace OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relname LIKE 't\_%')
      UNION ALL SELECT 'NULL', 'NULL', '-'
      UNION ALL SELECT '0', 'oid 0', '-'
      UNION ALL SELECT '4294967295', 'oid 2^32-1', '-'
      UNION ALL SELECT '''pg_class''::regclass', 'pg_class (by name)', 'r'
  LOOP
    FOREACH f IN ARRAY ARRAY['index_stats(%s)', 'merge(%s)', 'sync_lag(%s)', 'table_stats(%s)',
                             'verify(%s, true)', 'verify(%s, false)', 'verify(%s)', 'verify_table(%s)',
                             'storage_stats(%s, true)', 'storage_stats(%s, false)'] LOOP
      BEGIN
        calls := calls + 1;
        EXECUTE 'SELECT count(*) FROM (SELECT * FROM pg_hybrid.' || format(f, r.arg) || ') x';
      EXCEPTION WHEN OTHERS THEN
        errors := errors + 1;
        IF SQLSTATE LIKE 'XX%' THEN
          bad := bad + 1;
          RAISE WARNING 'API-INTERNAL pg_hybrid.% on % (relkind %): SQLSTATE %: %', format(f, r.arg), r.name, r.kind, SQLSTATE, SQLERRM;
        END IF;
      END;
    END LOOP;
  END LOOP;
  FOREACH f IN ARRAY ARRAY['arena_stats()', 'leaf_cache_stats()', 'check_preloaded()'] LOOP
    BEGIN
      calls := calls + 1;
      EXECUTE 'SELECT count(*) FROM (SELECT * FROM pg_hybrid.' || f || ') x';
    EXCEPTION WHEN OTHERS THEN
      errors := errors + 1;
      IF SQLSTATE LIKE 'XX%' THEN
        bad := bad + 1;
        RAISE WARNING 'API-INTERNAL pg_hybrid.%: SQLSTATE %: %', f, SQLSTATE, SQLERRM;
      END IF;
    END;
  END LOOP;
  RAISE WARNING 'API-SUMMARY % calls as %, % ERRORs, % internal', calls, current_user, errors, bad;
END $$;
