#!/bin/sh
# bench/serve/rowdot_bw.sh - GB/s of weights one decode row's products
# read (bench/serve/rowdot_bw.c): the engine's kernel (rowdot_times_wt at
# one row) and candidate kernels with the same order of operations, in
# alternating rounds, on the shapes of a 1B-class model's products.
#
#   bench/serve/rowdot_bw.sh          (ROUNDS, default 11; THREADS, default every CPU)
#
# Each line: a kernel, its median GB/s and its speed against the engine's
# kernel in the same run. A candidate whose outputs differ from the
# engine's by one bit stops the run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc=${CC:-gcc}
"$cc" -std=c11 -O2 -ffp-contract=off -fopenmp -Wno-psabi -I "$root/src" \
    "$here/rowdot_bw.c" "$root/src/train/kernels/rowdot.c" -lm -o "$out/rowdot_bw"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
rounds=${ROUNDS:-11}
# gate/up (8,192 x 2,048), down (2,048 x 8,192), q/o (2,048 x 2,048), the head (128,256 x 2,048)
"$out/rowdot_bw" 8192 2048 8 "$rounds"
"$out/rowdot_bw" 2048 8192 8 "$rounds"
"$out/rowdot_bw" 2048 2048 32 "$rounds"
"$out/rowdot_bw" 128256 2048 1 "$rounds"
