// service_lifecycle.test.mjs - the job lifecycle end to end on the real
// binary: upload, create, the real trainer on a tiny model run by a local
// worker, the training log, events, checkpoints, the fine-tuned model, a
// completion from it; cancel of a running job; the log before training.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { BIN, SAMPLE, Serve, sleep, tinyModelsDir, tmpdir, waitFor } from './service_harness.mjs';

describe('lifecycle on one machine', () => {
  let s;
  let file;
  before(async () => {
    s = await Serve.start({
      args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=0.36'],
    });
    const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    file = up.json.id;
    // The local worker registers itself with this server.
    await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 1, {
      what: 'the local worker to register',
    });
  });
  after(async () => s && s.stop());

  test('a job goes queued -> running -> succeeded with log, events, checkpoints and a model', async () => {
    const created = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 2 }, suffix: 'it' });
    assert.equal(created.status, 200, created.text);
    const job = created.json;
    assert.equal(job.object, 'fine_tuning.job');
    assert.equal(job.status, 'queued');
    assert.ok(['Starting', 'Waiting for capacity'].includes(job.message), job.message);
    assert.equal(job.progress.max_steps, 50); // ceil(200 examples * 2 epochs / batch 8)
    assert.equal(job.training_method, 'Supervised fine-tuning');
    assert.ok(job.estimate.time.text.length > 0);

    const seen = new Set();
    const done = await waitFor(
      async () => {
        const j = await s.job(job.id);
        seen.add(j.status);
        return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
      },
      { timeoutMs: 180000, everyMs: 50, what: 'the job to end' },
    );
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    assert.equal(done.message, null);
    assert.equal(done.progress.percent, 100);
    assert.equal(done.progress.steps_done, 50);
    assert.match(done.fine_tuned_model, /^ft:tiny:it:/);
    assert.equal(done.time_left, null);
    assert.equal(done.attempts.length, 1);
    assert.equal(done.attempts[0].worker, 'w1');
    assert.equal(done.attempts[0].status, 'ended');
    assert.ok(done.finished_at >= done.created_at);

    const log = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/log`);
    assert.equal(log.status, 200);
    assert.match(log.headers.get('content-type'), /^text\/plain/);
    assert.match(log.text, /step 10\/50: loss \d+\.\d+/);
    assert.match(log.text, /training finished/);

    const events = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=100`);
    assert.equal(events.json.object, 'list');
    const messages = events.json.data.map((e) => e.message);
    assert.ok(messages.includes('The job has successfully completed'), messages.join('\n'));
    assert.ok(messages.some((m) => m.startsWith('Created fine-tuning job')));
    assert.ok(events.json.data.some((e) => e.type === 'metrics' && typeof e.data.train_loss === 'number'));
    for (const e of events.json.data) assert.equal(e.object, 'fine_tuning.job.event');

    const ck = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints`);
    assert.ok(ck.json.data.length >= 1, ck.text);
    assert.equal(ck.json.data[0].object, 'fine_tuning.job.checkpoint');
    assert.ok(ck.json.data[0].step_number > 0);
    assert.equal(typeof ck.json.data[0].metrics.train_loss, 'number');

    const models = await s.call('GET', '/v1/models');
    const tuned = models.json.data.find((m) => m.id === done.fine_tuned_model);
    assert.equal(tuned.kind, 'fine-tuned');
    assert.equal(models.json.data.find((m) => m.id === 'tiny').kind, 'base');

    const completion = await s.call('POST', '/v1/completions', {
      body: { model: done.fine_tuned_model, prompt: 'I loved this film', max_tokens: 4, temperature: 0 },
    });
    assert.equal(completion.status, 200, completion.text);
    assert.equal(completion.json.object, 'text_completion');
    assert.equal(typeof completion.json.choices[0].text, 'string');
    // A tiny model may end its answer at once (EOS first): then it stopped,
    // with no completion tokens; otherwise it ran to max_tokens.
    const usage = completion.json.usage, reason = completion.json.choices[0].finish_reason;
    assert.ok(usage.prompt_tokens >= 1, JSON.stringify(completion.json));
    assert.ok(reason === 'length' ? usage.completion_tokens === 4 : reason === 'stop' && usage.completion_tokens < 4,
      JSON.stringify(completion.json));

    const metrics = await s.call('GET', '/metrics', { key: null });
    assert.match(metrics.text, /alallo_jobs\{status="succeeded"\} 1/);
  });

  test('?follow=1 streams the log until the job ends', async () => {
    const created = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 3 } });
    const res = await fetch(`${s.url}/v1/fine_tuning/jobs/${created.json.id}/log?follow=1`, {
      headers: { Authorization: `Bearer ${s.key}` },
    });
    assert.equal(res.status, 200);
    const text = await res.text(); // ends only when the job has ended
    const j = await s.job(created.json.id);
    assert.equal(j.status, 'succeeded');
    assert.match(text, /step 10\/75: loss/);
    assert.match(text, /training finished/);
    const whole = await s.call('GET', `/v1/fine_tuning/jobs/${created.json.id}/log`);
    assert.equal(text, whole.text);
  });

  test('cancel of a running job: cancelling, then cancelled', async () => {
    const created = await s.createJob({
      model: 'tiny',
      training_file: file,
      hyperparameters: { n_epochs: 50, batch_size: 1 },
    });
    const id = created.json.id;
    await s.waitStatus(id, 'running');
    await waitFor(async () => (await s.job(id)).progress.steps_done > 0, { what: 'some steps' });
    const c = await s.call('POST', `/v1/fine_tuning/jobs/${id}/cancel`);
    assert.equal(c.status, 200, c.text);
    assert.ok(['cancelling', 'cancelled'].includes(c.json.status), c.json.status);
    const end = await s.waitStatus(id, ['cancelled', 'failed', 'succeeded']);
    assert.equal(end.status, 'cancelled');
    assert.ok(end.progress.steps_done > 0);
    assert.ok(end.progress.percent < 100);
    // Cancelled while running: the steps done are charged, once.
    const ledger = await s.call('GET', '/v1/billing/ledger');
    const rows = ledger.json.data.filter((r) => r.job === id);
    assert.ok(rows.length <= 1, JSON.stringify(rows));
    const again = await s.call('POST', `/v1/fine_tuning/jobs/${id}/cancel`);
    assert.equal(again.status, 409);
  });
});

describe('before training', () => {
  let s;
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'none'] });
  });
  after(async () => s && s.stop());

  test('a queued job waits for capacity and its log says so', async () => {
    const up = await s.upload('train.jsonl', fs.readFileSync(SAMPLE));
    const created = await s.createJob({ model: 'tiny', training_file: up.json.id });
    assert.equal(created.json.status, 'queued');
    assert.equal(created.json.message, 'Waiting for capacity');
    assert.equal(created.json.estimate.message, 'No capacity is free right now; the job would wait in the queue.');
    const log = await s.call('GET', `/v1/fine_tuning/jobs/${created.json.id}/log`);
    assert.equal(log.text, 'No log yet. It appears once training starts.');
    await sleep(300);
    assert.equal((await s.job(created.json.id)).status, 'queued');
    const c = await s.call('POST', `/v1/fine_tuning/jobs/${created.json.id}/cancel`);
    assert.equal(c.json.status, 'cancelled');
    // Following the log of an ended job without lines ends at once.
    const follow = await s.call('GET', `/v1/fine_tuning/jobs/${created.json.id}/log?follow=1`);
    assert.equal(follow.text, 'No log yet. It appears once training starts.\n');
  });
});

describe('workers come and go', () => {
  let s;
  const workers = [];
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'none', '--worker-timeout', '3'] });
  });
  after(async () => {
    for (const w of workers) if (w.exitCode === null && !w.signalCode) w.kill('SIGKILL');
    if (s) await s.stop();
  });

  function startWorker(name) {
    const w = spawn(BIN, ['worker', '--server', s.url, '--token', s.token, '--name', name, '--cpus', '1',
      '--mem', '4G', '--work-dir', tmpdir('alallo-worker-')], { stdio: ['ignore', 'ignore', 'pipe'] });
    w.stderrText = '';
    w.stderr.on('data', (d) => (w.stderrText += d));
    workers.push(w);
    return w;
  }

  test('a lost worker is noticed and its job continues elsewhere from its checkpoint', async () => {
    const up = await s.upload('train.jsonl', fs.readFileSync(SAMPLE));
    const created = await s.createJob({
      model: 'tiny', training_file: up.json.id, hyperparameters: { n_epochs: 20, batch_size: 1 },
    });
    const id = created.json.id;
    assert.equal(created.json.message, 'Waiting for capacity');
    const a = startWorker('first');
    await s.waitStatus(id, 'running', { timeoutMs: 60000 });
    await waitFor(async () => (await s.call('GET', `/v1/fine_tuning/jobs/${id}/checkpoints`)).json.data.length > 0, {
      what: 'a checkpoint', timeoutMs: 60000, everyMs: 50,
    });
    a.kill('SIGKILL');
    const moved = await s.waitStatus(id, 're-scheduling', { timeoutMs: 15000 });
    assert.equal(moved.message, 'Re-scheduling');
    assert.equal(moved.attempts[0].reason, 'worker lost');
    const workersNow = (await s.call('GET', '/v1/workers')).json.data;
    assert.equal(workersNow.find((w) => w.name === 'first').state, 'lost');

    startWorker('second');
    const done = await s.waitStatus(id, ['succeeded', 'failed'], { timeoutMs: 120000 });
    assert.equal(done.status, 'succeeded', done.message);
    assert.equal(done.attempts.length, 2);
    assert.equal(done.attempts[1].worker, 'second');
    assert.ok(done.attempts[1].start_step > 0, `resumed from step ${done.attempts[1].start_step}`);
    const messages = [];
    for (let after = null; ;) {
      const page = await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100${after ? `&after=${after}` : ''}`);
      messages.push(...page.json.data.map((e) => e.message));
      if (!page.json.has_more) break;
      after = page.json.last_id;
    }
    // Killed at its checkpoint, or after more steps the server had heard
    // of (then the steps after the checkpoint are repeated, and it says so).
    assert.ok(messages.some((m) => /^Resumed from (the checkpoint at )?step \d+/.test(m)), messages.join('\n'));
    assert.ok(messages.some((m) => m.startsWith('The worker first was lost')));
  });
});
