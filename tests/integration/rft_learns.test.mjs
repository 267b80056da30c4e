// rft_learns.test.mjs - reinforcement fine-tuning learns (docs/rft.md, "The
// algorithm"): the built-in model, asked eight questions, is rewarded by a
// string_check grader when its answer of at most 8 tokens holds the word
// its data line gives as {{item.reference}} ("the"). Before training about
// a third of its answers do; after 20 GRPO steps (4 prompts x 4 answers
// each, at 2e-3: the rate and the steps "auto" chooses for 8 prompts on
// this model, sched/hyper.h) the validation reward is above 0.7, and the training
// reward of the last steps is above that of the first. The trainer alone,
// as a worker starts it.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { BIN, ROOT, run, tmpdir } from './service_harness.mjs';

const QUESTIONS = ['What do you say of the harbor?', 'What of the treasury?', 'Speak of the army.',
  'What of the navy?', 'Tell of congress.', 'What of commerce?', 'Speak of the tariff.',
  'What of the railroad?'];

// The trainer's settings for the task in dir, and its events once run.
function settings(dir) {
  const line = (q) => JSON.stringify({ messages: [{ role: 'user', content: q }], reference: 'the' });
  fs.writeFileSync(path.join(dir, 'train.jsonl'), QUESTIONS.map(line).join('\n') + '\n');
  fs.writeFileSync(path.join(dir, 'valid.jsonl'), QUESTIONS.slice(0, 4).map(line).join('\n') + '\n');
  return {
    model_dir: path.join(ROOT, 'models', 'alallo-base'),
    train_file: path.join(dir, 'train.jsonl'), validation_file: path.join(dir, 'valid.jsonl'),
    checkpoint_dir: path.join(dir, 'ckpt'), out_dir: path.join(dir, 'out'),
    batch_size: 4, max_steps: 20, seq_len: 256, learning_rate: 2e-3, seed: 1, threads: 1,
    method: 'reinforcement',
    grader: { type: 'string_check', name: 'says the word', input: '{{sample.output_text}}',
      reference: '{{item.reference}}', operation: 'ilike' },
    grader_models: {}, rft_group: 4, rft_answer_tokens: 8, rft_eval_interval: 5,
    rft_eval_samples: 4,
  };
}

function train(dir, config, env = process.env) {
  fs.writeFileSync(path.join(dir, 'attempt.json'), JSON.stringify(config));
  const out = run(['train', '--config', path.join(dir, 'attempt.json')], { timeout: 900000, env });
  return out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
}

test('the mean reward rises over the steps with a string_check grader', () => {
  const dir = tmpdir('alallo-rft-');
  const events = train(dir, settings(dir));
  const steps = events.filter((e) => e.event === 'step');
  assert.equal(steps.length, 20);
  const first = events.find((e) => e.event === 'log' && /before training/.test(e.line));
  const before = Number(/([0-9.]+)$/.exec(first.line)[1]);
  const valid = steps.filter((e) => typeof e.valid_reward_mean === 'number');
  assert.deepEqual(valid.map((e) => e.step), [5, 10, 15, 20]);
  const after = valid[valid.length - 1].valid_reward_mean;
  assert.ok(before < 0.5, `validation reward before training ${before}`);
  assert.ok(after > 0.7, `validation reward after training ${after}`);
  const mean = (xs) => xs.reduce((a, e) => a + e.train_reward_mean, 0) / xs.length;
  assert.ok(mean(steps.slice(-3)) > mean(steps.slice(0, 3)),
    steps.map((e) => e.train_reward_mean).join(' '));
  const done = events.find((e) => e.event === 'done');
  assert.ok(fs.existsSync(path.join(done.model_dir, 'config.json')));
  assert.ok(fs.existsSync(path.join(done.adapter_dir, 'adapter_config.json')));
});

test('4-bit LoRA with the KL penalty, and full fine-tuning, each train and write a model', () => {
  const dir = tmpdir('alallo-rft-');
  const kl = train(dir, { ...settings(dir), precision: '4-bit', rft_kl: 0.1, max_steps: 2,
    rft_eval_interval: 2, rft_eval_samples: 1 });
  const lines = kl.filter((e) => e.event === 'log').map((e) => e.line);
  assert.ok(lines.some((l) => /4-bit \(NF4\) base, KL penalty to the base/.test(l)), lines.join('\n'));
  // step 1 samples from the base itself (B is zero): no divergence yet;
  // after one update the policy has moved away from the reference
  const klOf = (n) => Number(new RegExp(`^step ${n}/2: .*KL ([0-9.]+)`).exec(lines.find((l) => l.startsWith(`step ${n}/2`)))[1]);
  assert.equal(klOf(1), 0);
  assert.ok(klOf(2) > 0, lines.join('\n'));
  const full = train(dir, { ...settings(dir), adapter: 'full', learning_rate: 1e-4, max_steps: 1,
    out_dir: path.join(dir, 'full'), rft_eval_samples: 1 });
  const done = full.find((e) => e.event === 'done');
  assert.ok(done, JSON.stringify(full.slice(-3)));
  assert.equal(done.adapter_dir, null);
  assert.ok(fs.existsSync(path.join(done.model_dir, 'config.json')));
});

test('a run resumed from its checkpoint goes on exactly as the unbroken run', () => {
  const dir = tmpdir('alallo-rft-');
  const base = { ...settings(dir), max_steps: 4, rft_eval_interval: 2, rft_eval_samples: 1 };
  const whole = train(dir, base);
  const saved = whole.filter((e) => e.event === 'checkpoint').map((e) => e.step);
  assert.deepEqual(saved, [2]);
  const again = train(dir, { ...base, resume_step: 2, out_dir: path.join(dir, 'again') });
  assert.ok(again.some((e) => e.event === 'log' && e.line === 'resumed from checkpoint at step 2'));
  const tail = (events) => events.filter((e) => e.event === 'step' && e.step > 2)
    .map((e) => [e.step, e.train_loss, e.train_reward_mean, e.valid_reward_mean]);
  assert.equal(tail(again).length, 2);
  assert.deepEqual(tail(again), tail(whole));
});

// A move, a preemption or a cancel is a SIGTERM to the trainer: it ends the
// step under way, saves it and stops; the next attempt resumes from that
// step, so no step runs twice and the curve is the unbroken run's.
test('a run stopped mid-way (a move) saves its last step, and the next attempt repeats none', async () => {
  const dir = tmpdir('alallo-rft-');
  // one validation, at the end: the only checkpoint mid-run is the stop's
  const base = { ...settings(dir), max_steps: 5, rft_eval_interval: 5, rft_eval_samples: 1 };
  const whole = train(dir, { ...base, checkpoint_dir: path.join(dir, 'ckpt-whole'),
    out_dir: path.join(dir, 'out-whole') });
  fs.writeFileSync(path.join(dir, 'first.json'), JSON.stringify(base));
  const p = spawn(BIN, ['train', '--config', path.join(dir, 'first.json')], { stdio: ['ignore', 'pipe', 'pipe'] });
  const first = [];
  let buf = '';
  p.stdout.on('data', (d) => {
    buf += d;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!line.startsWith('{')) continue;
      const e = JSON.parse(line);
      first.push(e);
      if (e.event === 'step' && e.step === 2) p.kill('SIGTERM');
    }
  });
  p.stderr.resume();
  const code = await new Promise((res) => p.on('close', res));
  assert.equal(code, 4, JSON.stringify(first.slice(-3))); // stopped on request
  const steps = (events) => events.filter((e) => e.event === 'step')
    .map((e) => [e.step, e.train_loss, e.train_reward_mean, e.valid_reward_mean]);
  const ran = steps(first).map((s) => s[0]);
  const saved = first.filter((e) => e.event === 'checkpoint').map((e) => e.step);
  const at = ran.at(-1);
  assert.ok(at >= 2 && at < 5, `stopped after step ${at}`);
  assert.deepEqual(saved, [at], 'the step it stopped at is saved, and only it');
  const again = train(dir, { ...base, resume_step: at, out_dir: path.join(dir, 'again') });
  assert.ok(again.some((e) => e.event === 'log' && e.line === `resumed from checkpoint at step ${at}`));
  assert.ok(again.some((e) => e.event === 'done'));
  // each step once over the two attempts, and the unbroken run's curve
  assert.deepEqual([...ran, ...steps(again).map((s) => s[0])], [1, 2, 3, 4, 5]);
  assert.deepEqual([...steps(first), ...steps(again)], steps(whole));
});

test('a score_model grader asks its model beside training', () => {
  const dir = tmpdir('alallo-rft-');
  const model = path.join(ROOT, 'models', 'alallo-base');
  const events = train(dir, { ...settings(dir), max_steps: 1, rft_eval_samples: 1,
    grader: { type: 'multi', graders: {
      judge: { type: 'score_model', model: 'alallo-base', range: [0, 1],
        input: [{ role: 'user', content: 'Is "{{sample.output_text}}" about {{item.reference}}?' }],
        sampling_params: { max_completions_tokens: 4 } },
      close: { type: 'text_similarity', input: '{{sample.output_text}}',
        reference: '{{item.reference}}', evaluation_metric: 'rouge_1' } },
    calculate_output: '0.5 * judge + 0.5 * close' },
    grader_models: { 'alallo-base': model } });
  const lines = events.filter((e) => e.event === 'log').map((e) => e.line);
  assert.ok(events.some((e) => e.event === 'done'), lines.join('\n'));
  assert.ok(!lines.some((l) => /grader failed/.test(l)), lines.join('\n'));
  // a model grader, too, grades beside the rollouts (docs/rft.md)
  assert.ok(lines.some((l) => /fine-tuning started: .*graded beside/.test(l)), lines.join('\n'));
  assert.ok(lines.some((l) => /^step 1\/1: .*; graders: (close [0-9.]+, judge [0-9.]+|judge [0-9.]+, close [0-9.]+)/.test(l)),
    lines.join('\n'));
  // each sample answer carries its score and the two graders' scores, whose
  // formula it is
  const samples = events.filter((e) => e.event === 'sample');
  assert.deepEqual(samples.map((e) => e.step), [0, 1]);
  for (const e of samples) {
    assert.deepEqual(Object.keys(e.scores).sort(), ['close', 'judge'], JSON.stringify(e));
    assert.ok(Math.abs(e.score - (0.5 * e.scores.judge + 0.5 * e.scores.close)) < 1e-9, JSON.stringify(e));
  }
});

test('rollouts decode together unless one at a time is asked for; another choice is refused', () => {
  const dir = tmpdir('alallo-rft-');
  const one = { ...settings(dir), max_steps: 1, rft_eval_samples: 1 };
  const started = (events) => events.find((e) => e.event === 'log' && /fine-tuning started/.test(e.line)).line;
  assert.match(started(train(dir, one)), /tokens \(decoded together, graded beside\)/);
  const alone = train(dir, { ...one, out_dir: path.join(dir, 'alone'), checkpoint_dir: path.join(dir, 'ckpt-alone') },
    { ...process.env, ALALLO_RFT_ROLLOUT: 'one-at-a-time' });
  assert.match(started(alone), /tokens \(decoded one at a time, graded beside\)/);
  assert.ok(alone.some((e) => e.event === 'done'));
  const bad = spawnSync(BIN, ['train', '--config', path.join(dir, 'attempt.json')],
    { encoding: 'utf8', timeout: 120000, env: { ...process.env, ALALLO_RFT_ROLLOUT: 'sideways' } });
  assert.equal(bad.status, 3, bad.stdout + bad.stderr);
  assert.match(bad.stdout, /ALALLO_RFT_ROLLOUT is \\"sideways\\": it is \\"batched\\" or \\"one-at-a-time\\"/);
});

// Grading runs in a thread beside the rollouts, each answer as it is
// done; the rewards, a multi grader's sub-scores and so every step are
// those of grading after the rollouts (ALALLO_RFT_GRADING=inline).
test('grading beside the rollouts changes nothing; inline is there to compare, another choice is refused', () => {
  const dir = tmpdir('alallo-rft-');
  const cfg = { ...settings(dir), max_steps: 3, rft_eval_interval: 3, rft_eval_samples: 1,
    grader: { type: 'multi', graders: {
      word: { type: 'string_check', input: '{{sample.output_text}}', reference: '{{item.reference}}',
        operation: 'ilike' },
      close: { type: 'text_similarity', input: '{{sample.output_text}}', reference: 'the harbor',
        evaluation_metric: 'rouge_l' } },
    calculate_output: '0.5 * word + 0.5 * close' } };
  const beside = train(dir, cfg);
  const inline = train(dir, { ...cfg, out_dir: path.join(dir, 'inline'), checkpoint_dir: path.join(dir, 'ckpt-inline') },
    { ...process.env, ALALLO_RFT_GRADING: 'inline' });
  const started = (events) => events.find((e) => e.event === 'log' && /fine-tuning started/.test(e.line)).line;
  assert.match(started(beside), /\(decoded together, graded beside\)/);
  assert.match(started(inline), /\(decoded together, graded after them\)/);
  const steps = (events) => events.filter((e) => e.event === 'step')
    .map((e) => [e.step, e.train_loss, e.train_reward_mean, e.valid_reward_mean]);
  const lines = (events) => events.filter((e) => e.event === 'log' && /^step \d/.test(e.line)).map((e) => e.line);
  assert.equal(steps(beside).length, 3);
  assert.deepEqual(steps(beside), steps(inline));
  assert.deepEqual(lines(beside), lines(inline));
  assert.ok(lines(beside).every((l) => /; graders: /.test(l)), lines(beside).join('\n'));
  const bad = spawnSync(BIN, ['train', '--config', path.join(dir, 'attempt.json')],
    { encoding: 'utf8', timeout: 120000, env: { ...process.env, ALALLO_RFT_GRADING: 'later' } });
  assert.equal(bad.status, 3, bad.stdout + bad.stderr);
  assert.match(bad.stdout, /ALALLO_RFT_GRADING is \\"later\\": it is \\"beside\\" or \\"inline\\"/);
});

// A score_model grader's model generates in the grading thread while the
// policy's rollouts decode in the loop's thread: alone or inside a multi,
// the job says it grades beside them, and every step (losses, rewards, a
// multi's per-grader means) is that of grading after the rollouts.
test('a score_model grader, alone or in a multi, grades beside the rollouts and changes nothing', () => {
  const dir = tmpdir('alallo-rft-');
  const judge = { type: 'score_model', model: 'alallo-base', range: [0, 1],
    input: [{ role: 'user', content: 'Is "{{sample.output_text}}" about {{item.reference}}? Answer 0 or 1.' }],
    sampling_params: { max_completions_tokens: 4 } };
  const graders = {
    alone: { ...judge, name: 'judge' },
    multi: { type: 'multi', graders: { judge, word: { type: 'string_check', input: '{{sample.output_text}}',
      reference: '{{item.reference}}', operation: 'ilike' } }, calculate_output: '0.5 * judge + 0.5 * word' },
  };
  const started = (events) => events.find((e) => e.event === 'log' && /fine-tuning started/.test(e.line)).line;
  const steps = (events) => events.filter((e) => e.event === 'step')
    .map((e) => [e.step, e.train_loss, e.train_reward_mean, e.valid_reward_mean]);
  const lines = (events) => events.filter((e) => e.event === 'log' && /^step \d/.test(e.line)).map((e) => e.line);
  for (const [kind, grader] of Object.entries(graders)) {
    const cfg = { ...settings(dir), max_steps: 2, rft_eval_interval: 2, rft_eval_samples: 1, grader,
      grader_models: { 'alallo-base': path.join(ROOT, 'models', 'alallo-base') },
      out_dir: path.join(dir, `${kind}-beside`), checkpoint_dir: path.join(dir, `${kind}-ckpt-beside`) };
    const beside = train(dir, cfg, { ...process.env, ALALLO_RFT_GRADING: 'beside' });
    const inline = train(dir, { ...cfg, out_dir: path.join(dir, `${kind}-inline`),
      checkpoint_dir: path.join(dir, `${kind}-ckpt-inline`) }, { ...process.env, ALALLO_RFT_GRADING: 'inline' });
    const logs = (events) => events.filter((e) => e.event === 'log').map((e) => e.line).join('\n');
    for (const events of [beside, inline]) {
      assert.ok(events.some((e) => e.event === 'done'), `${kind}: ${logs(events)}`);
      assert.ok(!/grader failed/.test(logs(events)), `${kind}: ${logs(events)}`);
    }
    assert.match(started(beside), /\(decoded together, graded beside\)/, kind);
    assert.match(started(inline), /\(decoded together, graded after them\)/, kind);
    assert.equal(steps(beside).length, 2, kind);
    assert.deepEqual(steps(beside), steps(inline), kind);
    assert.deepEqual(lines(beside), lines(inline), kind);
    if (kind === 'multi')
      assert.ok(lines(beside).every((l) => /; graders: .*judge [0-9.]+/.test(l)), lines(beside).join('\n'));
  }
});
