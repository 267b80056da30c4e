#!/bin/sh
# bench/serve/prefill_flops.sh - GFLOP/s of a prompt's rows through one
# product (bench/serve/prefill_flops.c): the engine's fixed-order kernel
# (rowdot_times_wt) against the trainer's product (gemm, on the CPU path
# generation runs), in alternating rounds, on the shapes of a 1B-class
# model's products, at ROWS rows (default 21,64,168: one prompt of the
# serving bench, a long one, eight together).
#
#   bench/serve/prefill_flops.sh      (ROUNDS, default 5; THREADS, default
#                                      every CPU; BUILD, default build/)
#
# Each line: a shape and row count, both kernels' median GFLOP/s and their
# ratio. A row whose outputs differ by one bit from the same row alone
# stops the run. Needs a built tree (make build).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc=${CC:-gcc}
"$cc" -std=c11 -O2 -fopenmp -Wno-psabi -I "$root/src" "$here/prefill_flops.c" \
    "$build/libalallo_train.a" "$build/libalallo_core.a" -lopenblas -lm -ldl -lpthread \
    -o "$out/prefill_flops"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
rounds=${ROUNDS:-5}
for n in $(echo "${ROWS:-21,64,168}" | tr , ' '); do
    # gate/up (8,192 x 2,048), down (2,048 x 8,192), q/o (2,048 x 2,048)
    "$out/prefill_flops" 8192 2048 8 "$n" "$rounds"
    "$out/prefill_flops" 2048 8192 8 "$n" "$rounds"
    "$out/prefill_flops" 2048 2048 32 "$n" "$rounds"
done
