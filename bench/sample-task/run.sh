#!/usr/bin/env bash
# bench/sample-task/run.sh - the sample task of docs/sample-task.md: fine-tune
# a base model on examples/sentiment-train.jsonl with LoRA at 16-bit and at
# 4-bit, and measure accuracy on the held-out examples/sentiment-test.jsonl
# before and after, and the wall time of each fine-tuning run.
#
# Usage: bench/sample-task/run.sh [MODEL_DIR]   (default models/alallo-base)
# Environment: ALALLO (binary, default build/alallo), WORK (scratch folder,
# default build-sample-task/), EPOCHS (10), BATCH (8), LR_MULT (10), SEED (0),
# THREADS (2), PRECISIONS ("16-bit 4-bit"). EPOCHS=3 LR_MULT=1 are the
# service's defaults, which teach alallo-base nothing (docs/sample-task.md).
#
# The trainer gets the settings the service would send for a job with these
# hyper-parameters (src/control/lifecycle.c): LoRA r 16, alpha 32 on all seven
# projections, learning rate LR_MULT x 2e-4, a 256-token context, max_steps
# = ceil(examples x epochs / batch). Prints a Markdown table (report.mjs)
# and writes WORK/results.json.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=$(cd "${1:-$root/models/alallo-base}" && pwd)
alallo=${ALALLO:-$root/build/alallo}
work=${WORK:-$root/build-sample-task}
epochs=${EPOCHS:-10} batch=${BATCH:-8} lr_mult=${LR_MULT:-10} seed=${SEED:-0}
threads=${THREADS:-2} precisions=${PRECISIONS:-16-bit 4-bit}
train=$root/examples/sentiment-train.jsonl
test=$root/examples/sentiment-test.jsonl

# Spinning OpenMP threads waste a shared machine's cores (docs/base-model.md).
export OMP_WAIT_POLICY=passive

die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
[[ -x $alallo ]] || die "no alallo binary at $alallo (run make build, or set ALALLO)"
alallo=$(cd "$(dirname "$alallo")" && pwd)/$(basename "$alallo")
rm -rf "$work"
mkdir -p "$work"

examples=$(grep -c . "$train")
max_steps=$(((examples * epochs + batch - 1) / batch))
every=$((max_steps / 10 > 10 ? max_steps / 10 : 10))
lr=$(node -p "$lr_mult * 2e-4")

accuracy() { node "$here/accuracy.mjs" "$alallo" "$1" "$test"; }

printf 'sample task: %s, %d examples x %d epochs, batch %d, %d steps, learning rate %s\n' \
    "$(basename "$model")" "$examples" "$epochs" "$batch" "$max_steps" "$lr" >&2
before=$(accuracy "$model")
results="{\"model\": \"$(basename "$model")\", \"examples\": $examples, \"epochs\": $epochs,"
results+=" \"batch_size\": $batch, \"max_steps\": $max_steps, \"learning_rate\": $lr,"
results+=" \"threads\": $threads, \"before\": $before, \"runs\": ["
sep=""
for p in $precisions; do
    dir=$work/$p
    mkdir -p "$dir"
    cat >"$dir/ATTEMPT.json" <<EOF
{"model_dir": "$model", "train_file": "$train", "train_file_name": "sentiment-train.jsonl",
 "validation_file": null, "checkpoint_dir": "$dir/checkpoints", "out_dir": "$dir/out",
 "precision": "$p", "adapter": "lora",
 "lora": {"r": 16, "alpha": 32, "targets": ["q_proj", "k_proj", "v_proj", "o_proj",
          "gate_proj", "up_proj", "down_proj"]},
 "n_epochs": $epochs, "batch_size": $batch, "learning_rate": $lr, "seed": $seed,
 "max_steps": $max_steps, "seq_len": 256, "checkpoint_every_steps": $every,
 "checkpoint_every_s": 300, "threads": $threads}
EOF
    t0=$(date +%s.%N)
    "$alallo" train --config "$dir/ATTEMPT.json" >"$dir/events.jsonl" 2>"$dir/stderr" ||
        die "$p training failed: $(tail -n 2 "$dir/stderr")"
    t1=$(date +%s.%N)
    wall=$(node -p "($t1 - $t0).toFixed(1)")
    loss=$(sed -n 's/.*"event":"done".*"train_loss":\([0-9.e+-]*\).*/\1/p' "$dir/events.jsonl")
    after=$(accuracy "$dir/out/model")
    results+="$sep{\"precision\": \"$p\", \"wall_s\": $wall, \"final_loss\": $loss, \"after\": $after}"
    sep=", "
done
results+="], \"cpu\": \"$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)\","
results+=" \"cpus\": $(nproc), \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
printf '%s\n' "$results" >"$work/results.json"
node "$here/report.mjs" "$work/results.json"
printf 'details: %s\n' "$work/results.json" >&2
