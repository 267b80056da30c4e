#!/usr/bin/env bash
# ops_run.sh - builds bench/gpu/ops_bench.c by hand (nvcc for the kernels,
# gcc for the host code and the four CPU files the kernels call into:
# nf4.c for the levels, optim.c and kern.c for AdamW's factors, bigmem.c
# for optim.c's moments; no other
# library of the project or the system, so it builds on the GPU machine's
# image as it is) and runs it: one JSON line per kernel of cuda_ops.cu.
#
#   bench/gpu/ops_run.sh [iterations]
#
# Without a GPU it prints a `skip:` line and exits 77 (so run here, it is
# the compile and link check). No -Werror: the GPU machine's compilers may
# be newer than Debian's, and a new warning there must not stop the bench
# (the CI build here keeps warnings as errors).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
iters=${1:-10}
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$(mktemp -d /tmp/alallo-ops-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$cuda/bin/nvcc" -arch=sm_90 -std=c++17 -O3 -Xcompiler -Wall,-Wextra -I "$root/src" \
  -c "$root/src/train/cuda/cuda_ops.cu" -o "$out/cuda_ops.o"
for c in src/train/cuda/cuda_ctx.c src/train/kernels/nf4.c src/train/model/optim.c src/train/kernels/kern.c \
         src/train/kernels/bigmem.c src/train/cuda/cuda_gemm.c src/train/cuda/cuda_gemm_args.c \
         bench/gpu/ops_bench.c; do
  gcc -std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -fopenmp -isystem "$cuda/include" \
    -I "$root/src" -c "$root/$c" -o "$out/$(basename "$c" .c).o"
done
g++ -o "$out/ops_bench" "$out/ops_bench.o" "$out/cuda_ops.o" "$out/cuda_ctx.o" "$out/nf4.o" \
  "$out/optim.o" "$out/kern.o" "$out/bigmem.o" "$out/cuda_gemm.o" "$out/cuda_gemm_args.o" -fopenmp -lm -L"$cuda/lib64" -lcudart -lcublasLt -lcublas \
  -Wl,-rpath,"$cuda/lib64"
"$out/ops_bench" "$iters"
