// format.js - how the dashboard writes job facts as text: money, ranges,
// the training method, the progress hover text, the price column.
//
// Pure functions of a job object as GET /v1/fine_tuning/jobs returns it
// (SPEC §4): no DOM, no network, so node's test runner can check them.
// Time texts ("40 min to 1.3 h") are never computed here: the server owns
// the help page's rules and sends time_left.text and estimate.time.text.

// Statuses in which the job can still change (the Jobs tab keeps polling).
const ACTIVE = new Set(['queued', 'running', 're-scheduling', 'cancelling']);
// Statuses from which POST .../cancel is accepted.
const CANCELLABLE = new Set(['queued', 'running', 're-scheduling']);

// True while the job has not ended.
export function isActive(status) {
  return ACTIVE.has(status);
}

// True when the Cancel button is offered.
export function canCancel(status) {
  return CANCELLABLE.has(status);
}

// A finite number from v, or null: API fields may be absent or null.
export function num(v) {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

// Money as people read it: "$0.42". Amounts under one cent but above zero
// keep three significant digits ("$0.00312") so that a cheap job does not
// read as free. Unknown currencies are written as "0.42 EUR".
export function formatMoney(amount, currency = 'USD') {
  const a = num(amount);
  if (a === null) return '—';
  const cur = (currency || 'USD').toUpperCase();
  let body = Math.abs(a).toFixed(2);
  if (a !== 0 && Math.abs(a) < 0.01) {
    const digits = Math.min(8, 2 - Math.floor(Math.log10(Math.abs(a))));
    body = Math.abs(a).toFixed(digits).replace(/0+$/, '');
  }
  const sign = a < 0 ? '-' : '';
  if (cur === 'USD') return `${sign}$${body}`;
  return `${sign}${body} ${cur}`;
}

// The job page's price line: what the user pays (charged less refunded)
// first, the ledger's two totals after it, each to the ledger's micro (cents
// at least) so that they add up: "$0.0021 (charged $0.06, refunded $0.0579)".
// The CLI's `jobs show` writes the same line (src/cli/cli_format.c).
export function priceLine(price, currency = 'USD') {
  const p = price || {};
  const charged = num(p.charged) ?? 0;
  const refunded = num(p.refunded) ?? 0;
  const cur = (currency || 'USD').toUpperCase();
  const exact = (a) => {
    const body = Math.abs(a).toFixed(6).replace(/(\.\d\d\d*?)0+$/, '$1');
    return cur === 'USD' ? `$${body}` : `${body} ${cur}`;
  };
  const net = Math.max(0, Math.round((charged - refunded) * 1e6) / 1e6);
  return `${exact(net)} (charged ${exact(charged)}, refunded ${exact(refunded)})`;
}

// A price range "A to B"; equal ends read once, like the time ranges.
export function formatMoneyRange(low, high, currency) {
  const a = formatMoney(low, currency);
  const b = formatMoney(high, currency);
  if (num(low) === null) return b;
  if (num(high) === null || a === b) return a;
  return `${a} to ${b}`;
}

// "Supervised fine-tuning, 4-bit": the method as SPEC §2 names it plus the
// precision. The server may send training_method as a string or leave it out.
export function methodLabel(job) {
  const method =
    typeof job.training_method === 'string' && job.training_method
      ? job.training_method
      : 'Supervised fine-tuning';
  return job.precision ? `${method}, ${job.precision}` : method;
}

// The progress bar's hover text: the total number of steps ("120 steps").
export function stepsTitle(maxSteps) {
  const n = num(maxSteps);
  if (n === null || n <= 0) return 'Number of steps not known yet';
  return n === 1 ? '1 step' : `${n} steps`;
}

// Progress percent 0..100. The server's percent wins; a succeeded job reads
// 100 whatever the counters say (the help page).
export function progressPercent(job) {
  if (job.status === 'succeeded') return 100;
  const p = job.progress || {};
  let pct = num(p.percent);
  if (pct === null) {
    const done = num(p.steps_done);
    const max = num(p.max_steps);
    pct = done !== null && max ? (100 * done) / max : 0;
  }
  return Math.max(0, Math.min(100, Math.floor(pct)));
}

// "40 / 120 steps" under the bar on the job page.
export function stepsText(job) {
  const p = job.progress || {};
  const done = num(p.steps_done) ?? 0;
  const max = num(p.max_steps);
  if (max === null || max <= 0) return `${done} steps done`;
  return `${job.status === 'succeeded' ? max : done} / ${max} steps`;
}

// The Jobs tab's time-left cell: the server's text while the job is active,
// a dash once it has ended or while nothing is known.
export function timeLeftText(job) {
  if (!isActive(job.status) || job.status === 'cancelling') return '—';
  const t = job.time_left;
  return t && typeof t.text === 'string' && t.text ? t.text : '—';
}

// What the job costs in the Jobs tab: { text, note }. An ended job shows what
// was paid (charged less refunded; failed jobs cost nothing); an active one
// shows its estimated price range.
export function listPrice(job) {
  const price = job.price || {};
  const currency = price.currency || job.estimate?.price?.currency || 'USD';
  if (job.status === 'failed') return { text: formatMoney(0, currency), note: 'not charged' };
  if (!isActive(job.status)) {
    const net = (num(price.charged) ?? 0) - (num(price.refunded) ?? 0);
    return { text: formatMoney(Math.max(0, net), currency), note: 'charged' };
  }
  const est = job.estimate?.price;
  if (est && (num(est.low) !== null || num(est.high) !== null)) {
    return { text: formatMoneyRange(est.low, est.high, est.currency || currency), note: 'estimate' };
  }
  return { text: '—', note: '' };
}

// The status line of the job page: "queued: Waiting for capacity".
export function statusLine(job) {
  return job.message ? `${job.status}: ${job.message}` : job.status || '';
}

// The job's message with, beside it, why the cluster (Slurm) holds its
// attempt pending: "Waiting for capacity (cluster: Waiting for free GPUs…)".
// The message itself stays the help page's words.
export function messageText(job) {
  const m = job.message || '';
  const r = typeof job.engine_reason === 'string' ? job.engine_reason : '';
  if (!r) return m;
  return m ? `${m} (cluster: ${r})` : `cluster: ${r}`;
}

// The engine's pools as one line of the Jobs tab, "" when there are none:
// "Pools: od (on-demand) 1 of 2 slots in use, 1 pending · sp (spot) 0 of 4".
export function poolsText(pools) {
  if (!Array.isArray(pools) || pools.length === 0) return '';
  const one = (p) => {
    const inUse = num(p.in_use) ?? 0;
    const pending = num(p.pending) ?? 0;
    let t = `${p.name} (${p.class}) ${inUse} of ${num(p.slots) ?? 0} slots in use`;
    if (pending > 0) t += `, ${pending} pending`;
    return t;
  };
  return `Pools: ${pools.map(one).join(' · ')}`;
}

// Seconds since the epoch as a local date and time.
export function formatWhen(seconds) {
  const s = num(seconds);
  if (s === null || s <= 0) return '—';
  return new Date(s * 1000).toLocaleString();
}

// The calibration panel's line (GET /v1/estimates/calibration): how often
// the account's finished jobs ended inside the ranges they were shown, and
// how wide those ranges were; '' until a job has finished with a range.
export function calibrationText(c) {
  const n = Number(c?.jobs);
  if (!Number.isInteger(n) || n <= 0) return '';
  const share = (s) => `${Math.round((100 * (Number(s?.inside) || 0)) / n)}%`;
  const jobs = n === 1 ? 'your last finished job' : `your last ${n} finished jobs`;
  let text = `How estimates held, over ${jobs}: time inside the range ${c.time?.inside ?? 0} of ${n} (${share(c.time)}), ` +
    `price inside the range ${c.price?.inside ?? 0} of ${n} (${share(c.price)}).`;
  const w = Number(c.time?.median_width);
  if (Number.isFinite(w) && w >= 1) text += ` Time ranges were typically ${w.toFixed(1)}× wide.`;
  return text;
}
