// harness.mjs - what the browser tests share: a real `alallo serve` on a
// free port with a temporary data folder, and headless Chromium that records
// console errors and refuses (and records) every request that leaves the
// server's origin.
//
// Environment: ALALLO_BIN (the binary, default build/alallo), ALALLO_ROOT
// (the source tree), ALALLO_E2E_ARTIFACTS (where screenshots go, default
// build/e2e-artifacts), ALALLO_E2E_SERVE_ARGS (extra serve arguments,
// split on spaces, e.g. "--models DIR").
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = process.env.ALALLO_ROOT ||
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.ALALLO_BIN || path.join(ROOT, 'build/alallo');
export const ARTIFACTS = process.env.ALALLO_E2E_ARTIFACTS || path.join(ROOT, 'build/e2e-artifacts');
const CHROMIUM = process.env.ALALLO_CHROMIUM || '/usr/bin/chromium';
const EXTRA_ARGS = (process.env.ALALLO_E2E_SERVE_ARGS || '').split(' ').filter(Boolean);

// The launch flags the project uses for headless Chromium: no GPU, no
// sandbox (containers), and none of the browser's own background traffic.
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync'];

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A models folder holding one tiny base model made by alallo itself (a
// byte-level BPE tokenizer trained on a small text and a randomly
// initialised `tiny` model): nothing is downloaded, and training it takes
// seconds. Made once per `root` folder.
export function makeModels(root) {
  const dir = path.join(root, 'models');
  if (fs.existsSync(path.join(dir, 'alallo-tiny', 'config.json'))) return dir;
  fs.mkdirSync(dir, { recursive: true });
  const words = 'the service was good bad fine great awful on day review sentiment positive negative'.split(' ');
  const lines = [];
  for (let i = 0; i < 600; i++) {
    lines.push(Array.from({ length: 12 }, (_, k) => words[(i * 7 + k * 3) % words.length]).join(' '));
  }
  const corpus = path.join(root, 'corpus.txt');
  fs.writeFileSync(corpus, `${lines.join('\n')}\n`);
  const tok = path.join(root, 'tokenizer.json');
  execFileSync(BIN, ['tokenizer', 'train', '--input', corpus, '--vocab-size', '300', '--out', tok]);
  execFileSync(BIN, ['model', 'init', '--shape', 'tiny', '--tokenizer', tok,
    '--out', path.join(dir, 'alallo-tiny'), '--seed', '1']);
  return dir;
}

// Starts `alallo serve` and waits until /healthz answers and DIR/api-key
// exists. Returns { base, key, signinUrl, dir, output(), stop() }.
export async function startServe(extraArgs = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-e2e-'));
  const port = await freePort();
  const args = ['serve', '--port', String(port), '--data', dir, ...EXTRA_ARGS, ...extraArgs];
  const proc = spawn(BIN, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (b) => {
    out += b.toString();
    if (out.length > 200000) out = out.slice(-100000);
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  let exited = null;
  proc.on('exit', (code, sig) => {
    exited = `exited with ${code ?? sig}`;
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60000;
  for (;;) {
    if (exited) throw new Error(`alallo serve ${exited} before it answered:\n${out}`);
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`alallo serve did not answer /healthz within 60 s:\n${out}`);
    }
    try {
      const r = await fetch(`${base}/healthz`);
      if (r.ok && fs.existsSync(path.join(dir, 'api-key'))) break;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  const key = fs.readFileSync(path.join(dir, 'api-key'), 'utf8').trim();
  // The address serve prints signs the local user in (#key=...). Serve may
  // answer /healthz and write the key a moment before it prints the
  // address: up to 10 s more for the line.
  const signin = new RegExp(`http://127\\.0\\.0\\.1:${port}/#key=\\S+`);
  for (let i = 0; i < 100 && !signin.test(out) && !exited; i++) await sleep(100);
  const printed = signin.exec(out);
  const signinUrl = printed ? printed[0] : `${base}/#key=${encodeURIComponent(key)}`;
  return {
    base,
    key,
    dir,
    signinUrl,
    printedSignin: !!printed,
    output: () => out,
    async stop() {
      if (!exited) {
        proc.kill('SIGTERM');
        for (let i = 0; i < 100 && !exited; i++) await sleep(100);
        if (!exited) proc.kill('SIGKILL');
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

// Calls the API as a client would (test set-up only; the page does the
// rest). Throws with the server's message on an error status.
export async function apiCall(srv, method, p, body) {
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

// A JSONL data set of `n` prompt/completion examples.
export function dataset(n) {
  const words = ['good', 'fine', 'poor', 'bad', 'great', 'awful'];
  const lines = [];
  for (let i = 0; i < n; i++) {
    const w = words[i % words.length];
    const label = ['good', 'fine', 'great'].includes(w) ? 'positive' : 'negative';
    lines.push(JSON.stringify({ prompt: `Review: the service was ${w} on day ${i}.\nSentiment:`, completion: ` ${label}` }));
  }
  return `${lines.join('\n')}\n`;
}

export async function uploadDataset(srv, name, text) {
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', new Blob([text], { type: 'application/jsonl' }), name);
  return apiCall(srv, 'POST', '/v1/files', form);
}

export async function launchBrowser() {
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
}

// A page whose problems are recorded in `record`: console errors, uncaught
// exceptions, failed requests, and any request to another origin (aborted,
// so nothing leaves the machine even if the page tried).
export async function watchedPage(browser, srv, record, viewport = { width: 1280, height: 900 }) {
  const context = await browser.newContext({ viewport });
  const origin = new URL(srv.base).origin;
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(`${origin}/`) || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    record.external.push(u);
    return route.abort();
  });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') record.consoleErrors.push(`${m.text()} (${m.location().url || ''})`);
  });
  page.on('pageerror', (e) => record.consoleErrors.push(`uncaught: ${e.message}`));
  return page;
}

export function newRecord() {
  return { consoleErrors: [], external: [] };
}

export function screenshotPath(name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  return path.join(ARTIFACTS, name);
}

// Waits until fn() returns a truthy value; returns it. Fails with `what`.
export async function until(what, fn, timeoutMs = 30000, everyMs = 250) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last})`);
    await sleep(everyMs);
  }
}
