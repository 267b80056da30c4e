// ha_lock_lost.test.mjs - a leader on PostgreSQL whose lock session ends
// (the database restarted, a network cut it, an operator terminated it)
// stops leading at once and exits with status 3; the standby leads.
//
// Always on PostgreSQL: the one of the PostgreSQL pass (ALALLO_PG_DIR), or,
// in the SQLite pass, a throwaway one started here (tests/pg/pg-up.sh).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';

import { ROOT, Serve, tinyModelsDir, waitFor } from './service_harness.mjs';

let ownCluster = null;
function cluster() {
  if (process.env.ALALLO_PG_DIR) return process.env.ALALLO_PG_DIR;
  ownCluster = fs.mkdtempSync('/tmp/alallo-pgl-');
  execFileSync(path.join(ROOT, 'tests/pg/pg-up.sh'), [ownCluster, '/nonexistent'], { stdio: 'ignore', timeout: 120000 });
  return ownCluster;
}
after(() => {
  if (ownCluster) spawnSync(path.join(ROOT, 'tests/pg/pg-down.sh'), [ownCluster], { stdio: 'ignore' });
});

function psql(dir, db, sql) {
  return execFileSync('psql', ['-X', '-At', '-h', dir, '-p', '55432', '-U', 'alallo', '-d', db, '-c', sql], { encoding: 'utf8' }).trim();
}

async function health(s) {
  return (await s.call('GET', '/healthz', { key: null })).json;
}

test('a leader whose lock session ends stops leading and exits 3; the standby leads', { timeout: 120000 }, async () => {
  const dir = cluster();
  const db = `lock_lost_${process.pid}`;
  const url = execFileSync(path.join(ROOT, 'tests/pg/pg-db.sh'), [dir, db], { encoding: 'utf8' }).trim();
  const args = ['--store', url, '--models', tinyModelsDir(), '--local-worker', 'none'];
  // This --store comes after any the harness adds, so it is the one used.
  const a = await Serve.start({ args });
  await waitFor(async () => (await health(a)).leader, { timeoutMs: 10000, what: 'the first serve to lead' });
  const b = await Serve.start({ data: a.data, args });
  try {
    assert.equal((await health(b)).leader, false);
    // The session that holds alallo's advisory lock in this database.
    const ended = psql(dir, db, "SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()");
    assert.equal(ended, '1');
    const exit = await Promise.race([a.exited, new Promise((r) => setTimeout(() => r('still running'), 30000))]);
    assert.deepEqual(exit, { code: 3, signal: null }, a.output);
    assert.match(a.output, /lost the leadership/);
    await waitFor(async () => (await health(b)).leader, { timeoutMs: 15000, what: 'the standby to lead' });
    // The new leader answers writes: a bad creation is refused by it.
    const r = await b.call('POST', '/v1/fine_tuning/jobs', { body: { model: 'tiny' } });
    assert.equal(r.status, 400, r.text);
  } finally {
    await b.stop();
    await a.stop('SIGKILL');
    spawnSync('psql', ['-X', '-q', '-h', dir, '-p', '55432', '-U', 'alallo', '-d', 'postgres', '-c', `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`], { stdio: 'ignore' });
  }
});
