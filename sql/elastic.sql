-- elastic_btree: reloptions and key types (bad input gives clear ERRORs),
-- every scan kind checked against a btree twin table, UNIQUE and ON CONFLICT,
-- growth past a small size_bound (leaves turn compact) and back (delete +
-- VACUUM: compact leaves revert), ALTER INDEX SET (size_bound), verify.
-- Only booleans and row counts are printed for anything that depends on page
-- layout.  Pruned heap tuples are in elastic_prune.sql.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;

-- ------------------------------------------------------------ reloptions --
CREATE TABLE eo (k int8, n numeric, b bpchar(4), t text, tc text COLLATE "C",
                 v varchar(10) COLLATE "C", p point);
INSERT INTO eo SELECT g, g, 'b' || g % 10, 't' || g, 'c' || g, 'v' || g, point(g, g)
  FROM generate_series(1, 200) g;
-- size_bound: unparsable, negative, overflowing, below 4 pages (32 kB)
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = 'lots');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '10 parsecs');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '5PB');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '-1MB');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '-40000');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '99999999999999999999TB');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '0');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '8kB');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (size_bound = '32767');
-- the smallest bound, units in any case
CREATE INDEX eo_b1 ON eo USING elastic_btree (k) WITH (size_bound = '32768');
CREATE INDEX eo_b2 ON eo USING elastic_btree (k) WITH (size_bound = '32kB');
CREATE INDEX eo_b3 ON eo USING elastic_btree (k) WITH (size_bound = '3mb');
CREATE INDEX eo_b4 ON eo USING elastic_btree (k) WITH (size_bound = '1GB');
CREATE INDEX eo_b5 ON eo USING elastic_btree (k) WITH (size_bound = '2tb');
CREATE INDEX eo_b6 ON eo USING elastic_btree (k);
CREATE INDEX eo_b7 ON eo USING elastic_btree (k) WITH (size_bound = 'none');
SELECT c.relname, s.size_bound, s.state, s.compact_leaves
  FROM pg_class c, pg_hybrid.index_stats(c.oid) s
 WHERE c.relname LIKE 'eo\_b_' ORDER BY c.relname;
-- thresholds: ranges, and expand_threshold must stay below shrink_threshold
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (shrink_threshold = 0);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (shrink_threshold = 101);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (expand_threshold = -1);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (expand_threshold = 100);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (expand_threshold = 90);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (shrink_threshold = 60);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (shrink_threshold = 50, expand_threshold = 50);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (shrink_threshold = 'most');
-- tree_level, slack, merge_ratio
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (tree_level = -1);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (tree_level = 11);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (slack = 0);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (slack = 65);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (merge_ratio = 0);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) WITH (fillfactor = 50);
-- size_bound belongs to elastic_btree only
CREATE INDEX eo_bad ON eo USING hybrid_btree (k) WITH (size_bound = '1MB');
SELECT count(*) AS no_bad_index FROM pg_class WHERE relname = 'eo_bad';
CREATE INDEX eo_ok ON eo USING elastic_btree (k)
  WITH (size_bound = '1MB', shrink_threshold = 80, expand_threshold = 79, tree_level = 0, slack = 1, merge_ratio = 3);
CREATE INDEX eo_ok2 ON eo USING elastic_btree (k)
  WITH (shrink_threshold = 100, expand_threshold = 0, tree_level = 10, slack = 64);
SELECT reloptions FROM pg_class WHERE relname = 'eo_ok';
-- ALTER INDEX SET is validated the same way
ALTER INDEX eo_ok SET (expand_threshold = 95);
ALTER INDEX eo_ok SET (shrink_threshold = 70);
ALTER INDEX eo_ok SET (size_bound = 'huge');
ALTER INDEX eo_ok SET (size_bound = '16kB');
ALTER INDEX eo_ok SET (tree_level = 12);
ALTER INDEX eo_ok SET (size_bound = '10MB', tree_level = 5);
SELECT reloptions FROM pg_class WHERE relname = 'eo_ok';
ALTER INDEX eo_ok RESET (size_bound, shrink_threshold, expand_threshold);
SELECT reloptions FROM pg_class WHERE relname = 'eo_ok';
SELECT pg_hybrid.verify('eo_ok', true), pg_hybrid.verify('eo_ok2', true);

-- ------------------------------------------------------------- key types --
-- every key column needs a memcmp-able encoding: numeric, bpchar and text
-- under a non-C collation (this cluster's default is C.UTF-8) are refused
CREATE INDEX eo_bad ON eo USING elastic_btree (n);
CREATE INDEX eo_bad ON eo USING elastic_btree (b);
CREATE INDEX eo_bad ON eo USING elastic_btree (t);
CREATE INDEX eo_bad ON eo USING elastic_btree ((tc COLLATE "default"));
CREATE INDEX eo_bad ON eo USING elastic_btree (k, n);
CREATE INDEX eo_bad ON eo USING elastic_btree (tc, t);
CREATE INDEX eo_bad ON eo USING elastic_btree (n) WITH (size_bound = '1MB');
CREATE INDEX eo_bad ON eo USING elastic_btree (k) INCLUDE (n);
CREATE INDEX eo_bad ON eo USING elastic_btree (k) INCLUDE (t);
CREATE INDEX eo_bad ON eo USING elastic_btree (p);
SELECT count(*) AS no_bad_index FROM pg_class WHERE relname = 'eo_bad';
-- COLLATE "C" columns, or a C collation on the index column, are fine
CREATE INDEX eo_tc ON eo USING elastic_btree (tc);
-- INCLUDE columns are refused (compact leaves order entries by all their bytes)
CREATE INDEX eo_bad ON eo USING elastic_btree (v, k) INCLUDE (tc);
CREATE INDEX eo_v ON eo USING elastic_btree (v, k);
CREATE INDEX eo_tcol ON eo USING elastic_btree ((t COLLATE "C"));
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM eo WHERE tc BETWEEN 'c10' AND 'c11';
SELECT k FROM eo WHERE t COLLATE "C" BETWEEN 't198' AND 't2' ORDER BY t COLLATE "C";
SELECT v, k, tc FROM eo WHERE v = 'v42';
RESET enable_seqscan; RESET enable_bitmapscan;
DROP TABLE eo;

-- The supported types, in compact leaves (a 32 kB bound: the smallest), with
-- edge values (-0, NaN, infinities, '1 day' = '24 hours', empty strings and
-- bytea prefixes, NULLs); every index must agree with a seqscan.
CREATE TABLE ety (i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, bo bool, by bytea, u uuid,
                  d date, tm time, ts timestamp, tz timestamptz, iv interval,
                  tc text COLLATE "C", vc varchar(20) COLLATE "C") WITH (autovacuum_enabled = off);
INSERT INTO ety
SELECT (g % 3000 - 1500)::int2, g * 7919 % 100003 - 50000, (g::int8 * 2654435761) % 4294967296 - 2147483648,
       (g % 500 - 250) / 7.0, CASE g % 400 WHEN 1 THEN 'NaN'::float8 WHEN 2 THEN 'Infinity'::float8 WHEN 3 THEN '-Infinity'::float8
                                            WHEN 4 THEN '-0'::float8 WHEN 5 THEN '0'::float8 ELSE ((g % 1000 - 500) / 3.0)::float8 END,
       g % 3 = 0, CASE g % 5 WHEN 0 THEN ''::bytea WHEN 1 THEN '\x00'::bytea WHEN 2 THEN '\x0000'::bytea
                              ELSE int8send(g * 31 % 997) END,
       md5((g % 2000)::text)::uuid, date '2000-01-01' + (g * 13 % 9000),
       time '00:00' + (g * 17 % 86400) * interval '1 second',
       timestamp '2020-01-01' + g * interval '37 minutes', timestamptz '2020-01-01 00:00+00' - g * interval '53 minutes',
       CASE g % 4 WHEN 0 THEN interval '1 day' WHEN 1 THEN interval '24 hours' WHEN 2 THEN interval '1 mon'
                  ELSE (g % 100) * interval '1 hour' END,
       CASE g % 7 WHEN 0 THEN '' WHEN 1 THEN 'a' WHEN 2 THEN 'a b' ELSE 'w' || (g * 7 % 1000) END,
       substr(md5(g::text), 1, g % 20)
  FROM generate_series(1, 6000) g;
UPDATE ety SET i4 = NULL, tc = NULL, iv = NULL, by = NULL WHERE i2 % 101 = 0;
CREATE TABLE ety_cols (col text);
INSERT INTO ety_cols VALUES ('i2'), ('i4'), ('i8'), ('f4'), ('f8'), ('bo'), ('by'), ('u'), ('d'),
                            ('tm'), ('ts'), ('tz'), ('iv'), ('tc'), ('vc');
DO $$
DECLARE c text;
BEGIN
  FOR c IN SELECT col FROM ety_cols LOOP
    EXECUTE format('CREATE INDEX %I ON ety USING elastic_btree (%I) WITH (size_bound = %L)', 'ety_' || c, c, '32kB');
  END LOOP;
END $$;
-- duplicates of a third of the rows, through the dynamic stage
INSERT INTO ety SELECT * FROM ety WHERE i8 % 3 = 0;
SELECT bool_and(pg_hybrid.merge(('ety_' || col)::regclass) >= 0) AS merged FROM ety_cols;
-- index (forced) vs seqscan, for predicates built from values in the table
CREATE FUNCTION ety_check(col text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  typ text; v1 text; v2 text; pred text; a text; b text; plan text; l text; bad text := '';
  preds text[];
  i int := 0;
BEGIN
  SELECT format_type(atttypid, atttypmod) INTO typ FROM pg_attribute
   WHERE attrelid = 'ety'::regclass AND attname = col;
  EXECUTE format('SELECT %1$I::text FROM ety WHERE %1$I IS NOT NULL ORDER BY %1$I OFFSET 500 LIMIT 1', col) INTO v1;
  EXECUTE format('SELECT %1$I::text FROM ety WHERE %1$I IS NOT NULL ORDER BY %1$I OFFSET 4000 LIMIT 1', col) INTO v2;
  -- (the planner turns bool = const into a bare bool qual, which only
  -- btree's own opfamily can index: BETWEEN instead)
  preds := ARRAY[CASE WHEN typ = 'boolean' THEN format('%I BETWEEN %L::%s AND %L::%s', col, v1, typ, v1, typ)
                      ELSE format('%I = %L::%s', col, v1, typ) END, format('%I < %L::%s', col, v1, typ),
                 format('%I >= %L::%s', col, v2, typ), format('%I BETWEEN %L::%s AND %L::%s', col, v1, typ, v2, typ),
                 format('%I IN (%L::%s, %L::%s)', col, v1, typ, v2, typ), format('%I IS NULL', col),
                 format('%I > %L::%s', col, v2, typ)];
  FOREACH pred IN ARRAY preds LOOP
    i := i + 1;
    PERFORM set_config('enable_seqscan', 'off', true);
    PERFORM set_config('enable_bitmapscan', (i % 2 = 0)::text, true);
    PERFORM set_config('enable_indexscan', (i % 2 = 1)::text, true);
    plan := '';
    FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) SELECT * FROM ety WHERE ' || pred LOOP plan := plan || l; END LOOP;
    IF position('ety_' || col in plan) = 0 THEN bad := bad || ' [no index: ' || pred || ']'; END IF;
    EXECUTE 'SELECT count(*) || md5(string_agg(e::text, ''|'' ORDER BY e::text)) FROM ety e WHERE ' || pred INTO a;
    PERFORM set_config('enable_seqscan', 'on', true);
    PERFORM set_config('enable_bitmapscan', 'off', true);
    PERFORM set_config('enable_indexscan', 'off', true);
    EXECUTE 'SELECT count(*) || md5(string_agg(e::text, ''|'' ORDER BY e::text)) FROM ety e WHERE ' || pred INTO b;
    IF a IS DISTINCT FROM b THEN bad := bad || ' [differs: ' || pred || ']'; END IF;
  END LOOP;
  -- ordered, backward
  PERFORM set_config('enable_seqscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_indexscan', 'on', true);
  EXECUTE format('SELECT string_agg(x::text, ''|'') FROM (SELECT %1$I AS x FROM ety WHERE %1$I IS NOT NULL ORDER BY %1$I DESC LIMIT 300) s', col) INTO a;
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_seqscan', 'on', true);
  EXECUTE format('SELECT string_agg(x::text, ''|'') FROM (SELECT %1$I AS x FROM ety WHERE %1$I IS NOT NULL ORDER BY %1$I DESC LIMIT 300) s', col) INTO b;
  IF a IS DISTINCT FROM b THEN bad := bad || ' [ORDER BY DESC differs]'; END IF;
  RETURN CASE WHEN bad = '' THEN 'ok' ELSE bad END;
END $$;
SELECT col, ety_check(col) FROM ety_cols ORDER BY col;
SELECT col, s.state, s.compact_leaves > 0 AS has_compact
  FROM ety_cols, pg_hybrid.index_stats(('ety_' || col)::regclass) s ORDER BY col;
-- a multi-column key of mixed types
CREATE INDEX ety_multi ON ety USING elastic_btree (bo, iv, tc, i2) WITH (size_bound = '32kB');
INSERT INTO ety SELECT * FROM ety WHERE i8 % 5 = 0;
SELECT pg_hybrid.merge('ety_multi') >= 0 AS merged;
-- equal values with different representations are one key
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FILTER (WHERE iv = interval '1 day') = count(*) FILTER (WHERE iv = interval '24 hours') AS day_eq_24h,
       count(*) FILTER (WHERE iv = interval '1 day') > 0 AS some_days FROM ety;
SELECT count(*) FROM ety WHERE iv = interval '24 hours';
SELECT count(*) FROM ety WHERE iv = interval '30 days';
SELECT count(*) FROM ety WHERE f8 = '-0';
SELECT count(*) FROM ety WHERE f8 = 'NaN';
SELECT count(*) FROM ety WHERE f8 > 'Infinity';
SELECT count(*) FROM ety WHERE by = '\x00';
SELECT count(*) FROM ety WHERE by < '\x0001';
SELECT count(*) FROM ety WHERE tc = '';
SELECT count(*) FROM ety WHERE bo AND iv = interval '24 hours' AND tc >= 'w5';
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT count(*) FROM ety WHERE bo AND iv = interval '24 hours' AND tc >= 'w5';
SELECT state, compact_leaves > 0 AS has_compact FROM pg_hybrid.index_stats('ety_multi');
SELECT count(*) AS verified FROM ety_cols, pg_hybrid.verify(('ety_' || col)::regclass, true);
SELECT pg_hybrid.verify('ety_multi', true);
DROP TABLE ety, ety_cols;
DROP FUNCTION ety_check;

-- Long keys: 900- and 2000-byte text keys make wide discriminating bits in
-- compact leaves; a key over a third of a page is an ERROR as in hybrid_btree.
CREATE TABLE elk (b int8, c text COLLATE "C") WITH (autovacuum_enabled = off);
INSERT INTO elk SELECT g % 1201, CASE WHEN g % 50 = 1 THEN repeat('y', 900) ELSE 'a' END
  FROM generate_series(1, 20000) g;
CREATE INDEX elk_bc ON elk USING elastic_btree (b, c) WITH (size_bound = '256kB');
INSERT INTO elk SELECT g, repeat('z', 2000) || g FROM generate_series(1, 300) g;
SELECT pg_hybrid.merge('elk_bc') >= 0 AS merged;
SELECT state, compact_leaves > 0 AS has_compact FROM pg_hybrid.index_stats('elk_bc');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*), count(DISTINCT c) FROM elk WHERE b BETWEEN 100 AND 200;
SELECT count(*) FROM elk WHERE b = 51 AND c > 'x';
SELECT count(*) FROM elk WHERE b > 1000 AND c >= 'y';
SELECT b, length(c) FROM elk WHERE b >= 1150 ORDER BY b DESC, c DESC LIMIT 5;
SELECT string_agg(left(c, 1) || length(c), ' ') FROM (SELECT c FROM elk WHERE b = 299 ORDER BY b, c DESC) s;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT pg_hybrid.verify('elk_bc', true);
DROP TABLE elk;
CREATE TABLE elk2 (t text COLLATE "C");
CREATE INDEX elk2_t ON elk2 USING elastic_btree (t) WITH (size_bound = '32kB');
INSERT INTO elk2 VALUES (repeat('y', 2600));
INSERT INTO elk2 VALUES (repeat('y', 3000));
SELECT length(t) FROM elk2 WHERE t > 'x';
DROP TABLE elk2;

-- ------------------------------------------------------ scans vs a btree --
-- el (elastic_btree indexes) and el_b (btree indexes) receive the same rows
-- and the same DML; every check runs a query on both and compares results.
CREATE FUNCTION el_rows(lo int, hi int)
RETURNS TABLE (id int8, k int8, g int4, t text, pad text) LANGUAGE sql IMMUTABLE AS $$
  SELECT s::int8,
         CASE WHEN s % 997 = 0 THEN NULL ELSE (s::int8 * 2654435761) % 4294967296 END,
         (s % 97)::int4,
         CASE WHEN s % 50 = 0 THEN NULL ELSE 'k' || lpad(((s::int8 * 7919) % 10007)::text, 5, '0') END,
         repeat('p', (s % 17)::int)
    FROM generate_series(lo, hi) s $$;
CREATE TABLE el (id int8 NOT NULL, k int8, g int4, t text COLLATE "C", pad text) WITH (autovacuum_enabled = off);
CREATE TABLE el_b (id int8 NOT NULL, k int8, g int4, t text COLLATE "C", pad text) WITH (autovacuum_enabled = off);
INSERT INTO el SELECT * FROM el_rows(1, 3000);
INSERT INTO el_b SELECT * FROM el_rows(1, 3000);
CREATE UNIQUE INDEX el_id ON el USING elastic_btree (id) WITH (size_bound = '640kB');
CREATE INDEX el_k ON el USING elastic_btree (k) WITH (size_bound = '640kB');
CREATE INDEX el_gt ON el USING elastic_btree (g, t) WITH (size_bound = '640kB');
CREATE INDEX el_t ON el USING elastic_btree (t);
CREATE UNIQUE INDEX el_b_id ON el_b (id);
CREATE INDEX el_b_k ON el_b (k);
CREATE INDEX el_b_gt ON el_b (g, t);
CREATE INDEX el_b_t ON el_b (t);
VACUUM ANALYZE el, el_b;
SELECT size_bound, state, standard_leaves > 0 AS has_leaves, compact_leaves, static_entries
  FROM pg_hybrid.index_stats('el_k');
SELECT size_bound, state, compact_leaves FROM pg_hybrid.index_stats('el_t');
-- hybrid_btree indexes report no elastic columns
CREATE INDEX el_hyb ON el USING hybrid_btree (g);
SELECT standard_leaves IS NULL AND compact_leaves IS NULL AND state IS NULL AND size_bound IS NULL
       AND key_fetches IS NULL AS hybrid_has_no_elastic_stats
  FROM pg_hybrid.index_stats('el_hyb');
DROP INDEX el_hyb;

-- chk(mode, query, plan pattern): run query with the mode's enable_* settings
-- (seq, index, ios, bitmap, mergejoin) on el (the plan must contain the pattern) and on
-- el_b; 'ok N' if both give the same rows (in the same order when the query
-- orders).  Mode seq checks that the two tables still hold the same rows.
CREATE FUNCTION chk(mode text, q text, pat text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE x text; y text; nx bigint; ny bigint; l text; plan text := ''; ordered bool;
BEGIN
  PERFORM set_config('enable_seqscan', (mode = 'seq')::text, true);
  PERFORM set_config('enable_indexscan', (mode IN ('index', 'ios', 'mergejoin'))::text, true);
  PERFORM set_config('enable_indexonlyscan', (mode = 'ios')::text, true);
  PERFORM set_config('enable_bitmapscan', (mode = 'bitmap')::text, true);
  -- mergejoin: the inner index scan marks and restores its position
  PERFORM set_config('enable_hashjoin', (mode <> 'mergejoin')::text, true);
  PERFORM set_config('enable_nestloop', (mode <> 'mergejoin')::text, true);
  PERFORM set_config('enable_sort', (mode <> 'mergejoin')::text, true);
  PERFORM set_config('enable_material', (mode <> 'mergejoin')::text, true);
  FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP plan := plan || l || E'\n'; END LOOP;
  IF position(pat in plan) = 0 THEN
    RETURN format('PLAN: %s does not show %s: %s', left(q, 120), pat, plan);
  END IF;
  ordered := q ~* 'order by';
  IF ordered THEN
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'')) FROM (' || q || ') r' INTO nx, x;
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'')) FROM (' || replace(q, ' el ', ' el_b ') || ') r' INTO ny, y;
  ELSE
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'' ORDER BY r::text)) FROM (' || q || ') r' INTO nx, x;
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'' ORDER BY r::text)) FROM (' || replace(q, ' el ', ' el_b ') || ') r' INTO ny, y;
  END IF;
  IF x IS NOT DISTINCT FROM y THEN RETURN 'ok ' || nx; END IF;
  RETURN format('DIFF: %s (%s): elastic %s rows, btree %s rows', left(q, 120), mode, nx, ny);
END $$;

-- scroll(q): a SCROLL cursor over el and one over el_b, moved forward and
-- backward across many leaves, must return the same row at every step
CREATE FUNCTION scroll(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c1 refcursor; c2 refcursor; r1 text; r2 text; s int; i int; n int := 0;
BEGIN
  PERFORM set_config('enable_seqscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_indexonlyscan', 'off', true);
  OPEN c1 SCROLL FOR EXECUTE q;
  OPEN c2 SCROLL FOR EXECUTE replace(q, ' el ', ' el_b ');
  FOREACH s IN ARRAY ARRAY[700, -300, 1500, -1900, 3000, -500, 20000, -3000] LOOP
    FOR i IN 1..abs(s) LOOP
      IF s > 0 THEN
        FETCH NEXT FROM c1 INTO r1; FETCH NEXT FROM c2 INTO r2;
      ELSE
        FETCH PRIOR FROM c1 INTO r1; FETCH PRIOR FROM c2 INTO r2;
      END IF;
      n := n + 1;
      IF r1 IS DISTINCT FROM r2 THEN
        RETURN format('DIFF at step %s (%s): elastic %s, btree %s', n, q, r1, r2);
      END IF;
    END LOOP;
  END LOOP;
  CLOSE c1; CLOSE c2;
  RETURN 'ok';
END $$;

-- battery(): every scan kind on every index of el; one line per failure, and
-- a last line with the number of checks and of rows compared.
CREATE FUNCTION battery(ios bool DEFAULT true) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
  keys text;
  c record; r text; n int := 0; nrows bigint := 0; nbad int := 0;
BEGIN
  SELECT quote_literal(array_agg((s::int8 * 2654435761) % 4294967296)::text) INTO keys
    FROM generate_series(1, 200000, 3779) s;
  FOR c IN SELECT * FROM (VALUES
    ('seq',    'SELECT * FROM el WHERE true', 'Seq Scan on el'),
    ('index',  'SELECT id, k FROM el WHERE k = 2654435761', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k = 5', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k < 1073741824', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k <= 2654435761', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k > 3000000000', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k >= 2654435761', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k BETWEEN 1000000000 AND 1100000000', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k > 1000000000 AND k < 1000300000', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k IN (2654435761, 1013904226, 3668339987, 5, 42)', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k = ANY (' || keys || '::int8[])', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k = ANY (ARRAY[2654435761, NULL]::int8[])', 'el_k'),
    ('index',  'SELECT id, k FROM el WHERE k IS NULL', 'el_k'),
    ('index',  'SELECT count(*) FROM el WHERE k IS NOT NULL', 'el_'),
    ('index',  'SELECT k FROM el ORDER BY k LIMIT 50', 'Index Scan using el_k'),
    ('index',  'SELECT k FROM el ORDER BY k DESC LIMIT 50', 'Index Scan Backward using el_k'),
    ('index',  'SELECT k FROM el WHERE k IS NOT NULL ORDER BY k DESC LIMIT 1', 'Index Scan Backward using el_k'),
    ('index',  'SELECT k FROM el WHERE k < 2000000000 ORDER BY k DESC LIMIT 777', 'Index Scan Backward using el_k'),
    ('index',  'SELECT k FROM el WHERE k > 2000000000 ORDER BY k LIMIT 1500', 'Index Scan using el_k'),
    ('index',  'SELECT k FROM el WHERE k BETWEEN 1000000000 AND 3000000000 ORDER BY k DESC', 'Index Scan Backward using el_k'),
    ('index',  'SELECT id, k FROM el WHERE id BETWEEN 100 AND 900', 'el_id'),
    ('index',  'SELECT id FROM el WHERE id IN (1, 2, 3, 2999, 3000, 3001, 40000, 40001)', 'el_id'),
    ('index',  'SELECT id FROM el ORDER BY id DESC LIMIT 100', 'Index Scan Backward using el_id'),
    ('index',  'SELECT id, g, t FROM el WHERE g = 5', 'el_gt'),
    ('index',  'SELECT id, g, t FROM el WHERE g = 5 AND t > ''k05000''', 'el_gt'),
    ('index',  'SELECT id, g, t FROM el WHERE g IN (1, 2, 3) AND t IS NULL', 'el_gt'),
    ('index',  'SELECT id, g, t FROM el WHERE g < 3 AND t BETWEEN ''k01000'' AND ''k02000''', 'el_gt'),
    ('index',  'SELECT id, g, t FROM el WHERE g >= 95 AND (g, t) > (95, ''k05000'')', 'el_gt'),
    ('index',  'SELECT g, t FROM el WHERE g BETWEEN 10 AND 12 ORDER BY g DESC, t DESC', 'Index Scan Backward using el_gt'),
    ('index',  'SELECT g, t FROM el WHERE g >= 90 ORDER BY g, t LIMIT 300', 'Index Scan using el_gt'),
    ('index',  'SELECT id, t FROM el WHERE t = ''k00123''', 'el_t'),
    ('index',  'SELECT id, t FROM el WHERE t LIKE ''k001%''', 'el_t'),
    ('index',  'SELECT t FROM el WHERE t > ''k09990'' ORDER BY t DESC', 'el_t'),
    ('bitmap', 'SELECT id, k FROM el WHERE k = 2654435761', 'Bitmap Index Scan on el_k'),
    ('bitmap', 'SELECT id, k FROM el WHERE k BETWEEN 1000000000 AND 2100000000', 'Bitmap Index Scan on el_k'),
    ('bitmap', 'SELECT id, k FROM el WHERE k = ANY (' || keys || '::int8[])', 'Bitmap Index Scan on el_k'),
    ('bitmap', 'SELECT id, k FROM el WHERE k IS NULL', 'Bitmap Index Scan on el_k'),
    ('bitmap', 'SELECT id, k FROM el WHERE k < 100000000 OR k > 4200000000', 'Bitmap Index Scan on el_k'),
    ('bitmap', 'SELECT id, g, t FROM el WHERE g IN (7, 8) AND t >= ''k05000''', 'Bitmap Index Scan on el_gt'),
    ('bitmap', 'SELECT id FROM el WHERE id > 2000', 'Bitmap Index Scan on el_id'),
    ('bitmap', 'SELECT count(*) FROM el WHERE k >= 0', 'Bitmap Index Scan on el_k'),
    ('mergejoin', 'SELECT count(*), sum(x.id), sum(y.id) FROM el x JOIN el y ON x.g = y.g WHERE x.id < 300 AND y.g < 50', 'Merge Join')
  ) v(mode, q, pat) LOOP
    r := chk(c.mode, c.q, c.pat);
    n := n + 1;
    IF r LIKE 'ok %' THEN nrows := nrows + substr(r, 4)::bigint; ELSE nbad := nbad + 1; RETURN NEXT r; END IF;
  END LOOP;
  IF ios THEN
    FOR c IN SELECT * FROM (VALUES
      ('ios', 'SELECT k FROM el WHERE k BETWEEN 1000000000 AND 2000000000', 'using el_k'),
      ('ios', 'SELECT k FROM el WHERE k IS NULL', 'using el_k'),
      ('ios', 'SELECT k FROM el WHERE k IS NOT NULL ORDER BY k DESC LIMIT 1000', 'Backward using el_k'),
      ('ios', 'SELECT g, t FROM el WHERE g = 42', 'using el_gt'),
      ('ios', 'SELECT id FROM el WHERE id < 500', 'using el_id'),
      ('ios', 'SELECT t FROM el WHERE t < ''k00500'' ORDER BY t', 'using el_t')
    ) v(mode, q, pat) LOOP
      r := chk(c.mode, c.q, c.pat);
      n := n + 1;
      IF r LIKE 'ok %' THEN nrows := nrows + substr(r, 4)::bigint; ELSE nbad := nbad + 1; RETURN NEXT r; END IF;
    END LOOP;
  END IF;
  FOREACH r IN ARRAY ARRAY['SELECT k FROM el WHERE k IS NOT NULL ORDER BY k',
                           'SELECT k FROM el WHERE k > 1000000000 ORDER BY k DESC',
                           'SELECT g, t FROM el WHERE g >= 20 ORDER BY g, t'] LOOP
    n := n + 1;
    r := scroll(r);
    IF r <> 'ok' THEN nbad := nbad + 1; RETURN NEXT r; END IF;
  END LOOP;
  RETURN NEXT format('checks %s, failed %s, rows compared %s', n, nbad, nrows);
END $$;

SELECT * FROM battery();
-- an index without a bound (standard leaves only) answers index-only scans
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT t FROM el WHERE t < 'k00500' ORDER BY t DESC;
RESET enable_seqscan; RESET enable_bitmapscan;
-- a cursor moving both ways, printed
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
BEGIN;
DECLARE cur SCROLL CURSOR FOR SELECT id, k FROM el WHERE k BETWEEN 2000000000 AND 2010000000 ORDER BY k DESC;
FETCH 3 FROM cur;
FETCH BACKWARD 2 FROM cur;
FETCH ALL FROM cur;
FETCH BACKWARD 2 FROM cur;
FETCH FIRST FROM cur;
FETCH LAST FROM cur;
COMMIT;
RESET enable_seqscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;

-- ------------------------------------------------------- UNIQUE, ON CONFLICT --
INSERT INTO el VALUES (17, 1, 1, 'dup', '');
INSERT INTO el VALUES (100001, 1, 1, 'x', ''), (100001, 2, 2, 'y', '');
INSERT INTO el SELECT * FROM el_rows(2990, 3010);
CREATE UNIQUE INDEX el_bad ON el USING elastic_btree (g);
INSERT INTO el VALUES (17, 1, 1, 'x', '') ON CONFLICT (id) DO NOTHING;
INSERT INTO el_b VALUES (17, 1, 1, 'x', '') ON CONFLICT (id) DO NOTHING;
INSERT INTO el VALUES (18, 1, 1, 'x', ''), (100002, 7, 7, 'k99999', 'new') ON CONFLICT (id) DO UPDATE SET pad = 'upd' RETURNING id, k, pad;
INSERT INTO el_b VALUES (18, 1, 1, 'x', ''), (100002, 7, 7, 'k99999', 'new') ON CONFLICT (id) DO UPDATE SET pad = 'upd' RETURNING id, k, pad;
INSERT INTO el VALUES (100002, 8, 8, 'x', '') ON CONFLICT (id) DO UPDATE SET pad = el.pad || '+' RETURNING id, k, pad;
INSERT INTO el_b VALUES (100002, 8, 8, 'x', '') ON CONFLICT (id) DO UPDATE SET pad = el_b.pad || '+' RETURNING id, k, pad;
DELETE FROM el WHERE id = 100002; DELETE FROM el_b WHERE id = 100002;
SELECT pg_hybrid.verify('el_id', true);
VACUUM el, el_b;

-- ------------------------------------------------ growth past size_bound --
-- 3000 -> 45000 rows in random key order, merged into the tree after each
-- batch: the bounded indexes start shrinking and hold compact leaves.
-- (one statement each: retired pages are recycled once no snapshot needs them)
CREATE FUNCTION grow(lo int, hi int) RETURNS bool[] LANGUAGE sql AS $$
  INSERT INTO el SELECT * FROM el_rows(lo, hi);
  INSERT INTO el_b SELECT * FROM el_rows(lo, hi);
  SELECT ARRAY[pg_hybrid.merge('el_id') >= 0, pg_hybrid.merge('el_k') >= 0, pg_hybrid.merge('el_gt') >= 0,
               pg_hybrid.merge('el_t') >= 0] $$;
SELECT grow(3001, 10000);
SELECT grow(10001, 17000);
SELECT grow(17001, 24000);
SELECT grow(24001, 31000);
SELECT grow(31001, 38000);
SELECT grow(38001, 45000);
SELECT count(*) FROM el;
SELECT c.relname, s.state, s.compact_leaves > 0 AS has_compact, s.standard_leaves + s.compact_leaves > 0 AS has_leaves,
       s.dynamic_entries, s.static_entries = (SELECT count(*) FROM el) AS all_entries_in_tree
  FROM pg_class c, pg_hybrid.index_stats(c.oid) s
 WHERE c.relname IN ('el_id', 'el_k', 'el_gt', 'el_t') ORDER BY c.relname;
-- the tree's pages stay within the bound (the data fits compact leaves); the
-- file also holds the delta log's high-water mark, still less than btree's
SELECT c.relname, s.static_bytes <= s.size_bound AS tree_within_bound,
       s.relation_bytes < pg_relation_size(replace(c.relname, 'el_', 'el_b_')::regclass) AS smaller_than_btree
  FROM pg_class c, pg_hybrid.index_stats(c.oid) s
 WHERE c.relname IN ('el_id', 'el_k', 'el_gt') ORDER BY c.relname;
-- every row is still found, through every scan kind
ANALYZE el, el_b;
SELECT * FROM battery();
-- a probe into a compact leaf reads the key from the heap
CREATE TEMP TABLE kf AS SELECT key_fetches FROM pg_hybrid.index_stats('el_k');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT id, k FROM el WHERE k = 2654435761;
SELECT count(*) FROM el WHERE k IN (1013904226, 3668339987);
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT s.key_fetches > kf.key_fetches AS fetched_keys FROM pg_hybrid.index_stats('el_k') s, kf;
-- UNIQUE checks and ON CONFLICT against compact leaves
INSERT INTO el VALUES (4321, 1, 1, 'dup', '');
INSERT INTO el VALUES (44999, 1, 1, 'dup', '');
INSERT INTO el VALUES (4321, 1, 1, 'x', '') ON CONFLICT (id) DO NOTHING;
INSERT INTO el VALUES (4322, 1, 1, 'x', ''), (200001, 5, 5, 'k00001', 'new') ON CONFLICT (id) DO UPDATE SET pad = 'upd' RETURNING id, k, pad;
INSERT INTO el_b VALUES (4322, 1, 1, 'x', ''), (200001, 5, 5, 'k00001', 'new') ON CONFLICT (id) DO UPDATE SET pad = 'upd' RETURNING id, k, pad;
SELECT pg_hybrid.merge('el_id') >= 0 AS merged;
INSERT INTO el VALUES (200001, 1, 1, 'dup', '');
SELECT pg_hybrid.verify('el_id', true), pg_hybrid.verify('el_k', true),
       pg_hybrid.verify('el_gt', true), pg_hybrid.verify('el_t', true);

-- ---------------------------------------- ALTER INDEX SET (size_bound) --
-- el_t has no bound and only standard leaves; a bound set now applies from
-- the next merge / VACUUM on
SELECT state, compact_leaves, size_bound FROM pg_hybrid.index_stats('el_t');
ALTER INDEX el_t SET (size_bound = '64kB');
INSERT INTO el SELECT * FROM el_rows(45001, 60000);
INSERT INTO el_b SELECT * FROM el_rows(45001, 60000);
SELECT pg_hybrid.merge('el_t') >= 0 AS merged, pg_hybrid.merge('el_k') >= 0, pg_hybrid.merge('el_id') >= 0,
       pg_hybrid.merge('el_gt') >= 0;
VACUUM el;
SELECT state, compact_leaves > 0 AS has_compact, size_bound FROM pg_hybrid.index_stats('el_t');
SELECT * FROM battery();
-- and without a bound again: VACUUM ends shrinking, and reverts the compact
-- leaves it visits (a VACUUM with dead tuples visits every leaf)
CREATE TEMP TABLE t_before AS SELECT compact_leaves FROM pg_hybrid.index_stats('el_t');
ALTER INDEX el_t RESET (size_bound);
VACUUM el;
SELECT state <> 'shrinking' AS not_shrinking, size_bound FROM pg_hybrid.index_stats('el_t');
DELETE FROM el WHERE id % 100 = 1;
DELETE FROM el_b WHERE id % 100 = 1;
VACUUM el;
VACUUM el;
SELECT s.state <> 'shrinking' AS not_shrinking, s.compact_leaves < b.compact_leaves AS fewer_compact
  FROM pg_hybrid.index_stats('el_t') s, t_before b;
SELECT pg_hybrid.verify('el_t', true);

-- ------------------------------------------ delete most rows, shrink back --
CREATE TEMP TABLE cl AS
  SELECT c.relname, s.compact_leaves FROM pg_class c, pg_hybrid.index_stats(c.oid) s
   WHERE c.relname IN ('el_id', 'el_k', 'el_gt');
DELETE FROM el WHERE id % 10 <> 0;
DELETE FROM el_b WHERE id % 10 <> 0;
VACUUM el; VACUUM el_b;
SELECT pg_hybrid.merge('el_k') >= 0 AS merged;
VACUUM el;
SELECT c.relname, s.state <> 'shrinking' AS not_shrinking, s.compact_leaves < cl.compact_leaves AS fewer_compact,
       s.static_entries = (SELECT count(*) FROM el) AS entries_match
  FROM pg_class c JOIN cl USING (relname), pg_hybrid.index_stats(c.oid) s ORDER BY c.relname;
SELECT * FROM battery();
SELECT pg_hybrid.verify('el_id', true), pg_hybrid.verify('el_k', true),
       pg_hybrid.verify('el_gt', true), pg_hybrid.verify('el_t', true);
-- grow again: it shrinks again
INSERT INTO el SELECT * FROM el_rows(60001, 100000);
INSERT INTO el_b SELECT * FROM el_rows(60001, 100000);
SELECT pg_hybrid.merge('el_k') >= 0 AS merged;
SELECT state, compact_leaves > 0 AS has_compact FROM pg_hybrid.index_stats('el_k');
SELECT pg_hybrid.merge('el_id') >= 0, pg_hybrid.merge('el_gt') >= 0, pg_hybrid.merge('el_t') >= 0;
SELECT * FROM battery();
SELECT pg_hybrid.verify('el_k', true);
DROP TABLE el, el_b;
DROP FUNCTION battery, chk, scroll, grow, el_rows;
-- the bound holds for the file under a bulk load: inserters merge when the
-- delta log outruns the merges, and each merge's retired leaves are reused
-- as soon as no reader of the old generation is left (the loading
-- transaction itself holds the xid horizon back)
RESET pg_hybrid.merge_min_entries;
CREATE TABLE el_bulk (k int8);
CREATE INDEX el_bulk_k ON el_bulk USING elastic_btree (k) WITH (size_bound = '3MB');
INSERT INTO el_bulk SELECT (g::int8 * 2654435761) % 1000000007 FROM generate_series(1, 250000) g;
SELECT pg_relation_size('el_bulk_k') <= 1.1 * 3 * 1024 * 1024 AS file_within_bound,
       s.state, s.compact_leaves > 0 AS has_compact
  FROM pg_hybrid.index_stats('el_bulk_k') s;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM el_bulk WHERE k >= 0;
SELECT pg_hybrid.verify('el_bulk_k', true);
RESET enable_seqscan; RESET enable_bitmapscan;
DROP TABLE el_bulk;
SET pg_hybrid.merge_min_entries = 1000000;
-- churn of long keys that share 1.5-2.5 kB prefixes (their separators
-- cannot be truncated) beside short ones: each round merges 400 of them in
-- one sorted batch and VACUUM takes them out again. Whole first keys in
-- split inner pages made every leaf split reach the root ('tree too tall',
-- 40 levels, in the first round); 4 rounds left 2604 pages for 5000 entries
-- when inner pages never merged.
CREATE TABLE el_churn (k int8, t text COLLATE "C");
INSERT INTO el_churn SELECT g, md5(g::text) FROM generate_series(1, 5000) g;
CREATE INDEX el_churn_kt ON el_churn USING elastic_btree (k, t);
CREATE FUNCTION churn_round(r int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO el_churn SELECT 100000 + g % 40, repeat('q', 1500 + (g * 37 + r) % 1000) || g
    FROM generate_series(1, 400) g;
  PERFORM pg_hybrid.merge('el_churn_kt');
  DELETE FROM el_churn WHERE k >= 100000;
END $$;
SELECT churn_round(1);
VACUUM el_churn;
SELECT churn_round(2);
VACUUM el_churn;
SELECT churn_round(3);
VACUUM el_churn;
SELECT churn_round(4);
VACUUM el_churn;
SELECT static_entries, static_pages < 1000 AS pages_bounded FROM pg_hybrid.index_stats('el_churn_kt');
SELECT pg_hybrid.verify('el_churn_kt', true);
SET enable_seqscan = off; SET enable_bitmapscan = off;
CREATE TEMP TABLE churn_idx AS SELECT k, t FROM el_churn WHERE k BETWEEN 10 AND 4000 AND t >= '4';
RESET enable_seqscan; RESET enable_bitmapscan;
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off;
SELECT count(*) AS rows, (SELECT count(*) FROM (SELECT k, t FROM el_churn WHERE k BETWEEN 10 AND 4000 AND t >= '4'
                                              EXCEPT ALL SELECT * FROM churn_idx) d) AS missing
  FROM churn_idx;
RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan;
DROP TABLE el_churn, churn_idx;
DROP FUNCTION churn_round;
