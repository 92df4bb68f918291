-- Every supported key type: hybrid_btree must return exactly what btree returns.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SET pg_hybrid.background_merge = off;
SET pg_hybrid.merge_min_entries = 1000000;
CREATE TABLE ty (
    i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, nu numeric,
    tx text, tc text COLLATE "C", vc varchar(20), bc char(6), by bytea, uu uuid,
    bo bool, da date, ti time, ts timestamp, tz timestamptz, iv interval);
INSERT INTO ty
SELECT (g % 300 - 150)::int2, g * 7919 % 100003 - 50000, (g::int8 * 1000003) % 1000000007 - 500000000,
       (g % 97) / 7.0, g / 13.0 - 30, round(g / 3.0, 2), 'k' || (g % 500), 'c' || (g % 400),
       'v' || (g % 250), 'b' || (g % 90), decode(lpad(to_hex(g % 700), 4, '0'), 'hex'),
       md5((g % 350)::text)::uuid, g % 3 = 0, date '2000-01-01' + (g % 900),
       time '00:00' + (g % 1440) * interval '1 minute', timestamp '2020-01-01' + g * interval '37 minutes',
       timestamptz '2020-01-01 00:00+00' + g * interval '41 minutes', (g % 40) * interval '1 day' + (g % 7) * interval '1 hour'
FROM generate_series(1, 3000) g;
INSERT INTO ty SELECT NULL FROM generate_series(1, 20);
INSERT INTO ty (f8, f4, nu, bc, iv) VALUES ('NaN', '-Infinity', 'NaN', 'b1   ', '30 days'), ('-0', 'Infinity', 0.000, 'b1', '1 mon');
CREATE TABLE ty_b AS SELECT * FROM ty;

CREATE FUNCTION check_col(col text, val text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE q text; r text := ''; ok bool; n bigint;
BEGIN
  EXECUTE format('CREATE INDEX ty_h_%1$s ON ty USING hybrid_btree (%1$s)', col);
  EXECUTE format('CREATE INDEX ty_b_%1$s ON ty_b (%1$s)', col);
  SET LOCAL enable_seqscan = off;
  FOREACH q IN ARRAY ARRAY[
      '%1$s = %2$s', '%1$s < %2$s', '%1$s <= %2$s', '%1$s > %2$s', '%1$s >= %2$s',
      '%1$s IS NULL', '%1$s IS NOT NULL', '%1$s IN (%2$s, %2$s)'] LOOP
    EXECUTE format('SELECT count(*) FROM ((SELECT %1$s, ctid FROM ty WHERE ' || q || ') EXCEPT ALL (SELECT %1$s, ctid FROM ty_b WHERE ' || q || ')) x', col, val) INTO n;
    ok := n = 0;
    EXECUTE format('SELECT count(*) FROM ((SELECT %1$s, ctid FROM ty_b WHERE ' || q || ') EXCEPT ALL (SELECT %1$s, ctid FROM ty WHERE ' || q || ')) x', col, val) INTO n;
    ok := ok AND n = 0;
    r := r || CASE WHEN ok THEN '.' ELSE 'X' END;
  END LOOP;
  -- order, both directions, with the value stream compared as text
  EXECUTE format('SELECT (SELECT string_agg(%1$s::text, '','' ORDER BY %1$s) FROM ty) = (SELECT string_agg(%1$s::text, '','' ORDER BY %1$s) FROM ty_b)', col) INTO ok;
  r := r || CASE WHEN ok THEN '.' ELSE 'X' END;
  EXECUTE format('SELECT (SELECT string_agg(x::text, '','') FROM (SELECT %1$s AS x FROM ty ORDER BY %1$s DESC NULLS FIRST LIMIT 50) s) = (SELECT string_agg(x::text, '','') FROM (SELECT %1$s AS x FROM ty_b ORDER BY %1$s DESC NULLS FIRST LIMIT 50) s)', col) INTO ok;
  r := r || CASE WHEN ok THEN '.' ELSE 'X' END;
  RETURN r;
END $$;

SELECT col, check_col(col, val) FROM (VALUES
  ('i2', '17::int2'), ('i4', '1234'), ('i8', '-7777'), ('f4', '3.5::float4'), ('f8', '12.5'),
  ('nu', '500.33'), ('tx', '''k42'''), ('tc', '''c123'''), ('vc', '''v100'''), ('bc', '''b1'''),
  ('by', '''\x0100''::bytea'), ('uu', '''c4ca4238-a0b9-2382-0dcc-509a6f75849b''::uuid'),
  ('bo', 'true'), ('da', '''2001-06-01''::date'), ('ti', '''12:00''::time'),
  ('ts', '''2020-03-01 10:00''::timestamp'), ('tz', '''2020-02-01 00:00+00''::timestamptz'),
  ('iv', '''30 days''::interval')) v(col, val);

-- cross-type comparisons inside the integer and float families
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT i4 FROM ty WHERE i4 = 1234::int8;
SELECT count(*) FROM ty WHERE i4 < 100::int2;
SELECT count(*) FROM ty_b WHERE i4 < 100::int2;
SELECT count(*) FROM ty WHERE i8 > 2147483648::int8 AND i8 < 4000000000;
SELECT count(*) FROM ty_b WHERE i8 > 2147483648::int8 AND i8 < 4000000000;
SELECT count(*) FROM ty WHERE f4 = 3.5::float8;
SELECT count(*) FROM ty_b WHERE f4 = 3.5::float8;
-- -0 equals 0, NaN sorts above Infinity, char(n) ignores trailing blanks, intervals compare by span
SELECT count(*) FROM ty WHERE f8 = 0;
SELECT f8 FROM ty WHERE f8 > 1e300;
SELECT count(*) FROM ty WHERE bc = 'b1';
SELECT count(*) FROM ty_b WHERE bc = 'b1';
SELECT count(*) FROM ty WHERE iv = '1 mon';
SELECT count(*) FROM ty_b WHERE iv = '1 mon';
-- index-only scans return the stored values for returnable types
EXPLAIN (COSTS OFF) SELECT tx FROM ty WHERE tx = 'k42';
SELECT DISTINCT tx FROM ty WHERE tx = 'k42';
SELECT DISTINCT nu FROM ty WHERE nu = 500.33;
DROP TABLE ty, ty_b;
DROP FUNCTION check_col;
