-- Operator classes: every class the extension ships agrees with btree
-- (amvalidate), and one a user creates that orders or compares otherwise
-- is refused at CREATE INDEX, since pg_hybrid compares keys as the type's
-- default btree class does and would answer wrongly without a word.
CREATE EXTENSION IF NOT EXISTS pg_hybrid;
SELECT a.amname, count(*) AS classes, count(*) FILTER (WHERE amvalidate(oc.oid)) AS valid
FROM pg_opclass oc JOIN pg_am a ON a.oid = oc.opcmethod
WHERE a.amname IN ('hybrid_btree', 'elastic_btree', 'griffin', 'tiered_btree', 'tiered_hash')
GROUP BY a.amname ORDER BY a.amname;

CREATE TABLE oc (a int4, t text);
INSERT INTO oc SELECT g, 'v' || g FROM generate_series(1, 1000) g;

-- a reverse order: > is "less" here
CREATE FUNCTION oc_rev_cmp(int4, int4) RETURNS int4 LANGUAGE sql IMMUTABLE AS 'SELECT btint4cmp($2, $1)';
CREATE OPERATOR FAMILY oc_rev_fam USING griffin;
CREATE OPERATOR CLASS oc_rev_ops FOR TYPE int4 USING griffin FAMILY oc_rev_fam AS
    OPERATOR 1 > (int4, int4), OPERATOR 2 >= (int4, int4), OPERATOR 3 = (int4, int4),
    OPERATOR 4 <= (int4, int4), OPERATOR 5 < (int4, int4),
    FUNCTION 1 oc_rev_cmp(int4, int4);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_rev_ops';
CREATE INDEX oc_rev ON oc USING griffin (a oc_rev_ops);

-- btree's operators with another comparison function (case-insensitive text)
CREATE FUNCTION oc_ci_cmp(text, text) RETURNS int4 LANGUAGE sql IMMUTABLE AS 'SELECT bttextcmp(lower($1), lower($2))';
CREATE OPERATOR CLASS oc_ci_ops FOR TYPE text USING hybrid_btree AS
    OPERATOR 1 < (text, text), OPERATOR 2 <= (text, text), OPERATOR 3 = (text, text),
    OPERATOR 4 >= (text, text), OPERATOR 5 > (text, text),
    FUNCTION 1 oc_ci_cmp(text, text);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_ci_ops';
CREATE INDEX oc_ci ON oc USING hybrid_btree (t oc_ci_ops);

-- an ordered AM needs every strategy; an unordered one only =
CREATE OPERATOR CLASS oc_eq_ops FOR TYPE int4 USING tiered_btree AS
    OPERATOR 3 = (int4, int4), FUNCTION 1 btint4cmp(int4, int4);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_eq_ops';
CREATE INDEX oc_eq ON oc USING tiered_btree (a oc_eq_ops);
CREATE OPERATOR CLASS oc_heq_ops FOR TYPE int4 USING tiered_hash AS
    OPERATOR 3 = (int4, int4), FUNCTION 1 btint4cmp(int4, int4);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'oc_heq_ops';
CREATE INDEX oc_heq ON oc USING tiered_hash (a oc_heq_ops);
SET enable_seqscan = off;
SELECT count(*) FROM oc WHERE a = 500;
RESET enable_seqscan;

DROP TABLE oc;
DROP OPERATOR FAMILY oc_rev_fam USING griffin;
DROP OPERATOR FAMILY oc_ci_ops USING hybrid_btree;
DROP OPERATOR FAMILY oc_eq_ops USING tiered_btree;
DROP OPERATOR FAMILY oc_heq_ops USING tiered_hash;
DROP FUNCTION oc_rev_cmp(int4, int4);
DROP FUNCTION oc_ci_cmp(text, text);
