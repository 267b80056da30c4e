// watch_learning.test.mjs - watching a job learn through the API (docs/api.md,
// "Validation and early stopping"): with a validation file the job's
// metrics events carry OpenAI's six metric names, sample answers come as
// events (the base model's, then at each epoch's end; for prompts given with
// the job too, with or without validation data), its checkpoints carry the
// validation metrics, and its results file is a CSV step by step; early
// stopping on a data set made to overfit ends the job as succeeded before
// its planned steps, with the best checkpoint as the model, charged for the
// steps it ran, and says what stopping early saved. The trainer alone
// answers its sample prompts together or one at a time alike.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN, SAMPLE, Serve, tinyModelsDir, tmpdir, waitFor } from './service_harness.mjs';

const METRICS = ['train_loss', 'train_mean_token_accuracy', 'valid_loss', 'valid_mean_token_accuracy',
  'full_valid_loss', 'full_valid_mean_token_accuracy'];

function sampleLines(from, n) {
  return fs.readFileSync(SAMPLE, 'utf8').split('\n').filter((l) => l.trim()).slice(from, from + n);
}

async function allEvents(s, id) {
  const out = [];
  let after = '';
  for (;;) {
    const r = await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100${after}`);
    assert.equal(r.status, 200, r.text);
    out.push(...r.json.data);
    if (!r.json.has_more) return out.reverse(); // oldest first
    after = `&after=${r.json.data[r.json.data.length - 1].id}`;
  }
}

async function ended(s, id) {
  return waitFor(async () => {
    const j = await s.job(id);
    return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
  }, { timeoutMs: 240000, everyMs: 200, what: 'the job to end' });
}

describe('watching a job learn', () => {
  let s;
  before(async () => {
    s = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=w1,cpus=1,mem=4G'] });
  });
  after(async () => s && s.stop());

  test('a validation file: six metrics by name, checkpoint metrics, a results CSV', { timeout: 300000 }, async () => {
    const train = await s.upload('train.jsonl', Buffer.from(sampleLines(0, 40).join('\n') + '\n'));
    const valid = await s.upload('valid.jsonl', Buffer.from(sampleLines(100, 10).join('\n') + '\n'));
    assert.equal(train.status, 200, train.text);
    assert.equal(valid.status, 200, valid.text);
    // 40 x 3 epochs in batches of 8: 15 steps; epochs end at 5, 10, 15
    const created = await s.createJob({
      model: 'tiny', training_file: train.json.id, validation_file: valid.json.id,
      hyperparameters: { n_epochs: 3, batch_size: 8 },
    });
    assert.equal(created.status, 200, created.text);
    assert.equal(created.json.progress.max_steps, 15);
    const done = await ended(s, created.json.id);
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);

    const metrics = (await allEvents(s, done.id)).filter((e) => e.type === 'metrics' && 'train_loss' in e.data);
    const seen = new Set(metrics.flatMap((e) => Object.keys(e.data)));
    for (const name of METRICS) assert.ok(seen.has(name), `no metrics event has ${name}`);
    const full = metrics.filter((e) => 'full_valid_loss' in e.data).map((e) => e.data.step);
    assert.deepEqual(full, [5, 10, 15]);
    const batch = metrics.filter((e) => 'valid_loss' in e.data).map((e) => e.data.step);
    assert.deepEqual(batch, [10]);
    for (const e of metrics) {
      assert.equal(e.object, 'fine_tuning.job.event');
      assert.ok(e.data.train_mean_token_accuracy >= 0 && e.data.train_mean_token_accuracy <= 1, JSON.stringify(e));
    }
    // sample answers: 3 validation prompts, by the base model and at each epoch's end
    const samples = (await allEvents(s, done.id)).filter((e) => e.data && e.data.sample === true);
    for (const e of samples) assert.equal(e.type, 'message');
    assert.equal(samples.filter((e) => e.data.base && e.data.step === 0).length, 3);
    for (const step of [5, 10, 15]) {
      assert.equal(samples.filter((e) => !e.data.base && e.data.step === step).length, 3, `samples at ${step}`);
    }
    assert.ok(samples[0].data.prompt.startsWith('Review:'), JSON.stringify(samples[0]));
    assert.match(samples[0].message, /^The base model's answer at step 0: /);
    const withValid = metrics.find((e) => 'valid_loss' in e.data);
    assert.match(withValid.message, /^Step 10\/15: training loss=[0-9.]+, validation loss=[0-9.]+/);

    const ck = await s.call('GET', `/v1/fine_tuning/jobs/${done.id}/checkpoints`);
    assert.equal(ck.status, 200, ck.text);
    const last = ck.json.data[0];
    assert.equal(last.metrics.step, 15);
    const fullAt15 = metrics.find((e) => e.data.step === 15 && 'full_valid_loss' in e.data).data;
    assert.ok(Math.abs(last.metrics.full_valid_loss - fullAt15.full_valid_loss) < 1e-5, JSON.stringify(last));
    assert.ok(last.metrics.full_valid_mean_token_accuracy >= 0, JSON.stringify(last));
    assert.ok(last.metrics.valid_loss > 0, JSON.stringify(last)); // the latest batch check, at step 10

    assert.equal(done.result_files.length, 1);
    const fileId = done.result_files[0];
    const f = await s.call('GET', `/v1/files/${fileId}`);
    assert.equal(f.status, 200, f.text);
    assert.equal(f.json.purpose, 'fine-tune-results');
    assert.equal(f.json.filename, 'step_metrics.csv');
    const csv = await s.call('GET', `/v1/files/${fileId}/content`);
    assert.equal(csv.status, 200, csv.text);
    assert.equal(csv.text.length, f.json.bytes);
    const [head, ...rows] = csv.text.trim().split('\n').map((l) => l.split(','));
    assert.deepEqual(head, ['step', 'train_loss', 'train_accuracy', 'valid_loss', 'valid_mean_token_accuracy',
      'full_valid_loss', 'full_valid_mean_token_accuracy']);
    const steps = rows.map((r) => Number(r[0]));
    assert.deepEqual(steps, [...steps].sort((a, b) => a - b));
    assert.ok(steps.includes(5) && steps.includes(10) && steps.includes(15), steps.join());
    const row15 = rows.find((r) => r[0] === '15');
    assert.ok(Math.abs(Number(row15[5]) - fullAt15.full_valid_loss) < 1e-4, row15.join());
    assert.ok(Number(row15[1]) > 0);
    // another account sees no such file
    const other = s.account('someone-else');
    const hidden = await s.call('GET', `/v1/files/${fileId}/content`, { key: other });
    assert.equal(hidden.status, 404);
  });

  test('sample prompts given with the job: checked, kept, answered at each epoch without a validation file, in the estimate', { timeout: 300000 }, async () => {
    const train = await s.upload('train-own.jsonl', Buffer.from(sampleLines(0, 40).join('\n') + '\n'));
    assert.equal(train.status, 200, train.text);
    const base = { model: 'tiny', training_file: train.json.id };
    // bad values get a 400 in OpenAI's error shape naming the field, and nothing is created
    const long = 'x'.repeat(501);
    const bad = [
      ['a single string', 'sample_prompts'],
      [[], 'sample_prompts'],
      [['1', '2', '3', '4', '5', '6'], 'sample_prompts'],
      [['fine', 7], 'sample_prompts[1]'],
      [[''], 'sample_prompts[0]'],
      [[long], 'sample_prompts[0]'],
      [[[{ role: 'user', content: '' }]], 'sample_prompts[0][0].content'],
      [[[{ role: 'robot', content: 'hi' }]], 'sample_prompts[0][0].role'],
      [[[{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }]], 'sample_prompts[0][1].role'],
    ];
    const before = (await s.call('GET', '/v1/fine_tuning/jobs?limit=100')).json.data.length;
    for (const [value, param] of bad) {
      const r = await s.createJob({ ...base, sample_prompts: value });
      assert.equal(r.status, 400, `${JSON.stringify(value).slice(0, 80)}: ${r.text}`);
      assert.equal(r.json.error.param, param, r.text);
      assert.equal(r.json.error.code, 'invalid_request_error', r.text);
      assert.ok(r.json.error.message.length > 10, r.text);
    }
    assert.equal((await s.call('GET', '/v1/fine_tuning/jobs?limit=100')).json.data.length, before);

    // answering them is in the estimate (50 epochs: long enough for whole seconds to show it)
    const many = Array.from({ length: 5 }, (_, i) => `Review: ${'a fine and quiet film '.repeat(20)}${i}\nSentiment:`);
    const est = async (extra) => {
      const r = await s.call('POST', '/v1/fine_tuning/estimates', { body: { ...base, hyperparameters: { n_epochs: 50, batch_size: 8 }, ...extra } });
      assert.equal(r.status, 200, r.text);
      assert.ok(r.json.training, r.text);
      return r.json;
    };
    const plain = await est({});
    const withSamples = await est({ sample_prompts: many });
    assert.ok(withSamples.training.high_s > plain.training.high_s,
      `training ${JSON.stringify(plain.training)} -> ${JSON.stringify(withSamples.training)}`);
    assert.ok(withSamples.price.high >= plain.price.high, `${plain.price.high} -> ${withSamples.price.high}`);

    // a string prompt and a conversation; 40 x 2 epochs in batches of 8: epochs end at 5 and 10
    const prompts = [
      'Review: A quiet, moving film about two brothers.\nSentiment:',
      [{ role: 'system', content: 'Answer in one word.' }, { role: 'user', content: 'Was the film good?' }],
    ];
    const created = await s.createJob({ ...base, hyperparameters: { n_epochs: 2, batch_size: 8 }, sample_prompts: prompts });
    assert.equal(created.status, 200, created.text);
    assert.deepEqual(created.json.sample_prompts, prompts);
    assert.equal(created.json.validation_file, null);
    const done = await ended(s, created.json.id);
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    assert.deepEqual(done.sample_prompts, prompts);

    const samples = (await allEvents(s, done.id)).filter((e) => e.data && e.data.sample === true);
    const shown = [prompts[0], 'Was the film good?'];
    for (const e of samples) {
      assert.equal(e.type, 'message');
      assert.ok(shown.includes(e.data.prompt), JSON.stringify(e.data));
      assert.equal(typeof e.data.answer, 'string');
    }
    for (const prompt of shown) {
      const of = samples.filter((e) => e.data.prompt === prompt);
      assert.deepEqual(of.filter((e) => e.data.base).map((e) => e.data.step), [0], prompt);
      assert.deepEqual(of.filter((e) => !e.data.base).map((e) => e.data.step), [5, 10], prompt);
    }
    const baseEvent = samples.find((e) => e.data.base);
    assert.match(baseEvent.message, /^The base model's answer at step 0: /);
    // without a validation file there is no validation loss, only the answers
    const metrics = (await allEvents(s, done.id)).filter((e) => e.type === 'metrics');
    assert.ok(metrics.every((e) => !('full_valid_loss' in e.data)));
    // a job without its own prompts shows none
    const other = await s.createJob({ ...base, hyperparameters: { n_epochs: 1, batch_size: 8 } });
    assert.equal(other.status, 200, other.text);
    assert.deepEqual(other.json.sample_prompts, []);
    await ended(s, other.json.id);
  });

  test('early stopping on data made to overfit: succeeded early, best checkpoint, charged for the steps run', { timeout: 400000 }, async () => {
    // The validation set is the training set with every label flipped:
    // the better the model learns the training file, the worse it does there.
    const lines = sampleLines(0, 16);
    const flipped = lines.map((l) => {
      const o = JSON.parse(l);
      o.completion = o.completion === ' positive' ? ' negative' : ' positive';
      return JSON.stringify(o);
    });
    const train = await s.upload('overfit.jsonl', Buffer.from(lines.join('\n') + '\n'));
    const valid = await s.upload('flipped.jsonl', Buffer.from(flipped.join('\n') + '\n'));
    // bad settings get a 400 naming the field, and nothing is created
    const noValid = await s.createJob({ model: 'tiny', training_file: train.json.id,
      hyperparameters: { early_stopping: { patience: 2 } } });
    assert.equal(noValid.status, 400, noValid.text);
    assert.equal(noValid.json.error.param, 'hyperparameters.early_stopping');
    const badPatience = await s.createJob({ model: 'tiny', training_file: train.json.id,
      validation_file: valid.json.id, hyperparameters: { early_stopping: { patience: 0 } } });
    assert.equal(badPatience.status, 400, badPatience.text);
    assert.equal(badPatience.json.error.param, 'hyperparameters.early_stopping.patience');
    const badSplit = await s.createJob({ model: 'tiny', training_file: train.json.id,
      hyperparameters: { validation_split: 0.9 } });
    assert.equal(badSplit.status, 400, badSplit.text);
    assert.equal(badSplit.json.error.param, 'hyperparameters.validation_split');
    // 16 x 30 epochs in batches of 8: 60 steps planned, 2 an epoch
    const created = await s.createJob({
      model: 'tiny', training_file: train.json.id, validation_file: valid.json.id,
      hyperparameters: { n_epochs: 30, batch_size: 8, learning_rate_multiplier: 10,
        early_stopping: { patience: 2, min_delta: 0.01 } },
    });
    assert.equal(created.status, 200, created.text);
    assert.equal(created.json.progress.max_steps, 60);
    const done = await ended(s, created.json.id);
    assert.equal(done.status, 'succeeded', `${done.message}\n${s.output}`);
    const ran = done.progress.steps_done;
    assert.ok(ran < 60, `ran ${ran} of 60 steps`);

    const events = await allEvents(s, done.id);
    const stop = events.find((e) => e.data && e.data.early_stopped);
    assert.ok(stop, 'no early stop event');
    assert.equal(stop.data.steps_run, ran);
    assert.equal(stop.data.planned_steps, 60);
    assert.equal(stop.data.saved_steps, 60 - ran);
    assert.equal(stop.data.best_step, ran - 2 * 2); // patience 2 epochs of 2 steps
    assert.match(stop.message, /Stopping early saved \d+ steps/);

    // the best checkpoint is the one with the lowest full validation loss
    const ck = await s.call('GET', `/v1/fine_tuning/jobs/${done.id}/checkpoints?limit=100`);
    // (every checkpoint here is at an epoch's end: 2 steps an epoch)
    const bestCk = ck.json.data.find((c) => c.metrics.step === stop.data.best_step);
    assert.ok(bestCk, 'the best checkpoint is listed');
    for (const c of ck.json.data) {
      assert.ok(c.metrics.full_valid_loss >= bestCk.metrics.full_valid_loss - 0.01 - 1e-9,
        `step ${c.metrics.step} beats the best by more than min_delta`);
    }

    // charged for the steps run, not the plan
    const ledger = await s.call('GET', '/v1/billing/ledger?limit=100');
    assert.equal(ledger.status, 200, ledger.text);
    const rows = ledger.json.data.filter((r) => r.job === done.id);
    const charged = rows.filter((r) => r.kind === 'charge' && r.reason === 'training steps')
      .reduce((n, r) => n + r.steps, 0);
    assert.equal(charged, ran);
  });
});

// The trainer alone: its sample answers decode together (the default, or
// ALALLO_SAMPLE_ANSWERS=batched) or one at a time, with the same greedy
// answers; another value fails the attempt at its start and says which
// values it takes.
test('sample answers together or one at a time are the same; another choice is refused', () => {
  const dir = tmpdir('alallo-samples-');
  fs.writeFileSync(path.join(dir, 'train.jsonl'), sampleLines(0, 8).join('\n') + '\n');
  const config = (name) => {
    const file = path.join(dir, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify({
      model_dir: path.join(tinyModelsDir(), 'tiny'), train_file: path.join(dir, 'train.jsonl'),
      checkpoint_dir: path.join(dir, `ckpt-${name}`), out_dir: path.join(dir, `out-${name}`),
      batch_size: 4, n_epochs: 1, max_steps: 1, seq_len: 64, learning_rate: 0.001, seed: 1, threads: 1,
      sample_prompts: ['Review: a slow, dull film\nSentiment:', [{ role: 'user', content: 'Was it good?' }]],
    }));
    return file;
  };
  const answers = (mode) => {
    const env = { ...process.env, ALALLO_SAMPLE_ANSWERS: mode };
    if (!mode) delete env.ALALLO_SAMPLE_ANSWERS;
    const r = spawnSync(BIN, ['train', '--config', config(mode || 'default')], { encoding: 'utf8', timeout: 120000, env });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.equal(/sample answers at step/.test(r.stderr), mode !== '', r.stderr); // timed when set
    const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
    const samples = events.filter((e) => e.event === 'sample');
    for (const e of samples) assert.equal(typeof e.answer, 'string', JSON.stringify(e));
    return samples.map((e) => [e.step, e.prompt, e.answer]);
  };
  const together = answers('');
  assert.equal(together.length, 4, JSON.stringify(together)); // 2 prompts, before and after the step
  assert.deepEqual(answers('batched'), together);
  assert.deepEqual(answers('one-at-a-time'), together);
  const bad = spawnSync(BIN, ['train', '--config', config('bad')],
    { encoding: 'utf8', timeout: 120000, env: { ...process.env, ALALLO_SAMPLE_ANSWERS: 'sideways' } });
  assert.equal(bad.status, 3, bad.stdout + bad.stderr);
  assert.match(bad.stdout, /ALALLO_SAMPLE_ANSWERS is \\"sideways\\": it is \\"batched\\" or \\"one-at-a-time\\"/);
});
