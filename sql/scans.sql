-- Scan kinds: index, index-only, bitmap, backward, arrays, NULLs, multi-column,
-- DESC/NULLS FIRST columns, cursors, merge joins (mark/restore).
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;
CREATE TABLE sc (a int, b text, c int8, pad text);
INSERT INTO sc SELECT g % 50, 'b' || (g % 7), g, 'x' FROM generate_series(1, 5000) g;
INSERT INTO sc VALUES (NULL, 'bn', 100001, 'x'), (7, NULL, 100002, 'x'), (NULL, NULL, 100003, 'x');
CREATE INDEX sc_ab ON sc USING hybrid_btree (a, b);
CREATE INDEX sc_c_desc ON sc USING hybrid_btree (c DESC NULLS LAST) INCLUDE (a);
-- half the rows arrive after CREATE INDEX: both stages answer
INSERT INTO sc SELECT g % 50, 'b' || (g % 7), g, 'y' FROM generate_series(5001, 8000) g;
CREATE TABLE sc_b AS SELECT * FROM sc;
CREATE INDEX ON sc_b (a, b);
CREATE INDEX ON sc_b (c DESC NULLS LAST) INCLUDE (a);
ANALYZE sc, sc_b;
SET enable_seqscan = off;
SET enable_bitmapscan = off;

CREATE FUNCTION same(q text) RETURNS bool LANGUAGE plpgsql AS $$
DECLARE x text; y text;
BEGIN
  EXECUTE 'SELECT string_agg(r::text, ''|'') FROM (' || q || ') r' INTO x;
  EXECUTE 'SELECT string_agg(r::text, ''|'') FROM (' || replace(q, ' sc ', ' sc_b ') || ') r' INTO y;
  RETURN x IS NOT DISTINCT FROM y;
END $$;

EXPLAIN (COSTS OFF) SELECT a, b FROM sc WHERE a = 3 AND b = 'b3';
SELECT same('SELECT a, b, c FROM sc WHERE a = 3 AND b = ''b3'' ORDER BY a, b, c');
SELECT same('SELECT a, b FROM sc WHERE a = 3 ORDER BY a, b');
SELECT same('SELECT a, b FROM sc WHERE a BETWEEN 10 AND 12 ORDER BY a DESC, b DESC');
SELECT same('SELECT a, b, c FROM sc WHERE b = ''b5'' ORDER BY c');
EXPLAIN (COSTS OFF) SELECT a FROM sc WHERE a IN (5, 1, 49, 77) ORDER BY a;
SELECT same('SELECT a, b FROM sc WHERE a IN (5, 1, 49, 77) ORDER BY a, b');
SELECT same('SELECT a, b FROM sc WHERE a = ANY(ARRAY[3, 3, NULL, 2]) ORDER BY a DESC, b DESC');
SELECT same('SELECT a, b, c FROM sc WHERE a IN (1, 2) AND b IN (''b1'', ''b6'') ORDER BY c');
SELECT same('SELECT a, b, c FROM sc WHERE a < ANY(ARRAY[3, 5]) ORDER BY c');
SELECT same('SELECT a, b, c FROM sc WHERE a IS NULL ORDER BY c');
SELECT same('SELECT a, b, c FROM sc WHERE a = 7 AND b IS NULL ORDER BY c');
SELECT same('SELECT count(*) FROM sc WHERE a IS NOT NULL');
SELECT a, b FROM sc WHERE a = NULL;
SELECT a FROM sc WHERE a IN (NULL::int);
-- DESC NULLS LAST column: forward and backward scans, LIMIT
EXPLAIN (COSTS OFF) SELECT c FROM sc ORDER BY c DESC NULLS LAST LIMIT 3;
SELECT c FROM sc ORDER BY c DESC NULLS LAST LIMIT 3;
SELECT c, a FROM sc WHERE c < 20 ORDER BY c LIMIT 5;
SELECT same('SELECT c, a FROM sc WHERE c BETWEEN 4990 AND 5010 ORDER BY c DESC');
-- index-only scan
EXPLAIN (COSTS OFF) SELECT c, a FROM sc WHERE c > 7990;
SELECT c, a FROM sc WHERE c > 7995 ORDER BY c;
-- bitmap scan
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT count(*) FROM sc WHERE a = 4;
SELECT count(*) FROM sc WHERE a = 4;
SELECT count(*) FROM sc WHERE a IN (4, 5) OR c > 7990;
RESET enable_indexscan; RESET enable_indexonlyscan; SET enable_bitmapscan = off;
-- cursor moving both ways
BEGIN;
DECLARE cur SCROLL CURSOR FOR SELECT c FROM sc WHERE c BETWEEN 4998 AND 5003 ORDER BY c DESC NULLS LAST;
FETCH 2 FROM cur;
FETCH BACKWARD 1 FROM cur;
FETCH ALL FROM cur;
FETCH BACKWARD 2 FROM cur;
FETCH FIRST FROM cur;
FETCH LAST FROM cur;
COMMIT;
-- merge join restores marked positions on the inner side
SET enable_hashjoin = off; SET enable_nestloop = off; SET enable_sort = off; SET enable_material = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM sc x JOIN sc y ON x.a = y.a WHERE x.c < 200;
SELECT count(*) FROM sc x JOIN sc y ON x.a = y.a WHERE x.c < 200;
SELECT count(*) FROM sc_b x JOIN sc_b y ON x.a = y.a WHERE x.c < 200;
RESET enable_hashjoin; RESET enable_nestloop; RESET enable_sort; RESET enable_material;
-- after a merge the same answers
SELECT pg_hybrid.merge('sc_ab') > 0 AS merged;
SELECT same('SELECT a, b, c FROM sc WHERE a IN (5, 1) ORDER BY a, b, c');
SELECT same('SELECT a, b FROM sc WHERE a BETWEEN 10 AND 12 ORDER BY a DESC, b DESC');
DROP TABLE sc, sc_b;
DROP FUNCTION same;
-- One-sided ranges run into the range column's NULLs (after equalities on
-- the columns before it, in both stages, forward and backward, ASC NULLS
-- LAST and DESC NULLS FIRST): only values pass.
CREATE TABLE so (x int, y int8);
CREATE TABLE sy (y int8);
INSERT INTO so SELECT g % 5, CASE WHEN g % 9 = 0 THEN NULL ELSE g END FROM generate_series(1, 2000) g;
INSERT INTO so SELECT NULL, CASE WHEN g % 4 = 0 THEN NULL ELSE g END FROM generate_series(1, 60) g;
INSERT INTO sy SELECT y FROM so;
CREATE INDEX so_xy ON so USING hybrid_btree (x, y);
CREATE INDEX sy_y ON sy USING hybrid_btree (y DESC NULLS FIRST);
INSERT INTO so SELECT g % 5, CASE WHEN g % 7 = 0 THEN NULL ELSE g END FROM generate_series(2001, 3000) g;
INSERT INTO so SELECT NULL, CASE WHEN g % 3 = 0 THEN NULL ELSE g END FROM generate_series(61, 90) g;
INSERT INTO sy SELECT y FROM so WHERE y > 2000 OR y IS NULL;
CREATE TABLE so_b AS SELECT * FROM so;
CREATE TABLE sy_b AS SELECT * FROM sy;
CREATE INDEX ON so_b (x, y);
CREATE INDEX ON sy_b (y DESC NULLS FIRST);
ANALYZE so, so_b, sy, sy_b;
CREATE FUNCTION same_so(q text) RETURNS bool LANGUAGE plpgsql AS $$
DECLARE x text; y text;
BEGIN
  EXECUTE 'SELECT string_agg(r::text, ''|'') FROM (' || q || ') r' INTO x;
  EXECUTE 'SELECT string_agg(r::text, ''|'') FROM (' || replace(replace(q, ' so ', ' so_b '), ' sy ', ' sy_b ') || ') r' INTO y;
  RETURN x IS NOT DISTINCT FROM y AND x IS NOT NULL;
END $$;
EXPLAIN (COSTS OFF) SELECT x, y FROM so WHERE x = 3 AND y >= 1500 ORDER BY x, y;
SELECT same_so('SELECT x, y FROM so WHERE x = 3 AND y >= 1500 ORDER BY x, y');
SELECT same_so('SELECT x, y FROM so WHERE x = 3 AND y > 1500 ORDER BY x DESC, y DESC');
SELECT same_so('SELECT x, y FROM so WHERE x = 4 AND y < 300 ORDER BY x, y');
SELECT same_so('SELECT x, y FROM so WHERE x = 4 AND y <= 300 ORDER BY x DESC, y DESC');
SELECT same_so('SELECT x, y FROM so WHERE x > 2 ORDER BY x, y');
SELECT same_so('SELECT x, y FROM so WHERE x >= 3 ORDER BY x DESC, y DESC');
SELECT same_so('SELECT x, y FROM so WHERE x < 1 ORDER BY x DESC, y DESC');
SELECT same_so('SELECT x, y FROM so WHERE x IS NULL AND y > 40 ORDER BY x, y');
SELECT same_so('SELECT x, y FROM so WHERE x IS NULL AND y < 70 ORDER BY x DESC, y DESC');
EXPLAIN (COSTS OFF) SELECT y FROM sy WHERE y > 2500 ORDER BY y DESC;
SELECT same_so('SELECT y FROM sy WHERE y > 2500 ORDER BY y DESC');
SELECT same_so('SELECT y FROM sy WHERE y >= 2990 ORDER BY y');
SELECT same_so('SELECT y FROM sy WHERE y < 10 ORDER BY y DESC');
SELECT same_so('SELECT y FROM sy WHERE y <= 10 ORDER BY y');
SELECT same_so('SELECT count(*), sum(y) FROM sy WHERE y > 0');
SELECT pg_hybrid.merge('so_xy') > 0 AS merged;
SELECT pg_hybrid.merge('sy_y') > 0 AS merged;
SELECT same_so('SELECT x, y FROM so WHERE x = 3 AND y >= 1500 ORDER BY x, y');
SELECT same_so('SELECT x, y FROM so WHERE x > 2 ORDER BY x DESC, y DESC');
SELECT same_so('SELECT x, y FROM so WHERE x IS NULL AND y > 40 ORDER BY x, y');
SELECT same_so('SELECT y FROM sy WHERE y < 10 ORDER BY y DESC');
DROP TABLE so, so_b, sy, sy_b;
DROP FUNCTION same_so;
