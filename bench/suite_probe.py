"""Suites `probe` and `pgbench`: the measurements of bench/bench.py (kept
as they were, see its docstring), run through the harness so they get the
same repeats, report layout and plot as the other suites."""

import argparse

import bench
from harness import log


def run(a, cl, res):
    size = a.size
    probe = a.suite == "probe"
    if probe:
        rows = a.rows or size["probe_rows"]
    else:
        rows = (a.scale or size["scale"]) * 100000   # bench.py derives the scale from rows
    seconds = a.seconds or size["seconds"]
    base_am, am = a.sides[0][0], a.sides[1][0]
    for rep in range(a.repeat):
        # alternate which side goes first, so warm caches favour neither
        ams = [am, base_am] if rep % 2 == 0 else [base_am, am]
        ns = argparse.Namespace(
            host=a.host, port=a.port, user=a.user, os_user=a.user, db=a.db, pgbin=a.pgbin,
            am=ams[0], baseline=ams[1], ams=ams, rows=rows, insert_rows=rows,
            probes=min(1000000, rows), ranges=1000 if a.smoke else 10000, reps=3,
            chunk=5000 if a.smoke else 100000, cases="unique,secondary" if probe else "pgbench",
            pgbench_seconds=seconds, clients=a.clients, threads=a.threads,
            reloptions=a.reloptions, smoke=a.smoke, out=a.work)
        log("%s rep %d/%d: %s" % (a.suite, rep + 1, a.repeat, " then ".join(ams)))
        b = bench.Bench(ns)
        if probe:
            for case in ("unique", "secondary"):
                b.run_case(case)
        else:
            b.run_pgbench()
        for case, metric, unit, better, slot, value in b.rows:
            side = 1 if ams[slot] == am and (slot == 0 or am != base_am) else 0
            res.add(case, metric, unit, better, side, rep, value, quiet=True)  # bench.py logged it
        for n in b.notes:
            res.note(n)
    if probe:
        res.params.update({"rows per case": rows, "probes": min(1000000, rows),
                           "ranges": 1000 if a.smoke else 10000})
    else:
        res.params.update({"pgbench scale": rows // 100000, "clients": a.clients, "threads": a.threads,
                           "seconds per side": seconds})
