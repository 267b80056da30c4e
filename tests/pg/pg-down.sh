#!/usr/bin/env bash
# Stops the PostgreSQL that tests/pg/pg-up.sh started in DIR (pg_ctl, then
# the postmaster's PID if pg_ctl cannot) and removes DIR.
# Usage: tests/pg/pg-down.sh DIR [--keep]   (--keep leaves DIR, e.g. its pg.log)
set -uo pipefail
dir=${1:?usage: pg-down.sh DIR [--keep]}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pg-common.sh"
[[ -d $dir ]] || exit 0
dir=$(cd "$dir" && pwd)
if [[ -f $dir/data/postmaster.pid ]]; then
  if ! as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1; then
    pid=$(head -1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
fi
[[ ${2:-} == --keep ]] || rm -rf "$dir"
