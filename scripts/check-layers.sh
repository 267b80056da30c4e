#!/bin/bash
# scripts/check-layers.sh [SRC_DIR] - fails on an #include across a
# forbidden arrow between the folders (layers, and the rooms of a layer
# that has them) of src/.
#
# The arrows are read from one table, scripts/layers.txt (KEY: the layers
# and rooms it may include). Scans SRC_DIR/**/*.c, *.h, *.cu and *.cuh
# (default: the src/ of this repository) for #include "LAYER/file.h" and
# #include <LAYER/file.h> (src/ is on the include path, so the angle
# brackets reach it too) and prints, for each include of a folder that the
# including file's layer or room may not use, one line:
#
#   src/sched/sim.c:12: includes control/lifecycle.h, but sched may include only core (docs/architecture.md)
#   src/train/kernels/gemm.c:9: includes train/model/model.h, but train/kernels may include only core (docs/architecture.md)
#
# then a summary line. A file may always include headers of its own layer
# or room; an include whose first folder is not one of src/ (a system or
# package header) is not looked at. A file directly in SRC_DIR, in a folder
# the table does not name, or directly in a layer that has rooms (train/)
# is a violation too: a new layer or room needs its arrows decided first.
#
# It also fails on a call from api to one of the store's write functions
# (named by a rule over store.h's declarations, below): api changes the
# store only through control.
#
# It also checks that the table of arrows in docs/architecture.md (between
# its "arrows begin" and "arrows end" marks) is the one
# `scripts/check-layers.sh --doc-table` writes from scripts/layers.txt.
# LAYERS_TABLE and LAYERS_DOC name other files (the self-test does).
#
# Exit status: 0 when every include follows the arrows and the docs' table
# matches, 1 on any violation, 2 on a usage error or a malformed table.
#
# `make layers` runs it, and `make test` and `make unit` run that first;
# tests/layers/test_check_layers.sh shows it catches planted violations.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TABLE=${LAYERS_TABLE:-$ROOT/scripts/layers.txt}
DOCFILE=${LAYERS_DOC:-$ROOT/docs/architecture.md}
DOC="docs/architecture.md"

usage() {
    echo "usage: scripts/check-layers.sh [SRC_DIR] | --doc-table   ($1)" >&2
    exit 2
}

# The table: allowed[KEY]=" the keys it may include "; why[KEY]; keys in
# the table's order; rooms[LAYER]=1 for a layer that has rooms.
declare -A allowed=() why=() rooms=()
keys=()
[ -r "$TABLE" ] || usage "no table '$TABLE'"
ln=0
while IFS= read -r line || [ -n "$line" ]; do
    ln=$((ln + 1))
    [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
    if [[ ! "$line" =~ ^([a-z_]+(/[a-z_]+)?):([^#]*)(#[[:space:]]*(.*))?$ ]]; then
        echo "$TABLE:$ln: not a line 'KEY: FOLDERS  # why'" >&2
        exit 2
    fi
    key=${BASH_REMATCH[1]}
    deps=$(echo ${BASH_REMATCH[3]}) # squeezes the blanks
    allowed[$key]=" $deps "
    why[$key]=${BASH_REMATCH[5]}
    keys+=("$key")
    [[ "$key" == */* ]] && rooms[${key%%/*}]=1
done <"$TABLE"
for key in "${keys[@]}"; do
    for d in ${allowed[$key]}; do
        if [ -z "${allowed[$d]+set}" ]; then
            echo "$TABLE: $key may include $d, which is no layer or room of the table" >&2
            exit 2
        fi
    done
done

# The docs' table, as docs/architecture.md shows it.
doc_table() {
    local key d list
    echo "| layer or room | may include | why |"
    echo "|---|---|---|"
    for key in "${keys[@]}"; do
        list=""
        for d in ${allowed[$key]}; do list+="${list:+, }\`$d\`"; done
        echo "| \`$key\` | ${list:-nothing} | ${why[$key]} |"
    done
}

if [ "${1:-}" = "--doc-table" ]; then
    [ $# -eq 1 ] || usage "--doc-table takes nothing more"
    doc_table
    exit 0
fi

if [ $# -eq 0 ]; then
    cd "$ROOT" || exit 2
fi
SRC=${1:-src}
SRC=${SRC%/}
if [ $# -gt 1 ] || [ ! -d "$SRC" ]; then
    usage "no folder '$SRC'"
fi

# "only api, control and core" / "nothing outside core".
may_include() {
    local key=$1 list
    read -r -a list <<<"${allowed[$key]}"
    if [ ${#list[@]} -eq 0 ]; then
        echo "nothing outside $key"
        return
    fi
    local out="only ${list[0]}" i
    for ((i = 1; i < ${#list[@]}; i++)); do
        if ((i == ${#list[@]} - 1)); then out+=" and ${list[i]}"; else out+=", ${list[i]}"; fi
    done
    echo "$out"
}

# key_of PATH (relative to src/): sets KEY to the layer or room PATH lies
# in, or WHY to what is wrong with it (and KEY to "").
key_of() {
    local path=$1 top=${1%%/*} rest room
    KEY="" WHY=""
    if [ -n "${rooms[$top]+set}" ]; then
        rest=${path#*/}
        if [[ "$rest" != */* ]]; then
            WHY="is directly in $top/, whose files each belong to one of its rooms"
            return
        fi
        room=${rest%%/*}
        if [ -z "${allowed[$top/$room]+set}" ]; then
            WHY="names $top/$room, which is no room of $top in scripts/layers.txt"
            return
        fi
        KEY=$top/$room
        return
    fi
    if [ -z "${allowed[$top]+set}" ]; then
        WHY="names $top, which is no layer of scripts/layers.txt"
        return
    fi
    KEY=$top
}

violations=0
files=0
declare -A key_of_file=()
mapfile -d '' sources < <(find "$SRC" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
for f in "${sources[@]}"; do
    files=$((files + 1))
    rel=${f#"$SRC"/}
    if [[ "$rel" != */* ]]; then
        echo "$f: is directly in $SRC/; every source belongs to a layer's folder ($DOC)"
        violations=$((violations + 1))
        continue
    fi
    key_of "$rel"
    if [ -z "$KEY" ]; then
        echo "$f: $WHY ($DOC)"
        violations=$((violations + 1))
        continue
    fi
    key_of_file[$f]=$KEY
done

# The include lines of every file placed above, as FILE:LINE:TEXT (one grep
# for the whole tree: reading each line in bash is slow on a busy machine).
while IFS= read -r hit; do
    f=${hit%%:*}
    rest=${hit#*:}
    n=${rest%%:*}
    line=${rest#*:}
    layer=${key_of_file[$f]:-}
    [ -n "$layer" ] || continue
    if [[ "$line" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
        inc=${BASH_REMATCH[1]}
        shown=$inc
        if [[ "$inc" == ../* || "$inc" == */../* ]]; then
            echo "$f:$n: includes $inc; name a header from $SRC/ as LAYER/file.h, never by ../ ($DOC)"
            violations=$((violations + 1))
            continue
        fi
    elif [[ "$line" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
        inc=${BASH_REMATCH[1]}
        shown="<$inc>"
    else
        continue
    fi
    [[ "$inc" == */* ]] || continue # a header next to the file: its own folder
    to=${inc%%/*}
    # Not one of ours (a folder of src/ or a layer of the table): a
    # system or package header.
    [ -d "$SRC/$to" ] || [ -n "${allowed[$to]+set}" ] || [ -n "${rooms[$to]+set}" ] || continue
    key_of "$inc"
    if [ -z "$KEY" ]; then
        echo "$f:$n: includes $shown, which $WHY ($DOC)"
        violations=$((violations + 1))
        continue
    fi
    [ "$KEY" = "$layer" ] && continue
    if [[ "${allowed[$layer]}" != *" $KEY "* ]]; then
        echo "$f:$n: includes $shown, but $layer may include $(may_include "$layer") ($DOC)"
        violations=$((violations + 1))
    fi
done < <([ ${#key_of_file[@]} -eq 0 ] || printf '%s\0' "${!key_of_file[@]}" | sort -z |
    xargs -0 grep -n -H -E '^[[:space:]]*#[[:space:]]*include')

# Store writes from api: api reads the store for its views, but every
# change goes through control (docs/architecture.md, "The layers"). The
# write functions are the ones SRC/store/store.h declares whose names say
# they write: store_*_put, _insert, _update, _delete, _create, _record,
# _heartbeat, _set_state, _change_state, and store_writes_*, store_set_*.
# A call (the name followed by "(") in a .c or .h of api is a violation;
# a new write to the store must be named by this rule.
store_writes=0
if [ -r "$SRC/store/store.h" ]; then
    mapfile -t write_fns < <(grep -oE '\bstore_[a-z0-9_]+[[:space:]]*\(' "$SRC/store/store.h" |
        sed -E 's/[[:space:]]*\($//' | sort -u |
        grep -E '^store_(writes_[a-z0-9_]+|set_[a-z0-9_]+|[a-z0-9_]+_(put|insert|update|delete|create|record|heartbeat|set_state|change_state))$')
    api_files=()
    for f in "${!key_of_file[@]}"; do
        [ "${key_of_file[$f]}" = api ] && api_files+=("$f")
    done
    if [ ${#write_fns[@]} -gt 0 ] && [ ${#api_files[@]} -gt 0 ]; then
        alt=$(IFS='|'; echo "${write_fns[*]}")
        while IFS= read -r hit; do
            f=${hit%%:*}
            rest=${hit#*:}
            n=${rest%%:*}
            line=${rest#*:}
            fn=$(grep -oE "\\b($alt)[[:space:]]*\\(" <<<"$line" | head -n 1 | sed -E 's/[[:space:]]*\($//')
            echo "$f:$n: calls $fn, a store write; api changes the store only through control ($DOC)"
            store_writes=$((store_writes + 1))
        done < <(printf '%s\0' "${api_files[@]}" | sort -z |
            xargs -0 grep -n -H -E "\\b($alt)[[:space:]]*\\(")
    fi
fi

# The docs' table against the one written from scripts/layers.txt.
doc_ok=1
if [ ! -r "$DOCFILE" ]; then
    echo "$DOCFILE: not found; its table of arrows comes from scripts/layers.txt"
    doc_ok=0
else
    shown=$(sed -n '/<!-- arrows begin/,/<!-- arrows end/p' "$DOCFILE" | sed '1d;$d')
    if [ "$shown" != "$(doc_table)" ]; then
        echo "$DOCFILE: its table of arrows (between the 'arrows begin' and 'arrows end' marks) is not scripts/layers.txt's; write it with scripts/check-layers.sh --doc-table"
        diff <(echo "$shown") <(doc_table) | sed 's/^/    /'
        doc_ok=0
    fi
fi

if [ "$violations" -gt 0 ] || [ "$store_writes" -gt 0 ] || [ "$doc_ok" -eq 0 ]; then
    echo "check-layers: FAIL: $violations include(s) across a forbidden arrow in $files files of $SRC/ ($DOC)$([ "$store_writes" -gt 0 ] && echo "; $store_writes store write(s) from api")$([ "$doc_ok" -eq 0 ] && echo "; docs' table differs from scripts/layers.txt")"
    exit 1
fi
echo "check-layers: ok: $files files of $SRC/, every #include follows the arrows of scripts/layers.txt, and api writes the store only through control"
exit 0
