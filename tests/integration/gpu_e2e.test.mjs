// gpu_e2e.test.mjs - the service end to end with a GPU worker, for the GPU
// machine (scripts/gpu-check.sh runs it there): the real `alallo serve`
// with one local worker that declares the machine's first GPU
// (`--local-worker name=g,cpus=2,gpus=1,gpu_kind=KIND,gpu_mem=MEM`, KIND and
// MEM from nvidia-smi) takes a job on the tiny built-in model and
//  * plans it on that worker, which declares `resources.trainer: "cuda"`;
//  * runs it on the GPU: ATTEMPT.json says `"device": "cuda"` and the job's
//    log has the trainer's "matrix products on the GPU" line;
//  * bills it at the worker's price per GPU-hour: the ledger's net charge is
//    positive, equals the job's `price`, and is at most that price times
//    the GPUs times the attempt's hours;
//  * and the worker measured its speed with the GPU trainer.
//
// It skips, with one line that says why, when this alallo was built without
// CUDA (`alallo version` prints `cuda: no`) or when no GPU is visible
// (nvidia-smi missing or listing none): always so in CI and on machines
// without a GPU.
//
// A second test is for the other case, a CUDA build on a machine without a
// GPU (a developer's, with nvcc): the GPU worker still asks for "cuda" and
// its attempt fails with the trainer's "no GPU is visible" line; it skips
// elsewhere.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const PRICE = 36; // per hour, for the whole worker: one GPU, so also per GPU-hour

// Why this machine cannot run the test, or null when it can; sets `gpu`
// and `cudaBuilt`.
let gpu = null;
let cudaBuilt = false;
function whySkip() {
  const v = spawnSync(BIN, ['version'], { encoding: 'utf8', timeout: 30000 });
  if (v.status !== 0) return `${BIN} version failed (exit ${v.status}): ${v.stderr}`;
  if (!/^cuda: yes$/m.test(v.stdout)) return `${BIN} was built without CUDA (alallo version: cuda: no)`;
  cudaBuilt = true;
  // ALALLO_TEST_GPU="NAME,MIB" stands for nvidia-smi's line: the emulated
  // build (ALALLO_CUDA_EMU) sees one GPU that nvidia-smi does not
  const q = process.env.ALALLO_TEST_GPU
    ? { status: 0, stdout: process.env.ALALLO_TEST_GPU }
    : spawnSync('nvidia-smi', ['--query-gpu=name,memory.total', '--format=csv,noheader,nounits'], {
        encoding: 'utf8',
        timeout: 30000,
      });
  const first = q.status === 0 ? q.stdout.split('\n').find((l) => l.trim()) : undefined;
  if (!first) return `no GPU visible (nvidia-smi ${q.error ? 'not found' : `exit ${q.status}`})`;
  const [name, mib] = first.split(',').map((x) => x.trim());
  // "NVIDIA H200" -> "h200": a short name, as --local-worker's gpu_kind wants
  const kind = name.toLowerCase().replace(/^nvidia\s+/, '').replace(/[^a-z0-9._-]+/g, '-').slice(0, 31);
  if (!kind || !/^\d+$/.test(mib)) return `nvidia-smi printed a line this test cannot read: ${first}`;
  gpu = { name, kind, mem: `${mib}M` };
  return null;
}
const skip = whySkip();

test('a job is planned, run and billed on the GPU worker', { skip: skip || false, timeout: 420000 }, async () => {
  const s = await Serve.start({
    args: [
      '--models', tinyModelsDir(),
      '--local-worker', `name=g,cpus=2,gpus=1,gpu_kind=${gpu.kind},gpu_mem=${gpu.mem},price=${PRICE}`,
    ],
  });
  try {
    const file = (await s.upload('sentiment.jsonl', fs.readFileSync(SAMPLE))).json.id;
    const w = await waitFor(
      async () => (await s.call('GET', '/v1/workers')).json.data.find((x) => x.name === 'g' && x.state === 'active'),
      { timeoutMs: 180000, what: 'the GPU worker to register' },
    );
    assert.equal(w.resources.trainer, 'cuda', JSON.stringify(w));
    assert.equal(w.resources.gpus.count, 1, JSON.stringify(w));
    assert.equal(w.price_per_gpu_hour, PRICE, JSON.stringify(w));

    const est = await s.call('POST', '/v1/fine_tuning/estimates', {
      body: { model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1, batch_size: 8 } },
    });
    assert.equal(est.status, 200, est.text);
    assert.equal(est.json.plan.worker, 'g', est.text);
    assert.ok(est.json.plan.gpu, `planned without a GPU: ${est.text}`);

    const job = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(job.status, 200, job.text);
    const done = await s.waitStatus(job.json.id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 300000 });
    const log = (await s.call('GET', `/v1/fine_tuning/jobs/${job.json.id}/log`)).text;
    assert.equal(done.status, 'succeeded', `${JSON.stringify(done)}\n${log}`);
    assert.deepEqual(done.attempts.map((a) => a.worker), ['g']);

    // Run on the GPU: the worker asked for it, and the trainer says it used it.
    const attempt = done.attempts[0];
    const config = JSON.parse(fs.readFileSync(path.join(s.data, 'workers', 'g', 'attempts', attempt.id, 'ATTEMPT.json'), 'utf8'));
    assert.equal(config.device, 'cuda');
    assert.match(log, /matrix products on the GPU \(GPU \d+: /);
    assert.doesNotMatch(log, /matrix products on the \S+ path \(/);

    // Billed at the price per GPU-hour, for at most the attempt's time.
    const rows = [];
    for (let after = ''; ;) {
      const page = (await s.call('GET', `/v1/billing/ledger?limit=100${after}`)).json;
      rows.push(...page.data.filter((r) => r.job === job.json.id));
      if (!page.has_more || page.data.length === 0) break;
      after = `&after=${page.data[page.data.length - 1].id}`;
    }
    const net = rows.reduce((a, r) => a + (r.kind === 'charge' ? r.amount : -r.amount), 0);
    const charged = done.price.charged - done.price.refunded;
    assert.ok(charged > 0, JSON.stringify(done.price));
    assert.ok(Math.abs(net - charged) < 1e-6, `ledger ${net}, job ${charged}`);
    const hours = (attempt.ended_at - attempt.started_at + 2) / 3600; // whole seconds on both ends
    assert.ok(charged <= w.price_per_gpu_hour * w.resources.gpus.count * hours + 1e-6,
      `charged ${charged} for an attempt of at most ${hours * 3600} s at ${w.price_per_gpu_hour}/GPU-hour`);

    // Its speed was measured on the GPU trainer (docs/worker.md, "GPUs").
    const wlog = fs.readFileSync(path.join(s.data, 'workers', 'g', 'worker.log'), 'utf8');
    assert.match(wlog, /measured speed: [\d.]+ tokens\/s, \S+ FLOP\/s \(on cuda\)/, wlog);
  } finally {
    await s.stop();
  }
});

const noGpuSkip = !cudaBuilt ? skip : gpu ? 'a GPU is visible: the test above runs instead' : false;
test('a CUDA build with no GPU visible: the attempt asks for cuda and says no GPU is visible', { skip: noGpuSkip, timeout: 300000 }, async () => {
  const s = await Serve.start({
    args: ['--models', tinyModelsDir(), '--local-worker', 'name=g,cpus=1,gpus=1,gpu_kind=h100,gpu_mem=80G'],
  });
  try {
    const file = (await s.upload('sentiment.jsonl', fs.readFileSync(SAMPLE))).json.id;
    const job = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1 } });
    assert.equal(job.status, 200, job.text);
    const w = await waitFor(
      async () => (await s.call('GET', '/v1/workers')).json.data.find((x) => x.name === 'g'),
      { timeoutMs: 180000, what: 'the GPU worker to register' },
    );
    assert.equal(w.resources.trainer, 'cuda', JSON.stringify(w));
    const attempts = path.join(s.data, 'workers', 'g', 'attempts');
    const config = await waitFor(async () => {
      const ids = fs.existsSync(attempts) ? fs.readdirSync(attempts) : [];
      const f = ids.map((id) => path.join(attempts, id, 'ATTEMPT.json')).find((x) => fs.existsSync(x));
      return f && JSON.parse(fs.readFileSync(f, 'utf8'));
    }, { timeoutMs: 180000, what: 'the first ATTEMPT.json' });
    assert.equal(config.device, 'cuda');
    const log = await waitFor(async () => {
      const t = (await s.call('GET', `/v1/fine_tuning/jobs/${job.json.id}/log`)).text;
      return /device "cuda": no GPU is visible to the trainer/.test(t) && t;
    }, { timeoutMs: 180000, what: 'the trainer to say no GPU is visible' });
    assert.doesNotMatch(log, /training started/);
    // It measured its speed on the GPU too, which failed the same way.
    const wlog = fs.readFileSync(path.join(s.data, 'workers', 'g', 'worker.log'), 'utf8');
    assert.match(wlog, /speed unknown: bench exited with 1/, wlog);
  } finally {
    await s.stop();
  }
});
