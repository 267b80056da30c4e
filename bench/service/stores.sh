#!/usr/bin/env bash
# bench/service/stores.sh - the SQLite and the PostgreSQL store side by
# side, in one run on one machine: durable job creations per second (with
# p50/p99) at 1, 8 and 64 clients, then list p50/p99 (one client, and
# READ_THREADS at once) with JOBS jobs stored.
#
#   bench/service/stores.sh [BUILD_DIR]     (default: build)
#
# For each store: a fresh `alallo serve --local-worker none` over loopback
# (PostgreSQL: a throwaway server from tests/pg/pg-up.sh, fsync and
# synchronous_commit on, on the same machine) and the load generator of
# bench/service/loadgen.c. Prints one JSON line per phase and a summary
# table. Environment: CLIENTS ("1 8 64"), CREATE_SECONDS (10), READ_THREADS
# (4), READ_SECONDS (10), JOBS (100000), STORES ("sqlite postgresql"),
# ANALYZE_BEFORE_LIST (1: PostgreSQL's jobs table is vacuumed and analyzed
# after the load, as autovacuum would, before the lists are measured).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=$build/alallo
[[ -x $bin ]] || { echo "no $bin: build first (make)" >&2; exit 2; }
CLIENTS=${CLIENTS:-1 8 64}
CREATE_SECONDS=${CREATE_SECONDS:-10}
READ_THREADS=${READ_THREADS:-4}
READ_SECONDS=${READ_SECONDS:-10}
JOBS=${JOBS:-100000}
STORES=${STORES:-sqlite postgresql}

work=$(mktemp -d /tmp/alallo-bst-XXXXXX)
kit=$(mktemp -u /tmp/alallo-bpg-XXXXXX) # outside work: the server's user must reach it
serve_pid=
cleanup() {
  [[ -n $serve_pid ]] && { kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null || true; }
  [[ -d $kit ]] && "$root/tests/pg/pg-down.sh" "$kit"
  rm -rf "$work"
}
trap cleanup EXIT
source "$here/common.sh"
loadgen=$work/loadgen
bench_prepare "$work"
printf '{"prompt":"good","completion":" positive"}\n' > "$work/train.jsonl"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus; $(date -u +%FT%TZ)" >&2

# One line of the summary table: fmt STORE PHASE CLIENTS JOBS RESULT_JSON
fmt() {
  python3 - "$@" <<'PY'
import json, sys
store, phase, clients, jobs, r = sys.argv[1:4] + [sys.argv[4], json.loads(sys.argv[5])]
what = f"{r['per_second']:>8.0f}/s" if phase == "create" else f"{int(jobs):>6} jobs"
print(f"{store:<10} {phase:<6} {clients:>3} clients  {what}  p50 {r['p50_ms']:7.2f} ms"
      f"  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}")
PY
}

summary=()
for store in $STORES; do
  data=$work/data-$store
  extra=()
  if [[ $store == postgresql ]]; then
    "$root/tests/pg/pg-up.sh" "$kit" "$bin" >/dev/null
    extra=(--store "$("$root/tests/pg/pg-db.sh" "$kit" bench)")
  fi
  port=$(bench_free_port)
  "$bin" serve --port "$port" --data "$data" --models "$work/models" --local-worker none \
    --rate-limit 0 "${extra[@]}" > "$work/serve-$store.log" 2>&1 &
  serve_pid=$!
  url=http://127.0.0.1:$port
  for _ in $(seq 200); do curl -sf "$url/healthz" >/dev/null && break; sleep 0.1; done
  key=$(cat "$data/api-key")
  file=$(curl -sf -H "Authorization: Bearer $key" -F purpose=fine-tune -F "file=@$work/train.jsonl" \
    "$url/v1/files" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  body="{\"model\":\"tiny\",\"training_file\":\"$file\"}"
  ids=$work/ids-$store
  for c in $CLIENTS; do
    r=$("$loadgen" --url "$url" --key "$key" --mode create --threads "$c" \
      --seconds "$CREATE_SECONDS" --body "$body" --ids "$ids")
    echo "{\"store\":\"$store\",\"phase\":\"create\",\"result\":$r}"
    summary+=("$(fmt "$store" create "$c" 0 "$r")")
  done
  have=$(wc -l < "$ids")
  if (( have < JOBS )); then
    "$loadgen" --url "$url" --key "$key" --mode create --threads 64 \
      --requests $((JOBS - have)) --body "$body" --ids "$ids" > /dev/null
  fi
  if [[ $store == postgresql ]]; then
    # What autovacuum does within a minute of a bulk load: without it the
    # lists would race autovacuum's own pass over the rows just written
    # (and be planned on the empty table's statistics), which is not the
    # steady state a list meets. ANALYZE_BEFORE_LIST=0 measures that moment.
    if [[ ${ANALYZE_BEFORE_LIST:-1} == 1 ]]; then
      psql "${extra[1]}" -qc 'VACUUM ANALYZE jobs' >/dev/null
    fi
  fi
  for t in 1 "$READ_THREADS"; do
    r=$("$loadgen" --url "$url" --key "$key" --mode list --threads "$t" --seconds "$READ_SECONDS")
    echo "{\"store\":\"$store\",\"phase\":\"list\",\"jobs\":$(wc -l < "$ids"),\"result\":$r}"
    summary+=("$(fmt "$store" list "$t" "$(wc -l < "$ids")" "$r")")
  done
  kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=
done
printf '%s\n' "${summary[@]}"
