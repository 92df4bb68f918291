#!/usr/bin/env bash
# tests/sqlsmith.sh [--quick] — every access method under SQLsmith, a random
# query generator we did not write (Debian's sqlsmith package).
#
# One cluster, one database (tests/sqlsmith/schema.sql): a table per index
# AM with indexes of every shape it accepts (unique, multi-column, INCLUDE,
# partial, expression, collated, DESC, reloptions), three of them heap and
# two hasis, a hasis table with indexes of ours and PostgreSQL's, and a
# plain heap table; NULLs, NaN, -0, infinity and TOASTed values in the data.
# SQLsmith then sends random SELECT, INSERT, UPDATE, DELETE and MERGE
# statements that call whatever functions and operators the catalog offers,
# with TABLESAMPLE, window functions, lateral joins and FOR UPDATE, as two
# roles that are not superusers: one with the planner's defaults, one with
# seqscans and sorts disabled so index paths (ours) are taken wherever
# possible. A background loop syncs every index of ours (pg_hybrid.merge)
# every few seconds, so statements meet indexes in the middle of merges.
# Meanwhile a third SQLsmith reads from a hot standby that replays it all.
# Then tests/sqlsmith/api.sql calls every pg_hybrid SQL function on every
# relation of the database, on NULL and on OIDs that name nothing, as the
# superuser and as the unprivileged role.
#
# Required:
#   - no crash, on the primary or the standby: the postmaster is the one
#     started, and the server log has no
#     PANIC, "terminated by signal", "was terminated" or reinitialisation;
#   - no internal error (SQLSTATE class XX) in the server log, except
#     those of PostgreSQL's own C code that SQLsmith provokes in any
#     database by making up arguments: "cache lookup failed" for an OID it
#     hands to a catalog function (amvalidate(0) and the like), a typmod
#     output function given a typmod the type never makes, unknownin() on
#     a non-literal, a new OID or xid wanted on the standby; counted and printed.
#     An internal error raised from pg_hybrid's Rust code always fails;
#   - the SQL-function sweep raises no internal error;
#   - the standby, once it replayed everything, has every table's rows and
#     every index of ours passes verify there (of its structure: heapallindexed
#     needs the primary);
#   - afterwards (the tables changed under SQLsmith's DML): every index of
#     ours passes pg_hybrid.verify(idx, heapallindexed => true), the hasis
#     tables pass pg_hybrid.verify_table, btree indexes (on hasis too) pass
#     amcheck's bt_index_parent_check with heapallindexed, pg_amcheck passes
#     on the heap tables, and each index returns the rows a seqscan returns
#     (ph_index_vs_seq: plain, bitmap and count(*) scans);
#   - pg_dump -Fc and pg_restore -j 2 into a new database bring back every
#     index definition (pg_indexes.indexdef: AM, operator classes,
#     collations, INCLUDE, predicate, reloptions) and every table's rows,
#     and the rebuilt indexes pass the same checks.
# Queries: 2 x 4000 (2 x 2000 with --quick; PH_SQLSMITH_QUERIES), seeds 1
# and 2 (PH_SQLSMITH_SEED=K makes them K+1 and K+2), so a failure can be
# replayed with `sqlsmith --seed=N`. SQLsmith's own error rate (most of
# its statements fail type checks) and the statements' SQLSTATE classes are
# printed for the record.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ph_parse_quick "$0" "$@"
queries=4000
rows=20000
if ((quick)); then
    queries=2000
    rows=10000
fi
queries=${PH_SQLSMITH_QUERIES:-$queries}
seed0=${PH_SQLSMITH_SEED:-0}
[[ $PH_STANDIN == 1 ]] && { echo "SKIP: sqlsmith.sh needs pg_hybrid (am=$PH_AM)"; exit 77; }
SQLSMITH=$(command -v sqlsmith || true)
[[ -n $SQLSMITH ]] || ph_die "sqlsmith is not installed (scripts/setup.sh installs Debian's sqlsmith package: apt-get install sqlsmith)"

ph_trap_install
DIR=$(ph_scratch sqlsmith)
DB=smith
cluster_init "$DIR" "$PH_PORT" "log_line_prefix = '%m [%p] %e '" "log_error_verbosity = verbose"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
pm_pid=$(ph_cluster_pid "$DIR")
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

say "schema: $rows rows per table"
cluster_psql "$DIR" "$DB" -v rows="$rows" <"$PH_REPO/tests/sqlsmith/schema.sql" 2>"$DIR/schema.err" ||
    { cat "$DIR/schema.err" >&2; ph_die "tests/sqlsmith/schema.sql failed"; }
grep -o 'refused by .*' "$DIR/schema.err" | sed 's/^/  /' || true
cluster_sql "$DIR" "$DB" "SELECT '  ' || a.amname || ': ' || count(*) || ' indexes' FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname LIKE 't\_%' GROUP BY a.amname ORDER BY 1"

ours="SELECT c.oid::regclass FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relkind = 'i' AND a.amname IN ('hybrid_btree', 'elastic_btree', 'griffin', 'tiered_btree', 'tiered_hash') AND c.relnamespace = 'public'::regnamespace ORDER BY 1"

# Syncs every index of ours every 3 s while SQLsmith runs.
merger() {
    local idx
    while :; do
        for idx in $(cluster_sql "$DIR" "$DB" "$ours"); do
            cluster_sql "$DIR" "$DB" "SELECT pg_hybrid.merge('$idx')" >/dev/null 2>>"$DIR/merger.err" || true
        done
        sleep 3
    done
}
merger &
merger_pid=$!
disown "$merger_pid"   # no "Killed" notice when it is stopped
ph_bg_add "$merger_pid"

sock=$(cluster_sockdir "$DIR")
port=$(cluster_port "$DIR")

# A hot standby, which replays SQLsmith's DML and the syncs while a third
# SQLsmith reads from it (its DML fails there, read-only, as it should).
S=$(ph_scratch sqlsmith-standby)
SPORT=$((PH_PORT + 1))
say "hot standby: pg_basebackup -R into $S (port $SPORT)"
ph_standby "$DIR" "$S" "$SPORT"
s_pid=$(ph_cluster_pid "$S")

# run_sqlsmith HOST PORT ROLE SEED LABEL: one SQLsmith run; fails the test if it does not end well
run_sqlsmith() {
    local host=$1 p=$2 role=$3 seed=$4 label=$5 rc=0 rate
    ph_as_user timeout 900 "$SQLSMITH" --target="host=$host port=$p dbname=$DB user=$role" \
        --exclude-catalog --seed="$seed" --max-queries="$queries" --verbose \
        >"$DIR/sqlsmith-$label.out" 2>"$DIR/sqlsmith-$label.err" || rc=$?
    rate=$(grep -o 'error rate: [0-9.]*' "$DIR/sqlsmith-$label.err" | tail -n1 || true)
    echo "  $label: exit $rc, ${rate:-no error rate printed}"
    if ((rc != 0)); then
        fail "sqlsmith ($label) exited with $rc (replay: sqlsmith --seed=$seed); its last words:"
        tail -n 5 "$DIR/sqlsmith-$label.err" | sed 's/^/    /' >&2
    fi
}

logpos=$(stat -c %s "$DIR/postgres.log")
s_logpos=$(stat -c %s "$S/postgres.log")
say "sqlsmith on the standby as smith_idx: $queries queries, seed $((seed0 + 3)) (in the background)"
run_sqlsmith "$S/sock" "$SPORT" smith_idx $((seed0 + 3)) standby >"$DIR/standby-run.out" 2>&1 &
standby_run=$!
for run in "smith $((seed0 + 1))" "smith_idx $((seed0 + 2))"; do
    read -r role seed <<<"$run"
    say "sqlsmith as $role: $queries queries, seed $seed"
    run_sqlsmith "$sock" "$port" "$role" "$seed" "$role"
done
wait "$standby_run" || true
cat "$DIR/standby-run.out"
grep -q '^FAIL' "$DIR/standby-run.out" && failures=$((failures + 1))
ph_kill_tree "$merger_pid"
if grep -qE 'XX[0-9A-Z]{3}|PANIC|terminat' "$DIR/merger.err" 2>/dev/null; then
    fail "pg_hybrid.merge failed during the run:"
    grep -E 'ERROR' "$DIR/merger.err" | sort | uniq -c | head -n 5 >&2 || true
fi

say "SQL functions on every relation"
for role in "$PH_USER" smith; do
    PGOPTIONS="-c statement_timeout=0" ph_as_user "$PH_PGBIN/psql" -X -q -h "$sock" -p "$port" -U "$role" -d "$DB" \
        -f - <"$PH_REPO/tests/sqlsmith/api.sql" >"$DIR/api-$role.out" 2>&1 || fail "tests/sqlsmith/api.sql as $role did not run to its end (see $DIR/api-$role.out)"
    grep -o 'API-SUMMARY.*' "$DIR/api-$role.out" | sed 's/^API-SUMMARY/ /' || true
    if grep -q 'API-INTERNAL' "$DIR/api-$role.out"; then
        fail "internal errors from pg_hybrid's SQL functions as $role:"
        grep -o 'API-INTERNAL.*' "$DIR/api-$role.out" | head -n 10 | sed 's/^/    /' >&2 || true
    fi
done

# check_log NAME CLUSTER POS PID: no crash, no internal error of ours in the
# cluster's log since byte POS, and its postmaster is still PID
check_log() {
    local name=$1 dir=$2 pos=$3 pid=$4 log crash xx core n_core internal
    say "server log of the $name"
    log=$(tail -c +$((pos + 1)) "$dir/postgres.log")
    echo "  SQLSTATE classes of the statements that failed:"
    grep -oE '^[0-9-]+ [0-9:.]+ [A-Z]+ \[[0-9]+\] [0-9A-Z]{5} ERROR' <<<"$log" | awk '{print substr($5, 1, 2)}' | sort | uniq -c | sort -rn | head -n 12 | sed 's/^/   /' || true
    crash=$(grep -E 'PANIC|terminated by signal|was terminated|reinitializing|server process .* exited' <<<"$log" || true)
    if [[ -n $crash ]]; then
        fail "the $name crashed:"
        head -n 10 <<<"$crash" | sed 's/^/    /' >&2
    fi
    [[ $(ph_cluster_pid "$dir") == "$pid" ]] || fail "the $name's postmaster changed (was $pid)"
    # Internal errors (SQLSTATE class XX), each with the LOCATION the server
    # logged for it (log_error_verbosity = verbose): "message | function,
    # file:line". Ours are raised from Rust (a .rs file), whatever the message.
    # SQLsmith also calls PostgreSQL's own SQL functions with arguments nothing
    # checks before their internal elog()s: catalog functions with an OID that
    # names nothing ("cache lookup failed for ..."), typmod output functions
    # with a typmod the type never makes, unknownin() on a non-literal, and
    # on the standby a function that needs a new OID or a transaction ID
    # (lo_create, txid_current and the like). Those, raised in PostgreSQL's C code, are counted and printed
    # apart.
    xx=$(ph_internal_errors <<<"$log")
    core='^(cache lookup failed for [a-z ]+ [0-9]+|failed to find conversion function from unknown to [a-z ]+|invalid [A-Za-z ]+ typmod: .*|cannot assign (OIDs|TransactionIds) during recovery) \| [A-Za-z_0-9]+, [A-Za-z_0-9]+\.c:[0-9]+$'
    n_core=$(grep -cE "$core" <<<"$xx" || true)
    echo "  PostgreSQL's own internal errors on arguments SQLsmith made up: $n_core"
    grep -E "$core" <<<"$xx" | sort | uniq -c | head -n 5 | sed 's/^/    /' || true
    internal=$(grep -vE "$core" <<<"$xx" | grep . || true)
    if [[ -n $internal ]]; then
        fail "internal errors (SQLSTATE class XX) in the $name's log:"
        sort <<<"$internal" | uniq -c | head -n 10 | sed 's/^/    /' >&2 || true
        echo "  their statements:" >&2
        grep -A 30 -E '\] XX[0-9A-Z]{3} ERROR' <<<"$log" | head -n 60 | sed 's/^/    /' >&2 || true
    fi
}
ph_wait_replay "$DIR" "$S" "$DB"
check_log primary "$DIR" "$logpos" "$pm_pid"
check_log standby "$S" "$s_logpos" "$s_pid"

say "the standby against the primary"
SEQ=("SET enable_indexscan = off" "SET enable_bitmapscan = off" "SET enable_indexonlyscan = off")
rows() { cluster_sql "$1" "$2" "${SEQ[@]}" "SELECT count(*) || ' ' || md5(coalesce(string_agg(x::text, E'\n' ORDER BY x::text), '')) FROM $3 x"; }
for t in $(cluster_sql "$DIR" "$DB" "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 't\_%' ORDER BY 1"); do
    a=$(rows "$DIR" "$DB" "$t")
    b=$(rows "$S" "$DB" "$t")
    [[ $a == "$b" ]] && echo "  $t: ${a%% *} rows, as on the primary" || fail "$t on the standby: '$b', on the primary: '$a'"
done
# (heapallindexed needs the primary: replay changes the heap under it)
n=0
for idx in $(cluster_sql "$S" "$DB" "$ours"); do
    cluster_sql "$S" "$DB" "SELECT pg_hybrid.verify('$idx', heapallindexed => false)" >/dev/null && n=$((n + 1)) || fail "verify($idx) on the standby"
done
echo "  verify of the structure of $n indexes of ours on the standby: ok"

# check_indexes DB: verify every index of ours, and every index against a seqscan
check_indexes() {
    local db=$1 idx info tab am lead pred
    for idx in $(cluster_sql "$DIR" "$db" "SELECT c.oid::regclass FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname LIKE 't\_%' ORDER BY 1"); do
        info="FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam LEFT JOIN pg_attribute att ON att.attrelid = i.indrelid AND att.attnum = i.indkey[0] WHERE i.indexrelid = '$idx'::regclass"
        tab=$(cluster_sql "$DIR" "$db" "SELECT i.indrelid::regclass $info")
        am=$(cluster_sql "$DIR" "$db" "SELECT a.amname $info")
        # the leading key column (or expression) and the partial index's predicate
        lead=$(cluster_sql "$DIR" "$db" "SELECT CASE WHEN i.indkey[0] <> 0 THEN quote_ident(att.attname) ELSE pg_get_indexdef(i.indexrelid, 1, true) END $info")
        pred=$(cluster_sql "$DIR" "$db" "SELECT coalesce(pg_get_expr(i.indpred, i.indrelid, true), 'true') $info")
        case $am in
            hybrid_btree | elastic_btree | griffin | tiered_btree | tiered_hash) ph_verify "$DIR" "$db" "$idx" || fail "$db: verify($idx)" ;;
            # amcheck reads the table through its AM's index build scan (hasis's too)
            btree) cluster_sql "$DIR" "$db" "SELECT bt_index_parent_check('$idx', heapallindexed => true, rootdescend => true)" >/dev/null &&
                echo "  bt_index_parent_check($idx, heapallindexed): ok" || fail "$db: bt_index_parent_check($idx)" ;;
        esac
        ph_index_vs_seq "$DIR" "$db" "$tab" "$idx" "($pred) AND $lead IS NOT NULL" || fail "$db: $idx ($am) disagrees with seqscan"
    done
    # pg_amcheck, one more client we did not write: the heap tables and
    # their btree indexes after SQLsmith's DML
    ph_as_user "$PH_PGBIN/pg_amcheck" -h "$sock" -p "$port" -U "$PH_USER" -d "$db" --heapallindexed --no-dependent-toast >"$DIR/amcheck-$db.out" 2>&1 &&
        echo "  pg_amcheck --heapallindexed: ok" || { fail "$db: pg_amcheck found problems:"; head -n 10 "$DIR/amcheck-$db.out" >&2; }
    for t in $(cluster_sql "$DIR" "$db" "SELECT c.relname FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'hasis' AND c.relname LIKE 't\_%' ORDER BY 1"); do
        cluster_sql "$DIR" "$db" "SELECT pg_hybrid.verify_table('$t')" >/dev/null && echo "  verify_table($t): ok" || fail "$db: verify_table($t)"
    done
}

say "indexes against seqscans"
cluster_sql "$DIR" "$DB" "CREATE EXTENSION amcheck" >/dev/null
check_indexes "$DB"

# pg_dump and pg_restore, clients we did not write either: every index
# comes back with its AM, operator classes, collations, INCLUDE columns,
# predicate and reloptions, built anew from the restored rows.
say "pg_dump -Fc, pg_restore -j 2 into a new database"
ph_as_user "$PH_PGBIN/pg_dump" -h "$sock" -p "$port" -U "$PH_USER" -Fc -f "$DIR/smith.dump" "$DB"
cluster_psql "$DIR" postgres -c "CREATE DATABASE smith_restored TEMPLATE template0"
ph_as_user "$PH_PGBIN/pg_restore" -h "$sock" -p "$port" -U "$PH_USER" --exit-on-error -j 2 -d smith_restored "$DIR/smith.dump" >"$DIR/restore.log" 2>&1 ||
    { fail "pg_restore failed:"; head -n 20 "$DIR/restore.log" >&2; }
defs() { cluster_sql "$DIR" "$1" "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexdef"; }
if [[ $(defs "$DB") != "$(defs smith_restored)" ]]; then
    fail "the restored index definitions differ:"
    diff <(defs "$DB") <(defs smith_restored) | head -n 20 >&2 || true
else
    echo "  $(defs "$DB" | wc -l) index definitions, the same"
fi
for t in $(cluster_sql "$DIR" "$DB" "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 't\_%' ORDER BY 1"); do
    a=$(rows "$DIR" "$DB" "$t")
    b=$(rows "$DIR" smith_restored "$t")
    [[ $a == "$b" ]] && echo "  $t: ${a%% *} rows, the same" || fail "$t restored: '$b', the source: '$a'"
done
check_indexes smith_restored

if ((failures)); then
    echo "sqlsmith: $failures failure(s); cluster kept: $DIR"
    exit 1
fi
echo "sqlsmith: ok"
