// chart.js - the loss curve on the job page, drawn as SVG without libraries.
//
// lossGeometry() is pure (points in, coordinates and tick labels out) so it
// can be tested without a browser; renderLossChart() turns it into SVG
// elements inside a container the caller owns.

const SVG = 'http://www.w3.org/2000/svg';

// Plot area inside a fixed viewBox; the SVG scales to its container's width.
export const CHART = { width: 640, height: 260, left: 56, right: 24, top: 12, bottom: 36 };

// "Nice" tick values covering [lo, hi], about `count` of them.
export function niceTicks(lo, hi, count = 4) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw) ?? 10 * mag;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Number(v.toPrecision(12)));
  }
  return ticks;
}

// Coordinates for points [{step, loss}] on an x axis from 0 to the latest
// logged step and a y axis spanning the losses. The axis ends at the latest
// step, not at max_steps: early in a long job a full-length axis would press
// the curve into a vertical line; progress is shown by the bar instead.
// `maxSteps` is kept for callers and ignored when the latest step is known.
// `more` (optional) adds validation: { valid: [{step, loss}] (a batch's),
// full: [{step, loss}] (the whole set's, at epochs' ends), epochs: [step] }.
// Returns { path, validPath, fullPath, fullDots, validDots: [{x, y}], epochXs: [x],
// xTicks: [{x, label}], yTicks: [{y, label}], last: {x, y} } or null when
// there are fewer than two training points to draw a line through.
export function lossGeometry(points, maxSteps, more = {}) {
  if (!Array.isArray(points) || points.length < 2) return null;
  const c = CHART;
  const plotW = c.width - c.left - c.right;
  const plotH = c.height - c.top - c.bottom;
  const valid = (more.valid || []).filter((p) => p.step <= points[points.length - 1].step);
  const full = (more.full || []).filter((p) => p.step <= points[points.length - 1].step);
  const all = [...points, ...valid, ...full];
  const xMax = Math.max(points[points.length - 1].step, 1);
  let yMin = Math.min(...all.map((p) => p.loss));
  let yMax = Math.max(...all.map((p) => p.loss));
  if (yMax - yMin < 1e-6) {
    yMin -= 0.5;
    yMax += 0.5;
  }
  const pad = (yMax - yMin) * 0.08;
  yMin -= pad;
  yMax += pad;
  const sx = (step) => c.left + (step / xMax) * plotW;
  const sy = (loss) => c.top + (1 - (loss - yMin) / (yMax - yMin)) * plotH;
  const line = (ps) => ps
    .map((p, i) => `${i ? 'L' : 'M'}${sx(p.step).toFixed(1)},${sy(p.loss).toFixed(1)}`)
    .join(' ');
  const path = line(points);
  const validPath = valid.length ? line(valid) : '';
  const fullPath = full.length ? line(full) : '';
  const fullDots = full.map((p) => ({ x: sx(p.step), y: sy(p.loss) }));
  // a dot each, so that a single batch check is seen too
  const validDots = valid.map((p) => ({ x: sx(p.step), y: sy(p.loss) }));
  const epochXs = (more.epochs || []).filter((s) => s > 0 && s < xMax).map((s) => sx(s));
  const xTicks = niceTicks(0, xMax, 5)
    .filter((v) => Number.isInteger(v))
    .map((v) => ({ x: sx(v), label: String(v) }));
  const yTicks = niceTicks(yMin, yMax, 5).map((v) => ({ y: sy(v), label: String(v) }));
  const lastP = points[points.length - 1];
  return { path, validPath, fullPath, fullDots, validDots, epochXs, xTicks, yTicks,
    last: { x: sx(lastP.step), y: sy(lastP.loss) } };
}

function svgEl(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// Replaces the content of `box` with the curve for `points`. The SVG has an
// accessible name that states the first and latest loss, since a picture
// alone says nothing to a screen reader.
export function renderLossChart(box, points, maxSteps, more = {}) {
  const g = lossGeometry(points, maxSteps, more);
  box.replaceChildren();
  if (!g) {
    const p = document.createElement('p');
    p.className = 'muted';
    p.textContent = 'The loss curve appears once the log has two loss lines.';
    box.append(p);
    return;
  }
  const c = CHART;
  const first = points[0];
  const last = points[points.length - 1];
  const svg = svgEl('svg', {
    viewBox: `0 0 ${c.width} ${c.height}`,
    class: 'chart',
    role: 'img',
    'aria-label': `Training ${more.kind === 'reward' ? 'reward' : 'loss'} from step ${first.step} to step ${last.step}: ` +
      `${first.loss} at first, ${last.loss} at the latest step.` +
      (more.full?.length ? ` Full validation loss ${more.full[more.full.length - 1].loss} ` +
        `at step ${more.full[more.full.length - 1].step}.` : ''),
  });
  const axes = svgEl('g', { class: 'axes' });
  const plotBottom = c.height - c.bottom;
  for (const t of g.yTicks) {
    axes.append(svgEl('line', { x1: c.left, x2: c.width - c.right, y1: t.y, y2: t.y, class: 'grid' }));
    axes.append(svgEl('text', { x: c.left - 6, y: t.y + 4, 'text-anchor': 'end' }, t.label));
  }
  for (const t of g.xTicks) {
    axes.append(svgEl('line', { x1: t.x, x2: t.x, y1: plotBottom, y2: plotBottom + 4, class: 'tick' }));
    // A label at the right edge is right-aligned so that it is not cut off.
    const anchor = t.x > c.width - c.right - 20 ? 'end' : 'middle';
    axes.append(svgEl('text', { x: t.x, y: plotBottom + 18, 'text-anchor': anchor }, t.label));
  }
  axes.append(svgEl('line', { x1: c.left, x2: c.width - c.right, y1: plotBottom, y2: plotBottom, class: 'axis' }));
  axes.append(svgEl('text', { x: c.width - c.right, y: c.height - 2, 'text-anchor': 'end', class: 'label' }, 'step'));
  // epoch boundaries: dashed verticals where an epoch ended
  for (const x of g.epochXs) {
    axes.append(svgEl('line', { x1: x, x2: x, y1: c.top, y2: plotBottom, class: 'epoch' }));
  }
  svg.append(axes);
  svg.append(svgEl('path', { d: g.path, class: 'line' }));
  if (g.validPath) svg.append(svgEl('path', { d: g.validPath, class: 'line valid' }));
  if (g.fullPath) svg.append(svgEl('path', { d: g.fullPath, class: 'line full' }));
  for (const d of g.fullDots) svg.append(svgEl('circle', { cx: d.x, cy: d.y, r: 3, class: 'dot full' }));
  for (const d of g.validDots) svg.append(svgEl('circle', { cx: d.x, cy: d.y, r: 2.5, class: 'dot valid' }));
  svg.append(svgEl('circle', { cx: g.last.x, cy: g.last.y, r: 3.5, class: 'dot' }));
  box.append(svg);
  if (g.validPath || g.fullPath || g.epochXs.length) {
    const legend = document.createElement('p');
    legend.className = 'chart-legend muted';
    legend.append(...[['train', 'training loss'], ['valid', 'validation loss (a batch)'],
      ['full', 'full validation loss (each epoch)'], ['epoch', 'epoch boundary']]
      .map(([k, text]) => {
        const s = document.createElement('span');
        s.className = `key ${k}`;
        s.textContent = text;
        return s;
      }));
    box.append(legend);
  }
}
