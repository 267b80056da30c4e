// race_file_delete.test.mjs - creating a job and deleting its data set at
// the same moment, over real HTTP against the real binary: one of the two
// loses (docs/store.md, "A job and its data sets"). Never both answered 200,
// and every job that was created still has its file.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Serve, tinyModelsDir } from './service_harness.mjs';

const DATA = '{"prompt":"good film","completion":" positive"}\n{"prompt":"bad film","completion":" negative"}\n';
const TRIES = 40;

let s;
before(async () => {
  s = await Serve.start({ args: ['--local-worker', 'none', '--models', tinyModelsDir()] });
});
after(async () => {
  if (s) await s.stop();
});

test('a job and the deletion of its data set never both succeed', { timeout: 240000 }, async () => {
  let jobsWon = 0;
  let deletesWon = 0;
  for (let i = 0; i < TRIES; i++) {
    const up = await s.upload(`race-${i}.jsonl`, DATA);
    assert.equal(up.status, 200);
    const file = up.json.id;
    const [created, deleted] = await Promise.all([
      s.createJob({ model: 'tiny', training_file: file }),
      s.call('DELETE', `/v1/files/${file}`),
    ]);
    assert.ok(!(created.status === 200 && deleted.status === 200), `both succeeded for ${file}`);
    if (created.status === 200) {
      jobsWon++;
      assert.equal(deleted.status, 409);
      assert.match(deleted.json.error.message, /A job that has not ended uses this file/);
      const f = await s.call('GET', `/v1/files/${file}`);
      assert.equal(f.status, 200, `job ${created.json.id} lost its file ${file}`);
      // Cancelled, the job lets its file go.
      assert.equal((await s.call('POST', `/v1/fine_tuning/jobs/${created.json.id}/cancel`)).status, 200);
    } else {
      deletesWon++;
      assert.equal(deleted.status, 200);
      assert.equal(created.status, 404);
      assert.equal(created.json.error.message, `No such file: ${file}.`);
      assert.ok(!created.text.includes(s.data), 'no server path in the answer');
    }
  }
  assert.equal(jobsWon + deletesWon, TRIES);
});
