#!/usr/bin/env bash
# bench/train/spin.sh - how the trainer's OpenMP threads should wait
# between parallel regions (docs/trainer.md, "Threads"): passive (sleep at
# once), a bounded spin of GOMP_SPINCOUNT iterations then sleep, or active
# (spin without end). Each policy runs full fine-tuning (or LoRA) at the 124m shape,
# batch 4 x 64, on THREADS threads: alone, then as one of two trainers
# started together on the same cores (a shared machine), where the figure
# is the two trainers' tokens/s summed. Policies alternate within each
# round (ROUNDS rounds), so drift on a noisy machine hits them alike.
#
# usage: bench/train/spin.sh [ALALLO_BIN] [OUT_JSON]
#   env STEPS (6), THREADS (nproc), ROUNDS (2), SPINS ("1000 10000 100000"),
#       ADAPTER (full; or lora)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/spin-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-6}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-2}
adapter=${ADAPTER:-full}
spins=${SPINS:-1000 10000 100000}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

policies=(passive)
for s in $spins; do policies+=("spin$s"); done
policies+=(active)

# env for a policy name
penv() {
    case $1 in
        passive) echo "OMP_WAIT_POLICY=passive" ;;
        active) echo "OMP_WAIT_POLICY=active" ;;
        spin*) echo "OMP_WAIT_POLICY=active GOMP_SPINCOUNT=${1#spin}" ;;
    esac
}
one() { # policy steps -> tokens_per_s
    env $(penv "$1") "$bin" bench train --shape 124m --adapter "$adapter" --batch 4 --seq 64 \
        --steps "$2" --threads "$threads" 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])'
}
rows=()
for r in $(seq "$rounds"); do
    for p in "${policies[@]}"; do
        alone=$(one "$p" "$steps")
        one "$p" "$steps" > "$tmp/a" & pa=$!
        one "$p" "$steps" > "$tmp/b" & pb=$!
        wait $pa $pb
        shared=$(python3 -c "print($(cat "$tmp/a") + $(cat "$tmp/b"))")
        echo "round $r $p: alone $alone tokens/s, two trainers sharing $shared" >&2
        rows+=("{\"round\":$r,\"policy\":\"$p\",\"alone\":$alone,\"shared_sum\":$shared}")
    done
done
printf '{"machine":"%s","threads":%s,"loadavg_at_start":"%s","steps":%s,"adapter":"%s","runs":[%s]}\n' \
    "$cpu ($(nproc) CPUs)" "$threads" "$load" "$steps" "$adapter" "$(IFS=,; echo "${rows[*]}")" > "$out"
echo "wrote $out" >&2
