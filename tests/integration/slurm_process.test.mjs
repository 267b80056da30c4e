// slurm_process.test.mjs - attempts run by an engine, on the local-process
// engine (`serve --executor process`): the same control path as Slurm
// (slots as workers, attempts recorded before submission, the attempt
// runner with its own token, heartbeats, lost runners, fencing), without a
// cluster. tests/integration/slurm_cluster.test.mjs runs the Slurm side.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { assertBilledOnce, checkpoints, trainers } from '../fault/fault_harness.mjs';
import { BIN } from './service_harness.mjs';
import {
  createJob, cutOffJob, freeze, runnerLog, runners, startEngineServe, thaw, uploadSample, waitFor, waitJob, WORKER_TIMEOUT_S,
} from '../slurm/engine_harness.mjs';

async function post(s, p, token, body) {
  const r = await fetch(s.url + p, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

const attemptDir = (s, job, att) => path.join(s.data, 'jobs', job, 'attempts', att);

test('a job runs as one engine job, its runner holding a token for its attempt only', { timeout: 180000 }, async () => {
  const s = await startEngineServe({ executor: 'process' });
  try {
    const pools = (await s.call('GET', '/v1/workers')).json;
    assert.equal(pools.engine, 'process');
    assert.deepEqual(pools.pools.map((p) => [p.name, p.slots, p.in_use]), [['local', 1, 0]]);
    assert.deepEqual(pools.data.map((w) => w.name), ['process.local.0']);

    const file = await uploadSample(s);
    const job = await createJob(s, file);
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed');
    assert.equal(done.attempts.length, 1, JSON.stringify(done.attempts));
    const a = done.attempts[0];
    assert.equal(a.worker, 'process.local.0');
    assert.equal(a.reason, 'succeeded');
    assert.equal(a.engine.state, 'running');
    assert.match(a.engine.job_id, /^\d+$/);
    assert.equal(a.engine.resume_from, null);
    assert.equal(done.engine_reason, null);

    // The batch script and the token, in the attempt's own folder.
    const dir = attemptDir(s, job.id, a.id);
    const script = fs.readFileSync(path.join(dir, 'attempt.sbatch'), 'utf8');
    assert.match(script, /^#!\/bin\/sh\n/);
    assert.match(script, new RegExp(`^exec '/[^']+' attempt run --server '${s.url}' --attempt ${a.id} --token '@${dir}/token' --work-dir '${dir}'$`, 'm'));
    assert.equal(fs.statSync(path.join(dir, 'attempt.sbatch')).mode & 0o777, 0o700);
    assert.equal(fs.statSync(path.join(dir, 'token')).mode & 0o777, 0o600);
    const token = fs.readFileSync(path.join(dir, 'token'), 'utf8').trim();
    assert.match(token, /^[0-9a-f]{64}$/);
    assert.notEqual(token, s.token);
    // The checkpoints the trainer wrote are in the attempt's folder.
    assert.ok(fs.readdirSync(path.join(dir, 'checkpoints')).some((n) => /^step-\d+$/.test(n)));
    // The job succeeds at the trainer's `done`; the runner's finish follows.
    await waitFor(() => runners(a.id).length === 0, { timeoutMs: 20000, what: 'the runner to exit' });
    assert.match(runnerLog(s, job.id, a.id), /reported/);

    // The token is good for its own attempt only, and for none of the
    // worker's calls; an ended attempt cannot be started again.
    // A heartbeat after the job succeeded at the trainer's `done` (the
    // trainer still exiting) is no fence: the runner is finishing.
    const fence = Number(runnerLog(s, job.id, a.id).match(/fence (\d+),/)[1]);
    const late = await post(s, `/internal/attempts/${a.id}/heartbeat`, token, { fence });
    assert.equal(late.status, 200, JSON.stringify(late.json));
    assert.equal(late.json.stop, null);
    const stale = await post(s, `/internal/attempts/${a.id}/heartbeat`, token, { fence: fence + 1 });
    assert.equal(stale.status, 409, JSON.stringify(stale.json));
    assert.doesNotMatch(runnerLog(s, job.id, a.id), /heartbeat refused|killing the trainer/);
    const again = await post(s, `/internal/attempts/${a.id}/start`, token, {});
    assert.equal(again.status, 409, JSON.stringify(again.json));
    const other = await post(s, '/internal/attempts/att-someoneelse0000000000/start', token, {});
    assert.equal(other.status, 401);
    const reg = await post(s, '/internal/workers/register', token, { name: 'x', cpus: 1, mem_bytes: 1e9, class: 'spot', price_per_hour: 0 });
    assert.equal(reg.status, 401);
    const bad = await post(s, `/internal/attempts/${a.id}/heartbeat`, 'f'.repeat(64), { fence: a.fence ?? 1 });
    assert.equal(bad.status, 401);

    const after = (await s.call('GET', '/v1/workers')).json;
    assert.equal(after.pools[0].in_use, 0);
  } finally {
    await s.stop();
  }
});

test('cancel while running: the runner stops its trainer and the job is cancelled', { timeout: 180000 }, async () => {
  const s = await startEngineServe({ executor: 'process' });
  try {
    const file = await uploadSample(s);
    const job = await createJob(s, file, { epochs: 20 });
    // Once a checkpoint is recorded, so that the cancel has a partial model.
    await waitFor(async () => (await checkpoints(s, job.id)).length > 0, { timeoutMs: 120000, what: 'a first checkpoint' });
    const running = await waitJob(s, job.id, (j) => j.status === 'running', 'to run');
    const att = running.attempts.at(-1).id;
    assert.equal(runners(att).length, 1);
    const r = await s.call('POST', `/v1/fine_tuning/jobs/${job.id}/cancel`);
    assert.equal(r.status, 200);
    const shown = r.json.price.cancel_now; // fixed when the cancel was accepted
    const shownSteps = r.json.progress.steps_done;
    const end = await s.waitStatus(job.id, 'cancelled', { timeoutMs: 60000 });
    assert.equal(end.attempts.length, 1);
    await waitFor(() => runners(att).length === 0 && trainers({ under: attemptDir(s, job.id, att) }).length === 0,
      { timeoutMs: 30000, what: 'the runner and its trainer to exit' });
    assert.match(runnerLog(s, job.id, att), /stopping the trainer \(cancel\)/);
    // Refund rules as for a worker: the partial model is the latest
    // checkpoint, which completions accept; the steps charged are those
    // done when the cancel was accepted, at the price it showed (the ones
    // completed while the trainer stopped are in the model, free).
    const partial = await waitFor(async () => {
      const j = await s.job(job.id);
      return j.fine_tuned_model ? j : false;
    }, { timeoutMs: 60000, what: 'the partial model' });
    const cks = (await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints`)).json.data;
    assert.equal(partial.fine_tuned_model, cks[0].fine_tuned_model_checkpoint, JSON.stringify(cks));
    const rows = await assertBilledOnce(assert, s, partial);
    const charged = rows.filter((x) => x.kind === 'charge').reduce((n, x) => n + x.steps, 0);
    const what = `charged ${charged} steps at ${shown} (shown at step ${shownSteps}), the partial model is step ${cks[0].step_number}: ${JSON.stringify(rows)}`;
    assert.ok(charged > 0 && charged <= cks[0].step_number && charged <= shownSteps, what);
    assert.ok(Math.abs(partial.price.charged - partial.price.refunded - shown) <= 0.0001 + 1e-9, what);
    const gen = await s.call('POST', '/v1/completions', { body: { model: partial.fine_tuned_model, prompt: 'Review: good', max_tokens: 3, temperature: 0 } });
    assert.equal(gen.status, 200, gen.text);
  } finally {
    await s.stop();
  }
});

test('a silent runner is lost; the job continues from its checkpoint; the stale runner is fenced', { timeout: 300000 }, async () => {
  const s = await startEngineServe({ executor: 'process' });
  const frozen = [];
  try {
    const { job, attempt: stale, dir: staleDir, pids, cutAt } = await cutOffJob(s, await uploadSample(s));
    frozen.push(...pids);
    // Lost within the worker timeout (WORKER_TIMEOUT_S) and a tick or two; the job
    // continues in a new attempt from the latest checkpoint recorded.
    // Its runner's start records what it resumes from; the engine's listing
    // may show the job running a moment before that start.
    const moved = await waitJob(s, job.id, (j) => j.attempts.length === 2 && j.attempts[1].engine?.state === 'running' && j.attempts[1].engine.resume_from,
      'to move to a new attempt, its runner started from a checkpoint', { timeoutMs: 60000 });
    assert.match(moved.attempts[0].reason, /lost/);
    assert.ok(moved.attempts[0].ended_at * 1000 - cutAt < (WORKER_TIMEOUT_S + 9) * 1000, 'lost too late');
    const next = moved.attempts[1];
    assert.ok(next.start_step > 0, 'the new attempt continues from a checkpoint');
    assert.equal(next.engine.resume_from, path.join(staleDir, 'checkpoints', `step-${String(next.start_step).padStart(8, '0')}`));

    // The partition heals: the stale runner is refused and kills its
    // trainer; it sends no finish and the job is unaffected.
    thaw(frozen);
    await waitFor(() => runners(stale.id).length === 0 && trainers({ under: staleDir }).length === 0,
      { timeoutMs: 30000, what: 'the stale runner and trainer to exit' });
    assert.match(runnerLog(s, job.id, stale.id), /(409|fenced)/);

    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed', { timeoutMs: 240000 });
    assert.equal(done.attempts.length, 2, JSON.stringify(done.attempts));
    // What any attempt resumed from was recorded while its writer owned the job.
    for (const a of done.attempts.slice(1)) {
      const from = a.engine.resume_from;
      if (from && from.startsWith(staleDir)) assert.ok(Number(/step-(\d+)$/.exec(from)[1]) <= moved.attempts[0].end_step);
    }
    await assertBilledOnce(assert, s, done);
  } finally {
    thaw(frozen);
    await s.stop();
  }
});

// One runner per attempt (docs/worker-protocol.md, "The attempt runner"):
// a second `alallo attempt run` of an attempt that already has a runner,
// as a job a crashed controller forgot can be while the job submitted again
// under the same tag runs, is refused at its start and runs no trainer; the
// first runner's own start, sent again (an answer it lost), is answered as
// before. The trainer is frozen meanwhile so that the attempt stays open.
test('a second runner of a running attempt is refused at its start and runs nothing', { timeout: 400000 }, async () => {
  const s = await startEngineServe({ executor: 'process' });
  const frozen = [];
  let second = null;
  try {
    const job = await createJob(s, await uploadSample(s), { epochs: 20 });
    const running = await waitJob(s, job.id, (j) => j.status === 'running' && j.attempts.at(-1)?.engine?.node, 'to run');
    const att = running.attempts.at(-1);
    const dir = attemptDir(s, job.id, att.id);
    const trainer = await waitFor(() => {
      const t = trainers({ under: dir });
      return t.length === 1 ? t : false;
    }, { timeoutMs: 30000, what: 'the trainer of the first runner' });
    frozen.push(...freeze(trainer));
    const token = fs.readFileSync(path.join(dir, 'token'), 'utf8').trim();

    // The first runner again: the same engine job on the same node.
    const again = await post(s, `/internal/attempts/${att.id}/start`, token, { engine_id: att.engine.job_id, node: att.engine.node });
    assert.equal(again.status, 200, JSON.stringify(again.json));
    assert.deepEqual([again.json.attempt_id, again.json.job_id], [att.id, job.id]);
    assert.match(runnerLog(s, job.id, att.id), new RegExp(`fence ${again.json.fence},`), 'the fence the first runner holds');
    // The same engine job id on another node is another runner.
    const elsewhere = await post(s, `/internal/attempts/${att.id}/start`, token, { engine_id: att.engine.job_id, node: 'another-node' });
    assert.equal(elsewhere.status, 409, JSON.stringify(elsewhere.json));

    // A second runner process, in another engine job.
    second = spawn(BIN, ['attempt', 'run', '--server', s.url, '--attempt', att.id, '--token', `@${path.join(dir, 'token')}`, '--work-dir', dir],
      { env: { ...process.env, ALALLO_ENGINE_ID: `${att.engine.job_id}0` }, stdio: ['ignore', 'pipe', 'pipe'] });
    const code = await new Promise((resolve, reject) => {
      const late = setTimeout(() => reject(new Error(`the second runner still runs after 60 s:\n${runnerLog(s, job.id, att.id)}`)), 60000);
      second.on('exit', (c) => {
        clearTimeout(late);
        resolve(c);
      });
    });
    second = null;
    assert.equal(code, 3, runnerLog(s, job.id, att.id));
    assert.match(runnerLog(s, job.id, att.id), /start refused \(409\): Another runner has started this attempt/);
    assert.equal(trainers({ under: dir }).length, 1, 'no second trainer');
    assert.equal(runners(att.id).length, 1);

    thaw(frozen);
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed', { timeoutMs: 240000 });
    assert.equal(done.attempts.length, 1, JSON.stringify(done.attempts));
    assert.equal(done.attempts[0].engine.job_id, att.engine.job_id);
    await assertBilledOnce(assert, s, done);
  } finally {
    second?.kill('SIGKILL');
    thaw(frozen);
    await s.stop();
  }
});

// The bench job is a few steps of training: seconds on a quiet machine, but
// it took over 20 s in the sanitizer build on a loaded one (CI), so the
// wait is long; it ends as soon as the speed is there.
test("a pool's speed is measured once by a bench job, and kept over a restart", { timeout: 360000 }, async () => {
  const speedOf = async (s) => (await s.call('GET', '/v1/workers')).json.data.find((w) => w.name === 'process.local.0').speed;
  let s = await startEngineServe({ executor: 'process' });
  const data = s.data;
  const out = path.join(data, 'engine', 'bench', 'local.out');
  let measured;
  try {
    measured = await waitFor(async () => {
      const sp = await speedOf(s);
      return sp.tokens_per_s > 0 ? sp : null;
    }, { timeoutMs: 240000, what: 'the pool to be measured' }).catch((err) => {
      // what the engine said of the bench, and what the bench printed
      const said = s.output.split('\n').filter((l) => /bench|pool local/.test(l)).join('\n');
      let printed = '';
      try { printed = fs.readFileSync(out, 'utf8').slice(-2000); } catch { printed = '(no output file)'; }
      const dir = path.dirname(out);
      for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : [])
        if (f.endsWith('.log')) printed += `\n${f}:\n${fs.readFileSync(path.join(dir, f), 'utf8').slice(-2000)}`;
      throw new Error(`${err.message}\nthe engine said:\n${said}\nthe bench printed:\n${printed}`);
    });
    assert.ok(measured.flops > 0, JSON.stringify(measured));
    // the second point, on the small shape (docs/worker.md, Speed)
    assert.equal(measured.bench, 'base+tiny');
    assert.ok(measured.small.flops > 0 && measured.small.params < measured.params, JSON.stringify(measured));
    assert.match(fs.readFileSync(out, 'utf8'), /"tokens_per_s":/);
    // the start mark first (docs/slurm.md, Speed: a job listed running
    // without it is a ghost), then the bench on the small shape and on its
    // own, in one process
    assert.match(fs.readFileSync(path.join(data, 'engine', 'bench', 'local.sbatch'), 'utf8'),
      /^: >'\/[^']+\/local\.started'\nexec '\/[^']+' bench train --shape tiny,base --steps 17 --threads \d+ >'\/[^']+\/local\.out'$/m);
    assert.ok(fs.existsSync(path.join(data, 'engine', 'bench', 'local.started')), 'the start mark');
    assert.match(s.output, /pool local: measured [\d.]+ tokens\/s/);
  } finally {
    await s.stop();
  }
  const mtime = fs.statSync(out).mtimeMs;
  s = await startEngineServe({ executor: 'process', data });
  try {
    await new Promise((r) => setTimeout(r, 3000)); // a poll or two
    assert.deepEqual(await speedOf(s), measured);
    assert.doesNotMatch(s.output, /bench job/);
    assert.equal(fs.statSync(out).mtimeMs, mtime);
  } finally {
    await s.stop();
  }
});

// A pool whose slots hold GPUs (gres): the runner learns it from its start
// answer and asks the trainer for cuda when this alallo has CUDA; a build
// without CUDA trains on the CPU and its runner says why, once.
test('a slot with GPUs trains on them where alallo has CUDA, else on the CPU with a warning', { timeout: 180000 }, async () => {
  const CUDA = /^cuda: yes$/m.test(spawnSync(BIN, ['version'], { encoding: 'utf8' }).stdout);
  const GPU_VISIBLE = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' }).status === 0;
  const s = await startEngineServe({
    executor: 'process',
    pools: ['name=g,partition=local,gres=gpu:1,gpu_mem=16G,cpus=1,mem=2G,class=on-demand,price=1.00/h,slots=1'],
  });
  try {
    const file = await uploadSample(s);
    const job = await createJob(s, file);
    const done = await waitJob(s, job.id, (j) => ['succeeded', 'failed'].includes(j.status), 'to end');
    const a = done.attempts[0];
    assert.equal(a.worker, 'process.g.0');
    const dir = attemptDir(s, job.id, a.id);
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'ATTEMPT.json'), 'utf8'));
    await waitFor(() => runners(a.id).length === 0, { timeoutMs: 20000, what: 'the runner to exit' });
    const log = runnerLog(s, job.id, a.id);
    if (CUDA) {
      assert.equal(config.device, 'cuda');
      assert.match(log, /trainer on cuda/);
      assert.equal(done.status, GPU_VISIBLE ? 'succeeded' : 'failed', JSON.stringify(done));
    } else {
      assert.equal(config.device, 'cpu');
      assert.match(log, /trainer on cpu/);
      const warnings = log.split('\n').filter((l) => l.includes('built without CUDA'));
      assert.equal(warnings.length, 1, log);
      assert.match(warnings[0], /1 GPU declared, but this alallo was built without CUDA: its attempts train on the CPU/);
      assert.equal(done.status, 'succeeded', JSON.stringify(done));
    }
  } finally {
    await s.stop();
  }
});
