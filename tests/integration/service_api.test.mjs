// service_api.test.mjs - the API over real HTTP: paging, isolation between
// accounts on every endpoint, and every kind of bad input SPEC names (bad
// JSON, missing fields, a bad line in an upload, unknown model or file, an
// oversized body, bad auth).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Serve, freePort, tmpdir, waitFor } from './service_harness.mjs';

// A model folder the catalog lists (these jobs never run, so its weights
// are never read).
function fakeModels() {
  const dir = path.join(tmpdir('alallo-fake-'), 'models');
  fs.mkdirSync(path.join(dir, 'tiny'), { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'tiny', 'config.json'),
    JSON.stringify({
      hidden_size: 64, intermediate_size: 172, num_hidden_layers: 2, num_attention_heads: 4,
      num_key_value_heads: 2, vocab_size: 400, max_position_embeddings: 512, tie_word_embeddings: true,
    }),
  );
  fs.writeFileSync(path.join(dir, 'tiny', 'tokenizer.json'), '{}');
  fs.writeFileSync(path.join(dir, 'tiny', 'model.safetensors'), 'weights');
  return dir;
}

const GOOD = '{"prompt":"good film","completion":" positive"}\n{"prompt":"bad film","completion":" negative"}\n';

describe('the API over HTTP', () => {
  let s;
  let other; // the key of a second account
  let myFile;
  let theirFile;
  before(async () => {
    s = await Serve.start({ args: ['--local-worker', 'none', '--max-upload', '64K', '--models', fakeModels()] });
    other = s.account('other');
    assert.match(other, /^sk-alallo-[0-9a-f]{64}$/);
    myFile = (await s.upload('mine.jsonl', GOOD)).json.id;
    theirFile = (await s.upload('theirs.jsonl', GOOD, { key: other })).json.id;
  });
  after(async () => s && s.stop());

  test('bad auth is 401 with the error shape', async () => {
    for (const key of [null, 'sk-alallo-nope', s.token]) {
      const r = await s.call('GET', '/v1/fine_tuning/jobs', { key });
      assert.equal(r.status, 401);
      assert.equal(r.json.error.code, 'invalid_api_key');
      assert.equal(typeof r.json.error.message, 'string');
      assert.ok('param' in r.json.error);
    }
    const w = await s.call('POST', '/internal/workers/register', { key: s.key, body: {} });
    assert.equal(w.status, 401);
    const drain = await s.call('POST', '/v1/workers/x/drain', { key: other });
    assert.equal(drain.status, 403);
  });

  test('bad JSON, missing fields, unknown model or file', async () => {
    const cases = [
      ['{"model": "tiny",', 400, null],
      ['"just a string"', 400, null],
      [{}, 400, 'model'],
      [{ model: 'tiny' }, 400, 'training_file'],
      [{ model: 'no-such-model', training_file: myFile }, 404, 'model'],
      [{ model: 'no-such-model', training_file: 'file-doesnotexist' }, 404, 'model'],
    ];
    for (const [body, status, param] of cases) {
      const r = await s.call('POST', '/v1/fine_tuning/jobs', { body });
      assert.equal(r.status, status, `${JSON.stringify(body)} -> ${r.text}`);
      assert.equal(r.json.error.param, param, r.text);
    }
    const est = await s.call('POST', '/v1/fine_tuning/estimates', { body: '{nope' });
    assert.equal(est.status, 400);
    const method = await s.call('PUT', '/v1/fine_tuning/jobs');
    assert.equal(method.status, 405);
    const unknown = await s.call('GET', '/v1/no/such/thing');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.error.code, 'not_found');
  });

  test('a bad line in an upload is named by its number and problem', async () => {
    const bad = GOOD + '{"prompt":"x"}\n';
    const r = await s.upload('train.jsonl', bad);
    assert.equal(r.status, 400);
    assert.deepEqual(r.json.error, {
      code: 'invalid_request_error',
      message: 'line 3 of train.jsonl: missing field "completion"',
      param: 'file',
    });
    const notjson = await s.upload('x.jsonl', 'hello\n');
    assert.equal(notjson.status, 400);
    // Not JSONL at all: the message says what alallo reads.
    assert.equal(notjson.json.error.message,
      "x.jsonl: alallo reads JSONL: one JSON object per line (line 1 starts with 'h')");
    const purpose = await s.upload('x.jsonl', GOOD, { purpose: 'assistants' });
    assert.equal(purpose.status, 400);
    assert.equal(purpose.json.error.param, 'purpose');
  });

  test('oversized bodies are 413 and never kept', async () => {
    const big = 'x'.repeat(70 * 1024);
    const up = await s.upload('big.jsonl', `{"prompt":"${big}","completion":"y"}\n`);
    assert.equal(up.status, 413);
    assert.equal(up.json.error.code, 'too_large');
    const json = await s.call('POST', '/v1/fine_tuning/jobs', {
      body: JSON.stringify({ model: 'tiny', training_file: myFile, pad: 'y'.repeat(5 * 1024 * 1024) }),
    });
    assert.equal(json.status, 413);
  });

  test('jobs page newest first with after, limit and has_more', async () => {
    const ids = [];
    for (let i = 0; i < 45; i++) {
      const r = await s.createJob({ model: 'tiny', training_file: myFile, name: `job ${i}` });
      assert.equal(r.status, 200, r.text);
      ids.push(r.json.id);
    }
    await s.createJob({ model: 'tiny', training_file: theirFile }, other);
    const seen = [];
    let after = null;
    let pages = 0;
    for (;;) {
      const r = await s.call('GET', `/v1/fine_tuning/jobs?limit=10${after ? `&after=${after}` : ''}`);
      assert.equal(r.status, 200);
      assert.equal(r.json.object, 'list');
      assert.equal(r.json.first_id, r.json.data[0]?.id ?? null);
      seen.push(...r.json.data.map((j) => j.id));
      pages++;
      if (!r.json.has_more) break;
      after = r.json.last_id;
    }
    assert.equal(pages, 5);
    assert.deepEqual(seen, [...ids].reverse());
    const dflt = await s.call('GET', '/v1/fine_tuning/jobs');
    assert.equal(dflt.json.data.length, 20);
    assert.equal(dflt.json.has_more, true);
  });

  test('files page newest first too', async () => {
    const ids = [];
    for (let i = 0; i < 12; i++) ids.push((await s.upload(`f${i}.jsonl`, GOOD)).json.id);
    const seen = [];
    let after = null;
    for (;;) {
      const q = `/v1/files?limit=5${after ? `&after=${after}` : ''}`;
      const r = await s.call('GET', q);
      assert.equal(r.status, 200);
      assert.equal(r.json.object, 'list');
      seen.push(...r.json.data.map((f) => f.id));
      if (!r.json.has_more) break;
      after = r.json.last_id;
    }
    const mine = seen.filter((id) => ids.includes(id));
    assert.deepEqual(mine, [...ids].reverse());
    assert.ok(!seen.includes(theirFile));
    for (const q of ['limit=0', 'limit=101', 'limit=ten', `after=${theirFile}`]) {
      const r = await s.call('GET', `/v1/fine_tuning/jobs?${q}`);
      assert.equal(r.status, 400, q);
    }
  });

  test("another account's objects are 404 on every endpoint", async () => {
    for (const [method, p] of [
      ['GET', `/v1/files/${theirFile}`],
      ['GET', `/v1/files/${theirFile}/content`],
      ['DELETE', `/v1/files/${theirFile}`],
    ]) {
      const r = await s.call(method, p);
      assert.equal(r.status, 404, `${method} ${p}`);
    }
    const r = await s.call('POST', '/v1/fine_tuning/jobs', { body: { model: 'tiny', training_file: theirFile } });
    assert.equal(r.status, 404, r.text);
    assert.equal(r.json.error.param, 'training_file');
    const theirJob = (await s.createJob({ model: 'tiny', training_file: theirFile }, other)).json.id;
    for (const [method, p] of [
      ['GET', `/v1/fine_tuning/jobs/${theirJob}`],
      ['POST', `/v1/fine_tuning/jobs/${theirJob}/cancel`],
      ['GET', `/v1/fine_tuning/jobs/${theirJob}/events`],
      ['GET', `/v1/fine_tuning/jobs/${theirJob}/checkpoints`],
      ['GET', `/v1/fine_tuning/jobs/${theirJob}/log`],
      ['GET', `/v1/fine_tuning/jobs/${theirJob}/log?follow=1`],
    ]) {
      const x = await s.call(method, p);
      assert.equal(x.status, 404, `${method} ${p}: ${x.text}`);
    }
    const mine = await s.call('GET', '/v1/fine_tuning/jobs?limit=100');
    assert.ok(!mine.json.data.some((j) => j.id === theirJob));
    assert.equal((await s.job(theirJob, other)).status, 'queued');
    for (const model of ['ft:tiny:alallo:nope']) {
      const c = await s.call('POST', '/v1/completions', { body: { model, prompt: 'x' } });
      assert.equal(c.status, 404);
      const m = await s.call('GET', `/v1/models/${encodeURIComponent(model)}`);
      assert.equal(m.status, 404);
    }
    const ledger = await s.call('GET', '/v1/billing/ledger', { key: other });
    assert.deepEqual(ledger.json.data, []);
    // Their file is still there for them.
    assert.equal((await s.call('GET', `/v1/files/${theirFile}`, { key: other })).status, 200);
    const list = await s.call('GET', '/v1/files', { key: other });
    assert.deepEqual(list.json.data.map((f) => f.id), [theirFile]);
  });

  test('health and metrics need no key', async () => {
    const h = await s.call('GET', '/healthz', { key: null });
    assert.equal(h.json.status, 'ok');
    const m = await s.call('GET', '/metrics', { key: null });
    assert.match(m.headers.get('content-type'), /^text\/plain/);
    assert.match(m.text, /# TYPE alallo_http_requests_total counter/);
    assert.match(m.text, /alallo_http_requests_total\{code="413"\} [1-9]/);
    assert.match(m.text, /alallo_internal_failures_total 0/);
    const dash = await fetch(`${s.url}/`);
    assert.equal(dash.status, 200);
    assert.match(dash.headers.get('content-type'), /^text\/html/);
  });
});

describe('a failure on alallo\'s side', () => {
  let s;
  let hook;
  const received = [];
  before(async () => {
    const port = await freePort();
    hook = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        received.push({ path: req.url, body: JSON.parse(body) });
        res.end('ok');
      });
    });
    await new Promise((r) => hook.listen(port, '127.0.0.1', r));
    s = await Serve.start({
      args: ['--local-worker', 'none', '--models', fakeModels(), '--webhook', `http://127.0.0.1:${port}/hook`],
    });
  });
  after(async () => {
    if (s) await s.stop();
    hook?.close();
  });

  test('is logged, counted in /metrics and sent to the webhook; the user sees the fixed message', async () => {
    const w = { key: s.token };
    const reg = await s.call('POST', '/internal/workers/register', {
      ...w,
      body: { name: 'fake', cpus: 1, mem_bytes: 4e9, accelerator: 'cpu', price_per_hour: 1, class: 'spot', speed: { tokens_per_s: null, flops: null } },
    });
    assert.equal(reg.status, 200, reg.text);
    const file = (await s.upload('t.jsonl', GOOD)).json.id;
    const job = (await s.createJob({ model: 'tiny', training_file: file })).json;
    const claim = await s.call('POST', '/internal/workers/fake/claim', { ...w, body: {} });
    assert.equal(claim.status, 200, claim.text);
    assert.equal(claim.json.job_id, job.id);
    const { attempt_id: att, fence } = claim.json;
    const ev = await s.call('POST', `/internal/attempts/${att}/events`, {
      ...w, body: { fence, first: 0, events: [{ event: 'started', t: 0, step: 0, max_steps: 1, resumed_from: null }] },
    });
    assert.equal(ev.status, 200, ev.text);
    const fin = await s.call('POST', `/internal/attempts/${att}/finish`, {
      ...w, body: { fence, exit_status: null, signal: 11, error_kind: null, line: 'Segmentation fault', stop: null },
    });
    assert.equal(fin.status, 200, fin.text);
    const j = await s.job(job.id);
    assert.equal(j.status, 'failed');
    assert.equal(j.message, "Failed. We've been notified and are looking into it.");
    assert.equal(j.error.code, 'internal_error');
    assert.equal(j.price.charged, 0);
    await waitFor(() => received.length > 0, { what: 'the webhook', timeoutMs: 10000 });
    assert.equal(received[0].path, '/hook');
    assert.equal(received[0].body.type, 'job.failed_internal');
    assert.equal(received[0].body.job, job.id);
    assert.match(received[0].body.detail, /Segmentation fault/);
    const m = await s.call('GET', '/metrics', { key: null });
    assert.match(m.text, /alallo_internal_failures_total 1/);
    assert.match(s.output, new RegExp(`error: job ${job.id} failed on alallo's side: .*signal 11|Segmentation fault`));
    // A stale report after that changes nothing.
    const late = await s.call('POST', `/internal/attempts/${att}/events`, {
      ...w, body: { fence: fence - 1, events: [{ event: 'done', step: 1 }] },
    });
    assert.equal(late.status, 409);
    assert.equal((await s.job(job.id)).status, 'failed');
  });
});
