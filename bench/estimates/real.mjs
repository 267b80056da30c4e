// real.mjs - the body of bench/estimates/real.sh (see there).
import fs from 'node:fs';
import { apiCall, measuredWorkers, sleep, startService } from '../lib/service.mjs';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const JOBS = Number(process.env.JOBS || 32);
const SCALE = Number(process.env.SCALE || 1); // multiplies every job's steps
const TARGET = { before: 1.8, at20: 1.3, coverage: 0.9 };

const svc = await startService({
  bin: BIN, root: ROOT, shapes: [], builtin: true, prefix: 'alallo-estimates-',
  args: ['--local-worker', 'name=local,cpus=1,mem=4G,price=0.40'],
});
const { url, key } = svc;
const H = { Authorization: `Bearer ${key}` };
const call = apiCall(svc);
await measuredWorkers(call, 1);

async function upload(name, lines) {
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', new Blob([`${lines.join('\n')}\n`]), name);
  const r = await fetch(`${url}/v1/files`, { method: 'POST', headers: H, body: form });
  const j = await r.json();
  if (!j.id) throw new Error(`upload ${name}: ${JSON.stringify(j)}`);
  return j.id;
}
// Supervised data: the sample's first 120 conversations. Preference data:
// 60 generated questions, each with a preferred and another answer.
const sample = fs.readFileSync(svc.sample, 'utf8').trim().split('\n');
const sft = await upload('sft.jsonl', sample.slice(0, 120));
const topics = ['river', 'garden', 'engine', 'bridge', 'market', 'forest', 'harbor', 'library', 'mountain', 'station'];
const pairs = [];
for (let i = 0; i < 60; i++) {
  const t = `${topics[i % topics.length]} ${i}`;
  pairs.push(JSON.stringify({
    input: { messages: [{ role: 'user', content: `Describe the ${t} in a few words.` }] },
    preferred_output: [{ role: 'assistant', content: `The ${t} is calm and bright.` }],
    non_preferred_output: [{ role: 'assistant', content: `No idea about the ${t}.` }],
  }));
}
const dpo = await upload('dpo.jsonl', pairs);

// A reproducible mix: sizes short (6-12 steps), medium (20-30), long
// (40-60); 4-bit on a third; batch 4, 8 or 16; dpo on a quarter.
let seed = 4242;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rnd() * a.length)];
function jobBody(i) {
  const method = rnd() < 0.25 ? 'dpo' : 'sft';
  const size = pick(['short', 'short', 'medium', 'long']);
  const steps = { short: pick([6, 9, 12]), medium: pick([20, 25, 30]), long: pick([40, 50, 60]) }[size];
  const batch = pick([4, 4, 8, 8, 16]);
  const body = {
    model: 'alallo-base',
    training_file: method === 'dpo' ? dpo : sft,
    precision: rnd() < 0.33 ? '4-bit' : '16-bit',
    max_steps: SCALE * steps,
    seed: i,
  };
  if (method === 'dpo') body.method = { type: 'dpo', dpo: { hyperparameters: { batch_size: batch, beta: 0.1 } } };
  else body.hyperparameters = { batch_size: batch };
  return body;
}

const results = [];
async function follow(created, t0) {
  const marks = [0.2, 0.5];
  const at = [null, null];
  for (;;) {
    const j = await call('GET', `/v1/fine_tuning/jobs/${created.id}`);
    const now = Date.now();
    if (['succeeded', 'failed', 'cancelled'].includes(j.status)) {
      const actual = (now - t0) / 1000;
      const paid = (j.price?.charged ?? 0) - (j.price?.refunded ?? 0);
      return {
        id: j.id, status: j.status, method: j.method?.type, precision: j.precision,
        steps: j.progress.max_steps, actual, paid,
        low: created.estimate.time?.low_s, high: created.estimate.time?.high_s,
        price_low: created.estimate.price?.low, price_high: created.estimate.price?.high,
        at: at.map((a) => a && { ...a, left: (now - a.t) / 1000 }),
      };
    }
    const frac = j.progress.max_steps ? j.progress.steps_done / j.progress.max_steps : 0;
    for (let k = 0; k < 2; k++)
      if (!at[k] && j.status === 'running' && j.time_left && j.time_left.basis === 'pace' &&
          frac >= marks[k] && frac < 1)
        at[k] = { t: now, low: j.time_left.low_s, high: j.time_left.high_s };
    await sleep(150);
  }
}

// Waves: one at a time, then three together, alternately.
for (let i = 0, wave = 1; i < JOBS; i += wave, wave = wave === 1 ? 3 : 1) {
  const batch = [];
  for (let k = i; k < Math.min(JOBS, i + wave); k++) {
    const t0 = Date.now();
    const created = await call('POST', '/v1/fine_tuning/jobs', jobBody(k));
    if (created.error) throw new Error(JSON.stringify(created));
    batch.push(follow(created, t0));
  }
  for (const r of await Promise.all(batch.map((p) => p.then((r) => { report(r); return r; })))) results.push(r);
}
function report(r) {
  {
    process.stderr.write(`${r.id} ${r.method} ${r.precision} ${r.steps} steps: ${r.status}, ` +
      `${r.actual.toFixed(1)} s in [${r.low}, ${r.high}], paid ${r.paid} in [${r.price_low}, ${r.price_high}]` +
      `${r.at.map((a, k) => (a ? `; at ${k ? 50 : 20}%: ${a.left.toFixed(1)} s in [${a.low}, ${a.high}]` : '')).join('')}\n`);
  }
}
svc.stop();
if (process.env.DETAILS) fs.writeFileSync(process.env.DETAILS, JSON.stringify(results, null, 1));

const median = (a) => {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const share = (a, f) => (a.length ? a.filter(f).length / a.length : null);
const ok = results.filter((r) => r.status === 'succeeded' && r.high != null && r.low > 0);
const priced = ok.filter((r) => r.price_high != null);
const at = (k) => ok.filter((r) => r.at[k] && r.at[k].low > 0);
const out = {
  jobs: results.length,
  succeeded: ok.length,
  before_start: {
    width: median(ok.map((r) => r.high / r.low)),
    coverage: share(ok, (r) => r.actual >= r.low && r.actual <= r.high),
    above: share(ok, (r) => r.actual > r.high),
    price_width: median(priced.filter((r) => r.price_low > 0).map((r) => r.price_high / r.price_low)),
    price_coverage: share(priced, (r) => r.paid >= r.price_low - 1e-9 && r.paid <= r.price_high + 1e-9),
  },
};
for (const [k, name] of [[0, 'at_20pct'], [1, 'at_50pct']]) {
  const a = at(k);
  out[name] = { jobs: a.length, width: median(a.map((r) => r.at[k].high / r.at[k].low)),
    coverage: share(a, (r) => r.at[k].left >= r.at[k].low && r.at[k].left <= r.at[k].high) };
}
console.log(JSON.stringify(out));
const b = out.before_start;
const fails = [];
if (!(b.width <= TARGET.before)) fails.push(`median width before start ${b.width} > ${TARGET.before}`);
if (!(b.coverage >= TARGET.coverage)) fails.push(`time coverage ${b.coverage} < ${TARGET.coverage}`);
if (!(b.price_coverage >= TARGET.coverage)) fails.push(`price coverage ${b.price_coverage} < ${TARGET.coverage}`);
if (!(out.at_20pct.width <= TARGET.at20)) fails.push(`median width at 20% ${out.at_20pct.width} > ${TARGET.at20}`);
if (!(out.at_50pct.width <= out.at_20pct.width)) fails.push('the range does not narrow from 20% to 50%');
for (const f of fails) process.stderr.write(`below target: ${f}\n`);
process.exit(fails.length ? 1 : 0);
