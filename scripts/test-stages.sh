#!/usr/bin/env bash
# scripts/test-stages.sh - `make test`'s stages, one after the other, each
# timed: runs `make STAGE` for each stage named, stops at the first that
# fails, and ends (pass or fail) with a line a stage and its seconds, so
# that the end of a CI log says where the time went and what failed.
#
# usage: scripts/test-stages.sh STAGE [STAGE ...]
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
summary=()
rc=0
for stage in "$@"; do
    t0=$SECONDS
    make --no-print-directory "$stage"
    rc=$?
    summary+=("$(printf '%-12s %5d s  %s' "$stage" $((SECONDS - t0)) \
        "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")")
    [ "$rc" -eq 0 ] || break
done
echo "== make test: the stages =="
printf '%s\n' "${summary[@]}"
printf '%-12s %5d s\n' "all" $((SECONDS - start))
exit "$rc"
