// families_serve.test.mjs - a fine-tuned model of each family answers
// through the service.
//
// A models folder holds one tiny random model per family (`alallo model init
// --family`, docs/models.md) next to the harness's tokenizer; `alallo serve`
// with a local worker fine-tunes each on the sample data (LoRA, the
// default), and then for each family:
//  * POST /v1/completions on the fine-tuned model answers at temperature 0;
//  * `alallo export ID --format hf` downloads the merged folder, and
//    `alallo generate --model-dir` on it says the same (the merged folder
//    carries the family: its config.json and Gemma's stored norm weights);
//  * `alallo export ID --format peft` downloads the adapter.
// The qwen3 model carries Qwen3's published chat template (the unit tests'
// fixture): its fine-tuned model answers /v1/chat/completions on a prompt
// laid out by that template.
// And /v1/models shows the mixture of experts' active parameters beside
// its total (docs/models.md, "Mixture of experts").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, SAMPLE, Serve, run, tmpdir, waitFor } from './service_harness.mjs';

const FAMILIES = ['llama3', 'qwen2', 'mistral', 'gemma', 'gemma2', 'qwen3', 'qwen3_moe', 'smollm3'];
const PROMPT = 'What a wonderful film';
let s;
let models;
let fileId;
let tok;
const jobs = {};

before(async () => {
  const dir = tmpdir('alallo-families-');
  tok = path.join(dir, 'tokenizer.json');
  run(['tokenizer', 'train', '--input', SAMPLE, '--vocab-size', '400', '--out', tok]);
  models = path.join(dir, 'models');
  fs.mkdirSync(models);
  for (const f of FAMILIES) run(['model', 'init', '--family', f, '--tokenizer', tok, '--out', path.join(models, f)]);
  const qwen3 = fs.readFileSync(path.join(ROOT, 'tests/unit/train/chat_templates/qwen3.jinja'), 'utf8');
  fs.writeFileSync(path.join(models, 'qwen3', 'tokenizer_config.json'), JSON.stringify({ chat_template: qwen3, eos_token: '<|im_end|>' }));
  s = await Serve.start({ args: ['--models', models, '--local-worker', 'name=fam,cpus=2,mem=8G'] });
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', new Blob([fs.readFileSync(SAMPLE)]), 'sentiment-train.jsonl');
  const up = await fetch(`${s.url}/v1/files`, { method: 'POST', headers: { Authorization: `Bearer ${s.key}` }, body: form });
  assert.equal(up.status, 200, await up.clone().text());
  fileId = (await up.json()).id;
});
after(async () => s && s.stop());

test('/v1/models: qwen3_moe with its experts and active parameters', async () => {
  const r = await s.call('GET', '/v1/models/qwen3_moe');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.shape.experts, 8);
  assert.equal(r.json.shape.experts_per_token, 2);
  assert.ok(r.json.size.active_parameters > 0);
  assert.ok(r.json.size.active_parameters < r.json.size.parameters, JSON.stringify(r.json.size));
  const dense = await s.call('GET', '/v1/models/qwen2');
  assert.equal(dense.json.size.active_parameters, undefined);
});

test('a job on each family runs to success', async () => {
  for (const f of FAMILIES) {
    const r = await s.call('POST', '/v1/fine_tuning/jobs', {
      body: { model: f, training_file: fileId, suffix: f, method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 1 } } } },
    });
    assert.equal(r.status, 200, r.text);
    jobs[f] = r.json.id;
  }
  for (const f of FAMILIES) {
    const j = await waitFor(
      async () => {
        const r = await s.call('GET', `/v1/fine_tuning/jobs/${jobs[f]}`);
        return ['succeeded', 'failed', 'cancelled'].includes(r.json.status) ? r.json : false;
      },
      { timeoutMs: 600000, what: `the ${f} job to end` },
    );
    assert.equal(j.status, 'succeeded', `${f}: ${j.message || JSON.stringify(j.error)}`);
    jobs[f] = j.fine_tuned_model;
    assert.match(j.fine_tuned_model, new RegExp(`^ft:${f}:${f}:`));
  }
});

for (const f of FAMILIES) {
  test(`${f}: /v1/completions answers, and the exported folder generates the same`, async () => {
    assert.ok(jobs[f]?.startsWith('ft:'), 'the job ran');
    const r = await s.call('POST', '/v1/completions', { body: { model: jobs[f], prompt: PROMPT, max_tokens: 6, temperature: 0 } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'text_completion');
    const served = r.json.choices[0].text;
    assert.equal(typeof served, 'string');
    // a tiny model trained one epoch may stop at once: the text is then ''
    assert.ok(r.json.usage.prompt_tokens > 0);
    assert.ok(['stop', 'length'].includes(r.json.choices[0].finish_reason));

    const out = tmpdir(`alallo-fam-export-${f}-`);
    const env = { ...process.env, ALALLO_URL: s.url, ALALLO_API_KEY: s.key };
    run(['export', jobs[f], '--format', 'hf', '--out', path.join(out, 'hf')], { env });
    const cfg = JSON.parse(fs.readFileSync(path.join(out, 'hf', 'config.json'), 'utf8'));
    assert.equal(cfg.model_type, f === 'llama3' ? 'llama' : f);
    const local = JSON.parse(run(['generate', '--model-dir', path.join(out, 'hf'), '--prompt', PROMPT, '--max-tokens', '6', '--temperature', '0', '--json']));
    assert.equal(local.text, served, `${f}: served ${JSON.stringify(served)}, exported folder ${JSON.stringify(local.text)}`);
    run(['export', jobs[f], '--format', 'peft', '--out', path.join(out, 'peft')], { env });
    assert.ok(fs.existsSync(path.join(out, 'peft', 'adapter_model.safetensors')));
  });
}

test('qwen3: /v1/chat/completions lays the conversation out with its template', async () => {
  assert.ok(jobs.qwen3?.startsWith('ft:'), 'the job ran');
  const messages = [{ role: 'user', content: PROMPT }];
  const r = await s.call('POST', '/v1/chat/completions', { body: { model: jobs.qwen3, messages, max_tokens: 4, temperature: 0 } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.role, 'assistant');
  // the prompt is exactly what Qwen3's template writes for the question
  const text = `<|im_start|>user\n${PROMPT}<|im_end|>\n<|im_start|>assistant\n`;
  const ids = JSON.parse(run(['tokenizer', 'encode', '--tokenizer', tok, '--text', text]));
  assert.equal(r.json.usage.prompt_tokens, ids.length);
});
