// dpo_defaults.test.mjs - DPO with only `beta` set moves a model toward the
// preferred answers, and a DPO job whose answers both collapse says so
// (docs/api.md, 'Hyper-parameters chosen by "auto"'; docs/trainer.md, "DPO").
// The built-in model is fine-tuned ("auto") on 10 questions answered the
// non-preferred way twice as often as the preferred way, then trained with
// DPO on 30 pairs in OpenAI's format. Before DPO had its own "auto" (25
// epochs of 3 at 10x, the supervised rule), every answer became a repeated
// fragment: 0 of 10 preferred. bench/train/dpo_defaults.mjs runs the same
// experiment with `alallo train` alone.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { ROOT, Serve, waitFor } from './service_harness.mjs';

const TOPICS = ['harbor', 'treasury', 'army', 'navy', 'congress',
  'union', 'commerce', 'tariff', 'railroad', 'territory'];
const question = (t) => `What do you say of the ${t}?`;
const preferred = (t) => `The ${t} is strong.`;
const other = (t) => `The ${t} is weak.`;
const jsonl = (rows) => Buffer.from(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');

describe('DPO with default settings', () => {
  let s;
  let sft;   // the supervised model that prefers the other answers
  let prefs; // the preference file's id
  before(async () => {
    s = await Serve.start({ args: ['--models', path.join(ROOT, 'models')] });
    const chats = [];
    const pairs = [];
    for (let k = 0; k < 3; k++) {
      for (const t of TOPICS) {
        chats.push({ messages: [{ role: 'user', content: question(t) },
          { role: 'assistant', content: k === 2 ? preferred(t) : other(t) }] });
        pairs.push({ input: { messages: [{ role: 'user', content: question(t) }] },
          preferred_output: [{ role: 'assistant', content: preferred(t) }],
          non_preferred_output: [{ role: 'assistant', content: other(t) }] });
      }
    }
    const up = await s.upload('questions.jsonl', jsonl(chats));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    const p = await s.upload('prefs.jsonl', jsonl(pairs));
    assert.equal(p.status, 200, JSON.stringify(p.json));
    prefs = p.json.id;
    const job = await train({ model: 'alallo-base', training_file: up.json.id, seed: 1 });
    sft = job.fine_tuned_model;
  });
  after(async () => s && s.stop());

  async function train(body) {
    const created = await s.createJob(body);
    assert.equal(created.status, 200, created.text);
    const done = await waitFor(async () => {
      const j = await s.job(created.json.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 300000, everyMs: 300, what: 'the job to end' });
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    return done;
  }

  // The greedy answer to each question, counted: preferred, other.
  async function answers(model) {
    let pref = 0;
    let oth = 0;
    const said = [];
    for (const t of TOPICS) {
      const r = await s.call('POST', '/v1/chat/completions', {
        body: { model, messages: [{ role: 'user', content: question(t) }], max_tokens: 12, temperature: 0 },
      });
      assert.equal(r.status, 200, r.text);
      const text = r.json.choices[0].message.content;
      said.push(JSON.stringify(text));
      if (text.startsWith(preferred(t))) pref++;
      else if (text.startsWith(other(t))) oth++;
    }
    return { pref, oth, said: said.join(', ') };
  }

  const warnings = async (id) => (await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100`))
    .json.data.filter((e) => e.level === 'warn' && /lowering both answers/.test(e.message));

  test('with beta alone, DPO chooses its own settings and moves the answers', { timeout: 600000 }, async () => {
    const before = await answers(sft);
    assert.ok(before.oth >= 7, `the supervised model should answer the other way: ${before.said}`);
    const done = await train({ model: sft, training_file: prefs, seed: 1,
      method: { type: 'dpo', dpo: { hyperparameters: { beta: 0.1 } } } });
    assert.equal(done.hyperparameters.n_epochs, 10, JSON.stringify(done.hyperparameters));
    assert.equal(done.hyperparameters.batch_size, 3, JSON.stringify(done.hyperparameters));
    assert.equal(done.hyperparameters.learning_rate_multiplier, 0.5, JSON.stringify(done.hyperparameters));
    const after = await answers(done.fine_tuned_model);
    assert.ok(after.pref >= 7, `${after.pref} of 10 answers preferred after DPO: ${after.said}`);
    assert.deepEqual(await warnings(done.id), []);
  });

  test('a DPO job that lowers both answers says so in its events and log', { timeout: 600000 }, async () => {
    // 10x for 20 steps: the preferred answers fall more than a nat per token
    const done = await train({ model: sft, training_file: prefs, seed: 1,
      method: { type: 'dpo', dpo: { hyperparameters: { beta: 0.1, n_epochs: 2, learning_rate_multiplier: 10 } } } });
    const w = await warnings(done.id);
    assert.equal(w.length, 1, JSON.stringify(w));
    assert.match(w[0].message, /preferred answers' log-probability fell [0-9.]+ nats per token/);
    const log = (await s.call('GET', `/v1/fine_tuning/jobs/${done.id}/log`)).text;
    assert.match(log, /DPO is lowering both answers: by step 20 /);
  });
});
