#!/usr/bin/env bash
# bench/slurm/run.sh - the Slurm executor's figures on a throwaway
# single-node cluster (tests/slurm/slurm-up.sh), as root:
#
#   submit_to_pending  sbatch -> the tag listed pending by squeue (ms, p50/p99)
#   submit_rate        submissions per second with QUEUED jobs pending (jobs/s)
#   reconcile_pass     squeue + exec_reconcile over every pending job (ms)
#
#   bench/slurm/run.sh [BUILD_DIR]        (default: build)
#
# Environment: QUEUED (500), SAMPLES (50). Prints one JSON object per
# phase, the machine, and checks the targets of issue 13 (sbatch ->
# pending p99 <= 200 ms; a pass over 500 jobs <= 1 s). Not a test: the
# figures depend on the machine and its load.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
QUEUED=${QUEUED:-500}
SAMPLES=${SAMPLES:-50}
for lib in exec core; do
    [[ -f $build/libalallo_$lib.a ]] || { echo "no $build/libalallo_$lib.a: build first (make)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/alallo-bench-slurm-XXXXXX)
chmod 755 "$work" # munged (user munge) must reach the kit inside
kit=$work/kit
cleanup() { "$root/tests/slurm/slurm-down.sh" "$kit" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -I "$root/src" -o "$work/bench_slurm" "$here/bench_slurm.c" \
    "$build/libalallo_exec.a" "$build/libalallo_core.a" \
    $(pkg-config --libs jansson libsodium) -lm
env_line=$("$root/tests/slurm/slurm-up.sh" "$kit")
eval "$env_line"

echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg), $(sinfo -V)"
out=$("$work/bench_slurm" "$kit/jobs" "$QUEUED" "$SAMPLES")
echo "$out"

field() { printf '%s\n' "$out" | grep "\"phase\":\"$1\"" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"; }
fail=0
check() { # check LABEL VALUE OP LIMIT
    if awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { exit !((op == "<=") ? v <= l : v >= l) }'; then
        echo "  ok   $1 = $2 ($3 $4)"
    else
        echo "  FAIL $1 = $2 (want $3 $4)"
        fail=1
    fi
}
check submit_to_pending_p99_ms "$(field submit_to_pending p99_ms)" "<=" 200
check reconcile_pass_max_ms "$(field reconcile_pass max_ms)" "<=" 1000
exit $fail
