#!/usr/bin/env bash
# make run: starts `alallo serve` on the embedded default (SQLite in DATA,
# one local worker using this machine, the built-in model from models/), and
# on a data folder with no jobs yet, starts a sample job: the sentiment data
# set of examples/ on the built-in model. serve prints the dashboard URL
# (which signs you in) and the API key. Ctrl-C stops it.
set -euo pipefail
bin=$1 data=$2 port=$3
root=$(cd "$(dirname "$0")/.." && pwd)
model=${ALALLO_SAMPLE_MODEL:-alallo-base}
mkdir -p "$data"

"$bin" serve --port "$port" --data "$data" --models "$root/models" &
serve=$!
trap 'kill -TERM $serve 2>/dev/null; wait $serve' INT TERM

url=http://127.0.0.1:$port
for _ in $(seq 1 100); do
  curl -fsS "$url/healthz" >/dev/null 2>&1 && break
  kill -0 $serve 2>/dev/null || { wait $serve; exit 1; }
  sleep 0.1
done

key=$(cat "$data/api-key")
auth=(-H "Authorization: Bearer $key")
jobs=$(curl -fsS "${auth[@]}" "$url/v1/fine_tuning/jobs?limit=1" || echo '')
if [[ $jobs == *'"data":[]'* ]]; then
  if [[ -d $root/models/$model ]]; then
    # The local worker measures its speed before it registers; wait for it
    # (up to a minute) so that the sample job gets a real estimate.
    for _ in $(seq 1 600); do
      [[ $(curl -fsS "${auth[@]}" "$url/v1/workers" 2>/dev/null || true) == *'"flops":'[0-9]* ]] && break
      sleep 0.1
    done
    file=$(curl -fsS "${auth[@]}" -F purpose=fine-tune \
             -F "file=@$root/examples/sentiment-train.jsonl" "$url/v1/files" |
           sed -n 's/.*"id":"\(file-[^"]*\)".*/\1/p')
    if [[ -n $file ]]; then
      curl -fsS "${auth[@]}" -H 'Content-Type: application/json' \
        -d "{\"model\":\"$model\",\"training_file\":\"$file\",\"name\":\"Sample: review sentiment\",\"hyperparameters\":{\"n_epochs\":10,\"learning_rate_multiplier\":10}}" \
        "$url/v1/fine_tuning/jobs" >/dev/null &&
        echo "Sample job started: review sentiment on $model (see the Jobs tab)."
    fi
  else
    echo "No model $model under models/: no sample job started."
  fi
fi
wait $serve
