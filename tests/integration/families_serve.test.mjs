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
// laid out by that template; the phi3 model (Phi-4-mini's layout) carries
// Phi-4-mini's published template and answers a system and a user message.
// And /v1/models shows the mixture of experts' active parameters beside
// its total (docs/models.md, "Mixture of experts").
// Gemma 3 also comes as the hub has its image-and-text checkpoints
// (gemma3_vision: model_type gemma3 with the text model in text_config, its
// tensors under model.language_model., a vision tower beside them): the
// job trains the text model and leaves the tower out, and its merged
// folder is a gemma3_text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, SAMPLE, Serve, run, tmpdir, waitFor } from './service_harness.mjs';

const FAMILIES = ['llama3', 'qwen2', 'mistral', 'gemma', 'gemma2', 'gemma3', 'qwen3', 'qwen3_moe', 'smollm3', 'phi3'];
// the models folder's names: the families, and Gemma 3 as an image-and-text folder
const MODELS = [...FAMILIES, 'gemma3_vision'];
// the model_type of an exported (merged) folder, where it is not the name
const EXPORTED_TYPE = { llama3: 'llama', gemma3: 'gemma3_text', gemma3_vision: 'gemma3_text' };

// A Gemma 3 image-and-text folder from a gemma3_text one: the config nested
// in text_config, every tensor renamed under model.language_model., and a
// vision tower's tensor added.
function nestGemma3(src, dst) {
  fs.mkdirSync(dst);
  for (const f of fs.readdirSync(src)) {
    if (f !== 'config.json' && f !== 'model.safetensors') fs.copyFileSync(path.join(src, f), path.join(dst, f));
  }
  const text = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
  fs.writeFileSync(path.join(dst, 'config.json'), JSON.stringify({
    model_type: 'gemma3', architectures: ['Gemma3ForConditionalGeneration'],
    vision_config: { model_type: 'siglip_vision_model', hidden_size: 8 },
    text_config: text, bos_token_id: text.bos_token_id, eos_token_id: text.eos_token_id,
  }));
  const raw = fs.readFileSync(path.join(src, 'model.safetensors'));
  const n = Number(raw.readBigUInt64LE(0));
  const header = JSON.parse(raw.subarray(8, 8 + n).toString());
  const data = raw.subarray(8 + n);
  const out = {};
  for (const [k, v] of Object.entries(header)) out[k === '__metadata__' ? k : k.replace(/^model\./, 'model.language_model.')] = v;
  out['vision_tower.vision_model.embeddings.patch_embedding.weight'] = { dtype: 'F32', shape: [2, 2], data_offsets: [data.length, data.length + 16] };
  let h = Buffer.from(JSON.stringify(out));
  h = Buffer.concat([h, Buffer.alloc((8 - (h.length % 8)) % 8, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  fs.writeFileSync(path.join(dst, 'model.safetensors'), Buffer.concat([len, h, data, Buffer.alloc(16)]));
}
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
  nestGemma3(path.join(models, 'gemma3'), path.join(models, 'gemma3_vision'));
  const qwen3 = fs.readFileSync(path.join(ROOT, 'tests/unit/train/chat_templates/qwen3.jinja'), 'utf8');
  fs.writeFileSync(path.join(models, 'qwen3', 'tokenizer_config.json'), JSON.stringify({ chat_template: qwen3, eos_token: '<|im_end|>' }));
  const phi4 = fs.readFileSync(path.join(ROOT, 'tests/unit/train/chat_templates/phi4-mini.jinja'), 'utf8');
  fs.writeFileSync(path.join(models, 'phi3', 'tokenizer_config.json'), JSON.stringify({ chat_template: phi4, eos_token: '<|endoftext|>' }));
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

test('/v1/models: the Gemma 3 image-and-text folder with its text model\'s shape', async () => {
  const r = await s.call('GET', '/v1/models/gemma3_vision');
  assert.equal(r.status, 200, r.text);
  const text = await s.call('GET', '/v1/models/gemma3');
  assert.deepEqual(r.json.shape, text.json.shape);
  assert.equal(r.json.size.parameters, text.json.size.parameters);
});

test('a job on each family runs to success', async () => {
  for (const f of MODELS) {
    const r = await s.call('POST', '/v1/fine_tuning/jobs', {
      body: { model: f, training_file: fileId, suffix: f, method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 1 } } } },
    });
    assert.equal(r.status, 200, r.text);
    jobs[f] = r.json.id;
  }
  for (const f of MODELS) {
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

for (const f of MODELS) {
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
    assert.equal(cfg.model_type, EXPORTED_TYPE[f] ?? f);
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

test('phi3: /v1/chat/completions lays the conversation out with Phi-4-mini\'s template', async () => {
  assert.ok(jobs.phi3?.startsWith('ft:'), 'the job ran');
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: PROMPT }];
  const r = await s.call('POST', '/v1/chat/completions', { body: { model: jobs.phi3, messages, max_tokens: 4, temperature: 0 } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.role, 'assistant');
  // the prompt is exactly what the template writes: <|role|>content<|end|>, then <|assistant|>
  const text = `<|system|>Be brief.<|end|><|user|>${PROMPT}<|end|><|assistant|>`;
  const ids = JSON.parse(run(['tokenizer', 'encode', '--tokenizer', tok, '--text', text]));
  assert.equal(r.json.usage.prompt_tokens, ids.length);
});
