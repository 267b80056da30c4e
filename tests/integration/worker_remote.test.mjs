// worker_remote.test.mjs - real `alallo worker` processes against the real
// `alallo serve --local-worker none` and the real trainer on a tiny model:
//  * a worker registers with its declaration and measured speed, runs a job
//    to the end, and its log and the job's attempts say so;
//  * kill -9 of the worker running a job (its trainer goes with it): the job
//    continues on the other worker from its latest checkpoint, is billed
//    once, and ends with the loss of an uninterrupted run;
//  * cancel while running stops the trainer (SIGTERM, exit 4);
//  * the server killed and restarted: the worker keeps serving, no restart.
//
// Environment: ALALLO_BIN (the binary), ALALLO_ROOT (the source tree).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { storeArgs } from './service_harness.mjs';
import { assertBilledOnce } from '../fault/fault_harness.mjs';

const BIN = process.env.ALALLO_BIN || path.resolve('build/alallo');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-worker-it-'));
const children = new Set();
after(() => {
  for (const c of children) c.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Waits until fn() is truthy and returns it; fails naming `what`.
async function until(what, fn, timeoutMs = 60000, everyMs = 250) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await sleep(everyMs);
  }
}

// A process whose output is kept (bounded) for failure messages.
function start(args, name) {
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(proc);
  const p = { proc, name, out: '', exited: null };
  const keep = (b) => {
    p.out += b.toString();
    if (p.out.length > 100000) p.out = p.out.slice(-50000);
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  proc.on('exit', (code, sig) => {
    p.exited = code ?? sig;
    children.delete(proc);
  });
  return p;
}

async function stop(p, sig = 'SIGTERM') {
  if (p.exited !== null) return;
  p.proc.kill(sig);
  for (let i = 0; i < 300 && p.exited === null; i++) await sleep(100);
  if (p.exited === null) p.proc.kill('SIGKILL');
}

// A tiny base model made by alallo itself: a tokenizer trained on a small
// text, and a randomly initialised `tiny` model. Nothing is downloaded.
function makeModels() {
  const dir = path.join(tmp, 'models');
  if (fs.existsSync(path.join(dir, 'alallo-tiny', 'config.json'))) return dir;
  fs.mkdirSync(dir, { recursive: true });
  const words = 'the service was good bad fine great awful on day review sentiment positive negative'.split(' ');
  const lines = [];
  for (let i = 0; i < 600; i++) lines.push(Array.from({ length: 12 }, (_, k) => words[(i * 7 + k * 3) % words.length]).join(' '));
  const text = path.join(tmp, 'corpus.txt');
  fs.writeFileSync(text, `${lines.join('\n')}\n`);
  const tok = path.join(tmp, 'tokenizer.json');
  execFileSync(BIN, ['tokenizer', 'train', '--input', text, '--vocab-size', '300', '--out', tok]);
  execFileSync(BIN, ['model', 'init', '--shape', 'tiny', '--tokenizer', tok, '--out', path.join(dir, 'alallo-tiny'), '--seed', '1']);
  return dir;
}

function dataset(n) {
  const words = ['good', 'fine', 'poor', 'bad', 'great', 'awful'];
  const out = [];
  for (let i = 0; i < n; i++) {
    const w = words[i % words.length];
    const label = ['good', 'fine', 'great'].includes(w) ? 'positive' : 'negative';
    out.push(JSON.stringify({ prompt: `Review: the service was ${w} on day ${i}.\nSentiment:`, completion: ` ${label}` }));
  }
  return `${out.join('\n')}\n`;
}

async function startServe(extra = [], reuse = null) {
  const dir = reuse?.dir ?? fs.mkdtempSync(path.join(tmp, 'data-'));
  const port = reuse?.port ?? (await freePort());
  const models = makeModels();
  const p = start(['serve', '--port', String(port), '--data', dir, ...storeArgs(dir), '--models', models, '--local-worker', 'none', '--worker-timeout', '4', ...extra], 'serve');
  const base = `http://127.0.0.1:${port}`;
  await until(`serve on ${base} (output: ${p.out})`, async () => {
    if (p.exited !== null) throw new Error(`serve exited with ${p.exited}: ${p.out}`);
    const r = await fetch(`${base}/healthz`);
    return r.ok && fs.existsSync(path.join(dir, 'api-key')) && fs.existsSync(path.join(dir, 'worker-token'));
  });
  const key = fs.readFileSync(path.join(dir, 'api-key'), 'utf8').trim();
  return { p, dir, port, base, key };
}

// The server as the fault harness's helpers call it (s.call, s.key).
function apiClient(srv) {
  return {
    key: srv.key,
    call: async (method, p, { key = srv.key } = {}) => {
      const r = await fetch(`${srv.base}${p}`, { method, headers: { Authorization: `Bearer ${key}` } });
      const text = await r.text();
      let json = null;
      try {
        json = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      return { status: r.status, text, json };
    },
  };
}

function startWorker(srv, name, extra = []) {
  const workDir = path.join(tmp, `work-${name}-${Date.now()}`);
  const p = start(['worker', '--server', srv.base, '--token', `@${path.join(srv.dir, 'worker-token')}`, '--name', name, '--cpus', '1', '--mem', '2G', '--work-dir', workDir, '--bench-timeout', '60', ...extra], `worker ${name}`);
  p.workDir = workDir;
  return p;
}

async function api(srv, method, p, body) {
  const headers = { Authorization: `Bearer ${srv.key}` };
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  const r = await fetch(`${srv.base}${p}`, { method, headers, body: payload });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${text}`);
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

async function upload(srv, name, text) {
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', new Blob([text], { type: 'application/jsonl' }), name);
  return api(srv, 'POST', '/v1/files', form);
}

async function worker(srv, name) {
  const list = await api(srv, 'GET', '/v1/workers');
  return list.data.find((w) => w.name === name);
}

async function waitJob(srv, id, pred, what, timeoutMs = 240000) {
  return until(`job ${id} ${what}`, async () => {
    const j = await api(srv, 'GET', `/v1/fine_tuning/jobs/${id}`);
    if (['failed', 'cancelled'].includes(j.status) && !pred(j)) throw new Error(`job ended ${j.status}: ${j.message}`);
    return pred(j) ? j : null;
  }, timeoutMs, 300);
}

// Process ids of `alallo train` children whose config is under `dir`.
function trainersUnder(dir) {
  const pids = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      if (state !== 'Z' && cmd[1] === 'train' && cmd.some((a) => a.startsWith(dir))) pids.push(Number(pid));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

function finalLoss(log) {
  const m = /training finished: \d+ steps, final loss ([0-9.]+)/.exec(log);
  return m ? m[1] : null;
}

test('a remote worker registers with its measured speed and runs a job to the end', { timeout: 300000 }, async () => {
  const srv = await startServe();
  const w = startWorker(srv, 'w1', ['--price', '0.40', '--class', 'spot']);
  try {
    const decl = await until('w1 to register', async () => {
      if (w.exited !== null) throw new Error(`worker exited ${w.exited}: ${w.out}`);
      return worker(srv, 'w1');
    }, 120000);
    assert.equal(decl.class, 'spot');
    assert.equal(decl.resources.cpus, 1);
    assert.equal(decl.resources.mem_bytes, 2 * 1024 ** 3);
    assert.equal(decl.resources.accelerator, 'cpu');
    assert.equal(decl.price_per_hour, 0.4);
    assert.ok(decl.speed && decl.speed.tokens_per_s > 0, `the worker measured its speed: ${JSON.stringify(decl.speed)}`);
    // and the second point, on the small shape (docs/worker.md, Speed)
    assert.ok(decl.speed.small?.flops > 0 && decl.speed.small.params < decl.speed.params, JSON.stringify(decl.speed));

    const file = await upload(srv, 'train.jsonl', dataset(32));
    const job = await api(srv, 'POST', '/v1/fine_tuning/jobs', { model: 'alallo-tiny', training_file: file.id, hyperparameters: { n_epochs: 1, batch_size: 4 }, seed: 3 });
    const done = await waitJob(srv, job.id, (j) => j.status === 'succeeded', 'to succeed');
    assert.equal(done.progress.percent, 100);
    assert.ok(done.attempts.length >= 1);
    assert.equal(done.attempts.at(-1).worker, 'w1');
    const log = await (await fetch(`${srv.base}/v1/fine_tuning/jobs/${job.id}/log`, { headers: { Authorization: `Bearer ${srv.key}` } })).text();
    assert.match(log, /training finished/);

    // The job succeeds on the trainer's `done` event; the worker logs the
    // trainer's exit a moment later.
    let wlog = '';
    for (let i = 0; i < 100; i++) {
      wlog = fs.readFileSync(path.join(w.workDir, 'worker.log'), 'utf8');
      if (/trainer exited/.test(wlog)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.match(wlog, /registered with/);
    assert.match(wlog, new RegExp(`attempt \\S+ of job ${job.id} claimed`));
    assert.match(wlog, /trainer exited with 0/);
    const attempts = fs.readdirSync(path.join(w.workDir, 'attempts'));
    const conf = JSON.parse(fs.readFileSync(path.join(w.workDir, 'attempts', attempts[0], 'ATTEMPT.json'), 'utf8'));
    assert.equal(conf.threads, 1);
  } finally {
    await stop(w);
    await stop(srv.p);
  }
});

test('kill -9 of a worker mid-training: the job continues on another worker, billed once, same loss', { timeout: 600000 }, async () => {
  const srv = await startServe();
  // Priced so that the amounts are cents: the reference is a new
  // service's first job of a shape nothing is learnt for yet, so its cap
  // may be a few seconds' worth, which at $0.40/h rounds to $0.0000.
  const w1 = startWorker(srv, 'w1', ['--price', '40']);
  const w2 = startWorker(srv, 'w2', ['--price', '40']);
  try {
    await until('both workers to register', async () => (await worker(srv, 'w1')) && (await worker(srv, 'w2')), 120000);
    // Long enough (2,000 steps, tens of seconds) to kill a worker mid-way.
    const file = await upload(srv, 'train.jsonl', dataset(200));
    const body = { model: 'alallo-tiny', training_file: file.id, hyperparameters: { n_epochs: 20, batch_size: 2 }, seed: 11 };

    // The reference: the same job, uninterrupted.
    const ref = await api(srv, 'POST', '/v1/fine_tuning/jobs', body);
    const refDone = await waitJob(srv, ref.id, (j) => j.status === 'succeeded', 'to succeed (reference)');
    const refLog = await (await fetch(`${srv.base}/v1/fine_tuning/jobs/${ref.id}/log`, { headers: { Authorization: `Bearer ${srv.key}` } })).text();
    assert.ok(finalLoss(refLog), `reference log has a final loss:\n${refLog}`);

    const job = await api(srv, 'POST', '/v1/fine_tuning/jobs', body);
    // Wait for a checkpoint, so that the move continues from it.
    await waitJob(srv, job.id, (j) => j.status === 'running', 'to run');
    await until('a checkpoint', async () => (await api(srv, 'GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints`)).data.length > 0, 240000, 100);
    const j1 = await api(srv, 'GET', `/v1/fine_tuning/jobs/${job.id}`);
    const victimName = j1.attempts.at(-1).worker;
    const victim = victimName === 'w1' ? w1 : w2;
    const survivor = victimName === 'w1' ? 'w2' : 'w1';
    if (j1.status !== 'running') assert.fail(`the job was ${j1.status} before the worker could be killed: make it longer`);

    victim.proc.kill('SIGKILL');
    // Its trainer goes with it.
    await until('the killed worker\'s trainer to exit', () => trainersUnder(victim.workDir).length === 0, 10000, 100);

    const done = await waitJob(srv, job.id, (j) => j.status === 'succeeded', 'to succeed after the move', 300000);
    const workers = done.attempts.map((a) => a.worker);
    assert.ok(workers.includes(victimName) && workers.at(-1) === survivor, `attempts ran on ${workers}`);
    const lost = done.attempts.find((a) => a.worker === victimName);
    assert.match(lost.reason || '', /lost/);
    assert.ok(done.attempts.at(-1).start_step > 0, 'continued from a checkpoint, not from the start');

    // Billed once, by steps (a price compared with the reference's would
    // follow the machine's load, since steps are billed by their time):
    // the charge rows cover steps 1..max_steps once, net of the lost-work
    // refund of the steps the lost worker ran after its last checkpoint,
    // and the net is never above the estimate.
    const net = (j) => j.price.charged - j.price.refunded;
    assert.ok(net(refDone) > 0, 'the reference was charged');
    await assertBilledOnce(assert, apiClient(srv), done);

    const log = await (await fetch(`${srv.base}/v1/fine_tuning/jobs/${job.id}/log`, { headers: { Authorization: `Bearer ${srv.key}` } })).text();
    assert.equal(finalLoss(log), finalLoss(refLog), 'the moved job ends with the loss of the uninterrupted one');
  } finally {
    await stop(w1);
    await stop(w2);
    await stop(srv.p);
  }
});

test('cancel while running stops the trainer and the job ends cancelled', { timeout: 300000 }, async () => {
  const srv = await startServe();
  const w = startWorker(srv, 'w1');
  try {
    await until('w1 to register', () => worker(srv, 'w1'), 120000);
    const file = await upload(srv, 'train.jsonl', dataset(200));
    const job = await api(srv, 'POST', '/v1/fine_tuning/jobs', { model: 'alallo-tiny', training_file: file.id, hyperparameters: { n_epochs: 20, batch_size: 2 } });
    await waitJob(srv, job.id, (j) => j.status === 'running' && j.progress.steps_done > 0, 'to make progress');
    await api(srv, 'POST', `/v1/fine_tuning/jobs/${job.id}/cancel`);
    const done = await waitJob(srv, job.id, (j) => j.status === 'cancelled', 'to be cancelled', 60000);
    assert.equal(done.status, 'cancelled');
    await until('the trainer to exit', () => trainersUnder(w.workDir).length === 0, 10000, 100);
    const wlog = fs.readFileSync(path.join(w.workDir, 'worker.log'), 'utf8');
    assert.match(wlog, /stopping the trainer \(cancel\)/);
    assert.match(wlog, /trainer exited with 4/);
  } finally {
    await stop(w);
    await stop(srv.p);
  }
});

test('a worker rides out a restart of the server', { timeout: 300000 }, async () => {
  let srv = await startServe();
  const w = startWorker(srv, 'w1', ['--bench-timeout', '0']);
  try {
    await until('w1 to register', () => worker(srv, 'w1'), 60000);
    srv.p.proc.kill('SIGKILL');
    await until('serve to exit', () => srv.p.exited !== null, 10000, 50);
    await sleep(3000); // the worker meets a closed port for a while
    assert.equal(w.exited, null, 'the worker keeps running without its server');
    srv = await startServe([], srv);
    await until('w1 active again', async () => (await worker(srv, 'w1'))?.state === 'active', 60000);
    const file = await upload(srv, 'train.jsonl', dataset(16));
    const job = await api(srv, 'POST', '/v1/fine_tuning/jobs', { model: 'alallo-tiny', training_file: file.id, hyperparameters: { n_epochs: 1, batch_size: 4 } });
    const done = await waitJob(srv, job.id, (j) => j.status === 'succeeded', 'to succeed on the same worker');
    assert.equal(done.attempts.at(-1).worker, 'w1');
  } finally {
    await stop(w);
    await stop(srv.p);
  }
});

test('alallo worker refuses bad options and a wrong token', { timeout: 120000 }, async () => {
  const bad = (args) => {
    try {
      execFileSync(BIN, ['worker', ...args], { stdio: 'pipe' });
      return { status: 0, err: '' };
    } catch (e) {
      return { status: e.status, err: e.stderr.toString() };
    }
  };
  let r = bad(['--server', 'http://127.0.0.1:1', '--token', 't', '--class', 'reserved']);
  assert.equal(r.status, 2);
  assert.match(r.err, /on-demand or spot/);
  r = bad(['--server', 'http://127.0.0.1:1', '--token', 't', '--mem', 'lots']);
  assert.equal(r.status, 2);
  r = bad(['--token', 't']);
  assert.equal(r.status, 2);
  assert.match(r.err, /--server and --token are required/);

  const srv = await startServe();
  try {
    const w = start(['worker', '--server', srv.base, '--token', 'not-the-token', '--name', 'x', '--bench-timeout', '0', '--work-dir', path.join(tmp, 'bad-token')], 'worker x');
    await until('the worker to give up', () => w.exited !== null, 60000, 100);
    assert.equal(w.exited, 1);
    assert.match(w.out, /could not register/);
  } finally {
    await stop(srv.p);
  }
});
