#!/usr/bin/env bash
# bench/run.sh — benchmark an index AM against btree IN THE SAME RUN (not a test).
#
# Starts its own scratch cluster (port bench_port of pgrx.toml; fsync/full_page_writes/
# synchronous_commit off, autovacuum off, no parallel maintenance/query workers),
# runs bench/bench.py (cases: unique random int8 keys; secondary with 10 TIDs per key;
# pgbench -S -M prepared with pgbench_accounts' PK replaced by a UNIQUE index of the AM)
# and writes <out>/<am>-<date>[-smoke].{csv,md,json,png}.  See bench/bench.py for the metrics.
#
# Usage: bench/run.sh [--smoke] [--rows N] [--am AM] [--baseline AM]
#                     [--shared-buffers SIZE] [--shared-memory SIZE] [--out DIR]
#                     [--no-plot] [-- BENCH.PY ARGS...]
#   --smoke            tiny sizes, finishes in < 1 min; output goes to $PH_SCRATCH/bench_results
#                      unless --out is given
#   --rows N           rows per case (default 5000000); probes stay 1M, ranges 10k
#   --am AM            AM under test (default: pgrx.toml am, i.e. hybrid_btree);
#                      --am btree runs btree vs btree (stand-in check of the harness)
#   --shared-buffers   default 1GB;  --shared-memory: pg_hybrid.shared_memory, default 256MB
#   -- ARGS            passed to bench.py, e.g. -- --cases unique --probes 200000
#                      --reloptions "merge_ratio = 10" --pgbench-seconds 30
# The plot needs matplotlib: created on first use in bench/.venv (python3 -m venv + pip).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

smoke=0
rows=
out=
sb=1GB
shm=256MB
plot=1
baseline=btree
extra=()
while (($#)); do
    case $1 in
        --smoke) smoke=1 ;;
        --rows) shift; rows=$1 ;;
        --am) shift; PH_AM=$1 ;;
        --baseline) shift; baseline=$1 ;;
        --shared-buffers) shift; sb=$1 ;;
        --shared-memory) shift; shm=$1 ;;
        --out) shift; out=$1 ;;
        --no-plot) plot=0 ;;
        --) shift; extra=("$@"); break ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "bench/run.sh: unknown option $1 (see --help)" ;;
    esac
    shift
done
if [[ $PH_AM == btree ]]; then PH_STANDIN=1; PH_PRELOAD=0; else PH_STANDIN=0; PH_PRELOAD=1; fi
export PH_AM PH_STANDIN PH_PRELOAD
[[ $(id -u) == 0 ]] || ph_die "bench/run.sh must run as root (clusters run as $PH_USER via runuser)"
if [[ -z $out ]]; then
    if ((smoke)); then out=$PH_SCRATCH/bench_results; else out=$PH_REPO/bench/results; fi
fi
mkdir -p "$out"

ph_trap_install
DIR=$(ph_scratch bench)
conf=("fsync = off" "synchronous_commit = off" "full_page_writes = off"
      "shared_buffers = '$sb'" "max_wal_size = '16GB'" "min_wal_size = '1GB'" "checkpoint_timeout = '1h'"
      "maintenance_work_mem = '1GB'" "work_mem = '64MB'" "autovacuum = off"
      "max_parallel_maintenance_workers = 0" "max_parallel_workers_per_gather = 0" "jit = off"
      "max_connections = 100")
((PH_PRELOAD)) && conf+=("pg_hybrid.shared_memory = '$shm'")
PH_ALLOW_FSYNC_OFF=1 cluster_init "$DIR" "$PH_BENCH_PORT" "${conf[@]}"
cluster_start "$DIR"
ph_prepare_db "$DIR" bench
ph_log "bench cluster $DIR (port $PH_BENCH_PORT, shared_buffers $sb), am=$PH_AM vs $baseline"

args=(--am "$PH_AM" --baseline "$baseline" --out "$out")
((smoke)) && args+=(--smoke)
[[ -n $rows ]] && args+=(--rows "$rows")
stem=$(PH_PGHOST=$DIR/sock PH_PGPORT=$PH_BENCH_PORT PH_DB=bench \
    python3 "$PH_REPO/bench/bench.py" "${args[@]}" "${extra[@]}" | tee /dev/stderr | tail -n1)
[[ -f $stem.csv ]] || ph_die "bench.py produced no results"

if ((plot)); then
    venv=$PH_REPO/bench/.venv
    if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
        ph_log "creating $venv with matplotlib (first run only)"
        { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check matplotlib; } ||
            ph_warn "could not install matplotlib into $venv; no plot (re-run, or pass --no-plot)"
    fi
    if "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
        "$venv/bin/python" "$PH_REPO/bench/plot.py" "$stem.csv" "$stem.png" >/dev/null || ph_warn "plot failed"
    fi
fi
echo
cat "$stem.md"
echo
ph_log "results: $(ls "$stem".* | tr '\n' ' ')"
