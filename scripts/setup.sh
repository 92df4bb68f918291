#!/usr/bin/env bash
# scripts/setup.sh — idempotent setup on Debian 12 (run as root):
#   1. apt packages (only the missing ones): PostgreSQL 15 + server headers,
#      clang/libclang (bindgen), build tools, python3, procps, sqlsmith (tests/sqlsmith.sh)
#   2. checks cargo/rustup (assumed installed; clear error if not)
#   3. cargo-pgrx 0.18.1 (installed only if `cargo pgrx --version` differs)
#   4. `cargo pgrx init --pg15=<pg_config>` (only if ~/.pgrx/config.toml lacks pg15)
#   5. builds the extension (cargo pgrx package --release) and installs its files
#      atomically (new inode + rename), so running servers are never disturbed
# Never downloads PostgreSQL sources.
#
# Usage: scripts/setup.sh [--no-build]      (--no-build: skip step 5; env PH_SKIP_BUILD=1)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

no_build=${PH_SKIP_BUILD:-0}
for a in "$@"; do
    case $a in
        --no-build) no_build=1 ;;
        -h | --help) ph_usage "$0"; exit 0 ;;
        *) ph_die "setup.sh: unknown option $a" ;;
    esac
done

pg_config=$PH_PG_CONFIG
pgrx_version=0.18.1

# ------------------------------------------------------------------ apt --
pkgs=(postgresql-15 postgresql-server-dev-15 libclang-dev clang pkg-config build-essential
      python3 procps util-linux ca-certificates sqlsmith)
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || ph_die "missing packages (${missing[*]}); run scripts/setup.sh as root"
    ph_log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    ph_log "apt packages: all present"
fi
[[ -x $pg_config ]] || ph_die "pg_config not found at $pg_config (see pgrx.toml)"
ph_log "PostgreSQL: $("$pg_config" --version)"

# ---------------------------------------------------------------- cargo --
if ! command -v cargo >/dev/null 2>&1 && [[ -f $HOME/.cargo/env ]]; then
    # shellcheck disable=SC1091
    source "$HOME/.cargo/env"
fi
command -v cargo >/dev/null 2>&1 ||
    ph_die "cargo not found. Install Rust first (https://rustup.rs: rustup, stable toolchain), then re-run scripts/setup.sh"
ph_log "$(cargo --version)"

have=$(cargo pgrx --version 2>/dev/null || true)
if [[ $have != *" $pgrx_version"* ]]; then
    ph_log "installing cargo-pgrx $pgrx_version (found: ${have:-none})"
    cargo install cargo-pgrx --version "$pgrx_version" --locked
else
    ph_log "$have"
fi

pgrx_home=${PGRX_HOME:-$HOME/.pgrx}
if ! grep -Eq '^[[:space:]]*pg15[[:space:]]*=' "$pgrx_home/config.toml" 2>/dev/null; then
    ph_log "cargo pgrx init --pg15=$pg_config"
    cargo pgrx init --pg15="$pg_config"
else
    ph_log "pgrx: pg15 already configured in $pgrx_home/config.toml"
fi

# ---------------------------------------------------------------- build --
if [[ $no_build == 1 ]]; then
    ph_log "skipping extension build (--no-build)"
    exit 0
fi
cd "$PH_REPO"
ph_log "building and installing pg_hybrid (release)"
# Package into a staging tree, then `install` each file: install(1) writes a new inode
# and renames it into place, so a server that has the old library mapped keeps running
# on it (cargo pgrx install rewrites the file in place, which can crash such a server).
stage=$PH_REPO/target/release/pg_hybrid-stage
rm -rf "$stage"
cargo pgrx package --pg-config "$pg_config" --out-dir "$stage"
while IFS= read -r -d '' f; do
    dest=/${f#"$stage"/}
    install -D -m "$([[ $f == *.so ]] && echo 755 || echo 644)" "$f" "$dest.ph_new"
    mv -f "$dest.ph_new" "$dest"
done < <(find "$stage" -type f -print0)
share=$("$pg_config" --sharedir)/extension
lib=$("$pg_config" --pkglibdir)
[[ -f $share/pg_hybrid.control ]] || ph_die "install did not produce $share/pg_hybrid.control"
[[ -f $lib/pg_hybrid.so ]] || ph_die "install did not produce $lib/pg_hybrid.so"
ph_log "installed: $lib/pg_hybrid.so, $share/pg_hybrid.control"
