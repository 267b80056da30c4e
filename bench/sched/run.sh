#!/bin/sh
# bench/sched/run.sh - the scheduling benchmark: 10,000 jobs on 200 workers
# in the fleet simulation, once with jobs arriving over time (estimates,
# time left, money) and once with all of them queued at once (the
# scheduling pass with 10,000 queued jobs). Prints each run's JSON and
# checks the targets of the scheduling issue:
#   coverage >= 0.8, above_high <= 0.1, time_left_mape_after_5pct <= 0.15,
#   invariant_violations = 0, billed_twice = 0, a pass with 10,000 queued
#   jobs (biggest_pass_ms) <= 50 ms.
# usage: bench/sched/run.sh [ALALLO_BIN] [SEED]
set -eu
bin=${1:-build/alallo}
seed=${2:-1}
[ -x "$bin" ] || { echo "bench/sched: no binary at $bin (run make first)" >&2; exit 2; }

field() { # field NAME JSON
    printf '%s\n' "$2" | sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"
}
fail=0
check() { # check LABEL VALUE OP LIMIT
    if awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { exit !((op == "<=") ? v <= l : v >= l) }'; then
        echo "  ok   $1 = $2 ($3 $4)"
    else
        echo "  FAIL $1 = $2 (want $3 $4)"
        fail=1
    fi
}

echo "== arrivals over time: alallo sim --jobs 10000 --workers 200 --seed $seed"
steady=$("$bin" sim --jobs 10000 --workers 200 --seed "$seed") || true
echo "$steady"
check coverage "$(field coverage "$steady")" ">=" 0.8
check above_high "$(field above_high "$steady")" "<=" 0.1
check time_left_mape_after_5pct "$(field time_left_mape_after_5pct "$steady")" "<=" 0.15
check invariant_violations "$(field invariant_violations "$steady")" "<=" 0
check billed_twice "$(field billed_twice "$steady")" "<=" 0
check max_pass_ms "$(field max_pass_ms "$steady")" "<=" 50

echo "== all at once: alallo sim --jobs 10000 --workers 200 --seed $seed --burst"
burst=$("$bin" sim --jobs 10000 --workers 200 --seed "$seed" --burst) || true
echo "$burst"
echo "  (a pass over $(field biggest_pass_queued "$burst") queued jobs took $(field biggest_pass_ms "$burst") ms)"
check biggest_pass_queued "$(field biggest_pass_queued "$burst")" ">=" 9800
check biggest_pass_ms "$(field biggest_pass_ms "$burst")" "<=" 50
check invariant_violations "$(field invariant_violations "$burst")" "<=" 0
check billed_twice "$(field billed_twice "$burst")" "<=" 0
exit $fail
