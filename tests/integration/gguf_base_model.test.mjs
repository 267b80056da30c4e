// gguf_base_model.test.mjs - the built-in model, with its real trained
// weights and tokenizer (models/alallo-base), leaves alallo as GGUF that
// llama.cpp runs: node-llama-cpp 3.21.1 tokenizes the prompt as alallo does
// and its greedy continuation equals `alallo generate`'s first tokens.
// (gguf.test.mjs checks the same on a random model against PyTorch.)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getLlama } from 'node-llama-cpp';

const BIN = process.env.ALALLO_BIN;
const ROOT = process.env.ALALLO_ROOT;
const MODEL = path.join(ROOT, 'models', 'alallo-base');
const TOKENIZER = path.join(MODEL, 'tokenizer.json');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-gguf-base-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

const PROMPT = 'The Congress of the United States';
const STEPS = 8;

function alallo(args) {
  return execFileSync(BIN, args, { maxBuffer: 1 << 26 }).toString();
}

test('the built-in model exported as GGUF continues a prompt in llama.cpp as alallo does', async () => {
  const ids = JSON.parse(alallo(['tokenizer', 'encode', '--tokenizer', TOKENIZER, '--text', PROMPT]));
  const gen = JSON.parse(alallo(['generate', '--model-dir', MODEL, '--prompt', PROMPT,
    '--max-tokens', String(STEPS), '--temperature', '0', '--json']));
  assert.ok(gen.text.length > 0, 'alallo generated nothing');

  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  try {
    for (const dtype of ['f32', 'f16']) {
      const out = path.join(dir, `alallo-base-${dtype}.gguf`);
      alallo(['export', '--model-dir', MODEL, '--format', 'gguf', '--dtype', dtype, '--out', out]);
      const m = await llama.loadModel({ modelPath: out });
      assert.deepEqual(Array.from(m.tokenize(PROMPT)), ids, `${dtype}: llama.cpp tokenizes differently`);
      const bos = m.tokens.bos;
      const ctx = await m.createContext({ contextSize: 128 });
      const got = [];
      for await (const t of ctx.getSequence().evaluate([bos, ...ids], { temperature: 0 })) {
        got.push(t);
        if (got.length === STEPS) break;
      }
      // F32 must agree on every token; F16 rounding may flip a late near-tie.
      const n = dtype === 'f32' ? STEPS : 4;
      const text = JSON.parse(alallo(['tokenizer', 'decode', '--tokenizer', TOKENIZER,
        '--ids', got.slice(0, n).join(','), '--skip-special']));
      assert.ok(text.length > 0, `${dtype}: llama.cpp continued with nothing`);
      assert.ok(gen.text.startsWith(text),
        `${dtype}: llama.cpp continued ${JSON.stringify(text)}, alallo ${JSON.stringify(gen.text)}`);
      await ctx.dispose();
      await m.dispose();
    }
  } finally {
    await llama.dispose();
  }
});
