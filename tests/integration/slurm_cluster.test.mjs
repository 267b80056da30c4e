// slurm_cluster.test.mjs - attempts as Slurm jobs on a throwaway
// single-node cluster (tests/slurm/slurm-up.sh: partitions `ondemand` and
// a preemptible `spot`, two fake GPUs). Each attempt is one Slurm job named
// alallo-<attempt>; what alallo does on each Slurm event is docs/slurm.md.
// The tests assert on the API's job, attempts and ledger, and on Slurm's
// own list (squeue by name).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test as nodeTest } from 'node:test';

import { assertBilledOnce, checkpoints } from '../fault/fault_harness.mjs';
import {
  createJob, cutOffJob, runnerLog, slurmUp, startEngineServe, thaw, tmpdir, uploadSample, waitFor, waitJob, WORKER_TIMEOUT_S,
} from '../slurm/engine_harness.mjs';
import { BIN, freePort, Serve, tinyModelsDir } from './service_harness.mjs';

// 2 GB an attempt: room to spare for a trainer built with the sanitizers
// (make asan); an attempt whose peak passes its slot's memory moves.
const POOLS = [
  'name=od,partition=ondemand,gres=gpu:1,cpus=1,mem=2000M,class=on-demand,price=0.40/h,slots=1',
  'name=sp,partition=spot,gres=gpu:1,cpus=1,mem=2000M,class=spot,price=0.10/h,slots=1',
];

// The pools hold (fake) GPUs, so an alallo built with CUDA asks its trainer
// for them; where no GPU is visible those attempts fail by design
// (docs/worker-protocol.md, "The attempt runner"). Such a build machine
// skips this file with that reason; CI's CPU-only build runs it all.
const CUDA = /^cuda: yes$/m.test(spawnSync(BIN, ['version'], { encoding: 'utf8' }).stdout);
const NO_GPU = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' }).status !== 0;
const SKIP = CUDA && NO_GPU
  ? 'this alallo is built with CUDA and no GPU is visible: attempts on the gres pools would ask for cuda'
  : false;
const test = (name, opts, fn) => nodeTest(name, { ...opts, skip: SKIP }, fn);

let cluster;
before(() => {
  if (SKIP) return;
  cluster = slurmUp({ memMb: 6000 });
});
after(() => cluster?.down());

const serve = (opts = {}) => startEngineServe({ executor: 'slurm', pools: POOLS, env: cluster.env, ...opts });

// alallo's Slurm jobs of one attempt.
const slurmJobsOf = (att) => cluster.jobs().filter((j) => j.name === `alallo-${att}`);
// alallo's Slurm jobs still pending or running.
const live = () => cluster.jobs().filter((j) => ['PENDING', 'RUNNING', 'CONFIGURING', 'COMPLETING'].includes(j.state));

// Exactly one Slurm job per attempt, found by its tag, and none left alive.
async function assertOneJobPerAttempt(j) {
  for (const a of j.attempts) {
    const js = slurmJobsOf(a.id);
    assert.equal(js.length, 1, `attempt ${a.id}: Slurm jobs ${JSON.stringify(js)}`);
    assert.equal(js[0].id, a.engine.job_id);
  }
  await waitFor(() => live().length === 0, { timeoutMs: 30000, what: `no alallo job left in Slurm: ${JSON.stringify(live())}` });
}

// The train loss of the checkpoint at the job's last step.
async function finalLoss(s, j) {
  const ck = (await checkpoints(s, j.id)).find((c) => c.step_number === j.progress.max_steps);
  assert.ok(ck, 'a checkpoint at the last step');
  return ck.metrics.train_loss;
}

// Each pool's speed, measured by its bench job (alallo-bench-POOL, not an
// attempt's: docs/slurm.md, Speed).
async function measured(s) {
  await waitFor(async () => (await s.call('GET', '/v1/workers')).json.data.every((x) => x.speed.tokens_per_s > 0),
    { timeoutMs: 30000, what: "the pools' bench jobs to measure their speed" });
}

let uninterrupted = null; // final loss of the 5,000-step job without a preemption

// The job of the first two tests: 5,000 steps, so that on a quiet, fast
// machine (about 700 steps/s) the spot attempt is still running seconds
// after its first checkpoint, when the preemptor comes.
const LONG_EPOCHS = 50;

test('a job succeeds through Slurm, one Slurm job per attempt', { timeout: 600000 }, async () => {
  const s = await serve();
  try {
    const w = await waitFor(async () => {
      const r = (await s.call('GET', '/v1/workers')).json;
      return r.pools.length ? r : false;
    }, { timeoutMs: 20000, what: 'the pools' });
    assert.equal(w.engine, 'slurm');
    assert.deepEqual(w.pools.map((p) => [p.name, p.class, p.slots]), [['od', 'on-demand', 1], ['sp', 'spot', 1]]);
    const file = await uploadSample(s);
    const job = await createJob(s, file, { epochs: LONG_EPOCHS });
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed', { timeoutMs: 540000 });
    assert.equal(done.attempts.length, 1);
    assert.match(done.attempts[0].engine.node, /\S/);
    await assertOneJobPerAttempt(done);
    await assertBilledOnce(assert, s, done);
    uninterrupted = await finalLoss(s, done);
    await measured(s);
  } finally {
    await s.stop();
  }
});

test('spot preemption: checkpoint, re-scheduling within 5 s, a new attempt and Slurm job, billed once, same loss', { timeout: 600000 }, async () => {
  const s = await serve({ pools: [POOLS[1]] }); // spot only
  let preemptor = null;
  try {
    const file = await uploadSample(s);
    const job = await createJob(s, file, { epochs: LONG_EPOCHS });
    await waitFor(async () => (await checkpoints(s, job.id)).length > 0, { timeoutMs: 120000, everyMs: 50, what: 'a first checkpoint' });
    const j1 = await s.job(job.id);
    assert.equal(j1.status, 'running', 'the job ended before the preemption: make it longer');
    const first = j1.attempts.at(-1);
    assert.equal(first.worker, 'slurm.sp.0');
    // An on-demand job that needs both GPUs preempts the spot attempt.
    const t0 = Date.now();
    preemptor = cluster.run('sbatch', ['--parsable', '-p', 'ondemand', '--gres=gpu:2', '-c', '1', '--mem=100M', '-J', 'preemptor', '-o', '/dev/null', '--wrap', 'sleep 12']).trim();
    const moved = await waitJob(s, job.id, (j) => j.status === 're-scheduling' || j.attempts.length > 1, 'to be re-scheduled', { timeoutMs: 30000 });
    const took = Date.now() - t0;
    assert.ok(took < 5000, `re-scheduling ${took} ms after the preemptor's sbatch`);
    const ended = moved.attempts.find((a) => a.id === first.id);
    assert.equal(ended.status, 'ended');
    assert.ok(ended.end_step > 0);
    assert.match(runnerLog(s, job.id, first.id), /stopping the trainer \(move\)/);

    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed after the preemption', { timeoutMs: 500000 });
    assert.equal(done.attempts.length, 2, JSON.stringify(done.attempts));
    assert.equal(done.attempts[1].start_step, done.attempts[0].end_step, 'continues from the checkpoint the preemption wrote');
    assert.notEqual(done.attempts[1].engine.job_id, done.attempts[0].engine.job_id);
    await assertOneJobPerAttempt(done);
    await assertBilledOnce(assert, s, done);
    if (uninterrupted !== null) assert.equal(await finalLoss(s, done), uninterrupted, 'the same final loss as an uninterrupted run');
  } finally {
    if (preemptor) cluster.run('scancel', [preemptor]);
    await s.stop();
  }
});

test('cancel while pending in Slurm: no run, nothing charged; the reason is shown beside the message', { timeout: 180000 }, async () => {
  const s = await serve();
  const blocker = cluster.run('sbatch', ['--parsable', '-p', 'ondemand', '--gres=gpu:2', '-c', '1', '--mem=100M', '-J', 'blocker', '-o', '/dev/null', '--wrap', 'sleep 300']).trim();
  try {
    await waitFor(() => /RUNNING/.test(cluster.run('squeue', ['-h', '-j', blocker, '-o', '%T'])), { timeoutMs: 30000, what: 'the blocker to run' });
    const file = await uploadSample(s);
    const job = await createJob(s, file, { epochs: 2 });
    const pending = await waitJob(s, job.id, (j) => j.attempts.length > 0 && j.attempts[0].engine?.state === 'pending' && j.engine_reason, 'to be pending in Slurm with a reason', { timeoutMs: 60000 });
    assert.equal(pending.status, 'queued');
    assert.equal(pending.message, 'Waiting for capacity');
    assert.match(pending.engine_reason, /\S/);
    const events = (await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=50`)).json.data.map((e) => e.message);
    assert.ok(events.some((m) => m.startsWith('Waiting in slurm: ')), JSON.stringify(events));
    const w = (await s.call('GET', '/v1/workers')).json;
    assert.ok(w.pools.some((p) => p.in_use === 1 && p.pending === 1), JSON.stringify(w.pools));

    const att = pending.attempts[0].id;
    assert.equal((await s.call('POST', `/v1/fine_tuning/jobs/${job.id}/cancel`)).status, 200);
    const end = await s.waitStatus(job.id, 'cancelled', { timeoutMs: 30000 });
    assert.equal(end.price.charged, 0);
    assert.equal(end.attempts[0].reason, 'cancelled before it ran');
    await waitFor(() => slurmJobsOf(att).every((j) => j.state === 'CANCELLED'), { timeoutMs: 20000, what: `the pending Slurm job to be cancelled: ${JSON.stringify(slurmJobsOf(att))}` });
    assert.equal(runnerLog(s, job.id, att), '', 'it never ran');
  } finally {
    cluster.run('scancel', [blocker]);
    await s.stop();
  }
});

// serve killed (as kill -9) just before, then just after, its sbatch: after
// a restart there is exactly one Slurm job per attempt and no orphan.
for (const point of ['before-submit', 'after-submit']) {
  test(`kill -9 of serve ${point.replace('-', ' ')}: no duplicate and no orphan Slurm job`, { timeout: 240000 }, async () => {
    const data = tmpdir();
    const port = await freePort();
    const s = await serve({ data, port, env: { ...cluster.env, ALALLO_TEST_CRASH: point } });
    let s2 = null;
    try {
      const file = await uploadSample(s);
      const known = new Set(cluster.jobs().map((j) => j.id));
      const job = await createJob(s, file, { epochs: 2 });
      const gone = await s.exited;
      assert.equal(gone.signal, 'SIGKILL', `serve should have died at ${point}:\n${s.output.slice(-2000)}`);
      const seen = cluster.jobs().filter((j) => !known.has(j.id));
      assert.equal(seen.length, point === 'before-submit' ? 0 : 1, JSON.stringify(seen));
      s2 = await serve({ data, port });
      const done = await waitJob(s2, job.id, (j) => j.status === 'succeeded', 'to succeed after the restart');
      assert.equal(done.attempts.length, 1, JSON.stringify(done.attempts));
      await assertOneJobPerAttempt(done);
      await assertBilledOnce(assert, s2, done);
    } finally {
      if (s2) await s2.stop();
      await s.stop();
      for (const j of live()) cluster.run('scancel', [j.id]);
    }
  });
}

// A node cut off from the server: its runner and trainer freeze (SIGSTOP).
// The attempt is lost within the worker timeout (WORKER_TIMEOUT_S), its Slurm job
// is cancelled, and the job continues from its latest recorded checkpoint
// in a new attempt once the slot is free again; billed once.
test('a runner cut off: lost within the worker timeout, its Slurm job cancelled, the job resumed', { timeout: 300000 }, async () => {
  const s = await serve({ pools: [POOLS[0]] });
  const frozen = [];
  try {
    const { job, attempt: first, pids, cutAt } = await cutOffJob(s, await uploadSample(s));
    frozen.push(...pids);
    const lost = await waitJob(s, job.id, (j) => j.attempts[0].status === 'ended', 'to lose its runner', { timeoutMs: 60000 });
    assert.match(lost.attempts[0].reason, /lost/);
    assert.ok(lost.attempts[0].ended_at * 1000 - cutAt < (WORKER_TIMEOUT_S + 9) * 1000, `lost ${lost.attempts[0].ended_at * 1000 - cutAt} ms after the cut`);
    await waitFor(() => slurmJobsOf(first.id).every((j) => !['RUNNING', 'PENDING'].includes(j.state)), { timeoutMs: 30000, what: `its Slurm job to be cancelled: ${JSON.stringify(slurmJobsOf(first.id))}` });
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed in a new attempt', { timeoutMs: 240000 });
    assert.equal(done.attempts.length, 2);
    assert.ok(done.attempts[1].start_step > 0, 'resumed from a checkpoint');
    await assertOneJobPerAttempt(done);
    await assertBilledOnce(assert, s, done);
  } finally {
    thaw(frozen);
    await s.stop();
  }
});

// slurmctld killed (-9) right after alallo's sbatch, then started again:
// whatever the controller kept or lost of the job, reconciliation by tag
// recovers (a kept job runs on; a lost one is a vanished attempt and the
// job continues in a new one), with no duplicate, no orphan, billed once.
// When the controller lost the job, the restarted one hands its job id to
// the next job (the new attempt), while the lost job may still be starting
// on the node: Slurm then fails that launch and drains the node. Resuming a
// drained node is the operator's part (alallo shows Slurm's reason beside
// "Waiting for capacity"), so the test plays the operator: it resumes the
// node whenever Slurm drains it, and says so.
test('kill -9 of slurmctld right after a submit: reconciliation recovers', { timeout: 300000 }, async () => {
  const s = await serve({ pools: [POOLS[0]] });
  let operator = null;
  try {
    const file = await uploadSample(s);
    const job = await createJob(s, file, { epochs: 2 });
    await waitJob(s, job.id, (j) => j.attempts.length > 0 && j.attempts[0].engine?.job_id, 'to be submitted', { timeoutMs: 60000, everyMs: 20 });
    const ctl = cluster.killController();
    await new Promise((r) => setTimeout(r, 2000));
    await ctl.start();
    operator = setInterval(() => {
      const why = cluster.resumeIfDrained();
      if (why) console.log(`the operator resumed the node Slurm had drained (${why})`);
    }, 1000);
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed after the controller came back', { timeoutMs: 240000 });
    for (const a of done.attempts) assert.ok(slurmJobsOf(a.id).length <= 1, `attempt ${a.id}: ${JSON.stringify(slurmJobsOf(a.id))}`);
    await waitFor(() => live().length === 0, { timeoutMs: 60000, what: `no alallo job left in Slurm: ${JSON.stringify(live())}` });
    await assertBilledOnce(assert, s, done);
  } finally {
    clearInterval(operator);
    await s.stop();
    for (const j of live()) cluster.run('scancel', [j.id]);
    await waitFor(() => live().length === 0, { timeoutMs: 60000, what: 'no alallo job left in Slurm' });
    const why = await cluster.heal();
    if (why) console.log(`the node was resumed after the controller's restart (Slurm: ${why})`);
  }
});

// A restarted slurmctld restores its last saved state, which can list a
// bench job RUNNING again after it ended and was measured (a ghost Slurm
// keeps until its time limit). A bench job listed alive once the pool's
// speed is known is useless: serve cancels it at its next list, with a
// warning (docs/slurm.md, Speed). The ghost here is a job of the bench's
// name held in Slurm's queue (--hold), so that it cannot end by itself:
// only a cancel removes it, and serve treats any listed job of the name
// the same, pending or running.
test('a bench job listed alive once the pool is measured is cancelled at once', { timeout: 180000 }, async () => {
  const s = await serve({ pools: [POOLS[0]] });
  try {
    await measured(s);
    // the pool's own bench job gone first (serve cancels it by its name,
    // scancel --name, before it records the speed, so that a ghost
    // submitted once the speed shows is never taken silently with it)
    await waitFor(() => live().length === 0, { timeoutMs: 30000, what: `the pool's bench job ended: ${JSON.stringify(live())}` });
    const script = path.join(cluster.kit, 'jobs', 'ghost-bench.sh');
    fs.writeFileSync(script, '#!/bin/sh\nsleep 600\n', { mode: 0o755 });
    const id = cluster.run('sbatch', ['--parsable', '--hold', '-J', 'alallo-bench-od', '-p', 'ondemand', '-c', '1', '--mem=100M',
      '--time=10', '-o', '/dev/null', script]).trim();
    await waitFor(() => live().length === 0, { timeoutMs: 30000, what: `the ghost bench job ${id} cancelled: ${JSON.stringify(live())}` });
    await waitFor(() => new RegExp(`pool od: bench job ${id} is listed \\w+ though no bench is wanted`).test(s.output),
      { timeoutMs: 10000, what: "serve's warning about the ghost bench job" });
  } finally {
    await s.stop();
    for (const j of live()) cluster.run('scancel', [j.id]);
  }
});

// A partition whose MaxTime is 1 minute: --time is cut to it (the job's
// log says so), the runner stops its trainer with a checkpoint before
// Slurm's kill (a quarter of the limit ahead), and the job continues from
// that step in a new attempt and a new Slurm job.
test('a short --time: checkpoint before the kill, then the job continues', { timeout: 300000 }, async () => {
  cluster.run('scontrol', ['update', 'PartitionName=ondemand', 'MaxTime=1']);
  let s = null;
  try {
    s = await serve({ pools: [POOLS[0]] });
    await measured(s); // its bench job has ended: the two attempts have the node to themselves
    const file = await uploadSample(s);
    const r = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: 1, batch_size: 1 }, max_steps: 1000000, seed: 5 });
    assert.equal(r.status, 200, r.text);
    const job = r.json;
    const moved = await waitJob(s, job.id, (j) => j.attempts.length >= 2 && j.attempts[1].engine?.state === 'running', 'to continue in a second attempt', { timeoutMs: 200000 });
    const [a1, a2] = moved.attempts;
    assert.ok(a1.end_step > 0);
    assert.equal(a2.start_step, a1.end_step, 'continues from the checkpoint written before the kill');
    assert.match(runnerLog(s, job.id, a1.id), /stopping the trainer \(move\)/);
    const ran = (a1.ended_at - a1.engine.running_at);
    assert.ok(ran >= 30 && ran < 60, `the first attempt ran ${ran} s of its 60`);
    const events = (await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=100`)).json.data.map((e) => e.message);
    assert.ok(events.some((m) => /Submitted to pool od .*(MaxTime|time limit|cut)/i.test(m)), JSON.stringify(events));
    const sj = slurmJobsOf(a1.id);
    assert.equal(sj.length, 1);
    assert.notEqual(sj[0].state, 'TIMEOUT', 'the runner ended it before Slurm had to');
    assert.equal((await s.call('POST', `/v1/fine_tuning/jobs/${job.id}/cancel`)).status, 200);
    await s.waitStatus(job.id, 'cancelled', { timeoutMs: 60000 });
  } finally {
    cluster.run('scontrol', ['update', 'PartitionName=ondemand', 'MaxTime=12:00:00']);
    if (s) await s.stop();
    for (const j of live()) cluster.run('scancel', [j.id]);
  }
});

// The node goes down (slurmd killed, the runner and trainer frozen): the
// attempt is lost within the worker timeout, its Slurm job cancelled, and
// the job resumes from its latest recorded checkpoint when the node is
// back; billed once.
test('node down: lost within the worker timeout, its Slurm job cancelled, resumed when the node is back', { timeout: 300000 }, async () => {
  const s = await serve({ pools: [POOLS[0]] });
  const frozen = [];
  let node = null;
  try {
    await measured(s); // its bench job ended before the node goes down
    const { job, attempt: first, pids, cutAt } = await cutOffJob(s, await uploadSample(s));
    frozen.push(...pids);
    node = cluster.killNode();
    const lost = await waitJob(s, job.id, (j) => j.attempts[0].status === 'ended', 'to lose its runner', { timeoutMs: 60000 });
    assert.match(lost.attempts[0].reason, /lost/);
    assert.ok(lost.attempts[0].ended_at * 1000 - cutAt < (WORKER_TIMEOUT_S + 9) * 1000, `lost ${lost.attempts[0].ended_at * 1000 - cutAt} ms after the cut`);
    await node.start();
    node = null;
    await waitFor(() => slurmJobsOf(first.id).every((j) => !['RUNNING', 'PENDING', 'COMPLETING'].includes(j.state)), { timeoutMs: 60000, what: `its Slurm job to be cancelled: ${JSON.stringify(slurmJobsOf(first.id))}` });
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed once the node is back', { timeoutMs: 240000 });
    assert.ok(done.attempts.length >= 2);
    assert.ok(done.attempts.at(-1).start_step > 0, 'resumed from a checkpoint');
    await assertOneJobPerAttempt(done);
    await assertBilledOnce(assert, s, done);
  } finally {
    if (node) await node.start();
    thaw(frozen);
    await s.stop();
  }
});

// Issue 32, item 3: a job created on a Slurm-backed serve before its pool's
// bench job has measured the pool's speed is estimated when first placed
// (or at the unmeasured default speed), priced, and never trains free.
test("a job created before the pool's bench is known is priced when placed, never free", { timeout: 300000 }, async () => {
  const s = await serve({ pools: [POOLS[0]] });
  try {
    const file = await uploadSample(s);
    const before = (await s.call('GET', '/v1/workers')).json;
    const job = await createJob(s, file, { epochs: 1 });
    assert.ok(!before.data.length || before.data.some((x) => !(x.speed?.tokens_per_s > 0)),
      `the pool's bench was already measured: ${JSON.stringify(before.data)}`);
    if (job.estimate.price === null) assert.ok(job.estimate.message, 'the estimate says why there is none');
    const done = await waitJob(s, job.id, (j) => j.status === 'succeeded', 'to succeed', { timeoutMs: 240000 });
    assert.ok(done.estimate.price && done.estimate.price.high > 0, JSON.stringify(done.estimate));
    assert.ok(done.estimate.time && done.estimate.time.high_s > 0, JSON.stringify(done.estimate));
    // Never free, to the micro: prices and ledger amounts are shown rounded
    // to 4 decimals, and this job's 100 steps at $0.40/h show as 0 when
    // they train in under 0.45 s (a quiet, fast moment), so the proof is
    // the ledger's rows: one is written only for an amount that is not 0,
    // and the charges cover every step of the model (assertBilledOnce).
    const rows = await assertBilledOnce(assert, s, done);
    const charges = rows.filter((r) => r.kind === 'charge' && r.reason === 'training steps');
    assert.ok(charges.length > 0, `trained for free: ${JSON.stringify({ price: done.price, rows })}`);
    const paid = done.price.charged - done.price.refunded;
    assert.ok(paid >= 0 && paid <= done.estimate.price.high + 1e-6, `${paid} outside 0 to ${done.estimate.price.high}`);
    if (job.estimate.price === null) {
      const ev = await s.call('GET', `/v1/fine_tuning/jobs/${job.id}/events?limit=100`);
      assert.ok(ev.json.data.some((e) => /Estimated when first placed/.test(e.message)), ev.text);
    }
    await assertOneJobPerAttempt(done);
  } finally {
    await s.stop();
  }
});

// The inference engine as a Slurm job of a pool (`--inference-pool`,
// docs/serving.md "On a cluster"): it runs on the node under srun, says
// where it listens, and answers a completion as `alallo generate` does; a
// server started without --inference-pool cancels the serving job left.
test('the inference engine runs as a Slurm job of a pool and answers there', { timeout: 300000 }, async () => {
  let s = await serve({ pools: [POOLS[0]], args: ['--inference-pool', 'od'] });
  try {
    const engines = await waitFor(async () => {
      const r = (await s.call('GET', '/v1/workers')).json;
      return (r.serving || []).some((e) => e.fresh) ? r.serving : null;
    }, { timeoutMs: 120000, what: 'the serving engine heard from' });
    assert.equal(engines[0].id, 'od-0');
    const js = cluster.jobs().filter((j) => j.name === 'alallo-serve-od-0');
    assert.equal(js.length, 1, JSON.stringify(cluster.jobs()));
    assert.equal(js[0].state, 'RUNNING');
    const prompt = 'Review: a good film\nSentiment:';
    const r = await s.call('POST', '/v1/completions', { body: { model: 'tiny', prompt, max_tokens: 12, temperature: 0 } });
    assert.equal(r.status, 200, r.text);
    const dir = path.join(tinyModelsDir(), 'tiny');
    const g = spawnSync(BIN, ['generate', '--model-dir', dir, '--prompt', prompt, '--max-tokens', '12', '--temperature', '0', '--json'], { encoding: 'utf8', timeout: 120000 });
    assert.equal(g.status, 0, g.stderr);
    assert.equal(r.json.choices[0].text, JSON.parse(g.stdout.trim().split('\n').pop()).text);
  } finally {
    await s.stop();
  }
  s = await serve({ pools: [POOLS[0]], data: s.data });
  try {
    await waitFor(() => !live().some((j) => j.name === 'alallo-serve-od-0'),
      { timeoutMs: 60000, what: 'the serving job no one wants cancelled' });
    assert.match(s.output, /serving engine od-0 \(job \d+\) is not wanted: cancelled/);
  } finally {
    await s.stop();
  }
});

// With a range (`--inference-pool od:0-1`) the scheduler decides how many
// engines run (docs/serving.md, "Engines that follow the requests"): no
// serving job until a request finds no engine, then one on the node,
// whose slot reads as draining while it serves; idle, its Slurm job is
// cancelled and the slot is active again.
test('a range of inference engines on Slurm: one when a request finds none, none again once idle', { timeout: 300000 }, async () => {
  const s = await serve({ pools: [POOLS[0]], args: ['--inference-pool', 'od:0-1', '--inference-idle', '3'] });
  const states = async () => (await s.call('GET', '/v1/workers')).json.data.map((w) => w.state);
  const body = { model: 'tiny', prompt: 'Review: a good film\nSentiment:', max_tokens: 12, temperature: 0 };
  try {
    assert.ok(!live().some((j) => j.name === 'alallo-serve-od-0'), JSON.stringify(live()));
    assert.deepEqual(await states(), ['active']);
    const first = await s.call('POST', '/v1/completions', { body });
    if (first.status !== 200) {
      assert.equal(first.status, 503, first.text);
      assert.ok(Number(first.headers.get('retry-after')) > 0);
    }
    await waitFor(async () => {
      const r = (await s.call('GET', '/v1/workers')).json;
      return (r.serving || []).some((e) => e.fresh) ? r.serving : null;
    }, { timeoutMs: 120000, what: 'the serving engine started for the request, heard from' });
    assert.match(s.output, /serving engines on pool od: 1, one more \(a request found none\)/);
    assert.equal(live().filter((j) => j.name === 'alallo-serve-od-0').length, 1, JSON.stringify(live()));
    assert.deepEqual(await states(), ['draining']);
    const r = await s.call('POST', '/v1/completions', { body });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.choices[0].text.length > 0);
    await waitFor(() => !live().some((j) => j.name === 'alallo-serve-od-0'),
      { timeoutMs: 120000, what: "the idle engine's Slurm job cancelled" });
    assert.match(s.output, /serving engines on pool od: 0, one fewer \(idle for \d+ s\)/);
    await waitFor(async () => (await states())[0] === 'active', { timeoutMs: 30000, what: 'the slot given back' });
  } finally {
    await s.stop();
  }
});
