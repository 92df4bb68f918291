"""Suite `tpch`: TPC-H data and the 22 queries from DuckDB's tpch extension
(duckdb 1.5.5; newer duckdb wheels no longer ship the extension, so
duckdb-extension-tpch provides the file and it is LOADed by path), run on
PostgreSQL with every index built by the side's AM.

Every answer PostgreSQL returns is compared with DuckDB's answer to the same
query on the same generated data: a benchmark that returns wrong rows fails.
Numbers are compared with a relative tolerance (PostgreSQL's numeric avg()
vs DuckDB's double), rows in order, or as sorted lists when the order differs
only among ties of the ORDER BY.
"""

import datetime
import decimal
import glob
import math
import os
import time

import duckdb

from harness import BenchError, index_bytes, log, rebuild_indexes

PKEYS = {
    "region": ["r_regionkey"], "nation": ["n_nationkey"], "part": ["p_partkey"], "supplier": ["s_suppkey"],
    "partsupp": ["ps_partkey", "ps_suppkey"], "customer": ["c_custkey"], "orders": ["o_orderkey"],
    "lineitem": ["l_orderkey", "l_linenumber"],
}
# the usual foreign-key-side indexes; Q17 and Q20 need lineitem(l_partkey) to finish
SECONDARY = [
    ("lineitem", ["l_partkey", "l_suppkey"]), ("orders", ["o_custkey"]), ("partsupp", ["ps_suppkey"]),
    ("customer", ["c_nationkey"]), ("supplier", ["s_nationkey"]), ("nation", ["n_regionkey"]),
]
LOAD_ORDER = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]


def pg_type(t):
    t = t.upper()
    if t.startswith("DECIMAL"):
        return t.replace("DECIMAL", "numeric")
    return {"BIGINT": "bigint", "INTEGER": "integer", "VARCHAR": "text", "DATE": "date",
            "DOUBLE": "double precision"}.get(t, t.lower())


def tpch_extension():
    import duckdb_extension_tpch
    found = glob.glob(os.path.join(os.path.dirname(duckdb_extension_tpch.__file__), "extensions", "*",
                                   "tpch.duckdb_extension"))
    if not found:
        raise BenchError("duckdb-extension-tpch has no tpch.duckdb_extension file")
    return found[0]


def norm(v):
    if isinstance(v, (decimal.Decimal, float, int)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, str):
        return v.rstrip()
    return v


def same_value(x, y):
    if isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)
    return x == y


def same_rows(got, want):
    """None when equal, else a short description of the first difference."""
    if len(got) != len(want):
        return "%d rows, DuckDB has %d" % (len(got), len(want))
    g = [tuple(norm(v) for v in r) for r in got]
    w = [tuple(norm(v) for v in r) for r in want]

    def first_diff(a, b):
        for i, (ra, rb) in enumerate(zip(a, b)):
            if len(ra) != len(rb) or not all(same_value(x, y) for x, y in zip(ra, rb)):
                return "row %d: %r, DuckDB: %r" % (i, ra, rb)
        return None
    d = first_diff(g, w)
    if d is None:
        return None
    # ties of the ORDER BY may come in any order: compare as sorted lists
    key = lambda r: tuple((0, round(x, 2)) if isinstance(x, float) else (1, str(x)) for x in r)
    return None if first_diff(sorted(g, key=key), sorted(w, key=key)) is None else d


def run(a, cl, res):
    sf = a.sf or a.size["sf"]
    timeout_s = 300 if a.smoke else 1200
    work = os.path.join(a.work, "tpch")
    os.makedirs(work, exist_ok=True)
    log("tpch: dbgen sf=%g in DuckDB" % sf)
    t0 = time.time()
    dk = duckdb.connect(":memory:")
    dk.execute("LOAD '%s'" % tpch_extension().replace("'", "''"))
    dk.execute("CALL dbgen(sf=%s)" % sf)
    queries = dk.execute("SELECT query_nr, query FROM tpch_queries() ORDER BY query_nr").fetchall()
    if len(queries) != 22:
        raise BenchError("tpch_queries() returned %d queries, expected 22" % len(queries))
    answers = {}
    for nr, q in queries:
        answers[nr] = dk.execute(q).fetchall()
    res.note("DuckDB dbgen + its own answers to the 22 queries: %.0f s" % (time.time() - t0))

    cl.create_db("tpch")
    c = cl.connect("tpch")
    t0 = time.time()
    for t in LOAD_ORDER:
        cols = dk.execute("DESCRIBE %s" % t).fetchall()
        c.execute("DROP TABLE IF EXISTS %s" % t)
        c.execute("CREATE TABLE %s (%s) WITH (autovacuum_enabled = off)"
                  % (t, ", ".join("%s %s NOT NULL" % (col[0], pg_type(col[1])) for col in cols)))
        path = os.path.join(work, t + ".csv")
        dk.execute("COPY %s TO '%s' (FORMAT csv, DELIMITER '|', HEADER false)" % (t, path))
        with c.cursor() as cur:
            with cur.copy("COPY %s FROM STDIN (FORMAT csv, DELIMITER '|')" % t) as cp:
                with open(path, "rb") as f:
                    while True:
                        block = f.read(1 << 20)
                        if not block:
                            break
                        cp.write(block)
        os.unlink(path)
    load_s = time.time() - t0
    dk_rows = {t: dk.execute("SELECT count(*) FROM %s" % t).fetchone()[0] for t in LOAD_ORDER}
    for t in LOAD_ORDER:
        n = c.execute("SELECT count(*) FROM %s" % t).fetchone()[0]
        if n != dk_rows[t]:
            raise BenchError("%s: loaded %d rows, DuckDB generated %d" % (t, n, dk_rows[t]))
    dk.close()
    t0 = time.time()
    for t, cols in PKEYS.items():
        c.execute("ALTER TABLE %s ADD PRIMARY KEY (%s)" % (t, ", ".join(cols)))
    for t, cols in SECONDARY:
        c.execute("CREATE INDEX %s_%s ON %s (%s)" % (t, "_".join(cols), t, ", ".join(cols)))
    c.execute("VACUUM ANALYZE")
    res.note("load: COPY of %d lineitem rows etc. %.0f s; btree keys + VACUUM ANALYZE %.0f s"
             % (dk_rows["lineitem"], load_s, time.time() - t0))
    c.execute("SET statement_timeout = '%ds'" % timeout_s)

    wrong = []
    for rep in range(a.repeat):
        order = [1, 0] if rep % 2 == 0 else [0, 1]
        for side in order:
            am = a.sides[side][0]
            log("tpch rep %d/%d: %s" % (rep + 1, a.repeat, am))
            secs, kept = rebuild_indexes(c, am, a.reloptions)
            for k in kept:
                res.note("%s: %s" % (res.sides[side], k))
            c.execute("ANALYZE")
            c.execute("CHECKPOINT")
            res.add("indexes", "build_s", "s", "lower", side, rep, secs)
            res.add("indexes", "index_bytes", "bytes", "lower", side, rep, index_bytes(c)[0])
            total = 0.0
            for nr, q in queries:
                t0 = time.time()
                try:
                    got = c.execute(q).fetchall()
                except Exception as e:
                    raise BenchError("Q%d on %s failed: %s" % (nr, am, str(e).strip()))
                dt = time.time() - t0
                total += dt
                res.add("Q%02d" % nr, "time_s", "s", "lower", side, rep, dt)
                d = same_rows(got, answers[nr])
                if d:
                    wrong.append("Q%d on %s: %s" % (nr, res.sides[side], d))
                    log("  WRONG ANSWER Q%d: %s" % (nr, d))
            res.add("total", "time_s", "s", "lower", side, rep, total)
    c.close()
    res.params.update({"scale factor": sf, "queries": "22, DuckDB tpch_queries() text, run one after another",
                       "indexes": "primary keys as UNIQUE indexes + " +
                                  ", ".join("%s(%s)" % (t, ", ".join(cs)) for t, cs in SECONDARY),
                       "statement_timeout": "%d s" % timeout_s})
    if wrong:
        for w in wrong:
            res.note("WRONG ANSWER %s" % w)
        raise BenchError("%d wrong TPC-H answers: %s" % (len(wrong), "; ".join(wrong[:5])))
    res.note("all 22 answers matched DuckDB's on every side and repeat (rows per query: %s)"
             % ", ".join("Q%d %d" % (nr, len(answers[nr])) for nr, _ in queries))
    cl.drop_db("tpch")
