// tokenizer.test.mjs - alallo's tokenizer against independent implementations:
//  * GPT-2 byte-level BPE vs npm js-tiktoken's gpt2 encoding. The GPT-2
//    tokenizer.json is built here from js-tiktoken's own rank table (nothing
//    is downloaded): vocab = ranks in GPT-2's printable byte form, merges =
//    for each multi-byte token, the two parts BPE over lower ranks yields.
//  * a tokenizer trained by `alallo tokenizer train`, loaded by npm
//    @huggingface/tokenizers (a port of Hugging Face tokenizers): it must
//    load, encode the same ids, and decode them back.
//  * a SentencePiece-style (byte fallback, Llama 2 layout) tokenizer.json,
//    encoded by both.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getEncoding } from 'js-tiktoken';
import gpt2Ranks from 'js-tiktoken/ranks/gpt2';
import { Tokenizer } from '@huggingface/tokenizers';

const BIN = process.env.ALALLO_BIN;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'alallo-tok-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function alallo(args) {
  return execFileSync(BIN, args, { maxBuffer: 1 << 28 }).toString();
}

// special: added tokens written in the text become their ids, as Hugging
// Face tokenizers always does; without it they are plain text (alallo's
// default for user data).
function encodeWithAlallo(tokPath, text, special = false) {
  const f = path.join(dir, 'text.txt');
  fs.writeFileSync(f, text);
  const args = ['tokenizer', 'encode', '--tokenizer', tokPath, '--file', f];
  return JSON.parse(alallo(special ? [...args, '--special'] : args));
}

// GPT-2's byte -> printable character table.
function byteChars() {
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const map = [];
  let n = 0;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(printable(b) ? b : 256 + n++);
  return map;
}

function gpt2TokenizerJson() {
  const ranks = new Map();
  const tokens = [];
  for (const line of gpt2Ranks.bpe_ranks.split('\n').filter(Boolean)) {
    const [, offset, ...list] = line.split(' ');
    list.forEach((t, i) => {
      const bytes = Buffer.from(t, 'base64');
      ranks.set(bytes.toString('latin1'), Number(offset) + i);
      tokens[Number(offset) + i] = bytes;
    });
  }
  const chars = byteChars();
  const str = (buf) => [...buf].map((b) => chars[b]).join('');
  // The two parts that BPE with ranks below `limit` leaves of `bytes`.
  const split = (bytes, limit) => {
    let parts = [...bytes].map((b) => Buffer.from([b]));
    for (;;) {
      let best = -1;
      let bestRank = Infinity;
      for (let i = 0; i + 1 < parts.length; i++) {
        const r = ranks.get(Buffer.concat([parts[i], parts[i + 1]]).toString('latin1'));
        if (r !== undefined && r < limit && r < bestRank) {
          bestRank = r;
          best = i;
        }
      }
      if (best < 0) return parts;
      parts.splice(best, 2, Buffer.concat([parts[best], parts[best + 1]]));
    }
  };
  const vocab = {};
  const merges = [];
  tokens.forEach((bytes, rank) => {
    vocab[str(bytes)] = rank;
    if (bytes.length > 1) {
      const parts = split(bytes, rank);
      assert.equal(parts.length, 2, `token ${rank} does not split in two`);
      merges.push(`${str(parts[0])} ${str(parts[1])}`);
    }
  });
  vocab['<|endoftext|>'] = 50256;
  return {
    version: '1.0',
    added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

// Varied text: prose, code, contractions, numbers, many scripts, emoji,
// odd whitespace, long repeats.
const samples = [
  "Hello world! It's a test, isn't it? We'll see; they'd've said 'no'.",
  'The year 2024 had 366 days: 1,234,567.89 and 0x1F.',
  '    indented code:\n\tif (x == 1) { return y->z[3]; }\n\n\n',
  'Ünïcödé façade, naïve café — “quotes” and ‘single’ … ellipsis',
  'Ελληνικά, русский текст, עברית, العربية, 中文字符, 日本語のテキスト, 한국어',
  'Emoji 😀👍🏽 and flags 🇫🇷 and ZWJ 👨‍👩‍👧‍👦',
  'trailing spaces   \n  leading\r\nwindows\r\n\u00a0nbsp\u2003em space',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!!!!',
  'MixedCASE camelCaseWords snake_case_words kebab-case-words URLs: https://example.com/a?b=c&d=e',
  '<|endoftext|> is text here, not a special token',
  '',
  ' ',
  "don't DON'T Don'T 's 're 've",
];

test('GPT-2 byte-level BPE matches js-tiktoken', () => {
  const tokPath = path.join(dir, 'gpt2.json');
  fs.writeFileSync(tokPath, JSON.stringify(gpt2TokenizerJson()));
  const enc = getEncoding('gpt2');
  for (const text of samples) {
    const want = enc.encode(text, [], []);
    const got = encodeWithAlallo(tokPath, text);
    assert.deepEqual(got, want, `text: ${JSON.stringify(text)}`);
  }
  // One long text made of everything, repeated with variations.
  let big = '';
  for (let i = 0; i < 300; i++) big += samples[i % samples.length] + ` ${i} ` + (i % 7 ? '\n' : '  ');
  assert.deepEqual(encodeWithAlallo(tokPath, big), enc.encode(big, [], []));
  // Decoding gives the text back.
  const ids = encodeWithAlallo(tokPath, samples[5]);
  const back = JSON.parse(alallo(['tokenizer', 'decode', '--tokenizer', tokPath, '--ids', ids.join(',')]));
  assert.equal(back, samples[5]);
});

test('a tokenizer trained by alallo loads in Hugging Face tokenizers and encodes the same', () => {
  let corpus = '';
  for (let i = 0; i < 2000; i++) corpus += samples[(i * 7) % samples.length] + ` line ${i}\n`;
  const input = path.join(dir, 'corpus.txt');
  fs.writeFileSync(input, corpus);
  const tokPath = path.join(dir, 'trained.json');
  const report = JSON.parse(alallo(['tokenizer', 'train', '--input', input, '--vocab-size', '600', '--out', tokPath]));
  assert.equal(report.vocab_size, 600);
  const json = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
  assert.equal(json.model.type, 'BPE');
  assert.equal(json.pre_tokenizer.type, 'ByteLevel');
  assert.equal(json.decoder.type, 'ByteLevel');
  assert.deepEqual(json.added_tokens.map((t) => t.content), ['<|endoftext|>']);
  // No "clean up" of spaces before punctuation on decode: it is not part
  // of the tokenizer.json and would change the text.
  const hf = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  for (const text of [...samples, corpus.slice(0, 5000)]) {
    const want = hf.encode(text, { add_special_tokens: false }).ids;
    const got = encodeWithAlallo(tokPath, text, true);
    assert.deepEqual(got, want, `text: ${JSON.stringify(text.slice(0, 80))}`);
    if (got.length) assert.equal(hf.decode(got), text);
  }
  // Without --special the marker is ordinary text, never id 599.
  const plain = encodeWithAlallo(tokPath, samples[9]);
  assert.ok(!plain.includes(599));
  assert.equal(JSON.parse(alallo(['tokenizer', 'decode', '--tokenizer', tokPath, '--ids', plain.join(',')])), samples[9]);
});

test('SentencePiece-style BPE with byte fallback matches Hugging Face tokenizers', () => {
  // A small Llama 2 layout: <unk> <s> </s>, 256 byte tokens, pieces, merges.
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  const pieces = ['▁', 'e', 't', 'h', 'a', 'o', 'n', 's', 'r', 'i', 'l', 'd', 'c',
    '▁t', 'he', '▁the', 'an', '▁a', 'on', 'er', 'in', '▁s', 'nd', '▁and', '▁o', 're', 'is', 'ed', '▁c', 'ing'];
  pieces.forEach((p, i) => { vocab[p] = 259 + i; });
  const merges = [['▁', 't'], ['h', 'e'], ['▁t', 'he'], ['a', 'n'], ['▁', 'a'], ['o', 'n'], ['e', 'r'],
    ['i', 'n'], ['▁', 's'], ['n', 'd'], ['▁a', 'nd'], ['▁', 'o'], ['r', 'e'], ['i', 's'], ['e', 'd'], ['▁', 'c'], ['in', 'g']]
    .filter(([a, b]) => a in vocab && b in vocab && (a + b) in vocab);
  const json = {
    version: '1.0',
    added_tokens: [0, 1, 2].map((id) => ({ id, content: ['<unk>', '<s>', '</s>'][id], single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab, merges },
  };
  const tokPath = path.join(dir, 'sp.json');
  fs.writeFileSync(tokPath, JSON.stringify(json));
  const hf = new Tokenizer(json, {});
  const texts = ['the cat and the hat', 'Thé naïve reader is reading ☃ and 😀', '  two  spaces  ', 'x'];
  for (const text of texts) {
    const want = hf.encode(text, { add_special_tokens: false }).ids;
    assert.deepEqual(encodeWithAlallo(tokPath, text, true), want, `text: ${JSON.stringify(text)}`);
  }
});

test('Llama 3 layout (Split regex + ByteLevel, ignore_merges) matches Hugging Face tokenizers', () => {
  // The merges of a freshly trained tokenizer under Llama 3's pre-tokenizer.
  let corpus = '';
  for (let i = 0; i < 1000; i++) corpus += samples[(i * 5) % samples.length] + ` ${i * 37}\n`;
  const input = path.join(dir, 'corpus3.txt');
  fs.writeFileSync(input, corpus);
  const base = path.join(dir, 'base3.json');
  alallo(['tokenizer', 'train', '--input', input, '--vocab-size', '500', '--out', base]);
  const json = JSON.parse(fs.readFileSync(base, 'utf8'));
  json.pre_tokenizer = {
    type: 'Sequence',
    pretokenizers: [
      {
        type: 'Split',
        pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
        behavior: 'Isolated',
        invert: false,
      },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
  json.model.ignore_merges = true;
  const tokPath = path.join(dir, 'llama3.json');
  fs.writeFileSync(tokPath, JSON.stringify(json));
  const hf = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  for (const text of [...samples, corpus.slice(0, 4000)]) {
    const want = hf.encode(text, { add_special_tokens: false }).ids;
    assert.deepEqual(encodeWithAlallo(tokPath, text, true), want, `text: ${JSON.stringify(text.slice(0, 80))}`);
  }
});
