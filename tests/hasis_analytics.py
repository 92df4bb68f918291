#!/usr/bin/env python3
"""tests/hasis_analytics.py — random analytical queries on a hasis table and
its heap twin, under concurrent DML.

Tables: fact_h (USING hasis) and fact_x (heap) with the same rows

    k int8, g int4, d date, amount numeric(12,2), f float8, s text (some NULL,
    some long), flag bool, n int4

and a heap dimension dim(g, name, region). A background psql session (the
writer) runs random transactions until told to stop: each applies the same
statements to fact_h and fact_x (inserts of new keys, updates of measures,
dates and groups, deletes of key ranges), then commits or rolls back; now and
then it VACUUMs both tables (compaction moves delta rows into column parts)
or runs CHECKPOINT.

Meanwhile the main loop runs random analytical queries (aggregates over
filters, GROUP BY, joins with dim, projections of a few columns) written
once with @ for the table. Each check is one statement comparing both
sides under one snapshot:

    SELECT count(*) FROM ((Q_h EXCEPT ALL Q_x) UNION ALL (Q_x EXCEPT ALL Q_h)) z

which must be 0, since the writer changes both tables in the same
transactions. Index and bitmap scans and parallel plans are off, so the
hasis side goes through the column scan whenever the planner offers it;
checks alternate between autocommit (READ COMMITTED) and REPEATABLE READ
transactions of two checks, some allow parallel plans (workers share the
extents), and some run after `SET pg_hybrid.enable_hasis_column_scan = off`
(the sequential scan). Every
few checks the plan is taken: at the end at least half the plans taken must
show the column scan.

The first mismatch stops the run; it prints the query and both sides' rows
that differ, from one REPEATABLE READ snapshot.

    tests/hasis_analytics.py [--seed N] [--time SECONDS] [--rows N] [--inject-fault]
                             [--host SOCKDIR] [--port P] [--user U] [--db DB]

--inject-fault is the test's self-test: the heap twin misses one
transaction's changes in 50, and the run must fail.

Connection defaults come from PH_PGHOST, PH_PGPORT, PH_USER, PH_PGBIN, PH_DB
(tests/hasis.sh sets them). Python 3 stdlib only. Exit status 0 = every
check found both sides equal.
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time

from pgbatch import PG, PsqlError


COLUMNS = "k int8, g int4, d date, amount numeric(12,2), f float8, s text, flag bool, n int4"
ROW = ("g, (g * 7919) %% 50, '2020-01-01'::date + (g / 40)::int, ((g * 37) %% 100000) / 100.0, "
       "((g * 13) %% 1000) / 7.0, CASE WHEN g %% 17 = 0 THEN NULL WHEN g %% 101 = 0 THEN repeat(md5(g::text), 80) "
       "ELSE chr(97 + (g %% 26)) || (g %% 1000) END, g %% 3 = 0, (g * 31) %% 1000")


def setup(pg, a):
    both = lambda s: s.replace("@", "h") + "\n" + s.replace("@", "x") + "\n"
    sql = ["SET client_min_messages = warning;",
           "DROP TABLE IF EXISTS fact_h, fact_x, dim;",
           "CREATE TABLE fact_h (%s) USING hasis;" % COLUMNS,
           "CREATE TABLE fact_x (%s) USING heap;" % COLUMNS,
           "CREATE TABLE dim (g int4 PRIMARY KEY, name text, region int4);",
           "INSERT INTO dim SELECT g, 'group ' || g, g % 5 FROM generate_series(0, 49) g;",
           both("INSERT INTO fact_@ SELECT %s FROM generate_series(1, %d) g;" % (ROW % (), a.rows)),
           "VACUUM ANALYZE fact_h; VACUUM ANALYZE fact_x; ANALYZE dim;"]
    pg.run("\n".join(sql))


def writer_script(r, a, start_key, n_tx):
    out = ["SET client_min_messages = warning;"]
    key = start_key
    for t in range(n_tx):
        stmts = []
        for _ in range(r.randint(1, 3)):
            kind = r.choices(["insert", "update", "update_d", "delete", "update_g"], [30, 30, 10, 15, 15])[0]
            if kind == "insert":
                m = r.randint(1, 300)
                stmts.append("INSERT INTO fact_@ SELECT %s FROM generate_series(%d, %d) g;" % (ROW % (), key, key + m - 1))
                key += m
            elif kind == "update":
                p, rr = r.randint(3, 60), r.randint(0, 2)
                stmts.append("UPDATE fact_@ SET amount = amount + %d.25, n = n + 1, s = CASE WHEN s IS NULL THEN 'z' ELSE s END "
                             "WHERE k %% %d = %d AND k < %d;" % (r.randint(-5, 5), p, rr, key))
            elif kind == "update_d":
                lo = r.randint(1, key)
                stmts.append("UPDATE fact_@ SET d = d + %d WHERE k BETWEEN %d AND %d;" % (r.randint(-30, 30), lo, lo + r.randint(0, 400)))
            elif kind == "update_g":
                stmts.append("UPDATE fact_@ SET g = (g + 1) %% 50, flag = NOT flag WHERE g = %d AND k %% 4 = %d;"
                             % (r.randint(0, 49), r.randint(0, 3)))
            else:
                lo = r.randint(1, key)
                stmts.append("DELETE FROM fact_@ WHERE k BETWEEN %d AND %d;" % (lo, lo + r.randint(0, 200)))
        out.append("BEGIN;")
        for s in stmts:
            out.append(s.replace("@", "h"))
            if not (a.inject_fault and t % 50 == 7):   # self-test: the heap twin misses a change
                out.append(s.replace("@", "x"))
        out.append("ROLLBACK;" if r.random() < 0.1 else "COMMIT;")
        if t % 40 == 39:
            out.append(r.choice(["VACUUM fact_h; VACUUM fact_x;", "CHECKPOINT;", "ANALYZE fact_h;"]))
        out.append("SELECT pg_sleep(%.3f);" % r.uniform(0.0, 0.02))
    return "\n".join(out) + "\n"


AGGS = ["count(*)", "sum(amount)", "min(d)", "max(d)", "count(s)", "sum(n)", "max(s)", "min(f)", "max(f)",
        "count(DISTINCT g)", "avg(amount)", "sum(length(s))", "bool_or(flag)", "min(k)", "max(k)"]


def gen_pred(r, maxk):
    c = r.choice(["k", "k", "d", "g", "amount", "f", "s", "flag", "n", "snull"])
    if c == "k":
        lo = r.randint(1, maxk)
        return r.choice(["k BETWEEN %d AND %d" % (lo, lo + r.randint(0, maxk // 4)), "k > %d" % lo, "k <= %d" % lo,
                         "k = %d" % lo, "%d >= k" % lo])
    if c == "d":
        day = "'2020-01-01'::date + %d" % r.randint(0, maxk // 40 + 30)
        return r.choice(["d >= %s" % day, "d < %s" % day, "d BETWEEN %s AND %s + 20" % (day, day),
                         "d > '2020-06-01'::timestamp"])
    if c == "g":
        return r.choice(["g = %d" % r.randint(0, 49), "g IN (%s)" % ", ".join(str(r.randint(0, 49)) for _ in range(3)),
                         "g < %d" % r.randint(0, 49), "g::int8 > %d" % r.randint(0, 49)])
    if c == "amount":
        return "amount %s %d" % (r.choice(["<", ">", ">="]), r.randint(0, 1000))
    if c == "f":
        return "f %s %.2f" % (r.choice(["<", ">"]), r.uniform(0, 143))
    if c == "s":
        return r.choice(["s LIKE '%s%%'" % chr(97 + r.randint(0, 25)), "length(s) > 100", "s > 'm'"])
    if c == "flag":
        return r.choice(["flag", "NOT flag"])
    if c == "n":
        return "n %% %d = %d" % (r.randint(2, 7), r.randint(0, 1))
    return r.choice(["s IS NULL", "s IS NOT NULL"])


def gen_query(r, maxk):
    where = " AND ".join(gen_pred(r, maxk) for _ in range(r.randint(0, 3)))
    where = (" WHERE " + where) if where else ""
    shape = r.choices(["agg", "group", "join", "project"], [35, 30, 15, 20])[0]
    aggs = ", ".join(r.sample(AGGS, r.randint(1, 4)))
    if shape == "agg":
        return "SELECT %s FROM fact_@%s" % (aggs, where)
    if shape == "group":
        grp = r.choice(["g", "flag", "date_trunc('month', d)", "g % 5", "s IS NULL"])
        having = " HAVING count(*) > %d" % r.randint(0, 20) if r.random() < 0.3 else ""
        return "SELECT %s AS grp, %s FROM fact_@%s GROUP BY 1%s" % (grp, aggs, where, having)
    if shape == "join":
        w = where.replace(" WHERE ", " AND ", 1) if where else ""
        return ("SELECT dim.name, %s FROM fact_@ JOIN dim USING (g) WHERE dim.region = %d%s GROUP BY dim.name"
                % (aggs.replace("count(DISTINCT g)", "count(DISTINCT fact_@.g)"), r.randint(0, 4), w))
    cols = ", ".join(r.sample(["k", "g", "d", "amount", "f", "s", "flag", "n"], r.randint(1, 3)))
    return "SELECT %s FROM fact_@%s" % (cols, where or " WHERE k %% 97 = %d" % r.randint(0, 96))


SETTINGS = ("SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off; "
            "SET max_parallel_workers_per_gather = 0")


PARALLEL = ("SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; "
            "SET min_parallel_table_scan_size = 0")


def check_sql(q):
    qh, qx = q.replace("@", "h"), q.replace("@", "x")
    return "SELECT count(*) FROM (((%s) EXCEPT ALL (%s)) UNION ALL ((%s) EXCEPT ALL (%s))) z" % (qh, qx, qx, qh)


def explain_diff(pg, q, seqscan):
    """Both sides' differing rows under one snapshot, and the hasis plan."""
    qh, qx = q.replace("@", "h"), q.replace("@", "x")
    off = "SET pg_hybrid.enable_hasis_column_scan = off" if seqscan else "SELECT"
    try:
        res = pg.batch([("s", SETTINGS), ("o", off), ("b", "BEGIN ISOLATION LEVEL REPEATABLE READ"),
                        ("h", "SELECT * FROM ((%s) EXCEPT ALL (%s)) a LIMIT 10" % (qh, qx)),
                        ("x", "SELECT * FROM ((%s) EXCEPT ALL (%s)) b LIMIT 10" % (qx, qh)),
                        ("p", "EXPLAIN (COSTS OFF) %s" % qh), ("c", "COMMIT")])
    except PsqlError as e:
        return str(e)
    show = lambda rows: "\n".join("    " + "|".join(r) for r in rows)
    return "only hasis:\n%s\nonly heap:\n%s\nplan:\n%s" % (show(res["h"]), show(res["x"]), show(res["p"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time", type=float, default=60)
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--host", default=os.environ.get("PH_PGHOST", "/tmp"))
    ap.add_argument("--port", default=os.environ.get("PH_PGPORT", "5432"))
    ap.add_argument("--user", default=os.environ.get("PH_USER", "postgres"), help="database user")
    ap.add_argument("--os-user", default=os.environ.get("PH_USER", "postgres"),
                    help="OS user to run psql as (runuser when root), default PH_USER")
    ap.add_argument("--db", default=os.environ.get("PH_DB", "postgres"))
    ap.add_argument("--pgbin", default=os.environ.get("PH_PGBIN", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--inject-fault", action="store_true", help="self-test: the twins drift apart; the run must fail")
    a = ap.parse_args()
    r = random.Random(a.seed)
    print("hasis_analytics: seed %d, %d rows, %.0f s" % (a.seed, a.rows, a.time), flush=True)
    pg = PG(a, "hasis_analytics")
    setup(pg, a)
    script = writer_script(random.Random(a.seed * 7 + 1), a, a.rows + 1, 100000)
    # The writer: one psql session reading the script as it goes, in a
    # process group of its own (runuser forks psql: both must go at the end).
    writer = subprocess.Popen(pg.cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=pg.env, text=True, cwd="/", start_new_session=True)

    def feed():
        try:
            writer.stdin.write(script)
            writer.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass   # the writer was stopped at the end of the run
    threading.Thread(target=feed, daemon=True).start()
    stats = dict(checks=0, plans=0, column_plans=0, seqscan_checks=0, rr=0, parallel=0)
    t_end = time.time() + a.time
    failed = None
    maxk = a.rows
    try:
        while time.time() < t_end and failed is None:
            seqscan = r.random() < 0.15
            parallel = r.random() < 0.2
            rr = r.random() < 0.3
            qs = [gen_query(r, maxk + 2000) for _ in range(2 if rr else 1)]
            items = [("s", SETTINGS)]
            if seqscan:
                items.append(("o", "SET pg_hybrid.enable_hasis_column_scan = off"))
            if parallel:   # workers and the leader share the extents
                items.append(("p", PARALLEL))
            if rr:
                items.append(("b", "BEGIN ISOLATION LEVEL REPEATABLE READ"))
            items += [("c%d" % i, check_sql(q)) for i, q in enumerate(qs)]
            if rr:
                items.append(("e", "COMMIT"))
            take_plan = stats["checks"] % 4 == 0 and not seqscan
            if take_plan:
                items.append(("plan", "EXPLAIN (COSTS OFF) %s" % qs[0].replace("@", "h")))
            try:
                res = pg.batch(items)
            except PsqlError as e:
                failed = ("an ERROR", qs[0], seqscan, str(e))
                break
            for i, q in enumerate(qs):
                if res["c%d" % i] != [["0"]]:
                    failed = ("different rows", q, seqscan, "rows only on one side: %s" % res["c%d" % i])
                    break
                stats["checks"] += 1
            if failed:
                break
            stats["seqscan_checks"] += seqscan * len(qs)
            stats["rr"] += rr * len(qs)
            stats["parallel"] += parallel * len(qs)
            if take_plan:
                stats["plans"] += 1
                stats["column_plans"] += any("HasisColumnScan" in row[0] for row in res["plan"])
            if writer.poll() is not None:
                failed = ("the writer stopped", "", False, writer.stderr.read().strip())
                break
    finally:
        try:
            os.killpg(writer.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        writer.wait()
    if failed:
        what, q, seqscan, detail = failed
        print("FAIL: %s%s\n  query: %s\n  %s" % (what, " (sequential scan)" if seqscan else "", q, detail))
        if q:
            print(explain_diff(pg, q, seqscan))
        return 1
    print("hasis_analytics: %(checks)d checks equal (%(rr)d in REPEATABLE READ, %(parallel)d with parallel plans "
          "allowed, %(seqscan_checks)d with the column scan off); %(column_plans)d of %(plans)d plans taken used the "
          "column scan" % stats)
    if stats["plans"] and stats["column_plans"] * 2 < stats["plans"]:
        print("FAIL: fewer than half of the plans used the column scan")
        return 1
    if stats["checks"] < 10:
        print("FAIL: only %d checks ran" % stats["checks"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
