#!/usr/bin/env bash
# tests/csd.sh [--quick] — the emulated CSD tablespace (scripts/csd.sh) and
# the per-relation meter (pg_hybrid.storage_stats) against the device.
#
# 1. Bad input of scripts/csd.sh, each a non-zero exit and a message that
#    says what to do: not root; no zram (PH_ZRAM_SYSFS pointed at an empty
#    directory: exit 3); a size that is not one or is too small; a relative
#    directory; a tablespace name that is not a plain identifier; a device
#    already mounted at the directory; `down` of a mount point csd.sh did not
#    make (/proc); `down --tablespace` while the tablespace still holds
#    tables (DROP TABLESPACE fails, the device stays mounted).
# 2. With zram: a tablespace on a new device (the devices that existed
#    before are untouched); a heap table, a hasis table (both with TOASTed
#    values) and their btree indexes loaded into it; after CHECKPOINT the
#    device's compressed bytes grew by the sum of storage_stats over every
#    relation in the tablespace, within 1%. Without zram this part is
#    skipped with a message.
# The device is taken down at exit; afterwards the zram devices are those
# that existed before.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ph_parse_quick "$0" "$@"
rows=400000
((quick)) && rows=150000
CSD=$PH_REPO/scripts/csd.sh
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# expect_fail WANT-RC PATTERN CMD...: CMD exits with WANT-RC (any non-zero
# for "nz") and its stderr matches PATTERN.
expect_fail() {
    local want=$1 pat=$2 rc=0 err
    shift 2
    err=$("$@" 2>&1 >/dev/null) || rc=$?
    if [[ $want == nz ]] && ((rc == 0)) || [[ $want != nz && $rc != "$want" ]]; then
        fail "'$*' exited $rc (want $want): $err"
    elif ! grep -zqE -- "$pat" <<<"$err"; then
        fail "'$*': message does not match '$pat': $err"
    else
        say "ok, exit $rc: ${err:0:120}"
    fi
}

zram_devices() { ls /sys/block 2>/dev/null | grep '^zram' | sort | tr '\n' ' '; }
before=$(zram_devices)

ph_trap_install
DIR=$(ph_scratch csd)
DB=csd
cluster_init "$DIR" "$PH_PORT"
cluster_start "$DIR"
ph_prepare_db "$DIR" "$DB"

say "1. bad input of scripts/csd.sh"
EMPTY_SYSFS=$DIR/no_sysfs
mkdir -p "$EMPTY_SYSFS"
expect_fail nz 'must run as root' runuser -u "$PH_USER" -- bash "$CSD" up --dir "$DIR/m1"
expect_fail 3 'has no zram.*storage_stats' env PH_ZRAM_SYSFS="$EMPTY_SYSFS" bash "$CSD" up --dir "$DIR/m1"
expect_fail 1 'is not a size' bash "$CSD" up --dir "$DIR/m1" --size lots
expect_fail 1 'at least 64M' bash "$CSD" up --dir "$DIR/m1" --size 1M
expect_fail 1 'absolute path' bash "$CSD" up --dir relative/dir
expect_fail 1 'plain lower-case identifier' bash "$CSD" up --dir "$DIR/m1" --tablespace 'x; DROP' --host "$DIR/sock" --port 1
expect_fail 1 'needs --host' bash "$CSD" up --dir "$DIR/m1" --tablespace ts
expect_fail 1 'not made by csd.sh' bash "$CSD" down --dir /proc
expect_fail 1 'not a mount point' bash "$CSD" down --dir "$DIR/m1"
expect_fail 1 'unknown command' bash "$CSD" sideways --dir "$DIR/m1"
[[ ! -e $DIR/m1 ]] || fail "a refused 'up' left $DIR/m1 behind"

say "2. the meter against the device"
rc=0
ph_csd_up "$DIR" csd 1G || rc=$?
if ((rc == 3)); then
    say "SKIP part 2: this kernel has no zram (scripts/csd.sh said so above)"
else
    mnt=$PH_CSD_DIR
    dev=$PH_CSD_DEVICE
    name=${dev#/dev/}
    say "device $dev at $mnt, tablespace csd"
    expect_fail 1 'already a mount point' bash "$CSD" up --dir "$mnt"
    mm() { sync -f "$mnt"; awk '{print $2}' "/sys/block/$name/mm_stat"; }
    base=$(mm)
    cluster_psql "$DIR" "$DB" <<SQL
SET default_tablespace = csd;
CREATE TABLE m_heap (id int8 PRIMARY KEY, grp int4, label text, note text, amount numeric, at timestamptz);
INSERT INTO m_heap
    SELECT g, g % 97, 'label ' || (g % 1000), CASE WHEN g % 1000 = 0 THEN repeat(md5(g::text), 100) END,
           (g % 10000) / 100.0, '2026-01-01'::timestamptz + g * interval '1 minute'
    FROM generate_series(1, $rows) g;
CREATE TABLE m_hasis (LIKE m_heap) USING hasis;
INSERT INTO m_hasis SELECT * FROM m_heap;
CREATE INDEX m_hasis_id ON m_hasis (id);
DELETE FROM m_hasis WHERE id % 10 = 0;
UPDATE m_hasis SET grp = grp + 1 WHERE id % 10 = 1;
VACUUM m_heap;
VACUUM m_hasis;
CHECKPOINT;
SQL
    after=$(mm)
    metered=$(cluster_sql "$DIR" "$DB" "SELECT sum(s.physical_bytes) FROM pg_class c, pg_hybrid.storage_stats(c.oid) s
        WHERE c.reltablespace = (SELECT oid FROM pg_tablespace WHERE spcname = 'csd')")
    logical=$(cluster_sql "$DIR" "$DB" "SELECT sum(s.logical_bytes) FROM pg_class c, pg_hybrid.storage_stats(c.oid) s
        WHERE c.reltablespace = (SELECT oid FROM pg_tablespace WHERE spcname = 'csd')")
    relations=$(cluster_sql "$DIR" "$DB" "SELECT count(*) FROM pg_class WHERE reltablespace = (SELECT oid FROM pg_tablespace WHERE spcname = 'csd')")
    device=$((after - base))
    say "$relations relations in the tablespace: logical $logical bytes, metered physical $metered, device compressed bytes grew by $device"
    python3 - "$metered" "$device" <<'EOF' || fail "the meter is not within 1% of the device"
import sys
m, d = int(sys.argv[1]), int(sys.argv[2])
err = abs(m - d) / d
print("meter / device = %.4f (%.2f%% apart)" % (m / d, 100 * err))
sys.exit(0 if err <= 0.01 else 1)
EOF
    ((relations >= 6)) || fail "expected both tables, their TOAST tables and indexes in the tablespace, found $relations relations"
    expect_fail 1 'is not empty(.|\n)*DROP TABLESPACE csd failed' bash "$CSD" down --dir "$mnt" --owner "$PH_USER" --tablespace csd --host "$DIR/sock" --port "$(cluster_port "$DIR")"
    findmnt -n --mountpoint "$mnt" >/dev/null || fail "a refused 'down' unmounted $mnt"
    cluster_psql "$DIR" "$DB" -c "DROP TABLE m_heap, m_hasis"
fi

cluster_stop "$DIR"
ph_cleanup 0
trap - EXIT
now=$(zram_devices)
[[ $now == "$before" ]] || fail "zram devices before: '$before', after: '$now'"
if ((failures)); then
    echo "csd.sh: $failures failure(s)"
    exit 1
fi
echo "csd.sh: PASS"
