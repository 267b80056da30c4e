// advanced.js - the New job form's Advanced settings: the training method
// (supervised or DPO, with beta), the context (max_seq_len) and packing,
// the LoRA adapter (rank, alpha, dropout, target modules), the learning-rate
// schedule, warm-up, weight decay and train_on_inputs (docs/api.md,
// "Hyper-parameters"). Empty fields are left to the server's defaults;
// the server checks every value again and names the field it refuses.

import { el } from './dom.js';

export const TARGET_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

// [field, label, min, max, whole number]
const NUMBERS = [
  ['max_seq_len', 'Context (max_seq_len)', 32, 131072, true],
  ['lora_rank', 'LoRA rank', 1, 256, true],
  ['lora_alpha', 'LoRA alpha', 0, 1024, false],
  ['lora_dropout', 'LoRA dropout', 0, 1, false],
  ['warmup_ratio', 'Warm-up (share of the steps)', 0, 0.5, false],
  ['weight_decay', 'Weight decay', 0, 1, false],
  ['beta', 'DPO beta', 0, 10, false],
];

// Reads the settings from plain values (v: field -> string or boolean;
// targets: the checked module names) into { method, hp } or { error }.
// Pure: the browser test and node's both call it.
export function readAdvanced(v, targets) {
  const method = v.method === 'dpo' ? 'dpo' : 'supervised';
  const hp = {};
  for (const [k, label, min, max, whole] of NUMBERS) {
    const s = String(v[k] ?? '').trim();
    if (s === '') continue;
    if (k === 'beta' && method !== 'dpo') continue;
    const x = Number(s);
    const strictMin = k === 'lora_alpha' || k === 'beta';
    const strictMax = k === 'lora_dropout'; // 1 would drop every input
    if (!Number.isFinite(x) || (whole && !Number.isInteger(x)) || (strictMax ? x >= max : x > max) ||
        (strictMin ? x <= min : x < min)) {
      const lower = strictMin ? 'above' : strictMax ? 'at least' : 'from';
      const upper = strictMax ? 'and below' : strictMin ? 'and at most' : 'to';
      return { error: `${label} must be ${whole ? 'a whole number' : 'a number'} ${lower} ${min} ${upper} ${max}.` };
    }
    hp[k] = x;
  }
  if (v.packing === false) hp.packing = false;
  if (v.train_on_inputs === true) hp.train_on_inputs = true;
  if (v.lr_scheduler && v.lr_scheduler !== 'cosine') hp.lr_scheduler = v.lr_scheduler;
  if (Array.isArray(targets)) {
    if (targets.length === 0) return { error: 'Choose at least one LoRA target module.' };
    if (targets.length < TARGET_MODULES.length) hp.lora_target_modules = targets;
  }
  return { method, hp };
}

function numberField(id, label, min, max, whole) {
  return el('div', { class: 'field-row' },
    el('label', { for: id }, label),
    el('input', { id, name: id, type: 'number', min: String(min), max: String(max), step: whole ? '1' : 'any', inputmode: whole ? 'numeric' : 'decimal', placeholder: 'auto' }));
}

function checkbox(id, label, checked) {
  return el('div', { class: 'choice' },
    el('input', { type: 'checkbox', id, name: id, checked }),
    el('label', { for: id }, label));
}

// The Advanced section (a <details>) of the form.
export function advancedFields() {
  return el('details', { class: 'advanced' },
    el('summary', {}, 'Advanced'),
    el('div', { class: 'field-row' },
      el('label', { for: 'method' }, 'Training method'),
      el('select', { id: 'method', name: 'method' },
        el('option', { value: 'supervised' }, 'Supervised fine-tuning'),
        el('option', { value: 'dpo' }, 'DPO (preference pairs)'))),
    ...NUMBERS.map(([k, label, min, max, whole]) => numberField(k, label, min, max, whole)),
    checkbox('packing', 'Packing: several short examples share a row', true),
    checkbox('train_on_inputs', 'Train on inputs (loss on prompts too)', false),
    el('div', { class: 'field-row' },
      el('label', { for: 'lr_scheduler' }, 'Learning-rate schedule'),
      el('select', { id: 'lr_scheduler', name: 'lr_scheduler' },
        ['cosine', 'linear', 'constant'].map((s) => el('option', { value: s }, s)))),
    el('fieldset', {},
      el('legend', {}, 'LoRA target modules'),
      TARGET_MODULES.map((m) => checkbox(`target-${m}`, m, true))));
}

// Reads the section from the form's elements.
export function advancedOf(form) {
  const f = form.elements;
  const v = { method: f.method.value, packing: f.packing.checked, train_on_inputs: f.train_on_inputs.checked, lr_scheduler: f.lr_scheduler.value };
  for (const [k] of NUMBERS) v[k] = f[k].value;
  const targets = TARGET_MODULES.filter((m) => f[`target-${m}`].checked);
  return readAdvanced(v, targets);
}
