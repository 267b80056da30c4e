// dpo_packing.test.mjs - issue 16's context, packing and DPO through the
// service: a preference file is validated at upload (its line named) and
// stated as such; a DPO job made with the official `openai` SDK's body
// (method.type "dpo", beta) trains, bills and succeeds; its metrics events
// carry the reward margin and accuracy and the packing efficiency; the
// further hyper-parameters reach the job and a bad one is a 400 naming it.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import { Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const WORDS = ['apple', 'river', 'stone', 'cloud', 'ember', 'frost'];
const pair = (i) => JSON.stringify({
  input: { messages: [{ role: 'user', content: `${WORDS[i % 6]} says:` }] },
  preferred_output: [{ role: 'assistant', content: WORDS[i % 6] }],
  non_preferred_output: [{ role: 'assistant', content: WORDS[(i + 1) % 6] }],
});

describe('DPO and packing through the service', () => {
  let s;
  let client;
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G'] });
    client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 60000 });
  });
  after(async () => s && s.stop());

  test('a bad preference pair is refused at upload with its line', async () => {
    const bad = [pair(0), JSON.stringify({ input: { messages: [{ role: 'user', content: 'x' }] }, preferred_output: [{ role: 'assistant', content: 'y' }] })];
    const up = await s.upload('prefs.jsonl', Buffer.from(bad.join('\n') + '\n'));
    assert.equal(up.status, 400, up.text);
    assert.match(up.json.error.message,
      /^line 2 of prefs\.jsonl: missing field "non_preferred_output"$/);
  });

  test('a DPO job trains on pairs and reports rewards and packing', async () => {
    const lines = Array.from({ length: 24 }, (_, i) => pair(i));
    const up = await s.upload('prefs.jsonl', Buffer.from(lines.join('\n') + '\n'));
    assert.equal(up.status, 200, up.text);
    assert.equal(up.json.format, 'preference');
    assert.equal(up.json.examples, 24);
    // A supervised job on pairs is refused, naming the file.
    const sft = await s.createJob({ model: 'tiny', training_file: up.json.id });
    assert.equal(sft.status, 400, sft.text);
    assert.equal(sft.json.error.param, 'training_file');

    const job = await client.fineTuning.jobs.create({
      model: 'tiny',
      training_file: up.json.id,
      method: { type: 'dpo', dpo: { hyperparameters: { beta: 0.5, n_epochs: 2, batch_size: 4, learning_rate_multiplier: 10, max_seq_len: 128 } } },
    });
    assert.equal(job.method.type, 'dpo');
    assert.equal(job.method.dpo.hyperparameters.beta, 0.5);
    assert.equal(job.hyperparameters.max_seq_len, 128);
    assert.equal(job.hyperparameters.packing, true);
    const done = await waitFor(async () => {
      const j = await s.job(job.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 180000, everyMs: 200, what: 'the DPO job to end' });
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    assert.ok(done.price.charged > 0 || done.price.charged === 0, 'billed like any job');

    const events = [];
    for await (const e of client.fineTuning.jobs.listEvents(job.id, { limit: 100 })) events.push(e);
    const metrics = events.filter((e) => e.type === 'metrics' && e.data && 'train_loss' in e.data);
    assert.ok(metrics.length >= 1, JSON.stringify(events.slice(0, 5)));
    for (const m of metrics) {
      assert.equal(typeof m.data.reward_margin, 'number');
      assert.ok(m.data.reward_accuracy >= 0 && m.data.reward_accuracy <= 1);
      assert.ok(m.data.packing_efficiency > 0 && m.data.packing_efficiency <= 1);
    }
  });

  test('the further hyper-parameters are checked at the edge', async () => {
    const up = await s.upload('sft.jsonl', Buffer.from('{"prompt":"a","completion":"b"}\n'));
    assert.equal(up.status, 200, up.text);
    assert.equal(up.json.format, 'prompt-completion');
    const bad = await s.createJob({ model: 'tiny', training_file: up.json.id, hyperparameters: { lora_rank: 1000 } });
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.json.error.param, 'hyperparameters.lora_rank');
    const long = await s.createJob({ model: 'tiny', training_file: up.json.id, hyperparameters: { max_seq_len: 1000000 } });
    assert.equal(long.status, 400, long.text);
    assert.equal(long.json.error.param, 'hyperparameters.max_seq_len');
  });
});
