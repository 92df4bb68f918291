#!/usr/bin/env bash
# scripts/csd.sh — the emulated computational-storage (CSD) tablespace of
# design.md §6: a zram device (the kernel's compressed RAM disk: LZ4 per 4 KB
# block, blocks of one repeated word stored for free, like a drive with
# transparent compression) with ext4 on it, mounted and handed to the
# cluster's OS user.
#
#   csd.sh up    --dir DIR [--size 2G] [--owner postgres]
#                [--tablespace NAME --host SOCKDIR --port PORT [--db postgres]]
#   csd.sh stats --dir DIR
#   csd.sh down  --dir DIR [--tablespace NAME --host SOCKDIR --port PORT [--db postgres]]
#
# up      adds a new zram device (never reuses one it did not make), sets LZ4
#         and the size, makes ext4 (4 KB blocks, no journal), mounts it at DIR
#         with discard (a dropped relation frees its blocks on the device) and
#         creates DIR/ts owned by --owner. With --tablespace it runs
#         CREATE TABLESPACE NAME LOCATION 'DIR/ts' as --owner. Prints
#         key=value lines: device, dir, location.
# stats   prints the device's figures from /sys/block/zramN/mm_stat after a
#         sync: logical_bytes (orig_data_size), physical_bytes
#         (compr_data_size), memory_bytes (mem_used_total, with the allocator's
#         overhead), free_blocks_4k (same_pages), raw_blocks_4k (huge_pages).
#         Take them before and after a load (and a CHECKPOINT) and report the
#         differences.
# down    drops the tablespace (with --tablespace; it must be empty), unmounts
#         DIR and removes the device. Only a device this script made (its state
#         is under /run/pg_hybrid-csd) is ever removed.
#
# Exit status: 0 ok, 1 bad usage or a failed step (the message says which),
# 3 the kernel has no zram (nothing to emulate the drive with; the per-relation
# meter pg_hybrid.storage_stats works on any filesystem).
# PH_ZRAM_SYSFS (default /sys) is where class/zram-control and block/zramN are
# looked up; tests point it elsewhere to take the no-zram path.
set -euo pipefail

SYSFS=${PH_ZRAM_SYSFS:-/sys}
STATE=/run/pg_hybrid-csd

die()  { printf 'csd.sh: %s\n' "$1" >&2; exit "${2:-1}"; }
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit "${1:-1}"; }

[[ $# -ge 1 ]] || usage
cmd=$1; shift
case $cmd in up|down|stats) ;; -h|--help) usage 0 ;; *) die "unknown command '$cmd' (up, stats or down)";; esac

dir="" size=2G owner=postgres tablespace="" host="" port="" db=postgres
while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || die "option $1 needs a value"
    case $1 in
        --dir) dir=$2 ;;
        --size) size=$2 ;;
        --owner) owner=$2 ;;
        --tablespace) tablespace=$2 ;;
        --host) host=$2 ;;
        --port) port=$2 ;;
        --db) db=$2 ;;
        *) die "unknown option '$1'" ;;
    esac
    shift 2
done
[[ -n $dir ]] || die "--dir is required"
[[ $dir == /* ]] || die "--dir must be an absolute path (got '$dir')"
dir=${dir%/}
if [[ -n $tablespace ]]; then
    [[ $tablespace =~ ^[a-z_][a-z0-9_]*$ ]] || die "--tablespace must be a plain lower-case identifier (got '$tablespace')"
    [[ -n $host && -n $port ]] || die "--tablespace needs --host (the cluster's socket directory) and --port"
fi
[[ $(id -u) -eq 0 ]] || die "must run as root: it adds a zram device, makes a filesystem and mounts it"

# The device this script mounted at $dir, from the mount table; empty if none.
mounted_device() { findmnt -n -o SOURCE --mountpoint "$dir" 2>/dev/null || true; }

# Our state file for a device: it holds the directory it is mounted at.
state_of() { printf '%s/%s' "$STATE" "$(basename "$1")"; }

ts_sql() {  # SQL run as the owner through the cluster's socket
    runuser -u "$owner" -- psql -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -d "$db" -c "$1"
}

case $cmd in
up)
    if [[ ! -e $SYSFS/class/zram-control/hot_add ]] && [[ $SYSFS == /sys ]] && command -v modprobe >/dev/null; then
        modprobe zram num_devices=0 2>/dev/null || true
    fi
    [[ -e $SYSFS/class/zram-control/hot_add ]] || die "this kernel has no zram ($SYSFS/class/zram-control/hot_add is missing, and modprobe zram did not add it): the CSD tablespace cannot be emulated here. pg_hybrid.storage_stats(regclass) still reports the bytes such a drive would store." 3
    size_norm=${size^^}; size_bytes=$(numfmt --from=iec "${size_norm%B}" 2>/dev/null) || die "--size '$size' is not a size (examples: 512M, 2G)"
    (( size_bytes >= 64 * 1024 * 1024 )) || die "--size must be at least 64M (got '$size')"
    id "$owner" >/dev/null 2>&1 || die "--owner '$owner' is not an OS user"
    dev=$(mounted_device)
    [[ -z $dev ]] || die "$dir is already a mount point (of $dev): pick another directory, or run 'csd.sh down --dir $dir' if it is a CSD this script made"
    if [[ -d $dir ]] && [[ -n $(ls -A "$dir") ]]; then
        die "$dir is not empty: mounting over it would hide its files"
    fi
    mkdir -p "$dir" "$STATE"
    n=$(cat "$SYSFS/class/zram-control/hot_add") || die "could not add a zram device"
    blk=$SYSFS/block/zram$n
    printf '%s\n' "$dir" > "$(state_of "zram$n")"
    undo() { umount "$dir" 2>/dev/null || true; echo "$n" > "$SYSFS/class/zram-control/hot_remove" 2>/dev/null || true; rm -f "$(state_of "zram$n")"; }
    trap 'undo' ERR
    grep -qw lz4 "$blk/comp_algorithm" || { undo; die "zram on this kernel has no lz4 (it offers: $(cat "$blk/comp_algorithm")): a CSD compresses with LZ4"; }
    echo lz4 > "$blk/comp_algorithm"
    echo "$size_bytes" > "$blk/disksize"
    mkfs.ext4 -q -b 4096 -O ^has_journal -E nodiscard "/dev/zram$n"
    mount -o discard,noatime "/dev/zram$n" "$dir"
    mkdir "$dir/ts"
    chown "$owner:" "$dir/ts"
    chmod 700 "$dir/ts"
    trap - ERR
    if [[ -n $tablespace ]]; then
        ts_sql "CREATE TABLESPACE $tablespace LOCATION '$dir/ts'" || { undo; die "CREATE TABLESPACE $tablespace failed (message above); the device is removed again"; }
    fi
    printf 'device=/dev/zram%s\ndir=%s\nlocation=%s/ts\n' "$n" "$dir" "$dir"
    ;;
stats)
    dev=$(mounted_device)
    [[ $dev == /dev/zram* ]] || die "$dir is not a mounted zram device (run 'csd.sh up --dir $dir' first)"
    sync -f "$dir"
    read -r orig compr mem _limit _max same _compacted huge _rest < "$SYSFS/block/${dev#/dev/}/mm_stat"
    printf 'device=%s\nlogical_bytes=%s\nphysical_bytes=%s\nmemory_bytes=%s\nfree_blocks_4k=%s\nraw_blocks_4k=%s\n' \
        "$dev" "$orig" "$compr" "$mem" "$same" "$huge"
    ;;
down)
    dev=$(mounted_device)
    [[ -n $dev ]] || die "$dir is not a mount point: nothing to take down"
    name=${dev#/dev/}
    [[ -f $(state_of "$name") && $(cat "$(state_of "$name")") == "$dir" ]] \
        || die "$dev at $dir was not made by csd.sh: leaving it alone"
    if [[ -n $tablespace ]]; then
        ts_sql "DROP TABLESPACE IF EXISTS $tablespace" || die "DROP TABLESPACE $tablespace failed (message above): drop or move what it holds first"
    fi
    umount "$dir" 2>/dev/null || die "$dir is busy (a running cluster still uses the tablespace, or a shell sits in it): stop it or drop the tablespace, then run down again"
    echo "${name#zram}" > "$SYSFS/class/zram-control/hot_remove" || die "could not remove $dev (still open?)"
    rm -f "$(state_of "$name")"
    rmdir "$dir" 2>/dev/null || true
    ;;
esac
