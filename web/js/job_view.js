// job_view.js - a job's page, /#/jobs/{id}.
//
// Data, refreshed every few seconds while the job can still change:
//   GET /v1/fine_tuning/jobs/{id}               status, message, progress,
//                                               time left, price, attempts
//   GET /v1/fine_tuning/jobs/{id}/log           training log (text)
//   GET /v1/fine_tuning/jobs/{id}/checkpoints   checkpoints
// Actions: POST .../cancel, and POST /v1/chat/completions for "Try it", a chat
// with the fine-tuned model (the conversation so far is sent each time),
// streamed: the answer grows on the page, and its time to first token and
// tokens per second, measured here, are shown under it.
// Once the job has ended the page reads everything one last time and stops.

import { api, apiStream, saveBlob, pathId, ApiError } from './api.js';
import { cancelCost } from './cancel.js';
import { renderLossChart } from './chart.js';
import { el, setText, setAttr, show, progressBar, updateProgress, updateBadge } from './dom.js';
import {
  canCancel,
  formatMoneyRange,
  formatWhen,
  isActive,
  messageText,
  methodLabel,
  num,
  priceLine,
  progressPercent,
  stepsText,
  stepsTitle,
} from './format.js';
import { parseLoss } from './loss.js';
import { gradeText, groupSamples } from './samples.js';
import { answerSpeed, speedText } from './stream_speed.js';

// The help page's sentence for a job whose training has not started.
export const EMPTY_LOG = 'No log yet. It appears once training starts.';
// Lines of log kept on the page; the newest ones, at the bottom.
const LOG_MAX_LINES = 5000;
// Longest message sent from "Try it", in characters.
const PROMPT_MAX = 4000;
// Longest wait for a whole "Try it" answer: the server's completion limit.
const TRY_TIMEOUT_MS = 120000;
// A model export runs `alallo export` on the server; the server gives it up
// to 10 minutes, the page waits as long.
const EXPORT_TIMEOUT_MS = 600000;
// The formats of GET /v1/models/{model}/export, as offered for download.
const EXPORTS = [
  ['hf', 'Hugging Face folder', '-hf.tar'],
  ['peft', 'PEFT LoRA adapter', '-peft.tar'],
  ['gguf', 'GGUF for llama.cpp', '.gguf'],
];

const GOALS = { lowest_cost: 'Lowest cost', fastest_finish: 'Fastest finish' };

function section(title, ...children) {
  const id = `h-${title.toLowerCase().replace(/[^a-z]+/g, '-')}`;
  return el('section', { 'aria-labelledby': id, class: 'card' }, el('h2', { id }, title), ...children);
}

function field(label, ...value) {
  return el('div', { class: 'field' }, el('dt', {}, label), el('dd', {}, ...value));
}

function blobExtension(type) {
  if (/gzip/.test(type)) return '.tar.gz';
  if (/tar/.test(type)) return '.tar';
  if (/zip/.test(type)) return '.zip';
  return '';
}

// A file name made from a job's name: letters, digits, dot, dash, underscore.
function fileStem(job) {
  return String(job.name || job.id).replace(/[^A-Za-z0-9._-]+/g, '-').slice(0, 80) || 'model';
}

// A button that fetches `path` with the key and saves it; its progress and
// failure are written to `status`.
function downloadButton(label, accessibleName, path, filename, status, timeoutMs) {
  return el('button', {
    type: 'button',
    'aria-label': accessibleName,
    onclick: async (ev) => {
      const btn = ev.currentTarget;
      btn.disabled = true;
      setText(status, `Preparing the download (${label})…`);
      try {
        const blob = await api(path, { as: 'blob', timeoutMs });
        saveBlob(blob, typeof filename === 'function' ? filename(blob) : filename);
        setText(status, '');
      } catch (e) {
        setText(status, `Download failed: ${e.message}`);
      } finally {
        btn.disabled = false;
      }
    },
  }, label);
}
export function jobView(jobId) {
  const base = `/v1/fine_tuning/jobs/${pathId(jobId)}`;
  let job = null;
  let ended = false; // the job has ended and was read once after that
  let gone = false; // 404: nothing more to poll
  let logText = null;
  let ckptKey = '';
  let attemptsKey = '';
  const ui = {};

  function buildSummary() {
    ui.badge = el('span', { class: 'badge' });
    ui.message = el('span', { class: 'message' });
    ui.bar = progressBar();
    ui.steps = el('span', { class: 'sub' });
    ui.timeLeft = el('span', { class: 'time-left' });
    ui.basis = el('span', { class: 'sub' });
    ui.priceEst = el('span');
    ui.paid = el('span');
    ui.model = el('span');
    ui.method = el('span');
    ui.goal = el('span');
    ui.ftModel = el('code');
    ui.created = el('span');
    return el('dl', { class: 'summary' },
      field('Status', ui.badge, ' ', ui.message),
      field('Progress', ui.bar, ui.steps),
      field('Time left (estimate)', ui.timeLeft, ui.basis),
      field('Price',
        el('span', { class: 'price-lines' },
          el('span', {}, 'Estimate: ', ui.priceEst),
          el('span', {}, 'Paid: ', ui.paid))),
      field('Base model', ui.model),
      field('Training method', ui.method),
      field('Goal', ui.goal),
      field('Fine-tuned model', ui.ftModel),
      field('Created', ui.created));
  }

  function buildCancel() {
    ui.cancelCost = el('p', { id: 'cancel-cost', class: 'cancel-cost' });
    ui.cancelBtn = el('button', {
      type: 'button',
      class: 'danger',
      'aria-describedby': 'cancel-cost',
      onclick: onCancel,
    }, 'Cancel job');
    ui.cancelResult = el('p', { class: 'problem', role: 'alert', hidden: true });
    ui.cancelBox = el('div', { class: 'cancel-box', hidden: true }, ui.cancelBtn, ui.cancelCost);
    return el('div', { class: 'actions' }, ui.cancelBox, ui.cancelResult);
  }

  function buildTry() {
    ui.chat = [];
    ui.prompt = el('textarea', { id: 'try-prompt', rows: '3', maxlength: String(PROMPT_MAX), required: true });
    ui.maxTokens = el('input', { id: 'try-max', type: 'number', min: '1', max: '512', value: '64' });
    ui.tryBtn = el('button', { type: 'submit' }, 'Send');
    ui.newChat = el('button', { type: 'button', onclick: onNewChat }, 'New chat');
    ui.tryLog = el('ol', { class: 'try-chat', 'aria-live': 'polite', 'aria-label': 'Conversation', hidden: true });
    ui.tryErr = el('p', { class: 'problem', role: 'alert', hidden: true });
    ui.tryForm = el('form', { class: 'try', onsubmit: onTry, hidden: true },
      ui.tryLog,
      el('label', { for: 'try-prompt' }, 'Message'), ui.prompt,
      el('div', { class: 'row' },
        el('label', { for: 'try-max' }, 'Max tokens'), ui.maxTokens, ui.tryBtn, ui.newChat),
      ui.tryErr);
    ui.tryNote = el('p', { class: 'muted' }, 'Try it becomes available when the job has a fine-tuned model.');
    return section('Try it', ui.tryNote, ui.tryForm);
  }

  // One turn of the conversation on the page.
  function addTurn(role, text) {
    const item = el('li', { class: `turn ${role}` },
      el('span', { class: 'who' }, role === 'user' ? 'You' : 'Model'),
      el('pre', { class: 'try-out', tabindex: '0', 'aria-label': role === 'user' ? 'Your message' : 'Model answer' }, text));
    ui.tryLog.append(item);
    show(ui.tryLog, true);
    return item;
  }

  function onNewChat() {
    ui.chat = [];
    ui.tryLog.replaceChildren();
    show(ui.tryLog, false);
    show(ui.tryErr, false);
  }

  // The assistant's text of an answer: its content, or its tool calls.
  function answerText(msg) {
    if (!msg) return '(no answer)';
    const calls = (msg.tool_calls || []).map((c) => `${c.function?.name}(${c.function?.arguments})`);
    const text = [msg.content || '', ...calls].filter((x) => x !== '').join('\n');
    return text === '' ? '(an empty answer)' : text;
  }

  // Downloads of the fine-tuned model, one per export format.
  function buildDownloads() {
    ui.dlStatus = el('p', { class: 'sub', role: 'status' });
    ui.dlButtons = el('div', { class: 'buttons' });
    ui.dlNote = el('p', { class: 'muted' }, 'Downloads become available when the job has a fine-tuned model.');
    return section('Download the model', ui.dlNote, ui.dlButtons, ui.dlStatus);
  }

  function updateDownloads() {
    const model = job.fine_tuned_model || '';
    if (ui.dlButtons.dataset.model === model) return;
    ui.dlButtons.dataset.model = model;
    show(ui.dlNote, !model);
    ui.dlButtons.replaceChildren(...(model ? EXPORTS.map(([format, label, ext]) =>
      downloadButton(label, `Download the fine-tuned model as ${label}`,
        `/v1/models/${pathId(model)}/export?format=${format}`,
        `${fileStem(job)}${ext}`, ui.dlStatus, EXPORT_TIMEOUT_MS)) : []));
  }

  function buildLog() {
    ui.log = el('pre', { class: 'log', tabindex: '0', 'aria-label': 'Training log, newest lines at the bottom' });
    ui.logNote = el('p', { class: 'muted', hidden: true });
    return section('Training log', ui.logNote, ui.log);
  }

  function buildTable(title, heads, key) {
    const body = el('tbody');
    const none = el('p', { class: 'muted' }, title === 'Checkpoints' ? 'No checkpoints yet.' : 'No attempts yet.');
    const table = el('table', { class: 'small', hidden: true },
      el('thead', {}, el('tr', {}, heads.map((h) => el('th', { scope: 'col' }, h)))), body);
    ui[key] = { body, none, table };
    return section(title, none, el('div', { class: 'table-wrap' }, table));
  }

  function updateSummary() {
    const j = job;
    setText(ui.title, j.name || j.id);
    setText(ui.id, j.id);
    document.title = `${j.name || j.id} · alallo`;
    updateBadge(ui.badge, j.status);
    setText(ui.message, messageText(j));
    updateProgress(ui.bar, progressPercent(j), stepsTitle(j.progress?.max_steps));
    setText(ui.steps, stepsText(j));
    const tl = j.time_left;
    if (isActive(j.status) && j.status !== 'cancelling' && tl && tl.text) {
      setText(ui.timeLeft, tl.text);
      setText(ui.basis, tl.basis === 'pace' ? 'from the job\'s pace' : 'from the estimate');
    } else {
      setText(ui.timeLeft, '—');
      setText(ui.basis, '');
    }
    const est = j.estimate?.price || {};
    const price = j.price || {};
    const cur = price.currency || est.currency || 'USD';
    setText(ui.priceEst, formatMoneyRange(est.low, est.high, est.currency || cur));
    setText(ui.paid, priceLine(price, cur));
    setText(ui.model, j.model || '—');
    setText(ui.method, methodLabel(j));
    setText(ui.goal, j.goal === 'finish_by' && typeof j.finish_by === 'number'
      ? `Finish by ${new Date(j.finish_by * 1000).toLocaleString()}`
      : GOALS[j.goal] || j.goal || '—');
    setText(ui.ftModel, j.fine_tuned_model || '—');
    setText(ui.created, formatWhen(j.created_at));

    const cc = canCancel(j.status) ? cancelCost(j, Date.now() / 1000) : null;
    show(ui.cancelBox, !!cc);
    if (cc) setText(ui.cancelCost, cc.text);

    const canTry = typeof j.fine_tuned_model === 'string' && j.fine_tuned_model !== '';
    show(ui.tryForm, canTry);
    show(ui.tryNote, !canTry);
  }

  function updateLog(text) {
    if (text === logText) return;
    logText = text;
    const box = ui.log;
    const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
    const body = text.replace(/\s+$/, '');
    if (body === '') {
      setText(box, EMPTY_LOG);
      show(ui.logNote, false);
    } else {
      const lines = body.split('\n');
      const cut = lines.length > LOG_MAX_LINES;
      setText(box, cut ? lines.slice(-LOG_MAX_LINES).join('\n') : body);
      setText(ui.logNote, cut ? `Showing the last ${LOG_MAX_LINES} lines.` : '');
      show(ui.logNote, cut);
    }
    if (atBottom || !box.dataset.seen) box.scrollTop = box.scrollHeight;
    box.dataset.seen = '1';
    const loss = parseLoss(body);
    renderLossChart(ui.chart, loss.points, loss.maxSteps || job?.progress?.max_steps, loss);
  }

  function updateAttempts() {
    const list = Array.isArray(job.attempts) ? job.attempts : [];
    const key = JSON.stringify(list);
    if (key === attemptsKey) return;
    attemptsKey = key;
    const t = ui.attempts;
    t.body.replaceChildren(...list.map((a) => {
      const from = num(a.start_step) ?? 0;
      const to = num(a.end_step);
      return el('tr', {},
        el('td', {}, el('code', {}, a.id || '')),
        el('td', {}, a.worker || '—'),
        el('td', {}, a.status || '—'),
        el('td', {}, to === null ? `from ${from}` : `${from} to ${to}`),
        el('td', {}, a.reason || '—'));
    }));
    show(t.table, list.length > 0);
    show(t.none, list.length === 0);
  }

  // An answer as the table shows it; an empty one (the model ended its
  // answer at once) says so rather than leaving a blank cell.
  function sampleAnswer(text) {
    return text === '' ? el('span', { class: 'muted' }, '(empty answer)') : el('code', {}, text);
  }

  // Sample answers: a table per prompt, the base model's answer first; a
  // Score column where a grader scored them (reinforcement fine-tuning).
  function updateSamples(events) {
    const groups = groupSamples(events);
    const key = JSON.stringify(groups);
    if (key === ui.samplesKey) return;
    ui.samplesKey = key;
    ui.samples.replaceChildren(...groups.map((g) => {
      const graded = g.baseGrade !== null || g.answers.some((a) => a.grade);
      const row = (cls, who, answer, grade) => el('tr', cls ? { class: cls } : {}, el('td', {}, who),
        el('td', {}, sampleAnswer(answer)), graded ? [el('td', {}, gradeText(grade))] : []);
      return el('table', { class: 'samples' },
        el('caption', {}, 'Prompt: ', el('code', {}, g.prompt)),
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Model'), el('th', { scope: 'col' }, 'Answer'),
          graded ? [el('th', { scope: 'col' }, 'Score')] : [])),
        el('tbody', {},
          g.base === null ? [] : [row('base', 'Base model', g.base, g.baseGrade)],
          g.answers.map((a) => row(null, `Step ${a.step}`, a.answer, a.grade))));
    }));
    show(ui.samplesNone, groups.length === 0);
  }

  function updateCheckpoints(list) {
    const key = JSON.stringify(list);
    if (key === ckptKey) return;
    ckptKey = key;
    const t = ui.checkpoints;
    setText(t.none, 'No checkpoints yet.');
    t.body.replaceChildren(...list.map((c) => {
      const step = num(c.step_number) ?? num(c.step) ?? 0;
      const loss = num(c.metrics?.train_loss) ?? num(c.train_loss);
      const url = typeof c.download_url === 'string' && c.download_url.startsWith('/') ? c.download_url : null;
      let action = el('span', { class: 'muted' }, 'No download offered');
      if (url) {
        const status = el('span', { class: 'sub', role: 'status' });
        action = el('span', {},
          downloadButton('Download', `Download checkpoint at step ${step}`, url,
            (blob) => `${fileStem(job)}-step-${step}${blobExtension(blob.type)}`, status, EXPORT_TIMEOUT_MS),
          status);
      }
      return el('tr', {},
        el('td', {}, String(step)),
        el('td', {}, loss === null ? '—' : loss.toFixed(4)),
        el('td', {}, c.fine_tuned_model_checkpoint ? el('code', {}, c.fine_tuned_model_checkpoint) : '—'),
        el('td', {}, action));
    }));
    show(t.table, list.length > 0);
    show(t.none, list.length === 0);
  }

  async function onCancel() {
    ui.cancelBtn.disabled = true;
    show(ui.cancelResult, false);
    try {
      job = await api(`${base}/cancel`, { method: 'POST', json: {} });
      updateSummary();
    } catch (e) {
      setText(ui.cancelResult, `Could not cancel: ${e.message}`);
      show(ui.cancelResult, true);
    } finally {
      ui.cancelBtn.disabled = false;
    }
  }

  async function onTry(ev) {
    ev.preventDefault();
    const content = ui.prompt.value;
    if (!content.trim()) return;
    const maxTokens = Math.max(1, Math.min(512, Number(ui.maxTokens.value) || 64));
    ui.tryBtn.disabled = true;
    show(ui.tryErr, false);
    const messages = [...ui.chat, { role: 'user', content }];
    addTurn('user', content);
    const pending = addTurn('assistant', 'Generating…');
    // Streamed, so that the answer shows as it grows and its speed is
    // measured here, as the user meets it (stream_speed.js).
    const out = pending.querySelector('pre');
    let answer = '';
    let tokens = null;
    let firstAt = null;
    let lastAt = null;
    const sentAt = performance.now();
    try {
      await apiStream('/v1/chat/completions', {
        json: {
          model: job.fine_tuned_model, messages, max_tokens: maxTokens, temperature: 0,
          stream: true, stream_options: { include_usage: true },
        },
        timeoutMs: TRY_TIMEOUT_MS,
      }, (chunk) => {
        const piece = chunk?.choices?.[0]?.delta?.content;
        if (typeof piece === 'string' && piece !== '') {
          lastAt = performance.now();
          firstAt ??= lastAt;
          answer += piece;
          setText(out, answer);
        }
        if (Number.isInteger(chunk?.usage?.completion_tokens)) tokens = chunk.usage.completion_tokens;
      });
      setText(out, answerText({ content: answer }));
      const speed = answerSpeed({ sentAt, firstAt, lastAt, tokens });
      pending.append(el('p', {
        class: 'try-speed muted', 'aria-label': 'Answer speed',
        'data-ttft-ms': String(speed.ttftMs ?? ''), 'data-tokens': String(speed.tokens ?? ''),
        'data-tokens-per-second': String(speed.tokensPerSecond ?? ''),
        'data-together': String(speed.together),
      }, speedText(speed)));
      ui.chat = [...messages, { role: 'assistant', content: answer }];
      ui.prompt.value = '';
    } catch (e) {
      pending.remove();
      ui.tryLog.lastChild?.remove();
      show(ui.tryLog, ui.tryLog.childElementCount > 0);
      setText(ui.tryErr, `Could not generate: ${e.message}`);
      show(ui.tryErr, true);
    } finally {
      ui.tryBtn.disabled = false;
    }
  }

  return {
    title: 'Job',

    mount(main) {
      ui.title = el('h1', { tabindex: '-1' }, jobId);
      ui.id = el('p', { class: 'sub mono' });
      ui.problem = el('p', { class: 'problem', role: 'status', hidden: true });
      ui.chart = el('div', { class: 'chart-box' });
      ui.samples = el('div', { class: 'samples-box' });
      ui.samplesNone = el('p', { class: 'muted' },
        'Sample answers appear when training starts, for jobs with validation data or sample prompts of their own.');
      ui.page = el('div', { class: 'job', hidden: true },
        section('Summary', buildSummary(), buildCancel()),
        section('Loss', ui.chart),
        section('Sample answers', ui.samplesNone, ui.samples),
        buildLog(),
        buildTable('Checkpoints', ['Step', 'Training loss', 'Checkpoint', 'Download'], 'checkpoints'),
        buildTable('Attempts', ['Attempt', 'Worker', 'Status', 'Steps', 'Why it ended or moved'], 'attempts'),
        buildTry(),
        buildDownloads());
      main.append(
        el('p', { class: 'back' }, el('a', { href: '#/jobs' }, '← All jobs')),
        el('div', { class: 'head' }, el('div', {}, ui.title, ui.id)),
        ui.problem,
        ui.page);
    },

    async refresh() {
      if (gone || ended) return;
      try {
        job = await api(base);
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) {
          gone = true;
          show(ui.page, false);
          setText(ui.problem, 'There is no such job in this account.');
        } else {
          setText(ui.problem, `Could not refresh the job: ${e.message} Retrying.`);
        }
        show(ui.problem, true);
        return;
      }
      show(ui.problem, false);
      show(ui.page, true);
      updateSummary();
      updateAttempts();
      updateDownloads();
      // The log and the checkpoints are read after the job, so that a job
      // seen as ended has its final log and checkpoints on the page.
      const [log, ckpts, events] = await Promise.allSettled([
        api(`${base}/log`, { as: 'text' }),
        api(`${base}/checkpoints?limit=100`),
        api(`${base}/events?limit=100`),
      ]);
      if (events.status === 'fulfilled') updateSamples(events.value?.data);
      if (log.status === 'fulfilled') {
        if (ui.logNote.dataset.err) {
          delete ui.logNote.dataset.err;
          show(ui.logNote, false);
          logText = null;
        }
        updateLog(typeof log.value === 'string' ? log.value : '');
      } else {
        setText(ui.logNote, `Could not read the log: ${log.reason.message}`);
        ui.logNote.dataset.err = '1';
        show(ui.logNote, true);
      }
      if (ckpts.status === 'fulfilled') {
        updateCheckpoints(Array.isArray(ckpts.value?.data) ? ckpts.value.data : []);
      } else {
        ckptKey = '';
        setText(ui.checkpoints.none, `Could not read the checkpoints: ${ckpts.reason.message}`);
      }
      if (!isActive(job.status) && log.status === 'fulfilled' && ckpts.status === 'fulfilled') ended = true;
    },

    unmount() {},
  };
}
