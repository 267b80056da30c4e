// calibrate.mjs - the body of bench/calibration/run.sh (see there).
import fs from 'node:fs';
import { apiCall, measuredWorkers, sleep, startService, uploadSamples } from '../lib/service.mjs';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const JOBS = Number(process.env.JOBS || 32);
const WAVE = Number(process.env.WAVE || 3);
const SCALE = Number(process.env.SCALE || 1); // multiplies every job's steps

const svc = await startService({
  bin: BIN, root: ROOT, shapes: ['tiny', 'small'], prefix: 'alallo-calib-',
  args: ['--local-worker', 'name=a,cpus=1,mem=4G,price=0.40',
    '--local-worker', 'name=b,cpus=1,mem=4G,price=0.80,class=spot'],
});
const call = apiCall(svc);
const workers = await measuredWorkers(call, 2);
process.stderr.write(`workers: ${workers.map((x) => `${x.name} ${JSON.stringify(x.speed)}`).join('; ')}\n`);

// Data sets of 50, 100 and 200 examples.
const files = await uploadSamples(svc, [50, 100, 200]);

// A varied, reproducible mix.
let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rnd() * a.length)];
function jobBody(i) {
  const model = rnd() < 0.3 ? 'small' : 'tiny';
  return {
    model,
    training_file: pick(files),
    hyperparameters: { n_epochs: pick([1, 2, 3]), batch_size: pick([4, 8]) },
    goal: pick(['lowest_cost', 'fastest_finish']),
    max_steps: SCALE * (model === 'small' ? pick([40, 80, 120]) : pick([150, 300, 600, 1000])),
    seed: i,
  };
}

const results = [];
const tlErrors = [];
const tlErrors5 = []; // samples with at least 5 s left
async function follow(created, t0) {
  const samples = [];
  const seen = {}; // when the follower first saw: running, a step, the last step
  let lastSteps = -1;
  for (;;) {
    const j = await call('GET', `/v1/fine_tuning/jobs/${created.id}`);
    const now = Date.now();
    if (j.status === 'running' && seen.running == null) seen.running = (now - t0) / 1000;
    if (j.progress.steps_done > 0 && seen.step == null) seen.step = (now - t0) / 1000;
    if (j.progress.steps_done !== lastSteps) {
      lastSteps = j.progress.steps_done;
      seen.progress = (now - t0) / 1000;
    }
    if (['succeeded', 'failed', 'cancelled'].includes(j.status)) {
      const actual = (now - t0) / 1000;
      for (const s of samples) {
        const left = (now - s.t) / 1000;
        // time_left is in whole seconds: with under a second left its
        // rounding alone is the error.
        if (left > 1) tlErrors.push(Math.abs(s.mid - left) / left);
        if (left >= 5) tlErrors5.push(Math.abs(s.mid - left) / left);
      }
      return { id: j.id, status: j.status, low: created.estimate.time?.low_s, high: created.estimate.time?.high_s, actual, model: created.model, steps: j.progress.max_steps, batch: j.hyperparameters?.batch_size, seen, estimate: created.estimate, goal: j.goal, workers: (j.attempts || []).map((a) => a.worker) };
    }
    if (j.status === 'running' && j.time_left && j.progress.percent >= 5 && j.progress.percent < 100)
      samples.push({ t: now, mid: (j.time_left.low_s + j.time_left.high_s) / 2, basis: j.time_left.basis });
    await sleep(100);
  }
}

for (let i = 0; i < JOBS; i += WAVE) {
  const wave = [];
  for (let k = i; k < Math.min(JOBS, i + WAVE); k++) {
    const t0 = Date.now();
    const created = await call('POST', '/v1/fine_tuning/jobs', jobBody(k));
    if (created.error) throw new Error(JSON.stringify(created));
    wave.push(follow(created, t0));
  }
  for (const r of await Promise.all(wave)) {
    results.push(r);
    process.stderr.write(`${results.length}/${JOBS} ${r.model} ${r.steps} steps: ${r.status}, ${r.actual.toFixed(1)} s in [${r.low}, ${r.high}]\n`);
  }
}
svc.stop();
if (process.env.DETAILS) fs.writeFileSync(process.env.DETAILS, JSON.stringify(results, null, 1));

const ok = results.filter((r) => r.status === 'succeeded' && r.high != null);
const inside = ok.filter((r) => r.actual >= r.low && r.actual <= r.high).length;
const above = ok.filter((r) => r.actual > r.high).length;
const median = (a) => {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.floor((s.length - 1) / 2)];
};
const firstHalf = ok.slice(0, Math.floor(ok.length / 2));
const secondHalf = ok.slice(Math.floor(ok.length / 2));
const cov = (a) => (a.length ? a.filter((r) => r.actual >= r.low && r.actual <= r.high).length / a.length : null);
console.log(JSON.stringify({
  jobs: results.length,
  succeeded: ok.length,
  coverage: ok.length ? inside / ok.length : null,
  above_high: ok.length ? above / ok.length : null,
  below_low: ok.length ? ok.filter((r) => r.actual < r.low).length / ok.length : null,
  coverage_first_half: cov(firstHalf),
  coverage_second_half: cov(secondHalf),
  time_left_median_abs_error_after_5pct: median(tlErrors),
  time_left_samples: tlErrors.length,
  time_left_median_abs_error_5s_or_more_left: median(tlErrors5),
  time_left_samples_5s_or_more_left: tlErrors5.length,
  median_range_ratio: median(ok.map((r) => r.high / Math.max(r.low, 1e-9))),
}));
