// report.mjs - the Markdown table of a sample-task run.
//
//   node report.mjs RESULTS_JSON
//
// One row for the base model and one per fine-tuning run: wall time, final
// training loss, accuracy on the held-out set, and accuracy on each kind of
// held-out example (what the training set never showed).
import { readFileSync } from 'node:fs';

const r = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const kinds = Object.keys(r.before.held_out ?? {}).sort();
const frac = (a) => `${a.correct}/${a.total}`;
const cells = (acc) => [frac(acc), ...kinds.map((k) => (acc.held_out?.[k] ? frac(acc.held_out[k]) : ''))];
const head = ['model', 'precision', 'fine-tuning wall time', 'final loss', 'held-out accuracy',
  ...kinds.map((k) => `unseen ${k}`)];
const rows = [['base (no fine-tuning)', '', '', '', ...cells(r.before)]];
for (const run of r.runs)
  rows.push(['fine-tuned', run.precision, `${run.wall_s} s`, run.final_loss.toFixed(3), ...cells(run.after)]);
const line = (c) => `| ${c.join(' | ')} |`;
console.log(line(head));
console.log(line(head.map((_, i) => (i < 2 ? '---' : '---:'))));
for (const row of rows) console.log(line(row));
