#!/usr/bin/env bash
# by-hand.sh - builds one tests/gpu program with nvcc and gcc against a CPU
# build's libraries and runs it on the GPU: how tests/gpu runs until CMake
# builds src/train/cuda/ (the same arguments as tests/gpu/emu/run.sh, which
# runs the same program on the CPU emulator instead).
#
#   tests/gpu/by-hand.sh BUILD_DIR TEST.c KERNELS.cu...
#   e.g. tests/gpu/by-hand.sh build tests/gpu/test_cuda_attn.c src/train/cuda/cuda_attn.cu
#
# Exit status: the test's (77 with a `skip:` line when no GPU is visible).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
test_src=$2
shift 2
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$(mktemp -d /tmp/alallo-gpu-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
objs=()
for k in "$@"; do
  o="$out/$(basename "$k").o"
  "$cuda/bin/nvcc" -arch=sm_90 -std=c++17 -O3 -Xcompiler -Wall,-Wextra,-Werror \
    -I "$root/src" -c "$root/$k" -o "$o"
  objs+=("$o")
done
cflags=(-std=c11 -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE
        -isystem "$cuda/include" -I "$root/src")
gcc "${cflags[@]}" -c "$root/src/train/cuda/cuda_ctx.c" -o "$out/cuda_ctx.o"
gcc "${cflags[@]}" -c "$root/$test_src" -o "$out/test.o"
g++ -o "$out/test" "$out/test.o" "${objs[@]}" "$out/cuda_ctx.o" \
  "$build/libalallo_train.a" "$build/libalallo_core.a" \
  $(pkg-config --libs openblas libpcre2-8 jansson libsodium cmocka) -fopenmp -lm \
  -L"$cuda/lib64" -lcudart -lcublasLt -lcublas -Wl,-rpath,"$cuda/lib64"
"$out/test"
