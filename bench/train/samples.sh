#!/bin/sh
# bench/train/samples.sh - the time sample answers add, through the real
# trainer (alallo train --config), against what the estimate adds for them
# (docs/estimator.md, "Sample answers"): the same run on the built-in model
# (models/alallo-base) without and with 5 sample prompts of the job's own
# (each answered greedily, 32 tokens at most, before the first step and at
# each epoch's end). Training time from the trainer's own clock (`started`
# to the last `step` event), so loading and saving are left out; the two
# runs alternate REPEATS times (default 3) and the fastest of each counts.
# The estimate's share is computed from the same run: its rounds (the
# distinct steps answered at), the prompts' tokens as the API counts them
# (bytes / 4 + 8) and the training tokens (steps x batch x the data set's
# mean tokens per example).
#   bench/train/samples.sh [ALALLO_BIN] [STEPS] [REPEATS]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
steps=${2:-92}
repeats=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/examples/sentiment-train.jsonl" "$work" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
w = sys.argv[2]
open(f"{w}/train.jsonl", "w").writelines(lines[:180])
prompts = [json.loads(l)["prompt"] for l in lines[180:185]]
json.dump(prompts, open(f"{w}/prompts.json", "w"))
PY
for rep in $(seq 1 "$repeats"); do
for v in 0 1; do
  samples=null
  [ "$v" = 1 ] && samples=$(cat "$work/prompts.json")
  cat > "$work/attempt-$v.json" <<JSON
{"model_dir":"$root/models/alallo-base","train_file":"$work/train.jsonl",
 "checkpoint_dir":"$work/ck-$v","out_dir":"$work/out-$v","sample_prompts":$samples,
 "batch_size":8,"learning_rate":0.001,"seed":1,"max_steps":$steps,"seq_len":128,
 "keep_checkpoints":1}
JSON
  rm -rf "$work/ck-$v" "$work/out-$v"
  "$bin" train --config "$work/attempt-$v.json" > "$work/events-$v-$rep.jsonl" 2>/dev/null
done
done
python3 - "$work" "$steps" "$repeats" <<'PY'
import json, os, sys
work, steps, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def events(p, rep):
    return [json.loads(l) for l in open(f"{work}/events-{p}-{rep}.jsonl")]
def train_s(p, rep):
    ev = events(p, rep)
    st = next(e for e in ev if e["event"] == "started")
    last = [e for e in ev if e["event"] == "step"][-1]
    return last["t"] - st["t"]
plain = min(train_s(0, r) for r in range(1, repeats + 1))
with_s = min(train_s(1, r) for r in range(1, repeats + 1))
ev = events(1, 1)
st = next(e for e in ev if e["event"] == "started")
samples = [e for e in ev if e["event"] == "sample"]
rounds = len({(e["step"], e["base"]) for e in samples})
prompts = json.load(open(f"{work}/prompts.json"))
prompt_tokens = sum(len(p.encode()) / 4 + 8 for p in prompts)
train_tokens = steps * 8 * st["tokens"] / st["examples"]
decode_slowdown, answer_tokens = 4.0, 32
share = rounds * (prompt_tokens + decode_slowdown * len(prompts) * answer_tokens) / 3 / train_tokens
print(json.dumps({
    "samples": {"model": "alallo-base", "steps": steps, "repeats": repeats, "train_examples": 180,
                "prompts": len(prompts), "rounds": rounds, "answers": len(samples),
                "train_s_without": round(plain, 2), "train_s_with": round(with_s, 2),
                "added_percent": round(100 * (with_s - plain) / plain, 1),
                "estimated_percent": round(100 * share, 1)},
    "machine": f"{os.cpu_count()} CPUs, {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].split(chr(10))[0].strip()}, load {open('/proc/loadavg').read().split()[0]}",
}, indent=1))
PY
