// finish_by.test.mjs - the goal "finish_by" against the real `alallo serve`
// (two local workers, the real trainer on a tiny model): the estimate names
// the cheapest worker whose range ends by the deadline and that end; a
// deadline no capacity meets is answered with the earliest finish, on the
// estimate and as a 400 on create; a job with the goal is created through
// the API and through the CLI (`--finish-by`, RFC 3339) and runs; a past,
// unreadable or missing deadline is a 400 naming finish_by.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { BIN, SAMPLE, Serve, tinyModelsDir, tmpdir, waitFor } from './service_harness.mjs';

let s = null;
const SENTENCE = /^No capacity can finish this job by \d{4}-\d\d-\d\d \d\d:\d\d UTC; the earliest is \d{4}-\d\d-\d\d \d\d:\d\d UTC\.$/;
const now = () => Math.floor(Date.now() / 1000);

before(async () => {
  s = await Serve.start({
    args: [
      '--models', tinyModelsDir(),
      // The same machine twice: cheap wins whenever both meet a deadline.
      '--local-worker', 'name=cheap,cpus=1,mem=8G,price=0.10',
      '--local-worker', 'name=dear,cpus=1,mem=8G,price=10000',
    ],
  });
  const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
  assert.equal(up.status, 200, JSON.stringify(up.json));
  s.file = up.json.id;
  // Both workers known with a measured speed: estimates have ranges.
  await waitFor(
    async () => {
      const r = await s.call('POST', '/v1/fine_tuning/estimates', { body: { model: 'tiny', training_file: s.file } });
      const w = (await s.call('GET', '/v1/workers')).json.data;
      return w.length === 2 && r.json.time !== null;
    },
    { timeoutMs: 120000, what: 'two measured local workers' },
  );
});

after(async () => {
  if (s) await s.stop();
});

const small = () => ({ model: 'tiny', training_file: s.file, hyperparameters: { n_epochs: 1, batch_size: 4 }, seed: 3 });
// Far more steps than a day's deadline allows on this machine.
const huge = () => ({ ...small(), max_steps: 10000000 });

test('the estimate picks the cheapest worker that ends by the deadline and shows that end', async () => {
  const by = now() + 86400;
  const r = await s.call('POST', '/v1/fine_tuning/estimates', { body: { ...small(), goal: 'finish_by', finish_by: by } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.finish_by.deadline, by);
  assert.equal(r.json.finish_by.met, true);
  assert.ok(r.json.finish_by.high_at <= by, r.text);
  assert.ok(r.json.finish_by.high_at >= now() + r.json.time.high_s - 5, r.text);
  assert.equal(r.json.plan.worker, 'cheap');
  assert.equal(r.json.message, null);
  // The deadline alone sets the goal.
  const alone = await s.call('POST', '/v1/fine_tuning/estimates', { body: { ...small(), finish_by: by } });
  assert.equal(alone.status, 200, alone.text);
  assert.equal(alone.json.finish_by.met, true);
});

test('a deadline no capacity meets names the earliest finish; create refuses it', async () => {
  const by = now() + 3600;
  const r = await s.call('POST', '/v1/fine_tuning/estimates', { body: { ...huge(), goal: 'finish_by', finish_by: by } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.finish_by.met, false);
  assert.match(r.json.message, SENTENCE);
  assert.ok(r.json.finish_by.high_at > by, r.text);
  const c = await s.createJob({ ...huge(), goal: 'finish_by', finish_by: by });
  assert.equal(c.status, 400, c.text);
  assert.equal(c.json.error.param, 'finish_by');
  assert.match(c.json.error.message, SENTENCE);
  const list = (await s.call('GET', '/v1/fine_tuning/jobs')).json.data;
  assert.equal(list.filter((j) => j.max_steps === 10000000).length, 0, 'nothing was created');
});

test('a bad deadline is a 400 naming finish_by, on create and estimate', async () => {
  const cases = [
    [{ goal: 'finish_by', finish_by: now() - 60 }, /in the future/],
    [{ goal: 'finish_by', finish_by: 'tomorrow' }, /Unix seconds/],
    [{ goal: 'finish_by', finish_by: 1.5e9 + 0.5 }, /Unix seconds/],
    [{ goal: 'finish_by' }, /needs finish_by/],
    [{ goal: 'lowest_cost', finish_by: now() + 3600 }, /goal "finish_by"/],
  ];
  for (const [extra, message] of cases) {
    for (const p of ['/v1/fine_tuning/jobs', '/v1/fine_tuning/estimates']) {
      const r = await s.call('POST', p, { body: { ...small(), ...extra } });
      assert.equal(r.status, 400, `${p} ${JSON.stringify(extra)}: ${r.text}`);
      assert.equal(r.json.error.param, 'finish_by', r.text);
      assert.match(r.json.error.message, message);
    }
  }
});

test('a job with the goal is created through the API, shows its deadline and runs', async () => {
  const by = now() + 86400;
  const r = await s.createJob({ ...small(), goal: 'finish_by', finish_by: by });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.goal, 'finish_by');
  assert.equal(r.json.finish_by, by);
  assert.equal(r.json.estimate.finish_by.met, true);
  const done = await s.waitStatus(r.json.id, ['succeeded', 'failed'], { timeoutMs: 240000 });
  assert.equal(done.status, 'succeeded', JSON.stringify(done));
  assert.equal(done.finish_by, by);
});

test('the CLI creates and estimates with --finish-by', async () => {
  const dir = tmpdir('alallo-finish-by-');
  const cli = (args) => {
    const r = spawnSync(BIN, args, { cwd: dir, encoding: 'utf8', timeout: 120000, env: { ...process.env, ALALLO_URL: s.url, ALALLO_API_KEY: s.key } });
    return { status: r.status, out: r.stdout, err: r.stderr };
  };
  const by = now() + 86400;
  const rfc = new Date(by * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
  const est = cli(['estimate', '--model', 'tiny', '--file', s.file, '--epochs', '1', '--goal', 'finish_by', '--finish-by', rfc]);
  assert.equal(est.status, 0, est.err);
  assert.match(est.out, /Finish by: +\d{4}-\d\d-\d\d \d\d:\d\d \(done by \d{4}-\d\d-\d\d \d\d:\d\d at the latest\)/);
  const made = cli(['jobs', 'create', '--model', 'tiny', '--file', s.file, '--epochs', '1', '--finish-by', rfc]);
  assert.equal(made.status, 0, made.err);
  const id = made.out.trim();
  const job = await s.job(id);
  assert.equal(job.goal, 'finish_by');
  assert.equal(job.finish_by, by);
  const shown = cli(['jobs', 'show', id]);
  assert.equal(shown.status, 0, shown.err);
  assert.match(shown.out, /Goal: +Finish by \d{4}-\d\d-\d\d \d\d:\d\d/);
  // An offset is read as one; the same moment.
  const off = new Date((by + 3600) * 1000).toISOString().replace(/\.\d+Z$/, '+01:00');
  const made2 = cli(['jobs', 'create', '--model', 'tiny', '--file', s.file, '--epochs', '1', '--finish-by', off]);
  assert.equal(made2.status, 0, made2.err);
  assert.equal((await s.job(made2.out.trim())).finish_by, by);
  // Unreadable: a usage error, nothing sent. Past: the server's 400.
  const bad = cli(['jobs', 'create', '--model', 'tiny', '--file', s.file, '--finish-by', 'tomorrow']);
  assert.equal(bad.status, 2);
  assert.match(bad.err, /--finish-by must be a time/);
  const past = cli(['jobs', 'create', '--model', 'tiny', '--file', s.file, '--finish-by', '2001-01-01T00:00:00Z']);
  assert.equal(past.status, 1);
  assert.match(past.err, /finish_by must be in the future/);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('with no capacity known the deadline cannot be judged: met is null and the job is accepted', async () => {
  const idle = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'none'] });
  try {
    const up = await idle.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
    const body = { model: 'tiny', training_file: up.json.id, goal: 'finish_by', finish_by: now() + 3600 };
    const r = await idle.call('POST', '/v1/fine_tuning/estimates', { body });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.time, null);
    assert.deepEqual(r.json.finish_by, { deadline: body.finish_by, met: null, high_at: null });
    const c = await idle.createJob(body);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.status, 'queued');
    assert.equal(c.json.finish_by, body.finish_by);
  } finally {
    await idle.stop();
  }
});
