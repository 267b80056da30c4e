// gguf_families.test.mjs - each model family's GGUF runs in llama.cpp as
// the model runs in alallo.
//
// For each family of `alallo model init --family` (Llama 3 with its rotary
// scaling, Qwen2, Mistral, Gemma, Gemma 2, Gemma 3, Qwen3, SmolLM3, Qwen3-MoE, Phi-4-mini's phi3
// with its fused tensors, partial rotary and longrope; docs/models.md) the test makes a
// tiny random model with weights large enough that attention, rotary
// positions, norms and soft-caps decide the output, exports it with
// `alallo export --format gguf --dtype f32`, and checks:
//  * npm @huggingface/gguf reads the family's llama.cpp architecture and
//    its keys (Gemma 2's soft-caps and window, Gemma 3's window, pattern,
//    local rotary base and linear scaling, Llama 3's rope_freqs);
//    Gemma 2 and 3 run with a window of 4 tokens, shorter than the prompt
//    and its continuation, so llama.cpp's window must cut where alallo's does;
//  * npm node-llama-cpp (llama.cpp) loads it and its greedy continuation of
//    a prompt equals `alallo generate --temperature 0` on the Hugging Face
//    folder. alallo's forward pass is proven against PyTorch per family in
//    tests/unit/train/test_model_torch.c, so this ties llama.cpp to it.
// Qwen3-MoE is llama.cpp's qwen3moe: its router as ffn_gate_inp, each
// projection of the experts stacked into one 3-D tensor, and the experts'
// keys; besides the family test above, a LoRA job's merged model and the
// f16 and quantized exports (at widths the blocks fit) continue as alallo
// does, and what qwen3moe cannot state (raw top-k weights, a dense layer)
// is refused by name.
// Then a SmolLM3 whose layers without positions are not llama.cpp's every
// 4th is refused by name, no file written, and so is a Gemma 3 whose
// local and global layers follow no period llama.cpp's gemma3 can state.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gguf } from '@huggingface/gguf';
import { getLlama } from 'node-llama-cpp';

const BIN = process.env.ALALLO_BIN;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-gguf-fam-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const PROMPT = 'the king said unto the people';
const STEPS = 8;

const alallo = (args) => execFileSync(BIN, args, { maxBuffer: 1 << 26 }).toString();

// llama.cpp's greedy continuation of `prompt` (ids) by the GGUF at `file`,
// up to `steps` tokens or the end of text, as text.
async function llamaContinues(file, prompt, eos, steps = STEPS) {
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  try {
    const model = await llama.loadModel({ modelPath: file });
    const ctx = await model.createContext({ contextSize: 64 });
    const got = [];
    for await (const t of ctx.getSequence().evaluate(prompt, { temperature: 0 })) {
      if (t === eos) break;
      got.push(t);
      if (got.length === steps) break;
    }
    await ctx.dispose();
    await model.dispose();
    const text = got.length
      ? JSON.parse(alallo(['tokenizer', 'decode', '--tokenizer', tokPath, '--ids', got.join(','), '--skip-special']))
      : '';
    return { got, text };
  } finally {
    await llama.dispose();
  }
}

// The prompt's ids as `alallo generate` feeds them (BOS first where the model has one).
function promptIds(cfg, text = PROMPT) {
  const ids = JSON.parse(alallo(['tokenizer', 'encode', '--tokenizer', tokPath, '--text', text]));
  return cfg.bos_token_id != null ? [cfg.bos_token_id, ...ids] : ids;
}

// An export of modelDir that alallo refuses with a message matching re, no file written.
function refused(modelDir, name, re) {
  const out = path.join(dir, `${name}.gguf`);
  assert.throws(
    () => execFileSync(BIN, ['export', '--model-dir', modelDir, '--format', 'gguf', '--dtype', 'f32', '--out', out], { stdio: 'pipe' }),
    (e) => re.test(e.stderr.toString()),
  );
  assert.ok(!fs.existsSync(out), 'nothing written');
}

// family -> [llama.cpp architecture, tensors it must hold besides the usual]
const FAMILIES = {
  llama3: ['llama', ['rope_freqs.weight']],
  qwen2: ['qwen2', ['blk.0.attn_q.bias', 'blk.0.attn_k.bias', 'blk.0.attn_v.bias']],
  mistral: ['llama', ['output.weight']],
  gemma: ['gemma', []],
  gemma2: ['gemma2', ['blk.0.post_attention_norm.weight', 'blk.0.post_ffw_norm.weight']],
  qwen3: ['qwen3', ['blk.0.attn_q_norm.weight', 'blk.0.attn_k_norm.weight']],
  smollm3: ['smollm3', ['blk.3.attn_q.weight']],
  gemma3: ['gemma3', ['blk.0.attn_q_norm.weight', 'blk.0.attn_k_norm.weight', 'blk.0.post_ffw_norm.weight']],
  qwen3_moe: ['qwen3moe', ['blk.0.attn_q_norm.weight', 'blk.0.ffn_gate_inp.weight', 'blk.1.ffn_gate_exps.weight', 'blk.1.ffn_up_exps.weight', 'blk.1.ffn_down_exps.weight']],
  phi3: ['phi3', ['blk.0.attn_qkv.weight', 'blk.1.ffn_up.weight', 'rope_factors_long.weight', 'rope_factors_short.weight']],
};
// model init options past the family's own: windows shorter than the text,
// and Gemma 3's query scale apart from head_dim (folded into q_norm)
const INIT = {
  gemma2: ['--sliding-window', '4'],
  gemma3: ['--sliding-window', '4', '--query-scalar', '20'],
};

let tokPath;
test.before(() => {
  const words = 'the king said unto the people and they went out of the city into the field where the lord spake'.split(' ');
  let corpus = '';
  for (let i = 0; i < 3000; i++) corpus += words[(i * 7 + (i >> 3)) % words.length] + (i % 11 ? ' ' : '.\n');
  fs.writeFileSync(path.join(dir, 'corpus.txt'), corpus);
  tokPath = path.join(dir, 'tokenizer.json');
  alallo(['tokenizer', 'train', '--input', path.join(dir, 'corpus.txt'), '--vocab-size', '320', '--out', tokPath]);
});

for (const [family, [arch, extra]] of Object.entries(FAMILIES)) {
  test(`${family}: llama.cpp reads the ${arch} GGUF and continues as alallo generate`, async () => {
    const modelDir = path.join(dir, family);
    alallo(['model', 'init', '--family', family, '--tokenizer', tokPath, '--out', modelDir, '--seed', '7', '--init-std', '0.4', '--norm-std', '5', ...(INIT[family] ?? [])]);
    const cfg = JSON.parse(fs.readFileSync(path.join(modelDir, 'config.json'), 'utf8'));
    const out = path.join(dir, `${family}.gguf`);
    alallo(['export', '--model-dir', modelDir, '--format', 'gguf', '--dtype', 'f32', '--out', out]);

    const { metadata: m, tensorInfos } = await gguf(out, { allowLocalFile: true });
    assert.equal(m['general.architecture'], arch);
    assert.equal(m[`${arch}.block_count`], cfg.num_hidden_layers);
    assert.equal(m[`${arch}.attention.key_length`], cfg.head_dim);
    const names = new Set(tensorInfos.map((t) => t.name));
    for (const t of extra) assert.ok(names.has(t), `${family}: no ${t}`);
    if (family === 'gemma2') {
      assert.equal(m['gemma2.attn_logit_softcapping'], cfg.attn_logit_softcapping);
      assert.equal(m['gemma2.final_logit_softcapping'], cfg.final_logit_softcapping);
      assert.equal(m['gemma2.attention.sliding_window'], cfg.sliding_window);
    }
    if (family === 'gemma3') {
      assert.equal(m['gemma3.attention.sliding_window'], cfg.sliding_window);
      assert.equal(m['gemma3.attention.sliding_window_pattern'], 3); // every 3rd layer global
      assert.equal(m['gemma3.rope.freq_base_swa'], cfg.rope_local_base_freq);
      assert.equal(m['gemma3.rope.freq_base'], cfg.rope_theta);
      assert.equal(m['gemma3.rope.scaling.type'], 'linear');
      assert.equal(m['gemma3.rope.scaling.factor'], cfg.rope_scaling.factor);
      assert.ok(!names.has('rope_freqs.weight'), 'linear scaling is a key, not rope_freqs');
    }
    if (family.startsWith('gemma')) assert.ok(!names.has('output.weight'), 'Gemma ties its head');
    if (family === 'qwen3_moe') {
      assert.equal(m['qwen3moe.expert_count'], cfg.num_experts);
      assert.equal(m['qwen3moe.expert_used_count'], cfg.num_experts_per_tok);
      assert.equal(m['qwen3moe.expert_feed_forward_length'], cfg.moe_intermediate_size);
      const shape = (n) => tensorInfos.find((t) => t.name === n).shape.map(Number);
      const [C, M, E] = [cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts];
      assert.deepEqual(shape('blk.0.ffn_gate_inp.weight'), [C, E]);
      assert.deepEqual(shape('blk.0.ffn_gate_exps.weight'), [C, M, E]);
      assert.deepEqual(shape('blk.0.ffn_up_exps.weight'), [C, M, E]);
      assert.deepEqual(shape('blk.0.ffn_down_exps.weight'), [M, C, E]);
      assert.ok(!names.has('blk.0.ffn_gate.weight'), 'no dense MLP beside the experts');
    }
    if (family === 'phi3') {
      // fused as llama.cpp's phi3 takes them: qkv in one, gate and up in ffn_up
      const info = Object.fromEntries(tensorInfos.map((t) => [t.name, t]));
      const hd = cfg.head_dim;
      const rot = hd * cfg.partial_rotary_factor;
      assert.deepEqual(info['blk.0.attn_qkv.weight'].shape.map(Number), [cfg.hidden_size, (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd]);
      assert.deepEqual(info['blk.0.ffn_up.weight'].shape.map(Number), [cfg.hidden_size, 2 * cfg.intermediate_size]);
      assert.ok(!names.has('blk.0.attn_q.weight') && !names.has('blk.0.ffn_gate.weight'));
      assert.deepEqual(info['rope_factors_short.weight'].shape.map(Number), [rot / 2]);
      assert.equal(m['phi3.rope.dimension_count'], rot);
      assert.equal(m['phi3.context_length'], cfg.max_position_embeddings);
      assert.equal(m['phi3.rope.scaling.original_context_length'], cfg.original_max_position_embeddings);
      const s = cfg.max_position_embeddings / cfg.original_max_position_embeddings;
      // llama.cpp looks up </s>, <unk>, <s> and <|endoftext|> for a model whose
      // general.name holds "phi3": this vocabulary has none, so the name is "phi 3"
      assert.equal(m['general.name'], 'phi 3');
      assert.ok(Math.abs(m['phi3.rope.scaling.attn_factor'] - Math.sqrt(1 + Math.log(s) / Math.log(cfg.original_max_position_embeddings))) < 1e-6);
    }

    const gen = JSON.parse(alallo(['generate', '--model-dir', modelDir, '--prompt', PROMPT, '--max-tokens', String(STEPS), '--temperature', '0', '--json']));
    const { got, text } = await llamaContinues(out, promptIds(cfg), cfg.eos_token_id);
    assert.equal(text, gen.text, `${family}: llama.cpp ${JSON.stringify(text)} vs alallo ${JSON.stringify(gen.text)}`);
    assert.ok(new Set(got).size > 1 || got.length < 2, `${family}: degenerate continuation ${got}`);
  });
}

// A LoRA job's final model is the base with its adapters merged
// (out_dir/model); its GGUF continues as that folder does in alallo.
test('qwen3_moe: a LoRA run\'s merged model exports as qwen3moe and continues as alallo generate', async () => {
  const base = path.join(dir, 'moe-lora-base');
  alallo(['model', 'init', '--family', 'qwen3_moe', '--tokenizer', tokPath, '--out', base, '--seed', '11', '--init-std', '0.4', '--norm-std', '5']);
  const run = path.join(dir, 'moe-lora');
  fs.mkdirSync(run);
  const rows = ['the king said unto the people', 'they went out of the city', 'where the lord spake'].map((p) => JSON.stringify({ prompt: p, completion: ' and the people went into the field' }));
  fs.writeFileSync(path.join(run, 'train.jsonl'), rows.join('\n') + '\n');
  const settings = {
    model_dir: base, train_file: path.join(run, 'train.jsonl'), train_file_name: 'train.jsonl', validation_file: null,
    checkpoint_dir: path.join(run, 'ckpt'), out_dir: path.join(run, 'out'), precision: '16-bit', adapter: 'lora',
    lora: { r: 4, alpha: 8, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] },
    n_epochs: 4, batch_size: 1, learning_rate: 0.01, seed: 1, max_steps: 12, seq_len: 64,
    checkpoint_every_steps: 0, checkpoint_every_s: 0, threads: 1, valid_every_steps: 0,
  };
  fs.writeFileSync(path.join(run, 'attempt.json'), JSON.stringify(settings));
  const events = alallo(['train', '--config', path.join(run, 'attempt.json')]).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  const done = events.find((e) => e.event === 'done');
  assert.ok(done?.adapter_dir, `a LoRA run ends with its adapter: ${JSON.stringify(done)}`);
  const merged = done.model_dir;
  const cfg = JSON.parse(fs.readFileSync(path.join(merged, 'config.json'), 'utf8'));
  assert.equal(cfg.model_type, 'qwen3_moe');
  const out = path.join(dir, 'moe-lora.gguf');
  alallo(['export', '--model-dir', merged, '--format', 'gguf', '--dtype', 'f32', '--out', out]);
  const gen = JSON.parse(alallo(['generate', '--model-dir', merged, '--prompt', PROMPT, '--max-tokens', String(STEPS), '--temperature', '0', '--json']));
  const before = JSON.parse(alallo(['generate', '--model-dir', base, '--prompt', PROMPT, '--max-tokens', String(STEPS), '--temperature', '0', '--json']));
  assert.notEqual(gen.text, before.text, 'the adapters changed the model');
  const { text } = await llamaContinues(out, promptIds(cfg), cfg.eos_token_id);
  assert.equal(text, gen.text, `llama.cpp ${JSON.stringify(text)} vs alallo ${JSON.stringify(gen.text)}`);
});

// f16 and the quantized schemes at widths whose rows are whole blocks
// (256: Q4_K and Q6_K), the router kept F32 as llama.cpp's converter keeps
// it. llama.cpp also rounds activations to 8 bits in its quantized products,
// so, as in gguf_quant.test.mjs, the first two tokens of all but at most one
// of six prompts must agree with `alallo generate --quant` (f16: plain).
test('qwen3_moe: f16, q8_0 and q4_k_m GGUFs hold the experts in their types and continue as alallo does', async () => {
  const modelDir = path.join(dir, 'moe-wide');
  alallo(['model', 'init', '--family', 'qwen3_moe', '--tokenizer', tokPath, '--out', modelDir, '--seed', '5', '--init-std', '0.4',
    '--hidden', '256', '--heads', '4', '--kv-heads', '2', '--head-dim', '64', '--intermediate', '512', '--moe-intermediate', '256']);
  const cfg = JSON.parse(fs.readFileSync(path.join(modelDir, 'config.json'), 'utf8'));
  // ggml types: F32 0, F16 1, Q8_0 8, Q4_K 12, Q6_K 14
  const SCHEMES = {
    f16: { fileType: 1, gate: 1, down: 1 },
    q8_0: { fileType: 7, gate: 8, down: 8 },
    q4_k_m: { fileType: 15, gate: 12, down: 14 },
  };
  const PROMPTS = ['the king said unto the people', 'and they went out of the city', 'where the lord spake',
    'the people and the king', 'into the field the king', 'they went out and the lord said'];
  for (const [scheme, want] of Object.entries(SCHEMES)) {
    const out = path.join(dir, `moe-${scheme}.gguf`);
    alallo(['export', '--model-dir', modelDir, '--format', 'gguf', '--dtype', scheme, '--out', out]);
    const { metadata, tensorInfos } = await gguf(out, { allowLocalFile: true });
    assert.equal(metadata['general.file_type'], want.fileType, scheme);
    const types = Object.fromEntries(tensorInfos.map((t) => [t.name, t.dtype]));
    assert.equal(types['blk.0.ffn_gate_inp.weight'], 0, `${scheme}: the router stays F32`);
    assert.equal(types['blk.1.ffn_gate_exps.weight'], want.gate, `${scheme}: ffn_gate_exps`);
    assert.equal(types['blk.1.ffn_up_exps.weight'], want.gate, `${scheme}: ffn_up_exps`);
    assert.equal(types['blk.1.ffn_down_exps.weight'], want.down, `${scheme}: ffn_down_exps`);
    let agree = 0;
    const report = [];
    for (const p of PROMPTS) {
      const { text } = await llamaContinues(out, promptIds(cfg, p), cfg.eos_token_id, 2);
      const quant = scheme === 'f16' ? [] : ['--quant', scheme];
      const gen = JSON.parse(alallo(['generate', '--model-dir', modelDir, ...quant, '--prompt', p, '--max-tokens', '2', '--temperature', '0', '--json']));
      if (gen.text.startsWith(text) && (text !== '' || gen.text === '')) agree++;
      report.push(`${JSON.stringify(p)}: llama.cpp ${JSON.stringify(text)}, alallo ${JSON.stringify(gen.text)}`);
    }
    assert.ok(agree >= PROMPTS.length - 1, `${scheme}: ${agree} of ${PROMPTS.length} agree\n${report.join('\n')}`);
  }
});

// llama.cpp's qwen3moe always divides the chosen weights by their sum and
// makes every layer's MLP the experts: other models are refused by name.
test('qwen3_moe: raw top-k weights or a dense layer are refused, nothing written', () => {
  const raw = path.join(dir, 'moe-raw');
  alallo(['model', 'init', '--family', 'qwen3_moe', '--tokenizer', tokPath, '--out', raw, '--no-norm-topk']);
  refused(raw, 'moe-raw', /llama.cpp's qwen3moe divides the chosen experts' weights by their sum; this model's norm_topk_prob is false/);
  const step = path.join(dir, 'moe-step');
  alallo(['model', 'init', '--family', 'qwen3_moe', '--tokenizer', tokPath, '--out', step, '--sparse-step', '2']);
  refused(step, 'moe-step', /llama.cpp's qwen3moe makes every layer's MLP the experts; this model's layer 0 keeps a dense MLP \(decoder_sparse_step 2/);
});

// llama.cpp's smollm3 leaves the rotary positions out of every 4th layer
// whatever the file says: another pattern is refused by name, not written.
test('smollm3: a GGUF of other layers without positions is refused', () => {
  const modelDir = path.join(dir, 'smollm3-other');
  alallo(['model', 'init', '--family', 'smollm3', '--tokenizer', tokPath, '--out', modelDir]);
  const cfgPath = path.join(modelDir, 'config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  cfg.no_rope_layers = [1, 0, 1, 1];
  fs.writeFileSync(cfgPath, JSON.stringify(cfg));
  refused(modelDir, 'smollm3-other', /every 4th layer; this model's no_rope_layers differ \(layer 1\)/);
});

// llama.cpp's gemma3 makes every N-th layer global and the rest local: a
// model whose first layer is global (and the next two local) is refused.
test('gemma3: a GGUF of layer types without a period is refused', () => {
  const modelDir = path.join(dir, 'gemma3-other');
  alallo(['model', 'init', '--family', 'gemma3', '--tokenizer', tokPath, '--out', modelDir]);
  const cfgPath = path.join(modelDir, 'config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  cfg.layer_types = ['full_attention', 'sliding_attention', 'sliding_attention'];
  fs.writeFileSync(cfgPath, JSON.stringify(cfg));
  refused(modelDir, 'gemma3-other', /llama.cpp's gemma3 makes every N-th layer global and the rest local; this model's layer_types follow no such period/);
});
