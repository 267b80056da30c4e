// security_worker.test.mjs - caps on what reaches users through the worker
// protocol, driven by a stand-in worker that speaks the protocol with the
// real worker token against the real `serve --local-worker none`:
//  * a trainer log line longer than the store's cap (1,024 bytes) is cut,
//    never stored whole, and the log still reads line by line;
//  * an error line of any length becomes a bounded job message;
//  * a worker cannot report for another worker's attempt once fenced, and a
//    report for an attempt id that does not exist is 404.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { SAMPLE, Serve, tinyModelsDir } from './service_harness.mjs';

const LINE_CAP = 1024; // STORE_LOG_LINE_MAX, with its NUL

async function internal(s, p, body) {
  const r = await fetch(s.url + p, {
    method: 'POST',
    headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

describe('what a worker can put in front of users is bounded', () => {
  let s;
  let file;
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'none'] });
    const reg = await internal(s, '/internal/workers/register', {
      name: 'stand-in', cpus: 1, mem_bytes: 4 * 1024 ** 3, accelerator: 'cpu', price_per_hour: 0.4, class: 'on-demand',
      speed: { tokens_per_s: null, flops: null },
    });
    assert.equal(reg.status, 200, JSON.stringify(reg.json));
    file = (await s.upload('sentiment.jsonl', fs.readFileSync(SAMPLE))).json.id;
  });
  after(async () => s && s.stop());

  // The stand-in runs one attempt at a time, like a real worker: the one
  // it holds is finished (as a user error) before it claims the next.
  let held = null;
  async function claimed() {
    if (held) {
      const f = await internal(s, `/internal/attempts/${held.attempt_id}/finish`, {
        fence: held.fence, exit_status: 3, signal: null, error_kind: 'user', line: 'done here', stop: null,
      });
      assert.ok([200, 409].includes(f.status), JSON.stringify(f.json));
      held = null;
    }
    const job = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(job.status, 200, job.text);
    const c = await internal(s, '/internal/workers/stand-in/claim', {});
    assert.equal(c.status, 200, JSON.stringify(c.json));
    assert.equal(c.json.job_id, job.json.id);
    held = c.json;
    return c.json;
  }

  test('a log line over the cap is cut; the log still reads line by line', async () => {
    const c = await claimed();
    const long = `step 1: ${'x'.repeat(200000)}`;
    const ev = await internal(s, `/internal/attempts/${c.attempt_id}/events`, {
      fence: c.fence, first: 0,
      events: [
        { event: 'started', t: 0, step: 0, max_steps: 25, examples: 200, tokens: 4000, resumed_from: null },
        { event: 'log', t: 0.1, line: 'training started' },
        { event: 'log', t: 0.2, line: long },
        { event: 'log', t: 0.3, line: 'after the long line' },
      ],
    });
    assert.ok([200, 400, 413].includes(ev.status), JSON.stringify(ev.json));
    const log = await s.call('GET', `/v1/fine_tuning/jobs/${c.job_id}/log`);
    assert.equal(log.status, 200);
    const lines = log.text.split('\n').filter((l) => l.length);
    for (const l of lines) assert.ok(Buffer.byteLength(l) < LINE_CAP, `a log line of ${Buffer.byteLength(l)} bytes`);
    assert.ok(!log.text.includes('x'.repeat(LINE_CAP)));
    if (ev.status === 200) assert.deepEqual([lines[0], lines.at(-1)], ['training started', 'after the long line']);
    // The job's events (what the dashboard shows) are bounded too.
    const events = await s.call('GET', `/v1/fine_tuning/jobs/${c.job_id}/events?limit=100`);
    for (const e of events.json.data) assert.ok(Buffer.byteLength(e.message) < 4096, `an event message of ${e.message.length}`);
  });

  test('an error line of any length becomes a bounded message', async () => {
    const c = await claimed();
    await internal(s, `/internal/attempts/${c.attempt_id}/events`, {
      fence: c.fence, first: 0,
      events: [{ event: 'started', t: 0, step: 0, max_steps: 25, examples: 200, tokens: 4000, resumed_from: null }],
    });
    const line = `line 3 of train.jsonl: ${'y'.repeat(100000)}`;
    const fin = await internal(s, `/internal/attempts/${c.attempt_id}/finish`, {
      fence: c.fence, exit_status: 3, signal: null, error_kind: 'user', line, stop: null,
    });
    assert.equal(fin.status, 200, JSON.stringify(fin.json));
    const j = await s.job(c.job_id);
    assert.equal(j.status, 'failed');
    assert.ok(j.message.startsWith('Training failed: line 3 of train.jsonl: yyy'), j.message.slice(0, 80));
    assert.ok(Buffer.byteLength(j.message) <= 512, `message of ${Buffer.byteLength(j.message)} bytes`);
  });

  test('reports for unknown or fenced attempts change nothing', async () => {
    const none = await internal(s, '/internal/attempts/att-doesnotexist/events', { fence: 1, first: 0, events: [] });
    assert.equal(none.status, 404);
    const c = await claimed();
    // A wrong fence is fenced, and the job stays as it was.
    const before = await s.job(c.job_id);
    const wrong = await internal(s, `/internal/attempts/${c.attempt_id}/events`, {
      fence: c.fence + 1, first: 0,
      events: [{ event: 'done', t: 1, step: 25, train_loss: 0.1, model_dir: '/tmp', adapter_dir: null }],
    });
    assert.equal(wrong.status, 409);
    const afterJob = await s.job(c.job_id);
    assert.equal(afterJob.status, before.status);
    assert.equal(afterJob.fine_tuned_model, null);
  });
});
