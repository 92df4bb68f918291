#!/usr/bin/env python3
"""tests/differential.py — differential test of an index AM against btree.

Two identical tables, t_am (indexed by the AM under test) and t_bt (indexed by
btree, the oracle copy), receive the same random data and the same random DML.
Random queries run on both: on t_am with sequential scans disabled (plain index
scans, bitmap scans or index-only scans forced through enable_* settings), on
t_bt with index and bitmap scans disabled (a seqscan: the truth).  Results are
compared row for row (order-sensitive for ORDER BY, tie-aware at a LIMIT); the
EXPLAIN of every AM-side query must show one of the AM's indexes.  Between
query batches: inserts (plain, ON CONFLICT DO NOTHING / DO UPDATE), deletes,
updates, unique-violation probes, pg_hybrid.merge(), VACUUM, seqscans that
prune dead tuples without VACUUM, and pg_hybrid.verify(...).  The first mismatch stops the run and is printed with a
repro script.

With --am elastic_btree the text columns use COLLATE "C" (the AM refuses
non-C collations) and the numeric column is not indexed (no memcmp-able
encoding).  --size-bound chooses the indexes' size_bound: "none", one value
for all (e.g. 96kB), or "mixed" (the default for elastic_btree): each index
gets a random bound between 32kB and 1MB or none, small enough that growth
crosses it, and between rounds ALTER INDEX ... SET/RESET (size_bound) moves
bounds up and down so leaves convert both ways (to compact and back) while
the queries keep checking.  The run fails if no index ever held a compact
leaf (then the bound mode did not do its job).

With --am tiered_btree or tiered_hash the indexes get tiny hot tiers and
rounds add bursts of skewed point reads, so promotions and CLOCK sweeps run
all the time; the run fails if nothing was promoted and evicted.
tiered_hash, which offers `=` alone, gets equality queries only: on every
key column (the bucket probe), on leading key columns of a multi-column
index, and IN / = ANY lists through bitmap scans.

Connects with psql (CSV output) run as the cluster's OS user (runuser when we
are root).  Python 3 stdlib only.

    tests/differential.py [--seed N] [--time SECONDS | --rounds N] [--am AM]
                          [--size-bound none|mixed|SIZE]
                          [--host SOCKDIR] [--port P] [--user U] [--db DB]

Connection defaults come from PH_PGHOST, PH_PGPORT, PH_USER, PH_PGBIN, PH_AM
(scripts/test.sh sets them).  Exit status 0 = all results equal.
"""

import argparse
import collections
import csv
import decimal
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

INT4_MIN, INT4_MAX = -2147483648, 2147483647
INT8_MIN, INT8_MAX = -9223372036854775808, 9223372036854775807


class Gen:
    """Random values per column type, duplicate-heavy, with edge cases."""

    def __init__(self, rng):
        self.r = rng
        r = rng
        self.int8_pool = ([r.randint(-1000, 1000) for _ in range(600)] +
                          [r.randint(INT8_MIN, INT8_MAX) for _ in range(600)] +
                          [INT8_MIN, INT8_MAX, 0, -1, 1, 2**31, -2**31, 2**32])
        alpha = "abcdeABCDE xyz019_-.äöüßé日本"
        words = set()
        while len(words) < 250:
            n = r.choice([0, 1, 1, 2, 3, 3, 4, 5, 6, 8, 12, 20])
            words.add("".join(r.choice(alpha) for _ in range(n)))
        words |= {"", " ", "a", "A", "aa", "ab", "abc", "abc ", "abc\t", "abcd", "Abc",
                  "b", "zzz", "a\nb", "quote'q", 'dq"x', "comma,x", "\\backslash",
                  "x" * 300, "y" * 900 + "z", "résumé", "resume", "Resume", "RESUME"}
        self.words = sorted(words)
        self.short = ["a", "A", "b", "B", "ä", "Ä", "ae", "résumé", "resume", "Resume",
                      "z", "Z", "1", "10", "9", "", "-", "a-b", "ab", "a b", "ß", "ss"]
        self.floats = ([float(r.randint(-50, 50)) for _ in range(60)] +
                       [r.uniform(-1e6, 1e6) for _ in range(200)] +
                       [0.0, -0.0, 1e-300, -1e-300, 1e300, -1e300, 0.1, 0.30000000000000004,
                        float("inf"), float("-inf"), float("nan")])
        self.numerics = ([str(r.randint(-100, 100)) for _ in range(60)] +
                         ["%d.%02d" % (r.randint(-999, 999), r.randint(0, 99)) for _ in range(150)] +
                         ["0", "0.000", "1", "1.0", "1.00", "-0.5", "0.5", "1e-20", "-1e-20",
                          "123456789012345678901234567890.123456789", "-99999999999999999999",
                          "NaN", "Infinity", "-Infinity", "3.14159265358979323846264338327950288"])
        self.dates = (["%04d-%02d-%02d" % (r.randint(1995, 2035), r.randint(1, 12), r.randint(1, 28))
                       for _ in range(300)] +
                      ["infinity", "-infinity", "0044-03-15 BC", "1970-01-01", "2000-02-29",
                       "9999-12-31", "4713-01-01 BC"])

    def value(self, typ, null_p=0.08):
        r = self.r
        if typ != "id" and r.random() < null_p:
            return None
        if typ == "int4":
            x = r.random()
            if x < 0.9:
                return str(r.randint(-60, 60))
            if x < 0.97:
                return str(r.randint(INT4_MIN, INT4_MAX))
            return str(r.choice([INT4_MIN, INT4_MAX, 0]))
        if typ == "int8":
            return str(r.choice(self.int8_pool))
        if typ == "text":
            return r.choice(self.words)
        if typ == "varchar":
            return r.choice(self.short)
        if typ == "float8":
            f = r.choice(self.floats)
            if f != f:
                return "NaN"
            if f in (float("inf"), float("-inf")):
                return "Infinity" if f > 0 else "-Infinity"
            return repr(f)
        if typ == "numeric":
            return r.choice(self.numerics)
        if typ == "date":
            return r.choice(self.dates)
        if typ == "bool":
            return r.choice(["t", "f"])
        raise ValueError(typ)


COLS = [("id", "int8"), ("a", "int4"), ("b", "int8"), ("c", "text"), ("d", "float8"),
        ("e", "numeric"), ("f", "date"), ("g", "bool"), ("h", "varchar")]
COLTYPE = dict(COLS)
SQLTYPE = {"int4": "int4", "int8": "int8", "text": "text", "varchar": "varchar",
           "float8": "float8", "numeric": "numeric", "date": "date", "bool": "bool"}

# (name, [(col, desc)], unique, created_before_load)
INDEXES = [
    ("ux_id", [("id", False)], True, True),
    ("i_a", [("a", False)], False, True),
    ("i_bc", [("b", False), ("c", False)], False, False),
    ("i_c", [("c", False)], False, True),
    ("i_da", [("d", False), ("a", False)], False, False),
    ("i_e", [("e", False)], False, False),
    ("i_fga", [("f", False), ("g", False), ("a", False)], False, True),
    ("i_h", [("h", False)], False, False),
    ("i_bdesc", [("b", True), ("id", False)], False, False),
]


def lit(typ, v):
    if v is None:
        return "NULL"
    if typ == "id":
        typ = "int8"
    return "'%s'::%s" % (v.replace("'", "''"), SQLTYPE[typ])


def csv_field(v):
    if v is None:
        return NULL
    return '"' + v.replace('"', '""') + '"'


def norm_key(typ, s):
    """Normalise an output value so that equal keys compare equal."""
    if s == NULL:
        return (1, "")  # NULL sorts/compares as its own value
    if typ == "numeric":
        if s in ("NaN", "Infinity", "-Infinity"):
            return (0, s)
        return (0, str(decimal.Decimal(s).normalize()))
    if typ == "float8":
        if s == "-0":
            s = "0"
        return (0, s)
    return (0, s)


# -------------------------------------------------------------- the test --


class Mismatch(Exception):
    pass


class Differential:
    def __init__(self, args):
        self.a = args
        self.r = random.Random(args.seed)
        self.gen = Gen(random.Random(args.seed * 7919 + 1))
        self.pg = PG(args, "differential.py")
        self.next_id = 1
        self.stats = collections.Counter()
        self.am_indexes = []  # names of AM indexes
        self.collate = ""
        self.round = 0
        self.elastic = args.am == "elastic_btree"
        self.tiered = args.am in ("tiered_btree", "tiered_hash")
        # tiered_hash offers `=` alone, like PostgreSQL's hash index: no
        # ranges, no ORDER BY, no IS NULL, no = ANY in plain index scans.
        self.equality_only = args.am == "tiered_hash"
        self.compact_seen = {}   # index -> max compact_leaves seen
        self.states_seen = collections.Counter()
        self.bound_changes = 0

    # ---- setup
    def setup(self):
        a = self.a
        have_icu = self.pg.rows("SELECT count(*) FROM pg_collation WHERE collname = 'en-x-icu'")[0][0]
        self.collate = ' COLLATE "en-x-icu"' if have_icu != "0" else ""
        if self.elastic:
            # elastic_btree needs memcmp-able keys: text only under COLLATE "C"
            self.collate = ' COLLATE "C"'
        cols = ", ".join(
            "%s %s%s%s" % (c, "int8" if t == "id" else ("varchar(16)" if t == "varchar" else SQLTYPE.get(t, t)),
                           " NOT NULL" if c == "id" else "",
                           self.collate if c == "h" or (self.elastic and c == "c") else "")
            for c, t in COLS)
        ddl = []
        for t in ("t_am", "t_bt"):
            ddl.append("DROP TABLE IF EXISTS %s" % t)
            ddl.append("CREATE TABLE %s (%s) WITH (autovacuum_enabled = %s)"
                       % (t, cols, "on" if a.autovacuum else "off"))
        ddl.append("""CREATE OR REPLACE FUNCTION ph_try(q text) RETURNS text LANGUAGE plpgsql AS $f$
                      BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN others THEN RETURN SQLSTATE; END $f$""")
        self.exec(ddl)
        self.create_indexes(before_load=True)
        self.load(a.rows)
        self.create_indexes(before_load=False)
        self.exec(["VACUUM ANALYZE t_am", "VACUUM ANALYZE t_bt"])
        self.check_tables("after load")
        # PostgreSQL 15 does speculative insertion only through btree: an AM may
        # refuse ON CONFLICT (feature_not_supported); then upserts are skipped.
        st = self.exec(["SELECT ph_try('INSERT INTO t_am SELECT * FROM t_am WHERE false "
                        "ON CONFLICT (id) DO NOTHING')"])["exec0"][0][0]
        self.upsert = st == "ok" and not a.no_upsert
        if st not in ("ok", "0A000"):
            raise Mismatch("probe of INSERT ... ON CONFLICT on t_am returned SQLSTATE %s" % st)
        if st == "0A000":
            print("  note: %s refuses INSERT ... ON CONFLICT (0A000); upserts skipped" % a.am)
        print("differential: am=%s seed=%d rows=%d indexes=%d collation=%s"
              % (a.am, a.seed, a.rows, len(self.am_indexes), self.collate.strip() or "default"),
              flush=True)

    BOUNDS = ["32kB", "48kB", "64kB", "96kB", "128kB", "192kB", "256kB", "512kB", "1MB"]

    def pick_bound(self, r):
        """A size_bound for an elastic index per --size-bound (None = no bound)."""
        mode = self.a.size_bound
        if mode == "none":
            return None
        if mode != "mixed":
            return mode
        return r.choice(self.BOUNDS + [None])

    def reloptions(self, name):
        if self.a.no_reloptions:
            return ""
        if self.elastic:
            r = random.Random("%d-%s" % (self.a.seed, name))
            opts = []
            b = self.pick_bound(r)
            if b:
                opts.append("size_bound = '%s'" % b)
            if r.random() < 0.3:
                opts.append("tree_level = %d" % r.choice([0, 1, 3, 6, 10]))
            if r.random() < 0.3:
                opts.append("slack = %d" % r.choice([1, 4, 64]))
            if r.random() < 0.3:
                sh = r.choice([50, 80, 90, 100])
                opts.append("shrink_threshold = %d, expand_threshold = %d" % (sh, r.randint(0, sh - 1)))
            if r.random() < 0.4:
                opts.append("merge_ratio = %d" % r.choice([2, 5, 10, 50]))
            return " WITH (%s)" % ", ".join(opts) if opts else ""
        if self.a.am == "griffin":
            r = random.Random("%d-%s" % (self.a.seed, name))
            opts = []
            if r.random() < 0.6:
                opts.append("sync_ratio = %d" % r.choice([2, 3, 5, 10, 50]))
            if r.random() < 0.4:
                opts.append("bucket_fill = %d" % r.choice([10, 30, 75, 100]))
            return " WITH (%s)" % ", ".join(opts) if opts else ""
        if self.tiered:
            # Tiny hot tiers, so sweeps and promotions run all the time.
            # The unique id index, which the point bursts read, always
            # gets the smallest hot tier and a high sampling rate.
            r = random.Random("%d-%s" % (self.a.seed, name))
            if name == "ux_id":
                return " WITH (hot_size = '64kB', sample_rate = %s)" % r.choice(["0.3", "1"])
            opts = ["hot_size = '%s'" % r.choice(["64kB", "96kB", "128kB", "256kB", "1MB"])]
            if r.random() < 0.6:
                opts.append("sample_rate = %s" % r.choice(["0.05", "0.3", "1"]))
            if self.equality_only and r.random() < 0.5:
                opts.append("bucket_fill = %d" % r.choice([10, 30, 75, 100]))
            return " WITH (%s)" % ", ".join(opts)
        if self.a.am != "hybrid_btree":
            return ""
        r = random.Random("%d-%s" % (self.a.seed, name))
        opts = []
        if r.random() < 0.6:
            opts.append("merge_ratio = %d" % r.choice([2, 3, 5, 10, 50]))
        if r.random() < 0.4:
            opts.append("compression = '%s'" % r.choice(["none", "lz4"]))
        return " WITH (%s)" % ", ".join(opts) if opts else ""

    def create_indexes(self, before_load):
        stmts = []
        for name, cols, uniq, early in INDEXES:
            if early != before_load:
                continue
            if name == "i_bdesc" and self.a.no_desc_index:
                continue
            if self.elastic and any(COLTYPE[c] == "numeric" for c, _ in cols):
                continue   # elastic_btree refuses numeric keys (no memcmp-able encoding)
            if self.equality_only:
                cols = [(c, False) for c, _ in cols]   # no ASC/DESC without order
            colsql = ", ".join(c + (" DESC NULLS LAST" if d else "") for c, d in cols)
            u = "UNIQUE " if uniq else ""
            stmts.append("CREATE %sINDEX am_%s ON t_am USING %s (%s)%s"
                         % (u, name, self.a.am, colsql, self.reloptions(name)))
            stmts.append("CREATE %sINDEX bt_%s ON t_bt USING btree (%s)" % (u, name, colsql))
            self.am_indexes.append("am_" + name)
        self.exec(stmts)

    def index_defs(self):
        return [(n, c, u) for n, c, u, _ in INDEXES if "am_" + n in self.am_indexes]

    def exec(self, stmts, tag="exec"):
        items = [("%s%d" % (tag, i), s) for i, s in enumerate(stmts)]
        try:
            return self.pg.batch(items)
        except PsqlError as e:
            failing = dict(items).get(e.last_tag, "?")
            raise Mismatch("statement failed: %s\n  statement: %s" % (e, failing[:2000]))

    def row_values(self):
        vals = []
        for c, t in COLS:
            if c == "id":
                vals.append(str(self.next_id))
                self.next_id += 1
            else:
                vals.append(self.gen.value(t))
        return vals

    def load(self, n):
        lines = []
        for _ in range(n):
            lines.append(",".join(csv_field(v) for v in self.row_values()))
        data = "\n".join(lines) + "\n\\.\n"
        for t in ("t_am", "t_bt"):
            self.pg.run("COPY %s FROM STDIN (FORMAT csv, NULL '%s');\n%s" % (t, NULL, data))

    # ---- consistency of the two tables (seqscan on both)
    def check_tables(self, when):
        seq = ("SET enable_indexscan=off; SET enable_bitmapscan=off; SET enable_indexonlyscan=off;\n")
        q = "SELECT count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY id), '')) FROM %s t"
        res = self.pg.batch([("am", seq + q % "t_am"), ("bt", seq + q % "t_bt")])
        if res["am"] != res["bt"]:
            raise Mismatch("table contents diverged %s: t_am %s, t_bt %s (a DML statement "
                           "using the AM's indexes touched different rows)" % (when, res["am"], res["bt"]))
        self.stats["rows_now"] = int(res["am"][0][0])

    # ---- query generation
    def pick_value(self, col):
        return self.gen.value(COLTYPE[col], null_p=0.0)

    def pred(self, col, kinds):
        t = COLTYPE[col]
        k = self.r.choice(kinds)
        L = lambda: lit(t, self.pick_value(col))
        if k == "eq":
            return "%s = %s" % (col, L())
        if k in ("<", "<=", ">", ">="):
            return "%s %s %s" % (col, k, L())
        if k == "between":
            x, y = self.pick_value(col), self.pick_value(col)
            return "%s BETWEEN %s AND %s" % (col, lit(t, x), lit(t, y))
        if k == "range2":
            return "%s %s %s AND %s %s %s" % (col, self.r.choice([">", ">="]), L(),
                                              col, self.r.choice(["<", "<="]), L())
        if k == "in":
            vals = [L() for _ in range(self.r.randint(1, 8))]
            if self.r.random() < 0.15:
                vals.append("NULL")
            return "%s IN (%s)" % (col, ", ".join(vals))
        if k == "any":
            vals = [L() for _ in range(self.r.randint(0, 8))]
            if self.r.random() < 0.15:
                vals.append("NULL")
            return "%s = ANY (ARRAY[%s]::%s[])" % (col, ", ".join(vals), SQLTYPE[t])
        if k == "isnull":
            return "%s IS NULL" % col
        if k == "notnull":
            return "%s IS NOT NULL" % col
        raise ValueError(k)

    def gen_query_equality(self):
        """tiered_hash: equality on every key column (the bucket probe), on
        leading key columns of a multi-column index (a walk of every
        bucket), or = ANY / IN lists (bitmap scans: the executor splits the
        array), with filters on other columns."""
        r = self.r
        name, icols, uniq = r.choice(self.index_defs())
        cols_of = [c for c, _ in icols]
        kind = r.choices(["point", "prefix", "list"], [60, 20 if len(cols_of) > 1 else 0, 20])[0]
        where = []
        if kind == "point":
            where += [self.pred(c, ["eq"]) for c in cols_of]
        elif kind == "prefix":
            where += [self.pred(c, ["eq"]) for c in cols_of[:r.randint(1, len(cols_of) - 1)]]
        else:
            where.append(self.pred(cols_of[0], ["in", "any"]))
            where += [self.pred(c, ["eq"]) for c in cols_of[1:] if r.random() < 0.7]
        if r.random() < 0.2:
            extra = r.choice([c for c, _ in COLS if c != "id"])
            where.append(self.pred(extra, ["<", ">=", "notnull", "isnull", "eq"]))
        mode = "bitmap" if kind == "list" else r.choice(["index", "bitmap", "ios"])
        cols = cols_of if mode == "ios" else [c for c, _ in COLS]
        sql = "SELECT %s FROM @T@ WHERE %s" % (", ".join(cols), " AND ".join(where))
        return dict(sql=sql, mode=mode, cols=cols, order=None, limit=None, kind=kind, index=name)

    def gen_query(self):
        """Returns dict(sql with @T@, mode, cols, order, limit)."""
        if self.equality_only:
            return self.gen_query_equality()
        r = self.r
        name, icols, uniq = r.choice(self.index_defs())
        lead = icols[0][0]
        kind = r.choices(["point", "range", "list", "null", "order", "multi", "rowcmp"],
                         [20, 20, 15, 8, 20, 15, 2])[0]
        where = []
        order = None
        limit = None
        if kind == "point":
            where.append(self.pred(lead, ["eq"]))
        elif kind == "range":
            where.append(self.pred(lead, ["<", "<=", ">", ">=", "between", "range2"]))
        elif kind == "list":
            where.append(self.pred(lead, ["in", "any"]))
        elif kind == "null":
            where.append(self.pred(lead, ["isnull", "notnull"]))
        elif kind == "multi":
            where.append(self.pred(lead, ["eq", "eq", "in", "isnull", "<=", ">"]))
            for c, _ in icols[1:]:
                if r.random() < 0.8:
                    where.append(self.pred(c, ["eq", "<", ">=", "between", "in", "any",
                                               "isnull", "notnull"]))
        elif kind == "rowcmp" and len(icols) >= 2:
            c1, c2 = icols[0][0], icols[1][0]
            where.append("(%s, %s) %s (%s, %s)" % (c1, c2, r.choice(["<", "<=", ">", ">="]),
                                                   lit(COLTYPE[c1], self.pick_value(c1)),
                                                   lit(COLTYPE[c2], self.pick_value(c2))))
            where.append(self.pred(c1, ["<", "<=", ">", ">=", "between"]))
        else:  # order (also rowcmp on single-column index)
            kind = "order"
            if r.random() < 0.6:
                where.append(self.pred(lead, ["<", "<=", ">", ">=", "between", "notnull", "eq", "in"]))
            npref = r.randint(1, len(icols))
            backward = r.random() < 0.5
            order = [(c, d != backward) for c, d in icols[:npref]]
            limit = r.choice([1, 2, 5, 10, 50, 200, None])
        if r.random() < 0.2 and kind != "order":
            extra = r.choice([c for c, _ in COLS if c != "id"])
            where.append(self.pred(extra, ["<", ">=", "notnull", "isnull", "eq"]))
        # scan mode
        modes = ["index", "bitmap", "ios"] if where else ["index", "ios"]
        if order:
            modes = ["index", "ios"]
        mode = r.choice(modes)
        if mode == "ios":
            cols = [c for c, _ in icols]
        else:
            cols = [c for c, _ in COLS]
        sql = "SELECT %s FROM @T@" % ", ".join(cols)
        if where:
            sql += " WHERE " + " AND ".join(where)
        if order:
            # index columns are ASC NULLS LAST or DESC NULLS LAST; a backward
            # scan yields DESC NULLS FIRST / ASC NULLS FIRST
            sql += " ORDER BY " + ", ".join(
                "%s %s NULLS %s" % (c, "DESC" if d else "ASC", "FIRST" if backward else "LAST")
                for c, d in order)
        if limit:
            sql += " LIMIT %d" % limit
        return dict(sql=sql, mode=mode, cols=cols, order=order, limit=limit, kind=kind, index=name)

    AM_SETTINGS = {
        "index": "SET enable_seqscan=off; SET enable_bitmapscan=off; SET enable_indexonlyscan=off;",
        "bitmap": "SET enable_seqscan=off; SET enable_indexscan=off; SET enable_indexonlyscan=off;",
        "ios": "SET enable_seqscan=off; SET enable_bitmapscan=off;",
    }
    BT_SETTINGS = "SET enable_indexscan=off; SET enable_bitmapscan=off; SET enable_indexonlyscan=off;"

    # ---- comparing
    def compare(self, q, am, bt):
        """Raise Mismatch with a description if results differ."""
        if q["order"]:
            pos = [q["cols"].index(c) for c, _ in q["order"]]
            typs = [COLTYPE[c] for c, _ in q["order"]]
            key = lambda row: tuple(norm_key(t, row[p]) for t, p in zip(typs, pos))
            ka, kb = [key(x) for x in am], [key(x) for x in bt]
            if ka != kb:
                for i, (x, y) in enumerate(zip(ka, kb)):
                    if x != y:
                        return "ORDER BY keys differ at row %d: am %s, btree %s" % (i, am[i], bt[i])
                return "row counts differ: am %d, btree %d" % (len(am), len(bt))
            if q["limit"] and am:
                last = ka[-1]
                am = [x for x, k in zip(am, ka) if k != last]
                bt = [x for x, k in zip(bt, kb) if k != last]
        sa, sb = sorted(map(tuple, am)), sorted(map(tuple, bt))
        if sa != sb:
            ca, cb = collections.Counter(sa), collections.Counter(sb)
            only_a = list((ca - cb).elements())[:10]
            only_b = list((cb - ca).elements())[:10]
            return ("results differ: am %d rows, btree %d rows\n    only in am:    %s\n"
                    "    only in btree: %s" % (len(am), len(bt), only_a, only_b))
        return None

    def run_queries(self, n):
        qs = [self.gen_query() for _ in range(n)]
        items = []
        for i, q in enumerate(qs):
            am_sql = q["sql"].replace("@T@", "t_am")
            if self.a.inject_fault and i % 7 == 3:  # harness self-test: AM side loses rows
                am_sql = am_sql.replace(" FROM t_am", " FROM (SELECT * FROM t_am WHERE id % 97 <> 5) t_am")
            bt_sql = q["sql"].replace("@T@", "t_bt")
            s = self.AM_SETTINGS[q["mode"]]
            items.append(("e%d" % i, "%s\nEXPLAIN (COSTS OFF) %s;\nRESET ALL" % (s, am_sql)))
            items.append(("a%d" % i, "%s\n%s;\nRESET ALL" % (s, am_sql)))
            items.append(("b%d" % i, "%s\n%s;\nRESET ALL" % (self.BT_SETTINGS, bt_sql)))
        try:
            res = self.pg.batch(items)
        except PsqlError as e:
            i = int(e.last_tag[1:]) if e.last_tag and e.last_tag[1:].isdigit() else None
            q = qs[i] if i is not None else None
            raise Mismatch("query failed (%s side): %s\n  query: %s\n  mode: %s"
                           % ({"a": "AM", "b": "btree", "e": "EXPLAIN"}.get((e.last_tag or "?")[0], "?"),
                              e, q["sql"].replace("@T@", "t_am") if q else "?",
                              q["mode"] if q else "?"))
        for i, q in enumerate(qs):
            plan = "\n".join(r[0] for r in res["e%d" % i])
            self.stats["queries"] += 1
            self.stats["mode_" + q["mode"]] += 1
            used = re.findall(r"(?:using|on) (am_\w+)", plan)
            if not used and "One-Time Filter: false" not in plan:
                self.fail_query(q, "plan does not use any %s index" % self.a.am, plan)
            if "Index Only Scan using am_" in plan:
                self.stats["plans_index_only"] += 1
            if "Bitmap Index Scan on am_" in plan:
                self.stats["plans_bitmap"] += 1
            if re.search(r"^\s*(->\s*)?Index Scan( Backward)? using am_", plan, re.M):
                self.stats["plans_index"] += 1
            if "Backward" in plan:
                self.stats["plans_backward"] += 1
            if q["order"]:
                self.stats["order_queries"] += 1
                if not re.search(r"Sort", plan):
                    self.stats["order_served_by_index"] += 1
            d = self.compare(q, res["a%d" % i], res["b%d" % i])
            if d:
                self.fail_query(q, d, plan)

    def fail_query(self, q, what, plan):
        repro = os.path.join(self.a.outdir, "differential_repro.sql")
        text = ("-- differential.py seed=%d round=%d mode=%s\n%s\nEXPLAIN (COSTS OFF) %s;\n%s;\n"
                "RESET ALL;\n%s\n%s;\n" % (self.a.seed, self.round, q["mode"], self.AM_SETTINGS[q["mode"]],
                                          q["sql"].replace("@T@", "t_am"), q["sql"].replace("@T@", "t_am"),
                                          self.BT_SETTINGS, q["sql"].replace("@T@", "t_bt")))
        try:
            with open(repro, "w") as f:
                f.write(text)
        except OSError:
            repro = "(could not write %s)" % repro
        diag = self.diagnose(q) if self.elastic else ""
        raise Mismatch("%s\n  query (AM side, mode %s): %s\n  plan:\n%s\n  repro script: %s%s"
                       % (what, q["mode"], q["sql"].replace("@T@", "t_am"),
                          "\n".join("    " + l for l in plan.splitlines()), repro, diag))

    def diagnose(self, q):
        """elastic_btree: say whether the mismatch involves tuples pruned before
        VACUUM (compact leaves cannot read their keys): dead line pointers in
        the heap now, and does the query agree after VACUUM t_am?"""
        out = []
        try:
            dead = self.pg.rows("CREATE EXTENSION IF NOT EXISTS pageinspect; "
                                "SELECT count(*) FROM generate_series(0, pg_relation_size('t_am') / 8192 - 1) b, "
                                "heap_page_items(get_raw_page('t_am', b::int)) WHERE lp_flags = 3")[0][0]
            out.append("heap of t_am has %s dead (pruned) line pointers" % dead)
        except (PsqlError, IndexError) as e:
            out.append("pageinspect not available (%s)" % str(e).splitlines()[0][:80])
        try:
            s = self.AM_SETTINGS[q["mode"]]
            res = self.pg.batch([("v", "VACUUM t_am"),
                                 ("a", "%s\n%s;\nRESET ALL" % (s, q["sql"].replace("@T@", "t_am"))),
                                 ("b", "%s\n%s;\nRESET ALL" % (self.BT_SETTINGS, q["sql"].replace("@T@", "t_bt")))])
            d = self.compare(q, res["a"], res["b"])
            out.append("after VACUUM t_am the query %s" % ("still differs" if d else "agrees with btree"))
        except PsqlError as e:
            out.append("re-check after VACUUM failed: %s" % str(e)[:200])
        return "\n  diagnosis (elastic_btree): " + "; ".join(out)

    # ---- DML
    def rand_ids(self, k):
        return ", ".join(str(self.r.randint(1, self.next_id)) for _ in range(k))

    def dml_round(self):
        r = self.r
        stmts = []  # statements with @T@, applied to both tables
        for _ in range(r.randint(1, 4)):
            op = r.choices(["insert", "upsert_nothing", "upsert_update", "delete", "update",
                            "update_key"], [30, 10, 8, 20, 20, 12])[0]
            if op.startswith("upsert") and not self.upsert:
                op = "insert"
            if op == "insert" or op.startswith("upsert"):
                n = r.randint(1, self.a.batch)
                rows = []
                for _ in range(n):
                    v = self.row_values()
                    if op.startswith("upsert") and r.random() < 0.5:
                        v[0] = str(r.randint(1, self.next_id))
                    rows.append("(%s)" % ", ".join(lit(t, x) for (c, t), x in zip(COLS, v)))
                if op.startswith("upsert"):
                    # a VALUES list must not hit the same id twice for DO UPDATE
                    seen, uniq_rows = set(), []
                    for row in rows:
                        k = row.split(",", 1)[0]
                        if k not in seen:
                            seen.add(k)
                            uniq_rows.append(row)
                    rows = uniq_rows
                s = "INSERT INTO @T@ VALUES %s" % ", ".join(rows)
                if op == "upsert_nothing":
                    s += " ON CONFLICT (id) DO NOTHING"
                elif op == "upsert_update":
                    s += " ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a, c = EXCLUDED.c, f = EXCLUDED.f"
                stmts.append(s)
            elif op == "delete":
                w = r.choice([
                    "id IN (%s)" % self.rand_ids(r.randint(1, 30)),
                    self.pred("a", ["eq"]),
                    self.pred("c", ["eq", "in"]),
                    self.pred("h", ["eq"]),
                    "id BETWEEN %d AND %d" % ((lambda x: (x, x + r.randint(0, 50)))(r.randint(1, self.next_id))),
                    self.pred("e", ["eq", "isnull"]) + " AND " + self.pred("g", ["eq"]),
                ])
                stmts.append("DELETE FROM @T@ WHERE " + w)
            elif op == "update":
                sets = []
                for c in r.sample(["a", "b", "c", "d", "e", "f", "g", "h"], r.randint(1, 3)):
                    sets.append("%s = %s" % (c, lit(COLTYPE[c], self.gen.value(COLTYPE[c]))))
                w = r.choice(["id IN (%s)" % self.rand_ids(r.randint(1, 40)),
                              self.pred("a", ["eq"]), self.pred("f", ["between"])])
                stmts.append("UPDATE @T@ SET %s WHERE %s" % (", ".join(sets), w))
            else:  # update_key: move ids (unique index), and arithmetic on keys
                base = r.randint(1, self.next_id)
                stmts.append("UPDATE @T@ SET id = id + %d WHERE id BETWEEN %d AND %d AND id + %d NOT IN "
                             "(SELECT id FROM @T@)" % (10**9, base, base + 20, 10**9))
                stmts.append("UPDATE @T@ SET a = CASE WHEN a < 100000 THEN a + 1 ELSE a END, d = -d "
                             "WHERE %s" % self.pred("a", ["eq"]))
        # same statements, same order; AM side with random scan settings so
        # DML also reads through the AM's indexes
        items = []
        for i, s in enumerate(stmts):
            am_set = r.choice(["", "SET enable_seqscan=off;", "SET enable_seqscan=off; SET enable_bitmapscan=off;"])
            items.append(("m%da" % i, "%s\n%s;\nRESET ALL" % (am_set, s.replace("@T@", "t_am"))))
            items.append(("m%db" % i, s.replace("@T@", "t_bt")))
        # unique-violation probe: re-insert an existing row
        if r.random() < 0.3:
            pick = r.choice(["min", "max"])
            for t in ("t_am", "t_bt"):
                items.append(("u_" + t, "SELECT ph_try($q$INSERT INTO %s SELECT * FROM %s WHERE id = "
                                        "(SELECT %s(id) FROM %s)$q$)" % (t, t, pick, t)))
        try:
            res = self.pg.batch(items)
        except PsqlError as e:
            tag = e.last_tag or "?"
            stmt = dict(items).get(tag, "?")
            raise Mismatch("DML failed: %s\n  statement: %s" % (e, stmt[:3000]))
        if "u_t_am" in res:
            ua, ub = res["u_t_am"][0][0], res["u_t_bt"][0][0]
            self.stats["unique_probes"] += 1
            if ua != ub or ua not in ("23505", "ok"):
                raise Mismatch("unique probe: AM returned %s, btree %s (expect 23505 = unique_violation)" % (ua, ub))
        self.stats["dml"] += len(stmts)

    def maintenance(self):
        r = self.r
        stmts = []
        for idx in self.am_indexes:
            if r.random() < self.a.merge_p:
                stmts.append("SELECT pg_hybrid.merge('%s'::regclass)" % idx)
                self.stats["merges"] += 1
        if r.random() < 0.12:
            stmts += ["VACUUM t_am", "VACUUM t_bt"]
            self.stats["vacuums"] += 1
        elif r.random() < 0.3:
            # a seqscan prunes the pages the DML left dead tuples on: their
            # index entries stay until the next VACUUM, with keys that can no
            # longer be read from the heap (what elastic_btree's compact leaves
            # have to cope with)
            stmts += ["SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off; "
                      "SELECT count(*) FROM t_am; RESET ALL"]
            self.stats["prunes"] += 1
        if r.random() < 0.05:
            stmts += ["ANALYZE t_am", "ANALYZE t_bt"]
        if self.elastic and self.a.size_bound == "mixed" and r.random() < 0.25:
            # move one index's bound: a small one makes it shrink at the next
            # merge / VACUUM, a large one or none makes it expand
            idx = r.choice(self.am_indexes)
            b = r.choice(self.BOUNDS + ["1GB", None])
            stmts.insert(0, "ALTER INDEX %s SET (size_bound = '%s')" % (idx, b) if b
                         else "ALTER INDEX %s RESET (size_bound)" % idx)
            self.bound_changes += 1
            if not any(x.startswith("VACUUM") for x in stmts) and r.random() < 0.5:
                stmts += ["VACUUM t_am", "VACUUM t_bt"]
                self.stats["vacuums"] += 1
        if stmts:
            self.exec(stmts, "maint")
        if self.tiered and r.random() < 0.35:
            self.point_burst()
        if self.elastic:
            self.elastic_stats()
        if r.random() < 0.08:
            self.verify_all()

    def point_burst(self):
        """tiered_*: a burst of skewed point reads by id (promotions,
        then hot-tier hits and CLOCK sweeps in the tiny hot tiers), summed
        on both tables: t_am through its index, t_bt through btree's."""
        r = self.r
        top = max(1, self.next_id)
        n = r.choice([1000, 4000, 8000])
        off = r.randint(0, top)
        # ids skewed towards `off`: a cube of a uniform spread
        q = ("SELECT count(s.a), sum(s.a), sum(s.id) FROM generate_series(1, %d) gs(n), "
             "LATERAL (SELECT id, a FROM {T} WHERE id = ((((gs.n * 7919) %% 4000)::float8 ^ 3 / 6.4e10 * %d)::int8 + %d) %% %d + 1) s"
             % (n, top, off, top))
        # One index probe per row of the series: a nested loop.
        nl = ("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; "
              "SET enable_mergejoin = off; SET enable_material = off; ")
        res = self.exec([nl + q.replace("{T}", "t_am") + "; RESET ALL",
                         nl + q.replace("{T}", "t_bt") + "; RESET ALL"],
                        "burst")
        a, b = res["burst0"], res["burst1"]
        if a != b:
            raise Mismatch("point burst differs: %s on %s, %s on btree's table" % (a, "t_am", b))
        self.stats["bursts"] = self.stats.get("bursts", 0) + 1

    def elastic_stats(self):
        items = [("s_" + idx, "SELECT compact_leaves, state FROM pg_hybrid.index_stats('%s'::regclass)" % idx)
                 for idx in self.am_indexes]
        res = self.pg.batch(items)
        for idx in self.am_indexes:
            cl, st = res["s_" + idx][0]
            self.compact_seen[idx] = max(self.compact_seen.get(idx, 0), int(cl))
            self.states_seen[st] += 1

    def verify_all(self):
        if self.a.no_verify:
            return
        for idx in self.am_indexes:
            try:
                self.pg.batch([("v", "SELECT pg_hybrid.verify('%s'::regclass, heapallindexed => true)" % idx)])
            except PsqlError as e:
                raise Mismatch("pg_hybrid.verify(%s, heapallindexed => true) failed: %s" % (idx, e))
        self.stats["verifies"] += 1

    def run(self):
        a = self.a
        t0 = time.time()
        self.setup()
        deadline = t0 + a.time
        while True:
            self.round += 1
            self.run_queries(a.queries)
            self.dml_round()
            self.maintenance()
            self.check_tables("after round %d" % self.round)
            if a.rounds and self.round >= a.rounds:
                break
            if not a.rounds and time.time() >= deadline:
                break
            if self.round % 10 == 0:
                print("  round %d: %d queries, %d rows, %.0fs" % (self.round, self.stats["queries"],
                                                                  self.stats["rows_now"], time.time() - t0),
                      flush=True)
        self.exec(["VACUUM t_am", "VACUUM t_bt"])
        self.run_queries(a.queries)
        for idx in self.am_indexes:
            self.exec(["SELECT pg_hybrid.merge('%s'::regclass)" % idx])
        self.run_queries(a.queries)
        self.verify_all()
        self.check_tables("at the end")
        s = self.stats
        print("differential: PASS  seed=%d rounds=%d queries=%d (index %d, bitmap %d, ios %d) dml=%d "
              "merges=%d vacuums=%d prunes=%d verifies=%d unique_probes=%d rows=%d  %.0fs"
              % (a.seed, self.round, s["queries"], s["mode_index"], s["mode_bitmap"], s["mode_ios"],
                 s["dml"], s["merges"], s["vacuums"], s["prunes"], s["verifies"], s["unique_probes"],
                 s["rows_now"], time.time() - t0))
        print("  plans: index scan %d, bitmap %d, index-only %d, backward %d; ORDER BY served "
              "without Sort %d/%d" % (s["plans_index"], s["plans_bitmap"], s["plans_index_only"],
                                      s["plans_backward"], s["order_served_by_index"], s["order_queries"]))
        if s["order_queries"] and s["order_served_by_index"] * 2 < s["order_queries"]:
            raise Mismatch("only %d of %d ORDER BY queries were served in index order (no Sort); "
                           "an ordered AM should serve most of them"
                           % (s["order_served_by_index"], s["order_queries"]))
        if s["plans_index_only"] == 0:
            print("  note: no index-only scan was used (does the AM set amcanreturn?%s)"
                  % (" elastic_btree offers none on an index with a size_bound" if self.elastic else ""))
        if self.tiered:
            rows = self.exec(["SELECT coalesce(sum(promotions), 0), coalesce(sum(evictions), 0), "
                              "coalesce(sum(sweeps), 0), max(hot_hit_ratio) FROM ("
                              + " UNION ALL ".join("SELECT * FROM pg_hybrid.index_stats('%s')" % i
                                                   for i in self.am_indexes) + ") s"], tag="tiered")["tiered0"]
            print("  tiered: promotions %s, records evicted %s, sweep steps %s, best hot hit ratio %s"
                  % tuple(rows[0]))
            if int(rows[0][0]) == 0 or int(rows[0][1]) == 0:
                raise Mismatch("no record was promoted or evicted: the test did not exercise the hot tier")
        if self.elastic:
            self.elastic_stats()
            comp = sorted(i for i, n in self.compact_seen.items() if n > 0)
            print("  elastic: size_bound mode %s, %d bound changes; index states seen %s; indexes that "
                  "held compact leaves: %s" % (a.size_bound, self.bound_changes, dict(self.states_seen),
                                               ", ".join(comp) or "none"))
            if a.size_bound != "none" and not comp:
                raise Mismatch("no elastic_btree index ever held a compact leaf (size_bound mode %s): "
                               "the test did not exercise compact leaves" % a.size_bound)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    ap.add_argument("--time", type=float, default=90, help="seconds of random rounds (default 90)")
    ap.add_argument("--rounds", type=int, default=0, help="exact number of rounds (overrides --time)")
    ap.add_argument("--rows", type=int, default=20000, help="initial rows (default 20000)")
    ap.add_argument("--queries", type=int, default=40, help="queries per round (default 40)")
    ap.add_argument("--batch", type=int, default=150, help="max rows per INSERT (default 60)")
    ap.add_argument("--merge-p", type=float, default=0.15, help="per-round probability to merge each index")
    ap.add_argument("--am", default=os.environ.get("PH_AM", "hybrid_btree"))
    ap.add_argument("--host", default=os.environ.get("PH_PGHOST"))
    ap.add_argument("--port", default=os.environ.get("PH_PGPORT"))
    ap.add_argument("--user", default=os.environ.get("PH_USER", "pghybrid"), help="database user")
    ap.add_argument("--os-user", default=os.environ.get("PH_USER", "pghybrid"),
                    help="OS user to run psql as (runuser), default PH_USER")
    ap.add_argument("--db", default=os.environ.get("PH_DB", "ph_differential"))
    ap.add_argument("--pgbin", default=os.environ.get("PH_PGBIN", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--outdir", default=os.environ.get("PH_OUTDIR", "/tmp"),
                    help="where a failing query's repro script is written")
    ap.add_argument("--size-bound", default=None,
                    help="elastic_btree only: none | mixed | a size such as 96kB for every index "
                         "(default: mixed for elastic_btree)")
    ap.add_argument("--autovacuum", action="store_true", help="leave autovacuum on for the tables")
    ap.add_argument("--no-reloptions", action="store_true", help="no WITH (...) on hybrid_btree indexes")
    ap.add_argument("--no-verify", action="store_true", help="never call pg_hybrid.verify()")
    ap.add_argument("--no-upsert", action="store_true", help="no INSERT ... ON CONFLICT statements")
    ap.add_argument("--no-desc-index", action="store_true", help="skip the (b DESC NULLS LAST, id) index")
    ap.add_argument("--inject-fault", action="store_true",
                    help="self-test of the harness: make the AM side drop rows; must FAIL")
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randint(1, 10**6)
    if a.size_bound is None:
        a.size_bound = "mixed" if a.am == "elastic_btree" else "none"
    if a.size_bound != "none" and a.am != "elastic_btree":
        ap.error("--size-bound applies to --am elastic_btree only")
    if not a.host or not a.port:
        ap.error("--host (socket directory) and --port are required (or PH_PGHOST / PH_PGPORT)")
    print("differential: seed %d (rerun: tests/differential.py --seed %d)" % (a.seed, a.seed), flush=True)
    d = Differential(a)
    try:
        d.run()
    except Mismatch as e:
        print("differential: FAIL (seed %d, round %d)\n  %s" % (a.seed, d.round, e), flush=True)
        sys.exit(1)
    except PsqlError as e:
        print("differential: FAIL (seed %d, round %d): psql error\n  %s" % (a.seed, d.round, e), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
