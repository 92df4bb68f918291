#!/usr/bin/env bash
# bench/run.sh — benchmark an index access method against PostgreSQL's built-in
# btree IN THE SAME RUN, back to back, on a scratch cluster of its own.
#
# Usage: bash bench/run.sh SUITE [options]      (as root)
#   SUITE    probe    unique/secondary int8 keys: build, size, probes, ranges, inserts
#            pgbench  pgbench -S -M prepared with pgbench_accounts' key in the AM; with --table-am AM
#                     (hasis): pgbench's tables on heap vs on AM (indexes btree on both sides unless
#                     --index-am is given): load time, table bytes after load and run, TPC-B TPS,
#                     latency, WAL bytes per transaction, -S TPS, TPC-B invariant; issue 12's targets
#            ycsb     pgbench scripts over usertable: workloads A B C E, zipfian + uniform keys
#            tpcc     go-tpc TPC-C: tpmC, latency percentiles, errors, index bytes
#            htap     go-tpc CH-benCHmark, with --table-am: TPC-C clients alone, then beside one
#                     analytical client running the 22 CH queries on the same tables; tpmC with and
#                     without it, each query's time, compaction's logical vs physical bytes written
#            tpch     DuckDB dbgen data + 22 queries on PostgreSQL, answers checked against DuckDB
#            elastic  elastic_btree under a size bound: 5M int8 and 5M 32-byte text keys, (a) no bound,
#                     (b) bound 40%/25% of btree's size crossed by inserts, (c) 80% deleted + VACUUM;
#                     probe/range cost and bytes vs btree, targets of issue 4, Figure 5 curve
#            engine   the engine issue's targets: 50-row / 100-row scans with a full dynamic stage
#                     (2M rows + 50k unmerged) vs after a merge, SERIALIZABLE read+insert mix
#                     (failures per 1000 tx), UNIQUE index bytes after a 5M build and 5M random
#                     inserts, relation bytes around a merge of an empty dynamic stage; PASS/FAIL
#            tiered   issue 11: kv(k int8, 120-byte payload) 10M rows, UNIQUE (k) INCLUDE (payload);
#                     YCSB C (zipfian 0.9 and uniform), A (zipfian), 100-row scans, random-order load;
#                     TPS, latency, buffer reads per transaction; the AM side's C-zipfian against its
#                     hot-tier size. shared_buffers 128MB and --cache-cap 256MB unless given
#            all      all of the above but tiered, one report set per suite (elastic only with
#                     --index-am elastic_btree)
# Options:
#   --smoke               tiny sizes (the test suite's step); results go to
#                         $PH_SCRATCH/bench_results unless --out is given
#   --index-am AM         index AM under test: btree, hybrid_btree (default: pgrx.toml am);
#                         elastic_btree, griffin, tiered_btree, tiered_hash. --am is an alias
#   --table-am AM         table AM of the AM side: heap (default) or hasis
#   --baseline AM         built-in index AM to compare with (default btree; hash for the
#                         probe and pgbench suites, whose hash side is not UNIQUE and has no ranges)
#   --repeat N            measure each side N times (alternating order); reports the
#                         median and min–max
#   --out DIR             where reports go (default bench/results)
#   --shared-buffers SIZE default 1GB (tiered: 128MB);  --shared-memory SIZE: pg_hybrid.shared_memory,
#                         default 256MB
#   --cache-cap SIZE      put the cluster in a cgroup v1 memory group limited to shared_buffers +
#                         shared memory + SIZE, so the OS caches about SIZE of its files and the rest
#                         are real reads (default: none; tiered: 256MB; 0 = none)
#   --clients N --threads N   load generators (default 4 clients, 2 threads)
#   --seconds S           measured seconds per workload and side (pgbench, ycsb, tpcc; engine: per
#                         scan measurement and SERIALIZABLE mix)
#   --rows N              probe: rows per case;  ycsb: usertable rows;  elastic: rows per key type;
#                         engine: kv rows (the unmerged inserts and the size case scale with it)
#   --scale N             pgbench scale (default 50; with --table-am hasis 10; smoke 2)
#   --warehouses N        tpcc warehouses (default 1)
#   --sf X                tpch scale factor (default 1; smoke 0.1)
#   --reloptions "k = v"  WITH (...) for the AM's indexes
#   --cases LIST          elastic: the cases to run, comma-separated, of int8, text32 (key types) and
#                         nobound, bound (phases; bound includes shrink and needs nobound's btree
#                         size, so nobound runs too), e.g. "int8,nobound"
#                         (default: all)
#   --table-options "k = v"  WITH (...) for the table AM side's tables (tpch with --table-am), e.g.
#                         "hasis_column_blocks = 28, hasis_delta_blocks = 2"
#   --protocol M          pgbench: pgbench -M simple, extended or prepared (default prepared; the
#                         first two plan every statement, as unprepared clients do)
#   --csd SIZE            put the suite's tables and indexes (tpch, htap with --table-am) on an emulated
#                         computational-storage drive: a zram device of SIZE (LZ4 per 4 KB, free zero
#                         blocks; scripts/csd.sh, design.md §6) as tablespace "csd"; the device's own
#                         compressed bytes per side are reported beside pg_hybrid.storage_stats' meter
#   --pin-cpus            pin the cluster (postmaster, its processes and every backend it forks)
#                         to CPU 0 and the pgbench clients to the other CPUs (needs 2 or more):
#                         ratios of server CPU per transaction, without the run-to-run swings of
#                         scheduling 4 backends and 2 client threads freely over 2 vCPUs (pgbench
#                         suite; other clients are not pinned)
#   --no-plot             skip the PNG
#   --production-wal      PostgreSQL's default WAL settings instead of the bench's: full_page_writes
#                         on, checkpoint_timeout 5min, max_wal_size 1GB (WAL bytes then include the
#                         full-page images a production cluster writes after each checkpoint)
# Writes <out>/<suite>-<am>-<date>[-smoke].{csv,md,png} (+ .json with machine and settings).
#
# Tools: Python packages (psycopg, duckdb + duckdb-extension-tpch 1.5.5, matplotlib) go into
# bench/.venv, created on first use; go-tpc v1.0.9 is built from bench/tpcc (go.sum pinned)
# into bench/.venv/bin/go-tpc.  Needs `go` (>= 1.21; /usr/local/go/bin is searched too, and
# Debian's golang-go is installed when missing and recent enough).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

SUITES=(probe pgbench ycsb tpcc tpch elastic engine tiered htap)
# AMs the project knows about; anything else is a typo.  The planned ones fail
# later with "not installed" until their code lands.
KNOWN_INDEX_AMS=(btree hybrid_btree elastic_btree griffin tiered_btree tiered_hash)
KNOWN_TABLE_AMS=(heap hasis)

suite=
smoke=0
index_am=$PH_AM
index_am_given=0
table_am=heap
baseline=btree
repeat=1
out=
sb=
shm=256MB
cache_cap=
csd=
plot=1
pin_cpus=0
production_wal=0
pyargs=()
need_arg() { [[ $# -ge 2 && -n $2 ]] || ph_die "bench/run.sh: $1 needs a value (see --help)"; }
while (($#)); do
    case $1 in
        --smoke) smoke=1 ;;
        --index-am | --am) need_arg "$@"; shift; index_am=$1; index_am_given=1 ;;
        --table-am) need_arg "$@"; shift; table_am=$1 ;;
        --baseline) need_arg "$@"; shift; baseline=$1 ;;
        --repeat) need_arg "$@"; shift; repeat=$1 ;;
        --out) need_arg "$@"; shift; out=$1 ;;
        --shared-buffers) need_arg "$@"; shift; sb=$1 ;;
        --shared-memory) need_arg "$@"; shift; shm=$1 ;;
        --cache-cap) need_arg "$@"; shift; cache_cap=$1 ;;
        --csd) need_arg "$@"; shift; csd=$1 ;;
        --no-plot) plot=0 ;;
        --pin-cpus) pin_cpus=1 ;;
        --production-wal) production_wal=1 ;;
        --clients | --threads | --seconds | --rows | --scale | --warehouses | --sf | --reloptions | --table-options | --protocol | --cases)
            need_arg "$@"; pyargs+=("$1" "$2"); shift ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        -*) ph_die "bench/run.sh: unknown option $1 (see --help)" ;;
        *)
            [[ -z $suite ]] || ph_die "bench/run.sh: one suite per run (got '$suite' and '$1'; use 'all')"
            suite=$1 ;;
    esac
    shift
done

[[ -n $suite ]] || ph_die "bench/run.sh: name a suite: ${SUITES[*]} all (see --help)"
# the tiered suite wants buffer misses: small shared_buffers, a capped page cache
if [[ $suite == tiered ]]; then
    sb=${sb:-128MB}
    cache_cap=${cache_cap:-256MB}
fi
sb=${sb:-1GB}
if [[ $suite == all ]]; then
    run_suites=(probe pgbench ycsb tpcc tpch engine)
    # the elastic suite is about elastic_btree's size bound; with another AM it is only a stand-in
    if [[ $index_am == elastic_btree ]]; then run_suites+=(elastic); fi
elif [[ " ${SUITES[*]} " == *" $suite "* ]]; then
    run_suites=("$suite")
else
    ph_die "bench/run.sh: unknown suite '$suite' (suites: ${SUITES[*]} all)"
fi
[[ " ${KNOWN_INDEX_AMS[*]} " == *" $index_am "* ]] ||
    ph_die "bench/run.sh: unknown index AM '$index_am' (known: ${KNOWN_INDEX_AMS[*]})"
# PostgreSQL's hash index answers equality only: a baseline of the probe
# (ranges not measured), pgbench -S and tiered (tiered_hash's) suites
[[ $baseline == btree || ($baseline == hash && " probe pgbench tiered " == *" ${run_suites[*]} "*) ]] ||
    ph_die "bench/run.sh: --baseline must be a built-in AM (btree; hash for the probe, pgbench and tiered suites), not '$baseline'"
[[ " ${KNOWN_TABLE_AMS[*]} " == *" $table_am "* ]] ||
    ph_die "bench/run.sh: unknown table AM '$table_am' (known: ${KNOWN_TABLE_AMS[*]})"
if [[ -n $csd ]]; then
    [[ (" ${run_suites[*]} " == " tpch " || " ${run_suites[*]} " == " htap ") && $table_am != heap ]] ||
        ph_die "bench/run.sh: --csd is for the tpch and htap suites with --table-am (heap and the table AM side by side on the emulated drive)"
    [[ $csd =~ ^[0-9]+[MGmg]$ ]] || ph_die "bench/run.sh: --csd needs a device size like 8G, not '$csd'"
fi
[[ $repeat =~ ^[1-9][0-9]*$ ]] || ph_die "bench/run.sh: --repeat needs a positive integer, not '$repeat'"
[[ $(id -u) == 0 ]] || ph_die "bench/run.sh must run as root (clusters run as $PH_USER via runuser)"
ph_require_pg

# The btree-only mode runs without the extension (stand-in shim), like the tests.
if [[ $index_am == btree && $table_am == heap ]]; then PH_STANDIN=1; PH_PRELOAD=0; else PH_STANDIN=0; PH_PRELOAD=1; fi
PH_AM=$index_am
export PH_AM PH_STANDIN PH_PRELOAD
if [[ $PH_STANDIN == 0 && ! -f $("$PH_PG_CONFIG" --pkglibdir)/pg_hybrid.so ]]; then
    ph_die "pg_hybrid is not installed ($("$PH_PG_CONFIG" --pkglibdir)/pg_hybrid.so missing); run scripts/setup.sh"
fi
if [[ -z $out ]]; then
    if ((smoke)); then out=$PH_SCRATCH/bench_results; else out=$PH_REPO/bench/results; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# ------------------------------------------------------------------ tools --
venv=$PH_REPO/bench/.venv
PY_PKGS=("psycopg[binary]>=3.1" "duckdb==1.5.5" "duckdb-extension-tpch==1.5.5" "matplotlib>=3.5")
ensure_venv() {
    if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import psycopg, duckdb, duckdb_extension_tpch, matplotlib' 2>/dev/null &&
        [[ $("$venv/bin/python" -c 'import duckdb; print(duckdb.__version__)') == 1.5.5 ]]; then
        return 0
    fi
    ph_log "setting up $venv (${PY_PKGS[*]})"
    ph_venv "$venv" "${PY_PKGS[@]}"
}

# go-tpc v1.0.9 needs go >= 1.18; the module in bench/tpcc says 1.21.
go_ok() { local v; v=$("$1" env GOVERSION 2>/dev/null) || return 1; v=${v#go}; [[ $(printf '%s\n' 1.21 "$v" | sort -V | head -n1) == 1.21 ]]; }
find_go() {
    local g
    for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
        [[ -n $g && -x $g ]] && go_ok "$g" && { printf '%s' "$g"; return 0; }
    done
    return 1
}
ensure_gotpc() {
    local bin=$venv/bin/go-tpc stamp=$venv/bin/go-tpc.sum go
    if [[ -x $bin && -f $stamp ]] && cmp -s "$stamp" "$PH_REPO/bench/tpcc/go.sum"; then return 0; fi
    if ! go=$(find_go); then
        ph_log "no go >= 1.21 found; trying Debian's golang-go"
        { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go >/dev/null 2>&1; } || true
        go=$(find_go) || ph_die "the tpcc suite needs Go >= 1.21 to build go-tpc: install it (e.g. to /usr/local/go) and re-run"
    fi
    ph_log "building go-tpc v1.0.9 with $go ($("$go" env GOVERSION))"
    mkdir -p "$venv/bin"
    # go.sum pins every module, so the checksum database is not needed for pingcap's
    (cd "$PH_REPO/bench/tpcc" && GONOSUMDB='github.com/pingcap/*' GOFLAGS=-mod=readonly \
        "$go" build -o "$bin" github.com/pingcap/go-tpc/cmd/go-tpc) ||
        ph_die "building go-tpc failed (Go module proxy reachable?)"
    cp "$PH_REPO/bench/tpcc/go.sum" "$stamp"
}

ensure_venv
[[ " ${run_suites[*]} " == *" tpcc "* || " ${run_suites[*]} " == *" htap "* ]] && ensure_gotpc

# ---------------------------------------------------------------- cluster --
ph_trap_install
DIR=$(ph_scratch bench)
if ((production_wal)); then
    wal_conf=("full_page_writes = on" "max_wal_size = '1GB'" "min_wal_size = '80MB'" "checkpoint_timeout = '5min'")
else
    wal_conf=("full_page_writes = off" "max_wal_size = '16GB'" "min_wal_size = '1GB'" "checkpoint_timeout = '1h'")
fi
conf=("fsync = off" "synchronous_commit = off" "${wal_conf[@]}"
      "shared_buffers = '$sb'"
      "maintenance_work_mem = '1GB'" "work_mem = '64MB'" "autovacuum = off"
      "max_parallel_maintenance_workers = 0" "max_parallel_workers_per_gather = 0" "jit = off"
      "max_connections = 100")
# hasis compactions meter what they write (pg_hybrid.table_stats' physical bytes, the tpch and htap suites)
((PH_PRELOAD)) && conf+=("pg_hybrid.shared_memory = '$shm'" "pg_hybrid.hasis_meter_compactions = on")
# go-tpc's postgres driver (lib/pq via a postgres:// URL) cannot be pointed at a
# unix socket, so for tpcc the cluster also listens on loopback, on its own port.
[[ " ${run_suites[*]} " == *" tpcc "* || " ${run_suites[*]} " == *" htap "* ]] && conf+=("listen_addresses = '127.0.0.1'")
PH_ALLOW_FSYNC_OFF=1 cluster_init "$DIR" "$PH_BENCH_PORT" "${conf[@]}"
cluster_start "$DIR"
pin_args=()
if ((pin_cpus)); then
    ncpu=$(nproc)
    ((ncpu >= 2)) || ph_die "bench/run.sh: --pin-cpus needs 2 or more CPUs (this machine has $ncpu)"
    # Backends fork from the postmaster and inherit its affinity.
    pm=$(head -n 1 "$DIR/data/postmaster.pid")
    for p in $pm $(pgrep -P "$pm"); do taskset -p -c 0 "$p" >/dev/null; done
    pin_args=(--client-cpus "1-$((ncpu - 1))")
    ph_log "cluster pinned to CPU 0, pgbench clients to CPUs 1-$((ncpu - 1))"
fi
cap_args=()
if [[ -n $cache_cap && $cache_cap != 0 ]]; then
    # The suite sets the limit around its measurements only: loading and
    # CREATE INDEX (whose sorts may use maintenance_work_mem) run without it.
    cap_bytes=$(($(ph_size_bytes "$sb") + $(ph_size_bytes "$shm") + $(ph_size_bytes "$cache_cap")))
    ph_cap_memory "$DIR" -1
    cap_args=(--cgroup "${PH_CGROUPS[-1]}" --cap-bytes "$cap_bytes")
    ph_log "cluster in memory cgroup ${PH_CGROUPS[-1]}: measurements capped at $cap_bytes bytes (shared_buffers $sb + shared memory $shm + page cache $cache_cap)"
fi
ph_prepare_db "$DIR" bench
csd_args=()
if [[ -n $csd ]]; then
    rc=0
    ph_csd_up "$DIR" csd "$csd" || rc=$?
    ((rc == 0)) || ph_die "bench/run.sh: --csd needs zram, and this kernel has none (message above)"
    csd_args=(--tablespace csd --csd-device "${PH_CSD_DEVICE#/dev/}")
    ph_log "tablespace csd on $PH_CSD_DEVICE ($csd, LZ4) at $PH_CSD_DIR"
fi
ph_log "bench cluster $DIR (port $PH_BENCH_PORT, shared_buffers $sb): ${run_suites[*]}, $baseline vs $index_am (table AM $table_am)"

args=(--index-am "$index_am" --table-am "$table_am" --baseline "$baseline" --repeat "$repeat" --out "$out"
      --host "$DIR/sock" --port "$PH_BENCH_PORT" --user "$PH_USER" --db bench --pgbin "$PH_PGBIN"
      --gotpc "$venv/bin/go-tpc" --work "$DIR/work")
((smoke)) && args+=(--smoke)
((${#cap_args[@]})) && args+=("${cap_args[@]}")
((${#pin_args[@]})) && args+=("${pin_args[@]}")
((${#csd_args[@]})) && args+=("${csd_args[@]}")
((plot)) || args+=(--no-plot)
((PH_STANDIN)) && args+=(--standin)
mkdir -p "$DIR/work"
chown "$PH_USER:" "$DIR/work"
failed=()
for s in "${run_suites[@]}"; do
    # a failed suite still writes its report; go on with the others, fail at the end
    # pgbench with a table AM compares table AMs: btree indexes on both sides unless --index-am was given
    suite_args=()
    if [[ ($s == pgbench || $s == tpch || $s == htap) && $table_am != heap && $index_am_given == 0 ]]; then suite_args=(--index-am btree); fi
    if ((${#suite_args[@]})); then
        ph_log "==== suite $s (heap vs $table_am tables, btree indexes on both sides)"
    else
        ph_log "==== suite $s"
    fi
    "$venv/bin/python" "$PH_REPO/bench/harness.py" "$s" "${args[@]}" "${pyargs[@]}" "${suite_args[@]}" || failed+=("$s")
done
((${#failed[@]} == 0)) || ph_die "suite(s) failed: ${failed[*]} (reports and notes in $out)"
ph_log "done; reports in $out"
