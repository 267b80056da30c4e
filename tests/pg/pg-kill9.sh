#!/usr/bin/env bash
# Kills the PostgreSQL of tests/pg/pg-up.sh in DIR with SIGKILL (postmaster
# and every server process, as a crash would) and waits until none is left;
# with --restart, starts it again on the same data (crash recovery replays
# the WAL) and waits until it accepts connections.
# Usage: tests/pg/pg-kill9.sh DIR [--restart]
set -euo pipefail
dir=${1:?usage: pg-kill9.sh DIR [--restart]}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pg-common.sh"
dir=$(cd "$dir" && pwd)
pid=$(head -1 "$dir/data/postmaster.pid")
[[ $pid =~ ^[0-9]+$ ]] || { echo "pg-kill9: no postmaster in $dir" >&2; exit 1; }
# The server processes are the postmaster's children.
kids=$(pgrep -P "$pid" || true)
kill -9 "$pid" $kids 2>/dev/null || true
for _ in $(seq 300); do
  alive=0
  for p in $pid $kids; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 0.1
done
if [[ ${2:-} == --restart ]]; then
  as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t 60 \
    -o "-k $dir -p $PGPORT -c listen_addresses='' -c max_connections=200" start >/dev/null
fi
