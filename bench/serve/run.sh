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
# Models: the built-in one (models/alallo-base) and a randomly initialised
# 124m shape (`alallo model init --shape 124m` on the built-in tokenizer).
# For 1 and 8 concurrent clients, ROUNDS rounds (default 2) alternate the
# three; each round sends N1 requests (default 3) at 1 concurrent client
# and N8 (default 8) at 8. It
# prints one JSON line per model, way and concurrency: p50 and p99 latency
# (ms), requests/s, tokens/s, and for llama.cpp the p50 time to first
# token (alallo's legacy completions answer whole: not measured). THREADS (default: every CPU) sets the
# engine's, the children's and llama.cpp's threads.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
alallo=${1:-$root/build/alallo}
exec node "$here/serve.mjs" "$alallo" "$root"
