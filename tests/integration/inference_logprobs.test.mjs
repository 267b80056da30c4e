// inference_logprobs.test.mjs - log-probabilities of chat completions, as
// OpenAI's API defines them (docs/serving.md): `logprobs: true` and
// `top_logprobs: 0..20` give choices[].logprobs.content[] with token,
// logprob, bytes and top_logprobs, in streamed chunks too (the chunks'
// entries joined are the whole answer's); greedy tokens are the most
// likely of their top; the answer is the one without logprobs; bad values
// are a 400 naming the field. Legacy completions (`logprobs: 0..5`) give
// OpenAI's legacy shape - tokens, token_logprobs, top_logprobs (objects),
// text_offset - plain and streamed, with the chat path's values for the
// same prompt, and with echo the prompt's own tokens first; a prompt of
// token ids answers as its text does. (The values themselves are checked against
// the model's own log-softmax in tests/unit/train/test_serve_batcher.c.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Serve, run, sseEvents as events, tinyModelsDir } from './service_harness.mjs';

const messages = [{ role: 'user', content: 'Review: a good film\nSentiment:' }];
const TOKENS = 12;

describe('chat completions with logprobs', () => {
  let s;
  const models = tinyModelsDir();
  const chat = (extra) => s.call('POST', '/v1/chat/completions', { body: { model: 'tiny', messages, max_tokens: TOKENS, temperature: 0, ...extra } });
  before(async () => {
    s = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference-threads', '1'] });
  });
  after(async () => s && s.stop());

  let entries;
  test('logprobs and top_logprobs: each token, its log-probability, its bytes and the most likely tokens', async () => {
    const plain = await chat({});
    assert.equal(plain.status, 200, plain.text);
    assert.equal(plain.json.choices[0].logprobs, null);
    const r = await chat({ logprobs: true, top_logprobs: 5 });
    assert.equal(r.status, 200, r.text);
    const choice = r.json.choices[0];
    assert.equal(choice.message.content, plain.json.choices[0].message.content, 'logprobs do not change the answer');
    entries = choice.logprobs.content;
    assert.equal(entries.length, r.json.usage.completion_tokens);
    assert.ok(entries.length > 0);
    for (const e of entries) {
      assert.deepEqual(Object.keys(e).sort(), ['bytes', 'logprob', 'token', 'top_logprobs']);
      assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob), JSON.stringify(e));
      assert.equal(e.top_logprobs.length, 5);
      // greedy: the token taken is the most likely one
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.equal(e.top_logprobs[0].logprob, e.logprob);
      let mass = 0;
      e.top_logprobs.forEach((t, k) => {
        assert.deepEqual(Object.keys(t).sort(), ['bytes', 'logprob', 'token']);
        if (k > 0) assert.ok(t.logprob <= e.top_logprobs[k - 1].logprob, 'most likely first');
        mass += Math.exp(t.logprob);
      });
      assert.ok(mass <= 1 + 1e-6, `the top's probabilities sum to ${mass}`);
      const text = Buffer.from(e.bytes).toString('utf8');
      if (!text.includes('\ufffd')) assert.equal(e.token, text);
    }
    // the tokens' bytes joined are the answer
    assert.equal(Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString('utf8'), choice.message.content);
    // without top_logprobs: the tokens alone, the same log-probabilities
    const bare = await chat({ logprobs: true });
    assert.equal(bare.status, 200, bare.text);
    assert.deepEqual(
      bare.json.choices[0].logprobs.content,
      entries.map((e) => ({ ...e, top_logprobs: [] })),
    );
  });

  test('streamed: each chunk carries its tokens, joined they are the whole answer\'s', async () => {
    const r = await chat({ logprobs: true, top_logprobs: 5, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200, r.text);
    const evs = events(r.text);
    const got = evs.flatMap((e) => (e.choices[0] && e.choices[0].logprobs ? e.choices[0].logprobs.content : []));
    assert.deepEqual(got, entries);
    // the content chunks carry the tokens of their text
    for (const e of evs.filter((x) => x.choices[0] && x.choices[0].delta.content)) {
      const lp = e.choices[0].logprobs;
      assert.ok(lp && lp.content.length > 0, JSON.stringify(e));
      // (a token that ends inside a character goes with the chunk that completes it)
      if (!lp.content.some((t) => t.token.includes('\ufffd')))
        assert.equal(Buffer.concat(lp.content.map((t) => Buffer.from(t.bytes))).toString('utf8'), e.choices[0].delta.content);
    }
    const plain = events((await chat({ stream: true })).text);
    assert.ok(plain.every((e) => e.choices[0].logprobs === null));
  });

  test('bad logprobs or top_logprobs: a 400 naming the field', async () => {
    for (const [body, param] of [
      [{ logprobs: 'yes' }, 'logprobs'],
      [{ logprobs: 1 }, 'logprobs'],
      [{ logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [{ logprobs: true, top_logprobs: -1 }, 'top_logprobs'],
      [{ logprobs: true, top_logprobs: 1.5 }, 'top_logprobs'],
      [{ logprobs: true, top_logprobs: '3' }, 'top_logprobs'],
      [{ top_logprobs: 3 }, 'top_logprobs'],
      [{ logprobs: false, top_logprobs: 3 }, 'top_logprobs'],
    ]) {
      const r = await chat(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.param, param, JSON.stringify(body));
      assert.match(r.json.error.message, new RegExp(param), JSON.stringify(body));
    }
    const ok = await chat({ logprobs: true, top_logprobs: 20, max_tokens: 2 });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.choices[0].logprobs.content[0].top_logprobs.length, 20);
  });

  test('serve --inference child: logprobs and prompts of token ids are refused, naming the field', async () => {
    const c = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference', 'child'] });
    try {
      const r = await c.call('POST', '/v1/chat/completions', { body: { model: 'tiny', messages, max_tokens: 2, logprobs: true } });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'logprobs');
      const legacy = await c.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: 'hi', max_tokens: 2, logprobs: 1 } });
      assert.equal(legacy.status, 400, legacy.text);
      assert.equal(legacy.json.error.param, 'logprobs');
      const ids = await c.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: [5, 6], max_tokens: 2 } });
      assert.equal(ids.status, 400, ids.text);
      assert.equal(ids.json.error.param, 'prompt');
      assert.match(ids.json.error.message, /token ids are served by the resident inference engine only/);
    } finally {
      await c.stop();
    }
  });
});

// The legacy shape's arrays of the streamed chunks, joined.
function joinLegacy(lps) {
  const keys = ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'];
  return Object.fromEntries(keys.map((k) => [k, lps.flatMap((l) => l[k])]));
}

describe('legacy completions with logprobs', () => {
  let s;
  const models = tinyModelsDir();
  // the chat above as alallo's plain layout writes it (docs/data.md):
  // the same tokens, so the same log-probabilities
  const PROMPT = `User:\n${messages[0].content}\n\nAssistant:\n`;
  const complete = (extra) => s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: TOKENS, temperature: 0, ...extra } });
  before(async () => {
    s = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference-threads', '1'] });
  });
  after(async () => s && s.stop());

  let legacy;
  test('logprobs: N gives tokens, token_logprobs, top_logprobs and text_offset, the chat path\'s values', async () => {
    const plain = await complete({});
    assert.equal(plain.status, 200, plain.text);
    assert.equal(plain.json.choices[0].logprobs, null);
    const r = await complete({ logprobs: 5 });
    assert.equal(r.status, 200, r.text);
    const choice = r.json.choices[0];
    assert.equal(choice.text, plain.json.choices[0].text, 'logprobs do not change the answer');
    legacy = choice.logprobs;
    assert.deepEqual(Object.keys(legacy).sort(), ['text_offset', 'token_logprobs', 'tokens', 'top_logprobs']);
    const n = r.json.usage.completion_tokens;
    assert.ok(n > 0);
    for (const k of Object.keys(legacy)) assert.equal(legacy[k].length, n, k);

    // the chat path, the same tokens after the same prompt
    const chat = await s.call('POST', '/v1/chat/completions', { body: { model: 'tiny', messages, max_tokens: TOKENS, temperature: 0, logprobs: true, top_logprobs: 5 } });
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.json.usage.prompt_tokens, r.json.usage.prompt_tokens);
    assert.equal(chat.json.choices[0].message.content, choice.text);
    const entries = chat.json.choices[0].logprobs.content;
    assert.deepEqual(legacy.tokens, entries.map((e) => e.token));
    assert.deepEqual(legacy.token_logprobs, entries.map((e) => e.logprob));
    legacy.top_logprobs.forEach((top, i) => {
      // the 5 most likely, most likely first, and the token taken
      const want = {};
      for (const t of entries[i].top_logprobs) if (!(t.token in want)) want[t.token] = t.logprob;
      if (!(entries[i].token in want)) want[entries[i].token] = entries[i].logprob;
      assert.deepEqual(top, want);
      assert.deepEqual(Object.keys(top), Object.keys(want), 'most likely first');
      assert.equal(Object.keys(top)[0], legacy.tokens[i], 'greedy: the token taken is the most likely');
    });
    // text_offset: where each token starts in the text, in characters
    let at = 0;
    entries.forEach((e, i) => {
      assert.equal(legacy.text_offset[i], at);
      at += [...Buffer.from(e.bytes).toString('latin1')].filter((c) => (c.charCodeAt(0) & 0xc0) !== 0x80).length;
      if (!e.token.includes('\ufffd')) assert.equal([...choice.text].slice(legacy.text_offset[i]).join('').slice(0, e.token.length), e.token);
    });
    assert.equal(at, [...choice.text].length);

    // logprobs: 0: each place has the token taken alone
    const zero = await complete({ logprobs: 0 });
    assert.equal(zero.status, 200, zero.text);
    assert.deepEqual(zero.json.choices[0].logprobs.tokens, legacy.tokens);
    zero.json.choices[0].logprobs.top_logprobs.forEach((top, i) => assert.deepEqual(top, { [legacy.tokens[i]]: legacy.token_logprobs[i] }));
  });

  test('streamed: text_completion chunks whose text and logprobs, joined, are the plain answer\'s', async () => {
    const plain = (await complete({ logprobs: 5 })).json;
    const r = await complete({ logprobs: 5, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.text.endsWith('data: [DONE]\n\n'));
    const evs = events(r.text);
    const chunks = evs.filter((e) => e.choices.length > 0);
    assert.ok(chunks.length > 2, 'the answer comes in pieces');
    for (const e of chunks) {
      assert.equal(e.object, 'text_completion');
      assert.equal(e.id, chunks[0].id);
    }
    assert.equal(chunks.map((e) => e.choices[0].text).join(''), plain.choices[0].text);
    chunks.slice(0, -1).forEach((e) => assert.equal(e.choices[0].finish_reason, null));
    assert.equal(chunks.at(-1).choices[0].finish_reason, plain.choices[0].finish_reason);
    assert.equal(chunks.at(-1).choices[0].text, '');
    const lps = chunks.map((e) => e.choices[0].logprobs).filter(Boolean);
    assert.deepEqual(joinLegacy(lps), plain.choices[0].logprobs);
    assert.deepEqual(joinLegacy(lps), legacy);
    // a chunk with text carries the tokens of that text
    for (const e of chunks.filter((x) => x.choices[0].text)) {
      const lp = e.choices[0].logprobs;
      assert.ok(lp && lp.tokens.length > 0, JSON.stringify(e));
      if (!lp.tokens.some((t) => t.includes('\ufffd'))) assert.equal(lp.tokens.join(''), e.choices[0].text);
    }
    // the usage last, with no choice
    assert.deepEqual(evs.at(-1).choices, []);
    assert.deepEqual(evs.at(-1).usage, plain.usage);
    // without logprobs: null in every chunk, no usage unless asked
    const bare = events((await complete({ stream: true })).text);
    assert.ok(bare.every((e) => e.choices.length === 1 && e.choices[0].logprobs === null));
    assert.equal(bare.map((e) => e.choices[0].text).join(''), plain.choices[0].text);
  });

  test('echo: the prompt before the answer, plain and streamed', async () => {
    const text = (await complete({})).json.choices[0].text;
    const r = await complete({ echo: true });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].text, PROMPT + text);
    const evs = events((await complete({ echo: true, stream: true })).text);
    assert.equal(evs[0].choices[0].text, PROMPT);
    assert.equal(evs.map((e) => e.choices[0].text).join(''), PROMPT + text);
  });

  test('echo with logprobs: the prompt\'s own tokens first, each after the tokens before it, then the answer\'s', async () => {
    const plain = (await complete({ logprobs: 2 })).json.choices[0];
    const r = await complete({ echo: true, logprobs: 2 });
    assert.equal(r.status, 200, r.text);
    const c = r.json.choices[0];
    assert.equal(c.text, PROMPT + plain.text);
    const lp = c.logprobs;
    const n = plain.logprobs.tokens.length, p = lp.tokens.length - n;
    assert.ok(p > 5, 'the prompt\'s tokens are there');
    for (const k of Object.keys(plain.logprobs)) assert.equal(lp[k].length, p + n, k);
    // the answer's part is the answer's own, its offsets after the prompt
    for (const k of ['tokens', 'token_logprobs', 'top_logprobs']) assert.deepEqual(lp[k].slice(p), plain.logprobs[k], k);
    assert.deepEqual(lp.text_offset.slice(p), plain.logprobs.text_offset.map((o) => o + [...PROMPT].length));
    // the prompt's tokens spell the prompt (a start token the model adds has no text, no entry)
    assert.equal(lp.tokens.slice(0, p).join(''), PROMPT);
    let at = 0;
    lp.tokens.slice(0, p).forEach((t, i) => {
      assert.equal(lp.text_offset[i], at);
      at += [...t].length;
      const x = lp.token_logprobs[i];
      if (x === null) { // nothing before it: only a first token without a start token
        assert.equal(i, 0);
        assert.equal(lp.top_logprobs[i], null);
        return;
      }
      assert.ok(x <= 0 && Number.isFinite(x), JSON.stringify(x));
      const top = lp.top_logprobs[i];
      const keys = Object.keys(top);
      assert.ok(keys.length >= 2 && keys.length <= 3, JSON.stringify(top));
      assert.ok(top[t] >= x, 'the prompt\'s token is in its top');
      if (keys.length === 3) assert.equal(keys[2], t, 'the token itself last when not among the 2 most likely');
    });
    assert.equal(r.json.usage.prompt_tokens, (await complete({})).json.usage.prompt_tokens);

    // streamed: the first chunk is the prompt with its tokens' entries, and
    // the chunks joined are the plain answer
    const st = await complete({ echo: true, logprobs: 2, stream: true });
    assert.equal(st.status, 200, st.text);
    const chunks = events(st.text).filter((e) => e.choices.length > 0);
    assert.equal(chunks[0].choices[0].text, PROMPT);
    assert.equal(chunks[0].choices[0].logprobs.tokens.join(''), PROMPT);
    assert.equal(chunks.map((e) => e.choices[0].text).join(''), c.text);
    assert.deepEqual(joinLegacy(chunks.map((e) => e.choices[0].logprobs).filter(Boolean)), lp);
  });

  test('a prompt of token ids: answered as its text is, echoed as the ids\' text with an entry for each id', async () => {
    const tok = path.join(path.dirname(models), 'tokenizer.json');
    const ids = JSON.parse(run(['tokenizer', 'encode', '--tokenizer', tok, '--text', PROMPT]));
    // a text prompt gets the start token the model puts first (this learnt
    // tokenizer's one added token); ids are taken as given
    const added = JSON.parse(fs.readFileSync(tok, 'utf8')).added_tokens;
    assert.equal(added.length, 1);
    const byText = (await complete({ logprobs: 1 })).json;
    assert.equal(byText.usage.prompt_tokens, ids.length + 1);
    for (const prompt of [[added[0].id, ...ids], [[added[0].id, ...ids]]]) {
      const r = await complete({ prompt, logprobs: 1 });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json.choices[0], byText.choices[0]);
      assert.deepEqual(r.json.usage, byText.usage);
    }
    const plain = (await complete({ prompt: ids, logprobs: 1 })).json;
    assert.equal(plain.usage.prompt_tokens, ids.length);
    const e = await complete({ prompt: ids, echo: true, logprobs: 1 });
    assert.equal(e.status, 200, e.text);
    const c = e.json.choices[0];
    assert.equal(c.text, PROMPT + plain.choices[0].text);
    assert.equal(c.logprobs.tokens.length, ids.length + plain.usage.completion_tokens);
    assert.equal(c.logprobs.tokens.slice(0, ids.length).join(''), PROMPT);
    assert.equal(c.logprobs.token_logprobs[0], null, 'the first id has nothing before it');
    assert.equal(c.logprobs.top_logprobs[0], null);
    assert.ok(c.logprobs.token_logprobs.slice(1).every((x) => x <= 0));
    // streamed: the ids' text first, then the answer
    const st = events((await complete({ prompt: ids, echo: true, stream: true })).text).filter((x) => x.choices.length > 0);
    assert.equal(st[0].choices[0].text, PROMPT);
    assert.equal(st.map((x) => x.choices[0].text).join(''), c.text);
    // ids the model does not have, or no ids: a 400 on prompt
    for (const prompt of [[400], [ids[0], 100000], [-1], [], [1.5], [[1], [400]], ['a', 1]]) {
      const r = await complete({ prompt });
      assert.equal(r.status, 400, JSON.stringify(prompt));
      assert.equal(r.json.error.param, 'prompt', JSON.stringify(prompt));
    }
    assert.match((await complete({ prompt: [5, 400] })).json.error.message, /prompt_ids\[1\].* 0 to 399/);
  });

  test('bad logprobs, echo or stream: a 400 naming the field', async () => {
    for (const [body, param] of [
      [{ logprobs: 6 }, 'logprobs'],
      [{ logprobs: -1 }, 'logprobs'],
      [{ logprobs: true }, 'logprobs'],
      [{ logprobs: 1.5 }, 'logprobs'],
      [{ logprobs: '2' }, 'logprobs'],
      [{ echo: 'yes' }, 'echo'],
      [{ stream: 'yes' }, 'stream'],
      [{ stream: true, logprobs: 9 }, 'logprobs'],
    ]) {
      const r = await complete(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.param, param, JSON.stringify(body));
      assert.match(r.json.error.message, new RegExp(param), JSON.stringify(body));
    }
  });
});
