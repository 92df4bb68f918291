"""Suite `htap`: CH-benCHmark through go-tpc v1.0.9 (`go-tpc ch`), on heap
tables against the table AM's (issue 13's HTAP run).

The TPC-C data (go-tpc tpcc prepare) plus CH-benCHmark's supplier, nation
and region tables and its revenue1 view (go-tpc ch prepare) are loaded once
into htap_base. Each side, each repetition, runs two measurements, each on
a fresh copy of htap_base (CREATE DATABASE ... TEMPLATE, in --tablespace
when given, so on the emulated CSD both sides share the device):

- **oltp**: `go-tpc tpcc run`, the TPC-C clients alone: tpmC;
- **htap**: `go-tpc ch run`, the same TPC-C clients plus one analytical
  client that runs the 22 CH queries in order, over and over, on the tables
  the clients are changing: tpmC, each query's time, queries per hour.

The table AM side's copy gets `ALTER TABLE ... SET ACCESS METHOD` and
VACUUM per table (suite_tpcc.convert_tables); indexes stay go-tpc's btree
ones unless --index-am names another AM. A hasis side also reports what
its compactions wrote during the htap run, logical against physical bytes
on the CSD meter (pg_hybrid.table_stats).

The analytical client starts at Q1 in every run, so a side whose queries
are faster gets further through the list: compare per-query times only for
queries both sides finished (the report shows n/a otherwise), and the
number finished. A query still running when the time is up is cancelled
and counted by go-tpc as an error (Qn_ERR), not as a time.
"""

import re
import time

from harness import BenchError, compaction_written, log, rebuild_indexes, set_cap
from suite_tpcc import KEEP, OPS, convert_tables, gotpc, log_size, parse_summary, server_errors, table_bytes

QUERIES = ["Q%d" % i for i in range(1, 23)]
BASE = "htap_base"
DB = "htap"


def prepare(a, cl, wh):
    cl.create_db(BASE)
    t0 = time.time()
    # go-tpc's checks of its own load (heap and btree) are skipped in the smoke run
    gotpc(a, ["prepare", "--warehouses", str(wh), "-T", str(a.threads)] + (["--no-check"] if a.smoke else []), BASE, 7200)
    gotpc(a, ["prepare"], BASE, 1800, workload="ch")
    with cl.connect(BASE) as c:
        c.execute("VACUUM ANALYZE")
        size = int(c.execute("SELECT pg_database_size(current_database())").fetchone()[0])
    return time.time() - t0, size


def side_copy(a, cl, res, side, rep, mode):
    """A fresh copy of the loaded data for one measurement, on the side's
    table AM and index AM; returns the compaction bytes written so far (a
    hasis side; else None) and the WAL insert position, to subtract."""
    am, table_am = a.sides[side]
    cl.create_db(DB, template=BASE, tablespace=a.tablespace)
    with cl.connect(DB) as c:
        conv = convert_tables(c, table_am) if table_am != "heap" else 0.0
        if mode == "htap":
            res.add("schema", "table_convert_s", "s", "lower", side, rep, conv)
        if am != "btree":
            secs, kept = rebuild_indexes(c, am, a.reloptions, keep=KEEP)
            if mode == "htap" and rep == 0:
                for k in kept:
                    res.note("%s: %s" % (res.sides[side], k))
        c.execute("ANALYZE")
        c.execute("CHECKPOINT")
        if mode == "htap":
            res.add("schema", "table_bytes_before_run", "bytes", "lower", side, rep, table_bytes(c))
        written = compaction_written(c) if table_am == "hasis" else None
        wal_at = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    return written, wal_at


def run(a, cl, res):
    if not a.gotpc:
        raise BenchError("no go-tpc binary (bench/run.sh builds it)")
    wh = a.warehouses or a.size["warehouses"]
    seconds = a.seconds or a.size["tpcc_seconds"]
    log("htap: loading %d warehouse(s) and CH-benCHmark's tables into %s" % (wh, BASE))
    load_s, size = prepare(a, cl, wh)
    res.note("go-tpc tpcc prepare + ch prepare (%d warehouse(s), %d threads): %.0f s, %d MB on heap with indexes"
             % (wh, a.threads, load_s, size >> 20))
    finished = [[], []]
    for rep in range(a.repeat):
        order = [1, 0] if rep % 2 == 0 else [0, 1]
        for side in order:
            am, table_am = a.sides[side]
            alone = None
            for mode in ("oltp", "htap"):
                log("htap rep %d/%d: %s (table AM %s), %s" % (rep + 1, a.repeat, am, table_am, mode))
                written0, wal_at = side_copy(a, cl, res, side, rep, mode)
                log_at = log_size(a)
                common = ["--ignore-error", "--warehouses", str(wh), "-T", str(a.threads), "--time", "%ds" % seconds,
                          "--interval", "%ds" % max(seconds, 10)]
                capped = set_cap(a, True)
                try:
                    if mode == "oltp":
                        out = gotpc(a, ["run"] + common, DB, seconds * 3 + 300)
                    else:
                        out = gotpc(a, ["run", "-t", "1"] + common, DB, seconds * 3 + 600, workload="ch")
                finally:
                    if capped:
                        set_cap(a, False)
                ops, (tpmc, _) = parse_summary(out)
                if tpmc is None:
                    raise BenchError("no tpmC in go-tpc output: %s" % out[-2000:])
                errors = sum(ops.get(op + "_ERR", {}).get("Count", 0) for op in OPS)
                for k, cnt in sorted(server_errors(a, log_at).items(), key=lambda kv: -kv[1])[:3]:
                    if "canceling statement due to user request" not in k:
                        res.note("%s rep %d %s: server logged %dx ERROR: %s" % (res.sides[side], rep + 1, mode, cnt, k))
                if mode == "oltp":
                    alone = tpmc
                    res.add("oltp", "tpmC", "tpm", "higher", side, rep, tpmc)
                    res.add("oltp", "errors", "count", "lower", side, rep, errors)
                    continue
                res.add("htap", "tpmC", "tpm", "higher", side, rep, tpmc)
                res.add("htap", "tpmC_share_of_oltp_alone", "ratio", "higher", side, rep, tpmc / alone if alone else None)
                res.add("htap", "tpcc_errors", "count", "lower", side, rep, errors)
                done = 0
                for q in QUERIES:
                    f = ops.get(q)
                    if f and f.get("Count"):
                        done += int(f["Count"])
                        res.add(q.lower(), "avg_ms", "ms", "lower", side, rep, f.get("Avg(ms)"))
                res.add("htap", "queries_finished", "count", "higher", side, rep, done)
                finished[side].append(done)
                m = re.search(r"QphH: ([0-9.]+)", out)
                if m:
                    res.add("htap", "QphH", "queries/h", "higher", side, rep, float(m.group(1)))
                with cl.connect(DB) as c:
                    wal = int(c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (wal_at,)).fetchone()[0])
                    res.add("htap", "wal_bytes", "bytes", "lower", side, rep, wal)
                    res.add("schema", "table_bytes_after_run", "bytes", "lower", side, rep, table_bytes(c))
                    if written0 is not None:
                        w1, p1 = compaction_written(c)
                        logical, physical = w1 - written0[0], p1 - written0[1]
                        res.add("compaction", "written_bytes", "bytes", "lower", side, rep, logical)
                        res.add("compaction", "physical_bytes", "bytes", "lower", side, rep, physical)
                        if logical:
                            res.add("compaction", "physical_share", "ratio", "lower", side, rep, physical / logical)
    cl.drop_db(DB)
    res.params.update({"warehouses": wh, "TPC-C clients (go-tpc -T)": a.threads, "analytical clients (go-tpc -t)": 1,
                       "seconds per measurement": seconds,
                       "go-tpc": "v1.0.9, postgres driver, TPC-C weights 45/43/4/4/4, no keying/think time; "
                                 "CH queries Q1..Q22 in order, repeated"})
    res.note("each measurement runs on a fresh copy of the loaded database (CREATE DATABASE ... TEMPLATE%s)"
             % (", in tablespace %s" % a.tablespace if a.tablespace else ""))
    res.note("htap: the analytical client starts at Q1 in every run and a query still running when time is up is "
             "cancelled, so per-query times exist only for the queries a side finished (n/a otherwise); "
             "queries finished per run: %s" % "; ".join("%s %s" % (res.sides[s], finished[s]) for s in (0, 1)))
    if a.cgroup:
        res.note("the runs (not the loads and copies) ran with the cluster's memory cgroup limited to %d MB"
                 % (a.cap_bytes >> 20))
