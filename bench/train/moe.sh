#!/usr/bin/env bash
# bench/train/moe.sh - a mixture of experts (qwen3_moe) against the dense
# model of the same active size, trained on this machine's CPU
# (docs/models.md, "Mixture of experts").
#
# Both at the 124m-class shape (hidden 768, 12 layers, 12 heads, the
# tokenizer of models/alallo-base): the dense model with an MLP of width
# 2048; the mixture with 8 experts of width 1024, 2 per token, so that a
# token goes through an MLP of the same width 2048 (its active parameters
# are the dense model's plus the routers'), and 4x the MLP parameters in
# all. Each is run by `alallo bench train --model` (batch 4 x 64, STEPS
# steps, the first not timed), and the JSON line it prints is kept. The
# result compares tokens/s and tokens/s x active parameters
# (active_param_tokens_per_s); the issue's bar is the mixture within 2x of
# the dense model.
#
# usage: bench/train/moe.sh [ALALLO_BIN] [OUT_JSON]
#   env STEPS (4), THREADS (nproc), ADAPTER (full | lora)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/moe-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-4}
threads=${THREADS:-$(nproc)}
adapter=${ADAPTER:-full}
tok="$root/models/alallo-base/tokenizer.json"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shape=(--hidden 768 --layers 12 --heads 12 --kv-heads 12 --max-pos 1024)
"$bin" model init --shape custom "${shape[@]}" --intermediate 2048 --tokenizer "$tok" \
    --out "$work/dense" --seed 1 >&2
"$bin" model init --family qwen3_moe "${shape[@]}" --head-dim 64 --experts 8 \
    --experts-used 2 --moe-intermediate 1024 --tokenizer "$tok" --out "$work/moe" --seed 1 >&2

load=$(cut -d' ' -f1-3 /proc/loadavg)
for m in dense moe; do
    echo "bench: $m adapter=$adapter steps=$steps threads=$threads" >&2
    "$bin" bench train --model "$work/$m" --adapter "$adapter" --batch 4 --seq 64 \
        --steps "$steps" --threads "$threads" > "$work/$m.json"
    cat "$work/$m.json" >&2
done

python3 - "$work/dense.json" "$work/moe.json" "$load" > "$out" <<'PY'
import json, sys
dense, moe = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
ratio = moe["active_param_tokens_per_s"] / dense["active_param_tokens_per_s"]
print(json.dumps({
    "bench": "moe", "loadavg_at_start": sys.argv[3],
    "dense": dense, "moe": moe,
    "moe_over_dense_tokens_per_s": moe["tokens_per_s"] / dense["tokens_per_s"],
    "moe_over_dense_active_param_tokens_per_s": ratio,
    "within_2x": ratio >= 0.5,
}, indent=1))
PY
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("moe/dense tokens/s x active params: %.3f" % d["moe_over_dense_active_param_tokens_per_s"])' "$out" >&2
echo "wrote $out" >&2
