#!/usr/bin/env bash
# bench/train/rft.sh - where a reinforcement fine-tuning step's time goes
# (docs/rft.md): the trainer alone (`alallo train --config`) on the built-in
# model, a string_check grader, STEPS steps of BATCH prompts x GROUP answers
# of at most TOKENS tokens. Prints the trainer's own account (rollout
# tokens/s, grading time per answer, update tokens/s and each one's share of
# the steps' time) with the machine and its load. Each of ROUNDS rounds runs
# the same job twice, its rollouts decoded together (the batcher, the
# default) and one answer at a time (ALALLO_RFT_ROLLOUT=one-at-a-time), so
# the two are measured alternately under the same load. GRADINGS lists how
# the answers are graded: beside the rollouts in a thread (the default) or
# after them (ALALLO_RFT_GRADING=inline); with both, each round runs every
# pair. The grading time printed is what the step waited for grading once
# its rollouts were done. GRADER=multi grades with a multi grader
# (string_check and text_similarity's rouge_l, heavier than string_check
# alone). GRADER=score_model grades with the built-in model itself as the
# judge (a score_model grader whose reply is at most JUDGE_TOKENS tokens):
# the grading time per answer is then a forward over the grading prompt and
# the judge's decoding, the figure behind the estimate's grading term
# (docs/estimator.md, "Reinforcement fine-tuning: rollouts, grading and
# updates"). GRADER=python grades with a python grader run in the sandbox
# (docs/rft.md, "python"): one sandboxed process per answer.
#
# usage: bench/train/rft.sh [BIN]
#   env STEPS (4), BATCH (4), GROUP (4), TOKENS (32), THREADS (nproc),
#       PRECISION (16-bit | 4-bit), ADAPTER (lora | full), ROUNDS (2),
#       MODES ("batched one-at-a-time"), GRADINGS ("beside"),
#       GRADER (string_check | multi | score_model | python), JUDGE_TOKENS (48)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
steps=${STEPS:-4}
batch=${BATCH:-4}
group=${GROUP:-4}
tokens=${TOKENS:-32}
threads=${THREADS:-$(nproc)}
precision=${PRECISION:-16-bit}
adapter=${ADAPTER:-lora}
rounds=${ROUNDS:-2}
modes=${MODES:-batched one-at-a-time}
gradings=${GRADINGS:-beside}
case ${GRADER:-string_check} in
string_check)
    grader='{"type": "string_check", "input": "{{sample.output_text}}",
            "reference": "{{item.reference}}", "operation": "ilike"}' ;;
multi)
    grader='{"type": "multi", "calculate_output": "0.5 * word + 0.5 * close", "graders": {
            "word": {"type": "string_check", "input": "{{sample.output_text}}",
                     "reference": "{{item.reference}}", "operation": "ilike"},
            "close": {"type": "text_similarity", "input": "{{sample.output_text}}",
                      "reference": "the harbor of the treasury", "evaluation_metric": "rouge_l"}}}' ;;
score_model)
    grader='{"type": "score_model", "name": "judge", "model": "alallo-base", "range": [0, 1],
            "input": [{"role": "user", "content":
              "Score from 0 to 1 how well this answer says \"{{item.reference}}\": {{sample.output_text}}"}],
            "sampling_params": {"max_completions_tokens": '"${JUDGE_TOKENS:-48}"', "temperature": 0}}' ;;
python)
    grader='{"type": "python", "name": "has_reference",
            "source": "def grade(sample, item):\n    return 1.0 if item[\"reference\"] in sample[\"output_text\"] else 0.0\n"}' ;;
*)
    echo "rft.sh: GRADER is string_check, multi, score_model or python" >&2
    exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for q in "What of the harbor?" "What of the treasury?" "Speak of the army." "What of the navy?"; do
    printf '{"messages":[{"role":"user","content":"%s"}],"reference":"the"}\n' "$q"
done >"$work/train.jsonl"
cat >"$work/attempt.json" <<JSON
{"model_dir": "$root/models/alallo-base", "train_file": "$work/train.jsonl",
 "checkpoint_dir": "$work/ckpt", "out_dir": "$work/out", "batch_size": $batch,
 "max_steps": $steps, "seq_len": 256, "learning_rate": 0.001, "seed": 1,
 "threads": $threads, "precision": "$precision", "adapter": "$adapter",
 "method": "reinforcement",
 "grader": $grader,
 "grader_models": {"alallo-base": "$root/models/alallo-base"}, "rft_group": $group, "rft_answer_tokens": $tokens,
 "rft_eval_interval": $steps}
JSON
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "machine: $cpu, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "run: $steps steps x $batch prompts x $group answers of at most $tokens tokens," \
     "$precision $adapter, $threads threads, grader ${GRADER:-string_check}"
for ((round = 1; round <= rounds; round++)); do
    for grading in $gradings; do
        for mode in $modes; do
            rm -rf "$work/ckpt" "$work/out"
            echo "round $round, rollouts $mode, grading $grading:"
            ALALLO_RFT_ROLLOUT=$mode ALALLO_RFT_GRADING=$grading \
                "$bin" train --config "$work/attempt.json" 2>/dev/null |
                sed -n 's/^{"event":"log".*"line":"\(where the steps.*\)"}$/  \1/p'
        done
    done
done
