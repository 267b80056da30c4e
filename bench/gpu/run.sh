#!/usr/bin/env bash
# run.sh - builds bench/gpu/attn_bench.c by hand (nvcc for the kernels, gcc
# for the host code; no other library of the project or the system, so it
# builds on the GPU machine's image as it is) and runs it: one JSON line
# per shape.
#
#   bench/gpu/run.sh [iterations]
#
# Without a GPU it prints a `skip:` line and exits 77.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
iters=${1:-10}
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$(mktemp -d /tmp/alallo-attn-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$cuda/bin/nvcc" -arch=sm_90 -std=c++17 -O3 -Xcompiler -Wall,-Wextra,-Werror -I "$root/src" \
  -c "$root/src/train/cuda/cuda_attn.cu" -o "$out/cuda_attn.o"
for c in src/train/cuda/cuda_ctx.c bench/gpu/attn_bench.c; do
  gcc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -isystem "$cuda/include" -I "$root/src" \
    -c "$root/$c" -o "$out/$(basename "$c" .c).o"
done
g++ -o "$out/attn_bench" "$out/attn_bench.o" "$out/cuda_attn.o" "$out/cuda_ctx.o" \
  -L"$cuda/lib64" -lcudart -lcublasLt -lcublas \
  -Wl,-rpath,"$cuda/lib64"
"$out/attn_bench" "$iters"
