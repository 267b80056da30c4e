// inference_engine_life.test.mjs - the resident inference engine's life
// beside serve (docs/serving.md): serve's shutdown stops the engine and
// says so, never "restarting it" (a Ctrl-C to serve's process group, and
// one SIGTERM to serve and the engine together, as a service manager
// sends); an engine that ends while serve runs is still restarted; a
// client that leaves a generation (streamed or not) cancels it in the
// engine at once, and the slot it held serves another account.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { run, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const PROMPT = 'Review: a good film\nSentiment:';

// The pid of serve `s`'s engine, or 0.
function enginePid(s) {
  const r = spawnSync('pgrep', ['-f', `inference --socket ${s.data}/`], { encoding: 'utf8' });
  return Number(r.stdout.trim().split('\n')[0]) || 0;
}

// The pid of serve `s`'s engine once it answers (it then handles its stop
// signals; before, a signal ends it as it would any process).
async function engineUp(s) {
  await waitFor(async () => /^alallo_inference_up 1$/m.test((await s.call('GET', '/metrics')).text), { what: 'the engine to answer' });
  return waitFor(() => enginePid(s), { what: 'the engine' });
}

async function stopped(s) {
  let timer;
  const limit = new Promise((resolve) => (timer = setTimeout(() => resolve(null), 60000)));
  const end = await Promise.race([s.exited, limit]);
  // and its output read to the end ('exit' may come before the last of it)
  const read = (st) => st.readableEnded || st.destroyed || new Promise((r) => st.once('close', r));
  await Promise.race([Promise.all([read(s.proc.stdout), read(s.proc.stderr)]), limit]);
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
      await engineUp(s);
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
      const engine = await engineUp(s);
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
      const first = await engineUp(s);
      process.kill(first, 'SIGTERM'); // stopped, but serve is not stopping
      await waitFor(() => enginePid(s) && enginePid(s) !== first, { what: 'a new engine' });
      await engineUp(s);
      assert.match(s.output, /error: the inference engine ended \(exit 0, signal 0\); restarting it/);
      const crashed = enginePid(s);
      process.kill(crashed, 'SIGABRT'); // a crash (an abort; not SIGSEGV, which a sanitizer build catches)
      await waitFor(() => enginePid(s) && enginePid(s) !== crashed, { what: 'a new engine' });
      // serve's log reaches this process through a pipe: the line may come
      // a moment after the new engine is seen
      const aborted = /error: the inference engine ended \(exit -1, signal 6\); restarting it/;
      await waitFor(() => aborted.test(s.output), { what: 'the crash in the log' });
      assert.match(s.output, aborted);
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

// The engine's numbers on serve's /metrics (docs/serving.md).
async function engineMetrics(s) {
  const text = (await s.call('GET', '/metrics')).text;
  const get = (name) => Number((text.match(new RegExp(`^alallo_inference_${name} (\\d+)$`, 'm')) || [])[1]);
  return { running: get('running'), waiting: get('waiting'), tokens: get('tokens_total'), cancelled: get('cancelled_total') };
}

describe('a client that leaves cancels its generation at once', () => {
  // The `small` shape on one thread of the engine takes seconds for its
  // ~1000 tokens of context: long enough to leave in the middle. One
  // generation runs at a time, so another account's request waits for the
  // slot the cancelled one frees.
  const models = tinyModelsDir();
  const LONG = 2048; // max_tokens: the answer runs to the end of the model's context
  let s;
  let other;
  before(async () => {
    if (!spawnSync('test', ['-d', path.join(models, 'small')]).status) return;
    run(['model', 'init', '--shape', 'small', '--tokenizer', path.join(path.dirname(models), 'tokenizer.json'), '--out', path.join(models, 'small')]);
  });
  before(async () => {
    s = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference-threads', '1', '--inference-max-running', '1'] });
    other = s.account('cancel-other');
    // The engine starts beside serve; until it answers, /metrics has no
    // engine lines and every figure read from them is NaN (a NaN baseline
    // made the first test wait forever on a loaded machine).
    await waitFor(async () => Number.isFinite((await engineMetrics(s)).tokens),
      { timeoutMs: 60000, everyMs: 100, what: 'the engine to be up' });
  });
  after(async () => s && s.stop());

  // Leaves (aborts) once the engine has generated a few tokens of it, then
  // asks for another account's answer; checks the first was cancelled
  // within two seconds and the second served long before the first's end.
  async function leaveAndServeAnother(startLong) {
    const before = await engineMetrics(s);
    assert.ok(Object.values(before).every(Number.isFinite), JSON.stringify(before));
    const leave = new AbortController();
    const long = startLong(leave.signal);
    await waitFor(async () => {
      const m = await engineMetrics(s);
      return m.running === 1 && m.tokens > before.tokens + 5;
    }, { timeoutMs: 60000, everyMs: 50, what: 'the long generation to run' });
    // another account's request waits for the one slot
    const second = s.call('POST', '/v1/completions', { key: other, body: { model: 'tiny', prompt: PROMPT, max_tokens: 8, temperature: 0 } });
    await waitFor(async () => (await engineMetrics(s)).waiting === 1, { everyMs: 50, what: 'the second request to wait' });
    leave.abort();
    await long.catch(() => {});
    const left = Date.now();
    const gone = await waitFor(async () => {
      const m = await engineMetrics(s);
      return m.cancelled === before.cancelled + 1 ? m : false;
    }, { timeoutMs: 2000, everyMs: 50, what: 'the engine to cancel the generation' });
    assert.ok(Date.now() - left <= 2000);
    const r = await second;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].finish_reason, 'length');
    // the second's 8 tokens and what the first made before it left: far
    // from the ~1000 tokens the first would have made to its end
    const done = await engineMetrics(s);
    assert.equal(done.running, 0);
    assert.equal(done.waiting, 0);
    assert.ok(done.tokens - before.tokens < 500, `tokens ${done.tokens - before.tokens}; at the cancel ${gone.tokens - before.tokens}`);
  }

  test('a streamed chat completion whose client aborts', async () => {
    await leaveAndServeAnother(async (signal) => {
      const res = await fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${s.key}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'small', messages: [{ role: 'user', content: 'hi' }], max_tokens: LONG, temperature: 0, stream: true }),
        signal,
      });
      assert.equal(res.status, 200);
      for await (const piece of res.body) void piece; // read as it comes, until the abort
    });
  });

  test('a chat completion and a legacy completion, not streamed, whose client aborts', async () => {
    for (const [route, input] of [['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }], ['/v1/completions', { prompt: PROMPT }]]) {
      await leaveAndServeAnother((signal) =>
        fetch(`${s.url}${route}`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${s.key}`, 'Content-Type': 'application/json' },
          body: JSON.stringify({ model: 'small', ...input, max_tokens: LONG, temperature: 0 }),
          signal,
        }),
      );
    }
  });

  // Several answers a request (a list of prompts, n): one that fails
  // cancels the others in the engine at once, and the client's leaving
  // cancels them all.
  for (const stream of [false, true]) {
    test(`a list whose one prompt fails${stream ? ', streamed' : ''}: the others are cancelled, the error names the prompt`, async () => {
      const before = await engineMetrics(s);
      const started = Date.now();
      const r = await s.call('POST', '/v1/completions', { body: { model: 'small', prompt: [PROMPT, PROMPT, [999999]], max_tokens: LONG, temperature: 0, stream } });
      if (stream && r.status === 200) {
        // a piece of another came first: the stream ends with the error as
        // its last event, without [DONE]
        assert.doesNotMatch(r.text, /\[DONE\]/);
        const last = JSON.parse(r.text.trim().split('\n\n').pop().replace(/^data: /, ''));
        assert.equal(last.error.param, 'prompt', r.text);
        assert.match(last.error.message, /^prompt\[2\]: /);
      } else {
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, 'prompt');
        assert.match(r.json.error.message, /^prompt\[2\]: /);
      }
      const m = await waitFor(async () => {
        const x = await engineMetrics(s);
        return x.running === 0 && x.waiting === 0 ? x : false;
      }, { timeoutMs: 5000, everyMs: 50, what: 'the two long answers cancelled' });
      assert.ok(Date.now() - started < 20000, 'answered long before the long answers would end');
      assert.ok(m.tokens - before.tokens < 500, `tokens ${m.tokens - before.tokens}`);
    });

    test(`n answers whose client aborts${stream ? ', streamed' : ''}: all are cancelled`, async () => {
      const before = await engineMetrics(s);
      const leave = new AbortController();
      const long = (async () => {
        const res = await fetch(`${s.url}/v1/completions`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${s.key}`, 'Content-Type': 'application/json' },
          body: JSON.stringify({ model: 'small', prompt: PROMPT, n: 3, max_tokens: LONG, temperature: 0, stream }),
          signal: leave.signal,
        });
        for await (const piece of res.body) void piece; // read as it comes, until the abort
      })();
      await waitFor(async () => {
        const x = await engineMetrics(s);
        return x.running === 1 && x.waiting === 2 && x.tokens > before.tokens + 5;
      }, { timeoutMs: 60000, everyMs: 50, what: 'one answer to run, two to wait' });
      leave.abort();
      await long.catch(() => {});
      const gone = await waitFor(async () => {
        const x = await engineMetrics(s);
        return x.cancelled === before.cancelled + 3 && x.running === 0 && x.waiting === 0 ? x : false;
      }, { timeoutMs: 2000, everyMs: 50, what: 'the engine to cancel all three' });
      assert.ok(gone.tokens - before.tokens < 500, `tokens ${gone.tokens - before.tokens}`);
    });
  }
  // Last in this block: it kills the engine. A streamed answer under way
  // when the engine dies ends with the error as its last event (no
  // [DONE]), and the restarted engine serves the next request.
  test('the engine killed in the middle of a streamed answer: an error event, then the next request is served', async () => {
    const pid = enginePid(s);
    assert.ok(pid > 0);
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${s.key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'small', prompt: PROMPT, max_tokens: LONG, temperature: 0, stream: true }),
    });
    assert.equal(res.status, 200);
    let text = '';
    let killed = false;
    const decoder = new TextDecoder();
    for await (const piece of res.body) {
      text += decoder.decode(piece, { stream: true });
      if (!killed && (text.match(/^data: \{/gm) || []).length >= 3) { // under way
        process.kill(pid, 'SIGKILL');
        killed = true;
      }
    }
    assert.ok(killed, text);
    assert.doesNotMatch(text, /\[DONE\]/);
    const events = text.trim().split('\n\n').map((e) => JSON.parse(e.replace(/^data: /, '')));
    assert.ok(events.length >= 4, text);
    for (const e of events.slice(0, -1)) assert.equal(e.object, 'text_completion', JSON.stringify(e));
    const last = events[events.length - 1];
    assert.match(last.error.message, /restarting/, JSON.stringify(last));
    await waitFor(() => enginePid(s) > 0 && enginePid(s) !== pid, { what: 'a new engine' });
    const again = await s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: 4, temperature: 0 } });
    assert.equal(again.status, 200, again.text);
  });
});
