// service_harness.mjs - starts the real `alallo serve` on 127.0.0.1 with a
// free port and a temporary data folder, for the service and SDK tests.
// Not a test itself (the runner picks up *.test.mjs only).
//
// The store: SQLite in the data folder, or, with ALALLO_TEST_STORE=postgresql,
// a fresh database of the throwaway PostgreSQL in ALALLO_PG_DIR (started by
// scripts/integration.sh with tests/pg/pg-up.sh) for each data folder:
// every serve started on one data folder (a restart, a standby) shares its
// database, as they share its SQLite file.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const BIN = process.env.ALALLO_BIN || path.resolve('build/alallo');
export const ROOT = process.env.ALALLO_ROOT || path.resolve('.');
export const SAMPLE = path.join(ROOT, 'examples/sentiment-train.jsonl');

// Temporary folders made here are removed when the test process exits.
const made = [];
process.on('exit', () => {
  for (const d of made) fs.rmSync(d, { recursive: true, force: true });
});

export function tmpdir(prefix = 'alallo-it-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(d);
  return d;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const STORE = process.env.ALALLO_TEST_STORE || 'sqlite';
if (!['sqlite', 'postgresql'].includes(STORE)) throw new Error(`ALALLO_TEST_STORE=${STORE}: sqlite or postgresql`);
const databases = new Map(); // data folder -> its database's URL
let databaseCount = 0;

// The `--store URL` arguments of data folder `data` for serve and
// `accounts` ([] on SQLite): a new database of the throwaway cluster the
// first time a folder is named, the same one afterwards.
export function storeArgs(data) {
  if (STORE !== 'postgresql') return [];
  const key = path.resolve(data);
  if (!databases.has(key)) {
    const dir = process.env.ALALLO_PG_DIR;
    if (!dir) throw new Error('ALALLO_TEST_STORE=postgresql needs ALALLO_PG_DIR, a cluster of tests/pg/pg-up.sh');
    const name = `it_${process.pid}_${++databaseCount}`;
    const r = spawnSync(path.join(ROOT, 'tests/pg/pg-db.sh'), [dir, name], { encoding: 'utf8', timeout: 60000 });
    if (r.status !== 0) throw new Error(`tests/pg/pg-db.sh ${dir} ${name} exited ${r.status}: ${r.stderr}`);
    databases.set(key, r.stdout.trim());
  }
  return ['--store', databases.get(key)];
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A request that meets a connection serve has just closed is sent once
// more, as HTTP clients do (RFC 9112, 9.3.1). Serve closes a kept-alive
// connection after 15 s without a request (--header-timeout; its
// Keep-Alive header hints 10 s, and node's fetch lets a connection go 2 s
// before the hint). These tests freeze their own process while the binary
// runs (spawnSync, as run() below does), and node's keep-alive timer with
// it: the first request after a run over 15 s reused the connection serve
// had closed and failed with "fetch failed" (other side closed), on
// whichever request came after a slow run (docs/testing.md, "Hunting
// flaky tests"). Serve never reads a request from a connection it closed
// for waiting (api/conn_guard.h), so the request was not served and
// sending it again is safe. Only a connection closed under the request,
// to a serve of this harness that is still running, is retried; a serve
// that died fails the request as before. Each retry is written to stderr.
const liveServes = new Set();
// A serve still running when the test process ends (a failed test whose
// after() did not stop it) is ended with it, so that no serve, nor the
// workers and engine it started, outlives the test file.
process.on('exit', () => {
  for (const s of liveServes) s.proc.kill('SIGKILL');
});
const fetchOnce = globalThis.fetch;
const CLOSED = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

async function serveStillRunning(input) {
  let origin;
  try {
    origin = new URL(input instanceof Request ? input.url : String(input)).origin;
  } catch {
    return false;
  }
  await sleep(200); // a serve that died under the request is seen as dead
  for (const s of liveServes) {
    if (s.url === origin && s.proc.exitCode === null && s.proc.signalCode === null) return true;
  }
  return false;
}

globalThis.fetch = async function fetchRetryingClosed(input, init) {
  try {
    return await fetchOnce(input, init);
  } catch (e) {
    if (!CLOSED.has(e?.cause?.code) || !(await serveStillRunning(input))) throw e;
    const what = `${init?.method || 'GET'} ${input instanceof Request ? input.url : input}`;
    process.stderr.write(`service_harness: ${what}: the connection closed (${e.cause.message}); sent again\n`);
    return fetchOnce(input, init);
  }
};

// Polls fn until it returns a truthy value; fails after timeoutMs with the
// last value seen, so a stuck job says where it stuck.
// The billing ledger's rows of one job, every page.
export async function ledgerOf(s, jobId) {
  const rows = [];
  let after = '';
  for (;;) {
    const r = await s.call('GET', `/v1/billing/ledger?limit=100${after}`);
    rows.push(...r.json.data.filter((x) => x.job === jobId));
    if (!r.json.has_more) return rows;
    after = `&after=${r.json.data.at(-1).id}`;
  }
}

// The data events of a streamed answer (server-sent events), parsed
// ([DONE] left out).
export function sseEvents(text) {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: ') && e !== 'data: [DONE]')
    .map((e) => JSON.parse(e.slice(6)));
}

export async function waitFor(fn, { timeoutMs = 60000, everyMs = 200, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)?.slice(0, 2000)}`);
}

// Runs the binary to completion; throws with its output when it fails.
export function run(args, opts = {}) {
  const r = spawnSync(BIN, args, { encoding: 'utf8', timeout: 120000, ...opts });
  if (r.status !== 0) {
    throw new Error(`alallo ${args.join(' ')} exited ${r.status} ${r.signal || ''}\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}

// Starts a real `alallo worker` named name against serve s (one CPU, a
// price of 0.40 an hour, mem as it declares), in a work folder of its own;
// its output is kept in .out. The caller stops it.
export function startWorker(s, name, { mem = '2G' } = {}) {
  const p = spawn(BIN, ['worker', '--server', s.url, '--token', `@${path.join(s.data, 'worker-token')}`, '--name', name,
    '--cpus', '1', '--mem', mem, '--price', '0.40', '--work-dir', tmpdir(`alallo-w-${name}-`), '--bench-timeout', '60'],
  { stdio: ['ignore', 'pipe', 'pipe'] });
  p.out = '';
  p.stdout.on('data', (d) => (p.out += d));
  p.stderr.on('data', (d) => (p.out += d));
  return p;
}

// A tiny base model in a models folder: a tokenizer learned from the sample
// data and a randomly initialised Llama of the `tiny` shape.
let tinyModels = null;
export function tinyModelsDir() {
  if (tinyModels) return tinyModels;
  const dir = tmpdir('alallo-models-');
  const tok = path.join(dir, 'tokenizer.json');
  run(['tokenizer', 'train', '--input', SAMPLE, '--vocab-size', '400', '--out', tok]);
  fs.mkdirSync(path.join(dir, 'models'));
  run(['model', 'init', '--shape', 'tiny', '--tokenizer', tok, '--out', path.join(dir, 'models', 'tiny')]);
  tinyModels = path.join(dir, 'models');
  return tinyModels;
}

export class Serve {
  // detached: serve leads a process group of its own (as at a terminal,
  // where Ctrl-C signals the whole group), for tests that signal the group.
  constructor({ data, port, args = [], detached = false }) {
    this.data = data;
    this.port = port;
    this.args = args;
    this.detached = detached;
    this.url = `http://127.0.0.1:${port}`;
    this.output = '';
  }

  static async start({ data = tmpdir(), args = [], port, detached = false } = {}) {
    const s = new Serve({ data, port: port || (await freePort()), args, detached });
    await s.spawn();
    return s;
  }

  async spawn() {
    const from = this.output.length; // a restart's output follows the run before
    this.proc = spawn(BIN, ['serve', '--port', String(this.port), '--data', this.data, ...storeArgs(this.data), ...this.args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: this.detached,
    });
    this.proc.stdout.on('data', (d) => (this.output += d));
    this.proc.stderr.on('data', (d) => (this.output += d));
    liveServes.add(this);
    this.exited = new Promise((resolve) =>
      this.proc.on('exit', (code, signal) => {
        liveServes.delete(this);
        resolve({ code, signal });
      }),
    );
    await waitFor(
      async () => {
        if (this.proc.exitCode !== null) throw new Error(`serve exited:\n${this.output}`);
        try {
          const r = await fetch(`${this.url}/healthz`);
          await r.arrayBuffer(); // an unread body keeps its connection from the pool
          return r.ok;
        } catch {
          return false;
        }
      },
      { timeoutMs: 20000, what: 'serve to answer /healthz' },
    );
    // /healthz answers as soon as serve listens; its executor (the engine
    // and its pools) is attached and its leadership decided a moment later,
    // when it prints where it serves: under load that moment came after a
    // test's first look at /v1/workers (engine '' for 'process')
    await waitFor(() => {
      if (this.proc.exitCode !== null) throw new Error(`serve exited:\n${this.output}`);
      return /^alallo: serving on /m.test(this.output.slice(from));
    }, { timeoutMs: 20000, what: 'serve to say where it serves' });
    this.key = fs.readFileSync(path.join(this.data, 'api-key'), 'utf8').trim();
    this.token = fs.readFileSync(path.join(this.data, 'worker-token'), 'utf8').trim();
  }

  async stop(signal = 'SIGTERM') {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode) return;
    this.proc.kill(signal);
    let timer;
    const limit = new Promise((resolve) => (timer = setTimeout(resolve, 60000)));
    await Promise.race([this.exited, limit]);
    clearTimeout(timer);
  }

  // A new account; returns its key (the last line `accounts create` prints).
  account(name) {
    const out = run(['accounts', 'create', name, '--data', this.data, ...storeArgs(this.data)]);
    return out.trim().split('\n').pop();
  }

  async call(method, p, { key = this.key, body, raw, headers = {} } = {}) {
    const h = { ...headers };
    if (key) h.Authorization = `Bearer ${key}`;
    let payload = raw;
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      payload = typeof body === 'string' ? body : JSON.stringify(body);
    }
    const res = await fetch(this.url + p, { method, headers: h, body: payload });
    const text = await res.text();
    let json = null;
    if ((res.headers.get('content-type') || '').startsWith('application/json') && text) json = JSON.parse(text);
    return { status: res.status, json, text, headers: res.headers };
  }

  async upload(name, content, { key = this.key, purpose = 'fine-tune' } = {}) {
    const form = new FormData();
    form.append('purpose', purpose);
    form.append('file', new Blob([content]), name);
    const res = await fetch(`${this.url}/v1/files`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}` },
      body: form,
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  }

  async createJob(body, key = this.key) {
    return this.call('POST', '/v1/fine_tuning/jobs', { key, body });
  }

  async job(id, key = this.key) {
    return (await this.call('GET', `/v1/fine_tuning/jobs/${id}`, { key })).json;
  }

  async waitStatus(id, statuses, { key = this.key, timeoutMs = 120000 } = {}) {
    const want = Array.isArray(statuses) ? statuses : [statuses];
    return waitFor(
      async () => {
        const j = await this.job(id, key);
        return want.includes(j.status) ? j : false;
      },
      { timeoutMs, what: `job ${id} to be ${want.join('|')}` },
    );
  }
}
