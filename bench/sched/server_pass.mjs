// server_pass.mjs - the body of bench/sched/server_pass.sh (see there).
import { sleep, startService, uploadSamples } from '../lib/service.mjs';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const JOBS = Number(process.env.JOBS || 10000);
const WORKERS = Number(process.env.WORKERS || 200);
const SETTLE_S = Number(process.env.SETTLE_S || 20);

const svc = await startService({
  bin: BIN, root: ROOT, shapes: ['tiny'], prefix: 'alallo-pass-',
  args: ['--rate-limit', '0', '--worker-timeout', '60', '--local-worker', 'none'],
});
const { url, key, workerToken: wtoken } = svc;
const post = async (p, body, token = key) => {
  const r = await fetch(url + p, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
};
async function metrics() {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = {};
  for (const line of text.split('\n')) {
    const g = /^(alallo_sched_[a-z_]+) ([0-9.e+-]+)$/.exec(line);
    if (g) m[g[1]] = Number(g[2]);
  }
  return m;
}
async function pool(n, width, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) await fn(next++);
  }));
}

// The fleet: WORKERS workers of three sizes and two classes, kept alive.
const names = [];
await pool(WORKERS, 8, async (i) => {
  const name = `w${String(i).padStart(4, '0')}`;
  const big = i % 4 === 0;
  const r = await post('/internal/workers/register', {
    name, cpus: big ? 16 : 4, mem_bytes: big ? 64e9 : 16e9, accelerator: 'cpu',
    price_per_hour: (big ? 2.0 : 0.5) * (i % 3 === 0 ? 0.4 : 1), class: i % 3 === 0 ? 'spot' : 'on-demand',
    speed: { tokens_per_s: 1000, flops: (big ? 4 : 1) * (1 + (i % 7) / 10) * 1e11 },
  }, wtoken);
  if (r.status !== 200) throw new Error(`register: ${JSON.stringify(r)}`);
  names.push(name);
});
let beating = true;
const beat = (async () => {
  while (beating) {
    await pool(names.length, 8, (i) => post(`/internal/workers/${names[i]}/heartbeat`, {}, wtoken));
    await sleep(1000);
  }
})();

// The queue: JOBS jobs from 20 accounts' worth of variety (one key here),
// both goals, data sets of 3 sizes.
const files = await uploadSamples(svc, [50, 100, 200]);
const t0 = Date.now();
await pool(JOBS, 16, async (i) => {
  const r = await post('/v1/fine_tuning/jobs', {
    model: 'tiny', training_file: files[i % 3], goal: i % 2 ? 'fastest_finish' : 'lowest_cost',
    hyperparameters: { n_epochs: 1 + (i % 3), batch_size: i % 5 === 0 ? 8 : 4 },
    max_steps: 1000 + (i % 11) * 500,
  });
  if (r.status !== 200) throw new Error(`create: ${JSON.stringify(r)}`);
});
const createS = (Date.now() - t0) / 1000;

// Every worker claims a job: WORKERS claims, each of them a pass over
// the whole queue; afterwards every worker is busy and JOBS - WORKERS wait.
const before = await metrics();
const c0 = Date.now();
let claimed = 0;
await pool(names.length, 4, async (i) => {
  const r = await post(`/internal/workers/${names[i]}/claim`, {}, wtoken);
  if (r.status === 200) claimed++;
});
const claimS = (Date.now() - c0) / 1000;
const afterClaims = await metrics();
// The server's own passes (one every 5 s) over the busy fleet.
await sleep(SETTLE_S * 1000);
const end = await metrics();
beating = false;
await beat;
svc.stop();

const claimPasses = afterClaims.alallo_sched_passes_total - before.alallo_sched_passes_total;
const idlePasses = end.alallo_sched_passes_total - afterClaims.alallo_sched_passes_total;
console.log(JSON.stringify({
  jobs: JOBS,
  workers: WORKERS,
  create_s: createS,
  claimed,
  claim_passes: claimPasses,
  claim_pass_mean_ms: 1000 * (afterClaims.alallo_sched_pass_seconds_total - before.alallo_sched_pass_seconds_total) / Math.max(1, claimPasses),
  claims_s: claimS,
  periodic_passes: idlePasses,
  periodic_pass_mean_ms: 1000 * (end.alallo_sched_pass_seconds_total - afterClaims.alallo_sched_pass_seconds_total) / Math.max(1, idlePasses),
  periodic_pass_mean_cpu_ms: 1000 * (end.alallo_sched_pass_cpu_seconds_total - afterClaims.alallo_sched_pass_cpu_seconds_total) / Math.max(1, idlePasses),
  claim_pass_mean_cpu_ms: 1000 * (afterClaims.alallo_sched_pass_cpu_seconds_total - before.alallo_sched_pass_cpu_seconds_total) / Math.max(1, claimPasses),
  last_pass_ms: 1000 * end.alallo_sched_pass_seconds,
  last_pass_cpu_ms: 1000 * end.alallo_sched_pass_cpu_seconds,
  last_pass_jobs: end.alallo_sched_pass_jobs,
  max_pass_ms: 1000 * end.alallo_sched_pass_seconds_max,
}));
