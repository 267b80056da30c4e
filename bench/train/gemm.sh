#!/usr/bin/env bash
# bench/train/gemm.sh - the step's products alone (`alallo bench gemm`: fp32,
# or bf16 inputs on avx512bf16, as the trainer runs them) on every CPU path
# this CPU has, on one thread and on all of them, caches flushed before each
# call as a step's weights come from memory. Prints a line a run and writes
# every run's JSON to OUT_JSON.
#
# usage: bench/train/gemm.sh [ALALLO_BIN] [OUT_JSON]
#   env SHAPE (124m), REPS (8), PATHS (every path the CPU has)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/gemm-$(date -u +%Y%m%dT%H%M%SZ).json}
shape=${SHAPE:-124m}
reps=${REPS:-8}
flags=$(grep -m1 '^flags' /proc/cpuinfo)
paths=${PATHS:-}
if [ -z "$paths" ]; then
    paths=avx2
    [[ $flags == *" avx512f "* ]] && paths+=" avx512"
    [[ $flags == *" avx512_bf16 "* ]] && paths+=" avx512bf16"
fi
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
for p in $paths; do
    for t in 1 "$(nproc)"; do
        j=$("$bin" bench gemm --shape "$shape" --reps "$reps" --threads "$t" --path "$p" | tail -1)
        echo "$j" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$p, $t threads, %s: trunk products %.3f of the peak, head %.3f, %.3f s a step '
      '(peak %.0f GFLOP/s)' % (d['products_precision'], d['trunk_efficiency'],
                               d['head_efficiency'], d['step_products_s'],
                               d['peak_flops'] / 1e9))" >&2
        rows+=("$j")
    done
done
printf '{"machine":"%s (%s CPUs)","loadavg_at_start":"%s","runs":[%s]}\n' "$cpu" "$(nproc)" \
    "$load" "$(IFS=,; echo "${rows[*]}")" > "$out"
echo "wrote $out" >&2
