// checkpoints_per_epoch.test.mjs - a job checkpoints at the end of each
// epoch, and a succeeded job lists at least its final checkpoint with its
// metrics, as OpenAI's API users expect (docs/api.md, "Checkpoints"): 30
// examples x 2 epochs in batches of 8 is 8 steps, too few for the
// every-so-many-steps checkpoints made for recovery.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import { SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

describe('checkpoints per epoch', () => {
  let s;
  let client;
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G'] });
    client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 60000 });
  });
  after(async () => s && s.stop());

  test('a 30 x 2 job lists its epoch checkpoints, the final one with its metrics', async () => {
    const lines = fs.readFileSync(SAMPLE, 'utf8').split('\n').filter((l) => l.trim()).slice(0, 30);
    const up = await s.upload('thirty.jsonl', Buffer.from(lines.join('\n') + '\n'));
    assert.equal(up.status, 200, up.text);
    const created = await s.createJob({
      model: 'tiny', training_file: up.json.id, hyperparameters: { n_epochs: 2, batch_size: 8 },
    });
    assert.equal(created.status, 200, created.text);
    assert.equal(created.json.progress.max_steps, 8);
    const done = await waitFor(async () => {
      const j = await s.job(created.json.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 120000, everyMs: 100, what: 'the job to end' });
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);

    const page = await client.fineTuning.jobs.checkpoints.list(done.id);
    const steps = page.data.map((c) => c.step_number);
    // Epoch 1 ends in step 4 (its batch takes example 30), epoch 2 in step 8.
    assert.deepEqual(steps, [8, 4]);
    const last = page.data[0];
    assert.equal(last.object, 'fine_tuning.job.checkpoint');
    assert.equal(last.fine_tuning_job_id, done.id);
    assert.equal(last.metrics.step, 8);
    assert.ok(last.metrics.train_loss > 0, JSON.stringify(last));
    assert.ok(last.fine_tuned_model_checkpoint.endsWith(':ckpt-step-8'));
  });
});
