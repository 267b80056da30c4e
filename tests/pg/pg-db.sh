#!/usr/bin/env bash
# Makes a fresh database NAME from the template of the PostgreSQL in DIR
# (tests/pg/pg-up.sh), dropping an older one of that name, and prints its URL.
# Usage: tests/pg/pg-db.sh DIR NAME   (NAME: letters, digits and _)
set -euo pipefail
dir=${1:?usage: pg-db.sh DIR NAME}
name=${2:?usage: pg-db.sh DIR NAME}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pg-common.sh"
if [[ ! $name =~ ^[A-Za-z_][A-Za-z0-9_]{0,62}$ ]]; then
  echo "pg-db: a database name is letters, digits and _ (got '$name')" >&2
  exit 1
fi
dir=$(cd "$dir" && pwd)
psql_q "$dir" postgres -c "DROP DATABASE IF EXISTS $name" \
  -c "CREATE DATABASE $name TEMPLATE alallo_tmpl" >/dev/null
pg_url "$dir" "$name"
