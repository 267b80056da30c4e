// sched_moves.test.mjs - re-scheduling with real processes: a job whose
// measured memory outgrows its worker moves to a bigger one and continues
// from its checkpoint; a worker killed with SIGKILL (its trainer with it)
// leaves the job to another worker, and the ledger charges each step of the
// final model exactly once.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';

import { SAMPLE, Serve, ledgerOf, startWorker as startHarnessWorker, tinyModelsDir, waitFor } from './service_harness.mjs';

async function start(args) {
  const s = await Serve.start({ args: ['--models', tinyModelsDir(), ...args] });
  const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
  assert.equal(up.status, 200, JSON.stringify(up.json));
  s.file = up.json.id;
  return s;
}

// How many times each step 1..max is charged, net of lost-work refunds.
function stepCoverage(rows, max) {
  const count = new Array(max + 1).fill(0);
  for (const r of rows) {
    const sign = r.kind === 'charge' && r.reason === 'training steps' ? 1 : r.reason === 'lost work (repeated for free)' ? -1 : 0;
    for (let k = r.from_step + 1; k <= r.to_step; k++) count[k] += sign;
  }
  return count.slice(1);
}

test('a job that outgrows its memory allocation moves to a bigger worker', { timeout: 300000 }, async () => {
  // The plan is scaled down so that the small worker looks big enough; the
  // trainer's measured peak shows it is not. Big is dear enough that
  // lowest cost starts on small whatever the two measured (a saving under
  // a cent would be a tie, and the faster one would win).
  const s = await start([
    '--plan-scale', '0.001',
    '--local-worker', 'name=small,cpus=1,mem=1M,price=0.10',
    '--local-worker', 'name=big,cpus=1,mem=8G,price=10000',
  ]);
  try {
    await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 2, {
      timeoutMs: 120000,
      what: 'two local workers',
    });
    const r = await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: { n_epochs: 4, batch_size: 4 }, goal: 'lowest_cost', seed: 5 });
    assert.equal(r.status, 200, r.text);
    const statuses = new Set();
    const done = await waitFor(async () => {
      const j = await s.job(r.json.id);
      statuses.add(j.status);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 240000, everyMs: 50, what: 'the job to end' });
    assert.equal(done.status, 'succeeded', `${done.message}\n${JSON.stringify(done.attempts)}`);
    const workers = done.attempts.map((a) => a.worker);
    assert.equal(workers[0], 'small', `attempts: ${JSON.stringify(done.attempts)}`);
    assert.equal(workers.at(-1), 'big');
    assert.equal(done.attempts[0].reason, 'moved');
    assert.ok(statuses.has('re-scheduling'), `statuses seen: ${[...statuses]}`);
    const events = (await s.call('GET', `/v1/fine_tuning/jobs/${r.json.id}/events?limit=100`)).json.data;
    assert.ok(events.some((e) => /more than worker small offers/.test(e.message)), 'the move is explained in the events');
    // Billed once for the steps of the final model.
    const cov = stepCoverage(await ledgerOf(s, r.json.id), done.progress.max_steps);
    assert.deepEqual([...new Set(cov)], [1], 'every step charged exactly once');
  } finally {
    await s.stop();
  }
});

test('kill -9 of a worker: the job finishes elsewhere and each step is charged once', { timeout: 400000 }, async () => {
  const s = await start(['--local-worker', 'none', '--worker-timeout', '4']);
  const workers = {};
  const startWorker = (name) => (workers[name] = startHarnessWorker(s, name));
  startWorker('w1');
  startWorker('w2');
  try {
    await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 2, { timeoutMs: 120000, what: 'two workers' });
    const r = await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: { n_epochs: 20, batch_size: 2 }, seed: 11 });
    const id = r.json.id;
    await waitFor(async () => (await s.call('GET', `/v1/fine_tuning/jobs/${id}/checkpoints`)).json.data.length > 0, {
      timeoutMs: 240000, everyMs: 100, what: 'a checkpoint',
    });
    const j1 = await s.job(id);
    assert.equal(j1.status, 'running', 'the job must still run when the worker is killed');
    const victim = j1.attempts.at(-1).worker;
    workers[victim].kill('SIGKILL');
    const done = await s.waitStatus(id, ['succeeded', 'failed'], { timeoutMs: 300000 });
    assert.equal(done.status, 'succeeded', done.message);
    assert.equal(done.attempts[0].worker, victim);
    assert.match(done.attempts[0].reason, /lost/);
    assert.notEqual(done.attempts.at(-1).worker, victim);
    assert.ok(done.attempts.at(-1).start_step > 0, 'continued from a checkpoint');
    const rows = await ledgerOf(s, id);
    const cov = stepCoverage(rows, done.progress.max_steps);
    const bad = cov.map((c, i) => [i + 1, c]).filter(([, c]) => c !== 1);
    assert.deepEqual(bad.slice(0, 5), [], `steps not charged exactly once; rows: ${JSON.stringify(rows)}`);
    assert.ok(done.price.charged - done.price.refunded <= done.estimate.price.high + 1e-6);
  } finally {
    for (const p of Object.values(workers)) if (p.exitCode === null) p.kill('SIGTERM');
    await s.stop();
  }
});
