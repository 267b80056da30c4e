#!/usr/bin/env bash
# Calibration from real runs: 30+ real jobs of varied sizes (tiny and small
# model shapes, different data sizes, epochs and batch sizes, both goals) on
# two local workers of one `alallo serve`. For each job it records the time
# range given at creation and the actual submit-to-finish time, and the
# time-left error once 5% of the steps are done; it prints one JSON object
# with coverage, above_high and the median absolute time-left error.
#   bench/calibration/run.sh [path/to/alallo]     (JOBS=32 WAVE=3 to change;
#   SCALE=5 makes every job 5x longer: about 5 s to 2 min each)
# Not a test: it takes several minutes. Run it with `nice` on a shared box.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
export ALALLO_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export ALALLO_ROOT=$root
exec node "$root/bench/calibration/calibrate.mjs"
