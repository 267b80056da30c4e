// webhooks_abuse.test.mjs - webhooks against a hostile or noisy account:
// the per-account cap holds under concurrent registrations, internal
// addresses are refused and no answer's bytes are shown, and one account's
// hanging endpoints do not hold back another account's deliveries
// (docs/security.md, "Webhooks").
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import dns from 'node:dns';
import fs from 'node:fs';
import os from 'node:os';

import { SAMPLE, Serve, tmpdir, waitFor } from './service_harness.mjs';

// A loopback listener that answers every request with `answer` (or never,
// when hang) and keeps what it got.
async function listener({ status = 200, answer = '', hang = false } = {}) {
  const got = [];
  const sockets = new Set();
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      got.push({ url: req.url, headers: req.headers, body });
      if (!hang) res.writeHead(status, { 'Content-Type': 'application/json' }).end(answer);
    });
  });
  server.on('connection', (c) => {
    sockets.add(c);
    c.on('close', () => sockets.delete(c));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    got,
    open: () => sockets.size, // connections open now
    url: (p = '/hook') => `http://127.0.0.1:${server.address().port}${p}`,
    async close() {
      for (const c of sockets) c.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

// Creates a job of `key` and cancels it at once: two events (the status
// change and fine_tuning.job.cancelled) for each of its webhooks.
async function cancelledJob(s, key) {
  const up = await s.upload('t.jsonl', fs.readFileSync(SAMPLE), { key });
  assert.equal(up.status, 200, JSON.stringify(up.json));
  const j = await s.createJob({ model: 'alallo-base', training_file: up.json.id }, key);
  assert.equal(j.status, 200, j.text);
  const c = await s.call('POST', `/v1/fine_tuning/jobs/${j.json.id}/cancel`, { key });
  assert.equal(c.status, 200, c.text);
  return j.json.id;
}

async function deliveries(s, hook, key = s.key) {
  const r = await s.call('GET', `/v1/webhooks/${hook}/deliveries`, { key });
  assert.equal(r.status, 200, r.text);
  return r.json.data;
}

describe('webhooks against an abusive account', () => {
  let s;
  before(async () => {
    s = await Serve.start({ args: ['--local-worker', 'none', '--webhook-allow', '127.0.0.0/8'] });
  });
  after(async () => {
    if (s) await s.stop();
  });

  test("an account's 20 hanging endpoints hold back neither another account nor more than 4 tries", { timeout: 120000 }, async () => {
    const hang = await listener({ hang: true });
    const good = await listener();
    let open = 0;
    let most = 0;
    try {
      const a = s.account('noisy');
      const b = s.account('quiet');
      for (let i = 0; i < 20; i++) {
        const r = await s.call('POST', '/v1/webhooks', { key: a, body: { url: hang.url(`/a-${i}`) } });
        assert.equal(r.status, 200, r.text);
      }
      const hb = await s.call('POST', '/v1/webhooks', { key: b, body: { url: good.url('/b') } });
      assert.equal(hb.status, 200, hb.text);
      const watch = setInterval(() => {
        open = hang.open();
        most = Math.max(most, open);
      }, 20);
      await cancelledJob(s, a);
      await cancelledJob(s, a);
      const t0 = Date.now();
      const job = await cancelledJob(s, b);
      const mine = await waitFor(async () => {
        const d = await deliveries(s, hb.json.id, b);
        return d.length === 2 && d.every((x) => x.status === 'delivered') && d;
      }, { timeoutMs: 20000, everyMs: 100, what: "the quiet account's two events delivered" });
      const took = Date.now() - t0;
      clearInterval(watch);
      console.log(`quiet account's events delivered in ${took} ms; the noisy account's tries open at once: at most ${most}`);
      assert.ok(mine.every((x) => x.job === job && x.attempts === 1));
      assert.equal(good.got.length, 2);
      assert.ok(hang.got.length >= 1, 'the noisy account is tried too');
      assert.ok(most <= 4, `the noisy account had ${most} tries open at once`);
    } finally {
      await hang.close();
      await good.close();
    }
  });

  test('80 concurrent registrations: exactly 20 accepted, and the list shows them all', async () => {
    const key = s.account('cap');
    const all = await Promise.all(
      Array.from({ length: 80 }, (_, i) =>
        s.call('POST', '/v1/webhooks', { key, body: { url: `http://127.0.0.1:9/hook-${i}` } })),
    );
    const ok = all.filter((r) => r.status === 200);
    assert.equal(ok.length, 20, `accepted ${ok.length}`);
    for (const r of all.filter((x) => x.status !== 200)) {
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /at most 20 webhooks/);
    }
    const list = await s.call('GET', '/v1/webhooks', { key });
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.data.length, 20);
    assert.equal(list.json.has_more, false);
    assert.deepEqual(new Set(list.json.data.map((w) => w.id)), new Set(ok.map((r) => r.json.id)));
  });
});

describe('webhooks never reach internal addresses unless the operator allows them', () => {
  test('registering an internal address in any spelling is refused with the reason', async () => {
    const s = await Serve.start({ args: ['--local-worker', 'none'] });
    try {
      for (const url of [
        `${s.url}/v1/webhooks`, 'http://127.0.0.1:9/', 'http://localhost:9/', 'http://2130706433/',
        'http://0x7f000001/', 'http://0177.0.0.1/', 'http://127.1/', 'http://[::1]:9/',
        'http://[::ffff:127.0.0.1]/', 'http://10.0.0.1/', 'http://172.16.0.1/', 'http://192.168.1.1/',
        'http://100.64.0.1/', 'http://169.254.169.254/latest/meta-data/', 'http://[fe80::1]/',
        'http://[fd00::1]/', 'http://0.0.0.0/', 'http://224.0.0.1/', 'http://user@10.0.0.1/',
      ]) {
        const r = await s.call('POST', '/v1/webhooks', { body: { url } });
        assert.equal(r.status, 400, `${url}: ${r.text}`);
        assert.match(r.json.error.message, /internal address \(.+\).*--webhook-allow/, url);
        assert.equal(r.json.error.param, 'url');
      }
      const ok = await s.call('POST', '/v1/webhooks', { body: { url: 'https://hooks.example.com/alallo' } });
      assert.equal(ok.status, 200, ok.text);
      assert.equal((await s.call('DELETE', `/v1/webhooks/${ok.json.id}`)).status, 200);
      assert.equal((await s.call('GET', '/v1/webhooks')).json.data.length, 0);
    } finally {
      await s.stop();
    }
  });

  test('an answer is never shown, and a connection to an address no longer allowed is refused', { timeout: 120000 }, async () => {
    const admin = await listener({ answer: '{"admin_token":"tok-d0n0tl3ak"}' });
    const data = tmpdir();
    let s = await Serve.start({ data, args: ['--local-worker', 'none', '--webhook-allow', '127.0.0.0/8'] });
    try {
      const hook = await s.call('POST', '/v1/webhooks', { body: { url: admin.url() } });
      assert.equal(hook.status, 200, hook.text);
      await cancelledJob(s, s.key);
      const done = await waitFor(async () => {
        const d = await deliveries(s, hook.json.id);
        return d.length === 2 && d.every((x) => x.status === 'delivered') && d;
      }, { what: 'both events delivered to the allowed loopback listener' });
      for (const d of done) {
        assert.equal(d.last_status, 200);
        assert.equal(d.last_answer, 'answered 200');
        assert.doesNotMatch(JSON.stringify(d), /admin_token|tok-d0n0tl3ak/);
      }
      await s.stop();

      // The same store, served without the allowance: the next events are
      // refused at the connection, after resolution, and nothing is sent.
      s = await Serve.start({ data, args: ['--local-worker', 'none'] });
      const before = admin.got.length;
      await cancelledJob(s, s.key);
      const refused = await waitFor(async () => {
        // a job's next event waits behind its first, so one has been tried
        const d = (await deliveries(s, hook.json.id)).filter((x) => x.status === 'pending' && x.attempts >= 1);
        return d.length >= 1 && d;
      }, { what: 'the new events tried and refused' });
      for (const d of refused) {
        assert.equal(d.last_status, 0);
        assert.match(d.last_answer, /^refused: the host's address is internal \(loopback\)/);
      }
      assert.equal(admin.got.length, before, 'no request reached the listener');
    } finally {
      await s.stop();
      await admin.close();
    }
  });

  // A name passes registration; its addresses are judged at each try. The
  // machine's own name usually resolves to loopback (/etc/hosts); where it
  // does not, there is nothing to try.
  test('a host name that resolves to an internal address is refused at the connection', { timeout: 60000 }, async (t) => {
    const name = os.hostname();
    const addrs = await dns.promises.lookup(name, { all: true }).catch(() => []);
    if (!addrs.length || !addrs.every((a) => a.address.startsWith('127.'))) {
      t.skip(`${name} does not resolve to loopback only`);
      return;
    }
    const admin = await listener({ answer: '{"admin_token":"tok-d0n0tl3ak"}' });
    const s = await Serve.start({ args: ['--local-worker', 'none'] });
    try {
      const url = admin.url().replace('127.0.0.1', name);
      const hook = await s.call('POST', '/v1/webhooks', { body: { url } });
      assert.equal(hook.status, 200, hook.text);
      await cancelledJob(s, s.key);
      const tried = await waitFor(async () => {
        const d = (await deliveries(s, hook.json.id)).filter((x) => x.attempts >= 1);
        return d.length >= 1 && d;
      }, { what: 'a try of the name' });
      assert.equal(tried[0].status, 'pending');
      assert.equal(tried[0].last_status, 0);
      assert.match(tried[0].last_answer, /^refused: the host's address is internal \(loopback\)/);
      assert.equal(admin.got.length, 0, 'no request reached the listener');
    } finally {
      await s.stop();
      await admin.close();
    }
  });
});
