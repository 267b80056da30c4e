#!/usr/bin/env bash
# Runs the integration tests (tests/integration/*.test.mjs) with node's test
# runner against the real binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export ALALLO_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export ALALLO_ROOT=$root
shopt -s nullglob
tests=("$root"/tests/integration/*.test.mjs)
if ((${#tests[@]} == 0)); then echo "integration: no tests"; exit 0; fi
exec node --test --test-concurrency=1 "${tests[@]}"
