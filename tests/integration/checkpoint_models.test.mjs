// checkpoint_models.test.mjs - every listed checkpoint is usable as a model
// (issue 12, item 3; docs/api.md, "Checkpoints"): a 2-epoch job's first
// epoch checkpoint, named by its fine_tuned_model_checkpoint, answers
// completions and chat completions through the openai SDK and `alallo
// generate`, exports as hf, peft and gguf (its own weights, not the final
// model's), and is the base of a new job; a checkpoint that is not there
// is a 404 naming the model.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import OpenAI, { NotFoundError } from 'openai';

import { BIN, SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const digest = (text) => crypto.createHash('sha256').update(text).digest('hex');

describe('checkpoints as models', () => {
  let s;
  let client;
  let job;
  let first; // the first epoch's checkpoint
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G'] });
    client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 240000 });
    const lines = fs.readFileSync(SAMPLE, 'utf8').split('\n').filter((l) => l.trim()).slice(0, 30);
    const up = await s.upload('thirty.jsonl', Buffer.from(lines.join('\n') + '\n'));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    const created = await s.createJob({
      model: 'tiny', training_file: up.json.id,
      hyperparameters: { n_epochs: 2, batch_size: 8, learning_rate_multiplier: 10 },
    });
    assert.equal(created.status, 200, created.text);
    job = await waitFor(async () => {
      const j = await s.job(created.json.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 180000, everyMs: 200, what: 'the job to end' });
    assert.equal(job.status, 'succeeded', `${job.message}\n${s.output}`);
    const page = await client.fineTuning.jobs.checkpoints.list(job.id);
    first = page.data.find((c) => c.step_number === 4);
    assert.ok(first, JSON.stringify(page.data));
  });
  after(async () => s && s.stop());

  test('completions and chat completions answer from the checkpoint', async () => {
    const model = first.fine_tuned_model_checkpoint;
    assert.match(model, /^ft:tiny:.*:ckpt-step-4$/);
    const c = await client.completions.create({ model, prompt: 'Review: a good film\nSentiment:', max_tokens: 4, temperature: 0 });
    assert.equal(c.model, model);
    assert.equal(typeof c.choices[0].text, 'string');
    assert.ok(c.usage.prompt_tokens > 0, JSON.stringify(c));
    // Made into a model once: a second answer (now from the kept folder) is the same.
    const again = await client.completions.create({ model, prompt: 'Review: a good film\nSentiment:', max_tokens: 4, temperature: 0 });
    assert.equal(again.choices[0].text, c.choices[0].text);
    const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'a good film' }], max_tokens: 4, temperature: 0 });
    assert.equal(typeof chat.choices[0].message.content, 'string');
  });

  test('`alallo generate` through the API takes the checkpoint name', () => {
    const r = spawnSync(BIN, ['generate', '--model', first.fine_tuned_model_checkpoint, '--prompt', 'Review: a good film\nSentiment:', '--max-tokens', '3', '--temperature', '0'], {
      env: { ...process.env, ALALLO_URL: s.url, ALALLO_API_KEY: s.key }, timeout: 240000,
    });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  });

  test('exports hf, peft and gguf of its own weights', async () => {
    const get = (model, format) => s.call('GET', `/v1/models/${encodeURIComponent(model)}/export?format=${format}`);
    const bodies = {};
    for (const format of ['hf', 'peft', 'gguf']) {
      const r = await get(first.fine_tuned_model_checkpoint, format);
      assert.equal(r.status, 200, `${format}: ${r.text.slice(0, 300)}`);
      bodies[format] = r.text;
    }
    assert.ok(bodies.hf.includes('config.json'));
    assert.ok(bodies.peft.includes('adapter_config.json'));
    assert.ok(bodies.gguf.startsWith('GGUF'));
    const final = await get(job.fine_tuned_model, 'gguf');
    assert.equal(final.status, 200, final.text.slice(0, 300));
    assert.notEqual(digest(final.text), digest(bodies.gguf), 'the checkpoint exported the final model');
    const info = await s.call('GET', `/v1/models/${encodeURIComponent(first.fine_tuned_model_checkpoint)}`);
    assert.equal(info.status, 200, info.text);
    assert.equal(info.json.id, first.fine_tuned_model_checkpoint);
  });

  test('a checkpoint is the base of a new job', async () => {
    const files = await client.files.list();
    const created = await s.createJob({ model: first.fine_tuned_model_checkpoint, training_file: files.data[0].id, hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(created.status, 200, created.text);
    const done = await s.waitStatus(created.json.id, ['succeeded', 'failed', 'cancelled'], { timeoutMs: 180000 });
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    assert.ok(done.fine_tuned_model.startsWith(`ft:${first.fine_tuned_model_checkpoint}:`), done.fine_tuned_model);
    const c = await client.completions.create({ model: done.fine_tuned_model, prompt: 'a good film', max_tokens: 2 });
    assert.equal(c.model, done.fine_tuned_model);
  });

  test('a checkpoint that is not there, or not the caller\'s, is a 404 naming it', async () => {
    const missing = first.fine_tuned_model_checkpoint.replace(/ckpt-step-4$/, 'ckpt-step-5');
    await assert.rejects(
      client.completions.create({ model: missing, prompt: 'a', max_tokens: 1 }),
      (e) => e instanceof NotFoundError && e.message.includes(missing),
    );
    const other = new OpenAI({ apiKey: s.account('other'), baseURL: `${s.url}/v1`, maxRetries: 0 });
    await assert.rejects(
      other.completions.create({ model: first.fine_tuned_model_checkpoint, prompt: 'a', max_tokens: 1 }),
      (e) => e instanceof NotFoundError && e.message.includes(first.fine_tuned_model_checkpoint),
    );
    const r = await s.call('GET', `/v1/models/${encodeURIComponent(missing)}/export?format=hf`);
    assert.equal(r.status, 404, r.text);
    assert.ok(r.json.error.message.includes(missing), r.text);
  });
});
