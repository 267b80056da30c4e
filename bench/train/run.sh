#!/usr/bin/env bash
# bench/train/run.sh - trainer throughput for the 124m shape at batch 4 x 64:
# full fine-tuning, LoRA on a 16-bit base and LoRA on a 4-bit base, each as
# `alallo bench train` prints it, gathered into one results file with a note
# of the machine (CPU model, cores, load at start).
#
# usage: bench/train/run.sh [ALALLO_BIN] [OUT_JSON]
#   env STEPS (default 6), THREADS (default nproc), SHAPE (default 124m),
#       BATCH (4), SEQ (64), PROFILE=1 to add a perf profile of the full run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/results-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-6}
threads=${THREADS:-$(nproc)}
shape=${SHAPE:-124m}
batch=${BATCH:-4}
seq=${SEQ:-64}

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
runs=()
for cfg in "full 16-bit" "lora 16-bit" "lora 4-bit"; do
    set -- $cfg
    echo "bench: $shape adapter=$1 precision=$2 batch=$batch seq=$seq steps=$steps threads=$threads" >&2
    line=$("$bin" bench train --shape "$shape" --adapter "$1" --precision "$2" \
        --batch "$batch" --seq "$seq" --steps "$steps" --threads "$threads")
    echo "$line" >&2
    runs+=("$line")
done

profile=null
if [[ "${PROFILE:-0}" == 1 ]] && command -v perf >/dev/null; then
    data=$(mktemp)
    perf record -q -o "$data" "$bin" bench train --shape "$shape" --adapter full \
        --batch "$batch" --seq "$seq" --steps "$steps" --threads "$threads" >/dev/null 2>&1
    profile=$(perf report -i "$data" --no-children --sort dso,symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9.]+%' | head -15 |
        awk '{pct=$1; $1=""; sub(/^ +/, ""); gsub(/"/, ""); printf "%s{\"share\":\"%s\",\"where\":\"%s\"}", (NR>1?",":""), pct, $0}')
    profile="[$profile]"
    rm -f "$data"
fi

{
    printf '{"machine":{"cpu":"%s","cores":%s,"loadavg_at_start":"%s","date":"%s"},' \
        "$cpu" "$(nproc)" "$load" "$(date -u +%FT%TZ)"
    printf '"runs":[%s],"profile_full":%s}\n' "$(IFS=,; echo "${runs[*]}")" "$profile"
} > "$out"
echo "bench: wrote $out" >&2

# A short table for people.
/usr/bin/python3 - "$out" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
print(f"machine: {r['machine']['cpu']}, {r['machine']['cores']} cores, load {r['machine']['loadavg_at_start']}")
base = None
for x in r["runs"]:
    name = f"{x['adapter']} {x['precision']}"
    if x["adapter"] == "lora" and x["precision"] == "16-bit":
        base = x
    print(f"{name:14s} {x['tokens_per_s']:8.1f} tok/s  MFU {x['mfu']:.3f}  peak RSS {x['peak_rss_bytes']/2**20:7.0f} MiB  "
          f"(fwd {x['phase_s']['forward']:.2f}s head {x['phase_s']['head_and_loss']:.2f}s "
          f"bwd {x['phase_s']['backward']:.2f}s opt {x['phase_s']['optimizer']:.2f}s)")
q = [x for x in r["runs"] if x["precision"] == "4-bit"]
if base and q:
    q = q[0]
    print(f"4-bit vs 16-bit LoRA: memory {q['peak_rss_bytes']/base['peak_rss_bytes']:.2f}x, "
          f"speed {q['tokens_per_s']/base['tokens_per_s']:.2f}x")
PY
