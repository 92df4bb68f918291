#!/usr/bin/env bash
# tests/crash.sh [--quick] — crash safety of the AM ($PH_AM, default hybrid_btree).
#
# Phase 1: three background psql sessions insert into a table with a UNIQUE
#   index (id) and a non-unique index (v, g) of the AM (v has 1000 values),
#   committing 50-row transactions and logging each committed range after
#   COMMIT returns.  The postmaster and its
#   children are killed with SIGKILL mid-inserts; after restart every logged
#   row must be in the heap, full index scans (plain and bitmap) must return
#   exactly the heap's rows, up to 50000 logged rows must be found by forced
#   nested-loop index probes through each index, no key may be duplicated, and
#   pg_hybrid.verify(idx, heapallindexed => true) must pass.  Then more inserts
#   run on the recovered index and everything is checked again.
# Phase 2 (x3, x1 with --quick): a big pg_hybrid.merge() runs in the
#   background together with an inserter; the cluster is killed while the merge
#   is active (seen in pg_stat_activity); same checks, then a merge must
#   complete on the recovered index and verify again.
# Phase 3: a table of N rows, 80% deleted, killed during the VACUUM that
#   removes them (elastic_btree under a bound: compact leaves revert then);
#   after restart: exactly the live rows, each found by a forced index probe,
#   index == seqscan (also a bounded range), verify; then VACUUM and merge to
#   completion and the same checks.
# Phase 4 (tiered_btree, tiered_hash): 64kB hot tiers with sample_rate 1;
#   killed while two readers promote records and two inserters push the
#   hot tier past its bound (promotions and evictions seen first); after
#   restart no record is left (they live in shared memory), the checks of
#   phase 1 pass, and reading brings records back.
# fsync stays on (cluster_init refuses fsync=off here).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ph_parse_quick "$0" "$@"
merge_iters=3
big_rows=${PH_CRASH_ROWS:-1000000}
if ((quick)); then
    merge_iters=1
    big_rows=${PH_CRASH_ROWS:-300000}
fi

ph_trap_install
DIR=$(ph_scratch crash)
DB=crash
AM=$PH_AM
cluster_init "$DIR" "$PH_PORT"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
LOGS=$DIR/writers
mkdir -p "$LOGS"
chown "$PH_USER:" "$LOGS"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# id = g * 2654435761 mod 2^32: a bijection on g < 2^32, i.e. unique keys in random order
IDEXPR="(g * 2654435761) % 4294967296"
ph_am_ddl "$AM"
opts=$PH_IDX_OPTS
tcoll=$PH_TCOLL   # collation of indexed text columns

mk_table() {   # NAME
    cluster_sql "$DIR" "$DB" \
        "CREATE TABLE $1 (g int8 NOT NULL, id int8 NOT NULL, v text$tcoll, pad text) WITH (autovacuum_enabled = off)"
}
mk_indexes() { # NAME [WITH-CLAUSE]
    local o=${2-$opts}
    cluster_sql "$DIR" "$DB" \
        "CREATE UNIQUE INDEX ${1}_id ON $1 USING $AM (id)$o" \
        "CREATE INDEX ${1}_v ON $1 USING $AM (v, g)$o"
}

# writer TABLE G0 LOGFILE: endless 50-row transactions; "committed TABLE A B" after each COMMIT
writer() {
    local t=$1 g=$2 log=$3
    {
        while :; do
            printf 'BEGIN;\nINSERT INTO %s SELECT g, %s, (g %% 1000)::text, repeat(%s, (g %% 40)::int) FROM generate_series(%d, %d) g;\nCOMMIT;\n\\echo committed %s %d %d\n' \
                "$t" "$IDEXPR" "'x'" "$g" $((g + 49)) "$t" "$g" $((g + 49))
            g=$((g + 50))
        done
    } | cluster_psql "$DIR" "$DB" >"$log" 2>&1
}
WRITERS=()
start_writers() {  # TABLE N BASE
    local t=$1 n=$2 base=$3 i
    WRITERS=()
    for ((i = 0; i < n; i++)); do
        writer "$t" $((base + i * 10000000)) "$LOGS/$t.$base.$i.log" &
        WRITERS+=($!)
        ph_bg_add $!
        disown $!
    done
}
stop_writers() {   # after a crash they die by themselves; make sure
    local p i
    for ((i = 0; i < 100; i++)); do
        local alive=0
        for p in "${WRITERS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for p in "${WRITERS[@]}"; do ph_kill_tree "$p"; done
    WRITERS=()
}

# check TABLE: every committed row is reachable through both indexes, index == seqscan,
# no duplicate id, verify() passes
check() {
    local t=$1 f sql missing dup plan
    {
        echo "SET client_min_messages = warning; BEGIN;"
        echo "DROP TABLE IF EXISTS committed_$t; CREATE TABLE committed_$t (g int8);"
        echo "CREATE TEMP TABLE ranges (a int8, b int8); COPY ranges FROM STDIN;"
        cat "$LOGS"/"$t".*.log 2>/dev/null | awk -v t="$t" '$1 == "committed" && $2 == t { printf "%s\t%s\n", $3, $4 }'
        echo '\.'
        echo "INSERT INTO committed_$t SELECT generate_series(a, b) FROM ranges;"
        echo "COMMIT; ANALYZE committed_$t;"
    } | cluster_psql "$DIR" "$DB" >/dev/null
    local n
    n=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM committed_$t")
    say "  $t: $n committed rows logged, $(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM $t") rows in the heap"
    local force=("SET enable_seqscan=off" "SET enable_bitmapscan=off" "SET enable_hashjoin=off"
                 "SET enable_mergejoin=off" "SET enable_material=off" "SET enable_memoize=off")
    # Point probes (nested loop, one index descent per row) for up to 50000
    # committed rows; all committed rows are checked against the heap below,
    # and the full index scans of ph_index_vs_seq cover the whole heap.
    cluster_sql "$DIR" "$DB" "DROP TABLE IF EXISTS probe_$t" \
        "CREATE TABLE probe_$t AS SELECT g FROM committed_$t ORDER BY random() LIMIT 50000" "ANALYZE probe_$t" >/dev/null
    # through the unique index
    sql="SELECT count(*) FROM probe_$t c WHERE NOT EXISTS (SELECT 1 FROM $t x WHERE x.id = (c.g * 2654435761) % 4294967296)"
    plan=$(cluster_sql "$DIR" "$DB" "${force[@]}" "EXPLAIN (COSTS OFF) $sql")
    grep -Eq "using ${t}_id( |$)" <<<"$plan" || { fail "$t: probe plan does not use ${t}_id:"; echo "$plan" >&2; }
    missing=$(cluster_sql "$DIR" "$DB" "${force[@]}" "$sql")
    [[ $missing == 0 ]] || fail "$t: $missing committed rows NOT found through ${t}_id"
    # through the non-unique index
    sql="SELECT count(*) FROM probe_$t c WHERE NOT EXISTS (SELECT 1 FROM $t x WHERE x.v = (c.g % 1000)::text AND x.g = c.g)"
    plan=$(cluster_sql "$DIR" "$DB" "${force[@]}" "EXPLAIN (COSTS OFF) $sql")
    grep -Eq "using ${t}_v( |$)" <<<"$plan" || { fail "$t: probe plan does not use ${t}_v:"; echo "$plan" >&2; }
    missing=$(cluster_sql "$DIR" "$DB" "${force[@]}" "$sql")
    [[ $missing == 0 ]] || fail "$t: $missing committed rows NOT found through ${t}_v"
    # in the heap at all (seqscan)?
    missing=$(cluster_sql "$DIR" "$DB" "SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off" \
        "SELECT count(*) FROM committed_$t c WHERE NOT EXISTS (SELECT 1 FROM $t x WHERE x.g = c.g)")
    [[ $missing == 0 ]] || fail "$t: $missing committed rows missing from the heap (seqscan)"
    dup=$(cluster_sql "$DIR" "$DB" "SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off" \
        "SELECT count(*) FROM (SELECT id FROM $t GROUP BY id HAVING count(*) > 1) d")
    [[ $dup == 0 ]] || fail "$t: $dup duplicated ids under the UNIQUE index"
    ph_index_vs_seq "$DIR" "$DB" "$t" "${t}_id" "id >= 0" || fail "$t: ${t}_id disagrees with seqscan"
    ph_index_vs_seq "$DIR" "$DB" "$t" "${t}_v" "v >= ''" || fail "$t: ${t}_v disagrees with seqscan"
    ph_verify "$DIR" "$DB" "${t}_id" || fail "$t: verify(${t}_id)"
    ph_verify "$DIR" "$DB" "${t}_v" || fail "$t: verify(${t}_v)"
}

crash_and_restart() {
    cluster_kill9 "$DIR"
    say "  killed -9 (postmaster and children)"
    stop_writers
    cluster_start "$DIR"
    cluster_wait_ready "$DIR"
    say "  restarted after crash recovery"
}

# ----------------------------------------------------------- phase 1 --
say "== phase 1: kill -9 during inserts (am=$AM)"
mk_table ci
mk_indexes ci
start_writers ci 3 1
sleep $((3 + RANDOM % 4))
n=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM ci")
((n > 0)) || fail "writers inserted nothing before the crash (see $LOGS)"
crash_and_restart
check ci
say "  inserting again after recovery"
start_writers ci 3 500000001
sleep 2
for p in "${WRITERS[@]}"; do ph_kill_tree "$p"; done
stop_writers
cluster_sql "$DIR" "$DB" "SELECT pg_hybrid.merge('ci_id'::regclass)" "SELECT pg_hybrid.merge('ci_v'::regclass)" >/dev/null
check ci

# ----------------------------------------------------------- phase 2 --
say "== phase 2: kill -9 during pg_hybrid.merge() ($merge_iters x, $big_rows rows)"
mk_table cm
cluster_sql "$DIR" "$DB" \
    "INSERT INTO cm SELECT g, $IDEXPR, (g % 1000)::text, repeat('x', (g % 40)::int) FROM generate_series(1, $big_rows) g"
echo "committed cm 1 $big_rows" >"$LOGS/cm.base.log"
mk_indexes cm
delays=(0.05 0.15 0.02)   # a 1M-entry merge took ~0.2 s here; the kill must land inside it
next_base=100000001
for ((it = 0; it < merge_iters; it++)); do
    d=${delays[it % 3]}
    # grow the dynamic stage (about 1/20 of the static stage, below the default merge_ratio)
    add=$((big_rows / 20))
    cluster_sql "$DIR" "$DB" \
        "INSERT INTO cm SELECT g, $IDEXPR, (g % 1000)::text, 'y' FROM generate_series($next_base, $((next_base + add - 1))) g"
    echo "committed cm $next_base $((next_base + add - 1))" >"$LOGS/cm.grow$it.log"
    next_base=$((next_base + add))
    cluster_sql "$DIR" "$DB" "SELECT * FROM pg_hybrid.index_stats('cm_id'::regclass)" | sed 's/^/  index_stats(cm_id) before merge: /'
    start_writers cm 1 $((200000001 + it * 1000000))
    (cluster_sql "$DIR" "$DB" "SELECT pg_hybrid.merge('cm_id'::regclass)" "SELECT pg_hybrid.merge('cm_v'::regclass)" \
        >"$LOGS/merge$it.out" 2>&1 && echo "merge done" >>"$LOGS/merge$it.out") &
    mpid=$!
    ph_bg_add $mpid
    seen=0
    for ((i = 0; i < 500; i++)); do
        a=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_hybrid.merge(%'" 2>/dev/null || echo 0)
        if [[ $a != 0 ]]; then seen=1; break; fi
        grep -q "merge done" "$LOGS/merge$it.out" 2>/dev/null && break
        sleep 0.02
    done
    sleep "$d"
    if grep -q "merge done" "$LOGS/merge$it.out" 2>/dev/null || ! kill -0 $mpid 2>/dev/null; then
        say "  WARNING: iteration $it: the merge finished before the kill (after ${d}s); this crash hit no merge in progress"
    elif ((seen)); then
        say "  iteration $it: killing while the merge is active (${d}s after it started)"
    fi
    crash_and_restart
    wait $mpid 2>/dev/null || true
    check cm
    say "  merging the recovered index to completion"
    cluster_sql "$DIR" "$DB" "SELECT pg_hybrid.merge('cm_id'::regclass)" "SELECT pg_hybrid.merge('cm_v'::regclass)" >/dev/null ||
        fail "merge after recovery failed"
    check cm
done

# ----------------------------------------------------------- phase 3 --
# VACUUM after deleting 80% of a big table rewrites most leaves (elastic_btree:
# compact leaves revert to standard ones as the index falls under its bound,
# leaves merge); kill -9 while it runs.  Expected rows are known exactly.
say "== phase 3: kill -9 during VACUUM after deleting 80% of $big_rows rows"
mk_table cx
cluster_sql "$DIR" "$DB" \
    "INSERT INTO cx SELECT g, $IDEXPR, (g % 1000)::text, repeat('x', (g % 40)::int) FROM generate_series(1, $big_rows) g"
# elastic_btree: a bound the full table exceeds (shrinking, compact leaves) and
# the remaining fifth fits in (after the VACUUM: expanding, leaves revert)
cx_opts=$opts
[[ $AM == elastic_btree && -n ${PH_SIZE_BOUND:-} ]] && cx_opts=" WITH (size_bound = '$((big_rows * 12 / 1024))kB')"
mk_indexes cx "$cx_opts"
cluster_sql "$DIR" "$DB" "SELECT pg_hybrid.merge('cx_id'::regclass)" "SELECT pg_hybrid.merge('cx_v'::regclass)" >/dev/null
cluster_sql "$DIR" "$DB" "DELETE FROM cx WHERE g % 5 <> 0" >/dev/null
[[ $AM == elastic_btree ]] && say "  cx_id before VACUUM: $(cluster_sql "$DIR" "$DB" "SELECT state || ', ' || standard_leaves || ' standard / ' || compact_leaves || ' compact' FROM pg_hybrid.index_stats('cx_id'::regclass)")"
(cluster_sql "$DIR" "$DB" "VACUUM cx" >"$LOGS/vacuum.out" 2>&1 && echo "vacuum done" >>"$LOGS/vacuum.out") &
vpid=$!
ph_bg_add $vpid
for ((i = 0; i < 500; i++)); do
    a=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM pg_stat_progress_vacuum p JOIN pg_class c ON c.oid = p.relid WHERE c.relname = 'cx' AND p.phase IN ('vacuuming indexes', 'vacuuming heap', 'cleaning up indexes')" 2>/dev/null || echo 0)
    [[ $a != 0 ]] && break
    grep -q "vacuum done" "$LOGS/vacuum.out" 2>/dev/null && break
    sleep 0.02
done
if grep -q "vacuum done" "$LOGS/vacuum.out" 2>/dev/null || ! kill -0 $vpid 2>/dev/null; then
    say "  WARNING: the VACUUM finished before the kill; this crash hit no VACUUM in progress"
else
    say "  killing while VACUUM is in its index phase"
fi
crash_and_restart
wait $vpid 2>/dev/null || true
check_cx() {
    local n missing
    n=$(cluster_sql "$DIR" "$DB" "SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off" "SELECT count(*) FROM cx")
    [[ $n == $((big_rows / 5)) ]] || fail "cx: $n rows in the heap, expected $((big_rows / 5))"
    missing=$(cluster_sql "$DIR" "$DB" "SET enable_seqscan=off" "SET enable_bitmapscan=off" "SET enable_hashjoin=off" \
        "SET enable_mergejoin=off" "SET enable_material=off" "SET enable_memoize=off" \
        "SELECT count(*) FROM generate_series(5, $big_rows, 5) g WHERE NOT EXISTS (SELECT 1 FROM cx WHERE id = (g * 2654435761) % 4294967296)")
    [[ $missing == 0 ]] || fail "cx: $missing live rows NOT found through cx_id"
    ph_index_vs_seq "$DIR" "$DB" cx cx_id "id >= 0" || fail "cx: cx_id disagrees with seqscan"
    ph_index_vs_seq "$DIR" "$DB" cx cx_v "v >= ''" || fail "cx: cx_v disagrees with seqscan"
    ph_index_vs_seq "$DIR" "$DB" cx cx_id "id BETWEEN 1000000000 AND 3000000000" || fail "cx: cx_id range disagrees with seqscan"
    ph_verify "$DIR" "$DB" cx_id || fail "cx: verify(cx_id)"
    ph_verify "$DIR" "$DB" cx_v || fail "cx: verify(cx_v)"
}
check_cx
say "  VACUUM again to completion, then merge"
cluster_sql "$DIR" "$DB" "VACUUM cx" "SELECT pg_hybrid.merge('cx_id'::regclass)" "SELECT pg_hybrid.merge('cx_v'::regclass)" >/dev/null ||
    fail "VACUUM / merge after the crash failed"
check_cx
[[ $AM == elastic_btree ]] && say "  cx_id after: $(cluster_sql "$DIR" "$DB" "SELECT state || ', ' || standard_leaves || ' standard / ' || compact_leaves || ' compact' FROM pg_hybrid.index_stats('cx_id'::regclass)")"

# ----------------------------------------------------------- phase 4 --
# A tiered index (tiered_btree, tiered_hash): killed while readers promote
# records and inserters push the hot tier past its bound, so promotions
# and CLOCK sweeps are under way. The hot tier's clean copies and markers
# live in shared memory only: after the restart it holds the dirty entries
# the delta log replays, and use brings the records back.
if [[ $AM == tiered_btree || $AM == tiered_hash ]]; then
    say "== phase 4: kill -9 during promotions and CLOCK sweeps ($AM, 64kB hot tiers)"
    mk_table ch
    mk_indexes ch " WITH (hot_size = '64kB', sample_rate = 1)"
    cluster_sql "$DIR" "$DB" "INSERT INTO ch SELECT g, $IDEXPR, (g % 1000)::text, 'x' FROM generate_series(1, 20000) g" >/dev/null
    # readers: nested-loop probes of a skewed set of committed keys
    reader() {
        while :; do
            printf 'SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
'
            printf 'SELECT count(*) FROM generate_series(1, 4000) s, LATERAL (SELECT 1 FROM ch WHERE id = (((s * s) %% 20000 + 1) * 2654435761) %% 4294967296) x;
'
        done | cluster_psql "$DIR" "$DB" >/dev/null 2>&1
    }
    start_writers ch 2 100001
    for i in 1 2; do
        reader &
        WRITERS+=($!)
        ph_bg_add $!
        disown $!
    done
    for ((i = 0; i < 50; i++)); do
        sleep 0.2
        p=$(cluster_sql "$DIR" "$DB" "SELECT promotions > 0 AND evictions > 0 FROM pg_hybrid.index_stats('ch_id'::regclass)" 2>/dev/null || echo f)
        [[ $p == t ]] && break
    done
    [[ $p == t ]] || fail "ch_id saw no promotion and eviction before the kill"
    say "  ch_id before the kill: $(cluster_sql "$DIR" "$DB" "SELECT 'promotions ' || promotions || ', evictions ' || evictions || ', sweeps ' || sweeps || ', hot records ' || hot_records FROM pg_hybrid.index_stats('ch_id'::regclass)")"
    sleep 1
    crash_and_restart
    hot=$(cluster_sql "$DIR" "$DB" "SELECT hot_records FROM pg_hybrid.index_stats('ch_id'::regclass)")
    [[ $hot == 0 ]] || fail "ch_id: $hot hot records after a restart (markers live in shared memory only)"
    check ch
    say "  reading again: records come back"
    cluster_sql "$DIR" "$DB" "SET enable_seqscan = off" "SET enable_bitmapscan = off" "SET enable_hashjoin = off" "SET enable_mergejoin = off"         "SELECT count(*) FROM generate_series(1, 4000) s, LATERAL (SELECT 1 FROM ch WHERE id = (((s * s) % 20000 + 1) * 2654435761) % 4294967296) x" >/dev/null
    hot=$(cluster_sql "$DIR" "$DB" "SELECT hot_records FROM pg_hybrid.index_stats('ch_id'::regclass)")
    ((hot > 0)) || fail "ch_id: no record promoted after the restart"
    check ch
fi

# elastic_btree under a bound: the crashes above must have hit compact leaves
if [[ $AM == elastic_btree && -n ${PH_SIZE_BOUND:-} ]]; then
    for idx in ci_id ci_v cm_id cm_v; do
        say "  $idx: $(cluster_sql "$DIR" "$DB" "SELECT 'state ' || state || ', ' || standard_leaves || ' standard / ' || compact_leaves || ' compact leaves, size_bound ' || size_bound FROM pg_hybrid.index_stats('$idx'::regclass)")"
    done
    [[ $(cluster_sql "$DIR" "$DB" "SELECT compact_leaves > 0 FROM pg_hybrid.index_stats('cm_id'::regclass)") == t ]] ||
        fail "cm_id has no compact leaf under size_bound $PH_SIZE_BOUND: the merge crashes did not exercise compact leaves"
fi

if ((failures)); then
    echo "crash: FAIL ($failures problems; cluster log $DIR/postgres.log)"
    exit 1
fi
echo "crash: PASS"
