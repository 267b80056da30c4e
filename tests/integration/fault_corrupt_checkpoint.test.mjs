// fault_corrupt_checkpoint.test.mjs - damaged checkpoints between attempts.
//
// A job trains on worker w1 until it has three checkpoints; w1 is killed
// (its trainer dies with it). On disk, the newest checkpoint's state.bin is
// cut to half its size and the next one's has one byte flipped (same size,
// so only the checksum can tell). A second worker then takes the job: its
// trainer must skip both (or remove them unread, when w1 died before
// reporting them), say so, resume from the third, and the job must end
// succeeded, each step billed once.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import {
  assertBilledOnce, checkpointDirs, createLongJob, startServe, startWorker, stepOf, stopProc, trainers,
  uploadSample, waitFor, waitJob, waitWorkers,
} from '../fault/fault_harness.mjs';

test('a truncated and a corrupt checkpoint are skipped for the previous one', { timeout: 300000 }, async () => {
  const s = await startServe();
  const w1 = startWorker(s, 'w1');
  let w2 = null;
  try {
    await waitWorkers(s, ['w1']);
    const file = await uploadSample(s);
    // 2,000 steps, a checkpoint every 200.
    const job = await createLongJob(s, file, { epochs: 20 });
    await waitFor(() => checkpointDirs(s, job.id).length >= 3, { timeoutMs: 180000, everyMs: 50, what: 'three checkpoints on disk' });
    w1.proc.kill('SIGKILL');
    await waitFor(() => trainers({ under: w1.workDir }).length === 0, { timeoutMs: 10000, what: "w1's trainer to die with it" });
    const mid = await s.job(job.id);
    assert.notEqual(mid.status, 'succeeded', 'the job ended before w1 was killed: make it longer');

    const dirs = checkpointDirs(s, job.id);
    assert.ok(dirs.length >= 3, `checkpoints: ${dirs}`);
    const [keep, flipped, cut] = dirs.slice(-3);
    const cutState = path.join(cut, 'state.bin');
    fs.truncateSync(cutState, Math.floor(fs.statSync(cutState).size / 2));
    const flipState = path.join(flipped, 'state.bin');
    const fd = fs.openSync(flipState, 'r+');
    const at = Math.floor(fs.statSync(flipState).size / 2);
    const b = Buffer.alloc(1);
    fs.readSync(fd, b, 0, 1, at);
    b[0] ^= 0x40;
    fs.writeSync(fd, b, 0, 1, at);
    fs.closeSync(fd);

    w2 = startWorker(s, 'w2');
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed on w2', { timeoutMs: 240000 });
    const last = done.attempts.at(-1);
    assert.equal(last.worker, 'w2');
    assert.equal(last.start_step, stepOf(keep), `resumed at ${last.start_step}; checkpoints were ${dirs.map(stepOf)}`);
    assert.match(done.attempts[0].reason || '', /lost/);
    // The trainer said why it skipped each (in w2's log, for the operator).
    // The newest may not have been reported before w1 died: then the server
    // never recorded it, and the trainer removes it unread as newer than
    // the checkpoint it was told to resume from (docs/trainer.md).
    const log = w2.log();
    assert.match(log, new RegExp(`${path.basename(cut)}[^\\n]*(size|short|truncat|checksum|match|newer than)`, 'i'), log.slice(-3000));
    assert.match(log, new RegExp(`${path.basename(flipped)}[^\\n]*(checksum|match|newer than)`, 'i'), log.slice(-3000));
    await assertBilledOnce(assert, s, done);
  } finally {
    if (w2) await stopProc(w2);
    await stopProc(w1);
    await s.stop();
  }
});
