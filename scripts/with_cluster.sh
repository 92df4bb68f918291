#!/usr/bin/env bash
# scripts/with_cluster.sh CMD [ARGS...] — start a scratch cluster, create
# database $PH_DB (default ph_differential) with pg_hybrid (or the stand-in
# shim when PH_AM=btree), run CMD with PH_PGHOST/PH_PGPORT/PH_USER/PH_PGBIN/PH_DB
# exported, then stop the cluster.  Handy for running one test by hand:
#     scripts/with_cluster.sh python3 tests/differential.py --seed 7 --time 30
#     PH_AM=btree scripts/with_cluster.sh python3 tests/differential.py
#     scripts/with_cluster.sh bash -c 'psql -h "$PH_PGHOST" -p "$PH_PGPORT" -U "$PH_USER" "$PH_DB"'
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
(($#)) || { ph_usage "$0"; exit 2; }
ph_trap_install
dir=$(ph_scratch adhoc)
cluster_init "$dir" "$PH_PORT"
cluster_start "$dir"
export PH_DB=${PH_DB:-ph_differential}
ph_prepare_db "$dir" "$PH_DB"
export PH_PGHOST=$dir/sock PH_PGPORT=$PH_PORT PH_OUTDIR=$dir
ph_log "cluster $dir (socket $PH_PGHOST, port $PH_PGPORT, db $PH_DB, am $PH_AM)"
"$@"
