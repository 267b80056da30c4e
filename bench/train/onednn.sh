#!/usr/bin/env bash
# bench/train/onednn.sh - oneDNN's bf16 matmul (Debian's libdnnl-dev 2.6)
# beside alallo's own bf16 products, at the products of a training step
# (`alallo bench gemm --hot --path avx512bf16`: warm caches, as oneDNN is
# timed), on one thread and on all, alternating. For the decision whether
# the trainer's bf16 products (and, through oneDNN, AMX) should go through
# oneDNN: prints each product's GFLOP/s both ways, the step's products
# weighted as a step runs them, and whether oneDNN gave the same bits on
# one thread and on all. Writes every run's JSON to OUT_JSON.
#
# usage: bench/train/onednn.sh [ALALLO_BIN] [OUT_JSON]
#   env SHAPE (124m), ROUNDS (2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/onednn-$(date -u +%Y%m%dT%H%M%SZ).json}
shape=${SHAPE:-124m}
rounds=${ROUNDS:-2}
if [ ! -f /usr/include/oneapi/dnnl/dnnl.h ]; then
    echo "onednn.sh: needs oneDNN's headers: apt-get install libdnnl-dev" >&2
    exit 2
fi
if ! grep -qw avx512_bf16 /proc/cpuinfo; then
    echo "onednn.sh: skipped: this CPU has no AVX512-BF16 (alallo's bf16 path)" >&2
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -march=native -fopenmp -Wall -Wextra -o "$tmp/onednn_matmul" \
    "$root/bench/train/onednn_matmul.c" -ldnnl
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
runs=()
for r in $(seq "$rounds"); do
    for t in 1 "$(nproc)"; do
        ours=$("$bin" bench gemm --shape "$shape" --threads "$t" --path avx512bf16 --hot | tail -1)
        mapfile -t args < <(echo "$ours" | python3 -c "
import json, sys
for p in json.load(sys.stdin)['products']:
    print('%d,%d,%d,%d,%d' % (p['ta'], p['tb'], p['M'], p['N'], p['K']))")
        theirs=$("$tmp/onednn_matmul" "$t" "${args[@]}" | paste -sd,)
        runs+=("{\"round\":$r,\"threads\":$t,\"alallo\":$ours,\"onednn\":[$theirs]}")
    done
done
python3 - "$out" "$cpu ($(nproc) CPUs)" "$load" "[$(IFS=,; echo "${runs[*]}")]" <<'PY'
import json, sys
out, machine, load, runs = sys.argv[1:]
runs = json.loads(runs)
summary = []
for run in runs:
    ours, theirs = run["alallo"], run["onednn"]
    head = [i for i, p in enumerate(ours["products"]) if p["linear"] == "head"]
    trunk = [i for i in range(len(ours["products"])) if i not in head]

    def sec(xs, k):
        return sum(xs[i][k] for i in trunk), sum(xs[i][k] for i in head)

    ot, oh = sec(ours["products"], "seconds")
    layers = (ours["step_products_s"] - oh) / ot

    def step(k):
        t, h = sec(theirs, k)
        return t * layers + h

    row = {"round": run["round"], "threads": run["threads"],
           "alallo_step_products_s": ours["step_products_s"],
           "onednn_step_matmul_s": step("matmul_s"),
           "onednn_step_with_rounding_s": step("with_rounding_s"),
           "onednn_same_bits_1_vs_n": all(p["same_bits_1_vs_n"] for p in theirs),
           "onednn_impl": sorted({p["impl"] for p in theirs})}
    row["speedup_with_rounding"] = row["alallo_step_products_s"] / row["onednn_step_with_rounding_s"]
    summary.append(row)
    print("round %d, %d thread(s): alallo %.3f s a step's products, oneDNN %.3f (%.3f with "
          "rounding: x%.2f), same bits on 1 and %d threads: %s, %s" % (
              row["round"], row["threads"], row["alallo_step_products_s"],
              row["onednn_step_matmul_s"], row["onednn_step_with_rounding_s"],
              row["speedup_with_rounding"], row["threads"], row["onednn_same_bits_1_vs_n"],
              " ".join(row["onednn_impl"])), file=sys.stderr)
    for p, q in zip(ours["products"], theirs):
        f = 2.0 * p["M"] * p["N"] * p["K"]
        print("  %-8s %-12s %6d %6d %6d  alallo %5.0f GFLOP/s  oneDNN %5.0f (%5.0f with rounding)"
              % (p["linear"], p["product"], p["M"], p["N"], p["K"], f / p["seconds"] / 1e9,
                 f / q["matmul_s"] / 1e9, f / q["with_rounding_s"] / 1e9), file=sys.stderr)
json.dump({"machine": machine, "loadavg_at_start": load, "summary": summary, "runs": runs},
          open(out, "w"))
PY
