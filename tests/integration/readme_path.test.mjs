// readme_path.test.mjs - the README's path from a clone to a fine-tuned
// model answering, walked as a newcomer would: the client commands are read
// from README.md itself (its indented `build/alallo ...` lines, in order) and
// run against a real `alallo serve` on the embedded default, with the
// built-in model and the sample data set. If the README changes, this test
// runs the new commands.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, ROOT, Serve, tmpdir } from './service_harness.mjs';

// Splits one shell command line into words: plain words, '...' and $'...'
// (with \n, \t, \\ and \' escapes), which is all the README uses.
function words(line) {
  const out = [];
  let i = 0;
  while (i < line.length) {
    while (line[i] === ' ') i++;
    if (i >= line.length) break;
    let w = '';
    while (i < line.length && line[i] !== ' ') {
      if (line.startsWith("$'", i)) {
        i += 2;
        while (i < line.length && line[i] !== "'") {
          if (line[i] === '\\') {
            const c = line[i + 1];
            w += { n: '\n', t: '\t', '\\': '\\', "'": "'" }[c] ?? c;
            i += 2;
          } else {
            w += line[i++];
          }
        }
        i++;
      } else if (line[i] === "'") {
        const end = line.indexOf("'", i + 1);
        w += line.slice(i + 1, end);
        i = end + 1;
      } else {
        w += line[i++];
      }
    }
    out.push(w);
  }
  return out;
}

// The README's client commands: indented lines that run build/alallo,
// except `serve` (the harness starts it).
function readmeCommands() {
  const text = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  return text.split('\n')
    .filter((l) => /^ {4}build\/alallo /.test(l))
    .map((l) => words(l.trim()).slice(1))
    .filter((args) => args[0] !== 'serve');
}

test('the README: create the sample job, follow it, try the model, export it', { timeout: 600000 }, async () => {
  const cmds = readmeCommands();
  const verbs = cmds.map((a) => (a[0] === 'jobs' ? `jobs ${a[1] || ''}` : a[0]).trim());
  for (const want of ['jobs create', 'jobs log', 'generate', 'export'])
    assert.ok(verbs.includes(want), `the README has no "${want}" command: ${JSON.stringify(verbs)}`);

  // `make run`: the embedded default, one local worker, the built-in model.
  const s = await Serve.start({ args: ['--models', path.join(ROOT, 'models')] });
  // The second shell: the README's paths are relative to the clone.
  const cwd = tmpdir('alallo-readme-');
  fs.symlinkSync(path.join(ROOT, 'examples'), path.join(cwd, 'examples'));
  fs.mkdirSync(path.join(cwd, 'var'));
  fs.copyFileSync(path.join(s.data, 'api-key'), path.join(cwd, 'var', 'api-key'));
  const env = { ...process.env, ALALLO_URL: s.url, ALALLO_API_KEY: fs.readFileSync(path.join(cwd, 'var', 'api-key'), 'utf8').trim() };
  let job = null;
  const log = [];
  try {
    for (const args of cmds) {
      const real = args.map((a) => (a === 'ftjob-...' ? job : a));
      assert.ok(!real.includes(null), `"${args.join(' ')}" needs a job, and no job was created before it`);
      const r = spawnSync(BIN, real, { cwd, env, encoding: 'utf8', timeout: 300000 });
      log.push(`$ alallo ${real.join(' ')}\n${r.stdout}${r.stderr}`);
      assert.equal(r.status, 0, `"alallo ${real.join(' ')}" exited ${r.status}\n${log.slice(-2).join('\n')}`);
      if (real[0] === 'jobs' && real[1] === 'create') {
        job = (/ftjob-[A-Za-z0-9]+/.exec(r.stdout) || [null])[0];
        assert.ok(job, `no job id in:\n${r.stdout}`);
      }
      if (real[0] === 'jobs' && real[1] === 'log') {
        // --follow returns when the job has ended: it succeeded.
        const j = await s.call('GET', `/v1/fine_tuning/jobs/${job}`);
        assert.equal(j.json.status, 'succeeded', `the job ended ${j.json.status}: ${j.json.message}\n${log.slice(-1).join('\n')}`);
      }
      if (real[0] === 'generate') {
        // The README's review is held out from the training file, in the
        // data set's words: the model answers its label, as the README says.
        const said = /It answers `( ?[a-z]+)`/.exec(fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8'));
        assert.ok(said, 'the README does not say what the model answers');
        assert.equal(r.stdout.trim(), said[1].trim(), `generate answered ${JSON.stringify(r.stdout)}\n${log.slice(-2).join('\n')}`);
      }
      if (real[0] === 'export') {
        const out = real[real.indexOf('--out') + 1];
        assert.ok(fs.statSync(path.join(cwd, out)).size > 0, `${out} is empty`);
      }
    }
  } finally {
    await s.stop();
  }
});
