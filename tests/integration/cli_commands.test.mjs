// cli_commands.test.mjs - the command-line client against the real
// `alallo serve` (one local worker, the real trainer on a tiny model), as a
// user runs it with ALALLO_URL and ALALLO_API_KEY: upload (and a bad line in
// the server's words), estimate, create, list, show, log --follow, models,
// workers, ledger, generate and export of the fine-tuned model, cancel, and
// the exit statuses (0, 1 with the server's message, 2 on usage errors).
//
// Environment: ALALLO_BIN (the binary), ALALLO_ROOT (the source tree).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.ALALLO_BIN || path.resolve('build/alallo');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-cli-it-'));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let serve = null;
let base = '';
let key = '';
let out = '';

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

// Runs `alallo ARGS` as a user would; returns { status, stdout, stderr }.
function alallo(args, env = {}) {
  const r = spawnSync(BIN, args, {
    cwd: tmp,
    env: { ...process.env, ALALLO_URL: base, ALALLO_API_KEY: key, ...env },
    timeout: 240000,
    maxBuffer: 1 << 26,
  });
  return { status: r.status, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

function ok(args) {
  const r = alallo(args);
  assert.equal(r.status, 0, `alallo ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

function makeModels() {
  const dir = path.join(tmp, 'models');
  fs.mkdirSync(dir, { recursive: true });
  const words = 'the service was good bad fine great awful on day review sentiment positive negative'.split(' ');
  const lines = [];
  for (let i = 0; i < 600; i++) lines.push(Array.from({ length: 12 }, (_, k) => words[(i * 5 + k * 3) % words.length]).join(' '));
  const text = path.join(tmp, 'corpus.txt');
  fs.writeFileSync(text, `${lines.join('\n')}\n`);
  const tok = path.join(tmp, 'tokenizer.json');
  execFileSync(BIN, ['tokenizer', 'train', '--input', text, '--vocab-size', '300', '--out', tok]);
  execFileSync(BIN, ['model', 'init', '--shape', 'tiny', '--tokenizer', tok, '--out', path.join(dir, 'alallo-tiny'), '--seed', '1']);
  return dir;
}

function dataset(n) {
  const words = ['good', 'fine', 'poor', 'bad', 'great', 'awful'];
  const lines = [];
  for (let i = 0; i < n; i++) {
    const w = words[i % words.length];
    const label = ['good', 'fine', 'great'].includes(w) ? 'positive' : 'negative';
    lines.push(JSON.stringify({ prompt: `Review: the service was ${w} on day ${i}.\nSentiment:`, completion: ` ${label}` }));
  }
  return `${lines.join('\n')}\n`;
}

async function job(id) {
  const r = await fetch(`${base}/v1/fine_tuning/jobs/${id}`, { headers: { Authorization: `Bearer ${key}` } });
  return r.json();
}

before(async () => {
  const models = makeModels();
  const data = path.join(tmp, 'data');
  const port = await freePort();
  serve = spawn(BIN, ['serve', '--port', String(port), '--data', data, '--models', models, '--local-worker', 'name=local,cpus=1,mem=2G,price=40'], { stdio: ['ignore', 'pipe', 'pipe'] });
  serve.stdout.on('data', (b) => { out += b; });
  serve.stderr.on('data', (b) => { out += b; });
  base = `http://127.0.0.1:${port}`;
  await until(`serve to answer (output: ${out})`, async () => {
    if (serve.exitCode !== null) throw new Error(`serve exited: ${out}`);
    const r = await fetch(`${base}/healthz`);
    return r.ok && fs.existsSync(path.join(data, 'api-key'));
  });
  key = fs.readFileSync(path.join(data, 'api-key'), 'utf8').trim();
  fs.writeFileSync(path.join(tmp, 'train.jsonl'), dataset(24));
  // Long enough (24,000 steps at 50 epochs) that a job still runs when the
  // test cancels it: 24 examples took the tiny model a few seconds.
  fs.writeFileSync(path.join(tmp, 'long.jsonl'), dataset(480));
  fs.writeFileSync(path.join(tmp, 'bad.jsonl'), '{"prompt":"a","completion":"b"}\n{"prompt":"c","completion":"d"}\n{"prompt":"e"}\n');
});

after(async () => {
  if (serve && serve.exitCode === null) {
    serve.kill('SIGTERM');
    for (let i = 0; i < 100 && serve.exitCode === null; i++) await sleep(100);
    if (serve.exitCode === null) serve.kill('SIGKILL');
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('files upload prints the id; a bad line is refused in the server\'s words', () => {
  const id = ok(['files', 'upload', 'train.jsonl']).trim();
  assert.match(id, /^file-\S+$/);
  assert.match(ok(['files']), new RegExp(`${id}\\s+train\\.jsonl`));
  const bad = alallo(['files', 'upload', 'bad.jsonl']);
  assert.equal(bad.status, 1);
  assert.equal(bad.stderr, 'alallo: line 3 of bad.jsonl: missing field "completion"\n');
});

test('models and workers list the catalog and the capacity', async () => {
  assert.match(ok(['models']), /^alallo-tiny\s+base\s/m);
  await until('the local worker to register', () => /^local\s+active\s/m.test(ok(['workers'])), 120000);
  const w = JSON.parse(ok(['workers', '--json']));
  assert.equal(w.data.find((x) => x.name === 'local').price_per_hour, 40);
});

test('estimate prints a time range in the help page\'s words and a price range', () => {
  const text = ok(['estimate', '--model', 'alallo-tiny', '--upload', 'train.jsonl']);
  // "N min", "N min to M min", "N min to X.Y h" or "X.Y h to Z.W h".
  assert.match(text, /^Time: +((under )?\d+ min|\d+\.\d h)( to (\d+ min|\d+\.\d h))?$/m);
  assert.match(text, /^Price: +\$\d/m);
  const raw = JSON.parse(ok(['estimate', '--model', 'alallo-tiny', '--upload', 'train.jsonl', '--json']));
  assert.ok(raw.time.high_s >= raw.time.low_s);
});

test('a job from create to a model: list, show, log --follow, generate, export', async () => {
  const id = ok(['jobs', 'create', '--model', 'alallo-tiny', '--upload', 'train.jsonl', '--name', 'cli-demo', '--epochs', '20', '--batch-size', '2', '--seed', '5']).trim();
  assert.match(id, /^ftjob-\S+$/);
  const list = ok(['jobs']);
  assert.match(list.split('\n')[0], /^ID\s+NAME\s+METHOD\s+STATUS\s+PROGRESS\s+TIME LEFT\s+PRICE$/);
  assert.match(list, new RegExp(`^${id}\\s+cli-demo\\s+Supervised fine-tuning(, (16|4)-bit)?\\s+(queued|running|succeeded)\\s+\\[[#-]{20}\\]\\s+\\d+%`, 'm'));

  // Follows the log until the run ends.
  const log = ok(['jobs', 'log', id, '--follow']);
  assert.match(log, /training finished/);
  const done = await until('the job to succeed', async () => {
    const j = await job(id);
    return j.status === 'succeeded' ? j : null;
  }, 60000);

  const show = ok(['jobs', 'show', id]);
  assert.match(show, /^Status: +succeeded$/m);
  assert.match(show, /^Progress: +\[#{20}\] 100%/m);
  assert.match(show, /^Time left \(estimate\): +-$/m);
  assert.match(show, /^Fine-tuned model: +\S+/m);
  assert.match(show, /^Attempts:$/m);
  assert.match(show, /local/);

  // A high hourly price (40) so that even this short job costs something.
  assert.ok(done.price.charged > 0, `charged ${done.price.charged}`);
  assert.match(ok(['ledger']), new RegExp(`${id}\\s+charge\\s+\\$`));

  const model = done.fine_tuned_model;
  assert.ok(model, 'a fine-tuned model');
  const gen = alallo(['generate', '--model', model, '--prompt', 'Review: the service was good.\nSentiment:', '--max-tokens', '4', '--temperature', '0']);
  assert.equal(gen.status, 0, gen.stderr);
  const again = alallo(['generate', '--model', model, '--prompt', 'Review: the service was good.\nSentiment:', '--max-tokens', '4', '--temperature', '0']);
  assert.equal(again.stdout, gen.stdout, 'temperature 0 is greedy: the same text twice');

  // The job's id stands for its fine-tuned model.
  const byJob = alallo(['generate', '--model', id, '--prompt', 'Review: the service was good.\nSentiment:', '--max-tokens', '4', '--temperature', '0']);
  assert.equal(byJob.status, 0, byJob.stderr);
  assert.equal(byJob.stdout, gen.stdout, 'the job id and the model name give the same text');
  // --top-p 0 keeps the most likely token alone: the greedy text at any
  // temperature; --stop ends the text before it
  const prompt = ['--model', model, '--prompt', 'Review: the service was good.\nSentiment:', '--max-tokens', '4'];
  const nucleus = alallo(['generate', ...prompt, '--temperature', '1', '--top-p', '0']);
  assert.equal(nucleus.status, 0, nucleus.stderr);
  assert.equal(nucleus.stdout, gen.stdout);
  const text = gen.stdout.replace(/\n$/, '');
  const tail = text.slice(1) || 'never';
  const stopped = alallo(['generate', ...prompt, '--temperature', '0', '--stop', tail]);
  assert.equal(stopped.status, 0, stopped.stderr);
  assert.equal(stopped.stdout, `${text.includes(tail) ? text.slice(0, text.indexOf(tail)) : text}\n`);
  const wide = alallo(['generate', ...prompt, '--top-p', '2']);
  assert.notEqual(wide.status, 0);
  assert.match(wide.stderr, /--top-p must be from 0 to 1/);

  const gguf = path.join(tmp, 'model.gguf');
  ok(['export', model, '--format', 'gguf', '--out', gguf]);
  assert.equal(fs.readFileSync(gguf).subarray(0, 4).toString(), 'GGUF');
  assert.ok(!fs.existsSync(`${gguf}.part`));
  // Quantized, with an Ollama Modelfile beside it (a folder, sent as a tar).
  const ollama = path.join(tmp, 'ollama');
  ok(['export', model, '--format', 'ollama', '--dtype', 'q8_0', '--out', ollama]);
  assert.deepEqual(fs.readdirSync(ollama).sort(), ['Modelfile', 'model.gguf']);
  assert.match(fs.readFileSync(path.join(ollama, 'Modelfile'), 'utf8'), /^FROM \.\/model\.gguf$/m);
  const q8 = fs.readFileSync(path.join(ollama, 'model.gguf'));
  assert.equal(q8.subarray(0, 4).toString(), 'GGUF');
  assert.ok(q8.length < fs.statSync(gguf).size, 'q8_0 is smaller than f16');
});

test('cancel, errors in the server\'s words, usage errors', async () => {
  // The one local worker is busy with a long job, so the second one is
  // still queued when it is cancelled: it never ran and has no model.
  const busy = ok(['jobs', 'create', '--model', 'alallo-tiny', '--upload', 'long.jsonl', '--epochs', '50', '--batch-size', '1']).trim();
  await until('the first job to run', async () => (await job(busy)).status === 'running', 60000);
  const id = ok(['jobs', 'create', '--model', 'alallo-tiny', '--upload', 'train.jsonl', '--epochs', '50', '--batch-size', '1']).trim();
  const c = ok(['jobs', 'cancel', id]);
  assert.match(c, new RegExp(`^${id}: (cancelling|cancelled)$`, 'm'));
  await until('the job to be cancelled', async () => (await job(id)).status === 'cancelled', 60000);
  ok(['jobs', 'cancel', busy]);
  await until('the first job to be cancelled', async () => (await job(busy)).status === 'cancelled', 60000);
  // A job without a model says why.
  const noModel = alallo(['generate', '--model', id, '--prompt', 'hi']);
  assert.equal(noModel.status, 1);
  assert.equal(noModel.stderr, `alallo: ${id}: the job was cancelled: it has no model\n`);

  // --file takes a path; a JSON array is named as the wrong format.
  const arr = path.join(tmp, 'array.json');
  fs.writeFileSync(arr, '[\n  {"prompt": "a", "completion": "b"}\n]\n');
  const wrong = alallo(['jobs', 'create', '--model', 'alallo-tiny', '--file', arr]);
  assert.equal(wrong.status, 1);
  assert.equal(wrong.stderr, "alallo: array.json: alallo reads JSONL: one JSON object per line (line 1 starts with '[')\n");

  let r = alallo(['jobs', 'show', 'ftjob-does-not-exist']);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /^alallo: .+/);
  assert.equal(r.stdout, '');

  r = alallo(['jobs'], { ALALLO_API_KEY: 'wrong-key' });
  assert.equal(r.status, 1);

  r = alallo(['jobs', 'create', '--file', 'file-x']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--model is required/);
  r = alallo(['estimate', '--model', 'alallo-tiny', '--file', 'f', '--goal', 'cheapest']);
  assert.equal(r.status, 2);

  r = alallo(['models'], { ALALLO_URL: 'http://127.0.0.1:1' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /cannot reach/);
});

// `bench train --shape` takes a shape or a list of them (a worker's
// start-up bench measures tiny,base in one process): an empty name at
// either end or between two commas, or an unknown one, is refused before
// anything runs.
test('bench train refuses a shape list with an empty or unknown name', () => {
  for (const shape of [',tiny', 'tiny,', 'tiny,,base', ',']) {
    const r = spawnSync(BIN, ['bench', 'train', '--shape', shape, '--steps', '2'], { encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 2, shape);
    assert.match(r.stderr, /--shape is a shape or a list of them, as tiny,base/, shape);
  }
  const r = spawnSync(BIN, ['bench', 'train', '--shape', 'tiny,nope', '--steps', '2'], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /unknown shape 'nope'/);
});
