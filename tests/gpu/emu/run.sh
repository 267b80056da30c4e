#!/usr/bin/env bash
# run.sh - builds one tests/gpu program against the CPU emulator
# (tests/gpu/emu/cuda_emu.cc) instead of CUDA, and runs it: the kernels'
# source compiled by g++, so their indexing, masking and barriers are
# checked on a machine with no GPU.
#
#   tests/gpu/emu/run.sh BUILD_DIR TEST.c SOURCES... [-- CFLAGS...]
#   e.g. tests/gpu/emu/run.sh build tests/gpu/test_cuda_attn.c src/train/cuda/cuda_attn.cu
#
# SOURCES: kernels (.cu) and emulator parts (.cc, such as
# tests/gpu/emu/cuda_gemm_emu.cc, cuBLASLt's stand-in) compile as C++, the
# backend's host code (.c: cuda_model.c, cuda_optim.c, cuda_train.c; never
# cuda_ctx.c or cuda_gemm.c, which the emulator replaces) as C.
#
# BUILD_DIR holds a CPU build (libalallo_train.a, libalallo_core.a).
# EMU_SAN=1 builds the kernels and the emulator with AddressSanitizer and
# UBSan too (slow: minutes). EMU_RACE=1 builds the kernels (.cu) for the
# shared-memory race detector (tests/gpu/emu/emu_race.h: GCC's
# -fsanitize=thread calls, answered by the emulator). ALALLO_EMU_SHUFFLE=SEED
# in the environment runs blocks and threads in an order shuffled from SEED
# (cuda_emu.cc). Exit status: the test's.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=$(cd "$1" && pwd)
test_src=$2
shift 2
kernels=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do kernels+=("$1"); shift; done
[ $# -gt 0 ] && shift
extra=("$@")
sanitizers=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
san=() link_san=() race=()
[ "${EMU_RACE:-0}" = 1 ] && race=(-fsanitize=thread -fno-tree-loop-distribute-patterns)
if [ "${EMU_SAN:-0}" = 1 ]; then
  san=("${sanitizers[@]}") link_san=("${sanitizers[@]}")
elif grep -q '^ALALLO_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  # a sanitized build's libraries need the runtimes at link time; the
  # kernels stay uninstrumented (several times faster under the emulator),
  # and its guard zones still catch their overruns
  link_san=("${sanitizers[@]}")
fi
out=$(mktemp -d /tmp/alallo-emu.XXXXXX)
trap 'rm -rf "$out"' EXIT
# -ffp-contract=off: the host rounds each product; -Wno-unknown-pragmas: nvcc's
# #pragma unroll
cxx=(g++ -std=c++17 -O2 -g -ffp-contract=off -Wall -Wextra -Werror -Wno-unused-function -Wno-unknown-pragmas
     -I "$root/tests/gpu/emu" -I "$root/src" "${san[@]}" "${extra[@]}")
objs=()
cc=(gcc -std=c11 -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow
    -Wstrict-prototypes -Wmissing-prototypes -Wvla -D_GNU_SOURCE -I "$root/src")
for k in "${kernels[@]}"; do
  o="$out/$(basename "$k").o"
  case $k in /*) src=$k ;; *) src=$root/$k ;; esac
  case $k in
    *.c) "${cc[@]}" "${link_san[@]}" -c "$src" -o "$o" ;; # host code (cuda_model.c ...)
    *.cu) "${cxx[@]}" "${race[@]}" -x c++ -c "$src" -o "$o" ;; # kernels
    *) "${cxx[@]}" -x c++ -c "$src" -o "$o" ;;                 # emulator parts
  esac
  objs+=("$o")
done
"${cxx[@]}" -c "$root/tests/gpu/emu/cuda_emu.cc" -o "$out/cuda_emu.o"
"${cxx[@]}" -c "$root/tests/gpu/emu/emu_race.cc" -o "$out/emu_race.o"
"${cc[@]}" "${link_san[@]}" -c "$root/$test_src" -o "$out/test.o"
g++ "${link_san[@]}" -o "$out/test" "$out/test.o" "${objs[@]}" "$out/cuda_emu.o" "$out/emu_race.o" \
  "$build/libalallo_train.a" "$build/libalallo_core.a" \
  $(pkg-config --libs openblas libpcre2-8 jansson libsodium cmocka) -fopenmp -lm
echo "emulated: $test_src on ${kernels[*]}" \
  "(order: ${ALALLO_EMU_SHUFFLE:+shuffled, seed }${ALALLO_EMU_SHUFFLE:-fixed}${race:+; race detector on})"
"$out/test"
