// jobs_view.js - the Jobs tab: every job of the account, newest first.
//
// Data: GET /v1/fine_tuning/jobs, every page (api.listAllJobs), and the
// engine's pools from GET /v1/workers (a line above the list when serve
// runs an executor, docs/slurm.md). The app
// calls refresh() every few seconds; rows are keyed by job id and updated
// in place (only changed text is written, rows are moved only when the order
// changed), so polling neither flickers nor moves the scroll position.
// A job that validates shows its latest validation loss under its progress,
// from its newest events (GET /v1/fine_tuning/jobs/{id}/events): read at
// each refresh while it runs, once after it ended.
// Under the list, how the account's estimates held (GET
// /v1/estimates/calibration): a range a person can check is one they trust.

import { api, listAllJobs, PAGE_LIMIT, PAGE_MAX } from './api.js';
import { el, setText, show, progressBar, updateProgress, updateBadge } from './dom.js';
import {
  calibrationText,
  listPrice,
  messageText,
  methodLabel,
  poolsText,
  progressPercent,
  stepsTitle,
  timeLeftText,
} from './format.js';

const COLUMNS = ['Name', 'Training method', 'Status', 'Progress', 'Time left', 'Price'];

function makeRow(job) {
  const link = el('a', { href: `#/jobs/${encodeURIComponent(job.id)}`, class: 'job-link' });
  const model = el('span', { class: 'sub' });
  const method = el('td', { 'data-label': 'Training method' });
  const badge = el('span', { class: 'badge' });
  const message = el('span', { class: 'sub' });
  const bar = progressBar();
  const valid = el('span', { class: 'sub valid-loss', hidden: true });
  const timeLeft = el('td', { 'data-label': 'Time left', class: 'time-left' });
  const priceText = el('span', { class: 'price-text' });
  const priceNote = el('span', { class: 'sub' });
  const tr = el('tr', { 'data-id': job.id },
    el('th', { scope: 'row', 'data-label': 'Name' }, link, model),
    method,
    el('td', { 'data-label': 'Status', class: 'status' }, badge, message),
    el('td', { 'data-label': 'Progress' }, bar, valid),
    timeLeft,
    el('td', { 'data-label': 'Price', class: 'price' }, priceText, priceNote));
  tr.parts = { link, model, method, badge, message, bar, valid, timeLeft, priceText, priceNote };
  return tr;
}

function updateRow(tr, job) {
  const p = tr.parts;
  setText(p.link, job.name || job.id);
  setText(p.model, job.model || '');
  setText(p.method, methodLabel(job));
  updateBadge(p.badge, job.status);
  const message = messageText(job);
  setText(p.message, message);
  show(p.message, !!message);
  updateProgress(p.bar, progressPercent(job), stepsTitle(job.progress?.max_steps));
  setText(p.timeLeft, timeLeftText(job));
  const price = listPrice(job);
  setText(p.priceText, price.text);
  setText(p.priceNote, price.note);
}

// Whether a job measures a validation loss (a file, or a share held out).
export function validates(job) {
  return !!job.validation_file || Number(job.hyperparameters?.validation_split) > 0;
}

// The newest validation loss among a page of events (newest first): the
// whole set's at an epoch's end or a batch's, whichever came last; null if none.
export function latestValidLoss(events) {
  for (const e of events || []) {
    const d = e?.data || {};
    const v = typeof d.full_valid_loss === 'number' ? d.full_valid_loss : d.valid_loss;
    if (typeof v === 'number' && Number.isFinite(v)) return v;
  }
  return null;
}

async function showValidLoss(tr, job) {
  try {
    const page = await api(`/v1/fine_tuning/jobs/${encodeURIComponent(job.id)}/events?limit=50`);
    const v = latestValidLoss(page?.data);
    if (v === null) return;
    setText(tr.parts.valid, `validation loss ${v.toFixed(4)}`);
    show(tr.parts.valid, true);
    tr.validDone = job.status === 'succeeded' || job.status === 'failed' || job.status === 'cancelled';
  } catch {
    // the next refresh tries again
  }
}

export function jobsView() {
  let rows = new Map(); // job id -> <tr>
  let tbody;
  let empty;
  let note;
  let problem;
  let pools;
  let calibration;

  return {
    title: 'Jobs',

    mount(main) {
      tbody = el('tbody');
      empty = el('p', { class: 'empty', hidden: true },
        'No jobs yet. ', el('a', { href: '#/new' }, 'Start a new job'), '.');
      note = el('p', { class: 'muted', hidden: true },
        `Showing the newest ${PAGE_LIMIT * PAGE_MAX} jobs.`);
      problem = el('p', { class: 'problem', role: 'status', hidden: true });
      pools = el('p', { class: 'muted pools', hidden: true });
      calibration = el('p', { class: 'muted calibration', hidden: true });
      main.append(
        el('div', { class: 'head' },
          el('h1', { tabindex: '-1' }, 'Jobs'),
          el('a', { href: '#/new', class: 'button' }, 'New job')),
        problem,
        pools,
        el('div', { class: 'table-wrap' },
          el('table', { class: 'jobs' },
            el('caption', { class: 'visually-hidden' }, 'Jobs, newest first'),
            el('thead', {}, el('tr', {}, COLUMNS.map((c) => el('th', { scope: 'col' }, c)))),
            tbody)),
        empty,
        note,
        calibration);
    },

    async refresh() {
      let res;
      try {
        const [jobs, workers, cal] = await Promise.all([listAllJobs(), api('/v1/workers').catch(() => null),
          api('/v1/estimates/calibration').catch(() => null)]);
        res = jobs;
        const line = poolsText(workers?.pools);
        setText(pools, line);
        show(pools, !!line);
        const held = calibrationText(cal);
        setText(calibration, held);
        show(calibration, !!held);
      } catch (e) {
        setText(problem, `Could not refresh the jobs: ${e.message} Retrying.`);
        show(problem, true);
        return;
      }
      show(problem, false);
      const seen = new Set();
      let prev = null;
      for (const job of res.jobs) {
        if (!job || typeof job.id !== 'string' || seen.has(job.id)) continue;
        seen.add(job.id);
        let tr = rows.get(job.id);
        if (!tr) {
          tr = makeRow(job);
          rows.set(job.id, tr);
        }
        updateRow(tr, job);
        if (validates(job) && !tr.validDone && job.status !== 'queued') showValidLoss(tr, job);
        const want = prev ? prev.nextSibling : tbody.firstChild;
        if (want !== tr) tbody.insertBefore(tr, want);
        prev = tr;
      }
      for (const [id, tr] of rows) {
        if (!seen.has(id)) {
          tr.remove();
          rows.delete(id);
        }
      }
      show(empty, rows.size === 0);
      show(note, res.truncated);
    },

    unmount() {
      rows = new Map();
    },
  };
}
