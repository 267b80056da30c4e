// fault_trainer_kill9.test.mjs - kill -9 of a trainer process mid-training.
//
// The trainer is found as the worker's child: a local worker runs inside
// `serve`, so its trainer is a child of the serve process. A trainer killed
// by a signal is a failure on alallo's side (SPEC §2): the job fails with
// "Failed. We've been notified and are looking into it.", costs nothing, and
// the operator is told (error line in the server log, the metric). The
// server and its worker keep serving: the next job runs to the end.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Serve, tinyModelsDir, trainers, uploadSample, createLongJob, waitJob, waitFor, ledger, checkpoints } from '../fault/fault_harness.mjs';

const NOTIFIED = "Failed. We've been notified and are looking into it.";

function metric(text, name) {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

test('kill -9 of a trainer: the job fails with the right message, costs nothing, the worker goes on', { timeout: 300000 }, async () => {
  const s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=0.36'] });
  try {
    const file = await uploadSample(s);
    const job = await createLongJob(s, file, { epochs: 4 });
    await waitJob(s, job.id, (j) => j.status === 'running' && j.progress.steps_done >= 20, 'to make progress');
    // Its trainer is the one `alallo train` child of serve.
    const pids = await waitFor(() => {
      const p = trainers({ ppid: s.proc.pid });
      return p.length === 1 ? p : false;
    }, { timeoutMs: 10000, what: 'the trainer, a child of serve' });
    const before = metric((await s.call('GET', '/metrics')).text, 'alallo_internal_failures_total');
    process.kill(pids[0], 'SIGKILL');

    const failed = await waitFor(async () => {
      const j = await s.job(job.id);
      return ['failed', 'succeeded', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 60000, what: 'the job to end after its trainer was killed' });
    assert.equal(failed.status, 'failed');
    assert.equal(failed.message, NOTIFIED);
    assert.equal(failed.fine_tuned_model, null);
    assert.ok(failed.progress.steps_done < failed.progress.max_steps);
    // Failed costs nothing: no charge in the ledger, nothing on the job.
    assert.equal(failed.price.charged, 0);
    assert.deepEqual((await ledger(s)).filter((r) => r.job === job.id && r.kind === 'charge'), []);
    // The operator is told: an error line naming the job and the signal, and the counter.
    const after = metric((await s.call('GET', '/metrics')).text, 'alallo_internal_failures_total');
    assert.equal(after, (before ?? 0) + 1);
    assert.equal(failed.attempts.at(-1).reason, 'trainer killed by signal 9');
    // docs/lifecycle.md: the error line names the job, attempt, worker and
    // the exit status or signal.
    const line = s.output.split('\n').find((l) => l.includes(`error: job ${job.id} failed on alallo's side`));
    assert.ok(line, `no error line for ${job.id} in the server log:\n${s.output}`);
    assert.match(line, new RegExp(`${failed.attempts.at(-1).id}.*w1`));
    assert.match(line, /signal 9/, `the error line does not say the trainer was killed by signal 9: ${line}`);
    // The checkpoints it made stay listed (nothing half-written appears).
    for (const c of await checkpoints(s, job.id)) assert.ok(c.step_number > 0 && c.step_number <= failed.progress.max_steps);

    // The worker survived its trainer: a second job runs to the end.
    const next = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(next.status, 200, next.text);
    const done = await waitJob(s, next.json.id, (j) => j.status === 'succeeded', 'to succeed on the same worker', { timeoutMs: 180000 });
    assert.equal(done.attempts.at(-1).worker, 'w1');
    // The job succeeds on the trainer's `done` event, a moment before the
    // trainer exits: no trainer is left once it has.
    await waitFor(() => trainers({ ppid: s.proc.pid }).length === 0, { timeoutMs: 15000, what: 'the trainer to exit after done' });
  } finally {
    await s.stop();
  }
});
