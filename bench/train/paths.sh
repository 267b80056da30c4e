#!/usr/bin/env bash
# bench/train/paths.sh - the trainer on every CPU path this machine has
# (docs/trainer.md, "CPU paths"), side by side in one run with PyTorch at
# the same shape, and the bf16 path's loss curve against the fp32 path's.
#
# For each path (avx2, avx512, avx512bf16, onednn; a path the CPU lacks is skipped
# with a line that says so): full fine-tuning, LoRA on a 16-bit base and
# LoRA on a 4-bit base at the 124m shape, batch 4 x 64, each as
# `alallo bench train` prints it (tokens/s, MFU against the path's fp32
# peak measured in the same process, the bf16 peak where used, peak RSS).
# Then bench/train/torch_ref.py (full fp32, full with bf16 autocast, LoRA
# fp32, LoRA with bf16 autocast) on the same threads, with OpenMP's own waiting (alallo's
# passive waiting would slow PyTorch down), and CURVE_STEPS steps of 16-bit LoRA on
# the avx512 (fp32), avx512bf16 and onednn paths with --losses. Last,
# bench/train/families.sh: tokens/s of each model family at the 124m-class
# shape (and the mixture of experts per active parameter), written beside
# OUT_JSON as OUT-families.json (FAMILY_ROUNDS rounds; 0 = not run).
#
# usage: bench/train/paths.sh [ALALLO_BIN] [OUT_JSON]
#   env STEPS (6), THREADS (nproc), CURVE_STEPS (200, 0 = no curve),
#       CURVE_LR (1e-4), FAMILY_ROUNDS (2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/paths-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-6}
threads=${THREADS:-$(nproc)}
curve_steps=${CURVE_STEPS:-200}
curve_lr=${CURVE_LR:-1e-4}
export OMP_WAIT_POLICY=passive

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

runs=()
for path in avx2 avx512 avx512bf16 onednn; do
    if ! "$bin" bench train --shape tiny --steps 2 --threads 1 --path "$path" \
        > /dev/null 2> "$tmp/why"; then
        echo "path $path: skipped: $(cat "$tmp/why")" >&2
        runs+=("{\"cpu_path\":\"$path\",\"skipped\":true}")
        continue
    fi
    for cfg in "full 16-bit" "lora 16-bit" "lora 4-bit"; do
        set -- $cfg
        echo "bench: path=$path adapter=$1 precision=$2 steps=$steps threads=$threads" >&2
        line=$("$bin" bench train --shape 124m --adapter "$1" --precision "$2" \
            --batch 4 --seq 64 --steps "$steps" --threads "$threads" --path "$path")
        echo "$line" >&2
        runs+=("$line")
    done
done

torch=()
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
    echo "bench: PyTorch reference, threads=$threads" >&2
    while IFS= read -r line; do
        echo "$line" >&2
        torch+=("$line")
    done < <(env -u OMP_WAIT_POLICY /usr/bin/python3 "$root/bench/train/torch_ref.py" \
        --threads "$threads" --steps "$steps")
else
    echo "bench: PyTorch (python3-torch) is not installed: no reference" >&2
fi

curves=()
if [[ "$curve_steps" -gt 0 ]]; then
    for path in avx512 avx512bf16 onednn; do
        if ! "$bin" bench train --shape tiny --steps 2 --threads 1 --path "$path" \
            > /dev/null 2>&1; then
            echo "curve on $path: skipped, this CPU lacks it" >&2
            continue
        fi
        echo "bench: loss curve, path=$path, $curve_steps steps of 16-bit LoRA" >&2
        curves+=("$("$bin" bench train --shape 124m --adapter lora --precision 16-bit \
            --batch 4 --seq 64 --steps "$curve_steps" --threads "$threads" --path "$path" \
            --lr "$curve_lr" --losses)")
    done
fi

{
    printf '{"machine":{"cpu":"%s","cores":%s,"loadavg_at_start":"%s","date":"%s"},' \
        "$cpu" "$(nproc)" "$load" "$(date -u +%FT%TZ)"
    printf '"runs":[%s],"torch":[%s],"curves":[%s]}\n' "$(IFS=,; echo "${runs[*]}")" \
        "$(IFS=,; echo "${torch[*]-}")" "$(IFS=,; echo "${curves[*]-}")"
} > "$out"
echo "bench: wrote $out" >&2

/usr/bin/python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["machine"]
print(f"machine: {m['cpu']}, {m['cores']} cores, load {m['loadavg_at_start']}")
by = {}
for x in r["runs"]:
    if x.get("skipped"):
        print(f"{x['cpu_path']:11s} skipped (this CPU lacks it)")
        continue
    by[(x["cpu_path"], x["adapter"], x["precision"])] = x
    bf = f"  bf16 MFU {x['mfu_of_bf16_peak']:.3f}" if "mfu_of_bf16_peak" in x else ""
    print(f"{x['cpu_path']:11s} {x['adapter']:4s} {x['precision']:6s} {x['tokens_per_s']:7.1f} tok/s"
          f"  MFU {x['mfu']:.3f} of {x['peak_fp32_flops']/1e9:.0f} GFLOP/s{bf}"
          f"  RSS {x['peak_rss_bytes']/2**20:5.0f} MiB  cpu_share {x['cpu_share']:.2f}")
t = {x["config"]: x for x in r["torch"]}
for c, x in t.items():
    print(f"pytorch     {c:10s} {x['tokens_per_s']:7.1f} tok/s")
for path in ("avx2", "avx512", "avx512bf16", "onednn"):
    l16, l4 = by.get((path, "lora", "16-bit")), by.get((path, "lora", "4-bit"))
    if l16 and l4:
        print(f"{path}: 4-bit vs 16-bit LoRA: memory {l4['peak_rss_bytes']/l16['peak_rss_bytes']:.2f}x,"
              f" speed {l4['tokens_per_s']/l16['tokens_per_s']:.2f}x")
    if l16 and "lora-bf16" in t:
        print(f"{path}: 16-bit LoRA vs PyTorch bf16 autocast: {l16['tokens_per_s']/t['lora-bf16']['tokens_per_s']:.2f}x")
    full = by.get((path, "full", "16-bit"))
    if full and "full" in t:
        print(f"{path}: full fine-tuning vs PyTorch fp32: {full['tokens_per_s']/t['full']['tokens_per_s']:.2f}x")
    if full and path in ("avx512bf16", "onednn") and "full-bf16" in t:
        print(f"{path}: full fine-tuning vs PyTorch bf16 autocast: "
              f"{full['tokens_per_s']/t['full-bf16']['tokens_per_s']:.2f}x")
cv = {x["cpu_path"]: x["losses"] for x in r["curves"]}
for bf in ("avx512bf16", "onednn"):
    if "avx512" not in cv or bf not in cv:
        continue
    a, b = cv["avx512"], cv[bf]
    gaps = [abs(x - y) for x, y in zip(a, b)]
    at = max(range(len(gaps)), key=gaps.__getitem__)
    print(f"loss curve, {len(a)} steps: fp32 {a[0]:.4f} -> {a[-1]:.4f}, {bf} {b[0]:.4f} -> {b[-1]:.4f};"
          f" largest gap {gaps[at]:.4f} at step {at} ({gaps[at] / a[0] * 100:.2f}% of the first loss,"
          f" {gaps[at] / a[at] * 100:.1f}% of that step's)")
PY
if [[ ${FAMILY_ROUNDS:-2} -gt 0 ]]; then
    ROUNDS=${FAMILY_ROUNDS:-2} STEPS=$steps THREADS=$threads \
        "$root/bench/train/families.sh" "$bin" "${out%.json}-families.json"
fi
