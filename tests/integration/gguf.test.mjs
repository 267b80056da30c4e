// gguf.test.mjs - GGUF export checked by independent readers and runners.
//
// The test writes its own small Llama folder (config.json, random weights
// large enough that attention and rotary positions decide the output, a
// tokenizer trained by alallo), exports it with `alallo export --format
// gguf`, and then:
//  * npm @huggingface/gguf reads the metadata and tensor shapes;
//  * npm node-llama-cpp (llama.cpp) loads the file, tokenizes like alallo,
//    and its greedy continuation equals that of an independent PyTorch
//    implementation of the Hugging Face Llama forward pass run on the
//    original folder (Debian python3-torch), and alallo's own
//    `alallo generate`. A wrong q/k permutation, head count or rope setting
//    changes the continuation.
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
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-gguf-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const PROMPT = 'the king said unto the people';
const STEPS = 8;

const cfg = {
  architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 64, intermediate_size: 96,
  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16,
  max_position_embeddings: 128, rms_norm_eps: 1e-5, rope_theta: 10000.0, tie_word_embeddings: false,
  hidden_act: 'silu', rope_scaling: null, torch_dtype: 'float32',
};

function alallo(args) {
  return execFileSync(BIN, args, { maxBuffer: 1 << 26 }).toString();
}

function makeModel() {
  const modelDir = path.join(dir, 'model');
  fs.mkdirSync(modelDir);
  // Tokenizer: trained by alallo on a little public-domain-style text.
  const words = 'the king said unto the people and they went out of the city into the field where the lord spake'.split(' ');
  let corpus = '';
  for (let i = 0; i < 3000; i++) corpus += words[(i * 7 + (i >> 3)) % words.length] + (i % 11 ? ' ' : '.\n');
  fs.writeFileSync(path.join(dir, 'corpus.txt'), corpus);
  alallo(['tokenizer', 'train', '--input', path.join(dir, 'corpus.txt'), '--vocab-size', '320', '--out', path.join(modelDir, 'tokenizer.json')]);
  const tok = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8'));
  const V = Math.max(...Object.values(tok.model.vocab)) + 1;
  const eot = tok.added_tokens[0].id;
  const config = { ...cfg, vocab_size: V, bos_token_id: eot, eos_token_id: eot };
  fs.writeFileSync(path.join(modelDir, 'config.json'), JSON.stringify(config, null, 1));
  const C = cfg.hidden_size, I = cfg.intermediate_size, hd = cfg.head_dim;
  const q = cfg.num_attention_heads * hd, kv = cfg.num_key_value_heads * hd;
  const normal = rng(1234);
  const mat = (rows, cols, scale) => {
    const a = new Float32Array(rows * cols);
    for (let i = 0; i < a.length; i++) a[i] = normal() * scale;
    return a;
  };
  const vec = (n, base, jitter) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = base + normal() * jitter;
    return a;
  };
  const t = [['model.embed_tokens.weight', [V, C], mat(V, C, 1.0)]];
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `model.layers.${l}.`;
    t.push([p + 'input_layernorm.weight', [C], vec(C, 1, 0.1)]);
    // Large q/k: attention patterns (and so rotary positions) matter.
    t.push([p + 'self_attn.q_proj.weight', [q, C], mat(q, C, 0.6)]);
    t.push([p + 'self_attn.k_proj.weight', [kv, C], mat(kv, C, 0.6)]);
    t.push([p + 'self_attn.v_proj.weight', [kv, C], mat(kv, C, 0.3)]);
    t.push([p + 'self_attn.o_proj.weight', [C, q], mat(C, q, 0.3)]);
    t.push([p + 'post_attention_layernorm.weight', [C], vec(C, 1, 0.1)]);
    t.push([p + 'mlp.gate_proj.weight', [I, C], mat(I, C, 0.3)]);
    t.push([p + 'mlp.up_proj.weight', [I, C], mat(I, C, 0.3)]);
    t.push([p + 'mlp.down_proj.weight', [C, I], mat(C, I, 0.3)]);
  }
  t.push(['model.norm.weight', [C], vec(C, 1, 0.1)]);
  t.push(['lm_head.weight', [V, C], mat(V, C, 0.5)]);
  writeSafetensors(path.join(modelDir, 'model.safetensors'), t);
  return { modelDir, V, eot };
}

// The Hugging Face Llama forward pass in PyTorch, written for this test:
// rotate-half rotary embedding on the unpermuted q/k weights, grouped-query
// attention, SwiGLU. Greedy decoding of STEPS tokens after `ids`.
const reference = String.raw`
import json, struct, sys
import numpy as np, torch
d, ids, steps = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
cfg = json.load(open(d + '/config.json'))
raw = open(d + '/model.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
W = {k: torch.from_numpy(np.frombuffer(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]], dtype=np.float32).reshape(v['shape']).copy())
     for k, v in hdr.items() if k != '__metadata__'}
C, H, KV, hd = cfg['hidden_size'], cfg['num_attention_heads'], cfg['num_key_value_heads'], cfg['head_dim']
eps, theta = cfg['rms_norm_eps'], cfg['rope_theta']
def rms(x, w): return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
def rot(x): return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), -1)
def forward(ids):
    T = len(ids)
    x = W['model.embed_tokens.weight'][ids]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat((ang.cos(), ang.cos()), -1).float(); sin = torch.cat((ang.sin(), ang.sin()), -1).float()
    mask = torch.full((T, T), float('-inf')).triu(1)
    for l in range(cfg['num_hidden_layers']):
        p = 'model.layers.%d.' % l
        h = rms(x, W[p + 'input_layernorm.weight'])
        q = (h @ W[p + 'self_attn.q_proj.weight'].T).view(T, H, hd).transpose(0, 1)
        k = (h @ W[p + 'self_attn.k_proj.weight'].T).view(T, KV, hd).transpose(0, 1)
        v = (h @ W[p + 'self_attn.v_proj.weight'].T).view(T, KV, hd).transpose(0, 1)
        q = q * cos + rot(q) * sin; k = k * cos + rot(k) * sin
        k = k.repeat_interleave(H // KV, 0); v = v.repeat_interleave(H // KV, 0)
        a = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5 + mask, -1) @ v
        x = x + a.transpose(0, 1).reshape(T, H * hd) @ W[p + 'self_attn.o_proj.weight'].T
        h = rms(x, W[p + 'post_attention_layernorm.weight'])
        g = h @ W[p + 'mlp.gate_proj.weight'].T
        x = x + (torch.nn.functional.silu(g) * (h @ W[p + 'mlp.up_proj.weight'].T)) @ W[p + 'mlp.down_proj.weight'].T
    return rms(x, W['model.norm.weight']) @ W['lm_head.weight'].T
out = []
with torch.no_grad():
    for _ in range(steps):
        nxt = int(forward(ids)[-1].argmax())
        out.append(nxt); ids = ids + [nxt]
print(json.dumps(out))
`;

let model;
test.before(() => {
  model = makeModel();
});

test('@huggingface/gguf reads the exported metadata and tensors', async () => {
  const out = path.join(dir, 'f16.gguf');
  const line = JSON.parse(alallo(['export', '--model-dir', model.modelDir, '--format', 'gguf', '--out', out]));
  assert.equal(line.out, out);
  const { metadata: m, tensorInfos } = await gguf(out, { allowLocalFile: true });
  assert.equal(m.version, 3);
  assert.equal(m['general.architecture'], 'llama');
  assert.equal(m['general.file_type'], 1);
  assert.equal(m['llama.context_length'], 128);
  assert.equal(m['llama.embedding_length'], 64);
  assert.equal(m['llama.block_count'], 2);
  assert.equal(m['llama.feed_forward_length'], 96);
  assert.equal(m['llama.attention.head_count'], 4);
  assert.equal(m['llama.attention.head_count_kv'], 2);
  assert.equal(m['llama.rope.dimension_count'], 16);
  assert.equal(m['llama.rope.freq_base'], 10000);
  assert.ok(Math.abs(m['llama.attention.layer_norm_rms_epsilon'] - 1e-5) < 1e-9);
  assert.equal(m['tokenizer.ggml.model'], 'gpt2');
  assert.equal(m['tokenizer.ggml.pre'], 'gpt-2');
  assert.equal(m['tokenizer.ggml.tokens'].length, model.V);
  assert.equal(m['tokenizer.ggml.token_type'].length, model.V);
  assert.equal(m['tokenizer.ggml.tokens'][model.eot], '<|endoftext|>');
  assert.equal(m['tokenizer.ggml.bos_token_id'], model.eot);
  assert.equal(m['tokenizer.ggml.eos_token_id'], model.eot);
  assert.ok(m['tokenizer.ggml.merges'].length > 0);
  const shapes = Object.fromEntries(tensorInfos.map((t) => [t.name, [t.shape.map(Number), t.dtype]]));
  assert.equal(tensorInfos.length, 1 + 2 * 9 + 2);
  assert.deepEqual(shapes['token_embd.weight'], [[64, model.V], 1]);
  assert.deepEqual(shapes['output.weight'], [[64, model.V], 1]);
  assert.deepEqual(shapes['output_norm.weight'], [[64], 0]);
  assert.deepEqual(shapes['blk.1.attn_q.weight'], [[64, 64], 1]);
  assert.deepEqual(shapes['blk.1.attn_k.weight'], [[64, 32], 1]);
  assert.deepEqual(shapes['blk.1.attn_v.weight'], [[64, 32], 1]);
  assert.deepEqual(shapes['blk.1.attn_output.weight'], [[64, 64], 1]);
  assert.deepEqual(shapes['blk.0.ffn_gate.weight'], [[64, 96], 1]);
  assert.deepEqual(shapes['blk.0.ffn_up.weight'], [[64, 96], 1]);
  assert.deepEqual(shapes['blk.0.ffn_down.weight'], [[96, 64], 1]);
  assert.deepEqual(shapes['blk.0.attn_norm.weight'], [[64], 0]);
  assert.deepEqual(shapes['blk.0.ffn_norm.weight'], [[64], 0]);
  for (const t of tensorInfos) assert.equal(Number(t.offset) % 32, 0, t.name);
});

test('llama.cpp (node-llama-cpp) tokenizes like alallo; it, alallo generate and a PyTorch reference continue alike', async () => {
  const ids = JSON.parse(alallo(['tokenizer', 'encode', '--tokenizer', path.join(model.modelDir, 'tokenizer.json'), '--text', PROMPT]));
  const prompt = [model.eot, ...ids]; // BOS first, as alallo formats prompts
  const want = JSON.parse(execFileSync('/usr/bin/python3', ['-c', reference, model.modelDir, JSON.stringify(prompt), String(STEPS)]).toString());
  assert.equal(want.length, STEPS);
  assert.ok(new Set(want).size > 1, `the reference continuation is degenerate: ${want}`);

  // alallo's own generation from the Hugging Face folder agrees (it stops
  // at EOS, and returns text).
  const stop = want.indexOf(model.eot);
  const wantIds = stop < 0 ? want : want.slice(0, stop);
  const wantText = JSON.parse(alallo(['tokenizer', 'decode', '--tokenizer', path.join(model.modelDir, 'tokenizer.json'), '--ids', wantIds.join(',') || '0', '--skip-special']));
  const gen = JSON.parse(alallo(['generate', '--model-dir', model.modelDir, '--prompt', PROMPT, '--max-tokens', String(STEPS), '--temperature', '0', '--json']));
  assert.equal(gen.text, wantIds.length ? wantText : '', 'alallo generate vs the PyTorch reference');

  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  try {
    for (const dtype of ['f32', 'f16']) {
      const out = path.join(dir, `${dtype}-run.gguf`);
      alallo(['export', '--model-dir', model.modelDir, '--format', 'gguf', '--dtype', dtype, '--out', out]);
      const m = await llama.loadModel({ modelPath: out });
      assert.deepEqual(Array.from(m.tokenize(PROMPT)), ids);
      assert.equal(m.tokens.bos, model.eot);
      const ctx = await m.createContext({ contextSize: 64 });
      const got = [];
      for await (const t of ctx.getSequence().evaluate(prompt, { temperature: 0 })) {
        got.push(t);
        if (got.length === STEPS) break;
      }
      // F32 must agree all the way; F16 rounding may flip a late near-tie.
      const n = dtype === 'f32' ? STEPS : 4;
      assert.deepEqual(got.slice(0, n), want.slice(0, n), `${dtype}: llama.cpp ${got} vs reference ${want}`);
      await ctx.dispose();
      await m.dispose();
    }
  } finally {
    await llama.dispose();
  }
});
