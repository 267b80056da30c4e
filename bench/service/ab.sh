#!/usr/bin/env bash
# bench/service/ab.sh - the service benchmark (run.sh) before and after a
# change, in alternating rounds: OLD and NEW are each checked out into a
# temporary git worktree under /tmp, built there (the alallo binary alone,
# CPU-only, RelWithDebInfo as `make` builds it), and then run.sh of this
# tree runs against old, new, old, new, ... so that a drift of a shared
# machine's load hits both alike. Prints every round, the medians and the
# median of the rounds' ratios new/old; the worktrees are removed at the end.
#
#   bench/service/ab.sh [OLD [NEW]]
#
# OLD defaults to 6bea95c, main just before issue 30's work began (the
# first parent of the merge that moved src/train into rooms); NEW to HEAD
# (committed work only: uncommitted changes are not in the worktree).
# Environment: ROUNDS (3), JOBS_BUILD (2: build jobs), OUT (a file the
# rounds' JSON lines are appended to; none by default), and run.sh's own
# setting, short by default here: CREATE_THREADS (64), CREATE_SECONDS (5),
# READ_THREADS (4), READ_SECONDS (5), JOBS (20000 jobs stored). About 35 s a
# run, so about 4 min for 3 rounds, after the two builds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
old_ref=${1:-6bea95c}
new_ref=${2:-HEAD}
rounds=${ROUNDS:-3}
jobs_build=${JOBS_BUILD:-2}
export CREATE_THREADS=${CREATE_THREADS:-64} CREATE_SECONDS=${CREATE_SECONDS:-5}
export READ_THREADS=${READ_THREADS:-4} READ_SECONDS=${READ_SECONDS:-5} JOBS=${JOBS:-20000}

old_sha=$(git -C "$root" rev-parse --verify "$old_ref^{commit}")
new_sha=$(git -C "$root" rev-parse --verify "$new_ref^{commit}")
if [[ $new_ref == HEAD ]] && ! git -C "$root" diff --quiet HEAD -- src CMakeLists.txt; then
    echo "note: src/ has uncommitted changes; NEW is HEAD ($new_sha) without them" >&2
fi

work=$(mktemp -d /tmp/alallo-ab-XXXXXX)
cleanup() {
    for side in old new; do
        [[ -d $work/$side ]] && git -C "$root" worktree remove --force "$work/$side" 2>/dev/null
    done
    git -C "$root" worktree prune 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

build() { # side sha
    local side=$1 sha=$2 t0
    t0=$(date +%s)
    git -C "$root" worktree add --detach --quiet "$work/$side" "$sha"
    nice cmake -S "$work/$side" -B "$work/$side/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DALALLO_CUDA=OFF > "$work/$side.configure.log" 2>&1 ||
        { tail -20 "$work/$side.configure.log" >&2; return 1; }
    nice cmake --build "$work/$side/build" --target alallo -j "$jobs_build" \
        > "$work/$side.build.log" 2>&1 || { tail -20 "$work/$side.build.log" >&2; return 1; }
    echo "built $side ${sha:0:7} in $(( $(date +%s) - t0 )) s" >&2
}
build old "$old_sha"
build new "$new_sha"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "machine: $cpu, $(nproc) cpus; load at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "old ${old_sha:0:7}, new ${new_sha:0:7}; run.sh with CREATE_THREADS=$CREATE_THREADS" \
     "CREATE_SECONDS=$CREATE_SECONDS READ_THREADS=$READ_THREADS READ_SECONDS=$READ_SECONDS JOBS=$JOBS"

rows=$work/rows.jsonl
: > "$rows"
for ((r = 1; r <= rounds; r++)); do
    for side in old new; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        summary=$("$here/run.sh" "$work/$side/build" 2>/dev/null | tail -1)
        python3 - "$r" "$side" "$load" "$summary" >> "$rows" <<'PY'
import json, sys
r, side, load, summary = sys.argv[1:]
s = json.loads(summary)
s.pop("targets", None)
print(json.dumps({"round": int(r), "side": side, "load1": float(load), **s}))
PY
        tail -1 "$rows" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("round %d %-3s load %5.2f: creations/s %7.0f  create p99 %7.2f ms  list p50/p99 %5.2f/%6.2f ms"
      "  list 1 client p99 %5.2f ms  retrieve p50/p99 %5.2f/%6.2f ms" % (
      s["round"], s["side"], s["load1"], s["durable_creations_per_s"], s["create_p99_ms"],
      s["list_p50_ms"], s["list_p99_ms"], s["list_1_client_p99_ms"], s["retrieve_p50_ms"],
      s["retrieve_p99_ms"]))'
    done
done
echo "load at end $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -n ${OUT:-} ]] && cat "$rows" >> "$OUT"
python3 - "$rows" "${old_sha:0:7}" "${new_sha:0:7}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["durable_creations_per_s", "create_p99_ms", "list_p50_ms", "list_p99_ms",
        "list_1_client_p50_ms", "list_1_client_p99_ms", "retrieve_p50_ms", "retrieve_p99_ms"]
old = {r["round"]: r for r in rows if r["side"] == "old"}
new = {r["round"]: r for r in rows if r["side"] == "new"}
both = sorted(set(old) & set(new))
print("%-22s %12s %12s %16s" % ("median of " + str(len(both)) + " rounds", "old " + sys.argv[2],
                                  "new " + sys.argv[3], "ratio new/old"))
for k in keys:
    ratios = [new[i][k] / old[i][k] for i in both if old[i][k]]
    print("%-22s %12.2f %12.2f %16.3f" % (k, statistics.median(old[i][k] for i in both),
                                         statistics.median(new[i][k] for i in both),
                                         statistics.median(ratios) if ratios else float("nan")))
print("(creations/s: higher is better; the times: lower is better)")
PY
