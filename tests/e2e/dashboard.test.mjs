// The dashboard end to end: headless Chromium against the real
// `alallo serve` (its API, its local worker, the real trainer). Nothing is
// mocked. Screenshots of the Jobs tab and a job page go to
// build/e2e-artifacts/ (ALALLO_E2E_ARTIFACTS).
//
// Two servers: `busy` has the default local worker, so jobs train;
// `idle` starts with --local-worker none, so its jobs stay queued.
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
  sleep,
  startServe,
  until,
  uploadDataset,
  watchedPage,
} from './harness.mjs';

const EMPTY_LOG = 'No log yet. It appears once training starts.';
// The seven statuses of the help page.
const STATUSES = ['queued', 'running', 're-scheduling', 'cancelling', 'cancelled', 'succeeded', 'failed'];
// How long a small job may take to train on the local worker.
const TRAIN_TIMEOUT_MS = Number(process.env.ALALLO_E2E_TRAIN_TIMEOUT_MS || 240000);

let busy;
let idle;
let browser;
let page; // desktop page signed in on `busy`
let watchedId; // the job watched from queued to succeeded
const record = newRecord();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-e2e-data-'));
const trainFile = path.join(tmp, 'reviews.jsonl');
const longFile = path.join(tmp, 'long.jsonl');
const badFile = path.join(tmp, 'bad.jsonl');
fs.writeFileSync(longFile, dataset(200));
fs.writeFileSync(trainFile, dataset(24));
fs.writeFileSync(badFile, `${JSON.stringify({ prompt: 'a', completion: 'b' })}\n{"prompt":"no completion"}\n`);

before(async () => {
  const models = makeModels(tmp);
  // A priced local worker, so that estimates and charges are not all zero.
  busy = await startServe(['--models', models,
    '--local-worker', 'name=local,cpus=2,mem=4G,price=0.40,class=on-demand']);
  // An estimate needs capacity known: the local worker registers once its
  // start-up bench (two shapes, docs/worker.md "Speed") has run, seconds
  // after serve answers; an estimate before says why it has no time.
  await until('the local worker to register', async () =>
    (await apiCall(busy, 'GET', '/v1/workers')).data?.some((w) => w.name === 'local'), 60000, 200);
  idle = await startServe(['--models', models, '--local-worker', 'none']);
  browser = await launchBrowser();
  page = await watchedPage(browser, busy, record);
});

after(async () => {
  await browser?.close();
  await busy?.stop();
  await idle?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

function jobRow(p, name) {
  return p.locator('tr[data-id]', { has: p.locator('a.job-link', { hasText: name }) });
}

// Fills the New job form through the page and starts the job. Returns
// after the Jobs tab shows it.
async function createThroughPage(p, name, { epochs, batch, lr, file = trainFile } = {}) {
  await p.getByRole('link', { name: 'New job', exact: true }).first().click();
  await p.getByRole('heading', { name: 'New job' }).waitFor();
  await p.getByLabel('Name').fill(name);
  await p.getByLabel('Upload a data set').setInputFiles(file);
  await p.getByText(`Uploaded ${path.basename(file)}`).waitFor({ timeout: 30000 });
  assert.notEqual(await p.getByLabel('Data set', { exact: true }).inputValue(), '', 'the upload is selected as the data set');
  assert.notEqual(await p.getByLabel('Model').inputValue(), '', 'a base model is offered');
  if (epochs || batch || lr) {
    await p.getByText('Hyper-parameters').click();
    if (epochs) await p.getByLabel('Epochs').fill(String(epochs));
    if (batch) await p.getByLabel('Batch size').fill(String(batch));
    if (lr) await p.getByLabel('Learning-rate multiplier').fill(String(lr));
  }
  await p.getByRole('button', { name: 'Start' }).click();
  await p.waitForURL(/#\/jobs$/);
  await jobRow(p, name).waitFor({ timeout: 15000 });
}

// Starts the filled New job form; returns the job as the API lists it,
// after the Jobs tab shows it.
async function startAndFind(p, name) {
  await p.getByRole('button', { name: 'Start' }).click();
  await p.waitForURL(/#\/jobs$/);
  await jobRow(p, name).waitFor({ timeout: 15000 });
  const list = await apiCall(busy, 'GET', '/v1/fine_tuning/jobs?limit=100');
  const job = list.data.find((j) => j.name === name);
  assert.ok(job, `the job ${name} is listed`);
  return job;
}

test('the address serve prints signs in, then leaves the address bar', async () => {
  assert.ok(busy.printedSignin, `serve prints a sign-in address with #key=:\n${busy.output()}`);
  await page.goto(busy.signinUrl);
  await page.getByRole('heading', { name: 'Jobs' }).waitFor();
  assert.equal(await page.evaluate(() => localStorage.getItem('alallo.apiKey')), busy.key);
  assert.ok(!page.url().includes('key='), `the key is gone from the address: ${page.url()}`);
});

test('a bad line in an upload shows the server\'s line error', async () => {
  // Chromium logs the refused upload (400) as a console error; it is the
  // only one allowed, so this page keeps its own record.
  const own = newRecord();
  const p = await watchedPage(browser, busy, own);
  await p.goto(busy.signinUrl);
  await p.getByRole('heading', { name: 'Jobs' }).waitFor();
  await p.goto(`${busy.base}/#/new`);
  await p.getByLabel('Upload a data set').setInputFiles(badFile);
  const alert = p.getByRole('alert').filter({ hasText: 'Upload failed' });
  await alert.waitFor({ timeout: 15000 });
  assert.match(await alert.textContent(), /line 2 of bad\.jsonl/);
  await p.context().close();
  assert.ok(own.consoleErrors.every((e) => /status of 400/.test(e)), own.consoleErrors.join('\n'));
  assert.deepEqual(own.external, []);
});

test('estimate time and price shows ranges or the no-capacity sentence', async () => {
  await page.goto(`${busy.base}/#/new`);
  await page.getByLabel('Upload a data set').setInputFiles(trainFile);
  await page.getByText(/^Uploaded reviews\.jsonl/).waitFor({ timeout: 30000 });
  await page.getByRole('button', { name: 'Estimate time and price' }).click();
  const box = page.locator('.estimate');
  await until('an estimate', async () => /Time: .+/.test(await box.textContent()));
  const text = await box.textContent();
  assert.match(text, /Time: (under )?\d+ (min|h)/);
  assert.match(text, /Price: \$\d/);
});

test('a job created through the page goes from queued to succeeded without a reload', async () => {
  const name = `e2e-watch-${Date.now()}`;
  await page.goto(`${busy.base}/#/jobs`);
  await page.evaluate(() => {
    window.__sameDocument = true;
  });
  // 24 examples, 10 epochs, batch 2: 120 steps, a few seconds of training.
  await createThroughPage(page, name, { epochs: 10, batch: 2, lr: 5 });
  const row = jobRow(page, name);
  const seen = [];
  await until('the job to succeed on the Jobs tab', async () => {
    const s = (await row.locator('.badge').textContent()).trim();
    if (seen[seen.length - 1] !== s) seen.push(s);
    assert.ok(!['failed', 'cancelled'].includes(s), `job ended ${s}: ${await row.textContent()}`);
    return s === 'succeeded';
  }, TRAIN_TIMEOUT_MS, 200);
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was never reloaded');
  assert.ok(seen.length >= 2, `the row changed status while watched: ${seen.join(' -> ')}`);
  assert.ok(['queued', 'running'].includes(seen[0]), `first seen ${seen[0]}`);
  assert.ok(seen.every((s) => STATUSES.includes(s)), `only the seven statuses: ${seen.join(' -> ')}`);

  const id = await row.getAttribute('data-id');
  const job = await apiCall(busy, 'GET', `/v1/fine_tuning/jobs/${id}`);
  // The form's learning-rate multiplier reached the job.
  assert.equal(job.hyperparameters.learning_rate_multiplier, 5);
  const bar = row.locator('.progress');
  assert.equal(await bar.getAttribute('title'), `${job.progress.max_steps} steps`, 'hover shows the total steps');
  await bar.hover();
  assert.equal((await bar.locator('.pct').textContent()).trim(), '100%');
  assert.match(await row.textContent(), /Supervised fine-tuning, 16-bit/);
  // Under the list: how the account's estimates held, once a job finished.
  await until('the calibration line', async () =>
    /How estimates held, over your last .*finished job/.test((await page.locator('p.calibration').textContent()) || ''),
  30000, 200);
  await page.screenshot({ path: screenshotPath('jobs-tab.png'), fullPage: true });
});

test('the New job form\'s Advanced settings reach the job', async () => {
  const name = `e2e-advanced-${Date.now()}`;
  await page.goto(`${busy.base}/#/jobs`);
  await page.getByRole('link', { name: 'New job', exact: true }).first().click();
  await page.getByRole('heading', { name: 'New job' }).waitFor();
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Upload a data set').setInputFiles(trainFile);
  await page.getByText(`Uploaded ${path.basename(trainFile)}`).waitFor({ timeout: 30000 });
  await page.getByText('Advanced', { exact: true }).click();
  await page.getByLabel('Context (max_seq_len)').fill('128');
  await page.getByLabel('LoRA rank').fill('8');
  await page.getByLabel('Warm-up (share of the steps)').fill('0.1');
  await page.getByLabel('Packing: several short examples share a row').uncheck();
  await page.getByLabel('k_proj', { exact: true }).uncheck();
  await page.getByLabel('Learning-rate schedule').selectOption('linear');
  const job = await startAndFind(page, name);
  const hp = job.hyperparameters;
  assert.equal(hp.max_seq_len, 128);
  assert.equal(hp.lora_rank, 8);
  assert.equal(hp.warmup_ratio, 0.1);
  assert.equal(hp.packing, false);
  assert.equal(hp.lr_scheduler, 'linear');
  assert.deepEqual(hp.lora_target_modules, ['q_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']);
});

test('the goal Finish by sends its deadline, shows it in the estimate and on the job', async () => {
  const name = `e2e-finish-by-${Date.now()}`;
  await page.goto(busy.signinUrl); // signed in, also when run alone
  await page.getByRole('heading', { name: 'Jobs' }).waitFor();
  await page.getByRole('link', { name: 'New job', exact: true }).first().click();
  await page.getByRole('heading', { name: 'New job' }).waitFor();
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Upload a data set').setInputFiles(trainFile);
  await page.getByText(`Uploaded ${path.basename(trainFile)}`).waitFor({ timeout: 30000 });
  await page.locator('#goal-finish_by').check();
  // Without a time the form says so and sends nothing.
  await page.getByRole('button', { name: 'Estimate time and price' }).click();
  await page.getByRole('alert').filter({ hasText: 'Choose the date and time to finish by.' }).waitFor();
  // A day from now, to the minute, in the browser's local time.
  const at = new Date(Date.now() + 86400000);
  at.setSeconds(0, 0);
  const pad = (n) => String(n).padStart(2, '0');
  const local = `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
  await page.locator('#finish_by').fill(local);
  await page.getByRole('button', { name: 'Estimate time and price' }).click();
  const box = page.locator('.estimate');
  await until('an estimate with its deadline', async () => /Finish by: .+ \(done by .+ at the latest\)/.test(await box.textContent()));
  const job = await startAndFind(page, name);
  assert.equal(job.goal, 'finish_by');
  assert.equal(job.finish_by, Math.floor(at.getTime() / 1000));
  await page.goto(`${busy.base}/#/jobs/${job.id}`);
  await page.getByText(/^Finish by /).first().waitFor();
});

test('the job page shows status, progress, time left, price, log, loss curve, checkpoints, attempts', async () => {
  await page.goto(`${busy.base}/#/jobs`);
  const link = page.locator('a.job-link', { hasText: 'e2e-watch-' }).first();
  await link.click();
  await page.waitForURL(/#\/jobs\/ftjob-/);
  const id = decodeURIComponent(page.url().split('#/jobs/')[1]);
  watchedId = id;
  const job = await apiCall(busy, 'GET', `/v1/fine_tuning/jobs/${id}`);
  const log = await apiCall(busy, 'GET', `/v1/fine_tuning/jobs/${id}/log`);

  const summary = page.locator('dl.summary');
  await summary.getByText('succeeded', { exact: true }).waitFor();
  assert.equal(await summary.locator('.progress').getAttribute('title'), `${job.progress.max_steps} steps`);
  assert.ok(await summary.getByText('Time left (estimate)').isVisible());
  assert.match(await summary.textContent(), /Estimate: \$/);
  // What the user pays first, then the ledger's totals (job's own numbers).
  const cur = (job.price.currency || 'usd').toLowerCase() === 'usd';
  assert.ok(cur, 'the test server bills in USD');
  assert.match(await summary.textContent(),
    /Paid: \$\d+\.\d+ \(charged \$\d+\.\d+, refunded \$\d+\.\d+\)/);

  const logBox = page.getByLabel('Training log, newest lines at the bottom');
  await until('the log on the page', async () => (await logBox.textContent()).includes('step '));
  const shown = (await logBox.textContent()).trim();
  const lastLine = String(log).trim().split('\n').pop();
  assert.ok(shown.endsWith(lastLine), `newest line at the bottom: ${lastLine}`);
  const lossLines = String(log).split('\n').filter((l) => /step \d+\/\d+: loss /.test(l)).length;
  if (lossLines >= 2) {
    await page.locator('svg.chart path.line').waitFor();
    assert.match(await page.locator('svg.chart').getAttribute('aria-label'), /^Training loss from step/);
  }

  const attempts = page.locator('section', { has: page.getByRole('heading', { name: 'Attempts' }) });
  assert.ok(job.attempts.length >= 1);
  assert.match(await attempts.textContent(), new RegExp(job.attempts[0].worker));

  const ckpts = await apiCall(busy, 'GET', `/v1/fine_tuning/jobs/${id}/checkpoints`);
  const ckptSection = page.locator('section', { has: page.getByRole('heading', { name: 'Checkpoints' }) });
  assert.equal(await ckptSection.locator('tbody tr').count(), ckpts.data.length);

  await page.screenshot({ path: screenshotPath('job-page.png'), fullPage: true });
});

test('the fine-tuned model downloads from the job page (GGUF)', async () => {
  await page.goto(`${busy.base}/#/jobs/${watchedId}`);
  const button = page.getByRole('button', { name: 'Download the fine-tuned model as GGUF for llama.cpp' });
  await button.waitFor();
  const [download] = await Promise.all([page.waitForEvent('download', { timeout: 120000 }), button.click()]);
  assert.match(download.suggestedFilename(), /^e2e-watch-\d+\.gguf$/);
  const saved = path.join(tmp, 'model.gguf');
  await download.saveAs(saved);
  const head = fs.readFileSync(saved).subarray(0, 4).toString('latin1');
  assert.equal(head, 'GGUF', 'the file is a GGUF model');
});

test('Try it chats with the fine-tuned model, and shows each answer\'s time to first token and tokens/s', async () => {
  // The watched job learnt to end every answer after its label, so its
  // chat answers are empty; the speed of an answer needs tokens. A job
  // trained at a tiny learning rate stays near its randomly initialised
  // base, which answers at length.
  const file = await uploadDataset(busy, 'try.jsonl', dataset(8));
  const models = await apiCall(busy, 'GET', '/v1/models');
  const base = models.data.find((m) => m.kind === 'base' || !m.kind).id;
  let job = await apiCall(busy, 'POST', '/v1/fine_tuning/jobs', {
    model: base, training_file: file.id, name: 'e2e-try', hyperparameters: { n_epochs: 1, learning_rate_multiplier: 0.001 },
  });
  await until('the Try it job to end', async () => {
    job = await apiCall(busy, 'GET', `/v1/fine_tuning/jobs/${job.id}`);
    return ['succeeded', 'failed', 'cancelled'].includes(job.status);
  }, 180000, 1000);
  assert.equal(job.status, 'succeeded', job.message);
  await page.goto(`${busy.base}/#/jobs/${job.id}`);
  const failed = page.getByRole('alert').filter({ hasText: 'Could not generate' });
  const answers = page.getByLabel('Model answer');
  const speeds = page.getByLabel('Answer speed');
  // A first message the model answers with at least 2 tokens (greedy, so
  // the page gets the same answer), for a speed after the first token to
  // be shown: a briefly trained model may end some answers at once.
  const ask = (messages) => apiCall(busy, 'POST', '/v1/chat/completions', {
    model: job.fine_tuned_model, messages, max_tokens: 8, temperature: 0,
  });
  const candidates = ['Review: the service was good on day 3.', 'Review: the service was good on day 3.\nSentiment:',
    'the service was', 'good', 'Sentiment:', 'day 3'];
  const tried = [];
  for (const c of candidates) {
    const a = await ask([{ role: 'user', content: c }]);
    tried.push(`${JSON.stringify(c)}: ${a.usage.completion_tokens} tokens`);
    if (a.usage.completion_tokens >= 2) {
      tried.length = 0;
      tried.push(c);
      break;
    }
  }
  assert.equal(tried.length, 1, `no first message is answered with 2 tokens or more: ${tried.join(', ')}`);
  const messages = [];
  for (const [i, text] of [tried[0], 'And on day 4?'].entries()) {
    await page.getByLabel('Message', { exact: true }).fill(text);
    await page.getByLabel('Max tokens').fill('8');
    const sent = Date.now();
    await page.getByRole('button', { name: 'Send' }).click();
    await until(`answer ${i + 1} and its speed, or an error in Try it`, async () => {
      if (await failed.isVisible()) return true;
      return (await speeds.count()) >= i + 1;
    }, 60000);
    const wallMs = Date.now() - sent;
    if (await failed.isVisible()) assert.fail(await failed.textContent());
    const answer = await answers.nth(i).textContent();
    assert.ok(answer.length > 0);
    // The figures are the browser's own measure of this answer: the token
    // count is the server's for the same conversation (greedy, so the same
    // answer), the first token came within the time the test waited, and
    // the tokens after it at a speed that fits in that time.
    messages.push({ role: 'user', content: text });
    const same = await ask(messages);
    messages.push({ role: 'assistant', content: same.choices[0].message.content || '' });
    const speed = speeds.nth(i);
    const tokens = Number(await speed.getAttribute('data-tokens'));
    const tps = await speed.getAttribute('data-tokens-per-second');
    const line = await speed.textContent();
    assert.equal(tokens, same.usage.completion_tokens, line);
    if (tokens === 0) { // an answer ended at once has no first token
      assert.equal(line, '0 tokens');
      continue;
    }
    const ttft = Number(await speed.getAttribute('data-ttft-ms'));
    assert.ok(ttft > 0 && ttft <= wallMs, `time to first token ${ttft} ms within the ${wallMs} ms waited (${line})`);
    assert.match(line, new RegExp(`^First token after ${Math.round(ttft)} ms · ${tokens} tokens?`));
    if (i === 0) assert.ok(tokens >= 2, line);
    if (tokens >= 2 && await speed.getAttribute('data-together') === 'true') {
      // a short answer made faster than the browser's reads arrives in one
      // read: it has no speed the browser saw, and the line says so
      assert.equal(tps, '', line);
      assert.match(line, new RegExp(` · ${tokens} tokens, all at once$`));
    } else if (tokens >= 2) {
      const rate = Number(tps);
      assert.ok(rate > 0 && Number.isFinite(rate), `tokens/s ${tps}`);
      assert.ok((tokens - 1) / rate * 1000 <= wallMs - ttft + 1, `${tokens - 1} tokens at ${rate}/s fit in ${wallMs - ttft} ms`);
      assert.match(line, new RegExp(` at ${rate.toFixed(1)} tokens/s$`));
    } else {
      assert.equal(tps, '', 'no speed for a single token');
    }
  }
  // Both of the user's messages are on the page, in order, and New chat clears them.
  const mine = page.getByLabel('Your message');
  assert.equal(await mine.count(), 2);
  assert.equal(await mine.nth(1).textContent(), 'And on day 4?');
  await page.getByRole('button', { name: 'New chat' }).click();
  assert.equal(await mine.count(), 0);
});

test('cancel a running job: the cost is stated, then it is cancelled', async () => {
  const name = `e2e-cancel-${Date.now()}`;
  await page.goto(`${busy.base}/#/jobs`);
  // 200 examples, 50 epochs, batch 1: 10,000 steps, minutes of training,
  // so it is still running when cancelled.
  await createThroughPage(page, name, { epochs: 50, batch: 1, file: longFile });
  await jobRow(page, name).locator('a.job-link').click();
  const summary = page.locator('dl.summary');
  await summary.getByText('running', { exact: true }).waitFor({ timeout: TRAIN_TIMEOUT_MS });
  const cost = page.locator('#cancel-cost');
  assert.match(await cost.textContent(), /^Cancelling now (costs|is free)/);
  // A running job's page, with its time left and loss curve, for the record.
  await page.locator('svg.chart path.line').waitFor({ timeout: 60000 });
  await page.screenshot({ path: screenshotPath('job-page-running.png'), fullPage: true });
  assert.match(await cost.textContent(), /^Cancelling now (costs|is free)/);
  const cancel = page.getByRole('button', { name: 'Cancel job' });
  assert.equal(await cancel.getAttribute('aria-describedby'), 'cancel-cost');
  await cancel.click();
  await summary.getByText('cancelled', { exact: true }).waitFor({ timeout: 60000 });
  assert.equal(await cancel.isVisible(), false, 'no Cancel button once cancelled');
});

test('a queued job: empty-log sentence, free cancel, then cancelled', async () => {
  const file = await uploadDataset(idle, 'reviews.jsonl', dataset(24));
  const models = await apiCall(idle, 'GET', '/v1/models');
  const model = models.data.find((m) => m.kind === 'base' || !m.kind).id;
  const job = await apiCall(idle, 'POST', '/v1/fine_tuning/jobs', {
    model, training_file: file.id, name: 'e2e-queued', precision: '16-bit', goal: 'lowest_cost',
  });
  const p = await watchedPage(browser, idle, record);
  await p.goto(`${idle.signinUrl}`);
  await p.getByRole('heading', { name: 'Jobs' }).waitFor();
  await p.goto(`${idle.base}/#/jobs/${job.id}`);
  const summary = p.locator('dl.summary');
  await summary.getByText('queued', { exact: true }).waitFor();
  const logBox = p.getByLabel('Training log, newest lines at the bottom');
  await until('the empty-log sentence', async () => (await logBox.textContent()) === EMPTY_LOG);
  assert.match(await summary.textContent(), /Waiting for capacity|Starting/);
  assert.equal(await p.locator('#cancel-cost').textContent(),
    'Cancelling now costs nothing: the job has not started training.');
  await p.getByRole('button', { name: 'Cancel job' }).click();
  await summary.getByText('cancelled', { exact: true }).waitFor({ timeout: 15000 });
  await p.context().close();
});

test('polling updates rows in place and keeps the scroll position (phone width)', async () => {
  const file = await uploadDataset(idle, 'reviews.jsonl', dataset(24));
  const models = await apiCall(idle, 'GET', '/v1/models');
  const model = models.data.find((m) => m.kind === 'base' || !m.kind).id;
  for (let i = 0; i < 12; i++) {
    await apiCall(idle, 'POST', '/v1/fine_tuning/jobs', {
      model, training_file: file.id, name: `e2e-scroll-${i}`, precision: '4-bit', goal: 'fastest_finish',
    });
  }
  const p = await watchedPage(browser, idle, record, { width: 390, height: 700 });
  await p.goto(idle.signinUrl);
  await jobRow(p, 'e2e-scroll-0').waitFor();
  await p.evaluate(() => {
    document.querySelector('tr[data-id]:last-child').__marker = 'kept';
    window.scrollTo(0, 600);
  });
  const y0 = await p.evaluate(() => window.scrollY);
  assert.ok(y0 > 0, 'the list is long enough to scroll');
  // A new job arrives at the top while the person reads further down.
  await apiCall(idle, 'POST', '/v1/fine_tuning/jobs', {
    model, training_file: file.id, name: 'e2e-scroll-new', precision: '4-bit', goal: 'fastest_finish',
  });
  await jobRow(p, 'e2e-scroll-new').waitFor({ timeout: 10000 });
  await sleep(3500); // one more poll
  assert.equal(await p.evaluate(() => document.querySelector('tr[data-id]:last-child').__marker), 'kept',
    'rows are updated in place, not rebuilt');
  const y1 = await p.evaluate(() => window.scrollY);
  assert.ok(Math.abs(y1 - y0) < 400, `scroll position kept (${y0} -> ${y1})`);
  await p.screenshot({ path: screenshotPath('jobs-tab-phone.png'), fullPage: false });
  await p.context().close();
});

test('without a key the page asks for one; a wrong key is refused', async () => {
  // Chromium logs every refused fetch as a console error; the 401 this test
  // provokes on purpose is the only one allowed, so it keeps its own record.
  const own = newRecord();
  const p = await watchedPage(browser, idle, own);
  await p.goto(`${idle.base}/`);
  await p.getByRole('heading', { name: 'Sign in' }).waitFor();
  await p.getByLabel('API key').fill('not-a-key');
  await p.getByRole('button', { name: 'Sign in' }).click();
  await p.getByText('That API key was not accepted.').waitFor();
  await p.getByLabel('API key').fill(idle.key);
  await p.getByRole('button', { name: 'Sign in' }).click();
  await p.getByRole('heading', { name: 'Jobs' }).waitFor();
  assert.equal(await p.evaluate(() => localStorage.getItem('alallo.apiKey')), idle.key);
  await p.context().close();
  assert.ok(own.consoleErrors.every((e) => /status of 401/.test(e)), own.consoleErrors.join('\n'));
  assert.deepEqual(own.external, []);
});

test('with no capacity, the estimate says the job would wait', async () => {
  const p = await watchedPage(browser, idle, record);
  await p.goto(idle.signinUrl);
  await p.getByRole('heading', { name: 'Jobs' }).waitFor();
  await p.goto(`${idle.base}/#/new`);
  await p.getByLabel('Upload a data set').setInputFiles(trainFile);
  await p.getByText('Uploaded reviews.jsonl').waitFor({ timeout: 30000 });
  await p.getByRole('button', { name: 'Estimate time and price' }).click();
  const sentence = 'No capacity is free right now; the job would wait in the queue.';
  await until('the no-capacity sentence', async () => (await p.locator('.estimate').textContent()) === sentence,
    30000).catch(async (e) => {
    throw new Error(`${e.message}; the form reads: ${await p.locator('form').innerText()}`);
  });
  await p.context().close();
});

test('keyboard only: Tab to a job, Enter opens its page, focus is visible', async () => {
  await page.goto(`${busy.base}/#/jobs`);
  await page.locator('a.job-link').first().waitFor();
  await page.locator('body').focus();
  let onJob = false;
  for (let i = 0; i < 20 && !onJob; i++) {
    await page.keyboard.press('Tab');
    onJob = await page.evaluate(() => document.activeElement?.classList.contains('job-link'));
  }
  assert.ok(onJob, 'a job link is reachable with Tab');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, 'none', 'the focused link shows where focus is');
  await page.keyboard.press('Enter');
  await page.waitForURL(/#\/jobs\/ftjob-/);
  await until('focus on the job heading', () => page.evaluate(() => document.activeElement?.tagName === 'H1'));
});

test('every control has an accessible name', async () => {
  const unnamed = async () => page.evaluate(() => {
    const bad = [];
    for (const e of document.querySelectorAll('a, button, input, select, textarea')) {
      if (e.closest('[hidden]') || e.type === 'hidden') continue;
      const labelled = e.labels && e.labels.length > 0;
      const name = e.getAttribute('aria-label') || (e.textContent || '').trim() || (labelled ? 'label' : '');
      if (!name) bad.push(e.outerHTML.slice(0, 120));
    }
    return bad;
  });
  await page.goto(`${busy.base}/#/jobs/${watchedId}`);
  await page.getByText('Download the model').waitFor();
  assert.deepEqual(await unnamed(), []);
  await page.goto(`${busy.base}/#/new`);
  await page.getByLabel('Model').waitFor();
  assert.deepEqual(await unnamed(), []);
  await page.goto(`${busy.base}/#/jobs`);
  await page.locator('a.job-link').first().waitFor();
  assert.deepEqual(await unnamed(), []);
});

test('no console errors and no request left the server', () => {
  assert.deepEqual(record.consoleErrors, []);
  assert.deepEqual(record.external, []);
});
