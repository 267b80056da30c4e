#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 for tests in DIR: a fresh cluster owned
# by an unprivileged user (PostgreSQL refuses root), listening on a UNIX
# socket in DIR only (listen_addresses=''), so that parallel runs never
# collide on ports; trust authentication for the role "alallo"; a template
# database "alallo_tmpl" that holds alallo's schema (made by the binary
# itself, so it always matches the build). Prints the base URL.
#
# Usage: tests/pg/pg-up.sh DIR [ALALLO_BIN]
#   DIR         an absent or empty folder (a short path: the socket's path
#               must stay under 107 bytes)
#   ALALLO_BIN  the alallo binary that writes the schema into the template
#               (default: build/alallo; without one the template is empty)
# Then: tests/pg/pg-db.sh DIR NAME prints the URL of a fresh database made
# from the template; tests/pg/pg-down.sh DIR stops the server and removes DIR.
set -euo pipefail
dir=${1:?usage: pg-up.sh DIR [ALALLO_BIN]}
bin=${2:-build/alallo}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pg-common.sh"

if [[ -e $dir/data/PG_VERSION ]]; then
  echo "pg-up: $dir already holds a cluster (pg-down.sh it first)" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
as_pg_user_prepare "$dir"
as_pg "$PGBIN/initdb" -D "$dir/data" -U alallo --auth=trust -E UTF8 \
  --no-instructions >"$dir/initdb.log" 2>&1 || {
  echo "pg-up: initdb failed:" >&2; tail -5 "$dir/initdb.log" >&2; exit 1; }
# fsync stays on: the kill -9 tests prove durability against this server.
if ! as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t 60 \
    -o "-k $dir -p $PGPORT -c listen_addresses='' -c max_connections=200" start >/dev/null; then
  echo "pg-up: the server did not start; its log:" >&2
  tail -20 "$dir/pg.log" >&2
  exit 1
fi
psql_q "$dir" postgres -c 'CREATE DATABASE alallo_tmpl' >/dev/null
url=$(pg_url "$dir" postgres)
# The binary brings an empty database to its schema (`alallo store
# migrate URL`); a database made from an empty template is migrated by the
# store when it is first opened instead (slower, same result).
if [[ -x $bin ]] && ! "$bin" store migrate "$(pg_url "$dir" alallo_tmpl)" >"$dir/migrate.log" 2>&1; then
  echo "pg-up: $bin could not write the schema into the template (empty):" >&2
  tail -3 "$dir/migrate.log" >&2
fi
echo "$url"
