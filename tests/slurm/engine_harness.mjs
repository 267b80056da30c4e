// engine_harness.mjs - what the engine tests (tests/integration/slurm_*.test.mjs)
// share: `alallo serve --executor process|slurm` with the tiny model, the
// throwaway Slurm kit (tests/slurm/slurm-up.sh) started per test file and
// stopped by PID at its end, Slurm's own view of alallo's jobs (squeue by
// tag), and the runners' processes found in /proc. Not a test itself.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { checkpoints, trainers } from '../fault/fault_harness.mjs';
import { ROOT, Serve, tinyModelsDir, tmpdir, waitFor } from '../integration/service_harness.mjs';

export { Serve, tmpdir, waitFor };

// A throwaway Slurm cluster; returns {kit, env} with SLURM_CONF set in env.
// Call down() at the end (after()).
export function slurmUp({ graceS = 20, memMb = 4000 } = {}) {
  const kit = tmpdir('alallo-slurm-kit-');
  const out = execFileSync(path.join(ROOT, 'tests/slurm/slurm-up.sh'), [kit], {
    encoding: 'utf8',
    env: { ...process.env, SLURM_KIT_GRACE_S: String(graceS), SLURM_KIT_MEM_MB: String(memMb) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const m = /SLURM_CONF=(\S+)/.exec(out);
  if (!m) throw new Error(`slurm-up printed no SLURM_CONF:\n${out}`);
  const env = { ...process.env, SLURM_CONF: m[1] };
  return {
    kit,
    env,
    down: () => execFileSync(path.join(ROOT, 'tests/slurm/slurm-down.sh'), [kit], { stdio: 'ignore' }),
    // alallo's jobs as Slurm lists them: [{id, name, state, reason}]
    jobs: () => {
      const text = execFileSync('squeue', ['-h', '-a', '-t', 'all', '-o', '%i|%j|%T|%r'], { encoding: 'utf8', env });
      return text.split('\n').filter((l) => l.includes('|alallo-')).map((l) => {
        const [id, name, state, reason] = l.trim().split('|');
        return { id, name, state, reason };
      });
    },
    run: (cmd, args) => execFileSync(cmd, args, { encoding: 'utf8', env, stdio: ['ignore', 'pipe', 'pipe'] }),
    // The node made usable again, as an operator would after a controller
    // crash: a job the crashed controller forgot can still run on the node,
    // and when the restarted controller hands its job id to a new job, the
    // node may be drained. Returns the reason Slurm gave, if any.
    heal: async () => {
      let why = '';
      try {
        why = execFileSync('sinfo', ['-h', '-R', '-o', '%E'], { encoding: 'utf8', env }).trim();
      } catch {
        /* the controller is still coming up */
      }
      await healNode(env);
      return why;
    },
    // The same at once, without waiting: resumes the node when Slurm has
    // drained it or set it down; returns Slurm's reason, or '' when the
    // node was fine (or the controller did not answer).
    resumeIfDrained: () => {
      try {
        const [node, state, why] = execFileSync('sinfo', ['-h', '-N', '-o', '%N|%t|%E'], { encoding: 'utf8', env }).trim().split('\n')[0].split('|');
        if (!/drain|down|drng|fail/.test(state)) return '';
        execFileSync('scontrol', ['update', `nodename=${node}`, 'state=resume'], { env, stdio: 'ignore' });
        return `${state}: ${why}`;
      } catch {
        return '';
      }
    },
    // kill -9 of slurmctld; start() brings it back as slurm-up.sh did (its
    // PID recorded for slurm-down.sh) and waits for it to answer.
    // It restarts from its saved state, as a crashed controller does (that
    // state may miss the latest submissions: reconciliation's work), and
    // the node is made usable again should the restart have drained it.
    killController: () => {
      const k = killDaemon(kit, env, 'slurmctld', ['-D'], ['scontrol', 'ping'], /UP/);
      return { start: async () => { await k.start(); await healNode(env); } };
    },
    // kill -9 of slurmd (the node goes away); start() brings it back.
    killNode: () => {
      const node = execFileSync('sinfo', ['-h', '-N', '-o', '%N'], { encoding: 'utf8', env }).trim().split('\n')[0];
      return killDaemon(kit, env, 'slurmd', ['-D', '-N', node], ['sinfo', '-h', '-o', '%t'], /^(idle|mix|alloc)/m);
    },
  };
}

// Waits until the kit's node takes jobs, resuming it when a restart left
// it drained or down.
async function healNode(env) {
  const run = (args) => execFileSync(args[0], args.slice(1), { encoding: 'utf8', env, stdio: ['ignore', 'pipe', 'ignore'] });
  await waitFor(() => {
    try {
      const [node, state] = run(['sinfo', '-h', '-N', '-o', '%N|%t']).trim().split('\n')[0].split('|');
      if (/^(idle|mix|alloc)$/.test(state)) return true;
      if (/drain|down|drng|fail/.test(state)) run(['scontrol', 'update', `nodename=${node}`, 'state=resume']);
    } catch {
      /* the controller is still coming up */
    }
    return false;
  }, { timeoutMs: 60000, everyMs: 500, what: 'the node to take jobs again' });
}

// Kills daemon `name` of the kit (-9) and returns {start}, which starts it
// again as slurm-up.sh did (its PID recorded for slurm-down.sh) and waits
// until `check` prints what `ready` matches.
function killDaemon(kit, env, name, args, check, ready) {
  const pidFile = path.join(kit, 'run', `${name}.pid`);
  process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGKILL');
  return {
    start: async () => {
      const out = fs.openSync(path.join(kit, 'log', `${name}.out`), 'a');
      const p = spawn(name, args, { env, detached: true, stdio: ['ignore', out, out] });
      p.unref();
      fs.closeSync(out);
      fs.writeFileSync(pidFile, `${p.pid}\n`);
      await waitFor(() => {
        try {
          return ready.test(execFileSync(check[0], check.slice(1), { encoding: 'utf8', env, stdio: ['ignore', 'pipe', 'ignore'] }));
        } catch {
          return false;
        }
      }, { timeoutMs: 60000, what: `${name} to answer again` });
    },
  };
}

// The runners' worker timeout (seconds) of the engine tests' serve: the
// default. At 6 s (a heartbeat every 2 s), beside a load average of 30,
// healthy runners missed 6 s of heartbeats and were declared lost, so that
// a job moved again and again and a test's count of attempts, or its
// freeze of the first attempt's processes, no longer held. A test that
// times a loss allows this plus the ticks that notice it.
export const WORKER_TIMEOUT_S = 10;

// serve with an engine: no local worker, the tiny model, the worker
// timeout above. env: the environment serve runs in (SLURM_CONF for Slurm).
export async function startEngineServe({ executor = 'process', pools = [], args = [], env, data, port } = {}) {
  const poolArgs = pools.flatMap((p) => ['--slurm-pool', p]);
  const saved = { ...process.env };
  if (env) Object.assign(process.env, env);
  try {
    return await Serve.start({
      data,
      port,
      args: ['--models', tinyModelsDir(), '--executor', executor, ...poolArgs, '--worker-timeout', String(WORKER_TIMEOUT_S), ...args],
    });
  } finally {
    if (env) {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    }
  }
}

// The sample data set, uploaded; returns its file id.
export async function uploadSample(s) {
  const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(path.join(ROOT, 'examples/sentiment-train.jsonl')));
  if (up.status !== 200) throw new Error(`upload: ${up.status} ${JSON.stringify(up.json)}`);
  return up.json.id;
}

export async function createJob(s, file, { epochs = 1, batch = 2, seed = 5 } = {}) {
  const r = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: epochs, batch_size: batch }, seed });
  if (r.status !== 200) throw new Error(`create: ${r.status} ${r.text}`);
  return r.json;
}

// Waits for job `id` to satisfy pred; fails at once when it ends otherwise.
export async function waitJob(s, id, pred, what, { timeoutMs = 180000 } = {}) {
  let last = null;
  try {
    return await waitFor(async () => {
      const j = await s.job(id);
      last = j;
      if (pred(j)) return j;
      if (['succeeded', 'failed', 'cancelled'].includes(j.status) && !pred(j)) {
        throw new Error(`job ${id} ended ${j.status} (${j.message}) while waiting for ${what}\n${JSON.stringify(j.attempts)}\n${s.output.slice(-3000)}`);
      }
      return false;
    }, { timeoutMs, everyMs: 100, what: `job ${id} ${what}` });
  } catch (e) {
    // A timeout says where the job stood and what serve said last.
    if (/timed out/.test(e.message) && last) {
      e.message += `\nthe job: ${JSON.stringify({ status: last.status, message: last.message, progress: last.progress, attempts: last.attempts })}\nserve's output:\n${s.output.slice(-4000)}`;
    }
    throw e;
  }
}

// Live processes whose command line is `alallo attempt run ... --attempt ID`
// (ID given) or any runner; [{pid, attempt}].
export function runners(attempt = null) {
  const out = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (cmd[1] !== 'attempt' || cmd[2] !== 'run') continue;
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      const a = cmd[cmd.indexOf('--attempt') + 1];
      if (attempt === null || a === attempt) out.push({ pid: Number(d), attempt: a });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

// The runner's own log of attempt `att` of job `job`.
export function runnerLog(s, job, att) {
  try {
    return fs.readFileSync(path.join(s.data, 'jobs', job, 'attempts', att, 'runner.log'), 'utf8');
  } catch {
    return '';
  }
}

// A node cut off: its runner and trainer frozen (SIGSTOP). Returns the
// PIDs; thaw() lets them go on (SIGCONT), ignoring those gone.
export function freeze(pids) {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGSTOP');
    } catch {
      // gone: the caller checks what it froze
    }
  }
  return pids;
}

export function thaw(pids) {
  for (const pid of pids.splice(0)) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // gone
    }
  }
}

// A 2,000-step job (a checkpoint every 200) cut off after its first
// recorded checkpoint: its runner and trainer frozen (SIGSTOP) at once.
// Returns { job, attempt, dir, pids, cutAt }: the frozen PIDs (for thaw())
// and when they were frozen. The two processes are found while the job
// runs, before the checkpoint, and frozen as soon as the server lists it,
// then checked: a scan after the checkpoint could catch the trainer
// already gone at the end of the job (a slow poll under load), and a scan
// before the trainer's start only the runner. Throws when the job ended,
// or its attempt changed, before the freeze (the test needs it longer).
export async function cutOffJob(s, file) {
  const job = await createJob(s, file, { epochs: 20 });
  const explain = async (e) => {
    e.message += `\nthe job: ${JSON.stringify(await s.job(job.id))}\nserve's output:\n${s.output.slice(-4000)}`;
    return e;
  };
  let found;
  try {
    found = await waitFor(async () => {
      const j = await s.job(job.id);
      if (['succeeded', 'failed', 'cancelled'].includes(j.status)) throw new Error(`job ${job.id} is ${j.status} already: make it longer`);
      const attempt = j.attempts.at(-1);
      if (j.status !== 'running' || !attempt) return false;
      const dir = path.join(s.data, 'jobs', job.id, 'attempts', attempt.id);
      const runner = runners(attempt.id).map((r) => r.pid);
      const trainer = trainers({ under: dir });
      return runner.length === 1 && trainer.length === 1 ? { attempt, dir, pids: [...runner, ...trainer] } : false;
    }, { timeoutMs: 120000, everyMs: 200, what: `the runner and trainer of job ${job.id}` });
    await waitFor(async () => (await checkpoints(s, job.id)).length > 0, { timeoutMs: 120000, everyMs: 50, what: 'a first checkpoint' });
  } catch (e) {
    throw await explain(e);
  }
  const pids = freeze(found.pids);
  const cutAt = Date.now();
  const alive = pids.filter((pid) => {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
    } catch {
      return false;
    }
  });
  const j = await s.job(job.id);
  if (alive.length !== 2 || j.attempts.at(-1).id !== found.attempt.id || j.status !== 'running') {
    thaw(pids);
    throw await explain(new Error(`job ${job.id}: its runner and trainer ${found.pids} of ${found.attempt.id} ended before the freeze (alive: ${alive}): make it longer`));
  }
  return { job, attempt: found.attempt, dir: found.dir, pids, cutAt };
}
