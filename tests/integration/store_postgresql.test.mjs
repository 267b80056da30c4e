// store_postgresql.test.mjs - `alallo serve --store postgresql://…` on a
// throwaway PostgreSQL (tests/pg/pg-up.sh): a SQLite data folder with a
// finished job is moved with `alallo store copy`, a serve on PostgreSQL
// finds it, then runs the sample job end to end (upload, create, train on
// the local worker, succeed, bill, answer a completion) with every row in
// PostgreSQL and none in a SQLite file.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN, ROOT, SAMPLE, Serve, run, tinyModelsDir, tmpdir, waitFor } from './service_harness.mjs';

const KIT = path.join(ROOT, 'tests/pg');

function sh(script, args) {
  return execFileSync(path.join(KIT, script), args, { encoding: 'utf8', timeout: 120000 }).trim();
}

async function runSampleJob(s, suffix) {
  const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
  assert.equal(up.status, 200, JSON.stringify(up.json));
  await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === 1, {
    what: 'the local worker to register',
  });
  const created = await s.createJob({ model: 'tiny', training_file: up.json.id, suffix });
  assert.equal(created.status, 200, created.text);
  const done = await waitFor(
    async () => {
      const j = await s.job(created.json.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    },
    { timeoutMs: 240000, what: 'the job to end' },
  );
  assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
  return done;
}

describe('serve on PostgreSQL', () => {
  let kit;
  let base;
  before(() => {
    // A short folder: the server's socket path must stay under 107 bytes.
    kit = fs.mkdtempSync('/tmp/alallo-pgit-');
    fs.rmdirSync(kit);
    base = sh('pg-up.sh', [kit, BIN]);
  });
  after(() => {
    if (kit) sh('pg-down.sh', [kit]);
  });

  test('a SQLite folder is copied in, and the sample job runs end to end on PostgreSQL', async () => {
    const args = ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=0.36'];
    // 1. A job that finished on SQLite.
    const data = tmpdir();
    let s = await Serve.start({ data, args });
    let before;
    try {
      before = await runSampleJob(s, 'lite');
    } finally {
      await s.stop();
    }

    // 2. Moved into an empty database; a second copy is refused.
    const url = sh('pg-db.sh', [kit, 'it_copy']);
    assert.match(url, /^postgresql:\/\//);
    const out = run(['store', 'copy', `sqlite:${data}`, url]);
    assert.match(out, /counts match/);
    assert.match(out, /^jobs +1$/m);
    const again = execFileSync('bash', ['-c', `'${BIN}' store copy 'sqlite:${data}' '${url}' 2>&1; echo rc=$?`], {
      encoding: 'utf8',
    });
    assert.match(again, /not empty/);
    assert.match(again, /rc=1/);

    // 3. Serve on PostgreSQL, with the SQLite file out of the way.
    fs.renameSync(path.join(data, 'alallo.db'), path.join(data, 'old.db'));
    s = await Serve.start({ data, args: [...args, '--store', url] });
    try {
      assert.ok(!fs.existsSync(path.join(data, 'alallo.db')), 'no SQLite store is made beside it');
      const moved = await s.job(before.id);
      assert.equal(moved.status, 'succeeded');
      assert.equal(moved.fine_tuned_model, before.fine_tuned_model);
      assert.equal(moved.progress.steps_done, before.progress.steps_done);

      const done = await runSampleJob(s, 'pg');
      assert.equal(done.attempts.length, 1);
      const log = await s.call('GET', `/v1/fine_tuning/jobs/${done.id}/log`);
      assert.match(log.text, /training finished/);
      const ledger = await s.call('GET', '/v1/billing/ledger?limit=100');
      assert.equal(ledger.status, 200, ledger.text);
      const charged = ledger.json.data.filter((r) => r.job === done.id && r.kind === 'charge');
      assert.ok(charged.length >= 1, ledger.text);
      const steps = charged.reduce((a, r) => a + (r.to_step - r.from_step), 0);
      assert.equal(steps, done.progress.steps_done, 'every step billed once');
      const completion = await s.call('POST', '/v1/completions', {
        body: { model: done.fine_tuned_model, prompt: 'I loved this film', max_tokens: 4, temperature: 0 },
      });
      assert.equal(completion.status, 200, completion.text);
      // The rows are PostgreSQL's.
      const db = new URL(url).pathname.slice(1);
      const n = execFileSync('psql', ['-X', '-A', '-t', '-h', kit, '-p', '55432', '-U', 'alallo', '-d', db, '-c', 'SELECT COUNT(*) FROM jobs'], {
        encoding: 'utf8',
      }).trim();
      assert.equal(n, '2');
    } finally {
      await s.stop();
    }
  });
});
