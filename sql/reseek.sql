-- Repositioning after an entry: a direction change, a restored mark, a
-- scan's re-seek after a merge, and on a standby the move to the current
-- stage when replay reused a page the scan was reading. The descent reads
-- one leaf, but the entry sought can be the first of the next leaf (a
-- forward descent stops left of an equal separator), and a posting list
-- can go on over several leaves; such entries came back a second time (a
-- standby count(*) during merges found one row more than a seqscan).
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET enable_seqscan = off; SET enable_bitmapscan = off;
-- turns(q): a SCROLL cursor over q (an index scan) from its last row
-- backwards; after each row x, a step forward must give the row after x,
-- and a step back x again
CREATE FUNCTION turns(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c refcursor; l text; used bool := false; x text; y text; nxt text; n int := 0;
BEGIN
  FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
    used := used OR l LIKE '%Scan using %';
  END LOOP;
  IF NOT used THEN
    RETURN 'not an index scan: ' || q;
  END IF;
  OPEN c SCROLL FOR EXECUTE q;
  FETCH LAST FROM c INTO nxt;
  LOOP
    FETCH PRIOR FROM c INTO x;
    EXIT WHEN NOT FOUND;
    FETCH NEXT FROM c INTO y;
    IF y IS DISTINCT FROM nxt THEN
      RETURN format('forward after %s came %s, not %s', x, y, nxt);
    END IF;
    FETCH PRIOR FROM c INTO y;
    IF y IS DISTINCT FROM x THEN
      RETURN format('backward before %s came %s, not %s', nxt, y, x);
    END IF;
    nxt := x;
    n := n + 1;
  END LOOP;
  CLOSE c;
  RETURN 'ok ' || n;
END $$;
-- unique keys over about ten leaves, each separator the first key of its leaf
CREATE TABLE rs (k int8 NOT NULL);
INSERT INTO rs SELECT g FROM generate_series(1, 20000) g;
CREATE UNIQUE INDEX rs_h ON rs USING hybrid_btree (k);
SELECT turns('SELECT k::text FROM rs WHERE k >= 0 ORDER BY k');
-- three keys of 10000 rows each: posting lists split over several leaves
CREATE TABLE rp (k int8 NOT NULL);
INSERT INTO rp SELECT g % 3 FROM generate_series(1, 30000) g;
CREATE INDEX rp_h ON rp USING hybrid_btree (k);
SELECT turns('SELECT k || '' '' || ctid FROM rp WHERE k >= 0 ORDER BY k');
DROP TABLE rs, rp;
DROP FUNCTION turns;
