"""Suite `tpcc`: TPC-C through go-tpc v1.0.9's postgres driver.

The data is loaded once (go-tpc prepare, which also runs its consistency
checks) into tpcc_base; each side then gets a copy (CREATE DATABASE ...
TEMPLATE, a file copy instead of a two-minute reload), its indexes rebuilt
with the side's AM (harness.rebuild_indexes: the nine primary keys become
UNIQUE indexes, the four secondary indexes are recreated; go-tpc's postgres
schema has no foreign keys and its transactions use no INSERT ... ON
CONFLICT; only warehouse's key stays a btree PRIMARY KEY, see KEEP), then `go-tpc tpcc run` and
`go-tpc tpcc check` (the consistency conditions, so wrong index answers show
as a failure, not as a fast run).

go-tpc builds a postgres:// URL from -H/-P, and lib/pq sorts the URL's
parameters before applying them, so a host= in --conn-params cannot point it
at a unix socket: bench/run.sh lets the cluster listen on 127.0.0.1 for tpcc.
"""

import os
import re
import subprocess
import time

from harness import BenchError, index_bytes, log, rebuild_indexes


def table_bytes(c, schema="public"):
    """Total bytes of the tables of `schema` (main fork; TOAST and indexes not included)."""
    return int(c.execute("SELECT coalesce(sum(pg_relation_size(c.oid)), 0) FROM pg_class c "
                         "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                         (schema,)).fetchone()[0])


def convert_tables(c, table_am, schema="public"):
    """ALTER TABLE ... SET ACCESS METHOD for every table of `schema` (rewrites
    each table and rebuilds its indexes), then VACUUM: a table AM that
    compacts (hasis) does so there, as a heap table was vacuumed after the
    load. Returns seconds."""
    t0 = time.time()
    tables = [r[0] for r in c.execute("SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                      "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 1", (schema,)).fetchall()]
    for t in tables:
        c.execute("ALTER TABLE %s SET ACCESS METHOD %s" % (t, table_am))
        c.execute("VACUUM %s" % t)
    return time.time() - t0

# go-tpc's consistency check 3.3.2.8 selects w_ytd grouped by w_id only, which
# PostgreSQL accepts only when w_id is the PRIMARY KEY (functional dependency);
# warehouse has one row per warehouse, so keeping its btree key costs nothing.
KEEP = {"warehouse_pkey": "go-tpc's check 3.3.2.8 (SELECT w_ytd ... GROUP BY w_id) needs the PRIMARY KEY constraint "
                          "(functional dependency); one row per warehouse"}

OPS = ["NEW_ORDER", "PAYMENT", "ORDER_STATUS", "DELIVERY", "STOCK_LEVEL"]


def gotpc(a, args, db, timeout, workload="tpcc"):
    """Runs `go-tpc WORKLOAD ARGS` against database `db` (workload tpcc, or
    ch: CH-benCHmark, TPC-C clients plus analytical clients); its output."""
    cmd = [a.gotpc, workload] + args + ["-d", "postgres", "-H", "127.0.0.1", "-P", str(a.port), "-U", a.user,
                                     "-D", db, "--conn-params", "sslmode=disable"]
    log("  $ %s" % " ".join(cmd))
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError("go-tpc %s did not finish within %d s" % (args[0], timeout))
    out = p.stdout.decode(errors="replace")
    with open(os.path.join(a.work, "go-tpc-%s-%s-%s.log" % (db, workload, args[0])), "a") as f:
        f.write("$ %s\n%s\n" % (" ".join(cmd), out))
    if p.returncode != 0:
        raise BenchError("go-tpc %s failed (exit %d): %s" % (args[0], p.returncode, out[-3000:]))
    return out


def server_errors(a, since):
    """{message: count} of the ERROR lines the server logged after byte `since`
    (go-tpc counts failed transactions but does not say why)."""
    path = os.path.join(os.path.dirname(a.host), "postgres.log")
    kinds = {}
    try:
        with open(path, errors="replace") as f:
            f.seek(since)
            for line in f:
                m = re.search(r"ERROR:\s+(.*)$", line)
                if m:
                    k = re.sub(r"\d+", "N", m.group(1).strip())[:120]
                    kinds[k] = kinds.get(k, 0) + 1
    except OSError:
        pass
    return kinds


def log_size(a):
    try:
        return os.path.getsize(os.path.join(os.path.dirname(a.host), "postgres.log"))
    except OSError:
        return 0


def parse_summary(out):
    """{op: {field: value}} from go-tpc's "[Summary] OP - Takes(s): 1.0, Count: ..." lines, and tpmC."""
    ops = {}
    for line in out.splitlines():
        m = re.match(r"\[Summary\] (\S+)\s+- (.*)$", line.strip())
        if m:
            fields = {}
            for kv in m.group(2).split(","):
                k, _, v = kv.partition(":")
                try:
                    fields[k.strip()] = float(v)
                except ValueError:
                    pass
            ops[m.group(1)] = fields
    m = re.search(r"tpmC: ([0-9.]+), tpmTotal: ([0-9.]+)", out)
    return ops, (float(m.group(1)), float(m.group(2))) if m else (None, None)


def run(a, cl, res):
    if not a.gotpc:
        raise BenchError("no go-tpc binary (bench/run.sh builds it)")
    wh = a.warehouses or a.size["warehouses"]
    seconds = a.seconds or a.size["tpcc_seconds"]
    log("tpcc: loading %d warehouse(s) into tpcc_base" % wh)
    # elastic_btree needs a memcmp key order: under the cluster's C.UTF-8 it would refuse
    # customer's (c_w_id, c_d_id, c_last, c_first) index, so both sides get a "C" database
    collate_c = a.index_am == "elastic_btree"
    cl.create_db("tpcc_base", collate_c=collate_c)
    if collate_c:
        res.note("database collation \"C\" (for elastic_btree's text keys), on both sides")
    t0 = time.time()
    # go-tpc's own checks of its load read heap and btree only; the smoke run
    # (the test suite's step) skips them, and checks each AM side after its run
    no_check = ["--no-check"] if a.smoke else []
    out = gotpc(a, ["prepare", "--warehouses", str(wh), "-T", str(a.threads)] + no_check, "tpcc_base", 7200)
    load_s = time.time() - t0
    if "check" in out.lower() and "fail" in out.lower():
        raise BenchError("go-tpc prepare's checks failed: %s" % out[-2000:])
    with cl.connect("tpcc_base") as c:
        c.execute("VACUUM ANALYZE")
        n_idx = c.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'public'").fetchone()[0]
    res.note("go-tpc prepare (%d warehouse(s), %d threads, %s): %.0f s; %d indexes in the schema"
             % (wh, a.threads, "without its checks" if a.smoke else "incl. its checks", load_s, n_idx))
    for rep in range(a.repeat):
        order = [1, 0] if rep % 2 == 0 else [0, 1]
        for side in order:
            am, table_am = a.sides[side]
            log("tpcc rep %d/%d: %s (table AM %s)" % (rep + 1, a.repeat, am, table_am))
            cl.create_db("tpcc", template="tpcc_base")
            with cl.connect("tpcc") as c:
                conv = convert_tables(c, table_am) if table_am != "heap" else 0.0
                res.add("schema", "table_convert_s", "s", "lower", side, rep, conv)
                secs, kept = rebuild_indexes(c, am, a.reloptions, keep=KEEP)
                for k in kept:
                    res.note("%s: %s" % (res.sides[side], k))
                c.execute("ANALYZE")
                c.execute("CHECKPOINT")
                res.add("schema", "index_rebuild_s", "s", "lower", side, rep, secs)
                res.add("schema", "index_bytes_after_build", "bytes", "lower", side, rep, index_bytes(c)[0])
                res.add("schema", "table_bytes_after_load", "bytes", "lower", side, rep, table_bytes(c))
                wal_at = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            log_at = log_size(a)
            # without --ignore-error a go-tpc worker thread stops at its first error
            # (e.g. a deadlock), and the rest of the run has fewer clients
            out = gotpc(a, ["run", "--ignore-error", "--warehouses", str(wh), "-T", str(a.threads), "--time", "%ds" % seconds,
                            "--interval", "%ds" % max(seconds, 10)], "tpcc", seconds * 3 + 300)
            ops, (tpmc, tpmtotal) = parse_summary(out)
            if tpmc is None:
                raise BenchError("no tpmC in go-tpc output: %s" % out[-2000:])
            res.add("throughput", "tpmC", "tpm", "higher", side, rep, tpmc)
            txns = sum(ops.get(op, {}).get("Count", 0) for op in OPS)
            with cl.connect("tpcc") as c:
                wal = int(c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (wal_at,)).fetchone()[0])
            if txns:
                res.add("throughput", "wal_bytes_per_txn", "bytes", "lower", side, rep, wal / txns)
            res.add("throughput", "tpmTotal", "tpm", "higher", side, rep, tpmtotal)
            errors = 0
            for op in OPS:
                f = ops.get(op)
                if f:
                    for pct, key in (("p50", "50th(ms)"), ("p95", "95th(ms)"), ("p99", "99th(ms)")):
                        if key in f:
                            res.add(op.lower(), "latency_%s_ms" % pct, "ms", "lower", side, rep, f[key])
                e = ops.get(op + "_ERR", {}).get("Count", 0)
                errors += e
                res.add(op.lower(), "errors", "count", "lower", side, rep, e)
            res.add("throughput", "errors", "count", "lower", side, rep, errors)
            for k, cnt in sorted(server_errors(a, log_at).items(), key=lambda kv: -kv[1])[:4]:
                res.note("%s rep %d: server logged %dx ERROR: %s" % (res.sides[side], rep + 1, cnt, k))
            with cl.connect("tpcc") as c:
                res.add("schema", "index_bytes_after_run", "bytes", "lower", side, rep, index_bytes(c)[0])
                res.add("schema", "table_bytes_after_run", "bytes", "lower", side, rep, table_bytes(c))
            if a.smoke and side == 0:
                # the built-in side's consistency is PostgreSQL's; the smoke
                # run spends its minute on the AM side's check only
                res.note("%s: go-tpc tpcc check skipped (smoke run, built-in side)" % res.sides[side])
                continue
            t0 = time.time()
            out = gotpc(a, ["check", "--warehouses", str(wh), "-T", str(a.threads)], "tpcc", 3600)
            if "failed" in out:
                raise BenchError("go-tpc tpcc check failed on %s: %s" % (am, out[-2000:]))
            n_checks = len(re.findall(r"begin to check warehouse", out))
            res.note("%s: go-tpc tpcc check after the run passed (%d conditions, %.0f s)"
                     % (res.sides[side], n_checks, time.time() - t0))
    cl.drop_db("tpcc")
    with cl.connect() as c:
        fpw, cpt = c.execute("SELECT current_setting('full_page_writes'), current_setting('checkpoint_timeout')").fetchone()
    res.note("full_page_writes = %s, checkpoint_timeout = %s, a CHECKPOINT before each side's run: %s"
             % (fpw, cpt, "WAL bytes include the full-page images of every page first changed after it (on both sides)"
                if fpw == "on" else "the WAL bytes hold no full-page images (on either side)"))
    res.params.update({"warehouses": wh, "threads (go-tpc -T)": a.threads, "seconds per side": seconds,
                       "go-tpc": "v1.0.9, postgres driver, default weights 45/43/4/4/4, no keying/think time"})
    res.note("every side runs on a copy of the same loaded database; primary keys become UNIQUE indexes "
             "of the side's AM (btree included, so both sides have the same schema shape)")
