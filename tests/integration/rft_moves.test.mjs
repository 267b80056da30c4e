// rft_moves.test.mjs - a reinforcement fine-tuning job moved mid-run
// (docs/rft.md, "Checkpoints and resume"): its memory, reported after the
// first step, outgrows the small worker, so the job is moved to the big
// one; the trainer saves the step it ends on, the next attempt goes on
// from it, no step runs twice (no "lost work" in the ledger) and each is
// charged once.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';

import { ROOT, Serve, ledgerOf, waitFor } from './service_harness.mjs';

const jsonl = (rows) => Buffer.from(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
const QUESTIONS = ['What of the harbor?', 'What of the navy?', 'Speak of the army.', 'What of commerce?'];

test('a reinforcement job moved to a bigger worker repeats no step and is charged once for each', { timeout: 600000 }, async () => {
  // as sched_moves.test.mjs: the plan scaled down so that the small worker
  // looks big enough until the trainer's measured memory says otherwise
  const s = await Serve.start({ args: ['--models', path.join(ROOT, 'models'), '--plan-scale', '0.001',
    '--local-worker', 'name=small,cpus=1,mem=1M,price=0.10',
    '--local-worker', 'name=big,cpus=1,mem=8G,price=10000'] });
  try {
    await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 2, {
      timeoutMs: 120000, what: 'two local workers' });
    const up = await s.upload('prompts.jsonl', jsonl(QUESTIONS.map((q) => ({
      messages: [{ role: 'user', content: q }], reference: 'the' }))));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    const r = await s.createJob({ model: 'alallo-base', training_file: up.json.id, seed: 4, goal: 'lowest_cost',
      method: { type: 'reinforcement', reinforcement: {
        grader: { type: 'string_check', name: 'says it', input: '{{sample.output_text}}',
          reference: '{{item.reference}}', operation: 'ilike' },
        hyperparameters: { n_epochs: 3, batch_size: 2, compute_multiplier: 0.5, reasoning_effort: 'low',
          eval_interval: 100 } } } });
    assert.equal(r.status, 200, r.text);
    const done = await s.waitStatus(r.json.id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 540000 });
    assert.equal(done.status, 'succeeded', `${done.message}\n${JSON.stringify(done.attempts)}`);
    const at = done.attempts;
    assert.equal(at[0].worker, 'small', JSON.stringify(at));
    assert.equal(at[0].reason, 'moved', JSON.stringify(at));
    assert.equal(at.at(-1).worker, 'big', JSON.stringify(at));
    // the move saved the step it ended on, and the next attempt began there
    assert.ok(at[0].end_step >= 1, JSON.stringify(at));
    for (let i = 1; i < at.length; i++)
      assert.equal(at[i].start_step, at[i - 1].end_step, JSON.stringify(at));
    const rows = await ledgerOf(s, r.json.id);
    assert.ok(!rows.some((x) => x.reason === 'lost work (repeated for free)'), JSON.stringify(rows));
    const count = new Array(done.progress.max_steps + 1).fill(0);
    for (const x of rows)
      if (x.kind === 'charge' && x.reason === 'training steps')
        for (let k = x.from_step + 1; k <= x.to_step; k++) count[k]++;
    assert.deepEqual([...new Set(count.slice(1))], [1], `each step charged once; rows: ${JSON.stringify(rows)}`);
    // the steps' rewards: one metrics event per step
    const events = (await s.call('GET', `/v1/fine_tuning/jobs/${r.json.id}/events?limit=100`)).json.data;
    const steps = events.filter((e) => e.type === 'metrics' && typeof e.data.train_reward_mean === 'number')
      .map((e) => e.data.step).sort((a, b) => a - b);
    assert.deepEqual(steps, Array.from({ length: done.progress.max_steps }, (_, i) => i + 1));
  } finally {
    await s.stop();
  }
});
