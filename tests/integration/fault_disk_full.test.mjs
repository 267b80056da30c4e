// fault_disk_full.test.mjs - the disk fills up while a trainer writes a
// checkpoint.
//
// A remote worker runs with tests/fault/enospc_shim.c preloaded (built here
// with cc); its trainer inherits it. The shim lets the first checkpoint of
// the job through and then answers ENOSPC to every write, fsync, rename and
// mkdir under the job folders. What must hold:
//  * the trainer stops on the error (a full disk is not the user's fault:
//    the job fails with "Failed. We've been notified and are looking into
//    it.", costs nothing, and the operator's error line says why);
//  * the half-written checkpoint is never taken for one: the checkpoints
//    the API lists and the complete folders on disk are the first one only;
//  * that previous checkpoint stays usable: it turns into a model folder
//    (`alallo train --materialize`), and a trainer started on the same
//    settings with the disk back resumes from it and trains to the end.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import {
  BIN, buildShim, checkpointDirs, checkpoints, createLongJob, ledger, preloadWith, startServe, startWorker, stepOf,
  stopProc, tmpdir, trainers, uploadSample, waitFor, waitWorkers,
} from '../fault/fault_harness.mjs';

const NOTIFIED = "Failed. We've been notified and are looking into it.";

test('a full disk during a checkpoint: the previous checkpoint stays usable and a resume continues from it', { timeout: 300000 }, async () => {
  const shim = buildShim();
  const s = await startServe();
  const marks = path.join(tmpdir('alallo-fault-mark-'), 'faults.txt');
  const jobsDir = path.join(fs.realpathSync(s.data), 'jobs');
  const w = startWorker(s, 'full', {
    env: { LD_PRELOAD: preloadWith(shim), ALALLO_FAULT_DIR: jobsDir, ALALLO_FAULT_AFTER: '1', ALALLO_FAULT_MARK: marks },
  });
  try {
    await waitWorkers(s, ['full']);
    const file = await uploadSample(s);
    // 400 steps, a checkpoint every 40.
    const job = await createLongJob(s, file, { epochs: 4 });
    const ended = await waitFor(async () => {
      const j = await s.job(job.id);
      return ['failed', 'succeeded', 'cancelled'].includes(j.status) ? j : false;
    }, { timeoutMs: 180000, what: 'the job to end on the full disk' });

    // The fault happened, in the trainer, on the second checkpoint.
    const injected = fs.existsSync(marks) ? fs.readFileSync(marks, 'utf8') : '';
    assert.ok(injected.length > 0, 'the shim never injected a fault');
    assert.equal(ended.status, 'failed', `${ended.status} ${ended.message}`);
    assert.equal(ended.message, NOTIFIED);
    assert.equal(ended.price.charged, 0);
    assert.deepEqual((await ledger(s)).filter((r) => r.job === job.id && r.kind === 'charge'), []);
    assert.match(ended.attempts.at(-1).reason, /trainer exited with status/);
    const line = s.output.split('\n').find((l) => l.includes(`error: job ${job.id} failed on alallo's side`));
    assert.ok(line, `no error line in the server log:\n${s.output}`);
    assert.match(line, /No space left on device/);

    // Only the first checkpoint exists, on disk and in the API.
    const dirs = checkpointDirs(s, job.id);
    assert.equal(dirs.length, 1, `complete checkpoints on disk: ${dirs}`);
    const first = stepOf(dirs[0]);
    assert.equal(first, 40);
    const listed = await checkpoints(s, job.id);
    assert.deepEqual(listed.map((c) => c.step_number), [first]);

    // It turns into a model folder.
    const tmp = tmpdir('alallo-fault-resume-');
    const attemptsDir = path.join(w.workDir, 'attempts');
    const attemptId = fs.readdirSync(attemptsDir)[0];
    const spec = JSON.parse(fs.readFileSync(path.join(attemptsDir, attemptId, 'ATTEMPT.json'), 'utf8'));
    const mat = spawnSync(BIN, ['train', '--materialize', dirs[0], '--base', spec.model_dir, '--out', path.join(tmp, 'partial')], { encoding: 'utf8', timeout: 120000 });
    assert.equal(mat.status, 0, mat.stderr);
    assert.ok(fs.existsSync(path.join(tmp, 'partial', 'model.safetensors')));

    // No half-written folder is left where a resume would look.
    const root = path.dirname(dirs[0]);
    assert.deepEqual(fs.readdirSync(root).filter((n) => n !== path.basename(dirs[0])), []);
    // With the disk back, a trainer on the same settings, told to resume
    // from it as the server would name it, trains to the end.
    const conf = path.join(tmp, 'ATTEMPT.json');
    fs.writeFileSync(conf, JSON.stringify({ ...spec, resume_step: first, out_dir: path.join(tmp, 'out'), threads: 1 }));
    const res = spawnSync(BIN, ['train', '--config', conf], { encoding: 'utf8', timeout: 180000, cwd: tmp });
    assert.equal(res.status, 0, `${res.stdout.slice(-2000)}\n${res.stderr.slice(-2000)}`);
    const events = res.stdout.trim().split('\n').map((l) => JSON.parse(l));
    const started = events.find((e) => e.event === 'started');
    assert.equal(started.resumed_from, first);
    assert.equal(started.step, first);
    const done = events.find((e) => e.event === 'done');
    assert.equal(done.step, spec.max_steps);
    assert.deepEqual(trainers({ under: w.workDir }), []);
  } finally {
    await stopProc(w);
    await s.stop();
  }
});
