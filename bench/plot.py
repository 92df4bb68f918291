#!/usr/bin/env python3
"""bench/plot.py RESULT.csv [OUT.png] — chart of one suite's report (harness.py CSV).

probe: one bar per (case, metric) with the ratio AM / baseline on a log axis
(green where the AM is better), since its metrics have a dozen units.
Other suites: the baseline and the AM side by side (median, whiskers min–max
when repeated) in up to three panels: throughput (or TPC-H per-query time),
latency, and index bytes.  Needs matplotlib (bench/run.sh installs it in
bench/.venv).
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BASE_COLOR, AM_COLOR = "#7f8c8d", "#2e86c1"


def f(x):
    return float(x) if x not in ("", None) else None


def title_of(src, rows):
    facts = {}
    fj = os.path.splitext(src)[0] + ".json"
    if os.path.exists(fj):
        with open(fj) as fh:
            j = json.load(fh)
        facts = dict(j.get("facts", {}), **j.get("params", {}))
    r = rows[0]
    t = "%s: %s vs %s" % (r["suite"], r["am"], r["baseline"])
    bits = [("%s %s" % (k, facts[k])) for k in ("scale factor", "warehouses", "usertable rows", "pgbench scale",
                                                 "rows per case", "clients", "shared_buffers") if k in facts]
    bits += ["%s CPUs" % facts["nproc"]] if "nproc" in facts else []
    if facts.get("smoke"):
        bits.append("SMOKE")
    return t + (" — " + ", ".join(bits) if bits else "")


def ratio_chart(rows, out, title):
    labels, ratios, colors = [], [], []
    for r in rows:
        x = f(r["ratio_am_over_baseline"])
        if not x or x <= 0:
            continue
        good = x < 1 if r["better"] == "lower" else x > 1
        labels.append("%s: %s" % (r["case"], r["metric"]))
        ratios.append(x)
        colors.append("#999999" if abs(x - 1) < 0.02 else ("#2e8b57" if good else "#c0392b"))
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(labels) + 1.8))
    y = list(range(len(labels)))[::-1]
    ax.barh(y, [x - 1.0 for x in ratios], left=1.0, color=colors)  # bars grow from the 1.0 line
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    for yi, x in zip(y, ratios):
        ax.text(x, yi, " %.2f" % x, va="center", fontsize=7)
    ax.set_xlim(min(ratios + [0.5]) / 1.5, max(ratios + [2.0]) * 2.0)
    ax.set_xlabel("ratio %s / %s (green: %s better)" % (rows[0]["am"], rows[0]["baseline"], rows[0]["am"]))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def side_by_side(ax, items, ylabel, scale=1.0):
    """items: [(label, row)] -> grouped bars baseline | AM with min–max whiskers."""
    n = len(items)
    xs = list(range(n))
    w = 0.38
    for k, (pre, color) in enumerate((("baseline", BASE_COLOR), ("am", AM_COLOR))):
        med = [(f(r[pre + "_median"]) or 0) / scale for _, r in items]
        lo = [m - (f(r[pre + "_min"]) or 0) / scale for m, (_, r) in zip(med, items)]
        hi = [(f(r[pre + "_max"]) or 0) / scale - m for m, (_, r) in zip(med, items)]
        repeated = any(int(r["repeats"] or 1) > 1 for _, r in items)
        ax.bar([x + (k - 0.5) * w for x in xs], med, w, color=color, label=items[0][1][pre],
               yerr=[lo, hi] if repeated else None, capsize=2)
    for x, (_, r) in zip(xs, items):
        ratio = f(r["ratio_am_over_baseline"])
        if ratio is not None:
            top = max(f(r["baseline_max"]) or 0, f(r["am_max"]) or 0) / scale
            ax.text(x, top, "%.2f" % ratio, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs)
    turn = n > 6 or max(len(lab) for lab, _ in items) * n > 40
    ax.set_xticklabels([lab for lab, _ in items], rotation=35 if turn else 0, ha="right" if turn else "center",
                       fontsize=7)
    ax.margins(y=0.12)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=7, loc="lower right", framealpha=0.9)


def panels_chart(rows, out, title):
    suite = rows[0]["suite"]
    generic = ("schema", "load", "end", "indexes", "throughput", "pgbench")

    def label(r):
        m = r["metric"]
        if m in ("tps", "time_s") or m.startswith("latency"):
            return r["case"]
        m = m.replace("index_bytes_", "").replace("_bytes", "").replace("index_bytes", "indexes")
        return m if r["case"] in generic else "%s %s" % (r["case"], m)
    if suite == "tpch":
        first = ("query time (s)", [(r["case"], r) for r in rows if r["metric"] == "time_s"], 1.0)
    else:
        first = ("throughput", [(label(r), r) for r in rows if r["better"] == "higher"], 1.0)
    lat = ("latency p95 (ms)" if suite == "tpcc" else "mean latency (ms)", [(label(r), r) for r in rows
                            if r["unit"] == "ms" and ("p95" in r["metric"] or "avg" in r["metric"])], 1.0)
    size = ("index MB", [(label(r), r) for r in rows if r["unit"] == "bytes"], 1e6)
    panels = [p for p in (first, lat, size) if p[1]]
    widths = [max(3, len(p[1])) for p in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(min(22, 2.2 + 0.55 * sum(widths)), 4.6),
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, (ylabel, items, scale) in zip(axes[0], panels):
        side_by_side(ax, items, ylabel, scale)
        ax.set_title(ylabel, fontsize=8)
    fig.suptitle(title + "\n(number over a pair: ratio AM / baseline)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot(src, out):
    with open(src) as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError("no rows in %s" % src)
    title = title_of(src, rows)
    if rows[0]["suite"] == "probe":
        ratio_chart(rows, out, title)
    else:
        panels_chart(rows, out, title)
    return out


if __name__ == "__main__":
    a = sys.argv[1]
    print(plot(a, sys.argv[2] if len(sys.argv) > 2 else os.path.splitext(a)[0] + ".png"))
