// gguf_quant.test.mjs - quantized GGUF written by alallo itself (q8_0, q4_0,
// q4_k_m) and the Ollama folder beside it.
//
// The model is a random Llama folder with rows of 256 and 512 values, so
// that q4_k_m really stores Q4_K and Q6_K blocks (shorter rows fall back).
// For each scheme:
//  * npm @huggingface/gguf reads the file type and each tensor's type;
//  * npm node-llama-cpp (llama.cpp) loads the file and its greedy
//    continuation agrees with `alallo generate --quant SCHEME`, which runs
//    the same quantized weights through alallo's own decoder, on the first
//    two tokens of all but at most one of six prompts. llama.cpp also rounds
//    activations to 8 bits in its quantized products, which on this
//    deliberately sensitive random model parts the two after a few tokens.
// Then `--format ollama` makes a folder with model.gguf and a Modelfile
// whose TEMPLATE is read off the model's chat template.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gguf } from '@huggingface/gguf';
import { getLlama } from 'node-llama-cpp';
import { rng, writeSafetensors } from './llama_folder.mjs';

const BIN = process.env.ALALLO_BIN;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-gguf-quant-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
// Agreement is counted over several prompts, each on its first tokens: a
// wrong block layout garbles every answer from the first token, while the
// activation rounding llama.cpp adds may flip a near-tie in one.
const PROMPTS = ['the king said unto the people', 'and they went out of the city', 'where the lord spake',
  'the people and the king', 'into the field the king', 'they went out and the lord said'];
const AGREE = 2;

const cfg = {
  architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 256, intermediate_size: 512,
  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 64,
  max_position_embeddings: 128, rms_norm_eps: 1e-5, rope_theta: 10000.0, tie_word_embeddings: false,
  hidden_act: 'silu', rope_scaling: null, torch_dtype: 'float32',
};

const CHATML = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
  + "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

function alallo(args) {
  return execFileSync(BIN, args, { maxBuffer: 1 << 26 }).toString();
}

function makeModel() {
  const modelDir = path.join(dir, 'model');
  fs.mkdirSync(modelDir);
  const words = 'the king said unto the people and they went out of the city into the field where the lord spake'.split(' ');
  let corpus = '';
  for (let i = 0; i < 3000; i++) corpus += words[(i * 7 + (i >> 3)) % words.length] + (i % 11 ? ' ' : '.\n');
  fs.writeFileSync(path.join(dir, 'corpus.txt'), corpus);
  alallo(['tokenizer', 'train', '--input', path.join(dir, 'corpus.txt'), '--vocab-size', '320', '--out', path.join(modelDir, 'tokenizer.json')]);
  const tok = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8'));
  const V = Math.max(...Object.values(tok.model.vocab)) + 1;
  const eot = tok.added_tokens[0].id;
  fs.writeFileSync(path.join(modelDir, 'config.json'), JSON.stringify({ ...cfg, vocab_size: V, bos_token_id: eot, eos_token_id: eot }));
  fs.writeFileSync(path.join(modelDir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|endoftext|>', chat_template: CHATML }));
  const C = cfg.hidden_size, I = cfg.intermediate_size, hd = cfg.head_dim;
  const q = cfg.num_attention_heads * hd, kv = cfg.num_key_value_heads * hd;
  const normal = rng(4321);
  const mat = (rows, cols, scale) => {
    const a = new Float32Array(rows * cols);
    for (let i = 0; i < a.length; i++) a[i] = normal() * scale;
    return a;
  };
  const vec = (n) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = 1 + normal() * 0.1;
    return a;
  };
  // Scales as gguf.test.mjs's for a hidden size four times larger.
  const t = [['model.embed_tokens.weight', [V, C], mat(V, C, 1.0)]];
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    t.push([p + 'input_layernorm.weight', [C], vec(C)]);
    t.push([p + 'self_attn.q_proj.weight', [q, C], mat(q, C, 0.3)]);
    t.push([p + 'self_attn.k_proj.weight', [kv, C], mat(kv, C, 0.3)]);
    t.push([p + 'self_attn.v_proj.weight', [kv, C], mat(kv, C, 0.15)]);
    t.push([p + 'self_attn.o_proj.weight', [C, q], mat(C, q, 0.15)]);
    t.push([p + 'post_attention_layernorm.weight', [C], vec(C)]);
    t.push([p + 'mlp.gate_proj.weight', [I, C], mat(I, C, 0.15)]);
    t.push([p + 'mlp.up_proj.weight', [I, C], mat(I, C, 0.15)]);
    t.push([p + 'mlp.down_proj.weight', [C, I], mat(C, I, 0.1)]);
  }
  t.push(['model.norm.weight', [C], vec(C)]);
  t.push(['lm_head.weight', [V, C], mat(V, C, 0.25)]);
  writeSafetensors(path.join(modelDir, 'model.safetensors'), t);
  return { modelDir, V, eot };
}

// ggml type numbers: F32 0, Q4_0 2, Q8_0 8, Q4_K 12, Q6_K 14.
const SCHEMES = {
  q8_0: { fileType: 7, types: { 'token_embd.weight': 8, 'output.weight': 8, 'blk.0.attn_q.weight': 8, 'blk.1.attn_v.weight': 8, 'blk.0.ffn_down.weight': 8, 'blk.0.attn_norm.weight': 0 } },
  q4_0: { fileType: 2, types: { 'token_embd.weight': 2, 'output.weight': 2, 'blk.0.attn_q.weight': 2, 'blk.1.attn_v.weight': 2, 'blk.0.ffn_down.weight': 2, 'output_norm.weight': 0 } },
  q4_k_m: { fileType: 15, types: { 'token_embd.weight': 12, 'output.weight': 14, 'blk.0.attn_q.weight': 12, 'blk.0.ffn_up.weight': 12, 'blk.1.attn_v.weight': 14, 'blk.0.ffn_down.weight': 14, 'blk.0.ffn_norm.weight': 0 } },
};

let model;
test.before(() => {
  model = makeModel();
});

test('q8_0, q4_0 and q4_k_m: the tensor types, and llama.cpp continues as alallo generate --quant does', async () => {
  const tokPath = path.join(model.modelDir, 'tokenizer.json');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  const f16 = path.join(dir, 'f16.gguf');
  alallo(['export', '--model-dir', model.modelDir, '--format', 'gguf', '--dtype', 'f16', '--out', f16]);
  const sizes = { f16: fs.statSync(f16).size };
  try {
    for (const [scheme, want] of Object.entries(SCHEMES)) {
      const out = path.join(dir, `${scheme}.gguf`);
      const line = JSON.parse(alallo(['export', '--model-dir', model.modelDir, '--format', 'gguf', '--dtype', scheme, '--out', out]));
      assert.equal(line.out, out);
      sizes[scheme] = fs.statSync(out).size;
      const { metadata, tensorInfos } = await gguf(out, { allowLocalFile: true });
      assert.equal(metadata['general.file_type'], want.fileType, scheme);
      const types = Object.fromEntries(tensorInfos.map((t) => [t.name, t.dtype]));
      for (const [name, type] of Object.entries(want.types)) assert.equal(types[name], type, `${scheme}: ${name}`);

      const m = await llama.loadModel({ modelPath: out });
      const ctx = await m.createContext({ contextSize: 64 });
      let agree = 0;
      const report = [];
      for (const p of PROMPTS) {
        const ids = JSON.parse(alallo(['tokenizer', 'encode', '--tokenizer', tokPath, '--text', p]));
        assert.deepEqual(Array.from(m.tokenize(p)), ids, `${scheme}: llama.cpp tokenizes differently`);
        const seq = ctx.getSequence();
        const got = [];
        for await (const t of seq.evaluate([model.eot, ...ids], { temperature: 0 })) {
          got.push(t);
          if (got.length === AGREE) break;
        }
        seq.dispose();
        const stop = got.indexOf(model.eot);
        const head = stop >= 0 ? got.slice(0, stop) : got;
        const text = head.length ? JSON.parse(alallo(['tokenizer', 'decode', '--tokenizer', tokPath, '--ids', head.join(','), '--skip-special'])) : '';
        const gen = JSON.parse(alallo(['generate', '--model-dir', model.modelDir, '--quant', scheme, '--prompt', p,
          '--max-tokens', String(AGREE), '--temperature', '0', '--json']));
        if (gen.text.startsWith(text)) agree++;
        report.push(`${JSON.stringify(p)}: llama.cpp ${JSON.stringify(text)}, alallo ${JSON.stringify(gen.text)}`);
      }
      await ctx.dispose();
      await m.dispose();
      assert.ok(agree >= PROMPTS.length - 1, `${scheme}: ${agree} of ${PROMPTS.length} agree\n${report.join('\n')}`);
    }
  } finally {
    await llama.dispose();
  }
  // Q8_0 is 8.5 bits a weight, Q4_0 4.5, Q4_K_M between 4.5 and 6.6.
  assert.ok(sizes.q8_0 < sizes.f16 * 0.6, JSON.stringify(sizes));
  assert.ok(sizes.q4_0 < sizes.q8_0 * 0.6, JSON.stringify(sizes));
  assert.ok(sizes.q4_k_m < sizes.q8_0 && sizes.q4_k_m > sizes.q4_0, JSON.stringify(sizes));
});

test('alallo generate --quant refuses an unknown scheme; export refuses an unknown dtype', () => {
  assert.throws(() => execFileSync(BIN, ['generate', '--model-dir', model.modelDir, '--quant', 'q3_k', '--prompt', 'x'], { stdio: 'pipe' }),
    (e) => e.status === 2 && /unknown quantization "q3_k"/.test(e.stderr.toString()));
  assert.throws(() => execFileSync(BIN, ['export', '--model-dir', model.modelDir, '--format', 'gguf', '--dtype', 'q3_k', '--out', path.join(dir, 'x.gguf')], { stdio: 'pipe' }),
    (e) => e.status === 2 && /--dtype must be/.test(e.stderr.toString()));
  assert.equal(fs.existsSync(path.join(dir, 'x.gguf')), false);
});

test('--format ollama: model.gguf and a Modelfile with the chat template beside it, loaded by llama.cpp', async () => {
  const out = path.join(dir, 'ollama');
  alallo(['export', '--model-dir', model.modelDir, '--format', 'ollama', '--dtype', 'q4_k_m', '--out', out]);
  assert.deepEqual(fs.readdirSync(out).sort(), ['Modelfile', 'model.gguf']);
  assert.equal(fs.existsSync(`${out}.tmp`), false);
  const mf = fs.readFileSync(path.join(out, 'Modelfile'), 'utf8');
  assert.match(mf, /^FROM \.\/model\.gguf$/m);
  assert.ok(mf.includes('{{ else if eq .Role "user" }}<|im_start|>user\n{{ .Content }}'), mf);
  assert.ok(mf.includes('{{ if eq .Role "system" }}<|im_start|>system\n{{ .Content }}<|im_end|>\n'), mf);
  assert.ok(mf.includes('{{ end }}{{ end }}<|im_end|>\n<|im_start|>assistant\n"""'), mf);
  assert.match(mf, /^PARAMETER stop "<\|endoftext\|>"$/m);
  const { metadata } = await gguf(path.join(out, 'model.gguf'), { allowLocalFile: true });
  assert.equal(metadata['general.file_type'], 15);
  // An existing output is never replaced.
  assert.throws(() => execFileSync(BIN, ['export', '--model-dir', model.modelDir, '--format', 'ollama', '--out', out], { stdio: 'pipe' }),
    (e) => e.status === 1 && /already exists/.test(e.stderr.toString()));
});
