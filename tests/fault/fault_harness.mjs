// fault_harness.mjs - what the fault tests (tests/integration/fault_*.test.mjs)
// share: remote `alallo worker` processes beside a real `alallo serve`
// (started with service_harness.mjs), finding their trainers in /proc, jobs
// long enough to be hit mid-way, the ledger, and the LD_PRELOAD shim of
// tests/fault/enospc_shim.c built with cc into a temporary folder.
// Not a test itself.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after } from 'node:test';

import { BIN, ROOT, SAMPLE, Serve, tinyModelsDir, tmpdir, waitFor } from '../integration/service_harness.mjs';

export { BIN, ROOT, SAMPLE, Serve, tinyModelsDir, tmpdir, waitFor };

// Every process started here is killed when the test file ends, so a
// failed assertion never leaves a worker or a trainer behind.
const children = new Set();
after(() => {
  for (const p of children) {
    try {
      process.kill(p.proc.pid, 'SIGCONT');
    } catch {
      // already gone
    }
    p.proc.kill('SIGKILL');
  }
});

// Starts `alallo ARGS` with its output kept (the last 100 kB) for messages.
export function startProc(args, { env } = {}) {
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ? { ...process.env, ...env } : process.env });
  const p = { proc, out: '', exited: null };
  children.add(p);
  const keep = (b) => {
    p.out += b.toString();
    if (p.out.length > 100000) p.out = p.out.slice(-50000);
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  p.done = new Promise((resolve) =>
    proc.on('exit', (code, sig) => {
      p.exited = code ?? sig;
      children.delete(p);
      resolve(p.exited);
    }),
  );
  return p;
}

export async function stopProc(p, sig = 'SIGTERM', graceMs = 30000) {
  if (p.exited !== null) return;
  p.proc.kill(sig);
  const t = setTimeout(() => p.proc.kill('SIGKILL'), graceMs);
  await p.done;
  clearTimeout(t);
}

// serve with no local worker, a short worker timeout and the tiny model.
export async function startServe({ data, port, args = [] } = {}) {
  return Serve.start({
    data,
    port,
    // 10 s (a heartbeat every 2 s): at 4 s (one a second) the surviving
    // worker of fault_worker_partition was declared lost too beside a load
    // average of 30, and its job moved a third time.
    args: ['--models', tinyModelsDir(), '--local-worker', 'none', '--worker-timeout', '10', ...args],
  });
}

// A remote worker of one CPU that shares the server's data folder.
export function startWorker(s, name, { env, args = [] } = {}) {
  const workDir = path.join(tmpdir('alallo-fault-w-'), name);
  const p = startProc(
    ['worker', '--server', s.url, '--token', `@${path.join(s.data, 'worker-token')}`, '--name', name,
      '--cpus', '1', '--mem', '2G', '--price', '0.40', '--work-dir', workDir, '--bench-timeout', '0',
      '--stop-grace', '10', ...args],
    { env },
  );
  p.name = name;
  p.workDir = workDir;
  p.log = () => {
    try {
      return fs.readFileSync(path.join(workDir, 'worker.log'), 'utf8');
    } catch {
      return '';
    }
  };
  return p;
}

export async function workerState(s, name) {
  const r = await s.call('GET', '/v1/workers');
  return r.json?.data?.find((w) => w.name === name)?.state ?? null;
}

export async function waitWorkers(s, names) {
  await waitFor(async () => {
    for (const n of names) if ((await workerState(s, n)) !== 'active') return false;
    return true;
  }, { timeoutMs: 60000, what: `workers ${names} to be active` });
}

// The sample data set, uploaded; returns its file id.
export async function uploadSample(s, key = s.key) {
  const up = await s.upload('sentiment-train.jsonl', fs.readFileSync(SAMPLE), { key });
  if (up.status !== 200) throw new Error(`upload: ${up.status} ${JSON.stringify(up.json)}`);
  return up.json.id;
}

// A job of `steps` steps on the tiny model (batch 2 over 200 examples);
// checkpoints come every max(steps/10, 10) steps.
export async function createLongJob(s, file, { epochs = 4, key = s.key, seed = 5 } = {}) {
  const r = await s.createJob({ model: 'tiny', training_file: file, hyperparameters: { n_epochs: epochs, batch_size: 2 }, seed }, key);
  if (r.status !== 200) throw new Error(`create: ${r.status} ${r.text}`);
  return r.json;
}

// Waits for job `id` to satisfy pred; fails at once when it ends otherwise.
export async function waitJob(s, id, pred, what, { timeoutMs = 240000, key = s.key } = {}) {
  return waitFor(async () => {
    const j = await s.job(id, key);
    if (pred(j)) return j;
    if (['succeeded', 'failed', 'cancelled'].includes(j.status)) {
      throw new Error(`job ${id} ended ${j.status} (${j.message}) while waiting for ${what}\n${JSON.stringify(j.attempts)}`);
    }
    return false;
  }, { timeoutMs, everyMs: 100, what: `job ${id} ${what}` });
}

export async function checkpoints(s, id, key = s.key) {
  return (await s.call('GET', `/v1/fine_tuning/jobs/${id}/checkpoints?limit=100`, { key })).json.data;
}

// Every ledger row of the account (pages followed).
export async function ledger(s, key = s.key) {
  const rows = [];
  let after = '';
  for (let i = 0; i < 100; i++) {
    const r = await s.call('GET', `/v1/billing/ledger?limit=100${after ? `&after=${after}` : ''}`, { key });
    if (r.status !== 200) throw new Error(`ledger: ${r.status} ${r.text}`);
    rows.push(...r.json.data);
    if (!r.json.has_more) break;
    after = r.json.data.at(-1).id;
  }
  return rows;
}

// Asserts, through `assert`, that each step of job `j` was billed once:
// its charge rows cover disjoint step ranges that follow each other from 0
// to the steps it kept (one row per attempt that kept steps), the job's
// price is their sum, and the net is within the upper end of the estimate.
// Returns the job's ledger rows.
export async function assertBilledOnce(assert, s, j, key = s.key) {
  const rows = (await ledger(s, key)).filter((r) => r.job === j.id);
  const charges = rows.filter((r) => r.kind === 'charge').sort((x, y) => x.from_step - y.from_step);
  const show = JSON.stringify(rows);
  if (charges.length && charges[0].from_step !== undefined) {
    // Each step is charged once, net of `lost work` refunds: an attempt
    // that resumed from an older checkpoint than the last one recorded
    // (that one was damaged) repeats steps an earlier attempt was charged
    // for, and that earlier charge is refunded (docs/ledger.md).
    const net = new Map();
    for (const r of rows) {
      const sign = r.kind === 'charge' && r.reason === 'training steps' ? 1 : r.kind === 'refund' && /^lost work/.test(r.reason || '') ? -1 : 0;
      if (!sign) continue;
      assert.ok(r.to_step > r.from_step, `an empty or reversed step row: ${show}`);
      assert.equal(r.steps, r.to_step - r.from_step, show);
      for (let k = r.from_step + 1; k <= r.to_step; k++) net.set(k, (net.get(k) || 0) + sign);
    }
    let at = 0;
    while (net.get(at + 1) === 1) at++;
    for (const [k, n] of net) assert.ok(n === 0 || (n === 1 && k <= at), `charge rows overlap or leave a gap at step ${at}: ${show}`);
    if (j.status === 'succeeded') assert.equal(at, j.progress.max_steps, `charged up to step ${at} of ${j.progress.max_steps}: ${show}`);
    assert.equal(new Set(charges.map((c) => c.attempt)).size, charges.length, `two charges for one attempt: ${show}`);
  } else {
    assert.ok(charges.length <= 1, `job ${j.id} has ${charges.length} charges: ${show}`);
  }
  const sum = (kind) => rows.filter((r) => r.kind === kind).reduce((acc, r) => acc + r.amount, 0);
  // Amounts are shown rounded to 4 decimals (each row and the job's total
  // apart), so their sum may differ from the total by half a unit per row.
  const slack = 0.00005 * rows.length + 1e-9;
  assert.ok(Math.abs(sum('charge') - j.price.charged) <= slack, `ledger ${show} vs price ${JSON.stringify(j.price)}`);
  if (j.estimate?.price?.high != null) assert.ok(j.price.charged - j.price.refunded <= j.estimate.price.high + 1e-6, `net charge above the estimate: ${JSON.stringify(j.price)} ${JSON.stringify(j.estimate.price)}`);
  return rows;
}

function procState(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const close = stat.lastIndexOf(')');
  const fields = stat.slice(close + 2).split(' ');
  return { state: fields[0], ppid: Number(fields[1]) };
}

// Live `alallo train` processes whose parent is `ppid`, or (ppid null)
// whose command line names a path under `under`.
export function trainers({ ppid = null, under = null } = {}) {
  const pids = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (cmd[1] !== 'train') continue;
      const st = procState(d);
      if (st.state === 'Z') continue;
      if (ppid !== null && st.ppid !== ppid) continue;
      if (under !== null && !cmd.some((a) => a.startsWith(under))) continue;
      pids.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

// The complete checkpoint folders of a job on disk, oldest first: each
// attempt writes its own, DATA/jobs/ID/attempts/ATT/checkpoints.
export function checkpointDirs(s, jobId) {
  const attempts = path.join(s.data, 'jobs', jobId, 'attempts');
  if (!fs.existsSync(attempts)) return [];
  const dirs = [];
  for (const att of fs.readdirSync(attempts)) {
    const root = path.join(attempts, att, 'checkpoints');
    if (!fs.existsSync(root)) continue;
    for (const n of fs.readdirSync(root)) {
      if (/^step-\d+$/.test(n) && fs.existsSync(path.join(root, n, 'COMPLETE'))) dirs.push(path.join(root, n));
    }
  }
  return dirs.sort((a, b) => path.basename(a).localeCompare(path.basename(b)));
}

export const stepOf = (dir) => Number(/step-(\d+)$/.exec(dir)[1]);

// Builds tests/fault/NAME.c (enospc_shim unless named) into a temporary
// folder; returns the .so.
const shims = new Map();
export function buildShim(name = 'enospc_shim') {
  if (shims.has(name)) return shims.get(name);
  const out = path.join(tmpdir('alallo-shim-'), `${name}.so`);
  execFileSync('cc', ['-shared', '-fPIC', '-O1', '-Wall', '-Wextra', '-Werror', '-o', out, path.join(ROOT, `tests/fault/${name}.c`), '-ldl'], { stdio: 'pipe' });
  shims.set(name, out);
  return out;
}

// LD_PRELOAD for shim: a binary built with AddressSanitizer needs its
// runtime first, before the shim (make asan runs the fault tests that way).
export function preloadWith(shim) {
  const ldd = spawnSync('ldd', [BIN], { encoding: 'utf8' });
  const asan = /\blibasan\.so\S*\s+=>\s+(\S+)/.exec(ldd.stdout || '');
  return asan ? `${asan[1]} ${shim}` : shim;
}
