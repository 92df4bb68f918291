-- griffin: reloptions and key types (bad input gives clear ERRORs), point
-- scans through the hash path and every other scan kind through the tree,
-- checked against a btree twin table, before and after the sync worker's
-- merge; UNIQUE and ON CONFLICT through the hash path; VACUUM removes dead
-- entries from both paths; the planner costs full-key equality as a hash
-- probe; verify checks that both paths hold the same entries.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;

-- ------------------------------------------------------------ reloptions --
CREATE TABLE go (k int8, n numeric, b bpchar(4), t text COLLATE "C", d float8);
INSERT INTO go SELECT g, g, 'b' || g % 10, 't' || g, g / 7.0 FROM generate_series(1, 200) g;
CREATE INDEX go_bad ON go USING griffin (k) WITH (sync_ratio = 0);
CREATE INDEX go_bad ON go USING griffin (k) WITH (sync_ratio = 10001);
CREATE INDEX go_bad ON go USING griffin (k) WITH (bucket_fill = 9);
CREATE INDEX go_bad ON go USING griffin (k) WITH (bucket_fill = 101);
CREATE INDEX go_bad ON go USING griffin (k) WITH (bucket_fill = 'full');
CREATE INDEX go_bad ON go USING griffin (k) WITH (merge_ratio = 10);
CREATE INDEX go_bad ON go USING griffin (k) WITH (compression = 'lz4');
-- a key type pg_hybrid does not order
CREATE INDEX go_bad ON go USING griffin (point(k, k));
SELECT count(*) AS no_bad_index FROM pg_class WHERE relname = 'go_bad';
-- INCLUDE columns, text under "C", floats
CREATE INDEX go_ok ON go USING griffin (k) INCLUDE (n, b) WITH (sync_ratio = 3, bucket_fill = 50);
CREATE INDEX go_t ON go USING griffin (t, d);
SELECT reloptions FROM pg_class WHERE relname = 'go_ok';
ALTER INDEX go_ok SET (bucket_fill = 100);
ALTER INDEX go_ok SET (bucket_fill = 1);
SELECT hash_entries, static_entries, hash_buckets > 0 AS has_buckets FROM pg_hybrid.index_stats('go_ok');
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT k, n, b FROM go WHERE k = 77;
SELECT t, d FROM go WHERE t = 't12' AND d = 12 / 7.0;
-- -0.0 = 0.0 on a float key: one hash for both
INSERT INTO go (k, t, d) VALUES (-1, 'zero', 0.0), (-2, 'zero', -0.0);
SELECT k FROM go WHERE t = 'zero' AND d = -0.0 ORDER BY k;
SELECT k FROM go WHERE t = 'zero' AND d = 0.0 ORDER BY k;
-- key types whose equal values may differ in bytes hash by their type's
-- hash function: numeric 1.0 = 1.00, bpchar's trailing blanks, text under
-- a collation, a case-insensitive (nondeterministic) collation
CREATE INDEX go_n ON go USING griffin (n, b);
INSERT INTO go (k, n, b) VALUES (-3, 1.0, 'x'), (-4, 1.00, 'x  '), (-5, 1.000, 'y');
EXPLAIN (COSTS OFF) SELECT k FROM go WHERE n = 1 AND b = 'x';
SELECT k FROM go WHERE n = 1 AND b = 'x' ORDER BY k;
SELECT k FROM go WHERE n = 1.0000 AND b = 'x ' ORDER BY k;
CREATE COLLATION go_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE gci (id int, t text COLLATE go_ci);
INSERT INTO gci VALUES (1, 'Apple'), (2, 'APPLE'), (3, 'apple'), (4, 'pear');
CREATE INDEX gci_t ON gci USING griffin (t);
EXPLAIN (COSTS OFF) SELECT id FROM gci WHERE t = 'aPPle';
SELECT id FROM gci WHERE t = 'aPPle' ORDER BY id;
SELECT pg_hybrid.merge('gci_t') >= 0 AS synced;
SELECT id FROM gci WHERE t = 'aPPle' ORDER BY id;
SELECT pg_hybrid.verify('gci_t', heapallindexed => true);
SELECT pg_hybrid.merge('go_n') >= 0 AS synced;
SELECT k FROM go WHERE n = 1 AND b = 'x' ORDER BY k;
SELECT pg_hybrid.verify('go_n', heapallindexed => true);
DROP TABLE gci;
DROP COLLATION go_ci;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP TABLE go;

-- ---------------------------------------------- scans against a btree twin --
CREATE TABLE gt (a int4, b text COLLATE "C", c int8 NOT NULL, pad text);
INSERT INTO gt SELECT g % 500, 'b' || (g % 7), g, 'p' FROM generate_series(1, 20000) g;
INSERT INTO gt VALUES (NULL, 'x', -1, 'n'), (5, NULL, -2, 'n'), (NULL, NULL, -3, 'n');
CREATE TABLE gb AS SELECT * FROM gt;
CREATE INDEX gt_ab ON gt USING griffin (a, b) INCLUDE (c);
CREATE INDEX gb_ab ON gb (a, b) INCLUDE (c);
CREATE UNIQUE INDEX gt_c ON gt USING griffin (c);
CREATE UNIQUE INDEX gb_c ON gb (c);
-- unsynced rows: the dynamic stage holds them
INSERT INTO gt SELECT g % 500, 'b' || (g % 7), g, 'q' FROM generate_series(20001, 25000) g;
INSERT INTO gb SELECT g % 500, 'b' || (g % 7), g, 'q' FROM generate_series(20001, 25000) g;
SELECT dynamic_entries, hash_entries, static_entries FROM pg_hybrid.index_stats('gt_c');
-- the sync lag: the unsynced entries, the oldest waiting at least as long
-- as the sleep since the insert (the figure is an upper bound)
SELECT pg_sleep(0.2);
SELECT unmerged_entries, lag_ms >= 200 AS waited_since_insert FROM pg_hybrid.sync_lag('gt_c');
ANALYZE gt;
ANALYZE gb;
-- every query below runs on both tables through the index; 'same' compares
CREATE FUNCTION gq(q text, OUT same boolean, OUT n bigint) LANGUAGE plpgsql AS $$
DECLARE x text; y text;
BEGIN
  SET LOCAL enable_seqscan = off;
  EXECUTE format('SELECT md5(coalesce(string_agg(r::text, '','' ), '''')), count(*) FROM (%s) r', replace(q, 'TAB', 'gt')) INTO x, n;
  EXECUTE format('SELECT md5(coalesce(string_agg(r::text, '','' ), '''')) FROM (%s) r', replace(q, 'TAB', 'gb')) INTO y;
  same := x = y;
END $$;
CREATE FUNCTION gplans(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE l text;
BEGIN
  SET LOCAL enable_seqscan = off;
  FOR l IN EXECUTE 'EXPLAIN (COSTS OFF) ' || replace(q, 'TAB', 'gt') LOOP
    RETURN NEXT l;
  END LOOP;
END $$;
CREATE TEMP TABLE queries (q text);
INSERT INTO queries VALUES
  ('SELECT c FROM TAB WHERE a = 5 AND b = ''b3'' ORDER BY c'),
  ('SELECT a, b, c FROM TAB WHERE a = 5 AND b = ''b3'' ORDER BY a, b, c'),
  ('SELECT a, b, c FROM TAB WHERE a = 7 AND b = ''b0'' ORDER BY a DESC, b DESC, c DESC'),
  ('SELECT c FROM TAB WHERE c = 22222'),
  ('SELECT c FROM TAB WHERE c = 30000'),
  ('SELECT c FROM TAB WHERE c IN (1, 5, 24999, 30000, -3) ORDER BY c'),
  ('SELECT c FROM TAB WHERE c = ANY (ARRAY[7, 20007, 7]) ORDER BY c'),
  ('SELECT a, b, c FROM TAB WHERE a = 5 AND b IS NULL'),
  ('SELECT a, b, c FROM TAB WHERE a IS NULL ORDER BY a, b'),
  ('SELECT a, b, c FROM TAB WHERE a = 5 ORDER BY a, b, c'),
  ('SELECT c FROM TAB WHERE c BETWEEN 100 AND 20500 ORDER BY c'),
  ('SELECT c FROM TAB WHERE c >= 24990 ORDER BY c DESC LIMIT 5'),
  ('SELECT c FROM TAB WHERE c < 10 ORDER BY c'),
  ('SELECT a, b FROM TAB WHERE a BETWEEN 10 AND 12 AND b = ''b2'' ORDER BY a, b'),
  ('SELECT count(*) FROM TAB WHERE a = 499 AND b = ''b6'''),
  ('SELECT x.c FROM TAB x JOIN generate_series(1, 25000, 97) s(v) ON x.c = s.v ORDER BY 1');
SELECT q, (gq(q)).* FROM queries;
-- full-key equality is costed as a hash probe, ranges as btree's descent:
-- beside a btree on the same column, griffin serves the probe
CREATE INDEX gt_c_btree ON gt (c);
SELECT gplans('SELECT c FROM TAB WHERE c = 22222');
DROP INDEX gt_c_btree;
SELECT gplans('SELECT c FROM TAB WHERE a = 5 AND b = ''b3''');
SELECT gplans('SELECT c FROM TAB WHERE c BETWEEN 100 AND 200 ORDER BY c');
SET enable_bitmapscan = off;
SELECT q, (gq(q)).* FROM queries;
RESET enable_bitmapscan;

-- ------------------------------------------------- UNIQUE and ON CONFLICT --
INSERT INTO gt VALUES (1, 'b1', 22222, 'dup');
INSERT INTO gt VALUES (1, 'b1', 22222, 'dup') ON CONFLICT (c) DO UPDATE SET pad = 'upd' RETURNING c, pad;
INSERT INTO gt VALUES (1, 'b1', 22222, 'dup') ON CONFLICT (c) DO NOTHING RETURNING c;
INSERT INTO gt VALUES (1, 'b1', 30000, 'new') ON CONFLICT (c) DO NOTHING RETURNING c;
INSERT INTO gb VALUES (1, 'b1', 30000, 'new');
UPDATE gb SET pad = 'upd' WHERE c = 22222;
-- a key deleted and inserted again in one transaction
BEGIN;
DELETE FROM gt WHERE c = 7;
INSERT INTO gt VALUES (7, 'b0', 7, 'again');
ROLLBACK;
SELECT c, pad FROM gt WHERE c IN (7, 22222, 30000) ORDER BY c;

-- ------------------------------------------------- sync, VACUUM, verify --
SELECT pg_hybrid.merge('gt_c') > 0 AS synced;
SELECT pg_hybrid.merge('gt_ab') > 0 AS synced;
SELECT * FROM pg_hybrid.sync_lag('gt_c');
-- The sync may drop the dead versions the updates above left (when no
-- snapshot can see them any more), from both paths alike.
SELECT dynamic_entries, hash_entries = static_entries AS paths_agree, hash_entries >= (SELECT count(*) FROM gt) AS live_hashed FROM pg_hybrid.index_stats('gt_c');
SELECT q, (gq(q)).* FROM queries;
DELETE FROM gt WHERE c % 3 = 0;
DELETE FROM gb WHERE c % 3 = 0;
VACUUM gt;
VACUUM gb;
SELECT hash_entries = static_entries AS paths_agree, hash_entries FROM pg_hybrid.index_stats('gt_c');
SELECT q, (gq(q)).* FROM queries;
SELECT pg_hybrid.verify('gt_ab', heapallindexed => true);
SELECT pg_hybrid.verify('gt_c', heapallindexed => true);
-- growth through many bucket splits, then every key found by a probe
INSERT INTO gt SELECT g % 500, 'b', g, 'r' FROM generate_series(100001, 160000) g;
SELECT pg_hybrid.merge('gt_c') > 0 AS synced;
SELECT hash_buckets > 256 AS split, hash_entries = static_entries AS paths_agree FROM pg_hybrid.index_stats('gt_c');
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS found FROM generate_series(100001, 160000) s(v) WHERE EXISTS (SELECT 1 FROM gt WHERE c = s.v);
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT pg_hybrid.verify('gt_c', heapallindexed => true);
-- ascending growth: syncs merge into the last leaves only, and the unique
-- checks' key filter is rebuilt from every key as the index outgrows it
-- (at about 2.25x the keys it was built for); every key must still conflict
CREATE TABLE gk (c int8);
INSERT INTO gk SELECT g FROM generate_series(1, 20000) g;
CREATE UNIQUE INDEX gk_c ON gk USING griffin (c);
INSERT INTO gk SELECT g FROM generate_series(20001, 30000) g;
SELECT pg_hybrid.merge('gk_c') >= 0 AS synced;
INSERT INTO gk SELECT g FROM generate_series(30001, 60000) g;
SELECT pg_hybrid.merge('gk_c') >= 0 AS synced;
INSERT INTO gk SELECT g FROM generate_series(60001, 120000) g;
SELECT pg_hybrid.merge('gk_c') >= 0 AS synced;
INSERT INTO gk SELECT c FROM gk ON CONFLICT (c) DO NOTHING;
INSERT INTO gk VALUES (25000);
INSERT INTO gk VALUES (119999);
DROP TABLE gk;
-- a key with more entries than a point read takes from its bucket (1024)
-- is read through the tree, in index order from its first entry; unsynced
-- entries come in from the dynamic stage either way (btree: the oracle)
CREATE TABLE glow (k int4, v int4);
CREATE TABLE glowb (k int4, v int4);
INSERT INTO glow SELECT g % 3, g FROM generate_series(1, 6000) g;
INSERT INTO glowb SELECT g % 3, g FROM generate_series(1, 6000) g;
CREATE INDEX glow_k ON glow USING griffin (k);
CREATE INDEX glowb_k ON glowb USING btree (k);
INSERT INTO glow SELECT 1, g FROM generate_series(6001, 6500) g;
INSERT INTO glowb SELECT 1, g FROM generate_series(6001, 6500) g;
INSERT INTO glow VALUES (7, 1), (7, 2);
INSERT INTO glowb VALUES (7, 1), (7, 2);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT (SELECT array_agg(v) FROM (SELECT v FROM glow WHERE k = 1 ORDER BY k LIMIT 5) a)
     = (SELECT array_agg(v) FROM (SELECT v FROM glowb WHERE k = 1 ORDER BY k LIMIT 5) b) AS first_five_same,
       (SELECT array_agg(v) FROM (SELECT v FROM glow WHERE k = 1 ORDER BY k DESC LIMIT 5) a)
     = (SELECT array_agg(v) FROM (SELECT v FROM glowb WHERE k = 1 ORDER BY k DESC LIMIT 5) b) AS last_five_same,
       (SELECT sum(v) FROM glow WHERE k = 1) = (SELECT sum(v) FROM glowb WHERE k = 1) AS all_same,
       (SELECT array_agg(v ORDER BY v) FROM glow WHERE k = 7) AS small_key;
RESET enable_bitmapscan;
SELECT count(*) FROM glow WHERE k = 1;
RESET enable_seqscan;
SELECT pg_hybrid.verify('glow_k');
DROP TABLE glow, glowb;
-- REINDEX and TRUNCATE start both paths over
REINDEX INDEX gt_c;
SELECT hash_entries = static_entries AS paths_agree FROM pg_hybrid.index_stats('gt_c');
TRUNCATE gt;
SELECT hash_entries, static_entries, hash_buckets FROM pg_hybrid.index_stats('gt_c');
INSERT INTO gt VALUES (1, 'a', 1, 'x');
SELECT unmerged_entries FROM pg_hybrid.sync_lag('gt_c');
SET enable_seqscan = off;
SELECT c FROM gt WHERE c = 1;
RESET enable_seqscan;
SELECT pg_hybrid.verify('gb_c');
SELECT * FROM pg_hybrid.sync_lag('gb_c');
DROP TABLE gt, gb;
DROP FUNCTION gq(text);
DROP FUNCTION gplans(text);
