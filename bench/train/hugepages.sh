#!/usr/bin/env bash
# bench/train/hugepages.sh - what huge pages (train/kernels/bigmem.h) give the
# trainer: each round runs the same binary twice, with the large blocks
# marked MADV_HUGEPAGE (the default) and with ALALLO_HUGEPAGES=0, in
# alternating order so that drift on a noisy machine hits both alike.
# Full fine-tuning and 16-bit LoRA at the 124m shape, batch 4 x 64, on
# THREADS threads. Prints each pair and writes every run's tokens/s, MFU,
# cpu_share and phases to OUT_JSON, with the system's THP setting (the
# marking does nothing where it says [never]).
#
# usage: bench/train/hugepages.sh [ALALLO_BIN] [OUT_JSON]
#   env STEPS (8), THREADS (nproc), ROUNDS (4), ADAPTERS ("full lora")
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/hugepages-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-8}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-4}
adapters=${ADAPTERS:-full lora}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)
load=$(cut -d' ' -f1-3 /proc/loadavg)

one() { # hugepages(1|0) adapter -> the bench's JSON line
    ALALLO_HUGEPAGES=$1 "$bin" bench train --shape 124m --precision 16-bit --adapter "$2" \
        --batch 4 --seq 64 --steps "$steps" --threads "$threads" 2>/dev/null | tail -1
}
rows=()
for r in $(seq "$rounds"); do
    for a in $adapters; do
        order="1 0"
        [ $((r % 2)) -eq 0 ] && order="0 1"
        for h in $order; do
            j=$(one "$h" "$a")
            echo "$j" | python3 -c "import json,sys; d=json.load(sys.stdin); print('round $r $a hugepages=$h: %.1f tokens/s mfu %.3f cpu_share %.3f' % (d['tokens_per_s'], d['mfu'], d['cpu_share']))" >&2
            rows+=("{\"round\":$r,\"adapter\":\"$a\",\"hugepages\":$h,\"bench\":$j}")
        done
    done
done
python3 - "$out" "$cpu ($(nproc) CPUs)" "$thp" "$load" "$threads" "$steps" "[$(IFS=,; echo "${rows[*]}")]" <<'PY'
import json, sys
out, machine, thp, load, threads, steps, runs = sys.argv[1:]
runs = json.loads(runs)
summary = {}
for a in sorted({r["adapter"] for r in runs}):
    s = {}
    for h in (1, 0):
        t = [r["bench"]["tokens_per_s"] for r in runs if r["adapter"] == a and r["hugepages"] == h]
        m = [r["bench"]["mfu"] for r in runs if r["adapter"] == a and r["hugepages"] == h]
        s["on" if h else "off"] = {"tokens_per_s_mean": sum(t) / len(t), "mfu_mean": sum(m) / len(m),
                                   "tokens_per_s": t, "mfu": m}
    s["speedup_of_means"] = s["on"]["tokens_per_s_mean"] / s["off"]["tokens_per_s_mean"]
    summary[a] = s
    print(f"{a}: on {s['on']['tokens_per_s_mean']:.1f} tokens/s (mfu {s['on']['mfu_mean']:.3f}), "
          f"off {s['off']['tokens_per_s_mean']:.1f} (mfu {s['off']['mfu_mean']:.3f}), "
          f"x{s['speedup_of_means']:.3f}", file=sys.stderr)
json.dump({"machine": machine, "thp_enabled": thp, "loadavg_at_start": load,
           "threads": int(threads), "steps": int(steps), "summary": summary, "runs": runs},
          open(out, "w"))
print("wrote", out, file=sys.stderr)
PY
