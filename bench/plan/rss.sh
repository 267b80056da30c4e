#!/bin/sh
# bench/plan/rss.sh - the planner's memory need against the peak RSS of the
# real trainer (alallo train --config, 16-bit LoRA rank 16, a few steps),
# on small shapes: the built-in model at two contexts, a tiny Gemma 2
# (alallo model init --family gemma2), a tiny Qwen3 (q/k norms, heads
# twice the hidden width), Qwen3-1.7B's widths at 2 of its 28 layers (and
# the tokenizer's vocabulary, not its 151,936), a tiny Gemma 3 (post and
# q/k norms, a window of 16 under the 512 tokens), Gemma-3-1B's widths at 2
# of its 26 layers (hidden 1152, 4 heads of 256, one key/value head),
# Phi-4-mini's widths at 2 of its 32 layers (hidden 3072, 24 heads of 128
# over 8, intermediate 8192, fused tensors, 96 of 128 dims rotating), a
# tiny Llama 3 given a 4096-token context, and real sizes of today's
# families at a reduced depth: Qwen3-8B's widths at 2 of its 36 layers,
# Gemma-3-4B's at 2 of 34 (hidden 2560, 8 heads of 256, 4 key/value heads,
# window 1024), SmolLM3-3B's at 2 of 36 and Qwen3-30B-A3B's at 1 of its 48
# (128 experts of width 768, 8 per token: 0.6 B parameters in that layer's
# experts). Each row fills the context with one example, so the attention
# score blocks are as large as they get. The trainer runs THREADS threads
# (the attempt's "threads", default 2) and the planner is told the same.
#   bench/plan/rss.sh [BUILD_DIR] [THREADS]
#   env CASES: the rows to run, space-separated (default: every row)
# Prints one JSON object; "planned" is the planner's total, "planned_work"
# the same without its fixed 256 MiB process allowance and 5% margin.
# Exits 1 when a row is outside the tolerance: the planned total must be
# above the peak, and the planned working set within 32 MiB + 10% of it.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${2:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -std=c11 -O2 -I"$root/src" "$root/bench/plan/plan_need.c" \
   "$build/libalallo_sched.a" "$build/libalallo_core.a" \
   $(pkg-config --libs jansson libsodium) -lm -o "$work/plan_need"
tok="$root/models/alallo-base/tokenizer.json"
cases=${CASES:-}
want() { [ -z "$cases" ] || case " $cases " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
"$build/alallo" model init --family gemma2 --tokenizer "$tok" --out "$work/gemma2" >/dev/null
"$build/alallo" model init --family llama3 --tokenizer "$tok" --out "$work/llama3" >/dev/null
"$build/alallo" model init --family qwen3 --tokenizer "$tok" --out "$work/qwen3" >/dev/null
"$build/alallo" model init --family qwen3 --tokenizer "$tok" --out "$work/qwen3-1.7b" \
  --hidden 2048 --layers 2 --heads 16 --kv-heads 8 --head-dim 128 --intermediate 6144 \
  --max-pos 1024 >/dev/null
"$build/alallo" model init --family gemma3 --tokenizer "$tok" --out "$work/gemma3" >/dev/null
"$build/alallo" model init --family gemma3 --tokenizer "$tok" --out "$work/gemma3-1b" \
  --hidden 1152 --layers 2 --heads 4 --kv-heads 1 --head-dim 256 --intermediate 6912 \
  --query-scalar 256 --sliding-window 512 --max-pos 1024 >/dev/null
# real sizes at a reduced depth, made only when their row runs (the largest
# is a 2.5 GB folder)
real() { # CASE NAME FAMILY SHAPE...
  want "$1" || return 0
  name=$2 family=$3
  shift 3
  "$build/alallo" model init --family "$family" --tokenizer "$tok" --out "$work/$name" \
    --max-pos 2048 "$@" >/dev/null
}
real qwen3-8b-2layers-512 qwen3-8b qwen3 --hidden 4096 --layers 2 --heads 32 --kv-heads 8 \
  --head-dim 128 --intermediate 12288
real gemma3-4b-2layers-1024 gemma3-4b gemma3 --hidden 2560 --layers 2 --heads 8 --kv-heads 4 \
  --head-dim 256 --intermediate 10240 --query-scalar 256 --sliding-window 1024
real smollm3-3b-2layers-512 smollm3-3b smollm3 --hidden 2048 --layers 2 --heads 16 \
  --kv-heads 4 --head-dim 128 --intermediate 11008
real qwen3-30b-a3b-1layer-512 qwen3-30b-a3b qwen3_moe --hidden 2048 --layers 1 --heads 32 \
  --kv-heads 4 --head-dim 128 --intermediate 6144 --experts 128 --experts-used 8 \
  --moe-intermediate 768
# Phi-4-mini's widths; the tiny phi3's longrope context (512 of 4096) holds the rows
if want phi4-mini-2layers-512; then
  "$build/alallo" model init --family phi3 --tokenizer "$tok" --out "$work/phi4-mini" \
    --hidden 3072 --layers 2 --heads 24 --kv-heads 8 --head-dim 128 --intermediate 8192 \
    >/dev/null
fi
# the tiny Llama 3 with a longer context (its llama3 RoPE scaling allows it)
python3 - "$work/llama3/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 4096
json.dump(c, open(sys.argv[1], "w"))
PY
run() { # NAME MODEL_DIR SEQ
  want "$1" || return 0
  python3 - "$work/$1.jsonl" "$3" <<'PY'
import json, sys
# " tick" is two tokens of alallo-base's tokenizer: each example fills a row
n = int(sys.argv[2]) // 2 - 8
with open(sys.argv[1], "w") as f:
    for i in range(4):
        f.write(json.dumps({"prompt": "count:", "completion": " tick" * n}) + "\n")
PY
  cat > "$work/$1.json" <<JSON
{"model_dir":"$2","train_file":"$work/$1.jsonl","train_file_name":"t.jsonl",
 "checkpoint_dir":"$work/ck-$1","out_dir":"$work/out-$1","batch_size":1,
 "learning_rate":0.001,"seed":1,"max_steps":2,"seq_len":$3,"keep_checkpoints":1,
 "threads":$threads}
JSON
  OMP_NUM_THREADS=$threads /usr/bin/time -f "%M" -o "$work/$1.rss" \
    "$build/alallo" train --config "$work/$1.json" > "$work/$1.events" 2>"$work/$1.err" ||
    { cat "$work/$1.err" >&2; exit 1; }
  python3 - "$2/config.json" "$3" "$threads" "$work/plan_need" "$work/$1.rss" "$1" <<'PY' >> "$work/rows"
import json, subprocess, sys
c = json.load(open(sys.argv[1])); seq, thr = sys.argv[2], sys.argv[3]
g2 = c["model_type"] in ("gemma2", "gemma3_text")  # the post norms
args = [c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"],
        c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"]),
        c.get("head_dim", 0), c["vocab_size"], int(bool(c.get("tie_word_embeddings"))), int(g2),
        int(g2 and (c.get("attn_logit_softcapping") or 0) > 0),
        int(g2 and (c.get("final_logit_softcapping") or 0) > 0), 1, seq, thr, 16,
        int(c["model_type"].startswith("qwen3") or c["model_type"] == "gemma3_text")]
if c.get("num_experts"):  # a mixture of experts, every layer sparse
    args += [c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]]
p = json.loads(subprocess.check_output([sys.argv[4]] + [str(a) for a in args]))
rss = int(open(sys.argv[5]).read().split()[-1]) * 1024
mib = lambda b: round(b / 2**20, 1)
work = p["total"] / 1.05 - 256 * 2**20
print(json.dumps({"case": sys.argv[6], "seq_len": int(seq), "threads": int(thr),
                  "measured_peak_rss_mib": mib(rss), "planned_mib": mib(p["total"]),
                  "planned_work_mib": mib(work), "planned_activations_mib": mib(p["activations"]),
                  "planned_logits_mib": mib(p["logits"])}))
PY
}
run base-256 "$root/models/alallo-base" 256
run base-64 "$root/models/alallo-base" 64
run gemma2-512 "$work/gemma2" 512
run qwen3-512 "$work/qwen3" 512
run qwen3-1.7b-2layers-512 "$work/qwen3-1.7b" 512
run gemma3-512 "$work/gemma3" 512
run gemma3-1b-2layers-1024 "$work/gemma3-1b" 1024
run phi4-mini-2layers-512 "$work/phi4-mini" 512
run llama3-4096 "$work/llama3" 4096
run qwen3-8b-2layers-512 "$work/qwen3-8b" 512
run gemma3-4b-2layers-1024 "$work/gemma3-4b" 1024
run smollm3-3b-2layers-512 "$work/smollm3-3b" 512
run qwen3-30b-a3b-1layer-512 "$work/qwen3-30b-a3b" 512
python3 - "$work/rows" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps({"machine": f"{os.cpu_count()} CPUs, load {open('/proc/loadavg').read().split()[0]}",
                  "rows": rows}, indent=1))
bad = [r["case"] for r in rows
       if r["planned_mib"] < r["measured_peak_rss_mib"]
       or abs(r["measured_peak_rss_mib"] - r["planned_work_mib"])
          > 32 + 0.1 * r["measured_peak_rss_mib"]]
if bad:
    print("outside the tolerance: " + ", ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
