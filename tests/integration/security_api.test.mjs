// security_api.test.mjs - the security controls of docs/security.md, tried
// against the real binary over real HTTP:
//  * API keys are random, shown once, stored hashed: neither the database
//    nor its WAL holds a key; secrets files are 0600, the data folder 0700;
//  * worker endpoints refuse API keys, wrong and missing tokens; /v1
//    refuses the worker token;
//  * isolation on what service_api.test.mjs does not reach: a trained job's
//    fine-tuned model (retrieve, export, completions, the models list), its
//    ledger rows, another account's file as validation_file or in an
//    estimate, and `after` cursors naming another account's objects;
//  * size caps: every JSON route answers 413 to a body over the cap, a data
//    set line over 1 MiB is refused, a trainer log line is cut to the
//    store's cap, an over-long URL is refused and the server stays up;
//  * ids never become paths: traversal ids, raw and percent-encoded, on
//    every id-taking route, model ids and file ids in bodies, upload names;
//  * no secrets in the server log (stderr) or a worker's log after all this.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const GOOD = '{"prompt":"good film","completion":" positive"}\n{"prompt":"bad film","completion":" negative"}\n';

// A request with the path sent exactly as given (fetch would normalise
// `..` segments away before they reach the server).
function raw(s, method, rawPath, { key, body, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (key) h.Authorization = `Bearer ${key}`;
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      h['Content-Length'] = Buffer.byteLength(body);
    }
    const req = http.request({ host: '127.0.0.1', port: s.port, method, path: rawPath, headers: h }, (res) => {
      const chunks = [];
      let size = 0;
      res.on('data', (c) => {
        size += c.length;
        if (size < 1 << 20) chunks.push(c);
        else res.destroy(); // never read a whole streamed file
      });
      res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString('latin1') }));
      res.on('close', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString('latin1') }));
    });
    req.setTimeout(15000, () => req.destroy(new Error(`timeout on ${method} ${rawPath}`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

// Collects serve's stderr (its log) from here on, apart from the banner
// that `serve` prints on stdout by design.
function logOf(s) {
  let log = '';
  s.proc.stderr.on('data', (d) => (log += d));
  return () => log;
}

describe('security', () => {
  let s; // with a local worker and a trained job
  let log;
  let other; // key of a second account
  let myFile;
  let theirFile;
  let job; // a succeeded job of the account default
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=0.36'] });
    log = logOf(s);
    other = s.account('other');
    myFile = (await s.upload('sentiment.jsonl', fs.readFileSync(SAMPLE))).json.id;
    theirFile = (await s.upload('theirs.jsonl', GOOD, { key: other })).json.id;
    const r = await s.createJob({ model: 'tiny', training_file: myFile, hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(r.status, 200, r.text);
    job = await s.waitStatus(r.json.id, ['succeeded', 'failed'], { timeoutMs: 180000 });
    assert.equal(job.status, 'succeeded', job.message);
  });
  after(async () => s && s.stop());

  test('API keys are random and stored hashed; secrets files are private', async () => {
    const third = s.account('third');
    const keys = [s.key, other, third];
    for (const k of keys) assert.match(k, /^sk-alallo-[0-9a-f]{64}$/);
    assert.equal(new Set(keys).size, 3);
    // 32 random bytes each: no two keys share a long run (a counter or a
    // clock would).
    assert.notEqual(other.slice(10, 26), third.slice(10, 26));
    // The store, its WAL and its shared memory hold no key, in any case.
    for (const f of fs.readdirSync(s.data).filter((n) => n.startsWith('alallo.db'))) {
      const bytes = fs.readFileSync(path.join(s.data, f)).toString('latin1').toLowerCase();
      for (const k of keys) {
        assert.ok(!bytes.includes(k.toLowerCase()), `${f} holds an API key`);
        assert.ok(!bytes.includes(k.slice(10).toLowerCase()), `${f} holds a key's secret part`);
      }
      assert.ok(!bytes.includes(s.token.toLowerCase()), `${f} holds the worker token`);
    }
    for (const f of ['api-key', 'worker-token']) assert.equal(fs.statSync(path.join(s.data, f)).mode & 0o777, 0o600, f);
    assert.equal(fs.statSync(s.data).mode & 0o077, 0, 'the data folder is private');
    // A key differing in one digit is refused (no prefix match).
    const near = s.key.slice(0, -1) + (s.key.at(-1) === '0' ? '1' : '0');
    for (const k of [near, s.key.slice(0, -1), `${s.key}0`, s.key.toUpperCase(), s.key.slice(10)]) {
      assert.equal((await s.call('GET', '/v1/files', { key: k })).status, 401, k);
    }
  });

  test('worker endpoints need the worker token; /v1 refuses it', async () => {
    const internal = [
      ['POST', '/internal/workers/register'],
      ['POST', '/internal/workers/w1/heartbeat'],
      ['POST', '/internal/workers/w1/claim'],
      ['POST', '/internal/attempts/att-x/events'],
      ['POST', '/internal/attempts/att-x/finish'],
    ];
    for (const [method, p] of internal) {
      for (const key of [null, s.key, other, 'nope', s.token.slice(0, -1), `${s.token}x`]) {
        const r = await s.call(method, p, { key, body: {} });
        assert.equal(r.status, 401, `${method} ${p} with ${key ? key.slice(0, 12) : 'nothing'}`);
      }
      for (const h of [`Basic ${s.token}`, `bearer${s.token}`, 'Bearer ']) {
        const r = await s.call(method, p, { key: null, headers: { Authorization: h }, body: {} });
        assert.equal(r.status, 401, `${method} ${p} with ${h.slice(0, 8)}`);
      }
    }
    for (const [method, p] of [['GET', '/v1/files'], ['GET', '/v1/fine_tuning/jobs'], ['GET', '/v1/models'],
      ['GET', '/v1/workers'], ['GET', '/v1/billing/ledger'], ['POST', '/v1/workers/w1/drain'], ['GET', `/v1/fine_tuning/jobs/${job.id}`]]) {
      const r = await s.call(method, p, { key: s.token });
      assert.equal(r.status, 401, `${method} ${p} with the worker token`);
    }
  });

  test("another account cannot reach a trained job's model, money or files", async () => {
    const model = job.fine_tuned_model;
    assert.ok(model);
    assert.equal((await s.call('GET', `/v1/models/${encodeURIComponent(model)}`)).status, 200);
    // The owner can download a checkpoint; the other account must not.
    const step = (await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints`)).json.data[0].step_number;
    assert.equal((await raw(s, 'GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints/${step}/content`, { key: s.key })).status, 200);
    for (const [method, p, body] of [
      ['GET', `/v1/models/${encodeURIComponent(model)}`],
      ['GET', `/v1/models/${encodeURIComponent(model)}/export?format=hf`],
      ['GET', `/v1/models/${encodeURIComponent(model)}/export?format=peft`],
      ['POST', '/v1/completions', { model, prompt: 'Review: good.\nSentiment:', max_tokens: 2 }],
      ['GET', `/v1/fine_tuning/jobs/${job.id}`],
      ['GET', `/v1/fine_tuning/jobs/${job.id}/log`],
      ['GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints`],
      ['GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints/${step}/content`],
      ['GET', `/v1/fine_tuning/jobs/${job.id}/events`],
      ['POST', `/v1/fine_tuning/jobs/${job.id}/cancel`],
      ['POST', '/v1/fine_tuning/estimates', { model: 'tiny', training_file: myFile }],
      ['POST', '/v1/fine_tuning/jobs', { model: 'tiny', training_file: myFile }],
      ['POST', '/v1/fine_tuning/jobs', { model: 'tiny', training_file: theirFile, validation_file: myFile }],
      ['POST', '/v1/fine_tuning/jobs', { model, training_file: theirFile }],
    ]) {
      const r = await s.call(method, p, { key: other, body });
      assert.equal(r.status, 404, `${method} ${p} ${JSON.stringify(body) ?? ''}: ${r.status} ${r.text.slice(0, 300)}`);
    }
    const models = await s.call('GET', '/v1/models', { key: other });
    assert.ok(!models.text.includes(model));
    assert.ok(!models.text.includes(job.id));
    const ledgerMine = await s.call('GET', '/v1/billing/ledger');
    assert.ok(ledgerMine.json.data.some((r) => r.job === job.id), 'the owner sees the charge');
    const ledgerTheirs = await s.call('GET', '/v1/billing/ledger', { key: other });
    assert.ok(!ledgerTheirs.text.includes(job.id));
    // Cursors naming the other account's objects tell nothing.
    for (const p of [`/v1/fine_tuning/jobs?after=${job.id}`, `/v1/files?after=${myFile}`,
      `/v1/billing/ledger?after=${ledgerMine.json.data[0].id}`, `/v1/fine_tuning/jobs/${job.id}/events?after=x`]) {
      const r = await s.call('GET', p, { key: other });
      assert.ok([400, 404].includes(r.status) || (r.status === 200 && r.json.data.length === 0), `${p}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.ok(!r.text.includes(job.id) || r.status !== 200, p);
    }
  });

  test('bodies over the cap are 413 on every JSON route; over-long URLs are refused', async () => {
    const big = JSON.stringify({ model: 'tiny', pad: 'x'.repeat(4 * 1024 * 1024 + 16) });
    for (const [method, p, key] of [
      ['POST', '/v1/fine_tuning/jobs', s.key], ['POST', '/v1/fine_tuning/estimates', s.key],
      ['POST', '/v1/completions', s.key], ['POST', `/v1/fine_tuning/jobs/${job.id}/cancel`, s.key],
      ['POST', '/v1/workers/w1/drain', s.key], ['POST', '/internal/workers/register', s.token],
      ['POST', '/internal/workers/w1/heartbeat', s.token], ['POST', '/internal/attempts/att-x/events', s.token],
    ]) {
      const r = await raw(s, method, p, { key, body: big });
      assert.equal(r.status, 413, `${method} ${p}: ${r.status}`);
    }
    const longPath = `/v1/files/${'a'.repeat(20000)}`;
    const r = await raw(s, 'GET', longPath, { key: s.key });
    assert.ok(r.status >= 400 && r.status < 500, `long URL: ${r.status}`);
    const manyHeaders = {};
    for (let i = 0; i < 200; i++) manyHeaders[`x-h${i}`] = 'v'.repeat(200);
    const h = await raw(s, 'GET', '/v1/files', { key: s.key, headers: manyHeaders }).catch((e) => ({ status: 0, text: e.message }));
    assert.ok(h.status === 0 || h.status === 200 || (h.status >= 400 && h.status < 500), `many headers: ${h.status}`);
    assert.equal((await s.call('GET', '/healthz', { key: null })).status, 200);
  });

  test('a data set line over 1 MiB is refused at upload', async () => {
    const line = JSON.stringify({ prompt: 'p'.repeat(1024 * 1024 + 10), completion: ' x' });
    const up = await s.upload('long-line.jsonl', `${GOOD}${line}\n`);
    assert.ok([400, 413].includes(up.status), `${up.status} ${JSON.stringify(up.json)}`);
    assert.match(up.json.error.message, /line 3/);
    const files = await s.call('GET', '/v1/files?limit=100');
    assert.ok(!files.json.data.some((f) => f.filename === 'long-line.jsonl'));
  });

  test('ids never become paths', async (t) => {
    const secrets = [s.key, s.token, other, 'SQLite format'];
    const ids = ['..', '.', '%2e%2e', '%2E%2E', '..%2fapi-key', '..%2F..%2Fapi-key', '%2e%2e%2fapi-key',
      '%252e%252e%252fapi-key', '..%5capi-key', '%2fetc%2fpasswd', '....%2f%2fapi-key', 'file-..%2f..%2fapi-key',
      'ftjob-..%2f..%2falallo.db', '~', `${job.id}%2f..%2f..%2fapi-key`,
      'ft:tiny:alallo:..%2f..%2fapi-key', `${encodeURIComponent(job.fine_tuned_model)}%2f..%2f..%2f..%2fapi-key`];
    const routes = [
      ['GET', '/v1/files/{}'], ['DELETE', '/v1/files/{}'], ['GET', '/v1/files/{}/content'],
      ['GET', '/v1/models/{}'], ['GET', '/v1/models/{}/export?format=hf'], ['GET', '/v1/models/{}/export?format=gguf'],
      ['GET', '/v1/fine_tuning/jobs/{}'], ['POST', '/v1/fine_tuning/jobs/{}/cancel'],
      ['GET', '/v1/fine_tuning/jobs/{}/events'], ['GET', '/v1/fine_tuning/jobs/{}/checkpoints'],
      ['GET', '/v1/fine_tuning/jobs/{}/log'], ['POST', '/v1/workers/{}/drain'],
      ['GET', '/v1/fine_tuning/jobs/{}/checkpoints/1/content'], ['GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints/{}/content`],
      ['POST', '/internal/workers/{}/heartbeat'], ['POST', '/internal/workers/{}/claim'],
      ['POST', '/internal/attempts/{}/events'], ['POST', '/internal/attempts/{}/finish'],
    ];
    let tried = 0;
    for (const [method, pattern] of routes) {
      const key = pattern.startsWith('/internal') ? s.token : s.key;
      for (const id of ids) {
        const p = pattern.replace('{}', id);
        const r = await raw(s, method, p, { key, body: method === 'POST' ? '{}' : undefined });
        tried++;
        assert.ok([400, 404, 405, 409].includes(r.status), `${method} ${p}: ${r.status} ${r.text.slice(0, 200)}`);
        for (const secret of secrets) assert.ok(!r.text.includes(secret), `${method} ${p} answered a secret`);
      }
      // Literal dot segments, sent raw.
      for (const seg of ['../api-key', '../../api-key', './../api-key', `${job.id}/../../api-key`]) {
        const p = pattern.replace('{}', seg);
        const r = await raw(s, method, p, { key, body: method === 'POST' ? '{}' : undefined });
        tried++;
        assert.ok(r.status >= 400 && r.status < 500, `${method} ${p}: ${r.status}`);
        for (const secret of secrets) assert.ok(!r.text.includes(secret), `${method} ${p} answered a secret`);
      }
    }
    // The dashboard's static files: nothing outside the embedded assets.
    for (const p of ['/../api-key', '/%2e%2e/api-key', '/..%2fapi-key', '/%2e%2e%2f%2e%2e%2fetc%2fpasswd', '/assets/../../api-key']) {
      const r = await raw(s, 'GET', p);
      tried++;
      for (const secret of [...secrets, 'root:x:0:0']) assert.ok(!r.text.includes(secret), `GET ${p} answered a secret`);
    }
    // Ids in bodies: model and file ids.
    for (const model of ['..', '.', '../models/tiny', 'tiny/../tiny', './tiny', '/etc', 'tiny/', '', 'tiny\u0000x']) {
      for (const p of ['/v1/fine_tuning/jobs', '/v1/fine_tuning/estimates']) {
        const r = await s.call('POST', p, { body: { model, training_file: myFile } });
        tried++;
        assert.ok([400, 404].includes(r.status), `${p} model ${JSON.stringify(model)}: ${r.status} ${r.text.slice(0, 200)}`);
      }
      const c = await s.call('POST', '/v1/completions', { body: { model, prompt: 'x', max_tokens: 1 } });
      tried++;
      assert.ok([400, 404].includes(c.status), `completions model ${JSON.stringify(model)}: ${c.status}`);
    }
    for (const f of ['../api-key', '../../api-key', '/etc/passwd', 'file-../../api-key', `${myFile}/../${myFile}`]) {
      for (const field of ['training_file', 'validation_file']) {
        const body = { model: 'tiny', training_file: myFile, [field]: f };
        const r = await s.call('POST', '/v1/fine_tuning/jobs', { body });
        tried++;
        assert.ok([400, 404].includes(r.status), `${field} ${f}: ${r.status}`);
      }
    }
    // Worker names are path-safe too (local workers' folders are named after them).
    for (const name of ['..', '.', '../x', 'a/b', '%2e%2e']) {
      const r = await s.call('POST', '/internal/workers/register', {
        key: s.token,
        body: { name, cpus: 1, mem_bytes: 1 << 30, accelerator: 'cpu', price_per_hour: 0, class: 'on-demand', speed: { tokens_per_s: null, flops: null } },
      });
      tried++;
      assert.equal(r.status, 400, `worker name ${name}: ${r.status} ${r.text.slice(0, 200)}`);
    }
    // An upload's name is only a label: the file lands in files/ID.jsonl.
    const evil = await s.upload('../../../evil.jsonl', GOOD);
    if (evil.status === 200) {
      assert.match(evil.json.id, /^file-[A-Za-z0-9]+$/);
      assert.deepEqual(fs.readdirSync(path.join(s.data, 'files')).filter((n) => !/^file-[A-Za-z0-9]+\.jsonl$/.test(n)), []);
    } else assert.equal(evil.status, 400);
    for (const p of [path.join(s.data, '..', 'evil.jsonl'), path.join(s.data, 'evil.jsonl'), path.join(s.data, '..', '..', 'evil.jsonl')]) {
      assert.ok(!fs.existsSync(p), `${p} was written`);
    }
    assert.ok(tried > 350, `tried ${tried}`);
    t.diagnostic(`${tried} hostile ids, names and paths tried`);
    assert.equal((await s.call('GET', '/healthz', { key: null })).status, 200);
  });

  test('a NUL byte in the path is refused, never a shorter path', async () => {
    // "%00" decodes to a NUL byte; read as a C string the path would end
    // there, and "/v1/files/%00" would become "/v1/files/" (the list).
    const wrong = [];
    for (const [method, p] of [['GET', '/v1/files/%00'], ['GET', `/v1/files/${myFile}%00.jsonl`],
      ['GET', '/v1/fine_tuning/jobs/%00'], ['GET', `/v1/fine_tuning/jobs/${job.id}%00/events`],
      ['GET', '/v1/models/%00'], ['POST', '/v1/fine_tuning/jobs/%00']]) {
      const r = await raw(s, method, p, { key: s.key, body: method === 'POST' ? JSON.stringify({ model: 'tiny', training_file: myFile }) : undefined });
      if (![400, 404].includes(r.status)) wrong.push(`${method} ${p}: ${r.status} ${r.text.slice(0, 80)}`);
    }
    assert.deepEqual(wrong, []);
  });

  test('a query value over its cap is refused, not dropped', async () => {
    // A cursor longer than the server keeps must not silently turn into
    // "no cursor" (the first page), nor a limit into the default.
    const wrong = [];
    for (const p of [`/v1/fine_tuning/jobs?after=${'b'.repeat(5000)}`, `/v1/files?after=${'c'.repeat(300)}`,
      `/v1/fine_tuning/jobs?limit=${'1'.repeat(300)}`, `/v1/billing/ledger?after=ledger-${'9'.repeat(400)}`]) {
      const r = await raw(s, 'GET', p, { key: s.key });
      if (!(r.status >= 400 && r.status < 500)) wrong.push(`GET ${p.slice(0, 40)}... (${p.length} bytes): ${r.status}`);
    }
    assert.deepEqual(wrong, []);
  });

  test('no secrets in the server log', async () => {
    // By now the log holds a session: uploads, a trained job, refusals of
    // every kind (wrong keys and tokens included).
    await waitFor(() => log().length > 0, { timeoutMs: 5000, what: 'some server log' });
    const text = log();
    for (const [what, secret] of [['the default key', s.key], ['another key', other], ['the worker token', s.token]]) {
      assert.ok(!text.includes(secret), `the server log holds ${what}`);
      assert.ok(!text.includes(secret.slice(-32)), `the server log holds part of ${what}`);
    }
    const wlog = fs.readFileSync(path.join(s.data, 'workers', 'w1', 'worker.log'), 'utf8');
    assert.ok(!wlog.includes(s.token) && !wlog.includes(s.key), 'the worker log holds a secret');
    // Nor the attempt's spec on disk.
    const attempts = path.join(s.data, 'workers', 'w1', 'attempts');
    for (const a of fs.readdirSync(attempts)) {
      const spec = fs.readFileSync(path.join(attempts, a, 'ATTEMPT.json'), 'utf8');
      assert.ok(!spec.includes(s.token) && !spec.includes(s.key), `attempt ${a}'s spec holds a secret`);
    }
  });
});
