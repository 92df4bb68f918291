"""Suite `engine`: the targets of the engine issue, the AM under test and
btree measured in the same run, each reported as a ratio with its target
and PASS/FAIL (reported, never asserted).

All of it runs in a database of its own (`engine`, dropped at the end) with
enable_seqscan and enable_bitmapscan off, so every query of both sides is a
plain index (or index-only) scan; the plan is checked with EXPLAIN and with
pg_stat_user_indexes.idx_scan after every pgbench run.  Like suite probe,
one side at a time: the table is recreated from the same base rows for each
side (alternating which side goes first on each repeat).

1. scan with a full dynamic stage
   kv(k int8, v int8): N rows (2M; --smoke 100k), k random in 1..10N, a plain
   index of the side's AM on k; then E more random keys (50k; smoke 5k) are
   inserted with pg_hybrid.merge_min_entries raised above E in that session,
   so no ratio-triggered merge moves them: they sit in the dynamic stage
   (index_stats.dynamic_entries is reported and checked).  pgbench -M
   prepared, 1 client, S seconds (10; smoke 2) each:
     scan50    SELECT k FROM kv WHERE k >= :a ORDER BY k LIMIT 50
     range100  SELECT k FROM kv WHERE k BETWEEN :a AND :a + X, X sized to
               return ~100 rows
   "unmerged" with the E entries in the dynamic stage, then pg_hybrid.merge()
   and "merged" (btree: measured a second time at the same point, so its own
   unmerged/merged ratio shows the run's drift).  Targets: AM cost unmerged
   / merged <= 1.2 for both queries.  Answers are checked: 200 fixed scans of
   each kind give the same sums on both sides and in both phases.
2. SERIALIZABLE mix, on kv as left by 1: pgbench, 4 clients (--clients), T
   seconds (30; smoke 5), default_transaction_isolation = serializable, each
   transaction `SELECT count(*) FROM kv WHERE k BETWEEN :a AND :a + 100`
   (~10 rows) and one INSERT of a random key; --max-tries=1
   --failures-detailed, so every serialization failure is a failed
   transaction.  Target: failures per 1000 transactions, AM / btree <= 1.2.
3. size under random inserts: sz(k int8, v int8), UNIQUE index, CREATE INDEX
   over M rows (5M; smoke 200k) of random unique keys (bench.py's
   ((g * 2654435761) mod 4294967311) * 1000003), then M more in INSERT ...
   SELECT batches of 100k with pg_hybrid.background_merge = on (merges run
   as they trigger; the suite waits for merge workers to finish before
   measuring).  Bytes = relation + dynamic stage.  Targets: bytes / btree
   <= 0.45 after the build and after the inserts (stretch 0.35); a
   pg_hybrid.merge() of an empty dynamic stage leaves pg_relation_size
   unchanged (checked right after the build and after the inserts, once the
   stage has been drained by a first merge).
"""

import os
import re
import subprocess
import time

from harness import BenchError, log

MULT, P_MOD, SPREAD = 2654435761, 4294967311, 1000003
SIZES = {
    True: {"rows": 100000, "extra": 5000, "scan_seconds": 2, "ssi_seconds": 5, "size_rows": 200000,
           "batch": 100000},
    False: {"rows": 2000000, "extra": 50000, "scan_seconds": 10, "ssi_seconds": 30, "size_rows": 5000000,
            "batch": 100000},
}
KEYSPACE_PER_ROW = 10     # kv keys are random in 1..10N
CHECK_SCANS = 200         # fixed scans whose answers must agree across sides and phases
SCAN_LIMIT = 50
SSI_WIDTH = 100
COST_LIMIT = 1.2          # cost unmerged <= 1.2x cost merged
SSI_LIMIT = 1.2           # failures per 1000 tx, AM <= 1.2x btree
SIZE_LIMIT, SIZE_STRETCH = 0.45, 0.35
DB = "engine"


class Suite:
    def __init__(self, a, cl, res):
        self.a, self.cl, self.res = a, cl, res
        self.sz = dict(SIZES[a.smoke])
        if a.rows:   # --rows: kv rows; the extra keys and the size case scale with it
            f = a.rows / self.sz["rows"]
            self.sz["rows"] = a.rows
            self.sz["extra"] = max(100, int(self.sz["extra"] * f))
            self.sz["size_rows"] = max(1000, int(self.sz["size_rows"] * f))
        if a.seconds:
            self.sz["scan_seconds"] = self.sz["ssi_seconds"] = a.seconds
        self.targets = []
        self.wrong = []
        self.answers = {}      # phase -> (side label, answer) of the first side measured
        self.keyspace = KEYSPACE_PER_ROW * self.sz["rows"]
        total = self.sz["rows"] + self.sz["extra"]
        self.width = max(1, int(round(100.0 * self.keyspace / total)) - 1)   # BETWEEN a AND a + width: ~100 rows
        self.c = None

    # ------------------------------------------------------------ helpers --
    def is_ours(self, sidx):
        return self.a.sides[sidx][0] != "btree"

    def stats(self, idx):
        r = self.c.execute("SELECT row_to_json(s) FROM pg_hybrid.index_stats(%s::regclass) s", (idx,)).fetchone()
        return r[0] or {}

    def rel_bytes(self, idx):
        return self.c.execute("SELECT pg_relation_size(%s::regclass)", (idx,)).fetchone()[0]

    def index_bytes(self, sidx, idx):
        """relation + dynamic stage (the harness's convention)."""
        dyn = int(self.stats(idx).get("dynamic_bytes") or 0) if self.is_ours(sidx) else 0
        return self.rel_bytes(idx) + dyn

    def merge(self, sidx, idx):
        if self.is_ours(sidx):
            return self.c.execute("SELECT pg_hybrid.merge(%s::regclass)", (idx,)).fetchone()[0]
        return 0

    def wait_merge_workers(self, timeout=900):
        """Waits until no pg_hybrid merge worker runs; returns the seconds waited."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            n = self.c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_hybrid merge'"
                               ).fetchone()[0]
            if n == 0:
                return time.time() - t0
            time.sleep(0.2)
        raise BenchError("pg_hybrid merge workers still running after %d s" % timeout)

    def idx_scans(self, idx):
        self.c.execute("SELECT pg_stat_clear_snapshot()")
        return self.c.execute("SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = %s",
                              (idx,)).fetchone()[0]

    def check_plan(self, sql, idx, what, sidx):
        plan = self.c.execute("EXPLAIN (FORMAT JSON) " + sql).fetchone()[0][0]
        found = []

        def walk(n):
            if n.get("Index Name") == idx:
                found.append(n["Node Type"])
            for ch in n.get("Plans", []):
                walk(ch)
        walk(plan["Plan"])
        if not found:
            raise BenchError("%s: plan does not use %s: %s" % (what, idx, str(plan["Plan"])[:1500]))
        self.res.note("%s/%s: %s on %s" % (what, self.res.sides[sidx], found[0], idx))

    def target(self, case, check, value, limit, ok):
        self.targets.append((case, check, value, limit, ok))
        log("  target %-10s %-52s %s  %s" % (case, check, "n/a" if value is None else "%.4g" % value,
                                             "PASS" if ok else "FAIL"))

    def wrong_answer(self, msg):
        self.wrong.append(msg)
        log("  WRONG COUNT %s" % msg)
        self.res.note("WRONG COUNT %s" % msg)

    def script(self, name, text):
        p = os.path.join(self.a.work, "engine_%s.sql" % name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o644)
        return p

    def pgbench(self, args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        cmd = [os.path.join(self.a.pgbin, "pgbench"), "-h", self.a.host, "-p", str(self.a.port),
               "-U", self.a.user] + args + [DB]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, timeout=7200)
        out = p.stdout.decode() + p.stderr.decode()
        if p.returncode != 0:
            raise BenchError("pgbench %s failed (exit %d): %s" % (" ".join(args), p.returncode, out[-2000:]))
        return out

    @staticmethod
    def parse(out, what):
        def num(pat, conv=float):
            m = re.search(pat, out)
            return conv(m.group(1)) if m else None
        r = {"tps": num(r"tps = ([0-9.]+) \(without initial connection time\)"),
             "lat": num(r"latency average = ([0-9.]+) ms"),
             "processed": num(r"number of transactions actually processed: (\d+)", int),
             "failed": num(r"number of failed transactions: (\d+)", int) or 0,
             "serialization": num(r"number of serialization failures: (\d+)", int) or 0,
             "deadlock": num(r"number of deadlock failures: (\d+)", int) or 0}
        if r["tps"] is None or r["processed"] is None:
            raise BenchError("%s: no tps in pgbench output: %s" % (what, out[-1000:]))
        return r

    # ------------------------------------------------------------- part 1 --
    def load_kv_base(self):
        sz = self.sz
        log("engine: kv_base %d rows, kv_extra %d rows, keys random in 1..%d" % (sz["rows"], sz["extra"],
                                                                                 self.keyspace))
        c = self.c
        c.execute("DROP TABLE IF EXISTS kv_base, kv_extra, kv_check")
        c.execute("SELECT setseed(0.42)")
        c.execute("CREATE TABLE kv_base WITH (autovacuum_enabled = off) AS SELECT 1 + floor(random() * %d)::int8 AS k, "
                  "g::int8 AS v FROM generate_series(1, %d) g" % (self.keyspace, sz["rows"]))
        c.execute("SELECT setseed(0.43)")
        c.execute("CREATE TABLE kv_extra WITH (autovacuum_enabled = off) AS SELECT 1 + floor(random() * %d)::int8 AS k, "
                  "-g::int8 AS v FROM generate_series(1, %d) g" % (self.keyspace, sz["extra"]))
        c.execute("SELECT setseed(0.44)")
        c.execute("CREATE TABLE kv_check AS SELECT 1 + floor(random() * %d)::int8 AS a "
                  "FROM generate_series(1, %d)" % (self.keyspace - self.width, CHECK_SCANS))

    def answer(self):
        """Sums over 200 fixed scans of each kind (index scans: seqscan and bitmaps are off)."""
        s50 = self.c.execute("SELECT sum(x.s), sum(x.n) FROM kv_check r, LATERAL (SELECT sum(y.k) AS s, count(*) AS n "
                             "FROM (SELECT k FROM kv WHERE k >= r.a ORDER BY k LIMIT %d) y) x" % SCAN_LIMIT).fetchone()
        r100 = self.c.execute("SELECT sum(x.s), sum(x.n) FROM kv_check r, LATERAL (SELECT sum(k) AS s, count(*) AS n "
                              "FROM kv WHERE k BETWEEN r.a AND r.a + %d) x" % self.width).fetchone()
        return (int(s50[0] or 0), int(s50[1] or 0), int(r100[0] or 0), int(r100[1] or 0))

    def check_answer(self, phase, sidx):
        got = self.answer()
        label = self.res.sides[sidx]
        if phase in self.answers:
            first, want = self.answers[phase]
            if got != want:
                self.wrong_answer("%s: %s answered %s, %s answered %s (scan50 sum, rows; range100 sum, rows)"
                                  % (phase, label, got, first, want))
        else:
            self.answers[phase] = (label, got)
        return got

    def measure_scans(self, sidx, phase, rep, scripts):
        am = self.a.sides[sidx][0]
        for name, path in scripts:
            case = "%s %s" % (name, phase)
            before = self.idx_scans("kv_k")
            out = self.pgbench(["-n", "-M", "prepared", "-c", "1", "-j", "1", "-T", str(self.sz["scan_seconds"]),
                                "-f", path])
            r = self.parse(out, "%s/%s" % (case, am))
            time.sleep(0.6)     # the backend's stats reach the shared stats at exit
            delta = self.idx_scans("kv_k") - before
            if delta < r["processed"]:
                raise BenchError("%s/%s: idx_scan of kv_k rose by %d over %d transactions: not an index scan"
                                 % (case, am, delta, r["processed"]))
            self.res.add(case, "tps", "tps", "higher", sidx, rep, r["tps"])
            self.res.add(case, "latency_avg_ms", "ms", "lower", sidx, rep, r["lat"])
            self.scan_tps[(name, phase, sidx)] = r["tps"]

    def part_scans(self, sidx, rep, scripts):
        """Parts 1 and 2 for one side: fresh kv, index, E unmerged inserts, scans, merge, scans, SSI mix."""
        a, c, res, sz = self.a, self.c, self.res, self.sz
        am = a.sides[sidx][0]
        ours = self.is_ours(sidx)
        log("engine rep %d/%d: kv with %s (%d rows + %d unmerged)" % (rep + 1, a.repeat, am, sz["rows"], sz["extra"]))
        c.execute("DROP TABLE IF EXISTS kv")
        c.execute("CREATE TABLE kv (k int8 NOT NULL, v int8 NOT NULL) WITH (autovacuum_enabled = off)")
        c.execute("INSERT INTO kv SELECT k, v FROM kv_base")
        c.execute("VACUUM ANALYZE kv")
        c.execute("CHECKPOINT")
        opts = " WITH (%s)" % a.reloptions if a.reloptions and ours else ""
        t0 = time.time()
        c.execute("CREATE INDEX kv_k ON kv USING %s (k)%s" % (am, opts))
        res.add("kv", "build_s", "s", "lower", sidx, rep, time.time() - t0)
        if ours:
            # no ratio-triggered merge for the E inserts of this session
            c.execute("SET pg_hybrid.merge_min_entries = %d" % (4 * sz["extra"] + 10000))
            st = self.stats("kv_k")
            if int(st.get("dynamic_entries") or 0):
                res.note("kv/%s: %s dynamic entries right after CREATE INDEX" % (res.sides[sidx], st["dynamic_entries"]))
        t0 = time.time()
        c.execute("INSERT INTO kv SELECT k, v FROM kv_extra")
        res.add("kv", "insert_extra_rows_per_s", "rows/s", "higher", sidx, rep, sz["extra"] / (time.time() - t0))
        if ours:
            c.execute("RESET pg_hybrid.merge_min_entries")
        c.execute("ANALYZE kv")
        if ours:
            st = self.stats("kv_k")
            dyn = int(st.get("dynamic_entries") or 0)
            res.add("kv", "dynamic_entries_unmerged", "entries", "none", sidx, rep, dyn)
            res.add("kv", "static_entries_unmerged", "entries", "none", sidx, rep, int(st.get("static_entries") or 0))
            res.note("kv/%s before the unmerged scans: dynamic_entries %d, static_entries %s, merges %s, "
                     "relation_bytes %s, dynamic_bytes %s" % (res.sides[sidx], dyn, st.get("static_entries"),
                                                              st.get("merges"), st.get("relation_bytes"),
                                                              st.get("dynamic_bytes")))
            if dyn < sz["extra"]:
                res.note("WARNING kv/%s: only %d of the %d inserted keys are in the dynamic stage (a merge ran)"
                         % (res.sides[sidx], dyn, sz["extra"]))
        if rep == 0:
            self.check_plan("SELECT k FROM kv WHERE k >= %d ORDER BY k LIMIT %d" % (self.keyspace // 2, SCAN_LIMIT),
                            "kv_k", "scan50", sidx)
            self.check_plan("SELECT k FROM kv WHERE k BETWEEN %d AND %d" % (self.keyspace // 2,
                                                                           self.keyspace // 2 + self.width),
                            "kv_k", "range100", sidx)
        got = self.check_answer("unmerged", sidx)
        if rep == 0:
            res.note("range100: %d fixed ranges returned %d rows (%.1f each); scan50: %d scans, %d rows"
                     % (CHECK_SCANS, got[3], got[3] / CHECK_SCANS, CHECK_SCANS, got[1]))
        self.measure_scans(sidx, "unmerged", rep, scripts)
        t0 = time.time()
        moved = self.merge(sidx, "kv_k")
        if ours:
            st = self.stats("kv_k")
            res.note("kv/%s: pg_hybrid.merge() moved %s entries in %.2f s; then dynamic_entries %s"
                     % (res.sides[sidx], moved, time.time() - t0, st.get("dynamic_entries")))
            res.add("kv", "dynamic_entries_merged", "entries", "none", sidx, rep, int(st.get("dynamic_entries") or 0))
        self.check_answer("merged", sidx)
        self.measure_scans(sidx, "merged", rep, scripts)
        for name, _ in scripts:
            un, me = self.scan_tps[(name, "unmerged", sidx)], self.scan_tps[(name, "merged", sidx)]
            # cost = 1 / throughput (one client)
            res.add(name, "cost_unmerged_over_merged", "ratio", "lower", sidx, rep, me / un if un else None)
        self.part_ssi(sidx, rep)
        c.execute("DROP TABLE kv")

    # ------------------------------------------------------------- part 2 --
    def part_ssi(self, sidx, rep):
        a, res, sz = self.a, self.res, self.sz
        am = a.sides[sidx][0]
        log("engine rep %d/%d: SERIALIZABLE mix with %s, %d clients, %d s" % (rep + 1, a.repeat, am, a.clients,
                                                                              sz["ssi_seconds"]))
        case = "ssi mix"
        before = self.idx_scans("kv_k")
        out = self.pgbench(["-n", "-M", "prepared", "-c", str(a.clients), "-j", str(min(a.threads, a.clients)),
                            "-T", str(sz["ssi_seconds"]), "--max-tries=1", "--failures-detailed",
                            "-f", self.ssi_script],
                           env={"PGOPTIONS": "-c default_transaction_isolation=serializable"})
        r = self.parse(out, "%s/%s" % (case, am))
        time.sleep(0.6)
        delta = self.idx_scans("kv_k") - before
        if delta < r["processed"]:
            raise BenchError("%s/%s: idx_scan of kv_k rose by %d over %d transactions: not an index scan"
                             % (case, am, delta, r["processed"]))
        tried = r["processed"] + r["failed"]
        res.add(case, "tps", "tps", "higher", sidx, rep, r["tps"])
        res.add(case, "latency_avg_ms", "ms", "lower", sidx, rep, r["lat"])
        res.add(case, "failures_per_1000_tx", "per 1000 tx", "lower", sidx, rep,
                1000.0 * r["failed"] / tried if tried else None)
        res.add(case, "serialization_failures", "count", "lower", sidx, rep, r["serialization"])
        res.add(case, "deadlock_failures", "count", "lower", sidx, rep, r["deadlock"])
        res.add(case, "transactions_tried", "count", "none", sidx, rep, tried)

    # ------------------------------------------------------------- part 3 --
    def part_size(self, sidx, rep):
        a, c, res, sz = self.a, self.c, self.res, self.sz
        am = a.sides[sidx][0]
        ours = self.is_ours(sidx)
        m = sz["size_rows"]
        case = "size unique int8"
        key = "((g * %d) %% %d) * %d" % (MULT, P_MOD, SPREAD)
        log("engine rep %d/%d: sz with %s: UNIQUE index over %d rows, then %d random inserts"
            % (rep + 1, a.repeat, am, m, m))
        c.execute("DROP TABLE IF EXISTS sz")
        c.execute("CREATE TABLE sz (k int8 NOT NULL, v int8 NOT NULL) WITH (autovacuum_enabled = off)")
        c.execute("INSERT INTO sz SELECT %s, g FROM generate_series(1::int8, %d) g" % (key, m))
        c.execute("VACUUM ANALYZE sz")
        c.execute("CHECKPOINT")
        opts = " WITH (%s)" % a.reloptions if a.reloptions and ours else ""
        t0 = time.time()
        c.execute("CREATE UNIQUE INDEX sz_k ON sz USING %s (k)%s" % (am, opts))
        res.add(case, "build_s", "s", "lower", sidx, rep, time.time() - t0)
        res.add(case, "bytes_after_build", "bytes", "lower", sidx, rep, self.index_bytes(sidx, "sz_k"))
        if ours:
            self.empty_merge(sidx, rep, case, "build")
            c.execute("SET pg_hybrid.background_merge = on")
        batch = sz["batch"]
        t0 = time.time()
        for lo in range(m + 1, 2 * m + 1, batch):
            hi = min(2 * m, lo + batch - 1)
            c.execute("INSERT INTO sz SELECT %s, g FROM generate_series(%d::int8, %d) g" % (key, lo, hi))
        ins = time.time() - t0
        res.add(case, "insert_rows_per_s", "rows/s", "higher", sidx, rep, m / ins)
        if ours:
            waited = self.wait_merge_workers()
            st = self.stats("sz_k")
            res.note("%s/%s rep %d: %d inserts in %.1f s, then %.1f s waiting for merge workers; index_stats: "
                     "dynamic_entries %s, static_entries %s, merges %s, relation_bytes %s, static_bytes %s, "
                     "dynamic_bytes %s" % (case, res.sides[sidx], rep + 1, m, ins, waited, st.get("dynamic_entries"),
                                           st.get("static_entries"), st.get("merges"), st.get("relation_bytes"),
                                           st.get("static_bytes"), st.get("dynamic_bytes")))
            res.add(case, "merges_during_inserts", "count", "none", sidx, rep, int(st.get("merges") or 0))
        res.add(case, "bytes_after_inserts", "bytes", "lower", sidx, rep, self.index_bytes(sidx, "sz_k"))
        if ours:
            t0 = time.time()
            moved = self.merge(sidx, "sz_k")
            res.note("%s/%s rep %d: draining pg_hybrid.merge() moved %s entries in %.2f s"
                     % (case, res.sides[sidx], rep + 1, moved, time.time() - t0))
        res.add(case, "bytes_after_merge", "bytes", "lower", sidx, rep, self.index_bytes(sidx, "sz_k"))
        if ours:
            self.empty_merge(sidx, rep, case, "inserts")
            c.execute("RESET pg_hybrid.background_merge")
        n = c.execute("SELECT count(*) FROM sz").fetchone()[0]
        if n != 2 * m:
            self.wrong_answer("%s/%s: %d rows in sz, expected %d" % (case, am, n, 2 * m))
        c.execute("DROP TABLE sz")

    def empty_merge(self, sidx, rep, case, when):
        """pg_hybrid.merge() of an empty dynamic stage: relation bytes before and after."""
        st = self.stats("sz_k")
        dyn = int(st.get("dynamic_entries") or 0)
        before = self.rel_bytes("sz_k")
        moved = self.merge(sidx, "sz_k")
        after = self.rel_bytes("sz_k")
        self.res.add(case, "relation_bytes_before_empty_merge_after_%s" % when, "bytes", "none", sidx, rep, before)
        self.res.add(case, "relation_bytes_after_empty_merge_after_%s" % when, "bytes", "none", sidx, rep, after)
        self.empty.setdefault(when, []).append((before, after, dyn, moved))
        self.res.note("%s/%s rep %d: merge() of an empty dynamic stage after the %s (dynamic_entries %d, moved %s): "
                      "relation_bytes %d -> %d" % (case, self.res.sides[sidx], rep + 1, when, dyn, moved, before, after))

    # --------------------------------------------------------------- run --
    def ratio(self, case, metric):
        for c_, m, _, _, _, r in self.res.table():
            if (c_, m) == (case, metric):
                return r
        return None

    def am_median(self, case, metric):
        for c_, m, _, _, st, _ in self.res.table():
            if (c_, m) == (case, metric):
                return st[1][0], st[0][0]
        return None, None

    def run(self):
        a, res, sz = self.a, self.res, self.sz
        self.cl.create_db(DB)
        with self.cl.connect() as c0:
            for s in ("enable_seqscan = off", "enable_bitmapscan = off"):
                c0.execute("ALTER DATABASE %s SET %s" % (DB, s))
        self.c = self.cl.connect(DB)
        self.scan_tps = {}
        self.empty = {}
        ks, w = self.keyspace, self.width
        scripts = [
            ("scan50", self.script("scan50", "\\set a random(1, %d)\nSELECT k FROM kv WHERE k >= :a ORDER BY k LIMIT %d;\n"
                                   % (ks, SCAN_LIMIT))),
            ("range100", self.script("range100", "\\set a random(1, %d)\nSELECT k FROM kv WHERE k BETWEEN :a AND :a + %d;\n"
                                     % (ks - w, w))),
        ]
        self.ssi_script = self.script("ssi", (
            "\\set a random(1, %d)\n\\set r random(1, %d)\n"
            "BEGIN ISOLATION LEVEL SERIALIZABLE;\n"
            "SELECT count(*) FROM kv WHERE k BETWEEN :a AND :a + %d;\n"
            "INSERT INTO kv VALUES (:r, 0);\n"
            "END;\n") % (ks - SSI_WIDTH, ks, SSI_WIDTH))
        facts = self.c.execute("SELECT current_setting('shared_buffers'), current_setting('pg_hybrid.shared_memory', true), "
                               "current_setting('pg_hybrid.background_merge', true), "
                               "current_setting('pg_hybrid.merge_min_entries', true), "
                               "current_setting('max_pred_locks_per_transaction')").fetchone()
        res.params.update({
            "kv rows": sz["rows"],
            "kv keys": "random in 1..%d, plain index on k; then %d more inserted and left unmerged" % (ks, sz["extra"]),
            "scan50": "SELECT k FROM kv WHERE k >= :a ORDER BY k LIMIT %d" % SCAN_LIMIT,
            "range100": "SELECT k FROM kv WHERE k BETWEEN :a AND :a + %d (~100 rows)" % w,
            "scan measurement": "pgbench -n -M prepared -c 1 -j 1 -T %d per query, phase and side" % sz["scan_seconds"],
            "ssi mix": "pgbench -M prepared -c %d -j %d -T %d --max-tries=1 --failures-detailed, "
                       "PGOPTIONS=-c default_transaction_isolation=serializable; BEGIN ISOLATION LEVEL SERIALIZABLE; "
                       "SELECT count(*) FROM kv WHERE k BETWEEN :a AND :a + %d; INSERT INTO kv VALUES (:r, 0); END"
                       % (a.clients, min(a.threads, a.clients), sz["ssi_seconds"], SSI_WIDTH),
            "size rows": "%d rows, UNIQUE index, then %d random unique inserts in %d-row INSERT ... SELECT batches, "
                         "pg_hybrid.background_merge = on" % (sz["size_rows"], sz["size_rows"], sz["batch"]),
            "data size": "kv %d rows x 2 int8; sz %d -> %d rows x 2 int8" % (sz["rows"] + sz["extra"], sz["size_rows"],
                                                                            2 * sz["size_rows"]),
            "shared_buffers": facts[0], "pg_hybrid.shared_memory": facts[1] or "-",
            "pg_hybrid.background_merge (cluster)": facts[2] or "-",
            "pg_hybrid.merge_min_entries (cluster; raised in the session of the unmerged inserts)": facts[3] or "-",
            "max_pred_locks_per_transaction": facts[4],
            "planner": "enable_seqscan = off, enable_bitmapscan = off in database %s (both sides)" % DB,
            "reloptions": a.reloptions or "(defaults)"})
        self.load_kv_base()
        for rep in range(a.repeat):
            order = [1, 0] if rep % 2 == 0 else [0, 1]
            for sidx in order:
                self.part_scans(sidx, rep, scripts)
        self.c.execute("DROP TABLE kv_base, kv_extra, kv_check")
        for rep in range(a.repeat):
            order = [1, 0] if rep % 2 == 0 else [0, 1]
            for sidx in order:
                self.part_size(sidx, rep)
        self.report_targets()
        self.c.close()
        self.cl.drop_db(DB)
        if self.wrong:
            raise BenchError("%d wrong count(s): %s" % (len(self.wrong), "; ".join(self.wrong[:4])))

    def report_targets(self):
        for name in ("scan50", "range100"):
            un, _ = self.am_median(name, "cost_unmerged_over_merged")
            self.target("(1) %s" % name, "AM cost unmerged / merged <= %.2g" % COST_LIMIT, un, COST_LIMIT,
                        un is not None and un <= COST_LIMIT)
            r = self.ratio("%s unmerged" % name, "tps")
            if r is not None:
                self.res.note("(1) %s: AM (unmerged) / btree throughput %.3f, i.e. cost %.2fx btree's; merged: %.3f"
                              % (name, r, 1 / r if r else float("inf"), self.ratio("%s merged" % name, "tps") or 0))
        am, base = self.am_median("ssi mix", "failures_per_1000_tx")
        if am is None or base is None:
            r, ok = None, False
        elif base == 0:
            r, ok = (1.0, True) if am == 0 else (float("inf"), False)
            self.res.note("(2) ssi mix: btree had no failures; the ratio is %s" % ("1 (both 0)" if am == 0 else "infinite"))
        else:
            r = am / base
            ok = r <= SSI_LIMIT
        self.target("(2) ssi mix", "failures per 1000 tx, AM / btree <= %.2g" % SSI_LIMIT, r, SSI_LIMIT, ok)
        case = "size unique int8"
        for metric, what in (("bytes_after_build", "after CREATE INDEX"),
                             ("bytes_after_inserts", "after N random inserts")):
            r = self.ratio(case, metric)
            self.target("(3) size", "bytes %s / btree <= %.2g" % (what, SIZE_LIMIT), r, SIZE_LIMIT,
                        r is not None and r <= SIZE_LIMIT)
            if metric == "bytes_after_inserts":
                self.target("(3) size", "bytes %s / btree <= %.2g (stretch)" % (what, SIZE_STRETCH), r, SIZE_STRETCH,
                            r is not None and r <= SIZE_STRETCH)
        for when in ("build", "inserts"):
            runs = self.empty.get(when)
            if not runs:
                continue
            grown = max(after - before for before, after, _, _ in runs)
            worst = max(after / before if before else 1.0 for before, after, _, _ in runs)
            self.target("(3) empty merge", "relation bytes after / before a merge of an empty stage (after the %s) = 1"
                        % when, worst, 1.0, grown == 0)
            if grown:
                self.res.note("(3) merge() of an empty dynamic stage after the %s grew the relation by up to %d bytes"
                              % (when, grown))


def run(a, cl, res):
    s = Suite(a, cl, res)
    try:
        s.run()
    finally:
        res.targets = s.targets
