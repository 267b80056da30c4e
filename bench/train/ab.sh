#!/usr/bin/env bash
# bench/train/ab.sh - two alallo binaries side by side: each round runs
# `bench train` with both, in alternating order, so that drift on a noisy
# machine hits both alike. Prints each pair and the means, and writes every
# run's JSON to OUT_JSON. For a change to the trainer: build the old and the
# new binary, then run this. With BENCH=gemm it runs `bench gemm` instead
# (the step's fp32 products alone) and compares their efficiency.
#
# usage: bench/train/ab.sh OLD_BIN NEW_BIN [OUT_JSON]
#   env STEPS (8), THREADS (nproc), ROUNDS (4), ADAPTER (full),
#       PRECISION (16-bit), CPU_PATH (the best the CPU has), SHAPE (124m),
#       BENCH (train | gemm), GEMM_ARGS (extra `bench gemm` options: --hot)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
old=${1:?usage: ab.sh OLD_BIN NEW_BIN [OUT_JSON]}
new=${2:?usage: ab.sh OLD_BIN NEW_BIN [OUT_JSON]}
out=${3:-$root/bench/train/ab-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-8}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-4}
adapter=${ADAPTER:-full}
precision=${PRECISION:-16-bit}
shape=${SHAPE:-124m}
kind=${BENCH:-train}
path=()
[ -n "${CPU_PATH:-}" ] && path=(--path "$CPU_PATH")
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)

one() { # binary -> the bench's JSON line
    if [ "$kind" = gemm ]; then
        # shellcheck disable=SC2086
        "$1" bench gemm --shape "$shape" --batch 4 --seq 64 --threads "$threads" "${path[@]}" \
            ${GEMM_ARGS:-} 2>/dev/null | tail -1
        return
    fi
    "$1" bench train --shape "$shape" --precision "$precision" --adapter "$adapter" \
        --batch 4 --seq 64 --steps "$steps" --threads "$threads" "${path[@]}" 2>/dev/null | tail -1
}
rows=()
for r in $(seq "$rounds"); do
    order="old new"
    [ $((r % 2)) -eq 0 ] && order="new old"
    for w in $order; do
        bin=$old
        [ "$w" = new ] && bin=$new
        j=$(one "$bin")
        echo "$j" | python3 -c "
import json, sys
d = json.load(sys.stdin)
if 'trunk_efficiency' in d:
    print('round $r $w: trunk products %.3f of peak, head %.3f, %.3f s a step' % (
        d['trunk_efficiency'], d['head_efficiency'], d['step_products_s']))
else:
    print('round $r $w: %.1f tokens/s mfu %.3f cpu_share %.3f %s' % (
        d['tokens_per_s'], d['mfu'], d['cpu_share'], d['phase_s']))" >&2
        rows+=("{\"round\":$r,\"binary\":\"$w\",\"bench\":$j}")
    done
done
python3 - "$out" "$cpu ($(nproc) CPUs)" "$load" "$threads" "$steps" "$adapter" \
    "[$(IFS=,; echo "${rows[*]}")]" <<'PY'
import json, sys
out, machine, load, threads, steps, adapter, runs = sys.argv[1:]
runs = json.loads(runs)
summary = {}
gemm = "trunk_efficiency" in runs[0]["bench"]
keys = ("trunk_efficiency", "head_efficiency") if gemm else ("tokens_per_s", "mfu")
for w in ("old", "new"):
    summary[w] = {}
    for k in keys:
        v = [r["bench"][k] for r in runs if r["binary"] == w]
        summary[w][k] = v
        summary[w][k + "_mean"] = sum(v) / len(v)
a, b = summary["old"][keys[0] + "_mean"], summary["new"][keys[0] + "_mean"]
summary["ratio_of_means"] = b / a
print(f"old {keys[0]} {a:.3f} ({keys[1]} {summary['old'][keys[1] + '_mean']:.3f}), "
      f"new {b:.3f} ({summary['new'][keys[1] + '_mean']:.3f}), x{b / a:.3f}", file=sys.stderr)
json.dump({"machine": machine, "loadavg_at_start": load, "threads": int(threads),
           "steps": int(steps), "adapter": adapter, "summary": summary, "runs": runs},
          open(out, "w"))
PY
