// serve.mjs - the benchmark of bench/serve/run.sh (see there).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { alallo, startService } from '../lib/service.mjs';

const [bin, root] = process.argv.slice(2);
const ROUNDS = Number(process.env.ROUNDS || 2);
const PER = { 1: Number(process.env.N1 || 3), 8: Number(process.env.N8 || 8) }; // requests per round
const THREADS = Number(process.env.THREADS || os.cpus().length);
const TOKENS = 16;
const PROMPT = 'The President of the United States said that the Congress of the nation has the power to';
const { getLlama } = await import(path.join(root, 'tests/node_modules/node-llama-cpp/dist/index.js'));

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : null;
};

// One completion through the API (legacy completions answer whole, so
// alallo's time to first token is not measured here): { ms, ttft, tokens }.
// A 429 (the child path lets 2 generations run and 2 of one account wait)
// is tried again after 50 ms, the wait counted in the latency, as a client
// that retries would see it.
async function viaApi(svc, model) {
  const t0 = performance.now();
  for (;;) {
    const r = await fetch(`${svc.url}/v1/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${svc.key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, prompt: PROMPT, max_tokens: TOKENS, temperature: 0 }),
    });
    const j = await r.json();
    if (r.status === 429) {
      await new Promise((res) => setTimeout(res, 50));
      continue;
    }
    if (!r.ok) throw new Error(`${r.status} ${JSON.stringify(j)}`);
    return { ms: performance.now() - t0, ttft: null, tokens: j.usage.completion_tokens };
  }
}

// One completion by llama.cpp on a sequence of its own: { ms, ttft, tokens }.
// The context's 8 sequences are made once and lent, their history cleared
// after each request.
async function viaLlama(lm, prompt) {
  const t0 = performance.now();
  const seq = lm.free.pop();
  let ttft = null;
  let tokens = 0;
  try {
    for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
      if (ttft === null) ttft = performance.now() - t0;
      if (t === lm.eos) break;
      if (++tokens === TOKENS) break;
    }
  } finally {
    await seq.clearHistory();
    lm.free.push(seq);
  }
  return { ms: performance.now() - t0, ttft, tokens };
}

// c clients sending n requests in all; the results and the seconds taken.
async function round(c, n, one) {
  let next = 0;
  const out = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < n) {
      next++;
      out.push(await one());
    }
  }));
  return { out, s: (performance.now() - t0) / 1000 };
}

for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(1)); // the servers' exit handlers run
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-bench-serve-'));
process.on('exit', () => fs.rmSync(work, { recursive: true, force: true }));
const models = [
  ['built-in', path.join(root, 'models/alallo-base')],
  ['124m', path.join(work, '124m')],
];
alallo(bin, ['model', 'init', '--shape', '124m', '--tokenizer', path.join(root, 'models/alallo-base/tokenizer.json'), '--out', models[1][1]]);
const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1];
console.log(JSON.stringify({ machine: `${os.cpus().length} CPUs, ${cpu}`, threads: THREADS, prompt: PROMPT, max_tokens: TOKENS, rounds: ROUNDS, requests_per_round: PER }));

const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: THREADS });
for (const [name, dir] of models) {
  const gguf = path.join(work, `${name}.gguf`);
  alallo(bin, ['export', '--model-dir', dir, '--format', 'gguf', '--dtype', 'f32', '--out', gguf]);
  const shared = ['--local-worker', 'none', '--inference-threads', String(THREADS)];
  const engine = await startService({ bin, root, shapes: [], args: shared, prefix: 'alallo-bench-engine-' });
  const child = await startService({ bin, root, shapes: [], args: [...shared, '--inference', 'child'], prefix: 'alallo-bench-child-' });
  for (const svc of [engine, child]) fs.symlinkSync(dir, path.join(svc.models, name));
  const model = await llama.loadModel({ modelPath: gguf });
  const ids = JSON.parse(alallo(bin, ['tokenizer', 'encode', '--tokenizer', path.join(dir, 'tokenizer.json'), '--text', PROMPT]));
  const prompt = [model.tokens.bos, ...ids];
  const ctx = await model.createContext({ contextSize: 1024, sequences: 8, threads: THREADS });
  const lm = { ctx, eos: model.tokens.eos, free: Array.from({ length: 8 }, () => ctx.getSequence()) };
  const ways = {
    engine: () => viaApi(engine, name),
    child: () => viaApi(child, name),
    'llama.cpp': () => viaLlama(lm, prompt),
  };
  for (const way of Object.keys(ways)) await ways[way](); // warm: the engine loads the model once
  for (const c of [1, 8]) {
    const all = { engine: [], child: [], 'llama.cpp': [] };
    const secs = { engine: 0, child: 0, 'llama.cpp': 0 };
    for (let r = 0; r < ROUNDS; r++)
      for (const way of Object.keys(ways)) {
        const got = await round(c, PER[c], ways[way]);
        all[way].push(...got.out);
        secs[way] += got.s;
      }
    for (const way of Object.keys(ways)) {
      const xs = all[way];
      const tokens = xs.reduce((a, x) => a + x.tokens, 0);
      console.log(JSON.stringify({
        model: name, way, concurrent: c, requests: xs.length,
        p50_ms: Math.round(pct(xs.map((x) => x.ms), 50)), p99_ms: Math.round(pct(xs.map((x) => x.ms), 99)),
        p50_ttft_ms: way === 'llama.cpp' ? Math.round(pct(xs.map((x) => x.ttft), 50)) : null,
        req_per_s: +(xs.length / secs[way]).toFixed(2), tokens_per_s: +(tokens / secs[way]).toFixed(1),
        mean_tokens: +(tokens / xs.length).toFixed(1),
      }));
    }
  }
  await lm.ctx.dispose();
  await model.dispose();
  engine.stop();
  child.stop();
  await new Promise((r) => setTimeout(r, 500));
}
await llama.dispose();
process.exit(0);
