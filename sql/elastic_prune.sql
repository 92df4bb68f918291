-- elastic_btree with pruned heap tuples: a compact leaf stores no keys, it reads
-- them from the heap; when a tuple was pruned (line pointer dead or redirected
-- by HOT) before VACUUM removed its index entry, the key cannot be read.
-- Searches must then still never return a wrong row and never miss a live one,
-- inserts (merges) and unique checks must work around the dead entries.
-- Every check compares with a btree index on a twin table receiving the same
-- statements.  pageinspect shows that the tuples really were pruned.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
CREATE EXTENSION IF NOT EXISTS pageinspect;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;

CREATE FUNCTION ep_rows(lo int, hi int)
RETURNS TABLE (id int8, k int8, g int4, t text, pad text) LANGUAGE sql IMMUTABLE AS $$
  SELECT s::int8,
         CASE WHEN s % 991 = 0 THEN NULL ELSE (s::int8 * 2654435761) % 4294967296 END,
         (s % 61)::int4,
         'k' || lpad(((s::int8 * 7919) % 10007)::text, 5, '0'),
         repeat('p', (s % 13)::int)
    FROM generate_series(lo, hi) s $$;
-- line pointers of a heap by lp_flags (1 normal, 2 redirect, 3 dead)
CREATE FUNCTION lp_count(rel regclass, flag int) RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM generate_series(0, pg_relation_size(rel) / 8192 - 1) b,
         heap_page_items(get_raw_page(rel::text, b::int)) WHERE lp_flags = flag $$;
CREATE TABLE ep (id int8 NOT NULL, k int8, g int4, t text COLLATE "C", pad text) WITH (autovacuum_enabled = off);
CREATE TABLE ep_b (id int8 NOT NULL, k int8, g int4, t text COLLATE "C", pad text) WITH (autovacuum_enabled = off);
INSERT INTO ep SELECT * FROM ep_rows(1, 2000);
INSERT INTO ep_b SELECT * FROM ep_rows(1, 2000);
CREATE UNIQUE INDEX ep_id ON ep USING elastic_btree (id) WITH (size_bound = '128kB');
CREATE INDEX ep_k ON ep USING elastic_btree (k) WITH (size_bound = '128kB');
CREATE INDEX ep_gt ON ep USING elastic_btree (g, t) WITH (size_bound = '128kB');
CREATE UNIQUE INDEX ep_b_id ON ep_b (id);
CREATE INDEX ep_b_k ON ep_b (k);
CREATE INDEX ep_b_gt ON ep_b (g, t);
-- grow past the bounds: the leaves become compact
DO $$
DECLARE lo int;
BEGIN
  FOR lo IN SELECT generate_series(2001, 30000, 4000) LOOP
    INSERT INTO ep SELECT * FROM ep_rows(lo, lo + 3999);
    INSERT INTO ep_b SELECT * FROM ep_rows(lo, lo + 3999);
    PERFORM pg_hybrid.merge('ep_id'), pg_hybrid.merge('ep_k'), pg_hybrid.merge('ep_gt');
  END LOOP;
END $$;
VACUUM ANALYZE ep, ep_b;
SELECT count(*) FROM ep;
SELECT c.relname, s.state, s.compact_leaves > 0 AS has_compact
  FROM pg_class c, pg_hybrid.index_stats(c.oid) s
 WHERE c.relname IN ('ep_id', 'ep_k', 'ep_gt') ORDER BY c.relname;

-- chk(mode, query, plan pattern): as in elastic.sql; mode nestloop forces
-- nested loops (one index probe per outer row)
CREATE FUNCTION chk(mode text, q text, pat text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE x text; y text; nx bigint; ny bigint; l text; plan text := '';
BEGIN
  PERFORM set_config('enable_seqscan', (mode = 'seq')::text, true);
  PERFORM set_config('enable_indexscan', (mode IN ('index', 'ios', 'nestloop'))::text, true);
  PERFORM set_config('enable_indexonlyscan', (mode = 'ios')::text, true);
  PERFORM set_config('enable_bitmapscan', (mode = 'bitmap')::text, true);
  PERFORM set_config('enable_hashjoin', (mode <> 'nestloop')::text, true);
  PERFORM set_config('enable_mergejoin', (mode <> 'nestloop')::text, true);
  PERFORM set_config('enable_memoize', (mode <> 'nestloop')::text, true);
  PERFORM set_config('enable_material', (mode <> 'nestloop')::text, true);
  FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP plan := plan || l || E'\n'; END LOOP;
  IF position(pat in plan) = 0 THEN
    RETURN format('PLAN: %s does not show %s: %s', left(q, 120), pat, plan);
  END IF;
  IF q ~* 'order by' THEN
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'')) FROM (' || q || ') r' INTO nx, x;
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'')) FROM (' || replace(q, ' ep ', ' ep_b ') || ') r' INTO ny, y;
  ELSE
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'' ORDER BY r::text)) FROM (' || q || ') r' INTO nx, x;
    EXECUTE 'SELECT count(*), md5(string_agg(r::text, ''|'' ORDER BY r::text)) FROM (' || replace(q, ' ep ', ' ep_b ') || ') r' INTO ny, y;
  END IF;
  IF x IS NOT DISTINCT FROM y THEN RETURN 'ok ' || nx; END IF;
  RETURN format('DIFF: %s (%s): elastic %s rows, btree %s rows', left(q, 120), mode, nx, ny);
END $$;

-- battery(): one line per failing check, then a summary line
CREATE FUNCTION battery() RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
  keys text; c record; r text; n int := 0; nrows bigint := 0; nbad int := 0;
  c1 refcursor; c2 refcursor; r1 text; r2 text; st int; i int;
BEGIN
  -- keys of every third row from 1 to 30000 (deleted ones among them) and their neighbours
  SELECT quote_literal(array_agg(x)::text) INTO keys
    FROM (SELECT (s::int8 * 2654435761) % 4294967296 + d AS x
            FROM generate_series(1, 30000, 3) s, (VALUES (-1), (0), (1)) v(d)) q;
  FOR c IN SELECT * FROM (VALUES
    ('seq',      'SELECT * FROM ep WHERE true', 'Seq Scan on ep'),
    ('index',    'SELECT id, k, pad FROM ep WHERE k = 2654435761', 'ep_k'),
    ('index',    'SELECT id, k, pad FROM ep WHERE k = 3668339987', 'ep_k'),
    ('index',    'SELECT id, k, pad FROM ep WHERE k = ANY (' || keys || '::int8[])', 'ep_k'),
    ('index',    'SELECT id, k FROM ep WHERE k < 1073741824', 'ep_k'),
    ('index',    'SELECT id, k FROM ep WHERE k >= 3000000000', 'ep_k'),
    ('index',    'SELECT id, k FROM ep WHERE k BETWEEN 1000000000 AND 1200000000', 'ep_k'),
    ('index',    'SELECT id, k FROM ep WHERE k IS NULL', 'ep_k'),
    ('index',    'SELECT k FROM ep WHERE k IS NOT NULL ORDER BY k', 'Index Scan using ep_k'),
    ('index',    'SELECT k FROM ep WHERE k < 3500000000 ORDER BY k DESC', 'Index Scan Backward using ep_k'),
    ('index',    'SELECT k FROM ep ORDER BY k DESC LIMIT 100', 'Index Scan Backward using ep_k'),
    ('index',    'SELECT id, pad FROM ep WHERE id BETWEEN 1 AND 3000', 'ep_id'),
    ('index',    'SELECT id FROM ep WHERE id % 3 = 0 AND id < 1000000', 'ep_id'),
    ('index',    'SELECT id, g, t FROM ep WHERE g = 7', 'ep_gt'),
    ('index',    'SELECT id, g, t FROM ep WHERE g = 7 AND t >= ''k05000''', 'ep_gt'),
    ('index',    'SELECT id, g, t FROM ep WHERE g IN (1, 30, 60) AND t < ''k03000''', 'ep_gt'),
    ('index',    'SELECT g, t FROM ep WHERE g BETWEEN 20 AND 22 ORDER BY g DESC, t DESC', 'Index Scan Backward using ep_gt'),
    ('ios',      'SELECT k FROM ep WHERE k BETWEEN 2000000000 AND 2500000000', 'using ep_k'),
    ('ios',      'SELECT g, t FROM ep WHERE g = 33', 'using ep_gt'),
    ('bitmap',   'SELECT id, k FROM ep WHERE k = ANY (' || keys || '::int8[])', 'Bitmap Index Scan on ep_k'),
    ('bitmap',   'SELECT id, k FROM ep WHERE k BETWEEN 100000000 AND 900000000', 'Bitmap Index Scan on ep_k'),
    ('bitmap',   'SELECT id, g, t FROM ep WHERE g = 12', 'Bitmap Index Scan on ep_gt'),
    -- half the keys of ep_rows(1, 40000) probed through the compact index, live or deleted
    ('nestloop', 'SELECT r.id, e.id, e.pad FROM ep_rows(1, 40000) r JOIN ep e ON e.k = r.k WHERE r.id % 2 = 1', 'Index Scan using ep_k'),
    ('nestloop', 'SELECT r.id, e.id FROM ep_rows(1, 40000) r JOIN ep e ON e.id = r.id WHERE r.id % 2 = 0', 'Index Scan using ep_id'),
    ('nestloop', 'SELECT r.id, e.id FROM ep_rows(1, 40000) r JOIN ep e ON e.g = r.g AND e.t = r.t WHERE r.id % 7 = 0', 'Index Scan using ep_gt')
  ) v(mode, q, pat) LOOP
    r := chk(c.mode, c.q, c.pat);
    n := n + 1;
    IF r LIKE 'ok %' THEN nrows := nrows + substr(r, 4)::bigint; ELSE nbad := nbad + 1; RETURN NEXT r; END IF;
  END LOOP;
  -- a scroll cursor, both directions across many leaves
  PERFORM set_config('enable_seqscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_indexonlyscan', 'off', true);
  PERFORM set_config('enable_indexscan', 'on', true);
  OPEN c1 SCROLL FOR EXECUTE 'SELECT k FROM ep WHERE k > 500000000 ORDER BY k';
  OPEN c2 SCROLL FOR EXECUTE 'SELECT k FROM ep_b WHERE k > 500000000 ORDER BY k';
  n := n + 1;
  <<steps>>
  FOREACH st IN ARRAY ARRAY[900, -400, 2500, -2600, 4000, -1000, 10000, -5000] LOOP
    FOR i IN 1..abs(st) LOOP
      IF st > 0 THEN FETCH NEXT FROM c1 INTO r1; FETCH NEXT FROM c2 INTO r2;
      ELSE FETCH PRIOR FROM c1 INTO r1; FETCH PRIOR FROM c2 INTO r2; END IF;
      IF r1 IS DISTINCT FROM r2 THEN
        nbad := nbad + 1;
        RETURN NEXT format('DIFF: scroll cursor, step %s of %s: elastic %s, btree %s', i, st, r1, r2);
        EXIT steps;
      END IF;
    END LOOP;
  END LOOP;
  CLOSE c1; CLOSE c2;
  RETURN NEXT format('checks %s, failed %s, rows compared %s', n, nbad, nrows);
END $$;

SELECT * FROM battery();

-- ---------------------------------------------- delete, prune, no VACUUM --
DELETE FROM ep WHERE id % 3 = 0;
DELETE FROM ep_b WHERE id % 3 = 0;
-- a sequential scan over the full pages prunes them: the deleted tuples'
-- line pointers become dead, their keys are gone, the index entries stay
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) FROM ep;
SELECT count(*) FROM ep_b;
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SELECT lp_count('ep', 3) > 9000 AS pruned_most, lp_count('ep', 1) < 20100 AS few_left_unpruned;
SELECT static_entries = 30000 AS dead_entries_still_indexed FROM pg_hybrid.index_stats('ep_k');
SELECT * FROM battery();
SELECT pg_hybrid.verify('ep_k'), pg_hybrid.verify('ep_id'), pg_hybrid.verify('ep_gt');
SELECT pg_hybrid.verify('ep_k', true), pg_hybrid.verify('ep_id', true), pg_hybrid.verify('ep_gt', true);

-- every live id of 1..6000 (many sit next to a pruned one, some at leaf
-- boundaries) must still block a duplicate: plain INSERT, ON CONFLICT DO
-- NOTHING and DO UPDATE (each probe rolled back)
CREATE FUNCTION dup_probe(lo int, hi int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE i int; accepted bigint := 0;
BEGIN
  FOR i IN lo..hi LOOP
    CONTINUE WHEN i % 3 = 0;
    BEGIN
      INSERT INTO ep VALUES (i, 0, 0, 'dup', 'dup');
      accepted := accepted + 1;
      RAISE EXCEPTION 'undo';
    EXCEPTION WHEN unique_violation OR raise_exception THEN NULL;
    END;
  END LOOP;
  RETURN accepted;
END $$;
SELECT dup_probe(1, 6000) AS duplicates_accepted;
WITH ins AS (INSERT INTO ep SELECT id, 0, 0, 'dup', 'conflict' FROM ep_rows(1, 6000) WHERE id % 3 <> 0
             ON CONFLICT (id) DO NOTHING RETURNING id)
SELECT count(*) AS inserted FROM ins;
WITH up AS (INSERT INTO ep SELECT id, 0, 0, 'dup', 'conflict' FROM ep_rows(1, 600) WHERE id % 3 = 1
            ON CONFLICT (id) DO UPDATE SET pad = ep.pad RETURNING xmax <> 0 AS updated)
SELECT count(*), count(*) FILTER (WHERE updated) AS updated FROM up;
-- (no-op when the probes were refused; keeps the twins equal otherwise)
DELETE FROM ep WHERE t = 'dup';
-- unique checks meet the dead entries: a deleted id can come back, a live one cannot
INSERT INTO ep SELECT * FROM ep_rows(3, 3);
INSERT INTO ep_b SELECT * FROM ep_rows(3, 3);
INSERT INTO ep SELECT * FROM ep_rows(4, 4);
INSERT INTO ep VALUES (6, 1, 1, 'x', 'conflict') ON CONFLICT (id) DO NOTHING RETURNING id;
INSERT INTO ep_b VALUES (6, 1, 1, 'x', 'conflict') ON CONFLICT (id) DO NOTHING RETURNING id;
INSERT INTO ep VALUES (7, 1, 1, 'x', 'conflict') ON CONFLICT (id) DO UPDATE SET pad = 'upd' RETURNING id, pad;
INSERT INTO ep_b VALUES (7, 1, 1, 'x', 'conflict') ON CONFLICT (id) DO UPDATE SET pad = 'upd' RETURNING id, pad;

-- inserts into compact leaves full of dead entries: the same keys again
-- (new ids), the neighbouring keys, and deleted ids with their old keys
INSERT INTO ep SELECT id + 1000000, k, g, t, 'again' FROM ep_rows(1, 30000) WHERE id % 6 = 0;
INSERT INTO ep_b SELECT id + 1000000, k, g, t, 'again' FROM ep_rows(1, 30000) WHERE id % 6 = 0;
INSERT INTO ep SELECT id + 2000000, k + 1, g, t || '+', 'next' FROM ep_rows(1, 30000) WHERE id % 9 = 0;
INSERT INTO ep_b SELECT id + 2000000, k + 1, g, t || '+', 'next' FROM ep_rows(1, 30000) WHERE id % 9 = 0;
INSERT INTO ep SELECT * FROM ep_rows(1, 30000) WHERE id % 15 = 0;
INSERT INTO ep_b SELECT * FROM ep_rows(1, 30000) WHERE id % 15 = 0;
-- first from the dynamic stage, then merged into the leaves
SELECT * FROM battery();
SELECT pg_hybrid.merge('ep_k') >= 0 AS merged, pg_hybrid.merge('ep_id') >= 0 AS merged,
       pg_hybrid.merge('ep_gt') >= 0 AS merged;
SELECT * FROM battery();
INSERT INTO ep SELECT * FROM ep_rows(30, 30);
INSERT INTO ep SELECT * FROM ep_rows(31, 31);
SELECT pg_hybrid.verify('ep_k', true), pg_hybrid.verify('ep_id', true), pg_hybrid.verify('ep_gt', true);

-- --------------------------------------------- HOT chains, then pruned --
-- updates of a column no index covers stay on the page (HOT); pruning turns
-- the chain's root into a redirect: the key is read through it
UPDATE ep SET pad = pad || 'hot' WHERE id % 3 = 1;
UPDATE ep_b SET pad = pad || 'hot' WHERE id % 3 = 1;
UPDATE ep SET pad = pad || 'hotter' WHERE id % 3 = 1;
UPDATE ep_b SET pad = pad || 'hotter' WHERE id % 3 = 1;
UPDATE ep SET pad = pad || 'hottest' WHERE id % 3 = 1;
UPDATE ep_b SET pad = pad || 'hottest' WHERE id % 3 = 1;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) FROM ep;
SELECT count(*) FROM ep_b;
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SELECT lp_count('ep', 2) > 1000 AS redirected;
SELECT * FROM battery();
-- key updates: the old versions die and get pruned, the new keys are in the
-- dynamic stage until the merge
UPDATE ep SET k = k + 2, t = t || '*' WHERE id % 7 = 0;
UPDATE ep_b SET k = k + 2, t = t || '*' WHERE id % 7 = 0;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) FROM ep;
SELECT count(*) FROM ep_b;
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SELECT * FROM battery();
SELECT pg_hybrid.merge('ep_k') >= 0 AS merged, pg_hybrid.merge('ep_gt') >= 0 AS merged;
SELECT * FROM battery();
-- a scroll cursor changing direction at every row (NEXT, PRIOR, NEXT): runs
-- of equal keys now hold entries of pruned versions next to the live one
CREATE FUNCTION zigzag() RETURNS text LANGUAGE plpgsql AS $$
DECLARE c refcursor; d refcursor; x int8; y int8; i int; bad int := 0; first text;
BEGIN
  SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off;
  OPEN c SCROLL FOR SELECT k FROM ep WHERE k IS NOT NULL ORDER BY k;
  OPEN d SCROLL FOR SELECT k FROM ep_b WHERE k IS NOT NULL ORDER BY k;
  FOR i IN 1..40000 LOOP
    FETCH NEXT FROM c INTO x; FETCH NEXT FROM d INTO y;
    IF x IS DISTINCT FROM y THEN RETURN format('row %s: NEXT gave %s, btree %s', i, x, y); END IF;
    EXIT WHEN y IS NULL;
    CONTINUE WHEN i = 1;
    FETCH PRIOR FROM c INTO x; FETCH PRIOR FROM d INTO y;
    IF x IS DISTINCT FROM y THEN RETURN format('row %s: PRIOR gave %s, btree %s', i, x, y); END IF;
    FETCH NEXT FROM c INTO x; FETCH NEXT FROM d INTO y;
    IF x IS DISTINCT FROM y THEN
      bad := bad + 1;
      first := coalesce(first, format('row %s: NEXT after PRIOR gave %s, btree %s', i, x, y));
      MOVE RELATIVE 1 FROM c;
    END IF;
  END LOOP;
  RETURN CASE WHEN bad = 0 THEN 'ok' ELSE bad || ' direction changes wrong, first ' || first END;
END $$;
SELECT zigzag();

-- --------------------------------------- aborted inserts, merged, pruned --
BEGIN;
INSERT INTO ep SELECT id + 3000000, k - 1, g, t || '-', 'aborted' FROM ep_rows(1, 30000) WHERE id % 4 = 0;
SELECT pg_hybrid.merge('ep_k') >= 0 AS merged;
ROLLBACK;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) FROM ep;
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SELECT * FROM battery();
INSERT INTO ep SELECT id + 4000000, k - 1, g, t || '-', 'committed' FROM ep_rows(1, 30000) WHERE id % 8 = 0;
INSERT INTO ep_b SELECT id + 4000000, k - 1, g, t || '-', 'committed' FROM ep_rows(1, 30000) WHERE id % 8 = 0;
SELECT pg_hybrid.merge('ep_k') >= 0 AS merged, pg_hybrid.merge('ep_id') >= 0 AS merged,
       pg_hybrid.merge('ep_gt') >= 0 AS merged;
SELECT * FROM battery();
SELECT pg_hybrid.verify('ep_k', true), pg_hybrid.verify('ep_id', true), pg_hybrid.verify('ep_gt', true);

-- ------------------------------------------------ VACUUM, line pointer reuse --
-- VACUUM removes the dead entries, then the freed line pointers are reused by
-- new rows with other keys: a stale entry would now point at a wrong row
VACUUM ep; VACUUM ep_b;
SELECT lp_count('ep', 3) AS dead_left;
SELECT static_entries = (SELECT count(*) FROM ep) AS entries_match FROM pg_hybrid.index_stats('ep_k');
INSERT INTO ep SELECT id + 5000000, k + 3, (g + 1) % 61, t || '#', 'reused' FROM ep_rows(1, 30000) WHERE id % 5 = 0;
INSERT INTO ep_b SELECT id + 5000000, k + 3, (g + 1) % 61, t || '#', 'reused' FROM ep_rows(1, 30000) WHERE id % 5 = 0;
SELECT * FROM battery();
SELECT pg_hybrid.merge('ep_k') >= 0 AS merged, pg_hybrid.merge('ep_id') >= 0 AS merged,
       pg_hybrid.merge('ep_gt') >= 0 AS merged;
SELECT * FROM battery();
SELECT c.relname, s.compact_leaves > 0 AS has_compact
  FROM pg_class c, pg_hybrid.index_stats(c.oid) s
 WHERE c.relname IN ('ep_id', 'ep_k', 'ep_gt') ORDER BY c.relname;
SELECT pg_hybrid.verify('ep_k', true), pg_hybrid.verify('ep_id', true), pg_hybrid.verify('ep_gt', true);
DROP TABLE ep, ep_b;
DROP FUNCTION battery, chk, lp_count, ep_rows, dup_probe, zigzag;
