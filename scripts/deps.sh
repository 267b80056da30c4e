#!/usr/bin/env bash
# Installs the Debian packages alallo needs to build, run and test, if any
# are missing. Runs apt-get as root, through sudo otherwise.
# Usage: scripts/deps.sh [build|test|cuda]
#
# `cuda` is opt-in (neither make nor CI runs it): Debian's CUDA compiler,
# nvidia-cuda-toolkit (CUDA 11.8), for compile-checking the GPU backend
# (src/train/cuda/) on a machine without a GPU. It lives in the archive's
# non-free component, which a Debian install leaves off: this adds one apt
# source line for it (contrib and non-free of the same suite), in its own
# file, written whole each time so that a second run changes nothing. Then
# `cmake -S . -B build` finds /usr/bin/nvcc and builds the backend
# (docs/trainer.md, "GPU"). A GPU machine brings its own, newer CUDA.
set -euo pipefail
what=${1:-build}
sudo=""
(( EUID == 0 )) || sudo=sudo
# bubblewrap and python3: the sandbox of python graders (docs/rft.md),
# which core/test_sandbox and rft_python.test.mjs need to work here.
pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev
      libsqlite3-dev libcurl4-openssl-dev libpcre2-dev libsodium-dev
      libopenblas-dev libdnnl-dev libcmocka-dev curl libpq-dev bubblewrap python3)
if [[ $what == cuda ]]; then
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:?not a Debian release}")
  list=/etc/apt/sources.list.d/alallo-non-free.list
  line="deb http://deb.debian.org/debian $suite contrib non-free"
  if [[ $(cat "$list" 2>/dev/null) != "$line" ]]; then
    echo "deps: enabling Debian's non-free component ($list)"
    echo "$line" | $sudo tee "$list" >/dev/null
    $sudo apt-get update -qq
  fi
  pkgs=(nvidia-cuda-toolkit)
fi
if [[ $what == test ]]; then
  pkgs+=(nodejs npm python3-torch python3-numpy chromium clang clang-14 libclang-rt-14-dev
        postgresql)
fi
# The throwaway Slurm cluster of the Slurm tests (tests/slurm/slurm-up.sh);
# iproute2 (ss) also for inference_engine.test.mjs, which reads a socket's queue.
[[ $what == test ]] && pkgs+=(slurmctld slurmd slurm-client munge iproute2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# node and npm may come from outside Debian's packages on some machines.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]}")
fi
((${#missing[@]} == 0)) && exit 0
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
