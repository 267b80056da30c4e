// service.mjs - what the benchmarks that drive a real `alallo serve` share:
// a scratch folder with a tokenizer and tiny/small models made by alallo
// itself, a server on a free port, its keys, and data sets cut from the
// sample data.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function alallo(bin, args) {
  const r = spawnSync(bin, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`alallo ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// `--store URL` of a new database `name` of the throwaway PostgreSQL in
// ALALLO_PG_DIR (bench/lib/store.sh), or [] (SQLite in the data folder).
let databases = 0;
export function storeArgs(root, name = `bench_${process.pid}_${++databases}`) {
  const dir = process.env.ALALLO_PG_DIR;
  if (!dir) return [];
  const r = spawnSync(path.join(root, 'tests/pg/pg-db.sh'), [dir, name], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tests/pg/pg-db.sh: ${r.stderr}`);
  return ['--store', r.stdout.trim()];
}

// Starts `alallo serve` with models of the given shapes (made here), the
// built-in model too when `builtin` (models/alallo-base, linked), and the
// extra arguments, on a store of its own (storeArgs); resolves once it
// answers and its keys are written.
// Returns { url, key, workerToken, sample, serve, tmp, data, models, store, stop() }.
export async function startService({ bin, root, shapes, args, prefix, builtin = false }) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  let serve = null;
  // one exit handler a service, taken off when it is stopped
  const cleanup = () => {
    if (serve) serve.kill('SIGKILL');
    fs.rmSync(tmp, { recursive: true, force: true });
  };
  process.on('exit', cleanup);
  const sample = path.join(root, 'examples/sentiment-train.jsonl');
  const tok = path.join(tmp, 'tokenizer.json');
  alallo(bin, ['tokenizer', 'train', '--input', sample, '--vocab-size', '400', '--out', tok]);
  const models = path.join(tmp, 'models');
  fs.mkdirSync(models);
  for (const shape of shapes)
    alallo(bin, ['model', 'init', '--shape', shape, '--tokenizer', tok, '--out', path.join(models, shape)]);
  if (builtin) fs.symlinkSync(path.join(root, 'models/alallo-base'), path.join(models, 'alallo-base'));
  const port = await freePort();
  const data = path.join(tmp, 'data');
  const store = storeArgs(root);
  serve = spawn(bin, ['serve', '--port', String(port), '--data', data, ...store, '--models', models, ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  serve.stderr.on('data', (d) => (log = (log + d).slice(-20000)));
  const url = `http://127.0.0.1:${port}`;
  const ready = () => ['api-key', 'worker-token'].every((f) => fs.existsSync(path.join(data, f)));
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/healthz`)).ok && ready()) break;
    } catch {}
    if (i > 200) throw new Error(`serve did not start: ${log}`);
    await sleep(100);
  }
  const read = (f) => fs.readFileSync(path.join(data, f), 'utf8').trim();
  return { url, key: read('api-key'), workerToken: read('worker-token'), sample, serve, tmp, data,
    models, store, stop: () => {
      // its folder goes when it has ended, or with this process if that is first
      const rm = () => fs.rmSync(tmp, { recursive: true, force: true });
      process.off('exit', cleanup);
      process.on('exit', rm);
      serve.once('exit', () => {
        rm();
        process.off('exit', rm);
      });
      serve.kill('SIGTERM');
    } };
}

// Uploads data sets of the first n examples of the sample, for each n;
// resolves to their file ids.
export async function uploadSamples(svc, sizes) {
  const lines = fs.readFileSync(svc.sample, 'utf8').trim().split('\n');
  const ids = [];
  for (const n of sizes) {
    const form = new FormData();
    form.append('purpose', 'fine-tune');
    form.append('file', new Blob([`${lines.slice(0, n).join('\n')}\n`]), `train-${n}.jsonl`);
    const r = await fetch(`${svc.url}/v1/files`, { method: 'POST', headers: { Authorization: `Bearer ${svc.key}` }, body: form });
    ids.push((await r.json()).id);
  }
  return ids;
}

// A caller of svc's API with its key: call(method, path, body) resolves to
// the answer's JSON.
export function apiCall(svc) {
  const H = { Authorization: `Bearer ${svc.key}` };
  return async (method, p, body) => {
    const r = await fetch(svc.url + p, { method, headers: body ? { ...H, 'Content-Type': 'application/json' } : H, body: body ? JSON.stringify(body) : undefined });
    return r.json();
  };
}

// Resolves to the workers once n are registered, each with a measured speed.
export async function measuredWorkers(call, n) {
  for (;;) {
    const w = await call('GET', '/v1/workers');
    if (w.data?.length === n && w.data.every((x) => x.speed && x.speed.flops > 0)) return w.data;
    await sleep(500);
  }
}
