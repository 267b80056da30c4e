#!/usr/bin/env bash
# bench/sched/server_pass.sh - the scheduling pass of the real server, not
# the simulation: `alallo serve` with WORKERS (200) registered workers of
# three sizes and two classes, JOBS (10,000) queued jobs created through
# the API, then every worker claims one (each claim runs a pass over the
# whole queue) and the server's own passes run for SETTLE_S seconds over
# the busy fleet. Prints one JSON object; the pass times come from the
# server's /metrics (wall time, store reads included).
#   bench/sched/server_pass.sh [path/to/alallo]
#   STORE=postgresql bench/sched/server_pass.sh   on a throwaway PostgreSQL
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
export ALALLO_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export ALALLO_ROOT=$root
source "$root/bench/lib/store.sh"
node "$root/bench/sched/server_pass.mjs"
