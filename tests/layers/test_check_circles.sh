#!/bin/bash
# tests/layers/test_check_circles.sh - shows that scripts/check-circles.py
# finds a circle of includes among the files of one folder of src/ (a
# planted one of three files, through a header and a .c, quoted and in
# angle brackets) and a circle of calls through one header that declares
# what two files define, names it and the includes or calls that make it, lets a folder
# without one through (a file's own header and other folders' headers do
# not count), and passes on the real src/. Prints one "ok"/"FAIL" line per
# check and a summary; exits 1 when any check failed. Run by ctest
# (layers/check_circles) and `make layers`, and so by `make unit` and
# `make test`.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK="$ROOT/scripts/check-circles.py"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/check-circles-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# pass, fail and expect
. "$ROOT/tests/layers/expect.sh"

# A small tree without a circle: control's files in one direction (a .c
# including its own header, a header another folder's), api and cli apart.
T="$TMP/src"
mkdir -p "$T/control" "$T/api" "$T/cli" "$T/core"
printf '#include "core/clock.h"\n' >"$T/control/control.h"
printf '#include "control/control.h"\n' >"$T/control/paths.h"
printf '#include "control/paths.h"\n#include "core/clock.h"\n' >"$T/control/paths.c"
printf '#include "control/control.h"\n' >"$T/control/lifecycle.h"
printf '#include "control/lifecycle.h"\n#include <control/paths.h>\n#include "lifecycle.h"\n' >"$T/control/lifecycle.c"
printf '#include "control/lifecycle.h"\n' >"$T/control/tick.h"
printf '#include "control/tick.h"\n#include "control/lifecycle.h"\n' >"$T/control/tick.c"
printf '#include "api/server.h"\n#include "control/tick.h"\n' >"$T/api/router.c"
printf '#include "core/clock.h"\n' >"$T/api/server.h"
printf '#include "cli/cli.h"\n' >"$T/cli/cli.c"
printf '\n' >"$T/cli/cli.h"
printf '#include "core/clock.h"\n' >"$T/core/clock.h"

out=$(python3 "$CHECK" "$T" 2>&1)
expect "a tree without a circle passes" 0 "$out" $? "no circle of includes and calls"

# Planted: paths.c calls back into lifecycle (paths -> lifecycle), and
# lifecycle's header reaches tick (lifecycle -> tick), which includes
# lifecycle: paths -> lifecycle -> tick -> lifecycle, a circle of two
# with paths on its edge, and lifecycle -> paths makes it three.
printf '#include "control/paths.h"\n#include "control/lifecycle.h"\n' >"$T/control/paths.c"
out=$(python3 "$CHECK" "$T" 2>&1)
expect "a circle of two files is found and named" 1 "$out" $? \
    "src/control: circle: lifecycle -> paths -> lifecycle" \
    "lifecycle.c:2 includes control/paths.h" "paths.c:2 includes control/lifecycle.h" \
    "1 circle(s)"

printf '#include "control/control.h"\n#include <control/tick.h>\n' >"$T/control/lifecycle.h"
out=$(python3 "$CHECK" "$T" 2>&1)
expect "a knot of three files is found, the header's include named" 1 "$out" $? \
    "lifecycle.h:2 includes control/tick.h" "the same knot holds lifecycle, paths, tick"

# Only the folders asked for: api and cli alone pass.
out=$(python3 "$CHECK" "$T" api cli 2>&1)
expect "other folders are checked apart" 0 "$out" $? "no circle of includes and calls in src/api, src/cli"

# A circle in api is found as well.
printf '#include "api/router.h"\n' >"$T/api/server.h"
printf '\n' >"$T/api/router.h"
out=$(python3 "$CHECK" "$T" api 2>&1)
expect "a circle in api is found" 1 "$out" $? "src/api: circle: router -> server -> router"

# A circle of calls through one header that declares what two files
# define (as cli/cli.h does): neither .c includes the other's header.
printf 'int cmd_a(void);\nint cmd_b(void);\n' >"$T/cli/cli.h"
printf '#include "cli/cli.h"\n/* cmd_b( in a comment is no call */\nint cmd_a(void) { return 1; }\n' >"$T/cli/cli_a.c"
printf '#include "cli/cli.h"\nint cmd_b(void) { return 2; }\n' >"$T/cli/cli_b.c"
out=$(python3 "$CHECK" "$T" cli 2>&1)
expect "calls through a shared header, one way, pass" 0 "$out" $? "no circle"
printf '#include "cli/cli.h"\nint cmd_b(void) { return cmd_a(); }\n' >"$T/cli/cli_b.c"
printf '#include "cli/cli.h"\nint cmd_a(void)\n{\n    return cmd_b();\n}\n' >"$T/cli/cli_a.c"
out=$(python3 "$CHECK" "$T" cli 2>&1)
expect "a circle of calls through a shared header is found" 1 "$out" $? \
    "src/cli: circle: cli_a -> cli_b -> cli_a" \
    "cli_a.c calls cmd_b (cli_b.c), declared in cli/cli.h" \
    "cli_b.c calls cmd_a (cli_a.c), declared in cli/cli.h"

out=$(python3 "$CHECK" "$T" nowhere 2>&1)
expect "a folder that is not there is a usage error" 2 "$out" $? "no folder nowhere"

# The real tree.
out=$(python3 "$CHECK" 2>&1)
expect "the real src/ has no circle in control, api, cli" 0 "$out" $? "no circle of includes and calls"

echo "check-circles: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
