#!/usr/bin/env bash
# tests/convert.sh [--quick] [--clients N] [--seconds S] [--grow-only] — leaf conversions
# (standard -> compact and back) under concurrent readers.
#
# Table cv: S "stable" rows (k = 10, 20, ..., 10*S, grp 0) that no one ever
# changes, and "churn" rows (k not a multiple of 10, grp 1).  Indexes of the
# AM ($PH_AM) on (k) and on (grp, k); for elastic_btree with a size_bound
# (PH_SIZE_BOUND, default 768kB) that growth of the churn crosses.
# pgbench clients (-M simple, enable_seqscan off) only read, and check every
# answer against what the stable rows dictate:
#   range      count of grp-0 rows with k in [a, b] = b/10 - (a-1)/10
#              (index scan; a second script does the same through bitmap scans)
#   point      k = 10*i finds exactly one row, with grp 0
#   desc       the largest grp-0 key <= a (ORDER BY k DESC LIMIT 1) is (a/10)*10
#   grp        count of grp 0 with k <= a through the (grp, k) index
#   cursor     a cursor over all grp-0 rows in k order (forward or backward),
#              fetched row by row with pauses, so the scan stays positioned
#              inside leaves while they split or convert: every stable key must
#              come exactly once, in order
# A wrong answer inserts a row into table bad (no error, so the run goes on
# and every mismatch is kept).  Meanwhile one writer cycles: insert churn rows
# in batches with pg_hybrid.merge() after each (the index grows past the
# bound: shrinking, leaves turn compact), then delete most churn rows, VACUUM
# and merge (the index falls under the expand threshold: compact leaves
# revert), around and around.  Heap pages the readers visit get pruned on the
# way, so compact leaves meet pruned tuples too.
# Afterwards: pgbench exited 0 with no failed transaction, table bad is
# empty, the writer raised no error, each index agrees with a seqscan and
# pg_hybrid.verify(.., true) passes; for elastic_btree with a bound, the
# writer must have seen compact leaves appear and later decrease (both
# conversion directions happened under the readers).
# --grow-only: the writer never deletes (no pruned tuples anywhere): it only
# inserts and merges, cycle after cycle; this isolates conversions to compact
# leaves (and leaf splits) under readers from the pruned-tuple paths.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

clients=4
seconds=40
grow_only=0
while (($#)); do
    case $1 in
        --quick) seconds=20 ;;
        --grow-only) grow_only=1 ;;
        --clients) shift; clients=$1 ;;
        --seconds) shift; seconds=$1 ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "convert.sh: unknown option $1" ;;
    esac
    shift
done

ph_trap_install
AM=$PH_AM
DB=convert
DIR=$(ph_scratch convert)
S=${PH_CONVERT_STABLE:-20000}
BOUND=${PH_SIZE_BOUND:-768kB}
cluster_init "$DIR" "$PH_PORT" "max_connections = 40"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

opts=""
elastic=0
case $AM in
    hybrid_btree) opts=" WITH (merge_ratio = 10)" ;;
    elastic_btree) elastic=1; opts=" WITH (size_bound = '$BOUND')" ;;
esac
cluster_sql "$DIR" "$DB" \
    "CREATE TABLE cv (k int8 NOT NULL, grp int4 NOT NULL, pad text) WITH (autovacuum_enabled = off)" \
    "INSERT INTO cv SELECT 10 * g, 0, repeat('s', (g % 30)::int) FROM generate_series(1, $S) g" \
    "CREATE INDEX cv_k ON cv USING $AM (k)$opts" \
    "CREATE INDEX cv_gk ON cv USING $AM (grp, k)$opts" \
    "CREATE TABLE bad (at timestamptz DEFAULT clock_timestamp(), kind text, a int8, b int8, got text, expected text)" \
    "CREATE FUNCTION cv_cursor_check(backward bool) RETURNS void LANGUAGE plpgsql AS \$\$
     DECLARE c refcursor; x int8; expect int8; n int := 0;
     BEGIN
         IF backward THEN
             OPEN c FOR SELECT k FROM cv WHERE grp = 0 ORDER BY k DESC;
             expect := 10 * $S;
         ELSE
             OPEN c FOR SELECT k FROM cv WHERE grp = 0 ORDER BY k;
             expect := 10;
         END IF;
         LOOP
             FETCH c INTO x;
             EXIT WHEN NOT FOUND;
             IF x IS DISTINCT FROM expect THEN
                 INSERT INTO bad (kind, a, got, expected)
                 VALUES (CASE WHEN backward THEN 'cursor desc' ELSE 'cursor' END, n, x::text, expect::text);
                 RETURN;
             END IF;
             expect := expect + CASE WHEN backward THEN -10 ELSE 10 END;
             n := n + 1;
             IF n % 1000 = 0 THEN PERFORM pg_sleep(0.01); END IF;
         END LOOP;
         IF n <> $S THEN
             INSERT INTO bad (kind, a, got, expected)
             VALUES (CASE WHEN backward THEN 'cursor desc' ELSE 'cursor' END, n, n || ' rows', '$S rows');
         END IF;
     END \$\$" \
    "VACUUM ANALYZE cv" >/dev/null

# ------------------------------------------------------- pgbench scripts --
W=$DIR/pgbench
mkdir -p "$W"
MAXK=$((10 * S))
cat >"$W/range.sql" <<EOF
SET enable_bitmapscan = off;
\\set a random(1, $MAXK)
\\set w random(0, 3000)
\\set b least(:a + :w, $MAXK)
\\set exp :b / 10 - (:a - 1) / 10
INSERT INTO bad (kind, a, b, got, expected) SELECT 'range', :a, :b, c, :exp FROM (SELECT count(*) AS c FROM cv WHERE k BETWEEN :a AND :b AND grp = 0) q WHERE c <> :exp;
EOF
cat >"$W/bitmap.sql" <<EOF
SET enable_bitmapscan = on;
\\set a random(1, $MAXK)
\\set w random(0, 20000)
\\set b least(:a + :w, $MAXK)
\\set exp :b / 10 - (:a - 1) / 10
INSERT INTO bad (kind, a, b, got, expected) SELECT 'bitmap', :a, :b, c, :exp FROM (SELECT count(*) AS c FROM cv WHERE k BETWEEN :a AND :b AND grp = 0) q WHERE c <> :exp;
EOF
cat >"$W/point.sql" <<EOF
SET enable_bitmapscan = off;
\\set i random(1, $S)
INSERT INTO bad (kind, a, got, expected) SELECT 'point', 10 * :i, c, '1 row, grp 0' FROM (SELECT count(*) || ' rows, grp ' || coalesce(string_agg(grp::text, ','), '-') AS c FROM cv WHERE k = 10 * :i) q WHERE c <> '1 rows, grp 0';
EOF
cat >"$W/desc.sql" <<EOF
SET enable_bitmapscan = off;
\\set a random(10, $MAXK)
INSERT INTO bad (kind, a, got, expected) SELECT 'desc', :a, coalesce(x::text, 'none'), (:a / 10) * 10 FROM (SELECT (SELECT k FROM cv WHERE k <= :a AND grp = 0 ORDER BY k DESC LIMIT 1) AS x) q WHERE x IS DISTINCT FROM (:a / 10) * 10;
EOF
cat >"$W/grp.sql" <<EOF
SET enable_bitmapscan = off;
\\set a random(1, $MAXK)
\\set exp :a / 10
INSERT INTO bad (kind, a, got, expected) SELECT 'grp', :a, c, :exp FROM (SELECT count(*) AS c FROM cv WHERE grp = 0 AND k <= :a) q WHERE c <> :exp;
EOF
cat >"$W/cursor.sql" <<EOF
SET enable_bitmapscan = off;
\\set d random(0, 1)
SELECT cv_cursor_check(:d = 1);
EOF
chown -R "$PH_USER:" "$W"

# ------------------------------------------------------------- writer --
# Churn keys: 10*j + d for d in 1..9, inserted in random order in batches;
# grow to about 4x the stable rows, then delete ~90% and VACUUM.
STOP=$DIR/stop
rm -f "$STOP"
STATS="SELECT 'cv_k', state, compact_leaves, standard_leaves, relation_bytes FROM pg_hybrid.index_stats('cv_k'::regclass) UNION ALL SELECT 'cv_gk', state, compact_leaves, standard_leaves, relation_bytes FROM pg_hybrid.index_stats('cv_gk'::regclass)"
((elastic)) || STATS="SELECT 'cv_k', '-', 0, 0, relation_bytes FROM pg_hybrid.index_stats('cv_k'::regclass)"
# "mark PHASE EPOCH" lines let the checks tell in which phase a wrong answer came
mark() { echo "mark $1 $(date +%s.%N)"; }
writer() {
    local cycle=0 batch seed err
    while [[ ! -e $STOP ]]; do
        cycle=$((cycle + 1))
        for batch in 1 2 3 4 5 6; do
            [[ -e $STOP ]] && break
            seed=$((cycle * 100 + batch))
            mark "insert+merge"
            if ! err=$(cluster_sql "$DIR" "$DB" \
                "INSERT INTO cv SELECT 10 * (1 + (h % $S)) + 1 + (h / $S) % 9, 1, 'c$seed' FROM (SELECT (g * 2654435761 + $seed * 40503) % 4294967296 AS h FROM generate_series(1, $((S * 2 / 3))) g) x" \
                "SELECT pg_hybrid.merge('cv_k'::regclass)" "SELECT pg_hybrid.merge('cv_gk'::regclass)" \
                "$STATS" 2>&1); then
                [[ -e $STOP ]] && break
                echo "writer error (grow, cycle $cycle): $err"
            else
                sed "s/^/stats grow $cycle.$batch|/" <<<"$err"
            fi
        done
        [[ -e $STOP ]] && break
        ((grow_only)) && continue
        mark "delete(pruned-not-vacuumed)"
        cluster_sql "$DIR" "$DB" "DELETE FROM cv WHERE grp = 1 AND k % 10 <> 3" >/dev/null 2>&1 || true
        mark "vacuum+merge"
        if ! err=$(cluster_sql "$DIR" "$DB" "VACUUM cv" \
            "SELECT pg_hybrid.merge('cv_k'::regclass)" "SELECT pg_hybrid.merge('cv_gk'::regclass)" "VACUUM cv" \
            "$STATS" 2>&1); then
            [[ -e $STOP ]] && break
            echo "writer error (shrink, cycle $cycle): $err"
        else
            sed "s/^/stats shrink $cycle|/" <<<"$err"
        fi
        mark "delete(pruned-not-vacuumed)"
        cluster_sql "$DIR" "$DB" "DELETE FROM cv WHERE grp = 1" >/dev/null 2>&1 || true
        mark "vacuum"
        cluster_sql "$DIR" "$DB" "VACUUM cv" "$STATS" 2>&1 | sed "s/^/stats empty $cycle|/" || true
    done
    mark end
}
writer >"$DIR/writer.log" 2>&1 &
WPID=$!
ph_bg_add $WPID

# -------------------------------------------------------------- pgbench --
say "== pgbench: $clients readers, ${seconds}s, am=$AM${opts:+,$opts}; one writer cycling inserts/merges and deletes/VACUUM"
set +e
ph_as_user env PGOPTIONS="-c enable_seqscan=off" "$PH_PGBIN/pgbench" -n -h "$DIR/sock" -p "$PH_PORT" -U "$PH_USER" \
    -c "$clients" -j 2 -T "$seconds" -M simple -P 10 \
    -f "$W/range.sql@30" -f "$W/bitmap.sql@10" -f "$W/point.sql@30" -f "$W/desc.sql@20" -f "$W/grp.sql@10" \
    -f "$W/cursor.sql@1" \
    "$DB" >"$DIR/pgbench.out" 2>"$DIR/pgbench.err"
rc=$?
set -e
touch "$STOP"
wait $WPID || true
ph_pgbench_summary "$DIR" "$rc" || fail "pgbench (above)"
failed_tx=$(awk '/^number of failed transactions/ {print $5}' "$DIR/pgbench.out")
[[ -z $failed_tx || $failed_tx == 0 ]] || fail "pgbench: $failed_tx failed transactions"
if grep -q '^writer error' "$DIR/writer.log"; then
    fail "the writer raised errors:"
    grep '^writer error' "$DIR/writer.log" | head -5 >&2
fi
say "  writer: $(grep -c '^stats grow' "$DIR/writer.log" || true) insert batches, $(grep -c '^stats shrink' "$DIR/writer.log" || true) delete+VACUUM rounds"
grep '^stats' "$DIR/writer.log" | sed 's/^/  /' | tail -n 40

# --------------------------------------------------------------- checks --
say "== checks"
nbad=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM bad")
if [[ $nbad != 0 ]]; then
    fail "$nbad reader answers were wrong; first ones (at|kind|a|b|got|expected):"
    cluster_sql "$DIR" "$DB" "SELECT * FROM bad ORDER BY at LIMIT 20" >&2
    # in which writer phase did they come?
    cluster_sql "$DIR" "$DB" "SELECT extract(epoch FROM at) FROM bad ORDER BY at" >"$DIR/bad_times"
    awk 'NR == FNR { if ($1 == "mark") { n++; t[n] = $3; ph[n] = $2 } next }
         { i = 0; for (j = 1; j <= n; j++) if (t[j] <= $1) i = j; c[i ? ph[i] : "before the writer"]++ }
         END { for (p in c) printf "  wrong answers during %s: %d\n", p, c[p] }' "$DIR/writer.log" "$DIR/bad_times" >&2
fi
ntx=$(awk '/^number of transactions actually processed/ {print $6}' "$DIR/pgbench.out")
echo "  reader transactions checked: ${ntx:-?}, wrong answers: $nbad"
stable=$(cluster_sql "$DIR" "$DB" "SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off" \
    "SELECT count(*) FROM cv WHERE grp = 0")
[[ $stable == "$S" ]] || fail "the table holds $stable stable rows, expected $S"
ph_index_vs_seq "$DIR" "$DB" cv cv_gk "grp >= 0" || fail "cv_gk disagrees with seqscan"
ph_verify "$DIR" "$DB" cv_k || fail "verify(cv_k)"
ph_verify "$DIR" "$DB" cv_gk || fail "verify(cv_gk)"
if ((elastic && !grow_only)); then
    # both directions must have happened while the readers ran: compact leaves
    # appeared, and later there were fewer of them than at some earlier point
    read -r maxc lastdrop states < <(grep '^stats' "$DIR/writer.log" | awk -F'|' '$2 == "cv_k" {
            c = $4 + 0; st[$3] = 1
            if (c > max) max = c
            if (c < max) drop = 1
        } END { s = ""; for (x in st) s = s x ","; print max + 0, drop + 0, s }')
    echo "  cv_k: most compact leaves seen $maxc; decreased afterwards: $lastdrop; states seen: $states"
    ((maxc > 0)) || fail "cv_k never held a compact leaf (size_bound $BOUND): no conversion was exercised"
    ((lastdrop == 1)) || fail "cv_k's compact leaves never decreased: no conversion back to standard was exercised"
fi

# "k >= 0" is every row: cv_gk (grp, k) scanned whole costs the same as cv_k,
# so the planner may take either; the check of cv_k runs without cv_gk.
cluster_sql "$DIR" "$DB" "DROP INDEX cv_gk" >/dev/null
ph_index_vs_seq "$DIR" "$DB" cv cv_k "k >= 0" || fail "cv_k disagrees with seqscan"
if ((failures)); then
    echo "convert: FAIL ($failures problems; logs in $DIR)"
    exit 1
fi
echo "convert: PASS"
