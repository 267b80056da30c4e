#!/usr/bin/env bash
# bench/train/path_pair.sh - one alallo binary on two CPU paths side by side
# (docs/trainer.md, "CPU paths"): each round runs `bench train` on both, in
# alternating order, so that drift on a noisy machine hits both alike, for
# full fine-tuning and for LoRA on a 16-bit base at the 124m shape, batch
# 4 x 64. Prints each pair, the second path's speed as a ratio of the
# first's per round and of the means, and its peak memory as a ratio, and
# writes every run's JSON to OUT_JSON.
#
# usage: bench/train/path_pair.sh [PATH_A PATH_B] [BIN] [OUT_JSON]
#   (default avx512bf16 onednn)
#   env STEPS (8), THREADS (nproc), ROUNDS (4), ADAPTERS ("full lora")
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pa=${1:-avx512bf16}
pb=${2:-onednn}
bin=${3:-$root/build/alallo}
out=${4:-$root/bench/train/path-pair-$pa-$pb-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-8}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-4}
adapters=${ADAPTERS:-full lora}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
for p in "$pa" "$pb"; do
    if ! why=$("$bin" bench train --shape tiny --steps 2 --threads 1 --path "$p" 2>&1 >/dev/null)
    then
        echo "path_pair.sh: path $p cannot run here: $why" >&2
        exit 2
    fi
done

rows=()
for adapter in $adapters; do
    for r in $(seq 1 "$rounds"); do
        order=("$pa" "$pb")
        ((r % 2 == 0)) && order=("$pb" "$pa")
        for p in "${order[@]}"; do
            line=$("$bin" bench train --shape 124m --adapter "$adapter" --precision 16-bit \
                --batch 4 --seq 64 --steps "$steps" --threads "$threads" --path "$p" \
                2>/dev/null | tail -1)
            echo "round $r $adapter $p: $line" >&2
            rows+=("{\"round\":$r,\"adapter\":\"$adapter\",\"run\":$line}")
        done
    done
done

printf '{"machine":{"cpu":"%s","cores":%s,"loadavg_at_start":"%s","date":"%s"},' \
    "$cpu" "$(nproc)" "$load" "$(date -u +%FT%TZ)" > "$out"
printf '"paths":["%s","%s"],"runs":[%s]}\n' "$pa" "$pb" "$(IFS=,; echo "${rows[*]}")" >> "$out"
echo "path_pair.sh: wrote $out" >&2

/usr/bin/python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
pa, pb = r["paths"]
m = r["machine"]
print(f"machine: {m['cpu']}, {m['cores']} cores, load {m['loadavg_at_start']}")
by = {}
for x in r["runs"]:
    by.setdefault((x["adapter"], x["round"]), {})[x["run"]["cpu_path"]] = x["run"]
for adapter in dict.fromkeys(a for a, _ in by):
    ta, tb, ma, mb = [], [], [], []
    for (a, rnd), pair in sorted(by.items()):
        if a != adapter or pa not in pair or pb not in pair:
            continue
        x, y = pair[pa], pair[pb]
        ta.append(x["tokens_per_s"]); tb.append(y["tokens_per_s"])
        ma.append(x["peak_rss_bytes"]); mb.append(y["peak_rss_bytes"])
        print(f"{adapter:4s} round {rnd}: {pa} {x['tokens_per_s']:6.1f} (MFU {x['mfu']:.3f})"
              f"  {pb} {y['tokens_per_s']:6.1f} (MFU {y['mfu']:.3f})"
              f"  x{y['tokens_per_s'] / x['tokens_per_s']:.3f}"
              f"  cpu_share {x['cpu_share']:.2f}/{y['cpu_share']:.2f}")
    if ta:
        mean = lambda v: sum(v) / len(v)
        print(f"{adapter:4s} means: {pa} {mean(ta):.1f} tok/s, {pb} {mean(tb):.1f} tok/s:"
              f" x{mean(tb) / mean(ta):.3f}; peak RSS {mean(ma) / 2**20:.0f} against"
              f" {mean(mb) / 2**20:.0f} MiB (x{mean(mb) / mean(ma):.3f})")
PY
