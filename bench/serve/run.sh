#!/bin/sh
# bench/serve/run.sh - completions served three ways on one machine, the
# same model and prompt, greedy: alallo's resident inference engine
# (`serve`, docs/serving.md), alallo's fallback of one `alallo generate`
# child per request (`serve --inference child`), and llama.cpp (npm
# node-llama-cpp, tests/node_modules) with the model's GGUF export loaded
# once, all with the same thread count.
#
#   bench/serve/run.sh [ALALLO_BIN]      (default build/alallo)
#
# MODELS (default built-in,124m): the built-in one (models/alallo-base)
# and randomly initialised shapes on the built-in tokenizer (`alallo model
# init --shape 124m|1b`; 1b is Llama-3.2-1B-class, about 5 GB in fp32 for
# each of the engine, llama.cpp and every child). WAYS (default
# engine,child,llama.cpp) picks the ways; the way baseline is the engine
# of another alallo binary, BASELINE=path (an older build, to measure a
# change in the same run). For each of CONCURRENT (default
# 1,8,32) concurrent clients, ROUNDS rounds (default 2) alternate the ways;
# each round sends N<c> requests (default the larger of 3 and c) at c
# clients. alallo's requests are streamed legacy completions, llama.cpp's
# a sequence of its own each (one per client). It prints one JSON line per
# model, way and concurrency: p50 and p99 latency (ms), p50 and p99 time
# to first token (ms: the first chunk with text, or llama.cpp's first
# token; at one client, where no answer had text, as a random shape's
# tokens past the tokenizer's vocabulary have none, the whole time of a
# one-token completion, marked ttft_by), requests/s, tokens/s.
#
# RELOAD=1 starts the ways' services again and loads llama.cpp's model
# again (read into memory, not mapped) before every round after the
# first: on a VM, how fast a process reads its weights can depend on
# where its memory landed (docs/serving.md), and each round then draws
# that again for every way. THREADS (default: every CPU) sets the
# engine's, the children's and llama.cpp's threads.
#
# The way adapters is the engine serving ADAPTERS (default 8) different
# LoRA fine-tunes of the model at once: a service with a local worker
# trains them first (short jobs, ADAPTER_STEPS steps each, default 20, at
# learning rate multiplier 10, each with its own seed and the first 4 + 4k
# examples of the sample), then each client's requests go to
# fine-tune k mod ADAPTERS in turn. Before the rounds each fine-tune
# answers alone; every answer of the rounds must equal its fine-tune's
# answer alone (each answers as its own model), and the line says how
# many of the fine-tunes answer differently from the base
# ("distinct_from_base").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
alallo=${1:-$root/build/alallo}
exec node "$here/serve.mjs" "$alallo" "$root"
