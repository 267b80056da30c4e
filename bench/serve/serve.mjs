// serve.mjs - the benchmark of bench/serve/run.sh (see there).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { alallo, apiCall, sleep, startService, uploadSamples } from '../lib/service.mjs';

const [bin, root] = process.argv.slice(2);
const ROUNDS = Number(process.env.ROUNDS || 2);
const CONCURRENT = (process.env.CONCURRENT || '1,8,32').split(',').map(Number);
const PER = Object.fromEntries(CONCURRENT.map((c) => [c, Number(process.env[`N${c}`] || Math.max(3, c))])); // requests per round
const THREADS = Number(process.env.THREADS || os.cpus().length);
const MODELS = (process.env.MODELS || 'built-in,124m').split(',');
const WAYS = (process.env.WAYS || 'engine,child,llama.cpp').split(',');
const BASELINE = process.env.BASELINE; // another alallo binary: the way 'baseline' is its engine
const ADAPTERS = Number(process.env.ADAPTERS || 8);
const ADAPTER_STEPS = Number(process.env.ADAPTER_STEPS || 20);
const RELOAD = process.env.RELOAD === '1'; // every way loads its model again before each round
if (WAYS.includes('baseline') && !BASELINE) throw new Error('the way baseline needs BASELINE=path/to/alallo');
const SEQUENCES = Math.max(...CONCURRENT); // llama.cpp's sequences: one per client
const TOKENS = 16;
const PROMPT = 'The President of the United States said that the Congress of the nation has the power to';
const { getLlama } = await import(path.join(root, 'tests/node_modules/node-llama-cpp/dist/index.js'));

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : null;
};

// A percentile of the times to first token of the answers that had one.
const ttftPct = (xs, p) => {
  const ts = xs.map((x) => x.ttft).filter((t) => t !== null);
  return ts.length ? Math.round(pct(ts, p)) : null;
};

// One streamed completion through the API: { ms, ttft, tokens }, the time
// to first token when the first chunk with text arrived, the tokens the
// usage chunk counts. A 429 (the child path lets 2 generations run and 2
// of one account wait) is tried again after 50 ms, the wait counted in the
// latency, as a client that retries would see it.
async function viaApi(svc, model, maxTokens = TOKENS) {
  const t0 = performance.now();
  for (;;) {
    const r = await fetch(`${svc.url}/v1/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${svc.key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, prompt: PROMPT, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
    });
    if (r.status === 429) {
      await r.text();
      await new Promise((res) => setTimeout(res, 50));
      continue;
    }
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    let ttft = null;
    let tokens = null;
    let text = '';
    let answer = '';
    const decoder = new TextDecoder();
    for await (const part of r.body) {
      text += decoder.decode(part, { stream: true });
      const events = text.split('\n\n');
      text = events.pop();
      for (const e of events) {
        if (!e.startsWith('data: ') || e === 'data: [DONE]') continue;
        const j = JSON.parse(e.slice(6));
        if (ttft === null && j.choices[0] && j.choices[0].text) ttft = performance.now() - t0;
        if (j.choices[0]) answer += j.choices[0].text || '';
        if (j.usage) tokens = j.usage.completion_tokens;
      }
    }
    if (tokens === null) throw new Error('the stream ended without its usage');
    return { ms: performance.now() - t0, ttft, tokens, model, answer };
  }
}

// One completion by llama.cpp on a sequence of its own: { ms, ttft, tokens }.
// The context's sequences (one per client) are made once and lent, their history cleared
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

// ADAPTERS LoRA fine-tunes of model `name` trained on svc's local worker
// (short jobs, each its own seed and learning rate); their model ids.
async function trainAdapters(svc, name) {
  const call = apiCall(svc);
  const files = await uploadSamples(svc, Array.from({ length: ADAPTERS }, (_, k) => 4 + 4 * k));
  const ids = [];
  for (let k = 0; k < ADAPTERS; k++) {
    const j = await call('POST', '/v1/fine_tuning/jobs', {
      model: name, training_file: files[k], seed: 100 + k,
      hyperparameters: { n_epochs: 10, batch_size: 2, max_steps: ADAPTER_STEPS, learning_rate_multiplier: 10 },
    });
    if (!j.id) throw new Error(`an adapter job: ${JSON.stringify(j)}`);
    ids.push(j.id);
  }
  const models = [];
  for (const id of ids)
    for (;;) {
      const j = await call('GET', `/v1/fine_tuning/jobs/${id}`);
      if (j.status === 'succeeded') {
        models.push(j.fine_tuned_model);
        break;
      }
      if (['failed', 'cancelled'].includes(j.status)) throw new Error(`adapter job ${id}: ${j.status} ${j.message}`);
      await sleep(500);
    }
  return models;
}

for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(1)); // the servers' exit handlers run
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-bench-serve-'));
process.on('exit', () => fs.rmSync(work, { recursive: true, force: true }));
// The built-in model, and randomly initialised shapes on its tokenizer
// (124m; 1b, Llama-3.2-1B-class, 1.24B parameters: about 5 GB in fp32 for
// the engine and as many for llama.cpp, and each child loads it again).
const models = MODELS.map((name) => [name, name === 'built-in' ? path.join(root, 'models/alallo-base') : path.join(work, name)]);
for (const [name, dir] of models)
  if (name !== 'built-in') alallo(bin, ['model', 'init', '--shape', name, '--tokenizer', path.join(root, 'models/alallo-base/tokenizer.json'), '--out', dir]);
const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1];
console.log(JSON.stringify({ machine: `${os.cpus().length} CPUs, ${cpu}`, load: os.loadavg()[0], threads: THREADS, prompt: PROMPT, max_tokens: TOKENS, rounds: ROUNDS, requests_per_round: PER }));

const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: THREADS });
for (const [name, dir] of models) {
  const gguf = path.join(work, `${name}.gguf`);
  alallo(bin, ['export', '--model-dir', dir, '--format', 'gguf', '--dtype', 'f32', '--out', gguf]);
  const shared = ['--local-worker', 'none', '--inference-threads', String(THREADS)];
  // The services of the ways engine, child and baseline, each with the
  // model linked in (started again for each round under RELOAD).
  const startWays = async () => {
    const svcs = {
      engine: await startService({ bin, root, shapes: [], args: shared, prefix: 'alallo-bench-engine-' }),
      child: await startService({ bin, root, shapes: [], args: [...shared, '--inference', 'child'], prefix: 'alallo-bench-child-' }),
      baseline: WAYS.includes('baseline') ? await startService({ bin: BASELINE, root, shapes: [], args: shared, prefix: 'alallo-bench-baseline-' }) : null,
    };
    for (const svc of Object.values(svcs).filter(Boolean)) fs.symlinkSync(dir, path.join(svc.models, name));
    return svcs;
  };
  let { engine, child, baseline } = await startWays();
  // the adapters' service: its local worker trains them, then idles
  const tuned = WAYS.includes('adapters')
    ? await startService({ bin, root, shapes: [], args: ['--local-worker', `name=w,cpus=${THREADS},mem=16G`, '--inference-threads', String(THREADS)], prefix: 'alallo-bench-adapters-' })
    : null;
  if (tuned) fs.symlinkSync(dir, path.join(tuned.models, name));
  const adapters = tuned ? await trainAdapters(tuned, name) : [];
  let turn = 0;
  // llama.cpp's model and context (under RELOAD read into memory of its
  // own, not mapped, so that loading again takes new memory as the
  // engine's does; the file's cached pages would be the same each time)
  const loadLlama = async () => {
    const model = await llama.loadModel({ modelPath: gguf, ...(RELOAD ? { useMmap: false } : {}) });
    const ctx = await model.createContext({ contextSize: 256, sequences: SEQUENCES, threads: THREADS });
    return { model, ctx, eos: model.tokens.eos, free: Array.from({ length: SEQUENCES }, () => ctx.getSequence()) };
  };
  let lm = await loadLlama();
  const model = lm.model;
  const ids = JSON.parse(alallo(bin, ['tokenizer', 'encode', '--tokenizer', path.join(dir, 'tokenizer.json'), '--text', PROMPT]));
  const prompt = [model.tokens.bos, ...ids];
  const every = {
    engine: () => viaApi(engine, name),
    child: () => viaApi(child, name),
    baseline: () => viaApi(baseline, name),
    'llama.cpp': () => viaLlama(lm, prompt),
    adapters: () => viaApi(tuned, adapters[turn++ % adapters.length]),
  };
  const ways = Object.fromEntries(WAYS.map((w) => [w, every[w]]));
  for (const way of Object.keys(ways)) await ways[way](); // warm: the engine loads the model once
  // each fine-tune alone, and the base on the same service: what each
  // answer of the rounds must equal
  const alone = {};
  for (const m of adapters) alone[m] = (await viaApi(tuned, m)).answer;
  const baseAnswer = tuned ? (await viaApi(tuned, name)).answer : null;
  for (const c of CONCURRENT) {
    const all = Object.fromEntries(WAYS.map((w) => [w, []]));
    const secs = Object.fromEntries(WAYS.map((w) => [w, 0]));
    for (let r = 0; r < ROUNDS; r++) {
      if (RELOAD && r > 0) { // new processes, new memory: this VM's memory is not all as fast
        for (const svc of [engine, child, baseline].filter(Boolean)) svc.stop();
        await lm.ctx.dispose();
        await lm.model.dispose();
        await new Promise((res) => setTimeout(res, 500));
        ({ engine, child, baseline } = await startWays());
        lm = await loadLlama();
        for (const way of Object.keys(ways)) if (way !== 'adapters') await ways[way](); // warm: each loads its model
      }
      for (const way of Object.keys(ways)) {
        const got = await round(c, PER[c], ways[way]);
        all[way].push(...got.out);
        secs[way] += got.s;
      }
    }
    // Where no answer had text (a random shape's tokens past the
    // tokenizer's vocabulary decode to nothing), the time to first token
    // is measured as the whole time of a one-token completion, alone, in
    // alternating rounds after the others (it counts the answer's end as
    // well, so it is the longer of the two): marked ttft_by. At one client
    // only: alone is not what a request meets among others.
    const noText = c !== 1 ? [] : Object.keys(ways).filter((w) => w !== 'llama.cpp' && w !== 'adapters' && ttftPct(all[w], 50) === null);
    const firsts = Object.fromEntries(noText.map((w) => [w, []]));
    const byApi = { engine, child, baseline };
    for (let r = 0; r < ROUNDS && noText.length; r++)
      for (const way of noText)
        for (let k = 0; k < PER[1] || k < 3; k++)
          firsts[way].push({ ttft: (await viaApi(byApi[way], name, 1)).ms });
    for (const way of Object.keys(ways)) {
      const xs = all[way];
      const ttfts = firsts[way] || xs;
      const tokens = xs.reduce((a, x) => a + x.tokens, 0);
      const own = way === 'adapters' ? {
        adapters: adapters.length,
        own_answers: xs.filter((x) => x.answer === alone[x.model]).length,
        distinct_from_base: adapters.filter((m) => alone[m] !== baseAnswer).length,
      } : {};
      if (way === 'adapters' && own.own_answers !== xs.length)
        throw new Error(`adapters: ${xs.length - own.own_answers} answers differ from their fine-tune's answer alone`);
      console.log(JSON.stringify({
        model: name, way, concurrent: c, requests: xs.length, ...own,
        p50_ms: Math.round(pct(xs.map((x) => x.ms), 50)), p99_ms: Math.round(pct(xs.map((x) => x.ms), 99)),
        p50_ttft_ms: ttftPct(ttfts, 50), p99_ttft_ms: ttftPct(ttfts, 99),
        ...(firsts[way] ? { ttft_by: 'one-token completions' } : {}),
        req_per_s: +(xs.length / secs[way]).toFixed(2), tokens_per_s: +(tokens / secs[way]).toFixed(1),
        mean_tokens: +(tokens / xs.length).toFixed(1),
      }));
    }
  }
  await lm.ctx.dispose();
  await lm.model.dispose();
  engine.stop();
  child.stop();
  if (baseline) baseline.stop();
  if (tuned) tuned.stop();
  await new Promise((r) => setTimeout(r, 500));
}
await llama.dispose();
process.exit(0);
