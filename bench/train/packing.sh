#!/bin/sh
# bench/train/packing.sh - training tokens/s with and without sample packing
# on a data set of mixed lengths, through the real trainer (alallo train
# --config), on the built-in model (models/alallo-base, context 256).
#
# The data: prompt/completion examples of mixed lengths, exponentially
# spread (many short, a few up to the whole context) with a mean of about a
# quarter of the context. Each run trains the same steps (batch 16, seq_len
# = the context) from
# the same seed; tokens/s are real (unpadded) tokens over wall time, from
# the trainer's step events after the first report.
#   bench/train/packing.sh [ALALLO_BIN] [STEPS]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
steps=${2:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# " tick" is two tokens of alallo-base's tokenizer, the prompt about five;
# completions of 1 to 120 words, exponential with a mean of 30.
python3 - "$work/train.jsonl" <<'PY'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(400):
        n = min(120, 1 + int(r.expovariate(1 / 29)))
        f.write(json.dumps({"prompt": f"count {i}:", "completion": " tick" * n}) + "\n")
PY
for packing in 0 1; do
  cat > "$work/attempt-$packing.json" <<JSON
{"model_dir":"$root/models/alallo-base","train_file":"$work/train.jsonl",
 "train_file_name":"train.jsonl","checkpoint_dir":"$work/ck-$packing","out_dir":"$work/out-$packing",
 "batch_size":16,"learning_rate":0.001,"seed":1,"max_steps":$steps,"seq_len":256,
 "packing":$packing,"keep_checkpoints":1}
JSON
  start=$(date +%s.%N)
  "$bin" train --config "$work/attempt-$packing.json" > "$work/events-$packing.jsonl" 2>/dev/null
  end=$(date +%s.%N)
  echo "$start $end" > "$work/time-$packing"
done
python3 - "$work" "$steps" <<'PY'
import json, os, sys
work, steps = sys.argv[1], int(sys.argv[2])
res = {}
for p in ("0", "1"):
    ev = [json.loads(l) for l in open(f"{work}/events-{p}.jsonl")]
    st = next(e for e in ev if e["event"] == "started")
    steps_ev = [e for e in ev if e["event"] == "step"]
    tps = [e["tokens_per_s"] for e in steps_ev[1:]] or [steps_ev[-1]["tokens_per_s"]]
    res["packing" if p == "1" else "padding"] = {
        "tokens_per_s": round(sum(tps) / len(tps), 1),
        "packing_efficiency": round(sum(e["packing_efficiency"] for e in steps_ev) / len(steps_ev), 3),
        "final_loss": steps_ev[-1]["loss"],
        "mean_example_tokens": round(st["tokens"] / st["examples"], 1),
    }
res["speedup"] = round(res["packing"]["tokens_per_s"] / res["padding"]["tokens_per_s"], 2)
res["context"] = 256
res["steps"] = steps
res["machine"] = f"{os.cpu_count()} CPUs, load {open('/proc/loadavg').read().split()[0]}"
print(json.dumps(res, indent=1))
PY
