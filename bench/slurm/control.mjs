// bench/slurm/control.mjs - the control side's figures on a throwaway
// single-node Slurm cluster (tests/slurm/slurm-up.sh), as root:
//
//   running_to_started   Slurm runs the attempt -> the trainer's `started`
//                        reached the server (the job's status `running`), s
//   preempt_to_resched   the preemptor's sbatch -> the job `re-scheduling`, s
//   e2e_slurm            create -> succeeded, the sample job through Slurm, s
//   e2e_local            the same job on a local worker (`serve` default), s
//
//   ALALLO_BIN=build/alallo ALALLO_ROOT=. node bench/slurm/control.mjs
//
// The sample job: examples/sentiment-train.jsonl on the built-in tiny model
// (the integration tests' model), 1 epoch, batch 2, seed 5. States are
// polled every 20 ms through the API. Prints one JSON object per figure and
// the machine. Not a test: the figures depend on the machine and its load.
import os from 'node:os';

import {
  createJob, slurmUp, startEngineServe, uploadSample, waitFor, waitJob,
} from '../../tests/slurm/engine_harness.mjs';
import { Serve, tinyModelsDir } from '../../tests/integration/service_harness.mjs';

const ROUNDS = Number(process.env.ROUNDS || 3);
const POOL_OD = 'name=od,partition=ondemand,gres=gpu:1,cpus=1,mem=1000M,class=on-demand,price=0.40/h,slots=1';
const POOL_SP = 'name=sp,partition=spot,gres=gpu:1,cpus=1,mem=1000M,class=spot,price=0.10/h,slots=1';

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const report = (name, samples, unit) =>
  console.log(JSON.stringify({ figure: name, unit, median: +median(samples).toFixed(3), samples: samples.map((x) => +x.toFixed(3)) }));

const cluster = slurmUp();
try {
  // Slurm running -> trainer started, and end to end, through Slurm.
  const startLag = [];
  const e2eSlurm = [];
  const s = await startEngineServe({ executor: 'slurm', pools: [POOL_OD], env: cluster.env });
  try {
    const file = await uploadSample(s);
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = Date.now();
      const job = await createJob(s, file, { epochs: 1 });
      let tRun = null;
      let tStarted = null;
      await waitFor(async () => {
        const j = await s.job(job.id);
        const a = j.attempts.at(-1);
        if (tRun === null && a?.engine?.state === 'running') tRun = Date.now();
        if (tStarted === null && ['running', 'succeeded'].includes(j.status)) tStarted = Date.now();
        return j.status === 'succeeded';
      }, { timeoutMs: 180000, everyMs: 20, what: 'the job to succeed' });
      e2eSlurm.push((Date.now() - t0) / 1000);
      if (tRun !== null && tStarted !== null) startLag.push((tStarted - tRun) / 1000);
    }
  } finally {
    await s.stop();
  }
  report('running_to_started', startLag, 's');
  report('e2e_slurm', e2eSlurm, 's');

  // Preemption: a spot attempt, then an on-demand job that needs both GPUs.
  const preempt = [];
  const sp = await startEngineServe({ executor: 'slurm', pools: [POOL_SP], env: cluster.env });
  try {
    const file = await uploadSample(sp);
    for (let i = 0; i < ROUNDS; i++) {
      const job = await createJob(sp, file, { epochs: 20 });
      await waitJob(sp, job.id, (j) => j.status === 'running' && j.progress.steps_done > 0, 'to run');
      const t0 = Date.now();
      const id = cluster.run('sbatch', ['--parsable', '-p', 'ondemand', '--gres=gpu:2', '-c', '1', '--mem=100M', '-o', '/dev/null', '--wrap', 'sleep 3']).trim();
      await waitFor(async () => (await sp.job(job.id)).status === 're-scheduling', { timeoutMs: 60000, everyMs: 20, what: 're-scheduling' });
      preempt.push((Date.now() - t0) / 1000);
      cluster.run('scancel', [id]);
      await sp.call('POST', `/v1/fine_tuning/jobs/${job.id}/cancel`);
      await sp.waitStatus(job.id, 'cancelled', { timeoutMs: 120000 });
    }
  } finally {
    await sp.stop();
  }
  report('preempt_to_resched', preempt, 's');
} finally {
  cluster.down();
}

// The same sample job on a local worker of one CPU.
const e2eLocal = [];
const local = await Serve.start({ args: ['--models', tinyModelsDir(), '--local-worker', 'name=local,cpus=1,mem=2G'] });
try {
  const file = await uploadSample(local);
  for (let i = 0; i < ROUNDS; i++) {
    const t0 = Date.now();
    const job = await createJob(local, file, { epochs: 1 });
    await waitJob(local, job.id, (j) => j.status === 'succeeded', 'to succeed');
    e2eLocal.push((Date.now() - t0) / 1000);
  }
} finally {
  await local.stop();
}
report('e2e_local', e2eLocal, 's');
console.log(JSON.stringify({ machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, mem_gb: +(os.totalmem() / 2 ** 30).toFixed(1), load: os.loadavg() } }));
