#!/usr/bin/env bash
# Estimates against real jobs (issue 32): JOBS real jobs (default 32) of
# the built-in model on the local worker of an `alallo serve` started here
# in a temp folder, with generated data: short, medium and long jobs,
# 16-bit and 4-bit, batch sizes 4 to 16, supervised (sft) and preference
# (dpo), one at a time and in waves of three. For each job it records the
# range shown at creation (time and price), the time left shown at the
# first look past 20% and past 50% of the steps, the real time and the
# price paid; it prints one JSON object with coverage and median width
# (high / low) before the start, at 20% and at 50%, and exits 1 below the
# targets (docs/estimator.md, "How good it is").
#   bench/estimates/real.sh [path/to/alallo]   (JOBS=32 SCALE=1 to change;
#   DETAILS=file.json keeps every job's figures, with the estimate's terms;
#   OLD_BIN=path/to/old/alallo runs every wave on a second service of that
#   binary too, one after the other, first one then the other by turns, and
#   prints {new: ..., old: ...}: an A/B at the same machine load; the exit
#   status is the new binary's; MIX=rft-python or MIX=rft-check runs
#   reinforcement jobs instead, graded by a python grader or a string_check;
#   PRICE=40 sets the local worker's hourly rate, default 0.40: a rate that
#   makes jobs cost dollars keeps the 4-decimal rounding of the amounts out
#   of the price range's width)
# Not a test: 15 to 20 minutes on a busy 2-core machine. Run it with `nice`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
export ALALLO_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export ALALLO_ROOT=$root
exec node "$root/bench/estimates/real.mjs"
