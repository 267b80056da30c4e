// rft_kill9.test.mjs - kill -9 of the worker mid-rollout (docs/rft.md,
// "Checkpoints and resume"): a reinforcement job on the built-in model runs
// on one of two `alallo worker` processes; once step 3 is reported (the
// checkpoint is at step 2, a validation step) the worker running it is
// killed with SIGKILL, its trainer with it, while step 4's answers are
// being decoded. The job is re-scheduled on the other worker from the
// checkpoint, repeats step 3 (lost work, not paid twice) and finishes with the
// per-step reward curve of the same job run without a break; each step of
// the final model is charged once, net of any lost-work refund.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';

import { ROOT, Serve, startWorker, waitFor } from './service_harness.mjs';
import { assertBilledOnce } from '../fault/fault_harness.mjs';

const jsonl = (rows) => Buffer.from(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
const QUESTIONS = ['What of the harbor?', 'What of the navy?', 'Speak of the army.', 'What of commerce?'];

// The job: 6 steps of 2 prompts (3 epochs of 4), 4 answers of up to 128
// tokens to each (the rollouts are most of a step), a validation and a
// checkpoint every 2 steps.
const job = (file) => ({ model: 'alallo-base', training_file: file, seed: 9,
  method: { type: 'reinforcement', reinforcement: {
    // a score between 0 and 1 for each answer, so that answers of a group
    // differ and every step moves the policy
    grader: { type: 'text_similarity', name: 'close', input: '{{sample.output_text}}',
      reference: '{{item.reference}}', evaluation_metric: 'fuzzy_match' },
    hyperparameters: { n_epochs: 3, batch_size: 2, compute_multiplier: 1, reasoning_effort: 'medium',
      eval_interval: 2 } } } });

// Every event of the job, page by page.
async function eventsOf(s, id) {
  const all = [];
  for (let after = ''; ;) {
    const r = await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100${after}`);
    assert.equal(r.status, 200, r.text);
    all.push(...r.json.data);
    if (!r.json.has_more || r.json.data.length === 0) return all;
    after = `&after=${r.json.data.at(-1).id}`;
  }
}

// The job's training reward and loss by step: each step's metrics events
// (two for a step that was run again; both must agree with the reference).
async function rewardCurve(s, id) {
  const events = await eventsOf(s, id);
  const by = new Map();
  for (const e of events) {
    if (e.type !== 'metrics' || typeof e.data?.train_reward_mean !== 'number') continue;
    const seen = by.get(e.data.step) || [];
    seen.push([e.data.train_reward_mean, e.data.train_loss]);
    by.set(e.data.step, seen);
  }
  return [...by.keys()].sort((a, b) => a - b).map((k) => ({ step: k, rewards: by.get(k) }));
}

test('kill -9 of the worker mid-rollout: the job resumes with the reward curve of an unbroken run, each step billed once', { timeout: 1800000 }, async () => {
  const s = await Serve.start({ args: ['--models', path.join(ROOT, 'models'), '--local-worker', 'none', '--worker-timeout', '4'] });
  const workers = {};
  workers.w1 = startWorker(s, 'w1', { mem: '8G' });
  workers.w2 = startWorker(s, 'w2', { mem: '8G' });
  try {
    await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 2, { timeoutMs: 120000, what: 'two workers' });
    const up = await s.upload('prompts.jsonl', jsonl(QUESTIONS.map((q) => ({
      messages: [{ role: 'user', content: q }], reference: 'The harbor is open to the navy and to commerce.' }))));
    assert.equal(up.status, 200, JSON.stringify(up.json));

    // The reference: the same job, uninterrupted.
    const ref = await s.createJob(job(up.json.id));
    assert.equal(ref.status, 200, ref.text);
    const refDone = await s.waitStatus(ref.json.id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 700000 });
    assert.equal(refDone.status, 'succeeded', `${refDone.message}\n${JSON.stringify(refDone.attempts)}`);
    assert.equal(refDone.attempts.length, 1, JSON.stringify(refDone.attempts));
    const max = refDone.progress.max_steps;
    assert.equal(max, 6);
    const refCurve = await rewardCurve(s, ref.json.id);
    assert.deepEqual(refCurve.map((x) => x.step), [1, 2, 3, 4, 5, 6]);
    assert.ok(refCurve.every((x) => x.rewards.length === 1), JSON.stringify(refCurve));
    // the updates moved the policy (a loss of 0 everywhere would make any
    // resume look exact)
    assert.ok(refCurve.some((x) => x.rewards[0][1] !== 0), `no step changed the policy: ${JSON.stringify(refCurve)}`);

    const r = await s.createJob(job(up.json.id));
    assert.equal(r.status, 200, r.text);
    const id = r.json.id;
    // Step 3 is reported as its step ends and is no validation step: what
    // the trainer does next is step 4's rollouts (the bulk of a step).
    const j1 = await waitFor(async () => {
      const j = await s.job(id);
      if (['succeeded', 'failed', 'cancelled'].includes(j.status)) throw new Error(`the job ended before the kill: ${j.status}`);
      return j.progress?.steps_done >= 3 ? j : false;
    }, { timeoutMs: 700000, everyMs: 50, what: 'step 3 to be reported' });
    const victim = j1.attempts.at(-1).worker;
    workers[victim].kill('SIGKILL');
    // Killed mid-step 4: the step under way was not reported.
    assert.equal(j1.progress.steps_done, 3, 'the kill came after step 3 and before step 4 ended');
    const cps = (await s.call('GET', `/v1/fine_tuning/jobs/${id}/checkpoints`)).json.data.map((c) => c.step_number);
    assert.deepEqual(cps, [2], 'the checkpoint of step 2 was the only one when the worker was killed');

    const done = await s.waitStatus(id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 700000 });
    assert.equal(done.status, 'succeeded', `${done.message}\n${JSON.stringify(done.attempts)}`);
    assert.equal(done.attempts[0].worker, victim, JSON.stringify(done.attempts));
    assert.match(done.attempts[0].reason || '', /lost/, JSON.stringify(done.attempts));
    assert.notEqual(done.attempts.at(-1).worker, victim, JSON.stringify(done.attempts));
    assert.equal(done.attempts.at(-1).start_step, 2, `resumed from the checkpoint of step 2: ${JSON.stringify(done.attempts)}`);

    // The same reward curve: every report of a step, the repeated step 3's
    // included, has the unbroken run's reward and loss.
    const curve = await rewardCurve(s, id);
    assert.deepEqual(curve.map((x) => x.step), [1, 2, 3, 4, 5, 6]);
    // steps 1-3 reported by the killed attempt, 3-6 by the next one: step 4
    // was under way, not done, when the worker was killed
    assert.deepEqual(curve.map((x) => x.rewards.length), [1, 1, 2, 1, 1, 1], JSON.stringify(curve));
    for (const { step, rewards } of curve)
      for (const got of rewards)
        assert.deepEqual(got, refCurve[step - 1].rewards[0], `step ${step}: ${JSON.stringify(curve)} vs ${JSON.stringify(refCurve)}`);
    // and the same validation rewards at the steps both measured
    const valid = async (jid) => (await eventsOf(s, jid))
      .filter((e) => e.type === 'metrics' && typeof e.data?.valid_reward_mean === 'number')
      .map((e) => [e.data.step, e.data.valid_reward_mean]);
    const refValid = new Map(await valid(ref.json.id));
    for (const [step, v] of await valid(id)) assert.equal(v, refValid.get(step), `validation reward at step ${step}`);

    // Billed once: the charges cover steps 1..6 once, net of any refund of
    // the step the lost worker ran after its checkpoint.
    await assertBilledOnce(assert, s, done);
  } finally {
    for (const p of Object.values(workers)) if (p.exitCode === null && !p.signalCode) p.kill('SIGTERM');
    await s.stop();
  }
});
