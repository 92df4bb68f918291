-- SERIALIZABLE scans lock key-range partitions of the index
-- (src/engine/predlock.rs): virtual blocks 0x40000000 + p of a partition
-- map written by CREATE INDEX, up to 8191 boundaries (one per 64 keys at
-- most) on a chain of up to 16 LockMap pages. A map on one page held at
-- most 511, and a scan's lock then covered four thousand keys of a 2M-key
-- index; btree's page locks cover a leaf of a few hundred.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
CREATE TABLE pl (k int8 NOT NULL, t text COLLATE "C" NOT NULL);
INSERT INTO pl SELECT g, lpad(g::text, 8, '0') || repeat('y', 32) FROM generate_series(1, 100000) g;
CREATE INDEX pl_k ON pl USING hybrid_btree (k);
CREATE INDEX pl_t ON pl USING hybrid_btree (t);
VACUUM ANALYZE pl;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
CREATE VIEW pl_locks AS
  SELECT relation::regclass AS index, page - 1073741824 AS partition FROM pg_locks
   WHERE locktype = 'page' AND mode = 'SIReadLock' AND pid = pg_backend_pid()
     AND relation IN ('pl_k'::regclass, 'pl_t'::regclass)
   ORDER BY 1, 2;
-- 100000 keys: 1562 boundaries, one every 63 keys (keys 64, 127, ...), so
-- key k is in partition (k - 1) / 63; a one-page map's 510 boundaries
-- put 50000..50005 in partition 255
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM pl WHERE k BETWEEN 50000 AND 50005;
SELECT count(*) FROM pl WHERE k BETWEEN 99990 AND 100005;
SELECT count(*) FROM pl WHERE k BETWEEN 1 AND 70;
-- text keys: the map keeps 32-byte prefixes of the encoded keys (34 bytes
-- each on the page), more than one page's worth
SELECT count(*) FROM pl WHERE t BETWEEN '00050000' AND '00050001';
SELECT * FROM pl_locks;
COMMIT;
-- VACUUM frees pages nothing references; every page of the chain stays
-- (a new backend reads the map from its pages again)
DELETE FROM pl WHERE k % 1000 = 0;
VACUUM pl;
\c
SET enable_seqscan = off;
SET enable_bitmapscan = off;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM pl WHERE k BETWEEN 50000 AND 50005;
SELECT count(*) FROM pl WHERE t BETWEEN '00050001' AND '00050002';
SELECT * FROM pl_locks;
COMMIT;
SELECT pg_hybrid.verify('pl_k'), pg_hybrid.verify('pl_t');
-- numeric keys: their bytes are not in their order (250.5 = 250.500), so
-- the map's boundaries are whole keys compared as numeric compares, and a
-- range or a point locks its partitions, not the whole index (as it did
-- before 2026-12-07). 100000 keys i / 100: key i is in partition
-- (i - 1) / 63, as above.
CREATE TABLE pln (k numeric NOT NULL);
INSERT INTO pln SELECT g / 100.0 FROM generate_series(1, 100000) g;
CREATE INDEX pln_k ON pln USING hybrid_btree (k);
VACUUM ANALYZE pln;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM pln WHERE k BETWEEN 500 AND 500.05;
SELECT count(*) FROM pln WHERE k = 250.500;
SELECT count(*) FROM pln WHERE k >= 999.99;
SELECT locktype, page - 1073741824 AS partition FROM pg_locks
 WHERE mode = 'SIReadLock' AND pid = pg_backend_pid() AND relation = 'pln_k'::regclass
 ORDER BY 1, 2;
COMMIT;
SELECT pg_hybrid.verify('pln_k');
DROP TABLE pln;
-- an index built empty gets its map at the first merge after it holds
-- 1000 entries (foreground merges here), from every key it holds; a merge
-- after it has doubled chooses a new map from all its keys, and a merge
-- whose batch crowds a partition (an ascending load: the last one) splits
-- it. Each new map has the next *epoch*, which numbers its partitions
-- apart from the old map's (virtual block 0x40000000 + 8192 * epoch +
-- partition). Before 2026-12-07 the first map stayed, and every key after
-- the first thousand shared its last partition.
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000;
CREATE TABLE pl2 (k int8 NOT NULL);
CREATE INDEX pl2_k ON pl2 USING hybrid_btree (k);
INSERT INTO pl2 SELECT g FROM generate_series(1, 5000) g;
SELECT merges > 0 AS merged FROM pg_hybrid.index_stats('pl2_k');
CREATE VIEW pl2_locks AS
  SELECT (page - 1073741824) / 8192 AS epoch, (page - 1073741824) % 8192 AS partition FROM pg_locks
   WHERE locktype = 'page' AND mode = 'SIReadLock' AND pid = pg_backend_pid() AND relation = 'pl2_k'::regclass
   ORDER BY 1, 2;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM pl2 WHERE k BETWEEN 100 AND 105;
SELECT count(*) FROM pl2 WHERE k BETWEEN 4000 AND 4005;
SELECT * FROM pl2_locks;
-- a remap while the locks are held copies each to the partitions of the
-- new map that share keys with it (the old ones stay until commit)
INSERT INTO pl2 SELECT g FROM generate_series(10001, 20000) g;
SELECT pg_hybrid.merge('pl2_k') > 0 AS merged;
-- (the batch went above key 10000 and split the partitions there; each
-- lock is copied to the new partitions that share its keys, and to the one
-- below when the old partition starts at a boundary of the new map)
SELECT epoch, count(*) AS locks, min(partition), max(partition) FROM pl2_locks GROUP BY 1 ORDER BY 1;
COMMIT;
-- the replaced maps' pages were listed for recycling, not left as orphans
VACUUM pl2;
SELECT pg_hybrid.verify('pl2_k');
-- the same on numeric keys: maps chosen again and split by merges of a
-- backend compare as numeric compares, in the backend that switched to
-- them as in a new one (that one once kept its new map in byte order,
-- and the next split wrote boundaries out of order)
CREATE TABLE pl3 (k numeric NOT NULL);
CREATE INDEX pl3_k ON pl3 USING hybrid_btree (k);
INSERT INTO pl3 SELECT g / 7.0 FROM generate_series(1, 5000) g;
INSERT INTO pl3 SELECT g / 7.0 FROM generate_series(5001, 20000) g;
SELECT pg_hybrid.merge('pl3_k') >= 0 AS merged;
INSERT INTO pl3 SELECT g / 7.0 FROM generate_series(20001, 40000) g;
SELECT pg_hybrid.merge('pl3_k') >= 0 AS merged;
\c
SET enable_seqscan = off;
SET enable_bitmapscan = off;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM pl3 WHERE k BETWEEN 1000 AND 1001;
SELECT count(*) > 0 AS locked FROM pg_locks
 WHERE locktype = 'page' AND mode = 'SIReadLock' AND pid = pg_backend_pid() AND relation = 'pl3_k'::regclass;
COMMIT;
SELECT pg_hybrid.verify('pl3_k');
DROP VIEW pl_locks, pl2_locks;
DROP TABLE pl, pl2, pl3;
