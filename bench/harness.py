#!/usr/bin/env python3
"""bench/harness.py SUITE ... — runs one benchmark suite on the cluster that
bench/run.sh started, measuring the built-in index AM (btree) and the AM under
test back to back, and writes <out>/<suite>-<am>-<date>[-smoke].{csv,md,json,png}.

Not meant to be started by hand: bench/run.sh owns the cluster, the venv and
go-tpc, and passes the connection.  Exits non-zero when a run fails, a TPC-H
answer differs from DuckDB's, or no report could be written.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def log(*args):
    print("[%s]" % time.strftime("%H:%M:%S"), *args, flush=True)


class BenchError(Exception):
    """A failed measurement: reported, and the run exits non-zero."""


# ---------------------------------------------------------------- cluster --
class Cluster:
    def __init__(self, a):
        self.a = a
        self.standin = a.standin

    def connect(self, db=None, **kw):
        c = psycopg.connect(host=self.a.host, port=self.a.port, user=self.a.user,
                            dbname=db or self.a.db, autocommit=True, **kw)
        c.execute("SET client_min_messages = warning")
        return c

    def create_db(self, name, template=None, collate_c=False, tablespace=None):
        """collate_c: database collation "C" (from template0), so plain text
        columns can be indexed by AMs that need a memcmp order (elastic_btree).
        tablespace: the database's default tablespace (a copy of `template`
        then has every relation there)."""
        with self.connect() as c:
            self.drop_db(name, c)
            opts = ' TEMPLATE "%s"' % template if template else ""
            if collate_c and not template:
                opts = " TEMPLATE template0 LC_COLLATE 'C'"
            if tablespace:
                opts += ' TABLESPACE "%s"' % tablespace
            c.execute('CREATE DATABASE "%s"%s' % (name, opts))
        if template is None:
            with self.connect(name) as c:
                self.ensure_extension(c)

    def drop_db(self, name, c=None):
        """FORCE: a client's query may still run after the client left (go-tpc's
        analytical client at the end of its time); a background worker of the
        database (hasis compaction) may take a moment to leave: retried."""
        if c is None:
            with self.connect() as c:
                return self.drop_db(name, c)
        for attempt in range(6):
            try:
                c.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
                return
            except psycopg.errors.ObjectInUse:
                if attempt == 5:
                    raise
                time.sleep(2)

    def ensure_extension(self, c):
        if self.standin:
            return
        try:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_hybrid")
        except psycopg.Error as e:
            # the pg_ schema prefix is reserved; scripts/lib.sh retries the same way
            if "unacceptable schema name" not in str(e):
                raise
            c.execute("SET allow_system_table_mods = on")
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_hybrid")
            c.execute("RESET allow_system_table_mods")

    def pgbench(self, args, db=None, timeout=7200, env=None):
        """env: extra environment variables (e.g. PGOPTIONS) for this pgbench run."""
        cmd = [os.path.join(self.a.pgbin, "pgbench"), "-h", self.a.host, "-p", str(self.a.port),
               "-U", self.a.user] + args + [db or self.a.db]
        if self.a.client_cpus:
            cmd = ["taskset", "-c", self.a.client_cpus] + cmd
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           env=dict(os.environ, **env) if env else None)
        out = p.stdout.decode() + p.stderr.decode()
        if p.returncode != 0:
            raise BenchError("pgbench %s failed (exit %d): %s" % (" ".join(args), p.returncode, out[-2000:]))
        return out


def check_am(cl, name, kind):
    """Dies with a clear message when AM `name` of kind 'i'/'t' is not in pg_am."""
    with cl.connect() as c:
        row = c.execute("SELECT amtype FROM pg_am WHERE amname = %s", (name,)).fetchone()
    what = "index" if kind == "i" else "table"
    if row is None:
        raise SystemExit("ERROR: %s access method '%s' is not installed in this PostgreSQL "
                         "(no row in pg_am after CREATE EXTENSION pg_hybrid); it may not be built yet"
                         % (what, name))
    if row[0] != kind:
        raise SystemExit("ERROR: '%s' is not a %s access method (pg_am.amtype = %s)" % (name, what, row[0]))


def set_cap(a, on):
    """Sets (on) or lifts the memory limit of the cluster's cgroup, when
    run.sh made one (--cache-cap): what the OS may cache of the cluster's
    files beyond its shared memory, so that reads past it are real reads."""
    if not a.cgroup:
        return False
    path = os.path.join(a.cgroup, "memory.limit_in_bytes")
    try:
        with open(path, "w") as f:
            f.write(str(a.cap_bytes) if on else "-1")
    except OSError as e:
        raise BenchError("cannot %s the memory limit of %s: %s" % ("set" if on else "lift", a.cgroup, e))
    return True


# --------------------------------------------------------- index handling --
def index_bytes(c, schema="public"):
    """Total bytes of every index in `schema`: relation size, plus the dynamic
    (shared-memory) stage that pg_hybrid AMs keep outside the relation."""
    rows = c.execute(
        "SELECT ic.oid::regclass::text, am.amname, pg_relation_size(ic.oid) FROM pg_index i "
        "JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_namespace n ON n.oid = ic.relnamespace "
        "JOIN pg_am am ON am.oid = ic.relam WHERE n.nspname = %s", (schema,)).fetchall()
    total = dyn_total = 0
    for name, am, rel in rows:
        total += rel
        if am != "btree":
            dyn_total += dynamic_bytes(c, name)
    return total + dyn_total, dyn_total


def dynamic_bytes(c, idx):
    try:
        with c.transaction():
            r = c.execute("SELECT coalesce(dynamic_bytes, 0) FROM pg_hybrid.index_stats(%s::regclass)",
                          (idx,)).fetchone()
        return int(r[0] or 0)
    except psycopg.Error:
        return 0


def compaction_written(c, schema="public"):
    """(logical, physical) bytes the compactions of `schema`'s hasis tables
    wrote since the server started (pg_hybrid.table_stats: blocks written,
    and what the CSD meter says a compressing drive stores for them)."""
    r = c.execute("SELECT coalesce(sum(s.compaction_written_bytes), 0), coalesce(sum(s.compaction_physical_bytes), 0) "
                  "FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace JOIN pg_am am ON am.oid = t.relam, "
                  "LATERAL pg_hybrid.table_stats(t.oid) s "
                  "WHERE n.nspname = %s AND t.relkind = 'r' AND am.amname = 'hasis'", (schema,)).fetchone()
    return int(r[0]), int(r[1])


def rebuild_indexes(c, am, reloptions="", schema="public", keep=None):
    """Recreates every index of `schema` with AM `am`, one transaction each.

    A PRIMARY KEY or UNIQUE constraint becomes a UNIQUE index of the AM (only
    btree can back a constraint).  An index that a foreign key depends on stays
    as it is, and so does one the AM refuses (e.g. a type without an opclass):
    the transaction rolls back.  `keep` maps index names that must stay as
    they are to the reason.  Returns (seconds, kept) where kept lists the
    indexes left unchanged, with the reason.
    """
    rows = c.execute(
        "SELECT ic.relname, pg_get_indexdef(ic.oid), con.conname, tc.oid::regclass::text, am.amname, "
        "  EXISTS (SELECT 1 FROM pg_constraint f WHERE f.contype = 'f' AND f.conindid = ic.oid) "
        "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class tc ON tc.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = ic.relnamespace JOIN pg_am am ON am.oid = ic.relam "
        "LEFT JOIN pg_constraint con ON con.conindid = ic.oid AND con.contype IN ('p', 'u') "
        "WHERE n.nspname = %s ORDER BY ic.relname", (schema,)).fetchall()
    kept = []
    t0 = time.time()
    for name, idef, conname, table, cur_am, fk in rows:
        if keep and name in keep:
            kept.append("%s (%s) stays %s: %s" % (name, table, cur_am, keep[name]))
            continue
        if fk:
            kept.append("%s (%s): a foreign key references it, so it stays %s" % (name, table, cur_am))
            continue
        new = re.sub(r" USING \w+ \(", " USING %s (" % am, idef, count=1)
        if reloptions and am != "btree":
            new += " WITH (%s)" % reloptions
        try:
            with c.transaction():
                if conname:
                    c.execute('ALTER TABLE %s DROP CONSTRAINT "%s"' % (table, conname))
                else:
                    c.execute('DROP INDEX "%s"."%s"' % (schema, name))
                c.execute(new)
        except psycopg.Error as e:
            kept.append("%s (%s): %s refused it (%s), so it stays %s"
                        % (name, table, am, str(e).strip().splitlines()[0], cur_am))
    return time.time() - t0, kept


# ---------------------------------------------------------------- results --
class Results:
    """Measurements of one suite: (case, metric, unit, better, side, rep, value)."""

    def __init__(self, suite, sides):
        self.suite = suite
        self.sides = sides          # [baseline label, AM label]
        self.rows = []
        self.notes = []
        self.params = {}            # suite settings for the report (scale, clients, ...)
        self.order = []
        self.targets = []           # (case, check, value, limit, pass): issue targets, reported only
        self.curve = []             # suite elastic: Figure 5 samples (dicts), written to <stem>-curve.csv
        self.sections = []          # (title, markdown): extra report sections after the targets
        self.json_extra = {}        # extra top-level keys of the .json (e.g. per-repetition ratios)

    def add(self, case, metric, unit, better, side, rep, value, quiet=False):
        key = (case, metric)
        if key not in self.order:
            self.order.append(key)
        self.rows.append((case, metric, unit, better, side, rep, value))
        if not quiet:
            log("  %-14s %-28s %-14s %14s %s" % (case, metric, self.sides[side],
                                              "n/a" if value is None else "%.6g" % value, unit))

    def note(self, s):
        if s not in self.notes:
            self.notes.append(s)

    def table(self):
        """[(case, metric, unit, better, [(median, min, max, n) per side], ratio)]"""
        out = []
        for case, metric in self.order:
            unit = better = None
            per = [[], []]
            for c, m, u, b, side, rep, v in self.rows:
                if (c, m) == (case, metric):
                    unit, better = u, b
                    if v is not None:
                        per[side].append(v)
            stats = [(statistics.median(v), min(v), max(v), len(v)) if v else (None, None, None, 0) for v in per]
            ratio = stats[1][0] / stats[0][0] if stats[0][0] and stats[1][0] is not None else None
            out.append((case, metric, unit, better, stats, ratio))
        return out


def fmt(v, unit=None):
    if v is None:
        return "n/a"
    if unit == "bytes":
        return "%.2f MB" % (v / 1e6) if abs(v) < 1e8 else "%.1f MB" % (v / 1e6)
    if abs(v) >= 1e9:
        return "%.3g G" % (v / 1e9)
    if abs(v) >= 1e6:
        return "%.3g M" % (v / 1e6)
    if abs(v) >= 100:
        return "%.0f" % v
    return "%.3g" % v


def machine_facts(cl):
    mem = cpu = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.1f GiB" % (int(next(l for l in f if l.startswith("MemTotal")).split()[1]) / 1048576)
        with open("/proc/cpuinfo") as f:
            cpu = next(l for l in f if l.startswith("model name")).split(":", 1)[1].strip()
    except (OSError, StopIteration):
        pass
    so = "-"
    try:   # which build of the extension was measured (it may be reinstalled between runs)
        pkglib = subprocess.run([os.path.join(cl.a.pgbin, "pg_config"), "--pkglibdir"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL).stdout.decode().strip() or "/usr/lib/postgresql/15/lib"
        st = os.stat(os.path.join(pkglib, "pg_hybrid.so"))
        so = "%d bytes, modified %s" % (st.st_size, datetime.datetime.fromtimestamp(st.st_mtime).strftime("%Y-%m-%d %H:%M:%S"))
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL).stdout.decode().strip() or "?"
    with cl.connect() as c:
        g = lambda s: c.execute("SELECT current_setting(%s, true)", (s,)).fetchone()[0]
        return {
            "nproc": os.cpu_count(), "memory": mem, "cpu": cpu, "kernel": platform.release(),
            "postgres": g("server_version"),
            "shared_buffers": g("shared_buffers"), "pg_hybrid.shared_memory": g("pg_hybrid.shared_memory") or "-",
            "fsync": g("fsync"), "synchronous_commit": g("synchronous_commit"), "full_page_writes": g("full_page_writes"),
            "work_mem": g("work_mem"), "max_parallel_workers_per_gather": g("max_parallel_workers_per_gather"),
            "git_commit": commit, "pg_hybrid.so": so,
            "cpu pinning": ("cluster on CPU 0, pgbench on CPUs %s" % cl.a.client_cpus) if cl.a.client_cpus else "none",
        }


def write_report(a, res, facts):
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, "%s-%s-%s%s" % (res.suite, a.am_label, datetime.date.today().isoformat(),
                                               "-smoke" if a.smoke else ""))
    base, am = res.sides
    tab = res.table()
    with open(stem + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["suite", "case", "metric", "unit", "better", "baseline", "am",
                    "baseline_median", "baseline_min", "baseline_max", "am_median", "am_min", "am_max",
                    "repeats", "ratio_am_over_baseline"])
        num = lambda v: "" if v is None else "%.6g" % v
        for case, metric, unit, better, st, ratio in tab:
            w.writerow([res.suite, case, metric, unit, better, base, am] +
                       [num(x) for x in st[0][:3]] + [num(x) for x in st[1][:3]] +
                       [min(st[0][3], st[1][3]), "" if ratio is None else "%.4f" % ratio])
    reps = a.repeat
    with open(stem + ".md", "w") as f:
        f.write("# %s: %s vs %s — %s%s\n\n" % (res.suite, am, base, facts["date"], " (smoke run)" if a.smoke else ""))
        f.write("Settings:\n\n")
        for k, v in list(res.params.items()) + list(facts.items()):
            f.write("- %s: %s\n" % (k, v))
        span = " (median, min–max of %d)" % reps if reps > 1 else ""
        f.write("\n| case | metric | unit | %s%s | %s%s | ratio %s/%s | better |\n" % (base, span, am, span, am, base))
        f.write("|---|---|---|---:|---:|---:|---|\n")
        for case, metric, unit, better, st, ratio in tab:
            cell = lambda s: fmt(s[0], unit) + (" (%s–%s)" % (fmt(s[1], unit), fmt(s[2], unit))
                                                if reps > 1 and s[3] > 1 else "")
            f.write("| %s | %s | %s | %s | %s | %s | %s |\n" % (case, metric, unit, cell(st[0]), cell(st[1]),
                                                              "n/a" if ratio is None else "%.3f" % ratio, better))
        if res.notes:
            f.write("\nNotes:\n\n")
            for n in res.notes:
                f.write("- %s\n" % n)
    if res.targets:
        with open(stem + ".md", "a") as f:
            f.write("\nTargets (reported, not asserted):\n\n| case | check | value | limit | result |\n"
                    "|---|---|---:|---:|---|\n")
            for case, check, value, limit, ok in res.targets:
                f.write("| %s | %s | %s | %s | %s |\n" % (case, check, "n/a" if value is None else "%.3f" % value,
                                                          "%.3g" % limit, "PASS" if ok else "**FAIL**"))
        with open(stem + "-targets.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["suite", "case", "check", "value", "limit", "pass"])
            for case, check, value, limit, ok in res.targets:
                w.writerow([res.suite, case, check, "" if value is None else "%.6g" % value, limit, int(bool(ok))])
    if res.sections:
        with open(stem + ".md", "a") as f:
            for title, text in res.sections:
                f.write("\n%s\n\n%s\n" % (title, text.rstrip("\n")))
    if res.curve:
        cols = list(res.curve[0].keys())
        with open(stem + "-curve.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for r in res.curve:
                w.writerow({k: "" if r.get(k) is None else r[k] for k in cols})
    with open(stem + ".json", "w") as f:
        json.dump(dict({"suite": res.suite, "baseline": base, "am": am, "smoke": a.smoke,
                        "params": res.params, "facts": facts,
                        "targets": [{"case": c_, "check": ch, "value": v, "limit": l, "pass": bool(ok)}
                                    for c_, ch, v, l, ok in res.targets]}, **res.json_extra),
                  f, indent=1, default=str)
    if not a.no_plot:
        try:
            import plot
            plot.plot(stem + ".csv", stem + ".png")
        except Exception as e:  # a missing chart is not a failed benchmark, but say so
            log("WARNING: plot failed: %s" % e)
    log("wrote %s.{csv,md,json%s}" % (stem, "" if a.no_plot else ",png"))
    return stem


# ------------------------------------------------------------------- main --
SMOKE = {"probe_rows": 20000, "scale": 2, "seconds": 3, "ycsb_rows": 20000, "ycsb_seconds": 2,
         "warehouses": 1, "tpcc_seconds": 10, "sf": 0.1, "tiered_rows": 20000, "tiered_seconds": 2}
FULL = {"probe_rows": 5000000, "scale": 50, "seconds": 60, "ycsb_rows": 1000000, "ycsb_seconds": 20,
        "warehouses": 1, "tpcc_seconds": 60, "sf": 1.0, "tiered_rows": 10000000, "tiered_seconds": 30}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", choices=["probe", "pgbench", "ycsb", "tpcc", "tpch", "elastic", "engine", "tiered", "htap"])
    ap.add_argument("--index-am", required=True)
    ap.add_argument("--table-am", default="heap")
    ap.add_argument("--baseline", default="btree")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--standin", action="store_true", help="no pg_hybrid extension (btree-only run)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--db", default="bench")
    ap.add_argument("--pgbin", required=True)
    ap.add_argument("--gotpc")
    ap.add_argument("--work", required=True, help="scratch directory for data files and scripts")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=int)
    ap.add_argument("--rows", type=int)
    ap.add_argument("--scale", type=int)
    ap.add_argument("--warehouses", type=int)
    ap.add_argument("--sf", type=float)
    ap.add_argument("--reloptions", default="")
    ap.add_argument("--cases", default="", help="elastic: key types and phases to run (int8,text32,nobound,bound)")
    ap.add_argument("--table-options", default="", help="WITH (...) for the table AM side's tables (tpch)")
    ap.add_argument("--protocol", default="prepared", choices=["simple", "extended", "prepared"],
                    help="pgbench -M for the pgbench suite (simple and extended plan every statement)")
    ap.add_argument("--cgroup", help="memory cgroup of the cluster (run.sh --cache-cap)")
    ap.add_argument("--client-cpus", help="taskset CPU list for pgbench (run.sh --pin-cpus; the cluster is on CPU 0)")
    ap.add_argument("--cap-bytes", type=int, help="the limit a suite sets on --cgroup while it measures")
    ap.add_argument("--tablespace", help="tablespace for the suite's relations (run.sh --csd)")
    ap.add_argument("--csd-device", help="the zram device (zramN) under --tablespace (run.sh --csd)")
    a = ap.parse_args()
    size = SMOKE if a.smoke else FULL
    a.size = size
    # the AM side's label carries its table AM when that is not heap
    a.am_label = a.index_am if a.table_am == "heap" else "%s+%s" % (a.index_am, a.table_am)
    base_label = a.baseline if a.baseline != a.am_label else a.baseline + "#1"
    am_label = a.am_label if a.baseline != a.am_label else a.am_label + "#2"
    # side 0 = baseline (btree on heap), side 1 = the AM under test
    a.sides = [(a.baseline, "heap"), (a.index_am, a.table_am)]

    cl = Cluster(a)
    check_am(cl, a.index_am, "i")
    check_am(cl, a.table_am, "t")
    res = Results(a.suite, [base_label, am_label])
    facts = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M")}
    # before the suite: the .so the cluster loaded at start (it may be reinstalled during a long run)
    facts.update(machine_facts(cl))
    t0 = time.time()
    ok = True
    try:
        if a.suite == "probe" or (a.suite == "pgbench" and a.table_am == "heap"):
            import suite_probe
            suite_probe.run(a, cl, res)
        elif a.suite == "pgbench":   # --table-am hasis: heap tables vs the table AM's, TPC-B and -S
            import suite_pgbench
            suite_pgbench.run(a, cl, res)
        elif a.suite == "ycsb":
            import suite_ycsb
            suite_ycsb.run(a, cl, res)
        elif a.suite == "tpcc":
            import suite_tpcc
            suite_tpcc.run(a, cl, res)
        elif a.suite == "tpch":
            import suite_tpch
            suite_tpch.run(a, cl, res)
        elif a.suite == "elastic":
            import suite_elastic
            suite_elastic.run(a, cl, res)
        elif a.suite == "engine":
            import suite_engine
            suite_engine.run(a, cl, res)
        elif a.suite == "tiered":
            import suite_tiered
            suite_tiered.run(a, cl, res)
        elif a.suite == "htap":
            import suite_htap
            suite_htap.run(a, cl, res)
    except BenchError as e:
        ok = False
        log("FAILED: %s" % e)
        res.note("FAILED: %s" % e)
    facts["runtime_s"] = round(time.time() - t0)
    facts["smoke"] = a.smoke
    if not res.rows:
        log("FAILED: suite %s measured nothing" % a.suite)
        sys.exit(1)
    stem = write_report(a, res, facts)
    with open(stem + ".md") as f:
        print(f.read())
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    # the suite modules import "harness"; make that this module, not a second
    # copy whose BenchError would not be caught here
    sys.modules["harness"] = sys.modules["__main__"]
    main()
