// inference_logprobs.test.mjs - log-probabilities of chat completions, as
// OpenAI's API defines them (docs/serving.md): `logprobs: true` and
// `top_logprobs: 0..20` give choices[].logprobs.content[] with token,
// logprob, bytes and top_logprobs, in streamed chunks too (the chunks'
// entries joined are the whole answer's); greedy tokens are the most
// likely of their top; the answer is the one without logprobs; bad values
// are a 400 naming the field. (The values themselves are checked against
// the model's own log-softmax in tests/unit/train/test_serve_batcher.c.)
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Serve, tinyModelsDir } from './service_harness.mjs';

const messages = [{ role: 'user', content: 'Review: a good film\nSentiment:' }];
const TOKENS = 12;

// The data events of a streamed answer, parsed ([DONE] left out).
function events(text) {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: ') && e !== 'data: [DONE]')
    .map((e) => JSON.parse(e.slice(6)));
}

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

  test('serve --inference child: logprobs are refused, naming the field', async () => {
    const c = await Serve.start({ args: ['--models', models, '--local-worker', 'none', '--inference', 'child'] });
    try {
      const r = await c.call('POST', '/v1/chat/completions', { body: { model: 'tiny', messages, max_tokens: 2, logprobs: true } });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'logprobs');
    } finally {
      await c.stop();
    }
  });
});
