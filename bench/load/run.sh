#!/usr/bin/env bash
# bench/load/run.sh - 200 concurrent API users for 60 s while jobs train:
# most poll their job list, some follow a training log. Reports errors (the
# target is 0) and p99 latency. Not part of `make test`.
#
#   bench/load/run.sh [BUILD_DIR]        (default: build)
#
# Starts `alallo serve` on a temporary data folder with one local worker
# (one CPU) training a tiny model made on the spot (nothing is downloaded),
# makes ACCOUNTS accounts that each upload the sample data set and start one
# long job, then runs loadgen.c (libcurl, one thread per client) on
# loopback. Stops by itself: loadgen ends after SECONDS, then serve is
# stopped and the folder removed.
# Environment: CLIENTS (200), FOLLOWERS (50 of them follow logs), DURATION_S
# (60), ACCOUNTS (10), THINK_MS (250, a poller's pause between requests).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=$(cd "$build" && pwd)/alallo
[[ -x $bin ]] || { echo "no $bin: build first (make)" >&2; exit 2; }
CLIENTS=${CLIENTS:-200}
FOLLOWERS=${FOLLOWERS:-50}
SECONDS_RUN=${DURATION_S:-60}
ACCOUNTS=${ACCOUNTS:-10}
THINK_MS=${THINK_MS:-250}
py=/usr/bin/python3

work=$(mktemp -d /tmp/alallo-load-XXXXXX)
serve_pid=
cleanup() {
  if [[ -n $serve_pid ]]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cc -O2 -std=c11 -D_GNU_SOURCE -o "$work/loadgen" "$here/loadgen.c" -lcurl -lpthread

# A tiny base model: a tokenizer learned from the sample data and a randomly
# initialised Llama of the `tiny` shape.
sample=$root/examples/sentiment-train.jsonl
mkdir -p "$work/models"
"$bin" tokenizer train --input "$sample" --vocab-size 400 --out "$work/tokenizer.json" >/dev/null
"$bin" model init --shape tiny --tokenizer "$work/tokenizer.json" --out "$work/models/tiny" >/dev/null

port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --port "$port" --data "$work/data" --models "$work/models" \
  --local-worker name=w1,cpus=1,mem=2G,price=0.40 > "$work/serve.out" 2> "$work/serve.log" &
serve_pid=$!
url=http://127.0.0.1:$port
for _ in $(seq 200); do curl -sf "$url/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "$url/healthz" >/dev/null || { echo "serve did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }

# Keys: the account default, then ACCOUNTS-1 more.
cat "$work/data/api-key" > "$work/keys"
for i in $(seq 2 "$ACCOUNTS"); do
  "$bin" accounts create "load$i" --data "$work/data" | tail -n 1 >> "$work/keys"
done
# Each account uploads the data set and starts one job of 4,000 steps;
# one worker trains them one after another for the whole run.
: > "$work/jobs"
i=0
while read -r key; do
  file=$(curl -sf -H "Authorization: Bearer $key" -F purpose=fine-tune -F "file=@$sample" "$url/v1/files" |
    $py -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  job=$(curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d "{\"model\":\"tiny\",\"training_file\":\"$file\",\"hyperparameters\":{\"n_epochs\":40,\"batch_size\":2}}" \
    "$url/v1/fine_tuning/jobs" | $py -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  echo "$i $job" >> "$work/jobs"
  i=$((i + 1))
done < "$work/keys"

# Steps trained by all jobs together, read through the API.
steps() {
  local total=0 idx job key n
  while read -r idx job; do
    key=$(sed -n "$((idx + 1))p" "$work/keys")
    n=$(curl -sf -H "Authorization: Bearer $key" "$url/v1/fine_tuning/jobs/$job" |
      $py -c 'import json,sys; print(json.load(sys.stdin)["progress"]["steps_done"])')
    total=$((total + n))
  done < "$work/jobs"
  echo "$total"
}
# Wait for training to begin, so that the whole run is under training load.
for _ in $(seq 300); do (( $(steps) > 0 )) && break; sleep 0.2; done
before=$(steps)

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
set +e
result=$("$work/loadgen" --url "$url" --clients "$CLIENTS" --followers "$FOLLOWERS" --seconds "$SECONDS_RUN" \
  --keys "$work/keys" --jobs "$work/jobs" --think-ms "$THINK_MS")
lg=$?
set -e
after=$(steps)
healthy=$(curl -sf "$url/healthz" >/dev/null && echo true || echo false)
statuses=$(while read -r idx job; do
  key=$(sed -n "$((idx + 1))p" "$work/keys")
  curl -sf -H "Authorization: Bearer $key" "$url/v1/fine_tuning/jobs/$job" | $py -c 'import json,sys; print(json.load(sys.stdin)["status"])'
done < "$work/jobs" | sort | uniq -c | awk '{printf "%s\"%s\":%s", (NR>1?",":""), $2, $1}')
server_errors=$(grep -c ' error: ' "$work/serve.log" || true)
$py - "$result" "$before" "$after" "$healthy" "{$statuses}" "$server_errors" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
r["steps_trained_during_run"] = int(sys.argv[3]) - int(sys.argv[2])
r["serve_healthy_after"] = sys.argv[4] == "true"
r["jobs_by_status_after"] = json.loads(sys.argv[5])
r["server_log_error_lines"] = int(sys.argv[6])
r["target"] = {"errors": 0}
print(json.dumps(r))
PY
exit $lg
