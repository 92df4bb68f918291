"""Suite `ycsb`: YCSB-like workloads as pgbench custom scripts over
usertable(ycsb_key int8, field0..field9 text), key index = UNIQUE index of
the side's AM.

Workloads (YCSB core): A 50% read / 50% update, B 95/5, C read only,
E 95% short range scans (1..100 rows from a key, in key order) / 5% inserts of
new keys, then E again at SERIALIZABLE (E-serializable: pgbench retries a
serialization failure up to 10 times; the retries and the transactions that
still failed are counted as serialization_failures); then U, update-only with zipfian keys for three times as long,
right after a VACUUM (hot_updates_after_vacuum).  Each runs with zipfian keys, permute(random_zipfian(1, n, s), n)
(permute spreads the hot keys over the key space, as YCSB's hashing does;
pgbench needs s > 1, YCSB's own constant is 0.99), and with uniform keys.

Every side gets a fresh copy of the loaded table, so updates and inserts of
the first side do not bloat the second one's heap.
"""

import os
import re
import time

from harness import BenchError, index_bytes, log

FIELDS = 10
FIELD_LEN = 100
ZIPF_S = 1.01

WORKLOADS = {   # name -> [(script, weight)]
    "A": [("read", 50), ("update", 50)],
    "B": [("read", 95), ("update", 5)],
    "C": [("read", 100)],
    "E": [("scan", 95), ("insert", 5)],
}


def key_expr(dist, n):
    if dist == "zipfian":
        return "1 + permute(random_zipfian(1, %d, %s), %d)" % (n, ZIPF_S, n)
    return "random(1, %d)" % n


def scripts(work, dist, n):
    k = "\\set k %s\n" % key_expr(dist, n)
    cols = ", ".join("field%d" % i for i in range(FIELDS))
    body = {
        "read": k + "SELECT * FROM usertable WHERE ycsb_key = :k;\n",
        "update": k + "\\set v random(1, 1000000000)\n"
                  "UPDATE usertable SET field0 = lpad(:v::text, %d, 'u') WHERE ycsb_key = :k;\n" % FIELD_LEN,
        "scan": k + "\\set len random(1, 100)\n"
                "SELECT * FROM usertable WHERE ycsb_key >= :k ORDER BY ycsb_key LIMIT :len;\n",
        "insert": "INSERT INTO usertable (ycsb_key, %s) SELECT nextval('usertable_new_key'), %s;\n"
                  % (cols, ", ".join(["repeat('i', %d)" % FIELD_LEN] * FIELDS)),
    }
    paths = {}
    for name, text in body.items():
        p = os.path.join(work, "ycsb_%s_%s.sql" % (dist, name))
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o644)
        paths[name] = p
    return paths


def hot_updates_after_vacuum(a, cl, c, res, side, rep, paths, seconds):
    """Case U: update-only zipfian load for 3 x the workload time right after
    a VACUUM of the table as the workloads left it.  A VACUUM frees heap
    space (updates turn HOT for a while) and empties hybrid_btree's hint
    tables; a load of hot-key updates then piles up versions, and an index
    that cannot get rid of dead ones fast enough slows down for good (seen on
    hybrid_btree before 74c9650: 25k -> 400 updates/s).  Reported: the TPS
    over the whole run and the slowest 5-second interval."""
    c.execute("VACUUM usertable")
    args = ["-n", "-M", "prepared", "-c", str(a.clients), "-j", str(a.threads), "-T", str(3 * seconds),
            "-P", "5", "-f", paths["zipfian"]["update"]]
    out = cl.pgbench(args, db="ycsb")
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if not m:
        raise BenchError("ycsb U-zipfian-after-vacuum: no tps in pgbench output: %s" % out[-1000:])
    res.add("U-zipfian-after-vacuum", "tps", "tps", "higher", side, rep, float(m.group(1)))
    intervals = [float(x) for x in re.findall(r"progress: [0-9.]+ s, ([0-9.]+) tps", out)]
    if intervals:
        res.add("U-zipfian-after-vacuum", "slowest_5s_tps", "tps", "higher", side, rep, min(intervals))


def run(a, cl, res):
    n = a.rows or a.size["ycsb_rows"]
    seconds = a.seconds or a.size["ycsb_seconds"]
    cl.create_db("ycsb")   # its own database, so every index in it is usertable's
    c = cl.connect("ycsb")
    log("ycsb: loading usertable_base (%d rows of %d x %d bytes)" % (n, FIELDS, FIELD_LEN))
    t0 = time.time()
    cols = ", ".join("field%d text" % i for i in range(FIELDS))
    vals = ", ".join("rpad(md5((g * %d)::text), %d, md5(g::text))" % (i + 1, FIELD_LEN) for i in range(FIELDS))
    c.execute("DROP TABLE IF EXISTS usertable, usertable_base")
    c.execute("CREATE TABLE usertable_base (ycsb_key int8 NOT NULL, %s) WITH (autovacuum_enabled = off)" % cols)
    c.execute("INSERT INTO usertable_base SELECT g, %s FROM generate_series(1, %d) g" % (vals, n))
    res.note("load of usertable_base: %.1f s" % (time.time() - t0))
    paths = {d: scripts(a.work, d, n) for d in ("zipfian", "uniform")}
    for rep in range(a.repeat):
        order = [1, 0] if rep % 2 == 0 else [0, 1]
        for side in order:
            am, table_am = a.sides[side]
            log("ycsb rep %d/%d: %s (table AM %s)" % (rep + 1, a.repeat, am, table_am))
            c.execute("DROP TABLE IF EXISTS usertable")
            c.execute("DROP SEQUENCE IF EXISTS usertable_new_key")
            c.execute("CREATE TABLE usertable (LIKE usertable_base) USING %s WITH (autovacuum_enabled = off)" % table_am)
            c.execute("INSERT INTO usertable SELECT * FROM usertable_base")
            c.execute("CREATE SEQUENCE usertable_new_key START %d" % (n + 1))
            t0 = time.time()
            opts = " WITH (%s)" % a.reloptions if a.reloptions and am != "btree" else ""
            c.execute("CREATE UNIQUE INDEX usertable_key ON usertable USING %s (ycsb_key)%s" % (am, opts))
            res.add("load", "index_build_s", "s", "lower", side, rep, time.time() - t0)
            c.execute("VACUUM ANALYZE usertable")
            c.execute("CHECKPOINT")
            res.add("load", "index_bytes_after_build", "bytes", "lower", side, rep,
                    index_bytes(c)[0])
            # read-only first, inserts last, so each workload sees the same key set as YCSB's
            for wl in ("C", "B", "A", "E", "E-serializable"):
                for dist in ("zipfian", "uniform"):
                    serializable = wl.endswith("-serializable")
                    args = ["-n", "-M", "prepared", "-c", str(a.clients), "-j", str(a.threads), "-T", str(seconds)]
                    if serializable:
                        args += ["--max-tries=10"]
                    for script, weight in WORKLOADS[wl.split("-")[0]]:
                        args += ["-f", "%s@%d" % (paths[dist][script], weight)]
                    env = {"PGOPTIONS": "-c default_transaction_isolation=serializable"} if serializable else None
                    out = cl.pgbench(args, db="ycsb", env=env)
                    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
                    lat = re.search(r"latency average = ([0-9.]+) ms", out)
                    if not m:
                        raise BenchError("ycsb %s/%s: no tps in pgbench output: %s" % (wl, dist, out[-1000:]))
                    case = "%s-%s" % (wl, dist)
                    m_failed = re.search(r"number of failed transactions: (\d+)", out)
                    failed = int(m_failed.group(1)) if m_failed else 0
                    if serializable:
                        retries = re.search(r"total number of retries: (\d+)", out)
                        res.add(case, "serialization_failures", "count", "lower", side, rep,
                                (int(retries.group(1)) if retries else 0) + failed)
                    res.add(case, "tps", "tps", "higher", side, rep, float(m.group(1)))
                    if lat:
                        res.add(case, "latency_avg_ms", "ms", "lower", side, rep, float(lat.group(1)))
                    if failed:
                        res.add(case, "failed_transactions", "count", "lower", side, rep, failed)
            res.add("end", "index_bytes_after_workloads", "bytes", "lower", side, rep,
                    index_bytes(c)[0])
            res.add("end", "rows_after_workloads", "rows", "none", side, rep,
                    c.execute("SELECT count(*) FROM usertable").fetchone()[0])
            hot_updates_after_vacuum(a, cl, c, res, side, rep, paths, seconds)
    c.close()
    cl.drop_db("ycsb")
    res.params.update({"usertable rows": n, "row": "%d fields x %d bytes" % (FIELDS, FIELD_LEN),
                       "zipfian": "permute(random_zipfian(1, n, %s), n)" % ZIPF_S,
                       "clients": a.clients, "threads": a.threads, "seconds per workload and side": seconds,
                       "pgbench": "-M prepared"})
    res.note("workloads run in the order C, B, A, E, E-serializable on a fresh copy of usertable per side; "
             "E inserts new keys above n from a sequence; then VACUUM and U (update-only zipfian, "
             "3 x the time, TPS and slowest 5 s interval)")

