#!/usr/bin/env bash
# tests/standby.sh [--quick] — a streaming replica returns the same answers as the primary.
#
# Primary on port P, standby made with pg_basebackup -R -X stream on port P+1
# (unix sockets only, hot_standby = on), taken BEFORE the table exists so that
# everything reaches the standby through WAL replay: CREATE INDEX (build), inserts
# (dynamic stage), pg_hybrid.merge(), more inserts, DELETE + pruning without
# VACUUM, DELETE + VACUUM.  After each
# stage: wait until pg_last_wal_replay_lsn() >= the primary's pg_current_wal_lsn(),
# then run the same queries (forced index scans) on both and compare the outputs
# (and with a seqscan on the primary);
# on the standby the indexes must also agree with a seqscan and
# pg_hybrid.verify() must pass on the standby (structure) and on the primary (heapallindexed).
# Then: kill -9 and restart of the standby, clean restart of the primary, more
# WAL, compare again; finally promote the standby and write to it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ph_parse_quick "$0" "$@"
N=200000
((quick)) && N=50000

ph_trap_install
AM=$PH_AM
DB=standby
P=$(ph_scratch standby_primary)
S=$PH_SCRATCH/standby_replica
SPORT=$((PH_PORT + 1))
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

cluster_init "$P" "$PH_PORT"
cluster_start "$P"
ph_prepare_db "$P" "$DB"

# ---------------------------------------------------------- the standby --
say "== pg_basebackup -R into $S (port $SPORT)"
ph_standby "$P" "$S" "$SPORT"

# ------------------------------------------------------------ workload --
ph_am_ddl "$AM"
opts=$PH_IDX_OPTS
tcoll=$PH_TCOLL   # collation of indexed text columns
ROWS="SELECT g, (g * 2654435761) % 4294967296, g % 5000, 'v' || (g % 777)"
psql_p() { cluster_sql "$P" "$DB" "$@" >/dev/null; }

FORCE=("SET enable_seqscan=off" "SET enable_bitmapscan=off")
SEQ=("SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off")
QUERIES=(
    "SELECT md5(string_agg(id::text, ',')) FROM (SELECT id FROM st WHERE id >= 0 ORDER BY id) s"
    "SELECT md5(string_agg(id::text, ',')) FROM (SELECT id FROM st WHERE id >= 0 ORDER BY id DESC) s"
    "SELECT id, k, v FROM st WHERE id = ANY (ARRAY(SELECT (g * 2654435761) % 4294967296 FROM generate_series(1, 3000000, 997) g)) ORDER BY id"
    "SELECT count(*), sum(id) FROM st WHERE k BETWEEN 100 AND 400"
    "SELECT count(*), sum(id) FROM st WHERE k = 4999"
    "SELECT k, v, id FROM st WHERE k >= 2500 ORDER BY k, v LIMIT 300"
    "SELECT k, v FROM st WHERE k < 10 ORDER BY k DESC, v DESC LIMIT 200"
    "SELECT count(*) FROM st WHERE k IS NULL"
    "SELECT count(*) FROM st WHERE id IN (1, 2654435761, 5308871522, 7963307283)"
    "SELECT count(*), sum(k) FROM st WHERE id BETWEEN 1000000000 AND 3000000000"
    "SELECT md5(string_agg(id::text, ',')) FROM (SELECT id FROM st WHERE id < 2000000000 ORDER BY id DESC LIMIT 5000) s"
    "SELECT count(*), sum(id) FROM st WHERE k BETWEEN 1000 AND 1100 AND v < 'v5'"
)

# An AM without order (tiered_hash) answers equality only: its queries are
# probes of one key, by a constant or from a nested loop, on every key
# column or the leading one.
ORDERED=$(cluster_sql "$P" "$DB" "SELECT coalesce(pg_indexam_has_property(oid, 'can_order'), true) FROM pg_am WHERE amname = '$AM'")
if [[ $ORDERED == f ]]; then
    QUERIES=(
        "SELECT count(*), sum(s.k) FROM generate_series(1, 3000000, 997) g, LATERAL (SELECT k FROM st WHERE id = (g * 2654435761) % 4294967296 OFFSET 0) s"
        "SELECT count(*), sum(id) FROM st WHERE k = 4999"
        "SELECT count(*), sum(id) FROM st WHERE k = 17 AND v = 'v17'"
        "SELECT count(*), sum(s.id) FROM generate_series(0, 4999, 7) g, LATERAL (SELECT id FROM st WHERE k = g AND v = 'v' || (g % 777) OFFSET 0) s"
        "SELECT count(*), sum(s.id) FROM generate_series(0, 4999, 13) g, LATERAL (SELECT id FROM st WHERE k = g OFFSET 0) s"
        "SELECT count(*) FROM st WHERE id = 2654435761"
        "SELECT count(*), sum(k) FROM st WHERE id = 5308871522"
    )
fi

compare() {   # STAGE
    local stage=$1 q i a b c plan
    ph_wait_replay "$P" "$S" "$DB"
    for i in "${!QUERIES[@]}"; do
        q=${QUERIES[$i]}
        plan=$(cluster_sql "$S" "$DB" "${FORCE[@]}" "EXPLAIN (COSTS OFF) $q")
        grep -Eq "(using|on) st_(id|k)( |$)" <<<"$plan" ||
            { fail "$stage: query $i does not use an st_* index on the standby:"; echo "$plan" >&2; }
        a=$(cluster_sql "$P" "$DB" "${FORCE[@]}" "$q" | md5sum)
        b=$(cluster_sql "$S" "$DB" "${FORCE[@]}" "$q" | md5sum)
        # and both must be the truth: the same query by seqscan on the primary
        # (skipped for a LIMIT that may cut through ties)
        if [[ $q != *LIMIT* || $q == *"ORDER BY id"* ]]; then
            c=$(cluster_sql "$P" "$DB" "${SEQ[@]}" "$q" | md5sum)
            if [[ $a != "$c" ]]; then
                fail "$stage: query $i through the indexes differs from a seqscan on the primary: $q"
                diff <(cluster_sql "$P" "$DB" "${FORCE[@]}" "$q") <(cluster_sql "$P" "$DB" "${SEQ[@]}" "$q") | head -10 >&2 || true
            fi
        fi
        if [[ $a != "$b" ]]; then
            fail "$stage: query $i differs between primary and standby: $q"
            diff <(cluster_sql "$P" "$DB" "${FORCE[@]}" "$q") <(cluster_sql "$S" "$DB" "${FORCE[@]}" "$q") | head -20 >&2 || true
        fi
    done
    ph_index_vs_seq "$S" "$DB" st st_id "id >= -100" || fail "$stage: standby st_id disagrees with seqscan"
    ph_index_vs_seq "$S" "$DB" st st_k "k >= 0" || fail "$stage: standby st_k disagrees with seqscan"
    standby_verify "$stage"
    # The sync lag: the primary knows when its unmerged entries came, a
    # standby (which replays them) does not and says NULL.
    local lag
    lag=$(cluster_sql "$P" "$DB" "SELECT lag_ms >= 0 FROM pg_hybrid.sync_lag('st_k'::regclass)" 2>&1)
    [[ $lag == t ]] || fail "$stage: sync_lag on the primary: $lag"
    lag=$(cluster_sql "$S" "$DB" "SELECT coalesce(lag_ms::text, 'NULL') FROM pg_hybrid.sync_lag('st_k'::regclass)" 2>&1)
    [[ $lag == NULL ]] || fail "$stage: sync_lag on the standby should be NULL: $lag"
    if [[ $AM == elastic_btree ]]; then
        # the leaf forms and the elasticity state live in pages: replay must
        # reproduce them exactly
        local sq="SELECT standard_leaves || ' standard, ' || compact_leaves || ' compact, ' || state FROM pg_hybrid.index_stats"
        for idx in st_id st_k; do
            a=$(cluster_sql "$P" "$DB" "$sq('$idx'::regclass)")
            b=$(cluster_sql "$S" "$DB" "$sq('$idx'::regclass)" 2>&1)
            [[ $a == "$b" ]] || fail "$stage: $idx leaves differ: primary $a, standby $b"
            say "  $stage: $idx: $a"
        done
    fi
    say "  $stage: primary and standby agree (${#QUERIES[@]} queries, $(cluster_sql "$S" "$DB" "SELECT count(*) FROM st") rows)"
}

standby_verify() {
    # The structure is checked on the standby; heapallindexed needs a heap
    # that replay does not change, so it runs on the primary (ph_verify).
    local stage=$1 idx err
    for idx in st_id st_k; do
        if ! err=$(cluster_sql "$S" "$DB" "SELECT pg_hybrid.verify('$idx'::regclass, heapallindexed => false)" 2>&1 >/dev/null); then
            fail "$stage: verify($idx) on the standby: $err"
        fi
    done
}

say "== workload (am=$AM, $N rows)"
psql_p "CREATE TABLE st (id int8 NOT NULL, k int8, v text$tcoll, pad int8)" \
    "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'v' || (g % 777), g FROM generate_series(1, $N) g" \
    "INSERT INTO st (id, k, v) SELECT -g, NULL, NULL FROM generate_series(1, 50) g" \
    "CREATE UNIQUE INDEX st_id ON st USING $AM (id)$opts" \
    "CREATE INDEX st_k ON st USING $AM (k, v)$opts" \
    "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'v' || (g % 777), g FROM generate_series($N + 1, $N * 3 / 2) g"
compare "build + inserts"

psql_p "SELECT pg_hybrid.merge('st_id'::regclass)" "SELECT pg_hybrid.merge('st_k'::regclass)" \
    "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'v' || (g % 777), g FROM generate_series($N * 3 / 2 + 1, $N * 2) g"
compare "merge + inserts"

# Standby scans while the primary merges: merge steps recycle retired pages
# as soon as no primary reader holds them, so replay reuses pages that a
# standby scan is still reading; the scan must move on to the current stage,
# never fail and never return other rows. Under one REPEATABLE READ snapshot
# the index scan and a seqscan must agree.
say "== standby scans during merges on the primary"
rounds=6; ((quick)) && rounds=3
chunk=$((N / 4))
(
    for ((r = 0; r < rounds; r++)); do
        lo=$((N * 10 + r * chunk))
        psql_p "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'm', g FROM generate_series($lo, $lo + $chunk - 1) g" \
            "SELECT pg_hybrid.merge('st_id'::regclass)"
    done
) &
writer=$!
scans=0
while kill -0 $writer 2>/dev/null; do
    if [[ $ORDERED == f ]]; then
        # every id a seqscan sees, probed through st_id under the same snapshot
        scan_sql=$(cat <<'SQL'
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
SELECT count(*) || ' ' || coalesce(sum(s.id), 0) FROM (SELECT id FROM st WHERE id >= 0) d, LATERAL (SELECT id FROM st t WHERE t.id = d.id OFFSET 0) s;
SELECT count(*) || ' ' || coalesce(sum(s.id), 0) FROM (SELECT id FROM st WHERE id >= 0) d, LATERAL (SELECT id FROM st t WHERE t.id = d.id OFFSET 0) s;
SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off;
SELECT count(*) || ' ' || coalesce(sum(id), 0) FROM st WHERE id >= 0;
COMMIT;
SQL
        )
    else
        scan_sql=$(cat <<'SQL'
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
SELECT count(*) || ' ' || coalesce(sum(id), 0) FROM st WHERE id >= 0;
SELECT count(*) || ' ' || coalesce(sum(id), 0) FROM (SELECT id FROM st WHERE id >= 0 ORDER BY id DESC) d;
SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off;
SELECT count(*) || ' ' || coalesce(sum(id), 0) FROM st WHERE id >= 0;
COMMIT;
SQL
        )
    fi
    if ! out=$(cluster_psql "$S" "$DB" -qAt -v ON_ERROR_STOP=1 2>&1 <<<"$scan_sql"); then
        kill $writer 2>/dev/null || true
        fail "a standby scan during merges on the primary failed: $out"
    fi
    mapfile -t res <<<"$out"
    if [[ ${#res[@]} != 3 || ${res[0]} != "${res[2]}" || ${res[1]} != "${res[2]}" ]]; then
        kill $writer 2>/dev/null || true
        fail "standby index scans disagree with a seqscan under one snapshot during merges: ${res[*]}"
    fi
    scans=$((scans + 1))
done
wait $writer || fail "the primary's inserts and merges failed"
say "  $scans standby scans during $rounds merges agreed with seqscans"
compare "merges under standby scans"

# deleted rows pruned by a seqscan on the primary (PRUNE WAL records), not yet
# vacuumed: the standby's index entries point at dead line pointers; an
# elastic_btree compact leaf cannot read their keys there either
psql_p "DELETE FROM st WHERE pad % 5 = 1" "SET enable_indexscan = off" "SET enable_bitmapscan = off" \
    "SET enable_indexonlyscan = off" "SELECT count(*) FROM st"
compare "delete + prune, no vacuum"

# index scans on the primary report deleted rows (killed-tuple hints); the
# next merge drops their entries from the leaves it rewrites, after a WAL
# record that cancels standby snapshots which could still see those rows
psql_p "DELETE FROM st WHERE pad % 5 = 2" "SET enable_seqscan = off" "SET enable_bitmapscan = off" \
    "SET enable_indexonlyscan = off" "SELECT count(*) FROM st WHERE k >= 0" "SELECT count(*) FROM st WHERE id >= 0" \
    "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'h' || (g % 777), g FROM generate_series($N * 6, $N * 6 + $N / 20) g" \
    "SELECT pg_hybrid.merge('st_k'::regclass)" "SELECT pg_hybrid.merge('st_id'::regclass)"
# the same on a table with room on its pages, so the deleted tuples are not
# pruned before the merge and it logs a snapshot-conflict horizon
psql_p "CREATE TABLE sh (k int8) WITH (fillfactor = 50, autovacuum_enabled = off)" \
    "INSERT INTO sh SELECT generate_series(1, 20000)" "CREATE INDEX sh_k ON sh USING $AM (k)" \
    "DELETE FROM sh WHERE k <= 5000" "SELECT pg_sleep(0.2)" "SET enable_seqscan = off" "SET enable_bitmapscan = off" \
    "SELECT count(*) FROM sh WHERE k > 0" "INSERT INTO sh SELECT 10 * generate_series(1, 450)" "SELECT pg_hybrid.merge('sh_k'::regclass)"
compare "merges dropping hinted entries"
ph_wait_replay "$P" "$S" "$DB"
for side in "$P" "$S"; do
    ph_index_vs_seq "$side" "$DB" sh sh_k "k > 0" || fail "merges dropping hinted entries: sh_k disagrees with seqscan on $side"
done

psql_p "DELETE FROM st WHERE pad % 3 = 0" "VACUUM st" \
    "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'w' || (g % 777), g FROM generate_series($N * 2 + 1, $N * 2 + $N / 10) g" \
    "UPDATE st SET k = k + 1 WHERE pad % 7 = 0"
compare "delete + vacuum + update"

say "== kill -9 of the standby, restart"
cluster_kill9 "$S"
cluster_start "$S"
cluster_wait_ready "$S"
compare "standby restarted after crash"

say "== clean restart of the primary with unmerged inserts"
psql_p "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'x' || (g % 777), g FROM generate_series($N * 3, $N * 3 + $N / 5) g"
cluster_stop "$P" fast
cluster_start "$P"
cluster_wait_ready "$P"
psql_p "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'y' || (g % 777), g FROM generate_series($N * 4, $N * 4 + $N / 5) g" \
    "SELECT pg_hybrid.merge('st_k'::regclass)"
compare "primary restarted"

say "== promote the standby and write to it"
ph_as_user "$PH_PGBIN/pg_ctl" promote -w -D "$S/data" >/dev/null
[[ $(cluster_sql "$S" "$DB" "SELECT pg_is_in_recovery()") == f ]] || fail "standby did not leave recovery"
cluster_sql "$S" "$DB" \
    "INSERT INTO st (id, k, v, pad) SELECT (g * 2654435761) % 4294967296, g % 5000, 'z', g FROM generate_series($N * 5, $N * 5 + 1000) g" \
    "SELECT pg_hybrid.merge('st_id'::regclass)" >/dev/null || fail "writes on the promoted standby failed"
dup=$(cluster_sql "$S" "$DB" "SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off" \
    "SELECT count(*) FROM (SELECT id FROM st GROUP BY id HAVING count(*) > 1) d")
[[ $dup == 0 ]] || fail "promoted: $dup duplicate ids"
ph_index_vs_seq "$S" "$DB" st st_id "id >= -100" || fail "promoted: st_id disagrees with seqscan"
ph_index_vs_seq "$S" "$DB" st st_k "k >= 0" || fail "promoted: st_k disagrees with seqscan"
ph_verify "$S" "$DB" st_id || fail "promoted: verify(st_id)"
ph_verify "$S" "$DB" st_k || fail "promoted: verify(st_k)"

if [[ $AM == elastic_btree && -n ${PH_SIZE_BOUND:-} ]]; then
    [[ $(cluster_sql "$S" "$DB" "SELECT compact_leaves > 0 FROM pg_hybrid.index_stats('st_id'::regclass)") == t ]] ||
        fail "st_id has no compact leaf under size_bound $PH_SIZE_BOUND: replay of compact leaves was not exercised"
fi

if ((failures)); then
    echo "standby: FAIL ($failures problems; logs $P/postgres.log $S/postgres.log)"
    exit 1
fi
echo "standby: PASS"
