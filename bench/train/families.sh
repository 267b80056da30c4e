#!/usr/bin/env bash
# bench/train/families.sh - tokens/s of one training step of each model
# family at the 124m-class shape, on this machine's CPU (docs/models.md;
# bench/train/RESULTS.md, "Families").
#
# Every family that `alallo model init --family` makes (llama3, qwen2,
# mistral, gemma, gemma2, gemma3, qwen3, smollm3, qwen3_moe, and phi3
# where this build has it) at the 124m-class widths of `--shape 124m`:
# hidden 768, 12 layers, 12 heads of 64 (12 key/value heads), MLP width
# 2048, the tokenizer of models/alallo-base, each with its family's own
# switches (Gemma 2 and 3 with a window of 512, as Gemma 3 1B's, so a
# 64-token row is inside it). qwen3_moe has 8 experts of width 1024, 2 per
# token, so that a token goes through an MLP of width 2048 as in the dense
# models (bench/train/moe.sh's pairing). Each model is run by `alallo bench
# train --model` (ADAPTER, 16-bit, batch 4 x 64, STEPS steps, the first
# not timed) in ROUNDS rounds, the order of the families reversed every
# other round so that a change of the machine's load in the middle of a
# round falls on different families. The summary gives each family's
# median tokens/s and the mixture's tokens/s x active parameters against
# qwen3 (its attention's dense model) and llama3; the issue's bar is
# within 2x (a ratio of at least 0.5).
#
# With OLD_BIN set (another build of alallo, e.g. the commit before a
# change), every family runs under both binaries in every round, the old
# first in even rounds and the new first in odd ones, so that a change of
# the machine's load falls on both alike; the summary then gives each
# binary's figures and ratios side by side, and new over old per family.
# The models are made by ALALLO_BIN.
#
# usage: bench/train/families.sh [ALALLO_BIN] [OUT_JSON]
#   env STEPS (3), THREADS (nproc), ROUNDS (2), ADAPTER (lora | full),
#       FAMILIES (the list above, space-separated), OLD_BIN (unset)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
out=${2:-$root/bench/train/families-$(date -u +%Y%m%dT%H%M%SZ).json}
steps=${STEPS:-3}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-2}
adapter=${ADAPTER:-lora}
old_bin=${OLD_BIN:-}
bins=(new)
[[ -n $old_bin ]] && bins=(old new)
tok="$root/models/alallo-base/tokenizer.json"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

families=(${FAMILIES:-llama3 qwen2 mistral gemma gemma2 gemma3 qwen3 smollm3 qwen3_moe phi3})
shape=(--hidden 768 --layers 12 --heads 12 --kv-heads 12 --head-dim 64 --intermediate 2048
    --max-pos 1024)
made=()
for f in "${families[@]}"; do
    extra=()
    case $f in
        gemma2 | gemma3) extra=(--sliding-window 512) ;;
        qwen3_moe) extra=(--experts 8 --experts-used 2 --moe-intermediate 1024) ;;
    esac
    if ! "$bin" model init --family "$f" "${shape[@]}" "${extra[@]}" --tokenizer "$tok" \
        --out "$work/$f" --seed 1 > /dev/null 2> "$work/why"; then
        echo "family $f: skipped: $(head -1 "$work/why")" >&2
        continue
    fi
    made+=("$f")
done

load=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$work/runs.jsonl"
for ((r = 0; r < rounds; r++)); do
    order=("${made[@]}")
    if ((r % 2)); then
        order=()
        for ((i = ${#made[@]} - 1; i >= 0; i--)); do order+=("${made[$i]}"); done
    fi
    which=("${bins[@]}")
    if ((r % 2)) && ((${#bins[@]} > 1)); then which=(new old); fi
    for f in "${order[@]}"; do
        for b in "${which[@]}"; do
            exe=$bin
            [[ $b == old ]] && exe=$old_bin
            echo "bench: round $((r + 1))/$rounds family=$f bin=$b adapter=$adapter steps=$steps threads=$threads" >&2
            line=$("$exe" bench train --model "$work/$f" --adapter "$adapter" --batch 4 \
                --seq 64 --steps "$steps" --threads "$threads" | tail -1)
            echo "$line" >&2
            printf '{"family":"%s","bin":"%s","round":%d,"run":%s}\n' "$f" "$b" "$r" "$line" \
                >> "$work/runs.jsonl"
        done
    done
done

cp "$work/runs.jsonl" "${out%.json}.runs.jsonl" # kept until the summary is written
python3 - "$work/runs.jsonl" "$load" "$adapter" > "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
per_bin = {}
for x in runs:
    per_bin.setdefault(x.get("bin", "new"), {}).setdefault(x["family"], []).append(x["run"])

def share(r):
    return r["tokens_per_s"] / r["cpu_share"] if r.get("cpu_share") else None

def summarize(fams):
    summary = {}
    for f, rs in fams.items():
        per_cpu = [v for v in (share(r) for r in rs) if v is not None]
        summary[f] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
            "active_param_tokens_per_s": statistics.median(r["active_param_tokens_per_s"] for r in rs),
            "tokens_per_cpu_share": statistics.median(per_cpu) if per_cpu else None,
            "params": rs[0]["params"],
            "active_params": rs[0].get("active_params", rs[0]["params"]),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
            "rounds": [r["tokens_per_s"] for r in rs],
        }
    moe = {}
    if "qwen3_moe" in summary:
        m = summary["qwen3_moe"]
        for dense in ("qwen3", "llama3"):
            if dense in summary:
                d = summary[dense]
                ratio = m["active_param_tokens_per_s"] / d["active_param_tokens_per_s"]
                cpu = None
                if m["tokens_per_cpu_share"] and d["tokens_per_cpu_share"]:
                    cpu = (m["tokens_per_cpu_share"] * m["active_params"]) / (
                        d["tokens_per_cpu_share"] * d["active_params"])
                moe[dense] = {"active_param_tokens_per_s_ratio": ratio,
                              "active_param_tokens_per_cpu_share_ratio": cpu,
                              "within_2x": ratio >= 0.5}
    return summary, moe

res = {b: summarize(f) for b, f in per_bin.items()}
out = {"bench": "families", "adapter": sys.argv[3], "loadavg_at_start": sys.argv[2],
       "cpu": runs[0]["run"].get("cpu"), "summary": res["new"][0], "moe_against": res["new"][1]}
if "old" in res:
    out["old"] = {"summary": res["old"][0], "moe_against": res["old"][1]}
    out["new_over_old_tokens_per_s"] = {
        f: s["tokens_per_s"] / res["old"][0][f]["tokens_per_s"]
        for f, s in res["new"][0].items() if f in res["old"][0]}
out["runs"] = runs
print(json.dumps(out, indent=1))
PY
python3 - "$out" >&2 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def show(name, summary, moe):
    print(f"families ({d['adapter']}, {name}), load at start {d['loadavg_at_start']}:")
    for f, s in summary.items():
        rounds = " ".join(f"{t:.1f}" for t in s["rounds"])
        cpu = s.get("tokens_per_cpu_share")
        print(f"  {f:10s} {s['tokens_per_s']:7.1f} tok/s (rounds {rounds})"
              f"  {s['active_param_tokens_per_s']/1e9:7.3f} G active-param tok/s"
              f"  {(cpu or 0):7.1f} tok/cpu-share  params {s['params']/1e6:6.1f} M"
              f"  active {s['active_params']/1e6:6.1f} M  RSS {s['peak_rss_bytes']/2**20:5.0f} MiB")
    for dense, m in moe.items():
        cpu = m.get("active_param_tokens_per_cpu_share_ratio")
        print(f"  qwen3_moe / {dense}: tokens/s x active parameters {m['active_param_tokens_per_s_ratio']:.2f}"
              f" ({'within' if m['within_2x'] else 'not within'} 2x)"
              + (f", per CPU-second {cpu:.2f}" if cpu else ""))
show("new" if "old" in d else "this binary", d["summary"], d["moe_against"])
if "old" in d:
    show("old", d["old"]["summary"], d["old"]["moe_against"])
    for f, x in d["new_over_old_tokens_per_s"].items():
        print(f"  {f:10s} new / old tokens/s {x:.3f}")
PY
rm -f "${out%.json}.runs.jsonl"
echo "wrote $out" >&2
