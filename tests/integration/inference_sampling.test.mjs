// inference_sampling.test.mjs - the sampling fields clients send beside
// the prompt (docs/api.md): `stop` (a text or up to 4) ends the answer
// before the first that comes, finish_reason "stop", in chat and legacy
// completions, plain and streamed (a stream never shows a byte of the stop
// text), with logprobs for the tokens the answer shows; `top_p` narrows
// the nucleus (0 keeps the most likely token alone: the greedy answer);
// without a seed each request samples anew, with one it repeats; `n` (up
// to 32) and lists of prompts give each answer its own request would give
// (the k-th of a prompt from seed + k), in OpenAI's order, plain and
// streamed (each chunk naming its choice); bad values are
// a 400 naming the field; `serve --inference child` refuses `stop`, `n`
// and lists, and serves `top_p`.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Serve, sseEvents as events, tinyModelsDir } from './service_harness.mjs';

const messages = [{ role: 'user', content: 'Review: a good film\nSentiment:' }];
const PROMPT = 'Review: a slow, dull film\nSentiment:';
const TOKENS = 24;

// A stop text of two characters from `text`, its first ASCII and not the
// text's first (so a stream would show it at once unless held back).
function stopFrom(text) {
  const chars = [...text];
  for (let i = 1; i + 1 < chars.length; i++)
    if (chars[i].charCodeAt(0) < 128 && chars[i] !== chars[0]) return chars[i] + chars[i + 1];
  return null;
}

describe('stop and top_p on the engine', () => {
  let s;
  const models = tinyModelsDir();
  const legacy = (extra) => s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: TOKENS, temperature: 0, ...extra } });
  const chat = (extra) => s.call('POST', '/v1/chat/completions', { body: { model: 'tiny', messages, max_tokens: TOKENS, temperature: 0, ...extra } });
  before(async () => {
    s = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference-threads', '1'] });
  });
  after(async () => s && s.stop());

  // sampled with a seed: the tiny model's greedy answers repeat one
  // character, its sampled ones vary (and a seed gives the same again)
  const SAMPLED = { temperature: 1, seed: 11 };

  test('legacy completions: the answer ends before the first stop text, plain, listed and streamed', async () => {
    const legacy = (extra) => s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: TOKENS, ...SAMPLED, ...extra } });
    const plain = await legacy({});
    assert.equal(plain.status, 200, plain.text);
    const whole = plain.json.choices[0].text;
    const stop = stopFrom(whole);
    assert.ok(stop, `an answer with a stop text to take: ${JSON.stringify(whole)}`);
    const want = whole.slice(0, whole.indexOf(stop));
    const r = await legacy({ stop });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].text, want);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    assert.ok(r.json.usage.completion_tokens <= plain.json.usage.completion_tokens);
    const listed = await legacy({ stop: ['\u0001never', stop] });
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.json.choices[0].text, want);
    const none = await legacy({ stop: ['\u0001never'] });
    assert.equal(none.json.choices[0].text, whole, 'a stop text that never comes changes nothing');
    assert.equal(none.json.choices[0].finish_reason, plain.json.choices[0].finish_reason);
    const streamed = await legacy({ stop, stream: true });
    assert.equal(streamed.status, 200, streamed.text);
    const chunks = events(streamed.text);
    assert.equal(chunks.map((c) => c.choices[0].text).join(''), want);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    // logprobs: the tokens whose text the answer shows
    const lp = await legacy({ stop, logprobs: 1 });
    assert.equal(lp.status, 200, lp.text);
    assert.equal(lp.json.choices[0].text, want);
    const tokens = lp.json.choices[0].logprobs.tokens;
    assert.ok(tokens.length <= lp.json.usage.completion_tokens);
    assert.ok(tokens.join('').startsWith(want), `${JSON.stringify(tokens)} shows ${JSON.stringify(want)}`);
    assert.ok(tokens.slice(0, -1).join('').length < want.length || want === '', `no token past the stop text: ${JSON.stringify({ want, tokens, stop, whole })}`);
    // streamed, the chunks' tokens are the same: none whose text was held
    // back and then cut goes out
    const lpStream = events((await legacy({ stop, logprobs: 1, stream: true })).text).filter((x) => x.choices.length > 0);
    assert.deepEqual(lpStream.flatMap((x) => x.choices[0].logprobs?.tokens ?? []), tokens);
    assert.equal(lpStream.map((x) => x.choices[0].text).join(''), want);
  });

  test('chat completions: the message ends before the stop text, plain and streamed', async () => {
    const chat = (extra) => s.call('POST', '/v1/chat/completions', { body: { model: 'tiny', messages, max_tokens: TOKENS, ...SAMPLED, ...extra } });
    const plain = await chat({});
    assert.equal(plain.status, 200, plain.text);
    const whole = plain.json.choices[0].message.content;
    const stop = stopFrom(whole);
    assert.ok(stop, `an answer with a stop text to take: ${JSON.stringify(whole)}`);
    const want = whole.slice(0, whole.indexOf(stop));
    const r = await chat({ stop: [stop] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, want);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    const streamed = await chat({ stop, stream: true });
    assert.equal(streamed.status, 200, streamed.text);
    const chunks = events(streamed.text);
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), want);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    // the answer's first character as the stop text: an empty answer
    const first = await chat({ stop: [...whole][0] });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.choices[0].message.content, '');
    assert.equal(first.json.choices[0].finish_reason, 'stop');
  });

  test('top_p: 0 keeps the most likely token alone; 1 is no cut', async () => {
    const greedy = await legacy({});
    const zero = await legacy({ temperature: 1, seed: 7, top_p: 0 });
    assert.equal(zero.status, 200, zero.text);
    assert.equal(zero.json.choices[0].text, greedy.json.choices[0].text);
    const sampled = await legacy({ temperature: 1.5, seed: 7 });
    const one = await legacy({ temperature: 1.5, seed: 7, top_p: 1 });
    assert.equal(one.json.choices[0].text, sampled.json.choices[0].text);
    assert.notEqual(sampled.json.choices[0].text, greedy.json.choices[0].text, 'sampling at 1.5 leaves the greedy answer');
    const chatZero = await chat({ temperature: 1, seed: 3, top_p: 0 });
    assert.equal(chatZero.json.choices[0].message.content, (await chat({})).json.choices[0].message.content);
  });

  test('without a seed each request samples anew; with one it repeats', async () => {
    const answers = new Set();
    for (let i = 0; i < 4; i++) answers.add((await legacy({ temperature: 1.5 })).json.choices[0].text);
    assert.ok(answers.size >= 2, `four unseeded samples, all ${JSON.stringify([...answers])}`);
    const a = await legacy({ temperature: 1.5, seed: 99 });
    const b = await legacy({ temperature: 1.5, seed: 99 });
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
    const c = await chat({ temperature: 1.5, seed: 99 });
    const d = await chat({ temperature: 1.5, seed: 99 });
    assert.equal(c.json.choices[0].message.content, d.json.choices[0].message.content);
  });

  test('n and lists of prompts: each answer is the one its own request gives, in OpenAI\'s order', async () => {
    const prompts = [PROMPT, 'Review: a fine cast\nSentiment:', [5, 6, 7, 8]];
    const r = await legacy({ prompt: prompts, n: 2, temperature: 1, seed: 5, logprobs: 1, echo: true });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices.length, 6);
    let pt = 0;
    let ct = 0;
    for (let p = 0; p < 3; p++) {
      for (let k = 0; k < 2; k++) {
        const one = await legacy({ prompt: prompts[p], temperature: 1, seed: 5 + k, logprobs: 1, echo: true });
        assert.equal(one.status, 200, one.text);
        const c = r.json.choices[p * 2 + k];
        assert.equal(c.index, p * 2 + k);
        assert.deepEqual({ ...c, index: 0 }, one.json.choices[0], `prompt ${p}, answer ${k}`);
        if (k === 0) pt += one.json.usage.prompt_tokens;
        ct += one.json.usage.completion_tokens;
      }
    }
    assert.deepEqual(r.json.usage, { prompt_tokens: pt, completion_tokens: ct, total_tokens: pt + ct });
    assert.ok(r.json.choices[2].text.startsWith(prompts[1]), 'each echoes its own prompt');
    // chat: n answers of one conversation
    const c = await chat({ n: 3, temperature: 1, seed: 5 });
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.choices.length, 3);
    for (let k = 0; k < 3; k++) {
      const one = await chat({ temperature: 1, seed: 5 + k });
      assert.equal(c.json.choices[k].index, k);
      assert.equal(c.json.choices[k].message.content, one.json.choices[0].message.content);
    }
    assert.equal(c.json.usage.prompt_tokens, (await chat({ max_tokens: 1 })).json.usage.prompt_tokens, 'the conversation counts once');
    // unseeded: n samples, not one sample n times
    const many = await legacy({ n: 4, temperature: 1.5 });
    assert.ok(new Set(many.json.choices.map((x) => x.text)).size >= 2, JSON.stringify(many.json.choices));
  });

  // Several answers streamed: each chunk names its choice; a choice's
  // chunks add up to the answer its own request gives (the plain list's),
  // each ends with its finish reason, the usage comes once, then [DONE].
  test('n and lists of prompts streamed: each choice\'s chunks are its own answer, interleaved', async () => {
    const prompts = [PROMPT, 'Review: a fine cast\nSentiment:'];
    const body = { prompt: prompts, n: 2, temperature: 1, seed: 5, logprobs: 1, echo: true };
    const plain = await legacy(body);
    assert.equal(plain.status, 200, plain.text);
    const r = await legacy({ ...body, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /data: \[DONE\]\n\n$/);
    const chunks = events(r.text);
    const usage = chunks.filter((x) => x.choices.length === 0);
    assert.equal(usage.length, 1, 'the usage once');
    assert.deepEqual(usage[0].usage, plain.json.usage);
    assert.equal(new Set(chunks.map((x) => x.id)).size, 1, 'one id');
    for (let i = 0; i < 4; i++) {
      const mine = chunks.filter((x) => x.choices.length === 1 && x.choices[0].index === i).map((x) => x.choices[0]);
      const want = plain.json.choices[i];
      assert.equal(mine.map((c) => c.text).join(''), want.text, `choice ${i}`);
      assert.equal(mine.filter((c) => c.finish_reason).length, 1, `choice ${i} ends once`);
      assert.equal(mine.at(-1).finish_reason, want.finish_reason);
      assert.deepEqual(mine.flatMap((c) => c.logprobs?.tokens ?? []), want.logprobs.tokens, `choice ${i}'s tokens`);
    }
    // chat: n answers of one conversation, each its own request's
    const c = await chat({ n: 3, temperature: 1, seed: 5, stream: true, stream_options: { include_usage: true } });
    assert.equal(c.status, 200, c.text);
    const cc = events(c.text);
    for (let k = 0; k < 3; k++) {
      const one = await chat({ temperature: 1, seed: 5 + k });
      const mine = cc.filter((x) => x.choices.length === 1 && x.choices[0].index === k).map((x) => x.choices[0]);
      assert.equal(mine[0].delta.role, 'assistant', `choice ${k} starts with its role`);
      assert.equal(mine.map((x) => x.delta.content ?? '').join(''), one.json.choices[0].message.content, `choice ${k}`);
      assert.equal(mine.at(-1).finish_reason, one.json.choices[0].finish_reason);
    }
    const cu = cc.filter((x) => x.choices.length === 0);
    assert.equal(cu.length, 1);
    const plainChat = await chat({ n: 3, temperature: 1, seed: 5 });
    assert.deepEqual(cu[0].usage, plainChat.json.usage);
  });

  test('bad stop, top_p, n or best_of: a 400 naming the field', async () => {
    const bad = [
      [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
      [{ stop: '' }, 'stop'],
      [{ stop: ['ok', ''] }, 'stop'],
      [{ stop: 'x'.repeat(257) }, 'stop'],
      [{ stop: 5 }, 'stop'],
      [{ stop: [5] }, 'stop'],
      [{ stop: { a: 1 } }, 'stop'],
      [{ top_p: 1.5 }, 'top_p'],
      [{ top_p: -0.1 }, 'top_p'],
      [{ top_p: 'high' }, 'top_p'],
    ];
    for (const [extra, param] of bad) {
      for (const call of [legacy, chat]) {
        const r = await call(extra);
        assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
        assert.equal(r.json.error.param, param, JSON.stringify(extra));
      }
    }
    const list = (k) => Array.from({ length: k }, () => PROMPT);
    for (const [extra, param] of [
      [{ n: 0 }, 'n'], [{ n: 33 }, 'n'], [{ n: 'one' }, 'n'], [{ n: 1.5 }, 'n'],
      [{ prompt: list(33) }, 'prompt'], [{ prompt: list(17), n: 2 }, 'n'],
      [{ best_of: 3 }, 'best_of'], [{ n: 2, best_of: 3 }, 'best_of'],
      [{ prompt: [PROMPT, 5] }, 'prompt'], [{ prompt: [PROMPT, {}] }, 'prompt'], [{ prompt: [] }, 'prompt'],
    ]) {
      const r = await legacy(extra);
      assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
      assert.equal(r.json.error.param, param, JSON.stringify(extra));
    }
    for (const [extra, param] of [[{ n: 0 }, 'n'], [{ n: 33 }, 'n'], [{ n: 2, stream: 'yes' }, 'stream']]) {
      const r = await chat(extra);
      assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
      assert.equal(r.json.error.param, param, JSON.stringify(extra));
    }
    // one prompt of a list the model cannot take: named by its place
    const lost = await legacy({ prompt: [[5], [400]] });
    assert.equal(lost.status, 400, lost.text);
    assert.equal(lost.json.error.param, 'prompt');
    assert.match(lost.json.error.message, /^prompt\[1\]: .*prompt_ids\[0\]/);
    const fine = await legacy({ n: 1, best_of: 1, stop: null, top_p: null, stop_extra: 'ignored' });
    assert.equal(fine.status, 200, fine.text);
    assert.equal(fine.json.choices.length, 1);
    const most = await legacy({ prompt: list(16), n: 2, max_tokens: 1, best_of: 2 });
    assert.equal(most.status, 200, most.text);
    assert.equal(most.json.choices.length, 32);
    const exact = await legacy({ stop: 'x'.repeat(256) });
    assert.equal(exact.status, 200, '256 bytes is the bound, not past it');
  });

  test('serve --inference child: stop, n and lists are refused naming the field, top_p is served', async () => {
    const c = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference', 'child'] });
    try {
      for (const path of ['/v1/completions', '/v1/chat/completions']) {
        const body = path === '/v1/completions' ? { prompt: PROMPT } : { messages };
        const r = await c.call('POST', path, { body: { model: 'tiny', ...body, max_tokens: 4, stop: '\n' } });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, 'stop');
        assert.match(r.json.error.message, /served by the resident inference engine only/);
      }
      for (const [body, param] of [[{ prompt: PROMPT, n: 2 }, 'n'], [{ prompt: [PROMPT, PROMPT] }, 'prompt'], [{ messages, n: 2 }, 'n']]) {
        const r = await c.call('POST', body.messages ? '/v1/chat/completions' : '/v1/completions', { body: { model: 'tiny', max_tokens: 2, ...body } });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, param);
        assert.match(r.json.error.message, /served by the resident inference engine only/);
      }
      const greedy = await c.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: 8, temperature: 0 } });
      const zero = await c.call('POST', '/v1/completions', { body: { model: 'tiny', prompt: PROMPT, max_tokens: 8, temperature: 1, seed: 7, top_p: 0 } });
      assert.equal(zero.status, 200, zero.text);
      assert.equal(zero.json.choices[0].text, greedy.json.choices[0].text);
    } finally {
      await c.stop();
    }
  });
});
