#!/usr/bin/env bash
# Installs the Debian packages alallo needs to build, run and test, if any
# are missing. Runs apt-get as root, through sudo otherwise.
# Usage: scripts/deps.sh [build|test]
set -euo pipefail
what=${1:-build}
pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev
      libsqlite3-dev libcurl4-openssl-dev libpcre2-dev libsodium-dev
      libopenblas-dev libcmocka-dev curl libpq-dev)
if [[ $what == test ]]; then
  pkgs+=(nodejs npm python3-torch python3-numpy chromium clang clang-14 libclang-rt-14-dev
        postgresql)
fi
# The throwaway Slurm cluster of the Slurm tests (tests/slurm/slurm-up.sh).
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
sudo=""
(( EUID == 0 )) || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
