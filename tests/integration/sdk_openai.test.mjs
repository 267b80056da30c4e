// sdk_openai.test.mjs - the official `openai` npm SDK, unchanged, with
// baseURL pointed at alallo: upload a file, create jobs, list them with
// paging, retrieve, cancel, list events and checkpoints, and a completion
// from the fine-tuned model. The job trains for real on a tiny model.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import OpenAI, { NotFoundError, AuthenticationError, BadRequestError, toFile } from 'openai';

import { SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

describe('the openai SDK against alallo', () => {
  let s;
  let client;
  let fileId;
  let doneJob;
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=sdk,cpus=1,mem=4G'] });
    client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 60000 });
  });
  after(async () => s && s.stop());

  test('files.create uploads and validates a data set', async () => {
    const f = await client.files.create({
      file: await toFile(fs.createReadStream(SAMPLE), 'sentiment-train.jsonl'),
      purpose: 'fine-tune',
    });
    assert.equal(f.object, 'file');
    assert.equal(f.purpose, 'fine-tune');
    assert.equal(f.filename, 'sentiment-train.jsonl');
    fileId = f.id;
    await assert.rejects(
      client.files.create({ file: await toFile(Buffer.from('{"prompt":"x"}\n'), 'bad.jsonl'), purpose: 'fine-tune' }),
      (e) => e instanceof BadRequestError && e.message.includes('line 1 of bad.jsonl: missing field "completion"'),
    );
    const page = await client.files.list();
    assert.ok(page.data.some((x) => x.id === fileId));
    const one = await client.files.retrieve(fileId);
    assert.equal(one.bytes, fs.statSync(SAMPLE).size);
  });

  test('jobs: create, retrieve, run to success, events and checkpoints', async () => {
    const job = await client.fineTuning.jobs.create({
      model: 'tiny',
      training_file: fileId,
      suffix: 'sdk',
      method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 1 } } },
    });
    assert.equal(job.object, 'fine_tuning.job');
    assert.equal(job.status, 'queued');
    assert.equal(job.training_file, fileId);
    doneJob = await waitFor(
      async () => {
        const j = await client.fineTuning.jobs.retrieve(job.id);
        return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
      },
      { timeoutMs: 180000, what: 'the job to end' },
    );
    assert.equal(doneJob.status, 'succeeded', doneJob.message);
    assert.match(doneJob.fine_tuned_model, /^ft:tiny:sdk:/);
    assert.equal(doneJob.error, null);

    const events = [];
    for await (const e of client.fineTuning.jobs.listEvents(job.id, { limit: 5 })) events.push(e);
    assert.ok(events.length > 5, 'paged through more than one page of events');
    assert.ok(events.every((e) => e.object === 'fine_tuning.job.event'));
    assert.ok(events.some((e) => e.message === 'The job has successfully completed'));
    assert.equal(new Set(events.map((e) => e.id)).size, events.length);

    const cks = await client.fineTuning.jobs.checkpoints.list(job.id);
    assert.ok(cks.data.length >= 1);
    assert.equal(cks.data[0].object, 'fine_tuning.job.checkpoint');
    assert.equal(typeof cks.data[0].metrics.train_loss, 'number');
  });

  test('jobs: list with paging, cancel', async () => {
    const created = [];
    for (let i = 0; i < 7; i++) {
      // Long jobs on the one worker: the first runs, the rest wait.
      const j = await client.fineTuning.jobs.create({
        model: 'tiny',
        training_file: fileId,
        hyperparameters: { n_epochs: 50, batch_size: 1 },
      });
      created.push(j.id);
    }
    const first = await client.fineTuning.jobs.list({ limit: 3 });
    assert.equal(first.data.length, 3);
    assert.equal(first.has_more, true);
    assert.deepEqual(first.data.map((j) => j.id), created.slice(-3).reverse());
    const all = [];
    for await (const j of client.fineTuning.jobs.list({ limit: 3 })) all.push(j.id);
    assert.deepEqual(all, [...created].reverse().concat([doneJob.id]));

    for (const id of created) {
      const c = await client.fineTuning.jobs.cancel(id);
      assert.ok(['cancelled', 'cancelling'].includes(c.status), c.status);
    }
    for (const id of created) {
      await waitFor(async () => (await client.fineTuning.jobs.retrieve(id)).status === 'cancelled', {
        what: `${id} cancelled`,
      });
    }
    await assert.rejects(client.fineTuning.jobs.retrieve('ftjob-nope'), NotFoundError);
  });

  test('completions from the fine-tuned model', async () => {
    const c = await client.completions.create({
      model: doneJob.fine_tuned_model,
      prompt: 'What a wonderful film',
      max_tokens: 4,
      temperature: 0,
    });
    assert.equal(c.object, 'text_completion');
    assert.equal(typeof c.choices[0].text, 'string');
    assert.ok(c.usage.total_tokens > 0);
  });

  test('legacy completions streamed with logprobs, as the SDK reads them', async () => {
    const body = { model: doneJob.fine_tuned_model, prompt: 'What a wonderful film', max_tokens: 4, temperature: 0, logprobs: 2 };
    const whole = await client.completions.create(body);
    const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = '';
    const tokens = [];
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        text += ch.text;
        if (ch.logprobs) tokens.push(...ch.logprobs.tokens);
      }
    }
    assert.equal(text, whole.choices[0].text);
    assert.deepEqual(tokens, whole.choices[0].logprobs.tokens);
    assert.equal(tokens.length, whole.usage.completion_tokens);
    assert.deepEqual(usage, whole.usage);
  });

  test('a wrong key is an AuthenticationError', async () => {
    const bad = new OpenAI({ apiKey: 'sk-alallo-wrong', baseURL: `${s.url}/v1`, maxRetries: 0 });
    await assert.rejects(bad.fineTuning.jobs.list(), AuthenticationError);
  });
});
