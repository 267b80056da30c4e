// fault_worker_partition.test.mjs - a worker cut off from the server.
//
// The worker running a job, and its trainer, are frozen with SIGSTOP long
// enough to be declared lost (--worker-timeout 10); the job moves to the
// other worker and continues from its checkpoint. Then they get SIGCONT, as
// after a network partition heals. What must hold:
//  * the stale attempt's reports are fenced: a late events batch and a late
//    finish with its fence answer 409 `fenced` and change nothing;
//  * the woken worker stops its trainer at once (nothing runs twice), and
//    its log says it was refused;
//  * the job ends succeeded with exactly the two attempts, each step billed
//    once (the stale attempt only for the steps the job kept from it).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  assertBilledOnce, checkpoints, createLongJob, ledger, startServe, startWorker, stopProc, trainers,
  uploadSample, waitFor, waitJob, waitWorkers,
} from '../fault/fault_harness.mjs';

async function internal(s, p, body) {
  const r = await fetch(s.url + p, {
    method: 'POST',
    headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

test('a frozen worker is declared lost, the job moves, and its late reports are fenced', { timeout: 300000 }, async () => {
  const s = await startServe();
  const w = { w1: startWorker(s, 'w1'), w2: startWorker(s, 'w2') };
  const frozen = [];
  try {
    await waitWorkers(s, ['w1', 'w2']);
    const file = await uploadSample(s);
    // 2,000 steps, a checkpoint every 200.
    const job = await createLongJob(s, file, { epochs: 20 });
    await waitFor(async () => (await checkpoints(s, job.id)).length > 0, { timeoutMs: 120000, everyMs: 50, what: 'a first checkpoint' });
    const j1 = await s.job(job.id);
    assert.equal(j1.status, 'running', 'the job ended before the partition: make it longer');
    const stale = j1.attempts.at(-1);
    const victim = w[stale.worker];
    const survivor = stale.worker === 'w1' ? 'w2' : 'w1';
    const staleTrainers = trainers({ under: victim.workDir });
    assert.equal(staleTrainers.length, 1);

    // Cut off: the worker and its trainer stop where they are.
    for (const pid of [victim.proc.pid, ...staleTrainers]) {
      process.kill(pid, 'SIGSTOP');
      frozen.push(pid);
    }
    const moved = await waitJob(s, job.id, (j) => j.attempts.length === 2 && j.attempts[1].worker === survivor && j.status === 'running', `to move to ${survivor}`, { timeoutMs: 60000 });
    assert.match(moved.attempts[0].reason || '', /lost/);
    assert.ok(moved.attempts[1].start_step > 0, 'the move continues from a checkpoint');
    const stepsAfterMove = moved.progress.steps_done;

    // Late reports of the stale attempt, as the woken worker would send
    // them: fenced, and nothing changes.
    const fence = stale.fence ?? 1;
    const late = await internal(s, `/internal/attempts/${stale.id}/events`, {
      fence, first: 100000,
      events: [{ event: 'step', t: 1, step: moved.progress.max_steps, loss: 0.01, lr: 0.0001, tokens_per_s: 1 },
        { event: 'done', t: 2, step: moved.progress.max_steps, train_loss: 0.01, model_dir: '/nonexistent', adapter_dir: null }],
    });
    assert.equal(late.status, 409, JSON.stringify(late.json));
    assert.equal(late.json.error.code, 'fenced');
    const lateFinish = await internal(s, `/internal/attempts/${stale.id}/finish`, { fence, exit_status: 0, signal: null, error_kind: null, line: null, stop: null });
    assert.equal(lateFinish.status, 409, JSON.stringify(lateFinish.json));
    const still = await s.job(job.id);
    assert.equal(still.status, 'running');
    assert.ok(still.progress.steps_done < still.progress.max_steps);
    assert.ok(still.progress.steps_done >= stepsAfterMove);

    // The partition heals. The refusal is looked for in what the worker
    // logs from now: a "409" in an earlier line (a speed, a size) met the
    // wait before, so the check could not fail.
    const logBefore = victim.log().length;
    for (const pid of frozen.splice(0)) process.kill(pid, 'SIGCONT');
    await waitFor(() => trainers({ under: victim.workDir }).length === 0, { timeoutMs: 20000, what: 'the stale trainer to be stopped' });
    await waitFor(() => /\b(409|fenced)\b/.test(victim.log().slice(logBefore)), { timeoutMs: 20000, what: `the woken worker to log a refusal:\n${victim.log().slice(-2000)}` });

    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed', { timeoutMs: 240000 });
    assert.equal(done.attempts.length, 2, JSON.stringify(done.attempts));
    assert.equal(done.attempts[1].worker, survivor);
    await assertBilledOnce(assert, s, done);
    // The stale attempt is billed at most for the steps the job kept from
    // it (up to where the next attempt resumed), never for what it did
    // after it was cut off.
    for (const r of (await ledger(s)).filter((x) => x.attempt === stale.id)) {
      assert.ok(r.to_step === undefined || r.to_step <= done.attempts[1].start_step, `stale attempt billed past the resume point: ${JSON.stringify(r)}`);
    }
  } finally {
    for (const pid of frozen) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // gone
      }
    }
    await stopProc(w.w1);
    await stopProc(w.w2);
    await s.stop();
  }
});
