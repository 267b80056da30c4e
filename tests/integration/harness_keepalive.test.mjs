// harness_keepalive.test.mjs - the harness's requests survive a connection
// that serve closed while this process was frozen.
//
// The integration tests run the binary with spawnSync, which freezes this
// process and node's keep-alive timers with it. A request sent right after
// such a run may go out on a kept-alive connection that serve has closed
// for idling past --header-timeout meanwhile; it failed with "fetch failed"
// (other side closed), at random, in families_serve.test.mjs under load
// (docs/testing.md, "Hunting flaky tests"). Here serve closes idle
// connections after 5 s (its Keep-Alive header hints 3 s, so node keeps a
// connection 1 s), and each round freezes the process for 6 s between two
// requests: every request must get its answer.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { Serve } from './service_harness.mjs';

let s;
after(async () => s && s.stop());

test('a request after the process was frozen past serve\'s idle close is answered', async () => {
  s = await Serve.start({ args: ['--local-worker', 'none', '--header-timeout', '5'] });
  for (let round = 0; round < 4; round++) {
    const first = await s.call('GET', '/v1/models');
    assert.equal(first.status, 200, first.text);
    spawnSync('sleep', ['6']); // frozen, as while run() waits for the binary
    const next = await s.call('GET', '/v1/models');
    assert.equal(next.status, 200, `round ${round}: ${next.text}`);
  }
});
