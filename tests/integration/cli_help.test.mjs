// cli_help.test.mjs - every command and sub-command of the binary answers
// --help (and -h) with its usage on stdout, exit status 0, at once, and runs
// nothing: no file or folder appears in its working directory, no server is
// called (ALALLO_URL points at a closed port), no benchmark or training runs.
//
// The commands are listed here by hand, and the list is checked against the
// dispatch tables in the sources (main.c's commands; the sub-commands each
// command's file picks by argv[1] or `sub`), so a new command without --help
// fails here.
//
// Environment: ALALLO_BIN (the binary), ALALLO_ROOT (the source tree).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.ALALLO_BIN || path.resolve('build/alallo');
const ROOT = process.env.ALALLO_ROOT || path.resolve('.');
// "At once": under QUICK_MS, or, on a machine so loaded that even the
// top-level usage is slow, under SLOWER times what `alallo --help` took
// just before. A command that does its work (trains, benchmarks, waits on
// a server) takes far longer than either.
const QUICK_MS = 2000;
const SLOWER = 5;

// Each entry: the words before --help. Options that would make the command
// do its work are given too, so that --help has to win over them.
const COMMANDS = [
  ['serve', '--port', '0', '--data', 'var'],
  ['worker', '--server', 'http://127.0.0.1:9', '--token', 't'],
  ['attempt'],
  ['attempt', 'run', '--server', 'http://127.0.0.1:9', '--attempt', 'att-1', '--work-dir', '/tmp/alallo-help-never'],
  ['serving'],
  ['serving', 'run', '--server', 'http://127.0.0.1:9', '--id', 'local-0', '--work-dir', '/tmp/alallo-help-never'],
  ['accounts'],
  ['accounts', 'create', 'someone', '--data', 'var'],
  ['store'],
  ['store', 'migrate', 'sqlite:var'],
  ['store', 'copy', 'sqlite:var', 'postgresql://127.0.0.1:9/none'],
  ['train'],
  ['train', '--config', 'attempt.json'],
  ['train', '--materialize', 'ckpt', '--base', 'base', '--out', 'out'],
  ['train', '--dump-grads', '--model-dir', 'm', '--ids', '1,2', '--out', 'g.bin'],
  ['train', '--dump-dpo'],
  ['bench'],
  ['bench', 'train', '--shape', 'tiny', '--steps', '2'],
  ['bench', 'gemm', '--shape', 'tiny', '--reps', '1'],
  ['model'],
  ['model', 'init', '--shape', 'tiny', '--out', 'm'],
  ['tokenizer'],
  ['tokenizer', 'train', '--input', 'in.txt', '--vocab-size', '300', '--out', 'tok.json'],
  ['tokenizer', 'encode', '--tokenizer', 'tok.json', '--text', 'hi'],
  ['tokenizer', 'decode', '--tokenizer', 'tok.json', '--ids', '1,2'],
  ['sim', '--jobs', '2', '--workers', '1', '--seed', '1'],
  ['version'],
  ['inference', '--socket', 'engine.sock'],
  ['inference', '--listen', '127.0.0.1:0', '--key', '@key'],
  ['generate', '--model', 'ftjob-x', '--prompt', 'hi'],
  ['generate', '--model-dir', 'm', '--prompt', 'hi'],
  ['export', 'ftjob-x', '--format', 'gguf', '--out', 'x.gguf'],
  ['export', '--model-dir', 'm', '--format', 'gguf', '--out', 'x.gguf'],
  ['jobs'],
  ['jobs', 'list'],
  ['jobs', 'show', 'ftjob-x'],
  ['jobs', 'create', '--model', 'alallo-base', '--file', 'file-x'],
  ['jobs', 'cancel', 'ftjob-x'],
  ['jobs', 'log', 'ftjob-x', '--follow'],
  ['estimate', '--model', 'alallo-base', '--file', 'file-x'],
  ['files'],
  ['files', 'list'],
  ['files', 'upload', 'train.jsonl'],
  ['files', 'delete', 'file-x'],
  ['models'],
  ['workers'],
  ['workers', 'list'],
  ['workers', 'drain', 'w1'],
  ['ledger'],
];

// The words a source file dispatches on: `strcmp(VAR, "word")`.
function dispatched(file, variable) {
  const text = fs.readFileSync(file, 'utf8');
  const re = new RegExp(`strcmp\\(${variable.replace(/[[\]]/g, '\\$&')}, "([a-z][a-z-]*)"\\)`, 'g');
  return [...text.matchAll(re)].map((m) => m[1]);
}

// A source file by its name anywhere under src/ (files move between folders).
function source(name) {
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) {
        const found = walk(p);
        if (found) return found;
      } else if (e.name === name) {
        return p;
      }
    }
    return null;
  };
  const found = walk(path.join(ROOT, 'src'));
  assert.ok(found, `src/**/${name} not found`);
  return found;
}

const listed = (words) => COMMANDS.some((c) => words.every((w, i) => c[i] === w));

test('the list covers every command and sub-command the sources dispatch on', () => {
  const main = fs.readFileSync(source('main.c'), 'utf8');
  const top = [...main.matchAll(/strcmp\(cmd, "([a-z][a-z-]*)"\)/g)].map((m) => m[1]);
  const client = main.match(/client_cmds\[\] = \{([^}]*)\}/);
  assert.ok(client, 'main.c: client_cmds not found');
  top.push(...[...client[1].matchAll(/"([a-z]+)"/g)].map((m) => m[1]));
  assert.ok(top.length >= 15, `only ${top.length} commands found in main.c`);
  for (const cmd of top.filter((c) => c !== 'help')) assert.ok(listed([cmd]), `alallo ${cmd} is not tested`);
  const subs = [
    ['accounts', 'cmd_accounts.c', 'argv[1]'],
    ['store', 'cmd_store.c', 'argv[1]'],
    ['attempt', 'attempt_runner.c', 'argv[1]'],
    ['bench', 'cmd_bench.c', 'argv[1]'],
    ['model', 'cmd_model.c', 'argv[1]'],
    ['tokenizer', 'cmd_tokenizer.c', 'argv[1]'],
    ['jobs', 'cli_jobs.c', 'sub'],
  ];
  for (const [cmd, file, variable] of subs) {
    const words = dispatched(source(file), variable);
    assert.ok(words.length > 0, `${file}: no sub-commands found`);
    for (const w of words) assert.ok(listed([cmd, w]), `alallo ${cmd} ${w} is not tested`);
  }
  // files and workers share cli_cmds.c: their sub-commands by hand
  for (const w of dispatched(source('cli_cmds.c'), 'sub'))
    assert.ok(listed(['files', w]) || listed(['workers', w]), `alallo files|workers ${w} is not tested`);
});

for (const flag of ['--help', '-h']) {
  test(`every command answers ${flag} with its usage and runs nothing`, () => {
    const failures = [];
    for (const words of COMMANDS) {
      const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-help-'));
      const b0 = Date.now();
      spawnSync(BIN, ['--help'], { timeout: 30000 });
      const baseline = Date.now() - b0;
      const t0 = Date.now();
      const r = spawnSync(BIN, [...words, flag], {
        cwd,
        env: { ...process.env, ALALLO_URL: 'http://127.0.0.1:9', ALALLO_API_KEY: 'sk-none' },
        timeout: 30000,
      });
      const ms = Date.now() - t0;
      const out = r.stdout.toString();
      const left = fs.readdirSync(cwd);
      fs.rmSync(cwd, { recursive: true, force: true });
      const what = `alallo ${words.join(' ')} ${flag}`;
      if (r.status !== 0) failures.push(`${what}: exit ${r.status ?? r.signal} (${r.stderr.toString().trim().slice(0, 200)})`);
      else if (!/usage/i.test(out)) failures.push(`${what}: no usage on stdout (${out.trim().slice(0, 200)})`);
      if (ms > Math.max(QUICK_MS, SLOWER * baseline)) failures.push(`${what}: took ${ms} ms (alallo --help took ${baseline} ms)`);
      if (left.length) failures.push(`${what}: left ${left.join(', ')}`);
    }
    assert.deepEqual(failures, []);
  });
}
