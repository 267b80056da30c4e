// rft_api.test.mjs - reinforcement fine-tuning in OpenAI's API shape
// (docs/rft.md): prompts uploaded as their own format, the grader checked
// when the job is made (400 naming the field), each line checked for the
// fields the grader reads, the graders/validate and graders/run endpoints,
// and a small job that runs to a fine-tuned model through the openai SDK,
// its rewards in the events and the results file. Python graders run in
// the sandbox (bubblewrap, scripts/deps.sh), which must work here.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI, { BadRequestError, toFile } from 'openai';

import { ROOT, Serve, waitFor } from './service_harness.mjs';

const jsonl = (rows) => Buffer.from(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
const prompt = (q, extra = { reference: 'union' }) => ({
  messages: [{ role: 'user', content: q }], ...extra });
const CHECK = {
  type: 'string_check', name: 'says it', input: '{{ sample.output_text }}',
  reference: '{{ item.reference }}', operation: 'ilike',
};

// A machine without user namespaces says so (docs/rft.md): there the
// python tests check that python graders are refused with the reason.
const NO_USERNS = process.env.ALALLO_TEST_NO_USERNS === '1';
// 1 when the answer holds the line's reference, the case ignored
const SAYS_IT = {
  type: 'python', name: 'says it', image_tag: '2025-05-08',
  source: 'def grade(sample, item):\n'
    + '    text = sample["output_text"].lower()\n'
    + '    return 1.0 if item["reference"].lower() in text else 0.0\n',
};

describe('reinforcement fine-tuning through the API', () => {
  let s;
  let prompts;
  before(async () => {
    s = await Serve.start({ args: ['--models', path.join(ROOT, 'models')] });
    const up = await s.upload('prompts.jsonl',
      jsonl([prompt('What of the harbor?'), prompt('What of the navy?')]));
    assert.equal(up.status, 200, JSON.stringify(up.json));
    prompts = up.json.id;
  });
  after(async () => s && s.stop());

  const rft = (grader, hp = {}) => ({
    model: 'alallo-base', training_file: prompts,
    method: { type: 'reinforcement', reinforcement: { grader, hyperparameters: hp } },
  });

  test('a file of prompts is its own format, and supervised training refuses it', async () => {
    const f = await s.call('GET', `/v1/files/${prompts}`);
    assert.equal(f.json.format, 'reinforcement');
    const r = await s.createJob({ model: 'alallo-base', training_file: prompts });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'training_file');
    assert.match(r.json.error.message, /method\.type "reinforcement"/);
  });

  test('bad graders are answered with 400 naming the field', async () => {
    const cases = [
      [{ ...CHECK, operation: 'regex' }, 'method.reinforcement.grader.operation', /"ilike"/],
      [{ type: 'text_similarity', input: '{{sample.output_text}}', reference: 'x',
        evaluation_metric: 'cosine' }, 'method.reinforcement.grader.evaluation_metric',
      /no embedding model/],
      [{ type: 'multi', graders: { a: CHECK }, calculate_output: 'a + b' },
        'method.reinforcement.grader.calculate_output', /reads "b"/],
      [{ type: 'score_model', model: 'no-such-model', input: [{ role: 'user', content: 'x' }] },
        'method.reinforcement.grader.model', /no-such-model/],
      [{ ...CHECK, input: '{{sample.text}}' }, 'method.reinforcement.grader.input',
        /is no variable/],
    ];
    for (const [grader, param, message] of cases) {
      const r = await s.createJob(rft(grader));
      assert.equal(r.status, 400, JSON.stringify(grader));
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
    }
    const none = await s.createJob({ ...rft(CHECK), method: { type: 'reinforcement' } });
    assert.equal(none.status, 400);
    assert.equal(none.json.error.param, 'method.reinforcement.grader');
    const effort = await s.createJob(rft(CHECK, { reasoning_effort: 'extreme' }));
    assert.equal(effort.status, 400);
    assert.equal(effort.json.error.param, 'hyperparameters.reasoning_effort');
  });

  test('a line without a field the grader reads is named with its line', async () => {
    const up = await s.upload('gaps.jsonl',
      jsonl([prompt('a?'), prompt('b?', { answer: 'x' })]));
    const r = await s.createJob({ ...rft(CHECK), training_file: up.json.id });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'training_file');
    assert.equal(r.json.error.message,
      `line 2 of ${up.json.id} has no field "reference", which the grader reads as {{item.reference}}.`);
  });

  test('graders/validate and graders/run, as OpenAI had them', async () => {
    const v = await s.call('POST', '/v1/fine_tuning/alpha/graders/validate',
      { body: { grader: CHECK } });
    assert.equal(v.status, 200);
    assert.deepEqual(v.json.grader, CHECK);
    const bad = await s.call('POST', '/v1/fine_tuning/alpha/graders/validate',
      { body: { grader: { ...CHECK, operation: 'x' } } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'grader.operation');
    const run = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: CHECK, model_sample: 'Long live the Union!', item: { reference: 'union' } },
    });
    assert.equal(run.status, 200, run.text);
    assert.equal(run.json.reward, 1);
    const multi = {
      type: 'multi', graders: { exact: { ...CHECK, operation: 'eq' },
        close: { type: 'text_similarity', input: '{{sample.output_text}}',
          reference: '{{item.reference}}', evaluation_metric: 'fuzzy_match' } },
      calculate_output: '0.5 * exact + 0.5 * close',
    };
    const m = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: multi, model_sample: 'sitting', item: { reference: 'kitten' } },
    });
    assert.equal(m.status, 200, m.text);
    assert.ok(Math.abs(m.json.reward - 0.5 * 8 / 13) < 1e-9, m.text);
    assert.equal(m.json.sub_rewards.exact, 0);
    // score_model asks a model alallo serves, through the chat generation
    const judge = { type: 'score_model', name: 'judge', model: 'alallo-base', range: [0, 10],
      input: [{ role: 'user', content: 'Rate from 0 to 10: {{sample.output_text}}' }],
      sampling_params: { max_completions_tokens: 8, seed: 1 } };
    const scored = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: judge, model_sample: 'The union is strong.', item: {} },
    });
    assert.equal(scored.status, 200, scored.text);
    assert.equal(scored.json.metadata.errors.grader_error, false, scored.text);
    assert.ok(scored.json.reward >= 0 && scored.json.reward <= 10, scored.text);
    assert.ok(scored.json.metadata.token_usage.completion_tokens > 0, scored.text);
    const missing = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: CHECK, model_sample: 'x', item: {} },
    });
    assert.equal(missing.status, 200);
    assert.equal(missing.json.reward, 0);
    assert.equal(missing.json.metadata.errors.grader_error, true);
  });

  test('a small job runs through the openai SDK to a model, its rewards reported', async () => {
    const client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1` });
    const file = await client.files.create({
      file: await toFile(jsonl([prompt('What of the harbor?'), prompt('What of the navy?')]),
        'p.jsonl'),
      purpose: 'fine-tune',
    });
    await assert.rejects(client.fineTuning.jobs.create({
      model: 'alallo-base', training_file: file.id,
      method: { type: 'reinforcement', reinforcement: { grader: { ...CHECK, operation: 'nope' } } },
    }), BadRequestError);
    const job = await client.fineTuning.jobs.create({
      model: 'alallo-base', training_file: file.id, seed: 3,
      method: { type: 'reinforcement', reinforcement: { grader: CHECK,
        hyperparameters: { n_epochs: 1, batch_size: 2, compute_multiplier: 0.5,
          reasoning_effort: 'low', eval_interval: 1 } } },
    });
    assert.equal(job.method.type, 'reinforcement');
    assert.deepEqual(job.method.reinforcement.grader, CHECK);
    assert.equal(job.method.reinforcement.hyperparameters.reasoning_effort, 'low');
    assert.equal(job.method.reinforcement.hyperparameters.group_size, 2);
    const listed = await client.fineTuning.jobs.list();
    assert.ok(listed.data.some((j) => j.id === job.id));
    const done = await waitFor(async () => {
      const j = await client.fineTuning.jobs.retrieve(job.id);
      return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 300000, everyMs: 500, what: 'the job to end' });
    assert.equal(done.status, 'succeeded', `${done.error?.message}\n${s.output}`);
    assert.ok(done.fine_tuned_model);
    const events = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=100`);
    const metrics = events.json.data.filter((e) => e.type === 'metrics');
    assert.ok(metrics.some((e) => typeof e.data.train_reward_mean === 'number'),
      JSON.stringify(events.json.data.slice(0, 5)));
    assert.ok(metrics.some((e) => typeof e.data.valid_reward_mean === 'number'));
    // the sample answers (the first validation prompt's, before training
    // and at each validation) carry the grader's score
    const samples = events.json.data.filter((e) => e.type === 'message' && e.data?.sample === true);
    assert.deepEqual(samples.map((e) => e.data.step).sort(), [0, 1], JSON.stringify(samples));
    for (const e of samples) {
      assert.ok(e.data.score === 0 || e.data.score === 1, JSON.stringify(e));
      assert.equal(e.data.scores, undefined);
      assert.ok(e.message.includes(` (score ${e.data.score}): `), e.message);
    }
    const log = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/log`);
    assert.match(log.text, /step 1\/1: reward [0-9.]+ \(spread [0-9.]+\).*validation reward/);
    const results = await s.call('GET', `/v1/files/${done.result_files[0]}/content`);
    assert.match(results.text.split('\n')[0], /train_reward_mean,valid_reward_mean$/);
  });

  test('a running reinforcement job is cancelled through the openai SDK', async () => {
    const client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1` });
    const job = await client.fineTuning.jobs.create({
      model: 'alallo-base', training_file: prompts,
      method: { type: 'reinforcement', reinforcement: { grader: CHECK,
        hyperparameters: { n_epochs: 50, batch_size: 1 } } },
    });
    await s.waitStatus(job.id, 'running', { timeoutMs: 120000 });
    const asked = await client.fineTuning.jobs.cancel(job.id);
    assert.ok(['cancelled', 'cancelling'].includes(asked.status), asked.status);
    const done = await s.waitStatus(job.id, ['cancelled', 'failed', 'succeeded'],
      { timeoutMs: 120000 });
    assert.equal(done.status, 'cancelled', JSON.stringify(done.error));
  });

  // one side or the other, whichever this machine has: nothing skipped
  const withSandbox = NO_USERNS ? () => {} : test;
  const withoutSandbox = NO_USERNS ? test : () => {};
  withoutSandbox('without a sandbox, python graders are refused with the reason', async () => {
    for (const p of ['validate', 'run']) {
      const r = await s.call('POST', `/v1/fine_tuning/alpha/graders/${p}`,
        { body: { grader: SAYS_IT, model_sample: 'x', item: {} } });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'grader');
      assert.match(r.json.error.message, /python graders need a sandbox .*: /);
    }
    const j = await s.createJob(rft(SAYS_IT));
    assert.equal(j.status, 400);
    assert.equal(j.json.error.param, 'method.reinforcement.grader');
  });

  withSandbox('a python grader: graders/validate and graders/run run its source in the sandbox', async () => {
    const v = await s.call('POST', '/v1/fine_tuning/alpha/graders/validate',
      { body: { grader: SAYS_IT } });
    assert.equal(v.status, 200, v.text);
    assert.deepEqual(v.json.grader, SAYS_IT);
    const bad = await s.call('POST', '/v1/fine_tuning/alpha/graders/validate',
      { body: { grader: { ...SAYS_IT, source: 'def grade(sample, item) return 1\n' } } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'grader.source');
    assert.match(bad.json.error.message, /does not compile/);
    const run = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: SAYS_IT, model_sample: 'Long live the Union!', item: { reference: 'union' } },
    });
    assert.equal(run.status, 200, run.text);
    assert.equal(run.json.reward, 1);
    assert.equal(run.json.metadata.type, 'python');
    assert.equal(run.json.metadata.errors.grader_error, false);
    const miss = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: SAYS_IT, model_sample: 'Long live the king', item: { reference: 'union' } },
    });
    assert.equal(miss.json.reward, 0);
    // a grader that fails on this sample: reward 0 and the error named
    const failing = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: SAYS_IT, model_sample: 'x', item: {} },
    });
    assert.equal(failing.status, 200, failing.text);
    assert.equal(failing.json.reward, 0);
    assert.equal(failing.json.metadata.errors.grader_error, true);
    assert.match(failing.json.metadata.errors.message, /KeyError: 'reference'/);
    // no network inside
    const net = await s.call('POST', '/v1/fine_tuning/alpha/graders/run', {
      body: { grader: { type: 'python', name: 'net', source: 'import socket\n'
        + 'def grade(sample, item):\n'
        + `    socket.create_connection(("127.0.0.1", ${new URL(s.url).port}), timeout=2)\n`
        + '    return 1\n' }, model_sample: 'x', item: {} },
    });
    assert.equal(net.json.reward, 0, net.text);
    assert.equal(net.json.metadata.errors.grader_error, true);
    assert.match(net.json.metadata.errors.message, /OSError|unreachable|refused/i);
  });

  withSandbox('a python source that does not compile is refused at creation, naming the field', async () => {
    const r = await s.createJob(rft({ ...SAYS_IT, source: 'def grade(:\n' }));
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.param, 'method.reinforcement.grader.source');
    assert.match(r.json.error.message, /does not compile/);
    const none = await s.createJob(rft({ type: 'python', name: 'x' }));
    assert.equal(none.status, 400);
    assert.equal(none.json.error.param, 'method.reinforcement.grader.source');
  });

  withSandbox('a python grader adds its runs to the estimate, a fixed time per answer', async () => {
    // one step of 2 prompts, 4 answers each: 8 answers, each graded by
    // one run of the source in the sandbox (EST_PYTHON_GRADE_S, 0.05 s);
    // the validation rewards' runs are left to the learnt speed
    const hp = { n_epochs: 1, batch_size: 2, compute_multiplier: 1, eval_interval: 1 };
    const estimate = async (grader) => {
      const r = await s.call('POST', '/v1/fine_tuning/estimates', { body: rft(grader, hp) });
      assert.equal(r.status, 200, r.text);
      return r.json;
    };
    const TWO = { type: 'multi', calculate_output: 'a + b',
      graders: { a: SAYS_IT, b: { ...SAYS_IT, name: 'again' } } };
    // the three read between two string_check ones that agree: no job of
    // an earlier test ended and taught the speed in between
    const { text, python, two } = await waitFor(async () => {
      const first = await estimate(CHECK);
      const got = { text: first, python: await estimate(SAYS_IT), two: await estimate(TWO) };
      const last = await estimate(CHECK);
      return first.terms && last.terms && first.terms.training.s === last.terms.training.s
        && got.python.terms && got.two.terms ? got : false;
    }, { timeoutMs: 120000, what: 'estimates with their terms, the speed unchanged' });
    const extra = (e) => e.terms.training.s - text.terms.training.s;
    assert.ok(Math.abs(extra(python) - 0.4) <= 0.11, JSON.stringify([text.terms, python.terms]));
    assert.ok(Math.abs(extra(two) - 0.8) <= 0.11, JSON.stringify([text.terms, two.terms]));
    assert.ok(python.training.high_s >= text.training.high_s,
      JSON.stringify([text.training, python.training]));
  });

  // a small job graded by grader, to its end: the job and its events
  const runSmall = async (grader) => {
    const r = await s.createJob(rft(grader, { n_epochs: 1, batch_size: 2,
      compute_multiplier: 0.5, reasoning_effort: 'low', eval_interval: 1 }));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const id = r.json.id;
    const done = await waitFor(async () => {
      const j = await s.call('GET', `/v1/fine_tuning/jobs/${id}`);
      return ['succeeded', 'failed', 'cancelled'].includes(j.json.status) ? j.json : false;
    }, { timeoutMs: 300000, everyMs: 500, what: 'the job to end' });
    assert.equal(done.status, 'succeeded', `${done.error?.message}\n${s.output}`);
    const events = await s.call('GET', `/v1/fine_tuning/jobs/${id}/events?limit=100`);
    return events.json.data;
  };

  withSandbox('a small job graded by a python grader runs, its rewards logged', async () => {
    const events = await runSmall(SAYS_IT);
    const metrics = events.filter((e) => e.type === 'metrics');
    assert.ok(metrics.some((e) => typeof e.data.train_reward_mean === 'number'),
      JSON.stringify(events.slice(0, 5)));
    // every answer was graded: no grader failure was warned
    assert.ok(!events.some((e) => /the grader failed/.test(e.message)),
      JSON.stringify(events.filter((e) => e.level === 'warn')));
    const samples = events.filter((e) => e.type === 'message' && e.data?.sample === true);
    assert.ok(samples.length > 0);
    for (const e of samples)
      assert.ok(e.data.score === 0 || e.data.score === 1, JSON.stringify(e));
  });

  withSandbox('a python grader that fails on its answers scores them 0 with a warning', async () => {
    const events = await runSmall({ type: 'python', name: 'fails',
      source: 'def grade(sample, item):\n    raise ValueError("cannot grade this")\n' });
    const warned = events.filter((e) => /the grader failed on an answer/.test(e.message));
    assert.equal(warned.length, 1, JSON.stringify(events.slice(0, 8)));
    assert.match(warned[0].message, /the python grader failed: ValueError: cannot grade this/);
    const metrics = events.filter((e) => typeof e.data?.train_reward_mean === 'number');
    assert.ok(metrics.length > 0);
    for (const e of metrics) assert.equal(e.data.train_reward_mean, 0, JSON.stringify(e));
  });
});
