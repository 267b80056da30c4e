// serving_pool.test.mjs - the inference engine on a pool's nodes
// (`serve --inference-pool POOL[:N]`, docs/serving.md "On a cluster"), on
// the local-process engine (the same control path as Slurm's, without a
// cluster): the serving jobs start, report where they listen, and answer
// completions as `alallo generate` does; the operator sees them in GET
// /v1/workers and other accounts do not; an engine's port refuses a
// request without its key; a serving job killed is submitted again and the
// next request is served; requests for one base go to the engine that has
// it loaded; an engine no one wants any more is told to stop. With a
// range (POOL:MIN-MAX) the engines follow the requests: none until one is
// asked for, one more when requests wait at each, and an idle engine gives
// its slot back, to a queued training job too. With engines on two pools,
// one more goes to the cheaper pool and one fewer leaves the dearer.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, tinyModelsDir, waitFor } from './service_harness.mjs';
import { createJob, startEngineServe, uploadSample, waitJob } from '../slurm/engine_harness.mjs';

const PROMPT = 'Review: a good film\nSentiment:';
const TOKENS = 12;

function generate(dir) {
  const r = spawnSync(BIN, ['generate', '--model-dir', dir, '--prompt', PROMPT, '--max-tokens', String(TOKENS), '--temperature', '0', '--json'],
    { encoding: 'utf8', timeout: 120000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop()).text;
}

const complete = (s, key = s.key) =>
  s.call('POST', '/v1/completions', { key, body: { model: 'tiny', prompt: PROMPT, max_tokens: TOKENS, temperature: 0 } });

// The serving engines the operator sees, once `n` of them are fresh.
async function serving(s, n) {
  return waitFor(async () => {
    const r = await s.call('GET', '/v1/workers');
    const fresh = (r.json.serving || []).filter((e) => e.fresh);
    return fresh.length >= n ? r.json.serving : null;
  }, { timeoutMs: 90000, what: `${n} serving engine(s) heard from` });
}

// One line to an engine's TCP port and its answer's first line.
function engineLine(port, line) {
  return new Promise((resolve, reject) => {
    const c = net.createConnection({ host: '127.0.0.1', port });
    let got = '';
    c.on('connect', () => c.write(line + '\n'));
    c.on('data', (d) => (got += d));
    c.on('end', () => resolve(JSON.parse(got.trim().split('\n')[0])));
    c.on('error', reject);
  });
}

test('the engine runs as a serving job of the pool and answers as generate does', { timeout: 240000 }, async () => {
  const s = await startEngineServe({ executor: 'process', pools: ['name=local,partition=local,cpus=1,mem=2G,class=on-demand,price=0.40/h,slots=3'], args: ['--inference-pool', 'local:2'] });
  try {
    // The engines take 2 of the pool's 3 slots; one slot trains.
    const w = (await s.call('GET', '/v1/workers')).json;
    assert.deepEqual(w.pools.map((p) => [p.name, p.slots, p.serving]), [['local', 3, 2]]);
    assert.deepEqual(w.data.map((x) => x.name), ['process.local.0']);
    const engines = await serving(s, 2);
    assert.deepEqual(engines.map((e) => e.id).sort(), ['local-0', 'local-1']);
    for (const e of engines) {
      assert.ok(e.port > 0 && e.port < 65536, JSON.stringify(e));
      assert.equal(e.model_memory, 8 * 1024 ** 3);
      assert.equal(e.key, undefined, 'no key is shown');
    }
    // Another account sees the pools, not where the engines listen.
    const other = s.account('someone');
    const theirs = await s.call('GET', '/v1/workers', { key: other });
    assert.equal(theirs.status, 200);
    assert.equal(theirs.json.serving, undefined);

    // The serving job: its script, and its token kept as the server's only.
    const dir = path.join(s.data, 'engine', 'serving');
    const script = fs.readFileSync(path.join(dir, 'local-0.sbatch'), 'utf8');
    assert.match(script, new RegExp(`^exec '/[^']+' serving run --server '${s.url}' --id local-0 --token '@${dir}/local-0.token' --work-dir '${dir}' --threads \\d+ --model-memory \\d+ --max-running \\d+$`, 'm'));
    assert.equal(fs.statSync(path.join(dir, 'local-0.token')).mode & 0o777, 0o600);

    const want = generate(path.join(tinyModelsDir(), 'tiny'));
    const r = await complete(s);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].text, want);
    // The base is now loaded in one engine; the next requests go there.
    const loaded = await waitFor(async () => {
      const now = (await s.call('GET', '/v1/workers')).json.serving;
      return now.filter((e) => e.models > 0).length === 1 ? now : null;
    }, { timeoutMs: 20000, what: 'one engine holding the base' });
    for (let i = 0; i < 3; i++) assert.equal((await complete(s)).json.choices[0].text, want);
    const after = await waitFor(async () => {
      const now = (await s.call('GET', '/v1/workers')).json.serving;
      return now.every((e) => e.fresh) ? now : null;
    }, { timeoutMs: 20000, what: 'both engines heard from again' });
    assert.equal(after.filter((e) => e.models > 0).length, 1, JSON.stringify(after));
    assert.equal(after.find((e) => e.models > 0).id, loaded.find((e) => e.models > 0).id);

    // An engine's port answers nothing without its key.
    const port = engines[0].port;
    assert.deepEqual(await engineLine(port, JSON.stringify({ stats: true })),
      { error: 'forbidden', message: "the request's key is missing or wrong" });
    const token = fs.readFileSync(path.join(dir, `${engines[0].id}.token`), 'utf8').trim();
    assert.equal(typeof (await engineLine(port, JSON.stringify({ stats: true, key: token }))).models, 'number');
    // A heartbeat with another token is refused.
    const forged = await fetch(`${s.url}/internal/serving/local-0/heartbeat`, {
      method: 'POST', headers: { Authorization: `Bearer ${s.key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ host: '127.0.0.1', port: 1, stats: null }),
    });
    assert.equal(forged.status, 401);

    // Both serving jobs killed: submitted again, and served again.
    const pids = spawnSync('pgrep', ['-f', `serving run --server ${s.url}`], { encoding: 'utf8' }).stdout.trim().split('\n').map(Number);
    assert.equal(pids.length, 2, `serving runners: ${pids}`);
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    await waitFor(async () => {
      const p = spawnSync('pgrep', ['-f', `serving run --server ${s.url}`], { encoding: 'utf8' }).stdout.trim();
      return p && !p.split('\n').map(Number).some((x) => pids.includes(x));
    }, { timeoutMs: 90000, what: 'the serving jobs submitted again' });
    const again = await waitFor(async () => {
      const c = await complete(s);
      return c.status === 200 ? c : null;
    }, { timeoutMs: 90000, what: 'a completion after the engines came back' });
    assert.equal(again.json.choices[0].text, want);
    assert.match(s.output, /serving engine local-\d is no longer listed; submitted again|serving engine local-\d ended within a minute/);
  } finally {
    await s.stop();
  }
});

// The pools' serving count, once it is `n`.
async function servingCount(s, n, what, timeoutMs = 90000) {
  return waitFor(async () => {
    const w = (await s.call('GET', '/v1/workers')).json;
    return w.pools[0].serving === n ? w : null;
  }, { timeoutMs, what: `${what} (the pool serving ${n})` });
}

test('a range of engines follows the requests: none until asked, one more when requests wait, the slot back when idle', { timeout: 300000 }, async () => {
  const s = await startEngineServe({
    executor: 'process',
    pools: ['name=local,partition=local,cpus=1,mem=2G,class=on-demand,price=0.40/h,slots=2'],
    args: ['--inference-pool', 'local:0-2', '--inference-idle', '3', '--inference-max-running', '1'],
  });
  try {
    // MIN 0: no engine runs and both slots train.
    let w = (await s.call('GET', '/v1/workers')).json;
    assert.deepEqual(w.pools.map((p) => [p.name, p.slots, p.serving]), [['local', 2, 0]]);
    assert.deepEqual(w.data.map((x) => x.name).sort(), ['process.local.0', 'process.local.1']);
    // The first request finds none and an engine starts for it: the
    // request is answered by it when it comes up within the request's wait
    // for an engine, else a 503 says when to try again.
    const want = generate(path.join(tinyModelsDir(), 'tiny'));
    const first = await complete(s);
    if (first.status === 200) assert.equal(first.json.choices[0].text, want);
    else {
      assert.equal(first.status, 503, first.text);
      assert.ok(Number(first.headers.get('retry-after')) > 0);
    }
    await waitFor(() => /serving engines on pool local: 1, one more \(a request found none\)/.test(s.output), { what: "serve's log of the engine started" });
    await servingCount(s, 1, 'an engine started by the request');
    await serving(s, 1);
    // The slot it holds reads as draining: no pass places a job there and
    // no estimate reads it as free.
    w = (await s.call('GET', '/v1/workers')).json;
    assert.deepEqual(w.data.map((x) => x.state).sort(), ['active', 'draining']);
    assert.equal((await complete(s)).json.choices[0].text, want);
    const script = fs.readFileSync(path.join(s.data, 'engine', 'serving', 'local-0.sbatch'), 'utf8');
    assert.match(script, / --max-running 1\n/);

    // Requests that wait at the engine (it runs one at a time): one more.
    let stop = false;
    const long = { model: 'tiny', prompt: PROMPT, max_tokens: 300, temperature: 0 };
    const clients = Array.from({ length: 6 }, async () => {
      while (!stop) await s.call('POST', '/v1/completions', { body: long });
    });
    try {
      w = await servingCount(s, 2, 'a second engine for the waiting requests', 120000);
    } finally {
      stop = true;
      await Promise.all(clients);
    }
    await waitFor(() => /serving engines on pool local: 2, one more \(requests wait at every engine\)/.test(s.output), { what: "serve's log of the second engine" });

    // Idle again, with a training job queued for the slots both engines
    // hold: an engine gives its slot back and the job trains there; the
    // engines stop one at a time, down to MIN.
    const file = await uploadSample(s);
    const job = await createJob(s, file);
    await waitJob(s, job.id, (j) => j.status === 'succeeded', 'trained on a slot an engine gave back');
    assert.match(s.output, /serving engines on pool local: 1, one fewer \(idle for \d+ s, training jobs queued\)/);
    await servingCount(s, 0, 'the idle engines stopped', 120000);
    // Given back, both slots are active again.
    w = (await s.call('GET', '/v1/workers')).json;
    assert.deepEqual(w.data.map((x) => x.state), ['active', 'active']);
  } finally {
    await s.stop();
  }
});

test('engines on two pools: one more goes to the cheaper pool, the next to the dearer, and the dearer stops first', { timeout: 300000 }, async () => {
  const s = await startEngineServe({
    executor: 'process',
    pools: [
      'name=dear,partition=local,cpus=1,mem=2G,class=on-demand,price=2/h,slots=1',
      'name=cheap,partition=local,cpus=1,mem=2G,class=on-demand,price=0.40/h,slots=1',
    ],
    args: ['--inference-pool', 'dear:0-1', '--inference-pool', 'cheap:0-1', '--inference-idle', '3',
      '--inference-max-running', '1'],
  });
  const counts = async () => {
    const w = (await s.call('GET', '/v1/workers')).json;
    return Object.fromEntries(w.pools.map((p) => [p.name, p.serving]));
  };
  try {
    assert.deepEqual(await counts(), { dear: 0, cheap: 0 });
    // The first request finds none: the engine starts on the cheaper pool.
    const want = generate(path.join(tinyModelsDir(), 'tiny'));
    const first = await complete(s);
    assert.ok(first.status === 200 || first.status === 503, first.text);
    await waitFor(() => /serving engines on pool cheap: 1, one more \(a request found none\)/.test(s.output), { what: "serve's log of the engine on the cheaper pool" });
    let engines = await serving(s, 1);
    assert.deepEqual(engines.map((e) => e.id), ['cheap-0']);
    assert.equal((await complete(s)).json.choices[0].text, want);

    // Requests wait at it, and the cheaper pool has no slot left: the
    // next engine goes to the dearer one.
    let stop = false;
    const long = { model: 'tiny', prompt: PROMPT, max_tokens: 300, temperature: 0 };
    const clients = Array.from({ length: 6 }, async () => {
      while (!stop) await s.call('POST', '/v1/completions', { body: long });
    });
    try {
      await waitFor(async () => ((await counts()).dear === 1 ? true : null), { timeoutMs: 120000, what: 'an engine on the dearer pool' });
      engines = await serving(s, 2);
    } finally {
      stop = true;
      await Promise.all(clients);
    }
    assert.deepEqual(engines.map((e) => e.id).sort(), ['cheap-0', 'dear-0']);
    assert.match(s.output, /serving engines on pool dear: 1, one more \(requests wait at every engine\)/);
    // Each pool's engines are its own: neither cancels the other's.
    assert.doesNotMatch(s.output, /is not wanted: cancelled/);
    assert.equal((await complete(s)).json.choices[0].text, want);

    // Idle: the dearer pool's engine stops first, then the cheaper one's.
    await waitFor(async () => {
      const c = await counts();
      return c.dear === 0 && c.cheap === 0 ? true : null;
    }, { timeoutMs: 120000, what: 'both idle engines stopped' });
    const dearStop = s.output.search(/serving engines on pool dear: 0, one fewer \(idle/);
    const cheapStop = s.output.search(/serving engines on pool cheap: 0, one fewer \(idle/);
    assert.ok(dearStop >= 0 && cheapStop > dearStop, 'the dearer pool stops first');
    // The only engines cancelled are the two that stopped, each once.
    const cancelled = [...s.output.matchAll(/serving engine (\S+) \(job \d+\) is not wanted: cancelled/g)].map((m) => m[1]);
    assert.deepEqual(cancelled, ['dear-0', 'cheap-0']);
  } finally {
    await s.stop();
  }
});

test('an engine no one wants is told to stop, and serve refuses a pool it does not have or that is too small', { timeout: 180000 }, async () => {
  const s = await startEngineServe({ executor: 'process', args: ['--inference-pool', 'local'] });
  try {
    await serving(s, 1);
    const dir = path.join(s.data, 'engine', 'serving');
    // A token file of an engine this server does not run (a smaller N
    // than before): its heartbeat is answered stop.
    fs.writeFileSync(path.join(dir, 'local-7.token'), 'abc\n', { mode: 0o600 });
    const r = await fetch(`${s.url}/internal/serving/local-7/heartbeat`, {
      method: 'POST', headers: { Authorization: 'Bearer abc', 'Content-Type': 'application/json' },
      body: JSON.stringify({ host: '127.0.0.1', port: 5, stats: null }),
    });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), { stop: true });
  } finally {
    await s.stop();
  }
  const bad = spawnSync(BIN, ['serve', '--port', '0', '--data', s.data, '--executor', 'process', '--inference-pool', 'nosuch'], { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--inference-pool nosuch: no such pool/);
  const small = spawnSync(BIN, ['serve', '--port', '0', '--data', s.data, '--executor', 'process', '--slurm-pool', 'name=p,partition=p,cpus=1,mem=1G,class=on-demand,price=0.40/h,slots=1', '--inference-pool', 'p:2'], { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(small.status, 0);
  assert.match(small.stderr, /--inference-pool p: the pool has 1 slot\(s\); 2 engine\(s\) need as many/);
  for (const spec of ['p:3-1', 'p:x', 'p:0', 'p:1-17', ':2']) {
    const r = spawnSync(BIN, ['serve', '--port', '0', '--data', s.data, '--executor', 'process', '--inference-pool', spec], { encoding: 'utf8', timeout: 60000 });
    assert.notEqual(r.status, 0, spec);
    assert.match(r.stderr, /--inference-pool wants POOL, POOL:N or POOL:MIN-MAX/, spec);
  }
  const twice = spawnSync(BIN, ['serve', '--port', '0', '--data', s.data, '--executor', 'process', '--inference-pool', 'local', '--inference-pool', 'local:0-1'], { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(twice.status, 0);
  assert.match(twice.stderr, /--inference-pool local: the pool is named twice/);
  const noexec = spawnSync(BIN, ['serve', '--port', '0', '--data', s.data, '--inference-pool', 'local'], { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(noexec.status, 0);
  assert.match(noexec.stderr, /--inference-pool need --executor/);
});
