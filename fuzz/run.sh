#!/bin/bash
# fuzz/run.sh [SECONDS] [TARGET...] - builds the libFuzzer targets when
# needed, replays every saved crash input of fuzz/crashes/<target>/ (a
# regression check: a fixed bug must stay fixed), then fuzzes each target
# for SECONDS (default 10) from its seeds in fuzz/corpus/<target>/.
# Prints one line per target with the executions done; exits 1 when any
# target crashed (new crash inputs are kept in build-fuzz/crashes/<target>/),
# 2 when the build failed.
#
# Inputs the fuzzer finds interesting go to build-fuzz/corpus/<target>/
# (not to the committed seeds), so repeated runs grow a local corpus.
# Environment: FUZZ_BUILD (default build-fuzz), FUZZ_JOBS (targets fuzzed
# at once, default 1), FUZZ_ARGS (extra libFuzzer flags).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${FUZZ_BUILD:-build-fuzz}
SECONDS_EACH=${1:-10}
shift $(( $# > 0 ? 1 : 0 ))
ALL="fuzz_router_json fuzz_job_request fuzz_multipart fuzz_dataset fuzz_safetensors fuzz_tokenizer fuzz_gguf fuzz_chat_template"
TARGETS=${*:-$ALL}

if ! [[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || [ "$SECONDS_EACH" -lt 1 ]; then
    echo "usage: fuzz/run.sh [SECONDS] [TARGET...]" >&2
    exit 2
fi
mkdir -p "$BUILD"
if ! FUZZ_BUILD=$BUILD fuzz/build.sh >"$BUILD/build.log" 2>&1; then
    tail -30 "$BUILD/build.log" >&2
    echo "fuzz/run.sh: build failed (full log: $BUILD/build.log)" >&2
    exit 2
fi

# Leaks are bugs too; UBSan reports abort (see fuzz/CMakeLists.txt).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# run_one TARGET: replays saved crashes, then fuzzes; writes a result line
# to $BUILD/results/TARGET and returns non-zero on a crash.
run_one() {
    local t=$1 bin="$BUILD/$1" log="$BUILD/logs/$1.log"
    local seeds="fuzz/corpus/$1" work="$BUILD/corpus/$1" crashes="$BUILD/crashes/$1"
    mkdir -p "$work" "$crashes" "$BUILD/logs" "$BUILD/results"
    if [ ! -x "$bin" ]; then
        echo "$t: not built (its module is missing?)" >"$BUILD/results/$t"
        return 1
    fi
    local saved=()
    if [ -d "fuzz/crashes/$t" ]; then
        while IFS= read -r -d '' f; do saved+=("$f"); done \
            < <(find "fuzz/crashes/$t" -type f ! -name '*.md' -print0 | sort -z)
    fi
    local replay=""
    if [ ${#saved[@]} -gt 0 ]; then
        if ! "$bin" -runs=1 "${saved[@]}" >"$log.replay" 2>&1; then
            replay="CRASH replaying a saved input of fuzz/crashes/$t/ (log: $log.replay); "
        fi
    fi
    local dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" ${FUZZ_ARGS:-} \
        "$work" "$seeds" >"$log" 2>&1
    local rc=$?
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        local art
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        echo "$t: ${replay}CRASH after ${execs:-?} executions: ${art:-see $log} (log: $log)" \
            >"$BUILD/results/$t"
        return 1
    fi
    if [ -n "$replay" ]; then
        echo "$t: ${replay}then ${execs:-?} executions in ${SECONDS_EACH} s without a new crash" \
            >"$BUILD/results/$t"
        return 1
    fi
    echo "$t: ok, ${execs:-?} executions in ${SECONDS_EACH} s" >"$BUILD/results/$t"
    return 0
}

failed=0
jobs_max=${FUZZ_JOBS:-1}
for t in $TARGETS; do
    rm -f "$BUILD/results/$t"
    run_one "$t" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
done
wait
# Scratch files of drivers that crashed (their atexit clean-up never ran):
# DIR/alallo-fuzz-PID-TAG, removed once PID is gone.
for d in /dev/shm/alallo-fuzz-* "${TMPDIR:-/tmp}"/alallo-fuzz-*; do
    [ -e "$d" ] || continue
    pid=${d##*/alallo-fuzz-}
    pid=${pid%%-*}
    [[ "$pid" =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -rf -- "$d"
done
# The verdict comes from the result lines, not from exit statuses.
for t in $TARGETS; do
    if [ -f "$BUILD/results/$t" ]; then
        cat "$BUILD/results/$t"
        grep -q ": ok," "$BUILD/results/$t" || failed=1
    else
        echo "$t: no result"
        failed=1
    fi
done
exit $failed
