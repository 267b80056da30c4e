#!/usr/bin/env bash
# bench/train/lora_pair.sh - 16-bit LoRA side by side with another run, in
# alternating rounds, so that drift on a noisy machine hits both alike:
#   4-bit  4-bit LoRA (the target: <= 0.7x 16-bit's peak memory at >= 0.9x
#          its speed); each run is its own process, with its own peak RSS
#   torch  PyTorch's LoRA with bf16 autocast (bench/train/torch_ref.py
#          lora-bf16; the target: alallo >= 2x). PyTorch's figure on some
#          CPUs falls in one of two bands from run to run, so one pair is
#          not enough.
# Prints each run, then the other's speed (and, for 4-bit, peak memory) as
# a ratio of 16-bit's per round and of the means, and writes every run's
# JSON to OUT_JSON.
#
# usage: bench/train/lora_pair.sh 4-bit|torch [BIN] [OUT_JSON]
#   env STEPS (8), THREADS (nproc), ROUNDS (4), CPU_PATH (the best the CPU
#       has)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
other=${1:?usage: lora_pair.sh 4-bit|torch [BIN] [OUT_JSON]}
bin=${2:-$root/build/alallo}
out=${3:-$root/bench/train/lora-$other-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-8}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-4}
path=()
[ -n "${CPU_PATH:-}" ] && path=(--path "$CPU_PATH")
case $other in
4-bit) ;;
torch)
    if ! /usr/bin/python3 -c 'import torch' 2> /dev/null; then
        echo "lora_pair.sh: PyTorch (python3-torch) is not installed" >&2
        exit 2
    fi
    ;;
*)
    echo "lora_pair.sh: the other run is 4-bit or torch, not '$other'" >&2
    exit 2
    ;;
esac
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)

one() { # 16-bit | 4-bit | torch -> its JSON line
    if [ "$1" = torch ]; then
        env -u OMP_WAIT_POLICY /usr/bin/python3 "$root/bench/train/torch_ref.py" \
            --threads "$threads" --steps "$steps" --configs lora-bf16 | tail -1
        return
    fi
    "$bin" bench train --shape 124m --precision "$1" --adapter lora --batch 4 --seq 64 \
        --steps "$steps" --threads "$threads" "${path[@]}" 2>/dev/null | tail -1
}
rows=()
for r in $(seq "$rounds"); do
    order="16-bit $other"
    [ $((r % 2)) -eq 0 ] && order="$other 16-bit"
    for w in $order; do
        j=$(one "$w")
        echo "$j" | python3 -c "
import json, sys
d = json.load(sys.stdin)
rss = d.get('peak_rss_bytes')
print('round $r $w: %.1f tokens/s%s' % (d['tokens_per_s'],
      ', peak RSS %.0f MiB, path %s' % (rss / 2**20, d['cpu_path']) if rss else ''))" >&2
        rows+=("{\"round\":$r,\"run\":\"$w\",\"bench\":$j}")
    done
done
python3 - "$out" "$cpu ($(nproc) CPUs)" "$load" "$threads" "$steps" "$other" \
    "[$(IFS=,; echo "${rows[*]}")]" <<'PY'
import json, sys
out, machine, load, threads, steps, other, runs = sys.argv[1:]
runs = json.loads(runs)
mean = lambda v: sum(v) / len(v)
s = {}
for w in ("16-bit", other):
    b = [r["bench"] for r in runs if r["run"] == w]
    s[w] = {"tokens_per_s": [x["tokens_per_s"] for x in b]}
    s[w]["tokens_per_s_mean"] = mean(s[w]["tokens_per_s"])
    if "peak_rss_bytes" in b[0]:
        s[w]["peak_rss_bytes_mean"] = mean([x["peak_rss_bytes"] for x in b])
pairs = {}
for r in runs:
    pairs.setdefault(r["round"], {})[r["run"]] = r["bench"]["tokens_per_s"]
s["speed_ratio_per_round"] = [p[other] / p["16-bit"] for p in pairs.values()]
s["speed_ratio"] = s[other]["tokens_per_s_mean"] / s["16-bit"]["tokens_per_s_mean"]
line = "%s against 16-bit LoRA: speed x%.3f (per round %s)" % (
    other, s["speed_ratio"], " ".join("%.3f" % x for x in s["speed_ratio_per_round"]))
if other == "4-bit":
    s["memory_ratio"] = s[other]["peak_rss_bytes_mean"] / s["16-bit"]["peak_rss_bytes_mean"]
    line += ", peak memory x%.3f" % s["memory_ratio"]
else:
    line += "; 16-bit LoRA is x%.2f PyTorch's" % (1 / s["speed_ratio"])
print(line, file=sys.stderr)
json.dump({"machine": machine, "loadavg_at_start": load, "threads": int(threads),
           "steps": int(steps), "other": other, "summary": s, "runs": runs}, open(out, "w"))
PY
