// rft_estimate.test.mjs - a reinforcement fine-tuning job's estimate counts
// its rollouts, its grading and its updates (docs/estimator.md,
// "Reinforcement fine-tuning: rollouts, grading and updates"): a score_model
// grader, whose model reads a grading prompt and decodes a reply for every
// answer, makes the estimate larger than a string_check grader by a term
// that grows with the answers per prompt and with the grader's
// max_completions_tokens; and such a job, run on the built-in model, pays
// no more than the upper end of its price.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';

import { ROOT, Serve, ledgerOf, waitFor } from './service_harness.mjs';

const jsonl = (rows) => Buffer.from(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
const QUESTIONS = ['What of the harbor?', 'What of the navy?', 'Speak of the army.', 'What of commerce?'];
const net = (rows) => rows.reduce((a, r) => a + (r.kind === 'charge' ? r.amount : -r.amount), 0);

const STRING_CHECK = { type: 'string_check', name: 'says it', input: '{{sample.output_text}}',
  reference: '{{item.reference}}', operation: 'ilike' };
const judge = (maxTokens) => ({ type: 'score_model', name: 'judge', model: 'alallo-base',
  input: [{ role: 'user', content: 'Score from 0 to 1 how well this answer says "{{item.reference}}": {{sample.output_text}}' }],
  range: [0, 1], sampling_params: { max_completions_tokens: maxTokens, temperature: 0 } });

async function serve() {
  const s = await Serve.start({ args: ['--models', path.join(ROOT, 'models'),
    '--local-worker', 'name=w1,cpus=1,mem=8G,price=3.60'] });
  await waitFor(async () => {
    const w = (await s.call('GET', '/v1/workers')).json.data;
    return w.length === 1 && w[0].speed && w[0].speed.flops > 0;
  }, { timeoutMs: 240000, what: 'the local worker and its measured speed' });
  return s;
}

test('a score_model grader adds its grading to the estimate, by the answers and its max tokens', { timeout: 600000 }, async () => {
  const s = await serve();
  try {
    // many prompts, so that the training range is long against whole seconds
    const rows = [];
    for (let i = 0; i < 400; i++)
      rows.push({ messages: [{ role: 'user', content: `${QUESTIONS[i % 4]} (${i})` }], reference: 'the' });
    const up = await s.upload('prompts.jsonl', jsonl(rows));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    const estimate = async (grader, compute) => {
      const r = await s.call('POST', '/v1/fine_tuning/estimates', { body: {
        model: 'alallo-base', training_file: up.json.id, seed: 1,
        method: { type: 'reinforcement', reinforcement: { grader, hyperparameters: {
          n_epochs: 4, batch_size: 8, compute_multiplier: compute, reasoning_effort: 'low',
          eval_interval: 1000 } } } } });
      assert.equal(r.status, 200, r.text);
      assert.ok(r.json.training && r.json.training.high_s > 0, r.text);
      return r.json;
    };
    const plain = await estimate(STRING_CHECK, 1);
    const short = await estimate(judge(16), 1);
    const long = await estimate(judge(64), 1);
    const plain2 = await estimate(STRING_CHECK, 2);
    const short2 = await estimate(judge(16), 2);
    const hi = (e) => e.training.high_s;
    const what = JSON.stringify({ plain: plain.training, short: short.training, long: long.training,
      plain2: plain2.training, short2: short2.training });
    // the grading term: nothing for string_check, more with the judge
    const g = hi(short) - hi(plain);
    assert.ok(g > 10, `grading with a model adds ${g} s: ${what}`);
    assert.ok(short.price.high > plain.price.high, what);
    // it scales with the judge's max tokens: a reply four times as long
    // costs (nearly) four times as much, the grading prompt's reading aside
    const gLong = hi(long) - hi(plain);
    assert.ok(gLong > 3 * g, `max tokens 64: +${gLong} s, 16: +${g} s: ${what}`);
    // and with the answers per prompt: twice the answers, twice the grading
    const g2 = hi(short2) - hi(plain2);
    assert.ok(Math.abs(g2 - 2 * g) <= 0.05 * 2 * g + 4, `group 8: +${g2} s, group 4: +${g} s: ${what}`);
  } finally {
    await s.stop();
  }
});

// Whether the real time falls inside the range is a calibration figure,
// measured by bench/estimates/real.sh and bench/train/rft.sh on a known
// load, never by a timed test (on a shared machine the same job took 3 s
// to 26 s). What holds whatever the load: the job, graded by a model,
// succeeds and pays no more than the upper end of the price it was shown.
test('a reinforcement job graded by a model pays at most the upper end of its estimate', { timeout: 900000 }, async () => {
  const s = await serve();
  try {
    const up = await s.upload('prompts.jsonl', jsonl(QUESTIONS.map((q) => ({
      messages: [{ role: 'user', content: q }], reference: 'the' }))));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    const runJob = async (grader) => {
      const r = await s.createJob({ model: 'alallo-base', training_file: up.json.id, seed: 3,
        method: { type: 'reinforcement', reinforcement: { grader, hyperparameters: {
          n_epochs: 1, batch_size: 2, compute_multiplier: 0.5, reasoning_effort: 'low', eval_interval: 100 } } } });
      assert.equal(r.status, 200, r.text);
      const est = r.json.estimate;
      assert.ok(est.time && est.price, JSON.stringify(est));
      const done = await s.waitStatus(r.json.id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 420000 });
      assert.equal(done.status, 'succeeded', `${done.message}\n${JSON.stringify(done.attempts)}`);
      const paid = done.price.charged - done.price.refunded;
      assert.ok(paid > 0, JSON.stringify(done.price));
      assert.ok(paid <= est.price.high + 1e-6, `paid ${paid}, upper end ${est.price.high}`);
      assert.ok(Math.abs(net(await ledgerOf(s, r.json.id)) - paid) < 1e-6);
      // the range counts from the job's creation (capacity was free)
      return { est, took: done.finished_at - done.created_at };
    };
    const { est, took } = await runJob(judge(96));
    console.log(`took ${took} s, estimated ${est.time.low_s}-${est.time.high_s} s (${est.time.text})`);
  } finally {
    await s.stop();
  }
});
