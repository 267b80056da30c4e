#!/bin/bash
# scripts/check-layers.sh [SRC_DIR] - fails on an #include across a
# forbidden arrow between the folders (layers) of src/.
#
# Scans SRC_DIR/**/*.c and *.h (default: the src/ of this repository) for
# #include "LAYER/file.h" and prints, for each include of a folder that
# the including file's folder may not use, one line:
#
#   src/sched/sim.c:12: includes control/lifecycle.h, but sched may include only core (docs/architecture.md)
#
# then a summary line. Exit status: 0 when every include follows the
# arrows, 1 on any violation, 2 on a usage error. A file may always include
# headers of its own folder; includes in <angle brackets> (the system's and
# the packages') are not looked at. A .c or .h directly in SRC_DIR, or in a
# folder the table does not name, is a violation too: a new layer needs its
# arrows decided here first.
#
# `make layers` runs it, and `make test` and `make unit` run that first;
# tests/layers/test_check_layers.sh shows it catches a planted violation.
set -u

# The arrows: LAYER:the folders it may include. This table is the one
# place they are written down for the build's checks; docs/architecture.md
# shows the same table with the reasons, and CMakeLists.txt links each
# layer's library to exactly these (keep the three in step).
ARROWS=(
    "app:api control worker train sched cli store core" # wires the layers; dispatches sub-commands
    "api:control store sched core"                      # HTTP only; sched for types (via control)
    "control:sched store exec core"                     # the service: every change to a job or worker
    "exec:core"                                         # engines (Slurm): submit, list, cancel by tag
    "sched:core"                                        # pure policy
    "store:core"
    "train:core"                                        # knows nothing of jobs
    "cli:core"                                          # talks to the service over HTTP only
    "worker:core"                                       # reaches train only through the trainer process
    "core:"                                             # depends on nothing
)
DOC="docs/architecture.md"

if [ $# -eq 0 ]; then
    cd "$(dirname "$0")/.." || exit 2
fi
SRC=${1:-src}
SRC=${SRC%/}
if [ $# -gt 1 ] || [ ! -d "$SRC" ]; then
    echo "usage: scripts/check-layers.sh [SRC_DIR]   (no folder '$SRC')" >&2
    exit 2
fi

declare -A allowed=()
for row in "${ARROWS[@]}"; do
    allowed[${row%%:*}]=" ${row#*:} "
done

# "only api, control and core" / "nothing outside core".
may_include() {
    local layer=$1 list
    read -r -a list <<<"${allowed[$layer]}"
    if [ ${#list[@]} -eq 0 ]; then
        echo "nothing outside $layer"
        return
    fi
    local out="only ${list[0]}" i
    for ((i = 1; i < ${#list[@]}; i++)); do
        if ((i == ${#list[@]} - 1)); then out+=" and ${list[i]}"; else out+=", ${list[i]}"; fi
    done
    echo "$out"
}

violations=0
files=0
while IFS= read -r -d '' f; do
    files=$((files + 1))
    rel=${f#"$SRC"/}
    if [[ "$rel" != */* ]]; then
        echo "$f: is directly in $SRC/; every source belongs to a layer's folder ($DOC)"
        violations=$((violations + 1))
        continue
    fi
    layer=${rel%%/*}
    if [ -z "${allowed[$layer]+set}" ]; then
        echo "$f: folder $layer is not a layer of the table in scripts/check-layers.sh ($DOC)"
        violations=$((violations + 1))
        continue
    fi
    n=0
    while IFS= read -r line; do
        n=$((n + 1))
        [[ "$line" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
        inc=${BASH_REMATCH[1]}
        if [[ "$inc" == ../* || "$inc" == */../* ]]; then
            echo "$f:$n: includes $inc; name a header from $SRC/ as LAYER/file.h, never by ../ ($DOC)"
            violations=$((violations + 1))
            continue
        fi
        [[ "$inc" == */* ]] || continue # a header next to the file: its own folder
        to=${inc%%/*}
        [ "$to" = "$layer" ] && continue
        # Not one of ours (a folder of src/ or a layer of the table): a
        # package header written with quotes.
        [ -d "$SRC/$to" ] || [ -n "${allowed[$to]+set}" ] || continue
        if [[ "${allowed[$layer]}" != *" $to "* ]]; then
            echo "$f:$n: includes $inc, but $layer may include $(may_include "$layer") ($DOC)"
            violations=$((violations + 1))
        fi
    done <"$f"
done < <(find "$SRC" -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)

if [ "$violations" -gt 0 ]; then
    echo "check-layers: FAIL: $violations include(s) across a forbidden arrow in $files files of $SRC/ ($DOC)"
    exit 1
fi
echo "check-layers: ok: $files files of $SRC/, every #include follows the arrows"
exit 0
