// ha_takeover.test.mjs - two `serve` processes on one store: one leads, the
// other stands by and takes over when the leader is killed (kill -9).
//
// Both serves share one data folder (and, with ALALLO_TEST_STORE=postgresql,
// one database: service_harness.mjs). What must hold:
//  * exactly one leads (/healthz "leader", /metrics alallo_leader);
//  * the standby never runs a pass: jobs created through it are placed by
//    the leader (its pass counter stays 0 while it stands by), and a remote
//    worker that talks only to the standby is registered and given work;
//  * after kill -9 of the leader, the standby says "leader": true within
//    seconds, starts its own local worker, finds the dead leader's local
//    worker lost and moves its job; both jobs succeed, each step billed
//    once (checked through the ledger of the API).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  assertBilledOnce, Serve, checkpointDirs, createLongJob, startWorker, stopProc, tinyModelsDir,
  uploadSample, waitFor, waitJob, waitWorkers, workerState,
} from '../fault/fault_harness.mjs';

// Each local worker offers 400 MiB: a batch of 2, not a batch of 32, which
// only the remote worker (2 GiB) can take (as in fault_serve_kill9).
const common = ['--models', tinyModelsDir(), '--worker-timeout', '4'];
const argsOf = (name) => [...common, '--local-worker', `name=${name},cpus=1,mem=400M,price=0.40`];

async function health(s) {
  return (await s.call('GET', '/healthz', { key: null })).json;
}

async function metric(s, name) {
  const r = await s.call('GET', '/metrics', { key: null });
  const m = new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(r.text);
  assert.ok(m, `no ${name} in /metrics`);
  return Number(m[1]);
}

test('kill -9 of the leader: the standby takes over, jobs finish, each step billed once', { timeout: 480000 }, async () => {
  const a = await Serve.start({ args: argsOf('localA') });
  // Alone on its store, it leads from its first try of the lock.
  await waitFor(async () => (await health(a)).leader, { timeoutMs: 10000, what: 'the first serve to lead' });
  const b = await Serve.start({ data: a.data, args: argsOf('localB') });
  let remote = null;
  try {
    assert.equal((await health(b)).leader, false, b.output);
    assert.equal(await metric(a, 'alallo_leader'), 1);
    assert.equal(await metric(b, 'alallo_leader'), 0);
    assert.match(b.output, /standing by/);

    // The remote worker knows only the standby; its calls reach the leader.
    remote = startWorker(b, 'remote1');
    await waitWorkers(b, ['localA', 'remote1']);
    assert.equal(await workerState(b, 'localB'), null, 'a standby starts no local worker');

    // Everything through the standby: the upload, the creations.
    const file = await uploadSample(b);
    const rb = await b.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 40, batch_size: 32 }, seed: 2 });
    assert.equal(rb.status, 200, rb.text);
    await waitJob(b, rb.json.id, (j) => j.attempts.length > 0, 'to be claimed');
    const ra = await createLongJob(b, file, { epochs: 20, seed: 1 });
    await waitFor(async () => {
      const both = [await b.job(ra.id), await b.job(rb.json.id)];
      for (const j of both) if (['succeeded', 'failed', 'cancelled'].includes(j.status)) throw new Error(`job ${j.id} ended ${j.status} before the leader was killed`);
      // A checkpoint the store recorded (a later attempt resumes from the
      // latest recorded one, not from the disk): the trainer reports it
      // before its "saved checkpoint" log line, and reports apply in order.
      for (const j of both) {
        if (j.status !== 'running' || checkpointDirs(b, j.id).length === 0) return false;
        if (!/saved checkpoint at step/.test((await b.call('GET', `/v1/fine_tuning/jobs/${j.id}/log`)).text)) return false;
      }
      return true;
    }, { timeoutMs: 180000, everyMs: 100, what: 'both jobs running, with a checkpoint each that the store recorded' });
    const ja = await b.job(ra.id);
    assert.equal(ja.attempts.at(-1).worker, 'localA');
    assert.equal((await b.job(rb.json.id)).attempts.at(-1).worker, 'remote1');
    // Placed by the leader's passes; the standby has run none.
    assert.ok(await metric(a, 'alallo_sched_passes_total') > 0);
    assert.equal(await metric(b, 'alallo_sched_passes_total'), 0, 'a standby ran a scheduling pass');

    const t0 = Date.now();
    a.proc.kill('SIGKILL');
    await a.exited;
    await waitFor(async () => (await health(b)).leader === true, { timeoutMs: 15000, everyMs: 50, what: 'the standby to lead' });
    const tookOver = Date.now() - t0;
    assert.ok(tookOver < 10000, `take-over took ${tookOver} ms`);
    assert.equal(await metric(b, 'alallo_leader'), 1);
    // Its own local worker starts; the dead leader's is found lost.
    await waitFor(async () => (await workerState(b, 'localB')) === 'active' && (await workerState(b, 'localA')) === 'lost',
      { timeoutMs: 60000, what: 'localB active and localA lost' });

    const doneA = await waitJob(b, ra.id, (j) => j.status === 'succeeded', 'to succeed after the take-over', { timeoutMs: 300000 });
    const doneB = await waitJob(b, rb.json.id, (j) => j.status === 'succeeded', 'to succeed after the take-over', { timeoutMs: 300000 });
    // The job of the dead leader's worker moved and continued from a checkpoint.
    assert.ok(doneA.attempts.length >= 2, JSON.stringify(doneA.attempts));
    assert.match(doneA.attempts[0].reason || '', /worker lost/);
    assert.ok(doneA.attempts.at(-1).start_step > 0, 'continued from a checkpoint');
    assert.ok(await metric(b, 'alallo_sched_passes_total') > 0, 'the new leader runs passes');
    for (const j of [doneA, doneB]) {
      assert.equal(j.progress.percent, 100);
      assert.ok(j.price.charged > 0, `job ${j.id} was not charged`);
      await assertBilledOnce(assert, b, j);
    }
    assert.equal((await health(b)).leader, true);
  } finally {
    if (remote) await stopProc(remote);
    await b.stop();
    await a.stop('SIGKILL');
  }
});

test('a standby forwards writes and says 503 while no leader answers; a second standby waits its turn', { timeout: 120000 }, async () => {
  const a = await Serve.start({ args: [...common, '--local-worker', 'none'] });
  await waitFor(async () => (await health(a)).leader, { timeoutMs: 10000, what: 'the first serve to lead' });
  const b = await Serve.start({ data: a.data, args: [...common, '--local-worker', 'none'] });
  const c = await Serve.start({ data: a.data, args: [...common, '--local-worker', 'none'] });
  try {
    assert.deepEqual([(await health(a)).leader, (await health(b)).leader, (await health(c)).leader], [true, false, false]);
    // A write through a standby is the leader's answer: a bad request is
    // refused in the same words.
    const direct = await a.call('POST', '/v1/fine_tuning/jobs', { body: { model: 'tiny' } });
    const via = await b.call('POST', '/v1/fine_tuning/jobs', { body: { model: 'tiny' } });
    assert.equal(via.status, direct.status);
    assert.deepEqual(via.json, direct.json);
    // A standby checks the caller itself too.
    assert.equal((await b.call('POST', '/v1/fine_tuning/jobs', { key: 'sk-wrong', body: {} })).status, 401);
    // A call marked as forwarded is never forwarded again.
    const loop = await b.call('POST', '/v1/fine_tuning/jobs', { body: { model: 'tiny' }, headers: { 'X-Alallo-Forwarded': '1' } });
    assert.equal(loop.status, 503);
    assert.equal(loop.headers.get('retry-after'), '1');

    a.proc.kill('SIGKILL');
    await a.exited;
    // Exactly one of the two standbys takes over; the other forwards to it.
    const leaders = await waitFor(async () => {
      const l = [(await health(b)).leader, (await health(c)).leader];
      return l.filter(Boolean).length === 1 ? l : false;
    }, { timeoutMs: 15000, everyMs: 50, what: 'one of the standbys to lead' });
    const [lead, standby] = leaders[0] ? [b, c] : [c, b];
    await waitFor(async () => (await standby.call('POST', '/v1/fine_tuning/jobs', { body: { model: 'tiny' } })).status === 400,
      { timeoutMs: 15000, what: 'the remaining standby to forward to the new leader' });
    for (let i = 0; i < 10; i++) assert.deepEqual([(await health(lead)).leader, (await health(standby)).leader], [true, false]);
  } finally {
    await Promise.all([b.stop(), c.stop(), a.stop('SIGKILL')]);
  }
});

test('a stream through a standby comes piece by piece, as through the leader', { timeout: 180000 }, async () => {
  const a = await Serve.start({ args: [...common, '--local-worker', 'none'] });
  await waitFor(async () => (await health(a)).leader, { timeoutMs: 10000, what: 'the first serve to lead' });
  const b = await Serve.start({ data: a.data, args: [...common, '--local-worker', 'none'] });
  try {
    assert.equal((await health(b)).leader, false);
    // A long answer (the tiny model seldom stops early), streamed; the
    // time of each piece of the body that arrives, from the request.
    const stream = async (s) => {
      const t0 = performance.now();
      const r = await fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${s.key}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'the film was a delight' }], max_tokens: 400, temperature: 0, stream: true }),
      });
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type'), /^text\/event-stream/);
      const arrivals = [];
      let text = '';
      const dec = new TextDecoder();
      for await (const chunk of r.body) {
        text += dec.decode(chunk, { stream: true });
        arrivals.push(performance.now() - t0);
      }
      assert.match(text, /data: \[DONE\]/);
      return { text, arrivals, first: arrivals[0] / arrivals[arrivals.length - 1] };
    };
    const direct = await stream(a);
    const via = await stream(b);
    console.log(`first byte at ${(direct.first * 100).toFixed(0)}% through the leader, ${(via.first * 100).toFixed(0)}% through the standby (${via.arrivals.length} pieces in ${via.arrivals[via.arrivals.length - 1].toFixed(0)} ms)`);
    // The same answer (temperature 0), its pieces passed on as they came:
    // sent at once, they would arrive in one or two reads at the end.
    const content = (t) => t.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content || '').join('');
    assert.equal(content(via.text), content(direct.text));
    const n = via.arrivals.length;
    const spread = via.arrivals[n - 1] - via.arrivals[0];
    const firstHalf = via.arrivals.filter((t) => t < via.arrivals[0] + spread / 2).length;
    // Passed on as they came, the pieces through the standby spread over
    // about the time the leader took to make them (its own stream's spread,
    // measured just before: a quiet machine makes this answer in ~50 ms, a
    // loaded one in seconds); sent at once, they would arrive within a
    // millisecond or two.
    // A reader slowed by the machine's load takes several pieces in one
    // read (9 reads of this answer in a loaded CI run), so the count of
    // reads only has to exceed what one burst gives: at least two reads in
    // each half of the spread.
    const made = direct.arrivals[direct.arrivals.length - 1] - direct.arrivals[0];
    assert.ok(n >= 4, `${n} reads`);
    assert.ok(spread > Math.max(10, 0.2 * made), `the pieces arrived within ${spread.toFixed(1)} ms, where the leader's own stream spread over ${made.toFixed(1)} ms`);
    assert.ok(firstHalf >= 2 && n - firstHalf >= 2, `${firstHalf} of ${n} reads in the first half of ${spread.toFixed(1)} ms`);
  } finally {
    await Promise.all([b.stop(), a.stop()]);
  }
});
