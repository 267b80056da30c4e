#!/usr/bin/env bash
# The worker's start-up bench, how far apart its figure lands (issue 32):
# ROUNDS rounds (default 20), each running the old form (`bench train
# --shape tiny --steps 3`, the mean of 2 timed steps) and the new form
# (`--shape base --steps 17`, the built-in model's shape, the median of
# 16) one after the other, which first by turns, with THREADS threads
# (default: all CPUs). A new service's first estimates rest on this one
# figure (docs/worker.md), so its spread is theirs. Prints one JSON object
# per form: the achieved FLOP/s' median, min, max, max/min and p90/p10,
# and the machine.
#   bench/estimates/startup_bench.sh [path/to/alallo]
# Not a test: about 5 s a round. Run it beside what the machine runs, or
# beside `sh -c 'while :; do :; done'` to see a loaded machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/alallo}
rounds=${ROUNDS:-20}
threads=${THREADS:-$(nproc)}
old=() new=()
figure() { # $1 shape, $2 steps, $3 key of the pace: FLOP/s
  "$bin" bench train --shape "$1" --steps "$2" --threads "$threads" |
    node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{
      const j=JSON.parse(s.trim().split('\n').pop());console.log((j['$3']??j.tokens_per_s)*j.flops_per_token)})"
}
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then
    old+=("$(figure tiny 3 tokens_per_s)") new+=("$(figure base 17 tokens_per_s_median)")
  else
    new+=("$(figure base 17 tokens_per_s_median)") old+=("$(figure tiny 3 tokens_per_s)")
  fi
done
node -e '
const [old, neu] = [process.argv[1], process.argv[2]].map((s) => s.split(" ").map(Number));
const os = require("os");
function sum(xs) {
  const s = [...xs].sort((a, b) => a - b), q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { n: s.length, median: Math.round(q(0.5)), min: Math.round(s[0]), max: Math.round(s.at(-1)),
           max_over_min: +(s.at(-1) / s[0]).toFixed(2), p90_over_p10: +(q(0.9) / q(0.1)).toFixed(2) };
}
console.log(JSON.stringify({ machine: `${os.cpus()[0].model}, ${os.cpus().length} CPUs`,
  loadavg: os.loadavg().map((x) => +x.toFixed(2)), threads: +process.argv[3],
  flops_per_s: { old_tiny_steps3_mean: sum(old), new_base_steps17_median: sum(neu) } }, null, 1));
' "${old[*]}" "${new[*]}" "$threads"
