// chat_completions.test.mjs - POST /v1/chat/completions through the official
// `openai` SDK, unchanged: plain and streamed answers from a base model
// without a chat template and from models carrying the real Qwen2.5 and
// Gemma 2 templates; a long answer streamed piece by piece as it is
// generated; tools in the request; a conversation a template
// refuses; then a job trained through a template with tools on tool-call
// and Alpaca lines (uploaded as such) and the chat of its fine-tuned model.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import OpenAI, { BadRequestError, toFile } from 'openai';

import { ROOT, Serve, tinyModelsDir, tmpdir, waitFor } from './service_harness.mjs';

// A short template with tools in Qwen2.5's manner (whose own preamble alone
// fills the tiny model's 512 positions with this small vocabulary).
const TOOLS_TEMPLATE =
  '{%- if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}' +
  '{%- for m in messages %}<|{{ m.role }}|>{{ m.content if m.content }}' +
  '{%- for tc in m.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}</tool_call>{% endfor %}' +
  '<|end|>\n{% endfor %}{%- if add_generation_prompt %}<|assistant|>{% endif %}';

// The tiny model four times: as made (no template), with Qwen2.5's
// template, with Gemma 2's (the template texts of the unit tests), and with
// the short tools template.
function modelsWithTemplates() {
  const base = tinyModelsDir();
  const dir = tmpdir('alallo-chat-models-');
  for (const [name, tpl] of [['tiny', null], ['tiny-qwen', 'qwen2.5'], ['tiny-gemma', 'gemma2'], ['tiny-tools', '']]) {
    fs.cpSync(path.join(base, 'tiny'), path.join(dir, name), { recursive: true });
    if (tpl === null) continue;
    const text = tpl ? fs.readFileSync(path.join(ROOT, 'tests/unit/train/chat_templates', `${tpl}.jinja`), 'utf8') : TOOLS_TEMPLATE;
    fs.writeFileSync(
      path.join(dir, name, 'tokenizer_config.json'),
      JSON.stringify({ chat_template: text, bos_token: '<s>', eos_token: { content: '<|endoftext|>' } }),
    );
  }
  return dir;
}

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

describe('chat completions with the openai SDK', () => {
  let s;
  let client;
  before(async () => {
    s = await Serve.start({ args: ['--models', modelsWithTemplates(), '--local-worker', 'name=chat,cpus=1,mem=4G'] });
    client = new OpenAI({ apiKey: s.key, baseURL: `${s.url}/v1`, maxRetries: 0, timeout: 120000 });
  });
  after(async () => s && s.stop());

  const ask = { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'the film was a delight' }], max_tokens: 12, temperature: 0, seed: 3 };

  for (const model of ['tiny', 'tiny-qwen']) {
    test(`${model}: plain and streamed answers agree`, async () => {
      const c = await client.chat.completions.create({ model, ...ask });
      assert.equal(c.object, 'chat.completion');
      assert.match(c.id, /^chatcmpl-/);
      assert.equal(c.model, model);
      assert.equal(c.choices.length, 1);
      assert.equal(c.choices[0].message.role, 'assistant');
      assert.equal(typeof c.choices[0].message.content, 'string');
      assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
      assert.ok(c.usage.prompt_tokens > 0);
      assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);

      const stream = await client.chat.completions.create({ model, ...ask, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let role = null;
      let finish = null;
      let usage = null;
      for await (const chunk of stream) {
        assert.equal(chunk.object, 'chat.completion.chunk');
        if (chunk.usage) usage = chunk.usage;
        for (const ch of chunk.choices) {
          if (ch.delta.role) role = ch.delta.role;
          if (ch.delta.content) text += ch.delta.content;
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      assert.equal(role, 'assistant');
      assert.equal(text, c.choices[0].message.content);
      assert.equal(finish, c.choices[0].finish_reason);
      assert.deepEqual(usage, c.usage);
    });
  }

  test('a streamed answer arrives piece by piece while it is generated', async () => {
    const long = { model: 'tiny', messages: [{ role: 'user', content: 'the film was a delight' }], max_tokens: 400, temperature: 0 };
    const w0 = performance.now();
    const whole = await client.chat.completions.create(long);
    const wholeMs = performance.now() - w0;
    // A long answer (the tiny model seldom stops early): enough tokens that
    // generating them takes a while even on a fast machine.
    assert.ok(whole.usage.completion_tokens >= 200, `only ${whole.usage.completion_tokens} tokens`);
    const t0 = performance.now();
    const stream = await client.chat.completions.create({ ...long, stream: true });
    const arrivals = [];
    let text = '';
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        if (ch.delta.content) {
          text += ch.delta.content;
          arrivals.push(performance.now() - t0);
        }
      }
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.ok(arrivals.length >= 50, `${arrivals.length} content chunks`);
    // The first piece came well before the last: the pieces were sent as
    // the generator made them, not all at the end. (Generating the answer
    // took the time between them; sent at once, they would arrive within a
    // millisecond or two of each other.) Judged against the same answer
    // made whole just before, not a fixed time: on a quiet machine the
    // engine makes these 400 tokens in about 50 ms.
    const spread = arrivals[arrivals.length - 1] - arrivals[0];
    const firstHalf = arrivals.filter((t) => t < arrivals[0] + spread / 2).length;
    const least = Math.max(10, 0.1 * wholeMs);
    assert.ok(spread > least, `pieces arrived within ${spread.toFixed(1)} ms (the whole answer took ${wholeMs.toFixed(1)} ms)`);
    assert.ok(firstHalf >= 5 && firstHalf < arrivals.length - 5, `${firstHalf} of ${arrivals.length} pieces in the first half of ${spread.toFixed(1)} ms`);
  });

  test('tools in the request reach the template; the answer keeps OpenAI\'s shape', async () => {
    const c = await client.chat.completions.create({
      model: 'tiny-tools',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: TOOLS,
      max_tokens: 8,
      temperature: 0,
    });
    const plain = await client.chat.completions.create({
      model: 'tiny-tools',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      max_tokens: 8,
      temperature: 0,
    });
    // The template writes the tools before the messages.
    assert.ok(c.usage.prompt_tokens > plain.usage.prompt_tokens + 20, `${c.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
    assert.equal(c.choices[0].message.role, 'assistant');
    const m = c.choices[0].message;
    if (m.tool_calls) {
      assert.equal(c.choices[0].finish_reason, 'tool_calls');
      for (const tc of m.tool_calls) assert.equal(typeof JSON.parse(tc.function.arguments), 'object');
    }
  });

  test('a conversation the template refuses is a 400 naming the reason', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny-gemma', ...ask }),
      (e) => e instanceof BadRequestError && e.message.includes('System role not supported') && e.param === 'messages',
    );
    const c = await client.chat.completions.create({ model: 'tiny-gemma', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    assert.equal(c.choices[0].message.role, 'assistant');
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages: [{ role: 'bot', content: 'hi' }] }),
      (e) => e instanceof BadRequestError && e.message.includes('messages[0].role'),
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages: [] }),
      (e) => e instanceof BadRequestError && e.param === 'messages',
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e.status === 404,
    );
  });

  test('uploads: tool calls checked with line numbers, Alpaca and ShareGPT converted', async () => {
    const call = (id) => ({ id, type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } });
    const bad = [
      JSON.stringify({ messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }] }),
      JSON.stringify({ parallel_tool_calls: false, messages: [{ role: 'user', content: 'a' }, { role: 'assistant', tool_calls: [call('c1'), call('c2')] }] }),
    ].join('\n');
    await assert.rejects(
      client.files.create({ file: await toFile(Buffer.from(bad), 'tools.jsonl'), purpose: 'fine-tune' }),
      (e) => e instanceof BadRequestError && e.message.includes('line 2 of tools.jsonl: message 2: 2 tool calls in one message'),
    );
    const alpaca = '{"instruction": "Add", "input": "2 and 2", "output": "4"}\n';
    const f = await client.files.create({ file: await toFile(Buffer.from(alpaca), 'alpaca.jsonl'), purpose: 'fine-tune' });
    assert.equal(f.converted_from, 'alpaca');
    const stored = await (await client.files.content(f.id)).text();
    assert.deepEqual(JSON.parse(stored), { messages: [{ role: 'user', content: 'Add\n\n2 and 2' }, { role: 'assistant', content: '4' }] });
    const sg = '{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}\n';
    const g = await client.files.create({ file: await toFile(Buffer.from(sg), 'sharegpt.jsonl'), purpose: 'fine-tune' });
    assert.equal(g.converted_from, 'sharegpt');
    // Kept with the file: shown again by GET /v1/files/{id} and GET /v1/files.
    assert.equal((await client.files.retrieve(f.id)).converted_from, 'alpaca');
    assert.equal((await client.files.retrieve(g.id)).converted_from, 'sharegpt');
    const listed = new Map();
    for await (const x of client.files.list()) listed.set(x.id, x);
    assert.equal(listed.get(f.id).converted_from, 'alpaca');
    assert.equal(listed.get(g.id).format, 'chat');
    assert.equal(listed.get(g.id).converted_from, 'sharegpt');
    // The upload's answer counts the examples that reason (docs/data.md).
    assert.equal(f.reasoning_examples, 0);
    const think = [
      { messages: [{ role: 'user', content: '2+2?' }, { role: 'assistant', reasoning_content: 'Add them.', content: '4' }] },
      { messages: [{ role: 'user', content: '3+3?' }, { role: 'assistant', content: '<think>\nAdd.\n</think>\n\n6' }] },
      { messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: '<think>\n\n</think>\n\nhello' }] },
    ].map((l) => JSON.stringify(l)).join('\n');
    const r = await client.files.create({ file: await toFile(Buffer.from(think), 'think.jsonl'), purpose: 'fine-tune' });
    assert.equal(r.examples, 3);
    assert.equal(r.reasoning_examples, 2);
    assert.equal(listed.get(g.id).object, 'file');
  });

  test('a model fine-tuned to call a tool answers with tool_calls, plain and streamed', async () => {
    // Every assistant turn is the same call, so that a tiny model learns
    // to reproduce it at temperature 0 within a few hundred steps.
    const question = 'What is the weather in Paris?';
    const args = { city: 'Paris' };
    const lines = [];
    for (let i = 0; i < 16; i++) {
      lines.push(JSON.stringify({
        tools: TOOLS,
        messages: [
          { role: 'user', content: question },
          { role: 'assistant', content: null, tool_calls: [{ id: `call${i}`, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(args) } }] },
        ],
      }));
    }
    const f = await client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'calls.jsonl'), purpose: 'fine-tune' });
    const job = await client.fineTuning.jobs.create({
      model: 'tiny-tools',
      training_file: f.id,
      suffix: 'caller',
      seed: 7,
      method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 25, batch_size: 2, learning_rate_multiplier: 10, lora_alpha: 128 } } },
    });
    const done = await waitFor(
      async () => {
        const j = await client.fineTuning.jobs.retrieve(job.id);
        return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
      },
      { timeoutMs: 400000, what: 'the tool-call job to end' },
    );
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    const q = { model: done.fine_tuned_model, messages: [{ role: 'user', content: question }], tools: TOOLS, max_tokens: 80, temperature: 0 };
    const c = await client.chat.completions.create(q);
    const m = c.choices[0].message;
    assert.ok(m.tool_calls, `no tool call in ${JSON.stringify(m)}`);
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].type, 'function');
    assert.match(m.tool_calls[0].id, /^call_/);
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), args);
    assert.equal(c.choices[0].finish_reason, 'tool_calls');

    // Streamed: the call arrives as a tool_calls delta, and the stream ends
    // with finish_reason "tool_calls".
    const stream = await client.chat.completions.create({ ...q, stream: true });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        for (const tc of ch.delta.tool_calls || []) {
          if (!calls[tc.index]) calls[tc.index] = { id: tc.id, name: '', arguments: '' };
          if (tc.function?.name) calls[tc.index].name += tc.function.name;
          if (tc.function?.arguments) calls[tc.index].arguments += tc.function.arguments;
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), args);
    // Without tools in the request nothing is read as a call.
    const plain = await client.chat.completions.create({ ...q, tools: undefined });
    assert.equal(plain.choices[0].message.tool_calls, undefined);
    assert.notEqual(plain.choices[0].finish_reason, 'tool_calls');
  });

  test('a job trains through the template on tool calls; its model chats', async () => {
    const lines = [];
    for (let i = 0; i < 8; i++) {
      lines.push(JSON.stringify({
        tools: TOOLS,
        messages: [
          { role: 'user', content: `Weather in city ${i}?` },
          { role: 'assistant', content: null, tool_calls: [{ id: `call${i}`, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city: `c${i}` }) } }] },
          { role: 'tool', tool_call_id: `call${i}`, content: '21 C' },
          { role: 'assistant', content: 'It is warm.' },
        ],
      }));
      lines.push(JSON.stringify({ instruction: 'Say hi', input: `${i}`, output: 'hi' }));
      lines.push(JSON.stringify({ conversations: [{ from: 'human', value: 'hello' }, { from: 'gpt', value: 'hi there' }] }));
    }
    const f = await client.files.create({ file: await toFile(Buffer.from(lines.join('\n')), 'mixed.jsonl'), purpose: 'fine-tune' });
    assert.equal(f.converted_from, 'alpaca+sharegpt');
    assert.equal(f.object, 'file');
    const job = await client.fineTuning.jobs.create({
      model: 'tiny-tools',
      training_file: f.id,
      suffix: 'chat',
      method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 1 } } },
    });
    const done = await waitFor(
      async () => {
        const j = await client.fineTuning.jobs.retrieve(job.id);
        return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : false;
      },
      { timeoutMs: 240000, what: 'the job to end' },
    );
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    const q = { messages: [{ role: 'user', content: 'Weather in city 3?' }], max_tokens: 8, temperature: 0 };
    const c = await client.chat.completions.create({ model: done.fine_tuned_model, ...q });
    const base = await client.chat.completions.create({ model: 'tiny-tools', ...q });
    const plain = await client.chat.completions.create({ model: 'tiny', ...q });
    assert.equal(c.model, done.fine_tuned_model);
    assert.equal(c.choices[0].message.role, 'assistant');
    // The fine-tuned folder keeps the base model's template: the same prompt.
    assert.equal(c.usage.prompt_tokens, base.usage.prompt_tokens);
    assert.notEqual(c.usage.prompt_tokens, plain.usage.prompt_tokens);
  });
});
