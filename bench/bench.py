#!/usr/bin/env python3
"""bench/bench.py — measures an index AM against btree in the same run.

Started by bench/run.sh (which owns the scratch cluster); talks to it with psql
run as the cluster's OS user.  Python 3 stdlib only.

Cases (same heap for both AMs; each index built, measured, dropped in turn):
  unique     N unique random int8 keys, UNIQUE index
  secondary  N rows, N/10 random int8 keys (10 TIDs per key), plain index
Per case and AM:
  build_s                        CREATE INDEX time
  size_after_build_bytes         pg_relation_size + dynamic_bytes (index_stats, hybrid only)
  probe_ns                       1M probes: nested loop (hash/merge join, memoize off), inner
                                 index scan; EXPLAIN (ANALYZE, TIMING OFF) execution time / probes;
                                 plan and pg_stat_user_indexes.idx_scan are checked
  probe_index_buffers            index buffer accesses per probe (pg_statio_user_indexes
                                 idx_blks_hit + idx_blks_read over the probe runs)
  probe_index_reads              of those, the misses (idx_blks_read): run with --shared-buffers
                                 small against the index to see what a probe reads
  range_us                       10k random ranges of ~100 rows, nested loop, per range
  insert_random_rows_per_s       N rows in random key order into an empty indexed table
  insert_random_index_us_per_row (time with index - time without index) / rows
  size_after_random_inserts_bytes, probe_grown_ns (probes on that grown index),
  size_after_random_merge_bytes  (after pg_hybrid.merge(); btree: unchanged)
  insert_asc_rows_per_s, insert_asc_index_us_per_row, size_after_asc_inserts_bytes
  sync_lag_median_ms, sync_lag_max_ms, unmerged_max_entries
                                 (pg_hybrid AMs only) pg_hybrid.sync_lag sampled once a second
                                 during the random inserts: how long the oldest entry not yet
                                 merged (griffin: synced) had waited, and how many waited
pgbench case: pgbench -S -M prepared TPS with pgbench_accounts' primary key replaced
by a UNIQUE index of the AM on aid (and its size).
Writes <out>/<am>-<date>[-smoke].csv and .md (+ facts .json for plot.py).
"""

import argparse
import csv
import datetime
import json
import os
import platform
import pwd
import re
import statistics
import subprocess
import sys
import threading
import time

P_MOD = 4294967311  # prime > 2^32: g -> g * 2654435761 mod P is a bijection on 1..P-1
MULT = 2654435761
SPREAD = 1000003    # spreads keys over ~2^52



# PostgreSQL's own index AMs a run may compare with (no pg_hybrid functions)
BUILTIN = ("btree", "hash")

class SyncLagWatch:
    """Samples pg_hybrid.sync_lag(idx) once a second in a thread until
    stop(), which returns [(unmerged entries, lag ms)]. One short query a
    second: the load it measures is not slowed by it."""

    def __init__(self, pg, idx):
        self.pg, self.idx = pg, idx
        self.samples = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.done.wait(1.0):
            try:
                v = self.pg.val("SELECT unmerged_entries || ' ' || coalesce(lag_ms, -1) "
                                "FROM pg_hybrid.sync_lag('%s'::regclass)" % self.idx)
                n, lag = v.split()
                if float(lag) >= 0:
                    self.samples.append((int(n), float(lag)))
            except Exception:
                pass   # a sample lost (e.g. the index is being dropped) is not an error

    def stop(self):
        self.done.set()
        self.thread.join(timeout=30)
        return self.samples


class PG:
    def __init__(self, a):
        self.a = a
        self.base = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", a.host, "-p", str(a.port),
                     "-U", a.user, "-d", a.db]
        me = pwd.getpwuid(os.geteuid()).pw_name
        self.prefix = []
        if a.os_user and a.os_user != me:
            self.prefix = ["runuser", "-u", a.os_user, "--"]

    def psql(self, script, timeout=7200):
        cmd = self.prefix + [os.path.join(self.a.pgbin, "psql")] + self.base + ["-At", "-f", "-"]
        p = subprocess.run(cmd, input=script.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           cwd="/", timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("psql failed: %s\n--- script ---\n%s" % (p.stderr.decode().strip(), script[:3000]))
        return p.stdout.decode()

    def val(self, sql):
        out = self.psql(sql.rstrip(";") + ";\n").strip().splitlines()
        return out[-1] if out else ""

    def timed(self, sql_list, setup=""):
        """Run statements in one session; return total client-side elapsed ms (psql \\timing)."""
        script = setup + "\n\\timing on\n" + "".join(s.rstrip(";") + ";\n" for s in sql_list)
        out = self.psql(script)
        ms = [float(x) for x in re.findall(r"^Time: ([0-9.]+) ms", out, re.M)]
        if len(ms) != len(sql_list):
            raise RuntimeError("could not read timings: %r" % out[-500:])
        return sum(ms)

    def pgbench(self, args, timeout=7200):
        cmd = self.prefix + [os.path.join(self.a.pgbin, "pgbench"), "-h", self.a.host, "-p", str(self.a.port),
                             "-U", self.a.user] + args + [self.a.db]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("pgbench failed: %s" % p.stderr.decode()[-2000:])
        return p.stdout.decode() + p.stderr.decode()


def log(*args):
    print("[%s]" % time.strftime("%H:%M:%S"), *args, flush=True)


class Bench:
    def __init__(self, a):
        self.a = a
        self.pg = PG(a)
        self.rows = []   # (case, metric, unit, better, am, value)
        self.notes = []
        self.hybrid_like = {}
        self.slot = 0      # 0 = AM under test, 1 = baseline (the same name is allowed for both)

    def add(self, case, metric, unit, better, am, value):
        self.rows.append((case, metric, unit, better, self.slot, value))
        log("  %-10s %-34s %-12s %16s  %s" % (case, metric, am, "%.6g" % value if value is not None else "n/a", unit))

    def has_stats(self, am):
        if am not in self.hybrid_like:
            self.hybrid_like[am] = am not in BUILTIN and self.pg.val(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'pg_hybrid' AND p.proname = 'index_stats'") != "0"
        return self.hybrid_like[am]

    def has_sync_lag(self, am):
        if not self.has_stats(am):
            return False
        if not hasattr(self, "sync_lag_fn"):
            self.sync_lag_fn = self.pg.val(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'pg_hybrid' AND p.proname = 'sync_lag'") != "0"
        return self.sync_lag_fn

    def index_bytes(self, idx, am):
        rel = int(self.pg.val("SELECT pg_relation_size('%s'::regclass)" % idx))
        dyn = 0
        if self.has_stats(am):
            dyn = int(self.pg.val("SELECT coalesce(dynamic_bytes, 0) FROM pg_hybrid.index_stats('%s'::regclass)" % idx) or 0)
        return rel + dyn

    def merge(self, idx, am):
        if am not in BUILTIN:
            self.pg.psql("SELECT pg_hybrid.merge('%s'::regclass);\n" % idx)

    # ------------------------------------------------------------ data --
    def key_expr(self, case, g):
        if case == "unique":
            return "((%s * %d) %% %d) * %d" % (g, MULT, P_MOD, SPREAD)
        return "(((%s %% %d) * %d) %% %d) * %d" % (g, max(1, self.a.rows // 10), MULT, P_MOD, SPREAD)

    def load(self, case):
        n = self.a.rows
        t = "%s_data" % case
        log("loading %s (%d rows)" % (t, n))
        self.pg.psql(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (k int8 NOT NULL, v int8 NOT NULL) WITH (autovacuum_enabled = off);\n"
            "INSERT INTO {t} SELECT {k}, g FROM generate_series(1, {n}) g;\n"
            "VACUUM ANALYZE {t};\n"
            "SELECT setseed(0.42);\n"
            "DROP TABLE IF EXISTS {c}_probe; CREATE TABLE {c}_probe AS SELECT {kp} AS k "
            "FROM (SELECT 1 + floor(random() * {n})::int8 AS g FROM generate_series(1, {p})) s;\n"
            "VACUUM ANALYZE {c}_probe;\n".format(t=t, c=case, n=n, p=self.a.probes,
                                                 k=self.key_expr(case, "g"), kp=self.key_expr(case, "g")))
        # ranges of ~100 rows: key space ~ P_MOD * SPREAD holding n rows (n/10 keys for secondary)
        width = int(100 * P_MOD * SPREAD / n)
        self.pg.psql(
            "SELECT setseed(0.43);\n"
            "DROP TABLE IF EXISTS {c}_range; CREATE TABLE {c}_range AS SELECT lo, lo + {w} AS hi FROM "
            "(SELECT floor(random() * {span})::int8 AS lo FROM generate_series(1, {r})) s;\n"
            "VACUUM ANALYZE {c}_range;\n".format(c=case, w=width, span=P_MOD * SPREAD - width, r=self.a.ranges))

    def create_index(self, case, am, table, idx):
        # PostgreSQL's hash index cannot be UNIQUE: a plain one on unique keys
        uniq = "UNIQUE " if case == "unique" and am != "hash" else ""
        opts = " WITH (%s)" % self.a.reloptions if (self.a.reloptions and am not in BUILTIN) else ""
        return "CREATE %sINDEX %s ON %s USING %s (k)%s" % (uniq, idx, table, am, opts)

    # ----------------------------------------------------------- probes --
    NL = ("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_memoize = off; "
          "SET enable_bitmapscan = off; SET enable_material = off; SET max_parallel_workers_per_gather = 0;")

    def explain_run(self, sql, idx, reps):
        """EXPLAIN ANALYZE sql reps times; return (median exec ms, node type, idx_scan delta,
        the index's buffer accesses and misses (pg_statio's idx_blks_hit + idx_blks_read,
        idx_blks_read) over all reps)."""
        counters = ("SELECT coalesce(sum(s.idx_scan), 0), coalesce(sum(io.idx_blks_hit + io.idx_blks_read), 0), "
                    "coalesce(sum(io.idx_blks_read), 0) "
                    "FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid) "
                    "WHERE s.indexrelname = '%s'" % idx)
        before = [int(x) for x in self.pg.val(counters).split("|")]
        times, node = [], None
        for _ in range(reps):
            out = self.pg.psql(self.NL + "\nEXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) %s;\n" % sql)
            plan = json.loads(out[out.index("["):])[0]
            times.append(plan["Execution Time"])
            found = []

            def walk(n):
                if n.get("Index Name") == idx:
                    found.append(n["Node Type"])
                for c in n.get("Plans", []):
                    walk(c)
            walk(plan["Plan"])
            if not found:
                raise RuntimeError("plan does not use %s: %s" % (idx, json.dumps(plan["Plan"])[:2000]))
            node = found[0]
        time.sleep(0.6)  # let the backend's stats reach the shared stats (flushed at exit)
        after = [int(x) for x in self.pg.val("SELECT pg_stat_clear_snapshot(); " + counters).split("|")]
        # the first run warms the cache; median of the rest
        med = statistics.median(times[1:] if len(times) > 1 else times)
        return med, node, after[0] - before[0], after[1] - before[1], after[2] - before[2]

    def probes(self, case, am, table, idx, metric):
        sql = "SELECT count(*) FROM %s_probe p JOIN %s d ON d.k = p.k" % (case, table)
        ms, node, delta, buffers, reads = self.explain_run(sql, idx, self.a.reps)
        self.add(case, metric, "ns/probe", "lower", am, ms * 1e6 / self.a.probes)
        # index pages touched per probe (btree: its height; a hash path: its bucket page)
        self.add(case, metric.replace("_ns", "_index_buffers"), "buffers/probe", "lower", am,
                 buffers / float(self.a.reps * self.a.probes))
        # of which missed shared_buffers (with the index several times shared_buffers)
        self.add(case, metric.replace("_ns", "_index_reads"), "reads/probe", "lower", am,
                 reads / float(self.a.reps * self.a.probes))
        self.notes.append("%s/%s/%s: inner node %s, idx_scan +%d over %d runs of %d probes"
                          % (case, am, metric, node, delta, self.a.reps, self.a.probes))
        if delta < self.a.probes:
            self.notes.append("WARNING %s/%s/%s: idx_scan rose by only %d (expected >= %d)"
                              % (case, am, metric, delta, self.a.probes))

    def ranges(self, case, am, table, idx):
        if am == "hash":
            self.notes.append("%s/hash/range_us: not measured (a hash index serves equality only)" % case)
            return
        sql = ("SELECT sum(c) FROM %s_range r, LATERAL (SELECT count(*) AS c FROM %s d "
               "WHERE d.k >= r.lo AND d.k < r.hi) x" % (case, table))
        ms, node, delta, _, _ = self.explain_run(sql, idx, self.a.reps)
        rows = self.pg.val("SELECT sum(c) FROM %s_range r, LATERAL (SELECT count(*) AS c FROM %s d "
                           "WHERE d.k >= r.lo AND d.k < r.hi) x" % (case, table))
        self.add(case, "range_us", "us/range", "lower", am, ms * 1e3 / self.a.ranges)
        self.notes.append("%s/%s/range_us: %d ranges, %s rows in total (~%.0f per range), inner node %s"
                          % (case, am, self.a.ranges, rows, int(rows or 0) / self.a.ranges, node))

    # ----------------------------------------------------------- inserts --
    def insert_run(self, case, am, order, table, with_index):
        """Insert insert_rows rows into a fresh table; return (ms, idx name or None)."""
        n = self.a.insert_rows
        chunk = self.a.chunk
        self.pg.psql("DROP TABLE IF EXISTS %s; CREATE TABLE %s (k int8 NOT NULL, v int8 NOT NULL) "
                     "WITH (autovacuum_enabled = off);\n" % (table, table))
        idx = None
        if with_index:
            idx = table + "_k"
            self.pg.psql(self.create_index(case, am, table, idx) + ";\n")
        self.pg.psql("CHECKPOINT;\n")
        stmts = []
        for lo in range(1, n + 1, chunk):
            hi = min(n, lo + chunk - 1)
            if order == "random":   # the same random keys as <case>_data, in the same order
                stmts.append("INSERT INTO %s SELECT %s, g FROM generate_series(%d::int8, %d) g"
                             % (table, self.key_expr(case, "g"), lo, hi))
            elif case == "unique":  # ascending unique keys
                stmts.append("INSERT INTO %s SELECT g * %d, g FROM generate_series(%d::int8, %d) g"
                             % (table, SPREAD, lo, hi))
            else:                   # ascending keys, 10 rows per key
                stmts.append("INSERT INTO %s SELECT (g / 10) * %d, g FROM generate_series(%d::int8, %d) g"
                             % (table, SPREAD, lo, hi))
        watch = SyncLagWatch(self.pg, idx) if with_index and self.has_sync_lag(am) else None
        try:
            ms = self.pg.timed(stmts)
        finally:
            self.sync_lag = watch.stop() if watch else None
        return ms, idx

    def inserts(self, case, am, noindex_ms):
        n = self.a.insert_rows
        for order in ("random", "asc"):
            table = "%s_ins_%s" % (case, order)
            ms, idx = self.insert_run(case, am, order, table, True)
            self.add(case, "insert_%s_rows_per_s" % order, "rows/s", "higher", am, n / (ms / 1e3))
            self.add(case, "insert_%s_index_us_per_row" % order, "us/row", "lower", am,
                     max(0.0, ms - noindex_ms[order]) * 1e3 / n)
            self.add(case, "size_after_%s_inserts_bytes" % order, "bytes", "lower", am, self.index_bytes(idx, am))
            if order == "random" and self.sync_lag:
                lags = [lag for _, lag in self.sync_lag]
                self.add(case, "sync_lag_median_ms", "ms", "lower", am, statistics.median(lags))
                self.add(case, "sync_lag_max_ms", "ms", "lower", am, max(lags))
                self.add(case, "unmerged_max_entries", "entries", "lower", am, max(n for n, _ in self.sync_lag))
                self.notes.append("%s/%s: sync lag during the random inserts, %d samples a second apart: "
                                  "median %.0f ms, max %.0f ms, up to %d entries waiting"
                                  % (case, am, len(lags), statistics.median(lags), max(lags),
                                     max(n for n, _ in self.sync_lag)))
            if order == "random":
                if self.has_stats(am):
                    st = self.pg.val("SELECT row_to_json(s) FROM pg_hybrid.index_stats('%s'::regclass) s" % idx)
                    self.notes.append("%s/%s after random inserts: index_stats %s" % (case, am, st))
                self.pg.psql("ANALYZE %s;\n" % table)
                self.probes(case, am, table, idx, "probe_grown_ns")
                t0 = time.time()
                self.merge(idx, am)
                if am not in BUILTIN:
                    self.notes.append("%s/%s: pg_hybrid.merge() after random inserts took %.2f s"
                                      % (case, am, time.time() - t0))
                self.add(case, "size_after_random_merge_bytes", "bytes", "lower", am, self.index_bytes(idx, am))
            self.pg.psql("DROP TABLE %s;\n" % table)

    # ------------------------------------------------------------- cases --
    def run_case(self, case):
        self.load(case)
        noindex = {}
        for order in ("random", "asc"):
            ms, _ = self.insert_run(case, "none", order, "%s_noidx" % case, False)
            noindex[order] = ms
            self.pg.psql("DROP TABLE %s_noidx;\n" % case)
            self.notes.append("%s: %d %s inserts without any index: %.2f s"
                              % (case, self.a.insert_rows, order, ms / 1e3))
        for self.slot, am in enumerate(self.a.ams):
            log("case %s, am %s" % (case, am))
            idx = "%s_data_k_%s" % (case, am)
            self.pg.psql("CHECKPOINT;\n")
            ms = self.pg.timed([self.create_index(case, am, "%s_data" % case, idx)])
            self.add(case, "build_s", "s", "lower", am, ms / 1e3)
            self.add(case, "size_after_build_bytes", "bytes", "lower", am, self.index_bytes(idx, am))
            self.probes(case, am, "%s_data" % case, idx, "probe_ns")
            self.ranges(case, am, "%s_data" % case, idx)
            self.pg.psql("DROP INDEX %s;\n" % idx)
            self.inserts(case, am, noindex)
        self.pg.psql("DROP TABLE %s_data, %s_probe, %s_range;\n" % (case, case, case))

    def run_pgbench(self):
        a = self.a
        scale = max(1, a.rows // 100000)
        log("pgbench -i -s %d" % scale)
        self.pg.pgbench(["-i", "-q", "-s", str(scale), "-I", "dtgv"])
        clients = a.clients
        for self.slot, am in enumerate(a.ams):
            idx = "pgbench_accounts_aid_" + am
            self.pg.psql("ALTER TABLE pgbench_accounts DROP CONSTRAINT IF EXISTS pgbench_accounts_pkey;\n"
                         "DROP INDEX IF EXISTS %s;\n%s;\nVACUUM ANALYZE pgbench_accounts;\nCHECKPOINT;\n"
                         % (idx, "CREATE %sINDEX %s ON pgbench_accounts USING %s (aid)%s"
                            % ("" if am == "hash" else "UNIQUE ", idx, am,
                               " WITH (%s)" % a.reloptions if (a.reloptions and am not in BUILTIN) else "")))
            self.pg.pgbench(["-n", "-S", "-M", "prepared", "-c", str(clients), "-j", str(a.threads),
                             "-T", str(max(1, a.pgbench_seconds // 4))])
            out = self.pg.pgbench(["-n", "-S", "-M", "prepared", "-c", str(clients), "-j", str(a.threads),
                                   "-T", str(a.pgbench_seconds)])
            m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
            self.add("pgbench", "select_only_tps", "tps", "higher", am, float(m.group(1)) if m else None)
            self.add("pgbench", "aid_index_bytes", "bytes", "lower", am, self.index_bytes(idx, am))
            self.pg.psql("DROP INDEX %s;\n" % idx)
        self.notes.append("pgbench: scale %d (%d accounts), -S -M prepared, %d clients, %d threads, %d s per AM "
                          "(after a %d s warm-up)" % (scale, scale * 100000, clients, a.threads,
                                                       a.pgbench_seconds, max(1, a.pgbench_seconds // 4)))

    # ----------------------------------------------------------- report --
    def facts(self):
        mem = "?"
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemTotal"):
                        mem = "%.1f GiB" % (int(line.split()[1]) / 1048576)
        except OSError:
            pass
        cpu = "?"
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        try:
            commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode().strip() or "none"
        except OSError:
            commit = "?"
        g = lambda s: self.pg.val("SELECT current_setting('%s', true)" % s)
        return {
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "am": self.a.ams[0], "baseline": self.a.ams[1],
            "rows": self.a.rows, "insert_rows": self.a.insert_rows, "probes": self.a.probes,
            "ranges": self.a.ranges, "reloptions": self.a.reloptions or "(defaults)",
            "nproc": os.cpu_count(), "memory": mem, "cpu": cpu, "kernel": platform.release(),
            "postgres": self.pg.val("SELECT version()"),
            "shared_buffers": g("shared_buffers"), "pg_hybrid.shared_memory": g("pg_hybrid.shared_memory") or "-",
            "fsync": g("fsync"), "synchronous_commit": g("synchronous_commit"),
            "max_parallel_maintenance_workers": g("max_parallel_maintenance_workers"),
            "git_commit": commit, "smoke": self.a.smoke,
        }

    def write(self, facts):
        a = self.a
        os.makedirs(a.out, exist_ok=True)
        stem = os.path.join(a.out, "%s-%s%s" % (a.ams[0], datetime.date.today().isoformat(), "-smoke" if a.smoke else ""))
        am, base = a.ams
        if am == base:  # stand-in run (btree vs btree): keep the column names distinct
            am, base = am + "_1", base + "_2"
        table = {}
        order = []
        for case, metric, unit, better, x, v in self.rows:
            key = (case, metric)
            if key not in table:
                table[key] = {"unit": unit, "better": better}
                order.append(key)
            table[key][x] = v
        with open(stem + ".csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "metric", "unit", "better", am, base, "ratio_%s_over_%s" % (am, base)])
            for key in order:
                r = table[key]
                va, vb = r.get(0), r.get(1)
                ratio = (va / vb) if (va is not None and vb) else None
                w.writerow([key[0], key[1], r["unit"], r["better"],
                            "" if va is None else "%.6g" % va, "" if vb is None else "%.6g" % vb,
                            "" if ratio is None else "%.4f" % ratio])
        with open(stem + ".md", "w") as f:
            f.write("# %s vs %s — %s%s\n\n" % (am, base, facts["date"], " (smoke run)" if a.smoke else ""))
            f.write("Machine and settings:\n\n")
            for k, v in facts.items():
                f.write("- %s: %s\n" % (k, v))
            f.write("\n| case | metric | unit | %s | %s | ratio %s/%s | better |\n" % (am, base, am, base))
            f.write("|---|---|---|---:|---:|---:|---|\n")
            for key in order:
                r = table[key]
                va, vb = r.get(0), r.get(1)
                ratio = (va / vb) if (va is not None and vb) else None
                fmt = lambda v: "n/a" if v is None else ("%.0f" % v if abs(v) >= 100 else "%.3g" % v)
                f.write("| %s | %s | %s | %s | %s | %s | %s |\n" % (key[0], key[1], r["unit"], fmt(va), fmt(vb),
                                                                  "n/a" if ratio is None else "%.3f" % ratio,
                                                                  r["better"]))
            f.write("\nNotes:\n\n")
            for n in self.notes:
                f.write("- %s\n" % n)
        with open(stem + ".json", "w") as f:
            json.dump(facts, f, indent=1)
        log("wrote %s.csv, %s.md" % (stem, stem))
        print(stem)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--am", default=os.environ.get("PH_AM", "hybrid_btree"))
    ap.add_argument("--baseline", default="btree")
    ap.add_argument("--rows", type=int, default=5000000)
    ap.add_argument("--insert-rows", type=int, default=None, help="rows per insert test (default --rows)")
    ap.add_argument("--probes", type=int, default=1000000)
    ap.add_argument("--ranges", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3, help="EXPLAIN ANALYZE runs per probe/range measure (median of all but the first)")
    ap.add_argument("--chunk", type=int, default=100000, help="rows per INSERT statement in the insert tests")
    ap.add_argument("--cases", default="unique,secondary,pgbench")
    ap.add_argument("--pgbench-seconds", type=int, default=60)
    ap.add_argument("--clients", type=int, default=max(2, 2 * (os.cpu_count() or 1)))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reloptions", default="", help="WITH (...) for the AM's indexes, e.g. \"merge_ratio = 10\"")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--host", default=os.environ.get("PH_PGHOST"))
    ap.add_argument("--port", default=os.environ.get("PH_PGPORT"))
    ap.add_argument("--user", default=os.environ.get("PH_USER", "pghybrid"))
    ap.add_argument("--os-user", default=os.environ.get("PH_USER", "pghybrid"))
    ap.add_argument("--db", default=os.environ.get("PH_DB", "bench"))
    ap.add_argument("--pgbin", default=os.environ.get("PH_PGBIN", "/usr/lib/postgresql/15/bin"))
    a = ap.parse_args()
    if a.smoke:
        a.rows, a.probes, a.ranges, a.pgbench_seconds, a.chunk = 20000, 20000, 1000, 3, 5000
    if a.insert_rows is None:
        a.insert_rows = a.rows
    a.ams = [a.am, a.baseline]
    if not a.host or not a.port:
        ap.error("--host/--port (or PH_PGHOST/PH_PGPORT) required; use bench/run.sh")
    b = Bench(a)
    t0 = time.time()
    facts = b.facts()
    log("bench: %s vs %s, %d rows, %d probes, %d ranges" % (a.am, a.baseline, a.rows, a.probes, a.ranges))
    for case in a.cases.split(","):
        if case == "pgbench":
            b.run_pgbench()
        elif case in ("unique", "secondary"):
            b.run_case(case)
        else:
            sys.exit("unknown case %s" % case)
    facts["runtime_s"] = round(time.time() - t0)
    b.write(facts)


if __name__ == "__main__":
    main()
