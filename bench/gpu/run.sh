#!/usr/bin/env bash
# run.sh - builds bench/gpu/attn_bench.c by hand (nvcc for the kernels of
# cuda_attn.cu and the tensor-core ones of cuda_attn_tc.cu it dispatches
# to, gcc for the host code; no other library of the project or the system,
# so it builds on the GPU machine's image as it is) and runs it: one JSON
# line per shape.
#
#   bench/gpu/run.sh [iterations]
#
# Without a GPU it prints a `skip:` line and exits 77 (so run here, it is
# the compile and link check). No -Werror: the GPU machine's compilers may
# be newer than Debian's, and a new warning there must not stop the bench
# (the CI build here keeps warnings as errors).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
iters=${1:-10}
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$(mktemp -d /tmp/alallo-attn-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
for k in cuda_attn cuda_attn_tc; do
  "$cuda/bin/nvcc" -arch=sm_90 -std=c++17 -O3 -Xcompiler -Wall,-Wextra -I "$root/src" \
    -c "$root/src/train/cuda/$k.cu" -o "$out/$k.o"
done
for c in src/train/cuda/cuda_ctx.c bench/gpu/attn_bench.c; do
  gcc -std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -isystem "$cuda/include" -I "$root/src" \
    -c "$root/$c" -o "$out/$(basename "$c" .c).o"
done
g++ -o "$out/attn_bench" "$out/attn_bench.o" "$out/cuda_attn.o" "$out/cuda_attn_tc.o" \
  "$out/cuda_ctx.o" \
  -L"$cuda/lib64" -lcudart -lcublasLt -lcublas \
  -Wl,-rpath,"$cuda/lib64"
"$out/attn_bench" "$iters"
