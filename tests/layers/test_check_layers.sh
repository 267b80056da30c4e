#!/bin/bash
# tests/layers/test_check_layers.sh - shows that scripts/check-layers.sh
# catches an #include across a forbidden arrow (quoted or in angle
# brackets, in .c, .h, .cu and .cuh files, between layers and between the
# rooms of train), names the file, the line, the header and the rule, lets
# allowed includes through, fails when docs/architecture.md's table of
# arrows differs from scripts/layers.txt, fails on a store write called
# from api, and passes on the real src/. Prints one "ok"/"FAIL" line per check and a summary; exits 1
# when any check failed. Run by ctest (layers/check_layers) and so by
# `make unit` and `make test`.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK="$ROOT/scripts/check-layers.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-layers-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# pass, fail and expect
. "$ROOT/tests/layers/expect.sh"

# A small tree with one file per layer (and per room of train) and only
# allowed includes.
T="$TMP/src"
for l in app api control sched store cli worker core; do mkdir -p "$T/$l"; done
for r in kernels tokenizer model data formats cuda run cmds; do mkdir -p "$T/train/$r"; done
printf '#include "core/log.h"\n' >"$T/core/clock.h"
printf '#include <stdio.h>\n#include <sys/types.h>\n#include "core/clock.h"\n#include "clock.h"\n' >"$T/core/log.h"
printf '#include "core/log.h"\n' >"$T/store/store.h"
printf '#include "sched/planner.h"\n#include <core/log.h>\n' >"$T/sched/sim.c"
printf '#include "core/log.h"\n' >"$T/sched/planner.h"
printf '#include "sched/planner.h"\n#include "store/store.h"\n#include "core/clock.h"\n' >"$T/control/lifecycle.h"
printf '#include "control/lifecycle.h"\n#include "store/store.h"\n#include "sched/planner.h"\n' >"$T/api/router.c"
printf '#include "core/log.h"\n' >"$T/train/kernels/gemm.h"
printf '#include "train/kernels/gemm.h"\n#include "core/log.h"\n' >"$T/train/model/model.h"
printf '#include "train/kernels/gemm.h"\n#include "train/model/model.h"\n' >"$T/train/cuda/ops.cu"
printf '#include "train/cuda/ops.cuh"\n' >"$T/train/cuda/launch.cuh"
printf '#include "train/model/model.h"\n#include "train/cuda/launch.cuh"\n' >"$T/train/run/trainer.h"
printf '#include "train/run/trainer.h"\n#include <train/model/model.h>\n' >"$T/train/cmds/cmds.h"
printf '#include "core/log.h"\n' >"$T/cli/cli.c"
printf '#include "core/log.h"\n' >"$T/worker/worker.c"
printf '#include "api/router.h"\n#include "control/lifecycle.h"\n#include "worker/worker.h"\n#include "train/cmds/cmds.h"\n#include "train/run/trainer.h"\n#include "sched/sim.h"\n#include "cli/cli.h"\n#include "store/store.h"\n#include "core/log.h"\n' >"$T/app/main.c"

out=$("$CHECK" "$T" 2>&1)
expect "a tree whose includes all follow the arrows passes" 0 "$out" $? \
    "check-layers: ok: 16 files of $T/"

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
expect "a folder outside the table fails" 1 "$out" $rc "$T/misc/x.c: names misc, which is no layer of scripts/layers.txt"
expect "a file directly in src/ fails" 1 "$out" $rc "$T/loose.c: is directly in"
rm -r "$T/control/back.c" "$T/sched/rel.c" "$T/misc" "$T/loose.c"

# Angle brackets reach src/ too (it is on the include path): sched
# including <control/lifecycle.h> fails, <stdio.h> does not.
printf '#include <stdio.h>\n#include <control/lifecycle.h>\n' >"$T/sched/angle.c"
out=$("$CHECK" "$T" 2>&1)
rc=$?
expect "sched including <control/lifecycle.h> in angle brackets fails" 1 "$out" $rc \
    "$T/sched/angle.c:2: includes <control/lifecycle.h>, but sched may include only core" \
    "check-layers: FAIL: 1 include(s)"
rm "$T/sched/angle.c"

# The GPU backend's .cu and .cuh files are read: a kernel reaching the
# trainer loop (run) or a layer above fails.
printf '#include "train/model/model.h"\n#include "train/run/trainer.h"\n' >"$T/train/cuda/planted.cu"
printf '#include "control/lifecycle.h"\n' >"$T/train/cuda/planted.cuh"
out=$("$CHECK" "$T" 2>&1)
rc=$?
expect "a .cu file including train/run/trainer.h fails" 1 "$out" $rc \
    "$T/train/cuda/planted.cu:2: includes train/run/trainer.h, but train/cuda may include only train/model, train/kernels and core"
expect "a .cuh file including control/lifecycle.h fails" 1 "$out" $rc \
    "$T/train/cuda/planted.cuh:1: includes control/lifecycle.h, but train/cuda may include only"
rm "$T/train/cuda/planted.cu" "$T/train/cuda/planted.cuh"

# The rooms of train have arrows of their own: the kernels know no model;
# from outside train only run/ and cmds/ are reached; every file of train
# is in a room the table names; a header is named by its room.
printf '#include "core/log.h"\n#include "train/model/model.h"\n' >"$T/train/kernels/planted.c"
printf '#include "train/model/model.h"\n' >"$T/app/planted.c"
printf '#include "core/log.h"\n' >"$T/train/loose.c"
mkdir -p "$T/train/misc" && printf 'int z;\n' >"$T/train/misc/z.c"
printf '#include "train/model.h"\n' >"$T/train/run/flat.c"
out=$("$CHECK" "$T" 2>&1)
rc=$?
expect "a kernel including the model fails" 1 "$out" $rc \
    "$T/train/kernels/planted.c:2: includes train/model/model.h, but train/kernels may include only core"
expect "app including a room of train other than run/ and cmds/ fails" 1 "$out" $rc \
    "$T/app/planted.c:1: includes train/model/model.h, but app may include only api, control, worker, train/run, train/cmds"
expect "a file directly in train/ fails" 1 "$out" $rc \
    "$T/train/loose.c: is directly in train/, whose files each belong to one of its rooms"
expect "a room outside the table fails" 1 "$out" $rc \
    "$T/train/misc/z.c: names train/misc, which is no room of train"
expect "a header of train named without its room fails" 1 "$out" $rc \
    "$T/train/run/flat.c:1: includes train/model.h, which is directly in train/"
rm -r "$T/train/kernels/planted.c" "$T/app/planted.c" "$T/train/loose.c" "$T/train/misc" "$T/train/run/flat.c"

# api reads the store but writes it only through control: a call from api
# to a function store.h declares with a writing name fails, naming the
# file, line and function; a read (store_*_get) and control's own writes
# pass; a mention without a call does not count.
cp "$T/store/store.h" "$TMP/store.h.orig"
printf 'int store_job_get(int);\nint store_account_setting_put(int);\nint store_webhook_insert(int);\nint store_writes_event(int);\n' >>"$T/store/store.h"
printf '#include "store/store.h"\nint f(void) { return store_job_get(1); }\n/* not store_webhook_insert here */\nint g(void) { return store_account_setting_put(2); }\n' >"$T/api/planted.c"
printf '#include "store/store.h"\nint h(void) { return store_writes_event (3); }\n' >"$T/api/planted.h"
printf '#include "store/store.h"\nint k(void) { return store_webhook_insert(4); }\n' >"$T/control/writes.c"
out=$("$CHECK" "$T" 2>&1)
rc=$?
expect "api calling store_account_setting_put fails, naming the file, line and function" 1 "$out" $rc \
    "$T/api/planted.c:4: calls store_account_setting_put, a store write; api changes the store only through control (docs/architecture.md)" \
    "$T/api/planted.h:2: calls store_writes_event, a store write" \
    "check-layers: FAIL: 0 include(s) across a forbidden arrow in 19 files of $T/ (docs/architecture.md); 2 store write(s) from api"
if grep -q 'planted.c:2\|planted.c:3\|control/writes.c' <<<"$out"; then fail "a store read, a comment or control's write reported" "$out"; fi
rm "$T/api/planted.c" "$T/api/planted.h" "$T/control/writes.c"
cp "$TMP/store.h.orig" "$T/store/store.h"

# docs/architecture.md's table of arrows is written from scripts/layers.txt:
# a copy with one arrow more fails, naming the doc; the table printed by
# --doc-table passes.
sed 's/^| `train\/kernels` | `core` |/| `train\/kernels` | `train\/model`, `core` |/' \
    "$ROOT/docs/architecture.md" >"$TMP/architecture.md"
if cmp -s "$ROOT/docs/architecture.md" "$TMP/architecture.md"; then
    fail "the planted change to the docs' table did not apply"
fi
out=$(LAYERS_DOC="$TMP/architecture.md" "$CHECK" "$T" 2>&1)
expect "a docs' table that differs from scripts/layers.txt fails" 1 "$out" $? \
    "$TMP/architecture.md: its table of arrows" "docs' table differs from scripts/layers.txt"
out=$("$CHECK" --doc-table 2>&1)
expect "--doc-table writes the table docs/architecture.md shows" 0 "$out" $? \
    '| `train/kernels` | `core` |' '| `app` | `api`, `control`, `worker`, `train/run`, `train/cmds`,'
if ! grep -qxF -- "$(sed -n 3p <<<"$out")" "$ROOT/docs/architecture.md"; then
    fail "docs/architecture.md lacks the table's first row" "$out"
fi

# A table that names an arrow to no layer is refused.
printf 'core:\nsched: core nothere\n' >"$TMP/layers.txt"
out=$(LAYERS_TABLE="$TMP/layers.txt" "$CHECK" "$T" 2>&1)
expect "a table with an arrow to no layer is a usage error" 2 "$out" $? \
    "sched may include nothere, which is no layer or room of the table"

# The real tree, copied, with the same planted violation.
cp -r "$ROOT/src" "$TMP/real"
printf '#include "control/lifecycle.h"\n' >>"$TMP/real/sched/sim.c"
line=$(wc -l <"$TMP/real/sched/sim.c")
out=$("$CHECK" "$TMP/real" 2>&1)
expect "a copy of src/ with sched/sim.c including control/lifecycle.h fails" 1 "$out" $? \
    "$TMP/real/sched/sim.c:$line: includes control/lifecycle.h, but sched may include only core"
printf '#include "train/model/model.h"\n' >>"$TMP/real/train/kernels/gemm.c"
kline=$(wc -l <"$TMP/real/train/kernels/gemm.c")
printf '#include <train/run/trainer.h>\n' >>"$TMP/real/train/cuda/cuda_ops.cu"
cline=$(wc -l <"$TMP/real/train/cuda/cuda_ops.cu")
out=$("$CHECK" "$TMP/real" 2>&1)
rc=$?
expect "a copy of src/ with train/kernels/gemm.c including the model fails" 1 "$out" $rc \
    "$TMP/real/train/kernels/gemm.c:$kline: includes train/model/model.h, but train/kernels may include only core"
expect "a copy of src/ with cuda_ops.cu including <train/run/trainer.h> fails" 1 "$out" $rc \
    "$TMP/real/train/cuda/cuda_ops.cu:$cline: includes <train/run/trainer.h>, but train/cuda may include only"

printf 'void planted(struct control *c) { store_account_setting_put(c->store, "a", "k", "v"); }\n' >>"$TMP/real/api/res_integrations.c"
wline=$(wc -l <"$TMP/real/api/res_integrations.c")
out=$("$CHECK" "$TMP/real" 2>&1)
expect "a copy of src/ with api/res_integrations.c writing a setting fails" 1 "$out" $? \
    "$TMP/real/api/res_integrations.c:$wline: calls store_account_setting_put, a store write"

# And the real src/ itself, as `make layers` runs it.
out=$("$CHECK" 2>&1)
expect "the real src/ follows the arrows (scripts/check-layers.sh)" 0 "$out" $? "check-layers: ok"

echo "test_check_layers: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && echo "test_check_layers: PASS" || echo "test_check_layers: FAIL"
[ "$failed" -eq 0 ]
