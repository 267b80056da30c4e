#!/bin/sh
# bench/plan/run.sh - the largest context the planner fits on a worker
# (default 24 GiB) for the built-in model and a 1B-class shape, at 16-bit
# and 4-bit LoRA and 16-bit full fine-tuning, batch 1 and 4.
#   bench/plan/run.sh [BUILD_DIR] [GiB]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
gib=${2:-24}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -std=c11 -O2 -I"$root/src" "$root/bench/plan/context_fit.c" \
   "$build/libalallo_sched.a" "$build/libalallo_core.a" \
   $(pkg-config --libs jansson libsodium) -lm -o "$out/context_fit"
"$out/context_fit" "$gib"
