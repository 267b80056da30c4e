// The job page's loss curve with validation, in the browser: headless
// Chromium against the real `alallo serve` and its local worker (nothing
// mocked). A job with a validation file draws the training loss, the
// validation loss on a batch, the full validation loss at each epoch's end
// and the epoch boundaries; the Jobs tab shows the latest validation loss;
// the Sample answers section the model's answers beside the base model's,
// for validation prompts and for prompts given with a job that has no
// validation file, and a reinforcement job's with the grader's score.
// A screenshot goes to build/e2e-artifacts/ (ALALLO_E2E_ARTIFACTS).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  apiCall,
  dataset,
  launchBrowser,
  makeModels,
  newRecord,
  screenshotPath,
  startServe,
  until,
  uploadDataset,
  watchedPage,
} from './harness.mjs';

const TRAIN_TIMEOUT_MS = Number(process.env.ALALLO_E2E_TRAIN_TIMEOUT_MS || 240000);

let srv;
let browser;
let page;
const record = newRecord();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-e2e-watch-'));

before(async () => {
  srv = await startServe(['--models', makeModels(tmp), '--local-worker', 'name=local,cpus=2,mem=4G']);
  browser = await launchBrowser();
  page = await watchedPage(browser, srv, record);
});

after(async () => {
  await browser?.close();
  await srv?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('the loss curve shows validation and epoch boundaries; the Jobs tab the latest validation loss', { timeout: TRAIN_TIMEOUT_MS + 60000 }, async () => {
  const train = await uploadDataset(srv, 'train.jsonl', dataset(24));
  const valid = await uploadDataset(srv, 'valid.jsonl', dataset(30).split('\n').slice(24).join('\n'));
  // 24 examples in batches of 8: 3 steps an epoch, 15 steps; a batch check at step 10
  const job = await apiCall(srv, 'POST', '/v1/fine_tuning/jobs', {
    model: 'alallo-tiny', training_file: train.id, validation_file: valid.id,
    hyperparameters: { n_epochs: 5, batch_size: 8 },
  });
  await until('the job to succeed', async () => {
    const j = await apiCall(srv, 'GET', `/v1/fine_tuning/jobs/${job.id}`);
    if (j.status === 'failed' || j.status === 'cancelled') throw new Error(`job ${j.status}: ${j.message}\n${srv.output()}`);
    return j.status === 'succeeded';
  }, TRAIN_TIMEOUT_MS);

  await page.goto(srv.signinUrl);
  await page.getByRole('heading', { name: 'Jobs' }).waitFor();
  const cell = page.locator(`tr[data-id="${job.id}"] .valid-loss`);
  await cell.waitFor({ timeout: 30000 });
  assert.match(await cell.textContent(), /^validation loss \d+\.\d{4}$/);

  await page.goto(`${srv.base}/#/jobs/${job.id}`);
  const chart = page.locator('svg.chart');
  await chart.locator('path.line.full').waitFor({ timeout: 60000 });
  assert.equal(await chart.locator('path.line.valid').count(), 1, 'the batch validation line');
  assert.equal(await chart.locator('circle.dot.valid').count(), 1, 'one batch check, at step 10');
  assert.equal(await chart.locator('circle.dot.full').count(), 5, 'a full validation loss each epoch');
  assert.equal(await chart.locator('line.epoch').count(), 4, 'the boundaries between 5 epochs');
  assert.match(await chart.getAttribute('aria-label'), /Full validation loss [0-9.]+ at step 15\./);
  const legend = await page.locator('.chart-legend').textContent();
  assert.match(legend, /full validation loss/);
  assert.match(legend, /epoch boundary/);
  // sample answers: a table per validation prompt, the base model's answer
  // first, then one per epoch's end
  const samples = page.locator('table.samples');
  await samples.first().waitFor({ timeout: 30000 });
  assert.equal(await samples.count(), 3, 'the first three validation prompts');
  const rows = await samples.first().locator('tbody tr td:first-child').allTextContents();
  assert.deepEqual(rows, ['Base model', 'Step 3', 'Step 6', 'Step 9', 'Step 12', 'Step 15']);
  await page.screenshot({ path: screenshotPath('job-page-validation-curve.png'), fullPage: true });
  assert.deepEqual(record.consoleErrors, []);
  assert.deepEqual(record.external, []);
});

test('sample prompts given with the job: answered beside the base model without a validation file', { timeout: TRAIN_TIMEOUT_MS + 60000 }, async () => {
  const train = await uploadDataset(srv, 'train-own.jsonl', dataset(16));
  const prompts = [
    'Review: the soup was cold and late.\nSentiment:',
    [{ role: 'user', content: 'How was the service?' }],
  ];
  // 16 examples in batches of 8: 2 steps an epoch, 6 steps
  const job = await apiCall(srv, 'POST', '/v1/fine_tuning/jobs', {
    model: 'alallo-tiny', training_file: train.id, sample_prompts: prompts,
    hyperparameters: { n_epochs: 3, batch_size: 8 },
  });
  assert.deepEqual(job.sample_prompts, prompts);
  await until('the job to succeed', async () => {
    const j = await apiCall(srv, 'GET', `/v1/fine_tuning/jobs/${job.id}`);
    if (j.status === 'failed' || j.status === 'cancelled') throw new Error(`job ${j.status}: ${j.message}\n${srv.output()}`);
    return j.status === 'succeeded';
  }, TRAIN_TIMEOUT_MS);

  await page.goto(`${srv.base}/#/jobs/${job.id}`);
  const samples = page.locator('table.samples');
  await samples.first().waitFor({ timeout: 30000 });
  assert.equal(await samples.count(), 2, 'a table per prompt given');
  const captions = await samples.locator('caption').allTextContents();
  assert.deepEqual(captions.map((c) => c.replace(/\s+/g, ' ').trim()),
    ['Prompt: Review: the soup was cold and late. Sentiment:', 'Prompt: How was the service?']);
  for (let i = 0; i < 2; i++) {
    const rows = await samples.nth(i).locator('tbody tr td:first-child').allTextContents();
    assert.deepEqual(rows, ['Base model', 'Step 2', 'Step 4', 'Step 6']);
    // every answer cell says something, an empty answer included
    for (const cell of await samples.nth(i).locator('tbody tr td:nth-child(2)').allTextContents()) {
      assert.ok(cell.length > 0, 'an empty cell');
    }
  }
  assert.equal(await page.getByText('Sample answers appear when training starts').isVisible(), false);
  await page.screenshot({ path: screenshotPath('job-page-own-sample-prompts.png'), fullPage: true });
  assert.deepEqual(record.consoleErrors, []);
  assert.deepEqual(record.external, []);
});

test('a reinforcement job: its sample answers show the grader score', { timeout: TRAIN_TIMEOUT_MS + 60000 }, async () => {
  const line = (q) => JSON.stringify({ messages: [{ role: 'user', content: q }], reference: 'the' });
  const prompts = await uploadDataset(srv, 'prompts.jsonl', `${line('Review the soup')}\n${line('Review the day')}\n`);
  // 2 prompts, 2 a step, 1 epoch: one step, validated before it and after it
  const job = await apiCall(srv, 'POST', '/v1/fine_tuning/jobs', {
    model: 'alallo-tiny', training_file: prompts.id,
    method: { type: 'reinforcement', reinforcement: {
      grader: { type: 'string_check', name: 'says the', input: '{{sample.output_text}}',
        reference: '{{item.reference}}', operation: 'ilike' },
      hyperparameters: { n_epochs: 1, batch_size: 2, compute_multiplier: 0.5,
        reasoning_effort: 'low', eval_interval: 1 } } },
  });
  assert.equal(job.method?.type, 'reinforcement', JSON.stringify(job));
  await until('the job to succeed', async () => {
    const j = await apiCall(srv, 'GET', `/v1/fine_tuning/jobs/${job.id}`);
    if (j.status === 'failed' || j.status === 'cancelled') throw new Error(`job ${j.status}: ${j.message}\n${srv.output()}`);
    return j.status === 'succeeded';
  }, TRAIN_TIMEOUT_MS);
  const events = await apiCall(srv, 'GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=100`);
  const graded = events.data.filter((e) => e.data?.sample === true && typeof e.data.score === 'number');
  assert.equal(graded.length, 2, JSON.stringify(events.data));

  await page.goto(srv.signinUrl);
  await page.getByRole('heading', { name: 'Jobs' }).waitFor();
  await page.goto(`${srv.base}/#/jobs/${job.id}`);
  const samples = page.locator('table.samples');
  await samples.first().waitFor({ timeout: 30000 });
  assert.equal(await samples.count(), 1, 'the first validation prompt');
  assert.deepEqual(await samples.first().locator('thead th').allTextContents(), ['Model', 'Answer', 'Score']);
  assert.deepEqual(await samples.first().locator('tbody tr td:first-child').allTextContents(), ['Base model', 'Step 1']);
  for (const cell of await samples.first().locator('tbody tr td:nth-child(3)').allTextContents()) {
    assert.match(cell, /^[01]$/, 'a string_check scores 0 or 1');
  }
  await page.screenshot({ path: screenshotPath('job-page-rft-sample-scores.png'), fullPage: true });
  assert.deepEqual(record.consoleErrors, []);
  assert.deepEqual(record.external, []);
});
