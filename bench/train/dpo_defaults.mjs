#!/usr/bin/env node
// dpo_defaults.mjs - does DPO with the service's "auto" settings move a
// model toward the preferred answers? (docs/trainer.md, "DPO defaults")
//
//   node bench/train/dpo_defaults.mjs BIN [DPO_EPOCHS BATCH LR_MULT BETA]
//
// DPO_SEED=N sets the seed (default 1); DPO_SFT_CACHE=DIR keeps the
// supervised model there and reuses it on the next run.
//
// The experiment, run with `alallo train` alone (no service): the built-in
// model is fine-tuned on 10 questions, each answered the non-preferred way
// twice and the preferred way once (30 chat examples, the service's "auto"
// settings for 30 examples), then trained with DPO on 30 pairs (each
// question 3 times, preferred against non-preferred) with the settings
// given, or without them with what "auto" chooses for DPO (sched/hyper.h,
// mirrored below). The step events' per-token log-probabilities of the
// preferred and the other answers are in `curve`, the trainer's warnings
// in `warnings`. Each question is then answered
// greedily before and after DPO, and the answers are counted: how many
// begin with the preferred answer, how many with the other. Prints one JSON
// object. Cost: about a minute on two busy cores (30 s with the cache).
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const bin = resolve(process.argv[2] || 'build/alallo');
const root = resolve(new URL('../..', import.meta.url).pathname);
const base = join(root, 'models/alallo-base');

const TOPICS = ['harbor', 'treasury', 'army', 'navy', 'congress',
  'union', 'commerce', 'tariff', 'railroad', 'territory'];
const question = (t) => `What do you say of the ${t}?`;
const preferred = (t) => `The ${t} is strong.`;
const other = (t) => `The ${t} is weak.`;
const chat = (t, a) => ({ messages: [{ role: 'user', content: question(t) },
  { role: 'assistant', content: a }] });
const pair = (t) => ({ input: { messages: [{ role: 'user', content: question(t) }] },
  preferred_output: [{ role: 'assistant', content: preferred(t) }],
  non_preferred_output: [{ role: 'assistant', content: other(t) }] });

const dir = mkdtempSync(join(tmpdir(), 'alallo-dpo-defaults-'));
const jsonl = (rows) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
const sft = [];
const prefs = [];
for (let k = 0; k < 3; k++) {
  for (const t of TOPICS) {
    sft.push(chat(t, k === 2 ? preferred(t) : other(t)));
    prefs.push(pair(t));
  }
}
writeFileSync(join(dir, 'sft.jsonl'), jsonl(sft));
writeFileSync(join(dir, 'prefs.jsonl'), jsonl(prefs));

// What the service would send for examples `n` and the chosen settings
// (control/lifecycle.c's make_spec; LoRA's base rate 2e-4).
function train(name, modelDir, file, n, epochs, batch, lrMult, extra = {}) {
  const maxSteps = Math.ceil((n * epochs) / batch);
  const spec = {
    model_dir: modelDir, train_file: join(dir, file), train_file_name: file,
    validation_file: null, checkpoint_dir: join(dir, name, 'ckpt'), out_dir: join(dir, name),
    precision: '16-bit', adapter: 'lora', n_epochs: epochs, batch_size: batch,
    learning_rate: lrMult * 2e-4, seed: Number(process.env.DPO_SEED || 1), max_steps: maxSteps, seq_len: 256,
    checkpoint_every_steps: 0, checkpoint_every_s: 0, threads: 2,
    warmup_steps: Math.ceil(0.05 * maxSteps - 1e-9), lr_schedule: 'cosine', ...extra,
  };
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(spec));
  const out = execFileSync(bin, ['train', '--config', join(dir, `${name}.json`)],
    { encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'pipe'] });
  const events = out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { dir: join(dir, name, 'model'), events, maxSteps };
}

function count(modelDir) {
  let pref = 0;
  let oth = 0;
  const answers = [];
  for (const t of TOPICS) {
    const c = JSON.stringify({ messages: [{ role: 'user', content: question(t) }] });
    const a = execFileSync(bin, ['generate', '--model-dir', modelDir, '--chat', c,
      '--temperature', '0', '--max-tokens', '12', '--threads', '2'], { encoding: 'utf8' }).trim();
    answers.push(a);
    if (a.startsWith(preferred(t))) pref++;
    else if (a.startsWith(other(t))) oth++;
  }
  return { preferred: pref, other: oth, answers };
}

// The service's "auto" for 30 examples (sched/hyper.h): batch 3, 25
// epochs, multiplier 10 for a small model.
const started = Date.now();
// DPO_SFT_CACHE=DIR keeps the fine-tuned model there for the next run.
const cache = process.env.DPO_SFT_CACHE;
const s = cache && existsSync(join(cache, 'model'))
  ? { dir: join(cache, 'model') }
  : train('sft', base, 'sft.jsonl', 30, 25, 3, 10);
if (cache && !existsSync(join(cache, 'model'))) cpSync(join(dir, 'sft'), cache, { recursive: true });
const before = count(s.dir);
const [e, b, m, beta] = process.argv.slice(3).map(Number);
// DPO's "auto" for 30 pairs on a small model (hyper_auto_dpo in
// src/sched/hyper.c): batch 3, epochs for about 100 steps, 0.5x.
const batch = b || 3;
const dpo = { epochs: e || Math.min(10, Math.ceil(100 / Math.ceil(30 / batch))), batch,
  lr_mult: m || 0.5, beta: beta || 0.1 };
const d = train('dpo', s.dir, 'prefs.jsonl', 30, dpo.epochs, dpo.batch, dpo.lr_mult,
  { method: 'dpo', dpo_beta: dpo.beta });
const after = count(d.dir);
const logs = d.events.filter((x) => x.event === 'log' && x.level === 'warn');
const steps = d.events.filter((x) => x.event === 'step')
  .map((x) => [x.step, +x.loss.toFixed(3), +x.reward_margin.toFixed(2), x.chosen_logp, x.rejected_logp]);
console.log(JSON.stringify({ dpo, steps: d.maxSteps, before, after, curve: steps,
  warnings: logs.map((x) => x.line), seconds: Math.round((Date.now() - started) / 1000) },
null, 1));
rmSync(dir, { recursive: true, force: true });
