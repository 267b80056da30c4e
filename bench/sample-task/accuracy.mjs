// accuracy.mjs - how often a model answers the sample task right.
//
//   node accuracy.mjs ALALLO MODEL_DIR TEST_JSONL
//
// For each {"prompt","completion"} line, asks `alallo generate` for a greedy
// continuation of the prompt (4 tokens, enough for either label) and counts
// the answer right when, leading spaces aside, it starts with the expected
// label (the completion, trimmed). Prints one JSON object: correct, total,
// accuracy, how often each first word was answered, and, when lines carry a
// "held_out" field (what the training set never showed), accuracy per kind.
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

const [alallo, modelDir, testFile] = process.argv.slice(2);
if (!alallo || !modelDir || !testFile) {
  process.stderr.write('usage: node accuracy.mjs ALALLO MODEL_DIR TEST_JSONL\n');
  process.exit(2);
}
const MAX_EXAMPLES = 10000;
const lines = readFileSync(testFile, 'utf8').split('\n').filter((l) => l.trim());
if (lines.length === 0 || lines.length > MAX_EXAMPLES) {
  process.stderr.write(`${testFile}: expected 1 to ${MAX_EXAMPLES} examples\n`);
  process.exit(1);
}
let correct = 0;
const answers = {};
const byKind = {};
for (const line of lines) {
  const { prompt, completion, held_out: kind } = JSON.parse(line);
  const out = execFileSync(alallo, ['generate', '--model-dir', modelDir, '--prompt', prompt,
    '--max-tokens', '4', '--temperature', '0', '--json'], { encoding: 'utf8' });
  const text = JSON.parse(out).text.trimStart();
  const right = text.startsWith(completion.trim());
  if (right) correct++;
  if (typeof kind === 'string') {
    const k = (byKind[kind] ??= { correct: 0, total: 0 });
    k.total++;
    if (right) k.correct++;
  }
  const word = text.split(/\s/)[0] || '(nothing)';
  answers[word] = (answers[word] || 0) + 1;
}
console.log(JSON.stringify({ correct, total: lines.length, accuracy: correct / lines.length, answers,
  held_out: byKind }));
