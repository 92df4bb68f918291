-- pg_hybrid.storage_stats: what a drive with transparent compression (zram:
-- LZ4 per 4 KB block, blocks of one repeated word free) stores for a
-- relation. Figures depend on page contents (xids, LSNs), so this checks
-- their relations to each other and to pg_relation_size, not exact bytes.
SET client_min_messages = warning;
CREATE TABLE meter_heap (id int8 PRIMARY KEY, small int4, label text, big text);
INSERT INTO meter_heap
    SELECT g, g % 10, 'label ' || (g % 7), CASE WHEN g % 500 = 0 THEN repeat(md5(g::text), 200) END
    FROM generate_series(1, 20000) g;
CREATE TABLE meter_hasis (LIKE meter_heap) USING hasis;
INSERT INTO meter_hasis SELECT * FROM meter_heap;
CREATE INDEX meter_hasis_id ON meter_hasis (id);
VACUUM meter_heap;
VACUUM meter_hasis;

-- One row per existing fork; the logical figure is the fork's size.
SELECT s.fork, s.logical_bytes = pg_relation_size('meter_heap', s.fork) AS logical_is_size,
       s.blocks_4k * 4096 = s.logical_bytes AS blocks_add_up,
       s.physical_bytes > 0 AND s.physical_bytes < s.logical_bytes AS compresses,
       s.free_blocks_4k + s.raw_blocks_4k <= s.blocks_4k AS counts_sane
FROM pg_hybrid.storage_stats('meter_heap') s ORDER BY s.fork;

-- A hasis table's unused column and delta blocks are zero pages: free.
SELECT s.fork, s.logical_bytes = pg_relation_size('meter_hasis', s.fork) AS logical_is_size,
       s.free_blocks_4k > 0 AS has_free_blocks,
       s.physical_bytes < s.logical_bytes AS compresses
FROM pg_hybrid.storage_stats('meter_hasis') s WHERE s.fork = 'main';

-- with_dependents: the TOAST table, its index and the table's indexes, as
-- pg_total_relation_size counts them.
SELECT sum(logical_bytes) = pg_total_relation_size('meter_heap') AS total_matches,
       count(DISTINCT relation) AS relations,
       bool_and(physical_bytes <= logical_bytes) AS never_above_logical
FROM pg_hybrid.storage_stats('meter_heap', with_dependents => true);
SELECT relation::text ~ '^pg_toast\.' AS toast, count(DISTINCT relation)
FROM pg_hybrid.storage_stats('meter_hasis', true) GROUP BY 1 ORDER BY 1;

-- Compressible content costs less than incompressible content of the same size.
CREATE TABLE meter_zeros AS SELECT repeat('a', 1000) AS v FROM generate_series(1, 300);
CREATE TABLE meter_noise AS
    SELECT string_agg(md5(g::text || ':' || i::text), '') AS v
    FROM generate_series(1, 300) g, generate_series(1, 31) i GROUP BY g;
ALTER TABLE meter_noise ALTER COLUMN v SET STORAGE plain;
SELECT (SELECT physical_bytes FROM pg_hybrid.storage_stats('meter_zeros') WHERE fork = 'main')
     < (SELECT physical_bytes FROM pg_hybrid.storage_stats('meter_noise') WHERE fork = 'main') / 4
       AS repetitive_is_cheaper;

-- An empty table has a main fork of no blocks; relations without storage have no forks.
CREATE TABLE meter_empty (a int);
SELECT fork, logical_bytes, physical_bytes, blocks_4k FROM pg_hybrid.storage_stats('meter_empty');
CREATE VIEW meter_view AS SELECT 1 AS one;
SELECT count(*) FROM pg_hybrid.storage_stats('meter_view');
CREATE TABLE meter_parted (a int) PARTITION BY RANGE (a);
SELECT count(*) FROM pg_hybrid.storage_stats('meter_parted', true);
-- A temporary table of this session and an unlogged table (with its init fork).
CREATE TEMP TABLE meter_temp AS SELECT g FROM generate_series(1, 1000) g;
SELECT fork, logical_bytes = pg_relation_size('meter_temp') AS logical_is_size FROM pg_hybrid.storage_stats('meter_temp');
CREATE UNLOGGED TABLE meter_unlogged (a int);
SELECT fork FROM pg_hybrid.storage_stats('meter_unlogged') ORDER BY fork;
-- Dirty buffers are written out first: the figure is of the current content.
INSERT INTO meter_empty SELECT generate_series(1, 1000);
SELECT fork, logical_bytes > 0 AND physical_bytes > 0 AS counted FROM pg_hybrid.storage_stats('meter_empty') WHERE fork = 'main';

-- Who may run it: superusers and members of pg_stat_scan_tables, as pgstattuple.
CREATE ROLE regress_meter_user;
GRANT SELECT ON meter_heap TO regress_meter_user;
GRANT USAGE ON SCHEMA pg_hybrid TO regress_meter_user;
SET ROLE regress_meter_user;
SELECT count(*) FROM pg_hybrid.storage_stats('meter_heap');
RESET ROLE;
GRANT pg_stat_scan_tables TO regress_meter_user;
SET ROLE regress_meter_user;
SELECT count(*) > 0 AS allowed FROM pg_hybrid.storage_stats('meter_heap');
RESET ROLE;
SELECT * FROM pg_hybrid.storage_stats(NULL);
SELECT * FROM pg_hybrid.storage_stats('no_such_table');

DROP TABLE meter_heap, meter_hasis, meter_zeros, meter_noise, meter_empty, meter_parted, meter_unlogged;
DROP VIEW meter_view;
REVOKE pg_stat_scan_tables FROM regress_meter_user;
REVOKE USAGE ON SCHEMA pg_hybrid FROM regress_meter_user;
DROP ROLE regress_meter_user;
