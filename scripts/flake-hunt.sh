#!/usr/bin/env bash
# scripts/flake-hunt.sh - runs chosen test stages N times, optionally beside
# a synthetic CPU load, and prints each test that failed with how often, so
# that a racy test is found here before it fails a landing (docs/testing.md,
# "Hunting flaky tests").
#
# usage: scripts/flake-hunt.sh [-n RUNS] [-l BUSY] [-c COPIES] [-o DIR] STAGE...
#   -n RUNS    rounds of every stage (default 3)
#   -l BUSY    busy loops running beside the tests (default 0: no load)
#   -c COPIES  for ctest:REGEX, copies of the selection run at once (default 1)
#   -o DIR     where the logs go (default a new /tmp/alallo-flake-XXXXXX)
# STAGE is one of
#   unit              ctest in build/ (make build)
#   asan-unit         ctest in build-asan/ (make asan builds it)
#   gpu-emu           the GPU tests in build-emu/ on the emulator (make gpu-emu)
#   integration       scripts/integration.sh build/alallo (SQLite)
#   integration-pg    the PostgreSQL subset
#   asan-integration  the SQLite pass on build-asan/alallo
#   e2e               the browser tests
#   ctest:REGEX       the unit tests whose name matches REGEX, in build/
#   asan:REGEX        the same in build-asan/
#   it:FILE           one integration file (tests/integration/FILE)
# Nothing is built here: build first, as the stages above say.
# Exit status: 0 when every run of every stage passed, 1 otherwise, 2 on a
# usage error.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

runs=3 busy=0 copies=1 out=
usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts n:l:c:o:h opt; do
  case $opt in
    n) runs=$OPTARG ;;
    l) busy=$OPTARG ;;
    c) copies=$OPTARG ;;
    o) out=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
(($# > 0)) || usage
for v in "$runs" "$busy" "$copies"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "flake-hunt: '$v' is not a whole number" >&2; exit 2; }
done
((runs >= 1 && copies >= 1)) || { echo "flake-hunt: -n and -c take 1 or more" >&2; exit 2; }
[[ -n $out ]] || out=$(mktemp -d /tmp/alallo-flake-XXXXXX)
mkdir -p "$out"

# The load: BUSY shell loops, each spinning on a core, stopped at the end.
load_pids=()
stop_load() { ((${#load_pids[@]} == 0)) || kill "${load_pids[@]}" 2>/dev/null; }
trap stop_load EXIT
trap 'exit 143' INT TERM
for ((i = 0; i < busy; i++)); do
  bash -c 'while :; do :; done' &
  load_pids+=($!)
done

need() { # need PATH MAKE-TARGET: the stage's build must be there
  [[ -e $1 ]] || { echo "flake-hunt: $1 is missing: run 'make $2' first" >&2; exit 2; }
}

# run_stage STAGE LOG: one run of STAGE, its output in LOG; its exit status.
run_stage() {
  local stage=$1 log=$2 jobs
  jobs=$(nproc)
  case $stage in
    unit) need build/CTestTestfile.cmake build
      (cd build && ctest --output-on-failure -j "$jobs") ;;
    asan-unit) need build-asan/CTestTestfile.cmake asan
      (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs") ;;
    gpu-emu) need build-emu/CTestTestfile.cmake gpu-emu
      (cd build-emu && ctest --output-on-failure -L gpu -E test_cuda_torch -j "$jobs") ;;
    integration) need build/alallo build
      scripts/integration.sh build/alallo ;;
    integration-pg) need build/alallo build
      scripts/integration.sh build/alallo postgresql ;;
    asan-integration) need build-asan/alallo asan
      ASAN_OPTIONS=detect_leaks=0 scripts/integration.sh build-asan/alallo ;;
    e2e) need build/alallo build
      ALALLO_BIN=$root/build/alallo ALALLO_ROOT=$root \
        ALALLO_E2E_ARTIFACTS=$root/build/e2e-artifacts \
        node --test --test-concurrency=1 tests/e2e/*.test.mjs ;;
    ctest:* | asan:*)
      local dir=build env=
      [[ $stage == asan:* ]] && dir=build-asan env=ASAN_OPTIONS=detect_leaks=1
      need "$dir/CTestTestfile.cmake" "${dir#build-}"
      local pids=() c rc=0
      for ((c = 0; c < copies; c++)); do
        (cd "$dir" && env $env ctest --output-on-failure -R "${stage#*:}" \
          >"$log.copy$c" 2>&1) &
        pids+=($!)
      done
      for c in "${pids[@]}"; do wait "$c" || rc=1; done
      cat "$log".copy*
      rm -f "$log".copy*
      return $rc ;;
    it:*) need build/alallo build
      ALALLO_BIN=$root/build/alallo ALALLO_ROOT=$root \
        node --test --test-concurrency=1 "tests/integration/${stage#it:}" ;;
    *) echo "flake-hunt: no stage '$stage'" >&2; return 2 ;;
  esac
} >"$2" 2>&1

# failures LOG: the names of the tests that failed in LOG, one a line:
# ctest's "The following tests FAILED" list and node's "not ok" lines
# (TAP) or crosses (spec), without their numbers.
failures() {
  awk '
    /The following tests FAILED:/ { inlist = 1; next }
    inlist && /^[ \t]+[0-9]+ - / { sub(/^[ \t]+[0-9]+ - /, ""); sub(/ \(.*$/, ""); print "ctest " $0; next }
    inlist { inlist = 0 }
    /^[ \t]*not ok [0-9]+ - / { l = $0; sub(/^[ \t]*not ok [0-9]+ - /, "", l); sub(/ # .*$/, "", l); print "node  " l; next }
    /^[ \t]*\xe2\x9c\x96 / { l = $0; sub(/^[ \t]*\xe2\x9c\x96 /, "", l); sub(/ \([0-9.]+m?s\)$/, "", l); print "node  " l }
  ' "$1" | sort -u
}

echo "flake-hunt: $runs run(s) of: $* ; $busy busy loop(s) beside; logs in $out"
total=0 failed=0
: >"$out/failures.txt"
for ((r = 1; r <= runs; r++)); do
  for stage in "$@"; do
    log="$out/$(printf '%s' "$stage" | tr -c 'A-Za-z0-9_.-' '_')-run$r.log"
    t0=$SECONDS
    run_stage "$stage" "$log"
    rc=$?
    ((rc == 2)) && grep -q '^flake-hunt:' "$log" && { cat "$log" >&2; exit 2; }
    total=$((total + 1))
    if ((rc == 0)); then
      printf '%-18s run %d: ok (%d s)\n' "$stage" "$r" $((SECONDS - t0))
    else
      failed=$((failed + 1))
      names=$(failures "$log")
      [[ -n $names ]] || names="(no test named: exit $rc, see the log)"
      printf '%-18s run %d: FAILED (%d s), log %s\n' "$stage" "$r" $((SECONDS - t0)) "$log"
      printf '%s\n' "$names" | sed "s|^|$stage  |" | tee -a "$out/failures.txt" | sed 's/^/    /'
    fi
  done
done
echo "== flake-hunt: $failed of $total stage runs failed =="
if [[ -s $out/failures.txt ]]; then
  echo "count  stage  test"
  sort "$out/failures.txt" | uniq -c | sort -rn
fi
((failed == 0))
