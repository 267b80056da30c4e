// security_connections.test.mjs - what unauthenticated peers can hold, and
// how a request's framing is read (docs/security.md, "Connections").
//
// A flood of idle, header-trickling and body-trickling sockets from
// 127.0.0.1 (the same address local workers use), reopened as the server
// cuts them, must not keep keyed users or workers from being served. Every
// socket is closed at the end; counts and time are bounded.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import http from 'node:http';
import net from 'node:net';

import { Serve, sleep, waitFor } from './service_harness.mjs';

const IDLE = 500; // connect, send nothing
const SLOW_HEADERS = 250; // a header line, one byte every 2 s
const SLOW_BODIES = 150; // unauthenticated POST headers, then one body byte every 2 s
const FLOOD_MS = 14000; // how long the probes run while the flood is open
const PROBE_EVERY_MS = 250;
const PROBE_TIMEOUT_MS = 3000;

// Keeps `count` sockets of one kind open until stopped, reopening each one
// the server closes after a short pause (a persistent attacker).
class Flood {
  constructor(port, count, kind) {
    Object.assign(this, { port, count, kind, opened: 0, closedByServer: 0, stopped: false });
    this.sockets = new Set();
    this.timers = new Set();
  }

  start() {
    for (let i = 0; i < this.count; i++) this.one();
  }

  one() {
    if (this.stopped) return;
    const s = net.connect({ host: '127.0.0.1', port: this.port });
    this.sockets.add(s);
    this.opened++;
    let tick = null;
    s.on('connect', () => {
      if (this.kind === 'slow-headers') {
        s.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
        tick = setInterval(() => s.write('a'), 2000);
      } else if (this.kind === 'slow-bodies') {
        s.write('POST /v1/fine_tuning/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n' +
          'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{');
        tick = setInterval(() => s.write(' '), 2000);
      }
    });
    s.on('data', () => {}); // an answer (401 ...) is read and ignored
    s.on('error', () => {});
    s.on('close', () => {
      if (tick) clearInterval(tick);
      this.sockets.delete(s);
      if (this.stopped) return;
      this.closedByServer++;
      const t = setTimeout(() => {
        this.timers.delete(t);
        this.one();
      }, 100);
      this.timers.add(t);
    });
  }

  stop() {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    for (const s of this.sockets) s.destroy();
  }
}

// One request on a new connection (a new client), with a deadline.
function probe(port, method, path, token, body) {
  const started = Date.now();
  return new Promise((resolve) => {
    const payload = body ? JSON.stringify(body) : null;
    const req = http.request(
      {
        host: '127.0.0.1', port, method, path, agent: false, timeout: PROBE_TIMEOUT_MS,
        headers: {
          Authorization: `Bearer ${token}`,
          Connection: 'close',
          ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {}),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ ok: res.statusCode === 200, status: res.statusCode, ms: Date.now() - started }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ ok: false, status: e.code || e.message, ms: Date.now() - started }));
    if (payload) req.write(payload);
    req.end();
  });
}

function summary(results) {
  const ms = results.filter((r) => r.ok).map((r) => r.ms).sort((a, b) => a - b);
  const pct = (p) => (ms.length ? ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] : null);
  const failures = {};
  for (const r of results) if (!r.ok) failures[r.status] = (failures[r.status] || 0) + 1;
  return { answered: ms.length, sent: results.length, p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: ms.at(-1) ?? null, failures };
}

// The error message of a raw answer's JSON body.
function message(got) {
  const body = got.slice(got.indexOf('\r\n\r\n') + 4);
  try {
    return JSON.parse(body).error.message;
  } catch {
    return `(no JSON error in ${JSON.stringify(got.slice(0, 200))})`;
  }
}

// Sends raw bytes on a new connection and collects what comes back until
// the server closes or `ms` pass.
function raw(port, bytes, ms = 3000) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    let got = '';
    const done = () => {
      clearTimeout(t);
      s.destroy();
      resolve(got);
    };
    const t = setTimeout(done, ms);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('error', done);
    s.on('close', done);
  });
}

describe('unauthenticated connections cannot lock out users and workers', () => {
  let s;
  before(async () => {
    s = await Serve.start({
      args: ['--worker-timeout', '6'], // the default --header-timeout (15 s)
    });
    await waitFor(async () => {
      const w = await s.call('GET', '/v1/workers');
      return w.status === 200 && w.json.data.some((x) => x.name === 'local' && x.state === 'active');
    }, { timeoutMs: 20000, what: 'the local worker to be active' });
  });
  after(async () => s && s.stop());

  test(`${IDLE} idle, ${SLOW_HEADERS} header-trickling and ${SLOW_BODIES} body-trickling sockets`, async () => {
    const reg = await probe(s.port, 'POST', '/internal/workers/register', s.token, {
      name: 'stand-in', cpus: 1, mem_bytes: 1024 ** 3, accelerator: 'cpu', price_per_hour: 0.4,
      class: 'on-demand', speed: { tokens_per_s: null, flops: null },
    });
    assert.equal(reg.status, 200, 'register before the flood');

    const floods = [new Flood(s.port, IDLE, 'idle'), new Flood(s.port, SLOW_HEADERS, 'slow-headers'),
      new Flood(s.port, SLOW_BODIES, 'slow-bodies')];
    const keyed = [];
    const worker = [];
    const openSamples = [];
    try {
      for (const f of floods) f.start();
      await sleep(1500); // let the flood settle in before probing
      const end = Date.now() + FLOOD_MS;
      const inflight = [];
      while (Date.now() < end) {
        openSamples.push(floods.reduce((n, f) => n + f.sockets.size, 0));
        inflight.push(probe(s.port, 'GET', '/v1/fine_tuning/jobs', s.key).then((r) => keyed.push(r)));
        inflight.push(probe(s.port, 'POST', '/internal/workers/stand-in/heartbeat', s.token, {})
          .then((r) => worker.push(r)));
        await sleep(PROBE_EVERY_MS);
      }
      await Promise.all(inflight);
    } finally {
      for (const f of floods) f.stop();
    }
    const workers = await s.call('GET', '/v1/workers');
    const local = workers.json.data.find((x) => x.name === 'local');
    const numbers = {
      flood: floods.map((f) => ({ kind: f.kind, held: f.count, opened: f.opened, closed_by_server: f.closedByServer })),
      sockets_open_min: Math.min(...openSamples),
      sockets_open_max: Math.max(...openSamples),
      keyed: summary(keyed),
      worker: summary(worker),
      local_worker_after: local && local.state,
    };
    console.log(`flood numbers: ${JSON.stringify(numbers)}`);
    assert.ok(numbers.sockets_open_min >= 400, 'hundreds of flood sockets were open throughout');
    assert.equal(numbers.keyed.answered, keyed.length, `every keyed request answered: ${JSON.stringify(numbers.keyed)}`);
    assert.equal(numbers.worker.answered, worker.length, `every worker call answered: ${JSON.stringify(numbers.worker)}`);
    assert.ok(numbers.keyed.p99_ms < 1500 && numbers.worker.p99_ms < 1500, 'answered within 1.5 s (p99)');
    assert.equal(local && local.state, 'active', 'the local worker kept its heartbeats (not lost)');
    // The flood's sockets are cut: by the header deadline, or to make room.
    assert.ok(floods.every((f) => f.closedByServer > 0), 'every kind of flood socket was cut');
  });
});

describe('how a request body is framed and refused', () => {
  let s;
  before(async () => {
    s = await Serve.start({ args: ['--local-worker', 'none'] });
  });
  after(async () => s && s.stop());

  test('a body over the cap is refused before "100 Continue"', async () => {
    const got = await raw(s.port, 'POST /v1/fine_tuning/jobs HTTP/1.1\r\nHost: x\r\n' +
      `Authorization: Bearer ${s.key}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${5 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n`);
    assert.match(got, /^HTTP\/1\.1 413 /, `first answer: ${got.slice(0, 80)}`);
    assert.doesNotMatch(got, /100 Continue/);
  });

  test('an upload over --max-upload is refused before "100 Continue"', async () => {
    const got = await raw(s.port, 'POST /v1/files HTTP/1.1\r\nHost: x\r\n' +
      `Authorization: Bearer ${s.key}\r\nContent-Type: multipart/form-data; boundary=b\r\n` +
      `Content-Length: ${300 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n`);
    assert.match(got, /^HTTP\/1\.1 413 /, `first answer: ${got.slice(0, 80)}`);
  });

  test('a body without a key is refused at its headers, before "100 Continue"', async () => {
    const got = await raw(s.port, 'POST /v1/fine_tuning/jobs HTTP/1.1\r\nHost: x\r\n' +
      'Content-Type: application/json\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n');
    assert.match(got, /^HTTP\/1\.1 401 /, `first answer: ${got.slice(0, 80)}`);
    assert.match(message(got), /Missing or invalid API key/);
  });

  test('a body without a key and without Expect is read, then answered 401', async () => {
    const body = '{"model":"tiny"}';
    const got = await raw(s.port, 'POST /v1/fine_tuning/jobs HTTP/1.1\r\nHost: x\r\n' +
      `Content-Type: application/json\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    assert.match(got, /^HTTP\/1\.1 401 /, `first answer: ${got.slice(0, 80)}`);
  });

  test('two Content-Length headers that differ are refused with 400', async () => {
    const got = await raw(s.port, 'POST /v1/fine_tuning/jobs HTTP/1.1\r\nHost: x\r\n' +
      `Authorization: Bearer ${s.key}\r\nContent-Type: application/json\r\n` +
      'Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}');
    assert.match(got, /^HTTP\/1\.1 400 /, `answer: ${got.slice(0, 80)}`);
    assert.match(message(got), /ambiguous.*Content-Length/);
    assert.doesNotMatch(got, /\/work|\/tmp|\.c:/, 'no server path in the message');
  });

  test('Content-Length with Transfer-Encoding is refused with 400', async () => {
    const got = await raw(s.port, 'POST /v1/fine_tuning/jobs HTTP/1.1\r\nHost: x\r\n' +
      `Authorization: Bearer ${s.key}\r\nContent-Type: application/json\r\n` +
      'Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n');
    assert.match(got, /^HTTP\/1\.1 400 /, `answer: ${got.slice(0, 80)}`);
    assert.match(message(got), /ambiguous/);
  });

  test('the same Content-Length twice is one length', async () => {
    const got = await raw(s.port, 'POST /v1/fine_tuning/estimates HTTP/1.1\r\nHost: x\r\n' +
      `Authorization: Bearer ${s.key}\r\nContent-Type: application/json\r\nConnection: close\r\n` +
      'Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}');
    assert.match(got, /^HTTP\/1\.1 400 /); // the estimate's own 400: a model is required
    assert.doesNotMatch(message(got), /ambiguous/);
  });

  test('a GET with a body on an open route is refused, not read', async () => {
    const got = await raw(s.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n' +
      'Expect: 100-continue\r\n\r\n');
    assert.match(got, /^HTTP\/1\.1 400 /, `answer: ${got.slice(0, 80)}`);
    assert.match(message(got), /takes no request body/);
  });
});
