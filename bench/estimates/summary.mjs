// summary.mjs - coverage and median width of real jobs' ranges (before the
// start, at 20% and at 50% of the steps), from the records real.mjs keeps.
//   node bench/estimates/summary.mjs DETAILS.json   (one summary per binary,
//   for a run that was stopped early too)
//
// The API gives a time range in whole seconds and a price range to 4
// decimals, each end rounded outward (docs/api.md), so a range of a few
// seconds or cents is wide by its units alone: "1 s to 3 s" for 1.4 to
// 2.2 s. Each block also says, under `resolved`, the same figures over
// the ranges whose low end is at least RESOLVED_S seconds (or
// RESOLVED_PRICE), where the rounding adds at most a tenth to either end.
import fs from 'node:fs';

export const RESOLVED_S = 10;
export const RESOLVED_PRICE = 0.001;

const median = (a) => {
  if (!a.length) return null;
  const s = [...a].sort((x, y) => x - y);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const share = (a, f) => (a.length ? a.filter(f).length / a.length : null);
export function summary(results) {
  const ok = results.filter((r) => r.status === 'succeeded' && r.high != null && r.low > 0);
  const priced = ok.filter((r) => r.price_high != null);
  const at = (k) => ok.filter((r) => r.at[k] && r.at[k].low > 0);
  const out = {
    jobs: results.length,
    succeeded: ok.length,
    load: { min: Math.min(...results.map((r) => r.load)), median: median(results.map((r) => r.load)),
      max: Math.max(...results.map((r) => r.load)) },
    before_start: {
      width: median(ok.map((r) => r.high / r.low)),
      coverage: share(ok, (r) => r.actual >= r.low && r.actual <= r.high),
      above: share(ok, (r) => r.actual > r.high),
      price_width: median(priced.filter((r) => r.price_low > 0).map((r) => r.price_high / r.price_low)),
      price_coverage: share(priced, (r) => r.paid >= r.price_low - 1e-9 && r.paid <= r.price_high + 1e-9),
    },
  };
  const t = ok.filter((r) => r.low >= RESOLVED_S);
  const p = priced.filter((r) => r.price_low >= RESOLVED_PRICE);
  out.before_start.resolved = {
    jobs: t.length, width: median(t.map((r) => r.high / r.low)),
    coverage: share(t, (r) => r.actual >= r.low && r.actual <= r.high),
    price_jobs: p.length, price_width: median(p.map((r) => r.price_high / r.price_low)),
    price_coverage: share(p, (r) => r.paid >= r.price_low - 1e-9 && r.paid <= r.price_high + 1e-9),
  };
  for (const [k, name] of [[0, 'at_20pct'], [1, 'at_50pct']]) {
    const block = (a) => ({ jobs: a.length, width: median(a.map((r) => r.at[k].high / r.at[k].low)),
      coverage: share(a, (r) => r.at[k].left >= r.at[k].low && r.at[k].left <= r.at[k].high) });
    const a = at(k);
    out[name] = { ...block(a), resolved: block(a.filter((r) => r.at[k].low >= RESOLVED_S)) };
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const all = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const bins = [...new Set(all.map((r) => r.bin ?? 'new'))];
  console.log(JSON.stringify(Object.fromEntries(bins.map((b) => [b, summary(all.filter((r) => (r.bin ?? 'new') === b))]))));
}
