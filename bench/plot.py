#!/usr/bin/env python3
"""bench/plot.py RESULT.csv [OUT.png] — bar chart of the ratios AM/baseline from bench.py.

One bar per (case, metric), log-scaled ratio axis with a line at 1; a bar is
green when the AM is better on that metric (lower time/size, higher rate),
red when worse.  Needs matplotlib (bench/run.sh installs it in bench/.venv).
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.splitext(src)[0] + ".png"
    with open(src) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("no rows in %s" % src)
    ratio_col = [c for c in rows[0] if c.startswith("ratio_")][0]
    am, base = ratio_col[len("ratio_"):].split("_over_")
    facts = {}
    fj = os.path.splitext(src)[0] + ".json"
    if os.path.exists(fj):
        with open(fj) as f:
            facts = json.load(f)
    labels, ratios, colors = [], [], []
    for r in rows:
        if not r[ratio_col]:
            continue
        x = float(r[ratio_col])
        if x <= 0:
            continue
        good = x < 1 if r["better"] == "lower" else x > 1
        labels.append("%s: %s" % (r["case"], r["metric"]))
        ratios.append(x)
        colors.append("#2e8b57" if good else ("#999999" if abs(x - 1) < 0.02 else "#c0392b"))
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(labels) + 1.8))
    y = list(range(len(labels)))[::-1]
    ax.barh(y, [x - 1.0 for x in ratios], left=1.0, color=colors)  # bars grow from the 1.0 line
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    for yi, x in zip(y, ratios):
        ax.text(x, yi, " %.2f" % x, va="center", fontsize=7)
    lo, hi = min(ratios + [0.5]), max(ratios + [2.0])
    ax.set_xlim(lo / 1.5, hi * 2.0)
    ax.set_xlabel("ratio %s / %s (green: %s better)" % (am, base, am))
    title = "%s vs %s" % (am, base)
    if facts:
        title += " — %s rows, shared_buffers %s, %s CPUs, %s%s" % (
            facts.get("rows"), facts.get("shared_buffers"), facts.get("nproc"), facts.get("date"),
            " (smoke)" if facts.get("smoke") else "")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
