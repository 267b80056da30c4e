#!/usr/bin/env bash
# bench/train/samples_batched.sh - the trainer's sample answers decoded together
# through the batcher (the default) against one at a time
# (ALALLO_SAMPLE_ANSWERS=one-at-a-time): the trainer alone (`alallo train
# --config`), a job with the most sample prompts a job may give (5), each
# answered greedily with up to the trainer's limit of tokens, before the
# first step and at each epoch's end. Each of ROUNDS rounds runs the same
# job both ways, alternately, so the two meet the same load; the trainer
# writes the time the answers took to stderr when the variable is set. Prints
# the machine, the median time a set of answers took each way and their
# ratio.
#
# usage: bench/train/samples_batched.sh [BIN]
#   env SHAPE (alallo-base | tiny | small | 124m), EPOCHS (2), ROUNDS (4),
#       THREADS (nproc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
shape=${SHAPE:-alallo-base}
epochs=${EPOCHS:-2}
rounds=${ROUNDS:-4}
threads=${THREADS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ $shape == alallo-base ]]; then
    model=$root/models/alallo-base
else
    model=$work/model
    "$bin" model init --shape "$shape" --tokenizer "$root/models/alallo-base/tokenizer.json" \
        --out "$model" >/dev/null
fi
head -n 16 "$root/examples/sentiment-train.jsonl" >"$work/train.jsonl"
prompts='["Review: a slow, dull film\nSentiment:", "Review: the cast is wonderful\nSentiment:",
  [{"role": "user", "content": "Was the film good?"}], "Review: I left early\nSentiment:",
  [{"role": "user", "content": "Tell me of the long road home."}]]'
cat >"$work/attempt.json" <<JSON
{"model_dir": "$model", "train_file": "$work/train.jsonl",
 "checkpoint_dir": "$work/ckpt", "out_dir": "$work/out", "batch_size": 8,
 "n_epochs": $epochs, "max_steps": $((2 * epochs)), "seq_len": 128, "learning_rate": 0.001, "seed": 1,
 "threads": $threads, "precision": "16-bit", "adapter": "lora",
 "sample_prompts": $prompts}
JSON
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "machine: $cpu, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "run: model $shape, 5 sample prompts, $epochs epochs, $threads threads, $rounds rounds"
: >"$work/times"
for ((round = 1; round <= rounds; round++)); do
    for mode in batched one-at-a-time; do
        rm -rf "$work/ckpt" "$work/out"
        ALALLO_SAMPLE_ANSWERS=$mode "$bin" train --config "$work/attempt.json" \
            2>"$work/err" >/dev/null || { cat "$work/err" >&2; exit 1; }
        sed -n 's/^alallo train: sample answers at step [0-9]*: \([0-9]*\) in \([0-9.]*\) s, .*/\1 \2/p' \
            "$work/err" | while read -r n s; do echo "$mode $n $s"; done >>"$work/times"
    done
done
python3 - "$work/times" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    mode, n, s = line.split()
    t.setdefault(mode, []).append(float(s))
b, o = statistics.median(t["batched"]), statistics.median(t["one-at-a-time"])
print(f"sets of answers: {len(t['batched'])} each way")
print(f"median a set: batched {b * 1000:.1f} ms, one at a time {o * 1000:.1f} ms, "
      f"one at a time / batched {o / b:.2f}x")
PY
