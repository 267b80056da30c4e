#!/usr/bin/env bash
# Runs the integration tests (tests/integration/*.test.mjs) with node's test
# runner against the real binary.
#
# Usage: scripts/integration.sh BIN                    every test, on SQLite
#        scripts/integration.sh BIN postgresql [FILE...] the PostgreSQL pass:
#   a throwaway PostgreSQL (tests/pg/pg-up.sh) is started for the run and
#   stopped after it, and each serve gets a fresh database of it
#   (ALALLO_TEST_STORE=postgresql, tests/integration/service_harness.mjs);
#   the files are FILEs, else the subset below: the service, the scheduler,
#   kill -9 of serve, remote workers and the take-over of a second serve.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export ALALLO_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export ALALLO_ROOT=$root
store=${2:-sqlite}
shopt -s nullglob
if [[ $store == sqlite ]]; then
  tests=("$root"/tests/integration/*.test.mjs)
  if ((${#tests[@]} == 0)); then echo "integration: no tests"; exit 0; fi
  exec node --test --test-concurrency=1 "${tests[@]}"
fi
if [[ $store != postgresql ]]; then
  echo "integration: the store is sqlite or postgresql, not '$store'" >&2
  exit 2
fi
tests=("${@:3}")
if ((${#tests[@]} == 0)); then
  tests=("$root"/tests/integration/service_*.test.mjs "$root"/tests/integration/sched_*.test.mjs
         "$root"/tests/integration/fault_serve_kill9.test.mjs
         "$root"/tests/integration/worker_remote.test.mjs
         "$root"/tests/integration/ha_takeover.test.mjs
         "$root"/tests/integration/webhooks.test.mjs
         "$root"/tests/integration/wandb.test.mjs)
fi
# A short path: the server's socket lives in it (107 bytes at most).
pg=$(mktemp -d /tmp/alallo-pg-XXXXXX)
trap '"$root"/tests/pg/pg-down.sh "$pg"' EXIT
trap 'exit 143' INT TERM # so that the EXIT trap stops the server on a signal too
"$root"/tests/pg/pg-up.sh "$pg" "$ALALLO_BIN" >/dev/null
echo "integration: PostgreSQL in $pg (${#tests[@]} files)"
ALALLO_TEST_STORE=postgresql ALALLO_PG_DIR=$pg node --test --test-concurrency=1 "${tests[@]}"
