#!/usr/bin/env bash
# bench/smoke.sh — the test suite's benchmark step (scripts/test.sh step "bench").
#
# 1. Bad input must fail cleanly: unknown suite, unknown index AM, a hash
#    baseline for a suite with ranges, an unknown table AM, a port in use,
#    a cluster that cannot start (bad shared_buffers), --csd for a suite other
#    than tpch and htap, a --csd size that is not one.  Each must exit non-zero
#    with the expected message and leave no server of ours running.
# 2. `bench/run.sh all --smoke` with the AM under test (PH_AM; btree in stand-in
#    mode) against btree: every suite must finish (TPC-H answers checked against
#    DuckDB inside the harness) and write its csv/md/png with both sides measured.
#    The engine suite (part of `all`) must also write its targets CSV, with
#    the AM's dynamic stage filled before the unmerged scans, and no wrong
#    answers.
# 3. `bench/run.sh elastic --smoke --index-am elastic_btree` (50k rows per key
#    type; with PH_AM=elastic_btree it already ran in step 2; if elastic_btree
#    is not installed, with PH_AM as a stand-in): report, Figure 5 curve CSV,
#    targets, and no wrong counts (the harness fails on those).
# 4. `bench/run.sh tiered --smoke --cache-cap 0` with tiered_btree against
#    btree and tiered_hash against hash (each skipped when not installed):
#    every workload measured.
# 5. `bench/run.sh tpch --smoke --table-am hasis` (on an emulated CSD, --csd 2G,
#    where the kernel has zram): heap and hasis tables side by side, answers
#    checked against DuckDB, metered physical bytes, Q1/Q6 blocks, and the
#    device's own bytes with --csd.
# 6. `bench/run.sh htap --smoke --table-am hasis` (--csd 2G where zram exists):
#    go-tpc's CH-benCHmark on heap and on hasis, TPC-C alone and beside the
#    analytical client, and the hasis side's compaction bytes.
# No timing thresholds.  Reports go to $PH_SCRATCH/bench_smoke.
#
# Usage: bench/smoke.sh [--quick]     (--quick: accepted for test.sh, same sizes)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
ph_parse_quick "$0" "$@"

out=$PH_SCRATCH/bench_smoke
rm -rf "$out"
mkdir -p "$out"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

no_server_left() {   # no postmaster of the bench scratch cluster may survive a failed run
    local pid
    pid=$(ph_cluster_pid "$PH_SCRATCH/bench")
    [[ -z $pid ]] || { fail "$1: bench cluster still running (pid $pid)"; return 0; }
}

# expect_fail NAME PATTERN ARGS...: run.sh ARGS must exit non-zero and print PATTERN
expect_fail() {
    local name=$1 pat=$2 rc=0
    shift 2
    bash "$PH_REPO/bench/run.sh" "$@" --out "$out/bad" >"$out/$name.log" 2>&1 || rc=$?
    if ((rc == 0)); then
        fail "$name: run.sh $* exited 0"
    elif ! grep -Eq "$pat" "$out/$name.log"; then
        fail "$name: exit $rc but no /$pat/ in the output:"
        tail -n 5 "$out/$name.log" >&2
    else
        echo "ok: $name -> exit $rc: $(grep -Em1 "$pat" "$out/$name.log")"
    fi
    no_server_left "$name"
}

expect_fail unknown_suite "unknown suite 'nosuch'" nosuch --smoke
expect_fail unknown_am "unknown index AM 'nosuch_am'" probe --smoke --index-am nosuch_am
expect_fail unknown_table_am "unknown table AM" probe --smoke --table-am nosuch
# hash answers equality only: no baseline of the range suites
expect_fail hash_baseline "baseline must be a built-in AM" ycsb --smoke --baseline hash
expect_fail bad_start "could not start cluster" probe --smoke --shared-buffers nonsense
expect_fail csd_suite "is for the tpch and htap suites" probe --smoke --csd 1G
expect_fail csd_size "needs a device size" tpch --smoke --table-am hasis --csd lots

# a port in use: a plain TCP listener on the bench port
python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(120)' "$PH_BENCH_PORT" &
listener=$!
sleep 0.5
expect_fail port_in_use "already in use" probe --smoke
kill "$listener" 2>/dev/null || true
wait "$listener" 2>/dev/null || true

# the suites themselves
rc=0
bash "$PH_REPO/bench/run.sh" all --smoke --index-am "$PH_AM" --out "$out" || rc=$?
((rc == 0)) || fail "bench/run.sh all --smoke --index-am $PH_AM exited $rc"
no_server_left "all"
for s in probe pgbench ycsb tpcc tpch engine; do
    for ext in csv md png; do
        f=$(ls "$out/$s-"*"-smoke.$ext" 2>/dev/null | head -n1 || true)
        [[ -n $f && -s $f ]] || fail "$s: no .$ext report in $out"
    done
    csv=$(ls "$out/$s-"*"-smoke.csv" 2>/dev/null | head -n1 || true)
    [[ -n $csv ]] || continue
    # both sides measured on at least one metric
    n=$(awk -F, 'NR > 1 && $8 != "" && $11 != "" {n++} END {print n + 0}' "$csv")
    ((n > 0)) || fail "$s: no metric with values for both sides in $csv"
    echo "ok: $s report $(basename "$csv"): $n metrics with both sides"
done
if grep -q "WRONG ANSWER" "$out"/tpch-*-smoke.md 2>/dev/null; then fail "tpch: wrong answers"; fi
# engine: targets reported, answers equal on both sides, the dynamic stage really filled
ls "$out"/engine-*-smoke-targets.csv >/dev/null 2>&1 || fail "engine: no -targets.csv in $out"
if grep -qs "WRONG COUNT" "$out"/engine-*-smoke.md; then fail "engine: wrong answers"; fi
csv=$(ls "$out/engine-"*"-smoke.csv" 2>/dev/null | head -n1 || true)
if [[ -n $csv && $PH_AM != btree ]]; then
    dyn=$(awk -F, '$2 == "kv" && $3 == "dynamic_entries_unmerged" {print $11}' "$csv")
    [[ -n $dyn && ${dyn%.*} -gt 0 ]] || fail "engine: no entries in the dynamic stage before the unmerged scans ($csv)"
fi

# the elastic suite (elastic_btree vs btree under a size bound)
if [[ $PH_AM != elastic_btree ]]; then
    eam=$PH_AM
    if grep -qs "CREATE ACCESS METHOD elastic_btree" "$("$PH_PG_CONFIG" --sharedir)"/extension/pg_hybrid--*.sql; then
        eam=elastic_btree
    else
        echo "note: elastic_btree is not installed; the elastic suite runs with $PH_AM as a stand-in"
    fi
    rc=0
    bash "$PH_REPO/bench/run.sh" elastic --smoke --index-am "$eam" --out "$out" || rc=$?
    ((rc == 0)) || fail "bench/run.sh elastic --smoke --index-am $eam exited $rc"
    no_server_left "elastic"
fi
for ext in csv md png json; do
    f=$(ls "$out/elastic-"*"-smoke.$ext" 2>/dev/null | head -n1 || true)
    [[ -n $f && -s $f ]] || fail "elastic: no .$ext report in $out"
done
for f in curve targets; do
    ls "$out/elastic-"*"-smoke-$f.csv" >/dev/null 2>&1 || fail "elastic: no -$f.csv in $out"
done
csv=$(ls "$out/elastic-"*"-smoke.csv" 2>/dev/null | head -n1 || true)
if [[ -n $csv ]]; then
    n=$(awk -F, 'NR > 1 && $8 != "" && $11 != "" {n++} END {print n + 0}' "$csv")
    ((n > 0)) || fail "elastic: no metric with values for both sides in $csv"
    # every (a)/(b)/(c) case measured probes on both sides
    for c in "int8 nobound" "int8 bound" "int8 shrink" "text32 nobound" "text32 bound" "text32 shrink"; do
        grep -q "^elastic,$c,probe_ns," "$csv" || fail "elastic: no probe_ns for '$c' in $csv"
    done
    echo "ok: elastic report $(basename "$csv"): $n metrics with both sides"
fi
if grep -qs "WRONG COUNT\|VERIFY FAILED" "$out"/elastic-*-smoke.md; then fail "elastic: wrong counts or verify failures"; fi

# the tiered suite (tiered_btree vs btree, tiered_hash vs hash), without the
# page-cache cap: a fresh machine may lack the cgroup v1 memory controller
for pair in tiered_btree:btree tiered_hash:hash; do
    am=${pair%%:*} base=${pair#*:}
    if ! grep -qs "CREATE ACCESS METHOD $am" "$("$PH_PG_CONFIG" --sharedir)"/extension/pg_hybrid--*.sql; then
        echo "note: $am is not installed; its tiered suite is skipped"
        continue
    fi
    rc=0
    bash "$PH_REPO/bench/run.sh" tiered --smoke --index-am "$am" --baseline "$base" --cache-cap 0 --out "$out" || rc=$?
    ((rc == 0)) || fail "bench/run.sh tiered --smoke --index-am $am --baseline $base exited $rc"
    no_server_left "tiered"
    csv=$(ls "$out/tiered-$am-"*"-smoke.csv" 2>/dev/null | head -n1 || true)
    cases="C-zipfian C-uniform A-zipfian"
    [[ $base == btree ]] && cases+=" scan100"
    if [[ -n $csv ]]; then
        for c in $cases; do
            grep -q "^tiered,$c,tps," "$csv" || fail "tiered: no tps for '$c' in $csv"
        done
        echo "ok: tiered report $(basename "$csv")"
    else
        fail "tiered: no .csv report for $am in $out"
    fi
done

# tpch with the table AM: heap and hasis tables side by side, answers
# checked against DuckDB, metered bytes; on an emulated CSD where zram exists
csd=()
[[ -e /sys/class/zram-control/hot_add ]] && csd=(--csd 2G)
rc=0
bash "$PH_REPO/bench/run.sh" tpch --smoke --table-am hasis "${csd[@]}" --out "$out/tables" || rc=$?
((rc == 0)) || fail "bench/run.sh tpch --smoke --table-am hasis ${csd[*]} exited $rc"
no_server_left "tpch-tables"
csv=$(ls "$out/tables/tpch-btree+hasis-"*"-smoke.csv" 2>/dev/null | head -n1 || true)
if [[ -n $csv ]]; then
    for m in "tables,physical_bytes" "Q01,shared_blocks" "Q06,time_s"; do
        grep -q "^tpch,$m," "$csv" || fail "tpch --table-am hasis: no $m in $csv"
    done
    ((${#csd[@]} == 0)) || grep -q "^tpch,device,physical_bytes," "$csv" || fail "tpch --csd: no device bytes in $csv"
    echo "ok: tpch --table-am hasis report $(basename "$csv")${csd[*]:+ (on an emulated CSD)}"
else
    fail "tpch --table-am hasis: no .csv report in $out/tables"
fi
if grep -qs "WRONG ANSWER" "$out"/tables/tpch-*-smoke.md; then fail "tpch --table-am hasis: wrong answers"; fi

# htap: CH-benCHmark on heap and hasis tables
rc=0
bash "$PH_REPO/bench/run.sh" htap --smoke --table-am hasis "${csd[@]}" --out "$out/htap" || rc=$?
((rc == 0)) || fail "bench/run.sh htap --smoke --table-am hasis ${csd[*]} exited $rc"
no_server_left "htap"
csv=$(ls "$out/htap/htap-btree+hasis-"*"-smoke.csv" 2>/dev/null | head -n1 || true)
if [[ -n $csv ]]; then
    for m in "oltp,tpmC" "htap,tpmC" "htap,queries_finished" "compaction,physical_share"; do
        grep -q "^htap,$m," "$csv" || fail "htap --table-am hasis: no $m in $csv"
    done
    echo "ok: htap --table-am hasis report $(basename "$csv")${csd[*]:+ (on an emulated CSD)}"
else
    fail "htap --table-am hasis: no .csv report in $out/htap"
fi

if ((fails)); then
    echo "bench smoke: $fails failure(s); logs in $out" >&2
    exit 1
fi
echo "bench smoke: all good; reports in $out"
