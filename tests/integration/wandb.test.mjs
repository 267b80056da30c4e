// wandb.test.mjs - a job's W&B integration (docs/integrations.md) against a
// fake W&B server on loopback: the account's key is set through the API and
// never shown; a job's integrations are checked (400s naming the field) and
// shown back; the leader makes the run with GraphQL upsertBucket (name,
// project, entity, display name, tags) and posts each step's metrics as
// wandb-history.jsonl lines to file_stream with basic auth api:KEY; the
// server's first file_stream call fails and the lines still all arrive, in
// order at their offsets, with the last post marked complete; after a
// restart nothing already taken is sent again.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { SAMPLE, Serve, sleep, tinyModelsDir, waitFor } from './service_harness.mjs';

const KEY = 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678';

// The fake server: records every call; the first file_stream call answers 500.
function fakeWandb() {
  const calls = [];
  const history = {}; // file_stream URL -> [line offset] -> line
  let failed = false;
  const complete = {}; // file_stream URL -> the post marked complete
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const call = { method: req.method, url: req.url, auth: req.headers.authorization, body: JSON.parse(body || '{}') };
      calls.push(call);
      res.setHeader('Content-Type', 'application/json');
      if (req.url === '/graphql') {
        const v = call.body.variables;
        res.end(JSON.stringify({ data: { upsertBucket: { inserted: true, bucket: {
          id: 'run-1', name: v.name, displayName: v.displayName,
          project: { name: v.project, entity: { name: v.entity || 'default-entity' } } } } } }));
        return;
      }
      if (req.url.endsWith('/file_stream')) {
        if (!failed) {
          failed = true;
          res.statusCode = 500;
          res.end('{"error":"try again"}');
          return;
        }
        const f = call.body.files['wandb-history.jsonl'];
        if (!history[req.url]) history[req.url] = [];
        f.content.forEach((line, i) => (history[req.url][f.offset + i] = JSON.parse(line)));
        if (call.body.complete) complete[req.url] = call.body;
        res.end('{"exitcode":null,"limits":{}}');
        return;
      }
      res.statusCode = 404;
      res.end('{}');
    });
  });
  return { server, calls, history, done: (url) => complete[url] };
}

function sampleLines(from, n) {
  return fs.readFileSync(SAMPLE, 'utf8').split('\n').filter((l) => l.trim()).slice(from, from + n);
}

describe('W&B integration', () => {
  let s;
  let fake;
  before(async () => {
    fake = fakeWandb();
    await new Promise((r) => fake.server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${fake.server.address().port}`;
    s = await Serve.start({
      args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G', '--wandb-url', url],
    });
  });
  after(async () => {
    if (s) await s.stop();
    if (fake) fake.server.close();
  });

  test('the key is checked, refused jobs name the field, metrics reach the run', { timeout: 300000 }, async () => {
    const train = await s.upload('train.jsonl', Buffer.from(sampleLines(0, 40).join('\n') + '\n'));
    const valid = await s.upload('valid.jsonl', Buffer.from(sampleLines(100, 10).join('\n') + '\n'));
    assert.equal(train.status, 200);
    assert.equal(valid.status, 200);
    const integrations = [{ type: 'wandb', wandb: { project: 'alallo-tests', name: 'tiny run', entity: 'my-team', tags: ['a', 'b'] } }];
    const job = { model: 'tiny', training_file: train.json.id, validation_file: valid.json.id,
      hyperparameters: { n_epochs: 3, batch_size: 8 }, integrations };

    // no key yet: refused, naming the field
    let r = await s.createJob(job);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'integrations');
    r = await s.call('GET', '/v1/organization/integrations/wandb');
    assert.equal(r.json.configured, false);
    r = await s.call('POST', '/v1/organization/integrations/wandb', { body: { api_key: 'bad key!' } });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'api_key');
    r = await s.call('POST', '/v1/organization/integrations/wandb', { body: { api_key: KEY } });
    assert.equal(r.status, 200, r.text);
    assert.ok(!r.text.includes(KEY));
    r = await s.call('GET', '/v1/organization/integrations/wandb');
    assert.equal(r.json.configured, true);
    assert.ok(!r.text.includes(KEY));

    // bad integrations: 400 with the field
    for (const [bad, param] of [
      [[{ type: 'mlflow' }], 'integrations[0].type'],
      [[{ type: 'wandb', wandb: {} }], 'integrations[0].wandb.project'],
      [[{ type: 'wandb', wandb: { project: 'p', name: 'x'.repeat(200) } }], 'integrations[0].wandb.name'],
      [[{ type: 'wandb', wandb: { project: 'p', tags: [1] } }], 'integrations[0].wandb.tags'],
      ['wandb', 'integrations'],
      // names that would post elsewhere than the run's own path
      ...['../../../graphql?x=', '..', '.', 'team/sub', 'p#frag', 'a b', 'a\nb', 'a%2F', 'c:d', 'x'.repeat(129)]
        .map((p) => [[{ type: 'wandb', wandb: { project: p } }], 'integrations[0].wandb.project']),
      [[{ type: 'wandb', wandb: { project: 'p', entity: '../graphql' } }], 'integrations[0].wandb.entity'],
      [[{ type: 'wandb', wandb: { project: 'p', entity: 'my team' } }], 'integrations[0].wandb.entity'],
      [[{ type: 'wandb', wandb: { project: 'p', name: 'two\nlines' } }], 'integrations[0].wandb.name'],
    ]) {
      r = await s.createJob({ ...job, integrations: bad });
      assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
      assert.equal(r.json.error.param, param, JSON.stringify(bad));
    }

    r = await s.createJob(job);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.integrations, integrations);
    const id = r.json.id;
    const done = await s.waitStatus(id, ['succeeded', 'failed'], { timeoutMs: 240000 });
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    assert.deepEqual(done.integrations, integrations);

    const streamUrl = `/files/my-team/alallo-tests/${id}/file_stream`;
    await waitFor(() => fake.done(streamUrl), { timeoutMs: 60000, what: 'the run to be marked complete' });
    const auth = `Basic ${Buffer.from(`api:${KEY}`).toString('base64')}`;
    for (const c of fake.calls) assert.equal(c.auth, auth, c.url);
    const upsert = fake.calls.find((c) => c.url === '/graphql');
    assert.match(upsert.body.query, /upsertBucket/);
    assert.deepEqual(upsert.body.variables, {
      name: id, project: 'alallo-tests', displayName: 'tiny run', entity: 'my-team', tags: ['a', 'b'],
    });
    const streams = fake.calls.filter((c) => c.url.endsWith('/file_stream'));
    for (const c of streams) assert.equal(c.url, streamUrl);
    assert.ok(streams.length >= 2, 'the failed call was retried');
    assert.match(s.output, /wandb: job \S+: HTTP 500/);

    const lines = fake.history[streamUrl];
    // each metrics event with a step once, in order, at its offset, with its metrics
    const events = await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100`);
    assert.equal(events.json.has_more, false);
    const metrics = events.json.data.filter((e) => e.type === 'metrics' && Number.isInteger(e.data.step)).reverse();
    // 15 steps; the full validation loss at each epoch's end (5, 10, 15)
    assert.deepEqual(lines.filter((l) => 'full_valid_loss' in l).map((l) => l._step), [5, 10, 15]);
    assert.equal(lines.length, metrics.length);
    metrics.forEach((e, i) => {
      const l = lines[i];
      assert.equal(l._step, e.data.step);
      for (const k of Object.keys(e.data)) if (k !== 'step' && typeof e.data[k] === 'number') assert.equal(l[k], e.data[k], k);
      assert.ok(l._timestamp > 1.6e9);
    });
    assert.equal(metrics[metrics.length - 1].data.step, 15);
    assert.equal(fake.done(streamUrl).exitcode, 0);

    // the key is nowhere else: not in the log, the job, its events
    assert.ok(!s.output.includes(KEY));
    assert.ok(!events.text.includes(KEY));
    assert.ok(!JSON.stringify(done).includes(KEY));

    // a restart resends nothing the server took: a second job's run
    // completes after it (jobs are forwarded oldest first) and the first
    // job's run got no post meanwhile
    const before = fake.calls.length;
    await s.stop();
    await s.spawn();
    r = await s.createJob({ ...job, integrations: [{ type: 'wandb', wandb: { project: 'alallo-tests' } }] });
    assert.equal(r.status, 200, r.text);
    const second = `/files/default-entity/alallo-tests/${r.json.id}/file_stream`;
    await waitFor(() => fake.done(second), { timeoutMs: 240000, what: 'the second run to be marked complete' })
      .catch(async (err) => {
        const j = await s.call('GET', `/v1/fine_tuning/jobs/${r.json.id}`);
        throw new Error(`${err.message}\njob: ${j.text}\nposts: ${JSON.stringify(fake.calls.slice(before).map((c) => c.url))}\n${s.output}`);
      });
    const again = fake.calls.slice(before);
    assert.ok(again.some((c) => c.url === second));
    assert.deepEqual(again.filter((c) => c.url === streamUrl), []);
    const upsert2 = again.find((c) => c.url === '/graphql');
    assert.equal(upsert2.body.variables.displayName, r.json.id);
    assert.equal('entity' in upsert2.body.variables, false);

    // a sanitized build's serve stops clean (the forwarder joins, frees)
    await s.stop();
    assert.doesNotMatch(s.output, /Sanitizer|runtime error/);
    assert.ok(!s.output.includes(KEY));
  });
});

// One account whose key W&B refuses (401) on many jobs: another account's
// run is still made at once (pending jobs are read in turns between
// accounts, and a job waiting out its back-off costs a round nothing), and
// each refused job is tried at most 5 times in a row, then stops with an
// event on the job saying why (docs/integrations.md, "Delivery").
describe('W&B forwarding is fair between accounts and has a last try', () => {
  const GOOD = 'b1b2c3d4e5f60718293a4b5c6d7e8f9012345678';
  const REVOKED = 'deadbeefdeadbeefdeadbeefdeadbeefdeadbeef';
  const STUCK = 34; // more than one round's posts (32)
  let s;
  let server;
  const calls = []; // { job, auth, at }
  before(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        const b = JSON.parse(body || '{}');
        const job = req.url === '/graphql' ? b.variables.name : req.url.split('/')[4];
        calls.push({ job, url: req.url, auth: req.headers.authorization, at: Date.now() });
        res.setHeader('Content-Type', 'application/json');
        if (req.headers.authorization !== `Basic ${Buffer.from(`api:${GOOD}`).toString('base64')}`) {
          res.statusCode = 401;
          res.end('{"errors":[{"message":"user is not logged in"}]}');
          return;
        }
        if (req.url === '/graphql') {
          res.end(JSON.stringify({ data: { upsertBucket: { inserted: true, bucket: {
            id: 'run', name: job, project: { name: b.variables.project, entity: { name: 'e' } } } } } }));
          return;
        }
        res.end('{}');
      });
    });
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    // no worker: the jobs wait queued, and their first events are pending
    s = await Serve.start({
      args: ['--models', tinyModelsDir(), '--wandb-url', `http://127.0.0.1:${server.address().port}`],
    });
  });
  after(async () => {
    if (s) await s.stop();
    if (server) server.close();
  });

  test('a revoked key on 34 jobs neither blinds another account nor is tried forever', { timeout: 120000 }, async () => {
    const quiet = s.account('quiet');
    const data = Buffer.from(sampleLines(0, 20).join('\n') + '\n');
    const job = (file) => ({ model: 'tiny', training_file: file,
      integrations: [{ type: 'wandb', wandb: { project: 'p' } }] });
    let r = await s.call('POST', '/v1/organization/integrations/wandb', { body: { api_key: REVOKED } });
    assert.equal(r.status, 200, r.text);
    r = await s.call('POST', '/v1/organization/integrations/wandb', { key: quiet, body: { api_key: GOOD } });
    assert.equal(r.status, 200, r.text);
    const busyFile = await s.upload('t.jsonl', data);
    const quietFile = await s.upload('t.jsonl', data, { key: quiet });
    const stuck = [];
    for (let i = 0; i < STUCK; i++) {
      r = await s.createJob(job(busyFile.json.id));
      assert.equal(r.status, 200, r.text);
      stuck.push(r.json.id);
    }
    r = await s.createJob(job(quietFile.json.id), quiet);
    assert.equal(r.status, 200, r.text);
    const other = r.json.id;
    const t0 = Date.now();
    await waitFor(() => calls.some((c) => c.job === other && c.url === '/graphql'), {
      timeoutMs: 10000, what: "the other account's run to be made",
    }).catch((err) => {
      throw new Error(`${err.message}: ${calls.length} calls, ${calls.filter((c) => c.job === other).length} for it\n${s.output.slice(-3000)}`);
    });
    const made = Date.now() - t0;

    // every stuck job stops, with an event saying why
    const stopped = async (id) => {
      const ev = await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100`);
      return ev.json.data.find((e) => /no longer sent to W&B/.test(e.message));
    };
    await waitFor(async () => (await Promise.all(stuck.map(stopped))).every(Boolean), {
      timeoutMs: 60000, what: 'every stuck job to stop forwarding',
    });
    const note = await stopped(stuck[0]);
    assert.equal(note.level, 'warn');
    assert.match(note.message, /5 tries in a row failed \(last: HTTP 401\)/);
    assert.ok(!note.message.includes(REVOKED));
    const tries = calls.filter((c) => stuck.includes(c.job)).length;
    assert.ok(tries <= STUCK * 5, `${tries} tries`);
    await sleep(3000);
    assert.equal(calls.filter((c) => stuck.includes(c.job)).length, tries, 'tried again after the last try');
    assert.ok(!s.output.includes(REVOKED));
    console.log(`# the other account's run made after ${made} ms; ${tries} tries of ${STUCK} stuck jobs`);
  });
});
