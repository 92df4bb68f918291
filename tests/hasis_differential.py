#!/usr/bin/env python3
"""tests/hasis_differential.py — differential test of the hasis table AM against heap.

Two tables with the same columns, h (USING hasis) and x (USING heap, the
oracle twin):

    k int NOT NULL   the key: UNIQUE btree index on both (h_k, x_k)
    a int            hybrid_btree index on the hasis side (h_a)
    t text           hash index on the hasis side (h_t); a few values are
                     long and incompressible (TOAST)
    f float8         with NaN, +-Infinity, -0
    z int8           mostly NULL

Every batch is one psql session running a few random transactions; every
statement is applied to h and to x, one after the other, in the same
transaction: inserts (VALUES, INSERT ... SELECT, COPY), multi-row updates
(also of the key, into fresh keys, and of indexed columns), deletes,
UPDATE/DELETE ... RETURNING (outputs compared), SELECT ... FOR UPDATE /
FOR SHARE followed by updates of the locked rows, savepoints released or
rolled back to, unique-violation probes caught in a subtransaction (both
sides must give SQLSTATE 23505), TRUNCATE, and whole-transaction rollbacks.
The hasis side's DML reads through random plans (seq, index or bitmap
scans).  Inside the transactions the two tables are compared now and then
(own uncommitted changes).  Between batches, sometimes: VACUUM, ANALYZE,
VACUUM FULL, CLUSTER.

After every batch: the full contents of both (seq scans) are compared, and
random queries run on h forced through plain index scans, bitmap scans
index-only scans, TID scans
and parallel seq scans (enable_* settings; the EXPLAIN must show the scan),
and on x as a plain seq scan: the truth.  Results are compared row for row
(in order where the query has an ORDER BY).

Sometimes, and at the end, pg_hybrid.verify_table(h) checks every hybrid page
and index entry (when the installed build has it).

The first mismatch (or an ERROR on one side only) stops the run: it prints
what differs and writes a repro script (every statement of the run so far,
then the failing query) to OUTDIR/hasis_differential_repro.sql.

Connects with psql (CSV output) run as the cluster's OS user (runuser when
we are root).  Python 3 stdlib only.

    tests/hasis_differential.py [--seed N] [--time SECONDS | --rounds N]
                                [--host SOCKDIR] [--port P] [--user U] [--db DB]

Connection defaults come from PH_PGHOST, PH_PGPORT, PH_USER, PH_PGBIN, PH_DB
(tests/hasis.sh sets them).  Exit status 0 = all results equal.
"""

import argparse
import collections
import csv
import io
import os
import pwd
import random
import re
import subprocess
import sys
import time

from pgbatch import NULL, PG, PsqlError

# ------------------------------------------------------------ data model --

COLS = ["k", "a", "t", "f", "z"]
# a + n without integer overflow (a takes the int4 extremes too)
A_INC = "CASE WHEN a BETWEEN -1000000 AND 1000000 THEN a + %d ELSE a / 2 END"
INT4_MIN, INT4_MAX = -2147483648, 2147483647


class Mismatch(Exception):
    pass


def q(s):
    return "'" + s.replace("'", "''") + "'"


class Gen:
    """Random column values: duplicate-heavy, with NULLs and edge cases."""

    def __init__(self, r):
        self.r = r
        alpha = "abcxyzABC 019_-.äß日"
        words = set()
        while len(words) < 120:
            n = r.choice([0, 1, 2, 3, 3, 4, 5, 8, 12, 30])
            words.add("".join(r.choice(alpha) for _ in range(n)))
        words |= {"", " ", "a", "A", "quote'q", 'dq"x', "comma,x", "\\bs", "tab\there",
                  "line\nbreak", "x" * 1500, "y" * 5000}
        self.words = sorted(words)
        # long incompressible values: stored out of line (TOAST)
        self.long = ["L%d:" % i + "".join(r.choice("0123456789abcdef") for _ in range(2600 + 700 * i))
                     for i in range(4)]
        self.floats = ([float(r.randint(-20, 20)) for _ in range(30)] +
                       [r.uniform(-1e6, 1e6) for _ in range(60)] +
                       [0.0, -0.0, 1e-300, 1e300, 0.1, float("inf"), float("-inf"), float("nan")])

    def a(self):
        x = self.r.random()
        if x < 0.1:
            return None
        if x < 0.97:
            return self.r.randint(-60, 60)
        return self.r.choice([INT4_MIN, INT4_MAX, 0])

    def t(self, null_p=0.08):
        x = self.r.random()
        if x < null_p:
            return None
        if x < 0.04 + null_p:
            return self.r.choice(self.long)
        return self.r.choice(self.words)

    def f(self):
        if self.r.random() < 0.1:
            return None
        v = self.r.choice(self.floats)
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)

    def z(self):
        if self.r.random() < 0.7:
            return None
        return self.r.randint(-10**12, 10**12)

    @staticmethod
    def lit(col, v):
        if v is None:
            return "NULL"
        if col == "t":
            return q(v)
        if col == "f":
            return "%s::float8" % q(v)
        return str(v)

    @staticmethod
    def copy_field(v):
        if v is None:
            return NULL
        return '"' + str(v).replace('"', '""') + '"'


# -------------------------------------------------------------- the test --


class Differential:
    SEQ = "SET enable_indexscan=off; SET enable_bitmapscan=off; SET enable_indexonlyscan=off;"
    MODES = {
        "index": "SET enable_seqscan=off; SET enable_bitmapscan=off; SET enable_indexonlyscan=off;",
        "bitmap": "SET enable_seqscan=off; SET enable_indexscan=off; SET enable_indexonlyscan=off;",
        "ios": "SET enable_seqscan=off; SET enable_bitmapscan=off;",
        "tid": "SET enable_seqscan=off;",
        "parallel": "SET enable_indexscan=off; SET enable_bitmapscan=off; SET enable_indexonlyscan=off; "
                    "SET parallel_setup_cost=0; SET parallel_tuple_cost=0; "
                    "SET min_parallel_table_scan_size=0; SET max_parallel_workers_per_gather=2; "
                    # CPU costs dominate, so a parallel scan wins even when stale
                    # statistics say the table holds a handful of rows
                    "SET seq_page_cost=0.01; SET cpu_tuple_cost=0.1;",
    }
    # what the hasis side's plan must show per mode
    PLAN_RE = {
        "index": r"Index Scan (Backward )?using h_\w+ on h",
        "bitmap": r"Bitmap Index Scan on h_\w+",
        "ios": r"Index (Only )?Scan (Backward )?using h_\w+ on h",
        "tid": r"Tid Scan on h\b",
        "parallel": r"Parallel Seq Scan on h\b",
    }

    def __init__(self, args):
        self.a = args
        self.r = random.Random(args.seed)
        self.gen = Gen(random.Random(args.seed * 7919 + 1))
        self.pg = PG(args, "hasis_differential.py")
        self.next_key = 1
        self.round = 0
        self.rows_now = 0
        self.stats = collections.Counter()
        self.cur_batch = []      # (tag, sql) of the batch being run, for the report

    # ---- helpers
    def exec(self, stmts, tag="x"):
        items = [("%s%d" % (tag, i), s) for i, s in enumerate(stmts)]
        try:
            return self.pg.batch(items)
        except PsqlError as e:
            failing = dict(items).get(e.last_tag, "?")
            raise Mismatch("statement failed: %s\n  statement: %s" % (e, failing[:2000]))

    def new_row(self):
        k = self.next_key
        self.next_key += 1
        g = self.gen
        return [k, g.a(), g.t(), g.f(), g.z()]

    def values_sql(self, rows):
        return ", ".join("(%s)" % ", ".join(Gen.lit(c, v) for c, v in zip(COLS, row)) for row in rows)

    def rand_key(self):
        return self.r.randint(1, max(1, self.next_key - 1))

    # ---- setup
    def setup(self):
        ddl = ["DROP TABLE IF EXISTS h", "DROP TABLE IF EXISTS x"]
        cols = "k int NOT NULL, a int, t text, f float8, z int8"
        ddl.append("CREATE TABLE h (%s) USING hasis WITH (autovacuum_enabled = off)" % cols)
        ddl.append("CREATE TABLE x (%s) USING heap WITH (autovacuum_enabled = off)" % cols)
        ddl.append("CREATE UNIQUE INDEX h_k ON h USING btree (k)")
        ddl.append("CREATE UNIQUE INDEX x_k ON x USING btree (k)")
        ddl.append("CREATE INDEX h_t ON h USING hash (t)")
        ddl.append("""CREATE OR REPLACE FUNCTION ph_try(q text) RETURNS text LANGUAGE plpgsql AS $f$
                      BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN others THEN RETURN SQLSTATE; END $f$""")
        self.exec(ddl, "setup")
        self.copy_rows(self.a.rows)
        # the hybrid_btree index is built over existing rows (table scan of hasis)
        self.exec(["CREATE INDEX h_a ON h USING hybrid_btree (a)", "ANALYZE h", "ANALYZE x"], "setup")
        self.check_tables("after load")
        have = self.exec(["SELECT to_regproc('pg_hybrid.verify_table') IS NOT NULL, "
                          "to_regproc('pg_hybrid.table_stats') IS NOT NULL"], "have")["have0"][0]
        self.have_verify, self.have_stats = have[0] == "t", have[1] == "t"
        print("hasis_differential: seed=%d rows=%d" % (self.a.seed, self.rows_now), flush=True)

    def copy_rows(self, n, in_txn_items=None):
        rows = [self.new_row() for _ in range(n)]
        data = "\n".join(",".join(Gen.copy_field(v) for v in row) for row in rows) + "\n\\.\n"
        stmts = ["COPY %s FROM STDIN (FORMAT csv, NULL '%s');\n%s" % (t, NULL, data) for t in ("h", "x")]
        if in_txn_items is not None:
            return stmts
        for s in stmts:
            self.pg.run(s)
        return None

    # ---- comparing whole tables
    def fingerprint_sql(self, t, settings=""):
        return ("%s SELECT count(*), md5(coalesce(string_agg(r::text, E'\\n' ORDER BY r.k), '')) FROM %s r; "
                "RESET ALL" % (settings, t))

    def check_tables(self, when):
        res = self.exec([self.fingerprint_sql("h", self.SEQ), self.fingerprint_sql("x", self.SEQ)], "chk")
        fa, fb = res["chk0"], res["chk1"]
        if fa != fb:
            raise Mismatch("table contents differ %s: hasis %s, heap %s%s"
                           % (when, fa, fb, self.describe_diff()))
        self.rows_now = int(fa[0][0])

    def describe_diff(self, settings=None):
        """Fetch both tables (seq scans) and list the rows only in one of them."""
        try:
            s = settings or self.SEQ
            res = self.pg.batch([("h", "%s SELECT * FROM h; RESET ALL" % s),
                                 ("x", "%s SELECT * FROM x; RESET ALL" % self.SEQ)])
        except PsqlError as e:
            return "\n  (could not fetch the rows: %s)" % e
        ca = collections.Counter(map(tuple, res["h"]))
        cb = collections.Counter(map(tuple, res["x"]))
        only_h = sorted((ca - cb).elements())[:10]
        only_x = sorted((cb - ca).elements())[:10]
        short = lambda rows: [tuple(v if len(v) < 60 else v[:40] + "...(%d chars)" % len(v) for v in r)
                              for r in rows]
        return ("\n  rows now: hasis %d, heap %d\n  only in hasis (first 10): %s\n"
                "  only in heap  (first 10): %s" % (len(res["h"]), len(res["x"]),
                                                   short(only_h), short(only_x)))

    # ---- random queries
    def pred_k(self):
        r = self.r
        k = self.rand_key()
        kind = r.choice(["eq", "in", "between", "lt", "gt", "any"])
        if kind == "eq":
            return "k = %d" % k
        if kind == "in":
            return "k IN (%s)" % ", ".join(str(self.rand_key()) for _ in range(r.randint(1, 12)))
        if kind == "any":
            return "k = ANY ('{%s}'::int[])" % ",".join(str(self.rand_key()) for _ in range(r.randint(0, 12)))
        if kind == "between":
            return "k BETWEEN %d AND %d" % (k, k + r.randint(0, 300))
        if kind == "lt":
            return "k < %d" % r.randint(-5, 400)
        return "k > %d" % (self.next_key - r.randint(0, 400))

    def pred_a(self):
        r = self.r
        v = self.gen.a()
        kind = r.choice(["eq", "eq", "range", "in", "null", "notnull_range"])
        if kind == "eq" and v is not None:
            return "a = %d" % v
        if kind == "in":
            return "a IN (%s)" % ", ".join(str(r.randint(-60, 60)) for _ in range(r.randint(1, 5)))
        if kind == "null":
            return "a IS NULL"
        if kind == "notnull_range":
            return "a IS NOT NULL AND a < %d" % r.randint(-60, -40)
        lo = r.randint(-65, 60)
        return "a BETWEEN %d AND %d" % (lo, lo + r.randint(0, 8))

    def pred_t(self, allow_in):
        r = self.r
        if allow_in and r.random() < 0.4:
            vals = [self.gen.t(0.0) for _ in range(r.randint(1, 6))]
            return "t IN (%s)" % ", ".join(q(v) for v in vals)
        return "t = %s" % q(self.gen.t(0.0))

    def gen_query(self):
        r = self.r
        mode = r.choices(["index", "bitmap", "ios", "tid", "parallel"], [35, 30, 10, 10, 6])[0]
        cols = "*"
        order = None
        col = r.choice(["k", "k", "a", "t"])
        if mode == "ios":
            col = r.choice(["k", "a"])
        if mode == "parallel" and self.rows_now < 300:
            mode = "bitmap"    # no parallel plan for a (nearly) empty table
        if col == "k":
            where = self.pred_k()
        elif col == "a":
            where = self.pred_a()
        else:
            where = self.pred_t(allow_in=mode in ("bitmap", "tid", "parallel"))
        if mode == "ios":
            cols = col
        if mode == "bitmap" and r.random() < 0.3:
            # BitmapAnd / BitmapOr over two indexes
            other = self.pred_k() if col != "k" else self.pred_a()
            where = "(%s) %s (%s)" % (where, r.choice(["AND", "OR"]), other)
        if mode == "index" and col in ("k", "a") and r.random() < 0.4:
            desc = r.random() < 0.5
            order = "%s%s, k" % (col, " DESC" if desc else "") if col == "a" else "k%s" % (" DESC" if desc else "")
            limit = r.choice([1, 3, 10, 100, None])
        # @ stands for the table (h or x)
        if mode == "tid":
            # hasis: rows by their ctids (Tid Scan); heap: the same rows by the predicate
            sql_h = "SELECT * FROM h WHERE ctid = ANY (ARRAY(SELECT ctid FROM h WHERE %s))" % where
            sql_x = "SELECT * FROM x WHERE %s" % where
        else:
            if mode == "parallel":
                tmpl = ("SELECT count(*), sum(k), sum(a), count(t), md5(coalesce(string_agg(r::text, E'\\n' "
                        "ORDER BY k), '')) FROM @ r WHERE (%s) OR k %% 7 = 3" % where)
            else:
                tmpl = "SELECT %s FROM @ WHERE %s" % (cols, where)
            if order:
                tmpl += " ORDER BY %s" % order + (" LIMIT %d" % limit if limit else "")
            sql_h, sql_x = tmpl.replace("@", "h"), tmpl.replace("@", "x")
        return dict(mode=mode, h=sql_h, x=sql_x, ordered=bool(order))

    def run_queries(self, n, label):
        qs = [self.gen_query() for _ in range(n)]
        items = []
        for i, qq in enumerate(qs):
            s = self.MODES[qq["mode"]]
            items.append(("e%d" % i, "%s EXPLAIN (COSTS OFF) %s; RESET ALL" % (s, qq["h"])))
            h = qq["h"]
            if self.a.inject_fault and i % 5 == 2 and qq["mode"] != "tid":   # self-test: the hasis side loses rows
                h = h.replace(" FROM h WHERE", " FROM (SELECT * FROM h WHERE k % 13 <> 5) h WHERE", 1)
            items.append(("h%d" % i, "%s %s; RESET ALL" % (s, h)))
            items.append(("x%d" % i, "%s %s; RESET ALL" % (self.SEQ, qq["x"])))
        try:
            res = self.pg.batch(items)
        except PsqlError as e:
            i = int(e.last_tag[1:]) if e.last_tag and e.last_tag[1:].isdigit() else None
            qq = qs[i] if i is not None else None
            side = {"h": "hasis", "x": "heap", "e": "EXPLAIN"}.get((e.last_tag or "?")[0], "?")
            self.fail_query(qq, "query failed (%s side): %s" % (side, e), "")
        for i, qq in enumerate(qs):
            plan = "\n".join(row[0] for row in res["e%d" % i])
            self.stats["queries"] += 1
            self.stats["mode_" + qq["mode"]] += 1
            if not re.search(self.PLAN_RE[qq["mode"]], plan):
                self.fail_query(qq, "the plan does not show the %s scan the query is meant to test"
                                % qq["mode"], plan)
            if "Index Only Scan" in plan:
                self.stats["plans_ios"] += 1
            a, b = res["h%d" % i], res["x%d" % i]
            if not qq["ordered"]:
                a, b = sorted(map(tuple, a)), sorted(map(tuple, b))
            else:
                a, b = list(map(tuple, a)), list(map(tuple, b))
            if a != b:
                ca, cb = collections.Counter(a), collections.Counter(b)
                self.fail_query(qq, "results differ %s: hasis %d rows, heap %d rows\n"
                                "    only in hasis: %s\n    only in heap:  %s%s"
                                % (label, len(a), len(b), list((ca - cb).elements())[:8],
                                   list((cb - ca).elements())[:8],
                                   "\n    (same rows, different order)" if ca == cb else ""), plan)

    def fail_query(self, qq, what, plan):
        extra = ""
        if qq is not None:
            s = self.MODES[qq["mode"]]
            extra = ("\n-- the failing query (hasis side, mode %s), then the heap side:\n%s\n"
                     "EXPLAIN (COSTS OFF) %s;\n%s;\nRESET ALL;\n%s\n%s;\nRESET ALL;\n"
                     % (qq["mode"], s, qq["h"], qq["h"], self.SEQ, qq["x"]))
        repro = self.write_repro(extra)
        raise Mismatch("%s\n  query (hasis, mode %s): %s\n  query (heap): %s\n  plan:\n%s\n  repro: %s"
                       % (what, qq["mode"] if qq else "?", qq["h"] if qq else "?",
                          qq["x"] if qq else "?",
                          "\n".join("    " + l for l in plan.splitlines()), repro))

    def write_repro(self, tail=""):
        path = os.path.join(self.a.outdir, "hasis_differential_repro.sql")
        try:
            with open(path, "w") as f:
                f.write("-- hasis_differential.py --seed %d: every statement up to round %d\n"
                        "-- (psql -X -v ON_ERROR_STOP=1 -f this file, in an empty database with pg_hybrid;\n"
                        "-- @@PHQ tags are \\echo markers)\n\\set ON_ERROR_STOP 1\n"
                        % (self.a.seed, self.round))
                for s in self.pg.log:
                    f.write(s)
                    f.write("\n")
                f.write(tail)
        except OSError as e:
            return "(could not write %s: %s)" % (path, e)
        return path

    # ---- DML
    def stmt_pair(self, items, tag, sql, settings=True, compare_output=False):
        """Append sql (with @ for the table) for h, then for x."""
        s = ""
        if settings:
            s = self.r.choice(["", "", "SET enable_seqscan=off; SET enable_bitmapscan=off;",
                               "SET enable_seqscan=off; SET enable_indexscan=off;",
                               "SET enable_indexscan=off; SET enable_bitmapscan=off;"])
        items.append(("%sH" % tag, "%s %s; RESET ALL" % (s, sql.replace("@", "h"))))
        items.append(("%sX" % tag, sql.replace("@", "x")))
        if compare_output:
            self.compare_tags.append(("%sH" % tag, "%sX" % tag, sql))

    def gen_where(self):
        r = self.r
        k = self.rand_key()
        return r.choice([
            "k = %d" % k,
            "k BETWEEN %d AND %d" % (k, k + r.randint(0, 60)),
            "k IN (%s)" % ", ".join(str(self.rand_key()) for _ in range(r.randint(1, 20))),
            "a = %d" % r.randint(-60, 60),
            "a IS NULL AND k %% 5 = %d" % r.randint(0, 4),
            "t = %s" % q(self.gen.t(0.0)),
            "k %% 97 = %d" % r.randint(0, 96),
        ])

    def gen_statement(self, items, tag):
        r = self.r
        grow = self.rows_now < self.a.rows * 0.6
        if self.rows_now < self.a.rows * 0.3 and r.random() < 0.5:
            # refill after a TRUNCATE
            k0 = self.next_key
            n = self.a.rows // 2
            self.next_key += n
            self.stmt_pair(items, tag, "INSERT INTO @ SELECT g, g %% 121 - 60, 'r' || (g %% 53), -g / 3.0, "
                           "NULLIF(g %% 4, 0) FROM generate_series(%d, %d) g" % (k0, k0 + n - 1), settings=False)
            self.rows_now += n
            return
        shrink = self.rows_now > self.a.rows * 1.6
        w = {"insert": 18, "insert_select": 5, "copy": 3, "update": 22, "update_key": 10,
             "update_self": 6, "delete": 14, "returning": 6, "lock": 5, "probe": 4}
        if grow:
            w["insert"] += 30
            w["insert_select"] += 10
        if shrink:
            w["delete"] += 40
        op = r.choices(list(w), list(w.values()))[0]
        self.stats["op_" + op] += 1
        if op == "insert":
            rows = [self.new_row() for _ in range(r.randint(1, self.a.batch))]
            self.stmt_pair(items, tag, "INSERT INTO @ VALUES %s" % self.values_sql(rows), settings=False)
        elif op == "insert_select":
            n = r.randint(1, 3 * self.a.batch)
            k0 = self.next_key
            self.next_key += n
            self.stmt_pair(items, tag,
                           "INSERT INTO @ SELECT g, CASE WHEN g %% 11 = 0 THEN NULL ELSE g %% 101 - 50 END, "
                           "'s' || (g %% 37), g / 7.0, NULLIF(g %% 3, 0) * g FROM generate_series(%d, %d) g"
                           % (k0, k0 + n - 1), settings=False)
        elif op == "copy":
            h, x = self.copy_rows(r.randint(1, 3 * self.a.batch), in_txn_items=True)
            items.append(("%sH" % tag, h))
            items.append(("%sX" % tag, x))
        elif op == "update":
            sets = []
            for c in r.sample(["a", "t", "f", "z"], r.randint(1, 3)):
                if c == "a":
                    sets.append(r.choice(["a = %s" % Gen.lit("a", self.gen.a()), "a = " + A_INC % 1, "a = -(a / 2)"]))
                elif c == "t":
                    sets.append(r.choice(["t = %s" % Gen.lit("t", self.gen.t()), "t = t || 'u'"]))
                elif c == "f":
                    sets.append(r.choice(["f = %s" % Gen.lit("f", self.gen.f()), "f = f + 1"]))
                else:
                    sets.append("z = %s" % Gen.lit("z", self.gen.z()))
            self.stmt_pair(items, tag, "UPDATE @ SET %s WHERE %s" % (", ".join(sets), self.gen_where()))
        elif op == "update_key":
            # move a key range to fresh keys (above every key handed out so far)
            lo = self.rand_key()
            hi = lo + r.randint(0, 40)
            d = self.next_key - lo
            self.next_key += hi - lo + 1
            extra = r.choice(["", ", a = " + A_INC % 1, ", t = 'moved'"])
            self.stmt_pair(items, tag, "UPDATE @ SET k = k + %d%s WHERE k BETWEEN %d AND %d" % (d, extra, lo, hi))
        elif op == "update_self":
            # the same rows several times in one statement sequence
            wh = self.gen_where()
            for j in range(r.randint(2, 4)):
                self.stmt_pair(items, "%s_%d" % (tag, j), "UPDATE @ SET z = coalesce(z, 0) + %d, a = %s WHERE %s"
                               % (j + 1, A_INC % 1, wh))
        elif op == "delete":
            self.stmt_pair(items, tag, "DELETE FROM @ WHERE %s" % self.gen_where())
        elif op == "returning":
            kind = r.choice(["update", "delete"])
            if kind == "update":
                sql = ("WITH u AS (UPDATE @ SET f = -f, a = %s WHERE %s RETURNING *) "
                       "SELECT * FROM u ORDER BY k" % (A_INC % -1, self.gen_where()))
            else:
                sql = "WITH d AS (DELETE FROM @ WHERE %s RETURNING *) SELECT * FROM d ORDER BY k" % self.gen_where()
            self.stmt_pair(items, tag, sql, compare_output=True)
        elif op == "lock":
            strength = r.choice(["UPDATE", "NO KEY UPDATE", "SHARE", "KEY SHARE"])
            wh = self.gen_where()
            self.stmt_pair(items, tag + "l", "SELECT * FROM @ WHERE %s ORDER BY k FOR %s" % (wh, strength),
                           compare_output=True)
            if r.random() < 0.7:
                self.stmt_pair(items, tag + "u", "UPDATE @ SET a = coalesce(%s, 0) WHERE %s" % (A_INC % -7, wh))
        else:  # probe: re-insert an existing key, caught in a subtransaction (ph_try)
            k = self.rand_key()
            sql = ("SELECT ph_try($q$INSERT INTO @ SELECT * FROM @ WHERE k = (SELECT min(k) FROM @ WHERE k >= %d)$q$)"
                   % k)
            self.stmt_pair(items, tag, sql, settings=False, compare_output=True)
            self.stats["unique_probes"] += 1

    def transaction(self, items, ti):
        """One random transaction (tags T<ti>...)."""
        r = self.r
        p = "T%d" % ti
        items.append((p + "b", "BEGIN"))
        nsp = 0
        open_sps = []
        for j in range(r.randint(1, 6)):
            x = r.random()
            if x < 0.15:
                nsp += 1
                open_sps.append("sp%d" % nsp)
                items.append(("%ss%d" % (p, j), "SAVEPOINT sp%d" % nsp))
            elif x < 0.27 and open_sps:
                sp = open_sps.pop(r.randrange(len(open_sps)))
                # everything after sp is gone too
                while open_sps and int(open_sps[-1][2:]) > int(sp[2:]):
                    open_sps.pop()
                if r.random() < 0.6:
                    items.append(("%sr%d" % (p, j), "ROLLBACK TO SAVEPOINT %s" % sp))
                    self.stats["rollback_to"] += 1
                    open_sps.append(sp)   # still defined after ROLLBACK TO
                else:
                    items.append(("%sr%d" % (p, j), "RELEASE SAVEPOINT %s" % sp))
            elif x < 0.30 and self.truncate_now:
                self.truncate_now = False
                self.stmt_pair(items, "%st%d" % (p, j), "TRUNCATE @", settings=False)
                self.stats["truncates"] += 1
            elif x < 0.38:
                # compare inside the transaction (own uncommitted changes)
                s = r.choice([self.SEQ, self.MODES["index"], self.MODES["bitmap"]])
                where = r.choice(["k > 0", "k >= %d" % self.rand_key(), "a IS NULL OR a > 0", "t IS NOT NULL"])
                if s == self.SEQ or "k" in where:
                    where_h = where
                else:
                    where_h = "k > 0"
                # a few columns: index and bitmap fetches then read only
                # those (and the quals'), src/hasis/colscan/fetch.rs
                cols = "k, " + ", ".join(r.sample(["a", "t", "f", "z"], r.randint(1, 4)))
                items.append(("%sc%dH" % (p, j), "%s SELECT %s FROM h WHERE %s ORDER BY k; RESET ALL" % (s, cols, where_h)))
                items.append(("%sc%dX" % (p, j), "%s SELECT %s FROM x WHERE %s ORDER BY k; RESET ALL"
                              % (self.SEQ, cols, where_h)))
                self.compare_tags.append(("%sc%dH" % (p, j), "%sc%dX" % (p, j), "in-transaction comparison"))
            else:
                self.gen_statement(items, "%sd%d" % (p, j))
        if r.random() < self.a.rollback_p:
            items.append((p + "e", "ROLLBACK"))
            self.stats["rollbacks"] += 1
        else:
            items.append((p + "e", "COMMIT"))
            self.stats["commits"] += 1

    def dml_batch(self):
        items = []
        self.compare_tags = []
        keep_next = self.next_key
        self.truncate_now = self.r.random() < 0.03
        for ti in range(self.r.randint(1, 4)):
            self.transaction(items, ti)
        self.cur_batch = items
        try:
            res = self.pg.batch(items)
        except PsqlError as e:
            tag = e.last_tag or "?"
            stmt = dict(items).get(tag, "?")
            side = "hasis" if tag.endswith("H") else ("heap" if tag.endswith("X") else "?")
            repro = self.write_repro()
            raise Mismatch("DML failed on the %s side: %s\n  statement: %s\n  repro: %s"
                           % (side, e, stmt[:3000], repro))
        for th, tx, what in self.compare_tags:
            a, b = res.get(th), res.get(tx)
            if a != b:
                repro = self.write_repro()
                raise Mismatch("outputs differ inside the transaction (%s):\n  hasis: %s\n  heap:  %s\n"
                               "  statement: %s\n  repro: %s"
                               % (what, str(a)[:1500], str(b)[:1500], dict(items).get(th, "?")[:2000], repro))
        self.stats["batches"] += 1
        assert self.next_key >= keep_next

    def maintenance(self):
        r = self.r
        stmts = []
        x = r.random()
        if x < 0.08:
            stmts += ["VACUUM h", "VACUUM x"]
            self.stats["vacuums"] += 1
        elif x < 0.12:
            stmts += ["ANALYZE h", "ANALYZE x"]
            self.stats["analyzes"] += 1
        elif x < 0.135:
            stmts += ["VACUUM FULL h", "VACUUM FULL x"]
            self.stats["vacuum_full"] += 1
        elif x < 0.145:
            stmts += ["CLUSTER h USING h_k", "CLUSTER x USING x_k"]
            self.stats["clusters"] += 1
        elif x < 0.17:
            stmts += ["VACUUM ANALYZE h", "VACUUM ANALYZE x"]
            self.stats["vacuums"] += 1
        if stmts:
            self.exec(stmts, "maint")
        if r.random() < 0.05:
            self.verify_table()

    def verify_table(self):
        """pg_hybrid.verify_table(h): every hybrid page, every index entry (if installed)."""
        if not self.have_verify:
            return
        try:
            self.pg.batch([("v", "SELECT pg_hybrid.verify_table('h'::regclass)")])
        except PsqlError as e:
            raise Mismatch("pg_hybrid.verify_table(h) failed: %s\n  repro: %s" % (e, self.write_repro()))
        self.stats["verify_table"] += 1

    def run(self):
        a = self.a
        t0 = time.time()
        self.setup()
        deadline = t0 + a.time
        while True:
            self.round += 1
            self.dml_batch()
            self.maintenance()
            self.check_tables("after round %d" % self.round)
            self.run_queries(a.queries, "after round %d" % self.round)
            if a.rounds and self.round >= a.rounds:
                break
            if not a.rounds and time.time() >= deadline:
                break
            if self.round % 25 == 0:
                print("  round %d: %d queries, %d rows, %.0fs" % (self.round, self.stats["queries"],
                                                                  self.rows_now, time.time() - t0), flush=True)
        self.exec(["VACUUM ANALYZE h", "VACUUM ANALYZE x"], "end")
        self.check_tables("at the end")
        self.run_queries(a.queries * 2, "at the end")
        self.verify_table()
        hs = ""
        if self.have_stats:
            row = self.exec(["SELECT extents, page_versions - extents, column_rows, delta_versions "
                             "FROM pg_hybrid.table_stats('h'::regclass)"], "stats")["stats0"][0]
            hs = ("  h now: %s extents, %s compactions since its last rewrite, %s rows in column parts, "
                  "%s versions in delta parts" % tuple(row))
        s = self.stats
        print("hasis_differential: PASS  seed=%d rounds=%d batches=%d commits=%d rollbacks=%d rollback_to=%d "
              "truncates=%d vacuums=%d analyzes=%d vacuum_full=%d clusters=%d unique_probes=%d rows=%d  %.0fs"
              % (a.seed, self.round, s["batches"], s["commits"], s["rollbacks"], s["rollback_to"],
                 s["truncates"], s["vacuums"], s["analyzes"], s["vacuum_full"], s["clusters"],
                 s["unique_probes"], self.rows_now, time.time() - t0))
        print("  queries %d: index %d, bitmap %d, index-only mode %d (Index Only Scan plans %d), "
              "tid %d, parallel %d"
              % (s["queries"], s["mode_index"], s["mode_bitmap"], s["mode_ios"], s["plans_ios"],
                 s["mode_tid"], s["mode_parallel"]))
        print("  statements: " + ", ".join("%s %d" % (k[3:], v) for k, v in sorted(s.items())
                                           if k.startswith("op_")))
        print("  verify_table: %s%s" % ("%d calls" % s["verify_table"] if self.have_verify else
                                        "not in the installed build", "\n" + hs if hs else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    ap.add_argument("--time", type=float, default=60, help="seconds of random rounds (default 60)")
    ap.add_argument("--rounds", type=int, default=0, help="exact number of rounds (overrides --time)")
    ap.add_argument("--rows", type=int, default=3000, help="initial rows, also the size the DML keeps "
                                                           "the tables around (default 3000)")
    ap.add_argument("--queries", type=int, default=25, help="queries per round (default 25)")
    ap.add_argument("--batch", type=int, default=40, help="max rows per INSERT ... VALUES (default 40)")
    ap.add_argument("--rollback-p", type=float, default=0.2,
                    help="probability that a transaction ends with ROLLBACK (default 0.2)")
    ap.add_argument("--host", default=os.environ.get("PH_PGHOST"))
    ap.add_argument("--port", default=os.environ.get("PH_PGPORT"))
    ap.add_argument("--user", default=os.environ.get("PH_USER", "pghybrid"), help="database user")
    ap.add_argument("--os-user", default=os.environ.get("PH_USER", "pghybrid"),
                    help="OS user to run psql as (runuser), default PH_USER")
    ap.add_argument("--db", default=os.environ.get("PH_DB", "ph_hasis_differential"))
    ap.add_argument("--pgbin", default=os.environ.get("PH_PGBIN", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--outdir", default=os.environ.get("PH_OUTDIR", "/tmp"),
                    help="where the repro script is written on a mismatch")
    ap.add_argument("--inject-fault", action="store_true",
                    help="self-test of the harness: the hasis side of some queries loses rows; must FAIL")
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randint(1, 10**6)
    if not a.host or not a.port:
        ap.error("--host (socket directory) and --port are required (or PH_PGHOST / PH_PGPORT)")
    print("hasis_differential: seed %d (rerun: tests/hasis_differential.py --seed %d)" % (a.seed, a.seed),
          flush=True)
    d = Differential(a)
    try:
        d.run()
    except Mismatch as e:
        print("hasis_differential: FAIL (seed %d, round %d; rerun: tests/hasis_differential.py --seed %d "
              "--rounds %d)\n  %s" % (a.seed, d.round, a.seed, d.round, e), flush=True)
        sys.exit(1)
    except PsqlError as e:
        print("hasis_differential: FAIL (seed %d, round %d): psql error\n  %s" % (a.seed, d.round, e),
              flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
