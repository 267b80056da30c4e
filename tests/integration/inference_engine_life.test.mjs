// inference_engine_life.test.mjs - the resident inference engine's life
// beside serve (docs/serving.md): serve's shutdown stops the engine and
// says so, never "restarting it" (a Ctrl-C to serve's process group, and
// one SIGTERM to serve and the engine together, as a service manager
// sends); an engine that ends while serve runs is still restarted.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, test } from 'node:test';

import { Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const PROMPT = 'Review: a good film\nSentiment:';

// The pid of serve `s`'s engine, or 0.
function enginePid(s) {
  const r = spawnSync('pgrep', ['-f', `inference --socket ${s.data}/`], { encoding: 'utf8' });
  return Number(r.stdout.trim().split('\n')[0]) || 0;
}

async function stopped(s) {
  let timer;
  const limit = new Promise((resolve) => (timer = setTimeout(() => resolve(null), 60000)));
  const end = await Promise.race([s.exited, limit]);
  clearTimeout(timer);
  assert.ok(end, `serve did not stop:\n${s.output}`);
  return end;
}

// Serve `s` ended cleanly, its engine stopped, never restarted.
async function stoppedCleanly(s) {
  const end = await stopped(s);
  assert.equal(end.code, 0, s.output);
  assert.match(s.output, /info: the inference engine was stopped \(exit 0, signal 0\)/);
  assert.doesNotMatch(s.output, /restarting it/);
  assert.equal(enginePid(s), 0, 'no engine is left');
}

describe('serve stops its engine; a crash is still restarted', () => {
  const models = tinyModelsDir();
  const args = ['--models', models, '--local-worker', 'none', '--inference-threads', '1'];

  test('a Ctrl-C to serve\'s process group: the engine is stopped, not restarted', async () => {
    const s = await Serve.start({ args, detached: true });
    try {
      await waitFor(() => enginePid(s), { what: 'the engine' });
      const r = await s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: 4 } });
      assert.equal(r.status, 200, r.text);
      const engine = enginePid(s);
      process.kill(-s.proc.pid, 'SIGINT'); // what a terminal's Ctrl-C does
      await stoppedCleanly(s);
      assert.match(s.output, /SIGINT: stopping/);
      assert.throws(() => process.kill(engine, 0), /ESRCH/);
    } finally {
      await s.stop('SIGKILL');
    }
  });

  test('one SIGTERM to serve and its engine together: stopped, not restarted', async () => {
    const s = await Serve.start({ args });
    try {
      const engine = await waitFor(() => enginePid(s), { what: 'the engine' });
      process.kill(engine, 'SIGTERM'); // the engine first: it ends before serve's shutdown begins
      process.kill(s.proc.pid, 'SIGTERM');
      await stoppedCleanly(s);
    } finally {
      await s.stop('SIGKILL');
    }
  });

  test('an engine that ends while serve runs is logged and restarted', async () => {
    const s = await Serve.start({ args });
    try {
      const first = await waitFor(() => enginePid(s), { what: 'the engine' });
      process.kill(first, 'SIGTERM'); // stopped, but serve is not stopping
      await waitFor(() => enginePid(s) && enginePid(s) !== first, { what: 'a new engine' });
      assert.match(s.output, /error: the inference engine ended \(exit 0, signal 0\); restarting it/);
      const crashed = enginePid(s);
      process.kill(crashed, 'SIGSEGV');
      await waitFor(() => enginePid(s) && enginePid(s) !== crashed, { what: 'a new engine' });
      assert.match(s.output, /error: the inference engine ended \(exit -1, signal 11\); restarting it/);
      const r = await s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: 4 } });
      assert.equal(r.status, 200, r.text);
      assert.match((await s.call('GET', '/metrics')).text, /^alallo_inference_restarts_total 2$/m);
      await s.stop();
      assert.match(s.output, /info: the inference engine was stopped/);
      assert.equal(s.output.match(/restarting it/g).length, 2, s.output);
    } finally {
      await s.stop('SIGKILL');
    }
  });
});
