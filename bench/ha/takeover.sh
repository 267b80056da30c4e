#!/usr/bin/env bash
# bench/ha/takeover.sh - how long a standby `serve` takes to lead after the
# leader is killed (kill -9), and to place a queued job: ROUNDS (5) rounds
# of two serves on one store, a worker registered through the standby, a
# job queued, the leader killed; the clock runs from the kill to the
# standby's /healthz saying "leader": true, and to the worker's claim (made
# through the standby every 50 ms all along) returning the job.
# Prints one JSON object (milliseconds: each round, the median, the worst).
#   bench/ha/takeover.sh [path/to/alallo]
#   STORE=postgresql bench/ha/takeover.sh   both serves on one database of
#                                           a throwaway PostgreSQL
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
export ALALLO_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export ALALLO_ROOT=$root
source "$root/bench/lib/store.sh"
node "$root/bench/ha/takeover.mjs"
