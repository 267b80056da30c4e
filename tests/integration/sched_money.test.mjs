// sched_money.test.mjs - what jobs cost and when they stop, on the real
// binary with the real trainer on a tiny model: cancel while queued (free),
// cancel while running (the completed steps, in the ledger), the time limit
// and the budget (stopped, free, the help page's words), and the lower
// precision message for a model too big at 16-bit for every worker.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';

import { SAMPLE, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

const LONG = { n_epochs: 20, batch_size: 2 }; // 2,000 steps: long enough to act on
// 10,000 steps: far longer than the small limits below, however fast the trainer gets.
const LONGER = { n_epochs: 50, batch_size: 1 };

async function start(args) {
  const s = await Serve.start({ args: ['--models', tinyModelsDir(), ...args] });
  const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE));
  assert.equal(up.status, 200, JSON.stringify(up.json));
  s.file = up.json.id;
  return s;
}

async function workersUp(s, n) {
  await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.length === n, {
    timeoutMs: 120000,
    what: `${n} local workers to register`,
  });
}

async function ledgerOf(s, jobId) {
  const rows = [];
  let after = '';
  for (;;) {
    const r = await s.call('GET', `/v1/billing/ledger?limit=100${after}`);
    assert.equal(r.status, 200, r.text);
    rows.push(...r.json.data.filter((x) => x.job === jobId));
    if (!r.json.has_more) return rows;
    after = `&after=${r.json.data.at(-1).id}`;
  }
}

const net = (rows) => rows.reduce((a, r) => a + (r.kind === 'charge' ? r.amount : -r.amount), 0);

// The amount shown is the amount charged: each job is cancelled at a random
// moment of its run (before or after its first checkpoint); the answer to
// the cancel request carries price.cancel_now as the cancel was accepted,
// and the job is charged exactly that. The steps the trainer completes
// while it stops (or had completed but not yet reported) stay in its
// partial model, free (docs/ledger.md).
test('a cancel at a random moment charges exactly what price.cancel_now said', { timeout: 300000 }, async () => {
  const s = await start(['--local-worker', 'name=w1,cpus=1,mem=4G,price=3.60']);
  try {
    await workersUp(s, 1);
    for (let k = 0; k < 3; k++) {
      const job = (await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: LONGER, seed: 5 + k })).json;
      await waitFor(async () => (await s.job(job.id)).progress.steps_done > 0, { timeoutMs: 120000, what: 'a first step' });
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 1500)));
      const c = await s.call('POST', `/v1/fine_tuning/jobs/${job.id}/cancel`);
      assert.equal(c.status, 200, c.text);
      const shown = c.json.price.cancel_now;
      const shownSteps = c.json.progress.steps_done;
      // Read again while it stops: still the amount the cancel was taken at.
      const stopping = await s.job(job.id);
      if (stopping.status === 'cancelling') assert.equal(stopping.price.cancel_now, shown, 'cancel_now moved while stopping');
      const done = await s.waitStatus(job.id, 'cancelled', { timeoutMs: 60000 });
      const rows = await ledgerOf(s, job.id);
      const steps = rows.filter((r) => r.kind === 'charge' && r.reason === 'training steps')
        .reduce((a, r) => a + (r.to_step - r.from_step), 0);
      const paid = net(rows);
      const what = `cancel ${k}: shown ${shown} at step ${shownSteps}, charged ${paid} for ${steps} steps, stopped at step ${done.progress.steps_done}`;
      assert.ok(shownSteps > 0 && shown > 0, what);
      // The API shows money to 4 decimals, each amount rounded on its own
      // (the ledger's micros are equal: tests/unit/sched/test_ledger.c):
      // within one rounding step per amount, and to the cent.
      assert.ok(Math.abs(done.price.charged - done.price.refunded - shown) <= 0.0001 + 1e-9, what);
      assert.ok(Math.abs(paid - shown) <= 0.00005 * (rows.length + 1) + 1e-9, what);
      assert.equal(Math.round(paid * 100), Math.round(shown * 100), what);
      assert.ok(steps <= shownSteps, what);
    }
  } finally {
    await s.stop();
  }
});

test('cancel while queued is free; cancel while running charges the completed steps and keeps a partial model', { timeout: 300000 }, async () => {
  const s = await start(['--local-worker', 'name=w1,cpus=1,mem=4G,price=3.60']);
  try {
    await workersUp(s, 1);
    // The first job takes the only worker; the second waits and is cancelled.
    const first = (await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: LONG, seed: 3 })).json;
    await s.waitStatus(first.id, 'running');
    const second = (await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: LONG })).json;
    assert.equal(second.status, 'queued');
    const w = await waitFor(async () => {
      const j = await s.job(second.id);
      return j.message === 'Waiting for capacity' ? j : false;
    }, { what: 'the second job to wait for capacity' });
    assert.equal(w.price.cancel_now, 0, 'cancelling a queued job costs nothing');
    const c2 = await s.call('POST', `/v1/fine_tuning/jobs/${second.id}/cancel`);
    assert.equal(c2.status, 200, c2.text);
    assert.equal(c2.json.status, 'cancelled');
    assert.equal(c2.json.price.charged - c2.json.price.refunded, 0);
    assert.equal(net(await ledgerOf(s, second.id)), 0);

    // Run past a checkpoint, then cancel: the steps of the partial model
    // are charged, as training-step rows of the ledger.
    await waitFor(async () => (await s.call('GET', `/v1/fine_tuning/jobs/${first.id}/checkpoints`)).json.data.length > 0, {
      timeoutMs: 120000,
      what: 'a checkpoint',
    });
    const before = await s.job(first.id);
    assert.ok(before.price.cancel_now > 0, `cancel_now ${before.price.cancel_now}`);
    await s.call('POST', `/v1/fine_tuning/jobs/${first.id}/cancel`);
    const done = await s.waitStatus(first.id, 'cancelled', { timeoutMs: 60000 });
    const rows = await ledgerOf(s, first.id);
    const charged = rows.filter((r) => r.kind === 'charge' && r.reason === 'training steps');
    assert.ok(charged.length > 0, JSON.stringify(rows));
    const steps = charged.reduce((a, r) => a + (r.to_step - r.from_step), 0);
    assert.ok(steps > 0 && steps <= done.progress.steps_done, `charged ${steps} steps of ${done.progress.steps_done}`);
    assert.ok(Math.abs(net(rows) - (done.price.charged - done.price.refunded)) < 1e-6);
    assert.ok(done.price.charged > 0, JSON.stringify(done.price));
    // Never above the upper end of the estimated price.
    assert.ok(done.price.charged - done.price.refunded <= done.estimate.price.high + 1e-6);

    // The latest checkpoint stays as a partial model: downloadable as a
    // model folder, and usable for completions under its own name.
    const cks = (await s.call('GET', `/v1/fine_tuning/jobs/${first.id}/checkpoints`)).json.data;
    assert.ok(cks[0].download_url, JSON.stringify(cks[0]));
    const tar = await fetch(s.url + cks[0].download_url, { headers: { Authorization: `Bearer ${s.key}` } });
    assert.equal(tar.status, 200, await tar.clone().text());
    assert.equal(tar.headers.get('content-type'), 'application/x-tar');
    const bytes = Buffer.from(await tar.arrayBuffer());
    const names = [];
    for (let off = 0; off + 512 <= bytes.length && bytes[off]; ) {
      const name = bytes.subarray(off, off + 100).toString('latin1').replace(/\0.*$/s, '');
      const size = parseInt(bytes.subarray(off + 124, off + 136).toString('latin1').trim(), 8);
      names.push(name);
      off += 512 + Math.ceil(size / 512) * 512;
    }
    assert.ok(names.includes('config.json') && names.some((n) => n.endsWith('.safetensors')), `tar holds ${names}`);
    const partial = await waitFor(async () => {
      const j = await s.job(first.id);
      return j.fine_tuned_model ? j : false;
    }, { what: 'the partial model' });
    assert.equal(partial.fine_tuned_model, cks[0].fine_tuned_model_checkpoint);
    const gen = await s.call('POST', '/v1/completions', { body: { model: partial.fine_tuned_model, prompt: 'Review: good', max_tokens: 3, temperature: 0 } });
    assert.equal(gen.status, 200, gen.text);
    const missing = await s.call('GET', `/v1/fine_tuning/jobs/${first.id}/checkpoints/999999/content`);
    assert.equal(missing.status, 404);
  } finally {
    await s.stop();
  }
});

// The training log names the stop and its step in the help page's words,
// never the trainer's "stopped at step N on request" (issue 12, item 11).
async function stopInLog(s, id, words) {
  const log = await s.call('GET', `/v1/fine_tuning/jobs/${id}/log`);
  assert.equal(log.status, 200, log.text);
  assert.match(log.text, new RegExp(`${words} at step \\d+`), log.text);
  assert.ok(!log.text.includes('on request'), log.text);
}

test('the time limit and the budget stop a job, free, in the help page\'s words', { timeout: 300000 }, async () => {
  const s = await start(['--local-worker', 'name=w1,cpus=1,mem=4G,price=3.60', '--time-limit', '3']);
  try {
    await workersUp(s, 1);
    const j = (await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: LONGER })).json;
    const done = await s.waitStatus(j.id, ['failed', 'succeeded'], { timeoutMs: 120000 });
    assert.equal(done.status, 'failed');
    assert.equal(done.message, 'Stopped: the time limit was reached');
    assert.equal(done.price.charged - done.price.refunded, 0);
    assert.equal(net(await ledgerOf(s, j.id)), 0);
    await stopInLog(s, j.id, 'Stopped: the time limit was reached');
  } finally {
    await s.stop();
  }
  const b = await start(['--local-worker', 'name=w1,cpus=1,mem=4G,price=3.60', '--budget-multiple', '0.02']);
  try {
    await workersUp(b, 1);
    const j = (await b.createJob({ model: 'tiny', training_file: b.file, hyperparameters: LONGER })).json;
    const done = await b.waitStatus(j.id, ['failed', 'succeeded'], { timeoutMs: 120000 });
    assert.equal(done.status, 'failed');
    assert.equal(done.message, 'Stopped: the budget was reached');
    assert.equal(done.price.charged - done.price.refunded, 0);
    assert.equal(net(await ledgerOf(b, j.id)), 0);
    await stopInLog(b, j.id, 'Stopped: the budget was reached');
  } finally {
    await b.stop();
  }
});

test('too big at 16-bit for every worker, fitting at 4-bit: the lower-precision message', { timeout: 180000 }, async () => {
  // The planner's needs for this job, with no capacity known yet.
  const probe = await start(['--local-worker', 'none']);
  // The context is pinned: left to its default it would shrink to what the
  // worker fits (docs/api.md, max_seq_len), and the job would fit at 16-bit.
  const body = { model: 'tiny', training_file: probe.file, hyperparameters: { batch_size: 8, max_seq_len: 256 } };
  let need16;
  let need4;
  try {
    need16 = (await probe.call('POST', '/v1/fine_tuning/estimates', { body })).json.plan.memory_bytes;
    need4 = (await probe.call('POST', '/v1/fine_tuning/estimates', { body: { ...body, precision: '4-bit' } })).json.plan.memory_bytes;
  } finally {
    await probe.stop();
  }
  assert.ok(need4 < need16, `4-bit needs ${need4}, 16-bit ${need16}`);
  const mem = Math.floor((need4 + need16) / 2);
  const s = await start(['--local-worker', `name=w1,cpus=1,mem=${mem},price=1`]);
  try {
    await workersUp(s, 1);
    const est = (await s.call('POST', '/v1/fine_tuning/estimates', { body: { ...body, training_file: s.file } })).json;
    assert.equal(est.message, 'Not available right now. Choose a lower precision.');
    assert.equal(est.time, null);
    const r = await s.createJob({ ...body, training_file: s.file });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.status, 'failed');
    assert.equal(r.json.message, 'Not available right now. Choose a lower precision.');
    assert.equal(r.json.price.charged, 0);
    // At 4-bit it fits, and is estimated.
    const ok = (await s.call('POST', '/v1/fine_tuning/estimates', { body: { ...body, training_file: s.file, precision: '4-bit' } })).json;
    assert.equal(ok.plan.worker, 'w1');
    assert.ok(ok.time.low_s > 0 && ok.time.high_s > ok.time.low_s, JSON.stringify(ok.time));
    // A job nothing could ever run, even at 4-bit: the plain message.
    const huge = await s.createJob({ ...body, training_file: s.file, precision: '4-bit', hyperparameters: { batch_size: 256, max_seq_len: 256 } });
    assert.equal(huge.json.status, 'failed');
    assert.equal(huge.json.message, 'Not available right now.');
  } finally {
    await s.stop();
  }
});

// No estimate, no free job: a job created while no capacity is known (the
// server's first second, a restart before a worker is back, a pool before
// its bench) has no price range, so nothing to cap its price with. It is
// estimated when first placed, says so, and is charged within that range.
test('a job created before any capacity is known is priced when placed, never free', { timeout: 300000 }, async () => {
  const s = await start(['--local-worker', 'none']);
  try {
    const created = await s.createJob({ model: 'tiny', training_file: s.file, hyperparameters: { n_epochs: 2, batch_size: 2 } });
    assert.equal(created.status, 200, created.text);
    const job = created.json;
    assert.equal(job.estimate.price, null, JSON.stringify(job.estimate));
    assert.ok(job.estimate.message, 'the estimate says why there is none');
    // Capacity comes: the server restarts with a worker of its own.
    await s.stop();
    s.args = ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G,price=3.60'];
    await s.spawn();
    const done = await s.waitStatus(job.id, 'succeeded', { timeoutMs: 240000 });
    assert.ok(done.estimate.price && done.estimate.price.high > 0, JSON.stringify(done.estimate));
    assert.ok(done.estimate.time && done.estimate.time.high_s > 0, JSON.stringify(done.estimate));
    const paid = done.price.charged - done.price.refunded;
    assert.ok(paid > 0, `trained for free: ${JSON.stringify(done.price)}`);
    assert.ok(paid <= done.estimate.price.high + 1e-6, `${paid} above ${done.estimate.price.high}`);
    const ev = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=100`);
    assert.ok(ev.json.data.some((e) => /Estimated when first placed/.test(e.message)), ev.text);
    const log = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/log`);
    assert.match(log.text, /Estimated when first placed/);
    // The calibration counts it: its real time and price against its range.
    const cal = await s.call('GET', '/v1/estimates/calibration?limit=10');
    assert.equal(cal.status, 200, cal.text);
    assert.equal(cal.json.object, 'estimates.calibration');
    assert.equal(cal.json.window, 10);
    assert.equal(cal.json.jobs, 1, cal.text);
    // The range was given when the job was placed (its first attempt's
    // start) and counts from there; the calibration adds the time before.
    const took = done.finished_at - (done.attempts[0]?.started_at ?? done.created_at);
    const inTime = took >= done.estimate.time.low_s - 1 && took <= done.estimate.time.high_s + 1;
    assert.equal(cal.json.time.inside + cal.json.time.below + cal.json.time.above, 1, cal.text);
    if (took > done.estimate.time.high_s + 1) assert.equal(cal.json.time.above, 1, cal.text);
    if (took < done.estimate.time.low_s - 1) assert.equal(cal.json.time.below, 1, cal.text);
    if (inTime && took > done.estimate.time.low_s + 1 && took < done.estimate.time.high_s - 1) assert.equal(cal.json.time.inside, 1, cal.text);
    assert.equal(cal.json.price.inside, paid >= done.estimate.price.low - 1e-4 ? 1 : 0, cal.text);
    assert.ok(cal.json.time.median_width >= 1, cal.text);
    const bad = await s.call('GET', '/v1/estimates/calibration?limit=0');
    assert.equal(bad.status, 400, bad.text);
    // Another account sees only its own jobs.
    const other = s.account('calibration-other');
    const theirs = await s.call('GET', '/v1/estimates/calibration', { key: other });
    assert.equal(theirs.status, 200, theirs.text);
    assert.equal(theirs.json.jobs, 0, theirs.text);
    assert.equal(theirs.json.time.median_width, null, theirs.text);
  } finally {
    await s.stop();
  }
});
