// security_ratelimit.test.mjs - the per-key rate limit (src/api/ratelimit.c)
// as the router applies it: `serve --rate-limit N` lets each API key make N
// requests a second with bursts of 2N; beyond, 429 with the API's error
// shape (code `rate_limit_exceeded`) and a Retry-After header. Keys are
// limited one by one; /healthz, /metrics and the worker endpoints are never
// limited (a limited heartbeat would make a worker look lost).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Serve, sleep } from './service_harness.mjs';

describe('rate limit', () => {
  let s;
  let other;
  before(async () => {
    s = await Serve.start({ args: ['--local-worker', 'none', '--rate-limit', '5'] });
    other = s.account('other');
  });
  after(async () => s && s.stop());

  test('a key past its rate gets 429 with the error shape and Retry-After; others do not', async () => {
    const replies = await Promise.all(Array.from({ length: 40 }, () => s.call('GET', '/v1/files')));
    const ok = replies.filter((r) => r.status === 200).length;
    const limited = replies.filter((r) => r.status === 429);
    // A burst of 10 (2 x 5), and at most a few more refilled meanwhile.
    assert.ok(ok >= 10 && ok <= 14, `${ok} of 40 passed`);
    assert.equal(ok + limited.length, 40);
    for (const r of limited) {
      assert.equal(r.json.error.code, 'rate_limit_exceeded');
      assert.equal(typeof r.json.error.message, 'string');
      assert.ok('param' in r.json.error);
      const retry = Number(r.headers.get('retry-after'));
      assert.ok(Number.isInteger(retry) && retry >= 1 && retry <= 60, `Retry-After ${r.headers.get('retry-after')}`);
    }
    // Another key is not slowed by this one.
    assert.equal((await s.call('GET', '/v1/files', { key: other })).status, 200);
    // Health, metrics and the worker endpoints are not limited.
    for (let i = 0; i < 30; i++) {
      assert.equal((await s.call('GET', '/healthz', { key: null })).status, 200);
      const w = await s.call('POST', '/internal/workers/nobody/heartbeat', { key: s.token, body: { attempt_id: null, fence: null } });
      assert.notEqual(w.status, 429);
    }
    const m = await s.call('GET', '/metrics', { key: null });
    assert.match(m.text, /alallo_http_requests_total\{code="429"\} [1-9]/);
    // After the wait it asked for, the key is served again.
    await sleep(Number(limited[0].headers.get('retry-after')) * 1000 + 200);
    assert.equal((await s.call('GET', '/v1/files')).status, 200);
  });

  test('a bad --rate-limit is refused at start', async () => {
    await assert.rejects(Serve.start({ args: ['--local-worker', 'none', '--rate-limit', 'fast'] }), /rate-limit/);
  });
});
