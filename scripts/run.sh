#!/usr/bin/env bash
# make run: starts alallo serve on the embedded default (SQLite in DATA, one
# local worker, the built-in model) and prints the dashboard URL and API key.
set -euo pipefail
bin=$1 data=$2 port=$3
mkdir -p "$data"
exec "$bin" serve --port "$port" --data "$data"
