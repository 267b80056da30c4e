// fault_no_sandbox.test.mjs - a worker without the sandbox of python
// graders (docs/rft.md, "python"). The server has bubblewrap and accepts
// the job; the one worker runs with tests/fault/no_sandbox_shim.c
// preloaded (its trainer inherits it), so bubblewrap looks missing there.
// What must hold: the attempt ends at start with the reason in the job's
// log, an internal error (the machine's, not the job's) that charges
// nothing, and the source is never run without the sandbox.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import {
  buildShim, preloadWith, startServe, startWorker, stopProc, tmpdir, waitFor, waitWorkers,
} from '../fault/fault_harness.mjs';

const NOTIFIED = "Failed. We've been notified and are looking into it.";

test('a worker without the sandbox ends a python-graded job at start, saying why', { timeout: 300000 }, async () => {
  const shim = buildShim('no_sandbox_shim');
  const s = await startServe();
  const w = startWorker(s, 'nosandbox', { env: { LD_PRELOAD: preloadWith(shim) } });
  try {
    await waitWorkers(s, ['nosandbox']);
    const rows = ['harbor', 'navy'].map((q) => JSON.stringify({
      messages: [{ role: 'user', content: `What of the ${q}?` }], reference: 'union' }));
    const up = await s.upload('prompts.jsonl', Buffer.from(rows.join('\n') + '\n'));
    assert.equal(up.status, 200, up.text);
    // the source leaves a mark in a folder of this machine if it ever runs
    // outside the sandbox (inside, that folder is not there)
    const mark = path.join(tmpdir('alallo-nosandbox-'), 'ran');
    const grader = { type: 'python', name: 'says it',
      source: 'def grade(sample, item):\n'
        + `    open(${JSON.stringify(mark)}, "w").close()\n`
        + '    return 1.0 if item["reference"] in sample["output_text"] else 0.0\n' };
    const r = await s.createJob({ model: 'tiny', training_file: up.json.id, seed: 3,
      method: { type: 'reinforcement', reinforcement: { grader,
        hyperparameters: { n_epochs: 1, batch_size: 2, reasoning_effort: 'low' } } } });
    assert.equal(r.status, 200, r.text);
    const ended = await waitFor(async () => {
      const j = await s.job(r.json.id);
      return ['failed', 'succeeded', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 180000, what: 'the job to end on the worker without a sandbox' });
    assert.equal(ended.status, 'failed', `${ended.status} ${ended.message}`);
    assert.equal(ended.message, NOTIFIED);
    assert.equal(ended.price.charged, 0);
    const log = await s.call('GET', `/v1/fine_tuning/jobs/${r.json.id}/log`);
    const said = `${log.text}\n${w.log()}\n${s.output}`;
    assert.match(said, /the python grader cannot run on this worker: python graders need a sandbox \(bubblewrap with user namespaces\), which this machine does not have: bubblewrap \(\/usr\/bin\/bwrap\) is not installed/);
    // no step was trained
    const events = await s.call('GET', `/v1/fine_tuning/jobs/${r.json.id}/events?limit=100`);
    assert.ok(!events.json.data.some((e) => e.type === 'metrics'), JSON.stringify(events.json.data));
    assert.equal(fs.existsSync(mark), false, 'the source ran outside the sandbox');
  } finally {
    await stopProc(w);
    await s.stop();
  }
});
