#!/usr/bin/env bash
# tests/corrupt.sh [--quick] — a corrupted hybrid_btree, elastic_btree,
# griffin, tiered_btree or tiered_hash page is a clean ERROR.
#
# A table with a hybrid_btree index on an int8 column (enough rows for a few
# dozen static leaves, plus inserts after CREATE INDEX so delta pages exist).
# First, every page of the index file must have the documented layout
# (src/static_stage/README.md): body right after the 24-byte PageHeaderData, i.e.
# pd_lower = 24 + body_len, and the HybridMeta magic at byte 24 of block 0.
# Then, for each case, the cluster is stopped cleanly (CHECKPOINT first), one
# page of the index's file (pg_relation_filepath) is damaged with python, and
# the cluster is restarted:
#   magic     wrong magic in the special area of a static leaf
#   version   unsupported page version in the special area of the metapage (block 0)
#   metaver   unsupported HybridMeta version in the metapage body
#   delta     wrong magic on a delta-log page (read when the dynamic stage is
#             rebuilt from the log after the restart)
#   garbage   random bytes over page bytes 24..200 of a static leaf (the start
#             of its body), three seeds
#   entries   random bytes over page bytes 38..200 of a static leaf (its
#             entries; the leaf header is kept), two seeds
# tiered_btree runs every case above (its cold tier is the static stage).
# griffin (corrupt-griffin) runs every case above on its tree and its
# delta log, and three on its hash path (tiered_hash: version, metaver and
# delta, then these three, every scan a nested loop of point lookups), whose bucket pages (kind 10, body
# magic "GRFB") a full scan never reads, so their scan is a nested loop of
# point lookups of every key (the hash path), plan checked:
#   bucket    wrong body magic on a bucket page
#   hashpage  wrong magic in the special area of a bucket page
#   buckets   random bytes over page bytes 40..200 of a bucket page (its
#             slots), lenient
# A full index scan (enable_seqscan=off, plan checked) and
# pg_hybrid.verify(idx, true) must each fail with SQLSTATE XX002
# (index_corrupted) and a message naming the index; for garbage/entries they
# may instead succeed, but the scan must then return exactly the seqscan's
# rows.  The server must stay up: SELECT 1 works, and the postmaster did not
# reinitialise (same pg_postmaster_start_time and checkpointer pid, no crash or
# PANIC in the log).  REINDEX INDEX must repair it: the index agrees with a
# seqscan again (plain, bitmap, count) and verify passes.
# Pages are found by reading the 32-byte special area of every block.  The
# scratch clusters have no data checksums (initdb default; checked).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ph_parse_quick "$0" "$@"
rows=100000
late=3000
if ((quick)); then
    rows=30000
    late=1000
fi
# elastic_btree shares hybrid_btree's metapage and delta log; its tree leaves
# (kind 7) are damaged instead of static leaves, compact ones (body format
# 0x12) under a size_bound small enough to make most leaves compact.
# tiered_btree's cold tier is the static stage, so it takes every case
# hybrid_btree takes; tiered_hash's is a hash path without a tree: it takes
# the metapage, delta and hash-path cases, every scan a nested loop of point
# lookups.
case $PH_AM in
    hybrid_btree | elastic_btree | griffin | tiered_btree | tiered_hash) ;;
    *) echo "SKIP: corrupt.sh damages pg_hybrid's own page formats (am=$PH_AM)"; exit 77 ;;
esac
TREE=1
[[ $PH_AM == tiered_hash ]] && TREE=0
HASHPATH=0
[[ $PH_AM == griffin || $PH_AM == tiered_hash ]] && HASHPATH=1

ph_trap_install
DIR=$(ph_scratch corrupt)
DB=corrupt
# no ratio-triggered merge: the late inserts stay in the delta log
cluster_init "$DIR" "$PH_PORT" "pg_hybrid.merge_min_entries = 10000000"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

[[ $(cluster_sql "$DIR" "$DB" "SHOW data_checksums") == off ]] ||
    ph_die "the scratch cluster has data checksums on; a damaged page would fail the checksum before pg_hybrid sees it"

IDX=cr_id
NEXT=$((rows + 1))   # next id to insert
cluster_sql "$DIR" "$DB" \
    "CREATE TABLE cr (id int8 NOT NULL, v text) WITH (autovacuum_enabled = off)" \
    "INSERT INTO cr SELECT g, 'v' || g FROM generate_series(1, $rows) g" \
    "CREATE INDEX $IDX ON cr USING $PH_AM (id) $( [[ $PH_AM == elastic_btree ]] && echo "WITH (size_bound = '160kB')")" >/dev/null

# add_rows N: N more rows after CREATE INDEX / REINDEX (they go to the delta log;
# the cluster's pg_hybrid.merge_min_entries keeps any merge from moving them away)
add_rows() {
    cluster_sql "$DIR" "$DB" "INSERT INTO cr SELECT g, 'v' || g FROM generate_series($NEXT, $((NEXT + $1 - 1))) g" >/dev/null
    NEXT=$((NEXT + $1))
}

# pagetool CMD FILE ARGS...: read or damage pages of an index file (runs as root).
#   list FILE              one line per block: blkno kind level generation body_len
#   layout FILE            pages whose body does not start at SizeOfPageHeaderData
#   poke FILE BLK OFF FMT VALUE   struct.pack_into(FMT, page, OFF, VALUE)
#   metaver FILE 0 VALUE   set HybridMeta.version (found after the "HYBM" magic)
#   garble FILE BLK FROM TO SEED  random bytes over page bytes [FROM, TO)
pagetool() {
    python3 - "$@" <<'PY'
import random, struct, sys
BLCKSZ = 8192
MAGIC = 0x50474859
cmd, path = sys.argv[1], sys.argv[2]
if cmd == "layout":
    # pages whose body does not start at SizeOfPageHeaderData (24):
    # pd_lower must be 24 + body_len, and the metapage body must begin with "HYBM"
    with open(path, "rb") as f:
        data = f.read()
    for b in range(len(data) // BLCKSZ):
        pg = data[b * BLCKSZ:(b + 1) * BLCKSZ]
        pd_lower, = struct.unpack_from("<H", pg, 12)
        magic, ver, kind, level, gen, left, right, blen, fpos = struct.unpack_from("<IHBBIIIIQ", pg, BLCKSZ - 32)
        if magic != MAGIC:
            continue
        if pd_lower != 24 + blen:
            print("block %d (kind %d): pd_lower %d, body_len %d: body does not start at byte 24" % (b, kind, pd_lower, blen))
        if b == 0 and pg[24:28] != struct.pack("<I", 0x4859424D):
            print("block 0: HybridMeta magic \"HYBM\" is at byte %d, not 24" % pg.find(struct.pack("<I", 0x4859424D)))
elif cmd == "list":
    with open(path, "rb") as f:
        data = f.read()
    for b in range(len(data) // BLCKSZ):
        pg = data[b * BLCKSZ:(b + 1) * BLCKSZ]
        magic, ver, kind, level, gen, left, right, blen, fpos = struct.unpack_from("<IHBBIIIIQ", pg, BLCKSZ - 32)
        if magic != MAGIC:
            kind = 0
        body = pg[24:28].decode("ascii") if all(48 <= c < 123 for c in pg[24:28]) else "-"
        print(b, kind, level, gen, blen, pg[24], body)
else:
    blk = int(sys.argv[3])
    with open(path, "r+b") as f:
        f.seek(blk * BLCKSZ)
        pg = bytearray(f.read(BLCKSZ))
        assert len(pg) == BLCKSZ, "short page"
        if cmd == "poke":
            struct.pack_into(sys.argv[5], pg, int(sys.argv[4]), int(sys.argv[6], 0))
        elif cmd == "metaver":
            # HybridMeta { magic "HYBM" u32, version u32, .. }: found by its magic
            at = pg.find(struct.pack("<I", 0x4859424D), 0, 64)
            assert at >= 0, "no HybridMeta magic in block %d" % blk
            struct.pack_into("<I", pg, at + 4, int(sys.argv[4], 0))
        elif cmd == "garble":
            lo, hi = int(sys.argv[4]), int(sys.argv[5])
            rnd = random.Random(int(sys.argv[6]))
            pg[lo:hi] = bytes(rnd.randrange(256) for _ in range(hi - lo))
        else:
            sys.exit("pagetool: unknown command " + cmd)
        f.seek(blk * BLCKSZ)
        f.write(pg)
PY
}

FORCE=("SET enable_seqscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off")
SEQ=("SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off")
Q="SELECT count(*) || ' ' || coalesce(md5(string_agg(id || ':' || v, ',' ORDER BY id)), '-') FROM cr WHERE id >= 0"
# Every key, looked up one by one: a nested loop whose inner side is a
# point scan of the index (the hash path).
Q_POINTS="SELECT count(*) || ' ' || coalesce(md5(string_agg(id || ':' || v, ',' ORDER BY id)), '-') FROM generate_series(0, $rows + 100000) g JOIN cr ON cr.id = g"
FORCE_POINTS=("SET enable_hashjoin=off" "SET enable_mergejoin=off" "SET enable_material=off" "SET enable_memoize=off")
if ((!TREE)); then
    Q=$Q_POINTS
    FORCE+=("${FORCE_POINTS[@]}")
fi

# run_sql OUT ERR SQL...: psql with ON_ERROR_STOP=0 and verbose errors (SQLSTATE shown);
# returns 1 if an ERROR was printed.
run_sql() {
    local out=$1 err=$2; shift 2
    local s args=(-c '\set VERBOSITY verbose')
    for s in "$@"; do args+=(-c "$s"); done
    cluster_psql "$DIR" "$DB" -v ON_ERROR_STOP=0 -At "${args[@]}" >"$out" 2>"$err" || true
    ! grep -q 'ERROR:' "$err"
}

# is_corrupted_error ERRFILE: the first ERROR is XX002 and names the index
is_corrupted_error() {
    local line
    line=$(grep -m1 'ERROR:' "$1" || true)
    [[ $line == *"ERROR:  XX002:"* && $line == *"\"$IDX\""* ]]
}

# server_state: "start-time checkpointer-pid" of the running postmaster
server_state() {
    cluster_sql "$DIR" "$DB" "SELECT pg_postmaster_start_time() || ' ' || (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer')"
}

# restart_with DAMAGE-CMD...: CHECKPOINT, clean stop, run the damage command, start
restart_with() {
    cluster_sql "$DIR" "$DB" "CHECKPOINT" >/dev/null
    cluster_stop "$DIR" fast
    ! cluster_running "$DIR" || ph_die "cluster did not stop"
    "$@"
    cluster_start "$DIR"
    cluster_wait_ready "$DIR"
}

# index_file: absolute path of the index's main fork
index_file() { printf '%s/data/%s' "$DIR" "$(cluster_sql "$DIR" "$DB" "SELECT pg_relation_filepath('$IDX')")"; }

# current_leaves FILE GEN: static leaves of generation GEN, in block order
current_leaves() {
    if [[ $PH_AM == elastic_btree ]]; then
        # compact leaves of the tree: kind 7, level 0, body format 0x12 (18)
        pagetool list "$1" | awk '$2 == 7 && $3 == 0 && $6 == 18 {print $1}'
    else
        pagetool list "$1" | awk -v g="$2" '$2 == 2 && $3 == 0 && $4 == g {print $1}'
    fi
}

EXPECT=""   # seqscan result before the damage
prepare_case() {  # NAME: fresh delta pages, expected result, file facts
    add_rows 500
    EXPECT=$(cluster_sql "$DIR" "$DB" "${SEQ[@]}" "$Q")
    cluster_sql "$DIR" "$DB" "CHECKPOINT" >/dev/null   # so the file on disk holds the pages
    FILE=$(index_file)
    GEN=$(cluster_sql "$DIR" "$DB" "SELECT generation FROM pg_hybrid.index_stats('$IDX')")
    local deltas
    deltas=$(cluster_sql "$DIR" "$DB" "SELECT delta_pages FROM pg_hybrid.index_stats('$IDX')")
    mapfile -t LEAVES < <(current_leaves "$FILE" "$GEN")
    say "== case $1: ${EXPECT%% *} rows, ${#LEAVES[@]} static leaves of generation $GEN, $deltas delta pages, file ${FILE#"$DIR"/data/}"
    ((${#LEAVES[@]} >= 4 || !TREE)) || ph_die "$1: expected several static leaves, found ${#LEAVES[@]}"
    ((deltas > 0)) || fail "$1: expected delta pages after the late inserts, index_stats says $deltas"
}

# check_damaged NAME MODE: MODE strict = scan and verify must fail with XX002;
# lenient = they may also succeed, but a scan must then return the seqscan's rows.
check_damaged() {
    local name=$1 mode=$2 before plan after logpos
    before=$STATE
    logpos=$LOGPOS
    plan=$(cluster_sql "$DIR" "$DB" "${FORCE[@]}" "EXPLAIN (COSTS OFF) $Q" 2>&1 || true)
    if ! grep -Eq "using $IDX( |\$)" <<<"$plan" && ! grep -q "XX002\|corrupt" <<<"$plan"; then
        fail "$name: the forced plan does not use $IDX:"; echo "$plan" >&2
    fi
    # 1. index scan
    if run_sql "$DIR/scan.out" "$DIR/scan.err" "${FORCE[@]}" "$Q"; then
        if [[ $mode == strict ]]; then
            fail "$name: index scan did not fail (returned '$(cat "$DIR/scan.out")', seqscan '$EXPECT')"
        elif [[ $(tail -n1 "$DIR/scan.out") != "$EXPECT" ]]; then
            fail "$name: index scan returned WRONG ROWS without an error: '$(tail -n1 "$DIR/scan.out")', seqscan '$EXPECT'"
        else
            say "  scan: no error, same rows as the seqscan (the damage decoded)"
        fi
    elif is_corrupted_error "$DIR/scan.err"; then
        say "  scan:   $(grep -m1 'ERROR:' "$DIR/scan.err" | sed 's/^psql:[^ ]* //')"
    else
        fail "$name: index scan failed, but not with XX002 naming \"$IDX\":"; sed 's/^/    /' "$DIR/scan.err" >&2
    fi
    # 2. verify
    if run_sql "$DIR/verify.out" "$DIR/verify.err" "SELECT pg_hybrid.verify('$IDX'::regclass, heapallindexed => true)"; then
        if [[ $mode == strict ]]; then
            fail "$name: pg_hybrid.verify did not report the damage"
        else
            say "  verify: passed (the damage decoded)"
        fi
    elif is_corrupted_error "$DIR/verify.err"; then
        say "  verify: $(grep -m1 'ERROR:' "$DIR/verify.err" | sed 's/^psql:[^ ]* //')"
    else
        fail "$name: verify failed, but not with XX002 naming \"$IDX\":"; sed 's/^/    /' "$DIR/verify.err" >&2
    fi
    # 3. the server survived and did not reinitialise
    if ! [[ $(cluster_sql "$DIR" "$DB" "SELECT 1" 2>&1) == 1 ]]; then
        fail "$name: SELECT 1 failed after the errors (server down?)"
        cluster_wait_ready "$DIR" 60
    fi
    after=$(server_state)
    [[ $after == "$before" ]] || fail "$name: the postmaster reinitialised (start time / checkpointer pid '$before' -> '$after')"
    if tail -c +$((logpos + 1)) "$DIR/postgres.log" | grep -E 'PANIC|terminated by signal|was terminated|reinitializing|server process .* exited with exit code [^0]'; then
        fail "$name: crash / PANIC in the server log (above)"
    fi
    # 4. REINDEX repairs it
    if ! err=$(cluster_sql "$DIR" "$DB" "REINDEX INDEX $IDX" 2>&1 >/dev/null); then
        fail "$name: REINDEX INDEX $IDX failed: $err"
        return
    fi
    local res
    res=$(cluster_sql "$DIR" "$DB" "${FORCE[@]}" "$Q" 2>&1 || true)
    [[ $res == "$EXPECT" ]] || fail "$name: after REINDEX the index scan gives '$res', expected '$EXPECT'"
    ph_index_vs_seq "$DIR" "$DB" cr "$IDX" "id >= 0" || fail "$name: after REINDEX $IDX disagrees with seqscan"
    ph_verify "$DIR" "$DB" "$IDX" || fail "$name: verify after REINDEX"
}

# start_case: remember the server's identity and log position after the restart
start_case() {
    STATE=$(server_state)
    LOGPOS=$(stat -c %s "$DIR/postgres.log")
}

add_rows "$late"
say "table cr: $rows rows, index $IDX, $late rows inserted after CREATE INDEX"

# ---------------------------------------------------------- layout --
# The damage below is placed by the documented format (src/static_stage/README.md):
# the body starts right after the 24-byte PageHeaderData.  Check that first.
cluster_sql "$DIR" "$DB" "CHECKPOINT" >/dev/null
bad=$(pagetool layout "$(index_file)")
if [[ -n $bad ]]; then
    fail "page layout differs from src/static_stage/README.md (body must start at byte 24, after PageHeaderData; it overlaps pd_prune_xid otherwise):"
    head -n 5 <<<"$bad" | sed 's/^/    /' >&2
    echo "    ($(wc -l <<<"$bad") pages)" >&2
else
    say "layout: every page's body starts at byte 24 (pd_lower = 24 + body_len)"
fi

# ----------------------------------------------------------- magic --
if ((TREE)); then
prepare_case magic
blk=${LEAVES[${#LEAVES[@]} / 2]}
restart_with pagetool poke "$FILE" "$blk" $((8192 - 32)) '<I' 0x12345678
start_case
say "  damaged: magic of static leaf block $blk"
check_damaged magic strict
fi

# --------------------------------------------------------- version --
prepare_case version
restart_with pagetool poke "$FILE" 0 $((8192 - 32 + 4)) '<H' 99
start_case
say "  damaged: page version of the metapage (block 0) = 99"
check_damaged version strict

# --------------------------------------------------------- metaver --
prepare_case metaver
restart_with pagetool metaver "$FILE" 0 99
start_case
say "  damaged: HybridMeta version of the metapage = 99"
check_damaged metaver strict

# ----------------------------------------------------------- delta --
prepare_case delta
blk=$(pagetool list "$FILE" | awk '$2 == 4 {print $1}' | head -n1)
[[ -n $blk ]] || ph_die "delta: no delta page in $FILE"
restart_with pagetool poke "$FILE" "$blk" $((8192 - 32)) '<I' 0x12345678
start_case
say "  damaged: magic of delta page block $blk (the dynamic stage is rebuilt from the log after the restart)"
check_damaged delta strict

# --------------------------------------------------------- garbage --
((TREE)) && for seed in 1 2 3; do
    prepare_case "garbage/$seed"
    blk=${LEAVES[(${#LEAVES[@]} * seed) / 4]}
    restart_with pagetool garble "$FILE" "$blk" 24 200 "$seed"
    start_case
    say "  damaged: bytes 24..200 of static leaf block $blk (seed $seed)"
    check_damaged "garbage/$seed" lenient
done

# --------------------------------------------------------- entries --
((TREE)) && for seed in 1 2; do
    prepare_case "entries/$seed"
    blk=${LEAVES[(${#LEAVES[@]} * (seed % 4)) / 4]}
    restart_with pagetool garble "$FILE" "$blk" 38 200 "$seed"
    start_case
    say "  damaged: bytes 38..200 of static leaf block $blk (seed $seed)"
    check_damaged "entries/$seed" lenient
done

# ----------------------------------------------------- hash path --
if ((HASHPATH)); then
    if ((TREE)); then
        Q=$Q_POINTS
        FORCE+=("${FORCE_POINTS[@]}")
    fi
    bucket_page() {  # FILE SEED: a bucket page of the file (kind 10, body "GRFB")
        local blks
        mapfile -t blks < <(pagetool list "$1" | awk '$2 == 10 && $7 == "GRFB" {print $1}')
        ((${#blks[@]} > 0)) || ph_die "no bucket page in $1"
        echo "${blks[(${#blks[@]} * $2) / 5]}"
    }

    prepare_case bucket
    blk=$(bucket_page "$FILE" 2)
    restart_with pagetool poke "$FILE" "$blk" 24 '<I' 0x12345678
    start_case
    say "  damaged: body magic of bucket page block $blk"
    check_damaged bucket strict

    prepare_case hashpage
    blk=$(bucket_page "$FILE" 3)
    restart_with pagetool poke "$FILE" "$blk" $((8192 - 32)) '<I' 0x12345678
    start_case
    say "  damaged: special-area magic of bucket page block $blk"
    check_damaged hashpage strict

    prepare_case buckets
    blk=$(bucket_page "$FILE" 1)
    restart_with pagetool garble "$FILE" "$blk" 40 200 7
    start_case
    say "  damaged: bytes 40..200 (slots) of bucket page block $blk"
    check_damaged buckets lenient
fi

if ((failures)); then
    echo "corrupt: FAIL ($failures problems; cluster log $DIR/postgres.log)"
    exit 1
fi
echo "corrupt: PASS"
