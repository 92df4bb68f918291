"""Suite `pgbench` with --table-am AM (not heap): pgbench's own TPC-B tables
on heap (side 0, the baseline) and on AM (side 1), the targets of issue 12.

Per repetition and side (alternating which side goes first), in a fresh
database:
  load         `pgbench -i -I dtgvp -s SCALE` with default_table_access_method
               set for the side through PGOPTIONS (pgbench 15 has no
               --table-access-method), so all four tables are created with
               the side's table AM; the primary keys are btree (with
               --index-am X they are rebuilt as UNIQUE indexes of X on the AM
               side, harness.rebuild_indexes).  Reported: pgbench -i's wall
               time and its steps, pg_table_size of the four tables (sum and
               per table), index bytes.
  tpcb         VACUUM ANALYZE, CHECKPOINT, pg_prewarm of tables and indexes,
               then pgbench's built-in TPC-B-like script (`-n -M prepared`;
               `--protocol simple|extended` plans every statement instead):
               TPS, average latency, WAL bytes per transaction
               (pg_current_wal_insert_lsn() before/after / transactions
               processed); then table and index bytes after the run.
  select_only  `pgbench -n -S -M prepared` (point lookups on
               pgbench_accounts' key) on the tables as TPC-B left them.
  select_only_vacuumed
               VACUUM, CHECKPOINT, then the same -S run again (the tables
               as autovacuum leaves a read-mostly table: all-visible).
After each run the TPC-B invariant is checked: sum(abalance) = sum(bbalance)
= sum(tbalance) = sum(delta) of pgbench_history, pgbench_history holds one
row per committed TPC-B transaction, pgbench_accounts holds SCALE * 100000
rows.  A violation is reported and fails the run (after the report).

Targets (issue 12, ratio AM side / heap side, median of the per-repetition
paired ratios): TPC-B TPS >= 0.9, -S TPS >= 0.95, WAL bytes per TPC-B
transaction <= 1.5.
"""

import re
import statistics
import time

import psycopg

from harness import BenchError, index_bytes, log, rebuild_indexes

DB = "pgbench_tam"
TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")
DEFAULT_SCALE = 10
# (case, metric, op, limit, what)
TARGETS = [
    ("tpcb", "tps", ">=", 0.9, "TPC-B TPS"),
    ("select_only", "tps", ">=", 0.95, "point lookups (-S) TPS"),
    ("tpcb", "wal_bytes_per_txn", "<=", 1.5, "WAL bytes per TPC-B transaction"),
]


def parse_run(out, what):
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if not m:
        raise BenchError("pgbench %s: no tps in its output: %s" % (what, out[-1500:]))
    lat = re.search(r"latency average = ([0-9.]+) ms", out)
    n = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    return {"tps": float(m.group(1)), "lat": float(lat.group(1)) if lat else None,
            "processed": int(n.group(1)) if n else None, "failed": int(failed.group(1)) if failed else 0}


def init_steps(out):
    """{step: seconds} from pgbench -i's "done in 1.2 s (drop tables 0.0 s, ...)." line."""
    m = re.search(r"done in [0-9.]+ s \(([^)]*)\)", out)
    if not m:
        return {}
    return {k.strip(): float(v) for k, v in re.findall(r"([a-z][a-z -]*?) ([0-9.]+) s", m.group(1))}


def table_sizes(c):
    return {t: int(c.execute("SELECT pg_table_size(%s::regclass)", (t,)).fetchone()[0]) for t in TABLES}


def table_ams(c):
    return dict(c.execute("SELECT c.relname, a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam "
                          "WHERE c.relname = ANY(%s) AND c.relkind = 'r'", (list(TABLES),)).fetchall())


def hasis_stats(c, table):
    try:
        with c.transaction():
            r = c.execute("SELECT row_to_json(s)::text FROM pg_hybrid.table_stats(%s::regclass) s", (table,)).fetchone()
        return r[0]
    except psycopg.Error as e:
        return "table_stats failed: %s" % str(e).strip().splitlines()[0]


def prewarm(c):
    """pg_prewarm of the pgbench tables and their indexes; returns None or why not."""
    try:
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        rels = [r[0] for r in c.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') ORDER BY 1").fetchall()]
        for r in rels:
            c.execute("SELECT pg_prewarm(%s::regclass)", (r,))
        return None
    except psycopg.Error as e:
        return str(e).strip().splitlines()[0]


def invariant(c, scale, history_rows):
    """[] or the ways the TPC-B invariant is broken."""
    a, b, t, d, h, n = c.execute(
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches), "
        "(SELECT sum(tbalance) FROM pgbench_tellers), (SELECT coalesce(sum(delta), 0) FROM pgbench_history), "
        "(SELECT count(*) FROM pgbench_history), (SELECT count(*) FROM pgbench_accounts)").fetchone()
    bad = []
    if not (a == b == t == d):
        bad.append("sum(abalance) %s, sum(bbalance) %s, sum(tbalance) %s, sum(delta) %s differ" % (a, b, t, d))
    if history_rows is not None and h != history_rows:
        bad.append("pgbench_history has %d rows, pgbench committed %d TPC-B transactions" % (h, history_rows))
    if n != scale * 100000:
        bad.append("pgbench_accounts has %d rows, expected %d" % (n, scale * 100000))
    return bad


def run(a, cl, res):
    scale = a.scale or (a.size["scale"] if a.smoke else DEFAULT_SCALE)
    seconds = a.seconds or a.size["seconds"]
    bench = ["-c", str(a.clients), "-j", str(a.threads), "-T", str(seconds)]
    vals = {}          # (case, metric) -> {rep: {side: value}}
    broken = []

    def add(case, metric, unit, better, side, rep, v):
        res.add(case, metric, unit, better, side, rep, v)
        if v is not None:
            vals.setdefault((case, metric), {}).setdefault(rep, {})[side] = v

    def sizes(case, c, side, rep):
        ts = table_sizes(c)
        add(case, "table_bytes", "bytes", "lower", side, rep, sum(ts.values()))
        for t in TABLES:
            add(case, "table_bytes_" + t, "bytes", "lower", side, rep, ts[t])
        add(case, "index_bytes", "bytes", "lower", side, rep, index_bytes(c)[0])

    def one_side(rep, side):
        am, table_am = a.sides[side]
        who = res.sides[side]
        log("pgbench rep %d/%d: %s (tables %s, indexes %s)" % (rep + 1, a.repeat, who, table_am, am))
        cl.create_db(DB)
        env = {"PGOPTIONS": "-c default_table_access_method=%s -c client_min_messages=warning" % table_am}
        t0 = time.time()
        out = cl.pgbench(["-i", "-q", "-I", "dtgvp", "-s", str(scale)], db=DB, env=env)
        add("load", "init_s", "s", "lower", side, rep, time.time() - t0)
        for step, s in init_steps(out).items():
            if step in ("client-side generate", "vacuum", "primary keys"):
                add("load", "init_%s_s" % step.replace("client-side ", "").replace(" ", "_"), "s", "lower",
                    side, rep, s)
        for line in out.splitlines():
            if re.match(r"(WARNING|NOTICE|ERROR)", line.strip()):
                res.note("%s: pgbench -i said: %s" % (who, line.strip()))
        with cl.connect(DB) as c:
            ams = table_ams(c)
            if any(ams.get(t) != table_am for t in TABLES):
                raise BenchError("%s: pgbench's tables are not all %s: %s" % (who, table_am, ams))
            if am != "btree":
                secs, kept = rebuild_indexes(c, am, a.reloptions)
                add("load", "index_rebuild_s", "s", "lower", side, rep, secs)
                for k in kept:
                    res.note("%s: %s" % (who, k))
            sizes("load", c, side, rep)
            if table_am != "heap":
                res.note("%s rep %d: pg_hybrid.table_stats(pgbench_accounts) after load: %s"
                         % (who, rep + 1, hasis_stats(c, "pgbench_accounts")))
            c.execute("VACUUM ANALYZE")
            c.execute("CHECKPOINT")
            why = prewarm(c)
            if why:
                res.note("%s: pg_prewarm not used (%s)" % (who, why))
            wal0 = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        out = cl.pgbench(["-n", "-M", a.protocol] + bench, db=DB, timeout=3 * seconds + 600)
        r = parse_run(out, "TPC-B")
        with cl.connect(DB) as c:
            wal = int(c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (wal0,)).fetchone()[0])
            add("tpcb", "tps", "tps", "higher", side, rep, r["tps"])
            add("tpcb", "latency_avg_ms", "ms", "lower", side, rep, r["lat"])
            add("tpcb", "transactions", "txn", "none", side, rep, r["processed"])
            if r["processed"]:
                add("tpcb", "wal_bytes_per_txn", "bytes/txn", "lower", side, rep, wal / r["processed"])
            if r["failed"]:
                add("tpcb", "failed_transactions", "count", "lower", side, rep, r["failed"])
            bad = invariant(c, scale, r["processed"])
            for b in bad:
                broken.append("%s rep %d after TPC-B: %s" % (who, rep + 1, b))
            sizes("after_tpcb", c, side, rep)
            if table_am != "heap":
                res.note("%s rep %d: pg_hybrid.table_stats(pgbench_accounts) after TPC-B: %s"
                         % (who, rep + 1, hasis_stats(c, "pgbench_accounts")))
        tpcb_rows = r["processed"]
        out = cl.pgbench(["-n", "-S", "-M", a.protocol] + bench, db=DB, timeout=3 * seconds + 600)
        r = parse_run(out, "-S")
        add("select_only", "tps", "tps", "higher", side, rep, r["tps"])
        add("select_only", "latency_avg_ms", "ms", "lower", side, rep, r["lat"])
        with cl.connect(DB) as c:
            bad = invariant(c, scale, tpcb_rows)
            for b in bad:
                broken.append("%s rep %d after -S: %s" % (who, rep + 1, b))
        # Point lookups once VACUUM has run (as autovacuum would on a
        # read-mostly table): heap's pages are all-visible then, and a hasis
        # extent's column part is all-visible, whose fetches skip row headers.
        with cl.connect(DB) as c:
            c.execute("VACUUM")
            c.execute("CHECKPOINT")
        out = cl.pgbench(["-n", "-S", "-M", a.protocol] + bench, db=DB, timeout=3 * seconds + 600)
        r = parse_run(out, "-S after VACUUM")
        add("select_only_vacuumed", "tps", "tps", "higher", side, rep, r["tps"])
        add("select_only_vacuumed", "latency_avg_ms", "ms", "lower", side, rep, r["lat"])
        log("  %s rep %d: TPC-B invariant %s" % (who, rep + 1, "holds" if not bad else "BROKEN"))

    try:
        for rep in range(a.repeat):
            for side in ([1, 0] if rep % 2 == 0 else [0, 1]):
                one_side(rep, side)
    finally:
        report(a, cl, res, vals, broken, scale, seconds)
        try:
            cl.drop_db(DB)
        except psycopg.Error:
            pass
    if broken:
        raise BenchError("TPC-B invariant broken: %s" % "; ".join(broken))


def paired_ratios(per_rep):
    """[side 1 / side 0 of each repetition with both sides measured]"""
    return [s[1] / s[0] for _, s in sorted(per_rep.items()) if 0 in s and 1 in s and s[0]]


def report(a, cl, res, vals, broken, scale, seconds):
    base, am = res.sides
    lines = ["| case | metric | median | min–max | per repetition |", "|---|---|---:|---:|---|"]
    ratios = {}
    for case, metric in res.order:
        rs = paired_ratios(vals.get((case, metric), {}))
        if not rs:
            continue
        ratios["%s/%s" % (case, metric)] = rs
        lines.append("| %s | %s | %.3f | %.3f–%.3f | %s |" % (case, metric, statistics.median(rs), min(rs), max(rs),
                                                             " ".join("%.3f" % x for x in rs)))
    if ratios:
        res.sections.append(("Ratios %s / %s, paired per repetition (median, min–max of %d):"
                             % (am, base, max(len(v) for v in ratios.values())), "\n".join(lines)))
    res.json_extra["ratios_per_repetition"] = ratios
    for case, metric, op, limit, what in TARGETS:
        rs = paired_ratios(vals.get((case, metric), {}))
        med = statistics.median(rs) if rs else None
        ok = med is not None and (med >= limit if op == ">=" else med <= limit)
        span = " (min–max %.3f–%.3f over %d)" % (min(rs), max(rs), len(rs)) if rs else " (not measured)"
        res.targets.append((case, "%s ratio %s/%s %s limit, median of paired runs%s"
                            % (what, am, base, "≥" if op == ">=" else "≤", span), med, limit, ok))
    for b in broken:
        res.note("TPC-B INVARIANT BROKEN: %s" % b)
    if not broken and vals:
        res.note("TPC-B invariant held after every run (sum(abalance) = sum(bbalance) = sum(tbalance) = "
                 "sum(delta), one history row per committed TPC-B transaction, %d accounts)" % (scale * 100000))
    res.params.update({
        "pgbench scale": scale, "accounts": scale * 100000, "clients": a.clients, "threads": a.threads,
        "seconds per run": seconds,
        "sides": "%s: heap tables, %s indexes; %s: %s tables, %s indexes"
                 % (base, a.sides[0][0], am, a.sides[1][1], a.sides[1][0]),
        "per side and repetition": "fresh database; pgbench -i -I dtgvp (PGOPTIONS default_table_access_method); "
                                   "VACUUM ANALYZE; CHECKPOINT; pg_prewarm; TPC-B -n -M %s; -S -n -M %s; VACUUM; CHECKPOINT; "
                                   "-S again" % (a.protocol, a.protocol),
        "WAL per transaction": "pg_current_wal_insert_lsn() after - before the TPC-B run / transactions processed",
    })
    try:
        with cl.connect() as c:
            fpw = c.execute("SHOW full_page_writes").fetchone()[0]
        if fpw == "off":
            res.note("full_page_writes = off on the bench cluster: the WAL bytes hold no full-page images "
                     "(on either side)")
    except psycopg.Error:
        pass
    res.note("order alternates per repetition (%s first in odd repetitions); select_only runs on the tables as "
             "TPC-B left them (no VACUUM in between), select_only_vacuumed after a VACUUM" % am)
