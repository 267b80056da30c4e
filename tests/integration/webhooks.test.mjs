// webhooks.test.mjs - webhooks end to end on the real binary: an account
// registers a receiver on loopback that first answers 500, then hangs past
// alallo's 10 s timeout once, then comes back. Every event of a job that
// succeeds and of one that is cancelled arrives, in order per job, and each
// delivery verifies with the official SDK (openai v5's webhooks.unwrap()).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai-v5';

import { SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

// The receiver: every request is kept; the first is answered 500, the
// second never (alallo's timeout ends it), the rest 200.
function receiver() {
  const got = [];
  const hung = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const n = got.push({ headers: { ...req.headers }, body });
      if (n === 1) {
        res.writeHead(500).end('receiver down');
      } else if (n === 2) {
        hung.push(res); // no answer: alallo gives up on this try
      } else {
        res.writeHead(200).end('ok');
      }
    });
  });
  return {
    got,
    server,
    async listen() {
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      return `http://127.0.0.1:${server.address().port}/hook`;
    },
    async close() {
      for (const r of hung) r.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

describe('webhooks', () => {
  let s;
  let file;
  let rx;
  let hook;
  before(async () => {
    rx = receiver();
    s = await Serve.start({
      // the receiver is on loopback, which webhooks reach only when allowed
      args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=0.36',
        '--webhook-allow', '127.0.0.0/8'],
    });
    const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    file = up.json.id;
    await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 1, {
      what: 'the local worker to register',
    });
  });
  after(async () => {
    if (s) await s.stop();
    if (rx) await rx.close();
  });

  test('registering: the secret once, bad input refused, other accounts see nothing', async () => {
    const url = await rx.listen();
    for (const bad of [{}, { url: 'ftp://x/y' }, { url: 'http://' }, { url: 'http://a b/' },
      { url, events: 'all' }, { url, events: ['fine_tuning.job.nope'] }]) {
      const r = await s.call('POST', '/v1/webhooks', { body: bad });
      assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
      assert.ok(r.json.error.message.length > 0);
    }
    const r = await s.call('POST', '/v1/webhooks', { body: { url } });
    assert.equal(r.status, 200, r.text);
    hook = r.json;
    assert.equal(hook.object, 'webhook');
    assert.equal(hook.url, url);
    assert.deepEqual(hook.events, []);
    assert.match(hook.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);

    const list = await s.call('GET', '/v1/webhooks');
    assert.equal(list.json.data.length, 1);
    assert.equal(list.json.data[0].id, hook.id);
    assert.equal(list.json.data[0].secret, undefined);

    const other = s.account('other');
    assert.equal((await s.call('GET', '/v1/webhooks', { key: other })).json.data.length, 0);
    assert.equal((await s.call('GET', `/v1/webhooks/${hook.id}/deliveries`, { key: other })).status, 404);
    assert.equal((await s.call('DELETE', `/v1/webhooks/${hook.id}`, { key: other })).status, 404);

    // A second endpoint that wants only the end of a job, then deleted.
    const only = await s.call('POST', '/v1/webhooks', { body: { url, events: ['fine_tuning.job.succeeded'] } });
    assert.equal(only.status, 200, only.text);
    assert.deepEqual(only.json.events, ['fine_tuning.job.succeeded']);
    assert.equal((await s.call('DELETE', `/v1/webhooks/${only.json.id}`)).status, 200);
    assert.equal((await s.call('DELETE', `/v1/webhooks/${only.json.id}`)).status, 404);
    assert.equal((await s.call('GET', '/v1/webhooks')).json.data.length, 1);
  });

  test('every event arrives despite a 500 and a timeout, in order per job, verified by the SDK', { timeout: 400000 }, async () => {
    const ok = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1 } });
    assert.equal(ok.status, 200, ok.text);
    await s.waitStatus(ok.json.id, ['succeeded'], { timeoutMs: 180000 });
    const gone = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 3 } });
    assert.equal(gone.status, 200, gone.text);
    assert.equal((await s.call('POST', `/v1/fine_tuning/jobs/${gone.json.id}/cancel`)).status, 200);
    await s.waitStatus(gone.json.id, ['cancelled'], { timeoutMs: 120000 });

    const client = new OpenAI({ apiKey: 'unused', webhookSecret: hook.secret });
    // Accepted deliveries (the receiver answered 200: the third request on).
    const accepted = async () => {
      const out = [];
      for (const r of rx.got.slice(2)) out.push(await client.webhooks.unwrap(r.body, r.headers));
      return out;
    };
    const ends = { [ok.json.id]: 'fine_tuning.job.succeeded', [gone.json.id]: 'fine_tuning.job.cancelled' };
    await waitFor(
      async () => {
        const evs = await accepted();
        return Object.entries(ends).every(([id, t]) => evs.some((e) => e.data.id === id && e.type === t));
      },
      { timeoutMs: 120000, everyMs: 250, what: 'both jobs\' final events to be delivered' },
    );

    // Every request, the failed and the hung ones too, is signed right.
    for (const r of rx.got) {
      const ev = await client.webhooks.unwrap(r.body, r.headers);
      assert.equal(r.headers['webhook-id'], ev.id);
      assert.match(ev.id, /^evt_/);
      assert.equal(ev.object, 'event');
      assert.ok(Number.isInteger(ev.created_at));
    }
    // The two refused tries are sent again with the same id.
    const evs = await accepted();
    const ids = new Set(evs.map((e) => e.id));
    for (const r of rx.got.slice(0, 2)) assert.ok(ids.has(r.headers['webhook-id']), 'a refused event came again');
    // A tampered body does not verify.
    const last = rx.got[rx.got.length - 1];
    await assert.rejects(client.webhooks.unwrap(last.body.replace('"event"', '"evenT"'), last.headers));

    for (const [id, end] of Object.entries(ends)) {
      const mine = evs.filter((e) => e.data.id === id);
      // Once each (a retry after a lost answer could repeat; none was lost here).
      assert.equal(new Set(mine.map((e) => e.id)).size, mine.length);
      const statuses = mine.filter((e) => e.type === 'alallo.fine_tuning.job.status');
      assert.equal(statuses[0].data.previous_status, 'queued');
      for (let i = 1; i < statuses.length; i++)
        assert.equal(statuses[i].data.previous_status, statuses[i - 1].data.status, 'status events in order');
      assert.equal(statuses[statuses.length - 1].data.status, end.split('.').pop());
      assert.equal(mine[mine.length - 1].type, end, 'the final event comes last');
      assert.deepEqual(Object.keys(mine[mine.length - 1].data), ['id']);
    }
    const succeeded = evs.filter((e) => e.data.id === ok.json.id);
    const cks = succeeded.filter((e) => e.type === 'alallo.fine_tuning.job.checkpoint');
    assert.ok(cks.length >= 1, 'a checkpoint event');
    assert.ok(cks[0].data.step > 0 && typeof cks[0].data.train_loss === 'number');

    // The deliveries as the API lists them: the two refused ones took more
    // than one try each, and every request the receiver saw is one try.
    const dl = await s.call('GET', `/v1/webhooks/${hook.id}/deliveries`);
    assert.equal(dl.status, 200, dl.text);
    for (const r of rx.got.slice(0, 2)) {
      const d = dl.json.data.find((x) => x.id === r.headers['webhook-id']);
      assert.equal(d.status, 'delivered');
      assert.ok(d.attempts >= 2, JSON.stringify(d));
      assert.equal(d.last_status, 200);
      assert.equal(d.last_answer, 'answered 200'); // our words, never the receiver's
    }
    assert.equal(dl.json.data.reduce((n, d) => n + d.attempts, 0), rx.got.length);
    assert.ok(dl.json.data.every((d) => d.object === 'webhook.delivery' && d.event.id === d.id));
  });
});
