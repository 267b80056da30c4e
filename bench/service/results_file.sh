#!/usr/bin/env bash
# bench/service/results_file.sh - how long a job's results file takes to
# answer, by the number of reported steps (docs/api.md, "The results file"):
# GET /v1/files/file-results-… (the file object, with its size) and
# GET …/content (the CSV), against a real `alallo serve` over loopback.
#
#   bench/service/results_file.sh [BUILD_DIR]     (default: build)
#
# For each count in STEPS ("20000 199000"): a fresh serve (SQLite, no
# worker) makes one job; the serve is stopped, the job is marked succeeded
# and given that many `metrics` events (one per reported step, as the
# trainer writes them) straight into its SQLite store, and a new serve
# answers the two requests, REPEAT (3) times each; the best and the worst
# wall time of each are printed as one JSON line per count
# (results-file-2026-12-03-amd-epyc-2core-busy.jsonl: before and after the
# index of rows by step).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=$build/alallo
[[ -x $bin ]] || { echo "no $bin: build first (make)" >&2; exit 2; }
STEPS=${STEPS:-20000 199000}
REPEAT=${REPEAT:-3}

work=$(mktemp -d /tmp/alallo-bres-XXXXXX)
serve_pid=
stop_serve() {
  [[ -n $serve_pid ]] && { kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null || true; }
  serve_pid=
}
trap 'stop_serve; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
source "$here/common.sh"
bench_prepare "$work"
printf '{"prompt":"good","completion":" positive"}\n' > "$work/train.jsonl"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus, load $(cut -d' ' -f1 /proc/loadavg); $(date -u +%FT%TZ)" >&2

start_serve() { # DATA_DIR: starts serve, sets url and key
  local port
  port=$(bench_free_port)
  "$bin" serve --port "$port" --data "$1" --models "$work/models" --local-worker none \
    --rate-limit 0 >> "$work/serve.log" 2>&1 &
  serve_pid=$!
  url=http://127.0.0.1:$port
  for _ in $(seq 300); do curl -sf "$url/healthz" >/dev/null && break; sleep 0.1; done
  key=$(cat "$1/api-key")
}

# Seconds of the best and the worst of REPEAT GETs of URL_PATH: "best worst bytes"
time_get() {
  local best= worst= t bytes
  for _ in $(seq "$REPEAT"); do
    read -r t bytes < <(curl -sf -o /dev/null -w '%{time_total} %{size_download}\n' \
      -H "Authorization: Bearer $key" "$url$1")
    best=$(python3 -c "print(min(float('$t'), float('${best:-$t}')))")
    worst=$(python3 -c "print(max(float('$t'), float('${worst:-$t}')))")
  done
  echo "$best $worst $bytes"
}

for n in $STEPS; do
  data=$work/data-$n
  start_serve "$data"
  file=$(curl -sf -H "Authorization: Bearer $key" -F purpose=fine-tune -F "file=@$work/train.jsonl" \
    "$url/v1/files" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  job=$(curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d "{\"model\":\"tiny\",\"training_file\":\"$file\"}" "$url/v1/fine_tuning/jobs" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  stop_serve
  # n reported steps (every 10th step), a validation loss every 100th
  sqlite3 "$data/alallo.db" <<SQL
UPDATE jobs SET status = 'succeeded', steps_done = $n * 10, max_steps = $n * 10,
  finished = created + 1000 WHERE id = '$job';
WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < $n)
INSERT INTO events(job, seq, created, level, type, message, data)
SELECT '$job', 1000 + i, 0, 'info', 'metrics', 'Step ' || (i * 10),
  '{"step":' || (i * 10) || ',"train_loss":' || (2.0 - i * 1e-6) ||
  ',"train_mean_token_accuracy":0.5,"learning_rate":0.0001' ||
  CASE WHEN i % 10 = 0 THEN ',"valid_loss":1.5,"valid_mean_token_accuracy":0.25' ELSE '' END ||
  ',"tokens_per_s":1000}'
FROM k;
UPDATE jobs SET event_seq = 1000 + $n WHERE id = '$job';
SQL
  start_serve "$data"
  results=file-results-${job#ftjob-}
  read -r ob ow _ < <(time_get "/v1/files/$results")
  read -r cb cw bytes < <(time_get "/v1/files/$results/content")
  stop_serve
  echo "{\"steps\":$n,\"object_s\":{\"best\":$ob,\"worst\":$ow},\"content_s\":{\"best\":$cb,\"worst\":$cw},\"content_bytes\":$bytes}"
done
