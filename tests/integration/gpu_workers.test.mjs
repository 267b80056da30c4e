// gpu_workers.test.mjs - workers that declare GPUs, against the real
// `alallo serve` and its real local worker (docs/worker.md, "GPUs"):
//  * `--local-worker ...,gpus=2,gpu_kind=H200,gpu_mem=141G` registers with
//    its GPUs: the API lists them (count, kind, memory of one GPU, the price
//    per GPU-hour) and so does `alallo workers`;
//  * a job's estimate is planned on that worker, with the micro-batch that
//    fits one of its GPUs; a faster, free worker whose GPU is too small for
//    the job is never chosen, by the estimate or the scheduling pass;
//  * incomplete or bad declarations are refused with one clear line, by
//    `alallo worker`, `alallo serve` and the registration call;
//  * on a build without CUDA (CI's), the worker still serves, warns once at
//    start that its attempts train on the CPU, declares `trainer: "cpu"`
//    (`alallo workers`: "unused: no CUDA") and writes `"device": "cpu"`.
//
// No GPU is needed: on a build without CUDA a job on a GPU worker runs the
// CPU trainer; only declaring, planning and pricing are tested here. The
// GPU end to end is tests/integration/gpu_e2e.test.mjs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN, SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const GIB = 1024 ** 3;
// What this binary was built with: `alallo version` prints "cuda: yes|no".
const CUDA = /^cuda: yes$/m.test(spawnSync(BIN, ['version'], { encoding: 'utf8' }).stdout);
// A CUDA build where no GPU is visible (a build machine with nvcc): the
// declared GPU worker's attempts ask for cuda and fail, saying so.
const GPU_VISIBLE = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' }).status === 0;

async function internal(s, p, body) {
  const r = await fetch(s.url + p, {
    method: 'POST',
    headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

function alallo(args, env = {}) {
  const r = spawnSync(BIN, args, { encoding: 'utf8', timeout: 60000, env: { ...process.env, ...env } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('workers with GPUs', () => {
  let s;
  let file;
  before(async () => {
    s = await Serve.start({
      args: ['--models', tinyModelsDir(), '--local-worker', 'name=gpu-local,cpus=1,gpus=2,gpu_kind=H200,gpu_mem=141G,price=8'],
    });
    file = (await s.upload('sentiment.jsonl', fs.readFileSync(SAMPLE))).json.id;
  });
  after(async () => s && s.stop());

  test('the declaration is stored and listed, in the API and the CLI', async () => {
    const w = await waitFor(
      async () => {
        const list = (await s.call('GET', '/v1/workers')).json;
        return list && list.data.find((x) => x.name === 'gpu-local' && x.state === 'active');
      },
      { timeoutMs: 180000, what: 'the GPU worker to register' },
    );
    assert.deepEqual(w.resources.gpus, { count: 2, kind: 'h200', mem_bytes: 141 * GIB });
    assert.equal(w.price_per_hour, 8);
    assert.equal(w.price_per_gpu_hour, 4);
    const cli = alallo(['workers'], { ALALLO_URL: s.url, ALALLO_API_KEY: s.key });
    assert.equal(cli.status, 0, cli.stderr);
    assert.match(cli.stdout, /^NAME\s+STATE\s+CLASS\s+CPUS\s+MEMORY\s+GPUS\s+PRICE\/H/m);
    assert.match(cli.stdout, /^gpu-local\s+active\s.*\s2 x h200 \(141\.0 GiB\)\s/m);
    // Where its attempts train, and what it said at start about it.
    const warning = 'gpu-local: warning: 2 GPUs declared, but this alallo was built without CUDA: '
      + 'its attempts train on the CPU (build with CUDA as docs/trainer.md "GPU" says)';
    const log = fs.readFileSync(path.join(s.data, 'workers', 'gpu-local', 'worker.log'), 'utf8');
    if (CUDA) {
      assert.equal(w.resources.trainer, 'cuda');
      assert.ok(!log.includes('warning'), log);
      return;
    }
    assert.equal(w.resources.trainer, 'cpu');
    assert.match(cli.stdout, /^gpu-local\s.*\s2 x h200 \(141\.0 GiB\) unused: no CUDA\s/m);
    assert.equal(log.split('\n').filter((l) => l.includes(warning)).length, 1, log);
    assert.ok(s.output.includes(`worker ${warning}\n`), s.output);
  });

  test('an estimate is planned on the GPU worker, at a batch one GPU holds', async () => {
    await waitFor(
      async () => (await s.call('GET', '/v1/workers')).json.data.some((x) => x.name === 'gpu-local' && x.state === 'active'),
      { timeoutMs: 180000, what: 'the GPU worker to register' },
    );
    // Free, fast and with plenty of host memory, but its one GPU is smaller
    // than the job: it must not be chosen.
    const reg = await internal(s, '/internal/workers/register', {
      name: 'gpu-small', cpus: 64, mem_bytes: 512 * GIB, accelerator: 'cpu', price_per_hour: 0, class: 'on-demand',
      speed: { tokens_per_s: 1e9, flops: 1e16 }, gpus: { count: 1, kind: 'tiny-gpu', mem_bytes: GIB },
    });
    assert.equal(reg.status, 200, JSON.stringify(reg.json));
    for (const goal of ['lowest_cost', 'fastest_finish']) {
      const est = await s.call('POST', '/v1/fine_tuning/estimates', {
        body: { model: 'tiny', training_file: file, goal, hyperparameters: { n_epochs: 1, batch_size: 8 } },
      });
      assert.equal(est.status, 200, est.text);
      assert.equal(est.json.plan.worker, 'gpu-local', est.text);
      assert.equal(est.json.plan.gpu.batch, 8, est.text);
      assert.ok(est.json.plan.gpu.memory_bytes > GIB && est.json.plan.gpu.memory_bytes < 141 * GIB, est.text);
      assert.ok(est.json.price.high > 0, est.text);
    }
    // The scheduling pass judges the same way: the small GPU's claim gets
    // nothing, and the job runs on gpu-local (the CPU trainer on a build
    // without CUDA).
    const job = await s.createJob({ model: 'tiny', training_file: file, goal: 'lowest_cost', hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(job.status, 200, job.text);
    const claim = await internal(s, '/internal/workers/gpu-small/claim', {});
    assert.equal(claim.status, 204, JSON.stringify(claim.json));
    const done = await s.waitStatus(job.json.id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 300000 });
    assert.equal(done.status, CUDA && !GPU_VISIBLE ? 'failed' : 'succeeded', JSON.stringify(done));
    assert.equal(done.attempts[0].worker, 'gpu-local');
    const config = JSON.parse(fs.readFileSync(
      path.join(s.data, 'workers', 'gpu-local', 'attempts', done.attempts[0].id, 'ATTEMPT.json'), 'utf8'));
    assert.equal(config.device, CUDA ? 'cuda' : 'cpu');
  });

  test('a registration with a bad GPU declaration is refused and says why', async () => {
    const base = {
      name: 'bad-gpu', cpus: 1, mem_bytes: 4 * GIB, accelerator: 'cpu', price_per_hour: 1, class: 'on-demand',
      speed: { tokens_per_s: null, flops: null },
    };
    const cases = [
      [{ count: 0, kind: 'h200', mem_bytes: 80 * GIB }, /gpus\.count must be a whole number from 1 to 64/],
      [{ count: 2, mem_bytes: 80 * GIB }, /gpus\.kind must be a short name/],
      [{ count: 2, kind: 'h200', mem_bytes: 1024 }, /gpus\.mem_bytes must be the memory of one GPU/],
      [8, /gpus must be an object/],
    ];
    for (const [gpus, why] of cases) {
      const r = await internal(s, '/internal/workers/register', { ...base, gpus });
      assert.equal(r.status, 400, JSON.stringify(r.json));
      assert.match(r.json.error.message, why);
    }
    const trainer = await internal(s, '/internal/workers/register', { ...base, trainer: 'tpu' });
    assert.equal(trainer.status, 400, JSON.stringify(trainer.json));
    assert.match(trainer.json.error.message, /trainer must be "cpu" or "cuda"/);
    const list = (await s.call('GET', '/v1/workers')).json;
    assert.ok(!list.data.some((x) => x.name === 'bad-gpu'));
  });
});

test('alallo worker and alallo serve refuse an incomplete GPU declaration in one line', () => {
  const w = alallo(['worker', '--server', 'http://127.0.0.1:9', '--token', 't', '--gpus', '2', '--gpu-kind', 'a100']);
  assert.equal(w.status, 2);
  assert.equal(w.stderr, 'alallo worker: gpus=2 needs gpu_kind (such as h200) and gpu_mem (the memory of one GPU, such as 80G)\n');
  const zero = alallo(['worker', '--server', 'http://127.0.0.1:9', '--token', 't', '--gpus', '0']);
  assert.equal(zero.status, 2);
  assert.equal(zero.stderr, 'alallo worker: gpus=0: expected a whole number from 1 to 64\n');
  const mem = alallo(['worker', '--server', 'http://127.0.0.1:9', '--token', 't', '--gpus', '1', '--gpu-kind', 'l4', '--gpu-mem', '-24G']);
  assert.equal(mem.status, 2);
  assert.match(mem.stderr, /^alallo worker: gpu_mem=-24G: expected the memory of one GPU/);
  const dir = fs.mkdtempSync('/tmp/alallo-gpu-serve-');
  try {
    const serve = alallo(['serve', '--port', '0', '--data', dir, '--local-worker', 'name=g,gpu_mem=80G']);
    assert.notEqual(serve.status, 0);
    assert.match(serve.stderr, /--local-worker name=g,gpu_mem=80G: gpu_kind and gpu_mem need gpus/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('an engine pool declared with gres and gpu_mem makes GPU workers of its slots', async () => {
  const { startEngineServe } = await import('../slurm/engine_harness.mjs');
  const s = await startEngineServe({
    executor: 'process',
    pools: ['name=h100,partition=local,gres=gpu:H100:4,gpu_mem=80G,mem=4G,class=on-demand,price=12/h,slots=1'],
  });
  try {
    const slot = await waitFor(
      async () => (await s.call('GET', '/v1/workers')).json.data.find((x) => x.resources && x.resources.gpus),
      { timeoutMs: 60000, what: 'the pool\'s slot to be declared' },
    );
    assert.deepEqual(slot.resources.gpus, { count: 4, kind: 'h100', mem_bytes: 80 * GIB });
    assert.equal(slot.price_per_gpu_hour, 3);
  } finally {
    await s.stop();
  }
});
