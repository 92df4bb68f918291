#!/usr/bin/env python3
"""bench/plot.py RESULT.csv [OUT.png] — chart of one suite's report (harness.py CSV).

elastic: <stem>.png is the paper's Figure 5 shape from <stem>-curve.csv
(index MB, probe and range cost of both sides against rows in the index,
growth then removal), <stem>-ratios.png the ratio bars as for probe.
probe, engine: one bar per (case, metric) with the ratio AM / baseline on a log axis
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
                                                 "rows per case", "rows per key type", "kv rows", "clients", "shared_buffers") if k in facts]
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
        colors.append("#999999" if abs(x - 1) < 0.02 or r["better"] == "none" else ("#2e8b57" if good else "#c0392b"))
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
    if suite == "tpch" and any(r["metric"] == "physical_bytes" for r in rows):   # --table-am: the drive's view
        size = ("MB logical / physical (LZ4 per 4 KB)", [(label(r), r) for r in rows if r["unit"] == "bytes"], 1e6)
    if suite == "pgbench" and any(r["metric"] == "table_bytes" for r in rows):   # --table-am: totals only
        size = ("MB (tables, indexes)", [(label(r), r) for r in rows if r["unit"] == "bytes"
                                         and not r["metric"].startswith("table_bytes_")], 1e6)
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


def elastic_chart(src, out, title):
    """Suite elastic: the paper's Figure 5 shape from <stem>-curve.csv: index
    bytes, probe and 100-row range cost of both sides against the rows in the
    index, through the growth phase and the removal phase (x: sample order,
    labelled with the rows in the index; the bound as a dashed line)."""
    stem = os.path.splitext(src)[0]
    with open(stem + "-curve.csv") as fh:
        pts = list(csv.DictReader(fh))
    bounds = {}
    fj = stem + ".json"
    if os.path.exists(fj):
        with open(fj) as fh:
            params = json.load(fh).get("params", {})
        for k, v in params.items():
            if k.endswith(" size_bound") and "NOT applied" not in str(v):
                bounds[k.split()[0]] = float(str(v).split()[0])
    kts = list(dict.fromkeys(p["keytype"] for p in pts))
    sides = list(dict.fromkeys(p["side"] for p in pts))
    metrics = [("index_bytes", "index MB", 1e6), ("probe_ns", "probe ns", 1.0), ("range_us", "100-row range µs", 1.0)]
    fig, axes = plt.subplots(len(kts), 3, figsize=(15, 3.6 * len(kts) + 0.6), squeeze=False)
    colors = {sides[0]: AM_COLOR}
    for s in sides[1:]:
        colors[s] = BASE_COLOR
    for i, kt in enumerate(kts):
        mine = [p for p in pts if p["keytype"] == kt]
        steps = sorted(set(int(p["step"]) for p in mine))
        rows_at = {int(p["step"]): int(p["rows"]) for p in mine}
        grow_end = max([int(p["step"]) for p in mine if p["phase"] == "grow"] or [0])
        for j, (m, label, scale) in enumerate(metrics):
            ax = axes[i][j]
            for s in sides:
                xs = [int(p["step"]) for p in mine if p["side"] == s]
                ys = [float(p[m]) / scale for p in mine if p["side"] == s]
                ax.plot(xs, ys, marker="o", markersize=3, color=colors[s], label=s)
                comp = [(int(p["step"]), float(p[m]) / scale) for p in mine
                        if p["side"] == s and p.get("compact_leaves") not in ("", None, "0")]
                if comp:
                    ax.scatter([x for x, _ in comp], [y for _, y in comp], s=28, facecolors="none",
                               edgecolors="#c0392b", zorder=3, label="%s: compact leaves present" % s)
            if m == "index_bytes":
                for s in sides:
                    inuse = [(int(p["step"]), float(p["pages_in_use_bytes"]) / scale) for p in mine
                             if p["side"] == s and p.get("pages_in_use_bytes") not in ("", None)]
                    if inuse:
                        ax.plot([x for x, _ in inuse], [y for _, y in inuse], linestyle="--", linewidth=1,
                                color=colors[s], label="%s: pages in use" % s)
            if m == "index_bytes" and kt in bounds:
                ax.axhline(bounds[kt] / scale, color="#c0392b", linestyle="--", linewidth=1, label="size_bound")
                ax.axhline(bounds[kt] * 1.1 / scale, color="#c0392b", linestyle=":", linewidth=1, label="bound + 10%")
            ax.axvline(grow_end + 0.5, color="#aaaaaa", linewidth=0.8)
            every = max(1, len(steps) // 10)
            ax.set_xticks(steps[::every])
            ax.set_xticklabels([("%.2gM" % (rows_at[x] / 1e6)) if rows_at[x] >= 1e6 else "%dk" % (rows_at[x] // 1000)
                                for x in steps[::every]], fontsize=7)
            ax.set_ylim(bottom=0)
            ax.set_title("%s: %s (grow | remove 80%%)" % (kt, label), fontsize=8)
            ax.set_xlabel("rows in the index", fontsize=7)
            ax.tick_params(axis="y", labelsize=7)
            if i == 0 and j == 0:
                ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(title + "\n(Figure 5 shape: growth past the bound, then deletes + VACUUM)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot(src, out):
    with open(src) as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError("no rows in %s" % src)
    title = title_of(src, rows)
    if rows[0]["suite"] == "elastic":
        ratio_chart(rows, os.path.splitext(out)[0] + "-ratios.png", title)
        if os.path.exists(os.path.splitext(src)[0] + "-curve.csv"):
            elastic_chart(src, out, title)
        else:
            ratio_chart(rows, out, title)
    elif rows[0]["suite"] in ("probe", "engine"):
        ratio_chart(rows, out, title)
    else:
        panels_chart(rows, out, title)
    return out


if __name__ == "__main__":
    a = sys.argv[1]
    print(plot(a, sys.argv[2] if len(sys.argv) > 2 else os.path.splitext(a)[0] + ".png"))
