// The dashboard's pure modules (web/js/format.js, cancel.js, loss.js,
// chart.js geometry), checked in node without a browser. These are the rules
// the pages state to people: money, the cancel cost, the hover text, the loss
// points the curve is drawn from.
import test from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = process.env.ALALLO_ROOT || path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const load = (name) => import(pathToFileURL(path.join(root, 'web/js', name)).href);
const format = await load('format.js');
const { cancelCost } = await load('cancel.js');
const { parseLoss } = await load('loss.js');
const { lossGeometry, niceTicks } = await load('chart.js');
const { readAdvanced, TARGET_MODULES } = await load('advanced.js');
const { answerSpeed, speedText, sseEvents } = await load('stream_speed.js');

test('money: dollars with cents, tiny amounts keep three significant digits', () => {
  assert.equal(format.formatMoney(0), '$0.00');
  assert.equal(format.formatMoney(1.5), '$1.50');
  assert.equal(format.formatMoney(0.42, 'usd'), '$0.42');
  assert.equal(format.formatMoney(0.00312), '$0.00312');
  assert.equal(format.formatMoney(2, 'EUR'), '2.00 EUR');
  assert.equal(format.formatMoney(null), '—');
  assert.equal(format.formatMoney(NaN), '—');
});

test('money ranges read "A to B", equal ends once', () => {
  assert.equal(format.formatMoneyRange(0.1, 0.25), '$0.10 to $0.25');
  assert.equal(format.formatMoneyRange(0.1, 0.1), '$0.10');
  assert.equal(format.formatMoneyRange(0.101, 0.104), '$0.10');
  assert.equal(format.formatMoneyRange(null, 0.3), '$0.30');
});

test('calibration line: shares of jobs inside their ranges, and how wide', () => {
  assert.equal(format.calibrationText(null), '');
  assert.equal(format.calibrationText({ jobs: 0, time: {}, price: {} }), '');
  assert.equal(format.calibrationText({ jobs: 1, time: { inside: 1, median_width: 1.8 }, price: { inside: 0 } }),
    'How estimates held, over your last finished job: time inside the range 1 of 1 (100%), price inside the range 0 of 1 (0%). Time ranges were typically 1.8× wide.');
  assert.equal(format.calibrationText({ jobs: 12, time: { inside: 11, median_width: null }, price: { inside: 12 } }),
    'How estimates held, over your last 12 finished jobs: time inside the range 11 of 12 (92%), price inside the range 12 of 12 (100%).');
});

test('training method is "Supervised fine-tuning" with the precision', () => {
  assert.equal(format.methodLabel({ precision: '4-bit' }), 'Supervised fine-tuning, 4-bit');
  assert.equal(format.methodLabel({ precision: '16-bit', training_method: 'Supervised fine-tuning' }),
    'Supervised fine-tuning, 16-bit');
  assert.equal(format.methodLabel({}), 'Supervised fine-tuning');
});

test('progress hover text is the total number of steps', () => {
  assert.equal(format.stepsTitle(120), '120 steps');
  assert.equal(format.stepsTitle(1), '1 step');
  assert.equal(format.stepsTitle(0), 'Number of steps not known yet');
  assert.equal(format.stepsTitle(undefined), 'Number of steps not known yet');
});

test('progress percent: server figure, clamped, succeeded reads 100', () => {
  assert.equal(format.progressPercent({ status: 'running', progress: { percent: 33.7 } }), 33);
  assert.equal(format.progressPercent({ status: 'running', progress: { steps_done: 30, max_steps: 120 } }), 25);
  assert.equal(format.progressPercent({ status: 'succeeded', progress: { steps_done: 7, max_steps: 120 } }), 100);
  assert.equal(format.progressPercent({ status: 'queued', progress: { percent: 140 } }), 100);
  assert.equal(format.progressPercent({ status: 'queued' }), 0);
});

test('time left: the server text while active, a dash once ended', () => {
  const tl = { low_s: 600, high_s: 1200, text: '10 min to 20 min', basis: 'pace' };
  assert.equal(format.timeLeftText({ status: 'running', time_left: tl }), '10 min to 20 min');
  assert.equal(format.timeLeftText({ status: 'succeeded', time_left: tl }), '—');
  assert.equal(format.timeLeftText({ status: 'cancelling', time_left: tl }), '—');
  assert.equal(format.timeLeftText({ status: 'queued', time_left: null }), '—');
});

test('list price: estimate while active, net charge when ended, failed is free', () => {
  const estimate = { price: { low: 0.1, high: 0.3, currency: 'USD' } };
  assert.deepEqual(format.listPrice({ status: 'running', estimate }), { text: '$0.10 to $0.30', note: 'estimate' });
  assert.deepEqual(format.listPrice({ status: 'succeeded', estimate, price: { charged: 0.2, refunded: 0.05 } }),
    { text: '$0.15', note: 'charged' });
  assert.deepEqual(format.listPrice({ status: 'failed', estimate, price: { charged: 0.2, refunded: 0 } }),
    { text: '$0.00', note: 'not charged' });
  assert.deepEqual(format.listPrice({ status: 'cancelled', price: { charged: 0, refunded: 0 } }),
    { text: '$0.00', note: 'charged' });
});

test('price line: what the user pays first, then charged and refunded, adding up', () => {
  assert.equal(format.priceLine({ charged: 0.06, refunded: 0.0579 }, 'USD'),
    '$0.0021 (charged $0.06, refunded $0.0579)');
  assert.equal(format.priceLine({ charged: 0.05, refunded: 0 }, 'usd'),
    '$0.05 (charged $0.05, refunded $0.00)');
  assert.equal(format.priceLine({ charged: 0.2, refunded: 0.2 }, 'EUR'),
    '0.00 EUR (charged 0.20 EUR, refunded 0.20 EUR)');
  assert.equal(format.priceLine(undefined), '$0.00 (charged $0.00, refunded $0.00)');
});

test('cancel cost follows the money rules of SPEC §2', () => {
  const now = 10000;
  const base = {
    created_at: now - 600,
    estimate: { time: { low_s: 900, high_s: 1800 }, price: { low: 0.2, high: 0.4, currency: 'USD' } },
    progress: { steps_done: 30, max_steps: 120 },
    price: { charged: 0, refunded: 0, currency: 'USD' },
  };
  const queued = cancelCost({ ...base, status: 'queued' }, now);
  assert.equal(queued.free, true);
  assert.match(queued.text, /costs nothing/);

  const running = cancelCost({ ...base, status: 'running' }, now);
  assert.equal(running.free, false);
  assert.equal(running.text, 'Cancelling now costs about $0.05 to $0.10, the price of the 30 steps completed so far.');

  const exact = cancelCost({ ...base, status: 'running', price: { ...base.price, cancel_now: 0.07 } }, now);
  assert.equal(exact.text, 'Cancelling now costs $0.07, the price of the 30 steps completed so far.');

  const late = cancelCost({ ...base, status: 'running', created_at: now - 1801 }, now);
  assert.equal(late.free, true);
  assert.match(late.text, /free: the job has run past the upper end of its estimated time/);

  const noSteps = cancelCost({ ...base, status: 're-scheduling', progress: { steps_done: 0, max_steps: 120 } }, now);
  assert.equal(noSteps.free, true);

  assert.equal(cancelCost({ ...base, status: 'succeeded' }, now), null);
  assert.equal(cancelCost({ ...base, status: 'cancelling' }, now), null);
});

test('loss points come from "step N/M: loss X" lines, latest value per step', () => {
  const log = [
    'loading model',
    'step 10/40: loss 2.5000',
    '2026-01-01T00:00:00Z step 20/40: loss 2.1',
    'saved checkpoint at step 20',
    'step 30/40: loss nan',
    'step 20/40: loss 2.0',
    'step 40/40: loss 1.25e0',
    'training finished: 40 steps, final loss 1.25',
  ].join('\n');
  const { points, maxSteps } = parseLoss(log);
  assert.equal(maxSteps, 40);
  assert.deepEqual(points, [
    { step: 10, loss: 2.5 },
    { step: 20, loss: 2.0 },
    { step: 40, loss: 1.25 },
  ]);
  const none = { points: [], maxSteps: 0, valid: [], full: [], epochs: [] };
  assert.deepEqual(parseLoss('No log yet. It appears once training starts.'), none);
  assert.deepEqual(parseLoss(undefined), none);
});

test('a reinforcement job\'s log: its reward curve and validation rewards', () => {
  const log = [
    'validation reward before training: 0.3125',
    'step 1/10: reward 0.3750 (spread 0.4841), answers 8.9 tokens, KL 0.0000',
    'step 5/10: reward 0.6250 (spread 0.4841), answers 8.9 tokens, KL 0.0000, validation reward 0.8125',
    'step 10/10: reward 1.0000 (spread 0.0000), answers 9.0 tokens, KL 0.0000, validation reward 1.0000; graders: a 1.000',
  ].join('\n');
  assert.deepEqual(parseLoss(log), {
    points: [{ step: 1, loss: 0.375 }, { step: 5, loss: 0.625 }, { step: 10, loss: 1 }],
    maxSteps: 10,
    valid: [{ step: 5, loss: 0.8125 }, { step: 10, loss: 1 }],
    full: [],
    epochs: [],
    kind: 'reward',
  });
});

test('validation in the log: a batch\'s loss, the full loss at epochs\' ends, epoch boundaries', () => {
  const log = [
    'step 5: full validation loss 2.5000, token accuracy 0.1000',
    'step 10/15: loss 2.1000, validation loss 2.3000',
    'step 10: full validation loss 2.2000, token accuracy 0.2000',
    'step 15/15: loss 1.9000',
    'step 15: full validation loss 2.0000, token accuracy 0.3000',
  ].join('\n');
  const l = parseLoss(log);
  assert.deepEqual(l.points, [{ step: 10, loss: 2.1 }, { step: 15, loss: 1.9 }]);
  assert.deepEqual(l.valid, [{ step: 10, loss: 2.3 }]);
  assert.deepEqual(l.full.map((p) => p.step), [5, 10, 15]);
  assert.deepEqual(l.epochs, [5, 10], 'the last step ends the run, not a boundary drawn');
  const g = lossGeometry(l.points, l.maxSteps, l);
  assert.equal(g.fullDots.length, 3);
  assert.equal(g.epochXs.length, 2);
  assert.ok(g.validPath.startsWith('M'));
  // the validation losses are inside the plot: the y range covers them
  for (const d of g.fullDots) assert.ok(d.y >= 12 && d.y <= 260 - 36, `y ${d.y} inside`);
  // the full loss of 2.5 is above (smaller y) the training loss of 1.9
  assert.ok(g.fullDots[0].y < g.last.y);
});

test('loss chart geometry: inside the plot, falling loss goes down the page', () => {
  assert.equal(lossGeometry([{ step: 10, loss: 2 }], 40), null);
  const g = lossGeometry([{ step: 10, loss: 2.5 }, { step: 20, loss: 2 }, { step: 40, loss: 1.25 }], 40);
  const coords = g.path.split(' ').map((s) => s.slice(1).split(',').map(Number));
  assert.equal(coords.length, 3);
  for (const [x, y] of coords) {
    assert.ok(x >= 56 && x <= 640 - 24, `x ${x} inside`);
    assert.ok(y >= 12 && y <= 260 - 36, `y ${y} inside`);
  }
  assert.ok(coords[0][1] < coords[2][1], 'lower loss is drawn lower on the page (larger y)');
  assert.equal(g.last.x, coords[2][0]);
  assert.equal(g.last.x, 640 - 24, 'the latest step ends the axis');
  assert.ok(g.xTicks.some((t) => t.label === '40'));
  // Early in a long job the curve still spans the plot, not a sliver of it.
  const early = lossGeometry([{ step: 10, loss: 5.6 }, { step: 30, loss: 5.5 }], 10000);
  assert.equal(early.last.x, 640 - 24);
  assert.deepEqual(niceTicks(0, 100, 5), [0, 20, 40, 60, 80, 100]);
});

test('a job held by the cluster keeps the help page message, with the reason beside it', () => {
  assert.equal(format.messageText({ message: 'Waiting for capacity', engine_reason: 'Waiting for free GPUs, CPUs or memory on the cluster' }),
    'Waiting for capacity (cluster: Waiting for free GPUs, CPUs or memory on the cluster)');
  assert.equal(format.messageText({ message: 'Starting', engine_reason: null }), 'Starting');
  assert.equal(format.messageText({ message: null }), '');
});

test('the pools line of the Jobs tab: slots in use and pending attempts per pool', () => {
  assert.equal(format.poolsText([]), '');
  assert.equal(format.poolsText(undefined), '');
  assert.equal(format.poolsText([
    { name: 'od', class: 'on-demand', slots: 2, in_use: 1, pending: 1 },
    { name: 'sp', class: 'spot', slots: 4, in_use: 0, pending: 0 },
  ]), 'Pools: od (on-demand) 1 of 2 slots in use, 1 pending · sp (spot) 0 of 4 slots in use');
});

test('Advanced settings: empty fields stay the server\'s, values are checked, DPO keeps beta', () => {
  const blank = { method: 'supervised', packing: true, train_on_inputs: false, lr_scheduler: 'cosine' };
  assert.deepEqual(readAdvanced(blank, TARGET_MODULES), { method: 'supervised', hp: {} });
  const all = readAdvanced({ ...blank, max_seq_len: '1024', lora_rank: '8', lora_alpha: '16', warmup_ratio: '0.1', weight_decay: '0.01', packing: false, train_on_inputs: true, lr_scheduler: 'linear', beta: '0.3' }, ['q_proj', 'v_proj']);
  assert.deepEqual(all, { method: 'supervised', hp: { max_seq_len: 1024, lora_rank: 8, lora_alpha: 16, warmup_ratio: 0.1, weight_decay: 0.01, packing: false, train_on_inputs: true, lr_scheduler: 'linear', lora_target_modules: ['q_proj', 'v_proj'] } });
  assert.deepEqual(readAdvanced({ ...blank, method: 'dpo', beta: '0.3' }, TARGET_MODULES), { method: 'dpo', hp: { beta: 0.3 } });
  assert.match(readAdvanced({ ...blank, max_seq_len: '10' }, TARGET_MODULES).error, /Context \(max_seq_len\) must be a whole number from 32/);
  assert.match(readAdvanced({ ...blank, lora_rank: '2.5' }, TARGET_MODULES).error, /LoRA rank/);
  assert.match(readAdvanced({ ...blank, method: 'dpo', beta: '0' }, TARGET_MODULES).error, /DPO beta must be a number above 0/);
  assert.match(readAdvanced(blank, []).error, /at least one LoRA target module/);
  assert.deepEqual(readAdvanced({ ...blank, lora_dropout: '0.05' }, TARGET_MODULES), { method: 'supervised', hp: { lora_dropout: 0.05 } });
  assert.deepEqual(readAdvanced({ ...blank, lora_dropout: '0' }, TARGET_MODULES), { method: 'supervised', hp: { lora_dropout: 0 } });
  assert.match(readAdvanced({ ...blank, lora_dropout: '1' }, TARGET_MODULES).error, /LoRA dropout must be a number at least 0 and below 1/);
});

test('sample answers: grouped by prompt, base first, steps in order, the newest per step', async () => {
  const { groupSamples } = await load('samples.js');
  const ev = (t, step, base, prompt, answer) => ({ created_at: t, type: 'message', data: { sample: true, step, base, prompt, answer } });
  const events = [ // newest first, as the API lists them
    ev(5, 6, false, 'Say hi:', ' hi again'),
    { created_at: 4, type: 'metrics', data: { step: 6, train_loss: 1 } },
    ev(3, 6, false, 'Say hi:', ' hi'),
    ev(3, 3, false, 'Say hi:', ' h'),
    ev(2, 3, false, 'Count:', ' 1 2'),
    ev(1, 0, true, 'Say hi:', ' xq'),
    ev(1, 0, true, 'Count:', ' zz'),
  ];
  const g = groupSamples(events);
  assert.deepEqual(g.map((p) => p.prompt), ['Say hi:', 'Count:']);
  assert.equal(g[0].base, ' xq');
  assert.deepEqual(g[0].answers, [{ step: 3, answer: ' h' }, { step: 6, answer: ' hi again' }]);
  assert.deepEqual(g[1].answers, [{ step: 3, answer: ' 1 2' }]);
  assert.deepEqual(groupSamples(undefined), []);
});

test('sample answers of a reinforcement job carry the grader score, and a multi grader its sub-scores', async () => {
  const { groupSamples, gradeText } = await load('samples.js');
  const ev = (t, step, base, answer, extra) => ({ created_at: t, type: 'message', data: { sample: true, step, base, prompt: 'Code?', answer, ...extra } });
  const g = groupSamples([
    ev(3, 5, false, 'K7', { score: 0.75, scores: { exact: 1, close: 0.5, bad: 'x' } }),
    ev(2, 2, false, 'K', { score: 0 }),
    ev(1, 0, true, 'no', { score: 0.1234 }),
  ]);
  assert.deepEqual(g[0].baseGrade, { score: 0.1234 });
  assert.deepEqual(g[0].answers, [
    { step: 2, answer: 'K', grade: { score: 0 } },
    { step: 5, answer: 'K7', grade: { score: 0.75, scores: { exact: 1, close: 0.5 } } },
  ]);
  assert.equal(gradeText(g[0].baseGrade), '0.123');
  assert.equal(gradeText(g[0].answers[0].grade), '0');
  assert.equal(gradeText(g[0].answers[1].grade), '0.75 (exact 1, close 0.5)');
  assert.equal(gradeText(null), '');
  // a supervised job's samples have no grade
  assert.equal(groupSamples([ev(1, 0, true, 'a')])[0].baseGrade, null);
});

test('sample answers: prompts answered in the same second keep the order the trainer answered them in', async () => {
  const { groupSamples } = await load('samples.js');
  const ev = (seq, step, base, prompt, answer) => ({ id: `ftevent-abc-${seq}`, created_at: 7, type: 'message', data: { sample: true, step, base, prompt, answer } });
  const events = [ // newest first, as the API lists them, all in one second
    ev(12, 2, false, 'Second:', ' b2'),
    ev(11, 2, false, 'First:', ' a2'),
    ev(10, 0, true, 'Second:', ' b0'),
    ev(9, 0, true, 'First:', ' a0'),
  ];
  const g = groupSamples(events);
  assert.deepEqual(g.map((p) => p.prompt), ['First:', 'Second:']);
  assert.equal(g[1].base, ' b0');
  assert.deepEqual(g[1].answers, [{ step: 2, answer: ' b2' }]);
});

test('Try it\'s speed: time to first token, and tokens per second after the first', () => {
  const s = answerSpeed({ sentAt: 1000, firstAt: 1250, lastAt: 2250, tokens: 11 });
  assert.deepEqual(s, { ttftMs: 250, tokens: 11, tokensPerSecond: 10, together: false });
  assert.equal(speedText(s), 'First token after 250 ms · 11 tokens at 10.0 tokens/s');
  // one token: no speed after it
  const one = answerSpeed({ sentAt: 0, firstAt: 40.4, lastAt: 40.4, tokens: 1 });
  assert.deepEqual(one, { ttftMs: 40.4, tokens: 1, tokensPerSecond: null, together: false });
  assert.equal(speedText(one), 'First token after 40 ms · 1 token');
  // no text at all, and a count the server did not send
  assert.equal(speedText(answerSpeed({ sentAt: 0, firstAt: null, lastAt: null, tokens: 0 })), '0 tokens');
  // 8 tokens in one read: no speed the browser saw, and the line says so
  const once = answerSpeed({ sentAt: 0, firstAt: 12, lastAt: 12, tokens: 8 });
  assert.equal(once.tokensPerSecond, null);
  assert.equal(once.together, true);
  assert.equal(speedText(once), 'First token after 12 ms · 8 tokens, all at once');
  assert.equal(one.together, false);
  assert.equal(speedText(answerSpeed({ sentAt: 0, firstAt: 5, lastAt: 9, tokens: undefined })), 'First token after 5 ms');
});

test('server-sent events split into their data, an unfinished event kept for the next read', () => {
  assert.deepEqual(sseEvents('data: {"a":1}\n\ndata: [DONE]\n\n'), { data: ['{"a":1}', '[DONE]'], rest: '' });
  assert.deepEqual(sseEvents('data: {"a":1}\n\ndata: {"b"'), { data: ['{"a":1}'], rest: 'data: {"b"' });
  assert.deepEqual(sseEvents(': a comment\n\ndata:x\n\n'), { data: ['x'], rest: '' });
});
