// takeover.mjs - the body of bench/ha/takeover.sh (see there).
import { spawn } from 'node:child_process';

import { freePort, sleep, startService, uploadSamples } from '../lib/service.mjs';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const ROUNDS = Number(process.env.ROUNDS || 5);
process.setMaxListeners(10 + 4 * ROUNDS); // each round's serves are killed on exit
const PG = process.env.ALALLO_PG_DIR;

async function healthy(url) {
  try {
    const r = await fetch(`${url}/healthz`);
    return r.ok ? await r.json() : null;
  } catch {
    return null;
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rounds = [];
for (let round = 1; round <= ROUNDS; round++) {
  const args = ['--rate-limit', '0', '--worker-timeout', '60', '--local-worker', 'none'];
  const a = await startService({ bin: BIN, root: ROOT, shapes: ['tiny'], prefix: 'alallo-ha-', args });
  // The standby: same data folder and store, its own port.
  const bPort = await freePort();
  const b = spawn(BIN, ['serve', '--port', String(bPort), '--data', a.data, ...a.store, '--models', a.models, ...args],
    { stdio: ['ignore', 'ignore', 'ignore'] });
  process.on('exit', () => b.kill('SIGKILL'));
  const bUrl = `http://127.0.0.1:${bPort}`;
  for (let i = 0; !(await healthy(bUrl)); i++) {
    if (i > 200) throw new Error('the standby did not start');
    await sleep(100);
  }
  if ((await healthy(bUrl)).leader !== false) throw new Error('the second serve leads');
  const post = async (p, body, token) => {
    const r = await fetch(bUrl + p, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
    const text = await r.text();
    return { status: r.status, json: text && r.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : null };
  };
  const reg = await post('/internal/workers/register', {
    name: 'w1', cpus: 4, mem_bytes: 16e9, accelerator: 'cpu', price_per_hour: 0.5, class: 'on-demand',
    speed: { tokens_per_s: 1000, flops: 1e11 },
  }, a.workerToken);
  if (reg.status !== 200) throw new Error(`register: ${JSON.stringify(reg)}`);
  const [file] = await uploadSamples({ ...a, url: bUrl }, [50]);
  const job = await post('/v1/fine_tuning/jobs', { model: 'tiny', training_file: file }, a.key);
  if (job.status !== 200) throw new Error(`create: ${JSON.stringify(job)}`);

  const t0 = performance.now();
  a.serve.kill('SIGKILL');
  let leadMs = null;
  let placedMs = null;
  const leading = (async () => {
    while (leadMs === null) {
      if ((await healthy(bUrl))?.leader) leadMs = performance.now() - t0;
      else await sleep(10);
    }
  })();
  while (placedMs === null) {
    const c = await post('/internal/workers/w1/claim', null, a.workerToken);
    if (c.status === 200) placedMs = performance.now() - t0;
    else await sleep(50);
    if (performance.now() - t0 > 60000) throw new Error(`no placement after 60 s (last ${c.status})`);
  }
  await leading;
  rounds.push({ lead_ms: Math.round(leadMs), placed_ms: Math.round(placedMs) });
  b.kill('SIGKILL');
  await sleep(200);
}
const lead = rounds.map((r) => r.lead_ms);
const placed = rounds.map((r) => r.placed_ms);
console.log(JSON.stringify({
  store: PG ? 'postgresql' : 'sqlite', rounds,
  lead_ms: { median: median(lead), max: Math.max(...lead) },
  placed_ms: { median: median(placed), max: Math.max(...placed) },
}));
process.exit(0);
