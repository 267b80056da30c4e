#!/usr/bin/env bash
# bench/train/gpu_memory_emu.sh - the GPU trainer's device memory by method,
# read from the allocator of the CPU emulator (the ALALLO_CUDA_EMU build,
# `make gpu-emu`): the same cuda_model_upload, cuda_acts_create and
# cuda_optim allocations a GPU gets, counted by cuda_mem_peak(), so the
# bytes are the GPU's; the speed is not (the emulator runs the kernels on
# one CPU core) and is left out. Runs `alallo bench train --device cuda` for
# 16-bit LoRA, 4-bit LoRA (recomputing each layer: the default) and 4-bit
# LoRA with ALALLO_CUDA_RECOMPUTE=off, and prints each peak with its ratio
# to 16-bit LoRA's; writes them to OUT_JSON.
#
# The real figure at the 1B shape comes from scripts/gpu-check.sh on a GPU;
# the emulator takes about 2 minutes a run at the default small shape.
#
# usage: bench/train/gpu_memory_emu.sh [EMU_ALALLO_BIN] [OUT_JSON]
#   env SHAPE (small), BATCH (2), SEQ (256)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build-emu/alallo}
out=${2:-$root/bench/train/gpu-memory-emu-$(date -u +%Y%m%dT%H%M%SZ).json}
shape=${SHAPE:-small}
batch=${BATCH:-2}
seq=${SEQ:-256}
if ! "$bin" bench train --device cuda --size 256 2>/dev/null | grep -q '"gpu":"CPU emulator"'; then
    echo "gpu_memory_emu.sh: $bin is not the emulated build (make gpu-emu builds build-emu/alallo)" >&2
    exit 2
fi
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)

one() { # precision recompute(auto|off) -> the bench's JSON line
    ALALLO_CUDA_RECOMPUTE=$2 "$bin" bench train --device cuda --size 256 --shape "$shape" \
        --precision "$1" --adapter lora --batch "$batch" --seq "$seq" --steps 2 2>/dev/null |
        tail -1
}
rows=()
ref=
for run in "16-bit auto" "4-bit auto" "4-bit off"; do
    set -- $run
    j=$(one "$1" "$2")
    peak=$(echo "$j" | python3 -c "import json,sys; print(json.load(sys.stdin)['gpu_mem_train_peak_bytes'])")
    rec=$(echo "$j" | python3 -c "import json,sys; print(str(json.load(sys.stdin)['recompute']).lower())")
    ref=${ref:-$peak}
    ratio=$(python3 -c "print('%.3f' % ($peak / $ref))")
    echo "$shape $batch x $seq, $1 LoRA, recompute $rec: $peak bytes ($ratio x 16-bit LoRA)" >&2
    rows+=("{\"precision\":\"$1\",\"recompute\":$rec,\"peak_bytes\":$peak,\"ratio_to_16bit\":$ratio,\"bench\":$j}")
done
{
    printf '{"machine":"%s, CPU emulator of the GPU backend","shape":"%s","batch":%s,"seq":%s,' \
        "$cpu" "$shape" "$batch" "$seq"
    printf '"runs":[%s]}\n' "$(IFS=,; echo "${rows[*]}")"
} >"$out"
echo "wrote $out" >&2
