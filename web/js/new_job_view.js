// new_job_view.js - the New job form: data set, model, precision, goal,
// "Estimate time and price", Start.
//
// Data: GET /v1/files (data sets already uploaded), POST /v1/files
// (multipart upload, validated line by line by the server: its message,
// e.g. `line 3 of train.jsonl: missing field "completion"`, is shown as is),
// GET /v1/models (base models), POST /v1/fine_tuning/estimates and
// POST /v1/fine_tuning/jobs with the same body.

import { advancedFields, advancedOf } from './advanced.js';
import { api } from './api.js';
import { el, setText, show } from './dom.js';
import { formatMoneyRange } from './format.js';

// Largest data set the page sends; the server has its own (configurable)
// cap and answers 413 above it.
const UPLOAD_MAX = 512 * 1024 * 1024;
const NAME_MAX = 200;

// "alallo-tiny (110K parameters)": the id and, when the catalog says, size.
export function modelLabel(m) {
  const n = m?.size?.parameters;
  if (typeof n !== 'number' || !(n > 0)) return m.id;
  const units = [[1e9, 'B'], [1e6, 'M'], [1e3, 'K']];
  const [div, unit] = units.find(([d]) => n >= d) || [1, ''];
  const v = n / div;
  return `${m.id} (${v >= 100 ? Math.round(v) : Number(v.toPrecision(2))}${unit} parameters)`;
}

function radios(name, legend, choices) {
  return el('fieldset', {},
    el('legend', {}, legend),
    choices.map(([value, label, hint], i) => {
      const id = `${name}-${value}`;
      return el('div', { class: 'choice' },
        el('input', { type: 'radio', name, id, value, checked: i === 0 }),
        el('label', { for: id }, label, hint ? el('span', { class: 'sub' }, hint) : null));
    }));
}

function numberField(id, label, min, max, step = '1') {
  return el('div', { class: 'field-row' },
    el('label', { for: id }, label),
    el('input', { id, name: id, type: 'number', min, max, step, inputmode: step === '1' ? 'numeric' : 'decimal', placeholder: 'auto' }));
}

export function newJobView() {
  const ui = {};
  let busy = false;

  // The request body shared by the estimate and the creation, or a reason
  // why it cannot be made yet.
  function body() {
    const f = ui.form.elements;
    if (!f.dataset.value) return { error: 'Choose or upload a data set first.' };
    if (!f.model.value) return { error: 'Choose a model first.' };
    const b = {
      model: f.model.value,
      training_file: f.dataset.value,
      precision: f.precision.value,
      goal: f.goal.value,
      method: { type: 'supervised' },
    };
    if (b.goal === 'finish_by') {
      // The deadline as the user's local date and time; the API takes Unix seconds.
      const at = f.finish_by.value ? new Date(f.finish_by.value).getTime() : NaN;
      if (!Number.isFinite(at)) return { error: 'Choose the date and time to finish by.' };
      b.finish_by = Math.floor(at / 1000);
    }
    const name = f.name.value.trim();
    if (name) b.name = name.slice(0, NAME_MAX);
    const hp = {};
    for (const k of ['n_epochs', 'batch_size']) {
      const v = f[k].value.trim();
      if (v === '') continue;
      const n = Number(v);
      if (!Number.isInteger(n) || n < Number(f[k].min) || n > Number(f[k].max)) {
        return { error: `${k === 'n_epochs' ? 'Epochs' : 'Batch size'} must be a whole number from ${f[k].min} to ${f[k].max}.` };
      }
      hp[k] = n;
    }
    const lr = f.learning_rate_multiplier.value.trim();
    if (lr !== '') {
      const x = Number(lr);
      if (!Number.isFinite(x) || x <= 0 || x > 10) {
        return { error: 'Learning-rate multiplier must be a number above 0 and at most 10.' };
      }
      hp.learning_rate_multiplier = x;
    }
    const adv = advancedOf(ui.form);
    if (adv.error) return { error: adv.error };
    Object.assign(hp, adv.hp);
    if (adv.method === 'dpo') {
      // DPO's hyper-parameters (beta among them) go in method.dpo only.
      b.method = { type: 'dpo', dpo: { hyperparameters: hp } };
    } else if (Object.keys(hp).length) {
      b.hyperparameters = hp;
    }
    return { body: b };
  }

  function fail(msg) {
    setText(ui.problem, msg);
    show(ui.problem, true);
  }

  async function loadFiles(selectId) {
    const res = await api('/v1/files');
    const files = (Array.isArray(res?.data) ? res.data : [])
      .filter((f) => !f.purpose || f.purpose === 'fine-tune')
      .sort((a, b) => (b.created_at || 0) - (a.created_at || 0));
    const sel = ui.form.elements.dataset;
    const keep = selectId || sel.value;
    sel.replaceChildren(
      el('option', { value: '' }, files.length ? 'Choose a data set' : 'No data set uploaded yet'),
      ...files.map((f) => el('option', { value: f.id }, `${f.filename || f.id} (${f.id})`)));
    if (keep && files.some((f) => f.id === keep)) sel.value = keep;
  }

  async function loadModels() {
    const res = await api('/v1/models');
    const models = (Array.isArray(res?.data) ? res.data : []).filter((m) => !m.kind || m.kind === 'base');
    const sel = ui.form.elements.model;
    sel.replaceChildren(...models.map((m) => el('option', { value: m.id }, modelLabel(m))));
    if (!models.length) sel.append(el('option', { value: '' }, 'No base model available'));
  }

  async function onUpload() {
    const input = ui.file;
    const file = input.files && input.files[0];
    if (!file) return;
    show(ui.problem, false);
    if (file.size > UPLOAD_MAX) {
      setText(ui.uploadStatus, '');
      fail(`${file.name} is larger than ${UPLOAD_MAX / 1024 / 1024} MiB.`);
      return;
    }
    setText(ui.uploadStatus, `Uploading ${file.name}…`);
    const form = new FormData();
    form.append('purpose', 'fine-tune');
    form.append('file', file, file.name);
    try {
      const f = await api('/v1/files', { form });
      await loadFiles(f.id);
      setText(ui.uploadStatus, `Uploaded ${f.filename || file.name}` +
        (typeof f.examples === 'number' ? `: ${f.examples} examples.` : '.'));
      input.value = '';
    } catch (e) {
      setText(ui.uploadStatus, '');
      fail(`Upload failed: ${e.message}`);
    }
  }

  async function onEstimate() {
    if (busy) return;
    show(ui.problem, false);
    const b = body();
    if (b.error) return fail(b.error);
    busy = true;
    ui.estimateBtn.disabled = true;
    ui.estimate.replaceChildren(el('p', {}, 'Estimating…'));
    try {
      const e = await api('/v1/fine_tuning/estimates', { json: b.body });
      const lines = [];
      if (e?.time?.text) lines.push(el('p', {}, el('strong', {}, 'Time: '), e.time.text));
      if (e?.price) {
        lines.push(el('p', {}, el('strong', {}, 'Price: '),
          formatMoneyRange(e.price.low, e.price.high, e.price.currency)));
      }
      if (e?.finish_by?.met && typeof e.finish_by.high_at === 'number') {
        lines.push(el('p', {}, el('strong', {}, 'Finish by: '),
          `${new Date(e.finish_by.deadline * 1000).toLocaleString()} (done by ${new Date(e.finish_by.high_at * 1000).toLocaleString()} at the latest)`));
      }
      if (typeof e?.message === 'string' && e.message) lines.push(el('p', { class: 'note' }, e.message));
      if (typeof e?.time_limit_message === 'string' && e.time_limit_message) {
        lines.push(el('p', { class: 'note' }, e.time_limit_message));
      }
      ui.estimate.replaceChildren(...lines);
    } catch (err) {
      ui.estimate.replaceChildren();
      fail(`No estimate: ${err.message}`);
    } finally {
      busy = false;
      ui.estimateBtn.disabled = false;
    }
  }

  async function onStart(ev) {
    ev.preventDefault();
    if (busy) return;
    show(ui.problem, false);
    const b = body();
    if (b.error) return fail(b.error);
    busy = true;
    ui.startBtn.disabled = true;
    try {
      await api('/v1/fine_tuning/jobs', { json: b.body });
      location.hash = '#/jobs';
    } catch (e) {
      fail(`The job was not created: ${e.message}`);
    } finally {
      busy = false;
      ui.startBtn.disabled = false;
    }
  }

  return {
    title: 'New job',

    mount(main) {
      ui.file = el('input', { id: 'upload', type: 'file', accept: '.jsonl,.json,application/jsonl,application/json,text/plain', onchange: onUpload });
      ui.uploadStatus = el('p', { class: 'sub', role: 'status' });
      ui.problem = el('p', { class: 'problem', role: 'alert', hidden: true });
      ui.estimate = el('div', { class: 'estimate', 'aria-live': 'polite' });
      ui.estimateBtn = el('button', { type: 'button', onclick: onEstimate }, 'Estimate time and price');
      ui.startBtn = el('button', { type: 'submit', class: 'primary' }, 'Start');
      ui.form = el('form', {
        class: 'new-job',
        onsubmit: onStart,
        // An estimate answers for the settings it was made with.
        onchange: () => ui.estimate.replaceChildren(),
        novalidate: true,
      },
        el('div', { class: 'field-row' },
          el('label', { for: 'name' }, 'Name ', el('span', { class: 'sub' }, '(optional)')),
          el('input', { id: 'name', name: 'name', type: 'text', maxlength: String(NAME_MAX), autocomplete: 'off' })),
        el('div', { class: 'field-row' },
          el('label', { for: 'dataset' }, 'Data set'),
          el('select', { id: 'dataset', name: 'dataset' }, el('option', { value: '' }, 'Loading…'))),
        el('div', { class: 'field-row' },
          el('label', { for: 'upload' }, 'Upload a data set ', el('span', { class: 'sub' }, '(JSONL: prompt and completion, or messages)')),
          ui.file, ui.uploadStatus),
        el('div', { class: 'field-row' },
          el('label', { for: 'model' }, 'Model'),
          el('select', { id: 'model', name: 'model' }, el('option', { value: '' }, 'Loading…'))),
        radios('precision', 'Training method: Supervised fine-tuning', [
          ['16-bit', '16-bit', 'LoRA on a 16-bit base'],
          ['4-bit', '4-bit', 'LoRA on a 4-bit (NF4) base: needs less memory'],
        ]),
        radios('goal', 'Goal', [
          ['lowest_cost', 'Lowest cost', 'the lowest price; usually quick for small jobs too'],
          ['fastest_finish', 'Fastest finish', 'finishes as soon as possible'],
          ['finish_by', 'Finish by', 'the lowest price that still finishes by your deadline'],
        ]),
        el('div', { class: 'field-row' },
          el('label', { for: 'finish_by' }, 'Finish by ', el('span', { class: 'sub' }, '(for the goal Finish by; your local time)')),
          el('input', { id: 'finish_by', name: 'finish_by', type: 'datetime-local' })),
        el('details', {},
          el('summary', {}, 'Hyper-parameters'),
          numberField('n_epochs', 'Epochs', '1', '50'),
          numberField('batch_size', 'Batch size', '1', '256'),
          numberField('learning_rate_multiplier', 'Learning-rate multiplier', '0.01', '10', 'any')),
        advancedFields(),
        ui.problem,
        el('div', { class: 'buttons' }, ui.estimateBtn, ui.startBtn),
        ui.estimate);
      main.append(el('div', { class: 'head' }, el('h1', { tabindex: '-1' }, 'New job')), ui.form);
      Promise.all([loadFiles(), loadModels()]).catch((e) => fail(`Could not load the form: ${e.message}`));
    },

    async refresh() {},

    unmount() {},
  };
}
