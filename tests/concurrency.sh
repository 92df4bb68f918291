#!/usr/bin/env bash
# tests/concurrency.sh [--quick] [--clients N] [--seconds S]
#
# pgbench (8 clients, -M prepared, 45 s; 15 s with --quick) on a table with a
# UNIQUE index and a non-unique index of the AM ($PH_AM), running a weighted
# mix: inserts of random keys with ON CONFLICT DO NOTHING, plain inserts of
# 50 hot keys that catch unique_violation (contended unique checks), upserts,
# deletes, non-key updates, key moves (DELETE ... RETURNING -> INSERT),
# delete-and-reinsert of the 50 hot keys in one transaction (TID reuse), point
# reads, range reads, secondary-key reads, and inserts into a ledger table.
# If the AM refuses ON CONFLICT (PostgreSQL 15 does speculative insertion only
# through btree), inserts/upserts/moves go through plpgsql functions that
# catch unique_violation instead.
# Meanwhile one more client runs pg_hybrid.merge() on every index every 2 s
# (and VACUUM every 2nd time), and a DDL
# client keeps sending relcache invalidations for kv and its indexes while
# the ON CONFLICT clients open them: CREATE / DROP INDEX CONCURRENTLY of a
# btree and of an AM index, ALTER TABLE ... SET STATISTICS, ANALYZE (and once CREATE INDEX CONCURRENTLY
# of an AM index that stays).
# Afterwards:
#   - pgbench exited 0, no client aborted (only serialization/deadlock failures,
#     retried with --max-tries, are tolerated), merges raised no error;
#   - no duplicate key (GROUP BY ... HAVING count(*) > 1 on a seqscan);
#   - every index agrees with a seqscan and pg_hybrid.verify(.., true) passes;
#   - the ledger holds at least as many rows as pgbench counted committed ledger
#     transactions (no lost row), and at most that + one in-flight per client;
#   - upserts (ON CONFLICT DO UPDATE n = n + 1) on 20 hot keys: one row per key
#     and sum(n) equals the committed upserts (same in-flight margin).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

clients=8
seconds=45
while (($#)); do
    case $1 in
        --quick) seconds=15 ;;
        --clients) shift; clients=$1 ;;
        --seconds) shift; seconds=$1 ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "concurrency.sh: unknown option $1" ;;
    esac
    shift
done

ph_trap_install
AM=$PH_AM
DB=concurrency
DIR=$(ph_scratch concurrency)
cluster_init "$DIR" "$PH_PORT" "max_connections = 60" "deadlock_timeout = '100ms'"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

ph_am_ddl "$AM"
opts=$PH_IDX_OPTS
tcoll=$PH_TCOLL   # collation of indexed text columns
cluster_sql "$DIR" "$DB" \
    "CREATE TABLE kv (k int8 NOT NULL, v int8 NOT NULL, pad text$tcoll)" \
    "INSERT INTO kv SELECT g, g % 1000, 'init' FROM generate_series(1, 200000, 2) g" \
    "CREATE UNIQUE INDEX kv_k ON kv USING $AM (k)$opts" \
    "CREATE INDEX kv_v ON kv USING $AM (v)$opts" \
    "CREATE TABLE ledger (id int8 NOT NULL, client int)" \
    "CREATE UNIQUE INDEX ledger_id ON ledger USING $AM (id)$opts" \
    "CREATE SEQUENCE ledger_seq" \
    "CREATE TABLE counter (k int8 NOT NULL, n int8 NOT NULL)" \
    "CREATE UNIQUE INDEX counter_k ON counter USING $AM (k)$opts" \
    "VACUUM ANALYZE kv" >/dev/null

# PostgreSQL 15 runs INSERT ... ON CONFLICT only through btree unique indexes;
# an AM may refuse it (SQLSTATE 0A000).  Then the scripts use plpgsql functions
# that catch unique_violation instead (the unique check under contention).
onconflict=1
if ! err=$(cluster_sql "$DIR" "$DB" "INSERT INTO kv VALUES (1, 1, 'probe') ON CONFLICT (k) DO NOTHING" 2>&1); then
    grep -q "not supported" <<<"$err" || ph_die "ON CONFLICT probe failed: $err"
    onconflict=0
    echo "note: $AM refuses INSERT ... ON CONFLICT; inserts/upserts/moves use unique_violation handlers"
fi
cluster_sql "$DIR" "$DB" \
    "CREATE FUNCTION kv_insert(key int8, tag text) RETURNS text LANGUAGE plpgsql AS \$\$
     BEGIN
         INSERT INTO kv VALUES (key, key % 1000, tag);
         RETURN 'inserted';
     EXCEPTION WHEN unique_violation THEN
         RETURN 'duplicate';
     END \$\$" \
    "CREATE FUNCTION kv_upsert(key int8) RETURNS void LANGUAGE plpgsql AS \$\$
     BEGIN
         UPDATE kv SET v = v + 1, pad = 'upd' WHERE k = key;
         IF NOT FOUND THEN
             BEGIN
                 INSERT INTO kv VALUES (key, key % 1000, 'ups');
             EXCEPTION WHEN unique_violation THEN
                 UPDATE kv SET v = v + 1, pad = 'upd' WHERE k = key;
             END;
         END IF;
     END \$\$" \
    "CREATE FUNCTION kv_move(key int8, key2 int8) RETURNS void LANGUAGE plpgsql AS \$\$
     DECLARE val int8;
     BEGIN
         DELETE FROM kv WHERE k = key RETURNING v INTO val;
         IF FOUND THEN
             BEGIN
                 INSERT INTO kv VALUES (key2, val, 'moved');
             EXCEPTION WHEN unique_violation THEN
                 NULL;
             END;
         END IF;
     END \$\$" >/dev/null

# ------------------------------------------------------- pgbench scripts --
W=$DIR/pgbench
mkdir -p "$W"
if ((onconflict)); then
    ins="INSERT INTO kv VALUES (:k, :k % 1000, 'ins') ON CONFLICT (k) DO NOTHING;"
    ups="INSERT INTO kv VALUES (:k, :k % 1000, 'ups') ON CONFLICT (k) DO UPDATE SET v = kv.v + 1, pad = 'upd';"
    mov="WITH d AS (DELETE FROM kv WHERE k = :k RETURNING v) INSERT INTO kv SELECT :k2, v, 'moved' FROM d ON CONFLICT (k) DO NOTHING;"
else
    ins="SELECT kv_insert(:k, 'ins');"
    ups="SELECT kv_upsert(:k);"
    mov="SELECT kv_move(:k, :k2);"
fi
printf '%s\n%s\n' '\set k random(1, 200000)' "$ins" >"$W/insert.sql"
cat >"$W/hot.sql" <<'EOF'
\set k random(1, 50)
SELECT kv_insert(:k, 'hot');
EOF
printf '%s\n%s\n' '\set k random(1, 400)' "$ups" >"$W/upsert.sql"
# Churn on the 50 hot keys: delete the row and insert it again in one
# transaction, so VACUUM keeps freeing the key's old TIDs while unique
# checks, merges and (tiered) promotions read its entries, and new rows
# reuse them.
if ((onconflict)); then
    churn_ins="INSERT INTO kv VALUES (:k, :k % 1000, 'churn') ON CONFLICT (k) DO NOTHING;"
else
    churn_ins="SELECT kv_insert(:k, 'churn');"
fi
printf '%s\n%s\n%s\n%s\n%s\n' '\set k random(1, 50)' 'BEGIN;' 'DELETE FROM kv WHERE k = :k;' "$churn_ins" 'COMMIT;' >"$W/churn.sql"
cat >"$W/delete.sql" <<'EOF'
\set k random(1, 200000)
DELETE FROM kv WHERE k = :k;
EOF
cat >"$W/update.sql" <<'EOF'
\set k random(1, 200000)
UPDATE kv SET v = v + 1 WHERE k = :k;
EOF
printf '%s\n%s\n%s\n' '\set k random(1, 200000)' '\set k2 random(1, 200000)' "$mov" >"$W/move.sql"
cat >"$W/point.sql" <<'EOF'
\set k random(1, 200000)
SELECT k, v, pad FROM kv WHERE k = :k;
EOF
cat >"$W/range.sql" <<'EOF'
\set k random(1, 200000)
SELECT count(*), sum(v) FROM kv WHERE k BETWEEN :k AND :k + 200;
EOF
cat >"$W/vread.sql" <<'EOF'
\set v random(0, 999)
SELECT count(*) FROM kv WHERE v = :v;
EOF
cat >"$W/ledger.sql" <<'EOF'
INSERT INTO ledger VALUES (nextval('ledger_seq'), :client_id);
EOF
# Upserts on 20 hot keys: every committed one adds exactly 1 to sum(n).
if ((onconflict)); then
    printf '%s\n%s\n' '\set k random(1, 20)' \
        "INSERT INTO counter VALUES (:k, 1) ON CONFLICT (k) DO UPDATE SET n = counter.n + 1;" >"$W/counter.sql"
else
    printf '%s\n%s\n' '\set k random(1, 20)' "INSERT INTO counter VALUES (-nextval('ledger_seq'), 1);" >"$W/counter.sql"
fi
chown -R "$PH_USER:" "$W"

# ------------------------------------------------------------- merger --
STOP=$DIR/stop
rm -f "$STOP"
merger() {
    local i=0 err
    while [[ ! -e $STOP ]]; do
        sleep 2
        i=$((i + 1))
        local stmts=("SELECT pg_hybrid.merge('kv_k'::regclass)" "SELECT pg_hybrid.merge('kv_v'::regclass)"
                     "SELECT pg_hybrid.merge('ledger_id'::regclass)" "SELECT pg_hybrid.merge('counter_k'::regclass)")
        ((i % 2 == 0)) && stmts+=("VACUUM kv")
        if ! err=$(cluster_sql "$DIR" "$DB" "${stmts[@]}" 2>&1 >/dev/null); then
            [[ -e $STOP ]] && break
            echo "merge error: $err"
        else
            echo "merge round $i ok"
        fi
    done
}
merger >"$DIR/merger.log" 2>&1 &
MPID=$!
ph_bg_add $MPID

# ----------------------------------------------------------------- DDL --
# Relcache invalidations for kv and its indexes, all the time: an executor
# that opens kv's indexes for ON CONFLICT must not depend on relcache
# entries staying put while it takes locks.
ddl() {
    local i=0 err am
    while [[ ! -e $STOP ]]; do
        i=$((i + 1))
        am=btree
        ((i % 2 == 0)) && am=$AM
        # Once, under load: CREATE INDEX CONCURRENTLY must catch up with the
        # rows written between its build and validate phases (the DDL runs
        # in this one client: two CICs on one table wait for each other).
        if ((i == 3)) && ! err=$(cluster_sql "$DIR" "$DB" "CREATE INDEX CONCURRENTLY kv_pad_cic ON kv USING $AM (pad, k)" 2>&1 >/dev/null); then
            echo "ddl error: $err"
        fi
        if ! err=$(cluster_sql "$DIR" "$DB" \
            "CREATE INDEX CONCURRENTLY kv_ddl_$i ON kv USING $am (v)" \
            "ALTER TABLE kv ALTER COLUMN pad SET STATISTICS $((50 + i % 50))" \
            "ANALYZE kv" \
            "DROP INDEX CONCURRENTLY kv_ddl_$i" 2>&1 >/dev/null); then
            [[ -e $STOP ]] && break
            echo "ddl error: $err"
        else
            echo "ddl round $i ok"
        fi
        sleep 0.3
    done
}
ddl >"$DIR/ddl.log" 2>&1 &
DPID=$!
ph_bg_add $DPID

# -------------------------------------------------------------- pgbench --
say "== pgbench: $clients clients, ${seconds}s, am=$AM"
set +e
ph_as_user env PGOPTIONS="-c enable_seqscan=off" "$PH_PGBIN/pgbench" -n -h "$DIR/sock" -p "$PH_PORT" -U "$PH_USER" \
    -c "$clients" -j 2 -T "$seconds" -M prepared --max-tries=20 --failures-detailed -P 10 \
    -f "$W/insert.sql@25" -f "$W/hot.sql@10" -f "$W/upsert.sql@5" -f "$W/delete.sql@12" \
    -f "$W/update.sql@10" -f "$W/move.sql@5" -f "$W/point.sql@15" -f "$W/range.sql@10" \
    -f "$W/vread.sql@3" -f "$W/ledger.sql@5" -f "$W/counter.sql@5" -f "$W/churn.sql@5" "$DB" >"$DIR/pgbench.out" 2>"$DIR/pgbench.err"
rc=$?
set -e
touch "$STOP"
wait $MPID || true
wait $DPID || true
ph_pgbench_summary "$DIR" "$rc" || fail "pgbench (above)"
other=$(awk '/^number of other failures/ {print $5}' "$DIR/pgbench.out")
[[ -z $other || $other == 0 ]] || fail "pgbench: $other failures other than serialization/deadlock"
if grep -q '^merge error' "$DIR/merger.log"; then
    fail "pg_hybrid.merge() raised errors under load:"
    grep '^merge error' "$DIR/merger.log" | head -5 >&2
fi
say "  merger: $(grep -c 'ok$' "$DIR/merger.log" || true) merge rounds"
if grep -q '^ddl error' "$DIR/ddl.log"; then
    fail "DDL under load raised errors:"
    grep '^ddl error' "$DIR/ddl.log" | head -5 >&2
fi
say "  ddl: $(grep -c 'ok$' "$DIR/ddl.log" || true) rounds of CREATE/DROP INDEX CONCURRENTLY + ANALYZE"
if grep -q 'speculative unique index' "$DIR/pgbench.err" "$DIR/pgbench.out"; then
    fail "ON CONFLICT clients saw a speculative-insertion setup error (relcache race)"
fi

# --------------------------------------------------------------- checks --
say "== checks"
SEQ=("SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off")
dup=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "SELECT count(*) FROM (SELECT k FROM kv GROUP BY k HAVING count(*) > 1) d")
[[ $dup == 0 ]] || fail "$dup duplicated keys in kv under the UNIQUE index"
dup=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "SELECT count(*) FROM (SELECT id FROM ledger GROUP BY id HAVING count(*) > 1) d")
[[ $dup == 0 ]] || fail "$dup duplicated ids in ledger"
# kv_k is checked after kv_pad_cic (pad, k) is dropped: for "k >= 0", every
# row, a whole scan of either index costs the same and the planner may take
# kv_pad_cic.
ph_index_vs_seq "$DIR" "$DB" kv kv_v "v >= 0" || fail "kv_v disagrees with seqscan"
ph_index_vs_seq "$DIR" "$DB" ledger ledger_id "id >= 0" || fail "ledger_id disagrees with seqscan"
# ledger: committed ledger transactions (pgbench's per-script count) == rows
ledger_tx=$(awk '/^SQL script [0-9]+: .*ledger\.sql/ {f=1; next} f && /transactions \(/ {print $2; exit}' "$DIR/pgbench.out")
ledger_rows=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "SELECT count(*) FROM ledger")
if [[ -z $ledger_tx ]]; then
    fail "could not read the ledger transaction count from pgbench output"
elif ((ledger_rows < ledger_tx)); then
    fail "ledger: pgbench committed $ledger_tx ledger transactions but the table holds only $ledger_rows rows (lost rows)"
elif ((ledger_rows > ledger_tx + clients)); then
    fail "ledger: the table holds $ledger_rows rows, more than the $ledger_tx committed ledger transactions + $clients in flight at the end"
else
    # a client's last transaction may commit after pgbench stopped counting at -T
    echo "  ledger: $ledger_rows rows for $ledger_tx transactions counted by pgbench (+ up to $clients in flight at the end)"
fi
# counter: sum(n) == committed upserts, one row per key
counter_tx=$(awk '/^SQL script [0-9]+: .*counter\.sql/ {f=1; next} f && /transactions \(/ {print $2; exit}' "$DIR/pgbench.out")
counter_sum=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "SELECT coalesce(sum(n), 0) FROM counter")
dup=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "SELECT count(*) FROM (SELECT k FROM counter GROUP BY k HAVING count(*) > 1) d")
[[ $dup == 0 ]] || fail "$dup duplicated keys in counter under the UNIQUE index"
if [[ -z $counter_tx ]]; then
    fail "could not read the counter transaction count from pgbench output"
elif ((counter_sum < counter_tx || counter_sum > counter_tx + clients)); then
    fail "counter: sum(n) = $counter_sum for $counter_tx committed upserts (+ up to $clients in flight)"
else
    echo "  counter: sum(n) = $counter_sum for $counter_tx upserts counted by pgbench"
fi
ph_index_vs_seq "$DIR" "$DB" counter counter_k "k >= -1000000000" || fail "counter_k disagrees with seqscan"
valid=$(cluster_sql "$DIR" "$DB" "SELECT indisvalid FROM pg_index WHERE indexrelid = 'kv_pad_cic'::regclass" 2>&1)
[[ $valid == t ]] || fail "CREATE INDEX CONCURRENTLY under load did not leave a valid index: $valid"
ph_index_vs_seq "$DIR" "$DB" kv kv_pad_cic "pad >= ''" || fail "kv_pad_cic (built concurrently) disagrees with seqscan"
for idx in kv_k kv_v ledger_id counter_k kv_pad_cic; do
    ph_verify "$DIR" "$DB" "$idx" || fail "verify($idx)"
done
cluster_sql "$DIR" "$DB" "SELECT 'kv_k', * FROM pg_hybrid.index_stats('kv_k'::regclass)" | sed 's/^/  index_stats: /'
cluster_sql "$DIR" "$DB" "DROP INDEX CONCURRENTLY kv_pad_cic" >/dev/null || fail "DROP INDEX CONCURRENTLY kv_pad_cic"
ph_index_vs_seq "$DIR" "$DB" kv kv_k "k >= 0" || fail "kv_k disagrees with seqscan"
# once more after a final merge + vacuum
cluster_sql "$DIR" "$DB" "SELECT pg_hybrid.merge('kv_k'::regclass)" "VACUUM kv" "SELECT pg_hybrid.merge('kv_v'::regclass)" >/dev/null
ph_index_vs_seq "$DIR" "$DB" kv kv_k "k >= 0" || fail "kv_k disagrees with seqscan after merge + vacuum"
ph_verify "$DIR" "$DB" kv_k || fail "verify(kv_k) after merge + vacuum"

if [[ $AM == elastic_btree && -n ${PH_SIZE_BOUND:-} ]]; then
    cluster_sql "$DIR" "$DB" "SELECT 'kv_k state ' || state || ', ' || standard_leaves || ' standard / ' || compact_leaves || ' compact leaves' FROM pg_hybrid.index_stats('kv_k'::regclass)" | sed 's/^/  /'
    [[ $(cluster_sql "$DIR" "$DB" "SELECT compact_leaves > 0 FROM pg_hybrid.index_stats('kv_k'::regclass)") == t ]] ||
        fail "kv_k has no compact leaf under size_bound $PH_SIZE_BOUND: compact leaves were not exercised"
fi

if ((failures)); then
    echo "concurrency: FAIL ($failures problems; logs in $DIR)"
    exit 1
fi
echo "concurrency: PASS"
