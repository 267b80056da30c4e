// user_mistakes.test.mjs - a user's mistake is a 4xx with a sentence the
// user can act on, never a 500, and no answer names a server folder:
//  * completions: a prompt longer than the model's context, seeds across
//    the whole range JSON carries;
//  * exports: format=peft of a base model, of a full fine-tune, and of a
//    cancelled LoRA job's partial model (which works); a limit on exports
//    made at once.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

// No answer may carry the server's folders.
function noPaths(s, r) {
  for (const dir of [s.data, tinyModelsDir()])
    assert.ok(!r.text.includes(dir), `answer names ${dir}: ${r.text}`);
  assert.ok(!/\/(tmp|jobs|models)\//.test(r.json ? r.json.error.message : ''), r.text);
}

describe('user mistakes are 4xx', () => {
  let s;
  let lora; // a succeeded LoRA job
  let full; // a succeeded full fine-tune
  let partial; // a cancelled LoRA job with a partial model
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=0.36'] });
    const file = (await s.upload('sentiment.jsonl', fs.readFileSync(SAMPLE))).json.id;
    const make = async (extra) => {
      const r = await s.createJob({ model: 'tiny', training_file: file, ...extra });
      assert.equal(r.status, 200, r.text);
      return r.json.id;
    };
    lora = await s.waitStatus(await make({ hyperparameters: { n_epochs: 1 } }), ['succeeded', 'failed'], { timeoutMs: 180000 });
    assert.equal(lora.status, 'succeeded', lora.message);
    full = await s.waitStatus(await make({ adapter: 'full', hyperparameters: { n_epochs: 1 } }), ['succeeded', 'failed'], { timeoutMs: 180000 });
    assert.equal(full.status, 'succeeded', full.message);
    const id = await make({ hyperparameters: { n_epochs: 50, batch_size: 1 } });
    await s.waitStatus(id, 'running');
    await waitFor(async () => (await s.job(id)).progress.steps_done > 2, { what: 'some steps' });
    assert.equal((await s.call('POST', `/v1/fine_tuning/jobs/${id}/cancel`)).status, 200);
    partial = await waitFor(async () => {
      const j = await s.job(id);
      return j.status === 'cancelled' && j.fine_tuned_model ? j : false;
    }, { timeoutMs: 120000, what: 'the partial model' });
  });
  after(async () => s && s.stop());

  test('a prompt longer than the context is 400 naming the limit in tokens', async () => {
    const r = await s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: 'a good film. '.repeat(200), max_tokens: 4 } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'prompt');
    assert.match(r.json.error.message, /maximum context length is \d+ tokens, and the prompt is \d+ tokens/);
    noPaths(s, r);
    // Within the context it still answers.
    const ok = await s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: 'a good film', max_tokens: 4 } });
    assert.equal(ok.status, 200, ok.text);
  });

  test('seeds: every integer JSON carries works, the rest is 400', async () => {
    for (const seed of ['0', '9007199254740992', '9007199254740993', '9223372036854775807']) {
      const r = await s.call('POST', '/v1/completions', { body: `{"model":"tiny","prompt":"a good film","max_tokens":2,"temperature":1,"seed":${seed}}` });
      assert.equal(r.status, 200, `${seed}: ${r.text}`);
    }
    for (const seed of ['-1', '1.5', '"7"', '18446744073709551616']) {
      const r = await s.call('POST', '/v1/completions', { body: `{"model":"tiny","prompt":"a good film","seed":${seed}}` });
      assert.equal(r.status, 400, `${seed}: ${r.text}`);
    }
  });

  test('format=peft of a base model or a full fine-tune is 400 and says what to use', async () => {
    for (const [model, what] of [['tiny', /base model has no adapter; use hf or gguf/], [full.fine_tuned_model, /full fine-tune has no adapter; use hf or gguf/]]) {
      const r = await s.call('GET', `/v1/models/${encodeURIComponent(model)}/export?format=peft`);
      assert.equal(r.status, 400, `${model}: ${r.text}`);
      assert.match(r.json.error.message, what);
      noPaths(s, r);
    }
    const ok = await s.call('GET', `/v1/models/${encodeURIComponent(lora.fine_tuned_model)}/export?format=peft`);
    assert.equal(ok.status, 200, ok.text);
    assert.ok(ok.text.includes('adapter_config.json'));
  });

  test("a cancelled LoRA job's partial model exports its adapter", async () => {
    for (const format of ['peft', 'hf']) {
      const r = await s.call('GET', `/v1/models/${encodeURIComponent(partial.fine_tuned_model)}/export?format=${format}`);
      assert.equal(r.status, 200, `${format}: ${r.text}`);
      assert.ok(r.text.includes(format === 'peft' ? 'adapter_model.safetensors' : 'config.json'));
    }
  });

  test('exports made at once are limited: 429 beyond, never a pile of copies', async () => {
    const model = encodeURIComponent(lora.fine_tuned_model);
    const answers = await Promise.all(Array.from({ length: 8 }, () => fetch(`${s.url}/v1/models/${model}/export?format=hf`, { headers: { Authorization: `Bearer ${s.key}` } })));
    const codes = answers.map((a) => a.status);
    assert.ok(codes.every((c) => c === 200 || c === 429), codes.join());
    assert.ok(codes.includes(429), codes.join());
    for (const a of answers) {
      const text = await a.text();
      if (a.status === 429) assert.match(JSON.parse(text).error.message, /Too many exports/);
    }
    // Once the downloads end their places are free again.
    await waitFor(async () => (await s.call('GET', `/v1/models/${model}/export?format=hf`)).status === 200, { what: 'a free place' });
    await waitFor(async () => fs.readdirSync(`${s.data}/tmp`).length === 0, { what: 'the copies to go' });
  });
});
