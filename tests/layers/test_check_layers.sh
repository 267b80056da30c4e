#!/bin/bash
# tests/layers/test_check_layers.sh - shows that scripts/check-layers.sh
# catches an #include across a forbidden arrow, names the file, the line,
# the header and the rule, lets allowed includes through, and passes on the
# real src/. Prints one "ok"/"FAIL" line per check and a summary; exits 1
# when any check failed. Run by ctest (layers/check_layers) and so by
# `make unit` and `make test`.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK="$ROOT/scripts/check-layers.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-layers-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

pass() { echo "ok   - $1"; passed=$((passed + 1)); }
fail() {
    echo "FAIL - $1"
    [ -n "${2:-}" ] && sed 's/^/       | /' <<<"$2"
    failed=$((failed + 1))
}

# expect NAME WANT_RC OUTPUT RC [TEXT...]: the exit status and each TEXT
# (a fixed string) in the output.
expect() {
    local name=$1 want=$2 out=$3 rc=$4 t
    shift 4
    if [ "$rc" -ne "$want" ]; then
        fail "$name: exit status $rc, expected $want" "$out"
        return
    fi
    for t in "$@"; do
        if ! grep -qF -- "$t" <<<"$out"; then
            fail "$name: the output lacks \"$t\"" "$out"
            return
        fi
    done
    pass "$name"
}

# A small tree with one file per layer and only allowed includes.
T="$TMP/src"
for l in app api control sched store train cli worker core; do mkdir -p "$T/$l"; done
printf '#include "core/log.h"\n' >"$T/core/clock.h"
printf '#include <stdio.h>\n#include "core/clock.h"\n#include "clock.h"\n' >"$T/core/log.h"
printf '#include "core/log.h"\n' >"$T/store/store.h"
printf '#include "sched/planner.h"\n#include "core/log.h"\n' >"$T/sched/sim.c"
printf '#include "core/log.h"\n' >"$T/sched/planner.h"
printf '#include "sched/planner.h"\n#include "store/store.h"\n#include "core/clock.h"\n' >"$T/control/lifecycle.h"
printf '#include "control/lifecycle.h"\n#include "store/store.h"\n#include "sched/planner.h"\n' >"$T/api/router.c"
printf '#include "core/log.h"\n' >"$T/train/model.c"
printf '#include "core/log.h"\n' >"$T/cli/cli.c"
printf '#include "core/log.h"\n' >"$T/worker/worker.c"
printf '#include "api/router.h"\n#include "control/lifecycle.h"\n#include "worker/worker.h"\n#include "train/model.h"\n#include "sched/sim.h"\n#include "cli/cli.h"\n#include "store/store.h"\n#include "core/log.h"\n' >"$T/app/main.c"

out=$("$CHECK" "$T" 2>&1)
expect "a tree whose includes all follow the arrows passes" 0 "$out" $? \
    "check-layers: ok: 11 files of $T/"

# The planted violations: sched reaching up into control, core into store.
printf '/* planted */\n#include "sched/planner.h"\n#include "control/lifecycle.h"\n' >"$T/sched/planted.c"
printf '#include "store/store.h"\n' >"$T/core/planted.h"
out=$("$CHECK" "$T" 2>&1)
rc=$?
expect "sched including control/lifecycle.h fails, naming the file, line and rule" 1 "$out" $rc \
    "$T/sched/planted.c:3: includes control/lifecycle.h, but sched may include only core (docs/architecture.md)"
expect "core including store/store.h fails, naming the file, line and rule" 1 "$out" $rc \
    "$T/core/planted.h:1: includes store/store.h, but core may include nothing outside core (docs/architecture.md)"
expect "the allowed include on the line before is not reported" 1 "$out" $rc "check-layers: FAIL: 2 include(s)"
if grep -q 'planted.c:2' <<<"$out"; then fail "sched/planted.c:2 (sched/planner.h) reported" "$out"; fi
rm "$T/sched/planted.c" "$T/core/planted.h"

# An arrow the wrong way between two upper layers; a relative path; a
# folder that is no layer; a file outside every folder.
printf '#include "api/router.h"\n' >"$T/control/back.c"
printf '#include "../store/store.h"\n' >"$T/sched/rel.c"
mkdir -p "$T/misc" && printf 'int x;\n' >"$T/misc/x.c"
printf 'int y;\n' >"$T/loose.c"
out=$("$CHECK" "$T" 2>&1)
rc=$?
expect "control including api/router.h fails" 1 "$out" $rc \
    "$T/control/back.c:1: includes api/router.h, but control may include only sched, store, exec and core"
expect "an include by ../ fails" 1 "$out" $rc "$T/sched/rel.c:1: includes ../store/store.h"
expect "a folder outside the table fails" 1 "$out" $rc "$T/misc/x.c: folder misc is not a layer"
expect "a file directly in src/ fails" 1 "$out" $rc "$T/loose.c: is directly in"
rm -r "$T/control/back.c" "$T/sched/rel.c" "$T/misc" "$T/loose.c"

# The real tree, copied, with the same planted violation.
cp -r "$ROOT/src" "$TMP/real"
printf '#include "control/lifecycle.h"\n' >>"$TMP/real/sched/sim.c"
line=$(wc -l <"$TMP/real/sched/sim.c")
out=$("$CHECK" "$TMP/real" 2>&1)
expect "a copy of src/ with sched/sim.c including control/lifecycle.h fails" 1 "$out" $? \
    "$TMP/real/sched/sim.c:$line: includes control/lifecycle.h, but sched may include only core"

# And the real src/ itself, as `make layers` runs it.
out=$("$CHECK" 2>&1)
expect "the real src/ follows the arrows (scripts/check-layers.sh)" 0 "$out" $? "check-layers: ok"

echo "test_check_layers: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && echo "test_check_layers: PASS" || echo "test_check_layers: FAIL"
[ "$failed" -eq 0 ]
