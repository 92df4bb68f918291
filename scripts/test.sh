#!/usr/bin/env bash
# scripts/test.sh — THE test command of pg_hybrid (run as root; CI runs it via .ci/run).
#
# Steps (each counted as passed or failed; a skipped step counts as neither):
#   setup         scripts/setup.sh (packages, cargo-pgrx, build + install the extension)
#   core          cargo test -p pg_hybrid_core --release
#   regress       pg_regress over sql/schedule (or every sql/*.sql) on a scratch cluster
#   differential  tests/differential.py (random data/queries/DML, AM vs btree)
#   crash         tests/crash.sh        (kill -9 during inserts and during a merge)
#   standby       tests/standby.sh      (streaming replica gives the same answers)
#   concurrency   tests/concurrency.sh  (pgbench, 8 clients + merges, UNIQUE index)
#   isolation     tests/isolation.sh    (pg_isolation_regress: SERIALIZABLE and UNIQUE interleavings,
#                                        same output as btree, tests/isolation/schedule)
#   hasis         tests/hasis.sh        (the hasis table AM: differential vs heap, pgbench TPC-B, kill -9
#                                        recovery, hot standby, isolation specs vs heap, ON CONFLICT
#                                        races, pg_dump round trips, damaged pages and other bad input)
#   csd           tests/csd.sh          (the emulated CSD tablespace, scripts/csd.sh: bad input; with
#                                        zram, pg_hybrid.storage_stats within 1% of the device's bytes)
#   corrupt       tests/corrupt.sh      (damaged index pages: clean XX002 ERROR, no crash, REINDEX repairs)
#   arena         tests/arena.sh        (8MB pg_hybrid.shared_memory: merges under arena pressure,
#                                        background merge on/off, restart rebuilds the dynamic stages)
#   sqlsmith      tests/sqlsmith.sh     (Debian's SQLsmith sends random statements at tables with
#                                        every AM's indexes and a hasis table, as two unprivileged roles,
#                                        and reads from a hot standby;
#                                        every pg_hybrid SQL function on every relation; no crash, no
#                                        internal error, then verify and index-vs-seqscan on every index)
#   sqlalchemy    tests/sqlalchemy.sh   (SQLAlchemy's own test suite, PostgreSQL dialect, SQL and ORM
#                                        tests, with every table it creates USING hasis; what fails
#                                        there runs again on heap, the oracle; verify_table before
#                                        every DROP; no crash, no internal error; --quick: no ORM)
#   bench         bench/smoke.sh        (every benchmark suite in --smoke size, AM vs btree; bad
#                                        input fails cleanly; TPC-H answers checked; no timing limits)
# Third pass, with griffin (skipped when the AM under test is griffin or
# btree, or when griffin is not installed); always short (--quick).
# `--only griffin` / `--skip griffin` select all six:
#   differential-griffin  differential.py --am griffin (20 s)
#   crash-griffin         crash.sh (kill -9 during inserts and during a sync)
#   standby-griffin       standby.sh (the replica's hash path answers like the primary's)
#   concurrency-griffin   concurrency.sh (pgbench upserts on a UNIQUE griffin index, exact counts)
#   isolation-griffin     isolation.sh (SERIALIZABLE and UNIQUE interleavings, same output as btree)
#   corrupt-griffin       corrupt.sh (damaged tree, delta and bucket pages: XX002, REINDEX repairs)
# Fourth pass, with tiered_btree and tiered_hash (each skipped likewise),
# short, with 256kB hot tiers so promotions and CLOCK sweeps run all the
# time. `--only tiered` / `--skip tiered` select all twelve:
#   differential-tiered   differential.py --am tiered_btree (30 s, point bursts)
#   crash-tiered          crash.sh (kill -9 during inserts and merges; the hot
#                         tier comes back as its dirty entries)
#   standby-tiered        standby.sh (the replica, which never migrates, answers like the primary)
#   concurrency-tiered    concurrency.sh (pgbench upserts on a UNIQUE tiered index, exact counts)
#   isolation-tiered      isolation.sh (SERIALIZABLE and UNIQUE interleavings, same output as btree)
#   corrupt-tiered        corrupt.sh (damaged cold-tier leaves, metapage and delta pages)
#   differential-thash, crash-thash, standby-thash, concurrency-thash,
#   isolation-thash, corrupt-thash
#                         the same with tiered_hash, equality only: the
#                         differential's queries are equality (every key
#                         column, leading ones, IN lists), the index-vs-seqscan
#                         checks probe every key in a nested loop, isolation
#                         runs tests/isolation/schedule_equality, corrupt damages
#                         the metapage, delta and bucket pages
# Second pass, with elastic_btree (skipped when the AM under test is already
# elastic_btree or btree, or when elastic_btree is not installed); always short
# (--quick), set PH_ELASTIC_FULL=1 for the full forms.  `--only elastic` /
# `--skip elastic` select all seven:
#   differential-elastic  differential.py --am elastic_btree --size-bound mixed (20 s, 45 s full)
#   crash-elastic         crash.sh with size_bound 1MB (PH_ELASTIC_BOUND_CRASH)
#   standby-elastic       standby.sh with size_bound 256kB (PH_ELASTIC_BOUND_STANDBY)
#   concurrency-elastic   concurrency.sh with size_bound 512kB (PH_ELASTIC_BOUND_CONC)
#   isolation-elastic     isolation.sh with size_bound 128kB (PH_ELASTIC_BOUND_ISO; compact leaves)
#   convert-elastic       tests/convert.sh: readers check exact answers while a writer
#                         grows the index past its bound and shrinks it back (conversions
#                         both ways under concurrent readers)
#   corrupt-elastic       corrupt.sh on an elastic_btree index (damaged compact leaves)
# The last line printed is exactly "N passed, M failed"; exit status 1 if M > 0.
#
# Options:
#   --quick            short form of every step (differential 20 s, pgbench 15 s, one merge crash,
#                      ~30k-row corrupt table, ~100k rows per arena round; hasis: 10 s
#                      differential, 5 s TPC-B, one crash, 50k-row standby)
#   --only S[,S...]    run only these steps (repeatable)
#   --skip S[,S...]    skip these steps (repeatable)
#   --no-setup         same as --skip setup
#   --am AM            AM under test (default from pgrx.toml; "btree" = stand-in mode:
#                      no preload, tests/standin_shim.sql instead of the extension)
#   --keep             keep scratch data directories (PH_KEEP=1)
#   --jobs N           1 or 2 (default 2 on a machine with 2 or more CPUs): with 2,
#                      the steps crash, standby, hasis, csd, arena, sqlsmith and bench run in a second
#                      lane beside the others, as a child test.sh on port PH_PORT+20
#                      (bench PH_BENCH_PORT+20) and scratch root PH_SCRATCH-lane2; its
#                      output is printed when it ends, its steps count in the summary
# Environment: PH_SEED (differential seed, default 1), PH_DIFF_TIME (seconds),
#   PH_REGRESS_INPUTDIR (directory holding sql/ and expected/, default the repo),
#   and the PH_* settings of scripts/lib.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ELASTIC_STEPS=(differential-elastic crash-elastic standby-elastic concurrency-elastic isolation-elastic convert-elastic corrupt-elastic)
GRIFFIN_STEPS=(differential-griffin crash-griffin standby-griffin concurrency-griffin isolation-griffin corrupt-griffin)
TIERED_STEPS=(differential-tiered crash-tiered standby-tiered concurrency-tiered isolation-tiered corrupt-tiered
    differential-thash crash-thash standby-thash concurrency-thash isolation-thash corrupt-thash)
ALL_STEPS=(setup core regress differential crash standby concurrency isolation hasis csd corrupt arena sqlsmith sqlalchemy bench "${ELASTIC_STEPS[@]}" "${GRIFFIN_STEPS[@]}" "${TIERED_STEPS[@]}")
quick=0
only=()
skip=()
jobs=
while (($#)); do
    case $1 in
        --jobs) shift; jobs=${1:?--jobs needs 1 or 2} ;;
        --jobs=*) jobs=${1#*=} ;;
        --quick) quick=1 ;;
        --only) shift; IFS=, read -r -a x <<<"${1:?--only needs a step}"; only+=("${x[@]}") ;;
        --only=*) IFS=, read -r -a x <<<"${1#*=}"; only+=("${x[@]}") ;;
        --skip) shift; IFS=, read -r -a x <<<"${1:?--skip needs a step}"; skip+=("${x[@]}") ;;
        --skip=*) IFS=, read -r -a x <<<"${1#*=}"; skip+=("${x[@]}") ;;
        --no-setup) skip+=(setup) ;;
        --am) shift; PH_AM=${1:?--am needs a name} ;;
        --am=*) PH_AM=${1#*=} ;;
        --keep) export PH_KEEP=1 ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "test.sh: unknown option $1 (see --help)" ;;
    esac
    shift
done
# re-derive mode settings if --am changed the AM
if [[ $PH_AM == btree ]]; then PH_STANDIN=1; PH_PRELOAD=${PH_PRELOAD_FORCED:-0}; else PH_STANDIN=0; PH_PRELOAD=${PH_PRELOAD_FORCED:-1}; fi
export PH_AM PH_STANDIN PH_PRELOAD
# "elastic" stands for every step of the elastic_btree pass
expand_steps() {
    local x
    for x in "$@"; do
        case $x in
            elastic) printf '%s\n' "${ELASTIC_STEPS[@]}" ;;
            griffin) printf '%s\n' "${GRIFFIN_STEPS[@]}" ;;
            tiered) printf '%s\n' "${TIERED_STEPS[@]}" ;;
            *) printf '%s\n' "$x" ;;
        esac
    done
}
((${#only[@]})) && mapfile -t only < <(expand_steps "${only[@]}")
((${#skip[@]})) && mapfile -t skip < <(expand_steps "${skip[@]}")
for s in "${only[@]}" "${skip[@]}"; do
    [[ " ${ALL_STEPS[*]} " == *" $s "* ]] || ph_die "unknown step '$s' (steps: ${ALL_STEPS[*]} elastic griffin tiered)"
done
if [[ -z $jobs ]]; then
    jobs=1
    (($(nproc 2>/dev/null || echo 1) >= 2)) && jobs=2
fi
[[ $jobs == 1 || $jobs == 2 ]] || ph_die "test.sh: --jobs must be 1 or 2, not '$jobs'"

selected() {
    local s=$1 x
    for x in "${skip[@]}"; do [[ $x == "$s" ]] && return 1; done
    ((${#only[@]} == 0)) && return 0
    for x in "${only[@]}"; do [[ $x == "$s" ]] && return 0; done
    return 1
}

[[ $(id -u) == 0 ]] || ph_die "scripts/test.sh must run as root (it installs packages and runs clusters as $PH_USER)"
if ! command -v cargo >/dev/null 2>&1 && [[ -f $HOME/.cargo/env ]]; then
    # shellcheck disable=SC1091
    source "$HOME/.cargo/env"
fi

ph_trap_install
LOGDIR=$PH_SCRATCH/logs
passed=0
failed=0
results=()
t_all=$(date +%s)

# record NAME STATUS SECONDS [NOTE]
# (a lane child also appends "NAME<TAB>STATUS<TAB>SECONDS<TAB>NOTE" to
# PH_LANE_RESULTS, which the parent reads when the lane ends)
record() {
    local line
    line=$(printf '  %-13s %-5s %5ss  %s' "$1" "$2" "$3" "${4-}")
    results+=("$line")
    case $2 in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; esac
    printf '\n==== %s: %s (%ss) %s\n\n' "$1" "$2" "$3" "${4-}"
    if [[ -n ${PH_LANE_RESULTS:-} ]]; then printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4-}" >>"$PH_LANE_RESULTS"; fi
}

# ------------------------------------------------------------ second lane --
# With --jobs 2 these steps run in a child test.sh beside the others. Each
# starts its own clusters, so the child only needs its own ports and scratch
# root; the steps were chosen to balance the two lanes' times (CI of
# 2026-12-07: this lane 1943 s, the other 2218 s with arena's 137 s, which
# moved here).
LANE2_STEPS=(crash standby hasis csd arena sqlsmith bench)
LANE2_PID=
LANE2_OUT=
LANE2_RESULTS=
lane2_start() {
    local s sel=() args=()
    for s in "${LANE2_STEPS[@]}"; do selected "$s" && sel+=("$s"); done
    ((${#sel[@]})) || return 0
    LANE2_OUT=$PH_SCRATCH/logs/lane2.out
    LANE2_RESULTS=$PH_SCRATCH/logs/lane2.results
    : >"$LANE2_RESULTS"
    args=(--jobs 1 --no-setup --am "$PH_AM" --only "$(IFS=,; echo "${sel[*]}")")
    ((quick)) && args+=(--quick)
    # setsid: its own process group, so an interrupted parent can stop it whole
    PH_LANE_RESULTS=$LANE2_RESULTS PH_PORT=$((PH_PORT + 20)) PH_BENCH_PORT=$((PH_BENCH_PORT + 20)) \
        PH_SCRATCH=${PH_SCRATCH%/}-lane2 setsid bash "$PH_REPO/scripts/test.sh" "${args[@]}" >"$LANE2_OUT" 2>&1 &
    LANE2_PID=$!
    ph_log "second lane: ${sel[*]} (pid $LANE2_PID, port $((PH_PORT + 20)), scratch ${PH_SCRATCH%/}-lane2, output $LANE2_OUT)"
    for s in "${sel[@]}"; do skip+=("$s"); done
}
# lane2_wait: wait for the lane, print its output, count its steps
lane2_wait() {
    [[ -n $LANE2_PID ]] || return 0
    local name status secs note rc=0 seen=()
    ph_log "waiting for the second lane (pid $LANE2_PID)"
    wait "$LANE2_PID" || rc=$?
    LANE2_PID=
    echo
    echo "==== second lane output ($LANE2_OUT, exit $rc) ===="
    cat "$LANE2_OUT" || true
    echo "==== end of the second lane's output ===="
    while IFS=$'\t' read -r name status secs note; do
        [[ -n $name ]] || continue
        record "$name" "$status" "$secs" "$note"
        seen+=("$name")
    done <"$LANE2_RESULTS"
    if ((rc != 0 && ${#seen[@]} == 0)); then
        record lane2 FAIL 0 "(the second lane exited $rc without running a step; $LANE2_OUT)"
    fi
}
# lane2_kill: the parent is exiting early (interrupted, or died): stop the
# lane's process group, then whatever the lane's scripts could not clean up
# (a subshell killed mid-step runs no EXIT trap): postmasters and emulated
# CSD mounts under the lane's own scratch root, which only the lane uses.
lane2_kill() {
    [[ -n $LANE2_PID ]] || return 0
    local root=${PH_SCRATCH%/}-lane2 d m
    kill -TERM -- "-$LANE2_PID" 2>/dev/null || true
    wait "$LANE2_PID" 2>/dev/null || true
    LANE2_PID=
    for d in "$root"/*/ "$root"/*/*/; do
        [[ -f $d/data/postmaster.pid ]] && cluster_stop "${d%/}" immediate
    done
    for m in "$root"/csd_*; do
        [[ -d $m ]] && mountpoint -q "$m" && bash "$PH_REPO/scripts/csd.sh" down --dir "$m" >/dev/null 2>&1
    done
    return 0
}
trap 'rc_=$?; lane2_kill; ph_cleanup $rc_' EXIT

# run_step NAME CMD... : run CMD (in a subshell, errexit on), output to console
# and $LOGDIR/NAME.log.  Exit status 77 = skipped.
run_step() {
    local name=$1 t0 rc
    shift
    selected "$name" || return 0
    printf '\n==== %s: running\n' "$name"
    t0=$(date +%s)
    set +e
    (set -euo pipefail; "$@") 2>&1 | tee "$LOGDIR/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    local dt=$(($(date +%s) - t0))
    if ((rc == 0)); then
        record "$name" PASS "$dt"
    elif ((rc == 77)); then
        record "$name" SKIP "$dt" "$(grep -m1 '^SKIP:' "$LOGDIR/$name.log" | cut -c7- || true)"
    else
        record "$name" FAIL "$dt" "(exit $rc; log $LOGDIR/$name.log)"
    fi
    return 0
}

# ------------------------------------------------------------------ steps --
step_setup() {
    if [[ $PH_STANDIN == 1 ]]; then
        bash "$PH_REPO/scripts/setup.sh" --no-build
    else
        bash "$PH_REPO/scripts/setup.sh"
    fi
}

step_core() {
    cd "$PH_REPO"
    cargo test -p pg_hybrid_core --release
}

MAIN=
main_cluster() {   # start the shared cluster for regress + differential (in this shell)
    [[ -n $MAIN ]] && return 0
    MAIN=$(ph_scratch main)
    # logical: sql/hasis_logical.sql decodes hasis changes with test_decoding
    cluster_init "$MAIN" "$PH_PORT" "wal_level = logical"
    cluster_start "$MAIN"
}

step_regress() {
    local inputdir=${PH_REGRESS_INPUTDIR:-$PH_REPO} outdir tests=() f n
    local pg_regress
    pg_regress=$("$PH_PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress
    [[ -x $pg_regress ]] || { echo "pg_regress not found at $pg_regress"; return 1; }
    if [[ -f $inputdir/sql/schedule ]]; then
        tests=(--schedule="$inputdir/sql/schedule")
    else
        for f in "$inputdir"/sql/*.sql; do
            [[ -e $f ]] || continue
            n=$(basename "$f" .sql)
            [[ $n == pg_hybrid--* ]] && continue   # upgrade scripts, not suites
            tests+=("$n")
        done
    fi
    if ((${#tests[@]} == 0)); then
        echo "SKIP: no regression suites in $inputdir/sql"
        return 77
    fi
    if [[ $PH_STANDIN == 1 && -z ${PH_REGRESS_INPUTDIR:-} ]]; then
        echo "SKIP: stand-in mode (PH_AM=btree): the suites need the pg_hybrid extension"
        return 77
    fi
    cluster_psql "$MAIN" postgres -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS contrib_regression" -c "CREATE DATABASE contrib_regression"
    outdir=$PH_SCRATCH/regress
    rm -rf "$outdir"
    mkdir -p "$outdir"
    echo "pg_regress: ${tests[*]}"
    if ! "$pg_regress" --inputdir="$inputdir" --outputdir="$outdir" --bindir="$PH_PGBIN" \
        --use-existing --host="$MAIN/sock" --port="$(cluster_port "$MAIN")" --user="$PH_USER" \
        --dbname=contrib_regression "${tests[@]}"; then
        if [[ -f $outdir/regression.diffs ]]; then
            echo "---- $outdir/regression.diffs ----"
            cat "$outdir/regression.diffs"
        fi
        return 1
    fi
}

step_differential() {
    local t=${PH_DIFF_TIME:-90}
    ((quick)) && t=${PH_DIFF_TIME:-20}
    ph_prepare_db "$MAIN" ph_differential
    PH_PGHOST=$MAIN/sock PH_PGPORT=$(cluster_port "$MAIN") PH_DB=ph_differential PH_OUTDIR=$LOGDIR \
        python3 "$PH_REPO/tests/differential.py" --seed "${PH_SEED:-1}" --time "$t" --am "$PH_AM"
}

qarg=()
((quick)) && qarg=(--quick)

# am_installed AM: the extension's install script creates access method AM
# (says SKIP and returns 1 when it does not)
am_installed() {
    local f
    for f in "$("$PH_PG_CONFIG" --sharedir)"/extension/pg_hybrid--*.sql; do
        [[ -f $f ]] && grep -q "ACCESS METHOD $1 " "$f" && return 0
    done
    echo "SKIP: $1 is not installed (no 'ACCESS METHOD $1' in the extension's install script)"
    return 1
}

# ------------------------------------------------------ elastic_btree pass --
elastic_installed() { am_installed elastic_btree; }
ELASTIC_PASS=0
if [[ $PH_STANDIN == 0 && $PH_AM != elastic_btree ]]; then ELASTIC_PASS=1; fi
eqarg=(--quick)
[[ ${PH_ELASTIC_FULL:-0} == 1 ]] && eqarg=("${qarg[@]}")

# elastic_step TEST-SCRIPT SIZE-BOUND ARGS...: run a tests/*.sh script with PH_AM=elastic_btree
elastic_step() {
    local script=$1 bound=$2
    shift 2
    elastic_installed || return 77
    PH_AM=elastic_btree PH_SIZE_BOUND=$bound bash "$PH_REPO/tests/$script" "$@"
}

step_differential_elastic() {
    elastic_installed || return 77
    local t=${PH_EDIFF_TIME:-20}
    [[ ${PH_ELASTIC_FULL:-0} == 1 ]] && ! ((quick)) && t=${PH_EDIFF_TIME:-45}
    ph_prepare_db "$MAIN" ph_differential_elastic
    PH_PGHOST=$MAIN/sock PH_PGPORT=$(cluster_port "$MAIN") PH_DB=ph_differential_elastic PH_OUTDIR=$LOGDIR \
        python3 "$PH_REPO/tests/differential.py" --seed "${PH_SEED:-1}" --time "$t" --am elastic_btree \
        --size-bound "${PH_ELASTIC_DIFF_BOUND:-mixed}"
}

# ------------------------------------------- griffin and tiered passes --
# Each runs when its AM is installed and is not the AM under test.
GRIFFIN_PASS=0
if [[ $PH_STANDIN == 0 && $PH_AM != griffin ]]; then GRIFFIN_PASS=1; fi
TIERED_PASS=0
if [[ $PH_STANDIN == 0 && $PH_AM != tiered_btree ]]; then TIERED_PASS=1; fi
THASH_PASS=0
if [[ $PH_STANDIN == 0 && $PH_AM != tiered_hash ]]; then THASH_PASS=1; fi

# am_step AM TEST-SCRIPT ARGS...: run a tests/*.sh script with PH_AM=AM
# (scripts/lib.sh gives tiered_btree's indexes a 256kB hot tier)
am_step() {
    local am=$1 script=$2
    shift 2
    am_installed "$am" || return 77
    PH_AM=$am bash "$PH_REPO/tests/$script" "$@"
}

# am_differential AM SECONDS: differential.py --am AM in a database of its own
am_differential() {
    local am=$1 t=$2 db=ph_differential_${1%_btree}
    am_installed "$am" || return 77
    ph_prepare_db "$MAIN" "$db"
    PH_PGHOST=$MAIN/sock PH_PGPORT=$(cluster_port "$MAIN") PH_DB=$db PH_OUTDIR=$LOGDIR \
        python3 "$PH_REPO/tests/differential.py" --seed "${PH_SEED:-1}" --time "$t" --am "$am"
}

# ------------------------------------------------------------------- main --
ph_scratch logs >/dev/null
LOGDIR=$(ph_scratch logs)
rm -f "$LOGDIR"/*.log
ph_log "pg_hybrid tests: am=$PH_AM standin=$PH_STANDIN preload=$PH_PRELOAD quick=$quick port=$PH_PORT scratch=$PH_SCRATCH"

setup_ok=1
run_step setup step_setup
if selected setup && [[ ${results[-1]} == *FAIL* ]]; then setup_ok=0; fi

if ((setup_ok == 0)); then
    ns=(core regress differential crash standby concurrency isolation hasis csd corrupt arena sqlsmith sqlalchemy bench)
    ((ELASTIC_PASS)) && ns+=("${ELASTIC_STEPS[@]}")
    ((GRIFFIN_PASS)) && ns+=("${GRIFFIN_STEPS[@]}")
    ((TIERED_PASS || THASH_PASS)) && ns+=("${TIERED_STEPS[@]}")
    for s in "${ns[@]}"; do
        selected "$s" && record "$s" FAIL 0 "(not run: setup failed)"
    done
else
    ((jobs == 2)) && lane2_start
    run_step core step_core
    if selected regress || selected differential || { ((ELASTIC_PASS)) && selected differential-elastic; } ||
        { ((GRIFFIN_PASS)) && selected differential-griffin; } || { ((TIERED_PASS)) && selected differential-tiered; } || { ((THASH_PASS)) && selected differential-thash; }; then
        if (main_cluster) >"$LOGDIR/main_cluster.log" 2>&1; then
            # started in a subshell for its log; register it in this shell too
            MAIN=$PH_SCRATCH/main
            PH_CLUSTERS+=("$MAIN")
            run_step regress step_regress
            run_step differential step_differential
            ((ELASTIC_PASS)) && run_step differential-elastic step_differential_elastic
            ((GRIFFIN_PASS)) && run_step differential-griffin am_differential griffin "${PH_GDIFF_TIME:-20}"
            ((TIERED_PASS)) && run_step differential-tiered am_differential tiered_btree "${PH_TDIFF_TIME:-30}"
            ((THASH_PASS)) && run_step differential-thash am_differential tiered_hash "${PH_TDIFF_TIME:-30}"
            cluster_stop "$MAIN" fast
        else
            cat "$LOGDIR/main_cluster.log"
            for s in regress differential differential-elastic differential-griffin differential-tiered differential-thash; do
                selected "$s" && record "$s" FAIL 0 "(scratch cluster did not start; $LOGDIR/main_cluster.log)"
            done
        fi
    fi
    run_step crash bash "$PH_REPO/tests/crash.sh" "${qarg[@]}"
    run_step standby bash "$PH_REPO/tests/standby.sh" "${qarg[@]}"
    run_step concurrency bash "$PH_REPO/tests/concurrency.sh" "${qarg[@]}"
    run_step isolation bash "$PH_REPO/tests/isolation.sh" "${qarg[@]}"
    run_step hasis bash "$PH_REPO/tests/hasis.sh" "${qarg[@]}"
    run_step csd bash "$PH_REPO/tests/csd.sh" "${qarg[@]}"
    run_step corrupt bash "$PH_REPO/tests/corrupt.sh" "${qarg[@]}"
    run_step arena bash "$PH_REPO/tests/arena.sh" "${qarg[@]}"
    run_step sqlsmith bash "$PH_REPO/tests/sqlsmith.sh" "${qarg[@]}"
    run_step sqlalchemy bash "$PH_REPO/tests/sqlalchemy.sh" "${qarg[@]}"
    run_step bench bash "$PH_REPO/bench/smoke.sh" "${qarg[@]}"
    if ((ELASTIC_PASS)); then
        run_step crash-elastic elastic_step crash.sh "${PH_ELASTIC_BOUND_CRASH:-1MB}" "${eqarg[@]}"
        run_step standby-elastic elastic_step standby.sh "${PH_ELASTIC_BOUND_STANDBY:-256kB}" "${eqarg[@]}"
        run_step concurrency-elastic elastic_step concurrency.sh "${PH_ELASTIC_BOUND_CONC:-512kB}" "${eqarg[@]}"
        run_step isolation-elastic elastic_step isolation.sh "${PH_ELASTIC_BOUND_ISO:-128kB}" "${eqarg[@]}"
        run_step convert-elastic elastic_step convert.sh "${PH_ELASTIC_BOUND_CONVERT:-768kB}" "${eqarg[@]}"
        run_step corrupt-elastic elastic_step corrupt.sh "" "${eqarg[@]}"
    fi
    if ((GRIFFIN_PASS)); then
        run_step crash-griffin am_step griffin crash.sh --quick
        run_step standby-griffin am_step griffin standby.sh --quick
        run_step concurrency-griffin am_step griffin concurrency.sh --quick
        run_step isolation-griffin am_step griffin isolation.sh --quick
        run_step corrupt-griffin am_step griffin corrupt.sh --quick
    fi
    # (AM, step suffix, pass flag)
    for pass in "tiered_btree tiered $TIERED_PASS" "tiered_hash thash $THASH_PASS"; do
        read -r am sfx on <<<"$pass"
        ((on)) || continue
        for t in crash standby concurrency isolation corrupt; do
            run_step "$t-$sfx" am_step "$am" "$t.sh" --quick
        done
    done
    lane2_wait
fi

echo
echo "==== summary (am=$PH_AM, $(($(date +%s) - t_all))s)"
for l in "${results[@]}"; do echo "$l"; done
echo "$passed passed, $failed failed"
((failed == 0))
