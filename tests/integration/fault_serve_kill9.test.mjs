// fault_serve_kill9.test.mjs - kill -9 of `serve` while jobs train.
//
// (kill -9 during a burst of creations, with no acknowledged job lost, is
// service_kill9.test.mjs; this file covers running jobs.)
//
// Two jobs train at once: one on a local worker (a thread of serve, whose
// trainer dies with it) and one on a remote `alallo worker` process (whose
// trainer keeps going while the server is away). serve is killed with
// SIGKILL and started again on the same data folder and port. What must
// hold:
//  * no trainer of the dead server lives on (nothing runs twice);
//  * the remote worker reconnects by itself, and the local one comes back;
//  * both jobs end succeeded, continuing from their checkpoints;
//  * each job is charged once: one charge row, equal to its price, within
//    its estimate.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';

import {
  assertBilledOnce, Serve, checkpointDirs, createLongJob, startWorker, stopProc, tinyModelsDir, trainers,
  uploadSample, waitFor, waitJob, waitWorkers, workerState,
} from '../fault/fault_harness.mjs';

// The local worker offers 400 MiB: enough for a batch of 2 (about 300 MB
// planned), not for a batch of 32 (about 530 MB), which only the remote
// worker (2 GiB) can take. So the scheduler has one choice for each job and
// both train at once.
// The worker timeout is the default, 10 s (a heartbeat every 2 s), as in
// the other fault tests: at 4 s, under `nice -n 19` beside a load average
// of 28, the remote worker missed 4 s of heartbeats before serve was
// killed and was declared lost, and the batch-32 job, which only it can
// take, failed "Not available right now." (docs/testing.md).
const ARGS = ['--models', tinyModelsDir(), '--worker-timeout', '10', '--local-worker', 'name=local1,cpus=1,mem=400M,price=0.40'];

// The test's own limit is above the sum of its waits (180 + 10 + 15 + 60 +
// 300 + 300 s, and serve's starts): each wait names what it waited for,
// while a test stopped at its limit says nothing of where it stood. The
// waits are long because under a heavy load (25 runnable processes on 2
// cores) every phase takes ten times its quiet length.
test('kill -9 of serve during running jobs: they continue after a restart, billed once', { timeout: 960000 }, async () => {
  let s = await Serve.start({ args: ARGS });
  const remote = startWorker(s, 'remote1');
  let sampler = null;
  let most = 0;
  try {
    await waitWorkers(s, ['local1', 'remote1']);
    const file = await uploadSample(s);
    // b: 250 steps of 32 (a checkpoint every 25), only for the remote
    // worker; then a: 2,000 steps of 2 (a checkpoint every 200), which the
    // idle local worker takes.
    const rb = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 40, batch_size: 32 }, seed: 2 });
    assert.equal(rb.status, 200, rb.text);
    const b = rb.json;
    await waitJob(s, b.id, (j) => j.attempts.length > 0, 'to be claimed');
    const a = await createLongJob(s, file, { epochs: 20, seed: 1 });
    // Both train at once, each on its own worker, and each has a checkpoint
    // the server recorded (a later attempt resumes from the latest one the
    // server recorded, not from whatever is on disk): the trainer reports
    // the checkpoint before its "saved checkpoint" log line, and the server
    // applies reports in order.
    const recorded = async (j) => checkpointDirs(s, j.id).length > 0 &&
      /saved checkpoint at step/.test((await s.call('GET', `/v1/fine_tuning/jobs/${j.id}/log`)).text);
    let stood = [];
    await waitFor(async () => {
      const both = [await s.job(a.id), await s.job(b.id)];
      stood = both.map((x) => [x.id, x.status, x.message, x.progress?.steps_done, x.attempts.map((t) => [t.worker, t.status])]);
      for (const j of both) if (['succeeded', 'failed', 'cancelled'].includes(j.status)) throw new Error(`job ${j.id} ended ${j.status} before serve was killed: ${JSON.stringify(both.map((x) => [x.status, x.message, x.attempts]))}`);
      for (const j of both) if (j.status !== 'running' || !(await recorded(j))) return false;
      return both;
    }, { timeoutMs: 180000, everyMs: 50, what: 'both jobs running, with a checkpoint each that the server recorded' })
      .catch((e) => {
        e.message += `\nthe jobs: ${JSON.stringify(stood)}\nserve's output:\n${s.output.slice(-3000)}`;
        throw e;
      });
    const ja = await s.job(a.id);
    const jb = await s.job(b.id);
    const onLocal = ja.attempts.at(-1).worker === 'local1' ? ja : jb;
    const onRemote = onLocal === ja ? jb : ja;
    assert.equal(onLocal.attempts.at(-1).worker, 'local1');
    assert.equal(onRemote.attempts.at(-1).worker, 'remote1');

    const localWork = path.join(s.data, 'workers', 'local1');
    const remoteLogBefore = remote.log().length;
    assert.equal(trainers({ under: localWork }).length, 1);
    // From here on, never more than one trainer per worker.
    sampler = setInterval(() => {
      most = Math.max(most, trainers({ under: localWork }).length, trainers({ under: remote.workDir }).length);
    }, 100);
    sampler.unref();
    s.proc.kill('SIGKILL');
    await s.exited;
    // The local worker's trainer died with its server.
    await waitFor(() => trainers({ under: localWork }).length === 0, { timeoutMs: 10000, what: 'the local trainer to die with serve' });
    // The remote worker notices the outage (a heartbeat fails) and keeps
    // running, waiting for its server.
    await waitFor(() => /heartbeat: /.test(remote.log().slice(remoteLogBefore)), { timeoutMs: 15000, what: 'the remote worker to notice the outage' });
    assert.equal(remote.exited, null);

    s = new Serve({ data: s.data, port: s.port, args: ARGS });
    await s.spawn();
    await waitFor(async () => (await workerState(s, 'remote1')) === 'active' && (await workerState(s, 'local1')) === 'active',
      { timeoutMs: 60000, what: 'both workers active after the restart' });

    const doneLocal = await waitJob(s, onLocal.id, (j) => j.status === 'succeeded', 'to succeed after the restart', { timeoutMs: 300000 });
    const doneRemote = await waitJob(s, onRemote.id, (j) => j.status === 'succeeded', 'to succeed after the restart', { timeoutMs: 300000 });

    // The local job's attempt was ended by the restart and a later one
    // continued from a checkpoint.
    assert.ok(doneLocal.attempts.length >= 2, JSON.stringify(doneLocal.attempts));
    assert.match(doneLocal.attempts[0].reason || '', /worker (restarted|lost)/);
    assert.ok(doneLocal.attempts.at(-1).start_step > 0, 'continued from a checkpoint');
    // The remote job's trainer went on; if it was moved, it continued too.
    if (doneRemote.attempts.length > 1) assert.ok(doneRemote.attempts.at(-1).start_step > 0);
    // The remote worker came back by itself.
    assert.match(remote.log().slice(remoteLogBefore), /server back|registered with/);

    clearInterval(sampler);
    assert.ok(most <= 1, `${most} trainers ran at once on one worker`);
    for (const j of [doneLocal, doneRemote]) {
      assert.equal(j.progress.percent, 100);
      assert.ok(j.price.charged > 0, `job ${j.id} was not charged`);
      await assertBilledOnce(assert, s, j);
    }
  } finally {
    clearInterval(sampler);
    await stopProc(remote);
    await s.stop();
  }
});
