# shellcheck shell=bash
# scripts/lib.sh — shared helpers for scripts/, tests/ and bench/.  Source it:
#     source "$(dirname "$0")/../scripts/lib.sh"
#
# Settings come from pgrx.toml (`key = "value"` lines); each can be overridden by
# an environment variable:
#     PH_PG_CONFIG PH_SCRATCH PH_PORT PH_BENCH_PORT PH_USER PH_LOCALE PH_AM
# Other knobs:
#     PH_PRELOAD=0|1      put shared_preload_libraries='pg_hybrid' in scratch clusters
#                         (default 1, or 0 in stand-in mode)
#     PH_KEEP=1           keep scratch data directories after a successful run
#     PH_ALLOW_FSYNC_OFF=1  let cluster_init accept fsync=off (benchmarks only)
#
# Stand-in mode: while the extension is not built, PH_AM=btree runs every test
# against PostgreSQL's btree, without the preload, with tests/standin_shim.sql
# providing pg_hybrid.merge / verify / index_stats (amcheck-backed).
#
# Scratch clusters run as the unprivileged OS user $PH_USER, listen only on a
# private unix socket directory (listen_addresses=''), and are stopped by the
# EXIT trap installed by ph_trap_install.  Only clusters started by the current
# script are ever stopped or killed.

PH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---------------------------------------------------------------- settings --
# ph_setting KEY [DEFAULT]: value of KEY in pgrx.toml (last occurrence wins).
ph_setting() {
    local key=$1 def=${2-} line val
    line=$(grep -E "^[[:space:]]*${key}[[:space:]]*=" "$PH_REPO/pgrx.toml" 2>/dev/null | tail -n1 || true)
    if [[ -z $line ]]; then
        printf '%s' "$def"
        return 0
    fi
    val=${line#*=}
    if [[ $val =~ ^[[:space:]]*\"([^\"]*)\" ]]; then
        val=${BASH_REMATCH[1]}
    else
        val=${val%%#*}
        val=$(printf '%s' "$val" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
    fi
    printf '%s' "$val"
}

PH_PG_CONFIG=${PH_PG_CONFIG:-$(ph_setting pg_config /usr/lib/postgresql/15/bin/pg_config)}
PH_SCRATCH=${PH_SCRATCH:-$(ph_setting scratch_root /tmp/pg_hybrid_test)}
PH_PORT=${PH_PORT:-$(ph_setting port 55432)}
PH_BENCH_PORT=${PH_BENCH_PORT:-$(ph_setting bench_port 55442)}
PH_USER=${PH_USER:-$(ph_setting os_user pghybrid)}
PH_LOCALE=${PH_LOCALE:-$(ph_setting locale C.UTF-8)}
PH_AM=${PH_AM:-$(ph_setting am hybrid_btree)}
if [[ $PH_AM == btree ]]; then PH_STANDIN=${PH_STANDIN:-1}; else PH_STANDIN=${PH_STANDIN:-0}; fi
if [[ $PH_STANDIN == 1 ]]; then PH_PRELOAD=${PH_PRELOAD:-0}; else PH_PRELOAD=${PH_PRELOAD:-1}; fi
PH_PGBIN=
if [[ -x $PH_PG_CONFIG ]]; then PH_PGBIN=$("$PH_PG_CONFIG" --bindir); fi
export PH_PG_CONFIG PH_SCRATCH PH_PORT PH_BENCH_PORT PH_USER PH_LOCALE PH_AM PH_STANDIN PH_PRELOAD PH_PGBIN

PH_CLUSTERS=()   # data-directory parents started by this script
PH_BG_PIDS=()    # background jobs started by this script

# ----------------------------------------------------------------- logging --
ph_log()  { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
ph_warn() { printf '[%s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
ph_die()  { printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# ph_usage FILE: print FILE's header comment (from line 2 to the first non-comment line).
ph_usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$1"; }

ph_require_pg() {
    [[ -n $PH_PGBIN && -x $PH_PGBIN/postgres ]] ||
        ph_die "PostgreSQL server binaries not found (pg_config=$PH_PG_CONFIG). Run scripts/setup.sh as root, or set pg_config in pgrx.toml."
}

# -------------------------------------------------------------- OS user --
ph_ensure_user() {
    if id -u "$PH_USER" >/dev/null 2>&1; then return 0; fi
    [[ $(id -u) == 0 ]] || ph_die "OS user '$PH_USER' does not exist and we are not root to create it"
    ph_log "creating OS user $PH_USER"
    useradd --system --user-group --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin "$PH_USER"
}

# ph_as_user CMD...: run CMD as $PH_USER (cwd /, so no permission warnings).
ph_as_user() {
    if [[ $(id -un) == "$PH_USER" ]]; then
        (cd / && "$@")
    else
        (cd / && runuser -u "$PH_USER" -- "$@")
    fi
}

# ph_scratch NAME: create (if needed) and print $PH_SCRATCH/NAME, owned by $PH_USER.
ph_scratch() {
    local d=$PH_SCRATCH/$1
    ph_ensure_user
    if [[ ! -d $PH_SCRATCH ]]; then
        mkdir -p "$PH_SCRATCH"
        chmod 755 "$PH_SCRATCH"
    fi
    [[ $(id -u) == 0 ]] && chown "$PH_USER:" "$PH_SCRATCH"
    mkdir -p "$d"
    [[ $(id -u) == 0 ]] && chown "$PH_USER:" "$d"
    printf '%s' "$d"
}

# ------------------------------------------------------------- port checks --
# ph_port_check PORT: die with a clear message if any server listens on PORT
# (a unix socket .s.PGSQL.PORT anywhere, or a TCP listener).
ph_port_check() {
    local port=$1 hex sock
    sock=$(awk -v p=".s.PGSQL.$port" 'NR>1 && $NF ~ ("/" p "$") {print $NF; exit}' /proc/net/unix 2>/dev/null || true)
    if [[ -n $sock ]]; then
        ph_die "port $port is already in use by another server (unix socket $sock). Choose another port in pgrx.toml (port = ...) or set PH_PORT=... / PH_BENCH_PORT=..."
    fi
    hex=$(printf '%04X' "$port")
    if awk -v h="$hex" 'NR>1 { split($2,a,":"); if (a[2]==h && $4=="0A") f=1 } END {exit !f}' \
            /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
        ph_die "TCP port $port is already in use by another process. Choose another port in pgrx.toml (port = ...) or set PH_PORT=... / PH_BENCH_PORT=..."
    fi
}

# ---------------------------------------------------------------- clusters --
# A cluster lives in DIR: DIR/data (PGDATA), DIR/sock (socket dir), DIR/port,
# DIR/postgres.log.

ph_cluster_pid() {      # DIR -> postmaster pid if running, else nothing
    local f=$1/data/postmaster.pid pid
    [[ -f $f ]] || return 0
    pid=$(head -n1 "$f" 2>/dev/null || true)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && grep -q postgres "/proc/$pid/comm" 2>/dev/null; then
        printf '%s' "$pid"
    fi
}
cluster_running() { [[ -n $(ph_cluster_pid "$1") ]]; }
cluster_port()    { cat "$1/port"; }
cluster_sockdir() { printf '%s' "$1/sock"; }

# cluster_init DIR PORT [CONF-LINE...]
# Fresh initdb in DIR/data; CONF-LINEs are appended last (they win), e.g.
# "shared_preload_libraries = ''" or "shared_buffers = '1GB'".
cluster_init() {
    local dir=$1 port=$2; shift 2
    local line pid
    ph_require_pg
    ph_ensure_user
    for line in "$@"; do
        if [[ $line =~ ^[[:space:]]*fsync[[:space:]]*=[[:space:]]*\'?(off|false|0)\'? ]] && [[ ${PH_ALLOW_FSYNC_OFF:-0} != 1 ]]; then
            ph_die "cluster_init: fsync=off is only allowed for benchmarks (PH_ALLOW_FSYNC_OFF=1)"
        fi
    done
    case $dir in "$PH_SCRATCH"/*) ;; *) ph_die "cluster_init: $dir is not under scratch root $PH_SCRATCH" ;; esac
    pid=$(ph_cluster_pid "$dir")
    if [[ -n $pid ]]; then
        ph_die "a cluster is still running in $dir (postmaster pid $pid), left by an earlier run; not touching it. Stop it with: runuser -u $PH_USER -- $PH_PGBIN/pg_ctl stop -D $dir/data -m fast"
    fi
    ph_port_check "$port"
    ph_scratch "" >/dev/null
    rm -rf "$dir"
    mkdir -p "$dir/sock"
    chmod 755 "$dir" "$dir/sock"
    echo "$port" >"$dir/port"
    : >"$dir/postgres.log"
    chown -R "$PH_USER:" "$dir"
    ph_as_user "$PH_PGBIN/initdb" -D "$dir/data" -A trust -U "$PH_USER" -E UTF8 \
        --locale="$PH_LOCALE" --no-sync >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; ph_die "initdb failed for $dir"; }
    {
        echo
        echo "# ---- pg_hybrid scratch cluster (scripts/lib.sh) ----"
        echo "port = $port"
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$dir/sock'"
        if [[ $PH_PRELOAD == 1 ]]; then
            echo "shared_preload_libraries = 'pg_hybrid'"
        fi
        echo "wal_level = replica"
        echo "max_wal_senders = 8"
        echo "max_replication_slots = 8"
        echo "wal_keep_size = '512MB'"
        echo "hot_standby = on"
        echo "fsync = on"
        echo "max_connections = 60"
        echo "lc_messages = 'C'"
        echo "log_line_prefix = '%m [%p] %q%a '"
        echo "log_min_messages = warning"
        echo "restart_after_crash = on"
        for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
}

# cluster_conf DIR CONF-LINE...: append settings (take effect at next start).
cluster_conf() {
    local dir=$1 line; shift
    for line in "$@"; do echo "$line"; done >>"$dir/data/postgresql.conf"
}

cluster_start() {
    local dir=$1 port
    port=$(cluster_port "$dir")
    if cluster_running "$dir"; then ph_die "cluster_start: $dir is already running"; fi
    ph_port_check "$port"
    if ! ph_as_user "$PH_PGBIN/pg_ctl" start -w -t 180 -D "$dir/data" -l "$dir/postgres.log" >"$dir/pg_ctl.out" 2>&1; then
        cat "$dir/pg_ctl.out" >&2 || true
        tail -n 40 "$dir/postgres.log" >&2 || true
        ph_die "could not start cluster $dir (port $port); log: $dir/postgres.log"
    fi
    local d seen=0
    for d in "${PH_CLUSTERS[@]}"; do [[ $d == "$dir" ]] && seen=1; done
    [[ $seen == 1 ]] || PH_CLUSTERS+=("$dir")
}

# cluster_stop DIR [fast|immediate|smart]
cluster_stop() {
    local dir=$1 mode=${2:-fast}
    cluster_running "$dir" || return 0
    ph_as_user "$PH_PGBIN/pg_ctl" stop -D "$dir/data" -m "$mode" -w -t 60 >/dev/null 2>&1 ||
        ph_as_user "$PH_PGBIN/pg_ctl" stop -D "$dir/data" -m immediate -w -t 60 >/dev/null 2>&1 || true
}

# cluster_kill9 DIR: SIGKILL the postmaster and its children (a crash), wait for them.
cluster_kill9() {
    local dir=$1 pid kids p i
    pid=$(ph_cluster_pid "$dir")
    [[ -n $pid ]] || ph_die "cluster_kill9: $dir is not running"
    # Stop the postmaster first: a child it forked between listing its
    # children and killing it would survive, still attached to the shared
    # memory, and the restart would refuse to start ("pre-existing shared
    # memory block is still in use").  A stopped process forks nothing.
    kill -STOP "$pid" 2>/dev/null || true
    kids=$(pgrep -P "$pid" || true)
    kill -9 "$pid" 2>/dev/null || true
    for p in $kids; do kill -9 "$p" 2>/dev/null || true; done
    for i in $(seq 1 200); do
        local alive=0
        for p in $pid $kids; do kill -0 "$p" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && return 0
        sleep 0.1
    done
    ph_die "cluster_kill9: processes of $dir did not exit"
}

# ph_standby PRIMARY STANDBY PORT [CONF-LINE...]: a streaming hot standby of
# the running cluster PRIMARY, made by pg_basebackup -R -X stream into the
# directory STANDBY on PORT (its own socket directory), with the extra
# settings given, started and checked to be in recovery.
ph_standby() {
    local p=$1 s=$2 port=$3 pid
    shift 3
    pid=$(ph_cluster_pid "$s")
    [[ -z $pid ]] || ph_die "a cluster is still running in $s (pid $pid), left by an earlier run; not touching it"
    ph_port_check "$port"
    rm -rf "$s"
    mkdir -p "$s/sock"
    chmod 755 "$s" "$s/sock"
    echo "$port" >"$s/port"
    : >"$s/postgres.log"
    chown -R "$PH_USER:" "$s"
    ph_as_user "$PH_PGBIN/pg_basebackup" -h "$p/sock" -p "$(cluster_port "$p")" -U "$PH_USER" -D "$s/data" -R -X stream -c fast
    cluster_conf "$s" "" "# ---- standby overrides (ph_standby) ----" \
        "port = $port" "unix_socket_directories = '$s/sock'" "hot_standby = on" "$@"
    cluster_start "$s"
    cluster_wait_ready "$s"
    [[ $(cluster_sql "$s" postgres "SELECT pg_is_in_recovery()") == t ]] || ph_die "the standby in $s is not in recovery"
}

# cluster_psql DIR DB [PSQL-ARGS...]: psql as $PH_USER, ON_ERROR_STOP, quiet.
cluster_psql() {
    local dir=$1 db=$2; shift 2
    ph_as_user env PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning" \
        "$PH_PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$(cluster_port "$dir")" \
        -U "$PH_USER" -d "$db" "$@"
}

# cluster_sql DIR DB SQL...: run SQL, print tuples unaligned ('|' separated).
cluster_sql() {
    local dir=$1 db=$2; shift 2
    local s args=()
    for s in "$@"; do args+=(-c "$s"); done
    cluster_psql "$dir" "$db" -At "${args[@]}"
}

# cluster_wait_ready DIR [SECONDS]
cluster_wait_ready() {
    local dir=$1 t=${2:-120} i
    for ((i = 0; i < t * 5; i++)); do
        if ph_as_user "$PH_PGBIN/pg_isready" -q -h "$dir/sock" -p "$(cluster_port "$dir")" -d postgres; then
            return 0
        fi
        sleep 0.2
    done
    ph_die "cluster $dir not ready after ${t}s"
}

# ph_prepare_db DIR DB: (re)create DB and install pg_hybrid (or the stand-in shim).
ph_prepare_db() {
    local dir=$1 db=$2
    cluster_psql "$dir" postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS \"$db\"" -c "CREATE DATABASE \"$db\""
    if [[ $PH_STANDIN == 1 ]]; then
        cluster_psql "$dir" "$db" <"$PH_REPO/tests/standin_shim.sql" >/dev/null   # stdin: the repo may be unreadable for $PH_USER
    else
        if ! cluster_psql "$dir" "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_hybrid" 2>"$dir/create_extension.err"; then
            cat "$dir/create_extension.err" >&2
            if grep -q 'unacceptable schema name' "$dir/create_extension.err"; then
                # PostgreSQL reserves "pg_" schema names; CREATE EXTENSION with
                # control-file schema=pg_hybrid only works with this superuser GUC.
                ph_warn "CREATE EXTENSION pg_hybrid needs allow_system_table_mods (schema name starts with pg_); retrying with it"
                cluster_psql "$dir" "$db" -c "SET allow_system_table_mods = on" -c "CREATE EXTENSION IF NOT EXISTS pg_hybrid"
            else
                ph_die "CREATE EXTENSION pg_hybrid failed in $db"
            fi
        fi
    fi
}

# ph_venv DIR PKG...: a Python venv in DIR with PKG... installed from PyPI
# (python3-venv installed first where Debian's python3 lacks it).
ph_venv() {
    local dir=$1
    shift
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        ph_log "python3 lacks venv/ensurepip; installing python3-venv"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null; } ||
            ph_die "cannot create a Python venv: python3-venv is missing and could not be installed"
    fi
    [[ -x $dir/bin/python ]] || python3 -m venv "$dir" || ph_die "python3 -m venv $dir failed"
    "$dir/bin/pip" install -q --disable-pip-version-check "$@" ||
        ph_die "pip could not install $* into $dir (PyPI reachable?)"
}

# ph_internal_errors < LOG: the internal errors (SQLSTATE class XX) of a
# server log written with log_line_prefix '%m [%p] %e ' and
# log_error_verbosity = verbose, one per line as "message | function,
# file:line" (the LOCATION logged for it): ours are raised from a .rs file.
ph_internal_errors() {
    awk '
        match($0, /\] XX[0-9A-Z][0-9A-Z][0-9A-Z] ERROR:  (XX[0-9A-Z][0-9A-Z][0-9A-Z]: )?/) { msg = substr($0, RSTART + RLENGTH); want = 1; next }
        want && match($0, /\] XX[0-9A-Z][0-9A-Z][0-9A-Z] LOCATION:  /) { print msg " | " substr($0, RSTART + RLENGTH); want = 0 }'
}

# ph_wait_replay PRIMARY STANDBY DB [SECONDS]: wait until the standby replayed
# everything the primary has written so far.
ph_wait_replay() {
    local p=$1 s=$2 db=$3 t=${4:-180} lsn i ok
    lsn=$(cluster_sql "$p" "$db" "SELECT pg_current_wal_lsn()")
    for ((i = 0; i < t * 5; i++)); do
        ok=$(cluster_sql "$s" "$db" "SELECT coalesce(pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn, false)" 2>/dev/null || true)
        [[ $ok == t ]] && return 0
        sleep 0.2
    done
    ph_die "standby $s did not replay up to $lsn within ${t}s"
}

# ------------------------------------------------------ index/seq checking --
# ph_index_vs_seq DIR DB TABLE INDEX WHERE
# The rows of TABLE matching WHERE, read through INDEX (plain index scan and
# bitmap scan, forced) and through a seqscan, must be the same multiset; the
# forced plans must really use INDEX.  Prints a one-line summary; returns 1 on
# any mismatch.
ph_index_vs_seq() {
    local dir=$1 db=$2 tab=$3 idx=$4 where=$5
    local q seq res mode plan rc=0 ordered cols probe from pre=() post=() idxoid
    from="FROM $tab t WHERE $where"
    # INDEX by OID: its name may be unqualified beside a schema-qualified TABLE
    idxoid=$(cluster_sql "$dir" "$db" "SELECT i.indexrelid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = '$tab'::regclass AND c.relname = '${idx##*.}'")
    if [[ -z $idxoid ]]; then
        echo "  $tab/$idx: no such index on $tab" >&2
        return 1
    fi
    # An index without order (tiered_hash) answers equality only: each
    # distinct key (all key columns, none NULL) of the rows is looked up
    # through it, in a nested loop, and must bring back exactly its rows.
    ordered=$(cluster_sql "$dir" "$db" "SELECT pg_indexam_has_property(relam, 'can_order') FROM pg_class WHERE oid = $idxoid")
    if [[ $ordered == f ]]; then
        cols=$(cluster_sql "$dir" "$db" "SELECT string_agg(quote_ident(a.attname), ',' ORDER BY k.n) FROM pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, n), pg_attribute a WHERE i.indexrelid = $idxoid AND k.n <= i.indnkeyatts AND a.attrelid = i.indrelid AND a.attnum = k.attnum")
        probe=$(sed -E 's/([^,]+)/t.\1 = d.\1/g; s/,/ AND /g' <<<"$cols")
        where="$where AND $(sed -E 's/([^,]+)/\1 IS NOT NULL/g; s/,/ AND /g' <<<"$cols")"
        from="FROM (SELECT DISTINCT $cols FROM $tab WHERE $where) d CROSS JOIN LATERAL (SELECT * FROM $tab t WHERE $where AND $probe OFFSET 0) t"
    fi
    # The scans must go through INDEX, not another index on some of its
    # columns: the others are marked invalid for the length of a
    # transaction that is rolled back. (Not on a standby, which cannot
    # write: run the check there on tables whose other indexes do not
    # compete.)
    if [[ $(cluster_sql "$dir" "$db" "SELECT pg_is_in_recovery()") == f ]]; then
        pre=("BEGIN" "UPDATE pg_index SET indisvalid = false WHERE indrelid = '$tab'::regclass AND indexrelid <> $idxoid")
        post=("ROLLBACK")
    fi
    q="SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '-') FROM $tab t WHERE $where"
    seq=$(cluster_sql "$dir" "$db" "SET enable_indexscan=off" "SET enable_bitmapscan=off" "SET enable_indexonlyscan=off" "$q")
    q="SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '-') $from"
    for mode in index bitmap count; do
        local sets=("SET enable_seqscan=off")
        case $mode in
            index)  sets+=("SET enable_bitmapscan=off" "SET enable_indexonlyscan=off") ;;
            bitmap) sets+=("SET enable_indexscan=off" "SET enable_indexonlyscan=off") ;;
            count)  sets+=("SET enable_bitmapscan=off") ;;
        esac
        local qq=$q
        [[ $mode == count ]] && qq="SELECT count(*) $from"
        plan=$(cluster_sql "$dir" "$db" "${pre[@]}" "${sets[@]}" "EXPLAIN (COSTS OFF) $qq" "${post[@]}")
        if ! grep -Eq "(using|on) $idx( |\$)" <<<"$plan"; then
            echo "  $tab/$idx [$mode]: plan does not use $idx:" >&2
            sed 's/^/      /' <<<"$plan" >&2
            rc=1
            continue
        fi
        res=$(cluster_sql "$dir" "$db" "${pre[@]}" "${sets[@]}" "$qq" "${post[@]}")
        if [[ $mode == count ]]; then
            if [[ $res != "${seq%% *}" ]]; then
                echo "  $tab/$idx [$mode]: index count $res != seqscan count ${seq%% *} (where $where)" >&2
                rc=1
            fi
        elif [[ $res != "$seq" ]]; then
            echo "  $tab/$idx [$mode]: index gives '$res', seqscan gives '$seq' (where $where)" >&2
            rc=1
        fi
    done
    if [[ $rc == 0 ]]; then
        echo "  $tab/$idx: index and seqscan agree (${seq%% *} rows where $where)"
    fi
    return $rc
}

# ph_verify DIR DB INDEX: pg_hybrid.verify(INDEX, heapallindexed => true)
ph_verify() {
    local dir=$1 db=$2 idx=$3
    if cluster_sql "$dir" "$db" "SELECT pg_hybrid.verify('$idx'::regclass, heapallindexed => true)" >/dev/null; then
        echo "  verify($idx): ok"
    else
        echo "  verify($idx): FAILED" >&2
        return 1
    fi
}

# ------------------------------------------------------- background & trap --
ph_bg_add() { PH_BG_PIDS+=("$1"); }

# ph_kill_tree PID: SIGKILL PID and its descendants (by pid).
ph_kill_tree() {
    local pid=$1 c kids
    kids=$(pgrep -P "$pid" 2>/dev/null || true)
    kill -9 "$pid" 2>/dev/null || true
    for c in $kids; do ph_kill_tree "$c"; done
}

ph_cleanup() {
    local rc=${1:-0} p d
    for p in "${PH_BG_PIDS[@]}"; do ph_kill_tree "$p"; done
    PH_BG_PIDS=()
    for d in "${PH_CLUSTERS[@]}"; do
        cluster_stop "$d" "${PH_STOP_MODE:-fast}"
    done
    for d in "${PH_CGROUPS[@]}"; do rmdir "$d" 2>/dev/null || true; done
    PH_CGROUPS=()
    for d in "${PH_CSDS[@]}"; do
        bash "$PH_REPO/scripts/csd.sh" down --dir "$d" >/dev/null 2>&1 || ph_warn "could not take down the CSD at $d (scripts/csd.sh down --dir $d)"
    done
    PH_CSDS=()
    if [[ $rc == 0 && ${PH_KEEP:-0} != 1 ]]; then
        for d in "${PH_CLUSTERS[@]}"; do rm -rf "$d/data"; done
    elif [[ ${#PH_CLUSTERS[@]} -gt 0 ]]; then
        ph_log "scratch clusters kept for inspection: ${PH_CLUSTERS[*]} (logs: */postgres.log)"
    fi
    PH_CLUSTERS=()
}

# ph_size_bytes SIZE: '256MB', '1GB', '512kB', '1048576' -> bytes (powers of 1024).
ph_size_bytes() {
    local v=${1// /} n u
    [[ $v =~ ^([0-9]+)([A-Za-z]*)$ ]] || ph_die "not a size: '$1'"
    n=${BASH_REMATCH[1]}
    u=${BASH_REMATCH[2],,}
    case $u in
        "" | b) echo "$n" ;;
        kb | k) echo $((n << 10)) ;;
        mb | m) echo $((n << 20)) ;;
        gb | g) echo $((n << 30)) ;;
        tb | t) echo $((n << 40)) ;;
        *) ph_die "unknown unit in size '$1'" ;;
    esac
}

# ph_cap_memory DIR BYTES: moves the postmaster of the cluster in DIR (the
# backends it starts from then on follow) into a cgroup v1 memory group
# limited to BYTES (-1: no limit yet; whoever runs the measurement writes
# the limit to the group's memory.limit_in_bytes; the group is the last
# entry of PH_CGROUPS):
# shared memory its processes touch and the page cache of the files they
# read count against it, so reads past it go to the disk. The group is
# removed at exit (ph_cleanup).
PH_CGROUPS=()
ph_cap_memory() {
    local dir=$1 bytes=$2 root=/sys/fs/cgroup/memory g pid
    [[ -d $root && -w $root ]] ||
        ph_die "cannot cap the cluster's memory: no writable cgroup v1 memory controller at $root (run without --cache-cap, or as root on a host with it)"
    pid=$(ph_cluster_pid "$dir")
    [[ -n $pid ]] || ph_die "ph_cap_memory: the cluster in $dir is not running"
    g=$root/pg_hybrid_$(basename "$dir")_$$
    mkdir -p "$g"
    echo "$bytes" >"$g/memory.limit_in_bytes"
    echo "$pid" >"$g/cgroup.procs"
    PH_CGROUPS+=("$g")
}

# ph_csd_up CLUSTER-DIR TABLESPACE SIZE: a zram device of SIZE (scripts/csd.sh,
# design.md §6) mounted under the scratch root and registered in the running
# cluster as TABLESPACE; sets PH_CSD_DEVICE (/dev/zramN) and PH_CSD_DIR (the
# mount point). Taken down at exit, after the clusters stop (ph_cleanup).
# Returns 3 without a device when the kernel has no zram (the caller decides
# whether that is a skip). Not in a subshell: ph_cleanup must see the device.
PH_CSDS=()
ph_csd_up() {
    local dir=$1 ts=$2 size=$3 mnt out rc=0
    mnt=$PH_SCRATCH/csd_${ts}_$$
    out=$(bash "$PH_REPO/scripts/csd.sh" up --dir "$mnt" --size "$size" --owner "$PH_USER" \
        --tablespace "$ts" --host "$dir/sock" --port "$(cluster_port "$dir")") || rc=$?
    if ((rc == 3)); then return 3; fi
    ((rc == 0)) || ph_die "could not make the CSD tablespace $ts (scripts/csd.sh up, message above)"
    PH_CSDS+=("$mnt")
    PH_CSD_DIR=$mnt
    PH_CSD_DEVICE=$(printf '%s' "$out" | sed -n 's/^device=//p')
}

# ph_trap_install: stop everything this script started when it exits.
ph_trap_install() {
    trap 'ph_cleanup $?' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# ph_parse_quick SCRIPT ARGS...: the options every tests/*.sh takes; sets
# quick=1 for --quick, prints usage for --help, dies on anything else.
ph_parse_quick() {
    local script=$1 a
    shift
    quick=0
    for a in "$@"; do
        case $a in
            --quick) quick=1 ;;
            -h | --help) ph_usage "$script"; exit 0 ;;
            *) ph_die "$(basename "$script"): unknown option $a" ;;
        esac
    done
}

# ph_am_ddl AM: the index options and text collation the tests use for AM.
#   PH_IDX_OPTS  a WITH clause (hybrid_btree: merge_ratio 10; elastic_btree:
#                size_bound PH_SIZE_BOUND when set, so leaves turn compact;
#                tiered_btree, tiered_hash: hot_size PH_HOT_SIZE, default 256kB)
#   PH_TCOLL     collation clause for indexed text columns (elastic_btree
#                needs a memcmp-able encoding: COLLATE "C")
ph_am_ddl() {
    PH_IDX_OPTS=""
    PH_TCOLL=""
    case $1 in
        hybrid_btree) PH_IDX_OPTS=" WITH (merge_ratio = 10)" ;;
        griffin) PH_IDX_OPTS=" WITH (sync_ratio = 10)" ;;
        # a small hot tier, so sweeps and promotions run during the tests
        tiered_btree | tiered_hash) PH_IDX_OPTS=" WITH (hot_size = '${PH_HOT_SIZE:-256kB}', sample_rate = 0.3)" ;;
        elastic_btree)
            PH_TCOLL=' COLLATE "C"'
            [[ -n ${PH_SIZE_BOUND:-} ]] && PH_IDX_OPTS=" WITH (size_bound = '$PH_SIZE_BOUND')"
            ;;
    esac
    return 0
}

# ph_pgbench_summary DIR RC: prints the summary of a pgbench run whose output
# is in DIR/pgbench.{out,err}; says on stderr what went wrong and returns 1
# if pgbench exited with RC != 0 or reported errors or aborted clients.
ph_pgbench_summary() {
    local dir=$1 rc=$2 bad=0
    grep -vE '^progress:' "$dir/pgbench.err" | head -40 || true
    grep -E '^(progress|number of|latency|tps)' "$dir/pgbench.err" "$dir/pgbench.out" -h | sed 's/^/  /' || true
    if ((rc != 0)); then
        echo "pgbench exited with status $rc" >&2
        bad=1
    fi
    if grep -qiE 'aborted|error' "$dir/pgbench.err"; then
        echo "pgbench reported errors / aborted clients:" >&2
        grep -iE 'aborted|error' "$dir/pgbench.err" | head -20 >&2
        bad=1
    fi
    return $bad
}
