#!/usr/bin/env bash
# tests/isolation.sh [--am AM] [--accept] [--quick]
#
# Interleavings with PostgreSQL's pg_isolation_regress, with btree as the
# oracle.  Each spec in tests/isolation/specs/ is a template whose index is
# created "USING @AM@ (...)@WITH@"; it is run once with btree and once with the
# AM under test ($PH_AM, or --am), and both runs are compared with the same
# tests/isolation/expected/NAME.out, which is btree's output.  So the AM must
# give exactly btree's answers, waits and serialization failures.
# tests/isolation/schedule: range write skew, absent key, the read-only
# anomaly, unique insert and ON CONFLICT races, disjoint ranges (btree commits
# both: the AM's key-range predicate locks must not conflict either), and a
# check-then-insert of one key on a UNIQUE index (btree: serialization
# failure, not unique violation).
# Each spec's header comment says what btree does and why.
# An AM without order (tiered_hash: equality only) runs
# tests/isolation/schedule_equality instead, the specs that need no range
# scan; btree runs the same schedule as its oracle. An ordered AM that takes
# numeric keys runs tests/isolation/schedule_numeric too (disjoint and
# overlapping ranges on a key whose bytes are not in its order).
# Options:
#   --am AM       the AM under test (default $PH_AM); with btree only the
#                 oracle run happens
#   --accept      write btree's outputs into tests/isolation/expected/ (after
#                 changing a spec; review the diff before committing)
#   --quick       accepted for scripts/test.sh; no effect (a run takes ~10 s)
# One scratch cluster ($PH_SCRATCH/isolation, port $PH_PORT, autovacuum off)
# is started and stopped; outputs are kept in $PH_SCRATCH/isolation/work/
# (results/ and regression.diffs per AM).  A step that waits longer than
# PH_ISOLATION_TIMEOUT seconds (default 30; isolationtester's
# PGISOLATIONTIMEOUT) is cancelled, so a wait isolationtester cannot see ends
# the run instead of hanging it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

accept=0
AM=$PH_AM
while (($#)); do
    case $1 in
        --am) shift; AM=${1:?--am needs a name} ;;
        --am=*) AM=${1#*=} ;;
        --accept) accept=1 ;;
        --quick) ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "isolation.sh: unknown option $1" ;;
    esac
    shift
done
# --am may change the mode (btree = stand-in: no preload, no extension)
if [[ $AM != "$PH_AM" ]]; then
    PH_AM=$AM
    if [[ $AM == btree ]]; then PH_STANDIN=1; PH_PRELOAD=0; else PH_STANDIN=0; PH_PRELOAD=1; fi
fi

SRC=$PH_REPO/tests/isolation
PGXS=$("$PH_PG_CONFIG" --pkglibdir)/pgxs
ISOREG=$PGXS/src/test/isolation/pg_isolation_regress
[[ -x $ISOREG && -x $(dirname "$ISOREG")/isolationtester ]] ||
    ph_die "pg_isolation_regress / isolationtester not found under $PGXS/src/test/isolation (package postgresql-server-dev-15)"

ph_trap_install
t0=$(date +%s)
DIR=$(ph_scratch isolation)
DB=isolation
cluster_init "$DIR" "$PH_PORT" "autovacuum = off"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
WORK=$DIR/work
mkdir -p "$WORK"

# AMs to run: btree (the oracle) first, then the AM under test
ams=(btree)
[[ $AM != btree ]] && ams+=("$AM")
schedules=(schedule)
if [[ $AM != btree ]] &&
    [[ $(cluster_sql "$DIR" "$DB" "SELECT pg_indexam_has_property(oid, 'can_order') FROM pg_am WHERE amname = '$AM'") == f ]]; then
    schedules=(schedule_equality)
elif [[ $AM == btree ]] ||
    cluster_sql "$DIR" "$DB" "CREATE TEMP TABLE numeric_probe (k numeric)" "CREATE INDEX ON numeric_probe USING $AM (k)" >/dev/null 2>&1; then
    # ranges on a key whose bytes are not in its order, for an ordered AM
    # that takes numeric keys (elastic_btree refuses them)
    schedules+=(schedule_numeric)
fi

# run_am AM: fill in the templates for AM and run the schedules; 0 if every
# output equals expected/.
run_am() {
    local am=$1 in=$WORK/$1 out=$WORK/$1/out f n with="" s args=()
    if [[ $am != btree ]]; then
        ph_am_ddl "$am"
        with=$PH_IDX_OPTS
    fi
    rm -rf "$in"
    mkdir -p "$in/specs" "$in/expected" "$out"
    for f in "$SRC"/specs/*.spec; do
        n=$(basename "$f")
        sed -e "s/@AM@/$am/g" -e "s/@WITH@/$with/g" "$f" >"$in/specs/$n"
    done
    cp "$SRC"/expected/*.out "$in/expected/" 2>/dev/null || true
    for s in "${schedules[@]}"; do
        cp "$SRC/$s" "$in/$s"
        args+=(--schedule="$in/$s")
        # every scheduled spec needs an expected output (except when accepting)
        for n in $(awk '$1 == "test:" { for (i = 2; i <= NF; i++) print $i }' "$SRC/$s"); do
            [[ -f $SRC/specs/$n.spec ]] || ph_die "$s lists $n, but there is no tests/isolation/specs/$n.spec"
            if [[ ! -f $in/expected/$n.out ]]; then
                ((accept)) || ph_die "no tests/isolation/expected/$n.out (run once with --am btree --accept)"
                : >"$in/expected/$n.out"
            fi
        done
    done
    chown -R "$PH_USER:" "$in"
    ph_log "isolation: $am (${schedules[*]}${with:+, index options:$with})"
    ph_as_user env PGISOLATIONTIMEOUT="${PH_ISOLATION_TIMEOUT:-30}" \
        "$ISOREG" --inputdir="$in" --outputdir="$out" --bindir="$PH_PGBIN" \
        --use-existing --host="$DIR/sock" --port="$(cluster_port "$DIR")" --user="$PH_USER" \
        --dbname="$DB" "${args[@]}"
}

rc=0
for am in "${ams[@]}"; do
    if run_am "$am"; then
        echo "isolation: $am matches btree's expected outputs"
        continue
    fi
    rc=1
    if [[ $am == btree ]]; then
        if ((accept)); then
            cp "$WORK/btree/out/results/"*.out "$SRC/expected/"
            chown --reference="$SRC" "$SRC"/expected/*.out 2>/dev/null || true
            echo "isolation: wrote btree's outputs into tests/isolation/expected/ (review: git diff tests/isolation/expected)"
            rc=0
            continue
        fi
        echo "FAIL: btree (the oracle) does not give tests/isolation/expected/*.out: a spec changed"
        echo "      (rerun with --accept after checking) or PostgreSQL's behaviour differs"
    else
        echo "FAIL: $am differs from btree"
    fi
    if [[ -f $WORK/$am/out/regression.diffs ]]; then
        echo "---- $WORK/$am/out/regression.diffs ----"
        cat "$WORK/$am/out/regression.diffs"
    fi
done
echo "isolation: AMs ${ams[*]}; schedules ${schedules[*]}: $([[ $rc == 0 ]] && echo ok || echo FAILED) ($(($(date +%s) - t0)) s)"
exit $rc
