#!/usr/bin/env bash
# tests/hasis.sh [--quick] [--only T[,T...]] [--accept] — the hasis table AM beyond pg_regress.
#
# Sub-tests, in this order; each prints "hasis/NAME: PASS|FAIL (N s)", each
# on its own scratch cluster (port $PH_PORT; the standby also $PH_PORT+1),
# stopped when it ends:
#   differential  tests/hasis_differential.py for 60 s (10 s with --quick):
#                 a hasis table and its heap twin get the same random DML in
#                 the same transactions; contents and forced index / bitmap /
#                 TID / parallel scans are compared with the heap twin.
#   pgbench       TPC-B on hasis tables: `pgbench -i -I dtgvp` with
#                 default_table_access_method = hasis (all four tables hasis,
#                 btree primary keys), 8 clients for 20 s (5 s); no failed
#                 transaction; sum(abalance) = sum(bbalance) = sum(tbalance)
#                 = sum(delta), and per account / teller / branch the balance
#                 equals its history; history rows = committed transactions;
#                 index scans agree with seq scans; verify_table() passes; a
#                 bitmap scan with work_mem = 64kB (lossy pages at scale 4)
#                 agrees with a seq scan.
#   crash         8 pgbench clients run inserts, multi-row updates, key moves,
#                 deletes, TOAST values and savepoints, each REPEATABLE READ
#                 transaction on a hasis table (btree, hybrid_btree and hash
#                 indexes) and on its heap twin (serialization failures are
#                 retried), with CHECKPOINT / VACUUM (/ VACUUM FULL) beside
#                 them; the postmaster and its children are killed with
#                 SIGKILL mid-run, the cluster restarts (crash recovery), and
#                 the two tables must be identical, without duplicate keys,
#                 every index agreeing with a seq scan, pg_hybrid.verify_table()
#                 passing.  3 crashes (1 with --quick); then a clean run on the
#                 recovered tables with readers checking, under one snapshot,
#                 that seq, index and bitmap scans of the hasis table and the
#                 heap twin give the same count and sum, and the same checks.
#   standby       a streaming hot standby (pg_basebackup -R before the tables
#                 exist: everything arrives by WAL replay): bulk load, updates
#                 (also of keys), deletes, rollbacks, savepoints, TOAST,
#                 TRUNCATE (and one rolled back), VACUUM FULL, CLUSTER,
#                 VACUUM / ANALYZE; after each stage seq / index / bitmap
#                 (also lossy, work_mem = 64kB) / index-only / count+sum
#                 queries give the same answers on the primary and on the
#                 standby, and the heap twin's answers; verify_table() passes
#                 on the standby; standby reads under one snapshot during
#                 primary DML agree; kill -9 and restart of the standby, then
#                 promotion and writes on it.
#   isolation     pg_isolation_regress over tests/isolation/specs/hasis_*.spec
#                 (EvalPlanQual, UPDATE vs DELETE, SKIP LOCKED / NOWAIT,
#                 REPEATABLE READ conflicts, SERIALIZABLE write skew, an old
#                 snapshot across VACUUM's compactions): each
#                 spec runs with its tables USING heap (the oracle: must give
#                 tests/isolation/expected/NAME.out) and as written (USING
#                 hasis: must give the same).  --accept writes heap's outputs
#                 into tests/isolation/expected/ (review the diff).
# pg_hybrid.verify_table() / table_stats() are used when the installed build
# has them.  A sub-test during which pg_hybrid.so was replaced says so.
# Options: --quick (shorter forms), --only (run only these sub-tests),
#   --accept (isolation: accept heap's outputs).
# Environment: PH_SEED (differential seed, default 1), PH_HASIS_DIFF_TIME
#   (seconds), PH_ISOLATION_TIMEOUT, and the PH_* settings of scripts/lib.sh.
# Exit status: 0 if every sub-test passed, 1 otherwise, 77 (skipped) in
# stand-in mode or when the installed extension has no hasis.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ALL_SUBTESTS=(differential pgbench crash standby isolation)
quick=0
accept=0
only=()
while (($#)); do
    case $1 in
        --quick) quick=1 ;;
        --accept) accept=1 ;;
        --only) shift; IFS=, read -r -a x <<<"${1:?--only needs a sub-test}"; only+=("${x[@]}") ;;
        --only=*) IFS=, read -r -a x <<<"${1#*=}"; only+=("${x[@]}") ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "hasis.sh: unknown option $1" ;;
    esac
    shift
done
for s in "${only[@]}"; do
    [[ " ${ALL_SUBTESTS[*]} " == *" $s "* ]] || ph_die "hasis.sh: unknown sub-test '$s' (${ALL_SUBTESTS[*]})"
done

if [[ $PH_STANDIN == 1 ]]; then
    echo "SKIP: stand-in mode (PH_AM=btree): hasis needs the pg_hybrid extension"
    exit 77
fi
hasis_installed() {
    local f
    for f in "$("$PH_PG_CONFIG" --sharedir)"/extension/pg_hybrid--*.sql; do
        [[ -f $f ]] && grep -q 'CREATE ACCESS METHOD hasis' "$f" && return 0
    done
    return 1
}
if ! hasis_installed; then
    echo "SKIP: the installed pg_hybrid has no hasis table access method"
    exit 77
fi
ph_require_pg

say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
SEQ=("SET enable_indexscan = off" "SET enable_bitmapscan = off" "SET enable_indexonlyscan = off")

# twin_diff DIR DB H X: number of rows in one table and not the other (seq scans)
twin_diff() {
    local dir=$1 db=$2 h=$3 x=$4
    cluster_sql "$dir" "$db" "${SEQ[@]}" \
        "SELECT count(*) FROM ((TABLE $h EXCEPT ALL TABLE $x) UNION ALL (TABLE $x EXCEPT ALL TABLE $h)) d"
}

# show_twin_diff DIR DB H X: print up to 10 rows of each table that the other lacks
show_twin_diff() {
    local dir=$1 db=$2 h=$3 x=$4
    cluster_sql "$dir" "$db" "${SEQ[@]}" \
        "(SELECT 'only in $h', * FROM (TABLE $h EXCEPT ALL TABLE $x) a LIMIT 10) UNION ALL (SELECT 'only in $x', * FROM (TABLE $x EXCEPT ALL TABLE $h) b LIMIT 10)" |
        cut -c1-200 | sed 's/^/    /' >&2 || true
}

# hash_vs_seq DIR DB TABLE COL INDEX: every value of COL (hash index INDEX) is
# found through the index (plain index scan and bitmap scan, forced) as often
# as a seq scan finds it
hash_vs_seq() {
    local dir=$1 db=$2 t=$3 col=$4 idx=$5 mode sets plan bad q truth
    truth="SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
           CREATE TEMP TABLE hv AS SELECT $col AS v, count(*) AS n FROM $t WHERE $col IS NOT NULL GROUP BY 1; RESET ALL;"
    q="SELECT count(*) FROM hv WHERE n <> (SELECT count(*) FROM $t WHERE $col = hv.v)"
    for mode in index bitmap; do
        sets="SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_memoize = off;"
        if [[ $mode == index ]]; then sets+=" SET enable_bitmapscan = off;"; else sets+=" SET enable_indexscan = off;"; fi
        plan=$(cluster_psql "$dir" "$db" -At -c "$truth" -c "$sets EXPLAIN (COSTS OFF) $q")
        if ! grep -Eq "(using|on) $idx( |\$)" <<<"$plan"; then
            echo "  $t/$idx [$mode]: the plan does not use $idx:" >&2
            sed 's/^/      /' <<<"$plan" >&2
            return 1
        fi
        bad=$(cluster_psql "$dir" "$db" -At -c "$truth" -c "$sets $q")
        if [[ $bad != 0 ]]; then
            echo "  $t/$idx [$mode]: $bad values of $col are found a different number of times through $idx than by a seq scan" >&2
            return 1
        fi
    done
    echo "  $t/$idx: every value of $col found through the hash index as often as by a seq scan"
}

# verify_table DIR DB TABLE: pg_hybrid.verify_table() (every hybrid page, and
# every index entry pointing at a version), when the installed build has it
verify_table() {
    local dir=$1 db=$2 t=$3 out
    [[ $(cluster_sql "$dir" "$db" "SELECT to_regproc('pg_hybrid.verify_table') IS NOT NULL") == t ]] || return 0
    if out=$(cluster_sql "$dir" "$db" "SELECT pg_hybrid.verify_table('$t'::regclass)" 2>&1); then
        echo "  verify_table($t): ok ($out versions)"
    else
        echo "  verify_table($t): $out" >&2
        return 1
    fi
}

# table_stats DIR DB TABLE: one line from pg_hybrid.table_stats(), when there
table_stats() {
    local dir=$1 db=$2 t=$3
    [[ $(cluster_sql "$dir" "$db" "SELECT to_regproc('pg_hybrid.table_stats') IS NOT NULL") == t ]] || return 0
    cluster_sql "$dir" "$db" "SELECT format('%s extents, %s compactions, %s rows in column parts, %s in delta parts, %s dead slots', extents, page_versions - extents, column_rows, delta_versions, dead_slots) FROM pg_hybrid.table_stats('$t'::regclass)" 2>&1 || true
}

# run_q DIR DB SETTINGS SQL: the query's output (or its error), never fails
run_q() { cluster_psql "$1" "$2" -At -c "$3 $4" 2>&1 || true; }

# ================================================================ differential
sub_differential() {
    local dir db=hasis_differential t=${PH_HASIS_DIFF_TIME:-60}
    ((quick)) && t=${PH_HASIS_DIFF_TIME:-10}
    dir=$(ph_scratch hasis_differential)
    cluster_init "$dir" "$PH_PORT" "autovacuum = off"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    PH_PGHOST=$dir/sock PH_PGPORT=$PH_PORT PH_DB=$db PH_OUTDIR=$dir \
        python3 "$PH_REPO/tests/hasis_differential.py" --seed "${PH_SEED:-1}" --time "$t"
}

# ===================================================================== pgbench
sub_pgbench() {
    local dir db=hasis_pgbench scale=4 secs=20 w rc ams nfailed processed sums hist bad
    ((quick)) && { scale=2; secs=5; }
    failures=0
    dir=$(ph_scratch hasis_pgbench)
    cluster_init "$dir" "$PH_PORT" "deadlock_timeout = '100ms'"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    w=$dir/pgbench
    mkdir -p "$w"
    chown "$PH_USER:" "$w"
    local conn=(-h "$dir/sock" -p "$PH_PORT" -U "$PH_USER")
    say "pgbench -i -I dtgvp -s $scale with default_table_access_method = hasis"
    if ! ph_as_user env PGOPTIONS="-c default_table_access_method=hasis -c client_min_messages=warning" \
            "$PH_PGBIN/pgbench" "${conn[@]}" -i -I dtgvp -s "$scale" -q "$db" >"$w/init.out" 2>&1; then
        cat "$w/init.out" >&2
        fail "pgbench -i on hasis tables failed"
        return 1
    fi
    ams=$(cluster_sql "$dir" "$db" "SELECT string_agg(c.relname || '=' || a.amname, ' ' ORDER BY c.relname) FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname LIKE 'pgbench\\_%' AND c.relkind = 'r'")
    say "  tables: $ams"
    [[ $ams == "pgbench_accounts=hasis pgbench_branches=hasis pgbench_history=hasis pgbench_tellers=hasis" ]] ||
        fail "the pgbench tables are not all hasis: $ams"
    say "TPC-B: 8 clients, ${secs} s"
    set +e
    ph_as_user "$PH_PGBIN/pgbench" "${conn[@]}" -c 8 -j 8 -T "$secs" -M prepared -P 5 "$db" \
        >"$w/pgbench.out" 2>"$w/pgbench.err"
    rc=$?
    set -e
    ph_pgbench_summary "$w" "$rc" || fail "pgbench reported errors (exit $rc)"
    nfailed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$w/pgbench.out")
    processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$w/pgbench.out")
    [[ $nfailed == 0 ]] || fail "pgbench: '${nfailed:-no}' failed transactions (expected 0)"
    [[ -n $processed && $processed -gt 0 ]] || fail "pgbench processed no transaction"
    sums=$(cluster_sql "$dir" "$db" "${SEQ[@]}" \
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(bbalance) FROM pgbench_branches) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || (SELECT coalesce(sum(delta), 0) FROM pgbench_history)")
    say "  sum(abalance) sum(bbalance) sum(tbalance) sum(delta): $sums"
    read -r -a s <<<"$sums"
    [[ ${#s[@]} == 4 && ${s[0]} == "${s[1]}" && ${s[1]} == "${s[2]}" && ${s[2]} == "${s[3]}" ]] ||
        fail "the balances do not add up: $sums"
    hist=$(cluster_sql "$dir" "$db" "SELECT count(*) FROM pgbench_history")
    say "  $hist history rows, pgbench counted $processed committed transactions"
    [[ $hist == "$processed" ]] || fail "pgbench_history has $hist rows, pgbench committed $processed transactions"
    # every balance equals its history
    bad=$(cluster_sql "$dir" "$db" "${SEQ[@]}" \
        "SELECT (SELECT count(*) FROM pgbench_accounts a LEFT JOIN (SELECT aid, sum(delta) d FROM pgbench_history GROUP BY aid) h USING (aid) WHERE a.abalance <> coalesce(h.d, 0))
              + (SELECT count(*) FROM pgbench_tellers t LEFT JOIN (SELECT tid, sum(delta) d FROM pgbench_history GROUP BY tid) h USING (tid) WHERE t.tbalance <> coalesce(h.d, 0))
              + (SELECT count(*) FROM pgbench_branches b LEFT JOIN (SELECT bid, sum(delta) d FROM pgbench_history GROUP BY bid) h USING (bid) WHERE b.bbalance <> coalesce(h.d, 0))")
    [[ $bad == 0 ]] || fail "$bad accounts / tellers / branches whose balance differs from their history"
    local n
    n=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "SELECT count(*) || ' ' || count(DISTINCT aid) FROM pgbench_accounts")
    [[ $n == "$((scale * 100000)) $((scale * 100000))" ]] || fail "pgbench_accounts: count, distinct aid = $n (expected $((scale * 100000)) each)"
    ph_index_vs_seq "$dir" "$db" pgbench_accounts pgbench_accounts_pkey "aid > 0" || fail "pgbench_accounts_pkey disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" pgbench_tellers pgbench_tellers_pkey "tid > 0" || fail "pgbench_tellers_pkey disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" pgbench_branches pgbench_branches_pkey "bid > 0" || fail "pgbench_branches_pkey disagrees with a seq scan"
    local t
    for t in pgbench_accounts pgbench_branches pgbench_tellers pgbench_history; do
        verify_table "$dir" "$db" $t || fail "verify_table($t) failed"
    done
    say "  pgbench_accounts: $(table_stats "$dir" "$db" pgbench_accounts)"
    # a bitmap scan over every account with work_mem = 64kB: lossy pages
    # (whole TID blocks) once the bitmap has more than ~1000 pages (scale 4)
    local lossy=(-c "SET enable_seqscan = off" -c "SET enable_indexscan = off" -c "SET work_mem = '64kB'"
                 -c "SET max_parallel_workers_per_gather = 0")
    local lq="SELECT count(*), sum(abalance), sum(bid) FROM pgbench_accounts WHERE aid > 0"
    local explain lres sres
    explain=$(cluster_psql "$dir" "$db" -At "${lossy[@]}" -c "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) $lq")
    lres=$(cluster_psql "$dir" "$db" -At "${lossy[@]}" -c "$lq")
    sres=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "$lq")
    grep -q "Bitmap Index Scan on pgbench_accounts_pkey" <<<"$explain" || { fail "the lossy query is not a bitmap scan"; echo "$explain" >&2; }
    [[ $lres == "$sres" ]] || fail "bitmap scan with work_mem = 64kB gives '$lres', a seq scan '$sres'"
    say "  bitmap scan, work_mem = 64kB: $(grep -o 'Heap Blocks:.*' <<<"$explain"); count, sums agree with a seq scan: $lres"
    if ! grep -q 'lossy=[1-9]' <<<"$explain"; then
        if ((quick)); then
            say "  note: no lossy page at scale $scale (--quick); the full run (scale 4) checks lossy pages"
        else
            fail "no lossy page in the work_mem = 64kB bitmap scan: lossy pages were not tested"
        fi
    fi
    ((failures == 0))
}

# ======================================================================= crash
sub_crash() {
    local dir db=hasis_crash iters=3 w it rows=20000
    ((quick)) && iters=1
    failures=0
    dir=$(ph_scratch hasis_crash)
    cluster_init "$dir" "$PH_PORT" "deadlock_timeout = '100ms'" "autovacuum = off"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    w=$dir/work
    mkdir -p "$w"
    chown "$PH_USER:" "$w"
    cluster_sql "$dir" "$db" \
        "CREATE TABLE ch (k int NOT NULL, v int NOT NULL, t text, pad text) USING hasis" \
        "CREATE TABLE cx (k int NOT NULL, v int NOT NULL, t text, pad text) USING heap" \
        "INSERT INTO ch SELECT g, g % 1000, 't' || (g % 97), repeat('p', g % 50) FROM generate_series(1, $rows) g" \
        "INSERT INTO cx SELECT g, g % 1000, 't' || (g % 97), repeat('p', g % 50) FROM generate_series(1, $rows) g" \
        "CREATE UNIQUE INDEX ch_k ON ch (k)" "CREATE UNIQUE INDEX cx_k ON cx (k)" \
        "CREATE INDEX ch_v ON ch USING hybrid_btree (v)" "CREATE INDEX ch_t ON ch USING hash (t)" \
        "CREATE SEQUENCE cseq START 1000001" "ANALYZE ch" "ANALYZE cx" >/dev/null
    # each transaction does the same to ch (hasis) and cx (heap), under
    # REPEATABLE READ: under READ COMMITTED each statement takes its own
    # snapshot, so the cx statement could see a row committed after the ch
    # statement began (heap twins diverge that way too); serialization
    # failures are retried (--max-tries)
    cat >"$w/crash.pgb" <<'EOF'
\set k random(1, 20000)
\set k2 random(1000001, 1003000)
\set op random(1, 100)
\set r random(1, 1000000)
BEGIN ISOLATION LEVEL REPEATABLE READ;
\if :op <= 25
SELECT nextval('cseq') AS nk \gset
INSERT INTO ch VALUES (:nk, :r % 1000, 't' || (:r % 97), repeat('i', :r % 300));
INSERT INTO cx VALUES (:nk, :r % 1000, 't' || (:r % 97), repeat('i', :r % 300));
\elif :op <= 30
WITH n AS (INSERT INTO ch SELECT nextval('cseq'), g, 'b' || g, NULL FROM generate_series(1, 20) g RETURNING *) INSERT INTO cx SELECT * FROM n;
\elif :op <= 50
UPDATE ch SET v = v + 1, t = 'u' || (:r % 97) WHERE k BETWEEN :k AND :k + 3;
UPDATE cx SET v = v + 1, t = 'u' || (:r % 97) WHERE k BETWEEN :k AND :k + 3;
\elif :op <= 60
UPDATE ch SET v = v - 1, pad = coalesce(pad, '') || 'x' WHERE k BETWEEN :k2 AND :k2 + 2;
UPDATE cx SET v = v - 1, pad = coalesce(pad, '') || 'x' WHERE k BETWEEN :k2 AND :k2 + 2;
\elif :op <= 70
SELECT nextval('cseq') AS nk \gset
UPDATE ch SET k = :nk WHERE k = :k;
UPDATE cx SET k = :nk WHERE k = :k;
\elif :op <= 82
DELETE FROM ch WHERE k = :k OR k = :k2;
DELETE FROM cx WHERE k = :k OR k = :k2;
\elif :op <= 88
SELECT nextval('cseq') AS nk \gset
INSERT INTO ch VALUES (:nk, -1, 'toast', (SELECT string_agg(md5((:r + g)::text), '') FROM generate_series(1, 120) g));
INSERT INTO cx VALUES (:nk, -1, 'toast', (SELECT string_agg(md5((:r + g)::text), '') FROM generate_series(1, 120) g));
\elif :op <= 94
SAVEPOINT s;
UPDATE ch SET v = -v WHERE k BETWEEN :k AND :k + 5;
DELETE FROM ch WHERE k = :k2;
ROLLBACK TO SAVEPOINT s;
UPDATE ch SET v = v + 1000 WHERE k = :k;
UPDATE cx SET v = v + 1000 WHERE k = :k;
\else
SELECT k FROM ch WHERE k BETWEEN :k AND :k + 2 ORDER BY k FOR UPDATE;
UPDATE ch SET t = 'locked' WHERE k BETWEEN :k AND :k + 2;
UPDATE cx SET t = 'locked' WHERE k BETWEEN :k AND :k + 2;
\endif
COMMIT;
EOF
    # readers (clean run only): one REPEATABLE READ snapshot, ch by seq scan,
    # index scan and bitmap scan, and cx: the same count and sum, else the
    # client fails with an ERROR saying what it saw
    cluster_sql "$dir" "$db" "CREATE FUNCTION reader_mismatch(VARIADIC n bigint[]) RETURNS void LANGUAGE plpgsql AS \$\$
        BEGIN RAISE EXCEPTION 'MISMATCH under one snapshot (count/sum): ch seq %/%, ch index %/%, ch bitmap %/%, cx %/% (k from % and %)',
            n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9], n[10]; END \$\$" >/dev/null
    cat >"$w/reader.pgb" <<'EOF'
\set lo random(1, 20000)
\set lo2 random(1000001, 1003000)
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET LOCAL enable_indexscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT count(*) AS c1, coalesce(sum(v), 0) AS s1 FROM ch WHERE k BETWEEN :lo AND :lo + 3000 OR k BETWEEN :lo2 AND :lo2 + 1000 \gset
SET LOCAL enable_seqscan = off;
SET LOCAL enable_indexscan = on;
SELECT count(*) AS c2, coalesce(sum(v), 0) AS s2 FROM (SELECT v FROM ch WHERE k BETWEEN :lo AND :lo + 3000 UNION ALL SELECT v FROM ch WHERE k BETWEEN :lo2 AND :lo2 + 1000) i \gset
SET LOCAL enable_indexscan = off;
SET LOCAL enable_bitmapscan = on;
SELECT count(*) AS c3, coalesce(sum(v), 0) AS s3 FROM ch WHERE k BETWEEN :lo AND :lo + 3000 OR k BETWEEN :lo2 AND :lo2 + 1000 \gset
SET LOCAL enable_seqscan = on;
SELECT count(*) AS c4, coalesce(sum(v), 0) AS s4 FROM cx WHERE k BETWEEN :lo AND :lo + 3000 OR k BETWEEN :lo2 AND :lo2 + 1000 \gset
\if :c1 != :c2 OR :c1 != :c3 OR :c1 != :c4 OR :s1 != :s2 OR :s1 != :s3 OR :s1 != :s4
SELECT reader_mismatch(:c1, :s1, :c2, :s2, :c3, :s3, :c4, :s4, :lo, :lo2);
\endif
COMMIT;
EOF
    chown "$PH_USER:" "$w/crash.pgb" "$w/reader.pgb"
    local conn=(-h "$dir/sock" -p "$PH_PORT" -U "$PH_USER")

    check_crash() {   # STAGE
        local stage=$1 d n dup
        d=$(twin_diff "$dir" "$db" ch cx)
        n=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "SELECT (SELECT count(*) FROM ch) || ' ' || (SELECT count(*) FROM cx)")
        say "  $stage: rows (hasis, heap): $n; rows in one table only: $d"
        if [[ $d != 0 ]]; then
            fail "$stage: ch (hasis) and cx (heap) differ in $d rows"
            show_twin_diff "$dir" "$db" ch cx
        fi
        dup=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "SELECT count(*) FROM (SELECT k FROM ch GROUP BY k HAVING count(*) > 1) d")
        [[ $dup == 0 ]] || fail "$stage: $dup duplicated keys in ch under its UNIQUE index"
        ph_index_vs_seq "$dir" "$db" ch ch_k "k > 0" || fail "$stage: ch_k (btree) disagrees with a seq scan"
        ph_index_vs_seq "$dir" "$db" ch ch_k "k BETWEEN 5000 AND 1000500" || fail "$stage: ch_k range disagrees with a seq scan"
        ph_index_vs_seq "$dir" "$db" ch ch_v "v > -100000000" || fail "$stage: ch_v (hybrid_btree) disagrees with a seq scan"
        hash_vs_seq "$dir" "$db" ch t ch_t || fail "$stage: ch_t (hash) disagrees with a seq scan"
        verify_table "$dir" "$db" ch || fail "$stage: verify_table(ch) failed"
        say "  ch: $(table_stats "$dir" "$db" ch)"
    }

    # background: CHECKPOINT and VACUUM (VACUUM FULL from the second round) beside the writers
    disturb() {   # ROUND
        local i=0
        while :; do
            cluster_sql "$dir" "$db" "CHECKPOINT" >/dev/null 2>&1 || true
            sleep 0.5
            cluster_sql "$dir" "$db" "VACUUM ch" >/dev/null 2>&1 || true
            if (($1 >= 1 && i % 3 == 1)); then
                cluster_sql "$dir" "$db" "VACUUM FULL ch" >/dev/null 2>&1 || true
            fi
            sleep 0.5
            i=$((i + 1))
        done
    }

    local pb dpid delay
    for ((it = 0; it < iters; it++)); do
        say "crash $((it + 1))/$iters: 8 pgbench clients on ch (hasis) + cx (heap)"
        ph_as_user "$PH_PGBIN/pgbench" "${conn[@]}" -n -f "$w/crash.pgb" -c 8 -j 8 -T 120 --max-tries=20 -P 1 "$db" \
            >"$w/pgbench.$it.out" 2>"$w/pgbench.$it.err" &
        pb=$!
        ph_bg_add $pb
        disturb "$it" &
        dpid=$!
        ph_bg_add $dpid
        disown $dpid
        delay=$((3 + (RANDOM % 4)))
        sleep "$delay"
        if ! kill -0 $pb 2>/dev/null; then
            cat "$w/pgbench.$it.err" >&2
            fail "crash $((it + 1)): pgbench ended before the kill"
        fi
        ph_kill_tree $dpid
        cluster_kill9 "$dir"
        say "  killed -9 after ${delay} s ($(grep '^progress' "$w/pgbench.$it.err" | tail -n1 | cut -d, -f1-2))"
        wait $pb 2>/dev/null || true
        if grep -E 'ERROR' "$w/pgbench.$it.err" | grep -vE 'terminat|connection|server closed|could not receive|no connection' | head -5 >&2; then
            fail "crash $((it + 1)): pgbench clients failed before the kill (see $w/pgbench.$it.err)"
        fi
        cluster_start "$dir"
        cluster_wait_ready "$dir"
        say "  restarted after crash recovery"
        check_crash "after crash $((it + 1))"
    done
    local secs=8
    ((quick)) && secs=4
    say "clean run on the recovered tables with snapshot readers (${secs} s), then VACUUM FULL"
    set +e
    ph_as_user "$PH_PGBIN/pgbench" "${conn[@]}" -n -f "$w/crash.pgb@3" -f "$w/reader.pgb@1" -c 8 -j 8 -T "$secs" \
        --max-tries=20 "$db" >"$w/pgbench.final.out" 2>"$w/pgbench.final.err"
    local rc=$?
    set -e
    grep -E '^(number of (transactions|failed)|tps)' "$w/pgbench.final.out" | sed 's/^/  /' || true
    if ((rc != 0)) || grep -qiE 'aborted|error' "$w/pgbench.final.err"; then
        grep -h 'MISMATCH' "$w/pgbench.final.err" | head -5 >&2 || true
        head -20 "$w/pgbench.final.err" >&2
        fail "pgbench on the recovered tables failed (exit $rc)"
    fi
    check_crash "after a clean run"
    cluster_sql "$dir" "$db" "VACUUM FULL ch" "ANALYZE ch" >/dev/null || fail "VACUUM FULL of the recovered table failed"
    check_crash "after VACUUM FULL"
    ((failures == 0))
}

# ===================================================================== standby
sub_standby() {
    local db=hasis_standby P S SPORT=$((PH_PORT + 1)) N=150000 pid
    ((quick)) && N=50000
    failures=0
    P=$(ph_scratch hasis_standby_primary)
    S=$PH_SCRATCH/hasis_standby_replica
    cluster_init "$P" "$PH_PORT" "autovacuum = off"
    cluster_start "$P"
    ph_prepare_db "$P" "$db"
    say "pg_basebackup -R into $S (port $SPORT)"
    pid=$(ph_cluster_pid "$S")
    [[ -z $pid ]] || ph_die "a cluster is still running in $S (pid $pid), left by an earlier run; not touching it"
    ph_port_check "$SPORT"
    rm -rf "$S"
    mkdir -p "$S/sock"
    chmod 755 "$S" "$S/sock"
    echo "$SPORT" >"$S/port"
    : >"$S/postgres.log"
    chown -R "$PH_USER:" "$S"
    ph_as_user "$PH_PGBIN/pg_basebackup" -h "$P/sock" -p "$PH_PORT" -U "$PH_USER" -D "$S/data" -R -X stream -c fast
    cluster_conf "$S" "" "# ---- standby overrides (tests/hasis.sh) ----" \
        "port = $SPORT" "unix_socket_directories = '$S/sock'" "hot_standby = on" \
        "max_standby_streaming_delay = -1"
    cluster_start "$S"
    cluster_wait_ready "$S"
    [[ $(cluster_sql "$S" "$db" "SELECT pg_is_in_recovery()") == t ]] || ph_die "the standby is not in recovery"

    # queries: "MODE|SQL" with @ for the table; each runs on the primary and on
    # the standby against sh (hasis, MODE's settings) and on the primary
    # against sx (heap twin, seq scan): all three answers must be equal
    local -a Q=(
        "seq|SELECT count(*), sum(k), sum(a), count(t), md5(string_agg(r::text, E'\\n' ORDER BY k)) FROM @ r"
        "index|SELECT * FROM @ WHERE k BETWEEN 1000 AND 1400 ORDER BY k"
        "index|SELECT * FROM @ WHERE k > $((N - 2000)) ORDER BY k DESC"
        "index|SELECT k, a, t FROM @ WHERE k = ANY (ARRAY(SELECT g * 37 FROM generate_series(1, 500) g)) ORDER BY k"
        "index|SELECT k, a FROM @ WHERE a = 77 ORDER BY k"
        "index|SELECT k, t FROM @ WHERE t = 't12' ORDER BY k"
        "bitmap|SELECT count(*), sum(k), sum(a) FROM @ WHERE a BETWEEN 10 AND 200"
        "bitmap|SELECT count(*), sum(k) FROM @ WHERE t IN ('t1', 't2', 'toast', 'u5') OR k < 300"
        "bitmap|SELECT count(*), sum(k), md5(string_agg(r::text, ',' ORDER BY k)) FROM @ r WHERE k < $((N / 2)) AND a < 500"
        "lossy|SELECT count(*), sum(k), sum(a), md5(string_agg(t, ',' ORDER BY k)) FROM @ WHERE k > 0"
        "lossy|SELECT count(*), sum(k) FROM @ WHERE a >= 0 AND a < 900"
        "ios|SELECT count(*), sum(k) FROM @ WHERE k > 100"
        "count|SELECT count(*), sum(a) FROM @ WHERE k BETWEEN $((N / 4)) AND $((N / 2))"
        "count|SELECT count(*) FROM @ WHERE a IS NULL"
    )
    local -A SET=(
        [seq]="SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;"
        [index]="SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;"
        [bitmap]="SET enable_seqscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off;"
        [lossy]="SET enable_seqscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off; SET work_mem = '64kB'; SET max_parallel_workers_per_gather = 0;"
        [ios]="SET enable_seqscan = off; SET enable_bitmapscan = off;"
        [count]="SET enable_seqscan = off; SET enable_bitmapscan = off;"
    )
    local -A PLAN=(
        [seq]="Seq Scan on sh" [index]="Index Scan( Backward)? using sh_" [bitmap]="Bitmap Index Scan on sh_"
        [lossy]="Bitmap Index Scan on sh_" [ios]="Index (Only )?Scan using sh_" [count]="Index (Only )?Scan using sh_"
    )
    local lossy_seen=0
    compare() {   # STAGE
        local stage=$1 i mode sql qh qx a b c plan
        ph_wait_replay "$P" "$S" "$db"
        for i in "${!Q[@]}"; do
            mode=${Q[$i]%%|*}
            sql=${Q[$i]#*|}
            qh=${sql//@/sh}
            qx=${sql//@/sx}
            plan=$(run_q "$S" "$db" "${SET[$mode]}" "EXPLAIN (COSTS OFF) $qh")
            if ! grep -Eq "${PLAN[$mode]}" <<<"$plan"; then
                fail "$stage: query $i ($mode) on the standby does not use the planned scan: $qh"
                sed 's/^/      /' <<<"$plan" >&2
            fi
            a=$(run_q "$P" "$db" "${SET[$mode]}" "$qh" | md5sum)
            b=$(run_q "$S" "$db" "${SET[$mode]}" "$qh" | md5sum)
            c=$(run_q "$P" "$db" "${SET[seq]}" "$qx" | md5sum)
            if [[ $a != "$c" ]]; then
                fail "$stage: query $i ($mode) on the primary: hasis differs from the heap twin: $qh"
                diff <(run_q "$P" "$db" "${SET[$mode]}" "$qh") <(run_q "$P" "$db" "${SET[seq]}" "$qx") | head -10 >&2 || true
            fi
            if [[ $b != "$c" ]]; then
                fail "$stage: query $i ($mode) on the standby differs from the heap twin on the primary: $qh"
                diff <(run_q "$S" "$db" "${SET[$mode]}" "$qh") <(run_q "$P" "$db" "${SET[seq]}" "$qx") | head -10 >&2 || true
            fi
            if [[ $mode == lossy ]] && run_q "$S" "$db" "${SET[$mode]}" "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) $qh" | grep -q 'lossy=[1-9]'; then
                lossy_seen=1
            fi
        done
        verify_table "$S" "$db" sh >/dev/null || fail "$stage: verify_table(sh) on the standby failed"
        # the heap twin replayed too: the standby's hasis table equals it
        local d
        d=$(twin_diff "$S" "$db" sh sx)
        [[ $d == 0 ]] || { fail "$stage: on the standby sh and sx differ in $d rows"; show_twin_diff "$S" "$db" sh sx; }
        say "  $stage: primary, standby and heap twin agree (${#Q[@]} queries, $(cluster_sql "$S" "$db" "SELECT count(*) FROM sh") rows; $(table_stats "$S" "$db" sh))"
    }
    both() {   # SQL...: run on the primary, each on sh and on sx (@) in one transaction
        local s args=()
        for s in "$@"; do args+=(-c "${s//@/sh}; ${s//@/sx}"); done
        cluster_psql "$P" "$db" "${args[@]}" >/dev/null
    }

    say "== workload ($N rows)"
    cluster_sql "$P" "$db" \
        "CREATE TABLE sh (k int NOT NULL, a int, t text, f float8) USING hasis" \
        "CREATE TABLE sx (k int NOT NULL, a int, t text, f float8) USING heap" \
        "CREATE UNIQUE INDEX sh_k ON sh (k)" "CREATE UNIQUE INDEX sx_k ON sx (k)" >/dev/null
    both "INSERT INTO @ SELECT g, CASE WHEN g % 50 = 0 THEN NULL ELSE g % 1000 END, 't' || (g % 333), g / 7.0 FROM generate_series(1, $N) g"
    cluster_sql "$P" "$db" "CREATE INDEX sh_a ON sh USING hybrid_btree (a)" "CREATE INDEX sh_t ON sh USING hash (t)" \
        "ANALYZE sh" "ANALYZE sx" >/dev/null
    compare "bulk load + index builds"

    both "UPDATE @ SET a = a + 1, t = 'u' || (k % 10) WHERE k % 7 = 0" \
        "UPDATE @ SET k = k + $((N * 2)) WHERE k % 11 = 0" \
        "DELETE FROM @ WHERE k % 13 = 0" \
        "INSERT INTO @ SELECT g, g % 1000, 'toast', NULL FROM generate_series($((N * 4)), $((N * 4 + 999))) g"
    cluster_psql "$P" "$db" >/dev/null <<SQL
BEGIN;
UPDATE sh SET a = -1 WHERE k < 5000; UPDATE sx SET a = -1 WHERE k < 5000;
SAVEPOINT s1;
DELETE FROM sh WHERE k < 2000; DELETE FROM sx WHERE k < 2000;
INSERT INTO sh SELECT g, 1, 'sp', 1 FROM generate_series($((N * 5)), $((N * 5 + 500))) g;
INSERT INTO sx SELECT g, 1, 'sp', 1 FROM generate_series($((N * 5)), $((N * 5 + 500))) g;
ROLLBACK TO SAVEPOINT s1;
UPDATE sh SET t = 'after-sp' WHERE k BETWEEN 3000 AND 3100; UPDATE sx SET t = 'after-sp' WHERE k BETWEEN 3000 AND 3100;
COMMIT;
BEGIN;
DELETE FROM sh WHERE k > 1000; DELETE FROM sx WHERE k > 1000;
INSERT INTO sh VALUES (-1, -1, 'rolled back', -1); INSERT INTO sx VALUES (-1, -1, 'rolled back', -1);
ROLLBACK;
UPDATE sh SET t = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 150) g) WHERE k % 997 = 1;
UPDATE sx SET t = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 150) g) WHERE k % 997 = 1;
SQL
    compare "updates, key moves, deletes, savepoints, rollbacks, TOAST"

    say "== standby reads under one snapshot while the primary writes"
    local rounds=20 scans=0 out writer
    ((quick)) && rounds=10
    (
        for ((r = 0; r < rounds; r++)); do
            both "UPDATE @ SET a = a + 1 WHERE k % 50 = $((r % 50))" \
                "INSERT INTO @ SELECT g, g % 1000, 'w', 0 FROM generate_series($((N * 6 + r * 2000)), $((N * 6 + r * 2000 + 1999))) g" \
                "DELETE FROM @ WHERE k % 101 = $((r % 101))"
        done
    ) &
    writer=$!
    ph_bg_add $writer
    while kill -0 $writer 2>/dev/null; do
        if ! out=$(cluster_psql "$S" "$db" -At 2>&1 <<'SQL'
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off;
SELECT count(*) || ' ' || coalesce(sum(a), 0) FROM sh WHERE k > -100;
SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = on;
SELECT count(*) || ' ' || coalesce(sum(a), 0) FROM sh WHERE k > -100;
SET LOCAL enable_seqscan = on; SET LOCAL enable_bitmapscan = off;
SELECT count(*) || ' ' || coalesce(sum(a), 0) FROM sh;
SELECT count(*) || ' ' || coalesce(sum(a), 0) FROM sx;
COMMIT;
SQL
        ); then
            fail "a standby read during primary DML failed: $out"
            break
        fi
        mapfile -t res <<<"$out"
        if [[ ${#res[@]} != 4 || ${res[0]} != "${res[2]}" || ${res[1]} != "${res[2]}" || ${res[2]} != "${res[3]}" ]]; then
            fail "standby reads under one snapshot disagree (index, bitmap, seq, heap twin): ${res[*]}"
            break
        fi
        scans=$((scans + 1))
    done
    wait $writer || fail "the primary's DML during standby reads failed"
    say "  $scans standby snapshots: index, bitmap and seq scans of sh and the heap twin agreed"
    compare "DML under standby reads"

    cluster_psql "$P" "$db" >/dev/null <<SQL
BEGIN; TRUNCATE sh; TRUNCATE sx;
INSERT INTO sh VALUES (1, 1, 'gone', 1); INSERT INTO sx VALUES (1, 1, 'gone', 1);
ROLLBACK;
SQL
    compare "TRUNCATE rolled back"
    cluster_psql "$P" "$db" >/dev/null <<SQL
BEGIN; TRUNCATE sh; TRUNCATE sx;
INSERT INTO sh SELECT g, CASE WHEN g % 40 = 0 THEN NULL ELSE g % 1000 END, 't' || (g % 333), g FROM generate_series(1, $N) g;
INSERT INTO sx SELECT g, CASE WHEN g % 40 = 0 THEN NULL ELSE g % 1000 END, 't' || (g % 333), g FROM generate_series(1, $N) g;
COMMIT;
UPDATE sh SET a = a * 2 WHERE k % 3 = 0; UPDATE sx SET a = a * 2 WHERE k % 3 = 0;
DELETE FROM sh WHERE k % 4 = 0; DELETE FROM sx WHERE k % 4 = 0;
SQL
    compare "TRUNCATE + reload"
    cluster_sql "$P" "$db" "VACUUM FULL sh" "VACUUM FULL sx" >/dev/null
    compare "VACUUM FULL"
    both "UPDATE @ SET k = -k WHERE k % 9 = 0" "DELETE FROM @ WHERE k % 10 = 1"
    cluster_sql "$P" "$db" "CLUSTER sh USING sh_k" "VACUUM sh" "ANALYZE sh" "VACUUM sx" "ANALYZE sx" >/dev/null
    compare "CLUSTER, VACUUM, ANALYZE"

    say "== kill -9 of the standby, restart"
    both "UPDATE @ SET t = 'before standby crash' WHERE k % 100 = 7"
    cluster_kill9 "$S"
    both "UPDATE @ SET t = 'while the standby is down' WHERE k % 100 = 8" "DELETE FROM @ WHERE k % 100 = 9"
    cluster_start "$S"
    cluster_wait_ready "$S"
    compare "standby restarted after kill -9"

    say "== promote the standby and write to it"
    ph_as_user "$PH_PGBIN/pg_ctl" promote -w -D "$S/data" >/dev/null
    [[ $(cluster_sql "$S" "$db" "SELECT pg_is_in_recovery()") == f ]] || fail "the standby did not leave recovery"
    if ! cluster_psql "$S" "$db" -c "UPDATE sh SET a = a + 5 WHERE k % 6 = 1" -c "UPDATE sx SET a = a + 5 WHERE k % 6 = 1" \
            -c "INSERT INTO sh SELECT g, 5, 'promoted', 5 FROM generate_series($((N * 9)), $((N * 9 + 999))) g" \
            -c "INSERT INTO sx SELECT g, 5, 'promoted', 5 FROM generate_series($((N * 9)), $((N * 9 + 999))) g" \
            -c "DELETE FROM sh WHERE k % 6 = 2" -c "DELETE FROM sx WHERE k % 6 = 2" >/dev/null; then
        fail "writes on the promoted standby failed"
    fi
    local d
    d=$(twin_diff "$S" "$db" sh sx)
    [[ $d == 0 ]] || { fail "promoted: sh and sx differ in $d rows"; show_twin_diff "$S" "$db" sh sx; }
    ph_index_vs_seq "$S" "$db" sh sh_k "k > -10000000" || fail "promoted: sh_k disagrees with a seq scan"
    ph_index_vs_seq "$S" "$db" sh sh_a "a >= -1000" || fail "promoted: sh_a disagrees with a seq scan"
    hash_vs_seq "$S" "$db" sh t sh_t || fail "promoted: sh_t disagrees with a seq scan"
    verify_table "$S" "$db" sh || fail "promoted: verify_table(sh) failed"
    if ((lossy_seen)); then
        say "  lossy bitmap pages were seen on the standby (work_mem = 64kB)"
    else
        say "  note: no lossy bitmap page with $N rows (the pgbench sub-test checks lossy pages)"
    fi
    ((failures == 0))
}

# =================================================================== isolation
sub_isolation() {
    local dir db=hasis_isolation src=$PH_REPO/tests/isolation work isoreg names=() f n am rc=0
    isoreg=$("$PH_PG_CONFIG" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress
    [[ -x $isoreg && -x $(dirname "$isoreg")/isolationtester ]] ||
        ph_die "pg_isolation_regress / isolationtester not found (package postgresql-server-dev-15)"
    for f in "$src"/specs/hasis_*.spec; do
        [[ -e $f ]] || continue
        n=$(basename "$f" .spec)
        grep -q 'USING hasis' "$f" || ph_die "$f creates no table USING hasis"
        names+=("$n")
    done
    ((${#names[@]})) || ph_die "no tests/isolation/specs/hasis_*.spec"
    dir=$(ph_scratch hasis_isolation)
    cluster_init "$dir" "$PH_PORT" "autovacuum = off"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    work=$dir/work
    rm -rf "$work"
    for am in heap hasis; do
        mkdir -p "$work/$am/specs" "$work/$am/expected"
        for n in "${names[@]}"; do
            # heap: the oracle, the same spec with its tables USING heap
            if [[ $am == heap ]]; then
                sed 's/USING hasis/USING heap/g' "$src/specs/$n.spec" >"$work/$am/specs/$n.spec"
            else
                cp "$src/specs/$n.spec" "$work/$am/specs/$n.spec"
            fi
            if [[ -f $src/expected/$n.out ]]; then
                cp "$src/expected/$n.out" "$work/$am/expected/$n.out"
            else
                ((accept)) || ph_die "no tests/isolation/expected/$n.out (run tests/hasis.sh --only isolation --accept)"
                : >"$work/$am/expected/$n.out"
            fi
        done
    done
    chown -R "$PH_USER:" "$work"
    for am in heap hasis; do
        say "isolation: ${names[*]} with tables USING $am"
        if ph_as_user env PGISOLATIONTIMEOUT="${PH_ISOLATION_TIMEOUT:-30}" \
            "$isoreg" --inputdir="$work/$am" --outputdir="$work/$am/out" --bindir="$PH_PGBIN" \
            --use-existing --host="$dir/sock" --port="$PH_PORT" --user="$PH_USER" \
            --dbname="$db" "${names[@]}"; then
            echo "isolation: USING $am gives the expected (heap's) outputs"
            continue
        fi
        if [[ $am == heap ]] && ((accept)); then
            cp "$work/heap/out/results/"hasis_*.out "$src/expected/"
            chown --reference="$src/specs" "$src"/expected/hasis_*.out 2>/dev/null || true
            echo "isolation: wrote heap's outputs into tests/isolation/expected/ (review them)"
            for n in "${names[@]}"; do cp "$src/expected/$n.out" "$work/hasis/expected/$n.out"; done
            chown -R "$PH_USER:" "$work/hasis"
            continue
        fi
        rc=1
        if [[ $am == heap ]]; then
            echo "FAIL: heap (the oracle) does not give tests/isolation/expected/hasis_*.out: a spec changed"
            echo "      (rerun with --accept after checking) or PostgreSQL's behaviour differs"
        else
            echo "FAIL: hasis differs from heap"
        fi
        [[ -f $work/$am/out/regression.diffs ]] && { echo "---- $work/$am/out/regression.diffs ----"; cat "$work/$am/out/regression.diffs"; }
    done
    return $rc
}

# ======================================================================== main
selected() {
    local s=$1 x
    ((${#only[@]} == 0)) && return 0
    for x in "${only[@]}"; do [[ $x == "$s" ]] && return 0; done
    return 1
}

# the installed library, to tell when it was replaced (reinstalled) during a sub-test
so_stamp() { stat -c '%Y' "$("$PH_PG_CONFIG" --pkglibdir)/pg_hybrid.so" 2>/dev/null || echo none; }

ph_trap_install
total=0
nfail=0
summary=()
t_all=$(date +%s)
for sub in "${ALL_SUBTESTS[@]}"; do
    selected "$sub" || continue
    total=$((total + 1))
    say "==== hasis/$sub: running"
    t0=$(date +%s)
    so0=$(so_stamp)
    set +e
    (
        set -euo pipefail
        # the sub-test's clusters and background jobs are stopped when it ends
        PH_CLUSTERS=()
        PH_BG_PIDS=()
        ph_trap_install
        failures=0
        "sub_$sub"
    )
    rc=$?
    set -e
    dt=$(($(date +%s) - t0))
    if ((rc == 0)); then
        line="hasis/$sub: PASS (${dt} s)"
    else
        line="hasis/$sub: FAIL (${dt} s; exit $rc)"
        nfail=$((nfail + 1))
    fi
    if [[ $(so_stamp) != "$so0" ]]; then
        line+=" [pg_hybrid.so was replaced while it ran: the result may mix two builds]"
    fi
    echo "$line"
    summary+=("$line")
done
echo
echo "==== hasis: $((total - nfail)) of $total sub-tests passed ($(($(date +%s) - t_all)) s)"
for l in "${summary[@]}"; do echo "  $l"; done
((nfail == 0))
