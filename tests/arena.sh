#!/usr/bin/env bash
# tests/arena.sh [--quick] — hybrid_btree under shared-memory (arena) pressure.
#
# One cluster with pg_hybrid.shared_memory = '8MB' (the minimum) and
# pg_hybrid.merge_min_entries = 10000000, so the ratio trigger never fires and
# only arena pressure (less than 25% free, or completely full) merges.  Two
# rounds, pg_hybrid.background_merge = on, then off (ALTER SYSTEM + reload);
# each creates a table with three hybrid_btree indexes (int8, int4 and a
# 32-byte text key) while the earlier round's table and indexes stay (idle
# indexes holding arena memory), and inserts ~400k rows (~100k with --quick):
# two big single-statement transactions, one big multi-statement transaction,
# then four concurrent psql sessions of 2000-row statements.  Every
# statement's outcome is logged by its session (psql :ERROR), so the committed
# rows are known.  Required:
#   - no ERROR anywhere (sessions and server log) except out_of_memory
#     (SQLSTATE 53200) whose message or HINT names pg_hybrid.shared_memory;
#     how many of those happened is reported (their statements rolled back);
#   - no crash / PANIC / postmaster reinitialisation;
#   - the heap holds exactly the committed rows, and each index agrees with a
#     seqscan (plain, bitmap and count(*) index scans, ph_index_vs_seq);
#   - pg_hybrid.verify(idx, heapallindexed => true) passes for each index;
#   - pg_hybrid.index_stats shows 0 < merges <= max(50, rows / 500) for each
#     index (arena pressure merges, but not once per insert);
#   - no merge storm while inserting (an index with more than 50 merges and
#     more than one per 500 entries), each insert phase ends within 900 s
#     (300 s with --quick) and the ar_* indexes stay under 4 GB (2 GB)
#     together; otherwise a watchdog cancels the sessions and the test fails
#     instead of filling the disk.  Index sizes are printed after each phase.
# Then the cluster is restarted with the same 8MB arena (clean stop in round
# 1, immediate stop = crash recovery in round 2) and queried right away, so
# each dynamic stage is rebuilt from its delta log: same checks; then more
# rows are inserted and everything is checked once more.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ph_parse_quick "$0" "$@"
big=100000       # rows per big transaction (x3: two single statements + one multi-statement)
sess_rows=25000  # rows per concurrent session (x4)
after=20000      # rows inserted after the restart
if ((quick)); then
    big=25000
    sess_rows=6000
    after=5000
fi
chunk=2000
deadline=900        # seconds per insert phase (watchdog)
max_index_mb=4096   # all ar_* indexes together (watchdog; protects the disk)
if ((quick)); then deadline=300; max_index_mb=2048; fi
[[ $PH_AM == hybrid_btree ]] || { echo "SKIP: arena.sh tests pg_hybrid's shared-memory arena (am=$PH_AM)"; exit 77; }

ph_trap_install
DIR=$(ph_scratch arena)
DB=arena
cluster_init "$DIR" "$PH_PORT" "pg_hybrid.shared_memory = '8MB'" "pg_hybrid.merge_min_entries = 10000000"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
LOGS=$DIR/sessions
mkdir -p "$LOGS"
chown "$PH_USER:" "$LOGS"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

[[ $(cluster_sql "$DIR" "$DB" "SHOW pg_hybrid.shared_memory") == 8MB ]] || ph_die "pg_hybrid.shared_memory is not 8MB"

# row g of table T: id = g, k = g % 100000, s = md5(g)
VALS="g, (g % 100000)::int4, md5(g::text), repeat('p', (g % 20)::int)"

# script_stmts T A B: one INSERT statement per chunk of [A, B], each followed by
# "committed T a b" or "failed T a b" (autocommit: the statement is the transaction)
script_stmts() {
    local t=$1 a=$2 b=$3 e
    echo '\set VERBOSITY verbose'
    while ((a <= b)); do
        e=$((a + chunk - 1))
        ((e > b)) && e=$b
        printf 'INSERT INTO %s SELECT %s FROM generate_series(%d, %d) g;\n' "$t" "$VALS" "$a" "$e"
        printf '\\if :ERROR\n\\echo failed %s %d %d\n\\else\n\\echo committed %s %d %d\n\\endif\n' "$t" "$a" "$e" "$t" "$a" "$e"
        a=$((e + 1))
    done
}

# session NAME T A B [ROWS-PER-STATEMENT]: run script_stmts in one psql session,
# stdout (the outcome lines) and stderr to $LOGS/NAME.{out,err}
session() {
    local name=$1 t=$2 a=$3 b=$4 c=${5:-$chunk}
    chunk=$c script_stmts "$t" "$a" "$b" |
        cluster_psql "$DIR" "$DB" -v ON_ERROR_STOP=0 >"$LOGS/$name.out" 2>"$LOGS/$name.err" || true
}

# big_tx NAME T A B: one multi-statement transaction (two INSERTs); "committed"
# only if psql (ON_ERROR_STOP=1) got through COMMIT
big_tx() {
    local name=$1 t=$2 a=$3 b=$4 m
    m=$(((a + b) / 2))
    if {
        echo '\set VERBOSITY verbose'
        echo 'BEGIN;'
        printf 'INSERT INTO %s SELECT %s FROM generate_series(%d, %d) g;\n' "$t" "$VALS" "$a" "$m"
        printf 'INSERT INTO %s SELECT %s FROM generate_series(%d, %d) g;\n' "$t" "$VALS" $((m + 1)) "$b"
        echo 'COMMIT;'
    } | cluster_psql "$DIR" "$DB" >"$LOGS/$name.out" 2>"$LOGS/$name.err"; then
        echo "committed $t $a $b" >>"$LOGS/$name.out"
    else
        echo "failed $t $a $b" >>"$LOGS/$name.out"
    fi
}

# check_errors PATTERN-OF-LOGS LOGPOS: only out_of_memory errors naming
# pg_hybrid.shared_memory, in the session logs and in the server log since LOGPOS
OOM_TOTAL=0
check_errors() {
    local logpos=$1 f bad oom
    for f in "$LOGS"/*.err; do
        [[ -s $f ]] || continue
        # verbose psql errors: "ERROR:  SQLSTATE: message", then DETAIL/HINT/LOCATION lines
        bad=$(awk '
            /ERROR:/ { if (e != "" && !ok) print e; e = $0; ok = ($0 ~ /ERROR:  53200:/ && $0 ~ /pg_hybrid\.shared_memory/); next }
            /^HINT:/ { if (e != "" && $0 ~ /pg_hybrid\.shared_memory/ && e ~ /ERROR:  53200:/) ok = 1; next }
            END { if (e != "" && !ok) print e }' "$f")
        if [[ -n $bad ]]; then
            fail "$(basename "$f" .err): errors other than a clear out_of_memory:"
            sed 's/^/    /' <<<"$bad" | head -n 5 >&2
        fi
        oom=$(grep -c 'ERROR:  53200:' "$f" || true)
        OOM_TOTAL=$((OOM_TOTAL + oom))
    done
    bad=$(tail -c +$((logpos + 1)) "$DIR/postgres.log" | grep -E 'ERROR:|PANIC|FATAL|terminated by signal|was terminated|reinitializing|exited with exit code' |
        grep -v 'pg_hybrid.shared_memory' || true)
    if [[ -n $bad ]]; then
        fail "server log: errors other than a clear out_of_memory, or a crash:"
        head -n 10 <<<"$bad" | sed 's/^/    /' >&2
    fi
}

# check_table T LABEL: heap == committed rows; every index == seqscan; verify; stats
check_table() {
    local t=$1 label=$2 n heap idx
    local SEQ=("SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off")
    {
        echo "SET client_min_messages = warning; BEGIN;"
        echo "DROP TABLE IF EXISTS committed_$t; CREATE TABLE committed_$t (a int8, b int8);"
        echo "COPY committed_$t FROM STDIN;"
        cat "$LOGS"/*.out | awk -v t="$t" '$1 == "committed" && $2 == t { printf "%s\t%s\n", $3, $4 }'
        echo '\.'
        echo "COMMIT;"
    } | cluster_psql "$DIR" "$DB" >/dev/null
    n=$(cluster_sql "$DIR" "$DB" "SELECT coalesce(sum(b - a + 1), 0) FROM committed_$t")
    heap=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "SELECT count(*) FROM $t")
    say "  $label: $n committed rows logged, $heap rows in the heap"
    [[ $n == "$heap" ]] || fail "$label: the heap holds $heap rows but $n were committed"
    local missing
    missing=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" \
        "SELECT count(*) FROM committed_$t c, generate_series(c.a, c.b) g WHERE NOT EXISTS (SELECT 1 FROM $t x WHERE x.id = g)")
    [[ $missing == 0 ]] || fail "$label: $missing committed rows missing from the heap"
    ph_index_vs_seq "$DIR" "$DB" "$t" "${t}_id" "id >= 0" || fail "$label: ${t}_id disagrees with seqscan"
    ph_index_vs_seq "$DIR" "$DB" "$t" "${t}_k" "k >= 0" || fail "$label: ${t}_k disagrees with seqscan"
    ph_index_vs_seq "$DIR" "$DB" "$t" "${t}_s" "s >= ''" || fail "$label: ${t}_s disagrees with seqscan"
    for idx in "${t}_id" "${t}_k" "${t}_s"; do
        ph_verify "$DIR" "$DB" "$idx" || fail "$label: verify($idx)"
    done
}

# report_merges T LABEL ROWS: each index merged (arena pressure) but not per
# insert: 0 < merges <= max(50, ROWS / 500)
report_merges() {
    local t=$1 label=$2 rows=$3 idx row merges de db se size cap
    cap=$((rows / 500)); ((cap < 50)) && cap=50
    for idx in "${t}_id" "${t}_k" "${t}_s"; do
        row=$(cluster_sql "$DIR" "$DB" "SELECT merges || ' ' || dynamic_entries || ' ' || dynamic_bytes || ' ' || static_entries || ' ' || pg_size_pretty(relation_bytes) FROM pg_hybrid.index_stats('$idx')")
        read -r merges de db se size <<<"$row"
        say "  $label: $idx merges=$merges dynamic_entries=$de dynamic_bytes=$db static_entries=$se size=$size"
        ((merges > 0)) || fail "$label: $idx never merged (index_stats.merges = 0) under arena pressure"
        ((merges <= cap)) || fail "$label: $idx merged $merges times for $rows rows (more than $cap): a merge storm"
    done
}

server_state() {
    cluster_sql "$DIR" "$DB" "SELECT pg_postmaster_start_time() || ' ' || (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer')"
}

# ---------------------------------------------------------- watchdog --
# A phase runs in the background while the watchdog polls once a second: if
# an index merges about once per insert (each merge re-writes the whole static
# stage, and a long transaction keeps the retired pages from being recycled),
# the phase outlives $deadline seconds, or the ar_* indexes grow past
# $max_index_mb, the sessions and merge workers are cancelled and the test
# fails instead of filling the disk.
STORM=0
# storming: an ar_* index that merged more than 50 times and more than once
# per 500 entries it holds (the final check allows max(50, rows / 500))
storming() {
    cluster_sql "$DIR" "$DB" "SELECT string_agg(c.relname || ' merged ' || s.merges || ' times for ' || (s.static_entries + s.dynamic_entries) || ' entries', ', ') FROM pg_class c, pg_hybrid.index_stats(c.oid) s WHERE c.relname LIKE 'ar\_%' AND c.relkind = 'i' AND s.merges > 50 AND s.merges * 500 > s.static_entries + s.dynamic_entries"
}
index_mb() {
    cluster_sql "$DIR" "$DB" "SELECT (coalesce(sum(pg_relation_size(i.indexrelid)), 0) / 1048576)::bigint FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relname LIKE 'ar\_%'"
}
run_phase() {   # LABEL CMD...
    local label=$1 pid t0 mb=0 why=""; shift
    t0=$(date +%s)
    "$@" &
    pid=$!
    ph_bg_add "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        mb=$(index_mb 2>/dev/null || echo 0)
        why=$(storming 2>/dev/null || true)
        if [[ -n $why ]]; then
            why="a merge storm: $why"
        elif ((mb > max_index_mb)); then
            why="the indexes grew to ${mb}MB (limit ${max_index_mb}MB)"
        elif (($(date +%s) - t0 > deadline)); then
            why="it ran longer than ${deadline}s"
        fi
        if [[ -n $why ]]; then
            fail "$label: $why; cancelling it.  index_stats:"
            cluster_sql "$DIR" "$DB" "SELECT c.relname || ': merges=' || s.merges || ' static_entries=' || s.static_entries || ' dynamic_entries=' || s.dynamic_entries || ' dynamic_bytes=' || s.dynamic_bytes || ' relation_bytes=' || s.relation_bytes FROM pg_class c, pg_hybrid.index_stats(c.oid) s WHERE c.relname LIKE 'ar\_%' AND c.relkind = 'i' ORDER BY 1" | sed 's/^/    /' >&2 || true
            STORM=1
            while kill -0 "$pid" 2>/dev/null; do
                cluster_sql "$DIR" "$DB" "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (backend_type = 'pg_hybrid merge' OR (backend_type = 'client backend' AND datname = current_database()))" >/dev/null 2>&1 || true
                sleep 1
            done
            break
        fi
    done
    wait "$pid" || true
    say "  $label: $(($(date +%s) - t0))s, indexes of ar_* now ${mb}MB"
}

big_phase() {   # T G: two big single statements, then one big multi-statement transaction
    local t=$1 g=$2
    session big1 "$t" "$g" $((g + big - 1)) "$big"
    session big2 "$t" $((g + big)) $((g + 2 * big - 1)) "$big"
    big_tx big3 "$t" $((g + 2 * big)) $((g + 3 * big - 1))
}
conc_phase() {  # T G: four concurrent sessions
    local t=$1 g=$2 i pids=()
    for i in 1 2 3 4; do
        session "conc$i" "$t" $((g + (i - 1) * sess_rows)) $((g + i * sess_rows - 1)) &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
}
outcomes() {    # GLOB: "N committed, M failed" statements
    echo "$(cat "$LOGS"/$1.out 2>/dev/null | grep -c '^committed' || true) committed, $(cat "$LOGS"/$1.out 2>/dev/null | grep -c '^failed' || true) failed"
}
wait_merge_workers() {
    local i busy
    for ((i = 0; i < 300; i++)); do
        busy=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_hybrid merge'")
        [[ $busy == 0 ]] && return 0
        sleep 0.2
    done
}
report_oom() {  # LABEL
    if ((OOM_TOTAL > 0)); then
        say "  $1: $OOM_TOTAL statements failed with a clear out_of_memory ERROR (pg_hybrid.shared_memory named); they rolled back"
    else
        say "  $1: no out_of_memory ERROR"
    fi
}

# ------------------------------------------------------------- rounds --
# Round 2 runs while round 1's table and its three indexes still hold their
# dynamic stages and Bloom filters in the arena, as idle indexes would.
round=0
for bg in on off; do
    round=$((round + 1))
    t=ar_$bg
    R="round $round (background_merge=$bg)"
    say "== $R: arena 8MB, merge_min_entries 10000000"
    cluster_sql "$DIR" "$DB" "ALTER SYSTEM SET pg_hybrid.background_merge = $bg" "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    [[ $(cluster_sql "$DIR" "$DB" "SHOW pg_hybrid.background_merge") == "$bg" ]] || ph_die "background_merge did not become $bg"
    cluster_sql "$DIR" "$DB" \
        "CREATE TABLE $t (id int8 NOT NULL, k int4 NOT NULL, s text NOT NULL, pad text) WITH (autovacuum_enabled = off)" \
        "CREATE INDEX ${t}_id ON $t USING hybrid_btree (id)" \
        "CREATE INDEX ${t}_k ON $t USING hybrid_btree (k)" \
        "CREATE INDEX ${t}_s ON $t USING hybrid_btree (s)" >/dev/null
    rm -f "$LOGS"/*
    logpos=$(stat -c %s "$DIR/postgres.log")
    state=$(server_state)
    OOM_TOTAL=0
    g=1
    run_phase "$R: 3 big transactions of $big rows" big_phase "$t" "$g"
    g=$((g + 3 * big))
    say "  big transactions: $(outcomes 'big*')"
    ((STORM)) || run_phase "$R: 4 concurrent sessions of $sess_rows rows" conc_phase "$t" "$g"
    g=$((g + 4 * sess_rows))
    say "  concurrent statements: $(outcomes 'conc*')"
    wait_merge_workers
    ((STORM)) || check_errors "$logpos"
    report_oom "$R"
    [[ $(server_state) == "$state" ]] || fail "$R: the postmaster reinitialised during the inserts"
    check_table "$t" "$R"
    report_merges "$t" "$R" $((3 * big + 4 * sess_rows))
    ((STORM)) && break

    # restart with the same small arena; query right away (dynamic stages rebuilt from the delta logs)
    if [[ $bg == on ]]; then mode=fast; else mode=immediate; fi
    cluster_sql "$DIR" "$DB" "SELECT 'dynamic entries before the restart: ' || string_agg(i || '=' || (SELECT dynamic_entries FROM pg_hybrid.index_stats(i::regclass)), ' ') FROM unnest(ARRAY['${t}_id', '${t}_k', '${t}_s']) i" | sed 's/^/  /'
    cluster_stop "$DIR" "$mode"
    cluster_start "$DIR"
    cluster_wait_ready "$DIR"
    say "  restarted ($mode stop) with pg_hybrid.shared_memory = $(cluster_sql "$DIR" "$DB" "SHOW pg_hybrid.shared_memory")"
    logpos=$(stat -c %s "$DIR/postgres.log")
    state=$(server_state)
    rm -f "$LOGS"/*.err
    OOM_TOTAL=0
    if first=$(cluster_sql "$DIR" "$DB" "SET enable_seqscan = off" "SET enable_bitmapscan = off" \
        "SELECT count(*) FROM $t WHERE s >= ''" 2>&1); then
        say "  first index query after the restart: $first rows"
    else
        fail "$R: first query after the restart failed: $first"
    fi
    check_table "$t" "$R after the restart"
    # more inserts on the rebuilt stages
    run_phase "$R: $after rows after the restart" session after1 "$t" "$g" $((g + after - 1))
    g=$((g + after))
    say "  statements after the restart: $(outcomes 'after*')"
    wait_merge_workers
    ((STORM)) || check_errors "$logpos"
    report_oom "$R after the restart"
    [[ $(server_state) == "$state" ]] || fail "$R: the postmaster reinitialised after the restart"
    check_table "$t" "$R after the restart + $after rows"
    report_merges "$t" "$R (end)" $((3 * big + 4 * sess_rows + after))
    ((STORM)) && break
done

if ((failures)); then
    echo "arena: FAIL ($failures problems; logs in $DIR)"
    exit 1
fi
echo "arena: PASS"
