"""Suite `tiered`: issue 11's benchmark of a tiered index against the
built-in baseline (btree for tiered_btree, hash for tiered_hash: run.sh
--baseline hash), in the same run.

With the hash baseline, both sides get the same definition PostgreSQL's
hash index allows: a plain index on k (no UNIQUE, no INCLUDE), so every
read also reads the heap; scan100 is not run (hash has no order).

kv(k int8, payload text) with a 120-byte payload, n rows (default 10M),
a UNIQUE index on k INCLUDE (payload) of the side's AM, so every read is an
index-only covering lookup.  The cluster runs with small shared_buffers
(run.sh gives this suite 128MB unless told otherwise: at most 1/8 of the
index) and its memory cgroup caps the OS page cache (run.sh --cache-cap),
so buffer misses are real reads.

Keys: YCSB's own zipfian generator (theta 0.9, which pgbench's
random_zipfian cannot do: it needs s > 1), computed in the pgbench script
from the precomputed zeta constants, then scrambled by permute() as YCSB's
ScrambledZipfian hashes ranks; or uniform.

Workloads per side, on a fresh copy of the loaded table, each measured for
`seconds` after a warm-up as long with the same script (the paper warms
up until throughput is stable; a hot tier fills in seconds, then CLOCK
needs a few turns to settle on the hot records):
  C-zipfian, C-uniform  100% point reads
  A-zipfian             50% reads, 50% updates of the payload (an index insert each)
  scan100               SELECT ... WHERE k >= :k ORDER BY k LIMIT 100, uniform k
  load                  random-order inserts of rows into an empty indexed table
Per workload: TPS, average latency, and buffer reads per transaction from
pg_stat_database (blks_read: every relation) and pg_statio_user_indexes
(idx_blks_read: the index).  On the AM side, C-zipfian is also run with the
hot tier sized 1/8, 1/4, 1/2 and 1 x shared_buffers (the curve of the
paper's Figure: throughput and reads per op against the hot-tier size).
"""

import os
import re
import time

from harness import BenchError, index_bytes, log, set_cap

PAYLOAD = 120
THETA = 0.9
SEED = 5432


def zipf_constants(n, theta):
    """YCSB ZipfianGenerator's constants for items 0..n-1."""
    zetan = 0.0
    # summed from the small terms up, for accuracy
    for i in range(n, 0, -1):
        zetan += 1.0 / (i ** theta)
    zeta2 = 1.0 + 0.5 ** theta
    alpha = 1.0 / (1.0 - theta)
    eta = (1.0 - (2.0 / n) ** (1.0 - theta)) / (1.0 - zeta2 / zetan)
    return zetan, zeta2, alpha, eta


def key_lines(dist, n, consts):
    if dist == "uniform":
        return "\\set k random(1, %d)\n" % n
    zetan, zeta2, alpha, eta = consts
    # YCSB: uz = u * zetan; rank 0 if uz < 1, 1 if uz < 1 + 0.5^theta,
    # else n * (eta * u - eta + 1)^alpha; then scrambled over the key space
    return ("\\set r random(0, 2147483646)\n"
            "\\set u :r / 2147483647.0\n"
            "\\set uz :u * %r\n"
            "\\set rank CASE WHEN :uz < 1.0 THEN 0 WHEN :uz < %r THEN 1 "
            "ELSE least(int(%d * pow(%r * :u - %r + 1.0, %r)), %d) END\n"
            "\\set k 1 + permute(:rank, %d, %d)\n"
            % (zetan, zeta2, n, eta, eta, alpha, n - 1, n, SEED))


def scripts(work, n, consts):
    body = {}
    for dist in ("zipfian", "uniform"):
        k = key_lines(dist, n, consts)
        body["read_" + dist] = k + "SELECT payload FROM kv WHERE k = :k;\n"
        body["update_" + dist] = (k + "\\set v random(1, 1000000000)\n"
                                  "UPDATE kv SET payload = lpad(:v::text, %d, 'u') WHERE k = :k;\n" % PAYLOAD)
    body["scan100"] = key_lines("uniform", n, consts) + \
        "SELECT k, payload FROM kv WHERE k >= :k ORDER BY k LIMIT 100;\n"
    paths = {}
    for name, text in body.items():
        p = os.path.join(work, "tiered_%s.sql" % name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o644)
        paths[name] = p
    return paths


def reads(c):
    """(blks_read of the database, idx_blks_read of kv's index)."""
    c.execute("SELECT pg_stat_clear_snapshot()")
    db = c.execute("SELECT blks_read FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
    ix = c.execute("SELECT coalesce(sum(idx_blks_read), 0) FROM pg_statio_user_indexes "
                   "WHERE indexrelname = 'kv_k'").fetchone()[0]
    return int(db), int(ix)


def pgbench_run(a, cl, c, files, seconds):
    """Runs pgbench over `files` [(path, weight)]; returns (tps, latency ms,
    transactions, blks_read, idx_blks_read)."""
    args = ["-n", "-M", "prepared", "-c", str(a.clients), "-j", str(a.threads), "-T", str(seconds)]
    for p, w in files:
        args += ["-f", "%s@%d" % (p, w)]
    before = reads(c)
    out = cl.pgbench(args, db="tiered")
    # the clients' statistics reach shared memory when they exit
    time.sleep(1.5)
    after = reads(c)
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    lat = re.search(r"latency average = ([0-9.]+) ms", out)
    tx = re.search(r"number of transactions actually processed: (\d+)", out)
    if not m or not tx:
        raise BenchError("tiered: no tps in pgbench output: %s" % out[-1000:])
    return float(m.group(1)), float(lat.group(1)) if lat else None, int(tx.group(1)), \
        after[0] - before[0], after[1] - before[1]


def hot_counts(c):
    """(point reads, hot-tier hits) of kv_k, or None when it has no hot tier."""
    row = c.execute("SELECT point_reads, hot_hits FROM pg_hybrid.index_stats('kv_k')").fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def measure(a, cl, c, res, case, side, rep, files, seconds, tiered=False):
    pgbench_run(a, cl, c, files, seconds)   # warm-up
    before = hot_counts(c) if tiered else None
    tps, lat, tx, blks, ixblks = pgbench_run(a, cl, c, files, seconds)
    if before:
        after = hot_counts(c)
        reads = after[0] - before[0]
        if reads > 0:
            # the measured run's own ratio (the view's is since the start)
            res.add(case, "hot_hit_ratio_run", "ratio", "higher", side, rep, (after[1] - before[1]) / reads)
    res.add(case, "tps", "tps", "higher", side, rep, tps)
    if lat is not None:
        res.add(case, "latency_avg_ms", "ms", "lower", side, rep, lat)
    res.add(case, "blks_read_per_tx", "blocks", "lower", side, rep, blks / max(1, tx))
    res.add(case, "idx_blks_read_per_tx", "blocks", "lower", side, rep, ixblks / max(1, tx))
    return tps


def hot_figures(c, res, case, side, rep):
    row = c.execute("SELECT hot_records, hot_bytes, hot_hit_ratio, promotions, evictions "
                    "FROM pg_hybrid.index_stats('kv_k')").fetchone()
    if row and row[0] is not None:
        res.add(case, "hot_records", "records", "none", side, rep, row[0], quiet=True)
        res.add(case, "hot_bytes", "bytes", "none", side, rep, row[1], quiet=True)



def size_text(b):
    return "%dMB" % (b >> 20) if b >= (1 << 20) else "%dkB" % max(64, b >> 10)


def run(a, cl, res):
    n = a.rows or a.size["tiered_rows"]
    seconds = a.seconds or a.size["tiered_seconds"]
    load_rows = max(1000, n // 10)
    cl.create_db("tiered")
    c = cl.connect("tiered")
    sb = int(c.execute("SELECT setting::int8 * 8192 FROM pg_settings WHERE name = 'shared_buffers'").fetchone()[0])
    arena = None
    if not cl.standin:
        arena = int(c.execute("SELECT setting::int8 * 1024 * 1024 FROM pg_settings "
                              "WHERE name = 'pg_hybrid.shared_memory'").fetchone()[0])
    log("tiered: zeta constants for n = %d, theta %.2f" % (n, THETA))
    consts = zipf_constants(n, THETA)
    paths = scripts(a.work, n, consts)
    log("tiered: loading kv_base (%d rows, %d-byte payload)" % (n, PAYLOAD))
    t0 = time.time()
    c.execute("DROP TABLE IF EXISTS kv, kv_base, kv_load, kv_load_src")
    c.execute("CREATE TABLE kv_base (k int8 NOT NULL, payload text NOT NULL) WITH (autovacuum_enabled = off)")
    c.execute("INSERT INTO kv_base SELECT g, rpad(md5(g::text), %d, md5((g * 7)::text)) "
              "FROM generate_series(1, %d) g" % (PAYLOAD, n))
    # the random-order load's rows, in their insertion order
    c.execute("CREATE TABLE kv_load_src AS SELECT g AS k, rpad(md5(g::text), %d, 'l') AS payload "
              "FROM generate_series(1, %d) g ORDER BY md5(g::text)" % (PAYLOAD, load_rows))
    res.note("load of kv_base: %.1f s" % (time.time() - t0))
    hot_default = None
    # PostgreSQL's hash index: neither UNIQUE nor INCLUDE, no ordered scans
    hash_baseline = a.baseline == "hash"
    unique, include = ("", "") if hash_baseline else ("UNIQUE ", " INCLUDE (payload)")
    cases = [("C-zipfian", [(paths["read_zipfian"], 100)]),
             ("C-uniform", [(paths["read_uniform"], 100)])]
    if not hash_baseline:
        cases.append(("scan100", [(paths["scan100"], 100)]))
    cases.append(("A-zipfian", [(paths["read_zipfian"], 50), (paths["update_zipfian"], 50)]))
    for rep in range(a.repeat):
        order = [1, 0] if rep % 2 == 0 else [0, 1]
        for side in order:
            am, _table_am = a.sides[side]
            tiered = am.startswith("tiered")
            log("tiered rep %d/%d: %s" % (rep + 1, a.repeat, am))
            c.execute("DROP TABLE IF EXISTS kv, kv_load")
            c.execute("CREATE TABLE kv (LIKE kv_base) WITH (autovacuum_enabled = off)")
            c.execute("INSERT INTO kv SELECT * FROM kv_base")
            opts = " WITH (%s)" % a.reloptions if a.reloptions and am != a.baseline else ""
            t0 = time.time()
            c.execute("CREATE %sINDEX kv_k ON kv USING %s (k)%s%s" % (unique, am, include, opts))
            res.add("build", "index_build_s", "s", "lower", side, rep, time.time() - t0)
            c.execute("VACUUM ANALYZE kv")
            c.execute("CHECKPOINT")
            ib = index_bytes(c)[0]
            res.add("build", "index_bytes", "bytes", "lower", side, rep, ib)
            if rep == 0 and side == order[0]:
                res.note("shared_buffers %s, the index %s (%.1f x shared_buffers)" % (size_text(sb), size_text(ib), ib / sb))
            if tiered and hot_default is None:
                hot_default = c.execute("SELECT hot_bytes FROM pg_hybrid.index_stats('kv_k')").fetchone()
            set_cap(a, True)
            for case, files in cases:
                measure(a, cl, c, res, case, side, rep, files, seconds, tiered)
                if tiered:
                    hot_figures(c, res, case, side, rep)
            if tiered and arena:
                # the curve: C-zipfian against the hot tier's bound
                # (the smoke run takes one point of it)
                for frac, label in ((8, "1/8"),) if a.smoke else ((8, "1/8"), (4, "1/4"), (2, "1/2"), (1, "1")):
                    hs = min(sb // frac, arena // 2)
                    c.execute("ALTER INDEX kv_k SET (hot_size = '%s')" % size_text(hs))
                    measure(a, cl, c, res, "C-zipfian hot=%s sb" % label, side, rep,
                            [(paths["read_zipfian"], 100)], seconds, tiered)
                    hot_figures(c, res, "C-zipfian hot=%s sb" % label, side, rep)
            res.add("end", "index_bytes_after_workloads", "bytes", "lower", side, rep, index_bytes(c)[0])
            # random-order load into an empty indexed table
            c.execute("DROP TABLE kv")
            c.execute("CREATE TABLE kv_load (LIKE kv_base) WITH (autovacuum_enabled = off)")
            c.execute("CREATE %sINDEX kv_load_k ON kv_load USING %s (k)%s%s" % (unique, am, include, opts))
            t0 = time.time()
            c.execute("INSERT INTO kv_load SELECT * FROM kv_load_src")
            secs = time.time() - t0
            res.add("load", "rows_per_s", "rows/s", "higher", side, rep, load_rows / secs)
            set_cap(a, False)
            c.execute("DROP TABLE kv_load")
    c.close()
    cl.drop_db("tiered")
    res.params.update({"kv rows": n,
                       "payload": ("%d bytes in the heap (a plain index on k: hash allows no UNIQUE or INCLUDE)"
                                   if hash_baseline else "%d bytes, INCLUDE column of the unique index") % PAYLOAD,
                       "zipfian": "YCSB ScrambledZipfian, theta %.2f (constants in the script, permute seed %d)"
                                  % (THETA, SEED),
                       "clients": a.clients, "threads": a.threads,
                       "seconds per workload and side": "%d (+ %d warm-up)" % (seconds, seconds),
                       "random-order load": "%d rows" % load_rows, "pgbench": "-M prepared",
                       "shared_buffers": size_text(sb)})
    if hot_default:
        res.note("the AM side's hot tier: bound %s (pg_hybrid.hot_size_fraction of shared_buffers) "
                 "unless a curve case says otherwise; it is shared memory on top of shared_buffers"
                 % (a.reloptions or "default"))
    if a.cgroup:
        res.note("measured with the cluster's memory cgroup limited to %d MB (shared_buffers, "
                 "pg_hybrid's shared memory and what is left for the page cache); loads and "
                 "index builds ran without the limit" % (a.cap_bytes >> 20))
    else:
        res.note("the page cache was not capped (--cache-cap 0): misses may be served by the OS cache")
    res.note("buffer reads per transaction: blks_read of the database (heap, visibility map and index) "
             "and idx_blks_read of the index, from the statistics views, over the measured run")
