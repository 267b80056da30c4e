// auto_hyper.test.mjs - a job with every hyper-parameter left out, or with
// n_epochs alone, on a small data set learns it (docs/api.md,
// 'Hyper-parameters chosen by "auto"'). 40 prompt/completion pairs of the
// sample task on the built-in model: the former fixed defaults (3 epochs,
// batch 8, 1x) ran 15 steps and completed none of the first 10 training
// prompts as trained; "auto" chooses 25 epochs, batches of 4 and 10x.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { ROOT, SAMPLE, Serve, waitFor } from './service_harness.mjs';

const PAIRS = fs.readFileSync(SAMPLE, 'utf8').split('\n').filter((l) => l.trim()).slice(0, 40);

describe('"auto" hyper-parameters teach a small data set', () => {
  let s;
  let file;
  before(async () => {
    s = await Serve.start({ args: ['--models', path.join(ROOT, 'models')] });
    const up = await s.upload('forty.jsonl', Buffer.from(PAIRS.join('\n') + '\n'));
    assert.equal(up.status, 200, up.text);
    file = up.json.id;
  });
  after(async () => s && s.stop());

  // Trains a job and counts the first 10 training prompts whose greedy
  // completion is the one trained.
  async function learnt(hyperparameters) {
    const created = await s.createJob({ model: 'alallo-base', training_file: file, ...(hyperparameters ? { hyperparameters } : {}) });
    assert.equal(created.status, 200, created.text);
    const done = await waitFor(async () => {
      const j = await s.job(created.json.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 400000, everyMs: 500, what: 'the job to end' });
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    let right = 0;
    const said = [];
    for (const line of PAIRS.slice(0, 10)) {
      const { prompt, completion } = JSON.parse(line);
      const r = await s.call('POST', '/v1/completions', {
        body: { model: done.fine_tuned_model, prompt, max_tokens: 4, temperature: 0 },
      });
      assert.equal(r.status, 200, r.text);
      const text = r.json.choices[0].text;
      said.push(JSON.stringify(text));
      if (text.startsWith(completion)) right++;
    }
    return { job: done, right, said: said.join(', ') };
  }

  test('every hyper-parameter left out: 25 epochs, batches of 4, 10x, and the pairs are learnt', { timeout: 600000 }, async () => {
    const { job, right, said } = await learnt(null);
    assert.equal(job.hyperparameters.n_epochs, 25, JSON.stringify(job.hyperparameters));
    assert.equal(job.hyperparameters.batch_size, 4, JSON.stringify(job.hyperparameters));
    assert.equal(job.hyperparameters.learning_rate_multiplier, 10, JSON.stringify(job.hyperparameters));
    assert.ok(right >= 8, `${right} of 10 training prompts completed as trained: ${said}`);
  });

  test('n_epochs alone: the rest is chosen, and the pairs are learnt', { timeout: 600000 }, async () => {
    const { job, right, said } = await learnt({ n_epochs: 30 });
    assert.equal(job.hyperparameters.n_epochs, 30, JSON.stringify(job.hyperparameters));
    assert.equal(job.hyperparameters.learning_rate_multiplier, 10, JSON.stringify(job.hyperparameters));
    assert.ok(right >= 8, `${right} of 10 training prompts completed as trained: ${said}`);
  });
});
