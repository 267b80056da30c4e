// real.mjs - the body of bench/estimates/real.sh (see there).
import fs from 'node:fs';
import os from 'node:os';
import { summary } from './summary.mjs';
import { apiCall, measuredWorkers, sleep, startService } from '../lib/service.mjs';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const JOBS = Number(process.env.JOBS || 32);
const SCALE = Number(process.env.SCALE || 1); // multiplies every job's steps
const TARGET = { before: 1.8, at20: 1.3, coverage: 0.9 };
// The local worker's hourly rate. It changes no estimate, only the size
// of the amounts: at 0.40 a job costs $0.0005 to $0.03, and amounts shown
// to 4 decimals (low end down, high end up) widen such a price range by
// up to 10% on their own.
const PRICE = process.env.PRICE || '0.40';
if (!(Number(PRICE) >= 0)) throw new Error(`PRICE ${PRICE}: a rate per hour`);
// MIX: sft-dpo (the default: supervised and preference jobs), or
// rft-python / rft-check: reinforcement jobs graded by a python grader
// (one sandboxed run per answer, the estimate's python term) or by a
// string_check (no grading term), on 40 generated prompts.
const MIX = process.env.MIX || 'sft-dpo';
if (!['sft-dpo', 'rft-python', 'rft-check'].includes(MIX)) throw new Error(`MIX ${MIX}: sft-dpo, rft-python or rft-check`);
const GRADERS = {
  'rft-python': { type: 'python', name: 'has_reference',
    source: 'def grade(sample, item):\n    return 1.0 if item["reference"] in sample["output_text"] else 0.0\n' },
  'rft-check': { type: 'string_check', name: 'has_reference', input: '{{sample.output_text}}',
    reference: '{{item.reference}}', operation: 'ilike' },
};

// OLD_BIN: a second service of that binary beside this one; every wave
// runs on both, one after the other (which first alternates wave by wave),
// so the two are measured at the same machine load, and each service's
// figures are printed apart.
const services = [];
for (const [name, bin] of [['new', BIN], ...(process.env.OLD_BIN ? [['old', process.env.OLD_BIN]] : [])]) {
  const svc = await startService({
    bin, root: ROOT, shapes: [], builtin: true, prefix: 'alallo-estimates-',
    args: ['--local-worker', `name=local,cpus=1,mem=4G,price=${PRICE}`],
  });
  const call = apiCall(svc);
  await measuredWorkers(call, 1);
  const s = { name, svc, call, url: svc.url, H: { Authorization: `Bearer ${svc.key}` }, results: [] };
  const sample = fs.readFileSync(svc.sample, 'utf8').trim().split('\n');
  s.sft = await upload(s, 'sft.jsonl', sample.slice(0, 120));
  s.dpo = await upload(s, 'dpo.jsonl', preferencePairs());
  if (MIX !== 'sft-dpo') s.rft = await upload(s, 'rft.jsonl', rftPrompts());
  services.push(s);
}

async function upload(s, name, lines) {
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', new Blob([`${lines.join('\n')}\n`]), name);
  const r = await fetch(`${s.url}/v1/files`, { method: 'POST', headers: s.H, body: form });
  const j = await r.json();
  if (!j.id) throw new Error(`upload ${name}: ${JSON.stringify(j)}`);
  return j.id;
}
// Supervised data: the sample's first 120 conversations. Preference data:
// 60 generated questions, each with a preferred and another answer.
function preferencePairs() {
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
  return pairs;
}

// Reinforcement prompts: 40 generated questions, each with the word its
// answer should hold.
function rftPrompts() {
  const words = ['harbor', 'union', 'navy', 'treasury', 'river', 'garden', 'engine', 'bridge'];
  const lines = [];
  for (let i = 0; i < 40; i++) {
    const w = words[i % words.length];
    lines.push(JSON.stringify({ messages: [{ role: 'user', content: `Say something of the ${w}, number ${i}.` }],
      reference: w }));
  }
  return lines;
}

// A reproducible mix: sizes short (6-12 steps), medium (20-30), long
// (40-60); 4-bit on a third; batch 4, 8 or 16; dpo on a quarter.
let seed = 4242;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rnd() * a.length)];
// One job of the mix, drawn once: a function of the job's number and the
// service it is sent to (whose file ids it uses).
function jobMix() {
  if (MIX !== 'sft-dpo') return rftMix();
  const method = rnd() < 0.25 ? 'dpo' : 'sft';
  const size = pick(['short', 'short', 'medium', 'long']);
  const steps = { short: pick([6, 9, 12]), medium: pick([20, 25, 30]), long: pick([40, 50, 60]) }[size];
  const batch = pick([4, 4, 8, 8, 16]);
  const precision = rnd() < 0.33 ? '4-bit' : '16-bit';
  return (i, s) => {
    const body = {
      model: 'alallo-base',
      training_file: method === 'dpo' ? s.dpo : s.sft,
      precision,
      max_steps: SCALE * steps,
      seed: i,
    };
    if (method === 'dpo') body.method = { type: 'dpo', dpo: { hyperparameters: { batch_size: batch, beta: 0.1 } } };
    else body.hyperparameters = { batch_size: batch };
    return body;
  };
}

// Reinforcement jobs: 2 to 8 steps of 2 or 4 prompts, 4 answers each (of
// at most 64 tokens), validation rewards on the first 16 prompts at the
// default rhythm; 4-bit on a third.
function rftMix() {
  const steps = pick([2, 3, 4, 6, 8]);
  const batch = pick([2, 4]);
  const precision = rnd() < 0.33 ? '4-bit' : '16-bit';
  return (i, s) => ({
    model: 'alallo-base', training_file: s.rft, precision, max_steps: SCALE * steps, seed: i,
    method: { type: 'reinforcement', reinforcement: { grader: GRADERS[MIX],
      hyperparameters: { batch_size: batch, reasoning_effort: 'low' } } },
  });
}

// The job ended between the last look that saw it running (its answer's
// arrival, `running`) and the look that saw it ended (`now`): its end is
// taken as the middle of the two, so that the 150 ms between looks does
// not add a mean 75 ms or more to every job's truth (at 50% of a 240-step
// job, 3% of what is left). `actual_seen` and `left_seen` keep the truth
// as seen, to `now`.
async function follow(s, created, t0, load) {
  const marks = [0.2, 0.5];
  const at = [null, null];
  let running = null;
  for (;;) {
    const j = await s.call('GET', `/v1/fine_tuning/jobs/${created.id}`);
    const now = Date.now();
    if (['succeeded', 'failed', 'cancelled'].includes(j.status)) {
      const end = running === null ? now : (running + now) / 2;
      const paid = (j.price?.charged ?? 0) - (j.price?.refunded ?? 0);
      return {
        bin: s.name, load, id: j.id, status: j.status, method: j.method?.type, precision: j.precision,
        steps: j.progress.max_steps, actual: (end - t0) / 1000, actual_seen: (now - t0) / 1000, paid,
        low: created.estimate.time?.low_s, high: created.estimate.time?.high_s,
        price_low: created.estimate.price?.low, price_high: created.estimate.price?.high,
        terms: created.estimate.terms ?? null,
        at: at.map((a) => a && { ...a, left: (end - a.t) / 1000, left_seen: (now - a.t) / 1000 }),
      };
    }
    running = now;
    const frac = j.progress.max_steps ? j.progress.steps_done / j.progress.max_steps : 0;
    for (let k = 0; k < 2; k++)
      if (!at[k] && j.status === 'running' && j.time_left && j.time_left.basis === 'pace' &&
          frac >= marks[k] && frac < 1)
        at[k] = { t: now, done: Math.round(frac * 1000) / 1000, low: j.time_left.low_s, high: j.time_left.high_s };
    await sleep(150);
  }
}

// Waves: one at a time, then three together, alternately. Bodies are
// drawn once per wave, so both services get the same jobs.
for (let i = 0, wave = 1, w = 0; i < JOBS; i += wave, wave = wave === 1 ? 3 : 1, w++) {
  const bodies = [];
  for (let k = i; k < Math.min(JOBS, i + wave); k++) bodies.push({ k, mix: jobMix() });
  const order = w % 2 ? [...services].reverse() : services;
  for (const s of order) {
    const batch = [];
    for (const { k, mix } of bodies) {
      const t0 = Date.now();
      const load = os.loadavg()[0];
      const created = await s.call('POST', '/v1/fine_tuning/jobs', mix(k, s));
      if (created.error) throw new Error(JSON.stringify(created));
      batch.push(follow(s, created, t0, load).then((r) => { report(r); return r; }));
    }
    for (const r of await Promise.all(batch)) s.results.push(r);
  }
  // Kept as the run goes, so a run stopped early still leaves its jobs.
  if (process.env.DETAILS)
    fs.writeFileSync(process.env.DETAILS, JSON.stringify(services.flatMap((s) => s.results), null, 1));
}
function report(r) {
  {
    process.stderr.write(`${r.bin} load ${r.load.toFixed(1)} ${r.id} ${r.method} ${r.precision} ${r.steps} steps: ${r.status}, ` +
      `${r.actual.toFixed(1)} s in [${r.low}, ${r.high}], paid ${r.paid} in [${r.price_low}, ${r.price_high}]` +
      `${r.at.map((a, k) => (a ? `; at ${k ? 50 : 20}%: ${a.left.toFixed(1)} s in [${a.low}, ${a.high}]` : '')).join('')}\n`);
  }
}
for (const s of services) s.svc.stop();
const all = services.flatMap((s) => s.results);
if (process.env.DETAILS) fs.writeFileSync(process.env.DETAILS, JSON.stringify(all, null, 1));

const outs = Object.fromEntries(services.map((s) => [s.name, summary(s.results)]));
console.log(JSON.stringify(services.length > 1 ? outs : outs.new));
const out = outs.new;
const b = out.before_start;
const fails = [];
if (!(b.width <= TARGET.before)) fails.push(`median width before start ${b.width} > ${TARGET.before}`);
if (!(b.coverage >= TARGET.coverage)) fails.push(`time coverage ${b.coverage} < ${TARGET.coverage}`);
if (!(b.price_coverage >= TARGET.coverage)) fails.push(`price coverage ${b.price_coverage} < ${TARGET.coverage}`);
if (!(out.at_20pct.width <= TARGET.at20)) fails.push(`median width at 20% ${out.at_20pct.width} > ${TARGET.at20}`);
if (!(out.at_50pct.width <= out.at_20pct.width)) fails.push('the range does not narrow from 20% to 50%');
for (const f of fails) process.stderr.write(`below target: ${f}\n`);
process.exit(fails.length ? 1 : 0);
