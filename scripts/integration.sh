#!/usr/bin/env bash
# Runs the integration tests (tests/integration/*.test.mjs) with node's test
# runner against the real binary.
#
# Usage: scripts/integration.sh BIN                    every test, on SQLite
#        scripts/integration.sh BIN postgresql [FILE...] the PostgreSQL pass:
#   a throwaway PostgreSQL (tests/pg/pg-up.sh) is started for the run and
#   stopped after it, and each serve gets a fresh database of it
#   (ALALLO_TEST_STORE=postgresql, tests/integration/service_harness.mjs);
#   the files are FILEs, else the subset below: the service, the scheduler,
#   kill -9 of serve, remote workers and the take-over of a second serve.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export ALALLO_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export ALALLO_ROOT=$root
store=${2:-sqlite}
shopt -s nullglob

# lanes FILE...: runs the files with node's test runner, one file at a time,
# in two lanes side by side. The engine lane (slurm_*, gpu_workers) spends
# most of its time waiting on Slurm's and the service's timeouts; its
# files start `alallo attempt run` processes and look for them across the
# machine, so they run one at a time among themselves, beside the other
# lane. The engine lane's output is printed whole when both lanes are done.
# ALALLO_IT_LANES=1 runs every file in one lane, one at a time.
lanes() {
  local engine=() other=() f
  for f in "$@"; do
    case ${f##*/} in
      slurm_*.test.mjs | gpu_workers.test.mjs) engine+=("$f") ;;
      *) other+=("$f") ;;
    esac
  done
  if [[ ${ALALLO_IT_LANES:-2} == 1 ]] || ((${#engine[@]} == 0 || ${#other[@]} == 0)); then
    node --test --test-concurrency=1 "$@"
    return
  fi
  local log rc=0 erc=0
  log=$(mktemp /tmp/alallo-it-engine-XXXXXX)
  node --test --test-concurrency=1 "${engine[@]}" >"$log" 2>&1 &
  lane_pid=$!
  echo "integration: ${#engine[@]} engine files in a second lane (output at the end)"
  node --test --test-concurrency=1 "${other[@]}" || rc=$?
  wait "$lane_pid" || erc=$?
  lane_pid=
  echo "integration: the engine lane (${engine[*]##*/}):"
  cat "$log"
  rm -f "$log"
  echo "integration: lanes exited $rc (other files) and $erc (engine files)"
  ((rc == 0 && erc == 0))
}
# Stops the engine lane when the script ends early.
lane_pid=
stop_lane() { [[ -z $lane_pid ]] || kill "$lane_pid" 2>/dev/null || true; }

if [[ $store == sqlite ]]; then
  tests=("$root"/tests/integration/*.test.mjs)
  # ALALLO_IT_PLAIN_ONLY=leave: the sanitizer pass, which leaves out the
  # files tests/integration/plain-pass-only.txt names (and says so).
  if [[ ${ALALLO_IT_PLAIN_ONLY:-run} == leave ]]; then
    mapfile -t plain < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' \
      "$root"/tests/integration/plain-pass-only.txt | awk '{print $1}')
    kept=()
    for f in "${tests[@]}"; do
      [[ " ${plain[*]} " == *" ${f##*/} "* ]] || kept+=("$f")
    done
    for f in "${plain[@]}"; do
      [[ -f $root/tests/integration/$f ]] || {
        echo "integration: plain-pass-only.txt names $f, which is not a test file" >&2
        exit 2
      }
    done
    echo "integration: ${#plain[@]} files left to the plain pass (plain-pass-only.txt): ${plain[*]}"
    tests=("${kept[@]}")
  elif [[ ${ALALLO_IT_PLAIN_ONLY:-run} != run ]]; then
    echo "integration: ALALLO_IT_PLAIN_ONLY is run or leave, not '$ALALLO_IT_PLAIN_ONLY'" >&2
    exit 2
  fi
  if ((${#tests[@]} == 0)); then echo "integration: no tests"; exit 0; fi
  trap stop_lane EXIT
  trap 'exit 143' INT TERM
  lanes "${tests[@]}"
  exit
fi
if [[ $store != postgresql ]]; then
  echo "integration: the store is sqlite or postgresql, not '$store'" >&2
  exit 2
fi
tests=("${@:3}")
if ((${#tests[@]} == 0)); then
  tests=("$root"/tests/integration/service_*.test.mjs "$root"/tests/integration/sched_*.test.mjs
         "$root"/tests/integration/fault_serve_kill9.test.mjs
         "$root"/tests/integration/worker_remote.test.mjs
         "$root"/tests/integration/ha_takeover.test.mjs
         "$root"/tests/integration/webhooks.test.mjs
         "$root"/tests/integration/wandb.test.mjs)
fi
# A short path: the server's socket lives in it (107 bytes at most).
pg=$(mktemp -d /tmp/alallo-pg-XXXXXX)
trap 'stop_lane; "$root"/tests/pg/pg-down.sh "$pg"' EXIT
trap 'exit 143' INT TERM # so that the EXIT trap stops the server on a signal too
"$root"/tests/pg/pg-up.sh "$pg" "$ALALLO_BIN" >/dev/null
echo "integration: PostgreSQL in $pg (${#tests[@]} files)"
ALALLO_TEST_STORE=postgresql ALALLO_PG_DIR=$pg lanes "${tests[@]}"
