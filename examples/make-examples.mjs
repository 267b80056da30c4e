// Writes alallo's sample data sets (deterministic; run with `node make-examples.mjs`).
//
// The task: say whether a short review of a public service is positive or
// negative. Prompt/completion form (sentiment-train.jsonl, sentiment-test.jsonl)
// and chat form (sentiment-chat.jsonl). The test set uses subjects and phrases
// in combinations the training set never shows, so accuracy on it measures
// what fine-tuning taught, not what it memorised (docs/sample-task.md).
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
const good = ['works well', 'serves the people faithfully', 'is a great success', 'has done excellent work',
  'deserves our praise', 'brought much prosperity', 'is efficient and honest', 'is admirable in every way',
  'exceeded every hope', 'was a wise and good measure'];
const bad = ['works badly', 'fails the people', 'is a great failure', 'has done poor work',
  'deserves our censure', 'brought much distress', 'is wasteful and corrupt', 'is shameful in every way',
  'disappointed every hope', 'was a foolish and harmful measure'];
const tails = ['', ' this year', ' in my opinion', ', I am told', ' at last', ' once again'];

function example(subjectList, phraseIdx) {
  const positive = rand() < 0.5;
  const phrase = (positive ? good : bad)[pick(phraseIdx)];
  const text = `${pick(subjectList)} ${phrase}${pick(tails)}.`;
  return { text, label: positive ? 'positive' : 'negative' };
}

const trainSubjects = subjects.slice(0, 14), testSubjects = subjects.slice(14);
const idx = [...Array(10).keys()];
const trainPhrases = idx.slice(0, 8), testPhrases = idx.slice(8);

const prompt = (t) => `Review: ${t}\nSentiment:`;
const lines = (rows) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';

const train = [], test = [], chat = [];
for (let i = 0; i < 200; i++) {
  const e = example(trainSubjects, trainPhrases);
  train.push({ prompt: prompt(e.text), completion: ` ${e.label}` });
}
for (let i = 0; i < 100; i++) {
  // held out: unseen subjects with any phrase, or any subject with unseen phrases
  const e = i % 2 ? example(testSubjects, idx) : example(subjects, testPhrases);
  test.push({ prompt: prompt(e.text), completion: ` ${e.label}` });
}
for (let i = 0; i < 100; i++) {
  const e = example(trainSubjects, trainPhrases);
  chat.push({ messages: [
    { role: 'system', content: 'Answer with one word: positive or negative.' },
    { role: 'user', content: e.text },
    { role: 'assistant', content: e.label },
  ] });
}
writeFileSync('sentiment-train.jsonl', lines(train));
writeFileSync('sentiment-test.jsonl', lines(test));
writeFileSync('sentiment-chat.jsonl', lines(chat));
