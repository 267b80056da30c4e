// terms.mjs - each real job's range before the start, term by term, from
// the records real.mjs keeps (DETAILS=...): what the wait, the fixed costs
// and the training add to the parts' sum (its ends, and each term's share
// of high - low), how much the measured margin widened or narrowed that sum
// (range / sum, as a ratio of widths) and what whole seconds added.
//   node bench/estimates/terms.mjs DETAILS.json
import fs from 'node:fs';

const all = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const f = (x, d = 1) => (x == null ? '-' : Number(x).toFixed(d));
console.log('bin  load steps method   prec   basis     actual  shown         width | sum lo-hi      sum-w | wait% fixed% train% | margin  margin-x  round-x');
for (const r of all) {
  const t = r.terms;
  if (!t || !(r.low > 0)) continue;
  const slo = t.wait.low_s + t.fixed.low_s + t.training.low_s;
  const shi = t.wait.high_s + t.fixed.high_s + t.training.high_s;
  const span = shi - slo;
  const share = (x) => (span > 0 ? (100 * (x.high_s - x.low_s)) / span : 0);
  // the range before whole seconds: the sum widened by the margin about its centre
  const c = Math.sqrt(slo * shi), half = 0.5 * Math.log(shi / slo) + t.margin;
  const lo = c * Math.exp(-half), hi = c * Math.exp(half);
  console.log(`${r.bin.padEnd(4)} ${f(r.load).padStart(4)} ${String(r.steps).padStart(5)} ${String(r.method).padEnd(8)} ${String(r.precision).padEnd(6)} ${t.basis.padEnd(9)} ` +
    `${f(r.actual).padStart(6)}  [${r.low}, ${r.high}]`.padEnd(24) + ` ${f(r.high / r.low, 2).padStart(5)} | ` +
    `${f(slo)}-${f(shi)}`.padEnd(14) + ` ${f(shi / slo, 2).padStart(5)} | ${f(share(t.wait), 0).padStart(5)} ${f(share(t.fixed), 0).padStart(6)} ${f(share(t.training), 0).padStart(6)} | ` +
    `${f(t.margin, 3).padStart(6)}  ${f(hi / lo / (shi / slo), 2).padStart(8)}  ${f(r.high / r.low / (hi / lo), 2).padStart(7)}`);
}
