#!/bin/sh
# bench/train/validation.sh - what watching a job learn costs and saves,
# through the real trainer (alallo train --config):
#  1. the time validation adds: the same run on the built-in model
#     (models/alallo-base) with and without a validation file of 10% of the
#     training file's size (a batch every 10 steps, the whole set at each
#     epoch's end); training time from the trainer's own clock (`started`
#     to the last `step` event), so loading and saving are left out; the
#     two runs alternate REPEATS times (default 3) and the fastest of each
#     counts, since a shared machine's load swings more than the effect;
#  2. early stopping on a bench of small jobs: 8 jobs on a tiny model made
#     here (seeds, learning rates, and validation sets that agree with the
#     training file or contradict it), patience 2; how many stopped early
#     and the steps that saved.
#   bench/train/validation.sh [ALALLO_BIN] [STEPS] [REPEATS]
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
open(f"{w}/valid.jsonl", "w").writelines(lines[180:198])   # 10% of 180
PY
for rep in $(seq 1 "$repeats"); do
for v in 0 1; do
  valid=null
  [ "$v" = 1 ] && valid="\"$work/valid.jsonl\""
  cat > "$work/attempt-$v.json" <<JSON
{"model_dir":"$root/models/alallo-base","train_file":"$work/train.jsonl",
 "validation_file":$valid,"checkpoint_dir":"$work/ck-$v","out_dir":"$work/out-$v",
 "batch_size":8,"learning_rate":0.001,"seed":1,"max_steps":$steps,"seq_len":128,
 "keep_checkpoints":1}
JSON
  rm -rf "$work/ck-$v" "$work/out-$v"
  "$bin" train --config "$work/attempt-$v.json" > "$work/events-$v-$rep.jsonl" 2>/dev/null
done
done
# 2. a tiny model and its tokenizer, as the browser tests make theirs
python3 - "$work/corpus.txt" <<'PY'
import sys
words = "the service was good bad fine great awful on day review sentiment positive negative".split()
with open(sys.argv[1], "w") as f:
    for i in range(600):
        f.write(" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(12)) + "\n")
PY
"$bin" tokenizer train --input "$work/corpus.txt" --vocab-size 300 --out "$work/tok.json" >/dev/null
"$bin" model init --shape tiny --tokenizer "$work/tok.json" --out "$work/tiny" --seed 1 >/dev/null
python3 - "$work" <<'PY'
import json, random, sys
w = sys.argv[1]
words = ["good", "fine", "poor", "bad", "great", "awful"]
def line(i, flip):
    x = words[i % 6]
    lab = "positive" if x in ("good", "fine", "great") else "negative"
    if flip:
        lab = "negative" if lab == "positive" else "positive"
    return json.dumps({"prompt": f"Review: the service was {x} on day {i}.\nSentiment:", "completion": f" {lab}"}) + "\n"
jobs = []
for k in range(8):
    r = random.Random(k)
    n = r.choice([24, 32, 48])
    flip = k % 2 == 1          # half the validation sets contradict the training file
    open(f"{w}/es-train-{k}.jsonl", "w").writelines(line(i, False) for i in range(n))
    open(f"{w}/es-valid-{k}.jsonl", "w").writelines(line(1000 + i, flip) for i in range(8))
    lr = r.choice([0.003, 0.01, 0.03])
    epochs = 15
    steps = epochs * n // 8
    jobs.append({"k": k, "n": n, "flip": flip, "lr": lr, "steps": steps})
    json.dump({"model_dir": f"{w}/tiny", "train_file": f"{w}/es-train-{k}.jsonl",
               "validation_file": f"{w}/es-valid-{k}.jsonl", "checkpoint_dir": f"{w}/es-ck-{k}",
               "out_dir": f"{w}/es-out-{k}", "batch_size": 8, "learning_rate": lr, "seed": k,
               "max_steps": steps, "seq_len": 64, "keep_checkpoints": 1,
               "early_stopping_patience": 2, "early_stopping_min_delta": 0.001},
              open(f"{w}/es-{k}.json", "w"))
json.dump(jobs, open(f"{w}/es-jobs.json", "w"))
PY
for k in 0 1 2 3 4 5 6 7; do
  "$bin" train --config "$work/es-$k.json" > "$work/es-events-$k.jsonl" 2>/dev/null
done
python3 - "$work" "$steps" "$repeats" <<'PY'
import json, os, sys
work, steps, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def train_s(p, rep):
    ev = [json.loads(l) for l in open(f"{work}/events-{p}-{rep}.jsonl")]
    st = next(e for e in ev if e["event"] == "started")
    last = [e for e in ev if e["event"] == "step"][-1]
    return last["t"] - st["t"]
plain = min(train_s(0, r) for r in range(1, repeats + 1))
valid = min(train_s(1, r) for r in range(1, repeats + 1))
jobs = json.load(open(f"{work}/es-jobs.json"))
fired, saved, planned = 0, 0, 0
rows = []
for j in jobs:
    ev = [json.loads(l) for l in open(f"{work}/es-events-{j['k']}.jsonl")]
    done = next(e for e in ev if e["event"] == "done")
    early = bool(done.get("early_stopped"))
    fired += early
    planned += j["steps"]
    saved += j["steps"] - done["step"] if early else 0
    rows.append({"job": j["k"], "examples": j["n"], "contradicting_validation": j["flip"],
                 "lr": j["lr"], "planned": j["steps"], "ran": done["step"],
                 "best_step": done.get("best_step")})
print(json.dumps({
    "validation": {"model": "alallo-base", "steps": steps, "repeats": repeats, "train_examples": 180,
                   "valid_examples": 18, "train_s_without": round(plain, 2),
                   "train_s_with": round(valid, 2),
                   "added_percent": round(100 * (valid - plain) / plain, 1)},
    "early_stopping": {"jobs": len(jobs), "fired": fired, "steps_planned": planned,
                       "steps_saved": saved,
                       "saved_percent": round(100 * saved / planned, 1), "runs": rows},
    "machine": f"{os.cpu_count()} CPUs, {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].split(chr(10))[0].strip()}, load {open('/proc/loadavg').read().split()[0]}",
}, indent=1))
PY
