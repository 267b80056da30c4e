#!/usr/bin/env bash
# scripts/gpu-env.sh - what a GPU machine is, written before anything is
# built on it, so that every figure a GPU run gives can be read against
# the machine that gave it: the GPU (nvidia-smi's summary and its
# clocks, power and memory), the driver, nvcc, the C compiler and CMake,
# the CUDA libraries the backend can use (cuBLAS, cuBLASLt, cuDNN: found
# or not, their versions from the headers), the CPU, the OS, and PyTorch's
# own view (its version, its CUDA and cuDNN) where python3 has it.
#
# Usage: scripts/gpu-env.sh [NVCC]     (prints to stdout; each probe under
#                                       `timeout`, a missing tool is a line
#                                       saying so, the exit status is 0)
# scripts/gpu-check.sh writes it to env.txt first thing.
set -uo pipefail
nvcc=${1:-}
cuda=${CUDA_HOME:-/usr/local/cuda}
[[ -n $nvcc ]] && cuda=$(cd "$(dirname "$nvcc")/.." 2>/dev/null && pwd || echo "$cuda")

# probe TITLE CMD...: CMD's output under a heading, or why there is none.
probe() {
  local title=$1
  shift
  echo "== $title: $*"
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "(not found: $1)"
    return 0
  fi
  timeout --kill-after=5 30 "$@" 2>&1 || echo "(exit $?)"
}

echo "gpu-env: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null || echo unknown)"
probe "GPU" nvidia-smi
probe "GPU details" nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,compute_cap,mig.mode.current --format=csv
echo "== driver: /proc/driver/nvidia/version"
cat /proc/driver/nvidia/version 2>/dev/null || echo "(none: no NVIDIA kernel driver loaded)"
if [[ -n $nvcc ]]; then probe "nvcc" "$nvcc" --version; else probe "nvcc" nvcc --version; fi
probe "C compiler" gcc --version
probe "C++ compiler" g++ --version
probe "CMake" cmake --version

# lib NAME: where the dynamic linker or the toolkit has libNAME.so*.
lib() {
  local found
  found=$( { ldconfig -p 2>/dev/null | awk -v n="lib$1.so" 'index($1, n) == 1 {print $NF}'
             ls "$cuda"/lib64/lib"$1".so* "$cuda"/targets/*/lib/lib"$1".so* 2>/dev/null; } |
           sort -u | tr '\n' ' ')
  echo "lib$1: ${found:-not found}"
}
# header_version FILE MACRO...: the macros' values in a toolkit header.
header_version() {
  local f=$1 v=""
  shift
  for d in "$cuda/include" /usr/include /usr/include/x86_64-linux-gnu; do
    [[ -f $d/$f ]] || continue
    for m in "$@"; do
      v+="$(sed -n "s/^#define $m[[:space:]]\+\([0-9]*\).*/\1/p" "$d/$f" | head -1)."
    done
    echo "$f ($d): ${v%.}"
    return 0
  done
  echo "$f: not found"
}
echo "== CUDA libraries (toolkit at $cuda)"
for l in cudart cublas cublasLt cudnn; do lib "$l"; done
header_version cublas_api.h CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH
header_version cudnn_version.h CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL

echo "== machine"
echo "CPUs: $(nproc 2>/dev/null); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null)"
grep -m1 MemTotal /proc/meminfo 2>/dev/null
uname -srm 2>/dev/null
grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
ldd --version 2>/dev/null | head -1
probe "PyTorch" python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))'
exit 0
