// Writes alallo's sample data sets (deterministic; run with `node make-examples.mjs`).
//
// The task: say whether a short review of a public service is positive or
// negative. Prompt/completion form (sentiment-train.jsonl, 200 examples;
// sentiment-test.jsonl, 100 held out) and chat form (sentiment-chat.jsonl,
// 100 examples). A review calls its subject two things: of the same
// polarity ("The mint is honest and efficient."), or, in a third of the
// reviews, of opposite ones, where what comes after "but" or "yet" decides
// ("The mint is honest but wasteful." is negative). The words are taught by
// the training set; the contrast makes the model weigh their order.
//
// The test set holds out two things, and says which in a "held_out" field
// (the trainer ignores fields it does not know):
//   * "subject": a subject no training review mentions, with a pair of words
//     the training set uses;
//   * "word pair": a training subject with two words that no training review
//     puts together (each word alone is in the training set).
// So accuracy on it measures what fine-tuning taught, not what it
// memorised. Words no training review uses at all are not tested: alallo-base
// is too small to know their sentiment from pretraining, and with them the
// test measured the base model's vocabulary rather than fine-tuning
// (docs/sample-task.md, "Why the test is built this way").
import { writeFileSync } from 'node:fs';

let seed = 12345;
function rand() { // xorshift32: the same files on every machine
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const subjects = ['The post office', 'The new bridge', 'The city library', 'The harbor', 'The railway',
  'The school board', 'The treasury', 'The army', 'The navy', 'The hospital', 'The court',
  'The customs house', 'The land office', 'The mint', 'The census', 'The public school',
  'The canal', 'The road to the west', 'The new law', 'The patent office'];
const good = ['honest', 'efficient', 'wise', 'faithful', 'excellent', 'prosperous', 'useful',
  'orderly', 'admirable', 'successful'];
const bad = ['corrupt', 'wasteful', 'foolish', 'shameful', 'harmful', 'ruinous', 'useless',
  'careless', 'disgraceful', 'poor'];
const templates = [
  (s, a, b) => `${s} is ${a} and ${b}`,
  (s, a, b) => `${s} has been ${a} and ${b}`,
  (s, a, b) => `${s} proved ${a}, even ${b}`,
  (s, a, b) => `${s} was found ${a} and ${b}`,
];
const contrasts = [
  (s, a, b) => `${s} is ${a} but ${b}`,
  (s, a, b) => `${s} has been ${a}, yet ${b}`,
];
const tails = ['', ' this year', ' in my opinion', ', I am told', ' at last', ' once again'];

const trainSubjects = subjects.slice(0, 14), testSubjects = subjects.slice(14);
// Word pairs (by index into good/bad, unordered) kept out of training.
const heldPair = (i, j) => (i + j) % 4 === 1;
// (index in the first word's list, index in the second's): the same list
// needs two different words, opposite lists may use the same index.
const pairs = [];
for (let i = 0; i < 10; i++) for (let j = 0; j < 10; j++) pairs.push([i, j]);
const trainPairs = pairs.filter(([i, j]) => !heldPair(i, j));
const testPairs = pairs.filter(([i, j]) => heldPair(i, j));

// positive: the label, or undefined to draw it. One review in three is a
// contrast, whose label is the second word's polarity.
function example(subjectList, pairList, positive = rand() < 0.5) {
  const contrast = rand() < 1 / 3;
  const same = pairList.filter(([i, j]) => contrast || i !== j);
  const [i, j] = pick(same);
  const words = positive ? good : bad, other = positive ? bad : good;
  const form = pick(contrast ? contrasts : templates);
  const text = `${form(pick(subjectList), (contrast ? other : words)[i], words[j])}${pick(tails)}.`;
  return { text, label: positive ? 'positive' : 'negative' };
}

const prompt = (t) => `Review: ${t}\nSentiment:`;
const lines = (rows) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';

const train = [], test = [], chat = [];
const seen = new Set();
for (let i = 0; i < 200; i++) {
  const e = example(trainSubjects, trainPairs, i % 2 === 0); // half of each label
  seen.add(e.text);
  train.push({ prompt: prompt(e.text), completion: ` ${e.label}` });
}
for (let i = 0; i < 100; i++) {
  const held = i % 2 ? 'subject' : 'word pair';
  const positive = i % 4 < 2; // half of each label in each held-out kind
  const e = held === 'subject' ? example(testSubjects, trainPairs, positive)
    : example(trainSubjects, testPairs, positive);
  if (seen.has(e.text)) throw new Error(`test review ${i} is also a training review`);
  test.push({ prompt: prompt(e.text), completion: ` ${e.label}`, held_out: held });
}
for (let i = 0; i < 100; i++) {
  const e = example(trainSubjects, trainPairs);
  chat.push({ messages: [
    { role: 'system', content: 'Answer with one word: positive or negative.' },
    { role: 'user', content: e.text },
    { role: 'assistant', content: e.label },
  ] });
}
writeFileSync('sentiment-train.jsonl', lines(train));
writeFileSync('sentiment-test.jsonl', lines(test));
writeFileSync('sentiment-chat.jsonl', lines(chat));
