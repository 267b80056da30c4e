#!/usr/bin/env bash
# bench/service/run.sh - durable job creations per second, and p50/p99 of
# list and retrieve with 100,000 jobs stored, over loopback.
#
#   bench/service/run.sh [BUILD_DIR]     (default: build)
#
# Lists are measured with one client and with READ_THREADS clients at once.
# Starts `alallo serve --local-worker none` on a temporary data folder with a
# stand-in model folder (jobs are created, never trained), builds the load
# generator (loadgen.c, libcurl), and prints one JSON object per phase plus a
# summary. Environment: CREATE_THREADS (64), CREATE_SECONDS (10),
# READ_THREADS (4), READ_SECONDS (10), JOBS (100000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=$build/alallo
[[ -x $bin ]] || { echo "no $bin: build first (make)" >&2; exit 2; }
CREATE_THREADS=${CREATE_THREADS:-64}
CREATE_SECONDS=${CREATE_SECONDS:-10}
READ_THREADS=${READ_THREADS:-4}
READ_SECONDS=${READ_SECONDS:-10}
JOBS=${JOBS:-100000}

work=$(mktemp -d /tmp/alallo-bench-XXXXXX)
source "$here/common.sh"
loadgen=$work/loadgen
bench_prepare "$work"

port=$(bench_free_port)
"$bin" serve --port "$port" --data "$work/data" --models "$work/models" --local-worker none --rate-limit 0 \
  > "$work/serve.log" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null; rm -rf "$work"' EXIT
url=http://127.0.0.1:$port
for _ in $(seq 100); do curl -sf "$url/healthz" >/dev/null && break; sleep 0.1; done
key=$(cat "$work/data/api-key")
printf '{"prompt":"good","completion":" positive"}\n' > "$work/train.jsonl"
file=$(curl -sf -H "Authorization: Bearer $key" -F purpose=fine-tune -F "file=@$work/train.jsonl" \
  "$url/v1/files" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
body="{\"model\":\"tiny\",\"training_file\":\"$file\"}"

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus" >&2
create=$("$loadgen" --url "$url" --key "$key" --mode create --threads "$CREATE_THREADS" \
  --seconds "$CREATE_SECONDS" --body "$body" --ids "$work/ids")
echo "$create"
have=$(wc -l < "$work/ids")
if (( have < JOBS )); then
  "$loadgen" --url "$url" --key "$key" --mode create --threads "$CREATE_THREADS" \
    --requests $((JOBS - have)) --body "$body" --ids "$work/ids" > /dev/null
fi
echo "{\"jobs_stored\":$(wc -l < "$work/ids")}"
list1=$("$loadgen" --url "$url" --key "$key" --mode list --threads 1 --seconds "$READ_SECONDS")
echo "$list1"
list=$("$loadgen" --url "$url" --key "$key" --mode list --threads "$READ_THREADS" --seconds "$READ_SECONDS")
echo "$list"
shuf -n 20000 "$work/ids" > "$work/sample"
get=$("$loadgen" --url "$url" --key "$key" --mode get --threads "$READ_THREADS" --seconds "$READ_SECONDS" \
  --ids "$work/sample")
echo "$get"
python3 - "$create" "$list" "$get" "$list1" <<'PY'
import json, sys
c, l, g, l1 = (json.loads(a) for a in sys.argv[1:])
print(json.dumps({"durable_creations_per_s": c["per_second"], "create_p99_ms": c["p99_ms"],
                  "list_p50_ms": l["p50_ms"], "list_p99_ms": l["p99_ms"],
                  "list_1_client_p50_ms": l1["p50_ms"], "list_1_client_p99_ms": l1["p99_ms"],
                  "retrieve_p50_ms": g["p50_ms"], "retrieve_p99_ms": g["p99_ms"],
                  "targets": {"creations_per_s": ">= 2000", "list_p99_ms": "< 10"}}))
PY
