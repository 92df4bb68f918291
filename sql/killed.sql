-- Killed-tuple hints (src/engine/killed.rs): a scan told by the executor that
-- a TID is dead to every transaction lets later scans of every backend skip
-- it, as btree's LP_DEAD items; a TID that VACUUM freed and an insert reused
-- is never skipped, in this backend or another.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TABLE kt (k int8, pad text) WITH (autovacuum_enabled = off, fillfactor = 100);
INSERT INTO kt SELECT g, 'a' FROM generate_series(1, 1000) g;
CREATE INDEX kt_k ON kt USING hybrid_btree (k);
INSERT INTO kt SELECT g, 'b' FROM generate_series(1001, 1200) g;  -- dynamic stage
CREATE TABLE kt_dead AS SELECT ctid AS c FROM kt WHERE k <= 500 OR k > 1100;
DELETE FROM kt WHERE k <= 500 OR k > 1100;
-- the first scan visits the dead tuples (and reports them), the second skips
SELECT count(*), min(k), max(k) FROM kt WHERE k BETWEEN 1 AND 1200;
SELECT count(*), min(k), max(k) FROM kt WHERE k BETWEEN 1 AND 1200;
SELECT k FROM kt WHERE k BETWEEN 495 AND 505 ORDER BY k DESC;
-- hints are shared: a new backend's scans use them
\c
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*), min(k), max(k) FROM kt WHERE k BETWEEN 1 AND 1200;
-- VACUUM frees the line pointers; new rows take them with the same keys
VACUUM kt;
INSERT INTO kt SELECT g, 'c' FROM generate_series(1, 500) g;
INSERT INTO kt SELECT g, 'c' FROM generate_series(1101, 1200) g;
SET enable_seqscan = on; SET enable_indexscan = off;
SELECT count(*) > 0 AS tids_reused FROM kt JOIN kt_dead ON kt.ctid = kt_dead.c;
SET enable_seqscan = off; SET enable_indexscan = on;
SELECT count(*), min(k), max(k) FROM kt WHERE k BETWEEN 1 AND 1200;
SELECT count(*) FROM kt WHERE k BETWEEN 1 AND 1200 AND pad = 'c';
SELECT k, pad FROM kt WHERE k BETWEEN 498 AND 502 ORDER BY k;
-- another backend after the VACUUM: the reused TIDs are found there too
\c
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*), min(k), max(k) FROM kt WHERE k BETWEEN 1 AND 1200;
SELECT pg_hybrid.merge('kt_k') >= 0 AS merged;
SELECT count(*), min(k), max(k) FROM kt WHERE k BETWEEN 1 AND 1200;
DROP TABLE kt, kt_dead;
-- A merge drops the entries of hinted TIDs from the leaves it rewrites
-- (nbtree's simple deletion of LP_DEAD items): the index stops growing with
-- deleted rows between VACUUMs. VACUUM afterwards finds nothing of them here,
-- still moves the epoch, and the TIDs it frees are found again once reused.
CREATE TABLE km (k int8) WITH (autovacuum_enabled = off);
INSERT INTO km SELECT g FROM generate_series(1, 1000) g;
CREATE INDEX km_k ON km USING hybrid_btree (k);
-- a hint needs the deleted tuples dead to every snapshot: wait out any
-- autovacuum ANALYZE that holds one
CREATE FUNCTION killed_wait_for_old_snapshots() RETURNS void LANGUAGE plpgsql AS $$ BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL);
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT killed_wait_for_old_snapshots();
DELETE FROM km WHERE k <= 300;
SELECT count(*), min(k), max(k) FROM km WHERE k BETWEEN 1 AND 2000;
INSERT INTO km SELECT g FROM generate_series(1001, 1100) g;
SELECT static_entries, dynamic_entries FROM pg_hybrid.index_stats('km_k');
SELECT pg_hybrid.merge('km_k') >= 0 AS merged;
SELECT static_entries, dynamic_entries FROM pg_hybrid.index_stats('km_k');
SELECT count(*), min(k), max(k) FROM km WHERE k BETWEEN 1 AND 2000;
SELECT k FROM km WHERE k BETWEEN 299 AND 302 ORDER BY k;
VACUUM km;
INSERT INTO km SELECT g FROM generate_series(1, 300) g;
SELECT count(*), min(k), max(k) FROM km WHERE k BETWEEN 1 AND 2000;
SELECT k FROM km WHERE k BETWEEN 299 AND 302 ORDER BY k;
\c
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*), min(k), max(k) FROM km WHERE k BETWEEN 1 AND 2000;
DROP TABLE km;
-- Hinted entries also leave the dynamic stage before any merge (state.rs,
-- prune_dead_versions and prune_dead_range): an insert drops the hinted
-- versions of its own key, and a scan that stepped over hinted entries drops
-- that range when it ends, so a key deleted and inserted again and again,
-- or a range whose low end is all deleted rows (TPC-C's new_order), keeps
-- few entries there. Answers stay those of the table.
CREATE TABLE kp (k int8, v int8) WITH (autovacuum_enabled = off);
INSERT INTO kp SELECT g, 0 FROM generate_series(1, 1000) g;
CREATE UNIQUE INDEX kp_k ON kp USING hybrid_btree (k);
SELECT killed_wait_for_old_snapshots();
-- one key, 20 times deleted and inserted again, each in its own transaction:
-- each insert's unique check finds the last version dead and prunes it
SELECT q FROM generate_series(1, 20) i,
  LATERAL (VALUES (1, 'DELETE FROM kp WHERE k = 5000'), (2, format('INSERT INTO kp VALUES (5000, %s)', i))) s(n, q)
  ORDER BY i, n \gexec
SELECT dynamic_entries < 10 AS versions_pruned FROM pg_hybrid.index_stats('kp_k');
SELECT k, v FROM kp WHERE k = 5000;
-- 200 new rows, the lower half deleted: the first scan hints them, the
-- second steps over them and prunes them
INSERT INTO kp SELECT g, 1 FROM generate_series(2001, 2200) g;
DELETE FROM kp WHERE k BETWEEN 2001 AND 2100;
SELECT min(k) FROM kp WHERE k > 2000;
SELECT min(k) FROM kp WHERE k > 2000;
SELECT dynamic_entries < 110 AS range_pruned FROM pg_hybrid.index_stats('kp_k');
SELECT count(*), min(k), max(k) FROM kp WHERE k > 1000;
SELECT pg_hybrid.verify('kp_k', true);
SELECT pg_hybrid.merge('kp_k') >= 0 AS merged;
SELECT count(*), min(k), max(k), sum(v) FROM kp;
DROP TABLE kp;
DROP FUNCTION killed_wait_for_old_snapshots();
