// service_kill9.test.mjs - kill -9 of serve during a burst of job
// creations, then a restart on the same data folder: every creation that
// was acknowledged (HTTP 200 with a job id) is there.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { Serve, sleep, tmpdir } from './service_harness.mjs';

function fakeModels() {
  const dir = path.join(tmpdir('alallo-fake-'), 'models', 'tiny');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'config.json'),
    JSON.stringify({
      hidden_size: 64, intermediate_size: 172, num_hidden_layers: 2, num_attention_heads: 4,
      num_key_value_heads: 2, vocab_size: 400, tie_word_embeddings: true,
    }),
  );
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), '{}');
  fs.writeFileSync(path.join(dir, 'model.safetensors'), 'weights');
  return path.dirname(dir);
}

test('kill -9 during a burst of creations loses no acknowledged job', async () => {
  const models = fakeModels();
  const data = tmpdir();
  const s = await Serve.start({ data, args: ['--local-worker', 'none', '--models', models] });
  const up = await s.upload('t.jsonl', '{"prompt":"a","completion":"b"}\n');
  const file = up.json.id;

  const acked = [];
  let failures = 0;
  let stop = false;
  // 16 clients create jobs as fast as they can.
  const client = async () => {
    while (!stop) {
      try {
        const r = await s.createJob({ model: 'tiny', training_file: file });
        if (r.status === 200) acked.push(r.json.id);
      } catch {
        failures++; // the server died mid-request: not acknowledged
        return;
      }
    }
  };
  const clients = Array.from({ length: 16 }, client);
  // Let the burst run, then kill the server in the middle of it.
  while (acked.length < 300) await sleep(5);
  s.proc.kill('SIGKILL');
  await s.exited;
  stop = true;
  await Promise.all(clients);
  assert.ok(acked.length >= 300);

  const again = await Serve.start({ data, args: ['--local-worker', 'none', '--models', models] });
  try {
    const missing = [];
    for (const id of acked) {
      const r = await again.call('GET', `/v1/fine_tuning/jobs/${id}`);
      if (r.status !== 200) missing.push(id);
    }
    assert.deepEqual(missing, [], `${missing.length} of ${acked.length} acknowledged jobs lost`);
    // And the store is healthy: new jobs can be made.
    const r = await again.createJob({ model: 'tiny', training_file: file });
    assert.equal(r.status, 200);
  } finally {
    await again.stop();
  }
});
