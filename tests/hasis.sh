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
#   analytics     tests/hasis_analytics.py for 60 s (20 s with --quick): random
#                 analytical queries (aggregates, filters, GROUP BY, joins,
#                 projections) on a hasis table, through the column scan, and
#                 on its heap twin, each check one statement under one
#                 snapshot, while a writer session changes both in the same
#                 transactions (VACUUM and CHECKPOINT between); first its
#                 self-test (--inject-fault, 10 s) must fail.
#   pgbench       TPC-B on hasis tables: `pgbench -i -I dtgvp` with
#                 default_table_access_method = hasis (all four tables hasis,
#                 btree primary keys), 8 clients for 20 s (5 s); no failed
#                 transaction; sum(abalance) = sum(bbalance) = sum(tbalance)
#                 = sum(delta), and per account / teller / branch the balance
#                 equals its history; history rows = committed transactions;
#                 index scans agree with seq scans; verify_table() passes; a
#                 bitmap scan with work_mem = 64kB (lossy pages at scale 4)
#                 agrees with a seq scan; then 10 (4) pgbench starts of 2 s,
#                 each on the pgbench_history pgbench truncates first, must
#                 each end within 60 s (concurrent first inserts and the
#                 first extents of an empty table).
#   fkeys         foreign keys under concurrency, on heap (the oracle) and on
#                 hasis: 8 clients for 15 s (5 s) insert child rows (FOR KEY
#                 SHARE on the parent) and add their amounts to the parent's
#                 total (a no-key update), or key-share lock a parent and
#                 update its note; no transaction fails (no deadlock, as on
#                 heap), every total equals its children's amounts, no
#                 orphan child; a key update and a delete of a referenced
#                 parent fail; after VACUUM FREEZE verify_table() passes.
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
#                 VACUUM / ANALYZE, compactions after a CHECKPOINT (whole
#                 COMPACT records, then records by reference); after each stage seq / index / bitmap
#                 (also lossy, work_mem = 64kB) / index-only / count+sum
#                 queries give the same answers on the primary and on the
#                 standby, and the heap twin's answers; verify_table() passes
#                 on the standby; standby reads under one snapshot during
#                 primary DML agree; kill -9 and restart of the standby, then
#                 promotion and writes on it.
#   logical       logical replication (pgoutput): a publisher (wal_level =
#                 logical) with pgbench's four tables and a TOAST table under
#                 REPLICA IDENTITY FULL, all hasis, and a subscriber whose
#                 tables are hasis too; the subscription's initial copies,
#                 then 15 s (5 s) of TPC-B and of updates, inserts, deletes
#                 and rolled-back savepoints on the TOAST table; once the
#                 subscriber confirmed the publisher's last LSN every table
#                 has the same rows on both sides (md5 per row, as a
#                 multiset), verify_table() passes there and the balances
#                 add up.
#   isolation     pg_isolation_regress over tests/isolation/specs/hasis_*.spec
#                 (EvalPlanQual, UPDATE vs DELETE, SKIP LOCKED / NOWAIT,
#                 REPEATABLE READ conflicts, SERIALIZABLE write skew, an old
#                 snapshot across VACUUM's compactions, INSERT ... ON CONFLICT
#                 racing an open insert of the same key, no-key updates
#                 against FOR KEY SHARE and foreign key checks): each
#                 spec runs with its tables USING heap (the oracle: must give
#                 tests/isolation/expected/NAME.out) and as written (USING
#                 hasis: must give the same).  --accept writes heap's outputs
#                 into tests/isolation/expected/ (review the diff).
#   upsert        INSERT ... ON CONFLICT (speculative insertion), the same
#                 pgbench scripts on hasis tables (schema uh) and heap twins
#                 (ux), 8 clients: 20 s (5 s) of DO UPDATE over 50 keys, DO
#                 NOTHING over 10000, ON CONSTRAINT on a 2-column key, a
#                 partial unique index, DO UPDATE of a 100 kB TOAST value
#                 (STORAGE EXTERNAL); then 5 s (2 s) of races: every client
#                 upserts the key of the current 10 ms, with and without a
#                 100 kB TOAST value (new keys inserted by several clients at
#                 once: losing speculative insertions are killed).  No failed
#                 or aborted transaction; per table sum(n) = the upserts
#                 pgbench committed on it, rows = distinct keys (seq scans),
#                 values intact; index scans agree with seq scans;
#                 verify_table() passes; n_tup_del (killed speculative
#                 insertions) is printed.  Then the same statements on hasis
#                 and heap must print the same: RETURNING (also the "xmax = 0
#                 AS inserted" idiom and xmin), DO UPDATE ... WHERE, one key
#                 twice in one command, key moves, TOAST values, savepoints
#                 and rollbacks, arbiters (one of two unique indexes, a
#                 2-column key, ON CONSTRAINT, NULLs, partial and expression
#                 indexes) and their errors.
#   dump          pg_dump / restore: hasis tables (20000 rows, 5000 with
#                 --quick; many types, NULLs, 1 MB TOAST values, btree / hash /
#                 hybrid_btree / unique indexes, a FK, one made via
#                 default_table_access_method and hasis_* reloptions, one
#                 with dead versions, a
#                 dropped and an added-with-default column), a hasis
#                 materialized view, a partitioned table (a hasis and a heap
#                 partition), a heap table; dumped with pg_dump -Fc and plain
#                 (which must carry 'SET default_table_access_method = hasis;':
#                 PostgreSQL 15 has no --table-access-method), restored by
#                 pg_restore -j 2 and by psql into fresh databases: every
#                 relation keeps its AM (pg_class.relam), indexes and
#                 constraints are the same, every table's rows (md5 of each
#                 row, as a multiset) equal the source's, the FK is enforced,
#                 indexes agree with seq scans, verify_table() passes, DML
#                 works.  Also pg_restore --no-table-access-method with
#                 default_table_access_method = hasis: every table hasis.
#   badinput      (a) a damaged extent header block (trailer magic), column
#                 block (trailer kind) and delta block (used_end) of a hasis
#                 table (cluster stopped, bytes of its file overwritten,
#                 restarted): a seq scan and verify_table() fail with XX001 /
#                 XX002 naming the table and the damaged block; an index
#                 scan fails so too or returns the right rows; the server
#                 stays up (SELECT 1, same postmaster, no reinitialisation, no
#                 crash in the log).  (b) rows too wide for a hybrid page
#                 (STORAGE PLAIN 100 kB / 9000 bytes by INSERT, UPDATE, ON
#                 CONFLICT and COPY; 1010 int8 columns, which heap takes):
#                 SQLSTATE 54000, the table stays usable.  (c) verify_table()
#                 on a heap table, an index, a view, a partitioned table:
#                 42809.  (d) restarted without pg_hybrid in
#                 shared_preload_libraries: CREATE EXTENSION, scans, DML,
#                 upserts, COPY, CREATE TABLE ... USING hasis, CTAS, CREATE
#                 INDEX, VACUUM (FULL) and verify_table() give 55000 naming
#                 shared_preload_libraries (no Rust backtrace), nothing is
#                 created, no crash; back with the preload the table is
#                 intact.  (--quick: the same.)
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

ALL_SUBTESTS=(differential analytics pgbench fkeys crash standby logical isolation upsert dump badinput)
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

# =================================================================== analytics
sub_analytics() {
    local dir db=hasis_analytics t=${PH_HASIS_ANALYTICS_TIME:-60} rc=0
    ((quick)) && t=${PH_HASIS_ANALYTICS_TIME:-20}
    dir=$(ph_scratch hasis_analytics)
    # A hasis setting in postgresql.conf takes effect (they were once
    # defined after pg_hybrid reserved its prefix, which dropped them).
    cluster_init "$dir" "$PH_PORT" "autovacuum = off" "pg_hybrid.hasis_meter_compactions = on"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    local meter
    meter=$(run_q "$dir" "$db" "SHOW pg_hybrid.hasis_meter_compactions" "")
    if [[ $meter != on ]]; then
        fail "pg_hybrid.hasis_meter_compactions = on in postgresql.conf reads '$meter'"
        return 1
    fi
    export PH_PGHOST=$dir/sock PH_PGPORT=$PH_PORT PH_DB=$db
    python3 "$PH_REPO/tests/hasis_analytics.py" --seed "${PH_SEED:-1}" --time 10 --rows 20000 --inject-fault >"$dir/selftest.out" 2>&1 || rc=$?
    if ((rc == 0)); then
        cat "$dir/selftest.out"
        fail "the self-test (--inject-fault) passed: the test cannot see a difference"
        return 1
    fi
    say "self-test failed as it must: $(grep -m1 '^FAIL' "$dir/selftest.out")"
    python3 "$PH_REPO/tests/hasis_analytics.py" --seed "${PH_SEED:-1}" --time "$t"
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
    # Starts on an empty table: pgbench truncates pgbench_history before
    # each run, and 8 clients then race to write its metapage and first
    # extents. A backend that found the file empty took the extension lock
    # and waited for the metapage's buffer, which another held while it
    # waited for the extension lock (about 1 start in 20 hung for good
    # before 2026-12-04). Each start must end within its time.
    local starts=10 i hung=0
    ((quick)) && starts=4
    for ((i = 1; i <= starts; i++)); do
        if ! ph_as_user timeout 60 "$PH_PGBIN/pgbench" "${conn[@]}" -c 8 -j 8 -T 2 -M prepared "$db" >"$w/start.out" 2>&1; then
            hung=$((hung + 1))
            fail "pgbench start $i on a truncated pgbench_history did not finish in 60 s (or failed): $(tail -2 "$w/start.out" | tr '\n' ' ')"
            # Backends stuck on buffer locks ignore a fast shutdown.
            cluster_stop "$dir" immediate
            cluster_start "$dir"
        fi
    done
    say "  $starts pgbench starts on a truncated pgbench_history: $hung hung"
    verify_table "$dir" "$db" pgbench_history || fail "verify_table(pgbench_history) failed after the starts"
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
    ph_standby "$P" "$S" "$SPORT" "max_standby_streaming_delay = -1"

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

    # COPY writes its batches straight into column parts: compactions that
    # append rows in fresh slots (whole COMPACT records that raise the slot
    # high-water mark), into the extent the INSERT above filled last and
    # then into new ones; one COPY rolled back.
    cluster_sql "$P" "$db" "COPY (SELECT g, g % 1000, 'c' || (g % 77), g / 3.0 FROM generate_series($((N * 20)), $((N * 20 + N / 5))) g) TO PROGRAM 'cat > pg_hybrid_sb_copy.csv' csv" >/dev/null
    both "COPY @ FROM 'pg_hybrid_sb_copy.csv' csv"
    cluster_psql "$P" "$db" -c "BEGIN" -c "COPY sh (k) FROM PROGRAM 'seq $((N * 21)) $((N * 21 + 5000))' csv" -c "ROLLBACK" >/dev/null
    cluster_sql "$P" "$db" "COPY (SELECT) TO PROGRAM 'rm -f pg_hybrid_sb_copy.csv'" >/dev/null
    compare "COPY (batches appended to column parts)"

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

    # The first compaction of an extent after a checkpoint logs its rows
    # whole; later ones refer to the old blocks (COMPACT by reference), which
    # the standby must have replayed exactly to rebuild the same pages.
    cluster_sql "$P" "$db" "CHECKPOINT" >/dev/null
    local r
    for r in 1 2 3; do
        both "UPDATE @ SET f = f + 1 WHERE k % 5 = $r"
        cluster_sql "$P" "$db" "VACUUM sh" "VACUUM sx" >/dev/null
    done
    compare "compactions after a checkpoint (whole records, then by reference)"

    # The visibility map (src/hasis/vm.rs): VACUUM sets the bits of extents
    # whose versions are all visible to all and logs them; changes clear
    # their extent's bits first. The standby's index-only scans must skip
    # exactly the fetches the primary's skip.
    ios_fetches() {   # CLUSTER
        run_q "$1" "$db" "${SET[ios]}" "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*), sum(k) FROM sh WHERE k > 100" |
            grep -o 'Heap Fetches: [0-9]*' || echo "no index-only scan"
    }
    local fp fs
    cluster_sql "$P" "$db" "VACUUM sh" "VACUUM sx" "VACUUM sh" >/dev/null
    compare "VACUUM set the visibility map"
    fp=$(ios_fetches "$P")
    fs=$(ios_fetches "$S")
    [[ $fp == "$fs" && $fp == "Heap Fetches: "* ]] || fail "visibility map: index-only scan on the primary ($fp) and on the standby ($fs)"
    say "  index-only scan after VACUUM: primary $fp, standby $fs"
    both "DELETE FROM @ WHERE k % 17 = 4" "UPDATE @ SET a = a + 1 WHERE k % 19 = 5" \
        "INSERT INTO @ SELECT g, 5, 'vm', 0 FROM generate_series($((N * 7)), $((N * 7 + 499))) g"
    compare "deletes, updates and inserts cleared visibility-map bits"
    # (The fetch counts differ now: the standby's index scans do not skip
    # the entries the primary's scans marked killed.)
    say "  index-only scan after changes: primary $(ios_fetches "$P"), standby $(ios_fetches "$S")"

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

# ====================================================================== upsert
# the same statements on hasis (schema A) and heap (schema B): the answers and
# errors must be the same
UPSERT_TWIN_SQL=$(cat <<'EOF'
CREATE TABLE kv (k int PRIMARY KEY, n int NOT NULL DEFAULT 0, v text);
ALTER TABLE kv ALTER v SET STORAGE EXTERNAL;
-- "was it inserted?": xmax = 0 for a row the upsert inserted
INSERT INTO kv VALUES (1, 1, 'a') ON CONFLICT (k) DO UPDATE SET n = kv.n + 1 RETURNING k, n, v, (xmax = 0) AS inserted;
INSERT INTO kv VALUES (1, 1, 'b') ON CONFLICT (k) DO UPDATE SET n = kv.n + 1, v = kv.v || excluded.v RETURNING k, n, v, (xmax = 0) AS inserted;
INSERT INTO kv VALUES (1, 1, 'c') ON CONFLICT (k) DO NOTHING RETURNING *;
INSERT INTO kv VALUES (2, 5, 'd') ON CONFLICT DO NOTHING RETURNING k, n, v, xmin::text = pg_current_xact_id()::text AS mine;
-- DO UPDATE ... WHERE: rows failing the condition are neither updated nor returned
INSERT INTO kv SELECT g, 1, 'w' FROM generate_series(1, 10) g ON CONFLICT (k) DO UPDATE SET n = kv.n + 10 WHERE kv.n < 2 RETURNING k, n, v;
INSERT INTO kv SELECT g, 1, 'w' || g FROM generate_series(1, 12) g ON CONFLICT (k) DO UPDATE SET n = kv.n + 100, v = excluded.v WHERE kv.n < 20 AND excluded.k % 2 = 0 RETURNING k, n, v, (xmax = 0) AS inserted;
INSERT INTO kv VALUES (3, 0, NULL) ON CONFLICT (k) DO UPDATE SET v = 'never' WHERE false RETURNING *;
-- the same key twice in one command
INSERT INTO kv VALUES (20, 1, 'x'), (20, 2, 'y') ON CONFLICT (k) DO UPDATE SET n = excluded.n;
INSERT INTO kv VALUES (21, 1, 'x'), (21, 2, 'y') ON CONFLICT (k) DO NOTHING RETURNING *;
-- DO UPDATE moving the key
INSERT INTO kv VALUES (4, 0, 'm') ON CONFLICT (k) DO UPDATE SET k = kv.k + 1000 RETURNING k, n, v;
INSERT INTO kv VALUES (5, 0, 'm') ON CONFLICT (k) DO UPDATE SET k = 1004 RETURNING k, n, v;
-- TOAST values (STORAGE EXTERNAL: 100 kB out of line)
INSERT INTO kv VALUES (30, 1, repeat('x', 100000)) ON CONFLICT (k) DO UPDATE SET n = kv.n + 1 RETURNING k, n, length(v), md5(v);
INSERT INTO kv VALUES (30, 1, repeat('y', 100000)) ON CONFLICT (k) DO UPDATE SET n = kv.n + 1, v = kv.v || excluded.v RETURNING k, n, length(v), md5(v);
INSERT INTO kv VALUES (30, 1, repeat('z', 100000)) ON CONFLICT (k) DO NOTHING RETURNING k;
INSERT INTO kv VALUES (30, 1, repeat('z', 100000)) ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE length(kv.v) > 300000 RETURNING k;
INSERT INTO kv VALUES (31, 1, repeat('z', 100000)), (30, 0, 'short') ON CONFLICT (k) DO UPDATE SET v = excluded.v RETURNING k, n, length(v), md5(v), (xmax = 0) AS inserted;
-- inside transactions: own rows, savepoints, rollback
BEGIN;
INSERT INTO kv VALUES (40, 1, 't') ON CONFLICT (k) DO UPDATE SET n = kv.n + 1 RETURNING k, n, (xmax = 0) AS inserted;
INSERT INTO kv VALUES (40, 1, 't') ON CONFLICT (k) DO UPDATE SET n = kv.n + 1 RETURNING k, n, (xmax = 0) AS inserted;
SAVEPOINT s;
INSERT INTO kv VALUES (40, 1, 't'), (41, 1, 'u') ON CONFLICT (k) DO UPDATE SET n = kv.n + 10 RETURNING k, n;
ROLLBACK TO SAVEPOINT s;
INSERT INTO kv VALUES (41, 7, 'after') ON CONFLICT (k) DO UPDATE SET n = kv.n + 1 RETURNING k, n, v;
COMMIT;
BEGIN;
INSERT INTO kv VALUES (50, 1, 'r') ON CONFLICT (k) DO NOTHING;
ROLLBACK;
INSERT INTO kv VALUES (50, 2, 'r2') ON CONFLICT (k) DO UPDATE SET n = -1 RETURNING k, n, v;
SELECT k, n, length(v), md5(v) FROM kv ORDER BY k;
-- the arbiter names one unique index: a conflict on another one is an error
CREATE TABLE two (a int PRIMARY KEY, b int UNIQUE, n int);
INSERT INTO two VALUES (1, 1, 0);
INSERT INTO two VALUES (2, 1, 0) ON CONFLICT (a) DO NOTHING;
INSERT INTO two VALUES (2, 1, 0) ON CONFLICT DO NOTHING RETURNING *;
INSERT INTO two VALUES (1, 2, 0) ON CONFLICT (a) DO UPDATE SET n = two.n + 1 RETURNING *;
INSERT INTO two VALUES (3, 2, 0) ON CONFLICT (b) DO UPDATE SET n = two.n + 1 RETURNING *;
SELECT * FROM two ORDER BY a;
-- a multi-column unique key, ON CONFLICT ON CONSTRAINT; NULLs never conflict
CREATE TABLE mc (a int, b text, n int, CONSTRAINT mc_ab UNIQUE (a, b));
INSERT INTO mc VALUES (1, 'x', 1) ON CONFLICT ON CONSTRAINT mc_ab DO UPDATE SET n = mc.n + excluded.n RETURNING *;
INSERT INTO mc VALUES (1, 'x', 5) ON CONFLICT ON CONSTRAINT mc_ab DO UPDATE SET n = mc.n + excluded.n RETURNING *;
INSERT INTO mc VALUES (1, 'y', 1) ON CONFLICT (a, b) DO UPDATE SET n = mc.n + 1 RETURNING *;
INSERT INTO mc VALUES (1, 'y', 1) ON CONFLICT (b, a) DO UPDATE SET n = mc.n + 1 RETURNING *;
INSERT INTO mc VALUES (1, NULL, 1) ON CONFLICT (a, b) DO UPDATE SET n = mc.n + 1 RETURNING *;
INSERT INTO mc VALUES (1, NULL, 1) ON CONFLICT ON CONSTRAINT mc_ab DO NOTHING RETURNING *;
INSERT INTO mc VALUES (1, 'x', 0) ON CONFLICT (a) DO NOTHING;
SELECT * FROM mc ORDER BY a, b NULLS LAST, n;
-- a partial unique index: only rows matching its predicate conflict
CREATE TABLE pt (k int, kind text, n int);
CREATE UNIQUE INDEX pt_k_a ON pt (k) WHERE kind = 'a';
INSERT INTO pt VALUES (1, 'a', 1) ON CONFLICT (k) WHERE kind = 'a' DO UPDATE SET n = pt.n + 1 RETURNING *;
INSERT INTO pt VALUES (1, 'a', 1) ON CONFLICT (k) WHERE kind = 'a' DO UPDATE SET n = pt.n + 1 RETURNING *;
INSERT INTO pt VALUES (1, 'b', 1) ON CONFLICT (k) WHERE kind = 'a' DO UPDATE SET n = pt.n + 1 RETURNING *;
INSERT INTO pt VALUES (1, 'b', 1) ON CONFLICT (k) WHERE kind = 'a' DO NOTHING RETURNING *;
INSERT INTO pt VALUES (1, 'a', 9) ON CONFLICT (k) WHERE kind = 'a' DO NOTHING RETURNING *;
INSERT INTO pt VALUES (1, 'a', 9) ON CONFLICT (k) DO NOTHING;
UPDATE pt SET kind = 'a' WHERE kind = 'b';
SELECT * FROM pt ORDER BY k, kind, n;
-- an expression index as arbiter
CREATE TABLE ex (s text, n int);
CREATE UNIQUE INDEX ex_lower ON ex (lower(s));
INSERT INTO ex VALUES ('Abc', 1) ON CONFLICT (lower(s)) DO UPDATE SET n = ex.n + 1, s = excluded.s RETURNING *;
INSERT INTO ex VALUES ('ABC', 1) ON CONFLICT (lower(s)) DO UPDATE SET n = ex.n + 1, s = excluded.s RETURNING *;
INSERT INTO ex VALUES ('abc', 1) ON CONFLICT (lower(s)) DO NOTHING RETURNING *;
SELECT * FROM ex;
EOF
)

# upsert scripts, per family, for schema @ (pgbench script text)
declare -A UPSERT_PGB=(
    # DO UPDATE over 50 keys
    [upd]='\set k random(1, 50)
INSERT INTO @.upd VALUES (:k, 1) ON CONFLICT (k) DO UPDATE SET n = upd.n + 1;'
    # DO NOTHING over 10000 keys
    [non]='\set k random(1, 10000)
INSERT INTO @.non VALUES (:k, :client_id, '"'v'"' || (:k)::text) ON CONFLICT (k) DO NOTHING;'
    # ON CONSTRAINT, a 2-column key (25 keys)
    [mc]='\set a random(1, 5)
\set b random(1, 5)
INSERT INTO @.mc VALUES (:a, '"'b'"' || (:b)::text, 1) ON CONFLICT ON CONSTRAINT mc_ab DO UPDATE SET n = mc.n + 1;'
    # a partial unique index over 20 keys; 1/4 of the rows outside it
    [pt]='\set k random(1, 20)
\set r random(1, 4)
\if :r = 1
INSERT INTO @.pt VALUES (:k, '"'b'"', 1) ON CONFLICT (k) WHERE kind = '"'a'"' DO UPDATE SET n = pt.n + 1;
\else
INSERT INTO @.pt VALUES (:k, '"'a'"', 1) ON CONFLICT (k) WHERE kind = '"'a'"' DO UPDATE SET n = pt.n + 1;
\endif'
    # a 100 kB TOAST value (STORAGE EXTERNAL) over 20 keys
    [ts]='\set k random(1, 20)
\set c random(0, 25)
INSERT INTO @.ts VALUES (:k, 1, repeat(chr(65 + :c), 100000)) ON CONFLICT (k) DO UPDATE SET n = ts.n + 1, v = excluded.v;'
    # races: every client upserts the key of the current 10 ms, so new keys
    # are inserted by several clients at once (speculative insertions that
    # lose are killed), without and with a TOAST value
    [rc]='SELECT (floor(extract(epoch FROM clock_timestamp()) * 100)::bigint % 1000000000)::int AS k \gset
INSERT INTO @.rc VALUES (:k, 1) ON CONFLICT (k) DO UPDATE SET n = rc.n + 1;'
    [rt]='SELECT (floor(extract(epoch FROM clock_timestamp()) * 100)::bigint % 1000000000)::int AS k \gset
\set c random(0, 25)
INSERT INTO @.rt VALUES (:k, 1, repeat(chr(65 + :c), 100000)) ON CONFLICT (k) DO UPDATE SET n = rt.n + 1, v = excluded.v;'
)
# per family: sum(n) (each committed upsert adds 1; none for DO NOTHING),
# rows, distinct keys, rows with wrong contents
declare -A UPSERT_CHK=(
    [upd]="SELECT sum(n), count(*), count(DISTINCT k), count(*) FILTER (WHERE k NOT BETWEEN 1 AND 50) FROM @.upd"
    [non]="SELECT NULL, count(*), count(DISTINCT k), count(*) FILTER (WHERE v <> 'v' || k) FROM @.non"
    [mc]="SELECT sum(n), count(*), count(DISTINCT (a, b)), 0 FROM @.mc"
    [pt]="SELECT sum(n), count(*) FILTER (WHERE kind = 'a'), count(DISTINCT k) FILTER (WHERE kind = 'a'), count(*) FILTER (WHERE kind = 'b' AND n <> 1) FROM @.pt"
    [ts]="SELECT sum(n), count(*), count(DISTINCT k), count(*) FILTER (WHERE length(v) <> 100000 OR v <> repeat(left(v, 1), 100000)) FROM @.ts"
    [rc]="SELECT sum(n), count(*), count(DISTINCT k), 0 FROM @.rc"
    [rt]="SELECT sum(n), count(*), count(DISTINCT k), count(*) FILTER (WHERE length(v) <> 100000 OR v <> repeat(left(v, 1), 100000)) FROM @.rt"
)

# upsert_bench DIR DB WORK TAG SECS FAMILY@WEIGHT...: one pgbench run (8
# clients) of each family's script on schema uh (hasis) and ux (heap), then
# the per-table checks against the transactions pgbench committed
upsert_bench() {
    local dir=$1 db=$2 w=$3 tag=$4 secs=$5 s f fam rc nfailed args=()
    shift 5
    for s in uh ux; do
        for f in "$@"; do
            fam=${f%@*}
            printf '%s\n' "${UPSERT_PGB[$fam]//@/$s}" >"$w/${fam}_$s.pgb"
            args+=(-f "$w/${fam}_$s.pgb@${f#*@}")
        done
    done
    chown -R "$PH_USER:" "$w"
    say "$tag: 8 clients, ${secs} s, the same scripts on hasis (uh) and heap (ux) tables: ${*%@*}"
    # one pgbench thread: with -j > 1 its threads add to the per-script
    # counts unlocked and lose some
    set +e
    ph_as_user "$PH_PGBIN/pgbench" -h "$dir/sock" -p "$PH_PORT" -U "$PH_USER" -n "${args[@]}" \
        -c 8 -j 1 -T "$secs" -M prepared -P 5 "$db" >"$w/pgbench.out" 2>"$w/pgbench.err"
    rc=$?
    set -e
    cp "$w/pgbench.out" "$w/pgbench.$tag.out"
    cp "$w/pgbench.err" "$w/pgbench.$tag.err"
    ph_pgbench_summary "$w" "$rc" || fail "$tag: pgbench reported errors (exit $rc)"
    nfailed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$w/pgbench.out")
    [[ $nfailed == 0 ]] || fail "$tag: pgbench: '${nfailed:-no}' failed transactions (expected 0)"
    # committed transactions per script (its file name without .pgb)
    local -A TX=()
    local name n processed total=0
    while read -r name n; do TX[$name]=$n; done < <(awk '
        /^SQL script [0-9]+:/ { f = $NF; sub(/.*\//, "", f); sub(/\.pgb$/, "", f) }
        /^ - [0-9]+ transactions/ { print f, $2 }' "$w/pgbench.out")
    processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$w/pgbench.out")
    for n in "${TX[@]}"; do total=$((total + n)); done
    [[ $total == "$processed" ]] || fail "$tag: pgbench's per-script counts add up to $total, its total is '$processed'"
    local sum cnt dist bad tx am
    for s in uh ux; do
        am=hasis
        [[ $s == ux ]] && am=heap
        for f in "$@"; do
            fam=${f%@*}
            tx=${TX[${fam}_$s]:-}
            IFS='|' read -r sum cnt dist bad < <(cluster_sql "$dir" "$db" "${SEQ[@]}" "${UPSERT_CHK[$fam]//@/$s}")
            say "  $s.$fam ($am): $tx committed upserts; $cnt rows, $dist distinct keys${sum:+, sum(n) $sum}"
            [[ -n $tx && $tx -gt 0 ]] || { fail "$s.$fam ($am): pgbench committed no upsert"; continue; }
            [[ $cnt == "$dist" ]] || fail "$s.$fam ($am): $cnt rows but $dist distinct keys: duplicate keys under the unique index (seq scan)"
            [[ $bad == 0 ]] || fail "$s.$fam ($am): $bad rows with wrong contents"
            if [[ $fam == non ]]; then
                ((cnt > 0 && cnt <= tx)) || fail "$s.non ($am): $cnt rows after $tx DO NOTHING inserts"
            else
                [[ $sum == "$tx" ]] || fail "$s.$fam ($am): sum(n) = $sum, but pgbench committed $tx upserts (each adds 1)"
            fi
        done
    done
}

sub_upsert() {
    local dir db=hasis_upsert secs=20 rsecs=5 w s f ams
    ((quick)) && { secs=5; rsecs=2; }
    failures=0
    dir=$(ph_scratch hasis_upsert)
    cluster_init "$dir" "$PH_PORT" "deadlock_timeout = '100ms'" "autovacuum_naptime = 1"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    w=$dir/work
    rm -rf "$w"
    mkdir -p "$w"
    # the same tables in schema uh (hasis) and ux (heap, the twin), made by
    # the same DDL under default_table_access_method
    local ddl="CREATE TABLE upd (k int PRIMARY KEY, n int NOT NULL);
        CREATE TABLE non (k int PRIMARY KEY, c int NOT NULL, v text NOT NULL);
        CREATE TABLE mc (a int NOT NULL, b text NOT NULL, n int NOT NULL, CONSTRAINT mc_ab UNIQUE (a, b));
        CREATE TABLE pt (k int NOT NULL, kind text NOT NULL, n int NOT NULL);
        CREATE UNIQUE INDEX pt_k_a ON pt (k) WHERE kind = 'a';
        CREATE TABLE ts (k int PRIMARY KEY, n int NOT NULL, v text NOT NULL);
        ALTER TABLE ts ALTER v SET STORAGE EXTERNAL;
        CREATE TABLE rc (k int PRIMARY KEY, n int NOT NULL);
        CREATE TABLE rt (k int PRIMARY KEY, n int NOT NULL, v text NOT NULL);
        ALTER TABLE rt ALTER v SET STORAGE EXTERNAL;"
    for s in uh:hasis ux:heap; do
        cluster_sql "$dir" "$db" "CREATE SCHEMA ${s%%:*}" >/dev/null
        PGOPTIONS="-c search_path=${s%%:*} -c default_table_access_method=${s#*:}" cluster_psql "$dir" "$db" -c "$ddl" >/dev/null
    done
    ams=$(cluster_sql "$dir" "$db" "SELECT count(*) || ' ' || count(*) FILTER (WHERE (n.nspname = 'uh') <> (a.amname = 'hasis')) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am a ON a.oid = c.relam WHERE n.nspname IN ('uh', 'ux') AND c.relkind = 'r'")
    [[ $ams == "14 0" ]] || fail "expected 7 hasis tables in uh and 7 heap tables in ux (tables, wrong AM: $ams)"

    upsert_bench "$dir" "$db" "$w" mixed "$secs" upd@4 non@4 mc@2 pt@2 ts@1
    upsert_bench "$dir" "$db" "$w" races "$rsecs" rc@3 rt@1
    ph_index_vs_seq "$dir" "$db" uh.upd upd_pkey "k > 0" || fail "uh.upd: upd_pkey disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" uh.non non_pkey "k > 0" || fail "uh.non: non_pkey disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" uh.mc mc_ab "a > 0" || fail "uh.mc: mc_ab disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" uh.pt pt_k_a "k > 0 AND kind = 'a'" || fail "uh.pt: pt_k_a (partial) disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" uh.ts ts_pkey "k > 0" || fail "uh.ts: ts_pkey disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" uh.rc rc_pkey "k > 0" || fail "uh.rc: rc_pkey disagrees with a seq scan"
    ph_index_vs_seq "$dir" "$db" uh.rt rt_pkey "k > 0" || fail "uh.rt: rt_pkey disagrees with a seq scan"
    for f in upd non mc pt ts rc rt; do
        verify_table "$dir" "$db" "uh.$f" || fail "verify_table(uh.$f) failed"
    done
    # speculative insertions that lost the race to a concurrent insert are
    # killed at once and counted as deletes (as heap_abort_speculative)
    cluster_sql "$dir" "$db" "SELECT pg_stat_force_next_flush()" >/dev/null
    say "  n_tup_del (speculative insertions killed): $(cluster_sql "$dir" "$db" "SELECT string_agg(schemaname || '.' || relname || ' ' || n_tup_del, ', ' ORDER BY schemaname, relname) FROM pg_stat_user_tables WHERE schemaname IN ('uh', 'ux') AND relname IN ('upd', 'mc', 'pt', 'ts', 'rc', 'rt')")"
    say "  uh.upd: $(table_stats "$dir" "$db" uh.upd)"

    # the same statements on hasis and heap: RETURNING, DO UPDATE ... WHERE,
    # errors, TOAST, savepoints, arbiters
    say "RETURNING / DO UPDATE ... WHERE / arbiters: hasis (schema th) against heap (schema tx)"
    for s in th:hasis tx:heap; do
        cluster_sql "$dir" "$db" "CREATE SCHEMA ${s%%:*}" >/dev/null
        PGOPTIONS="-c search_path=${s%%:*} -c default_table_access_method=${s#*:}" \
            cluster_psql "$dir" "$db" -v ON_ERROR_STOP=0 -a <<<"$UPSERT_TWIN_SQL" >"$w/twin.${s%%:*}" 2>&1 || true
    done
    [[ $(cluster_sql "$dir" "$db" "SELECT count(*) FROM pg_class WHERE relnamespace = 'th'::regnamespace AND relkind = 'r' AND relam <> (SELECT oid FROM pg_am WHERE amname = 'hasis')") == 0 ]] ||
        fail "schema th has tables that are not hasis"
    if ! diff -q "$w/twin.tx" "$w/twin.th" >/dev/null; then
        fail "the same statements give different answers on hasis and heap (diff heap hasis):"
        diff -U2 "$w/twin.tx" "$w/twin.th" | head -60 | sed 's/^/    /' >&2
    else
        say "  same answers and errors ($(grep -c '^INSERT' "$w/twin.th") upserts, $(grep -c 'ERROR:' "$w/twin.th") errors)"
    fi
    for f in kv two mc pt ex; do
        verify_table "$dir" "$db" "th.$f" || fail "verify_table(th.$f) failed"
    done
    ph_index_vs_seq "$dir" "$db" th.kv kv_pkey "k > 0" || fail "th.kv: kv_pkey disagrees with a seq scan"
    ((failures == 0))
}

# ======================================================================== dump
sub_dump() {
    local dir src=hasis_dump w n=20000 mb=1048576 t d ams0 ams out
    ((quick)) && n=5000
    failures=0
    dir=$(ph_scratch hasis_dump)
    cluster_init "$dir" "$PH_PORT" "autovacuum = off"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$src"
    w=$dir/work
    rm -rf "$w"
    mkdir -p "$w"
    chown "$PH_USER:" "$w"
    say "source database: hasis tables ($n rows, 1 MB TOAST values, NULLs, btree / hash / hybrid_btree indexes, a FK, dead versions)"
    cluster_psql "$dir" "$src" >/dev/null <<SQL
CREATE TABLE dt (id int PRIMARY KEY, i2 smallint, i8 bigint, f4 real, f8 float8, num numeric, t text,
    b bytea, ts timestamptz, d date, u uuid, j jsonb, arr int[], bo bool, c char(3), iv interval, big text) USING hasis;
INSERT INTO dt SELECT g, (g % 30000)::smallint, g * 1000003::bigint, g / 3.0, g / 7.0, g * 1.25, 't' || (g % 500),
    decode(md5(g::text), 'hex'), timestamptz '2020-01-01 00:00:00+00' + g * interval '1 minute', date '2000-01-01' + g,
    md5(g::text)::uuid, jsonb_build_object('g', g, 'a', jsonb_build_array(g, 't' || g, g % 3 = 0)), ARRAY[g, -g, NULL],
    g % 2 = 0, lpad((g % 1000)::text, 3, '0'), g * interval '1 second', NULL
  FROM generate_series(1, $n) g;
-- rows of NULLs (every nullable column)
INSERT INTO dt (id) SELECT g FROM generate_series($n + 1, $n + 50) g;
UPDATE dt SET t = NULL, j = NULL WHERE id % 97 = 0;
-- 1 MB values, out of line in the TOAST table (md5 text and random bytes do not compress)
INSERT INTO dt (id, t, big, b) SELECT $n + 100 + g, 'toast',
    (SELECT string_agg(md5(g || ':' || x), '') FROM generate_series(1, $mb / 32) x),
    CASE WHEN g = 1 THEN (SELECT string_agg(decode(md5(g || '/' || x), 'hex'), ''::bytea) FROM generate_series(1, $mb / 16) x) END
  FROM generate_series(1, 4) g;
CREATE INDEX dt_i8 ON dt (i8);
CREATE INDEX dt_t ON dt USING hash (t);
CREATE INDEX dt_d ON dt USING hybrid_btree (d);
CREATE UNIQUE INDEX dt_u ON dt (u);
CREATE TABLE dchild (id int PRIMARY KEY, parent int NOT NULL REFERENCES dt (id), note text) USING hasis;
INSERT INTO dchild SELECT g, g % $n + 1, CASE WHEN g % 5 = 0 THEN NULL ELSE 'c' || g END FROM generate_series(1, $n / 2) g;
-- made through default_table_access_method, no USING clause
SET default_table_access_method = hasis;
CREATE TABLE ddef (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v text, w numeric)
  WITH (hasis_delta_blocks = 4, hasis_compact_trigger = 3, fillfactor = 90);
RESET default_table_access_method;
INSERT INTO ddef (v, w) SELECT 'd' || g, g / 3.0 FROM generate_series(1, 1000) g;
-- dead versions (no VACUUM): updates, deletes, key moves, a rolled-back insert;
-- a dropped column and one added with a default after the rows were written
CREATE TABLE ddead (k int PRIMARY KEY, v int, s text, gone text) USING hasis;
INSERT INTO ddead SELECT g, g, 's' || g, 'x' FROM generate_series(1, $n) g;
UPDATE ddead SET v = v + 1, s = s || 'u' WHERE k % 3 = 0;
DELETE FROM ddead WHERE k % 4 = 0;
UPDATE ddead SET k = k + $n WHERE k % 5 = 0;
BEGIN; INSERT INTO ddead SELECT g, 0, 'rolled back', NULL FROM generate_series(3 * $n, 3 * $n + 99) g; ROLLBACK;
ALTER TABLE ddead DROP COLUMN gone;
ALTER TABLE ddead ADD COLUMN extra text DEFAULT 'dflt';
UPDATE ddead SET extra = 'set' WHERE k % 7 = 0;
-- a heap table, a hasis materialized view, a partitioned table with a hasis and a heap partition
CREATE TABLE dheap (k int PRIMARY KEY, v text) USING heap;
INSERT INTO dheap SELECT g, 'h' || g FROM generate_series(1, 1000) g;
CREATE MATERIALIZED VIEW dmv USING hasis AS SELECT d, count(*) AS n, sum(i8) AS s FROM dt GROUP BY d;
CREATE TABLE dpart (k int NOT NULL, v text) PARTITION BY RANGE (k);
CREATE TABLE dpart_1 PARTITION OF dpart FOR VALUES FROM (0) TO (1000) USING hasis;
CREATE TABLE dpart_2 PARTITION OF dpart FOR VALUES FROM (1000) TO (2000) USING heap;
INSERT INTO dpart SELECT g, 'p' || g FROM generate_series(0, 1999) g;
DELETE FROM dpart WHERE k % 10 = 0;
ANALYZE;
SQL
    # the relations whose AM must survive: tables, partitions, materialized views
    # (with their reloptions: the hasis_* ones come back through pg_hybrid's
    # DDL hook)
    local amq="SELECT string_agg(c.relname || '=' || a.amname || coalesce('(' || array_to_string(c.reloptions, ',') || ')', ''), ' ' ORDER BY c.relname) FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'm')"
    ams0=$(cluster_sql "$dir" "$src" "$amq")
    say "  $ams0"
    [[ $ams0 == "dchild=hasis ddead=hasis ddef=hasis(fillfactor=90,hasis_delta_blocks=4,hasis_compact_trigger=3) dheap=heap dmv=hasis dpart_1=hasis dpart_2=heap dt=hasis" ]] ||
        fail "the source tables do not have the intended access methods: $ams0"
    say "  ddead: $(cluster_sql "$dir" "$src" "SELECT count(*) FROM ddead") rows; $(table_stats "$dir" "$src" ddead)"
    local toast
    toast=$(cluster_sql "$dir" "$src" "SELECT count(*) FILTER (WHERE length(big) = $mb) || ' ' || count(*) FILTER (WHERE length(b) = $mb) || ' ' || pg_size_pretty(pg_total_relation_size((SELECT reltoastrelid FROM pg_class WHERE relname = 'dt'))) FROM dt")
    say "  dt: 1 MB values: $toast (text, bytea, TOAST table size)"
    [[ $toast == "4 1 "* ]] || fail "dt does not hold the four 1 MB text values and the 1 MB bytea value: $toast"
    mapfile -t TABLES < <(cluster_sql "$dir" "$src" "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'm') ORDER BY 1")
    local HASIS=(dt dchild ddef ddead dmv dpart_1)

    local conn=(-h "$dir/sock" -p "$PH_PORT" -U "$PH_USER")
    say "pg_dump -Fc and plain"
    ph_as_user "$PH_PGBIN/pg_dump" "${conn[@]}" -Fc -f "$w/src.dump" "$src"
    ph_as_user "$PH_PGBIN/pg_dump" "${conn[@]}" -Fp -f "$w/src.sql" "$src"
    say "  $(du -h "$w/src.dump" | cut -f1) custom, $(du -h "$w/src.sql" | cut -f1) plain"
    # PostgreSQL 15's pg_dump has no --table-access-method; it names each
    # table's AM with SET default_table_access_method before its CREATE
    local nset
    nset=$(grep -c '^SET default_table_access_method = hasis;$' "$w/src.sql" || true)
    say "  plain dump: $nset 'SET default_table_access_method = hasis;', $(grep -c '^SET default_table_access_method = heap;$' "$w/src.sql" || true) '... = heap;'"
    ((nset >= 1)) || fail "the plain dump has no 'SET default_table_access_method = hasis;'"
    grep -q '^SET default_table_access_method = heap;$' "$w/src.sql" || fail "the plain dump has no 'SET default_table_access_method = heap;'"
    grep -qE 'USING (hasis|heap)' "$w/src.sql" && say "  note: the plain dump names an AM in a CREATE TABLE ... USING"
    if "$PH_PGBIN/pg_dump" --help | grep -q -- '--table-access-method'; then
        say "  note: this pg_dump has --table-access-method (not exercised)"
    fi

    # restores: custom format with pg_restore -j 2 (fc), plain SQL with psql
    # (sql), and pg_restore --no-table-access-method into sessions whose
    # default is hasis (conv: every table becomes hasis)
    local db
    for db in hasis_dump_fc hasis_dump_sql hasis_dump_conv; do
        cluster_psql "$dir" postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db TEMPLATE template0" >/dev/null
    done
    # (a session cannot start with default_table_access_method = hasis
    # before the AM exists: the extension first, the dump's CREATE EXTENSION
    # IF NOT EXISTS then does nothing)
    ph_prepare_db "$dir" hasis_dump_conv
    say "pg_restore -j 2 into hasis_dump_fc"
    ph_as_user "$PH_PGBIN/pg_restore" "${conn[@]}" --exit-on-error -j 2 -d hasis_dump_fc "$w/src.dump" >"$w/restore_fc.log" 2>&1 ||
        { fail "pg_restore into hasis_dump_fc failed"; head -20 "$w/restore_fc.log" >&2; }
    say "psql -f into hasis_dump_sql"
    cluster_psql "$dir" hasis_dump_sql -f "$w/src.sql" >"$w/restore_sql.log" 2>&1 ||
        { fail "psql -f of the plain dump into hasis_dump_sql failed"; head -20 "$w/restore_sql.log" >&2; }
    say "pg_restore --no-table-access-method with default_table_access_method = hasis into hasis_dump_conv"
    ph_as_user env PGOPTIONS="-c default_table_access_method=hasis" "$PH_PGBIN/pg_restore" "${conn[@]}" --exit-on-error \
        --no-table-access-method -d hasis_dump_conv "$w/src.dump" >"$w/restore_conv.log" 2>&1 ||
        { fail "pg_restore --no-table-access-method into hasis_dump_conv failed"; head -20 "$w/restore_conv.log" >&2; }

    # contents: every table's rows as a sorted list of md5(row text) (a
    # multiset, as EXCEPT ALL both ways), read by seq scans, in every database
    rows_md5() {   # DB TABLE FILE
        cluster_sql "$dir" "$1" "${SEQ[@]}" "SELECT md5(x::text) FROM $2 x ORDER BY 1" >"$3" 2>&1 || true
    }
    for t in "${TABLES[@]}"; do rows_md5 "$src" "$t" "$w/src.$t"; done
    local idx0 con0 q_idx q_con
    q_idx="SELECT string_agg(indexdef, E'\n' ORDER BY indexdef) FROM pg_indexes WHERE schemaname = 'public'"
    q_con="SELECT string_agg(conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid), E'\n' ORDER BY conrelid::regclass::text, conname) FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
    idx0=$(cluster_sql "$dir" "$src" "$q_idx")
    con0=$(cluster_sql "$dir" "$src" "$q_con")
    for db in hasis_dump_fc hasis_dump_sql hasis_dump_conv; do
        local bad=0 nd
        ams=$(cluster_sql "$dir" "$db" "$amq")
        if [[ $db == hasis_dump_conv ]]; then
            [[ $ams == "${ams0//=heap/=hasis}" ]] || fail "$db: not every restored table is hasis: $ams"
        else
            [[ $ams == "$ams0" ]] || fail "$db: restored access methods '$ams', the source has '$ams0'"
        fi
        [[ $(cluster_sql "$dir" "$db" "$q_idx") == "$idx0" ]] || fail "$db: the restored indexes differ from the source's"
        [[ $(cluster_sql "$dir" "$db" "$q_con") == "$con0" ]] || fail "$db: the restored constraints differ from the source's"
        for t in "${TABLES[@]}"; do
            rows_md5 "$db" "$t" "$w/$db.$t"
            if ! cmp -s "$w/src.$t" "$w/$db.$t"; then
                nd=$(LC_ALL=C comm -3 "$w/src.$t" "$w/$db.$t" | wc -l)
                fail "$db: $t differs from the source in $nd rows ($(wc -l <"$w/src.$t") rows in the source, $(wc -l <"$w/$db.$t") restored)"
                bad=1
            fi
        done
        ((bad)) || say "  $db: $ams; ${#TABLES[@]} tables identical to the source ($(cat "$w/$db".* | wc -l) rows)"
        # the restored FK is enforced
        out=$(cluster_psql "$dir" "$db" -v ON_ERROR_STOP=0 -c '\set VERBOSITY verbose' -c "INSERT INTO dchild VALUES (-1, -12345, 'orphan')" 2>&1 || true)
        grep -q 'ERROR:  23503' <<<"$out" || fail "$db: an orphan dchild row was not refused with 23503: $out"
        # the indexes of the restored hasis tables agree with seq scans
        ph_index_vs_seq "$dir" "$db" dt dt_pkey "id > 0" >/dev/null || fail "$db: dt_pkey disagrees with a seq scan"
        ph_index_vs_seq "$dir" "$db" dt dt_i8 "i8 > 0" >/dev/null || fail "$db: dt_i8 disagrees with a seq scan"
        ph_index_vs_seq "$dir" "$db" dt dt_d "d > '1999-01-01'" >/dev/null || fail "$db: dt_d (hybrid_btree) disagrees with a seq scan"
        hash_vs_seq "$dir" "$db" dt t dt_t >/dev/null || fail "$db: dt_t (hash) disagrees with a seq scan"
        ph_index_vs_seq "$dir" "$db" ddead ddead_pkey "k > 0" >/dev/null || fail "$db: ddead_pkey disagrees with a seq scan"
        local vt=("${HASIS[@]}")
        [[ $db == hasis_dump_conv ]] && vt=("${TABLES[@]}")
        for t in "${vt[@]}"; do
            verify_table "$dir" "$db" "$t" >/dev/null || fail "$db: verify_table($t) failed"
        done
        # and take writes
        cluster_sql "$dir" "$db" "UPDATE dt SET big = big || 'x', t = 'w' WHERE id > $n + 100" \
            "DELETE FROM ddead WHERE k % 9 = 0" "INSERT INTO ddef (v) VALUES ('after restore')" >/dev/null ||
            fail "$db: DML on the restored tables failed"
        verify_table "$dir" "$db" dt >/dev/null || fail "$db: verify_table(dt) failed after DML"
    done
    say "  restored databases: FK enforced, indexes agree with seq scans, verify_table passes, DML works"
    ((failures == 0))
}

# ==================================================================== badinput
# sql_err DIR DB SQL...: runs SQL (psql, verbose errors: SQLSTATE shown, stops
# at the first ERROR); sets ERR_OUT to its output; returns 0 if it failed
sql_err() {
    local dir=$1 db=$2 s args=(-c '\set VERBOSITY verbose')
    shift 2
    for s in "$@"; do args+=(-c "$s"); done
    if ERR_OUT=$(cluster_psql "$dir" "$db" -At "${args[@]}" 2>&1); then return 1; fi
    return 0
}

# expect_error DIR DB CODES WHAT SQL...: SQL must fail with an ERROR whose
# SQLSTATE matches the regex CODES, without a Rust backtrace; ERR_LINE is the
# ERROR line (with HINT), ERR_CODE its SQLSTATE
expect_error() {
    local dir=$1 db=$2 codes=$3 what=$4
    shift 4
    ERR_LINE=""
    ERR_CODE=""
    if ! sql_err "$dir" "$db" "$@"; then
        echo "  $what: no ERROR (expected SQLSTATE $codes); output: $(head -c 300 <<<"$ERR_OUT")" >&2
        return 1
    fi
    ERR_LINE=$(grep -m1 -E 'ERROR:|FATAL:|PANIC:|server closed|terminated' <<<"$ERR_OUT" || true)
    ERR_CODE=$(sed -n 's/.*ERROR:  \([0-9A-Z]\{5\}\): .*/\1/p' <<<"$ERR_LINE")
    local hint
    hint=$(grep -m1 '^HINT:' <<<"$ERR_OUT" || true)
    [[ -z $hint ]] || ERR_LINE+=" / $hint"
    if [[ ! $ERR_CODE =~ ^($codes)$ ]]; then
        echo "  $what: expected an ERROR with SQLSTATE $codes, got: ${ERR_LINE:-$(head -c 300 <<<"$ERR_OUT")}" >&2
        return 1
    fi
    if grep -qE 'panicking|rust_end_short_backtrace|^ +[0-9]+: ' <<<"$ERR_OUT"; then
        echo "  $what: the ERROR ($ERR_CODE) carries a Rust backtrace in its DETAIL:" >&2
        grep -m4 -E '^DETAIL|^ +[0-9]+: ' <<<"$ERR_OUT" | sed 's/^/      /' >&2
        return 1
    fi
    echo "  $what: ${ERR_LINE#*ERROR:  }"
}

# server_state DIR: postmaster pid, its start time and the checkpointer's pid
# (a crashed backend makes the postmaster reinitialise: new checkpointer)
server_state() {
    echo "$(ph_cluster_pid "$1") $(cluster_sql "$1" postgres "SELECT pg_postmaster_start_time() || ' ' || (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer')")"
}

# server_survived DIR STATE LOGPOS WHAT: SELECT 1 works, the postmaster is the
# same and did not reinitialise, no crash in the log since LOGPOS
server_survived() {
    local dir=$1 state=$2 logpos=$3 what=$4 ok=0 now
    if [[ $(cluster_sql "$dir" postgres "SELECT 1" 2>&1) != 1 ]]; then
        fail "$what: SELECT 1 fails afterwards (server down?)"
        cluster_wait_ready "$dir" 60
        ok=1
    fi
    now=$(server_state "$dir")
    [[ $now == "$state" ]] || { fail "$what: the postmaster restarted or reinitialised (pid, start time, checkpointer: '$state' -> '$now')"; ok=1; }
    if tail -c +$((logpos + 1)) "$dir/postgres.log" | grep -E 'PANIC|terminated by signal|was terminated|reinitializing|exited with exit code [^0]' >&2; then
        fail "$what: crash / PANIC in the server log (above)"
        ok=1
    fi
    return $ok
}

# hasis_blocks FILE: one line per block of a hasis relation file: blkno kind
# index (from the block trailer; kind 1 header, 2 directory, 3 column, 4 delta,
# 0 no trailer)
hasis_blocks() {
    python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
for b in range(len(data) // 8192):
    magic, fmt, kind, index = struct.unpack_from("<IBBH", data, b * 8192 + 8176)
    print(b, kind if magic == 0x53495348 else 0, index)
PY
}

# poke FILE BLK OFF HEX: overwrite bytes of block BLK at offset OFF
poke() {
    python3 - "$@" <<'PY'
import sys
path, blk, off, val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
with open(path, "r+b") as f:
    f.seek(blk * 8192 + off)
    f.write(val)
PY
}

sub_badinput() {
    local dir db=hasis_badinput rows=3000 w file state logpos expect blk hdr col delta
    failures=0
    dir=$(ph_scratch hasis_badinput)
    cluster_init "$dir" "$PH_PORT" "autovacuum = off"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    w=$dir/work
    mkdir -p "$w"
    [[ $(cluster_sql "$dir" "$db" "SHOW data_checksums") == off ]] ||
        ph_die "the scratch cluster has data checksums on; damage would fail the checksum before hasis sees it"

    # ---- (a) damaged header, column and delta blocks
    # extents with column parts (VACUUM compacts them), then rows in the
    # last extent's delta part
    cluster_sql "$dir" "$db" \
        "CREATE TABLE bc (k int PRIMARY KEY, v text) USING hasis" \
        "INSERT INTO bc SELECT g, md5(g::text) FROM generate_series(1, $rows) g" "VACUUM bc" \
        "INSERT INTO bc SELECT g, md5(g::text) FROM generate_series($rows + 1, $rows + 100) g" "CHECKPOINT" >/dev/null
    local q="SELECT count(*) || ' ' || md5(string_agg(k || ':' || v, ',' ORDER BY k)) FROM bc"
    expect=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "$q")
    verify_table "$dir" "$db" bc || fail "verify_table(bc) fails before any damage"
    file=$dir/data/$(cluster_sql "$dir" "$db" "SELECT pg_relation_filepath('bc')")
    cluster_stop "$dir"
    cp "$file" "$w/bc.pristine"
    # the block trailer's kind and index say what a block is (src/hasis/README.md,
    # core/src/hasis/README.md): the first extent header; a column block
    # of the first extent past the column part's first block; the first
    # delta block in use
    hasis_blocks "$file" >"$w/blocks"
    hdr=$(awk '$2 == 1 {print $1; exit}' "$w/blocks")
    col=$(awk '$2 == 3 && $3 == 4 {print $1; exit}' "$w/blocks")
    delta=$(awk '$2 == 4 {print $1; exit}' "$w/blocks")
    [[ -n $hdr && -n $col && -n $delta ]] || ph_die "bc: no header / column (index 4) / delta block in $file (header '$hdr', column '$col', delta '$delta')"
    say "bc: $((rows + 100)) rows, $(wc -l <"$w/blocks") blocks; damaging header block $hdr, column block $col, delta block $delta"
    # CASE: name block offset hex what
    local cases=(
        "header $hdr 8176 00000000 trailer magic of the extent header block"
        "column $col 8181 04 trailer kind of a column block (says: delta)"
        "delta $delta 26 ffff used_end of a delta block (past the block)"
    )
    local c name off hex what
    for c in "${cases[@]}"; do
        read -r name blk off hex what <<<"$c"
        cluster_stop "$dir"
        cp "$w/bc.pristine" "$file"
        poke "$file" "$blk" "$off" "$hex"
        cluster_start "$dir"
        state=$(server_state "$dir")
        logpos=$(stat -c %s "$dir/postgres.log")
        say "== $name: $what (block $blk)"
        if expect_error "$dir" "$db" 'XX001|XX002' "seq scan" "${SEQ[@]}" "$q"; then
            [[ $ERR_LINE == *'"bc"'* && $ERR_LINE =~ block\ $blk([^0-9]|$) ]] ||
                fail "$name: the seq scan's ERROR does not name table \"bc\" and the damaged block $blk: $ERR_LINE"
        else
            fail "$name: a seq scan over the damaged block did not fail with XX001 / XX002"
        fi
        # index scans read only what they need: an ERROR as above, or the right rows
        if sql_err "$dir" "$db" "SET enable_seqscan = off" "SET enable_bitmapscan = off" "${q/FROM bc/FROM bc WHERE k > 0}"; then
            if grep -qE 'ERROR:  XX00[12]: .*"bc".* block ' <<<"$ERR_OUT"; then
                say "  index scan: $(grep -m1 'ERROR:' <<<"$ERR_OUT" | sed 's/^ERROR:  //')"
            else
                fail "$name: the index scan failed without XX001 / XX002 naming \"bc\": $(head -3 <<<"$ERR_OUT")"
            fi
        elif [[ $(tail -n1 <<<"$ERR_OUT") == "$expect" ]]; then
            say "  index scan: no error, the right rows (the damaged bytes are not on its path)"
        else
            fail "$name: the index scan returned WRONG rows without an error: '$(tail -n1 <<<"$ERR_OUT")', expected '$expect'"
        fi
        if expect_error "$dir" "$db" 'XX001|XX002' "verify_table" "SELECT pg_hybrid.verify_table('bc')"; then
            [[ $ERR_LINE == *'"bc"'* && $ERR_LINE =~ block\ $blk([^0-9]|$) ]] ||
                fail "$name: verify_table's ERROR does not name table \"bc\" and the damaged block $blk: $ERR_LINE"
        else
            fail "$name: pg_hybrid.verify_table() did not report the damage as XX001 / XX002"
        fi
        server_survived "$dir" "$state" "$logpos" "$name" && say "  server up: SELECT 1 works, same postmaster, no crash in the log"
    done
    cluster_stop "$dir"
    cp "$w/bc.pristine" "$file"
    cluster_start "$dir"
    [[ $(cluster_sql "$dir" "$db" "${SEQ[@]}" "$q") == "$expect" ]] || fail "bc: the restored pristine file does not read back"

    # ---- (b) rows too wide for a hybrid page (TOAST cannot help)
    say "== rows too wide for a hybrid page"
    state=$(server_state "$dir")
    logpos=$(stat -c %s "$dir/postgres.log")
    local cols vals
    cols=$(seq -s, -f 'c%g int8' 1 1010)
    vals=$(seq -s, 1 1010)
    cluster_sql "$dir" "$db" "CREATE TABLE bw (k int PRIMARY KEY, v text) USING hasis" "ALTER TABLE bw ALTER v SET STORAGE PLAIN" \
        "INSERT INTO bw VALUES (1, repeat('a', 8000)), (2, 'short')" \
        "CREATE TABLE bf ($cols) USING hasis" "CREATE TABLE bfh ($cols) USING heap" >/dev/null
    expect_error "$dir" "$db" 54000 "INSERT of a 100 kB STORAGE PLAIN value" "INSERT INTO bw VALUES (10, repeat('x', 100000))" ||
        fail "a 100 kB STORAGE PLAIN value: no clear ERROR"
    expect_error "$dir" "$db" 54000 "UPDATE to a 9000-byte STORAGE PLAIN value" "UPDATE bw SET v = repeat('y', 9000) WHERE k = 2" ||
        fail "an UPDATE to a too wide row: no clear ERROR"
    expect_error "$dir" "$db" 54000 "INSERT ... ON CONFLICT of a too wide row" "INSERT INTO bw VALUES (11, repeat('x', 100000)) ON CONFLICT (k) DO NOTHING" ||
        fail "a too wide upsert: no clear ERROR"
    expect_error "$dir" "$db" 54000 "COPY of a too wide row" "COPY bw FROM PROGRAM 'printf \"20\\tok\\n21\\t%09000d\\n\" 0'" ||
        fail "COPY (multi-insert) of a too wide row: no clear ERROR"
    if cluster_sql "$dir" "$db" "INSERT INTO bfh VALUES ($vals)" >/dev/null 2>&1; then
        expect_error "$dir" "$db" 54000 "1010 int8 columns (heap takes the row)" "INSERT INTO bf VALUES ($vals)" ||
            fail "a row of 1010 int8 columns: no clear ERROR"
    else
        fail "heap does not take a row of 1010 int8 columns either; the case tests nothing"
    fi
    [[ $(cluster_sql "$dir" "$db" "INSERT INTO bw VALUES (3, 'after')" "SELECT string_agg(k || ':' || length(v), ' ' ORDER BY k) FROM bw") == "1:8000 2:5 3:5" ]] ||
        fail "bw after the refused rows: $(cluster_sql "$dir" "$db" "SELECT string_agg(k || ':' || length(v), ' ' ORDER BY k) FROM bw" 2>&1)"
    verify_table "$dir" "$db" bw >/dev/null || fail "verify_table(bw) fails after the refused rows"
    server_survived "$dir" "$state" "$logpos" "too wide rows" || true

    # ---- (c) verify_table / table_stats on what is not a hasis table
    say "== pg_hybrid.verify_table() on relations that are not hasis tables"
    cluster_sql "$dir" "$db" "CREATE TABLE bh (k int PRIMARY KEY) USING heap" "CREATE VIEW bv AS SELECT 1 AS one" \
        "CREATE TABLE bp (k int) PARTITION BY RANGE (k)" >/dev/null
    expect_error "$dir" "$db" 42809 "verify_table(heap table)" "SELECT pg_hybrid.verify_table('bh')" || fail "verify_table(a heap table): no clear ERROR"
    expect_error "$dir" "$db" 42809 "verify_table(index)" "SELECT pg_hybrid.verify_table('bc_pkey')" || fail "verify_table(an index): no clear ERROR"
    expect_error "$dir" "$db" 42809 "verify_table(view)" "SELECT pg_hybrid.verify_table('bv')" || fail "verify_table(a view): no clear ERROR"
    expect_error "$dir" "$db" 42809 "verify_table(partitioned table)" "SELECT pg_hybrid.verify_table('bp')" || fail "verify_table(a partitioned table): no clear ERROR"
    expect_error "$dir" "$db" 42P01 "verify_table(missing)" "SELECT pg_hybrid.verify_table('no_such_table')" || fail "verify_table(a missing table): no clear ERROR"
    expect_error "$dir" "$db" 42809 "table_stats(heap table)" "SELECT * FROM pg_hybrid.table_stats('bh')" || fail "table_stats(a heap table): no clear ERROR"
    server_survived "$dir" "$state" "$logpos" "verify_table on other relations" || true

    # ---- (d) the server without pg_hybrid in shared_preload_libraries
    say "== restart without pg_hybrid in shared_preload_libraries"
    cluster_sql "$dir" "$db" "CREATE TABLE bn (k int PRIMARY KEY, v text) USING hasis" \
        "INSERT INTO bn SELECT g, 'n' || g FROM generate_series(1, 2000) g" \
        "DELETE FROM bn WHERE k % 2 = 0" "CHECKPOINT" >/dev/null
    local nexpect
    nexpect=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "SELECT count(*) || ' ' || md5(string_agg(k || v, ',' ORDER BY k)) FROM bn")
    cluster_stop "$dir"
    cp "$dir/data/postgresql.conf" "$w/postgresql.conf.preload"
    cluster_conf "$dir" "shared_preload_libraries = ''"
    # with RUST_BACKTRACE set in the server's environment (as in many build
    # environments), so that the no-backtrace check does not depend on it
    RUST_BACKTRACE=1 cluster_start "$dir"
    [[ -z $(cluster_sql "$dir" postgres "SHOW shared_preload_libraries") ]] || ph_die "shared_preload_libraries is not empty"
    state=$(server_state "$dir")
    logpos=$(stat -c %s "$dir/postgres.log")
    cluster_psql "$dir" postgres -c "CREATE DATABASE hasis_nopreload" >/dev/null
    local spl_cases=(
        "CREATE EXTENSION|hasis_nopreload|CREATE EXTENSION pg_hybrid"
        "seq scan|$db|SELECT count(*) FROM bn"
        "index scan|$db|SET enable_seqscan = off; SELECT * FROM bn WHERE k = 1"
        "INSERT|$db|INSERT INTO bn VALUES (5000, 'x')"
        "UPDATE|$db|UPDATE bn SET v = 'u' WHERE k = 1"
        "DELETE|$db|DELETE FROM bn WHERE k = 3"
        "INSERT ... ON CONFLICT|$db|INSERT INTO bn VALUES (1, 'x') ON CONFLICT (k) DO UPDATE SET v = 'y'"
        "COPY TO|$db|COPY bn TO STDOUT"
        "CREATE TABLE ... USING hasis|$db|CREATE TABLE bn_new (k int) USING hasis"
        "CREATE TABLE ... AS|$db|CREATE TABLE bn_ctas USING hasis AS SELECT 1 AS k"
        "CREATE INDEX|$db|CREATE INDEX bn_v ON bn (v)"
        "VACUUM|$db|VACUUM bn"
        "VACUUM FULL|$db|VACUUM FULL bn"
        "verify_table|$db|SELECT pg_hybrid.verify_table('bn')"
    )
    local sc label cdb sql
    for sc in "${spl_cases[@]}"; do
        IFS='|' read -r label cdb sql <<<"$sc"
        if expect_error "$dir" "$cdb" 55000 "without the preload: $label" "$sql"; then
            [[ $ERR_LINE == *shared_preload_libraries* ]] || fail "without the preload: $label: the ERROR does not mention shared_preload_libraries: $ERR_LINE"
        else
            fail "without the preload: $label: no clean ERROR 55000 asking for shared_preload_libraries (see above)"
        fi
    done
    [[ $(cluster_sql "$dir" hasis_nopreload "SELECT count(*) FROM pg_extension WHERE extname = 'pg_hybrid'") == 0 ]] ||
        fail "without the preload: CREATE EXTENSION left the extension behind"
    [[ $(cluster_sql "$dir" "$db" "SELECT count(*) FROM pg_class WHERE relname IN ('bn_new', 'bn_ctas')") == 0 ]] ||
        fail "without the preload: CREATE TABLE ... USING hasis created a table"
    server_survived "$dir" "$state" "$logpos" "without the preload" && say "  server up: SELECT 1 works, same postmaster, no crash in the log"
    # back with the preload: the table is intact
    cluster_stop "$dir"
    cp "$w/postgresql.conf.preload" "$dir/data/postgresql.conf"
    cluster_start "$dir"
    [[ $(cluster_sql "$dir" "$db" "${SEQ[@]}" "SELECT count(*) || ' ' || md5(string_agg(k || v, ',' ORDER BY k)) FROM bn") == "$nexpect" ]] ||
        fail "bn changed while the server ran without the preload"
    verify_table "$dir" "$db" bn || fail "verify_table(bn) fails after the run without the preload"
    ((failures == 0))
}

# ======================================================================== main
selected() {
    local s=$1 x
    ((${#only[@]} == 0)) && return 0
    for x in "${only[@]}"; do [[ $x == "$s" ]] && return 0; done
    return 1
}


# ====================================================================== fkeys
sub_fkeys() {
    local dir db=hasis_fkeys secs=15 am w rc failed processed bad
    ((quick)) && secs=5
    failures=0
    dir=$(ph_scratch hasis_fkeys)
    cluster_init "$dir" "$PH_PORT" "deadlock_timeout = '50ms'"
    cluster_start "$dir"
    ph_prepare_db "$dir" "$db"
    w=$dir/work
    mkdir -p "$w"
    # Each transaction inserts a child row (its foreign key check takes a
    # FOR KEY SHARE lock on the parent) and then adds its amount to the
    # parent's total (a no-key update), or key-share locks a parent and
    # updates its note; 8 clients over 12 parents. On heap none of them
    # deadlocks (a no-key update shares the row with key-share lockers);
    # hasis must do the same, and every total must equal its children.
    cat >"$w/child.sql" <<'SQL'
\set p random(1, 12)
\set a random(1, 100)
BEGIN;
INSERT INTO child (parent_id, amount) VALUES (:p, :a);
UPDATE parent SET total = total + :a WHERE id = :p;
END;
SQL
    cat >"$w/note.sql" <<'SQL'
\set p random(1, 12)
BEGIN;
SELECT id FROM parent WHERE id = :p FOR KEY SHARE;
UPDATE parent SET note = md5(random()::text) WHERE id = :p;
INSERT INTO child (parent_id, amount) VALUES (:p, 0);
END;
SQL
    chown -R "$PH_USER:" "$w"
    for am in heap hasis; do
        cluster_sql "$dir" "$db" "DROP TABLE IF EXISTS child, parent" \
            "CREATE TABLE parent (id int PRIMARY KEY, total bigint NOT NULL DEFAULT 0, note text) USING $am" \
            "INSERT INTO parent SELECT g, 0, 'n' || g FROM generate_series(1, 12) g" \
            "CREATE TABLE child (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, parent_id int NOT NULL REFERENCES parent (id), amount int NOT NULL) USING $am" >/dev/null
        set +e
        ph_as_user "$PH_PGBIN/pgbench" -h "$dir/sock" -p "$PH_PORT" -U "$PH_USER" -n -c 8 -j 8 -T "$secs" \
            -f "$w/child.sql@3" -f "$w/note.sql@1" "$db" >"$w/pgbench.out" 2>"$w/pgbench.err"
        rc=$?
        set -e
        failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$w/pgbench.out")
        processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$w/pgbench.out")
        say "  $am: $processed transactions, ${failed:-?} failed (deadlocks)"
        if ((rc != 0)) || [[ $failed != 0 ]] || grep -qiE 'aborted|error' "$w/pgbench.err"; then
            grep -iE 'aborted|error|deadlock' "$w/pgbench.err" | head -5 >&2 || true
            fail "$am: pgbench exited $rc with ${failed:-?} failed transactions (expected none)"
        fi
        bad=$(cluster_sql "$dir" "$db" "${SEQ[@]}" \
            "SELECT count(*) FROM parent p WHERE p.total <> (SELECT coalesce(sum(amount), 0) FROM child c WHERE c.parent_id = p.id)")
        [[ $bad == 0 ]] || fail "$am: $bad parents whose total differs from their children's amounts"
        bad=$(cluster_sql "$dir" "$db" "${SEQ[@]}" "SELECT count(*) FROM child c WHERE NOT EXISTS (SELECT FROM parent p WHERE p.id = c.parent_id)")
        [[ $bad == 0 ]] || fail "$am: $bad child rows without their parent"
        if [[ $am == hasis ]]; then
            # a key update and a delete of a referenced parent fail, after
            # the key-share lockers are gone
            local err
            err=$(cluster_psql "$dir" "$db" -c "UPDATE parent SET id = 100 WHERE id = 1" 2>&1 || true)
            grep -q 'violates foreign key constraint' <<<"$err" || fail "a key update of a referenced parent did not fail: $err"
            err=$(cluster_psql "$dir" "$db" -c "DELETE FROM parent WHERE id = 2" 2>&1 || true)
            grep -q 'violates foreign key constraint' <<<"$err" || fail "a delete of a referenced parent did not fail: $err"
            cluster_sql "$dir" "$db" "VACUUM FREEZE parent" "VACUUM FREEZE child" >/dev/null
            verify_table "$dir" "$db" parent || fail "verify_table(parent) failed"
            verify_table "$dir" "$db" child || fail "verify_table(child) failed"
            ph_index_vs_seq "$dir" "$db" parent parent_pkey "id > 0" || fail "parent_pkey disagrees with a seq scan"
        fi
    done
    ((failures == 0))
}

# ===================================================================== logical
sub_logical() {
    local P S SPORT=$((PH_PORT + 1)) db=hasis_logical scale=2 secs=15 w rc t a b i done_ lsn
    ((quick)) && { scale=1; secs=5; }
    failures=0
    P=$(ph_scratch hasis_logical_pub)
    S=$(ph_scratch hasis_logical_sub)
    cluster_init "$P" "$PH_PORT" "wal_level = logical" "deadlock_timeout = '100ms'"
    cluster_init "$S" "$SPORT" "default_table_access_method = hasis"
    cluster_start "$P"
    cluster_start "$S"
    ph_prepare_db "$P" "$db"
    ph_prepare_db "$S" "$db"
    w=$P/work
    mkdir -p "$w"
    chown "$PH_USER:" "$w"
    local conn=(-h "$P/sock" -p "$PH_PORT" -U "$PH_USER")
    # The publisher's tables are hasis (pgbench's four, and one with TOAST
    # values under REPLICA IDENTITY FULL); the subscriber's are hasis too
    # (its default), so the apply worker's lookups by replica identity (index
    # and, for FULL, sequential) run on hasis as well.
    say "publisher: pgbench -i -s $scale with default_table_access_method = hasis; lt (TOAST, REPLICA IDENTITY FULL)"
    ph_as_user env PGOPTIONS="-c default_table_access_method=hasis -c client_min_messages=warning" \
        "$PH_PGBIN/pgbench" "${conn[@]}" -i -I dtgp -s "$scale" -q "$db" >"$w/init.out" 2>&1 ||
        { cat "$w/init.out" >&2; fail "pgbench -i on the publisher failed"; return 1; }
    local lt="CREATE TABLE lt (k int NOT NULL, v int, big text) USING hasis"
    cluster_sql "$P" "$db" "$lt" "ALTER TABLE lt REPLICA IDENTITY FULL" \
        "INSERT INTO lt SELECT g, 0, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 400) END FROM generate_series(1, 400) g" \
        "CREATE PUBLICATION hasis_pub FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history, lt" >/dev/null
    ph_as_user "$PH_PGBIN/pgbench" -h "$S/sock" -p "$SPORT" -U "$PH_USER" -i -I dtp -s "$scale" -q "$db" >"$w/init_sub.out" 2>&1 ||
        { cat "$w/init_sub.out" >&2; fail "pgbench -i -I dtp on the subscriber failed"; return 1; }
    cluster_sql "$S" "$db" "$lt" "TRUNCATE pgbench_branches, pgbench_tellers" >/dev/null
    a=$(cluster_sql "$S" "$db" "SELECT string_agg(DISTINCT a.amname, ',') FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname IN ('pgbench_accounts', 'pgbench_branches', 'pgbench_tellers', 'pgbench_history', 'lt')")
    [[ $a == hasis ]] || fail "the subscriber's tables are not all hasis: $a"
    say "subscriber: CREATE SUBSCRIPTION (initial copy of the hasis tables, then streaming)"
    cluster_sql "$S" "$db" "CREATE SUBSCRIPTION hasis_sub CONNECTION 'host=$P/sock port=$PH_PORT user=$PH_USER dbname=$db' PUBLICATION hasis_pub" >/dev/null
    done_=0
    for ((i = 0; i < 600; i++)); do
        [[ $(cluster_sql "$S" "$db" "SELECT count(*) FILTER (WHERE srsubstate <> 'r') || '/' || count(*) FROM pg_subscription_rel") == 0/5 ]] && { done_=1; break; }
        sleep 0.2
    done
    ((done_)) || { fail "the initial table copies did not finish in 120 s"; cluster_sql "$S" "$db" "SELECT srrelid::regclass, srsubstate FROM pg_subscription_rel" >&2; return 1; }
    # TPC-B, and updates and deletes of the TOAST table, on the publisher
    cat >"$w/lt.sql" <<'SQL'
\set k random(1, 400)
BEGIN;
UPDATE lt SET v = v + 1 WHERE k = :k;
\if :k % 8 = 0
INSERT INTO lt SELECT :k + 1000 * (1 + (random() * 1000)::int), :k, CASE WHEN :k % 3 = 0 THEN repeat(md5(:k::text), 300) END;
DELETE FROM lt WHERE k IN (SELECT k FROM lt WHERE k > 1000 AND v = :k LIMIT 1);
\endif
SAVEPOINT s;
UPDATE lt SET v = -1 WHERE k = :k;
ROLLBACK TO SAVEPOINT s;
END;
SQL
    chown "$PH_USER:" "$w/lt.sql"
    say "publisher: TPC-B (6 clients) and TOAST-table changes (2 clients), ${secs} s"
    set +e
    ph_as_user "$PH_PGBIN/pgbench" "${conn[@]}" -c 6 -j 6 -T "$secs" -M prepared -n "$db" >"$w/pgbench.out" 2>"$w/pgbench.err" &
    local bg=$!
    # (at 200 transactions a second: under REPLICA IDENTITY FULL the apply
    # worker finds each changed row of lt by a sequential scan)
    ph_as_user "$PH_PGBIN/pgbench" "${conn[@]}" -c 2 -j 2 -R 200 -T "$secs" -n -f "$w/lt.sql" "$db" >"$w/lt.out" 2>"$w/lt.err"
    rc=$?
    wait "$bg" || rc=$?
    set -e
    ((rc == 0)) || { cat "$w/pgbench.err" "$w/lt.err" | tail -20 >&2; fail "pgbench on the publisher failed (exit $rc)"; }
    say "  $(grep -h '^number of transactions actually processed' "$w/pgbench.out" "$w/lt.out" | tr '\n' ' ')"
    lsn=$(cluster_sql "$P" "$db" "SELECT pg_current_wal_lsn()")
    done_=0
    for ((i = 0; i < 900; i++)); do
        [[ $(cluster_sql "$P" "$db" "SELECT coalesce(bool_and(confirmed_flush_lsn >= '$lsn'), false) FROM pg_replication_slots WHERE slot_name = 'hasis_sub'") == t ]] && { done_=1; break; }
        sleep 0.2
    done
    ((done_)) || fail "the subscriber did not confirm $lsn within 180 s"
    # every table: the same rows on both sides (md5 of each row, as a multiset)
    for t in pgbench_accounts pgbench_branches pgbench_tellers pgbench_history lt; do
        local q="SELECT count(*) || ' ' || coalesce(md5(string_agg(h, ',' ORDER BY h)), '-') FROM (SELECT md5(r::text) h FROM $t r) x"
        a=$(cluster_sql "$P" "$db" "${SEQ[@]}" "$q")
        b=$(cluster_sql "$S" "$db" "${SEQ[@]}" "$q")
        if [[ $a == "$b" ]]; then
            say "  $t: publisher and subscriber agree (${a%% *} rows)"
        else
            fail "$t: publisher ($a) and subscriber ($b) differ"
        fi
        verify_table "$S" "$db" "$t" >/dev/null || fail "verify_table($t) on the subscriber failed"
    done
    local sums
    sums=$(cluster_sql "$S" "$db" "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(bbalance) FROM pgbench_branches) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || (SELECT coalesce(sum(delta), 0) FROM pgbench_history)")
    read -r -a a <<<"$sums"
    [[ ${#a[@]} == 4 && ${a[0]} == "${a[1]}" && ${a[1]} == "${a[2]}" && ${a[2]} == "${a[3]}" ]] ||
        fail "on the subscriber the balances do not add up: $sums"
    cluster_sql "$S" "$db" "DROP SUBSCRIPTION hasis_sub" >/dev/null
    ((failures == 0))
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
